#!/usr/bin/env python3
"""Where a training step's time goes as it runs: bench/cupti_timeline.cpp's trace, split into steps.

    CUDA_INJECTION64_PATH=build-gpu/bench/libtg_timeline.so TG_TIMELINE=trace.csv \\
        build-gpu/bench/train_step_bench --config llama-1b --modes lora --warmup 3 --steps 5 ...
    python3 bench/timeline_census.py trace.csv [--window 0] [--title llama-1b-lora] [--out t.md]

ncu_census.py sums kernels timed alone (each with a cold L2 and the GPU's clocks to itself); this
reads the same kernels in place. A step runs from its first kernel (the embedding's, --step-begins)
to the last kernel before the next step's first; the host's work between steps is not counted.
Within a step: busy = the union of the kernels' intervals, idle = span - busy, and each idle
interval is charged to the kernel that follows it (what the GPU waited to start). The window is
the --window'th pair of cudaProfilerStart / Stop marks (train_step_bench's timed steps), or the
whole trace when it has no marks.

Output (stdout, and --out or $OUT/timeline-<title>.md): per step span, busy and idle ms; the
categories (ncu_census.py's rules) with their kernel ms in place and the idle before them; idle
intervals by size; the 15 largest idle intervals with the kernels around them; the costliest
kernels (--kernels). --steps N takes the window as N steps whole, for a step whose first kernel
also runs inside it (moe_step_bench: the embedding kernel gathers the experts' rows).
"""
import argparse
import csv
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ncu_census import ORDER, classify, emit, short  # noqa: E402

BUCKETS = [(0, 2e3, "under 2 us"), (2e3, 5e3, "2-5 us"), (5e3, 20e3, "5-20 us"), (20e3, 100e3, "20-100 us"),
           (100e3, float("inf"), "100 us and over")]


