#!/usr/bin/env bash
# Installs what building tapegrad needs and this machine lacks: a C++20 compiler, CMake >= 3.25,
# Eigen 3.4, GoogleTest (and ninja/make), PCRE2, sentencepiece and utf8proc. Uses apt-get as root (or through sudo); otherwise
# says exactly what to install. Does nothing when everything is present.
#   scripts/install-deps.sh --sanitizers   also clang, its sanitizer/libFuzzer runtimes and
#                                          llvm-symbolizer (.ci/run's sanitizer suite and fuzzers)
#   scripts/install-deps.sh --llama-cpp    also llama.cpp for the GGUF tests (scripts/install-llama-cpp.sh:
#                                          node-llama-cpp's prebuilt CPU build, outside the repository)
set -euo pipefail

missing=()
have() { command -v "$1" >/dev/null 2>&1; }
root=$(cd "$(dirname "$0")/.." && pwd)

have c++ || have g++ || missing+=(g++)
have make || missing+=(make)
if have cmake; then
  ver=$(cmake --version | head -1 | grep -oE '[0-9]+\.[0-9]+' | head -1)
  if [ "$(printf '%s\n3.25\n' "$ver" | sort -V | head -1)" != "3.25" ]; then missing+=(cmake); fi
else
  missing+=(cmake)
fi
[ -f /usr/include/eigen3/Eigen/Core ] || [ -d "$root/.deps/eigen3" ] || missing+=(libeigen3-dev)
[ -d /usr/src/googletest ] || [ -d "$root/.deps/googletest" ] || [ -f /usr/include/gtest/gtest.h ] ||
  missing+=(googletest libgtest-dev)
have ninja || missing+=(ninja-build)
# data/'s tokenizers (or unpacked under .deps/sysroot: scripts/stage-text-deps.sh)
for pkg in libpcre2-dev:pcre2.h libsentencepiece-dev:sentencepiece_processor.h libutf8proc-dev:utf8proc.h; do
  [ -f "/usr/include/${pkg#*:}" ] || [ -f "$root/.deps/sysroot/usr/include/${pkg#*:}" ] || missing+=("${pkg%%:*}")
done
if [ "${1:-}" = "--sanitizers" ]; then
  have clang++ || missing+=(clang)
  compgen -G "/usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a" >/dev/null || missing+=(libclang-rt-dev)
  have llvm-symbolizer || missing+=(llvm)
fi

if [ "${1:-}" = "--llama-cpp" ]; then
  "$root/scripts/install-llama-cpp.sh"
fi

[ ${#missing[@]} -eq 0 ] && exit 0

echo "tapegrad: installing missing packages: ${missing[*]}"
if [ "$(id -u)" -eq 0 ]; then
  sudo=""
elif have sudo && sudo -n true 2>/dev/null; then
  sudo="sudo"
else
  echo "tapegrad: cannot install packages without root. Please run:" >&2
  echo "  sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
if ! have apt-get; then
  echo "tapegrad: no apt-get on this machine; install these with your package manager: ${missing[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "tapegrad: installed ${missing[*]}"
