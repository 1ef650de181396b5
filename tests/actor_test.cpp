// The actor: greedy actions from the batched forward plan, from the fused forward and from the row
// blocks (with the one-team tail) against a double-precision reference network, the forward
// following the parameters it is handed, and graph replay equal to direct launches.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "backends/graph.hpp"
#include "backends/stream.hpp"
#include "backends/warp_tile.hpp"
#include "network_reference.hpp"
#include "rl/actor.hpp"
#include "test_util.hpp"

namespace {

constexpr bool kTf32 = zs::WarpTile<zs::ExecSpace>::kRoundsToTf32;

// The fused forward's options for the actors that run it; nullptr for the launch plans.
const zs::FusedOptions* forward_of(bool fused) {
  static const zs::FusedOptions options{};
  return fused ? &options : nullptr;
}

// How an actor runs its forward: the launch plans, the fused kernel, or row blocks of 16 or 32.
struct Mode {
  bool fused = false;
  int row_blocks = 0;
  const char* name = "";
};
const Mode kModes[] = {{false, 0, "launch plans"}, {true, 0, "fused forward"}, {false, 16, "row blocks of 16"},
                       {false, 32, "row blocks of 32"}};

zs::Config actor_config(std::uint64_t seed) {
  zs::Config c;
  c.state_dim = 7;
  c.trunk = {24, 16};
  c.head_hidden = 12;
  c.branches = {5, 3, 2};
  c.atoms = 11;
  c.v_min = -4.f;
  c.v_max = 6.f;
  c.precision = zs::Precision::fp32;
  c.seed = seed;
  return c;
}

std::vector<double> random_params(const zs::ParamLayout& layout, std::uint64_t seed) {
  const auto r = zs::test::random_normal(layout.size(), seed, 0.4f);
  std::vector<double> p(layout.size(), 0.0);
  for (const auto& t : layout.tensors())
    for (std::size_t i = 0; i < t.size(); ++i) p[t.offset + i] = r[t.offset + i];
  return p;
}

void upload_params(const zs::ParamBuffer& buf, const std::vector<double>& p) {
  std::vector<float> f(p.begin(), p.end());
  Kokkos::deep_copy(buf.flat(), zs::test::to_device(f));
}

// Greedy actions of the reference net, and whether each (row, branch) has a clear winner (the
// top two Qs apart by more than float rounding could move them).
struct RefActions {
  std::vector<int> actions;
  std::vector<bool> clear;
};

RefActions reference_actions(const zs::Config& c, const zs::ParamLayout& layout, const std::vector<double>& P,
                             const std::vector<float>& obs, int rows, double margin = 1e-4) {
  const zs::test::RefNet ref(c, layout);
  const auto lp = ref.forward(P, std::vector<double>(obs.begin(), obs.end()), rows);
  RefActions out;
  for (int r = 0; r < rows; ++r) {
    int c0 = 0;
    for (int n : c.branches) {
      int best = 0;
      double q_best = -INFINITY, second = -INFINITY;
      for (int a = 0; a < n; ++a) {
        const double q = ref.q_of(lp, r, c0 + a);
        if (q > q_best) second = q_best, q_best = q, best = a;
        else if (q > second) second = q;
      }
      out.actions.push_back(best);
      out.clear.push_back(n == 1 || q_best - second > margin * (1 + std::fabs(q_best)));
      c0 += n;
    }
  }
  return out;
}

}  // namespace

