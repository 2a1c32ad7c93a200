# A mixture-of-experts block's experts, forward + backward in bf16, against a loop and PyTorch.
# Qwen3-30B-A3B's layer (hidden 2048, moe_intermediate 768, 128 experts, top 8) at 4096 and 16384
# tokens, Mixtral-8x7B's (4096, 14336, 8 experts, top 2) at 4096; LoRA on the frozen experts
# (peft's target_parameters) and full training. bench/moe_bench: nn::SparseMoeBlock (grouped_mm)
# and the same block as a per-expert loop of ordinary GEMMs; bench/torch_moe_ref.py in the same
# call: transformers' Qwen3MoeSparseMoeBlock (+ peft) with its eager and grouped_mm experts, and
# grouped_mm under torch.compile (at most TORCH_SECONDS, default 360: the cases done by then keep
# their rows). Rows to <out>/moe.json (copy to bench/results/, then bench/make_results.py); the
# printed tables to <out>/moe_ours.txt and <out>/torch_moe.txt. About 5 minutes after the build.
# Builds moe_bench in build-dir.
set -euo pipefail
note_commit
build_targets moe_bench
"$build/bench/moe_bench" --json "$out/moe_ours.json" | tee "$out/moe_ours.txt"
timeout "${TORCH_SECONDS:-360}" python3 "$root/bench/torch_moe_ref.py" --ours "$out/moe_ours.json" \
  --out "$out/torch_moe.json" | tee "$out/torch_moe.txt" || echo "torch_moe_ref.py stopped early: the rows written so far are kept"
parts=("$out/moe_ours.json")
[ -f "$out/torch_moe.json" ] && parts+=("$out/torch_moe.json")
merge_rows "$out/moe.json" "${parts[@]}"
rm -f "${parts[@]}"
