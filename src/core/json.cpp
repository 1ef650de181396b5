#include "core/json.hpp"

#include <algorithm>
#include <cerrno>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <system_error>

#include "core/error.hpp"
#include "core/seed.hpp"

namespace zs {

namespace {

using nlohmann::json;

constexpr std::size_t kPreviewChars = 80;
constexpr int kPreviewDepth = 4;
constexpr std::size_t kKeyChars = 40;
// A config is a few kilobytes; this only stops a path like /dev/zero from filling memory.
constexpr std::size_t kMaxFileBytes = std::size_t{64} << 20;

std::string ascii_dump(const json& v) { return v.dump(-1, ' ', true, json::error_handler_t::replace); }

// A key as it appears in a message: escaped to ASCII, cut when long.
std::string shown_key(const std::string& key) {
  std::string s = ascii_dump(json(key.size() > kKeyChars ? key.substr(0, kKeyChars) : key));
  s = s.substr(1, s.size() - 2);
  return key.size() > kKeyChars ? s + "..." : s;
}

// Bounded in depth and (roughly) in length, so a hostile value costs nothing to show.
void render(const json& v, int depth, std::string& out) {
  if (out.size() > kPreviewChars) return;
  if (v.is_array() || v.is_object()) {
    const bool object = v.is_object();
    if (depth >= kPreviewDepth) {
      out += object ? "{...}" : "[...]";
      return;
    }
    out += object ? '{' : '[';
    bool first = true;
    for (auto it = v.begin(); it != v.end() && out.size() <= kPreviewChars; ++it) {
      if (!first) out += ',';
      first = false;
      if (object) out += ascii_dump(json(it.key())) + ':';
      render(*it, depth + 1, out);
    }
    out += object ? '}' : ']';
  } else if (v.is_string() && v.get_ref<const std::string&>().size() > kPreviewChars) {
    out += ascii_dump(json(v.get_ref<const std::string&>().substr(0, kPreviewChars)));
  } else {
    out += ascii_dump(v);
  }
}

// "[256, -1]": integer lists are shown the way the config's own messages show them.
std::string list_preview(const json& v) {
  if (!v.is_array()) return json_preview(v);
  std::string s = "[";
  for (std::size_t i = 0; i < v.size() && s.size() <= kPreviewChars; ++i) s += (i ? ", " : "") + json_preview(v[i]);
  if (s.size() > kPreviewChars) return s.substr(0, kPreviewChars) + "...";
  return s + "]";
}

bool as_integer(const json& v, IntRange r, std::int64_t& out) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (r.hi < 0 || u > static_cast<std::uint64_t>(r.hi)) return false;
    out = static_cast<std::int64_t>(u);
  } else if (v.is_number_integer()) {
    out = v.get<std::int64_t>();
  } else {
    return false;
  }
  return out >= r.lo && out <= r.hi;
}

std::string range_text(IntRange r) { return str("[", r.lo, ", ", r.hi, "]"); }

// nlohmann's message without its "[json.exception.parse_error.101] " tag.
std::string detail(const json::exception& e) {
  const std::string what = e.what();
  const auto tag = what.find("] ");
  return tag == std::string::npos ? what : what.substr(tag + 2);
}

}  // namespace

std::string json_preview(const json& v) {
  std::string s;
  render(v, 0, s);
  if (s.size() > kPreviewChars) s = s.substr(0, kPreviewChars) + "...";
  return s;
}

json parse_json(std::string_view text, const std::string& source) {
  // The keys seen so far in each object still open, innermost last.
  std::vector<std::set<std::string>> open;
  const json::parser_callback_t check = [&](int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        // `depth` counts the containers already open around this one; refusing here keeps
        // every later recursion over the value (dump, compare, destroy) shallow.
        if (depth >= kMaxJsonDepth)
          fail(source, " nests arrays and objects more than ", kMaxJsonDepth, " levels deep; expected at most ",
               kMaxJsonDepth);
        if (event == json::parse_event_t::object_start) open.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!open.empty()) open.pop_back();
        break;
      case json::parse_event_t::key:
        if (!open.empty() && !open.back().insert(parsed.get<std::string>()).second)
          fail(source, " repeats key '", shown_key(parsed.get<std::string>()),
               "' in one object; expected each key once (a repeated key would silently keep its last value)");
        break;
      default:
        break;
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), check);
  } catch (const json::parse_error& e) {
    if (detail(e).find("expected end of input") != std::string::npos)
      fail(source, " is not valid JSON: more follows the first value at byte ", e.byte,
           "; expected one value and nothing after it but whitespace (", detail(e), ")");
    fail(source, " is not valid JSON: ", detail(e));
  } catch (const json::exception& e) {
    // A number past the range of a double (1e400) is nlohmann's out_of_range, not a parse_error.
    fail(source, " is not valid JSON: ", detail(e), "; expected numbers within the range of a double");
  }
}

json read_json_file(const std::string& path, const std::string& kind) {
  const std::string source = kind + " '" + path + "'";
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail(source, " is a directory; expected a readable JSON file");
  std::ifstream in(path, std::ios::binary);
  if (!in.is_open())
    fail(source, ": cannot open the file (", std::strerror(errno), "); expected a readable JSON file");
  std::string text;
  char buffer[1 << 16];
  while (in.read(buffer, sizeof buffer) || in.gcount() > 0) {
    text.append(buffer, static_cast<std::size_t>(in.gcount()));
    if (text.size() > kMaxFileBytes)
      fail(source, " is larger than ", kMaxFileBytes >> 20, " MiB; expected a JSON file of at most that size");
  }
  if (in.bad()) fail(source, ": reading the file failed; expected a readable JSON file");
  return parse_json(text, source);
}

