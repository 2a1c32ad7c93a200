# Norm and linear backward benchmarks (owned by the norms work; included from bench/CMakeLists.txt).
#   norm_bench    RMSNorm / LayerNorm backward, every mask variant, vs copy bandwidth
#   linear_bench  linear backward, full vs frozen weight (needs the CUDA GEMM backend)
# scripts/gpu/bench.sh norm runs them and bench/torch_norm_ref.py (PyTorch on the same cases).
if(TG_WITH_CUDA)
  add_executable(norm_bench ${CMAKE_CURRENT_LIST_DIR}/norm_bench.cu)
  target_link_libraries(norm_bench PRIVATE tapegrad CUDA::cudart)
  tg_bench_target(norm_bench)
  if(EXISTS ${PROJECT_SOURCE_DIR}/ops/cuda/gemm.cu)
    add_executable(linear_bench ${CMAKE_CURRENT_LIST_DIR}/linear_bench.cu)
    target_link_libraries(linear_bench PRIVATE tapegrad CUDA::cudart)
    tg_bench_target(linear_bench)
  endif()
endif()
