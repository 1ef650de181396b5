// The whole step through zs::Trainer: its loss against the double reference, its update against
// a host Adam on the device gradient, graph replay against direct launch, and a NaN batch that
// trips the guard and changes nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "network_reference.hpp"
#include "same_batches.hpp"
#include "test_util.hpp"
#include "losses/iqn.hpp"
#include "train/trainer.hpp"

namespace {

zs::Config small_config(std::uint64_t seed) {
  return zs::Config::from_json({{"state_dim", 6}, {"trunk", {16, 12}}, {"head_hidden", 8}, {"branches", {3, 2, 2}},
                                {"atoms", 11}, {"v_min", -5}, {"v_max", 5}, {"gamma", 0.95}, {"n_step", 3},
                                {"lr", 1e-3}, {"max_grad_norm", 0.01}, {"tau", 0.01}, {"seed", seed},
                                {"precision", "fp32"}});
}

std::vector<float> host_copy(const zs::DeviceFloats& d) { return zs::test::to_host(d); }

// `j` with every auxiliary on, at small sizes: IQN (3 quantiles, embedding 4), a 2-member
// ensemble and CQL.
nlohmann::json with_every_auxiliary(nlohmann::json j) {
  j["iqn"] = {{"n_tau", 3}, {"embed_dim", 4}};
  j["ensemble"] = {{"k", 2}};
  j["cql"] = true;
  return j;
}

// One graph step of each trainer (for step_on_same_batches).
void step_both(zs::Trainer& x, zs::Trainer& y) {
  x.step();
  y.step();
}

// The kernels and copies enqueued while one lives, by label, through Kokkos' tools hooks: on
// CUDA each is a node of the step's graph, and each node costs the step a few microseconds.
class LaunchLog {
 public:
  LaunchLog() : saved_(Kokkos::Tools::Experimental::get_callbacks()) {
    entries().clear();
    Kokkos::Tools::Experimental::set_begin_parallel_for_callback(&launch);
    Kokkos::Tools::Experimental::set_begin_parallel_reduce_callback(&launch);
    Kokkos::Tools::Experimental::set_begin_parallel_scan_callback(&launch);
    Kokkos::Tools::Experimental::set_begin_deep_copy_callback(&copy);
  }
  ~LaunchLog() { Kokkos::Tools::Experimental::set_callbacks(saved_); }
  LaunchLog(const LaunchLog&) = delete;
  LaunchLog& operator=(const LaunchLog&) = delete;
  static std::vector<std::string>& entries() {
    static std::vector<std::string> e;
    return e;
  }

 private:
  static void launch(const char* name, const std::uint32_t, std::uint64_t* id) {
    entries().emplace_back(name);
    *id = 0;
  }
  static void copy(Kokkos::Tools::SpaceHandle, const char* dst, const void*, Kokkos::Tools::SpaceHandle,
                   const char*, const void*, std::uint64_t) {
    entries().push_back(std::string("deep_copy to ") + dst);
  }
  Kokkos::Tools::Experimental::EventSet saved_;
};


}  // namespace

