// The market VecEnv against its documented equations written naively in double and fed the same
// draws (market_step_draws / market_reset_draws), cost facts, episode semantics, reward scale,
// graph replay, checkpoints (VecEnv…) and its clear errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backends/graph.hpp"
#include "backends/stream.hpp"
#include "rl/envs.hpp"
#include "core/error.hpp"
#include "kernels/routing.hpp"
#include "test_util.hpp"

namespace {

using zs::safetensors::File;
using zs::safetensors::Tensor;
constexpr int S = zs::kernels::kMktStateDim;
constexpr int D = zs::kernels::kMarketObsDim;

File snapshot(const zs::VecEnv& env) {
  File f;
  env.save_state(f, "env.");
  return f;
}
std::vector<double> state_of(const zs::VecEnv& env) { return snapshot(env).f64("env.state", {env.size(), S}); }
void set_state(zs::VecEnv& env, const std::vector<double>& state, const std::vector<std::int32_t>& len) {
  File f = snapshot(env);
  f.tensors["env.state"] = Tensor::from<double>({env.size(), S}, state);
  f.tensors["env.episode_length"] = Tensor::from<std::int32_t>({env.size()}, len);
  env.load_state(f, "env.");
}
std::uint64_t counter_of(const zs::VecEnv& env) { return zs::test::to_host(env.rng_counter())[0]; }
void upload_actions(const zs::EnvActions& d, const std::vector<std::int32_t>& a) {
  auto h = Kokkos::create_mirror_view(d);
  for (std::size_t i = 0; i < a.size(); ++i) h.data()[i] = a[i];
  Kokkos::deep_copy(d, h);
}
zs::MarketEnv& market(zs::VecEnv& env) { return dynamic_cast<zs::MarketEnv&>(env); }

// One env's state, as docs/environments.md names it.
struct St {
  int regime;
  double position, returns[4], variance, spread;
};
St unpack(const double* s) {
  return {static_cast<int>(s[0]), s[1], {s[2], s[3], s[4], s[5]}, s[6], s[7]};
}
std::vector<double> pack(const St& s) {
  return {double(s.regime), s.position, s.returns[0], s.returns[1], s.returns[2], s.returns[3], s.variance, s.spread};
}

std::vector<double> observe(const St& s, int t, const zs::kernels::MarketParams& p) {
  std::vector<double> o;
  for (double r : s.returns) o.push_back(r / p.median_vol);
  o.push_back(std::sqrt(s.variance) / p.median_vol);
  o.push_back(s.spread / p.median_spread);
  o.push_back(s.position);
  o.push_back(double(p.episode_length - t) / p.episode_length);
  return o;
}

St reference_start(const zs::kernels::MarketResetDraws& d, const zs::kernels::MarketParams& p) {
  St s;
  s.regime = std::min(2, int(std::floor(3 * d.regime)));
  s.position = 0;
  for (int k = 0; k < 4; ++k) s.returns[k] = p.drift[s.regime] + p.vol[s.regime] * d.ret_normal[k];
  s.variance = p.vol[s.regime] * p.vol[s.regime];
  s.spread = p.spread[s.regime] * std::exp(p.spread_noise * d.spread_normal);
  return s;
}

struct RefStep {
  St next;
  double reward;
  int factored;
};
RefStep reference_step(St s, int e, int o, int u, const zs::kernels::MarketStepDraws& d,
                       const zs::kernels::MarketParams& p) {
  e = std::clamp(e, 0, 4);
  o = std::clamp(o, 0, 2);
  u = std::clamp(u, 0, 2);
  if (p.routed) {
    o = zs::kernels::route_order_type(float(s.spread), float(p.median_spread));
    u = zs::kernels::route_urgency(float(std::sqrt(s.variance)), float(p.median_vol));
  }
  const double target = -1.0 + 0.5 * e, change = std::fabs(target - s.position);
  double cost = 0;
  if (change > 0) {
    bool filled = true;
    if (o == 0) cost = change * (s.spread / 2 + p.impact[u]);
    if (o == 1) {
      filled = d.fill < p.limit_fill[u];
      if (filled) cost = change * p.limit_cost[u] * s.spread / 2;
    }
    if (o == 2) filled = d.fill < p.passive_fill[u];
    if (filled) s.position = target;
  }
  const double r = p.drift[s.regime] + p.vol[s.regime] * d.ret_normal;
  const double reward = p.reward_scale * (s.position * r - cost);
  s.variance = p.vol_ewma * s.variance + (1 - p.vol_ewma) * r * r;
  for (int k = 3; k > 0; --k) s.returns[k] = s.returns[k - 1];
  s.returns[0] = r;
  if (d.stay >= p.stay_prob) s.regime = (s.regime + (d.pick < 0.5 ? 1 : 2)) % 3;
  s.spread = p.spread[s.regime] * std::exp(p.spread_noise * d.spread_normal);
  return {s, reward, e * 9 + o * 3 + u};
}

void expect_close(double got, double want, double rel, const char* what, int i, int k) {
  EXPECT_NEAR(got, want, rel * (1.0 + std::fabs(want))) << what << " env " << i << " slot " << k;
}

void check_against_reference(int n, bool routed, std::uint64_t seed) {
  SCOPED_TRACE(testing::Message() << "seed " << seed << ", N " << n << ", routed " << routed);
  zs::Stream stream;
  const nlohmann::json params = {{"routed", routed}, {"episode_length", 9}};
  const auto p = zs::market_params(params);
  auto env = zs::make_env("market", n, seed, params);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  std::vector<double> state(n * S);
  std::vector<std::int32_t> len(n);
  for (int i = 0; i < n; ++i) {
    St s;
    s.regime = int(rng() % 3);
    s.position = -1.0 + 0.5 * double(rng() % 5);
    for (double& r : s.returns) r = 0.02 * (u01(rng) - 0.5);
    s.variance = std::pow(0.001 + 0.02 * u01(rng), 2);
    s.spread = 3e-3 * u01(rng);
    const auto v = pack(s);
    std::copy(v.begin(), v.end(), state.begin() + i * S);
    len[i] = std::int32_t(rng() % 9);
  }
  set_state(*env, state, len);
  zs::EnvActions actions("actions", n, 3);
  for (int t = 0; t < 10; ++t) {
    std::vector<std::int32_t> a(n * 3);
    for (auto& x : a) x = std::int32_t(rng() % 9) - 2;  // −2..6: out of range included (clamped)
    upload_actions(actions, a);
    const std::uint64_t call = counter_of(*env);
    env->step(stream.exec(), actions);
    stream.synchronize();
    const auto got = state_of(*env);
    const auto next_obs = zs::test::to_host(env->next_obs);
    const auto obs = zs::test::to_host(env->obs);
    const auto reward = zs::test::to_host(env->reward);
    const auto term = zs::test::to_host(env->terminated);
    const auto trunc = zs::test::to_host(env->truncated);
    const auto factored = zs::test::to_host(market(*env).factored_action);
    for (int i = 0; i < n; ++i) {
      const auto r = reference_step(unpack(&state[i * S]), a[3 * i], a[3 * i + 1], a[3 * i + 2],
                                    zs::kernels::market_step_draws(seed, call, i), p);
      const int t_next = len[i] + 1;
      const bool ends = t_next >= p.episode_length;
      ASSERT_EQ(term[i], 0.f);
      ASSERT_EQ(trunc[i], ends ? 1.f : 0.f) << "env " << i << " step " << t;
      EXPECT_EQ(factored[i], r.factored) << "env " << i;
      expect_close(reward[i], float(r.reward), 1e-6, "reward", i, 0);
      const auto want_next = observe(r.next, t_next, p);
      for (int k = 0; k < D; ++k) expect_close(next_obs[i * D + k], float(want_next[k]), 1e-6, "next_obs", i, k);
      const St now = ends ? reference_start(zs::kernels::market_reset_draws(seed, call, i), p) : r.next;
      len[i] = ends ? 0 : t_next;
      const auto want_state = pack(now);
      for (int k = 0; k < S; ++k) expect_close(got[i * S + k], want_state[k], 1e-12, "state", i, k);
      const auto want_obs = observe(now, len[i], p);
      for (int k = 0; k < D; ++k) expect_close(obs[i * D + k], float(want_obs[k]), 1e-6, "obs", i, k);
    }
    state = got;
  }
}

TEST(Market, StepMatchesTheDocumentedEquationsInDouble) {
  for (int n : {1, 13, 257, 1000}) check_against_reference(n, false, zs::test::fresh_seed());
}

TEST(Market, RoutedModeTakesOrderTypeAndUrgencyFromTheRoutingRule) {
  for (int n : {5, 389}) check_against_reference(n, true, zs::test::fresh_seed());
}

// Every env in one state and one draw stream; the actions differ. Near-zero volatility and no
// drift leave the cost as (almost) the whole reward.
struct CostProbe {
  std::vector<float> reward;
  std::vector<double> position;
};
CostProbe probe(const std::vector<std::int32_t>& actions, double position, std::uint64_t seed) {
  const int n = int(actions.size() / 3);
  zs::Stream stream;
  auto env = zs::make_env("market", n, seed,
                          {{"drift", {0, 0, 0}}, {"vol", {1e-12, 1e-12, 1e-12}}, {"median_vol", 0.005}});
  St s{1, position, {0, 0, 0, 0}, 1e-6, 1e-3};
  std::vector<double> state;
  for (int i = 0; i < n; ++i) {
    const auto v = pack(s);
    state.insert(state.end(), v.begin(), v.end());
  }
  set_state(*env, state, std::vector<std::int32_t>(n, 0));
  zs::EnvActions a("actions", n, 3);
  upload_actions(a, actions);
  env->step(stream.exec(), a);
  stream.synchronize();
  const auto st = state_of(*env);
  CostProbe out{zs::test::to_host(env->reward), {}};
  for (int i = 0; i < n; ++i) out.position.push_back(st[i * S + 1]);
  return out;
}

TEST(Market, CostFacts) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  // Holding the position (exposure 3 = +0.5) costs nothing, whatever the order type and urgency.
  std::vector<std::int32_t> hold;
  for (int o = 0; o < 3; ++o)
    for (int u = 0; u < 3; ++u) hold.insert(hold.end(), {3, o, u});
  for (float r : probe(hold, 0.5, seed).reward) EXPECT_LT(std::fabs(r), 1e-9f);

