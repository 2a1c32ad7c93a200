#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention on the shapes of bench/attention_bench.cu, timed the
same way (causal, bf16, q/k/v and dout as [B, H, T, hd] views of [B, T, H, hd] memory; CUDA events
after a 256 MB L2 flush; median), once per SDPA backend PyTorch offers (FlashAttention-2, cuDNN,
memory-efficient). Prints the ratio to attention_bench's rows of the same call:

    python3 bench/torch_attention_ref.py --ours bench/results/attention.json --out bench/results/torch_attention.json
"""
import argparse
import json

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from result_rows import write_rows
from torch_timing import median_ms

SHAPES = [(8, 12, 12, 1024, 64), (4, 32, 32, 2048, 128), (1, 16, 16, 8192, 128), (4, 32, 8, 2048, 128),
          (4, 32, 32, 2048, 64)]
BACKENDS = {"torch_flash": SDPBackend.FLASH_ATTENTION, "torch_cudnn": SDPBackend.CUDNN_ATTENTION,
            "torch_efficient": SDPBackend.EFFICIENT_ATTENTION}


def name(B, H, Hkv, T, hd):
    s = f"{B}x{H}x{T}x{hd}"
    return s if H == Hkv else f"{s}-kv{Hkv}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ours", help="attention_bench's rows of this call, to print the ratios")
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args()
    torch.manual_seed(1)
    dev = torch.device("cuda")
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    machine = torch.cuda.get_device_name()
    rows = []
    print(f"{'shape':22} {'impl':16} {'fwd ms':>9} {'bwd ms':>9} {'fwd+bwd':>9} {'TFLOP/s':>8}")
    for B, H, Hkv, T, hd in SHAPES:
        proj = lambda heads: torch.randn(B, T, heads, hd, device=dev, dtype=torch.bfloat16).requires_grad_(True)
        pq, pk, pv = proj(H), proj(Hkv), proj(Hkv)
        dout = torch.randn(B, T, H, hd, device=dev, dtype=torch.bfloat16).transpose(1, 2)
        fwd_flops = 4.0 * B * H * T * T * hd / 2
        gqa = H != Hkv

        def forward():
            return F.scaled_dot_product_attention(pq.transpose(1, 2), pk.transpose(1, 2), pv.transpose(1, 2),
                                                  is_causal=True, enable_gqa=gqa)

        for impl, backend in BACKENDS.items():
            try:
                with sdpa_kernel([backend]):
                    out = forward()
                    fwd = median_ms(forward, args.reps, flush)
                    bwd = median_ms(lambda: torch.autograd.grad(out, (pq, pk, pv), dout, retain_graph=True),
                                    args.reps, flush)
                    both = median_ms(lambda: torch.autograd.grad(forward(), (pq, pk, pv), dout), args.reps, flush)
            except RuntimeError as e:  # a backend that does not take this shape (e.g. GQA)
                print(f"{name(B, H, Hkv, T, hd):22} {impl:16} not available: {str(e).splitlines()[0][:80]}")
                continue
            tflops = 3.5 * fwd_flops / (both * 1e-3) / 1e12
            print(f"{name(B, H, Hkv, T, hd):22} {impl:16} {fwd:9.3f} {bwd:9.3f} {both:9.3f} {tflops:8.1f}")
            rows.append({"shape": name(B, H, Hkv, T, hd), "impl": impl, "torch": torch.__version__, "dout": "out_layout",
                         "fwd_ms": round(fwd, 4), "bwd_ms": round(bwd, 4), "fwdbwd_ms": round(both, 4),
                         "tflops": round(tflops, 1)})
    ours = {}
    for r in json.load(open(args.ours)) if args.ours else []:
        ours.setdefault(r["shape"], {})[r.get("impl", "tapegrad")] = r
    for r in rows:
        for impl, o in ours.get(r["shape"], {}).items():
            print(f"{r['shape']:22} {impl} / {r['impl']:16} speed {r['fwdbwd_ms'] / o['fwdbwd_ms']:.2f}x")
    write_rows(args.out, "torch_attention_ref", machine, rows)


if __name__ == "__main__":
    main()
