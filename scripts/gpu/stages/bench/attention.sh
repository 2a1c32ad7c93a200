# Attention forward / backward: our flash kernels (and cuDNN) against PyTorch's SDPA backends.
# Rows to <out>/attention.json and <out>/torch_attention.json. Uses attention_bench built in build-dir.
set -euo pipefail
"$build/bench/attention_bench" --json "$out/attention.json"
python3 "$root/bench/torch_attention_ref.py" --ours "$out/attention.json" --out "$out/torch_attention.json"
