#!/usr/bin/env bash
# Issue 34's checks on the GPU machine, in one call from the repo root (about 6 minutes):
#   TG_COMMIT=<commit> OUT=<dir> scripts/gpu/load_check.sh
#  1. builds build-gpu (CUDA, Release): tapegrad_tests and the programs they run, interop_dump, load_bench;
#  2. writes the RoPE fixtures llama_yarn, phi3_longrope and phi3_longrope_short with transformers +
#     peft (tests/fixtures/hf/make_family_fixtures.py) and copies them to $OUT/fixtures: commit them
#     into tests/fixtures/hf;
#  3. runs the tests this work touches, on the GPU as well (loading, fixtures, RoPE, init, generation)
#     and tests/interop/check_family_roundtrip.py on the new fixtures;
#  4. dev/load/fault_probe on a 3.2 GB shard (what first-touch page faults cost on this machine) and
#     scripts/gpu/run_load_bench.sh llama-1b (load and construct rows; llama3-8b is a call of its own:
#     OUT=<dir> scripts/gpu/run_load_bench.sh llama3-8b, about 4 minutes).
# Logs and rows under $OUT; exit status 1 when a step failed (the others still run).
set -uo pipefail
out=${OUT:-out/load_check}
build=${BUILD_DIR:-build-gpu}
mkdir -p "$out"
status=0
run() {  # run <log name> <command...>: the command's output to $out/<log>, its verdict on stdout
  local log=$1
  shift
  if "$@" >"$out/$log" 2>&1; then echo "ok   $log"; else echo "FAIL $log (tail below)"; tail -40 "$out/$log"; status=1; fi
}
[ -f "$build/build.ninja" ] || cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTG_CUDA=ON >"$out/cmake.log"
run build.log cmake --build "$build" -j"$(nproc)" --target tapegrad_tests interop_dump load_bench
[ $status -eq 0 ] || exit 1
fixtures=(llama_yarn phi3_longrope phi3_longrope_short)
run fixtures.log python3 tests/fixtures/hf/make_family_fixtures.py "${fixtures[@]}"
mkdir -p "$out/fixtures"
for f in "${fixtures[@]}"; do
  cp -r "tests/fixtures/hf/$f" "tests/fixtures/hf/${f}_adapter" "tests/fixtures/hf/${f}_expected.safetensors" "$out/fixtures/"
done
run tests.log bash -c "cd '$build' && ./tests/tapegrad_tests \
  --gtest_filter='LoadTest.*:HfFixtures.*:HfTest.*:Rotary.*:Init.*:Generate*:LoraFinetune.RealTokenizer*'"
run roundtrip.log python3 tests/interop/check_family_roundtrip.py "$build" "${fixtures[@]}"
g++ -O2 -std=c++20 dev/load/fault_probe.cpp -o "$out/fault_probe" -lpthread
BUILD_DIR=$build OUT=$out run load.log scripts/gpu/run_load_bench.sh llama-1b
run fault_probe.log "$out/fault_probe" "$(ls -S "${LOAD_DIR:-/tmp/tg_load_bench}"/llama-1b/*.safetensors | head -1)"
grep -h "" "$out/load.log" "$out/fault_probe.log" | grep -v "^\[" || true
exit $status
