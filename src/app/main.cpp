// The zerosync command-line program. With no subcommand it prints the build configuration
// and runs the self-check, so a fresh build can be trusted in one command.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <string>

#include "backends/backend.hpp"
#include "app/build_info.hpp"
#include "core/error.hpp"
#include "core/seed.hpp"
#include "app/self_check.hpp"
#include "app/step_command.hpp"
#include "app/train_command.hpp"

int main(int argc, char** argv) {
  // Kokkos takes its own --kokkos-* options out of argv before ours are parsed.
  // Kokkos warns on every start when OMP_PROC_BIND is unset; binding stays the user's choice.
  setenv("OMP_PROC_BIND", "false", 0);
  Kokkos::ScopeGuard kokkos(argc, argv);
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
  train->add_flag("--quiet", train_cmd.quiet, "no progress bar");
  CLI11_PARSE(app, argc, argv);
  if (steps_opt->count()) train_cmd.steps = train_steps;
  if (envs_opt->count()) train_cmd.envs = train_envs;
  if (seed_opt->count()) train_cmd.seed = zs::parse_seed(train_seed, "--seed");
  try {
    if (train->parsed()) {
      const zs::TrainSummary s = zs::run_train_command(train_cmd, std::cerr);
      if (s.outcome == zs::TrainOutcome::interrupted) return 130;
      return s.outcome == zs::TrainOutcome::guard_stopped || s.outcome == zs::TrainOutcome::q_stopped ? 3 : 0;
    }
    if (step->parsed()) {
      zs::run_step_command(step_cmd, std::cout);
      return 0;
    }
    const bool all = app.get_subcommands().empty();
    if (all || info->parsed()) zs::print_build_info(std::cout);
    if (all || check->parsed()) {
      std::cout << "self-check:\n";
      const bool ok = zs::run_self_check(std::cout, replays);
      std::cout << (ok ? "self-check passed" : "self-check FAILED") << std::endl;
      return ok ? 0 : 1;
    }
  } catch (const zs::Error& e) {
    std::cerr << "zerosync: error: " << e.what() << std::endl;
    return 2;
  }
  return 0;
}
