// One finite-difference gradient check for every loss of the step (C51, IQN, ensemble, CQL):
// central differences of a double-precision reference loss over every parameter, compared with
// the device's gradient. Elements where a step of h crosses a kink (a ReLU, a Huber corner, a
// flipped argmax) are not judged: there the two one-sided differences disagree.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nn/batch.hpp"
#include "network_reference.hpp"
#include "core/param_layout.hpp"
#include "test_util.hpp"
#include "train/trainer.hpp"

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

// A trainer and batch for a gradient check of a tiny test net, drawn from fresh seeds until
// the double reference shows every ReLU layer alive for some row (a layer dead for the whole
// batch has no gradient for finite differences to find: about one draw in several hundred) and
// no double-DQN a* within 1e-5 of a tie (the float step may pick the other, equally valid
// action, which changes C51's targets). At most 20 draws; `seed` is the one used. `also_live`,
// where given, vets each draw for a loss's own ReLU layers beyond the main net's (IQN's).
struct CheckDraw {
  std::uint64_t seed = 0, first = 0;
  Config config;
  std::unique_ptr<Trainer> trainer;
  HostBatch batch;
  std::vector<double> p0, t0;  // online and target parameters before the step
};

inline CheckDraw draw_for_gradient_check(const std::function<Config(std::uint64_t)>& make_config, int B,
                                         TrainerOptions opt = {},
                                         const std::function<bool(const CheckDraw&)>& also_live = {}) {
  CheckDraw d;
  d.first = d.seed = fresh_seed();
  opt.batch_size = B;
  for (int attempt = 0; attempt < 20; ++attempt, ++d.seed) {
    d.trainer.reset();
    d.config = make_config(d.seed);
    d.trainer = std::make_unique<Trainer>(d.config, opt);
    d.batch = random_batch(d.config, B, d.seed + 1);
    d.p0 = as_double(to_host(d.trainer->online().flat()));
    d.t0 = as_double(to_host(d.trainer->target().flat()));
    const RefNet ref(d.config, d.trainer->layout());
    const RefBatch rb = ref_batch(d.batch);
    const auto margin = ref.loss(d.p0, d.t0, rb).margin;
    if (ref.least_live_layer(d.p0, rb.states, B) > 1e-4 && *std::min_element(margin.begin(), margin.end()) > 1e-5 &&
        (!also_live || also_live(d))) {
      upload(d.trainer->stream().exec(), d.config, d.batch, d.trainer->batch());
      return d;
    }
  }
  ADD_FAILURE() << "the 20 draws from seed " << d.first << " all had a dead layer or a near-tied a*";
  d.trainer.reset();
  return d;
}

// `loss(p)` is the reference loss at flat parameters p; `grad` the device gradient at p0.
// `own(name)` says which tensors the loss may depend on: the others must get exactly zero.
// `loose` widens the tolerance for a gradient computed from TF32-rounded products (10× FP32's).
// `tensor_rel` > 0 judges each tensor as a whole instead: ‖g − fd‖ / ‖fd‖ over its smooth
// elements at most tensor_rel. For a step whose forward runs in TF32, where single small
// elements of the hidden layers' gradients move by more than any element-wise bound that still
// means something (docs/gpu.md: 5–14 % per tensor against PyTorch's FP32).
inline void expect_gradient_matches_finite_differences(
    const ParamLayout& layout, const std::vector<double>& p0, const std::vector<float>& grad,
    const std::function<double(const std::vector<double>&)>& loss,
    const std::function<bool(const std::string&)>& own = [](const std::string&) { return true; },
    double h = 1e-6, double loose = 1, double tensor_rel = 0) {
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
  const auto tolerance = [&](double f) { return loose * (2e-4 * max_fd + 1e-3 * std::abs(f)); };
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
    double err2 = 0, ref2 = 0;
    for (std::size_t i = 0; i < t.size(); ++i) {
      const double g = grad[t.offset + i], f = fd[t.offset + i];
      if (!mine) {
        ASSERT_EQ(g, 0.0) << t.name << "[" << i << "]: this loss must not reach this tensor";
        continue;
      }
      if (!smooth[t.offset + i]) continue;
      if (tensor_rel > 0) {
        err2 += (g - f) * (g - f);
        ref2 += f * f;
      } else {
        EXPECT_NEAR(g, f, tolerance(f)) << t.name << "[" << i << "]";
      }
      nonzero += std::abs(f) > 1e-9;
    }
    if (mine) {
      EXPECT_GT(nonzero, 0) << t.name << ": finite differences found no gradient at all";
      if (tensor_rel > 0 && ref2 > 0) {
        EXPECT_LE(std::sqrt(err2 / ref2), tensor_rel) << t.name << ": relative error against finite differences";
      }
    }
  }
}

// Tensors of the trunk and of the named auxiliary ("iqn.", "ensemble.").
inline std::function<bool(const std::string&)> trunk_and(const std::string& prefix) {
  return [prefix](const std::string& name) { return name.rfind("trunk.", 0) == 0 || name.rfind(prefix, 0) == 0; };
}

}  // namespace zs::test
