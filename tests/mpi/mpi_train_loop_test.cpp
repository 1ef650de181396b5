// The training loop as several ranks: each explores its own environments with its own replay
// while the parameters stay shared; a checkpoint holds every rank's state, resumes exactly with
// the same number of ranks, and is refused by another number.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "mpi_test_util.hpp"
#include "rl/train_loop.hpp"

namespace {

using zs::test::world;

zs::TrainConfig small_cartpole(std::uint64_t seed) {
  zs::TrainConfig c = zs::TrainConfig::defaults_for("cartpole");
  c.seed = seed;
  c.network.trunk = {32, 32};
  c.network.head_hidden = 16;
  c.network.atoms = 21;
  c.envs = 4;
  c.batch_size = 16;
  c.learning_starts = 40;
  c.replay_capacity = 2000;
  c.epsilon = {1.f, 0.05f, 600};
  c.eval_episodes = 4;
  c.eval_every = 0;
  c.stop_when_solved = false;
  return c;
}

template <class View>
std::vector<typename View::non_const_value_type> host_values(const View& v) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  return {h.data(), h.data() + h.size()};
}

}  // namespace

TEST(MpiTrainLoop, RanksExploreApartAndShareTheirParameters) {
  const auto seed = zs::test::shared_seed();
  SCOPED_TRACE(seed);
  zs::TrainLoop loop(small_cartpole(seed), &world());
  for (int i = 0; i < 60; ++i) loop.iterate();
  loop.synchronize();
  ASSERT_GT(loop.updates(), 0);
  const auto obs = zs::test::all_copies(host_values(loop.env().obs));
  EXPECT_NE(obs[0], obs[1]) << "every rank has environments of its own (seed + rank)";
  const auto params = zs::test::all_copies(host_values(loop.trainer().online().flat()));
  for (int r = 1; r < world().size(); ++r) EXPECT_EQ(params[r], params[0]) << "rank " << r;
}

TEST(MpiTrainLoop, ResumeWithTheSameRanksContinuesExactly) {
  const auto seed = zs::test::shared_seed();
  SCOPED_TRACE(seed);
  const zs::TrainConfig c = small_cartpole(seed);
  const int total = 90, first = 45;
  zs::TrainLoop whole(c, &world());
  for (int i = 0; i < total; ++i) whole.iterate();
  whole.synchronize();

  const std::string path = zs::test::temp_path("ckpt.safetensors");  // rank 0's; the same name everywhere
  if (world().rank() == 0) std::filesystem::remove(path);
  {
    zs::TrainLoop part(c, &world());
    for (int i = 0; i < first; ++i) part.iterate();
    part.save(path);
  }
  zs::TrainLoop resumed(c, &world());
  resumed.load(path);
  EXPECT_EQ(resumed.iterations(), first);
  for (int i = first; i < total; ++i) resumed.iterate();
  resumed.synchronize();
  EXPECT_EQ(resumed.updates(), whole.updates());
  EXPECT_EQ(host_values(resumed.trainer().online().flat()), host_values(whole.trainer().online().flat()));
  EXPECT_EQ(host_values(resumed.env().obs), host_values(whole.env().obs)) << "rank " << world().rank();
  EXPECT_EQ(host_values(resumed.replay().sum_tree()), host_values(whole.replay().sum_tree()))
      << "rank " << world().rank();

  // One process cannot take over a checkpoint of several ranks.
  if (world().rank() == 0) {
    zs::TrainLoop alone(c);
    const std::string message = zs::test::error_of([&] { alone.load(path); });
    EXPECT_NE(message.find("was written by a run of " + std::to_string(world().size()) + " rank(s); this run has 1"),
              std::string::npos)
        << message;
    std::filesystem::remove(path);
  }
}
