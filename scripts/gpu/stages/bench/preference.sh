# Issue 50: a LoRA DPO step and GRPO's rollouts, against transformers + peft in the same call.
# About 5 minutes, the build included. TG_COMMIT names the commit in the rows.
# 1. builds dpo_step_bench;
# 2. the DPO step (llama-1b's shape, bf16 base, 4 pairs of 2 x 1024 tokens, prompts of 512): the
#    reference in the step and reference-free, against bench/torch_preference_bench.py
#    (transformers + peft, TRL's loss from its definitions, eager and torch.compile);
# 3. GRPO's rollouts (dpo_step_bench --mode rollout: 8 prompts x 8 generations, 128 + 256 tokens,
#    LoRA not merged; dynamic cache and CUDA graph) against transformers' generate at the batch.
# <out> gets dpo_step.json, grpo_rollout.json (copy them to bench/results/, then run
# python3 bench/make_results.py) and build.log. TG_TORCH_BUDGET_S (300) bounds each PyTorch part.
set -euo pipefail
note_commit
part "1. build"
build_targets dpo_step_bench >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
part "2. the DPO step"
dpo=(--config llama-1b --pairs 4 --seq 1024 --prompt 512)
"$build/bench/dpo_step_bench" "${dpo[@]}" --device cuda --dtype bf16 --json "$tmp/ours_dpo.json"
"$build/bench/dpo_step_bench" "${dpo[@]}" --device cuda --dtype bf16 --reference none --json "$tmp/ours_dpo_free.json"
# torch.compile may take minutes to compile: the rows written before a timeout are kept.
timeout "${TG_TORCH_BUDGET_S:-300}" python3 "$root/bench/torch_preference_bench.py" --mode dpo "${dpo[@]}" \
  --out "$tmp/torch_dpo.json" || echo "PyTorch's DPO step: stopped (rc $?); keeping its rows so far"
part "3. GRPO's rollouts"
rollout=(--config llama-1b --prompts 8 --generations 8 --new-tokens 256)
for cache in dynamic graph; do
  "$build/bench/dpo_step_bench" --mode rollout "${rollout[@]}" --prompt 128 --cache "$cache" --device cuda \
    --dtype bf16 --warmup 1 --runs 3 --json "$tmp/ours_rollout_$cache.json"
done
timeout "${TG_TORCH_BUDGET_S:-300}" python3 "$root/bench/torch_preference_bench.py" --mode rollout "${rollout[@]}" \
  --rollout-prompt 128 --out "$tmp/torch_rollout.json" || echo "transformers' generate: stopped (rc $?)"
shopt -s nullglob
merge_rows "$out/dpo_step.json" "$tmp"/*dpo*.json
merge_rows "$out/grpo_rollout.json" "$tmp"/*rollout*.json
cat "$out/dpo_step.json" "$out/grpo_rollout.json"
