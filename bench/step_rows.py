#!/usr/bin/env python3
"""Merges one call's training-step measurements into bench/results/train_step.json: tapegrad's
train_step_bench tables (stdout) and PyTorch's torch_toy_lora.py rows (its --jsonl), as flat rows
{"impl", "config", "mode", "dtype", "ms", "peak_gib", "graph", "machine", "date", "commit"}.

    python3 bench/step_rows.py --ours a.txt [b.txt ...] --torch torch.jsonl --machine NAME --commit SHA --out F
"""
import argparse
import datetime
import json


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ours", nargs="+", required=True)
    ap.add_argument("--torch", nargs="*", default=[])
    ap.add_argument("--machine", required=True)
    ap.add_argument("--commit", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    common = {"machine": args.machine, "date": datetime.date.today().isoformat(), "commit": args.commit}
    rows = []
    for path in args.ours:  # "config mode device dtype ms/step min tok/s threads peak MiB"
        for line in open(path):
            f = line.split()
            if len(f) == 9 and f[1] in ("full", "lora") and f[2].startswith("cuda"):
                rows.append({"impl": "tapegrad", "config": f[0], "mode": f[1], "dtype": f[3], "ms": float(f[4]),
                             "peak_gib": round(float(f[8]) / 1024, 2), "graph": False, **common})
    for path in args.torch:
        for line in open(path):
            r = json.loads(line)
            if "ms_step" not in r:
                continue
            rows.append({"impl": "torch_" + r["exec"], "config": r["config"].replace("llama-", ""), "mode": r["mode"],
                         "dtype": "f32" if r["prec"] == "fp32" else r["prec"], "ms": round(r["ms_step"], 2),
                         "peak_gib": round(r.get("peak_GiB", float("nan")), 2), "graph": False, **common})
    for r in rows:
        print(f"{r['impl']:14} {r['config']:11} {r['mode']:4} {r['dtype']:4} {r['ms']:8.2f} ms {r['peak_gib']:6.2f} GiB")
    with open(args.out, "w") as f:
        json.dump(rows, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
