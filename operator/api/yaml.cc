// YAML <-> JSON adapter over yaml-cpp; see yaml.h.
#include "operator/api/yaml.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include <yaml-cpp/anchor.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

namespace orrery::api {
namespace {

bool OneOf(std::string_view s, std::initializer_list<std::string_view> options) {
  for (auto o : options)
    if (s == o) return true;
  return false;
}

bool AllDigits(std::string_view s, int base) {
  if (s.empty()) return false;
  for (char c : s) {
    bool ok = (c >= '0' && c <= '9' && c - '0' < base) ||
              (base == 16 && ((c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')));
    if (!ok) return false;
  }
  return true;
}

// [-+]? ( \. [0-9]+ | [0-9]+ ( \. [0-9]* )? ) ( [eE] [-+]? [0-9]+ )?
bool LooksLikeFloat(std::string_view s) {
  size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  size_t int_digits = 0, frac_digits = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i, ++int_digits;
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i, ++frac_digits;
  }
  if (int_digits == 0 && frac_digits == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    size_t exp_digits = 0;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i, ++exp_digits;
    if (exp_digits == 0) return false;
  }
  return i == s.size();
}

// JSON text must be UTF-8 (nlohmann refuses to write anything else), so bytes
// that are not are refused here, where the position is still known.
bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    size_t extra = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      extra = 1, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      extra = 2, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      extra = 3, cp = c & 0x07;
    } else {
      return false;
    }
    if (i + extra >= s.size()) return false;
    for (size_t k = 1; k <= extra; ++k) {
      auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF.
    if ((extra == 1 && cp < 0x80) || (extra == 2 && cp < 0x800) || (extra == 3 && cp < 0x10000) ||
        (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) {
      return false;
    }
    i += extra + 1;
  }
  return true;
}

// YAML streams may only hold printable characters (YAML 1.2, section 5.1): tab,
// line breaks, and the printable ranges of Unicode. Strings with anything else are
// written escaped, and such input is refused.
// Whether `pred` holds for every code point of `s` (UTF-8, read leniently: the
// decoder has already checked it, and a truncated tail reads as what it has).
template <typename Pred>
bool AllCodePoints(std::string_view s, Pred pred) {
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    uint32_t cp = c;
    size_t len = 1;
    if (c >= 0xF0) {
      len = 4, cp = c & 0x07;
    } else if (c >= 0xE0) {
      len = 3, cp = c & 0x0F;
    } else if (c >= 0xC0) {
      len = 2, cp = c & 0x1F;
    }
    for (size_t k = 1; k < len && i + k < s.size(); ++k)
      cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    i += len;
    if (!pred(cp)) return false;
  }
  return true;
}

bool PrintableImpl(std::string_view s) {
  return AllCodePoints(s, [](uint32_t cp) {
    return cp == 0x09 || cp == 0x0A || cp == 0x0D || (cp >= 0x20 && cp <= 0x7E) || cp == 0x85 ||
           (cp >= 0xA0 && cp <= 0xD7FF) || (cp >= 0xE000 && cp <= 0xFFFD) ||
           (cp >= 0x10000 && cp <= 0x10FFFF);
  });
}

enum class PlainKind { kString, kNull, kBool, kInt, kFloat, kNonFinite };

struct Resolved {
  PlainKind kind = PlainKind::kString;
  bool bool_value = false;
  int64_t int_value = 0;
  double float_value = 0;
};

// Resolves an untagged plain scalar as kubectl's YAML reader does.
Resolved ResolvePlain(std::string_view s) {
  Resolved r;
  if (OneOf(s, {"", "~", "null", "Null", "NULL"})) {
    r.kind = PlainKind::kNull;
    return r;
  }
  if (OneOf(s, {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON", "y", "Y"})) {
    r.kind = PlainKind::kBool;
    r.bool_value = true;
    return r;
  }
  if (OneOf(s, {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF", "n", "N"})) {
    r.kind = PlainKind::kBool;
    return r;
  }
  if (OneOf(s, {".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf", "-.INF",
                ".nan", ".NaN", ".NAN"})) {
    r.kind = PlainKind::kNonFinite;
    return r;
  }
  std::string_view body = s;
  bool negative = false;
  if (!body.empty() && (body[0] == '+' || body[0] == '-')) {
    negative = body[0] == '-';
    body.remove_prefix(1);
  }
  int base = 10;
  std::string_view digits = body;
  if (body.size() > 2 && body[0] == '0' && (body[1] == 'x' || body[1] == 'X')) {
    base = 16;
    digits = body.substr(2);
  } else if (body.size() > 2 && body[0] == '0' && (body[1] == 'o' || body[1] == 'O')) {
    base = 8;
    digits = body.substr(2);
  }
  if (AllDigits(digits, base)) {
    uint64_t magnitude = 0;
    auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), magnitude, base);
    if (ec == std::errc() && ptr == digits.data() + digits.size() &&
        magnitude <= static_cast<uint64_t>(INT64_MAX) + (negative ? 1 : 0)) {
      r.kind = PlainKind::kInt;
      r.int_value =
          negative ? static_cast<int64_t>(0 - magnitude) : static_cast<int64_t>(magnitude);
      return r;
    }
    if (base != 10) return r;  // a hex/octal too large for int64: keep the text
    // Decimal integers beyond int64 fall through to a float, as kubectl's reader does.
  }
  if (LooksLikeFloat(s)) {
    std::string_view f = s[0] == '+' ? s.substr(1) : s;
    double value = 0;
    auto [ptr, ec] = std::from_chars(f.data(), f.data() + f.size(), value);
    if (ec == std::errc() && ptr == f.data() + f.size() && std::isfinite(value)) {
      r.kind = PlainKind::kFloat;
      r.float_value = value;
      return r;
    }
    if (ec == std::errc::result_out_of_range) {
      r.kind = PlainKind::kNonFinite;
      return r;
    }
  }
  return r;
}

std::string MarkText(const YAML::Mark& mark) {
  if (mark.is_null()) return "";
  return "line " + std::to_string(mark.line + 1) + ", column " + std::to_string(mark.column + 1);
}

// Thrown inside the event handler to stop the parse; caught in YamlToJsonDocuments.
struct BuildError {
  std::string message;
};

// Builds JSON straight from yaml-cpp's parse events. Going through events rather
// than YAML::LoadAll lets us (a) stop yaml-cpp 0.7's LoadAll loop, which never
// ends on input such as "{a}," (a stray token makes every further "document" an
// empty one at the same place; fixed upstream in jbeder/yaml-cpp#1319, not in
// Debian's 0.7.0), and (b) charge each alias its expanded size as it is used,
// so alias bombs stop early instead of exhausting memory.
class JsonBuilder : public YAML::EventHandler {
 public:
  explicit JsonBuilder(const YamlLimits& limits) : limits_(limits) {}

  void OnDocumentStart(const YAML::Mark& mark) override {
    doc_mark_ = mark;
    stack_.clear();
    anchors_.clear();
    root_ = Json();
    root_nodes_ = 0;
  }
  void OnDocumentEnd() override {}

  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    Add(mark, Json(nullptr), 1, anchor);
  }

  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    auto it = anchors_.find(anchor);
    if (it == anchors_.end()) Fail(mark, "unknown alias");
    Add(mark, it->second.first, it->second.second, 0);
  }

  void OnScalar(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                const std::string& value) override {
    if (!IsValidUtf8(value)) Fail(mark, "the value at " + Here() + " is not valid UTF-8");
    // A map key is always kept as text.
    if (ExpectingKey()) {
      Add(mark, Json(value), 1, anchor);
      return;
    }
    Add(mark, Resolve(mark, tag, value), 1, anchor);
  }

  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    Open(mark, Json::array(), anchor);
  }
  void OnSequenceEnd() override { Close(); }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    Open(mark, Json::object(), anchor);
  }
  void OnMapEnd() override { Close(); }

