#!/usr/bin/env python3
"""Tokenizer speed, tapegrad against Hugging Face tokenizers, in one run on one machine.

    cmake --build build --target tokenizer_bench
    python3 bench/tokenizer_bench.py build [--tokenizer DIR ...] [--docs FILE.jsonl] [--mb 10]

The text: about --mb MB of documents, by default the Python standard library's sources (code,
docstrings, some non-ASCII), one document a file, written as JSONL. The tokenizers: the given
folders, or three trained here on that text with tokenizers' BpeTrainer (32000 tokens): GPT-2's
byte-level BPE, Llama-3's Split + ByteLevel (ignore_merges) and a SentencePiece-style BPE with
byte fallback (Llama-2 / TinyLlama: no pre-tokenizer, each document one word). For each, Hugging
Face tokenizers encodes the documents one after another (single-threaded) and with
encode_batch (all cores), then build/bench/tokenizer_bench does the same; both report seconds
(median of 3) and MB/s, and their ids are compared by checksum. The rows go to
bench/results/tokenizer.json (bench/result_rows.py: machine, date, commit in each); a mismatch of
ids exits 1.
"""
import argparse
import glob
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import tokenizers
from result_rows import write_rows
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LLAMA3_REGEX = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
                r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")


def make_docs(path, mb):
    files = sorted(glob.glob(os.path.join(os.path.dirname(os.__file__), "**", "*.py"), recursive=True))
    total = 0
    with open(path, "w", encoding="utf-8") as f:
        for p in files:
            try:
                text = open(p, encoding="utf-8").read()
            except (UnicodeDecodeError, OSError):
                continue
            f.write(json.dumps({"text": text}) + "\n")
            total += len(text.encode())
            if total >= mb * 1_000_000:
                break


def train(kind, docs, out_dir):
    if kind == "spm_bpe":
        tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
        special = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
        trainer = trainers.BpeTrainer(vocab_size=32000, special_tokens=special, show_progress=False, limit_alphabet=1000)
    else:
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = (pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True) if kind == "gpt2" else
                             pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated"),
                                                      pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]))
        trainer = trainers.BpeTrainer(vocab_size=32000, show_progress=False, special_tokens=["<|endoftext|>"],
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(docs, trainer=trainer)
    d = json.loads(tok.to_str())
    if kind == "spm_bpe":  # as Llama-2 writes it: no pre-tokenizer, the prefix and spaces as normalizers
        d["pre_tokenizer"] = None
        d["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                                                               {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}
        # The byte tokens belong to the vocabulary, not to the added tokens.
        d["added_tokens"] = [t for t in d["added_tokens"] if not t["content"].startswith("<0x")]
    if kind == "llama3":
        d["model"]["ignore_merges"] = True
    tok = Tokenizer.from_str(json.dumps(d))
    tok.decoder = decoders.ByteLevel() if kind != "spm_bpe" else decoders.Sequence(
        [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    path = os.path.join(out_dir, kind)
    os.makedirs(path, exist_ok=True)
    tok.save(os.path.join(path, "tokenizer.json"))
    return path


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def checksum(all_ids):
    """FNV-1a over every id, each document closed by 0xFFFFFFFF: tokenizer_bench's checksum."""
    h = 1469598103934665603
    for ids in all_ids:
        for v in ids + [0xFFFFFFFF]:
            h = ((h ^ v) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def median_seconds(fn, repeat):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def bench_hf(path, docs, repeat):
    tok = Tokenizer.from_file(os.path.join(path, "tokenizer.json")) if os.path.isdir(path) else Tokenizer.from_file(path)
    nbytes = sum(len(d.encode()) for d in docs)
    [tok.encode(d, add_special_tokens=False) for d in docs]  # warm its cache, as tapegrad's run does
    rows = []
    for mode in ("single-thread", "parallel"):
        if mode == "single-thread":
            s, enc = median_seconds(lambda: [tok.encode(d, add_special_tokens=False) for d in docs], repeat)
        else:
            s, enc = median_seconds(lambda: tok.encode_batch(docs, add_special_tokens=False), repeat)
        ids = [e.ids for e in enc]
        rows.append({"impl": f"tokenizers {tokenizers.__version__}", "mode": mode,
                     "threads": 1 if mode == "single-thread" else os.cpu_count(), "seconds": s,
                     "mb_per_s": nbytes / 1e6 / s, "docs": len(docs), "bytes": nbytes,
                     "tokens": sum(len(i) for i in ids), "checksum": checksum(ids)})
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build")
    ap.add_argument("--tokenizer", action="append", help="a model folder or tokenizer.json (repeatable)")
    ap.add_argument("--docs", help="JSONL of {\"text\"} documents (default: the standard library's sources)")
    ap.add_argument("--mb", type=float, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "tokenizer.json"))
    args = ap.parse_args()
    binary = os.path.join(os.path.abspath(args.build), "bench", "tokenizer_bench")
    if not os.access(binary, os.X_OK):
        sys.exit(f"no {binary}: cmake --build {args.build} --target tokenizer_bench")
    work = tempfile.mkdtemp(prefix="tg_tokbench_")
    docs_path = args.docs or os.path.join(work, "docs.jsonl")
    if not args.docs:
        make_docs(docs_path, args.mb)
    docs = [json.loads(line)["text"] for line in open(docs_path, encoding="utf-8") if line.strip()]
    paths = args.tokenizer or [train(k, docs, work) for k in ("gpt2", "llama3", "spm_bpe")]
    rows, ok = [], True
    for path in paths:
        hf = bench_hf(path, docs, args.repeat)
        res = subprocess.run([binary, "--tokenizer", path, "--docs", docs_path, "--repeat", str(args.repeat)],
                             check=True, capture_output=True, text=True)
        ours = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
        name = os.path.basename(path.rstrip("/"))
        for r in hf + ours:
            r["tokenizer_name"] = name
            r["ids_match"] = r["checksum"] == hf[0]["checksum"]
            ok &= r["ids_match"]
            rows.append(r)
        for a, b in zip(ours, hf):
            print(f"{name:10s} {a['mode']:13s} tapegrad {a['mb_per_s']:8.2f} MB/s  tokenizers {b['mb_per_s']:8.2f} MB/s"
                  f"  ({a['mb_per_s'] / b['mb_per_s']:.2f}x)  ids {'match' if a['ids_match'] else 'DIFFER'}")
    text = docs_path if args.docs else f"Python {platform.python_version()} standard library, {args.mb} MB"
    for r in rows:
        r["text"] = text
    write_rows(args.out, "tokenizer_bench", f"{cpu_name()}, {os.cpu_count()} CPUs", rows)
    print(f"wrote {args.out}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
