#!/usr/bin/env bash
# The bench-135m training step on the GPU, tapegrad against PyTorch eager and torch.compile in the
# same call (bench/torch_toy_lora.py, the reference model): bf16 LoRA and full, float32 LoRA.
# Rows to bench/results/train_step.json (bench/step_rows.py).
#   bench/run_step_gpu.sh <build dir> [results json]
set -euo pipefail
build=$1
out=${2:-bench/results/train_step.json}
here=$(cd "$(dirname "$0")" && pwd)
commit=${TG_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
tmp=$(mktemp -d)
"$build/bench/train_step_bench" --config bench-135m --device cuda --dtype bf16 --warmup 5 --steps 20 | tee "$tmp/bf16.txt"
"$build/bench/train_step_bench" --config bench-135m --device cuda --dtype f32 --warmup 2 --steps 5 --modes lora | tee "$tmp/f32.txt"
python3 "$here/torch_toy_lora.py" --configs llama-bench-135m --precs bf16 --modes full,lora --attns sdpa \
  --exec eager,compile --n-warm 3 --n-time 10 --budget-s 240 --out "$tmp" --jsonl torch.jsonl | grep -E "^(llama|TOY|config)" || true
python3 "$here/torch_toy_lora.py" --configs llama-bench-135m --precs fp32 --modes lora --attns sdpa \
  --exec eager --n-warm 2 --n-time 5 --budget-s 60 --out "$tmp" --jsonl torch.jsonl | grep -E "^(llama|TOY|config)" || true
mkdir -p "$(dirname "$out")"
python3 "$here/step_rows.py" --ours "$tmp/bf16.txt" "$tmp/f32.txt" --torch "$tmp/torch.jsonl" \
  --machine "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" --commit "$commit" --out "$out"
