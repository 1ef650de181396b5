// µs per Q-value observation (batch statistics + divergence check + mailbox post) at the
// reference config: B = 256, A = 5 + 3 + 3 = 11 actions.
#include <benchmark/benchmark.h>

#include <numeric>

#include "backends/graph.hpp"
#include "bench_util.hpp"
#include "core/config.hpp"
#include "kernels/q_stats.hpp"
#include "train/q_monitor.hpp"

namespace {

constexpr int kBatch = 256;

int reference_actions() {
  const auto b = zs::Config{}.branches;
  return std::accumulate(b.begin(), b.end(), 0);
}

void BM_QMonitorObserve(benchmark::State& state) {
  zs::Stream stream;
  Kokkos::View<float**, Kokkos::LayoutRight, zs::MemSpace> q("q", kBatch, reference_actions());
  Kokkos::deep_copy(q, 1.5f);
  zs::QMonitor monitor;
  zs::bench::time_on_stream(state, stream, [&] { monitor.observe(stream.exec(), q); });
}
BENCHMARK(BM_QMonitorObserve)->UseManualTime()->Unit(benchmark::kMicrosecond);

// The two reductions alone, without the post: how an observation's cost splits.
void BM_QMonitorBatchStatsOnly(benchmark::State& state) {
  zs::Stream stream;
  Kokkos::View<float**, Kokkos::LayoutRight, zs::MemSpace> q("q", kBatch, reference_actions());
  Kokkos::deep_copy(q, 1.5f);
  Kokkos::View<zs::kernels::QMonitorRecord, zs::MemSpace> record("record");
  zs::bench::time_on_stream(state, stream,
                            [&] { zs::kernels::q_batch_stats(stream.exec(), q, record); });
}
BENCHMARK(BM_QMonitorBatchStatsOnly)->UseManualTime()->Unit(benchmark::kMicrosecond);

void BM_QMonitorDivergenceOnly(benchmark::State& state) {
  zs::Stream stream;
  Kokkos::View<float**, Kokkos::LayoutRight, zs::MemSpace> q("q", kBatch, reference_actions());
  Kokkos::deep_copy(q, 1.5f);
  Kokkos::View<zs::kernels::QMonitorRecord, zs::MemSpace> record("record");
  zs::bench::time_on_stream(state, stream,
                            [&] { zs::kernels::q_divergence_check(stream.exec(), q, record); });
}
BENCHMARK(BM_QMonitorDivergenceOnly)->UseManualTime()->Unit(benchmark::kMicrosecond);

void BM_QMonitorObserveGraphReplay(benchmark::State& state) {
  zs::Stream stream;
  Kokkos::View<float**, Kokkos::LayoutRight, zs::MemSpace> q("q", kBatch, reference_actions());
  Kokkos::deep_copy(q, 1.5f);
  zs::QMonitor monitor;
  auto body = [&] { monitor.observe(stream.exec(), q); };
  body();
  stream.synchronize();
  zs::Graph graph;
  graph.capture(stream, body);
  zs::bench::time_on_stream(state, stream, [&] { graph.replay(stream); });
}
BENCHMARK(BM_QMonitorObserveGraphReplay)->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace
