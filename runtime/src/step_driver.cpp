//===- step_driver.cpp - one training step, for every backend -------------===//

#include "llmopt-runtime/step_driver.h"

#include "llmopt-runtime/schedule.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace llmopt::runtime {

bool StepDriver::init(const Plan &p, const Program &prog, int r, std::string &error) {
  plan = &p;
  program = &prog;
  rank = r;
  gathers.clear();
  scatters.clear();
  scatterOf.clear();
  openBuckets.clear();
  runningBuckets.clear();
  nextScatter = 0;
  // A pipeline stage runs its parts in the plan's order (older plans name
  // only the schedule: the order is the shared schedule's) and keeps one
  // arena per micro-batch in flight.
  numSlots = 1;
  order.clear();
  if (prog.backwardStart < 0)
    return true;
  order = prog.order;
  if (order.empty()) {
    int stage = 0, stages = 1;
    if (!axis("pp", stage, stages, error))
      return false;
    schedule::Kind kind;
    if (!schedule::parse(prog.schedule, kind)) {
      error = "unknown pipeline schedule '" + prog.schedule +
              "': use 1f1b, gpipe, interleaved or sequential";
      return false;
    }
    order = schedule::stageOrder(kind, prog.numMicroBatches, stages, stage, prog.numChunks());
    if (order.empty()) {
      error = "stage " + std::to_string(stage) + " of " + std::to_string(stages) +
              " cannot lay out " + std::to_string(prog.numMicroBatches) + " micro-batches of " +
              std::to_string(prog.numChunks()) + " chunks in the " + prog.schedule + " schedule";
      return false;
    }
  }
  numSlots = size_t(std::max<int64_t>(1, schedule::maxInFlight(order, prog.numChunks())));
  return true;
}

bool StepDriver::axis(const std::string &name, int &index, int &size, std::string &error) const {
  return plan->place(name, rank, index, size, error);
}

bool StepDriver::runs(Instruction::Kind kind) {
  using K = Instruction::Kind;
  switch (kind) {
  case K::AllReduce:
  case K::BucketAllReduce:
  case K::BucketWait:
  case K::ReduceScatter:
  case K::AllGather:
  case K::ParamGather:
  case K::ParamWait:
  case K::GradReduceScatter:
  case K::Send:
  case K::Recv:
  case K::SeqAllGather:
  case K::SeqReduceScatter:
  case K::SeqSplit:
  case K::CPAllGather:
  case K::CPReduceScatter:
  case K::EPDispatch:
  case K::EPCombine:
  case K::CPRingAttentionFwd:
  case K::CPRingAttentionBwd:
    return true;
  default:
    return false;
  }
}

bool StepDriver::drain(Communicator &comm, std::string &error) {
  // Nothing of an earlier (failed) step may still be in flight: complete and
  // drop it before its buffers are reused.
  for (auto &[event, g] : gathers)
    if (!comm.waitAllGather(event, error))
      return false;
  gathers.clear();
  for (auto &[handle, s] : scatters)
    if (!comm.waitReduceScatter(s.handle, error))
      return false;
  for (int bucket : runningBuckets)
    if (!comm.waitAllReduce(bucket, error))
      return false;
  runningBuckets.clear();
  scatters.clear();
  scatterOf.clear();
  openBuckets.clear();
  nextScatter = 0;
  // Sends still held by the communicator.
  return comm.flush(error);
}

