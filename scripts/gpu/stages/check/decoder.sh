# The decoder stack's families: their tests with the CUDA cases, then the transformers round trip.
# About 4 minutes (build 2.5, tests 1, round trip 0.5); FIXTURES="smollm3 olmo2" in the environment
# writes those families' fixtures first:
#  1. builds tapegrad_tests and the programs they run, interop_dump;
#  2. with FIXTURES, tests/fixtures/hf/make_family_fixtures.py writes them, copied to out/fixtures
#     (commit them into tests/fixtures/hf);
#  3. runs the tests of every family on the stack, their GPU cases included (fixtures against
#     transformers + peft on CUDA, packing, checkpointing, generation, the user family, init);
#  4. tests/interop/check_family_roundtrip.py: save_pretrained folders and adapters of every
#     fixture family read back by transformers + peft.
# Logs under out; exit status 1 when a step failed (the others still run).
set -uo pipefail
logged build.log build_targets tapegrad_tests interop_dump
[ $status -eq 0 ] || exit 1
read -ra fixtures <<<"${FIXTURES:-}"
if [ ${#fixtures[@]} -gt 0 ]; then
  logged fixtures.log python3 tests/fixtures/hf/make_family_fixtures.py "${fixtures[@]}"
  mkdir -p "$out/fixtures"
  for f in "${fixtures[@]}"; do
    cp -r "tests/fixtures/hf/$f" "tests/fixtures/hf/${f}_adapter" "tests/fixtures/hf/${f}_expected.safetensors" "$out/fixtures/"
  done
fi
filter='HfFixtures*:*Cuda*:*Gpu*:*Gemma*:*Phi3*:*Llama*:*Packing*:*Checkpoint*:*Generation*:UserFamily*:NnTest*:Init*:*Peft*'
filter+=':DenseFamilies*:LoraFinetune.RealTokenizer*'
logged tests.log bash -c "cd '$build' && ./tests/tapegrad_tests --gtest_filter='$filter'"
grep -E "PASSED|FAILED|SKIPPED \]" "$out/tests.log" | head -40
logged roundtrip.log python3 tests/interop/check_family_roundtrip.py "$build"
exit $status
