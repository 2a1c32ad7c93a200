# Loading a bf16 folder (from_pretrained to the CPU and the GPU) and building models, with peak RSS.
# Stage arguments: the configs (default: llama-1b llama3-8b). Builds load_bench; for each config
# writes its bf16 folder with save_pretrained under $LOAD_DIR (/tmp/tg_load_bench; 3.2 GB for
# llama-1b, 16 GB for llama3-8b, kept for the next call), times reading it against
# nn::from_pretrained to the CPU and to the GPU with the peak RSS of each load; then times building
# llama-1b (1.6B) and llama3.2-1b (1.24B) with their random init on all cores. Rows:
# <out>/load.json, <out>/construct.json. About 1.5 minutes for llama-1b, 4 for llama3-8b (its
# folder written the first time). TG_COMMIT names the commit in the rows.
set -euo pipefail
configs=("$@")
[ ${#configs[@]} -gt 0 ] || configs=(llama-1b llama3-8b)
note_commit
build_targets load_bench
for config in "${configs[@]}"; do
  # One process a device: each row's peak RSS is its own load's even where clear_refs is refused.
  for device in cpu cuda; do
    "$build/bench/load_bench" --config "$config" --dir "${LOAD_DIR:-/tmp/tg_load_bench}/$config" --devices "$device" \
      --json "$out/load-$config-$device.json"
  done
done
# A float32 load of the bf16 files on the host (converted: fresh memory twice the folder's).
"$build/bench/load_bench" --config "${configs[0]}" --dir "${LOAD_DIR:-/tmp/tg_load_bench}/${configs[0]}" --devices cpu \
  --dtype f32 --json "$out/load-${configs[0]}-cpu-f32.json"
for config in llama-1b llama3.2-1b; do
  "$build/bench/load_bench" --config "$config" --construct true --json "$out/construct-$config.json"
done
merge_rows "$out/load.json" "$out"/load-*.json
merge_rows "$out/construct.json" "$out"/construct-*.json
