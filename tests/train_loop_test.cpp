// The training loop: its small kernels against naive references, a short cart-pole run whose
// greedy return clearly improves, and a resumed run that continues bit-for-bit like an
// uninterrupted one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backends/stream.hpp"
#include "backends/warp_tile.hpp"
#include "kernels/loop_schedules.hpp"
#include "test_util.hpp"
#include "core/safetensors.hpp"
#include "rl/actor.hpp"
#include "rl/train_loop.hpp"

namespace {

using zs::test::fresh_seed;

template <class View>
auto host_copy(const View& v) {
  return Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
}

TEST(TrainLoopKernels, SchedulesFollowTheLinearRampPerIteration) {
  zs::Stream stream;
  Kokkos::View<std::int64_t*, zs::MemSpace> counters("c", 1);
  const zs::kernels::Schedules<zs::ExecSpace> s{Kokkos::View<float, zs::MemSpace>("eps"),
                                                Kokkos::View<float, zs::MemSpace>("beta"),
                                                Kokkos::View<float, zs::MemSpace>("alpha"),
                                                {1.f, 0.05f, 1000},
                                                {0.4f, 1.f, 5000},
                                                {0.7f, 0.5f, 300}};
  // The naive reference: start → end linearly over `steps` env steps, then end.
  const auto ramp = [](double start, double end, double steps, double x) {
    return x >= steps ? end : start + x / steps * (end - start);
  };
  const int envs = 7;
  for (int it = 0; it < 200; ++it) {
    zs::kernels::advance_schedules<zs::ExecSpace>(stream.exec(), counters, s, envs);
    stream.synchronize();
    const std::int64_t steps = static_cast<std::int64_t>(it) * envs;
    ASSERT_NEAR(host_copy(s.epsilon)(), ramp(1, 0.05, 1000, steps), 1e-6) << "iteration " << it;
    ASSERT_NEAR(host_copy(s.beta)(), ramp(0.4, 1, 5000, steps), 1e-6) << "iteration " << it;
    ASSERT_NEAR(host_copy(s.alpha)(), ramp(0.7, 0.5, 300, steps), 1e-6) << "iteration " << it;
  }
  EXPECT_EQ(host_copy(counters)(0), 200);
  EXPECT_NE(zs::test::error_of([&] { zs::kernels::advance_schedules<zs::ExecSpace>(stream.exec(), counters, s, 0); })
                .find("envs = 0"),
            std::string::npos);
}

TEST(TrainLoopKernels, SummariseEpisodesSkipsEnvsWithoutAFinishedEpisode) {
  zs::Stream stream;
  const std::vector<float> returns = {10.f, NAN, 30.f, 5.f, 7.f};
  const std::vector<std::int32_t> done = {1, 0, 2, 0, 3};
  Kokkos::View<float*, zs::MemSpace> r("r", returns.size());
  Kokkos::View<std::int32_t*, zs::MemSpace> d("d", done.size());
  auto hr = Kokkos::create_mirror_view(r);
  auto hd = Kokkos::create_mirror_view(d);
  for (std::size_t i = 0; i < returns.size(); ++i) hr(i) = returns[i], hd(i) = done[i];
  Kokkos::deep_copy(r, hr);
  Kokkos::deep_copy(d, hd);
  Kokkos::View<zs::kernels::EvalRecord, zs::MemSpace> out("out");
  zs::kernels::summarise_episodes<zs::ExecSpace>(stream.exec(), r, d, out, &zs::kernels::EvalRecord::episodes);
  stream.synchronize();
  zs::kernels::EvalRecord h;
  Kokkos::deep_copy(h, out);
  EXPECT_EQ(h.episodes.count, 3);  // env 3 has a return but no finished episode: not counted
  EXPECT_NEAR(h.episodes.mean, (10 + 30 + 7) / 3.0, 1e-12);
  EXPECT_EQ(h.episodes.min, 7);
  EXPECT_EQ(h.episodes.max, 30);
  EXPECT_EQ(h.episodes.episodes, 6);
  EXPECT_EQ(h.round, 0) << "the summary writes its own field only";
  hd(0) = hd(2) = hd(4) = 0;
  Kokkos::deep_copy(d, hd);
  zs::kernels::summarise_episodes<zs::ExecSpace>(stream.exec(), r, d, out, &zs::kernels::EvalRecord::episodes);
  stream.synchronize();
  Kokkos::deep_copy(h, out);
  EXPECT_EQ(h.episodes.count, 0);
  EXPECT_TRUE(std::isnan(h.episodes.mean));
}

// A small cart-pole agent: quick enough for every test run, big enough to learn.
zs::TrainConfig small_cartpole(std::uint64_t seed) {
  zs::TrainConfig c = zs::TrainConfig::defaults_for("cartpole");
  c.seed = seed;
  c.network.trunk = {64, 64};
  c.network.head_hidden = 32;
  c.network.atoms = 21;
  c.envs = 4;
  c.batch_size = 32;
  c.learning_starts = 200;
  c.replay_capacity = 4000;
  c.epsilon = {1.f, 0.05f, 600};
  c.eval_episodes = 8;
  c.eval_every = 0;
  c.stop_when_solved = false;
  return c;
}

std::vector<float> flat_params(const zs::Trainer& t) {
  auto h = host_copy(t.online().flat());
  return {h.data(), h.data() + h.size()};
}

// Two runs that must be one: the same parameters, environments and sum-tree, bit for bit.
void expect_same_run(zs::TrainLoop& a, zs::TrainLoop& b) {
  EXPECT_TRUE(zs::test::same_bits(flat_params(b.trainer()), flat_params(a.trainer())));
  const auto obs_a = host_copy(a.env().obs), obs_b = host_copy(b.env().obs);
  EXPECT_TRUE(zs::test::same_bits(std::vector<float>(obs_a.data(), obs_a.data() + obs_a.size()),
                                  std::vector<float>(obs_b.data(), obs_b.data() + obs_b.size())));
  const auto tree_a = host_copy(a.replay().sum_tree()), tree_b = host_copy(b.replay().sum_tree());
  EXPECT_TRUE(zs::test::same_bits(std::vector<double>(tree_a.data(), tree_a.data() + tree_a.size()),
                                  std::vector<double>(tree_b.data(), tree_b.data() + tree_b.size())));
}

// A loop's checkpoint as it would be read back (a temporary file, removed).
zs::safetensors::File checkpoint_of(const zs::TrainLoop& loop, const std::string& name) {
  const std::string path = zs::test::temp_path(name);
  loop.save(path);
  zs::safetensors::File f = zs::safetensors::read(path);
  std::filesystem::remove(path);
  return f;
}

// Every tensor of two loops' checkpoints (environments, replay and its sum-tree, counters,
// parameters and optimizer) the same bits.
void expect_same_checkpoint(const zs::TrainLoop& a, const zs::TrainLoop& b) {
  const zs::safetensors::File fa = checkpoint_of(a, "same-a.safetensors"), fb = checkpoint_of(b, "same-b.safetensors");
  ASSERT_EQ(fa.tensors.size(), fb.tensors.size());
  int compared = 0;
  for (const auto& [name, t] : fa.tensors) {
    const auto it = fb.tensors.find(name);
    ASSERT_NE(it, fb.tensors.end()) << name;
    EXPECT_EQ(t.shape, it->second.shape) << name;
    EXPECT_TRUE(t.bytes == it->second.bytes) << "tensor " << name << " differs";
    ++compared;
  }
  EXPECT_GT(compared, 20);
}

// Two loops side by side for n iterations, then both finished on the device.
void iterate_both(zs::TrainLoop& a, zs::TrainLoop& b, int n) {
  for (int i = 0; i < n; ++i) {
    a.iterate();
    b.iterate();
  }
  a.synchronize();
  b.synchronize();
}

// The Q two loops' actors acted on last agree to a forward's rounding (TF32 products on CUDA).
void expect_same_q(const zs::TrainLoop& a, const zs::TrainLoop& b) {
  const auto qa = zs::test::to_host(a.actor().q()), qb = zs::test::to_host(b.actor().q());
  ASSERT_EQ(qa.size(), qb.size());
  const bool tf32 = zs::WarpTile<zs::ExecSpace>::kRoundsToTf32;
  double worst = 0, largest = 0;
  for (std::size_t i = 0; i < qb.size(); ++i) {
    worst = std::max(worst, std::abs(double(qa[i]) - qb[i]));
    largest = std::max(largest, std::abs(double(qb[i])));
  }
  EXPECT_GT(largest, 0.0);
  EXPECT_LT(worst, (tf32 ? 3e-3 : 1e-5) * std::max(1.0, largest));
}

TEST(TrainLoop, ResumedRunContinuesExactlyLikeAnUninterruptedOne) {
  const auto seed = fresh_seed();
  SCOPED_TRACE(seed);
  zs::TrainConfig c = small_cartpole(seed);
  c.learning_starts = 40;
  c.eval_every = 200;  // an evaluation on each side of the checkpoint
  const int total = 120, first = 55;
  zs::TrainLoop whole(c);
  for (int i = 0; i < total; ++i) {
    whole.iterate();
    if (whole.env_steps() % c.eval_every == 0) whole.enqueue_eval();
  }
  whole.synchronize();

  const std::string dir = zs::test::temp_path("ckpt.safetensors");
  std::filesystem::remove_all(dir);
  {
    zs::TrainLoop part(c);
    for (int i = 0; i < first; ++i) {
      part.iterate();
      if (part.env_steps() % c.eval_every == 0) part.enqueue_eval();
    }
    part.save(dir);
  }
  zs::TrainLoop resumed(c);
  resumed.load(dir);
  EXPECT_EQ(resumed.iterations(), first);
  for (int i = first; i < total; ++i) {
    resumed.iterate();
    if (resumed.env_steps() % c.eval_every == 0) resumed.enqueue_eval();
  }
  resumed.synchronize();
  EXPECT_GT(whole.updates(), 0);
  EXPECT_EQ(resumed.updates(), whole.updates());
  expect_same_run(whole, resumed);
  // Evaluation results agree too.
  std::vector<double> ea, eb;
  while (auto e = whole.poll_eval()) ea.push_back(e->mean);
  while (auto e = resumed.poll_eval()) eb.push_back(e->mean);
  ASSERT_FALSE(eb.empty());
  EXPECT_EQ(ea.back(), eb.back());
}

TEST(TrainLoop, CheckpointFromAnotherConfigIsRefused) {
  const auto seed = fresh_seed();
  zs::TrainConfig c = small_cartpole(seed);
  const std::string dir = zs::test::temp_path("ckpt.safetensors");
  std::filesystem::remove_all(dir);
  {
    zs::TrainLoop a(c);
    a.iterate();
    a.save(dir);
  }
  c.network.lr *= 2;
  zs::TrainLoop b(c);
  EXPECT_NE(zs::test::error_of([&] { b.load(dir); }).find("different config"), std::string::npos);
  EXPECT_NE(zs::test::error_of([&] { b.load(dir + ".nowhere"); }).find("does not exist or is not a file"),
            std::string::npos);
}

// A checkpoint whose counters were altered (a flipped bit, a hand edit) is refused with a message
// naming the counter, and the loop is left as it was.
TEST(TrainLoop, CheckpointWithAbsurdCountersIsRefused) {
  const auto seed = fresh_seed();
  SCOPED_TRACE(seed);
  zs::TrainConfig c = small_cartpole(seed);
  c.learning_starts = 20;
  const std::string path = zs::test::temp_path("ckpt_counters.safetensors");
  {
    zs::TrainLoop a(c);
    for (int i = 0; i < 30; ++i) a.iterate();
    a.save(path);
  }
  const auto good = zs::safetensors::read(path);
  struct Case {
    const char* tensor;
    int index;
    std::int64_t value;
    const char* message;
  };
  const Case cases[] = {
      {"loop.host", 0, -1, "iterations = -1"},
      {"loop.host", 0, std::int64_t{1} << 60, "iterations = "},
      {"loop.host", 1, -5, "updates = -5"},
      {"loop.host", 2, 1000, "evaluations = 1000"},
      {"loop.counters", 0, 7, "device iteration counter is 7"},
      {"steps", 0, -3, "steps = -3"},
      {"guard.step", 0, 1 << 30, "guard.step = "},
      {"replay.counters", 0, -9, "replay step counter -9"},
      {"replay.counters", 1, -1, "says -1 transitions can be sampled"},
  };
  for (const auto& k : cases) {
    SCOPED_TRACE(testing::Message() << k.tensor << "[" << k.index << "] = " << k.value);
    auto f = good;
    auto v = f.i64(k.tensor, f.at(k.tensor).shape);
    v[k.index] = k.value;
    f.tensors[k.tensor] = zs::safetensors::Tensor::from<std::int64_t>(f.at(k.tensor).shape, v);
    zs::safetensors::write(path, f);
    zs::TrainLoop b(c);
    const auto before = flat_params(b.trainer());
    const std::string msg = zs::test::error_of([&] { b.load(path); });
    EXPECT_NE(msg.find(k.message), std::string::npos) << msg;
    EXPECT_EQ(b.iterations(), 0);
  }
  std::filesystem::remove(path);
}

// LoopOptions::fused_acting: the actors' forward is the fused kernel (up to
// fused_acting_max_rows environments), the first acting Q is the launch plans' to rounding, and
// the loop trains on it.
TEST(TrainLoop, FusedActingActsLikeThePlansAndTrains) {
  const auto seed = fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const zs::TrainConfig c = small_cartpole(seed);
  zs::LoopOptions fused, plans;
  fused.fused_acting = true;
  plans.fused_acting = false;  // the default where the fused step is (CUDA) is on
  fused.row_block_acting = plans.row_block_acting = 0;  // likewise
  zs::TrainLoop with(c, nullptr, fused), without(c, nullptr, plans);
  ASSERT_TRUE(with.actor().fused()) << with.actor().fused_off_reason();
  EXPECT_TRUE(with.eval_actor().fused()) << with.eval_actor().fused_off_reason();
  EXPECT_FALSE(without.actor().fused());
  with.iterate();
  without.iterate();
  with.synchronize();
  without.synchronize();
  expect_same_q(with, without);
  const auto before = flat_params(with.trainer());
  while (with.updates() < 50) with.iterate();
  with.enqueue_eval();
  with.synchronize();
  EXPECT_NE(flat_params(with.trainer()), before);
  const auto e = with.poll_eval();
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->episodes, c.eval_episodes);
  const auto m = with.trainer().metrics();
  ASSERT_TRUE(m.has_value());
  EXPECT_FALSE(m->halt_nan);
  // More environments than fused_acting_max_rows: the plans.
  fused.fused_acting_max_rows = c.envs - 1;
  zs::TrainLoop over(c, nullptr, fused);
  EXPECT_FALSE(over.actor().fused());
  EXPECT_FALSE(over.eval_actor().fused());  // its 8 evaluation episodes are over the limit too
}

