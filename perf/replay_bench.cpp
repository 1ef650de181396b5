// µs per replay-buffer call: insert of one step of N = 64 envs (S = 48 and S = 4), and
// sample + update_priorities at B = 256 for capacity 1e5 and 1e6 (prioritised and uniform).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>

#include "bench_util.hpp"
#include "rl/replay.hpp"

namespace {

using LR = Kokkos::LayoutRight;
constexpr int kBatch = 256;  // the reference batch size

struct StepInputs {
  Kokkos::View<float**, LR, zs::MemSpace> obs, next;
  Kokkos::View<std::int32_t**, LR, zs::MemSpace> act;
  Kokkos::View<float*, zs::MemSpace> reward, term, trunc;
  StepInputs(int N, int S, int K)
      : obs("obs", N, S), next("next", N, S), act("act", N, K), reward("r", N), term("term", N), trunc("trunc", N) {
    Kokkos::deep_copy(obs, 0.5f);
    Kokkos::deep_copy(next, 0.25f);
    Kokkos::deep_copy(reward, 1.f);
    auto t = Kokkos::create_mirror_view(term);
    for (int e = 0; e < N; ++e) t(e) = e % 17 == 0 ? 1.f : 0.f;  // some episode ends
    Kokkos::deep_copy(term, t);
  }
  void insert(zs::Replay& r, const zs::ExecSpace& exec) const { r.insert(exec, obs, act, reward, next, term, trunc); }
};

// Args: N, S.
void BM_ReplayInsert(benchmark::State& state) {
  const zs::Config c;
  const int N = static_cast<int>(state.range(0)), S = static_cast<int>(state.range(1));
  zs::ReplayConfig rc;
  zs::Replay replay(rc, N, S, static_cast<int>(c.branches.size()));
  StepInputs in(N, S, static_cast<int>(c.branches.size()));
  zs::Stream stream;
  zs::bench::time_on_stream(state, stream, [&] { in.insert(replay, stream.exec()); });
}
BENCHMARK(BM_ReplayInsert)->Args({64, 48})->Args({64, 4})->UseManualTime()->Unit(benchmark::kMicrosecond);

// Args: capacity, prioritized; part: 0 sample + update, 1 sample only, 2 update only (of one sample).
// The buffer is filled once (every entry sampleable).
void replay_sample_update(benchmark::State& state, int part) {
  const zs::Config c;
  const int N = 64, K = static_cast<int>(c.branches.size());
  zs::ReplayConfig rc;
  rc.capacity = static_cast<int>(state.range(0));
  rc.prioritized = state.range(1) != 0;
  zs::Replay replay(rc, N, c.state_dim, K);
  StepInputs in(N, c.state_dim, K);
  zs::Stream stream;
  for (int t = 0; t < replay.rows(); ++t) in.insert(replay, stream.exec());
  zs::DeviceBatch batch(c, kBatch);
  zs::DeviceScalar<float> beta("beta");
  Kokkos::deep_copy(beta, 0.4f);
  zs::DeviceFloats prio("prio", kBatch);
  auto h = Kokkos::create_mirror_view(prio);
  std::mt19937 rng(7);
  for (int i = 0; i < kBatch; ++i) h(i) = std::uniform_real_distribution<float>(0.f, 3.f)(rng);
  Kokkos::deep_copy(prio, h);
  stream.synchronize();
  if (part == 2) replay.sample(stream.exec(), batch, beta);
  zs::bench::time_on_stream(state, stream, [&] {
    if (part != 2) replay.sample(stream.exec(), batch, beta);
    if (part != 1) replay.update_priorities(stream.exec(), prio);
  });
}
void BM_ReplaySampleUpdate(benchmark::State& state) { replay_sample_update(state, 0); }
void BM_ReplaySample(benchmark::State& state) { replay_sample_update(state, 1); }
void BM_ReplayUpdate(benchmark::State& state) { replay_sample_update(state, 2); }
BENCHMARK(BM_ReplaySample)->Args({1000000, 1})->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ReplayUpdate)->Args({1000000, 1})->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ReplaySampleUpdate)
    ->Args({100000, 1})
    ->Args({1000000, 1})
    ->Args({100000, 0})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
