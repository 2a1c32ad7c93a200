# CUDA graph capture: the graph tests, steps and examples eager against captured, generate's caches.
#   1. the graph tests (replayed LoRA / full steps bitwise the eager ones, the pool, the refusals,
#      the replayed decode step bitwise the static-cache one), AdamW's, index_copy_'s and
#      generation's GPU tests, the graph and index_copy_ tests also under compute-sanitizer;
#   2. train_step_bench, bench-135m bf16, LoRA and full: eager and --cuda-graph in the same call
#      (rows to <out>/train_step_graph.json);
#   3. the examples with the graph on and off: the same losses (toy_transformer, to a tolerance)
#      and the same adapter bytes (lora_finetune);
#   4. generate_bench, bench-135m bf16, prompt 128, 256 new tokens, batch 1 and 32: the dynamic
#      cache, the static one and the static one with the decode step replayed as a CUDA graph
#      (rows to <out>/generate_graph.json).
# TG_COMMIT names the commit in the rows.
set -euo pipefail
build_targets tapegrad_tests train_step_bench lora_finetune toy_transformer generate_bench

echo "== 1. tests"
filter='CudaGraph*:OptimTest.*AdamW*:MixedPrecisionTest.*:IndexCopy*:KVCache*:Generate*'
"$build/tests/tapegrad_tests" --gtest_filter="$filter" 2>&1 | tee "$out/tests.txt" | grep -E '^\[  (PASSED|FAILED|SKIPPED) '
if command -v compute-sanitizer >/dev/null; then
  compute-sanitizer --tool memcheck --error-exitcode 1 "$build/tests/tapegrad_tests" --gtest_filter='CudaGraph*:IndexCopy*:GenerateCuda.GraphReplayed*' \
    > "$out/memcheck.txt" 2>&1 && echo "memcheck: clean" || { echo "memcheck: FAILED (see $out/memcheck.txt)"; exit 1; }
fi

echo "== 2. train_step_bench, eager then captured"
for graph in false true; do
  "$build/bench/train_step_bench" --config bench-135m --device cuda --dtype bf16 --modes lora,full --warmup 3 \
    --steps 20 --cuda-graph "$graph" --json "$out/train_step_graph_$graph.json"
done
merge_rows "$out/train_step_graph.json" "$out/train_step_graph_false.json" "$out/train_step_graph_true.json"

echo "== 3. examples, graph on and off"
for graph in true false; do
  "$build/examples/toy_transformer" --device cuda --pretrain-steps 40 --lora-steps 40 --sample-bytes 8 \
    --cuda-graph "$graph" --out "$out/toy_$graph" > "$out/toy_$graph.txt"
  "$build/examples/lora_finetune" --device cuda --base "$out/toy_true/base.safetensors" --steps 30 --warmup 5 \
    --eval-every 10 --save-every 10 --sample-tokens 4 --cuda-graph "$([ "$graph" = true ] && echo on || echo off)" \
    --out "$out/lora_$graph" > "$out/lora_$graph.txt"
done
# Pre-training updates the embedding with float32 atomics (repeated bytes): two runs differ in
# the last bits with or without a graph, so the toy's losses are compared to a tolerance; the
# LoRA runs (embedding frozen) must give the same bytes.
python3 - "$out" <<'PY'
import csv, sys
out = sys.argv[1]
for phase in ("pretrain", "lora"):
    rows = [[r for r in csv.DictReader(open(f"{out}/toy_{g}/{phase}/log.csv")) if r["loss"]] for g in ("true", "false")]
    worst = max(abs(float(a["loss"]) - float(b["loss"])) / max(1e-9, abs(float(b["loss"]))) for a, b in zip(*rows))
    print(f"toy_transformer {phase}: {len(rows[0])} logged steps, largest relative loss difference graph vs eager {worst:.2e}")
    if len(rows[0]) != len(rows[1]) or worst > 1e-2:
        sys.exit("toy_transformer: the graph's losses are not the eager ones")
PY
if cmp -s "$out/lora_true/adapter/adapter_model.safetensors" "$out/lora_false/adapter/adapter_model.safetensors"; then
  echo "lora_finetune: the same adapter bytes with and without the graph"
else
  echo "lora_finetune: the adapters DIFFER with the graph"; exit 1
fi
grep -h "CUDA graph" "$out/lora_true.txt"

echo "== 4. generate_bench: dynamic, static, static + graph"
"$build/bench/generate_bench" --config bench-135m --device cuda --dtype bf16 --batches 1,32 --prompt 128 \
  --new-tokens 256 --caches dynamic,static,graph --json "$out/generate_graph.json"
echo "rows: $out/train_step_graph.json, $out/generate_graph.json (copy to bench/results/, then python3 bench/make_results.py)"
