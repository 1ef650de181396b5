// The BDQ-C51 training step, end to end on one stream with no host synchronisation:
// [spectral norm] → forward (online on s and s′ stacked, target on s′) → C51 loss → backward →
// grad norm → guard → clip scale → Adam (skipped on the device when the guard trips) → Polyak
// target update → guard record to the pinned mailbox. On CUDA the step is recorded once as a
// CUDA graph and replayed: one launch per step.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backends/gemm.hpp"
#include "backends/graph.hpp"
#include "nn/batch.hpp"
#include "losses/cql.hpp"
#include "losses/ensemble.hpp"
#include "losses/grad_budget.hpp"
#include "train/guard.hpp"
#include "losses/iqn.hpp"
#include "kernels/grad_norm.hpp"
#include "backends/mailbox.hpp"
#include "nn/network.hpp"
#include "nn/network_plan.hpp"
#include "nn/spectral_norm.hpp"

namespace zs {

struct TrainerOptions {
  int batch_size = 256;
  GuardConfig guard{};
  // Kept for compatibility: which auxiliaries are on and their budgets now come from the Config
  // (keys iqn, ensemble, cql; budget_of()). Turning an auxiliary on here alone is an error.
  GradBudget budget{};
  bool use_graph = true;  // record the step once and replay it (CUDA graph on CUDA)
};

// The auxiliaries' record (kernels::BudgetSlot), posted with the guard's when any is on: per
// loss its raw gradient norm and the clip coefficient its budget applied; NaN for one that is off.
struct AuxStatus {
  std::int64_t seq = 0;
  std::int64_t step = -1;          // the step this record belongs to
  std::int64_t steps_behind = 0;
  double c51_grad_norm = 0, c51_scale = 0;
  double iqn_loss = 0, iqn_grad_norm = 0, iqn_scale = 0;
  double ensemble_loss = 0, ensemble_grad_norm = 0, ensemble_scale = 0, ensemble_spread = 0;
  double cql_loss = 0, cql_grad_norm = 0, cql_scale = 0;
};

class Trainer {
 public:
  Trainer(const Config& config, const TrainerOptions& options = TrainerOptions{});
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  const Config& config() const { return config_; }
  const ParamLayout& layout() const { return layout_; }
  const TrainerOptions& options() const { return options_; }
  Stream& stream() { return stream_; }

  // The batch the next step trains on. Fill it on the device (deep_copy or your own kernels,
  // ordered before step() on stream()), e.g. with upload_batch().
  DeviceBatch& batch() { return batch_; }

  // Enqueues one training step; never waits. With use_graph, the first call runs directly (so
  // Kokkos and cuBLAS size their scratch outside capture) and then records the step; every
  // later call is one graph replay. Kernel arguments are frozen at recording: anything that
  // changes per step lives in device memory (Adam's t, the guard's step, lr).
  void step();
  // The step's phases in order; enqueue_phase() runs one of them alone (benchmarks time the
  // phases this way: docs/performance.md's breakdown).
  enum class Phase { spectral_norm, forward, loss, backward, auxiliary, norm_and_guard, optimizer };
  static constexpr Phase kPhases[] = {Phase::spectral_norm, Phase::forward,        Phase::loss,
                                      Phase::backward,      Phase::auxiliary,      Phase::norm_and_guard,
                                      Phase::optimizer};
  static const char* phase_name(Phase p);
  void enqueue_phase(Phase p);
  // Enqueues the same step by direct launches, never the graph (for parity checks).
  void step_direct();
  std::int64_t steps_enqueued() const { return steps_; }
  bool graph_recorded() const { return graph_ && graph_->captured(); }
  std::size_t graph_nodes() const { return graph_ ? graph_->node_count() : 0; }

  // The newest guard record that has reached the host (loss, grad norm, halts, running sums),
  // and how many steps behind the newest enqueued step it is. Never waits.
  std::optional<GuardStatus> metrics() const { return guard_.latest(steps_); }
  // The newest auxiliaries' record (same cadence as metrics()); nothing when no auxiliary is on
  // or none has arrived yet. Never waits.
  std::optional<AuxStatus> aux_metrics() const;
  void synchronize() const { stream_.synchronize(); }

