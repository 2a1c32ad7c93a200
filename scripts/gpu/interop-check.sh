#!/usr/bin/env bash
# tapegrad against transformers + peft (on a machine with PyTorch, transformers and peft: the GPU
# machine). Usage: scripts/gpu/interop-check.sh [build dir]   (default build-gpu, then build)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-}
[ -z "$build" ] && for b in "$root/build-gpu" "$root/build"; do [ -x "$b/tests/interop_dump" ] && build=$b && break; done
[ -x "$build/tests/interop_dump" ] || { echo "interop-check: build the interop_dump target first" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$build/tests/interop_dump" dump "$work"
python3 "$root/tests/interop/check_against_transformers.py" "$work" "$build/tests/interop_dump"
# Hugging Face folders and peft adapters both ways (from_pretrained, save_pretrained, adapters).
python3 "$root/tests/interop/check_hf_roundtrip.py" "$build"
