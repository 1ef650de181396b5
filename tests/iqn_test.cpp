// The IQN head through zs::Trainer: τ from the counter-based RNG, the quantile Huber loss against
// the double reference, the gradient (IQN head and trunk; nothing else) against central finite
// differences, fresh τ on every step (graph replays included), and the clear errors; and the
// loss and modulation kernels alone on reference-sized inputs against naive references.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/stream.hpp"
#include "kernels/iqn_quantiles.hpp"
#include "losses/iqn.hpp"
#include "fd_check.hpp"
#include "network_reference.hpp"
#include "test_util.hpp"
#include "train/trainer.hpp"

namespace {

zs::Config iqn_config(std::uint64_t seed, double kappa) {
  return zs::Config::from_json({{"state_dim", 5}, {"trunk", {9, 8}}, {"head_hidden", 8}, {"branches", {3, 2}},
                                {"atoms", 6}, {"v_min", -2}, {"v_max", 3}, {"gamma", 0.9}, {"n_step", 2},
                                {"seed", seed}, {"precision", "fp32"}, {"iqn", {{"n_tau", 3}, {"embed_dim", 5}, {"kappa", kappa}, {"budget", 0.2}}}});
}

using zs::test::as_double;
using zs::test::ref_batch;

using Mat = zs::kernels::IqnMat<zs::ExecSpace>;
using ConstMat = zs::kernels::IqnConstMat<zs::ExecSpace>;
using IntMat = Kokkos::View<int**, Kokkos::LayoutRight, zs::MemSpace>;
using Ints = Kokkos::View<int*, zs::MemSpace>;
using ConstVec = Kokkos::View<const float*, zs::MemSpace, Kokkos::MemoryUnmanaged>;

using zs::test::upload;

Mat as_mat(const zs::DeviceFloats& d, int rows, int cols) { return Mat(d.data(), rows, cols); }

// The quantile loss kernel's inputs, drawn from `seed`, and its outputs.
struct QuantileCase {
  int B, N, M;
  float kappa, gamma_n = 0.81f;
  std::vector<int> cum{0, 5, 8, 11};  // the reference branches {5, 3, 3}
  std::vector<float> q, tq, tau, rewards, dones, weights;
  std::vector<int> actions, best;
  zs::DeviceFloats q_d, tq_d, tau_d, rewards_d, dones_d, weights_d, d_q_d;
  IntMat actions_d, best_d;
  zs::DeviceScalar<float> loss_d{std::string("zs::test::iqn_loss")};

  int K() const { return static_cast<int>(cum.size()) - 1; }
  int A() const { return cum.back(); }

  QuantileCase(int B_, int N_, int M_, float kappa_, std::uint64_t seed) : B(B_), N(N_), M(M_), kappa(kappa_) {
    std::mt19937_64 rng(seed);
    q = zs::test::random_normal(std::size_t(B) * N * A(), seed + 1, 2.f);
    tq = zs::test::random_normal(std::size_t(B) * M * A(), seed + 2, 2.f);
    rewards = zs::test::random_normal(B, seed + 3);
    std::uniform_real_distribution<float> unit(0.f, 1.f);
    for (int r = 0; r < B * N; ++r) tau.push_back(unit(rng));
    for (int i = 0; i < B; ++i) {
      dones.push_back(unit(rng) < 0.2f ? 1.f : 0.f);
      weights.push_back(0.5f + unit(rng));
      for (int k = 0; k < K(); ++k) {
        std::uniform_int_distribution<int> action(0, cum[k + 1] - cum[k] - 1);
        actions.push_back(action(rng));
        best.push_back(action(rng));
      }
    }
    q_d = zs::test::to_device(q);
    tq_d = zs::test::to_device(tq);
    tau_d = zs::test::to_device(tau);
    rewards_d = zs::test::to_device(rewards);
    dones_d = zs::test::to_device(dones);
    weights_d = zs::test::to_device(weights);
    // Stale values where the kernel must write zeros.
    d_q_d = zs::test::to_device(std::vector<float>(std::size_t(B) * N * A(), 7.f));
    actions_d = IntMat("zs::test::actions", B, K());
    best_d = IntMat("zs::test::best", B, K());
    upload(actions, actions_d);
    upload(best, best_d);
  }

