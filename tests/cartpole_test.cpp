// The cart-pole VecEnv against the published equations written naively in double, its episode
// semantics (terminal, truncation, auto-reset, stats), reset draws, reproducibility, graph replay,
// checkpoints and its clear errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "backends/graph.hpp"
#include "backends/stream.hpp"
#include "rl/envs.hpp"
#include "core/error.hpp"
#include "test_util.hpp"

namespace {

using zs::safetensors::File;
using zs::safetensors::Tensor;

File snapshot(const zs::VecEnv& env) {
  File f;
  env.save_state(f, "env.");
  return f;
}

std::vector<double> state_of(const zs::VecEnv& env) {
  return snapshot(env).f64("env.state", {env.size(), 4});
}

void set_state(zs::VecEnv& env, const std::vector<double>& state, const std::vector<std::int32_t>& len) {
  File f = snapshot(env);
  f.tensors["env.state"] = Tensor::from<double>({env.size(), 4}, state);
  f.tensors["env.episode_length"] = Tensor::from<std::int32_t>({env.size()}, len);
  env.load_state(f, "env.");
}

std::uint64_t counter_of(const zs::VecEnv& env) { return zs::test::to_host(env.rng_counter())[0]; }

void upload_actions(const zs::EnvActions& d, const std::vector<std::int32_t>& a) {
  auto h = Kokkos::create_mirror_view(d);
  for (std::size_t i = 0; i < a.size(); ++i) h.data()[i] = a[i];
  Kokkos::deep_copy(d, h);
}

// Gym's CartPole-v1 step, written out.
struct Ref {
  double s[4];
  bool terminal;
};
Ref reference_step(const double* in, int action, bool semi_implicit) {
  const double gravity = 9.8, masscart = 1.0, masspole = 0.1, total_mass = masspole + masscart;
  const double length = 0.5, polemass_length = masspole * length, force_mag = 10.0, tau = 0.02;
  const double theta_threshold_radians = 12 * 2 * M_PI / 360, x_threshold = 2.4;
  double x = in[0], x_dot = in[1], theta = in[2], theta_dot = in[3];
  const double force = action == 1 ? force_mag : -force_mag;
  const double costheta = std::cos(theta), sintheta = std::sin(theta);
  const double temp = (force + polemass_length * theta_dot * theta_dot * sintheta) / total_mass;
  const double thetaacc = (gravity * sintheta - costheta * temp) /
                          (length * (4.0 / 3.0 - masspole * costheta * costheta / total_mass));
  const double xacc = temp - polemass_length * thetaacc * costheta / total_mass;
  if (!semi_implicit) {
    x = x + tau * x_dot;
    x_dot = x_dot + tau * xacc;
    theta = theta + tau * theta_dot;
    theta_dot = theta_dot + tau * thetaacc;
  } else {
    x_dot = x_dot + tau * xacc;
    x = x + tau * x_dot;
    theta_dot = theta_dot + tau * thetaacc;
    theta = theta + tau * theta_dot;
  }
  const bool terminal = x < -x_threshold || x > x_threshold || theta < -theta_threshold_radians ||
                        theta > theta_threshold_radians;
  return {{x, x_dot, theta, theta_dot}, terminal};
}

double fresh_draw(std::uint64_t seed, std::uint64_t call, int env, int k) {
  const auto bits = zs::kernels::counter_rng_bits(seed, zs::kernels::kCartPoleRngStream, call, env, k);
  return 0.05 * (2.0 * (static_cast<double>(bits >> 11) / 9007199254740992.0) - 1.0);
}

void expect_close(double got, double want, double rel, const char* what, int i, int k) {
  EXPECT_NEAR(got, want, rel * (1.0 + std::fabs(want))) << what << " env " << i << " component " << k;
}

void check_dynamics(bool semi_implicit, int n, std::uint64_t seed) {
  SCOPED_TRACE(testing::Message() << "seed " << seed << ", N " << n << ", semi_implicit " << semi_implicit);
  zs::Stream stream;
  auto env = zs::make_env("cartpole", n, seed,
                          {{"integrator", semi_implicit ? "semi_implicit" : "euler"}, {"max_episode_steps", 6}});
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> wide(-2.0, 2.0), angle(-0.2, 0.2);
  std::vector<double> state(n * 4);
  std::vector<std::int32_t> len(n);
  for (int i = 0; i < n; ++i) {
    state[4 * i + 0] = wide(rng);
    state[4 * i + 1] = wide(rng);
    state[4 * i + 2] = angle(rng);
    state[4 * i + 3] = wide(rng);
    len[i] = static_cast<std::int32_t>(rng() % 6);
  }
  set_state(*env, state, len);
  zs::EnvActions actions("actions", n, 1);
  const std::int32_t choices[] = {0, 1, -1, 2, 7, -100};  // out of range: clamped
  for (int t = 0; t < 8; ++t) {
    std::vector<std::int32_t> a(n);
    for (auto& x : a) x = choices[rng() % 6];
    upload_actions(actions, a);
    const std::uint64_t call = counter_of(*env);
    env->step(stream.exec(), actions);
    stream.synchronize();
    const auto got = state_of(*env);
    const auto next_obs = zs::test::to_host(env->next_obs);
    const auto obs = zs::test::to_host(env->obs);
    const auto term = zs::test::to_host(env->terminated);
    const auto trunc = zs::test::to_host(env->truncated);
    const auto reward = zs::test::to_host(env->reward);
    const auto ep_len = zs::test::to_host(env->episode_length);
    for (int i = 0; i < n; ++i) {
      const int act = a[i] <= 0 ? 0 : 1;
      const Ref r = reference_step(&state[4 * i], act, semi_implicit);
      const bool truncated = !r.terminal && len[i] + 1 >= 6;
      ASSERT_EQ(term[i], r.terminal ? 1.f : 0.f) << "env " << i << " step " << t;
      ASSERT_EQ(trunc[i], truncated ? 1.f : 0.f) << "env " << i << " step " << t;
      EXPECT_EQ(reward[i], 1.f);
      for (int k = 0; k < 4; ++k)
        expect_close(next_obs[4 * i + k], static_cast<float>(r.s[k]), 1e-6, "next_obs", i, k);
      if (r.terminal || truncated) {
        for (int k = 0; k < 4; ++k) state[4 * i + k] = fresh_draw(seed, call, i, k);
        len[i] = 0;
      } else {
        for (int k = 0; k < 4; ++k) state[4 * i + k] = r.s[k];
        len[i] += 1;
      }
      EXPECT_EQ(ep_len[i], len[i]);
      for (int k = 0; k < 4; ++k) {
        expect_close(got[4 * i + k], state[4 * i + k], 1e-12, "state", i, k);
        expect_close(obs[4 * i + k], static_cast<float>(state[4 * i + k]), 1e-6, "obs", i, k);
      }
    }
    state.assign(got.begin(), got.end());  // no drift between the two over the steps
  }
}

TEST(CartPole, DynamicsMatchTheEquationsInDouble) {
  for (int n : {1, 7, 97, 1000}) check_dynamics(false, n, zs::test::fresh_seed());
}

TEST(CartPole, SemiImplicitIntegratorIsAnOption) {
  for (int n : {3, 131}) check_dynamics(true, n, zs::test::fresh_seed());
}

TEST(CartPole, TerminalStepEndsTheEpisodeAndAutoResets) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  zs::Stream stream;
  auto env = zs::make_env("cartpole", 3, seed);
  EXPECT_EQ(env->max_episode_steps(), 500);
  EXPECT_EQ(env->obs_dim(), 4);
  EXPECT_EQ(env->branches(), std::vector<int>{2});
  env->reset(stream.exec());
  // env 0 runs off the track; env 1 is on its 500th step (truncated); env 2 both (terminal wins).
  set_state(*env, {2.39, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -0.2, -1.0}, {10, 499, 499});
  File f = snapshot(*env);
  f.tensors["env.episode_return"] = Tensor::from<float>({3}, {10.f, 499.f, 499.f});
  env->load_state(f, "env.");
  zs::EnvActions actions("actions", 3, 1);
  upload_actions(actions, {1, 1, 0});
  const std::uint64_t call = counter_of(*env);
  env->step(stream.exec(), actions);
  stream.synchronize();
  EXPECT_EQ(zs::test::to_host(env->terminated), (std::vector<float>{1.f, 0.f, 1.f}));
  EXPECT_EQ(zs::test::to_host(env->truncated), (std::vector<float>{0.f, 1.f, 0.f}));
  EXPECT_EQ(zs::test::to_host(env->reward), (std::vector<float>{1.f, 1.f, 1.f}));
  EXPECT_EQ(zs::test::to_host(env->episodes_done), (std::vector<std::int32_t>{1, 1, 1}));
  EXPECT_EQ(zs::test::to_host(env->first_return), (std::vector<float>{11.f, 500.f, 500.f}));
  EXPECT_EQ(zs::test::to_host(env->last_return), (std::vector<float>{11.f, 500.f, 500.f}));
  EXPECT_EQ(zs::test::to_host(env->episode_return), (std::vector<float>{0.f, 0.f, 0.f}));
  EXPECT_EQ(zs::test::to_host(env->episode_length), (std::vector<std::int32_t>{0, 0, 0}));
  const auto next_obs = zs::test::to_host(env->next_obs);
  EXPECT_NEAR(next_obs[0], 2.41f, 1e-6f);  // the final observation, before the reset
  const auto obs = zs::test::to_host(env->obs);
  for (int i = 0; i < 3; ++i)
    for (int k = 0; k < 4; ++k)
      EXPECT_EQ(obs[4 * i + k], static_cast<float>(fresh_draw(seed, call, i, k))) << i << "," << k;

