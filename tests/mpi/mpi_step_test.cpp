// The training step as several ranks: a step of N ranks on B samples each equals one process's
// step on the N·B samples, with and without auxiliaries; the ranks' parameters stay the same
// bits over a thousand steps on different batches; a NaN on one rank trips the guard on all of
// them; and ranks whose parameters differ are caught and named.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/host_batch.hpp"
#include "mpi_test_util.hpp"
#include "train/replica_check.hpp"
#include "train/trainer.hpp"

namespace {

using zs::test::world;

// Adam's ε well above the gradients' rounding, so that the update is a smooth function of the
// gradient: with the default 1e-8 an element whose gradient is rounding noise moves by ±lr
// whichever way the noise falls, and two correct summation orders could then differ by 2·lr.
zs::Config small_config(std::uint64_t seed, bool auxiliaries) {
  nlohmann::json j = {{"state_dim", 6}, {"trunk", {16, 12}}, {"head_hidden", 8}, {"branches", {3, 2, 2}},
                      {"atoms", 11},    {"v_min", -5},       {"v_max", 5},       {"gamma", 0.95},
                      {"n_step", 3},    {"lr", 1e-3},        {"max_grad_norm", 0.5}, {"tau", 0.01},
                      {"adam_eps", 1e-3}, {"seed", seed},    {"precision", "fp32"}};
  if (auxiliaries) {
    j["iqn"] = {{"n_tau", 4}, {"embed_dim", 8}};
    j["ensemble"] = {{"k", 2}, {"budget", 0.05}};
    j["cql"] = {{"alpha", 0.5}};
  }
  return zs::Config::from_json(j);
}

std::vector<float> host(const zs::DeviceFloats& d) { return zs::test::to_host(d); }
template <class T>
T scalar(const Kokkos::View<T, zs::MemSpace>& v) {
  T x{};
  Kokkos::deep_copy(x, v);
  return x;
}

}  // namespace

TEST(MpiStep, RanksEqualOneProcessOnTheWholeBatch) {
  const int R = world().size(), rank = world().rank(), B = 6;
  for (const bool aux : {false, true}) {
    const auto seed = zs::test::shared_seed();
    SCOPED_TRACE(testing::Message() << "seed " << seed << (aux ? ", every auxiliary" : ", plain"));
    const zs::Config c = small_config(seed, aux);
    zs::TrainerOptions whole_opt, part_opt;
    whole_opt.batch_size = R * B;
    part_opt.batch_size = B;
    part_opt.group = &world();
    zs::Trainer whole(c, whole_opt), part(c, part_opt);
    ASSERT_EQ(part.ranks(), R);
    ASSERT_EQ(whole.terms().size(), aux ? 4u : 1u);
    for (int s = 0; s < 3; ++s) {
      const zs::HostBatch hb = zs::random_batch(c, R * B, seed + 10 + s);
      zs::upload(whole.stream().exec(), c, hb, whole.batch());
      zs::upload(part.stream().exec(), c, zs::batch_rows(hb, c, rank * B, (rank + 1) * B), part.batch());
      whole.step();
      part.step();
      whole.synchronize();
      part.synchronize();
      SCOPED_TRACE(testing::Message() << "after step " << s + 1);
      for (std::size_t t = 0; t < whole.terms().size(); ++t) {
        const auto& a = *whole.terms()[t];
        const auto& b = *part.terms()[t];
        EXPECT_NEAR(scalar(a.loss()), scalar(b.loss()), 1e-5 * std::fabs(scalar(a.loss()))) << a.name();
        EXPECT_NEAR(scalar(a.norm()), scalar(b.norm()), 1e-5 * scalar(a.norm())) << a.name();
        EXPECT_TRUE(zs::test::close(host(a.grad().flat()), host(b.grad().flat()), 1e-5)) << a.name() << "'s gradient";
      }
      EXPECT_TRUE(zs::test::close(host(whole.online().flat()), host(part.online().flat()), 1e-5));
      EXPECT_TRUE(zs::test::close(host(whole.target().flat()), host(part.target().flat()), 1e-5));
      const auto gw = whole.metrics(), gp = part.metrics();
      ASSERT_TRUE(gw && gp);
      EXPECT_EQ(gw->skipped(), gp->skipped());
      EXPECT_EQ(gw->step, gp->step);
    }
  }
}

