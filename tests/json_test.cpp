// The one JSON reader (core/json.hpp) and the seed policy (core/seed.hpp): strict parsing
// (one value, no repeated key, bounded nesting, no number past a double), files that are
// missing or directories, and typed getters that range-check before they narrow.
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/json.hpp"
#include "core/seed.hpp"
#include "test_util.hpp"

namespace {

using json = nlohmann::json;
using zs::test::error_of;

#define EXPECT_HAS(msg, needle) EXPECT_NE((msg).find(needle), std::string::npos) << "message: '" << (msg) << "'"

std::string parse_error(const std::string& text) {
  return error_of([&] { zs::parse_json(text, "src"); });
}

std::string nested(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

TEST(Json, ParsesOneValue) {
  EXPECT_EQ(zs::parse_json(" {\"a\": [1, 2.5, \"x\"], \"b\": {\"a\": 1}} \n", "src"),
            json({{"a", {1, 2.5, "x"}}, {"b", {{"a", 1}}}}));
  // The same key in different objects is fine.
  EXPECT_NO_THROW(zs::parse_json(R"([{"a": 1}, {"a": 2}])", "src"));
}

TEST(Json, RefusesTrailingTextAndASecondValue) {
  EXPECT_HAS(parse_error(R"({"a": 1} x)"), "src is not valid JSON: more follows the first value at byte");
  EXPECT_HAS(parse_error(R"({"a": 1}{"a": 2})"), "expected one value and nothing after it");
  EXPECT_HAS(parse_error(R"({"a": 1} {"a": 2})"), "more follows the first value");
  EXPECT_HAS(parse_error("1 2"), "more follows the first value");
  EXPECT_HAS(parse_error(R"({"a": 1)"), "src is not valid JSON");
  EXPECT_HAS(parse_error(""), "src is not valid JSON");
}

TEST(Json, RefusesARepeatedKeyAtAnyDepth) {
  EXPECT_HAS(parse_error(R"({"a": 1, "a": 2})"), "src repeats key 'a' in one object; expected each key once");
  EXPECT_HAS(parse_error(R"({"x": [{"b": 1, "c": 2, "b": 3}]})"), "src repeats key 'b'");
}

TEST(Json, RefusesNestingDeeperThanTheLimitWithoutRecursing) {
  EXPECT_NO_THROW(zs::parse_json(nested(zs::kMaxJsonDepth), "src"));
  EXPECT_HAS(parse_error(nested(zs::kMaxJsonDepth + 1)), "src nests arrays and objects more than 64 levels deep");
  // 70,000 levels (140 KB) once overflowed the stack.
  EXPECT_HAS(parse_error(nested(70000)), "more than 64 levels deep");
  std::string objects;
  for (int i = 0; i < 70000; ++i) objects += "{\"a\":";
  objects += "1" + std::string(70000, '}');
  EXPECT_HAS(parse_error(objects), "more than 64 levels deep");
}

TEST(Json, ANumberPastADoubleIsAnErrorNotAnAbort) {
  EXPECT_HAS(parse_error(R"({"v_min": 1e400})"), "src is not valid JSON: number overflow parsing '1e400'");
  EXPECT_HAS(parse_error("-1e999"), "expected numbers within the range of a double");
}

TEST(Json, FilesThatAreMissingOrDirectoriesAreClearErrors) {
  const std::string dir = zs::test::temp_path("dir.json");
  std::filesystem::create_directories(dir);
  EXPECT_HAS(error_of([&] { zs::read_json_file(dir, "config"); }), "config '" + dir + "' is a directory");
  const std::string missing = zs::test::temp_path("missing.json");
  EXPECT_HAS(error_of([&] { zs::read_json_file(missing, "config"); }), "config '" + missing + "': cannot open");
  const std::string two = zs::test::temp_path("two.json");
  std::ofstream(two) << "{\"a\": 1}\n{\"b\": 2}\n";
  EXPECT_HAS(error_of([&] { zs::read_json_file(two, "config"); }), "config '" + two + "' is not valid JSON");
}

TEST(Json, PreviewIsShortAndShallowForAnyValue) {
  EXPECT_EQ(zs::json_preview(json({0.0, 0.1})), "[0.0,0.1]");
  EXPECT_EQ(zs::json_preview(json("bf16")), "\"bf16\"");
  json deep = 1;
  for (int i = 0; i < 100000; ++i) {
    json outer = json::array();
    outer.push_back(std::move(deep));
    deep = std::move(outer);
  }
  EXPECT_EQ(zs::json_preview(deep), "[[[[[...]]]]]");
  EXPECT_LE(zs::json_preview(json(std::string(100000, 'x'))).size(), 90u);
  EXPECT_LE(zs::json_preview(json(std::vector<int>(100000, 7))).size(), 90u);
}

TEST(JsonObject, UnknownKeysListTheExpectedOnes) {
  const json j = {{"atom", 1}};
  EXPECT_HAS(error_of([&] { zs::JsonObject(j, "config", {"atoms", "trunk"}); }),
             "config: unknown key 'atom'; expected one of: atoms, trunk");
  EXPECT_HAS(error_of([&] { zs::JsonObject(j, "config", {"k"}, "ensemble"); }),
             "config: ensemble.atom is an unknown key; expected one of: k");
  EXPECT_HAS(error_of([&] { zs::JsonObject(json::array(), "config", {}); }), "config: expected a JSON object, got array");
}

TEST(JsonObject, IntegersAreRangeCheckedBeforeNarrowing) {
  const json j = {{"wraps", 4294967307ull}, {"big", 2147483648ll}, {"neg", -1}, {"max", 18446744073709551615ull},
                  {"real", 2.0},           {"past", 1e20},        {"ok", 7}};
  const zs::JsonObject o(j, "config", {"wraps", "big", "neg", "max", "real", "past", "ok"});
  int x = -5;
  EXPECT_HAS(error_of([&] { o.integer("wraps", x, {2, 1024}); }),
             "config: wraps = 4294967307 is invalid; expected an integer in [2, 1024]");
  EXPECT_HAS(error_of([&] { o.integer("big", x, {INT_MIN, INT_MAX}); }), "big = 2147483648 is invalid");
  std::int64_t y = -5;
  EXPECT_HAS(error_of([&] { o.integer("neg", y, {0, 10}); }), "neg = -1 is invalid; expected an integer in [0, 10]");
  EXPECT_HAS(error_of([&] { o.integer("max", y, {0, INT64_MAX}); }), "max = 18446744073709551615 is invalid");
  EXPECT_HAS(error_of([&] { o.integer("real", x, {0, 10}); }), "real = 2.0 is invalid; expected an integer");
  EXPECT_HAS(error_of([&] { o.integer("past", y, {0, INT64_MAX}); }), "past = 1e+20 is invalid");
  EXPECT_EQ(x, -5);
  EXPECT_EQ(y, -5);
  EXPECT_TRUE(o.integer("ok", x, {0, 10}));
  EXPECT_EQ(x, 7);
  EXPECT_FALSE(o.integer("absent", x, {0, 10}));
  EXPECT_EQ(x, 7);
}

TEST(JsonObject, NumbersAreFiniteAndFitTheirType) {
  const json j = {{"nan", std::nan("")}, {"huge", 1e39}, {"half", 0.5}, {"text", "1"}};
  const zs::JsonObject o(j, "p", {"nan", "huge", "half", "text"}, "s");
  float f = 0;
  double d = 0;
  EXPECT_HAS(error_of([&] { o.number("nan", d); }), "p: s.nan = null is invalid; expected a finite number");
  EXPECT_HAS(error_of([&] { o.number("huge", f); }), "s.huge = 1e+39 is invalid; expected a number within the range of a float");
  EXPECT_NO_THROW(o.number("huge", d));
  EXPECT_HAS(error_of([&] { o.number("half", d, {0.0, 0.5, false, true}); }),
             "s.half = 0.5 is invalid; expected a finite number in [0, 0.5)");
  EXPECT_HAS(error_of([&] { o.number("text", d); }), "s.text = \"1\" is invalid");
  EXPECT_TRUE(o.number("half", f, {0.0, 1.0}));
  EXPECT_EQ(f, 0.5f);
}

TEST(JsonObject, ListsHaveBoundedLengthsAndCheckedEntries) {
  const json j = {{"trunk", std::vector<int>(65, 8)}, {"bad", {256, -1}}, {"ok", {1, 2}}, {"tri", {0.1, 0.2}}};
  const zs::JsonObject o(j, "config", {"trunk", "bad", "ok", "tri"});
  std::vector<int> v;
  EXPECT_HAS(error_of([&] { o.integers("trunk", v, {1, 65536}, {1, 64}); }),
             "expected a list of 1 to 64 integers in [1, 65536]");
  EXPECT_HAS(error_of([&] { o.integers("bad", v, {1, 65536}, {1, 64}); }), "config: bad = [256, -1] is invalid");
  EXPECT_TRUE(o.integers("ok", v, {1, 2}, {2, 2}));
  EXPECT_EQ(v, (std::vector<int>{1, 2}));
  std::vector<double> n;
  EXPECT_HAS(error_of([&] { o.numbers("tri", n, 3); }), "tri = [0.1,0.2] is invalid; expected a list of 3 numbers");
}

TEST(Seed, OnePolicyForEverySeed) {
  EXPECT_EQ(zs::parse_seed("0", "--seed"), 0u);
  EXPECT_EQ(zs::parse_seed("18446744073709551615", "--seed"), 18446744073709551615ull);
  for (const std::string bad : {"-1", "18446744073709551616", "99999999999999999999999", "1.5", "1e3", "", " 1", "+1",
                                "0x10", "seven"}) {
    EXPECT_HAS(error_of([&] { zs::parse_seed(bad, "--seed"); }),
               "--seed = " + bad + " is invalid; expected an integer in [0, 18446744073709551615]");
  }
  // JSON seeds follow the same function.
  const json j = {{"a", -1}, {"b", 1.5}, {"c", 18446744073709551615ull}, {"d", "5"}};
  const zs::JsonObject o(j, "config", {"a", "b", "c", "d"});
  std::uint64_t s = 3;
  EXPECT_HAS(error_of([&] { o.seed("a", s); }), "config: a = -1 is invalid; expected an integer in [0, 18446744073709551615]");
  EXPECT_HAS(error_of([&] { o.seed("b", s); }), "config: b = 1.5 is invalid");
  EXPECT_HAS(error_of([&] { o.seed("d", s); }), "config: d = \"5\" is invalid");
  EXPECT_TRUE(o.seed("c", s));
  EXPECT_EQ(s, 18446744073709551615ull);
}

}  // namespace
