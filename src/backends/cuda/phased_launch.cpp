#include "backends/phased_launch.hpp"

#include "backends/cuda/check.hpp"

namespace zs {

int persistent_grid_teams(int teams_per_sm) {
  require(teams_per_sm >= 1, "persistent_grid_teams: ", teams_per_sm, " teams per multiprocessor; expected at least 1");
  int device = 0, sms = 0;
  ZS_CUDA_CHECK(cudaGetDevice(&device));
  ZS_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms * teams_per_sm;
}

}  // namespace zs
