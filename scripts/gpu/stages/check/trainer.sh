# The programs over train::Trainer on the GPU: lora_finetune, toy_transformer, generate --chat.
# About 6 minutes, most of it the build. <out> gets a few text files (build.log, tests.txt, the
# runs' logs); the runs work in a temporary folder.
# 1. configures build-dir (with NCCL when the toolkit or PyTorch's wheel has it) and builds only
#    what it runs;
# 2. the Trainer, lora_finetune and generate tests (they run the examples on the GPU: CUDA graph
#    auto, bit-exact resumes, --chat) and the examples' ctests;
# 3. lora_finetune on a Hugging Face fixture, f32 and --dtype bf16 (the Trainer's cast), the step
#    captured and eager: the same adapter bytes, finite losses;
# 4. scripts/gpu/check.sh dp's lora step: one process against one launched rank, a resume across
#    world sizes, --full bf16 (needs NCCL; skipped without it).
set -euo pipefail
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "== 1. configure + build"
build_targets tapegrad_tests lora_finetune toy_transformer generate launch >"$out/build.log" 2>&1 ||
  { tail -40 "$out/build.log"; exit 1; }

echo "== 2. tests on the GPU"
"$build/tests/tapegrad_tests" --gtest_filter='Trainer.*:LoraFinetune*:*LoraFinetuneHf*:GenerateExample.*:DistributedInit.*' \
  >"$out/tests.txt" 2>&1 || { grep -E "Failure|FAILED|Expected|Which" "$out/tests.txt" | head -60; exit 1; }
grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/tests.txt"
ctest --test-dir "$build" -R 'Examples\.(LoraFinetune|Bf16|Toy)' --output-on-failure | tail -4

echo "== 3. lora_finetune on a fixture folder: graph on and off, f32 and bf16"
data=$work/train.jsonl
for i in $(seq 0 119); do
  echo "{\"prompt\": \"Q: what does person $((i % 5)) like?\\nA:\", \"completion\": \" colour $((i * 7 % 4)).\"}"
done >"$data"
folder=$root/tests/fixtures/tokenizers/tiny_llama
for dtype in f32 bf16; do
  for graph in on off; do
    "$build/examples/lora_finetune" --base "$folder" --data "$data" --device cuda --dtype "$dtype" --cuda-graph "$graph" \
      --steps 30 --warmup 3 --batch 4 --seq 48 --lr 1e-2 --log-every 1 --eval-every 10 --sample-tokens 4 \
      --out "$work/lora_${dtype}_$graph" >"$out/lora_${dtype}_$graph.txt"
  done
  grep -h "training:" "$out/lora_${dtype}_on.txt"
  cmp "$work/lora_${dtype}_on/adapter/adapter_model.safetensors" "$work/lora_${dtype}_off/adapter/adapter_model.safetensors"
  awk -F, 'NR > 1 { v = $3 != "" ? $3 : $7; if (v != v + 0 || v ~ /nan|inf/) bad = 1 } END { exit bad }' \
    "$work/lora_${dtype}_on/log.csv"
  echo "$dtype: the same adapter bytes with and without the graph; $(tail -1 "$work/lora_${dtype}_on/log.csv")"
done

echo "== 4. data parallelism (scripts/gpu/check.sh dp, its lora step)"
if built_with_nccl; then
  scripts/gpu/check.sh dp "$build" "$work/dp" lora
else
  echo "skipped: no NCCL on this machine"
fi
echo "check.sh trainer: all passed"
