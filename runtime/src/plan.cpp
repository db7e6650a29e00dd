//===- plan.cpp - loading and validating a plan directory -----------------===//

#include "llmopt-runtime/plan.h"
#include "llmopt-runtime/file.h"
#include "llmopt-runtime/plan_limits.h"
#include "llmopt-runtime/sha256.h"

#include <algorithm>
#include <functional>
#include <set>

namespace llmopt::runtime {

int64_t bytesOf(DType d) {
  switch (d) {
  case DType::F32:
  case DType::I32:
    return 4;
  case DType::BF16:
  case DType::F16:
    return 2;
  case DType::I64:
    return 8;
  }
  return 4;
}

const Buffer &Instruction::moeIndices() const {
  using K = kernels::KernelId;
  return kernel->id == K::MoECombineFwd ? ins[2] : kernel->id == K::MoECombineBwd ? ins[3] : ins[1];
}

const Buffer &Instruction::moeRows() const {
  using K = kernels::KernelId;
  switch (kernel->id) {
  case K::MoEDispatchFwd:
    return outs[0];
  case K::MoECombineBwd:
    return ins[1];
  default: // dispatch backward, combine
    return ins[0];
  }
}

const Program *Plan::programFor(int rank) const {
  for (const Program &p : programs)
    for (int r : p.ranks)
      if (r == rank)
        return &p;
  return nullptr;
}

int64_t Program::maxInFlight() const {
  return std::max<int64_t>(1, schedule::maxInFlight(order, numChunks()));
}

int64_t Program::numChunks() const {
  int64_t n = 1;
  for (const ChunkStart &c : chunks)
    n = std::max(n, c.chunk + 1);
  return n;
}

int Plan::axisSize(const std::string &name) const {
  auto it = mesh.find(name);
  return it == mesh.end() ? 1 : it->second;
}

bool Plan::hasAxis(const std::string &axis) const {
  return mesh.count(axis) || (axis == "pp_tied" && axisSize("pp") > 1) ||
         (axis == "edp" && axisSize("ep") > 1);
}

bool Plan::place(const std::string &axis, int rank, int &index, int &size) const {
  int dp = axisSize("dp"), tp = axisSize("tp"), pp = axisSize("pp"), ep = axisSize("ep"),
      cp = axisSize("cp");
  if (pp * dp * cp * tp != worldSize || dp % ep != 0)
    return false;
  int dpIndex = (rank / (cp * tp)) % dp;
  if (axis == "dp")
    size = dp, index = dpIndex;
  else if (axis == "tp")
    size = tp, index = rank % tp;
  else if (axis == "cp")
    size = cp, index = (rank / tp) % cp;
  else if (axis == "pp")
    size = pp, index = rank / (dp * cp * tp);
  else if (axis == "ep")
    size = ep, index = dpIndex % ep;
  else if (axis == "edp")
    size = dp / ep, index = dpIndex / ep;
  else
    return false;
  return true;
}

bool Plan::place(const std::string &axis, int rank, int &index, int &size,
                 std::string &error) const {
  if (place(axis, rank, index, size))
    return true;
  error = "the runtime runs pp x dp x cp x tp meshes (ep dividing dp); cannot place axis '" + axis +
          "'";
  return false;
}

const ParamSpec *Plan::param(const std::string &name) const {
  for (const ParamSpec &p : params)
    if (p.name == name)
      return &p;
  return nullptr;
}

namespace {

struct Checker {
  std::string &error;
  bool fail(const std::string &where, const std::string &msg) {
    if (error.empty())
      error = where + ": " + msg;
    return false;
  }

  /// A fused kernel's body: row-wise kernels over its buffers (first its
  /// ins, then its outs, then its temporaries).
  bool fused(const json::Value &iv, const std::string &iw, Instruction &ins) {
    if (!string(iv.get("name"), iw + ".name", ins.fusedName))
      return false;
    const json::Value *temps = iv.get("temps"), *body = iv.get("body");
    if (!temps || !temps->isArray())
      return fail(iw + ".temps", "must be an array of shapes");
    for (size_t t = 0; t < temps->array.size(); ++t) {
      std::vector<int64_t> shape;
      if (!temps->array[t].isArray())
        return fail(iw + ".temps[" + std::to_string(t) + "]", "must be a shape");
      int64_t elements = 1;
      for (const json::Value &d : temps->array[t].array) {
        int64_t n = 0;
        if (!integer(&d, iw + ".temps[" + std::to_string(t) + "]", n, 1))
          return false;
        if (n > (int64_t(1) << 40) / elements)
          return fail(iw + ".temps[" + std::to_string(t) + "]", "is too large");
        elements *= n;
        shape.push_back(n);
      }
      ins.temps.push_back(shape);
    }
    if (!body || !body->isArray() || body->array.empty())
      return fail(iw + ".body", "must be a non-empty array of kernels");
    size_t refs = ins.ins.size() + ins.outs.size() + ins.temps.size();
    auto bufferOf = [&](int64_t r) {
      if (size_t(r) < ins.ins.size())
        return ins.ins[size_t(r)];
      if (size_t(r) < ins.ins.size() + ins.outs.size())
        return ins.outs[size_t(r) - ins.ins.size()];
      Buffer b;
      b.space = Buffer::Space::Temp;
      b.offset = r - int64_t(ins.ins.size() + ins.outs.size());
      b.shape = ins.temps[size_t(b.offset)];
      b.dtype = DType::F32;
      b.elements = 1;
      for (int64_t d : b.shape)
        b.elements *= d;
      b.bytes = b.elements * 4;
      return b;
    };
    for (size_t k = 0; k < body->array.size(); ++k) {
      const json::Value &e = body->array[k];
      std::string ew = iw + ".body[" + std::to_string(k) + "]";
      Instruction sub;
      std::string name;
      if (!string(e.get("kernel"), ew + ".kernel", name))
        return false;
      sub.kernel = kernels::findKernel(name.c_str());
      if (!sub.kernel || !kernels::isRowWise(sub.kernel->id))
        return fail(ew + ".kernel", "'" + name + "' is not a row-wise kernel a fused kernel runs");
      for (const char *list : {"ins", "outs"}) {
        const json::Value *l = e.get(list);
        if (!l || !l->isArray())
          return fail(ew + "." + list, "must be an array of buffer numbers");
        for (const json::Value &r : l->array) {
          int64_t n = 0;
          if (!integer(&r, ew + "." + list, n))
            return false;
          if (size_t(n) >= refs)
            return fail(ew + "." + list,
                        "names buffer " + std::to_string(n) + " of " + std::to_string(refs));
          if (std::string(list) == "outs" && size_t(n) < ins.ins.size())
            return fail(ew + ".outs", "writes an input of the fused kernel");
          (std::string(list) == "ins" ? sub.ins : sub.outs).push_back(bufferOf(n));
          (std::string(list) == "ins" ? sub.insRefs : sub.outsRefs).push_back(n);
        }
      }
      if ((sub.kernel->inputs >= 0 && int(sub.ins.size()) != sub.kernel->inputs) ||
          (sub.kernel->outputs >= 0 && int(sub.outs.size()) != sub.kernel->outputs) ||
          sub.ins.empty() || sub.outs.empty())
        return fail(ew, "wrong number of buffers for '" + name + "'");
      for (const Buffer &b : sub.outs)
        if (b.elements != sub.ins[0].elements)
          return fail(ew + ".outs", "a row-wise kernel writes buffers of its input's size");
      if (std::string at, why; !decodeKernelArgs(*sub.kernel, e.get("params"), sub.args, at, why))
        return fail(ew + at, why);
      ins.body.push_back(std::move(sub));
    }
    return true;
  }

