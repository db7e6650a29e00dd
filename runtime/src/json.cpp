//===- json.cpp - a small JSON reader for plan files ----------------------===//

#include "llmopt-runtime/json.h"

#include <cmath>
#include <cstdlib>

namespace llmopt::runtime::json {

const Value *Value::get(const std::string &key) const {
  if (kind != Kind::Object)
    return nullptr;
  auto it = object.find(key);
  return it == object.end() ? nullptr : &it->second;
}

namespace {
struct Parser {
  const std::string &s;
  size_t i = 0;
  std::string &error;
  static constexpr int kMaxDepth = 256;

  bool fail(const std::string &msg) {
    if (error.empty()) {
      size_t line = 1, col = 1;
      for (size_t k = 0; k < i && k < s.size(); ++k) {
        if (s[k] == '\n') {
          ++line;
          col = 1;
        } else {
          ++col;
        }
      }
      error = "line " + std::to_string(line) + ", column " + std::to_string(col) + ": " + msg;
    }
    return false;
  }

  void skip() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t'))
      ++i;
  }

  bool literal(const char *word) {
    size_t n = std::char_traits<char>::length(word);
    if (s.compare(i, n, word) != 0)
      return fail(std::string("expected '") + word + "'");
    i += n;
    return true;
  }

  static void utf8(std::string &out, uint32_t cp) {
    if (cp < 0x80) {
      out += char(cp);
    } else if (cp < 0x800) {
      out += char(0xC0 | (cp >> 6));
      out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += char(0xE0 | (cp >> 12));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    } else {
      out += char(0xF0 | (cp >> 18));
      out += char(0x80 | ((cp >> 12) & 0x3F));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    }
  }

  bool hex4(uint32_t &v) {
    if (i + 4 > s.size())
      return fail("truncated \\u escape");
    v = 0;
    for (int k = 0; k < 4; ++k) {
      char c = s[i++];
      v <<= 4;
      if (c >= '0' && c <= '9')
        v |= uint32_t(c - '0');
      else if (c >= 'a' && c <= 'f')
        v |= uint32_t(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        v |= uint32_t(c - 'A' + 10);
      else
        return fail("bad \\u escape");
    }
    return true;
  }

  bool string(std::string &out) {
    if (i >= s.size() || s[i] != '"')
      return fail("expected a string");
    ++i;
    while (true) {
      if (i >= s.size())
        return fail("unterminated string");
      char c = s[i++];
      if (c == '"')
        return true;
      if (static_cast<unsigned char>(c) < 0x20)
        return fail("control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i >= s.size())
        return fail("unterminated escape");
      char e = s[i++];
      switch (e) {
      case '"':
      case '\\':
      case '/':
        out += e;
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'u': {
        uint32_t cp = 0;
        if (!hex4(cp))
          return false;
        if (cp >= 0xD800 && cp < 0xDC00) {
          uint32_t lo = 0;
          if (s.compare(i, 2, "\\u") != 0)
            return fail("unpaired surrogate");
          i += 2;
          if (!hex4(lo) || lo < 0xDC00 || lo > 0xDFFF)
            return fail("unpaired surrogate");
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        utf8(out, cp);
        break;
      }
      default:
        return fail("bad escape");
      }
    }
  }

  bool number(Value &v) {
    size_t start = i;
    if (i < s.size() && s[i] == '-')
      ++i;
    while (i < s.size() && (isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.' ||
                            s[i] == 'e' || s[i] == 'E' || s[i] == '+' || s[i] == '-'))
      ++i;
    std::string text = s.substr(start, i - start);
    char *end = nullptr;
    double d = std::strtod(text.c_str(), &end);
    if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(d))
      return fail("bad number '" + text + "'");
    v.kind = Value::Kind::Number;
    v.number = d;
    if (std::trunc(d) == d && std::abs(d) < 9.007199254740992e15) {
      v.isInteger = true;
      v.integer = int64_t(d);
    }
    return true;
  }

  bool value(Value &v, int depth) {
    if (depth > kMaxDepth)
      return fail("nested deeper than 256 levels");
    skip();
    if (i >= s.size())
      return fail("unexpected end of input");
    char c = s[i];
    if (c == '{') {
      ++i;
      v.kind = Value::Kind::Object;
      skip();
      if (i < s.size() && s[i] == '}') {
        ++i;
        return true;
      }
      while (true) {
        skip();
        std::string key;
        if (!string(key))
          return false;
        skip();
        if (i >= s.size() || s[i] != ':')
          return fail("expected ':'");
        ++i;
        Value member;
        if (!value(member, depth + 1))
          return false;
        if (!v.object.emplace(key, std::move(member)).second)
          return fail("duplicate key '" + key + "'");
        skip();
        if (i < s.size() && s[i] == ',') {
          ++i;
          continue;
        }
        if (i < s.size() && s[i] == '}') {
          ++i;
          return true;
        }
        return fail("expected ',' or '}'");
      }
    }
    if (c == '[') {
      ++i;
      v.kind = Value::Kind::Array;
      skip();
      if (i < s.size() && s[i] == ']') {
        ++i;
        return true;
      }
      while (true) {
        Value element;
        if (!value(element, depth + 1))
          return false;
        v.array.push_back(std::move(element));
        skip();
        if (i < s.size() && s[i] == ',') {
          ++i;
          continue;
        }
        if (i < s.size() && s[i] == ']') {
          ++i;
          return true;
        }
        return fail("expected ',' or ']'");
      }
    }
    if (c == '"') {
      v.kind = Value::Kind::String;
      return string(v.string);
    }
    if (c == 't') {
      v.kind = Value::Kind::Bool;
      v.boolean = true;
      return literal("true");
    }
    if (c == 'f') {
      v.kind = Value::Kind::Bool;
      return literal("false");
    }
    if (c == 'n')
      return literal("null");
    return number(v);
  }
};
} // namespace

bool parse(const std::string &text, Value &out, std::string &error) {
  error.clear();
  Parser p{text, 0, error};
  out = Value();
  if (!p.value(out, 0))
    return false;
  p.skip();
  if (p.i != text.size())
    return p.fail("trailing characters after the JSON value");
  return true;
}

} // namespace llmopt::runtime::json
