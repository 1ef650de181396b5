// µs per C51 loss launch (a*, projection, cross-entropy and the head's gradient for B samples) at
// the reference head (branches {5, 3, 3}, 51 atoms), as graph replays, with 1 or 2 team threads
// (device warps) a branch, or the kernel's own choice (0): the measurement behind
// kernels::kC51WarpsPerBranch; and the projection's gather from every source against the
// narrow one (C51Loss::narrow_gather).
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstddef>

#include "backends/graph.hpp"
#include "bench_util.hpp"
#include "kernels/c51_loss.hpp"

namespace {

// Args: warps a branch (0: automatic), samples, gather (1: each target atom from the sources
// near it, the default; 0: from every source).
void BM_C51Loss(benchmark::State& state) {
  const int B = static_cast<int>(state.range(1)), atoms = 51;
  const auto table = zs::kernels::BranchTable::of({5, 3, 3});
  const int A = table.actions, K = table.branches;
  using F3 = Kokkos::View<float***, Kokkos::LayoutRight, zs::MemSpace>;
  using I2 = Kokkos::View<int**, Kokkos::LayoutRight, zs::MemSpace>;
  F3 online("online", 2 * B, A, atoms), target("target", B, A, atoms), projected("projected", B, K, atoms);
  // Log-probabilities that differ by row, action and atom, so a* and the projection do real work.
  auto h_online = Kokkos::create_mirror_view(online);
  auto h_target = Kokkos::create_mirror_view(target);
  for (std::size_t x = 0; x < online.size(); ++x) {
    const float v = -std::log(51.f) + 0.3f * std::sin(0.37f * static_cast<float>(x));
    h_online.data()[x] = v;
    if (x < target.size()) h_target.data()[x] = v;
  }
  Kokkos::deep_copy(online, h_online);
  Kokkos::deep_copy(target, h_target);
  I2 actions("actions", B, K), best("best", B, K);
  zs::DeviceFloats rewards("rewards", B), dones("dones", B), weights("weights", B), priorities("priorities", B);
  Kokkos::deep_copy(rewards, 0.5f);
  Kokkos::deep_copy(weights, 1.f);
  zs::DeviceFloats d_value("d_value", std::size_t(B) * atoms), d_branch("d_branch", std::size_t(B) * A * atoms);
  Kokkos::View<float, zs::MemSpace> loss("loss");
  zs::kernels::C51Loss<zs::ExecSpace> f;
  f.logp_online = online;
  f.logp_target = target;
  f.actions = actions;
  f.rewards = rewards;
  f.dones = dones;
  f.weights = weights;
  f.priorities = priorities;
  f.projected = projected;
  f.best = best;
  f.d_value = Kokkos::View<float**, Kokkos::LayoutRight, zs::MemSpace, Kokkos::MemoryUnmanaged>(d_value.data(), B, atoms);
  f.d_branch_out = Kokkos::View<float*, zs::MemSpace, Kokkos::MemoryUnmanaged>(d_branch.data(), d_branch.extent(0));
  f.table = table;
  f.sup = {-10.f, 10.f, 0.97f, atoms};
  f.parts = static_cast<int>(state.range(0));
  f.narrow_gather = state.range(2) != 0;
  f.min_blocks = static_cast<int>(state.range(3));
  // A terminal sample in eight: its sources all land on one point, the narrow gather's worst case.
  auto h_dones = Kokkos::create_mirror_view(dones);
  for (int i = 0; i < B; ++i) h_dones(i) = i % 8 == 7 ? 1.f : 0.f;
  Kokkos::deep_copy(dones, h_dones);
  zs::Stream stream;
  zs::Graph graph;
  // The first (warm-up) call runs the launch directly and records it; every later one replays.
  zs::bench::time_on_stream(state, stream, [&] { graph.run(stream, [&] { zs::kernels::c51_loss(stream.exec(), f, loss); }); });
}
BENCHMARK(BM_C51Loss)
    ->ArgNames({"warps", "B", "gather", "bound"})
    ->ArgsProduct({{1, 2, 0}, {256, 1024, 4096}, {1}, {0}})
    ->ArgsProduct({{0}, {256, 4096}, {0}, {0}})
    ->ArgsProduct({{0}, {1024, 4096}, {1}, {10, 12}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
