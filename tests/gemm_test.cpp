// zs::Gemm against a naive double-precision product, every transpose combination, awkward
// sizes. FP32 mode must be near-exact; TF32 (CUDA tensor cores: 10-bit mantissa inputs) within
// the 1e-3 relative error that arithmetic allows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "backends/gemm.hpp"
#include "backends/graph.hpp"
#include "core/error.hpp"
#include "test_util.hpp"

namespace {

using Matrix = Kokkos::View<float**, Kokkos::LayoutRight, zs::MemSpace>;

Matrix to_device_matrix(const std::vector<float>& v, int rows, int cols) {
  Matrix m("m", rows, cols);
  auto h = Kokkos::create_mirror_view(m);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) h(r, c) = v[r * cols + c];
  Kokkos::deep_copy(m, h);
  return m;
}

// op(A)·op(B) in double, per element with the sum of its terms' magnitudes (the scale rounding
// errors have), for row-major A [ar, ac] and B [br, bc].
struct Reference {
  std::vector<double> value, scale;
};
Reference reference_product(zs::Trans ta, zs::Trans tb, int m, int n, int k, const std::vector<float>& a,
                            const std::vector<float>& b) {
  const int ac = ta == zs::Trans::N ? k : m, bc = tb == zs::Trans::N ? n : k;
  Reference r{std::vector<double>(std::size_t(m) * n), std::vector<double>(std::size_t(m) * n)};
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double s = 0, s_abs = 0;
      for (int p = 0; p < k; ++p) {
        const double x = ta == zs::Trans::N ? a[i * ac + p] : a[p * ac + i];
        const double y = tb == zs::Trans::N ? b[p * bc + j] : b[j * bc + p];
        s += x * y;
        s_abs += std::fabs(x * y);
      }
      r.value[std::size_t(i) * n + j] = s;
      r.scale[std::size_t(i) * n + j] = s_abs;
    }
  return r;
}

// Frobenius error of the device product against the double reference, relative to the size of
// the terms summed (|α|·Σ|a·b| + |β·c| per element): the scale rounding errors have. Relative to
// the result itself, a product that nearly cancels (1 × 1 × 1 with β·c ≈ −α·a·b) would fail any
// bound.
double gemm_error(zs::Precision precision, zs::Trans ta, zs::Trans tb, int m, int n, int k,
                  float alpha, float beta, std::uint64_t seed) {
  const int ar = ta == zs::Trans::N ? m : k, ac = ta == zs::Trans::N ? k : m;
  const int br = tb == zs::Trans::N ? k : n, bc = tb == zs::Trans::N ? n : k;
  const auto a = zs::test::random_normal(std::size_t(ar) * ac, seed);
  const auto b = zs::test::random_normal(std::size_t(br) * bc, seed + 1);
  const auto c0 = zs::test::random_normal(std::size_t(m) * n, seed + 2);
  const Reference product = reference_product(ta, tb, m, n, k, a, b);
  std::vector<double> ref(std::size_t(m) * n), scale(std::size_t(m) * n);
  for (std::size_t x = 0; x < ref.size(); ++x) {
    ref[x] = double(alpha) * product.value[x] + double(beta) * c0[x];
    scale[x] = std::fabs(double(alpha)) * product.scale[x] + std::fabs(double(beta) * c0[x]);
  }
  zs::Stream stream;
  zs::Gemm gemm(stream, precision);
  auto da = to_device_matrix(a, ar, ac), db = to_device_matrix(b, br, bc);
  auto dc = to_device_matrix(c0, m, n);
  gemm(ta, tb, alpha, da, db, beta, dc);
  stream.synchronize();
  const auto out = zs::test::to_host(dc);
  double num = 0, den = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += scale[i] * scale[i];
  }
  return std::sqrt(num / den);
}

}  // namespace

TEST(Gemm, MatchesDoubleReferenceAllTransposesFp32AndTf32) {
  struct Shape { int m, n, k; };
  for (const Shape s : {Shape{1, 1, 1}, Shape{7, 5, 3}, Shape{33, 17, 129}, Shape{256, 128, 48},
                        Shape{512, 255, 128}}) {
    for (auto ta : {zs::Trans::N, zs::Trans::T})
      for (auto tb : {zs::Trans::N, zs::Trans::T}) {
        const auto seed = zs::test::fresh_seed();
        SCOPED_TRACE(testing::Message() << s.m << "x" << s.n << "x" << s.k << " ta=" << int(ta)
                                        << " tb=" << int(tb) << " seed " << seed);
        EXPECT_LT(gemm_error(zs::Precision::fp32, ta, tb, s.m, s.n, s.k, 1.f, 0.f, seed), 1e-5);
        EXPECT_LT(gemm_error(zs::Precision::fp32, ta, tb, s.m, s.n, s.k, -0.75f, 1.f, seed), 1e-5);
        EXPECT_LT(gemm_error(zs::Precision::tf32, ta, tb, s.m, s.n, s.k, 1.3f, 0.5f, seed), 1e-3);
      }
  }
}

