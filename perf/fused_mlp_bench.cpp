// µs per trunk forward of the step's three passes (online net on s and on s′, target net on s′):
// the fused one-launch prototype (nn/fused_trunk.hpp) against the path the step takes today, a
// batched GEMM and a bias/ReLU launch per layer as in ForwardPlan; direct launch and graph replay.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backends/graph.hpp"
#include "bench_util.hpp"
#include "kernels/dense_batch.hpp"
#include "kernels/row_block_mlp.hpp"
#include "nn/cluster_forward.hpp"
#include "nn/fused_forward.hpp"
#include "nn/fused_trunk.hpp"
#include "nn/row_block_chain.hpp"
#include "nn/row_block_forward.hpp"

namespace {

constexpr int kPasses = 3;
constexpr int kCallsPerTiming = 10;

void fill_normal(const zs::DeviceFloats& d, std::uint64_t seed, float scale) {
  auto h = Kokkos::create_mirror_view(d);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, scale);
  for (std::size_t i = 0; i < h.extent(0); ++i) h(i) = normal(rng);
  Kokkos::deep_copy(d, h);
}

// The reference network with trunk {width, width}, online and target parameters, B states s and
// B states s′, and the activations both paths write: online [2B rows], target [B rows].
struct TrunkSetup {
  zs::Config c;
  zs::ParamLayout layout;
  zs::Network net;
  zs::ParamBuffer online, target;
  zs::DeviceFloats states;
  zs::Activations on, tg;
  zs::ConstMatrixView s, s2;

  static zs::Config config(int width) {
    zs::Config c;
    c.trunk = {width, width};
    return c;
  }
  TrunkSetup(int B, int width)
      : c(config(width)),
        layout(c),
        net(c, layout),
        online(layout, "online"),
        target(layout, "target"),
        states("states", std::size_t(2) * B * c.state_dim),
        on(c, 2 * B),
        tg(c, B),
        s(states.data(), B, c.state_dim),
        s2(states.data() + std::size_t(B) * c.state_dim, B, c.state_dim) {
    fill_normal(online.flat(), 1, 0.05f);
    fill_normal(target.flat(), 2, 0.05f);
    fill_normal(states, 3, 1.f);
  }
  // The step's three passes: the online net on s and on s′ into `on`, the target net on s′ into
  // `tg`; the trunk alone, or the whole forward.
  std::vector<zs::FusedTrunkPass> trunk_passes() const {
    return {zs::trunk_pass(online, s, on, 0), zs::trunk_pass(online, s2, on, s.extent_int(0)),
            zs::trunk_pass(target, s2, tg, 0)};
  }
  std::vector<zs::ForwardPass> forward_passes() {
    return {{&online, s, &on, 0}, {&online, s2, &on, s.extent_int(0)}, {&target, s2, &tg, 0}};
  }
};

// Times `body` on the stream, launched directly (graph = 0) or recorded once and replayed.
void time_trunk(benchmark::State& state, zs::Stream& stream, const std::function<void()>& body, bool graph) {
  if (!graph) return zs::bench::time_on_stream(state, stream, body, kCallsPerTiming);
  body();
  stream.synchronize();
  zs::Graph g;
  g.capture(stream, body);
  zs::bench::time_on_stream(state, stream, [&] { g.replay(stream); }, kCallsPerTiming);
  state.counters["graph_nodes"] = static_cast<double>(g.node_count());
}

