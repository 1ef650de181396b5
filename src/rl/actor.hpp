// Acting on the device: the network's forward pass on a batch of observations (the step's
// batched ForwardPlan, made for the parameters at the first act()), Q from the C51 head, then
// ε-greedy per branch (ε read from device memory, counter-based RNG), into an actions buffer the
// environments read. No host involvement: a graph can record act(). With fused options the
// forward is the fused step's instead (nn/fused_forward.hpp: a launch per layer of tiles, the
// dueling head in the same kernel family), where the config is one it runs. With row blocks the
// forward is one row-block launch (nn/row_block_forward.hpp) and the dueling head, Q and ε-greedy
// one launch of one team (kernels/collect_tail.hpp), into which the training loop also puts the
// environments' step and the replay insert (acting_stages, VecEnv::step_in_tail).
#pragma once
#include <cstdint>

#include <memory>
#include <optional>
#include <string>

#include "backends/gemm.hpp"
#include "kernels/acting.hpp"
#include "kernels/collect_tail.hpp"
#include "nn/fused_forward.hpp"
#include "nn/network.hpp"
#include "nn/network_plan.hpp"
#include "nn/row_block_forward.hpp"

namespace zs {

class Actor {
 public:
  using Actions = Kokkos::View<std::int32_t**, Kokkos::LayoutRight, MemSpace>;
  using QValues = Kokkos::View<float**, Kokkos::LayoutRight, MemSpace>;

  // `rows` observations per call; `rng` keeps this actor's draws apart from other users of the seed.
  // `fused`: the forward as a fused kernel with these options where fused_supports(config) (else
  // the launch plans, and fused_off_reason() says why); nullptr: the launch plans.
  // row_block_rows: 16 or 32 for the row-block forward and the one-team tail where the config is
  // one the fused kernels run (else the forward above, and row_block_off_reason() says why); 0: off.
  Actor(const Config& config, const ParamLayout& layout, Stream& stream, int rows, kernels::ActingRng rng,
        const FusedOptions* fused = nullptr, int row_block_rows = 0);

  // Enqueues: Q(params, obs) and actions ← ε-greedy(Q). obs is [rows, state_dim]. The forward
  // plan is made at the first call (outside any capture) and again only for other buffers.
  void act(const ParamBuffer& params, const ConstMatrixView& obs, Kokkos::View<const float, MemSpace> epsilon);

  // Makes act()'s plan for these buffers if it has none (outside any capture; a network too wide
  // for a row block's scratch turns the row blocks off here). Enqueues nothing.
  void prepare(const ParamBuffer& params, const ConstMatrixView& obs);
  // Enqueues only the forward; with row blocks, acting_stages() then gives the rest of act() as
  // stages of a tail the caller launches (VecEnv::step_in_tail).
  void forward(const ParamBuffer& params, const ConstMatrixView& obs);
  kernels::CollectStages<ExecSpace> acting_stages(Kokkos::View<const float, MemSpace> epsilon) const;

  int rows() const { return rows_; }
  bool fused() const { return fused_.has_value(); }
  const std::string& fused_off_reason() const { return fused_off_reason_; }
  int row_blocks() const { return row_blocks_; }  // rows a block; 0: not on row blocks
  const std::string& row_block_off_reason() const { return row_block_off_reason_; }
  const Actions& actions() const { return actions_; }
  const QValues& q() const { return q_; }  // of the last act(): [rows, total actions]
  // The RNG's call counter: part of a run's state (checkpoints).
  const Kokkos::View<std::uint64_t, MemSpace>& counter() const { return counter_; }

 private:
  Config config_;
  Stream& stream_;
  Gemm gemm_;
  Network net_;
  Activations acts_;
  int rows_;
  kernels::ActingRng rng_;
  QValues q_;
  Actions actions_;
  Kokkos::View<std::uint64_t, MemSpace> counter_;
  std::unique_ptr<ForwardPlan> forward_;
  std::optional<FusedOptions> fused_;  // set when the forward is fused
  std::string fused_off_reason_;
  std::unique_ptr<FusedForward> fused_forward_;
  int row_blocks_ = 0;
  std::string row_block_off_reason_;
  std::unique_ptr<RowBlockForward> row_block_forward_;
  PlanKey planned_for_;
};

}  // namespace zs
