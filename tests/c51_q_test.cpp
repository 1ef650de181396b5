// Q from C51 log-probabilities (kernels/c51_q.hpp) against a double reference, the greedy key's
// order against the documented rule, and the point of having one Q: the loss's double-DQN a*
// equals acting's greedy action on exact ties, one-ulp near-ties and NaN rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "backends/stream.hpp"
#include "core/config.hpp"
#include "kernels/acting.hpp"
#include "kernels/c51_q.hpp"
#include "losses/c51.hpp"
#include "nn/batch.hpp"
#include "nn/network.hpp"
#include "test_util.hpp"

namespace {

using QView = Kokkos::View<float**, Kokkos::LayoutRight, zs::MemSpace>;
using LogpView = Kokkos::View<float***, Kokkos::LayoutRight, zs::MemSpace>;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Q = Σ_j exp(logp_j)·z_j with z_j = v_min + j·Δz, in double.
std::vector<double> reference_q(const std::vector<float>& logp, float v_min, float v_max, int rows, int A, int atoms) {
  const double dz = double((v_max - v_min) / float(atoms - 1));
  std::vector<double> q(std::size_t(rows) * A);
  for (int r = 0; r < rows; ++r)
    for (int a = 0; a < A; ++a) {
      double s = 0;
      for (int j = 0; j < atoms; ++j) s += std::exp(double(logp[(std::size_t(r) * A + a) * atoms + j])) * (v_min + j * dz);
      q[std::size_t(r) * A + a] = s;
    }
  return q;
}

std::vector<float> random_logp(int rows, int A, int atoms, std::uint64_t seed) {
  auto x = zs::test::random_normal(std::size_t(rows) * A * atoms, seed, 2.f);
  for (std::size_t row = 0; row < std::size_t(rows) * A; ++row) {
    float* l = x.data() + row * atoms;
    const float m = *std::max_element(l, l + atoms);
    double s = 0;
    for (int j = 0; j < atoms; ++j) s += std::exp(double(l[j]) - m);
    for (int j = 0; j < atoms; ++j) l[j] = float(double(l[j]) - m - std::log(s));
  }
  return x;
}

LogpView to_device(const std::vector<float>& lp, int rows, int A, int atoms) {
  LogpView d("logp", rows, A, atoms);
  auto h = Kokkos::create_mirror_view(d);
  std::copy(lp.begin(), lp.end(), h.data());
  Kokkos::deep_copy(d, h);
  return d;
}

// The documented rule, written out plainly: largest Q, lowest index among equal ones, NaN never
// wins, all NaN → 0.
int reference_greedy(const std::vector<float>& q) {
  int best = -1;
  for (int a = 0; a < static_cast<int>(q.size()); ++a)
    if (!std::isnan(q[a]) && (best < 0 || q[a] > q[best])) best = a;
  return best < 0 ? 0 : best;
}

}  // namespace

TEST(C51Q, QFromLogProbsIsTheDoubleSumRoundedOnce) {
  struct Shape {
    int rows, A, atoms;
  };
  for (const auto& sh : {Shape{1, 1, 2}, Shape{7, 11, 51}, Shape{256, 11, 51}, Shape{31, 5, 101}, Shape{4099, 13, 53}}) {
    const auto seed = zs::test::fresh_seed();
    SCOPED_TRACE(testing::Message() << sh.rows << " x " << sh.A << " x " << sh.atoms << ", seed " << seed);
    const auto lp = random_logp(sh.rows, sh.A, sh.atoms, seed);
    const float v_min = -3.5f, v_max = 12.f;
    const auto ref = reference_q(lp, v_min, v_max, sh.rows, sh.A, sh.atoms);
    zs::Stream stream;
    QView q("q", sh.rows, sh.A);
    Kokkos::deep_copy(q, kNaN);  // poison
    zs::kernels::q_from_log_probs<zs::ExecSpace>(stream.exec(), to_device(lp, sh.rows, sh.A, sh.atoms), v_min, v_max, q);
    stream.synchronize();
    const auto got = zs::test::to_host(q);
    for (std::size_t i = 0; i < ref.size(); ++i) ASSERT_EQ(got[i], static_cast<float>(ref[i])) << "element " << i;
  }
}

