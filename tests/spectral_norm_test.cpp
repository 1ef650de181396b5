#include "nn/spectral_norm.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "backends/graph.hpp"
#include "backends/stream.hpp"
#include "core/error.hpp"
#include "core/param_layout.hpp"
#include "test_util.hpp"

namespace {

using zs::kernels::SpectralNormDesc;

// Awkward shapes: 1x1, 1xN, Nx1, primes, rows above the CUDA team's 256 threads, and a
// matrix of ~1 M entries. (Layers are out x in.)
zs::Config layout_tiny() {  // 1x1, 1x1, 2x1, 1x1, 2x1
  zs::Config c;
  c.state_dim = 1, c.trunk = {1}, c.head_hidden = 1, c.atoms = 2, c.branches = {1};
  return c;
}
zs::Config layout_vectors() {  // 1x97, 37x1, 53x37, 37x1, 53x37, 37x1, 159x37
  zs::Config c;
  c.state_dim = 97, c.trunk = {1}, c.head_hidden = 37, c.atoms = 53, c.branches = {1, 3};
  return c;
}
zs::Config layout_primes() {  // 37x53, 300x37, 61x300, 2x61, 61x300, 14x61
  zs::Config c;
  c.state_dim = 53, c.trunk = {37, 300}, c.head_hidden = 61, c.atoms = 2, c.branches = {7};
  return c;
}
zs::Config layout_large() {  // 1031x1000, 3x1031, 2x3, 3x1031, 2x3
  zs::Config c;
  c.state_dim = 1000, c.trunk = {1031}, c.head_hidden = 3, c.atoms = 2, c.branches = {1};
  return c;
}

std::vector<zs::Config> all_layouts() {
  return {layout_tiny(), layout_vectors(), layout_primes(), layout_large(), zs::Config{}};
}

// The naive reference: one power iteration per matrix in double, with the kernel's rule.
struct Reference {
  std::vector<SpectralNormDesc> descs;
  std::vector<double> w;        // the whole flat buffer
  std::vector<double> uv;       // persistent vectors, the device's layout
  std::vector<double> uv_init;  // what a degenerate matrix resets to
  std::vector<double> sigma;
  double sigma_max;

  Reference(const std::vector<SpectralNormDesc>& d, const std::vector<float>& params,
            const std::vector<float>& init, double s_max)
      : descs(d), sigma(d.size()), sigma_max(s_max) {
    w.assign(params.begin(), params.end());
    uv_init.assign(init.begin(), init.end());
    uv = uv_init;
  }
  Reference(const zs::SpectralNorm& sn, const std::vector<float>& params)
      : Reference(sn.descriptors(), params, zs::test::to_host(sn.initial_vectors()),
                  sn.sigma_max()) {}

