#include "rl/replay.hpp"

#include <cmath>
#include <cstddef>
#include <vector>

#include "backends/host_copy.hpp"

namespace zs {

namespace {

constexpr int kMaxCapacity = 1 << 28;  // keeps the tree (2·P doubles) ≤ 4 GiB and indices exact
constexpr int kMaxNStep = 64;

template <class T>
T scalar(const Kokkos::View<T, MemSpace>& v) {
  T h{};
  Kokkos::deep_copy(h, v);
  return h;
}

}  // namespace

void ReplayConfig::validate() const {
  require(capacity >= 1 && capacity <= kMaxCapacity, "replay: capacity = ", capacity, " is invalid; expected 1..",
          kMaxCapacity);
  require(n_step >= 1 && n_step <= kMaxNStep, "replay: n_step = ", n_step, " is invalid; expected 1..", kMaxNStep);
  require(std::isfinite(gamma) && gamma >= 0.f && gamma <= 1.f, "replay: gamma = ", gamma,
          " is invalid; expected a number in [0, 1]");
  // The update clamps (|p| + eps)^α into [1e-300, 1e290], so any α here keeps live leaves > 0
  // and the total finite; beyond 10 the clamp would flatten real priorities.
  require(std::isfinite(alpha) && alpha >= 0.f && alpha <= 10.f, "replay: alpha = ", alpha,
          " is invalid; expected a number in [0, 10]");
  require(std::isfinite(priority_eps) && priority_eps > 0.f, "replay: priority_eps = ", priority_eps,
          " is invalid; expected a finite number > 0");
}

Replay::Replay(const ReplayConfig& rc, int n_envs, int obs_dim, int n_branches)
    : rc_(rc), n_envs_(n_envs), obs_dim_(obs_dim), branches_(n_branches) {
  rc.validate();
  require(n_envs >= 1, "replay: n_envs = ", n_envs, "; expected at least 1");
  require(obs_dim >= 1, "replay: obs_dim = ", obs_dim, "; expected at least 1");
  require(n_branches >= 1, "replay: n_branches = ", n_branches, "; expected at least 1");
  rows_ = rc.capacity / n_envs;
  // The n-step window of a live entry must still be in the ring when it is sampled.
  require(rows_ >= rc.n_step, "replay: capacity = ", rc.capacity, " with n_envs = ", n_envs, " gives ", rows_,
          " rows; expected at least n_step = ", rc.n_step, " rows (capacity ≥ ", std::int64_t(rc.n_step) * n_envs, ")");
  const std::int64_t C = std::int64_t(rows_) * n_envs;
  st_.obs = decltype(st_.obs)("zs::replay::obs", C, obs_dim);
  st_.next_obs = decltype(st_.next_obs)("zs::replay::next_obs", C, obs_dim);
  st_.actions = decltype(st_.actions)("zs::replay::actions", C, n_branches);
  st_.reward = decltype(st_.reward)("zs::replay::reward", C);
  st_.flags = decltype(st_.flags)("zs::replay::flags", C);
  st_.row_step = decltype(st_.row_step)("zs::replay::row_step", rows_);
  st_.tree_shape = kernels::sum_tree_shape(C);
  st_.tree = decltype(st_.tree)("zs::replay::tree", st_.tree_shape.size());
  st_.steps = decltype(st_.steps)("zs::replay::steps");
  st_.count = decltype(st_.count)("zs::replay::count");
  st_.max_priority = decltype(st_.max_priority)("zs::replay::max_priority");
  st_.sample_calls = decltype(st_.sample_calls)("zs::replay::sample_calls");
  st_.seed = decltype(st_.seed)("zs::replay::seed");
  st_.n_envs = n_envs;
  st_.rows = rows_;
  st_.n_step = rc.n_step;
  st_.obs_dim = obs_dim;
  st_.branches = n_branches;
  st_.prioritized = rc.prioritized;
  Kokkos::deep_copy(st_.row_step, std::int64_t{-1});
  Kokkos::deep_copy(st_.max_priority, 1.0);
  Kokkos::deep_copy(st_.seed, rc.seed);
}

void Replay::insert(const ExecSpace& exec, Kokkos::View<const float**, Kokkos::LayoutRight, MemSpace> obs,
                    Kokkos::View<const std::int32_t**, Kokkos::LayoutRight, MemSpace> actions,
                    Kokkos::View<const float*, MemSpace> reward,
                    Kokkos::View<const float**, Kokkos::LayoutRight, MemSpace> next_obs,
                    Kokkos::View<const float*, MemSpace> terminated, Kokkos::View<const float*, MemSpace> truncated) {
  kernels::replay_insert(exec, insert_stage(obs, actions, reward, next_obs, terminated, truncated));
}

kernels::ReplayInsertData<ExecSpace> Replay::insert_stage(
    Kokkos::View<const float**, Kokkos::LayoutRight, MemSpace> obs,
    Kokkos::View<const std::int32_t**, Kokkos::LayoutRight, MemSpace> actions, Kokkos::View<const float*, MemSpace> reward,
    Kokkos::View<const float**, Kokkos::LayoutRight, MemSpace> next_obs, Kokkos::View<const float*, MemSpace> terminated,
    Kokkos::View<const float*, MemSpace> truncated) const {
  const std::size_t N = n_envs_, S = obs_dim_, K = branches_;
  auto shape2 = [&](const char* name, std::size_t r, std::size_t c, std::size_t er, std::size_t ec) {
    require(r == er && c == ec, "Replay::insert: ", name, " is [", r, ", ", c, "]; expected [", er, ", ", ec, "]");
  };
  auto shape1 = [&](const char* name, std::size_t n) {
    require(n == N, "Replay::insert: ", name, " has ", n, " values; expected n_envs = ", N);
  };
  shape2("obs", obs.extent(0), obs.extent(1), N, S);
  shape2("actions", actions.extent(0), actions.extent(1), N, K);
  shape2("next_obs", next_obs.extent(0), next_obs.extent(1), N, S);
  shape1("reward", reward.extent(0));
  shape1("terminated", terminated.extent(0));
  shape1("truncated", truncated.extent(0));
  return kernels::ReplayInsertData<ExecSpace>{st_, obs, next_obs, actions, reward, terminated, truncated};
}

kernels::ReplaySample<ExecSpace> Replay::sample_stage(DeviceBatch& batch, Kokkos::View<const float, MemSpace> beta) {
  const std::size_t B = batch.size > 0 ? batch.size : 0, S = obs_dim_, K = branches_;
  require(batch.size >= 1, "Replay::sample: batch size ", batch.size, "; expected at least 1");
  require(batch.stacked_states.extent(0) == 2 * B * S, "Replay::sample: batch states hold ",
          batch.stacked_states.extent(0), " values; expected [2·", B, ", ", S, "] = ", 2 * B * S);
  require(batch.actions.extent(0) == B && batch.actions.extent(1) == K, "Replay::sample: batch actions are [",
          batch.actions.extent(0), ", ", batch.actions.extent(1), "]; expected [", B, ", ", K, "]");
  require(batch.rewards.extent(0) == B && batch.dones.extent(0) == B && batch.weights.extent(0) == B,
          "Replay::sample: batch rewards/dones/weights hold ", batch.rewards.extent(0), "/", batch.dones.extent(0), "/",
          batch.weights.extent(0), " values; expected ", B, " each");
  if (sampled_.idx.extent(0) != B) {
    sampled_.idx = decltype(sampled_.idx)("zs::replay::sampled", B);
    sampled_.stamp = decltype(sampled_.stamp)("zs::replay::sampled_stamp", B);
    sampled_.next_idx = decltype(sampled_.next_idx)("zs::replay::sampled_next", B);
    sampled_.log_w = decltype(sampled_.log_w)("zs::replay::sampled_log_w", B);
    Kokkos::deep_copy(sampled_.idx, std::int64_t{-1});
  }
  kernels::ReplaySampleDraw<ExecSpace> draw;
  draw.st = st_;
  draw.out = sampled_;
  draw.actions = batch.actions;
  draw.rewards = batch.rewards;
  draw.dones = batch.dones;
  draw.weights = batch.weights;
  draw.beta = beta;
  draw.gamma = static_cast<double>(rc_.gamma);
  return {draw, kernels::ReplaySampleGather<ExecSpace>{st_, sampled_, batch.stacked_states}};
}

void Replay::sample(const ExecSpace& exec, DeviceBatch& batch, Kokkos::View<const float, MemSpace> beta) {
  kernels::replay_sample(exec, sample_stage(batch, beta));
}

void Replay::update_priorities(const ExecSpace& exec, Kokkos::View<const float*, MemSpace> priorities) {
  update_priorities(exec, priorities, Kokkos::View<const float, MemSpace>());
}

void Replay::update_priorities(const ExecSpace& exec, Kokkos::View<const float*, MemSpace> priorities,
                               Kokkos::View<const float, MemSpace> alpha) {
  require(sampled_.idx.extent(0) > 0, "Replay::update_priorities: no sample() yet; expected a sample() first");
  require(priorities.extent(0) == sampled_.idx.extent(0), "Replay::update_priorities: ", priorities.extent(0),
          " priorities; expected the last sample's batch size ", sampled_.idx.extent(0));
  if (!rc_.prioritized) return;
  kernels::ReplayUpdatePriorities<ExecSpace> f;
  f.st = st_;
  f.in = sampled_;
  f.priorities = priorities;
  f.alpha = static_cast<double>(rc_.alpha);
  f.alpha_now = alpha;
  f.eps = static_cast<double>(rc_.priority_eps);
  kernels::replay_update_priorities(exec, f);
}

void Replay::save_state(safetensors::File& f, const std::string& p) const {
  using safetensors::Tensor;
  Kokkos::fence();  // blocking by contract: whatever the caller's stream has enqueued lands first
  const std::int64_t C = capacity(), S = obs_dim_, K = branches_, T = rows_, L = st_.tree_shape.leaf0();
  f.tensors[p + "shape"] = Tensor::from<std::int64_t>(
      {7}, {C, T, n_envs_, S, K, rc_.n_step, rc_.prioritized ? 1 : 0});
  f.tensors[p + "obs"] = Tensor::from<float>({C, S}, download(st_.obs));
  f.tensors[p + "next_obs"] = Tensor::from<float>({C, S}, download(st_.next_obs));
  f.tensors[p + "actions"] = Tensor::from<std::int32_t>({C, K}, download(st_.actions));
  f.tensors[p + "reward"] = Tensor::from<float>({C}, download(st_.reward));
  f.tensors[p + "flags"] = Tensor::from<std::uint8_t>({C}, download(st_.flags));
  f.tensors[p + "row_step"] = Tensor::from<std::int64_t>({T}, download(st_.row_step));
  const auto tree = download(st_.tree);
  f.tensors[p + "priorities"] = Tensor::from<double>({C}, std::vector<double>(tree.begin() + L, tree.begin() + L + C));
  f.tensors[p + "counters"] = Tensor::from<std::int64_t>(
      {4}, {scalar(st_.steps), scalar(st_.count), static_cast<std::int64_t>(scalar(st_.sample_calls)),
            static_cast<std::int64_t>(scalar(st_.seed))});
  f.tensors[p + "max_priority"] = Tensor::from<double>({}, {scalar(st_.max_priority)});
  const std::int64_t B = sampled_.idx.extent(0);
  f.tensors[p + "sampled"] = Tensor::from<std::int64_t>({B}, download(sampled_.idx));
  f.tensors[p + "sampled_stamp"] = Tensor::from<std::int64_t>({B}, download(sampled_.stamp));
}

void Replay::load_state(const safetensors::File& f, const std::string& p) {
  const std::int64_t C = capacity(), S = obs_dim_, K = branches_, T = rows_, L = st_.tree_shape.leaf0();
  const auto shape = f.i64(p + "shape", {7});
  const std::vector<std::int64_t> mine{C, T, n_envs_, S, K, rc_.n_step, rc_.prioritized ? 1 : 0};
  if (shape != mine) {
    const char* names[] = {"capacity", "rows", "n_envs", "obs_dim", "n_branches", "n_step", "prioritized"};
    std::string theirs, ours;
    for (int i = 0; i < 7; ++i) {
      theirs += str(i ? ", " : "", names[i], " = ", shape[i]);
      ours += str(i ? ", " : "", names[i], " = ", mine[i]);
    }
    fail("Replay::load_state: '", f.source, "' holds a replay buffer with ", theirs, "; this one has ", ours);
  }
  // Read and check everything before touching the device, so a bad file leaves the buffer intact.
  const auto obs = f.f32(p + "obs", {C, S}), next_obs = f.f32(p + "next_obs", {C, S});
  const auto actions = f.i32(p + "actions", {C, K});
  const auto reward = f.f32(p + "reward", {C});
  const auto flags = f.get<std::uint8_t>(p + "flags", {C});
  const auto row_step = f.i64(p + "row_step", {T});
  const auto prio = f.f64(p + "priorities", {C});
  const auto counters = f.i64(p + "counters", {4});
  const auto max_p = f.f64(p + "max_priority", {});
  const auto& sampled_t = f.at(p + "sampled");
  require(sampled_t.shape.size() == 1, "Replay::load_state: tensor '", p, "sampled' has shape ",
          safetensors::shape_string(sampled_t.shape), "; expected [B]");
  const std::int64_t B = sampled_t.shape[0];
  const auto sampled = f.i64(p + "sampled", {B});
  const auto stamp = f.i64(p + "sampled_stamp", {B});
  for (std::int64_t i = 0; i < B; ++i)
    require(sampled[i] >= -1 && sampled[i] < C && (i == 0 || sampled[i] >= sampled[i - 1]), "Replay::load_state: sampled entry ", i, " = ", sampled[i],
            "; expected -1..", C - 1, ", non-decreasing (as sample() writes them)");
  std::int64_t positive = 0;
  for (std::int64_t j = 0; j < C; ++j) {
    require(std::isfinite(prio[j]) && prio[j] >= 0, "Replay::load_state: priority ", j, " = ", prio[j],
            "; expected a finite number ≥ 0");
    positive += prio[j] > 0 ? 1 : 0;
  }
  // The counters index the ring (step t writes row t mod rows): a corrupt one must be refused,
  // not used — a negative step would index before the buffer.
  require(counters[0] >= 0 && counters[0] <= (std::int64_t{1} << 50), "Replay::load_state: '", f.source,
          "' holds replay step counter ", counters[0], "; expected a count in [0, 2^50]");
  require(counters[1] == positive, "Replay::load_state: '", f.source, "' says ", counters[1],
          " transitions can be sampled but its priorities hold ", positive, "; expected the same");
  require(counters[2] >= 0, "Replay::load_state: '", f.source, "' holds sample call counter ", counters[2],
          "; expected a count >= 0");
  require(std::isfinite(max_p[0]) && max_p[0] >= 0, "Replay::load_state: max priority ", max_p[0],
          "; expected a finite number >= 0");
  for (std::int64_t r = 0; r < T; ++r)
    require(row_step[r] >= -1 && row_step[r] < counters[0] + 1, "Replay::load_state: row ", r, " holds step ",
            row_step[r], "; expected -1 (empty) .. ", counters[0]);
  for (std::int64_t j = 0; j < C; ++j)
    require(flags[j] <= (kernels::kReplayTerminated | kernels::kReplayTruncated), "Replay::load_state: entry ", j,
            " has flags ", int(flags[j]), "; expected a combination of terminated (1) and truncated (2)");

  std::vector<double> tree(static_cast<std::size_t>(st_.tree_shape.size()), 0.0);
  for (std::int64_t j = 0; j < C; ++j) tree[L + j] = prio[j];
  kernels::sum_tree_rebuild_host(tree, st_.tree_shape);
  Kokkos::fence();
  upload(st_.obs, obs);
  upload(st_.next_obs, next_obs);
  upload(st_.actions, actions);
  upload(st_.reward, reward);
  upload(st_.flags, flags);
  upload(st_.row_step, row_step);
  upload(st_.tree, tree);
  Kokkos::deep_copy(st_.steps, counters[0]);
  Kokkos::deep_copy(st_.count, counters[1]);
  Kokkos::deep_copy(st_.sample_calls, static_cast<std::uint64_t>(counters[2]));
  Kokkos::deep_copy(st_.seed, static_cast<std::uint64_t>(counters[3]));
  Kokkos::deep_copy(st_.max_priority, max_p[0]);
  if (B > 0) {
    if (sampled_.idx.extent(0) != static_cast<std::size_t>(B)) {
      sampled_.idx = decltype(sampled_.idx)("zs::replay::sampled", B);
      sampled_.stamp = decltype(sampled_.stamp)("zs::replay::sampled_stamp", B);
      sampled_.next_idx = decltype(sampled_.next_idx)("zs::replay::sampled_next", B);
      sampled_.log_w = decltype(sampled_.log_w)("zs::replay::sampled_log_w", B);
    }
    upload(sampled_.idx, sampled);
    upload(sampled_.stamp, stamp);
  }
  Kokkos::fence();
}

}  // namespace zs