bool NumberRange::contains(double x) const {
  return std::isfinite(x) && (lo_open ? x > lo : x >= lo) && (hi_open ? x < hi : x <= hi);
}

std::string NumberRange::str() const {
  const bool has_lo = std::isfinite(lo), has_hi = std::isfinite(hi);
  if (has_lo && has_hi) return zs::str("in ", lo_open ? "(" : "[", lo, ", ", hi, hi_open ? ")" : "]");
  if (has_lo) return zs::str(lo_open ? "> " : ">= ", lo);
  if (has_hi) return zs::str(hi_open ? "< " : "<= ", hi);
  return "";
}

JsonObject::JsonObject(const json& j, std::string where, std::vector<std::string> keys, std::string path)
    : j_(j), where_(std::move(where)), path_(std::move(path)) {
  if (!j.is_object()) {
    if (path_.empty()) fail(where_, ": expected a JSON object, got ", j.type_name(), " ", json_preview(j));
    fail(where_, ": ", path_, " = ", json_preview(j), " is invalid; expected a JSON object");
  }
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (std::find(keys.begin(), keys.end(), it.key()) != keys.end()) continue;
    std::string list;
    for (const auto& k : keys) list += (list.empty() ? "" : ", ") + k;
    if (path_.empty()) fail(where_, ": unknown key '", shown_key(it.key()), "'; expected one of: ", list);
    fail(where_, ": ", path_, ".", shown_key(it.key()), " is an unknown key; expected one of: ", list);
  }
}

const json* JsonObject::find(const char* key) const {
  const auto it = j_.find(key);
  return it == j_.end() ? nullptr : &*it;
}

std::string JsonObject::name(const char* key) const { return path_.empty() ? key : path_ + "." + key; }

void JsonObject::invalid(const char* key, const std::string& expected) const {
  const json* v = find(key);
  fail(where_, ": ", name(key), " = ", v ? json_preview(*v) : "(absent)", " is invalid; expected ", expected);
}

bool JsonObject::integer(const char* key, std::int64_t& out, IntRange range) const {
  const json* v = find(key);
  if (!v) return false;
  std::int64_t x = 0;
  if (!as_integer(*v, range, x)) invalid(key, "an integer in " + range_text(range));
  out = x;
  return true;
}

bool JsonObject::integer(const char* key, int& out, IntRange range) const {
  if (range.lo < INT_MIN || range.hi > INT_MAX)
    fail("JsonObject::integer: ", name(key), "'s range ", range_text(range), " does not fit an int");
  std::int64_t x = 0;
  if (!integer(key, x, range)) return false;
  out = static_cast<int>(x);
  return true;
}

bool JsonObject::seed(const char* key, std::uint64_t& out) const {
  const json* v = find(key);
  if (!v) return false;
  out = parse_seed(json_preview(*v), where_ + ": " + name(key));
  return true;
}

bool JsonObject::number(const char* key, double& out, NumberRange range) const {
  const json* v = find(key);
  if (!v) return false;
  if (!v->is_number() || !range.contains(v->get<double>())) {
    const std::string r = range.str();
    invalid(key, r.empty() ? "a finite number" : "a finite number " + r);
  }
  out = v->get<double>();
  return true;
}

bool JsonObject::number(const char* key, float& out, NumberRange range) const {
  double x = 0;
  if (!number(key, x, range)) return false;
  if (!(std::fabs(x) <= static_cast<double>(FLT_MAX)))
    invalid(key, str("a number within the range of a float (|x| <= ", FLT_MAX, ")"));
  out = static_cast<float>(x);
  return true;
}

bool JsonObject::boolean(const char* key, bool& out) const {
  const json* v = find(key);
  if (!v) return false;
  if (!v->is_boolean()) invalid(key, "true or false");
  out = v->get<bool>();
  return true;
}

bool JsonObject::text(const char* key, std::string& out) const {
  const json* v = find(key);
  if (!v) return false;
  if (!v->is_string()) invalid(key, "a string");
  out = v->get<std::string>();
  return true;
}

bool JsonObject::integers(const char* key, std::vector<int>& out, IntRange each, IntRange count) const {
  if (each.lo < INT_MIN || each.hi > INT_MAX)
    fail("JsonObject::integers: ", name(key), "'s range ", range_text(each), " does not fit an int");
  const json* v = find(key);
  if (!v) return false;
  std::vector<int> got;
  bool ok = v->is_array() && static_cast<std::int64_t>(v->size()) >= count.lo &&
            static_cast<std::int64_t>(v->size()) <= count.hi;
  for (std::size_t i = 0; ok && i < v->size(); ++i) {
    std::int64_t x = 0;
    ok = as_integer((*v)[i], each, x);
    got.push_back(static_cast<int>(x));
  }
  if (!ok) {
    const std::string n = count.lo == count.hi ? str(count.lo) : str(count.lo, " to ", count.hi);
    fail(where_, ": ", name(key), " = ", list_preview(*v), " is invalid; expected a list of ", n, " integers in ",
         range_text(each));
  }
  out = std::move(got);
  return true;
}

bool JsonObject::numbers(const char* key, std::vector<double>& out, std::size_t count, NumberRange each) const {
  const json* v = find(key);
  if (!v) return false;
  bool ok = v->is_array() && v->size() == count;
  for (std::size_t i = 0; ok && i < count; ++i) ok = (*v)[i].is_number() && each.contains((*v)[i].get<double>());
  if (!ok) {
    const std::string r = each.str();
    invalid(key, str("a list of ", count, " numbers, each finite", r.empty() ? "" : " and " + r));
  }
  out.clear();
  for (const auto& e : *v) out.push_back(e.get<double>());
  return true;
}

}  // namespace zs