  void run(const zs::Stream& stream) const {
    zs::kernels::IqnLoss<zs::ExecSpace> f;
    f.quantiles = ConstMat(q_d.data(), B * N, A());
    f.target_quantiles = ConstMat(tq_d.data(), B * M, A());
    f.tau = tau_d;
    f.actions = actions_d;
    f.best = best_d;
    f.rewards = rewards_d;
    f.dones = dones_d;
    f.weights = weights_d;
    f.d_quantiles = as_mat(d_q_d, B * N, A());
    f.table = zs::kernels::BranchTable::of({5, 3, 3});
    f.gamma_n = gamma_n;
    f.kappa = kappa;
    f.n_tau = N;
    f.n_tau_target = M;
    zs::kernels::iqn_loss(stream.exec(), f, loss_d);
    stream.synchronize();
  }

  // Naive, in double: the loss, and ∂loss/∂quantiles (only the taken action's column is nonzero).
  double reference(std::vector<double>& grad) const {
    grad.assign(std::size_t(B) * N * A(), 0.0);
    double loss = 0;
    for (int i = 0; i < B; ++i)
      for (int k = 0; k < K(); ++k) {
        const int a = cum[k] + actions[i * K() + k], a2 = cum[k] + best[i * K() + k];
        double lk = 0;
        for (int n = 0; n < N; ++n) {
          const double theta = q[(std::size_t(i) * N + n) * A() + a], t = tau[i * N + n];
          double g = 0;
          for (int m = 0; m < M; ++m) {
            const double next = tq[(std::size_t(i) * M + m) * A() + a2];
            const double target = rewards[i] + double(gamma_n) * (1.0 - dones[i]) * next;
            const double d = target - theta, wt = std::abs(t - (d < 0 ? 1.0 : 0.0));
            const bool quad = std::abs(d) <= kappa;
            lk += wt * (quad ? 0.5 * d * d : kappa * (std::abs(d) - 0.5 * kappa)) / kappa;
            g -= wt * (quad ? d : (d < 0 ? -double(kappa) : double(kappa))) / kappa;
          }
          grad[(std::size_t(i) * N + n) * A() + a] = weights[i] * g / (double(B) * K() * M);
        }
        loss += weights[i] * lk / (double(M) * K() * B);
      }
    return loss;
  }
};

}  // namespace

TEST(IQN, LossTauAndEveryGradientMatchTheReferenceAndFiniteDifferences) {
  for (double kappa : {1.0, 0.05}) {  // mostly quadratic, mostly linear Huber
    const int B = 12;
    // IQN's own ReLU layers alive at the τ the step will draw (call 0 of the term's seed).
    const auto iqn_live = [&](const zs::test::CheckDraw& d) {
      const auto* term = d.trainer->term_as<zs::IqnTerm>("iqn");
      std::vector<double> tau(std::size_t(B) * d.config.iqn.n_tau);
      for (std::size_t r = 0; r < tau.size(); ++r)
        tau[r] = zs::kernels::iqn_tau(term->seed(), zs::kernels::kIqnOnlineStream, 0, r);
      return zs::test::RefNet(d.config, d.trainer->layout()).iqn_least_live(d.p0, ref_batch(d.batch).states, B, tau) > 1e-4;
    };
    auto draw = zs::test::draw_for_gradient_check([&](std::uint64_t s) { return iqn_config(s, kappa); }, B, {}, iqn_live);
    ASSERT_TRUE(draw.trainer);
    SCOPED_TRACE(testing::Message() << "kappa " << kappa << " seed " << draw.seed << " (first drawn " << draw.first
                                    << ")");
    const zs::Config& c = draw.config;
    const int N = c.iqn.n_tau;
    zs::Trainer& tr = *draw.trainer;
    const auto& hb = draw.batch;
    const auto& p0 = draw.p0;
    const auto& t0 = draw.t0;
    tr.step_direct();
    tr.synchronize();
    const auto* iqn = tr.term_as<zs::IqnTerm>("iqn");
    ASSERT_NE(iqn, nullptr);
    float loss = 0;
    Kokkos::deep_copy(loss, iqn->loss());
    const auto grad = zs::test::to_host(iqn->grad().flat());
    const auto taus = zs::test::to_host(iqn->taus());
    const auto best = zs::test::to_host(tr.loss().best);
    ASSERT_EQ(taus.size(), std::size_t(2 * B * N));
    // τ is a pure function of (seed, stream, call 0, row), in (0, 1).
    for (int r = 0; r < B * N; ++r) {
      EXPECT_EQ(taus[r], zs::kernels::iqn_tau(iqn->seed(), zs::kernels::kIqnOnlineStream, 0, r));
      EXPECT_EQ(taus[B * N + r], zs::kernels::iqn_tau(iqn->seed(), zs::kernels::kIqnTargetStream, 0, r));
      EXPECT_GT(taus[r], 0.f);
      EXPECT_LT(taus[r], 1.f);
    }
    const std::vector<double> tau(taus.begin(), taus.begin() + B * N), tau2(taus.begin() + B * N, taus.end());

    const zs::test::RefNet ref(c, tr.layout());
    const auto rb = ref_batch(hb);
    EXPECT_EQ(best, ref.loss(p0, t0, rb).best);
    const double expect = ref.iqn(p0, t0, rb, tau, tau2, best);
    EXPECT_NEAR(loss, expect, 1e-5 * std::abs(expect) + 1e-6);

    zs::test::expect_gradient_matches_finite_differences(
        tr.layout(), p0, grad, [&](const std::vector<double>& p) { return ref.iqn(p, t0, rb, tau, tau2, best); },
        zs::test::trunk_and("iqn."));
  }
}

// The τ counter advances once a step (the loss advances it, after the draws): with the launch
// plans and with IQN riding the fused kernel.
TEST(IQN, FreshTauEveryReplayAndGraphEqualsDirect) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const auto c_plans = iqn_config(seed, 1.0);
  for (const bool fused : {false, true}) {
    SCOPED_TRACE(fused ? "fused, riding" : "launch plans");
    auto c = c_plans;
    if (fused) c.precision = zs::Precision::tf32;  // what the fused step's products take on CUDA
    zs::TrainerOptions opt;
    opt.batch_size = 4;
    opt.fused_step = fused;
    zs::Trainer graph(c, opt), direct(c, opt);
    ASSERT_EQ(graph.fused(), fused) << graph.fused_off_reason();
    const auto hb = zs::random_batch(c, 4, seed + 2);
    zs::upload(graph.stream().exec(), c, hb, graph.batch());
    zs::upload(direct.stream().exec(), c, hb, direct.batch());
    std::vector<float> previous;
    for (int s = 0; s < 4; ++s) {
      graph.step();
      direct.step_direct();
      graph.synchronize();
      const auto taus = zs::test::to_host(graph.term_as<zs::IqnTerm>("iqn")->taus());
      EXPECT_EQ(taus[0], zs::kernels::iqn_tau(graph.term_as<zs::IqnTerm>("iqn")->seed(), zs::kernels::kIqnOnlineStream, s, 0)) << "step " << s;
      EXPECT_NE(taus, previous) << "step " << s << " reused the previous step's τ";
      previous = taus;
      std::uint64_t calls = 0;
      Kokkos::deep_copy(calls, graph.term_as<zs::IqnTerm>("iqn")->counter());
      EXPECT_EQ(calls, static_cast<std::uint64_t>(s + 1)) << "one advance a step";
    }
    direct.synchronize();
    EXPECT_TRUE(graph.graph_recorded());
    EXPECT_TRUE(zs::test::same_bits(zs::test::to_host(graph.online().flat()), zs::test::to_host(direct.online().flat())));
    EXPECT_TRUE(zs::test::same_bits(zs::test::to_host(graph.term_as<zs::IqnTerm>("iqn")->taus()), zs::test::to_host(direct.term_as<zs::IqnTerm>("iqn")->taus())));
  }
}

