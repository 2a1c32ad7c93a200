# Our GEMM and memory-bound (elementwise) benchmarks, then PyTorch on the same cases.
# Prints both tables and the comparison and writes <out>/{gemm,elementwise,torch_gemm_elementwise}.json
# (the rows of bench/results/). Uses the benchmarks built in build-dir.
set -uo pipefail
rc=0
"$build/bench/gemm_bench" "$out/gemm.csv" --json "$out/gemm.json" || rc=1
echo
"$build/bench/elementwise_bench" "$out/elementwise.csv" --json "$out/elementwise.json" || rc=1
echo
if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  python3 "$root/bench/torch_ref_gemm_elementwise.py" "$out/gemm.csv" "$out/elementwise.csv" \
    --json "$out/torch_gemm_elementwise.json" || rc=1
else
  echo "bench.sh gemm: no PyTorch with CUDA here: torch comparison skipped"
fi
exit $rc
