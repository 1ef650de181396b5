#!/usr/bin/env bash
# Installs everything zerosync needs on a fresh Debian 12 machine and builds the Kokkos stack
# for one or more backends into a cache outside the work tree. Safe to re-run: every stage
# leaves a stamp and is skipped when its stamp matches.
#
#   cmake/bootstrap.sh [--no-apt] BACKEND...      BACKEND: openmp | openmp-debug | cuda | fuzz
#
# `fuzz` is no Kokkos build: it only installs clang and its libFuzzer runtime for scripts/fuzz.sh,
# so the normal build and test path does not carry them.
#
# ZEROSYNC_DEPS   cache root (default: ~/.cache/zerosync-deps)
# ZEROSYNC_JOBS   parallel build jobs (default: nproc)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
deps="${ZEROSYNC_DEPS:-$HOME/.cache/zerosync-deps}"
jobs="${ZEROSYNC_JOBS:-$(nproc)}"
kokkos_version="3.4.01"
trilinos_version="13.2.0"

die() { echo "zerosync bootstrap: error: $*" >&2; exit 1; }
step() { echo "zerosync bootstrap: $*"; }

do_apt=1
do_fuzz=0
backends=()
for arg in "$@"; do
  case "$arg" in
    --no-apt) do_apt=0 ;;
    openmp|openmp-debug|cuda) backends+=("$arg") ;;
    fuzz) do_fuzz=1 ;;
    -h|--help) sed -n '2,12p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) die "unknown backend '$arg'; expected one of: openmp, openmp-debug, cuda, fuzz" ;;
  esac
done
[ "${#backends[@]}" -gt 0 ] || [ "$do_fuzz" -eq 1 ] \
  || die "no backend given; expected one or more of: openmp, openmp-debug, cuda, fuzz"

mkdir -p "$deps" 2>/dev/null || die "cannot create the cache directory '$deps'; set ZEROSYNC_DEPS to a writable path"

# Fail early, with the cause, rather than half-way through a 166 MB download or a build.
check_disk() {
  local need_mb="$1" avail_mb
  avail_mb=$(df -Pm "$deps" | awk 'NR==2 {print $4}')
  if [ "${avail_mb:-0}" -lt "$need_mb" ]; then
    die "disk full: ${avail_mb} MB free under '$deps', need about ${need_mb} MB; free space or point ZEROSYNC_DEPS elsewhere"
  fi
}

# ---------------------------------------------------------------- Debian packages
apt_packages=(build-essential cmake ninja-build pkg-config dpkg-dev ca-certificates xz-utils
              libgtest-dev libgmock-dev libbenchmark-dev libopenblas-dev
              nlohmann-json3-dev libcli11-dev libfmt-dev python3 gnuplot-nox
              libbenchmark-tools python3-scipy zlib1g-dev
              libopenmpi-dev openmpi-bin)  # MPI: runs of several ranks (docs/scale-out.md)
# libFuzzer ships with Debian's clang in libclang-rt-14-dev (clang 14 is bookworm's default).
if [ "$do_fuzz" -eq 1 ]; then apt_packages+=(clang libclang-rt-14-dev); fi
# pip fetches NCCL's wheel for the cuda backend when the CUDA toolkit has no NCCL (fetch_nccl).
for b in "${backends[@]}"; do if [ "$b" = cuda ]; then apt_packages+=(python3-pip); fi; done

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