// The collect as two launches (the row-block forward, then one team for the schedules, the
// dueling head, Q, ε-greedy, the environments' step and the replay insert) against the separate
// launches. With ε = 1 every action is the RNG's, whatever Q is, so the two loops must keep the
// same bits in every tensor of a checkpoint (environments, replay and its sum-tree, counters,
// parameters and optimizer after training steps), and the Q they acted on agree to the forward's
// rounding. Evaluation (greedy, so near-ties could part them) is checked to run, not compared.
TEST(TrainLoop, RowBlockCollectKeepsEveryBitOfTheSeparateLaunches) {
  const auto seed = fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  zs::TrainConfig c = small_cartpole(seed);
  c.epsilon = {1.f, 1.f, 0};
  c.learning_starts = 40;
  // Overlapped, an iteration that trains runs the tail without the schedules and the insert.
  for (const auto& [rows, overlap] : {std::pair{16, zs::CollectOverlap::off}, std::pair{32, zs::CollectOverlap::off},
                                     std::pair{16, zs::CollectOverlap::on}}) {
    SCOPED_TRACE(testing::Message() << rows << " rows a block, overlap " << static_cast<int>(overlap));
    zs::LoopOptions rb, plain;
    rb.fused_acting = plain.fused_acting = false;
    rb.row_block_acting = rb.row_block_acting_beside = rows;
    plain.row_block_acting = 0;
    rb.overlap_collect = plain.overlap_collect = overlap;
    zs::TrainLoop with(c, nullptr, rb), without(c, nullptr, plain);
    EXPECT_EQ(with.overlaps_collect(), overlap == zs::CollectOverlap::on);
    ASSERT_EQ(with.actor().row_blocks(), rows) << with.actor().row_block_off_reason();
    EXPECT_EQ(with.eval_actor().row_blocks(), rows) << with.eval_actor().row_block_off_reason();
    EXPECT_EQ(without.actor().row_blocks(), 0);
    iterate_both(with, without, 60);
    EXPECT_GT(with.updates(), 0);
    expect_same_q(with, without);

    expect_same_checkpoint(with, without);

    with.enqueue_eval();
    with.synchronize();
    const auto e = with.poll_eval();
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->episodes, c.eval_episodes);
  }
}

