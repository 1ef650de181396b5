// The CQL regulariser through zs::Trainer: its loss against the double reference, its gradient
// (C51 head and trunk) against central finite differences of the reference, and the clear errors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cql_loss.hpp"
#include "fd_check.hpp"
#include "network_reference.hpp"
#include "test_util.hpp"
#include "train/trainer.hpp"

namespace {

zs::Config cql_config(std::uint64_t seed, double alpha) {
  return zs::Config::from_json({{"state_dim", 5}, {"trunk", {9, 8}}, {"head_hidden", 8}, {"branches", {3, 2}},
                                {"atoms", 6}, {"v_min", -2}, {"v_max", 3}, {"gamma", 0.9}, {"n_step", 2},
                                {"seed", seed}, {"precision", "fp32"}, {"cql", {{"alpha", alpha}, {"budget", 0.2}}}});
}

using zs::test::as_double;
using zs::test::ref_batch;

}  // namespace

TEST(CQL, LossAndEveryGradientMatchTheReferenceAndFiniteDifferences) {
  const int B = 12;
  auto draw = zs::test::draw_for_gradient_check([](std::uint64_t s) { return cql_config(s, 0.7); }, B);
  ASSERT_TRUE(draw.trainer);
  SCOPED_TRACE(testing::Message() << "seed " << draw.seed << " (first drawn " << draw.first << ")");
  const zs::Config& c = draw.config;
  zs::Trainer& tr = *draw.trainer;
  const auto& hb = draw.batch;
  const auto& p0 = draw.p0;
  tr.step_direct();
  tr.synchronize();
  const zs::LossTerm* cql = tr.term("cql");
  ASSERT_NE(cql, nullptr);
  float loss = 0;
  Kokkos::deep_copy(loss, cql->loss());
  const auto grad = zs::test::to_host(cql->grad().flat());

  const zs::test::RefNet ref(c, tr.layout());
  const auto rb = ref_batch(hb);
  const double expect = ref.cql(p0, rb);
  EXPECT_NEAR(loss, expect, 1e-5 * std::abs(expect) + 1e-6);

  double norm = 0;
  for (float g : grad) norm += double(g) * g;
  double dev_norm = 0;
  Kokkos::deep_copy(dev_norm, cql->norm());
  EXPECT_NEAR(dev_norm, std::sqrt(norm), 1e-9 * std::sqrt(norm));

  zs::test::expect_gradient_matches_finite_differences(
      tr.layout(), p0, grad, [&](const std::vector<double>& p) { return ref.cql(p, rb); },
      [](const std::string& name) { return name.rfind("iqn.", 0) != 0 && name.rfind("ensemble.", 0) != 0; });
}

TEST(CQL, ConfigErrorsAreClear) {
  auto j = cql_config(1, 1.0).to_json();
  j["cql"] = {{"alpha", 0}};
  EXPECT_NE(zs::test::error_of([&] { zs::Config::from_json(j); }).find("cql.alpha = 0 is invalid"), std::string::npos);
  j["cql"] = {{"alpha", 1}, {"weight", 2}};
  EXPECT_NE(zs::test::error_of([&] { zs::Config::from_json(j); }).find("cql.weight is an unknown key"),
            std::string::npos);
  j["cql"] = {{"budget", 1.5}};
  EXPECT_NE(zs::test::error_of([&] { zs::Config::from_json(j); }).find("cql.budget = 1.5 is invalid"),
            std::string::npos);
  j["cql"] = 3;
  EXPECT_NE(zs::test::error_of([&] { zs::Config::from_json(j); }).find("cql = 3 is invalid"), std::string::npos);
  j["cql"] = true;
  j["branches"] = {65};
  EXPECT_NE(zs::test::error_of([&] { zs::Config::from_json(j); }).find("at most 64 actions per branch"),
            std::string::npos);
  j["cql"] = false;
  EXPECT_FALSE(zs::Config::from_json(j).cql.on);
}
