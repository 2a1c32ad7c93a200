# The norm backward table before and after a change: both trees built, timed in interleaved rounds.
# Run it before merging a change to ops/cuda/norm_*. Stage arguments: [BASELINE] [--rounds N] [--elementwise]
# Builds norm_bench from a baseline (default: commit 9a66475, the tree before the lab moved out of
# the library) and from this working tree, both in a temporary folder (build-dir is not used), runs
# both over the norm table's rows and two model widths (8192x768, 8192x2048) in interleaved rounds
# (baseline, new, baseline, new), and prints each row's best time before and after with a verdict.
# BASELINE: a commit of this repository (needs its .git), or a directory or .tar holding that
# commit's tree (make one where git is: git archive -o base.tar 9a66475). --elementwise also
# times elementwise_bench before and after (the shared packs changed those kernels' code).
# Needs CUDA, cmake and ninja; about 2 minutes of building and 2 of timing on an H200.
# Verdict per row: the two versions' best of N rounds; "slower" / "faster" when they differ by more
# than 3% and by more than the spread between the rounds of either version (the noise; about 1-2%
# on the H200). A slower row is a REGRESSION where the issue forbids one: the frozen (dx-only)
# modes and every bf16 row of width 768 to 8192. Exit status 1 when there is one.
set -euo pipefail

usage() { echo "usage: scripts/gpu/check.sh norm-regression [build-dir] OUT [BASELINE] [--rounds N] [--elementwise]" >&2; exit 2; }
base=9a66475
rounds=2
elementwise=0
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --elementwise) elementwise=1; shift ;;
    -*) usage ;;
    *) base=$1; shift ;;
  esac
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# ---- the baseline's source tree
mkdir -p "$work/base-src"
if [ -d "$base" ]; then
  cp -r "$base/." "$work/base-src/"
elif [ -f "$base" ]; then
  tar -xf "$base" -C "$work/base-src"
elif git -C "$root" cat-file -e "$base^{commit}" 2>/dev/null; then
  git -C "$root" archive "$base" | tar -x -C "$work/base-src"
else
  echo "norm-regression: no baseline '$base' (a commit of this repository, a directory or a .tar)" >&2
  exit 2
fi

# ---- both builds at once, half the cores each (only the library and the benchmarks)
jobs=$(( $(nproc) / 2 > 0 ? $(nproc) / 2 : 1 ))
targets="norm_bench"
[ "$elementwise" = 1 ] && targets="$targets elementwise_bench"
build_tree() {  # build_tree SRC BUILD_DIR LOG
  configure_tree "$1" "$2" -DTG_BUILD_TESTS=OFF -DTG_BUILD_EXAMPLES=OFF > "$3" 2>&1 &&
    cmake --build "$2" -j "$jobs" --target $targets >> "$3" 2>&1
}
echo "building the baseline ($base) and this tree ..."
t0=$(date +%s)
build_tree "$work/base-src" "$work/base-build" "$out/build-base.log" & pid_base=$!
build_tree "$root" "$work/new-build" "$out/build-new.log" & pid_new=$!
ok=1
wait $pid_base || { echo "baseline build failed: $out/build-base.log" >&2; ok=0; }
wait $pid_new || { echo "new build failed: $out/build-new.log" >&2; ok=0; }
[ $ok = 1 ] || exit 2
echo "built in $(( $(date +%s) - t0 )) s"

# ---- interleaved rounds
shapes_extra="8192x768 8192x2048"
run_version() {  # run_version NAME BUILD_DIR ROUND
  local csv="$out/$1-r$3"
  "$2/bench/norm_bench" --csv "$csv-table.csv" > "$csv-table.txt"
  for s in $shapes_extra; do
    "$2/bench/norm_bench" --shape "$s" --csv "$csv-$s.csv" > "$csv-$s.txt"
  done
  if [ "$elementwise" = 1 ]; then
    "$2/bench/elementwise_bench" "$out/ew-$1-r$3.csv" > "$out/ew-$1-r$3.txt"
  fi
}
t0=$(date +%s)
for r in $(seq 1 "$rounds"); do
  echo "round $r of $rounds ..."
  run_version base "$work/base-build" "$r"
  run_version new "$work/new-build" "$r"
done
echo "timed in $(( $(date +%s) - t0 )) s"

# ---- the table
python3 - "$out" "$rounds" "$elementwise" <<'PY'
import csv, glob, os, sys

out, rounds, elementwise = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"


def times(pattern, key_fields, value, scale=1.0):
    """{key: [time of each round]} over the CSV files of one version."""
    t = {}
    for path in sorted(glob.glob(os.path.join(out, pattern))):
        with open(path) as f:
            for r in csv.DictReader(f):
                t.setdefault(tuple(r[k] for k in key_fields), []).append(float(r[value]) * scale)
    return t


def verdict(before, after):
    b, a = min(before), min(after)
    noise = max((max(v) - min(v)) / min(v) for v in (before, after))
    change = a / b - 1
    if abs(change) <= max(0.03, noise):
        return b, a, change, noise, "same"
    return b, a, change, noise, "slower" if change > 0 else "faster"


FROZEN = {"frozen", "both_frozen"}
fields = ("op", "dtype", "rows", "dim", "mode")
base = times("base-r*-*.csv", fields, "us")
new = times("new-r*-*.csv", fields, "us")
print(f"\nnorm backward, µs (best of {rounds} rounds each); checked: frozen modes, bf16 rows of 768-8192")
print(f"{'op':10} {'dtype':5} {'rows x dim':12} {'mode':11} {'before':>9} {'after':>9} {'change':>8} {'noise':>6}  verdict")
regressions = checked = 0
for key in base:
    if key not in new:
        print(" ".join(key), "missing after")
        regressions += 1
        continue
    op, dtype, rows, dim, mode = key
    b, a, change, noise, v = verdict(base[key], new[key])
    in_scope = mode in FROZEN or (dtype == "bf16" and 768 <= int(dim) <= 8192)
    checked += in_scope
    if v == "slower" and in_scope:
        v = "REGRESSION"
        regressions += 1
    print(f"{op:10} {dtype:5} {rows + 'x' + dim:12} {mode:11} {b:9.1f} {a:9.1f} {100 * change:+7.1f}% "
          f"{100 * noise:5.1f}%  {v}")
print(f"\n{regressions} regressions in {checked} checked rows ({len(base)} rows in all)")

if elementwise:
    eb = times("ew-base-r*.csv", ("name", "dtype"), "ms", 1000.0)
    en = times("ew-new-r*.csv", ("name", "dtype"), "ms", 1000.0)
    print(f"\nelementwise_bench, µs (best of {rounds} rounds each)")
    for key in eb:
        if key in en:
            b, a, change, noise, v = verdict(eb[key], en[key])
            print(f"{key[0]:16} {key[1]:9} {b:9.1f} {a:9.1f} {100 * change:+7.1f}% {100 * noise:5.1f}%  {v}")
sys.exit(1 if regressions else 0)
PY