  bool integer(const json::Value *v, const std::string &where, int64_t &out, int64_t min = 0) {
    if (!v || !v->isNumber() || !v->isInteger)
      return fail(where, "must be an integer");
    if (v->integer < min)
      return fail(where, "must be at least " + std::to_string(min));
    out = v->integer;
    return true;
  }

  bool string(const json::Value *v, const std::string &where, std::string &out) {
    if (!v || !v->isString())
      return fail(where, "must be a string");
    out = v->string;
    return true;
  }

  bool dtype(const json::Value *v, const std::string &where, DType &out) {
    std::string s;
    if (!string(v, where, s))
      return false;
    static const std::map<std::string, DType> names = {{"f32", DType::F32},
                                                       {"bf16", DType::BF16},
                                                       {"f16", DType::F16},
                                                       {"i32", DType::I32},
                                                       {"i64", DType::I64}};
    auto it = names.find(s);
    if (it == names.end())
      return fail(where, "unknown dtype '" + s + "'");
    out = it->second;
    return true;
  }

  bool shape(const json::Value *v, const std::string &where, std::vector<int64_t> &out,
             int64_t &elements) {
    if (!v || !v->isArray())
      return fail(where, "must be an array of sizes");
    out.clear();
    elements = 1;
    for (const json::Value &d : v->array) {
      int64_t n = 0;
      if (!integer(&d, where, n, 1))
        return false;
      if (n > (int64_t(1) << 40) / elements)
        return fail(where, "is too large");
      out.push_back(n);
      elements *= n;
    }
    return true;
  }

