#!/usr/bin/env bash
# examples/preference_finetune as a user runs it, on the tiny Llama fixture (random weights) and
# tests/fixtures/preference/: each method trains, logs TRL's metrics and writes the adapter; a DPO
# run extended from 3 steps to 6 ends bit for bit as the uninterrupted one. Usage: example_preference_test.sh <src> <build>
set -euo pipefail
src=$1 bin=$2/examples
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
base=$src/tests/fixtures/tokenizers/tiny_llama data=$src/tests/fixtures/preference
common=(--base "$base" --device cpu --lr 1e-2 --batch 2 --log-every 1 --save-every 3 --max-length 32)
run() {  # run <name> <metric the log must hold> <flags...>
  local name=$1 metric=$2
  shift 2
  "$bin/preference_finetune" "${common[@]}" --out "$work/$name" "$@" >"$work/$name.log"
  grep -q "\"$metric\"" "$work/$name/log.jsonl" && [ -f "$work/$name/adapter_model.safetensors" ] || {
    echo "$name: no $metric logged or no adapter" >&2
    cat "$work/$name.log" >&2
    exit 1
  }
  echo "$name: $(grep '^trained' "$work/$name.log")"
}
run dpo rewards/accuracies --method dpo --data "$data/pairs.jsonl" --val "$data/pairs.jsonl" --steps 6
run ipo rewards/margins --method ipo --data "$data/pairs.jsonl" --steps 2
run simpo rewards/accuracies --method simpo --data "$data/pairs.jsonl" --steps 2
run orpo log_odds_ratio --method orpo --data "$data/pairs.jsonl" --steps 2
run kto kl --method kto --data "$data/labelled.jsonl" --steps 2
run grpo reward --method grpo --data "$data/prompts.jsonl" --reward 'regex:a' --num-generations 2 \
  --max-completion-length 4 --batch 4 --beta 0.04 --steps 2
# 3 steps, then extended to 6 (a constant schedule: max_steps does not change it): the adapter of
# the uninterrupted run
"$bin/preference_finetune" "${common[@]}" --out "$work/halves" --method dpo --data "$data/pairs.jsonl" --steps 3 \
  --lr-scheduler constant >/dev/null
"$bin/preference_finetune" "${common[@]}" --out "$work/halves" --method dpo --data "$data/pairs.jsonl" --steps 6 \
  --lr-scheduler constant --resume >/dev/null
"$bin/preference_finetune" "${common[@]}" --out "$work/straight" --method dpo --data "$data/pairs.jsonl" --steps 6 \
  --lr-scheduler constant >/dev/null
cmp "$work/straight/adapter_model.safetensors" "$work/halves/adapter_model.safetensors"
echo "dpo resumed at step 3: the uninterrupted run's adapter, byte for byte"
