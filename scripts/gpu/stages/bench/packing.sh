# Packing without cross-talk: a LoRA step on the chat length mix, packed separately, packed, padded.
# bf16 base, float32 adapters, bench-135m (head dim 64) and llama-1b (head dim 128) at seq 2048,
# eager and replayed as a CUDA graph: rows to <out>/packing.json. Uses packing_bench built in
# build-dir.
set -euo pipefail
parts=()
for config in bench-135m llama-1b; do
  for graph in false true; do
    part="$out/packing-$config-$graph.json"
    "$build/bench/packing_bench" --config "$config" --seq 2048 --batch 4 --conversations 10000 --device cuda \
      --dtype bf16 --warmup 3 --steps 10 --cuda-graph "$graph" \
      --lengths "$root/tests/fixtures/chat_dataset/expected.json" --json "$part"
    parts+=("$part")
  done
done
merge_rows "$out/packing.json" "${parts[@]}"
rm -f "${parts[@]}"
