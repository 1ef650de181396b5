#include "losses/grad_budget.hpp"

#include <cmath>
#include <string>

#include "core/error.hpp"

namespace zs {

namespace {

void check_one(const char* name, float value) {
  require(std::isfinite(value) && value >= 0.f && value <= 1.f, "grad budget: ", name, " = ",
          value, " is invalid; expected a finite fraction in [0, 1]");
}

}  // namespace

double GradBudget::active_sum() const {
  double s = 0.0;
  if (iqn_on) s += iqn;
  if (ensemble_on) s += ensemble;
  if (cql_on) s += cql;
  return s;
}

float GradBudget::c51_fraction() const { return static_cast<float>(1.0 - active_sum()); }

void GradBudget::validate() const {
  check_one("iqn", iqn);
  check_one("ensemble", ensemble);
  check_one("cql", cql);
  const double s = active_sum();
  // A float cast of a positive double this far below 1 stays positive, so `s < 1` is enough
  // for c51_fraction() > 0.
  require(s < 1.0, "grad budget: the active auxiliary budgets sum to ", s, " (iqn = ",
          iqn_on ? str(iqn) : std::string("off"), ", ensemble = ",
          ensemble_on ? str(ensemble) : std::string("off"), ", cql = ",
          cql_on ? str(cql) : std::string("off"),
          "); expected a sum below 1 so that C51 keeps a positive share");
}

GradBudget budget_of(const Config& c) {
  GradBudget b;
  b.iqn = c.iqn.budget;
  b.ensemble = c.ensemble.budget;
  b.cql = c.cql.budget;
  b.iqn_on = c.iqn.on;
  b.ensemble_on = c.ensemble.on();
  b.cql_on = c.cql.on;
  return b;
}

}  // namespace zs
