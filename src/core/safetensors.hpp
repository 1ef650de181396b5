// Reads and writes checkpoints in the safetensors format (the public spec used by Hugging Face):
// an 8-byte little-endian header length N, N bytes of JSON header, then the raw data buffer.
// Host-only code. Tensor bytes are kept raw and little-endian, so a round trip is bit-exact
// (NaN payloads, signed zeros and denormals included).
#pragma once
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"

namespace zs::safetensors {

// Every dtype the spec names with a whole-byte size, so a file holding tensors we do not use
// (an F16 embedding, a BOOL mask) still reads; typed access exists for the five we use.
enum class DType {
  BOOL,
  U8,
  I8,
  F8_E5M2,
  F8_E4M3,
  I16,
  U16,
  F16,
  BF16,
  I32,
  U32,
  F32,
  I64,
  U64,
  F64
};

const char* to_string(DType d);
// Throws zs::Error naming the string and the accepted names.
DType dtype_from_string(const std::string& s);
std::size_t dtype_size(DType d);

// "[4, 48]"; "[]" for a scalar.
std::string shape_string(const std::vector<std::int64_t>& shape);

template <class T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::F32;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::F64;
};
template <>
struct dtype_of<std::int32_t> {
  static constexpr DType value = DType::I32;
};
template <>
struct dtype_of<std::int64_t> {
  static constexpr DType value = DType::I64;
};
template <>
struct dtype_of<std::uint8_t> {
  static constexpr DType value = DType::U8;
};

// Raw memcpy of T into the file's little-endian byte order is only right on a little-endian host.
#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__)
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "zs::safetensors stores tensor bytes raw and needs a little-endian host");
#endif

struct Tensor {
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;  // {} is a scalar (one element); a 0 dim makes it empty
  std::vector<std::uint8_t> bytes;  // numel() * dtype_size(dtype) bytes, little-endian

  // Product of the dims; throws zs::Error on a negative dim or on overflow.
  std::int64_t numel() const;

  // The elements as T; throws zs::Error if T does not match dtype or the byte count is off.
  template <class T>
  std::vector<T> as() const {
    require(dtype == dtype_of<T>::value, "safetensors: tensor is ", to_string(dtype),
            "; as<T>() expected ", to_string(dtype_of<T>::value));
    const auto n = static_cast<std::size_t>(numel());
    require(bytes.size() == n * sizeof(T), "safetensors: tensor of shape ", shape_string(shape),
            " holds ", bytes.size(), " bytes; expected ", n * sizeof(T));
    std::vector<T> out(n);
    if (n) std::memcpy(out.data(), bytes.data(), n * sizeof(T));
    return out;
  }

  // A tensor of the given shape holding data; throws zs::Error if data.size() != numel.
  template <class T>
  static Tensor from(std::vector<std::int64_t> shape, const std::vector<T>& data) {
    Tensor t;
    t.dtype = dtype_of<T>::value;
    t.shape = std::move(shape);
    const auto n = static_cast<std::size_t>(t.numel());
    require(data.size() == n, "safetensors: Tensor::from: shape ", shape_string(t.shape), " holds ",
            n, " elements; got ", data.size(), " values");
    t.bytes.resize(n * sizeof(T));
    if (n) std::memcpy(t.bytes.data(), data.data(), n * sizeof(T));
    return t;
  }
};

// The metadata key under which zerosync records CRC-32s: a JSON object of 8-hex-digit values, one
// per tensor (by name) and one for the header ("__header__"). Written by serialize(); checked by
// parse() when present.
inline constexpr const char* kChecksumsKey = "zerosync.crc32";

struct File {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;  // the optional "__metadata__" entry (checksums aside)
  std::string source = "<memory>";              // the path read from; names the file in errors
  // parse() found zerosync's checksums and every tensor matched its own. A reader that must not
  // trust a file without them (checkpoints) calls require_checksums().
  bool checksummed = false;
  void require_checksums(const std::string& what) const;

  // Throws zs::Error "no tensor 'x' in 'FILE'; it holds: a, b, c".
  const Tensor& at(const std::string& name) const;

  // The tensor's elements, after checking its dtype and that its shape is exactly
  // expected_shape ({} for a scalar); throws zs::Error naming the tensor, what it is and what
  // was expected.
  template <class T>
  std::vector<T> get(const std::string& name,
                     const std::vector<std::int64_t>& expected_shape) const {
    const Tensor& t = at(name);
    require(t.dtype == dtype_of<T>::value, "safetensors: tensor '", name, "' in '", source, "' is ",
            to_string(t.dtype), "; expected ", to_string(dtype_of<T>::value));
    require(t.shape == expected_shape, "safetensors: tensor '", name, "' in '", source,
            "' has shape ", shape_string(t.shape), "; expected ", shape_string(expected_shape));
    return t.as<T>();
  }
  std::vector<float> f32(const std::string& name, const std::vector<std::int64_t>& shape) const {
    return get<float>(name, shape);
  }
  std::vector<double> f64(const std::string& name, const std::vector<std::int64_t>& shape) const {
    return get<double>(name, shape);
  }
  std::vector<std::int32_t> i32(const std::string& name,
                                const std::vector<std::int64_t>& shape) const {
    return get<std::int32_t>(name, shape);
  }
  std::vector<std::int64_t> i64(const std::string& name,
                                const std::vector<std::int64_t>& shape) const {
    return get<std::int64_t>(name, shape);
  }
};

// Largest header accepted, as in the reference implementation: a bigger one is a corrupt length.
inline constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

// Parses a whole safetensors image held in memory; `source` names it in errors.
File parse(const std::vector<std::uint8_t>& image, const std::string& source = "<memory>");
// The file's bytes: tensors sorted by name, contiguous, data buffer 8-byte aligned; with
// `checksums` (what write() does) the CRC-32 of the header and of each tensor in the metadata
// (kChecksumsKey), which parse() then checks, along with the header being exactly this form.
std::vector<std::uint8_t> serialize(const File& f, bool checksums = true);

// Reads and validates a file; every malformed input throws zs::Error naming the file.
File read(const std::string& path);
// Writes path + ".tmp" and flushes it to the disk, renames it over path and flushes the folder,
// so a crash or a kill at any instant leaves either the old file or the new one, whole. Throws
// zs::Error (and removes the .tmp) if the tensors are inconsistent or I/O fails (a full disk).
void write(const std::string& path, const File& f);

}  // namespace zs::safetensors
