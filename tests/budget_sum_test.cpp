// The auxiliaries' tail as the trainer runs it: every gradient's norm in one launch
// (grad_norms) and the budgeted sum in one pass (budget_sum), against naive double loops; the sum
// as Adam's gradient source (TrainerOptions::budget_in_adam) against the sum's launch, then Adam's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "backends/graph.hpp"
#include "backends/stream.hpp"
#include "core/error.hpp"
#include "kernels/adam.hpp"
#include "kernels/budget_sum.hpp"
#include "kernels/grad_norm.hpp"
#include "test_util.hpp"

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

using zs::test::reference_clip;
using zs::test::reference_norm;

struct Buffers {
  std::vector<std::vector<float>> host;
  std::vector<zs::DeviceFloats> dev;
  std::vector<zs::DeviceScalar<double>> norms;
  zs::kernels::GradNormsScratch<zs::ExecSpace> scratch;

  Buffers(const zs::Stream& stream, std::size_t count, std::size_t n, std::uint64_t seed)
      : scratch(zs::kernels::make_grad_norms_scratch(stream.exec())) {
    for (std::size_t b = 0; b < count; ++b) {
      host.push_back(zs::test::random_normal(n, seed + b, b == 2 ? 1e3f : 1.f));
      dev.push_back(zs::test::to_device(host.back()));
      norms.emplace_back("zs::test::norm");
      Kokkos::deep_copy(norms.back(), -1.0);  // poison: a norm is never negative
    }
  }
  void enqueue(const zs::Stream& stream) const {
    std::vector<zs::ConstDeviceFloats> g(dev.begin(), dev.end());
    zs::kernels::grad_norms(stream.exec(), g, norms, scratch);
  }
  double norm(std::size_t b) const {
    double h = 0;
    Kokkos::deep_copy(h, norms[b]);
    return h;
  }
};

}  // namespace

TEST(Budget, NormsOfSeveralBuffersInOneLaunchMatchDoubleReference) {
  for (std::size_t count = 1; count <= std::size_t(zs::kernels::kMaxTerms); ++count) {
    for (std::size_t n : {std::size_t{1}, std::size_t{33}, std::size_t{4099}, std::size_t{300007}}) {
      const auto seed = zs::test::fresh_seed();
      SCOPED_TRACE(testing::Message() << count << " buffers of " << n << ", seed " << seed);
      zs::Stream stream;
      Buffers bufs(stream, count, n, seed);
      bufs.enqueue(stream);
      stream.synchronize();
      std::vector<double> first;
      for (std::size_t b = 0; b < count; ++b) {
        const double ref = reference_norm(bufs.host[b]);
        first.push_back(bufs.norm(b));
        EXPECT_NEAR(first.back(), ref, 1e-10 * ref) << "buffer " << b;
      }
      // Again: the chunk counters were reset by the last team, and the order is fixed.
      bufs.enqueue(stream);
      stream.synchronize();
      for (std::size_t b = 0; b < count; ++b) EXPECT_EQ(bufs.norm(b), first[b]) << "buffer " << b << ", second run";
    }
  }
}

TEST(Budget, ANaNPoisonsOnlyItsOwnNorm) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  zs::Stream stream;
  Buffers bufs(stream, 4, 5003, seed);
  bufs.host[1][seed % 5003] = kNaN;
  bufs.dev[1] = zs::test::to_device(bufs.host[1]);
  bufs.enqueue(stream);
  stream.synchronize();
  EXPECT_TRUE(std::isnan(bufs.norm(1)));
  for (std::size_t b : {0, 2, 3}) EXPECT_NEAR(bufs.norm(b), reference_norm(bufs.host[b]), 1e-10 * reference_norm(bufs.host[b]));
}

