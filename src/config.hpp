// The validated configuration of a BDQ-C51 network and its training step. Every size is
// configuration; the defaults are the reference config (DESIGN §2) and the benchmark point.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace zs {

enum class Precision { tf32, fp32 };

struct Config {
  int state_dim = 48;
  std::vector<int> trunk = {256, 256};  // widths of the trunk's dense layers
  int head_hidden = 128;                // hidden width of the value stream and each branch
  std::vector<int> branches = {5, 3, 3};  // actions per branch
  int atoms = 51;
  float v_min = -10.f;
  float v_max = 10.f;
  float gamma = 0.99f;
  int n_step = 3;
  float lr = 1e-4f;
  float adam_beta1 = 0.9f;
  float adam_beta2 = 0.999f;
  float adam_eps = 1e-8f;
  float max_grad_norm = 10.f;
  float tau = 0.005f;
  float spectral_norm = 0.f;  // σ_max; 0 turns spectral normalisation off
  std::uint64_t seed = 0;
  Precision precision = Precision::tf32;

  // Throws zs::Error naming the first bad field, its value and what is expected.
  void validate() const;

  // Unknown keys and wrong types are errors; missing keys keep their defaults.
  static Config from_json(const nlohmann::json& j);
  nlohmann::json to_json() const;
  static Config from_file(const std::string& path);
};

const char* to_string(Precision p);

}  // namespace zs
