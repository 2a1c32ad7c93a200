# Loading: the RoPE fixtures, the loading tests on the GPU, page-fault costs, llama-1b's rows.
# About 6 minutes; TG_COMMIT names the commit in the rows.
#  1. builds tapegrad_tests and the programs they run, interop_dump, load_bench;
#  2. writes the RoPE fixtures llama_yarn, phi3_longrope and phi3_longrope_short with transformers +
#     peft (tests/fixtures/hf/make_family_fixtures.py) and copies them to <out>/fixtures: commit them
#     into tests/fixtures/hf;
#  3. runs the tests this work touches, on the GPU as well (loading, fixtures, RoPE, init, generation)
#     and tests/interop/check_family_roundtrip.py on the new fixtures;
#  4. dev/load/fault_probe on a 3.2 GB shard (what first-touch page faults cost on this machine) and
#     scripts/gpu/bench.sh load ... llama-1b (load and construct rows; llama3-8b is a call of its
#     own: scripts/gpu/bench.sh load build-gpu <out> llama3-8b, about 4 minutes).
# Logs and rows under out; exit status 1 when a step failed (the others still run).
set -uo pipefail
logged build.log build_targets tapegrad_tests interop_dump load_bench
[ $status -eq 0 ] || exit 1
fixtures=(llama_yarn phi3_longrope phi3_longrope_short)
logged fixtures.log python3 tests/fixtures/hf/make_family_fixtures.py "${fixtures[@]}"
mkdir -p "$out/fixtures"
for f in "${fixtures[@]}"; do
  cp -r "tests/fixtures/hf/$f" "tests/fixtures/hf/${f}_adapter" "tests/fixtures/hf/${f}_expected.safetensors" "$out/fixtures/"
done
logged tests.log bash -c "cd '$build' && ./tests/tapegrad_tests \
  --gtest_filter='LoadTest.*:HfFixtures.*:HfTest.*:Rotary.*:Init.*:Generate*:LoraFinetune.RealTokenizer*'"
logged roundtrip.log python3 tests/interop/check_family_roundtrip.py "$build" "${fixtures[@]}"
g++ -O2 -std=c++20 dev/load/fault_probe.cpp -o "$out/fault_probe" -lpthread
logged load.log scripts/gpu/bench.sh load "$build" "$out" llama-1b
logged fault_probe.log "$out/fault_probe" "$(ls -S "${LOAD_DIR:-/tmp/tg_load_bench}"/llama-1b/*.safetensors | head -1)"
grep -h "" "$out/load.log" "$out/fault_probe.log" | grep -v "^\[" || true
exit $status
