// The row-block dense-layer stack (kernels/row_block_mlp.hpp) against a naive double-precision
// loop, on fresh random inputs and weights, for both row blocks (16 and 32 rows a team): FP32's
// tolerance on the host, TF32's on CUDA (tensor cores). Widths that fill no tile, several column
// groups a warp, passes with their own buffers, a NaN input row, a graph replay and bad shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/graph.hpp"
#include "backends/stream.hpp"
#include "kernels/row_block_mlp.hpp"
#include "mlp_reference.hpp"
#include "test_util.hpp"

namespace {

using zs::kernels::FusedAct;
using zs::kernels::FusedMlpPass;
using zs::test::error_of;
using zs::test::to_host;
using namespace zs::test::mlp;

// TF32 keeps 10 of FP32's 23 mantissa bits: each operand is off by up to 2^-11 relative, and a
// layer's error feeds the next.
constexpr double kTolerance = zs::WarpTile<zs::ExecSpace>::kRoundsToTf32 ? 2e-3 : 1e-5;

template <class Rows>
class RowBlockMlp : public testing::Test {
 public:
  using Launch = zs::kernels::RowBlockMlpLaunch<zs::ExecSpace, Rows::value>;
  static void run(const std::vector<int>& widths, const std::vector<const PassData*>& data, FusedAct last) {
    run_stack<Launch>(widths, data, last);
  }
};
using RowBlocks = testing::Types<std::integral_constant<int, 16>, std::integral_constant<int, 32>>;
TYPED_TEST_SUITE(RowBlockMlp, RowBlocks);

}  // namespace

TYPED_TEST(RowBlockMlp, ReferenceTrunkWidthsMatchTheDoubleReference) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const std::vector<int> widths{48, 256, 256};
  // 77 rows: whole blocks and a block with few live rows.
  const PassData d(widths, 77, true, seed);
  TestFixture::run(widths, {&d}, FusedAct::relu);
  EXPECT_GT(expect_matches(widths, d, true, "48-256-256, 77 rows", kTolerance), 0.1) << "outputs of zeros test nothing";
}

TYPED_TEST(RowBlockMlp, OddWidthsAndRowCountsMatchTheDoubleReference) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  // Widths of no whole tile, loaded a float at a time (7, 33, 17, 9) or four (12, 100, 36); 300
  // makes 10 column groups, two for some warps, so a warp's loads run on from one group to its next.
  for (const std::vector<int>& widths : {std::vector<int>{7, 33, 17, 9}, std::vector<int>{12, 100, 300, 36}}) {
    double largest = 0;
    for (int rows : {1, 3, 16, 17, 33, 64})
      for (FusedAct last : {FusedAct::none, FusedAct::relu}) {
        const PassData d(widths, rows, true, seed + 1000 * rows + widths[0]);
        TestFixture::run(widths, {&d}, last);
        const double m = expect_matches(widths, d, last == FusedAct::relu,
                                        "widths from " + std::to_string(widths[0]) + ", rows " +
                                            std::to_string(rows) + ", last " +
                                            (last == FusedAct::relu ? "relu" : "none"),
                                        kTolerance);
        largest = std::max(largest, m);
      }
    EXPECT_GT(largest, 0.1) << "outputs of zeros test nothing";
  }
}

TYPED_TEST(RowBlockMlp, SeveralPassesWithTheirOwnBuffersRunInOneLaunch) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  // Three passes of different row counts, each with its own weights, input and outputs; the
  // middle one asks for its last layer only.
  const std::vector<int> widths{20, 64, 40};
  const PassData a(widths, 41, true, seed), b(widths, 1, false, seed + 1), c(widths, 32, true, seed + 2);
  std::vector<FusedMlpPass> passes{a.pass(), b.pass(), c.pass()};
  zs::Stream stream;
  const typename TestFixture::Launch launch(widths, passes, FusedAct::none);
  const int rows = TypeParam::value;
  EXPECT_EQ(launch.teams(), (41 + rows - 1) / rows + 1 + 32 / rows);
  launch(stream.exec());
  stream.synchronize();
  EXPECT_GT(expect_matches(widths, a, false, "pass 0", kTolerance), 0.1) << "outputs of zeros test nothing";
  EXPECT_GT(expect_matches(widths, b, false, "pass 1", kTolerance), 0.0) << "outputs of zeros test nothing";
  EXPECT_GT(expect_matches(widths, c, false, "pass 2", kTolerance), 0.1) << "outputs of zeros test nothing";
}

