// µs per training step: graph replay and direct launch over a grid of batch sizes and trunk
// widths, plus the per-phase breakdown at the reference config (docs/performance.md).
#include <benchmark/benchmark.h>

#include <nlohmann/json.hpp>
#include <random>

#include "bench_util.hpp"
#include "trainer.hpp"

namespace {

zs::Config bench_config(int width, int heads) {
  zs::Config c;
  c.trunk = {width, width};
  c.head_hidden = heads;
  return c;
}

void fill_batch(zs::Trainer& t) {
  const auto& c = t.config();
  const int B = t.batch().size;
  std::mt19937_64 rng(42);
  std::normal_distribution<float> n(0.f, 1.f);
  zs::HostBatch b;
  b.size = B;
  for (int i = 0; i < B * c.state_dim; ++i) b.states.push_back(n(rng)), b.next_states.push_back(n(rng));
  for (int i = 0; i < B; ++i) {
    for (int nk : c.branches) b.actions.push_back(static_cast<int>(rng() % nk));
    b.rewards.push_back(n(rng));
    b.dones.push_back(0.f);
    b.weights.push_back(1.f);
  }
  zs::upload(t.stream().exec(), c, b, t.batch());
}

// Args: batch, trunk width, head width, graph (1) or direct (0).
void BM_Step(benchmark::State& state) {
  zs::TrainerOptions opt;
  opt.batch_size = static_cast<int>(state.range(0));
  opt.use_graph = state.range(3) != 0;
  zs::Trainer t(bench_config(static_cast<int>(state.range(1)), static_cast<int>(state.range(2))), opt);
  fill_batch(t);
  zs::bench::time_on_stream(state, t.stream(), [&] { t.step(); }, 20);
  state.counters["graph_nodes"] = static_cast<double>(t.graph_nodes());
}
BENCHMARK(BM_Step)
    ->ArgNames({"B", "width", "heads", "graph"})
    ->ArgsProduct({{64, 256, 1024, 4096}, {256, 512, 1024}, {128}, {1, 0}})
    ->Args({4096, 512, 256, 1})
    ->Args({4096, 512, 256, 0})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// One phase of the direct-launch step at the reference config (B = 256), spectral norm on.
void BM_StepPhase(benchmark::State& state) {
  zs::Config c;
  c.spectral_norm = 1.f;
  zs::TrainerOptions opt;
  zs::Trainer t(c, opt);
  fill_batch(t);
  t.step_direct();
  const auto phase = zs::Trainer::kPhases[state.range(0)];
  state.SetLabel(zs::Trainer::phase_name(phase));
  zs::bench::time_on_stream(state, t.stream(), [&] { t.enqueue_phase(phase); }, 20);
}
BENCHMARK(BM_StepPhase)->DenseRange(0, 5)->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace
