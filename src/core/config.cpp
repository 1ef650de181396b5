#include "core/config.hpp"

#include <cfloat>
#include <cmath>
#include <cstddef>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/json.hpp"

namespace zs {

namespace {

// The integer keys' ranges, shared by the reader (checked before narrowing) and validate().
constexpr IntRange kStateDim{1, 1 << 20};
constexpr IntRange kWidth{1, 1 << 16};  // trunk widths and head_hidden
constexpr IntRange kActions{1, 4096};   // actions per branch
constexpr IntRange kAtoms{2, 1024};
constexpr IntRange kNStep{1, 1000};
constexpr IntRange kHardUpdateEvery{0, 1 << 30};  // 0: Polyak averaging instead
constexpr IntRange kNTau{1, 1024};
constexpr IntRange kEmbedDim{1, 4096};
constexpr IntRange kEnsembleK{1, 64};
constexpr IntRange kTrunkLayers{1, Config::kMaxTrunkLayers};
constexpr IntRange kBranchCount{1, Config::kMaxBranches};

void require_int(const char* key, int v, IntRange r, const char* note = "") {
  require(v >= r.lo && v <= r.hi, "config: ", key, " = ", v, " is invalid; expected an integer in [", r.lo, ", ",
          r.hi, "]", note);
}

void require_finite(const char* key, float v) {
  require(std::isfinite(v), "config: ", key, " = ", v, " is invalid; expected a finite number");
}

void require_in(const char* key, float v, float lo, float hi, const char* range) {
  require_finite(key, v);
  require(v >= lo && v <= hi, "config: ", key, " = ", v, " is invalid; expected a value in ", range);
}

std::string list(const std::vector<int>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// A list key: its length, then each entry; the message is built only on failure.
void require_list(const char* key, const std::vector<int>& v, IntRange count, IntRange each, const char* what) {
  const auto n = static_cast<std::int64_t>(v.size());
  if (n == 0) fail("config: ", key, " = [] is invalid; expected at least one ", what);
  if (n > count.hi) fail("config: ", key, " has ", n, " entries; expected at most ", count.hi, " ", what, "s");
  for (int x : v)
    if (x < each.lo || x > each.hi)
      fail("config: ", key, " = ", list(v), " is invalid; expected ", what, "s in [", each.lo, ", ", each.hi, "]");
}

// The kernels compute z_j = v_min + j·Δz and (tz − v_min)/Δz in float: a span that overflows or
// a Δz that rounds to nothing makes those NaN, so the support must give distinct, finite atoms.
void require_usable_support(float v_min, float v_max, int atoms) {
  const float span = v_max - v_min;
  if (!std::isfinite(span))
    fail("config: v_min = ", v_min, ", v_max = ", v_max, " is invalid; expected a span v_max - v_min finite in float "
         "(at most ", FLT_MAX, ")");
  const float dz = span / static_cast<float>(atoms - 1);
  float prev = v_min;
  for (int j = 1; j < atoms; ++j) {
    const float z = v_min + static_cast<float>(j) * dz;
    if (!(std::isfinite(z) && z > prev))
      fail("config: atoms = ", atoms, " on [v_min, v_max] = [", v_min, ", ", v_max, "] is invalid: in float, atom ", j,
           " (", z, ") is not above atom ", j - 1, " (", prev, "); expected finite, strictly increasing atoms "
           "z_j = v_min + j*dz (a wider support or fewer atoms)");
    prev = z;
  }
}

}  // namespace

int Config::total_actions() const {
  int a = 0;
  for (int n : branches) a += n;
  return a;
}

void Config::validate() const {
  require_int("state_dim", state_dim, kStateDim);
  require_list("trunk", trunk, kTrunkLayers, kWidth, "layer width");
  require_int("head_hidden", head_hidden, kWidth);
  require_list("branches", branches, kBranchCount, kActions, "action count");
  require_int("atoms", atoms, kAtoms);
  require_finite("v_min", v_min);
  require_finite("v_max", v_max);
  require(v_min < v_max, "config: v_min = ", v_min, ", v_max = ", v_max,
          " is invalid; expected v_min < v_max");
  require_usable_support(v_min, v_max, atoms);
  require_in("gamma", gamma, 0.f, 1.f, "[0, 1]");
  require_int("n_step", n_step, kNStep);
  require_finite("lr", lr);
  require(lr > 0.f, "config: lr = ", lr, " is invalid; expected a positive number");
  require_in("adam_beta1", adam_beta1, 0.f, 0.999999f, "[0, 1)");
  require_in("adam_beta2", adam_beta2, 0.f, 0.999999f, "[0, 1)");
  require_finite("adam_eps", adam_eps);
  require(adam_eps > 0.f, "config: adam_eps = ", adam_eps, " is invalid; expected a positive number");
  require_finite("max_grad_norm", max_grad_norm);
  require(max_grad_norm > 0.f, "config: max_grad_norm = ", max_grad_norm,
          " is invalid; expected a positive number");
  require_in("tau", tau, 0.f, 1.f, "[0, 1]");
  require_int("hard_update_every", hard_update_every, kHardUpdateEvery,
              " (0: Polyak averaging with tau; N: a copy of the online net every N updates)");
  require_finite("spectral_norm", spectral_norm);
  require(spectral_norm >= 0.f, "config: spectral_norm = ", spectral_norm,
          " is invalid; expected false/0 (off) or a positive σ_max");
  if (iqn.on) {
    require_int("iqn.n_tau", iqn.n_tau, kNTau);
    require_int("iqn.embed_dim", iqn.embed_dim, kEmbedDim);
    require_finite("iqn.kappa", iqn.kappa);
    require(iqn.kappa > 0.f, "config: iqn.kappa = ", iqn.kappa, " is invalid; expected a positive number");
    require_in("iqn.budget", iqn.budget, 0.f, 1.f, "[0, 1]");
  }
  require_int("ensemble.k", ensemble.k, {0, kEnsembleK.hi}, " (0 = off)");
  if (ensemble.on()) require_in("ensemble.budget", ensemble.budget, 0.f, 1.f, "[0, 1]");
  if (cql.on) {
    require_finite("cql.alpha", cql.alpha);
    require(cql.alpha > 0.f, "config: cql.alpha = ", cql.alpha, " is invalid; expected a positive number");
    require_in("cql.budget", cql.budget, 0.f, 1.f, "[0, 1]");
    for (int n : branches)
      if (n > 64)
        fail("config: cql with branches = ", list(branches),
             " is invalid; expected at most 64 actions per branch (CQL keeps a branch's Q in registers)");
  }
  const double aux = (iqn.on ? double(iqn.budget) : 0.0) + (ensemble.on() ? double(ensemble.budget) : 0.0) +
                     (cql.on ? double(cql.budget) : 0.0);
  require(aux < 1.0, "config: the active auxiliary budgets sum to ", aux, " (iqn.budget + ensemble.budget + cql.budget "
          "of those on); expected a sum below 1 so that C51 keeps a positive share of max_grad_norm");
}

Config Config::from_json(const nlohmann::json& j) {
  const JsonObject o(j, "config",
                     {"state_dim", "trunk", "head_hidden", "branches", "atoms", "v_min", "v_max", "gamma", "n_step",
                      "lr", "adam_beta1", "adam_beta2", "adam_eps", "max_grad_norm", "tau", "hard_update_every", "spectral_norm", "seed",
                      "precision", "iqn", "ensemble", "cql"});
  Config c;
  o.integer("state_dim", c.state_dim, kStateDim);
  o.integers("trunk", c.trunk, kWidth, kTrunkLayers);
  o.integer("head_hidden", c.head_hidden, kWidth);
  o.integers("branches", c.branches, kActions, kBranchCount);
  o.integer("atoms", c.atoms, kAtoms);
  o.number("v_min", c.v_min);
  o.number("v_max", c.v_max);
  o.number("gamma", c.gamma);
  o.integer("n_step", c.n_step, kNStep);
  o.number("lr", c.lr);
  o.number("adam_beta1", c.adam_beta1);
  o.number("adam_beta2", c.adam_beta2);
  o.number("adam_eps", c.adam_eps);
  o.number("max_grad_norm", c.max_grad_norm);
  o.number("tau", c.tau);
  o.integer("hard_update_every", c.hard_update_every, kHardUpdateEvery);
  if (const auto* v = o.find("spectral_norm")) {
    if (v->is_boolean()) {
      if (v->get<bool>()) o.invalid("spectral_norm", "false or a positive σ_max");
      c.spectral_norm = 0.f;
    } else {
      o.number("spectral_norm", c.spectral_norm);
      if (!(c.spectral_norm > 0.f)) o.invalid("spectral_norm", "false or a positive σ_max");
    }
  }
  o.seed("seed", c.seed);
  if (const auto* v = o.find("precision")) {
    const std::string p = v->is_string() ? v->get<std::string>() : "";
    if (p == "tf32") c.precision = Precision::tf32;
    else if (p == "fp32") c.precision = Precision::fp32;
    else o.invalid("precision", "\"tf32\" or \"fp32\"");
  }
  // An auxiliary is `false` (off), `true` (on, defaults) or an object of its parameters.
  const auto aux = [&](const char* key, const char* expected) -> const nlohmann::json* {
    const auto* v = o.find(key);
    if (v && !v->is_object() && !v->is_boolean()) o.invalid(key, expected);
    return v;
  };
  if (const auto* v = aux("iqn", "false, true or an object with n_tau, embed_dim, kappa, budget")) {
    c.iqn.on = v->is_object() || v->get<bool>();
    if (v->is_object()) {
      const JsonObject a(*v, "config", {"n_tau", "embed_dim", "kappa", "budget"}, "iqn");
      a.integer("n_tau", c.iqn.n_tau, kNTau);
      a.integer("embed_dim", c.iqn.embed_dim, kEmbedDim);
      a.number("kappa", c.iqn.kappa);
      a.number("budget", c.iqn.budget);
    }
  }
  if (const auto* v = aux("ensemble", "false or an object with k (>= 1), budget")) {
    if (v->is_boolean() && v->get<bool>()) o.invalid("ensemble", "false or an object with k (>= 1), budget");
    if (v->is_object()) {
      const JsonObject a(*v, "config", {"k", "budget"}, "ensemble");
      c.ensemble.k = 2;
      a.integer("k", c.ensemble.k, kEnsembleK);
      a.number("budget", c.ensemble.budget);
    }
  }
  if (const auto* v = aux("cql", "false, true or an object with alpha, budget")) {
    c.cql.on = v->is_object() || v->get<bool>();
    if (v->is_object()) {
      const JsonObject a(*v, "config", {"alpha", "budget"}, "cql");
      a.number("alpha", c.cql.alpha);
      a.number("budget", c.cql.budget);
    }
  }
  c.validate();
  return c;
}

nlohmann::json Config::to_json() const {
  nlohmann::json j;
  j["state_dim"] = state_dim;
  j["trunk"] = trunk;
  j["head_hidden"] = head_hidden;
  j["branches"] = branches;
  j["atoms"] = atoms;
  j["v_min"] = v_min;
  j["v_max"] = v_max;
  j["gamma"] = gamma;
  j["n_step"] = n_step;
  j["lr"] = lr;
  j["adam_beta1"] = adam_beta1;
  j["adam_beta2"] = adam_beta2;
  j["adam_eps"] = adam_eps;
  j["max_grad_norm"] = max_grad_norm;
  j["tau"] = tau;
  j["hard_update_every"] = hard_update_every;
  if (spectral_norm > 0.f) j["spectral_norm"] = spectral_norm;
  else j["spectral_norm"] = false;
  j["seed"] = seed;
  j["precision"] = to_string(precision);
  // Off auxiliaries are written as false, so a config without them reads back the same.
  if (iqn.on)
    j["iqn"] = {{"n_tau", iqn.n_tau}, {"embed_dim", iqn.embed_dim}, {"kappa", iqn.kappa}, {"budget", iqn.budget}};
  else j["iqn"] = false;
  if (ensemble.on()) j["ensemble"] = {{"k", ensemble.k}, {"budget", ensemble.budget}};
  else j["ensemble"] = false;
  if (cql.on) j["cql"] = {{"alpha", cql.alpha}, {"budget", cql.budget}};
  else j["cql"] = false;
  return j;
}

Config Config::from_text(const std::string& text, const std::string& source) {
  return from_json(parse_json(text, source));
}

Config Config::from_file(const std::string& path) {
  const nlohmann::json j = read_json_file(path, "config");
  try {
    return from_json(j);
  } catch (const Error& e) {
    fail("'", path, "': ", e.what());
  }
}

}  // namespace zs
