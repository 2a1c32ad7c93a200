# FP8 base (issue 52): the FP8 tests on the GPU and the FP8 against bfloat16 GEMMs at 8B's shapes.
# About 2 minutes after the build-gpu tree's build (the targets below are rebuilt incrementally).
#  1. builds tapegrad_tests and fp8_bench;
#  2. the FP8 tests on the GPU: quantisation bytes against the CPU's, linear_fp8's FP8 forward and
#     dx GEMMs (cuBLASLt, 1x128 / 128x128 block scales) against dequantise-then-bfloat16 and the
#     CPU, the op harness's linear_fp8 case, LinearFp8 / LoRA on an FP8 base, and the QLoRA and
#     peft tests the shared quantised-base code touches;
#  3. bench/fp8_bench: bf16 vs FP8 forward, forward + dx and the bare GEMM at Llama-3.1-8B's
#     projection shapes, 8192 tokens.
# <out> gets tests.txt, build.log, fp8_bench.log and fp8_gemm.json (bench/results/fp8_gemm.json's rows).
set -uo pipefail
note_commit
logged build.log build_targets tapegrad_tests fp8_bench
[ $status -eq 0 ] || exit 1
gtest_step 'Fp8*:*LinearFp8*:Ops/OpTest.*/linear_fp8:Ops/OpTest.*/linear_4bit:Linear4bit*:NF4*:Qlora*:Peft*'
logged fp8_bench.log "$build/bench/fp8_bench" "$out/fp8_gemm.csv" --json "$out/fp8_gemm.json"
grep -v "^\[" "$out/fp8_bench.log" || true
exit $status
