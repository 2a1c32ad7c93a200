#!/usr/bin/env python3
"""Where a training step's GPU time goes: ncu's per-launch durations grouped by what each kernel does.

    ncu --clock-control none --profile-from-start off --metrics gpu__time_duration.sum --csv --page raw \\
        --print-units base --log-file ncu.csv build-gpu/bench/train_step_bench ... --steps 2
    python3 bench/ncu_census.py ncu.csv --steps 2 [--step-ms 98.5] [--title "llama-1b LoRA"] [--out census.md]

Input: ncu's `--csv --page raw` report (one row a launch, in launch order: "ID", ..., "Kernel Name",
..., "Block Size", "Grid Size", ..., "gpu__time_duration.sum"; a units row after the header; lines
before the header, ncu's ==PROF== messages, are skipped). train_step_bench runs its timed steps
between cudaProfilerStart / Stop, so with --profile-from-start off the report holds exactly
--steps steps. Durations in ns, us, ms or s (the units row says which; numbers may carry
thousands separators).

Output (stdout, and --out or $OUT/census-<title>.md): a markdown table of the categories, launches
and ms a step and their share of the kernel time (and of --step-ms, the step measured without
the profiler, when given: ncu serialises kernels and starts each with a cold L2, so its sum runs a
few % above a replayed step), then the 25 most expensive kernels with the category each was given,
so a misfiled kernel is seen at once.

Categories, from the kernel's name (first rule that matches):
  attention fwd / bwd: our flash_forward, flash_backward_dq / _dkdv, attention_delta (and
      FlashAttention / cuDNN fmha names, cuDNN's sdpa fprop / bprop and matmul_dq);
  adamw; cross-entropy / head (the loss kernels; the head's GEMMs are GEMMs); norms; rope (apply_rotary); swiglu;
  casts and copies (convert_packed_kernel, ConvertFn);
  GEMMs (cuBLAS: nvjet_*, *xmma*, cutlass*, gemv*): split-K reduces; LoRA small GEMMs (a CTA
      tile of width <= 16, a gemv, or an nvjet bf16/fp16 GEMM writing float32: the adapters'
      float32 gradients); otherwise by the layout in the name. ops/cuda/gemm.cu asks cuBLAS for
      C^T = B^T A^T, so y = x W^T is (T, N), dx = dy W is (N, N) and dW = dy^T x is (N, T):
      GEMM forward, GEMM dx, GEMM dW ("GEMM (layout not in name)" when the name has none);
  elementwise / other: everything else (embedding, fills, adds, reductions).
"""
import argparse
import csv
import io
import os
import re
import sys

UNIT_NS = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6, "second": 1e9, "s": 1e9}

RULES = [
    ("attention fwd", r"flash_forward|flash_fwd|fmha.*fwd|attention_forward|sdpa.*fprop"),  # ours, FA, cuDNN's
    ("attention bwd", r"flash_backward|flash_bwd|attention_delta|fmha.*bwd|dot_do_o|convert_dq|sdpa.*bprop|matmul_dq"),
    ("adamw", r"adamw"),
    ("cross-entropy / head", r"cross_entropy|logsumexp"),
    ("norms", r"norm_fwd|norm_bwd|rms_norm|layer_norm"),
    ("rope", r"apply_rotary|rope"),  # apply_rotary_kernel (rope_kernel before)
    ("swiglu", r"silu_mul|swiglu"),
    ("casts and copies", r"convert_packed|convertfn"),
]
GEMM = r"nvjet|xmma|cutlass|gemm|gemv|cublas"
LAYOUT = {"tn": "GEMM forward", "nn": "GEMM dx", "nt": "GEMM dW"}
ORDER = ["GEMM forward", "GEMM dx", "GEMM dW", "GEMM (layout not in name)", "LoRA small GEMMs", "GEMM split-K reduce",
         "attention fwd", "attention bwd", "norms", "rope", "swiglu", "cross-entropy / head", "casts and copies",
         "adamw", "elementwise / other"]


def gemm_role(name):
    low = name.lower()
    if re.search(r"splitk.*reduce|reduce_1block", low):
        return "GEMM split-K reduce"
    tokens = re.split(r"[_\s<>(),:]+", name)
    tile = re.search(r"(\d+)x(\d+)", name)
    nvjet_code = tokens[1].lower() if tokens[0].lower() == "nvjet" and len(tokens) > 1 else ""
    f32_out = len(nvjet_code) == 3 and nvjet_code[0] in "th" and nvjet_code[2] == "s"
    if "gemv" in low or (tile and min(int(tile.group(1)), int(tile.group(2))) <= 16) or f32_out:
        return "LoRA small GEMMs"
    for t in tokens:
        if t.lower() in LAYOUT and t.islower():
            return LAYOUT[t.lower()]
    if tokens and re.fullmatch(r"[NT]{3}", tokens[-1]):  # nvjet: ..._NTN, op(A) op(B) then C's
        return LAYOUT.get(tokens[-1][:2].lower(), "GEMM (layout not in name)")
    return "GEMM (layout not in name)"