  void step() {
    for (std::size_t m = 0; m < descs.size(); ++m) {
      const auto& d = descs[m];
      double* W = w.data() + d.weight_offset;
      double* u = uv.data() + d.u_offset;
      double* v = uv.data() + d.v_offset;
      double vv = 0;
      for (int c = 0; c < d.cols; ++c) {
        double acc = 0;
        for (int r = 0; r < d.rows; ++r) acc += W[std::size_t(r) * d.cols + c] * u[r];
        v[c] = acc;
        vv += acc * acc;
      }
      for (int c = 0; c < d.cols; ++c) v[c] /= std::sqrt(vv) + 1e-12;
      double uu = 0;
      for (int r = 0; r < d.rows; ++r) {
        double acc = 0;
        for (int c = 0; c < d.cols; ++c) acc += W[std::size_t(r) * d.cols + c] * v[c];
        u[r] = acc;
        uu += acc * acc;
      }
      const double s = std::sqrt(uu);
      sigma[m] = s;
      if (!std::isfinite(s) || s < 1e-6) {
        for (int r = 0; r < d.rows; ++r) u[r] = uv_init[d.u_offset + r];
        for (int c = 0; c < d.cols; ++c) v[c] = uv_init[d.v_offset + c];
        continue;
      }
      for (int r = 0; r < d.rows; ++r) u[r] /= s + 1e-12;
      if (s > sigma_max)
        for (std::size_t i = 0; i < std::size_t(d.rows) * d.cols; ++i) W[i] *= sigma_max / s;
    }
  }
};

std::vector<float> random_params(const zs::ParamLayout& layout, std::uint64_t seed) {
  // Every third matrix gets ‖W‖_F = 3·√min(out, in), so σ₁ ≥ 3 > σ_max = 1 whatever its
  // shape; the others are small (σ₁ ≈ scale·(√out + √in)) and mostly stay below 1.
  std::vector<float> p(layout.size(), 0.f);
  const float scales[] = {0.02f, 0.1f};
  int k = 0;
  for (const auto& l : layout.layers()) {
    const std::size_t n = std::size_t(l.in) * l.out;
    auto g = zs::test::random_normal(n, seed + k, k % 3 == 2 ? 1.f : scales[k % 3]);
    if (k % 3 == 2) {
      double ss = 0;
      for (float x : g) ss += double(x) * x;
      const double f = 3.0 * std::sqrt(double(std::min(l.in, l.out))) / std::sqrt(ss);
      for (auto& x : g) x = static_cast<float>(x * f);
    }
    std::copy(g.begin(), g.end(), p.begin() + l.weight_offset);
    ++k;
  }
  return p;
}

void upload(const zs::DeviceFloats& d, const std::vector<float>& h) {
  auto m = Kokkos::create_mirror_view(d);
  for (std::size_t i = 0; i < h.size(); ++i) m(i) = h[i];
  Kokkos::deep_copy(d, m);
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// Compares a state after a call (weights, u/v buffer, σ per matrix) with the reference's;
// `where` names the call. σ within `tol` relative, u and v within `tol` absolute.
void expect_state_matches(const std::vector<float>& w, const std::vector<float>& uv,
                          const std::vector<float>& sig, const std::vector<std::string>& names,
                          Reference& ref, const std::string& where, double tol) {
  for (std::size_t m = 0; m < ref.descs.size(); ++m) {
    const auto& d = ref.descs[m];
    SCOPED_TRACE(testing::Message() << where << ", matrix " << names[m] << " (" << d.rows << "x"
                                    << d.cols << "), sigma " << ref.sigma[m]);
    if (!std::isfinite(ref.sigma[m])) {
      EXPECT_FALSE(std::isfinite(sig[m]));
    } else {
      EXPECT_NEAR(sig[m], ref.sigma[m], tol * ref.sigma[m] + 1e-30);
    }
    for (int r = 0; r < d.rows; ++r)
      ASSERT_NEAR(uv[d.u_offset + r], ref.uv[d.u_offset + r], tol) << "u[" << r << "]";
    for (int c = 0; c < d.cols; ++c)
      ASSERT_NEAR(uv[d.v_offset + c], ref.uv[d.v_offset + c], tol) << "v[" << c << "]";
    // σ within float noise of σ_max: either decision is right; follow the device's.
    const bool ambiguous = std::abs(ref.sigma[m] / ref.sigma_max - 1.0) < 1e-5;
    const std::size_t n = std::size_t(d.rows) * d.cols;
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t at = d.weight_offset + i;
      if (ambiguous) {
        ref.w[at] = w[at];
        continue;
      }
      const double expect = ref.w[at];
      if (std::isnan(expect)) {
        ASSERT_TRUE(std::isnan(w[at])) << "W[" << i << "]";
      } else if (std::isinf(expect)) {
        ASSERT_EQ(w[at], expect) << "W[" << i << "]";
      } else {
        ASSERT_NEAR(w[at], expect, 1e-6 * std::abs(expect) + 1e-30) << "W[" << i << "]";
      }
    }
  }
}

void expect_matches(const zs::SpectralNorm& sn, const zs::DeviceFloats& params, Reference& ref,
                    const std::string& where) {
  expect_state_matches(zs::test::to_host(params), zs::test::to_host(sn.vectors()),
                       zs::test::to_host(sn.sigmas()), sn.names(), ref, where, 1e-5);
}

}  // namespace

TEST(SpectralNorm, ConsecutiveCallsMatchDoubleReferenceOnAwkwardLayouts) {
  for (const auto& config : all_layouts()) {
    const zs::ParamLayout layout(config);
    const auto seed = zs::test::fresh_seed();
    SCOPED_TRACE(testing::Message() << "layout of " << layout.layers().size() << " matrices, "
                                    << layout.size() << " floats, seed = " << seed);
    zs::Stream stream;
    const zs::SpectralNorm sn(layout, 1.f, seed);
    ASSERT_EQ(sn.matrices(), static_cast<int>(layout.layers().size()));
    const auto host = random_params(layout, seed);
    auto params = zs::test::to_device(host);
    Reference ref(sn, host);
    bool scaled = false, unscaled = false;
    for (int call = 0; call < 4; ++call) {
      sn.apply(stream.exec(), params);
      stream.synchronize();
      ref.step();
      for (double s : ref.sigma) (s > 1.0 ? scaled : unscaled) = true;
      expect_matches(sn, params, ref, "call " + std::to_string(call));
      if (HasFatalFailure()) return;
    }
    EXPECT_TRUE(scaled) << "no matrix exercised the scaling branch";
    EXPECT_TRUE(unscaled) << "no matrix stayed below sigma_max";
  }
}

