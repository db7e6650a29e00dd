//===- ExecDialect.cpp - exec dialect -------------------------------------===//

#include "llmopt-kernels/abi.h"
#include "llmopt-runtime/schedule.h"
#include "llmopt/Dialect/Exec/IR/ExecOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>

using namespace mlir;
using namespace llmopt::exec;

#include "llmopt/Dialect/Exec/IR/ExecDialect.cpp.inc"
#include "llmopt/Dialect/Exec/IR/ExecEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "llmopt/Dialect/Exec/IR/ExecAttrs.cpp.inc"

#define GET_OP_CLASSES
#include "llmopt/Dialect/Exec/IR/ExecOps.cpp.inc"

void ExecDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "llmopt/Dialect/Exec/IR/ExecAttrs.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "llmopt/Dialect/Exec/IR/ExecOps.cpp.inc"
      >();
}

int64_t BufAttr::getNumElements() const {
  int64_t n = 1;
  for (int64_t d : getShape().asArrayRef())
    n *= d;
  return n;
}

int64_t BufAttr::getBytes() const {
  return getNumElements() * std::max<int64_t>(1, getDtype().getIntOrFloatBitWidth() / 8);
}

LogicalResult BufAttr::verify(function_ref<InFlightDiagnostic()> emitError, BufferSpace space,
                              int64_t offset, StringAttr name, DenseI64ArrayAttr shape,
                              Type dtype) {
  if (!name || !shape || !dtype)
    return emitError() << "buf: every field needs a value";
  if (offset < 0)
    return emitError() << "buf: offset must not be negative";
  if ((space == BufferSpace::state || space == BufferSpace::accum) != !name.getValue().empty())
    return emitError() << "buf: state and accum buffers have a name, other buffers none";
  for (int64_t d : shape.asArrayRef())
    if (d <= 0)
      return emitError() << "buf: dimensions must be positive";
  if (!dtype.isIntOrFloat())
    return emitError() << "buf: dtype must be an integer or float type";
  return success();
}

LogicalResult ProgramOp::verify() {
  llvm::DenseSet<int64_t> seen;
  for (int64_t r : getRanks())
    if (r < 0 || !seen.insert(r).second)
      return emitOpError() << "ranks must be distinct and non-negative";
  if (bool(getScheduleAttr()) != bool(getOrderAttr()))
    return emitOpError() << "schedule and order come together (a pipeline stage's program)";
  if (auto order = getOrderAttr()) {
    ArrayRef<int64_t> o = order.asArrayRef();
    llmopt::schedule::Kind kind;
    if (!llmopt::schedule::parse(getScheduleAttr().getValue().str(), kind))
      return emitOpError() << "unknown schedule '" << getScheduleAttr().getValue()
                           << "': 1f1b, gpipe, interleaved or sequential";
    if (o.size() % 3 != 0 || o.empty())
      return emitOpError() << "order is (micro-batch, chunk, backward) triples";
    llvm::DenseSet<std::tuple<int64_t, int64_t, int64_t>> seen;
    int64_t chunks = 0, micro = int64_t(getMicroBatches());
    for (size_t i = 0; i < o.size(); i += 3) {
      if (o[i] < 0 || o[i] >= micro || o[i + 1] < 0 || (o[i + 2] != 0 && o[i + 2] != 1))
        return emitOpError() << "order entry " << i / 3 << " (" << o[i] << ", " << o[i + 1] << ", "
                             << o[i + 2] << ") names no part of this program's "
                             << getMicroBatches() << " micro-batches";
      if (!seen.insert({o[i], o[i + 1], o[i + 2]}).second)
        return emitOpError() << "order names part (" << o[i] << ", " << o[i + 1] << ", " << o[i + 2]
                             << ") twice";
      chunks = std::max(chunks, o[i + 1] + 1);
    }
    if (int64_t(seen.size()) != 2 * chunks * micro)
      return emitOpError() << "order has " << seen.size() << " parts; " << getMicroBatches()
                           << " micro-batches of " << chunks << " chunk(s) have "
                           << 2 * chunks * getMicroBatches();
  }
  int64_t arena = getArena(), stash = getStash().value_or(0);
  if (getMicroBatches() < 1)
    return emitOpError() << "needs at least one micro-batch";
  auto overruns = [&](Attribute a) {
    auto b = dyn_cast<BufAttr>(a);
    if (!b)
      return false;
    BufferSpace s = b.getSpace();
    return (s == BufferSpace::arena && b.getOffset() + b.getBytes() > arena) ||
           (s == BufferSpace::stash && b.getOffset() + b.getBytes() > stash);
  };
  auto check = [&](Operation *op) -> WalkResult {
    for (NamedAttribute na : op->getAttrs()) {
      SmallVector<Attribute> bufs = {na.getValue()};
      if (auto list = dyn_cast<ArrayAttr>(na.getValue()))
        bufs.assign(list.begin(), list.end());
      for (Attribute a : bufs)
        if (overruns(a)) {
          auto b = cast<BufAttr>(a);
          return op->emitOpError()
                 << "buffer at offset " << b.getOffset() << " of " << b.getBytes()
                 << " bytes overruns the " << (b.getSpace() == BufferSpace::stash ? stash : arena)
                 << "-byte " << stringifyBufferSpace(b.getSpace());
        }
    }
    return WalkResult::advance();
  };
  for (Region *r : {&getMicroBatch(), &getStep()})
    if (r->walk(check).wasInterrupted())
      return failure();
  return success();
}

