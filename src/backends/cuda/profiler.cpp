#include "backends/profiler.hpp"

#include <cuda_profiler_api.h>

#include "backends/cuda/check.hpp"

namespace zs {

void profiler_start() { ZS_CUDA_CHECK(cudaProfilerStart()); }
void profiler_stop() { ZS_CUDA_CHECK(cudaProfilerStop()); }

}  // namespace zs
