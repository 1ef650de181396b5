#include "kernels/routing.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/graph.hpp"
#include "backends/stream.hpp"
#include "core/error.hpp"
#include "test_util.hpp"

namespace {

using Ints = Kokkos::View<std::int32_t*, zs::MemSpace>;

const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

// The reference: the documented table, with the ratios as (rounded) double divisions. For
// float inputs a ratio that is not exactly on a boundary is at least ~2^-26 away from it, far
// beyond double rounding, so this agrees with the kernel's exact comparisons.
int ref_factored(int exposure, float spread, float vol, float med_spread, float med_vol) {
  if (exposure < 0 || exposure > 4) return -1;
  auto ratio = [](float x, float m) {
    if (!std::isfinite(x) || !std::isfinite(m) || m <= 0.f) return 1.0;
    return double(x) / double(m);
  };
  const double rs = ratio(spread, med_spread), rv = ratio(vol, med_vol);
  const int order = rs <= 1.0 ? 0 : rs <= 2.0 ? 1 : 2;
  const int urgency = rv < 0.75 ? 0 : rv < 1.5 ? 1 : 2;
  return exposure * 9 + order * 3 + urgency;
}

struct Inputs {
  std::vector<int> exposure;
  std::vector<float> spread, vol;
  float med_spread = 1.f, med_vol = 1.f;
  std::vector<int> reference() const {
    std::vector<int> r(exposure.size());
    for (std::size_t i = 0; i < r.size(); ++i)
      r[i] = ref_factored(exposure[i], spread[i], vol[i], med_spread, med_vol);
    return r;
  }
};

Ints ints_to_device(const std::vector<int>& v) {
  Ints d("ints", v.size());
  auto h = Kokkos::create_mirror_view(d);
  for (std::size_t i = 0; i < v.size(); ++i) h(i) = v[i];
  Kokkos::deep_copy(d, h);
  return d;
}

std::vector<int> route(const Inputs& in) {
  zs::Stream stream;
  zs::DeviceScalar<float> ms("ms"), mv("mv");
  Kokkos::deep_copy(ms, in.med_spread);
  Kokkos::deep_copy(mv, in.med_vol);
  Ints out("out", in.exposure.size());
  Kokkos::deep_copy(out, -99);  // poison
  zs::kernels::route_exposure_to_factored(stream.exec(), ints_to_device(in.exposure),
                                          zs::test::to_device(in.spread),
                                          zs::test::to_device(in.vol), ms, mv, out);
  stream.synchronize();
  const auto h = zs::test::to_host(out);
  return std::vector<int>(h.begin(), h.end());
}

int route_one(int exposure, float spread, float vol, float med_spread, float med_vol) {
  Inputs in;
  in.exposure = {exposure};
  in.spread = {spread};
  in.vol = {vol};
  in.med_spread = med_spread;
  in.med_vol = med_vol;
  return route(in)[0];
}

float up(float x) { return std::nextafter(x, kInf); }
float down(float x) { return std::nextafter(x, -kInf); }

}  // namespace

TEST(Routing, TheTableAtAndAroundEveryBoundary) {
  // Median spread 4 and median volatility 8 put every boundary on an exact float (spread 4
  // and 8, volatility 6 and 12), so these rows are the hand-written table itself.
  struct Row {
    float spread, vol;
    int order, urgency;
  };
  const float ms = 4.f, mv = 8.f;
  const Row rows[] = {
      {0.f, 0.f, 0, 0},          {down(4.f), down(6.f), 0, 0},  {4.f, 6.f, 0, 1},
      {up(4.f), up(6.f), 1, 1},  {down(8.f), down(12.f), 1, 1}, {8.f, 12.f, 1, 2},
      {up(8.f), up(12.f), 2, 2}, {1e30f, 1e30f, 2, 2},          {-1.f, -1.f, 0, 0},
      {4.f, 8.f, 0, 1},  // at the medians: ratio 1 → market, normal
  };
  for (int e = 0; e < 5; ++e)
    for (const auto& r : rows) {
      SCOPED_TRACE(testing::Message()
                   << "exposure " << e << ", spread " << r.spread << ", vol " << r.vol);
      const int expect = e * 9 + r.order * 3 + r.urgency;
      EXPECT_EQ(ref_factored(e, r.spread, r.vol, ms, mv), expect)
          << "the reference disagrees with the table";
      EXPECT_EQ(route_one(e, r.spread, r.vol, ms, mv), expect);
    }
}

