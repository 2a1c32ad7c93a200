#!/usr/bin/env python3
"""One results file of several: merge_rows.py OUT.json IN.json... [--sort key,key] writes every
input's rows (a JSON list each) into OUT.json, one row a line as bench/results/ holds them, in order
or sorted by those keys; the file is replaced whole (no half-written results)."""
import argparse
import json
import os

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("inputs", nargs="+")
parser.add_argument("--sort", help="comma-separated row keys")
args = parser.parse_args()
rows = [r for path in args.inputs for r in json.load(open(path))]
if args.sort:
    keys = args.sort.split(",")
    rows.sort(key=lambda r: tuple(r[k] for k in keys))
with open(args.out + ".tmp", "w") as f:
    f.write("[\n" + ",\n".join("  " + json.dumps(r) for r in rows) + "\n]\n")
os.replace(args.out + ".tmp", args.out)
print(f"{args.out}: {len(rows)} rows from {len(args.inputs)} files")