// The row blocks with the schedule's ε: the loop trains (the parameters move, no NaN), and an
// actor that cannot run them says why and acts as before.
TEST(TrainLoop, RowBlockCollectTrainsAndSaysWhyWhereItCannot) {
  const auto seed = fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  zs::TrainConfig c = small_cartpole(seed);
  c.learning_starts = 40;
  zs::LoopOptions rb;
  rb.row_block_acting = rb.row_block_acting_beside = 16;
  zs::TrainLoop loop(c, nullptr, rb);
  ASSERT_EQ(loop.actor().row_blocks(), 16) << loop.actor().row_block_off_reason();
  const auto before = flat_params(loop.trainer());
  while (loop.updates() < 30) loop.iterate();
  loop.synchronize();
  EXPECT_NE(flat_params(loop.trainer()), before);
  const auto m = loop.trainer().metrics();
  ASSERT_TRUE(m.has_value());
  EXPECT_FALSE(m->halt_nan);
  // Where the collect runs beside the step (the default, updates = 1), the training actor takes
  // row_block_acting_beside (0 by default) and the evaluation actor row_block_acting.
  zs::LoopOptions beside;
  beside.row_block_acting = 16;
  zs::TrainLoop fused_beside(c, nullptr, beside);
  ASSERT_TRUE(fused_beside.overlaps_collect());
  EXPECT_EQ(fused_beside.actor().row_blocks(), 0);
  EXPECT_EQ(fused_beside.eval_actor().row_blocks(), 16) << fused_beside.eval_actor().row_block_off_reason();
  // More environments than row_block_acting_max_rows: the actor as without the option.
  rb.row_block_acting_max_rows = c.envs - 1;
  zs::TrainLoop over(c, nullptr, rb);
  EXPECT_EQ(over.actor().row_blocks(), 0);
  EXPECT_EQ(over.eval_actor().row_blocks(), 0);  // its 8 evaluation episodes are over the limit too
  rb.row_block_acting_max_rows = 16;
  rb.row_block_acting = 20;
  try {
    zs::TrainLoop bad(c, nullptr, rb);
    ADD_FAILURE() << "row_block_acting = 20 was taken";
  } catch (const zs::Error& e) {
    EXPECT_NE(std::string(e.what()).find("row_block_rows = 20"), std::string::npos) << e.what();
  }
  // FP32 products: the fused kernels round to TF32 on CUDA, so there the actor says why.
  if (zs::WarpTile<zs::ExecSpace>::kRoundsToTf32) {
    c.network.precision = zs::Precision::fp32;
    rb.row_block_acting = 16;
    zs::TrainLoop fp32(c, nullptr, rb);
    EXPECT_EQ(fp32.actor().row_blocks(), 0);
    EXPECT_FALSE(fp32.actor().row_block_off_reason().empty());
    fp32.iterate();
    fp32.synchronize();
  }
}

