# The decoder stack's families: their tests with the CUDA cases, then the transformers round trip.
# About 4 minutes (build 2.5, tests 1, round trip 0.5):
#  1. builds tapegrad_tests and the programs they run, interop_dump;
#  2. runs the tests of every family on the stack, their GPU cases included (fixtures against
#     transformers + peft on CUDA, packing, checkpointing, generation, the user family, init);
#  3. tests/interop/check_family_roundtrip.py: save_pretrained folders and adapters of every
#     fixture family read back by transformers + peft.
# Logs under out; exit status 1 when a step failed (the others still run).
set -uo pipefail
logged build.log build_targets tapegrad_tests interop_dump
[ $status -eq 0 ] || exit 1
filter='HfFixtures*:*Cuda*:*Gpu*:*Gemma*:*Phi3*:*Llama*:*Packing*:*Checkpoint*:*Generation*:UserFamily*:NnTest*:Init*:*Peft*'
logged tests.log bash -c "cd '$build' && ./tests/tapegrad_tests --gtest_filter='$filter'"
grep -E "PASSED|FAILED|SKIPPED \]" "$out/tests.log" | head -40
logged roundtrip.log python3 tests/interop/check_family_roundtrip.py "$build"
exit $status
