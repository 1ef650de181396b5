#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "losses/grad_budget.hpp"
#include "test_util.hpp"
#include "train/trainer.hpp"

namespace {

std::string error_of(const zs::GradBudget& b) {
  try {
    b.validate();
  } catch (const zs::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Budget, DocumentedDefaults) {
  zs::GradBudget b;
  EXPECT_EQ(b.iqn, 0.10f);
  EXPECT_EQ(b.ensemble, 0.10f);
  EXPECT_EQ(b.cql, 0.10f);
  EXPECT_FALSE(b.iqn_on || b.ensemble_on || b.cql_on);
  EXPECT_NO_THROW(b.validate());
  EXPECT_EQ(b.c51_fraction(), 1.0f);  // the seed's fix: C51 alone gets the whole norm
  b.iqn_on = b.ensemble_on = b.cql_on = true;
  EXPECT_NO_THROW(b.validate());
  EXPECT_NEAR(b.c51_fraction(), 0.7f, 1e-7f);
}

TEST(Budget, EverySubsetOfAuxiliaries) {
  const float iqn = 0.05f, ens = 0.15f, cql = 0.25f;
  for (int mask = 0; mask < 8; ++mask) {
    SCOPED_TRACE(testing::Message() << "active mask " << mask);
    zs::GradBudget b;
    b.iqn = iqn;
    b.ensemble = ens;
    b.cql = cql;
    b.iqn_on = mask & 1;
    b.ensemble_on = mask & 2;
    b.cql_on = mask & 4;
    const double ref = 1.0 - ((mask & 1) ? double(iqn) : 0.0) - ((mask & 2) ? double(ens) : 0.0) -
                       ((mask & 4) ? double(cql) : 0.0);
    EXPECT_NO_THROW(b.validate());
    EXPECT_NEAR(b.c51_fraction(), ref, 1e-7);
    EXPECT_GT(b.c51_fraction(), 0.f);
  }
}

TEST(Budget, InactiveBudgetsDoNotCount) {
  zs::GradBudget b;
  b.iqn = 0.9f;
  b.cql = 0.9f;  // both off: they must not push the sum past 1
  b.ensemble_on = true;
  EXPECT_NO_THROW(b.validate());
  EXPECT_NEAR(b.c51_fraction(), 0.9f, 1e-7f);
}

TEST(Budget, SumOfExactlyOneIsAnError) {
  zs::GradBudget b;
  b.iqn = 0.25f;
  b.ensemble = 0.25f;
  b.cql = 0.5f;
  b.iqn_on = b.ensemble_on = b.cql_on = true;
  const std::string msg = error_of(b);
  ASSERT_FALSE(msg.empty()) << "no error for budgets summing to 1";
  EXPECT_NE(msg.find("sum to 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cql = 0.5"), std::string::npos) << msg;
  // Two active budgets of 0.5, and a single one of 1.
  b.iqn_on = false;
  b.ensemble = 0.5f;
  EXPECT_FALSE(error_of(b).empty());
  zs::GradBudget one;
  one.cql = 1.f;
  one.cql_on = true;
  EXPECT_FALSE(error_of(one).empty());
  // Floats that only round to 1 when summed (0.3 + 0.3 + 0.4 is 1.00000003 in double).
  zs::GradBudget r;
  r.iqn = 0.3f;
  r.ensemble = 0.3f;
  r.cql = 0.4f;
  r.iqn_on = r.ensemble_on = r.cql_on = true;
  EXPECT_FALSE(error_of(r).empty());
  // Just under 1 is fine, and C51's share stays positive.
  r.cql = std::nextafter(0.4f, 0.f);
  r.cql = std::nextafter(r.cql, 0.f);
  ASSERT_LT(r.active_sum(), 1.0);
  EXPECT_TRUE(error_of(r).empty()) << error_of(r);
  EXPECT_GT(r.c51_fraction(), 0.f);
}

TEST(Budget, NegativeNaNInfAndAboveOneAreErrors) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (float bad : {-0.01f, -1.f, 1.5f, nan, inf, -inf}) {
    for (int which = 0; which < 3; ++which) {
      SCOPED_TRACE(testing::Message() << "bad " << bad << " in budget " << which);
      zs::GradBudget b;
      const char* name = which == 0 ? "iqn = " : which == 1 ? "ensemble = " : "cql = ";
      (which == 0 ? b.iqn : which == 1 ? b.ensemble : b.cql) = bad;
      // Even an inactive budget must be a sane number: it is a config error either way.
      const std::string msg = error_of(b);
      ASSERT_FALSE(msg.empty());
      EXPECT_NE(msg.find(name), std::string::npos) << msg;
      EXPECT_NE(msg.find("[0, 1]"), std::string::npos) << msg;
    }
  }
}

namespace {

// Small network; a small max_grad_norm so that every share clips.
nlohmann::json step_json(std::uint64_t seed) {
  return {{"state_dim", 6}, {"trunk", {16, 12}}, {"head_hidden", 8}, {"branches", {3, 2, 2}}, {"atoms", 11},
          {"v_min", -5}, {"v_max", 5}, {"lr", 1e-3}, {"max_grad_norm", 0.05}, {"seed", seed}, {"precision", "fp32"}};
}

nlohmann::json with_aux(nlohmann::json j, int mask) {
  if (mask & 1) j["iqn"] = {{"n_tau", 4}, {"embed_dim", 8}, {"budget", 0.05}};
  if (mask & 2) j["ensemble"] = {{"k", 2}, {"budget", 0.15}};
  if (mask & 4) j["cql"] = {{"alpha", 2.0}, {"budget", 0.25}};
  return j;
}

std::vector<float> host(const zs::DeviceFloats& d) { return zs::test::to_host(d); }

}  // namespace

TEST(Budget, ConfigKeysDecideTheSplit) {
  for (int mask = 0; mask < 8; ++mask) {
    SCOPED_TRACE(testing::Message() << "active mask " << mask);
    const auto b = zs::budget_of(zs::Config::from_json(with_aux(step_json(1), mask)));
    EXPECT_EQ(b.iqn_on, (mask & 1) != 0);
    EXPECT_EQ(b.ensemble_on, (mask & 2) != 0);
    EXPECT_EQ(b.cql_on, (mask & 4) != 0);
    const double ref = 1.0 - ((mask & 1) ? double(0.05f) : 0.0) - ((mask & 2) ? double(0.15f) : 0.0) -
                       ((mask & 4) ? double(0.25f) : 0.0);
    EXPECT_NEAR(b.c51_fraction(), ref, 1e-7);
  }
  auto j = with_aux(step_json(1), 7);
  j["cql"]["budget"] = 0.8;  // 0.05 + 0.15 + 0.8 = 1
  EXPECT_NE(zs::test::error_of([&] { zs::Config::from_json(j); }).find("active auxiliary budgets sum to 1"),
            std::string::npos);
  zs::TrainerOptions opt;
  opt.budget.cql_on = true;
  EXPECT_NE(zs::test::error_of([&] { zs::Trainer(zs::Config::from_json(step_json(1)), opt); })
                .find("auxiliaries and their budgets are Config keys"),
            std::string::npos);
}

TEST(Budget, AllAuxiliariesOffIsBitIdenticalToThePlainStep) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  auto off = step_json(seed);
  off["iqn"] = false;
  off["ensemble"] = false;
  off["cql"] = false;
  const auto c_plain = zs::Config::from_json(step_json(seed)), c_off = zs::Config::from_json(off);
  zs::TrainerOptions opt;
  opt.batch_size = 7;
  zs::Trainer plain(c_plain, opt), explicit_off(c_off, opt);
  EXPECT_EQ(plain.layout().size(), explicit_off.layout().size());
  EXPECT_EQ(explicit_off.budget().c51_fraction(), 1.f);
  for (int s = 0; s < 4; ++s) {
    const auto hb = zs::random_batch(c_plain, 7, seed + s);
    zs::upload(plain.stream().exec(), c_plain, hb, plain.batch());
    zs::upload(explicit_off.stream().exec(), c_off, hb, explicit_off.batch());
    plain.step();
    explicit_off.step();
  }
  plain.synchronize();
  explicit_off.synchronize();
  EXPECT_TRUE(zs::test::same_bits(host(plain.online().flat()), host(explicit_off.online().flat())));
  EXPECT_TRUE(zs::test::same_bits(host(plain.adam_v().flat()), host(explicit_off.adam_v().flat())));
  EXPECT_FALSE(explicit_off.aux_metrics().has_value());
  EXPECT_EQ(explicit_off.iqn(), nullptr);
  EXPECT_EQ(explicit_off.ensemble(), nullptr);
  EXPECT_EQ(explicit_off.cql(), nullptr);
}