TEST(Routing, BoundariesAreExactForAnyMedian) {
  // Random medians, including subnormal and huge ones: values on, one ulp below and one ulp
  // above each boundary (where the boundary is not a float, its two float neighbours).
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed = " << seed);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> exponent(-30.f, 30.f);
  std::vector<float> medians = {1.f, 3.7f, 1e-40f, 1e38f, 0.1f};
  for (int i = 0; i < 50; ++i)
    medians.push_back(std::exp2(exponent(rng)) * (1.f + float(i) / 50.f));
  Inputs in;
  for (float m : medians)
    for (double f : {1.0, 2.0, 0.75, 1.5}) {
      const float b = static_cast<float>(f * m);
      for (float x : {b, up(b), down(b), up(up(b)), down(down(b))}) {
        in.exposure.push_back(static_cast<int>(in.exposure.size() % 5));
        in.spread.push_back(x);
        in.vol.push_back(x);
      }
    }
  for (float m : medians) {
    SCOPED_TRACE(testing::Message() << "median " << m);
    in.med_spread = m;
    in.med_vol = m;
    EXPECT_EQ(route(in), in.reference());
  }
}

TEST(Routing, RandomInputsMatchTheReference) {
  for (std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{256}, std::size_t{1031},
                        std::size_t{1000003}}) {
    const auto seed = zs::test::fresh_seed();
    SCOPED_TRACE(testing::Message() << "B = " << n << ", seed = " << seed);
    std::mt19937_64 rng(seed);
    std::lognormal_distribution<float> positive(0.f, 0.8f);
    Inputs in;
    in.med_spread = positive(rng);
    in.med_vol = positive(rng);
    for (std::size_t i = 0; i < n; ++i) {
      in.exposure.push_back(static_cast<int>(rng() % 7) - 1);  // −1..5: some invalid
      in.spread.push_back(in.med_spread * positive(rng));
      in.vol.push_back(in.med_vol * positive(rng));
    }
    const auto got = route(in);
    EXPECT_EQ(got, in.reference());
    int seen[45] = {};
    for (int f : got) {
      ASSERT_GE(f, -1);
      ASSERT_LT(f, 45);
      if (f >= 0) seen[f] = 1;
    }
    if (n == 1000003) {
      for (int f = 0; f < 45; ++f)
        EXPECT_EQ(seen[f], 1) << "factored action " << f << " never produced";
    }
  }
}

TEST(Routing, NonFiniteOrNonPositiveInputsAreNeutral) {
  // Neutral = ratio 1: order type 0 (market), urgency 1 (normal); each ratio on its own.
  for (float bad : {kNaN, kInf, -kInf}) {
    SCOPED_TRACE(testing::Message() << "bad " << bad);
    EXPECT_EQ(route_one(2, bad, 100.f, 1.f, 1.f), 2 * 9 + 0 * 3 + 2);  // spread bad, vol high
    EXPECT_EQ(route_one(2, 100.f, bad, 1.f, 1.f), 2 * 9 + 2 * 3 + 1);  // vol bad, spread wide
    EXPECT_EQ(route_one(3, bad, bad, 1.f, 1.f), 3 * 9 + 0 * 3 + 1);
  }
  for (float bad_median : {0.f, -0.f, -1.f, -1e-40f, kNaN, kInf, -kInf}) {
    SCOPED_TRACE(testing::Message() << "bad median " << bad_median);
    EXPECT_EQ(route_one(4, 100.f, 0.01f, bad_median, 1.f), 4 * 9 + 0 * 3 + 0);  // vol still low
    EXPECT_EQ(route_one(4, 100.f, 0.01f, 1.f, bad_median), 4 * 9 + 2 * 3 + 1);  // spread still wide
    EXPECT_EQ(route_one(1, 100.f, 100.f, bad_median, bad_median), 1 * 9 + 0 * 3 + 1);
  }
  // A zero spread against a positive median is defined: ratio 0 → market.
  EXPECT_EQ(route_one(0, 0.f, 0.f, 1.f, 1.f), 0);
}

TEST(Routing, ExposureOutsideZeroToFourIsMarkedInvalid) {
  for (int e : {-1, 5, 9, -2147483647 - 1, 2147483647}) {
    SCOPED_TRACE(testing::Message() << "exposure " << e);
    EXPECT_EQ(route_one(e, 1.f, 1.f, 1.f, 1.f), -1);
  }
  for (int e = 0; e < 5; ++e) EXPECT_EQ(route_one(e, 1.f, 1.f, 1.f, 1.f), e * 9 + 1);
}