TEST(C51Q, GreedyKeyFollowsTheDocumentedRule) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  const float specials[] = {0.f, -0.f, kNaN, kInf, -kInf, 1.f, std::nextafter(1.f, 2.f), -1e-30f, 3e38f};
  std::uniform_int_distribution<int> pick(0, 8), len(1, 9);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (int trial = 0; trial < 20000; ++trial) {
    std::vector<float> q(len(rng));
    for (float& x : q) x = rng() % 3 == 0 ? specials[pick(rng)] : normal(rng);
    if (rng() % 4 == 0) q.back() = q.front();  // an exact tie
    const int got = zs::kernels::greedy_action([&](int a) { return q[a]; }, static_cast<int>(q.size()));
    ASSERT_EQ(got, reference_greedy(q)) << "trial " << trial;
  }
}

// The loss's a* against acting's greedy action on Q(s′) from the same log-probabilities, with exact
// ties (identical distributions), one-ulp near-ties (a single log-probability nudged by an ulp)
// and NaN rows planted among random ones.
TEST(C51Q, LossBestActionIsActingsGreedyActionOnTiesAndNearTies) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  zs::Config c;
  c.state_dim = 3;
  c.trunk = {4};
  c.head_hidden = 4;
  c.branches = {5, 3, 3};
  c.atoms = 51;
  const int B = 97, A = c.total_actions(), J = c.atoms;
  const zs::ParamLayout layout(c);
  const zs::Network net(c, layout);
  zs::Activations online(c, 2 * B), target(c, B);
  auto lp = random_logp(2 * B, A, J, seed);
  std::mt19937_64 rng(seed + 1);
  const auto row = [&](int r, int a) { return lp.data() + (std::size_t(r) * A + a) * J; };
  for (int i = 0; i < B; ++i) {
    const int r = B + i;  // s′ rows decide a*
    for (int k = 0; k < 3; ++k) {
      const int c0 = net.table().cum(k), n = net.table().size(k);
      const int a = c0 + static_cast<int>(rng() % n), b = c0 + static_cast<int>(rng() % n);
      switch (i % 4) {
        case 0: std::copy(row(r, a), row(r, a) + J, row(r, b)); break;  // exact tie
        case 1:                                                         // near-tie
          std::copy(row(r, a), row(r, a) + J, row(r, b));
          {
            const int j = static_cast<int>(rng() % J);
            row(r, b)[j] = std::nextafter(row(r, b)[j], rng() % 2 ? 1.f : -1.f);
          }
          break;
        case 2: row(r, a)[rng() % J] = kNaN; break;  // a NaN distribution never wins
        default: break;
      }
    }
  }
  Kokkos::deep_copy(online.logp, to_device(lp, 2 * B, A, J));
  Kokkos::deep_copy(target.logp, to_device(random_logp(B, A, J, seed + 2), B, A, J));
  zs::DeviceBatch batch(c, B);
  zs::upload(zs::ExecSpace(), c, zs::random_batch(c, B, seed + 3), batch);
  zs::C51Outputs out(c, B);
  zs::Gradients g(c, B);
  zs::Stream stream;
  zs::c51_loss(stream.exec(), net, online, target, batch, out, g);

  // Acting on the same s′ rows: Q from the head, then ε = 0.
  LogpView next("next", B, A, J);
  Kokkos::deep_copy(next, Kokkos::subview(online.logp, std::make_pair(B, 2 * B), Kokkos::ALL, Kokkos::ALL));
  QView q("q", B, A);
  zs::kernels::q_from_log_probs<zs::ExecSpace>(stream.exec(), next, c.v_min, c.v_max, q);
  zs::DeviceScalar<float> eps("eps");  // zero: greedy
  zs::DeviceScalar<std::uint64_t> counter("counter");
  Kokkos::View<std::int32_t**, Kokkos::LayoutRight, zs::MemSpace> acted("acted", B, 3);
  zs::kernels::epsilon_greedy(stream.exec(), q, c.branches, eps, counter, {seed, 0}, acted);
  stream.synchronize();
  const auto best = zs::test::to_host(out.best);
  const auto greedy = zs::test::to_host(acted);
  const auto hq = zs::test::to_host(q);
  int ties = 0;
  for (int i = 0; i < B; ++i)
    for (int k = 0; k < 3; ++k) {
      EXPECT_EQ(best[i * 3 + k], greedy[i * 3 + k]) << "sample " << i << ", branch " << k;
      const int c0 = net.table().cum(k), n = net.table().size(k);
      std::vector<float> branch(hq.begin() + i * A + c0, hq.begin() + i * A + c0 + n);
      EXPECT_EQ(best[i * 3 + k], reference_greedy(branch)) << "sample " << i << ", branch " << k;
      ties += std::count(branch.begin(), branch.end(), branch[reference_greedy(branch)]) > 1;
    }
  EXPECT_GT(ties, 10) << "the planted ties did not survive: the test would prove nothing";
}
