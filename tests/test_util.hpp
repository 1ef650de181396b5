// Shared helpers for the tests: fresh random inputs (a new seed per run, printed on failure,
// replayed with ZS_TEST_SEED) and host <-> device copies.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "core/error.hpp"

namespace zs::test {

// The seeds a test draws with fresh_seed(): one base per test, new every run unless the
// environment variable ZS_TEST_SEED gives it, and the i-th draw derived from it. A failing test
// prints its base (tests/test_main.cpp), and ZS_TEST_SEED=<base> replays every draw it made.
struct SeedLog {
  std::uint64_t base = 0;
  bool from_environment = false;
  std::vector<std::uint64_t> drawn;
};

inline SeedLog& seed_log() {
  static SeedLog log;
  return log;
}

// ZS_TEST_SEED as a number, or nothing when unset; throws std::invalid_argument naming the value
// when it is set to anything but a decimal integer below 2^64.
inline std::optional<std::uint64_t> seed_from_environment() {
  const char* v = std::getenv("ZS_TEST_SEED");
  if (!v) return std::nullopt;
  const std::string s(v);
  errno = 0;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(s.c_str(), &end, 10);
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos || errno == ERANGE || *end != '\0')
    throw std::invalid_argument("ZS_TEST_SEED = '" + s + "'; expected a decimal integer in [0, 2^64)");
  return static_cast<std::uint64_t>(n);
}

// Called by the listener in test_main.cpp as each test starts.
inline void start_seed_log() {
  SeedLog& log = seed_log();
  const auto env = seed_from_environment();
  log.from_environment = env.has_value();
  log.base = env ? *env : (std::uint64_t(std::random_device{}()) << 32 | std::random_device{}());
  log.drawn.clear();
}

// splitmix64's finaliser: neighbouring counters give unrelated seeds.
inline std::uint64_t mix_seed(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A new seed every run, so tests never settle on one lucky input; SCOPED_TRACE it. The first
// draw of a test is its base itself, so a test that draws once replays with the seed it printed.
inline std::uint64_t fresh_seed() {
  SeedLog& log = seed_log();
  const std::uint64_t i = log.drawn.size();
  const std::uint64_t seed = i == 0 ? log.base : mix_seed(log.base + i);
  log.drawn.push_back(seed);
  return seed;
}

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