// Args: batch B, trunk width, rows per team (0: automatic), graph (1) or direct (0).
void BM_FusedTrunk(benchmark::State& state) {
  const int B = static_cast<int>(state.range(0)), width = static_cast<int>(state.range(1));
  TrunkSetup t(B, width);
  zs::kernels::FusedMlpOptions opt;
  opt.rows_per_team = static_cast<int>(state.range(2));
  const zs::FusedTrunk fused(t.net, t.trunk_passes(), opt);
  zs::Stream stream;
  time_trunk(state, stream, [&] { fused.enqueue(stream.exec()); }, state.range(3) != 0);
  state.counters["rows_per_team"] = fused.rows_per_team();
  state.counters["teams"] = fused.teams();
  state.counters["scratch_bytes"] = static_cast<double>(fused.scratch_bytes());
}
BENCHMARK(BM_FusedTrunk)
    ->ArgNames({"B", "width", "rows", "graph"})
    ->ArgsProduct({{256, 4096}, {256, 512}, {0, 4, 8}, {1, 0}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// The row-block trunk (kernels/row_block_mlp.hpp): a team of 8 warps per block of 16 or 32 rows
// through both layers, TF32 warp tiles, weights streamed into registers.
// Args: batch B, trunk width, rows a block (16 or 32), graph (1) or direct (0).
void BM_RowBlockTrunk(benchmark::State& state) {
  const int B = static_cast<int>(state.range(0)), width = static_cast<int>(state.range(1));
  TrunkSetup t(B, width);
  const auto kernel = state.range(2) == 16 ? zs::TrunkKernel::row_blocks_16 : zs::TrunkKernel::row_blocks_32;
  const zs::FusedTrunk fused(t.net, t.trunk_passes(), {}, kernel);
  zs::Stream stream;
  time_trunk(state, stream, [&] { fused.enqueue(stream.exec()); }, state.range(3) != 0);
  state.counters["teams"] = fused.teams();
  state.counters["scratch_bytes"] = static_cast<double>(fused.scratch_bytes());
}
BENCHMARK(BM_RowBlockTrunk)
    ->ArgNames({"B", "width", "rows", "graph"})
    ->ArgsProduct({{64, 256, 1024, 4096}, {256, 512}, {16, 32}, {1}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// Median kcycles of each part of a row-block launch (input staged, then each layer) over its
// blocks, from one more launch with clocks: counters stage_kc, layer0_kc, …
void row_block_parts(benchmark::State& state, zs::Stream& stream, int teams, int layers,
                     const std::function<void(std::uint64_t*)>& launch) {
  const int stamps = layers + 2;
  Kokkos::View<std::uint64_t*, zs::MemSpace> clocks("zs::bench::row_block_clocks", std::size_t(teams) * stamps);
  launch(clocks.data());
  stream.synchronize();
  const auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), clocks);
  for (int part = 0; part + 1 < stamps; ++part) {
    std::vector<double> d;
    for (int b = 0; b < teams; ++b)
      d.push_back(static_cast<double>(h(std::size_t(b) * stamps + part + 1) - h(std::size_t(b) * stamps + part)) / 1e3);
    std::nth_element(d.begin(), d.begin() + d.size() / 2, d.end());
    state.counters[part == 0 ? std::string("stage_kc") : "layer" + std::to_string(part - 1) + "_kc"] = d[d.size() / 2];
  }
}

// The row-block kernel's shape, one thing changed at a time from the trunk's (32 rows, 8 warps,
// 4 steps in flight, groups of 32 columns). Args: B, variant (the list below), graph.
template <int Rows, int Warps, int Depth, int Group>
void time_row_block(benchmark::State& state, int B) {
  TrunkSetup t(B, 256);
  std::vector<zs::kernels::FusedMlpPass> passes;
  for (const zs::FusedTrunkPass& p : t.trunk_passes()) passes.push_back(zs::mlp_pass(t.c, p, passes.size()));
  const zs::kernels::RowBlockMlpLaunch<zs::ExecSpace, Rows, Warps, Depth, Group> launch(
      {t.c.state_dim, t.c.trunk[0], t.c.trunk[1]}, passes, zs::kernels::FusedAct::relu);
  zs::Stream stream;
  time_trunk(state, stream, [&] { launch(stream.exec()); }, state.range(2) != 0);
  state.counters["teams"] = launch.teams();
  row_block_parts(state, stream, launch.teams(), launch.layers(), [&](std::uint64_t* c) { launch(stream.exec(), c); });
}
void BM_RowBlockShape(benchmark::State& state) {
  const int B = static_cast<int>(state.range(0));
  switch (state.range(1)) {
    case 0: return time_row_block<32, 8, 4, 32>(state, B);
    case 1: return time_row_block<32, 8, 2, 32>(state, B);
    case 2: return time_row_block<32, 16, 4, 16>(state, B);
    case 3: return time_row_block<32, 16, 2, 16>(state, B);
    case 4: return time_row_block<16, 16, 4, 16>(state, B);
    default: return time_row_block<32, 4, 4, 32>(state, B);
  }
}
BENCHMARK(BM_RowBlockShape)
    ->ArgNames({"B", "variant", "graph"})
    ->ArgsProduct({{256, 4096}, {0, 1, 2, 3, 4, 5}, {1}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// Every layer of the network (trunk, heads' hidden, output layers) for the step's three passes as
// one row-block launch (nn/row_block_forward.hpp), against the fused forward's phases
// (BM_FusedForwardPhases, which also runs the dueling head). Args: B, trunk width, rows a block.
void BM_RowBlockForward(benchmark::State& state) {
  const int B = static_cast<int>(state.range(0)), width = static_cast<int>(state.range(1));
  TrunkSetup t(B, width);
  const zs::RowBlockForward fwd(t.net, t.forward_passes(), static_cast<int>(state.range(2)));
  zs::Stream stream;
  time_trunk(state, stream, [&] { fwd.enqueue(stream.exec()); }, true);
  state.counters["teams"] = fwd.teams();
  state.counters["scratch_bytes"] = static_cast<double>(fwd.scratch_bytes());
  row_block_parts(state, stream, fwd.teams(), fwd.layers(), [&](std::uint64_t* c) { fwd.enqueue(stream.exec(), c); });
}
BENCHMARK(BM_RowBlockForward)
    ->ArgNames({"B", "width", "rows"})
    ->ArgsProduct({{64, 256, 1024, 4096}, {256}, {16, 32}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// Every layer of the network for the step's three passes as one launch of thread-block clusters
// (nn/cluster_forward.hpp), against BM_FusedForwardPhases and BM_RowBlockForward. Args: B, trunk
// width, rows a cluster (0: the constructor's choice), warps a block.
void BM_ClusterForward(benchmark::State& state) {
  const int B = static_cast<int>(state.range(0)), width = static_cast<int>(state.range(1));
  const int rows = static_cast<int>(state.range(2)), warps = static_cast<int>(state.range(3));
  TrunkSetup t(B, width);
  std::string why;
  if (!zs::ClusterForward::supported(t.net, rows, &why, warps)) {
    state.SkipWithError(why.c_str());
    return;
  }
  const zs::ClusterForward fwd(t.net, t.forward_passes(), rows, warps);
  zs::Stream stream;
  time_trunk(state, stream, [&] { fwd.enqueue(stream.exec()); }, true);
  state.counters["clusters"] = fwd.clusters();
  state.counters["rows"] = fwd.rows();
  state.counters["bytes"] = static_cast<double>(fwd.bytes());
  // Where a block's time goes, kcycles, medians over the blocks: its tables and input (start_kc),
  // the first cluster barrier (meet_kc), then each layer's products (every warp's), outputs into
  // the block's own buffer, the same into the other blocks' (exchange) and the barrier.
  const int blocks = fwd.clusters() * zs::kClusterMlpBlocks, stamps = zs::cluster_mlp_stamps(fwd.layers());
  Kokkos::View<std::uint64_t*, zs::MemSpace> clocks("zs::bench::cluster_clocks", std::size_t(blocks) * stamps);
  fwd.enqueue(stream.exec(), clocks.data());
  stream.synchronize();
  const auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), clocks);
  for (int part = 0; part + 1 < stamps; ++part) {
    std::vector<double> d;
    for (int b = 0; b < blocks; ++b)
      d.push_back(static_cast<double>(h(std::size_t(b) * stamps + part + 1) - h(std::size_t(b) * stamps + part)) / 1e3);
    std::nth_element(d.begin(), d.begin() + d.size() / 2, d.end());
    const int l = (part - 2) / 4;
    const char* const what[] = {"products", "outputs", "exchange", "barrier"};
    state.counters[part == 0 ? std::string("start_kc")
                   : part == 1 ? std::string("meet_kc")
                               : "l" + std::to_string(l) + "_" + what[(part - 2) % 4] + "_kc"] = d[d.size() / 2];
  }
}
BENCHMARK(BM_ClusterForward)
    ->ArgNames({"B", "width", "rows", "warps"})
    ->ArgsProduct({{64, 256, 1024, 4096}, {256, 512}, {0, 16, 32, 48, 64}, {8, 16}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// The input-gradient chain of the heads and the trunk (nn/row_block_chain.hpp) for B rows of the
// online net on s, from random output gradients (the value stream's the sum of one share a
// branch), masked by a forward's activations. Counters stage_kc, layer*_kc as BM_RowBlockForward's.
// Args: B, trunk width, rows a block.
void BM_RowBlockChain(benchmark::State& state) {
  const int B = static_cast<int>(state.range(0)), width = static_cast<int>(state.range(1));
  TrunkSetup t(B, width);
  zs::Stream stream;
  zs::RowBlockForward(t.net, t.forward_passes(), 32).enqueue(stream.exec());  // the masks, before the chain on `stream`
  const int K = static_cast<int>(t.c.branches.size());
  std::vector<zs::DeviceFloats> d_out;
  zs::ChainBuffers buffers;
  for (int h = 0; h <= K; ++h) {
    std::vector<zs::kernels::RowBlockSource> sources;
    const int w = t.net.head_width(h);
    for (int share = 0; share < (h == 0 ? K : 1); ++share) {
      d_out.emplace_back("zs::bench::d_out", std::size_t(B) * w);
      fill_normal(d_out.back(), 10 + d_out.size(), 0.01f);
      sources.push_back({d_out.back().data(), w});
    }
    buffers.d_out.push_back(sources);
  }
  zs::DeviceFloats dz_hidden("zs::bench::dz_hidden", std::size_t(K + 1) * B * t.c.head_hidden);
  zs::Gradients g(t.c, B);
  buffers.dz_hidden = dz_hidden.data();
  for (auto& d : g.d_trunk) buffers.d_trunk.push_back(d.data());
  const zs::RowBlockChain chain(t.net, t.online, t.on, B, buffers, static_cast<int>(state.range(2)));
  time_trunk(state, stream, [&] { chain.enqueue(stream.exec()); }, true);
  state.counters["teams"] = chain.teams();
  state.counters["scratch_bytes"] = static_cast<double>(chain.scratch_bytes());
  row_block_parts(state, stream, chain.teams(), chain.layers(), [&](std::uint64_t* c) { chain.enqueue(stream.exec(), c); });
}
BENCHMARK(BM_RowBlockChain)
    ->ArgNames({"B", "width", "rows"})
    ->ArgsProduct({{64, 256, 1024, 4096}, {256}, {16, 32}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// The fused step's forward phases (nn/fused_forward.hpp, launches with the step's defaults): the
// trunk, the heads' hidden and output layers and the dueling head, graph replay.
void BM_FusedForwardPhases(benchmark::State& state) {
  const int B = static_cast<int>(state.range(0)), width = static_cast<int>(state.range(1));
  TrunkSetup t(B, width);
  zs::FusedOptions o;
  o.mode = zs::PhasedMode::launches;
  const zs::FusedForward fwd(t.net, t.forward_passes(), o);
  zs::Stream stream;
  time_trunk(state, stream, [&] { fwd.enqueue(stream.exec()); }, true);
}
BENCHMARK(BM_FusedForwardPhases)
    ->ArgNames({"B", "width"})
    ->ArgsProduct({{64, 256, 1024, 4096}, {256, 512}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// Today's trunk, as ForwardPlan enqueues it: per layer one GEMM batch over the three passes
// (cuBLAS in the config's precision, TF32 by default) and one bias/ReLU launch over them.
void BM_TrunkGemmBias(benchmark::State& state) {
  const int B = static_cast<int>(state.range(0)), width = static_cast<int>(state.range(1));
  TrunkSetup t(B, width);
  zs::Stream stream;
  zs::Gemm gemm(stream, t.c.precision);
  struct Layer {
    zs::GemmBatch gemm;
    zs::kernels::BiasActLaunch<zs::ExecSpace> bias;
  };
  std::vector<Layer> layers;
  struct Pass {
    const zs::ParamBuffer* params;
    const float* input;
    zs::Activations* acts;
    int row0;
  };
  const Pass passes[kPasses] = {{&t.online, t.s.data(), &t.on, 0}, {&t.online, t.s2.data(), &t.on, B},
                                {&t.target, t.s2.data(), &t.tg, 0}};
  for (std::size_t i = 0; i < t.c.trunk.size(); ++i) {
    const int in = i == 0 ? t.c.state_dim : t.c.trunk[i - 1], out = t.c.trunk[i];
    std::vector<zs::GemmEntry> g;
    std::vector<zs::kernels::BiasActEntry> b;
    for (const Pass& p : passes) {
      const float* x = i == 0 ? p.input : p.acts->trunk[i - 1].data() + std::size_t(p.row0) * in;
      float* y = p.acts->trunk[i].data() + std::size_t(p.row0) * out;
      g.push_back({x, p.params->weight(static_cast<int>(i)).data(), y});
      b.push_back({y, p.params->bias(static_cast<int>(i)).data(), out, 1});
    }
    layers.push_back({zs::GemmBatch(zs::Trans::N, zs::Trans::T, B, out, in, 1.f, 0.f, g),
                      zs::kernels::BiasActLaunch<zs::ExecSpace>(b, B)});
  }
  time_trunk(
      state, stream,
      [&] {
        for (const Layer& l : layers) {
          gemm(l.gemm);
          l.bias(stream.exec());
        }
      },
      state.range(2) != 0);
}
BENCHMARK(BM_TrunkGemmBias)
    ->ArgNames({"B", "width", "graph"})
    ->ArgsProduct({{256, 4096}, {256, 512}, {1, 0}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
