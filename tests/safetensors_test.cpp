#include "core/safetensors.hpp"

#include <gtest/gtest.h>
#include <zlib.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "test_util.hpp"

namespace st = zs::safetensors;

namespace {

// A file name unique to the running test, so tests run in parallel never share one.
std::string temp_path(const std::string& tag) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return ::testing::TempDir() + "zs_st_" + info->test_suite_name() + "_" + info->name() + "_" +
         tag + ".safetensors";
}

std::vector<std::uint8_t> slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void spit(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

bool exists(const std::string& path) { return std::ifstream(path).good(); }

// Builds a file image by hand, per the spec: u64 little-endian length, JSON, data.
std::vector<std::uint8_t> image(const std::string& header, const std::vector<std::uint8_t>& data,
                                std::uint64_t length_field) {
  std::vector<std::uint8_t> out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::uint8_t>(length_field >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}
std::vector<std::uint8_t> image(const std::string& header, const std::vector<std::uint8_t>& data) {
  return image(header, data, header.size());
}

using zs::test::error_of;

std::string parse_error(const std::string& header, const std::vector<std::uint8_t>& data) {
  return error_of([&] { st::parse(image(header, data), "hand.safetensors"); });
}

#define EXPECT_HAS(msg, needle) \
  EXPECT_NE((msg).find(needle), std::string::npos) << "message: '" << (msg) << "'"

std::uint32_t bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
float from_bits(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

// Random normals plus every awkward float: NaNs with payloads and signs, ±Inf, ±0, denormals.
std::vector<float> awkward_floats(std::size_t n, std::uint64_t seed) {
  auto v = zs::test::random_normal(n, seed);
  const std::vector<float> special = {from_bits(0x7FC00000u),
                                      from_bits(0xFFC00001u),
                                      from_bits(0x7F800123u),  // NaNs
                                      std::numeric_limits<float>::infinity(),
                                      -std::numeric_limits<float>::infinity(),
                                      0.f,
                                      -0.f,
                                      std::numeric_limits<float>::denorm_min(),
                                      from_bits(0x807FFFFFu),
                                      std::numeric_limits<float>::max(),
                                      std::numeric_limits<float>::lowest()};
  for (std::size_t i = 0; i < special.size() && i < n; ++i) v[(i * 7) % n] = special[i];
  return v;
}

st::File sample_file(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int32_t> i32(std::numeric_limits<std::int32_t>::min(),
                                                  std::numeric_limits<std::int32_t>::max());
  st::File f;
  f.tensors["states"] = st::Tensor::from<float>({4, 13}, awkward_floats(52, seed));
  std::vector<std::int32_t> ids(17);
  for (auto& x : ids) x = i32(rng);
  ids[0] = std::numeric_limits<std::int32_t>::min();
  f.tensors["ids"] = st::Tensor::from<std::int32_t>({17}, ids);
  f.tensors["step"] = st::Tensor::from<std::int64_t>({}, {(std::int64_t{1} << 40) + 3});
  f.tensors["loss"] = st::Tensor::from<float>({1}, {from_bits(0x7FC0BEEFu)});
  f.tensors["empty"] = st::Tensor::from<float>({0}, {});
  f.tensors["empty2d"] = st::Tensor::from<std::int32_t>({3, 0}, {});
  f.tensors["lr"] = st::Tensor::from<double>({}, {1e-300});
  f.tensors["mask"] = st::Tensor::from<std::uint8_t>({3}, {0, 1, 255});
  return f;
}

}  // namespace

TEST(SafetensorsRoundTrip, SeveralTensorsAreBitExact) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(seed);
  const auto path = temp_path("rt");
  const st::File f = sample_file(seed);
  st::write(path, f);
  EXPECT_FALSE(exists(path + ".tmp"));
  const st::File g = st::read(path);
  EXPECT_EQ(g.source, path);
  ASSERT_EQ(g.tensors.size(), f.tensors.size());
  for (const auto& kv : f.tensors) {
    SCOPED_TRACE(kv.first);
    const st::Tensor& t = g.at(kv.first);
    EXPECT_EQ(t.dtype, kv.second.dtype);
    EXPECT_EQ(t.shape, kv.second.shape);
    EXPECT_EQ(t.bytes, kv.second.bytes);
  }
  const auto want = f.at("states").as<float>();
  const auto got = g.f32("states", {4, 13});
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_EQ(bits(got[i]), bits(want[i])) << i;
  EXPECT_TRUE(std::isnan(got[0]));  // the special values really went through
  EXPECT_EQ(bits(g.f32("loss", {1})[0]), 0x7FC0BEEFu);
  EXPECT_EQ(g.i32("ids", {17}), f.at("ids").as<std::int32_t>());
  EXPECT_EQ(g.i64("step", {}), std::vector<std::int64_t>{(std::int64_t{1} << 40) + 3});
  EXPECT_EQ(g.f64("lr", {}), std::vector<double>{1e-300});
  EXPECT_TRUE(g.f32("empty", {0}).empty());
  EXPECT_TRUE(g.i32("empty2d", {3, 0}).empty());
  EXPECT_EQ(g.at("empty2d").numel(), 0);
  EXPECT_EQ(g.at("step").numel(), 1);
  EXPECT_EQ(g.get<std::uint8_t>("mask", {3}), (std::vector<std::uint8_t>{0, 1, 255}));
  EXPECT_TRUE(g.metadata.empty());
}

TEST(SafetensorsRoundTrip, MetadataAndEmptyFile) {
  const auto path = temp_path("meta");
  st::File f;
  f.metadata = {
      {"format", "pt"}, {"step", "1200"}, {"empty", ""}, {"unicode", "\xCF\x83_max \"q\""}};
  f.tensors["w"] = st::Tensor::from<float>({2}, {1.f, 2.f});
  st::write(path, f);
  const auto g = st::read(path);
  EXPECT_EQ(g.metadata, f.metadata);
  EXPECT_EQ(g.f32("w", {2}), (std::vector<float>{1.f, 2.f}));

  st::write(path, st::File{});  // overwrite: no tensors, no metadata is a valid file
  const auto e = st::read(path);
  EXPECT_TRUE(e.tensors.empty());
  EXPECT_TRUE(e.metadata.empty());
  EXPECT_TRUE(e.checksummed);
  // Without zerosync's checksums, the spec's smallest file.
  const auto bytes = st::serialize(st::File{}, false);
  ASSERT_EQ(bytes.size(), 16u);
  EXPECT_EQ(std::string(bytes.begin() + 8, bytes.end()), "{}      ");
}

// The interop proof: a file built byte by byte from the spec, not by our writer. Unsorted keys,
// a header length that is not a multiple of 8, whitespace, and a dtype we only carry as bytes.
TEST(SafetensorsInterop, HandBuiltFileReads) {
  const std::string header =
      "{\"b\": {\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[8,16]},\n"
      " \"__metadata__\":{\"format\":\"pt\"},"
      "\"a\":{\"data_offsets\":[0,8],\"shape\":[2,1],\"dtype\":\"F32\"},"
      "\"h\":{\"dtype\":\"F16\",\"shape\":[],\"data_offsets\":[16,18]}}";
  const std::vector<std::uint8_t> data = {
      0x00, 0x00, 0x80, 0x3F, 0x00, 0x00, 0x20, 0xC0,  // a: 1.0f, -2.5f
      0x07, 0x00, 0x00, 0x00, 0xFF, 0xFF, 0xFF, 0xFF,  // b: 7, -1
      0x00, 0x3C};                                     // h: 1.0 in binary16
  ASSERT_NE(header.size() % 8, 0u);
  const auto path = temp_path("hand");
  spit(path, image(header, data));
  const auto f = st::read(path);
  EXPECT_FALSE(f.checksummed) << "a file from elsewhere has no zerosync checksums; it still reads";
  EXPECT_EQ(f.metadata, (std::map<std::string, std::string>{{"format", "pt"}}));
  EXPECT_EQ(f.f32("a", {2, 1}), (std::vector<float>{1.0f, -2.5f}));
  EXPECT_EQ(f.i32("b", {2}), (std::vector<std::int32_t>{7, -1}));
  EXPECT_EQ(f.at("h").dtype, st::DType::F16);
  EXPECT_EQ(f.at("h").bytes, (std::vector<std::uint8_t>{0x00, 0x3C}));

  // And our writer's bytes for the same tensors are exactly what the spec prescribes.
  st::File mine;
  mine.tensors["a"] = f.at("a");
  mine.tensors["b"] = f.at("b");
  const std::string want_header =
      "{\"a\":{\"data_offsets\":[0,8],\"dtype\":\"F32\",\"shape\":[2,1]},"
      "\"b\":{\"data_offsets\":[8,16],\"dtype\":\"I32\",\"shape\":[2]}}";
  std::string padded = want_header;
  while ((8 + padded.size()) % 8) padded += ' ';
  const std::vector<std::uint8_t> want_data(data.begin(), data.begin() + 16);
  EXPECT_EQ(st::serialize(mine, false), image(padded, want_data));
}

// Bytes written by the reference implementation (Python safetensors 0.8.0, safetensors.numpy.save
// of {"w": float32 [[1, -2.5], [inf, 1e-40]], "step": int32 [7]} with metadata {"format": "np"}),
// pasted here verbatim: it orders the data by alignment, not by name.
TEST(SafetensorsInterop, ReadsBytesFromTheReferenceImplementation) {
  const std::string header =
      "{\"__metadata__\":{\"format\":\"np\"},\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],"
      "\"data_offsets\":[0,16]},\"step\":{\"dtype\":\"I32\",\"shape\":[1],"
      "\"data_offsets\":[16,20]}}      ";
  const std::vector<std::uint8_t> data = {0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x20,
                                          0xc0, 0x00, 0x00, 0x80, 0x7f, 0xc2, 0x16,
                                          0x01, 0x00, 0x07, 0x00, 0x00, 0x00};
  ASSERT_EQ(header.size(), 152u);
  const auto file = image(header, data, 0x98);  // the length field as the reference wrote it
  ASSERT_EQ(file.size(), 180u);
  const auto f = st::parse(file, "reference.safetensors");
  EXPECT_EQ(f.metadata.at("format"), "np");
  const auto w = f.f32("w", {2, 2});
  EXPECT_EQ(w[0], 1.0f);
  EXPECT_EQ(w[1], -2.5f);
  EXPECT_EQ(w[2], std::numeric_limits<float>::infinity());
  EXPECT_EQ(bits(w[3]), 0x000116C2u);  // 1e-40 is a denormal
  EXPECT_EQ(f.i32("step", {1}), std::vector<std::int32_t>{7});
}

TEST(SafetensorsFormat, WrittenHeaderFollowsTheSpec) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(seed);
  const auto path = temp_path("spec");
  st::File f = sample_file(seed);
  f.metadata["note"] = "x";
  st::write(path, f);
  const auto bytes = slurp(path);
  ASSERT_GE(bytes.size(), 8u);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[static_cast<std::size_t>(i)];
  EXPECT_EQ((8 + n) % 8, 0u) << "data buffer must start 8-byte aligned";
  ASSERT_LE(8 + n, bytes.size());
  const std::string text(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n));
  EXPECT_EQ(text.front(), '{');
  const auto last = text.find_last_not_of(' ');
  EXPECT_EQ(text[last], '}');
  EXPECT_LT(text.size() - last - 1, 8u) << "padding is spaces, fewer than 8";
  const auto j = nlohmann::json::parse(text);
  ASSERT_TRUE(j.is_object());
  ASSERT_EQ(j.at("__metadata__").size(), 2u);
  EXPECT_EQ(j.at("__metadata__").at("note"), "x");
  // zerosync's checksums: each tensor's CRC-32, computed here with zlib on the bytes as stored.
  const auto sums = nlohmann::json::parse(j.at("__metadata__").at(st::kChecksumsKey).get<std::string>());
  EXPECT_EQ(sums.size(), f.tensors.size() + 1);
  for (const auto& kv : f.tensors) {
    char hex[9];
    std::snprintf(hex, sizeof hex, "%08lx",
                  ::crc32(::crc32(0L, Z_NULL, 0), kv.second.bytes.data(), static_cast<uInt>(kv.second.bytes.size())));
    EXPECT_EQ(sums.at(kv.first), hex) << kv.first;
  }

  // Tensors sorted by name, contiguous from 0, covering the data buffer exactly.
  const std::size_t data_start = 8 + static_cast<std::size_t>(n);
  std::uint64_t cursor = 0;
  for (const auto& kv : f.tensors) {
    SCOPED_TRACE(kv.first);
    const auto& e = j.at(kv.first);
    EXPECT_EQ(e.size(), 3u);
    EXPECT_EQ(e.at("dtype").get<std::string>(), st::to_string(kv.second.dtype));
    EXPECT_EQ(e.at("shape").get<std::vector<std::int64_t>>(), kv.second.shape);
    const auto off = e.at("data_offsets").get<std::vector<std::uint64_t>>();
    ASSERT_EQ(off.size(), 2u);
    EXPECT_EQ(off[0], cursor);
    EXPECT_EQ(off[1] - off[0], kv.second.bytes.size());
    const std::vector<std::uint8_t> stored(
        bytes.begin() + static_cast<std::ptrdiff_t>(data_start + off[0]),
        bytes.begin() + static_cast<std::ptrdiff_t>(data_start + off[1]));
    EXPECT_EQ(stored, kv.second.bytes);
    cursor = off[1];
  }
  EXPECT_EQ(j.size(), f.tensors.size() + 1);
  EXPECT_EQ(data_start + cursor, bytes.size());

  // Deterministic: the same content gives the same bytes.
  EXPECT_EQ(st::serialize(f), bytes);
}