// The collect beside the step (LoopOptions::overlap_collect): a run resumed from a checkpoint
// continues bit for bit like an uninterrupted one (so the side stream leaves nothing to chance),
// and the run trains.
TEST(TrainLoop, OverlappedCollectResumesBitForBitAndTrains) {
  const auto seed = fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  zs::TrainConfig c = small_cartpole(seed);
  c.learning_starts = 40;
  zs::LoopOptions o;
  o.overlap_collect = zs::CollectOverlap::on;
  const int total = 90, first = 47;
  zs::TrainLoop whole(c, nullptr, o);
  const auto before = flat_params(whole.trainer());
  for (int i = 0; i < total; ++i) whole.iterate();
  whole.synchronize();
  EXPECT_EQ(whole.updates(), total - 40 / c.envs + 1);
  EXPECT_NE(flat_params(whole.trainer()), before);
  const auto m = whole.trainer().metrics();
  ASSERT_TRUE(m.has_value());
  EXPECT_FALSE(m->halt_nan);

  const std::string path = zs::test::temp_path("overlap.safetensors");
  {
    zs::TrainLoop part(c, nullptr, o);
    for (int i = 0; i < first; ++i) part.iterate();
    part.save(path);
  }
  zs::TrainLoop resumed(c, nullptr, o);
  resumed.load(path);
  for (int i = first; i < total; ++i) resumed.iterate();
  resumed.synchronize();
  std::filesystem::remove(path);
  EXPECT_EQ(resumed.updates(), whole.updates());
  expect_same_run(whole, resumed);
}

