#!/usr/bin/env bash
# shellcheck disable=SC2317  # the stage functions are called through run_stage
# The GPU machine's check, in one script: configure a Release build with the CUDA backend in
# build-gpu, build, run every test (GPU ones included), run every GPU test under
# compute-sanitizer (memcheck, racecheck and initcheck), run the benchmarks with the PyTorch reference,
# and print a summary table of every stage. A failing stage does not stop the later ones
# (a stage whose input is missing is reported as skipped); the exit status is 1 if any failed.
#
#   scripts/gpu/gpu-check.sh                 all stages
#   scripts/gpu/gpu-check.sh build test      only these (env configure build test gputests memcheck
#                                        racecheck initcheck bench)
#
# The GPU tests are found, not listed: every test that ctest reports skipped with the GPU hidden
# (CUDA_VISIBLE_DEVICES=) and not skipped with it (stage gputests, after test; the list goes to
# gpu-tests.txt). Each sanitizer then runs all of them in one process.
# Knobs: BUILD_DIR (build-gpu), JOBS (nproc), TG_GPU_CHECK_CMAKE_ARGS (extra configure flags),
# SANITIZER_TIMEOUT (seconds per sanitizer run, 1800), CUDA_TEST_FILTER (a gtest filter that
# replaces the found list). Logs go to $BUILD_DIR/gpu-check-logs and, when $OUT is set, are
# copied there as each stage ends (then summary.txt).
set -uo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$root/build-gpu}
case "$build" in /*) ;; *) build=$root/$build ;; esac
jobs=${JOBS:-$(nproc 2>/dev/null || echo 8)}
san_timeout=${SANITIZER_TIMEOUT:-1800}
logs=$build/gpu-check-logs
mkdir -p "$logs"
all_stages=(env configure build test gputests memcheck racecheck initcheck bench)
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=("${all_stages[@]}")

test_bin=$build/tests/tapegrad_tests
gpu_tests=$logs/gpu-tests.txt

declare -A status seconds
summary_rows=()

# run_stage NAME COMMAND...: runs the command with its output in $logs/NAME.log (and on the
# terminal), records pass/FAIL and the time taken.
run_stage() {
  local name=$1
  shift
  local log=$logs/$name.log start rc
  echo
  echo "===== [$name] $*"
  start=$(date +%s)
  { echo "# $*"; "$@"; } 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  seconds[$name]=$(($(date +%s) - start))
  if [ "$rc" -eq 0 ]; then status[$name]=pass; else status[$name]="FAIL (exit $rc)"; fi
  summary_rows+=("$name")
  if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then cp "$log" "$OUT/" 2>/dev/null; fi
}

skip_stage() {
  status[$1]="skipped: $2"
  seconds[$1]=0
  summary_rows+=("$1")
  echo
  echo "===== [$1] skipped: $2"
}

wants() {
  local s
  for s in "${stages[@]}"; do [ "$s" = "$1" ] && return 0; done
  return 1
}

stage_env() {
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv || true
  nvcc --version | tail -2 || true
  cmake --version | head -1 || true
  ninja --version || true
  command -v compute-sanitizer || echo "compute-sanitizer: not on PATH"
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name())' || true
  git -C "$root" log -1 --oneline 2>/dev/null || true
}

# Eigen: a CMake package from the system or .deps/; if only the headers are installed, a
# minimal package config pointing at /usr/include/eigen3 is written into the build dir.
eigen_args() {
  local d
  for d in "$root/.deps/eigen3/share/eigen3/cmake" /usr/share/eigen3/cmake /usr/lib/cmake/eigen3 \
           /usr/local/share/eigen3/cmake /usr/lib/x86_64-linux-gnu/cmake/eigen3; do
    if [ -f "$d/Eigen3Config.cmake" ]; then echo "-DEigen3_DIR=$d"; return; fi
  done
  if [ -f /usr/include/eigen3/Eigen/Core ]; then
    d=$build/eigen3-config
    mkdir -p "$d"
    cat >"$d/Eigen3Config.cmake" <<'CFG'
if(NOT TARGET Eigen3::Eigen)
  add_library(Eigen3::Eigen INTERFACE IMPORTED)
  set_target_properties(Eigen3::Eigen PROPERTIES INTERFACE_INCLUDE_DIRECTORIES /usr/include/eigen3)
endif()
CFG
    printf 'set(PACKAGE_VERSION 3.4.0)\nset(PACKAGE_VERSION_COMPATIBLE TRUE)\n' >"$d/Eigen3ConfigVersion.cmake"
    echo "-DEigen3_DIR=$d"
  fi
}

stage_configure() {
  local gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  local cudnn  # attention through cuDNN: the toolkit's, else PyTorch's wheel's
  cudnn=$("$root/scripts/cudnn-root.sh" || true)
  # shellcheck disable=SC2046,SC2086
  cmake -S "$root" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DTG_CUDA=ON $(eigen_args) \
    ${cudnn:+-DTG_CUDNN_ROOT="$cudnn"} ${TG_GPU_CHECK_CMAKE_ARGS:-}
}

stage_build() { cmake --build "$build" -j"$jobs"; }

stage_test() { ctest --test-dir "$build" --output-on-failure -j"$jobs" --timeout 600; }

# The names of the tests ctest's log $1 reports skipped.
skipped_in() { sed -nE 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+) .*Skipped.*/\1/p' "$1" | sort -u; }

