// The row-block layer stack's segments (kernels/row_block_mlp.hpp) beyond a plain stack: inputs
// summed from several sources, segments of several parts (each reading its own segment of the
// layer before through its own weights), weights read transposed (W [k, n]: the input-gradient
// chain dz·W), masks from a forward's activations and segments without biases. Each against a
// naive double-precision loop on fresh random data, for both row blocks, FP32's tolerance on the
// host and TF32's on CUDA.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/stream.hpp"
#include "kernels/row_block_mlp.hpp"
#include "test_util.hpp"

namespace {

using zs::kernels::RowBlockLayerShape;
using zs::kernels::RowBlockPass;
using zs::kernels::RowBlockSegment;
using zs::kernels::RowBlockSource;
using zs::test::random_normal;
using zs::test::to_device;
using zs::test::to_host;

constexpr double kTolerance = zs::WarpTile<zs::ExecSpace>::kRoundsToTf32 ? 3e-3 : 1e-5;

// One segment's host data: its weights (a part each), bias, mask and output.
struct SegData {
  std::vector<std::vector<float>> w;
  std::vector<float> b, mask;  // empty: none
  std::vector<zs::DeviceFloats> d_w;
  zs::DeviceFloats d_b, d_mask, d_out;
  int out_ld = 0;
};

// A network of segments and its data for one pass of `rows` rows: inputs[i] is summed from
// `sources[i]` random matrices (each with a leading dimension of its own).
struct SegmentNet {
  std::vector<int> in_widths, sources;
  std::vector<RowBlockLayerShape> shape;
  bool trans = false;
  int rows = 0;
  std::vector<std::vector<std::vector<float>>> in;  // [segment][source] rows × ld
  std::vector<std::vector<int>> in_ld;
  std::vector<std::vector<zs::DeviceFloats>> d_in;
  std::vector<std::vector<SegData>> seg;  // [layer][segment]

  SegmentNet(std::vector<int> widths, std::vector<int> srcs, std::vector<RowBlockLayerShape> s, bool t, int r,
             bool biases, bool masks, std::uint64_t seed)
      : in_widths(std::move(widths)), sources(std::move(srcs)), shape(std::move(s)), trans(t), rows(r) {
    std::uint64_t next = seed;
    for (std::size_t i = 0; i < in_widths.size(); ++i) {
      in.emplace_back();
      in_ld.emplace_back();
      d_in.emplace_back();
      for (int j = 0; j < sources[i]; ++j) {
        const int ld = in_widths[i] + j;  // a source wider than its segment, read in part
        in.back().push_back(random_normal(std::size_t(rows) * ld, ++next));
        in_ld.back().push_back(ld);
        d_in.back().push_back(to_device(in.back().back(), "in"));
      }
    }
    std::vector<int> before = in_widths;
    for (const RowBlockLayerShape& l : shape) {
      seg.emplace_back();
      std::vector<int> now;
      for (std::size_t i = 0; i < l.n.size(); ++i) {
        SegData d;
        const int parts = l.parts.empty() ? 1 : l.parts[i], n = l.n[i];
        int fan_in = 0;
        for (int j = 0; j < parts; ++j) fan_in += before[std::size_t(l.from[i] + j)];
        for (int j = 0; j < parts; ++j) {
          const int k = before[std::size_t(l.from[i] + j)];
          d.w.push_back(random_normal(std::size_t(n) * k, ++next, float(std::sqrt(2.0 / fan_in))));
          d.d_w.push_back(to_device(d.w.back(), "w"));
        }
        if (biases) {
          d.b = random_normal(n, ++next, 0.1f);
          d.d_b = to_device(d.b, "b");
        }
        if (masks) {
          d.mask = random_normal(std::size_t(rows) * n, ++next);
          d.mask[std::size_t(n) / 2] = std::nanf("");  // a NaN activation keeps its gradient
          d.d_mask = to_device(d.mask, "mask");
        }
        d.out_ld = n + 3;
        d.d_out = to_device(std::vector<float>(std::size_t(rows) * d.out_ld, 7777.f), "out");
        seg.back().push_back(std::move(d));
        now.push_back(n);
      }
      before = now;
    }
  }

  RowBlockPass pass() const {
    RowBlockPass p;
    p.rows = rows;
    for (std::size_t i = 0; i < d_in.size(); ++i) {
      p.inputs.emplace_back();
      for (std::size_t j = 0; j < d_in[i].size(); ++j) p.inputs.back().push_back({d_in[i][j].data(), in_ld[i][j]});
    }
    for (const auto& layer : seg) {
      p.layers.emplace_back();
      for (const SegData& d : layer) {
        RowBlockSegment y;
        y.w = d.d_w[0].data();
        for (std::size_t j = 1; j < d.d_w.size(); ++j) y.more_w.push_back(d.d_w[j].data());
        y.b = d.b.empty() ? nullptr : d.d_b.data();
        y.mask = d.mask.empty() ? nullptr : d.d_mask.data();
        y.out = d.d_out.data();
        y.out_ld = d.out_ld;
        p.layers.back().push_back(y);
      }
    }
    return p;
  }

