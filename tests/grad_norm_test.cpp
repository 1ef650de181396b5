#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <limits>
#include <string>
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
