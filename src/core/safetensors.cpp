#include "core/safetensors.hpp"

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <string_view>
#include <system_error>
#include <tuple>

#include "core/file_kind.hpp"
#include "core/json.hpp"

namespace zs::safetensors {
namespace {

using nlohmann::json;

struct DTypeInfo {
  DType dtype;
  const char* name;
  std::size_t size;
};

constexpr DTypeInfo kDTypes[] = {
    {DType::BOOL, "BOOL", 1},       {DType::U8, "U8", 1},           {DType::I8, "I8", 1},
    {DType::F8_E5M2, "F8_E5M2", 1}, {DType::F8_E4M3, "F8_E4M3", 1}, {DType::I16, "I16", 2},
    {DType::U16, "U16", 2},         {DType::F16, "F16", 2},         {DType::BF16, "BF16", 2},
    {DType::I32, "I32", 4},         {DType::U32, "U32", 4},         {DType::F32, "F32", 4},
    {DType::I64, "I64", 8},         {DType::U64, "U64", 8},         {DType::F64, "F64", 8},
};

const DTypeInfo& info(DType d) {
  for (const auto& i : kDTypes)
    if (i.dtype == d) return i;
  fail("safetensors: DType value ", static_cast<int>(d), " is not a known dtype");
}

// Raw-byte storage is only the file's little-endian order on a little-endian host; this covers
// compilers without __BYTE_ORDER__, where the header's static_assert is skipped.
void require_little_endian_host() {
  const std::uint32_t one = 1;
  unsigned char first = 0;
  std::memcpy(&first, &one, 1);
  require(first == 1, "safetensors: this host is big-endian; expected a little-endian host");
}

constexpr const char* kMetadataKey = "__metadata__";
constexpr std::uint64_t kI64Max =
    static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());

std::string holds_list(const std::map<std::string, Tensor>& tensors) {
  if (tensors.empty()) return "it holds no tensors";
  std::string s = "it holds: ";
  bool first = true;
  for (const auto& kv : tensors) {
    if (!first) s += ", ";
    s += kv.first;
    first = false;
  }
  return s;
}

// numel * size in bytes, or fails (naming `what`) when a dim is negative or the count overflows.
std::uint64_t byte_count(const std::vector<std::int64_t>& shape, DType dtype,
                         const std::string& what) {
  std::uint64_t n = 1;
  for (auto d : shape) {
    if (d < 0)
      fail(what, " has shape ", shape_string(shape), " with a negative dim ", d, "; expected dims >= 0");
  }
  for (auto d : shape) {
    if (d == 0) return 0;
  }
  for (auto d : shape) {
    const auto ud = static_cast<std::uint64_t>(d);
    if (n > kI64Max / ud) fail(what, " has shape ", shape_string(shape), " whose element count overflows int64");
    n *= ud;
  }
  const std::uint64_t size = dtype_size(dtype);
  require(n <= kI64Max / size, what, " has shape ", shape_string(shape), " of ", to_string(dtype),
          " whose byte count overflows int64");
  return n * size;
}

// Messages show values through json_preview and are built only on failure: a header may hold a
// million-entry shape, and dumping it for every entry checked would take hours.
std::uint64_t offset_value(const json& v, const std::string& what) {
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<std::int64_t>() >= 0))
    fail(what, " is ", json_preview(v), "; expected a non-negative integer");
  return v.get<std::uint64_t>();
}

struct Span {
  std::uint64_t begin, end;
  std::string name;
};

