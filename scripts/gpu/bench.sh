#!/usr/bin/env bash
# Every benchmark on the GPU machine, PyTorch timed in the same call, one stage a call:
# scripts/gpu/bench.sh <stage> [build-dir] [out] [stage arguments]; --help lists the stages (their
# bodies: scripts/gpu/stages/bench/). Copy the JSON rows from out to bench/results/, then run
# python3 bench/make_results.py.
# shellcheck source=scripts/gpu/lib.sh
source "$(dirname "$0")/lib.sh"
main bench "$@"
