# Attention: cuDNN's path beside the flash kernels: build, tests, memcheck, bench, a llama-1b step.
# Stage arguments: some of these steps (default: all):
#   build     configure build-dir (with cuDNN when found) and build tapegrad_tests, attention_bench,
#             train_step_bench -> build.txt;
#   tests     the attention tests (cuDNN's and the flash kernels, the op harness's sdpa cases, the
#             CUDA graph steps, mixed precision, checkpointing's bitwise steps) -> tests.txt;
#   memcheck  compute-sanitizer memcheck over the cuDNN tests and a flash one -> memcheck.txt;
#   bench     scripts/gpu/bench.sh attention: the cuDNN (deterministic and not) and flash paths beside
#             PyTorch's SDPA backends -> attention.json, torch_attention.json, bench.txt;
#   step      train_step_bench llama-1b LoRA bf16, eager and CUDA graph, cuDNN on and off -> step.txt.
# About 3 min to build, 2 for tests, 2 for memcheck, 2 for bench, 1.5 for step on an H200. TG_COMMIT
# names the commit in the rows.
set -euo pipefail
steps=${*:-build tests memcheck bench step}
has() { [[ " $steps " == *" $1 "* ]]; }

if has build; then
  echo "== build"
  build_targets tapegrad_tests attention_bench train_step_bench >"$out/build.txt"
  grep '^cuDNN:' "$out/build.txt"
fi

if has tests; then
  echo "== tests"
  gtest_step 'Attention*:Ops/OpTest.CudaMatchesCpu/sdpa*:CudaGraph*:MixedPrecisionTest.*:*Checkpoint*'
fi

if has memcheck; then
  echo "== memcheck"
  filter='AttentionCudnn.MatchesFloat64AtEveryHeadDim:AttentionCudnn.ValuesOfAnotherHeadDim:AttentionCudnn.EveryMask*'
  filter+=':AttentionCudnn.CudaGraph*:AttentionCudnn.ACapture*:AttentionCuda.FlashMatchesFloat64OnShortSequences'
  if compute-sanitizer --tool memcheck --error-exitcode 1 "$build/tests/tapegrad_tests" --gtest_filter="$filter" \
       > "$out/memcheck.txt" 2>&1; then
    echo "memcheck: clean"
  else
    echo "memcheck: FAILED (see $out/memcheck.txt)"
    status=1
  fi
fi

if has bench; then
  echo "== bench"
  scripts/gpu/bench.sh attention "$build" "$out" | tee "$out/bench.txt"
fi

if has step; then
  echo "== step: llama-1b LoRA bf16, cuDNN on / off, eager / graph"
  for cudnn in true false; do
    for graph in false true; do
      "$build/bench/train_step_bench" --config llama-1b --device cuda --dtype bf16 --modes lora --warmup 2 --steps 8 \
        --cudnn-sdp "$cudnn" --cuda-graph "$graph" | sed "s/^/cudnn-sdp=$cudnn graph=$graph  /"
    done
  done | tee "$out/step.txt"
fi
exit $status
