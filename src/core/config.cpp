#include "core/config.hpp"

#include <cmath>
#include <cstddef>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.hpp"

namespace zs {

namespace {

void require_positive(const char* key, int v, int max = 1 << 20) {
  require(v >= 1 && v <= max, "config: ", key, " = ", v, " is invalid; expected an integer in [1, ",
          max, "]");
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

}  // namespace

int Config::total_actions() const {
  int a = 0;
  for (int n : branches) a += n;
  return a;
}

void Config::validate() const {
  require_positive("state_dim", state_dim);
  require(!trunk.empty(), "config: trunk = [] is invalid; expected at least one layer width");
  for (int w : trunk)
    require(w >= 1 && w <= (1 << 16), "config: trunk = ", list(trunk),
            " is invalid; expected widths in [1, 65536]");
  require_positive("head_hidden", head_hidden, 1 << 16);
  require(!branches.empty(), "config: branches = [] is invalid; expected at least one branch");
  for (int n : branches)
    require(n >= 1 && n <= 4096, "config: branches = ", list(branches),
            " is invalid; expected action counts in [1, 4096]");
  require(atoms >= 2 && atoms <= 1024, "config: atoms = ", atoms,
          " is invalid; expected an integer in [2, 1024]");
  require_finite("v_min", v_min);
  require_finite("v_max", v_max);
  require(v_min < v_max, "config: v_min = ", v_min, ", v_max = ", v_max,
          " is invalid; expected v_min < v_max");
  require_in("gamma", gamma, 0.f, 1.f, "[0, 1]");
  require_positive("n_step", n_step, 1000);
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
  require(hard_update_every >= 0 && hard_update_every <= (1 << 30), "config: hard_update_every = ", hard_update_every,
          " is invalid; expected 0 (Polyak averaging with tau) or a period N in [1, 2^30]");
  require_finite("spectral_norm", spectral_norm);
  require(spectral_norm >= 0.f, "config: spectral_norm = ", spectral_norm,
          " is invalid; expected false/0 (off) or a positive σ_max");
  if (iqn.on) {
    require_positive("iqn.n_tau", iqn.n_tau, 1024);
    require_positive("iqn.embed_dim", iqn.embed_dim, 4096);
    require_finite("iqn.kappa", iqn.kappa);
    require(iqn.kappa > 0.f, "config: iqn.kappa = ", iqn.kappa, " is invalid; expected a positive number");
    require_in("iqn.budget", iqn.budget, 0.f, 1.f, "[0, 1]");
  }
  require(ensemble.k >= 0 && ensemble.k <= 64, "config: ensemble.k = ", ensemble.k,
          " is invalid; expected an integer in [0, 64] (0 = off)");
  if (ensemble.on()) require_in("ensemble.budget", ensemble.budget, 0.f, 1.f, "[0, 1]");
  if (cql.on) {
    require_finite("cql.alpha", cql.alpha);
    require(cql.alpha > 0.f, "config: cql.alpha = ", cql.alpha, " is invalid; expected a positive number");
    require_in("cql.budget", cql.budget, 0.f, 1.f, "[0, 1]");
    for (int n : branches)
      require(n <= 64, "config: cql with branches = ", list(branches),
              " is invalid; expected at most 64 actions per branch (CQL keeps a branch's Q in registers)");
  }
  const double aux = (iqn.on ? double(iqn.budget) : 0.0) + (ensemble.on() ? double(ensemble.budget) : 0.0) +
                     (cql.on ? double(cql.budget) : 0.0);
  require(aux < 1.0, "config: the active auxiliary budgets sum to ", aux, " (iqn.budget + ensemble.budget + cql.budget "
          "of those on); expected a sum below 1 so that C51 keeps a positive share of max_grad_norm");
}

Config Config::from_json(const nlohmann::json& j) {
  require(j.is_object(), "config: expected a JSON object at the top level, got ", j.type_name());
  static const std::set<std::string> known = {
      "state_dim", "trunk", "head_hidden", "branches", "atoms", "v_min", "v_max", "gamma",
      "n_step", "lr", "adam_beta1", "adam_beta2", "adam_eps", "max_grad_norm", "tau",
      "hard_update_every", "spectral_norm", "seed", "precision", "iqn", "ensemble", "cql"};
  for (auto it = j.begin(); it != j.end(); ++it)
    require(known.count(it.key()) == 1, "config: unknown key '", it.key(),
            "'; expected one of: state_dim, trunk, head_hidden, branches, atoms, v_min, v_max, "
            "gamma, n_step, lr, adam_beta1, adam_beta2, adam_eps, max_grad_norm, tau, "
            "hard_update_every, spectral_norm, seed, precision, iqn, ensemble, cql");

  Config c;
  auto get_int = [&](const char* key, int& out) {
    if (!j.contains(key)) return;
    const auto& v = j.at(key);
    require(v.is_number_integer(), "config: ", key, " = ", v.dump(), " is invalid; expected an integer");
    out = v.get<int>();
  };
  auto get_float = [&](const char* key, float& out) {
    if (!j.contains(key)) return;
    const auto& v = j.at(key);
    require(v.is_number(), "config: ", key, " = ", v.dump(), " is invalid; expected a number");
    out = v.get<float>();
  };
  auto get_list = [&](const char* key, std::vector<int>& out) {
    if (!j.contains(key)) return;
    const auto& v = j.at(key);
    require(v.is_array(), "config: ", key, " = ", v.dump(), " is invalid; expected a list of integers");
    out.clear();
    for (const auto& e : v) {
      require(e.is_number_integer(), "config: ", key, " = ", v.dump(),
              " is invalid; expected a list of integers");
      out.push_back(e.get<int>());
    }
  };
  get_int("state_dim", c.state_dim);
  get_list("trunk", c.trunk);
  get_int("head_hidden", c.head_hidden);
  get_list("branches", c.branches);
  get_int("atoms", c.atoms);
  get_float("v_min", c.v_min);
  get_float("v_max", c.v_max);
  get_float("gamma", c.gamma);
  get_int("n_step", c.n_step);
  get_float("lr", c.lr);
  get_float("adam_beta1", c.adam_beta1);
  get_float("adam_beta2", c.adam_beta2);
  get_float("adam_eps", c.adam_eps);
  get_float("max_grad_norm", c.max_grad_norm);
  get_float("tau", c.tau);
  get_int("hard_update_every", c.hard_update_every);
  if (j.contains("spectral_norm")) {
    const auto& v = j.at("spectral_norm");
    if (v.is_boolean()) {
      require(!v.get<bool>(), "config: spectral_norm = true is invalid; expected false or a positive σ_max");
      c.spectral_norm = 0.f;
    } else {
      get_float("spectral_norm", c.spectral_norm);
      require(c.spectral_norm > 0.f, "config: spectral_norm = ", v.dump(),
              " is invalid; expected false or a positive σ_max");
    }
  }
  if (j.contains("seed")) {
    const auto& v = j.at("seed");
    require(v.is_number_unsigned() || (v.is_number_integer() && v.get<long long>() >= 0),
            "config: seed = ", v.dump(), " is invalid; expected a non-negative integer");
    c.seed = v.get<std::uint64_t>();
  }
  if (j.contains("precision")) {
    const auto& v = j.at("precision");
    const std::string p = v.is_string() ? v.get<std::string>() : v.dump();
    if (p == "tf32") c.precision = Precision::tf32;
    else if (p == "fp32") c.precision = Precision::fp32;
    else fail("config: precision = ", v.dump(), " is invalid; expected \"tf32\" or \"fp32\"");
  }
  // An auxiliary is `false` (off), `true` (on, defaults) or an object of its parameters.
  auto aux_object = [&](const char* key, const std::set<std::string>& fields, const char* expected) -> const nlohmann::json* {
    if (!j.contains(key)) return nullptr;
    const auto& v = j.at(key);
    require(v.is_object() || v.is_boolean(), "config: ", key, " = ", v.dump(), " is invalid; expected ", expected);
    if (v.is_object())
      for (auto it = v.begin(); it != v.end(); ++it)
        require(fields.count(it.key()) == 1, "config: ", key, ".", it.key(), " is an unknown key; expected ", expected);
    return &v;
  };
  auto sub_int = [&](const nlohmann::json& v, const char* key, const char* name, int& out) {
    if (!v.is_object() || !v.contains(name)) return;
    require(v.at(name).is_number_integer(), "config: ", key, ".", name, " = ", v.at(name).dump(),
            " is invalid; expected an integer");
    out = v.at(name).get<int>();
  };
  auto sub_float = [&](const nlohmann::json& v, const char* key, const char* name, float& out) {
    if (!v.is_object() || !v.contains(name)) return;
    require(v.at(name).is_number(), "config: ", key, ".", name, " = ", v.at(name).dump(),
            " is invalid; expected a number");
    out = v.at(name).get<float>();
  };
  if (const auto* v = aux_object("iqn", {"n_tau", "embed_dim", "kappa", "budget"},
                                 "false, true or an object with n_tau, embed_dim, kappa, budget")) {
    c.iqn.on = v->is_object() || v->get<bool>();
    sub_int(*v, "iqn", "n_tau", c.iqn.n_tau);
    sub_int(*v, "iqn", "embed_dim", c.iqn.embed_dim);
    sub_float(*v, "iqn", "kappa", c.iqn.kappa);
    sub_float(*v, "iqn", "budget", c.iqn.budget);
  }
  if (const auto* v = aux_object("ensemble", {"k", "budget"}, "false or an object with k (>= 1), budget")) {
    require(!(v->is_boolean() && v->get<bool>()), "config: ensemble = true is invalid; expected false or an object "
            "with k (>= 1), budget");
    if (v->is_object()) {
      c.ensemble.k = 2;
      sub_int(*v, "ensemble", "k", c.ensemble.k);
      require(c.ensemble.k >= 1, "config: ensemble.k = ", c.ensemble.k,
              " is invalid; expected an integer in [1, 64] (or ensemble = false for off)");
      sub_float(*v, "ensemble", "budget", c.ensemble.budget);
    }
  }
  if (const auto* v = aux_object("cql", {"alpha", "budget"}, "false, true or an object with alpha, budget")) {
    c.cql.on = v->is_object() || v->get<bool>();
    sub_float(*v, "cql", "alpha", c.cql.alpha);
    sub_float(*v, "cql", "budget", c.cql.budget);
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

Config Config::from_file(const std::string& path) {
  std::ifstream in(path);
  require(in.good(), "config: cannot open '", path, "'; expected a readable JSON file");
  nlohmann::json j;
  try {
    in >> j;
  } catch (const nlohmann::json::parse_error& e) {
    fail("config: '", path, "' is not valid JSON: ", e.what());
  }
  return from_json(j);
}

}  // namespace zs
