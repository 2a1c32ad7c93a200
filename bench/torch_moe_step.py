#!/usr/bin/env python3
"""transformers + peft beside bench/moe_step_bench (scripts/gpu/bench.sh moe-step): the model a
mixture of experts' config.json describes (AutoModelForCausalLM.from_config, random weights, bf16,
built on the GPU), --layers of its layers, LoRA r 16 on q/k/v/o and, as peft's target_parameters,
on the experts' gate_up_proj and down_proj (float32 adapters, peft's autocast_adapter_dtype),
gradient checkpointing (use_reentrant False), the experts as transformers runs them by default
(eager), AdamW; the median of --steps timed steps after --warmup. No QLoRA (no bitsandbytes on the
GPU machine). Rows as bench/result_rows.py writes them: impl, config, mode, layers, batch, seq, ms,
tokens_per_s, peak_mib (max_memory_allocated), fits.

    python3 bench/torch_moe_step.py --config-json tests/fixtures/hf/configs/gpt-oss-20b.json --layers 4 --json out/torch_moe_step.json
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from result_rows import write_rows  # noqa: E402
from torch_timing import lm_step  # noqa: E402


def build(config_path, layers, seq, r):
    import peft
    import transformers
    cfg = json.load(open(config_path))
    cfg.pop("quantization_config", None)  # the released gpt-oss config asks for MXFP4 weights
    full = cfg["num_hidden_layers"]
    if layers and layers < full:
        cfg["num_hidden_layers"] = layers
        if isinstance(cfg.get("layer_types"), list):
            cfg["layer_types"] = cfg["layer_types"][:layers]
        if isinstance(cfg.get("mlp_only_layers"), list):
            cfg["mlp_only_layers"] = [l for l in cfg["mlp_only_layers"] if l < layers]
    cfg["max_position_embeddings"] = max(cfg.get("max_position_embeddings", 0), seq)
    config = transformers.AutoConfig.for_model(**cfg)
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)  # made in bf16 on the GPU: no float32 copy of the weights
    with torch.device("cuda"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    torch.set_default_dtype(torch.float32)
    lora = peft.LoraConfig(r=r, lora_alpha=2 * r, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                           target_parameters=["mlp.experts.gate_up_proj", "mlp.experts.down_proj"])
    model = peft.get_peft_model(model, lora)
    for p in model.parameters():
        if p.requires_grad:
            p.data = p.data.float()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.enable_input_require_grads()
    model.train()
    return model, full, config.num_hidden_layers


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config-json", required=True)
    ap.add_argument("--layers", type=int, default=0)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--r", type=int, default=16)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--json", required=True)
    args = ap.parse_args()
    name = os.path.splitext(os.path.basename(args.config_json))[0]
    if name == "config":
        name = os.path.basename(os.path.dirname(os.path.abspath(args.config_json)))
    model, full, built = build(args.config_json, args.layers, args.seq, args.r)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
    ids = torch.randint(0, model.config.vocab_size, (args.batch, args.seq), device="cuda")
    row = {"impl": "transformers+peft", "config": name, "mode": "lora", "layers": built, "full_layers": full,
           "batch": args.batch, "seq": args.seq}
    step = lm_step(model, opt, ids)

    try:
        for _ in range(args.warmup):
            step()
        torch.cuda.reset_peak_memory_stats()
        times = []
        for _ in range(args.steps):
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
        s = statistics.median(times)
        row.update(fits=True, ms=s * 1e3, tokens_per_s=args.batch * args.seq / s,
                   peak_mib=torch.cuda.max_memory_allocated() / 2**20)
    except torch.OutOfMemoryError:
        row["fits"] = False
    print(row, flush=True)
    write_rows(args.json, "torch_moe_step", torch.cuda.get_device_name(), [row])


if __name__ == "__main__":
    main()
