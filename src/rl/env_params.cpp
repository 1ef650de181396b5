// The environments' JSON params: unknown keys, wrong types and out-of-range values are errors
// naming the key, the value and what is expected; missing keys keep the documented defaults.
#include <cmath>
#include <set>
#include <string>

#include "rl/envs.hpp"

namespace zs {

namespace {

class Reader {
 public:
  Reader(const char* env, const nlohmann::json& j, std::set<std::string> known) : env_(env), j_(j) {
    require(j.is_object(), env, " params: expected a JSON object, got ", j.dump());
    std::string list;
    for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
    for (auto it = j.begin(); it != j.end(); ++it)
      require(known.count(it.key()) == 1, env, " params: unknown key '", it.key(),
              "'; expected one of: ", list);
  }

  bool has(const char* key) const { return j_.contains(key); }

  void integer(const char* key, int& out, int lo, int hi) const {
    if (!has(key)) return;
    const auto& v = j_.at(key);
    require(v.is_number_integer() && v.get<long long>() >= lo && v.get<long long>() <= hi, env_,
            " params: ", key, " = ", v.dump(), " is invalid; expected an integer in [", lo, ", ", hi, "]");
    out = v.get<int>();
  }

  // A finite number in [lo, hi] (hi_open: [lo, hi)); lo_open: (lo, hi].
  void number(const char* key, double& out, double lo, double hi, bool lo_open = false,
              bool hi_open = false) const {
    if (!has(key)) return;
    out = checked(key, j_.at(key), j_.at(key).dump(), lo, hi, lo_open, hi_open);
  }

  void triple(const char* key, double (&out)[3], double lo, double hi, bool lo_open = false) const {
    if (!has(key)) return;
    const auto& v = j_.at(key);
    require(v.is_array() && v.size() == 3, env_, " params: ", key, " = ", v.dump(),
            " is invalid; expected a list of 3 numbers (one per regime/urgency)");
    double tmp[3];
    for (int k = 0; k < 3; ++k) tmp[k] = checked(key, v[k], v.dump(), lo, hi, lo_open, false);
    for (int k = 0; k < 3; ++k) out[k] = tmp[k];
  }

  void boolean(const char* key, bool& out) const {
    if (!has(key)) return;
    const auto& v = j_.at(key);
    require(v.is_boolean(), env_, " params: ", key, " = ", v.dump(), " is invalid; expected true or false");
    out = v.get<bool>();
  }

  std::string string(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    const auto& v = j_.at(key);
    require(v.is_string(), env_, " params: ", key, " = ", v.dump(), " is invalid; expected a string");
    return v.get<std::string>();
  }

 private:
  double checked(const char* key, const nlohmann::json& v, const std::string& shown, double lo,
                 double hi, bool lo_open, bool hi_open) const {
    const bool ok = v.is_number() && std::isfinite(v.get<double>()) &&
                    (lo_open ? v.get<double>() > lo : v.get<double>() >= lo) &&
                    (hi_open ? v.get<double>() < hi : v.get<double>() <= hi);
    require(ok, env_, " params: ", key, " = ", shown, " is invalid; expected ",
            lo_open ? "(" : "[", lo, ", ", hi, hi_open ? ")" : "]", " (finite)");
    return v.get<double>();
  }

  const char* env_;
  const nlohmann::json& j_;
};

constexpr double kBig = 1e30;

}  // namespace

kernels::CartPoleParams cartpole_params(const nlohmann::json& params) {
  const Reader r("cartpole", params, {"max_episode_steps", "integrator"});
  kernels::CartPoleParams p;
  r.integer("max_episode_steps", p.max_episode_steps, 1, 1 << 30);
  const std::string integrator = r.string("integrator", "euler");
  require(integrator == "euler" || integrator == "semi_implicit", "cartpole params: integrator = \"",
          integrator, "\" is invalid; expected \"euler\" or \"semi_implicit\"");
  p.semi_implicit = integrator == "semi_implicit";
  return p;
}

nlohmann::json to_json(const kernels::CartPoleParams& p) {
  return {{"max_episode_steps", p.max_episode_steps},
          {"integrator", p.semi_implicit ? "semi_implicit" : "euler"}};
}

kernels::MarketParams market_params(const nlohmann::json& params) {
  const Reader r("market", params,
                 {"episode_length", "drift", "vol", "spread", "spread_noise", "stay_prob",
                  "vol_ewma", "impact", "limit_fill", "limit_cost", "passive_fill", "reward_scale",
                  "median_spread", "median_vol", "routed"});
  kernels::MarketParams p;
  r.integer("episode_length", p.episode_length, 1, 1 << 30);
  r.triple("drift", p.drift, -1.0, 1.0);
  r.triple("vol", p.vol, 0.0, 1.0, true);
  r.triple("spread", p.spread, 0.0, 1.0);
  r.number("spread_noise", p.spread_noise, 0.0, 10.0);
  r.number("stay_prob", p.stay_prob, 0.0, 1.0);
  r.number("vol_ewma", p.vol_ewma, 0.0, 1.0, false, true);
  r.triple("impact", p.impact, 0.0, 1.0);
  r.triple("limit_fill", p.limit_fill, 0.0, 1.0);
  r.triple("limit_cost", p.limit_cost, 0.0, 1.0);
  r.triple("passive_fill", p.passive_fill, 0.0, 1.0);
  r.number("reward_scale", p.reward_scale, 0.0, kBig, true);
  // The routing medians and the observation's scales follow the middle regime unless given.
  p.median_spread = p.spread[1];
  p.median_vol = p.vol[1];
  r.number("median_spread", p.median_spread, 0.0, 1.0, true);
  r.number("median_vol", p.median_vol, 0.0, 1.0, true);
  require(p.median_spread > 0.0, "market params: median_spread = ", p.median_spread,
          " (the middle regime's spread) is invalid; expected a positive spread or an explicit "
          "median_spread");
  r.boolean("routed", p.routed);
  return p;
}

nlohmann::json to_json(const kernels::MarketParams& p) {
  const auto list = [](const double (&a)[3]) { return nlohmann::json::array({a[0], a[1], a[2]}); };
  return {{"episode_length", p.episode_length}, {"drift", list(p.drift)},
          {"vol", list(p.vol)},                 {"spread", list(p.spread)},
          {"spread_noise", p.spread_noise},     {"stay_prob", p.stay_prob},
          {"vol_ewma", p.vol_ewma},             {"impact", list(p.impact)},
          {"limit_fill", list(p.limit_fill)},   {"limit_cost", list(p.limit_cost)},
          {"passive_fill", list(p.passive_fill)}, {"reward_scale", p.reward_scale},
          {"median_spread", p.median_spread},   {"median_vol", p.median_vol},
          {"routed", p.routed}};
}

}  // namespace zs
