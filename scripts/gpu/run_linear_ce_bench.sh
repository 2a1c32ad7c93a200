#!/usr/bin/env bash
# The LM head's loss (linear + cross-entropy, fwd+bwd, bf16), tapegrad fused and unfused against
# PyTorch eager, torch.compile and Liger (when liger_kernel imports) in the same call (the GPU
# machine has PyTorch): rows to <results dir>/linear_ce.json and torch_linear_ce.json.
#   scripts/gpu/run_linear_ce_bench.sh <build dir> [results dir]     (default bench/results)
set -euo pipefail
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 <build dir> [results dir]" >&2
  exit 2
fi
build=$1
out=${2:-bench/results}
bench_dir=$(cd "$(dirname "$0")/../../bench" && pwd)
mkdir -p "$out"
"$build/bench/linear_ce_bench" --json "$out/linear_ce.json"
python3 "$bench_dir/torch_linear_ce_ref.py" --ours "$out/linear_ce.json" --out "$out/torch_linear_ce.json"
