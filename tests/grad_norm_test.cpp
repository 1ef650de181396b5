#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <gtest/gtest.h>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "backends/stream.hpp"
#include "core/error.hpp"
#include "kernels/grad_norm.hpp"
#include "core/param_layout.hpp"
#include "test_util.hpp"

namespace {

using zs::test::reference_norm;

double device_norm(const std::vector<float>& g) {
  zs::Stream stream;
  auto d = zs::test::to_device(g);
  zs::DeviceScalar<double> norm("norm");
  Kokkos::deep_copy(norm, -1.0);  // poison: a norm is never negative
  zs::kernels::global_grad_norm(stream.exec(), zs::ConstDeviceFloats(d), norm,
                                zs::kernels::make_grad_norms_scratch(stream.exec()));
  stream.synchronize();
  double h = 0;
  Kokkos::deep_copy(h, norm);
  return h;
}

}  // namespace

TEST(GradNorm, MatchesDoubleReferenceOnAwkwardSizes) {
  const std::size_t reference_size = zs::ParamLayout(zs::Config{}).size();
  for (std::size_t n : {std::size_t{1}, std::size_t{2}, std::size_t{31}, std::size_t{32},
                        std::size_t{33}, std::size_t{257}, std::size_t{1031}, std::size_t{65537},
                        reference_size, std::size_t{3000017}}) {
    const auto seed = zs::test::fresh_seed();
    SCOPED_TRACE(testing::Message() << "n = " << n << ", seed = " << seed);
    for (float scale : {1e-6f, 1.f, 1e3f}) {
      const auto g = zs::test::random_normal(n, seed, scale);
      const double ref = reference_norm(g);
      ASSERT_GT(ref, 0.0);
      EXPECT_NEAR(device_norm(g), ref, 1e-10 * ref) << "scale " << scale;
    }
  }
}

TEST(GradNorm, NaNAndInfPropagateSoTheGuardSeesThem) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed = " << seed);
  auto g = zs::test::random_normal(4099, seed);
  const std::size_t where = seed % g.size();
  auto bad = g;
  bad[where] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(device_norm(bad)));
  bad[where] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(std::isinf(device_norm(bad)));
  bad[where] = -std::numeric_limits<float>::infinity();
  EXPECT_EQ(device_norm(bad), std::numeric_limits<double>::infinity());
  // Float overflow of x*x must not happen: 3e38 squared is finite in double.
  bad[where] = 3e38f;
  EXPECT_NEAR(device_norm(bad), reference_norm(bad), 1e-10 * reference_norm(bad));
}

TEST(GradNorm, AllZeroIsZero) {
  EXPECT_EQ(device_norm(std::vector<float>(1000, 0.f)), 0.0);
}

TEST(GradNorm, EmptyBufferIsAClearError) {
  zs::Stream stream;
  zs::DeviceFloats empty("empty", 0);
  zs::DeviceScalar<double> norm("norm");
  try {
    zs::kernels::global_grad_norm(stream.exec(), zs::ConstDeviceFloats(empty), norm,
                                  zs::kernels::make_grad_norms_scratch(stream.exec()));
    FAIL() << "no error for an empty buffer";
  } catch (const zs::Error& e) {
    EXPECT_NE(std::string(e.what()).find("empty"), std::string::npos) << e.what();
  }
}

TEST(GradNorm, ChunksFollowTheLengthUpToTheScratchsLimit) {
  zs::Stream stream;
  const auto& exec = stream.exec();
  constexpr bool host = Kokkos::SpaceAccessibility<Kokkos::HostSpace, zs::MemSpace>::accessible;
  const int per_team = zs::kernels::kNormTeamSize * zs::kernels::kNormElementsPerThread;
  for (const std::int64_t n : {std::int64_t{1}, std::int64_t{per_team}, std::int64_t{per_team + 1}, std::int64_t{3000017}}) {
    const int got = zs::kernels::grad_norm_chunks(exec, n, 64);
    const std::int64_t want = host ? std::min(64, exec.concurrency()) : std::min<std::int64_t>(64, (n + per_team - 1) / per_team);
    EXPECT_EQ(got, std::max<std::int64_t>(1, want)) << "n = " << n;
  }
  // A scratch of at most 3 chunks: long buffers are cut into 3 on a device (into as many as the
  // host has threads, up to 3, here), and the norms of several buffers in one launch still match
  // the reference.
  zs::kernels::GradNormsScratch<zs::ExecSpace> scratch;
  scratch.chunks = 3;
  scratch.partials = Kokkos::View<double*, zs::MemSpace>("partials", zs::kernels::kMaxTerms * 3);
  scratch.done = Kokkos::View<int*, zs::MemSpace>("done", zs::kernels::kMaxTerms + 1);
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(seed);
  const auto a = zs::test::random_normal(100003, seed), b = zs::test::random_normal(100003, seed + 1, 1e3f);
  auto da = zs::test::to_device(a), db = zs::test::to_device(b);
  zs::DeviceScalar<double> na("na"), nb("nb");
  zs::kernels::grad_norms(exec, {zs::ConstDeviceFloats(da), zs::ConstDeviceFloats(db)}, {na, nb}, scratch);
  stream.synchronize();
  double ha = 0, hb = 0;
  Kokkos::deep_copy(ha, na);
  Kokkos::deep_copy(hb, nb);
  EXPECT_NEAR(ha, reference_norm(a), 1e-10 * reference_norm(a));
  EXPECT_NEAR(hb, reference_norm(b), 1e-10 * reference_norm(b));
}

