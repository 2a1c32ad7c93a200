#!/usr/bin/env bash
# Runs our GEMM and memory-bound benchmarks, then PyTorch on the same cases; prints both tables and
# the comparison, and writes OUT_DIR/{gemm,elementwise,torch_gemm_elementwise}.json (the rows of
# bench/results/; to publish: cp OUT_DIR/*.json bench/results/ && python3 bench/make_results.py).
#   scripts/gpu/run_bench.sh [build-dir] [out-dir]      (defaults: build-gpu, build-gpu/bench-out)
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build-gpu}
out=${2:-$build/bench-out}
mkdir -p "$out"
rc=0
"$build/bench/gemm_bench" "$out/gemm.csv" --json "$out/gemm.json" || rc=1
echo
"$build/bench/elementwise_bench" "$out/elementwise.csv" --json "$out/elementwise.json" || rc=1
echo
if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  python3 "$root/bench/torch_ref_gemm_elementwise.py" "$out/gemm.csv" "$out/elementwise.csv" \
    --json "$out/torch_gemm_elementwise.json" || rc=1
else
  echo "run_bench: no PyTorch with CUDA here: torch comparison skipped"
fi
exit $rc
