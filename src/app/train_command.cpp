#include "app/train_command.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <ctime>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "app/explain.hpp"
#include "app/progress.hpp"
#include "app/rank_control.hpp"
#include "app/run_dir.hpp"
#include "core/file_kind.hpp"
#include "rl/train_loop.hpp"

namespace zs {

namespace {

std::atomic<bool> g_stop{false};
std::atomic<int> g_signal{0};

// Ctrl-C (SIGINT) and a polite kill (SIGTERM, what schedulers and `kill` send) both ask the loop to
// stop at the end of its iteration, save a checkpoint and report. A second signal of either kind
// ends the program at once; the checkpoint on disk is then the previous one, whole (it is replaced
// by one rename).
extern "C" void on_stop_signal(int sig) {
  g_signal.store(sig);
  g_stop.store(true);
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
}

// Installs the handlers for the run and restores the previous ones afterwards.
struct StopSignalScope {
  void (*previous_int)(int);
  void (*previous_term)(int);
  StopSignalScope() : previous_int(std::signal(SIGINT, on_stop_signal)), previous_term(std::signal(SIGTERM, on_stop_signal)) {
    g_stop.store(false);
    g_signal.store(0);
  }
  ~StopSignalScope() {
    std::signal(SIGINT, previous_int);
    std::signal(SIGTERM, previous_term);
  }
};

std::string default_run_dir(const std::string& env) {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  std::ostringstream os;
  os << "runs/" << env << "-" << std::put_time(&tm, "%Y%m%d-%H%M%S");
  return os.str();
}

TrainConfig resolve_config(const TrainCommand& cmd, const RunPaths& run) {
  if (cmd.resume) {
    require(cmd.env.empty() && cmd.config_path.empty() && !cmd.envs && !cmd.seed,
            "train --resume: --env, --config, --envs and --seed are not allowed; the run continues with its ",
            "own ", run.config(), " (only --steps may change)");
    require(!file_kind(run.config()).empty(), "train --resume: no config.json in '", run.dir,
            "'; expected the directory of an earlier zerosync train run");
    TrainConfig c = explained("train --resume: reading '" + run.config() + "'",
                              [&] { return TrainConfig::from_file(run.config()); });
    if (cmd.steps) c.steps = *cmd.steps;
    c.validate();
    return c;
  }
  std::string env = cmd.env.empty() ? "cartpole" : cmd.env;
  require(env == "cartpole" || env == "market", "train: --env ", env, " is invalid; expected cartpole or market");
  TrainConfig c = TrainConfig::defaults_for(env);
  if (!cmd.config_path.empty()) {
    require_input_file(cmd.config_path, "train --config");
    c = explained("train: reading the config '" + cmd.config_path + "'",
                  [&] { return TrainConfig::from_file(cmd.config_path, c); });
    require(cmd.env.empty() || c.env == cmd.env, "train: --env ", cmd.env, " and the config's env '", c.env,
            "' disagree; expected one of them, or both the same");
  }
  if (cmd.steps) c.steps = *cmd.steps;
  if (cmd.envs) c.envs = *cmd.envs;
  if (cmd.seed) c.seed = *cmd.seed;
  c.validate();
  return c;
}

const char* guard_word(const std::optional<GuardStatus>& g) {
  if (!g || g->step < 0) return "-";
  if (g->halt_nan) return "NaN";
  if (g->halt_loss_clip) return "loss-clip";
  if (g->halt_grad_collapse) return "collapse";
  return "ok";
}

std::string rate(double per_s) { return compact(per_s) + "/s"; }

}  // namespace

void request_train_stop() { g_stop.store(true); }

TrainSummary run_train_command(const TrainCommand& cmd, std::ostream& leader_log) {
  // With several ranks, rank 0 alone prints and writes the run directory (which may exist on its
  // machine only); every step that can fail there is agreed on, so all ranks stop together.
  ProcessGroup& group = cmd.group ? *cmd.group : ProcessGroup::solo();
  const bool leader = group.rank() == 0;
  std::ostream silent(nullptr);
  std::ostream& log = leader ? leader_log : silent;
  RunPaths run{cmd.out};
  TrainConfig config;
  group.agree("train: preparing the run", [&] {
    if (!leader) return;
    if (run.dir.empty()) {
      require(!cmd.resume, "train --resume: expected --out RUN_DIR, the directory of the run to continue");
      run.dir = default_run_dir(cmd.env.empty() ? "cartpole" : cmd.env);
    }
    check_run_dir(run, cmd.resume);
    config = resolve_config(cmd, run);
    create_run_dir(run);
  });
  if (group.size() > 1) {
    // Every rank trains with rank 0's config, the same bits (the file was read there alone).
    const std::string text = text_from_bytes(group.broadcast(to_bytes(config.to_json().dump()), "sharing the config"));
    config = TrainConfig::from_json(parse_json(text, "the config rank 0 shared"));
  }

  std::unique_ptr<TrainLoop> built;
  group.agree("train: building", [&] {
    built = explained("train: building the environments, replay and network",
                      [&] { return std::make_unique<TrainLoop>(config, &group); });
  });
  TrainLoop& loop = *built;
  const auto save_checkpoint = [&] {
    explained("train: saving the checkpoint to '" + run.checkpoint() + "'", [&] { loop.save(run.checkpoint()); });
  };
  std::int64_t start_steps = 0;
  if (cmd.resume) {
    group.agree("train --resume: finding the checkpoint", [&] {
      require(!leader || !file_kind(run.checkpoint()).empty(), "train --resume: no checkpoint '", run.checkpoint(),
              "'; expected one written by an earlier run (at checkpoint_every, Ctrl-C or the end)");
    });
    explained("train --resume: loading the checkpoint '" + run.checkpoint() + "'",
              [&] { loop.load(run.checkpoint()); });
    start_steps = loop.env_steps();
    group.agree("train --resume: trimming the logs", [&] {
      if (!leader) return;
      CsvLog::truncate_after(run.metrics(), start_steps);
      CsvLog::truncate_after(run.evals(), start_steps);
    });
    log << "resuming " << run.dir << " at " << start_steps << " environment steps\n";
  } else {
    group.agree("train: writing the config", [&] {
      if (!leader) return;
      std::ofstream out(run.config());
      out << std::setw(2) << config.to_json() << '\n';
      out.flush();
      require(out.good(), "train: cannot write '", run.config(), "' (disk full or file-size limit?)");
    });
  }
  // A new run starts its logs anew: check_run_dir found no file of an older one to continue.
  const CsvLog::Mode mode = cmd.resume ? CsvLog::Mode::append : CsvLog::Mode::fresh;
  std::optional<CsvLog> metrics, evals;
  group.agree("train: opening the logs", [&] {
    if (!leader) return;
    metrics.emplace(run.metrics(), std::vector<std::string>{"env_steps", "wall_s", "updates", "episodes",
                                                            "recent_return", "loss", "grad_norm", "epsilon", "beta",
                                                            "replay", "guard"},
                    mode);
    evals.emplace(run.evals(), std::vector<std::string>{"env_steps", "round", "episodes", "mean", "min", "max", "wall_s"},
                  mode);
  });

  log << "zerosync train: env " << config.env << ", " << config.envs << " envs, " << config.steps
      << " environment steps, batch " << config.batch_size << ", network " << loop.trainer().layout().size()
      << " floats; run directory " << run.dir << "\n";
  if (group.size() > 1)
    log << "  " << group.size() << " ranks, each with its own " << config.envs << " envs, replay and batch of "
        << config.batch_size << " (seeds " << config.seed << " + rank); gradients averaged every step\n";

  TrainSummary s;
  s.run_dir = run.dir;
  s.checkpoint = run.checkpoint();
  s.best_eval = s.last_eval = std::nan("");
  const StopSignalScope stop_signals;
  // From here to the end every rank reports progress each iteration (a watchdog ends a rank
  // blocked for --peer-timeout: scale-out.md).
  const ProcessGroup::Watch watch(group);
  ProgressBar bar(log, config.steps, progress_mode(cmd.quiet || !leader, &log == &std::cerr && isatty(STDERR_FILENO)));
  const auto t0 = std::chrono::steady_clock::now();
  const auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  const auto next_multiple = [&](std::int64_t every) { return every > 0 ? (start_steps / every + 1) * every : -1; };
  std::int64_t next_eval = next_multiple(config.eval_every), next_ckpt = next_multiple(config.checkpoint_every);
  double next_report = 0, last_rate_t = 0;
  std::int64_t last_rate_steps = start_steps, last_logged_steps = -1;
  double steps_per_s = 0;
  std::string stop_message;
  bool healthy = true;
  // Rank 0's reason to stop, until the ranks act on it together (RankControl).
  std::optional<StopReason> pending;
  RankControl control(group, loop.replica_check(), loop.trainer().communicator());

  const auto handle_eval = [&](const EvalResult& e) {
    evals->row({std::to_string(e.env_steps), std::to_string(e.round), fmt_num(e.episodes), fmt_num(e.mean),
               fmt_num(e.min), fmt_num(e.max), fmt_num(elapsed(), 4)});
    s.last_eval = e.mean;
    std::ostringstream os;
    os << "eval @ " << e.env_steps << " steps: mean return " << fmt_num(e.mean, 5) << " over " << e.episodes
       << " episodes (min " << fmt_num(e.min, 4) << ", max " << fmt_num(e.max, 4) << ")";
    if (std::isnan(s.best_eval) || e.mean > s.best_eval) {
      s.best_eval = e.mean;
      explained("train: saving the best model to '" + run.best_model() + "'",
                [&] { loop.save_eval_params(run.best_model()); });
      s.best_model = run.best_model();
      os << " — best so far, saved";
    }
    bar.message(os.str());
    if (config.stop_when_solved && e.mean >= config.solve_return && !pending) {
      std::ostringstream m;
      m << "solved: evaluation mean return " << fmt_num(e.mean, 5) << " >= " << config.solve_return << " over "
        << e.episodes << " episodes at " << e.env_steps << " environment steps";
      pending = StopReason{TrainOutcome::solved, m.str(), true};
    }
  };
  const auto stop = [&](const StopReason& r) {
    s.outcome = r.outcome;
    stop_message = r.message;
    healthy = r.healthy;
    s.signal = r.signal;
  };
  // The signal that asked this rank to stop (SIGINT for a stop asked without one), 0: none.
  const auto stop_signal = [] { return g_stop.load() ? (g_signal.load() != 0 ? g_signal.load() : SIGINT) : 0; };

  for (;;) {
    // The last iteration is a control point too: a stop rank 0 has not shared yet (the guard's)
    // must not end as "finished" with a checkpoint.
    const auto decision = control.due(loop.iterations()) || loop.done() ? control.decide(pending, stop_signal())
                                                                         : std::optional<StopReason>();
    if (decision && decision->outcome != TrainOutcome::interrupted) {
      stop(*decision);
      break;
    }
    if (loop.done()) {
      s.outcome = TrainOutcome::finished;
      stop_message = "finished the " + std::to_string(config.steps) + " environment steps";
      break;
    }
    if (decision) {
      stop(*decision);
      break;
    }
    loop.iterate();
    const std::int64_t steps = loop.env_steps();
    if (leader && next_eval > 0 && steps >= next_eval) {
      loop.enqueue_eval();
      next_eval += config.eval_every;
    }
    if (leader)
      while (auto e = loop.poll_eval()) handle_eval(*e);
    const double now = elapsed();
    if (leader && (now >= next_report || loop.done())) {
      next_report = now + 0.25;
      loop.enqueue_report();
      const LoopReport r = loop.report();
      if (now - last_rate_t >= 1.0) {
        steps_per_s = (steps - last_rate_steps) / (now - last_rate_t);
        last_rate_t = now;
        last_rate_steps = steps;
      }
      if (r.has_record && r.reported_env_steps != last_logged_steps) {
        last_logged_steps = r.reported_env_steps;
        metrics->row({std::to_string(r.reported_env_steps), fmt_num(now, 4), std::to_string(r.updates),
                     fmt_num(r.episodes), fmt_num(r.recent_return, 5), r.guard ? fmt_num(r.guard->raw_loss) : "nan",
                     r.guard ? fmt_num(r.guard->raw_grad_norm) : "nan", fmt_num(r.epsilon, 4), fmt_num(r.beta, 4),
                     fmt_num(r.sampleable, 10), guard_word(r.guard)});
      }
      std::ostringstream st;
      st << compact(static_cast<double>(steps)) << "/" << compact(static_cast<double>(config.steps)) << " | "
         << rate(steps_per_s) << " | return " << compact(r.recent_return) << " | eval "
         << compact(s.last_eval) << " | loss " << (r.guard ? compact(r.guard->raw_loss) : "-") << " | eps "
         << fmt_num(r.epsilon, 2) << " | guard " << guard_word(r.guard);
      bar.update(steps, st.str());
      if (r.guard && r.guard->halt() && !(pending && !pending->healthy)) {
        std::ostringstream m;
        m << "stopped by the training guard at step " << r.guard->step << " ("
          << (r.guard->halt_nan ? "NaN/Inf in the loss or gradient"
                                : r.guard->halt_loss_clip ? "loss above guard.loss_clip" : "gradient norm collapsed")
          << ", loss " << r.guard->raw_loss << ", grad norm " << r.guard->raw_grad_norm << ")";
        pending = StopReason{TrainOutcome::guard_stopped, m.str(), false};
      } else if (!(pending && !pending->healthy)) {
        try {
          loop.poll_q();
        } catch (const Error& e) {
          pending = StopReason{TrainOutcome::q_stopped, std::string("stopped by the Q-value monitor: ") + e.what(), false};
        }
      }
      // Alone, a halt stops at once; ranks stop together at the next control point.
      if (control.alone() && pending && !pending->healthy) {
        stop(*pending);
        break;
      }
    }
    if (next_ckpt > 0 && steps >= next_ckpt) {
      // The ranks agree first: a checkpoint is only written while every rank goes on.
      if (!control.alone()) {
        if (const auto d = control.decide(pending, stop_signal())) {
          stop(*d);
          break;
        }
      }
      save_checkpoint();
      next_ckpt += config.checkpoint_every;
    }
  }
  bar.finish();
  // Evaluations still in flight belong to the record of this run.
  loop.synchronize();
  if (leader)
    while (auto e = loop.poll_eval()) handle_eval(*e);
  if (ReplicaCheck* replicas = loop.replica_check()) {
    // The ranks' parameters after the last step, compared once more before they are saved.
    replicas->enqueue();
    loop.synchronize();
    replicas->compare();
  }

  if (healthy) save_checkpoint();
  s.env_steps = loop.env_steps();
  s.updates = loop.updates();
  s.wall_s = elapsed();
  const std::string plot_error =
      leader ? draw_learning_curve(run, "zerosync train " + config.env + " (seed " + std::to_string(config.seed) + ")",
                                   config.env == "cartpole" ? config.solve_return : 0.0)
             : std::string("rank 0 draws it");
  s.plot = plot_error.empty() ? run.plot() : "";
  s.message = stop_message;

  log << "zerosync train: " << stop_message << "\n"
      << "  " << s.env_steps << " environment steps, " << s.updates << " training steps in " << fmt_num(s.wall_s, 3)
      << " s (" << compact(s.env_steps / std::max(s.wall_s, 1e-9)) << " env steps/s)\n";
  if (!std::isnan(s.best_eval)) log << "  best evaluation mean return: " << fmt_num(s.best_eval, 5) << "\n";
  log << "  run directory: " << run.dir << "\n";
  if (healthy)
    log << "  checkpoint:    " << run.checkpoint() << "  (continue: zerosync train --resume --out " << run.dir << ")\n";
  else if (!file_kind(run.checkpoint()).empty())
    log << "  last good checkpoint: " << run.checkpoint() << " (saved before the problem; not overwritten)\n";
  else
    log << "  no checkpoint was saved before the problem (checkpoint_every = " << config.checkpoint_every << ")\n";
  if (!s.best_model.empty()) log << "  best model:    " << s.best_model << "\n";
  if (!s.plot.empty()) log << "  plot:          " << s.plot << "\n";
  else log << "  plot: not drawn: " << plot_error << "\n";
  log.flush();
  return s;
}

}  // namespace zs
