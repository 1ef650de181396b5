#!/usr/bin/env bash
# The main job on its built-in default: set up everything, build the openmp preset, run
# `zerosync` (build configuration + self-check). Pass a preset (openmp, cuda) to choose.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
preset="${1:-openmp}"
configure_and_build "$preset"
"$repo/build/$preset/bin/zerosync"
