#!/usr/bin/env python3
"""The FP8 base's accuracy against bfloat16 (issue 52): two runs of examples/toy_transformer with the
same seed, data and pre-training, LoRA on a bfloat16 base and on the FP8 one (--fp8), compared:

    python3 bench/fp8_accuracy.py OUT.json BF16_OUT BF16_STDOUT FP8_OUT FP8_STDOUT [--machine NAME]

Reads each run's lora/log.csv (a row a step: --logging-steps 1) and its printed samples; prints the
LoRA training loss averaged over steps 51-200 of both, their relative difference (the target: within
1%), the validation loss after LoRA, and the greedy samples side by side; writes one row a run.
Exit status 1 when the base's greedy samples differ (the two pre-trainings were not the same).
"""
import argparse
import csv
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from result_rows import write_rows  # noqa: E402


def losses(run_dir):
    with open(os.path.join(run_dir, "lora", "log.csv")) as f:
        return {int(r["step"]): float(r["loss"]) for r in csv.DictReader(f) if r["loss"]}


def printed(stdout):
    text = open(stdout, encoding="utf-8", errors="replace").read()
    samples = {}  # "<who> greedy #<prompt>": the text, in the order printed
    for who, sample in re.findall(r'^\s+\[(\w+), greedy\]\s+(".*")$', text, re.M):
        samples[f"{who} greedy #{sum(k.startswith(who) for k in samples) + 1}"] = sample
    after = re.search(r"corpus B \(learned\)\s+([\d.]+)\s+([\d.]+)", text)
    return samples, (float(after.group(1)), float(after.group(2))) if after else (None, None)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("bf16_dir")
    p.add_argument("bf16_stdout")
    p.add_argument("fp8_dir")
    p.add_argument("fp8_stdout")
    p.add_argument("--machine", default="unknown")
    a = p.parse_args()
    runs = {"bf16": (losses(a.bf16_dir), *printed(a.bf16_stdout)), "fp8": (losses(a.fp8_dir), *printed(a.fp8_stdout))}
    mean = {}
    for name, (curve, _, _) in runs.items():
        window = [curve[s] for s in range(51, 201) if s in curve]
        if len(window) < 150:
            sys.exit(f"fp8_accuracy.py: the {name} run logged {len(window)} of steps 51-200 (--logging-steps 1, "
                     "--lora-steps >= 200)")
        mean[name] = sum(window) / len(window)
    rel = mean["fp8"] / mean["bf16"] - 1
    print(f"LoRA training loss, mean of steps 51-200: bf16 base {mean['bf16']:.5f}, FP8 base {mean['fp8']:.5f} "
          f"({100 * rel:+.3f}%; target within 1%: {'met' if abs(rel) <= 0.01 else 'MISSED'})")
    for step in sorted({1, 50, 100, 200, max(runs["bf16"][0])}):
        if step in runs["bf16"][0] and step in runs["fp8"][0]:
            print(f"  step {step:4d}: bf16 {runs['bf16'][0][step]:.5f}  fp8 {runs['fp8'][0][step]:.5f}")
    for name, (_, _, (before, after)) in runs.items():
        print(f"validation loss on the fine-tuning text, {name} base: {before} before LoRA, {after} after")
    same_base = True
    for key in sorted(runs["bf16"][1]):
        b, f = runs["bf16"][1][key], runs["fp8"][1].get(key)
        print(f"[{key}]\n  bf16: {b}\n  fp8:  {f}")
        if key.startswith("base") and b != f:
            same_base = False
    rows = [{"base": name, "mean_loss_51_200": round(mean[name], 6), "rel_to_bf16": round(mean[name] / mean["bf16"] - 1, 6),
             "final_loss": curve[max(curve)], "steps": max(curve), "val_loss_after": after}
            for name, (curve, _, (_, after)) in runs.items()]
    write_rows(a.out, "fp8_accuracy", a.machine, rows)
    if not same_base:
        print("fp8_accuracy.py: the base models' greedy samples differ: the pre-trainings were not the same")
        sys.exit(1)


if __name__ == "__main__":
    main()
