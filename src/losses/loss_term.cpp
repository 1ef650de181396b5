#include "losses/loss_term.hpp"

#include <cmath>

namespace zs {

LossTerm::LossTerm(std::string name, float budget, const ParamLayout& layout, DeviceScalar<float> loss)
    : name_(std::move(name)),
      budget_(budget),
      grad_(layout, "zs::" + name_ + "::grad"),
      loss_(loss.data() ? loss : DeviceScalar<float>("zs::" + name_ + "::loss")),
      norm_("zs::" + name_ + "::norm") {
  require(std::isfinite(budget) && budget >= 0.f && budget <= 1.f, "loss term '", name_, "': budget = ", budget,
          " is invalid; expected a share of max_grad_norm in [0, 1]");
}

}  // namespace zs
