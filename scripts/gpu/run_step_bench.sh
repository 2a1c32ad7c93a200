#!/usr/bin/env bash
# A training step of the toy transformer, tapegrad vs the PyTorch reference, on the same 2 CPU
# cores in the same call (the CPU speed target). Needs PyTorch (the GPU machine has it).
#   scripts/gpu/run_step_bench.sh <build dir> <path to torch_toy_lora.py> [config]
# The reference script lives in ../shared/reference/; carry a copy to the GPU machine.
set -euo pipefail
build=$1 ref=$2 config=${3:-tiny}
cores=${CORES:-0,1}
echo "== tapegrad ($config, 2 threads on cores $cores)"
OMP_NUM_THREADS=2 taskset -c "$cores" "$build/bench/train_step_bench" --config "$config" --threads 2 --steps 20
echo "== PyTorch reference (llama-$config, 2 threads on cores $cores)"
taskset -c "$cores" python3 "$ref" --configs "llama-$config" --device cpu --threads 2 --exec eager \
  --precs fp32 --attns sdpa --n-warm 3 --n-time 20 --out "${OUT:-/tmp}" | grep -E "^(llama|TOY|config)"
