#!/usr/bin/env bash
# The tokenizer and dataset tests under ThreadSanitizer (issue 39): a Tokenizer promises that
# every method may be called from many threads at once, and SequenceDataset draws batches
# through one shared permutation. Builds the CPU test binary with clang -fsanitize=thread into
# build-tsan (or $1) and runs those suites, 8 threads in the tests that use threads; exits
# non-zero on any report.
#
#   scripts/tsan-check.sh [build-dir]      # needs clang: scripts/install-deps.sh --sanitizers
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build-tsan}
if [ ! -f "$dir/CMakeCache.txt" ]; then
  CC=clang CXX=clang++ cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" -DTG_CUDA=OFF -DTG_SANITIZE=thread -DTG_BUILD_BENCH=OFF
fi
cmake --build "$dir" -j"${JOBS:-$(nproc 2>/dev/null || echo 2)}" --target tapegrad_tests
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:${TSAN_OPTIONS:-}"
# The suites run from the build folder: the tests find tests/fixtures relative to it.
cd "$dir"
tests/tapegrad_tests --gtest_filter='Tokenizer*:*TokenizerFixture*:Dataset*:*Regex*'
echo "tsan-check: no ThreadSanitizer report"