TEST(Trainer, FirstStepLossAndAdamUpdateMatchReferences) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const auto c = small_config(seed);
  zs::TrainerOptions opt;
  opt.batch_size = 9;
  zs::Trainer tr(c, opt);
  const auto hb = zs::random_batch(c, 9, seed + 1);
  zs::upload(tr.stream().exec(), c, hb, tr.batch());
  const auto p0 = host_copy(tr.online().flat());
  const auto t0 = host_copy(tr.target().flat());
  tr.step_direct();
  tr.synchronize();

  // Loss against the double reference on the initial parameters.
  zs::test::RefNet ref(c, tr.layout());
  zs::test::RefBatch rb;
  rb.B = 9;
  rb.states.assign(hb.states.begin(), hb.states.end());
  rb.next_states.assign(hb.next_states.begin(), hb.next_states.end());
  rb.actions = hb.actions;
  rb.rewards.assign(hb.rewards.begin(), hb.rewards.end());
  rb.dones.assign(hb.dones.begin(), hb.dones.end());
  rb.weights.assign(hb.weights.begin(), hb.weights.end());
  const auto expect = ref.loss(std::vector<double>(p0.begin(), p0.end()), std::vector<double>(t0.begin(), t0.end()), rb);
  float loss = 0;
  Kokkos::deep_copy(loss, tr.loss().loss);
  EXPECT_NEAR(loss, expect.loss, 1e-5 * expect.loss + 1e-6);

  // Adam (torch semantics, t = 1) with the clip scale, on the device's own gradient.
  const auto g = host_copy(tr.grad().flat());
  double norm = 0;
  for (float x : g) norm += double(x) * x;
  norm = std::sqrt(norm);
  double grad_norm = 0;
  Kokkos::deep_copy(grad_norm, tr.grad_norm());
  EXPECT_NEAR(grad_norm, norm, 1e-9 * norm);
  const double scale = std::min(1.0, double(c.max_grad_norm) / (norm + 1e-6));
  ASSERT_LT(scale, 1.0) << "max_grad_norm is small on purpose, so clipping is exercised";
  const auto p1 = host_copy(tr.online().flat());
  const auto t1 = host_copy(tr.target().flat());
  const double b1 = c.adam_beta1, b2 = c.adam_beta2;
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double gi = double(g[i]) * scale;
    const double m = (1 - b1) * gi, v = (1 - b2) * gi * gi;
    const double p = p0[i] - c.lr / (1 - b1) * m / (std::sqrt(v) / std::sqrt(1 - b2) + c.adam_eps);
    ASSERT_NEAR(p1[i], p, 1e-6 + 1e-5 * std::abs(p)) << "param " << i;
    const double t = t0[i] + c.tau * (p1[i] - t0[i]);
    ASSERT_NEAR(t1[i], t, 1e-6 + 1e-5 * std::abs(t)) << "target " << i;
  }
}

TEST(Trainer, PlainStepTailIsTwoLaunchesOnItsChain) {
  // Without auxiliaries, the step after the backward pass: the norm, whose last thread runs the
  // guard and Adam's prepare (the clip scale, t), and one elementwise pass (Adam with the Polyak
  // update fused in). It was seven launches, then four. The guard's mailbox post rides in the
  // norm's thread, or (posts_beside, the default) goes to the side lane beside the update.
  for (const bool beside : {false, true}) {
    zs::TrainerOptions opt;
    opt.posts_beside = beside;
    zs::Trainer tr(small_config(1), opt);
    tr.step_direct();  // first-use allocations (reduction scratch) out of the way
    tr.synchronize();
    std::vector<std::string> launched;
    {
      LaunchLog log;
      tr.enqueue_phase(zs::Trainer::Phase::norm_and_guard);
      tr.enqueue_phase(zs::Trainer::Phase::optimizer);
      launched = LaunchLog::entries();
    }
    tr.synchronize();
    const std::vector<std::string> expected =
        beside ? std::vector<std::string>{"zs::grad_norms", "zs::mailbox_post", "zs::adam_polyak_update"}
               : std::vector<std::string>{"zs::grad_norms", "zs::adam_polyak_update"};
    EXPECT_EQ(launched, expected);
  }
}

TEST(Trainer, GraphReplayEqualsDirectLaunch) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const auto c = small_config(seed);
  zs::TrainerOptions opt;
  opt.batch_size = 16;
  zs::Trainer graph(c, opt), direct(c, opt);
  zs::test::step_on_same_batches(graph, direct, 6, seed + 100, [](zs::Trainer& g, zs::Trainer& d) {
    g.step();
    d.step_direct();
  });
  EXPECT_TRUE(graph.graph_recorded());
  EXPECT_TRUE(zs::test::same_bits(host_copy(graph.online().flat()), host_copy(direct.online().flat())));
  EXPECT_TRUE(zs::test::same_bits(host_copy(graph.target().flat()), host_copy(direct.target().flat())));
  EXPECT_TRUE(zs::test::same_bits(host_copy(graph.optimizer().v().flat()), host_copy(direct.optimizer().v().flat())));
  const auto mg = graph.metrics(), md = direct.metrics();
  ASSERT_TRUE(mg && md);
  EXPECT_EQ(mg->step, 5);
  EXPECT_EQ(mg->steps_behind, 0);
  EXPECT_EQ(mg->raw_loss, md->raw_loss);
  EXPECT_EQ(mg->running.steps, 6);
}