TEST(Gemm, BetaZeroIgnoresWhatCHeld) {
  zs::Stream stream;
  zs::Gemm gemm(stream, zs::Precision::fp32);
  Matrix a("a", 3, 4), b("b", 4, 2), c("c", 3, 2);
  Kokkos::deep_copy(a, 1.f);
  Kokkos::deep_copy(b, 2.f);
  Kokkos::deep_copy(c, std::numeric_limits<float>::quiet_NaN());
  gemm(zs::Trans::N, zs::Trans::N, 1.f, a, b, 0.f, c);
  stream.synchronize();
  for (float x : zs::test::to_host(c)) EXPECT_EQ(x, 8.f);
}

TEST(Gemm, MismatchedShapesAreClearErrors) {
  zs::Stream stream;
  zs::Gemm gemm(stream, zs::Precision::tf32);
  Matrix a("a", 3, 4), b("b", 5, 2), c("c", 3, 2);
  try {
    gemm(zs::Trans::N, zs::Trans::N, 1.f, a, b, 0.f, c);
    FAIL();
  } catch (const zs::Error& e) {
    EXPECT_NE(std::string(e.what()).find("A is [3, 4] but B is [5, 2]"), std::string::npos) << e.what();
  }
  Matrix b2("b2", 4, 2), c2("c2", 2, 2);
  try {
    gemm(zs::Trans::N, zs::Trans::N, 1.f, a, b2, 0.f, c2);
    FAIL();
  } catch (const zs::Error& e) {
    EXPECT_NE(std::string(e.what()).find("C is [2, 2]; expected [3, 2]"), std::string::npos) << e.what();
  }
}

TEST(Gemm, CapturedInAGraphAndReplayedWithNewInputs) {
  const int m = 64, n = 96, k = 48;
  zs::Stream stream;
  zs::Gemm gemm(stream, zs::Precision::fp32);
  Matrix a("a", m, k), b("b", k, n), c("c", m, n);
  auto body = [&] { gemm(zs::Trans::N, zs::Trans::N, 1.f, a, b, 0.f, c); };
  body();
  stream.synchronize();
  zs::Graph graph;
  graph.capture(stream, body);
  for (int replay = 0; replay < 3; ++replay) {
    const auto seed = zs::test::fresh_seed();
    SCOPED_TRACE(testing::Message() << "seed " << seed);
    const auto va = zs::test::random_normal(std::size_t(m) * k, seed);
    const auto vb = zs::test::random_normal(std::size_t(k) * n, seed + 7);
    Kokkos::deep_copy(a, to_device_matrix(va, m, k));
    Kokkos::deep_copy(b, to_device_matrix(vb, k, n));
    graph.replay(stream);
    stream.synchronize();
    const auto out = zs::test::to_host(c);
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        double s = 0;
        for (int p = 0; p < k; ++p) s += double(va[i * k + p]) * vb[p * n + j];
        ASSERT_NEAR(out[i * n + j], s, 1e-5 * (1 + std::abs(s)));
      }
  }
}

// A product with its bias (and ReLU) in the same launch, against a double reference for every
// transpose, ReLU on and off; a NaN input stays NaN through the ReLU, as through the separate
// bias pass (the guard must see it in the loss); a missing bias is a clear error.
TEST(Gemm, BiasAndReluRideInTheProduct) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  zs::Stream stream;
  const int m = 37, n = 19, k = 23;
  for (const zs::Precision precision : {zs::Precision::fp32, zs::Precision::tf32})
    for (const zs::Trans ta : {zs::Trans::N, zs::Trans::T})
      for (const zs::Trans tb : {zs::Trans::N, zs::Trans::T})
        for (const bool relu : {false, true}) {
          SCOPED_TRACE(testing::Message() << "precision " << (precision == zs::Precision::fp32 ? "fp32" : "tf32")
                                          << ", ta " << int(ta) << ", tb " << int(tb) << ", relu " << relu);
          const int ar = ta == zs::Trans::N ? m : k, ac = ta == zs::Trans::N ? k : m;
          const int br = tb == zs::Trans::N ? k : n, bc = tb == zs::Trans::N ? n : k;
          auto a = zs::test::random_normal(std::size_t(ar) * ac, seed);
          const auto b = zs::test::random_normal(std::size_t(br) * bc, seed + 1);
          const auto bias = zs::test::random_normal(n, seed + 2);
          a[0] = std::nanf("");  // row 0 of op(A) (N) or its column 0 (T): C's row 0 either way
          const Reference product = reference_product(ta, tb, m, n, k, a, b);
          std::vector<double> ref(std::size_t(m) * n), scale(std::size_t(m) * n);
          for (std::size_t x = 0; x < ref.size(); ++x) {
            const double v = product.value[x] + bias[x % n];
            ref[x] = relu && v < 0 ? 0.0 : v;
            scale[x] = product.scale[x] + std::fabs(bias[x % n]);
          }
          zs::Gemm gemm(stream, precision);
          auto da = to_device_matrix(a, ar, ac), db = to_device_matrix(b, br, bc);
          zs::DeviceFloats dbias = zs::test::to_device(bias);
          Matrix dc("c", m, n);
          Kokkos::deep_copy(dc, 7.f);  // whatever C held is overwritten
          zs::GemmBias p;
          p.ta = ta;
          p.tb = tb;
          p.m = m;
          p.n = n;
          p.k = k;
          p.a = da.data();
          p.b = db.data();
          p.c = dc.data();
          p.bias = dbias.data();
          p.relu = relu;
          gemm(p);
          stream.synchronize();
          const auto out = zs::test::to_host(dc);
          double num = 0, den = 0;
          int cut = 0;
          for (int i = 0; i < m; ++i)
            for (int j = 0; j < n; ++j) {
              const std::size_t x = std::size_t(i) * n + j;
              if (i == 0) {
                EXPECT_TRUE(std::isnan(out[x])) << "C[0][" << j << "] = " << out[x] << "; expected NaN";
                continue;
              }
              num += (out[x] - ref[x]) * (out[x] - ref[x]);
              den += scale[x] * scale[x];
              cut += out[x] == 0.f;
            }
          const double tolerance = precision == zs::Precision::tf32 ? 1e-3 : 1e-5;
          EXPECT_LT(std::sqrt(num / den), tolerance);
          if (relu) {
            EXPECT_GT(cut, m * n / 8) << "the ReLU must cut about half";
          } else {
            EXPECT_EQ(cut, 0);
          }
        }
  zs::Gemm gemm(stream, zs::Precision::fp32);
  zs::DeviceFloats buf("buf", 64);
  zs::GemmBias p;
  p.m = p.n = p.k = 4;
  p.a = p.b = buf.data();
  p.c = buf.data();
  try {
    gemm(p);
    ADD_FAILURE() << "a product without its bias was accepted";
  } catch (const zs::Error& e) {
    EXPECT_NE(std::string(e.what()).find("a null bias"), std::string::npos) << e.what();
  }
}

