// The replay buffer against a naive host reference: n-step windows (episode ends, truncations,
// ring wrap-around, N not a power of two, n = 1 and n > 1), sampling frequencies vs priorities,
// IS weights, priority updates (NaN, duplicates, stale entries), save/load and a graph replay.
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "backends/graph.hpp"
#include "backends/stream.hpp"
#include "core/error.hpp"
#include "rl/replay.hpp"
#include "test_util.hpp"

namespace {

using LR = Kokkos::LayoutRight;
using zs::MemSpace;

// One inserted step of all envs.
struct StepRow {
  std::vector<float> obs, next;  // [N, S]
  std::vector<std::int32_t> act;  // [N, K]
  std::vector<float> reward, term, trunc;  // [N]
};

StepRow random_step(std::mt19937_64& rng, int N, int S, int K, double p_term, double p_trunc) {
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_real_distribution<double> u01(0, 1);
  StepRow s;
  for (int i = 0; i < N * S; ++i) s.obs.push_back(normal(rng)), s.next.push_back(normal(rng));
  for (int i = 0; i < N * K; ++i) s.act.push_back(static_cast<std::int32_t>(rng() % 7));
  for (int e = 0; e < N; ++e) {
    s.reward.push_back(2.f * normal(rng));
    s.term.push_back(u01(rng) < p_term ? 1.f : 0.f);
    s.trunc.push_back(u01(rng) < p_trunc ? 1.f : 0.f);
  }
  return s;
}

// The naive reference: every step ever inserted, and the n-step rule evaluated from scratch.
struct Reference {
  int N, S, K, T, n;
  double gamma;
  std::vector<StepRow> steps;

