#!/usr/bin/env python3
"""tapegrad against transformers + peft + torch (run on the GPU machine, which has them; not CI).

interop_dump writes a small Llama (grouped-query heads), a LoRA adapter (non-zero B), AdamW steps
and a GPT-2 with tapegrad; this script loads them with transformers / peft / torch and compares
logits, losses, every gradient and the optimizer steps, then round-trips a Python-written
safetensors file through tapegrad. Exit status 1 if any comparison is out of tolerance.

    python3 tests/interop/check_against_transformers.py <dir> <path to interop_dump>
"""
import sys, subprocess
import torch
from safetensors.torch import load_file, save_file

d = sys.argv[1]
torch.manual_seed(0)
io = load_file(f"{d}/io.safetensors")
rep = []
def cmp(name, a, b, tol):
    a = a.double(); b = b.double()
    err = (a - b).abs().max().item()
    rel = err / max(b.abs().max().item(), 1e-12)
    ok = err <= tol
    rep.append(f"{'OK ' if ok else 'BAD'} {name}: max abs diff {err:.3e} (rel {rel:.2e}, tol {tol})")

import transformers, peft
from transformers import LlamaConfig, LlamaForCausalLM, GPT2Config, GPT2LMHeadModel
rep.append(f"torch {torch.__version__} transformers {transformers.__version__} peft {peft.__version__}")
cfg = LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=344, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                  rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
                  attention_bias=False, mlp_bias=False, hidden_act="silu")
rep.append(f"rope: {getattr(cfg, 'rope_parameters', None) or getattr(cfg, 'rope_theta', None)}")
m = LlamaForCausalLM(cfg).float().eval()
sd = load_file(f"{d}/llama.safetensors")
missing, unexpected = m.load_state_dict(sd, strict=True), None
ids, labels = io["ids"], io["labels"]
out = m(input_ids=ids, labels=labels)
cmp("llama logits vs transformers", io["logits"], out.logits, 2e-5)
cmp("llama loss vs transformers", io["loss"], out.loss, 1e-5)
out.loss.backward()
for n, p in m.named_parameters():
    cmp(f"grad {n}", io["grad." + n], p.grad, 1e-5) if ("layers.0" in n or "embed" in n or "lm_head" in n or n == "model.norm.weight") else None

from peft import PeftModel
m.zero_grad()
pm = PeftModel.from_pretrained(m, f"{d}/adapter", is_trainable=True)
pm.train()
lo = pm(input_ids=ids, labels=labels)
cmp("lora logits vs peft", io["lora_logits"], lo.logits, 2e-5)
lo.loss.backward()
ngr = 0
for n, p in pm.named_parameters():
    if p.requires_grad:
        key = "lora_grad." + n.replace("base_model.model.", "").replace(".default", "")
        cmp(f"lora grad {key}", io[key], p.grad, 1e-5); ngr += 1
rep.append(f"peft trainable tensors: {ngr}")
merged = pm.merge_and_unload()
cmp("merged logits vs peft merge_and_unload", io["merged_logits"], merged(input_ids=ids).logits, 5e-5)

p = torch.nn.Parameter(io["adam.p0"].clone())
opt = torch.optim.AdamW([p], lr=1e-2, weight_decay=0.1)
for s in range(3):
    p.grad = io[f"adam.g{s}"].clone(); opt.step()
    cmp(f"adamw step {s+1} vs torch", io[f"adam.p{s+1}"], p.detach(), 1e-6)

gcfg = GPT2Config(vocab_size=256, n_positions=32, n_embd=128, n_layer=2, n_head=4, resid_pdrop=0.0,
                  embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=1e-5, activation_function="gelu_new")
g = GPT2LMHeadModel(gcfg).float().eval()
gsd = load_file(f"{d}/gpt2.safetensors")
conv = {k: (v.t().contiguous() if any(s in k for s in ("c_attn.weight", "c_proj.weight", "c_fc.weight")) else v)
        for k, v in gsd.items()}
res = g.load_state_dict(conv, strict=False)
rep.append(f"gpt2 load: missing {res.missing_keys} unexpected {res.unexpected_keys}")
go = g(input_ids=ids, labels=labels)
cmp("gpt2 logits vs transformers", io["gpt2_logits"], go.logits, 2e-5)
cmp("gpt2 loss vs transformers", io["gpt2_loss"], go.loss, 1e-5)

# Python-written file -> tapegrad -> back
py = {"f16": torch.randn(3, 4).half(), "bf16": torch.randn(5).bfloat16(), "f32": torch.randn(2, 2),
      "f64": torch.randn(3).double(), "i64": torch.arange(6).reshape(2, 3), "i32": torch.arange(4, dtype=torch.int32),
      "b": torch.tensor([True, False, True]), "scalar": torch.tensor(2.5)}
save_file(py, f"{d}/py.safetensors", metadata={"format": "pt"})
subprocess.run([sys.argv[2], "convert", d], check=True)
back = load_file(f"{d}/py_back.safetensors")
for k, v in py.items():
    want = v.float() if k == "f16" else v
    ok = back[k].dtype == want.dtype and back[k].shape == want.shape and torch.equal(back[k], want)
    rep.append(f"{'OK ' if ok else 'BAD'} python file {k}: {back[k].dtype} {tuple(back[k].shape)}")
print("\n".join(rep))
bad = [r for r in rep if r.startswith("BAD")]
print(f"{len(bad)} BAD of {sum(r.startswith(('OK', 'BAD')) for r in rep)}")
sys.exit(1 if bad else 0)
