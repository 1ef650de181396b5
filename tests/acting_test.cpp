#include "kernels/acting.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backends/graph.hpp"
#include "backends/stream.hpp"
#include "core/error.hpp"
#include "test_util.hpp"

namespace {

using Actions = Kokkos::View<std::int32_t**, Kokkos::LayoutRight, zs::MemSpace>;
using QView = Kokkos::View<float**, Kokkos::LayoutRight, zs::MemSpace>;
using ProbView = Kokkos::View<float***, Kokkos::LayoutRight, zs::MemSpace>;
using zs::kernels::ActingRng;

const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

int total(const std::vector<int>& branches) {
  return std::accumulate(branches.begin(), branches.end(), 0);
}

// The reference argmax: lowest index among the maxima, NaN skipped, all NaN → 0.
int host_argmax(const std::vector<double>& q) {
  int best = -1;
  for (int a = 0; a < static_cast<int>(q.size()); ++a)
    if (!std::isnan(q[a]) && (best < 0 || q[a] > q[best])) best = a;
  return best < 0 ? 0 : best;
}

// The reference selection: the documented rule, with the header's (host-callable) hash.
std::vector<int> host_select(const std::vector<std::vector<double>>& q,  // [B][A_total]
                             const std::vector<int>& branches, float eps, const ActingRng& rng,
                             std::uint64_t call) {
  const int nb = static_cast<int>(branches.size());
  std::vector<int> out(q.size() * nb);
  for (std::size_t b = 0; b < q.size(); ++b) {
    int lo = 0;
    for (int k = 0; k < nb; ++k) {
      const int n = branches[k];
      const auto bits = zs::kernels::counter_rng_bits(rng.seed, rng.stream, call, b, k);
      const double u = static_cast<double>(bits >> 40) / 16777216.0;
      if (u < eps) {
        out[b * nb + k] = static_cast<int>(((bits & 0xFFFFFFFFull) * std::uint64_t(n)) >> 32);
      } else {
        out[b * nb + k] =
            host_argmax(std::vector<double>(q[b].begin() + lo, q[b].begin() + lo + n));
      }
      lo += n;
    }
  }
  return out;
}

struct QInput {
  std::vector<float> flat;                // [B * A_total]
  std::vector<std::vector<double>> rows;  // the same, per sample, in double
};

// Random Q with ties on purpose: values on a grid of 0.5 so equal maxima are frequent.
QInput random_q(std::size_t batch, int a_total, std::uint64_t seed, bool quantised) {
  QInput in;
  const auto g = zs::test::random_normal(batch * a_total, seed, 3.f);
  in.flat = g;
  if (quantised)
    for (auto& x : in.flat) x = std::round(x * 0.5f) * 2.f;
  in.rows.resize(batch);
  for (std::size_t b = 0; b < batch; ++b)
    in.rows[b].assign(in.flat.begin() + b * a_total, in.flat.begin() + (b + 1) * a_total);
  return in;
}

QView q_to_device(const std::vector<float>& flat, std::size_t batch, int a_total) {
  QView q("q", batch, a_total);
  auto h = Kokkos::create_mirror_view(q);
  for (std::size_t b = 0; b < batch; ++b)
    for (int a = 0; a < a_total; ++a) h(b, a) = flat[b * a_total + a];
  Kokkos::deep_copy(q, h);
  return q;
}

struct Device {
  zs::DeviceScalar<float> epsilon{"eps"};
  zs::DeviceScalar<std::uint64_t> counter{"counter"};
  void set_eps(float e) { Kokkos::deep_copy(epsilon, e); }
  std::uint64_t count() const {
    std::uint64_t c = 0;
    Kokkos::deep_copy(c, counter);
    return c;
  }
};

std::vector<int> select_q(zs::Stream& stream, Device& dev, const QView& q,
                          const std::vector<int>& branches, const ActingRng& rng) {
  Actions actions("actions", q.extent(0), branches.size());
  Kokkos::deep_copy(actions, -7);  // poison
  zs::kernels::epsilon_greedy(stream.exec(), q, branches, dev.epsilon, dev.counter, rng, actions);
  stream.synchronize();
  const auto h = zs::test::to_host(actions);
  return std::vector<int>(h.begin(), h.end());
}

std::vector<std::vector<int>> all_branch_sets() {
  return {{5, 3, 3}, {1}, {2}, {7, 1, 13}, {37}, {4096, 2}};
}

}  // namespace