  struct Entry {
    bool sampleable = false;
    double R = 0;
    float done = 0;
    long long last = 0;  // step whose next_obs is s′
  };
  bool ended(long long t, int e) const { return steps[t].term[e] >= 0.5f || steps[t].trunc[e] >= 0.5f; }
  Entry entry(long long t, int e) const {
    Entry x;
    const long long total = static_cast<long long>(steps.size());
    if (t < 0 || t < total - T || t >= total) return x;  // not in the ring
    int m = n;
    for (int k = 0; k < n; ++k) {
      if (t + k >= total) return x;  // window incomplete
      if (ended(t + k, e)) {
        m = k + 1;
        break;
      }
    }
    const long long last = t + m - 1;
    const bool term = steps[last].term[e] >= 0.5f;
    if (m < n && !term) return x;  // cut by a truncation: dropped
    double g = 1;
    for (int i = 0; i < m; ++i) x.R += g * steps[t + i].reward[e], g *= gamma;
    x.sampleable = true;
    x.done = term ? 1.f : 0.f;
    x.last = last;
    return x;
  }
  // The step held by ring row r, or −1.
  long long step_in_row(long long r) const {
    const long long total = static_cast<long long>(steps.size());
    if (total <= r) return -1;
    return r + ((total - 1 - r) / T) * T;
  }
  long long sampleable_count() const {
    long long c = 0;
    for (long long r = 0; r < T; ++r)
      for (int e = 0; e < N; ++e) c += entry(step_in_row(r), e).sampleable;
    return c;
  }
};

struct Inputs {
  Kokkos::View<float**, LR, MemSpace> obs, next;
  Kokkos::View<std::int32_t**, LR, MemSpace> act;
  Kokkos::View<float*, MemSpace> reward, term, trunc;
  Inputs(int N, int S, int K)
      : obs("obs", N, S), next("next", N, S), act("act", N, K), reward("r", N), term("term", N), trunc("trunc", N) {}
  template <class V, class T>
  static void put(const V& v, const std::vector<T>& d) {
    auto h = Kokkos::create_mirror_view(v);
    std::copy(d.begin(), d.end(), h.data());
    Kokkos::deep_copy(v, h);
  }
  void set(const StepRow& s) {
    put(obs, s.obs), put(next, s.next), put(act, s.act), put(reward, s.reward), put(term, s.term),
        put(trunc, s.trunc);
  }
  void insert_into(zs::Replay& r, const zs::ExecSpace& exec) const { r.insert(exec, obs, act, reward, next, term, trunc); }
};

zs::Config batch_config(int S, int K) {
  zs::Config c;
  c.state_dim = S;
  c.branches = std::vector<int>(K, 7);
  return c;
}

struct HostBatchOut {
  std::vector<float> states, rewards, dones, weights;
  std::vector<int> actions;
  std::vector<std::int64_t> idx;
  std::vector<double> tree;
  std::int64_t count = 0;
};

HostBatchOut read_back(const zs::Replay& r, const zs::DeviceBatch& b) {
  HostBatchOut o;
  o.states = zs::test::to_host(b.stacked_states);
  o.rewards = zs::test::to_host(b.rewards);
  o.dones = zs::test::to_host(b.dones);
  o.weights = zs::test::to_host(b.weights);
  o.actions = zs::test::to_host(b.actions);
  o.idx = zs::test::to_host(r.sampled_indices());
  o.tree = zs::test::to_host(r.sum_tree());
  Kokkos::deep_copy(o.count, r.sampleable());
  return o;
}

zs::DeviceScalar<float> device_beta(float beta) {
  zs::DeviceScalar<float> b("beta");
  Kokkos::deep_copy(b, beta);
  return b;
}

// Checks the whole buffer state and one sampled batch against the reference.
void check_against_reference(const Reference& ref, const zs::Replay& r, const HostBatchOut& o, float beta,
                             bool prioritized) {
  const int N = ref.N, S = ref.S, K = ref.K;
  const long long P = r.tree_leaves();
  ASSERT_EQ(o.count, ref.sampleable_count());
  long long live = 0;
  for (long long row = 0; row < ref.T; ++row)
    for (int e = 0; e < N; ++e) {
      const auto x = ref.entry(ref.step_in_row(row), e);
      const double leaf = o.tree[P + row * N + e];
      ASSERT_EQ(leaf > 0, x.sampleable) << "row " << row << " env " << e << " step " << ref.step_in_row(row);
      if (!prioritized && x.sampleable) {
        ASSERT_EQ(leaf, 1.0);
      }
      live += x.sampleable;
    }
  const int B = static_cast<int>(o.idx.size());
  const double total = o.tree[1];
  if (live == 0) {
    for (int i = 0; i < B; ++i) {
      EXPECT_EQ(o.idx[i], -1);
      EXPECT_EQ(o.weights[i], 0.f);
      EXPECT_EQ(o.rewards[i], 0.f);
    }
    for (float s : o.states) EXPECT_EQ(s, 0.f);
    return;
  }
  std::vector<double> w(B);
  for (int i = 0; i < B; ++i) {
    SCOPED_TRACE(testing::Message() << "sample " << i);
    const std::int64_t j = o.idx[i];
    ASSERT_GE(j, 0);
    if (i > 0) {
      ASSERT_GE(j, o.idx[i - 1]) << "update_priorities relies on non-decreasing indices";
    }
    const long long row = j / N;
    const int e = static_cast<int>(j % N);
    const long long t = ref.step_in_row(row);
    const auto x = ref.entry(t, e);
    ASSERT_TRUE(x.sampleable) << "drew a non-sampleable entry: step " << t << " env " << e;
    EXPECT_NEAR(o.rewards[i], x.R, 1e-5 * std::max(1.0, std::fabs(x.R)));
    EXPECT_EQ(o.dones[i], x.done);
    for (int k = 0; k < K; ++k) EXPECT_EQ(o.actions[i * K + k], ref.steps[t].act[e * K + k]);
    for (int c = 0; c < S; ++c) {
      EXPECT_EQ(o.states[i * S + c], ref.steps[t].obs[e * S + c]);
      EXPECT_EQ(o.states[(B + i) * S + c], ref.steps[x.last].next[e * S + c]);
    }
    w[i] = std::pow(double(live) * o.tree[P + j] / total, -double(beta));
  }
  const double wmax = *std::max_element(w.begin(), w.end());
  for (int i = 0; i < B; ++i) {
    const double expect = prioritized ? w[i] / wmax : 1.0;
    EXPECT_NEAR(o.weights[i], expect, 1e-5 * expect) << "sample " << i;
  }
}

struct Case {
  int N, S, K, capacity, n, B;
  double p_term, p_trunc;
};

void run_reference_case(const Case& cs, bool prioritized, std::uint64_t seed) {
  SCOPED_TRACE(testing::Message() << "N " << cs.N << " S " << cs.S << " K " << cs.K << " capacity " << cs.capacity
                                  << " n " << cs.n << " B " << cs.B << " prioritized " << prioritized
                                  << " seed " << seed);
  std::mt19937_64 rng(seed);
  zs::ReplayConfig rc;
  rc.capacity = cs.capacity;
  rc.n_step = cs.n;
  rc.gamma = 0.9f;
  rc.prioritized = prioritized;
  rc.seed = seed;
  zs::Stream stream;
  zs::Replay replay(rc, cs.N, cs.S, cs.K);
  const int T = replay.rows();
  ASSERT_EQ(T, cs.capacity / cs.N);
  Reference ref{cs.N, cs.S, cs.K, T, cs.n, double(rc.gamma), {}};
  Inputs in(cs.N, cs.S, cs.K);
  zs::DeviceBatch batch(batch_config(cs.S, cs.K), cs.B);
  zs::DeviceFloats prio("prio", cs.B);
  std::uniform_real_distribution<float> u01(0.f, 1.f);
  const int total_steps = 3 * T + 5;  // wraps the ring more than twice
  for (int t = 0; t < total_steps; ++t) {
    SCOPED_TRACE(testing::Message() << "after insert " << t);
    ref.steps.push_back(random_step(rng, cs.N, cs.S, cs.K, cs.p_term, cs.p_trunc));
    in.set(ref.steps.back());
    in.insert_into(replay, stream.exec());
    const float beta = u01(rng);
    auto b = device_beta(beta);
    replay.sample(stream.exec(), batch, b);
    stream.synchronize();
    const auto o = read_back(replay, batch);
    check_against_reference(ref, replay, o, beta, prioritized);
    if (testing::Test::HasFatalFailure() || testing::Test::HasNonfatalFailure()) return;
    // Make the tree uneven (and poke NaN at it) so the next draws and weights are non-trivial.
    std::vector<float> p(cs.B);
    for (auto& x : p) x = u01(rng) < 0.05f ? std::numeric_limits<float>::quiet_NaN() : 5.f * u01(rng);
    Inputs::put(prio, p);
    replay.update_priorities(stream.exec(), prio);
  }
}

}  // namespace

