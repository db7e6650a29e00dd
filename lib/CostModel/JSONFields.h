//===- JSONFields.h - checked reads of JSON objects (cost model internal) -*- C++ -*-===//
//
// Stack profiles and cluster files: every field present, of its type and in
// its range, or one error naming the field.
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_LIB_COSTMODEL_JSONFIELDS_H
#define LLMOPT_LIB_COSTMODEL_JSONFIELDS_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace llmopt::cost {

/// Checked reads of one JSON object: every key must be known and present.
class Fields {
public:
  /// `path`: the object's place in the file ("gpu."), `where`: what
  /// prefixes every message (the file's name).
  Fields(const llvm::json::Object &o, std::string path, std::string &error, std::string where = "")
      : o(o), path(std::move(path)), where(std::move(where)), error(error) {}

  bool fail(llvm::StringRef key, const llvm::Twine &msg) {
    if (error.empty())
      error = (where + "field '" + path + key + "' " + msg).str();
    return false;
  }

  const llvm::json::Value *get(llvm::StringRef key) {
    seen.insert(key.str());
    const llvm::json::Value *v = o.get(key);
    if (!v)
      fail(key, "is missing");
    return v;
  }

  bool string(llvm::StringRef key, std::string &out) {
    const llvm::json::Value *v = get(key);
    if (!v)
      return false;
    std::optional<llvm::StringRef> s = v->getAsString();
    if (!s)
      return fail(key, "must be a string");
    out = s->str();
    return true;
  }

  bool boolean(llvm::StringRef key, bool &out) {
    const llvm::json::Value *v = get(key);
    if (!v)
      return false;
    std::optional<bool> b = v->getAsBoolean();
    if (!b)
      return fail(key, "must be true or false");
    out = *b;
    return true;
  }

  bool number(llvm::StringRef key, double &out, double lo, double hi, double scale = 1) {
    double d = 0;
    if (!finite(key, d))
      return false;
    if (d < lo || d > hi)
      return fail(key, "must be between " + text(lo) + " and " + text(hi) + ", got " + text(d));
    out = d * scale;
    return true;
  }

  /// A positive number (`allowZero`: not negative), times `scale`.
  bool positive(llvm::StringRef key, double &out, double scale = 1, bool allowZero = false) {
    double d = 0;
    if (!finite(key, d))
      return false;
    if (d < 0 || (!allowZero && d == 0))
      return fail(key, allowZero ? "must not be negative" : "must be positive");
    out = d * scale;
    return true;
  }

  /// A count of 1 to 2^20 (GPUs, nodes, NICs).
  bool count(llvm::StringRef key, int &out) {
    const llvm::json::Value *v = get(key);
    if (!v)
      return false;
    std::optional<int64_t> i = v->getAsInteger();
    if (!i)
      return fail(key, "must be an integer");
    if (*i <= 0 || *i > (1 << 20))
      return fail(key, "must be between 1 and 1048576");
    out = static_cast<int>(*i);
    return true;
  }

  bool integer(llvm::StringRef key, int &out, int lo, int hi) {
    double d = 0;
    if (!number(key, d, lo, hi))
      return false;
    if (d != std::floor(d))
      return fail(key, "must be an integer");
    out = int(d);
    return true;
  }

  bool strings(llvm::StringRef key, std::vector<std::string> &out,
               llvm::ArrayRef<llvm::StringRef> allowed) {
    const llvm::json::Value *v = get(key);
    if (!v)
      return false;
    const llvm::json::Array *a = v->getAsArray();
    if (!a)
      return fail(key, "must be a list of strings");
    out.clear();
    for (const llvm::json::Value &e : *a) {
      std::optional<llvm::StringRef> s = e.getAsString();
      if (!s || !llvm::is_contained(allowed, *s))
        return fail(key, "has '" + (s ? *s : llvm::StringRef("a non-string")) +
                             "': each entry must be one of " + llvm::join(allowed, ", "));
      out.push_back(s->str());
    }
    return true;
  }

  bool ints(llvm::StringRef key, std::vector<int> &out, int lo, int hi) {
    const llvm::json::Value *v = get(key);
    if (!v)
      return false;
    const llvm::json::Array *a = v->getAsArray();
    if (!a)
      return fail(key, "must be a list of integers");
    out.clear();
    for (const llvm::json::Value &e : *a) {
      std::optional<int64_t> i = e.getAsInteger();
      if (!i || *i < lo || *i > hi)
        return fail(key, llvm::formatv("entries must be integers {0} to {1}", lo, hi));
      out.push_back(int(*i));
    }
    return true;
  }

  template <typename E>
  bool choice(llvm::StringRef key, E &out, llvm::ArrayRef<std::pair<const char *, E>> options) {
    std::string s;
    if (!string(key, s))
      return false;
    for (const auto &[name, value] : options)
      if (s == name) {
        out = value;
        return true;
      }
    std::vector<std::string> names;
    for (const auto &kv : options)
      names.push_back(kv.first);
    return fail(key, "is '" + s + "': must be one of " + llvm::join(names, ", "));
  }

  const llvm::json::Object *object(llvm::StringRef key) {
    const llvm::json::Value *v = get(key);
    if (!v)
      return nullptr;
    if (!v->getAsObject()) {
      fail(key, "must be an object");
      return nullptr;
    }
    return v->getAsObject();
  }

  /// `key` may be present; the caller reads it.
  void allow(llvm::StringRef key) { seen.insert(key.str()); }

  /// Every key of the object was read: a misspelt field is an error.
  bool noOthers(llvm::StringRef what = "a stack profile") {
    for (const auto &kv : o)
      if (!seen.count(kv.first.str()))
        return fail(kv.first.str(), "is not a field of " + what + " (misspelt?)");
    return true;
  }

private:
  /// `d` as a person writes it: 3, 0.25, 1e+20 (formatv's default, 3.00,
  /// reads as if fractions were allowed where integers are asked for).
  static std::string text(double d) {
    std::string out;
    llvm::raw_string_ostream(out) << llvm::format("%.10g", d);
    return out;
  }

  /// The finite number at `key`.
  bool finite(llvm::StringRef key, double &out) {
    const llvm::json::Value *v = get(key);
    if (!v)
      return false;
    std::optional<double> d = v->getAsNumber();
    if (!d || !std::isfinite(*d))
      return fail(key, "must be a number");
    out = *d;
    return true;
  }

  const llvm::json::Object &o;
  std::string path, where;
  std::string &error;
  std::set<std::string> seen;
};

} // namespace llmopt::cost

#endif // LLMOPT_LIB_COSTMODEL_JSONFIELDS_H