TEST(Acting, GreedyEqualsHostArgmaxOnAwkwardShapes) {
  for (const auto& branches : all_branch_sets()) {
    for (std::size_t batch :
         {std::size_t{1}, std::size_t{7}, std::size_t{256}, std::size_t{1031}}) {
      if (branches[0] == 4096 && batch > 7) continue;
      for (bool quantised : {false, true}) {
        const auto seed = zs::test::fresh_seed();
        SCOPED_TRACE(testing::Message()
                     << "branches " << branches.size() << " (first " << branches[0]
                     << "), B = " << batch << ", ties " << quantised << ", seed = " << seed);
        zs::Stream stream;
        Device dev;
        dev.set_eps(0.f);
        const auto in = random_q(batch, total(branches), seed, quantised);
        const auto q = q_to_device(in.flat, batch, total(branches));
        const ActingRng rng{seed, 0};
        EXPECT_EQ(select_q(stream, dev, q, branches, rng),
                  host_select(in.rows, branches, 0.f, rng, 0));
      }
    }
  }
}

TEST(Acting, NaNNeverWinsAndAllNaNOrAllEqualGivesActionZero) {
  const std::vector<int> branches = {5, 3, 3};
  const std::size_t batch = 257;
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed = " << seed);
  auto in = random_q(batch, 11, seed, true);
  std::mt19937_64 pick(seed);
  const float specials[] = {kNaN, kInf, -kInf};
  for (std::size_t b = 0; b < batch; ++b) {
    const int n_bad = static_cast<int>(pick() % 4);
    for (int j = 0; j < n_bad; ++j) in.flat[b * 11 + pick() % 11] = specials[pick() % 3];
  }
  // Whole branches of NaN, of −Inf, of +Inf, and all equal.
  for (int a = 0; a < 5; ++a) in.flat[3 * 11 + a] = kNaN;
  for (int a = 5; a < 8; ++a) in.flat[4 * 11 + a] = -kInf;
  for (int a = 8; a < 11; ++a) in.flat[5 * 11 + a] = kInf;
  for (int a = 0; a < 11; ++a) in.flat[6 * 11 + a] = 1.5f;
  in.flat[7 * 11 + 0] = kNaN;  // NaN first, a finite maximum later
  in.flat[7 * 11 + 1] = -1e30f;
  for (std::size_t b = 0; b < batch; ++b)
    in.rows[b].assign(in.flat.begin() + b * 11, in.flat.begin() + (b + 1) * 11);
  zs::Stream stream;
  Device dev;
  dev.set_eps(0.f);
  const ActingRng rng{seed, 3};
  const auto got = select_q(stream, dev, q_to_device(in.flat, batch, 11), branches, rng);
  EXPECT_EQ(got, host_select(in.rows, branches, 0.f, rng, 0));
  EXPECT_EQ(got[3 * 3 + 0], 0);  // all NaN
  EXPECT_EQ(got[4 * 3 + 1], 0);  // all −Inf: equal, lowest index
  EXPECT_EQ(got[5 * 3 + 2], 0);  // all +Inf
  EXPECT_EQ(got[6 * 3 + 0], 0);
  EXPECT_EQ(got[6 * 3 + 1], 0);
  EXPECT_EQ(got[6 * 3 + 2], 0);
  EXPECT_NE(got[7 * 3 + 0], 0) << "a NaN at index 0 won the argmax";
}

