// The training step's forward and backward of the C51 network as batched launches, prepared
// once. Network::forward/backward launch one GEMM and one bias kernel per layer, per pass and
// per head (~80 graph nodes for the step's three passes); here every pass (the online net on s
// and s′, the target net on s′) goes through a dense layer together, and all heads of a layer
// together, so the same work is ~25 launches. Results equal Network's to rounding (sums run
// in another order); tests/network_plan_test.cpp checks that. One difference a reader of the
// activations sees: a plan leaves value_out and branch_out before their biases, which the
// dueling kernel adds as it forms the logits (log-probabilities are the same).
#pragma once
#include <functional>
#include <initializer_list>
#include <map>
#include <utility>
#include <vector>

#include "backends/side_lane.hpp"
#include "nn/network.hpp"

namespace zs {

// One launch of a plan and where it runs when the plan is enqueued with a side lane (without
// one, every op runs in order on the main stream): a `side` op is forked off at the point it
// appears in the list, and reads only what the main ops before it wrote; a `joins` op waits for
// the side first. A plan joins the side at its end, so nothing after it can race the side.
struct PlanOp {
  std::function<void(const ExecSpace&, const Gemm&)> run;
  bool side = false;
  bool joins = false;
};

// The buffers a lazily made plan was made for. The actor makes its forward plan at its first
// act() (a recorded graph's body runs directly once, outside any capture) and remakes it only
// when handed other buffers: changed() says so, and remembers the new ones.
class PlanKey {
 public:
  bool changed(std::initializer_list<const void*> buffers) {
    if (std::vector<const void*>(buffers) == key_) return false;
    key_ = buffers;
    return true;
  }

 private:
  std::vector<const void*> key_;
};

// One forward pass: params on `input` [rows, state_dim] into rows [row0, row0 + rows) of acts.
struct ForwardPass {
  const ParamBuffer* params = nullptr;
  ConstMatrixView input;
  Activations* acts = nullptr;
  int row0 = 0;
};

// One head set's rows for a dueling launch: the parameters whose output-layer biases it adds,
// the set's layers, its activations and rows [row0, row0 + rows) of them.
struct DuelingRows {
  const ParamBuffer* params = nullptr;
  HeadSet set;
  const HeadActs* acts = nullptr;
  int row0 = 0, rows = 0;
  // Where the output layers' rows are when not in acts (ForwardShape::padded_outputs): the value
  // stream's, value_ld floats apart, and the branches', each row padded to row_pad floats.
  const float* value = nullptr;
  const float* branch_out = nullptr;
  int value_ld = 0, row_pad = 1;
};

// The dueling/log-softmax of every head set's rows as one launch, which adds the output layers'
// biases as it forms the logits (the head sets' output layers are left without them: ForwardPlan's,
// and those the fused kernel carries for the ensemble).
kernels::DuelingLaunch<ExecSpace> dueling_launch(const Network& net, const std::vector<DuelingRows>& sets);

// How a ForwardPlan of passes forms its layers (all off: a GEMM batch a layer and a bias pass).
struct ForwardShape {
  // Each trunk layer's bias and ReLU ride in its products (Gemm's GemmBias: cuBLASLt epilogues
  // on CUDA) instead of a separate pass over the activations. Adjacent passes of the same
  // parameters into adjacent rows (the online net on s and on s′) are one product; passes of
  // other parameters than the first pass's (the target net) run on the side lane.
  bool trunk_bias = false;
  // The heads' hidden layers the same way, a product per head and run of passes (on the main
  // stream) instead of one batch and a bias pass over every head's rows.
  bool heads_bias = false;
  // The output layers compute and store their rows padded to a multiple of 4 floats, in the
  // plan's own buffers, where the dueling head reads them, from a padded copy of their weights
  // (one more launch a plan): an odd width (n·atoms) leaves every row after the first off a
  // 16-byte boundary, which keeps cuBLAS to its one-float-aligned kernels. The Activations'
  // value_out and branch_out are then not written.
  bool padded_outputs = false;
  // The heads' hidden layers as one product per run of passes, N = heads·head_hidden wide, from a
  // stacked copy of their weights and biases (the same copy launch as padded_outputs'), the bias
  // and ReLU in its epilogue, into stacked Activations (Activations::stack_heads), which every
  // pass must have (and only this shape writes).
  bool stacked_heads = false;
};

class ForwardPlan {
 public:
  // Every pass has the same row count. The dueling/log-softmax runs once per distinct
  // Activations over all its rows, so the passes should cover each Activations they name.
  ForwardPlan(const Network& net, const std::vector<ForwardPass>& passes, ForwardShape shape = {});
  // Head sets only (e.g. the ensemble's members), each into its own HeadActs, on `features`
  // [rows, trunk.back()] with `params`; every HeadActs has `rows` rows.
  ForwardPlan(const Network& net, const ParamBuffer& params, const ConstMatrixView& features,
              const std::vector<std::pair<HeadSet, HeadActs>>& sets);
  // Enqueues the passes on `exec` (the main stream of `side`, when given); no allocation, no sync.
  // With a side lane, output layers of some head widths run beside the others.
  void enqueue(const ExecSpace& exec, const Gemm& gemm, const SideLane* side = nullptr) const;
  // Launches enqueue() makes (GEMM batches, bias kernels, the dueling heads).
  int launches() const { return static_cast<int>(ops_.size()); }
  // How many of those go to the side lane when there is one.
  int side_launches() const;
  // ForwardShape::stacked_heads: the main heads' hidden weights of `params` stacked [heads·H, F],
  // refreshed by enqueue() (a BackwardPlan after it may read them: BackwardShape::stacked_weights);
  // nullptr where no pass has these parameters or the heads are not stacked.
  const float* stacked_hidden_weights(const ParamBuffer& params) const;

