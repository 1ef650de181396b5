#include "losses/term_buffers.hpp"

#include <cstddef>
#include <utility>

namespace zs {

namespace {
std::size_t round_up(std::size_t n) { return (n + ParamLayout::kAlign - 1) / ParamLayout::kAlign * ParamLayout::kAlign; }
}  // namespace

TermBuffers::TermBuffers(const ParamLayout& layout, int terms) : layout_(layout), terms_(terms) {
  require(terms >= 1, "TermBuffers: ", terms, " loss terms; expected at least 1");
  all_ = DeviceFloats("zs::term_buffers",
                      static_cast<std::size_t>(terms) * round_up(layout.size()) + round_up(static_cast<std::size_t>(terms)));
}

DeviceScalar<float> TermBuffers::loss(int slot) const {
  require(slot >= 0 && slot < terms_, "TermBuffers::loss: slot ", slot, "; expected 0..", terms_ - 1);
  return Kokkos::subview(all_, static_cast<std::size_t>(terms_) * round_up(layout_.size()) + slot);
}

TermBuffers::Slot TermBuffers::claim(const std::string& name) {
  require(claimed_ < terms_, "loss term '", name, "': the step's ", terms_,
          " gradient slots are all taken; expected one term per slot (is a term made twice?)");
  const std::size_t begin = static_cast<std::size_t>(claimed_) * round_up(layout_.size());
  Slot s{ParamBuffer(layout_, Kokkos::subview(all_, std::make_pair(begin, begin + layout_.size()))), loss(claimed_)};
  ++claimed_;
  return s;
}

}  // namespace zs
