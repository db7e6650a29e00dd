//===- fused_kernels.cpp - a plan's fused kernels as the runtime builds them ===//
//
// The CUDA source of a plan's fused instructions, generated from plan.json's
// description of them (fused_source.h): the source the CUDA backend and
// `llm-run --compile-fused` compile. A plan directory's kernels.cu is not
// read; a directory carries nothing the runtime compiles or runs.
//
//===----------------------------------------------------------------------===//

#include "llmopt-runtime/fused_library.h"
#include "llmopt-runtime/fused_source.h"
#include "llmopt-runtime/plan.h"

namespace llmopt::runtime {

bool fusedKernelsSource(const Plan &plan, std::string &source, std::set<std::string> &names,
                        std::string &error) {
  auto operand = [](const Buffer &b) {
    fused::Operand o;
    o.type = b.dtype == DType::BF16  ? fused::Scalar::BF16
             : b.dtype == DType::F16 ? fused::Scalar::F16
                                     : fused::Scalar::F32;
    o.perColumn = b.shape.size() == 1;
    return o;
  };
  std::vector<fused::Kernel> kernels;
  names.clear();
  for (size_t pi = 0; pi < plan.programs.size(); ++pi) {
    const Program &p = plan.programs[pi];
    for (const std::vector<Instruction> *list : {&p.microBatch, &p.step})
      for (const Instruction &ins : *list) {
        if (!ins.kernel || ins.kernel->id != kernels::KernelId::Fused)
          continue;
        fused::Kernel k;
        k.name = ins.fusedName;
        for (const std::vector<Buffer> *bufs : {&ins.ins, &ins.outs})
          for (const Buffer &b : *bufs) {
            if (b.dtype != DType::F32 && b.dtype != DType::BF16 && b.dtype != DType::F16) {
              error = "fused kernel '" + ins.fusedName + "': a buffer is not f32, bf16 or f16";
              return false;
            }
            (bufs == &ins.ins ? k.ins : k.outs).push_back(operand(b));
          }
        k.temps = int64_t(ins.temps.size());
        for (const Instruction &sub : ins.body) {
          fused::Entry e;
          e.kernel = sub.kernel->name;
          e.ins = sub.insRefs;
          e.outs = sub.outsRefs;
          e.eps = sub.args.eps;
          e.tanh = sub.args.tanh;
          k.body.push_back(std::move(e));
        }
        names.insert(k.name);
        kernels.push_back(std::move(k));
      }
  }
  if (kernels.empty()) {
    source.clear();
    return true;
  }
  return fused::cudaSource(kernels, source, error);
}

} // namespace llmopt::runtime
