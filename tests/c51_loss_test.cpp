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

}  // namespace