  // Market orders always fill; cost grows with urgency and with the size of the change.
  const auto m = probe({4, 0, 0, 4, 0, 1, 4, 0, 2, 0, 0, 0, 0, 0, 1, 0, 0, 2}, 0.5, seed);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(m.position[i], i < 3 ? 1.0 : -1.0);
  EXPECT_LT(m.reward[0], 0.f);
  EXPECT_GT(m.reward[0], m.reward[1]);
  EXPECT_GT(m.reward[1], m.reward[2]);
  for (int u = 0; u < 3; ++u) EXPECT_NEAR(m.reward[3 + u], 3 * m.reward[u], 1e-6);  // |Δ| 1.5 vs 0.5
  // 0.5·(spread/2 + impact[0]) · scale = 0.5·(5e-4 + 1e-4)·10.
  EXPECT_NEAR(m.reward[0], -0.5 * (5e-4 + 1e-4) * 10, 1e-7);

  // Limit orders, when filled, pay less than a market order of the same urgency; passive
  // orders pay nothing; both fill more often at higher urgency.
  const int reps = 3000;
  for (int o : {1, 2}) {
    std::vector<std::int32_t> acts;
    for (int u = 0; u < 3; ++u)
      for (int r = 0; r < reps; ++r) acts.insert(acts.end(), {4, o, u});
    const auto res = probe(acts, 0.5, seed);
    const auto p = zs::market_params(nlohmann::json::object());
    for (int u = 0; u < 3; ++u) {
      int fills = 0;
      for (int r = 0; r < reps; ++r) {
        const int i = u * reps + r;
        const bool filled = res.position[i] == 1.0;
        fills += filled;
        if (!filled) {
          EXPECT_EQ(res.position[i], 0.5);
        }
        if (!filled || o == 2) {
          EXPECT_LT(std::fabs(res.reward[i]), 1e-9f);
        }
        if (filled && o == 1) {
          EXPECT_GE(res.reward[i], m.reward[u]);
          EXPECT_NEAR(res.reward[i], -0.5 * p.limit_cost[u] * 5e-4 * 10, 1e-7);
        }
      }
      const double q = o == 1 ? p.limit_fill[u] : p.passive_fill[u];
      EXPECT_NEAR(double(fills) / reps, q, 5 * std::sqrt(q * (1 - q) / reps)) << "order " << o << " urgency " << u;
    }
  }
}

