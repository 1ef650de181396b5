// A fused kernel of the step: its phases (kernels/fused_program.hpp) assembled once on the host
// by a FusedBuilder, its tables put on the device, and its launch (backends/phased_launch.hpp):
// on CUDA one persistent launch with grid barriers between the phases, or a launch per phase.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "backends/backend.hpp"
#include "backends/grid_barrier.hpp"
#include "backends/phased_launch.hpp"
#include "core/config.hpp"
#include "core/error.hpp"
#include "kernels/fused_program.hpp"

namespace zs {

struct FusedOptions {
  // Launches: one launch per phase; persistent: one launch whose teams take every phase's tiles
  // in turn (H200, B = 256: 156.7 µs against 114.8 as launches). Where the backend cannot keep a
  // league resident (the host), always launches.
  PhasedMode mode = PhasedMode::launches;
  // Teams of a persistent launch on each multiprocessor (each team is 4 warps and at most 46 KiB
  // of scratch, so 2 always fit). Fewer when the widest phase has fewer tiles.
  int teams_per_sm = 2;
  // Rows of the dueling head per tile (1 to what fits the scratch budget).
  int dueling_rows = 1;
  // Split-K: a product of fewer than split_tiles output tiles has each tile's k chunks shared
  // by up to split_tiles / tiles teams, each taking at least split_chunks chunks (0: never
  // split). A phase's chain is then a few chunks long instead of the whole reduction (at B = 256
  // the value stream's weight gradient was 24 chunks in 4 tiles), at the price of the partials'
  // stores and the last team's loads. The same splits on every backend. Off by default: 4 was
  // the best of 0, 1, 2, 4 and 8 on the H200 (−9 % at B = 256, −21 % at 4096), but one run of
  // FusedC51.OneStepMatchesTheLaunchPlans under compute-sanitizer failed with it, unexplained
  // (docs/performance.md).
  int split_chunks = 0;
  int split_tiles = 512;
  // Launches mode: each phase a kernel compiled for the kinds of tile it holds (products, the
  // dueling head, the loss), so that each takes only its own registers; false: every phase the
  // one kernel of all kinds (what a persistent launch always is).
  bool kernel_per_kind = true;
  // The products' tiles (H200, BM_StepFused, µs a step at B = 256 and at 4096 / 512 / 256):
  // 32 × 32, 128 registers: 114.8 and 1,594; 64 × 32 (each warp's fragments feed 2 × 2
  // tensor-core products), 179 registers: 135.3 and 1,803; 32 × 16 (one tensor-core tile a warp,
  // four times the tiles of 64 × 32), 128 registers: 124.3 and 2,143.
  int tile_rows = 32;
  int tile_cols = 32;  // 32, or 16 with 32 rows
  // k chunks of a product tile in team scratch at once (TileProduct's Stages): 3, or 4 with
  // 32-row tiles (40 KiB at 32 × 32). With more stages more of a tile's copies from L2 are in
  // flight while its tensor cores work, so each chunk of the tile's chain waits less. On an H100
  // (BM_StepFusedStages, 2026-12-05) 4 stages gained nothing: B = 256 110.7 µs against 109.8,
  // B = 64 86.2 against 85.7; the chunks wait on their own chain, not on their copies.
  int tile_stages = 3;
  // Each product tile of a launch that may start before the launch it follows has finished
  // (programmatic launch) reads its job and segments first, and only then waits for that launch:
  // the tables' loads, a chain of two in L2 before the first copy, overlap the wait. Off: every
  // tile waits first thing. The same results either way (the tables never change after build).
  // On an H100 (BM_StepFusedEarlyTables, 2026-12-05, twenty-first session) it gained nothing:
  // 109.6 µs both ways at B = 256, 85.9 against 85.4 at 64. With dependents_early 2 each phase's
  // tiles start while the phase before drains, so there is a wait to hide the tables' loads in:
  // 107.4 against 111.8 at B = 256, 83.5 against 88.3 at 64 (H100, BM_StepTimeline, twenty-third
  // session): the default.
  bool tables_before_wait = true;
  // When the launch of the phase after each phase may be scheduled, with programmatic launch:
  // 0 once every block of this one has exited (the CUDA default without a trigger); 1 once
  // every block has finished its tile; 2 once every product tile is past its chunk loop, so the
  // next launch's blocks are placed while this one's epilogues run (other kinds of tile: as 1).
  // Either way the next phase's tiles wait for this phase to finish before they read anything it
  // writes: the same results. (The sixteenth session's trigger as soon as a block started made
  // B = 256 slower: the next launch's blocks took the multiprocessors that freed first.)
  // H100, BM_StepTimeline (2026-12-05, twenty-third session), µs a step at B = 64 / 256: 0
  // 80.0 / 103.5, 1 79.6 / 103.5, 2 79.1 / 102.4: the default.
  int dependents_early = 2;
  // The dueling head's and the loss's own kernels (kernel_per_kind): team threads × vector lanes
  // (lanes 1, 2, 4, 8, 16 or 32; at most 1,024 in all). A dueling tile's log-softmaxes go a team
  // thread per (row, action) with its lanes over atoms, the loss's a* terms a thread per action:
  // few lanes and many threads shorten both serial chains. On the host always 1 × 1. H200,
  // B = 256 (BM_StepFusedSmallTeams, graph replay; Nsight): the dueling head at 16 × 8 took
  // 10.0 µs against 12.3 at 4 × 32 (step 110.2 against 112.1; 8 × 16 112.3, 32 × 4 111.1); the
  // loss lost with every shape other than 4 × 32 (8 × 16 113.1, 16 × 8 114.3, 32 × 4 116.9).
  // The loss (with the head inside it) at 16 × 8 took 106.8 µs a step against 108.4 at 4 × 32 on
  // the H200 (nineteenth session) and 107.6 against 109.3 on an H100 (2026-12-05): the default.
  int dueling_threads = 16, dueling_lanes = 8;
  int loss_threads = 16, loss_lanes = 8;
  // The C51 step's dueling head inside the loss's phase: each (sample, branch) team forms its
  // branch's log-probabilities on its three rows in scratch, then the loss on them (one phase and
  // one launch fewer; loss_threads × loss_lanes teams). false: the head a phase of its own
  // (dueling_threads × dueling_lanes, dueling_rows), then the loss reading it back.
  bool fuse_head_loss = true;
  // The gradient's norm inside the last backward phase: each weight-gradient tile also stores the
  // Σ v² of what it wrote, and the phase's last tile to finish adds them, takes the root and runs
  // the guard's verdict and Adam's prepare (FusedKernel::set_norm_tail; the trainer does so alone
  // on its rank, with posts_beside, when every auxiliary rides the kernel: each rider's gradient is
  // then a norm of its own, FusedKernel::set_norm_out): one launch fewer (the norm's, 11.3 µs of
  // kernel time in the H200's B = 256 step, Nsight). On an H100 (BM_StepFusedNorm, 2026-12-05):
  // B = 256 103.7 µs a step against 108.9, B = 64 80.4 against 85.9.
  bool norm_in_backward = true;
  // The C51 step's forward (every layer of the three passes, not the dueling head, which the loss
  // forms) as one row-block launch before the fused kernel (nn/row_block_forward.hpp, a team a
  // block of this many rows: 16 or 32) instead of its product phases; 0: the phases. Needs
  // fuse_head_loss. A prototype under measurement (docs/performance.md, twenty-fourth session).
  int row_block_forward = 0;
  // The C51 step's forward (every layer of the three passes; the loss forms the dueling head) as one
  // launch of thread-block clusters before the fused kernel (nn/cluster_forward.hpp: CUDA sm_90),
  // instead of its product phases. Needs fuse_head_loss and a backend with clusters; not with
  // row_block_forward. A design under measurement (docs/performance.md, twenty-eighth session).
  bool cluster_forward = false;
  // The C51 step's input-gradient chain (the heads' and the trunk's, nn/row_block_chain.hpp) as one
  // row-block launch of this many rows a block (16 or 32) between the loss and one phase of every
  // weight gradient, instead of four phases of both; 0: the phases. Needs the phases launched one
  // by one (mode launches). A prototype under measurement (docs/performance.md).
  int row_block_backward = 0;
  // The auxiliaries ride the kernel (LossTerm::ride_fused): CQL's and the ensemble's products (the
  // ensemble's heads' forward too) and IQN's trunk backward join the kernel's phases beside C51's,
  // each into the term's own gradient; their losses (with the ensemble's dueling head) are one
  // launch between the C51 loss's phase and the backward's first (IQN's layers: riders_forward).
  // Only where
  // the phases are launched one by one (mode launches, or a backend that cannot persist) and the
  // backward is phases (row_block_backward 0); the ensemble also needs the forward as phases.
  // Elsewhere, and off, each term runs its own launch plans after the kernel. On an H100 at
  // B = 256 (BM_StepAuxRide, thirtieth session, µs a step): CQL 140.3 against 183.3, the ensemble
  // 196.6 against 269.9, IQN 232.2 against 255.1, all three 346.4 against 476.6.
  bool auxiliaries_ride = true;
  // Riders' own layers (IQN's cosine embedding, modulation and quantile network) as products of
  // the forward's phases beside C51's (FusedRider::products; where the forward is phases): the
  // embedding in the last trunk layer's phase, its two layers in the heads' two phases, τ and the
  // modulation a launch each before them; their backward's products in the backward's first three
  // phases either way. false: their forward in the riders' launch (FusedRider::ahead, as in the
  // thirtieth session), with cuBLAS where the backend has it.
  bool riders_forward = true;
  // Riders' work that needs only the trunk's forward (FusedRider::ahead: IQN's quantile network
  // where its forward is not phases) on the step's side lane beside the head phases and the
  // loss's; false: first in the riders' launch between the loss and the backward. Beside lost on
  // an H100 (BM_StepAuxRide, thirtieth session, B = 256): IQN alone 329.8 µs a step against
  // 232.2, every auxiliary 402.9 against 346.4.
  bool ahead_beside = false;
  // The riders' losses (independent of each other) split between the main stream and the step's
  // side lane, every other rider on the side, joined before the backward's first phase: their
  // small launches side by side instead of one after another. false: all on the main stream.
  // H200, B = 256 (BM_StepAuxRide, thirty-first session): every auxiliary 281.4 µs a step against
  // 300.7 on the main stream; IQN alone (one rider) 200.6 either way.
  bool losses_beside = true;
  // Riders' monitors (FusedRider::monitor: the ensemble's spread) on the step's side lane beside
  // the backward's phases, joined after the kernel's last phase, instead of after their losses
  // (where the ensemble's three launches on the side lane were the longer of the two lanes).
  // H200, B = 256 (BM_StepAuxRide ride 8, thirty-third session): the ensemble alone 177.7 µs a
  // step against 183.4, every auxiliary 285.6 against 288.6, IQN alone (no monitor) 199.9 both.
  bool monitors_beside = true;
  // Riders' weight gradients in the backward's last phase (the trunk's first layer's: 64 tiles at
  // B = 256, most of a wave's slots free) instead of the phase after their input gradients:
  // nothing in the kernel reads them before the norms, and the backward's first three phases
  // (1,121, 1,472 and 640 tiles with every auxiliary, 528 slots a wave on an H200) lose part
  // waves. 0: none; 1: the riders' own layers' (IQN's: 448 tiles); 2: every rider's (CQL's and
  // the ensemble's too). The same bits either way. H200, B = 256 (BM_StepAuxRide rides 5, 6,
  // thirty-third session): 1 gave IQN alone 194.5 µs a step against 199.9 and every auxiliary
  // 273.0 against 288.6; 2 gave 194.9 and 280.0 (its last phase then holds 1,296 tiles).
  int rider_weight_grads_last = 1;
  // IQN's modulation backward (∂φ = ∂h · f where φ > 0, ∂f = Σ_n ∂h · φ) in the epilogue of the
  // ∂h product's tiles (ProductJob::scale, group_sums; each tile holds whole samples when n_tau
  // divides tile_rows, else the launch stays) instead of a launch of its own between the
  // backward's hidden and trunk phases, and ∂h never stored. H100, B = 256 (BM_StepAuxRide
  // ride 13 against 10, thirty-fourth session): IQN alone 205.6 µs a step against 210.6, every
  // auxiliary 277.5 against 284.9.
  bool rider_modulation_in_product = true;
  // Auxiliaries named here keep their own launch plans though they could ride (to measure what
  // each rider gains).
  std::vector<std::string> ride_except;
  // Each tile stores its clocks (kernels::TileClock) every launch: where a step's time goes, tile by
  // tile (FusedKernel::timeline, perf's BM_StepTimeline). A diagnostic; off, no tile stores any.
  bool timeline = false;
};

// One tile of the last launch, as the timeline (FusedOptions::timeline) kept it, and what it
// was: its kind (kernels::FusedTileKind) and, for a product, its job's index, shape, k chunks
// and splits.
struct TileTimes {
  int phase = 0, tile = 0, sm = 0;
  int kind = 0, job = -1, m = 0, n = 0, chunks = 0, splits = 1;
  std::uint64_t begin_ns = 0, end_ns = 0;          // the global timer
  std::uint64_t wait_cycles = 0, work_cycles = 0;  // before and after its wait for the grids before it
  // work_cycles in parts, where the kind has them (else 0): a product's until its first chunk had
  // landed in scratch (its tables' and first operands' loads), its chunk loop and its epilogue (row
  // sums and norm squares included); the loss's (with its head) dueling head, a* and projection.
  // What is left of work_cycles is the tile's tail (the rest of the loss; a product's team barrier,
  // and the norm's tail in the last tile of its phase).
  std::uint64_t parts[3] = {0, 0, 0};
};

using FusedProgramOnDevice = kernels::FusedProgram<ExecSpace>;

// The mode a kernel of these options launches in: options.mode where the backend can keep a
// league resident, else launches.
PhasedMode fused_mode(const FusedOptions& options);

// The team scratch a fused kernel may use, as the dueling head and the C51 loss count it:
// within what a CUDA block gets without opting in to more, less Kokkos' own.
inline constexpr std::size_t kFusedScratchBudget = 46 * 1024;

// Items (runs of one kind of tile) the fused C51 step of `c` has: every product job and every
// other run of tiles (losses/c51_fused.cpp, nn/fused_forward.cpp).
int fused_step_items(const Config& c);

// Whether a fused kernel can run `c`'s network and loss; when not, why, in `reason`.
bool fused_supports(const Config& c, const FusedOptions& options, std::string* reason = nullptr);

// 1 when four consecutive floats of o's contiguous direction are always one 16-byte copy (o
// starts on 16 bytes, its other stride a multiple of 4): FusedBuilder::product sets
// ProductJob::vec by it (every operand of every segment).
int stages_four_at_a_time(const kernels::ProductOperand& o);

// Product operands by how their rows lie in memory: rows of `ld` floats (k-contiguous), or the
// transpose of such a matrix (element (row, k) at p[k·ld + row]).
inline kernels::ProductOperand rows_of(const float* p, int ld) { return {p, ld, 1}; }
inline kernels::ProductOperand columns_of(const float* p, int ld) { return {p, 1, ld}; }

class FusedKernel;
class FusedBuilder;

// What FusedBuilder::build throws when the phases hold more runs of tiles than the kernel's
// parameters do (kernels::kFusedMaxItems): a caller may build again with less in it.
class FusedTooLarge : public Error {
 public:
  using Error::Error;
};

// The phases of the C51 step's kernel where a loss term's own products may join C51's
// (FusedRider::products): the forward's last trunk layer's, the heads' hidden and output
// layers'; the backward's output layers', hidden layers' (the features' gradient), the last
// trunk layer's, and its last phase (the first trunk layer's: the same phase as backward_trunk
// when the trunk has one layer), which weight gradients may join that nothing before the norms
// reads (FusedOptions::rider_weight_grads_last).
enum class FusedPhase { trunk_last, heads_hidden, heads_out, backward_out, backward_hidden, backward_trunk, backward_last };
// Called with the builder in that phase, once C51's products of it are added, and the norm the
// caller's weight-gradient products count in (FusedBuilder::product's norm; −1 none).
using FusedPhaseHook = std::function<void(FusedBuilder&, FusedPhase, int norm)>;

// Phases of tiles, in order; each add_* appends tiles to the current phase.
class FusedBuilder {
 public:
  void phase();
  // One product job (its m, n, epilogue; seg0/segs/tiles are set here) over `segments`.
  // in_norm: its output is a piece of the gradient whose norm the kernel takes
  // (FusedOptions::norm_in_backward); no piece may be written by two jobs.
  // norm: which norm the job's output is a piece of (0 C51's, t the t-th rider's gradient; the
  // norms are 0, 1, … with no gap), −1 none. split_chunks: this job's own
  // FusedOptions::split_chunks (a reduction over thousands of rows, whose tiles would otherwise be
  // chains of 64 chunks and more); −1: the options'.
  void product(kernels::ProductJob job, const std::vector<kernels::ProductSegment>& segments, int norm = -1,
               int split_chunks = -1);
  void tiles(kernels::FusedTileKind kind, int count);
  // A launch of the caller's own, enqueued between the phases added so far and the next (a
  // row-block launch: FusedOptions::row_block_backward). Only where the phases are launches of
  // their own: build() refuses it in a persistent launch.
  void launch_between(std::function<void(const ExecSpace&)> launch) {
    between_.emplace_back(phases(), std::move(launch));
  }
  // The same before phase `phase` (at most phases(): one added already, or the next).
  void launch_before(int phase, std::function<void(const ExecSpace&)> launch);
  int phases() const { return static_cast<int>(phase_item_.size()); }
  // The kernel of everything added, with `program`'s dueling and C51 parts (tables are set here).
  FusedKernel build(FusedProgramOnDevice program, std::size_t scratch_bytes, const FusedOptions& options) const;

