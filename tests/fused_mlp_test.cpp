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

constexpr float kSentinel = 7777.f;  // what rows past a pass's end must still hold afterwards
constexpr int kSpareRows = 2;

struct HostLayer {
  std::vector<float> w, b;  // [out, in] row-major, [out]
};

// |b| + Σ_k |x_k·w_k| for every output of a layer: the size of what the output sums, which is
// what its fp32 rounding error scales with (a ReLU output near 0 may sum terms of any size).
std::vector<double> term_sizes(const std::vector<double>& x, const std::vector<float>& w, const std::vector<float>& b,
                               int rows, int in, int out) {
  std::vector<double> sizes(std::size_t(rows) * out);
  for (int r = 0; r < rows; ++r)
    for (int o = 0; o < out; ++o) {
      double s = std::abs(double(b[o]));
      for (int k = 0; k < in; ++k) s += std::abs(x[std::size_t(r) * in + k] * double(w[std::size_t(o) * in + k]));
      sizes[std::size_t(r) * out + o] = s;
    }
  return sizes;
}

// Every layer's output [rows, out] in double, y = x·Wᵀ + b with ReLU except maybe after the
// last, and the term sizes of each.
struct Reference {
  std::vector<std::vector<double>> outs, sizes;
};

Reference reference(const std::vector<int>& widths, const std::vector<HostLayer>& layers,
                    const std::vector<float>& input, int rows, bool last_relu) {
  Reference ref;
  std::vector<double> x(input.begin(), input.end());
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const int in = widths[l], out = widths[l + 1];
    const bool relu = l + 1 < layers.size() || last_relu;
    std::vector<double> y(std::size_t(rows) * out);
    for (int r = 0; r < rows; ++r)
      for (int o = 0; o < out; ++o) {
        double s = layers[l].b[o];
        for (int k = 0; k < in; ++k) s += x[std::size_t(r) * in + k] * double(layers[l].w[std::size_t(o) * in + k]);
        y[std::size_t(r) * out + o] = relu ? std::max(s, 0.0) : s;
      }
    ref.sizes.push_back(term_sizes(x, layers[l].w, layers[l].b, rows, in, out));
    ref.outs.push_back(y);
    x = y;
  }
  return ref;
}

// The largest error of a row over the largest term size in that row: fp32 sums of a few hundred
// terms stay well inside 1e-5 of it.
double max_row_rel(const std::vector<float>& got, const std::vector<double>& want, const std::vector<double>& sizes,
                   int rows, int cols) {
  double worst = 0;
  for (int r = 0; r < rows; ++r) {
    double err = 0, scale = 1e-30;
    for (int c = 0; c < cols; ++c) {
      const std::size_t i = std::size_t(r) * cols + c;
      err = std::max(err, std::abs(double(got[i]) - want[i]));
      scale = std::max(scale, sizes[i]);
    }
    worst = std::max(worst, err / scale);
  }
  return worst;
}

double largest_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

// One pass's host data and device buffers. Outputs have kSpareRows extra rows of kSentinel.
struct PassData {
  int rows = 0;
  std::vector<HostLayer> host;
  std::vector<float> input;
  zs::DeviceFloats d_input;
  std::vector<zs::DeviceFloats> d_w, d_b, d_out;  // d_out[l] empty: that layer's output not asked for

  PassData(const std::vector<int>& widths, int r, bool hidden, std::uint64_t seed) : rows(r) {
    input = random_normal(std::size_t(rows) * widths[0], seed);
    d_input = to_device(input, "input");
    const int L = static_cast<int>(widths.size()) - 1;
    for (int l = 0; l < L; ++l) {
      const int in = widths[l], out = widths[l + 1];
      // Scaled like a He initialisation, so activations stay O(1) through the stack.
      host.push_back({random_normal(std::size_t(out) * in, seed + 10 + l, float(std::sqrt(2.0 / in))),
                      random_normal(out, seed + 100 + l, 0.1f)});
      d_w.push_back(to_device(host.back().w, "w"));
      d_b.push_back(to_device(host.back().b, "b"));
      const bool wanted = hidden || l + 1 == L;
      d_out.push_back(wanted ? to_device(std::vector<float>(std::size_t(rows + kSpareRows) * out, kSentinel), "out")
                             : zs::DeviceFloats());
    }
  }
  FusedMlpPass pass() const {
    FusedMlpPass p;
    p.input = d_input.data();
    p.rows = rows;
    for (std::size_t l = 0; l < d_w.size(); ++l) p.layers.push_back({d_w[l].data(), d_b[l].data(), d_out[l].data()});
    return p;
  }
};

// Every output that was asked for against the reference, and the spare rows untouched. Returns
// the largest |output| it compared, for the caller to see that its test was not all zeros.
double expect_matches(const std::vector<int>& widths, const PassData& d, bool last_relu, const std::string& what) {
  const Reference ref = reference(widths, d.host, d.input, d.rows, last_relu);
  double largest = 0;
  for (std::size_t l = 0; l < d.d_out.size(); ++l) {
    if (d.d_out[l].data() == nullptr) continue;
    const int out = widths[l + 1];
    const auto got = to_host(d.d_out[l]);
    EXPECT_LT(max_row_rel(got, ref.outs[l], ref.sizes[l], d.rows, out), 1e-5) << what << ", layer " << l;
    for (std::size_t i = std::size_t(d.rows) * out; i < got.size(); ++i)
      EXPECT_EQ(got[i], kSentinel) << what << ", layer " << l << ": wrote past row " << d.rows;
    largest = std::max(largest, largest_abs(ref.outs[l]));
  }
  return largest;
}

// One launch of the given passes, synchronised.
void run(const std::vector<int>& widths, const std::vector<const PassData*>& data, FusedAct last,
         const FusedMlpOptions& opt = {}) {
  std::vector<FusedMlpPass> passes;
  for (const PassData* d : data) passes.push_back(d->pass());
  zs::Stream stream;
  const FusedMlpLaunch<zs::ExecSpace> launch(widths, passes, last, opt);
  launch(stream.exec());
  stream.synchronize();
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
  for (const auto& [state_dim, trunk, scale] : {Case{48, {256, 256}, 0.1f}, Case{7, {33, 17, 9}, 0.4f}}) {
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
                                     zs::trunk_pass(target, s2, tg, 0)});
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
        EXPECT_LT(max_row_rel(a, bd, sizes, B, out), 1e-5) << "state_dim " << state_dim << ", pass " << pass
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
