#!/usr/bin/env bash
# Installs tapegrad into a temporary prefix and builds examples/user_project against it with
# find_package(tapegrad), then runs its GoogleTest: the README's "use it from your project".
# Usage: user_project_test.sh <source dir> <build dir>
set -euo pipefail
src=$1 build=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
cmake -S "$src/examples/user_project" -B "$work/b" -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/b" -j2 >/dev/null
if [ -x "$work/b/gate_test" ]; then
  "$work/b/gate_test" --gtest_brief=1
else
  echo "tapegrad::testing was not exported (GoogleTest came from sources); built lora_script only"
fi