// The launch plans' forward and the fused one (which rounds its products to TF32 on CUDA, so
// there a wider margin tells a near-tie from a winner).
TEST(Actor, GreedyActionsMatchTheDoubleReferenceAndFollowTheParameters) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  for (const Mode& mode : kModes) {
  SCOPED_TRACE(mode.name);
  const bool fused = mode.fused || mode.row_blocks != 0;  // TF32 products on CUDA
  auto c = actor_config(seed);
  if (fused && kTf32) c.precision = zs::Precision::tf32;
  const double margin = fused && kTf32 ? 1e-2 : 1e-4;
  const zs::ParamLayout layout(c);
  const int rows = 37;
  zs::Stream stream;
  zs::Actor actor(c, layout, stream, rows, {seed, 3}, forward_of(mode.fused), mode.row_blocks);
  ASSERT_EQ(actor.fused(), mode.fused) << actor.fused_off_reason();
  ASSERT_EQ(actor.row_blocks(), mode.row_blocks) << actor.row_block_off_reason();
  zs::ParamBuffer a(layout, "a"), b(layout, "b");
  const auto pa = random_params(layout, seed + 1), pb = random_params(layout, seed + 2);
  upload_params(a, pa);
  upload_params(b, pb);
  const auto obs = zs::test::random_normal(std::size_t(rows) * c.state_dim, seed + 3);
  const auto dobs = zs::test::to_device(obs);
  const zs::ConstMatrixView obs_view(dobs.data(), rows, c.state_dim);
  zs::DeviceScalar<float> greedy("eps");  // zero
  int checked = 0;
  // a, then b (the plan must follow the buffer it is handed), then a again.
  for (const auto& [buf, P] : {std::make_pair(&a, &pa), std::make_pair(&b, &pb), std::make_pair(&a, &pa)}) {
    actor.act(*buf, obs_view, greedy);
    stream.synchronize();
    const auto got = zs::test::to_host(actor.actions());
    const auto want = reference_actions(c, layout, *P, obs, rows, margin);
    for (std::size_t i = 0; i < want.actions.size(); ++i)
      if (want.clear[i]) {
        EXPECT_EQ(got[i], want.actions[i]) << "row " << i / c.branches.size() << ", branch " << i % c.branches.size();
        ++checked;
      }
  }
  EXPECT_GT(checked, static_cast<int>(3 * rows * c.branches.size() * (fused && kTf32 ? 7 : 9) / 10))
      << "too many near-ties to check";
  }
}

TEST(Actor, GraphReplayEqualsDirectLaunch) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  for (const Mode& mode : kModes) {
  SCOPED_TRACE(mode.name);
  auto c = actor_config(seed);
  if ((mode.fused || mode.row_blocks != 0) && kTf32) c.precision = zs::Precision::tf32;
  const zs::ParamLayout layout(c);
  const int rows = 16;
  zs::Stream stream;
  zs::Actor graph_actor(c, layout, stream, rows, {seed, 1}, forward_of(mode.fused), mode.row_blocks),
      direct_actor(c, layout, stream, rows, {seed, 1}, forward_of(mode.fused), mode.row_blocks);
  ASSERT_EQ(graph_actor.fused(), mode.fused) << graph_actor.fused_off_reason();
  ASSERT_EQ(graph_actor.row_blocks(), mode.row_blocks) << graph_actor.row_block_off_reason();
  zs::ParamBuffer p(layout, "p");
  upload_params(p, random_params(layout, seed + 1));
  zs::DeviceFloats obs("obs", std::size_t(rows) * c.state_dim);
  const zs::ConstMatrixView obs_view(obs.data(), rows, c.state_dim);
  zs::DeviceScalar<float> eps("eps");
  Kokkos::deep_copy(eps, 0.3f);
  zs::Graph graph;
  for (int step = 0; step < 5; ++step) {
    Kokkos::deep_copy(obs, zs::test::to_device(zs::test::random_normal(std::size_t(rows) * c.state_dim, seed + 10 + step)));
    graph.run(stream, [&] { graph_actor.act(p, obs_view, eps); });
    direct_actor.act(p, obs_view, eps);
    stream.synchronize();
    EXPECT_TRUE(zs::test::same_bits(zs::test::to_host(graph_actor.q()), zs::test::to_host(direct_actor.q()))) << step;
    const auto ga = zs::test::to_host(graph_actor.actions()), da = zs::test::to_host(direct_actor.actions());
    EXPECT_EQ(std::vector<int>(ga.begin(), ga.end()), std::vector<int>(da.begin(), da.end())) << "step " << step;
  }
  EXPECT_TRUE(graph.captured());
  }
}

