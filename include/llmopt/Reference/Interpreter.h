//===- Interpreter.h - run llm IR on the CPU reference kernels --*- C++ -*-===//
//
// Executes an llm function op by op with the fp32 CPU kernels of kernels/:
// the single-device oracle that distributed plans are compared against, and
// how tests check that generated backward code computes true gradients.
// Parameters and their AdamW state live in the interpreter, by name.
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_REFERENCE_INTERPRETER_H
#define LLMOPT_REFERENCE_INTERPRETER_H

#include "mlir/Support/LLVM.h"
#include "llvm/ADT/StringMap.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mlir::func {
class FuncOp;
}

namespace llmopt::reference {

/// A dense row-major tensor: floats, or int32 ids (tokens, labels).
struct Tensor {
  std::vector<int64_t> shape;
  std::vector<float> data;
  std::vector<int32_t> ids;
  bool isIds = false;

  int64_t numElements() const;
  static Tensor floats(std::vector<int64_t> shape, std::vector<float> data);
  static Tensor idsOf(std::vector<int64_t> shape, std::vector<int32_t> ids);
};

struct ParamState {
  std::vector<int64_t> shape;
  std::vector<float> value, m, v;
};

class Interpreter {
public:
  /// Creates every llm.param of `func` from its init (normal draws from a
  /// generator seeded with `seed` and the parameter's name, so the values do
  /// not depend on declaration order).
  void initParams(mlir::func::FuncOp func, uint64_t seed);

  /// Runs `func` on `args`. Fails (with `error` set) on an op it does not
  /// know or on bad input (a token outside the vocabulary).
  mlir::FailureOr<std::vector<Tensor>> run(mlir::func::FuncOp func, llvm::ArrayRef<Tensor> args);

  llvm::StringMap<ParamState> params;
  /// The gradient each llm.adamw received in the last run, by parameter.
  llvm::StringMap<std::vector<float>> lastGrads;
  /// AdamW steps taken (bias correction).
  int64_t step = 0;
  std::string error;
};

} // namespace llmopt::reference

#endif // LLMOPT_REFERENCE_INTERPRETER_H
