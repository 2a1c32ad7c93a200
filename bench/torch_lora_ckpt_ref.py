#!/usr/bin/env python3
"""PyTorch's bf16 LoRA step beside train_step_bench --qlora (scripts/gpu/bench.sh qlora): the llama
configs of bench/torch_toy_lora.py (its model, LoRA r 8 on q/k/v/o, AdamW) as peft trains a bf16
base: the frozen weights in bfloat16, the adapters float32, the forward under bf16 autocast, every
block under torch.utils.checkpoint (use_reentrant=False), at --batch x --seq tokens. There is no
bitsandbytes on the GPU machine, so no QLoRA row here. Appends one JSON line a config to --jsonl
in bench/real_step_rows.py's format (ms_step, ms_min, tok_s, peak_GiB: max_memory_allocated over
the timed steps, the model included).

    python3 bench/torch_lora_ckpt_ref.py --configs llama3-8b --batch 4 --seq 2048 --jsonl out/torch.jsonl
"""
import argparse
import json
import statistics
import time

import torch
from torch.utils.checkpoint import checkpoint

import torch_toy_lora as toy


def run(cfg, batch, seq, n_warm, n_time):
    c = dict(toy.CONFIGS[cfg], batch=batch, seq=seq)
    torch.manual_seed(0)
    with torch.device("cuda"):  # initialised on the GPU: the host init of an 8B model takes minutes
        model = toy.ToyLM(c, True, "sdpa")
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.requires_grad_("lora_" in name)
            if "lora_" not in name:
                p.data = p.data.to(torch.bfloat16)
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    n_all, n_tr = sum(p.numel() for p in model.parameters()), sum(p.numel() for p in trainable)
    for blk in model.blocks:
        blk.forward = (lambda f: lambda x, cos, sin: checkpoint(f, x, cos, sin, use_reentrant=False))(blk.forward)
    g = torch.Generator(device="cpu")
    g.manual_seed(0)
    ids = torch.randint(0, c["vocab"], (batch, seq + 1), generator=g).cuda()
    inp, tgt = ids[:, :-1].contiguous(), ids[:, 1:].contiguous()

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(inp, tgt)
        loss.backward()
        opt.step()
        return loss

    for _ in range(n_warm):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    ts = []
    for _ in range(n_time):
        t0 = time.perf_counter()
        loss = step()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    ms = statistics.median(ts) * 1e3
    return {"config": cfg, "mode": "lora", "exec": "eager", "ckpt": True, "dtype": "bf16 base, f32 LoRA, autocast",
            "quant": "none", "batch": batch, "seq": seq, "ms_step": ms, "ms_min": min(ts) * 1e3,
            "tok_s": batch * seq / (ms / 1e3), "peak_GiB": torch.cuda.max_memory_allocated() / 2**30,
            "loss_last": round(loss.item(), 4), "params": n_all, "trainable": n_tr,
            "script": "bench/torch_lora_ckpt_ref.py"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--configs", default="llama3-8b")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--n-warm", type=int, default=2)
    ap.add_argument("--n-time", type=int, default=5)
    ap.add_argument("--jsonl", required=True)
    args = ap.parse_args()
    for cfg in args.configs.split(","):
        try:
            row = run(cfg, args.batch, args.seq, args.n_warm, args.n_time)
        except Exception as e:  # one config failing (out of memory) leaves the others' rows
            row = {"config": cfg, "mode": "lora", "exec": "eager", "error": repr(e)[:500]}
        print(json.dumps(row), flush=True)
        with open(args.jsonl, "a") as f:
            f.write(json.dumps(row) + "\n")
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
