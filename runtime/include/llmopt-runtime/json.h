//===- json.h - a small JSON reader for plan files ---------------*- C++ -*-===//
//
// Enough JSON for plan.json: objects, arrays, strings (with escapes), numbers
// (kept as double, with the integer value when exact), booleans and null. A
// nesting limit keeps malicious files from exhausting the stack. Errors say
// where: "line 3, column 7: expected ':'".
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_RUNTIME_JSON_H
#define LLMOPT_RUNTIME_JSON_H

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace llmopt::runtime::json {

class Value {
public:
  enum class Kind { Null, Bool, Number, String, Array, Object };

  Kind kind = Kind::Null;
  bool boolean = false;
  double number = 0;
  bool isInteger = false;
  int64_t integer = 0;
  std::string string;
  std::vector<Value> array;
  std::map<std::string, Value> object;

  bool isObject() const { return kind == Kind::Object; }
  bool isArray() const { return kind == Kind::Array; }
  bool isString() const { return kind == Kind::String; }
  bool isNumber() const { return kind == Kind::Number; }
  bool isBool() const { return kind == Kind::Bool; }
  /// The member `key` of an object, or null.
  const Value *get(const std::string &key) const;
};

/// Parses `text`; on failure returns false and sets `error`.
bool parse(const std::string &text, Value &out, std::string &error);

} // namespace llmopt::runtime::json

#endif // LLMOPT_RUNTIME_JSON_H
