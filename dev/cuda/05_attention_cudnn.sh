#!/usr/bin/env bash
# dev/cuda/05_attention_cudnn.cu on the GPU machine in one call, beside the library's flash kernels
# (bench/attention_bench) and PyTorch's SDPA backends: finds cuDNN (scripts/cudnn-root.sh), builds
# the experiment and attention_bench (in build-gpu), runs the three and joins their rows in one
# table. In OUT_DIR: cudnn.txt (checks, plans, times), cudnn.json, attention.json,
# torch_attention.json, table.txt, cudnn_log.txt (cuDNN's own warnings and errors).
#
#   dev/cuda/05_attention_cudnn.sh OUT_DIR
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: dev/cuda/05_attention_cudnn.sh OUT_DIR}
mkdir -p "$out"
cd "$root"
cudnn=$(scripts/cudnn-root.sh) || { echo "no cuDNN: neither the toolkit nor python3's nvidia.cudnn has one"; exit 1; }
lib=$(dirname "$(ls "$cudnn"/lib*/libcudnn.so* | head -1)")
echo "cuDNN from $cudnn (libraries in $lib)" | tee "$out/cudnn.txt"
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
bin=$(mktemp -d)/attention_cudnn
"$nvcc" -O3 -std=c++20 -arch=sm_90 -Xcompiler -fopenmp -I"$root" -I"$cudnn/include" -o "$bin" \
  dev/cuda/05_attention_cudnn.cu -L"$lib" -l:"$(basename "$(ls "$lib"/libcudnn.so* | head -1)")" -lgomp \
  -Xlinker -rpath="$lib"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DTG_CUDA=ON \
  -DTG_CUDNN_ROOT="$cudnn" > "$out/configure.txt"
cmake --build build-gpu -j"$(nproc)" --target attention_bench > "$out/build.txt"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG="$out/cudnn_log.txt" "$bin" --json "$out/cudnn.json" 2>&1 | tee -a "$out/cudnn.txt" || true
build-gpu/bench/attention_bench --impls tapegrad_flash --json "$out/attention.json" | tee "$out/bench.txt"
python3 bench/torch_attention_ref.py --ours "$out/attention.json" --out "$out/torch_attention.json" | tee "$out/torch.txt"
python3 - "$out" <<'PY' | tee "$out/table.txt"
import json, sys
out = sys.argv[1]
ours = {r["shape"]: r for r in json.load(open(f"{out}/attention.json")) if r.get("impl") in ("tapegrad", "tapegrad_flash")}
torch = {(r["shape"], r["impl"]): r for r in json.load(open(f"{out}/torch_attention.json"))}
cudnn = {r["shape"]: r for r in json.load(open(f"{out}/cudnn.json")) if r["causal"]}
f = lambda r, k: "-" if not r or r.get(k) is None else f"{r[k]:.3f}"
print("causal bf16, ms: fwd / bwd / fwd+bwd (cuDNN backend: bwd deterministic and not)")
print(f"{'shape':20} {'tapegrad flash':>24} {'cuDNN backend (ours)':>32} {'torch cudnn':>24}")
for shape in sorted(set(ours) | set(cudnn)):
    o, c, t = ours.get(shape), cudnn.get(shape), torch.get((shape, "torch_cudnn"))
    print(f"{shape:20} {f(o,'fwd_ms'):>7} {f(o,'bwd_ms'):>7} {f(o,'fwdbwd_ms'):>8}"
          f"   {f(c,'fwd_ms'):>7} {f(c,'bwd_ms'):>7} {f(c,'bwd_det_ms'):>7} {f(c,'fwdbwd_ms'):>8}"
          f"   {f(t,'fwd_ms'):>7} {f(t,'bwd_ms'):>7} {f(t,'fwdbwd_ms'):>8}")
PY
