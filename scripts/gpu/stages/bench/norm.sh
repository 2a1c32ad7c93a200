# The norm and linear backward benchmarks with PyTorch timed in the same call.
# Writes <out>/{norm,linear,torch_norm}.json (the rows of bench/results/) and the printed tables.
set -euo pipefail
build_targets norm_bench
"$build"/bench/norm_bench --csv "$out/norm.csv" --json "$out/norm.json" | tee "$out/norm.txt"
if cmake --build "$build" --target linear_bench 2>/dev/null; then
  "$build"/bench/linear_bench --json "$out/linear.json" | tee "$out/linear.txt"
fi
if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  PYTHONUNBUFFERED=1 python3 "$root/bench/torch_norm_ref.py" --ours "$out/norm.csv" --json "$out/torch_norm.json" \
    | tee "$out/torch.txt"
else
  echo "bench.sh norm: no PyTorch with CUDA here: skipped bench/torch_norm_ref.py"
fi