// The trunk's bias and ReLU inside its products (cuBLASLt epilogues on CUDA; the online net's two
// passes as one product, the target's on the side lane), and the heads' hidden layers' too, and
// the output layers' rows padded, and the backward's and forward's heads stacked: graph replay equals direct
// launch bit for bit, and the first step's loss and gradient norm are the plain step's to rounding.
TEST(Trainer, FusedBiasReplaysBitForBitAndMatchesThePlainStep) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const auto c = small_config(seed);
  // 0: the trunk's; 1: the heads' hidden layers' too; 3: and the output layers' rows padded;
  // 7: and the backward's heads stacked; 15: and the forward's (stacked activations).
  for (const int variant : {0, 1, 3, 7, 15}) {
    SCOPED_TRACE(testing::Message() << "variant " << variant);
    zs::TrainerOptions fused, plain;
    fused.batch_size = plain.batch_size = 16;
    fused.fused_step = plain.fused_step = false;  // the launch plans' options (CUDA fuses B = 16)
    fused.fused_bias = true;
    fused.heads_bias = (variant & 1) != 0;
    fused.padded_outputs = (variant & 2) != 0;
    fused.stacked_heads = (variant & 4) != 0;
    fused.stacked_forward = (variant & 8) != 0;
    plain.fused_bias = false;
    plain.padded_outputs = false;
    zs::Trainer graph(c, fused), direct(c, fused), reference(c, plain);
    zs::test::step_on_same_batches(graph, reference, 1, seed + 100, step_both);
    const auto mf = graph.metrics(), mp = reference.metrics();
    ASSERT_TRUE(mf && mp);
    EXPECT_NEAR(mf->raw_loss, mp->raw_loss, 1e-5 * std::max(1.0, std::abs(double(mp->raw_loss))));
    EXPECT_NEAR(mf->raw_grad_norm, mp->raw_grad_norm, 1e-5 * std::max(1.0, std::abs(double(mp->raw_grad_norm))));
    EXPECT_GT(mp->raw_grad_norm, 0.0);
    zs::Trainer graph2(c, fused);
    zs::test::step_on_same_batches(graph2, direct, 6, seed + 200, [](zs::Trainer& g, zs::Trainer& d) {
      g.step();
      d.step_direct();
    });
    EXPECT_TRUE(graph2.graph_recorded());
    EXPECT_TRUE(zs::test::same_bits(host_copy(graph2.online().flat()), host_copy(direct.online().flat())));
    EXPECT_TRUE(zs::test::same_bits(host_copy(graph2.target().flat()), host_copy(direct.target().flat())));
  }
}

// Trains one trainer with each of two options on the same six batches (graph steps) and expects
// every bit of the online and target nets and of Adam's moments, and the loss and gradient norm,
// alike; `check` then looks at the pair (e.g. at what their graphs hold).
void expect_same_training(const nlohmann::json& j, zs::TrainerOptions with, zs::TrainerOptions without,
                          std::uint64_t seed,
                          const std::function<void(const zs::Trainer&, const zs::Trainer&)>& check = {}) {
  SCOPED_TRACE(j.dump());
  const auto c = zs::Config::from_json(j);
  with.batch_size = without.batch_size = 16;
  zs::Trainer a(c, with), b(c, without);
  zs::test::step_on_same_batches(a, b, 6, seed, step_both);
  EXPECT_TRUE(a.graph_recorded());
  EXPECT_TRUE(zs::test::same_bits(host_copy(a.online().flat()), host_copy(b.online().flat())));
  EXPECT_TRUE(zs::test::same_bits(host_copy(a.target().flat()), host_copy(b.target().flat())));
  EXPECT_TRUE(zs::test::same_bits(host_copy(a.optimizer().m().flat()), host_copy(b.optimizer().m().flat())));
  EXPECT_TRUE(zs::test::same_bits(host_copy(a.optimizer().v().flat()), host_copy(b.optimizer().v().flat())));
  const auto ma = a.metrics(), mb = b.metrics();
  ASSERT_TRUE(ma && mb);
  EXPECT_EQ(ma->raw_loss, mb->raw_loss);
  EXPECT_EQ(ma->raw_grad_norm, mb->raw_grad_norm);
  if (check) check(a, b);
}

