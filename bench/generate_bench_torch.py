#!/usr/bin/env python3
"""transformers' generate on the bench-135m Llama (issue 26's table), timed as bench/generate_bench.cpp
times nn::generate: greedy, random prompts, exactly --new-tokens new tokens (no EOS), per batch
size, the median of --runs after --warmup on the host clock; a streamer marks the first new token
(the end of the prefill). Variants: "eager" (the default dynamic cache), "static"
(cache_implementation="static") and "static+compile" (the static cache with the forward under
torch.compile(mode="reduce-overhead"), transformers' recipe; skipped with a note if it fails).

    python3 bench/generate_bench_torch.py --device cuda --dtype bf16 --batches 1,32 --out rows.json

Needs torch and transformers (the GPU machine). Rows as bench/result_rows.py writes them.
"""
import argparse
import os
import statistics
import sys
import time

import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.generation.streamers import BaseStreamer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from result_rows import write_rows  # noqa: E402

# nn::LlamaConfig::bench_135m()
BENCH_135M = dict(vocab_size=32000, hidden_size=768, intermediate_size=2048, num_hidden_layers=12,
                  num_attention_heads=12, num_key_value_heads=12, max_position_embeddings=1024,
                  rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=False)


class FirstToken(BaseStreamer):
    """Records when generate hands out its first new tokens (put is called with the prompt first)."""

    def __init__(self):
        self.calls, self.first = 0, None

    def put(self, value):
        self.calls += 1
        if self.calls == 2:
            self.first = time.perf_counter()

    def end(self):
        pass


def time_once(model, ids, new_tokens, **kwargs):
    streamer = FirstToken()
    if ids.is_cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                         min_new_tokens=new_tokens, do_sample=False, eos_token_id=None, pad_token_id=0,
                         streamer=streamer, **kwargs)
    if ids.is_cuda:
        torch.cuda.synchronize()
    end = time.perf_counter()
    assert out.shape[1] == ids.shape[1] + new_tokens, out.shape
    return end - start, streamer.first - start


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f32"])
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--variants", default="eager,static,static+compile")
    ap.add_argument("--out", default="")
    args = ap.parse_args()

    torch.manual_seed(0)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    model = LlamaForCausalLM(LlamaConfig(**BENCH_135M)).to(device=args.device, dtype=dtype).eval()
    machine = torch.cuda.get_device_name() if args.device == "cuda" else "CPU"
    rows = []
    print(f"{'variant':<16} {'batch':>5} {'prompt':>6} {'new':>5} {'tok/s':>10} {'ms/token':>10} {'prefill ms':>11}"
          f" {'decode ms/tok':>14}")
    for variant in args.variants.split(","):
        kwargs = {} if variant == "eager" else {"cache_implementation": "static"}
        forward = model.forward
        if variant == "static+compile":
            model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
        try:
            for b in [int(x) for x in args.batches.split(",")]:
                ids = torch.randint(0, BENCH_135M["vocab_size"], (b, args.prompt), device=args.device)
                with torch.inference_mode():
                    for _ in range(args.warmup):
                        time_once(model, ids, args.new_tokens, **kwargs)
                    times = sorted((time_once(model, ids, args.new_tokens, **kwargs) for _ in range(args.runs)),
                                   key=lambda t: t[0])
                total, prefill = times[len(times) // 2]
                n = args.new_tokens
                row = {"impl": "transformers", "variant": variant, "config": "bench-135m", "dtype": args.dtype,
                       "batch": b, "prompt": args.prompt, "new_tokens": n, "tok_s": b * n / total,
                       "ms_per_token": 1e3 * total / n, "prefill_ms": 1e3 * prefill,
                       "decode_ms_per_token": 1e3 * (total - prefill) / max(1, n - 1),
                       "torch": torch.__version__, "transformers": transformers.__version__,
                       "script": "bench/generate_bench_torch.py"}
                rows.append(row)
                if args.out:  # after every row: a compile that runs out of time keeps the others
                    write_rows(args.out, "generate_bench_torch", machine, rows)
                print(f"{variant:<16} {b:>5} {args.prompt:>6} {n:>5} {row['tok_s']:>10.1f} {row['ms_per_token']:>10.3f}"
                      f" {row['prefill_ms']:>11.2f} {row['decode_ms_per_token']:>14.3f}")
        except Exception as e:  # torch.compile may not run here: say so, keep the other rows
            print(f"{variant}: failed ({type(e).__name__}: {e})", file=sys.stderr)
        finally:
            model.forward = forward


if __name__ == "__main__":
    main()
