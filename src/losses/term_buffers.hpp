// The gradients and losses of a step's loss terms in one device buffer,
//   [gradient of term 0 | gradient of term 1 | … | loss 0, loss 1, …],
// so that averaging them over the ranks of a data-parallel run is one all-reduce. Each term's
// gradient ParamBuffer and loss scalar are slices of it, claimed by the terms in the order they
// are made (C51 first). Every slice starts on a ParamLayout::kAlign boundary.
#pragma once
#include <string>

#include "backends/backend.hpp"
#include "core/param_layout.hpp"
#include "nn/param_buffer.hpp"

namespace zs {

class TermBuffers {
 public:
  struct Slot {
    ParamBuffer grad;
    DeviceScalar<float> loss;
  };

  TermBuffers(const ParamLayout& layout, int terms);
  TermBuffers(const TermBuffers&) = delete;
  TermBuffers& operator=(const TermBuffers&) = delete;

  int terms() const { return terms_; }
  // The whole buffer: what the all-reduce averages.
  const DeviceFloats& all() const { return all_; }
  // Slot i's loss scalar (the trainer hands slot 0's to the C51 outputs before any term exists).
  DeviceScalar<float> loss(int slot) const;
  // The next unclaimed slot, for the term called `name`; throws zs::Error naming it when every
  // slot is taken.
  Slot claim(const std::string& name);

 private:
  const ParamLayout& layout_;
  int terms_;
  DeviceFloats all_;
  int claimed_ = 0;
};

}  // namespace zs