TEST(Market, EpisodesTruncateAtTheirLengthAndNeverTerminate) {
  zs::Stream stream;
  const int n = 7, T = 5;
  auto env = zs::make_env("market", n, zs::test::fresh_seed(), {{"episode_length", T}});
  EXPECT_EQ(env->max_episode_steps(), T);
  EXPECT_EQ(env->branches(), (std::vector<int>{5, 3, 3}));
  EXPECT_EQ(env->obs_dim(), 8);
  env->reset(stream.exec());
  zs::EnvActions actions("actions", n, 3);
  std::vector<float> returns(n, 0.f);
  for (int t = 1; t <= 2 * T; ++t) {
    env->step(stream.exec(), actions);
    stream.synchronize();
    const auto reward = zs::test::to_host(env->reward);
    for (int i = 0; i < n; ++i) returns[i] += reward[i];
    const auto next_obs = zs::test::to_host(env->next_obs), obs = zs::test::to_host(env->obs);
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(zs::test::to_host(env->terminated)[i], 0.f);
      EXPECT_EQ(zs::test::to_host(env->truncated)[i], t % T == 0 ? 1.f : 0.f) << t;
      EXPECT_FLOAT_EQ(next_obs[i * D + 7], float(T - ((t - 1) % T + 1)) / T) << t;
      EXPECT_FLOAT_EQ(obs[i * D + 7], float(T - t % T) / T) << t;
    }
    if (t == T) {
      const auto first = zs::test::to_host(env->first_return);
      for (int i = 0; i < n; ++i) EXPECT_FLOAT_EQ(first[i], returns[i]);
    }
  }
  for (auto x : zs::test::to_host(env->episodes_done)) EXPECT_EQ(x, 2);
}

