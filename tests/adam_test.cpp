#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "backends/graph.hpp"
#include "backends/stream.hpp"
#include "error.hpp"
#include "kernels/adam.hpp"
#include "param_layout.hpp"
#include "test_util.hpp"

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// torch.optim.Adam (no weight decay, not amsgrad), naive and in double. It also tracks a
// magnitude per element (the same recurrences on |g|) to scale the float tolerance where m
// cancels towards zero.
struct ReferenceAdam {
  double beta1, beta2, eps;
  std::vector<double> p, m, v, m_mag;
  int t = 0;
  double lr_sum = 0;

  ReferenceAdam(const std::vector<float>& p0, const zs::kernels::AdamHyper& h)
      : beta1(h.beta1), beta2(h.beta2), eps(h.eps), p(p0.begin(), p0.end()), m(p0.size(), 0.0),
        v(p0.size(), 0.0), m_mag(p0.size(), 0.0) {}

  void step(const std::vector<float>& grad, double grad_scale, double lr) {
    ++t;
    lr_sum += lr;
    const double bc1 = 1.0 - std::pow(beta1, t), bc2 = 1.0 - std::pow(beta2, t);
    const double step_size = lr / bc1;
    for (std::size_t i = 0; i < p.size(); ++i) {
      const double g = double(grad[i]) * grad_scale;
      m[i] = beta1 * m[i] + (1.0 - beta1) * g;
      v[i] = beta2 * v[i] + (1.0 - beta2) * g * g;
      m_mag[i] = beta1 * m_mag[i] + (1.0 - beta1) * std::fabs(g);
      const double denom = std::sqrt(v[i]) / std::sqrt(bc2) + eps;
      p[i] -= step_size * m[i] / denom;
    }
  }
};

// The device side: flat buffers and the per-step device scalars.
struct DeviceAdam {
  zs::DeviceFloats params, grads, m, v;
  Kokkos::View<double*, zs::MemSpace> state = zs::kernels::make_adam_state();
  zs::DeviceScalar<int> skip{"skip"};
  zs::DeviceScalar<float> lr{"lr"}, grad_scale{"grad_scale"};
  zs::kernels::AdamHyper hyper;

  DeviceAdam(const std::vector<float>& p0, const zs::kernels::AdamHyper& h)
      : params(zs::test::to_device(p0, "params")), grads("grads", p0.size()), m("m", p0.size()),
        v("v", p0.size()), hyper(h) {
    Kokkos::deep_copy(grad_scale, 1.f);
  }

  void enqueue(const zs::Stream& stream) const {
    zs::kernels::adam_prepare(stream.exec(), state, skip, hyper);
    zs::kernels::adam_update(stream.exec(), params, grads, m, v, state, skip, lr, grad_scale,
                             hyper);
  }

  void set(const std::vector<float>& g, float lr_value, float scale = 1.f, int skip_value = 0) {
    Kokkos::deep_copy(grads, zs::test::to_device(g));
    Kokkos::deep_copy(lr, lr_value);
    Kokkos::deep_copy(grad_scale, scale);
    Kokkos::deep_copy(skip, skip_value);
  }

  void step(zs::Stream& stream, const std::vector<float>& g, float lr_value, float scale = 1.f,
            int skip_value = 0) {
    set(g, lr_value, scale, skip_value);
    enqueue(stream);
    stream.synchronize();
  }
};

void expect_matches(const DeviceAdam& dev, const ReferenceAdam& ref) {
  const auto p = zs::test::to_host(dev.params);
  const auto m = zs::test::to_host(dev.m);
  const auto v = zs::test::to_host(dev.v);
  const auto state = zs::test::to_host(dev.state);
  ASSERT_EQ(state[zs::kernels::kAdamT], ref.t);
  EXPECT_DOUBLE_EQ(state[zs::kernels::kAdamBc1], 1.0 - std::pow(ref.beta1, ref.t));
  EXPECT_DOUBLE_EQ(state[zs::kernels::kAdamBc2], 1.0 - std::pow(ref.beta2, ref.t));
  for (std::size_t i = 0; i < p.size(); ++i) {
    ASSERT_NEAR(m[i], ref.m[i], 1e-5 * ref.m_mag[i] + 1e-37) << "m at " << i;
    ASSERT_NEAR(v[i], ref.v[i], 1e-5 * ref.v[i] + 1e-37) << "v at " << i;
    // The displacement is at most about lr per step: 1e-5 of that, plus float rounding of p.
    ASSERT_NEAR(p[i], ref.p[i], 1e-5 * ref.lr_sum + 1.2e-7 * ref.t * std::fabs(ref.p[i]))
        << "param at " << i;
  }
}

using zs::test::same_bits;

using zs::test::error_of;

}  // namespace

