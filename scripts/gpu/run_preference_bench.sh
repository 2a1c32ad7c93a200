#!/usr/bin/env bash
# Issue 50's rows on the GPU in one call: a LoRA DPO step (bench/dpo_step_bench: llama-1b's shape,
# bf16 base, 4 pairs of 2 x 1024 tokens, the reference in the step) against transformers + peft
# with TRL's loss (bench/torch_preference_bench.py, eager and torch.compile), and GRPO's rollouts
# (dpo_step_bench --mode rollout: 8 prompts x 8 generations, 128 + 256 tokens, LoRA not merged) against
# transformers' generate at the same batch. Rows to <results dir>/dpo_step.json and grpo_rollout.json
# (then python3 bench/make_results.py).
#   TG_COMMIT=<commit> scripts/gpu/run_preference_bench.sh <build dir> [results dir]
set -euo pipefail
build=$1
out=${2:-bench/results}
bench_dir=$(cd "$(dirname "$0")/../../bench" && pwd)
tmp=$(mktemp -d)
mkdir -p "$out"
dpo=(--config llama-1b --pairs 4 --seq 1024 --prompt 512)
"$build/bench/dpo_step_bench" "${dpo[@]}" --device cuda --dtype bf16 --json "$tmp/ours_dpo.json"
"$build/bench/dpo_step_bench" "${dpo[@]}" --device cuda --dtype bf16 --reference none --json "$tmp/ours_dpo_free.json"
# torch.compile may take minutes to compile: the rows written before a timeout are kept.
timeout "${TG_TORCH_BUDGET_S:-600}" python3 "$bench_dir/torch_preference_bench.py" --mode dpo "${dpo[@]}" \
  --out "$tmp/torch_dpo.json" || echo "PyTorch's DPO step: stopped (rc $?); keeping its rows so far"
rollout=(--config llama-1b --prompts 8 --generations 8 --new-tokens 256)
for cache in dynamic graph; do
  "$build/bench/dpo_step_bench" --mode rollout "${rollout[@]}" --prompt 128 --cache "$cache" --device cuda \
    --dtype bf16 --warmup 1 --runs 3 --json "$tmp/ours_rollout_$cache.json"
done
timeout "${TG_TORCH_BUDGET_S:-600}" python3 "$bench_dir/torch_preference_bench.py" --mode rollout "${rollout[@]}" \
  --rollout-prompt 128 --out "$tmp/torch_rollout.json" || echo "transformers' generate: stopped (rc $?)"
python3 - "$tmp" "$out" <<'PY'
import glob, json, os, sys
tmp, out = sys.argv[1:]
for name, pattern in (("dpo_step", "*dpo*.json"), ("grpo_rollout", "*rollout*.json")):
    rows = [r for path in sorted(glob.glob(os.path.join(tmp, pattern))) for r in json.load(open(path))]
    dest = os.path.join(out, name + ".json")
    with open(dest + ".tmp", "w") as f:
        f.write("[\n" + ",\n".join("  " + json.dumps(r) for r in rows) + "\n]\n")
    os.replace(dest + ".tmp", dest)
    print(open(dest).read())
PY
