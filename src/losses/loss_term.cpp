#include "losses/loss_term.hpp"

#include <cmath>
#include <utility>

namespace zs {

LossTerm::LossTerm(const std::string& name, float budget, const StepContext& ctx)
    : LossTerm(name, budget, ctx.buffers.claim(name)) {}

LossTerm::LossTerm(const std::string& name, float budget, TermBuffers::Slot slot)
    : name_(name),
      budget_(budget),
      grad_(std::move(slot.grad)),
      loss_(std::move(slot.loss)),
      norm_("zs::" + name_ + "::norm") {
  require(std::isfinite(budget) && budget >= 0.f && budget <= 1.f, "loss term '", name_, "': budget = ", budget,
          " is invalid; expected a share of max_grad_norm in [0, 1]");
}

}  // namespace zs