stage_gputests() {
  CUDA_VISIBLE_DEVICES= ctest --test-dir "$build" -j"$jobs" --timeout 600 >"$logs/no-gpu-ctest.log" 2>&1
  tail -3 "$logs/no-gpu-ctest.log"
  comm -23 <(skipped_in "$logs/no-gpu-ctest.log") <(skipped_in "$logs/test.log") >"$gpu_tests"
  echo "$(wc -l <"$gpu_tests") GPU tests (skipped without the GPU, run with it): $gpu_tests"
  [ -s "$gpu_tests" ]
}

stage_sanitizer() {
  local tool=$1 filter=${CUDA_TEST_FILTER:-$(paste -sd: "$gpu_tests")}
  local extra=()
  [ "$tool" = racecheck ] && extra=(--racecheck-report all)
  timeout "$san_timeout" compute-sanitizer --tool "$tool" --error-exitcode 99 --print-limit 20 "${extra[@]}" \
    "$test_bin" --gtest_filter="$filter" --gtest_brief=1
}

cd "$root" || exit 1
wants env && run_stage env stage_env
wants configure && run_stage configure stage_configure
if wants build; then
  if [ -f "$build/CMakeCache.txt" ]; then run_stage build stage_build; else skip_stage build "not configured"; fi
fi
if wants test; then
  if [ -x "$test_bin" ]; then run_stage test stage_test; else skip_stage test "no test binary"; fi
fi
if wants gputests; then
  if [ -f "$logs/test.log" ]; then run_stage gputests stage_gputests; else skip_stage gputests "no test log (stage test)"; fi
fi
for tool in memcheck racecheck initcheck; do
  wants $tool || continue
  if ! command -v compute-sanitizer >/dev/null; then skip_stage $tool "compute-sanitizer not found"
  elif [ ! -x "$test_bin" ]; then skip_stage $tool "no test binary"
  elif [ -z "${CUDA_TEST_FILTER:-}" ] && [ ! -s "$gpu_tests" ]; then skip_stage $tool "no GPU test list (stage gputests)"
  else run_stage $tool stage_sanitizer $tool
  fi
done
if wants bench; then
  if [ -x "$build/bench/gemm_bench" ]; then run_stage bench "$root/scripts/gpu/run_bench.sh" "$build" "$logs/bench-csv"
  else skip_stage bench "no benchmark binaries"; fi
fi

# ---- summary ----
{
  echo "gpu-check summary ($(date -u +%Y-%m-%dT%H:%M:%SZ), $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?'))"
  printf '%-10s %-28s %6s  %s\n' stage status secs log
  for s in "${summary_rows[@]}"; do
    printf '%-10s %-28s %6s  %s\n' "$s" "${status[$s]}" "${seconds[$s]}" "$logs/$s.log"
  done
  if [ -f "$logs/test.log" ]; then
    echo
    grep -E 'tests passed|tests failed|Total Test time' "$logs/test.log" || true
    grep -E '^\s+[0-9]+ - .*\((Failed|Timeout|SEGFAULT|Subprocess aborted|Exception)' "$logs/test.log" | head -40 || true
  fi
  for t in memcheck racecheck initcheck; do
    [ -f "$logs/$t.log" ] && grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|tests ran|PASSED|FAILED' "$logs/$t.log" | sed "s/^/$t: /"
  done
} | tee "$logs/summary.txt"

if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then cp "$logs/summary.txt" "$OUT/" 2>/dev/null; fi

failed=0
for s in "${summary_rows[@]}"; do [[ ${status[$s]} == FAIL* ]] && failed=1; done
exit $failed
