// zerosync's one JSON reader: strict parsing of a text or a file, and typed, range-checked
// access to an object's keys. Configs, environment params and safetensors headers all read
// through it, so every one refuses the same things with messages naming the source, the key,
// the value (shortened) and what is expected.
#pragma once
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace zs {

// Deepest nesting of arrays and objects that parse_json accepts; the deepest input zerosync
// reads (a safetensors header: object → tensor → shape) needs 3.
inline constexpr int kMaxJsonDepth = 64;

// Parses `text` as exactly one JSON value. Throws zs::Error naming `source` (e.g.
// "config 'a.json'") and what was found for: invalid JSON or UTF-8, anything but whitespace
// after the value, a key given twice in one object, nesting deeper than kMaxJsonDepth, and a
// number past the range of a double.
nlohmann::json parse_json(std::string_view text, const std::string& source);
// Reads the file at `path` and parses it; `kind` ("config", "train config") and the path name
// it in messages. A missing, unreadable or directory path is a zs::Error.
nlohmann::json read_json_file(const std::string& path, const std::string& kind);

// `v` for a message: compact JSON, at most about 80 characters and 4 levels (never recursing
// deeper), ASCII only; never throws.
std::string json_preview(const nlohmann::json& v);

// An inclusive integer range.
struct IntRange {
  std::int64_t lo, hi;
};

// A range for a finite number; each end is closed unless marked open.
struct NumberRange {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false, hi_open = false;
  bool contains(double x) const;
  std::string str() const;  // "in [0, 1]", "in (0, 1e+30]", "> 0"; "" when unbounded
};

// Reads the keys of one JSON object. `where` opens every message ("config", "train config:
// replay"); `path` ("iqn") prefixes key names in them ("iqn.n_tau"). Each getter leaves `out`
// unchanged and returns false when the key is absent, and throws zs::Error naming the key, the
// value and what is expected when the value has the wrong type or is out of range.
class JsonObject {
 public:
  // Throws unless `j` is an object whose keys are all among `keys` (the message lists them).
  JsonObject(const nlohmann::json& j, std::string where, std::vector<std::string> keys,
             std::string path = "");

  const nlohmann::json* find(const char* key) const;
  // "iqn.n_tau" for key "n_tau" under path "iqn".
  std::string name(const char* key) const;
  // Throws "<where>: <name> = <value> is invalid; expected <expected>".
  [[noreturn]] void invalid(const char* key, const std::string& expected) const;

  // Integers: the JSON value must be an integer (not 2.0) within `range`, checked before it is
  // narrowed to the field's type; the range must fit that type.
  bool integer(const char* key, int& out, IntRange range) const;
  bool integer(const char* key, std::int64_t& out, IntRange range) const;
  // A seed: zs::parse_seed's policy (an integer in [0, 2^64 − 1]).
  bool seed(const char* key, std::uint64_t& out) const;
  // Finite numbers within `range`; a float must also be finite once narrowed (|x| <= 3.4e38).
  bool number(const char* key, double& out, NumberRange range = {}) const;
  bool number(const char* key, float& out, NumberRange range = {}) const;
  bool boolean(const char* key, bool& out) const;
  bool text(const char* key, std::string& out) const;
  // A list of integers, each within `each`, whose length is within `count`.
  bool integers(const char* key, std::vector<int>& out, IntRange each, IntRange count) const;
  // A list of exactly `count` numbers, each within `each`.
  bool numbers(const char* key, std::vector<double>& out, std::size_t count,
               NumberRange each = {}) const;

 private:
  const nlohmann::json& j_;
  std::string where_, path_;
};

}  // namespace zs