// Every byte of a file zerosync wrote is covered: changed anywhere (header, metadata, padding,
// checksums, tensor data), the file is refused with a zs::Error — or, where the change hits the
// checksums' own key, reads as a file without checksums, which a checkpoint loader refuses
// (File::require_checksums). Never read as something else with checksums intact.
TEST(SafetensorsFormat, ACorruptByteAnywhereIsRefused) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  st::File f = sample_file(seed);
  f.metadata["config"] = R"({"lr": 0.001, "atoms": 51})";
  f.metadata["steps"] = "1200";
  const auto good = st::serialize(f);
  ASSERT_TRUE(st::parse(good).checksummed);
  int refused = 0;
  for (std::size_t i = 0; i < good.size(); ++i)
    for (std::uint8_t mask : {0x01, 0x02, 0x20, 0x80, 0xFF}) {
      auto bad = good;
      bad[i] ^= mask;
      try {
        const auto read = st::parse(bad, "bad");
        EXPECT_FALSE(read.checksummed) << "byte " << i << " ^ " << int(mask) << " was not noticed";
        EXPECT_NE(zs::test::error_of([&] { read.require_checksums("checkpoint"); }).find("has no checksums"),
                  std::string::npos);
      } catch (const zs::Error&) {
      }
      ++refused;
    }
  EXPECT_EQ(refused, static_cast<int>(good.size()) * 5);
  const auto e = zs::test::error_of([&] {
    auto bad = good;
    bad.back() ^= 0x01;
    st::parse(bad, "x.safetensors");
  });
  EXPECT_NE(e.find("was corrupted after it was written"), std::string::npos) << e;
}