Tensor parse_entry(const std::string& where, const std::string& name, const json& entry,
                   std::uint64_t data_size, std::vector<Span>& spans) {
  const std::string what = where + "tensor '" + name + "'";
  require(entry.is_object(), what, " is ", entry.type_name(),
          "; expected an object with dtype, shape and data_offsets");
  for (const auto& kv : entry.items()) {
    const auto& k = kv.key();
    if (k != "dtype" && k != "shape" && k != "data_offsets")
      fail(what, " has unknown key '", k.size() > 40 ? k.substr(0, 40) + "..." : k,
           "'; expected only dtype, shape and data_offsets");
  }
  for (const char* k : {"dtype", "shape", "data_offsets"})
    require(entry.contains(k), what, " has no '", k, "'; expected dtype, shape and data_offsets");

  Tensor t;
  const auto& dt = entry.at("dtype");
  if (!dt.is_string()) fail(what, " has dtype ", json_preview(dt), "; expected a string such as \"F32\"");
  try {
    t.dtype = dtype_from_string(dt.get<std::string>());
  } catch (const Error& e) {
    fail(what, ": ", e.what());
  }

  const auto& sh = entry.at("shape");
  if (!sh.is_array()) fail(what, " has shape ", json_preview(sh), "; expected an array of integers");
  for (const auto& d : sh) {
    if (!d.is_number_integer()) fail(what, " has shape ", json_preview(sh), "; expected an array of integers");
    if (!d.is_number_unsigned() && d.get<std::int64_t>() < 0)
      fail(what, " has shape ", json_preview(sh), " with a negative dim ", json_preview(d), "; expected dims >= 0");
    if (d.is_number_unsigned() && d.get<std::uint64_t>() > kI64Max)
      fail(what, " has shape ", json_preview(sh), " with dim ", json_preview(d), " past int64");
    t.shape.push_back(d.get<std::int64_t>());
  }

  const auto& off = entry.at("data_offsets");
  if (!off.is_array() || off.size() != 2)
    fail(what, " has data_offsets ", json_preview(off), "; expected [begin, end]");
  const auto begin = offset_value(off[0], what + " data_offsets[0]");
  const auto end = offset_value(off[1], what + " data_offsets[1]");
  require(begin <= end, what, " has data_offsets [", begin, ", ", end,
          "] reversed; expected begin <= end");
  require(end <= data_size, what, " has data_offsets [", begin, ", ", end,
          "] past the end of the data buffer (", data_size, " bytes); expected end <= ", data_size,
          " (is the file truncated?)");
  const auto need = byte_count(t.shape, t.dtype, what);
  require(end - begin == need, what, " has data_offsets [", begin, ", ", end, "] spanning ",
          end - begin, " bytes; expected ", need, " (shape ", shape_string(t.shape), " of ",
          to_string(t.dtype), ")");
  spans.push_back({begin, end, name});
  return t;
}

// The spec asks the tensors to tile the data buffer exactly: no overlap, no holes, no tail.
void check_tiling(const std::string& where, std::vector<Span> spans, std::uint64_t data_size) {
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  std::uint64_t cursor = 0;
  const Span* prev = nullptr;
  for (const auto& s : spans) {
    if (s.begin < cursor) {
      fail(where, "tensors '", prev->name, "' [", prev->begin, ", ", prev->end, ") and '", s.name,
           "' [", s.begin, ", ", s.end, ") overlap; expected disjoint data_offsets");
    }
    if (s.begin > cursor) {
      fail(where, "bytes [", cursor, ", ", s.begin, ") of the data buffer before tensor '", s.name,
           "' belong to no tensor; expected contiguous data_offsets");
    }
    cursor = s.end;
    prev = &s;
  }
  require(cursor == data_size, where, "the data buffer is ", data_size,
          " bytes but the tensors cover only ", cursor, "; expected no trailing bytes");
}

}  // namespace

const char* to_string(DType d) { return info(d).name; }

std::size_t dtype_size(DType d) { return info(d).size; }

DType dtype_from_string(const std::string& s) {
  for (const auto& i : kDTypes)
    if (s == i.name) return i.dtype;
  std::string names;
  for (const auto& i : kDTypes) names += (names.empty() ? "" : ", ") + std::string(i.name);
  fail("unknown dtype \"", s, "\"; expected one of ", names);
}

std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::int64_t Tensor::numel() const {
  return static_cast<std::int64_t>(byte_count(shape, dtype, "safetensors: tensor") /
                                   dtype_size(dtype));
}

const Tensor& File::at(const std::string& name) const {
  const auto it = tensors.find(name);
  if (it == tensors.end())
    fail("safetensors: no tensor '", name, "' in '", source, "'; ", holds_list(tensors));
  return it->second;
}

