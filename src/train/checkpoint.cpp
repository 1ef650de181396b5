// Trainer checkpoints in safetensors, so PyTorch/JAX users can open them: every tensor the run
// needs to continue exactly (parameters, target, the optimizer's state, guard state, spectral-norm
// vectors, each loss term's own state) plus the config and step count in the metadata.
#include <cmath>
#include <cstring>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "backends/host_copy.hpp"
#include "core/safetensors.hpp"
#include "train/trainer.hpp"

namespace zs {

namespace {
constexpr const char* kFormat = "zerosync-checkpoint-2";

std::vector<std::int64_t> shape_of(const TensorDesc& t) { return {t.shape.begin(), t.shape.end()}; }
}  // namespace

void Trainer::save(const std::string& path) const {
  safetensors::File f;
  save_state(f);
  safetensors::write(path, f);
}

void Trainer::load(const std::string& path) { load_state(safetensors::read(path)); }

void Trainer::save_state(safetensors::File& f) const {
  stream_.synchronize();
  f.metadata["format"] = kFormat;
  f.metadata["config"] = config_.to_json().dump();
  f.metadata["steps"] = std::to_string(steps_);
  for (const auto& [prefix, buf] : {std::make_pair("param.", &online_), std::make_pair("target.", &target_)})
    for (const auto& t : layout_.tensors())
      f.tensors[prefix + t.name] = safetensors::Tensor::from<float>(shape_of(t), download_tensor(*buf, t));
  optimizer_.save_state(f);
  const auto gs = download<double>(guard_.device_state());
  f.tensors["guard.state"] = safetensors::Tensor::from<double>({static_cast<std::int64_t>(gs.size())}, gs);
  f.tensors["guard.step"] = safetensors::Tensor::from<std::int64_t>({1}, download<std::int64_t>(guard_.device_step()));
  f.tensors["steps"] = safetensors::Tensor::from<std::int64_t>({1}, {steps_});
  if (spectral_) {
    const auto uv = download<float>(spectral_->vectors());
    f.tensors["spectral.uv"] = safetensors::Tensor::from<float>({static_cast<std::int64_t>(uv.size())}, uv);
  }
  for (const auto& t : terms_) t->save_state(f);
}

void Trainer::load_state(const safetensors::File& f) {
  const std::string& path = f.source;
  f.require_checksums("checkpoint");
  const auto meta = [&](const char* key) {
    auto it = f.metadata.find(key);
    require(it != f.metadata.end(), "checkpoint '", path, "': no '", key,
            "' in its metadata; expected a file written by zerosync (", kFormat, ")");
    return it->second;
  };
  require(meta("format") == kFormat, "checkpoint '", path, "': format '", meta("format"), "'; expected '", kFormat, "'");
  Config saved;
  try {
    saved = Config::from_text(meta("config"), "its config metadata");
  } catch (const std::exception& e) {
    fail("checkpoint '", path, "': its config is unreadable: ", e.what());
  }
  require(saved.to_json() == config_.to_json(), "checkpoint '", path, "' was written with config ",
          saved.to_json().dump(), "; this trainer has ", config_.to_json().dump());
  // Read and check everything before touching the device, so a bad file changes nothing.
  struct Pending {
    const ParamBuffer* buf;
    const TensorDesc* tensor;
    std::vector<float> data;
  };
  std::vector<Pending> tensors;
  for (const auto& [prefix, buf] : {std::make_pair("param.", &online_), std::make_pair("target.", &target_)})
    for (const auto& t : layout_.tensors()) tensors.push_back({buf, &t, f.f32(prefix + t.name, shape_of(t))});
  optimizer_.check_state(f);
  const auto gs = f.f64("guard.state", {static_cast<std::int64_t>(guard_.device_state().extent(0))});
  const auto gstep = f.i64("guard.step", {1});
  const auto steps = f.i64("steps", {1});
  // Counters a corrupt file could make absurd: refused, not trained on.
  require(steps[0] >= 0 && steps[0] < (std::int64_t{1} << 53), "checkpoint '", path, "': steps = ", steps[0],
          "; expected a count in [0, 2^53)");
  require(gstep[0] >= 0 && gstep[0] <= steps[0], "checkpoint '", path, "': guard.step = ", gstep[0],
          "; expected a count in [0, steps = ", steps[0], "]");
  kernels::GuardState guard_state;
  std::memcpy(static_cast<void*>(&guard_state), gs.data(), sizeof guard_state);
  for (const kernels::GuardSums* sums : {&guard_state.running, &guard_state.snapshot})
    require(sums->steps >= 0 && sums->skipped >= 0 && sums->steps + sums->skipped <= double(steps[0]) &&
                std::isfinite(sums->loss_sum) && std::isfinite(sums->grad_norm_sum),
            "checkpoint '", path, "': guard.state holds sums over ", sums->steps, " clean and ", sums->skipped,
            " skipped steps (loss sum ", sums->loss_sum, "); expected counts in [0, steps = ", steps[0],
            "] and finite sums");
  std::vector<float> uv;
  if (spectral_) uv = f.f32("spectral.uv", {static_cast<std::int64_t>(spectral_->vectors().extent(0))});
  for (const auto& t : terms_) t->check_state(f);

  stream_.synchronize();
  for (const auto& p : tensors) upload_tensor(*p.buf, *p.tensor, p.data);
  optimizer_.load_state(f);
  upload(guard_.device_state(), gs);
  upload(guard_.device_step(), gstep);
  if (spectral_) upload(spectral_->device_vectors(), uv);
  for (auto& t : terms_) t->load_state(f);
  Kokkos::fence();
  steps_ = steps[0];
}

}  // namespace zs
