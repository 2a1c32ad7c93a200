#!/usr/bin/env python3
"""PyTorch's RMSNorm / LayerNorm backward on the cases of bench/norm_bench.cu, timed the same way.

Each timed call is one backward (torch.autograd.grad of the forward output, graph retained),
captured once in a CUDA graph and replayed between CUDA events after a 256 MB memset that
flushes the L2 (as norm_bench times ours); median of --reps replays, in microseconds. Backends: eager (F.rms_norm / F.layer_norm) and torch.compile of the forward
(its AOTAutograd backward is what runs). Modes as in norm_bench: which inputs require grad
decides what backward computes (frozen weight: no dW).

  python3 bench/torch_norm_ref.py [--reps N] [--quick] [--no-compile] [--ours norm.csv] [--csv out.csv]
                                  [--json out.json] [--only rms|ln] [--dtype bf16|fp32] [--shape ROWSxDIM]
                                  [--mode NAME] [--backend eager|compile] [--flush memset|kernel|clean]

--flush clean (as for norm_bench) reads another 256 MB after the memset, so each call starts from
an L2 of clean lines ("kernel": PyTorch's flush is a fill kernel either way).

With --ours (norm_bench --csv output) every row also shows our time and torch / ours. --json
writes the rows of bench/results/torch_norm.json.
"""
import argparse
import csv
import statistics
import sys

import torch
import torch.nn.functional as F

from result_rows import write_rows

SHAPES = [(2048, 4096), (4096, 4096), (4096, 8192), (8192, 4096), (8192, 8192), (16384, 8192),
          (8192, 1500), (8192, 3584), (262144, 128)]
QUICK = [(8192, 8192), (8192, 1500), (262144, 128)]
RMS_MODES = [("full", True, True, False), ("frozen", True, False, False), ("dw_only", False, True, False)]
LN_MODES = [("full", True, True, True), ("w_frozen", True, False, True), ("b_frozen", True, True, False),
            ("both_frozen", True, False, False), ("dw_only", False, True, True)]
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def shape_arg(s):
    try:
        rows, dim = (int(v) for v in s.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"wants ROWSxDIM, got {s}")
    if rows < 1 or dim < 1:
        raise argparse.ArgumentTypeError(f"wants ROWSxDIM, got {s}")
    return rows, dim


def timer(reps, flush_mode, warmup=5):
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    # --flush clean (as in norm_bench): a read of another 256 MB after the memset, so the timed
    # call starts from an L2 of clean lines.
    clean = torch.zeros(64 << 20, dtype=torch.float32, device="cuda") if flush_mode == "clean" else None
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def run(fn):
        # Warm up on a side stream (as graph capture requires), capture one call, time replays:
        # host launch overhead is then not counted, as in norm_bench and the reference figures.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warmup):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        times = []
        for i in range(reps):
            flush.fill_(i & 0xFF)
            if clean is not None:
                clean.amax()
            start.record()
            graph.replay()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop) * 1000.0)
        return statistics.median(times)

    # The first backward captured in a process fails on the H200 (torch 2.11: "operation would
    # make the legacy stream depend on a capturing blocking stream"; whichever case comes first,
    # also with capture_error_mode="thread_local"; capturing it again at once fails too) and
    # later ones succeed: a throwaway capture of a small backward takes that failure, so the
    # first case is timed like the rest (runs 47-49).
    x = torch.randn(64, 128, device="cuda", requires_grad=True)
    y = F.rms_norm(x, (128,), None, 1e-5)
    try:
        run(lambda: torch.autograd.grad(y, [x], torch.ones_like(y), retain_graph=True))
    except RuntimeError:
        pass
    return run