// The side lane (weight gradients on a second stream, forked and joined inside the step's
// graph) changes no bit of the training: plain and with every auxiliary, whose terms enqueue
// their own plans and products on it.
TEST(Trainer, TheSideLaneChangesNoBitOfTheTraining) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const auto plain = small_config(seed).to_json();
  zs::TrainerOptions with, without;
  without.side_lane = false;
  for (const auto& j : {plain, with_every_auxiliary(plain)}) expect_same_training(j, with, without, seed + 100);
}

// The C51 loss under a launch bound (TrainerOptions::c51_min_blocks: fewer registers, more warps)
// changes no bit of the training, plain and with every auxiliary; other bounds are refused.
TEST(Trainer, TheLossLaunchBoundChangesNoBitOfTheTraining) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const auto plain = small_config(seed).to_json();
  for (const int bound : {10, 12}) {
    zs::TrainerOptions with, without;
    with.fused_step = without.fused_step = false;  // the launch plans' loss (CUDA fuses B = 16)
    with.c51_min_blocks = bound;
    for (const auto& j : {plain, with_every_auxiliary(plain)}) expect_same_training(j, with, without, seed + bound);
  }
  zs::TrainerOptions bad;
  bad.c51_min_blocks = 8;
  EXPECT_NE(zs::test::error_of([&] { zs::Trainer(small_config(seed), bad); })
                .find("c51_min_blocks = 8; expected 0 (no launch bound), 10 or 12"),
            std::string::npos);
}

// Programmatic dependent launch in the step's graph (each of our kernels that follows a kernel
// starts while it drains and waits on the GPU for its results) changes no bit of the training,
// plain and with every auxiliary. On CUDA the capture must have made edges programmatic (else
// the driver refused them and the option does nothing); the host has none.
TEST(Trainer, ProgrammaticLaunchChangesNoBitOfTheTraining) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const auto plain = small_config(seed).to_json();
  zs::TrainerOptions with, without;
  with.programmatic_launch = true;
  without.programmatic_launch = false;
  for (const auto& j : {plain, with_every_auxiliary(plain)})
    expect_same_training(j, with, without, seed + 100, [](const zs::Trainer& a, const zs::Trainer& b) {
      if (std::string(zs::kBackendName) == "cuda") {
        EXPECT_GT(a.graph_programmatic_edges(), 0u);
      } else {
        EXPECT_EQ(a.graph_programmatic_edges(), 0u);
      }
      EXPECT_EQ(b.graph_programmatic_edges(), 0u);
    });
}

