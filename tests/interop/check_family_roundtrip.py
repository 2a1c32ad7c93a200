#!/usr/bin/env python3
"""tapegrad's save_pretrained folders and adapters of every fixture family, read by transformers + peft
(issue 34). Not CI: run it from the repository root on a machine with torch, transformers and peft,
after building interop_dump:

    cmake --build build-gpu --target interop_dump
    python3 tests/interop/check_family_roundtrip.py build-gpu [family ...]

For each family of tests/fixtures/hf/make_family_fixtures.py (default: all of them), on the CPU in
float32 with eager attention (transformers' sdpa path drops Gemma 2's soft-capping):
  1. tapegrad from_pretrained(fixture) -> save_pretrained (one file, sharded) -> transformers
     from_pretrained: every tensor loaded, the config's options as transformers read them in the
     fixture, and the fixture's logits;
  2. tapegrad's adapter (non-zero B on the fixture adapter's targets) -> peft PeftModel.from_pretrained
     on the fixture model: the logits tapegrad computes with that adapter.
Exit status 1 when logits differ by more than 1e-5 relative to their largest magnitude, or an option
or tensor is lost.
"""
import json
import os
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file, save_file

from peft import PeftModel
from transformers import AutoConfig, AutoModelForCausalLM

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "hf")
FAMILIES = ["llama3", "llama_linear", "llama_dynamic", "mistral", "qwen2", "qwen3", "gemma2", "gemma3", "phi3",
            "llama_yarn", "phi3_longrope", "phi3_longrope_short", "smollm3", "olmo2"]
# The config attributes that change the computation, compared between the fixture and tapegrad's save.
OPTIONS = ["hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
           "head_dim", "rms_norm_eps", "tie_word_embeddings", "attention_bias", "mlp_bias", "sliding_window",
           "layer_types", "rope_parameters", "query_pre_attn_scalar", "attn_logit_softcapping",
           "final_logit_softcapping", "hidden_activation", "hidden_act", "use_sliding_window", "no_rope_layers"]
TOL = 1e-5
failures = []


def check(name, got, want):
    rel = ((got - want).abs().max() / want.abs().max().clamp_min(1e-30)).item()
    ok = rel <= TOL
    print(f"{'ok  ' if ok else 'FAIL'} {name}: relative difference {rel:.2e}")
    if not ok:
        failures.append(name)


def expect(name, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {name}{'' if ok else ': ' + str(detail)}")
    if not ok:
        failures.append(name)


def load(path):
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager").eval()


def check_family(binary, work, name):
    fixture = os.path.join(FIXTURES, name)
    want = load_file(os.path.join(FIXTURES, name + "_expected.safetensors"))
    ids = want["ids"]
    with open(os.path.join(FIXTURES, name + "_adapter", "adapter_config.json")) as f:
        targets = json.load(f)["target_modules"]
    out = os.path.join(work, name)
    state_bytes = os.path.getsize(os.path.join(fixture, "model.safetensors"))
    subprocess.run([binary, "hf-export", fixture, out, str(state_bytes // 3), ",".join(targets)], check=True)

    ref_config = AutoConfig.from_pretrained(fixture)
    for sub in ("model", "model_sharded"):
        config = AutoConfig.from_pretrained(os.path.join(out, sub))
        for key in OPTIONS:
            if hasattr(ref_config, key):
                expect(f"{name} {sub}: {key}", getattr(config, key, None) == getattr(ref_config, key),
                       f"{getattr(config, key, None)!r}, fixture {getattr(ref_config, key)!r}")
        model, info = AutoModelForCausalLM.from_pretrained(os.path.join(out, sub), dtype=torch.float32,
                                                           attn_implementation="eager", output_loading_info=True)
        problems = {k: v for k, v in info.items() if v}
        expect(f"{name} tapegrad {sub} -> transformers: every tensor loaded", not problems, problems)
        with torch.no_grad():
            check(f"{name} tapegrad {sub} -> transformers: logits", model.eval()(input_ids=ids).logits, want["logits"])

    inputs = os.path.join(work, name + "_inputs.safetensors")
    save_file({"ids": ids.contiguous(), "labels": want["labels"].contiguous()}, inputs)
    got = os.path.join(work, name + "_tapegrad.safetensors")
    subprocess.run([binary, "hf-run", fixture, inputs, got, os.path.join(out, "adapter")], check=True)
    pm = PeftModel.from_pretrained(load(fixture), os.path.join(out, "adapter")).eval()
    with torch.no_grad():
        peft_logits = pm(input_ids=ids).logits
    expect(f"{name}: tapegrad's adapter changes the logits", (peft_logits - want["logits"]).abs().max() > 1e-3)
    check(f"{name} tapegrad adapter -> peft: logits", load_file(got)["logits"], peft_logits)


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: check_family_roundtrip.py <build dir> [family ...]")
    binary = os.path.join(sys.argv[1], "tests", "interop_dump")
    names = sys.argv[2:] or FAMILIES
    with tempfile.TemporaryDirectory() as work:
        for name in names:
            try:
                check_family(binary, work, name)
            except Exception as e:  # report every family, then fail
                expect(f"{name}: ran", False, f"{type(e).__name__}: {e}")
    print(f"{len(failures)} failures" + (f": {failures}" if failures else ""))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
