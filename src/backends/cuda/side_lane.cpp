// One event per direction, made once: a stream wait uses the event's latest record at the time
// of the wait, so re-recording it for the next fork or join is safe, in a capture as outside.
#include "backends/side_lane.hpp"

#include "backends/cuda/check.hpp"

namespace zs {

struct SideLane::Impl {
  cudaEvent_t forked = nullptr, joined = nullptr;
  ~Impl() {
    if (forked) cudaEventDestroy(forked);
    if (joined) cudaEventDestroy(joined);
  }
};

SideLane::SideLane(Stream& main, Precision precision)
    : main_(main), gemm_(side_, precision), impl_(std::make_unique<Impl>()) {
  ZS_CUDA_CHECK(cudaEventCreateWithFlags(&impl_->forked, cudaEventDisableTiming));
  ZS_CUDA_CHECK(cudaEventCreateWithFlags(&impl_->joined, cudaEventDisableTiming));
}

SideLane::~SideLane() {
  // Work still queued on the side reads buffers its owner is about to free.
  side_.synchronize();
}

void SideLane::fork() const {
  ZS_CUDA_CHECK(cudaEventRecord(impl_->forked, static_cast<cudaStream_t>(main_.native())));
  ZS_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(side_.native()), impl_->forked, 0));
}

void SideLane::join() const {
  ZS_CUDA_CHECK(cudaEventRecord(impl_->joined, static_cast<cudaStream_t>(side_.native())));
  ZS_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(main_.native()), impl_->joined, 0));
}

}  // namespace zs
