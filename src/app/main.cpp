// The zerosync command-line program. With no subcommand it prints the build configuration
// and runs the self-check, so a fresh build can be trusted in one command.
//
// It never ends by a signal or an abort: every failure is a message on stderr and one of the
// exit statuses in docs/cli.md. Started by an MPI launcher (`mpirun -np N zerosync train …`), it
// is one rank of a data-parallel run (docs/scale-out.md): an error every rank agreed on ends
// every rank with its status; a lost rank, or an error on one rank alone, ends the whole run
// through MPI (no rank is left waiting).
#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <memory>
#include <new>
#include <string>

#include "app/build_info.hpp"
#include "app/explain.hpp"
#include "app/self_check.hpp"
#include "app/step_command.hpp"
#include "app/train_command.hpp"
#include "backends/backend.hpp"
#include "backends/process_group.hpp"
#include "core/error.hpp"
#include "core/seed.hpp"

namespace {

constexpr int kOk = 0;
constexpr int kSelfCheckFailed = 1;
constexpr int kBadInput = 2;
constexpr int kStopped = 3;
constexpr int kPeerFailure = zs::ProcessGroup::kPeerFailureStatus;  // 4
constexpr int kBadCommandLine = 109;  // CLI11's code for extra arguments, documented since the first release
constexpr int kInterrupted = 130;
constexpr int kTerminated = 143;

int run(int argc, char** argv, zs::ProcessGroup& group) {
  // Kokkos takes its own --kokkos-* options out of argv before ours are parsed.
  // Kokkos warns on every start when OMP_PROC_BIND is unset; binding stays the user's choice.
  setenv("OMP_PROC_BIND", "false", 0);
  const auto kokkos = zs::explained("Kokkos could not start (check the --kokkos-* options, e.g. --kokkos-threads=4)",
                                    [&] { return std::make_unique<Kokkos::ScopeGuard>(argc, argv); });
  CLI::App app{"zerosync: zero-sync training hot path of a BDQ-C51 DQN (Kokkos: CUDA or OpenMP)"};
  app.require_subcommand(0, 1);
  auto* info = app.add_subcommand("info", "print the build configuration: backend, Kokkos, devices");
  auto* check = app.add_subcommand("self-check", "run the end-to-end self-check and exit 0 if it passes");
  int replays = 3;
  check->add_option("--replays", replays, "graph replays to check")->check(CLI::Range(1, 1000000));
  zs::StepCommand step_cmd;
  auto* step = app.add_subcommand("step", "train K steps on one batch from a safetensors file (interop)");
  step->add_option("--config", step_cmd.config_path, "network and optimiser config (JSON)")->required();
  step->add_option("--batch", step_cmd.batch_path, "batch (safetensors: states, next_states, actions, rewards, dones, weights)")->required();
  step->add_option("--params", step_cmd.params_path, "initial parameters in PyTorch nn.Linear naming (default: init from seed)");
  step->add_option("--steps", step_cmd.steps, "steps on the batch")->check(CLI::Range(1, 100000000));
  step->add_option("--out", step_cmd.out_path, "results (safetensors)")->required();
  double peer_timeout = zs::ProcessGroup::kDefaultTimeout;
  const auto peer_timeout_help = "under mpirun: seconds a rank may wait for the others before the run stops, naming "
                                 "the ranks that did not answer (default 120)";
  auto* step_timeout = step->add_option("--peer-timeout", peer_timeout, peer_timeout_help)->check(CLI::Range(1e-3, 1e6));
  zs::TrainCommand train_cmd;
  std::int64_t train_steps = 0;
  int train_envs = 0;
  std::string train_seed;  // as text: zs::parse_seed is the one seed policy, here and in every config
  auto* train = app.add_subcommand("train", "train an agent: environments, replay and learning on the device");
  train->add_option("--env", train_cmd.env, "environment (default cartpole)")->check(CLI::IsMember({"cartpole", "market"}));
  train->add_option("--config", train_cmd.config_path, "training config (JSON, docs/train.md); missing keys keep the env's defaults");
  auto* steps_opt = train->add_option("--steps", train_steps, "environment steps in total")->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 50));
  auto* envs_opt = train->add_option("--envs", train_envs, "environments stepped together")->check(CLI::Range(1, 1 << 20));
  auto* seed_opt = train->add_option("--seed", train_seed, "seed for everything (init, envs, exploration, replay): an integer in [0, 2^64 - 1]")
                       ->check([](const std::string& s) {
                         try {
                           zs::parse_seed(s, "--seed");
                           return std::string();
                         } catch (const zs::Error& e) {
                           return std::string(e.what());
                         }
                       });
  train->add_option("--out", train_cmd.out, "run directory (default runs/<env>-<date>-<time>)");
  train->add_flag("--resume", train_cmd.resume, "continue the run in --out from its checkpoint");
  train->add_flag("--quiet", train_cmd.quiet, "no progress output (the start line, errors and the summary stay)");
  auto* train_timeout = train->add_option("--peer-timeout", peer_timeout, peer_timeout_help)->check(CLI::Range(1e-3, 1e6));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 gives each kind of mistake its own code (104 a value of the wrong type, 105 one out
    // of range, 106 a missing option, ...); a user needs one: the command line was wrong.
    // --help is a ParseError too, with code 0.
    return app.exit(e) == 0 ? kOk : kBadCommandLine;
  }
  if (steps_opt->count()) train_cmd.steps = train_steps;
  if (envs_opt->count()) train_cmd.envs = train_envs;
  if (seed_opt->count()) train_cmd.seed = zs::parse_seed(train_seed, "--seed");
  if (step_timeout->count() || train_timeout->count()) group.set_timeout(peer_timeout);
  train_cmd.group = step_cmd.group = &group;
  if (train->parsed()) {
    const zs::TrainSummary s = zs::run_train_command(train_cmd, std::cerr);
    // 128 + the signal, as a shell reports a program the signal ended: 130 for Ctrl-C, 143 for SIGTERM.
    if (s.outcome == zs::TrainOutcome::interrupted) return s.signal == SIGTERM ? kTerminated : kInterrupted;
    return s.outcome == zs::TrainOutcome::guard_stopped || s.outcome == zs::TrainOutcome::q_stopped ? kStopped : kOk;
  }
  if (step->parsed()) {
    zs::run_step_command(step_cmd, std::cout);
    return kOk;
  }
  const bool all = app.get_subcommands().empty();
  if (all || info->parsed()) zs::print_build_info(std::cout);
  if (all || check->parsed()) {
    std::cout << "self-check:\n";
    const bool ok = zs::run_self_check(std::cout, replays);
    std::cout << (ok ? "self-check passed" : "self-check FAILED") << std::endl;
    return ok ? kOk : kSelfCheckFailed;
  }
  return kOk;
}

