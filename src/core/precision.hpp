// How the backend's matrix products round their inputs: TF32 tensor cores or full FP32. The
// config chooses it; the GEMM backend applies it.
#pragma once

namespace zs {

enum class Precision { tf32, fp32 };

inline const char* to_string(Precision p) { return p == Precision::tf32 ? "tf32" : "fp32"; }

}  // namespace zs