TEST(Routing, RoutesAStridedExposureColumn) {
  // The exposure branch of epsilon_greedy's [B, branches] actions, routed without a copy.
  const std::size_t n = 37;
  Kokkos::View<std::int32_t**, Kokkos::LayoutRight, zs::MemSpace> actions("actions", n, 3);
  auto h = Kokkos::create_mirror_view(actions);
  Inputs in;
  for (std::size_t i = 0; i < n; ++i) {
    h(i, 0) = static_cast<int>(i % 5);
    h(i, 1) = 100 + static_cast<int>(i);  // must not be read
    h(i, 2) = -5;
    in.exposure.push_back(static_cast<int>(i % 5));
    in.spread.push_back(0.1f * static_cast<float>(i));
    in.vol.push_back(0.05f * static_cast<float>(i));
  }
  Kokkos::deep_copy(actions, h);
  in.med_spread = 1.3f;
  in.med_vol = 0.9f;
  zs::Stream stream;
  zs::DeviceScalar<float> ms("ms"), mv("mv");
  Kokkos::deep_copy(ms, in.med_spread);
  Kokkos::deep_copy(mv, in.med_vol);
  Ints out("out", n);
  zs::kernels::route_exposure_to_factored(stream.exec(), Kokkos::subview(actions, Kokkos::ALL, 0),
                                          zs::test::to_device(in.spread),
                                          zs::test::to_device(in.vol), ms, mv, out);
  stream.synchronize();
  const auto got = zs::test::to_host(out);
  EXPECT_EQ(std::vector<int>(got.begin(), got.end()), in.reference());
}

TEST(Routing, GraphReplayReadsMediansAndInputsFromDevice) {
  const std::size_t n = 256;
  zs::Stream stream;
  Ints exposure("exposure", n), out("out", n);
  zs::DeviceFloats spread("spread", n), vol("vol", n);
  zs::DeviceScalar<float> ms("ms"), mv("mv");
  Kokkos::deep_copy(ms, 1.f);
  Kokkos::deep_copy(mv, 1.f);
  auto body = [&] {
    zs::kernels::route_exposure_to_factored(stream.exec(), exposure, spread, vol, ms, mv, out);
  };
  body();
  stream.synchronize();
  zs::Graph graph;
  graph.capture(stream, body);
  ASSERT_TRUE(graph.captured());
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed = " << seed);
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<float> positive(0.f, 0.8f);
  Inputs in;
  in.exposure.resize(n);
  in.spread.resize(n);
  in.vol.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    in.exposure[i] = static_cast<int>(rng() % 5);
    in.spread[i] = positive(rng);
    in.vol[i] = positive(rng);
  }
  Kokkos::deep_copy(exposure, ints_to_device(in.exposure));
  Kokkos::deep_copy(spread, zs::test::to_device(in.spread));
  Kokkos::deep_copy(vol, zs::test::to_device(in.vol));
  const float medians[][2] = {{0.5f, 2.f}, {2.f, 0.5f}, {1.f, 1.f}, {0.f, kNaN}, {0.9f, 1.1f}};
  std::vector<int> previous;
  for (int replay = 0; replay < 5; ++replay) {
    SCOPED_TRACE(testing::Message() << "replay " << replay);
    if (replay == 4) {  // fresh inputs too
      for (std::size_t i = 0; i < n; ++i) in.spread[i] = positive(rng);
      Kokkos::deep_copy(spread, zs::test::to_device(in.spread));
    }
    in.med_spread = medians[replay][0];
    in.med_vol = medians[replay][1];
    Kokkos::deep_copy(ms, in.med_spread);
    Kokkos::deep_copy(mv, in.med_vol);
    graph.replay(stream);
    stream.synchronize();
    const auto h = zs::test::to_host(out);
    const std::vector<int> got(h.begin(), h.end());
    EXPECT_EQ(got, in.reference());
    EXPECT_NE(got, previous) << "the replay ignored the new medians";
    previous = got;
  }
}

TEST(Routing, MismatchedSizesAreClearErrors) {
  zs::Stream stream;
  zs::DeviceScalar<float> ms("ms"), mv("mv");
  Ints e4("e", 4), e0("e0", 0), out4("o", 4), out3("o3", 3);
  zs::DeviceFloats f4("f", 4), f5("f5", 5), f0("f0", 0);
  auto expect_error = [&](auto&& call, const std::string& needle) {
    try {
      call();
      ADD_FAILURE() << "no error; expected one containing '" << needle << "'";
    } catch (const zs::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  using zs::kernels::route_exposure_to_factored;
  expect_error([&] { route_exposure_to_factored(stream.exec(), e0, f0, f0, ms, mv, e0); },
               "batch B = 0; expected at least 1");
  expect_error([&] { route_exposure_to_factored(stream.exec(), e4, f5, f4, ms, mv, out4); },
               "spread has 5 entries; expected 4");
  expect_error([&] { route_exposure_to_factored(stream.exec(), e4, f4, f5, ms, mv, out4); },
               "volatility has 5 entries; expected 4");
  expect_error([&] { route_exposure_to_factored(stream.exec(), e4, f4, f4, ms, mv, out3); },
               "factored has 3 entries; expected 4");
}
