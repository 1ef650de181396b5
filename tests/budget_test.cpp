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
#include "losses/registry.hpp"
#include "same_batches.hpp"
#include "test_util.hpp"
#include "losses/ensemble.hpp"
#include "train/trainer.hpp"

namespace {

// A config with the given auxiliaries on (mask bits: 1 IQN, 2 ensemble, 4 CQL) and budgets.
zs::Config with_budgets(int mask, float iqn = 0.10f, float ensemble = 0.10f, float cql = 0.10f) {
  zs::Config c;
  c.iqn.on = mask & 1;
  c.iqn.budget = iqn;
  c.ensemble.k = (mask & 2) ? 2 : 0;
  c.ensemble.budget = ensemble;
  c.cql.on = mask & 4;
  c.cql.budget = cql;
  return c;
}

std::string budget_error(const zs::Config& c) {
  return zs::test::error_of([&] { zs::c51_budget(c); });
}

}  // namespace

TEST(Budget, DocumentedDefaults) {
  const zs::Config c;
  EXPECT_EQ(c.iqn.budget, 0.10f);
  EXPECT_EQ(c.ensemble.budget, 0.10f);
  EXPECT_EQ(c.cql.budget, 0.10f);
  EXPECT_TRUE(zs::enabled_terms(c).empty());
  EXPECT_EQ(zs::c51_budget(c), 1.0f);  // C51 alone gets the whole norm
  EXPECT_NEAR(zs::c51_budget(with_budgets(7)), 0.7f, 1e-7f);
}

TEST(Budget, EverySubsetOfAuxiliaries) {
  const float iqn = 0.05f, ens = 0.15f, cql = 0.25f;
  for (int mask = 0; mask < 8; ++mask) {
    SCOPED_TRACE(testing::Message() << "active mask " << mask);
    const auto c = with_budgets(mask, iqn, ens, cql);
    const double ref = 1.0 - ((mask & 1) ? double(iqn) : 0.0) - ((mask & 2) ? double(ens) : 0.0) -
                       ((mask & 4) ? double(cql) : 0.0);
    EXPECT_NEAR(zs::c51_budget(c), ref, 1e-7);
    EXPECT_GT(zs::c51_budget(c), 0.f);
  }
}

TEST(Budget, InactiveBudgetsDoNotCount) {
  // Both off: they must not push the sum past 1.
  EXPECT_NEAR(zs::c51_budget(with_budgets(2, 0.9f, 0.10f, 0.9f)), 0.9f, 1e-7f);
}

TEST(Budget, SumOfExactlyOneIsAnError) {
  std::string msg = budget_error(with_budgets(7, 0.25f, 0.25f, 0.5f));
  ASSERT_FALSE(msg.empty()) << "no error for budgets summing to 1";
  EXPECT_NE(msg.find("sum to 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cql = 0.5"), std::string::npos) << msg;
  // Two active budgets of 0.5, and a single one of 1.
  EXPECT_FALSE(budget_error(with_budgets(6, 0.25f, 0.5f, 0.5f)).empty());
  EXPECT_FALSE(budget_error(with_budgets(4, 0.1f, 0.1f, 1.f)).empty());
  // Floats that only round to 1 when summed (0.3 + 0.3 + 0.4 is 1.00000003 in double).
  EXPECT_FALSE(budget_error(with_budgets(7, 0.3f, 0.3f, 0.4f)).empty());
  // Just under 1 is fine, and C51's share stays positive.
  const float under = std::nextafter(std::nextafter(0.4f, 0.f), 0.f);
  ASSERT_LT(double(0.3f) + double(0.3f) + double(under), 1.0);
  EXPECT_TRUE(budget_error(with_budgets(7, 0.3f, 0.3f, under)).empty()) << budget_error(with_budgets(7, 0.3f, 0.3f, under));
  EXPECT_GT(zs::c51_budget(with_budgets(7, 0.3f, 0.3f, under)), 0.f);
}