TEST(SafetensorsRefuses, MissingShortAndBadLengthFiles) {
  const auto missing = ::testing::TempDir() + "zs_st_no_such_file.safetensors";
  auto msg = error_of([&] { st::read(missing); });
  EXPECT_HAS(msg, "cannot open '" + missing + "'");

  const auto path = temp_path("short");
  spit(path, {1, 0, 0, 0, 0});
  msg = error_of([&] { st::read(path); });
  EXPECT_HAS(msg, "'" + path + "'");
  EXPECT_HAS(msg, "file is 5 bytes; expected at least 8");

  msg = error_of([&] { st::parse(image("{}", {}, 1000), "f"); });
  EXPECT_HAS(msg, "header length 1000 runs past the end of the file (2 bytes follow the length)");
  msg = error_of([&] { st::parse(image("{}", {}, std::uint64_t{1} << 40), "f"); });
  EXPECT_HAS(msg, "header length 1099511627776 is absurd; expected at most 100000000");
  msg = error_of([&] { st::parse(image("{}", {}, ~std::uint64_t{0}), "f"); });
  EXPECT_HAS(msg, "is absurd");
}

TEST(SafetensorsRefuses, EveryTruncationOfAValidFile) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(seed);
  st::File f = sample_file(seed);
  f.metadata["k"] = "v";
  const auto full = st::serialize(f);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | full[static_cast<std::size_t>(i)];
  for (std::size_t len = 0; len < full.size(); ++len) {
    SCOPED_TRACE(len);
    const std::vector<std::uint8_t> cut(full.begin(),
                                        full.begin() + static_cast<std::ptrdiff_t>(len));
    const auto msg = error_of([&] { st::parse(cut, "cut.safetensors"); });
    ASSERT_FALSE(msg.empty()) << "a file cut to " << len << " of " << full.size() << " bytes read";
    EXPECT_HAS(msg, "'cut.safetensors'");
    if (len < 8) {
      EXPECT_HAS(msg, "expected at least 8");
    } else if (len < 8 + n) {
      EXPECT_HAS(msg, "runs past the end of the file");
    } else {
      EXPECT_HAS(msg, "past the end of the data buffer");
    }
    if (len >= 8) {
      EXPECT_HAS(msg, "truncated");
    }
  }
  // And through a real file, at a few points.
  const auto path = temp_path("cut");
  for (std::size_t len : {std::size_t{3}, std::size_t{8} + 5, full.size() - 1}) {
    spit(path,
         std::vector<std::uint8_t>(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(len)));
    EXPECT_HAS(error_of([&] { st::read(path); }), path);
  }
}

