//===- JSONDepth.h - refuse JSON nested too deep to parse --------*- C++ -*-===//
//
// llvm::json::parse recurses once per nesting level: input nested deep
// enough (a cluster file, a stack profile or a kernel profile of 100,000
// brackets) exhausts the stack before any message. Every JSON input the tools
// read is scanned first. Header-only: the cost model links LLVM Support only.
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_SUPPORT_JSONDEPTH_H
#define LLMOPT_SUPPORT_JSONDEPTH_H

#include "llvm/ADT/StringRef.h"

#include <cstddef>
#include <optional>
#include <string>

namespace llmopt {

/// Deepest bracket nesting accepted; inputs nest a handful of levels.
inline constexpr unsigned kMaxJSONDepth = 512;

/// Offset of the first `[` or `{` outside strings that opens level
/// `limit + 1`, if any.
inline std::optional<size_t> findTooDeepBracket(llvm::StringRef text,
                                                unsigned limit = kMaxJSONDepth) {
  unsigned depth = 0;
  bool inString = false;
  for (size_t i = 0, e = text.size(); i < e; ++i) {
    char ch = text[i];
    if (inString) {
      if (ch == '\\')
        ++i; // skip the escaped character, \" included
      else if (ch == '"')
        inString = false;
      continue;
    }
    if (ch == '"') {
      inString = true;
    } else if (ch == '[' || ch == '{') {
      if (++depth > limit)
        return i;
    } else if ((ch == ']' || ch == '}') && depth > 0) {
      --depth;
    }
  }
  return std::nullopt;
}

/// An error message for `what` when `text` nests too deep, else empty.
inline std::string jsonDepthError(llvm::StringRef text, llvm::StringRef what) {
  if (std::optional<size_t> at = findTooDeepBracket(text))
    return what.str() + ": malformed JSON: nested deeper than " + std::to_string(kMaxJSONDepth) +
           " levels (at byte " + std::to_string(*at) + ")";
  return std::string();
}

} // namespace llmopt

#endif // LLMOPT_SUPPORT_JSONDEPTH_H