TEST(NStep, MatchesNaiveReferenceWithEndsTruncationsAndWrapAround) {
  const std::vector<Case> cases = {
      {1, 1, 1, 7, 1, 5, 0.1, 0.1},      // n = 1, one env
      {3, 5, 2, 33, 3, 17, 0.15, 0.1},   // N = 3, T = 11
      {5, 4, 3, 37, 4, 13, 0.1, 0.08},   // capacity rounded down (35), T = 7
      {7, 3, 1, 35, 5, 31, 0.05, 0.05},  // T = n = 5: the tightest ring
      {6, 2, 2, 60, 3, 64, 0.0, 0.3},    // truncations only
      {2, 3, 1, 26, 4, 9, 0.0, 0.0},     // no episode ends
  };
  for (const auto& cs : cases)
    for (bool prioritized : {false, true}) {
      run_reference_case(cs, prioritized, zs::test::fresh_seed());
      if (HasFailure()) return;
    }
}

TEST(NStep, TruncationDropsShortWindowsAndTerminationKeepsThem) {
  // One env, n = 3, by hand. Steps 0..9; step 4 truncates, step 8 terminates.
  zs::ReplayConfig rc;
  rc.capacity = 16;
  rc.n_step = 3;
  rc.gamma = 0.5f;
  rc.prioritized = false;
  zs::Stream stream;
  zs::Replay replay(rc, 1, 1, 1);
  Inputs in(1, 1, 1);
  std::vector<std::int64_t> counts;
  for (int t = 0; t < 10; ++t) {
    StepRow s{{float(t)}, {float(t) + 0.5f}, {t}, {float(t + 1)}, {t == 8 ? 1.f : 0.f}, {t == 4 ? 1.f : 0.f}};
    in.set(s);
    in.insert_into(replay, stream.exec());
    stream.synchronize();
    std::int64_t c = 0;
    Kokkos::deep_copy(c, replay.sampleable());
    counts.push_back(c);
  }
  // After step t: entries 0..t−2 complete (m = n) unless their window was cut. Step 4 (trunc):
  // entry 2 (m = 3, bootstraps) completes; entries 3, 4 (m = 2, 1 < n) are dropped. Step 8
  // (term): entries 6, 7, 8 complete with done = 1; entry 5 completed at step 7 normally.
  const std::vector<std::int64_t> expected = {0, 0, 1, 2, 3, 3, 3, 4, 7, 7};
  EXPECT_EQ(counts, expected);
  const auto tree = zs::test::to_host(replay.sum_tree());
  const long long P = replay.tree_leaves();
  const std::vector<double> leaves(tree.begin() + P, tree.begin() + P + 10);
  EXPECT_EQ(leaves, (std::vector<double>{1, 1, 1, 0, 0, 1, 1, 1, 1, 0}));
}

TEST(Replay, PrioritizedFrequenciesFollowPrioritiesToTheAlpha) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  const int N = 3, S = 2, K = 1, C = 30;
  zs::ReplayConfig rc;
  rc.capacity = C;
  rc.n_step = 1;
  rc.alpha = 0.6f;
  rc.seed = seed;
  zs::Stream stream;
  zs::Replay replay(rc, N, S, K);
  Inputs in(N, S, K);
  for (int t = 0; t < C / N; ++t) {
    in.set(random_step(rng, N, S, K, 0.2, 0.2));  // n = 1: every entry is sampleable at once
    in.insert_into(replay, stream.exec());
  }
  // Equal leaves and B = C strata: the draw is each entry once, in order.
  zs::DeviceBatch all(batch_config(S, K), C);
  auto beta = device_beta(0.4f);
  replay.sample(stream.exec(), all, beta);
  stream.synchronize();
  auto idx = zs::test::to_host(replay.sampled_indices());
  for (int i = 0; i < C; ++i) ASSERT_EQ(idx[i], i);
  std::vector<float> p(C);
  std::uniform_real_distribution<double> logu(std::log(0.01), std::log(20.0));
  for (auto& x : p) x = static_cast<float>(std::exp(logu(rng))) * (rng() % 2 ? 1.f : -1.f);
  zs::DeviceFloats prio("prio", C);
  Inputs::put(prio, p);
  replay.update_priorities(stream.exec(), prio);
  stream.synchronize();
  std::vector<double> q(C);
  double sum = 0, sum_raw = 0, qmax = 1;
  for (int i = 0; i < C; ++i) {
    q[i] = std::pow(std::fabs(double(p[i])) + double(rc.priority_eps), double(rc.alpha));
    sum += q[i], sum_raw += std::fabs(p[i]);
    qmax = std::max(qmax, q[i]);
  }
  const auto tree = zs::test::to_host(replay.sum_tree());
  for (int i = 0; i < C; ++i) EXPECT_NEAR(tree[replay.tree_leaves() + i], q[i], 1e-12 * q[i]);
  EXPECT_NEAR(tree[1], sum, 1e-12 * sum);
  double mp = 0;
  Kokkos::deep_copy(mp, replay.max_priority());
  EXPECT_NEAR(mp, qmax, 1e-12 * qmax);

  const int B = 32, draws = 4000;
  zs::DeviceBatch batch(batch_config(S, K), B);
  std::vector<double> hits(C, 0);
  for (int d = 0; d < draws; ++d) {
    replay.sample(stream.exec(), batch, beta);
    stream.synchronize();
    idx = zs::test::to_host(replay.sampled_indices());
    for (auto j : idx) hits[j] += 1;
    if (d < 20) {  // the IS weights against the formula, with the known priorities
      const auto w = zs::test::to_host(batch.weights);
      std::vector<double> ref(B);
      for (int i = 0; i < B; ++i) ref[i] = std::pow(C * q[idx[i]] / sum, -0.4);
      const double top = *std::max_element(ref.begin(), ref.end());
      for (int i = 0; i < B; ++i) EXPECT_NEAR(w[i], ref[i] / top, 1e-5) << "draw " << d << " sample " << i;
    }
  }
  const double n = double(B) * draws;
  double chi2 = 0, chi2_no_alpha = 0;
  for (int i = 0; i < C; ++i) {
    const double e = n * q[i] / sum, e_raw = n * std::fabs(p[i]) / sum_raw;
    chi2 += (hits[i] - e) * (hits[i] - e) / e;
    chi2_no_alpha += (hits[i] - e_raw) * (hits[i] - e_raw) / e_raw;
  }
  // df = 29: mean 29, sd 7.6; stratified draws only lower the statistic. 100 is > 9 sd out.
  EXPECT_LT(chi2, 100.0);
  EXPECT_GT(chi2_no_alpha, 1000.0) << "the test cannot tell α applied from not";
}

