#include "nn/batch.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <random>

namespace zs {

DeviceBatch::DeviceBatch(const Config& c, int B)
    : size(B),
      stacked_states("zs::batch::states", std::size_t(2) * (B > 0 ? B : 0) * c.state_dim),
      actions("zs::batch::actions", B > 0 ? B : 0, c.branches.size()),
      rewards("zs::batch::rewards", B > 0 ? B : 0),
      dones("zs::batch::dones", B > 0 ? B : 0),
      weights("zs::batch::weights", B > 0 ? B : 0),
      state_dim_(c.state_dim) {
  require(B >= 1, "DeviceBatch: batch size ", B, "; expected at least 1");
}

HostBatch random_batch(const Config& c, int B, std::uint64_t seed) {
  require(B >= 1, "random_batch: batch size ", B, "; expected at least 1");
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_real_distribution<float> uniform(0.f, 1.f);
  HostBatch b;
  b.size = B;
  for (int i = 0; i < B * c.state_dim; ++i) b.states.push_back(normal(rng)), b.next_states.push_back(normal(rng));
  for (int i = 0; i < B; ++i) {
    for (int n : c.branches) b.actions.push_back(static_cast<int>(rng() % static_cast<unsigned>(n)));
    b.rewards.push_back(2.f * normal(rng));
    b.dones.push_back(uniform(rng) < 0.2f ? 1.f : 0.f);
    b.weights.push_back(0.5f + uniform(rng));
  }
  return b;
}

void upload(const ExecSpace& exec, const Config& c, const HostBatch& h, DeviceBatch& dev) {
  const std::size_t B = static_cast<std::size_t>(h.size), S = c.state_dim, K = c.branches.size();
  require(h.size == dev.size, "batch: ", h.size, " samples; this trainer was built for batch size ", dev.size);
  require(h.states.size() == B * S, "batch: states hold ", h.states.size(), " values; expected [", B, ", ", S, "]");
  require(h.next_states.size() == B * S, "batch: next_states hold ", h.next_states.size(), " values; expected [", B,
          ", ", S, "]");
  require(h.actions.size() == B * K, "batch: actions hold ", h.actions.size(), " values; expected [", B, ", ", K, "]");
  require(h.rewards.size() == B && h.dones.size() == B && h.weights.size() == B, "batch: rewards/dones/weights hold ",
          h.rewards.size(), "/", h.dones.size(), "/", h.weights.size(), " values; expected ", B, " each");
  for (std::size_t i = 0; i < B; ++i)
    for (std::size_t k = 0; k < K; ++k) {
      const int a = h.actions[i * K + k];
      require(a >= 0 && a < c.branches[k], "batch: actions[", i, ", ", k, "] = ", a, "; expected 0..",
              c.branches[k] - 1, " (branch ", k, " has ", c.branches[k], " actions)");
    }
  auto stacked = Kokkos::create_mirror_view(dev.stacked_states);
  std::copy(h.states.begin(), h.states.end(), stacked.data());
  std::copy(h.next_states.begin(), h.next_states.end(), stacked.data() + B * S);
  auto actions = Kokkos::create_mirror_view(dev.actions);
  std::copy(h.actions.begin(), h.actions.end(), actions.data());
  auto copy1 = [&](const Kokkos::View<float*, MemSpace>& d, const std::vector<float>& v) {
    auto m = Kokkos::create_mirror_view(d);
    std::copy(v.begin(), v.end(), m.data());
    Kokkos::deep_copy(exec, d, m);
  };
  Kokkos::deep_copy(exec, dev.stacked_states, stacked);
  Kokkos::deep_copy(exec, dev.actions, actions);
  copy1(dev.rewards, h.rewards);
  copy1(dev.dones, h.dones);
  copy1(dev.weights, h.weights);
  exec.fence();  // the host mirrors die here
}

}  // namespace zs
