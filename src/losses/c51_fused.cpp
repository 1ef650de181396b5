#include "losses/c51_fused.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"

namespace zs {

namespace {

using kernels::ProductJob;
using kernels::ProductOperand;
using kernels::ProductSegment;

}  // namespace

bool FusedC51::carries_riders(const FusedOptions& o) {
  return o.auxiliaries_ride && o.row_block_backward == 0 && fused_mode(o) == PhasedMode::launches;
}

FusedC51::FusedC51(const StepContext& ctx, Gradients& g, const ParamBuffer& grad, const FusedOptions& options,
                   const std::vector<FusedRider>& riders) {
  const Config& c = ctx.config;
  const Network& net = ctx.net;
  const int B = ctx.batch.size, T = static_cast<int>(c.trunk.size()), K = static_cast<int>(c.branches.size());
  const int F = c.trunk.back(), H = c.head_hidden, Z = c.atoms, heads = 1 + K;
  require(g.rows == B && ctx.online_acts.rows == 2 * B && ctx.target_acts.rows == B, "FusedC51: gradient rows ",
          g.rows, ", activation rows ", ctx.online_acts.rows, " and ", ctx.target_acts.rows, "; expected ", B, ", ",
          2 * B, " and ", B);
  dz_hidden_ = DeviceFloats("zs::fused::dz_hidden", static_cast<std::size_t>(heads) * B * H);
  ce_ = Kokkos::View<float**, Kokkos::LayoutRight, MemSpace>("zs::fused::ce", B, K);

  FusedBuilder b;
  FusedProgramOnDevice program;
  Activations& online = const_cast<Activations&>(ctx.online_acts);
  Activations& target = const_cast<Activations&>(ctx.target_acts);
  const std::vector<ForwardPass> passes{{&ctx.online, ctx.batch.states(), &online, 0},
                                        {&ctx.online, ctx.batch.next_states(), &online, B},
                                        {&ctx.target, ctx.batch.next_states(), &target, 0}};
  std::vector<HeadSetPass> rider_heads;  // the riders' own head sets, on the online net's features of s
  // The riders' own products, each phase's in the riders' order.
  // Rider r's products count in norm r + 1 (C51's is 0).
  const FusedPhaseHook rider_products = [riders](FusedBuilder& builder, FusedPhase phase, int) {
    for (std::size_t r = 0; r < riders.size(); ++r)
      if (riders[r].products) riders[r].products(builder, phase, static_cast<int>(r) + 1);
  };
  for (const FusedRider& r : riders) {
    require(r.g != nullptr && r.grad != nullptr && r.loss && r.g->rows == B &&
                static_cast<int>(r.g->d_trunk.size()) == T,
            "FusedC51: a rider without its loss, gradients or gradient buffer, or with ", r.g ? r.g->rows : 0,
            " gradient rows and ", r.g ? r.g->d_trunk.size() : 0, " trunk gradients; expected ", B, " and ", T);
    for (const HeadSetGrads& hs : r.head_sets) {
      require(hs.acts.rows == B && hs.d_value_out != nullptr && hs.d_branch_out != nullptr, "FusedC51: a rider's head set of ",
              hs.acts.rows, " rows or without its output gradients; expected ", B, " rows and both gradients");
      rider_heads.push_back({&ctx.online, online.trunk[T - 1].data(), hs.set, hs.acts});
    }
  }
  if (options.cluster_forward || options.row_block_forward != 0) {
    require(rider_heads.empty(), "FusedC51: ", rider_heads.size(), " riders' head sets with the forward outside "
            "the kernel (cluster_forward or row_block_forward); expected none (the term keeps its own launches)");
    // The clusters or the row blocks write what the forward's phases would, in a launch before
    // the kernel's.
    std::string why;
    require(fused_supports(c, options, &why), "FusedC51: ", why);
    program.dueling = dueling_tiles(net, passes, options);
    if (options.cluster_forward)
      clusters_ = std::make_unique<ClusterForward>(net, passes);
    else
      row_blocks_ = std::make_unique<RowBlockForward>(net, passes, options.row_block_forward);
  } else {
    program.dueling = add_forward_phases(b, net, passes, options, !options.fuse_head_loss, rider_heads, rider_products);
  }

  kernels::C51BranchLoss<ExecSpace>& L = program.c51;
  L.logp_online = ctx.online_acts.logp;
  L.logp_target = ctx.target_acts.logp;
  L.actions = ctx.batch.actions;
  L.rewards = ctx.batch.rewards;
  L.dones = ctx.batch.dones;
  L.weights = ctx.batch.weights;
  L.projected = ctx.c51.projected;
  L.best = ctx.c51.best;
  L.ce = ce_;
  L.priorities = ctx.c51.priorities;
  L.loss = ctx.c51.loss;
  L.table = net.table();
  L.sup = kernels::Support{c.v_min, c.v_max, static_cast<float>(std::pow(double(c.gamma), c.n_step)), Z};
  L.pad = 4;
  L.narrow_gather = ctx.narrow_gather;
  d_value_parts_ = DeviceFloats("zs::fused::d_value_parts", L.value_floats(B));
  d_branch_out_ = DeviceFloats("zs::fused::d_branch_out", L.branch_floats(B));
  L.d_value_parts = d_value_parts_.data();
  L.d_branch_out = d_branch_out_.data();
  // The head's inputs: the passes above, online on s into rows [0, B) and on s′ into [B, 2B),
  // the target on s′ into [0, B), the output layers' biases added by their products.
  L.online_value = online.value_out.data();
  L.online_branch = online.branch_out.data();
  L.target_value = target.value_out.data();
  L.target_branch = target.branch_out.data();
  L.online_logp = online.logp.data();
  L.target_logp = target.logp.data();
  b.phase();
  b.tiles(options.fuse_head_loss ? kernels::FusedTileKind::c51_head_branch : kernels::FusedTileKind::c51_branch,
          B * K);

  // Backward, the online net on s (the first B rows of its activations): C51's gradient, then each
  // rider's, their products side by side in the same phases. C51's weight gradients are every
  // main-network tensor of `grad`, each written once: the pieces of its norm
  // (FusedOptions::norm_in_backward).
  const HeadSet set = net.main_heads();
  const kernels::BranchTable table = net.table();
  // One head of a chain: its layers, its post-ReLU hidden activations (B rows) and ∂loss/∂(its
  // output layer), as parts summed (C51's value stream: every branch's share), each [B, width]
  // rows of ld floats.
  struct ChainHead {
    int hidden_layer = 0, width = 0;
    const float* hidden = nullptr;
    std::vector<std::pair<const float*, int>> d_out;
  };
  struct Chain {
    std::vector<ChainHead> heads;
    float* dz_hidden = nullptr;  // [heads][B][H]: each head's gradient below its ReLU
    std::vector<float*> d_trunk;
    const ParamBuffer* grad = nullptr;
    int norm = -1;  // the norm its weight gradients count in (FusedBuilder::product)
    float* dz_hidden_of(std::size_t h, int B, int H) const { return dz_hidden + h * B * H; }
  };
  // A head's ∂loss/∂(output layer) as A-operand segments (transposed: [width, B] for its weight
  // gradient, whose B operand `other` then has k = B rows).
  auto d_out_segments = [](const ChainHead& hd, bool transposed, const ProductOperand& other, int k_of_rows) {
    std::vector<ProductSegment> s;
    for (const auto& [p, ld] : hd.d_out)
      s.push_back({transposed ? columns_of(p, ld) : rows_of(p, ld), other, transposed ? k_of_rows : hd.width});
    return s;
  };
  // The main heads on the online net's activations, their output gradients given by `d_out`.
  auto main_heads = [&](const std::function<std::vector<std::pair<const float*, int>>(int)>& d_out) {
    std::vector<ChainHead> hs;
    for (int h = 0; h < heads; ++h)
      hs.push_back({set.hidden_layer(h), net.head_width(h),
                    h == 0 ? online.value_hidden.data() : online.branch_hidden[h - 1].data(), d_out(h)});
    return hs;
  };
  std::vector<Chain> chains(1);
  {
    Chain& c51 = chains[0];
    c51.heads = main_heads([&](int h) {
      std::vector<std::pair<const float*, int>> parts;
      if (h == 0)
        for (int k = 0; k < K; ++k) parts.emplace_back(d_value_parts_.data() + L.value_at(B, k, 0, 0), L.padded(Z));
      else
        parts.emplace_back(d_branch_out_.data() + L.branch_block(B, h - 1), L.branch_ld(h - 1));
      return parts;
    });
    c51.dz_hidden = dz_hidden_.data();
    for (int i = 0; i < T; ++i) c51.d_trunk.push_back(g.d_trunk[i].data());
    c51.grad = &grad;
    c51.norm = 0;
  }
  for (const FusedRider& r : riders) {
    Chain ch;
    if (r.head_sets.empty() && !r.features_given) {
      require(r.g->d_value_out.extent(0) >= static_cast<std::size_t>(B) * Z, "FusedC51: a rider's d_value_out of ",
              r.g->d_value_out.extent(0), " floats; expected ", static_cast<std::size_t>(B) * Z);
      const Gradients* rg = r.g;
      ch.heads = main_heads([&](int h) {
        const float* p = h == 0 ? rg->d_value_out.data() : rg->d_branch_out.data() + table.block(B, Z, h - 1);
        return std::vector<std::pair<const float*, int>>{{p, net.head_width(h)}};
      });
    }
    require(!r.features_given || r.head_sets.empty(), "FusedC51: a rider with ", r.head_sets.size(),
            " head sets and its features' gradient given; expected one or the other");
    for (const HeadSetGrads& hs : r.head_sets)
      for (int h = 0; h < heads; ++h) {
        const int w = net.head_width(h);
        const float* p = h == 0 ? hs.d_value_out : hs.d_branch_out + table.block(B, Z, h - 1);
        ch.heads.push_back({hs.set.hidden_layer(h), w,
                            h == 0 ? hs.acts.value_hidden.data() : hs.acts.branch_hidden[h - 1].data(), {{p, w}}});
      }
    rider_dz_hidden_.emplace_back("zs::fused::rider_dz_hidden", ch.heads.size() * B * H);
    ch.dz_hidden = rider_dz_hidden_.back().data();
    for (int i = 0; i < T; ++i) ch.d_trunk.push_back(r.g->d_trunk[i].data());
    ch.grad = r.grad;
    ch.norm = static_cast<int>(chains.size());
    chains.push_back(std::move(ch));
  }

  // The weight gradients: dW = dzᵀ · x, db = Σ_rows dz, for head h's output layer, its hidden
  // layer, and trunk layer i.
  auto dw_out = [&](const Chain& ch, std::size_t h) {
    const ChainHead& hd = ch.heads[h];
    ProductJob dw;
    dw.m = hd.width;
    dw.n = H;
    dw.out = ch.grad->weight(hd.hidden_layer + 1).data();
    dw.out_ld = H;
    dw.row_sums = ch.grad->bias(hd.hidden_layer + 1).data();
    b.product(dw, d_out_segments(hd, true, columns_of(hd.hidden, H), B), ch.norm);
  };
  auto dw_hidden = [&](const Chain& ch, std::size_t h) {
    ProductJob dw;
    dw.m = H;
    dw.n = F;
    dw.out = ch.grad->weight(ch.heads[h].hidden_layer).data();
    dw.out_ld = F;
    dw.row_sums = ch.grad->bias(ch.heads[h].hidden_layer).data();
    b.product(dw, {{columns_of(ch.dz_hidden_of(h, B, H), H), columns_of(online.trunk[T - 1].data(), F), B}},
              ch.norm);
  };
  auto dw_trunk = [&](const Chain& ch, int i) {
    const int out = c.trunk[i], in = i == 0 ? c.state_dim : c.trunk[i - 1];
    const float* x = i == 0 ? ctx.batch.states().data() : online.trunk[i - 1].data();
    ProductJob dw;
    dw.m = out;
    dw.n = in;
    dw.out = ch.grad->weight(i).data();
    dw.out_ld = in;
    dw.row_sums = ch.grad->bias(i).data();
    b.product(dw, {{columns_of(ch.d_trunk[i], out), columns_of(x, in), B}}, ch.norm);
  };

  if (options.row_block_backward != 0) {
    require(riders.empty(), "FusedC51: ", riders.size(), " riders with row_block_backward ",
            options.row_block_backward, "; expected none (FusedC51::carries_riders)");
    // Every input gradient in one row-block launch after the loss, then every weight gradient in
    // one phase.
    ChainBuffers buffers;
    for (int h = 0; h < heads; ++h) {
      std::vector<kernels::RowBlockSource> sources;
      if (h == 0)
        for (int k = 0; k < K; ++k) sources.push_back({d_value_parts_.data() + L.value_at(B, k, 0, 0), L.padded(Z)});
      else
        sources.push_back({d_branch_out_.data() + L.branch_block(B, h - 1), L.branch_ld(h - 1)});
      buffers.d_out.push_back(sources);
    }
    buffers.dz_hidden = dz_hidden_.data();
    for (int i = 0; i < T; ++i) buffers.d_trunk.push_back(g.d_trunk[i].data());
    chain_ = std::make_unique<RowBlockChain>(net, ctx.online, online, B, buffers, options.row_block_backward);
    b.launch_between([chain = chain_.get()](const ExecSpace& exec) { chain->enqueue(exec); });
    b.phase();
    const Chain& c51 = chains[0];
    for (std::size_t h = 0; h < c51.heads.size(); ++h) dw_out(c51, h);
    b.tiles(kernels::FusedTileKind::c51_finish, 1);
    for (std::size_t h = 0; h < c51.heads.size(); ++h) dw_hidden(c51, h);
    for (int i = T - 1; i >= 0; --i) dw_trunk(c51, i);
  } else {
    // The riders' work that needs only the trunk, beside the head phases and the loss's on the
    // side lane where there is one (before phase T, the heads' first, when the forward is phases;
    // else before the loss's, after the forward's own launch).
    const SideLane* side = options.ahead_beside ? ctx.side : nullptr;
    const bool ahead = std::any_of(riders.begin(), riders.end(), [](const FusedRider& r) { return bool(r.ahead); });
    const bool forward_phases = !options.cluster_forward && options.row_block_forward == 0;
    if (ahead && side != nullptr)
      b.launch_before(forward_phases ? T : 0, [side, riders](const ExecSpace&) {
        side->fork();
        for (const FusedRider& r : riders)
          if (r.ahead) r.ahead(side->exec(), side);
      });
    // The riders' losses read the online net's log-probabilities on s and C51's targets, which the
    // loss's phase writes.
    const SideLane* beside = options.losses_beside && riders.size() > 1 ? ctx.side : nullptr;
    const bool monitors = std::any_of(riders.begin(), riders.end(), [](const FusedRider& r) { return bool(r.monitor); });
    const SideLane* monitors_side = options.monitors_beside && monitors ? ctx.side : nullptr;
    if (!riders.empty())
      b.launch_between([riders, side, ahead, beside, monitors_side](const ExecSpace& exec) {
        if (ahead && side != nullptr) side->join();
        for (const FusedRider& r : riders)
          if (r.ahead && side == nullptr) r.ahead(exec, nullptr);
        if (beside != nullptr) beside->fork();
        for (std::size_t i = 0; i < riders.size(); ++i) {
          const ExecSpace& lane = beside != nullptr && i % 2 == 1 ? beside->exec() : exec;
          riders[i].loss(lane);
          if (riders[i].monitor && monitors_side == nullptr) riders[i].monitor(lane);
        }
        if (beside != nullptr) beside->join();
        if (monitors_side != nullptr) {
          monitors_side->fork();
          for (const FusedRider& r : riders)
            if (r.monitor) r.monitor(monitors_side->exec());
        }
      });
    // Each phase's input gradient feeds the next; each layer's weight gradient shares the phase
    // of the layer below's input gradient. An input gradient: B rows of n columns into out,
    // masked by the ReLU whose output was `mask`.
    auto dx = [&](int n, float* out, const float* mask) {
      ProductJob j;
      j.m = B;
      j.n = n;
      j.out = out;
      j.out_ld = n;
      j.mask = mask;
      j.mask_ld = n;
      return j;
    };
    // A chain's weight gradients in their own phases, or (a rider's, rider_weight_grads_last 2)
    // all in the last one.
    const bool last = options.rider_weight_grads_last >= 2;
    auto here = [&](const Chain& ch) { return !last || &ch == &chains.front(); };
    b.phase();
    for (const Chain& ch : chains)
      for (std::size_t h = 0; h < ch.heads.size(); ++h) {
        // d_hidden = d_out · W_out.
        const ChainHead& hd = ch.heads[h];
        b.product(dx(H, ch.dz_hidden_of(h, B, H), hd.hidden),
                  d_out_segments(hd, false, columns_of(ctx.online.weight(hd.hidden_layer + 1).data(), H), 0));
        if (here(ch)) dw_out(ch, h);
      }
    b.tiles(kernels::FusedTileKind::c51_finish, 1);
    rider_products(b, FusedPhase::backward_out, -1);

    b.phase();
    for (const Chain& ch : chains) {
      // ∂loss/∂features = Σ_heads dz_hidden · W_hidden.
      std::vector<ProductSegment> s;
      for (std::size_t h = 0; h < ch.heads.size(); ++h)
        s.push_back({rows_of(ch.dz_hidden_of(h, B, H), H),
                     columns_of(ctx.online.weight(ch.heads[h].hidden_layer).data(), F), H});
      if (!s.empty()) b.product(dx(F, ch.d_trunk[T - 1], online.trunk[T - 1].data()), s);
      if (here(ch))
        for (std::size_t h = 0; h < ch.heads.size(); ++h) dw_hidden(ch, h);
    }
    rider_products(b, FusedPhase::backward_hidden, -1);
    for (int i = T - 1; i >= 0; --i) {
      b.phase();
      for (const Chain& ch : chains) {
        if (i > 0) {
          const int out = c.trunk[i], in = c.trunk[i - 1];
          b.product(dx(in, ch.d_trunk[i - 1], online.trunk[i - 1].data()),
                    {{rows_of(ch.d_trunk[i], out), columns_of(ctx.online.weight(i).data(), in), out}});
        }
        if (here(ch) || i == 0) dw_trunk(ch, i);
      }
      if (i == T - 1) rider_products(b, FusedPhase::backward_trunk, -1);
    }
    for (const Chain& ch : chains) {
      if (here(ch)) continue;
      for (std::size_t h = 0; h < ch.heads.size(); ++h) dw_out(ch, h);
      for (std::size_t h = 0; h < ch.heads.size(); ++h) dw_hidden(ch, h);
      for (int i = T - 1; i >= 1; --i) dw_trunk(ch, i);
    }
    rider_products(b, FusedPhase::backward_last, -1);
    if (monitors_side != nullptr)
      b.launch_between([monitors_side](const ExecSpace&) { monitors_side->join(); });
  }

  const std::size_t scratch = std::max(
      forward_scratch_bytes(net, options),
      kernels::C51BranchLoss<ExecSpace>::phase_scratch_bytes(
          options.fuse_head_loss, kernels::TileProduct<ExecSpace>::kTeamSize, Z, net.table().widest()));
  kernel_ = b.build(program, scratch, options);
}

}  // namespace zs
