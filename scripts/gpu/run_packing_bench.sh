#!/usr/bin/env bash
# Packing without cross-talk on the GPU (issue 38 item 4): a LoRA step (bf16 base, float32
# adapters) of bench-135m (head dim 64) and llama-1b (head dim 128) on the chat length mix at seq
# 2048, packed separately, packed and padded, eager and replayed as a CUDA graph: rows to
# <results dir>/packing.json (copy to bench/results/, then bench/make_results.py).
#   scripts/gpu/run_packing_bench.sh <build dir> [results dir]     (default bench/results)
set -euo pipefail
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 <build dir> [results dir]" >&2
  exit 2
fi
build=$1
out=${2:-bench/results}
root=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out"
parts=()
for config in bench-135m llama-1b; do
  for graph in false true; do
    part="$out/packing-$config-$graph.json"
    "$build/bench/packing_bench" --config "$config" --seq 2048 --batch 4 --conversations 10000 --device cuda \
      --dtype bf16 --warmup 3 --steps 10 --cuda-graph "$graph" \
      --lengths "$root/tests/fixtures/chat_dataset/expected.json" --json "$part"
    parts+=("$part")
  done
done
python3 - "$out/packing.json" "${parts[@]}" <<'PY'
import json, sys
rows = [r for path in sys.argv[2:] for r in json.load(open(path))]
open(sys.argv[1], "w").write("[\n" + ",\n".join("  " + json.dumps(r) for r in rows) + "\n]\n")
PY
rm -f "${parts[@]}"
echo "rows: $out/packing.json"
