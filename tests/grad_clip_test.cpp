#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "backends/graph.hpp"
#include "backends/stream.hpp"
#include "core/error.hpp"
#include "losses/registry.hpp"
#include "kernels/adam.hpp"
#include "kernels/budget_sum.hpp"
#include "kernels/grad_clip.hpp"
#include "kernels/grad_norm.hpp"
#include "core/param_layout.hpp"
#include "test_util.hpp"

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

using zs::test::reference_norm;
using zs::test::reference_clip;

zs::DeviceScalar<double> device_double(double x) {
  zs::DeviceScalar<double> d("zs::test::double");
  Kokkos::deep_copy(d, x);
  return d;
}

// C51's clip scale is written by adam_prepare's one thread (it saves the step a launch), so the
// clip path runs through it here, with an Adam state and skip flag of its own.
struct Clip {
  Kokkos::View<double*, zs::MemSpace> adam_state = zs::kernels::make_adam_state();
  zs::kernels::GradNormsScratch<zs::ExecSpace> scratch = zs::kernels::make_grad_norms_scratch(zs::ExecSpace());
  zs::DeviceScalar<int> skip{std::string("zs::test::skip")};

  void scale(const zs::Stream& stream, const zs::DeviceScalar<double>& norm, const zs::DeviceScalar<float>& scale,
             float limit) const {
    zs::kernels::adam_prepare(stream.exec(), adam_state, skip, norm, scale, limit, zs::kernels::AdamHyper{});
  }
  // norm → scale → grad ← scale · grad, the clip path as the step with auxiliaries runs it (the
  // budgeted sum with no auxiliary term is C51's gradient at its clip scale).
  void on_device(const zs::Stream& stream, const zs::DeviceFloats& grad, const zs::DeviceScalar<double>& norm,
                 const zs::DeviceScalar<float>& scale, float limit) const {
    zs::kernels::global_grad_norm(stream.exec(), zs::ConstDeviceFloats(grad), norm, scratch);
    this->scale(stream, norm, scale, limit);
    zs::kernels::budget_sum(stream.exec(), grad, zs::ConstDeviceFloats(grad), zs::DeviceScalar<const float>(scale), {});
  }
};

float device_clip_scale(double norm, float limit) {
  zs::Stream stream;
  auto n = device_double(norm);
  zs::DeviceScalar<float> scale("scale");
  Kokkos::deep_copy(scale, -1.f);  // poison: a scale is never negative
  Clip().scale(stream, n, scale, limit);
  stream.synchronize();
  float h = 0;
  Kokkos::deep_copy(h, scale);
  return h;
}

using zs::test::same_bits;

using zs::test::error_of;

}  // namespace

TEST(GradClip, ScaleMatchesReference) {
  for (double norm : {0.0, 1e-9, 0.5, 6.999999, 7.0, 7.000001, 10.0, 123.456, 1e30}) {
    for (float limit : {0.f, 0.7f, 7.f, 10.f}) {
      SCOPED_TRACE(testing::Message() << "norm " << norm << ", limit " << limit);
      const double ref = reference_clip(norm, limit);
      const float got = device_clip_scale(norm, limit);
      EXPECT_NEAR(got, ref, 1e-7 * ref + 1e-30);
      EXPECT_LE(got, 1.f);
      EXPECT_GE(got, 0.f);
    }
  }
  // A norm exactly at the limit is scaled just under 1 (torch's +1e-6), a smaller one not at all.
  EXPECT_LT(device_clip_scale(7.0, 7.f), 1.f);
  EXPECT_EQ(device_clip_scale(1.0, 7.f), 1.f);
  EXPECT_EQ(device_clip_scale(0.0, 7.f), 1.f);
}

TEST(GradClip, NonFiniteNormGivesZeroScale) {
  for (double bad : {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                     -std::numeric_limits<double>::infinity()}) {
    SCOPED_TRACE(testing::Message() << "norm " << bad);
    EXPECT_EQ(device_clip_scale(bad, 10.f), 0.f);
  }
}

TEST(GradClip, ClipsToTheLimitOnAwkwardSizes) {
  const std::size_t reference_size = zs::ParamLayout(zs::Config{}).size();
  zs::Stream stream;
  zs::DeviceScalar<double> norm("norm");
  zs::DeviceScalar<float> scale("scale");
  for (std::size_t n : {std::size_t{1}, std::size_t{2}, std::size_t{31}, std::size_t{33},
                        std::size_t{257}, std::size_t{1031}, std::size_t{65537}, reference_size}) {
    for (float gscale : {1e-4f, 1.f, 30.f}) {
      const auto seed = zs::test::fresh_seed();
      SCOPED_TRACE(testing::Message() << "n = " << n << ", grad scale " << gscale << ", seed " << seed);
      const auto g = zs::test::random_normal(n, seed, gscale);
      const float limit = 0.7f * 10.f;  // C51's share with all three auxiliaries on
      auto d = zs::test::to_device(g);
      Clip().on_device(stream, d, norm, scale, limit);
      stream.synchronize();
      const double ref_norm = reference_norm(g);
      const double s = reference_clip(ref_norm, limit);
      const auto got = zs::test::to_host(d);
      for (std::size_t i = 0; i < n; ++i) {
        const double ref = double(g[i]) * s;
        ASSERT_NEAR(got[i], ref, 1e-6 * std::fabs(ref) + 1e-37) << "at " << i;
      }
      const double after = reference_norm(got);
      if (ref_norm > limit) {
        EXPECT_NEAR(after, limit, 1e-5 * limit);
      } else {
        EXPECT_TRUE(same_bits(got, g)) << "an unclipped gradient must not be touched";
      }
    }
  }
}

