# QLoRA on one GPU: its tests, LoRA rows beside QLoRA twins up to llama3-70b, PyTorch, loads.
# About 7 minutes, the build included. TG_COMMIT names the commit in the rows.
# 1. builds tapegrad_tests, interop_dump, train_step_bench and load_bench;
# 2. the QLoRA tests on the GPU (NF4.*, Linear4bitTest.* with the GPU quantisation against the CPU's
#    bytes, Qlora*, the checkpoint tests), after tests/fixtures/qlora/make_fixtures.py wrote the
#    peft fixture (copied to <out>/qlora-expected.safetensors: commit it as
#    tests/fixtures/qlora/expected.safetensors);
# 3. train_step_bench --qlora, bf16, gradient checkpointing: each LoRA row beside its QLoRA twin,
#    with the memory breakdown: llama3-8b at 4 x 2048 (and 2 x 2048), llama-1b at 4 x 2048, the
#    llama3-70b shape with 2 and 4 of its 80 layers at 1 x 2048 and 4 x 2048, extrapolated to 80
#    (the 4-layer rows check the extrapolation);
# 4. bench/torch_lora_ckpt_ref.py: PyTorch's bf16 LoRA with checkpointing at 4 x 2048 (llama3-8b,
#    llama-1b; no bitsandbytes there, so no PyTorch QLoRA row);
# 5. load_bench llama-1b: from_pretrained bf16 against quantising as it streams, CPU and GPU.
# <out> gets four files (a device call returns few): train_step-h200-qlora.json
# (bench/real_step_rows.py), load-qlora.json, qlora-expected.safetensors and log.txt (every part's
# full output; build.log too when the build fails).
# Knobs: STEPS (timed steps, 5), TG_QLORA_TORCH=0 (no PyTorch rows), LOAD_DIR (/tmp/tg_load_bench).
set -uo pipefail
steps=${STEPS:-5}
tmp=$(mktemp -d)
note_commit

part "build"
build_targets tapegrad_tests interop_dump train_step_bench load_bench >"$tmp/build.log" 2>&1 ||
  { cp "$tmp/build.log" "$out/build.log"; tail -30 "$out/build.log"; exit 1; }
log="$out/log.txt"

part "peft fixture (tests/fixtures/qlora/make_fixtures.py) and the GPU tests"
python3 tests/fixtures/qlora/make_fixtures.py && cp tests/fixtures/qlora/expected.safetensors "$out/qlora-expected.safetensors"
(cd "$build" && ./tests/tapegrad_tests --gtest_brief=1 \
  --gtest_filter='NF4.*:Linear4bitTest.*:Qlora*:*Checkpoint*:Hf*:Peft*') >"$tmp/tests.log" 2>&1
tail -15 "$tmp/tests.log"
{ echo "== tests"; cat "$tmp/tests.log"; } >>"$log"

bench=("$build/bench/train_step_bench" --device cuda --dtype bf16 --modes lora --qlora true
       --gradient-checkpointing true --warmup 2 --steps "$steps")
ours=()
measure() {  # name, then train_step_bench flags
  local name=$1
  shift
  part "tapegrad $name"
  if "${bench[@]}" "$@" --real-json "$tmp/$name.json" >"$tmp/$name.log" 2>&1; then
    ours+=("$tmp/$name.json")
  else
    echo "$name: FAILED"
  fi
  grep -E "quantised|memory|extrapolated|cuda |error" "$tmp/$name.log"
  { echo "== $name"; cat "$tmp/$name.log"; } >>"$log"
}
measure llama3-8b-4x2048 --config llama3-8b --batch 4 --seq 2048
measure llama3-8b-2x2048 --config llama3-8b --batch 2 --seq 2048
measure llama-1b-4x2048 --config llama-1b --batch 4 --seq 2048
for layers in 2 4; do
  for batch in 1 4; do
    measure "llama3-70b-${layers}l-${batch}x2048" --config llama3-70b --layers "$layers" --batch "$batch" --seq 2048 \
      --extrapolate-layers 80
  done
done

torch_args=()
if [ "${TG_QLORA_TORCH:-1}" != 0 ]; then
  part "PyTorch bf16 LoRA with checkpointing (llama3-8b, llama-1b at 4 x 2048)"
  (cd "$root/bench" && timeout 240 python3 torch_lora_ckpt_ref.py --configs llama3-8b,llama-1b --batch 4 --seq 2048 \
    --n-warm 2 --n-time "$steps" --jsonl "$tmp/torch.jsonl") 2>&1 | tee -a "$log" | grep -v Warning
  [ -f "$tmp/torch.jsonl" ] && torch_args=(--torch "$tmp/torch.jsonl")
fi
python3 "$root/bench/real_step_rows.py" "$out/train_step-h200-qlora.json" "${ours[@]}" "${torch_args[@]}"

part "load_bench llama-1b: bf16 against NF4 while streaming"
"$build/bench/load_bench" --config llama-1b --dir "${LOAD_DIR:-/tmp/tg_load_bench}/llama-1b" --devices cpu,cuda \
  --quant none,nf4 --json "$out/load-qlora.json" 2>&1 | tee -a "$log"
part "done"
