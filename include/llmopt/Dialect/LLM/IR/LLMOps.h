//===- LLMOps.h - llm dialect operations ------------------------*- C++ -*-===//

#ifndef LLMOPT_DIALECT_LLM_IR_LLMOPS_H
#define LLMOPT_DIALECT_LLM_IR_LLMOPS_H

#include "llmopt/Dialect/LLM/IR/LLMDialect.h"
#include "llmopt/Dialect/LLM/IR/LLMInterfaces.h"

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "llmopt/Dialect/LLM/IR/LLMEnums.h.inc"

namespace llmopt::llm {
/// A plan enum written as a quoted string (LLM_QuotedEnumParameter): its
/// value, or an error naming the field and the `valid` spellings.
template <typename E>
mlir::FailureOr<E> parseQuotedEnum(mlir::AsmParser &parser,
                                   std::optional<E> (*symbolize)(llvm::StringRef),
                                   llvm::StringRef field, llvm::StringRef valid) {
  llvm::SMLoc loc = parser.getCurrentLocation();
  std::string text;
  if (mlir::failed(parser.parseString(&text)))
    return mlir::failure();
  if (std::optional<E> e = symbolize(text))
    return *e;
  parser.emitError(loc) << "plan: " << field << " must be " << valid << ", got '" << text << "'";
  return mlir::failure();
}
} // namespace llmopt::llm

#define GET_ATTRDEF_CLASSES
#include "llmopt/Dialect/LLM/IR/LLMAttrs.h.inc"

#define GET_OP_CLASSES
#include "llmopt/Dialect/LLM/IR/LLMOps.h.inc"

namespace llmopt::llm {
/// The module's device mesh (`llm.grid @mesh`) and its axes: the reference
/// `@mesh::@<name>` to axis `name` of `size` ranks, declared (grid and axis)
/// where missing; an error at `module` if the grid has the axis with another
/// size.
mlir::FailureOr<mlir::SymbolRefAttr> gridAxis(mlir::ModuleOp module, llvm::StringRef name,
                                              int64_t size);
/// The axis an axis reference names (`tp` of `@mesh::@tp`).
inline llvm::StringRef axisName(mlir::SymbolRefAttr axis) {
  return axis.getLeafReference().getValue();
}
/// Checks that `axis` names an axis of the module's grid (the parallel ops'
/// SymbolUserOpInterface).
mlir::LogicalResult verifyGridAxis(mlir::Operation *op, mlir::SymbolRefAttr axis,
                                   mlir::SymbolTableCollection &symbols);

/// Sequence parallelism marks a chunk of the sequence by the tensor type's
/// encoding `{seq_parts = t}`; 1 for a whole tensor.
int64_t seqParts(mlir::Type t);
/// `t` with the encoding for `parts` chunks (none for 1).
mlir::RankedTensorType withSeqParts(mlir::Type t, int64_t parts);
/// Expert parallelism marks the expert rows a rank holds after the
/// all-to-all, [E/t, t C, h], by the encoding `{ep_parts = t}`; 1 otherwise.
int64_t expertParts(mlir::Type t);
mlir::RankedTensorType withExpertParts(mlir::Type t, int64_t parts);
/// Context parallelism marks a whole sequence gathered from `t` ranks' local
/// chunks by the encoding `{cp_parts = t}`; 1 otherwise.
int64_t cpParts(mlir::Type t);
mlir::RankedTensorType withCpParts(mlir::Type t, int64_t parts);
/// Whether a linear's (or LM head's) backward adds its weight and bias
/// gradients straight into their fp32 accumulators (convert-llm-to-exec's
/// `accumulate`; llm-plan-memory then gives them no buffer): each is read
/// only by the step (AdamW, the global norm), the GEMM is not fp8, and
/// ZeRO-2/3 (`zeroStage` with dp > 1) does not reduce-scatter gradients per
/// micro-batch.
bool accumulatesWeightGradients(mlir::Operation *op, int64_t zeroStage);
/// The cross-entropy ops' `vocab_size` (a padded vocabulary): positive and
/// only with `vocab_axis`.
/// The module's function marked `marker` (LLMDialect::kForwardAttrName or
/// kTrainStepAttrName; the verifier keeps it unique), or null.
mlir::FunctionOpInterface findEntryFunction(mlir::ModuleOp module, llvm::StringRef marker);
/// The same as a func.func; otherwise an error that starts with `pass` and,
/// where none is marked, ends with `hint` (what makes the function).
mlir::FailureOr<mlir::func::FuncOp> entryFunction(mlir::ModuleOp module, llvm::StringRef marker,
                                                  llvm::StringRef pass, llvm::StringRef hint);
/// The function a partition pass (`pass`) rewrites: the one marked
/// llm.forward, or null after an error naming the pass and how to make one.
mlir::FunctionOpInterface forwardToPartition(mlir::ModuleOp module, llvm::StringRef pass);
mlir::LogicalResult verifyVocabSize(mlir::Operation *op, mlir::SymbolRefAttr axis,
                                    mlir::IntegerAttr vocabSize);
} // namespace llmopt::llm

#endif // LLMOPT_DIALECT_LLM_IR_LLMOPS_H
