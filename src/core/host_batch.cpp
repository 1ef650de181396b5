#include "core/host_batch.hpp"

#include <cstddef>
#include <cstdint>
#include <limits>
#include <set>
#include <type_traits>

namespace zs {

HostBatch batch_from(const safetensors::File& f, const Config& c) {
  const std::string& path = f.source;
  const std::set<std::string> known = {"states", "next_states", "actions", "rewards", "dones", "weights"};
  for (const auto& [name, t] : f.tensors)
    require(known.count(name) == 1, "batch '", path, "': unknown tensor '", name,
            "'; expected states, next_states, actions, rewards, dones, weights");
  const auto& st = f.at("states");
  require(st.shape.size() == 2, "batch '", path, "': states has shape ", safetensors::shape_string(st.shape),
          "; expected [B, ", c.state_dim, "]");
  const std::int64_t B = st.shape[0], S = c.state_dim, K = static_cast<std::int64_t>(c.branches.size());
  require(B >= 1, "batch '", path, "': empty batch (B = 0); expected at least one sample");
  // The step counts samples in int; a file can name more (with a zero state_dim's worth of data).
  require(B <= std::numeric_limits<int>::max(), "batch '", path, "': ", B, " samples; expected at most ",
          std::numeric_limits<int>::max());
  HostBatch b;
  b.size = static_cast<int>(B);
  b.states = f.f32("states", {B, S});
  b.next_states = f.f32("next_states", {B, S});
  b.actions = f.i32("actions", {B, K});
  b.rewards = f.f32("rewards", {B});
  b.dones = f.f32("dones", {B});
  b.weights = f.f32("weights", {B});
  return b;
}

HostBatch read_batch(const std::string& path, const Config& c) { return batch_from(safetensors::read(path), c); }

HostBatch batch_rows(const HostBatch& b, const Config& c, int begin, int end) {
  require(0 <= begin && begin < end && end <= b.size, "batch_rows: samples [", begin, ", ", end, ") of ", b.size,
          "; expected a non-empty range within the batch");
  const auto rows = [&](const auto& v, std::size_t width) {
    using V = std::decay_t<decltype(v)>;
    return V(v.begin() + static_cast<std::ptrdiff_t>(begin * width), v.begin() + static_cast<std::ptrdiff_t>(end * width));
  };
  const std::size_t S = static_cast<std::size_t>(c.state_dim), K = c.branches.size();
  HostBatch r;
  r.size = end - begin;
  r.states = rows(b.states, S);
  r.next_states = rows(b.next_states, S);
  r.actions = rows(b.actions, K);
  r.rewards = rows(b.rewards, 1);
  r.dones = rows(b.dones, 1);
  r.weights = rows(b.weights, 1);
  return r;
}

}  // namespace zs