static LogicalResult verifyBufs(Operation *op, ArrayAttr list, StringRef what) {
  for (Attribute a : list)
    if (!isa<BufAttr>(a))
      return op->emitOpError() << what << " must be #exec.buf attributes";
  return success();
}

LogicalResult KernelOp::verify() {
  const llmopt::kernels::KernelInfo *k = llmopt::kernels::findKernel(getKernel().str().c_str());
  if (!k)
    return emitOpError() << "unknown kernel '" << getKernel()
                         << "': not in kernels/include/llmopt-kernels/abi.h";
  if (failed(verifyBufs(*this, getIns(), "ins")) || failed(verifyBufs(*this, getOuts(), "outs")))
    return failure();
  if (k->inputs >= 0 && int64_t(getIns().size()) != k->inputs)
    return emitOpError() << "kernel '" << getKernel() << "' takes " << k->inputs << " inputs, got "
                         << getIns().size();
  if (k->outputs >= 0 && int64_t(getOuts().size()) != k->outputs)
    return emitOpError() << "kernel '" << getKernel() << "' writes " << k->outputs
                         << " outputs, got " << getOuts().size();
  for (Attribute a : getOuts())
    if (cast<BufAttr>(a).getSpace() == BufferSpace::input)
      return emitOpError() << "must not write a step input";
  return success();
}

static LogicalResult verifyCollective(Operation *op, ArrayAttr buffers) {
  if (buffers.empty())
    return op->emitOpError() << "needs at least one buffer";
  for (Attribute a : buffers)
    if (auto b = dyn_cast<BufAttr>(a); b && b.getSpace() == BufferSpace::input)
      return op->emitOpError() << "must not write a step input";
  return verifyBufs(op, buffers, "buffers");
}

LogicalResult AllReduceOp::verify() { return verifyCollective(*this, getBuffers()); }

LogicalResult BucketAllReduceOp::verify() {
  if (getBucketAttr().getInt() < 0)
    return emitOpError() << "bucket must be non-negative";
  return verifyCollective(*this, getBuffers());
}

LogicalResult GradReduceScatterOp::verify() {
  if (auto bucket = getBucketAttr(); bucket && bucket.getInt() < 0)
    return emitOpError() << "bucket must be non-negative";
  if (getFlush() && !getBucketAttr())
    return emitOpError() << "flush needs a bucket";
  BufAttr acc = getAccum();
  if (acc.getSpace() != BufferSpace::accum || !acc.getName().getValue().starts_with("grad_shard:"))
    return emitOpError() << "accumulates into an accum buffer named grad_shard:<param>";
  if (acc.getNumElements() > getInput().getNumElements())
    return emitOpError() << "accumulator of " << acc.getNumElements()
                         << " elements is larger than the gradient (" << getInput().getNumElements()
                         << ")";
  return verifyBufs(*this, ArrayAttr::get(getContext(), {getInput(), acc}), "buffers");
}

