// How many loss terms one training step may hold (C51 and its auxiliaries): the gradient norms,
// the budgeted sum and the metrics record each take every term in one launch, so their functors
// hold this many entries.
#pragma once

namespace zs::kernels {

inline constexpr int kMaxTerms = 8;

}  // namespace zs::kernels
