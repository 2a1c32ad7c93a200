#!/usr/bin/env bash
# Installs tapegrad into a temporary prefix and builds examples/user_project against it with
# find_package(tapegrad), then runs its GoogleTest: docs/your-project.md.
# Usage: user_project_test.sh <source dir> <build dir>
set -euo pipefail
src=$1 build=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
# The package holds the public headers only: tapegrad.h reaches each one (testing/testing.h is
# tapegrad::testing's), and it compiles with the installed headers alone, so no public header
# includes an internal one.
inc=$work/prefix/include/tapegrad
deps=$(${CXX:-c++} -std=c++20 -MM -I"$inc" -x c++ "$inc/tapegrad.h" | tr -s ' \\\n' '\n\n\n')
unreached=$(cd "$inc" && find . -name '*.h' ! -path ./tapegrad.h ! -path ./testing/testing.h | sed 's|^\./||' |
  while read -r h; do grep -qxF "$inc/$h" <<<"$deps" || echo "$h"; done)
[ -z "$unreached" ] || { echo "installed but not reached from tapegrad.h (internal? then name it so):" $unreached >&2; exit 1; }
echo "installed headers: $(cd "$inc" && find . -name '*.h' | wc -l), every one reached from tapegrad.h"
cmake -S "$src/examples/user_project" -B "$work/b" -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/b" -j2 >/dev/null
"$work/b/public_ops"
# docs/huggingface.md's fine-tune of a Hugging Face folder, on the tiny Llama fixture and a small task.
folder=${TG_TOKENIZER_FIXTURES:-$src/tests/fixtures/tokenizers}/tiny_llama
for i in $(seq 1 60); do
  echo "{\"prompt\": \"Q: what does bob like?\\nA:\", \"completion\": \" bob likes blue.\"}"
done >"$work/train.jsonl"
"$work/b/finetune_folder" "$folder" "$work/train.jsonl" "$work" >"$work/finetune.log"
grep -q "^step 0 loss" "$work/finetune.log" && [ -f "$work/adapter/adapter_model.safetensors" ] || {
  echo "finetune_folder: no loss or no adapter" >&2
  cat "$work/finetune.log" >&2
  exit 1
}
echo "finetune_folder: $(head -1 "$work/finetune.log"), then $(sed -n 3p "$work/finetune.log"); adapter written"
# The README's train::Trainer script: trains, evaluates, saves the adapter, one checkpoint kept.
"$work/b/trainer_script" "$folder" "$work/train.jsonl" "$work/trainer" >"$work/trainer.log"
grep -q "^trained 30 steps" "$work/trainer.log" && [ -f "$work/trainer/adapter_model.safetensors" ] &&
  [ -f "$work/trainer/checkpoint-30/training_state.safetensors" ] && [ ! -e "$work/trainer/checkpoint-15" ] || {
  echo "trainer_script: no 30 steps, adapter or checkpoint-30 alone" >&2
  cat "$work/trainer.log" >&2
  exit 1
}
echo "trainer_script: $(grep '^trained' "$work/trainer.log")"
# docs/preference.md's scripts: DPO on preference pairs, GRPO with a C++ reward function.
"$work/b/dpo_script" "$folder" "$src/tests/fixtures/preference/pairs.jsonl" "$work/dpo" >"$work/dpo.log"
grep -q "^eval: loss" "$work/dpo.log" && [ -f "$work/dpo/adapter_model.safetensors" ] || {
  echo "dpo_script: no evaluation or no adapter" >&2
  cat "$work/dpo.log" >&2
  exit 1
}
echo "dpo_script: $(grep '^eval:' "$work/dpo.log")"
"$work/b/grpo_script" "$folder" "$src/tests/fixtures/preference/prompts.jsonl" "$work/grpo" >"$work/grpo.log"
grep -q "^trained 12 steps: reward" "$work/grpo.log" && [ -f "$work/grpo/adapter_model.safetensors" ] || {
  echo "grpo_script: no 12 steps or no adapter" >&2
  cat "$work/grpo.log" >&2
  exit 1
}
echo "grpo_script: $(grep '^trained' "$work/grpo.log")"
if [ -x "$work/b/gate_test" ]; then
  "$work/b/gate_test" --gtest_brief=1
else
  echo "tapegrad::testing was not exported (GoogleTest came from sources); built lora_script only"
fi
