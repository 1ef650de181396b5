// The whole training loop on the device: act (ε-greedy) → step the vectorised environments →
// insert into replay → [sample → training step → priority update] → … with evaluation episodes
// every few thousand steps. The host decides only what its own counters already say (when to
// train, evaluate, report, checkpoint) and reads results from mailboxes; on CUDA each of those
// pieces is a recorded graph, replayed.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "rl/actor.hpp"
#include "rl/envs.hpp"
#include "backends/mailbox.hpp"
#include "backends/process_group.hpp"
#include "backends/side_lane.hpp"
#include "kernels/loop_schedules.hpp"
#include "train/q_monitor.hpp"
#include "train/replica_check.hpp"
#include "rl/replay.hpp"
#include "rl/train_config.hpp"
#include "train/trainer.hpp"

namespace zs {

// What the host knows of the run, from its counters and the newest mailbox records.
struct LoopReport {
  std::int64_t iterations = 0, env_steps = 0, updates = 0;  // enqueued so far (host counters)
  bool has_record = false;     // a training report has arrived
  std::int64_t reported_env_steps = 0;  // the env steps the newest report belongs to
  double recent_return = 0;    // mean over the envs of their latest finished episode (NaN: none yet)
  double episodes = 0;         // episodes finished by the training envs (all envs together)
  double epsilon = 0, beta = 0;
  double sampleable = 0;       // transitions in replay that can be drawn
  std::optional<GuardStatus> guard;  // the newest training-step record
};

struct EvalResult {
  std::int64_t round = 0;      // 1, 2, … in the order evaluations were enqueued
  std::int64_t env_steps = 0;  // training env steps when the evaluated parameters were taken
  double episodes = 0, mean = 0, min = 0, max = 0;
};

// Whether an iteration that trains runs its collect beside the step (LoopOptions::overlap_collect).
enum class CollectOverlap { off, where_possible, on };

// Which of the replay's work an overlapped iteration runs on the side lane (LoopOptions::replay_beside).
enum class ReplayBeside { none, insert, insert_and_priorities };

// How the loop runs, beside what it trains (TrainConfig).
struct LoopOptions {
  // The actors' forward (acting and evaluation) as the fused step's kernel (Actor's fused
  // options) for up to fused_acting_max_rows environments, where the network is one it runs.
  // On where the fused step is the default (CUDA): on an H100, 2026-12-05, the cart-pole loop
  // (BM_TrainIteration, 8 envs) took 162.8 µs an iteration against 167.8 with the plans.
  bool fused_acting = kFusedStep;
  int fused_acting_max_rows = kFusedMaxBatch;
  // 16 or 32: the actors of up to row_block_acting_max_rows environments on row blocks (Actor's
  // row_block_rows), and each collect two launches: the row-block forward, then one team for the
  // schedules, the dueling head, Q, ε-greedy, the environments' step and the replay insert
  // (kernels/collect_tail.hpp); evaluation the same without the schedules and the insert. Where an
  // actor cannot (Actor::row_block_off_reason), it acts as above. 0: off. On by default where the
  // fused step is (CUDA): on an H100, 2026-12-06, the cart-pole loop (8 envs) took 135.8 µs an
  // iteration against 144.3 with fused acting; with 64 market envs one team is too few (455.8
  // against 203.9), hence the limit.
  int row_block_acting = kFusedStep ? 16 : 0;
  int row_block_acting_max_rows = 16;
  // The training actor's row blocks (as row_block_acting) where its collect runs beside the step
  // (overlap_collect, below). There the collect's stream can be the iteration's longer one, and one
  // row block a multiprocessor finishes later than the fused forward's many blocks: on an H100,
  // 2026-12-06, the cart-pole loop took 83.5 µs an iteration on the fused forward against 87.9
  // on row blocks of 16. 0 (the default): the fused forward (fused_acting) or the plans.
  int row_block_acting_beside = 0;
  // The collect beside the training step: in an iteration that trains, the step's graph runs the
  // schedules, the batch's draw and a copy of the online parameters, then the actor's forward, ε-greedy
  // and the environments' step on a second stream (backends/side_lane.hpp) while the step runs;
  // the replay insert and the priority update follow where replay_beside (below) puts them. The actor acts on the parameters the
  // iteration started with, as without it; what differs is that the batch is drawn before this
  // iteration's transitions are inserted (one iteration later than without). It needs
  // updates = 1: where_possible (the default) overlaps then and runs one after the other
  // otherwise; on refuses a config of updates != 1. On an H100, 2026-12-06, the cart-pole loop
  // (8 envs) took 99.4 µs an iteration against 133.8 without (10.06 k training steps/s), and the
  // market loop (64 envs) 148.5 against 205.0.
  CollectOverlap overlap_collect = CollectOverlap::where_possible;
  // How an overlapped iteration (above) places its launches around the step; the same work in
  // the same order on the replay, so the same bits whichever (BM_TrainIterationOverlap's `path`
  // measures them). replay_beside: `insert` puts the replay insert on the side lane after the
  // environments' step (inside the collect's tail launch where the actor is on row blocks), the
  // batch drawn before the fork; `insert_and_priorities` also forks the priority update onto the
  // side lane once the step's loss terms have run (it runs beside the optimizer), so the step's
  // last kernel ends the iteration; `none`: both after the join. one_launch_head: the
  // schedules, the copy of the parameters the actor reads and the batch's draw as one launch
  // (kernels/loop_head.hpp), with the gather of the batch's states in it too where the batch has
  // at most head_gather_max state values (B × state size), else a launch of its own after it.
  ReplayBeside replay_beside = ReplayBeside::insert_and_priorities;
  bool one_launch_head = true;
  std::int64_t head_gather_max = 512;
};

// With a ProcessGroup of several ranks (mpirun), each rank runs this loop on its own
// environments and replay (seeds offset by the rank: seed + rank), and the trainer averages every
// step's gradients over the ranks, so the parameters stay identical; the counts in the config
// (envs, steps, batch, …) are per rank. Evaluation is the caller's choice (zerosync train: rank 0
// alone); checkpoints hold every rank's loop state in one file that rank 0 writes.
class TrainLoop {
 public:
  // Training steps between two parameter fingerprints of a run of several ranks (ReplicaCheck).
  static constexpr std::int64_t kReplicaCheckEvery = 100;

