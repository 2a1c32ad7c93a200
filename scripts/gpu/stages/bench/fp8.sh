# LoRA over an FP8 base (issue 52): speed against bfloat16 and torch.compile, and accuracy.
# Stage arguments: speed and/or accuracy (default both; about 4 minutes each after the build).
# TG_COMMIT names the commit in the rows.
# speed:
#  1. bench/fp8_bench: the FP8 against bfloat16 forward, forward + dx and bare GEMMs at
#     Llama-3.1-8B's projection shapes (8192 tokens) -> <out>/fp8_gemm.json;
#  2. train_step_bench --fp8 (bf16, eager, no checkpointing), llama-1b and llama3-8b: each LoRA row
#     beside its FP8-base twin; bench/torch_toy_lora.py's torch.compile bf16 LoRA step of the same
#     configs (TG_FP8_TORCH=0: none) -> <out>/train_step-fp8.json (bench/real_step_rows.py);
# accuracy:
#  3. examples/toy_transformer ("small", bf16) twice with one seed: pre-trained on real text the
#     machine has (Python's standard library sources, 2 MB), then LoRA for 300 steps on this
#     repository's documentation, on a bfloat16 base and on the FP8 one (--fp8);
#     bench/fp8_accuracy.py compares the loss curves (mean of steps 51-200) and greedy samples
#     -> <out>/fp8_accuracy.json and accuracy.txt.
# Every part's output goes to <out>/log.txt too. Knobs: STEPS (timed steps, 5), TG_FP8_TORCH.
set -uo pipefail
parts=("$@")
[ ${#parts[@]} -eq 0 ] && parts=(speed accuracy)
steps=${STEPS:-5}
tmp=$(mktemp -d)
log="$out/log.txt"
note_commit

part "build"
build_targets train_step_bench fp8_bench toy_transformer >"$tmp/build.log" 2>&1 ||
  { cp "$tmp/build.log" "$out/build.log"; tail -30 "$out/build.log"; exit 1; }

for what in "${parts[@]}"; do
  case $what in
    speed)
      part "fp8_bench: FP8 against bf16 GEMMs at llama3-8b's projection shapes"
      "$build/bench/fp8_bench" "$tmp/fp8_gemm.csv" --json "$out/fp8_gemm.json" 2>&1 | tee -a "$log"
      ours=()
      for config in llama-1b llama3-8b; do
        part "train_step_bench $config: LoRA on a bf16 base and on an FP8 base"
        if "$build/bench/train_step_bench" --config "$config" --device cuda --dtype bf16 --modes lora --fp8 true \
          --warmup 2 --steps "$steps" --real-json "$tmp/$config.json" >"$tmp/$config.log" 2>&1; then
          ours+=("$tmp/$config.json")
        else
          echo "$config: FAILED"
        fi
        grep -E "quantised|memory|cuda |rror" "$tmp/$config.log"
        { echo "== $config"; cat "$tmp/$config.log"; } >>"$log"
      done
      torch_args=()
      if [ "${TG_FP8_TORCH:-1}" != 0 ]; then
        part "PyTorch torch.compile bf16 LoRA (llama-1b, llama3-8b)"
        (cd "$root/bench" && python3 torch_toy_lora.py --configs llama-1b,llama3-8b --precs bf16 --modes lora \
          --attns sdpa --exec compile --n-warm 2 --n-time "$steps" --budget-s 200 --out "$tmp" --jsonl torch.jsonl) \
          2>&1 | tee -a "$log" | grep -E "^(llama|ERROR|SKIPPED)" || true
        [ -f "$tmp/torch.jsonl" ] && torch_args=(--torch "$tmp/torch.jsonl")
      fi
      python3 "$root/bench/real_step_rows.py" "$out/train_step-fp8.json" "${ours[@]}" "${torch_args[@]}" \
        --bench train_step_fp8 | tee -a "$log"
      ;;
    accuracy)
      part "accuracy: toy_transformer small, LoRA on real text, bf16 base against FP8 base"
      # the standard library of the Python that runs (the system's may hold none)
      stdlib=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')
      find "$stdlib" -maxdepth 1 -name '*.py' | sort | xargs cat 2>/dev/null | head -c 2000000 >"$tmp/python.txt" || true
      [ -s "$tmp/python.txt" ] || { echo "no Python sources under $stdlib to pre-train on"; exit 1; }
      cat README.md DEVELOPERS.md docs/*.md dev/NOTES.md >"$tmp/docs.txt"
      for base in bf16 fp8; do
        flags=()
        [ "$base" = fp8 ] && flags=(--fp8 true)
        "$build/examples/toy_transformer" --config small --device cuda --dtype bf16 --data "$tmp/python.txt" \
          --finetune-data "$tmp/docs.txt" --pretrain-steps 800 --lora-steps 300 --logging-steps 1 --seed 3 \
          --out "$tmp/$base" --overwrite-output-dir true "${flags[@]}" >"$tmp/$base.txt" 2>&1 || echo "$base run: FAILED"
        { echo "== toy_transformer, $base base"; cat "$tmp/$base.txt"; } >>"$log"
      done
      python3 "$root/bench/fp8_accuracy.py" "$out/fp8_accuracy.json" "$tmp/bf16" "$tmp/bf16.txt" "$tmp/fp8" \
        "$tmp/fp8.txt" --machine "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee "$out/accuracy.txt"
      cp "$tmp/bf16/lora/log.csv" "$out/lora-bf16.csv"
      cp "$tmp/fp8/lora/log.csv" "$out/lora-fp8.csv"
      ;;
    *) echo "bench.sh fp8: stage arguments are speed and/or accuracy, got '$what'" >&2; exit 2 ;;
  esac
done
part "done"
