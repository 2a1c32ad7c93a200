#!/usr/bin/env python3
"""PyTorch DDP reference for bench/data_parallel_bench (issue 27): the same toy Llama as
bench/torch_toy_lora.py (bench-135m: B 8 x T 1024 per GPU, bf16 autocast over float32 weights,
AdamW), wrapped in DistributedDataParallel (NCCL, default 25 MiB buckets), one process per GPU:

    NCCL_NVLS_ENABLE=0 torchrun --nproc-per-node N bench/torch_ddp_bench.py --json out.json

Rank 0 prints the median step and writes rows {"impl": "torch_ddp", "gpus", "mode", "tok_s", ...}
(bench name data_parallel). tokens/s = N * B * T / the slowest rank's median step. Note that
DDP all-reduces float32 gradients here (autocast keeps float32 weights); tapegrad's bf16 full
mode has bf16 weights and gradients.
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from result_rows import write_rows  # noqa: E402
from torch_toy_lora import CONFIGS, build  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="llama-bench-135m")
    ap.add_argument("--modes", default="lora,full")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    dist.init_process_group("nccl")
    rank, world, local = dist.get_rank(), dist.get_world_size(), int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    torch.set_float32_matmul_precision("highest")
    c = CONFIGS[a.config]
    rows = []
    for mode in a.modes.split(","):
        model, opt, _, _ = build(a.config, mode, "sdpa", "cuda")
        ddp = DDP(model, device_ids=[local])
        g = torch.Generator(device="cpu")
        g.manual_seed(1 + rank)
        ids = torch.randint(0, c["vocab"], (c["batch"], c["seq"] + 1), generator=g).cuda()
        inp, tgt = ids[:, :-1].contiguous(), ids[:, 1:].contiguous()

        def step():
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = ddp(inp, tgt)
            loss.backward()
            opt.step()

        for _ in range(a.warmup):
            step()
        torch.cuda.synchronize()
        ts = []
        for _ in range(a.steps):
            t0 = time.perf_counter()
            step()
            torch.cuda.synchronize()
            ts.append(time.perf_counter() - t0)
        med = torch.tensor([statistics.median(ts)], device="cuda")
        dist.all_reduce(med, op=dist.ReduceOp.MAX)
        ms = med.item() * 1e3
        tok_s = world * c["batch"] * c["seq"] / (ms / 1e3)
        if rank == 0:
            print(f"torch_ddp {a.config} {mode} gpus {world}: {ms:.2f} ms/step, {tok_s:.0f} tok/s", flush=True)
        rows.append({"impl": "torch_ddp", "gpus": world, "mode": mode, "config": a.config.replace("llama-", ""),
                     "dtype": "bf16 autocast", "batch_per_gpu": c["batch"], "seq": c["seq"], "ms": round(ms, 3),
                     "tok_s": round(tok_s), "torch": torch.__version__})
        del ddp, model, opt
        torch.cuda.empty_cache()
    if rank == 0 and a.json:
        write_rows(a.json, "data_parallel", torch.cuda.get_device_name(), rows)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