  // A second episode: first_return keeps the first, last_return follows.
  set_state(*env, {2.39, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0}, {2, 0, 0});
  env->step(stream.exec(), actions);
  stream.synchronize();
  EXPECT_EQ(zs::test::to_host(env->episodes_done), (std::vector<std::int32_t>{2, 1, 1}));
  EXPECT_EQ(zs::test::to_host(env->first_return)[0], 11.f);
  EXPECT_EQ(zs::test::to_host(env->last_return)[0], 1.f);  // set_state left its return at 0
}

TEST(CartPole, TruncatesAtTheTimeLimitWithoutTerminating) {
  zs::Stream stream;
  auto env = zs::make_env("cartpole", 5, zs::test::fresh_seed(), {{"max_episode_steps", 3}});
  env->reset(stream.exec());
  zs::EnvActions actions("actions", 5, 1);
  upload_actions(actions, {0, 1, 0, 1, 0});
  for (int t = 1; t <= 7; ++t) {
    env->step(stream.exec(), actions);
    stream.synchronize();
    const float want = t % 3 == 0 ? 1.f : 0.f;
    for (float x : zs::test::to_host(env->truncated)) EXPECT_EQ(x, want) << "step " << t;
    for (float x : zs::test::to_host(env->terminated)) EXPECT_EQ(x, 0.f) << "step " << t;
    for (auto x : zs::test::to_host(env->episodes_done)) EXPECT_EQ(x, t / 3) << "step " << t;
    for (auto x : zs::test::to_host(env->episode_length)) EXPECT_EQ(x, t % 3) << "step " << t;
  }
  for (float x : zs::test::to_host(env->first_return)) EXPECT_EQ(x, 3.f);
  for (float x : zs::test::to_host(env->last_return)) EXPECT_EQ(x, 3.f);
}