bool StepDriver::step(StepBackend &backend, const std::vector<std::vector<int32_t>> &tok,
                      const std::vector<std::vector<int32_t>> &lab, Communicator &comm,
                      std::string &error) {
  if (int64_t(tok.size()) != program->numMicroBatches || tok.size() != lab.size()) {
    error = "the plan runs " + std::to_string(program->numMicroBatches) + " micro-batches per step";
    return false;
  }
  if (!drain(comm, error))
    return false;
  if (!backend.clearAccumulators(error))
    return false;
  for (size_t i = 0; i < tok.size(); ++i) {
    if (plan->inputs.size() < 2 || int64_t(tok[i].size()) != plan->inputs[0].elements ||
        int64_t(lab[i].size()) != plan->inputs[1].elements) {
      error = "each micro-batch needs " + std::to_string(plan->inputs[0].elements) +
              " tokens and labels per rank";
      return false;
    }
  }
  // The micro-batch instructions as ranges per model chunk and half
  // (forward, backward): one chunk and two halves unless the stage is
  // interleaved.
  size_t n = program->microBatch.size();
  size_t half = program->backwardStart >= 0 ? size_t(program->backwardStart) : n;
  int64_t chunks = program->numChunks();
  std::vector<std::vector<std::pair<size_t, size_t>>> ranges(size_t(2 * chunks));
  {
    std::vector<size_t> cuts = {0, half, n};
    for (const Program::ChunkStart &c : program->chunks)
      cuts.push_back(size_t(c.begin));
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    for (size_t i = 0; i + 1 < cuts.size(); ++i) {
      int64_t chunk = 0;
      for (const Program::ChunkStart &c : program->chunks)
        if (size_t(c.begin) <= cuts[i])
          chunk = c.chunk;
      ranges[size_t(2 * chunk + (cuts[i] >= half ? 1 : 0))].push_back({cuts[i], cuts[i + 1]});
    }
  }
  // Chunk c's forward (or backward) part of micro-batch m in arena slot `slot`.
  auto runPart = [&](int64_t m, int64_t c, bool backward, size_t slot) {
    microBatch = m;
    if (!backend.select(tok[size_t(m)], lab[size_t(m)], slot, error))
      return false;
    for (auto [begin, end] : ranges[size_t(2 * c + (backward ? 1 : 0))])
      if (!runRange(backend, program->microBatch, begin, end, comm, error))
        return false;
    return true;
  };
  int64_t micro = program->numMicroBatches;
  if (order.empty()) {
    // No pipeline: each micro-batch whole, forward then backward.
    for (int64_t m = 0; m < micro; ++m)
      for (bool backward : {false, true})
        for (int64_t c = 0; c < chunks; ++c)
          if (!runPart(m, backward ? chunks - 1 - c : c, backward, size_t(m) % numSlots))
            return false;
  } else {
    // The stage's order; each micro-batch takes a free arena slot when it
    // starts and gives it back after its last part.
    std::vector<int64_t> left(size_t(micro), 2 * chunks), slotOf(size_t(micro), -1);
    std::vector<size_t> freeSlots;
    for (size_t i = numSlots; i-- > 0;)
      freeSlots.push_back(i);
    for (const Program::Part &p : order) {
      int64_t &own = slotOf[size_t(p.microBatch)];
      if (own < 0) {
        if (freeSlots.empty()) {
          error = "the schedule keeps more micro-batches in flight than the stage has arena "
                  "copies";
          return false;
        }
        own = int64_t(freeSlots.back());
        freeSlots.pop_back();
      }
      if (!runPart(p.microBatch, p.chunk, p.backward, size_t(own)))
        return false;
      if (--left[size_t(p.microBatch)] == 0)
        freeSlots.push_back(size_t(own));
    }
  }
  // The step phase in slot 0; it reads no micro-batch input, so the last
  // micro-batch's stay (a backend that uploads them need not again).
  if (!backend.select(tok.back(), lab.back(), 0, error) || !finishScatters(backend, comm, error) ||
      !runRange(backend, program->step, 0, program->step.size(), comm, error))
    return false;
  return comm.flush(error);
}

bool StepDriver::runRange(StepBackend &backend, const std::vector<Instruction> &list, size_t begin,
                          size_t end, Communicator &comm, std::string &error) {
  for (size_t k = begin; k < end;) {
    if (runs(list[k].kind)) {
      if (!run(backend, list[k], comm, error))
        return false;
      ++k;
      continue;
    }
    size_t j = k;
    while (j < end && !runs(list[j].kind))
      ++j;
    if (!backend.computeRun(&list[k], j - k, comm, error))
      return false;
    k = j;
  }
  return true;
}

bool StepDriver::run(StepBackend &backend, const Instruction &ins, Communicator &comm,
                     std::string &error) {
  if (!runs(ins.kind))
    return backend.compute(ins, comm, error);
  if (!backend.widen(ins, error))
    return false;
  bool ok = move(backend, ins, comm, error);
  // Rounded back (and the copies released) whatever happened; the first
  // error is the one reported.
  std::string narrowError;
  bool back = backend.narrow(ins, narrowError);
  if (ok && !back)
    error = narrowError;
  return ok && back;
}