  explicit TrainLoop(const TrainConfig& config, ProcessGroup* group = nullptr, const LoopOptions& options = {});
  ~TrainLoop();
  TrainLoop(const TrainLoop&) = delete;
  TrainLoop& operator=(const TrainLoop&) = delete;

  const TrainConfig& config() const { return config_; }
  Trainer& trainer() { return *trainer_; }
  VecEnv& env() { return *env_; }
  Replay& replay() { return *replay_; }
  const Actor& actor() const { return *actor_; }
  const Actor& eval_actor() const { return *eval_actor_; }
  // Whether an iteration that trains runs its collect beside the step (LoopOptions::overlap_collect).
  bool overlaps_collect() const { return side_ != nullptr; }
  ProcessGroup& group() { return *group_; }
  // The parameter check of a run of several ranks; nullptr alone.
  ReplicaCheck* replica_check() { return replica_.get(); }

  // Enqueues one iteration: every env acts and steps once, the transitions go to replay, and
  // (past learning_starts, every train_every iterations) `updates` training steps run. Never waits.
  void iterate();
  // Enqueues greedy evaluation episodes (one per evaluation env, to each one's first episode
  // end) on a snapshot of the online parameters; the result arrives through a mailbox
  // (poll_eval()). Waits only if the previous evaluation's result has not arrived yet.
  void enqueue_eval();
  // Enqueues a training report (episode returns, schedules) to the report mailbox. Never waits.
  void enqueue_report();
  // The newest report and guard record. Never waits.
  LoopReport report() const;
  // The newest evaluation result not returned before, if one has arrived. Never waits.
  std::optional<EvalResult> poll_eval();
  // Q-monitor: the newest record through the patience rule (throws zs::Error at patience).
  QMonitorStatus poll_q() { return qmon_.poll(); }

