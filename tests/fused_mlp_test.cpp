// The fused dense-layer stack (kernels/fused_mlp.hpp) against a naive double-precision loop, on
// fresh random inputs and weights, and the fused trunk (nn/fused_trunk.hpp) against ForwardPlan's
// trunk activations.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/gemm.hpp"
#include "kernels/fused_mlp.hpp"
#include "nn/fused_trunk.hpp"
#include "nn/network_plan.hpp"
#include "mlp_reference.hpp"
#include "test_util.hpp"

namespace {

using zs::kernels::FusedAct;
using zs::kernels::FusedMlpLaunch;
using zs::kernels::FusedMlpOptions;
using zs::kernels::FusedMlpPass;
using zs::test::error_of;
using zs::test::random_normal;
using zs::test::to_device;
using zs::test::to_host;
using namespace zs::test::mlp;

// One launch of the given passes, synchronised.
void run(const std::vector<int>& widths, const std::vector<const PassData*>& data, FusedAct last,
         const FusedMlpOptions& opt = {}) {
  run_stack<FusedMlpLaunch<zs::ExecSpace>>(widths, data, last, opt);
}

}  // namespace

TEST(FusedMlp, ReferenceTrunkWidthsMatchTheDoubleReference) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const std::vector<int> widths{48, 256, 256};
  // 37 rows: two whole tiles of 16 and a tile with 5 live rows.
  const PassData d(widths, 37, true, seed);
  run(widths, {&d}, FusedAct::relu);
  EXPECT_GT(expect_matches(widths, d, true, "48-256-256, 37 rows"), 0.1) << "outputs of zeros test nothing";
}

TEST(FusedMlp, OddWidthsAndRowCountsMatchTheDoubleReference) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  // Widths that fill no tile: 7 inputs (one k tile of 32, mostly padding), 33 (two), 17, 9.
  const std::vector<int> widths{7, 33, 17, 9};
  double largest = 0;
  for (int rows : {1, 3, 4, 5, 19, 64})
    for (int rows_per_team : {0, 4, 12})
      for (FusedAct last : {FusedAct::none, FusedAct::relu}) {
        const PassData d(widths, rows, true, seed + 1000 * rows + rows_per_team);
        FusedMlpOptions opt;
        opt.rows_per_team = rows_per_team;
        run(widths, {&d}, last, opt);
        const double m = expect_matches(widths, d, last == FusedAct::relu,
                                        "rows " + std::to_string(rows) + ", rows_per_team " +
                                            std::to_string(rows_per_team) + ", last " +
                                            (last == FusedAct::relu ? "relu" : "none"));
        largest = std::max(largest, m);
      }
  EXPECT_GT(largest, 0.1) << "outputs of zeros test nothing";
}

TEST(FusedMlp, SeveralPassesWithTheirOwnBuffersRunInOneLaunch) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  // Three passes of different row counts, each with its own weights, input and outputs; the
  // middle one asks for its last layer only.
  const std::vector<int> widths{7, 33, 17, 9};
  const PassData a(widths, 21, true, seed), b(widths, 1, false, seed + 1), c(widths, 16, true, seed + 2);
  FusedMlpOptions opt;
  opt.rows_per_team = 8;
  std::vector<FusedMlpPass> passes{a.pass(), b.pass(), c.pass()};
  zs::Stream stream;
  const FusedMlpLaunch<zs::ExecSpace> launch(widths, passes, FusedAct::none, opt);
  EXPECT_EQ(launch.teams(), 3 + 1 + 2);
  launch(stream.exec());
  stream.synchronize();
  EXPECT_GT(expect_matches(widths, a, false, "pass 0"), 0.1) << "outputs of zeros test nothing";
  EXPECT_GT(expect_matches(widths, b, false, "pass 1"), 0.0) << "outputs of zeros test nothing";
  EXPECT_GT(expect_matches(widths, c, false, "pass 2"), 0.1) << "outputs of zeros test nothing";
}

TEST(FusedMlp, TileSizesStayWithinTheScratchBudget) {
  const std::vector<int> widths{48, 256, 256};
  const PassData d(widths, 4, false, 1);
  const FusedMlpLaunch<zs::ExecSpace> reference(widths, {d.pass()}, FusedAct::relu);
  EXPECT_EQ(reference.rows_per_team(), 16);
  EXPECT_LE(reference.scratch_bytes(), std::size_t(48) * 1024);
  const std::vector<int> wide{48, 512, 512};
  const PassData w(wide, 4, false, 2);
  const FusedMlpLaunch<zs::ExecSpace> launch(wide, {w.pass()}, FusedAct::relu);
  EXPECT_EQ(launch.rows_per_team(), 8);
  EXPECT_LE(launch.scratch_bytes(), std::size_t(48) * 1024);
}

