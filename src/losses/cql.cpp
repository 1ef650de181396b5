#include "losses/cql.hpp"

#include <optional>

#include "kernels/cql_loss.hpp"

namespace zs {

CqlTerm::CqlTerm(const StepContext& ctx, float budget)
    : LossTerm("cql", budget, ctx), ctx_(ctx), g_(ctx.config, ctx.batch.size) {
  backward_ = std::make_unique<BackwardPlan>(ctx.net, ctx.online, ctx.batch.states(), ctx.online_acts, g_, grad(),
                                             BackwardShape{ctx.stacked_heads, ctx.stacked_hidden_weights});
}

void CqlTerm::enqueue(const ExecSpace& exec, const Gemm& gemm) {
  if (riding_) return;
  enqueue_loss(exec);
  backward_->enqueue(exec, gemm, ctx_.side);
}

std::optional<FusedRider> CqlTerm::ride_fused(const FusedOptions&, const Gemm&) {
  FusedRider r;
  r.loss = [this](const ExecSpace& exec) { enqueue_loss(exec); };
  r.accepted = [this] { riding_ = true; };
  r.g = &g_;
  r.grad = &grad();
  return r;
}

void CqlTerm::enqueue_loss(const ExecSpace& exec) {
  const Config& c = ctx_.config;
  const int B = ctx_.batch.size;
  kernels::CqlLoss<ExecSpace> f;
  f.logp = ctx_.online_acts.logp;
  f.actions = ctx_.batch.actions;
  f.d_value = as_matrix(g_.d_value_out, B, c.atoms);
  f.d_branch_out =
      Kokkos::View<float*, MemSpace, Kokkos::MemoryUnmanaged>(g_.d_branch_out.data(), g_.d_branch_out.extent(0));
  f.table = ctx_.net.table();
  f.v_min = c.v_min;
  f.delta = (c.v_max - c.v_min) / static_cast<float>(c.atoms - 1);
  f.alpha = c.cql.alpha;
  f.batch = B;
  kernels::cql_loss(exec, f, loss());
}

}  // namespace zs
