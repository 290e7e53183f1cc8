// YAML <-> JSON: scalar resolution as kubectl does it, errors with positions,
// limits against hostile input, and the emitter's round-trip.
#include "operator/api/yaml.h"

#include <gtest/gtest.h>

namespace orrery::api {
namespace {

Json One(const std::string& yaml) {
  auto j = YamlToJson(yaml);
  EXPECT_TRUE(j.ok()) << j.status();
  return j.ok() ? *j : Json();
}

TEST(YamlTest, ResolvesPlainScalarsLikeKubectl) {
  Json j = One(R"(
a: 1e-4
b: 3.0
c: 42
d: -7
e: "1e-4"
f: '42'
g: true
h: yes
i: off
j: ~
k:
l: hello
m: 0x10
n: 0o17
o: .5
p: 99999999999999999999
q: "true"
r: 1.5e3
s: 1e
)");
  EXPECT_TRUE(j["a"].is_number_float());
  EXPECT_DOUBLE_EQ(j["a"].get<double>(), 1e-4);
  EXPECT_TRUE(j["b"].is_number_float());
  EXPECT_EQ(j["c"], 42);
  EXPECT_TRUE(j["c"].is_number_integer());
  EXPECT_EQ(j["d"], -7);
  EXPECT_EQ(j["e"], "1e-4");
  EXPECT_EQ(j["f"], "42");
  EXPECT_EQ(j["g"], true);
  EXPECT_EQ(j["h"], true);
  EXPECT_EQ(j["i"], false);
  EXPECT_TRUE(j["j"].is_null());
  EXPECT_TRUE(j["k"].is_null());
  EXPECT_EQ(j["l"], "hello");
  EXPECT_EQ(j["m"], 16);
  EXPECT_EQ(j["n"], 15);
  EXPECT_DOUBLE_EQ(j["o"].get<double>(), 0.5);
  EXPECT_TRUE(j["p"].is_number_float());  // beyond int64: a float, as kubectl reads it
  EXPECT_EQ(j["q"], "true");
  EXPECT_DOUBLE_EQ(j["r"].get<double>(), 1500);
  EXPECT_EQ(j["s"], "1e");
}

TEST(YamlTest, KeepsFieldOrder) {
  Json j = One("z: 1\na: 2\nm: 3\n");
  std::vector<std::string> keys;
  for (const auto& [k, v] : j.items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"z", "a", "m"}));
}

TEST(YamlTest, SyntaxErrorsCarryLineAndColumn) {
  auto j = YamlToJson("a: 1\nb: [1, 2\nc: 3\n");
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(j.status().message().find("line "), std::string::npos) << j.status();
  EXPECT_NE(j.status().message().find("column "), std::string::npos) << j.status();
}

TEST(YamlTest, DuplicateKeysAreErrors) {
  auto j = YamlToJson("spec:\n  a: 1\n  a: 2\n");
  ASSERT_FALSE(j.ok());
  EXPECT_NE(j.status().message().find("duplicate field \"spec.a\""), std::string::npos)
      << j.status();
  EXPECT_NE(j.status().message().find("line 3"), std::string::npos) << j.status();
}

TEST(YamlTest, NonFiniteNumbersAreErrors) {
  auto j = YamlToJson("lr: .inf\n");
  ASSERT_FALSE(j.ok());
  EXPECT_NE(j.status().message().find("not a finite number"), std::string::npos);
  EXPECT_EQ(One("lr: '.inf'\n")["lr"], ".inf");
  EXPECT_FALSE(YamlToJson("x: 1e999\n").ok());
}

TEST(YamlTest, ComplexKeysAreErrors) { EXPECT_FALSE(YamlToJson("? [a, b]\n: 1\n").ok()); }

TEST(YamlTest, AliasBombsHitTheNodeLimit) {
  std::string bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n";
  std::string prev = "a";
  for (char c = 'b'; c <= 'i'; ++c) {
    std::string name(1, c);
    bomb += name + ": &" + name + " [";
    for (int i = 0; i < 10; ++i) bomb += (i ? ", *" : "*") + prev;
    bomb += "]\n";
    prev = name;
  }
  auto j = YamlToJson(bomb);
  ASSERT_FALSE(j.ok());
  EXPECT_NE(j.status().message().find("too large"), std::string::npos) << j.status();
}

TEST(YamlTest, DeepNestingHitsTheDepthLimit) {
  std::string deep(200, '[');
  deep += std::string(200, ']');
  auto j = YamlToJson(deep);
  ASSERT_FALSE(j.ok());
}

TEST(YamlTest, MultipleDocuments) {
  auto docs = YamlToJsonDocuments("a: 1\n---\nb: 2\n---\n");
  ASSERT_TRUE(docs.ok()) << docs.status();
  ASSERT_EQ(docs->size(), 2u);
  EXPECT_EQ((*docs)[1]["b"], 2);
  EXPECT_FALSE(YamlToJson("a: 1\n---\nb: 2\n").ok());
  EXPECT_FALSE(YamlToJson("").ok());
}

TEST(YamlTest, JsonErrorsCarryTheOffset) {
  auto j = ParseJson("{\"a\": 1,, }");
  ASSERT_FALSE(j.ok());
  EXPECT_NE(j.status().message().find("byte 9"), std::string::npos) << j.status();
  auto ok = ParseJsonOrYaml("  {\"a\": [1, 2]}");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ((*ok)["a"][1], 2);
}

TEST(YamlTest, EmitterRoundTripsTypes) {
  Json j = Json::parse(R"({"s": "1e-4", "t": "true", "e": "", "n": null, "f": 3.0, "g": 0.0003,
                           "i": 7, "b": false, "l": [1, "x", {"k": "v"}], "o": {"yes": "no"}})");
  std::string yaml = JsonToYaml(j);
  auto back = YamlToJson(yaml);
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << yaml;
  EXPECT_EQ(*back, j) << yaml;
}

}  // namespace
}  // namespace orrery::api

