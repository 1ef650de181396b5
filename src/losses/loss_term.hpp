// One loss of the training step behind one interface. C51 and every auxiliary (IQN, the
// ensemble, CQL) are loss terms: each owns its launch plans, its gradient over the whole
// parameter layout, its share of max_grad_norm and what it reports. The trainer only loops over
// its terms: their gradient norms come from one launch, each gradient is clipped to its share and
// the clipped gradients are summed in one pass, and the metrics record lists every term.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backends/gemm.hpp"
#include "backends/side_lane.hpp"
#include "core/config.hpp"
#include "core/safetensors.hpp"
#include "losses/term_buffers.hpp"
#include "nn/batch.hpp"
#include "nn/fused_kernel.hpp"
#include "nn/network.hpp"
#include "nn/network_plan.hpp"
#include "nn/param_buffer.hpp"

namespace zs {

// What the main loss leaves for the replay buffer and for the terms after it.
struct C51Outputs {
  DeviceScalar<float> loss;                                              // weighted mean loss
  Kokkos::View<float*, MemSpace> priorities;                             // [B] per-sample loss L_i
  Kokkos::View<float***, Kokkos::LayoutRight, MemSpace> projected;       // [B, K, atoms] target m
  Kokkos::View<int**, Kokkos::LayoutRight, MemSpace> best;               // [B, K] double-DQN a*
  // `loss`: where the loss goes (the C51 term's slot of the step's TermBuffers); allocated when empty.
  C51Outputs(const Config& c, int batch_size, DeviceScalar<float> loss = {});
};

// Everything a term reads, made once by the trainer before its terms. Every buffer named here
// outlives the terms and never moves, so a term makes its launch plans once, at construction.
struct StepContext {
  const Config& config;
  const ParamLayout& layout;
  const Network& net;
  const ParamBuffer& online;
  const ParamBuffer& target;
  const DeviceBatch& batch;
  const Activations& online_acts;  // the online net on s, then s′ (2B rows)
  const Activations& target_acts;  // the target net on s′ (B rows)
  C51Outputs& c51;                 // written by the C51 term, which runs first; read by the others
  TermBuffers& buffers;            // every term's gradient and loss, in one buffer (one all-reduce)
  // This rank's first sample in the run's global batch (rank × B; 0 alone): a term that draws
  // per sample draws for its global index, so N ranks of B draw what one process of N·B would.
  std::int64_t first_sample = 0;
  // The step's side lane (nullptr: none): a term enqueues its launch plans with it, so that
  // their weight gradients run beside the input gradients. Joined before a plan returns.
  const SideLane* side = nullptr;
  // The fused step's options when the C51 term runs the forward, its loss and its backward as
  // one fused kernel (it then writes online_acts and target_acts, which the trainer made for
  // that forward); nullptr: the trainer's ForwardPlan and the term's launch plans.
  const FusedOptions* fused = nullptr;
  // The C51 loss's projection from the source atoms near each target atom only
  // (TrainerOptions::narrow_gather).
  bool narrow_gather = false;
  // The backward plans' heads as one stacked layer (TrainerOptions::stacked_heads).
  bool stacked_heads = false;
  // The online net's main hidden weights as the trainer's forward plan stacks them each step
  // (ForwardPlan::stacked_hidden_weights; nullptr: not stacked there, or stacked_heads off): a
  // stacked backward of the main heads reads them (BackwardShape::stacked_weights) instead of
  // stacking its own.
  const float* stacked_hidden_weights = nullptr;
  // The launch plans' C51 loss kernel's launch bound (TrainerOptions::c51_min_blocks).
  int c51_min_blocks = 0;
};

// What a term gives the C51 term's fused kernel to run its backward in the kernel's backward
// phases (FusedOptions::auxiliaries_ride): a term whose gradient is the online net's on s, from
// ∂loss/∂(head outputs) through heads on the trunk's features and the trunk, as a BackwardPlan
// would compute it.
struct FusedRider {
  // Enqueues the term's loss and ∂loss/∂(head outputs); the kernel runs it once its loss phase has
  // written the online net's log-probabilities and C51's targets.
  std::function<void(const ExecSpace&)> loss;
  // Work of the term's own that reads only the forward's trunk (IQN's τ and quantile network on
  // both sides), or empty: on `main` first thing in the riders' launch (side nullptr), or, with
  // FusedOptions::ahead_beside and a side lane, enqueued on the step's side lane (`side`) once the
  // trunk's forward is done, beside the head phases and the loss's, and joined before `loss`.
  std::function<void(const ExecSpace& main, const SideLane* side)> ahead;
  // Without head sets, the heads are the main ones (the online net's activations): ∂loss/∂(head
  // outputs) in g->d_value_out ([B, atoms]) and g->d_branch_out (a [B, n_k·atoms] block a branch,
  // BranchTable::block). g->d_trunk: the trunk's gradients, always.
  Gradients* g = nullptr;
  const ParamBuffer* grad = nullptr;  // where the products write the term's gradient
  // No heads at all: `loss` leaves ∂loss/∂(the trunk's output), through its last ReLU, in
  // g->d_trunk[T − 1] (IQN, whose own layers it runs), and the kernel runs the trunk's backward.
  bool features_given = false;
  // The term's own head sets on the online net's features of s (the ensemble's members), with
  // their B-row activations and ∂loss/∂(their outputs): their forward rides the forward's head
  // phases (the output layers without their biases: `loss` runs their dueling head), their
  // backward the backward's. Only where the forward is phases (not FusedOptions::cluster_forward
  // or row_block_forward).
  std::vector<HeadSetGrads> head_sets;
  // The term's own layers as products of the kernel's phases (IQN's), or empty: called in each
  // FusedPhase with the builder in it, after C51's products of that phase, and the norm its weight
  // gradients count in (FusedOptions::norm_in_backward); the term adds its jobs and, where its
  // products need a launch of its own first, puts it before the phase
  // (FusedBuilder::launch_before(b.phases() − 1, …)). The forward's phases only where the forward is
  // phases (not FusedOptions::cluster_forward or row_block_forward).
  FusedPhaseHook products;
  // Work of the term's own that nothing in the kernel reads (the ensemble's spread, a statistic
  // for the metrics record), or empty: after the term's loss, on the step's side lane beside the
  // backward's phases with FusedOptions::monitors_beside (joined after the kernel's last phase),
  // else right after `loss` on the loss's stream.
  std::function<void(const ExecSpace&)> monitor;
  // Called once the kernel has taken the rider: from then on the term's enqueue() runs nothing.
  // A rider the kernel has no room for (C51Term::fuse) is never taken, and its term keeps its own
  // launches.
  std::function<void()> accepted;
};

class LossTerm {
 public:
  // The term's gradient buffer and loss scalar are the next slot of ctx.buffers.
  LossTerm(const std::string& name, float budget, const StepContext& ctx);
  virtual ~LossTerm() = default;
  LossTerm(const LossTerm&) = delete;
  LossTerm& operator=(const LossTerm&) = delete;