TEST(Budget, SumOfClippedGradientsMatchesReference) {
  // C51 at its clip scale plus up to three auxiliaries, each clipped to its own limit: one large
  // enough to leave it whole, one that clips, one zero budget, and a poisoned auxiliary.
  const std::size_t n = 100003;
  for (std::size_t n_aux = 0; n_aux <= 3; ++n_aux) {
    for (float s : {0.37f, 1.f, 0.f}) {
      for (bool poison : {false, true}) {
        if (poison && n_aux == 0) continue;
        const auto seed = zs::test::fresh_seed();
        SCOPED_TRACE(testing::Message() << n_aux << " auxiliaries, scale " << s << ", poison " << poison << ", seed "
                                        << seed);
        zs::Stream stream;
        Buffers bufs(stream, 1 + n_aux, n, seed);
        if (s == 0.f) bufs.host[0][seed % n] = kNaN;  // a zero scale must still write clean zeros
        if (poison) bufs.host[n_aux][(seed / 7) % n] = kNaN;
        for (std::size_t b = 0; b <= n_aux; ++b) bufs.dev[b] = zs::test::to_device(bufs.host[b]);
        bufs.enqueue(stream);
        const std::vector<double> limits{1e9, 3.0, 0.0};
        std::vector<zs::kernels::BudgetTerm> terms;
        for (std::size_t b = 1; b <= n_aux; ++b)
          terms.push_back({bufs.dev[b].data(), bufs.norms[b].data(), limits[b - 1]});
        zs::DeviceScalar<float> scale("zs::test::scale");
        Kokkos::deep_copy(scale, s);
        zs::DeviceFloats dst("zs::test::dst", n);
        Kokkos::deep_copy(dst, 12345.f);
        zs::kernels::budget_sum(stream.exec(), dst, zs::ConstDeviceFloats(bufs.dev[0]),
                                zs::DeviceScalar<const float>(scale), terms);
        stream.synchronize();
        const auto got = zs::test::to_host(dst);
        std::vector<double> coef;
        for (std::size_t b = 1; b <= n_aux; ++b)
          coef.push_back(reference_clip(reference_norm(bufs.host[b]), limits[b - 1]));
        if (n_aux >= 2) {
          ASSERT_LT(coef[1], 1.0) << "the 3.0 limit should clip";
        }
        for (std::size_t i = 0; i < n; ++i) {
          double ref = s == 0.f ? 0.0 : double(s) * bufs.host[0][i], mag = std::fabs(ref);
          for (std::size_t b = 1; b <= n_aux; ++b)
            if (coef[b - 1] != 0.0) {
              ref += coef[b - 1] * bufs.host[b][i];
              mag += std::fabs(coef[b - 1] * bufs.host[b][i]);
            }
          ASSERT_TRUE(std::isfinite(got[i])) << "at " << i;
          ASSERT_NEAR(got[i], ref, 1e-6 * mag + 1e-30) << "at " << i;
        }
      }
    }
  }
}

