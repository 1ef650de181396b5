// Times work on a stream: CUDA events on CUDA, a host clock around a fence on the host.
// For benchmarks only; elapsed_ms() waits for the stop mark.
#pragma once
#include <memory>

#include "backends/stream.hpp"

namespace zs {

class StreamTimer {
 public:
  explicit StreamTimer(Stream& stream);
  ~StreamTimer();
  StreamTimer(const StreamTimer&) = delete;
  StreamTimer& operator=(const StreamTimer&) = delete;

  void start();
  void stop();
  double elapsed_ms();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace zs