TEST(MpiStep, ParametersStayTheSameBitsOverAThousandSteps) {
  const auto seed = zs::test::shared_seed();
  SCOPED_TRACE(seed);
  const zs::Config c = small_config(seed, false);
  zs::TrainerOptions opt;
  opt.batch_size = 8;
  opt.group = &world();
  zs::Trainer tr(c, opt);
  zs::ReplicaCheck replicas(tr, world(), 100);
  for (int s = 0; s < 1000; ++s) {
    // Each rank its own batches: the seed differs by rank.
    if (s % 50 == 0)
      zs::upload(tr.stream().exec(), c, zs::random_batch(c, 8, seed + 1000 * world().rank() + s), tr.batch());
    tr.step();
    replicas.after_step();
  }
  tr.synchronize();
  // The ranks trained on different samples (their per-sample losses differ) ...
  const auto prio = zs::test::all_copies(host(zs::DeviceFloats(tr.loss().priorities)));
  EXPECT_NE(prio[0], prio[1]);
  // ... and hold the same parameters, moments and target, bit for bit.
  for (const zs::DeviceFloats& d : {tr.online().flat(), tr.target().flat(), tr.optimizer().m().flat(),
                                    tr.optimizer().v().flat()}) {
    const auto copies = zs::test::all_copies(host(d));
    for (int r = 1; r < world().size(); ++r) EXPECT_EQ(copies[r], copies[0]) << "rank " << r << ", " << d.label();
  }
  EXPECT_EQ(replicas.compare(), 1000) << "the last fingerprint compared is the one after step 1000";
  const auto m = tr.metrics();
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->running.skipped, 0);
}

TEST(MpiStep, NaNOnOneRankTripsTheGuardOnEveryRankAndChangesNothing) {
  const auto seed = zs::test::shared_seed();
  SCOPED_TRACE(seed);
  const zs::Config c = small_config(seed, true);
  zs::TrainerOptions opt;
  opt.batch_size = 8;
  opt.group = &world();
  zs::Trainer tr(c, opt);
  const zs::HostBatch clean = zs::random_batch(c, 8, seed + 7 + world().rank());
  zs::upload(tr.stream().exec(), c, clean, tr.batch());
  tr.step();
  tr.step();
  tr.synchronize();
  const auto online = host(tr.online().flat()), target = host(tr.target().flat());
  const auto m = host(tr.optimizer().m().flat()), v = host(tr.optimizer().v().flat());
  zs::HostBatch poisoned = clean;
  if (world().rank() == world().size() - 1) poisoned.rewards[3] = std::nanf("");
  zs::upload(tr.stream().exec(), c, poisoned, tr.batch());
  tr.step();
  tr.synchronize();
  const auto st = tr.metrics();
  ASSERT_TRUE(st.has_value());
  EXPECT_TRUE(st->halt_nan) << "rank " << world().rank() << " did not see the NaN of rank " << world().size() - 1;
  EXPECT_TRUE(zs::test::same_bits(online, host(tr.online().flat())));
  EXPECT_TRUE(zs::test::same_bits(target, host(tr.target().flat())));
  EXPECT_TRUE(zs::test::same_bits(m, host(tr.optimizer().m().flat())));
  EXPECT_TRUE(zs::test::same_bits(v, host(tr.optimizer().v().flat())));
  zs::upload(tr.stream().exec(), c, clean, tr.batch());
  tr.step();
  tr.synchronize();
  EXPECT_FALSE(tr.metrics()->halt_nan);
  EXPECT_FALSE(zs::test::same_bits(online, host(tr.online().flat()))) << "a clean step updates again";
  EXPECT_EQ(tr.metrics()->running.skipped, 1);
}

TEST(MpiStep, RanksWhoseParametersDifferAreNamed) {
  const auto seed = zs::test::shared_seed();
  const zs::Config c = small_config(seed, false);
  zs::TrainerOptions opt;
  opt.batch_size = 4;
  opt.group = &world();
  zs::Trainer tr(c, opt);
  zs::upload(tr.stream().exec(), c, zs::random_batch(c, 4, seed + world().rank()), tr.batch());
  zs::ReplicaCheck replicas(tr, world(), 1);
  tr.step();
  replicas.after_step();
  tr.synchronize();
  EXPECT_EQ(replicas.compare(), 1);
  // One bit of one weight on the last rank: the next fingerprint must catch it.
  const int odd = world().size() - 1;
  if (world().rank() == odd) {
    auto w = tr.read_tensor(tr.online(), "trunk.1.weight");
    w[5] = std::nextafter(w[5], 1.f);
    tr.write_tensor(tr.online(), "trunk.1.weight", w);
  }
  replicas.enqueue();
  tr.synchronize();
  const std::string message = zs::test::error_of([&] { replicas.compare(); });
  EXPECT_NE(message.find("parameters differ after training step 1"), std::string::npos) << message;
  EXPECT_NE(message.find("rank " + std::to_string(odd) + " holds"), std::string::npos) << message;
  EXPECT_NE(message.find("rank 0 holds"), std::string::npos) << message;
}