namespace {

// Copies both norms where the host can see them, and counts its runs.
struct SeeNorms {
  Kokkos::View<const double, zs::MemSpace> a, b;
  Kokkos::View<double*, zs::MemSpace> seen;  // [a, b, runs]
  KOKKOS_INLINE_FUNCTION void operator()(const int) const {
    seen(0) = a();
    seen(1) = b();
    seen(2) += 1.0;
  }
};

}  // namespace

// The tail (the step's guard check and Adam prepare ride there) runs once per launch, after
// every norm of the launch is written, and leaves its counter so that the next launch — a graph
// replay — runs it again. Lengths of one chunk and of many, fresh data each launch.
TEST(GradNorm, TheTailRunsOnceAfterEveryNormOfItsLaunch) {
  zs::Stream stream;
  const auto& exec = stream.exec();
  const auto scratch = zs::kernels::make_grad_norms_scratch(exec);
  zs::DeviceScalar<double> na("na"), nb("nb");
  Kokkos::View<double*, zs::MemSpace> seen("seen", 3);
  for (std::size_t n : {std::size_t{257}, std::size_t{3000017}}) {
    Kokkos::deep_copy(seen, 0.0);
    for (int launch = 1; launch <= 3; ++launch) {
      const auto seed = zs::test::fresh_seed();
      SCOPED_TRACE(testing::Message() << "n = " << n << ", launch " << launch << ", seed = " << seed);
      const auto a = zs::test::random_normal(n, seed), b = zs::test::random_normal(n, seed + 1, 1e3f);
      auto da = zs::test::to_device(a), db = zs::test::to_device(b);
      Kokkos::deep_copy(na, -1.0);
      Kokkos::deep_copy(nb, -1.0);
      zs::kernels::grad_norms(exec, {zs::ConstDeviceFloats(da), zs::ConstDeviceFloats(db)}, {na, nb}, scratch,
                              SeeNorms{na, nb, seen});
      stream.synchronize();
      std::vector<double> h(3);
      Kokkos::deep_copy(Kokkos::View<double*, Kokkos::HostSpace>(h.data(), 3), seen);
      EXPECT_NEAR(h[0], reference_norm(a), 1e-10 * reference_norm(a));
      EXPECT_NEAR(h[1], reference_norm(b), 1e-10 * reference_norm(b));
      EXPECT_EQ(h[2], double(launch));
    }
    // One buffer: the same.
    const auto seed = zs::test::fresh_seed();
    SCOPED_TRACE(testing::Message() << "n = " << n << ", one buffer, seed = " << seed);
    const auto a = zs::test::random_normal(n, seed);
    auto da = zs::test::to_device(a);
    Kokkos::deep_copy(nb, 7.0);
    zs::kernels::grad_norms(exec, {zs::ConstDeviceFloats(da)}, {na}, scratch, SeeNorms{na, nb, seen});
    stream.synchronize();
    std::vector<double> h(3);
    Kokkos::deep_copy(Kokkos::View<double*, Kokkos::HostSpace>(h.data(), 3), seen);
    EXPECT_NEAR(h[0], reference_norm(a), 1e-10 * reference_norm(a));
    EXPECT_EQ(h[1], 7.0);
    EXPECT_EQ(h[2], 4.0);
  }
}

// Norms over pieces of buffers (a loss term's gradient where it can be nonzero), the buffers of
// different lengths and the second piece present or not, in one launch cut into few chunks (the
// longest buffer's chunks cut the others): each the norm of its pieces' floats, in double.
TEST(GradNorm, NormsOverPiecesOfBuffersOfDifferentLengths) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(seed);
  zs::Stream stream;
  const auto& exec = stream.exec();
  zs::kernels::GradNormsScratch<zs::ExecSpace> scratch;
  scratch.chunks = 5;
  scratch.partials = Kokkos::View<double*, zs::MemSpace>("partials", zs::kernels::kMaxTerms * 5);
  scratch.done = Kokkos::View<int*, zs::MemSpace>("done", zs::kernels::kMaxTerms + 1);
  const auto whole = zs::test::random_normal(50021, seed);
  auto d = zs::test::to_device(whole);
  const zs::ConstDeviceFloats all(d);
  struct Span {
    std::size_t b0, e0, b1, e1;  // e1 == b1: no second piece
  };
  const std::vector<Span> spans{{0, 50021, 0, 0}, {0, 7, 30000, 30013}, {17, 4113, 4113, 50021}, {100, 101, 0, 0}};
  std::vector<zs::kernels::NormPieces<zs::ExecSpace>> pieces;
  std::vector<zs::DeviceScalar<double>> out;
  for (const Span& s : spans) {
    zs::kernels::NormPieces<zs::ExecSpace> p;
    p.first = Kokkos::subview(all, std::make_pair(s.b0, s.e0));
    if (s.e1 > s.b1) p.second = Kokkos::subview(all, std::make_pair(s.b1, s.e1));
    pieces.push_back(p);
    out.emplace_back("norm");
    Kokkos::deep_copy(out.back(), -1.0);
  }
  zs::kernels::grad_norms(exec, pieces, out, scratch);
  stream.synchronize();
  for (std::size_t i = 0; i < spans.size(); ++i) {
    std::vector<float> part(whole.begin() + spans[i].b0, whole.begin() + spans[i].e0);
    part.insert(part.end(), whole.begin() + spans[i].b1, whole.begin() + spans[i].e1);
    double h = 0;
    Kokkos::deep_copy(h, out[i]);
    EXPECT_NEAR(h, reference_norm(part), 1e-10 * reference_norm(part)) << "buffer " << i;
  }
  // A buffer of no floats at all is an error that says so.
  pieces.push_back({});
  out.emplace_back("norm");
  EXPECT_NE(zs::test::error_of([&] { zs::kernels::grad_norms(exec, pieces, out, scratch); }).find("holds 0 floats"),
            std::string::npos);
}
