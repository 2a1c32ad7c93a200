#!/usr/bin/env python3
"""tapegrad's Hugging Face interop against transformers + peft (issue 7). Not CI: run it from the
repository root on a machine with torch, transformers and peft, after building interop_dump:

    cmake --build build-gpu --target interop_dump
    python3 tests/interop/check_hf_roundtrip.py build-gpu [--write-fixtures]

For a small random Llama (grouped-query heads; also once with tied embeddings) and a small GPT-2,
everything in float32 on the CPU:
  1. transformers save_pretrained (one file, sharded, bf16, f16) -> tapegrad from_pretrained:
     logits and loss (bf16/f16 against transformers loading the same folder in float32);
  2. a peft adapter with non-zero B -> tapegrad load_adapter: logits, loss, every LoRA A/B gradient;
  3. an adapter written by tapegrad -> peft PeftModel.from_pretrained: logits;
  4. tapegrad save_pretrained (one file, sharded) -> transformers from_pretrained: logits.
The relative difference is max|got - want| / max|want| over the tensor. Exit status 1 when float32
logits or losses differ by more than 1e-5, or gradients by more than 1e-4.
--write-fixtures also writes tests/fixtures/hf/ for tests/test_hf.cpp: <name>/ (transformers'
folder), <name>_adapter/ (peft's adapter) and <name>_expected.safetensors (ids, labels, logits,
loss, lora_logits, lora_loss, grad.<adapter key>) for name = llama, gpt2.
"""
import copy
import os
import shutil
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file, save_file

import peft
import transformers
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "hf")
LOGIT_TOL, GRAD_TOL = 1e-5, 1e-4
LLAMA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
GPT2_TARGETS = ["c_attn", "c_proj", "c_fc"]
report = []


def check(name, got, want, tol):
    if tuple(got.shape) != tuple(want.shape):
        report.append(f"BAD {name}: shape {tuple(got.shape)}, wants {tuple(want.shape)}")
        return
    got, want = got.detach().double(), want.detach().double()
    rel = ((got - want).abs().max() / want.abs().max().clamp_min(1e-30)).item()
    report.append(f"{'OK ' if rel <= tol else 'BAD'} {name}: max rel diff {rel:.2e} (tol {tol:.0e})")


def expect(name, ok, detail=""):
    report.append(f"{'OK ' if ok else 'BAD'} {name}{': ' + str(detail) if detail else ''}")


def perturb(model):
    """Random norm weights and biases too (transformers initialises them to 1 and 0)."""
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model.float().eval()


def make_llama(tie):
    torch.manual_seed(0)
    # transformers 5 takes RoPE as rope_parameters, 4 as rope_theta.
    v5 = int(transformers.__version__.split(".")[0]) >= 5
    rope = {"rope_parameters": {"rope_type": "default", "rope_theta": 1000.0}} if v5 else {"rope_theta": 1000.0}
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                      rms_norm_eps=1e-6, initializer_range=0.1, tie_word_embeddings=tie,
                      attention_bias=False, mlp_bias=False, hidden_act="silu", **rope)
    theta = cfg.rope_parameters["rope_theta"] if v5 else cfg.rope_theta
    assert theta == 1000.0, f"rope theta not applied: {cfg}"
    return perturb(LlamaForCausalLM(cfg))


def make_gpt2():
    torch.manual_seed(1)
    cfg = GPT2Config(vocab_size=96, n_positions=32, n_embd=32, n_layer=2, n_head=4, n_inner=None,
                     activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                     layer_norm_epsilon=1e-5, initializer_range=0.1)
    return perturb(GPT2LMHeadModel(cfg))


def run_tapegrad(binary, work, model_dir, inputs, adapter=None):
    out = os.path.join(work, "tapegrad_out.safetensors")
    subprocess.run([binary, "hf-run", model_dir, inputs, out] + ([adapter] if adapter else []), check=True)
    return load_file(out)


def forward(model, ids, labels):
    out = model(input_ids=ids, labels=labels)
    return out.logits.detach(), out.loss


