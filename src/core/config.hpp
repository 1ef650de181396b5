// The validated configuration of a BDQ-C51 network and its training step. Every size is
// configuration; the defaults are the reference config (docs/architecture.md) and the benchmark point.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/precision.hpp"

namespace zs {

// The optional auxiliary losses. All are off by default; an auxiliary
// that is on adds its own parameters after the network's in the flat layout and its gradient
// joins the step's under its share of max_grad_norm (`budget`), see docs/kernels.md.
struct IqnConfig {
  bool on = false;
  int n_tau = 8;         // τ samples per state, for the online and for the target quantiles
  int embed_dim = 64;    // cosine features cos(π·i·τ), i = 0..embed_dim−1
  float kappa = 1.f;     // quantile Huber threshold
  float budget = 0.10f;  // share of max_grad_norm
};
struct EnsembleConfig {
  int k = 0;             // extra C51 head sets on the shared trunk; 0 = off
  float budget = 0.10f;
  bool on() const { return k > 0; }
};
struct CqlConfig {
  bool on = false;
  float alpha = 1.f;     // weight of logsumexp_a Q − Q(taken)
  float budget = 0.10f;
};

struct Config {
  // Bounds on the list keys: deeper trunks are not a network this project trains, and the
  // acting kernels hold the branch table in a fixed array of this many branches.
  static constexpr int kMaxTrunkLayers = 64;
  static constexpr int kMaxBranches = 32;

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
  float tau = 0.005f;                 // Polyak rate of the target net, every step …
  int hard_update_every = 0;          // … or, when N > 0, a copy of the online net every N updates
  float spectral_norm = 0.f;  // σ_max; 0 turns spectral normalisation off
  std::uint64_t seed = 0;
  Precision precision = Precision::tf32;
  IqnConfig iqn{};
  EnsembleConfig ensemble{};
  CqlConfig cql{};

  bool any_auxiliary() const { return iqn.on || ensemble.on() || cql.on; }
  int total_actions() const;

  // Throws zs::Error naming the first bad field, its value and what is expected. The support
  // must be usable in float: every atom z_j = v_min + j·Δz finite and strictly increasing.
  void validate() const;

  // Unknown keys, wrong types and out-of-range values are errors; missing keys keep their
  // defaults. Integers are range-checked before they are narrowed; `seed` follows parse_seed.
  static Config from_json(const nlohmann::json& j);
  nlohmann::json to_json() const;
  // `text` parsed strictly (core/json.hpp); `source` ("its config metadata") names it in errors.
  static Config from_text(const std::string& text, const std::string& source);
  // Reads the file strictly (core/json.hpp); errors name the path.
  static Config from_file(const std::string& path);
};

}  // namespace zs
