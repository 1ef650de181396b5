// The optimizer's two launches: adam_prepare (clip scale, t and bias corrections) and the fused
// Adam + Polyak pass, against a naive double reference: torch.optim.Adam on the gradient scaled
// by torch's clip coefficient, then target += τ·(online − target) with the updated online value.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "backends/graph.hpp"
#include "backends/stream.hpp"
#include "core/error.hpp"
#include "kernels/adam.hpp"
#include "core/param_layout.hpp"
#include "test_util.hpp"

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

using zs::test::reference_clip;
using zs::test::reference_norm;

// torch.optim.Adam (no weight decay, not amsgrad) on the clipped gradient, then the Polyak
// target update, naive and in double. It also tracks a magnitude per element (the same
// recurrences on |g|) to scale the float tolerance where m cancels towards zero.
struct ReferenceAdam {
  double beta1, beta2, eps, limit, tau;
  std::vector<double> p, m, v, m_mag, target;
  int t = 0;
  double lr_sum = 0;

  ReferenceAdam(const std::vector<float>& p0, const std::vector<float>& target0, const zs::kernels::AdamHyper& h,
                float limit_, float tau_)
      : beta1(h.beta1), beta2(h.beta2), eps(h.eps), limit(limit_), tau(tau_), p(p0.begin(), p0.end()),
        m(p0.size(), 0.0), v(p0.size(), 0.0), m_mag(p0.size(), 0.0), target(target0.begin(), target0.end()) {}

  void step(const std::vector<float>& grad, double norm, double lr) {
    ++t;
    lr_sum += lr;
    const double scale = reference_clip(norm, limit);
    const double bc1 = 1.0 - std::pow(beta1, t), bc2 = 1.0 - std::pow(beta2, t);
    const double step_size = lr / bc1;
    for (std::size_t i = 0; i < p.size(); ++i) {
      const double g = scale == 0.0 ? 0.0 : double(grad[i]) * scale;
      m[i] = beta1 * m[i] + (1.0 - beta1) * g;
      v[i] = beta2 * v[i] + (1.0 - beta2) * g * g;
      m_mag[i] = beta1 * m_mag[i] + (1.0 - beta1) * std::fabs(g);
      const double denom = std::sqrt(v[i]) / std::sqrt(bc2) + eps;
      p[i] -= step_size * m[i] / denom;
      target[i] += tau * (p[i] - target[i]);
    }
  }
};

// The device side: flat buffers and the per-step device scalars.
struct DeviceAdam {
  zs::DeviceFloats params, grads, m, v, target;
  Kokkos::View<double*, zs::MemSpace> state = zs::kernels::make_adam_state();
  zs::DeviceScalar<int> skip{std::string("skip")};
  zs::DeviceScalar<double> norm{std::string("norm")};
  zs::DeviceScalar<float> lr{std::string("lr")}, scale{std::string("scale")};
  zs::kernels::AdamHyper hyper;
  float limit, tau;
  zs::kernels::AdamWork work = zs::kernels::adam_default_work<zs::ExecSpace>();

  DeviceAdam(const std::vector<float>& p0, const std::vector<float>& target0, const zs::kernels::AdamHyper& h,
             float limit_, float tau_)
      : params(zs::test::to_device(p0, "params")), grads("grads", p0.size()), m("m", p0.size()),
        v("v", p0.size()), target(zs::test::to_device(target0, "target")), hyper(h), limit(limit_), tau(tau_) {}

  void enqueue(const zs::Stream& stream) const {
    zs::kernels::adam_prepare(stream.exec(), state, skip, norm, scale, limit, hyper);
    zs::kernels::adam_polyak_update(stream.exec(), params, grads, m, v, state, skip, lr, scale, hyper, target, tau,
                                    work);
  }

  void set(const std::vector<float>& g, float lr_value, double norm_value, int skip_value = 0) {
    Kokkos::deep_copy(grads, zs::test::to_device(g));
    Kokkos::deep_copy(lr, lr_value);
    Kokkos::deep_copy(norm, norm_value);
    Kokkos::deep_copy(skip, skip_value);
  }

