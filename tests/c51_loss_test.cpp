// The C51 loss kernel on hostile inputs: huge, infinite and NaN rewards or dones with a valid
// support, and supports the config refuses (a span that overflows, a spacing of 0) handed to
// the kernel directly. None may write outside a view (the openmp-debug build checks bounds and
// runs ASan); every projected mass stays in [0, 1].
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/c51_loss.hpp"
#include "test_util.hpp"

namespace {

using zs::ExecSpace;
using zs::MemSpace;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// What one launch of the loss wrote.
struct Result {
  std::vector<float> projected, priorities, d_value;
  std::vector<int> best;
  float loss = 0;
};

// The kernel's inputs on the host: log-probabilities [2B, A, atoms] online (s, then s′) and
// [B, A, atoms] target, actions [B, K], and per sample reward, done and weight.
struct Inputs {
  zs::kernels::BranchTable table;
  zs::kernels::Support sup;
  std::vector<float> online, target, rewards, dones, weights;
  std::vector<int> actions;
};

// One launch with `parts` team threads a branch (0: the kernel's choice) and a launch bound of
// min_blocks teams an SM (C51Loss::min_blocks).
Result launch(const Inputs& in, int parts = 0, int min_blocks = 0) {
  const int B = static_cast<int>(in.rewards.size()), K = in.table.branches, A = in.table.cum(K), atoms = in.sup.atoms;
  using F3 = Kokkos::View<float***, Kokkos::LayoutRight, MemSpace>;
  using I2 = Kokkos::View<int**, Kokkos::LayoutRight, MemSpace>;
  F3 online("online", 2 * B, A, atoms), target("target", B, A, atoms), projected("projected", B, K, atoms);
  Kokkos::deep_copy(online, Kokkos::View<const float***, Kokkos::LayoutRight, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>(
                                in.online.data(), 2 * B, A, atoms));
  Kokkos::deep_copy(target, Kokkos::View<const float***, Kokkos::LayoutRight, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>(
                                in.target.data(), B, A, atoms));
  I2 actions("actions", B, K), best("best", B, K);
  Kokkos::deep_copy(actions, Kokkos::View<const int**, Kokkos::LayoutRight, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>(
                                 in.actions.data(), B, K));
  zs::DeviceFloats d_value("d_value", static_cast<std::size_t>(B) * atoms);
  zs::DeviceFloats d_branch("d_branch", static_cast<std::size_t>(B) * A * atoms);
  zs::DeviceFloats priorities("priorities", B);
  Kokkos::View<float, MemSpace> loss("loss");
  zs::kernels::C51Loss<ExecSpace> f;
  f.logp_online = online;
  f.logp_target = target;
  f.actions = actions;
  f.rewards = zs::test::to_device(in.rewards);
  f.dones = zs::test::to_device(in.dones);
  f.weights = zs::test::to_device(in.weights);
  f.priorities = priorities;
  f.projected = projected;
  f.best = best;
  f.d_value = Kokkos::View<float**, Kokkos::LayoutRight, MemSpace, Kokkos::MemoryUnmanaged>(d_value.data(), B, atoms);
  f.d_branch_out = Kokkos::View<float*, MemSpace, Kokkos::MemoryUnmanaged>(d_branch.data(), d_branch.extent(0));
  f.table = in.table;
  f.sup = in.sup;
  f.parts = parts;
  f.min_blocks = min_blocks;
  ExecSpace exec;
  zs::kernels::c51_loss(exec, f, loss);
  exec.fence();
  Result r{zs::test::to_host(projected), zs::test::to_host(priorities), zs::test::to_host(d_value),
           zs::test::to_host(best), 0.f};
  Kokkos::deep_copy(r.loss, loss);
  return r;
}

// One launch on B samples of two branches (2 and 3 actions), uniform distributions everywhere.
Result run(const zs::kernels::Support& sup, const std::vector<float>& rewards, const std::vector<float>& dones) {
  const int B = static_cast<int>(rewards.size()), A = 5;
  const std::vector<float> uniform(static_cast<std::size_t>(2) * B * A * sup.atoms,
                                   -std::log(static_cast<float>(sup.atoms)));
  return launch({zs::kernels::BranchTable::of({2, 3}), sup, uniform,
                 std::vector<float>(uniform.begin(), uniform.begin() + uniform.size() / 2), rewards, dones,
                 std::vector<float>(B, 1.f), std::vector<int>(static_cast<std::size_t>(B) * 2, 0)});
}

void expect_masses_in_unit_interval(const Result& r) {
  for (std::size_t x = 0; x < r.projected.size(); ++x)
    EXPECT_TRUE(r.projected[x] >= 0.f && r.projected[x] <= 1.f + 1e-5f) << "projected[" << x << "] = " << r.projected[x];
}

float row_sum(const Result& r, int row, int atoms) {
  float s = 0.f;
  for (int j = 0; j < atoms; ++j) s += r.projected[static_cast<std::size_t>(row) * atoms + j];
  return s;
}

TEST(C51Loss, HugeOrNonFiniteRewardsAndDonesStayOnTheSupport) {
  const zs::kernels::Support sup{-10.f, 10.f, 0.97f, 11};
  const float big = std::numeric_limits<float>::max();
  const Result r = run(sup, {big, -big, kInf, kNaN, 1e30f, 0.f}, {0.f, 0.f, 0.f, 0.f, -big, kNaN});
  expect_masses_in_unit_interval(r);
  // Finite inputs: all of each branch's mass lands on the support (at an end for a huge reward).
  for (int i : {0, 1, 4})
    for (int k = 0; k < 2; ++k) EXPECT_NEAR(row_sum(r, i * 2 + k, sup.atoms), 1.f, 1e-5f) << "sample " << i;
  EXPECT_NEAR(r.projected[(0 * 2) * sup.atoms + sup.atoms - 1], 1.f, 1e-5f);  // +max → v_max
  EXPECT_NEAR(r.projected[(1 * 2) * sup.atoms + 0], 1.f, 1e-5f);              // −max → v_min
  // A non-finite reward or done poisons the sample's loss (the guard skips the step).
  for (int i : {2, 3, 5}) EXPECT_TRUE(std::isnan(r.priorities[i])) << "sample " << i;
}

TEST(C51Loss, ASupportTheConfigRefusesStillWritesOnlyInsideTheViews) {
  // The span overflows float (every z_j is ±inf or NaN), or the spacing rounds to 0.
  for (const zs::kernels::Support sup : {zs::kernels::Support{-2e38f, 2e38f, 0.97f, 51},
                                         zs::kernels::Support{0.f, 1e-45f, 0.97f, 51}}) {
    SCOPED_TRACE(testing::Message() << "support [" << sup.v_min << ", " << sup.v_max << "]");
    const Result r = run(sup, {0.f, 1.f, -1.f, 5.f}, {0.f, 1.f, 0.f, 0.f});
    expect_masses_in_unit_interval(r);
  }
}

// Random log-probabilities, actions, rewards, dones and weights through the kernel with 1, 2 and 3
// team threads (device warps) a branch and with its own choice, against a naive double loop: a*,
// the projected target, each sample's loss and the value-stream gradient. The splits share
// actions and atoms unevenly (5 actions and 51 atoms in halves and thirds; a branch of one
// action leaves later parts none), and a* and the projection come out the same bits in every one.
TEST(C51Loss, EveryWarpSplitMatchesTheDoubleReference) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  struct Case {
    std::vector<int> branches;
    int atoms;
  };
  for (const Case& cs : {Case{{5, 3, 2}, 51}, Case{{1, 4}, 7}}) {
    const int B = 6, K = static_cast<int>(cs.branches.size()), atoms = cs.atoms;
    const auto table = zs::kernels::BranchTable::of(cs.branches);
    const int A = table.cum(K);
    const zs::kernels::Support sup{-4.f, 6.f, 0.9f, atoms};
    std::mt19937_64 rng(seed + static_cast<std::uint64_t>(atoms));
    std::normal_distribution<double> logit(0.0, 1.5);
    std::uniform_real_distribution<float> unit(0.f, 1.f);
    // Log-softmax rows of random logits, rounded to float (the kernel's input).
    auto log_probs = [&](int rows) {
      std::vector<float> v(static_cast<std::size_t>(rows) * A * atoms);
      for (std::size_t r = 0; r < v.size(); r += atoms) {
        std::vector<double> x(atoms);
        double mx = -1e300, sum = 0;
        for (double& e : x) mx = std::max(mx, e = logit(rng));
        for (double e : x) sum += std::exp(e - mx);
        for (int j = 0; j < atoms; ++j) v[r + j] = static_cast<float>(x[j] - mx - std::log(sum));
      }
      return v;
    };
    const auto online = log_probs(2 * B), target = log_probs(B);
    std::vector<float> rewards(B), dones(B), weights(B);
    std::vector<int> actions(static_cast<std::size_t>(B) * K);
    for (int i = 0; i < B; ++i) {
      rewards[i] = 8.f * unit(rng) - 4.f;
      dones[i] = i % 3 == 0 ? 1.f : 0.f;
      weights[i] = 0.5f + unit(rng);
      for (int k = 0; k < K; ++k) actions[i * K + k] = static_cast<int>(unit(rng) * cs.branches[k]) % cs.branches[k];
    }
    auto at = [&](const std::vector<float>& v, int row, int a, int j) {
      return static_cast<double>(v[(static_cast<std::size_t>(row) * A + a) * atoms + j]);
    };
    // The reference: a* by double Q (with its margin over the runner-up), the projection, the loss.
    const double dz = (static_cast<double>(sup.v_max) - sup.v_min) / (atoms - 1);
    std::vector<int> ref_best(static_cast<std::size_t>(B) * K);
    std::vector<double> margin(ref_best.size()), ref_m(static_cast<std::size_t>(B) * K * atoms), ref_L(B, 0.0),
        ref_dvalue(static_cast<std::size_t>(B) * atoms, 0.0);
    for (int i = 0; i < B; ++i)
      for (int k = 0; k < K; ++k) {
        const int c0 = table.cum(k), n = cs.branches[k], x = i * K + k;
        std::vector<double> q(n, 0.0);
        for (int a = 0; a < n; ++a)
          for (int j = 0; j < atoms; ++j) q[a] += std::exp(at(online, B + i, c0 + a, j)) * (sup.v_min + j * dz);
        const int best = static_cast<int>(std::max_element(q.begin(), q.end()) - q.begin());
        double second = -1e300;
        for (int a = 0; a < n; ++a)
          if (a != best) second = std::max(second, q[a]);
        ref_best[x] = best;
        margin[x] = n == 1 ? 1e300 : q[best] - second;
        double* m = &ref_m[static_cast<std::size_t>(x) * atoms];
        for (int l = 0; l < atoms; ++l) {
          const double p = std::exp(at(target, i, c0 + best, l));
          const double tz = std::clamp(rewards[i] + double(sup.gamma_n) * (1.0 - dones[i]) * (sup.v_min + l * dz),
                                       double(sup.v_min), double(sup.v_max));
          const double b = (tz - sup.v_min) / dz;
          const int lo = static_cast<int>(std::floor(b)), hi = static_cast<int>(std::ceil(b));
          if (lo == hi) {
            m[lo] += p;
          } else {
            m[lo] += p * (hi - b);
            m[hi] += p * (b - lo);
          }
        }
        const int taken = actions[x];
        double ce = 0, msum = 0;
        for (int j = 0; j < atoms; ++j) ce -= m[j] * at(online, i, c0 + taken, j), msum += m[j];
        ref_L[i] += ce / K;
        const double coef = double(weights[i]) / (B * K);
        for (int j = 0; j < atoms; ++j)
          ref_dvalue[static_cast<std::size_t>(i) * atoms + j] += coef * (std::exp(at(online, i, c0 + taken, j)) * msum - m[j]);
      }

    std::vector<int> first_best;
    std::vector<float> first_projected;
    for (const int parts : {1, 2, 3, 0}) {
      SCOPED_TRACE(testing::Message() << "branches " << K << ", atoms " << atoms << ", parts " << parts);
      const Result got = launch({table, sup, online, target, rewards, dones, weights, actions}, parts);
      const auto& got_best = got.best;
      const auto& got_m = got.projected;
      const auto& got_L = got.priorities;
      const auto& got_dv = got.d_value;
      for (std::size_t x = 0; x < ref_best.size(); ++x) {
        if (margin[x] <= 1e-5) continue;  // a near-tie: either action is a correct float argmax
        EXPECT_EQ(got_best[x], ref_best[x]) << "sample/branch " << x;
        // A target's position b on the support is float arithmetic: its rounding (a few ulps of
        // b ≤ atoms − 1) moves up to ~|b|·1e-7 of a source's mass between two atoms.
        for (int j = 0; j < atoms; ++j)
          EXPECT_NEAR(got_m[x * atoms + j], ref_m[x * atoms + j], 2e-7 * atoms) << "sample/branch " << x << " atom " << j;
      }
      bool any_tie = false;
      for (int i = 0; i < B; ++i) {
        bool tie = false;
        for (int k = 0; k < K; ++k) tie |= margin[i * K + k] <= 1e-5;
        any_tie |= tie;
        if (tie) continue;
        EXPECT_NEAR(got_L[i], ref_L[i], 1e-5 * std::abs(ref_L[i]) + 1e-6) << "sample " << i;
        for (int j = 0; j < atoms; ++j)
          EXPECT_NEAR(got_dv[i * atoms + j], ref_dvalue[i * atoms + j], 1e-5 * std::abs(ref_dvalue[i * atoms + j]) + 2e-7 * atoms)
              << "sample " << i << " atom " << j;
      }
      if (!any_tie) {
        double ref_loss = 0;
        for (int i = 0; i < B; ++i) ref_loss += weights[i] * ref_L[i] / B;
        EXPECT_NEAR(got.loss, ref_loss, 1e-5 * std::abs(ref_loss) + 1e-6);
      }
      if (first_best.empty()) {
        first_best = got_best;
        first_projected = got_m;
      } else {
        EXPECT_EQ(got_best, first_best);
        EXPECT_TRUE(zs::test::same_bits(got_m, first_projected));
      }
      if (parts == 0) {
        // Launch bounds change registers, not arithmetic: every output the same bits.
        for (const int min_blocks : {10, 12}) {
          const Result bounded = launch({table, sup, online, target, rewards, dones, weights, actions}, 0, min_blocks);
          EXPECT_EQ(bounded.best, got.best) << "min_blocks " << min_blocks;
          for (const auto& [a, b] : {std::pair(&bounded.projected, &got.projected), std::pair(&bounded.priorities, &got.priorities),
                                     std::pair(&bounded.d_value, &got.d_value)})
            EXPECT_TRUE(zs::test::same_bits(*a, *b)) << "min_blocks " << min_blocks;
          EXPECT_TRUE(zs::test::same_bits(std::vector<float>{bounded.loss}, std::vector<float>{got.loss}));
        }
      }
    }
  }
  EXPECT_NE(zs::test::error_of([] {
              launch({zs::kernels::BranchTable::of({2}), {-1.f, 1.f, 0.9f, 3}, std::vector<float>(12, -1.f),
                      std::vector<float>(6, -1.f), {0.f}, {0.f}, {1.f}, {0}},
                     0, 11);
            }).find("min_blocks = 11; expected 0 (no launch bound), 10 or 12"),
            std::string::npos);
}

}  // namespace

