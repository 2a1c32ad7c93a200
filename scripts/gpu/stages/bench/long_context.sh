# Long sequences on one GPU (issue 53): llama3-8b LoRA (bf16) and QLoRA (NF4), with and without
# offloaded checkpoints, batch 1 and T doubled from 16k until it does not fit or its configuration's
# time budget is spent; transformers + peft with gradient checkpointing in the same call; QLoRA at
# 4 x 2048 with and without offload (the 8 GiB target); QLoRA at 350k and LoRA at 128k tokens on 2
# of the 32 layers (with offload the GPU holds about two layers' checkpoints, so the peak grows with
# the layers only by their weights). Rows to <out>/long_context.json (copy to bench/results/, then
# bench/make_results.py). Builds long_context_bench in build-dir. Knobs: BUDGET_S (seconds of steps
# a configuration, 50), TG_LONG_TORCH=0 (no transformers rows). About 6 minutes.
set -uo pipefail
budget=${BUDGET_S:-50}
note_commit
part "build"
build_targets long_context_bench > "$out/build.txt" 2>&1 || { tail -30 "$out/build.txt"; exit 1; }
parts=()
run() {  # name, then long_context_bench flags
  local name=$1
  shift
  part "$name"
  "$build/bench/long_context_bench" --config llama3-8b "$@" --json "$out/lc-$name.json" 2>&1 | tee "$out/lc-$name.txt"
  [ -f "$out/lc-$name.json" ] && parts+=("$out/lc-$name.json")
}
run qlora-4x2048 --quant nf4 --offload false,true --batch 4 --start 2048 --max-seq 2048 --warmup 2
for quant in nf4 none; do
  run "$quant" --quant "$quant" --offload true,false --start 16384 --budget-s "$budget"
done
run qlora-350k-2l --quant nf4 --offload true --layers 2 --start 350000 --max-seq 350000 --warmup 0
run lora-128k-2l --quant none --offload true --layers 2 --start 131072 --max-seq 131072 --warmup 0
if [ "${TG_LONG_TORCH:-1}" != 0 ]; then
  part "transformers + peft"
  timeout 300 python3 bench/torch_long_context.py --budget-s "$budget" --json "$out/lc-torch.json" 2>&1 \
    | grep -v Warning | tee "$out/lc-torch.txt"
  [ -f "$out/lc-torch.json" ] && parts+=("$out/lc-torch.json")
fi
merge_rows "$out/long_context.json" "${parts[@]}"
part "done"