TEST(Acting, MatchesTheSeededReferenceDrawForDrawAtAnyEpsilon) {
  // Reproducible from the seed: the host recomputes every draw and gets the same actions.
  const std::vector<int> branches = {5, 3, 3};
  const std::size_t batch = 1031;
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed = " << seed);
  const auto in = random_q(batch, 11, seed, true);
  const auto q = q_to_device(in.flat, batch, 11);
  zs::Stream stream;
  Device dev;
  const ActingRng rng{seed, 42};
  std::uint64_t call = 0;
  for (float eps : {0.f, 0.05f, 0.37f, 0.5f, 0.999f, 1.f, -0.5f, 2.f, kNaN}) {
    SCOPED_TRACE(testing::Message() << "eps = " << eps);
    dev.set_eps(eps);
    EXPECT_EQ(select_q(stream, dev, q, branches, rng),
              host_select(in.rows, branches, eps, rng, call));
    ++call;
    EXPECT_EQ(dev.count(), call);
  }
}

namespace {

// Frequencies of each action per branch over `calls` calls of B samples with constant Q.
std::vector<std::vector<double>> frequencies(const std::vector<int>& branches, std::size_t batch,
                                             int calls, float eps, const QView& q,
                                             std::uint64_t seed) {
  zs::Stream stream;
  Device dev;
  dev.set_eps(eps);
  Actions actions("actions", batch, branches.size());
  std::vector<std::vector<double>> count(branches.size());
  for (std::size_t k = 0; k < branches.size(); ++k) count[k].assign(branches[k], 0.0);
  const ActingRng rng{seed, 0};
  for (int c = 0; c < calls; ++c) {
    zs::kernels::epsilon_greedy(stream.exec(), q, branches, dev.epsilon, dev.counter, rng, actions);
    stream.synchronize();
    const auto h = zs::test::to_host(actions);
    for (std::size_t b = 0; b < batch; ++b)
      for (std::size_t k = 0; k < branches.size(); ++k) {
        const int a = h[b * branches.size() + k];
        EXPECT_GE(a, 0);
        EXPECT_LT(a, branches[k]);
        if (a >= 0 && a < branches[k]) count[k][a] += 1.0;
      }
  }
  for (auto& c : count)
    for (auto& x : c) x /= double(batch) * calls;
  return count;
}

}  // namespace

TEST(Acting, EpsilonOneIsUniformPerBranch) {
  const std::vector<int> branches = {5, 3, 3, 1, 7};
  const std::size_t batch = 4096;
  const int calls = 50;  // 204,800 draws per branch
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed = " << seed);
  const auto in = random_q(batch, total(branches), seed, false);
  const auto freq =
      frequencies(branches, batch, calls, 1.f, q_to_device(in.flat, batch, total(branches)), seed);
  const double draws = double(batch) * calls;
  for (std::size_t k = 0; k < branches.size(); ++k) {
    const int n = branches[k];
    double chi2 = 0;
    for (int a = 0; a < n; ++a) {
      const double expect = draws / n, got = freq[k][a] * draws;
      chi2 += (got - expect) * (got - expect) / expect;
    }
    // df = n − 1; the bound sits far beyond the 1e-6 quantile (33.4 at df 4, 42.3 at df 6).
    const double df = n - 1;
    EXPECT_LT(chi2, df + 10 * std::sqrt(2 * df) + 15) << "branch " << k << " (" << n << " actions)";
    if (n == 1) {
      EXPECT_EQ(freq[k][0], 1.0);
    }
  }
}

