//===- executor.cpp - running a plan on the CPU ---------------------------===//

#include "llmopt-runtime/executor.h"
#include "llmopt-runtime/kernel_registry.h"
#include "llmopt-runtime/layouts.h"
#include "llmopt-runtime/shard.h"

#include "llmopt-kernels/cpu.h"
#include "llmopt-kernels/init.h"
#include <set>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace llmopt::runtime {

namespace k = llmopt::kernels::cpu;

static int64_t rowsOf(const Buffer &b) { return b.elements / b.shape.back(); }
using kernels::KernelId;

void CpuExecutor::layout(const std::string &name, Chunk &shard, bool &valueChunked) const {
  const ParamState &st = params.at(name);
  shard = st.shard;
  valueChunked = st.valueChunked;
}

bool CpuExecutor::read(const std::string &name, ParamState &out, std::string &error) const {
  auto it = params.find(name);
  if (it == params.end())
    return (error = "this rank holds no parameter '" + name + "'", false);
  out = it->second;
  return true;
}

bool CpuExecutor::write(const std::string &name, ParamState &&in, std::string &error) {
  auto it = params.find(name);
  if (it == params.end())
    return (error = "this rank holds no parameter '" + name + "'", false);
  ParamState &st = it->second;
  int64_t moments = st.shard.end - st.shard.begin;
  const ParamSpec *spec = plan->param(name);
  int64_t elements = spec ? spec->elements : -1;
  if (in.shard.begin != st.shard.begin || in.shard.end != st.shard.end ||
      in.valueChunked != st.valueChunked || int64_t(in.m.size()) != moments ||
      int64_t(in.v.size()) != moments ||
      int64_t(in.value.size()) != (st.valueChunked ? moments : elements))
    return (error = "parameter '" + name + "' is laid out otherwise on this rank", false);
  st = std::move(in);
  return true;
}

void CpuExecutor::release() {
  for (auto &[name, st] : params)
    for (std::vector<float> *v : {&st.value, &st.m, &st.v})
      std::vector<float>().swap(*v);
}

bool CpuExecutor::init(const Plan &p, int rank, uint64_t seed, std::string &error) {
  plan = &p;
  program = p.programFor(rank);
  if (!program) {
    error = "no program for rank " + std::to_string(rank);
    return false;
  }
  for (const ParamSpec &s : p.params)
    if (s.dtype != DType::F32 && s.dtype != DType::BF16 && s.dtype != DType::F16) {
      error = "the CPU backend runs fp32, bf16 and fp16 plans; parameter '" + s.name +
              "' is none of them";
      return false;
    }
  // The micro-batch loop and pipeline order: one arena (or stash) per
  // micro-batch in flight.
  this->rank = rank;
  if (!driver.init(p, *program, rank, error))
    return false;
  size_t slots = driver.slots();
  // Another backend runs the instructions: only the parameters are wanted.
  try {
    // Built in place (a template copied `slots` times would need one more).
    size_t arenaFloats = arenasWanted ? size_t((program->arenaBytes + 3) / 4) : 0;
    size_t stashFloats = arenasWanted ? size_t((program->stashBytes + 3) / 4) : 0;
    // Only the stash is per micro-batch where there is one; the parts then
    // share the arena.
    size_t arenaCount = program->stashBytes > 0 ? 1 : slots;
    arenas.clear();
    stashes.clear();
    for (size_t i = 0; i < arenaCount; ++i)
      arenas.emplace_back(arenaFloats, 0.0f);
    for (size_t i = 0; program->stashBytes > 0 && i < slots; ++i)
      stashes.emplace_back(stashFloats, 0.0f);
  } catch (const std::bad_alloc &) {
    double gib =
        double(program->stashBytes > 0 ? program->arenaBytes + int64_t(slots) * program->stashBytes
                                       : int64_t(slots) * program->arenaBytes) /
        double(int64_t(1) << 30);
    char size[32];
    std::snprintf(size, sizeof(size), "%.1f", gib);
    error = std::string("out of host memory for the plan's activations: ") + size +
            " GiB per rank (the arena of a micro-batch of " + std::to_string(plan->microBatch) +
            " x " + std::to_string(plan->seqLen) +
            " tokens); the CPU backend needs it in RAM: lower the plan with fewer tokens per "
            "micro-batch or more ranks, or run it with --device cuda";
    arenas.clear();
    stashes.clear();
    return false;
  }
  usesLossScaling = false;
  for (const Instruction &ins : program->step)
    if (ins.kind == Instruction::Kind::Kernel && ins.kernel->id == KernelId::LossScaleUpdate)
      usesLossScaling = true;
  lossScale = LossScaleState();
  slot = 0;
  this->rank = rank;
  // ZeRO: parameters whose update is sharded keep moments for their chunk;
  // under ZeRO-3 (gathered where used) their values too.
  std::set<std::string> gathered;
  for (const Instruction &ins : program->microBatch)
    if (ins.kind == Instruction::Kind::ParamGather)
      gathered.insert(ins.args.param);
  std::map<std::string, std::string> shardAxis;
  for (const Instruction &ins : program->step)
    if (ins.kind == Instruction::Kind::Kernel && ins.kernel->id == KernelId::AdamW &&
        !ins.args.shard.empty())
      shardAxis[ins.args.param] = ins.args.shard;
  // A pipeline stage holds only the parameters its program touches.
  std::set<std::string> used;
  for (const std::vector<Instruction> *list : {&program->microBatch, &program->step})
    for (const Instruction &ins : *list) {
      for (const std::vector<Buffer> *bufs : {&ins.ins, &ins.outs, &ins.buffers})
        for (const Buffer &b : *bufs)
          if (b.space == Buffer::Space::State)
            used.insert(b.name);
      if (ins.kind == Instruction::Kind::Kernel && ins.kernel->id == KernelId::AdamW)
        used.insert(ins.args.param);
    }
  params.clear();
  for (const ParamSpec &s : p.params) {
    if (!used.count(s.name))
      continue;
    ParamState &st = params[s.name];
    st.value.assign(size_t(s.elements), s.init == "ones" ? 1.0f : 0.0f);
    st.shard = {0, s.elements};
    if (auto it = shardAxis.find(s.name); it != shardAxis.end()) {
      int index = 0, size = 1;
      if (!axis(it->second, index, size, error))
        return false;
      st.shard = shardChunk(s.elements, size, index);
    }
    st.m.assign(size_t(st.shard.size()), 0.0f);
    st.v.assign(size_t(st.shard.size()), 0.0f);
    st.valueChunked = gathered.count(s.name) > 0;
    if (s.init == "normal" && s.shardDim < 0)
      kernels::initNormal(st.value.data(), s.elements, float(s.stddev), seed, s.name);
    if (s.init == "normal" && s.shardDim >= 0) {
      // Initialize the whole tensor as the unpartitioned model does, keep
      // this rank's part of each block.
      int index = 0, size = 1;
      if (!axis(s.shardAxis, index, size, error))
        return false;
      std::vector<float> full(size_t(wholeElements(s)));
      kernels::initNormal(full.data(), int64_t(full.size()), float(s.stddev), seed, s.name);
      copyPart(s, index, full.data(), st.value.data(), /*toPart=*/true);
    }
    if (st.valueChunked) {
      if (!shardAxis.count(s.name)) {
        error = "parameter '" + s.name + "' is gathered (ZeRO-3) but its update is not sharded";
        return false;
      }
      st.value =
          std::vector<float>(st.value.begin() + st.shard.begin, st.value.begin() + st.shard.end);
    }
  }
  steps = 0;
  return true;
}

bool CpuExecutor::axis(const std::string &name, int &index, int &size, std::string &error) const {
  return plan->place(name, rank, index, size, error);
}

/// Row `r`'s log-sum-exp over the whole vocabulary from the vocabulary
/// parts' log-sum-exps, gathered rank-major ([parts][rows]).
static double gatheredLogSumExp(const float *all, int64_t rows, int64_t parts, int64_t r) {
  double mx = all[r];
  for (int64_t p = 1; p < parts; ++p)
    mx = std::max(mx, double(all[p * rows + r]));
  double sum = 0;
  for (int64_t p = 0; p < parts; ++p)
    sum += std::exp(double(all[p * rows + r]) - mx);
  return mx + std::log(sum);
}

