// The ensemble heads through zs::Trainer: loss and spread against the double reference, the
// gradient (member heads and trunk; nothing else) against central finite differences, errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include <nlohmann/json.hpp>

#include "fd_check.hpp"
#include "network_reference.hpp"
#include "test_util.hpp"
#include "trainer.hpp"

namespace {

zs::Config ens_config(std::uint64_t seed, int k) {
  return zs::Config::from_json({{"state_dim", 5}, {"trunk", {9, 8}}, {"head_hidden", 8}, {"branches", {3, 2}},
                                {"atoms", 6}, {"v_min", -2}, {"v_max", 3}, {"gamma", 0.9}, {"n_step", 2},
                                {"seed", seed}, {"precision", "fp32"}, {"ensemble", {{"k", k}, {"budget", 0.2}}}});
}

using zs::test::as_double;
using zs::test::ref_batch;

}  // namespace

TEST(Ensemble, LossSpreadAndEveryGradientMatchTheReferenceAndFiniteDifferences) {
  for (int k : {1, 3}) {
    const int B = 12;
    auto draw = zs::test::draw_for_gradient_check([&](std::uint64_t s) { return ens_config(s, k); }, B);
    ASSERT_TRUE(draw.trainer);
    SCOPED_TRACE(testing::Message() << "k " << k << " seed " << draw.seed << " (first drawn " << draw.first << ")");
    const zs::Config& c = draw.config;
    zs::Trainer& tr = *draw.trainer;
    const auto& hb = draw.batch;
    const auto& p0 = draw.p0;
    const auto& t0 = draw.t0;
    tr.step_direct();
    tr.synchronize();
    ASSERT_NE(tr.ensemble(), nullptr);
    ASSERT_EQ(tr.ensemble()->members(), k);
    float loss = 0, spread_mean = 0;
    Kokkos::deep_copy(loss, tr.ensemble()->out().loss);
    Kokkos::deep_copy(spread_mean, tr.ensemble()->spread_mean());
    const auto grad = zs::test::to_host(tr.ensemble()->out().grad.flat());
    const auto spread = zs::test::to_host(tr.ensemble()->spread());

    const zs::test::RefNet ref(c, tr.layout());
    const auto rb = ref_batch(hb);
    const auto m = ref.loss(p0, t0, rb).projected;
    const double expect = ref.ensemble(p0, rb, m);
    EXPECT_NEAR(loss, expect, 1e-5 * std::abs(expect) + 1e-6);
    const auto ref_spread = ref.ensemble_spread(p0, rb);
    double ref_mean = 0;
    for (int i = 0; i < B; ++i) {
      // A standard deviation of a few fp32 Q values of size ~3: cancellation costs ~1e-3 relative.
      EXPECT_NEAR(spread[i], ref_spread[i], 2e-3 * ref_spread[i] + 5e-5) << "sample " << i;
      ref_mean += ref_spread[i] / B;
    }
    EXPECT_NEAR(spread_mean, ref_mean, 1e-4 * ref_mean + 1e-5);
    EXPECT_GT(ref_mean, 1e-3) << "heads with their own parameters must disagree";

    zs::test::expect_gradient_matches_finite_differences(
        tr.layout(), p0, grad, [&](const std::vector<double>& p) { return ref.ensemble(p, rb, m); },
        zs::test::trunk_and("ensemble."));
  }
}

TEST(Ensemble, LayoutNamesComeAfterTheNetwork) {
  const auto plain = ens_config(1, 1).to_json();
  auto j = plain;
  j["ensemble"] = false;
  const zs::ParamLayout off(zs::Config::from_json(j)), on(ens_config(1, 2));
  ASSERT_LT(off.tensors().size(), on.tensors().size());
  for (std::size_t i = 0; i < off.tensors().size(); ++i) {
    EXPECT_EQ(off.tensors()[i].name, on.tensors()[i].name);
    EXPECT_EQ(off.tensors()[i].offset, on.tensors()[i].offset);
  }
  EXPECT_EQ(on.tensor("ensemble.1.branch.1.1.weight").shape, (std::vector<int>{2 * 6, 8}));
  EXPECT_EQ(on.ensemble_layer(1), on.ensemble_layer(0) + on.head_set_layers());
  EXPECT_EQ(off.ensemble_layer(0), -1);
}

TEST(Ensemble, ConfigErrorsAreClear) {
  auto j = ens_config(1, 1).to_json();
  j["ensemble"] = {{"k", 0}};
  EXPECT_NE(zs::test::error_of([&] { zs::Config::from_json(j); }).find("ensemble.k = 0 is invalid"), std::string::npos);
  j["ensemble"] = {{"k", 65}};
  EXPECT_NE(zs::test::error_of([&] { zs::Config::from_json(j); }).find("ensemble.k = 65 is invalid"), std::string::npos);
  j["ensemble"] = true;
  EXPECT_NE(zs::test::error_of([&] { zs::Config::from_json(j); }).find("ensemble = true is invalid"), std::string::npos);
  j["ensemble"] = {{"k", 2}, {"heads", 2}};
  EXPECT_NE(zs::test::error_of([&] { zs::Config::from_json(j); }).find("ensemble.heads is an unknown key"),
            std::string::npos);
  j["ensemble"] = nlohmann::json::object();
  EXPECT_EQ(zs::Config::from_json(j).ensemble.k, 2);  // documented default
}
