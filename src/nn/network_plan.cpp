#include "nn/network_plan.hpp"

#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>

#include "kernels/dense_batch.hpp"

namespace zs {

namespace {

using kernels::BiasActEntry;
using kernels::ColumnSumEntry;

// One head of a head set: its hidden layer, its output layer and that layer's width.
struct Head {
  int hidden = 0, out = 0, width = 0;
  int branch = -1;                    // −1: the value stream
  const float* hidden_act = nullptr;  // backward only: the post-ReLU hidden activations
  const float* d_out = nullptr;       // backward only: ∂loss/∂(output layer)
};

std::vector<Head> heads_of(const Network& net, const HeadSet& s) {
  const Config& c = net.config();
  std::vector<Head> h{{s.value0, s.value0 + 1, c.atoms, -1, nullptr, nullptr}};
  for (int k = 0; k < static_cast<int>(c.branches.size()); ++k)
    h.push_back({s.branch0 + 2 * k, s.branch0 + 2 * k + 1, c.branches[k] * c.atoms, k, nullptr, nullptr});
  return h;
}

PlanOp gemm_op(GemmBatch batch, bool side = false) {
  return {[batch = std::move(batch)](const ExecSpace&, const Gemm& gemm) { gemm(batch); }, side, false};
}

void enqueue_ops(const std::vector<PlanOp>& ops, const ExecSpace& exec, const Gemm& gemm, const SideLane* side) {
  bool main_since_fork = true, side_pending = false;
  for (const PlanOp& op : ops) {
    if (side && op.side) {
      // One fork covers every side op until the main stream enqueues something new.
      if (main_since_fork) side->fork();
      main_since_fork = false;
      op.run(side->exec(), side->gemm());
      side_pending = true;
      continue;
    }
    if (op.joins && side_pending) {
      side->join();
      side_pending = false;
    }
    op.run(exec, gemm);
    main_since_fork = true;
  }
  if (side_pending) side->join();
}

int count_side(const std::vector<PlanOp>& ops) {
  int n = 0;
  for (const PlanOp& op : ops) n += op.side ? 1 : 0;
  return n;
}

// The passes in runs of consecutive ones that one product covers: each pass joins the run before
// it when follows(last pass of that run, pass) says so.
template <class Pass, class Follows>
std::vector<std::vector<std::size_t>> runs_of(const std::vector<Pass>& passes, const Follows& follows) {
  std::vector<std::vector<std::size_t>> runs;
  for (std::size_t p = 0; p < passes.size(); ++p) {
    if (!runs.empty() && follows(passes[runs.back().back()], passes[p]))
      runs.back().push_back(p);
    else
      runs.push_back({p});
  }
  return runs;
}

// Heads grouped by output width, in head order: one GEMM batch per distinct width.
std::vector<std::vector<int>> by_width(const std::vector<Head>& heads) {
  std::map<int, std::vector<int>> m;
  std::vector<int> order;
  for (int i = 0; i < static_cast<int>(heads.size()); ++i) {
    if (m.find(heads[i].width) == m.end()) order.push_back(heads[i].width);
    m[heads[i].width].push_back(i);
  }
  std::vector<std::vector<int>> groups;
  for (int w : order) groups.push_back(m[w]);
  return groups;
}

}  // namespace

ForwardPlan::ForwardPlan(const Network& net, const std::vector<ForwardPass>& passes, ForwardShape shape) {
  const Config& c = net.config();
  require(!passes.empty(), "ForwardPlan: 0 passes given; expected at least 1");
  const int R = static_cast<int>(passes[0].input.extent(0)), T = static_cast<int>(c.trunk.size());
  const int F = c.trunk.back();
  for (std::size_t p = 0; p < passes.size(); ++p) {
    const ForwardPass& x = passes[p];
    require(x.params != nullptr && x.acts != nullptr, "ForwardPlan: pass ", p, " has no parameters or activations");
    require(static_cast<int>(x.input.extent(0)) == R && static_cast<int>(x.input.extent(1)) == c.state_dim,
            "ForwardPlan: pass ", p, " input is [", x.input.extent(0), ", ", x.input.extent(1), "]; expected [", R,
            ", ", c.state_dim, "]");
    require(x.row0 >= 0 && x.row0 + R <= x.acts->rows, "ForwardPlan: pass ", p, " writes rows ", x.row0, "..",
            x.row0 + R, " of activations with ", x.acts->rows, " rows");
  }
  auto row = [](const DeviceFloats& f, int row0, int cols) { return f.data() + static_cast<std::size_t>(row0) * cols; };

  bool trunk_on_side = false;
  if (shape.trunk_bias) {
    // Runs of passes that one product covers: the same parameters and activations, adjacent
    // rows, and (for the first layer) adjacent input rows.
    const auto runs = runs_of(passes, [&](const ForwardPass& prev, const ForwardPass& x) {
      return x.params == prev.params && x.acts == prev.acts && x.row0 == prev.row0 + R &&
             x.input.data() == prev.input.data() + static_cast<std::size_t>(R) * c.state_dim;
    });
    // The side lane's runs first, so one fork at the plan's start lets their whole chain run
    // beside the main one's; the heads then join it.
    for (const bool side : {true, false})
      for (const auto& run : runs) {
        const ForwardPass& x = passes[run.front()];
        const bool on_side = x.params != passes.front().params;
        if (on_side != side) continue;
        trunk_on_side = trunk_on_side || on_side;
        for (int i = 0; i < T; ++i) {
          const int in = i == 0 ? c.state_dim : c.trunk[i - 1], out = c.trunk[i];
          GemmBias p;
          p.ta = Trans::N;
          p.tb = Trans::T;
          p.m = R * static_cast<int>(run.size());
          p.n = out;
          p.k = in;
          p.a = i == 0 ? x.input.data() : row(x.acts->trunk[i - 1], x.row0, in);
          p.b = x.params->weight(i).data();
          p.c = row(x.acts->trunk[i], x.row0, out);
          p.bias = x.params->bias(i).data();
          p.relu = true;
          ops_.push_back({[p](const ExecSpace&, const Gemm& gemm) { gemm(p); }, on_side, false});
        }
      }
  } else {
    for (int i = 0; i < T; ++i) {
      const int in = i == 0 ? c.state_dim : c.trunk[i - 1], out = c.trunk[i];
      std::vector<GemmEntry> g;
      std::vector<BiasActEntry> b;
      for (const ForwardPass& x : passes) {
        const float* a = i == 0 ? x.input.data() : row(x.acts->trunk[i - 1], x.row0, in);
        float* y = row(x.acts->trunk[i], x.row0, out);
        g.push_back({a, x.params->weight(i).data(), y});
        b.push_back({y, x.params->bias(i).data(), out, 1});
      }
      ops_.push_back(gemm_op(GemmBatch(Trans::N, Trans::T, R, out, in, 1.f, 0.f, g)));
      kernels::BiasActLaunch<ExecSpace> bias(b, R);
      ops_.push_back({[bias](const ExecSpace& exec, const Gemm&) { bias(exec); }});
    }
  }

  std::vector<HeadPass> heads;
  for (const ForwardPass& x : passes)
    heads.push_back({x.params, row(x.acts->trunk[T - 1], x.row0, F), net.main_heads(), x.acts->heads(), x.row0});
  const std::size_t first_head_op = ops_.size();
  add_heads(net, heads, R, shape);
  if (trunk_on_side) ops_[first_head_op].joins = true;  // the heads read every pass's features
}

ForwardPlan::ForwardPlan(const Network& net, const ParamBuffer& params, const ConstMatrixView& features,
                         const std::vector<std::pair<HeadSet, HeadActs>>& sets) {
  const Config& c = net.config();
  const int R = static_cast<int>(features.extent(0));
  require(!sets.empty(), "ForwardPlan: 0 head sets given; expected at least 1");
  require(static_cast<int>(features.extent(1)) == c.trunk.back(), "ForwardPlan: features are [", features.extent(0),
          ", ", features.extent(1), "]; expected [", R, ", ", c.trunk.back(), "]");
  std::vector<HeadPass> heads;
  for (std::size_t i = 0; i < sets.size(); ++i) {
    require(sets[i].second.rows == R, "ForwardPlan: head set ", i, " has activations for ", sets[i].second.rows,
            " rows; expected ", R, " (the features' rows)");
    heads.push_back({&params, features.data(), sets[i].first, sets[i].second, 0});
  }
  add_heads(net, heads, R);
}

// The head sets of every pass: hidden layers as one GEMM batch and a bias/ReLU table launch (or,
// ForwardShape::heads_bias, a product with the bias epilogue per head and run of passes),
// output layers as one batch per width, then the dueling/log-softmax once per distinct logp.
void ForwardPlan::add_heads(const Network& net, const std::vector<HeadPass>& passes, int R, ForwardShape shape) {
  const Config& c = net.config();
  const int H = c.head_hidden;
  auto row = [](const DeviceFloats& f, int row0, int cols) { return f.data() + static_cast<std::size_t>(row0) * cols; };
  // Every pass's activations stacked (Activations::stack_heads) or none; stacked ones only with
  // ForwardShape::stacked_heads, which writes them.
  const int hidden_ld = passes[0].acts.hidden_ld(H);
  for (std::size_t p = 0; p < passes.size(); ++p)
    require(passes[p].acts.stacked > 0 == shape.stacked_heads, "ForwardPlan: pass ", p, "'s head activations are ",
            passes[p].acts.stacked > 0 ? "stacked" : "per head", " and the plan's heads ",
            shape.stacked_heads ? "stacked" : "per head", "; expected the same (Activations::stack_heads with ",
            "ForwardShape::stacked_heads)");
  auto hidden_of = [&](const HeadPass& x, const Head& h) {
    return x.acts.hidden(h.branch + 1, H) + static_cast<std::size_t>(x.row0) * hidden_ld;
  };
  // Padded outputs: a buffer per distinct activations (its value rows, then its branches'), the
  // first pass that names them its key.
  constexpr int kPad = 4;
  const kernels::BranchTable& table = net.table();
  auto padded_ld = [&](int width) { return shape.padded_outputs ? (width + kPad - 1) / kPad * kPad : width; };
  const int value_ld = padded_ld(c.atoms);
  std::map<const float*, float*> padded_of;  // acts' value_out → its padded buffer
  if (shape.padded_outputs)
    for (const HeadPass& x : passes) {
      if (padded_of.count(x.acts.value_out.data()) != 0) continue;
      const std::size_t floats = static_cast<std::size_t>(x.acts.rows) * value_ld +
                                 table.padded_block(x.acts.rows, c.atoms, table.branches, kPad);
      padded_.emplace_back("zs::plan::padded_outputs", floats);
      padded_of[x.acts.value_out.data()] = padded_.back().data();
    }
  // The products compute the padded width too, from a padded copy of each output layer's weights
  // (zero rows after the real ones, refreshed by one launch a step): with n still odd, cuBLAS kept
  // its one-float-aligned kernels (H100, thirty-fifth session: padded rows alone changed nothing).
  std::map<std::pair<const ParamBuffer*, int>, float*> padded_weight_of;  // (params, output layer) → copy
  std::vector<kernels::CopyEntry> copies;  // one launch a plan: the padded and the stacked weights
  if (shape.padded_outputs) {
    std::vector<std::pair<std::pair<const ParamBuffer*, int>, int>> layers;  // (key, width), first seen first
    std::size_t floats = 0;
    for (const HeadPass& x : passes)
      for (const Head& h : heads_of(net, x.set))
        if (padded_weight_of.emplace(std::make_pair(x.params, h.out), nullptr).second) {
          layers.push_back({{x.params, h.out}, h.width});
          floats += static_cast<std::size_t>(padded_ld(h.width)) * H;
        }
    padded_.emplace_back("zs::plan::padded_weights", floats);
    float* dst = padded_.back().data();
    for (const auto& [key, width] : layers) {
      padded_weight_of[key] = dst;
      copies.push_back({key.first->weight(key.second).data(), dst, width * H});
      dst += static_cast<std::size_t>(padded_ld(width)) * H;
    }
  }
  // Stacked heads: per distinct parameters, every head's hidden weights [heads·H, F] and biases
  // [heads·H] side by side, refreshed by the same launch.
  std::map<const ParamBuffer*, std::pair<float*, float*>> stacked_of;  // params → (weights, biases)
  if (shape.stacked_heads) {
    const int F = c.trunk.back();
    for (const HeadPass& x : passes) {
      if (stacked_of.count(x.params) != 0) continue;
      const std::vector<Head> heads = heads_of(net, x.set);
      const std::size_t n = heads.size() * static_cast<std::size_t>(H);
      padded_.emplace_back("zs::plan::stacked_hidden", n * F + n);
      float* w = padded_.back().data();
      float* b = w + n * F;
      stacked_of[x.params] = {w, b};
      stacked_weights_[x.params] = w;
      for (std::size_t i = 0; i < heads.size(); ++i) {
        copies.push_back({x.params->weight(heads[i].hidden).data(), w + i * H * F, H * F});
        copies.push_back({x.params->bias(heads[i].hidden).data(), b + i * H, H});
      }
    }
  }
  if (!copies.empty()) {
    kernels::CopyLaunch<ExecSpace> copy(copies);
    ops_.push_back({[copy](const ExecSpace& exec, const Gemm&) { copy(exec); }});
  }
  auto out_weight_of = [&](const HeadPass& x, const Head& h) {
    return shape.padded_outputs ? padded_weight_of.at({x.params, h.out}) : x.params->weight(h.out).data();
  };
  auto padded_value = [&](const HeadPass& x) { return padded_of.at(x.acts.value_out.data()); };
  auto padded_branches = [&](const HeadPass& x) {
    return padded_value(x) + static_cast<std::size_t>(x.acts.rows) * value_ld;
  };
  auto out_of = [&](const HeadPass& x, const Head& h) {
    if (shape.padded_outputs) {
      if (h.branch < 0) return padded_value(x) + static_cast<std::size_t>(x.row0) * value_ld;
      return padded_branches(x) + table.padded_block(x.acts.rows, c.atoms, h.branch, kPad) +
             static_cast<std::size_t>(x.row0) * padded_ld(h.width);
    }
    if (h.branch < 0) return row(x.acts.value_out, x.row0, c.atoms);
    return x.acts.branch_out.data() + table.block(x.acts.rows, c.atoms, h.branch) +
           static_cast<std::size_t>(x.row0) * h.width;
  };
  // Runs of passes one product covers: the same parameters and head activations, adjacent rows
  // and adjacent features (the online net on s and s′).
  const auto runs = runs_of(passes, [&](const HeadPass& prev, const HeadPass& x) {
    return x.params == prev.params && x.acts.hidden(0, H) == prev.acts.hidden(0, H) && x.row0 == prev.row0 + R &&
           x.features == prev.features + static_cast<std::size_t>(R) * c.trunk.back();
  });
  // A product over a run's rows with the bias and ReLU in its epilogue: no pass over the rows after.
  auto run_product = [&](const std::vector<std::size_t>& run, int n, const float* w, const float* bias, float* out) {
    GemmBias p;
    p.ta = Trans::N;
    p.tb = Trans::T;
    p.m = R * static_cast<int>(run.size());
    p.n = n;
    p.k = c.trunk.back();
    p.a = passes[run.front()].features;
    p.b = w;
    p.c = out;
    p.bias = bias;
    p.relu = true;
    ops_.push_back({[p](const ExecSpace&, const Gemm& gemm) { gemm(p); }, false, false});
  };
  if (shape.stacked_heads) {
    // A product per run for every head at once, N = heads·H wide (the first head's columns first).
    for (const auto& run : runs) {
      const HeadPass& x = passes[run.front()];
      const auto& [w, bias] = stacked_of.at(x.params);
      run_product(run, hidden_ld, w, bias, hidden_of(x, heads_of(net, x.set).front()));
    }
  } else if (shape.heads_bias) {
    // A product per head and run.
    for (const auto& run : runs) {
      const HeadPass& x = passes[run.front()];
      for (const Head& h : heads_of(net, x.set))
        run_product(run, H, x.params->weight(h.hidden).data(), x.params->bias(h.hidden).data(), hidden_of(x, h));
    }
  } else {
    std::vector<GemmEntry> g;
    std::vector<BiasActEntry> b;
    for (const HeadPass& x : passes)
      for (const Head& h : heads_of(net, x.set)) {
        g.push_back({x.features, x.params->weight(h.hidden).data(), hidden_of(x, h)});
        b.push_back({hidden_of(x, h), x.params->bias(h.hidden).data(), H, 1});
      }
    ops_.push_back(gemm_op(GemmBatch(Trans::N, Trans::T, R, H, c.trunk.back(), 1.f, 0.f, g)));
    kernels::BiasActLaunch<ExecSpace> bias(b, R);
    ops_.push_back({[bias](const ExecSpace& exec, const Gemm&) { bias(exec); }});
  }
  // Every head set has the same widths, so the groups of the first one hold for all. The
  // groups are independent: every other one goes to the side lane, and those come first, so
  // that one fork (after the hidden layers' bias) starts them all.
  const std::vector<Head> first = heads_of(net, passes[0].set);
  const auto groups = by_width(first);
  for (int side = 1; side >= 0; --side)
    for (std::size_t j = side; j < groups.size(); j += 2) {
      std::vector<GemmEntry> g;
      for (const HeadPass& x : passes) {
        const std::vector<Head> heads = heads_of(net, x.set);
        for (int i : groups[j]) g.push_back({hidden_of(x, heads[i]), out_weight_of(x, heads[i]), out_of(x, heads[i])});
      }
      const int width = padded_ld(first[groups[j][0]].width);
      ops_.push_back(gemm_op(GemmBatch(Trans::N, Trans::T, R, width, H, 1.f, 0.f, g).with_ld(hidden_ld, 0, 0), side == 1));
    }
  std::vector<DuelingRows> duel;
  for (const HeadPass& x : passes) {
    duel.push_back({x.params, x.set, &x.acts, x.row0, R});
    if (shape.padded_outputs) {
      duel.back().value = padded_value(x);
      duel.back().branch_out = padded_branches(x);
      duel.back().value_ld = value_ld;
      duel.back().row_pad = kPad;
    }
  }
  kernels::DuelingLaunch<ExecSpace> dueling = dueling_launch(net, duel);
  ops_.push_back({[dueling](const ExecSpace& exec, const Gemm&) { dueling(exec); }, false, true});
}

kernels::DuelingLaunch<ExecSpace> dueling_launch(const Network& net, const std::vector<DuelingRows>& sets) {
  std::vector<kernels::DuelingEntry> entries;
  std::vector<const float*> branch_biases;
  for (const DuelingRows& x : sets) {
    const std::vector<Head> heads = heads_of(net, x.set);
    kernels::DuelingEntry e;
    e.value = x.value ? x.value : x.acts->value_out.data();
    e.branch_out = x.branch_out ? x.branch_out : x.acts->branch_out.data();
    e.value_ld = x.value_ld;
    e.row_pad = x.row_pad;
    e.logp = x.acts->logp.data();
    e.total_rows = x.acts->rows;
    e.row0 = x.row0;
    e.rows = x.rows;
    e.value_bias = x.params->bias(heads[0].out).data();
    e.branch_bias = static_cast<int>(branch_biases.size());
    for (std::size_t i = 1; i < heads.size(); ++i) branch_biases.push_back(x.params->bias(heads[i].out).data());
    entries.push_back(e);
  }
  return kernels::DuelingLaunch<ExecSpace>(entries, branch_biases, net.table(), net.config().atoms);
}

void ForwardPlan::enqueue(const ExecSpace& exec, const Gemm& gemm, const SideLane* side) const {
  enqueue_ops(ops_, exec, gemm, side);
}

int ForwardPlan::side_launches() const { return count_side(ops_); }

const float* ForwardPlan::stacked_hidden_weights(const ParamBuffer& params) const {
  const auto it = stacked_weights_.find(&params);
  return it == stacked_weights_.end() ? nullptr : it->second;
}

BackwardPlan::BackwardPlan(const Network& net, const ParamBuffer& p, const ConstMatrixView& input,
                           const Activations& acts, Gradients& g, const ParamBuffer& grad, BackwardShape shape)
    : BackwardPlan(net, p, input, acts, {{net.main_heads(), acts.heads(), g.d_value_out.data(), g.d_branch_out.data()}},
                   g, grad, shape) {}

BackwardPlan::BackwardPlan(const Network& net, const ParamBuffer& p, const ConstMatrixView& input,
                           const Activations& acts, const std::vector<HeadSetGrads>& sets, Gradients& g,
                           const ParamBuffer& grad, BackwardShape shape) {
  const Config& c = net.config();
  const int B = g.rows, T = static_cast<int>(c.trunk.size()), F = c.trunk.back(), H = c.head_hidden;
  require(B <= acts.rows, "BackwardPlan: ", B, " gradient rows but only ", acts.rows, " activation rows");
  require(static_cast<int>(input.extent(0)) == B && static_cast<int>(input.extent(1)) == c.state_dim,
          "BackwardPlan: input is [", input.extent(0), ", ", input.extent(1), "]; expected [", B, ", ", c.state_dim,
          "]");
  // Every head of every set, with where its hidden activations (first B rows) and its output
  // gradient live. All sets share the trunk: their shares of ∂loss/∂features are added up.
  // Every set's hidden activations per head or stacked alike (their rows act_ld floats apart).
  std::vector<Head> heads;
  const int act_ld = sets.empty() ? H : sets[0].acts.hidden_ld(H);
  for (std::size_t i = 0; i < sets.size(); ++i) {
    const HeadSetGrads& s = sets[i];
    require(s.acts.rows >= B && s.d_value_out && s.d_branch_out, "BackwardPlan: head set ", i, " has ", s.acts.rows,
            " activation rows or no output gradient; expected >= ", B, " rows and both gradients");
    require(s.acts.hidden_ld(H) == act_ld, "BackwardPlan: head set ", i, "'s hidden activations have rows ",
            s.acts.hidden_ld(H), " floats apart, set 0's ", act_ld, "; expected all per head or all stacked alike");
    for (Head h : heads_of(net, s.set)) {
      h.hidden_act = s.acts.hidden(h.branch + 1, H);
      h.d_out = h.branch < 0 ? s.d_value_out
                             : s.d_branch_out + net.table().block(B, c.atoms, h.branch);
      heads.push_back(h);
    }
  }
  const int n_heads = static_cast<int>(heads.size());
  const bool stacked = shape.stacked_heads && n_heads > 0;
  const int NH = n_heads * H;
  d_hidden_ = DeviceFloats("zs::plan::d_hidden", static_cast<std::size_t>(n_heads) * B * H);
  d_features_ = DeviceFloats("zs::plan::d_features", static_cast<std::size_t>(stacked ? 1 : n_heads) * B * F);
  auto hidden_of = [](const Head& h) { return h.hidden_act; };
  auto d_out_of = [](const Head& h) { return h.d_out; };
  // Stacked: head i's block of columns of [B, NH]; otherwise its own [B, H].
  const int d_hidden_ld = stacked ? NH : H;
  auto d_hidden_of = [&](int i) { return d_hidden_.data() + static_cast<std::size_t>(i) * (stacked ? H : B * H); };
  const auto groups = by_width(heads);
  require(!shape.stacked_weights || (stacked && sets.size() == 1 && sets[0].set.value0 == net.main_heads().value0 &&
                                      sets[0].set.branch0 == net.main_heads().branch0),
          "BackwardPlan: stacked weights given for ", sets.size(), " head set(s)",
          shape.stacked_heads ? "" : " with the heads not stacked",
          "; expected the stacked shape and the main head set alone, whose weights a forward plan stacks");
  const float* stacked_w = shape.stacked_weights;
  if (stacked) {
    stacked_dw_ = DeviceFloats("zs::plan::stacked_hidden_grads", static_cast<std::size_t>(NH) * F);
    if (!stacked_w) {
      // The hidden weights stacked [NH, F], refreshed at the plan's start (the optimizer moved them).
      stacked_w_ = DeviceFloats("zs::plan::stacked_hidden_weights", static_cast<std::size_t>(NH) * F);
      stacked_w = stacked_w_.data();
      std::vector<kernels::CopyEntry> copies;
      for (int i = 0; i < n_heads; ++i)
        copies.push_back({p.weight(heads[i].hidden).data(), stacked_w_.data() + static_cast<std::size_t>(i) * H * F, H * F});
      kernels::CopyLaunch<ExecSpace> copy(copies);
      ops_.push_back({[copy](const ExecSpace& exec, const Gemm&) { copy(exec); }});
    }
  }

  // Without head sets, g.d_trunk.back() already holds ∂loss/∂features: only the trunk runs.
  if (n_heads > 0) {
    // Output layers: weight gradients, then the gradient into each head's hidden layer.
    for (const auto& group : groups) {
      std::vector<GemmEntry> e;
      for (int i : group) e.push_back({d_out_of(heads[i]), hidden_of(heads[i]), grad.weight(heads[i].out).data()});
      ops_.push_back(
          gemm_op(GemmBatch(Trans::T, Trans::N, heads[group[0]].width, H, B, 1.f, 0.f, e).with_ld(0, act_ld, 0), true));
    }
    for (const auto& group : groups) {
      std::vector<GemmEntry> e;
      for (int i : group) e.push_back({d_out_of(heads[i]), p.weight(heads[i].out).data(), d_hidden_of(i)});
      ops_.push_back(
          gemm_op(GemmBatch(Trans::N, Trans::N, B, H, heads[group[0]].width, 1.f, 0.f, e).with_ld(0, 0, d_hidden_ld)));
    }
    // Every output bias and, through the ReLU mask, every hidden bias: one launch.
    {
      std::vector<ColumnSumEntry> e;
      for (const Head& h : heads) e.push_back({d_out_of(h), 0, 1, nullptr, nullptr, grad.bias(h.out).data(), h.width});
      for (int i = 0; i < n_heads; ++i)
        e.push_back({d_hidden_of(i), 0, 1, hidden_of(heads[i]), d_hidden_of(i), grad.bias(heads[i].hidden).data(), H,
                     d_hidden_ld, act_ld});
      kernels::ColumnSumLaunch<ExecSpace> sums(e, B);
      ops_.push_back({[sums](const ExecSpace& exec, const Gemm&) { sums(exec); }});
    }
    if (stacked) {
      // Every hidden weight gradient in one product, then copied out to each head's; ∂loss/∂features
      // summed over the heads by one product reducing over every head's units.
      const float* features = acts.trunk[T - 1].data();
      ops_.push_back(gemm_op(GemmBatch(Trans::T, Trans::N, NH, F, B, 1.f, 0.f, {{d_hidden_.data(), features, stacked_dw_.data()}}), true));
      std::vector<kernels::CopyEntry> copies;
      for (int i = 0; i < n_heads; ++i)
        copies.push_back({stacked_dw_.data() + static_cast<std::size_t>(i) * H * F, grad.weight(heads[i].hidden).data(), H * F});
      kernels::CopyLaunch<ExecSpace> copy(copies);
      ops_.push_back({[copy](const ExecSpace& exec, const Gemm&) { copy(exec); }, true, false});
      ops_.push_back(gemm_op(GemmBatch(Trans::N, Trans::N, B, F, NH, 1.f, 0.f, {{d_hidden_.data(), stacked_w, d_features_.data()}})));
    } else {
      // Hidden layers: weight gradients, and each head's share of ∂loss/∂features (summed below).
      const float* features = acts.trunk[T - 1].data();
      std::vector<GemmEntry> w, x;
      for (int i = 0; i < n_heads; ++i) {
        w.push_back({d_hidden_of(i), features, grad.weight(heads[i].hidden).data()});
        x.push_back({d_hidden_of(i), p.weight(heads[i].hidden).data(), d_features_.data() + static_cast<std::size_t>(i) * B * F});
      }
      ops_.push_back(gemm_op(GemmBatch(Trans::T, Trans::N, H, F, B, 1.f, 0.f, w), true));
      ops_.push_back(gemm_op(GemmBatch(Trans::N, Trans::N, B, F, H, 1.f, 0.f, x)));
    }
  }
  // Trunk, top down. The top layer's mask kernel also adds up the heads' shares.
  for (int i = T - 1; i >= 0; --i) {
    const int out = c.trunk[i], in = i == 0 ? c.state_dim : c.trunk[i - 1];
    float* dz = g.d_trunk[i].data();
    ColumnSumEntry e{dz, 0, 1, acts.trunk[i].data(), dz, grad.bias(i).data(), out};
    if (i == T - 1 && n_heads > 0)
      e.parts = d_features_.data(), e.part_stride = static_cast<std::int64_t>(B) * F, e.n_parts = stacked ? 1 : n_heads;
    kernels::ColumnSumLaunch<ExecSpace> mask({e}, B);
    ops_.push_back({[mask](const ExecSpace& exec, const Gemm&) { mask(exec); }});
    const float* x = i == 0 ? input.data() : acts.trunk[i - 1].data();
    ops_.push_back(gemm_op(GemmBatch(Trans::T, Trans::N, out, in, B, 1.f, 0.f, {{dz, x, grad.weight(i).data()}}), true));
    if (i > 0)
      ops_.push_back(gemm_op(GemmBatch(Trans::N, Trans::N, B, in, out, 1.f, 0.f, {{dz, p.weight(i).data(), g.d_trunk[i - 1].data()}})));
  }
}

void BackwardPlan::enqueue(const ExecSpace& exec, const Gemm& gemm, const SideLane* side) const {
  enqueue_ops(ops_, exec, gemm, side);
}

int BackwardPlan::side_launches() const { return count_side(ops_); }

}  // namespace zs
