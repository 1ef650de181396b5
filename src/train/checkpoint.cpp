// Trainer checkpoints in safetensors, so PyTorch/JAX users can open them: every tensor the run
// needs to continue exactly (parameters, target, Adam m/v/t, guard state, spectral-norm
// vectors, lr) plus the config and step count in the metadata.
#include <nlohmann/json.hpp>

#include "backends/host_copy.hpp"
#include "core/safetensors.hpp"
#include "train/trainer.hpp"

namespace zs {

namespace {
constexpr const char* kFormat = "zerosync-checkpoint-1";

std::vector<std::int64_t> shape_of(const TensorDesc& t) { return {t.shape.begin(), t.shape.end()}; }
}  // namespace

void Trainer::save(const std::string& path) const {
  stream_.synchronize();
  safetensors::File f;
  f.metadata["format"] = kFormat;
  f.metadata["config"] = config_.to_json().dump();
  f.metadata["steps"] = std::to_string(steps_);
  const std::pair<const char*, const ParamBuffer*> buffers[] = {
      {"param.", &online_}, {"target.", &target_}, {"adam_m.", &m_}, {"adam_v.", &v_}};
  for (const auto& [prefix, buf] : buffers)
    for (const auto& t : layout_.tensors())
      f.tensors[prefix + t.name] = safetensors::Tensor::from<float>(shape_of(t), read_tensor(*buf, t.name));
  f.tensors["adam.state"] = safetensors::Tensor::from<double>({3}, download<double>(adam_state_));
  const auto gs = download<double>(guard_.device_state());
  f.tensors["guard.state"] = safetensors::Tensor::from<double>({static_cast<std::int64_t>(gs.size())}, gs);
  f.tensors["guard.step"] = safetensors::Tensor::from<std::int64_t>({1}, download<std::int64_t>(guard_.device_step()));
  f.tensors["lr"] = safetensors::Tensor::from<float>({1}, download<float>(lr_));
  f.tensors["steps"] = safetensors::Tensor::from<std::int64_t>({1}, {steps_});
  if (spectral_) {
    const auto uv = download<float>(spectral_->vectors());
    f.tensors["spectral.uv"] = safetensors::Tensor::from<float>({static_cast<std::int64_t>(uv.size())}, uv);
  }
  if (iqn_)
    f.tensors["iqn.counter"] = safetensors::Tensor::from<std::int64_t>(
        {1}, {static_cast<std::int64_t>(download<std::uint64_t>(iqn_->counter())[0])});
  safetensors::write(path, f);
}

void Trainer::load(const std::string& path) {
  const safetensors::File f = safetensors::read(path);
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
    std::string name;
    std::vector<float> data;
  };
  std::vector<Pending> tensors;
  const std::pair<const char*, const ParamBuffer*> buffers[] = {
      {"param.", &online_}, {"target.", &target_}, {"adam_m.", &m_}, {"adam_v.", &v_}};
  for (const auto& [prefix, buf] : buffers)
    for (const auto& t : layout_.tensors()) tensors.push_back({buf, t.name, f.f32(prefix + t.name, shape_of(t))});
  const auto adam = f.f64("adam.state", {3});
  const auto gs = f.f64("guard.state", {static_cast<std::int64_t>(guard_.device_state().extent(0))});
  const auto gstep = f.i64("guard.step", {1});
  const auto lr = f.f32("lr", {1});
  const auto steps = f.i64("steps", {1});
  std::vector<float> uv;
  if (spectral_) uv = f.f32("spectral.uv", {static_cast<std::int64_t>(spectral_->vectors().extent(0))});
  std::vector<std::int64_t> iqn_counter;
  if (iqn_) iqn_counter = f.i64("iqn.counter", {1});

  stream_.synchronize();
  for (const auto& p : tensors) write_tensor(*p.buf, p.name, p.data);
  upload(adam_state_, adam);
  upload(guard_.device_state(), gs);
  upload(guard_.device_step(), gstep);
  upload(lr_, lr);
  if (spectral_) upload(spectral_->device_vectors(), uv);
  if (iqn_) Kokkos::deep_copy(iqn_->counter(), static_cast<std::uint64_t>(iqn_counter[0]));
  Kokkos::fence();
  steps_ = steps[0];
}

}  // namespace zs