// An auxiliary's gradient given as pieces (LossTerm::gradient_spans): the sum reads only those,
// so NaN outside them (where a term's buffer holds zeros in a step) never reaches the result, and
// inside them it is the whole-buffer sum's.
TEST(Budget, SumReadsAnAuxiliaryOnlyInsideItsSpans) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const std::size_t n = 20011;
  zs::Stream stream;
  Buffers bufs(stream, 3, n, seed);
  const std::int64_t b0 = 100, e0 = 4000, b1 = 9000, e1 = 9500;
  auto inside = [&](std::size_t i) {
    const auto j = static_cast<std::int64_t>(i);
    return (j >= b0 && j < e0) || (j >= b1 && j < e1);
  };
  for (std::size_t i = 0; i < n; ++i)
    if (!inside(i)) bufs.host[1][i] = 0.f;  // the term's zeros: its norm is its spans'
  bufs.dev[1] = zs::test::to_device(bufs.host[1]);
  bufs.enqueue(stream);
  auto poisoned = bufs.host[1];
  for (std::size_t i = 0; i < n; ++i)
    if (!inside(i)) poisoned[i] = kNaN;
  auto dev_poisoned = zs::test::to_device(poisoned);
  zs::kernels::BudgetTerm one{dev_poisoned.data(), bufs.norms[1].data(), 0.5};
  one.begin[0] = b0;
  one.end[0] = e0;
  one.begin[1] = b1;
  one.end[1] = e1;
  const zs::kernels::BudgetTerm two{bufs.dev[2].data(), bufs.norms[2].data(), 1e9};
  zs::DeviceScalar<float> scale("zs::test::scale");
  Kokkos::deep_copy(scale, 0.5f);
  zs::DeviceFloats dst("zs::test::dst", n);
  zs::kernels::budget_sum(stream.exec(), dst, zs::ConstDeviceFloats(bufs.dev[0]), zs::DeviceScalar<const float>(scale),
                          {one, two});
  stream.synchronize();
  const auto got = zs::test::to_host(dst);
  const double c1 = reference_clip(reference_norm(bufs.host[1]), 0.5), c2 = reference_clip(reference_norm(bufs.host[2]), 1e9);
  ASSERT_LT(c1, 1.0) << "the 0.5 limit should clip";
  for (std::size_t i = 0; i < n; ++i) {
    const double ref = 0.5 * bufs.host[0][i] + c1 * bufs.host[1][i] + c2 * bufs.host[2][i];
    const double mag = std::fabs(0.5 * bufs.host[0][i]) + std::fabs(c1 * bufs.host[1][i]) + std::fabs(c2 * bufs.host[2][i]);
    ASSERT_TRUE(std::isfinite(got[i])) << "at " << i;
    ASSERT_NEAR(got[i], ref, 1e-6 * mag + 1e-30) << "at " << i;
  }
  // A span past the buffer is refused, naming it.
  one.end[1] = static_cast<std::int64_t>(n) + 1;
  const auto msg = zs::test::error_of([&] {
    zs::kernels::budget_sum(stream.exec(), dst, zs::ConstDeviceFloats(bufs.dev[0]), zs::DeviceScalar<const float>(scale),
                            {one});
  });
  EXPECT_NE(msg.find("span 1 is [9000, 20012)"), std::string::npos) << msg;
}

TEST(Budget, CapturedNormsAndSumReplayWithFreshInputs) {
  const std::size_t n = 20011;
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  zs::Stream stream;
  Buffers bufs(stream, 3, n, seed);
  zs::DeviceScalar<float> scale("zs::test::scale");
  Kokkos::deep_copy(scale, 0.5f);
  zs::DeviceFloats dst("zs::test::dst", n);
  const std::vector<zs::kernels::BudgetTerm> terms{{bufs.dev[1].data(), bufs.norms[1].data(), 2.0},
                                                   {bufs.dev[2].data(), bufs.norms[2].data(), 2.0}};
  auto step = [&] {
    bufs.enqueue(stream);
    zs::kernels::budget_sum(stream.exec(), dst, zs::ConstDeviceFloats(bufs.dev[0]),
                            zs::DeviceScalar<const float>(scale), terms);
  };
  step();  // sizes Kokkos' reduction scratch outside capture
  stream.synchronize();
  zs::Graph graph;
  graph.capture(stream, step);
  for (int round = 0; round < 2; ++round) {
    for (std::size_t b = 0; b < 3; ++b) {
      bufs.host[b] = zs::test::random_normal(n, seed + 10 * (round + 1) + b, 1.f + float(b));
      Kokkos::deep_copy(bufs.dev[b], Kokkos::View<const float*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>(
                                         bufs.host[b].data(), n));
    }
    graph.replay(stream);
    stream.synchronize();
    const double c1 = reference_clip(reference_norm(bufs.host[1]), 2.0);
    const double c2 = reference_clip(reference_norm(bufs.host[2]), 2.0);
    const auto got = zs::test::to_host(dst);
    for (std::size_t i = 0; i < n; ++i) {
      const double a = 0.5 * bufs.host[0][i], b1 = c1 * bufs.host[1][i], b2 = c2 * bufs.host[2][i];
      ASSERT_NEAR(got[i], a + b1 + b2, 1e-6 * (std::fabs(a) + std::fabs(b1) + std::fabs(b2))) << "round " << round
                                                                                              << " at " << i;
    }
  }
}

