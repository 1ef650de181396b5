// Turns a failed CUDA runtime or cuBLAS call into a zs::Error naming the call and the code.
#pragma once
#include <cuda_runtime.h>

#include "core/error.hpp"

#define ZS_CUDA_CHECK(call)                                                              \
  do {                                                                                   \
    cudaError_t zs_err_ = (call);                                                        \
    if (zs_err_ != cudaSuccess)                                                          \
      ::zs::fail(#call, " failed: ", cudaGetErrorName(zs_err_), " (", cudaGetErrorString(zs_err_), \
                 ") at ", __FILE__, ":", __LINE__);                                      \
  } while (0)
