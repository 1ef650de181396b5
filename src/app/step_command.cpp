#include "app/step_command.hpp"

#include <memory>
#include <nlohmann/json.hpp>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "app/explain.hpp"
#include "core/file_kind.hpp"
#include "core/host_batch.hpp"
#include "core/safetensors.hpp"
#include "train/replica_check.hpp"
#include "train/trainer.hpp"

namespace zs {

namespace {

// P in PyTorch nn.Linear naming: every online tensor; target.* all or none (none: a copy).
void load_params(Trainer& tr, const std::string& path) {
  const safetensors::File f = safetensors::read(path);
  std::set<std::string> expected;
  int targets = 0;
  for (const auto& t : tr.layout().tensors()) {
    expected.insert(t.name);
    expected.insert("target." + t.name);
    targets += f.tensors.count("target." + t.name) ? 1 : 0;
  }
  for (const auto& [name, t] : f.tensors)
    require(expected.count(name) == 1, "params '", path, "': unexpected tensor '", name,
            "'; expected nn.Linear names like 'trunk.0.weight' (and optionally 'target.trunk.0.weight')");
  const int n = static_cast<int>(tr.layout().tensors().size());
  require(targets == 0 || targets == n, "params '", path, "': ", targets, " of ", n,
          " target.* tensors; expected all of them or none");
  for (const auto& t : tr.layout().tensors()) {
    const std::vector<std::int64_t> shape(t.shape.begin(), t.shape.end());
    const auto w = f.f32(t.name, shape);
    tr.write_tensor(tr.online(), t.name, w);
    tr.write_tensor(tr.target(), t.name, targets ? f.f32("target." + t.name, shape) : w);
  }
}

// Every rank's `mine`, concatenated in rank order, on rank 0 (alone: `mine`).
std::vector<float> gather_floats(ProcessGroup& group, const std::vector<float>& mine, const std::string& what) {
  if (group.size() == 1) return mine;
  std::vector<std::uint8_t> bytes(mine.size() * sizeof(float));
  if (!bytes.empty()) std::memcpy(bytes.data(), mine.data(), bytes.size());
  std::vector<float> all;
  for (const auto& part : group.gather(bytes, what)) {
    const std::size_t at = all.size();
    all.resize(at + part.size() / sizeof(float));
    if (!part.empty()) std::memcpy(all.data() + at, part.data(), part.size());
  }
  return all;
}

}  // namespace

void run_step_command(const StepCommand& cmd, std::ostream& leader_log) {
  ProcessGroup& group = cmd.group ? *cmd.group : ProcessGroup::solo();
  const int ranks = group.size();
  std::ostream silent(nullptr);
  std::ostream& log = group.rank() == 0 ? leader_log : silent;
  require(cmd.steps >= 1, "step: --steps = ", cmd.steps, "; expected at least 1");
  Config c;
  HostBatch batch;
  std::unique_ptr<Trainer> trainer;
  group.agree("step: reading the inputs", [&] {
    // Before any work: a refused output found after minutes of steps would waste them.
    if (group.rank() == 0) require_output_file(cmd.out_path, "step --out");
    require_input_file(cmd.config_path, "step --config");
    require_input_file(cmd.batch_path, "step --batch");
    if (!cmd.params_path.empty()) require_input_file(cmd.params_path, "step --params");
    c = explained("step: reading the config '" + cmd.config_path + "'", [&] { return Config::from_file(cmd.config_path); });
    batch = explained("step: reading the batch '" + cmd.batch_path + "'", [&] { return read_batch(cmd.batch_path, c); });
    require(batch.size % ranks == 0, "step: --batch holds ", batch.size, " samples; with ", ranks,
            " ranks expected a multiple of ", ranks, " (each rank trains on an equal share)");
    TrainerOptions opt;
    opt.batch_size = batch.size / ranks;
    opt.group = &group;
    trainer = explained("step: building the network and its buffers for a batch of " +
                            std::to_string(opt.batch_size) + " samples",
                        [&] { return std::make_unique<Trainer>(c, opt); });
    if (!cmd.params_path.empty())
      explained("step: reading the parameters '" + cmd.params_path + "'", [&] { load_params(*trainer, cmd.params_path); });
  });
  Trainer& tr = *trainer;
  const int share = batch.size / ranks;
  upload(tr.stream().exec(), c, ranks == 1 ? batch : batch_rows(batch, c, group.rank() * share, (group.rank() + 1) * share),
         tr.batch());
  {
    const ProcessGroup::Watch watch(group);  // every step's all-reduce reports progress
    for (int s = 0; s < cmd.steps; ++s) tr.step();
    tr.synchronize();
  }
  if (ranks > 1) {
    ReplicaCheck replicas(tr, group, 1);
    replicas.enqueue();
    tr.synchronize();
    replicas.compare();
  }

  const auto status = tr.metrics();
  require(status.has_value(), "step: no guard record arrived after synchronising; this is a bug");
  float loss = 0;
  Kokkos::deep_copy(loss, tr.loss().loss);
  double grad_norm = 0;
  Kokkos::deep_copy(grad_norm, tr.grad_norm());
  auto prio_view = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), tr.loss().priorities);
  const std::vector<float> prio =
      gather_floats(group, std::vector<float>(prio_view.data(), prio_view.data() + prio_view.size()), "step: the priorities");

  safetensors::File out;
  out.metadata["config"] = c.to_json().dump();
  out.metadata["steps"] = std::to_string(cmd.steps);
  const std::pair<const char*, double> guard[] = {
      {"halt_nan", status->halt_nan},         {"halt_loss_clip", status->halt_loss_clip},
      {"halt_grad_collapse", status->halt_grad_collapse}, {"clipped_loss", status->clipped_loss},
      {"raw_loss", status->raw_loss},         {"raw_grad_norm", status->raw_grad_norm},
      {"step", static_cast<double>(status->step)}};
  std::string guard_fields;
  std::vector<float> guard_values;
  for (const auto& [name, value] : guard) {
    guard_fields += (guard_fields.empty() ? "" : ", ") + std::string(name);
    guard_values.push_back(static_cast<float>(value));
  }
  out.metadata["guard_fields"] = guard_fields;
  out.tensors["loss"] = safetensors::Tensor::from<float>({1}, {loss});
  if (group.rank() == 0) out.tensors["priorities"] = safetensors::Tensor::from<float>({batch.size}, prio);
  out.tensors["grad_norm"] = safetensors::Tensor::from<float>({1}, {static_cast<float>(grad_norm)});
  out.tensors["guard"] = safetensors::Tensor::from<float>({static_cast<std::int64_t>(guard_values.size())}, guard_values);
  for (const auto& t : tr.layout().tensors()) {
    const std::vector<std::int64_t> shape(t.shape.begin(), t.shape.end());
    out.tensors["grad." + t.name] = safetensors::Tensor::from<float>(shape, tr.read_tensor(tr.grad(), t.name));
    out.tensors["param." + t.name] = safetensors::Tensor::from<float>(shape, tr.read_tensor(tr.online(), t.name));
    out.tensors["target." + t.name] = safetensors::Tensor::from<float>(shape, tr.read_tensor(tr.target(), t.name));
  }
  // Every auxiliary term: its loss and raw gradient norm of the last step and its per-sample
  // outputs; applied_grad.<name>: the combined, budgeted gradient Adam applied.
  if (tr.terms().size() > 1)
    for (const auto& t : tr.layout().tensors())
      out.tensors["applied_grad." + t.name] = safetensors::Tensor::from<float>(
          std::vector<std::int64_t>(t.shape.begin(), t.shape.end()), tr.read_tensor(tr.applied_grad(), t.name));
  for (std::size_t i = 1; i < tr.terms().size(); ++i) {
    const LossTerm& term = *tr.terms()[i];
    const std::string prefix = "aux." + term.name() + ".";
    float l = 0;
    double n = 0;
    Kokkos::deep_copy(l, term.loss());
    Kokkos::deep_copy(n, term.norm());
    out.tensors[prefix + "loss"] = safetensors::Tensor::from<float>({1}, {l});
    out.tensors[prefix + "grad_norm"] = safetensors::Tensor::from<float>({1}, {static_cast<float>(n)});
    for (const auto& [name, values] : term.sample_outputs()) {
      auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), values);
      const auto all = gather_floats(group, std::vector<float>(h.data(), h.data() + h.size()), "step: " + prefix + name);
      if (group.rank() == 0)
        out.tensors[prefix + name] = safetensors::Tensor::from<float>({static_cast<std::int64_t>(all.size())}, all);
    }
  }
  group.agree("step: writing the output", [&] {
    if (group.rank() == 0) safetensors::write(cmd.out_path, out);
  });
  log << "step: " << cmd.steps << " step(s) on " << batch.size << " samples"
      << (ranks > 1 ? str(" (", ranks, " ranks of ", share, ")") : std::string()) << " ("
      << (tr.graph_recorded() ? "graph" : "direct") << "): loss " << loss << ", grad norm " << grad_norm << ", guard "
      << (status->skipped() ? "TRIPPED (update skipped)" : "ok") << "; wrote " << cmd.out_path << "\n";
}

}  // namespace zs