TEST(Market, ResetStartsFlatWithStationaryRegimes) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const int n = 6001;
  zs::Stream stream;
  auto env = zs::make_env("market", n, seed);
  const auto p = zs::market_params(nlohmann::json::object());
  env->reset(stream.exec());
  stream.synchronize();
  const auto call = counter_of(*env) - 1;
  const auto st = state_of(*env);
  const auto obs = zs::test::to_host(env->obs);
  EXPECT_EQ(obs, zs::test::to_host(env->next_obs));
  int count[3] = {0, 0, 0};
  for (int i = 0; i < n; ++i) {
    const auto want = pack(reference_start(zs::kernels::market_reset_draws(seed, call, i), p));
    for (int k = 0; k < S; ++k) expect_close(st[i * S + k], want[k], 1e-12, "state", i, k);
    count[int(st[i * S])] += 1;
    EXPECT_EQ(obs[i * D + 6], 0.f);
    EXPECT_EQ(obs[i * D + 7], 1.f);
  }
  for (int z = 0; z < 3; ++z) EXPECT_NEAR(count[z] / double(n), 1.0 / 3, 5 * std::sqrt(2.0 / 9 / n));
  for (auto x : zs::test::to_host(market(*env).factored_action)) EXPECT_EQ(x, -1);
  for (auto x : zs::test::to_host(env->first_return)) EXPECT_TRUE(std::isnan(x));
}

