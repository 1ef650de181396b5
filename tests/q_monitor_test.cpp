#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backends/graph.hpp"
#include "backends/stream.hpp"
#include "core/config.hpp"
#include "core/error.hpp"
#include "kernels/c51_q.hpp"
#include "kernels/q_stats.hpp"
#include "train/q_monitor.hpp"
#include "test_util.hpp"

namespace {

using QView = Kokkos::View<float**, Kokkos::LayoutRight, zs::MemSpace>;
using ProbView = Kokkos::View<float***, Kokkos::LayoutRight, zs::MemSpace>;
using Record = Kokkos::View<zs::kernels::QMonitorRecord, zs::MemSpace>;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// ---- naive double references ----

// Q = Σ_j exp(logp_j)·z_j with z_j = v_min + j·Δz, in double.
std::vector<double> reference_c51(const std::vector<float>& logp, float v_min, float v_max, int B, int A, int atoms) {
  const double dz = double((v_max - v_min) / float(atoms - 1));
  std::vector<double> q(std::size_t(B) * A);
  for (int b = 0; b < B; ++b)
    for (int a = 0; a < A; ++a) {
      double s = 0;
      for (int j = 0; j < atoms; ++j) s += std::exp(double(logp[(std::size_t(b) * A + a) * atoms + j])) * (v_min + j * dz);
      q[std::size_t(b) * A + a] = s;
    }
  return q;
}

struct RefStats {
  double max_q_min, max_q_max, max_q_mean, mean_all;
};
RefStats reference_stats(const std::vector<float>& q, int B, int A) {
  RefStats r{INFINITY, -INFINITY, 0, 0};
  double sum_all = 0;
  for (int b = 0; b < B; ++b) {
    double m = -INFINITY;
    for (int a = 0; a < A; ++a) {
      const double v = q[std::size_t(b) * A + a];
      if (v > m) m = v;  // NaN skipped, as documented
      sum_all += v;
    }
    r.max_q_min = std::min(r.max_q_min, m);
    r.max_q_max = std::max(r.max_q_max, m);
    r.max_q_mean += m;
  }
  r.max_q_mean /= B;
  r.mean_all = sum_all / (double(B) * A);
  return r;
}

struct RefDiv {
  double min, max, mean, variance;
  bool flag;
};
RefDiv reference_divergence(const std::vector<float>& q, int A, int sample, double threshold) {
  RefDiv r{INFINITY, -INFINITY, 0, 0, false};
  for (int a = 0; a < A; ++a) {
    const double v = q[std::size_t(sample) * A + a];
    if (v < r.min) r.min = v;
    if (v > r.max) r.max = v;
    r.mean += v;
  }
  r.mean /= A;
  for (int a = 0; a < A; ++a) {
    const double d = q[std::size_t(sample) * A + a] - r.mean;
    r.variance += d * d;
  }
  r.variance /= A;
  r.flag = !std::isfinite(r.mean) || std::fabs(r.min) > threshold || std::fabs(r.max) > threshold;
  return r;
}

// ---- device helpers ----

QView to_device_q(const std::vector<float>& q, int B, int A) {
  QView d("q", B, A);
  auto h = Kokkos::create_mirror_view(d);
  for (int b = 0; b < B; ++b)
    for (int a = 0; a < A; ++a) h(b, a) = q[std::size_t(b) * A + a];
  Kokkos::deep_copy(d, h);
  return d;
}

zs::kernels::QMonitorRecord poisoned() {
  zs::kernels::QMonitorRecord r;
  r.batch = {-12345.0, -12345.0, -12345.0, -12345.0};
  r.row = {-12345.0, -12345.0, -12345.0, -12345.0, -12345.0};
  return r;
}

zs::kernels::QBatchSummary run_stats(const std::vector<float>& q, int B, int A) {
  zs::Stream stream;
  Record rec("stats");
  Kokkos::deep_copy(rec, poisoned());
  zs::kernels::q_batch_stats(stream.exec(), to_device_q(q, B, A), rec);
  stream.synchronize();
  zs::kernels::QMonitorRecord h;
  Kokkos::deep_copy(h, rec);
  return h.batch;
}

zs::kernels::QRowSummary run_divergence(const std::vector<float>& q, int B, int A, int sample, double threshold) {
  zs::Stream stream;
  Record rec("div");
  Kokkos::deep_copy(rec, poisoned());
  zs::kernels::q_divergence_check(stream.exec(), to_device_q(q, B, A), rec, sample, threshold);
  stream.synchronize();
  zs::kernels::QMonitorRecord h;
  Kokkos::deep_copy(h, rec);
  return h.row;
}

// Log-softmaxed random logits, so every row is a proper distribution.
std::vector<float> random_logp(int B, int A, int atoms, std::uint64_t seed) {
  auto logits = zs::test::random_normal(std::size_t(B) * A * atoms, seed, 2.f);
  for (std::size_t row = 0; row < std::size_t(B) * A; ++row) {
    float* l = logits.data() + row * atoms;
    const float m = *std::max_element(l, l + atoms);
    double s = 0;
    for (int j = 0; j < atoms; ++j) s += std::exp(double(l[j]) - m);
    for (int j = 0; j < atoms; ++j) l[j] = float(double(l[j]) - m - std::log(s));
  }
  return logits;
}

double sum_abs(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += std::fabs(double(x));
  return s;
}

template <class F>
void expect_error(F&& call, const std::string& message) {
  try {
    call();
    ADD_FAILURE() << "no error; expected " << message;
  } catch (const zs::Error& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
  }
}

zs::QRecord diverged_record(double lo, double hi) {
  zs::QRecord r;
  r.min = lo;
  r.max = hi;
  r.mean = (lo + hi) / 2;
  r.variance = 1e6;
  r.diverged = true;
  return r;
}

zs::QRecord clean_record() {
  zs::QRecord r;
  r.min = -1;
  r.max = 2;
  r.mean = 0.5;
  r.variance = 1.5;
  return r;
}

}  // namespace