  void step(zs::Stream& stream, const std::vector<float>& g, float lr_value, double norm_value,
            int skip_value = 0) {
    set(g, lr_value, norm_value, skip_value);
    enqueue(stream);
    stream.synchronize();
  }
};

void expect_matches(const DeviceAdam& dev, const ReferenceAdam& ref) {
  const auto p = zs::test::to_host(dev.params);
  const auto m = zs::test::to_host(dev.m);
  const auto v = zs::test::to_host(dev.v);
  const auto target = zs::test::to_host(dev.target);
  const auto state = zs::test::to_host(dev.state);
  ASSERT_EQ(state[zs::kernels::kAdamT], ref.t);
  EXPECT_DOUBLE_EQ(state[zs::kernels::kAdamBc1], 1.0 - std::pow(ref.beta1, ref.t));
  EXPECT_DOUBLE_EQ(state[zs::kernels::kAdamBc2], 1.0 - std::pow(ref.beta2, ref.t));
  for (std::size_t i = 0; i < p.size(); ++i) {
    ASSERT_NEAR(m[i], ref.m[i], 1e-5 * ref.m_mag[i] + 1e-37) << "m at " << i;
    ASSERT_NEAR(v[i], ref.v[i], 1e-5 * ref.v[i] + 1e-37) << "v at " << i;
    // The displacement is at most about lr per step: 1e-5 of that, plus float rounding of p.
    ASSERT_NEAR(p[i], ref.p[i], 1e-5 * ref.lr_sum + 1.2e-7 * ref.t * std::fabs(ref.p[i])) << "param at " << i;
    // A convex combination of p's and its own past values: their error bound, plus its rounding.
    ASSERT_NEAR(target[i], ref.target[i],
                1e-5 * ref.lr_sum + 1.2e-7 * ref.t * (std::fabs(ref.p[i]) + 2 * std::fabs(ref.target[i])))
        << "target at " << i;
  }
}

// The device buffers as they are, to check that a step changed nothing.
struct Snapshot {
  std::vector<float> params, m, v, target;
  std::vector<double> state;
  explicit Snapshot(const DeviceAdam& d)
      : params(zs::test::to_host(d.params)), m(zs::test::to_host(d.m)), v(zs::test::to_host(d.v)),
        target(zs::test::to_host(d.target)), state(zs::test::to_host(d.state)) {}
};

void expect_same(const Snapshot& a, const Snapshot& b) {
  EXPECT_TRUE(zs::test::same_bits(a.params, b.params));
  EXPECT_TRUE(zs::test::same_bits(a.m, b.m));
  EXPECT_TRUE(zs::test::same_bits(a.v, b.v));
  EXPECT_TRUE(zs::test::same_bits(a.target, b.target));
  EXPECT_TRUE(zs::test::same_bits(a.state, b.state));
}

using zs::test::same_bits;

using zs::test::error_of;

constexpr float kLimit = 10.f, kTau = 0.05f;

}  // namespace

