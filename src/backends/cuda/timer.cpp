// CUDA events on the step's stream: device time between two marks, no host clock involved.
#include "backends/timer.hpp"

#include "backends/cuda/check.hpp"

namespace zs {

struct StreamTimer::Impl {
  cudaStream_t stream;
  cudaEvent_t begin = nullptr, end = nullptr;
};

StreamTimer::StreamTimer(Stream& stream) : impl_(std::make_unique<Impl>()) {
  impl_->stream = static_cast<cudaStream_t>(stream.native());
  ZS_CUDA_CHECK(cudaEventCreate(&impl_->begin));
  ZS_CUDA_CHECK(cudaEventCreate(&impl_->end));
}
StreamTimer::~StreamTimer() {
  cudaEventDestroy(impl_->begin);
  cudaEventDestroy(impl_->end);
}
void StreamTimer::start() { ZS_CUDA_CHECK(cudaEventRecord(impl_->begin, impl_->stream)); }
void StreamTimer::stop() { ZS_CUDA_CHECK(cudaEventRecord(impl_->end, impl_->stream)); }
double StreamTimer::elapsed_ms() {
  ZS_CUDA_CHECK(cudaEventSynchronize(impl_->end));
  float ms = 0.f;
  ZS_CUDA_CHECK(cudaEventElapsedTime(&ms, impl_->begin, impl_->end));
  return ms;
}

}  // namespace zs