install_packages() {
  local missing=()
  for p in "${apt_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ "${#missing[@]}" -eq 0 ]; then step "Debian packages: present"; return; fi
  step "Debian packages: installing ${missing[*]}"
  command -v apt-get >/dev/null || die "apt-get not found: this bootstrap targets Debian 12; install ${missing[*]} by hand and re-run with --no-apt"
  as_root apt-get update -qq || die "apt-get update failed (no network?); check the connection to the Debian mirror and re-run"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" \
    || die "apt-get install failed for: ${missing[*]}"
}

# ---------------------------------------------------------------- Kokkos sources
# Kokkos and Kokkos Kernels 3.4.01 ship inside Debian's trilinos 13.2.0 source package.
src_root="$deps/src/kokkos-$kokkos_version"
patch_stamp_value() { sha256sum < "$here/bootstrap/patch_kokkos.py" | cut -c1-16; }
# Bump when a build option below changes, so cached installs are rebuilt.
build_recipe=1

fetch_sources() {
  if [ -f "$src_root/.fetched" ]; then step "Kokkos $kokkos_version sources: cached"; return; fi
  check_disk 1200
  local dl="$deps/download"
  mkdir -p "$dl"
  if ! ls "$dl"/trilinos_"$trilinos_version"*.orig.tar.* >/dev/null 2>&1; then
    if ! grep -rqs "deb-src" /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null; then
      step "adding a deb-src entry for bookworm (needed by apt-get source)"
      printf 'Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
        | as_root tee /etc/apt/sources.list.d/zerosync-src.sources >/dev/null
      as_root apt-get update -qq || die "apt-get update failed (no network?); re-run when the Debian mirror is reachable"
    fi
    step "downloading Debian's trilinos $trilinos_version source package (~166 MB)"
    (cd "$dl" && apt-get source --download-only trilinos >/dev/null) \
      || die "could not download the trilinos source package (no network, or no deb-src line for bookworm?)"
  fi
  local tarball
  tarball=$(ls "$dl"/trilinos_"$trilinos_version"*.orig.tar.* 2>/dev/null | head -n1)
  [ -n "$tarball" ] || die "trilinos $trilinos_version orig tarball not found in '$dl' (apt-get source fetched another version?)"
  step "extracting packages/kokkos and packages/kokkos-kernels from $(basename "$tarball")"
  rm -rf "$src_root.tmp" && mkdir -p "$src_root.tmp"
  tar -xf "$tarball" -C "$src_root.tmp" --strip-components=2 --wildcards \
      '*/packages/kokkos/*' '*/packages/kokkos-kernels/*' \
    || die "extracting '$tarball' failed (corrupt download? delete '$dl' and re-run)"
  [ -f "$src_root.tmp/kokkos/CMakeLists.txt" ] && [ -f "$src_root.tmp/kokkos-kernels/CMakeLists.txt" ] \
    || die "the tarball does not hold packages/kokkos and packages/kokkos-kernels"
  rm -rf "$src_root" && mv "$src_root.tmp" "$src_root"
  touch "$src_root/.fetched"
}

patch_sources() {
  local want; want=$(patch_stamp_value)
  if [ "$(cat "$src_root/.patched" 2>/dev/null)" = "$want" ]; then step "Kokkos patches: applied"; return; fi
  if [ -f "$src_root/.patched" ]; then
    # The patch script changed since these sources were patched: start from clean sources.
    rm -rf "$src_root"; fetch_sources
  fi
  step "patching Kokkos $kokkos_version for CUDA 13 and Hopper"
  python3 "$here/bootstrap/patch_kokkos.py" "$src_root/kokkos" || die "patching Kokkos failed (see above)"
  echo "$want" > "$src_root/.patched"
}

# ---------------------------------------------------------------- builds
kokkos_options() {
  case "$1" in
    openmp) echo "-DKokkos_ENABLE_OPENMP=ON -DKokkos_ENABLE_SERIAL=ON -DCMAKE_BUILD_TYPE=Release" ;;
    openmp-debug) echo "-DKokkos_ENABLE_OPENMP=ON -DKokkos_ENABLE_SERIAL=ON -DCMAKE_BUILD_TYPE=Debug
                   -DKokkos_ENABLE_DEBUG=ON -DKokkos_ENABLE_DEBUG_BOUNDS_CHECK=ON" ;;
    cuda) echo "-DKokkos_ENABLE_CUDA=ON -DKokkos_ENABLE_SERIAL=ON -DKokkos_ARCH_HOPPER90=ON
                -DKokkos_ENABLE_CUDA_LAMBDA=ON -DCMAKE_BUILD_TYPE=Release
                -DCMAKE_CXX_COMPILER=$src_root/kokkos/bin/nvcc_wrapper" ;;
  esac
}