TEST(Budget, BadNormAndSumArgumentsAreClearErrors) {
  zs::Stream stream;
  zs::DeviceFloats a("a", 10), b("b", 11);
  zs::DeviceScalar<double> norm("norm");
  const auto scratch = zs::kernels::make_grad_norms_scratch(stream.exec());
  std::string msg = zs::test::error_of([&] {
    zs::kernels::grad_norms(stream.exec(), {zs::ConstDeviceFloats(a), zs::ConstDeviceFloats(b)}, {norm, norm}, scratch);
  });
  EXPECT_NE(msg.find("buffer 1 holds 11 floats; expected 10"), std::string::npos) << msg;
  msg = zs::test::error_of([&] { zs::kernels::grad_norms(stream.exec(), std::vector<zs::ConstDeviceFloats>{}, {}, scratch); });
  EXPECT_NE(msg.find("0 buffers"), std::string::npos) << msg;
  zs::DeviceScalar<float> scale("scale");
  msg = zs::test::error_of(
      [&] { zs::kernels::budget_sum(stream.exec(), a, zs::ConstDeviceFloats(b), zs::DeviceScalar<const float>(scale), {}); });
  EXPECT_NE(msg.find("dst has 10 elements and the C51 gradient 11"), std::string::npos) << msg;
  msg = zs::test::error_of([&] {
    zs::kernels::budget_sum(stream.exec(), a, zs::ConstDeviceFloats(a), zs::DeviceScalar<const float>(scale),
                            {{a.data(), norm.data(), -1.0}});
  });
  EXPECT_NE(msg.find("budget_sum: limit = -1"), std::string::npos) << msg;
}