TEST(Adam, MatchesTorchReferenceOverSeveralSteps) {
  const std::size_t reference_size = zs::ParamLayout(zs::Config{}).size();
  zs::Stream stream;
  // Both ways of sharing the elements among work items, on every backend.
  for (const auto work : {zs::kernels::AdamWork::runs, zs::kernels::AdamWork::strided})
  for (std::size_t n : {std::size_t{1}, std::size_t{33}, std::size_t{1031}, std::size_t{65537},
                        reference_size}) {
    const auto seed = zs::test::fresh_seed();
    SCOPED_TRACE(testing::Message() << "n = " << n << ", work " << static_cast<int>(work) << ", seed " << seed);
    const auto p0 = zs::test::random_normal(n, seed, 0.1f);
    const auto target0 = zs::test::random_normal(n, seed + 99, 0.1f);
    const zs::kernels::AdamHyper h{0.9f, 0.999f, 1e-8f};
    DeviceAdam dev(p0, target0, h, kLimit, kTau);
    dev.work = work;
    ReferenceAdam ref(p0, target0, h, kLimit, kTau);
    for (int step = 0; step < 5; ++step) {
      SCOPED_TRACE(testing::Message() << "step " << step + 1);
      // Fresh gradients of changing magnitude: their true norm, clipped on the large ones
      // (except for the smallest n), and one step with a norm far over the limit.
      const auto g = zs::test::random_normal(n, seed + 1 + step, step % 2 ? 10.f : 0.01f);
      const double norm = step == 2 ? 40.0 * kLimit : reference_norm(g);
      dev.step(stream, g, 1e-2f, norm);
      ref.step(g, norm, 1e-2f);
      expect_matches(dev, ref);
      if (HasFatalFailure()) return;
    }
  }
}

// Runs of contiguous elements (the host's default) and four elements a grid apart (a device's):
// the same arithmetic per element, so the same bits, with and without the target's move, at
// sizes that leave every kind of tail (1 to 3 elements past a multiple of four).
TEST(Adam, RunsAndStridedItemsGiveTheSameBits) {
  zs::Stream stream;
  for (const bool polyak : {true, false})
  for (std::size_t n : {std::size_t{1}, std::size_t{2}, std::size_t{3}, std::size_t{4}, std::size_t{5},
                        std::size_t{4099}, std::size_t{65538}}) {
    const auto seed = zs::test::fresh_seed();
    SCOPED_TRACE(testing::Message() << "n = " << n << ", polyak " << polyak << ", seed " << seed);
    const auto p0 = zs::test::random_normal(n, seed, 0.1f);
    const auto target0 = zs::test::random_normal(n, seed + 99, 0.1f);
    const zs::kernels::AdamHyper h{0.9f, 0.999f, 1e-8f};
    DeviceAdam runs(p0, target0, h, kLimit, kTau), strided(p0, target0, h, kLimit, kTau);
    runs.work = zs::kernels::AdamWork::runs;
    strided.work = zs::kernels::AdamWork::strided;
    for (int step = 0; step < 3; ++step) {
      const auto g = zs::test::random_normal(n, seed + 1 + step, step % 2 ? 10.f : 0.01f);
      for (DeviceAdam* d : {&runs, &strided}) {
        d->set(g, 1e-2f, reference_norm(g));
        zs::kernels::adam_prepare(stream.exec(), d->state, d->skip, d->norm, d->scale, d->limit, d->hyper);
        if (polyak)
          zs::kernels::adam_polyak_update(stream.exec(), d->params, d->grads, d->m, d->v, d->state, d->skip, d->lr,
                                          d->scale, d->hyper, d->target, d->tau, d->work);
        else
          zs::kernels::adam_update(stream.exec(), d->params, d->grads, d->m, d->v, d->state, d->skip, d->lr,
                                   d->scale, d->hyper, d->work);
      }
      stream.synchronize();
    }
    const Snapshot a(runs), b(strided);
    expect_same(a, b);
    // Every element was updated (none was left out of the items): its second moment, zero at the
    // start, holds its gradients' squares. (Its parameter is no proof: three Adam steps of about
    // ±lr each return one of 65,538 parameters to its start bit for bit in a few runs in a hundred.)
    for (std::size_t i = 0; i < n; ++i) ASSERT_GT(a.v[i], 0.f) << "element " << i;
    // The target moves only with polyak.
    EXPECT_EQ(same_bits(a.target, target0), !polyak);
  }
}

