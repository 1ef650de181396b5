// The BDQ-C51 training step, end to end on one stream with no host synchronisation:
// forward (online on s and s′ stacked, target on s′) → every loss term (C51, then the
// auxiliaries the config turns on) → [the mean of every term's gradient and loss over the ranks
// of a data-parallel run: one all-reduce] → their gradient norms → guard → the budgeted sum of
// the clipped gradients → Adam and the target update → [the spectral-norm projection] → records
// to the pinned mailbox. Everything after the guard is skipped on the device when it trips: a
// tripped step changes nothing. On CUDA the step is recorded once as a CUDA graph and
// replayed: one launch per step.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backends/communicator.hpp"
#include "backends/gemm.hpp"
#include "backends/graph.hpp"
#include "backends/mailbox.hpp"
#include "backends/side_lane.hpp"
#include "kernels/grad_norm.hpp"
#include "kernels/term_record.hpp"
#include "losses/c51.hpp"
#include "losses/loss_term.hpp"
#include "losses/term_buffers.hpp"
#include "nn/batch.hpp"
#include "nn/network.hpp"
#include "nn/network_plan.hpp"
#include "nn/spectral_norm.hpp"
#include "train/guard.hpp"
#include "train/optimizer.hpp"

namespace zs {

struct TrainerOptions {
  int batch_size = 256;  // this rank's batch
  GuardConfig guard{};
  bool use_graph = true;  // record the step once and replay it (CUDA graph on CUDA)
  // The ranks of a data-parallel run (ProcessGroup::launch), each training on its own batch:
  // every step averages the terms' gradients and losses over them before the norms, so every
  // rank takes the same update and the parameters stay identical. nullptr or a group of one:
  // this process alone, and the step has no all-reduce.
  ProcessGroup* group = nullptr;
  // The all-reduce even alone, where it changes nothing: tests and benchmarks of its path.
  bool always_reduce = false;
  // The weight gradients (and some output layers) on a second stream beside the chain of input
  // gradients: parallel branches of the step's graph on CUDA; the same order on the host. Off:
  // one stream, for measuring what the side lane buys.
  bool side_lane = true;
  // Each trunk layer's bias and ReLU inside its products (ForwardPlan's fused_bias: cuBLASLt
  // epilogues on CUDA): the online net's two passes as one product of 2B rows, the target's on
  // the side lane. By default where it wins (kBiasInProducts): on CUDA, where the H200 step is
  // 3.5 % faster at B = 256 and 5 % at 4096 / 512 / 256 (BM_StepFusedBias), not on the host.
  bool fused_bias = kBiasInProducts;
  // The heads' hidden layers too (ForwardShape::heads_bias): a product with the bias and ReLU
  // epilogue per head and run of passes, instead of one batch of every head and pass and a bias
  // pass over their rows. H100, thirty-seventh session (BM_StepPlanOptions, option 1): 682.6 →
  // 672.8 µs a step at B = 4096 / 512 / 256, but 285.7 → 307.8 at 1024 and 163.3 → 190.4 at 512:
  // off here, taken from wide_heads_from on.
  bool heads_bias = false;
  // The launch plans' output layers compute and store their rows padded to 16 bytes, from a
  // padded copy of their weights made once a step, where the dueling head reads them
  // (ForwardShape::padded_outputs). By default where it won (kPaddedOutputs): on CUDA, every
  // batch measured (H100: 682.3 → 655.2 µs a step at B = 4096 / 512 / 256), not on the host.
  bool padded_outputs = kPaddedOutputs;
  // The launch plans' backward takes the heads' hidden layers as one stacked layer
  // (BackwardShape::stacked_heads): one product for every hidden weight gradient and one for
  // ∂loss/∂features summed over the heads, instead of a product per head and a batch of shares
  // that the trunk's mask launch adds up. H100: 682.3 → 658.7 µs at B = 4096, 283.0 → 291.8 at
  // 1024: off here, taken from wide_heads_from on.
  bool stacked_heads = false;
  // From this batch size on, heads_bias and stacked_heads are taken whatever they say (1: always;
  // kWideHeadsBatch: CUDA from B = 4096, where the two won 49 µs a step, the host never).
  int wide_heads_from = kWideHeadsBatch;
  // The forward's heads as one stacked layer too (ForwardShape::stacked_heads): the trainer's
  // activations stacked (Activations::stack_heads), a product per run of passes for every head.
  // With stacked_heads too, the backward plans of the main heads read the forward's stacked copy
  // of the hidden weights (BackwardShape::stacked_weights) instead of stacking them again.
  // Not yet timed on a GPU, so off; no effect with the fused step, whose kernel writes them.
  bool stacked_forward = false;
  // The C51 loss's projection: each target atom gathers only from the source atoms within two
  // atoms of it (a binary search on their ascending positions; kernels::gather_mass), the same
  // terms in the same order, instead of walking all of them; in the fused step's loss phase and
  // in the launch plans' loss kernel alike. H100, thirty-fifth session: the loss kernel alone
  // 111.0 → 92.4 µs at B = 4096 and 16.7 → 16.3 at 256 (BM_C51Loss), the fused step at B = 256
  // at parity (111.2 → 111.0, BM_StepNarrowGather); thirty-sixth session, one H100 call: the step
  // at B = 4096 / 512 / 256 753.7 → 741.7 µs, the kernel 112.5 → 92.8. On by default; off is
  // the walk over every source, kept for the benchmarks and the bitwise test.
  bool narrow_gather = true;
  // The launch plans' C51 loss under a launch bound of this many teams an SM (0: none; 10 or 12;
  // kernels::C51Loss::min_blocks): fewer registers, more warps, the same bits. Not yet timed.
  int c51_min_blocks = 0;
  // The guard's and the loss terms' mailbox posts (each two system-scope fences) on the side lane
  // beside the optimizer's update, instead of between the gradient norm and the update; needs
  // side_lane. On: the H200 step at B = 256 took 127.4 µs against 130.8 with the posts between
  // (BM_StepPostsBeside; 127.9 with no post timed at all).
  bool posts_beside = true;
  // Programmatic dependent launch inside the step's graph (Graph::set_programmatic_edges): each
  // kernel of ours that follows a kernel is launched while that one drains and waits on the GPU
  // for its results; the fused step's phases are such kernels too. CUDA sm_90 only; nothing on
  // the host. H200, graph replay (BM_StepProgrammatic): the fused step 113.6 → 112.2 µs at
  // B = 256, 91.8 → 88.8 at B = 64, every auxiliary 488.3 → 478.5; the plans within ±1.3 %.
  // Letting the next kernel launch as soon as each block is past its wait (PTX
  // griddepcontrol.launch_dependents) made the fused step slower instead (115.6 → 121.1 µs).
  bool programmatic_launch = true;
  // With auxiliaries, Adam's pass forms the budgeted gradient itself (kernels::BudgetSum as its
  // gradient source: C51's at its clip scale plus each auxiliary clipped to its own share), storing
  // it in applied_grad() as it goes, instead of a launch of its own before Adam's that writes it
  // and Adam's reading it back (budget_sum 11.7 µs in the H200's step with every auxiliary,
  // thirty-first session's Nsight table). The same bits either way.
  bool budget_in_adam = false;
  // The forward, the C51 loss and its backward as one fused kernel (losses/c51_fused.hpp), a
  // launch per phase (FusedOptions::mode), for batches of at most fused_max_batch. Where the
  // config is one it cannot run (fused_supports) or the batch is larger, the launch plans run
  // instead: Trainer::fused() says which. Per backend (kFusedStep, kFusedMaxBatch): on CUDA up
  // to B = 256, where the H200 measured it winning (it loses from B = 512 on); off on the host.
  bool fused_step = kFusedStep;
  int fused_max_batch = kFusedMaxBatch;
  FusedOptions fused{};
};

// One loss term's entry in the metrics record, as the host reads it.
struct TermMetrics {
  std::string name;
  double loss = 0, grad_norm = 0;
  double scale = 0;            // the clip coefficient its share of max_grad_norm applied
  std::string statistic_name;  // empty when the term reports no statistic of its own
  double statistic = 0;
};

// The loss terms' record, posted with the guard's when the step has more than one term.
struct StepMetrics {
  std::int64_t seq = 0;
  std::int64_t step = -1;  // the step this record belongs to
  std::int64_t steps_behind = 0;
  std::vector<TermMetrics> terms;  // in the trainer's order: C51 first
  // The entry of the term called `name`; nullptr when the step has none.
  const TermMetrics* term(const std::string& name) const;
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
  // ordered before step() on stream()), e.g. with upload().
  DeviceBatch& batch() { return batch_; }

