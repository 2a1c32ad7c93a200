#!/usr/bin/env python3
"""transformers' own sparse MoE block (Qwen3MoeSparseMoeBlock: router, softmax, top-k renormalised,
SwiGLU experts) on the cases of bench/moe_bench.cpp, timed the same way: x [1, T, H] bf16 that
requires grad, forward + backward with a fixed output gradient, CUDA events after a 256 MB L2
flush, median; peak memory above the parameters, x and their existing gradients. Modes: lora (peft's
target_parameters on mlp.experts.gate_up_proj and down_proj, r 16, alpha 32; the rest frozen) and
full. Implementations: transformers' experts implementations "eager" (its default loop over the
experts hit) and "grouped_mm" (torch._grouped_mm) where this transformers has it, and the last of
those under torch.compile. Each one's output and dx are first compared with eager's. tflops counts
the experts' base GEMMs as moe_bench does. The rows are written after each case (a run stopped
early keeps those done). Prints the ratios to moe_bench's grouped rows of the same call:

    python3 bench/torch_moe_ref.py --ours out/moe_ours.json --out out/torch_moe.json
"""
import argparse
import json

import torch
import transformers
from peft import LoraConfig, get_peft_model

from result_rows import write_rows
from torch_timing import median_ms, peak_mib_above, relative_error

CONFIGS = {"qwen3-30b-a3b": (2048, 768, 128, 8), "mixtral-8x7b": (4096, 14336, 8, 2), "tiny": (64, 32, 8, 2)}
CASES = "qwen3-30b-a3b:4096,qwen3-30b-a3b:16384,mixtral-8x7b:4096"


class Layer(torch.nn.Module):
    """The block where a decoder layer holds it (peft's target_parameters name it mlp.experts.*)."""

    def __init__(self, block):
        super().__init__()
        self.mlp = block

    def forward(self, x):
        out = self.mlp(x)
        return out[0] if isinstance(out, tuple) else out


def experts_implementations():
    """transformers' experts implementations worth timing on one GPU: its default and grouped_mm."""
    names = ["eager"]
    try:
        from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS
        keys = ALL_EXPERTS_FUNCTIONS.valid_keys() if hasattr(ALL_EXPERTS_FUNCTIONS, "valid_keys") \
            else list(ALL_EXPERTS_FUNCTIONS.keys())
        names += [k for k in keys if k == "grouped_mm"]
    except ImportError as e:
        print(f"transformers.integrations.moe does not import ({e}): eager experts only")
    return names


def build(config_name, mode, experts_impl, seed):
    H, I, E, k = CONFIGS[config_name]
    config = transformers.Qwen3MoeConfig(hidden_size=H, moe_intermediate_size=I, num_experts=E,
                                         num_experts_per_tok=k, norm_topk_prob=True)
    config._experts_implementation = experts_impl
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock
    torch.manual_seed(seed)
    with torch.device("cuda"):
        layer = Layer(Qwen3MoeSparseMoeBlock(config))
    with torch.no_grad():
        for p in layer.parameters():
            p.normal_(0, 0.02)  # transformers' init (the experts are torch.empty)
    layer = layer.to(torch.bfloat16)
    if mode == "lora":
        layer = get_peft_model(layer, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=[],
                                                 target_parameters=["mlp.experts.gate_up_proj",
                                                                    "mlp.experts.down_proj"]))
        with torch.no_grad():  # B away from zero, so the adapters take part in the comparison
            for n, p in layer.named_parameters():
                if "lora_B" in n:
                    p.normal_(0, 0.02)
    return layer


def measure(case, mode, impls, reps, flush):
    config_name, tokens = case.split(":")
    tokens = int(tokens)
    H, I, E, k = CONFIGS[config_name]
    gen = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(1, tokens, H, device="cuda", generator=gen).bfloat16().requires_grad_(True)
    dy = torch.randn(1, tokens, H, device="cuda", generator=gen).bfloat16()
    gemms = 3 if mode == "full" else 2  # forward, dx, and dW when the experts train
    flops = gemms * 6.0 * tokens * k * H * I
    rows, reference = [], None
    runs = [(e, False) for e in impls] + [(impls[-1], True)]
    for experts_impl, compiled in runs:
        impl = f"torch_{experts_impl}" + ("_compile" if compiled else "")
        layer = fn = None
        try:
            layer = build(config_name, mode, experts_impl, seed=0)
            if compiled:
                torch._dynamo.reset()  # a new module each case: no earlier graphs or recompile limits
            fn = torch.compile(layer) if compiled else layer
            x.grad = None
            y = fn(x)
            y.backward(dy)
            if reference is None:
                reference = (y.detach(), x.grad.clone())
            err = max(relative_error(y.detach(), reference[0]), relative_error(x.grad, reference[1]))
            if not err <= 3e-2:
                raise RuntimeError(f"output / dx differ from torch_eager's by {err:.2e} (relative), wanted at "
                                   "most 3e-2")
            step = lambda: fn(x).backward(dy)  # gradients accumulate into the existing .grad
            peak = peak_mib_above(step)
            ms = median_ms(step, reps, flush)
        except Exception as e:  # one implementation failing leaves the others' rows
            print(f"{case} {mode} {impl}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            continue
        finally:
            layer = fn = None
            torch.cuda.empty_cache()
        print(f"{config_name:16} {tokens:7} {mode:5} {impl:26} {ms:10.3f} {flops / ms * 1e-9:8.1f} {peak:10.1f} "
              f"{err:10.2e}")
        rows.append({"config": config_name, "impl": impl, "mode": mode, "dtype": "bf16", "tokens": tokens,
                     "ms": round(ms, 4), "tflops": round(flops / ms * 1e-9, 2), "peak_mib": round(peak, 2),
                     "torch": torch.__version__, "transformers": transformers.__version__})
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ours", help="moe_bench's rows of this call, to print the ratios")
    ap.add_argument("--out", required=True)
    ap.add_argument("--cases", default=CASES, help="config:tokens,... (default: moe_bench's GPU cases)")
    ap.add_argument("--modes", default="lora,full")
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    impls = experts_implementations()
    print(f"{'config':16} {'tokens':>7} {'mode':5} {'impl':26} {'ms':>10} {'TFLOP/s':>8} {'peak MiB':>10} {'rel err':>10}")
    rows = []
    for case in args.cases.split(","):
        for mode in args.modes.split(","):
            rows += measure(case, mode, impls, args.reps, flush)
            write_rows(args.out, "torch_moe", torch.cuda.get_device_name(), rows)
    ours = {(r["config"], r["tokens"], r["mode"]): r["ms"] for r in json.load(open(args.ours))
            if r["impl"] == "grouped"} if args.ours else {}
    for r in rows:
        key = (r["config"], r["tokens"], r["mode"])
        if key in ours:
            print(f"{r['config']:16} {r['tokens']:7} {r['mode']:5} {r['impl']:26} / grouped: {r['ms'] / ours[key]:.2f}x "
                  "the time")


if __name__ == "__main__":
    main()
