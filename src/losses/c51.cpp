#include "losses/c51.hpp"

#include <cmath>

#include "kernels/c51_loss.hpp"

namespace zs {

C51Outputs::C51Outputs(const Config& c, int B, DeviceScalar<float> loss_slot)
    : loss(loss_slot.data() ? loss_slot : DeviceScalar<float>("zs::loss")),
      priorities("zs::loss::priorities", B),
      projected("zs::loss::projected", B, c.branches.size(), c.atoms),
      best("zs::loss::best", B, c.branches.size()) {}

C51Term::C51Term(const StepContext& ctx, float budget)
    : LossTerm("c51", budget, ctx), ctx_(ctx), g_(ctx.config, ctx.batch.size) {
  require(loss().data() == ctx.c51.loss.data(), "C51Term: its loss slot is not the C51 outputs' loss; expected the ",
          "trainer to give the C51 outputs slot 0's loss and to make the C51 term first");
  if (!ctx.fused)
    backward_ = std::make_unique<BackwardPlan>(ctx.net, ctx.online, ctx.batch.states(), ctx.online_acts, g_, grad(),
                                               BackwardShape{ctx.stacked_heads, ctx.stacked_hidden_weights});
}

std::size_t C51Term::fuse(const std::vector<FusedRider>& riders) {
  require(ctx_.fused != nullptr && !fused_, "C51Term::fuse: ", ctx_.fused ? "called twice" : "no fused options",
          "; expected one call on a term made with the fused step's options");
  for (std::size_t n = riders.size();; --n) {
    FusedOptions options = *ctx_.fused;
    if (n < riders.size()) options.norm_in_backward = false;
    try {
      fused_ = std::make_unique<FusedC51>(ctx_, g_, grad(), options,
                                          std::vector<FusedRider>(riders.begin(), riders.begin() + n));
    } catch (const FusedTooLarge&) {
      if (n == 0) throw;
      continue;
    }
    for (std::size_t i = 0; i < n; ++i)
      if (riders[i].accepted) riders[i].accepted();
    return n;
  }
}

void c51_loss(const ExecSpace& exec, const Network& net, const Activations& online, const Activations& target,
              const DeviceBatch& batch, C51Outputs& out, Gradients& g, bool narrow_gather, int min_blocks) {
  const Config& c = net.config();
  const int B = batch.size;
  require(online.rows == 2 * B && target.rows == B && g.rows == B, "c51_loss: activation rows online ", online.rows,
          ", target ", target.rows, ", gradient ", g.rows, "; expected ", 2 * B, ", ", B, ", ", B);
  kernels::C51Loss<ExecSpace> f;
  f.logp_online = online.logp;
  f.logp_target = target.logp;
  f.actions = batch.actions;
  f.rewards = batch.rewards;
  f.dones = batch.dones;
  f.weights = batch.weights;
  f.priorities = out.priorities;
  f.projected = out.projected;
  f.best = out.best;
  f.d_value = as_matrix(g.d_value_out, B, c.atoms);
  f.d_branch_out = Kokkos::View<float*, MemSpace, Kokkos::MemoryUnmanaged>(g.d_branch_out.data(), g.d_branch_out.extent(0));
  f.table = net.table();
  f.sup = kernels::Support{c.v_min, c.v_max, static_cast<float>(std::pow(double(c.gamma), c.n_step)), c.atoms};
  f.narrow_gather = narrow_gather;
  f.min_blocks = min_blocks;
  kernels::c51_loss(exec, f, out.loss);
}

void C51Term::enqueue(const ExecSpace& exec, const Gemm& gemm) {
  if (ctx_.fused) {
    require(fused_ != nullptr, "C51Term: the fused kernel was never built; expected fuse() once every term is made");
    return fused_->enqueue(exec);
  }
  c51_loss(exec, ctx_.net, ctx_.online_acts, ctx_.target_acts, ctx_.batch, ctx_.c51, g_, ctx_.narrow_gather,
           ctx_.c51_min_blocks);
  backward_->enqueue(exec, gemm, ctx_.side);
}

}  // namespace zs
