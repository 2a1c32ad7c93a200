# Data parallelism over NCCL: the distributed tests, ranks against one process, resumes, DDP.
# Stage arguments: some of build tests lora two bench (default: all), e.g. the build in one device
# call and the rest in the next. Stops at the first failure; NCCL's NVLink multicast stays off
# (NCCL_NVLS_ENABLE=0). TG_COMMIT names the commit in the rows.
# 1. build: configures build-dir with NCCL required (the toolkit's, else PyTorch's nvidia-nccl
#    wheel) and builds every target;
# 2. tests: the distributed tests, the NCCL one (world size 1) included: it must run, not skip;
# 3. lora: lora_finetune on the GPU as one process and as one rank of examples/launch (world size 1):
#    the same losses and the same adapter bytes; stopped at step 6 under the launcher and resumed
#    as a plain process: the same as straight through (a resume on another world size); --full
#    (bf16) as one process and as one rank: the same model bytes;
# 4. two: with 2+ GPUs, --nproc 2 against one process, same global batch: loss curves within 1e-3
#    relative (float32; a reduction order apart) and the adapters within 1e-3; also stopped at
#    step 6 on 2 GPUs and resumed on 1;
# 5. bench: scripts/gpu/bench.sh data-parallel: tokens/s rows of tapegrad and torch DDP on 1 (2, 4,
#    8) GPUs to <out>/data_parallel.json (copy it to bench/results/).
set -euo pipefail
export NCCL_NVLS_ENABLE=0
gpus=$(nvidia-smi -L | wc -l)
echo "== check.sh dp: $gpus GPU(s), build $build, results $out"
steps=" ${*:-build tests lora two bench} "
wants() { [[ "$steps" == *" $1 "* ]]; }

if wants build; then
  echo "== 1. configure + build with NCCL"
  TG_GPU_CHECK_CMAKE_ARGS="-DTG_NCCL=ON ${TG_GPU_CHECK_CMAKE_ARGS:-}" build_targets
fi

if wants tests; then
  echo "== 2. distributed tests"
  "$build/tests/tapegrad_tests" --gtest_filter='PostAccumulateGradHook.*:FakeGroup.*:ShareThroughFile.*:DataParallel.*:LaunchInfo.*:DistributedInit.*:DistributedCuda.*' \
    | tee "$out/tests.log"
  ! grep -q "SKIPPED \] DistributedCuda" "$out/tests.log"
fi

bin=$build/examples
work=$out/lora
common=(--base "$work/toy/base.safetensors" --device cuda --steps 12 --warmup 3 --batch 8 --seq 64 --eval-every 6 --eval-batches 1
        --log-every 1)
if wants lora || wants two; then
  rm -rf "$work" && mkdir -p "$work"
  "$bin/toy_transformer" --device cuda --pretrain-steps 50 --lora-steps 1 --eval-batches 1 --sample-bytes 1 --out "$work/toy" >/dev/null
  "$bin/lora_finetune" "${common[@]}" --out "$work/plain" >/dev/null
fi

if wants lora; then
  echo "== 3. lora_finetune: one process, one launched rank, a resume across world sizes"
  "$bin/launch" --nproc 1 "$bin/lora_finetune" "${common[@]}" --out "$work/rank" | tee "$work/rank.log" | grep "data parallel: 1 ranks over nccl"
  "$bin/launch" --nproc 1 "$bin/lora_finetune" "${common[@]}" --out "$work/resumed" --stop-at 6 >/dev/null
  "$bin/lora_finetune" "${common[@]}" --out "$work/resumed" --resume >/dev/null
  for run in rank resumed; do
    diff <(cut -d, -f1-5,7- "$work/plain/log.csv") <(cut -d, -f1-5,7- "$work/$run/log.csv")  # all but tokens/s
    cmp "$work/plain/adapter/adapter_model.safetensors" "$work/$run/adapter/adapter_model.safetensors"
    echo "$run: the same losses and adapter as one process"
  done
  # Full fine-tuning (--full), bf16: one process and one launched rank write the same model.
  "$bin/lora_finetune" "${common[@]}" --full --dtype bf16 --out "$work/full-plain" >/dev/null
  "$bin/launch" --nproc 1 "$bin/lora_finetune" "${common[@]}" --full --dtype bf16 --out "$work/full-rank" >/dev/null
  diff <(cut -d, -f1-5,7- "$work/full-plain/log.csv") <(cut -d, -f1-5,7- "$work/full-rank/log.csv")
  cmp "$work/full-plain/model.safetensors" "$work/full-rank/model.safetensors"
  echo "full-rank: the same losses and model as one process"
fi

if wants two && [ "$gpus" -ge 2 ]; then
  echo "== 4. two ranks against one process"
  "$bin/lora_finetune" "${common[@]}" --nproc 2 --out "$work/two" | grep "data parallel: 2 ranks over nccl"
  # Stopped on 2 GPUs, resumed on 1: the same run as straight through.
  "$bin/lora_finetune" "${common[@]}" --nproc 2 --out "$work/two-then-one" --stop-at 6 >/dev/null
  "$bin/lora_finetune" "${common[@]}" --out "$work/two-then-one" --resume >/dev/null
  for run in two two-then-one; do
  python3 - "$work/plain" "$work/$run" <<'PY'
import csv, sys
import torch
from safetensors.torch import load_file
one, two = ([r for r in csv.DictReader(open(d + "/log.csv")) if r["loss"]] for d in sys.argv[1:3])
assert len(one) == len(two), (len(one), len(two))
worst = max(abs(float(a["loss"]) - float(b["loss"])) / abs(float(a["loss"])) for a, b in zip(one, two))
print(f"loss curves: {len(one)} rows, worst relative difference {worst:.2e}")
assert worst < 1e-3
a, b = (load_file(d + "/adapter/adapter_model.safetensors") for d in sys.argv[1:3])
diff = max((a[k] - b[k]).abs().max().item() for k in a)
print(f"adapters: {len(a)} tensors, worst absolute difference {diff:.2e}")
assert a.keys() == b.keys() and diff < 1e-3
PY
  done
elif wants two; then
  echo "== 4. two ranks against one process: skipped, this machine has $gpus GPU"
fi

if wants bench; then
  echo "== 5. tokens/s against torch DDP"
  scripts/gpu/bench.sh data-parallel "$build" "$out"
fi
echo "== check.sh dp passed: copy $out/data_parallel.json to bench/results/ and run python3 bench/make_results.py"