TEST(CartPole, ResetDrawsFreshStartsInsideTheBoundsAndClearsStats) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const int n = 4099;
  zs::Stream stream;
  auto env = zs::make_env("cartpole", n, seed);
  zs::EnvActions actions("actions", n, 1);
  env->reset(stream.exec());
  for (int t = 0; t < 30; ++t) env->step(stream.exec(), actions);  // some episodes end
  env->reset(stream.exec());
  stream.synchronize();
  const auto obs = zs::test::to_host(env->obs);
  EXPECT_EQ(obs, zs::test::to_host(env->next_obs));
  for (int k = 0; k < 4; ++k) {
    double sum = 0, sq = 0;
    for (int i = 0; i < n; ++i) {
      const double x = obs[4 * i + k];
      ASSERT_LE(std::fabs(x), 0.05) << i << "," << k;
      sum += x;
      sq += x * x;
    }
    // U(−0.05, 0.05): mean 0 (sd of the mean 0.029/√n), variance 0.05²/3.
    EXPECT_NEAR(sum / n, 0.0, 5 * 0.0289 / std::sqrt(n));
    EXPECT_NEAR(sq / n, 0.05 * 0.05 / 3, 0.15 * 0.05 * 0.05 / 3);
  }
  for (auto x : zs::test::to_host(env->episodes_done)) ASSERT_EQ(x, 0);
  for (auto x : zs::test::to_host(env->episode_length)) ASSERT_EQ(x, 0);
  for (auto x : zs::test::to_host(env->episode_return)) ASSERT_EQ(x, 0.f);
  for (auto x : zs::test::to_host(env->first_return)) ASSERT_TRUE(std::isnan(x));
  for (auto x : zs::test::to_host(env->last_return)) ASSERT_TRUE(std::isnan(x));
  env->reset(stream.exec());
  stream.synchronize();
  EXPECT_NE(obs, zs::test::to_host(env->obs));  // every reset draws anew
}

