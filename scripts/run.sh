#!/usr/bin/env bash
# The main job on its built-in default: set up everything, build (openmp preset), then train a
# cart-pole agent with `zerosync train` until it is solved (mean greedy return >= 475 over 100
# evaluation episodes). Arguments go to `zerosync train` (e.g. --env market --steps 200000);
# ZEROSYNC_PRESET=cuda builds and runs the CUDA backend instead.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
preset="${ZEROSYNC_PRESET:-openmp}"
configure_and_build "$preset"
cd "$repo"
exec "$repo/build/$preset/bin/zerosync" train "$@"
