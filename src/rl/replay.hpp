// The replay buffer on the device: a ring of transitions from N vectorised envs, n-step returns,
// uniform or proportional prioritised sampling through a device sum-tree. insert / sample /
// update_priorities only enqueue kernels (per-step values live in device memory), so the calls
// can be recorded once into a zs::Graph and replayed. Semantics: docs/replay.md.
#pragma once
#include <cstdint>
#include <string>

#include "backends/backend.hpp"
#include "nn/batch.hpp"
#include "kernels/replay_kernels.hpp"
#include "core/safetensors.hpp"

namespace zs {

struct ReplayConfig {
  int capacity = 100000;  // transitions; rounded down to a multiple of n_envs (rows T = capacity / n_envs)
  int n_step = 3;
  float gamma = 0.99f;
  bool prioritized = true;
  float alpha = 0.6f;
  float priority_eps = 1e-6f;
  std::uint64_t seed = 0x5EEDull;  // sampling RNG; a saved state carries its own
  void validate() const;           // zs::Error naming the bad field
};

class Replay {
 public:
  Replay(const ReplayConfig& rc, int n_envs, int obs_dim, int n_branches);

  // Enqueue: append one step of all N envs (row t mod T; entry (row, env)). obs [N,S] the state
  // acted on, actions [N,K], reward [N], next_obs [N,S] (before any auto-reset), terminated [N]
  // (no bootstrap), truncated [N] (time limit, bootstrap allowed); a flag is set when ≥ 0.5.
  void insert(const ExecSpace& exec, Kokkos::View<const float**, Kokkos::LayoutRight, MemSpace> obs,
              Kokkos::View<const std::int32_t**, Kokkos::LayoutRight, MemSpace> actions,
              Kokkos::View<const float*, MemSpace> reward,
              Kokkos::View<const float**, Kokkos::LayoutRight, MemSpace> next_obs,
              Kokkos::View<const float*, MemSpace> terminated, Kokkos::View<const float*, MemSpace> truncated);
  // insert()'s kernels as a stage of another launch (kernels/collect_tail.hpp): the same checks,
  // nothing enqueued.
  kernels::ReplayInsertData<ExecSpace> insert_stage(
      Kokkos::View<const float**, Kokkos::LayoutRight, MemSpace> obs,
      Kokkos::View<const std::int32_t**, Kokkos::LayoutRight, MemSpace> actions,
      Kokkos::View<const float*, MemSpace> reward, Kokkos::View<const float**, Kokkos::LayoutRight, MemSpace> next_obs,
      Kokkos::View<const float*, MemSpace> terminated, Kokkos::View<const float*, MemSpace> truncated) const;

  // Enqueue: draw batch.size entries (stratified proportional) and write the batch; weights
  // (M·P(i))^−β / max over the batch, β read from the device. The first call with a batch size
  // allocates the index buffers: run it once before graph capture (the usual warm-up).
  void sample(const ExecSpace& exec, DeviceBatch& batch, Kokkos::View<const float, MemSpace> beta);
  // sample()'s kernels as a stage of another launch (kernels/loop_head.hpp): the same checks and
  // the same first-call allocation, nothing enqueued.
  kernels::ReplaySample<ExecSpace> sample_stage(DeviceBatch& batch, Kokkos::View<const float, MemSpace> beta);

  // Enqueue: for the last sample's entries, priority ← (|p| + priority_eps)^α (no-op when uniform).
  void update_priorities(const ExecSpace& exec, Kokkos::View<const float*, MemSpace> priorities);
  // The same with α read from device memory at every update (an α schedule). Leaves written
  // earlier keep the α they were written with until their entry is drawn and updated again.
  void update_priorities(const ExecSpace& exec, Kokkos::View<const float*, MemSpace> priorities,
                         Kokkos::View<const float, MemSpace> alpha);

  Kokkos::View<std::int64_t, MemSpace> sampleable() const { return st_.count; }
  int capacity() const { return rows_ * n_envs_; }
  int rows() const { return rows_; }
  int n_envs() const { return n_envs_; }

  void save_state(safetensors::File& f, const std::string& prefix) const;  // blocking
  void load_state(const safetensors::File& f, const std::string& prefix);  // zs::Error on mismatch

  // Inspection (tests, tools): the tree (leaf j at tree_leaves() + j), the running max priority,
  // the inserts so far and the last sample's entries (−1: nothing was sampleable).
  Kokkos::View<const double*, MemSpace> sum_tree() const { return st_.tree; }
  std::int64_t tree_leaves() const { return st_.tree_shape.leaf0(); }  // sum_tree()'s index of leaf 0
  Kokkos::View<const double, MemSpace> max_priority() const { return st_.max_priority; }
  Kokkos::View<const std::int64_t, MemSpace> steps() const { return st_.steps; }
  Kokkos::View<const std::int64_t*, MemSpace> sampled_indices() const { return sampled_.idx; }
  const ReplayConfig& config() const { return rc_; }

 private:
  ReplayConfig rc_;
  int n_envs_ = 1, obs_dim_ = 1, branches_ = 1, rows_ = 1;
  kernels::ReplayStore<ExecSpace> st_;
  kernels::ReplaySampled<ExecSpace> sampled_;
};

}  // namespace zs
