//===- plan_invariants.cpp - what keeps a plan's ranks alike --------------===//
//
// Nothing but the plan decides what the ranks exchange: a plan.json edited by
// hand (its checksum recomputed) without its gradient all-reduce loads, runs,
// and trains replicas that drift apart. This pass refuses such a plan before
// anything runs. It interprets each program abstractly over one lattice: for
// every value, the set of mesh axes over which it may differ between ranks
// that are otherwise alike (a bit per axis: dp is ep and edp together).
//
//   sources      the step's inputs differ over dp and cp (each rank's own
//                sequences or chunks) and between pipeline stages (pp); a
//                parameter over the axis it is split on (tp, ep) and, where
//                the program param_gathers it (ZeRO-3), its chunks' axis; a
//                kernel with a `shard` or `cp` parameter adds that axis (it
//                reads its rank's index on it).
//   kernels      an output differs where any input does (a fused kernel's
//                body entry by entry).
//   collectives  all-reduce, reduce-scatter, all-gather, param_gather and
//                the sequence gathers over A remove A (a bucketed
//                all-reduce in the last micro-batch); a sequence
//                reduce-scatter or split, ring attention and the experts'
//                exchanges add A (each rank keeps its own part); a recv
//                differs as the matching send did (the stages are iterated
//                to a fixed point).
//
// The micro-batch instructions run twice (a micro-batch before the last, in
// which buckets wait, and the last), then the step instructions, and it
// requires:
//   - adamw reads a gradient alike over every axis its parameter is
//     replicated over (dp, cp and tp, less the axis the parameter is split
//     on and its ZeRO-3 chunks' axis, plus pp_tied for a weight two stages
//     hold), and with `shard: A` one reduced over A;
//   - the norm adamw clips by and the overflow flags adamw and
//     loss_scale_update read are alike on every rank;
//   - each parameter ends the step alike on its replicas (a ZeRO-1/2 update
//     is all-gathered);
//   - no kernel reads the parameter a program param_gathers (the rank holds
//     its chunk), and each param_gather is over the axis its update is
//     sharded over;
//   - every arena or stash read is of bytes that one earlier instruction of
//     the same micro-batch (or step phase) wrote as exactly that buffer:
//     nothing is read before it is made (a gathered copy before its
//     param_gather, a sequence before its gather).
//
// Every plan llm-opt writes satisfies these by construction (the lit suite
// lowers and loads some two hundred); what they cannot see is a wrong value
// that is wrong alike on every rank.
//
//===----------------------------------------------------------------------===//

#include "llmopt-runtime/plan.h"

#include <map>
#include <set>
#include <tuple>

namespace llmopt::runtime {
namespace {

using kernels::KernelId;
using K = Instruction::Kind;

/// Mesh axes as bits; dp is ep and edp together (ep 1: edp is dp).
using Axes = unsigned;
constexpr Axes kEP = 1, kEDP = 2, kCP = 4, kTP = 8, kPP = 16;
constexpr Axes kDP = kEP | kEDP;

/// The byte ranges of an arena or a stash: how each was last written.
class Spans {
public:
  struct Span {
    int64_t end;
    Axes axes;
    int64_t writer; // the instruction's index in its list
  };

  void clear() { spans.clear(); }

  void write(int64_t begin, int64_t end, Axes axes, int64_t writer) {
    auto it = first(begin);
    std::vector<std::pair<int64_t, Span>> kept;
    while (it != spans.end() && it->first < end) {
      if (it->first < begin)
        kept.push_back({it->first, {begin, it->second.axes, it->second.writer}});
      if (it->second.end > end)
        kept.push_back({end, it->second});
      it = spans.erase(it);
    }
    spans.insert(kept.begin(), kept.end());
    spans[begin] = {end, axes, writer};
  }

