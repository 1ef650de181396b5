#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include "backends/graph.hpp"
#include "backends/stream.hpp"
#include "core/error.hpp"
#include "train/guard.hpp"
#include "kernels/guard_check.hpp"
#include "test_util.hpp"

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// The reference: the guard's rules written out plainly on the host, in double.
struct RefGuard {
  explicit RefGuard(const zs::GuardConfig& c) : config(c) {}
  zs::GuardConfig config;
  std::int64_t step = 0;
  zs::GuardTotals totals;
  zs::GuardSnapshot snapshot;

  struct Rec {
    bool halt_nan, halt_loss_clip, halt_grad_collapse;
    double clipped_loss, raw_loss, raw_grad_norm;
    std::int64_t step;
    bool skip;
  };

  Rec check(float loss, double grad, float lr) {
    const double l = loss;
    Rec r;
    r.halt_nan = !std::isfinite(l) || !std::isfinite(grad);
    r.halt_loss_clip = l > config.loss_clip;
    r.halt_grad_collapse = !r.halt_nan && step >= config.warmup_steps &&
                           grad < double(lr) * config.collapse_multiplier;
    r.clipped_loss = l > config.loss_clip ? config.loss_clip : l;
    r.raw_loss = l;
    r.raw_grad_norm = grad;
    r.step = step;
    r.skip = r.halt_nan || r.halt_loss_clip;
    if (r.skip) {
      ++totals.skipped;
    } else {
      totals.loss_sum += l;
      totals.grad_norm_sum += grad;
      ++totals.steps;
    }
    ++step;
    return r;
  }

  void boundary() {
    static_cast<zs::GuardTotals&>(snapshot) = totals;
    snapshot.boundary_step = step;
    totals = zs::GuardTotals{};
  }
};

// NaN-aware equality: the record must carry NaN through as NaN.
bool same(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

// Device inputs of one step: what the loss, grad-norm and lr-schedule kernels would leave.
struct Inputs {
  zs::DeviceScalar<float> loss{"loss"};
  zs::DeviceScalar<double> grad{"grad_norm"};
  zs::DeviceScalar<float> lr{"lr"};
  void set(float l, double g, float r) {
    Kokkos::deep_copy(loss, l);
    Kokkos::deep_copy(grad, g);
    Kokkos::deep_copy(lr, r);
  }
};

void check(zs::TrainingGuard& guard, const zs::Stream& stream, const Inputs& in) {
  guard.check(stream.exec(), in.loss, in.grad, in.lr);
}

int device_skip(const zs::TrainingGuard& guard) {
  int h = -1;
  Kokkos::deep_copy(h, guard.skip_flag());
  return h;
}

std::int64_t device_step(const zs::TrainingGuard& guard) {
  std::int64_t h = -1;
  Kokkos::deep_copy(h, guard.step_counter());
  return h;
}

void expect_totals(const zs::GuardTotals& got, const zs::GuardTotals& want) {
  // One thread sums in the reference's order, in double: exactly equal.
  EXPECT_EQ(got.loss_sum, want.loss_sum);
  EXPECT_EQ(got.grad_norm_sum, want.grad_norm_sum);
  EXPECT_EQ(got.steps, want.steps);
  EXPECT_EQ(got.skipped, want.skipped);
}

void expect_matches(const zs::TrainingGuard& guard, const RefGuard::Rec& want, const RefGuard& ref) {
  const auto got = guard.latest();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->halt_nan, want.halt_nan);
  EXPECT_EQ(got->halt_loss_clip, want.halt_loss_clip);
  EXPECT_EQ(got->halt_grad_collapse, want.halt_grad_collapse);
  EXPECT_TRUE(same(got->clipped_loss, want.clipped_loss)) << got->clipped_loss << " vs " << want.clipped_loss;
  EXPECT_TRUE(same(got->raw_loss, want.raw_loss)) << got->raw_loss << " vs " << want.raw_loss;
  EXPECT_TRUE(same(got->raw_grad_norm, want.raw_grad_norm));
  EXPECT_EQ(got->step, want.step);
  EXPECT_EQ(got->steps_behind, 0);
  EXPECT_EQ(got->skipped(), want.skip);
  EXPECT_EQ(device_skip(guard), want.skip ? 1 : 0);
  expect_totals(got->running, ref.totals);
  expect_totals(got->snapshot, ref.snapshot);
  EXPECT_EQ(got->snapshot.boundary_step, ref.snapshot.boundary_step);
}

