#!/usr/bin/env bash
# Issue 38 on the GPU machine in one call: lora_finetune, toy_transformer and generate --chat over
# train::Trainer on the GPU.
#   scripts/gpu/trainer_check.sh <build dir> [out dir]          (about 6 minutes, most of it the build)
# <out dir> gets a few text files (build.log, tests.txt, the runs' logs); the runs work in a
# temporary folder.
# 1. configures <build dir> (CUDA, with NCCL when the toolkit or PyTorch's wheel has it) and builds
#    only what it runs;
# 2. the Trainer, lora_finetune and generate tests (they run the examples on the GPU: CUDA graph
#    auto, bit-exact resumes, --chat) and the examples' ctests;
# 3. lora_finetune on a Hugging Face fixture, f32 and --dtype bf16 (the Trainer's cast), the step
#    captured and eager: the same adapter bytes, finite losses;
# 4. scripts/gpu/dp_check.sh's lora stage: one process against one launched rank, a resume across world
#    sizes, --full bf16 (needs NCCL; skipped without it).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:?usage: scripts/gpu/trainer_check.sh <build dir> [out dir]}
case "$build" in /*) ;; *) build=$PWD/$build ;; esac
out=${2:-$build/trainer-check}
case "$out" in /*) ;; *) out=$PWD/$out ;; esac
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "== 1. configure + build"
nccl_args="-DTG_NCCL=ON"
if ! ls /usr/local/cuda/include/nccl.h /usr/include/nccl.h >/dev/null 2>&1; then
  nccl_root=$(python3 -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null || true)
  [ -n "$nccl_root" ] && nccl_args="$nccl_args -DTG_NCCL_ROOT=$nccl_root" || nccl_args=""
fi
# scripts/gpu/gpu-check.sh's configure: Release, CUDA, Eigen and the text libraries wherever they are.
[ -f "$build/CMakeCache.txt" ] ||
  BUILD_DIR=$build TG_GPU_CHECK_CMAKE_ARGS="$nccl_args ${TG_GPU_CHECK_CMAKE_ARGS:-}" "$root/scripts/gpu/gpu-check.sh" env configure \
    >"$out/configure.log" 2>&1 || { tail -40 "$out/configure.log"; exit 1; }
cmake --build "$build" -j"$(nproc)" --target tapegrad_tests lora_finetune toy_transformer generate launch >"$out/build.log" 2>&1 ||
  { tail -40 "$out/build.log"; exit 1; }

echo "== 2. tests on the GPU"
"$build/tests/tapegrad_tests" --gtest_filter='Trainer.*:LoraFinetune*:*LoraFinetuneHf*:GenerateExample.*:DistributedInit.*' \
  >"$out/tests.txt" 2>&1 || { grep -E "Failure|FAILED|Expected|Which" "$out/tests.txt" | head -60; exit 1; }
grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/tests.txt"
ctest --test-dir "$build" -R 'Examples\.(LoraFinetune|Bf16|Toy)' --output-on-failure | tail -4

echo "== 3. lora_finetune on a fixture folder: graph on and off, f32 and bf16"
data=$work/train.jsonl
for i in $(seq 0 119); do
  echo "{\"prompt\": \"Q: what does person $((i % 5)) like?\\nA:\", \"completion\": \" colour $((i * 7 % 4)).\"}"
done >"$data"
folder=$root/tests/fixtures/tokenizers/tiny_llama
for dtype in f32 bf16; do
  for graph in on off; do
    "$build/examples/lora_finetune" --base "$folder" --data "$data" --device cuda --dtype "$dtype" --cuda-graph "$graph" \
      --steps 30 --warmup 3 --batch 4 --seq 48 --lr 1e-2 --log-every 1 --eval-every 10 --sample-tokens 4 \
      --out "$work/lora_${dtype}_$graph" >"$out/lora_${dtype}_$graph.txt"
  done
  grep -h "training:" "$out/lora_${dtype}_on.txt"
  cmp "$work/lora_${dtype}_on/adapter/adapter_model.safetensors" "$work/lora_${dtype}_off/adapter/adapter_model.safetensors"
  awk -F, 'NR > 1 { v = $3 != "" ? $3 : $7; if (v != v + 0 || v ~ /nan|inf/) bad = 1 } END { exit bad }' \
    "$work/lora_${dtype}_on/log.csv"
  echo "$dtype: the same adapter bytes with and without the graph; $(tail -1 "$work/lora_${dtype}_on/log.csv")"
done

echo "== 4. data parallelism (scripts/gpu/dp_check.sh lora stage)"
if [ -n "$nccl_args" ]; then
  DP_STAGES="lora" "$root/scripts/gpu/dp_check.sh" "$build" "$work/dp"
else
  echo "skipped: no NCCL on this machine"
fi
echo "trainer_check: all passed"