TEST(Replay, UniformFrequenciesAreFlatAndWeightsOne) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  const int N = 5, S = 3, K = 2, C = 35, B = 16, draws = 3000;
  zs::ReplayConfig rc;
  rc.capacity = C;
  rc.n_step = 1;
  rc.prioritized = false;
  rc.seed = seed;
  zs::Stream stream;
  zs::Replay replay(rc, N, S, K);
  Inputs in(N, S, K);
  for (int t = 0; t < C / N; ++t) {
    in.set(random_step(rng, N, S, K, 0.3, 0.3));
    in.insert_into(replay, stream.exec());
  }
  zs::DeviceBatch batch(batch_config(S, K), B);
  auto beta = device_beta(1.f);
  zs::DeviceFloats prio("prio", B);
  Kokkos::deep_copy(prio, 100.f);
  std::vector<double> hits(C, 0);
  for (int d = 0; d < draws; ++d) {
    replay.sample(stream.exec(), batch, beta);
    replay.update_priorities(stream.exec(), prio);  // a no-op when uniform
    stream.synchronize();
    for (auto j : zs::test::to_host(replay.sampled_indices())) hits[j] += 1;
    for (float w : zs::test::to_host(batch.weights)) ASSERT_EQ(w, 1.f);
  }
  const double e = double(B) * draws / C;
  double chi2 = 0;
  for (double h : hits) chi2 += (h - e) * (h - e) / e;
  EXPECT_LT(chi2, 34 + 9 * std::sqrt(68.0));  // df = 34
  const auto tree = zs::test::to_host(replay.sum_tree());
  EXPECT_EQ(tree[1], double(C));
}

TEST(Replay, PriorityUpdateSkipsNonFiniteAndResolvesDuplicatesLastWins) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  const int N = 1, C = 5, B = 10;
  zs::ReplayConfig rc;
  rc.capacity = C;
  rc.n_step = 1;
  rc.alpha = 0.7f;
  rc.priority_eps = 1e-3f;
  zs::Stream stream;
  zs::Replay replay(rc, N, 2, 1);
  Inputs in(N, 2, 1);
  for (int t = 0; t < C; ++t) {
    in.set(random_step(rng, N, 2, 1, 0, 0));
    in.insert_into(replay, stream.exec());
  }
  zs::DeviceBatch batch(batch_config(2, 1), B);
  replay.sample(stream.exec(), batch, device_beta(0.5f));
  stream.synchronize();
  const auto idx = zs::test::to_host(replay.sampled_indices());
  // Equal leaves, B = 2C strata: each entry twice, in order.
  for (int i = 0; i < B; ++i) ASSERT_EQ(idx[i], i / 2);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  // Pairs: (a, b) → b; (a, NaN) → a; (NaN, NaN) → kept; (Inf, b) → b; (a, −Inf) → a.
  const std::vector<float> p = {3.f, -0.25f, 7.f, nan, nan, nan, inf, 0.f, -2.f, -inf};
  const std::vector<double> winner = {-0.25, 7, std::nan(""), 0, -2};
  zs::DeviceFloats prio("prio", B);
  Inputs::put(prio, p);
  replay.update_priorities(stream.exec(), prio);
  stream.synchronize();
  const auto tree = zs::test::to_host(replay.sum_tree());
  const long long P = replay.tree_leaves();
  double sum = 0, top = 1;
  for (int j = 0; j < C; ++j) {
    const double expect = std::isnan(winner[j]) ? 1.0 : std::pow(std::fabs(winner[j]) + double(rc.priority_eps), double(rc.alpha));
    EXPECT_NEAR(tree[P + j], expect, 1e-13 * expect) << "entry " << j;
    sum += expect, top = std::max(top, expect);
  }
  EXPECT_NEAR(tree[1], sum, 1e-14 * sum);
  double mp = 0;
  Kokkos::deep_copy(mp, replay.max_priority());
  EXPECT_NEAR(mp, top, 1e-13 * top);
  // A whole NaN batch changes nothing.
  replay.sample(stream.exec(), batch, device_beta(0.5f));
  Kokkos::deep_copy(prio, nan);
  replay.update_priorities(stream.exec(), prio);
  stream.synchronize();
  EXPECT_TRUE(zs::test::same_bits(zs::test::to_host(replay.sum_tree()), tree));
}