// In an iteration that trains, the overlapped actor acts on the parameters the iteration started
// with (a copy made before the step), not on the step's: its Q is an actor's on those parameters
// and observations. At ε = 1 its environments see the same actions as without the option (the
// acting RNG's draws), so they and the transitions the replay holds stay the same bits.
TEST(TrainLoop, OverlappedCollectActsOnTheParametersTheIterationStartedWith) {
  const auto seed = fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  zs::TrainConfig c = small_cartpole(seed);
  c.learning_starts = 40;
  c.epsilon = {1.f, 1.f, 0};
  zs::LoopOptions o, plain;
  o.overlap_collect = zs::CollectOverlap::on;
  plain.overlap_collect = zs::CollectOverlap::off;
  zs::TrainLoop loop(c, nullptr, o), sequential(c, nullptr, plain);
  iterate_both(loop, sequential, 30);
  ASSERT_GT(loop.updates(), 0);
  const auto p0 = flat_params(loop.trainer());
  const auto obs_now = host_copy(loop.env().obs);  // on the host, the device view itself: copy it out
  const std::vector<float> o0(obs_now.data(), obs_now.data() + obs_now.size());
  loop.iterate();  // trains: the step and the acting side by side
  loop.synchronize();
  const auto p1 = flat_params(loop.trainer());
  ASSERT_NE(p1, p0) << "the iteration should have trained";

  const zs::Config& net = loop.trainer().config();
  const int envs = c.envs;
  zs::Stream stream;
  auto q_on = [&](const std::vector<float>& params) {
    zs::Actor ref(net, loop.trainer().layout(), stream, envs, {seed, 9});
    zs::ParamBuffer buf(loop.trainer().layout(), "ref");
    Kokkos::deep_copy(buf.flat(), zs::test::to_device(params));
    zs::DeviceFloats obs("obs", o0.size());
    Kokkos::deep_copy(obs, zs::test::to_device(o0));
    zs::DeviceScalar<float> eps("eps");
    ref.act(buf, zs::ConstMatrixView(obs.data(), envs, net.state_dim), eps);
    stream.synchronize();
    return zs::test::to_host(ref.q());
  };
  const auto got = zs::test::to_host(loop.actor().q());
  const auto want = q_on(p0), after = q_on(p1);
  const bool tf32 = zs::WarpTile<zs::ExecSpace>::kRoundsToTf32;
  double gap = 0, moved = 0, largest = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    gap = std::max(gap, std::abs(double(got[i]) - want[i]));
    moved = std::max(moved, std::abs(double(after[i]) - want[i]));
    largest = std::max(largest, std::abs(double(want[i])));
  }
  EXPECT_LT(gap, (tf32 ? 3e-3 : 1e-5) * std::max(1.0, largest));
  if (!tf32) {
    EXPECT_GT(moved, 10 * gap) << "the step should move Q more than the forwards' rounding";
  }

  sequential.iterate();
  sequential.synchronize();
  const zs::safetensors::File fa = checkpoint_of(loop, "ov-a.safetensors"), fb = checkpoint_of(sequential, "ov-b.safetensors");
  int compared = 0;
  for (const auto& [name, t] : fa.tensors) {
    const bool data = name.rfind("env.", 0) == 0 || name == "actor.counter" || name == "replay.obs" ||
                      name == "replay.next_obs" || name == "replay.actions" || name == "replay.reward" ||
                      name == "replay.flags" || name == "replay.row_step";
    if (!data) continue;
    EXPECT_TRUE(t.bytes == fb.tensors.at(name).bytes) << "tensor " << name << " differs";
    ++compared;
  }
  EXPECT_GE(compared, 8);
}

