# cuDNN for the fused attention path (ops/cuda/attention_cudnn.cu): the CUDA toolkit's, or the one
# at -DTG_CUDNN_ROOT=<folder with include/cudnn.h and lib/libcudnn.so*>, e.g. PyTorch's
# nvidia-cudnn wheel: python3 -c 'import nvidia.cudnn; print(nvidia.cudnn.__path__[0])'.
# TG_CUDNN: AUTO (use it when found), ON (required), OFF (the flash kernels serve every call).
include(${CMAKE_CURRENT_LIST_DIR}/tapegradOptionalLib.cmake)
# The wheel has only libcudnn.so.9 (no libcudnn.so link).
tg_find_optional_library(CUDNN "Attention through cuDNN" cudnn.h cudnn libcudnn.so.9)
set(TG_WITH_CUDNN OFF)
if(TG_CUDNN_FOUND)
  file(STRINGS ${TG_CUDNN_INCLUDE_DIR}/cudnn_version.h TG_CUDNN_MAJOR REGEX "^#define CUDNN_MAJOR [0-9]+")
  string(REGEX MATCH "[0-9]+$" TG_CUDNN_MAJOR "${TG_CUDNN_MAJOR}")
  if(TG_CUDNN_MAJOR GREATER_EQUAL 9)  # the backend graph API's attention graphs
    set(TG_WITH_CUDNN ON)
    target_include_directories(tapegrad PRIVATE ${TG_CUDNN_INCLUDE_DIR})
    target_link_libraries(tapegrad PRIVATE ${TG_CUDNN_LIBRARY})
    target_compile_definitions(tapegrad PRIVATE TG_WITH_CUDNN)
  elseif(TG_CUDNN STREQUAL "ON")
    message(FATAL_ERROR "TG_CUDNN=ON but ${TG_CUDNN_INCLUDE_DIR}/cudnn.h is cuDNN ${TG_CUDNN_MAJOR}: wants cuDNN 9")
  endif()
endif()
message(STATUS "tapegrad: cuDNN (attention) ${TG_WITH_CUDNN} ${TG_CUDNN_LIBRARY}")
