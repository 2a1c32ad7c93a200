#!/usr/bin/env bash
# Installs llama.cpp for the GGUF tests (tests/test_gguf_llama_cpp.cpp): node-llama-cpp 3.21.1 from
# the npm registry with its prebuilt Linux x86-64 CPU binaries only (no build, no GPU, no model
# download), outside the repository, in $TG_LLAMA_CPP_DIR (default ~/.cache/tapegrad/node-llama-cpp-3.21.1).
# Node.js and npm come from apt-get when missing (as root, or through password-less sudo).
# Does nothing (and needs no network) when it is there already. `make test` and .ci/run run it; the
# GGUF tests fail without it.
set -euo pipefail

version=3.21.1
dir=${TG_LLAMA_CPP_DIR:-${HOME:-/root}/.cache/tapegrad/node-llama-cpp-$version}
if [ -f "$dir/node_modules/node-llama-cpp/package.json" ] && [ -d "$dir/node_modules/@node-llama-cpp/linux-x64" ] &&
  command -v node >/dev/null 2>&1; then
  exit 0
fi
if [ "$(uname -s)-$(uname -m)" != "Linux-x86_64" ]; then
  echo "tapegrad: node-llama-cpp's prebuilt binaries used here are Linux x86-64 only; the GGUF tests fail without llama.cpp" >&2
  exit 1
fi
if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo -n"
  echo "tapegrad: installing nodejs and npm"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
mkdir -p "$dir"
# --omit=optional: not the CUDA, Vulkan and ARM builds (700 MB); the x86-64 CPU one is named instead.
# --ignore-scripts: its postinstall would look for a GPU and offer a build.
npm install --prefix "$dir" --save-exact --ignore-scripts --omit=optional --no-audit --no-fund --loglevel=error \
  "node-llama-cpp@$version" "@node-llama-cpp/linux-x64@$version"
echo "tapegrad: llama.cpp (node-llama-cpp $version) is in $dir"