  const YAML::Mark& doc_mark() const { return doc_mark_; }
  Json TakeRoot() { return std::move(root_); }
  bool root_is_bare_null() const { return root_.is_null() && root_nodes_ <= 1; }

 private:
  struct Frame {
    Json value;
    std::string path;
    YAML::anchor_t anchor = 0;
    size_t nodes = 1;  // nodes inside, for alias accounting
    bool has_key = false;
    std::string key;
    YAML::Mark key_mark;
    YAML::Mark mark;  // where the collection starts
  };

  [[noreturn]] static void Fail(const YAML::Mark& mark, const std::string& message) {
    std::string where = MarkText(mark);
    throw BuildError{(where.empty() ? "" : where + ": ") + message};
  }

  bool ExpectingKey() const {
    return !stack_.empty() && stack_.back().value.is_object() && !stack_.back().has_key;
  }

  std::string Here() const {
    if (stack_.empty()) return "<root>";
    const Frame& f = stack_.back();
    if (f.value.is_object())
      return f.has_key ? ChildOf(f.path, f.key) : (f.path.empty() ? "<root>" : f.path);
    return f.path + "[" + std::to_string(f.value.size()) + "]";
  }
  static std::string ChildOf(const std::string& parent, const std::string& key) {
    return parent.empty() ? key : parent + "." + key;
  }

