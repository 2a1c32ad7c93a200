#!/usr/bin/env bash
# Issue 34's loading benchmark on the GPU machine, in one call from the repo root:
#   TG_COMMIT=<commit> OUT=<dir> scripts/gpu/run_load_bench.sh [llama-1b | llama3-8b]
# Builds load_bench in $BUILD_DIR (build-gpu) if absent, writes the config's bf16 folder with
# save_pretrained under $LOAD_DIR (/tmp/tg_load_bench; 3.2 GB for llama-1b, 16 GB for llama3-8b),
# then times reading it against nn::from_pretrained to the CPU and to the GPU, with the peak RSS of
# each load; rows to $OUT/load.json (llama3-8b: load-llama3-8b.json): copy them to bench/results/.
# With the loader of 2026-12-01 (random init first) a 1.6B load takes minutes a device; an 8B one
# does not fit one call until the loader is rewritten.
set -euo pipefail
config=${1:-llama-1b}
build=${BUILD_DIR:-build-gpu}
out=${OUT:-out/load}
mkdir -p "$out"
[ -n "${TG_COMMIT:-}" ] || echo "note: TG_COMMIT is not set: the rows name the GPU machine's (stale) checkout"
[ -f "$build/build.ninja" ] || cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTG_CUDA=ON
cmake --build "$build" -j"$(nproc)" --target load_bench
suffix=$([ "$config" = llama-1b ] || echo "-$config")
"$build/bench/load_bench" --config "$config" --dir "${LOAD_DIR:-/tmp/tg_load_bench}/$config" --devices cpu,cuda \
  --json "$out/load$suffix.json"
