#!/usr/bin/env bash
# Runs the norm benchmarks on the GPU machine and puts PyTorch's numbers beside ours (and
# writes OUT_DIR/table.md, the table of bench/RESULTS.md):
#   bench/norm_run.sh [BUILD_DIR] [OUT_DIR]      (defaults: build, bench-out)
# Builds norm_bench (and linear_bench when the CUDA GEMM exists) in BUILD_DIR first.
set -euo pipefail
build=${1:-build}
out=${2:-bench-out}
mkdir -p "$out"
cmake --build "$build" --target norm_bench
"$build"/bench/norm_bench --csv "$out/norm.csv" | tee "$out/norm.txt"
if cmake --build "$build" --target linear_bench 2>/dev/null; then
  "$build"/bench/linear_bench | tee "$out/linear.txt"
fi
if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  PYTHONUNBUFFERED=1 python3 "$(dirname "$0")/torch_norm_ref.py" --ours "$out/norm.csv" --csv "$out/torch.csv" | tee "$out/torch.txt"
  # The RESULTS.md table, each row naming the targets it misses.
  python3 "$(dirname "$0")/norm_table.py" "$out/norm.csv" "$out/torch.csv" > "$out/table.md"
  tail -n 1 "$out/table.md"
else
  echo "norm_run: no PyTorch with CUDA here: skipped bench/torch_norm_ref.py"
fi
