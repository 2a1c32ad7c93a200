# Packing without cross-talk: the banded kernels' GPU tests, packing_bench, memcheck, emulation.
# The most wanted first: a run cut short keeps what it wrote to <out>. TG_COMMIT names the commit
# in the rows.
#   1. builds tapegrad_tests, packing_bench, flash_emulation_tests;
#   2. the GPU tests of the band: the banded flash kernels against float64 (documents, windows,
#      shared bands, more / fewer keys), each gradient mask bitwise, the op cases (CUDA vs CPU,
#      banded and rotary with per-sequence tables), every family's packed batch against its
#      documents alone in bf16, the Trainer's CUDA graph replaying position ids;
#   3. scripts/gpu/bench.sh packing: <out>/packing.json (copy to bench/results/);
#   4. the banded GPU tests under compute-sanitizer memcheck;
#   5. FlashEmulation.* (the kernels under CPU emulation, as ctest runs it).
set -euo pipefail
build_targets tapegrad_tests packing_bench flash_emulation_tests > "$out/build.txt" 2>&1 \
  || { tail -30 "$out/build.txt"; exit 1; }

echo "== 2. GPU tests"
gpu='AttentionCuda.*:PackingCuda.*:Ops/OpTest.CudaMatchesCpu/banded*:Ops/OpTest.CudaMatchesCpu/apply_rotary*:Ops/OpTest.CudaMatchesCpu/sdpa*:Trainer.CudaGraph*'
cpu='BandedAttention.*:Packing.*:Rotary.*:Attention.*:Trainer.*:Dataset.*'
"$build/tests/tapegrad_tests" --gtest_filter="$gpu:$cpu" > "$out/tests.txt" 2>&1 || true
grep -E '^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]' "$out/tests.txt" || tail -20 "$out/tests.txt"

echo "== 3. packing_bench"
scripts/gpu/bench.sh packing "$build" "$out" > "$out/packing_bench.txt" 2>&1 || echo "packing_bench: FAILED"
cat "$out/packing_bench.txt"

echo "== 4. memcheck"
if command -v compute-sanitizer > /dev/null; then
  compute-sanitizer --tool memcheck --error-exitcode 99 --print-limit 20 "$build/tests/tapegrad_tests" \
    --gtest_filter='AttentionCuda.Banded*:PackingCuda.*:Ops/OpTest.CudaMatchesCpu/banded*:Ops/OpTest.CudaMatchesCpu/apply_rotary_per*' \
    --gtest_brief=1 > "$out/memcheck.txt" 2>&1 && echo "memcheck: clean" || echo "memcheck: FAILED (see memcheck.txt)"
fi

echo "== 5. FlashEmulation"
"$build/tests/flash_emulation_tests" > "$out/flash_emulation.txt" 2>&1 && echo "all ok" || tail -5 "$out/flash_emulation.txt"
