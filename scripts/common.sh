# Shared by the scripts in this folder: where the repository is, and a quiet default for the
# OpenMP runtime (Kokkos warns when OMP_PROC_BIND is unset; binding is the user's choice).
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export OMP_PROC_BIND="${OMP_PROC_BIND:-false}"
jobs="${ZEROSYNC_JOBS:-$(nproc)}"

# configure_and_build PRESET: bootstrap its dependencies (apt + Kokkos cache), configure, build.
configure_and_build() {
  local preset="$1"
  bash "$repo/cmake/bootstrap.sh" ${ZEROSYNC_NO_APT:+--no-apt} "$preset"
  cmake --preset "$preset" -S "$repo" > /dev/null
  cmake --build --preset "$preset" -j "$jobs"
}
