#!/usr/bin/env python3
"""lora_finetune's adapter, loaded by peft (issue 23's "Done when"). Not CI: run from the
repository root on a machine with torch, transformers and peft, after building:

    cmake --build build --target lora_finetune interop_dump
    python3 tests/interop/check_lora_finetune_peft.py build [--device cpu|cuda]

For each of tests/fixtures/tokenizers/tiny_llama and tiny_gpt2 (folders transformers'
save_pretrained wrote, with their tokenizers): lora_finetune trains an adapter on a small JSONL
task (--merge too); then transformers loads the base folder, peft loads the adapter onto it
(PeftModel.from_pretrained), and its float32 logits on a batch of the task's tokens (tokenized by
transformers' AutoTokenizer) are compared with tapegrad's for the same base and adapter
(interop_dump hf-run); the merged folder is loaded by transformers (AutoModelForCausalLM and
AutoTokenizer) and compared too. Prints the max absolute and relative differences; exits 1 when
a relative difference exceeds 1e-5, the adapter changed nothing, or a folder does not load.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file, save_file

import peft
import transformers
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "tokenizers")
TOL = 1e-5
report, failed = [], False


def note(ok, text):
    global failed
    failed |= not ok
    report.append(f"{'OK ' if ok else 'BAD'} {text}")


def compare(name, got, want):
    got, want = got.detach().double().cpu(), want.detach().double().cpu()
    if got.shape != want.shape:
        return note(False, f"{name}: shape {tuple(got.shape)}, wants {tuple(want.shape)}")
    diff = (got - want).abs().max().item()
    rel = diff / max(want.abs().max().item(), 1e-30)
    note(rel <= TOL, f"{name}: max abs diff {diff:.3e}, max rel diff {rel:.3e} (tol {TOL:.0e})")


def task(path):
    names, colours = ["alice", "bob", "carol", "dave", "erin"], ["red", "green", "blue", "black"]
    lines = [{"prompt": f"Q: what does {names[i % 5]} like?\nA:", "completion": f" {names[i % 5]} likes {colours[i * 7 % 4]}."}
             for i in range(120)]
    with open(path, "w") as f:
        f.writelines(json.dumps(l) + "\n" for l in lines)
    return lines


def check(name, build, device, work):
    base = os.path.join(FIXTURES, name)
    out = os.path.join(work, name)
    lines = task(os.path.join(work, "train.jsonl"))
    subprocess.run([os.path.join(build, "examples", "lora_finetune"), "--base", base, "--data",
                    os.path.join(work, "train.jsonl"), "--steps", "40", "--warmup", "2", "--batch", "4", "--seq", "48",
                    "--lr", "1e-2", "--eval-every", "20", "--device", device, "--merge", "--out", out],
                   check=True, stdout=subprocess.DEVNULL)
    cfg = json.load(open(os.path.join(out, "adapter", "adapter_config.json")))
    note(cfg["base_model_name_or_path"] == base, f"{name}: adapter_config base_model_name_or_path {cfg['base_model_name_or_path']}")

    tok = AutoTokenizer.from_pretrained(base)
    enc = [tok(l["prompt"] + l["completion"])["input_ids"][:16] for l in lines[:3]]
    ids = torch.tensor([e + [e[-1]] * (16 - len(e)) for e in enc])
    inputs = os.path.join(work, f"{name}_inputs.safetensors")
    save_file({"ids": ids, "labels": ids.clone()}, inputs)

    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32).eval()
    with torch.no_grad():
        base_logits = model(input_ids=ids).logits
    pm = PeftModel.from_pretrained(model, os.path.join(out, "adapter")).eval()
    with torch.no_grad():
        peft_logits = pm(input_ids=ids).logits
    change = (peft_logits - base_logits).abs().max().item() / base_logits.abs().max().item()
    note(change > 1e-3, f"{name}: the adapter changes peft's logits (max rel change {change:.3e})")

    dump = os.path.join(build, "tests", "interop_dump")
    tg_out = os.path.join(work, f"{name}_tg.safetensors")
    subprocess.run([dump, "hf-run", base, inputs, tg_out, os.path.join(out, "adapter")], check=True)
    compare(f"{name}: tapegrad base + adapter vs peft", load_file(tg_out)["logits"], peft_logits)

    merged = AutoModelForCausalLM.from_pretrained(os.path.join(out, "merged"), dtype=torch.float32).eval()
    with torch.no_grad():
        merged_logits = merged(input_ids=ids).logits
    compare(f"{name}: transformers loads the merged folder, vs peft", merged_logits, peft_logits)
    merged_tok = AutoTokenizer.from_pretrained(os.path.join(out, "merged"))
    text = lines[0]["prompt"] + lines[0]["completion"]
    note(merged_tok(text)["input_ids"] == tok(text)["input_ids"], f"{name}: the merged folder's tokenizer is the base's")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    for b in ("examples/lora_finetune", "tests/interop_dump"):
        if not os.access(os.path.join(build, b), os.X_OK):
            sys.exit(f"no {build}/{b}: cmake --build {args.build} --target lora_finetune interop_dump")
    report.append(f"torch {torch.__version__} transformers {transformers.__version__} peft {peft.__version__}")
    with tempfile.TemporaryDirectory(prefix="tg_peft_") as work:
        for name in ("tiny_llama", "tiny_gpt2"):
            try:
                check(name, build, args.device, work)
            except Exception as e:  # one model's failure still reports the other
                note(False, f"{name}: {type(e).__name__}: {e}")
    print("\n".join(report))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
