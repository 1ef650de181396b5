// The finite-difference check itself (fd_check.hpp) on a loss whose gradient is known exactly,
// in both of its modes: element by element, and per tensor (the TF32 mode of the fused step's
// check). Each must pass the exact gradient and fail one with a tensor's sign flipped or zeroed.
#include <gtest/gtest.h>
#include <gtest/gtest-spi.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "fd_check.hpp"
#include "test_util.hpp"

namespace {

// loss(p) = Σ w_i p_i² / 2 + Σ p_i: gradient w_i p_i + 1, smooth everywhere.
struct Quadratic {
  std::vector<double> w;
  double operator()(const std::vector<double>& p) const {
    double s = 0;
    for (std::size_t i = 0; i < p.size(); ++i) s += 0.5 * w[i] * p[i] * p[i] + p[i];
    return s;
  }
};

zs::Config tiny_net() {
  zs::Config c;
  c.state_dim = 3, c.trunk = {4}, c.head_hidden = 3, c.branches = {2}, c.atoms = 3;
  return c;
}

struct Problem {
  zs::ParamLayout layout{tiny_net()};
  std::vector<double> p0;
  Quadratic loss;
  std::vector<float> exact;
  explicit Problem(std::uint64_t seed) {
    const auto r = zs::test::random_normal(layout.size(), seed);
    const auto w = zs::test::random_normal(layout.size(), seed + 1);
    p0.assign(r.begin(), r.end());
    loss.w.assign(w.begin(), w.end());
    exact.resize(layout.size());
    for (std::size_t i = 0; i < exact.size(); ++i) exact[i] = static_cast<float>(loss.w[i] * p0[i] + 1.0);
  }
  // The gradient with tensor `name`'s elements multiplied by `factor`.
  std::vector<float> with(const std::string& name, float factor) const {
    auto g = exact;
    for (const auto& t : layout.tensors())
      if (t.name == name)
        for (std::size_t i = 0; i < t.size(); ++i) g[t.offset + i] *= factor;
    return g;
  }
};

void check(const Problem& s, const std::vector<float>& g, double tensor_rel) {
  zs::test::expect_gradient_matches_finite_differences(
      s.layout, s.p0, g, [&](const std::vector<double>& p) { return s.loss(p); },
      [](const std::string&) { return true; }, 1e-6, 1, tensor_rel);
}

// The failures `check` reports, intercepted: how many, and whether every one names `tensor`.
struct Caught {
  int failures = 0;
  bool all_name_it = true;
};
Caught caught(const Problem& s, const std::vector<float>& g, double tensor_rel, const std::string& tensor) {
  ::testing::TestPartResultArray results;
  {
    ::testing::ScopedFakeTestPartResultReporter reporter(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &results);
    check(s, g, tensor_rel);
  }
  Caught c;
  for (int i = 0; i < results.size(); ++i) {
    ++c.failures;
    c.all_name_it = c.all_name_it && std::string(results.GetTestPartResult(i).message()).find(tensor) != std::string::npos;
  }
  return c;
}

}  // namespace

TEST(FdCheck, BothModesPassTheExactGradientAndFailAWrongTensor) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const Problem s(seed);
  for (const double tensor_rel : {0.0, 0.3}) {
    SCOPED_TRACE(testing::Message() << "tensor_rel " << tensor_rel);
    check(s, s.exact, tensor_rel);
    // 20 % off on one tensor: inside the per-tensor bound of 30 %, far outside the element-wise one.
    const Caught near = caught(s, s.with("trunk.0.bias", 1.2f), tensor_rel, "trunk.0.bias");
    if (tensor_rel > 0) {
      EXPECT_EQ(near.failures, 0);
    } else {
      EXPECT_GT(near.failures, 0);
      EXPECT_TRUE(near.all_name_it);
    }
    for (const auto& [name, factor] : {std::pair<const char*, float>{"value.0.weight", -1.f}, {"trunk.0.weight", 0.f}}) {
      SCOPED_TRACE(testing::Message() << name << " × " << factor);
      const Caught wrong = caught(s, s.with(name, factor), tensor_rel, name);
      EXPECT_GT(wrong.failures, 0);
      EXPECT_TRUE(wrong.all_name_it);
    }
  }
}