// Ring attention's block computations (the step driver runs the ring).

bool CpuExecutor::ringForward(const Instruction &ins, const float *q, const float *k,
                              const float *v, int keysRank, float *out, float *lse,
                              std::string &error) {
  int index = 0, parts = 1;
  if (!axis(ins.axis, index, parts, error))
    return false;
  bool bwd = ins.kind == Instruction::Kind::CPRingAttentionBwd;
  k::AttentionShape a = attentionShape(ins, ins.ins[bwd ? 1 : 0], ins.ins[bwd ? 2 : 1]);
  std::vector<int32_t> qPos = contextPositions(index, a.seq, parts),
                       kPos = contextPositions(keysRank, a.seq, parts);
  a.qPos = qPos.data();
  a.kPos = kPos.data();
  k::attentionForward(q, k, v, out, lse, a);
  return true;
}

bool CpuExecutor::ringMerge(const Instruction &ins, float *out, float *lse, const float *ob,
                            const float *lb, std::string &) {
  bool bwd = ins.kind == Instruction::Kind::CPRingAttentionBwd;
  k::AttentionShape a = attentionShape(ins, ins.ins[bwd ? 1 : 0], ins.ins[bwd ? 2 : 1]);
  for (int64_t b = 0; b < a.batch; ++b)
    for (int64_t h = 0; h < a.heads; ++h)
      for (int64_t s = 0; s < a.seq; ++s) {
        size_t r = size_t((b * a.heads + h) * a.seq + s);
        if (lb[r] == -INFINITY)
          continue;
        float m = std::max(lse[r], lb[r]);
        float l = m + std::log(std::exp(lse[r] - m) + std::exp(lb[r] - m));
        float wa = std::exp(lse[r] - l), wb = std::exp(lb[r] - l);
        int64_t o = ((b * a.seq + s) * a.heads + h) * a.headDim;
        for (int64_t d = 0; d < a.headDim; ++d)
          out[size_t(o + d)] = out[size_t(o + d)] * wa + ob[size_t(o + d)] * wb;
        lse[r] = l;
      }
  return true;
}

bool CpuExecutor::ringBackward(const Instruction &ins, const float *dout, const float *q,
                               const float *k, const float *v, const float *out, const float *lse,
                               int keysRank, float *dq, float *dk, float *dv, std::string &error) {
  int index = 0, parts = 1;
  if (!axis(ins.axis, index, parts, error))
    return false;
  k::AttentionShape a = attentionShape(ins, ins.ins[1], ins.ins[2]);
  std::vector<int32_t> qPos = contextPositions(index, a.seq, parts),
                       kPos = contextPositions(keysRank, a.seq, parts);
  a.qPos = qPos.data();
  a.kPos = kPos.data();
  k::attentionBackward(dout, q, k, v, out, lse, dq, dk, dv, a);
  return true;
}

bool CpuExecutor::fill(float *dst, float value, int64_t n, std::string &) {
  std::fill_n(dst, n, value);
  return true;
}

bool CpuExecutor::copyStrided(float *dst, const float *src, const StridedCopy &copy,
                              std::string &) {
  runCopies(dst, src, {copy});
  return true;
}

bool CpuExecutor::cpPositions(const Instruction &ins, int64_t local,
                              std::vector<int32_t> &positions, std::string &error) {
  positions.clear();
  std::string cpAxis = ins.args.cp;
  if (cpAxis.empty())
    return true;
  int index = 0, parts = 1;
  if (!axis(cpAxis, index, parts, error))
    return false;
  if (!contextChunkHalves(local, error))
    return false;
  positions = contextPositions(index, local, parts);
  return true;
}

float *CpuExecutor::data(const Buffer &b) {
  if (!shadows.empty())
    if (auto it = shadows.find(&b); it != shadows.end())
      return it->second.data();
  if (b.space == Buffer::Space::Temp) {
    std::vector<float> &t = temps[size_t(b.offset)];
    if (int64_t(t.size()) < b.elements)
      t.resize(size_t(b.elements));
    return t.data();
  }
  if (b.space == Buffer::Space::State)
    return params[b.name].value.data();
  if (b.space == Buffer::Space::Accum) {
    std::vector<float> &a = accum[b.name];
    if (int64_t(a.size()) < b.elements)
      a.resize(size_t(b.elements), 0.0f);
    return a.data();
  }
  if (b.space == Buffer::Space::Stash)
    return stashes[slot].data() + b.offset / 4;
  return arenas[arenas.size() == 1 ? 0 : slot].data() + b.offset / 4;
}

int64_t CpuExecutor::gradientBytes(const std::string &param) const {
  int64_t bytes = 0;
  for (const std::vector<Instruction> *list : {&program->microBatch, &program->step})
    for (const Instruction &ins : *list)
      for (const std::vector<Buffer> *bufs : {&ins.ins, &ins.outs, &ins.buffers})
        for (const Buffer &b : *bufs)
          if (b.space == Buffer::Space::Accum &&
              (b.name == "grad:" + param || b.name == "grad_shard:" + param))
            bytes = std::max(bytes, b.elements * 4);
  return bytes;
}

int64_t CpuExecutor::activationBytes() const {
  int64_t bytes = 0;
  for (const std::vector<std::vector<float>> *list : {&arenas, &stashes})
    for (const std::vector<float> &a : *list)
      bytes += int64_t(a.size()) * 4;
  return bytes;
}

/// `x` made the maximum over each of the mesh axes `axes`
/// (KernelArgs::amaxAxes).
static bool allReduceMaxOver(Communicator &comm, const std::vector<std::string> &axes, float *x,
                             int64_t n, std::string &error) {
  for (const std::string &axis : axes)
    if (!comm.allReduceMax(axis, x, n, error))
      return false;
  return true;
}

bool CpuExecutor::fp8Inputs(const Instruction &ins,
                            std::initializer_list<std::pair<const Buffer *, k::Fp8>> operands,
                            std::vector<std::vector<float>> &rounded, Communicator &comm,
                            std::string &error) {
  std::string recipe = ins.args.fp8;
  if (recipe.empty())
    return true;
  if (recipe != "e4m3" && recipe != "hybrid") {
    error = std::string(ins.kernel->name) + ": unknown fp8 recipe '" + recipe + "'";
    return false;
  }
  // Per-tensor current scaling; a tensor split over `amax_axis` (tensor
  // parallelism) scales by the whole tensor's largest magnitude.
  std::vector<float> amax;
  for (const auto &[b, format] : operands)
    amax.push_back(k::absMax(data(*b), b->elements));
  if (!allReduceMaxOver(comm, ins.args.amaxAxes(), amax.data(), int64_t(amax.size()), error))
    return false;
  size_t i = 0;
  for (const auto &[b, format] : operands) {
    // "e4m3": every operand in E4M3 (forward recipes).
    k::Fp8 f = recipe == "e4m3" ? k::Fp8::E4M3 : format;
    rounded.emplace_back(size_t(b->elements));
    k::fakeQuantizeFp8(data(*b), rounded.back().data(), b->elements, f, amax[i++]);
  }
  return true;
}

int32_t *CpuExecutor::routes(const Buffer &b, std::string &error) {
  if ((b.space != Buffer::Space::Arena && b.space != Buffer::Space::Stash) ||
      b.dtype != DType::I32) {
    error = "expert indices must be an i32 arena or stash buffer";
    return nullptr;
  }
  // The arena is 4-byte words; i32 buffers hold their integers in them.
  return reinterpret_cast<int32_t *>(data(b));
}

const int32_t *CpuExecutor::ids(const Buffer &b, std::string &error) {
  if (b.space != Buffer::Space::Input || b.dtype != DType::I32) {
    error = "token ids must be an i32 step input";
    return nullptr;
  }
  return (b.offset == 0 ? tokens : labels)->data();
}

