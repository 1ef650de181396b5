// One training batch on the device. s and s′ share one [2B, state_dim] buffer (s in the first B
// rows) so the online network runs on both in a single pass without a copy.
#pragma once
#include <cstdint>
#include <vector>

#include "core/config.hpp"
#include "core/host_batch.hpp"
#include "nn/network.hpp"

namespace zs {

struct DeviceBatch {
  int size = 0;
  DeviceFloats stacked_states;                                          // [2B, state_dim]
  Kokkos::View<int**, Kokkos::LayoutRight, MemSpace> actions;           // [B, branches]
  Kokkos::View<float*, MemSpace> rewards, dones, weights;               // [B]

  DeviceBatch(const Config& c, int batch_size);
  MatrixView states() const { return as_matrix(stacked_states, size, state_dim_); }
  MatrixView next_states() const { return as_matrix(stacked_states, size, state_dim_, size); }
  MatrixView all_states() const { return as_matrix(stacked_states, 2 * size, state_dim_); }

 private:
  int state_dim_ = 0;
};

// A batch of random transitions from `seed`: N(0, 1) states, uniform actions, rewards 2·N(0, 1),
// 20 % terminal, importance weights in [0.5, 1.5). For smoke tests, benchmarks and examples.
HostBatch random_batch(const Config& c, int batch_size, std::uint64_t seed);

// Copies `host` into `dev` on `exec` (blocking: set-up and tools, not the hot loop). Shapes and
// action ranges are checked with errors naming the bad value; NaN/Inf values pass through on
// purpose — catching those is the guard's job, and it skips the update on the device.
void upload(const ExecSpace& exec, const Config& c, const HostBatch& host, DeviceBatch& dev);

}  // namespace zs
