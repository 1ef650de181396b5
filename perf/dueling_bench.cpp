// µs per dueling/log-softmax launch of the step's three passes (online on s and s′, target on
// s′) at the reference head (branches {5, 3, 3}, 51 atoms), as graph replays: in tiles of 1 and 2
// rows with 1, 4, 8 or 32 lanes per (row, action), and on the general path (tile_rows −1: a
// warp per (row, branch)): the measurements behind kernels::dueling_shape, the automatic choice.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <vector>

#include "backends/graph.hpp"
#include "bench_util.hpp"
#include "kernels/c51_head.hpp"

namespace {

// Args: rows per tile (−1: the general path), lanes per (row, action), rows per pass.
void BM_Dueling(benchmark::State& state) {
  const int tile_rows = static_cast<int>(state.range(0)), lanes = static_cast<int>(state.range(1));
  const int B = static_cast<int>(state.range(2)), atoms = 51;
  const auto table = zs::kernels::BranchTable::of({5, 3, 3});
  zs::Stream stream;
  zs::DeviceFloats value("value", std::size_t(2) * B * atoms), out("out", std::size_t(2) * B * table.actions * atoms),
      logp("logp", std::size_t(2) * B * table.actions * atoms), t_value("t_value", std::size_t(B) * atoms),
      t_out("t_out", std::size_t(B) * table.actions * atoms), t_logp("t_logp", std::size_t(B) * table.actions * atoms),
      vb("vb", atoms), bb("bb", std::size_t(table.actions) * atoms);
  for (auto* v : {&value, &out, &t_value, &t_out, &vb, &bb}) Kokkos::deep_copy(*v, 0.25f);
  std::vector<const float*> biases;
  for (int k = 0; k < table.branches; ++k) biases.push_back(bb.data() + std::size_t(table.cum(k)) * atoms);
  std::vector<zs::kernels::DuelingEntry> entries{
      {value.data(), out.data(), logp.data(), 2 * B, 0, B, vb.data(), 0},
      {value.data(), out.data(), logp.data(), 2 * B, B, B, vb.data(), 0},
      {t_value.data(), t_out.data(), t_logp.data(), B, 0, B, vb.data(), 0}};
  const zs::kernels::DuelingLaunch<zs::ExecSpace> launch(entries, biases, table, atoms, tile_rows, lanes);
  auto body = [&] { launch(stream.exec()); };
  body();
  stream.synchronize();
  zs::Graph graph;
  graph.capture(stream, body);
  zs::bench::time_on_stream(state, stream, [&] { graph.replay(stream); });
}
BENCHMARK(BM_Dueling)
    ->ArgNames({"tile_rows", "lanes", "B"})
    ->ArgsProduct({{1, 2}, {1, 4, 8, 32}, {8, 64, 256, 1024, 4096}})
    ->Args({-1, 1, 8})
    ->Args({-1, 1, 64})
    ->Args({-1, 1, 256})
    ->Args({-1, 1, 1024})
    ->Args({-1, 1, 4096})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
