// The environments' JSON params: unknown keys, wrong types and out-of-range values are errors
// naming the key, the value and what is expected; missing keys keep the documented defaults.
#include <string>
#include <vector>

#include "core/json.hpp"
#include "rl/envs.hpp"

namespace zs {

namespace {

// A list of three numbers (one per regime or urgency), each within `range`.
void triple(const JsonObject& r, const char* key, double (&out)[3], NumberRange range) {
  std::vector<double> v;
  if (r.numbers(key, v, 3, range))
    for (int k = 0; k < 3; ++k) out[k] = v[k];
}

constexpr double kBig = 1e30;
constexpr IntRange kLength{1, 1 << 30};

}  // namespace

kernels::CartPoleParams cartpole_params(const nlohmann::json& params) {
  const JsonObject r(params, "cartpole params", {"max_episode_steps", "integrator"});
  kernels::CartPoleParams p;
  r.integer("max_episode_steps", p.max_episode_steps, kLength);
  std::string integrator = "euler";
  r.text("integrator", integrator);
  if (integrator != "euler" && integrator != "semi_implicit")
    r.invalid("integrator", "\"euler\" or \"semi_implicit\"");
  p.semi_implicit = integrator == "semi_implicit";
  return p;
}

nlohmann::json to_json(const kernels::CartPoleParams& p) {
  return {{"max_episode_steps", p.max_episode_steps},
          {"integrator", p.semi_implicit ? "semi_implicit" : "euler"}};
}

kernels::MarketParams market_params(const nlohmann::json& params) {
  const JsonObject r(params, "market params",
                     {"episode_length", "drift", "vol", "spread", "spread_noise", "stay_prob", "vol_ewma", "impact",
                      "limit_fill", "limit_cost", "passive_fill", "reward_scale", "median_spread", "median_vol",
                      "routed"});
  const NumberRange unit{0.0, 1.0}, positive_unit{0.0, 1.0, true};
  kernels::MarketParams p;
  r.integer("episode_length", p.episode_length, kLength);
  triple(r, "drift", p.drift, {-1.0, 1.0});
  triple(r, "vol", p.vol, positive_unit);
  triple(r, "spread", p.spread, unit);
  r.number("spread_noise", p.spread_noise, {0.0, 10.0});
  r.number("stay_prob", p.stay_prob, unit);
  r.number("vol_ewma", p.vol_ewma, {0.0, 1.0, false, true});
  triple(r, "impact", p.impact, unit);
  triple(r, "limit_fill", p.limit_fill, unit);
  triple(r, "limit_cost", p.limit_cost, unit);
  triple(r, "passive_fill", p.passive_fill, unit);
  r.number("reward_scale", p.reward_scale, {0.0, kBig, true});
  // The routing medians and the observation's scales follow the middle regime unless given.
  p.median_spread = p.spread[1];
  p.median_vol = p.vol[1];
  r.number("median_spread", p.median_spread, positive_unit);
  r.number("median_vol", p.median_vol, positive_unit);
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