TEST(Acting, IntermediateEpsilonPicksTheGreedyActionAtTheExpectedRate) {
  const std::vector<int> branches = {5, 3, 3};
  const std::size_t batch = 4096;
  const int calls = 50;
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed = " << seed);
  // The same Q row for every sample, greedy actions 2, 0 and 1.
  std::vector<float> flat(batch * 11);
  const float row[11] = {0.f, 1.f, 9.f, -3.f, 2.f, /**/ 5.f, 4.f, 4.f, /**/ -1.f, 7.f, 6.f};
  for (std::size_t b = 0; b < batch; ++b) std::copy(row, row + 11, flat.begin() + b * 11);
  const int greedy[] = {2, 0, 1};
  for (float eps : {0.1f, 0.3f, 0.8f}) {
    SCOPED_TRACE(testing::Message() << "eps = " << eps);
    const auto freq = frequencies(branches, batch, calls, eps, q_to_device(flat, batch, 11), seed);
    const double draws = double(batch) * calls;
    for (int k = 0; k < 3; ++k) {
      const int n = branches[k];
      for (int a = 0; a < n; ++a) {
        const double p = (a == greedy[k] ? 1.0 - eps : 0.0) + eps / n;
        const double sd = std::sqrt(p * (1 - p) / draws);
        EXPECT_NEAR(freq[k][a], p, 6 * sd + 1e-12) << "branch " << k << ", action " << a;
      }
    }
  }
}

TEST(Acting, SameSeedSameDrawsAndEveryCallDrawsAfresh) {
  const std::vector<int> branches = {5, 3, 3};
  const std::size_t batch = 256;
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed = " << seed);
  const auto in = random_q(batch, 11, seed, false);
  const auto q = q_to_device(in.flat, batch, 11);
  zs::Stream stream;
  Device a, b, c;
  for (Device* d : {&a, &b, &c}) d->set_eps(1.f);
  const auto a0 = select_q(stream, a, q, branches, {seed, 0});
  const auto b0 = select_q(stream, b, q, branches, {seed, 0});
  EXPECT_EQ(a0, b0) << "same seed, stream and counter";
  const auto a1 = select_q(stream, a, q, branches, {seed, 0});
  EXPECT_NE(a0, a1) << "the counter advanced, yet the draws repeated";
  EXPECT_EQ(a.count(), 2u);
  EXPECT_NE(select_q(stream, c, q, branches, {seed, 1}), a0) << "another stream id";
  Device d;
  d.set_eps(1.f);
  EXPECT_NE(select_q(stream, d, q, branches, {seed + 1, 0}), a0) << "another seed";
  // A counter that starts elsewhere reproduces that call exactly.
  Kokkos::deep_copy(b.counter, std::uint64_t{1});
  EXPECT_EQ(select_q(stream, b, q, branches, {seed, 0}), a1);
}

namespace {

// C51 log-probabilities [B, A_total, atoms] and their Q (z_j = v_min + j·Δz), summed in double and
// rounded to float as documented, per sample.
struct C51Input {
  std::vector<float> logp;
  float v_min = -10.f, v_max = 10.f;
  std::vector<std::vector<double>> expect;
};

C51Input random_c51(std::size_t batch, int a_total, int atoms, std::uint64_t seed) {
  C51Input in;
  const auto logits = zs::test::random_normal(batch * a_total * atoms, seed, 2.f);
  in.logp.resize(logits.size());
  in.expect.assign(batch, std::vector<double>(a_total));
  const float dz = (in.v_max - in.v_min) / float(atoms - 1);
  for (std::size_t r = 0; r < batch * a_total; ++r) {
    double z = 0;
    for (int j = 0; j < atoms; ++j) z += std::exp(double(logits[r * atoms + j]));
    double q = 0;
    for (int j = 0; j < atoms; ++j) {
      in.logp[r * atoms + j] = static_cast<float>(double(logits[r * atoms + j]) - std::log(z));
      q += std::exp(double(in.logp[r * atoms + j])) * (in.v_min + j * double(dz));
    }
    in.expect[r / a_total][r % a_total] = static_cast<float>(q);  // the Q every argmax compares: a float
  }
  return in;
}

ProbView logp_to_device(const C51Input& in, std::size_t batch, int a_total) {
  const int atoms = static_cast<int>(in.logp.size() / (batch * a_total));
  ProbView p("logp", batch, a_total, atoms);
  auto h = Kokkos::create_mirror_view(p);
  for (std::size_t b = 0; b < batch; ++b)
    for (int a = 0; a < a_total; ++a)
      for (int j = 0; j < atoms; ++j) h(b, a, j) = in.logp[(b * a_total + a) * atoms + j];
  Kokkos::deep_copy(p, h);
  return p;
}

// The actor's path: Q from the head (kernels/c51_q.hpp), then ε-greedy on it.
std::vector<int> select_c51(zs::Stream& stream, Device& dev, const ProbView& logp, const C51Input& in,
                            const std::vector<int>& branches, const ActingRng& rng) {
  QView q("q", logp.extent(0), logp.extent(1));
  zs::kernels::q_from_log_probs<zs::ExecSpace>(stream.exec(), logp, in.v_min, in.v_max, q);
  return select_q(stream, dev, q, branches, rng);
}

}  // namespace