build_backend() {
  local b="$1" prefix="$deps/install/$b" stamp
  stamp="kokkos-$kokkos_version recipe-$build_recipe $(patch_stamp_value) $(kokkos_options "$b" | tr -s ' \n' ' ')"
  if [ "$(cat "$prefix/.stamp" 2>/dev/null)" = "$stamp" ] && [ -f "$prefix/.complete" ]; then
    step "Kokkos for '$b': cached at $prefix"; return
  fi
  fetch_sources; patch_sources
  check_disk 800
  if [ "$b" = cuda ]; then
    command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] \
      || die "the cuda backend needs the CUDA toolkit (nvcc); install CUDA 12.x/13.x or choose openmp"
    export PATH="/usr/local/cuda/bin:$PATH"
    # nvcc_wrapper's own default arch (sm_35) is rejected by CUDA 13.
    export NVCC_WRAPPER_DEFAULT_COMPILER="${NVCC_WRAPPER_DEFAULT_COMPILER:-g++}"
  fi
  rm -rf "$prefix" "$deps/build/$b"
  mkdir -p "$deps/build/$b" "$deps/logs"
  local bk="$deps/build/$b/kokkos" bkk="$deps/build/$b/kokkos-kernels"
  step "building Kokkos $kokkos_version for '$b' (a few minutes)"
  # shellcheck disable=SC2046
  cmake -S "$src_root/kokkos" -B "$bk" -G Ninja $(kokkos_options "$b") \
        -DCMAKE_CXX_STANDARD=17 -DCMAKE_INSTALL_PREFIX="$prefix" -DKokkos_ENABLE_TESTS=OFF \
        > "$deps/logs/$b.kokkos.configure.log" 2>&1 \
    || die "configuring Kokkos for '$b' failed; log: $deps/logs/$b.kokkos.configure.log"
  cmake --build "$bk" -j "$jobs" > "$deps/logs/$b.kokkos.build.log" 2>&1 \
    || die "building Kokkos for '$b' failed; log: $deps/logs/$b.kokkos.build.log"
  cmake --install "$bk" > /dev/null || die "installing Kokkos for '$b' into '$prefix' failed (disk full?)"

  if [ "$b" != cuda ]; then
    # Host GEMMs go through Kokkos Kernels with OpenBLAS underneath. No ETI: the handful of
    # kernels zerosync uses are instantiated in its own sources, which keeps this build short.
    step "building Kokkos Kernels $kokkos_version for '$b'"
    local cxx=""; [ "$b" = cuda ] && cxx="-DCMAKE_CXX_COMPILER=$prefix/bin/nvcc_wrapper"
    cmake -S "$src_root/kokkos-kernels" -B "$bkk" -G Ninja $cxx \
          -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_STANDARD=17 \
          -DKokkos_ROOT="$prefix" -DCMAKE_INSTALL_PREFIX="$prefix" \
          -DKokkosKernels_ENABLE_TPL_BLAS=ON -DKokkosKernels_INST_FLOAT=OFF -DKokkosKernels_INST_DOUBLE=OFF \
          -DKokkosKernels_INST_COMPLEX_DOUBLE=OFF -DKokkosKernels_INST_COMPLEX_FLOAT=OFF \
          -DKokkosKernels_INST_ORDINAL_INT=OFF -DKokkosKernels_INST_ORDINAL_INT64_T=OFF \
          -DKokkosKernels_INST_OFFSET_INT=OFF -DKokkosKernels_INST_OFFSET_SIZE_T=OFF \
          -DKokkosKernels_INST_LAYOUTLEFT=OFF -DKokkosKernels_INST_LAYOUTRIGHT=OFF \
          -DKokkosKernels_ENABLE_TESTS=OFF -DKokkosKernels_ENABLE_EXAMPLES=OFF \
          > "$deps/logs/$b.kk.configure.log" 2>&1 \
      || die "configuring Kokkos Kernels for '$b' failed; log: $deps/logs/$b.kk.configure.log"
    cmake --build "$bkk" -j "$jobs" > "$deps/logs/$b.kk.build.log" 2>&1 \
      || die "building Kokkos Kernels for '$b' failed; log: $deps/logs/$b.kk.build.log"
    cmake --install "$bkk" > /dev/null || die "installing Kokkos Kernels into '$prefix' failed (disk full?)"
  fi
  echo "$stamp" > "$prefix/.stamp"
  touch "$prefix/.complete"
  rm -rf "$deps/build/$b"
  step "Kokkos for '$b' installed at $prefix"
}

