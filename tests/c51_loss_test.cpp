// The C51 loss kernel on hostile inputs: huge, infinite and NaN rewards or dones with a valid
// support, and supports the config refuses (a span that overflows, a spacing of 0) handed to
// the kernel directly. None may write outside a view (the openmp-debug build checks bounds and
// runs ASan); every projected mass stays in [0, 1].
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

#include "kernels/c51_loss.hpp"
#include "test_util.hpp"

namespace {

using zs::ExecSpace;
using zs::MemSpace;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct Result {
  std::vector<float> projected, priorities;
};

// One launch on B samples of two branches (2 and 3 actions), uniform distributions everywhere.
Result run(const zs::kernels::Support& sup, const std::vector<float>& rewards, const std::vector<float>& dones) {
  const int B = static_cast<int>(rewards.size()), K = 2, A = 5, atoms = sup.atoms;
  using F3 = Kokkos::View<float***, Kokkos::LayoutRight, MemSpace>;
  using I2 = Kokkos::View<int**, Kokkos::LayoutRight, MemSpace>;
  F3 online("online", 2 * B, A, atoms), target("target", B, A, atoms), projected("projected", B, K, atoms);
  Kokkos::deep_copy(online, -std::log(static_cast<float>(atoms)));
  Kokkos::deep_copy(target, -std::log(static_cast<float>(atoms)));
  I2 actions("actions", B, K), best("best", B, K);
  zs::DeviceFloats d_value("d_value", static_cast<std::size_t>(B) * atoms);
  zs::DeviceFloats d_branch("d_branch", static_cast<std::size_t>(B) * A * atoms);
  zs::DeviceFloats priorities("priorities", B);
  Kokkos::View<float, MemSpace> loss("loss");

  zs::kernels::C51Loss<ExecSpace> f;
  f.logp_online = online;
  f.logp_target = target;
  f.actions = actions;
  f.rewards = zs::test::to_device(rewards);
  f.dones = zs::test::to_device(dones);
  f.weights = zs::test::to_device(std::vector<float>(B, 1.f));
  f.priorities = priorities;
  f.projected = projected;
  f.best = best;
  f.d_value = Kokkos::View<float**, Kokkos::LayoutRight, MemSpace, Kokkos::MemoryUnmanaged>(d_value.data(), B, atoms);
  f.d_branch_out = Kokkos::View<float*, MemSpace, Kokkos::MemoryUnmanaged>(d_branch.data(), d_branch.extent(0));
  f.table = zs::kernels::BranchTable::of({2, 3});
  f.sup = sup;
  ExecSpace exec;
  zs::kernels::c51_loss(exec, f, loss);
  exec.fence();
  return {zs::test::to_host(projected), zs::test::to_host(priorities)};
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

// The device's projection gathers each target atom from the run of sources within one atom of it
// (C51Loss::gather, found by bisection when the positions rise): the same terms in the same order
// as the loop over every source, so the same bits. Positions as the loss forms them: spread out,
// bunched (γⁿ small), all on one point (done), past both ends; and a falling set, which loops.
TEST(C51Loss, TheProjectionsRunOfSourcesGivesTheFullLoopsBits) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const int atoms = 51;
  const zs::kernels::Support sup{-10.f, 10.f, 0.99f, atoms};
  zs::kernels::C51Loss<Kokkos::DefaultHostExecutionSpace> f;
  f.sup = sup;
  const auto noise = zs::test::random_normal(8 * atoms + 8, seed, 1.f);
  std::vector<float> prob(atoms);
  for (int l = 0; l < atoms; ++l) prob[l] = std::abs(noise[l]) / atoms;
  int checked = 0;
  for (int c = 0; c < 8; ++c) {
    const float reward = 6.f * noise[8 * atoms + c], scale = c == 2 ? 0.f : (c == 3 ? 0.05f : (c == 7 ? -0.9f : 0.99f));
    std::vector<float> pos(atoms);
    for (int l = 0; l < atoms; ++l) {
      float tz = reward + scale * sup.z(l);
      tz = tz < sup.v_min ? sup.v_min : (tz > sup.v_max ? sup.v_max : tz);
      pos[l] = (tz - sup.v_min) / sup.delta();
    }
    bool rising = true;
    for (int l = 1; l < atoms; ++l) rising = rising && !(pos[l] < pos[l - 1]);
    EXPECT_EQ(rising, scale >= 0.f) << "case " << c;
    for (int j = 0; j < atoms; ++j) {
      float full = 0.f;
      for (int l = 0; l < atoms; ++l) {
        const float w = 1.f - std::fabs(pos[l] - static_cast<float>(j));
        if (w > 0.f) full += prob[l] * w;
      }
      const float got = f.gather(pos.data(), prob.data(), atoms, j, rising);
      EXPECT_TRUE(zs::test::same_bits(std::vector<float>{got}, std::vector<float>{full}))
          << "case " << c << ", atom " << j << ": " << got << " vs " << full;
      checked += full > 0.f;
    }
  }
  EXPECT_GT(checked, 8 * 2);  // mass landed somewhere in every case
}

}  // namespace
