#!/usr/bin/env bash
# dev/cuda/07_rotary.cu on the GPU machine in one call: builds it (sm_90), prints its registers,
# runs every version at both shapes, then the block-shape sweep of versions 3 and 4. Exits
# non-zero when any version disagrees with the CPU reference. In OUT_DIR: ptxas.txt, run.txt,
# sweep.txt.
#
#   dev/cuda/07_rotary.sh OUT_DIR [--reps N]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: dev/cuda/07_rotary.sh OUT_DIR [--reps N]}
shift
mkdir -p "$out"
cd "$root"
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
bin=$(mktemp -d)/rotary
"$nvcc" -O3 -std=c++20 -arch=sm_90 --expt-relaxed-constexpr -I"$root" -Xptxas -v -o "$bin" dev/cuda/07_rotary.cu \
  2> "$out/ptxas.txt"
grep -E "Compiling|Used|spill" "$out/ptxas.txt" | sed 's/ptxas info *: //' || true
"$bin" "$@" | tee "$out/run.txt"
"$bin" --sweep "$@" | tee "$out/sweep.txt"