bool StepDriver::finishScatter(StepBackend &backend, const std::string &accum, Communicator &comm,
                               std::string &error) {
  auto of = scatterOf.find(accum);
  if (of == scatterOf.end())
    return true;
  auto it = scatters.find(of->second);
  PendingScatter &p = it->second;
  if (!comm.waitReduceScatter(p.handle, error))
    return false;
  // The accumulators looked up now (not when the scatter started).
  int64_t at = 0;
  for (const Buffer &b : p.accums) {
    if (!backend.addScaled(backend.data(b), p.mine.p + at, p.scale, b.elements, error))
      return false;
    at += b.elements;
    scatterOf.erase(b.name);
  }
  scatters.erase(it);
  return true;
}

bool StepDriver::finishScatters(StepBackend &backend, Communicator &comm, std::string &error) {
  if (!openBuckets.empty()) {
    error = "gradient bucket " + std::to_string(openBuckets.begin()->first) +
            " was never flushed: its gradients would be lost";
    return false;
  }
  // In the order they were started (every rank alike).
  while (!scatters.empty())
    if (!finishScatter(backend, scatters.begin()->second.accums.front().name, comm, error))
      return false;
  nextScatter = 0;
  return true;
}

bool StepDriver::startScatter(StepBackend &backend, PendingScatter p, const std::string &axis,
                              Communicator &comm, std::string &error) {
  p.handle = nextScatter++;
  for (const Buffer &b : p.accums)
    scatterOf[b.name] = p.handle;
  PendingScatter &q = scatters[p.handle] = std::move(p);
  return comm.startReduceScatterBlocks(axis, q.all.p, q.mine.p, q.mine.n, q.handle, error);
}

