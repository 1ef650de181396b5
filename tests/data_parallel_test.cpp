// The pieces of data-parallel training that run in one process: the step's all-reduce alone
// changes nothing (the path the GPU's one-rank NCCL check runs), the loss terms' gradients and
// losses are slices of one buffer, the parameter fingerprint and its comparison, the process
// group of one, a batch's share for a rank, and a checkpoint of another rank count refused.
// The runs of several ranks are in tests/mpi/.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "backends/process_group.hpp"
#include "core/host_batch.hpp"
#include "core/safetensors.hpp"
#include "kernels/param_checksum.hpp"
#include "rl/train_loop.hpp"
#include "same_batches.hpp"
#include "test_util.hpp"
#include "train/replica_check.hpp"
#include "train/trainer.hpp"

namespace {

zs::Config small_config(std::uint64_t seed, bool auxiliaries) {
  nlohmann::json j = {{"state_dim", 6}, {"trunk", {16, 12}}, {"head_hidden", 8}, {"branches", {3, 2, 2}},
                      {"atoms", 11},    {"v_min", -5},       {"v_max", 5},       {"gamma", 0.95},
                      {"n_step", 3},    {"lr", 1e-3},        {"max_grad_norm", 0.5}, {"tau", 0.01},
                      {"seed", seed},   {"precision", "fp32"}};
  if (auxiliaries) {
    j["iqn"] = {{"n_tau", 4}, {"embed_dim", 8}};
    j["ensemble"] = {{"k", 2}, {"budget", 0.05}};
    j["cql"] = {{"alpha", 0.5}};
  }
  return zs::Config::from_json(j);
}

std::vector<float> host(const zs::DeviceFloats& d) { return zs::test::to_host(d); }

int g_launches = 0;
void count_launch(const char*, const std::uint32_t, std::uint64_t* id) {
  ++g_launches;
  *id = 0;
}

// The host fingerprint of a then b: the same sum, taken in reverse order.
std::uint64_t host_fingerprint(const std::vector<float>& a, const std::vector<float>& b) {
  std::uint64_t sum = 0;
  for (std::size_t k = a.size() + b.size(); k-- > 0;)
    sum += zs::kernels::fingerprint_term(k, k < a.size() ? a[k] : b[k - a.size()]);
  return sum;
}

std::uint64_t device_fingerprint(const std::vector<float>& a, const std::vector<float>& b) {
  Kokkos::View<std::uint64_t, zs::MemSpace> sum("zs::test::sum");
  zs::kernels::fingerprint<zs::ExecSpace>(zs::ExecSpace(), zs::test::to_device(a), zs::test::to_device(b), sum);
  std::uint64_t s = 0;
  Kokkos::deep_copy(s, sum);
  return s;
}

}  // namespace

TEST(Communicator, AloneTheAllReduceChangesNothing) {
  for (const bool aux : {false, true}) {
    const auto seed = zs::test::fresh_seed();
    SCOPED_TRACE(testing::Message() << "seed " << seed << (aux ? ", every auxiliary" : ", plain"));
    const zs::Config c = small_config(seed, aux);
    zs::TrainerOptions plain, reduced;
    plain.batch_size = reduced.batch_size = 12;
    reduced.always_reduce = true;
    zs::Trainer a(c, plain), b(c, reduced);
    EXPECT_EQ(a.communicator(), nullptr);
    ASSERT_NE(b.communicator(), nullptr);
    EXPECT_EQ(b.ranks(), 1);
    EXPECT_EQ(b.rank(), 0);
    zs::test::step_on_same_batches(a, b, 5, seed + 100, [](zs::Trainer& x, zs::Trainer& y) {
      x.step();
      y.step();
    });
    EXPECT_TRUE(b.graph_recorded());
    EXPECT_TRUE(zs::test::same_bits(host(a.online().flat()), host(b.online().flat())));
    EXPECT_TRUE(zs::test::same_bits(host(a.target().flat()), host(b.target().flat())));
    EXPECT_TRUE(zs::test::same_bits(host(a.optimizer().v().flat()), host(b.optimizer().v().flat())));
    for (std::size_t t = 0; t < a.terms().size(); ++t)
      EXPECT_TRUE(zs::test::same_bits(host(a.terms()[t]->grad().flat()), host(b.terms()[t]->grad().flat())))
          << a.terms()[t]->name();
    EXPECT_EQ(a.metrics()->raw_loss, b.metrics()->raw_loss);
  }
}

TEST(Communicator, AloneTheAllReducePhaseLaunchesNothing) {
  const zs::Config c = small_config(3, true);
  zs::TrainerOptions opt;
  opt.batch_size = 4;
  zs::Trainer tr(c, opt);
  tr.step_direct();
  tr.synchronize();
  const auto saved = Kokkos::Tools::Experimental::get_callbacks();
  g_launches = 0;
  Kokkos::Tools::Experimental::set_begin_parallel_for_callback(&count_launch);
  Kokkos::Tools::Experimental::set_begin_parallel_reduce_callback(&count_launch);
  tr.enqueue_phase(zs::Trainer::Phase::all_reduce);
  const int alone = g_launches;
  tr.enqueue_phase(zs::Trainer::Phase::norm_and_guard);
  const int norms = g_launches - alone;
  Kokkos::Tools::Experimental::set_callbacks(saved);
  tr.synchronize();
  EXPECT_EQ(alone, 0);
  EXPECT_GT(norms, 0) << "the counter counts";
  EXPECT_STREQ(zs::Trainer::phase_name(zs::Trainer::Phase::all_reduce), "all_reduce");
}

TEST(TermBuffers, EveryTermsGradientAndLossAreSlicesOfOneBuffer) {
  const zs::Config c = small_config(5, true);
  zs::TrainerOptions opt;
  opt.batch_size = 4;
  zs::Trainer tr(c, opt);
  ASSERT_EQ(tr.terms().size(), 4u);
  const float* first = tr.terms()[0]->grad().flat().data();
  const std::size_t n = tr.layout().size();
  const std::size_t stride = (n + zs::ParamLayout::kAlign - 1) / zs::ParamLayout::kAlign * zs::ParamLayout::kAlign;
  const float* losses = first + tr.terms().size() * stride;
  for (std::size_t t = 0; t < tr.terms().size(); ++t) {
    EXPECT_EQ(tr.terms()[t]->grad().flat().data(), first + t * stride) << tr.terms()[t]->name();
    EXPECT_EQ(tr.terms()[t]->grad().size(), n);
    EXPECT_EQ(tr.terms()[t]->loss().data(), losses + t) << tr.terms()[t]->name();
  }
  EXPECT_EQ(tr.loss().loss.data(), tr.terms()[0]->loss().data()) << "C51's outputs hold its own slot's loss";
  // A step writes its losses where the all-reduce reads them.
  zs::upload(tr.stream().exec(), c, zs::random_batch(c, 4, 9), tr.batch());
  tr.step();
  tr.synchronize();
  float c51_loss = 0;
  Kokkos::deep_copy(c51_loss, tr.loss().loss);
  EXPECT_GT(c51_loss, 0.f);
  // `losses` is device memory: read slot 0 through a View of that address, never by dereferencing.
  float slot0 = 0;
  Kokkos::deep_copy(slot0, Kokkos::View<const float, zs::MemSpace, Kokkos::MemoryUnmanaged>(losses));
  EXPECT_EQ(c51_loss, slot0);

  zs::TermBuffers two(tr.layout(), 2);
  two.claim("a");
  two.claim("b");
  const std::string message = zs::test::error_of([&] { two.claim("c"); });
  EXPECT_NE(message.find("loss term 'c': the step's 2 gradient slots are all taken"), std::string::npos) << message;
  EXPECT_NE(zs::test::error_of([&] { zs::TermBuffers none(tr.layout(), 0); }).find("0 loss terms; expected at least 1"),
            std::string::npos);
}

