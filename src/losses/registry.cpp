#include "losses/registry.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <mutex>
#include <string>

#include "losses/cql.hpp"
#include "losses/ensemble.hpp"
#include "losses/iqn.hpp"

namespace zs {

namespace {

// A C51 head set's layers under `prefix` (value stream, then each branch): the ensemble's members.
std::vector<LayerShape> head_set(const Config& c, const std::string& prefix) {
  const int f = c.trunk.back();
  std::vector<LayerShape> l{{prefix + "value.0", f, c.head_hidden}, {prefix + "value.1", c.head_hidden, c.atoms}};
  for (std::size_t k = 0; k < c.branches.size(); ++k) {
    const std::string b = prefix + "branch." + std::to_string(k);
    l.push_back({b + ".0", f, c.head_hidden});
    l.push_back({b + ".1", c.head_hidden, c.branches[k] * c.atoms});
  }
  return l;
}

template <class Term>
std::function<std::unique_ptr<LossTerm>(const StepContext&, float)> maker() {
  return [](const StepContext& ctx, float budget) { return std::make_unique<Term>(ctx, budget); };
}

std::vector<LossTermSpec> built_in() {
  return {
      {"iqn", [](const Config& c) { return c.iqn.on; }, [](const Config& c) { return c.iqn.budget; },
       [](const Config& c) {
         const int f = c.trunk.back();
         return std::vector<LayerShape>{
             {"iqn.embed", c.iqn.embed_dim, f}, {"iqn.0", f, c.head_hidden}, {"iqn.1", c.head_hidden, c.total_actions()}};
       },
       maker<IqnTerm>()},
      {"ensemble", [](const Config& c) { return c.ensemble.on(); }, [](const Config& c) { return c.ensemble.budget; },
       [](const Config& c) {
         std::vector<LayerShape> l;
         for (int e = 0; e < c.ensemble.k; ++e) {
           const auto m = head_set(c, "ensemble." + std::to_string(e) + ".");
           l.insert(l.end(), m.begin(), m.end());
         }
         return l;
       },
       maker<EnsembleTerm>()},
      {"cql", [](const Config& c) { return c.cql.on; }, [](const Config& c) { return c.cql.budget; },
       [](const Config&) { return std::vector<LayerShape>{}; }, maker<CqlTerm>()},
  };
}

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::vector<LossTermSpec>& registered() {
  static std::vector<LossTermSpec> r;
  return r;
}

}  // namespace

std::vector<LossTermSpec> loss_term_specs() {
  auto specs = built_in();
  std::lock_guard<std::mutex> lock(registry_mutex());
  specs.insert(specs.end(), registered().begin(), registered().end());
  return specs;
}

std::vector<LossTermSpec> enabled_terms(const Config& c) {
  std::vector<LossTermSpec> on;
  for (auto& s : loss_term_specs())
    if (s.enabled(c)) on.push_back(std::move(s));
  return on;
}

ParamLayout layout_for(const Config& c) {
  std::vector<LayerShape> extra;
  for (const auto& s : enabled_terms(c)) {
    const auto l = s.layers(c);
    extra.insert(extra.end(), l.begin(), l.end());
  }
  return ParamLayout(c, extra);
}

float c51_budget(const Config& c) {
  double sum = 0.0;
  std::string terms;
  for (const auto& s : enabled_terms(c)) {
    const float b = s.budget(c);
    require(std::isfinite(b) && b >= 0.f && b <= 1.f, "loss term '", s.name, "': budget = ", b,
            " is invalid; expected a finite fraction in [0, 1]");
    sum += b;
    terms += (terms.empty() ? "" : ", ") + s.name + " = " + str(b);
  }
  // A float cast of a positive double this far below 1 stays positive, so `sum < 1` is enough.
  require(sum < 1.0, "config: the active auxiliary budgets sum to ", sum, " (", terms,
          "); expected a sum below 1 so that C51 keeps a positive share of max_grad_norm");
  return static_cast<float>(1.0 - sum);
}

LossTermRegistration::LossTermRegistration(LossTermSpec spec) : name_(spec.name) {
  require(!spec.name.empty() && spec.name != "c51", "register_loss_term: name '", spec.name,
          "' is invalid; expected a non-empty name other than c51");
  require(spec.enabled && spec.budget && spec.layers && spec.make, "register_loss_term: term '", spec.name,
          "' lacks a function; expected enabled, budget, layers and make");
  for (const auto& s : loss_term_specs())
    require(s.name != spec.name, "register_loss_term: a term named '", spec.name, "' exists already");
  std::lock_guard<std::mutex> lock(registry_mutex());
  registered().push_back(std::move(spec));
}

LossTermRegistration::~LossTermRegistration() {
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto& r = registered();
  r.erase(std::remove_if(r.begin(), r.end(), [&](const LossTermSpec& s) { return s.name == name_; }), r.end());
}

}  // namespace zs