def read_trace(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows or "kind" not in rows[0]:
        sys.exit(f"timeline_census.py: {path} is not a tg_timeline trace (no 'kind,start_ns,...' header or rows)")
    return [(r["kind"], int(r["start_ns"]), int(r["end_ns"]), r["name"]) for r in rows]


def window(rows, k):
    marks = [(i, r[3]) for i, r in enumerate(rows) if r[0] == "mark"]
    if not marks:
        return [r for r in rows if r[0] != "mark"]
    starts = [i for i, name in marks if name == "start"]
    if k >= len(starts):
        sys.exit(f"timeline_census.py: --window {k}, but the trace has {len(starts)} cudaProfilerStart marks")
    begin = starts[k]
    end = next((i for i, name in marks if name == "stop" and i > begin), len(rows))
    return [r for r in rows[begin + 1:end] if r[0] != "mark"]


def split_steps(ops, begins):
    firsts = [i for i, r in enumerate(ops) if r[0] == "kernel" and re.search(begins, r[3])]
    if not firsts:
        sys.exit(f"timeline_census.py: no kernel in the window matches --step-begins '{begins}'")
    return [ops[a:b] for a, b in zip(firsts, firsts[1:] + [len(ops)])]


def step_stats(ops):
    """(span ns, busy ns, [(category, kernel ns)], [(idle ns, before, after)])"""
    kernels, idle, cursor, prev = [], [], None, "(step start)"
    for kind, start, end, name in ops:
        label = name if kind == "kernel" else kind
        kernels.append((classify(name) if kind == "kernel" else "memcpy / memset", end - start, label))
        if cursor is not None and start > cursor:
            idle.append((start - cursor, prev, label))
        if cursor is None or end > cursor:
            cursor, prev = end, label
    span = cursor - ops[0][1]
    return span, span - sum(g for g, _, _ in idle), kernels, idle


def census(rows, begins, title, count=None, top=12):
    """count: the window holds that many steps, taken as one stretch (for a step whose first kernel
    also runs inside it); else the steps split at --step-begins."""
    steps = [step_stats(rows)] if count else [step_stats(s) for s in split_steps(rows, begins)]
    n = count or len(steps)
    spans = [s[0] / 1e6 / (count or 1) for s in steps]
    busy = sum(s[1] for s in steps) / 1e6 / n
    idle_ms = sum(s[0] - s[1] for s in steps) / 1e6 / n  # a mean, as busy: the median span less busy can go negative
    idle_all = [g for s in steps for g in s[3]]
    by_cat = {}
    for s in steps:
        for cat, ns, _ in s[2]:
            c = by_cat.setdefault(cat, [0, 0.0, 0.0])
            c[0] += 1
            c[1] += ns
    for gap, _, after in idle_all:
        cat = "memcpy / memset" if after in ("memcpy", "memset") else classify(after)
        by_cat.setdefault(cat, [0, 0.0, 0.0])[2] += gap
    span = statistics.median(spans)
    kernel_ms = sum(c[1] for c in by_cat.values()) / 1e6 / n
    lines = [f"### Timeline: {title}", "",
             f"{n} steps in place (CUPTI): span {span:.3f} ms a step (median; {min(spans):.3f}-{max(spans):.3f}), "
             f"GPU busy {busy:.3f} ms, idle {idle_ms:.3f} ms in {len(idle_all) / n:.1f} intervals (means); "
             f"{sum(c[0] for c in by_cat.values()) / n:.0f} launches, {kernel_ms:.3f} ms of kernel time.", "",
             "| category | launches | kernel ms | idle ms before it |", "| --- | ---: | ---: | ---: |"]
    for cat in ORDER + sorted(set(by_cat) - set(ORDER)):
        if cat in by_cat:
            c = by_cat[cat]
            lines.append(f"| {cat} | {c[0] / n:.0f} | {c[1] / 1e6 / n:.3f} | {c[2] / 1e6 / n:.3f} |")
    by_kernel = {}
    for s in steps:
        for _, ns, label in s[2]:
            k = by_kernel.setdefault(short(label), [0, 0.0])
            k[0] += 1
            k[1] += ns
    lines += ["", f"The {top} kernels with the most time (a step):", "", "| kernel | launches | ms |", "| --- | ---: | ---: |"]
    for name, (launches, ns) in sorted(by_kernel.items(), key=lambda kv: -kv[1][1])[:top]:
        lines.append(f"| {name} | {launches / n:.0f} | {ns / 1e6 / n:.3f} |")
    lines += ["", "Idle intervals by size (a step):", "", "| size | count | ms |", "| --- | ---: | ---: |"]
    for lo, hi, label in BUCKETS:
        gs = [g for g, _, _ in idle_all if lo <= g < hi]
        lines.append(f"| {label} | {len(gs) / n:.1f} | {sum(gs) / 1e6 / n:.3f} |")
    lines += ["", "Largest idle intervals (all steps):", "", "| us | after | before |", "| ---: | --- | --- |"]
    for g, before, after in sorted(idle_all, key=lambda x: -x[0])[:15]:
        lines.append(f"| {g / 1e3:.1f} | {short(before)} | {short(after)} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace", help="bench/cupti_timeline.cpp's CSV")
    ap.add_argument("--window", type=int, default=0, help="which cudaProfilerStart / Stop pair (0: the first)")
    ap.add_argument("--step-begins", default=r"embedding_forward", help="regex naming a step's first kernel")
    ap.add_argument("--steps", type=int, default=None,
                    help="the window holds this many steps (taken whole, not split at --step-begins)")
    ap.add_argument("--kernels", type=int, default=12, help="how many of the costliest kernels to list")
    ap.add_argument("--title", default="step")
    ap.add_argument("--out", default=None, help="also write here (default: $OUT/timeline-<title>.md when OUT is set)")
    args = ap.parse_args()
    emit(census(window(read_trace(args.trace), args.window), args.step_begins, args.title, args.steps, args.kernels),
         args.out, "timeline", args.title)


if __name__ == "__main__":
    main()