// The overlapped iteration's launch layouts (LoopOptions::replay_beside, one_launch_head and the
// gather in the head or a launch of its own) do the same work in the same order on the replay, so
// after training steps every tensor of a checkpoint keeps the bits of the separate launches, with
// the actor on row blocks and without. A negative head_gather_max is refused naming the value.
TEST(TrainLoop, OverlappedLaunchLayoutsKeepEveryBitOfTheSeparateLaunches) {
  const auto seed = fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  zs::TrainConfig c = small_cartpole(seed);
  c.learning_starts = 40;
  using B = zs::ReplayBeside;
  struct Layout {
    B beside;
    bool head;
    std::int64_t gather_max;
  };
  // c.batch_size × the state's 4 values = 128: 512 gathers in the head, 0 in a launch of its own.
  const Layout layouts[] = {{B::insert, false, 512},
                            {B::insert, true, 512},
                            {B::none, true, 512},
                            {B::insert_and_priorities, false, 512},
                            {B::insert_and_priorities, true, 512},
                            {B::insert_and_priorities, true, 0}};
  for (const int rows : {16, 0}) {
    zs::LoopOptions separate;
    separate.overlap_collect = zs::CollectOverlap::on;
    separate.row_block_acting = separate.row_block_acting_beside = rows;
    separate.replay_beside = B::none;
    separate.one_launch_head = false;
    zs::TrainLoop reference(c, nullptr, separate);
    for (int i = 0; i < 60; ++i) reference.iterate();
    reference.synchronize();
    ASSERT_GT(reference.updates(), 0);
    for (const Layout& l : layouts) {
      SCOPED_TRACE(testing::Message() << rows << " rows a block; beside " << static_cast<int>(l.beside)
                                      << ", one-launch head " << l.head << ", gather in the head up to "
                                      << l.gather_max);
      zs::LoopOptions o = separate;
      o.replay_beside = l.beside;
      o.one_launch_head = l.head;
      o.head_gather_max = l.gather_max;
      zs::TrainLoop loop(c, nullptr, o);
      ASSERT_TRUE(loop.overlaps_collect());
      for (int i = 0; i < 60; ++i) loop.iterate();
      loop.synchronize();
      EXPECT_EQ(loop.updates(), reference.updates());
      expect_same_checkpoint(loop, reference);
    }
  }
  zs::LoopOptions bad;
  bad.head_gather_max = -1;
  try {
    zs::TrainLoop loop(c, nullptr, bad);
    ADD_FAILURE() << "head_gather_max = -1 was taken";
  } catch (const zs::Error& e) {
    EXPECT_NE(std::string(e.what()).find("head_gather_max = -1"), std::string::npos) << e.what();
  }
}

