//===- fused_source.h - CUDA source of a plan's fused kernels ---*- C++ -*-===//
//
// One definition of the generated fused kernels, shared by the compiler
// (llm-emit-plan writes it as the plan directory's kernels.cu, for reading)
// and the runtime (the CUDA backend and `llm-run --compile-fused` generate
// it from plan.json's description of each fused instruction and compile
// that). The source is a function of the description alone: names checked
// against `fused_[a-z0-9_]+`, body kernels from a fixed set of row-wise
// kernels, dtypes from three, buffer numbers in range and numbers finite,
// so nothing a plan directory holds is compiled as it stands. No
// dependencies: the compiler links it too, as it does LLMOptSchedule.
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_RUNTIME_FUSED_SOURCE_H
#define LLMOPT_RUNTIME_FUSED_SOURCE_H

#include <cstdint>
#include <string>
#include <vector>

namespace llmopt::fused {

/// A buffer's element type; arithmetic is fp32 whatever it is.
enum class Scalar { F32, BF16, F16 };

/// One of a fused kernel's buffers.
struct Operand {
  Scalar type = Scalar::F32;
  /// A 1-D buffer: one value per column, the same for every row (a norm's
  /// weight); otherwise row-major [rows, cols].
  bool perColumn = false;
  bool operator==(const Operand &o) const { return type == o.type && perColumn == o.perColumn; }
};

/// A body entry: a row-wise kernel (add, gelu_fwd, gelu_bwd, swiglu_fwd,
/// swiglu_bwd, rms_norm_fwd, layer_norm_fwd) over buffer numbers counting
/// the kernel's ins, then its outs, then its f32 temporaries.
struct Entry {
  std::string kernel;
  std::vector<int64_t> ins, outs;
  double eps = 0;    // the norms'
  bool tanh = false; // GeLU's tanh approximation
  bool operator==(const Entry &o) const {
    return kernel == o.kernel && ins == o.ins && outs == o.outs && eps == o.eps && tanh == o.tanh;
  }
};

/// A fused kernel as plan.json (and exec.fused) describes it.
struct Kernel {
  std::string name;
  std::vector<Operand> ins, outs;
  int64_t temps = 0;
  std::vector<Entry> body;
  bool operator==(const Kernel &o) const {
    return name == o.name && ins == o.ins && outs == o.outs && temps == o.temps && body == o.body;
  }
};

/// kernels.cu for `kernels`: the kernels' shared device math, then one
/// `__global__` kernel and one launcher
///   extern "C" cudaError_t NAME(const void *const *ins, void *const *outs,
///                               long long rows, long long cols, cudaStream_t)
/// per distinct name, in order of first appearance. False, with `error`
/// naming the kernel, for a description outside what the generator takes,
/// or two different kernels of one name.
bool cudaSource(const std::vector<Kernel> &kernels, std::string &source, std::string &error);

} // namespace llmopt::fused

#endif // LLMOPT_RUNTIME_FUSED_SOURCE_H