 private:
  struct HeadPass {
    const ParamBuffer* params;
    const float* features;  // [rows, trunk.back()], this pass's first row
    HeadSet set;
    HeadActs acts;
    int row0;  // first row of acts this pass writes
  };
  void add_heads(const Network& net, const std::vector<HeadPass>& passes, int rows, ForwardShape shape = {});
  std::vector<PlanOp> ops_;
  // padded_outputs: per Activations, its value rows, then its branches'; then the padded weights
  std::vector<DeviceFloats> padded_;
  std::map<const ParamBuffer*, const float*> stacked_weights_;  // stacked_heads: params → their copy
};

// One head set's part in a backward pass: its layers, its hidden activations (the first rows
// are used) and the gradient of the loss with respect to its output layers.
struct HeadSetGrads {
  HeadSet set;
  HeadActs acts;
  const float* d_value_out = nullptr;   // [rows, atoms]
  const float* d_branch_out = nullptr;  // flat, branch k at rows·cum[k]·atoms (BranchTable)
};

// How a BackwardPlan forms its head layers (off: a GEMM batch of a product per head).
struct BackwardShape {
  // The heads' hidden layers as one layer of every head's units side by side: ∂loss/∂hidden
  // stored [rows, heads·head_hidden], so that one product gives every hidden weight gradient
  // (copied out to each head's) and one product, reducing over heads·head_hidden, gives
  // ∂loss/∂features already summed over the heads (from a stacked copy of the hidden weights
  // made at the plan's start): two products and two copies instead of a product per head for
  // the weights, a batch for the shares and their sum in the trunk's mask launch.
  bool stacked_heads = false;
  // With stacked_heads and the main head set alone: its hidden weights already stacked [heads·H, F]
  // before the plan runs in each step (ForwardPlan::stacked_hidden_weights of the same parameters,
  // enqueued earlier on the same stream), read in place of a copy of the plan's own (one launch less).
  const float* stacked_weights = nullptr;
};

class BackwardPlan {
 public:
  // The main head set and the trunk, for the first g.rows rows of `acts` (whose input was
  // `input`), from g.d_value_out and g.d_branch_out into `grad` (every tensor overwritten),
  // like Network::backward. Uses g.d_trunk and its own scratch.
  BackwardPlan(const Network& net, const ParamBuffer& params, const ConstMatrixView& input, const Activations& acts,
               Gradients& g, const ParamBuffer& grad, BackwardShape shape = {});
  // Several head sets on the one trunk (e.g. the ensemble's members), all into `grad`; the
  // trunk gets the sum of their input gradients; acts supplies the trunk activations. With no
  // head sets, the trunk alone, from ∂loss/∂features already in g.d_trunk.back().
  BackwardPlan(const Network& net, const ParamBuffer& params, const ConstMatrixView& input, const Activations& acts,
               const std::vector<HeadSetGrads>& sets, Gradients& g, const ParamBuffer& grad,
               BackwardShape shape = {});
  // With a side lane, every weight gradient runs on the side: only the chain of input gradients,
  // masks and bias sums stays on the main stream.
  void enqueue(const ExecSpace& exec, const Gemm& gemm, const SideLane* side = nullptr) const;
  int launches() const { return static_cast<int>(ops_.size()); }
  // How many of those go to the side lane when there is one.
  int side_launches() const;

 private:
  DeviceFloats d_hidden_;    // [heads][rows][head_hidden] (stacked: [rows][heads·head_hidden]): ∂loss/∂(post-ReLU hidden)
  DeviceFloats d_features_;  // [heads][rows][trunk.back()] (stacked: [rows][trunk.back()]): the heads' shares
  DeviceFloats stacked_w_, stacked_dw_;  // stacked: [heads·head_hidden][trunk.back()] weights and their gradient
  std::vector<PlanOp> ops_;
};

}  // namespace zs