  // Every layer in double; each output compared on the scale of its layer's largest |output|.
  // Returns the largest |output| of the last layer, for the caller to see it tested something.
  double expect_matches(const std::string& what) const {
    std::vector<std::vector<double>> x;  // the layer before's segments, [rows, n]
    for (std::size_t i = 0; i < in.size(); ++i) {
      const int n = in_widths[i];
      std::vector<double> v(std::size_t(rows) * n, 0.0);
      for (std::size_t j = 0; j < in[i].size(); ++j)
        for (int r = 0; r < rows; ++r)
          for (int c = 0; c < n; ++c) v[std::size_t(r) * n + c] += in[i][j][std::size_t(r) * in_ld[i][j] + c];
      x.push_back(v);
    }
    std::vector<int> before = in_widths;
    double last = 0;
    for (std::size_t l = 0; l < shape.size(); ++l) {
      std::vector<std::vector<double>> y;
      std::vector<int> now;
      for (std::size_t i = 0; i < shape[l].n.size(); ++i) {
        const SegData& d = seg[l][i];
        const int n = shape[l].n[i], parts = shape[l].parts.empty() ? 1 : shape[l].parts[i];
        std::vector<double> v(std::size_t(rows) * n);
        for (int r = 0; r < rows; ++r)
          for (int c = 0; c < n; ++c) {
            double s = d.b.empty() ? 0.0 : d.b[std::size_t(c)];
            for (int j = 0; j < parts; ++j) {
              const std::size_t src = std::size_t(shape[l].from[i] + j);
              const int k = before[src];
              for (int q = 0; q < k; ++q) {
                const double w = trans ? d.w[std::size_t(j)][std::size_t(q) * n + c] : d.w[std::size_t(j)][std::size_t(c) * k + q];
                s += x[src][std::size_t(r) * k + q] * w;
              }
            }
            if (shape[l].relu && s < 0) s = 0;
            if (!d.mask.empty() && d.mask[std::size_t(r) * n + c] <= 0.f) s = 0;
            v[std::size_t(r) * n + c] = s;
          }
        const auto got = to_host(d.d_out);
        double scale = 1e-30, err = 0;
        for (double t : v) scale = std::max(scale, std::abs(t));
        for (int r = 0; r < rows; ++r) {
          for (int c = 0; c < n; ++c)
            err = std::max(err, std::abs(double(got[std::size_t(r) * d.out_ld + c]) - v[std::size_t(r) * n + c]));
          for (int c = n; c < d.out_ld; ++c)
            EXPECT_EQ(got[std::size_t(r) * d.out_ld + c], 7777.f) << what << ": layer " << l << " segment " << i
                                                                 << " wrote past its width, row " << r;
        }
        EXPECT_LT(err / scale, kTolerance) << what << ": layer " << l << " segment " << i;
        if (l + 1 == shape.size()) last = std::max(last, scale);
        y.push_back(v);
        now.push_back(n);
      }
      x = y;
      before = now;
    }
    return last;
  }
};

template <class Rows>
class RowBlockSegments : public testing::Test {};
using RowBlocks = testing::Types<std::integral_constant<int, 16>, std::integral_constant<int, 32>>;
TYPED_TEST_SUITE(RowBlockSegments, RowBlocks);

// The C51 network's input-gradient chain in small: the heads' output gradients (the value
// stream's the sum of two shares), each through its output layer's W to its hidden layer, the
// hidden layers' gradients summed through their W into the features, then a trunk layer; every
// W read transposed, every layer masked by a forward's activations, no biases.
std::vector<RowBlockLayerShape> chain_shape(int hidden, int features, int trunk) {
  return {{{hidden, hidden, hidden}, {0, 1, 2}, false, {}}, {{features}, {0}, false, {3}}, {{trunk}, {0}, false, {}}};
}

}  // namespace

