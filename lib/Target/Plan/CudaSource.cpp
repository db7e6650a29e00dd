//===- CudaSource.cpp - CUDA source of a plan's fused kernels -------------===//
//
// The exec.fused ops as the generator's description (llmopt-runtime/
// fused_source.h), which writes the source: the runtime generates the same
// text from plan.json's fused instructions and compiles that, so kernels.cu
// is what runs, written out for reading.
//
//===----------------------------------------------------------------------===//

#include "CudaSource.h"

#include "llmopt-runtime/fused_source.h"

using namespace mlir;
using namespace llmopt;

namespace {

fused::Scalar scalar(Type t) {
  if (t.isBF16())
    return fused::Scalar::BF16;
  if (t.isF16())
    return fused::Scalar::F16;
  return fused::Scalar::F32;
}

fused::Kernel describe(exec::FusedOp f) {
  fused::Kernel k;
  k.name = f.getName().str();
  auto operand = [](Attribute a) {
    auto b = cast<exec::BufAttr>(a);
    return fused::Operand{scalar(b.getDtype()), b.getShape().size() == 1};
  };
  for (Attribute a : f.getIns())
    k.ins.push_back(operand(a));
  for (Attribute a : f.getOuts())
    k.outs.push_back(operand(a));
  k.temps = int64_t(f.getTemps().size());
  for (Attribute e : f.getBody()) {
    auto d = cast<DictionaryAttr>(e);
    fused::Entry entry;
    entry.kernel = d.getAs<StringAttr>("kernel").getValue().str();
    llvm::append_range(entry.ins, d.getAs<DenseI64ArrayAttr>("ins").asArrayRef());
    llvm::append_range(entry.outs, d.getAs<DenseI64ArrayAttr>("outs").asArrayRef());
    auto params = d.getAs<DictionaryAttr>("params");
    if (auto a = params.getAs<FloatAttr>("eps"))
      entry.eps = a.getValueAsDouble();
    if (auto a = params.getAs<BoolAttr>("tanh"))
      entry.tanh = a.getValue();
    k.body.push_back(std::move(entry));
  }
  return k;
}

} // namespace

LogicalResult llmopt::fusedKernelsCudaSource(ArrayRef<exec::FusedOp> fusedOps,
                                             std::string &source) {
  std::vector<fused::Kernel> kernels;
  for (exec::FusedOp f : fusedOps)
    kernels.push_back(describe(f));
  std::string error;
  if (!fused::cudaSource(kernels, source, error)) {
    if (fusedOps.empty())
      return failure();
    return fusedOps.front()->emitError() << "cannot generate the fused kernels: " << error;
  }
  return success();
}
