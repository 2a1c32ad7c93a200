# The real-size training step (llama-1b, llama3-8b) against PyTorch, with ncu and timelines.
# Stage arguments: [llama-1b | llama3-8b] (default llama-1b). TG_COMMIT names the commit in the rows.
# 1. builds train_step_bench and tg_timeline in build-dir, or uses the ones there when it holds them
#    without a build.ninja (built elsewhere and carried);
# 2. tapegrad bf16, LoRA and full, each with and without gradient checkpointing and the CUDA graph;
# 3. bench/torch_toy_lora.py, eager and torch.compile, bf16 autocast, sdpa (llama3-8b: LoRA only:
#    a float32 8B with AdamW's state does not fit), in the same call;
# 4. rows to <out>/train_step-h200-real.json (llama3-8b: train_step-h200-real-llama3-8b.json);
# 5. ncu (--clock-control none) over $NCU_STEPS eager LoRA steps (the bench's timed steps only:
#    --profile-from-start off) and bench/ncu_census.py's table of where the time goes, printed and
#    saved as <out>/census-<config>-lora.md (the raw report beside it).
# 6. the same LoRA step traced in place (bench/cupti_timeline.cpp, eager and graphed), and the full
#    step eager, with bench/timeline_census.py's table of kernel time and idle time, saved as
#    <out>/timeline-<config>-lora[-graph].md and timeline-<config>-full.md;
# 7. tapegrad's LoRA step with cuDNN's atomic-dq attention backward (as PyTorch runs it), and with
#    the grouped projections' weights apart (--adjacent-weights false), beside the rows.
# Each part prints its seconds. llama-1b fits 9 minutes on one H200 with the build present (about
# 1 min ours, 4-5 torch, 1-2 ncu); run llama3-8b as its own call. Knobs: STEPS (timed steps, 10),
# TORCH_BUDGET_S (torch_toy_lora.py's --budget-s), TORCH_MODES (llama-1b's: lora,full), NCU_STEPS
# (0: no ncu census), TG_REAL_TORCH=0 (ours only).
set -euo pipefail
config=${1:-llama-1b}
case "$config" in
  llama-1b) suffix="" torch_modes=${TORCH_MODES:-lora,full} budget=${TORCH_BUDGET_S:-300} ncu_steps=${NCU_STEPS:-2} ;;
  llama3-8b) suffix="-llama3-8b" torch_modes=lora budget=${TORCH_BUDGET_S:-330} ncu_steps=${NCU_STEPS:-1} ;;
  *) echo "usage: scripts/gpu/bench.sh real-step [build-dir] [out] [llama-1b | llama3-8b], got '$config'" >&2; exit 2 ;;
esac
steps=${STEPS:-10}
bench_dir=$root/bench
tmp=$(mktemp -d)
note_commit

part "build"
if [ ! -f "$build/build.ninja" ] && [ -x "$build/bench/train_step_bench" ]; then
  echo "using the prebuilt $build/bench/train_step_bench (no build.ninja: carried from another machine)"
else
  build_targets train_step_bench tg_timeline
fi

bench=("$build/bench/train_step_bench" --config "$config" --device cuda --dtype bf16 --modes "lora,full" --warmup 3
       --steps "$steps")
ours=()
for ckpt in false true; do
  for graph in false true; do
    part "tapegrad $config, gradient checkpointing $ckpt, CUDA graph $graph"
    rows="$tmp/tapegrad-ckpt-$ckpt-graph-$graph.json"
    # One variant failing (out of memory) leaves the others' rows.
    if "${bench[@]}" --gradient-checkpointing "$ckpt" --cuda-graph "$graph" --real-json "$rows"; then
      ours+=("$rows")
    else
      echo "tapegrad $config ckpt $ckpt graph $graph: FAILED"
    fi
  done
done

part "tapegrad $config LoRA, atomic-dq attention backward"
rows="$tmp/tapegrad-atomic-dq.json"
if "${bench[@]}" --modes lora --sdp-deterministic false --real-json "$rows"; then ours+=("$rows"); fi

part "tapegrad $config LoRA, q / k / v and gate / up weights each in their own allocation"
rows="$tmp/tapegrad-weights-apart.json"
if "${bench[@]}" --modes lora --adjacent-weights false --real-json "$rows"; then ours+=("$rows"); fi

torch_args=()
if [ "${TG_REAL_TORCH:-1}" != 0 ]; then
  part "PyTorch $config ($torch_modes), eager and torch.compile"
  python3 "$bench_dir/torch_toy_lora.py" --configs "$config" --precs bf16 --modes "$torch_modes" --attns sdpa \
    --exec eager,compile --n-warm 3 --n-time "$steps" --budget-s "$budget" --out "$tmp" --jsonl torch.jsonl |
    grep -E "^(llama|TOY|config|ERROR|SKIPPED)" || true
  [ -f "$tmp/torch.jsonl" ] && torch_args=(--torch "$tmp/torch.jsonl")
fi
rows_out="$out/train_step-h200-real$suffix.json"
python3 "$bench_dir/real_step_rows.py" "$rows_out" "${ours[@]}" "${torch_args[@]}"

ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
if [ "$ncu_steps" = 0 ]; then
  echo "NCU_STEPS=0: census skipped"
elif [ -x "$ncu" ]; then
  part "ncu over $ncu_steps eager LoRA steps"
  report="$out/ncu-$config-lora.csv"
  "$ncu" --clock-control none --profile-from-start off --metrics gpu__time_duration.sum --csv --page raw \
    --print-units base --log-file "$report" \
    "$build/bench/train_step_bench" --config "$config" --device cuda --dtype bf16 --modes lora --warmup 1 \
    --steps "$ncu_steps" | grep -vE "^==PROF==" || true
  step_ms=$(python3 -c 'import json, sys
rows = [r for r in json.load(open(sys.argv[1])) if r["impl"] == "tapegrad" and r["mode"] == "lora" and not r["graph"] and not r["ckpt"]]
print(rows[0]["ms"] if rows else "")' "$rows_out")
  OUT=$out python3 "$bench_dir/ncu_census.py" "$report" --steps "$ncu_steps" ${step_ms:+--step-ms "$step_ms"} \
    --title "$config-lora"
else
  echo "no ncu: census skipped"
fi
timeline="$(cd "$build" && pwd)/bench/libtg_timeline.so"  # CUDA_INJECTION64_PATH wants it absolute
for run in lora:false lora:true full:false; do
  mode=${run%:*} graph=${run#*:}
  part "timeline of 5 $mode steps, CUDA graph $graph"
  title=$config-$mode; [ "$graph" = false ] || title+=-graph
  CUDA_INJECTION64_PATH="$timeline" TG_TIMELINE="$tmp/timeline.csv" "$build/bench/train_step_bench" \
    --config "$config" --device cuda --dtype bf16 --modes "$mode" --warmup 2 --steps 5 --cuda-graph "$graph" |
    tail -n 1
  OUT=$out python3 "$bench_dir/timeline_census.py" "$tmp/timeline.csv" --title "$title" || true
done
part "done"