 private:
  std::vector<kernels::ProductJob> jobs_;
  std::vector<int> job_phase_;  // each job's phase
  std::vector<int> norm_of_;    // each job's norm (−1: none)
  std::vector<int> split_chunks_;  // each job's split_chunks (−1: the options')
  std::vector<kernels::ProductSegment> segments_;
  std::vector<kernels::FusedItem> items_;
  std::vector<int> phase_item_;  // each phase's first item
  std::vector<std::pair<int, std::function<void(const ExecSpace&)>>> between_;  // before phase .first
};

class FusedKernel {
 public:
  FusedKernel() = default;
  // Enqueues every phase on `exec`: no allocation, no sync. Two launches of one kernel must not
  // run side by side (they share the grid barrier): on one stream they never do.
  void enqueue(const ExecSpace& exec) const;
  int tile_rows() const { return program_.tile_rows; }
  int tile_cols() const { return program_.tile_cols; }
  int tile_stages() const { return program_.tile_stages; }
  // Every tile's clocks from the last enqueue (FusedOptions::timeline; empty when off), in phase
  // and tile order. Waits for the kernel's work to finish: a diagnostic, never in a step.
  std::vector<TileTimes> timeline() const;
  int phases() const { return program_.n_phases; }
  int tiles(int phase) const { return program_.phase_tiles[phase]; }
  // The persistent launch's teams; 0 when the phases are separate launches.
  int teams() const { return teams_; }
  int launches() const;  // per enqueue()
  // Product jobs whose k is split (FusedOptions::split_chunks).
  int split_jobs() const { return split_jobs_; }
  std::size_t scratch_bytes() const { return shape_.scratch_bytes; }
  // Whether the kernel takes the norm of the gradient its in_norm products write
  // (FusedOptions::norm_in_backward); into a scalar of its own until set_norm_tail.
  bool takes_norm() const { return program_.norm.phase >= 0; }
  // The norms it takes: C51's, then one a rider (0 when it takes none).
  int norms() const { return program_.norm.norms; }
  // Norm t (≥ 1) into `out` instead of the kernel's own scalar.
  void set_norm_out(int t, Kokkos::View<double, MemSpace> out);
  // The norm into `out` instead, and `tail` run by the same thread once it is written (what the
  // norms' launch would run after it). Requires takes_norm().
  void set_norm_tail(Kokkos::View<double, MemSpace> out, const kernels::FusedNorm<ExecSpace>::Tail& tail);
  // The dueling head's and the loss's own kernels' teams (kernel_per_kind); the loss's is also
  // that of the head and loss fused (FusedOptions::fuse_head_loss).
  const PhasedShape& dueling_shape() const { return dueling_shape_; }
  const PhasedShape& loss_shape() const { return loss_shape_; }