def check_model(name, model, targets, binary, work, write_fixtures):
    d = os.path.join(work, name)
    os.makedirs(d)
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (2, 12), generator=torch.Generator().manual_seed(7))
    labels = ids.clone()
    labels[0, 3] = -100
    labels[1, 7] = -100
    inputs = os.path.join(d, "inputs.safetensors")
    save_file({"ids": ids, "labels": labels}, inputs)
    with torch.no_grad():
        logits, loss = forward(model, ids, labels)
    state_bytes = sum(t.numel() * t.element_size() for t in model.state_dict().values())

    # 1. transformers -> tapegrad
    model.save_pretrained(os.path.join(d, "hf"))
    model.save_pretrained(os.path.join(d, "hf_sharded"), max_shard_size=state_bytes // 3)
    expect(f"{name}: transformers wrote shards", os.path.exists(os.path.join(d, "hf_sharded", "model.safetensors.index.json")))
    for sub in ("hf", "hf_sharded"):
        out = run_tapegrad(binary, work, os.path.join(d, sub), inputs)
        check(f"{name} {sub} -> tapegrad: logits", out["logits"], logits, LOGIT_TOL)
        check(f"{name} {sub} -> tapegrad: loss", out["loss"], loss, LOGIT_TOL)
    for dtype in (torch.bfloat16, torch.float16):
        sub = f"hf_{str(dtype).split('.')[-1]}"
        low = copy.deepcopy(model).to(dtype)
        low.save_pretrained(os.path.join(d, sub))
        # transformers' own float32 load of that folder: the rounded weights widened, the rotary
        # frequencies computed afresh in float32 (low.float() keeps them rounded to `dtype`).
        ref = AutoModelForCausalLM.from_pretrained(os.path.join(d, sub), dtype=torch.float32)
        with torch.no_grad():
            want_logits, want_loss = forward(ref, ids, labels)
        out = run_tapegrad(binary, work, os.path.join(d, sub), inputs)
        check(f"{name} {sub} -> tapegrad: logits", out["logits"], want_logits, LOGIT_TOL)
        check(f"{name} {sub} -> tapegrad: loss", out["loss"], want_loss, LOGIT_TOL)

    # 2. a peft adapter with non-zero B -> tapegrad
    is_gpt2 = name.startswith("gpt2")
    lora = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=targets, bias="none",
                      fan_in_fan_out=is_gpt2, init_lora_weights=False, task_type="CAUSAL_LM")
    pm = get_peft_model(copy.deepcopy(model), lora)
    pm.eval()
    lora_logits, lora_loss = forward(pm, ids, labels)
    lora_loss.backward()
    grads = {"grad." + n.replace(".default", ""): p.grad.detach().clone()
             for n, p in pm.named_parameters() if p.requires_grad}
    expect(f"{name}: the peft adapter changes the logits, every LoRA gradient is non-zero",
           all(g.abs().max() > 0 for k, g in grads.items()) and (lora_logits - logits).abs().max() > 1e-3)
    pm.save_pretrained(os.path.join(d, "peft_adapter"))
    out = run_tapegrad(binary, work, os.path.join(d, "hf"), inputs, os.path.join(d, "peft_adapter"))
    check(f"{name} peft adapter -> tapegrad: logits", out["logits"], lora_logits, LOGIT_TOL)
    check(f"{name} peft adapter -> tapegrad: loss", out["loss"], lora_loss, LOGIT_TOL)
    got_grads = {k: v for k, v in out.items() if k.startswith("grad.")}
    expect(f"{name}: tapegrad has the {len(grads)} LoRA gradients peft has", sorted(got_grads) == sorted(grads),
           sorted(set(got_grads) ^ set(grads))[:4])
    for k in sorted(set(got_grads) & set(grads)):
        check(f"{name} {k}", got_grads[k], grads[k], GRAD_TOL)

    # 3. and 4.: tapegrad's adapter -> peft, tapegrad's save_pretrained -> transformers
    tg = os.path.join(d, "tg")
    subprocess.run([binary, "hf-export", os.path.join(d, "hf"), tg, str(state_bytes // 3), ",".join(targets)], check=True)
    pm2 = PeftModel.from_pretrained(copy.deepcopy(model), os.path.join(tg, "adapter"))
    pm2.eval()
    with torch.no_grad():
        peft_logits = pm2(input_ids=ids).logits
    out = run_tapegrad(binary, work, os.path.join(d, "hf"), inputs, os.path.join(tg, "adapter"))
    expect(f"{name}: tapegrad adapter changes the logits", (peft_logits - logits).abs().max() > 1e-3)
    check(f"{name} tapegrad adapter -> peft: logits", out["logits"], peft_logits, LOGIT_TOL)
    for sub in ("model", "model_sharded"):
        loaded, info = AutoModelForCausalLM.from_pretrained(os.path.join(tg, sub), output_loading_info=True)
        problems = {k: v for k, v in info.items() if v}
        expect(f"{name} tapegrad {sub} -> transformers: every tensor loaded", not problems, problems)
        with torch.no_grad():
            got = loaded.float().eval()(input_ids=ids).logits
        check(f"{name} tapegrad {sub} -> transformers: logits", got, logits, LOGIT_TOL)

    if write_fixtures:
        shutil.copytree(os.path.join(d, "hf"), os.path.join(FIXTURES, name))
        shutil.copytree(os.path.join(d, "peft_adapter"), os.path.join(FIXTURES, name + "_adapter"),
                        ignore=shutil.ignore_patterns("README.md"))
        expected = {"ids": ids, "labels": labels, "logits": logits, "loss": loss.detach(),
                    "lora_logits": lora_logits, "lora_loss": lora_loss.detach(), **grads}
        save_file({k: v.contiguous() for k, v in expected.items()},
                  os.path.join(FIXTURES, name + "_expected.safetensors"))


def main():
    if len(sys.argv) not in (2, 3) or (len(sys.argv) == 3 and sys.argv[2] != "--write-fixtures"):
        sys.exit(__doc__)
    binary = os.path.join(os.path.abspath(sys.argv[1]), "tests", "interop_dump")
    if not os.access(binary, os.X_OK):
        sys.exit(f"no {binary}: build it first (cmake --build {sys.argv[1]} --target interop_dump)")
    write_fixtures = len(sys.argv) == 3
    torch.set_grad_enabled(True)
    report.append(f"torch {torch.__version__} transformers {transformers.__version__} peft {peft.__version__}")
    if write_fixtures:
        shutil.rmtree(FIXTURES, ignore_errors=True)
        os.makedirs(FIXTURES)
    work = tempfile.mkdtemp(prefix="tg_hf_")
    try:
        check_model("llama", make_llama(tie=False), LLAMA_TARGETS, binary, work, write_fixtures)
        check_model("llama_tied", make_llama(tie=True), ["q_proj", "v_proj"], binary, work, False)
        check_model("gpt2", make_gpt2(), GPT2_TARGETS, binary, work, write_fixtures)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("\n".join(report))
    bad = [r for r in report if r.startswith("BAD")]
    print(f"{len(bad)} BAD of {sum(r.startswith(('OK', 'BAD')) for r in report)}")
    if write_fixtures:
        size = sum(os.path.getsize(os.path.join(p, f)) for p, _, fs in os.walk(FIXTURES) for f in fs)
        print(f"wrote {FIXTURES} ({size // 1024} KB)")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
