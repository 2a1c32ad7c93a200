#!/usr/bin/env bash
# Data-parallel tokens/s (issue 27): tapegrad (bench/data_parallel_bench over NCCL) and PyTorch
# DDP (bench/torch_ddp_bench.py under torchrun) on 1, 2, ... GPUs in the same call, bench-135m
# bf16, LoRA and full, the per-GPU batch fixed (8 x 1024). Rows to <out>/data_parallel.json.
#   scripts/gpu/run_data_parallel.sh <build dir> [out dir] [GPU counts, default: 1 2 4 8 up to the machine's]
set -euo pipefail
build=$1
out=${2:-bench/results}
bench_dir=$(cd "$(dirname "$0")/../../bench" && pwd)
gpus=$(nvidia-smi -L | wc -l)
counts=${3:-$(for n in 1 2 4 8; do [ "$n" -le "$gpus" ] && echo "$n"; done)}
export NCCL_NVLS_ENABLE=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$out"
for n in $counts; do
  "$build/bench/data_parallel_bench" --nproc "$n" --json "$tmp/tapegrad-$n.json"
  python3 -m torch.distributed.run --standalone --nproc-per-node "$n" "$bench_dir/torch_ddp_bench.py" --json "$tmp/torch-$n.json"
done
python3 - "$out/data_parallel.json" "$tmp"/*.json <<'PY'
import json, sys
rows = [r for path in sys.argv[2:] for r in json.load(open(path))]
rows.sort(key=lambda r: (r["mode"], r["impl"], r["gpus"]))
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write("[\n" + ",\n".join("  " + json.dumps(r) for r in rows) + "\n]\n")
import os; os.replace(sys.argv[1] + ".tmp", sys.argv[1])
PY
cat "$out/data_parallel.json"