  void Charge(const YAML::Mark& mark, size_t nodes) {
    total_nodes_ += nodes;
    if (total_nodes_ > limits_.max_nodes) {
      Fail(mark, "YAML document too large: more than " + std::to_string(limits_.max_nodes) +
                     " nodes after expanding aliases");
    }
  }

  Json Resolve(const YAML::Mark& mark, const std::string& tag, const std::string& text) {
    // "!" marks a quoted scalar; explicit tags are taken as strings.
    if (tag != "?") return Json(text);
    Resolved r = ResolvePlain(text);
    switch (r.kind) {
      case PlainKind::kString: return Json(text);
      case PlainKind::kNull: return Json(nullptr);
      case PlainKind::kBool: return Json(r.bool_value);
      case PlainKind::kInt: return Json(r.int_value);
      case PlainKind::kFloat: return Json(r.float_value);
      case PlainKind::kNonFinite: break;
    }
    Fail(mark, "\"" + text + "\" at " + Here() +
                   " is not a finite number; JSON cannot carry it (quote it to make a string)");
  }

  // Places a finished node (scalar, alias copy, or closed collection).
  void Add(const YAML::Mark& mark, Json value, size_t nodes, YAML::anchor_t anchor) {
    Charge(mark, nodes);
    if (anchor) anchors_[anchor] = {value, nodes};
    if (stack_.empty()) {
      root_ = std::move(value);
      root_nodes_ = nodes;
      return;
    }
    Frame& f = stack_.back();
    f.nodes += nodes;
    if (f.value.is_array()) {
      f.value.push_back(std::move(value));
      return;
    }
    if (!f.has_key) {
      if (!value.is_string())
        Fail(mark, "a mapping key must be a scalar at " + (f.path.empty() ? "<root>" : f.path));
      std::string key = value.get<std::string>();
      if (!IsValidUtf8(key)) Fail(mark, "a field name is not valid UTF-8");
      if (f.value.contains(key)) Fail(mark, "duplicate field \"" + ChildOf(f.path, key) + "\"");
      f.key = std::move(key);
      f.key_mark = mark;
      f.has_key = true;
      return;
    }
    f.value[f.key] = std::move(value);
    f.has_key = false;
  }

  void Open(const YAML::Mark& mark, Json value, YAML::anchor_t anchor) {
    if (ExpectingKey()) {
      Fail(mark, "a mapping key must be a scalar at " +
                     (stack_.back().path.empty() ? "<root>" : stack_.back().path));
    }
    if (static_cast<int>(stack_.size()) >= limits_.max_depth) {
      Fail(mark,
           "nested deeper than " + std::to_string(limits_.max_depth) + " levels at " + Here());
    }
    std::string path = stack_.empty() ? "" : Here();
    if (path == "<root>") path = "";
    stack_.push_back(Frame{std::move(value), std::move(path), anchor, 1, false, "", {}, mark});
  }

  void Close() {
    if (stack_.empty()) throw BuildError{"the end of the stream: unbalanced collections"};
    Frame f = std::move(stack_.back());
    stack_.pop_back();
    // The collection's own node was charged by its children; count it once here.
    Add(f.mark, std::move(f.value), f.nodes, f.anchor);
  }

  YamlLimits limits_;
  std::vector<Frame> stack_;
  std::map<YAML::anchor_t, std::pair<Json, size_t>> anchors_;
  Json root_;
  size_t root_nodes_ = 0;
  size_t total_nodes_ = 0;
  YAML::Mark doc_mark_;
};