TEST(Acting, C51HeadPathMatchesTheDoubleReference) {
  for (const auto& branches : std::vector<std::vector<int>>{{5, 3, 3}, {1}, {7, 1, 13}}) {
    for (int atoms : {2, 51, 101}) {
      const std::size_t batch = 263;
      const int a_total = total(branches);
      const auto seed = zs::test::fresh_seed();
      SCOPED_TRACE(testing::Message()
                   << branches.size() << " branches, atoms = " << atoms << ", seed = " << seed);
      const auto in = random_c51(batch, a_total, atoms, seed);
      const auto p = logp_to_device(in, batch, a_total);
      zs::Stream stream;
      for (float eps : {0.f, 0.4f}) {
        Device dc;
        dc.set_eps(eps);
        const ActingRng rng{seed, 5};
        EXPECT_EQ(select_c51(stream, dc, p, in, branches, rng), host_select(in.expect, branches, eps, rng, 0))
            << "eps " << eps;
        EXPECT_EQ(dc.count(), 1u);
      }
    }
  }
}

TEST(Acting, C51NaNInADistributionNeverWins) {
  const std::vector<int> branches = {5, 3, 3};
  const std::size_t batch = 64;
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed = " << seed);
  auto in = random_c51(batch, 11, 51, seed);
  const float dz = (in.v_max - in.v_min) / 50.f;
  for (std::size_t b = 0; b < batch; ++b) {
    // Poison branch 0's greedy action: with NaN (its Q is NaN) on odd samples, with +Inf at a
    // negative atom (its Q is −Inf) on even ones. Either way the runner-up must win.
    std::vector<double> q0(in.expect[b].begin(), in.expect[b].begin() + 5);
    const int best = host_argmax(q0);
    in.logp[(b * 11 + best) * 51 + (b % 25)] = b % 2 ? kNaN : kInf;
    for (int a = 0; a < 11; ++a) {
      double q = 0;
      for (int j = 0; j < 51; ++j) q += std::exp(double(in.logp[(b * 11 + a) * 51 + j])) * (in.v_min + j * double(dz));
      in.expect[b][a] = static_cast<float>(q);
    }
    ASSERT_FALSE(std::isfinite(in.expect[b][best]));
  }
  zs::Stream stream;
  Device dev;
  dev.set_eps(0.f);
  const ActingRng rng{seed, 0};
  const auto got = select_c51(stream, dev, logp_to_device(in, batch, 11), in, branches, rng);
  EXPECT_EQ(got, host_select(in.expect, branches, 0.f, rng, 0));
  for (std::size_t b = 0; b < batch; ++b) {
    std::vector<double> q0(in.expect[b].begin(), in.expect[b].begin() + 5);
    EXPECT_TRUE(std::isfinite(q0[got[b * 3]])) << "sample " << b;
  }
}

