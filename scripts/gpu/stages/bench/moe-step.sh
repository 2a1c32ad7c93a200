# A mixture of experts' whole LoRA / QLoRA step (issue 49) against transformers + peft.
# gpt-oss-20b's shape (LAYERS of its 24 layers, the peak extrapolated to all) at 4 x 2048 tokens,
# LoRA and QLoRA; Qwen3-30B-A3B's (LAYERS of 48) QLoRA at 1 x 4096; transformers + peft (its eager
# experts, LoRA) on the same gpt-oss layers (at most TORCH_SECONDS, 300). Rows to
# <out>/moe_step.json (copy to bench/results/, then bench/make_results.py). Builds moe_step_bench in
# build-dir. Knobs: LAYERS (4). About 4 minutes after the build; TG_COMMIT names the commit.
set -uo pipefail
note_commit
layers=${LAYERS:-4}
configs=$root/tests/fixtures/hf/configs
part "build"
build_targets moe_step_bench > "$out/build.txt" 2>&1 || { tail -30 "$out/build.txt"; exit 1; }
parts=()
part "gpt-oss-20b, LoRA and QLoRA, 4 x 2048"
"$build/bench/moe_step_bench" --config-json "$configs/gpt-oss-20b.json" --layers "$layers" --batch 4 --seq 2048 \
  --json "$out/ours-gpt-oss.json" && parts+=("$out/ours-gpt-oss.json")
part "Qwen3-30B-A3B, QLoRA, 1 x 4096"
"$build/bench/moe_step_bench" --config-json "$configs/Qwen3-30B-A3B.json" --layers "$layers" --batch 1 --seq 4096 \
  --modes qlora --json "$out/ours-qwen3.json" && parts+=("$out/ours-qwen3.json")
part "transformers + peft, gpt-oss-20b"
timeout "${TORCH_SECONDS:-300}" python3 "$root/bench/torch_moe_step.py" --config-json "$configs/gpt-oss-20b.json" \
  --layers "$layers" --json "$out/torch.json" 2>&1 | grep -v Warning
[ -f "$out/torch.json" ] && parts+=("$out/torch.json")
merge_rows "$out/moe_step.json" "${parts[@]}"
part "done"