TEST(FusedMlp, BadShapesAreRefusedWithMessagesNamingThem) {
  const std::vector<int> widths{7, 33, 9};
  const PassData d(widths, 5, true, 3);
  auto refused = [&](const std::vector<int>& w, std::vector<FusedMlpPass> passes, const FusedMlpOptions& opt) {
    return error_of([&] { FusedMlpLaunch<zs::ExecSpace>(w, passes, FusedAct::none, opt); });
  };
  auto contains = [](const std::string& message, const std::string& part) {
    return message.find(part) != std::string::npos;
  };
  const FusedMlpOptions plain;
  EXPECT_TRUE(contains(refused({7}, {d.pass()}, plain), "1 widths given; expected >= 2"));
  EXPECT_TRUE(contains(refused({7, 0, 9}, {d.pass()}, plain), "width 1 is 0; expected >= 1"));
  EXPECT_TRUE(contains(refused(widths, {}, plain), "0 passes given"));
  EXPECT_TRUE(contains(refused({7, 33, 9, 4}, {d.pass()}, plain), "pass 0 has 2 layers; expected 3"));
  FusedMlpPass no_rows = d.pass();
  no_rows.rows = 0;
  EXPECT_TRUE(contains(refused(widths, {d.pass(), no_rows}, plain), "pass 1 has an input of 0 rows"));
  FusedMlpPass no_bias = d.pass();
  no_bias.layers[1].b = nullptr;
  EXPECT_TRUE(contains(refused(widths, {no_bias}, plain), "pass 0 layer 1 has a null weight or bias"));
  FusedMlpPass no_output = d.pass();
  no_output.layers.back().out = nullptr;
  EXPECT_TRUE(contains(refused(widths, {no_output}, plain), "pass 0 has no output for its last layer"));
  FusedMlpOptions odd;
  odd.rows_per_team = 6;
  EXPECT_TRUE(contains(refused(widths, {d.pass()}, odd), "rows_per_team = 6; expected 0 (automatic) or a positive "
                                                         "multiple of 4"));
  FusedMlpOptions too_many;
  too_many.rows_per_team = 64;
  const std::string big = refused({7, 256, 9}, {d.pass()}, too_many);
  EXPECT_TRUE(contains(big, "64 rows of width 256 (256 with padding) need ")) << big;
  EXPECT_TRUE(contains(big, "bytes of team scratch; expected at most the budget of 48128 bytes")) << big;
}

namespace {

zs::Config trunk_config(std::uint64_t seed, int state_dim, const std::vector<int>& trunk) {
  return zs::Config::from_json({{"state_dim", state_dim}, {"trunk", trunk}, {"head_hidden", 16},
                                {"branches", {3, 2}}, {"atoms", 5}, {"v_min", -2}, {"v_max", 2},
                                {"seed", seed}, {"precision", "fp32"}});
}

void fill(const zs::DeviceFloats& d, std::uint64_t seed, float scale) {
  zs::test::upload(random_normal(d.extent(0), seed, scale), d);
}

}  // namespace