  // Enqueues one training step; never waits. With use_graph, the first call runs directly (so
  // Kokkos and cuBLAS size their scratch outside capture) and then records the step; every
  // later call is one graph replay. Kernel arguments are frozen at recording: anything that
  // changes per step lives in device memory (Adam's t, the guard's step, lr).
  void step();
  // The step's phases in order; enqueue_phase() runs one of them alone (benchmarks time the
  // phases this way: docs/performance.md's breakdown).
  // all_reduce enqueues nothing unless the step has a communicator.
  enum class Phase { forward, loss_terms, all_reduce, norm_and_guard, optimizer, spectral_norm };
  static constexpr Phase kPhases[] = {Phase::forward,        Phase::loss_terms, Phase::all_reduce,
                                      Phase::norm_and_guard, Phase::optimizer,  Phase::spectral_norm};
  static const char* phase_name(Phase p);
  void enqueue_phase(Phase p);
  // Enqueues the same step by direct launches, never the graph (for parity checks).
  void step_direct();
  // One step with a caller's work right before and after it in the same graph (the training
  // loop's batch sampling and priority update): one graph launch instead of three. The first
  // call records before + step + after; every later call replays that recording, so `before` and
  // `after` must enqueue the same work on stream() each time (their arguments are frozen too),
  // and the recording keeps copies of them: they must not capture the caller's locals by reference.
  // `after_loss`, where given, is enqueued right after the loss terms (every term's priorities are
  // final there): the training loop forks its priority update onto its side lane at that point.
  void step_with(const std::function<void()>& before, const std::function<void()>& after,
                 const std::function<void()>& after_loss = {});
  std::int64_t steps_enqueued() const { return steps_; }
  bool graph_recorded() const { return graph_ && graph_->captured(); }
  std::size_t graph_nodes() const { return graph_ ? graph_->node_count() : 0; }
  // Edges of that graph made programmatic (TrainerOptions::programmatic_launch).
  std::size_t graph_programmatic_edges() const { return graph_ ? graph_->programmatic_edges() : 0; }
  // Whether the C51 term runs as one fused kernel (TrainerOptions::fused_step and a config it
  // supports); when fused_step asked for it but the config is out of its reach, why not.
  bool fused() const { return fused_; }
  const std::string& fused_off_reason() const { return fused_off_reason_; }
  // That kernel (its launches, phases and teams), nullptr when the step runs launch plans.
  const FusedKernel* fused_kernel() const;
  // Whether that kernel takes the gradient's norm and runs the guard and Adam's prepare itself
  // (FusedOptions::norm_in_backward, taken when C51 is the only term, alone on its rank, with
  // posts_beside): the step then has no norms' launch.
  bool norm_in_step() const { return norm_in_step_; }