// The budgeted sum as Adam's gradient source (TrainerOptions::budget_in_adam) against its own
// launch followed by Adam on what it wrote (at a unit scale): the same bits of the parameters,
// moments, target and the kept sum, with each work split and with and without the Polyak target;
// on a skipped step and before the first prepare (t = 0) the sum is still written and nothing
// else is.
TEST(Budget, AdamFormingTheSumIsTheSumsLaunchThenAdamBitForBit) {
  using zs::kernels::AdamWork;
  const std::size_t n = 30011;
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  zs::Stream stream;
  Buffers bufs(stream, 4, n, seed);
  bufs.host[3][(seed / 3) % n] = kNaN;  // a poisoned auxiliary: coefficient 0, adds nothing
  bufs.dev[3] = zs::test::to_device(bufs.host[3]);
  bufs.enqueue(stream);
  std::vector<zs::kernels::BudgetTerm> terms{{bufs.dev[1].data(), bufs.norms[1].data(), 0.5},
                                             {bufs.dev[2].data(), bufs.norms[2].data(), 1e9},
                                             {bufs.dev[3].data(), bufs.norms[3].data(), 2.0}};
  terms[0].begin[0] = 17;
  terms[0].end[0] = 20000;
  terms[0].begin[1] = 25000;
  terms[0].end[1] = 26000;
  zs::DeviceScalar<float> scale("zs::test::scale"), unit("zs::test::unit"), lr("zs::test::lr");
  Kokkos::deep_copy(scale, 0.37f);
  Kokkos::deep_copy(unit, 1.f);
  Kokkos::deep_copy(lr, 3e-3f);
  zs::DeviceScalar<int> skip("zs::test::skip");
  const zs::kernels::AdamHyper hyper;
  const auto p0 = zs::test::random_normal(n, seed + 10), m0 = zs::test::random_normal(n, seed + 11, 1e-2f),
             t0 = zs::test::random_normal(n, seed + 13);
  auto v0 = zs::test::random_normal(n, seed + 12, 1e-3f);
  for (float& x : v0) x = x * x;
  struct Run {
    zs::DeviceFloats p, m, v, t, dst;
    Kokkos::View<double*, zs::MemSpace> state = zs::kernels::make_adam_state();
  };
  auto fresh = [&](int t_steps) {
    Run r{zs::test::to_device(p0), zs::test::to_device(m0), zs::test::to_device(v0), zs::test::to_device(t0),
          zs::DeviceFloats("zs::test::dst", n)};
    Kokkos::deep_copy(r.dst, 12345.f);
    auto h = Kokkos::create_mirror_view(r.state);
    h(zs::kernels::kAdamT) = t_steps;
    h(zs::kernels::kAdamBc1) = 1.0 - std::pow(double(hyper.beta1), t_steps);
    h(zs::kernels::kAdamBc2) = 1.0 - std::pow(double(hyper.beta2), t_steps);
    Kokkos::deep_copy(r.state, h);
    return r;
  };
  for (const AdamWork work : {AdamWork::runs, AdamWork::strided})
    for (const bool polyak : {true, false})
      for (const int verdict : {0, 1, 2}) {  // 0: applied, 1: skipped, 2: before the first prepare
        SCOPED_TRACE(testing::Message() << (work == AdamWork::runs ? "runs" : "strided") << ", polyak " << polyak
                                        << ", verdict " << verdict);
        Kokkos::deep_copy(skip, verdict == 1 ? 1 : 0);
        Run apart = fresh(verdict == 2 ? 0 : 3), inside = fresh(verdict == 2 ? 0 : 3);
        const zs::DeviceFloats no_target;
        auto sum_of = [&](const Run& r) {
          return zs::kernels::make_budget_sum<zs::ExecSpace>(r.dst, zs::ConstDeviceFloats(bufs.dev[0]),
                                                             zs::DeviceScalar<const float>(scale), terms);
        };
        auto step = [&](const Run& r, const auto& grad) {
          const auto f = zs::kernels::make_adam_step<zs::ExecSpace>(
              "test", r.p, grad, r.m, r.v, Kokkos::View<const double*, zs::MemSpace>(r.state),
              zs::DeviceScalar<const int>(skip), zs::DeviceScalar<const float>(lr), hyper, polyak ? r.t : no_target,
              0.25f, polyak, work);
          Kokkos::parallel_for(zs::kernels::adam_policy(stream.exec(), n, work), f);
        };
        zs::kernels::budget_sum(stream.exec(), sum_of(apart));
        step(apart, zs::kernels::ScaledGrad<zs::ExecSpace>{apart.dst, zs::DeviceScalar<const float>(unit)});
        step(inside, sum_of(inside));
        stream.synchronize();
        const auto dst = zs::test::to_host(inside.dst);
        EXPECT_TRUE(zs::test::same_bits(zs::test::to_host(apart.dst), dst)) << "the kept sum";
        EXPECT_NE(dst[n / 2], 12345.f) << "the sum is written whatever the verdict";
        for (const auto& [name, a, b] : {std::make_tuple("params", apart.p, inside.p), std::make_tuple("m", apart.m, inside.m),
                                         std::make_tuple("v", apart.v, inside.v),
                                         std::make_tuple("target", apart.t, inside.t)})
          EXPECT_TRUE(zs::test::same_bits(zs::test::to_host(a), zs::test::to_host(b))) << name;
        const auto p = zs::test::to_host(inside.p), t = zs::test::to_host(inside.t);
        if (verdict == 0) {
          EXPECT_FALSE(zs::test::same_bits(p, p0)) << "an applied step moves the parameters";
          EXPECT_EQ(zs::test::same_bits(t, t0), !polyak) << "the target moves with Polyak only";
        } else {
          EXPECT_TRUE(zs::test::same_bits(p, p0)) << "nothing else is written";
          EXPECT_TRUE(zs::test::same_bits(t, t0));
        }
      }
}