bool CpuExecutor::step(const std::vector<std::vector<int32_t>> &tok,
                       const std::vector<std::vector<int32_t>> &lab, Communicator &comm,
                       StepResult &result, std::string &error) {
  if (!driver.step(*this, tok, lab, comm, error))
    return false;
  result.loss = *data(program->loss);
  result.gradNorm = *data(program->gradNorm);
  result.lossScaling = usesLossScaling;
  result.lossScale = lossScale.scale;
  result.skipped = usesLossScaling && lossScale.lastSkipped;
  ++steps;
  return true;
}

namespace {
bool sixteenBit(const Buffer &b) {
  return (b.space == Buffer::Space::Arena || b.space == Buffer::Space::Stash) &&
         (b.dtype == DType::BF16 || b.dtype == DType::F16);
}
} // namespace

float CpuExecutor::fromStorage(DType t, uint16_t bits) {
  if (t == DType::BF16) {
    uint32_t u = uint32_t(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  // IEEE half.
  uint32_t sign = uint32_t(bits & 0x8000u) << 16, exp = (bits >> 10) & 0x1fu, man = bits & 0x3ffu;
  float f;
  if (exp == 0) {
    f = std::ldexp(float(man), -24); // subnormal (or zero)
  } else if (exp == 31) {
    f = man ? NAN : INFINITY;
  } else {
    f = std::ldexp(float(man | 0x400u), int(exp) - 25);
  }
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u |= sign;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t CpuExecutor::toStorage(DType t, float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (t == DType::BF16) {
    if (std::isnan(f))
      return uint16_t((u >> 16) | 0x40u);
    // Round to nearest, ties to even.
    u += 0x7fffu + ((u >> 16) & 1u);
    return uint16_t(u >> 16);
  }
  uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  float a = std::fabs(f);
  if (std::isnan(f))
    return uint16_t(sign | 0x7e00u);
  if (a >= 65520.0f) // rounds past the largest half (65504)
    return uint16_t(sign | 0x7c00u);
  if (a < std::ldexp(1.0f, -14)) { // subnormal: multiples of 2^-24
    auto m = uint16_t(std::nearbyint(a * std::ldexp(1.0f, 24)));
    return uint16_t(sign | m); // m == 1024 is the smallest normal, as encoded
  }
  int e = 0;
  float m = std::frexp(a, &e);                             // a = m 2^e, m in [0.5, 1)
  auto mant = uint32_t(std::nearbyint(std::ldexp(m, 11))); // 1024..2048
  if (mant == 2048) {
    mant = 1024;
    ++e;
  }
  return uint16_t(sign | uint16_t((e + 14) << 10) | uint16_t(mant - 1024));
}

// 16-bit plans: each instruction computes on fp32 copies of its bf16 / fp16
// activations, rounded back to the dtype when it is done, and reads 16-bit
// weights as their fp32 master rounded to the dtype (the working copy the
// GPU keeps). The parameters' all-gather (ZeRO-1/2) moves the masters. A
// fused kernel's body does this per kernel.
std::vector<const Buffer *> CpuExecutor::wideBuffers(const Instruction &ins) const {
  std::vector<const Buffer *> wide;
  if (ins.kind == Instruction::Kind::Kernel && ins.kernel->id == KernelId::Fused)
    return wide;
  for (const std::vector<Buffer> *list : {&ins.ins, &ins.outs, &ins.buffers})
    for (const Buffer &b : *list)
      if (sixteenBit(b) || (b.space == Buffer::Space::State && b.dtype != DType::F32 &&
                            ins.kind != Instruction::Kind::AllGather))
        wide.push_back(&b);
  return wide;
}

bool CpuExecutor::widen(const Instruction &ins, std::string &) {
  widened = wideBuffers(ins);
  widenBuffers(widened);
  return true;
}

bool CpuExecutor::narrow(const Instruction &, std::string &) {
  narrowBuffers(widened);
  widened.clear();
  return true;
}

void CpuExecutor::widenBuffers(const std::vector<const Buffer *> &wide) {
  for (const Buffer *b : wide) {
    std::vector<float> &s = shadows[b];
    s.resize(size_t(b->elements));
    if (b->space == Buffer::Space::State) {
      const std::vector<float> &master = params[b->name].value;
      for (int64_t i = 0; i < b->elements && i < int64_t(master.size()); ++i)
        s[size_t(i)] = fromStorage(b->dtype, toStorage(b->dtype, master[size_t(i)]));
      continue;
    }
    const uint16_t *raw = storage16(*b);
    for (int64_t i = 0; i < b->elements; ++i)
      s[size_t(i)] = fromStorage(b->dtype, raw[i]);
  }
}

void CpuExecutor::narrowBuffers(const std::vector<const Buffer *> &wide) {
  for (const Buffer *b : wide) {
    auto it = shadows.find(b);
    if (it == shadows.end())
      continue;
    if (b->space != Buffer::Space::State) { // weights change only in AdamW
      uint16_t *raw = storage16(*b);
      for (int64_t i = 0; i < b->elements; ++i)
        raw[i] = toStorage(b->dtype, it->second[size_t(i)]);
    }
    shadows.erase(it);
  }
}

bool CpuExecutor::compute(const Instruction &ins, Communicator &comm, std::string &error) {
  std::vector<const Buffer *> wide = wideBuffers(ins);
  if (profiling && ins.kind == Instruction::Kind::Kernel && ins.kernel &&
      ins.kernel->id != KernelId::Fused && wide.empty()) {
    // The kernel alone (a 16-bit one's copies are not timed).
    auto t0 = std::chrono::steady_clock::now();
    bool ok = runWide(ins, comm, error);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    record(ins, s, s);
    return ok;
  }
  if (wide.empty())
    return runWide(ins, comm, error);
  widenBuffers(wide);
  bool ok = runWide(ins, comm, error);
  narrowBuffers(wide);
  return ok;
}

bool CpuExecutor::paramValue(const std::string &name, const float *&value, int64_t &count,
                             std::string &error) {
  auto it = params.find(name);
  if (it == params.end()) {
    error = "parameter '" + name + "' is not held by this rank";
    return false;
  }
  value = it->second.value.data();
  count = int64_t(it->second.value.size());
  return true;
}

bool CpuExecutor::allocate(int64_t n, BackendFloats &out, std::string &) {
  auto v = std::make_shared<std::vector<float>>(size_t(n), 0.0f);
  out = {v->data(), n, v};
  return true;
}

bool CpuExecutor::copy(float *dst, const float *src, int64_t n, std::string &) {
  std::copy_n(src, n, dst);
  return true;
}

bool CpuExecutor::addScaled(float *dst, const float *src, float scale, int64_t n, std::string &) {
  for (int64_t i = 0; i < n; ++i)
    dst[i] += src[i] * scale;
  return true;
}

bool CpuExecutor::clearAccumulators(std::string &) {
  for (auto &[name, a] : accum)
    std::fill(a.begin(), a.end(), 0.0f);
  return true;
}

bool CpuExecutor::select(const std::vector<int32_t> &tok, const std::vector<int32_t> &lab, size_t s,
                         std::string &) {
  tokens = &tok;
  labels = &lab;
  slot = s;
  return true;
}

void CpuExecutor::record(const Instruction &ins, double seconds, double hostSeconds) {
  std::vector<int64_t> dims;
  double flops = 0, bytes = 0;
  for (const std::vector<Buffer> *list : {&ins.ins, &ins.outs})
    for (const Buffer &b : *list)
      bytes += double(b.bytes);
  if (KernelDef::CostFn cost = kernelDef(ins.kernel->id).cost)
    cost(ins, dims, flops);
  KernelProfile &p = profile[{ins.kernel->name, dims}];
  p.kernel = ins.kernel->name;
  p.dims = dims;
  p.calls += 1;
  p.seconds += seconds;
  p.hostSeconds += hostSeconds;
  p.flops += flops;
  p.bytes += bytes;
}

uint16_t *CpuExecutor::storage16(const Buffer &b) {
  std::vector<float> &mem =
      b.space == Buffer::Space::Stash ? stashes[slot] : arenas[arenas.size() == 1 ? 0 : slot];
  return reinterpret_cast<uint16_t *>(reinterpret_cast<char *>(mem.data()) + b.offset);
}

bool CpuExecutor::store(const Buffer &b, const float *values, std::string &) {
  if (!sixteenBit(b)) {
    std::copy_n(values, b.elements, data(b));
    return true;
  }
  uint16_t *raw = storage16(b);
  for (int64_t i = 0; i < b.elements; ++i)
    raw[i] = toStorage(b.dtype, values[i]);
  return true;
}

bool CpuExecutor::runWide(const Instruction &ins, Communicator &comm, std::string &error) {
  if (ins.kind != Instruction::Kind::Kernel) {
    // The data-moving instructions are the step driver's (StepDriver::runs).
    error = "a data-moving instruction reached the CPU kernels";
    return false;
  }
  // A kernel with `shard` touches this rank's chunk of each buffer only.
  KernelCall call{ins, ins.ins, ins.outs, comm, error};
  if (!ins.args.shard.empty() && !axis(ins.args.shard, call.shardIndex, call.shardSize, error))
    return false;
  return (this->*kernelTable()[size_t(ins.kernel->id)])(call);
}

bool CpuExecutor::implementsEveryKernel() {
  for (KernelFn f : kernelTable())
    if (!f)
      return false;
  return true;
}

void CpuExecutor::zero(const Buffer &b) { std::fill_n(data(b), b.elements, 0.0f); }

const std::array<CpuExecutor::KernelFn, size_t(KernelId::NumKernels)> &CpuExecutor::kernelTable() {
  // Every kernel of the ABI has a CPU implementation: the CPU backend is the
  // reference the others are tested against (RuntimeTest:
  // Executor.EveryKernelHasACpuImplementation).
  static const std::array<KernelFn, size_t(KernelId::NumKernels)> table = [] {
    std::array<KernelFn, size_t(KernelId::NumKernels)> t{};
    t[size_t(KernelId::EmbeddingFwd)] = &CpuExecutor::kernelEmbeddingFwd;
    t[size_t(KernelId::EmbeddingBwd)] = &CpuExecutor::kernelEmbeddingBwd;
    t[size_t(KernelId::PositionEmbeddingFwd)] = &CpuExecutor::kernelPositionEmbedding;
    t[size_t(KernelId::PositionEmbeddingBwd)] = &CpuExecutor::kernelPositionEmbedding;
    t[size_t(KernelId::LayerNormFwd)] = &CpuExecutor::kernelLayerNormFwd;
    t[size_t(KernelId::LayerNormBwd)] = &CpuExecutor::kernelLayerNormBwd;
    t[size_t(KernelId::RMSNormFwd)] = &CpuExecutor::kernelRMSNormFwd;
    t[size_t(KernelId::RMSNormBwd)] = &CpuExecutor::kernelRMSNormBwd;
    t[size_t(KernelId::LinearFwd)] = &CpuExecutor::kernelLinearFwd;
    t[size_t(KernelId::LinearBwd)] = &CpuExecutor::kernelLinearBwd;
    t[size_t(KernelId::Split)] = &CpuExecutor::kernelSplit;
    t[size_t(KernelId::Concat)] = &CpuExecutor::kernelConcat;
    t[size_t(KernelId::Rotary)] = &CpuExecutor::kernelRotary;
    t[size_t(KernelId::AttentionFwd)] = &CpuExecutor::kernelAttention;
    t[size_t(KernelId::AttentionBwd)] = &CpuExecutor::kernelAttention;
    t[size_t(KernelId::GeluFwd)] = &CpuExecutor::kernelGeluFwd;
    t[size_t(KernelId::GeluBwd)] = &CpuExecutor::kernelGeluBwd;
    t[size_t(KernelId::SwiGLUFwd)] = &CpuExecutor::kernelSwiGLUFwd;
    t[size_t(KernelId::SwiGLUBwd)] = &CpuExecutor::kernelSwiGLUBwd;
    t[size_t(KernelId::Copy)] = &CpuExecutor::kernelCopy;
    t[size_t(KernelId::BiasAdd)] = &CpuExecutor::kernelBiasAdd;
    t[size_t(KernelId::SumRows)] = &CpuExecutor::kernelSumRows;
    t[size_t(KernelId::Add)] = &CpuExecutor::kernelAdd;
    t[size_t(KernelId::Fill)] = &CpuExecutor::kernelFill;
    t[size_t(KernelId::Scale)] = &CpuExecutor::kernelScale;
    t[size_t(KernelId::CrossEntropyFwd)] = &CpuExecutor::kernelCrossEntropyFwd;
    t[size_t(KernelId::CrossEntropyBwd)] = &CpuExecutor::kernelCrossEntropyBwd;
    t[size_t(KernelId::SumSquares)] = &CpuExecutor::kernelSumSquares;
    t[size_t(KernelId::Sqrt)] = &CpuExecutor::kernelSqrt;
    t[size_t(KernelId::VPCEStats)] = &CpuExecutor::kernelVPCEStats;
    t[size_t(KernelId::VPCELoss)] = &CpuExecutor::kernelVPCELoss;
    t[size_t(KernelId::VPCEBwd)] = &CpuExecutor::kernelVPCEBwd;
    t[size_t(KernelId::MoERouterFwd)] = &CpuExecutor::kernelMoERouterFwd;
    t[size_t(KernelId::MoERouterBwd)] = &CpuExecutor::kernelMoERouterBwd;
    t[size_t(KernelId::MoEExpertCounts)] = &CpuExecutor::kernelMoEExpertCounts;
    t[size_t(KernelId::MoEDispatchFwd)] = &CpuExecutor::kernelMoEDispatchCombine;
    t[size_t(KernelId::MoEDispatchBwd)] = &CpuExecutor::kernelMoEDispatchCombine;
    t[size_t(KernelId::MoECombineFwd)] = &CpuExecutor::kernelMoEDispatchCombine;
    t[size_t(KernelId::MoECombineBwd)] = &CpuExecutor::kernelMoEDispatchCombine;
    t[size_t(KernelId::MoEExpertsFwd)] = &CpuExecutor::kernelMoEExperts;
    t[size_t(KernelId::MoEExpertsBwd)] = &CpuExecutor::kernelMoEExperts;
    t[size_t(KernelId::TPSlice)] = &CpuExecutor::kernelTPSlice;
    t[size_t(KernelId::TPUnslice)] = &CpuExecutor::kernelTPSlice;
    t[size_t(KernelId::Fused)] = &CpuExecutor::kernelFused;
    t[size_t(KernelId::GlobalNorm)] = &CpuExecutor::kernelGlobalNorm;
    t[size_t(KernelId::LossScaleFill)] = &CpuExecutor::kernelLossScaleFill;
    t[size_t(KernelId::LossUnscale)] = &CpuExecutor::kernelLossUnscale;
    t[size_t(KernelId::LossScaleUpdate)] = &CpuExecutor::kernelLossScaleUpdate;
    t[size_t(KernelId::AdamW)] = &CpuExecutor::kernelAdamW;
    return t;
  }();
  return table;
}

bool CpuExecutor::kernelEmbeddingFwd(const KernelCall &call) {
  auto &[ins, in, out, comm, error, shardIndex, shardSize] = call;
  const int32_t *t = ids(in[0], error);
  if (!t)
    return false;
  if (!ins.args.shard.empty()) {
    // Vocabulary-parallel: rows [index * part, (index + 1) * part).
    int64_t part = in[1].shape[0], vocab = part * shardSize;
    for (int64_t i = 0; i < in[0].elements; ++i)
      if (t[i] < 0 || t[i] >= vocab) {
        error = "a token id is outside the vocabulary of " + std::to_string(vocab);
        return false;
      }
    k::embeddingForwardPart(t, data(in[1]), data(out[0]), in[0].elements, shardIndex * part, part,
                            in[1].shape[1]);
    return true;
  }
  if (!k::embeddingForward(t, data(in[1]), data(out[0]), in[0].elements, in[1].shape[0],
                           in[1].shape[1])) {
    error = "a token id is outside the vocabulary of " + std::to_string(in[1].shape[0]);
    return false;
  }
  return true;
}

bool CpuExecutor::kernelEmbeddingBwd(const KernelCall &call) {
  auto &[ins, in, out, comm, error, shardIndex, shardSize] = call;
  const int32_t *t = ids(in[0], error);
  if (!t)
    return false;
  zero(out[0]);
  if (!ins.args.shard.empty())
    k::embeddingBackwardPart(t, data(in[1]), data(out[0]), in[0].elements,
                             shardIndex * out[0].shape[0], out[0].shape[0], out[0].shape[1]);
  else
    k::embeddingBackward(t, data(in[1]), data(out[0]), in[0].elements, out[0].shape[1]);
  return true;
}

bool CpuExecutor::kernelPositionEmbedding(const KernelCall &call) {
  auto &[ins, in, out, comm, error, shardIndex, shardSize] = call;
  std::vector<int32_t> pos;
  if (!cpPositions(ins, in[0].shape[1], pos, error))
    return false;
  const int32_t *p = pos.empty() ? nullptr : pos.data();
  if (ins.kernel->id == KernelId::PositionEmbeddingFwd) {
    k::positionEmbeddingForward(data(in[0]), data(in[1]), data(out[0]), in[0].shape[0],
                                in[0].shape[1], in[0].shape[2], p);
    return true;
  }
  zero(out[0]);
  k::positionEmbeddingBackward(data(in[0]), data(out[0]), in[0].shape[0], in[0].shape[1],
                               in[0].shape[2], p);
  return true;
}

bool CpuExecutor::kernelLayerNormFwd(const KernelCall &call) {
  auto &[ins, in, out, comm, error, shardIndex, shardSize] = call;
  int64_t n = rowsOf(in[0]), c = in[0].shape.back();
  std::vector<float> mean(n), rstd(n);
  k::layerNormForward(data(in[0]), data(in[1]), in.size() > 2 ? data(in[2]) : nullptr, data(out[0]),
                      mean.data(), rstd.data(), n, c, float(ins.args.eps));
  return true;
}

bool CpuExecutor::kernelLayerNormBwd(const KernelCall &call) {
  auto &[ins, in, out, comm, error, shardIndex, shardSize] = call;
  int64_t n = rowsOf(in[1]), c = in[1].shape.back();
  std::vector<float> tmp(in[1].elements), mean(n), rstd(n);
  k::layerNormForward(data(in[1]), data(in[2]), nullptr, tmp.data(), mean.data(), rstd.data(), n, c,
                      float(ins.args.eps));
  for (size_t i = 1; i < out.size(); ++i)
    zero(out[i]);
  k::layerNormBackward(data(in[0]), data(in[1]), data(in[2]), mean.data(), rstd.data(),
                       data(out[0]), data(out[1]), out.size() > 2 ? data(out[2]) : nullptr, n, c);
  return true;
}

bool CpuExecutor::kernelRMSNormFwd(const KernelCall &call) {
  auto &[ins, in, out, comm, error, shardIndex, shardSize] = call;
  int64_t n = rowsOf(in[0]), c = in[0].shape.back();
  std::vector<float> rstd(n);
  k::rmsNormForward(data(in[0]), data(in[1]), data(out[0]), rstd.data(), n, c, float(ins.args.eps));
  return true;
}

bool CpuExecutor::kernelRMSNormBwd(const KernelCall &call) {
  auto &[ins, in, out, comm, error, shardIndex, shardSize] = call;
  int64_t n = rowsOf(in[1]), c = in[1].shape.back();
  std::vector<float> tmp(in[1].elements), rstd(n);
  k::rmsNormForward(data(in[1]), data(in[2]), tmp.data(), rstd.data(), n, c, float(ins.args.eps));
  zero(out[1]);
  k::rmsNormBackward(data(in[0]), data(in[1]), data(in[2]), rstd.data(), data(out[0]), data(out[1]),
                     n, c);
  return true;
}

bool CpuExecutor::kernelLinearFwd(const KernelCall &call) {
  auto &[ins, in, out, comm, error, shardIndex, shardSize] = call;
  bool tr = ins.args.transposed;
  const Buffer &w = in[1];
  int64_t inF = tr ? w.shape[0] : w.shape[1], outF = tr ? w.shape[1] : w.shape[0];
  std::vector<std::vector<float>> q;
  if (!fp8Inputs(ins, {{&in[0], k::Fp8::E4M3}, {&w, k::Fp8::E4M3}}, q, comm, error))
    return false;
  k::linearForward(q.empty() ? data(in[0]) : q[0].data(), q.empty() ? data(w) : q[1].data(),
                   in.size() > 2 ? data(in[2]) : nullptr, data(out[0]), rowsOf(in[0]), inF, outF,
                   tr);
  // A GeLU epilogue: the pre-activation stays in out[0] for the backward.
  if (std::string e = ins.args.epilogue; !e.empty()) {
    if (e != "gelu_tanh" || out.size() != 2 || out[1].elements != out[0].elements) {
      error = "linear_fwd: epilogue '" + e + "' needs gelu_tanh and two outputs of one size";
      return false;
    }
    k::geluForward(data(out[0]), data(out[1]), out[0].elements, /*tanhApprox=*/true);
  } else if (out.size() != 1) {
    error = "linear_fwd writes one output without an epilogue";
    return false;
  }
  return true;
}

bool CpuExecutor::kernelLinearBwd(const KernelCall &call) {
  auto &[ins, in, out, comm, error, shardIndex, shardSize] = call;
  bool tr = ins.args.transposed;
  const Buffer &w = in[2];
  int64_t inF = tr ? w.shape[0] : w.shape[1], outF = tr ? w.shape[1] : w.shape[0];
  // `accumulate`: the weight / bias gradients are added into their fp32
  // accumulators; computed apart first, so that the sums are the ones a
  // separate add would make.
  bool accumulate = ins.args.accumulate;
  std::vector<std::vector<float>> parts(out.size());
  std::vector<float *> grads(out.size(), nullptr);
  for (size_t i = 1; i < out.size(); ++i) {
    if (accumulate) {
      parts[i].assign(size_t(out[i].elements), 0.0f);
      grads[i] = parts[i].data();
    } else {
      zero(out[i]);
      grads[i] = data(out[i]);
    }
  }
  float *db = out.size() > 2 ? grads[2] : nullptr;
  // fp8 (hybrid): the gradient in E5M2, input and weight in E4M3; the bias
  // gradient sums the unrounded gradient.
  std::vector<std::vector<float>> q;
  if (!fp8Inputs(ins, {{&in[0], k::Fp8::E5M2}, {&in[1], k::Fp8::E4M3}, {&w, k::Fp8::E4M3}}, q, comm,
                 error))
    return false;
  if (!q.empty()) {
    k::linearBackward(q[0].data(), q[1].data(), q[2].data(), data(out[0]), grads[1], nullptr,
                      rowsOf(in[1]), inF, outF, tr);
    if (db) {
      const float *g = data(in[0]);
      for (int64_t r = 0, n = rowsOf(in[1]); r < n; ++r)
        for (int64_t j = 0; j < outF; ++j)
          db[j] += g[r * outF + j];
    }
  } else {
    k::linearBackward(data(in[0]), data(in[1]), data(w), data(out[0]), grads[1], db, rowsOf(in[1]),
                      inF, outF, tr);
  }
  if (accumulate)
    for (size_t i = 1; i < out.size(); ++i) {
      float *acc = data(out[i]);
      for (int64_t j = 0; j < out[i].elements; ++j)
        acc[j] += parts[i][size_t(j)];
    }
  return true;
}

bool CpuExecutor::kernelSplit(const KernelCall &call) {
  auto &[ins, in, out, comm, error, shardIndex, shardSize] = call;
  int64_t rows = rowsOf(in[0]), c = in[0].shape.back(), offset = 0;
  const float *x = data(in[0]);
  for (const Buffer &o : out) {
    int64_t size = o.shape.back();
    float *y = data(o);
    for (int64_t r = 0; r < rows; ++r)
      std::copy_n(x + r * c + offset, size, y + r * size);
    offset += size;
  }
  return true;
}

bool CpuExecutor::kernelConcat(const KernelCall &call) {
  auto &[ins, in, out, comm, error, shardIndex, shardSize] = call;
  int64_t rows = rowsOf(out[0]), c = out[0].shape.back(), offset = 0;
  float *y = data(out[0]);
  for (const Buffer &i : in) {
    int64_t size = i.shape.back();
    const float *x = data(i);
    for (int64_t r = 0; r < rows; ++r)
      std::copy_n(x + r * size, size, y + r * c + offset);
    offset += size;
  }
  return true;
}

bool CpuExecutor::kernelRotary(const KernelCall &call) {
  auto &[ins, in, out, comm, error, shardIndex, shardSize] = call;
  int64_t hd = int64_t(ins.args.head_dim);
  k::RopeScaling sc = ins.args.ropeScaling();
  std::vector<int32_t> pos;
  if (!cpPositions(ins, in[0].shape[1], pos, error))
    return false;
  for (int i = 0; i < 2; ++i)
    k::rotary(data(in[i]), data(out[i]), in[i].shape[0], in[i].shape[1], in[i].shape[2] / hd, hd,
              float(ins.args.theta), sc, ins.args.inverse, pos.empty() ? nullptr : pos.data());
  return true;
}

bool CpuExecutor::kernelAttention(const KernelCall &call) {
  auto &[ins, in, out, comm, error, shardIndex, shardSize] = call;
  bool fwd = ins.kernel->id == KernelId::AttentionFwd;
  const Buffer &q = fwd ? in[0] : in[1];
  k::AttentionShape a = attentionShape(ins, q, fwd ? in[1] : in[2]);
  // Context parallelism: local queries at their positions, whole keys.
  std::vector<int32_t> pos;
  if (!cpPositions(ins, a.seq, pos, error))
    return false;
  a.qPos = pos.empty() ? nullptr : pos.data();
  std::vector<float> lse(a.batch * a.heads * a.seq);
  if (fwd) {
    k::attentionForward(data(in[0]), data(in[1]), data(in[2]), data(out[0]), lse.data(), a);
    return true;
  }
  std::vector<float> o(q.elements);
  k::attentionForward(data(in[1]), data(in[2]), data(in[3]), o.data(), lse.data(), a);
  k::attentionBackward(data(in[0]), data(in[1]), data(in[2]), data(in[3]), data(in[4]), lse.data(),
                       data(out[0]), data(out[1]), data(out[2]), a);
  return true;
}

bool CpuExecutor::kernelGeluFwd(const KernelCall &call) {
  auto &[ins, in, out, comm, error, shardIndex, shardSize] = call;
  k::geluForward(data(in[0]), data(out[0]), in[0].elements, ins.args.tanh);
  return true;
}

bool CpuExecutor::kernelGeluBwd(const KernelCall &call) {
  auto &[ins, in, out, comm, error, shardIndex, shardSize] = call;
  k::geluBackward(data(in[0]), data(in[1]), data(out[0]), in[1].elements, ins.args.tanh);
  return true;
}

bool CpuExecutor::kernelSwiGLUFwd(const KernelCall &call) {
  auto &[ins, in, out, comm, error, shardIndex, shardSize] = call;
  k::swigluForward(data(in[0]), data(in[1]), data(out[0]), in[0].elements);
  return true;
}

bool CpuExecutor::kernelSwiGLUBwd(const KernelCall &call) {
  auto &[ins, in, out, comm, error, shardIndex, shardSize] = call;
  k::swigluBackward(data(in[0]), data(in[1]), data(in[2]), data(out[0]), data(out[1]),
                    in[1].elements);
  return true;
}

bool CpuExecutor::kernelCopy(const KernelCall &call) {
  auto &[ins, in, out, comm, error, shardIndex, shardSize] = call;
  if (data(out[0]) != data(in[0]))
    std::copy_n(data(in[0]), out[0].elements, data(out[0]));
  return true;
}

bool CpuExecutor::kernelBiasAdd(const KernelCall &call) {
  auto &[ins, in, out, comm, error, shardIndex, shardSize] = call;
  const float *x = data(in[0]), *bias = data(in[1]);
  float *y = data(out[0]);
  int64_t n = in[1].elements;
  for (int64_t i = 0; i < out[0].elements; ++i)
    y[i] = x[i] + bias[i % n];
  return true;
}

bool CpuExecutor::kernelSumRows(const KernelCall &call) {
  auto &[ins, in, out, comm, error, shardIndex, shardSize] = call;
  const float *g = data(in[0]);
  int64_t n = out[0].elements, rows = in[0].elements / n;
  std::vector<double> sum(size_t(n), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j)
      sum[size_t(j)] += g[r * n + j];
  for (int64_t j = 0; j < n; ++j)
    data(out[0])[j] = float(sum[size_t(j)]);
  return true;
}

bool CpuExecutor::kernelAdd(const KernelCall &call) {
  auto &[ins, in, out, comm, error, shardIndex, shardSize] = call;
  const float *a = data(in[0]), *b = data(in[1]);
  float *y = data(out[0]);
  for (int64_t i = 0; i < out[0].elements; ++i)
    y[i] = a[i] + b[i];
  return true;
}

bool CpuExecutor::kernelFill(const KernelCall &call) {
  auto &[ins, in, out, comm, error, shardIndex, shardSize] = call;
  std::fill_n(data(out[0]), out[0].elements, float(ins.args.value));
  return true;
}

bool CpuExecutor::kernelScale(const KernelCall &call) {
  auto &[ins, in, out, comm, error, shardIndex, shardSize] = call;
  const float *x = data(in[0]);
  float *y = data(out[0]), f = float(ins.args.factor);
  for (int64_t i = 0; i < out[0].elements; ++i)
    y[i] = x[i] * f;
  return true;
}

bool CpuExecutor::kernelCrossEntropyFwd(const KernelCall &call) {
  auto &[ins, in, out, comm, error, shardIndex, shardSize] = call;
  const int32_t *l = ids(in[1], error);
  if (!l)
    return false;
  int64_t counted;
  if (!k::crossEntropyForward(data(in[0]), l, rowsOf(in[0]), in[0].shape.back(),
                              int64_t(ins.args.ignore_index), data(out[0]), &counted)) {
    error = "a label is outside the vocabulary";
    return false;
  }
  return true;
}

bool CpuExecutor::kernelCrossEntropyBwd(const KernelCall &call) {
  auto &[ins, in, out, comm, error, shardIndex, shardSize] = call;
  const int32_t *l = ids(in[1], error);
  if (!l)
    return false;
  int64_t ignore = int64_t(ins.args.ignore_index), counted = 0;
  for (int64_t i = 0; i < in[1].elements; ++i)
    counted += l[i] != ignore;
  k::crossEntropyBackward(data(in[0]), l, *data(in[2]), counted, data(out[0]), rowsOf(in[0]),
                          in[0].shape.back(), ignore);
  return true;
}

bool CpuExecutor::kernelSumSquares(const KernelCall &call) {
  auto &[ins, in, out, comm, error, shardIndex, shardSize] = call;
  double sum = 0;
  for (const Buffer &b : in) {
    Chunk c = isGradShard(b) ? Chunk{0, b.elements} : shardChunk(b.elements, shardSize, shardIndex);
    sum += k::sumOfSquares(data(b) + c.begin, c.size());
  }
  *data(out[0]) = float(sum);
  return true;
}

bool CpuExecutor::kernelSqrt(const KernelCall &call) {
  auto &[ins, in, out, comm, error, shardIndex, shardSize] = call;
  for (int64_t i = 0; i < in[0].elements; ++i)
    data(out[0])[i] = std::sqrt(std::max(0.0f, data(in[0])[i]));
  return true;
}

/// Of a vocabulary-parallel part of `part` entries from `off`, those before
/// the real vocabulary's end (`classes`, a padded vocabulary; all without).
static int64_t vocabEntries(const Instruction &ins, int64_t part, int64_t off) {
  int64_t classes = int64_t(ins.args.classes);
  return classes < 0 ? part : std::clamp<int64_t>(classes - off, 0, part);
}

bool CpuExecutor::kernelVPCEStats(const KernelCall &call) {
  auto &[ins, in, out, comm, error, shardIndex, shardSize] = call;
  // This rank's vocabulary part: per row, log-sum-exp of its logits and the
  // label's logit if the label falls in the part (else 0).
  const int32_t *l = ids(in[1], error);
  if (!l)
    return false;
  const float *z = data(in[0]);
  int64_t part = in[0].shape.back(), rows = in[0].elements / part, off = shardIndex * part;
  int64_t ignore = int64_t(ins.args.ignore_index);
  // A padded vocabulary: this rank's real entries (the rest are padding,
  // left out; a part of padding only has log-sum-exp -inf).
  int64_t real = vocabEntries(ins, part, off);
  float *lse = data(out[0]), *target = data(out[1]);
  for (int64_t r = 0; r < rows; ++r) {
    const float *zr = z + r * part;
    if (real == 0) {
      lse[r] = -INFINITY;
      target[r] = 0.0f;
      continue;
    }
    float mx = *std::max_element(zr, zr + real);
    double sum = 0;
    for (int64_t j = 0; j < real; ++j)
      sum += std::exp(double(zr[j] - mx));
    lse[r] = mx + float(std::log(sum));
    int64_t label = l[r];
    target[r] = label != ignore && label >= off && label < off + part ? zr[label - off] : 0.0f;
  }
  return true;
}

bool CpuExecutor::kernelVPCELoss(const KernelCall &call) {
  auto &[ins, in, out, comm, error, shardIndex, shardSize] = call;
  const int32_t *l = ids(in[2], error);
  if (!l)
    return false;
  const float *all = data(in[0]), *target = data(in[1]);
  int64_t rows = in[1].elements, parts = in[0].elements / rows;
  int64_t ignore = int64_t(ins.args.ignore_index), counted = 0;
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (l[r] == ignore)
      continue;
    total += gatheredLogSumExp(all, rows, parts, r) - double(target[r]);
    ++counted;
  }
  *data(out[0]) = counted ? float(total / double(counted)) : 0.0f;
  return true;
}

bool CpuExecutor::kernelVPCEBwd(const KernelCall &call) {
  auto &[ins, in, out, comm, error, shardIndex, shardSize] = call;
  const int32_t *l = ids(in[1], error);
  if (!l)
    return false;
  const float *z = data(in[0]), *all = data(in[2]);
  float dloss = *data(in[3]);
  int64_t part = in[0].shape.back(), rows = in[0].elements / part, off = shardIndex * part;
  int64_t parts = in[2].elements / rows, ignore = int64_t(ins.args.ignore_index);
  int64_t real = vocabEntries(ins, part, off), counted = 0;
  for (int64_t r = 0; r < rows; ++r)
    counted += l[r] != ignore;
  float *g = data(out[0]);
  for (int64_t r = 0; r < rows; ++r) {
    float *gr = g + r * part;
    if (l[r] == ignore || counted == 0) {
      std::fill_n(gr, part, 0.0f);
      continue;
    }
    double lse = gatheredLogSumExp(all, rows, parts, r);
    double scale = double(dloss) / double(counted);
    const float *zr = z + r * part;
    for (int64_t j = 0; j < real; ++j) {
      double p = std::exp(double(zr[j]) - lse);
      gr[j] = float((p - (off + j == l[r] ? 1.0 : 0.0)) * scale);
    }
    std::fill(gr + real, gr + part, 0.0f); // padding: no gradient
  }
  return true;
}

bool CpuExecutor::kernelMoERouterFwd(const KernelCall &call) {
  auto &[ins, in, out, comm, error, shardIndex, shardSize] = call;
  int32_t *idx = routes(out[1], error);
  if (!idx)
    return false;
  k::moeRouterForward(data(in[0]), data(in[1]), data(out[0]), idx, rowsOf(in[0]),
                      in[0].shape.back(), in[1].shape[0], int64_t(ins.args.top_k),
                      ins.args.normalize);
  return true;
}

bool CpuExecutor::kernelMoERouterBwd(const KernelCall &call) {
  auto &[ins, in, out, comm, error, shardIndex, shardSize] = call;
  // A sixth input: the expert counts of the whole sequence (the router saw
  // a chunk of it).
  if (in.size() != 5 && in.size() != 6) {
    error = "moe_router_bwd takes 5 inputs, or 6 with the sequence's expert counts";
    return false;
  }
  const int32_t *idx = routes(in[4], error);
  if (!idx)
    return false;
  if (in.size() == 6 && (in[5].elements != in[2].shape[0] || ins.args.aux_tokens < 1)) {
    error = "moe_router_bwd: the counts need one entry per expert and aux_tokens >= 1";
    return false;
  }
  zero(out[1]);
  k::moeRouterBackward(data(in[0]), data(in[1]), data(in[2]), data(in[3]), idx, data(out[0]),
                       data(out[1]), rowsOf(in[1]), in[1].shape.back(), in[2].shape[0],
                       int64_t(ins.args.top_k), ins.args.normalize, float(ins.args.aux_loss),
                       in.size() == 6 ? data(in[5]) : nullptr, int64_t(ins.args.aux_tokens),
                       float(ins.args.aux_scale));
  return true;
}

bool CpuExecutor::kernelMoEExpertCounts(const KernelCall &call) {
  auto &[ins, in, out, comm, error, shardIndex, shardSize] = call;
  const int32_t *idx = routes(in[0], error);
  if (!idx)
    return false;
  int64_t topK = int64_t(ins.args.top_k);
  if (topK < 1 || in[0].elements % topK != 0) {
    error = "moe_expert_counts: top_k must divide the indices";
    return false;
  }
  k::moeExpertCounts(idx, data(out[0]), in[0].elements / topK, out[0].elements, topK);
  return true;
}

bool CpuExecutor::kernelMoEDispatchCombine(const KernelCall &call) {
  auto &[ins, in, out, comm, error, shardIndex, shardSize] = call;
  // Tokens [n, hidden], routes [n, top_k], expert rows [experts, capacity, hidden].
  KernelId id = ins.kernel->id;
  const Buffer &routesBuf = ins.moeIndices(), &rows = ins.moeRows();
  const int32_t *idx = routes(routesBuf, error);
  if (!idx)
    return false;
  int64_t topK = routesBuf.shape.back(), n = routesBuf.elements / topK;
  int64_t experts = rows.shape[0], capacity = rows.shape[1], hidden = rows.shape[2];
  bool ok =
      id == KernelId::MoEDispatchFwd   ? k::moeDispatchForward(data(in[0]), idx, data(out[0]), n,
                                                               hidden, topK, experts, capacity)
      : id == KernelId::MoEDispatchBwd ? k::moeDispatchBackward(data(in[0]), idx, data(out[0]), n,
                                                                hidden, topK, experts, capacity)
      : id == KernelId::MoECombineFwd
          ? k::moeCombineForward(data(in[0]), data(in[1]), idx, data(out[0]), n, hidden, topK,
                                 experts, capacity)
          : k::moeCombineBackward(data(in[0]), data(in[1]), data(in[2]), idx, data(out[0]),
                                  data(out[1]), n, hidden, topK, experts, capacity);
  if (!ok)
    error = "an expert index is outside [0, " + std::to_string(experts) + ")";
  return ok;
}

bool CpuExecutor::kernelMoEExperts(const KernelCall &call) {
  auto &[ins, in, out, comm, error, shardIndex, shardSize] = call;
  bool fwd = ins.kernel->id == KernelId::MoEExpertsFwd;
  const Buffer &x = in[fwd ? 0 : 1];
  size_t first = fwd ? 1 : 2, count = ins.args.swiglu ? 3 : 2;
  if (in.size() != first + count || (!fwd && out.size() != 1 + count)) {
    error = "moe experts take " + std::to_string(count) + " weights";
    return false;
  }
  k::MoEExpertShape sh{x.shape[0], x.shape[1], x.shape[2], in[first].shape[1], ins.args.swiglu};
  // `accumulate`: the weight gradients are added into their fp32
  // accumulators (the outputs), each expert's computed apart first as a
  // separate add would make them.
  bool accumulate = !fwd && ins.args.accumulate;
  const float *w[3] = {};
  float *dw[3] = {};
  for (size_t i = 0; i < count; ++i) {
    w[i] = data(in[first + i]);
    if (fwd)
      continue;
    if (!accumulate)
      zero(out[1 + i]);
    dw[i] = data(out[1 + i]);
  }
  sh.addApart = accumulate;
  // fp8: activations per row, each expert's weights per tensor; where the
  // ffn is split (`amax_axis`), the weights' and the hidden rows' amaxes
  // are the maxima over its ranks.
  std::string recipe = ins.args.fp8;
  std::vector<std::string> axes = ins.args.amaxAxes();
  if (!recipe.empty() && recipe != (fwd ? "e4m3" : "hybrid")) {
    error = std::string(ins.kernel->name) + ": fp8 recipe '" + recipe + "' (want " +
            (fwd ? "e4m3" : "hybrid") + ")";
    return false;
  }
  sh.fp8 = recipe.empty() ? 0 : fwd ? 1 : 2;
  std::vector<float> weightAmax;
  struct RowAmax {
    Communicator &comm;
    const std::vector<std::string> &axes;
    std::string &error;
  } rows{comm, axes, error};
  if (sh.fp8 && !axes.empty()) {
    int64_t per = sh.ffn * sh.hidden;
    for (size_t i = 0; i < count; ++i)
      for (int64_t e = 0; e < sh.experts; ++e)
        weightAmax.push_back(k::absMax(w[i] + e * per, per));
    if (!allReduceMaxOver(comm, axes, weightAmax.data(), int64_t(weightAmax.size()), error))
      return false;
    sh.weightAmax = weightAmax.data();
    sh.rowAmax = [](void *c, float *amax, int64_t n) {
      auto *r = static_cast<RowAmax *>(c);
      return allReduceMaxOver(r->comm, r->axes, amax, n, r->error);
    };
    sh.rowAmaxContext = &rows;
  }
  if (fwd)
    return k::moeExpertsForward(data(x), w, data(out[0]), sh);
  return k::moeExpertsBackward(data(in[0]), data(x), w, data(out[0]), dw, sh);
}

bool CpuExecutor::kernelTPSlice(const KernelCall &call) {
  auto &[ins, in, out, comm, error, shardIndex, shardSize] = call;
  // The axis' ranks form `parts` consecutive groups; group g owns part g
  // of the last dimension.
  int64_t parts = int64_t(ins.args.parts);
  if (parts < 1 || shardSize % parts != 0) {
    error = "tp_slice: " + std::to_string(parts) + " parts do not group " +
            std::to_string(shardSize) + " ranks";
    return false;
  }
  int64_t part = shardIndex / (shardSize / parts);
  bool slice = ins.kernel->id == KernelId::TPSlice;
  const Buffer &whole = slice ? in[0] : out[0];
  int64_t w = whole.shape.back(), pw = w / parts, rows = whole.elements / w;
  const float *x = data(in[0]);
  float *y = data(out[0]);
  if (!slice)
    zero(out[0]);
  for (int64_t r = 0; r < rows; ++r)
    if (slice)
      std::copy_n(x + r * w + part * pw, pw, y + r * pw);
    else
      std::copy_n(x + r * pw, pw, y + r * w + part * pw);
  return true;
}

bool CpuExecutor::kernelFused(const KernelCall &call) {
  auto &[ins, in, out, comm, error, shardIndex, shardSize] = call;
  // The CPU runs the body's reference kernels one after another; the
  // temporaries live in host vectors instead of on chip.
  if (temps.size() < ins.temps.size())
    temps.resize(ins.temps.size());
  for (const Instruction &sub : ins.body)
    if (!compute(sub, comm, error))
      return false;
  return true;
}

bool CpuExecutor::kernelGlobalNorm(const KernelCall &call) {
  auto &[ins, in, out, comm, error, shardIndex, shardSize] = call;
  double sum = 0;
  for (const Buffer &b : in)
    sum += k::sumOfSquares(data(b), b.elements);
  *data(out[0]) = float(std::sqrt(sum));
  return true;
}

bool CpuExecutor::kernelLossScaleFill(const KernelCall &call) {
  auto &[ins, in, out, comm, error, shardIndex, shardSize] = call;
  *data(out[0]) = lossScale.scale;
  return true;
}

bool CpuExecutor::kernelLossUnscale(const KernelCall &call) {
  auto &[ins, in, out, comm, error, shardIndex, shardSize] = call;
  // Each buffer (its chunk under ZeRO) times 1 / scale; 1 when any is not
  // finite (LLMOPT_TEST_OVERFLOW_STEP simulates an overflow at that step).
  float inv = 1.0f / lossScale.scale, found = 0;
  for (const Buffer &b : in) {
    Chunk c = shardChunk(b.elements, shardSize, shardIndex);
    if (ins.args.shard.empty() || isGradShard(b))
      c = {0, b.elements};
    float *x = data(b);
    for (int64_t i = c.begin; i < c.end; ++i) {
      x[i] *= inv;
      if (!std::isfinite(x[i]))
        found = 1;
    }
  }
  if (const char *at = std::getenv("LLMOPT_TEST_OVERFLOW_STEP"); at && std::atoll(at) == steps + 1)
    found = 1;
  *data(out[0]) = found;
  return true;
}

bool CpuExecutor::kernelLossScaleUpdate(const KernelCall &call) {
  auto &[ins, in, out, comm, error, shardIndex, shardSize] = call;
  bool overflow = *data(in[0]) > 0;
  lossScale.lastSkipped = overflow;
  if (overflow) {
    lossScale.scale *= 0.5f;
    lossScale.goodSteps = 0;
    ++lossScale.skipped;
  } else if (++lossScale.goodSteps >= LossScaleState::kGrowthInterval) {
    lossScale.scale *= 2.0f;
    lossScale.goodSteps = 0;
  }
  return true;
}

bool CpuExecutor::kernelAdamW(const KernelCall &call) {
  auto &[ins, in, out, comm, error, shardIndex, shardSize] = call;
  // Under loss scaling a non-finite gradient anywhere skips every update.
  if (in.size() > 2 && *data(in[2]) > 0)
    return true;
  ParamState &st = params[ins.args.param];
  k::AdamWParams p;
  p.lr = float(ins.args.lr);
  p.beta1 = float(ins.args.beta1);
  p.beta2 = float(ins.args.beta2);
  p.eps = float(ins.args.eps);
  p.weightDecay = float(ins.args.weight_decay);
  double maxNorm = ins.args.max_norm;
  float norm = *data(in[1]);
  if (maxNorm > 0)
    p.gradScale = float(std::min(1.0, maxNorm / (double(norm) + 1e-6)));
  p.step = steps + 1 - lossScale.skipped;
  // The gradient: whole, or (ZeRO-2/3) this rank's chunk alone.
  bool chunkGrad = isGradShard(in[0]);
  int64_t held = int64_t(st.value.size());
  bool valueOk = st.valueChunked ? held == st.shard.size()
                                 : st.shard.end <= held && (chunkGrad || held == in[0].elements);
  if (!valueOk || (chunkGrad ? st.shard.size() > in[0].elements : st.shard.end > in[0].elements) ||
      st.m.size() != size_t(st.shard.size())) {
    error = "adamw of '" + ins.args.param + "': gradient or moments do not match the parameter";
    return false;
  }
  k::adamw(st.value.data() + (st.valueChunked ? 0 : st.shard.begin),
           data(in[0]) + (chunkGrad ? 0 : st.shard.begin), st.m.data(), st.v.data(),
           st.shard.size(), p);
  return true;
}

k::AttentionShape attentionShape(const Instruction &ins, const Buffer &q, const Buffer &kv) {
  k::AttentionShape a;
  a.batch = q.shape[0];
  a.seq = q.shape[1];
  a.kvSeq = kv.shape[1];
  a.heads = int64_t(ins.args.heads);
  a.kvHeads = int64_t(ins.args.kv_heads);
  a.headDim = int64_t(ins.args.head_dim);
  a.scale = float(ins.args.scale);
  a.causal = ins.args.causal;
  a.window = int64_t(ins.args.window);
  return a;
}

} // namespace llmopt::runtime