namespace orrery::api {
namespace {

TEST(YamlUtf8Test, InvalidUtf8IsRefusedWithItsPath) {
  EXPECT_EQ(One("name: \"caf\xc3\xa9\"\n")["name"], "caf\xc3\xa9");
  auto bad = YamlToJson("spec:\n  name: \"a\xff\"\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("spec.name is not valid UTF-8"), std::string::npos)
      << bad.status();
  EXPECT_FALSE(YamlToJson("\"k\xc0\xaf\": 1\n").ok());     // overlong '/' in a key
  EXPECT_FALSE(YamlToJson("v: \"\xed\xa0\x80\"\n").ok());  // a lone surrogate
}

}  // namespace
}  // namespace orrery::api

namespace orrery::api {
namespace {

// yaml-cpp 0.7's LoadAll never returns on these (a stray token makes an endless
// run of empty documents); found by tests/fuzz/api_fuzzer.
TEST(YamlRegressionTest, StrayTokensEndWithAnErrorNotALoop) {
  for (const char* text : {",", "{a},", "[a],", "a: 1\n---\n,", "{\"\"},\"spec\":{}"}) {
    auto docs = YamlToJsonDocuments(text);
    ASSERT_FALSE(docs.ok()) << text;
    EXPECT_NE(docs.status().message().find("line "), std::string::npos) << docs.status();
  }
  // Legitimately empty documents are still skipped.
  auto docs = YamlToJsonDocuments("---\n---\na: 1\n---\n");
  ASSERT_TRUE(docs.ok()) << docs.status();
  EXPECT_EQ(docs->size(), 1u);
}

TEST(YamlRegressionTest, AnchorsAndAliasesExpand) {
  Json j = One("base: &b {lr: 1e-3, bs: 32}\ncopy: *b\nlist: [&x 1, *x]\n");
  EXPECT_EQ(j["copy"], j["base"]);
  EXPECT_EQ(j["list"], Json::parse("[1, 1]"));
}

TEST(YamlRegressionTest, TooManyDocuments) {
  std::string many;
  for (int i = 0; i < 20; ++i) many += "a: 1\n---\n";
  YamlLimits limits;
  limits.max_documents = 10;
  EXPECT_FALSE(YamlToJsonDocuments(many, limits).ok());
  EXPECT_TRUE(YamlToJsonDocuments(many).ok());
}

}  // namespace
}  // namespace orrery::api

namespace orrery::api {
namespace {

// Found by the fuzzer: control characters in strings must survive JSON -> YAML -> JSON.
TEST(YamlRegressionTest, ControlCharactersAreEscapedAndRoundTrip) {
  Json j = Json::parse(R"({"a\u0001": "x\u0001y\u0085\u00e9z\u0000\u007f", "b": "caf\u00e9"})");
  EXPECT_FALSE(IsYamlPrintable(j["a\u0001"].get<std::string>()));
  EXPECT_TRUE(IsYamlPrintable("caf\xc3\xa9\ttab"));
  std::string yaml = JsonToYaml(j);
  EXPECT_NE(yaml.find("b: café"), std::string::npos) << yaml;  // printable text stays readable
  auto back = YamlToJson(yaml);
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << yaml;
  EXPECT_EQ(*back, j) << yaml;
}

// Found by the fuzzer in CI: a UTF-32LE stream decoding to a control character
// next to U+FFFFF, a noncharacter, which yaml-cpp's escaping emitter writes as
// U+FFFD. YamlEmitterPreserves says so, and everything else still round-trips.
TEST(YamlRegressionTest, NoncharactersInEscapedStringsAreReported) {
  const std::string input("\x08\0\0\0\xff\xffoot>s", 11);
  auto docs = YamlToJsonDocuments(input);
  ASSERT_TRUE(docs.ok()) << docs.status();
  ASSERT_EQ(docs->size(), 1u);
  const Json& doc = (*docs)[0];
  ASSERT_TRUE(doc.is_string());
  EXPECT_FALSE(YamlEmitterPreserves(doc.get<std::string>()));
  auto back = YamlToJson(JsonToYaml(doc));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->get<std::string>(), "\b\xEF\xBF\xBD");  // U+FFFD in its place
  // Printable strings keep their noncharacters; escaped ones without any are kept.
  EXPECT_TRUE(YamlEmitterPreserves("\xF3\xBF\xBF\xBF"));      // U+FFFFF alone
  EXPECT_TRUE(YamlEmitterPreserves("\x08\xF0\x9F\x98\x80"));  // control + emoji
  EXPECT_FALSE(YamlEmitterPreserves("\x08\xEF\xB7\x90"));     // control + U+FDD0
  EXPECT_FALSE(YamlEmitterPreserves("\xEF\xBF\xBE"));         // U+FFFE is never printable
  EXPECT_TRUE(YamlEmitterPreserves("plain text"));
}

// Found by the fuzzer: a map key longer than YAML's 1024-character limit for
// implicit keys was written as "key: value" and did not read back.
TEST(YamlRegressionTest, LongKeysAreWrittenAsExplicitKeys) {
  Json j;
  j[std::string(1500, 'k')] = "v";
  j["short"] = std::string(3000, 'x');    // long values are fine as they are
  j[std::string(300, 'z') + "\x01"] = 1;  // escaped: up to 4 characters per byte
  std::string yaml = JsonToYaml(j);
  EXPECT_NE(yaml.find("? "), std::string::npos) << yaml.substr(0, 200);
  auto back = YamlToJson(yaml);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, j);
}

}  // namespace
}  // namespace orrery::api