def classify(name):
    low = name.lower()
    for category, pattern in RULES:
        if re.search(pattern, low):
            return category
    if re.search(GEMM, low):
        return gemm_role(name)
    return "elementwise / other"


def short(name):
    """The kernel's own name: no return type, namespaces, template arguments or parameters."""
    base = re.sub(r"^void\s+|\(anonymous namespace\)::|\b\w+::", "", name.strip())
    own = re.split(r"[<(]", base, maxsplit=1)[0] or base[:60]
    functor = re.match(r"ew_\w+<.*?,\s*(\w+)>\(", base) if own.startswith("ew_") else None
    return own + (f"<{functor.group(1)}>" if functor else "")  # the generic elementwise kernels by functor


def read_launches(path):
    """[(kernel name, ns)] in launch order from an ncu --csv --page raw report."""
    with open(path, newline="") as f:
        lines = f.read().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        sys.exit(f"ncu_census.py: {path} has no ncu --csv --page raw header (a line starting with \"ID\")")
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header = rows[0]
    for col in ("Kernel Name", "gpu__time_duration.sum"):
        if col not in header:
            sys.exit(f"ncu_census.py: {path}'s header has no '{col}' column (got {', '.join(header)})")
    k, t = header.index("Kernel Name"), header.index("gpu__time_duration.sum")
    scale, out = 1.0, []
    for r in rows[1:]:
        if len(r) <= max(k, t):
            continue
        if not r[k] and r[t] in UNIT_NS:  # the units row
            scale = UNIT_NS[r[t]]
            continue
        value = r[t].replace(",", "")
        try:
            out.append((r[k], float(value) * scale))
        except ValueError:
            sys.exit(f"ncu_census.py: {path}: launch {r[0]} has duration '{r[t]}', wanted a number")
    if not out:
        sys.exit(f"ncu_census.py: {path} holds no launches")
    return out


def census(launches, steps, step_ms=None, title="step"):
    by_cat, by_kernel = {}, {}
    for name, ns in launches:
        cat = classify(name)
        c = by_cat.setdefault(cat, [0, 0.0])
        c[0] += 1
        c[1] += ns
        kk = by_kernel.setdefault((short(name), cat), [0, 0.0])
        kk[0] += 1
        kk[1] += ns
    total_ms = sum(ns for _, ns in launches) / 1e6 / steps
    head = ["category", "launches", "ms", "share of kernel time"] + (["share of step"] if step_ms else [])
    lines = [f"### Census: {title}", "",
             f"{len(launches) / steps:.0f} launches and {total_ms:.2f} ms of kernel time a step (ncu, {steps} steps)"
             + (f"; step measured without the profiler: {step_ms:.2f} ms" if step_ms else "") + ".", "",
             "| " + " | ".join(head) + " |", "| --- | ---: | ---: | ---: |" + (" ---: |" if step_ms else "")]
    for cat in ORDER + sorted(set(by_cat) - set(ORDER)):
        if cat not in by_cat:
            continue
        n, ns = by_cat[cat]
        ms = ns / 1e6 / steps
        cells = [cat, f"{n / steps:.0f}", f"{ms:.2f}", f"{100 * ms / total_ms:.1f}%"]
        if step_ms:
            cells.append(f"{100 * ms / step_ms:.1f}%")
        lines.append("| " + " | ".join(cells) + " |")
    cells = ["total", f"{len(launches) / steps:.0f}", f"{total_ms:.2f}", "100.0%"]
    if step_ms:
        cells.append(f"{100 * total_ms / step_ms:.1f}%")
    lines += ["| " + " | ".join(cells) + " |", "", "Most expensive kernels (a step):", "",
              "| kernel | category | launches | ms |", "| --- | --- | ---: | ---: |"]
    top = sorted(by_kernel.items(), key=lambda kv: -kv[1][1])[:25]
    lines += [f"| {k} | {cat} | {n / steps:.0f} | {ns / 1e6 / steps:.3f} |" for (k, cat), (n, ns) in top]
    return "\n".join(lines) + "\n"


def emit(text, out, prefix, title):
    """Prints the table and writes it to `out`, or to $OUT/<prefix>-<title>.md when out is None and OUT is set."""
    print(text, end="")
    if out is None and os.environ.get("OUT"):
        out = os.path.join(os.environ["OUT"], prefix + "-" + re.sub(r"[^A-Za-z0-9.-]+", "-", title) + ".md")
    if out:
        with open(out, "w") as f:
            f.write(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv", help="ncu --csv --page raw report")
    ap.add_argument("--steps", type=int, required=True, help="steps the report holds")
    ap.add_argument("--step-ms", type=float, default=None, help="the step's time without the profiler")
    ap.add_argument("--title", default="step")
    ap.add_argument("--out", default=None, help="also write the table here (default: $OUT/census-<title>.md when OUT is set)")
    args = ap.parse_args()
    if args.steps < 1:
        sys.exit(f"ncu_census.py: --steps wants a positive count, got {args.steps}")
    emit(census(read_launches(args.csv), args.steps, args.step_ms, args.title), args.out, "census", args.title)


if __name__ == "__main__":
    main()
