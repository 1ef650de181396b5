// Times `enqueue` on the step's stream: each benchmark iteration enqueues `batch` calls back to
// back between two stream marks (CUDA events on CUDA), as they would run inside a step, so a
// launch-latency-bound kernel is measured without a host round trip per call. The reported
// iteration time is the whole batch; the counter us_per_call is the figure to quote.
#pragma once
#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <random>

#include "backends/backend.hpp"
#include "backends/process_group.hpp"
#include "backends/profiler.hpp"
#include "backends/timer.hpp"

namespace zs::bench {

// The ranks the benchmark program was launched as (bench_main.cpp): a group of one without MPI.
ProcessGroup* group();

// n standard normal floats on the device, the same for the same seed.
inline DeviceFloats normal_floats(std::size_t n, std::uint64_t seed) {
  DeviceFloats d("zs::bench::normal_floats", n);
  auto h = Kokkos::create_mirror_view(d);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (std::size_t i = 0; i < n; ++i) h(i) = normal(rng);
  Kokkos::deep_copy(d, h);
  return d;
}

template <class F>
void time_on_stream(benchmark::State& state, Stream& stream, F&& enqueue, int batch = 100) {
  for (int i = 0; i < 3; ++i) enqueue();  // warm-up: module load, scratch sizing, graph capture
  stream.synchronize();
  // One call in the profiler's span: a kernel-by-kernel view of one step under
  // `ncu --profile-from-start off` (scripts/gpu_run.sh, ZS_NCU_FILTER).
  profiler_start();
  enqueue();
  stream.synchronize();
  profiler_stop();
  StreamTimer timer(stream);
  double total_ms = 0;
  for (auto _ : state) {
    timer.start();
    for (int i = 0; i < batch; ++i) enqueue();
    timer.stop();
    const double ms = timer.elapsed_ms();
    total_ms += ms;
    state.SetIterationTime(ms / 1e3);
  }
  state.counters["us_per_call"] =
      benchmark::Counter(total_ms * 1e3 / (static_cast<double>(state.iterations()) * batch));
  state.counters["calls"] = benchmark::Counter(static_cast<double>(state.iterations()) * batch);
}

}  // namespace zs::bench
