// A training batch in host memory, and the reader of batch files (safetensors). Host-only, so
// the reader can be fuzzed without the device code.
#pragma once
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/safetensors.hpp"

namespace zs {

// A batch in host memory, row-major, as read from a file or built by a test.
struct HostBatch {
  int size = 0;
  std::vector<float> states, next_states;  // [B, state_dim]
  std::vector<int> actions;                // [B, branches]
  std::vector<float> rewards, dones, weights;  // [B]
};

// The batch held by `f`: exactly the tensors states f32 [B, state_dim], next_states f32
// [B, state_dim], actions i32 [B, branches], rewards, dones, weights f32 [B], with B >= 1.
// Throws zs::Error naming the file (f.source), the tensor and what was expected. Action ranges
// are checked where the batch is uploaded (nn/batch.hpp).
HostBatch batch_from(const safetensors::File& f, const Config& c);

// batch_from(safetensors::read(path), c).
HostBatch read_batch(const std::string& path, const Config& c);

// Samples [begin, end) of `b` (one rank's share of a batch). Throws zs::Error unless
// 0 <= begin < end <= b.size.
HostBatch batch_rows(const HostBatch& b, const Config& c, int begin, int end);

}  // namespace zs