 private:
  friend class FusedBuilder;
  template <int Rows, int Cols, int Stages>
  void enqueue_as(const ExecSpace& exec) const;
  void launch_between(const ExecSpace& exec, int phase) const;
  FusedProgramOnDevice program_;
  std::vector<std::pair<int, std::function<void(const ExecSpace&)>>> between_;  // FusedBuilder::launch_between
  PhasedShape shape_;
  PhasedShape dueling_shape_, loss_shape_;  // the dueling head's and the loss's own kernels (kernel_per_kind)
  PhasedMode mode_ = PhasedMode::launches;
  int teams_ = 0;
  int split_jobs_ = 0;
  bool per_kind_ = true;
  GridBarrierState barrier_;
  DeviceFloats partials_;                  // split-K partial sums
  Kokkos::View<int*, MemSpace> counters_;  // split-K arrivals, one per split output tile
  Kokkos::View<double*, MemSpace> squares_;  // the norm's partial sums, one per counted output tile
  Kokkos::View<int, MemSpace> arrived_;      // tiles of the norm's phase done
  std::vector<Kokkos::View<double, MemSpace>> norms_;  // where the norms go (set_norm_tail, set_norm_out: the caller's)
  Kokkos::View<std::uint64_t*, MemSpace> timeline_;  // FusedOptions::timeline
  std::vector<kernels::ProductJob> timeline_jobs_;   // the jobs as built, for timeline()'s tiles
};

}  // namespace zs
