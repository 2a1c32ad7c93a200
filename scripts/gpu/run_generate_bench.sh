#!/usr/bin/env bash
# Issue 26's table on the GPU in one call: nn::generate (bench/generate_bench) and transformers'
# generate (bench/generate_bench_torch.py: eager, static cache, static cache + torch.compile),
# bench-135m bf16, prompts of 128 tokens, 256 new tokens, batch 1 and 32. Rows of both to
# <results dir>/generate.json (then python3 bench/make_results.py).
#   TG_COMMIT=<commit> scripts/gpu/run_generate_bench.sh <build dir> [results dir]
set -euo pipefail
build=$1
out=${2:-bench/results}
bench_dir=$(cd "$(dirname "$0")/../../bench" && pwd)
tmp=$(mktemp -d)
mkdir -p "$out"
shape=(--batches 1,32 --prompt 128 --new-tokens 256)
"$build/bench/generate_bench" --config bench-135m --device cuda --dtype bf16 "${shape[@]}" --caches dynamic,static,graph \
  --json "$tmp/ours.json"
# torch.compile's variant may take minutes to compile: the rows written before a timeout are kept.
timeout "${TG_TORCH_BUDGET_S:-300}" python3 "$bench_dir/generate_bench_torch.py" --device cuda --dtype bf16 "${shape[@]}" \
  --out "$tmp/torch.json" || echo "transformers' generate: stopped (rc $?); keeping its rows so far"
python3 - "$tmp/ours.json" "$tmp/torch.json" "$out/generate.json" <<'PY'
import json, os, sys
rows = [r for path in sys.argv[1:3] for r in json.load(open(path))]
tmp = sys.argv[3] + ".tmp"
with open(tmp, "w") as f:
    f.write("[\n" + ",\n".join("  " + json.dumps(r) for r in rows) + "\n]\n")
os.replace(tmp, sys.argv[3])
PY
cat "$out/generate.json"