// Whole episodes under a random policy and under "always fully long by market order" stay well
// inside the C51 support [−10, 10].
TEST(Market, EpisodeReturnsFitTheC51Support) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const int n = 2048;
  zs::Stream stream;
  std::mt19937_64 rng(seed);
  for (int policy = 0; policy < 2; ++policy) {
    auto env = zs::make_env("market", n, seed + policy);
    env->reset(stream.exec());
    zs::EnvActions actions("actions", n, 3);
    for (int t = 0; t < env->max_episode_steps(); ++t) {
      std::vector<std::int32_t> a(n * 3);
      for (int i = 0; i < n; ++i) {
        a[3 * i] = policy == 0 ? int(rng() % 5) : 4;
        a[3 * i + 1] = policy == 0 ? int(rng() % 3) : 0;
        a[3 * i + 2] = policy == 0 ? int(rng() % 3) : 0;
      }
      upload_actions(actions, a);
      env->step(stream.exec(), actions);
    }
    stream.synchronize();
    auto r = zs::test::to_host(env->first_return);
    std::sort(r.begin(), r.end());
    double mean = 0, sq = 0;
    for (float x : r) mean += x / n, sq += double(x) * x / n;
    std::printf("policy %d: mean %.3f sd %.3f min %.3f p1 %.3f p99 %.3f max %.3f\n", policy, mean,
                std::sqrt(sq - mean * mean), r.front(), r[n / 100], r[n - n / 100], r.back());
    for (float x : r) ASSERT_FALSE(std::isnan(x));
    EXPECT_GT(r[n / 1000], -10.f) << "policy " << policy;
    EXPECT_LT(r[n - 1 - n / 1000], 10.f) << "policy " << policy;
  }
}

TEST(Market, GraphReplayMatchesDirectSteps) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const int n = 131;
  zs::Stream stream;
  const nlohmann::json params = {{"episode_length", 16}};
  auto direct = zs::make_env("market", n, seed, params), graphed = zs::make_env("market", n, seed, params);
  zs::EnvActions actions("actions", n, 3);
  auto body = [&] { graphed->step(stream.exec(), actions); };
  direct->reset(stream.exec());
  graphed->reset(stream.exec());
  direct->step(stream.exec(), actions);
  body();
  stream.synchronize();
  zs::Graph graph;
  graph.capture(stream, body);
  ASSERT_TRUE(graph.captured());
  std::mt19937_64 rng(seed);
  for (int t = 0; t < 40; ++t) {
    std::vector<std::int32_t> a(n * 3);
    for (auto& x : a) x = std::int32_t(rng() % 5);
    upload_actions(actions, a);
    direct->step(stream.exec(), actions);
    graph.replay(stream);
    stream.synchronize();
    ASSERT_TRUE(zs::test::same_bits(zs::test::to_host(direct->obs), zs::test::to_host(graphed->obs))) << t;
    ASSERT_TRUE(zs::test::same_bits(zs::test::to_host(direct->next_obs), zs::test::to_host(graphed->next_obs))) << t;
    ASSERT_TRUE(zs::test::same_bits(zs::test::to_host(direct->reward), zs::test::to_host(graphed->reward))) << t;
    ASSERT_EQ(zs::test::to_host(market(*direct).factored_action), zs::test::to_host(market(*graphed).factored_action));
  }
  EXPECT_EQ(zs::test::to_host(graphed->episodes_done)[0], 2);
}