// Two envs of one seed fed the same actions: bitwise the same; another seed: different.
TEST(CartPole, ReproducibleFromTheSeed) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const int n = 33;
  zs::Stream stream;
  auto a = zs::make_env("cartpole", n, seed), b = zs::make_env("cartpole", n, seed);
  auto c = zs::make_env("cartpole", n, seed + 1);
  zs::EnvActions actions("actions", n, 1);
  std::mt19937_64 rng(seed);
  a->reset(stream.exec());
  b->reset(stream.exec());
  c->reset(stream.exec());
  stream.synchronize();
  EXPECT_NE(zs::test::to_host(a->obs), zs::test::to_host(c->obs));
  for (int t = 0; t < 300; ++t) {
    std::vector<std::int32_t> act(n);
    for (auto& x : act) x = static_cast<std::int32_t>(rng() % 2);
    upload_actions(actions, act);
    a->step(stream.exec(), actions);
    b->step(stream.exec(), actions);
    stream.synchronize();
    ASSERT_TRUE(zs::test::same_bits(zs::test::to_host(a->obs), zs::test::to_host(b->obs))) << t;
    ASSERT_TRUE(zs::test::same_bits(zs::test::to_host(a->next_obs), zs::test::to_host(b->next_obs))) << t;
    ASSERT_EQ(zs::test::to_host(a->terminated), zs::test::to_host(b->terminated)) << t;
  }
  EXPECT_EQ(state_of(*a), state_of(*b));
  EXPECT_GT(zs::test::to_host(a->episodes_done)[0], 0);  // auto-resets were exercised
}

// step() recorded once into a graph and replayed with new actions copied in between matches a
// twin stepped directly, bit for bit, auto-reset draws included.
TEST(CartPole, GraphReplayMatchesDirectSteps) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const int n = 257;
  zs::Stream stream;
  auto direct = zs::make_env("cartpole", n, seed), graphed = zs::make_env("cartpole", n, seed);
  zs::EnvActions actions("actions", n, 1);
  direct->reset(stream.exec());
  graphed->reset(stream.exec());
  auto body = [&] { graphed->step(stream.exec(), actions); };
  direct->step(stream.exec(), actions);
  body();
  stream.synchronize();
  zs::Graph graph;
  graph.capture(stream, body);
  ASSERT_TRUE(graph.captured());
  std::mt19937_64 rng(seed);
  for (int t = 0; t < 60; ++t) {
    std::vector<std::int32_t> act(n);
    for (auto& x : act) x = static_cast<std::int32_t>(rng() % 2);
    upload_actions(actions, act);
    direct->step(stream.exec(), actions);
    graph.replay(stream);
    stream.synchronize();
    ASSERT_TRUE(zs::test::same_bits(zs::test::to_host(direct->obs), zs::test::to_host(graphed->obs))) << t;
    ASSERT_TRUE(zs::test::same_bits(zs::test::to_host(direct->next_obs), zs::test::to_host(graphed->next_obs))) << t;
    ASSERT_EQ(zs::test::to_host(direct->truncated), zs::test::to_host(graphed->truncated)) << t;
    ASSERT_EQ(zs::test::to_host(direct->terminated), zs::test::to_host(graphed->terminated)) << t;
  }
  EXPECT_EQ(counter_of(*graphed), counter_of(*direct));
  EXPECT_GT(zs::test::to_host(graphed->episodes_done)[0] + zs::test::to_host(graphed->episodes_done)[1], 0);
}

TEST(CartPole, MisuseIsAClearError) {
  zs::Stream stream;
  auto env = zs::make_env("cartpole", 4, 1);
  zs::EnvActions wrong_n("a", 5, 1), wrong_k("a", 4, 3);
  EXPECT_NE(zs::test::error_of([&] { env->step(stream.exec(), wrong_n); }).find("expected [4, 1]"), std::string::npos);
  EXPECT_NE(zs::test::error_of([&] { env->step(stream.exec(), wrong_k); }).find("actions is [4, 3]"), std::string::npos);
  EXPECT_NE(zs::test::error_of([] { zs::make_env("cartpole", 0, 1); }).find("n = 0"), std::string::npos);
  EXPECT_NE(zs::test::error_of([] { zs::make_env("pendulum", 1, 1); }).find("unknown environment 'pendulum'"),
            std::string::npos);
  EXPECT_NE(zs::test::error_of([] { zs::make_env("cartpole", 1, 1, {{"gravity", 9.8}}); })
                .find("unknown key 'gravity'"),
            std::string::npos);
  EXPECT_NE(zs::test::error_of([] { zs::make_env("cartpole", 1, 1, {{"max_episode_steps", 0}}); })
                .find("max_episode_steps = 0"),
            std::string::npos);
  EXPECT_NE(zs::test::error_of([] { zs::make_env("cartpole", 1, 1, {{"integrator", "rk4"}}); })
                .find("integrator = \"rk4\""),
            std::string::npos);
  EXPECT_NE(zs::test::error_of([] { zs::make_env("cartpole", 1, 1, nlohmann::json::array()); })
                .find("expected a JSON object"),
            std::string::npos);
}

}  // namespace
