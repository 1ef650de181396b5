#include "app/step_command.hpp"

#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "app/explain.hpp"
#include "core/file_kind.hpp"
#include "core/host_batch.hpp"
#include "core/safetensors.hpp"
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

}  // namespace

void run_step_command(const StepCommand& cmd, std::ostream& log) {
  require(cmd.steps >= 1, "step: --steps = ", cmd.steps, "; expected at least 1");
  // Before any work: a refused output found after minutes of steps would waste them.
  require_output_file(cmd.out_path, "step --out");
  require_input_file(cmd.config_path, "step --config");
  require_input_file(cmd.batch_path, "step --batch");
  if (!cmd.params_path.empty()) require_input_file(cmd.params_path, "step --params");
  const Config c =
      explained("step: reading the config '" + cmd.config_path + "'", [&] { return Config::from_file(cmd.config_path); });
  const HostBatch batch =
      explained("step: reading the batch '" + cmd.batch_path + "'", [&] { return read_batch(cmd.batch_path, c); });
  TrainerOptions opt;
  opt.batch_size = batch.size;
  const auto trainer = explained("step: building the network and its buffers for a batch of " +
                                     std::to_string(batch.size) + " samples",
                                 [&] { return std::make_unique<Trainer>(c, opt); });
  Trainer& tr = *trainer;
  if (!cmd.params_path.empty())
    explained("step: reading the parameters '" + cmd.params_path + "'", [&] { load_params(tr, cmd.params_path); });
  upload(tr.stream().exec(), c, batch, tr.batch());
  for (int s = 0; s < cmd.steps; ++s) tr.step();
  tr.synchronize();

  const auto status = tr.metrics();
  require(status.has_value(), "step: no guard record arrived after synchronising; this is a bug");
  float loss = 0;
  Kokkos::deep_copy(loss, tr.loss().loss);
  double grad_norm = 0;
  Kokkos::deep_copy(grad_norm, tr.grad_norm());
  auto prio = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), tr.loss().priorities);

  safetensors::File out;
  out.metadata["config"] = c.to_json().dump();
  out.metadata["steps"] = std::to_string(cmd.steps);
  out.metadata["guard_fields"] =
      "halt_nan, halt_loss_clip, halt_grad_collapse, clipped_loss, raw_loss, raw_grad_norm, reserved, step";
  out.tensors["loss"] = safetensors::Tensor::from<float>({1}, {loss});
  out.tensors["priorities"] =
      safetensors::Tensor::from<float>({batch.size}, std::vector<float>(prio.data(), prio.data() + prio.size()));
  out.tensors["grad_norm"] = safetensors::Tensor::from<float>({1}, {static_cast<float>(grad_norm)});
  out.tensors["guard"] = safetensors::Tensor::from<float>(
      {8}, {float(status->halt_nan), float(status->halt_loss_clip), float(status->halt_grad_collapse),
            float(status->clipped_loss), float(status->raw_loss), float(status->raw_grad_norm), 0.f,
            float(status->step)});
  for (const auto& t : tr.layout().tensors()) {
    const std::vector<std::int64_t> shape(t.shape.begin(), t.shape.end());
    out.tensors["grad." + t.name] = safetensors::Tensor::from<float>(shape, tr.read_tensor(tr.grad(), t.name));
    out.tensors["param." + t.name] = safetensors::Tensor::from<float>(shape, tr.read_tensor(tr.online(), t.name));
    out.tensors["target." + t.name] = safetensors::Tensor::from<float>(shape, tr.read_tensor(tr.target(), t.name));
  }
  // Auxiliaries (issue 6): each one's loss and raw gradient norm of the last step, the ensemble's
  // per-sample spread, and applied_grad.<name>: the combined, budgeted gradient Adam applied.
  auto aux = [&](const char* name, const AuxOutputs& a) {
    float l = 0;
    double n = 0;
    Kokkos::deep_copy(l, a.loss);
    Kokkos::deep_copy(n, a.norm);
    out.tensors[std::string("aux.") + name + ".loss"] = safetensors::Tensor::from<float>({1}, {l});
    out.tensors[std::string("aux.") + name + ".grad_norm"] = safetensors::Tensor::from<float>({1}, {static_cast<float>(n)});
  };
  if (c.any_auxiliary())
    for (const auto& t : tr.layout().tensors())
      out.tensors["applied_grad." + t.name] = safetensors::Tensor::from<float>(
          std::vector<std::int64_t>(t.shape.begin(), t.shape.end()), tr.read_tensor(tr.applied_grad(), t.name));
  if (tr.iqn()) aux("iqn", tr.iqn()->out());
  if (tr.cql()) aux("cql", tr.cql()->out());
  if (tr.ensemble()) {
    aux("ensemble", tr.ensemble()->out());
    auto sp = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), tr.ensemble()->spread());
    out.tensors["aux.ensemble.spread"] =
        safetensors::Tensor::from<float>({batch.size}, std::vector<float>(sp.data(), sp.data() + sp.size()));
  }
  safetensors::write(cmd.out_path, out);
  log << "step: " << cmd.steps << " step(s) on " << batch.size << " samples (" << (tr.graph_recorded() ? "graph" : "direct")
      << "): loss " << loss << ", grad norm " << grad_norm << ", guard "
      << (status->skipped() ? "TRIPPED (update skipped)" : "ok") << "; wrote " << cmd.out_path << "\n";
}

}  // namespace zs
