# Data-parallel tokens/s: tapegrad over NCCL against PyTorch DDP under torchrun, on 1, 2, ... GPUs.
# bench/data_parallel_bench and bench/torch_ddp_bench.py in the same call, bench-135m bf16, LoRA and
# full, the per-GPU batch fixed (8 x 1024). Rows to <out>/data_parallel.json. Stage arguments: the
# GPU counts (default: 1 2 4 8 up to the machine's).
set -euo pipefail
gpus=$(nvidia-smi -L | wc -l)
counts=${*:-$(for n in 1 2 4 8; do [ "$n" -le "$gpus" ] && echo "$n"; done)}
export NCCL_NVLS_ENABLE=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for n in $counts; do
  "$build/bench/data_parallel_bench" --nproc "$n" --json "$tmp/tapegrad-$n.json"
  python3 -m torch.distributed.run --standalone --nproc-per-node "$n" "$root/bench/torch_ddp_bench.py" --json "$tmp/torch-$n.json"
done
merge_rows "$out/data_parallel.json" "$tmp"/*.json --sort mode,impl,gpus
cat "$out/data_parallel.json"
