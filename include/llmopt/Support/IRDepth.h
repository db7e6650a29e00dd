//===- IRDepth.h - refuse MLIR text nested too deep to parse ------*- C++ -*-===//
//
// MLIR's parser recurses once per nested attribute or type: an input nested
// some thousands deep (`[[[[...`, `tuple<tuple<...`) overflows the stack
// before any diagnostic. Every tool that parses MLIR text from the user
// (llm-opt, llm-translate) scans it first, the way JSONDepth.h guards JSON.
// Header-only, like JSONDepth.h.
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_SUPPORT_IRDEPTH_H
#define LLMOPT_SUPPORT_IRDEPTH_H

#include "llvm/ADT/StringRef.h"

#include <cstddef>
#include <optional>
#include <string>

namespace llmopt {

/// Deepest bracket nesting accepted in MLIR text; models nest a few dozen.
inline constexpr unsigned kMaxIRDepth = 1000;

/// Offset of the first bracket (`(`, `[`, `{`, `<`) outside string literals
/// and comments that opens level `limit + 1`, if any. `->` is not a closing
/// bracket.
inline std::optional<size_t> findTooDeepNesting(llvm::StringRef text,
                                                unsigned limit = kMaxIRDepth) {
  unsigned depth = 0;
  for (size_t i = 0, e = text.size(); i < e; ++i) {
    char ch = text[i];
    if (ch == '"') {
      for (++i; i < e && text[i] != '"'; ++i)
        if (text[i] == '\\')
          ++i;
    } else if (ch == '/' && i + 1 < e && text[i + 1] == '/') {
      while (i < e && text[i] != '\n')
        ++i;
    } else if (ch == '(' || ch == '[' || ch == '{' || ch == '<') {
      if (++depth > limit)
        return i;
    } else if ((ch == ')' || ch == ']' || ch == '}' ||
                (ch == '>' && (i == 0 || text[i - 1] != '-'))) &&
               depth > 0) {
      --depth;
    }
  }
  return std::nullopt;
}

/// The message for MLIR text nested too deep (without the file's name), or
/// empty.
inline std::string irDepthError(llvm::StringRef text) {
  if (std::optional<size_t> at = findTooDeepNesting(text))
    return "nested deeper than " + std::to_string(kMaxIRDepth) + " levels (at byte " +
           std::to_string(*at) + "): no model needs that, and the parser would overflow its stack";
  return std::string();
}

} // namespace llmopt

#endif // LLMOPT_SUPPORT_IRDEPTH_H