// The applied gradient is s_c51·g_c51 + Σ s_aux·g_aux with s = min(1, share·max_grad_norm/(‖g‖ + 1e-6)),
// for every subset of auxiliaries; g_c51 comes from a plain trainer (same seed: same network parameters).
TEST(Budget, AppliedGradientIsEachLossClippedToItsShare) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const int B = 6;
  zs::TrainerOptions opt;
  opt.batch_size = B;
  const auto c_plain = zs::Config::from_json(step_json(seed));
  zs::Trainer plain(c_plain, opt);
  const auto hb = zs::random_batch(c_plain, B, seed + 9);
  zs::upload(plain.stream().exec(), c_plain, hb, plain.batch());
  plain.step_direct();
  plain.synchronize();
  const auto g_c51 = host(plain.grad().flat());
  for (int mask = 1; mask < 8; ++mask) {
    SCOPED_TRACE(testing::Message() << "active mask " << mask);
    const auto c = zs::Config::from_json(with_aux(step_json(seed), mask));
    zs::Trainer tr(c, opt);
    zs::upload(tr.stream().exec(), c, hb, tr.batch());
    tr.step_direct();
    tr.synchronize();
    const auto applied = host(tr.applied_grad().flat());
    const auto raw = host(tr.grad().flat());
    ASSERT_TRUE(zs::test::same_bits(g_c51, std::vector<float>(raw.begin(), raw.begin() + g_c51.size())))
        << "grad() stays C51's raw gradient";
    const double max_norm = c.max_grad_norm;
    auto coef = [](double norm, double limit) { return std::min(1.0, limit / (norm + 1e-6)); };
    auto norm_of = [](const std::vector<float>& v, std::size_t n) {
      double s = 0;
      for (std::size_t i = 0; i < n; ++i) s += double(v[i]) * v[i];
      return std::sqrt(s);
    };
    const std::size_t n_plain = g_c51.size();
    const double s_c51 = coef(norm_of(g_c51, n_plain), tr.budget().c51_fraction() * max_norm);
    ASSERT_LT(s_c51, 1.0) << "C51's share must clip here";
    std::vector<double> expect(applied.size(), 0.0);
    for (std::size_t i = 0; i < n_plain; ++i) expect[i] = s_c51 * g_c51[i];
    const auto st = tr.aux_metrics();
    ASSERT_TRUE(st.has_value());
    EXPECT_EQ(st->step, 0);
    EXPECT_NEAR(st->c51_scale, s_c51, 1e-6);
    auto add = [&](const zs::AuxOutputs& a, float share, double reported_scale, double reported_norm) {
      const auto g = host(a.grad.flat());
      const double n = norm_of(g, g.size()), s = coef(n, double(share) * max_norm);
      EXPECT_NEAR(reported_norm, n, 1e-6 * n);
      EXPECT_NEAR(reported_scale, s, 1e-6);
      for (std::size_t i = 0; i < g.size(); ++i) expect[i] += float(s) * g[i];
    };
    if (mask & 1) add(tr.iqn()->out(), tr.budget().iqn, st->iqn_scale, st->iqn_grad_norm);
    else EXPECT_TRUE(std::isnan(st->iqn_loss));
    if (mask & 2) add(tr.ensemble()->out(), tr.budget().ensemble, st->ensemble_scale, st->ensemble_grad_norm);
    else EXPECT_TRUE(std::isnan(st->ensemble_spread));
    if (mask & 4) add(tr.cql()->out(), tr.budget().cql, st->cql_scale, st->cql_grad_norm);
    else EXPECT_TRUE(std::isnan(st->cql_grad_norm));
    double applied_norm = 0;
    for (std::size_t i = 0; i < applied.size(); ++i) {
      ASSERT_NEAR(applied[i], expect[i], 1e-6 * max_norm + 1e-5 * std::abs(expect[i])) << "element " << i;
      applied_norm += double(applied[i]) * applied[i];
    }
    EXPECT_LE(std::sqrt(applied_norm), max_norm * (1 + 1e-5)) << "the shares add up to at most max_grad_norm";
  }
}

