// A dense-layer stack's reference for the fused MLP tests (fused_mlp_test.cpp,
// row_block_mlp_test.cpp): every layer in double by naive loops, each output's error measured on
// the scale of the terms it sums, and one pass's random data with sentinel rows past its end.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/stream.hpp"
#include "kernels/fused_mlp.hpp"
#include "test_util.hpp"

namespace zs::test::mlp {

using zs::kernels::FusedMlpPass;
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
inline std::vector<double> term_sizes(const std::vector<double>& x, const std::vector<float>& w, const std::vector<float>& b,
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

inline Reference reference(const std::vector<int>& widths, const std::vector<HostLayer>& layers,
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
inline double max_row_rel(const std::vector<float>& got, const std::vector<double>& want, const std::vector<double>& sizes,
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

inline double largest_abs(const std::vector<double>& v) {
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
inline double expect_matches(const std::vector<int>& widths, const PassData& d, bool last_relu, const std::string& what,
                      double tolerance = 1e-5) {
  const Reference ref = reference(widths, d.host, d.input, d.rows, last_relu);
  double largest = 0;
  for (std::size_t l = 0; l < d.d_out.size(); ++l) {
    if (d.d_out[l].data() == nullptr) continue;
    const int out = widths[l + 1];
    const auto got = to_host(d.d_out[l]);
    EXPECT_LT(max_row_rel(got, ref.outs[l], ref.sizes[l], d.rows, out), tolerance) << what << ", layer " << l;
    for (std::size_t i = std::size_t(d.rows) * out; i < got.size(); ++i)
      EXPECT_EQ(got[i], kSentinel) << what << ", layer " << l << ": wrote past row " << d.rows;
    largest = std::max(largest, largest_abs(ref.outs[l]));
  }
  return largest;
}

// One launch of a layer stack (Launch's constructor takes the widths, the passes, the last
// layer's activation, then `extra`) on the passes of `data`, synchronised.
template <class Launch, class... Extra>
void run_stack(const std::vector<int>& widths, const std::vector<const PassData*>& data, zs::kernels::FusedAct last,
               const Extra&... extra) {
  std::vector<FusedMlpPass> passes;
  for (const PassData* d : data) passes.push_back(d->pass());
  zs::Stream stream;
  const Launch launch(widths, passes, last, extra...);
  launch(stream.exec());
  stream.synchronize();
}

}  // namespace zs::test::mlp