// ---- kernels ----

TEST(QMonitor, BatchStatsMatchDoubleReference) {
  const int reference_actions = 11;  // branches {5, 3, 3}
  for (int B : {1, 2, 3, 31, 256, 1031, 4099}) {
    for (int A : {1, 2, reference_actions, 13, 32, 33}) {
      const auto seed = zs::test::fresh_seed();
      SCOPED_TRACE(testing::Message() << "B " << B << ", A " << A << ", seed " << seed);
      const auto q = zs::test::random_normal(std::size_t(B) * A, seed, 5.f);
      const auto ref = reference_stats(q, B, A);
      const auto got = run_stats(q, B, A);
      const double tol = 1e-13 * sum_abs(q) / B;  // only the summation order differs
      EXPECT_EQ(got.max_q_min, ref.max_q_min);  // min/max of floats are exact
      EXPECT_EQ(got.max_q_max, ref.max_q_max);
      EXPECT_NEAR(got.max_q_mean, ref.max_q_mean, tol);
      EXPECT_NEAR(got.mean_all, ref.mean_all, tol);
    }
  }
}

TEST(QMonitor, DivergenceCheckMatchesDoubleReference) {
  for (int B : {1, 5, 256, 4099}) {
    for (int A : {1, 2, 11, 37}) {
      const auto seed = zs::test::fresh_seed();
      SCOPED_TRACE(testing::Message() << "B " << B << ", A " << A << ", seed " << seed);
      for (float scale : {1.f, 1e3f, 2e4f}) {
        const auto q = zs::test::random_normal(std::size_t(B) * A, seed, scale);
        for (int sample : {0, B / 2, B - 1}) {
          const auto ref = reference_divergence(q, A, sample, 1e4);
          const auto got = run_divergence(q, B, A, sample, 1e4);
          const double tol = 1e-13 * (sum_abs(q) / B + 1);
          EXPECT_EQ(got.min, ref.min);
          EXPECT_EQ(got.max, ref.max);
          EXPECT_NEAR(got.mean, ref.mean, tol);
          EXPECT_NEAR(got.variance, ref.variance, 1e-12 * (ref.variance + 1));
          EXPECT_EQ(got.flag, ref.flag ? 1.0 : 0.0) << "scale " << scale;
        }
      }
    }
  }
}