  // This process's place in the run: rank r of ranks() (0 of 1 alone).
  int rank() const { return comm_ ? comm_->rank() : 0; }
  int ranks() const { return comm_ ? comm_->size() : 1; }
  // The step's all-reduce; nullptr when it has none (alone, without always_reduce).
  Communicator* communicator() const { return comm_.get(); }
  // Every term's gradient and loss in one buffer: what the all-reduce averages.
  const TermBuffers& term_buffers() const { return buffers_; }

  // The loss terms, C51 first, then the auxiliaries the config turned on (losses/registry.hpp).
  const std::vector<std::unique_ptr<LossTerm>>& terms() const { return terms_; }
  // The term called `name`, nullptr when the step has none; term_as<T> also checks its type.
  const LossTerm* term(const std::string& name) const;
  template <class T>
  const T* term_as(const std::string& name) const {
    return dynamic_cast<const T*>(term(name));
  }
  // Enqueues term i alone (benchmarks time each term this way).
  void enqueue_term(std::size_t i);

  // The newest guard record that has reached the host (loss, grad norm, halts, running sums),
  // and how many steps behind the newest enqueued step it is. Never waits.
  std::optional<GuardStatus> metrics() const { return guard_.latest(steps_); }
  // The newest loss terms' record (same cadence as metrics()); nothing when C51 is the only
  // term or none has arrived yet. Never waits.
  std::optional<StepMetrics> term_metrics() const;
  void synchronize() const { stream_.synchronize(); }