TEST(SafetensorsRefuses, CorruptHeaderLength) {
  st::File f;
  f.tensors["w"] = st::Tensor::from<float>({3}, {1.f, 2.f, 3.f});
  auto bytes = st::serialize(f);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[static_cast<std::size_t>(i)];
  for (std::uint64_t bad : {n - 1, n + 1, n + 4, n - 8, std::uint64_t{0}}) {
    SCOPED_TRACE(bad);
    auto copy = bytes;
    for (int i = 0; i < 8; ++i)
      copy[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(bad >> (8 * i));
    EXPECT_HAS(error_of([&] { st::parse(copy, "f"); }), "safetensors: 'f': ");
  }
  bytes[7] = 0x80;  // a flipped high bit
  EXPECT_HAS(error_of([&] { st::parse(bytes, "f"); }), "is absurd");
}

TEST(SafetensorsRefuses, HeaderThatIsNotAJsonObject) {
  const std::vector<std::uint8_t> none;
  EXPECT_HAS(parse_error("{\"a\": {", none), "header is not valid JSON");
  EXPECT_HAS(parse_error("", none), "header is not valid JSON");
  EXPECT_HAS(parse_error("{\"a\":1}\xFF", none), "header is not valid JSON");
  EXPECT_HAS(parse_error("{\"\xC3\x28\":1}", none), "header is not valid JSON");  // bad UTF-8
  EXPECT_HAS(parse_error("[1, 2]", none), "header is a JSON array; expected a JSON object");
  EXPECT_HAS(parse_error("\"x\"", none), "header is a JSON string; expected a JSON object");
  EXPECT_HAS(parse_error("{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]},"
                         "\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}",
                         none),
             "header repeats key 'a'");
  EXPECT_HAS(parse_error("{\"__metadata__\":[1]}", none),
             "__metadata__ is a JSON array; expected an object of strings");
  EXPECT_HAS(parse_error("{\"__metadata__\":{\"step\":12}}", none),
             "__metadata__ 'step' is 12; expected a string");
}

TEST(SafetensorsRefuses, BadEntriesNamingTensorValueAndExpectation) {
  const std::vector<std::uint8_t> eight(8, 0);
  struct Case {
    std::string entry;  // the JSON value of tensor "t"
    std::string needle;
  };
  const std::vector<Case> cases = {
      {"3", "tensor 't' is number; expected an object with dtype, shape and data_offsets"},
      {R"({"shape":[2],"data_offsets":[0,8]})", "tensor 't' has no 'dtype'"},
      {R"({"dtype":"F32","data_offsets":[0,8]})", "tensor 't' has no 'shape'"},
      {R"({"dtype":"F32","shape":[2]})", "tensor 't' has no 'data_offsets'"},
      {R"({"dtype":"F32","shape":[2],"data_offsets":[0,8],"strides":[1]})",
       "tensor 't' has unknown key 'strides'"},
      {R"({"dtype":32,"shape":[2],"data_offsets":[0,8]})",
       "tensor 't' has dtype 32; expected a string"},
      {R"({"dtype":"Q4","shape":[2],"data_offsets":[0,8]})",
       "tensor 't': unknown dtype \"Q4\"; expected one of BOOL, U8"},
      {R"({"dtype":"f32","shape":[2],"data_offsets":[0,8]})", "unknown dtype \"f32\""},
      {R"({"dtype":"F32","shape":"2","data_offsets":[0,8]})",
       "tensor 't' has shape \"2\"; expected an array of integers"},
      {R"({"dtype":"F32","shape":[2.0],"data_offsets":[0,8]})",
       "tensor 't' has shape [2.0]; expected an array of integers"},
      {R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})",
       "tensor 't' has shape [-2] with a negative dim -2; expected dims >= 0"},
      {R"({"dtype":"F32","shape":[2],"data_offsets":[0]})",
       "tensor 't' has data_offsets [0]; expected [begin, end]"},
      {R"({"dtype":"F32","shape":[2],"data_offsets":{"begin":0}})", "expected [begin, end]"},
      {R"({"dtype":"F32","shape":[2],"data_offsets":[-8,0]})",
       "tensor 't' data_offsets[0] is -8; expected a non-negative integer"},
      {R"({"dtype":"F32","shape":[2],"data_offsets":[0,"8"]})",
       "tensor 't' data_offsets[1] is \"8\"; expected a non-negative integer"},
      {R"({"dtype":"F32","shape":[2],"data_offsets":[8,0]})",
       "tensor 't' has data_offsets [8, 0] reversed; expected begin <= end"},
      {R"({"dtype":"F32","shape":[4],"data_offsets":[0,16]})",
       "tensor 't' has data_offsets [0, 16] past the end of the data buffer (8 bytes); expected "
       "end <= 8"},
      {R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})",
       "tensor 't' has data_offsets [0, 8] spanning 8 bytes; expected 12 (shape [3] of F32)"},
      {R"({"dtype":"F64","shape":[2],"data_offsets":[0,8]})", "spanning 8 bytes; expected 16"},
      {R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]})",
       "overflows int64"},
      {R"({"dtype":"I32","shape":[1],"data_offsets":[0,4]})",
       "the data buffer is 8 bytes but the tensors cover only 4; expected no trailing bytes"},
  };
  for (const auto& c : cases) {
    const auto msg = parse_error("{\"t\":" + c.entry + "}", eight);
    EXPECT_HAS(msg, c.needle);
    EXPECT_HAS(msg, "safetensors: 'hand.safetensors': ");
  }
}

