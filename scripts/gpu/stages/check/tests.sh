# The whole suite: build, every test, compute-sanitizer over the GPU tests, the GEMM benchmarks.
# Stage arguments: some of env configure build test gputests memcheck racecheck initcheck bench
# (default: all). A failing step does not stop the later ones (a step whose input is missing is
# reported as skipped); the exit status is 1 if any failed. Each step's log is <out>/<step>.log,
# the table of every step <out>/summary.txt.
# The GPU tests are found, not listed: every test that ctest reports skipped with the GPU hidden
# (CUDA_VISIBLE_DEVICES=) and not skipped with it (step gputests, after test; the list goes to
# <out>/gpu-tests.txt). Each sanitizer then runs all of them in one process.
# Knobs: JOBS (nproc), TG_GPU_CHECK_CMAKE_ARGS (extra configure flags), SANITIZER_TIMEOUT (seconds
# per sanitizer run, 1800), CUDA_TEST_FILTER (a gtest filter that replaces the found list).
set -uo pipefail
jobs=${JOBS:-$(nproc 2>/dev/null || echo 8)}
san_timeout=${SANITIZER_TIMEOUT:-1800}
all_steps=(env configure build test gputests memcheck racecheck initcheck bench)
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=("${all_steps[@]}")

test_bin=$build/tests/tapegrad_tests
gpu_tests=$out/gpu-tests.txt

declare -A verdict seconds
summary_rows=()

# run_step NAME COMMAND...: runs the command with its output in $out/NAME.log (and on the
# terminal), records pass/FAIL and the time taken.
run_step() {
  local name=$1
  shift
  local log=$out/$name.log start rc
  echo
  echo "===== [$name] $*"
  start=$(date +%s)
  { echo "# $*"; "$@"; } 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  seconds[$name]=$(($(date +%s) - start))
  if [ "$rc" -eq 0 ]; then verdict[$name]=pass; else verdict[$name]="FAIL (exit $rc)"; fi
  summary_rows+=("$name")
}

skip_step() {
  verdict[$1]="skipped: $2"
  seconds[$1]=0
  summary_rows+=("$1")
  echo
  echo "===== [$1] skipped: $2"
}

wants() {
  local s
  for s in "${steps[@]}"; do [ "$s" = "$1" ] && return 0; done
  return 1
}

step_env() {
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv || true
  nvcc --version | tail -2 || true
  cmake --version | head -1 || true
  ninja --version || true
  command -v compute-sanitizer || echo "compute-sanitizer: not on PATH"
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name())' || true
  git -C "$root" log -1 --oneline 2>/dev/null || true
}

step_build() { cmake --build "$build" -j"$jobs"; }

step_test() { ctest --test-dir "$build" --output-on-failure -j"$jobs" --timeout 600; }

# The names of the tests ctest's log $1 reports skipped.
skipped_in() { sed -nE 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+) .*Skipped.*/\1/p' "$1" | sort -u; }

step_gputests() {
  CUDA_VISIBLE_DEVICES= ctest --test-dir "$build" -j"$jobs" --timeout 600 >"$out/no-gpu-ctest.log" 2>&1
  tail -3 "$out/no-gpu-ctest.log"
  comm -23 <(skipped_in "$out/no-gpu-ctest.log") <(skipped_in "$out/test.log") >"$gpu_tests"
  echo "$(wc -l <"$gpu_tests") GPU tests (skipped without the GPU, run with it): $gpu_tests"
  [ -s "$gpu_tests" ]
}

step_sanitizer() {
  local tool=$1 filter=${CUDA_TEST_FILTER:-$(paste -sd: "$gpu_tests")}
  local extra=()
  [ "$tool" = racecheck ] && extra=(--racecheck-report all)
  timeout "$san_timeout" compute-sanitizer --tool "$tool" --error-exitcode 99 --print-limit 20 "${extra[@]}" \
    "$test_bin" --gtest_filter="$filter" --gtest_brief=1
}

wants env && run_step env step_env
wants configure && run_step configure configure
if wants build; then
  if [ -f "$build/CMakeCache.txt" ]; then run_step build step_build; else skip_step build "not configured"; fi
fi
if wants test; then
  if [ -x "$test_bin" ]; then run_step test step_test; else skip_step test "no test binary"; fi
fi
if wants gputests; then
  if [ -f "$out/test.log" ]; then run_step gputests step_gputests; else skip_step gputests "no test log (step test)"; fi
fi
for tool in memcheck racecheck initcheck; do
  wants $tool || continue
  if ! command -v compute-sanitizer >/dev/null; then skip_step $tool "compute-sanitizer not found"
  elif [ ! -x "$test_bin" ]; then skip_step $tool "no test binary"
  elif [ -z "${CUDA_TEST_FILTER:-}" ] && [ ! -s "$gpu_tests" ]; then skip_step $tool "no GPU test list (step gputests)"
  else run_step $tool step_sanitizer $tool
  fi
done
if wants bench; then
  if [ -x "$build/bench/gemm_bench" ]; then run_step bench "$root/scripts/gpu/bench.sh" gemm "$build" "$out/bench"
  else skip_step bench "no benchmark binaries"; fi
fi

# ---- summary ----
{
  echo "check.sh tests summary ($(date -u +%Y-%m-%dT%H:%M:%SZ), $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?'))"
  printf '%-10s %-28s %6s  %s\n' step status secs log
  for s in "${summary_rows[@]}"; do
    printf '%-10s %-28s %6s  %s\n' "$s" "${verdict[$s]}" "${seconds[$s]}" "$out/$s.log"
  done
  if [ -f "$out/test.log" ]; then
    echo
    grep -E 'tests passed|tests failed|Total Test time' "$out/test.log" || true
    grep -E '^\s+[0-9]+ - .*\((Failed|Timeout|SEGFAULT|Subprocess aborted|Exception)' "$out/test.log" | head -40 || true
  fi
  for t in memcheck racecheck initcheck; do
    [ -f "$out/$t.log" ] && grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|tests ran|PASSED|FAILED' "$out/$t.log" | sed "s/^/$t: /"
  done
} | tee "$out/summary.txt"

failed=0
for s in "${summary_rows[@]}"; do [[ ${verdict[$s]} == FAIL* ]] && failed=1; done
exit $failed
