// One finite-difference gradient check for every loss of the step (C51, IQN, ensemble, CQL):
// central differences of a double-precision reference loss over every parameter, compared with
// the device's gradient. Elements where a step of h crosses a kink (a ReLU, a Huber corner, a
// flipped argmax) are not judged: there the two one-sided differences disagree.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "batch.hpp"
#include "network_reference.hpp"
#include "param_layout.hpp"

namespace zs::test {

inline std::vector<double> as_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// The reference's view of a host batch.
inline RefBatch ref_batch(const HostBatch& hb) {
  RefBatch rb;
  rb.B = hb.size;
  rb.states = as_double(hb.states);
  rb.next_states = as_double(hb.next_states);
  rb.actions = hb.actions;
  rb.rewards = as_double(hb.rewards);
  rb.dones = as_double(hb.dones);
  rb.weights = as_double(hb.weights);
  return rb;
}

// `loss(p)` is the reference loss at flat parameters p; `grad` the device gradient at p0.
// `own(name)` says which tensors the loss may depend on: the others must get exactly zero.
inline void expect_gradient_matches_finite_differences(
    const ParamLayout& layout, const std::vector<double>& p0, const std::vector<float>& grad,
    const std::function<double(const std::vector<double>&)>& loss,
    const std::function<bool(const std::string&)>& own = [](const std::string&) { return true; },
    double h = 1e-6) {
  std::vector<double> fd(p0.size(), 0.0), jump(p0.size(), 0.0);
  const double centre = loss(p0);
  double max_fd = 0;
  for (const auto& t : layout.tensors()) {
    if (!own(t.name)) continue;
    for (std::size_t i = 0; i < t.size(); ++i) {
      auto p = p0;
      p[t.offset + i] += h;
      const double up = loss(p);
      p[t.offset + i] -= 2 * h;
      const double down = loss(p);
      fd[t.offset + i] = (up - down) / (2 * h);
      jump[t.offset + i] = std::abs((up - centre) / h - (centre - down) / h);
      max_fd = std::max(max_fd, std::abs(fd[t.offset + i]));
    }
  }
  ASSERT_GT(max_fd, 1e-4) << "a vanishing gradient would make this check meaningless";
  const auto tolerance = [&](double f) { return 2e-4 * max_fd + 1e-3 * std::abs(f); };
  // Where the slopes left and right of p0 differ by a fair part of the tolerance, p0 sits on a
  // kink and the central difference is their average, not the gradient: not judged.
  std::vector<char> smooth(p0.size(), 1);
  std::size_t kinks = 0, judged = 0;
  for (const auto& t : layout.tensors()) {
    if (!own(t.name)) continue;
    for (std::size_t i = 0; i < t.size(); ++i) {
      const std::size_t k = t.offset + i;
      smooth[k] = jump[k] <= 0.5 * tolerance(fd[k]);
      (smooth[k] ? judged : kinks) += 1;
    }
  }
  EXPECT_LE(kinks, judged / 50) << "more than 2 % of the elements sit on a kink: too little is judged";
  for (const auto& t : layout.tensors()) {
    const bool mine = own(t.name);
    int nonzero = 0;
    for (std::size_t i = 0; i < t.size(); ++i) {
      const double g = grad[t.offset + i], f = fd[t.offset + i];
      if (!mine) {
        ASSERT_EQ(g, 0.0) << t.name << "[" << i << "]: this loss must not reach this tensor";
        continue;
      }
      if (!smooth[t.offset + i]) continue;
      EXPECT_NEAR(g, f, tolerance(f)) << t.name << "[" << i << "]";
      nonzero += std::abs(f) > 1e-9;
    }
    if (mine) {
      EXPECT_GT(nonzero, 0) << t.name << ": finite differences found no gradient at all";
    }
  }
}

// Tensors of the trunk and of the named auxiliary ("iqn.", "ensemble.").
inline std::function<bool(const std::string&)> trunk_and(const std::string& prefix) {
  return [prefix](const std::string& name) { return name.rfind("trunk.", 0) == 0 || name.rfind(prefix, 0) == 0; };
}

}  // namespace zs::test