TEST(SpectralNorm, PersistentVectorsCarryAcrossCallsWhileWeightsChange) {
  // Training changes W between calls; u and v keep their state. A fresh W per call, and the
  // reference continuing from its own u/v, show that the device continues from its own too.
  const zs::ParamLayout layout(layout_primes());
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed = " << seed);
  zs::Stream stream;
  const zs::SpectralNorm sn(layout, 2.f, seed);
  auto host = random_params(layout, seed);
  auto params = zs::test::to_device(host);
  Reference ref(sn, host);
  for (int call = 0; call < 5; ++call) {
    host = random_params(layout, seed + 1000 * (call + 1));
    upload(params, host);
    ref.w.assign(host.begin(), host.end());
    sn.apply(stream.exec(), params);
    stream.synchronize();
    ref.step();
    expect_matches(sn, params, ref, "call " + std::to_string(call));
    if (HasFatalFailure()) return;
  }
}

TEST(SpectralNorm, BelowSigmaMaxWeightsAreUnchangedBitForBit) {
  const zs::ParamLayout layout{zs::Config{}};
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed = " << seed);
  zs::Stream stream;
  const zs::SpectralNorm sn(layout, 1e6f, seed);
  const auto host = random_params(layout, seed);
  auto params = zs::test::to_device(host);
  Reference ref(sn, host);
  for (int call = 0; call < 3; ++call) {
    sn.apply(stream.exec(), params);
    stream.synchronize();
    ref.step();
    const auto w = zs::test::to_host(params);
    for (std::size_t i = 0; i < w.size(); ++i) ASSERT_TRUE(same_bits(w[i], host[i])) << i;
    expect_matches(sn, params, ref, "call " + std::to_string(call));
  }
}

TEST(SpectralNorm, ZeroAndTinyMatricesAreLeftAloneWithoutNaNAndRecover) {
  const zs::ParamLayout layout{zs::Config{}};
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed = " << seed);
  zs::Stream stream;
  const zs::SpectralNorm sn(layout, 1.f, seed);
  auto host = random_params(layout, seed);
  const auto& zero = layout.layer("trunk.0");
  const auto& tiny = layout.layer("value.0");
  for (std::size_t i = 0; i < std::size_t(zero.in) * zero.out; ++i)
    host[zero.weight_offset + i] = 0.f;
  for (std::size_t i = 0; i < std::size_t(tiny.in) * tiny.out; ++i)
    host[tiny.weight_offset + i] *= 1e-9f;
  auto params = zs::test::to_device(host);
  Reference ref(sn, host);
  const auto init = zs::test::to_host(sn.initial_vectors());
  for (int call = 0; call < 3; ++call) {
    sn.apply(stream.exec(), params);
    stream.synchronize();
    ref.step();
    expect_matches(sn, params, ref, "call " + std::to_string(call));
    const auto w = zs::test::to_host(params);
    const auto uv = zs::test::to_host(sn.vectors());
    const auto sig = zs::test::to_host(sn.sigmas());
    for (float x : w) ASSERT_TRUE(std::isfinite(x));
    for (float x : uv) ASSERT_TRUE(std::isfinite(x));
    for (int m : {0, 2}) {  // trunk.0 (zero) and value.0 (1e-9-scaled)
      const auto& d = sn.descriptors()[m];
      EXPECT_TRUE(std::isfinite(sig[m]));
      EXPECT_LT(sig[m], 1e-6f);
      for (std::size_t i = 0; i < std::size_t(d.rows) * d.cols; ++i)
        ASSERT_TRUE(same_bits(w[d.weight_offset + i], host[d.weight_offset + i]));
      for (int i = 0; i < d.rows + d.cols; ++i)
        ASSERT_EQ(uv[d.u_offset + i], init[d.u_offset + i]) << "u/v not reset, matrix " << m;
    }
    EXPECT_EQ(sig[0], 0.f);
    EXPECT_GT(sig[2], 0.f);
  }
  // Weights arrive (e.g. loaded after the first call): the iteration was not stuck at u = 0.
  const auto fresh = random_params(layout, seed + 7);
  for (std::size_t i = 0; i < std::size_t(zero.in) * zero.out; ++i)
    host[zero.weight_offset + i] = fresh[zero.weight_offset + i] * 10.f;
  upload(params, host);
  ref.w.assign(host.begin(), host.end());
  for (int call = 0; call < 3; ++call) {
    sn.apply(stream.exec(), params);
    stream.synchronize();
    ref.step();
    expect_matches(sn, params, ref, "after weights arrived, call " + std::to_string(call));
  }
  // N(0, 0.2²) weights on a 256x48 matrix: σ ≈ 0.2·(16 + 7), scaled back to about σ_max.
  EXPECT_GT(ref.sigma[0], 0.5);
  EXPECT_NEAR(zs::test::to_host(sn.sigmas())[0], ref.sigma[0], 1e-5 * ref.sigma[0]);
}

