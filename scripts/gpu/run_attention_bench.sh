#!/usr/bin/env bash
# Attention forward / backward, tapegrad's flash kernels against PyTorch's SDPA backends in the
# same call (the GPU machine has PyTorch): rows to bench/results/attention.json and
# bench/results/torch_attention.json.
#   scripts/gpu/run_attention_bench.sh <build dir> [results dir]
set -euo pipefail
build=$1
out=${2:-bench/results}
bench_dir=$(cd "$(dirname "$0")/../../bench" && pwd)
mkdir -p "$out"
"$build/bench/attention_bench" --json "$out/attention.json"
python3 "$bench_dir/torch_attention_ref.py" --ours "$out/attention.json" --out "$out/torch_attention.json"