LogicalResult ReduceScatterOp::verify() { return verifyCollective(*this, getBuffers()); }

LogicalResult AllGatherOp::verify() { return verifyCollective(*this, getBuffers()); }

LogicalResult SeqOp::verify() {
  SeqKind kind = getKind();
  if (getIns().size() != 1 || getOuts().size() != 1)
    return emitOpError() << "takes one input and one output buffer";
  if (failed(verifyBufs(*this, getIns(), "ins")) || failed(verifyBufs(*this, getOuts(), "outs")))
    return failure();
  auto in = cast<BufAttr>(getIns()[0]), out = cast<BufAttr>(getOuts()[0]);
  ArrayRef<int64_t> a = in.getShape().asArrayRef(), b = out.getShape().asArrayRef();
  if (out.getSpace() == BufferSpace::input || a.size() != 3 || b.size() != 3 || a[0] != b[0] ||
      a[2] != b[2])
    return emitOpError() << "expects [b, s, h] buffers that differ only in the sequence";
  bool gathers = kind == SeqKind::all_gather || kind == SeqKind::cp_all_gather;
  int64_t whole = gathers ? b[1] : a[1], chunk = gathers ? a[1] : b[1];
  if (chunk <= 0 || whole % chunk != 0 || whole == chunk)
    return emitOpError() << "sequence " << whole << " is not several chunks of " << chunk;
  return success();
}

LogicalResult RingAttentionOp::verify() {
  bool fwd = getKind() == Direction::fwd;
  if (getIns().size() != (fwd ? 3u : 5u) || getOuts().size() != (fwd ? 1u : 3u))
    return emitOpError() << (fwd ? "fwd takes q, k, v and writes out"
                                 : "bwd takes dout, q, k, v, out and writes dq, dk, dv");
  return success(succeeded(verifyBufs(*this, getIns(), "ins")) &&
                 succeeded(verifyBufs(*this, getOuts(), "outs")));
}

LogicalResult AllToAllOp::verify() {
  bool dispatch = getKind() == ExpertExchange::dispatch;
  if (getIns().size() != 1 || getOuts().size() != 1)
    return emitOpError() << "takes one input and one output buffer";
  if (failed(verifyBufs(*this, getIns(), "ins")) || failed(verifyBufs(*this, getOuts(), "outs")))
    return failure();
  auto in = cast<BufAttr>(getIns()[0]), out = cast<BufAttr>(getOuts()[0]);
  ArrayRef<int64_t> rows = (dispatch ? in : out).getShape().asArrayRef(),
                    share = (dispatch ? out : in).getShape().asArrayRef();
  if (out.getSpace() == BufferSpace::input || rows.size() != 3 || share.size() != 3 ||
      rows[2] != share[2] || share[0] <= 0 || rows[0] % share[0] != 0 || rows[1] <= 0 ||
      share[1] != rows[1] * (rows[0] / share[0]))
    return emitOpError() << "expects expert rows [E, C, h] and a share [E/t, t C, h]";
  return success();
}

LogicalResult FusedOp::verify() {
  if (failed(verifyBufs(*this, getIns(), "ins")) || failed(verifyBufs(*this, getOuts(), "outs")))
    return failure();
  int64_t refs = int64_t(getIns().size() + getOuts().size() + getTemps().size());
  if (getBody().empty())
    return emitOpError() << "needs a body";
  for (auto [i, entry] : llvm::enumerate(getBody())) {
    auto d = dyn_cast<DictionaryAttr>(entry);
    auto kernel = d ? d.getAs<StringAttr>("kernel") : StringAttr();
    auto ins = d ? d.getAs<DenseI64ArrayAttr>("ins") : DenseI64ArrayAttr();
    auto outs = d ? d.getAs<DenseI64ArrayAttr>("outs") : DenseI64ArrayAttr();
    if (!kernel || !ins || !outs || !d.getAs<DictionaryAttr>("params"))
      return emitOpError() << "body entry " << i << " must be {kernel, ins, outs, params}";
    const llmopt::kernels::KernelInfo *info =
        llmopt::kernels::findKernel(kernel.getValue().str().c_str());
    if (!info || !llmopt::kernels::isRowWise(info->id))
      return emitOpError() << "body entry " << i << ": kernel '" << kernel.getValue()
                           << "' is not row-wise and cannot be fused";
    for (int64_t r : llvm::concat<const int64_t>(ins.asArrayRef(), outs.asArrayRef()))
      if (r < 0 || r >= refs)
        return emitOpError() << "body entry " << i << " names buffer " << r << " of " << refs;
    for (int64_t r : outs.asArrayRef())
      if (r < int64_t(getIns().size()))
        return emitOpError() << "body entry " << i << " writes input " << r;
  }
  return success();
}

