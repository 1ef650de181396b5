// libFuzzer's entry point for one target, chosen at compile time with -DZS_FUZZ_TARGET=name.
#include "targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return zs::fuzz::ZS_FUZZ_TARGET(data, size);
}