// With no auxiliary on, C51 is clipped to the whole max_grad_norm; with all three at their
// default budgets, to 70 % of it.
TEST(GradClip, C51AloneGetsTheFullBudget) {
  const std::size_t n = zs::ParamLayout(zs::Config{}).size();
  const float max_grad_norm = zs::Config{}.max_grad_norm;
  zs::Stream stream;
  zs::DeviceScalar<double> norm("norm");
  zs::DeviceScalar<float> scale("scale");
  for (int active : {0, 3}) {
    SCOPED_TRACE(testing::Message() << active << " auxiliaries on");
    zs::Config c;
    c.iqn.on = c.cql.on = active == 3;
    c.ensemble.k = active == 3 ? 2 : 0;
    zs::DeviceFloats grad("grad", n);
    Kokkos::deep_copy(grad, 1.f);  // norm sqrt(n) ≈ 537, far over the limit
    Clip().on_device(stream, grad, norm, scale, zs::c51_budget(c) * max_grad_norm);
    zs::kernels::global_grad_norm(stream.exec(), zs::ConstDeviceFloats(grad), norm, Clip().scratch);
    stream.synchronize();
    double after = 0;
    Kokkos::deep_copy(after, norm);
    EXPECT_NEAR(after, active == 0 ? 10.0 : 7.0, 1e-5);
  }
}

TEST(GradClip, PoisonedGradientBecomesZeros) {
  for (float bad : {kNaN, kInf, -kInf}) {
    const auto seed = zs::test::fresh_seed();
    SCOPED_TRACE(testing::Message() << "bad " << bad << ", seed " << seed);
    auto g = zs::test::random_normal(4099, seed);
    g[seed % g.size()] = bad;
    zs::Stream stream;
    auto d = zs::test::to_device(g);
    zs::DeviceScalar<double> norm("norm");
    zs::DeviceScalar<float> scale("scale");
    Clip().on_device(stream, d, norm, scale, 10.f);
    stream.synchronize();
    for (float x : zs::test::to_host(d)) ASSERT_EQ(x, 0.f);
  }
}

TEST(GradClip, BadLimitsAreClearErrors) {
  zs::Stream stream;
  zs::DeviceScalar<double> norm("norm");
  zs::DeviceScalar<float> scale("scale");
  for (float bad : {-1.f, kNaN, kInf}) {
    SCOPED_TRACE(testing::Message() << "limit " << bad);
    const std::string msg = error_of([&] { Clip().scale(stream, norm, scale, bad); });
    EXPECT_NE(msg.find("adam_prepare: limit = "), std::string::npos) << msg;
  }
}

TEST(GradClip, GraphReplayWithFreshInputs) {
  const std::size_t n = 100003;
  zs::Stream stream;
  zs::DeviceFloats grad("grad", n);
  zs::DeviceScalar<double> norm("norm");
  zs::DeviceScalar<float> scale("scale");
  const float limit = 7.f;
  const Clip clip;
  auto step = [&] { clip.on_device(stream, grad, norm, scale, limit); };  // no allocation inside the capture
  step();  // sizes Kokkos' reduction scratch outside capture
  stream.synchronize();
  zs::Graph graph;
  graph.capture(stream, step);
  ASSERT_TRUE(graph.captured());
  auto hg = Kokkos::create_mirror_view(grad);
  for (int replay = 0; replay < 4; ++replay) {
    const auto seed = zs::test::fresh_seed();
    SCOPED_TRACE(testing::Message() << "replay " << replay << ", seed " << seed);
    // Alternate clipped and unclipped gradients.
    const auto g = zs::test::random_normal(n, seed, replay % 2 ? 1e-3f : 1.f);
    for (std::size_t i = 0; i < n; ++i) hg(i) = g[i];
    Kokkos::deep_copy(grad, hg);
    graph.replay(stream);
    stream.synchronize();
    const double s = reference_clip(reference_norm(g), limit);
    const auto got = zs::test::to_host(grad);
    for (std::size_t i = 0; i < n; ++i) {
      const double ref = g[i] * s;
      ASSERT_NEAR(got[i], ref, 1e-6 * std::fabs(ref) + 1e-30) << "at " << i;
    }
  }
}
