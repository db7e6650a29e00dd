//===- LLMBase.td - llm dialect definition -----------------*- tablegen -*-===//
//
// The `llm` dialect: a decoder-only transformer graph in tensor semantics.
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_DIALECT_LLM_IR_LLMBASE_TD
#define LLMOPT_DIALECT_LLM_IR_LLMBASE_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/EnumAttr.td"

def LLM_Dialect : Dialect {
  let name = "llm";
  let cppNamespace = "::llmopt::llm";
  let summary = "Transformer model graphs at the granularity of parallelism";
  let description = [{
    The `llm` dialect describes a decoder-only transformer as the primitives that
    Megatron-style parallelism reasons about: embeddings, norms, linear layers,
    rotary embeddings, the attention core, activations, residual adds, mixture of
    experts, the LM head and the loss.

    Values are ranked tensors. Batch and sequence dimensions are dynamic (`?`) and
    model dimensions static, so one module serves every micro-batch size the
    planner tries. Activations are `bf16`, `f16` or `f32`; a `llm.linear` may ask
    for fp8 (`f8E4M3FN`, `f8E5M2`) GEMM inputs.

    Parameters are `llm.param` ops named as checkpoints name them
    (`model.layers.3.mlp.up_proj.weight`) and carry their initialization.
    Transformer blocks are `llm.layer` regions so that per-layer costs and
    pipeline stage boundaries are explicit.

    Entry functions are marked, not named: the model's forward (as the
    importers make it) carries `llm.forward`, the training step that
    `llm-build-training-step` builds `llm.train_step` (unit attributes; one
    of each per module); passes find them by the mark. Verified on the step,
    once per function: every `llm.adamw` updates an `llm.param` of the
    function with the gradient's type. Every discardable `llm.*` attribute
    is declared (LLMDialect.cpp: its value and where it may sit) and
    verified; an undeclared one is refused.
  }];
  let dependentDialects = ["::mlir::func::FuncDialect"];
  let useDefaultAttributePrinterParser = 1;
  let hasOperationAttrVerify = 1;
  let extraClassDeclaration = [{
    /// The unit attributes marking the entry functions.
    static constexpr ::llvm::StringLiteral kTrainStepAttrName = "llm.train_step";
    static constexpr ::llvm::StringLiteral kForwardAttrName = "llm.forward";
  }];
}

class LLM_Op<string mnemonic, list<Trait> traits = []>
    : Op<LLM_Dialect, mnemonic, traits>;

//===----------------------------------------------------------------------===//
// Types used by the ops.
//===----------------------------------------------------------------------===//

def LLM_Activation : RankedTensorOf<[BF16, F16, F32]>;
def LLM_Weight : StaticShapeTensorOf<[BF16, F16, F32]>;
def LLM_IndexTensor : RankedTensorOf<[I32, I64]>;
def LLM_ProbTensor : RankedTensorOf<[BF16, F16, F32]>;
def LLM_Scalar : 0DTensorOf<[F32]>;

//===----------------------------------------------------------------------===//
// Enums.
//===----------------------------------------------------------------------===//

def LLM_InitKind : I32EnumAttr<"InitKind", "parameter initialization", [
    I32EnumAttrCase<"zeros", 0>,
    I32EnumAttrCase<"ones", 1>,
    I32EnumAttrCase<"normal", 2>,
  ]> {
  let cppNamespace = "::llmopt::llm";
}

def LLM_GeluApprox : I32EnumAttr<"GeluApprox", "GeLU approximation", [
    I32EnumAttrCase<"none", 0>,
    I32EnumAttrCase<"tanh", 1>,
  ]> {
  let cppNamespace = "::llmopt::llm";
}

// The plan's closed sets (#llm.plan), spelt as the planner and the reports
// spell them.
def LLM_RecomputeLevel : I32EnumAttr<"RecomputeLevel", "activation recomputation", [
    I32EnumAttrCase<"none", 0>,
    I32EnumAttrCase<"selective", 1>,
    I32EnumAttrCase<"full", 2>,
    I32EnumAttrCase<"per_stage", 3, "per-stage">,
  ]> {
  let cppNamespace = "::llmopt::llm";
}

def LLM_PipelineSchedule : I32EnumAttr<"PipelineSchedule", "pipeline schedule", [
    I32EnumAttrCase<"none", 0>,
    I32EnumAttrCase<"gpipe", 1>,
    I32EnumAttrCase<"one_f_one_b", 2, "1f1b">,
    I32EnumAttrCase<"interleaved_1f1b", 3, "interleaved-1f1b">,
  ]> {
  let cppNamespace = "::llmopt::llm";
}

def LLM_Placement : I32EnumAttr<"Placement", "order of the mesh axes over ranks", [
    I32EnumAttrCase<"tp_cp_dp_pp", 0, "tp-cp-dp-pp">,
    I32EnumAttrCase<"tp_cp_pp_dp", 1, "tp-cp-pp-dp">,
  ]> {
  let cppNamespace = "::llmopt::llm";
}

// Loss scaling of a training step (`llm.loss_scale`, #llm.loss_scaling).
def LLM_LossScaling : I32EnumAttr<"LossScaling", "loss scaling", [
    I32EnumAttrCase<"none", 0>,
    I32EnumAttrCase<"dynamic", 1>,
  ]> {
  let cppNamespace = "::llmopt::llm";
  let genSpecializedAttr = 0;
}

def LLM_ExpertActivation : I32EnumAttr<"ExpertActivation",
    "activation of the expert MLPs", [
    I32EnumAttrCase<"swiglu", 0>,
    I32EnumAttrCase<"gelu", 1>,
  ]> {
  let cppNamespace = "::llmopt::llm";
}

#endif // LLMOPT_DIALECT_LLM_IR_LLMBASE_TD