  /// How [begin, end) differs; `exact` when one write made exactly these
  /// bytes; `writer` the last writer of the first bytes written (-1: none).
  Axes read(int64_t begin, int64_t end, bool &exact, int64_t &writer) const {
    Axes axes = 0;
    int n = 0;
    exact = false;
    writer = -1;
    for (auto it = first(begin); it != spans.end() && it->first < end; ++it, ++n) {
      axes |= it->second.axes;
      if (n == 0) {
        exact = it->first == begin && it->second.end == end;
        writer = it->second.writer;
      }
    }
    exact = exact && n == 1;
    return axes;
  }

private:
  /// The first span that ends after `begin`.
  std::map<int64_t, Span>::const_iterator first(int64_t begin) const {
    auto it = spans.upper_bound(begin);
    if (it != spans.begin() && std::prev(it)->second.end > begin)
      --it;
    return it;
  }
  std::map<int64_t, Span>::iterator first(int64_t begin) {
    auto it = spans.upper_bound(begin);
    if (it != spans.begin() && std::prev(it)->second.end > begin)
      --it;
    return it;
  }
  std::map<int64_t, Span> spans;
};

enum class Pass { EarlierMicroBatch, LastMicroBatch, Step };

struct Verifier {
  const Plan &plan;
  std::string &error;
  /// The axes of more than one rank.
  Axes mask = 0;
  /// Report errors (the last round, once the stages' transfers are known).
  bool report = false;
  /// What each send carried: (from stage, to stage, tag, n-th such send).
  std::map<std::tuple<int, int, int, int>, Axes> sent;
  bool sentGrew = false;
  /// Parameters two programs (pipeline stages) update: a tied weight.
  std::set<std::string> tied;

  // The program being interpreted.
  const Program *prog = nullptr;
  std::string where;
  int stage = 0;
  std::map<std::string, Axes> state, accum;
  /// Parameters the program param_gathers (held as ZeRO-3 chunks), with
  /// the axis; the axis each adamw shards its update over.
  std::map<std::string, std::string> chunkAxis, updateShard;
  Spans arena, stash;
  std::map<std::tuple<int, int, int>, int> transfers;

  bool fail(const std::string &at, const std::string &msg) {
    if (report && error.empty())
      error = at + ": " + msg;
    return !report;
  }
  /// A flag or norm that differs (reported after the step phase: an
  /// unreduced gradient that makes it differ is named first).
  std::string deferred;
  void defer(const std::string &at, const std::string &msg) {
    if (report && deferred.empty())
      deferred = at + ": " + msg;
  }

  Axes bitsOf(const std::string &axis) const {
    Axes a = axis == "dp"                        ? kDP
             : axis == "ep"                      ? kEP
             : axis == "edp"                     ? kEDP
             : axis == "cp"                      ? kCP
             : axis == "tp"                      ? kTP
             : axis == "pp" || axis == "pp_tied" ? kPP
                                                 : 0;
    return a & mask;
  }

  std::string names(Axes a, bool tiedWeight = false) const {
    std::vector<std::string> out;
    Axes dp = kDP & mask;
    if (dp && (a & dp) == dp) {
      out.push_back("dp");
    } else {
      if (a & kEP)
        out.push_back("ep");
      if (a & kEDP)
        out.push_back("edp");
    }
    if (a & kCP)
      out.push_back("cp");
    if (a & kTP)
      out.push_back("tp");
    if (a & kPP)
      out.push_back(tiedWeight ? "pp_tied" : "pp");
    std::string s;
    for (size_t i = 0; i < out.size(); ++i)
      s += (i == 0 ? "" : i + 1 == out.size() ? " and " : ", ") + out[i];
    return s;
  }

  /// The axes over which parameter `name` has replicas (ranks holding the
  /// same values) in this program.
  Axes replicas(const std::string &name) const {
    Axes r = kDP | kCP | kTP;
    if (const ParamSpec *p = plan.param(name); p && p->shardDim >= 0)
      r &= ~bitsOf(p->shardAxis);
    if (auto it = chunkAxis.find(name); it != chunkAxis.end())
      r &= ~bitsOf(it->second);
    if (tied.count(name))
      r |= kPP;
    return r & mask;
  }

  static std::string space(const Buffer &b) {
    return b.space == Buffer::Space::Stash ? "stash" : "arena";
  }

