#!/usr/bin/env python3
"""bench/torch_toy_lora.py's --jsonl rows as bench/results rows (bench name torch_toy_lora):

    python3 bench/torch_step_rows.py torch.jsonl bench/results/torch_train_step-h200.json
"""
import json
import sys

import torch

from result_rows import write_rows


def main(src, out):
    rows = []
    for line in open(src):
        r = json.loads(line)
        if "ms_step" not in r:
            continue
        rows.append({"script": "bench/torch_toy_lora.py", "torch": torch.__version__, "exec": r["exec"],
                     "config": r["config"].replace("llama-", ""), "mode": r["mode"], "device": r["device"],
                     "dtype": "bf16 autocast" if r["prec"] == "bf16" else "f32", "ms": round(r["ms_step"], 2),
                     "peak_mib": round(r.get("peak_GiB", float("nan")) * 1024)})
    write_rows(out, "torch_toy_lora", torch.cuda.get_device_name(), rows)


if __name__ == "__main__":
    main(*sys.argv[1:])
