// The auxiliary loss terms a trainer can hold, and how each is chosen from the config. Adding a
// loss is its own file plus one registration: an entry here (built in) or a register_loss_term()
// call (a user's own, or a test's) — nothing in the trainer, the records or the checkpoint changes.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/param_layout.hpp"
#include "losses/loss_term.hpp"

namespace zs {

struct LossTermSpec {
  std::string name;  // unique; names its record fields, tensors and gradient buffer
  // Whether the config turns the term on, and its share of max_grad_norm when it is.
  std::function<bool(const Config&)> enabled;
  std::function<float(const Config&)> budget;
  // Layers of its own, appended to the parameter layout after the network's (empty: none).
  std::function<std::vector<LayerShape>(const Config&)> layers;
  std::function<std::unique_ptr<LossTerm>(const StepContext&, float budget)> make;
};

// The auxiliary terms in the order they run (and their layers are laid out): the built-in IQN,
// ensemble and CQL terms, then those registered, in registration order.
std::vector<LossTermSpec> loss_term_specs();
// The specs the config turns on, in order.
std::vector<LossTermSpec> enabled_terms(const Config& c);
// The parameter layout of a trainer for `c`: the network, then the enabled terms' layers.
ParamLayout layout_for(const Config& c);
// C51's share of max_grad_norm: 1 − the enabled auxiliaries' budgets (summed in double, so
// shares that add up to exactly 1 are seen as 1). Throws zs::Error when that leaves C51 nothing.
float c51_budget(const Config& c);

// Adds a term to every trainer made while the returned handle lives (a test's toy term, or a
// user's own loss). Its name must not clash with a built-in or registered one.
class LossTermRegistration {
 public:
  explicit LossTermRegistration(LossTermSpec spec);
  ~LossTermRegistration();
  LossTermRegistration(const LossTermRegistration&) = delete;
  LossTermRegistration& operator=(const LossTermRegistration&) = delete;

 private:
  std::string name_;
};

}  // namespace zs