  /// How `b` differs between ranks; checks that an arena or stash read is
  /// of bytes one earlier instruction of this pass wrote as `b`.
  Axes read(const Buffer &b, const std::string &at, const char *list) {
    switch (b.space) {
    case Buffer::Space::Arena:
    case Buffer::Space::Stash: {
      bool exact = false;
      int64_t writer = -1;
      Axes a = (b.space == Buffer::Space::Stash ? stash : arena)
                   .read(b.offset, b.offset + b.bytes, exact, writer);
      if (!exact) {
        std::string bytes = space(b) + " bytes [" + std::to_string(b.offset) + ", " +
                            std::to_string(b.offset + b.bytes) + ")";
        if (writer < 0)
          fail(at, "reads " + bytes + " before any instruction of the " + phase() +
                       " wrote them: a value is read before it is made");
        else
          fail(at, "reads " + bytes + " that no earlier instruction of the " + phase() +
                       " wrote as this buffer (the last to write over them was " + list + "[" +
                       std::to_string(writer) + "]): a value is read before it is made");
      }
      return a;
    }
    case Buffer::Space::Input:
      return (kDP | kCP | kPP) & mask;
    case Buffer::Space::State: {
      auto it = state.find(b.name);
      return it == state.end() ? 0 : it->second;
    }
    case Buffer::Space::Accum: {
      auto it = accum.find(b.name);
      return it == accum.end() ? 0 : it->second;
    }
    case Buffer::Space::Temp:
      return 0;
    }
    return 0;
  }

  void write(const Buffer &b, Axes a, int64_t writer) {
    a &= mask;
    switch (b.space) {
    case Buffer::Space::Arena:
      arena.write(b.offset, b.offset + b.bytes, a, writer);
      break;
    case Buffer::Space::Stash:
      stash.write(b.offset, b.offset + b.bytes, a, writer);
      break;
    case Buffer::Space::State:
      state[b.name] = a;
      break;
    case Buffer::Space::Accum:
      accum[b.name] = a;
      break;
    default:
      break;
    }
  }

  Pass pass = Pass::Step;
  const char *list() const {
    return pass == Pass::Step ? "step_instructions" : "micro_batch_instructions";
  }
  const char *phase() const { return pass == Pass::Step ? "step phase" : "micro-batch"; }

  bool kernel(const Instruction &ins, const std::string &iw, int64_t index) {
    const KernelArgs &args = ins.args;
    std::vector<Axes> in;
    for (size_t i = 0; i < ins.ins.size(); ++i) {
      const Buffer &b = ins.ins[i];
      std::string at = iw + ".ins[" + std::to_string(i) + "]";
      if (b.space == Buffer::Space::State && chunkAxis.count(b.name) &&
          !fail(at, "reads parameter '" + b.name +
                        "' itself, of which each rank holds only its ZeRO-3 chunk (the program "
                        "param_gathers it): a kernel reads its gathered copy"))
        return false;
      in.push_back(read(b, at, list()));
      if (!error.empty())
        return false;
    }
    Axes extra = bitsOf(args.shard) | bitsOf(args.cp);
    switch (ins.kernel->id) {
    case KernelId::AdamW: {
      if (in.size() < 2)
        return true;
      const std::string &p = args.param;
      Axes rep = replicas(p), grad = in[0], norm = args.max_norm > 0 ? in[1] : 0,
           found = in.size() > 2 ? in[2] : 0;
      bool isTied = tied.count(p) > 0;
      if (pass == Pass::Step) {
        std::string apart = names(grad & rep, isTied);
        if ((grad & rep) &&
            !fail(iw, "the gradient of '" + p + "' is not reduced over " + apart +
                          " before its adamw, but the parameter is replicated over " + apart +
                          ": its replicas would train apart"))
          return false;
        if ((grad & bitsOf(args.shard)) &&
            !fail(iw, "adamw of '" + p + "' updates its chunk over " + args.shard +
                          " from a gradient not reduced over " + names(grad & bitsOf(args.shard))))
          return false;
        if (norm)
          defer(iw, "adamw of '" + p + "' clips by a gradient norm that differs over " +
                        names(norm) + " (not all-reduced over " + names(norm) + ")");
        if (found)
          defer(iw, "adamw of '" + p + "' skips by an overflow flag that differs over " +
                        names(found) + " (not all-reduced over " + names(found) + ")");
      }
      state[p] |= (grad | norm | found | extra) & mask;
      return true;
    }
    case KernelId::LossScaleUpdate:
      if (!in.empty() && in[0])
        defer(iw, "loss_scale_update reads an overflow flag that differs over " + names(in[0]) +
                      ": the ranks' loss scales would drift apart");
      return true;
    case KernelId::Fused: {
      size_t nIn = ins.ins.size(), nOut = ins.outs.size();
      std::vector<Axes> refs(nIn + nOut + ins.temps.size(), 0);
      for (size_t i = 0; i < nIn; ++i)
        refs[i] = in[i];
      for (const Instruction &sub : ins.body) {
        Axes a = bitsOf(sub.args.shard) | bitsOf(sub.args.cp);
        for (int64_t r : sub.insRefs)
          if (size_t(r) < refs.size())
            a |= refs[size_t(r)];
        for (int64_t r : sub.outsRefs)
          if (size_t(r) < refs.size())
            refs[size_t(r)] = a;
      }
      for (size_t o = 0; o < nOut; ++o)
        write(ins.outs[o], refs[nIn + o], index);
      return true;
    }
    default:
      break;
    }
    Axes a = extra;
    for (Axes x : in)
      a |= x;
    for (const Buffer &b : ins.outs) {
      Axes prior = 0;
      if (args.accumulate && b.space == Buffer::Space::Accum)
        prior = read(b, iw, list());
      write(b, a | prior, index);
    }
    return true;
  }