std::string FormatDouble(double v) {
  // The shortest text that reads back as the same double.
  char buf[64];
  auto [ptr, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  if (ec != std::errc()) return "0";
  std::string s(buf, ptr);
  // Keep it a float when read back, so a YAML round-trip keeps the JSON type.
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

void Emit(YAML::Emitter& e, const Json& j) {
  switch (j.type()) {
    case Json::value_t::null: e << YAML::Null; break;
    case Json::value_t::boolean: e << j.get<bool>(); break;
    case Json::value_t::number_integer: e << j.get<int64_t>(); break;
    case Json::value_t::number_unsigned: e << j.get<uint64_t>(); break;
    case Json::value_t::number_float: e << FormatDouble(j.get<double>()); break;
    case Json::value_t::string: {
      const std::string& s = j.get_ref<const std::string&>();
      // A carriage return is printable in YAML but a plain or single-quoted scalar
      // would not keep it (the fuzzer found "..2000\r" coming back without it).
      if (!PrintableImpl(s) || s.find('\r') != std::string::npos) {
        e << YAML::EscapeNonAscii << YAML::DoubleQuoted << s << YAML::EmitNonAscii;
      } else if (ResolvePlain(s).kind != PlainKind::kString || s.empty()) {
        e << YAML::DoubleQuoted << s;
      } else {
        e << s;
      }
      break;
    }
    case Json::value_t::array:
      e << YAML::BeginSeq;
      for (const auto& item : j) Emit(e, item);
      e << YAML::EndSeq;
      break;
    case Json::value_t::object:
      e << YAML::BeginMap;
      for (const auto& [key, value] : j.items()) {
        // YAML allows an implicit ("key: value") key of at most 1024 characters
        // (YAML 1.2, section 7.4.2, after escaping); longer keys must be written
        // as explicit "? key" entries, which yaml-cpp does only when asked. An
        // escape takes at most 4 characters per byte, so 200 bytes is safe (the
        // fuzzer found a 1,100-character key that did not read back).
        if (key.size() > 200) e << YAML::LongKey;
        e << YAML::Key;
        if (!PrintableImpl(key) || key.find('\r') != std::string::npos) {
          e << YAML::EscapeNonAscii << YAML::DoubleQuoted << key << YAML::EmitNonAscii;
        } else if (ResolvePlain(key).kind != PlainKind::kString || key.empty()) {
          e << YAML::DoubleQuoted << key;
        } else {
          e << key;
        }
        e << YAML::Value;
        Emit(e, value);
      }
      e << YAML::EndMap;
      break;
    case Json::value_t::binary:
    case Json::value_t::discarded: e << YAML::Null; break;
  }
}

}  // namespace

bool IsYamlPrintable(std::string_view s) { return PrintableImpl(s); }

bool YamlEmitterPreserves(std::string_view s) {
  // Only strings JsonToYaml writes escaped (see Emit) are at risk.
  if (PrintableImpl(s) && s.find('\r') == std::string_view::npos) return true;
  // The 66 noncharacters (Unicode 15, section 23.7).
  return AllCodePoints(
      s, [](uint32_t cp) { return !((cp >= 0xFDD0 && cp <= 0xFDEF) || (cp & 0xFFFE) == 0xFFFE); });
}

StatusOr<std::vector<Json>> YamlToJsonDocuments(std::string_view text, const YamlLimits& limits) {
  std::vector<Json> out;
  std::istringstream stream{std::string(text)};
  JsonBuilder builder(limits);
  std::optional<YAML::Mark> previous_empty;
  try {
    YAML::Parser parser(stream);
    for (size_t documents = 0;; ++documents) {
      if (!parser.HandleNextDocument(builder)) break;
      if (builder.root_is_bare_null()) {
        // An empty document ("---" alone) is fine once; an empty document at the
        // same place as the last one means yaml-cpp is stuck on a token.
        const YAML::Mark& m = builder.doc_mark();
        if (previous_empty && previous_empty->pos == m.pos) {
          return InvalidArgumentError("YAML syntax error at " + MarkText(m) + ": unexpected token");
        }
        previous_empty = m;
        continue;
      }
      previous_empty.reset();
      if (documents >= limits.max_documents) {
        return InvalidArgumentError("more than " + std::to_string(limits.max_documents) +
                                    " YAML documents");
      }
      out.push_back(builder.TakeRoot());
    }
  } catch (const BuildError& e) {
    return InvalidArgumentError("YAML error at " + e.message);
  } catch (const YAML::Exception& e) {
    std::string where = MarkText(e.mark);
    return InvalidArgumentError("YAML syntax error" + (where.empty() ? "" : " at " + where) + ": " +
                                e.msg);
  } catch (const std::exception& e) {
    return InvalidArgumentError(std::string("YAML error: ") + e.what());
  }
  return out;
}

StatusOr<Json> YamlToJson(std::string_view text, const YamlLimits& limits) {
  ORRERY_ASSIGN_OR_RETURN(std::vector<Json> docs, YamlToJsonDocuments(text, limits));
  if (docs.empty()) return InvalidArgumentError("the YAML holds no document");
  if (docs.size() > 1) {
    return InvalidArgumentError("the YAML holds " + std::to_string(docs.size()) +
                                " documents; expected one");
  }
  return std::move(docs[0]);
}

StatusOr<Json> ParseJson(std::string_view text) {
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const Json::parse_error& e) {
    return InvalidArgumentError("JSON syntax error at byte " + std::to_string(e.byte) + ": " +
                                e.what());
  } catch (const std::exception& e) {
    return InvalidArgumentError(std::string("JSON error: ") + e.what());
  }
}

StatusOr<Json> ParseJsonOrYaml(std::string_view text) {
  size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string_view::npos && text[first] == '{') return ParseJson(text);
  return YamlToJson(text);
}

std::string JsonToYaml(const Json& json) {
  YAML::Emitter e;
  e.SetIndent(2);
  e.SetSeqFormat(YAML::Block);
  Emit(e, json);
  return std::string(e.c_str()) + "\n";
}

}  // namespace orrery::api