TEST(QMonitor, DivergenceThresholdIsStrict) {
  const double threshold = 1e4;
  const float at = 1e4f;
  const float above = std::nextafter(at, kInf);
  struct Case {
    std::vector<float> row;
    bool flag;
  };
  for (const auto& c : {Case{{at, -at, 0.f}, false}, Case{{above, 0.f, 1.f}, true},
                        Case{{0.f, -above, 1.f}, true}, Case{{-at}, false}}) {
    SCOPED_TRACE(testing::Message() << "row[0] " << c.row[0]);
    const int A = static_cast<int>(c.row.size());
    const auto got = run_divergence(c.row, 1, A, 0, threshold);
    EXPECT_EQ(got.flag, c.flag ? 1.0 : 0.0);
  }
}

TEST(QMonitor, NonFiniteQIsFlaggedAndSkippedByMinMax) {
  const int B = 37, A = 11;
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const auto clean = zs::test::random_normal(std::size_t(B) * A, seed);
  const int sample = int(seed % B);
  const int where = int((seed / B) % A);
  for (float bad : {kNaN, kInf, -kInf}) {
    SCOPED_TRACE(testing::Message() << "bad value " << bad << " at (" << sample << ", " << where << ")");
    auto q = clean;
    q[std::size_t(sample) * A + where] = bad;
    const auto rd = reference_divergence(q, A, sample, 1e4);
    const auto d = run_divergence(q, B, A, sample, 1e4);
    EXPECT_EQ(d.flag, 1.0);
    EXPECT_EQ(d.min, rd.min);
    EXPECT_EQ(d.max, rd.max);
    EXPECT_TRUE(std::isnan(d.mean) || std::isinf(d.mean));

    const auto rs = reference_stats(q, B, A);
    const auto s = run_stats(q, B, A);
    EXPECT_EQ(s.max_q_min, rs.max_q_min);
    EXPECT_EQ(s.max_q_max, rs.max_q_max);
    EXPECT_FALSE(std::isfinite(s.mean_all));
  }
  // A row of nothing but NaN: the empty-set min and max, and flagged.
  const auto d = run_divergence({kNaN, kNaN}, 1, 2, 0, 1e4);
  EXPECT_EQ(d.min, INFINITY);
  EXPECT_EQ(d.max, -INFINITY);
  EXPECT_EQ(d.flag, 1.0);
  // A batch of +Inf rows: min and max of max-Q are both +Inf, not the reducers' DBL_MAX.
  const auto s = run_stats({kInf, kInf, kInf}, 3, 1);
  EXPECT_EQ(s.max_q_min, INFINITY);
  EXPECT_EQ(s.max_q_max, INFINITY);
}

TEST(QMonitor, AllEqualQHasZeroVariance) {
  for (float value : {3.25f, 0.f, -7.5f}) {
    SCOPED_TRACE(testing::Message() << "value " << value);
    const int B = 257, A = 11;
    const std::vector<float> q(std::size_t(B) * A, value);
    const auto s = run_stats(q, B, A);
    EXPECT_EQ(s.max_q_min, value);
    EXPECT_EQ(s.max_q_max, value);
    EXPECT_EQ(s.max_q_mean, value);
    EXPECT_EQ(s.mean_all, value);
    const auto d = run_divergence(q, B, A, 100, 1e4);
    EXPECT_EQ(d.min, value);
    EXPECT_EQ(d.max, value);
    EXPECT_EQ(d.mean, value);
    EXPECT_EQ(d.variance, 0.0);
    EXPECT_EQ(d.flag, 0.0);
  }
}

