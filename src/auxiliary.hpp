// What every auxiliary loss of issue 6 (IQN head, ensemble heads, CQL) leaves for the step: its
// own gradient over the whole flat layout (zero outside the trunk and its own tensors), its
// loss and the gradient's norm, all on the device. The trainer adds the gradient into the step's
// by a clipped SAXPY under the auxiliary's budget (docs/kernels.md).
#pragma once
#include <string>

#include "network.hpp"

namespace zs {

struct AuxOutputs {
  ParamBuffer grad;            // ∂(auxiliary loss)/∂params, whole layout
  Gradients g;                 // backward scratch for B rows
  DeviceScalar<float> loss;
  DeviceScalar<double> norm;   // ‖grad‖₂, as the clipped SAXPY reads it
  AuxOutputs(const Config& c, const ParamLayout& layout, int batch_size, const std::string& name)
      : grad(layout, "zs::" + name + "::grad"),
        g(c, batch_size),
        loss("zs::" + name + "::loss"),
        norm("zs::" + name + "::norm") {}
};

}  // namespace zs
