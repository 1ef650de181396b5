#include "rl/train_loop.hpp"

#include <filesystem>

#include "kernels/loop_schedules.hpp"
#include "backends/host_copy.hpp"
#include "core/safetensors.hpp"

namespace zs {

namespace {

constexpr const char* kLoopFormat = "zerosync-train-loop-1";

// Report slots: the device iteration counter, ε, β, the sampleable count, then the training
// envs' episode summary. Evaluation slots: round, env steps, then the summary.
enum report_slot : int { r_iterations = 0, r_epsilon, r_beta, r_sampleable, r_summary, r_size = r_summary + kernels::episode_summary::size };
enum eval_slot : int { e_round = 0, e_env_steps, e_summary, e_size = e_summary + kernels::episode_summary::size };

template <class Exec>
struct SetTwo {
  Kokkos::View<double*, typename Exec::memory_space> out;
  double a, b;
  KOKKOS_INLINE_FUNCTION void operator()(const int) const {
    out(0) = a;
    out(1) = b;
  }
};

Config network_for(const TrainConfig& tc, const VecEnv& env) {
  Config c = tc.network;
  c.state_dim = env.obs_dim();
  c.branches = env.branches();
  c.seed = tc.seed;
  return c;
}

TrainerOptions trainer_options(const TrainConfig& tc) {
  TrainerOptions o;
  o.batch_size = tc.batch_size;
  o.guard = tc.guard;
  o.use_graph = true;
  return o;
}

ReplayConfig replay_config(const TrainConfig& tc) {
  ReplayConfig rc;
  rc.capacity = tc.replay_capacity;
  rc.n_step = tc.network.n_step;
  rc.gamma = tc.network.gamma;
  rc.prioritized = tc.prioritized;
  rc.alpha = tc.alpha.start;  // the constant the schedule's device value falls back to
  rc.priority_eps = tc.priority_eps;
  rc.seed = tc.seed ^ 0x5A3B1E5EEDull;
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

TrainLoop::TrainLoop(const TrainConfig& config)
    : config_((config.validate(), config)),
      report_box_(r_size),
      eval_box_(e_size) {
  env_ = make_env(config_.env, config_.envs, config_.seed, config_.env_params);
  eval_env_ = make_env(config_.env, config_.eval_episodes, config_.seed ^ 0xE7A1E7A1E7A1ull, config_.env_params);
  const Config net = network_for(config_, *env_);
  trainer_ = std::make_unique<Trainer>(net, trainer_options(config_));
  replay_ = std::make_unique<Replay>(replay_config(config_), config_.envs, env_->obs_dim(),
                                     static_cast<int>(env_->branches().size()));
  actor_ = std::make_unique<Actor>(net, trainer_->layout(), trainer_->stream(), config_.envs,
                                   kernels::ActingRng{config_.seed, 1});
  eval_actor_ = std::make_unique<Actor>(net, trainer_->layout(), trainer_->stream(), config_.eval_episodes,
                                        kernels::ActingRng{config_.seed, 2});
  eval_params_ = std::make_unique<ParamBuffer>(trainer_->layout(), "zs::eval_params");
  acted_obs_ = decltype(acted_obs_)("zs::loop::acted_obs", config_.envs, env_->obs_dim());
  counters_ = decltype(counters_)("zs::loop::counters", 1);
  epsilon_ = decltype(epsilon_)("zs::loop::epsilon");
  beta_ = decltype(beta_)("zs::loop::beta");
  alpha_ = decltype(alpha_)("zs::loop::alpha");
  greedy_ = decltype(greedy_)("zs::loop::greedy");  // ε = 0: zero-initialised
  report_values_ = decltype(report_values_)("zs::loop::report", r_size);
  eval_values_ = decltype(eval_values_)("zs::loop::eval", e_size);
  env_->reset(trainer_->stream().exec());
  Kokkos::fence();
}

TrainLoop::~TrainLoop() { trainer_->synchronize(); }

void TrainLoop::enqueue_collect() {
  const auto& exec = trainer_->stream().exec();
  const kernels::Schedules<ExecSpace> schedules{epsilon_,
                                                beta_,
                                                alpha_,
                                                ramp(config_.epsilon, config_.steps),
                                                ramp(config_.beta, config_.steps),
                                                ramp(config_.alpha, config_.steps)};
  kernels::advance_schedules<ExecSpace>(exec, counters_, schedules, config_.envs);
  actor_->act(trainer_->online(), env_->obs, epsilon_);
  kernels::copy_flat<ExecSpace, float>(
      exec, Kokkos::View<const float*, MemSpace>(env_->obs.data(), env_->obs.size()),
      Kokkos::View<float*, MemSpace>(acted_obs_.data(), acted_obs_.size()));
  env_->step(exec, actor_->actions());
  replay_->insert(exec, acted_obs_, actor_->actions(), env_->reward, env_->next_obs, env_->terminated,
                  env_->truncated);
}

void TrainLoop::iterate() {
  Stream& stream = trainer_->stream();
  collect_graph_.run(stream, [this] { enqueue_collect(); });
  ++iterations_;
  if (env_steps() < config_.learning_starts || iterations_ % config_.train_every != 0) return;
  for (int u = 0; u < config_.updates; ++u) {
    sample_graph_.run(stream, [this] { replay_->sample(trainer_->stream().exec(), trainer_->batch(), beta_); });
    trainer_->step();
    update_graph_.run(stream, [this] {
      replay_->update_priorities(trainer_->stream().exec(), trainer_->loss().priorities, alpha_);
    });
    ++updates_;
  }
}

void TrainLoop::enqueue_eval_step() {
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
                       SetTwo<ExecSpace>{eval_values_, static_cast<double>(eval_rounds_),
                                         static_cast<double>(env_steps())});
  kernels::summarise_episodes<ExecSpace>(exec, eval_env_->first_return, eval_env_->episodes_done, eval_values_,
                                         e_summary);
  eval_box_.post(exec, eval_values_);
}

void TrainLoop::collect_eval_record() {
  const auto rec = eval_box_.read();
  if (!rec) return;
  const auto& v = rec->values;
  const auto round = static_cast<std::int64_t>(v[e_round]);
  if (round <= eval_seen_) return;
  eval_seen_ = round;
  EvalResult e;
  e.round = round;
  e.env_steps = static_cast<std::int64_t>(v[e_env_steps]);
  e.episodes = v[e_summary + kernels::episode_summary::count];
  e.mean = v[e_summary + kernels::episode_summary::mean];
  e.min = v[e_summary + kernels::episode_summary::min];
  e.max = v[e_summary + kernels::episode_summary::max];
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
                                                         report_values_, r_iterations});
  kernels::summarise_episodes<ExecSpace>(exec, env_->last_return, env_->episodes_done, report_values_, r_summary);
  report_box_.post(exec, report_values_);
  qmon_.observe(exec, actor_->q());
}