// The records' posts beside the update (on the side lane, off the chain from the gradient norm to
// Adam) change no bit of the training and post the same records: the guard's (a NaN batch's
// halt included) and the loss terms', every step and every 3rd.
TEST(Trainer, PostsBesideTheUpdateCarryTheSameRecords) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const auto plain = small_config(seed).to_json();
  for (const auto& j : {plain, with_every_auxiliary(plain)})
  for (const std::int64_t every : {1, 3}) {
    SCOPED_TRACE(j.dump() + ", post_every " + std::to_string(every));
    const auto c = zs::Config::from_json(j);
    zs::TrainerOptions beside, inline_posts;
    beside.batch_size = inline_posts.batch_size = 16;
    beside.guard.post_every = inline_posts.guard.post_every = every;
    beside.posts_beside = true;
    inline_posts.posts_beside = false;
    zs::Trainer a(c, beside), b(c, inline_posts);
    zs::test::step_on_same_batches(a, b, 6, seed + 100, step_both);
    auto poisoned = zs::random_batch(c, 16, seed + 7);
    poisoned.rewards[2] = std::nanf("");
    for (zs::Trainer* t : {&a, &b}) {
      zs::upload(t->stream().exec(), c, poisoned, t->batch());
      t->step();
      t->synchronize();
    }
    EXPECT_TRUE(zs::test::same_bits(host_copy(a.online().flat()), host_copy(b.online().flat())));
    const auto ma = a.metrics(), mb = b.metrics();
    ASSERT_TRUE(ma && mb);
    EXPECT_EQ(ma->step, every == 1 ? 6 : 5);  // with every = 3, the posts follow steps 2 and 5
    EXPECT_EQ(ma->step, mb->step);
    EXPECT_EQ(ma->steps_behind, mb->steps_behind);
    EXPECT_EQ(ma->halt_nan, every == 1);
    EXPECT_EQ(ma->halt_nan, mb->halt_nan);
    EXPECT_EQ(ma->raw_grad_norm, mb->raw_grad_norm);
    EXPECT_EQ(ma->running.steps, mb->running.steps);
    EXPECT_EQ(ma->running.skipped, mb->running.skipped);
    const auto ta = a.term_metrics(), tb = b.term_metrics();
    ASSERT_EQ(ta.has_value(), tb.has_value());
    if (ta) {
      EXPECT_EQ(ta->step, tb->step);
      ASSERT_EQ(ta->terms.size(), tb->terms.size());
      for (std::size_t i = 0; i < ta->terms.size(); ++i) EXPECT_EQ(ta->terms[i].grad_norm, tb->terms[i].grad_norm);
    }
  }
}

// A poisoned batch trips the guard and the step changes nothing: parameters, target, Adam's
// moments and t, the spectral-norm vectors — in every configuration (plain, spectral norm on,
// every auxiliary on, a hard target update).
TEST(Trainer, NaNBatchTripsTheGuardAndChangesNothing) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const auto plain = small_config(seed).to_json();
  auto spectral = plain;
  spectral["spectral_norm"] = 0.5;  // below the init's σ: every projection scales
  const auto everything = with_every_auxiliary(spectral);
  auto hard = spectral;
  hard["hard_update_every"] = 2;
  for (const auto& j : {plain, spectral, everything, hard})
  for (const bool fused : {false, true}) {
    if (!fused && j != plain) continue;  // the per-layer bias kernels (not the default): plain is enough
    const auto c = zs::Config::from_json(j);
    SCOPED_TRACE(j.dump() + (fused ? "" : ", per-layer bias kernels"));
    zs::TrainerOptions opt;
    opt.batch_size = 8;
    opt.fused_bias = fused;
    zs::Trainer tr(c, opt);
    auto hb = zs::random_batch(c, 8, seed + 3);
    zs::upload(tr.stream().exec(), c, hb, tr.batch());
    tr.step();
    tr.step();
    tr.synchronize();
    const auto online = host_copy(tr.online().flat()), target = host_copy(tr.target().flat());
    const auto m = host_copy(tr.optimizer().m().flat()), v = host_copy(tr.optimizer().v().flat());
    const auto adam = zs::test::to_host(tr.optimizer().state());
    const auto uv = tr.spectral_norm() ? zs::test::to_host(tr.spectral_norm()->vectors()) : std::vector<float>{};
    for (int poison = 0; poison < 3; ++poison) {
      auto bad = hb;
      if (poison == 0) bad.rewards[3] = std::nanf("");
      if (poison == 1) bad.states[5] = INFINITY;
      if (poison == 2) bad.next_states[7] = -INFINITY;
      zs::upload(tr.stream().exec(), c, bad, tr.batch());
      tr.step();
      tr.synchronize();
      const auto st = tr.metrics();
      ASSERT_TRUE(st.has_value());
      EXPECT_TRUE(st->halt_nan) << "poison " << poison;
      EXPECT_TRUE(zs::test::same_bits(online, host_copy(tr.online().flat()))) << "poison " << poison;
      EXPECT_TRUE(zs::test::same_bits(target, host_copy(tr.target().flat())));
      EXPECT_TRUE(zs::test::same_bits(m, host_copy(tr.optimizer().m().flat())));
      EXPECT_TRUE(zs::test::same_bits(v, host_copy(tr.optimizer().v().flat())));
      EXPECT_EQ(adam, zs::test::to_host(tr.optimizer().state()));
      if (tr.spectral_norm()) {
        EXPECT_TRUE(zs::test::same_bits(uv, zs::test::to_host(tr.spectral_norm()->vectors()))) << "poison " << poison;
      }
    }
    zs::upload(tr.stream().exec(), c, hb, tr.batch());
    tr.step();
    tr.synchronize();
    EXPECT_FALSE(tr.metrics()->halt_nan);
    EXPECT_FALSE(zs::test::same_bits(online, host_copy(tr.online().flat()))) << "a clean step after the skips updates again";
    EXPECT_EQ(tr.metrics()->running.skipped, 3);
  }
}