TEST(Replay, UpdateAfterOverwriteLeavesTheNewEntryAlone) {
  // n = 2: a row overwritten between sample() and update_priorities() holds a step whose window
  // is still open (leaf 0); the stale update must not make it sampleable.
  zs::ReplayConfig rc;
  rc.capacity = 4;
  rc.n_step = 2;
  zs::Stream stream;
  zs::Replay replay(rc, 2, 1, 1);
  Inputs in(2, 1, 1);
  std::mt19937_64 rng(zs::test::fresh_seed());
  for (int t = 0; t < 3; ++t) {
    in.set(random_step(rng, 2, 1, 1, 0, 0));
    in.insert_into(replay, stream.exec());
  }
  zs::DeviceBatch batch(batch_config(1, 1), 4);
  replay.sample(stream.exec(), batch, device_beta(0.5f));
  in.set(random_step(rng, 2, 1, 1, 0, 0));
  in.insert_into(replay, stream.exec());  // overwrites row 1 (entries 2, 3), completes row 0
  zs::DeviceFloats prio("prio", 4);
  Kokkos::deep_copy(prio, 50.f);
  replay.update_priorities(stream.exec(), prio);
  stream.synchronize();
  const auto idx = zs::test::to_host(replay.sampled_indices());
  const auto tree = zs::test::to_host(replay.sum_tree());
  const long long P = replay.tree_leaves();
  EXPECT_EQ(tree[P + 2], 0.0);
  EXPECT_EQ(tree[P + 3], 0.0);
  std::int64_t count = 0;
  Kokkos::deep_copy(count, replay.sampleable());
  EXPECT_EQ(count, 2);
  for (auto j : idx) EXPECT_TRUE(j == 2 || j == 3) << j;  // only row 1 was sampleable
  EXPECT_EQ(tree[P + 0], 1.0);  // completed at the running max, which the stale update did not raise
  EXPECT_EQ(tree[P + 1], 1.0);
}

TEST(Replay, UpdateAfterOverwriteWithNStepOneSkipsTheNewStep) {
  // n = 1: the overwriting step is sampleable at once (leaf = max priority), so only the
  // remembered step stamp tells the stale update apart.
  zs::ReplayConfig rc;
  rc.capacity = 2;
  rc.n_step = 1;
  rc.alpha = 0.5f;
  zs::Stream stream;
  zs::Replay replay(rc, 1, 1, 1);
  Inputs in(1, 1, 1);
  std::mt19937_64 rng(zs::test::fresh_seed());
  for (int t = 0; t < 2; ++t) {
    in.set(random_step(rng, 1, 1, 1, 0, 0));
    in.insert_into(replay, stream.exec());
  }
  zs::DeviceBatch batch(batch_config(1, 1), 2);
  replay.sample(stream.exec(), batch, device_beta(0.5f));
  in.set(random_step(rng, 1, 1, 1, 0, 0));
  in.insert_into(replay, stream.exec());  // overwrites entry 0
  zs::DeviceFloats prio("prio", 2);
  Kokkos::deep_copy(prio, 49.f);
  replay.update_priorities(stream.exec(), prio);
  stream.synchronize();
  ASSERT_EQ(zs::test::to_host(replay.sampled_indices()), (std::vector<std::int64_t>{0, 1}));
  const auto tree = zs::test::to_host(replay.sum_tree());
  EXPECT_EQ(tree[replay.tree_leaves() + 0], 1.0);
  EXPECT_NEAR(tree[replay.tree_leaves() + 1], std::sqrt(49.0 + double(rc.priority_eps)), 1e-12);
}

TEST(Replay, ExtremeAlphaKeepsLeavesPositiveAndTheTotalFinite) {
  // α = 10: a tiny eps underflows to 0 and a huge |p| overflows to Inf without the clamp.
  zs::ReplayConfig rc;
  rc.capacity = 3;
  rc.n_step = 1;
  rc.alpha = 10.f;
  rc.priority_eps = 1e-35f;
  zs::Stream stream;
  zs::Replay replay(rc, 1, 1, 1);
  Inputs in(1, 1, 1);
  std::mt19937_64 rng(zs::test::fresh_seed());
  for (int t = 0; t < 3; ++t) {
    in.set(random_step(rng, 1, 1, 1, 0, 0));
    in.insert_into(replay, stream.exec());
  }
  zs::DeviceBatch batch(batch_config(1, 1), 3);
  auto beta = device_beta(1.f);
  replay.sample(stream.exec(), batch, beta);
  zs::DeviceFloats prio("prio", 3);
  Inputs::put(prio, std::vector<float>{0.f, 3e38f, 1.f});
  replay.update_priorities(stream.exec(), prio);
  replay.sample(stream.exec(), batch, beta);
  stream.synchronize();
  const auto tree = zs::test::to_host(replay.sum_tree());
  const long long P = replay.tree_leaves();
  EXPECT_EQ(tree[P + 0], 1e-300);
  EXPECT_EQ(tree[P + 1], 1e290);
  EXPECT_EQ(tree[P + 2], 1.0);
  EXPECT_TRUE(std::isfinite(tree[1]));
  for (float w : zs::test::to_host(batch.weights)) EXPECT_TRUE(std::isfinite(w) && w >= 0.f && w <= 1.f) << w;
}