TEST(SafetensorsRefuses, OverlappingAndHolesInTheDataBuffer) {
  const std::vector<std::uint8_t> twelve(12, 0);
  EXPECT_HAS(parse_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                         twelve),
             "tensors 'a' [0, 8) and 'b' [4, 12) overlap; expected disjoint data_offsets");
  EXPECT_HAS(parse_error(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},)"
                         R"("b":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}})",
                         twelve),
             "overlap");
  EXPECT_HAS(parse_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                         R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                         twelve),
             "bytes [4, 8) of the data buffer before tensor 'b' belong to no tensor");
  // An empty tensor inside another one's bytes is an overlap too; at a boundary it is fine.
  EXPECT_HAS(parse_error(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},)"
                         R"("e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})",
                         twelve),
             "overlap");
  const auto f = st::parse(image(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},)"
                                 R"("e":{"dtype":"F32","shape":[0],"data_offsets":[12,12]}})",
                                 twelve),
                           "ok");
  EXPECT_EQ(f.tensors.size(), 2u);
}

TEST(SafetensorsRefuses, TypedGettersCheckNameDtypeAndShape) {
  st::File f;
  f.source = "ckpt.safetensors";
  f.tensors["loss"] = st::Tensor::from<std::int32_t>({1}, {3});
  f.tensors["states"] = st::Tensor::from<float>({4, 3}, std::vector<float>(12, 0.f));
  EXPECT_HAS(error_of([&] { f.at("q"); }),
             "no tensor 'q' in 'ckpt.safetensors'; it holds: loss, states");
  EXPECT_HAS(error_of([&] { st::File{}.at("q"); }), "it holds no tensors");
  EXPECT_HAS(error_of([&] { f.f32("loss", {1}); }),
             "tensor 'loss' in 'ckpt.safetensors' is I32; expected F32");
  EXPECT_HAS(error_of([&] {
               f.f32("states", {4, 48});
             }),
             "tensor 'states' in 'ckpt.safetensors' has shape [4, 3]; expected [4, 48]");
  EXPECT_HAS(error_of([&] { f.i32("loss", {}); }), "has shape [1]; expected []");
  EXPECT_HAS(error_of([&] { f.i64("loss", {1}); }), "is I32; expected I64");
  EXPECT_HAS(error_of([&] { f.at("loss").as<float>(); }), "tensor is I32; as<T>() expected F32");
  EXPECT_EQ(f.i32("loss", {1}), std::vector<std::int32_t>{3});
}