TEST(QMonitor, EmptyOrMismatchedShapesAreClearErrors) {
  zs::Stream stream;
  const auto& exec = stream.exec();
  Record stats("stats"), div("div"), none;
  QView q("q", 4, 11);
  expect_error([&] { zs::kernels::q_batch_stats(exec, QView("q", 0, 11), stats); },
               "q_batch_stats: Q has batch size B = 0; expected B >= 1");
  expect_error([&] { zs::kernels::q_batch_stats(exec, QView("q", 4, 0), stats); },
               "q_batch_stats: Q has A = 0 actions; expected A >= 1");
  expect_error([&] { zs::kernels::q_batch_stats(exec, q, none); }, "q_batch_stats: the record is not allocated");
  expect_error([&] { zs::kernels::q_divergence_check(exec, QView("q", 0, 3), div); },
               "q_divergence_check: Q has batch size B = 0");
  expect_error([&] { zs::kernels::q_divergence_check(exec, q, div, 4); },
               "sample = 4 is out of range; expected 0 <= sample < 4");
  expect_error([&] { zs::kernels::q_divergence_check(exec, q, div, -1); },
               "sample = -1 is out of range");
  expect_error([&] { zs::kernels::q_divergence_check(exec, q, div, 0, 0.0); },
               "threshold = 0 is invalid");
  expect_error([&] { zs::kernels::q_divergence_check(exec, q, none); },
               "q_divergence_check: the record is not allocated");

  ProbView p("p", 4, 11, 51);
  expect_error([&] { zs::kernels::q_from_log_probs<zs::ExecSpace>(exec, p, -1.f, 1.f, QView("q", 4, 10)); },
               "q_from_log_probs: log-probs are [4, 11, atoms], Q is [4, 10]");
  expect_error([&] { zs::kernels::q_from_log_probs<zs::ExecSpace>(exec, ProbView("p", 4, 11, 1), -1.f, 1.f, q); },
               "q_from_log_probs: 1 atoms; expected at least 2");

  zs::QMonitor monitor;  // sample 0 of an empty batch
  expect_error([&] { monitor.observe(exec, QView("q", 0, 11)); }, "B = 0");
  zs::QMonitorConfig far;
  far.sample = 9;
  zs::QMonitor far_monitor(far);
  expect_error([&] { far_monitor.observe(exec, q); }, "sample = 9 is out of range");
}

TEST(QMonitor, BadConfigIsAClearError) {
  auto with = [](auto edit) {
    zs::QMonitorConfig c;
    edit(c);
    return c;
  };
  expect_error([&] { zs::QMonitor m(with([](auto& c) { c.patience = 0; })); }, "patience = 0 is invalid");
  expect_error([&] { zs::QMonitor m(with([](auto& c) { c.threshold = -1; })); }, "threshold = -1 is invalid");
  expect_error([&] { zs::QMonitor m(with([](auto& c) { c.sample = -2; })); }, "sample = -2 is invalid");
  expect_error([&] { zs::QPatience p(with([](auto& c) { c.collapse_variance = NAN; })); },
               "collapse_variance = nan is invalid");
}

// ---- patience rule, no device ----

TEST(QMonitor, PatienceStopsOnTheThirdConsecutiveDivergedCheck) {
  zs::QPatience p;  // defaults: threshold 1e4, patience 3
  auto s = p.update(1, diverged_record(-2e4, 5e3));
  EXPECT_TRUE(s.fresh);
  EXPECT_EQ(s.consecutive, 1);
  s = p.update(2, diverged_record(-1.5e4, 3.1e4));
  EXPECT_EQ(s.consecutive, 2);
  try {
    p.update(3, diverged_record(-1e3, 1.2e4));
    FAIL() << "no stop after 3 consecutive diverged checks";
  } catch (const zs::Error& e) {
    EXPECT_STREQ(e.what(),
                 "Q-value divergence: Q in [-20000, 31000] exceeded |Q| > 10000 on 3 consecutive "
                 "checks; training stopped");
  }
}

