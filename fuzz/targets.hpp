// The fuzz targets: each takes arbitrary bytes and feeds them to one of the file readers. A
// rejected input must end in a zs::Error; any other exception, a sanitizer report or an abort is
// a finding. Inputs that are accepted are checked for what acceptance promises (valid values,
// a round trip that changes nothing).
//
// The same functions serve libFuzzer (fuzz/libfuzzer_main.cpp, built by scripts/fuzz.sh with
// clang) and the test suite, which replays every file of fuzz/corpus/ through them.
#pragma once
#include <cstddef>
#include <cstdint>

namespace zs::fuzz {

// Config::from_json on the JSON value of the bytes (bytes that are not JSON are skipped).
int config(const std::uint8_t* data, std::size_t size);
// TrainConfig::from_json on the JSON value of the bytes.
int train_config(const std::uint8_t* data, std::size_t size);
// safetensors::parse on the bytes.
int safetensors(const std::uint8_t* data, std::size_t size);
// batch_from (the loader of `zerosync step --batch`) on safetensors::parse of the bytes, for the
// network of fuzz_batch_config().
int batch(const std::uint8_t* data, std::size_t size);

// The config the batch target reads batches for (fuzz/corpus/config/small.json).
const char* fuzz_batch_config();

// Reports a broken promise and aborts, so that libFuzzer records the input.
[[noreturn]] void finding(const char* target, const char* what);

}  // namespace zs::fuzz