// One step's random inputs, with a share of every kind of trouble mixed in.
struct RandomStep {
  float loss;
  double grad;
  float lr;
};
RandomStep random_step(std::mt19937_64& rng, const zs::GuardConfig& c) {
  std::uniform_int_distribution<int> kind(0, 19);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  RandomStep s{u(rng) * 10.f, double(u(rng)) * 5.0, 1e-4f * (0.5f + u(rng))};
  switch (kind(rng)) {
    case 0: s.loss = kNaN; break;
    case 1: s.loss = kInf; break;
    case 2: s.loss = -kInf; break;
    case 3: s.grad = std::numeric_limits<double>::quiet_NaN(); break;
    case 4: s.grad = std::numeric_limits<double>::infinity(); break;
    case 5: s.loss = float(c.loss_clip) * (1.f + u(rng)); break;  // above the clip
    case 6: s.loss = float(c.loss_clip); break;                      // exactly at it
    case 7: s.grad = double(s.lr) * c.collapse_multiplier * u(rng); break;  // collapsed
    default: break;
  }
  return s;
}

}  // namespace

TEST(Guard, MatchesReferenceOnRandomStepsWithNaNInfAndBoundaries) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed = " << seed);
  std::mt19937_64 rng(seed);
  zs::GuardConfig config;
  config.loss_clip = 250.0;
  config.warmup_steps = 37;
  zs::Stream stream;
  zs::TrainingGuard guard(config);
  RefGuard ref(config);
  Inputs in;
  for (int step = 0; step < 600; ++step) {
    SCOPED_TRACE(testing::Message() << "step " << step);
    const auto s = random_step(rng, config);
    in.set(s.loss, s.grad, s.lr);
    check(guard, stream, in);
    const auto want = ref.check(s.loss, s.grad, s.lr);
    if (step % 97 == 96) {
      guard.boundary(stream.exec());
      ref.boundary();
    }
    stream.synchronize();
    expect_matches(guard, want, ref);
    if (HasFailure()) break;
  }
  EXPECT_GT(ref.totals.skipped + ref.snapshot.skipped, 0);  // the mix did exercise skipping
  EXPECT_EQ(device_step(guard), 600);
}

TEST(Guard, NonFiniteLossOrGradNormHaltsAndSkips) {
  struct Case {
    float loss;
    double grad;
    bool loss_clip;
  };
  const double dnan = std::numeric_limits<double>::quiet_NaN();
  const double dinf = std::numeric_limits<double>::infinity();
  const Case cases[] = {{kNaN, 1.0, false},  {1.f, dinf, false}, {1.f, -dinf, false},
                        {1.f, dnan, false},  {-kInf, 1.0, false}, {kInf, 1.0, true},
                        {kNaN, dnan, false}};
  zs::Stream stream;
  zs::GuardConfig config;
  config.warmup_steps = 0;  // collapse armed: a non-finite norm must still not read as collapse
  for (const auto& c : cases) {
    SCOPED_TRACE(testing::Message() << "loss " << c.loss << ", grad " << c.grad);
    zs::TrainingGuard guard(config);
    Inputs in;
    in.set(c.loss, c.grad, 1e-4f);
    check(guard, stream, in);
    stream.synchronize();
    const auto g = guard.latest();
    ASSERT_TRUE(g.has_value());
    EXPECT_TRUE(g->halt_nan);
    EXPECT_EQ(g->halt_loss_clip, c.loss_clip);
    EXPECT_FALSE(g->halt_grad_collapse);
    EXPECT_TRUE(g->skipped());
    EXPECT_EQ(device_skip(guard), 1);
    EXPECT_TRUE(same(g->raw_loss, c.loss));
    EXPECT_TRUE(same(g->raw_grad_norm, c.grad));
    EXPECT_EQ(g->running.steps, 0);
    EXPECT_EQ(g->running.skipped, 1);
    EXPECT_EQ(g->running.loss_sum, 0.0);  // a skipped step never poisons the sums
  }
}

TEST(Guard, LossExactlyAtTheClipPassesAndAboveItSkips) {
  zs::Stream stream;
  for (double clip : {1e6, 2.5, 3.0e4}) {
    SCOPED_TRACE(testing::Message() << "loss_clip " << clip);
    zs::GuardConfig config;
    config.loss_clip = clip;
    zs::TrainingGuard guard(config);
    Inputs in;
    const float at = float(clip);
    ASSERT_EQ(double(at), clip);  // the test's clips are exact floats
    in.set(at, 1.0, 1e-4f);
    check(guard, stream, in);
    stream.synchronize();
    auto g = guard.latest();
    ASSERT_TRUE(g.has_value());
    EXPECT_FALSE(g->halt_loss_clip);
    EXPECT_FALSE(g->skipped());
    EXPECT_EQ(device_skip(guard), 0);
    EXPECT_EQ(g->clipped_loss, clip);

    const float above = std::nextafter(at, kInf);
    in.set(above, 1.0, 1e-4f);
    check(guard, stream, in);
    stream.synchronize();
    g = guard.latest();
    ASSERT_TRUE(g.has_value());
    EXPECT_TRUE(g->halt_loss_clip);
    EXPECT_FALSE(g->halt_nan);
    EXPECT_TRUE(g->skipped());
    EXPECT_EQ(device_skip(guard), 1);
    EXPECT_EQ(g->clipped_loss, clip);
    EXPECT_EQ(g->raw_loss, double(above));
    EXPECT_EQ(g->running.steps, 1);
    EXPECT_EQ(g->running.skipped, 1);
    EXPECT_EQ(g->running.loss_sum, clip);
  }
}

TEST(Guard, GradCollapseOnlyFromTheWarmupStepOnAndNeverSkips) {
  zs::Stream stream;
  zs::TrainingGuard guard;  // defaults: multiplier 100, warm-up 1000 steps
  ASSERT_EQ(guard.config().warmup_steps, 1000);
  Inputs in;
  const float lr = 1e-4f;
  const double threshold = double(lr) * 100;
  in.set(0.5f, threshold * 0.1, lr);
  for (int step = 0; step < 1000; ++step) check(guard, stream, in);
  stream.synchronize();
  auto g = guard.latest();
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->step, 999);
  EXPECT_FALSE(g->halt_grad_collapse) << "step 999 is still warm-up";

  check(guard, stream, in);  // step 1000: the first checked for collapse
  stream.synchronize();
  g = guard.latest();
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->step, 1000);
  EXPECT_TRUE(g->halt_grad_collapse);
  EXPECT_TRUE(g->halt());
  EXPECT_FALSE(g->skipped()) << "collapse is a host stop signal, not a reason to skip";
  EXPECT_EQ(device_skip(guard), 0);
  EXPECT_EQ(g->running.steps, 1001);

  in.set(0.5f, threshold, lr);  // exactly at lr * multiplier: not below it
  check(guard, stream, in);
  stream.synchronize();
  EXPECT_FALSE(guard.latest()->halt_grad_collapse);

  // lr comes from the device: a schedule raising it moves the threshold without a relaunch.
  in.set(0.5f, threshold, 2 * lr);
  check(guard, stream, in);
  stream.synchronize();
  EXPECT_TRUE(guard.latest()->halt_grad_collapse);
}

TEST(Guard, ZeroMultiplierTurnsCollapseOff) {
  zs::Stream stream;
  zs::GuardConfig config;
  config.collapse_multiplier = 0;
  config.warmup_steps = 0;
  zs::TrainingGuard guard(config);
  Inputs in;
  in.set(1.f, 0.0, 1e-3f);
  check(guard, stream, in);
  stream.synchronize();
  EXPECT_FALSE(guard.latest()->halt_grad_collapse);
}

TEST(Guard, SumsAndSnapshotsOverManyStepsWithSkips) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed = " << seed);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(0.f, 3.f);
  zs::Stream stream;
  zs::TrainingGuard guard;
  RefGuard ref(zs::GuardConfig{});
  Inputs in;
  int boundaries = 0;
  for (int step = 0; step < 2000; ++step) {
    const float loss = step % 7 == 3 ? kNaN : (step % 11 == 5 ? 2e6f : u(rng));
    const double grad = double(u(rng)) + 0.1;
    in.set(loss, grad, 1e-4f);
    check(guard, stream, in);
    ref.check(loss, grad, 1e-4f);
    if (step % 250 == 249) {
      guard.boundary(stream.exec());
      ref.boundary();
      ++boundaries;
      stream.synchronize();
      const auto g = guard.latest();
      ASSERT_TRUE(g.has_value());
      SCOPED_TRACE(testing::Message() << "boundary after step " << step);
      EXPECT_EQ(g->snapshot.boundary_step, step + 1);
      EXPECT_TRUE(g->snapshot.taken());
      expect_totals(g->snapshot, ref.snapshot);
      expect_totals(g->running, zs::GuardTotals{});
      EXPECT_EQ(g->snapshot.steps + g->snapshot.skipped, 250);
      EXPECT_NEAR(g->snapshot.mean_loss(), ref.snapshot.loss_sum / ref.snapshot.steps, 1e-15);
    }
  }
  stream.synchronize();
  const auto g = guard.latest();
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->seq, 2000 + boundaries);
  EXPECT_TRUE(std::isnan(g->running.mean_loss()));  // right after a boundary: nothing summed
}

TEST(Guard, StepsBehindSaysHowStaleTheRecordIs) {
  zs::Stream stream;
  zs::TrainingGuard guard;
  EXPECT_FALSE(guard.latest().has_value()) << "nothing posted yet";
  Inputs in;
  in.set(1.f, 1.0, 1e-4f);
  for (int k = 1; k <= 5; ++k) {
    check(guard, stream, in);
    stream.synchronize();
    const auto g = guard.latest();
    ASSERT_TRUE(g.has_value());
    EXPECT_EQ(g->step, k - 1);
    EXPECT_EQ(g->steps_behind, 0);
    EXPECT_EQ(guard.checks_enqueued(), k);
  }
  // A caller replaying a graph counts its own checks: 3 more enqueued than the record shows.
  const auto g = guard.latest(guard.checks_enqueued() + 3);
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->steps_behind, 3);
}

TEST(Guard, BoundaryBeforeAnyCheckDecodesAsNoStepYet) {
  zs::Stream stream;
  zs::TrainingGuard guard;
  guard.boundary(stream.exec());
  stream.synchronize();
  const auto g = guard.latest();
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->seq, 1);
  EXPECT_EQ(g->step, -1);
  EXPECT_EQ(g->steps_behind, 0);
  EXPECT_EQ(g->snapshot.boundary_step, 0);
  EXPECT_EQ(g->snapshot.steps, 0);
  EXPECT_FALSE(g->halt());
}

TEST(Guard, ResetAndCheckpointRoundTrip) {
  zs::Stream stream;
  zs::TrainingGuard guard;
  RefGuard ref(guard.config());
  Inputs in;
  const float losses[] = {1.5f, kNaN, 2.25f, 4.f, 3e6f};
  for (float l : losses) {
    in.set(l, 0.75, 1e-4f);
    check(guard, stream, in);
    ref.check(l, 0.75, 1e-4f);
  }
  guard.boundary(stream.exec());
  ref.boundary();
  in.set(0.5f, 0.25, 1e-4f);
  check(guard, stream, in);
  ref.check(0.5f, 0.25, 1e-4f);
  stream.synchronize();
  // What a checkpoint saves: the device state is the mailbox payload once the stream is idle.
  const auto saved_state = zs::test::to_host(guard.device_state());
  const auto saved_step = zs::test::to_host(guard.device_step());
  const auto before = guard.latest();
  ASSERT_TRUE(before.has_value());
  ASSERT_EQ(saved_step.size(), 1u);
  EXPECT_EQ(saved_step[0], 6);
  zs::kernels::GuardState saved;
  ASSERT_EQ(saved_state.size() * sizeof(double), sizeof saved);
  std::memcpy(static_cast<void*>(&saved), saved_state.data(), sizeof saved);
  const auto decoded = zs::TrainingGuard::decode(before->seq, saved, 6);
  EXPECT_EQ(decoded.step, before->step);
  expect_totals(decoded.running, before->running);
  expect_totals(decoded.snapshot, ref.snapshot);

  guard.reset();
  auto g = guard.latest();
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->seq, before->seq + 1);
  EXPECT_EQ(g->step, -1);
  EXPECT_EQ(g->steps_behind, 0);
  expect_totals(g->running, zs::GuardTotals{});
  EXPECT_FALSE(g->snapshot.taken());
  EXPECT_EQ(device_step(guard), 0);
  EXPECT_EQ(device_skip(guard), 0);
  EXPECT_EQ(guard.checks_enqueued(), 0);

  // Load: write the saved state back; the next check continues the old run exactly.
  Kokkos::deep_copy(guard.device_state(), Kokkos::View<const double*, Kokkos::HostSpace,
                                                       Kokkos::MemoryUnmanaged>(saved_state.data(), saved_state.size()));
  Kokkos::deep_copy(guard.device_step(), saved_step[0]);
  in.set(2.f, 0.5, 1e-4f);
  check(guard, stream, in);
  const auto want = ref.check(2.f, 0.5, 1e-4f);
  stream.synchronize();
  g = guard.latest(7);
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->step, want.step);
  EXPECT_EQ(g->steps_behind, 0);
  expect_totals(g->running, ref.totals);
  expect_totals(g->snapshot, ref.snapshot);
  EXPECT_EQ(g->snapshot.boundary_step, 5);
}

