// µs per Q-value observation (batch statistics + divergence check + mailbox post) and per C51
// Q = Σ p·z, at the reference config: B = 256, A = 5 + 3 + 3 = 11 actions, 51 atoms.
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
  Kokkos::View<double*, zs::MemSpace> record("record", zs::kernels::q_stats::size);
  zs::bench::time_on_stream(state, stream,
                            [&] { zs::kernels::q_batch_stats(stream.exec(), q, record); });
}
BENCHMARK(BM_QMonitorBatchStatsOnly)->UseManualTime()->Unit(benchmark::kMicrosecond);

void BM_QMonitorDivergenceOnly(benchmark::State& state) {
  zs::Stream stream;
  Kokkos::View<float**, Kokkos::LayoutRight, zs::MemSpace> q("q", kBatch, reference_actions());
  Kokkos::deep_copy(q, 1.5f);
  Kokkos::View<double*, zs::MemSpace> record("record", zs::kernels::q_divergence::size);
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

void BM_QMonitorC51Q(benchmark::State& state) {
  const int atoms = zs::Config{}.atoms;
  zs::Stream stream;
  Kokkos::View<float***, Kokkos::LayoutRight, zs::MemSpace> p("probs", kBatch, reference_actions(),
                                                              atoms);
  Kokkos::deep_copy(p, 1.f / atoms);
  zs::DeviceFloats z("support", atoms);
  Kokkos::deep_copy(z, 0.25f);
  Kokkos::View<float**, Kokkos::LayoutRight, zs::MemSpace> q("q", kBatch, reference_actions());
  zs::bench::time_on_stream(state, stream, [&] {
    zs::kernels::c51_q_values(stream.exec(), p, zs::ConstDeviceFloats(z), q);
  });
  state.SetBytesProcessed(state.iterations() * 100 * p.size() * sizeof(float));
}
BENCHMARK(BM_QMonitorC51Q)->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace
