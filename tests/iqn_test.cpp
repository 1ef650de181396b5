// The IQN head through zs::Trainer: τ from the counter-based RNG, the quantile Huber loss against
// the double reference, the gradient (IQN head and trunk; nothing else) against central finite
// differences, fresh τ on every step (graph replays included), and the clear errors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "kernels/iqn.hpp"
#include "fd_check.hpp"
#include "network_reference.hpp"
#include "test_util.hpp"
#include "trainer.hpp"

namespace {

zs::Config iqn_config(std::uint64_t seed, double kappa) {
  return zs::Config::from_json({{"state_dim", 5}, {"trunk", {9, 8}}, {"head_hidden", 8}, {"branches", {3, 2}},
                                {"atoms", 6}, {"v_min", -2}, {"v_max", 3}, {"gamma", 0.9}, {"n_step", 2},
                                {"seed", seed}, {"precision", "fp32"}, {"iqn", {{"n_tau", 3}, {"embed_dim", 5}, {"kappa", kappa}, {"budget", 0.2}}}});
}

using zs::test::as_double;
using zs::test::ref_batch;

}  // namespace

TEST(IQN, LossTauAndEveryGradientMatchTheReferenceAndFiniteDifferences) {
  for (double kappa : {1.0, 0.05}) {  // mostly quadratic, mostly linear Huber
    const int B = 12;
    auto draw = zs::test::draw_for_gradient_check([&](std::uint64_t s) { return iqn_config(s, kappa); }, B);
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
    ASSERT_NE(tr.iqn(), nullptr);
    float loss = 0;
    Kokkos::deep_copy(loss, tr.iqn()->out().loss);
    const auto grad = zs::test::to_host(tr.iqn()->out().grad.flat());
    const auto taus = zs::test::to_host(tr.iqn()->taus());
    const auto best = zs::test::to_host(tr.loss().best);
    ASSERT_EQ(taus.size(), std::size_t(2 * B * N));
    // τ is a pure function of (seed, stream, call 0, row), in (0, 1).
    for (int r = 0; r < B * N; ++r) {
      EXPECT_EQ(taus[r], zs::kernels::iqn_tau(tr.iqn()->seed(), zs::kernels::kIqnOnlineStream, 0, r));
      EXPECT_EQ(taus[B * N + r], zs::kernels::iqn_tau(tr.iqn()->seed(), zs::kernels::kIqnTargetStream, 0, r));
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

TEST(IQN, FreshTauEveryReplayAndGraphEqualsDirect) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const auto c = iqn_config(seed, 1.0);
  zs::TrainerOptions opt;
  opt.batch_size = 4;
  zs::Trainer graph(c, opt), direct(c, opt);
  const auto hb = zs::random_batch(c, 4, seed + 2);
  zs::upload(graph.stream().exec(), c, hb, graph.batch());
  zs::upload(direct.stream().exec(), c, hb, direct.batch());
  std::vector<float> previous;
  for (int s = 0; s < 4; ++s) {
    graph.step();
    direct.step_direct();
    graph.synchronize();
    const auto taus = zs::test::to_host(graph.iqn()->taus());
    EXPECT_EQ(taus[0], zs::kernels::iqn_tau(graph.iqn()->seed(), zs::kernels::kIqnOnlineStream, s, 0)) << "step " << s;
    EXPECT_NE(taus, previous) << "step " << s << " reused the previous step's τ";
    previous = taus;
  }
  direct.synchronize();
  EXPECT_TRUE(graph.graph_recorded());
  EXPECT_TRUE(zs::test::same_bits(zs::test::to_host(graph.online().flat()), zs::test::to_host(direct.online().flat())));
  EXPECT_TRUE(zs::test::same_bits(zs::test::to_host(graph.iqn()->taus()), zs::test::to_host(direct.iqn()->taus())));
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
