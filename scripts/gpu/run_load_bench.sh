#!/usr/bin/env bash
# Issue 34's loading benchmark on the GPU machine, in one call from the repo root:
#   TG_COMMIT=<commit> OUT=<dir> scripts/gpu/run_load_bench.sh [config ...]   (default: llama-1b llama3-8b)
# Builds load_bench in $BUILD_DIR (build-gpu) if absent; for each config writes its bf16 folder with
# save_pretrained under $LOAD_DIR (/tmp/tg_load_bench; 3.2 GB for llama-1b, 16 GB for llama3-8b,
# kept for the next call), times reading it against nn::from_pretrained to the CPU and to the GPU
# with the peak RSS of each load; then times building llama-1b (1.6B) and llama3.2-1b (1.24B) with
# their random init on all cores. Rows: $OUT/load.json, $OUT/construct.json: copy them to
# bench/results/ and run bench/make_results.py. About 1.5 minutes for llama-1b, 4 for llama3-8b
# (its folder written the first time).
set -euo pipefail
configs=("$@")
[ ${#configs[@]} -gt 0 ] || configs=(llama-1b llama3-8b)
build=${BUILD_DIR:-build-gpu}
out=${OUT:-out/load}
mkdir -p "$out"
[ -n "${TG_COMMIT:-}" ] || echo "note: TG_COMMIT is not set: the rows name the GPU machine's (stale) checkout"
[ -f "$build/build.ninja" ] || cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTG_CUDA=ON
cmake --build "$build" -j"$(nproc)" --target load_bench
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
python3 - "$out" <<'PY'
import glob, json, os, sys
out = sys.argv[1]
for name in ("load", "construct"):
    parts = sorted(glob.glob(os.path.join(out, f"{name}-*.json")))
    rows = [r for p in parts for r in json.load(open(p))]
    with open(os.path.join(out, f"{name}.json"), "w") as f:
        f.write("[\n" + ",\n".join("  " + json.dumps(r) for r in rows) + "\n]\n")
    print(f"{name}.json: {len(rows)} rows from {len(parts)} files")
PY
