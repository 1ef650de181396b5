#!/usr/bin/env bash
# Configures and compiles the cuda preset (Kokkos CUDA sm_90 + cuBLAS) so CUDA code never rots
# on machines without a GPU. Needs the CUDA toolkit (nvcc); runs nothing.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
configure_and_build cuda
echo "cuda preset compiled: $repo/build/cuda/bin"