  bool collective(const Instruction &ins, const std::string &iw, int64_t index) {
    Axes axis = bitsOf(ins.axis);
    auto readAll = [&](const std::vector<Buffer> &bufs, const char *key) {
      Axes a = 0;
      for (size_t i = 0; i < bufs.size(); ++i)
        a |= read(bufs[i], iw + "." + key + "[" + std::to_string(i) + "]", list());
      return a;
    };
    switch (ins.kind) {
    case K::AllReduce:
    case K::ReduceScatter:
    case K::AllGather:
    case K::BucketAllReduce:
      for (size_t i = 0; i < ins.buffers.size(); ++i) {
        const Buffer &b = ins.buffers[i];
        Axes a = read(b, iw + ".buffers[" + std::to_string(i) + "]", list());
        // A bucket reduces in the step's last micro-batch only.
        if (ins.kind != K::BucketAllReduce || pass == Pass::LastMicroBatch)
          write(b, a & ~axis, index);
      }
      break;
    case K::GradReduceScatter:
      if (ins.ins.size() == 1 && ins.outs.size() == 1) {
        Axes a = readAll(ins.ins, "ins") & ~axis;
        auto it = accum.find(ins.outs[0].name);
        write(ins.outs[0], a | (it == accum.end() ? 0 : it->second), index);
      }
      break;
    case K::ParamGather:
      if (ins.buffers.size() == 1) {
        const std::string &p = ins.args.param;
        auto shard = updateShard.find(p);
        if (shard == updateShard.end() || shard->second != ins.axis) {
          std::string why = shard == updateShard.end()
                                ? "whose update is not sharded (ZeRO-3 gathers parameters its "
                                  "adamw updates a chunk of)"
                                : "whose update is sharded over " + shard->second;
          if (!fail(iw, "param_gather of '" + p + "' over " + ins.axis + ", " + why))
            return false;
        }
        write(ins.buffers[0], state[p] & ~axis, index);
      }
      break;
    case K::SeqAllGather:
    case K::CPAllGather: {
      Axes a = readAll(ins.ins, "ins") & ~axis;
      for (const Buffer &b : ins.outs)
        write(b, a, index);
      break;
    }
    case K::SeqReduceScatter:
    case K::SeqSplit:
    case K::CPReduceScatter:
    case K::CPRingAttentionFwd:
    case K::CPRingAttentionBwd:
    case K::EPDispatch:
    case K::EPCombine: {
      Axes a = readAll(ins.ins, "ins") | axis;
      for (const Buffer &b : ins.outs)
        write(b, a, index);
      break;
    }
    case K::Send:
    case K::Recv: {
      bool send = ins.kind == K::Send;
      int n = transfers[{send ? 0 : 1, ins.peer, ins.tag}]++;
      auto key = send ? std::make_tuple(stage, ins.peer, ins.tag, n)
                      : std::make_tuple(ins.peer, stage, ins.tag, n);
      if (ins.buffers.empty())
        break;
      if (send) {
        Axes a = read(ins.buffers[0], iw + ".buffers[0]", list());
        Axes &s = sent[key];
        if ((s | a) != s) {
          s |= a;
          sentGrew = true;
        }
      } else {
        auto it = sent.find(key);
        write(ins.buffers[0], it == sent.end() ? 0 : it->second, index);
      }
      break;
    }
    case K::BucketWait:
    case K::ParamWait:
    case K::Kernel:
      break;
    }
    return error.empty() || !report;
  }