bool StepDriver::move(StepBackend &backend, const Instruction &ins, Communicator &comm,
                      std::string &error) {
  using K = Instruction::Kind;
  switch (ins.kind) {
  case K::AllReduce:
    for (const Buffer &b : ins.buffers)
      if (!comm.allReduce(ins.axis, backend.data(b), b.elements, ins.reduce == "avg", error))
        return false;
    return true;
  case K::BucketAllReduce:
    // Gradients are complete only after the step's last micro-batch.
    if (microBatch + 1 < program->numMicroBatches)
      return true;
    runningBuckets.insert(ins.bucket);
    for (const Buffer &b : ins.buffers)
      if (!comm.startAllReduce(ins.axis, backend.data(b), b.elements, ins.reduce == "avg",
                               ins.bucket, error))
        return false;
    return true;
  case K::BucketWait:
    runningBuckets.erase(ins.bucket);
    return comm.waitAllReduce(ins.bucket, error);
  case K::ReduceScatter:
    for (const Buffer &b : ins.buffers)
      if (!comm.reduceScatter(ins.axis, backend.data(b), b.elements, ins.reduce == "avg", error))
        return false;
    return true;
  case K::AllGather:
    for (const Buffer &b : ins.buffers)
      if (!comm.allGather(ins.axis, backend.data(b), b.elements, error))
        return false;
    return true;
  case K::ParamGather: {
    // Every rank's chunk (padded to ceil(n / size)) gathered, then trimmed.
    const float *value = nullptr;
    int64_t count = 0;
    if (!backend.paramValue(ins.args.param, value, count, error))
      return false;
    int index = 0, size = 1;
    if (!axis(ins.axis, index, size, error))
      return false;
    const Buffer &out = ins.buffers[0];
    int64_t n = out.elements, c = (n + size - 1) / size;
    if (count > c) {
      error = "parameter '" + ins.args.param + "': a chunk of " + std::to_string(count) +
              " elements where the gather expects at most " + std::to_string(c);
      return false;
    }
    PendingGather g;
    g.out = out;
    if (!backend.allocate(c, g.mine, error) || !backend.allocate(c * size, g.all, error) ||
        !backend.copy(g.mine.p, value, count, error))
      return false;
    if (ins.event < 0)
      return comm.allGatherBlocks(ins.axis, g.mine.p, g.all.p, c, error) &&
             backend.copy(backend.data(out), g.all.p, n, error);
    // A prefetch: the buffers stay where they are until the wait.
    PendingGather &pending = gathers[ins.event] = std::move(g);
    return comm.startAllGatherBlocks(ins.axis, pending.mine.p, pending.all.p, c, ins.event, error);
  }
  case K::ParamWait: {
    auto it = gathers.find(ins.event);
    if (it == gathers.end()) {
      error = "param_wait for event " + std::to_string(ins.event) + " that was not started";
      return false;
    }
    if (!comm.waitAllGather(ins.event, error))
      return false;
    // Written now (in the buffer's dtype), not through the instruction's copy.
    bool stored = backend.store(it->second.out, it->second.all.p, error);
    gathers.erase(it);
    return stored;
  }
  case K::GradReduceScatter: {
    // The gradient zero-padded to d chunks and reduced over the axis, started
    // non-blocking (the gradient's arena buffer is free at once); this rank's
    // chunk is added into the accumulator when it completes. In a bucket,
    // the padded copies wait for the bucket's last member, which starts one
    // reduce-scatter of every member's chunks (rank r's chunks side by side
    // in block r).
    int index = 0, size = 1;
    if (!axis(ins.axis, index, size, error))
      return false;
    const Buffer &g = ins.ins[0], &acc = ins.outs[0];
    if (!finishScatter(backend, acc.name, comm, error))
      return false;
    int64_t c = acc.elements;
    float scale = ins.reduce == "avg" ? 1.0f / float(size) : 1.0f;
    BackendFloats padded;
    if (!backend.allocate(c * size, padded, error) ||
        !backend.copy(padded.p, backend.data(g), g.elements, error))
      return false;
    if (ins.bucket < 0) {
      PendingScatter p;
      p.all = std::move(padded);
      if (!backend.allocate(c, p.mine, error))
        return false;
      p.accums = {acc};
      p.scale = scale;
      return startScatter(backend, std::move(p), ins.axis, comm, error);
    }
    OpenBucket &b = openBuckets[ins.bucket];
    b.axis = ins.axis;
    b.size = size;
    b.scale = scale;
    b.accums.push_back(acc);
    b.pieces.push_back(std::move(padded));
    if (!ins.flush)
      return true;
    PendingScatter p;
    int64_t total = 0;
    for (const Buffer &m : b.accums)
      total += m.elements;
    if (!backend.allocate(total * size, p.all, error) || !backend.allocate(total, p.mine, error))
      return false;
    float *out = p.all.p;
    for (int r = 0; r < size; ++r)
      for (size_t m = 0; m < b.accums.size(); ++m) {
        int64_t cm = b.accums[m].elements;
        if (!backend.copy(out, b.pieces[m].p + r * cm, cm, error))
          return false;
        out += cm;
      }
    p.accums = std::move(b.accums);
    p.scale = b.scale;
    std::string ax = b.axis;
    openBuckets.erase(ins.bucket);
    return startScatter(backend, std::move(p), ax, comm, error);
  }
  case K::Send:
  case K::Recv: {
    int stage = 0, stages = 1;
    if (!axis("pp", stage, stages, error))
      return false;
    int peer = rank + (ins.peer - stage) * (plan->worldSize / stages);
    const Buffer &b = ins.buffers[0];
    return ins.kind == K::Send ? comm.send(peer, ins.tag, backend.data(b), b.elements, error)
                               : comm.recv(peer, ins.tag, backend.data(b), b.elements, error);
  }
  case K::SeqAllGather:
  case K::SeqReduceScatter:
  case K::SeqSplit:
  case K::CPAllGather:
  case K::CPReduceScatter:
    return sequence(backend, ins, comm, error);
  case K::EPDispatch:
  case K::EPCombine:
    return experts(backend, ins, comm, error);
  case K::CPRingAttentionFwd:
  case K::CPRingAttentionBwd:
    return ringAttention(backend, ins, comm, error);
  default:
    error = "the step driver does not move data for this instruction";
    return false;
  }
}

/// The strided copies `copies` (layouts.h) from src to dst on `backend`.
static bool copyAll(StepBackend &backend, float *dst, const float *src,
                    const std::vector<StridedCopy> &copies, std::string &error) {
  for (const StridedCopy &copy : copies)
    if (!backend.copyStrided(dst, src, copy, error))
      return false;
  return true;
}

