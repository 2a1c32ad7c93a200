# The LM head's loss (linear_cross_entropy's chunks): tests, chunk sweep, ncu, bench, a step.
# Stage arguments: some of these steps (default: all):
#   build   configure build-dir and build tapegrad_tests, linear_ce_bench, train_step_bench -> build.txt;
#   tests   the linear_cross_entropy and cross_entropy tests (GPU against CPU, the bf16 case in
#           the op's chunks and in 256-row ones) -> tests.txt;
#   sweep   linear_ce_bench with chunks of 256 ... 16384 rows beside the op's choice, trainable
#           and frozen, at both shapes -> linear_ce_chunks.json, sweep.txt;
#   ncu     per-launch times of one fused call at 16384x2048x128256, trainable then frozen (the op's
#           chunks) -> ncu-linear-ce.csv (launch order) and census-linear-ce.md (bench/ncu_census.py);
#   bench   scripts/gpu/bench.sh linear-ce: ours beside PyTorch eager / torch.compile in the
#           same call -> linear_ce.json, torch_linear_ce.json, bench.txt;
#   step    train_step_bench llama-1b LoRA bf16 (its frozen head in the op's chunks) -> step.txt.
# About 2.5 min to build, 0.5 for tests, 0.5 sweep, 0.5 ncu, 1.5 bench, 0.5 step on an H200.
set -euo pipefail
steps=${*:-build tests sweep ncu bench step}
has() { [[ " $steps " == *" $1 "* ]]; }

if has build; then
  echo "== build"
  build_targets tapegrad_tests linear_ce_bench train_step_bench > "$out/build.txt"
fi

if has tests; then
  echo "== tests"
  gtest_step 'LinearCrossEntropy*:CrossEntropy*:*cross_entropy*'
fi

if has sweep; then
  echo "== sweep"
  "$build/bench/linear_ce_bench" --reps 10 --chunk-rows 256,512,1024,2048,4096,8192,16384 \
    --chunks-json "$out/linear_ce_chunks.json" | tee "$out/sweep.txt" || status=1
fi

if has ncu; then
  echo "== ncu"
  ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  "$ncu" --clock-control none --profile-from-start off --metrics gpu__time_duration.sum --csv --page raw \
    --print-units base --log-file "$out/ncu-linear-ce.csv" \
    "$build/bench/linear_ce_bench" --shapes 16384x2048x128256 --reps 1 --profile 1 > "$out/ncu-bench.txt" 2>&1 || status=1
  OUT=$out python3 bench/ncu_census.py "$out/ncu-linear-ce.csv" --steps 2 --title linear-ce || status=1
fi

if has bench; then
  echo "== bench"
  scripts/gpu/bench.sh linear-ce "$build" "$out" | tee "$out/bench.txt" || status=1
fi

if has step; then
  echo "== step: llama-1b LoRA bf16"
  "$build/bench/train_step_bench" --config llama-1b --device cuda --dtype bf16 --modes lora --warmup 2 --steps 8 \
    | tee "$out/step.txt" || status=1
fi
exit $status
