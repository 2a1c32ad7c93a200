# tapegrad against transformers + peft: models, adapters, from_pretrained / save_pretrained.
# Needs PyTorch, transformers and peft (the GPU machine) and the interop_dump target built in
# build-dir. tests/interop/check_hf_roundtrip.py <build-dir> --write-fixtures also rewrites
# tests/fixtures/hf/ (commit them when a format change needs new ones).
set -euo pipefail
[ -x "$build/tests/interop_dump" ] || { echo "check.sh interop: build the interop_dump target in $build first" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$build/tests/interop_dump" dump "$work"
python3 "$root/tests/interop/check_against_transformers.py" "$work" "$build/tests/interop_dump"
# Hugging Face folders and peft adapters both ways (from_pretrained, save_pretrained, adapters).
python3 "$root/tests/interop/check_hf_roundtrip.py" "$build"