TEST(ParamChecksum, FingerprintIsExactOrderFreeAndSeesEveryBit) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(seed);
  auto a = zs::test::random_normal(1037, seed), b = zs::test::random_normal(333, seed + 1);
  const std::uint64_t reference = host_fingerprint(a, b);
  EXPECT_EQ(device_fingerprint(a, b), reference) << "the device's reduction order does not matter";
  auto flipped = a;
  std::uint32_t bits;
  std::memcpy(&bits, &flipped[500], sizeof bits);
  bits ^= 1u;
  std::memcpy(&flipped[500], &bits, sizeof bits);
  EXPECT_NE(device_fingerprint(flipped, b), reference) << "one flipped bit";
  auto swapped = a;
  std::swap(swapped[3], swapped[4]);
  EXPECT_NE(device_fingerprint(swapped, b), reference) << "two values swapped";
  EXPECT_NE(device_fingerprint(b, a), reference) << "the buffers swapped";
  std::vector<float> zero{0.f}, negative_zero{-0.f};
  EXPECT_NE(device_fingerprint(zero, {}), device_fingerprint(negative_zero, {}));
}

TEST(ReplicaCheck, RecordsOfOneStepMustAgree) {
  using zs::kernels::ParamChecksum;
  EXPECT_EQ(zs::ReplicaCheck::compare({{10, 1, 2}, {10, 1, 2}, {10, 1, 2}}), 10);
  EXPECT_EQ(zs::ReplicaCheck::compare({{10, 1, 2}, {20, 5, 5}}), -1) << "no two records of one step";
  EXPECT_EQ(zs::ReplicaCheck::compare({{-1, 0, 0}, {-1, 0, 0}}), -1) << "nothing arrived yet";
  EXPECT_EQ(zs::ReplicaCheck::compare({{10, 1, 2}, {20, 5, 5}, {20, 5, 5}}), 20);
  std::string message;
  try {
    zs::ReplicaCheck::compare({{10, 1, 2}, {20, 5, 5}, {10, 1, 3}, {20, 5, 5}});
  } catch (const zs::PeerFailure& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("parameters differ after training step 10: rank 0 holds fingerprint 0x0000000100000002, "
                         "rank 2 holds 0x0000000100000003"),
            std::string::npos)
      << message;
  // Alone, a check compares nothing and never fails.
  const zs::Config c = small_config(1, false);
  zs::TrainerOptions opt;
  opt.batch_size = 4;
  zs::Trainer tr(c, opt);
  zs::ReplicaCheck alone(tr, zs::ProcessGroup::solo(), 1);
  tr.step();
  alone.after_step();
  tr.synchronize();
  EXPECT_EQ(alone.newest().step, 1);
  EXPECT_EQ(alone.compare(), -1);
  EXPECT_NE(zs::test::error_of([&] { zs::ReplicaCheck bad(tr, zs::ProcessGroup::solo(), 0); })
                .find("every = 0; expected a number of steps >= 1"),
            std::string::npos);
}