bool StepDriver::sequence(StepBackend &backend, const Instruction &ins, Communicator &comm,
                          std::string &error) {
  using K = Instruction::Kind;
  int index = 0, parts = 1;
  if (!axis(ins.axis, index, parts, error))
    return false;
  bool gathers = ins.kind == K::SeqAllGather || ins.kind == K::CPAllGather;
  bool balanced = ins.kind == K::CPAllGather || ins.kind == K::CPReduceScatter;
  const Buffer &whole = gathers ? ins.outs[0] : ins.ins[0],
               &chunk = gathers ? ins.ins[0] : ins.outs[0];
  if (whole.shape.size() != 3 || chunk.shape.size() != 3 ||
      whole.shape[1] != chunk.shape[1] * parts) {
    error = "a sequence collective over '" + ins.axis + "' whose whole is not " +
            std::to_string(parts) + " chunks of [batch, seq, hidden]";
    return false;
  }
  int64_t batch = whole.shape[0], c = chunk.shape[1], h = whole.shape[2];
  int64_t block = batch * c * h;
  const float *in = backend.data(ins.ins[0]);
  float *out = backend.data(ins.outs[0]);
  // Rank-major blocks [parts][batch][c][h] <-> the position-ordered whole.
  auto place = [&](int64_t r, float *dst, const float *src, bool toWhole) {
    return copyAll(backend, dst, src, sequenceCopies(r, parts, batch, c, h, balanced, toWhole),
                   error);
  };
  if (ins.kind == K::SeqSplit)
    return place(index, out, in, /*toWhole=*/false);
  BackendFloats blocks;
  if (!backend.allocate(block * parts, blocks, error))
    return false;
  if (gathers) {
    if (!comm.allGatherBlocks(ins.axis, in, blocks.p, block, error))
      return false;
    for (int64_t r = 0; r < parts; ++r)
      if (!place(r, out, blocks.p + r * block, /*toWhole=*/true))
        return false;
    return true;
  }
  for (int64_t r = 0; r < parts; ++r)
    if (!place(r, blocks.p + r * block, in, /*toWhole=*/false))
      return false;
  return comm.reduceScatterBlocks(ins.axis, blocks.p, out, block, error);
}

bool StepDriver::experts(StepBackend &backend, const Instruction &ins, Communicator &comm,
                         std::string &error) {
  int index = 0, parts = 1;
  if (!axis(ins.axis, index, parts, error))
    return false;
  bool dispatch = ins.kind == Instruction::Kind::EPDispatch;
  const Buffer &rows = dispatch ? ins.ins[0] : ins.outs[0],
               &share = dispatch ? ins.outs[0] : ins.ins[0];
  // Blocks [parts][E / parts][C][h]: block j goes to / comes from rank j.
  int64_t local = share.shape.empty() ? 0 : share.shape[0];
  if (rows.shape.size() != 3 || rows.shape[0] != local * parts || share.elements != rows.elements) {
    error = "an expert all-to-all over '" + ins.axis + "' whose rows are not [" +
            std::to_string(parts) + " x the share's experts, capacity, hidden]";
    return false;
  }
  int64_t ch = rows.shape[1] * rows.shape[2];
  int64_t block = local * ch;
  const float *in = backend.data(ins.ins[0]);
  float *out = backend.data(ins.outs[0]);
  BackendFloats blocks;
  if (!backend.allocate(block * parts, blocks, error))
    return false;
  auto move = [&](float *dst, const float *src, bool toShare) {
    return copyAll(backend, dst, src, expertCopies(parts, local, ch, toShare), error);
  };
  if (dispatch)
    return comm.allToAllBlocks(ins.axis, in, blocks.p, block, error) &&
           move(out, blocks.p, /*toShare=*/true);
  return move(blocks.p, in, /*toShare=*/false) &&
         comm.allToAllBlocks(ins.axis, blocks.p, out, block, error);
}