  bool buffer(const json::Value &v, const std::string &where, const Plan &plan, int64_t arenaBytes,
              Buffer &b, int64_t stashBytes = 0) {
    if (!v.isObject())
      return fail(where, "a buffer must be an object");
    std::string space;
    if (!string(v.get("space"), where + ".space", space) ||
        !shape(v.get("shape"), where + ".shape", b.shape, b.elements) ||
        !dtype(v.get("dtype"), where + ".dtype", b.dtype))
      return false;
    b.bytes = b.elements * bytesOf(b.dtype);
    if (space == "arena" || space == "stash") {
      bool stash = space == "stash";
      b.space = stash ? Buffer::Space::Stash : Buffer::Space::Arena;
      if (!integer(v.get("offset"), where + ".offset", b.offset))
        return false;
      int64_t limit = stash ? stashBytes : arenaBytes;
      if (b.offset < 0 || b.offset % bytesOf(b.dtype) != 0)
        return fail(where + ".offset", "must be a non-negative multiple of the element size");
      if (b.offset + b.bytes > limit)
        return fail(where, "buffer [" + std::to_string(b.offset) + ", " +
                               std::to_string(b.offset + b.bytes) + ") overruns the " +
                               std::to_string(limit) + "-byte " + space);
    } else if (space == "input") {
      b.space = Buffer::Space::Input;
      if (!integer(v.get("offset"), where + ".offset", b.offset))
        return false;
      if (b.offset >= int64_t(plan.inputs.size()))
        return fail(where, "input " + std::to_string(b.offset) + " does not exist");
      const Buffer &in = plan.inputs[b.offset];
      if (in.shape != b.shape || in.dtype != b.dtype)
        return fail(where,
                    "does not match the shape and dtype of input " + std::to_string(b.offset));
    } else if (space == "state") {
      b.space = Buffer::Space::State;
      if (!string(v.get("name"), where + ".name", b.name))
        return false;
      const ParamSpec *p = plan.param(b.name);
      if (!p)
        return fail(where, "no parameter named '" + b.name + "'");
      if (p->shape != b.shape || p->dtype != b.dtype)
        return fail(where, "does not match parameter '" + b.name + "'");
    } else if (space == "accum") {
      b.space = Buffer::Space::Accum;
      if (!string(v.get("name"), where + ".name", b.name))
        return false;
      if (b.dtype != DType::F32)
        return fail(where, "accumulators are f32");
      if (b.name.rfind("grad:", 0) == 0) {
        const ParamSpec *p = plan.param(b.name.substr(5));
        if (!p || p->shape != b.shape)
          return fail(where, "no parameter of this shape for accumulator '" + b.name + "'");
      } else if (b.name.rfind("grad_shard:", 0) == 0) {
        // A ZeRO chunk of the gradient (its size is checked where it is
        // accumulated, against the gradient and the axis).
        const ParamSpec *p = plan.param(b.name.substr(11));
        int64_t n = 1;
        if (p)
          for (int64_t d : p->shape)
            n *= d;
        if (!p || b.shape.size() != 1 || b.shape[0] < 1 || b.shape[0] > n)
          return fail(where, "accumulator '" + b.name +
                                 "' must be a 1-D chunk of no more elements than its parameter");
      } else if (b.name != "loss" && b.name != "norm_sq_replicated" &&
                 b.name.rfind("scratch:", 0) != 0) {
        return fail(where, "unknown accumulator '" + b.name +
                               "' (loss, norm_sq_replicated, scratch:<name>, grad:<parameter>, "
                               "grad_shard:<parameter>)");
      }
    } else {
      return fail(where + ".space", "must be arena, input, state or accum, got '" + space + "'");
    }
    return true;
  }
};

} // namespace

bool parsePlan(const json::Value &root, Plan &plan, std::string &error) {
  error.clear();
  plan = Plan();
  Checker c{error};
  if (!root.isObject())
    return c.fail("plan.json", "must be a JSON object");
  std::string format;
  if (!c.string(root.get("format"), "format", format))
    return false;
  if (format != "llm-opt-plan")
    return c.fail("format", "is '" + format + "', not an llm-opt plan");
  int64_t version;
  if (!c.integer(root.get("version"), "version", version, 1))
    return false;
  if (version != 1)
    return c.fail("version", "is " + std::to_string(version) +
                                 "; this runtime reads version 1: rebuild llm-run or re-emit");
  plan.version = int(version);
  if (const json::Value *m = root.get("model"); m && m->isString())
    plan.model = m->string;
  int64_t world;
  if (!c.integer(root.get("world_size"), "world_size", world, 1))
    return false;
  plan.worldSize = int(world);
  if (root.get("micro_batch"))
    c.integer(root.get("micro_batch"), "micro_batch", plan.microBatch, 1);
  if (root.get("seq_len"))
    c.integer(root.get("seq_len"), "seq_len", plan.seqLen, 1);
  if (const json::Value *f = root.get("train_flops_per_token"); f && f->isNumber())
    plan.trainFlopsPerToken = f->number;
  if (const json::Value *mesh = root.get("mesh"); mesh && mesh->isObject())
    for (const auto &[k, v] : mesh->object) {
      int64_t n = 0;
      if (!c.integer(&v, "mesh." + k, n, 1))
        return false;
      plan.mesh[k] = int(n);
    }
  {
    // Expert parallelism subdivides dp; the other axes multiply.
    int64_t product = 1;
    for (const auto &[k, n] : plan.mesh)
      if (k != "ep")
        product *= n;
    if (plan.axisSize("dp") % plan.axisSize("ep") != 0)
      return c.fail("mesh.ep", "must divide mesh.dp (expert-parallel ranks are data-parallel "
                               "ranks)");
    if (!plan.mesh.empty() && product != plan.worldSize)
      return c.fail("world_size", "is " + std::to_string(plan.worldSize) + " but the mesh has " +
                                      std::to_string(product) + " ranks");
  }

  const json::Value *inputs = root.get("inputs");
  if (!inputs || !inputs->isArray())
    return c.fail("inputs", "must be an array");
  for (size_t i = 0; i < inputs->array.size(); ++i) {
    std::string where = "inputs[" + std::to_string(i) + "]";
    Buffer b;
    b.space = Buffer::Space::Input;
    b.offset = int64_t(i);
    if (!c.shape(inputs->array[i].get("shape"), where + ".shape", b.shape, b.elements) ||
        !c.dtype(inputs->array[i].get("dtype"), where + ".dtype", b.dtype))
      return false;
    b.bytes = b.elements * bytesOf(b.dtype);
    plan.inputs.push_back(b);
  }

  const json::Value *params = root.get("params");
  if (!params || !params->isArray())
    return c.fail("params", "must be an array");
  std::set<std::string> names;
  for (size_t i = 0; i < params->array.size(); ++i) {
    const json::Value &pv = params->array[i];
    std::string where = "params[" + std::to_string(i) + "]";
    ParamSpec p;
    if (!c.string(pv.get("name"), where + ".name", p.name) ||
        !c.shape(pv.get("shape"), where + ".shape", p.shape, p.elements) ||
        !c.dtype(pv.get("dtype"), where + ".dtype", p.dtype) ||
        !c.string(pv.get("init"), where + ".init", p.init))
      return false;
    if (p.init != "zeros" && p.init != "ones" && p.init != "normal")
      return c.fail(where + ".init", "must be zeros, ones or normal");
    if (p.init == "normal") {
      const json::Value *s = pv.get("std");
      if (!s || !s->isNumber() || !(s->number > 0))
        return c.fail(where + ".std", "normal initialization needs a positive std");
      p.stddev = s->number;
    }
    if (const json::Value *sh = pv.get("shard")) {
      std::string sw = where + ".shard";
      if (!sh->isObject())
        return c.fail(sw, "must be an object {axis, dim, blocks, parts[, whole]}");
      if (!c.string(sh->get("axis"), sw + ".axis", p.shardAxis) ||
          !c.integer(sh->get("dim"), sw + ".dim", p.shardDim, 0) ||
          !c.integer(sh->get("blocks"), sw + ".blocks", p.shardBlocks, 1) ||
          !c.integer(sh->get("parts"), sw + ".parts", p.shardParts, 1))
        return false;
      auto axis = plan.mesh.find(p.shardAxis);
      if (axis == plan.mesh.end() || axis->second != p.shardParts)
        return c.fail(sw + ".parts", "must equal the size of mesh axis '" + p.shardAxis + "'");
      if (p.shardDim >= int64_t(p.shape.size()) || p.shape[size_t(p.shardDim)] % p.shardBlocks != 0)
        return c.fail(sw, "dim out of range or not divisible into blocks");
      if (sh->get("whole")) {
        // A padded dimension (the vocabulary, one block): at most the parts'
        // rows (a small vocabulary over many ranks may leave the last
        // parts all padding).
        int64_t part = p.shape[size_t(p.shardDim)];
        if (!c.integer(sh->get("whole"), sw + ".whole", p.shardWhole, 1))
          return false;
        if (p.shardBlocks != 1 || p.shardWhole > part * p.shardParts)
          return c.fail(sw + ".whole", "must be a padded block's real size: from 1 to " +
                                           std::to_string(part * p.shardParts) +
                                           " (the parts' rows), in one block");
      }
    }
    if (!names.insert(p.name).second)
      return c.fail(where + ".name", "duplicate parameter '" + p.name + "'");
    plan.params.push_back(p);
  }

  const json::Value *programs = root.get("programs");
  if (!programs || !programs->isArray() || programs->array.empty())
    return c.fail("programs", "must be a non-empty array");
  std::set<int> covered;
  for (size_t pi = 0; pi < programs->array.size(); ++pi) {
    const json::Value &pv = programs->array[pi];
    std::string where = "programs[" + std::to_string(pi) + "]";
    Program prog;
    if (!c.string(pv.get("name"), where + ".name", prog.name) ||
        !c.integer(pv.get("arena_bytes"), where + ".arena_bytes", prog.arenaBytes))
      return false;
    if (pv.get("stash_bytes") &&
        !c.integer(pv.get("stash_bytes"), where + ".stash_bytes", prog.stashBytes))
      return false;
    if (prog.arenaBytes < 0 || prog.stashBytes < 0 ||
        prog.arenaBytes > plan_limits::kMaxArenaBytes ||
        prog.stashBytes > plan_limits::kMaxArenaBytes)
      return c.fail(where + ".arena_bytes", "arena and stash sizes must be in [0, 1 TiB]");
    const json::Value *ranks = pv.get("ranks");
    if (!ranks || !ranks->isArray())
      return c.fail(where + ".ranks", "must be an array");
    for (const json::Value &r : ranks->array) {
      int64_t rank;
      if (!c.integer(&r, where + ".ranks", rank))
        return false;
      if (rank >= plan.worldSize || !covered.insert(int(rank)).second)
        return c.fail(where + ".ranks",
                      "rank " + std::to_string(rank) + " is outside the world or listed twice");
      prog.ranks.push_back(int(rank));
    }
    const json::Value *outs = pv.get("outputs");
    if (!outs || !outs->get("loss") || !outs->get("grad_norm"))
      return c.fail(where + ".outputs", "needs loss and grad_norm buffers");
    if (!c.buffer(*outs->get("loss"), where + ".outputs.loss", plan, prog.arenaBytes, prog.loss) ||
        !c.buffer(*outs->get("grad_norm"), where + ".outputs.grad_norm", plan, prog.arenaBytes,
                  prog.gradNorm))
      return false;
    if (!c.integer(pv.get("num_micro_batches"), where + ".num_micro_batches", prog.numMicroBatches,
                   1))
      return false;
    if (pv.get("backward_start")) {
      if (!c.integer(pv.get("backward_start"), where + ".backward_start", prog.backwardStart) ||
          !c.string(pv.get("schedule"), where + ".schedule", prog.schedule))
        return false;
      if (prog.schedule != "1f1b" && prog.schedule != "gpipe" && prog.schedule != "sequential" &&
          prog.schedule != "interleaved")
        return c.fail(where + ".schedule", "must be 1f1b, gpipe, interleaved or sequential");
    }
    if (const json::Value *cs = pv.get("chunks")) {
      if (!cs->isArray())
        return c.fail(where + ".chunks", "must be an array of {chunk, begin}");
      int64_t last = -1;
      for (size_t i = 0; i < cs->array.size(); ++i) {
        std::string cw = where + ".chunks[" + std::to_string(i) + "]";
        Program::ChunkStart start;
        if (!c.integer(cs->array[i].get("chunk"), cw + ".chunk", start.chunk) ||
            !c.integer(cs->array[i].get("begin"), cw + ".begin", start.begin))
          return false;
        if (start.begin < last)
          return c.fail(cw + ".begin", "must not precede the previous chunk's");
        last = start.begin;
        prog.chunks.push_back(start);
      }
    }
    if (const json::Value *ord = pv.get("order")) {
      if (!ord->isArray())
        return c.fail(where + ".order", "must be an array of [micro_batch, chunk, backward]");
      for (size_t i = 0; i < ord->array.size(); ++i) {
        const json::Value &e = ord->array[i];
        std::string ow = where + ".order[" + std::to_string(i) + "]";
        int64_t m = 0, ch = 0, b = 0;
        if (!e.isArray() || e.array.size() != 3 || !c.integer(&e.array[0], ow, m) ||
            !c.integer(&e.array[1], ow, ch) || !c.integer(&e.array[2], ow, b) || b > 1)
          return c.fail(ow, "must be [micro_batch, chunk, backward (0 or 1)]");
        prog.order.push_back({m, ch, b == 1});
      }
    }
    if (prog.schedule == "interleaved" && prog.chunks.empty())
      return c.fail(where + ".chunks", "an interleaved schedule needs the stage's chunks");
    std::set<int64_t> started, waited;                 // gradient buckets
    std::map<int64_t, size_t> gatherStart, gatherWait; // prefetch events
    struct ScatterBucket {                             // ZeRO-2/3 gradient buckets
      size_t first = 0;
      int64_t members = 0;
      std::string axis, reduce;
      bool flushed = false;
    };
    std::map<int64_t, ScatterBucket> scatterBuckets;
    // Whether instructions (first, last] cross a part of the schedule
    // (backward_start or a chunk's begin): what starts in one part must end
    // in it.
    auto crossesPart = [&](size_t first, size_t last) {
      auto crosses = [&](int64_t boundary) {
        return int64_t(first) < boundary && boundary <= int64_t(last);
      };
      bool crossing = crosses(prog.backwardStart);
      for (const Program::ChunkStart &cs : prog.chunks)
        crossing |= crosses(cs.begin);
      return crossing;
    };
    for (const char *phase : {"micro_batch_instructions", "step_instructions"}) {
      const json::Value *instrs = pv.get(phase);
      if (!instrs || !instrs->isArray())
        return c.fail(where + "." + phase, "must be an array");
      std::vector<Instruction> &list =
          std::string(phase) == "step_instructions" ? prog.step : prog.microBatch;
      for (size_t ii = 0; ii < instrs->array.size(); ++ii) {
        const json::Value &iv = instrs->array[ii];
        std::string iw = where + "." + phase + "[" + std::to_string(ii) + "]";
        Instruction ins;
        auto bufferList = [&](const char *key, std::vector<Buffer> &out) {
          const json::Value *list = iv.get(key);
          if (!list || !list->isArray())
            return c.fail(iw + "." + key, "must be an array of buffers");
          for (size_t bi = 0; bi < list->array.size(); ++bi) {
            Buffer b;
            if (!c.buffer(list->array[bi], iw + "." + key + "[" + std::to_string(bi) + "]", plan,
                          prog.arenaBytes, b, prog.stashBytes))
              return false;
            out.push_back(b);
          }
          return true;
        };
        if (const json::Value *k = iv.get("kernel")) {
          if (!k->isString())
            return c.fail(iw + ".kernel", "must be a string");
          ins.kernel = kernels::findKernel(k->string.c_str());
          if (!ins.kernel)
            return c.fail(iw + ".kernel", "unknown kernel '" + k->string + "'");
          if (!bufferList("ins", ins.ins) || !bufferList("outs", ins.outs))
            return false;
          if ((ins.kernel->inputs >= 0 && int(ins.ins.size()) != ins.kernel->inputs) ||
              (ins.kernel->outputs >= 0 && int(ins.outs.size()) != ins.kernel->outputs))
            return c.fail(iw,
                          std::string("wrong number of buffers for '") + ins.kernel->name + "'");
          for (const Buffer &b : ins.outs)
            if (b.space == Buffer::Space::Input)
              return c.fail(iw + ".outs", "a kernel must not write a step input");
          if (std::string at, why;
              !decodeKernelArgs(*ins.kernel, iv.get("params"), ins.args, at, why))
            return c.fail(iw + at, why);
          if (ins.kernel->id == kernels::KernelId::Fused && !c.fused(iv, iw, ins))
            return false;
          if (ins.kernel->id == kernels::KernelId::AdamW && !plan.param(ins.args.param))
            return c.fail(iw + ".params.param", "no parameter named '" + ins.args.param + "'");
          for (const auto &[key, axis] : axisArgs(ins.args))
            if (!plan.hasAxis(axis))
              return c.fail(iw + ".params." + key, "no mesh axis '" + axis + "'");
          if (std::string why; !checkKernel(ins, why))
            return c.fail(iw, std::string(ins.kernel->name) + ": " + why);
          for (size_t si = 0; si < ins.body.size(); ++si)
            if (std::string why; !checkKernel(ins.body[si], why))
              return c.fail(iw + ".body[" + std::to_string(si) + "]",
                            std::string(ins.body[si].kernel->name) + ": " + why);
        } else if (const json::Value *col = iv.get("collective");
                   col && col->isString() && col->string == "param_gather") {
          ins.kind = Instruction::Kind::ParamGather;
          std::string param;
          if (!c.string(iv.get("axis"), iw + ".axis", ins.axis) ||
              !c.string(iv.get("param"), iw + ".param", param) ||
              !bufferList("buffers", ins.buffers))
            return false;
          const ParamSpec *spec = plan.param(param);
          if (!spec)
            return c.fail(iw + ".param", "no parameter named '" + param + "'");
          if (!plan.hasAxis(ins.axis))
            return c.fail(iw + ".axis", "no mesh axis '" + ins.axis + "'");
          Buffer::Space space = ins.buffers.empty() ? Buffer::Space::Input : ins.buffers[0].space;
          if (ins.buffers.size() != 1 ||
              (space != Buffer::Space::Arena && space != Buffer::Space::Stash) ||
              ins.buffers[0].elements != spec->elements)
            return c.fail(iw + ".buffers", "one arena buffer the size of '" + param + "'");
          ins.args.param = param;
          if (iv.get("event")) {
            int64_t event = 0;
            if (!c.integer(iv.get("event"), iw + ".event", event))
              return false;
            if (&list != &prog.microBatch)
              return c.fail(iw,
                            "a prefetched param_gather belongs to the micro-batch instructions");
            if (event < 0 || event > (int64_t(1) << 30) || !gatherStart.emplace(event, ii).second)
              return c.fail(iw + ".event", "must be a new non-negative event number");
            ins.event = int(event);
          }
        } else if (const json::Value *col = iv.get("collective");
                   col && col->isString() && col->string == "param_wait") {
          ins.kind = Instruction::Kind::ParamWait;
          int64_t event = 0;
          if (!c.integer(iv.get("event"), iw + ".event", event))
            return false;
          if (&list != &prog.microBatch)
            return c.fail(iw, "param_wait belongs to the micro-batch instructions");
          auto started = gatherStart.find(event);
          if (started == gatherStart.end() || !gatherWait.emplace(event, ii).second)
            return c.fail(iw + ".event", "waits for event " + std::to_string(event) +
                                             ", which no earlier param_gather started or "
                                             "another param_wait already waited for");
          // Start and wait run in one part of the schedule (no backward or
          // chunk boundary between them).
          if (crossesPart(started->second, ii))
            return c.fail(iw + ".event", "waits across a schedule boundary (backward_start or a "
                                         "chunk's begin) from its param_gather");
          ins.event = int(event);
        } else if (const json::Value *col = iv.get("collective");
                   col && col->isString() && (col->string == "send" || col->string == "recv")) {
          ins.kind = col->string == "send" ? Instruction::Kind::Send : Instruction::Kind::Recv;
          int64_t peer = 0;
          if (!c.integer(iv.get("peer"), iw + ".peer", peer) || !bufferList("buffers", ins.buffers))
            return false;
          int pp = plan.axisSize("pp");
          if (peer >= pp)
            return c.fail(iw + ".peer", "no pipeline stage " + std::to_string(peer) + " of " +
                                            std::to_string(pp));
          ins.peer = int(peer);
          if (iv.get("tag")) {
            int64_t tag = 0;
            if (!c.integer(iv.get("tag"), iw + ".tag", tag))
              return false;
            // MPI guarantees tags up to 32767; ring attention uses 32000.
            if (tag >= 32000)
              return c.fail(iw + ".tag", "must be below 32000 (ring attention's tag)");
            ins.tag = int(tag);
          }
          ins.axis = "pp";
          if (ins.buffers.size() != 1 ||
              (ins.kind == Instruction::Kind::Recv && ins.buffers[0].space == Buffer::Space::Input))
            return c.fail(iw + ".buffers", "one buffer, not a step input for recv");
        } else if (const json::Value *col = iv.get("collective");
                   col && col->isString() && col->string == "grad_reduce_scatter") {
          ins.kind = Instruction::Kind::GradReduceScatter;
          if (!c.string(iv.get("axis"), iw + ".axis", ins.axis) ||
              !c.string(iv.get("reduce"), iw + ".reduce", ins.reduce) ||
              !bufferList("ins", ins.ins) || !bufferList("outs", ins.outs))
            return false;
          if (&list != &prog.microBatch)
            return c.fail(iw, "grad_reduce_scatter belongs to the micro-batch instructions");
          if (ins.axis != "dp" && ins.axis != "edp")
            return c.fail(iw + ".axis", "must be dp or edp");
          if (!plan.hasAxis(ins.axis))
            return c.fail(iw + ".axis", "no mesh axis '" + ins.axis + "'");
          if (ins.reduce != "sum" && ins.reduce != "avg")
            return c.fail(iw + ".reduce", "must be sum or avg");
          int64_t d = plan.axisSize("dp") / (ins.axis == "edp" ? plan.axisSize("ep") : 1);
          if (ins.ins.size() == 1 && ins.ins[0].space != Buffer::Space::Arena &&
              ins.ins[0].space != Buffer::Space::Stash)
            return c.fail(iw + ".ins[0]", "the gradient must be an arena or stash buffer");
          if (ins.ins.size() != 1 || ins.outs.size() != 1 || !isGradShard(ins.outs[0]) ||
              ins.outs[0].elements != (ins.ins[0].elements + d - 1) / d)
            return c.fail(iw,
                          "takes one gradient and one grad_shard: accumulator of its ceil(n / " +
                              std::to_string(d) + ") elements");
          // A bucket: its members (same axis and reduction) in one part of
          // the schedule, the last one marked `flush`.
          if (const json::Value *bv = iv.get("bucket")) {
            int64_t bucket = 0;
            if (!c.integer(bv, iw + ".bucket", bucket))
              return false;
            if (bucket > (int64_t(1) << 30))
              return c.fail(iw + ".bucket", "must be below 2^30");
            if (const json::Value *fv = iv.get("flush")) {
              if (!fv->isBool())
                return c.fail(iw + ".flush", "must be true or false");
              ins.flush = fv->boolean;
            }
            ScatterBucket &sb = scatterBuckets[bucket];
            if (sb.flushed)
              return c.fail(iw + ".bucket",
                            "bucket " + std::to_string(bucket) + " was already flushed");
            if (sb.members++ == 0) {
              sb.first = ii;
              sb.axis = ins.axis;
              sb.reduce = ins.reduce;
            } else if (sb.axis != ins.axis || sb.reduce != ins.reduce) {
              return c.fail(iw, "differs from bucket " + std::to_string(bucket) +
                                    "'s other members in axis or reduce");
            }
            if (ins.flush) {
              if (crossesPart(sb.first, ii))
                return c.fail(iw + ".bucket", "bucket " + std::to_string(bucket) +
                                                  " spans a schedule boundary (backward_start or "
                                                  "a chunk's begin)");
              sb.flushed = true;
            }
            ins.bucket = int(bucket);
          } else if (iv.get("flush")) {
            return c.fail(iw + ".flush", "flush without a bucket");
          }
        } else if (const json::Value *col = iv.get("collective");
                   col && col->isString() && col->string.rfind("seq_", 0) == 0) {
          ins.kind = col->string == "seq_all_gather"          ? Instruction::Kind::SeqAllGather
                     : col->string == "seq_reduce_scatter"    ? Instruction::Kind::SeqReduceScatter
                     : col->string == "seq_split"             ? Instruction::Kind::SeqSplit
                     : col->string == "seq_cp_all_gather"     ? Instruction::Kind::CPAllGather
                     : col->string == "seq_cp_reduce_scatter" ? Instruction::Kind::CPReduceScatter
                                                              : Instruction::Kind::Kernel;
          if (ins.kind == Instruction::Kind::Kernel)
            return c.fail(iw + ".collective",
                          "must be seq_all_gather, seq_reduce_scatter, seq_split, "
                          "seq_cp_all_gather or seq_cp_reduce_scatter");
          if (!c.string(iv.get("axis"), iw + ".axis", ins.axis) || !bufferList("ins", ins.ins) ||
              !bufferList("outs", ins.outs))
            return false;
          if (!plan.hasAxis(ins.axis))
            return c.fail(iw + ".axis", "no mesh axis '" + ins.axis + "'");
          int parts = plan.mesh.at(ins.axis);
          if (ins.ins.size() != 1 || ins.outs.size() != 1 || ins.ins[0].shape.size() != 3 ||
              ins.outs[0].shape.size() != 3 || ins.outs[0].space == Buffer::Space::Input)
            return c.fail(iw, "takes one [b, s, h] input and one output buffer");
          bool gathers = ins.kind == Instruction::Kind::SeqAllGather ||
                         ins.kind == Instruction::Kind::CPAllGather;
          const Buffer &whole = gathers ? ins.outs[0] : ins.ins[0],
                       &chunk = gathers ? ins.ins[0] : ins.outs[0];
          if (whole.shape[0] != chunk.shape[0] || whole.shape[2] != chunk.shape[2] ||
              whole.shape[1] != chunk.shape[1] * parts)
            return c.fail(iw, "the sequence is not " + std::to_string(parts) +
                                  " chunks of the other buffer's");
        } else if (const json::Value *col = iv.get("collective");
                   col && col->isString() && col->string.rfind("cp_ring_attention_", 0) == 0) {
          bool fwd = col->string == "cp_ring_attention_fwd";
          if (!fwd && col->string != "cp_ring_attention_bwd")
            return c.fail(iw + ".collective", "must be cp_ring_attention_fwd or _bwd");
          ins.kind =
              fwd ? Instruction::Kind::CPRingAttentionFwd : Instruction::Kind::CPRingAttentionBwd;
          if (!c.string(iv.get("axis"), iw + ".axis", ins.axis) || !bufferList("ins", ins.ins) ||
              !bufferList("outs", ins.outs))
            return false;
          if (!plan.hasAxis(ins.axis))
            return c.fail(iw + ".axis", "no mesh axis '" + ins.axis + "'");
          if (ins.ins.size() != (fwd ? 3u : 5u) || ins.outs.size() != (fwd ? 1u : 3u))
            return c.fail(iw, fwd ? "takes q, k, v and writes out"
                                  : "takes dout, q, k, v, out and writes dq, dk, dv");
          for (const Buffer &b : ins.ins)
            if (b.shape.size() != 3 || b.shape[1] % 2 != 0)
              return c.fail(iw + ".ins", "needs [b, s, h] buffers of two sequence chunks");
          // The attention kernel's parameters.
          const kernels::KernelInfo &attn =
              *kernels::findKernel(fwd ? "attention_fwd" : "attention_bwd");
          if (std::string at, why; !decodeKernelArgs(attn, iv.get("params"), ins.args, at, why))
            return c.fail(iw + at, why);
          if (ins.args.heads < 1 || ins.args.kv_heads < 1 || ins.args.head_dim < 1 ||
              int64_t(ins.args.heads) % int64_t(ins.args.kv_heads) != 0)
            return c.fail(iw + ".params", "needs heads, kv_heads (dividing heads) and head_dim");
        } else if (const json::Value *col = iv.get("collective");
                   col && col->isString() && col->string.rfind("ep_", 0) == 0) {
          ins.kind = col->string == "ep_dispatch"  ? Instruction::Kind::EPDispatch
                     : col->string == "ep_combine" ? Instruction::Kind::EPCombine
                                                   : Instruction::Kind::Kernel;
          if (ins.kind == Instruction::Kind::Kernel)
            return c.fail(iw + ".collective", "must be ep_dispatch or ep_combine");
          if (!c.string(iv.get("axis"), iw + ".axis", ins.axis) || !bufferList("ins", ins.ins) ||
              !bufferList("outs", ins.outs))
            return false;
          if (!plan.hasAxis(ins.axis))
            return c.fail(iw + ".axis", "no mesh axis '" + ins.axis + "'");
          int parts = plan.axisSize(ins.axis);
          if (ins.ins.size() != 1 || ins.outs.size() != 1 || ins.ins[0].shape.size() != 3 ||
              ins.outs[0].shape.size() != 3 || ins.outs[0].space == Buffer::Space::Input ||
              ins.ins[0].dtype != ins.outs[0].dtype)
            return c.fail(iw, "takes one [E, C, h] and one [E/t, t C, h] buffer of one dtype");
          bool dispatch = ins.kind == Instruction::Kind::EPDispatch;
          const Buffer &rows = dispatch ? ins.ins[0] : ins.outs[0],
                       &share = dispatch ? ins.outs[0] : ins.ins[0];
          if (rows.shape[0] != share.shape[0] * parts || rows.shape[2] != share.shape[2] ||
              share.shape[1] != rows.shape[1] * parts)
            return c.fail(iw, "the expert rows are not " + std::to_string(parts) +
                                  " shares of the other buffer's");
        } else if (const json::Value *col = iv.get("collective");
                   col && col->isString() && col->string == "bucket_wait") {
          ins.kind = Instruction::Kind::BucketWait;
          int64_t bucket = 0;
          if (!c.integer(iv.get("bucket"), iw + ".bucket", bucket))
            return false;
          if (std::string(phase) != "step_instructions")
            return c.fail(iw, "bucket_wait belongs to the step instructions");
          if (!started.count(bucket) || !waited.insert(bucket).second)
            return c.fail(iw + ".bucket", "waits for bucket " + std::to_string(bucket) +
                                              ", which is not started or already waited for");
          ins.bucket = int(bucket);
        } else if (const json::Value *col = iv.get("collective")) {
          if (!col->isString() ||
              (col->string != "all_reduce" && col->string != "reduce_scatter" &&
               col->string != "all_gather" && col->string != "bucket_all_reduce"))
            return c.fail(iw + ".collective",
                          "must be all_reduce, bucket_all_reduce, bucket_wait, reduce_scatter, "
                          "all_gather, param_gather, param_wait, send, recv, seq_* or ep_*");
          ins.kind = col->string == "all_reduce"          ? Instruction::Kind::AllReduce
                     : col->string == "bucket_all_reduce" ? Instruction::Kind::BucketAllReduce
                     : col->string == "reduce_scatter"    ? Instruction::Kind::ReduceScatter
                                                          : Instruction::Kind::AllGather;
          if (ins.kind == Instruction::Kind::BucketAllReduce) {
            int64_t bucket = 0;
            if (!c.integer(iv.get("bucket"), iw + ".bucket", bucket))
              return false;
            if (std::string(phase) != "micro_batch_instructions")
              return c.fail(iw, "bucket_all_reduce belongs to the micro-batch instructions");
            if (!started.insert(bucket).second)
              return c.fail(iw + ".bucket", "bucket " + std::to_string(bucket) + " starts twice");
            ins.bucket = int(bucket);
          }
          if (!c.string(iv.get("axis"), iw + ".axis", ins.axis) ||
              (ins.kind != Instruction::Kind::AllGather &&
               !c.string(iv.get("reduce"), iw + ".reduce", ins.reduce)) ||
              !bufferList("buffers", ins.buffers))
            return false;
          if (ins.kind != Instruction::Kind::AllGather && ins.reduce != "sum" &&
              ins.reduce != "avg")
            return c.fail(iw + ".reduce", "must be sum or avg");
          for (const Buffer &b : ins.buffers)
            if (b.space == Buffer::Space::Input)
              return c.fail(iw + ".buffers", "a collective must not write a step input");
          // A bucket's reduction arrives in its buffers when the bucket is
          // waited on: 16-bit buffers, reduced through fp32 copies rounded
          // back at once, would not get it.
          if (ins.kind == Instruction::Kind::BucketAllReduce)
            for (const Buffer &b : ins.buffers)
              if (b.dtype != DType::F32)
                return c.fail(iw + ".buffers",
                              "a bucketed all-reduce reduces fp32 buffers (gradient "
                              "accumulators) only");
          // pp_tied: the first and last pipeline stage (a shared weight).
          if (!plan.hasAxis(ins.axis))
            return c.fail(iw + ".axis", "no mesh axis '" + ins.axis + "'");
        } else {
          return c.fail(iw, "is neither a kernel nor a collective");
        }
        // The step phase runs once, after every micro-batch: no micro-batch's
        // tokens or labels are its to read.
        if (&list == &prog.step) {
          std::function<bool(const Instruction &)> readsInput = [&](const Instruction &i) {
            for (const std::vector<Buffer> *bufs : {&i.ins, &i.outs, &i.buffers})
              for (const Buffer &b : *bufs)
                if (b.space == Buffer::Space::Input)
                  return true;
            for (const Instruction &sub : i.body)
              if (readsInput(sub))
                return true;
            return false;
          };
          if (readsInput(ins))
            return c.fail(iw, "a step instruction reads a micro-batch input (tokens or labels)");
        }
        list.push_back(std::move(ins));
      }
    }
    if (started.size() != waited.size())
      return c.fail(where + ".step_instructions", "does not wait for every gradient bucket");
    for (const auto &[bucket, sb] : scatterBuckets)
      if (!sb.flushed)
        return c.fail(where + ".micro_batch_instructions",
                      "gradient bucket " + std::to_string(bucket) + " has no flush member");
    // ZeRO-2/3 gradient chunks: one size per accumulator, and the update
    // shards over the axis the chunk was scattered over.
    std::map<std::string, std::pair<std::string, int64_t>> chunkOf;
    for (const Instruction &ins : prog.microBatch)
      if (ins.kind == Instruction::Kind::GradReduceScatter) {
        auto [it, fresh] = chunkOf.insert({ins.outs[0].name, {ins.axis, ins.outs[0].elements}});
        if (!fresh && it->second != std::make_pair(ins.axis, ins.outs[0].elements))
          return c.fail(where + ".micro_batch_instructions",
                        "accumulator '" + ins.outs[0].name +
                            "' is scattered over different axes or sizes");
      }
    for (const std::vector<Instruction> *list : {&prog.microBatch, &prog.step})
      for (const Instruction &ins : *list)
        for (const std::vector<Buffer> *bufs : {&ins.ins, &ins.outs, &ins.buffers})
          for (const Buffer &b : *bufs) {
            if (!isGradShard(b))
              continue;
            auto it = chunkOf.find(b.name);
            if (it == chunkOf.end() || it->second.second != b.elements)
              return c.fail(where, "accumulator '" + b.name +
                                       "' is used without (or with another size than) the "
                                       "grad_reduce_scatter that fills it");
            if (ins.kind == Instruction::Kind::Kernel &&
                ins.kernel->id == kernels::KernelId::AdamW && ins.args.shard != it->second.first)
              return c.fail(where, "adamw of '" + ins.args.param +
                                       "' shards over another axis than its gradient chunk (" +
                                       it->second.first + ")");
          }
    if (gatherStart.size() != gatherWait.size())
      return c.fail(where + ".micro_batch_instructions",
                    "does not wait for every prefetched param_gather");
    if (prog.backwardStart > int64_t(prog.microBatch.size()))
      return c.fail(where + ".backward_start", "is past the micro-batch instructions");
    if (!prog.order.empty()) {
      // Every part exactly once, each chunk's backward after its forward.
      int64_t chunks = prog.numChunks(), micro = prog.numMicroBatches;
      std::vector<int> seen(size_t(micro * chunks * 2), 0);
      if (int64_t(prog.order.size()) != micro * chunks * 2)
        return c.fail(where + ".order", "must list each of the " + std::to_string(micro) +
                                            " micro-batches' " + std::to_string(chunks * 2) +
                                            " parts once");
      for (size_t i = 0; i < prog.order.size(); ++i) {
        const Program::Part &p = prog.order[i];
        std::string ow = where + ".order[" + std::to_string(i) + "]";
        if (p.microBatch >= micro || p.chunk >= chunks)
          return c.fail(ow, "names micro-batch " + std::to_string(p.microBatch) + " chunk " +
                                std::to_string(p.chunk) + " of " + std::to_string(micro) + " x " +
                                std::to_string(chunks));
        size_t at = size_t((p.microBatch * chunks + p.chunk) * 2 + (p.backward ? 1 : 0));
        if (seen[at]++)
          return c.fail(ow, "repeats a part");
        if (p.backward && !seen[at - 1])
          return c.fail(ow, "runs a backward before its forward");
      }
    }
    if (!prog.chunks.empty() && prog.chunks.back().begin > int64_t(prog.microBatch.size()))
      return c.fail(where + ".chunks", "a chunk begins past the micro-batch instructions");
    if (prog.numChunks() > 64)
      return c.fail(where + ".chunks", "more than 64 model chunks on one stage");
    plan.programs.push_back(std::move(prog));
  }
  if (int(covered.size()) != plan.worldSize)
    return c.fail("programs", "cover " + std::to_string(covered.size()) + " of " +
                                  std::to_string(plan.worldSize) + " ranks");
  return verifyPlanInvariants(plan, error);
}

bool readFile(const std::string &path, std::string &out) {
  std::string ignored;
  return readRegularFile(path, out, ignored);
}

bool loadPlan(const std::string &dir, Plan &plan, std::string &error) {
  std::string text, sums, why;
  // A FIFO or a device in the plan's place is refused before it is read (it
  // used to block, or read without end).
  bool notRegular = false;
  if (!readRegularFile(dir + "/plan.json", text, why, &notRegular)) {
    error = dir + "/plan.json: " + (notRegular ? why : "cannot read it") + " (is '" + dir +
            "' a plan directory?)";
    return false;
  }
  if (!readRegularFile(dir + "/checksums.sha256", sums, why, &notRegular)) {
    error = dir + "/checksums.sha256: " + (notRegular ? why : "missing") +
            "; refusing an unchecked plan";
    return false;
  }
  // One "<64 hex>  <name>" line per file, each name once: a second,
  // contradictory line is tampering, not a choice.
  std::map<std::string, std::string> listed;
  {
    size_t at = 0;
    while (at < sums.size()) {
      size_t end = sums.find('\n', at);
      std::string line = sums.substr(at, end == std::string::npos ? std::string::npos : end - at);
      at = end == std::string::npos ? sums.size() : end + 1;
      if (line.empty())
        continue;
      size_t sep = line.find("  ");
      std::string hex = line.substr(0, sep),
                  name = sep == std::string::npos ? "" : line.substr(sep + 2);
      bool isHex =
          hex.size() == 64 && hex.find_first_not_of("0123456789abcdef") == std::string::npos;
      if (!isHex || name.empty()) {
        error = dir + "/checksums.sha256: malformed line '" + line + "'";
        return false;
      }
      if (!listed.emplace(name, hex).second) {
        error = dir + "/checksums.sha256: lists '" + name + "' twice";
        return false;
      }
    }
  }
  if (!listed.count("plan.json")) {
    error = dir + "/checksums.sha256: malformed (no plan.json line)";
    return false;
  }
  std::string want = listed["plan.json"];
  std::string digest = sha256Hex(text);
  if (digest != want) {
    error = dir + "/plan.json: checksum mismatch: the file is truncated or was modified";
    return false;
  }
  json::Value root;
  std::string jsonError;
  if (!json::parse(text, root, jsonError)) {
    error = dir + "/plan.json: " + jsonError;
    return false;
  }
  if (!parsePlan(root, plan, error)) {
    error = dir + "/plan.json: " + error;
    return false;
  }
  plan.text = std::move(text);
  plan.sha256 = std::move(digest);
  // kernels.cu, where listed, is not read: the fused kernels are generated
  // from plan.json's description of them (fused_library.h).
  return true;
}

} // namespace llmopt::runtime