// The default overlaps the collect where the config allows it (updates = 1) and runs one after
// the other where it does not; asked for outright, it refuses such a config.
TEST(TrainLoop, OverlappedCollectIsTheDefaultWhereItCanAndRefusedWhereAskedAndItCannot) {
  zs::TrainConfig c = small_cartpole(fresh_seed());
  c.learning_starts = 16;
  {
    zs::TrainLoop one(c);
    EXPECT_TRUE(one.overlaps_collect());
  }
  c.updates = 2;
  zs::TrainLoop two(c);
  EXPECT_FALSE(two.overlaps_collect());
  for (int i = 0; i < 4; ++i) two.iterate();
  two.synchronize();
  EXPECT_EQ(two.updates(), 2 * (4 - 16 / c.envs + 1));
  zs::LoopOptions o;
  o.overlap_collect = zs::CollectOverlap::on;
  try {
    zs::TrainLoop loop(c, nullptr, o);
    ADD_FAILURE() << "overlap_collect with updates = 2 was taken";
  } catch (const zs::Error& e) {
    EXPECT_NE(std::string(e.what()).find("updates = 2; expected 1"), std::string::npos) << e.what();
  }
}

TEST(TrainLoop, ShortCartpoleRunClearlyImprovesTheGreedyReturn) {
  // A random network's greedy policy usually drops the pole within a few dozen steps, but now
  // and then one balances for a hundred or more; such a draw cannot show learning, so redraw.
  std::unique_ptr<zs::TrainLoop> owner;
  std::optional<zs::EvalResult> before;
  for (int draw = 0; draw < 8 && (!before || before->mean >= 60); ++draw) {
    const auto seed = fresh_seed();
    zs::TrainConfig c = small_cartpole(seed);
    c.eval_episodes = 20;
    owner = std::make_unique<zs::TrainLoop>(c);
    owner->enqueue_eval();  // the untrained network
    owner->synchronize();
    before = owner->poll_eval();
    ASSERT_TRUE(before.has_value());
    std::printf("seed %llu: untrained greedy return %.1f\n", static_cast<unsigned long long>(seed), before->mean);
  }
  zs::TrainLoop& loop = *owner;
  double best = before->mean;
  // Evaluate every 2,000 env steps; stop as soon as the agent is clearly better. Two draws in
  // three get there by 4,000 steps, but the rest spread out to 22,000 (124 draws measured), so
  // the budget is 60,000: a draw that fails has not learnt, rather than learnt late.
  for (int round = 0; round < 30 && best < 150; ++round) {
    for (int i = 0; i < 500; ++i) loop.iterate();
    loop.enqueue_eval();
    loop.synchronize();
    while (auto e = loop.poll_eval()) best = std::max(best, e->mean);
  }
  std::printf("greedy return: %.1f untrained -> best %.1f after %lld env steps\n", before->mean, best,
              static_cast<long long>(loop.env_steps()));
  EXPECT_LT(before->mean, 60);  // an untrained greedy policy falls within a few dozen steps
  EXPECT_GE(best, 150);
}

}  // namespace