bool StepDriver::ringAttention(StepBackend &backend, const Instruction &ins, Communicator &comm,
                               std::string &error) {
  int index = 0, parts = 1, tpIndex = 0, tpSize = 1;
  if (!axis(ins.axis, index, parts, error) || !axis("tp", tpIndex, tpSize, error))
    return false;
  bool bwd = ins.kind == Instruction::Kind::CPRingAttentionBwd;
  const Buffer &q = ins.ins[bwd ? 1 : 0], &keys = ins.ins[bwd ? 2 : 1],
               &values = ins.ins[bwd ? 3 : 2];
  int64_t heads = int64_t(ins.args.heads);
  if (q.shape.size() != 3 || heads <= 0) {
    error = "ring attention of queries that are not [batch, seq, heads x head_dim]";
    return false;
  }
  int64_t kvCount = keys.elements, qCount = q.elements, rows = q.shape[0] * q.shape[1] * heads;
  // Neighbours on the ring: cp is the axis just above tp in the rank layout.
  int next = rank + (((index + 1) % parts) - index) * tpSize;
  int prev = rank + (((index + parts - 1) % parts) - index) * tpSize;
  const int kRingTag = 32000;
  // The blocks that travel (keys, values and, backward, their gradients):
  // the one this rank computes with and the one arriving from the previous
  // rank meanwhile; a block's partial output and statistics; the merged
  // ones.
  int travelling = bwd ? 4 : 2;
  BackendFloats blk[4], arriving[4], blockOut, blockLse, out, lse;
  for (int i = 0; i < travelling; ++i)
    if (!backend.allocate(kvCount, blk[i], error) || !backend.allocate(kvCount, arriving[i], error))
      return false;
  if (!backend.allocate(qCount, blockOut, error) || !backend.allocate(rows, blockLse, error) ||
      !backend.allocate(qCount, out, error) || !backend.allocate(rows, lse, error))
    return false;
  // Blocks [first, first + count) start for the next rank while the
  // previous rank's start arriving (one ring step: the transfer overlaps
  // the computation between), then arrive and take their place.
  auto pass = [&](int first, int count) {
    for (int i = first; i < first + count; ++i)
      if (!comm.startShift(ins.axis, 1, next, prev, kRingTag, blk[i].p, arriving[i].p, kvCount,
                           error))
        return false;
    return true;
  };
  auto arrive = [&](int first, int count) {
    for (int i = first; i < first + count; ++i) {
      if (!comm.finishShift(ins.axis, 1, next, prev, kRingTag, blk[i].p, arriving[i].p, kvCount,
                            error))
        return false;
      std::swap(blk[i], arriving[i]);
    }
    return true;
  };
  const float *qData = backend.data(q), *keysData = backend.data(keys),
              *valuesData = backend.data(values);
  // Forward (the backward's too): every block once, partial results merged
  // by log-sum-exp; each block moves on before this rank computes with it.
  if (!backend.copy(blk[0].p, keysData, kvCount, error) ||
      !backend.copy(blk[1].p, valuesData, kvCount, error) ||
      !backend.fill(lse.p, -INFINITY, rows, error))
    return false;
  for (int i = 0; i < parts; ++i) {
    if (i + 1 < parts && !pass(0, 2))
      return false;
    if (!backend.ringForward(ins, qData, blk[0].p, blk[1].p, (index - i + parts) % parts,
                             blockOut.p, blockLse.p, error) ||
        !backend.ringMerge(ins, out.p, lse.p, blockOut.p, blockLse.p, error))
      return false;
    if (i + 1 < parts && !arrive(0, 2))
      return false;
  }
  if (!bwd)
    return backend.copy(backend.data(ins.outs[0]), out.p, qCount, error);
  // Backward with the whole log-sum-exp: each block's key / value gradients
  // travel with it and are complete when it is home again.
  BackendFloats dq, dqBlock, dkBlock, dvBlock;
  if (!backend.allocate(qCount, dq, error) || !backend.allocate(qCount, dqBlock, error) ||
      !backend.allocate(kvCount, dkBlock, error) || !backend.allocate(kvCount, dvBlock, error) ||
      !backend.copy(blk[0].p, keysData, kvCount, error) ||
      !backend.copy(blk[1].p, valuesData, kvCount, error))
    return false; // (the gradient blocks start at zero: allocate zeroes)
  const float *dout = backend.data(ins.ins[0]);
  for (int i = 0; i < parts; ++i) {
    // Keys and values move on before the computation, their gradients
    // after it (this rank adds its part first).
    if (!pass(0, 2) ||
        !backend.ringBackward(ins, dout, qData, blk[0].p, blk[1].p, out.p, lse.p,
                              (index - i + parts) % parts, dqBlock.p, dkBlock.p, dvBlock.p,
                              error) ||
        !backend.addScaled(dq.p, dqBlock.p, 1.0f, qCount, error) ||
        !backend.addScaled(blk[2].p, dkBlock.p, 1.0f, kvCount, error) ||
        !backend.addScaled(blk[3].p, dvBlock.p, 1.0f, kvCount, error) || !pass(2, 2) ||
        !arrive(0, 4))
      return false;
  }
  return backend.copy(backend.data(ins.outs[0]), dq.p, qCount, error) &&
         backend.copy(backend.data(ins.outs[1]), blk[2].p, kvCount, error) &&
         backend.copy(backend.data(ins.outs[2]), blk[3].p, kvCount, error);
}

} // namespace llmopt::runtime
