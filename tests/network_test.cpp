// The device network, C51 loss and backward pass against the naive double reference
// (network_reference.hpp): forward log-probabilities, loss, priorities, a*, and every parameter
// gradient against central finite differences of the double-precision loss.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>
#include <random>

#include "nn/batch.hpp"
#include "losses/c51.hpp"
#include "nn/network.hpp"
#include "fd_check.hpp"
#include "network_reference.hpp"
#include "test_util.hpp"

namespace {

using zs::test::RefBatch;
using zs::test::RefNet;

zs::Config small_config() {
  // atoms 6 on [-2, 3]: Δz = 1, so rewards on integers land exactly on support points.
  return zs::Config::from_json({{"state_dim", 5}, {"trunk", {9, 8}}, {"head_hidden", 8}, {"branches", {3, 2}},
                                {"atoms", 6}, {"v_min", -2}, {"v_max", 3}, {"gamma", 0.9}, {"n_step", 2}});
}

// Float-representable random values, so device and reference see identical inputs.
std::vector<double> rounded_normal(std::size_t n, std::mt19937_64& rng, double scale) {
  std::normal_distribution<double> d(0, scale);
  std::vector<double> v(n);
  for (auto& x : v) x = static_cast<float>(d(rng));
  return v;
}

void upload(const zs::DeviceFloats& dst, const std::vector<double>& src) {
  auto h = Kokkos::create_mirror_view(dst);
  for (std::size_t i = 0; i < src.size(); ++i) h(i) = static_cast<float>(src[i]);
  Kokkos::deep_copy(dst, h);
}

struct Fixture {
  zs::Config c = small_config();
  zs::ParamLayout layout{c};
  RefNet ref{c, layout};
  std::vector<double> online, target;
  RefBatch batch;

  Fixture(std::uint64_t seed, int B) {
    std::mt19937_64 rng(seed);
    online = params(rng);
    target = params(rng);
    batch.B = B;
    batch.states = rounded_normal(std::size_t(B) * c.state_dim, rng, 1.0);
    batch.next_states = rounded_normal(std::size_t(B) * c.state_dim, rng, 1.0);
    std::uniform_real_distribution<double> u(0, 1);
    for (int i = 0; i < B; ++i) {
      for (std::size_t k = 0; k < c.branches.size(); ++k) batch.actions.push_back(int(rng() % c.branches[k]));
      // Sample kinds: plain, terminal on a support point (all mass to one atom), beyond v_max (clamped).
      const int kind = i % 3;
      batch.rewards.push_back(kind == 0 ? static_cast<float>(u(rng) * 2 - 1) : kind == 1 ? 1.0 : 7.5);
      batch.dones.push_back(kind == 1 ? 1.0 : 0.0);
      batch.weights.push_back(static_cast<float>(0.25 + u(rng)));
    }
  }
  std::vector<double> params(std::mt19937_64& rng) const {
    std::vector<double> p(layout.size(), 0.0);
    std::normal_distribution<double> d(0, 0.6);
    for (const auto& t : layout.tensors())
      for (std::size_t i = 0; i < t.size(); ++i) p[t.offset + i] = static_cast<float>(d(rng));
    return p;
  }
};

struct DeviceRun {
  std::vector<float> logp, priorities, grad;
  std::vector<int> best;
  float loss = 0;
};

DeviceRun run_device(const Fixture& fx) {
  const auto& c = fx.c;
  const int B = fx.batch.B;
  zs::Stream stream;
  zs::Gemm gemm(stream, zs::Precision::fp32);
  zs::Network net(c, fx.layout);
  zs::ParamBuffer online(fx.layout, "online"), target(fx.layout, "target"), grad(fx.layout, "grad");
  upload(online.flat(), fx.online);
  upload(target.flat(), fx.target);
  Kokkos::deep_copy(grad.flat(), std::numeric_limits<float>::quiet_NaN());  // poison: every gradient must be written
  zs::DeviceBatch batch(c, B);
  std::vector<double> stacked = fx.batch.states;
  stacked.insert(stacked.end(), fx.batch.next_states.begin(), fx.batch.next_states.end());
  upload(batch.stacked_states, stacked);
  auto ha = Kokkos::create_mirror_view(batch.actions);
  for (int i = 0; i < B; ++i)
    for (std::size_t k = 0; k < c.branches.size(); ++k) ha(i, k) = fx.batch.actions[i * c.branches.size() + k];
  Kokkos::deep_copy(batch.actions, ha);
  auto up1 = [](const Kokkos::View<float*, zs::MemSpace>& d, const std::vector<double>& v) {
    auto h = Kokkos::create_mirror_view(d);
    for (std::size_t i = 0; i < v.size(); ++i) h(i) = static_cast<float>(v[i]);
    Kokkos::deep_copy(d, h);
  };
  up1(batch.rewards, fx.batch.rewards);
  up1(batch.dones, fx.batch.dones);
  up1(batch.weights, fx.batch.weights);

  zs::Activations acts(c, 2 * B), tacts(c, B);
  zs::Gradients g(c, B);
  zs::C51Outputs out(c, B);
  net.forward(stream.exec(), gemm, online, batch.all_states(), acts);
  net.forward(stream.exec(), gemm, target, batch.next_states(), tacts);
  zs::c51_loss(stream.exec(), net, acts, tacts, batch, out, g);
  net.backward(stream.exec(), gemm, online, batch.states(), acts, g, grad);
  stream.synchronize();

  DeviceRun r;
  r.logp = zs::test::to_host(acts.logp);
  r.priorities = zs::test::to_host(out.priorities);
  r.best = zs::test::to_host(out.best);
  r.grad = zs::test::to_host(grad.flat());
  Kokkos::deep_copy(r.loss, out.loss);
  return r;
}

}  // namespace