TEST(Gemm, BiasProductsOfOneShapeKeepTheirOwnOperandsCallAfterCall) {
  // One Gemm, one shape, several calls: different A, B, bias and C each time, in both
  // precisions and with and without ReLU, and the same calls replayed from a captured graph.
  // Whatever the Gemm keeps between calls of a shape must not carry one call's bias into another.
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  zs::Stream stream;
  zs::Gemm gemm(stream, zs::Precision::fp32);
  const int m = 33, n = 20, k = 17;
  struct Call {
    Matrix a, b, c;
    zs::DeviceFloats bias;
    std::vector<double> ref;
    zs::Precision precision;
    bool relu;
  };
  std::vector<Call> calls;
  for (int i = 0; i < 6; ++i) {
    const auto a = zs::test::random_normal(std::size_t(m) * k, seed + 10 * i);
    const auto b = zs::test::random_normal(std::size_t(k) * n, seed + 10 * i + 1);
    auto bias = zs::test::random_normal(n, seed + 10 * i + 2);
    for (auto& x : bias) x += 3.f * i;  // the calls' results differ by far more than rounding
    const Reference product = reference_product(zs::Trans::N, zs::Trans::N, m, n, k, a, b);
    Call c{to_device_matrix(a, m, k), to_device_matrix(b, k, n), Matrix("c", m, n), zs::test::to_device(bias),
           std::vector<double>(std::size_t(m) * n), i % 3 == 2 ? zs::Precision::tf32 : zs::Precision::fp32,
           i % 2 == 1};
    for (std::size_t x = 0; x < c.ref.size(); ++x) {
      const double v = product.value[x] + bias[x % n];
      c.ref[x] = c.relu && v < 0 ? 0.0 : v;
    }
    calls.push_back(std::move(c));
  }
  auto run = [&](const Call& c) {
    gemm.set_precision(c.precision);
    zs::GemmBias p;
    p.m = m;
    p.n = n;
    p.k = k;
    p.a = c.a.data();
    p.b = c.b.data();
    p.c = c.c.data();
    p.bias = c.bias.data();
    p.relu = c.relu;
    gemm(p);
  };
  auto check = [&](const char* how) {
    for (std::size_t i = 0; i < calls.size(); ++i) {
      const auto out = zs::test::to_host(calls[i].c);
      double worst = 0;
      for (std::size_t x = 0; x < out.size(); ++x)
        worst = std::max(worst, std::fabs(out[x] - calls[i].ref[x]) / (1.0 + std::fabs(calls[i].ref[x])));
      EXPECT_LT(worst, calls[i].precision == zs::Precision::tf32 ? 1e-2 : 1e-5) << how << ", call " << i;
    }
  };
  for (int round = 0; round < 2; ++round) {
    for (const auto& c : calls) run(c);
    stream.synchronize();
    check(round == 0 ? "first calls" : "calls again");
  }
  for (auto& c : calls) Kokkos::deep_copy(c.c, 0.f);
  zs::Graph graph;
  graph.capture(stream, [&] {
    for (const auto& c : calls) run(c);
  });
  graph.replay(stream);
  stream.synchronize();
  check("graph replay");
}