  std::int64_t iterations() const { return iterations_; }
  std::int64_t env_steps() const { return iterations_ * config_.envs; }
  std::int64_t updates() const { return updates_; }
  bool done() const { return env_steps() >= config_.steps; }

  // Checkpoint: one safetensors file holding the trainer's state (Trainer::save_state) and the
  // loop's (environments, replay, RNG counters, schedules, loop counters), replaced atomically:
  // a kill at any instant leaves the previous checkpoint or this one, whole. Blocking. With
  // several ranks, a collective: rank 0 gathers every rank's loop state (as rank.<r>.<tensor>)
  // and writes the file at `path` alone.
  void save(const std::string& path) const;
  // Restores a save(); the run then continues exactly as if it had never stopped. Every counter
  // is range-checked and a file of another config or format, or written by another number of
  // ranks, is refused with a clear error. With several ranks, a collective: rank 0 reads the
  // file and hands each rank its part.
  void load(const std::string& path);
  // Parameters of the last evaluation's snapshot, in PyTorch nn.Linear naming (blocking).
  void save_eval_params(const std::string& path) const;
  void synchronize() const { trainer_->synchronize(); }

 private:
  void enqueue_collect();
  // The collect's acting on `exec` (the actor's stream): the forward on `params`, ε-greedy, the
  // copy of the observations and the environments' step, with the schedules and the replay insert
  // where asked.
  void enqueue_acting(const ExecSpace& exec, const ParamBuffer& params, bool with_schedules, bool insert);
  kernels::Schedules<ExecSpace> schedules() const;
  void enqueue_schedules(const ExecSpace& exec);
  void enqueue_insert(const ExecSpace& exec);
  // The replay insert of this iteration's transitions, and the copy of the observations acted on.
  kernels::ReplayInsertData<ExecSpace> insert_data() const;
  kernels::CopyFlat<ExecSpace, float> obs_copy() const;
  // overlap_collect: on the main stream the head (the schedules, the copy of the parameters the
  // actor reads, the batch's draw: one launch or several, LoopOptions::one_launch_head), then the
  // acting (and the insert, LoopOptions::replay_beside) forked onto the side lane; what the caller
  // enqueues next on the main stream (the step) runs beside it until end_…: the join, then what of
  // the replay's work is not on the side lane.
  void begin_overlapped_collect();
  void end_overlapped_collect();
  void enqueue_sample();
  void enqueue_priorities(const ExecSpace& exec);
  bool insert_beside() const;
  void enqueue_eval_step();
  void collect_eval_record();
  // This rank's loop state (every tensor but the trainer's).
  void save_loop_state(safetensors::File& f) const;
  // Restores one rank's whole state (trainer and loop) from `f`, checking everything first.
  void load_file(const safetensors::File& f);

  TrainConfig config_;
  LoopOptions options_;
  ProcessGroup* group_;
  std::unique_ptr<Trainer> trainer_;
  std::unique_ptr<VecEnv> env_, eval_env_;
  std::unique_ptr<Replay> replay_;
  std::unique_ptr<SideLane> side_;  // overlap_collect: the actor's stream; declared first, so it outlives the actor
  std::unique_ptr<Actor> actor_, eval_actor_;
  std::unique_ptr<ParamBuffer> eval_params_;
  std::unique_ptr<ParamBuffer> acting_params_;   // overlap_collect: the parameters the actor reads
  Kokkos::View<float**, Kokkos::LayoutRight, MemSpace> acted_obs_;  // obs the actions were chosen on
  Kokkos::View<std::int64_t*, MemSpace> counters_;                  // [iterations]
  Kokkos::View<float, MemSpace> epsilon_, beta_, alpha_, greedy_;
  RecordBox<kernels::LoopReportRecord> report_box_;
  RecordBox<kernels::EvalRecord> eval_box_;
  QMonitor qmon_;
  std::unique_ptr<ReplicaCheck> replica_;
  Graph collect_graph_, eval_graph_;
  std::int64_t iterations_ = 0, updates_ = 0, eval_rounds_ = 0, eval_seen_ = 0;
  std::deque<EvalResult> pending_eval_;  // arrived, not yet returned by poll_eval()
};

}  // namespace zs
