#!/usr/bin/env bash
# Attention forward / backward, tapegrad's flash kernels against PyTorch's SDPA backends in the
# same call (the GPU machine has PyTorch): rows to bench/results/attention.json.
#   bench/run_attention_bench.sh <build dir> [results json]
set -euo pipefail
build=$1
out=${2:-bench/results/attention.json}
commit=${TG_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
mkdir -p "$(dirname "$out")"
ours=$(mktemp)
"$build/bench/attention_bench" --json "$ours" --commit "$commit"
python3 "$(dirname "$0")/torch_attention_ref.py" --ours "$ours" --out "$out" --commit "$commit"
rm -f "$ours"
