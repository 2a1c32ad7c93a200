#!/usr/bin/env bash
# dev/cuda/06_cross_entropy_row_once.cu on the GPU machine in one call: builds it (nvcc -O3
# -arch=sm_90, OpenMP for the CPU reference) and runs the five shapes, then the sweep of cluster
# and block sizes. In OUT_DIR: ptxas.txt (registers and shared memory of every kernel),
# row_once.txt (checks and times), sweep.txt. Exits non-zero when a version mismatches.
#
#   dev/cuda/06_cross_entropy_row_once.sh OUT_DIR
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: dev/cuda/06_cross_entropy_row_once.sh OUT_DIR}
mkdir -p "$out"
cd "$root"
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
bin=$(mktemp -d)/ce_row_once
"$nvcc" -O3 -std=c++20 -arch=sm_90 --expt-relaxed-constexpr -Xcompiler -fopenmp -Xptxas -v -I"$root" -o "$bin" \
  dev/cuda/06_cross_entropy_row_once.cu -lgomp 2> "$out/ptxas.txt"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv | tee "$out/row_once.txt"
status=0
"$bin" 2>&1 | tee -a "$out/row_once.txt" || status=1
"$bin" --sweep --reps 30 2>&1 | tee "$out/sweep.txt" || status=1
exit $status