File parse(const std::vector<std::uint8_t>& image, const std::string& source) {
  require_little_endian_host();
  const std::string where = "safetensors: '" + source + "': ";
  require(image.size() >= 8, where, "file is ", image.size(),
          " bytes; expected at least 8 (the header length)");
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | image[static_cast<std::size_t>(i)];
  require(n <= kMaxHeaderBytes, where, "header length ", n, " is absurd; expected at most ",
          kMaxHeaderBytes, " (corrupt file or not safetensors?)");
  const std::uint64_t after_length = image.size() - 8;
  require(n <= after_length, where, "header length ", n, " runs past the end of the file (",
          after_length, " bytes follow the length); expected <= ", after_length,
          " (is the file truncated?)");

  // Strict, as the spec asks: one object, no key twice, no trailing bytes but padding spaces.
  const json header = parse_json(
      std::string_view(reinterpret_cast<const char*>(image.data()) + 8, static_cast<std::size_t>(n)),
      where + "header");
  require(header.is_object(), where, "header is a JSON ", header.type_name(),
          "; expected a JSON object");

  const std::uint64_t data_size = after_length - n;
  const std::size_t data_start = 8 + static_cast<std::size_t>(n);
  File f;
  f.source = source;
  std::vector<Span> spans;
  for (const auto& kv : header.items()) {
    if (kv.key() == kMetadataKey) {
      const auto& m = kv.value();
      require(m.is_object(), where, "__metadata__ is a JSON ", m.type_name(),
              "; expected an object of strings");
      for (const auto& e : m.items()) {
        if (!e.value().is_string())
          fail(where, "__metadata__ '", e.key(), "' is ", json_preview(e.value()), "; expected a string");
        f.metadata[e.key()] = e.value().get<std::string>();
      }
      continue;
    }
    Tensor t = parse_entry(where, kv.key(), kv.value(), data_size, spans);
    const auto& s = spans.back();
    t.bytes.assign(image.begin() + static_cast<std::ptrdiff_t>(data_start + s.begin),
                   image.begin() + static_cast<std::ptrdiff_t>(data_start + s.end));
    f.tensors.emplace(kv.key(), std::move(t));
  }
  check_tiling(where, std::move(spans), data_size);
  return f;
}

namespace {

std::vector<std::uint8_t> serialize_as(const File& f, const std::string& target) {
  require_little_endian_host();
  const std::string where = "safetensors: writing '" + target + "': ";
  json header = json::object();
  std::uint64_t offset = 0;
  for (const auto& kv : f.tensors) {  // std::map: sorted by name, so the layout is deterministic
    const std::string what = where + "tensor '" + kv.first + "'";
    require(kv.first != kMetadataKey, where, "a tensor is named '", kMetadataKey,
            "'; expected that name to be left to the metadata");
    const Tensor& t = kv.second;
    const auto need = byte_count(t.shape, t.dtype, what);
    require(t.bytes.size() == need, what, " holds ", t.bytes.size(), " bytes; expected ", need,
            " (shape ", shape_string(t.shape), " of ", to_string(t.dtype), ")");
    header[kv.first] = {{"dtype", to_string(t.dtype)},
                        {"shape", t.shape},
                        {"data_offsets", {offset, offset + need}}};
    offset += need;
  }
  if (!f.metadata.empty()) header[kMetadataKey] = f.metadata;

  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception& e) {
    fail(where, "a tensor name or metadata string is not valid UTF-8: ", e.what());
  }
  // Spaces are JSON whitespace; padding them puts the data buffer on an 8-byte boundary.
  while ((8 + text.size()) % 8 != 0) text += ' ';

  std::vector<std::uint8_t> out;
  out.reserve(8 + text.size() + static_cast<std::size_t>(offset));
  const std::uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::uint8_t>(n >> (8 * i)));
  out.insert(out.end(), text.begin(), text.end());
  for (const auto& kv : f.tensors)
    out.insert(out.end(), kv.second.bytes.begin(), kv.second.bytes.end());
  return out;
}

}  // namespace

std::vector<std::uint8_t> serialize(const File& f) { return serialize_as(f, f.source); }

File read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  require(in.is_open(), "safetensors: cannot open '", path,
          "' for reading; expected an existing, readable safetensors file");
  // A directory opens; reading it then throws from inside the stream buffer, unexplained.
  std::error_code ec;
  require(!std::filesystem::is_directory(path, ec), "safetensors: '", path,
          "' is a directory; expected a safetensors file");
  std::vector<std::uint8_t> image((std::istreambuf_iterator<char>(in)),
                                  std::istreambuf_iterator<char>());
  require(!in.bad(), "safetensors: reading '", path, "' failed");
  return parse(image, path);
}

void write(const std::string& path, const File& f) {
  const std::string tmp = path + ".tmp";
  // The rename below would replace a device node, FIFO or link at `path`, and opening `tmp`
  // would write through one there.
  require_output_file(path, "safetensors: writing");
  require_output_file(tmp, "safetensors: writing");
  const auto bytes = serialize_as(f, path);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out.is_open()) {
      const int err = errno;
      fail("safetensors: cannot open '", tmp, "' for writing: ", std::strerror(err));
    }
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out.good()) {
      out.close();
      std::remove(tmp.c_str());
      fail("safetensors: writing ", bytes.size(), " bytes to '", tmp, "' failed (disk full?)");
    }
  }
  // std::rename replaces the target atomically on POSIX, so readers see the old or new file.
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    fail("safetensors: renaming '", tmp, "' to '", path, "' failed: ", std::strerror(err));
  }
}

}  // namespace zs::safetensors