// The one-team tail's Q against the reference's, at a head wide enough that the dueling head runs
// in several tiles of team scratch (51 atoms, 3 branches: 3 KB a row, 10 rows a tile), and rows
// that leave the last row block ragged.
TEST(Actor, RowBlockTailsQMatchesTheDoubleReferenceTileByTile) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  auto c = actor_config(seed);
  c.atoms = 51;
  c.branches = {5, 3, 3};
  if (kTf32) c.precision = zs::Precision::tf32;
  const zs::ParamLayout layout(c);
  const int rows = 45;
  zs::Stream stream;
  zs::Actor actor(c, layout, stream, rows, {seed, 5}, nullptr, 16);
  ASSERT_EQ(actor.row_blocks(), 16) << actor.row_block_off_reason();
  zs::ParamBuffer p(layout, "p");
  const auto P = random_params(layout, seed + 1);
  upload_params(p, P);
  const auto obs = zs::test::random_normal(std::size_t(rows) * c.state_dim, seed + 2);
  const auto dobs = zs::test::to_device(obs);
  const zs::ConstMatrixView obs_view(dobs.data(), rows, c.state_dim);
  const auto stages = [&] {
    actor.prepare(p, obs_view);
    zs::DeviceScalar<float> eps("eps");
    return actor.acting_stages(eps);
  }();
  EXPECT_GE(stages.dueling_tiles, 4) << "the head should need several tiles of scratch";
  zs::DeviceScalar<float> greedy("eps");
  actor.act(p, obs_view, greedy);
  stream.synchronize();
  const zs::test::RefNet ref(c, layout);
  const auto lp = ref.forward(P, std::vector<double>(obs.begin(), obs.end()), rows);
  const auto q = zs::test::to_host(actor.q());
  const int A = 11;
  ASSERT_EQ(q.size(), std::size_t(rows) * A);
  const double tol = kTf32 ? 2e-2 : 1e-5;
  for (int r = 0; r < rows; ++r)
    for (int a = 0; a < A; ++a) {
      const double want = ref.q_of(lp, r, a);
      EXPECT_NEAR(q[std::size_t(r) * A + a], want, tol * (1 + std::fabs(want))) << "row " << r << ", action " << a;
    }
  const auto counter = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), actor.counter());
  EXPECT_EQ(counter(), 1u) << "the tail advances the acting RNG's counter once a call";
}

// An actor asked for row blocks of a size they do not come in refuses, naming the value; one
// whose config the fused kernels do not run acts on its other forward and says why.
TEST(Actor, RowBlocksRefuseBadSizesAndSayWhyTheyAreOff) {
  const auto seed = zs::test::fresh_seed();
  auto c = actor_config(seed);
  if (kTf32) c.precision = zs::Precision::tf32;
  const zs::ParamLayout layout(c);
  zs::Stream stream;
  try {
    zs::Actor bad(c, layout, stream, 8, {seed, 1}, nullptr, 24);
    ADD_FAILURE() << "24 rows a block were taken";
  } catch (const zs::Error& e) {
    EXPECT_NE(std::string(e.what()).find("row_block_rows = 24"), std::string::npos) << e.what();
  }
  zs::Actor off(c, layout, stream, 8, {seed, 1}, nullptr, 0);
  EXPECT_EQ(off.row_blocks(), 0);
  zs::DeviceScalar<float> eps("eps");
  EXPECT_THROW(off.acting_stages(eps), zs::Error);
  if (kTf32) {
    c.precision = zs::Precision::fp32;
    const zs::ParamLayout fp32_layout(c);
    zs::Actor fp32(c, fp32_layout, stream, 8, {seed, 1}, nullptr, 16);
    EXPECT_EQ(fp32.row_blocks(), 0);
    EXPECT_NE(fp32.row_block_off_reason().find("TF32"), std::string::npos) << fp32.row_block_off_reason();
  }
}