  // Enqueues lr ← value on the stream (a schedule may call it between steps; graph-safe).
  void set_lr(float lr);
  // PyTorch nn.Linear's default init, U(−1/√in, 1/√in) for weights and biases, from `seed`;
  // the target becomes a copy; Adam's state, the guard and the step count are reset.
  void init_params(std::uint64_t seed);

  // Device state, for tests, tools and checkpoints.
  const ParamBuffer& online() const { return online_; }
  const ParamBuffer& target() const { return target_; }
  const ParamBuffer& grad() const { return grad_; }  // last step's C51 gradient, before clipping
  // With any auxiliary on: the gradient Adam applied last step, C51's scaled to its share plus
  // each auxiliary's clipped SAXPY. With none on, the clip rides inside Adam and this is grad().
  const ParamBuffer& applied_grad() const { return applied_ ? *applied_ : grad_; }
  // The effective split of max_grad_norm (from the Config).
  const GradBudget& budget() const { return budget_; }
  // The auxiliaries, nullptr when off: their own gradients, losses, norms and statistics.
  const IqnHead* iqn() const { return iqn_.get(); }
  const EnsembleHeads* ensemble() const { return ensemble_.get(); }
  const CqlRegulariser* cql() const { return cql_.get(); }
  const ParamBuffer& adam_m() const { return m_; }
  const ParamBuffer& adam_v() const { return v_; }
  const LossOutputs& loss() const { return loss_; }
  DeviceScalar<double> grad_norm() const { return grad_norm_; }
  const TrainingGuard& guard() const { return guard_; }

  // Host copies of one named tensor ("trunk.0.weight", …) of a buffer, and the reverse; the
  // data is row-major like PyTorch's. Blocking: for set-up, tools and checkpoints, never a step.
  std::vector<float> read_tensor(const ParamBuffer& buf, const std::string& name) const;
  void write_tensor(const ParamBuffer& buf, const std::string& name, const std::vector<float>& data);

  // Checkpoint (safetensors): parameters, target, Adam m/v and t, guard state, spectral-norm
  // vectors, step count and the config. load() refuses a file whose config differs from this
  // trainer's, or that is truncated or corrupt; a resumed run continues exactly.
  void save(const std::string& path) const;
  void load(const std::string& path);

 private:
  void enqueue_step();

  Config config_;
  TrainerOptions options_;
  ParamLayout layout_;
  Stream stream_;
  Gemm gemm_;
  Network net_;
  ParamBuffer online_, target_, grad_, m_, v_;
  DeviceBatch batch_;
  Activations acts_online_, acts_target_;
  Gradients grads_;
  LossOutputs loss_;
  DeviceScalar<double> grad_norm_;
  DeviceScalar<float> lr_, clip_scale_;
  Kokkos::View<double*, MemSpace> adam_state_;
  TrainingGuard guard_;
  std::unique_ptr<SpectralNorm> spectral_;
  GradBudget budget_;
  std::unique_ptr<IqnHead> iqn_;
  std::unique_ptr<EnsembleHeads> ensemble_;
  std::unique_ptr<CqlRegulariser> cql_;
  std::unique_ptr<ParamBuffer> applied_;
  DeviceScalar<float> unit_scale_;  // Adam's clip scale once the budgets have been applied
  Kokkos::View<double*, MemSpace> budget_record_;
  kernels::GradNormsScratch<ExecSpace> norm_scratch_;  // grad_norms' partial sums
  Mailbox aux_mailbox_;
  // The main network's forward (online on s and s′, target on s′) and backward, batched.
  std::unique_ptr<ForwardPlan> forward_plan_;
  std::unique_ptr<BackwardPlan> backward_plan_;
  std::unique_ptr<Graph> graph_;
  std::int64_t steps_ = 0;
};

}  // namespace zs