TEST(Guard, BadConfigIsAClearError) {
  struct Case {
    zs::GuardConfig config;
    const char* message;
  };
  auto with = [](auto edit) {
    zs::GuardConfig c;
    edit(c);
    return c;
  };
  const Case cases[] = {
      {with([](auto& c) { c.loss_clip = 0; }), "loss_clip = 0 is invalid"},
      {with([](auto& c) { c.loss_clip = -5; }), "loss_clip = -5 is invalid"},
      {with([](auto& c) { c.loss_clip = std::nan(""); }), "loss_clip = nan is invalid"},
      {with([](auto& c) { c.collapse_multiplier = -1; }), "collapse_multiplier = -1 is invalid"},
      {with([](auto& c) { c.collapse_multiplier = INFINITY; }), "collapse_multiplier = inf is invalid"},
      {with([](auto& c) { c.warmup_steps = -1; }), "warmup_steps = -1 is invalid"},
  };
  for (const auto& c : cases) {
    try {
      zs::TrainingGuard guard(c.config);
      ADD_FAILURE() << "no error for " << c.message;
    } catch (const zs::Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << e.what();
    }
  }
}

TEST(Guard, LauncherErrorsNameTheView) {
  zs::Stream stream;
  Inputs in;
  zs::DeviceScalar<std::int64_t> step("step");
  zs::DeviceScalar<int> skip("skip");
  Kokkos::View<zs::kernels::GuardState, zs::MemSpace> state("state"), none;
  auto expect_error = [](auto&& call, const std::string& message) {
    try {
      call();
      ADD_FAILURE() << "no error; expected " << message;
    } catch (const zs::Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  };
  expect_error(
      [&] {
        zs::kernels::guard_check(stream.exec(), zs::DeviceScalar<float>(), in.grad, in.lr, step, state, skip,
                                 zs::GuardConfig{});
      },
      "guard_check: loss is not allocated");
  expect_error(
      [&] {
        zs::kernels::guard_check(stream.exec(), in.loss, in.grad, in.lr, step, none, skip,
                                 zs::GuardConfig{});
      },
      "guard_check: state is not allocated");
  expect_error([&] { zs::kernels::guard_boundary(stream.exec(), step, none); },
               "guard_boundary: state is not allocated");
}

TEST(Guard, GraphCaptureReplaysCheckAndBoundaryWithFreshInputs) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed = " << seed);
  std::mt19937_64 rng(seed);
  zs::GuardConfig config;
  config.loss_clip = 100.0;
  config.warmup_steps = 3;
  zs::Stream stream;
  zs::TrainingGuard guard(config);
  RefGuard ref(config);
  Inputs in;
  auto step_body = [&] { check(guard, stream, in); };
  auto boundary_body = [&] { guard.boundary(stream.exec()); };

  auto s = random_step(rng, config);
  in.set(s.loss, s.grad, s.lr);
  step_body();  // direct run first, as the step would be before capture
  ref.check(s.loss, s.grad, s.lr);
  stream.synchronize();
  zs::Graph step_graph, boundary_graph;
  step_graph.capture(stream, step_body);
  boundary_graph.capture(stream, boundary_body);
  ASSERT_TRUE(step_graph.captured());

  std::int64_t checks = 1, posts = 1;
  for (int replay = 0; replay < 60; ++replay) {
    SCOPED_TRACE(testing::Message() << "replay " << replay);
    s = random_step(rng, config);
    in.set(s.loss, s.grad, s.lr);
    step_graph.replay(stream);
    const auto want = ref.check(s.loss, s.grad, s.lr);
    ++checks;
    ++posts;
    if (replay % 13 == 12) {
      boundary_graph.replay(stream);
      ref.boundary();
      ++posts;
    }
    stream.synchronize();
    const auto g = guard.latest(checks);
    ASSERT_TRUE(g.has_value());
    EXPECT_EQ(g->seq, posts);
    EXPECT_EQ(g->steps_behind, 0);
    EXPECT_EQ(g->step, want.step);
    EXPECT_EQ(g->halt_nan, want.halt_nan);
    EXPECT_EQ(g->halt_loss_clip, want.halt_loss_clip);
    EXPECT_EQ(g->halt_grad_collapse, want.halt_grad_collapse);
    EXPECT_TRUE(same(g->raw_loss, want.raw_loss));
    EXPECT_TRUE(same(g->raw_grad_norm, want.raw_grad_norm));
    EXPECT_EQ(device_skip(guard), want.skip ? 1 : 0);
    expect_totals(g->running, ref.totals);
    expect_totals(g->snapshot, ref.snapshot);
    EXPECT_EQ(g->snapshot.boundary_step, ref.snapshot.boundary_step);
    if (HasFailure()) break;
  }
  EXPECT_EQ(device_step(guard), checks);
}