TEST(QMonitor, PatienceInterruptedByACleanCheckStartsOver) {
  zs::QPatience p;
  std::int64_t seq = 0;
  for (int round = 0; round < 5; ++round) {
    EXPECT_EQ(p.update(++seq, diverged_record(-2e4, 0)).consecutive, 1);
    EXPECT_EQ(p.update(++seq, diverged_record(0, 2e4)).consecutive, 2);
    EXPECT_EQ(p.update(++seq, clean_record()).consecutive, 0);
  }
  // The range in the message is the new run's only, not the earlier runs'.
  p.update(++seq, diverged_record(-1.1e4, 0));
  p.update(++seq, diverged_record(0, 1.2e4));
  try {
    p.update(++seq, diverged_record(-1e4, 1e4 + 1));
    FAIL();
  } catch (const zs::Error& e) {
    EXPECT_NE(std::string(e.what()).find("Q in [-11000, 12000]"), std::string::npos) << e.what();
  }
}

TEST(QMonitor, PatienceCountsARecordOnlyOnce) {
  zs::QPatience p;
  const auto bad = diverged_record(-2e4, 2e4);
  EXPECT_EQ(p.update(7, bad).consecutive, 1);
  for (int poll = 0; poll < 10; ++poll) {  // the host polls faster than records arrive
    const auto s = p.update(7, bad);
    EXPECT_FALSE(s.fresh);
    EXPECT_EQ(s.consecutive, 1);
  }
  EXPECT_EQ(p.update(9, bad).consecutive, 2);  // a gap in seq is still the next record seen
  EXPECT_THROW(p.update(10, bad), zs::Error);
}

TEST(QMonitor, PatienceOfOneAndNonFiniteRangeAreReported) {
  zs::QMonitorConfig c;
  c.patience = 1;
  c.threshold = 50;
  zs::QPatience p(c);
  auto r = diverged_record(-3, INFINITY);
  r.mean = NAN;
  try {
    p.update(1, r);
    FAIL();
  } catch (const zs::Error& e) {
    EXPECT_STREQ(e.what(),
                 "Q-value divergence: Q in [-3, inf] exceeded |Q| > 50 (with NaN/Inf values) on 1 "
                 "consecutive checks; training stopped");
  }
}

TEST(QMonitor, CollapseIsAWarningNotAStop) {
  zs::QPatience p;
  std::int64_t seq = 0;
  zs::QRecord r = clean_record();
  r.mean = 1e-5;
  r.variance = 1e-6;
  for (int i = 0; i < 5; ++i) {
    const auto s = p.update(++seq, r);
    EXPECT_TRUE(s.collapse_warning);
    EXPECT_NE(s.warning.find("Q-value collapse"), std::string::npos) << s.warning;
    EXPECT_EQ(s.consecutive, 0);
  }
  r.mean = -2e-4;  // |mean| too large
  EXPECT_FALSE(p.update(++seq, r).collapse_warning);
  r.mean = -5e-5;
  r.variance = 1e-4;  // variance not below the limit
  const auto s = p.update(++seq, r);
  EXPECT_FALSE(s.collapse_warning);
  EXPECT_TRUE(s.warning.empty());
  r.mean = NAN;
  r.variance = NAN;
  EXPECT_FALSE(p.update(++seq, r).collapse_warning);
}

// ---- the monitor on the device ----