// An α schedule: update_priorities reads α from device memory; a value outside [0, 10] falls
// back to the configured constant.
TEST(Replay, AlphaFromDeviceMemoryMatchesTheSameConstantAlpha) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(seed);
  const auto leaves_after_update = [&](float config_alpha, std::optional<float> device_alpha) {
    zs::ReplayConfig rc;
    rc.capacity = 40;
    rc.n_step = 2;
    rc.alpha = config_alpha;
    zs::Stream stream;
    zs::Replay replay(rc, 4, 3, 2);
    Inputs in(4, 3, 2);
    std::mt19937_64 rng(seed);
    for (int t = 0; t < 9; ++t) {
      in.set(random_step(rng, 4, 3, 2, 0.1, 0.05));
      in.insert_into(replay, stream.exec());
    }
    zs::DeviceBatch batch(batch_config(3, 2), 16);
    auto beta = device_beta(0.5f);
    replay.sample(stream.exec(), batch, beta);
    std::vector<float> p(16);
    std::mt19937_64 prng(seed + 1);
    for (auto& x : p) x = std::uniform_real_distribution<float>(0.01f, 5.f)(prng);
    zs::DeviceFloats prio("prio", 16);
    Inputs::put(prio, p);
    if (device_alpha) {
      zs::DeviceScalar<float> a("alpha");
      Kokkos::deep_copy(a, *device_alpha);
      replay.update_priorities(stream.exec(), prio, a);
    } else {
      replay.update_priorities(stream.exec(), prio);
    }
    stream.synchronize();
    return zs::test::to_host(replay.sum_tree());
  };
  const auto constant = leaves_after_update(0.3f, std::nullopt);
  EXPECT_TRUE(zs::test::same_bits(leaves_after_update(0.9f, 0.3f), constant));
  EXPECT_FALSE(zs::test::same_bits(leaves_after_update(0.9f, 0.7f), constant));
  EXPECT_TRUE(zs::test::same_bits(leaves_after_update(0.3f, NAN), constant));
  EXPECT_TRUE(zs::test::same_bits(leaves_after_update(0.3f, 11.f), constant));
}

TEST(Replay, EmptyBufferGivesAZeroWeightBatch) {
  zs::ReplayConfig rc;
  rc.capacity = 12;
  rc.n_step = 3;
  zs::Stream stream;
  zs::Replay replay(rc, 3, 2, 2);
  zs::DeviceBatch batch(batch_config(2, 2), 7);
  Kokkos::deep_copy(batch.stacked_states, 9.f);
  Kokkos::deep_copy(batch.weights, 9.f);
  Kokkos::deep_copy(batch.actions, 5);
  Inputs in(3, 2, 2);
  std::mt19937_64 rng(zs::test::fresh_seed());
  for (int inserted = 0; inserted < 3; ++inserted) {  // 0, 1, 2 steps: no window complete yet
    replay.sample(stream.exec(), batch, device_beta(0.5f));
    zs::DeviceFloats prio("prio", 7);
    replay.update_priorities(stream.exec(), prio);
    stream.synchronize();
    for (float x : zs::test::to_host(batch.stacked_states)) ASSERT_EQ(x, 0.f);
    for (float x : zs::test::to_host(batch.weights)) ASSERT_EQ(x, 0.f);
    for (float x : zs::test::to_host(batch.rewards)) ASSERT_EQ(x, 0.f);
    for (float x : zs::test::to_host(batch.dones)) ASSERT_EQ(x, 0.f);
    for (int x : zs::test::to_host(batch.actions)) ASSERT_EQ(x, 0);
    for (auto x : zs::test::to_host(replay.sampled_indices())) ASSERT_EQ(x, -1);
    in.set(random_step(rng, 3, 2, 2, 0, 0));
    in.insert_into(replay, stream.exec());
  }
  replay.sample(stream.exec(), batch, device_beta(0.5f));
  stream.synchronize();
  for (float x : zs::test::to_host(batch.weights)) EXPECT_EQ(x, 1.f);  // 3 equal entries now
}

