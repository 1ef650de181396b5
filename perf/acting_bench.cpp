// µs per epsilon-greedy call at the reference point (B = 256, branches {5, 3, 3}) from Q
// [256, 11], per Q-from-log-probabilities call [256, 11, 51] (the actor's first half), and per
// exposure → factored routing call at B = 256. Each acting call includes the one-thread counter
// increment that follows it.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <random>

#include "backends/graph.hpp"
#include "bench_util.hpp"
#include "core/config.hpp"
#include "kernels/acting.hpp"
#include "kernels/routing.hpp"

namespace {

template <class View>
void fill_uniform(const View& v, float lo, float hi, std::uint64_t seed) {
  auto h = Kokkos::create_mirror_view(v);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  for (std::size_t i = 0; i < h.size(); ++i) h.data()[i] = u(rng);
  Kokkos::deep_copy(v, h);
}

void BM_ActingQ(benchmark::State& state) {
  const zs::Config config;
  const int batch = 256, a_total = 11, nb = static_cast<int>(config.branches.size());
  Kokkos::View<float**, Kokkos::LayoutRight, zs::MemSpace> q("q", batch, a_total);
  fill_uniform(q, -1.f, 1.f, 1);
  Kokkos::View<std::int32_t**, Kokkos::LayoutRight, zs::MemSpace> actions("actions", batch, nb);
  zs::DeviceScalar<float> eps("eps");
  Kokkos::deep_copy(eps, 0.1f);
  zs::DeviceScalar<std::uint64_t> counter("counter");
  zs::Stream stream;
  zs::bench::time_on_stream(state, stream, [&] {
    zs::kernels::epsilon_greedy(stream.exec(), q, config.branches, eps, counter, {1, 0}, actions);
  });
}
BENCHMARK(BM_ActingQ)->UseManualTime()->Unit(benchmark::kMicrosecond);

void BM_ActingQFromLogProbs(benchmark::State& state) {
  const zs::Config config;
  const int batch = 256, a_total = 11;
  Kokkos::View<float***, Kokkos::LayoutRight, zs::MemSpace> logp("logp", batch, a_total, config.atoms);
  fill_uniform(logp, -6.f, -2.f, 2);
  Kokkos::View<float**, Kokkos::LayoutRight, zs::MemSpace> q("q", batch, a_total);
  zs::Stream stream;
  zs::bench::time_on_stream(state, stream, [&] {
    zs::kernels::q_from_log_probs<zs::ExecSpace>(stream.exec(), logp, config.v_min, config.v_max, q);
  });
}
BENCHMARK(BM_ActingQFromLogProbs)->UseManualTime()->Unit(benchmark::kMicrosecond);

void BM_Routing(benchmark::State& state) {
  const int batch = 256;
  Kokkos::View<std::int32_t*, zs::MemSpace> exposure("exposure", batch),
      factored("factored", batch);
  Kokkos::deep_copy(exposure, 2);
  zs::DeviceFloats spread("spread", batch), vol("vol", batch);
  fill_uniform(spread, 0.f, 3.f, 4);
  fill_uniform(vol, 0.f, 2.f, 5);
  zs::DeviceScalar<float> ms("ms"), mv("mv");
  Kokkos::deep_copy(ms, 1.f);
  Kokkos::deep_copy(mv, 1.f);
  zs::Stream stream;
  zs::bench::time_on_stream(state, stream, [&] {
    zs::kernels::route_exposure_to_factored(stream.exec(), exposure, spread, vol, ms, mv, factored);
  });
}
BENCHMARK(BM_Routing)->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace
