# Where cmake/bootstrap.sh caches the Kokkos stack: $ZEROSYNC_DEPS or ~/.cache/zerosync-deps.
# Shared by the top-level CMakeLists and the CUDA toolchain file so both look in one place.
if(DEFINED ENV{ZEROSYNC_DEPS} AND NOT "$ENV{ZEROSYNC_DEPS}" STREQUAL "")
  set(ZEROSYNC_DEPS_DIR "$ENV{ZEROSYNC_DEPS}")
else()
  set(ZEROSYNC_DEPS_DIR "$ENV{HOME}/.cache/zerosync-deps")
endif()
