# The mixture-of-experts families: their fixtures from transformers + peft, then their tests.
# About 4 minutes (build 2.5, fixtures 0.5, tests 0.5); FIXTURES="qwen3_moe" in the environment
# writes only those families (default: all three):
#  1. builds tapegrad_tests;
#  2. tests/fixtures/hf/make_moe_fixtures.py writes each family's folder, _fused folder, adapter and
#     expected numbers into tests/fixtures/hf, packed into out/moe-fixtures.tgz (unpack it into
#     tests/fixtures/hf and commit the files);
#  3. runs the MoE tests on those files: the op cases of grouped_mm, topk and the attention sinks
#     (their CUDA comparisons included), sort_by_expert, the block, the families, the fixtures.
# Logs under out; exit status 1 when a step failed (the others still run).
set -uo pipefail
logged build.log build_targets tapegrad_tests
[ $status -eq 0 ] || exit 1
read -ra fixtures <<<"${FIXTURES:-qwen3_moe mixtral gpt_oss}"
logged fixtures.log python3 tests/fixtures/hf/make_moe_fixtures.py "${fixtures[@]}"
grep '^== ' "$out/fixtures.log" || true
written=()
for f in "${fixtures[@]}"; do
  [ -f "tests/fixtures/hf/${f}_expected.safetensors" ] && written+=("$f" "${f}_fused" "${f}_adapter" "${f}_expected.safetensors")
done
[ ${#written[@]} -eq 0 ] || tar czf "$out/moe-fixtures.tgz" -C tests/fixtures/hf "${written[@]}"
filter='Ops/OpTest.*/grouped_mm*:Ops/OpTest.*/topk*:Ops/OpTest.*/*sinks*'
filter+=':GroupedMm.*:SortByExpert.*:Topk.*:Moe*.*:Mxfp4.*'
filter+=':HfFixtures.Qwen3Moe*:HfFixtures.Mixtral*:HfFixtures.GptOss*:HfFixtures.MoeFamilies*:HfFixtures.EveryFamily*'
gtest_step "$filter"
exit $status