TEST(SpectralNorm, NaNOrInfInOneMatrixLeavesItAndTheOthersAlone) {
  // A non-finite σ: that matrix keeps its weights bit for bit (the guard deals with the NaN),
  // reports a non-finite σ and restarts from its initial u/v; the other teams never see it.
  const zs::ParamLayout layout{zs::Config{}};
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed = " << seed);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (float bad : {nan, inf, -inf}) {
    SCOPED_TRACE(testing::Message() << "bad value " << bad);
    zs::Stream stream;
    const zs::SpectralNorm sn(layout, 1.f, seed);
    auto host = random_params(layout, seed);
    auto params = zs::test::to_device(host);
    Reference ref(sn, host);
    sn.apply(stream.exec(), params);  // a normal call first, so u/v are not at their start
    stream.synchronize();
    ref.step();
    host = zs::test::to_host(params);
    const int hit[] = {3, 7};  // value.1 and branch.1.1
    for (int m : hit) {
      const auto& d = sn.descriptors()[m];
      host[d.weight_offset + seed % (std::size_t(d.rows) * d.cols)] = bad;
    }
    upload(params, host);
    ref.w.assign(host.begin(), host.end());
    sn.apply(stream.exec(), params);
    stream.synchronize();
    ref.step();
    expect_matches(sn, params, ref, "with the bad value");
    const auto w = zs::test::to_host(params);
    const auto uv = zs::test::to_host(sn.vectors());
    const auto init = zs::test::to_host(sn.initial_vectors());
    const auto sig = zs::test::to_host(sn.sigmas());
    for (int m : hit) {
      const auto& d = sn.descriptors()[m];
      EXPECT_FALSE(std::isfinite(sig[m])) << "matrix " << m;
      for (std::size_t i = 0; i < std::size_t(d.rows) * d.cols; ++i)
        ASSERT_TRUE(same_bits(w[d.weight_offset + i], host[d.weight_offset + i])) << m << ", " << i;
      for (int i = 0; i < d.rows + d.cols; ++i) ASSERT_EQ(uv[d.u_offset + i], init[d.u_offset + i]);
    }
    for (int m = 0; m < sn.matrices(); ++m)
      if (m != 3 && m != 7) {
        EXPECT_TRUE(std::isfinite(sig[m])) << "matrix " << m;
      }
    // Repaired weights: the iteration carries on from the reset vectors, no NaN left behind.
    for (int m : hit) {
      const auto& d = sn.descriptors()[m];
      host[d.weight_offset + seed % (std::size_t(d.rows) * d.cols)] = 0.25f;
    }
    upload(params, host);
    ref.w.assign(host.begin(), host.end());
    sn.apply(stream.exec(), params);
    stream.synchronize();
    ref.step();
    expect_matches(sn, params, ref, "after repair");
    for (float x : zs::test::to_host(sn.sigmas())) EXPECT_TRUE(std::isfinite(x));
  }
}

namespace {

// σ₁ by power iteration on WᵀW in double, run to convergence (the "true" value).
double converged_sigma(const std::vector<float>& w, const SpectralNormDesc& d) {
  std::vector<double> v(d.cols, 1.0), u(d.rows);
  for (int c = 0; c < d.cols; ++c) v[c] = 1.0 + 0.001 * c;  // not orthogonal to anything planted
  double s = 0, prev = -1;
  for (int it = 0; it < 20000 && std::abs(s - prev) > 1e-15 * s; ++it) {
    prev = s;
    for (int r = 0; r < d.rows; ++r) {
      double acc = 0;
      for (int c = 0; c < d.cols; ++c)
        acc += double(w[d.weight_offset + std::size_t(r) * d.cols + c]) * v[c];
      u[r] = acc;
    }
    double vv = 0;
    for (int c = 0; c < d.cols; ++c) {
      double acc = 0;
      for (int r = 0; r < d.rows; ++r)
        acc += double(w[d.weight_offset + std::size_t(r) * d.cols + c]) * u[r];
      v[c] = acc;
      vv += acc * acc;
    }
    s = std::sqrt(std::sqrt(vv));  // ‖WᵀW v‖ with ‖v‖ = 1 is σ₁²
    for (auto& x : v) x /= std::sqrt(vv);
  }
  return s;
}

// Matrices with a known or well-separated top singular value: a diagonal (σ₁ = max |dᵢ|) and
// a rank-one spike on noise. Returns the indices of the planted matrices.
std::vector<int> plant(const zs::ParamLayout& layout, std::vector<float>& host, std::uint64_t seed,
                       double& diagonal_sigma) {
  const auto& sq = layout.layer("trunk.0");  // square
  for (std::size_t i = 0; i < std::size_t(sq.in) * sq.out; ++i) host[sq.weight_offset + i] = 0.f;
  const auto g = zs::test::random_normal(sq.in, seed);
  diagonal_sigma = 0;
  for (int i = 0; i < sq.in; ++i) {
    const float d = 0.2f * g[i];
    host[sq.weight_offset + std::size_t(i) * sq.in + i] = d;
    diagonal_sigma = std::max(diagonal_sigma, double(std::abs(d)));
  }
  host[sq.weight_offset + 5 * std::size_t(sq.in) + 5] = -2.5f;  // planted, well above the rest
  diagonal_sigma = 2.5;
  const auto& sp = layout.layer("value.0");  // 53x37
  const auto a = zs::test::random_normal(sp.out, seed + 1);
  const auto b = zs::test::random_normal(sp.in, seed + 2);
  const auto noise = zs::test::random_normal(std::size_t(sp.in) * sp.out, seed + 3, 0.05f);
  for (int r = 0; r < sp.out; ++r)
    for (int c = 0; c < sp.in; ++c)
      host[sp.weight_offset + std::size_t(r) * sp.in + c] =
          0.5f * a[r] * b[c] + noise[std::size_t(r) * sp.in + c];
  return {0, 1};
}

zs::Config layout_square() {  // 37x37, 53x37, 2x53, 53x37, 6x53
  zs::Config c;
  c.state_dim = 37, c.trunk = {37}, c.head_hidden = 53, c.atoms = 2, c.branches = {3};
  return c;
}

}  // namespace

