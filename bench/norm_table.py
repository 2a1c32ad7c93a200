#!/usr/bin/env python3
"""The norm-backward table of bench/RESULTS.md from one run's two CSV files.

    bench/norm_table.py ours.csv torch.csv

ours.csv is `norm_bench --csv`, torch.csv is `torch_norm_ref.py --csv` of the same run. Each row
names the targets of issue #4 it misses: slower than PyTorch eager or torch.compile; a frozen
backward (RMS "frozen", LayerNorm "both_frozen") below 0.90 of copy bandwidth from 200 MB of
traffic up or below 0.70 from 50 MB; a full backward below 0.85 from 200 MB up or over 1.10x
our frozen time of the same problem.
"""
import csv
import sys


def main():
    ours_path, torch_path = sys.argv[1], sys.argv[2]
    ours = list(csv.DictReader(open(ours_path)))
    ref = {}
    for r in csv.DictReader(open(torch_path)):
        ref[(r["backend"], r["op"], r["dtype"], r["rows"], r["dim"], r["mode"])] = float(r["us"])
    frozen_us = {}
    for r in ours:
        if r["mode"] in ("frozen", "both_frozen"):
            frozen_us[(r["op"], r["dtype"], r["rows"], r["dim"])] = float(r["us"])
    print("| op | dtype | rows x dim | mode | ours µs | eager µs | compile µs | eager/ours | compile/ours "
          "| min MB | fraction of copy BW | full/frozen | misses |")
    print("| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    counted = missed = 0
    for r in ours:
        key = (r["op"], r["dtype"], r["rows"], r["dim"])
        us, mb = float(r["us"]), float(r["min_bytes"]) / 1e6
        frac = float(r["min_bytes"]) / (us * 1e-6) / float(r["copy_bw"])
        eager = ref.get(("eager",) + key + (r["mode"],))
        comp = ref.get(("compile",) + key + (r["mode"],))
        misses = []
        if eager is not None and eager < us:
            misses.append("eager")
        if comp is not None and comp < us:
            misses.append("compile")
        ratio = ""
        if r["mode"] in ("frozen", "both_frozen"):
            if mb >= 200 and frac < 0.90:
                misses.append("BW<0.90")
            elif 50 <= mb < 200 and frac < 0.70:
                misses.append("BW<0.70")
        if r["mode"] == "full":
            if mb >= 200 and frac < 0.85:
                misses.append("BW<0.85")
            f = frozen_us.get(key)
            if f:
                ratio = f"{us / f:.2f}"
                if us > 1.10 * f:
                    misses.append(f"full {us / f:.2f}x frozen")
        counted += 1
        missed += bool(misses)
        fmt = lambda v: "–" if v is None else f"{v:.1f}"
        rel = lambda v: "–" if v is None else f"{v / us:.2f}"
        print(f"| {r['op']} | {r['dtype']} | {r['rows']}x{r['dim']} | {r['mode']} | {us:.1f} | {fmt(eager)} | "
              f"{fmt(comp)} | {rel(eager)} | {rel(comp)} | {mb:.0f} | {frac:.2f} | {ratio} | {', '.join(misses)} |")
    print(f"\n{missed} of {counted} rows miss at least one target.")


if __name__ == "__main__":
    main()
