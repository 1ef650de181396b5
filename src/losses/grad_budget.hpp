// How the global gradient-norm limit (max_grad_norm) is shared between the C51 loss and the
// optional auxiliaries (IQN head, ensemble heads, CQL regulariser), seed 000 "Task 5".
// The split is dynamic: C51 gets what the *active* auxiliaries leave, i.e. 100 % when none is on.
#pragma once

#include "core/config.hpp"

namespace zs {

struct GradBudget {
  // Documented defaults: 10 % of max_grad_norm per auxiliary, so C51 gets 70 % with all three
  // on and 100 % with none. A budget only counts while its auxiliary is on.
  float iqn = 0.10f;
  float ensemble = 0.10f;
  float cql = 0.10f;
  bool iqn_on = false;
  bool ensemble_on = false;
  bool cql_on = false;

  // Sum of the active auxiliaries' budgets (summed in double, so three floats that add up
  // to exactly 1 are seen as 1, not as 0.99999994).
  double active_sum() const;
  // C51's share: 1 − active_sum(). Positive whenever validate() passes.
  float c51_fraction() const;
  // Throws zs::Error naming the values when a budget (active or not) is outside [0, 1] or not
  // finite, or when the active budgets leave C51 no positive share (sum ≥ 1).
  void validate() const;
};

// The budget a Config asks for: each auxiliary's `budget` key, active when that auxiliary is on.
GradBudget budget_of(const Config& c);

}  // namespace zs
