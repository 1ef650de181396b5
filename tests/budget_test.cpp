#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "error.hpp"
#include "grad_budget.hpp"

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
