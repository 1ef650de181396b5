#!/usr/bin/env bash
# Checks zerosync as an installed package, the way a user's project meets it: installs the
# openmp build into a temporary prefix, moves that prefix elsewhere (the package must not name
# the folder it was installed to, nor the build or source tree), then configures, builds and
# runs examples/ as a project of its own with find_package(zerosync).
# Needs build/openmp (scripts/test.sh builds it) and what cmake/bootstrap.sh installs.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
build="$repo/build/openmp"
fail() { echo "check_install: error: $*" >&2; exit 1; }
[ -f "$build/CMakeCache.txt" ] || fail "no openmp build at $build; run 'bash scripts/test.sh openmp' first"

tmp="$(mktemp -d "${TMPDIR:-/tmp}/zerosync-install.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
echo "=== zerosync install check: $tmp ==="
cmake --install "$build" --prefix "$tmp/stage" > /dev/null
for f in lib/libzerosync.a bin/zerosync include/zerosync/train/trainer.hpp \
         include/zerosync/backends/host/spaces.hpp include/zerosync/backends/cuda/spaces.hpp \
         lib/cmake/zerosync/zerosyncConfig.cmake lib/cmake/zerosync/zerosyncConfigVersion.cmake; do
  [ -e "$tmp/stage/$f" ] || fail "the install lacks $f"
done
[ ! -e "$tmp/stage/include/zerosync/app" ] || fail "the program's private headers (src/app) were installed"
if grep -rlF -e "$repo" -e "$build" -e "$tmp" "$tmp/stage/lib/cmake"; then
  fail "the CMake package above names an absolute path of this machine's build; it must be relocatable"
fi

mv "$tmp/stage" "$tmp/prefix"
cmake -S "$repo/examples" -B "$tmp/examples" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$tmp/prefix" > "$tmp/configure.log" 2>&1 \
  || { cat "$tmp/configure.log"; fail "examples/ did not configure against the installed package"; }
cmake --build "$tmp/examples" -j "$jobs"

mkdir "$tmp/run" && cd "$tmp/run"
"$tmp/prefix/bin/zerosync" info > info.out || fail "the installed zerosync program does not run"
grep -q "backend: *openmp" info.out || fail "the installed zerosync program names no openmp backend"
"$tmp/examples/grad_norm_example" | tee grad_norm.out
grep -q "^final record #100$" grad_norm.out || fail "grad_norm_example did not deliver its 100 records"
"$tmp/examples/trainer_example" 100 | tee trainer.out
grep -q "^step 99: loss " trainer.out || fail "trainer_example printed no metrics for step 99"
[ -s trainer_example.safetensors ] || fail "trainer_example wrote no checkpoint"
echo "check_install: installed package found by find_package(zerosync), examples built and ran"