LogicalResult P2POp::verify() {
  if (getKind() == TransferKind::recv && getBuffer().getSpace() == BufferSpace::input)
    return emitOpError() << "must not write a step input";
  return verifyBufs(*this, ArrayAttr::get(getContext(), {getBuffer()}), "buffer");
}

LogicalResult PlanOp::verify() {
  int64_t size[5] = {0, 0, 0, 0, 0};
  const char *names[5] = {"dp", "tp", "pp", "cp", "ep"};
  for (NamedAttribute na : getMesh()) {
    auto it = llvm::find(names, na.getName().getValue());
    auto v = dyn_cast<IntegerAttr>(na.getValue());
    if (it == std::end(names) || !v || v.getInt() < 1)
      return emitOpError() << "mesh axis '" << na.getName().getValue()
                           << "' must be one of dp, tp, pp, cp, ep with a positive size";
    size[it - std::begin(names)] = v.getInt();
  }
  for (int i = 0; i < 5; ++i)
    if (size[i] == 0)
      return emitOpError() << "mesh lacks axis '" << names[i] << "'";
  if (size[0] % size[4] != 0)
    return emitOpError() << "ep " << size[4] << " does not divide dp " << size[0];
  if (getWorld() != size[0] * size[1] * size[2] * size[3])
    return emitOpError() << "world " << getWorld()
                         << " is not pp x dp x cp x tp = " << size[0] * size[1] * size[2] * size[3];
  if (getZero() < 0 || getZero() > 3)
    return emitOpError() << "zero must be 0, 1, 2 or 3, got " << getZero();
  // The programs' collectives and axis parameters name axes of this mesh or
  // the groups the runtime derives from it (edp: the ranks holding the same
  // experts; pp_tied: the stages sharing a weight).
  auto known = [&](StringRef axis) {
    return llvm::is_contained({"dp", "tp", "pp", "cp", "ep", "edp", "pp_tied"}, axis);
  };
  Operation *module = (*this)->getParentOp();
  if (!module)
    return success();
  WalkResult r = module->walk([&](Operation *op) {
    if (!op->getParentOfType<ProgramOp>())
      return WalkResult::advance();
    SmallVector<StringRef> axes;
    if (auto a = op->getAttrOfType<StringAttr>("axis"))
      axes.push_back(a.getValue());
    if (auto k = dyn_cast<KernelOp>(op))
      for (StringRef key : {"shard", "cp", "amax_axis"})
        if (auto a = k.getParams().getAs<StringAttr>(key))
          a.getValue().split(axes, ',');
    for (StringRef axis : axes)
      if (!known(axis)) {
        op->emitOpError() << "names mesh axis '" << axis
                          << "', which exec.plan's mesh does not have (dp, tp, pp, cp, ep, or "
                             "the derived edp and pp_tied)";
        return WalkResult::interrupt();
      }
    return WalkResult::advance();
  });
  return failure(r.wasInterrupted());
}

LogicalResult ParamOp::verify() {
  auto t = dyn_cast<RankedTensorType>(getType());
  if (!t || !t.hasStaticShape())
    return emitOpError() << "must be a static ranked tensor, got " << getType();
  if ((getInit() == ParamInit::normal) != bool(getStdAttr()) ||
      (getStdAttr() && !(getStdAttr().getValueAsDouble() > 0)))
    return emitOpError() << "a normal init needs a positive std, and only it";
  // plan.json writes the std as a JSON number: an infinite one is not one.
  if (getStdAttr() && !std::isfinite(getStdAttr().getValueAsDouble()))
    return emitOpError() << "std must be finite, got " << getStdAttr().getValueAsDouble();
  return success();
}