TEST(Market, MisuseIsAClearError) {
  zs::Stream stream;
  auto env = zs::make_env("market", 4, 1);
  zs::EnvActions wrong("a", 4, 1);
  EXPECT_NE(zs::test::error_of([&] { env->step(stream.exec(), wrong); }).find("expected [4, 3]"), std::string::npos);
  const std::pair<nlohmann::json, const char*> bad[] = {
      {{{"regimes", 3}}, "unknown key 'regimes'"},
      {{{"stay_prob", 1.5}}, "stay_prob = 1.5"},
      {{{"vol", {0.0, 0.1, 0.1}}}, "vol = [0.0,0.1,0.1]"},
      {{{"drift", {0.0, 0.1}}}, "list of 3 numbers"},
      {{{"episode_length", 0}}, "episode_length = 0"},
      {{{"episode_length", 4294967297ull}}, "episode_length = 4294967297 is invalid; expected an integer in [1, 1073741824]"},
      {{{"drift", {0.0, 0.1, 2.0}}}, "drift = [0.0,0.1,2.0] is invalid; expected a list of 3 numbers"},
      {{{"reward_scale", -1}}, "reward_scale = -1"},
      {{{"routed", 1}}, "routed = 1"},
      {{{"vol_ewma", 1.0}}, "vol_ewma = 1.0"},
  };
  for (const auto& [params, message] : bad)
    EXPECT_NE(zs::test::error_of([&] { zs::make_env("market", 2, 1, params); }).find(message), std::string::npos)
        << params.dump();
}

// A checkpoint taken mid-run and loaded into a fresh env continues bit for bit; wrong files are refused.
TEST(VecEnv, SaveLoadContinuesExactly) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  for (const char* name : {"cartpole", "market"}) {
    SCOPED_TRACE(name);
    const int n = 37;
    zs::Stream stream;
    auto a = zs::make_env(name, n, seed);
    const int k = int(a->branches().size());
    zs::EnvActions actions("actions", n, k);
    std::mt19937_64 rng(seed);
    auto random_actions = [&] {
      std::vector<std::int32_t> v(n * k);
      for (auto& x : v) x = std::int32_t(rng() % 3);
      upload_actions(actions, v);
    };
    a->reset(stream.exec());
    for (int t = 0; t < 50; ++t) {
      random_actions();
      a->step(stream.exec(), actions);
    }
    const File f = snapshot(*a);
    auto b = zs::make_env(name, n, seed);
    b->load_state(f, "env.");
    for (int t = 0; t < 50; ++t) {
      random_actions();
      a->step(stream.exec(), actions);
      b->step(stream.exec(), actions);
    }
    stream.synchronize();
    EXPECT_TRUE(zs::test::same_bits(zs::test::to_host(a->obs), zs::test::to_host(b->obs)));
    EXPECT_EQ(zs::test::to_host(a->episodes_done), zs::test::to_host(b->episodes_done));
    EXPECT_TRUE(zs::test::same_bits(zs::test::to_host(a->last_return), zs::test::to_host(b->last_return)));
    EXPECT_EQ(snapshot(*a).tensors.at("env.state").bytes, snapshot(*b).tensors.at("env.state").bytes);

    auto other_n = zs::make_env(name, n + 1, seed);
    EXPECT_NE(zs::test::error_of([&] { other_n->load_state(f, "env."); }).find("expected [38"), std::string::npos);
    auto other_seed = zs::make_env(name, n, seed + 1);
    EXPECT_NE(zs::test::error_of([&] { other_seed->load_state(f, "env."); }).find("seed"), std::string::npos);
    auto other_env = zs::make_env(std::string(name) == "market" ? "cartpole" : "market", n, seed);
    EXPECT_NE(zs::test::error_of([&] { other_env->load_state(f, "env."); }).find("environment"), std::string::npos);
    EXPECT_NE(zs::test::error_of([&] { b->load_state(f, "other."); }).find("no 'other.env'"), std::string::npos);
  }
}

}  // namespace
