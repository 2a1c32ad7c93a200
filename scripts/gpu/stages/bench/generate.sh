# nn::generate against transformers' generate (eager, static cache, static cache + torch.compile).
# bench-135m bf16, prompts of 128 tokens, 256 new tokens, batch 1 and 32. Rows of both to
# <out>/generate.json. TG_COMMIT names the commit in the rows; TG_TORCH_BUDGET_S (300) bounds
# transformers' side.
set -euo pipefail
tmp=$(mktemp -d)
shape=(--batches 1,32 --prompt 128 --new-tokens 256)
"$build/bench/generate_bench" --config bench-135m --device cuda --dtype bf16 "${shape[@]}" --caches dynamic,static,graph \
  --json "$tmp/ours.json"
# torch.compile's variant may take minutes to compile: the rows written before a timeout are kept.
timeout "${TG_TORCH_BUDGET_S:-300}" python3 "$root/bench/generate_bench_torch.py" --device cuda --dtype bf16 "${shape[@]}" \
  --out "$tmp/torch.json" || echo "transformers' generate: stopped (rc $?); keeping its rows so far"
merge_rows "$out/generate.json" "$tmp/ours.json" "$tmp/torch.json"
cat "$out/generate.json"
