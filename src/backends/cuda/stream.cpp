// The step's stream on CUDA: a non-blocking user stream wrapped in a Kokkos::Cuda instance,
// so Kokkos kernels, cuBLAS calls and copies all order on it and nothing touches stream 0.
#include "backends/stream.hpp"

#include "backends/cuda/check.hpp"

namespace zs {

struct Stream::Impl {
  cudaStream_t stream = nullptr;
  ExecSpace exec;
  Impl() : stream(make()), exec(stream) {}
  static cudaStream_t make() {
    cudaStream_t s = nullptr;
    ZS_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return s;
  }
  ~Impl() {
    exec = ExecSpace();  // drop Kokkos' reference before the stream goes
    cudaStreamDestroy(stream);
  }
};

Stream::Stream() : impl_(std::make_unique<Impl>()) {}
Stream::~Stream() = default;
const ExecSpace& Stream::exec() const { return impl_->exec; }
// Kokkos' instance fence, not cudaStreamSynchronize: it is announced to the tools first
// (fence_events.hpp), so a sync watch around a capture names it.
void Stream::synchronize() const { impl_->exec.fence(); }
void* Stream::native() const { return impl_->stream; }

}  // namespace zs
