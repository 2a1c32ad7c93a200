# A training step of the toy transformer on 2 CPU cores, tapegrad against PyTorch in the same call.
# The CPU speed target; needs PyTorch (the GPU machine has it). Stage arguments: [config]
# (tiny) [reference script] (bench/torch_toy_lora.py); CORES (0,1) picks the cores.
set -euo pipefail
config=${1:-tiny} ref=${2:-$root/bench/torch_toy_lora.py}
cores=${CORES:-0,1}
echo "== tapegrad ($config, 2 threads on cores $cores)"
OMP_NUM_THREADS=2 taskset -c "$cores" "$build/bench/train_step_bench" --config "$config" --threads 2 --steps 20
echo "== PyTorch reference (llama-$config, 2 threads on cores $cores)"
taskset -c "$cores" python3 "$ref" --configs "llama-$config" --device cpu --threads 2 --exec eager \
  --precs fp32 --attns sdpa --n-warm 3 --n-time 20 --out "$out" | grep -E "^(llama|TOY|config)"
