# Preference and reward training on the GPU (issue 50): its tests, the fixture, the command line.
# About 4 minutes, most of it the build. FIXTURES=1 in the environment writes the PyTorch fixture
# first (tests/fixtures/preference/make_preference_fixtures.py: torch, transformers, peft), copied
# to <out>/preference-expected.safetensors (commit it as tests/fixtures/preference/expected.safetensors).
# 1. builds tapegrad_tests and preference_finetune;
# 2. with FIXTURES, the fixture;
# 3. the tests on the GPU: the losses and their log-probs / LoRA gradients against the PyTorch
#    fixture (PreferenceFixtures.*, the CUDA case too), the fused log-probs, the reference pass,
#    the trainers (they train on the GPU: DPO reaches accuracy 1, resumes are bit-exact, GRPO
#    raises the reward), linear_cross_entropy's rows against the CPU;
# 4. preference_finetune --device cuda: DPO in bf16 and GRPO on the tiny Llama fixture.
# <out> gets build.log, fixtures.log, tests.txt, cli.log; exit status 1 when a step failed.
set -uo pipefail
logged build.log build_targets tapegrad_tests preference_finetune
[ $status -eq 0 ] || exit 1
if [ -n "${FIXTURES:-}" ]; then
  logged fixtures.log python3 tests/fixtures/preference/make_preference_fixtures.py
  cp tests/fixtures/preference/expected.safetensors "$out/preference-expected.safetensors"
  tail -12 "$out/fixtures.log"
fi
filter='PreferenceFixtures.*:PreferenceLosses.*:PreferenceData.*:TokenLogProbs.*:DisableAdapter.*:DPOTrainer.*'
filter+=':PairwiseTrainers.*:KTOTrainer.*:GRPO*:LinearCrossEntropy.RowLosses*:Ops/OpTest.*/linear_cross_entropy_rows*'
gtest_step "$filter"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cli() {
  local base=tests/fixtures/tokenizers/tiny_llama data=tests/fixtures/preference
  local common=(--base "$base" --device cuda --lr 1e-2 --batch 2 --log-every 1 --max-length 32)
  "$build/examples/preference_finetune" "${common[@]}" --method dpo --dtype bf16 --data "$data/pairs.jsonl" \
    --steps 6 --out "$work/dpo" &&
    "$build/examples/preference_finetune" "${common[@]}" --method grpo --data "$data/prompts.jsonl" \
      --reward 'regex:a' --num-generations 2 --max-completion-length 4 --batch 4 --beta 0.04 --steps 2 --out "$work/grpo" &&
    tail -2 "$work/dpo/log.jsonl" "$work/grpo/log.jsonl"
}
logged cli.log cli
tail -6 "$out/cli.log"
exit $status
