# The LM head's loss (linear + cross-entropy, fwd+bwd, bf16), fused and unfused, against PyTorch.
# PyTorch eager, torch.compile and Liger (when liger_kernel imports) in the same call: rows to
# <out>/linear_ce.json and <out>/torch_linear_ce.json. Uses linear_ce_bench built in build-dir.
set -euo pipefail
"$build/bench/linear_ce_bench" --json "$out/linear_ce.json"
python3 "$root/bench/torch_linear_ce_ref.py" --ours "$out/linear_ce.json" --out "$out/torch_linear_ce.json"