# ---------------------------------------------------------------- NCCL (cuda backend)
# The GPUs' all-reduce. Used where it already is: the CUDA toolkit's (nccl.h beside
# cuda_runtime.h), $NCCL_HOME, or a Python environment's nvidia-nccl-cu13 package (CMakeLists.txt
# looks in the same places). Otherwise PyPI's nvidia-nccl-cu13 wheel, which ships
# nvidia/nccl/include/nccl.h and nvidia/nccl/lib/libnccl.so.2 (no unversioned link), is unpacked
# into $deps/nccl.
nccl_version="2.28.9"
fetch_nccl() {
  local cuda_home="${CUDA_HOME:-/usr/local/cuda}"
  if [ -f "$cuda_home/include/nccl.h" ] || { [ -n "${NCCL_HOME:-}" ] && [ -f "$NCCL_HOME/include/nccl.h" ]; }; then
    step "NCCL: found beside CUDA or in \$NCCL_HOME"; return
  fi
  if python3 -c "import importlib.util as u, sys; sys.exit(0 if u.find_spec('nvidia.nccl') else 1)" 2>/dev/null; then
    step "NCCL: found in Python's nvidia-nccl package"; return
  fi
  local dest="$deps/nccl"
  if [ -f "$dest/.complete" ]; then step "NCCL $nccl_version: cached at $dest"; return; fi
  check_disk 800
  step "NCCL: downloading PyPI's nvidia-nccl-cu13 $nccl_version wheel (about 200 MB)"
  mkdir -p "$deps/download"
  python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$deps/download" \
      "nvidia-nccl-cu13==$nccl_version" \
    || die "could not download nvidia-nccl-cu13 $nccl_version with pip (no network, or no pip: apt-get install python3-pip)"
  local wheel
  wheel=$(ls "$deps/download"/nvidia_nccl_cu13-"$nccl_version"-*.whl 2>/dev/null | head -n1)
  [ -n "$wheel" ] || die "pip reported success but no nvidia_nccl_cu13-$nccl_version wheel is in '$deps/download'"
  rm -rf "$dest.tmp" && mkdir -p "$dest.tmp"
  python3 -m zipfile -e "$wheel" "$dest.tmp" || die "unpacking '$wheel' failed (corrupt download? delete it and re-run)"
  [ -f "$dest.tmp/nvidia/nccl/include/nccl.h" ] && [ -f "$dest.tmp/nvidia/nccl/lib/libnccl.so.2" ] \
    || die "the wheel '$wheel' holds no nvidia/nccl/include/nccl.h and nvidia/nccl/lib/libnccl.so.2"
  rm -rf "$dest" && mv "$dest.tmp" "$dest"
  touch "$dest/.complete"
  step "NCCL $nccl_version unpacked at $dest"
}

[ "$do_apt" -eq 1 ] && install_packages
for b in "${backends[@]}"; do build_backend "$b"; done
for b in "${backends[@]}"; do if [ "$b" = cuda ]; then fetch_nccl; fi; done