TEST(SpectralNorm, ManyCallsConvergeToTheLargestSingularValue) {
  const zs::ParamLayout layout(layout_square());
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed = " << seed);
  auto host = random_params(layout, seed);
  double diagonal_sigma = 0;
  const auto planted = plant(layout, host, seed, diagonal_sigma);

  // Without scaling, σ estimates the largest singular value, from below.
  {
    zs::Stream stream;
    const zs::SpectralNorm sn(layout, 1e6f, seed);
    auto params = zs::test::to_device(host);
    for (int call = 0; call < 300; ++call) sn.apply(stream.exec(), params);
    stream.synchronize();
    const auto sig = zs::test::to_host(sn.sigmas());
    EXPECT_NEAR(sig[0], diagonal_sigma, 1e-5 * diagonal_sigma);
    const double spike = converged_sigma(host, sn.descriptors()[1]);
    EXPECT_NEAR(sig[1], spike, 1e-5 * spike);
    for (int m = 0; m < sn.matrices(); ++m)
      EXPECT_LE(sig[m], converged_sigma(host, sn.descriptors()[m]) * (1 + 1e-5)) << "matrix " << m;
  }
  // With σ_max = 1, the planted matrices end up with a true σ₁ of 1.
  {
    zs::Stream stream;
    const zs::SpectralNorm sn(layout, 1.f, seed);
    auto params = zs::test::to_device(host);
    for (int call = 0; call < 300; ++call) sn.apply(stream.exec(), params);
    stream.synchronize();
    const auto w = zs::test::to_host(params);
    for (int m : planted) EXPECT_NEAR(converged_sigma(w, sn.descriptors()[m]), 1.0, 1e-4) << m;
  }
}

TEST(SpectralNorm, GraphReplayWithFreshWeightsContinuesTheIteration) {
  const zs::ParamLayout layout{zs::Config{}};
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed = " << seed);
  zs::Stream stream;
  const zs::SpectralNorm sn(layout, 1.f, seed);
  auto host = random_params(layout, seed);
  auto params = zs::test::to_device(host);
  Reference ref(sn, host);
  auto body = [&] { sn.apply(stream.exec(), params); };
  body();  // first use outside capture
  stream.synchronize();
  ref.step();
  expect_matches(sn, params, ref, "direct run");
  zs::Graph graph;
  graph.capture(stream, body);
  ASSERT_TRUE(graph.captured());
  for (int replay = 0; replay < 4; ++replay) {
    if (replay % 2 == 1) {  // fresh weights on odd replays, the scaled ones kept on even ones
      host = random_params(layout, seed + replay + 1);
      for (auto& x : host) x *= 1.f + replay;
      upload(params, host);
      ref.w.assign(host.begin(), host.end());
    }
    graph.replay(stream);
    stream.synchronize();
    ref.step();
    expect_matches(sn, params, ref, "replay " + std::to_string(replay));
    if (HasFatalFailure()) return;
  }
}