TEST(QMonitor, ObserveAndPollStopAfterThreeDivergedObservations) {
  const int B = 256, A = 11;
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  zs::Stream stream;
  zs::QMonitor monitor;
  EXPECT_FALSE(monitor.poll().has_record);

  auto q = zs::test::random_normal(std::size_t(B) * A, seed);
  QView dq = to_device_q(q, B, A);
  monitor.observe(stream.exec(), dq);
  stream.synchronize();
  auto s = monitor.poll();
  ASSERT_TRUE(s.has_record);
  EXPECT_EQ(s.seq, 1);
  const auto ref = reference_stats(q, B, A);
  EXPECT_EQ(s.record.max_q_max, ref.max_q_max);
  EXPECT_NEAR(s.record.mean_all, ref.mean_all, 1e-12);
  EXPECT_FALSE(s.record.diverged);

  q[3] = -2.5e4f;  // sample 0 diverges
  dq = to_device_q(q, B, A);
  for (int k = 1; k <= 2; ++k) {
    monitor.observe(stream.exec(), dq);
    stream.synchronize();
    s = monitor.poll();
    EXPECT_TRUE(s.record.diverged);
    EXPECT_EQ(s.record.min, -2.5e4);
    EXPECT_EQ(s.consecutive, k);
    EXPECT_EQ(monitor.poll().consecutive, k) << "polling again must not count the record twice";
  }
  monitor.observe(stream.exec(), dq);
  stream.synchronize();
  try {
    monitor.poll();
    FAIL() << "no stop on the third diverged observation";
  } catch (const zs::Error& e) {
    EXPECT_NE(std::string(e.what()).find("Q in [-25000, "), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("exceeded |Q| > 10000 on 3 consecutive checks"),
              std::string::npos)
        << e.what();
  }
}

TEST(QMonitor, GraphCaptureReplaysC51QAndObserveWithFreshInputs) {
  const int B = 256, A = 11, atoms = zs::Config{}.atoms;
  const float v_min = -2e4f, v_max = 2e4f;  // wide: some replays diverge
  zs::Stream stream;
  ProbView dp("logp", B, A, atoms);
  QView dq("q", B, A);
  zs::QMonitorConfig config;
  config.sample = 101;
  config.patience = 1000;  // this test checks values, not the stop
  zs::QMonitor monitor(config);
  auto body = [&] {
    zs::kernels::q_from_log_probs<zs::ExecSpace>(stream.exec(), dp, v_min, v_max, dq);
    monitor.observe(stream.exec(), dq);
  };
  body();  // first use sizes Kokkos' reduction scratch outside capture
  stream.synchronize();
  zs::Graph graph;
  graph.capture(stream, body);
  ASSERT_TRUE(graph.captured());

  auto host_p = Kokkos::create_mirror_view(dp);
  for (int replay = 0; replay < 6; ++replay) {
    const auto seed = zs::test::fresh_seed();
    SCOPED_TRACE(testing::Message() << "replay " << replay << ", seed " << seed);
    const auto p = random_logp(B, A, atoms, seed);
    std::copy(p.begin(), p.end(), host_p.data());
    Kokkos::deep_copy(dp, host_p);
    graph.replay(stream);
    stream.synchronize();
    const auto s = monitor.poll();
    ASSERT_TRUE(s.has_record);
    EXPECT_EQ(s.seq, replay + 2);
    EXPECT_TRUE(s.fresh);

    // The reference works from the kernel's own float Q, checked against Σ p·z separately.
    const auto q = zs::test::to_host(dq);
    const auto qd = reference_c51(p, v_min, v_max, B, A, atoms);
    for (std::size_t i = 0; i < q.size(); ++i)
      ASSERT_NEAR(q[i], qd[i], 1e-7 * std::fabs(qd[i]) + 1e-30) << "element " << i;
    const auto rs = reference_stats(q, B, A);
    const auto rd = reference_divergence(q, A, config.sample, config.threshold);
    EXPECT_EQ(s.record.max_q_min, rs.max_q_min);
    EXPECT_EQ(s.record.max_q_max, rs.max_q_max);
    EXPECT_NEAR(s.record.max_q_mean, rs.max_q_mean, 1e-13 * sum_abs(q) / B);
    EXPECT_NEAR(s.record.mean_all, rs.mean_all, 1e-13 * sum_abs(q) / B);
    EXPECT_EQ(s.record.min, rd.min);
    EXPECT_EQ(s.record.max, rd.max);
    EXPECT_NEAR(s.record.mean, rd.mean, 1e-13 * sum_abs(q) / B);
    EXPECT_NEAR(s.record.variance, rd.variance, 1e-12 * rd.variance);
    EXPECT_EQ(s.record.diverged, rd.flag);
  }
}
