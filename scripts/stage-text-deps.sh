#!/usr/bin/env bash
# For a machine that cannot install packages (the GPU machine): downloads the Debian packages
# of the tokenizers' libraries here and unpacks them into .deps/sysroot, which CMake searches
# (cmake/tapegradTextDeps.cmake). Carry .deps with the working tree.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get download libpcre2-dev libpcre2-8-0 libsentencepiece-dev libsentencepiece0 libutf8proc-dev libutf8proc2 >/dev/null)
mkdir -p "$root/.deps/sysroot"
for deb in "$work"/*.deb; do dpkg -x "$deb" "$root/.deps/sysroot"; done
if find "$root/.deps/sysroot" -type l -lname '/*' | grep -q .; then
  echo "stage-text-deps: a package has absolute symlinks; they will not resolve on another machine" >&2
  exit 1
fi
echo "staged: $(ls "$root/.deps/sysroot/usr/lib/x86_64-linux-gnu" | tr '\n' ' ')"
