// Host timing: a steady clock read after fencing the instance, so queued work is counted.
#include "backends/timer.hpp"

#include <chrono>

namespace zs {

struct StreamTimer::Impl {
  Stream* stream;
  std::chrono::steady_clock::time_point begin, end;
};

StreamTimer::StreamTimer(Stream& stream) : impl_(std::make_unique<Impl>()) { impl_->stream = &stream; }
StreamTimer::~StreamTimer() = default;
void StreamTimer::start() {
  impl_->stream->synchronize();
  impl_->begin = std::chrono::steady_clock::now();
}
void StreamTimer::stop() {
  impl_->stream->synchronize();
  impl_->end = std::chrono::steady_clock::now();
}
double StreamTimer::elapsed_ms() {
  return std::chrono::duration<double, std::milli>(impl_->end - impl_->begin).count();
}

}  // namespace zs
