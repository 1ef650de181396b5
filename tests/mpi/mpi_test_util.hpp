// For the tests that run as several ranks (tests/mpi/, under mpiexec): the run's process group,
// a seed every rank shares, and comparisons across ranks.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "backends/process_group.hpp"
#include "test_util.hpp"

namespace zs::test {

// The group mpi_test_main.cpp launched.
ProcessGroup& world();

// Rank 0's fresh_seed(), on every rank (the ranks of one test must draw the same inputs).
inline std::uint64_t shared_seed() {
  const std::uint64_t mine = fresh_seed();
  const auto all = world().all_gather(std::vector<double>{static_cast<double>(mine >> 32),
                                                          static_cast<double>(mine & 0xFFFFFFFFull)},
                                      "sharing the test's seed");
  return (static_cast<std::uint64_t>(all[0][0]) << 32) | static_cast<std::uint64_t>(all[0][1]);
}

// Every rank's copy of `v`, as bytes, in rank order.
template <class T>
std::vector<std::vector<std::uint8_t>> all_copies(const std::vector<T>& v) {
  std::vector<std::uint8_t> b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return world().all_gather(b, "comparing the ranks' copies");
}

// Normwise closeness: max |a − b| <= rtol · max |a|.
inline ::testing::AssertionResult close(const std::vector<float>& a, const std::vector<float>& b, double rtol) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << a.size() << " vs " << b.size() << " values";
  double scale = 0, worst = 0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    scale = std::max(scale, std::fabs(double(a[i])));
    const double d = std::fabs(double(a[i]) - double(b[i]));
    if (!(d <= worst)) {
      worst = d;
      at = i;
    }
  }
  if (worst <= rtol * scale) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "max |a - b| = " << worst << " at " << at << " (" << a[at] << " vs " << b[at]
                                       << ") exceeds " << rtol << " x max |a| = " << rtol * scale;
}

}  // namespace zs::test
