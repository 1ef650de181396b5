#include "rl/actor.hpp"

#include <cstddef>
#include <vector>

#include "kernels/c51_q.hpp"

namespace zs {

Actor::Actor(const Config& config, const ParamLayout& layout, Stream& stream, int rows, kernels::ActingRng rng,
             const FusedOptions* fused, int row_block_rows)
    : config_(config),
      stream_(stream),
      gemm_(stream, config.precision),
      net_(config, layout),
      acts_(config, rows),
      rows_(rows),
      rng_(rng),
      q_("zs::actor::q", rows, config.total_actions()),
      actions_("zs::actor::actions", rows, config.branches.size()),
      counter_("zs::actor::counter") {
  require(rows >= 1, "Actor: rows = ", rows, "; expected at least 1 observation per call");
  if (fused && fused_supports(config_, *fused, &fused_off_reason_)) fused_ = *fused;
  require(row_block_rows == 0 || row_block_rows == 16 || row_block_rows == 32, "Actor: row_block_rows = ",
          row_block_rows, "; expected 0 (off), 16 or 32 rows a block");
  // The row blocks run the fused kernels' tiles (TF32 on CUDA), so they take what those take.
  if (row_block_rows != 0 && fused_supports(config_, FusedOptions{}, &row_block_off_reason_))
    row_blocks_ = row_block_rows;
}

void Actor::prepare(const ParamBuffer& params, const ConstMatrixView& obs) {
  require(obs.extent(0) == static_cast<std::size_t>(rows_) &&
              obs.extent(1) == static_cast<std::size_t>(config_.state_dim),
          "Actor::act: observations are [", obs.extent(0), ", ", obs.extent(1), "]; expected [", rows_, ", ",
          config_.state_dim, "]");
  if (planned_for_.changed({&params, obs.data()})) {
    const std::vector<ForwardPass> passes{{&params, obs, &acts_, 0}};
    if (row_blocks_ != 0) {
      try {
        row_block_forward_ = std::make_unique<RowBlockForward>(net_, passes, row_blocks_);
      } catch (const Error& e) {  // a network too wide for a block's scratch: the forward below instead
        row_block_off_reason_ = e.what();
        row_blocks_ = 0;
      }
    }
    if (row_blocks_ == 0 && fused_)
      fused_forward_ = std::make_unique<FusedForward>(net_, passes, *fused_);
    else if (row_blocks_ == 0)
      forward_ = std::make_unique<ForwardPlan>(net_, passes);
  }
}

void Actor::forward(const ParamBuffer& params, const ConstMatrixView& obs) {
  prepare(params, obs);
  const auto& exec = stream_.exec();
  if (row_blocks_ != 0)
    row_block_forward_->enqueue(exec);
  else if (fused_)
    fused_forward_->enqueue(exec);
  else
    forward_->enqueue(exec, gemm_);
}

kernels::CollectStages<ExecSpace> Actor::acting_stages(Kokkos::View<const float, MemSpace> epsilon) const {
  require(row_blocks_ != 0, "Actor::acting_stages: the actor is not on row blocks (",
          row_block_off_reason_.empty() ? std::string("row_block_rows = 0") : row_block_off_reason_,
          "); expected an actor whose row_blocks() > 0");
  const kernels::BranchTable& table = net_.table();
  const int atoms = config_.atoms;
  kernels::CollectStages<ExecSpace> s;
  const int tile_rows = kernels::collect_tail_chunk(sizeof(float) * kernels::dueling_row_floats(table, atoms), rows_);
  kernels::DuelingEntry e;
  e.value = acts_.value_out.data();
  e.branch_out = acts_.branch_out.data();
  e.logp = acts_.logp.data();
  e.total_rows = rows_;
  e.rows = rows_;
  s.dueling.entries = kernels::DuelingOne{e};
  s.dueling.table = table;
  s.dueling.atoms = atoms;
  s.dueling.tile_rows = tile_rows;
  s.dueling.tiles_per_entry = (rows_ + tile_rows - 1) / tile_rows;
  s.dueling_tiles = s.dueling.tiles_per_entry;
  s.q = {acts_.logp, q_, config_.v_min, kernels::c51_delta(config_.v_min, config_.v_max, atoms)};
  s.q_count = static_cast<std::int64_t>(rows_) * table.actions;
  s.q_chunk = kernels::collect_tail_chunk(sizeof(double) * atoms, s.q_count);
  s.greedy = {q_, epsilon, counter_, actions_, table, rng_};
  s.greedy_count = static_cast<std::int64_t>(rows_) * table.branches;
  s.act_counter = {counter_};
  return s;
}

void Actor::act(const ParamBuffer& params, const ConstMatrixView& obs, Kokkos::View<const float, MemSpace> epsilon) {
  forward(params, obs);
  const auto& exec = stream_.exec();
  if (row_blocks_ != 0) {
    kernels::launch_collect_tail(exec, acting_stages(epsilon), kernels::NoEnvStep<ExecSpace>{}, 0,
                                 Kokkos::View<std::uint64_t, MemSpace>());
    return;
  }
  kernels::q_from_log_probs<ExecSpace>(exec, acts_.logp, config_.v_min, config_.v_max, q_);
  kernels::epsilon_greedy<ExecSpace>(exec, q_, config_.branches, epsilon, counter_, rng_, actions_);
}

}  // namespace zs
