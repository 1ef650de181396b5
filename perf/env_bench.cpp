// Vectorised environment throughput: env steps per second (items_per_second) for N envs stepped
// in one launch, at N = 1 (launch-bound), 64 and 4096.
#include <benchmark/benchmark.h>

#include <cstdint>

#include "bench_util.hpp"
#include "rl/envs.hpp"

namespace {

void run_env(benchmark::State& state, const char* name) {
  const int n = static_cast<int>(state.range(0));
  zs::Stream stream;
  auto env = zs::make_env(name, n, 42);
  zs::EnvActions actions("actions", n, static_cast<int>(env->branches().size()));
  Kokkos::deep_copy(actions, 1);
  env->reset(stream.exec());
  const int batch = 100;
  zs::bench::time_on_stream(state, stream, [&] { env->step(stream.exec(), actions); }, batch);
  state.SetItemsProcessed(state.iterations() * batch * static_cast<std::int64_t>(n));
}

void BM_EnvCartPole(benchmark::State& state) { run_env(state, "cartpole"); }
void BM_EnvMarket(benchmark::State& state) { run_env(state, "market"); }
BENCHMARK(BM_EnvCartPole)->Arg(1)->Arg(64)->Arg(4096)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_EnvMarket)->Arg(1)->Arg(64)->Arg(4096)->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace
