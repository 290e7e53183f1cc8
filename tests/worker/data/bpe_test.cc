// BpeTokenizer on small hand-written tokenizer.json files: merge priority,
// ignore_merges, added tokens and their flags, the errors a bad or unsupported
// file gets, Decode, and the streamed token file with its cache name.
// bpe_reference_test.cc checks the ids against the `tokenizers` library.
#include "worker/data/bpe.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "worker/data/source.h"

namespace orrery::data {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// GPT-2's byte alphabet (printable bytes as themselves, the rest from U+0100),
// to write vocabularies the way tokenizer.json does.
std::string ByteChar(unsigned char b) {
  const auto printable = [](int c) {
    return (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF);
  };
  int next = 256;
  int cp = b;
  for (int c = 0; c < 256; ++c) {
    if (printable(c)) continue;
    if (c == b) cp = next;
    ++next;
  }
  std::string out;
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return out;
}

std::string Alphabet(std::string_view bytes) {
  std::string out;
  for (const char c : bytes) out += ByteChar(static_cast<unsigned char>(c));
  return out;
}

// A GPT-2-style tokenizer.json: every byte (ids 0-255), then `extra` tokens
// (written as bytes; ids from 256) and `merges` (pairs of byte strings).
json MakeTokenizer(const std::vector<std::string>& extra,
                   const std::vector<std::pair<std::string, std::string>>& merges) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[ByteChar(static_cast<unsigned char>(b))] = b;
  int id = 256;
  for (const std::string& t : extra) vocab[Alphabet(t)] = id++;
  json merge_list = json::array();
  for (const auto& [a, b] : merges) merge_list.push_back(Alphabet(a) + " " + Alphabet(b));
  return {
      {"version", "1.0"},
      {"added_tokens", json::array()},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "ByteLevel"},
        {"add_prefix_space", false},
        {"trim_offsets", true},
        {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", false},
        {"vocab", vocab},
        {"merges", merge_list}}},
  };
}

json AddedToken(int id, const std::string& content, bool special = true) {
  return {{"id", id},        {"content", content},     {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", !special}, {"special", special}};
}

class BpeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* base = std::getenv("TMPDIR");
    dir_ = fs::path(base != nullptr && *base != '\0' ? base : "/tmp") /
           ("orrery-bpe-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& text) {
    const fs::path p = dir_ / name;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << text;
    return p.string();
  }
  StatusOr<BpeTokenizer> LoadJson(const json& j) {
    return BpeTokenizer::Load(Write("tokenizer.json", j.dump()));
  }
  std::vector<int32_t> Ids(const BpeTokenizer& tok, std::string_view text) {
    auto ids = tok.Encode(text);
    EXPECT_TRUE(ids.ok()) << ids.status();
    return ids.ok() ? *ids : std::vector<int32_t>{};
  }

  fs::path dir_;
};

TEST_F(BpeTest, MergesApplyByRankNotByPosition) {
  // "abc": ranked (b c) first gives a|bc; ranked (a b) first gives ab|c.
  auto bc_first = LoadJson(MakeTokenizer({"ab", "bc"}, {{"b", "c"}, {"a", "b"}}));
  ASSERT_TRUE(bc_first.ok()) << bc_first.status();
  EXPECT_THAT(Ids(*bc_first, "abc"), ElementsAre('a', 257));
  auto ab_first = LoadJson(MakeTokenizer({"ab", "bc"}, {{"a", "b"}, {"b", "c"}}));
  ASSERT_TRUE(ab_first.ok()) << ab_first.status();
  EXPECT_THAT(Ids(*ab_first, "abc"), ElementsAre(256, 'c'));
}

TEST_F(BpeTest, EqualRanksMergeLeftmostFirstAndChainUp) {
  auto tok = LoadJson(MakeTokenizer({"aa", "aaaa"}, {{"a", "a"}, {"aa", "aa"}}));
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_THAT(Ids(*tok, "aaa"), ElementsAre(256, 'a'));
  EXPECT_THAT(Ids(*tok, "aaaaa"), ElementsAre(257, 'a'));
}

TEST_F(BpeTest, MergesMayBeWrittenAsPairs) {
  json j = MakeTokenizer({"ab"}, {});
  j["model"]["merges"] = json::array({json::array({"a", "b"})});
  auto tok = LoadJson(j);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_THAT(Ids(*tok, "ab"), ElementsAre(256));
}

TEST_F(BpeTest, IgnoreMergesTakesAWholeWordFromTheVocabulary) {
  // "abc" is in the vocabulary but no merge makes it: merging stops at ab|c.
  json j = MakeTokenizer({"ab", "abc"}, {{"a", "b"}});
  auto merging = LoadJson(j);
  ASSERT_TRUE(merging.ok()) << merging.status();
  EXPECT_THAT(Ids(*merging, "abc"), ElementsAre(256, 'c'));
  j["model"]["ignore_merges"] = true;
  auto whole = LoadJson(j);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_THAT(Ids(*whole, "abc abcd"), ElementsAre(257, ' ', 256, 'c', 'd'));
}

TEST_F(BpeTest, PreTokenizerKeepsMergesInsideWords) {
  // GPT-2's pattern: " b" is a piece, so the (a, space) merge never applies.
  auto tok = LoadJson(MakeTokenizer({"a ", " b"}, {{"a", " "}, {" ", "b"}}));
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_THAT(Ids(*tok, "a b"), ElementsAre('a', 257));
  EXPECT_THAT(Ids(*tok, "a  b"), ElementsAre('a', ' ', 257));
}

TEST_F(BpeTest, AddedTokensAreSplitOutLeftmostLongest) {
  json j = MakeTokenizer({}, {});
  j["added_tokens"] = {AddedToken(300, "<x>"), AddedToken(301, "<x>>"), AddedToken(302, "x>")};
  auto tok = LoadJson(j);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ(tok->VocabSize(), 302 + 1);
  EXPECT_THAT(Ids(*tok, "a<x>b"), ElementsAre('a', 300, 'b'));
  EXPECT_THAT(Ids(*tok, "<x>>"), ElementsAre(301));
  EXPECT_THAT(Ids(*tok, "<<x>"), ElementsAre('<', 300));
  EXPECT_THAT(Ids(*tok, "<x"), ElementsAre('<', 'x'));
  EXPECT_EQ(tok->TokenId("<x>>"), 301);
  auto text = tok->Decode({'a', 300, 301});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "a<x><x>>");
}

TEST_F(BpeTest, AddedTokenFlags) {
  json j = MakeTokenizer({}, {});
  json mask = AddedToken(300, "<m>");
  mask["lstrip"] = true;
  mask["rstrip"] = true;
  json word = AddedToken(301, "w", /*special=*/false);
  word["single_word"] = true;
  j["added_tokens"] = {mask, word};
  auto tok = LoadJson(j);
  ASSERT_TRUE(tok.ok()) << tok.status();
  // lstrip and rstrip take the spaces (any Unicode whitespace) around it.
  EXPECT_THAT(Ids(*tok, "a  <m>\t b"), ElementsAre('a', 300, 'b'));
  // single_word: only where no word character touches it.
  EXPECT_THAT(Ids(*tok, "w"), ElementsAre(301));
  EXPECT_THAT(Ids(*tok, "w,w"), ElementsAre(301, ',', 301));
  EXPECT_THAT(Ids(*tok, "aw"), ElementsAre('a', 'w'));
  EXPECT_THAT(Ids(*tok, "wé"), ElementsAre('w', 0xC3, 0xA9));
}

TEST_F(BpeTest, RoundTripsAnyUtf8) {
  auto tok =
      LoadJson(MakeTokenizer({"th", "the", " the"}, {{"t", "h"}, {"th", "e"}, {" ", "the"}}));
  ASSERT_TRUE(tok.ok()) << tok.status();
  for (const std::string text :
       {"", "the theme", "  x\n\n\ty ", "Größe 你好 😀👍🏽 नमस्ते",
        "it's 12345 ...!?", "\x01\x7f"}) {
    auto ids = tok->Encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status();
    auto back = tok->Decode(*ids);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, text);
  }
  EXPECT_THAT(Ids(*tok, "the the"), ElementsAre(257, 258));
}

TEST_F(BpeTest, InvalidUtf8NamesTheByteOffset) {
  auto tok = LoadJson(MakeTokenizer({}, {}));
  ASSERT_TRUE(tok.ok()) << tok.status();
  for (const auto& [text, offset] : std::vector<std::pair<std::string, int>>{{"ab\xff"
                                                                              "cd",
                                                                              2},
                                                                             {"\xc3", 0},
                                                                             {"ok \xed\xa0\x80", 3},
                                                                             {"\xc0\xaf", 0}}) {
    auto ids = tok->Encode(text);
    ASSERT_FALSE(ids.ok());
    EXPECT_EQ(ids.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(ids.status().message(), HasSubstr("byte offset " + std::to_string(offset)));
  }
}

TEST_F(BpeTest, DecodeRefusesIdsOutsideTheVocabulary) {
  json j = MakeTokenizer({}, {});
  j["added_tokens"] = {AddedToken(300, "<x>")};  // 256-299 are unused
  auto tok = LoadJson(j);
  ASSERT_TRUE(tok.ok()) << tok.status();
  for (const int32_t bad : {-1, 270, 301}) {
    auto text = tok->Decode({'a', bad});
    ASSERT_FALSE(text.ok()) << bad;
    EXPECT_EQ(text.status().code(), StatusCode::kOutOfRange);
    EXPECT_THAT(text.status().message(), HasSubstr("ids[1] = " + std::to_string(bad)));
  }
}

TEST_F(BpeTest, LoadsAModelDirectoryWithItsConfig) {
  json j = MakeTokenizer({}, {});
  j["added_tokens"] = {AddedToken(256, "<s>"), AddedToken(257, "</s>")};
  Write("model/tokenizer.json", j.dump());
  Write("model/tokenizer_config.json",
        R"({"bos_token": "<s>", "eos_token": {"content": "</s>", "special": true}})");
  auto tok = BpeTokenizer::Load((dir_ / "model").string());
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ(tok->BosId(), 256);
  EXPECT_EQ(tok->EosId(), 257);
  EXPECT_EQ(tok->JsonPath(), (dir_ / "model" / "tokenizer.json").string());
}

TEST_F(BpeTest, ErrorsNameTheFileAndTheField) {
  const auto error = [&](const json& j) {
    auto tok = LoadJson(j);
    EXPECT_FALSE(tok.ok());
    return tok.ok() ? std::string() : tok.status().message();
  };
  auto missing = BpeTokenizer::Load((dir_ / "nope").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("nope"));

  auto bad_json = BpeTokenizer::Load(Write("bad.json", "{\"model\": "));
  ASSERT_FALSE(bad_json.ok());
  EXPECT_THAT(bad_json.status().message(), HasSubstr("not valid JSON"));

  json unigram = MakeTokenizer({}, {});
  unigram["model"]["type"] = "Unigram";
  EXPECT_THAT(error(unigram), HasSubstr("model.type \"Unigram\" is not supported; supported: BPE"));

  json pattern = MakeTokenizer({}, {});
  pattern["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"Regex", "\\w+"}}}, {"behavior", "Isolated"}},
        {{"type", "ByteLevel"}, {"use_regex", false}}}}};
  EXPECT_THAT(error(pattern),
              HasSubstr("tokenizer.json: pre_tokenizer.pretokenizers[0].pattern.Regex \"\\\\w+\" "
                        "is not supported; supported: the GPT-2, Llama 3 and Qwen2 patterns"));

  json metaspace = MakeTokenizer({}, {});
  metaspace["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\xe2\x96\x81"}};
  EXPECT_THAT(error(metaspace), HasSubstr("pre_tokenizer.type \"Metaspace\" is not supported"));

  json fallback = MakeTokenizer({}, {});
  fallback["model"]["byte_fallback"] = true;
  EXPECT_THAT(error(fallback), HasSubstr("model.byte_fallback true is not supported"));

  json lowercase = MakeTokenizer({}, {});
  lowercase["normalizer"] = {{"type", "Lowercase"}};
  EXPECT_THAT(error(lowercase), HasSubstr("normalizer.type \"Lowercase\" is not supported"));

  json merge = MakeTokenizer({}, {{"a", "b"}});  // "ab" is not in the vocabulary
  EXPECT_THAT(error(merge), HasSubstr("model.merges[0] \"a b\" names a token not in model.vocab"));

  json no_regex = MakeTokenizer({}, {});
  no_regex["pre_tokenizer"]["use_regex"] = false;
  EXPECT_THAT(error(no_regex), HasSubstr("pre_tokenizer is a ByteLevel with use_regex false"));

  json wrong_type = MakeTokenizer({}, {});
  wrong_type["model"]["vocab"] = json::array();
  EXPECT_THAT(error(wrong_type), HasSubstr("model.vocab must be an object"));

  json bad_added = MakeTokenizer({}, {});
  bad_added["added_tokens"] = {{{"id", "x"}, {"content", "<x>"}}};
  EXPECT_THAT(error(bad_added), HasSubstr("added_tokens[0].id must be an id"));
}

TEST_F(BpeTest, SplitPointCutsOnlyWhereIdsCannotChange) {
  json j = MakeTokenizer({}, {});
  j["added_tokens"] = {AddedToken(300, "x\ny")};
  auto tok = LoadJson(j);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ(tok->SplitPoint("one\ntwo..."), 4u);
  EXPECT_EQ(tok->SplitPoint("one\ntwo\nthree"), 8u);
  EXPECT_EQ(tok->SplitPoint("one\ntwo\nthree", 9), 0u);
  EXPECT_EQ(tok->SplitPoint("one\ntw"), 0u);        // an added token could still follow
  EXPECT_EQ(tok->SplitPoint("one  \ntwo..."), 0u);  // GPT-2 splits "  \n" mid-text only
  EXPECT_EQ(tok->SplitPoint("one\n two..."), 0u);   // before whitespace
  EXPECT_EQ(tok->SplitPoint("ax\nyz..."), 0u);      // inside an added token
  EXPECT_EQ(tok->SplitPoint("ab cd..."), 2u);       // before a space between letters
  EXPECT_EQ(tok->SplitPoint("ab 1d..."), 0u);
}

// Text from fragments that meet at every kind of boundary the patterns and the
// added tokens care about.
std::string RandomText(std::mt19937& rng) {
  static const std::vector<std::string> kFragments = {"a",
                                                      "ab",
                                                      "b",
                                                      " ",
                                                      "  ",
                                                      "\n",
                                                      "\n\n",
                                                      "\r\n",
                                                      "\t",
                                                      "'s",
                                                      "'S",
                                                      "1",
                                                      "123",
                                                      ".",
                                                      "!?",
                                                      "\xc3\xa9",
                                                      "e\xcc\x81",
                                                      "\xe4\xbd\xa0",
                                                      "\xf0\x9f\x98\x80",
                                                      "\xc2\xa0",
                                                      "<m>",
                                                      "<x>",
                                                      "x\ny",
                                                      " \n ",
                                                      "\xe2\x80\xa8"};
  std::string text;
  const int n = std::uniform_int_distribution<int>(0, 30)(rng);
  for (int i = 0; i < n; ++i)
    text += kFragments[std::uniform_int_distribution<size_t>(0, kFragments.size() - 1)(rng)];
  return text;
}

