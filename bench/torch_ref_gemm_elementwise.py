#!/usr/bin/env python3
"""PyTorch reference for bench/gemm_bench and bench/elementwise_bench.

Reads the CSV files our benchmarks wrote (kind,name,dtype,shape,work,ms), times the same case
in PyTorch on the same GPU (CUDA events around each call, warm-up, median of 50) and prints one
table: ours vs torch, with the rate of each.

    python3 bench/torch_ref_gemm_elementwise.py gemm.csv elementwise.csv [--json out.json]

--json writes PyTorch's rows as bench/results/torch_gemm_elementwise.json holds them.
"""
import csv
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from result_rows import write_rows

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float64": torch.float64}


def median_ms(fn, iters=50, warmup=5):
    # Warm-up: at least `warmup` calls and 200 ms (as bench_common.cuh), so both run at the
    # clocks of sustained load.
    t0, done = time.perf_counter(), 0
    while done < warmup or time.perf_counter() - t0 < 0.2:
        for _ in range(warmup):
            fn()
        done += warmup
        torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for s, e in zip(starts, ends):
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def rand(*shape, dtype):
    return torch.rand(*shape, device="cuda", dtype=torch.float32).mul_(2).sub_(1).to(dtype)


def gemm_case(name, dtype, shape):
    dims, flags = shape.split("_")
    B, M, N, K = (int(v) for v in dims.split("x"))
    a = rand(B, K, M, dtype=dtype).transpose(1, 2) if flags[0] == "t" else rand(B, M, K, dtype=dtype)
    b = rand(B, N, K, dtype=dtype).transpose(1, 2) if flags[1] == "t" else rand(B, K, N, dtype=dtype)
    c = torch.empty(B, M, N, device="cuda", dtype=dtype)
    torch.backends.cuda.matmul.allow_tf32 = name.endswith("_tf32")
    try:
        return median_ms(lambda: torch.matmul(a, b, out=c))
    finally:
        torch.backends.cuda.matmul.allow_tf32 = False


def ew_case(name, dtype, shape):
    R, C = (int(v) for v in shape.split("x"))
    a, b = rand(R, C, dtype=dtype), rand(R, C, dtype=dtype)
    bt, bias = rand(C, R, dtype=dtype), rand(C, dtype=dtype)
    out = torch.empty(R, C, device="cuda", dtype=dtype)
    f32 = torch.empty(R, C, device="cuda", dtype=torch.float32)
    cases = {
        "gelu_fwd": lambda: F.gelu(a),
        "gelu_bwd": lambda: torch.ops.aten.gelu_backward(b, a),
        "add": lambda: torch.add(a, b, out=out),
        "add_bias": lambda: torch.add(a, bias, out=out),
        "add_transposed": lambda: torch.add(a, bt.t(), out=out),
        "sum_rows": lambda: a.sum(dim=1, keepdim=True),
        "sum_cols": lambda: a.sum(dim=0, keepdim=True),
        "sum_all": lambda: a.sum(),
        "max_rows": lambda: a.max(dim=1, keepdim=True),
        "to_f32": lambda: f32.copy_(a),
        "copy_transposed": lambda: out.copy_(bt.t()),
        "accumulate": lambda: out.add_(a),
        "fill": lambda: out.fill_(1.5),
    }
    if name not in cases:
        return None
    return median_ms(cases[name])


def main(paths, json_path=None):
    # Same numerics as ours: float32 GEMMs in full precision, float32 split-K reductions for bf16.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    rows = []
    for path in paths:
        with open(path) as f:
            rows += list(csv.DictReader(f))
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
    hdr = f"{'kind':<5} {'case':<20} {'dtype':<9} {'shape':<26} {'ours ms':>10} {'torch ms':>10} {'torch/ours':>10} {'ours rate':>12} {'torch rate':>12}"
    print(hdr)
    print("-" * len(hdr))
    out = []
    for r in rows:
        dtype = DTYPES[r["dtype"]]
        work, ours = float(r["work"]), float(r["ms"])
        fn = gemm_case if r["kind"] == "gemm" else ew_case
        theirs = fn(r["name"], dtype, r["shape"])
        unit, scale = ("TFLOP/s", 1e12) if r["kind"] == "gemm" else ("GB/s", 1e9)
        rate = lambda ms: work / (ms * 1e-3) / scale
        if theirs is None:
            print(f"{r['kind']:<5} {r['name']:<20} {r['dtype']:<9} {r['shape']:<26} {ours:>10.4f} {'-':>10}")
            continue
        print(f"{r['kind']:<5} {r['name']:<20} {r['dtype']:<9} {r['shape']:<26} {ours:>10.4f} {theirs:>10.4f} "
              f"{theirs / ours:>10.2f} {rate(ours):>8.1f} {unit:<4} {rate(theirs):>7.1f} {unit}")
        out.append({"kind": r["kind"], "name": r["name"], "dtype": r["dtype"], "shape": r["shape"],
                    "ms": round(theirs, 5), "torch": torch.__version__})
        torch.cuda.empty_cache()
    print("torch/ours > 1: ours is faster")
    if json_path:
        write_rows(json_path, "torch_ref_gemm_elementwise", torch.cuda.get_device_name(), out)


if __name__ == "__main__":
    argv = sys.argv[1:]
    json_path = None
    if "--json" in argv:
        at = argv.index("--json")
        if at + 1 >= len(argv):
            sys.exit(__doc__)
        json_path = argv[at + 1]
        del argv[at:at + 2]
    if not argv:
        sys.exit(__doc__)
    main(argv, json_path)
