//===- JSONMerge.h - layering JSON objects (cost model internal) -*- C++ -*-===//
//
// A cluster file over its preset, a stack variant over its profile.
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_LIB_COSTMODEL_JSONMERGE_H
#define LLMOPT_LIB_COSTMODEL_JSONMERGE_H

#include "llvm/Support/JSON.h"

namespace llmopt::cost {

/// Merges `src` into `dst` recursively (objects merge, anything else replaces).
void mergeJSON(llvm::json::Object &dst, const llvm::json::Object &src);

} // namespace llmopt::cost

#endif // LLMOPT_LIB_COSTMODEL_JSONMERGE_H