TEST_F(BpeTest, CuttingAtSplitPointNeverChangesIds) {
  const std::vector<std::pair<std::string, std::string>> merges = {
      {" ", "\n"}, {"\n", "\n"}, {" ", " "}, {"a", "b"}, {" ", "a"}, {"\n", "a"}, {"1", "2"}};
  const std::vector<std::string> extra = {" \n", "\n\n", "  ", "ab", " a", "\na", "12"};
  json gpt2 = MakeTokenizer(extra, merges);
  json llama = gpt2;
  llama["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"},
         {"pattern",
          {{"Regex",
            R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}}},
         {"behavior", "Isolated"},
         {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  json prefixed = gpt2;
  prefixed["pre_tokenizer"]["add_prefix_space"] = true;
  json lstrip = AddedToken(300, "<m>");
  lstrip["lstrip"] = true;
  json rstrip = AddedToken(301, "<x>");
  rstrip["rstrip"] = true;
  for (json* j : {&gpt2, &llama, &prefixed}) {
    (*j)["added_tokens"] = {lstrip, rstrip, AddedToken(302, "x\ny")};
  }
  std::mt19937 rng(20240517);
  for (const json* j : {&gpt2, &llama, &prefixed}) {
    auto tok = LoadJson(*j);
    ASSERT_TRUE(tok.ok()) << tok.status();
    int cuts = 0;
    std::string corpus;
    for (int round = 0; round < 3000; ++round) {
      const std::string text = RandomText(rng);
      corpus += text;
      const size_t p = tok->SplitPoint(text);
      if (p == 0) continue;
      ++cuts;
      ASSERT_LT(p, text.size());
      std::vector<int32_t> ids;
      ASSERT_TRUE(tok->EncodeChunk(std::string_view(text).substr(0, p), {}, &ids).ok());
      ASSERT_TRUE(tok->EncodeChunk(std::string_view(text).substr(p), {true, 0}, &ids).ok());
      auto whole = tok->Encode(text);
      ASSERT_TRUE(whole.ok()) << whole.status();
      ASSERT_EQ(ids, *whole) << "cut at " << p << " of '" << text << "' ("
                             << (*j)["pre_tokenizer"].dump() << ")";
    }
    EXPECT_GT(cuts, 300);
    // And a file streamed through tiny chunks, cut wherever SplitPoint allows.
    const std::string txt = Write("random.txt", corpus);
    const std::string bin = (dir_ / "random.bin").string();
    TextEncodeOptions tiny;
    tiny.chunk_bytes = 16;
    auto n = EncodeTextFileWithTokenizer(txt, *tok, bin, 2, tiny);
    ASSERT_TRUE(n.ok()) << n.status();
    auto whole = tok->Encode(corpus);
    ASSERT_TRUE(whole.ok()) << whole.status();
    std::ifstream in(bin, std::ios::binary);
    std::vector<int32_t> streamed;
    for (int lo = in.get(), hi = in.get(); in; lo = in.get(), hi = in.get())
      streamed.push_back(lo | (hi << 8));
    size_t k = 0;
    while (k < streamed.size() && k < whole->size() && streamed[k] == (*whole)[k]) ++k;
    if (k < streamed.size() || k < whole->size()) {
      const auto before = tok->Decode(std::vector<int32_t>(whole->begin(), whole->begin() + k));
      const size_t at = before.ok() ? before->size() : 0;
      ADD_FAILURE() << "streamed ids differ from id " << k << " (byte " << at << "): '"
                    << corpus.substr(at >= 10 ? at - 10 : 0, 30) << "' "
                    << (*j)["pre_tokenizer"].dump();
    }
  }
}

TEST_F(BpeTest, ArbitraryBytesGiveIdsOrAnErrorNeverACrash) {
  json j = MakeTokenizer({"ab"}, {{"a", "b"}});
  j["added_tokens"] = {AddedToken(300, "<x>")};
  auto tok = LoadJson(j);
  ASSERT_TRUE(tok.ok()) << tok.status();
  std::mt19937 rng(7);
  for (int round = 0; round < 2000; ++round) {
    std::string bytes(std::uniform_int_distribution<size_t>(0, 40)(rng), '\0');
    for (char& c : bytes) c = static_cast<char>(std::uniform_int_distribution<int>(0, 255)(rng));
    auto ids = tok->Encode(bytes);
    if (!ids.ok()) {
      EXPECT_THAT(ids.status().message(), HasSubstr("invalid UTF-8 at byte offset"));
      continue;
    }
    auto back = tok->Decode(*ids);
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, bytes);
    (void)tok->SplitPoint(bytes);
  }
}

