# NCCL for distributed/ (data parallelism). The CUDA toolkit may ship it; on the GPU machine it is
# in PyTorch's nvidia-nccl wheel: -DTG_NCCL_ROOT=$(python3 -c 'import nvidia.nccl; print(nvidia.nccl.__path__[0])').
# TG_NCCL: AUTO (use it when found), ON (required), OFF (distributed::init then says so).
include(${CMAKE_CURRENT_LIST_DIR}/tapegradOptionalLib.cmake)
# The wheel has only libnccl.so.2 (no libnccl.so link).
tg_find_optional_library(NCCL "Data parallelism over NCCL" nccl.h nccl libnccl.so.2)
set(TG_WITH_NCCL ${TG_NCCL_FOUND})
if(TG_WITH_NCCL)
  target_sources(tapegrad PRIVATE ${PROJECT_SOURCE_DIR}/distributed/nccl_communicator.cu)
  target_include_directories(tapegrad PRIVATE ${TG_NCCL_INCLUDE_DIR})
  target_link_libraries(tapegrad PRIVATE ${TG_NCCL_LIBRARY})
  target_compile_definitions(tapegrad PRIVATE TG_WITH_NCCL)
endif()
message(STATUS "tapegrad: NCCL (data parallelism) ${TG_WITH_NCCL} ${TG_NCCL_LIBRARY}")