TEST(IQN, ConfigErrorsAreClear) {
  auto j = iqn_config(1, 1.0).to_json();
  const std::pair<nlohmann::json, const char*> cases[] = {
      {{{"kappa", 0}}, "iqn.kappa = 0 is invalid"},
      {{{"kappa", -1}}, "iqn.kappa = -1 is invalid"},
      {{{"n_tau", 0}}, "iqn.n_tau = 0 is invalid"},
      {{{"embed_dim", 0}}, "iqn.embed_dim = 0 is invalid"},
      {{{"n_tau", 2.5}}, "iqn.n_tau = 2.5 is invalid; expected an integer"},
      {{{"budget", -0.1}}, "iqn.budget = -0.1 is invalid"},
      {{{"lambda", 1}}, "iqn.lambda is an unknown key"},
      {"yes", "iqn = \"yes\" is invalid"},
  };
  for (const auto& [v, needle] : cases) {
    j["iqn"] = v;
    const auto msg = zs::test::error_of([&] { zs::Config::from_json(j); });
    EXPECT_NE(msg.find(needle), std::string::npos) << v.dump() << " -> '" << msg << "'";
  }
  j["iqn"] = true;
  const auto on = zs::Config::from_json(j);
  EXPECT_TRUE(on.iqn.on);
  EXPECT_EQ(on.iqn.n_tau, 8);
  EXPECT_EQ(on.iqn.embed_dim, 64);
  EXPECT_EQ(zs::Config::from_json(on.to_json()).to_json(), on.to_json());
}

// The reference config's batch and branches with its n_tau, and shapes that make a device team
// take several warps (40 × 3 pairs) or leave most of one idle.
TEST(IqnKernels, LossAndQuantileGradientMatchANaiveDoubleReferenceOnAReferenceSizedBatch) {
  struct Shape {
    int N, M;
    float kappa;
  };
  for (const Shape sh : {Shape{8, 8, 1.f}, Shape{5, 7, 0.05f}, Shape{40, 3, 1.f}}) {
    const auto seed = zs::test::fresh_seed();
    SCOPED_TRACE(testing::Message() << "N " << sh.N << " M " << sh.M << " kappa " << sh.kappa << " seed " << seed);
    const int B = 300;
    QuantileCase c(B, sh.N, sh.M, sh.kappa, seed);
    zs::Stream stream;
    c.run(stream);
    float loss = 0;
    Kokkos::deep_copy(loss, c.loss_d);
    const auto grad = zs::test::to_host(c.d_q_d);
    std::vector<double> ref_grad;
    const double ref = c.reference(ref_grad);
    EXPECT_NEAR(loss, ref, 1e-5 * std::abs(ref));
    double largest = 0;
    for (double g : ref_grad) largest = std::max(largest, std::abs(g));
    for (std::size_t x = 0; x < grad.size(); ++x)
      ASSERT_NEAR(grad[x], ref_grad[x], 1e-5 * std::abs(ref_grad[x]) + 1e-6 * largest)
          << "row " << x / c.A() << " action " << x % c.A();

    // The same inputs give the same bits; an invalid action poisons the loss and its own rows only.
    c.run(stream);
    float again = 0;
    Kokkos::deep_copy(again, c.loss_d);
    EXPECT_TRUE(zs::test::same_bits(std::vector<float>{again}, std::vector<float>{loss}));
    EXPECT_TRUE(zs::test::same_bits(zs::test::to_host(c.d_q_d), grad));
    const int poisoned = B / 3, k = 2;
    auto bad = c.actions;
    bad[poisoned * c.K() + k] = -1;
    upload(bad, c.actions_d);
    c.run(stream);
    Kokkos::deep_copy(again, c.loss_d);
    EXPECT_TRUE(std::isnan(again));
    const auto after = zs::test::to_host(c.d_q_d);
    for (std::size_t x = 0; x < after.size(); ++x) {
      const int row = static_cast<int>(x / c.A()), a = static_cast<int>(x % c.A());
      if (row / sh.N != poisoned || a < c.cum[k])
        EXPECT_EQ(after[x], grad[x]) << "row " << row << " action " << a;
      else if (a == c.cum[k])
        EXPECT_TRUE(std::isnan(after[x])) << "row " << row;
      else
        EXPECT_EQ(after[x], 0.f) << "row " << row << " action " << a;
    }
  }
}

