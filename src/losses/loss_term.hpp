// What every auxiliary loss of issue 6 (IQN head, ensemble heads, CQL) leaves for the step: its
// own gradient over the whole flat layout (zero outside the trunk and its own tensors) and its
// loss, all on the device. The trainer computes every gradient's norm in one launch and adds
// the gradient into the step's, clipped to the auxiliary's budget (kernels/budget_sum.hpp).
#pragma once
#include <string>

#include "nn/network.hpp"

namespace zs {

struct AuxOutputs {
  ParamBuffer grad;            // ∂(auxiliary loss)/∂params, whole layout
  Gradients g;                 // backward scratch for B rows
  DeviceScalar<float> loss;
  DeviceScalar<double> norm;   // ‖grad‖₂, written by the trainer's norm phase (kernels::grad_norms)
  AuxOutputs(const Config& c, const ParamLayout& layout, int batch_size, const std::string& name)
      : grad(layout, "zs::" + name + "::grad"),
        g(c, batch_size),
        loss("zs::" + name + "::loss"),
        norm("zs::" + name + "::norm") {}
};

}  // namespace zs