// hard_update_every = K: the target is a copy of the online net after every K-th applied update
// and untouched between them (no Polyak drift); a skipped step neither copies nor moves the
// period. Graph replay, as train runs it.
TEST(Trainer, HardTargetUpdateEveryKAppliedSteps) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  auto j = small_config(seed).to_json();
  j["hard_update_every"] = 3;
  const auto c = zs::Config::from_json(j);
  zs::TrainerOptions opt;
  opt.batch_size = 6;
  zs::Trainer tr(c, opt);
  const auto hb = zs::random_batch(c, 6, seed + 1);
  auto bad = hb;
  bad.rewards[2] = std::nanf("");
  auto last_copy = host_copy(tr.target().flat());
  int applied = 0;
  for (int s = 0; s < 9; ++s) {
    const bool poisoned = s == 4;  // the 5th step trips the guard: updates 1 2 3 4 _ 5 6 7 8
    zs::upload(tr.stream().exec(), c, poisoned ? bad : hb, tr.batch());
    tr.step();
    tr.synchronize();
    ASSERT_EQ(tr.metrics()->halt_nan, poisoned) << "step " << s;
    if (!poisoned) ++applied;
    const auto target = host_copy(tr.target().flat()), online = host_copy(tr.online().flat());
    if (!poisoned && applied % 3 == 0) {
      EXPECT_TRUE(zs::test::same_bits(target, online)) << "update " << applied << " copies the online net";
      last_copy = target;
    } else {
      EXPECT_TRUE(zs::test::same_bits(target, last_copy)) << "step " << s << ": no copy, no drift";
      EXPECT_FALSE(zs::test::same_bits(target, online)) << "step " << s;
    }
  }
  EXPECT_EQ(applied, 8);
  j["hard_update_every"] = -1;
  EXPECT_NE(zs::test::error_of([&] { zs::Config::from_json(j); }).find("hard_update_every = -1 is invalid"),
            std::string::npos);
}

TEST(Trainer, BadBatchIsAClearError) {
  const auto c = small_config(1);
  zs::TrainerOptions opt;
  opt.batch_size = 4;
  zs::Trainer tr(c, opt);
  auto hb = zs::random_batch(c, 4, 7);
  hb.actions[1] = 3;  // branch 1 has 2 actions
  try {
    zs::upload(tr.stream().exec(), c, hb, tr.batch());
    FAIL();
  } catch (const zs::Error& e) {
    EXPECT_NE(std::string(e.what()).find("actions[0, 1] = 3; expected 0..1"), std::string::npos) << e.what();
  }
  auto small = zs::random_batch(c, 3, 7);
  EXPECT_THROW(zs::upload(tr.stream().exec(), c, small, tr.batch()), zs::Error);
  zs::TrainerOptions empty;
  empty.batch_size = 0;
  EXPECT_THROW(zs::Trainer(c, empty), zs::Error);
}

