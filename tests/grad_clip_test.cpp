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
#include "losses/grad_budget.hpp"
#include "kernels/adam.hpp"
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
  zs::DeviceScalar<int> skip{std::string("zs::test::skip")};

  void scale(const zs::Stream& stream, const zs::DeviceScalar<double>& norm, const zs::DeviceScalar<float>& scale,
             float limit) const {
    zs::kernels::adam_prepare(stream.exec(), adam_state, skip, norm, scale, limit, zs::kernels::AdamHyper{});
  }
  // norm → scale → grad *= scale, the clip path as the step runs it.
  void on_device(const zs::Stream& stream, const zs::DeviceFloats& grad, const zs::DeviceScalar<double>& norm,
                 const zs::DeviceScalar<float>& scale, float limit) const {
    zs::kernels::global_grad_norm(stream.exec(), zs::ConstDeviceFloats(grad), norm);
    this->scale(stream, norm, scale, limit);
    zs::kernels::scale_in_place(stream.exec(), grad, scale);
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

// Seed 000 Task 5: with no auxiliary on, C51 is clipped to the whole max_grad_norm.
TEST(GradClip, C51AloneGetsTheFullBudget) {
  const std::size_t n = zs::ParamLayout(zs::Config{}).size();
  const float max_grad_norm = zs::Config{}.max_grad_norm;
  zs::Stream stream;
  zs::DeviceScalar<double> norm("norm");
  zs::DeviceScalar<float> scale("scale");
  for (int active : {0, 3}) {
    SCOPED_TRACE(testing::Message() << active << " auxiliaries on");
    zs::GradBudget budget;
    budget.iqn_on = budget.ensemble_on = budget.cql_on = active == 3;
    budget.validate();
    zs::DeviceFloats grad("grad", n);
    Kokkos::deep_copy(grad, 1.f);  // norm sqrt(n) ≈ 537, far over the limit
    Clip().on_device(stream, grad, norm, scale, budget.c51_fraction() * max_grad_norm);
    zs::kernels::global_grad_norm(stream.exec(), zs::ConstDeviceFloats(grad), norm);
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

TEST(GradClip, ScaleInPlaceOneIsUntouchedAndZeroClearsNaN) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  auto g = zs::test::random_normal(1031, seed);
  g[3] = kNaN;
  g[5] = kInf;
  g[7] = -0.f;
  zs::Stream stream;
  zs::DeviceScalar<float> scale("scale");
  auto d = zs::test::to_device(g);
  Kokkos::deep_copy(scale, 1.f);
  zs::kernels::scale_in_place(stream.exec(), d, scale);
  stream.synchronize();
  EXPECT_TRUE(same_bits(zs::test::to_host(d), g));
  Kokkos::deep_copy(scale, 0.f);
  zs::kernels::scale_in_place(stream.exec(), d, scale);
  stream.synchronize();
  for (float x : zs::test::to_host(d)) ASSERT_EQ(x, 0.f);
}

TEST(GradClip, ClippedSaxpyMatchesReferenceOnASubrange) {
  // The auxiliary adds into the trunk part of the flat buffer only.
  const zs::ParamLayout layout(zs::Config{});
  const auto& after_trunk = layout.layer("value.0");
  const std::size_t total = layout.size(), trunk = after_trunk.weight_offset;
  ASSERT_GT(trunk, 0u);
  ASSERT_LT(trunk, total);
  zs::Stream stream;
  zs::DeviceScalar<double> aux_norm("aux_norm");
  for (std::size_t offset : {std::size_t{0}, std::size_t{7}}) {
    for (std::size_t n : {std::size_t{1}, std::size_t{33}, std::size_t{1031}, trunk - 7}) {
      for (float aux_scale : {1e-3f, 1.f, 100.f}) {
        const auto seed = zs::test::fresh_seed();
        SCOPED_TRACE(testing::Message() << "offset " << offset << ", n " << n << ", aux scale "
                                        << aux_scale << ", seed " << seed);
        const auto base = zs::test::random_normal(total, seed);
        const auto aux = zs::test::random_normal(n, seed + 1, aux_scale);
        const float limit = 0.1f * 10.f;  // an auxiliary's default budget
        auto dst = zs::test::to_device(base);
        auto daux = zs::test::to_device(aux);
        auto range = Kokkos::subview(dst, std::make_pair(offset, offset + n));
        zs::kernels::global_grad_norm(stream.exec(), zs::ConstDeviceFloats(daux), aux_norm);
        zs::kernels::clipped_saxpy(stream.exec(), range, daux, aux_norm, limit);
        stream.synchronize();
        const double s = reference_clip(reference_norm(aux), limit);
        const auto got = zs::test::to_host(dst);
        for (std::size_t i = 0; i < total; ++i) {
          if (i < offset || i >= offset + n) {
            ASSERT_EQ(got[i], base[i]) << "outside the subrange, at " << i;
            continue;
          }
          const double add = s * aux[i - offset];
          const double ref = base[i] + add;
          ASSERT_NEAR(got[i], ref, 1e-6 * (std::fabs(base[i]) + std::fabs(add))) << "at " << i;
        }
      }
    }
  }
}

TEST(GradClip, ClippedSaxpyAddsNothingForAPoisonedAuxiliary) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const std::size_t n = 4099;
  const auto base = zs::test::random_normal(n, seed);
  zs::Stream stream;
  zs::DeviceScalar<double> aux_norm("aux_norm");
  for (float bad : {kNaN, kInf, -kInf}) {
    SCOPED_TRACE(testing::Message() << "bad " << bad);
    auto aux = zs::test::random_normal(n, seed + 2);
    aux[seed % n] = bad;
    auto dst = zs::test::to_device(base);
    auto daux = zs::test::to_device(aux);
    zs::kernels::global_grad_norm(stream.exec(), zs::ConstDeviceFloats(daux), aux_norm);
    zs::kernels::clipped_saxpy(stream.exec(), dst, daux, aux_norm, 1.f);
    stream.synchronize();
    EXPECT_TRUE(same_bits(zs::test::to_host(dst), base));
  }
  // A zero budget adds nothing either, even NaN × 0.
  auto aux = zs::test::random_normal(n, seed + 3);
  auto dst = zs::test::to_device(base);
  auto daux = zs::test::to_device(aux);
  zs::kernels::global_grad_norm(stream.exec(), zs::ConstDeviceFloats(daux), aux_norm);
  zs::kernels::clipped_saxpy(stream.exec(), dst, daux, aux_norm, 0.f);
  stream.synchronize();
  EXPECT_TRUE(same_bits(zs::test::to_host(dst), base));
}

TEST(GradClip, BadShapesAndLimitsAreClearErrors) {
  zs::Stream stream;
  zs::DeviceFloats a("a", 10), b("b", 11), empty("empty", 0);
  zs::DeviceScalar<double> norm("norm");
  zs::DeviceScalar<float> scale("scale");
  std::string msg = error_of([&] { zs::kernels::clipped_saxpy(stream.exec(), a, b, norm, 1.f); });
  EXPECT_NE(msg.find("dst has 10"), std::string::npos) << msg;
  EXPECT_NE(msg.find("aux has 11"), std::string::npos) << msg;
  msg = error_of([&] { zs::kernels::clipped_saxpy(stream.exec(), empty, empty, norm, 1.f); });
  EXPECT_NE(msg.find("empty"), std::string::npos) << msg;
  msg = error_of([&] { zs::kernels::scale_in_place(stream.exec(), empty, scale); });
  EXPECT_NE(msg.find("empty"), std::string::npos) << msg;
  for (float bad : {-1.f, kNaN, kInf}) {
    SCOPED_TRACE(testing::Message() << "limit " << bad);
    msg = error_of([&] { Clip().scale(stream, norm, scale, bad); });
    EXPECT_NE(msg.find("adam_prepare: limit = "), std::string::npos) << msg;
    msg = error_of([&] { zs::kernels::clipped_saxpy(stream.exec(), a, a, norm, bad); });
    EXPECT_NE(msg.find("clipped_saxpy: limit = "), std::string::npos) << msg;
  }
}

TEST(GradClip, GraphReplayWithFreshInputs) {
  const std::size_t n = 100003, aux_n = 20011;
  zs::Stream stream;
  zs::DeviceFloats grad("grad", n), aux("aux", aux_n);
  zs::DeviceScalar<double> norm("norm"), aux_norm("aux_norm");
  zs::DeviceScalar<float> scale("scale");
  const float limit = 7.f, aux_limit = 1.f;
  auto trunk = Kokkos::subview(grad, std::make_pair(std::size_t{5}, std::size_t{5} + aux_n));
  const Clip clip;
  auto step = [&] {
    zs::kernels::global_grad_norm(stream.exec(), zs::ConstDeviceFloats(aux), aux_norm);
    zs::kernels::clipped_saxpy(stream.exec(), trunk, aux, aux_norm, aux_limit);
    clip.on_device(stream, grad, norm, scale, limit);  // no allocation inside the capture
  };
  step();  // sizes Kokkos' reduction scratch outside capture
  stream.synchronize();
  zs::Graph graph;
  graph.capture(stream, step);
  ASSERT_TRUE(graph.captured());
  auto hg = Kokkos::create_mirror_view(grad);
  auto ha = Kokkos::create_mirror_view(aux);
  for (int replay = 0; replay < 4; ++replay) {
    const auto seed = zs::test::fresh_seed();
    SCOPED_TRACE(testing::Message() << "replay " << replay << ", seed " << seed);
    // Alternate clipped and unclipped main gradients, always a clipped auxiliary.
    const auto g = zs::test::random_normal(n, seed, replay % 2 ? 1e-3f : 1.f);
    const auto a = zs::test::random_normal(aux_n, seed + 1, 0.5f);
    for (std::size_t i = 0; i < n; ++i) hg(i) = g[i];
    for (std::size_t i = 0; i < aux_n; ++i) ha(i) = a[i];
    Kokkos::deep_copy(grad, hg);
    Kokkos::deep_copy(aux, ha);
    graph.replay(stream);
    stream.synchronize();
    // Reference: the saxpy first, then the clip of the sum.
    const double sa = reference_clip(reference_norm(a), aux_limit);
    std::vector<double> sum(n);
    double sq = 0;
    for (std::size_t i = 0; i < n; ++i) {
      sum[i] = g[i] + (i >= 5 && i < 5 + aux_n ? sa * a[i - 5] : 0.0);
      sq += sum[i] * sum[i];
    }
    const double s = reference_clip(std::sqrt(sq), limit);
    const auto got = zs::test::to_host(grad);
    for (std::size_t i = 0; i < n; ++i) {
      const double ref = sum[i] * s;
      ASSERT_NEAR(got[i], ref, 1e-5 * (std::fabs(g[i]) + std::fabs(sum[i] - g[i])) * s + 1e-30)
          << "at " << i;
    }
  }
}
