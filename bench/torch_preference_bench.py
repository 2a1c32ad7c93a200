#!/usr/bin/env python3
"""PyTorch's side of bench/dpo_step_bench's two modes (issue 50), the same shapes.

--mode dpo: a LoRA DPO step of transformers' LlamaForCausalLM (bench/real_llama.h's llama-1b shape,
random weights) with peft's LoRA (q/k/v/o, r 8, float32 adapters on the bf16 base under autocast):
the concatenated batch's logits, TRL's selective_log_softmax over the completions, the reference
under no_grad with the adapter disabled, TRL's sigmoid loss, backward, AdamW; eager and
torch.compile (the model's forward compiled). --mode rollout: transformers' generate sampling from
the peft model (not merged) at GRPO's batch. The median of --steps / --runs; rows to --out.
TRL itself is not needed: its loss is written here from its definitions.

    python3 bench/torch_preference_bench.py --mode dpo --out torch_dpo.json
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from result_rows import write_rows  # noqa: E402

CONFIGS = {  # bench/real_llama.h
    "bench-135m": dict(vocab_size=32000, hidden_size=768, intermediate_size=2048, num_hidden_layers=12,
                       num_attention_heads=12, num_key_value_heads=12, max_position_embeddings=1024),
    "llama-1b": dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                     num_attention_heads=16, num_key_value_heads=16, max_position_embeddings=2048),
}


def build(name, device):
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(**CONFIGS[name], rope_theta=10000.0, tie_word_embeddings=False, attn_implementation="sdpa")
    with torch.device(device):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]))
    for n, p in model.named_parameters():
        if "lora_B" in n:
            torch.nn.init.normal_(p, std=0.01)
    return model


def completion_logps(logits, labels):
    """TRL's selective_log_softmax over the shifted logits, summed over each completion."""
    logits = logits[:, :-1].float()
    target = labels[:, 1:]
    lp = torch.gather(logits.log_softmax(-1), 2, target.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return (lp * (target != -100)).sum(-1)


def dpo(args, exe):
    model = build(args.config, "cuda")
    forward = torch.compile(model.forward) if exe == "compile" else model.forward
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5, weight_decay=0.0)
    g = torch.Generator(device="cuda").manual_seed(11)
    ids = torch.randint(0, CONFIGS[args.config]["vocab_size"], (2 * args.pairs, args.seq), device="cuda", generator=g)
    labels = ids.clone()
    labels[:, :args.prompt] = -100
    B = args.pairs

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            lp = completion_logps(forward(input_ids=ids).logits, labels)
            with torch.no_grad(), model.disable_adapter():
                ref = completion_logps(forward(input_ids=ids).logits, labels)
        d = (lp[:B] - ref[:B]) - (lp[B:] - ref[B:])
        loss = -F.logsigmoid(0.1 * d).mean()
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(args.warmup):
        step()
    torch.cuda.reset_peak_memory_stats()
    ms = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        step()
        ms.append((time.perf_counter() - t0) * 1000)
    row = dict(impl=f"transformers + peft ({'torch.compile' if exe == 'compile' else 'eager'})", config=args.config,
               dtype="bf16", pairs=args.pairs, seq=args.seq, prompt=args.prompt, reference="in-step",
               ms=round(statistics.median(ms), 2), peak_gib=round(torch.cuda.max_memory_allocated() / 2**30, 3),
               torch=torch.__version__)
    print(row, flush=True)
    return row


def rollout(args):
    model = build(args.config, "cuda").eval()
    g = torch.Generator(device="cuda").manual_seed(11)
    prompts = torch.randint(0, CONFIGS[args.config]["vocab_size"], (args.prompts, args.rollout_prompt), device="cuda",
                            generator=g)
    ids = prompts.repeat_interleave(args.generations, dim=0)
    seconds = []
    for i in range(args.warmup + args.runs):
        torch.manual_seed(i)
        t0 = time.perf_counter()
        with torch.no_grad():
            model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=True, top_k=0,
                           max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, pad_token_id=0)
        torch.cuda.synchronize()
        if i >= args.warmup:
            seconds.append(time.perf_counter() - t0)
    s = statistics.median(seconds)
    row = dict(impl="transformers generate (peft, not merged)", config=args.config, dtype="bf16", cache="dynamic",
               batch=args.prompts * args.generations, prompt=args.rollout_prompt, new_tokens=args.new_tokens, s=round(s, 4),
               tokens_per_s=round(args.prompts * args.generations * args.new_tokens / s, 1), torch=torch.__version__)
    print(row, flush=True)
    return row


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["dpo", "rollout"], default="dpo")
    p.add_argument("--config", default="llama-1b", choices=sorted(CONFIGS))
    p.add_argument("--pairs", type=int, default=4)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--prompt", type=int, default=512)
    p.add_argument("--exec", default="eager,compile")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--generations", type=int, default=8)
    p.add_argument("--rollout-prompt", type=int, default=128)
    p.add_argument("--new-tokens", type=int, default=256)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    if args.mode == "rollout":
        rows = [rollout(args)]
    else:
        rows = []
        for exe in args.exec.split(","):
            rows.append(dpo(args, exe))
            write_rows(args.out, "torch_dpo_step", torch.cuda.get_device_name(), rows)  # rows so far, if compile times out
            torch.cuda.empty_cache()
    write_rows(args.out, "torch_dpo_step" if args.mode == "dpo" else "torch_grpo_rollout", torch.cuda.get_device_name(),
               rows)


if __name__ == "__main__":
    main()
