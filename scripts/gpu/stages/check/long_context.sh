# Long sequences on one GPU (issue 53): offloaded checkpoints and the tiled MLP on the GPU, and a
# first look at the memory plan. About 3 minutes after the build; TG_COMMIT names the commit.
#   1. builds tapegrad_tests and long_context_bench;
#   2. the GPU tests: offloaded and plain checkpointing bitwise the same (Llama f32 / bf16, GPT-2
#      with dropout, backward(inputs=), retain_graph), the offloaded inputs off the device, the
#      tiled MLP against the untiled (LoRA on gate / up / down, fused, GeGLU, a checkpointed Llama)
#      and its peak, a packed row of 350,000 tokens against its documents alone (bf16, the band), with
#      every checkpoint test beside them (<out>/tests.txt);
#   3. the offload and tiled-MLP tests under compute-sanitizer memcheck (<out>/memcheck.txt);
#   4. long_context_bench on 2 and 4 of llama3-8b's layers at 16k-64k tokens, bf16 and NF4, with
#      and without offload: measured peaks beside the plan (<out>/long_context_layers.json).
set -uo pipefail
note_commit
part "build"
build_targets tapegrad_tests long_context_bench > "$out/build.txt" 2>&1 || { tail -30 "$out/build.txt"; exit 1; }

part "GPU tests"
gtest_step '*Checkpoint*:*TiledMlp*:LongContext*:MemoryPlan.*'

part "memcheck"
if command -v compute-sanitizer > /dev/null; then
  compute-sanitizer --tool memcheck --error-exitcode 99 --print-limit 20 "$build/tests/tapegrad_tests" \
    --gtest_filter='*CheckpointModels.Offload*/Cuda:*TiledMlp.*/Cuda' --gtest_brief=1 > "$out/memcheck.txt" 2>&1 \
    && echo "memcheck: clean" || { echo "memcheck: FAILED (see memcheck.txt)"; status=1; }
fi

part "long_context_bench, 2 and 4 layers"
parts=()
for layers in 2 4; do
  logged "long_context_${layers}l.txt" "$build/bench/long_context_bench" --config llama3-8b --layers "$layers" \
    --start 16384 --max-seq 65536 --budget-s 40 --json "$out/long_context_${layers}l.json"
  cat "$out/long_context_${layers}l.txt"
  [ -f "$out/long_context_${layers}l.json" ] && parts+=("$out/long_context_${layers}l.json")
done
[ ${#parts[@]} -gt 0 ] && merge_rows "$out/long_context_layers.json" "${parts[@]}" && rm -f "${parts[@]}"
part "done"
exit "$status"