TEST(Network, ForwardMatchesDoubleReference) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  Fixture fx(seed, 7);
  const auto dev = run_device(fx);
  const int B = fx.batch.B;
  const auto ref_s = fx.ref.forward(fx.online, fx.batch.states, B);
  const auto ref_s2 = fx.ref.forward(fx.online, fx.batch.next_states, B);
  ASSERT_EQ(dev.logp.size(), ref_s.size() * 2);
  for (std::size_t i = 0; i < ref_s.size(); ++i) {
    ASSERT_NEAR(dev.logp[i], ref_s[i], 1e-5 * (1 + std::abs(ref_s[i]))) << "s row element " << i;
    ASSERT_NEAR(dev.logp[ref_s.size() + i], ref_s2[i], 1e-5 * (1 + std::abs(ref_s2[i]))) << "s' element " << i;
  }
}

TEST(C51Loss, LossPrioritiesAndDoubleDqnActionMatchReference) {
  for (int B : {1, 3, 7, 32}) {
    const auto seed = zs::test::fresh_seed();
    SCOPED_TRACE(testing::Message() << "B " << B << " seed " << seed);
    Fixture fx(seed, B);
    const auto dev = run_device(fx);
    const auto ref = fx.ref.loss(fx.online, fx.target, fx.batch);
    // A near-tied a* (float rounding may pick the other action) changes that sample's target: its
    // L_i, and the mean loss, are then judged only through a* below.
    const int K = static_cast<int>(ref.best.size()) / B;
    bool any_tie = false;
    for (int i = 0; i < B; ++i) {
      bool tie = false;
      for (int k = 0; k < K; ++k) tie |= ref.margin[i * K + k] <= 1e-5;
      any_tie |= tie;
      // Relative 1e-5 plus 1e-6 absolute: a small L_i (a target mass the net already predicts) is a
      // difference of O(1) float terms, so its rounding is absolute, not relative to L_i.
      if (!tie) {
        EXPECT_NEAR(dev.priorities[i], ref.priorities[i], 1e-5 * std::abs(ref.priorities[i]) + 1e-6);
      }
    }
    if (!any_tie) {
      EXPECT_NEAR(dev.loss, ref.loss, 1e-5 * std::abs(ref.loss) + 1e-6);
    }
    // a* must match wherever the double reference's best action leads by more than float rounding;
    // on a near-tie either action is a correct argmax of the float Q values.
    ASSERT_EQ(dev.best.size(), ref.best.size());
    for (std::size_t i = 0; i < ref.best.size(); ++i)
      if (ref.margin[i] > 1e-5) {
        EXPECT_EQ(dev.best[i], ref.best[i]) << "sample/branch " << i << ", margin " << ref.margin[i];
      }
  }
}

TEST(Network, EveryParameterGradientMatchesFiniteDifferences) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  // 12 rows: enough that no small layer is dead for the whole batch. A near-tied a* lets the float
  // step pick the other action (a different, equally valid target), so such draws are redrawn.
  std::unique_ptr<Fixture> fxp;
  for (std::uint64_t attempt = 0;; ++attempt) {
    fxp = std::make_unique<Fixture>(seed + attempt, 12);
    const auto r = fxp->ref.loss(fxp->online, fxp->target, fxp->batch);
    if (*std::min_element(r.margin.begin(), r.margin.end()) > 1e-5) break;
    ASSERT_LT(attempt, 20u) << "no draw without a near-tied a*";
  }
  Fixture& fx = *fxp;
  const auto dev = run_device(fx);
  zs::test::expect_gradient_matches_finite_differences(
      fx.layout, fx.online, dev.grad,
      [&](const std::vector<double>& p) { return fx.ref.loss(p, fx.target, fx.batch).loss; });
  // Padding is never written by the backward pass (it stays at the poison value).
}