TEST_F(BpeTest, EncodesATextFileAtomicallyForTokenFile) {
  auto tok = LoadJson(MakeTokenizer({"th", "the"}, {{"t", "h"}, {"th", "e"}}));
  ASSERT_TRUE(tok.ok()) << tok.status();
  std::string text;
  for (int line = 0; line < 200; ++line) text += "the line " + std::to_string(line) + "\n";
  const std::string txt = Write("corpus.txt", text);
  const std::string bin = (dir_ / "corpus.bin").string();
  TextEncodeOptions small;
  small.chunk_bytes = 50;
  auto n = EncodeTextFileWithTokenizer(txt, *tok, bin, 0, small);
  ASSERT_TRUE(n.ok()) << n.status();
  auto whole = tok->Encode(text);
  ASSERT_TRUE(whole.ok());
  ASSERT_EQ(*n, static_cast<int64_t>(whole->size()));
  auto file = TokenFile::Open(bin, 2, 8, tok->VocabSize());
  ASSERT_TRUE(file.ok()) << file.status();
  std::vector<int32_t> sample(9);
  ASSERT_TRUE((*file)->Read(1, sample.data()).ok());
  EXPECT_EQ(sample, std::vector<int32_t>(whole->begin() + 8, whole->begin() + 17));

  // A failure part way leaves the old file and no temporary one.
  const std::string bad = Write("bad.txt", text + "caf\xe9\n" + text);
  auto failed = EncodeTextFileWithTokenizer(bad, *tok, bin, 2, small);
  ASSERT_FALSE(failed.ok());
  EXPECT_THAT(failed.status().message(),
              HasSubstr("byte offset " + std::to_string(text.size() + 3)));
  EXPECT_THAT(failed.status().message(), HasSubstr("bad.txt"));
  EXPECT_EQ(fs::file_size(bin), static_cast<uintmax_t>(*n) * 2);
  int files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir_)) ++files;
  EXPECT_EQ(files, 4);  // tokenizer.json, corpus.txt, corpus.bin, bad.txt

  EXPECT_EQ(EncodeTextFileWithTokenizer(txt, *tok, bin, 3).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeTextFileWithTokenizer((dir_ / "none.txt").string(), *tok, bin).status().code(),
            StatusCode::kNotFound);
}

TEST_F(BpeTest, WideVocabulariesNeedFourByteTokens) {
  json j = MakeTokenizer({}, {});
  j["added_tokens"] = {AddedToken(70000, "<big>")};
  auto tok = LoadJson(j);
  ASSERT_TRUE(tok.ok()) << tok.status();
  const std::string txt = Write("t.txt", "a<big>");
  const std::string bin = (dir_ / "t.bin").string();
  auto narrow = EncodeTextFileWithTokenizer(txt, *tok, bin, 2);
  ASSERT_FALSE(narrow.ok());
  EXPECT_THAT(narrow.status().message(), HasSubstr("fix: token_bytes 4"));
  auto n = EncodeTextFileWithTokenizer(txt, *tok, bin);  // 0 picks 4
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 2);
  EXPECT_EQ(fs::file_size(bin), 8u);
}

TEST_F(BpeTest, CachedTokenPathFollowsTheTextAndTheTokenizer) {
  const std::string json_path = Write("model/tokenizer.json", MakeTokenizer({}, {}).dump());
  const std::string txt = Write("corpus.txt", "hello");
  const std::string cache = (dir_ / "cache").string();
  const std::string a = CachedTokenPath(cache, txt, (dir_ / "model").string());
  EXPECT_EQ(a, CachedTokenPath(cache, txt, json_path));  // directory or file alike
  EXPECT_EQ(fs::path(a).parent_path(), fs::path(cache));
  EXPECT_THAT(fs::path(a).filename().string(), ::testing::StartsWith("corpus-"));
  EXPECT_NE(a, CachedTokenPath(cache, txt, json_path, 4));
  Write("corpus.txt", "hello, world");  // size (and maybe mtime) changes
  const std::string b = CachedTokenPath(cache, txt, json_path);
  EXPECT_NE(a, b);
  Write("model/tokenizer.json", MakeTokenizer({"he"}, {{"h", "e"}}).dump());
  EXPECT_NE(b, CachedTokenPath(cache, txt, json_path));
}

}  // namespace
}  // namespace orrery::data