TEST(Adam, MatchesTorchReferenceOverSeveralSteps) {
  const std::size_t reference_size = zs::ParamLayout(zs::Config{}).size();
  zs::Stream stream;
  for (std::size_t n : {std::size_t{1}, std::size_t{33}, std::size_t{1031}, std::size_t{65537},
                        reference_size}) {
    const auto seed = zs::test::fresh_seed();
    SCOPED_TRACE(testing::Message() << "n = " << n << ", seed " << seed);
    const auto p0 = zs::test::random_normal(n, seed, 0.1f);
    const zs::kernels::AdamHyper h{0.9f, 0.999f, 1e-8f};
    DeviceAdam dev(p0, h);
    ReferenceAdam ref(p0, h);
    for (int step = 0; step < 5; ++step) {
      SCOPED_TRACE(testing::Message() << "step " << step + 1);
      // Fresh gradients of changing magnitude, and a clip scale below 1 on some steps.
      const auto g = zs::test::random_normal(n, seed + 1 + step, step % 2 ? 10.f : 0.01f);
      const float scale = step == 2 ? 0.25f : 1.f;
      dev.step(stream, g, 1e-2f, scale);
      ref.step(g, scale, 1e-2f);
      expect_matches(dev, ref);
      if (HasFatalFailure()) return;
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
  DeviceAdam dev(p0, h);
  auto g = zs::test::random_normal(n, seed + 1);
  g[0] = 0.f;  // 0 / (0 + eps) moves nothing
  const float lr = 1e-3f;
  dev.step(stream, g, lr);
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
  const zs::kernels::AdamHyper h;
  zs::Stream stream;
  DeviceAdam skipped(p0, h), clean(p0, h);
  ReferenceAdam ref(p0, h);
  for (int step = 0; step < 3; ++step) {
    const auto g = zs::test::random_normal(n, seed + 1 + step);
    skipped.step(stream, g, 1e-3f);
    clean.step(stream, g, 1e-3f);
    ref.step(g, 1.0, 1e-3f);
  }
  const auto p = zs::test::to_host(skipped.params), m = zs::test::to_host(skipped.m),
             v = zs::test::to_host(skipped.v);
  const auto state = zs::test::to_host(skipped.state);
  // The guard tripped: a poisoned gradient, a different lr and clip scale, and the skip flag.
  auto bad = zs::test::random_normal(n, seed + 100);
  bad[seed % n] = kNaN;
  bad[(seed + 1) % n] = kInf;
  skipped.step(stream, bad, 5e-2f, 0.5f, /*skip=*/1);
  EXPECT_TRUE(same_bits(zs::test::to_host(skipped.params), p));
  EXPECT_TRUE(same_bits(zs::test::to_host(skipped.m), m));
  EXPECT_TRUE(same_bits(zs::test::to_host(skipped.v), v));
  EXPECT_TRUE(same_bits(zs::test::to_host(skipped.state), state));
  // The next clean step is exactly the step that follows had the skip never happened.
  const auto g = zs::test::random_normal(n, seed + 4);
  skipped.step(stream, g, 1e-3f);
  clean.step(stream, g, 1e-3f);
  ref.step(g, 1.0, 1e-3f);
  EXPECT_TRUE(same_bits(zs::test::to_host(skipped.params), zs::test::to_host(clean.params)));
  EXPECT_TRUE(same_bits(zs::test::to_host(skipped.m), zs::test::to_host(clean.m)));
  EXPECT_TRUE(same_bits(zs::test::to_host(skipped.v), zs::test::to_host(clean.v)));
  EXPECT_TRUE(same_bits(zs::test::to_host(skipped.state), zs::test::to_host(clean.state)));
  expect_matches(skipped, ref);
}

TEST(Adam, ZeroClipScaleKeepsAPoisonedGradientOut) {
  // The guard's flag ignored (skip = 0) but the clip scale is 0 for a NaN norm: the step runs
  // as a zero gradient, and no NaN reaches the parameters.
  const std::size_t n = 1031;
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const auto p0 = zs::test::random_normal(n, seed, 0.1f);
  const zs::kernels::AdamHyper h;
  zs::Stream stream;
  DeviceAdam dev(p0, h);
  ReferenceAdam ref(p0, h);
  const auto g = zs::test::random_normal(n, seed + 1);
  dev.step(stream, g, 1e-3f);
  ref.step(g, 1.0, 1e-3f);
  auto bad = g;
  bad[0] = kNaN;
  bad[1] = -kInf;
  dev.step(stream, bad, 1e-3f, 0.f);
  ref.step(std::vector<float>(n, 0.f), 1.0, 1e-3f);
  for (float x : zs::test::to_host(dev.params)) ASSERT_TRUE(std::isfinite(x));
  expect_matches(dev, ref);
}

TEST(Adam, LearningRateIsReadFromTheDevice) {
  const std::size_t n = 1031;
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const auto p0 = zs::test::random_normal(n, seed, 0.1f);
  const zs::kernels::AdamHyper h;
  zs::Stream stream;
  DeviceAdam dev(p0, h);
  ReferenceAdam ref(p0, h);
  const float lrs[] = {1e-2f, 3e-3f, 0.f, 2e-2f};
  for (int step = 0; step < 4; ++step) {
    SCOPED_TRACE(testing::Message() << "step " << step + 1 << ", lr " << lrs[step]);
    const auto g = zs::test::random_normal(n, seed + 1 + step);
    const auto before = zs::test::to_host(dev.params);
    dev.step(stream, g, lrs[step]);
    ref.step(g, 1.0, lrs[step]);
    expect_matches(dev, ref);
    if (lrs[step] == 0.f) {
      EXPECT_TRUE(same_bits(zs::test::to_host(dev.params), before));
    }
  }
}

TEST(Adam, UpdateBeforeAnyPrepareWritesNothing) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const std::size_t n = 33;
  const auto p0 = zs::test::random_normal(n, seed);
  zs::Stream stream;
  DeviceAdam dev(p0, {});
  dev.set(zs::test::random_normal(n, seed + 1), 1e-3f);
  zs::kernels::adam_update(stream.exec(), dev.params, dev.grads, dev.m, dev.v, dev.state, dev.skip,
                           dev.lr, dev.grad_scale, dev.hyper);
  stream.synchronize();
  EXPECT_TRUE(same_bits(zs::test::to_host(dev.params), p0));
  for (float x : zs::test::to_host(dev.m)) ASSERT_EQ(x, 0.f);
}

TEST(Adam, GraphReplayWithFreshGradientsAndLearningRates) {
  const std::size_t n = 100003;
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const auto p0 = zs::test::random_normal(n, seed, 0.1f);
  const zs::kernels::AdamHyper h;
  zs::Stream stream;
  DeviceAdam dev(p0, h);
  ReferenceAdam ref(p0, h);
  auto g = zs::test::random_normal(n, seed + 1);
  dev.set(g, 1e-3f);
  dev.enqueue(stream);  // the direct run before capture
  stream.synchronize();
  ref.step(g, 1.0, 1e-3f);
  zs::Graph graph;
  graph.capture(stream, [&] { dev.enqueue(stream); });
  ASSERT_TRUE(graph.captured());
  for (int replay = 0; replay < 5; ++replay) {
    SCOPED_TRACE(testing::Message() << "replay " << replay);
    g = zs::test::random_normal(n, seed + 2 + replay);
    const float lr = 1e-3f * (replay + 1);
    const float scale = replay == 1 ? 0.5f : 1.f;
    const int skip = replay == 3 ? 1 : 0;
    dev.set(g, lr, scale, skip);
    graph.replay(stream);
    stream.synchronize();
    if (!skip) ref.step(g, scale, lr);
    expect_matches(dev, ref);
    if (HasFatalFailure()) return;
  }
}

TEST(Adam, BadShapesStateAndHyperparametersAreClearErrors) {
  zs::Stream stream;
  zs::DeviceFloats a("a", 10), b("b", 11), empty("empty", 0);
  auto state = zs::kernels::make_adam_state();
  Kokkos::View<double*, zs::MemSpace> short_state("short", 2);
  zs::DeviceScalar<int> skip("skip");
  zs::DeviceScalar<float> lr("lr"), scale("scale");
  const zs::kernels::AdamHyper h;
  std::string msg = error_of([&] {
    zs::kernels::adam_update(stream.exec(), a, a, a, b, state, skip, lr, scale, h);
  });
  EXPECT_NE(msg.find("params has 10"), std::string::npos) << msg;
  EXPECT_NE(msg.find("v has 11"), std::string::npos) << msg;
  msg = error_of([&] {
    zs::kernels::adam_update(stream.exec(), a, b, a, a, state, skip, lr, scale, h);
  });
  EXPECT_NE(msg.find("grads has 11"), std::string::npos) << msg;
  msg = error_of([&] {
    zs::kernels::adam_update(stream.exec(), empty, empty, empty, empty, state, skip, lr, scale, h);
  });
  EXPECT_NE(msg.find("empty"), std::string::npos) << msg;
  msg = error_of([&] { zs::kernels::adam_prepare(stream.exec(), short_state, skip, h); });
  EXPECT_NE(msg.find("has 2 slots; expected 3"), std::string::npos) << msg;
  for (auto bad : {zs::kernels::AdamHyper{1.f, 0.999f, 1e-8f}, zs::kernels::AdamHyper{-0.1f, 0.999f, 1e-8f},
                   zs::kernels::AdamHyper{0.9f, kNaN, 1e-8f}, zs::kernels::AdamHyper{0.9f, 0.999f, 0.f}}) {
    msg = error_of([&] { zs::kernels::adam_prepare(stream.exec(), state, skip, bad); });
    EXPECT_NE(msg.find("is invalid"), std::string::npos) << msg;
    msg = error_of([&] {
      zs::kernels::adam_update(stream.exec(), a, a, a, a, state, skip, lr, scale, bad);
    });
    EXPECT_NE(msg.find("is invalid"), std::string::npos) << msg;
  }
}