TEST(Budget, NegativeNaNInfAndAboveOneAreErrors) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (float bad : {-0.01f, -1.f, 1.5f, nan, inf, -inf}) {
    for (int which = 0; which < 3; ++which) {
      SCOPED_TRACE(testing::Message() << "bad " << bad << " in budget " << which);
      const char* name = which == 0 ? "'iqn'" : which == 1 ? "'ensemble'" : "'cql'";
      const auto c = with_budgets(1 << which, which == 0 ? bad : 0.1f, which == 1 ? bad : 0.1f, which == 2 ? bad : 0.1f);
      const std::string msg = budget_error(c);
      ASSERT_FALSE(msg.empty());
      EXPECT_NE(msg.find(name), std::string::npos) << msg;
      EXPECT_NE(msg.find("[0, 1]"), std::string::npos) << msg;
      // The config itself refuses it too, naming the key.
      EXPECT_THROW(c.validate(), zs::Error);
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

TEST(Budget, ConfigKeysDecideTheTermsAndTheirShares) {
  zs::TrainerOptions opt;
  opt.batch_size = 3;
  for (int mask = 0; mask < 8; ++mask) {
    SCOPED_TRACE(testing::Message() << "active mask " << mask);
    zs::Trainer tr(zs::Config::from_json(with_aux(step_json(1), mask)), opt);
    const char* names[] = {"iqn", "ensemble", "cql"};
    const float shares[] = {0.05f, 0.15f, 0.25f};
    std::size_t expected_terms = 1;
    for (int b = 0; b < 3; ++b) {
      const zs::LossTerm* t = tr.term(names[b]);
      EXPECT_EQ(t != nullptr, (mask & (1 << b)) != 0) << names[b];
      if (t) {
        EXPECT_EQ(t->budget(), shares[b]);
        ++expected_terms;
      }
    }
    ASSERT_EQ(tr.terms().size(), expected_terms);
    EXPECT_EQ(tr.terms().front()->name(), "c51");
    const double ref = 1.0 - ((mask & 1) ? double(0.05f) : 0.0) - ((mask & 2) ? double(0.15f) : 0.0) -
                       ((mask & 4) ? double(0.25f) : 0.0);
    EXPECT_NEAR(tr.terms().front()->budget(), ref, 1e-7);
  }
  auto j = with_aux(step_json(1), 7);
  j["cql"]["budget"] = 0.8;  // 0.05 + 0.15 + 0.8 = 1
  EXPECT_NE(zs::test::error_of([&] { zs::Config::from_json(j); }).find("active auxiliary budgets sum to 1"),
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
  EXPECT_EQ(explicit_off.terms().size(), 1u);
  EXPECT_EQ(explicit_off.terms().front()->budget(), 1.f);
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
  EXPECT_TRUE(zs::test::same_bits(host(plain.optimizer().v().flat()), host(explicit_off.optimizer().v().flat())));
  EXPECT_FALSE(explicit_off.term_metrics().has_value());
  EXPECT_EQ(explicit_off.term("iqn"), nullptr);
  EXPECT_EQ(explicit_off.term("ensemble"), nullptr);
  EXPECT_EQ(explicit_off.term("cql"), nullptr);
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
    const double s_c51 = coef(norm_of(g_c51, n_plain), tr.terms().front()->budget() * max_norm);
    ASSERT_LT(s_c51, 1.0) << "C51's share must clip here";
    std::vector<double> expect(applied.size(), 0.0);
    for (std::size_t i = 0; i < n_plain; ++i) expect[i] = s_c51 * g_c51[i];
    const auto st = tr.term_metrics();
    ASSERT_TRUE(st.has_value());
    EXPECT_EQ(st->step, 0);
    ASSERT_EQ(st->terms.size(), tr.terms().size());
    ASSERT_NE(st->term("c51"), nullptr);
    EXPECT_NEAR(st->term("c51")->scale, s_c51, 1e-6);
    for (const char* name : {"iqn", "ensemble", "cql"}) {
      const zs::LossTerm* t = tr.term(name);
      const zs::TermMetrics* m = st->term(name);
      ASSERT_EQ(t == nullptr, m == nullptr) << name;
      if (!t) continue;
      const auto g = host(t->grad().flat());
      const double n = norm_of(g, g.size()), s = coef(n, double(t->budget()) * max_norm);
      EXPECT_NEAR(m->grad_norm, n, 1e-6 * n) << name;
      EXPECT_NEAR(m->scale, s, 1e-6) << name;
      EXPECT_TRUE(std::isfinite(m->loss)) << name;
      EXPECT_EQ(m->statistic_name.empty(), std::isnan(m->statistic)) << name;
      for (std::size_t i = 0; i < g.size(); ++i) expect[i] += float(s) * g[i];
    }
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
  zs::test::step_on_same_batches(graph, direct, 5, seed + 50, [](zs::Trainer& g, zs::Trainer& d) {
    g.step();
    d.step_direct();
  });
  EXPECT_TRUE(graph.graph_recorded());
  for (auto get : {&zs::Trainer::online, &zs::Trainer::target, &zs::Trainer::applied_grad})
    EXPECT_TRUE(zs::test::same_bits(host(((&graph)->*get)().flat()), host(((&direct)->*get)().flat())));
  EXPECT_TRUE(zs::test::same_bits(host(graph.optimizer().v().flat()), host(direct.optimizer().v().flat())));
  const auto* eg = graph.term_as<zs::EnsembleTerm>("ensemble");
  const auto* ed = direct.term_as<zs::EnsembleTerm>("ensemble");
  ASSERT_TRUE(eg && ed);
  EXPECT_TRUE(zs::test::same_bits(zs::test::to_host(eg->spread()), zs::test::to_host(ed->spread())));
  const auto mg = graph.term_metrics(), md = direct.term_metrics();
  ASSERT_TRUE(mg && md);
  EXPECT_EQ(mg->step, 4);
  EXPECT_EQ(mg->steps_behind, 0);
  EXPECT_EQ(mg->term("iqn")->loss, md->term("iqn")->loss);
  EXPECT_EQ(mg->term("ensemble")->statistic, md->term("ensemble")->statistic);
  EXPECT_EQ(mg->term("cql")->grad_norm, md->term("cql")->grad_norm);
  for (const auto& t : mg->terms) EXPECT_TRUE(std::isfinite(t.loss)) << t.name;
  EXPECT_EQ(mg->term("ensemble")->statistic_name, "spread");
  EXPECT_GT(mg->term("ensemble")->statistic, 0.0);
}

// TrainerOptions::budget_in_adam: Adam's pass forms the budgeted sum (no launch of its own) and
// gives the sum's launch's steps bit for bit, from a graph against direct launches, with the
// Polyak and the hard target update, through a step the guard skips (a NaN reward), where the
// sum is still kept and nothing moves.
TEST(Budget, TheSumInsideAdamGivesTheSameStepsAsItsOwnLaunch) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  for (const int hard : {0, 2}) {
    SCOPED_TRACE(testing::Message() << "hard_update_every " << hard);
    auto j = with_aux(step_json(seed), 7);
    j["hard_update_every"] = hard;
    const auto c = zs::Config::from_json(j);
    zs::TrainerOptions inside, apart;
    inside.batch_size = apart.batch_size = 7;
    inside.budget_in_adam = true;
    zs::Trainer in(c, inside), ap(c, apart);
    for (int s = 0; s < 5; ++s) {
      SCOPED_TRACE(testing::Message() << "step " << s);
      auto hb = zs::random_batch(c, 7, seed + 70 + s);
      if (s == 2) hb.rewards[3] = std::numeric_limits<float>::quiet_NaN();
      zs::upload(in.stream().exec(), c, hb, in.batch());
      zs::upload(ap.stream().exec(), c, hb, ap.batch());
      const auto before = host(in.online().flat());
      in.step();
      ap.step_direct();
      in.synchronize();
      ap.synchronize();
      for (auto get : {&zs::Trainer::online, &zs::Trainer::target, &zs::Trainer::applied_grad})
        EXPECT_TRUE(zs::test::same_bits(host(((&in)->*get)().flat()), host(((&ap)->*get)().flat())));
      EXPECT_TRUE(zs::test::same_bits(host(in.optimizer().m().flat()), host(ap.optimizer().m().flat())));
      EXPECT_TRUE(zs::test::same_bits(host(in.optimizer().v().flat()), host(ap.optimizer().v().flat())));
      const auto m = in.metrics();
      ASSERT_TRUE(m);
      EXPECT_EQ(m->halt_nan != 0, s == 2);
      EXPECT_EQ(zs::test::same_bits(host(in.online().flat()), before), s == 2) << "only the skipped step leaves them";
    }
    EXPECT_TRUE(in.graph_recorded());
  }
}