// The one launch (a cluster per matrix, backends/cluster_power_iteration.hpp) where the backend
// has it: on the host never; on the GPU (sm_90) for every layout whose slabs fit a block's shared
// memory, not for the ~1 M-entry matrix. Where it runs, three calls give the three launches'
// results to the double sums' rounding (the slabs differ, so the bits may), and a set skip flag
// leaves every bit alone.
TEST(SpectralNorm, OneLaunchWhereTheBackendCanMatchesTheThreeLaunches) {
  const bool host = Kokkos::SpaceAccessibility<Kokkos::HostSpace, zs::MemSpace>::accessible;
  EXPECT_FALSE(zs::SpectralNorm(zs::ParamLayout(layout_large()), 1.f, 1).one_launch());
  EXPECT_FALSE(zs::SpectralNorm(zs::ParamLayout(zs::Config{}), 1.f, 1, false).one_launch());
  for (const auto& config : {layout_tiny(), layout_vectors(), layout_primes(), zs::Config{}}) {
    const zs::ParamLayout layout(config);
    const auto seed = zs::test::fresh_seed();
    SCOPED_TRACE(testing::Message() << "layout of " << layout.layers().size() << " matrices, seed = " << seed);
    zs::Stream stream;
    const zs::SpectralNorm one(layout, 1.f, seed), three(layout, 1.f, seed, false);
    EXPECT_EQ(one.one_launch(), !host);
    ASSERT_FALSE(three.one_launch());
    const auto w0 = random_params(layout, seed);
    auto p1 = zs::test::to_device(w0), p3 = zs::test::to_device(w0);

    zs::DeviceScalar<int> skip("skip");
    Kokkos::deep_copy(skip, 1);
    one.apply(stream.exec(), p1, skip);
    stream.synchronize();
    const auto skipped = zs::test::to_host(p1);
    const auto uv_skipped = zs::test::to_host(one.vectors()), uv_init = zs::test::to_host(one.initial_vectors());
    for (std::size_t i = 0; i < w0.size(); ++i) ASSERT_TRUE(same_bits(skipped[i], w0[i])) << "W[" << i << "] moved under skip";
    for (std::size_t i = 0; i < uv_init.size(); ++i) ASSERT_TRUE(same_bits(uv_skipped[i], uv_init[i])) << "uv[" << i << "] moved under skip";

    for (int call = 0; call < 3; ++call) {
      one.apply(stream.exec(), p1);
      three.apply(stream.exec(), p3);
      stream.synchronize();
      SCOPED_TRACE(testing::Message() << "call " << call);
      const auto s1 = zs::test::to_host(one.sigmas()), s3 = zs::test::to_host(three.sigmas());
      for (std::size_t m = 0; m < s1.size(); ++m) EXPECT_NEAR(s1[m], s3[m], 1e-6 * std::abs(s3[m]) + 1e-30) << one.names()[m];
      const auto uv1 = zs::test::to_host(one.vectors()), uv3 = zs::test::to_host(three.vectors());
      for (std::size_t i = 0; i < uv1.size(); ++i) ASSERT_NEAR(uv1[i], uv3[i], 1e-5) << "uv[" << i << "]";
      const auto w1 = zs::test::to_host(p1), w3 = zs::test::to_host(p3);
      for (std::size_t i = 0; i < w1.size(); ++i) ASSERT_NEAR(w1[i], w3[i], 1e-6 * std::abs(w3[i]) + 1e-30) << "W[" << i << "]";
    }
  }
}

TEST(SpectralNorm, BadArgumentsAreClearErrors) {
  const zs::ParamLayout layout{zs::Config{}};
  for (float bad : {0.f, -1.f, std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::infinity()}) {
    try {
      zs::SpectralNorm sn(layout, bad, 1);
      FAIL() << "no error for sigma_max = " << bad;
    } catch (const zs::Error& e) {
      EXPECT_NE(std::string(e.what()).find("sigma_max = "), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("expected a finite number > 0"), std::string::npos);
    }
  }
  zs::Stream stream;
  const zs::SpectralNorm sn(layout, 1.f, 1);
  zs::DeviceFloats short_buffer("short", layout.size() - 32);
  try {
    sn.apply(stream.exec(), short_buffer);
    FAIL() << "no error for a buffer of the wrong size";
  } catch (const zs::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(std::to_string(layout.size() - 32)), std::string::npos) << what;
    EXPECT_NE(what.find("expected " + std::to_string(layout.size())), std::string::npos) << what;
  }
  // The launcher checks what it can see without reading the device tables.
  std::vector<SpectralNormDesc> descs(2);
  descs[0].rows = descs[0].cols = descs[1].rows = descs[1].cols = 2;
  descs[0].v_offset = 2, descs[1].weight_offset = 4, descs[1].u_offset = 4, descs[1].v_offset = 6;
  const auto plan = zs::kernels::make_spectral_norm_plan<zs::ExecSpace>(descs);
  zs::DeviceFloats params("p", 8), uv("uv", 8), sigmas("s", 3);
  EXPECT_NE(zs::test::error_of([&] {
              zs::kernels::batched_spectral_norm(stream.exec(), plan, params, uv, uv, sigmas, 1.f);
            }).find("sigmas has 3 entries; expected 2"),
            std::string::npos);
  zs::DeviceFloats short_uv("uv", 7), two("s", 2);
  EXPECT_NE(zs::test::error_of([&] {
              zs::kernels::batched_spectral_norm(stream.exec(), plan, params, short_uv, short_uv,
                                                 two, 1.f);
            }).find("the plan's vectors end at 8 floats; expected at most 7"),
            std::string::npos);
  // And the planner what it is given.
  zs::kernels::SpectralNormGeometry g;
  g.chunk_cols = 0;
  EXPECT_NE(zs::test::error_of([&] {
              zs::kernels::spectral_norm_tables(descs, g);
            }).find("chunk_cols = 0; expected 1 to 256"),
            std::string::npos);
  descs[1].cols = 0;
  EXPECT_NE(zs::test::error_of([&] {
              zs::kernels::make_spectral_norm_plan<zs::ExecSpace>(descs);
            }).find("matrix 1 is 2x0; expected at least 1x1"),
            std::string::npos);
}

