"""Benchmark rows as bench/results/<name>.json holds them (Python side of bench/bench_json.h):
an array of flat objects, each naming the benchmark, the machine, the date and the commit.

    from result_rows import write_rows
    write_rows("bench/results/torch_norm.json", "torch_norm_ref", "NVIDIA H200", [{"op": ..., "us": ...}])
"""
import datetime
import json
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def commit():
    """The repository's commit, '-dirty' when tracked files differ from it ('unknown' outside git);
    $TG_COMMIT, when set, wins (a copy of the tree whose .git is stale or missing: the GPU machine's)."""
    if os.environ.get("TG_COMMIT"):
        return os.environ["TG_COMMIT"]
    try:
        sha = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short=7", "HEAD"], capture_output=True, text=True,
                             check=True).stdout.strip()
        changes = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                                 capture_output=True, text=True, check=True).stdout.strip()
        return sha + ("-dirty" if changes else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def write_rows(path, bench, machine, rows):
    """Writes `rows` (dicts of strings and numbers) to `path` atomically, each with the benchmark,
    machine, date (UTC) and commit first."""
    head = {"bench": bench, "machine": machine, "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
            "commit": commit()}
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("[\n" + ",\n".join("  " + json.dumps({**head, **r}) for r in rows) + "\n]\n")
    os.replace(tmp, path)