int report(const char* what) {
  std::cerr << "zerosync: error: " << what << std::endl;
  return kBadInput;
}

// An error on this rank. Alone, or when every rank raised it (a SharedError, printed by rank 0),
// the ranks end together with `status`; otherwise the others may be waiting for this one (or
// this one for a lost one), so the whole run ends here.
int fail_rank(zs::ProcessGroup& group, const char* what, int status, bool shared) {
  if (group.size() == 1) {
    report(what);
    return status;
  }
  if (shared) {
    if (group.rank() == 0) report(what);
    return status;
  }
  std::cerr << "zerosync: error: rank " << group.rank() << " of " << group.size() << ": " << what << std::endl;
  group.abort(status);
  return status;  // abort() ends the process; a virtual call's [[noreturn]] is not seen here
}

}  // namespace

int main(int argc, char** argv) {
  // A closed pipe (`zerosync info | head -1`) or a file-size limit (`ulimit -f`) would end the
  // program by a signal in the middle of a write; ignored, they make the write fail instead,
  // which is reported below like any other error.
  std::signal(SIGPIPE, SIG_IGN);
  std::signal(SIGXFSZ, SIG_IGN);
  // Before Kokkos: MPI starts first and ends last. Destroying the group ends MPI.
  std::unique_ptr<zs::ProcessGroup> group;
  try {
    group = zs::ProcessGroup::launch(argc, argv);
  } catch (const std::exception& e) {
    return report(e.what());
  }
  int status = kBadInput;
  try {
    status = run(argc, argv, *group);
  } catch (const zs::PeerFailure& e) {
    return fail_rank(*group, e.what(), kPeerFailure, false);
  } catch (const zs::SharedError& e) {
    return fail_rank(*group, e.what(), kBadInput, true);
  } catch (const zs::Error& e) {
    return fail_rank(*group, e.what(), kBadInput, false);
  } catch (const std::bad_alloc&) {
    return fail_rank(*group,
                     "out of memory: a buffer could not be allocated; expected sizes (config widths, batch size, "
                     "replay capacity) that fit in this machine's memory",
                     kBadInput, false);
  } catch (const std::exception& e) {
    return fail_rank(*group, e.what(), kBadInput, false);
  } catch (...) {
    return fail_rank(*group, "failed with an exception of unknown type", kBadInput, false);
  }
  // Output that never arrived (a full disk, a closed pipe) is a failure, not a success.
  std::cout.flush();
  if (!std::cout) return fail_rank(*group, "writing to standard output failed (closed pipe or full disk?)", kBadInput, false);
  return status;
}