namespace {

// Matrices of odd shapes, straight through the launcher: rows and columns that leave ragged
// last chunks, slabs and blocks in every pass, at unaligned offsets in the buffers, and two
// degenerate matrices spread over several chunks.
struct OddBatch {
  std::vector<SpectralNormDesc> descs;
  std::vector<std::string> names;
  std::vector<float> params, init;

  explicit OddBatch(std::uint64_t seed) {
    struct Shape {
      int rows, cols;
      float scale;  // σ₁ ≈ scale·(√rows + √cols): some above σ_max = 1, some below
    };
    const Shape shapes[] = {{1, 1, 2.5f},    {3, 70, 0.3f},   {257, 33, 0.02f}, {128, 256, 0.02f},
                            {300, 70, 0.1f}, {1, 300, 0.01f}, {70, 3, 1.f},     {65, 129, 0.2f},
                            {40, 90, 0.f},   {90, 40, 0.5f}};
    std::int64_t w_at = 3, uv_at = 1;  // odd starts: nothing assumes aligned matrices or vectors
    int k = 0;
    for (const auto& s : shapes) {
      SpectralNormDesc d;
      d.rows = s.rows, d.cols = s.cols;
      d.weight_offset = w_at;
      d.u_offset = uv_at;
      d.v_offset = uv_at + s.rows;
      w_at += std::int64_t(s.rows) * s.cols + 1;
      uv_at += s.rows + s.cols + 2;
      descs.push_back(d);
      names.push_back(std::to_string(s.rows) + "x" + std::to_string(s.cols));
      ++k;
    }
    params.assign(w_at, 0.f);
    init.assign(uv_at, 0.f);
    k = 0;
    for (const auto& d : descs) {
      if (shapes[k].scale > 0.f) {  // else all zeros
        const auto g =
            zs::test::random_normal(std::size_t(d.rows) * d.cols, seed + k, shapes[k].scale);
        std::copy(g.begin(), g.end(), params.begin() + d.weight_offset);
      }
      for (auto [at, n] :
           {std::pair<std::int64_t, int>{d.u_offset, d.rows}, {d.v_offset, d.cols}}) {
        auto x = zs::test::random_normal(n, seed + 100 + 2 * k + (at == d.v_offset));
        double ss = 0;
        for (float e : x) ss += double(e) * e;
        for (int i = 0; i < n; ++i) init[at + i] = static_cast<float>(x[i] / std::sqrt(ss));
      }
      ++k;
    }
    params[descs[0].weight_offset] = 2.5f;  // 1x1: σ = 2.5 exactly
    // 40x90 is all zeros and 90x40 holds a NaN: degenerate, reset by one chunk, scaled by none.
    params[descs[9].weight_offset + seed % (90 * 40)] = std::numeric_limits<float>::quiet_NaN();
  }
};

// The backend's own split, the CUDA split (slabs, 32-column chunks) and a fine one (ragged
// edges everywhere, several slabs of a few rows, and matrices too wide for slabs next to
// matrices with them), all runnable on either backend.
std::vector<zs::kernels::SpectralNormGeometry> geometries() {
  zs::kernels::SpectralNormGeometry device, fine;
  device.chunk_cols = 32, device.max_slabs = 4, device.min_slab_rows = 64;
  device.max_staged_cols = 2048, device.chunk_rows = 16, device.chunk_elements = 2048;
  fine.chunk_cols = 5, fine.max_slabs = 3, fine.min_slab_rows = 7, fine.max_staged_cols = 100;
  fine.chunk_rows = 3, fine.chunk_elements = 100;
  return {zs::kernels::SpectralNormShape<zs::MemSpace>::geometry(), device, fine};
}

struct OddState {
  std::vector<float> w, uv, sig;
};

OddState run_once(const zs::Stream& stream, const zs::kernels::SpectralNormPlan<zs::MemSpace>& plan,
                  const zs::DeviceFloats& params, const zs::DeviceFloats& uv,
                  const zs::DeviceFloats& init, const zs::DeviceFloats& sigmas) {
  zs::kernels::batched_spectral_norm(stream.exec(), plan, params, uv, zs::ConstDeviceFloats(init),
                                     sigmas, 1.f);
  stream.synchronize();
  return {zs::test::to_host(params), zs::test::to_host(uv), zs::test::to_host(sigmas)};
}

}  // namespace