TEST(ProcessGroup, AloneEveryCollectiveReturnsItsInputAndErrorsPassUnchanged) {
  zs::ProcessGroup& g = zs::ProcessGroup::solo();
  EXPECT_EQ(g.rank(), 0);
  EXPECT_EQ(g.size(), 1);
  const std::vector<std::uint8_t> bytes{1, 2, 3};
  EXPECT_EQ(g.gather(bytes, "t"), std::vector<std::vector<std::uint8_t>>{bytes});
  EXPECT_EQ(g.all_gather(bytes, "t"), std::vector<std::vector<std::uint8_t>>{bytes});
  EXPECT_EQ(g.broadcast(bytes, "t"), bytes);
  EXPECT_EQ(g.scatter({bytes}, "t"), bytes);
  EXPECT_NE(zs::test::error_of([&] { g.scatter({bytes, bytes}, "the test"); }).find("2 parts to scatter; expected 1"),
            std::string::npos);
  std::vector<float> x{1.5f, -2.f};
  g.all_sum(x.data(), x.size(), "t");
  EXPECT_EQ(x, (std::vector<float>{1.5f, -2.f}));
  // agree() alone is f() itself: the same exception, not a SharedError.
  bool shared = false, plain = false;
  try {
    g.agree("t", [] { zs::fail("as it was"); });
  } catch (const zs::SharedError&) {
    shared = true;
  } catch (const zs::Error& e) {
    plain = std::string(e.what()) == "as it was";
  }
  EXPECT_FALSE(shared);
  EXPECT_TRUE(plain);
  EXPECT_EQ(zs::test::error_of([&] { g.set_timeout(0); }), "peer timeout = 0 s is invalid; expected seconds in (0, 1e6]");
  EXPECT_NE(zs::test::error_of([&] { g.set_timeout(std::nan("")); }), "");
  EXPECT_EQ(zs::doubles_from_bytes(zs::to_bytes(std::vector<double>{1.25, -3})), (std::vector<double>{1.25, -3}));
  EXPECT_EQ(zs::text_from_bytes(zs::to_bytes(std::string("héllo"))), "héllo");
}

TEST(HostBatch, ARanksShareIsItsRowsOfTheBatch) {
  const zs::Config c = small_config(1, false);
  const zs::HostBatch b = zs::random_batch(c, 6, 77);
  const zs::HostBatch r = zs::batch_rows(b, c, 2, 5);
  ASSERT_EQ(r.size, 3);
  const std::size_t S = c.state_dim, K = c.branches.size();
  EXPECT_EQ(r.states, std::vector<float>(b.states.begin() + 2 * S, b.states.begin() + 5 * S));
  EXPECT_EQ(r.next_states, std::vector<float>(b.next_states.begin() + 2 * S, b.next_states.begin() + 5 * S));
  EXPECT_EQ(r.actions, std::vector<int>(b.actions.begin() + 2 * K, b.actions.begin() + 5 * K));
  EXPECT_EQ(r.rewards, std::vector<float>(b.rewards.begin() + 2, b.rewards.begin() + 5));
  EXPECT_EQ(r.dones, std::vector<float>(b.dones.begin() + 2, b.dones.begin() + 5));
  EXPECT_EQ(r.weights, std::vector<float>(b.weights.begin() + 2, b.weights.begin() + 5));
  EXPECT_EQ(zs::test::error_of([&] { zs::batch_rows(b, c, 4, 7); }),
            "batch_rows: samples [4, 7) of 6; expected a non-empty range within the batch");
  EXPECT_NE(zs::test::error_of([&] { zs::batch_rows(b, c, 3, 3); }), "");
}

TEST(TrainLoop, CheckpointOfAnotherRankCountIsRefused) {
  zs::TrainConfig c = zs::TrainConfig::defaults_for("cartpole");
  c.network.trunk = {16};
  c.network.head_hidden = 8;
  c.envs = 2;
  c.replay_capacity = 200;
  c.eval_every = 0;
  c.stop_when_solved = false;
  const std::string path = zs::test::temp_path("ckpt.safetensors");
  {
    zs::TrainLoop loop(c);
    for (int i = 0; i < 5; ++i) loop.iterate();
    loop.save(path);
  }
  auto f = zs::safetensors::read(path);
  EXPECT_EQ(f.metadata.count("loop.ranks"), 0u) << "a checkpoint of one process keeps the format it had";
  f.metadata["loop.ranks"] = "2";
  zs::safetensors::write(path, f);
  zs::TrainLoop loop(c);
  EXPECT_EQ(zs::test::error_of([&] { loop.load(path); }),
            "train checkpoint '" + path + "' was written by a run of 2 rank(s); this run has 1. Expected the same "
            "count: resume with mpirun -np 2 (or without mpirun for 1)");
  std::filesystem::remove(path);
}
