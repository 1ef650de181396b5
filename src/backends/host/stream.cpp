// The host backend has one in-order instance; synchronize() is Kokkos' fence on it.
#include "backends/stream.hpp"

namespace zs {

struct Stream::Impl {
  ExecSpace exec;
};

Stream::Stream() : impl_(std::make_unique<Impl>()) {}
Stream::~Stream() = default;
const ExecSpace& Stream::exec() const { return impl_->exec; }
void Stream::synchronize() const { impl_->exec.fence(); }
void* Stream::native() const { return nullptr; }

}  // namespace zs