TEST(Acting, GraphReplayAdvancesTheCounterAndReadsEpsilonFromDevice) {
  const std::vector<int> branches = {5, 3, 3};
  const std::size_t batch = 256;
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed = " << seed);
  zs::Stream stream;
  Device dev;
  dev.set_eps(0.25f);
  ProbView p("p", batch, 11, 51);
  QView q("q", batch, 11);
  Actions actions("a", batch, 3);
  const ActingRng rng{seed, 9};
  const C51Input shape = random_c51(1, 11, 51, seed);  // v_min, v_max
  auto body = [&] {
    zs::kernels::q_from_log_probs<zs::ExecSpace>(stream.exec(), p, shape.v_min, shape.v_max, q);
    zs::kernels::epsilon_greedy(stream.exec(), q, branches, dev.epsilon, dev.counter, rng, actions);
  };
  body();  // first use outside capture
  stream.synchronize();
  zs::Graph graph;
  graph.capture(stream, body);
  ASSERT_TRUE(graph.captured());
  const float eps_per_replay[] = {0.f, 0.5f, 1.f, 0.1f};
  for (int replay = 0; replay < 4; ++replay) {
    const auto cin = random_c51(batch, 11, 51, seed + replay + 1);
    Kokkos::deep_copy(p, logp_to_device(cin, batch, 11));
    dev.set_eps(eps_per_replay[replay]);
    graph.replay(stream);
    stream.synchronize();
    const std::uint64_t call = replay + 1;  // the direct run drew with counter 0
    const auto got = zs::test::to_host(actions);
    EXPECT_EQ(std::vector<int>(got.begin(), got.end()),
              host_select(cin.expect, branches, eps_per_replay[replay], rng, call))
        << "replay " << replay;
    EXPECT_EQ(dev.count(), call + 1);
  }
}

TEST(Acting, BadShapesAreClearErrors) {
  zs::Stream stream;
  Device dev;
  const ActingRng rng{1, 0};
  auto expect_error = [&](auto&& call, const std::string& needle) {
    try {
      call();
      ADD_FAILURE() << "no error; expected one containing '" << needle << "'";
    } catch (const zs::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  QView q("q", 4, 11), empty("q0", 0, 11);
  Actions actions("a", 4, 3), actions0("a0", 0, 3), wrong("aw", 4, 2);
  expect_error(
      [&] {
        zs::kernels::epsilon_greedy(stream.exec(), empty, {5, 3, 3}, dev.epsilon, dev.counter, rng,
                                    actions0);
      },
      "batch B = 0; expected at least 1");
  expect_error(
      [&] {
        zs::kernels::epsilon_greedy(stream.exec(), q, {5, 3, 2}, dev.epsilon, dev.counter, rng,
                                    actions);
      },
      "A_total = 11 columns; expected 10");
  expect_error(
      [&] {
        zs::kernels::epsilon_greedy(stream.exec(), q, {5, 3, 3}, dev.epsilon, dev.counter, rng,
                                    wrong);
      },
      "actions is [4, 2]; expected [4, 3]");
  expect_error(
      [&] {
        zs::kernels::epsilon_greedy(stream.exec(), q, {}, dev.epsilon, dev.counter, rng, actions);
      },
      "0 branches given; expected 1..32");
  expect_error(
      [&] {
        zs::kernels::epsilon_greedy(stream.exec(), q, {5, 0, 6}, dev.epsilon, dev.counter, rng,
                                    actions);
      },
      "branch 1 has 0 actions; expected at least 1");
  expect_error(
      [&] {
        zs::kernels::epsilon_greedy(stream.exec(), q, std::vector<int>(33, 1), dev.epsilon,
                                    dev.counter, rng, actions);
      },
      "33 branches given; expected 1..32");
  stream.synchronize();
  EXPECT_EQ(dev.count(), 0u) << "a rejected call advanced the counter";
}