// Sizes that fill no device tile evenly (45 features, 37 samples), against a plain loop: the
// elementwise results are single float operations, equal bit for bit; the sum over n may be
// contracted into FMAs by the compiler, so it gets a rounding tolerance.
TEST(IqnKernels, ModulationAndItsBackwardMatchAPlainLoop) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const int B = 37, N = 3, F = 45, R = B * N;
  const auto phi0 = zs::test::random_normal(std::size_t(R) * F, seed);
  const auto features = zs::test::random_normal(std::size_t(B) * F, seed + 1);
  const auto bias = zs::test::random_normal(F, seed + 2, 0.5f);
  const auto d_h = zs::test::random_normal(std::size_t(R) * F, seed + 3);
  const auto phi_d = zs::test::to_device(phi0), features_d = zs::test::to_device(features),
             bias_d = zs::test::to_device(bias), d_h_d = zs::test::to_device(d_h);
  const zs::DeviceFloats h_d("zs::test::h", std::size_t(R) * F), d_phi_d("zs::test::d_phi", std::size_t(R) * F),
      d_features_d("zs::test::d_features", std::size_t(B) * F);
  zs::Stream stream;
  const ConstMat features_m(features_d.data(), B, F);
  zs::kernels::iqn_modulate<zs::ExecSpace>(
      stream.exec(),
      {as_mat(phi_d, R, F), as_mat(h_d, R, F), features_m, ConstVec(bias_d.data(), F), N});
  zs::kernels::iqn_modulate_backward<zs::ExecSpace>(
      stream.exec(), {ConstMat(d_h_d.data(), R, F), ConstMat(phi_d.data(), R, F), features_m, as_mat(d_phi_d, R, F),
                      as_mat(d_features_d, B, F), N});
  stream.synchronize();
  const auto phi = zs::test::to_host(phi_d), h = zs::test::to_host(h_d), d_phi = zs::test::to_host(d_phi_d),
             d_features = zs::test::to_host(d_features_d);
  std::size_t relu_zeros = 0;
  for (int i = 0; i < B; ++i)
    for (int f = 0; f < F; ++f) {
      double acc = 0, scale = 0;
      for (int n = 0; n < N; ++n) {
        const std::size_t x = (std::size_t(i) * N + n) * F + f;
        const float v = phi0[x] + bias[f], p = v < 0.f ? 0.f : v;
        relu_zeros += p == 0.f;
        ASSERT_EQ(phi[x], p) << "sample " << i << " n " << n << " feature " << f;
        ASSERT_EQ(h[x], features[std::size_t(i) * F + f] * p) << "sample " << i << " n " << n << " feature " << f;
        ASSERT_EQ(d_phi[x], p <= 0.f ? 0.f : d_h[x] * features[std::size_t(i) * F + f])
            << "sample " << i << " n " << n << " feature " << f;
        acc += double(d_h[x]) * p;
        scale += std::abs(double(d_h[x]) * p);
      }
      ASSERT_NEAR(d_features[std::size_t(i) * F + f], acc, 1e-6 * scale) << "sample " << i << " feature " << f;
    }
  EXPECT_GT(relu_zeros, 0u) << "the draw must exercise the ReLU";
}