TEST(Budget, GraphReplayEqualsDirectLaunchWithEverythingOn) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const auto c = zs::Config::from_json(with_aux(step_json(seed), 7));
  zs::TrainerOptions opt;
  opt.batch_size = 9;
  zs::Trainer graph(c, opt), direct(c, opt);
  for (int s = 0; s < 5; ++s) {
    const auto hb = zs::random_batch(c, 9, seed + 50 + s);
    zs::upload(graph.stream().exec(), c, hb, graph.batch());
    zs::upload(direct.stream().exec(), c, hb, direct.batch());
    graph.step();
    direct.step_direct();
  }
  graph.synchronize();
  direct.synchronize();
  EXPECT_TRUE(graph.graph_recorded());
  for (auto get : {&zs::Trainer::online, &zs::Trainer::target, &zs::Trainer::adam_v, &zs::Trainer::applied_grad})
    EXPECT_TRUE(zs::test::same_bits(host(((&graph)->*get)().flat()), host(((&direct)->*get)().flat())));
  EXPECT_TRUE(zs::test::same_bits(zs::test::to_host(graph.ensemble()->spread()),
                                  zs::test::to_host(direct.ensemble()->spread())));
  const auto mg = graph.aux_metrics(), md = direct.aux_metrics();
  ASSERT_TRUE(mg && md);
  EXPECT_EQ(mg->step, 4);
  EXPECT_EQ(mg->steps_behind, 0);
  EXPECT_EQ(mg->iqn_loss, md->iqn_loss);
  EXPECT_EQ(mg->ensemble_spread, md->ensemble_spread);
  EXPECT_EQ(mg->cql_grad_norm, md->cql_grad_norm);
  EXPECT_TRUE(std::isfinite(mg->iqn_loss) && std::isfinite(mg->ensemble_loss) && std::isfinite(mg->cql_loss));
  EXPECT_GT(mg->ensemble_spread, 0.0);
}
