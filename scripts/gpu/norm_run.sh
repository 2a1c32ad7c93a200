#!/usr/bin/env bash
# The norm and linear backward benchmarks with PyTorch timed in the same call, on the GPU machine:
#   scripts/gpu/norm_run.sh [BUILD_DIR] [OUT_DIR]      (defaults: build, bench-out)
# Writes OUT_DIR/{norm,linear,torch_norm}.json (the rows of bench/results/) and the printed tables;
# to publish them: cp OUT_DIR/*.json bench/results/ && python3 bench/make_results.py
set -euo pipefail
bench_dir=$(cd "$(dirname "$0")/../../bench" && pwd)
build=${1:-build}
out=${2:-bench-out}
mkdir -p "$out"
cmake --build "$build" --target norm_bench
"$build"/bench/norm_bench --csv "$out/norm.csv" --json "$out/norm.json" | tee "$out/norm.txt"
if cmake --build "$build" --target linear_bench 2>/dev/null; then
  "$build"/bench/linear_bench --json "$out/linear.json" | tee "$out/linear.txt"
fi
if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  PYTHONUNBUFFERED=1 python3 "$bench_dir/torch_norm_ref.py" --ours "$out/norm.csv" --json "$out/torch_norm.json" \
    | tee "$out/torch.txt"
else
  echo "norm_run: no PyTorch with CUDA here: skipped bench/torch_norm_ref.py"
fi
