#!/usr/bin/env bash
# lora_finetune stopped at step 6 and resumed (also with --gradient-checkpointing) must log
# exactly the losses of an uninterrupted run of 12 steps. Usage: example_resume_test.sh <build dir>
set -euo pipefail
bin=$1/examples
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A base checkpoint: two steps of pre-training are enough to test resuming.
"$bin/toy_transformer" --pretrain-steps 2 --lora-steps 1 --eval-batches 1 --sample-bytes 1 --out "$work/toy" >/dev/null
common=(--base "$work/toy/base.safetensors" --steps 12 --warmup 3 --batch 2 --seq 32 --eval-every 4 --eval-batches 1
        --log-every 1)
"$bin/lora_finetune" "${common[@]}" --out "$work/straight" >/dev/null
"$bin/lora_finetune" "${common[@]}" --out "$work/resumed" --stop-at 6 >/dev/null
"$bin/lora_finetune" "${common[@]}" --out "$work/resumed" --resume >/dev/null
# --gradient-checkpointing may change on resume: it changes no bit of the training.
"$bin/lora_finetune" "${common[@]}" --out "$work/resumed-ckpt" --stop-at 6 >/dev/null
"$bin/lora_finetune" "${common[@]}" --out "$work/resumed-ckpt" --resume --gradient-checkpointing >/dev/null
# log.csv: every column but tokens_per_second (the 6th), which differs run to run
for run in resumed resumed-ckpt; do
  if diff <(cut -d, -f1-5,7- "$work/straight/log.csv") <(cut -d, -f1-5,7- "$work/$run/log.csv"); then
    echo "$run: identical losses over $(($(wc -l <"$work/straight/log.csv") - 1)) logged rows"
  else
    echo "$run: losses differ from the uninterrupted run" >&2
    exit 1
  fi
  cmp "$work/straight/adapter/adapter_model.safetensors" "$work/$run/adapter/adapter_model.safetensors"
  cmp "$work/straight/loss.svg" "$work/$run/loss.svg"
done