  const std::string& name() const { return name_; }
  // This term's share of max_grad_norm: its gradient is clipped to budget() · max_grad_norm.
  float budget() const { return budget_; }
  // ∂loss/∂params over the whole layout; zero outside what the term touches.
  const ParamBuffer& grad() const { return grad_; }
  DeviceScalar<float> loss() const { return loss_; }
  // ‖grad()‖₂, written by the trainer's norm launch.
  DeviceScalar<double> norm() const { return norm_; }
  // The pieces [begin, end) of the layout that the term's gradient may be nonzero in (the tensors
  // it writes; elsewhere its buffer stays the zeros it was made with): its norm reads only these.
  // At most two; the whole layout unless the term says less.
  virtual std::vector<std::pair<std::size_t, std::size_t>> gradient_spans() const {
    return {{std::size_t{0}, grad_.flat().extent(0)}};
  }

  // Enqueues the term's loss and its gradient into grad() on `exec`: no allocation, no sync.
  virtual void enqueue(const ExecSpace& exec, const Gemm& gemm) = 0;
  // Hands the term's backward to the C51 term's fused kernel of `options`, where the term can give
  // it one (FusedRider; `gemm`: the step's, for what the rider's loss launches): once the kernel
  // takes it (FusedRider::accepted) enqueue() runs nothing, the kernel runs it all. nullopt: the
  // term keeps its own launches.
  virtual std::optional<FusedRider> ride_fused(const FusedOptions&, const Gemm&) { return std::nullopt; }
  // One statistic of the term's own for the metrics record (name, device scalar), if it has one.
  virtual std::pair<std::string, DeviceScalar<float>> statistic() const { return {}; }
  // Per-sample outputs worth writing out (`zerosync step`): name → [B] device values.
  virtual std::vector<std::pair<std::string, Kokkos::View<const float*, MemSpace>>> sample_outputs() const {
    return {};
  }
  // Device state a run must carry across a checkpoint (e.g. an RNG counter), as named tensors.
  // A load checks every term's tensors (check_state, which throws on a missing or bad one)
  // before any term writes its device state (load_state), so a bad file changes nothing.
  virtual void save_state(safetensors::File&) const {}
  virtual void check_state(const safetensors::File&) const {}
  virtual void load_state(const safetensors::File&) {}
  // Back to the state of a fresh run (blocking: set-up only).
  virtual void reset() {}

 private:
  LossTerm(const std::string& name, float budget, TermBuffers::Slot slot);

  std::string name_;
  float budget_;
  ParamBuffer grad_;
  DeviceScalar<float> loss_;
  DeviceScalar<double> norm_;
};

}  // namespace zs
