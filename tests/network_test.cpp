// The device network, C51 loss and backward pass against the naive double reference
// (network_reference.hpp): forward log-probabilities, loss, priorities, a*, and every parameter
// gradient against central finite differences of the double-precision loss.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "batch.hpp"
#include "network.hpp"
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
  zs::LossOutputs out(c, B);
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
      if (!tie) EXPECT_NEAR(dev.priorities[i], ref.priorities[i], 1e-5 * std::abs(ref.priorities[i]) + 1e-6);
    }
    if (!any_tie) EXPECT_NEAR(dev.loss, ref.loss, 1e-5 * std::abs(ref.loss) + 1e-6);
    // a* must match wherever the double reference's best action leads by more than float rounding;
    // on a near-tie either action is a correct argmax of the float Q values.
    ASSERT_EQ(dev.best.size(), ref.best.size());
    for (std::size_t i = 0; i < ref.best.size(); ++i)
      if (ref.margin[i] > 1e-5) EXPECT_EQ(dev.best[i], ref.best[i]) << "sample/branch " << i << ", margin " << ref.margin[i];
  }
}

TEST(Network, EveryParameterGradientMatchesFiniteDifferences) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  Fixture fx(seed, 12);  // enough rows that no small layer is dead for the whole batch
  const auto dev = run_device(fx);
  const double h = 1e-6;
  double max_fd = 0;
  std::vector<double> fd(fx.layout.size(), 0.0);
  // A step that crosses a ReLU kink or flips a near-tied a* makes the two one-sided differences
  // disagree: there the loss is not differentiable at this scale, so that element is not judged.
  std::vector<char> smooth(fx.layout.size(), 1);
  const double centre = fx.ref.loss(fx.online, fx.target, fx.batch).loss;
  std::size_t kinks = 0, judged = 0;
  for (const auto& t : fx.layout.tensors())
    for (std::size_t i = 0; i < t.size(); ++i) {
      auto p = fx.online;
      p[t.offset + i] += h;
      const double up = fx.ref.loss(p, fx.target, fx.batch).loss;
      p[t.offset + i] -= 2 * h;
      const double down = fx.ref.loss(p, fx.target, fx.batch).loss;
      fd[t.offset + i] = (up - down) / (2 * h);
      const double right = (up - centre) / h, left = (centre - down) / h;
      if (std::abs(right - left) > 1e-4 * (std::abs(right) + std::abs(left)) + 1e-3) {
        smooth[t.offset + i] = 0;
        ++kinks;
        continue;
      }
      ++judged;
      max_fd = std::max(max_fd, std::abs(fd[t.offset + i]));
    }
  ASSERT_GT(max_fd, 1e-3) << "a vanishing gradient would make this test meaningless";
  EXPECT_LE(kinks, judged / 50) << "more than 2 % of the elements sit on a kink: the test would judge too little";
  for (const auto& t : fx.layout.tensors()) {
    int nonzero = 0;
    for (std::size_t i = 0; i < t.size(); ++i) {
      if (!smooth[t.offset + i]) continue;
      const double g = dev.grad[t.offset + i], f = fd[t.offset + i];
      EXPECT_NEAR(g, f, 2e-4 * max_fd + 1e-3 * std::abs(f)) << t.name << "[" << i << "]";
      nonzero += std::abs(f) > 1e-9;
    }
    EXPECT_GT(nonzero, 0) << t.name << ": finite differences found no gradient at all";
  }
  // Padding is never written by the backward pass (it stays at the poison value).
}