TEST(SpectralNorm, OddShapesOverManyChunksMatchDoubleReferenceAndRepeatExactly) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed = " << seed);
  const OddBatch batch(seed);
  int g_index = 0;
  for (const auto& g : geometries()) {
    SCOPED_TRACE(testing::Message()
                 << "geometry " << g_index++ << ": chunk_cols " << g.chunk_cols << ", max_slabs "
                 << g.max_slabs << ", min_slab_rows " << g.min_slab_rows << ", chunk_rows "
                 << g.chunk_rows << ", chunk_elements " << g.chunk_elements);
    zs::Stream stream;
    const auto plan = zs::kernels::make_spectral_norm_plan<zs::ExecSpace>(batch.descs, g);
    auto params = zs::test::to_device(batch.params);
    auto uv = zs::test::to_device(batch.init);
    auto init = zs::test::to_device(batch.init);
    zs::DeviceFloats sigmas(std::string("sigmas"), batch.descs.size());
    Reference ref(batch.descs, batch.params, batch.init, 1.0);
    bool scaled = false, unscaled = false;
    OddState first;
    for (int call = 0; call < 3; ++call) {
      const auto got = run_once(stream, plan, params, uv, init, sigmas);
      ref.step();
      for (double s : ref.sigma) (s > 1.0 ? scaled : unscaled) = true;
      expect_state_matches(got.w, got.uv, got.sig, batch.names, ref, "call " + std::to_string(call),
                           1e-6);
      if (HasFatalFailure()) return;
      if (call == 0) first = got;
    }
    EXPECT_TRUE(scaled) << "no matrix exercised the scaling branch";
    EXPECT_TRUE(unscaled) << "no matrix stayed below sigma_max";

    // The same first call again, from the same state: the same bits.
    upload(params, batch.params);
    upload(uv, batch.init);
    const auto again = run_once(stream, plan, params, uv, init, sigmas);
    EXPECT_TRUE(zs::test::same_bits(again.w, first.w));
    EXPECT_TRUE(zs::test::same_bits(again.uv, first.uv));
    EXPECT_TRUE(zs::test::same_bits(again.sig, first.sig));
  }
}

TEST(SpectralNorm, ChunkTablesCoverEveryRowColumnAndElementOnce) {
  const OddBatch batch(1);
  for (const auto& g : geometries()) {
    SCOPED_TRACE(testing::Message() << "chunk_cols " << g.chunk_cols << ", chunk_rows "
                                    << g.chunk_rows << ", chunk_elements " << g.chunk_elements);
    const auto t = zs::kernels::spectral_norm_tables(batch.descs, g);
    ASSERT_EQ(t.matrices.size(), batch.descs.size());
    EXPECT_EQ(t.vectors_size, static_cast<std::int64_t>(batch.init.size()) - 2);
    std::int64_t partials = 0;
    for (std::size_t m = 0; m < t.matrices.size(); ++m) {
      const auto& mat = t.matrices[m];
      const auto& d = mat.desc;
      SCOPED_TRACE(testing::Message() << "matrix " << batch.names[m]);
      EXPECT_EQ(mat.partial_offset, partials);
      EXPECT_GE(mat.slabs, 1);
      EXPECT_LE(mat.slabs, g.max_slabs);
      if (mat.slabs > 1) {
        EXPECT_LE(d.cols, g.max_staged_cols);
        EXPECT_LE(d.cols, t.staged_cols);
      }
      partials += std::int64_t(mat.slabs) * d.cols;
      std::vector<int> cell(std::size_t(d.rows) * d.cols, 0), row(d.rows, 0), elem(cell.size(), 0);
      for (const auto& k : t.column_chunks) {
        if (k.matrix != int(m)) continue;
        EXPECT_LE(k.col1 - k.col0, g.chunk_cols);
        EXPECT_EQ(k.begin, std::int64_t(k.slab) * mat.slab_rows);
        for (std::int64_t r = k.begin; r < k.end; ++r)
          for (int c = k.col0; c < k.col1; ++c) ++cell[std::size_t(r) * d.cols + c];
      }
      int first_rows = 0, first_elements = 0, row_chunks = 0;
      for (const auto& k : t.row_chunks) {
        if (k.matrix != int(m)) continue;
        ++row_chunks;
        first_rows += k.begin == 0;
        EXPECT_LE(k.end - k.begin, g.chunk_rows);
        for (std::int64_t r = k.begin; r < k.end; ++r) ++row[r];
      }
      for (const auto& k : t.element_chunks) {
        if (k.matrix != int(m)) continue;
        first_elements += k.begin == 0;
        EXPECT_LE(k.end - k.begin, g.chunk_elements);
        for (std::int64_t i = k.begin; i < k.end; ++i) ++elem[i];
      }
      EXPECT_EQ(first_rows, 1) << "v needs exactly one writer";
      EXPECT_EQ(first_elements, 1) << "every matrix has its elements scaled";
      EXPECT_EQ(mat.row_chunks, row_chunks) << "pass 2's last team must count every team of its matrix";
      for (int n : cell) ASSERT_EQ(n, 1);
      for (int n : row) ASSERT_EQ(n, 1);
      for (int n : elem) ASSERT_EQ(n, 1);
    }
    EXPECT_EQ(t.partials_size, partials);
  }
}
