// µs per batched spectral-norm call (all 10 weight matrices of the reference config, in three
// launches or one), directly launched and as graph replays. σ_max = 1 with N(0, 0.1²) weights, so the
// scaling pass runs (σ₁ of the 256-wide layers starts near 3 and creeps back above 1).
#include <benchmark/benchmark.h>

#include <cstddef>
#include <random>

#include "backends/graph.hpp"
#include "bench_util.hpp"
#include "nn/param_buffer.hpp"
#include "nn/spectral_norm.hpp"

namespace {

void fill_weights(const zs::ParamLayout& layout, const zs::DeviceFloats& params) {
  auto h = Kokkos::create_mirror_view(params);
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0.f, 0.1f);
  for (const auto& l : layout.layers())
    for (std::size_t i = 0; i < std::size_t(l.in) * l.out; ++i)
      h(l.weight_offset + i) = normal(rng);
  Kokkos::deep_copy(params, h);
}

// one_launch: 1, a cluster per matrix where the backend can (SpectralNorm's default); 0, the three
// launches.
void BM_SpectralNorm(benchmark::State& state) {
  const zs::ParamLayout layout{zs::Config{}};
  zs::ParamBuffer params(layout, "params");
  fill_weights(layout, params.flat());
  const zs::SpectralNorm sn(layout, 1.f, 1, state.range(0) != 0);
  zs::Stream stream;
  zs::bench::time_on_stream(state, stream, [&] { sn.apply(stream.exec(), params.flat()); });
  state.counters["matrices"] = sn.matrices();
  state.counters["one_launch"] = sn.one_launch();
}
BENCHMARK(BM_SpectralNorm)->ArgName("one_launch")->Arg(0)->Arg(1)->UseManualTime()->Unit(benchmark::kMicrosecond);

// programmatic: 1, the graph's edges made programmatic, as in the step's graph
// (TrainerOptions::programmatic_launch), so each pass is placed while the one before drains.
void BM_SpectralNormGraphReplay(benchmark::State& state) {
  const zs::ParamLayout layout{zs::Config{}};
  zs::ParamBuffer params(layout, "params");
  fill_weights(layout, params.flat());
  const zs::SpectralNorm sn(layout, 1.f, 1, state.range(1) != 0);
  zs::Stream stream;
  auto body = [&] { sn.apply(stream.exec(), params.flat()); };
  body();
  stream.synchronize();
  zs::Graph graph;
  graph.set_programmatic_edges(state.range(0) != 0);
  graph.capture(stream, body);
  zs::bench::time_on_stream(state, stream, [&] { graph.replay(stream); });
  state.counters["programmatic_edges"] = static_cast<double>(graph.programmatic_edges());
  state.counters["one_launch"] = sn.one_launch();
}
BENCHMARK(BM_SpectralNormGraphReplay)
    ->ArgNames({"programmatic", "one_launch"})
    ->Args({0, 0})
    ->Args({1, 0})
    ->Args({1, 1})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