namespace {

// The projection of one sample by scatter, in double: what gather_mass must sum to.
std::vector<double> scattered(const zs::kernels::Support& sup, float reward, float done, const std::vector<float>& prob) {
  const int Z = sup.atoms;
  std::vector<double> m(Z, 0.0);
  const double dz = (static_cast<double>(sup.v_max) - sup.v_min) / (Z - 1);
  for (int l = 0; l < Z; ++l) {
    const double tz = std::clamp(reward + double(sup.gamma_n) * (1.0 - done) * (sup.v_min + l * dz),
                                 double(sup.v_min), double(sup.v_max));
    const double b = (tz - sup.v_min) / dz;
    const int lo = static_cast<int>(std::floor(b)), hi = static_cast<int>(std::ceil(b));
    if (lo == hi) {
      m[lo] += prob[l];
    } else {
      m[lo] += prob[l] * (hi - b);
      m[hi] += prob[l] * (b - lo);
    }
  }
  return m;
}

}  // namespace

// The narrow gather (each target atom from the sources within two atoms of it, found by binary
// search) against the walk over every source: the same bits for random rewards inside and far
// outside the support, terminal and non-terminal samples, discounts from 0 to 1 and supports of
// 2 to 51 atoms; both within FP32 rounding of a double scatter. A shift below 0 (done > 1) is not
// ascending, and the walk then takes every source.
TEST(C51Loss, TheNarrowGatherSumsTheSameTermsAsTheFullOne) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> unit(0.f, 1.f);
  int narrowed = 0;
  for (const int Z : {51, 21, 5, 2})
    for (const float gamma : {0.99f, 0.5f, 0.f, 1.f})
      for (int trial = 0; trial < 40; ++trial) {
        const zs::kernels::Support sup{-10.f, 10.f, gamma, Z};
        const float reward = trial % 4 == 0 ? 60.f * unit(rng) - 30.f : 20.f * unit(rng) - 10.f;
        const float done = trial % 5 == 0 ? 1.f : (trial % 7 == 0 ? unit(rng) : 0.f);
        std::vector<float> pos(Z), prob(Z);
        float total = 0.f;
        for (int l = 0; l < Z; ++l) total += prob[l] = 0.05f + unit(rng);
        for (int l = 0; l < Z; ++l) {
          prob[l] /= total;
          pos[l] = sup.position(reward, done, l);
        }
        ASSERT_TRUE(sup.ascending(done));
        ASSERT_TRUE(std::is_sorted(pos.begin(), pos.end())) << "reward " << reward << ", done " << done;
        const auto want = scattered(sup, reward, done, prob);
        for (int j = 0; j < Z; ++j) {
          const float narrow = zs::kernels::gather_mass(pos.data(), prob.data(), Z, j, true);
          const float full = zs::kernels::gather_mass(pos.data(), prob.data(), Z, j, false);
          ASSERT_TRUE(zs::test::same_bits(std::vector<float>{narrow}, std::vector<float>{full}))
              << "atom " << j << " of " << Z << ": " << narrow << " against " << full << " (reward " << reward
              << ", done " << done << ", gamma " << gamma << ")";
          EXPECT_NEAR(full, want[j], 1e-5) << "atom " << j << " of " << Z;  // positions are FP32
          narrowed += full != 0.f;
        }
      }
  EXPECT_GT(narrowed, 0) << "every mass was 0: the test compared nothing";
  const zs::kernels::Support sup{-10.f, 10.f, 0.99f, 51};
  EXPECT_FALSE(sup.ascending(2.f));
  EXPECT_FALSE(sup.ascending(kNaN));
}