// The fused trunk against the trunk of the step's forward plan: three passes (online on s and
// s′ into one Activations, target on s′ into another), every trunk layer compared.
TEST(FusedTrunk, EqualsTheForwardPlansTrunkActivations) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  struct Case {
    int state_dim;
    std::vector<int> trunk;
    float scale;  // of the parameters: activations neither vanish nor explode over the layers
  };
  for (const auto kernel : {zs::TrunkKernel::serial_tiles, zs::TrunkKernel::row_blocks_16,
                            zs::TrunkKernel::row_blocks_32})
  for (const auto& [state_dim, trunk, scale] : {Case{48, {256, 256}, 0.1f}, Case{7, {33, 17, 9}, 0.4f}}) {
    // The row blocks multiply in TF32 on CUDA (tensor cores), the plan here in FP32.
    const double tolerance =
        kernel != zs::TrunkKernel::serial_tiles && zs::WarpTile<zs::ExecSpace>::kRoundsToTf32 ? 2e-3 : 1e-5;
    const auto c = trunk_config(seed, state_dim, trunk);
    const int B = 19;
    const zs::ParamLayout layout(c);
    zs::Stream stream;
    zs::Gemm gemm(stream, zs::Precision::fp32);
    const zs::Network net(c, layout);
    zs::ParamBuffer online(layout, "online"), target(layout, "target");
    fill(online.flat(), seed + 1, scale);
    fill(target.flat(), seed + 2, scale);
    zs::DeviceFloats states("states", std::size_t(2) * B * c.state_dim);
    fill(states, seed + 3, 1.f);
    const zs::ConstMatrixView s(states.data(), B, c.state_dim),
        s2(states.data() + std::size_t(B) * c.state_dim, B, c.state_dim);
    zs::Activations on(c, 2 * B), tg(c, B), on_ref(c, 2 * B), tg_ref(c, B);
    const zs::ForwardPlan plan(net, {{&online, s, &on_ref, 0}, {&online, s2, &on_ref, B}, {&target, s2, &tg_ref, 0}});
    const zs::FusedTrunk fused(net, {zs::trunk_pass(online, s, on, 0), zs::trunk_pass(online, s2, on, B),
                                     zs::trunk_pass(target, s2, tg, 0)},
                                {}, kernel);
    plan.enqueue(stream.exec(), gemm);
    fused.enqueue(stream.exec());
    stream.synchronize();
    // Each layer's error on the scale of its terms, formed from the plan's own layer inputs.
    const auto all_states = to_host(states);
    for (int pass = 0; pass < 3; ++pass) {
      const zs::ParamBuffer& params = pass < 2 ? online : target;
      const zs::Activations& got = pass < 2 ? on : tg;
      const zs::Activations& want = pass < 2 ? on_ref : tg_ref;
      const int row0 = pass == 1 ? B : 0;
      const std::size_t first = std::size_t(pass == 0 ? 0 : B) * c.state_dim;
      std::vector<double> x(all_states.begin() + first, all_states.begin() + first + std::size_t(B) * c.state_dim);
      for (std::size_t i = 0; i < trunk.size(); ++i) {
        const int in = i == 0 ? c.state_dim : trunk[i - 1], out = trunk[i];
        auto rows_of = [&](const zs::DeviceFloats& f) {
          const auto h = to_host(f);
          return std::vector<float>(h.begin() + std::size_t(row0) * out, h.begin() + std::size_t(row0 + B) * out);
        };
        const auto a = rows_of(got.trunk[i]), b = rows_of(want.trunk[i]);
        const std::vector<double> bd(b.begin(), b.end());
        const auto sizes = term_sizes(x, to_host(params.weight(static_cast<int>(i))),
                                      to_host(params.bias(static_cast<int>(i))), B, in, out);
        EXPECT_LT(max_row_rel(a, bd, sizes, B, out), tolerance)
            << "kernel " << static_cast<int>(kernel) << ", state_dim " << state_dim << ", pass " << pass
            << ", layer " << i;
        EXPECT_GT(largest_abs(bd), 0.01) << "a layer of zeros tests nothing";
        x = bd;
      }
    }
  }
}

TEST(FusedTrunk, PassesThatDoNotFitTheNetworkAreRefused) {
  const auto c = trunk_config(1, 7, {33, 17, 9});
  const zs::ParamLayout layout(c);
  const zs::Network net(c, layout);
  zs::ParamBuffer online(layout, "online");
  zs::DeviceFloats states("states", std::size_t(8) * c.state_dim);
  zs::Activations acts(c, 4);
  const zs::ConstMatrixView four(states.data(), 4, c.state_dim), narrow(states.data(), 4, c.state_dim - 1);
  auto message = [&](const zs::FusedTrunkPass& p) { return error_of([&] { zs::FusedTrunk(net, {p}); }); };
  auto contains = [](const std::string& m, const std::string& part) { return m.find(part) != std::string::npos; };

  EXPECT_TRUE(contains(error_of([&] { zs::FusedTrunk(net, {}); }), "0 passes given"));
  EXPECT_TRUE(contains(message(zs::trunk_pass(online, narrow, acts, 0)), "pass 0 input is [4, 6]; expected [4, 7]"));
  EXPECT_TRUE(contains(error_of([&] { zs::trunk_pass(online, four, acts, 2); }), "rows 2..6 of activations with 4"));
  zs::FusedTrunkPass p = zs::trunk_pass(online, four, acts, 0);
  p.output = zs::as_matrix(acts.trunk[1], 4, 17);
  EXPECT_TRUE(contains(message(p), "output is [4, 17]; expected [4, 9]"));
  p = zs::trunk_pass(online, four, acts, 0);
  p.hidden.pop_back();
  EXPECT_TRUE(contains(message(p), "has 1 hidden outputs; expected 0 or 2"));
  p = zs::trunk_pass(online, four, acts, 0);
  p.hidden[1] = zs::as_matrix(acts.trunk[0], 4, 33);
  EXPECT_TRUE(contains(message(p), "hidden output 1 is [4, 33]; expected [4, 17]"));
  p = zs::trunk_pass(online, four, acts, 0);
  p.params = nullptr;
  EXPECT_TRUE(contains(message(p), "pass 0 has no parameters"));
  // Without hidden outputs only the features are written.
  p = zs::trunk_pass(online, four, acts, 0);
  p.hidden.clear();
  EXPECT_EQ(message(p), "");
}
