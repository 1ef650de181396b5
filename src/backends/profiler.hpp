// Marks the span a profiler should look at. On CUDA these are cudaProfilerStart/Stop, so
// `ncu --profile-from-start off` profiles only the kernels in between (scripts/gpu_run.sh, ZS_NCU_FILTER);
// without a profiler attached they cost nothing. On the host they do nothing.
#pragma once

namespace zs {

void profiler_start();
void profiler_stop();

}  // namespace zs
