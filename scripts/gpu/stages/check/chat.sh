# Chat data against transformers 5.17 (CPU work, run where transformers is installed): tools,
# tool calls, reasoning and ShareGPT rows. About 3 minutes, most of it the build.
# 1. tests/fixtures/chat_templates/make_fixtures.py --check: transformers' own renders against
#    expected.json and expected_tools.json (made with the jinja2 replica of its sandbox);
# 2. tests/fixtures/chat_dataset/check_transformers.py writes expected.json (the tool
#    conversations' ids and labels by transformers' tokenizer) into the checkout and a copy into
#    <out>/chat_dataset_expected.json (commit it);
# 3. ChatTemplate.* and ChatDataset.* against those files (<out>/tests.txt).
set -uo pipefail
status=0
build_targets tapegrad_tests >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
logged make_fixtures.txt python3 tests/fixtures/chat_templates/make_fixtures.py --check
logged check_transformers.txt python3 tests/fixtures/chat_dataset/check_transformers.py
cp tests/fixtures/chat_dataset/expected.json "$out/chat_dataset_expected.json"
gtest_step 'ChatTemplate.*:ChatDataset.*'
exit $status
