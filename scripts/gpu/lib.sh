# What every stage of scripts/gpu/check.sh and scripts/gpu/bench.sh shares: the command line, the
# one configure and build of a GPU tree, and the helpers for logs. Sourced by those two, never run.
# shellcheck shell=bash

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

# One line a stage: its file's name and first comment line.
list_stages() {
  local kind=$1 file
  echo "usage: scripts/gpu/$kind.sh <stage> [build-dir] [out] [stage arguments]"
  echo "       scripts/gpu/$kind.sh --help [stage]    (a stage's whole description)"
  echo "build-dir defaults to build-gpu, out to out/$kind-<stage>, both from where it is called."
  echo "stages:"
  for file in "$root/scripts/gpu/stages/$kind"/*.sh; do
    printf '  %-16s %s\n' "$(basename "$file" .sh)" "$(sed -n '1s/^# //p' "$file")"
  done
}

absolute() { case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }

# main <check|bench> <stage> [build-dir] [out] [stage arguments]: sources the stage's file in the
# repository root with $build and $out absolute, $out made, and "$@" the stage's own arguments.
main() {
  local kind=$1 file
  shift
  case ${1:-} in
    -h | --help | help)
      if [ -n "${2:-}" ] && [ -f "$root/scripts/gpu/stages/$kind/$2.sh" ]; then
        sed -n '/^#/!q; s/^# \{0,1\}//p' "$root/scripts/gpu/stages/$kind/$2.sh"
      else
        list_stages "$kind"
      fi
      exit 0 ;;
    "") list_stages "$kind" >&2; exit 2 ;;
  esac
  stage=$1
  file=$root/scripts/gpu/stages/$kind/$stage.sh
  [ -f "$file" ] || { echo "scripts/gpu/$kind.sh: no stage '$stage'" >&2; list_stages "$kind" >&2; exit 2; }
  build=$(absolute "${2:-build-gpu}")
  out=$(absolute "${3:-out/$kind-$stage}")
  shift $(($# < 3 ? $# : 3))
  mkdir -p "$out"
  cd "$root" || exit 1
  # shellcheck source=/dev/null
  source "$file"
}

# Eigen as a CMake package from the system or .deps/; where only the headers are installed, a
# minimal package config pointing at /usr/include/eigen3, written into the build dir ($1).
eigen_args() {
  local d
  for d in "$root/.deps/eigen3/share/eigen3/cmake" /usr/share/eigen3/cmake /usr/lib/cmake/eigen3 \
           /usr/local/share/eigen3/cmake /usr/lib/x86_64-linux-gnu/cmake/eigen3; do
    if [ -f "$d/Eigen3Config.cmake" ]; then echo "-DEigen3_DIR=$d"; return; fi
  done
  if [ -f /usr/include/eigen3/Eigen/Core ]; then
    d=$1/eigen3-config
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

# NCCL from PyTorch's nvidia-nccl wheel when the toolkit has none.
nccl_args() {
  ls /usr/local/cuda/include/nccl.h /usr/include/nccl.h >/dev/null 2>&1 && return
  local wheel
  wheel=$(python3 -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null || true)
  [ -z "$wheel" ] || echo "-DTG_NCCL_ROOT=$wheel"
}

# configure_tree <source> <build dir> [cmake flags]: the only configure of a GPU tree: Release, the
# CUDA backend, Eigen wherever it is, cuDNN and NCCL (the toolkit's, else PyTorch's wheels') when
# found, then the flags and $TG_GPU_CHECK_CMAKE_ARGS.
configure_tree() {
  local src=$1 dir=$2 gen=() cudnn
  shift 2
  command -v ninja >/dev/null && gen=(-G Ninja)
  cudnn=$("$root/scripts/cudnn-root.sh" || true)
  echo "cuDNN: ${cudnn:-none found (the flash kernels serve every call)}"
  # shellcheck disable=SC2046,SC2086
  cmake -S "$src" -B "$dir" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DTG_CUDA=ON $(eigen_args "$dir") \
    ${cudnn:+-DTG_CUDNN_ROOT="$cudnn"} $(nccl_args) "$@" ${TG_GPU_CHECK_CMAKE_ARGS:-}
}

configure() { configure_tree "$root" "$build"; }

# build_targets [targets]: configures $build and builds those targets (every one without).
build_targets() {
  configure
  if [ $# -gt 0 ]; then cmake --build "$build" -j"$(nproc)" --target "$@"; else cmake --build "$build" -j"$(nproc)"; fi
}

built_with_nccl() { grep -q '^TG_NCCL_LIBRARY:FILEPATH=/' "$build/CMakeCache.txt" 2>/dev/null; }

note_commit() {
  [ -n "${TG_COMMIT:-}" ] || echo "note: TG_COMMIT is not set: the rows name the GPU machine's (stale) checkout"
}

# part <title>: a heading with the seconds since the stage began.
part() { echo "== $1 ($SECONDS s so far)"; }

# logged <log name> <command...>: the command's output to $out/<log>, its verdict on stdout (the
# log's tail when it fails); status=1 on a failure, the stage goes on.
# shellcheck disable=SC2034  # the stages read it
status=0
logged() {
  local log=$1
  shift
  if "$@" >"$out/$log" 2>&1; then echo "ok   $log"; else echo "FAIL $log (tail below)"; tail -40 "$out/$log"; status=1; fi
}

# gtest_step <filter>: tapegrad_tests under that filter into $out/tests.txt, its verdict lines on
# stdout; status=1 when a test failed, the stage goes on.
gtest_step() {
  "$build/tests/tapegrad_tests" --gtest_filter="$1" >"$out/tests.txt" 2>&1 || status=1
  grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/tests.txt" || true
}

# merge_rows <out.json> <rows.json...>: one results file of several (the rows in order).
merge_rows() { python3 "$root/scripts/gpu/merge_rows.py" "$@"; }
