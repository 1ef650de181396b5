#!/usr/bin/env bash
# The test command: set up everything, then build and run the whole test suite with ctest for
# each preset given (default: openmp, then openmp-debug under ASan/UBSan + bounds checking).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
presets=("$@")
[ "${#presets[@]}" -gt 0 ] || presets=(openmp openmp-debug)
for preset in "${presets[@]}"; do
  echo "=== zerosync tests: preset $preset ==="
  configure_and_build "$preset"
  (cd "$repo" && ctest --preset "$preset" -j 2 --no-tests=error)
done