TEST(Replay, SaveLoadRoundTripContinuesIdentically) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  const int N = 3, S = 4, K = 2, B = 9;
  zs::ReplayConfig rc;
  rc.capacity = 40;
  rc.n_step = 3;
  rc.seed = seed;
  zs::Stream stream;
  zs::Replay a(rc, N, S, K);
  Inputs in(N, S, K);
  zs::DeviceBatch ba(batch_config(S, K), B), bb(batch_config(S, K), B);
  zs::DeviceFloats prio("prio", B);
  auto beta = device_beta(0.6f);
  for (int t = 0; t < 23; ++t) {
    in.set(random_step(rng, N, S, K, 0.1, 0.1));
    in.insert_into(a, stream.exec());
    a.sample(stream.exec(), ba, beta);
    Inputs::put(prio, zs::test::random_normal(B, seed + t));
    a.update_priorities(stream.exec(), prio);
  }
  a.sample(stream.exec(), ba, beta);  // a pending sample travels with the state too
  stream.synchronize();
  zs::safetensors::File f;
  a.save_state(f, "replay.");
  const auto path = zs::test::temp_path("replay.safetensors");
  zs::safetensors::write(path, f);
  zs::ReplayConfig other = rc;
  other.seed = 1;  // the file's seed wins
  zs::Replay b(other, N, S, K);
  b.load_state(zs::safetensors::read(path), "replay.");
  EXPECT_TRUE(zs::test::same_bits(zs::test::to_host(a.sum_tree()), zs::test::to_host(b.sum_tree())));
  for (int t = 0; t < 6; ++t) {
    Inputs::put(prio, zs::test::random_normal(B, seed * 3 + t));
    a.update_priorities(stream.exec(), prio);
    b.update_priorities(stream.exec(), prio);
    in.set(random_step(rng, N, S, K, 0.1, 0.1));
    in.insert_into(a, stream.exec());
    in.insert_into(b, stream.exec());
    a.sample(stream.exec(), ba, beta);
    b.sample(stream.exec(), bb, beta);
    stream.synchronize();
    const auto oa = read_back(a, ba), ob = read_back(b, bb);
    EXPECT_TRUE(zs::test::same_bits(oa.states, ob.states));
    EXPECT_TRUE(zs::test::same_bits(oa.weights, ob.weights));
    EXPECT_TRUE(zs::test::same_bits(oa.rewards, ob.rewards));
    EXPECT_TRUE(zs::test::same_bits(oa.idx, ob.idx));
    EXPECT_TRUE(zs::test::same_bits(oa.tree, ob.tree));
  }
  // Mismatched shapes are refused, naming the field.
  zs::Replay wrong_envs(rc, 4, S, K);
  auto msg = zs::test::error_of([&] { wrong_envs.load_state(f, "replay."); });
  EXPECT_NE(msg.find("n_envs = 3"), std::string::npos) << msg;
  zs::Replay wrong_dim(rc, N, S + 1, K);
  msg = zs::test::error_of([&] { wrong_dim.load_state(f, "replay."); });
  EXPECT_NE(msg.find("obs_dim = 4"), std::string::npos) << msg;
  auto bad = f;
  bad.tensors["replay.obs"] = zs::safetensors::Tensor::from<float>({2, 2}, {1, 2, 3, 4});
  msg = zs::test::error_of([&] { b.load_state(bad, "replay."); });
  EXPECT_NE(msg.find("replay.obs"), std::string::npos) << msg;
  msg = zs::test::error_of([&] { b.load_state(f, "nope."); });
  EXPECT_NE(msg.find("nope.shape"), std::string::npos) << msg;
}

TEST(Replay, BadConfigsAndShapesAreClearErrors) {
  auto cfg_error = [](auto mutate) {
    zs::ReplayConfig rc;
    mutate(rc);
    return zs::test::error_of([&] { rc.validate(); });
  };
  EXPECT_NE(cfg_error([](auto& r) { r.capacity = 0; }).find("capacity = 0"), std::string::npos);
  EXPECT_NE(cfg_error([](auto& r) { r.n_step = 0; }).find("n_step = 0"), std::string::npos);
  EXPECT_NE(cfg_error([](auto& r) { r.gamma = 1.5f; }).find("gamma = 1.5"), std::string::npos);
  EXPECT_NE(cfg_error([](auto& r) { r.gamma = std::nanf(""); }).find("gamma"), std::string::npos);
  EXPECT_NE(cfg_error([](auto& r) { r.alpha = -1.f; }).find("alpha = -1"), std::string::npos);
  EXPECT_NE(cfg_error([](auto& r) { r.alpha = 11.f; }).find("alpha = 11"), std::string::npos);
  EXPECT_NE(cfg_error([](auto& r) { r.priority_eps = 0.f; }).find("priority_eps = 0"), std::string::npos);
  EXPECT_EQ(cfg_error([](auto&) {}), "");

  zs::ReplayConfig rc;
  rc.capacity = 10;
  rc.n_step = 3;
  auto msg = zs::test::error_of([&] { zs::Replay r(rc, 4, 2, 1); });  // 2 rows < n = 3
  EXPECT_NE(msg.find("2 rows"), std::string::npos) << msg;
  EXPECT_NE(zs::test::error_of([&] { zs::Replay r(rc, 0, 2, 1); }).find("n_envs = 0"), std::string::npos);
  EXPECT_NE(zs::test::error_of([&] { zs::Replay r(rc, 1, 0, 1); }).find("obs_dim = 0"), std::string::npos);
  EXPECT_NE(zs::test::error_of([&] { zs::Replay r(rc, 1, 2, 0); }).find("n_branches = 0"), std::string::npos);

  zs::Stream stream;
  zs::Replay replay(rc, 2, 3, 2);
  Inputs good(2, 3, 2), wide(2, 4, 2), many(3, 3, 2), fewer_actions(2, 3, 1);
  EXPECT_EQ(zs::test::error_of([&] { good.insert_into(replay, stream.exec()); }), "");
  msg = zs::test::error_of([&] { replay.insert(stream.exec(), wide.obs, good.act, good.reward, good.next, good.term, good.trunc); });
  EXPECT_NE(msg.find("obs is [2, 4]; expected [2, 3]"), std::string::npos) << msg;
  msg = zs::test::error_of([&] { replay.insert(stream.exec(), good.obs, fewer_actions.act, good.reward, good.next, good.term, good.trunc); });
  EXPECT_NE(msg.find("actions is [2, 1]; expected [2, 2]"), std::string::npos) << msg;
  msg = zs::test::error_of([&] { replay.insert(stream.exec(), good.obs, good.act, many.reward, good.next, good.term, good.trunc); });
  EXPECT_NE(msg.find("reward has 3 values"), std::string::npos) << msg;
  msg = zs::test::error_of([&] { replay.insert(stream.exec(), good.obs, good.act, good.reward, good.next, good.term, many.trunc); });
  EXPECT_NE(msg.find("truncated has 3 values"), std::string::npos) << msg;

  zs::DeviceFloats prio("prio", 4);
  msg = zs::test::error_of([&] { replay.update_priorities(stream.exec(), prio); });
  EXPECT_NE(msg.find("no sample() yet"), std::string::npos) << msg;
  zs::DeviceBatch wrong_dim(batch_config(4, 2), 4), wrong_k(batch_config(3, 3), 4), good_batch(batch_config(3, 2), 4);
  auto beta = device_beta(0.5f);
  msg = zs::test::error_of([&] { replay.sample(stream.exec(), wrong_dim, beta); });
  EXPECT_NE(msg.find("batch states hold 32"), std::string::npos) << msg;
  msg = zs::test::error_of([&] { replay.sample(stream.exec(), wrong_k, beta); });
  EXPECT_NE(msg.find("batch actions are [4, 3]; expected [4, 2]"), std::string::npos) << msg;
  replay.sample(stream.exec(), good_batch, beta);
  zs::DeviceFloats prio5("prio", 5);
  msg = zs::test::error_of([&] { replay.update_priorities(stream.exec(), prio5); });
  EXPECT_NE(msg.find("5 priorities; expected the last sample's batch size 4"), std::string::npos) << msg;
  stream.synchronize();
}