TEST(Adam, ClipScaleIsTorchsCoefficientWrittenOnSkippedStepsToo) {
  zs::Stream stream;
  const std::vector<float> one{0.5f};
  for (int skip : {0, 1}) {
    for (double norm : {0.0, 0.5, 9.999999, 10.0, 10.5, 1e30}) {
      SCOPED_TRACE(testing::Message() << "skip " << skip << ", norm " << norm);
      DeviceAdam dev(one, one, {}, kLimit, kTau);
      Kokkos::deep_copy(dev.scale, -1.f);  // poison: a scale is never negative
      dev.step(stream, one, 1e-3f, norm, skip);
      float got = 0;
      Kokkos::deep_copy(got, dev.scale);
      const double ref = reference_clip(norm, kLimit);
      EXPECT_NEAR(got, ref, 1e-7 * ref);
      // torch's + 1e-6: a norm exactly at the limit is scaled just under 1, a smaller one not at all.
      if (norm == 10.0) {
        EXPECT_LT(got, 1.f);
      } else if (norm < 10.0) {
        EXPECT_EQ(got, 1.f);
      }
    }
    for (double bad : {double(kNaN), double(kInf), -double(kInf)}) {
      DeviceAdam dev(one, one, {}, kLimit, kTau);
      dev.step(stream, one, 1e-3f, bad, skip);
      float got = -1;
      Kokkos::deep_copy(got, dev.scale);
      EXPECT_EQ(got, 0.f) << "norm " << bad;
    }
  }
}

TEST(Adam, BiasCorrectionAtTheFirstStep) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const std::size_t n = 257;
  const auto p0 = zs::test::random_normal(n, seed);
  const zs::kernels::AdamHyper h{0.8f, 0.99f, 1e-8f};
  zs::Stream stream;
  DeviceAdam dev(p0, p0, h, kLimit, kTau);
  auto g = zs::test::random_normal(n, seed + 1);
  g[0] = 0.f;  // 0 / (0 + eps) moves nothing
  const float lr = 1e-3f;
  dev.step(stream, g, lr, 0.0);  // unclipped
  const auto state = zs::test::to_host(dev.state);
  EXPECT_EQ(state[zs::kernels::kAdamT], 1.0);
  EXPECT_DOUBLE_EQ(state[zs::kernels::kAdamBc1], 1.0 - double(h.beta1));
  EXPECT_DOUBLE_EQ(state[zs::kernels::kAdamBc2], 1.0 - double(h.beta2));
  // At t = 1 the corrections undo the (1 − β) factors exactly: m̂ = g, v̂ = g², so each
  // parameter moves by lr·g / (|g| + eps), i.e. lr against the gradient's sign.
  const auto p = zs::test::to_host(dev.params);
  EXPECT_EQ(p[0], p0[0]);
  for (std::size_t i = 1; i < n; ++i) {
    const double ref = double(lr) * g[i] / (std::fabs(double(g[i])) + h.eps);
    ASSERT_NEAR(p0[i] - p[i], ref, 1e-5 * lr + 2e-7 * std::fabs(p0[i])) << "at " << i;
  }
}

TEST(Adam, SkippedStepLeavesNoTrace) {
  const std::size_t n = 65537;
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const auto p0 = zs::test::random_normal(n, seed, 0.1f);
  const auto target0 = zs::test::random_normal(n, seed + 99, 0.1f);
  const zs::kernels::AdamHyper h;
  zs::Stream stream;
  DeviceAdam skipped(p0, target0, h, kLimit, kTau), clean(p0, target0, h, kLimit, kTau);
  ReferenceAdam ref(p0, target0, h, kLimit, kTau);
  for (int step = 0; step < 3; ++step) {
    const auto g = zs::test::random_normal(n, seed + 1 + step);
    skipped.step(stream, g, 1e-3f, reference_norm(g));
    clean.step(stream, g, 1e-3f, reference_norm(g));
    ref.step(g, reference_norm(g), 1e-3f);
  }
  const Snapshot before(skipped);
  // The guard tripped: a poisoned gradient and norm, a different lr, and the skip flag, in
  // each of its non-zero forms.
  auto bad = zs::test::random_normal(n, seed + 100);
  bad[seed % n] = kNaN;
  bad[(seed + 1) % n] = kInf;
  for (int flag : {1, -1, 7}) {
    SCOPED_TRACE(testing::Message() << "skip " << flag);
    skipped.step(stream, bad, 5e-2f, kNaN, flag);
    expect_same(Snapshot(skipped), before);
    skipped.step(stream, zs::test::random_normal(n, seed + 200 + flag), 5e-2f, 3.0, flag);
    expect_same(Snapshot(skipped), before);
  }
  // The next clean step is exactly the step that follows had the skips never happened.
  const auto g = zs::test::random_normal(n, seed + 4);
  skipped.step(stream, g, 1e-3f, reference_norm(g));
  clean.step(stream, g, 1e-3f, reference_norm(g));
  ref.step(g, reference_norm(g), 1e-3f);
  expect_same(Snapshot(skipped), Snapshot(clean));
  expect_matches(skipped, ref);
}

