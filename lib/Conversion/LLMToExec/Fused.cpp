//===- Fused.cpp - llm.fused regions ------------------------------------===//

#include "Lowering.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/xxhash.h"

using namespace mlir;
using namespace llmopt;
using namespace llmopt::llm;
using namespace llmopt::exec;
using namespace llmopt::lowering;

/// A GEMM with a GeLU epilogue (a linear and the GeLU of its result, both
/// yielded): one linear_fwd writing the pre-activation and the activation.
static bool lowerGemmEpilogue(llm::FusedOp f, ArrayAttr ins, ArrayAttr outs, Lowering &l) {
  Block &block = f.getBody().front();
  if (llvm::range_size(block.without_terminator()) != 2 || f.getNumResults() != 2)
    return false;
  auto lin = dyn_cast<LinearOp>(&block.front());
  auto gelu = dyn_cast<GeluOp>(block.front().getNextNode());
  auto yield = cast<FusedYieldOp>(block.getTerminator());
  if (!lin || !gelu || yield.getValues()[0] != lin.getResult() ||
      yield.getValues()[1] != gelu.getResult())
    return false;
  SmallVector<Attribute> gemmIns;
  for (Value v : lin->getOperands())
    gemmIns.push_back(ins[cast<BlockArgument>(v).getArgNumber()]);
  l.kernelOn(f.getLoc(), "linear_fwd", gemmIns, outs.getValue(),
             {l.flag("transposed", lin.getTransposed()), l.text("epilogue", "gelu_tanh")});
  return true;
}

/// One exec.fused: the body's kernels over numbered buffers (inputs, outputs,
/// then f32 temporaries), named by a hash of what the generated kernel
/// depends on (kernels, their wiring and parameters, dtypes).
static LogicalResult lowerFused(llm::FusedOp f, Lowering &l) {
  FailureOr<ArrayAttr> ins = l.buffers.lookup(f.getInputs()),
                       outs = l.buffers.lookup(f.getResults());
  if (failed(ins) || failed(outs))
    return failure();
  if (lowerGemmEpilogue(f, *ins, *outs, l))
    return success();
  Block &block = f.getBody().front();
  l.refs.clear();
  for (BlockArgument a : block.getArguments())
    l.refs[a] = a.getArgNumber();
  int64_t next = int64_t(block.getNumArguments());
  for (Value v : block.getTerminator()->getOperands())
    if (!l.refs.count(v))
      l.refs[v] = next++;
    else
      return f.emitOpError() << "convert-llm-to-exec: a fused region yields one value twice "
                                "or yields an input";
  SmallVector<Attribute> temps, body;
  for (Operation &op : block.without_terminator())
    for (Value r : op.getResults())
      if (!l.refs.count(r)) {
        l.refs[r] = next++;
        temps.push_back(l.b.getDenseI64ArrayAttr(cast<RankedTensorType>(r.getType()).getShape()));
      }
  l.captured = &body;
  for (Operation &op : block.without_terminator())
    if (failed(l.lower(&op))) {
      l.captured = nullptr;
      return failure();
    }
  l.captured = nullptr;
  std::string signature;
  llvm::raw_string_ostream os(signature);
  os << l.b.getArrayAttr(body);
  for (ArrayAttr list : {*ins, *outs})
    for (Attribute a : list) {
      auto buf = cast<BufAttr>(a);
      os << buf.getDtype() << (buf.getShape().size() == 1 ? "v" : "a") << ";";
    }
  os << temps.size();
  std::string name = "fused_" + llvm::utohexstr(llvm::xxh3_64bits(signature), true);
  exec::FusedOp::create(l.ob, f.getLoc(), l.b.getStringAttr(name), *ins, *outs,
                        l.b.getArrayAttr(temps), l.b.getArrayAttr(body));
  return success();
}

void llmopt::lowering::populateFusedLowerings(LoweringPatternSet &set) {
  set.add<llm::FusedOp>(lowerFused);
}
