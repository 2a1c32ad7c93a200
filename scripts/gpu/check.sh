#!/usr/bin/env bash
# Every check on the GPU machine, one stage a call: scripts/gpu/check.sh <stage> [build-dir] [out]
# [stage arguments]; --help lists the stages (their bodies: scripts/gpu/stages/check/).
# shellcheck source=scripts/gpu/lib.sh
source "$(dirname "$0")/lib.sh"
main check "$@"