  // Enqueues lr ← value on the stream (a schedule may call it between steps; graph-safe).
  void set_lr(float lr);
  // PyTorch nn.Linear's default init, U(−1/√in, 1/√in) for weights and biases, from `seed`;
  // the target becomes a copy; the optimizer, the terms' own state, the guard and the step count
  // are reset.
  void init_params(std::uint64_t seed);

  // Device state, for tests, tools and checkpoints.
  const ParamBuffer& online() const { return online_; }
  const ParamBuffer& target() const { return target_; }
  const ParamBuffer& grad() const { return terms_.front()->grad(); }  // C51's, before clipping
  // The gradient Adam applied last step: with auxiliaries the budgeted sum (C51's scaled to its
  // share plus each auxiliary clipped to its own); with none, the clip rides inside Adam and this
  // is grad().
  const ParamBuffer& applied_grad() const { return applied_ ? *applied_ : grad(); }
  const Optimizer& optimizer() const { return optimizer_; }
  const C51Outputs& loss() const { return c51_; }
  const Activations& online_acts() const { return acts_online_; }  // the last step's, on s and s'
  const Activations& target_acts() const { return acts_target_; }  // the last step's, on s'
  DeviceScalar<double> grad_norm() const { return terms_.front()->norm(); }  // C51's
  const TrainingGuard& guard() const { return guard_; }
  // The spectral-norm projection, nullptr when the config has it off.
  const SpectralNorm* spectral_norm() const { return spectral_.get(); }

  // Host copies of one named tensor ("trunk.0.weight", …) of a buffer, and the reverse; the
  // data is row-major like PyTorch's. Blocking: for set-up, tools and checkpoints, never a step.
  std::vector<float> read_tensor(const ParamBuffer& buf, const std::string& name) const;
  void write_tensor(const ParamBuffer& buf, const std::string& name, const std::vector<float>& data);

  // Checkpoint (safetensors): parameters, target, the optimizer's state, guard state,
  // spectral-norm vectors, every term's own state, step count and the config. load() refuses a
  // file whose config differs from this trainer's, or that is truncated or corrupt, before
  // changing anything; a resumed run continues exactly.
  void save(const std::string& path) const;
  void load(const std::string& path);
  // The same tensors and metadata into / from a file being assembled or already read (a caller
  // that adds its own state to the trainer's writes one file: the training loop's checkpoint).
  void save_state(safetensors::File& f) const;
  void load_state(const safetensors::File& f);

 private:
  // Graph::run, made safe for a step with a collective (below).
  void run_graph(Graph& graph, const std::function<void()>& body);
  void enqueue_step(const std::function<void()>& after_loss = {});
  // Whether the records' posts go beside the update (TrainerOptions::posts_beside, with a side lane).
  bool posts_beside() const;
  // The loss terms' record and its post, with more than one term; nothing otherwise.
  void enqueue_term_record(const ExecSpace& exec);
  // The guard's post and the terms' record on `exec` (posts_beside: the side lane).
  void enqueue_posts(const ExecSpace& exec);

  Config config_;
  TrainerOptions options_;
  ParamLayout layout_;
  Stream stream_;
  Gemm gemm_;
  std::unique_ptr<SideLane> side_;  // before ctx_, which hands it to the terms
  Network net_;
  ParamBuffer online_, target_;
  DeviceBatch batch_;
  Activations acts_online_, acts_target_;
  TermBuffers buffers_;  // before the C51 outputs and the terms, whose losses and gradients it holds
  C51Outputs c51_;
  std::string fused_off_reason_;
  bool fused_ = false;  // before ctx_, which hands the fused options to the C51 term
  StepContext ctx_;
  std::vector<std::unique_ptr<LossTerm>> terms_;
  Optimizer optimizer_;
  TrainingGuard guard_;
  std::unique_ptr<SpectralNorm> spectral_;
  std::unique_ptr<ParamBuffer> applied_;
  DeviceScalar<float> unit_scale_;  // Adam's clip scale once the budgets have been applied
  kernels::GradNormsScratch<ExecSpace> norm_scratch_;  // grad_norms' partial sums
  RecordBox<kernels::TermsRecord> term_record_;
  // The main network's forward: online on s and s′, target on s′, batched.
  std::unique_ptr<ForwardPlan> forward_plan_;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<Graph> graph_, graph_with_;
  std::int64_t steps_ = 0;
  bool norm_in_step_ = false;
};

}  // namespace zs
