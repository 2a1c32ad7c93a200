# GGUF export of an 8B-shaped model (issue 51): builds gguf_export_bench, writes a random bf16
# llama3-8b folder under $GGUF_DIR (/tmp/tg_gguf_bench; 16 GB, kept for the next call), then times
# nn::save_gguf to F16 and Q8_0 against writing the same bytes to the same disk, with the export's
# peak RSS, on all the host's cores. Rows: <out>/gguf_export.json (bench/results/gguf_export.json's).
# Stage arguments: the configs (default: llama3-8b). About 3 minutes on the 16-core GPU machine
# (the folder's writing most of it); needs ~40 GB of disk. TG_COMMIT names the commit in the rows.
set -euo pipefail
configs=("$@")
[ ${#configs[@]} -gt 0 ] || configs=(llama3-8b)
note_commit
build_targets gguf_export_bench
for config in "${configs[@]}"; do
  "$build/bench/gguf_export_bench" --config "$config" --dir "${GGUF_DIR:-/tmp/tg_gguf_bench}/$config" \
    --dtypes f16,q8_0 --tokenizer "$root/tests/fixtures/tokenizers/llama3" --json "$out/gguf_export-$config.json"
done
merge_rows "$out/gguf_export.json" "$out"/gguf_export-*.json
