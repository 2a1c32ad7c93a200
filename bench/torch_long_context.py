#!/usr/bin/env python3
"""transformers + peft beside bench/long_context_bench (scripts/gpu/bench.sh long-context): a
LlamaForCausalLM of the llama3-8b shape (random weights, bf16, built on the GPU), LoRA r 16 on
q/k/v/o/gate/up/down (float32 adapters, as peft's autocast_adapter_dtype), gradient checkpointing
(use_reentrant False), SDPA attention, AdamW; batch 1 and T doubled from --start until the step runs
out of memory or --budget-s is spent (the next length is skipped when its step, quadratic in T from
the last, would not fit). One timed step after a warm-up at the first length. Rows as
bench/result_rows.py writes them: impl, config, quant, offload, T, ms, tokens_per_s, peak_mib
(max_memory_allocated), fits.

    python3 bench/torch_long_context.py --json out/torch_long_context.json
"""
import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from result_rows import write_rows  # noqa: E402
from torch_timing import lm_step  # noqa: E402

LLAMA3_8B = dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                 num_attention_heads=32, num_key_value_heads=8, rope_theta=500000.0)
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def build(max_seq, layers):
    import transformers
    import peft
    cfg = dict(LLAMA3_8B, max_position_embeddings=max_seq)
    if layers:
        cfg["num_hidden_layers"] = layers
    config = transformers.LlamaConfig(**cfg, attn_implementation="sdpa")
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)  # made in bf16 on the GPU: no float32 copy of 8B weights
    with torch.device("cuda"):
        model = transformers.LlamaForCausalLM(config)
    torch.set_default_dtype(torch.float32)
    model = peft.get_peft_model(model, peft.LoraConfig(r=16, lora_alpha=32, target_modules=TARGETS))
    for n, p in model.named_parameters():
        if p.requires_grad:
            p.data = p.data.float()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.enable_input_require_grads()
    model.train()
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--start", type=int, default=16384)
    ap.add_argument("--max-seq", type=int, default=524288)
    ap.add_argument("--budget-s", type=float, default=100)
    ap.add_argument("--layers", type=int, default=0)
    ap.add_argument("--json", required=True)
    args = ap.parse_args()
    model = build(args.max_seq, args.layers)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    layers = model.config.num_hidden_layers
    rows, spent, last = [], 0.0, None
    T = args.start
    while T <= args.max_seq:
        if last and spent + last[1] * (T / last[0]) ** 2 > args.budget_s:
            print(f"T {T} skipped: the budget is spent", flush=True)
            break
        row = {"impl": "transformers+peft", "config": "llama3-8b", "quant": "none", "offload": False, "layers": layers,
               "T": T}
        ids = torch.randint(0, LLAMA3_8B["vocab_size"], (1, T), device="cuda")
        step = lm_step(model, opt, ids)

        try:
            if last is None:
                step()
            torch.cuda.reset_peak_memory_stats()
            t0 = time.perf_counter()
            step()
            s = time.perf_counter() - t0
        except torch.OutOfMemoryError:
            row["fits"] = False
            rows.append(row)
            print(f"T {T}: out of memory", flush=True)
            break
        finally:
            opt.zero_grad(set_to_none=True)
            torch.cuda.empty_cache()
        spent += s * (2 if last is None else 1)
        last = (T, s)
        row.update(fits=True, ms=s * 1e3, tokens_per_s=T / s, peak_mib=torch.cuda.max_memory_allocated() / 2**20)
        rows.append(row)
        print(row, flush=True)
        T *= 2
    write_rows(args.json, "torch_long_context", torch.cuda.get_device_name(), rows)


if __name__ == "__main__":
    main()