TEST(Trainer, TenThousandGraphReplaysWithMetricsArrivingThroughTheMailbox) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  auto c = zs::Config::from_json({{"state_dim", 4}, {"trunk", {8}}, {"head_hidden", 4}, {"branches", {2}},
                                  {"atoms", 5}, {"lr", 1e-4}, {"seed", seed}});
  zs::TrainerOptions opt;
  opt.batch_size = 4;
  zs::Trainer tr(c, opt);
  zs::upload(tr.stream().exec(), c, zs::random_batch(c, 4, seed), tr.batch());
  std::int64_t newest = -1;
  int fresh_reads = 0;
  for (int s = 0; s < 10000; ++s) {
    tr.step();
    if (s % 500 == 499) {  // the host reads lagged, never waits
      if (const auto m = tr.metrics()) {
        EXPECT_GE(m->step, newest);
        EXPECT_EQ(m->steps_behind, s - m->step);
        fresh_reads += m->step > newest;
        newest = m->step;
      }
    }
  }
  tr.synchronize();
  const auto m = tr.metrics();
  ASSERT_TRUE(m.has_value());
  EXPECT_TRUE(tr.graph_recorded());
  EXPECT_EQ(m->step, 9999);
  EXPECT_EQ(m->steps_behind, 0);
  EXPECT_EQ(m->running.steps + m->running.skipped, 10000);
  EXPECT_GT(fresh_reads, 0) << "no record arrived while the graph was replaying";
  EXPECT_TRUE(std::isfinite(m->raw_loss));
}

TEST(Trainer, MetricsArriveEveryNthStepWhenAsked) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const auto c = small_config(seed);
  for (const std::int64_t every : {1, 4}) {
    zs::TrainerOptions opt;
    opt.batch_size = 5;
    opt.guard.post_every = every;
    zs::Trainer tr(c, opt);
    zs::upload(tr.stream().exec(), c, zs::random_batch(c, 5, seed), tr.batch());
    for (int s = 0; s < 10; ++s) tr.step();
    tr.synchronize();
    const auto m = tr.metrics();
    ASSERT_TRUE(m.has_value());
    // Posts follow steps 3 and 7 with every = 4: the newest record is step 7, two behind.
    EXPECT_EQ(m->step, every == 1 ? 9 : 7) << "every " << every;
    EXPECT_EQ(m->steps_behind, every == 1 ? 0 : 2);
    EXPECT_EQ(m->running.steps + m->running.skipped, every == 1 ? 10 : 8);
  }
  zs::TrainerOptions bad;
  bad.guard.post_every = 0;
  EXPECT_THROW(zs::Trainer(c, bad), zs::Error);
}

TEST(Trainer, CheckpointWithEveryAuxiliaryResumesBitForBit) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const auto c = zs::Config::from_json(with_every_auxiliary(small_config(seed).to_json()));
  zs::TrainerOptions opt;
  opt.batch_size = 5;
  const auto hb = zs::random_batch(c, 5, seed + 4);
  const auto path = zs::test::temp_path("aux.safetensors");
  zs::Trainer a(c, opt);
  zs::upload(a.stream().exec(), c, hb, a.batch());
  for (int s = 0; s < 3; ++s) a.step();
  a.save(path);
  for (int s = 0; s < 3; ++s) a.step();
  a.synchronize();
  zs::Trainer b(c, opt);
  b.load(path);
  zs::upload(b.stream().exec(), c, hb, b.batch());
  for (int s = 0; s < 3; ++s) b.step();
  b.synchronize();
  EXPECT_TRUE(zs::test::same_bits(host_copy(a.online().flat()), host_copy(b.online().flat())));
  EXPECT_TRUE(zs::test::same_bits(zs::test::to_host(a.term_as<zs::IqnTerm>("iqn")->taus()), zs::test::to_host(b.term_as<zs::IqnTerm>("iqn")->taus())))
      << "the IQN RNG counter must travel with the checkpoint";
  std::remove(path.c_str());
}
