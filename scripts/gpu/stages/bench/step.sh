# The bench-135m training step on the GPU against PyTorch eager and torch.compile in the same call.
# bench/torch_toy_lora.py is the reference model: bf16 LoRA and full (also with
# --gradient-checkpointing, and replayed as a CUDA graph), float32 LoRA. Rows to
# <out>/train_step-h200-{bf16,bf16-ckpt,bf16-graph,f32}.json and torch_train_step-h200.json
# (TG_STEP_TORCH=0: ours only, PyTorch's rows kept as they are).
set -euo pipefail
tmp=$(mktemp -d)
"$build/bench/train_step_bench" --config bench-135m --device cuda --dtype bf16 --warmup 5 --steps 20 \
  --json "$out/train_step-h200-bf16.json"
"$build/bench/train_step_bench" --config bench-135m --device cuda --dtype bf16 --warmup 5 --steps 20 \
  --gradient-checkpointing --json "$out/train_step-h200-bf16-ckpt.json"
"$build/bench/train_step_bench" --config bench-135m --device cuda --dtype bf16 --warmup 5 --steps 20 \
  --cuda-graph true --json "$out/train_step-h200-bf16-graph.json"
"$build/bench/train_step_bench" --config bench-135m --device cuda --dtype f32 --warmup 1 --steps 3 --modes lora \
  --json "$out/train_step-h200-f32.json"
[ "${TG_STEP_TORCH:-1}" = 0 ] && exit 0
python3 "$root/bench/torch_toy_lora.py" --configs llama-bench-135m --precs bf16 --modes full,lora --attns sdpa \
  --exec eager,compile --n-warm 3 --n-time 10 --budget-s 220 --out "$tmp" --jsonl torch.jsonl | grep -E "^(llama|TOY|config)" || true
python3 "$root/bench/torch_toy_lora.py" --configs llama-bench-135m --precs fp32 --modes lora --attns sdpa \
  --exec eager --n-warm 2 --n-time 5 --budget-s 60 --out "$tmp" --jsonl torch.jsonl | grep -E "^(llama|TOY|config)" || true
python3 "$root/bench/torch_step_rows.py" "$tmp/torch.jsonl" "$out/torch_train_step-h200.json"
cat "$out/torch_train_step-h200.json"
