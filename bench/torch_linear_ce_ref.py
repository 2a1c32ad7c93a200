#!/usr/bin/env python3
"""The LM head's loss in PyTorch on the cases of bench/linear_ce_bench.cpp, timed the same way:
x [N, H] bf16 (requires grad) times the head's weight [V, H] (trainable or frozen), mean cross
entropy over targets of which 10% are ignore_index; forward + backward, CUDA events after a
256 MB L2 flush, median; peak memory above the inputs and their existing gradients
(torch.cuda.max_memory_allocated after reset_peak_memory_stats, over one call). Implementations:
eager (x @ W.T, then F.cross_entropy on the float32 logits), torch.compile of the same, and
Liger-Kernel's LigerFusedLinearCrossEntropyLoss when liger_kernel imports. Each one's loss and
gradients are first compared with eager's. Prints the ratios to linear_ce_bench's rows of the
same call:

    python3 bench/torch_linear_ce_ref.py --ours bench/results/linear_ce.json --out bench/results/torch_linear_ce.json
"""
import argparse
import json

import torch
import torch.nn.functional as F

from result_rows import write_rows
from torch_timing import median_ms, peak_mib_above, relative_error

SHAPES = "8192x768x32000,16384x2048x128256"  # bench-135m's head; Llama-3's vocabulary
IGNORE_INDEX = -100


def eager(x, w, t):
    return F.cross_entropy((x @ w.T).float(), t, ignore_index=IGNORE_INDEX)


def implementations():
    impls = {"torch": eager, "torch_compile": torch.compile(eager, dynamic=False)}
    try:
        import liger_kernel
        from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss
    except ImportError as e:
        print(f"liger_kernel does not import ({e}): no liger rows")
        return impls, None
    liger = LigerFusedLinearCrossEntropyLoss(ignore_index=IGNORE_INDEX)
    impls["liger"] = lambda x, w, t: liger(w, x, t)
    return impls, getattr(liger_kernel, "__version__", "?")


def loss_and_grads(fn, x, w, t):
    x.grad, w.grad = None, None
    loss = fn(x, w, t)
    loss.backward()
    return loss.item(), x.grad, w.grad


def measure(shape, impls, liger_version, reps, flush):
    """The rows of one NxHxV shape, both weight modes."""
    N, H, V = (int(s) for s in shape.split("x"))
    dev = flush.device
    gen = torch.Generator(device=dev).manual_seed(1)
    x = torch.randn(N, H, device=dev, generator=gen).bfloat16().requires_grad_(True)
    # Weight as initialised (std 1/sqrt(H)): logits of unit scale, a softmax that is not one-hot.
    w = (torch.randn(V, H, device=dev, generator=gen) / H**0.5).bfloat16()
    t = torch.randint(0, V, (N,), device=dev, generator=gen)
    t[torch.rand(N, device=dev, generator=gen) < 0.10] = IGNORE_INDEX
    rows = []
    for weight in ("trainable", "frozen"):
        w.requires_grad_(weight == "trainable")
        ref_loss, ref_dx, ref_dw = loss_and_grads(eager, x, w, t)
        for impl, fn in impls.items():
            loss, dx, dw = loss_and_grads(fn, x, w, t)
            loss_err = abs(loss - ref_loss) / max(abs(ref_loss), 1e-30)
            grad_err = max(relative_error(dx, ref_dx), relative_error(dw, ref_dw) if dw is not None else 0.0)
            if not (loss_err <= 1e-3 and grad_err <= 2e-2):
                raise SystemExit(f"{impl} at {shape} ({weight}): loss / gradients differ from eager's by "
                                 f"{loss_err:.2e} / {grad_err:.2e} (relative), wanted at most 1e-3 / 2e-2")
            step = lambda: fn(x, w, t).backward()  # gradients accumulate into the existing .grad
            step()
            peak = peak_mib_above(step)
            ms = median_ms(step, reps, flush)
            print(f"{shape:20} {weight:9} {impl:14} {ms:9.3f} {peak:9.1f} {loss_err:9.2e} {grad_err:9.2e}")
            row = {"shape": shape, "impl": impl, "weight": weight, "dtype": "bf16", "ms": round(ms, 4),
                   "peak_mib": round(peak, 2), "torch": torch.__version__}
            if impl == "liger":
                row["liger"] = liger_version
            rows.append(row)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ours", help="linear_ce_bench's rows of this call, to print the ratios")
    ap.add_argument("--out", required=True)
    ap.add_argument("--shapes", default=SHAPES, help="NxHxV,... (default: linear_ce_bench's GPU shapes)")
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args()
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    impls, liger_version = implementations()
    print(f"{'shape (NxHxV)':20} {'weight':9} {'impl':14} {'ms':>9} {'peak MiB':>9} {'loss err':>9} {'grad err':>9}")
    rows = []
    for shape in args.shapes.split(","):
        rows += measure(shape, impls, liger_version, args.reps, flush)
        torch.cuda.empty_cache()  # the shape's tensors are gone; the next one starts from a clean cache
    ours = {(r["shape"], r["weight"]): r["ms"] for r in json.load(open(args.ours)) if r["impl"] == "tapegrad_fused"} \
        if args.ours else {}
    for r in rows:
        if (r["shape"], r["weight"]) in ours:
            print(f"{r['shape']:20} {r['weight']:9} {r['impl']:14} / tapegrad_fused: "
                  f"{r['ms'] / ours[(r['shape'], r['weight'])]:.2f}x the time")
    write_rows(args.out, "linear_ce", torch.cuda.get_device_name(), rows)


if __name__ == "__main__":
    main()