TYPED_TEST(RowBlockMlp, ANaNInputPoisonsItsOwnRowOnly) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const std::vector<int> widths{48, 256, 64};
  PassData d(widths, 20, true, seed);
  const int bad = 5;
  d.input[std::size_t(bad) * widths[0] + 3] = std::nanf("");
  zs::test::upload(d.input, d.d_input);
  TestFixture::run(widths, {&d}, FusedAct::none);
  // The reference on the other rows: the bad row replaced by zeros there and skipped here.
  PassData clean = d;
  for (int k = 0; k < widths[0]; ++k) clean.input[std::size_t(bad) * widths[0] + k] = 0.f;
  const Reference ref = reference(widths, clean.host, clean.input, clean.rows, false);
  for (std::size_t l = 0; l < d.d_out.size(); ++l) {
    const int out = widths[l + 1];
    const auto got = to_host(d.d_out[l]);
    int nans = 0;
    for (int r = 0; r < d.rows; ++r)
      for (int c = 0; c < out; ++c) {
        const float v = got[std::size_t(r) * out + c];
        if (r == bad) {
          nans += std::isnan(v) ? 1 : 0;
          continue;
        }
        ASSERT_FALSE(std::isnan(v)) << "layer " << l << ", row " << r << ", column " << c;
        const double want = ref.outs[l][std::size_t(r) * out + c], size = ref.sizes[l][std::size_t(r) * out + c];
        EXPECT_LE(std::abs(v - want), kTolerance * size + 1e-6) << "layer " << l << ", row " << r << ", column " << c;
      }
    // The first layer's ReLU keeps NaN, so every later output of the row is NaN.
    EXPECT_EQ(nans, out) << "layer " << l << ": the bad row's outputs";
  }
}

TYPED_TEST(RowBlockMlp, AGraphReplayGivesTheDirectLaunchsBits) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const std::vector<int> widths{48, 256, 256};
  const PassData d(widths, 96, true, seed);
  zs::Stream stream;
  const typename TestFixture::Launch launch(widths, {d.pass()}, FusedAct::relu);
  launch(stream.exec());
  stream.synchronize();
  std::vector<std::vector<float>> direct;
  for (const auto& o : d.d_out) direct.push_back(to_host(o));
  for (const auto& o : d.d_out) Kokkos::deep_copy(o, kSentinel);  // the direct launch's values must come back
  zs::Graph graph;
  for (int replay = 0; replay < 2; ++replay) {
    graph.run(stream, [&] { launch(stream.exec()); });
    stream.synchronize();
    for (std::size_t l = 0; l < d.d_out.size(); ++l) ASSERT_EQ(to_host(d.d_out[l]), direct[l]) << "replay " << replay;
  }
  EXPECT_TRUE(graph.captured());
}

TYPED_TEST(RowBlockMlp, BadShapesAreRefusedWithMessagesNamingThem) {
  using Launch = typename TestFixture::Launch;
  const std::vector<int> widths{7, 33, 9};
  const PassData d(widths, 5, true, 3);
  auto refused = [&](const std::vector<int>& w, std::vector<FusedMlpPass> passes) {
    return error_of([&] { Launch(w, passes, FusedAct::none); });
  };
  auto contains = [](const std::string& message, const std::string& part) {
    return message.find(part) != std::string::npos;
  };
  EXPECT_TRUE(contains(refused({7}, {d.pass()}), "1 widths given; expected >= 2"));
  EXPECT_TRUE(contains(refused({7, 0, 9}, {d.pass()}), "width 1 is 0; expected >= 1"));
  EXPECT_TRUE(contains(refused(widths, {}), "0 passes given"));
  EXPECT_TRUE(contains(refused({7, 33, 9, 4}, {d.pass()}), "pass 0 has 2 layers; expected 3"));
  FusedMlpPass no_rows = d.pass();
  no_rows.rows = 0;
  EXPECT_TRUE(contains(refused(widths, {d.pass(), no_rows}), "pass 1 has an input of 0 rows"));
  FusedMlpPass no_bias = d.pass();
  no_bias.layers[1].b = nullptr;
  EXPECT_TRUE(contains(refused(widths, {no_bias}), "pass 0 layer 1 has a null weight or bias"));
  FusedMlpPass no_output = d.pass();
  no_output.layers.back().out = nullptr;
  EXPECT_TRUE(contains(refused(widths, {no_output}), "pass 0 has no output for its last layer"));
}
