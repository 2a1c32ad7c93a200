# cuDNN for the fused attention path (ops/cuda/attention_cudnn.cu): the CUDA toolkit's, or the one
# at -DTG_CUDNN_ROOT=<folder with include/cudnn.h and lib/libcudnn.so*>, e.g. PyTorch's
# nvidia-cudnn wheel: python3 -c 'import nvidia.cudnn; print(nvidia.cudnn.__path__[0])'.
# TG_CUDNN: AUTO (use it when found), ON (required), OFF (the flash kernels serve every call).
set(TG_CUDNN AUTO CACHE STRING "Attention through cuDNN: AUTO (when found), ON or OFF")
set_property(CACHE TG_CUDNN PROPERTY STRINGS AUTO ON OFF)
set(TG_CUDNN_ROOT "" CACHE PATH "A folder with include/cudnn.h and lib/libcudnn.so* (e.g. the nvidia-cudnn wheel's)")
set(TG_WITH_CUDNN OFF)
if(NOT TG_CUDNN STREQUAL "OFF")
  find_path(TG_CUDNN_INCLUDE_DIR cudnn.h HINTS ${TG_CUDNN_ROOT}/include ${CUDAToolkit_INCLUDE_DIRS})
  # The wheel has only libcudnn.so.9 (no libcudnn.so link).
  find_library(TG_CUDNN_LIBRARY NAMES cudnn libcudnn.so.9
    HINTS ${TG_CUDNN_ROOT}/lib ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib ${CUDAToolkit_LIBRARY_DIR}/../lib)
  if(TG_CUDNN_INCLUDE_DIR AND TG_CUDNN_LIBRARY)
    file(STRINGS ${TG_CUDNN_INCLUDE_DIR}/cudnn_version.h TG_CUDNN_MAJOR REGEX "^#define CUDNN_MAJOR [0-9]+")
    string(REGEX MATCH "[0-9]+$" TG_CUDNN_MAJOR "${TG_CUDNN_MAJOR}")
    if(TG_CUDNN_MAJOR GREATER_EQUAL 9)
      set(TG_WITH_CUDNN ON)
      target_include_directories(tapegrad PRIVATE ${TG_CUDNN_INCLUDE_DIR})
      target_link_libraries(tapegrad PRIVATE ${TG_CUDNN_LIBRARY})
      target_compile_definitions(tapegrad PRIVATE TG_WITH_CUDNN)
    elseif(TG_CUDNN STREQUAL "ON")
      message(FATAL_ERROR "TG_CUDNN=ON but ${TG_CUDNN_INCLUDE_DIR}/cudnn.h is cuDNN ${TG_CUDNN_MAJOR}: wants cuDNN 9 (its backend graph API)")
    endif()
  elseif(TG_CUDNN STREQUAL "ON")
    message(FATAL_ERROR "TG_CUDNN=ON but cudnn.h / libcudnn were not found: set -DTG_CUDNN_ROOT=<folder with include/ and lib/>")
  endif()
endif()
message(STATUS "tapegrad: cuDNN (attention) ${TG_WITH_CUDNN} ${TG_CUDNN_LIBRARY}")