LoopReport TrainLoop::report() const {
  LoopReport r;
  r.iterations = iterations_;
  r.env_steps = env_steps();
  r.updates = updates_;
  if (const auto rec = report_box_.read()) {
    const auto& v = rec->values;
    r.has_record = true;
    r.reported_env_steps = static_cast<std::int64_t>(v[r_iterations]) * config_.envs;
    r.epsilon = v[r_epsilon];
    r.beta = v[r_beta];
    r.sampleable = v[r_sampleable];
    r.recent_return = v[r_summary + kernels::episode_summary::mean];
    r.episodes = v[r_summary + kernels::episode_summary::episodes];
  }
  r.guard = trainer_->metrics();
  return r;
}

void TrainLoop::save(const std::string& dir) const {
  std::filesystem::create_directories(dir);
  trainer_->synchronize();
  trainer_->save(dir + "/trainer.safetensors");
  safetensors::File f;
  f.metadata["format"] = kLoopFormat;
  f.metadata["config"] = without_steps(config_).dump();
  f.metadata["env_steps"] = std::to_string(env_steps());
  f.tensors["loop.counters"] = safetensors::Tensor::from<std::int64_t>({1}, download<std::int64_t>(counters_));
  f.tensors["loop.host"] = safetensors::Tensor::from<std::int64_t>(
      {4}, {iterations_, updates_, eval_rounds_, trainer_->steps_enqueued()});
  f.tensors["actor.counter"] = safetensors::Tensor::from<std::int64_t>({1}, download<std::int64_t>(actor_->counter()));
  f.tensors["eval_actor.counter"] =
      safetensors::Tensor::from<std::int64_t>({1}, download<std::int64_t>(eval_actor_->counter()));
  env_->save_state(f, "env.");
  eval_env_->save_state(f, "eval_env.");
  replay_->save_state(f, "replay.");
  safetensors::write(dir + "/loop.safetensors", f);
}

void TrainLoop::load(const std::string& dir) {
  const std::string path = dir + "/loop.safetensors";
  require(std::filesystem::exists(path), "train checkpoint '", dir, "': no loop.safetensors in it; expected a ",
          "directory written by zerosync train (trainer.safetensors + loop.safetensors)");
  const safetensors::File f = safetensors::read(path);
  const auto meta = [&](const char* key) {
    auto it = f.metadata.find(key);
    require(it != f.metadata.end(), "train checkpoint '", path, "': no '", key, "' in its metadata; expected a ",
            "file written by zerosync train (", kLoopFormat, ")");
    return it->second;
  };
  require(meta("format") == kLoopFormat, "train checkpoint '", path, "': format '", meta("format"), "'; expected '",
          kLoopFormat, "'");
  nlohmann::json saved;
  try {
    saved = parse_json(meta("config"), "train checkpoint '" + path + "': its config metadata");
  } catch (const nlohmann::json::parse_error&) {
    fail("train checkpoint '", path, "': its config metadata is not valid JSON");
  }
  require(saved == without_steps(config_), "train checkpoint '", path,
          "' was written with a different config; expected the run's own config.json (only --steps may change)\n"
          "  checkpoint: ", saved.dump(), "\n  this run:   ", without_steps(config_).dump());
  trainer_->load(dir + "/trainer.safetensors");
  const auto host = f.i64("loop.host", {4});
  require(host[3] == trainer_->steps_enqueued(), "train checkpoint '", dir, "': loop.safetensors is at training step ",
          host[3], " but trainer.safetensors at ", trainer_->steps_enqueued(),
          "; expected the same (the two files come from different saves)");
  upload(counters_, f.i64("loop.counters", {1}));
  upload(actor_->counter(), f.i64("actor.counter", {1}));
  upload(eval_actor_->counter(), f.i64("eval_actor.counter", {1}));
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
