// The step's one stream and its Kokkos execution-space instance. On CUDA a user stream made
// here; on the host the default OpenMP instance. Everything in the step is enqueued on exec().
#pragma once
#include <memory>

#include "backends/backend.hpp"

namespace zs {

class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  const ExecSpace& exec() const;
  // Blocks the host until the stream is idle. Only for set-up, tests and reporting
  // boundaries; the step itself never calls it.
  void synchronize() const;
  // The native handle (cudaStream_t on CUDA, nullptr on the host), for backend code only.
  void* native() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace zs
