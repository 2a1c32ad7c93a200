#!/usr/bin/env bash
# dev/cuda/04_attention_dq_ordered.cu on the GPU machine in one call: the host checks of its order
# and fragments, the build (ptxas registers / spills of every kernel to ptxas.txt), then the run
# (checks against the library's backward, then times) to dq_ordered.txt, all in OUT_DIR.
#
#   dev/cuda/04_attention_dq_ordered.sh OUT_DIR
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: dev/cuda/04_attention_dq_ordered.sh OUT_DIR}
mkdir -p "$out"
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
bin=$(mktemp -d)/attention_dq_ordered
python3 "$root/dev/cuda/04_attention_dq_ordered_order.py" | tee "$out/order.txt"
python3 "$root/dev/cuda/04_attention_dq_ordered_fragments.py" | tee -a "$out/order.txt"
"$nvcc" --version | tail -1 > "$out/ptxas.txt"
demangle=$(command -v c++filt || command -v cat)
"$nvcc" -O3 -std=c++20 -arch=sm_90 --expt-relaxed-constexpr -Xptxas -v -I"$root" -o "$bin" \
  "$root/dev/cuda/04_attention_dq_ordered.cu" 2>&1 | "$demangle" >> "$out/ptxas.txt"
{ nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader || true; } | tee "$out/dq_ordered.txt"
"$bin" | tee -a "$out/dq_ordered.txt"
