#include "rl/train_loop.hpp"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <utility>
#include <vector>

#include "kernels/loop_head.hpp"
#include "kernels/loop_schedules.hpp"
#include "backends/host_copy.hpp"
#include "core/safetensors.hpp"

namespace zs {

namespace {

constexpr const char* kLoopFormat = "zerosync-train-checkpoint-2";
// The tensors of the loop's own state; everything else in a checkpoint is the trainer's.
constexpr const char* kLoopPrefixes[] = {"loop.", "actor.", "eval_actor.", "env.", "eval_env.", "replay."};
// Rank r's loop state, in a checkpoint of several ranks: rank.<r>.<tensor>.
constexpr const char* kRankPrefix = "rank.";

bool is_loop_tensor(const std::string& name) {
  for (const char* p : kLoopPrefixes)
    if (name.rfind(p, 0) == 0) return true;
  return false;
}

// Each rank's own environments, exploration and replay draws: the run's seed plus the rank, so
// rank 0 draws exactly what a run of one process would.
std::uint64_t rank_seed(const TrainConfig& tc, const ProcessGroup& g) {
  return tc.seed + static_cast<std::uint64_t>(g.rank());
}

Config network_for(const TrainConfig& tc, const VecEnv& env) {
  Config c = tc.network;
  c.state_dim = env.obs_dim();
  c.branches = env.branches();
  c.seed = tc.seed;
  return c;
}

TrainerOptions trainer_options(const TrainConfig& tc, ProcessGroup* group) {
  TrainerOptions o;
  o.batch_size = tc.batch_size;
  o.guard = tc.guard;
  o.use_graph = true;
  o.group = group;
  return o;
}

ReplayConfig replay_config(const TrainConfig& tc, std::uint64_t seed) {
  ReplayConfig rc;
  rc.capacity = tc.replay_capacity;
  rc.n_step = tc.network.n_step;
  rc.gamma = tc.network.gamma;
  rc.prioritized = tc.prioritized;
  rc.alpha = tc.alpha.start;  // the constant the schedule's device value falls back to
  rc.priority_eps = tc.priority_eps;
  rc.seed = seed ^ 0x5A3B1E5EEDull;
  return rc;
}

kernels::LinearRamp ramp(const LinearSchedule& s, std::int64_t whole_run) {
  return {s.start, s.end, s.steps > 0 ? s.steps : whole_run};
}

nlohmann::json without_steps(const TrainConfig& c) {
  auto j = c.to_json();
  j.erase("steps");  // a resumed run may be given a longer budget
  return j;
}

}  // namespace

TrainLoop::TrainLoop(const TrainConfig& config, ProcessGroup* group, const LoopOptions& options)
    : config_((config.validate(), config)),
      options_(options),
      group_(group ? group : &ProcessGroup::solo()),
      report_box_("zs::loop::report"),
      eval_box_("zs::loop::eval") {
  const std::uint64_t seed = rank_seed(config_, *group_);
  env_ = make_env(config_.env, config_.envs, seed, config_.env_params);
  eval_env_ = make_env(config_.env, config_.eval_episodes, config_.seed ^ 0xE7A1E7A1E7A1ull, config_.env_params);
  const Config net = network_for(config_, *env_);  // the run's seed: every rank starts from the same parameters
  trainer_ = std::make_unique<Trainer>(net, trainer_options(config_, group_));
  replay_ = std::make_unique<Replay>(replay_config(config_, seed), config_.envs, env_->obs_dim(),
                                     static_cast<int>(env_->branches().size()));
  const FusedOptions fused{};
  auto fused_for = [&](int rows) {
    return options.fused_acting && rows <= options.fused_acting_max_rows ? &fused : nullptr;
  };
  auto row_blocks_for = [&](int rows) {
    return rows <= options.row_block_acting_max_rows ? options.row_block_acting : 0;
  };
  require(options.head_gather_max >= 0, "LoopOptions::head_gather_max = ", options.head_gather_max,
          "; expected >= 0 (state values the head's launch gathers)");
  if (options.overlap_collect == CollectOverlap::on)
    require(config_.updates == 1, "LoopOptions::overlap_collect: the config has updates = ", config_.updates,
            "; expected 1 (one training step an iteration beside the collect)");
  if (options.overlap_collect != CollectOverlap::off && config_.updates == 1) {
    side_ = std::make_unique<SideLane>(trainer_->stream(), net.precision);
    acting_params_ = std::make_unique<ParamBuffer>(trainer_->layout(), "zs::loop::acting_params");
  }
  actor_ = std::make_unique<Actor>(net, trainer_->layout(), side_ ? side_->stream() : trainer_->stream(), config_.envs,
                                   kernels::ActingRng{seed, 1}, fused_for(config_.envs),
                                   side_ ? (config_.envs <= options.row_block_acting_max_rows ? options.row_block_acting_beside : 0)
                                         : row_blocks_for(config_.envs));
  if (group_->size() > 1) replica_ = std::make_unique<ReplicaCheck>(*trainer_, *group_, kReplicaCheckEvery);
  eval_actor_ = std::make_unique<Actor>(net, trainer_->layout(), trainer_->stream(), config_.eval_episodes,
                                        kernels::ActingRng{config_.seed, 2}, fused_for(config_.eval_episodes),
                                        row_blocks_for(config_.eval_episodes));
  eval_params_ = std::make_unique<ParamBuffer>(trainer_->layout(), "zs::eval_params");
  acted_obs_ = decltype(acted_obs_)("zs::loop::acted_obs", config_.envs, env_->obs_dim());
  counters_ = decltype(counters_)("zs::loop::counters", 1);
  epsilon_ = decltype(epsilon_)("zs::loop::epsilon");
  beta_ = decltype(beta_)("zs::loop::beta");
  alpha_ = decltype(alpha_)("zs::loop::alpha");
  greedy_ = decltype(greedy_)("zs::loop::greedy");  // ε = 0: zero-initialised
  env_->reset(trainer_->stream().exec());
  Kokkos::fence();
}

TrainLoop::~TrainLoop() { trainer_->synchronize(); }

kernels::Schedules<ExecSpace> TrainLoop::schedules() const {
  return {epsilon_, beta_, alpha_, ramp(config_.epsilon, config_.steps), ramp(config_.beta, config_.steps),
          ramp(config_.alpha, config_.steps)};
}

void TrainLoop::enqueue_schedules(const ExecSpace& exec) {
  kernels::advance_schedules<ExecSpace>(exec, counters_, schedules(), config_.envs);
}

kernels::ReplayInsertData<ExecSpace> TrainLoop::insert_data() const {
  return replay_->insert_stage(acted_obs_, actor_->actions(), env_->reward, env_->next_obs, env_->terminated,
                               env_->truncated);
}

kernels::CopyFlat<ExecSpace, float> TrainLoop::obs_copy() const {
  return {Kokkos::View<const float*, MemSpace>(env_->obs.data(), env_->obs.size()),
          Kokkos::View<float*, MemSpace>(acted_obs_.data(), acted_obs_.size())};
}

void TrainLoop::enqueue_insert(const ExecSpace& exec) { kernels::replay_insert(exec, insert_data()); }

void TrainLoop::enqueue_acting(const ExecSpace& exec, const ParamBuffer& params, bool with_schedules, bool insert) {
  actor_->prepare(params, env_->obs);
  if (actor_->row_blocks() != 0) {  // the forward, then the rest as one launch
    actor_->forward(params, env_->obs);
    kernels::CollectStages<ExecSpace> s = actor_->acting_stages(epsilon_);
    if (with_schedules) {
      s.has_schedules = 1;
      s.schedules = {counters_, schedules(), config_.envs};
    }
    s.copy_obs = obs_copy();
    s.copy_count = static_cast<std::int64_t>(acted_obs_.size());
    if (insert) {
      s.insert = insert_data();
      s.insert_count = static_cast<std::int64_t>(config_.envs) * env_->obs_dim();
    }
    env_->step_in_tail(exec, s);
    return;
  }
  // The schedules first, as in the tail; the forward reads none of them.
  if (with_schedules) enqueue_schedules(exec);
  actor_->act(params, env_->obs, epsilon_);
  const kernels::CopyFlat<ExecSpace, float> copy = obs_copy();
  kernels::copy_flat<ExecSpace, float>(exec, copy.src, copy.dst);
  env_->step(exec, actor_->actions());
  if (insert) enqueue_insert(exec);
}

void TrainLoop::enqueue_sample() { replay_->sample(trainer_->stream().exec(), trainer_->batch(), beta_); }

void TrainLoop::begin_overlapped_collect() {
  const auto& exec = trainer_->stream().exec();
  const kernels::CopyFlat<ExecSpace, float> params{trainer_->online().flat(), acting_params_->flat()};
  if (options_.one_launch_head) {
    kernels::launch_loop_head(exec, kernels::AdvanceSchedules<ExecSpace>{counters_, schedules(), config_.envs},
                              replay_->sample_stage(trainer_->batch(), beta_), params, options_.head_gather_max);
  } else {
    enqueue_schedules(exec);
    kernels::copy_flat<ExecSpace, float>(exec, params.src, params.dst);
    // With the insert beside the step, the draw must come before the fork: the side lane's insert
    // writes the tree the draw reads.
    if (insert_beside()) enqueue_sample();
  }
  side_->fork();
  enqueue_acting(side_->exec(), *acting_params_, false, insert_beside());
  if (!options_.one_launch_head && !insert_beside()) enqueue_sample();
}

void TrainLoop::end_overlapped_collect() {
  side_->join();
  const auto& exec = trainer_->stream().exec();
  if (!insert_beside()) enqueue_insert(exec);
  if (options_.replay_beside != ReplayBeside::insert_and_priorities) enqueue_priorities(exec);
}

bool TrainLoop::insert_beside() const { return options_.replay_beside != ReplayBeside::none; }

void TrainLoop::enqueue_priorities(const ExecSpace& exec) {
  replay_->update_priorities(exec, trainer_->loss().priorities, alpha_);
}

void TrainLoop::enqueue_collect() {
  if (!side_) return enqueue_acting(trainer_->stream().exec(), trainer_->online(), true, true);
  // The actor enqueues on the side lane. With no step beside it, it acts on the online parameters
  // themselves, the schedules and the insert in its launches as without the lane: no copy of the
  // parameters, and the row blocks' collect stays two launches.
  side_->fork();
  enqueue_acting(side_->exec(), trainer_->online(), true, true);
  side_->join();
}

void TrainLoop::iterate() {
  Stream& stream = trainer_->stream();
  group_->alive();
  const bool trains = (iterations_ + 1) * config_.envs >= config_.learning_starts &&
                      (iterations_ + 1) % config_.train_every == 0;
  if (side_ && trains) {
    // One graph: the schedules, the acting parameters and the batch's draw, then the step beside
    // the acting (and the replay's work, LoopOptions::replay_beside) (overlap_collect: updates = 1).
    std::function<void()> after_loss;
    if (options_.replay_beside == ReplayBeside::insert_and_priorities)
      after_loss = [this] {
        side_->fork();  // the side lane's insert is queued before this, so it comes first
        enqueue_priorities(side_->exec());
      };
    trainer_->step_with([this] { begin_overlapped_collect(); }, [this] { end_overlapped_collect(); }, after_loss);
    ++iterations_;
    if (replica_) replica_->after_step();
    ++updates_;
    return;
  }
  collect_graph_.run(stream, [this] { enqueue_collect(); });
  ++iterations_;
  if (!trains) return;
  for (int u = 0; u < config_.updates; ++u) {
    // Sampling, the step and the priority update as one graph launch.
    trainer_->step_with([this] { enqueue_sample(); }, [this] { enqueue_priorities(trainer_->stream().exec()); });
    if (replica_) replica_->after_step();
    ++updates_;
  }
}

void TrainLoop::enqueue_eval_step() {
  eval_actor_->prepare(*eval_params_, eval_env_->obs);
  if (eval_actor_->row_blocks() != 0) {
    eval_actor_->forward(*eval_params_, eval_env_->obs);
    eval_env_->step_in_tail(trainer_->stream().exec(), eval_actor_->acting_stages(greedy_));
    return;
  }
  eval_actor_->act(*eval_params_, eval_env_->obs, greedy_);
  eval_env_->step(trainer_->stream().exec(), eval_actor_->actions());
}

void TrainLoop::enqueue_eval() {
  Stream& stream = trainer_->stream();
  const auto& exec = stream.exec();
  // The mailbox keeps only the newest record: take the previous round's before the next one can
  // overwrite it (it normally arrived long ago, and this does not wait).
  collect_eval_record();
  if (eval_seen_ < eval_rounds_) {
    stream.synchronize();
    collect_eval_record();
  }
  ++eval_rounds_;
  kernels::copy_flat<ExecSpace, float>(exec, trainer_->online().flat(), eval_params_->flat());
  eval_env_->reset(exec);
  for (int t = 0; t < eval_env_->max_episode_steps(); ++t)
    eval_graph_.run(stream, [this] { enqueue_eval_step(); });
  Kokkos::parallel_for("zs::loop::eval_header", Kokkos::RangePolicy<ExecSpace>(exec, 0, 1),
                       kernels::EvalHeader<ExecSpace>{eval_box_.device(), static_cast<double>(eval_rounds_),
                                                      static_cast<double>(env_steps())});
  kernels::summarise_episodes<ExecSpace>(exec, eval_env_->first_return, eval_env_->episodes_done, eval_box_.device(),
                                         &kernels::EvalRecord::episodes);
  eval_box_.post(exec);
}

void TrainLoop::collect_eval_record() {
  const auto rec = eval_box_.read();
  if (!rec) return;
  const kernels::EvalRecord& v = rec->value;
  const auto round = static_cast<std::int64_t>(v.round);
  if (round <= eval_seen_) return;
  eval_seen_ = round;
  EvalResult e;
  e.round = round;
  e.env_steps = static_cast<std::int64_t>(v.env_steps);
  e.episodes = v.episodes.count;
  e.mean = v.episodes.mean;
  e.min = v.episodes.min;
  e.max = v.episodes.max;
  pending_eval_.push_back(e);
}

std::optional<EvalResult> TrainLoop::poll_eval() {
  collect_eval_record();
  if (pending_eval_.empty()) return std::nullopt;
  EvalResult e = pending_eval_.front();
  pending_eval_.pop_front();
  return e;
}

void TrainLoop::enqueue_report() {
  const auto& exec = trainer_->stream().exec();
  Kokkos::parallel_for("zs::loop::report", Kokkos::RangePolicy<ExecSpace>(exec, 0, 1),
                       kernels::ReportScalars<ExecSpace>{counters_, epsilon_, beta_, replay_->sampleable(),
                                                         report_box_.device()});
  kernels::summarise_episodes<ExecSpace>(exec, env_->last_return, env_->episodes_done, report_box_.device(),
                                         &kernels::LoopReportRecord::episodes);
  report_box_.post(exec);
  qmon_.observe(exec, actor_->q());
}

LoopReport TrainLoop::report() const {
  LoopReport r;
  r.iterations = iterations_;
  r.env_steps = env_steps();
  r.updates = updates_;
  if (const auto rec = report_box_.read()) {
    const kernels::LoopReportRecord& v = rec->value;
    r.has_record = true;
    r.reported_env_steps = static_cast<std::int64_t>(v.iterations) * config_.envs;
    r.epsilon = v.epsilon;
    r.beta = v.beta;
    r.sampleable = v.sampleable;
    r.recent_return = v.episodes.mean;
    r.episodes = v.episodes.episodes;
  }
  r.guard = trainer_->metrics();
  return r;
}

void TrainLoop::save_loop_state(safetensors::File& f) const {
  f.tensors["loop.counters"] = safetensors::Tensor::from<std::int64_t>({1}, download<std::int64_t>(counters_));
  f.tensors["loop.host"] = safetensors::Tensor::from<std::int64_t>(
      {4}, {iterations_, updates_, eval_rounds_, trainer_->steps_enqueued()});
  f.tensors["actor.counter"] = safetensors::Tensor::from<std::int64_t>({1}, download<std::int64_t>(actor_->counter()));
  f.tensors["eval_actor.counter"] =
      safetensors::Tensor::from<std::int64_t>({1}, download<std::int64_t>(eval_actor_->counter()));
  env_->save_state(f, "env.");
  eval_env_->save_state(f, "eval_env.");
  replay_->save_state(f, "replay.");
}

void TrainLoop::save(const std::string& path) const {
  safetensors::File f;
  const int rank = group_->rank(), ranks = group_->size();
  // The trainer's state is the same on every rank (the all-reduce keeps it so): rank 0's is saved.
  if (rank == 0) trainer_->save_state(f);  // synchronises the stream
  else trainer_->synchronize();
  save_loop_state(f);
  if (ranks > 1) {
    const auto parts = group_->gather(rank == 0 ? std::vector<std::uint8_t>{} : safetensors::serialize(f),
                                      "gathering every rank's loop state for the checkpoint");
    if (rank == 0) {
      for (int r = 1; r < ranks; ++r)
        for (auto& [name, t] : safetensors::parse(parts[r], str("rank ", r, "'s loop state")).tensors)
          f.tensors[str(kRankPrefix, r, ".", name)] = std::move(t);
      f.metadata["loop.ranks"] = std::to_string(ranks);
    }
  }
  f.metadata["loop.format"] = kLoopFormat;
  f.metadata["loop.config"] = without_steps(config_).dump();
  f.metadata["loop.env_steps"] = std::to_string(env_steps());
  // One file, written beside the old one and renamed over it: a kill at any instant leaves
  // either the previous checkpoint or this one, whole. Every rank learns whether it was written.
  group_->agree("writing the checkpoint", [&] {
    if (rank == 0) safetensors::write(path, f);
  });
}

void TrainLoop::load(const std::string& path) {
  const int ranks = group_->size();
  std::vector<std::vector<std::uint8_t>> parts;
  safetensors::File f;
  group_->agree("reading the checkpoint", [&] {
    if (group_->rank() != 0) return;
    require(std::filesystem::is_regular_file(path), "train checkpoint '", path, "' does not exist or is not a file; ",
            "expected a checkpoint written by zerosync train");
    f = safetensors::read(path);
    f.require_checksums("train checkpoint");
    const auto it = f.metadata.find("loop.ranks");
    const std::string saved = it == f.metadata.end() ? "1" : it->second;
    require(saved == std::to_string(ranks), "train checkpoint '", path, "' was written by a run of ", saved,
            " rank(s); this run has ", ranks, ". Expected the same count: resume with mpirun -np ", saved,
            " (or without mpirun for 1)");
    if (ranks == 1) return;
    // Rank r's part: the trainer's tensors and the metadata, with rank r's loop state in place of
    // rank 0's under the plain names.
    for (int r = 0; r < ranks; ++r) {
      safetensors::File part;
      part.metadata = f.metadata;
      part.source = f.source;
      const std::string mine = str(kRankPrefix, r, ".");
      for (const auto& [name, t] : f.tensors) {
        if (name.rfind(kRankPrefix, 0) == 0) {
          if (r > 0 && name.rfind(mine, 0) == 0) part.tensors[name.substr(mine.size())] = t;
        } else if (r == 0 || !is_loop_tensor(name)) {
          part.tensors[name] = t;
        }
      }
      parts.push_back(safetensors::serialize(part));
    }
  });
  if (ranks == 1) return load_file(f);
  const auto mine = group_->scatter(parts, "handing each rank its part of the checkpoint");
  group_->agree("loading the checkpoint", [&] { load_file(safetensors::parse(mine, path)); });
}

void TrainLoop::load_file(const safetensors::File& f) {
  const std::string& path = f.source;
  f.require_checksums("train checkpoint");  // each rank's part carries checksums too
  const auto meta = [&](const char* key) {
    auto it = f.metadata.find(key);
    require(it != f.metadata.end(), "train checkpoint '", path, "': no '", key, "' in its metadata; expected a ",
            "file written by zerosync train (", kLoopFormat, ")");
    return it->second;
  };
  require(meta("loop.format") == kLoopFormat, "train checkpoint '", path, "': format '", meta("loop.format"),
          "'; expected '", kLoopFormat, "'");
  const nlohmann::json saved = parse_json(meta("loop.config"), "train checkpoint '" + path + "': its config metadata");
  require(saved == without_steps(config_), "train checkpoint '", path,
          "' was written with a different config; expected the run's own config.json (only --steps may change)\n"
          "  checkpoint: ", saved.dump(), "\n  this run:   ", without_steps(config_).dump());
  // The loop's own counters, checked before anything changes: a flipped bit must be refused, not
  // trained on (a negative or huge counter would index outside the replay and the schedules).
  const auto host = f.i64("loop.host", {4});
  const auto counters = f.i64("loop.counters", {1});
  const std::int64_t limit = std::int64_t{1} << 50;
  require(host[0] >= 0 && host[0] <= limit / config_.envs, "train checkpoint '", path, "': iterations = ", host[0],
          "; expected a count in [0, ", limit / config_.envs, "]");
  require(host[1] >= 0 && host[1] <= limit && host[2] >= 0 && host[2] <= host[0] && host[3] >= 0 && host[3] <= limit,
          "train checkpoint '", path, "': updates = ", host[1], ", evaluations = ", host[2], ", training steps = ",
          host[3], "; expected counts in [0, 2^50] with at most one evaluation per iteration");
  require(counters[0] == host[0], "train checkpoint '", path, "': the device iteration counter is ", counters[0],
          " but the host's is ", host[0], "; expected the same");
  require(meta("loop.env_steps") == std::to_string(host[0] * config_.envs), "train checkpoint '", path,
          "': its metadata says ", meta("loop.env_steps"), " environment steps but its counters ",
          host[0] * config_.envs, "; expected the same");
  const auto actor_counter = f.i64("actor.counter", {1}), eval_counter = f.i64("eval_actor.counter", {1});
  trainer_->load_state(f);
  require(host[3] == trainer_->steps_enqueued(), "train checkpoint '", path, "': the loop is at training step ",
          host[3], " but the trainer at ", trainer_->steps_enqueued(), "; expected the same");
  upload(counters_, counters);
  upload(actor_->counter(), actor_counter);
  upload(eval_actor_->counter(), eval_counter);
  env_->load_state(f, "env.");
  eval_env_->load_state(f, "eval_env.");
  replay_->load_state(f, "replay.");
  Kokkos::fence();
  iterations_ = host[0];
  updates_ = host[1];
  eval_rounds_ = eval_seen_ = host[2];
}

void TrainLoop::save_eval_params(const std::string& path) const {
  trainer_->synchronize();
  safetensors::File f;
  f.metadata["format"] = "zerosync-params-1";
  f.metadata["config"] = trainer_->config().to_json().dump();
  for (const auto& t : trainer_->layout().tensors())
    f.tensors[t.name] = safetensors::Tensor::from<float>({t.shape.begin(), t.shape.end()},
                                                        trainer_->read_tensor(*eval_params_, t.name));
  safetensors::write(path, f);
}

}  // namespace zs
