// µs per training-guard check with its mailbox post (the per-step cost), directly launched and
// as graph replays, and per boundary (snapshot + reset + post).
#include <benchmark/benchmark.h>

#include <cstdint>

#include "backends/graph.hpp"
#include "bench_util.hpp"
#include "train/guard.hpp"

namespace {

struct GuardInputs {
  zs::DeviceScalar<float> loss{"loss"};
  zs::DeviceScalar<double> grad{"grad_norm"};
  zs::DeviceScalar<float> lr{"lr"};
  GuardInputs() {
    Kokkos::deep_copy(loss, 0.5f);
    Kokkos::deep_copy(grad, 1.0);
    Kokkos::deep_copy(lr, 1e-4f);
  }
};

void BM_GuardCheck(benchmark::State& state) {
  zs::Stream stream;
  GuardInputs in;
  zs::TrainingGuard guard;
  zs::bench::time_on_stream(state, stream,
                            [&] { guard.check(stream.exec(), in.loss, in.grad, in.lr); });
}
BENCHMARK(BM_GuardCheck)->UseManualTime()->Unit(benchmark::kMicrosecond);

// The guard kernel alone, without the mailbox post: how the per-step cost splits.
void BM_GuardCheckKernelOnly(benchmark::State& state) {
  zs::Stream stream;
  GuardInputs in;
  zs::DeviceScalar<std::int64_t> step("step");
  zs::DeviceScalar<int> skip("skip");
  Kokkos::View<zs::kernels::GuardState, zs::MemSpace> guard_state("guard_state");
  const zs::GuardConfig limits;
  zs::bench::time_on_stream(state, stream, [&] {
    zs::kernels::guard_check(stream.exec(), in.loss, in.grad, in.lr, step, guard_state, skip, limits);
  });
}
BENCHMARK(BM_GuardCheckKernelOnly)->UseManualTime()->Unit(benchmark::kMicrosecond);

void BM_GuardCheckGraphReplay(benchmark::State& state) {
  zs::Stream stream;
  GuardInputs in;
  zs::TrainingGuard guard;
  auto body = [&] { guard.check(stream.exec(), in.loss, in.grad, in.lr); };
  body();
  stream.synchronize();
  zs::Graph graph;
  graph.capture(stream, body);
  zs::bench::time_on_stream(state, stream, [&] { graph.replay(stream); });
}
BENCHMARK(BM_GuardCheckGraphReplay)->UseManualTime()->Unit(benchmark::kMicrosecond);

void BM_GuardBoundary(benchmark::State& state) {
  zs::Stream stream;
  zs::TrainingGuard guard;
  zs::bench::time_on_stream(state, stream, [&] { guard.boundary(stream.exec()); });
}
BENCHMARK(BM_GuardBoundary)->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace
