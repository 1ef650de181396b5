#!/usr/bin/env bash
# Run on the lent H200 (see docs/gpu.md): builds Kokkos for CUDA from the carried sources with
# the project's own bootstrap, configures and builds the cuda preset, runs the whole test suite
# and the benchmarks. Logs and results go to $OUT (default /tmp/zs-out).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
out="${OUT:-/tmp/zs-out}"
mkdir -p "$out"
cd "$repo"
[ -d .carry/deps ] || { echo "gpu_run: .carry/ is missing; run scripts/gpu_prepare.sh here and carry .carry"; exit 1; }
nvidia-smi | tee "$out/nvidia-smi.txt" | head -15

sysroot=/tmp/zs-sysroot
for deb in .carry/debs/*.deb; do dpkg -x "$deb" "$sysroot"; done
export ZEROSYNC_DEPS="$repo/.carry/deps"
export PATH="/usr/local/cuda/bin:$PATH"
t0=$(date +%s)
bash cmake/bootstrap.sh --no-apt cuda 2>&1 | tee "$out/bootstrap.log" || exit 1
cmake --preset cuda -DCMAKE_PREFIX_PATH="$sysroot/usr" > "$out/configure.log" 2>&1 \
  || { tail -40 "$out/configure.log"; exit 1; }
cmake --build --preset cuda -j "$(nproc)" > "$out/build.log" 2>&1 || { grep -B2 -A8 error "$out/build.log" | head -60; exit 1; }
echo "gpu_run: Kokkos + zerosync built in $(( $(date +%s) - t0 )) s"

# The whole suite, then the benchmarks; each step's output is kept even if an earlier one failed.
{ ./build/cuda/bin/zerosync; ctest --preset cuda --no-tests=error; } 2>&1 | tee "$out/tests.log" | tail -30
timeout 300 ./build/cuda/bin/zerosync_bench --benchmark_min_time=0.2 --benchmark_repetitions=3 \
  --benchmark_report_aggregates_only=true --benchmark_out="$out/bench.json" \
  --benchmark_out_format=json ${ZS_BENCH_FILTER:+--benchmark_filter="$ZS_BENCH_FILTER"} 2>&1 | tee "$out/bench.log"
cp .carry/deps/logs/*.log "$out/" 2>/dev/null || true