  bool run(const std::vector<Instruction> &list, Pass p) {
    pass = p;
    arena.clear();
    stash.clear();
    transfers.clear();
    for (size_t i = 0; i < list.size(); ++i) {
      const Instruction &ins = list[i];
      std::string iw = where + "." + this->list() + "[" + std::to_string(i) + "]";
      bool ok =
          ins.kind == K::Kernel ? kernel(ins, iw, int64_t(i)) : collective(ins, iw, int64_t(i));
      if (!ok || (report && !error.empty()))
        return false;
    }
    return true;
  }

  bool program(size_t pi) {
    prog = &plan.programs[pi];
    where = "programs[" + std::to_string(pi) + "]";
    int size = 1;
    stage = 0;
    if (!prog->ranks.empty() && !plan.place("pp", prog->ranks[0], stage, size))
      stage = 0;
    chunkAxis.clear();
    updateShard.clear();
    for (const Instruction &ins : prog->microBatch)
      if (ins.kind == K::ParamGather)
        chunkAxis.emplace(ins.args.param, ins.axis);
    for (const Instruction &ins : prog->step)
      if (ins.kind == K::Kernel && ins.kernel->id == KernelId::AdamW && !ins.args.shard.empty())
        updateShard[ins.args.param] = ins.args.shard;
    state.clear();
    accum.clear();
    for (const ParamSpec &p : plan.params) {
      Axes a = p.shardDim >= 0 ? bitsOf(p.shardAxis) : 0;
      if (auto it = chunkAxis.find(p.name); it != chunkAxis.end())
        a |= bitsOf(it->second);
      state[p.name] = a;
    }
    deferred.clear();
    if (!run(prog->microBatch, Pass::EarlierMicroBatch) ||
        !run(prog->microBatch, Pass::LastMicroBatch) || !run(prog->step, Pass::Step))
      return false;
    if (!deferred.empty()) {
      error = deferred;
      return false;
    }
    // Replicas start the step alike and must end it so.
    for (const Instruction &ins : prog->step) {
      if (ins.kind != K::Kernel || ins.kernel->id != KernelId::AdamW)
        continue;
      const std::string &p = ins.args.param;
      Axes apart = state[p] & replicas(p);
      if (!apart)
        continue;
      std::string why = "parameter '" + p + "' ends the step different on its replicas over " +
                        names(apart, tied.count(p) > 0);
      if (apart & bitsOf(ins.args.shard))
        why += " (its update is sharded over " + ins.args.shard + " but not all-gathered)";
      if (!fail(where, why))
        return false;
    }
    return true;
  }

  bool verify() {
    int ep = plan.axisSize("ep"), dp = plan.axisSize("dp");
    mask = (ep > 1 ? kEP : 0) | (ep > 0 && dp / ep > 1 ? kEDP : 0) |
           (plan.axisSize("cp") > 1 ? kCP : 0) | (plan.axisSize("tp") > 1 ? kTP : 0) |
           (plan.axisSize("pp") > 1 ? kPP : 0);
    std::map<std::string, int> updaters;
    bool transfersSeen = false;
    for (const Program &p : plan.programs) {
      std::set<std::string> mine;
      for (const Instruction &ins : p.step)
        if (ins.kind == K::Kernel && ins.kernel->id == KernelId::AdamW)
          mine.insert(ins.args.param);
      for (const std::string &name : mine)
        ++updaters[name];
      for (const Instruction &ins : p.microBatch)
        transfersSeen |= ins.kind == K::Send || ins.kind == K::Recv;
    }
    for (const auto &[name, n] : updaters)
      if (n > 1)
        tied.insert(name);
    // What the stages send one another grows to a fixed point (each round
    // can only add axes, five of them per transfer), then a last round
    // reports.
    report = false;
    for (int round = 0; transfersSeen && round < 64; ++round) {
      sentGrew = false;
      for (size_t pi = 0; pi < plan.programs.size(); ++pi)
        program(pi);
      if (!sentGrew)
        break;
    }
    report = true;
    for (size_t pi = 0; pi < plan.programs.size(); ++pi)
      if (!program(pi))
        return false;
    return true;
  }
};

} // namespace

bool verifyPlanInvariants(const Plan &plan, std::string &error) {
  error.clear();
  Verifier v{plan, error};
  return v.verify() && error.empty();
}

} // namespace llmopt::runtime
