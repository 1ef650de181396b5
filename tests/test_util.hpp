// Shared helpers for the tests: fresh random inputs (a new seed per run, printed on failure)
// and host <-> device copies.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "core/error.hpp"

namespace zs::test {

// A new seed every run, so tests never settle on one lucky input; SCOPED_TRACE it.
inline std::uint64_t fresh_seed() { return std::random_device{}() * 0x9E3779B97F4A7C15ull + 1; }

// A temporary file path unique to the running test: ctest runs tests in parallel, and two
// tests writing one file name race.
inline std::string temp_path(const std::string& name) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return ::testing::TempDir() + "zs_" + info->test_suite_name() + "_" + info->name() + "_" + name;
}

// The message of the zs::Error that `f` throws, or "" when it throws none.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const zs::Error& e) {
    return e.what();
  }
  return "";
}

// Bit-for-bit equality of two contiguous containers (NaN payloads and signed zeros included).
template <class V>
bool same_bits(const V& a, const V& b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(typename V::value_type)) == 0;
}

inline std::vector<float> random_normal(std::size_t n, std::uint64_t seed, float scale = 1.f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

inline DeviceFloats to_device(const std::vector<float>& v, const std::string& label = "zs::test") {
  DeviceFloats d(label, v.size());
  auto h = Kokkos::create_mirror_view(d);
  for (std::size_t i = 0; i < v.size(); ++i) h(i) = v[i];
  Kokkos::deep_copy(d, h);
  return d;
}

// Copies a host vector into an existing device view of the same size.
template <class T, class View>
void upload(const std::vector<T>& v, const View& d) {
  ASSERT_EQ(v.size(), d.size());
  auto h = Kokkos::create_mirror_view(d);
  std::copy(v.begin(), v.end(), h.data());
  Kokkos::deep_copy(d, h);
}

// The references of the clipping kernels, naive and in double: ‖g‖₂, and
// torch.nn.utils.clip_grad_norm_'s coefficient (0 for a NaN/Inf norm: it adds nothing).
inline double reference_norm(const std::vector<float>& g) {
  double s = 0.0;
  for (float x : g) s += double(x) * double(x);
  return std::sqrt(s);
}

inline double reference_clip(double norm, double limit) {
  if (!std::isfinite(norm)) return 0.0;
  return std::min(1.0, limit / (norm + 1e-6));
}

template <class View>
std::vector<typename View::non_const_value_type> to_host(const View& d) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), d);
  return std::vector<typename View::non_const_value_type>(h.data(), h.data() + h.size());
}

}  // namespace zs::test
