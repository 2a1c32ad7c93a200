# NCCL for distributed/ (data parallelism). The CUDA toolkit may ship it; on the GPU machine it is
# in PyTorch's nvidia-nccl wheel: -DTG_NCCL_ROOT=$(python3 -c 'import nvidia.nccl; print(nvidia.nccl.__path__[0])').
# TG_NCCL: AUTO (use it when found), ON (required), OFF (distributed::init then says so).
set(TG_NCCL AUTO CACHE STRING "Data parallelism over NCCL: AUTO (when found), ON or OFF")
set_property(CACHE TG_NCCL PROPERTY STRINGS AUTO ON OFF)
set(TG_NCCL_ROOT "" CACHE PATH "A folder with include/nccl.h and lib/libnccl.so* (e.g. the nvidia-nccl wheel's)")
set(TG_WITH_NCCL OFF)
if(NOT TG_NCCL STREQUAL "OFF")
  find_path(TG_NCCL_INCLUDE_DIR nccl.h HINTS ${TG_NCCL_ROOT}/include ${CUDAToolkit_INCLUDE_DIRS})
  # The wheel has only libnccl.so.2 (no libnccl.so link).
  find_library(TG_NCCL_LIBRARY NAMES nccl libnccl.so.2
    HINTS ${TG_NCCL_ROOT}/lib ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib ${CUDAToolkit_LIBRARY_DIR}/../lib)
  if(TG_NCCL_INCLUDE_DIR AND TG_NCCL_LIBRARY)
    set(TG_WITH_NCCL ON)
    target_sources(tapegrad PRIVATE ${PROJECT_SOURCE_DIR}/distributed/nccl_communicator.cu)
    target_include_directories(tapegrad PRIVATE ${TG_NCCL_INCLUDE_DIR})
    target_link_libraries(tapegrad PRIVATE ${TG_NCCL_LIBRARY})
    target_compile_definitions(tapegrad PRIVATE TG_WITH_NCCL)
  elseif(TG_NCCL STREQUAL "ON")
    message(FATAL_ERROR "TG_NCCL=ON but nccl.h / libnccl were not found: set -DTG_NCCL_ROOT=<folder with include/ and lib/>")
  endif()
endif()
message(STATUS "tapegrad: NCCL (data parallelism) ${TG_WITH_NCCL} ${TG_NCCL_LIBRARY}")