TEST(Replay, GraphReplayOfInsertSampleUpdateMatchesDirectCallsAndReference) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  const int N = 5, S = 3, K = 2, B = 11;
  zs::ReplayConfig rc;
  rc.capacity = 47;  // T = 9
  rc.n_step = 3;
  rc.gamma = 0.95f;
  rc.seed = seed;
  zs::Stream stream;
  zs::Replay direct(rc, N, S, K), graphed(rc, N, S, K);
  Reference ref{N, S, K, direct.rows(), rc.n_step, double(rc.gamma), {}};
  Inputs in(N, S, K);
  zs::DeviceBatch bd(batch_config(S, K), B), bg(batch_config(S, K), B);
  zs::DeviceFloats prio("prio", B);
  zs::DeviceScalar<float> beta("beta");
  auto body = [&](zs::Replay& r, zs::DeviceBatch& b) {
    in.insert_into(r, stream.exec());
    r.sample(stream.exec(), b, beta);
    r.update_priorities(stream.exec(), prio);
  };
  std::uniform_real_distribution<float> u01(0.f, 1.f);
  auto next_inputs = [&] {
    ref.steps.push_back(random_step(rng, N, S, K, 0.1, 0.1));
    in.set(ref.steps.back());
    std::vector<float> p(B);
    for (auto& x : p) x = u01(rng) < 0.1f ? std::numeric_limits<float>::quiet_NaN() : 3.f * u01(rng);
    Inputs::put(prio, p);
    const float b = u01(rng);
    Kokkos::deep_copy(beta, b);
    return b;
  };
  next_inputs();
  body(direct, bd);
  body(graphed, bg);  // the direct first run sizes everything outside capture
  stream.synchronize();
  zs::Graph graph;
  graph.capture(stream, [&] { body(graphed, bg); });
  ASSERT_TRUE(graph.captured());
  for (int step = 1; step < 40; ++step) {
    SCOPED_TRACE(testing::Message() << "replay " << step);
    const float b = next_inputs();
    // Read the batch before the update: compare graphed and direct after each full step.
    in.insert_into(direct, stream.exec());
    direct.sample(stream.exec(), bd, beta);
    stream.synchronize();
    const auto od = read_back(direct, bd);
    direct.update_priorities(stream.exec(), prio);
    graph.replay(stream);
    stream.synchronize();
    const auto og = read_back(graphed, bg);
    check_against_reference(ref, direct, od, b, true);
    EXPECT_TRUE(zs::test::same_bits(od.states, og.states));
    EXPECT_TRUE(zs::test::same_bits(od.rewards, og.rewards));
    EXPECT_TRUE(zs::test::same_bits(od.weights, og.weights));
    EXPECT_TRUE(zs::test::same_bits(od.idx, og.idx));
    EXPECT_TRUE(zs::test::same_bits(zs::test::to_host(direct.sum_tree()), og.tree));  // after both updates
    if (HasFailure()) return;
  }
  std::int64_t steps = 0;
  Kokkos::deep_copy(steps, graphed.steps());
  EXPECT_EQ(steps, 40);
}