TEST(SafetensorsRefuses, InconsistentTensorsOnWriteLeaveTheOldFile) {
  const auto path = temp_path("keep");
  st::File good;
  good.tensors["w"] = st::Tensor::from<float>({2}, {1.f, 2.f});
  st::write(path, good);
  const auto before = slurp(path);

  st::File bad;
  bad.tensors["w"] = st::Tensor::from<float>({2}, {1.f, 2.f});
  bad.tensors["w"].shape = {3};
  auto msg = error_of([&] { st::write(path, bad); });
  EXPECT_HAS(msg,
             "writing '" + path + "': tensor 'w' holds 8 bytes; expected 12 (shape [3] of F32)");
  EXPECT_EQ(slurp(path), before);
  EXPECT_FALSE(exists(path + ".tmp"));

  bad.tensors["w"].shape = {-2};
  EXPECT_HAS(error_of([&] { st::write(path, bad); }), "negative dim -2");
  st::File meta_name;
  meta_name.tensors["__metadata__"] = st::Tensor::from<float>({}, {1.f});
  EXPECT_HAS(error_of([&] { st::write(path, meta_name); }), "a tensor is named '__metadata__'");
  st::File bad_utf8;
  bad_utf8.tensors["w\xFF"] = st::Tensor::from<float>({}, {1.f});
  EXPECT_HAS(error_of([&] { st::write(path, bad_utf8); }), "not valid UTF-8");
  EXPECT_EQ(slurp(path), before);

  EXPECT_HAS(error_of([&] { st::write(::testing::TempDir() + "no_such_dir/x.safetensors", good); }),
             "cannot open");
  EXPECT_HAS(error_of([&] {
               st::Tensor::from<float>({2, 2}, {1.f});
             }),
             "shape [2, 2] holds 4 elements; got 1 values");
}