TYPED_TEST(RowBlockSegments, AnInputGradientChainMatchesTheDoubleReference) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  using Launch = zs::kernels::RowBlockMlpLaunch<zs::ExecSpace, TypeParam::value, 8, 4, 32, true>;
  // Odd widths (no whole tile anywhere), and the reference network's (atoms 51, branches 5, 3, 3,
  // hidden 128, trunk 256).
  struct Case {
    std::vector<int> in;
    int hidden, features, trunk, rows;
  };
  for (const Case& k : {Case{{11, 22, 33}, 20, 37, 29, 19}, Case{{51, 255, 153}, 128, 256, 256, 70}}) {
    const std::string what = "outputs " + std::to_string(k.in[0]) + ", rows " + std::to_string(k.rows);
    const SegmentNet net(k.in, {2, 1, 1}, chain_shape(k.hidden, k.features, k.trunk), true, k.rows, false, true,
                         seed + k.rows);
    zs::Stream stream;
    const Launch launch(k.in, net.shape, {net.pass()});
    EXPECT_EQ(launch.teams(), (k.rows + TypeParam::value - 1) / TypeParam::value);
    launch(stream.exec());
    stream.synchronize();
    EXPECT_GT(net.expect_matches(what), 0.1) << "outputs of zeros test nothing";
  }
}

TYPED_TEST(RowBlockSegments, PartsBiasesAndSummedInputsMatchTheDoubleReferenceInSeveralPasses) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  using Launch = zs::kernels::RowBlockMlpLaunch<zs::ExecSpace, TypeParam::value>;
  // W [n, k] as a forward's: two input segments (the second summed from three sources), a layer of
  // two segments, one of them of both parts; biases, ReLU, and a mask on the last layer.
  const std::vector<RowBlockLayerShape> shape{{{40, 12}, {0, 0}, true, {2, 1}}, {{24}, {0}, false, {2}}};
  const SegmentNet a({9, 30}, {1, 3}, shape, false, 37, true, false, seed);
  const SegmentNet b({9, 30}, {1, 3}, shape, false, 5, true, false, seed + 1);
  zs::Stream stream;
  const Launch launch({9, 30}, shape, {a.pass(), b.pass()});
  launch(stream.exec());
  stream.synchronize();
  EXPECT_GT(a.expect_matches("pass 0"), 0.1) << "outputs of zeros test nothing";
  EXPECT_GT(b.expect_matches("pass 1"), 0.1) << "outputs of zeros test nothing";
}

TYPED_TEST(RowBlockSegments, BadSegmentsAreRefusedWithMessagesNamingThem) {
  using Launch = zs::kernels::RowBlockMlpLaunch<zs::ExecSpace, TypeParam::value, 8, 4, 32, true>;
  const SegmentNet net({11, 22, 33}, {2, 1, 1}, chain_shape(20, 37, 29), true, 5, false, true, 7);
  // The pass after a good one: a shape's source counts are pass 0's.
  auto refused = [&](const std::vector<int>& in, const std::vector<RowBlockLayerShape>& shape, const RowBlockPass& p) {
    return zs::test::error_of([&] { Launch(in, shape, {net.pass(), p}); });
  };
  auto contains = [](const std::string& message, const std::string& part) {
    return message.find(part) != std::string::npos;
  };
  EXPECT_EQ(refused({11, 22, 33}, net.shape, net.pass()), "");
  auto too_many_parts = net.shape;
  too_many_parts[1].parts = {4};
  EXPECT_TRUE(contains(refused({11, 22, 33}, too_many_parts, net.pass()),
                       "layer 1 segment 0 reads segments 0..3 of the layer before; expected within 0..2"));
  RowBlockPass p = net.pass();
  p.layers[1][0].more_w.pop_back();
  EXPECT_TRUE(contains(refused({11, 22, 33}, net.shape, p), "pass 1 layer 1 segment 0 has 2 weights; expected 3"));
  p = net.pass();
  p.inputs[0].pop_back();
  EXPECT_TRUE(contains(refused({11, 22, 33}, net.shape, p), "pass 1 input segment 0 has 1 sources; expected 2 (as pass 0)"));
  p = net.pass();
  p.inputs[1][0].ld = 21;
  EXPECT_TRUE(contains(refused({11, 22, 33}, net.shape, p), "input segment 1 has a source with ld 21; expected"));
  p = net.pass();
  p.inputs.pop_back();
  EXPECT_TRUE(contains(refused({11, 22, 33}, net.shape, p), "has sources for 2 input segments; expected 3"));
  p = net.pass();
  p.inputs.clear();
  p.input = nullptr;
  EXPECT_TRUE(contains(refused({11, 22, 33}, net.shape, p), "pass 1 has no input; expected one"));
  // One input where pass 0 sums two sources into its first segment.
  p.input = net.pass().inputs[0][0].p;
  EXPECT_TRUE(contains(refused({11, 22, 33}, net.shape, p),
                       "pass 1 has one input for 3 input segments of 2 sources (as pass 0); expected its sources"));
  p = net.pass();
  p.layers[0][1].mask_ld = 3;
  EXPECT_TRUE(contains(refused({11, 22, 33}, net.shape, p), "pass 1 layer 0 segment 1 has mask_ld 3; expected >= its width 20"));
  EXPECT_TRUE(contains(refused({11, 0, 33}, net.shape, net.pass()), "input segment 1 has width 0; expected >= 1"));
}