TEST(Adam, ZeroClipScaleKeepsAPoisonedGradientOut) {
  // The guard's flag ignored (skip = 0) but the norm is NaN, so adam_prepare's clip scale is 0:
  // the step runs as a zero gradient, and no NaN reaches the parameters or the target.
  const std::size_t n = 1031;
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const auto p0 = zs::test::random_normal(n, seed, 0.1f);
  const auto target0 = zs::test::random_normal(n, seed + 99, 0.1f);
  const zs::kernels::AdamHyper h;
  zs::Stream stream;
  DeviceAdam dev(p0, target0, h, kLimit, kTau);
  ReferenceAdam ref(p0, target0, h, kLimit, kTau);
  const auto g = zs::test::random_normal(n, seed + 1);
  dev.step(stream, g, 1e-3f, reference_norm(g));
  ref.step(g, reference_norm(g), 1e-3f);
  auto bad = g;
  bad[0] = kNaN;
  bad[1] = -kInf;
  dev.step(stream, bad, 1e-3f, kNaN);
  ref.step(bad, kNaN, 1e-3f);
  for (float x : zs::test::to_host(dev.params)) ASSERT_TRUE(std::isfinite(x));
  for (float x : zs::test::to_host(dev.target)) ASSERT_TRUE(std::isfinite(x));
  expect_matches(dev, ref);
}

TEST(Adam, LearningRateIsReadFromTheDevice) {
  const std::size_t n = 1031;
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const auto p0 = zs::test::random_normal(n, seed, 0.1f);
  const auto target0 = zs::test::random_normal(n, seed + 99, 0.1f);
  const zs::kernels::AdamHyper h;
  zs::Stream stream;
  DeviceAdam dev(p0, target0, h, kLimit, kTau);
  ReferenceAdam ref(p0, target0, h, kLimit, kTau);
  const float lrs[] = {1e-2f, 3e-3f, 0.f, 2e-2f};
  for (int step = 0; step < 4; ++step) {
    SCOPED_TRACE(testing::Message() << "step " << step + 1 << ", lr " << lrs[step]);
    const auto g = zs::test::random_normal(n, seed + 1 + step);
    const auto before = zs::test::to_host(dev.params);
    dev.step(stream, g, lrs[step], reference_norm(g));
    ref.step(g, reference_norm(g), lrs[step]);
    expect_matches(dev, ref);
    if (lrs[step] == 0.f) {
      EXPECT_TRUE(same_bits(zs::test::to_host(dev.params), before));
    }
  }
}

