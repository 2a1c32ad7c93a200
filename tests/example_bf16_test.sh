#!/usr/bin/env bash
# The examples with --dtype bf16 (bfloat16 base, float32 LoRA) on the CPU: a few steps run, the
# logged losses are finite, the adapter and the merged model are written.
# Usage: example_bf16_test.sh <build dir>
set -euo pipefail
bin=$1/examples
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
small=(--batch 2 --seq 32 --eval-batches 1)
"$bin/toy_transformer" --pretrain-steps 2 --lora-steps 2 --sample-bytes 1 --dtype bf16 "${small[@]}" \
  --out "$work/toy" >/dev/null
"$bin/lora_finetune" --base "$work/toy/base.safetensors" --steps 6 --warmup 2 --eval-every 3 --dtype bf16 --merge \
  --log-every 1 "${small[@]}" --out "$work/lora" >"$work/log.txt"
# log.csv: step,epoch,loss,...,eval_loss (7th),...: each row's loss a finite number
if awk -F, 'NR > 1 { v = $3 != "" ? $3 : $7; if (v != v + 0 || v ~ /nan|inf/) bad = 1; n++ } END { exit bad || n != 8 }' \
     "$work/lora/log.csv" &&
   [ -f "$work/lora/adapter/adapter_model.safetensors" ] && [ -f "$work/lora/merged.safetensors" ]; then
  echo "bf16: $(($(wc -l <"$work/lora/log.csv") - 1)) finite losses, adapter and merged model written"
else
  echo "bf16: bad losses or missing outputs" >&2
  cat "$work/lora/log.csv" "$work/log.txt" >&2
  exit 1
fi
