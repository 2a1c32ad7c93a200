#!/usr/bin/env bash
# Issue 35's decoder stack on the GPU machine, in one call from the repo root (about 4 minutes:
# build 2.5, tests 1, round trip 0.5):
#   [FIXTURES="smollm3 olmo2"] OUT=<dir> scripts/gpu/decoder_check.sh
#  1. builds build-gpu (CUDA, Release): tapegrad_tests and the programs they run, interop_dump;
#  2. with FIXTURES, writes those families' fixtures with transformers + peft
#     (tests/fixtures/hf/make_family_fixtures.py) and copies them to $OUT/fixtures: commit them
#     into tests/fixtures/hf;
#  3. runs the tests of every family on the stack, their GPU cases included (fixtures against
#     transformers + peft on CUDA, packing, checkpointing, generation, the user family, init);
#  4. tests/interop/check_family_roundtrip.py: save_pretrained folders and adapters of every
#     fixture family read back by transformers + peft.
# Logs under $OUT; exit status 1 when a step failed (the others still run).
set -uo pipefail
out=${OUT:-out/decoder_check}
build=${BUILD_DIR:-build-gpu}
mkdir -p "$out"
status=0
run() {  # run <log name> <command...>: the command's output to $out/<log>, its verdict on stdout
  local log=$1
  shift
  if "$@" >"$out/$log" 2>&1; then echo "ok   $log"; else echo "FAIL $log (tail below)"; tail -40 "$out/$log"; status=1; fi
}
[ -f "$build/build.ninja" ] || cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTG_CUDA=ON >"$out/cmake.log"
run build.log cmake --build "$build" -j"$(nproc)" --target tapegrad_tests interop_dump
[ $status -eq 0 ] || exit 1
read -ra fixtures <<<"${FIXTURES:-}"
if [ ${#fixtures[@]} -gt 0 ]; then
  run fixtures.log python3 tests/fixtures/hf/make_family_fixtures.py "${fixtures[@]}"
  mkdir -p "$out/fixtures"
  for f in "${fixtures[@]}"; do
    cp -r "tests/fixtures/hf/$f" "tests/fixtures/hf/${f}_adapter" "tests/fixtures/hf/${f}_expected.safetensors" "$out/fixtures/"
  done
fi
filter='HfFixtures*:*Cuda*:*Gpu*:*Gemma*:*Phi3*:*Llama*:*Packing*:*Checkpoint*:*Generation*:UserFamily*:NnTest*:Init*:*Peft*'
filter+=':DenseFamilies*:LoraFinetune.RealTokenizer*'
run tests.log bash -c "cd '$build' && ./tests/tapegrad_tests --gtest_filter='$filter'"
grep -E "PASSED|FAILED|SKIPPED \]" "$out/tests.log" | head -40
run roundtrip.log python3 tests/interop/check_family_roundtrip.py "$build"
exit $status