TEST(Adam, TargetMovesTowardTheFreshlyUpdatedOnlineValue) {
  const std::size_t reference_size = zs::ParamLayout(zs::Config{}).size();
  zs::Stream stream;
  for (std::size_t n : {std::size_t{1}, std::size_t{31}, std::size_t{33}, std::size_t{1031},
                        std::size_t{65537}, reference_size}) {
    for (float tau : {0.005f, 0.3f, 0.999f}) {
      const auto seed = zs::test::fresh_seed();
      SCOPED_TRACE(testing::Message() << "n = " << n << ", tau " << tau << ", seed " << seed);
      const auto target0 = zs::test::random_normal(n, seed);
      const auto p0 = zs::test::random_normal(n, seed + 1, 2.f);
      DeviceAdam dev(p0, target0, {}, kLimit, tau);
      const auto g = zs::test::random_normal(n, seed + 2);
      dev.step(stream, g, 1e-2f, reference_norm(g));
      const auto online = zs::test::to_host(dev.params), got = zs::test::to_host(dev.target);
      for (std::size_t i = 0; i < n; ++i) {
        if (g[i] != 0.f) {  // float normals do hit 0 exactly
          ASSERT_NE(online[i], p0[i]) << "Adam moved nothing at " << i;
        }
        const double a = (1.0 - tau) * target0[i], b = tau * double(online[i]);
        ASSERT_NEAR(got[i], a + b, 1e-6 * (std::fabs(a) + std::fabs(b)) + 1e-37) << "at " << i;
      }
    }
  }
}

TEST(Adam, TauZeroKeepsTheTargetAndTauOneCopiesTheUpdatedOnlineExactly) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const std::size_t n = 4099;
  // Wide dynamic range: target + 1·(online − target) would round here, the weighted form not.
  const auto target0 = zs::test::random_normal(n, seed, 1e3f);
  const auto p0 = zs::test::random_normal(n, seed + 1, 1e-3f);
  const auto g = zs::test::random_normal(n, seed + 2);
  zs::Stream stream;
  DeviceAdam keep(p0, target0, {}, kLimit, 0.f), copy(p0, target0, {}, kLimit, 1.f);
  keep.step(stream, g, 1e-4f, reference_norm(g));
  copy.step(stream, g, 1e-4f, reference_norm(g));
  EXPECT_TRUE(same_bits(zs::test::to_host(keep.target), target0));
  EXPECT_FALSE(same_bits(zs::test::to_host(copy.params), p0));
  EXPECT_TRUE(same_bits(zs::test::to_host(copy.target), zs::test::to_host(copy.params)));
}

TEST(Adam, UpdateBeforeAnyPrepareWritesNothing) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const std::size_t n = 33;
  const auto p0 = zs::test::random_normal(n, seed);
  const auto target0 = zs::test::random_normal(n, seed + 99);
  zs::Stream stream;
  DeviceAdam dev(p0, target0, {}, kLimit, kTau);
  dev.set(zs::test::random_normal(n, seed + 1), 1e-3f, 1.0);
  Kokkos::deep_copy(dev.scale, 1.f);
  zs::kernels::adam_polyak_update(stream.exec(), dev.params, dev.grads, dev.m, dev.v, dev.state, dev.skip, dev.lr,
                                  dev.scale, dev.hyper, dev.target, dev.tau);
  stream.synchronize();
  EXPECT_TRUE(same_bits(zs::test::to_host(dev.params), p0));
  EXPECT_TRUE(same_bits(zs::test::to_host(dev.target), target0));
  for (float x : zs::test::to_host(dev.m)) ASSERT_EQ(x, 0.f);
}

TEST(Adam, GraphReplayWithFreshGradientsNormsAndLearningRates) {
  const std::size_t n = 100003;
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const auto p0 = zs::test::random_normal(n, seed, 0.1f);
  const auto target0 = zs::test::random_normal(n, seed + 99, 0.1f);
  const zs::kernels::AdamHyper h;
  zs::Stream stream;
  DeviceAdam dev(p0, target0, h, kLimit, kTau);
  ReferenceAdam ref(p0, target0, h, kLimit, kTau);
  auto g = zs::test::random_normal(n, seed + 1);
  dev.set(g, 1e-3f, reference_norm(g));
  dev.enqueue(stream);  // the direct run before capture
  stream.synchronize();
  ref.step(g, reference_norm(g), 1e-3f);
  zs::Graph graph;
  graph.capture(stream, [&] { dev.enqueue(stream); });
  ASSERT_TRUE(graph.captured());
  for (int replay = 0; replay < 5; ++replay) {
    SCOPED_TRACE(testing::Message() << "replay " << replay);
    g = zs::test::random_normal(n, seed + 2 + replay, replay == 1 ? 1.f : 1e-2f);  // clipped on replay 1
    const float lr = 1e-3f * (replay + 1);
    const int skip = replay == 3 ? 1 : 0;
    const Snapshot before(dev);
    dev.set(g, lr, reference_norm(g), skip);
    graph.replay(stream);
    stream.synchronize();
    if (skip) {
      expect_same(Snapshot(dev), before);
    } else {
      ref.step(g, reference_norm(g), lr);
    }
    expect_matches(dev, ref);
    if (HasFatalFailure()) return;
  }
}

