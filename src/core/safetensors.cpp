#include "core/safetensors.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
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

// The checksums entry that covers the header itself (no tensor may have this name).
constexpr const char* kHeaderChecksum = "__header__";

std::string crc32_hex(const std::vector<std::uint8_t>& bytes) {
  // zlib's crc32 takes a uInt length: feed large tensors in pieces.
  uLong crc = ::crc32(0L, Z_NULL, 0);
  std::size_t done = 0;
  while (done < bytes.size()) {
    const std::size_t n = std::min<std::size_t>(bytes.size() - done, std::size_t{1} << 30);
    crc = ::crc32(crc, bytes.data() + done, static_cast<uInt>(n));
    done += n;
  }
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08lx", static_cast<unsigned long>(crc & 0xFFFFFFFFul));
  return hex;
}

// The header as serialize() writes it before adding the checksums: the metadata without the
// checksums entry, and no __metadata__ at all when nothing else is left in it.
json header_without_checksums(json header) {
  const auto m = header.find(kMetadataKey);
  if (m != header.end()) {
    m->erase(kChecksumsKey);
    if (m->empty()) header.erase(m);
  }
  return header;
}

// A file zerosync wrote: its header byte for byte as serialize() would write it (so no byte of it
// can change unseen, whitespace included), the header's own CRC-32 and every tensor's.
void verify_checksums(const std::string& where, std::string_view raw_header, const json& header,
                      const std::string& text, const std::map<std::string, Tensor>& tensors) {
  std::string canonical = header.dump();
  while (canonical.size() < raw_header.size()) canonical += ' ';
  require(canonical == raw_header, where, "its header is not as zerosync writes it; the file was altered");
  const json sums = parse_json(text, where + "checksums");
  require(sums.is_object() && sums.size() == tensors.size() + 1, where, "its checksums list ",
          sums.is_object() ? sums.size() : 0, " entries; expected the header and each of its ", tensors.size(),
          " tensors (the file was altered)");
  const auto check = [&](const std::string& key, const std::string& got, const char* what) {
    const auto it = sums.find(key);
    require(it != sums.end() && it->is_string(), where, "no checksum for ", what,
            "; expected one for the header and every tensor (the file was altered)");
    require(it->get<std::string>() == got, where, what, " has CRC-32 ", got, " but the file recorded ",
            it->get<std::string>(), "; it was corrupted after it was written");
  };
  const std::string h = header_without_checksums(header).dump();
  check(kHeaderChecksum, crc32_hex(std::vector<std::uint8_t>(h.begin(), h.end())), "the header");
  for (const auto& [name, t] : tensors) check(name, crc32_hex(t.bytes), ("tensor '" + name + "'").c_str());
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
  const auto sums = f.metadata.find(kChecksumsKey);
  if (sums != f.metadata.end()) {
    verify_checksums(where,
                     std::string_view(reinterpret_cast<const char*>(image.data()) + 8, static_cast<std::size_t>(n)),
                     header, sums->second, f.tensors);
    f.metadata.erase(sums);
    f.checksummed = true;
  }
  return f;
}

void File::require_checksums(const std::string& what) const {
  require(checksummed, what, " '", source, "' has no checksums (", kChecksumsKey,
          "); expected a file written by zerosync, which records every tensor's CRC-32");
}

namespace {

std::vector<std::uint8_t> serialize_as(const File& f, const std::string& target, bool checksums) {
  require_little_endian_host();
  const std::string where = "safetensors: writing '" + target + "': ";
  json header = json::object();
  std::uint64_t offset = 0;
  for (const auto& kv : f.tensors) {  // std::map: sorted by name, so the layout is deterministic
    const std::string what = where + "tensor '" + kv.first + "'";
    require(kv.first != kMetadataKey && kv.first != kHeaderChecksum, where, "a tensor is named '", kv.first,
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
  require(f.metadata.count(kChecksumsKey) == 0, where, "its metadata has a '", kChecksumsKey,
          "' entry; expected that key to be left to the writer's checksums");
  if (!f.metadata.empty()) header[kMetadataKey] = f.metadata;

  std::string text;
  try {
    if (checksums) {
      // The header's CRC-32 over its form without the checksums, then every tensor's.
      json sums = json::object();
      const std::string h = header.dump();
      sums[kHeaderChecksum] = crc32_hex(std::vector<std::uint8_t>(h.begin(), h.end()));
      for (const auto& kv : f.tensors) sums[kv.first] = crc32_hex(kv.second.bytes);
      header[kMetadataKey][kChecksumsKey] = sums.dump();
    }
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

std::vector<std::uint8_t> serialize(const File& f, bool checksums) { return serialize_as(f, f.source, checksums); }

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
  const auto bytes = serialize_as(f, path, true);
  const auto failed = [&](const char* what) {
    const int err = errno;
    std::remove(tmp.c_str());
    fail("safetensors: ", what, " ", bytes.size(), " bytes of '", path, "' to '", tmp, "' failed: ", std::strerror(err));
  };
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    fail("safetensors: cannot open '", tmp, "' for writing: ", std::strerror(err));
  }
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      errno = err;
      failed("writing");
    }
    done += static_cast<std::size_t>(n);
  }
  // On the disk before the rename: a crash must not leave `path` naming a file whose data never
  // arrived.
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    errno = err;
    failed("flushing");
  }
  if (::close(fd) != 0) failed("closing");
  // rename replaces the target atomically on POSIX, so readers see the old or new file.
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    fail("safetensors: renaming '", tmp, "' to '", path, "' failed: ", std::strerror(err));
  }
  // The rename itself is durable once the folder is flushed.
  const std::string folder = std::filesystem::path(path).has_parent_path()
                                 ? std::filesystem::path(path).parent_path().string()
                                 : std::string(".");
  const int dir = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
}

}  // namespace zs::safetensors
