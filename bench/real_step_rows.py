#!/usr/bin/env python3
"""One bench/results/train_step-h200-real*.json from train_step_bench's --real-json files and
bench/torch_toy_lora.py's --jsonl rows (scripts/gpu/bench.sh real-step runs all three):

    python3 bench/real_step_rows.py OUT.json tapegrad-*.json [--torch torch.jsonl]

PyTorch's rows become {"impl": "torch_eager" | "torch_compile", "config", "mode", "graph": false,
"ckpt": false, "ms", "tflops", "peak_mib", ...} with the model FLOPs of tapegrad's row of the same
config and mode (the same model: bench/real_llama.h's step_flops), so TFLOP/s compare. A PyTorch
variant that failed (out of memory) is printed and left out.
"""
import argparse
import json

from result_rows import write_rows


def torch_rows(path, flops):
    import torch

    rows = []
    for line in open(path):
        r = json.loads(line)
        name = f"{r['config']} {r['mode']} {r['exec']}"
        if "ms_step" not in r:
            print(f"real_step_rows.py: PyTorch {name}: no time ({r.get('error', 'no ms_step')[:200]})")
            continue
        tflop = flops.get((r["config"], r["mode"]))
        rows.append({"bench": "train_step_real", "machine": torch.cuda.get_device_name(),
                     "impl": "torch_" + r["exec"], "config": r["config"], "mode": r["mode"], "graph": False,
                     "ckpt": r.get("ckpt", False), "dtype": r.get("dtype", "bf16 autocast"),
                     "ms": round(r["ms_step"], 3), "min_ms": round(r["ms_min"], 3),
                     "tok_s": round(r["tok_s"]), "tflop": tflop,
                     "tflops": None if tflop is None else round(tflop / (r["ms_step"] / 1e3), 1),
                     "peak_mib": round(r.get("peak_GiB", float("nan")) * 1024), "torch": torch.__version__,
                     "script": r.get("script", "bench/torch_toy_lora.py"),
                     **({"quant": r["quant"], "batch": r["batch"], "seq": r["seq"]} if "quant" in r else {})})
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("ours", nargs="*", help="train_step_bench --real-json files")
    ap.add_argument("--torch", default=None, help="bench/torch_toy_lora.py --jsonl rows")
    ap.add_argument("--bench", default="train_step_real", help="the rows' bench name (train_step_fp8: issue 52's)")
    args = ap.parse_args()
    ours = [r for path in args.ours for r in json.load(open(path))]
    flops = {(r["config"], r["mode"]): r["tflop"] for r in ours}
    rows = ours + (torch_rows(args.torch, flops) if args.torch else [])
    if not rows:
        raise SystemExit("real_step_rows.py: no rows to write")
    rows = [{**r, "bench": args.bench} for r in rows]
    write_rows(args.out, args.bench, rows[0]["machine"], rows)
    print(f"real_step_rows.py: {len(rows)} rows to {args.out}")


if __name__ == "__main__":
    main()