TEST(Adam, BadShapesStateHyperparametersLimitAndTauAreClearErrors) {
  zs::Stream stream;
  zs::DeviceFloats a("a", 10), b("b", 11), empty("empty", 0);
  auto state = zs::kernels::make_adam_state();
  Kokkos::View<double*, zs::MemSpace> short_state("short", 2);
  zs::DeviceScalar<int> skip("skip");
  zs::DeviceScalar<double> norm("norm");
  zs::DeviceScalar<float> lr("lr"), scale("scale");
  const zs::kernels::AdamHyper h;
  const auto update = [&](zs::DeviceFloats p, zs::DeviceFloats g, zs::DeviceFloats m, zs::DeviceFloats v,
                          zs::DeviceFloats t, const zs::kernels::AdamHyper& hyper, float tau) {
    return error_of([&] {
      zs::kernels::adam_polyak_update(stream.exec(), p, g, m, v, state, skip, lr, scale, hyper, t, tau);
    });
  };
  std::string msg = update(a, a, a, b, a, h, kTau);
  EXPECT_NE(msg.find("params has 10"), std::string::npos) << msg;
  EXPECT_NE(msg.find("v has 11"), std::string::npos) << msg;
  msg = update(a, b, a, a, a, h, kTau);
  EXPECT_NE(msg.find("grads has 11"), std::string::npos) << msg;
  msg = update(a, a, a, a, b, h, kTau);
  EXPECT_NE(msg.find("target has 11"), std::string::npos) << msg;
  msg = update(empty, empty, empty, empty, empty, h, kTau);
  EXPECT_NE(msg.find("empty"), std::string::npos) << msg;
  for (float tau : {-0.01f, 1.01f, kNaN, kInf}) {
    msg = update(a, a, a, a, a, h, tau);
    EXPECT_NE(msg.find("adam_polyak_update: tau = "), std::string::npos) << msg;
  }
  msg = error_of([&] { zs::kernels::adam_prepare(stream.exec(), short_state, skip, norm, scale, kLimit, h); });
  EXPECT_NE(msg.find("has 2 slots; expected 3"), std::string::npos) << msg;
  for (float limit : {-1.f, kNaN, kInf}) {
    msg = error_of([&] { zs::kernels::adam_prepare(stream.exec(), state, skip, norm, scale, limit, h); });
    EXPECT_NE(msg.find("adam_prepare: limit = "), std::string::npos) << msg;
  }
  for (auto bad : {zs::kernels::AdamHyper{1.f, 0.999f, 1e-8f}, zs::kernels::AdamHyper{-0.1f, 0.999f, 1e-8f},
                   zs::kernels::AdamHyper{0.9f, kNaN, 1e-8f}, zs::kernels::AdamHyper{0.9f, 0.999f, 0.f}}) {
    msg = error_of([&] { zs::kernels::adam_prepare(stream.exec(), state, skip, norm, scale, kLimit, bad); });
    EXPECT_NE(msg.find("is invalid"), std::string::npos) << msg;
    msg = update(a, a, a, a, a, bad, kTau);
    EXPECT_NE(msg.find("is invalid"), std::string::npos) << msg;
  }
}