def min_bytes(op, rows, dim, es, mx, mw, mb):
    need_x = mx or mw
    b = rows * dim * es  # dy
    if need_x:
        b += rows * dim * es + rows * (8 if op == "layer_norm" else 4)
    if mx:
        b += dim * es + rows * dim * es
    if mw:
        b += dim * es
    if op == "layer_norm" and mb:
        b += dim * es
    return b


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--ours", help="norm_bench --csv output to compare with")
    ap.add_argument("--csv", help="write our rows here")
    ap.add_argument("--only", choices=["rms", "ln"])
    ap.add_argument("--dtype", choices=["bf16", "fp32"])
    ap.add_argument("--shape", type=shape_arg, help="ROWSxDIM: this problem instead of the list")
    ap.add_argument("--mode", choices=sorted({m[0] for m in RMS_MODES + LN_MODES}), help="one mask mode")
    ap.add_argument("--backend", choices=["eager", "compile"], help="one backend")
    ap.add_argument("--flush", choices=["memset", "kernel", "clean"], default="memset")
    ap.add_argument("--json", help="write our rows here as bench/results/torch_norm.json rows")
    args = ap.parse_args()

    ours, copy_bw = {}, None
    if args.ours:
        with open(args.ours) as f:
            for r in csv.DictReader(f):
                ours[(r["op"], r["dtype"], int(r["rows"]), int(r["dim"]), r["mode"])] = float(r["us"])
                copy_bw = float(r["copy_bw"])

    run = timer(args.reps, args.flush)
    backends = ["eager"] + ([] if args.no_compile else ["compile"])
    if args.backend:
        backends = [args.backend]
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}, flush: {args.flush}")
    hdr = f"{'backend':8} {'op':10} {'dtype':5} {'shape':13} {'mode':11} {'torch us':>9} {'GB/s':>7}"
    if ours:
        hdr += f" {'ours us':>9} {'torch/ours':>10}"
    print(hdr)
    rows_out = []
    for op in ("rms_norm", "layer_norm"):
        if args.only and args.only != ("ln" if op == "layer_norm" else "rms"):
            continue
        for dname, dt in DTYPES.items():
            if args.dtype and args.dtype != dname:
                continue
            es = 2 if dt == torch.bfloat16 else 4
            shapes = QUICK if args.quick else SHAPES
            if args.shape:
                shapes = [args.shape]
            for rows, dim in shapes:
                for backend in backends:
                    for mode, mx, mw, mb in (LN_MODES if op == "layer_norm" else RMS_MODES):
                        if args.mode and args.mode != mode:
                            continue
                        g = torch.Generator(device="cuda").manual_seed(0)
                        x = torch.randn(rows, dim, device="cuda", dtype=dt, generator=g).requires_grad_(mx)
                        w = (1 + 0.2 * torch.randn(dim, device="cuda", dtype=dt, generator=g)).requires_grad_(mw)
                        b = (0.1 * torch.randn(dim, device="cuda", dtype=dt, generator=g)).requires_grad_(mb)
                        dy = torch.randn(rows, dim, device="cuda", dtype=dt, generator=g)
                        if op == "rms_norm":
                            fwd = lambda x, w, b: F.rms_norm(x, (dim,), w, 1e-5)
                        else:
                            fwd = lambda x, w, b: F.layer_norm(x, (dim,), w, b, 1e-5)
                        if backend == "compile":
                            torch._dynamo.reset()
                            fwd = torch.compile(fwd, dynamic=False)
                        y = fwd(x, w, b)
                        inputs = [t for t, m in ((x, mx), (w, mw), (b, mb and op == "layer_norm")) if m]
                        try:
                            us = run(lambda: torch.autograd.grad(y, inputs, dy, retain_graph=True))
                        except RuntimeError as e:  # e.g. a PyTorch bug for some masks
                            print(f"{backend:8} {op:10} {dname:5} {f'{rows}x{dim}':13} {mode:11} "
                                  f"error: {str(e).splitlines()[0][:80]}", flush=True)
                            continue
                        nb = min_bytes(op, rows, dim, es, mx, mw, mb)
                        line = (f"{backend:8} {op:10} {dname:5} {f'{rows}x{dim}':13} {mode:11} {us:9.1f} "
                                f"{nb / (us * 1e-6) / 1e9:7.0f}")
                        key = (op, dname, rows, dim, mode)
                        if key in ours:
                            line += f" {ours[key]:9.1f} {us / ours[key]:10.2f}"
                        print(line, flush=True)
                        rows_out.append((backend, op, dname, rows, dim, mode, us, nb))
                        del x, w, b, dy, y
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            wr = csv.writer(f)
            wr.writerow(["backend", "op", "dtype", "rows", "dim", "mode", "us", "min_bytes"])
            wr.writerows(rows_out)
    if args.json:
        write_rows(args.json, "torch_norm_ref", torch.cuda.get_device_name(),
                   [{"backend": be, "op": op, "dtype": dn, "rows": r, "dim": d, "mode": m, "us": round(us, 2),
                     "min_bytes": nb, "flush": args.flush, "torch": torch.__version__}
                    for be, op, dn, r, d, m, us, nb in rows_out])
    if copy_bw:
        print(f"(our run's copy bandwidth: {copy_bw / 1e9:.0f} GB/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
