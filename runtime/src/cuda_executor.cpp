//===- cuda_executor.cpp - one rank's program on one GPU ------------------===//
//
// The instruction stream of a single-GPU plan, kernel by kernel, on the
// default stream: kernels/cuda for the row-wise, elementwise, attention,
// loss and optimizer kernels, cuBLASLt (kernels/cuda/gemm.cpp) for the
// linears. Weight gradients the CUDA kernels accumulate in fp32 go through
// an fp32 scratch when the plan keeps them in bf16. What the first slice
// does not run is refused in init, by name.
//
//===----------------------------------------------------------------------===//

#include "llmopt-runtime/cuda_executor.h"
#include "llmopt-runtime/device_comm.h"
#include "llmopt-runtime/fused_library.h"
#include "llmopt-runtime/layouts.h"
#include "llmopt-runtime/padded_logits.h"

#include "llmopt-kernels/cuda.h"
#include "llmopt-kernels/device_buffer.h"
#include "llmopt-kernels/gemm.h"
#ifdef LLMOPT_HAVE_CUDNN
#include "llmopt-kernels/cudnn_attention.h"
#endif

#include <cuda_runtime.h>

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <tuple>
#include <type_traits>

namespace llmopt::runtime {

namespace cu = llmopt::kernels::cuda;
using kernels::KernelId;

namespace {

using DevBuf = cu::DeviceBuffer;

int64_t lastDim(const Buffer &b) { return b.shape.empty() ? 1 : b.shape.back(); }
int64_t rowsOf(const Buffer &b) { return lastDim(b) ? b.elements / lastDim(b) : 0; }

/// A world of one on device memory: reductions leave the data as it is,
/// block collectives copy this rank's block, in the stream's order.
class DeviceAlone final : public Communicator {
public:
  explicit DeviceAlone(cudaStream_t stream) : stream(stream) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  bool allReduce(const std::string &, float *, int64_t, bool, std::string &) override {
    return true;
  }
  bool allReduceMax(const std::string &, float *, int64_t, std::string &) override { return true; }
  bool reduceScatter(const std::string &, float *, int64_t, bool, std::string &) override {
    return true;
  }
  bool allGather(const std::string &, float *, int64_t, std::string &) override { return true; }
  bool allGatherBlocks(const std::string &, const float *mine, float *all, int64_t count,
                       std::string &error) override {
    return copy(all, mine, count, error);
  }
  bool reduceScatterBlocks(const std::string &, const float *all, float *mine, int64_t count,
                           std::string &error) override {
    return copy(mine, all, count, error);
  }
  bool allToAllBlocks(const std::string &, const float *send, float *recv, int64_t count,
                      std::string &error) override {
    return copy(recv, send, count, error);
  }

private:
  cudaStream_t stream;
  bool copy(float *to, const float *from, int64_t count, std::string &error) {
    return to == from ||
           cudaMemcpyAsync(to, from, size_t(count) * 4, cudaMemcpyDeviceToDevice, stream) ==
               cudaSuccess ||
           (error = "cannot copy a collective's buffer on the GPU", false);
  }
};

} // namespace

struct CudaExecutor::State {
  const Plan *plan = nullptr;
  const Program *program = nullptr;
  int rank = 0;
  bool bf16 = false;
  /// The arena and, in plans with one, the stash, one per micro-batch in
  /// flight on a pipeline stage (the stash where there is one, else the
  /// arena), as the CPU backend; `slot` is the one instructions address.
  std::vector<std::unique_ptr<DevBuf>> arenas, stashes;
  size_t slot = 0;
  DevBuf tokens, labels;
  /// The key of what is kept for buffer `b` (norm and attention statistics,
  /// expert loads): its place, the micro-batch slot included.
  int spaceKey(const Buffer &b) const {
    bool slotted =
        b.space == Buffer::Space::Stash || (b.space == Buffer::Space::Arena && arenas.size() > 1);
    return int(b.space) + (slotted ? 256 * int(slot + 1) : 0);
  }
  /// The micro-batch's token positions grouped by token
  /// (cu::embeddingOrder), for a deterministic embedding backward.
  std::vector<int32_t> tokenOrder;
  DevBuf tokenOrderDev;
  bool orderTokens = false;
  /// A parameter as this rank holds it: the fp32 master of its value (the
  /// whole, or under ZeRO-3 this rank's chunk: `n` elements), AdamW's
  /// moments for `shard` (the whole without ZeRO) and, in bf16 plans, the
  /// bf16 working copy of the whole value (none under ZeRO-3, whose kernels
  /// read the gathered copy).
  struct Param {
    DevBuf master, m, v, working;
    int64_t n = 0;
    Chunk shard;
    bool valueChunked = false;
  };
  std::map<std::string, Param> params;
  std::map<std::string, std::unique_ptr<DevBuf>> accum;
  std::vector<std::unique_ptr<DevBuf>> temps, scratch;
  /// Rotary (cos, sin) tables by head_dim, theta, scaling, sequence and,
  /// under context parallelism, this rank's place on the cp axis (index,
  /// parts: its rows at their positions in the whole sequence).
  std::map<std::tuple<int64_t, double, double, double, double, double, double, int64_t, int, int>,
           std::unique_ptr<DevBuf>>
      ropes;
  /// Context parallelism: the positions of each rank's `local` rows on an
  /// axis (its chunks r and 2 parts - 1 - r of the sequence), [parts][local]
  /// on the device, by axis and local length.
  std::map<std::pair<std::string, int64_t>, std::unique_ptr<DevBuf>> cpPos;
  /// The positions of rank `which`'s rows on `axis` (-1: this rank's).
  const int32_t *cpPositions(const std::string &axis, int64_t local, int which,
                             std::string &error) {
    int index = 0, parts = 1;
    if (!plan->place(axis, rank, index, parts, error))
      return nullptr;
    if (!contextChunkHalves(local, error))
      return nullptr;
    auto &buf = cpPos[{axis, local}];
    if (!buf) {
      std::vector<int32_t> all;
      for (int64_t r = 0; r < parts; ++r) {
        std::vector<int32_t> rows = contextPositions(r, local, parts);
        all.insert(all.end(), rows.begin(), rows.end());
      }
      buf = std::make_unique<DevBuf>();
      if (!buf->reserve(all.size() * 4) ||
          cudaMemcpyAsync(buf->p, all.data(), all.size() * 4, cudaMemcpyHostToDevice, stream) !=
              cudaSuccess ||
          cudaStreamSynchronize(stream) != cudaSuccess) {
        buf.reset();
        error = "cannot upload the context-parallel positions";
        return nullptr;
      }
    }
    return buf->as<int32_t>() + (which < 0 ? index : which) * local;
  }
  std::unique_ptr<cu::Gemm> gemm;
  std::map<const void *, float> hostNorms; // global norms just computed, by device pointer
  /// Dispatched expert rows: the busiest expert's load (rows past it are
  /// zero), by rows buffer, so that the experts compute only those (a
  /// dropless dispatch sizes each expert for every token). Read back from
  /// the device, so not under CUDA graphs.
  std::map<std::tuple<int, int64_t, std::string>, int64_t> expertRows;
  /// Attention log-sum-exps by forward output buffer, and those written in
  /// the running micro-batch.
  std::map<std::tuple<int, int64_t, std::string>, std::unique_ptr<DevBuf>> lses;
  std::set<const float *> lseFresh;
  /// Logits of a vocabulary whose rows are not a multiple of 16 bytes
  /// (GPT-2's 50257) and their gradient, kept in rows padded to
  /// cu::linearPaddedOut in one buffer of their own, where the LM head's
  /// linear_fwd, the cross-entropy and linear_bwd are their only users (in
  /// that order): no copies into and out of padded rows around the LM
  /// head's GEMMs (3 of GPT-2 124M's 42 ms on an H100). By instruction,
  /// output or input, and slot: the row pitch.
  std::map<std::tuple<const Instruction *, bool, size_t>, int64_t> paddedPitch;
  DevBuf paddedLogits;
  /// The padded rows standing for this operand, and their pitch, or null.
  void *paddedRows(const Instruction &ins, bool output, size_t slot, int64_t &pitch) {
    auto it = paddedPitch.find({&ins, output, slot});
    if (it == paddedPitch.end())
      return nullptr;
    pitch = it->second;
    return paddedLogits.p;
  }
  void padLogits(const Program &prog, cudaDataType_t type);

  /// Multi-tensor AdamW (the default; LLMOPT_CUDA_MULTI_ADAMW=0 turns it
  /// off): runs of consecutive adamw instructions of the step with the
  /// same hyperparameters (but weight decay) and norm run as one launch at
  /// the run's first instruction; the others do nothing. Their descriptors
  /// are uploaded when the run first executes (the first step, before any
  /// graph capture).
  struct AdamWRun {
    std::vector<const Instruction *> members;
    DevBuf tensors, chunks;
    int64_t chunkCount = 0;
    bool built = false;
  };
  /// The arrays of a global_norm or sum_squares instruction as chunks on
  /// the device (cu::sumSquaresChunks), made at its first run and again
  /// when an array moved.
  struct SquaresTable {
    std::vector<const float *> arrays;
    std::vector<int64_t> counts;
    DevBuf chunks, partials;
    int64_t count = 0;
  };
  std::map<const Instruction *, SquaresTable> squaresTables;
  bool squaresInto(const Instruction &ins, std::vector<const float *> arrays,
                   std::vector<int64_t> counts, double *dsum, std::string &error);
  std::deque<AdamWRun> adamwRuns;                  // (DevBuf does not move)
  std::map<const Instruction *, int> adamwLeaders; // index into adamwRuns
  std::set<const Instruction *> adamwFollowers;
  void groupAdamW(const Program &prog);
  bool runAdamW(AdamWRun &run, const Instruction &ins, std::string &error);

  /// The norms' row statistics (mean and 1/std, or 1/rms) by input buffer,
  /// kind and epsilon (fresh, like the attention's, when written in the
  /// running micro-batch).
  std::map<std::tuple<int, int64_t, std::string, bool, float>, std::unique_ptr<DevBuf>> norms;
  float *normStats(const Buffer &x, bool rms, float eps, int64_t rows, std::string &error) {
    auto &kept = norms[{spaceKey(x), x.offset, x.name, rms, eps}];
    if (!kept)
      kept = std::make_unique<DevBuf>();
    if (!kept->reserve(size_t(rows) * 8)) {
      error = "out of GPU memory for a norm's statistics";
      return nullptr;
    }
    return kept->as<float>();
  }
  /// The cross-entropy's row log-sum-exps by logits buffer (fresh, like
  /// the attention's, when written in the running micro-batch).
  std::map<std::tuple<int, int64_t, std::string>, std::unique_ptr<DevBuf>> ceLses;
#ifdef LLMOPT_HAVE_CUDNN
  /// cuDNN's fused attention for bf16 plans (the default: on an H100 it
  /// made GPT-2 124M 1.8x and Llama 3.2 1B 2x faster than the GEMM
  /// attention); LLMOPT_CUDA_ATTENTION=gemm chooses the GEMM attention. On a
  /// failure the GEMM attention takes over.
  std::unique_ptr<cu::CudnnAttention> cudnn;
  bool cudnnWanted = [] {
    const char *a = std::getenv("LLMOPT_CUDA_ATTENTION");
    return !a || std::strcmp(a, "gemm") != 0;
  }();
  /// Shapes (batch, seq, heads, kv heads, head dim, forward) cuDNN refused:
  /// those run the GEMM attention from then on, the others keep trying cuDNN.
  std::set<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, bool>> cudnnRefused;
  bool cudnnFailed(std::string &error) {
    if (capturing)
      return false; // keeps `error`: the capture fails, plain launches retry
    std::fprintf(stderr,
                 "llm-run: cuDNN attention unavailable (%s); this shape uses the GEMM attention\n",
                 error.c_str());
    error.clear();
    cudaGetLastError(); // a failed allocation must not fail the kernels that follow
    return false;
  }
#endif
  /// The plan's generated fused kernels (kernels.cu), where they compiled;
  /// otherwise fused bodies run kernel by kernel.
  FusedLibrary fused;
  std::map<std::string, FusedLibrary::Launcher> launchers;
  /// CUDA graphs (LLMOPT_CUDA_GRAPHS=1): the instructions on a stream of
  /// their own, the global norm and AdamW's step on the device, and from
  /// the second step on the micro-batch and step instruction lists
  /// captured once and replayed; a capture that fails leaves the plain
  /// launches.
  bool graphs = [] {
    const char *g = std::getenv("LLMOPT_CUDA_GRAPHS");
    return g && std::strcmp(g, "1") == 0;
  }();
  cudaStream_t stream = nullptr;
  DevBuf stepCounter;
  /// The captured graphs, by the first instruction of the run of kernels
  /// they replay (StepBackend::computeRun).
  std::map<const Instruction *, cudaGraphExec_t> graphExecs;
  bool useCaptures = true;
  void dropGraphs() {
    for (auto &[first, g] : graphExecs)
      if (g)
        cudaGraphExecDestroy(g);
    graphExecs.clear();
  }
  /// A capture is being recorded: failures then fail the capture (plain
  /// launches follow) instead of switching features off for good.
  bool capturing = false;
  int64_t stepsRun = 0;
  /// The optimizer step running, from 1 (AdamW's bias corrections).
  int64_t step = 1;
  /// The collectives' communicator on device memory (plans of more than
  /// one rank): NCCL, or the launcher's host communicator staged through
  /// host copies (ranks sharing a GPU, no NCCL; page-locked copies). NCCL
  /// runs on a stream of its own that the instructions' stream waits for
  /// where the plan waits; the staged copies are in the instructions'
  /// stream's order. The step driver runs the data-moving instructions
  /// through it.
  std::unique_ptr<DeviceCommunicator> nccl;
  std::unique_ptr<Staging> staging;
  std::unique_ptr<StagedCommunicator> staged;
  Communicator *dev = nullptr;
  /// A plan of one rank: its collectives on device memory, each a copy at
  /// most (the host SingleRank's defaults would touch device pointers).
  std::unique_ptr<Communicator> alone;
  /// The communicator of the instruction running (a kernel's amax over
  /// ranks: fp8 under tensor parallelism), set by compute().
  Communicator *kernelComm = nullptr;
  /// Before the host reads what the GPU computed: the compute stream's work
  /// (under NCCL's watchdog), collectives started and not waited for
  /// still overlapping.
  bool drainDevice(std::string &error) { return !nccl || nccl->synchronize(error, false); }
  /// The step driver's instruction running: fp32 copies of its bf16
  /// buffers (StepBackend::widen), by buffer.
  std::map<const Buffer *, float *> wide;
  std::vector<std::unique_ptr<DevBuf>> wideBufs;
  /// The micro-batch whose tokens and labels are on the device.
  const std::vector<int32_t> *uploaded = nullptr;
  ~State() {
    dropGraphs();
    if (stream)
      cudaStreamDestroy(stream);
  }
  /// Runs instructions [first, first + count) captured into `exec`
  /// (captured first when it is null); false with nothing run when the
  /// capture does not work.
  bool replay(const Instruction *first, size_t count, cudaGraphExec_t &exec, std::string &error) {
    if (!exec) {
      if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
        cudaGetLastError();
        error.clear();
        return false;
      }
      // The capture ends whatever happens (an exception included).
      cudaGraph_t g = nullptr;
      struct EndCapture {
        State &st;
        cudaGraph_t &graph;
        bool done = false;
        cudaError_t end() {
          done = true;
          st.capturing = false;
          return cudaStreamEndCapture(st.stream, &graph);
        }
        ~EndCapture() {
          if (!done)
            end();
        }
      } guard{*this, g};
      capturing = true;
      bool ran = true;
      for (size_t i = 0; i < count && ran; ++i)
        ran = run(first[i], error);
      cudaError_t e = guard.end();
      if (ran && e == cudaSuccess && g)
        e = cudaGraphInstantiate(&exec, g, 0);
      if (g)
        cudaGraphDestroy(g);
      if (!ran || e != cudaSuccess || !exec) {
        cudaGetLastError();
        error.clear();
        exec = nullptr;
        return false;
      }
    }
    if (cudaGraphLaunch(exec, stream) != cudaSuccess) {
      error = std::string("CUDA graph launch: ") + cudaGetErrorString(cudaGetLastError());
      return false;
    }
    return true;
  }
  /// cuBLASLt's algorithm cache file and its entries when last written.
  std::string algorithmCache;
  size_t savedAlgorithms = 0;
  /// --profile: events around each kernel instruction of the step, and the
  /// host's time issuing it (its launches).
  struct Timed {
    const Instruction *ins;
    cudaEvent_t begin, end;
    double hostSeconds;
  };
  std::vector<Timed> events;
  int64_t vocab = 0, classes = 0, ignoreIndex = -100;

  /// Scratch buffer `i` of at least `bytes`.
  void *tmp(size_t i, size_t bytes, std::string &error) {
    while (scratch.size() <= i)
      scratch.push_back(std::make_unique<DevBuf>());
    if (!scratch[i]->reserve(bytes)) {
      error = "out of GPU memory for " + std::to_string(bytes) + " bytes of scratch";
      return nullptr;
    }
    return scratch[i]->p;
  }

  /// The scratch of sumRows's partial sums (a valid pointer where none are
  /// needed), null with `error` set when out of memory.
  void *sumsScratch(int64_t rows, int64_t c, std::string &error) {
    return tmp(7, std::max<size_t>(16, cu::sumRowsScratchBytes(rows, c)), error);
  }

  /// fp32 copies of 16-bit buffers while a fused body runs in fp32, by
  /// (space, offset, name).
  std::map<std::tuple<int, int64_t, std::string>, void *> shadows;
  std::vector<std::unique_ptr<DevBuf>> shadowBufs;

  void *ptr(const Buffer &b) {
    if (!shadows.empty())
      if (auto it = shadows.find({spaceKey(b), b.offset, b.name}); it != shadows.end())
        return it->second;
    return raw(b);
  }
  void *raw(const Buffer &b) {
    switch (b.space) {
    case Buffer::Space::Arena:
      return arenas.empty()
                 ? nullptr
                 : static_cast<char *>(arenas[arenas.size() == 1 ? 0 : slot]->p) + b.offset;
    case Buffer::Space::Stash:
      return slot < stashes.size() ? static_cast<char *>(stashes[slot]->p) + b.offset : nullptr;
    case Buffer::Space::Input:
      return b.offset == 0 ? tokens.p : labels.p;
    case Buffer::Space::State: {
      Param &p = params.at(b.name);
      return p.working.p ? p.working.p : p.master.p;
    }
    case Buffer::Space::Accum:
      return accum.at(b.name)->p;
    case Buffer::Space::Temp:
      return temps.at(size_t(b.offset))->p;
    default:
      return nullptr;
    }
  }
  template <typename T> T *at(const Buffer &b) { return static_cast<T *>(ptr(b)); }

  bool check(cudaError_t e, const char *what, std::string &error) {
    if (e == cudaSuccess)
      return true;
    error = std::string(what) + ": " + cudaGetErrorString(e);
    return false;
  }

  /// An fp32 target for a gradient the CUDA kernels accumulate: the buffer
  /// itself when fp32 (zeroed), else a zeroed scratch cast into it after.
  float *gradTarget(const Buffer &b, size_t slot, std::string &error) {
    void *p = b.dtype == DType::F32 ? ptr(b) : tmp(slot, size_t(b.elements) * 4, error);
    if (!p || cudaMemsetAsync(p, 0, size_t(b.elements) * 4, stream) != cudaSuccess) {
      if (error.empty())
        error = "cannot clear a gradient buffer";
      return nullptr;
    }
    return static_cast<float *>(p);
  }
  bool gradDone(const Buffer &b, float *g, std::string &error) {
    if (b.dtype == DType::F32)
      return true;
    return check(cu::fromFloat(g, at<cu::bf16>(b), b.elements, stream), "gradient cast", error);
  }

  /// The rotary (cos, sin) table for `seq` positions (cu::rotaryTable).
  const float *rotaryTable(const Instruction &ins, int64_t seq, std::string &error) {
    int64_t hd = int64_t(ins.args.head_dim);
    kernels::cpu::RopeScaling sc = ins.args.ropeScaling();
    double theta = ins.args.theta;
    int index = 0, parts = 1;
    if (!ins.args.cp.empty() && !plan->place(ins.args.cp, rank, index, parts, error))
      return nullptr;
    auto key = std::make_tuple(hd, theta, double(sc.factor), double(sc.lowFreqFactor),
                               double(sc.highFreqFactor), double(sc.originalMaxPositions),
                               double(sc.linearFactor), seq, index, parts);
    auto it = ropes.find(key);
    if (it != ropes.end())
      return it->second->as<float>();
    std::vector<double> inv = kernels::cpu::ropeInverseFrequencies(hd, float(theta), sc);
    std::vector<float> t = cu::rotaryTable(inv, seq * parts);
    if (parts > 1) {
      // This rank's rows at their positions: chunks index and 2 parts - 1 -
      // index of the whole sequence.
      if (!contextChunkHalves(seq, error))
        return nullptr;
      size_t row = t.size() / size_t(seq * parts);
      std::vector<int32_t> positions = contextPositions(index, seq, parts);
      std::vector<float> local(size_t(seq) * row);
      for (int64_t i = 0; i < seq; ++i)
        std::copy_n(t.begin() + positions[size_t(i)] * int64_t(row), row,
                    local.begin() + i * int64_t(row));
      t = std::move(local);
    }
    auto buf = std::make_unique<DevBuf>();
    // In stream order (the rotary kernels run on `stream`).
    if (!buf->reserve(t.size() * 4) ||
        cudaMemcpyAsync(buf->p, t.data(), t.size() * 4, cudaMemcpyHostToDevice, stream) !=
            cudaSuccess ||
        cudaStreamSynchronize(stream) != cudaSuccess) {
      error = "cannot upload the rotary table";
      return nullptr;
    }
    return ropes.emplace(key, std::move(buf)).first->second->as<float>();
  }

  /// One kernel instruction's call.
  struct KernelCall {
    const Instruction &ins;
    const std::vector<Buffer> &in, &out;
    std::string &error;
    cudaStream_t s;
  };
  using KernelFn = bool (State::*)(const KernelCall &);
  /// This backend's implementation of each kernel, by kernels::KernelId, for
  /// activations of type T (null: not run on the GPU).
  template <typename T>
  static const std::array<KernelFn, size_t(KernelId::NumKernels)> &kernelTable();
  template <typename T> bool kernelEmbeddingFwd(const KernelCall &call);
  template <typename T> bool kernelEmbeddingBwd(const KernelCall &call);
  template <typename T> bool kernelPositionEmbeddingFwd(const KernelCall &call);
  template <typename T> bool kernelPositionEmbeddingBwd(const KernelCall &call);
  template <typename T> bool kernelNorm(const KernelCall &call);
  template <typename T> bool kernelNormBwd(const KernelCall &call);
  template <typename T> bool kernelLinearFwd(const KernelCall &call);
  template <typename T> bool kernelLinearBwd(const KernelCall &call);
  template <typename T> bool kernelSplitConcat(const KernelCall &call);
  template <typename T> bool kernelRotary(const KernelCall &call);
  template <typename T> bool kernelAttention(const KernelCall &call);
  template <typename T> bool kernelGeluFwd(const KernelCall &call);
  template <typename T> bool kernelGeluBwd(const KernelCall &call);
  template <typename T> bool kernelSwiGLUFwd(const KernelCall &call);
  template <typename T> bool kernelSwiGLUBwd(const KernelCall &call);
  template <typename T> bool kernelAdd(const KernelCall &call);
  template <typename T> bool kernelCopy(const KernelCall &call);
  template <typename T> bool kernelScale(const KernelCall &call);
  template <typename T> bool kernelFill(const KernelCall &call);
  template <typename T> bool kernelBiasAdd(const KernelCall &call);
  template <typename T> bool kernelSumRows(const KernelCall &call);
  template <typename T> bool kernelCrossEntropyFwd(const KernelCall &call);
  template <typename T> bool kernelCrossEntropyBwd(const KernelCall &call);
  template <typename T> bool kernelGlobalNorm(const KernelCall &call);
  template <typename T> bool kernelSumSquares(const KernelCall &call);
  /// This rank's vocabulary part of the logits: rows, entries per row, the
  /// first entry's index, and how many of the entries are the vocabulary's
  /// (`real`: all but a padded vocabulary's padding, as the CPU backend).
  bool vocabPart(const Instruction &ins, const Buffer &logits, int64_t &rows, int64_t &part,
                 int64_t &offset, int64_t &real, std::string &error) {
    int index = 0, parts = 1;
    if (!plan->place(ins.args.shard, rank, index, parts, error))
      return false;
    part = logits.shape.back();
    rows = part ? logits.elements / part : 0;
    offset = index * part;
    int64_t classes = int64_t(ins.args.classes);
    real = classes < 0 ? part : std::clamp<int64_t>(classes - offset, 0, part);
    return true;
  }
  template <typename T> bool kernelVPCEStats(const KernelCall &call);
  template <typename T> bool kernelVPCELoss(const KernelCall &call);
  template <typename T> bool kernelVPCEBwd(const KernelCall &call);
  /// A strided copy of `height` rows of `width` bytes on the stream: one
  /// cudaMemcpy2DAsync, or row by row where a pitch is past what it takes.
  bool copyRows(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                size_t height, std::string &error) {
    cudaError_t e = cudaSuccess;
    if (dpitch <= size_t(INT32_MAX) && spitch <= size_t(INT32_MAX)) {
      e = cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, cudaMemcpyDeviceToDevice,
                            stream);
    } else {
      for (size_t r = 0; r < height && e == cudaSuccess; ++r)
        e = cudaMemcpyAsync(static_cast<char *>(dst) + r * dpitch,
                            static_cast<const char *>(src) + r * spitch, width,
                            cudaMemcpyDeviceToDevice, stream);
    }
    return check(e, "strided copy", error);
  }
  /// Ring attention's dimensions and positions for instruction `ins`
  /// (a cp_ring_attention_*) against the keys of the ring's rank
  /// `keysRank`, on the baseline kernels.
  bool ringDims(const Instruction &ins, int keysRank, cu::AttentionDims &d, std::string &error);
  template <typename T> bool kernelSqrt(const KernelCall &call);
  template <typename T> bool kernelAdamW(const KernelCall &call);
  template <typename T> bool kernelFused(const KernelCall &call);
  template <typename T> bool kernelMoERouter(const KernelCall &call);
  template <typename T> bool kernelMoEExpertCounts(const KernelCall &call);
  template <typename T> bool kernelMoEDispatchCombine(const KernelCall &call);
  template <typename T> bool kernelMoEExperts(const KernelCall &call);
  template <typename T> bool kernel(const Instruction &ins, std::string &error);
  template <typename T> bool fp8Linear(const Instruction &ins, std::string &error);
  bool run(const Instruction &ins, std::string &error) {
    if (ins.kind != Instruction::Kind::Kernel)
      return (error = "the CUDA backend does not run this instruction's kind yet", false);
    // (An output in place of an input is read first: what was kept for the
    // input still serves this instruction.)
    for (const Buffer &b : ins.outs)
      if (std::none_of(ins.ins.begin(), ins.ins.end(), [&](const Buffer &i) {
            return i.space == b.space && i.offset == b.offset && i.name == b.name;
          }))
        overwritten(b);
    return bf16 ? kernel<cu::bf16>(ins, error) : kernel<float>(ins, error);
  }
  /// Statistics kept for what `b` held (a norm's input, logits, an
  /// attention output) are stale once an instruction writes `b` (a fused
  /// kernel's norm keeps none, recomputation rewrites buffers).
  void overwritten(const Buffer &b) {
    auto key = std::make_tuple(spaceKey(b), b.offset, b.name);
    expertRows.erase(key);
    for (auto *kept : {&lses, &ceLses})
      if (auto it = kept->find(key); it != kept->end())
        lseFresh.erase(it->second->as<float>());
    for (auto it = norms.lower_bound({spaceKey(b), b.offset, b.name, false, -INFINITY});
         it != norms.end() && std::get<0>(it->first) == spaceKey(b) &&
         std::get<1>(it->first) == b.offset && std::get<2>(it->first) == b.name;
         ++it)
      lseFresh.erase(it->second->as<float>());
  }
};

void CudaExecutor::State::groupAdamW(const Program &prog) {
  // The default since measured on an H200 (docs/benchmarks.md, 2026-11-26);
  // LLMOPT_CUDA_MULTI_ADAMW=0 launches per parameter.
  const char *e = std::getenv("LLMOPT_CUDA_MULTI_ADAMW");
  if (e && std::strcmp(e, "0") == 0)
    return;
  auto same = [](const Instruction &a, const Instruction &b) {
    const KernelArgs &x = a.args, &y = b.args;
    if (x.lr != y.lr || x.beta1 != y.beta1 || x.beta2 != y.beta2 || x.eps != y.eps ||
        x.max_norm != y.max_norm)
      return false;
    const Buffer &g = a.ins[1], &h = b.ins[1];
    return a.ins.size() == 2 && b.ins.size() == 2 && g.space == h.space && g.offset == h.offset &&
           g.name == h.name;
  };
  std::vector<const Instruction *> current;
  auto flush = [&] {
    if (current.size() >= 2) {
      adamwLeaders[current.front()] = int(adamwRuns.size());
      adamwFollowers.insert(current.begin() + 1, current.end());
      adamwRuns.emplace_back();
      adamwRuns.back().members = current;
    }
    current.clear();
  };
  for (const Instruction &ins : prog.step) {
    bool adamw = ins.kind == Instruction::Kind::Kernel && ins.kernel->id == KernelId::AdamW &&
                 ins.args.shard.empty();
    if (!adamw || (!current.empty() && !same(*current.front(), ins)))
      flush();
    if (adamw)
      current.push_back(&ins);
  }
  flush();
}

bool CudaExecutor::State::runAdamW(AdamWRun &run, const Instruction &ins, std::string &error) {
  if (!run.built) {
    std::vector<cu::AdamWTensor> tensors;
    std::vector<int64_t> counts;
    for (const Instruction *m : run.members) {
      Param &p = params.at(m->args.param);
      tensors.push_back({p.master.as<float>(), static_cast<const float *>(ptr(m->ins[0])),
                         p.m.as<float>(), p.v.as<float>(), p.working.as<cu::bf16>(), p.n,
                         float(m->args.weight_decay)});
      counts.push_back(p.n);
    }
    std::vector<cu::AdamWChunk> chunks = cu::adamwChunks(counts);
    size_t tb = tensors.size() * sizeof(cu::AdamWTensor),
           cb = chunks.size() * sizeof(cu::AdamWChunk);
    // On the instructions' stream (a non-blocking one under graphs is not
    // ordered after the default stream's copies), waited for: the host
    // vectors are this function's. NCCL's collectives the stream waits on
    // are drained first, under their watchdog.
    if (!drainDevice(error))
      return false;
    if (!run.tensors.reserve(tb) || !run.chunks.reserve(std::max<size_t>(cb, 1)) ||
        cudaMemcpyAsync(run.tensors.p, tensors.data(), tb, cudaMemcpyHostToDevice, stream) !=
            cudaSuccess ||
        (cb && cudaMemcpyAsync(run.chunks.p, chunks.data(), cb, cudaMemcpyHostToDevice, stream) !=
                   cudaSuccess) ||
        cudaStreamSynchronize(stream) != cudaSuccess)
      return (error = "cannot upload the multi-tensor AdamW descriptors", false);
    run.chunkCount = int64_t(chunks.size());
    run.built = true;
  }
  const auto *tensors = static_cast<const cu::AdamWTensor *>(run.tensors.p);
  const auto *chunks = static_cast<const cu::AdamWChunk *>(run.chunks.p);
  double maxNorm = ins.args.max_norm;
  cu::AdamWArgs a{float(ins.args.lr),
                  float(ins.args.beta1),
                  float(ins.args.beta2),
                  float(ins.args.eps),
                  0.0f,
                  1.0f,
                  0};
  if (graphs)
    return check(cu::adamwMulti(tensors, chunks, run.chunkCount, a,
                                static_cast<float *>(ptr(ins.ins[1])), maxNorm,
                                stepCounter.as<int64_t>(), stream),
                 "adamw", error);
  float norm = 0;
  if (auto it = hostNorms.find(ptr(ins.ins[1])); it != hostNorms.end())
    norm = it->second;
  else if (!drainDevice(error) ||
           !check(cudaMemcpy(&norm, ptr(ins.ins[1]), 4, cudaMemcpyDeviceToHost), "adamw", error))
    return false;
  a.gradScale = maxNorm > 0 ? float(std::min(1.0, maxNorm / (double(norm) + 1e-6))) : 1.0f;
  a.step = step;
  return check(
      cu::adamwMulti(tensors, chunks, run.chunkCount, a, nullptr, maxNorm, nullptr, stream),
      "adamw", error);
}

void CudaExecutor::State::padLogits(const Program &prog, cudaDataType_t type) {
  // The default since measured on an H200 (GPT-2 124M 7% faster,
  // docs/benchmarks.md, 2026-11-26); LLMOPT_CUDA_PAD_LOGITS=0 copies.
  const char *e = std::getenv("LLMOPT_CUDA_PAD_LOGITS");
  if (e && std::strcmp(e, "0") == 0)
    return;
  auto found =
      findPaddedLogits(prog, [&](int64_t vocab) { return cu::linearPaddedOut(vocab, type); });
  if (!found)
    return;
  size_t bytes = size_t(found->rows) * size_t(found->pitch) * (type == CUDA_R_32F ? 4 : 2);
  if (!paddedLogits.reserve(bytes))
    return; // out of memory: the copies instead
  for (auto [ins, output] : {std::pair{found->linearFwd, true},
                             {found->lossFwd, false},
                             {found->lossBwd, false},
                             {found->lossBwd, true},
                             {found->linearBwd, false}})
    paddedPitch[{ins, output, 0}] = found->pitch;
}

/// An fp8 linear (`fp8`: "e4m3" forward, "hybrid" backward), per-tensor
/// current scaling as the CPU backend's: every operand quantized with its
/// amax on the device, the products on cuBLASLt's fp8 path in its TN layout
/// (the backward's from transposed copies: dx = dy W reads W^T, dW = dy^T x
/// reads dy^T and x^T); the bias's gradient sums the unrounded dy.
template <typename T>
bool CudaExecutor::State::fp8Linear(const Instruction &ins, std::string &error) {
  const std::vector<Buffer> &in = ins.ins, &out = ins.outs;
  cudaStream_t s = stream;
  auto ok = [&](cudaError_t e) { return check(e, ins.kernel->name, error); };
  bool fwd = ins.kernel->id == KernelId::LinearFwd;
  const Buffer &x = in[fwd ? 0 : 1], &w = in[fwd ? 1 : 2];
  // [out, in] weights, or [in, out] (`transposed`, GPT-2's): the products
  // read W as [out, in] forward and [in, out] for dx, so one of the two is
  // a transposed copy, and dW is made in the weight's own layout.
  bool tr = ins.args.transposed;
  int64_t n = rowsOf(x), inF = tr ? w.shape[0] : w.shape[1], outF = tr ? w.shape[1] : w.shape[0];
  cudaDataType_t type = bf16 ? CUDA_R_16BF : CUDA_R_32F;
  // The weight quantized as [rows, cols] of its storage, plain or transposed.
  // `reduced`: with the amax already in `amax` (the ranks' maximum).
  auto quantizeWeight = [&](bool transpose, uint8_t *q, float *amax, float *scale, bool reduced) {
    int64_t rows = w.shape[0], cols = w.shape[1];
    const float *given = reduced ? amax : nullptr;
    return ok(transpose
                  ? cu::quantizeFp8Transposed(at<T>(w), rows, cols, false, q, amax, scale, given, s)
                  : cu::quantizeFp8(at<T>(w), rows * cols, false, q, amax, scale, given, s));
  };
  // A tensor split over `amax_axis` (tensor parallelism) scales by the whole
  // tensor's largest magnitude: each operand's amax the maximum over those
  // axes' ranks, as the CPU backend; then the operands quantized again.
  const std::string &axes = ins.args.amax_axis;
  // (The operands' amaxes 8 floats apart: one all-reduce of the span takes
  // their scales along, which the second quantization rewrites.)
  auto reduceAmax = [&](float *amaxes, int operands) {
    if (!kernelComm)
      return (error = std::string(ins.kernel->name) + ": an amax over ranks without a communicator",
              false);
    for (const std::string &axis : ins.args.amaxAxes())
      if (!kernelComm->allReduceMax(axis, amaxes, 8 * (operands - 1) + 1, error))
        return false;
    return true;
  };
  // Each operand's amax and scale 16 bytes apart (cuBLASLt refused scale
  // pointers 4 bytes apart on an H100: kernels/tests/CudaTest.cpp): operand
  // i's amax at f[8 i], its scale at f[8 i + 4].
  auto *f = static_cast<float *>(tmp(22, 24 * sizeof(float), error));
  auto bytes = [&](size_t slot, int64_t count) {
    return static_cast<uint8_t *>(tmp(slot, size_t(std::max<int64_t>(1, count)), error));
  };
  if (!f)
    return false;
  if (fwd) {
    uint8_t *xq = bytes(16, n * inF), *wq = bytes(17, outF * inF);
    auto quantize = [&](bool reduced) {
      return ok(cu::quantizeFp8(at<T>(x), n * inF, false, xq, f, f + 4, reduced ? f : nullptr,
                                s)) &&
             quantizeWeight(tr, wq, f + 8, f + 12, reduced); // [out, in]
    };
    if (!xq || !wq || !quantize(false) ||
        (!axes.empty() && (!reduceAmax(f, 2) || !quantize(true))) ||
        !gemm->fp8Product(xq, false, wq, false, f + 4, f + 12, at<T>(out[0]), n, inF, outF, type,
                          0.0f, s, error))
      return false;
    return in.size() < 3 ||
           ok(cu::biasAdd(at<T>(out[0]), at<T>(in[2]), at<T>(out[0]), out[0].elements, outF, s));
  }
  const Buffer &dy = in[0];
  uint8_t *dyq = bytes(18, n * outF), *dyqT = bytes(19, n * outF), *xqT = bytes(20, n * inF),
          *wqT = bytes(21, outF * inF);
  auto quantize = [&](bool reduced) {
    return ok(cu::quantizeFp8(at<T>(dy), n * outF, true, dyq, f, f + 4, reduced ? f : nullptr,
                              s)) &&
           ok(cu::quantizeFp8Transposed(at<T>(dy), n, outF, true, dyqT, f, f + 4, f, s)) &&
           ok(cu::quantizeFp8Transposed(at<T>(x), n, inF, false, xqT, f + 8, f + 12,
                                        reduced ? f + 8 : nullptr, s)) &&
           quantizeWeight(!tr, wqT, f + 16, f + 20, reduced); // [in, out]
  };
  if (!dyq || !dyqT || !xqT || !wqT || !quantize(false) ||
      (!axes.empty() && (!reduceAmax(f, 3) || !quantize(true))))
    return false;
  // dx [n, in] = dy [n, out] (W^T [in, out])^T.
  if (!gemm->fp8Product(dyq, true, wqT, false, f + 4, f + 20, at<T>(out[0]), n, outF, inF, type,
                        0.0f, s, error))
    return false;
  // dW [out, in] = dy^T [out, n] (x^T [in, n])^T; transposed weights take
  // dW^T [in, out] = x^T [in, n] (dy^T [out, n])^T.
  float *dw = gradTarget(out[1], 0, error);
  if (!dw ||
      !(tr ? gemm->fp8Product(xqT, false, dyqT, true, f + 12, f + 4, dw, inF, n, outF, CUDA_R_32F,
                              0.0f, s, error)
           : gemm->fp8Product(dyqT, true, xqT, false, f + 4, f + 12, dw, outF, n, inF, CUDA_R_32F,
                              0.0f, s, error)) ||
      !gradDone(out[1], dw, error))
    return false;
  if (out.size() < 3)
    return true;
  float *db = gradTarget(out[2], 3, error);
  void *sums = sumsScratch(n, outF, error);
  return db && sums && ok(cu::sumRows(at<T>(dy), db, n, outF, s, sums)) &&
         gradDone(out[2], db, error);
}

template <typename T> bool CudaExecutor::State::kernel(const Instruction &ins, std::string &error) {
  KernelFn f = kernelTable<T>()[size_t(ins.kernel->id)];
  if (!f)
    return (error = std::string("the CUDA backend does not run '") + ins.kernel->name + "' yet",
            false);
  return (this->*f)(KernelCall{ins, ins.ins, ins.outs, error, stream});
}

template <typename T>
const std::array<CudaExecutor::State::KernelFn, size_t(KernelId::NumKernels)> &
CudaExecutor::State::kernelTable() {
  // The kernels this backend runs (null: refused when the plan is loaded).
  static const std::array<KernelFn, size_t(KernelId::NumKernels)> table = [] {
    std::array<KernelFn, size_t(KernelId::NumKernels)> t{};
    t[size_t(KernelId::EmbeddingFwd)] = &State::kernelEmbeddingFwd<T>;
    t[size_t(KernelId::EmbeddingBwd)] = &State::kernelEmbeddingBwd<T>;
    t[size_t(KernelId::PositionEmbeddingFwd)] = &State::kernelPositionEmbeddingFwd<T>;
    t[size_t(KernelId::PositionEmbeddingBwd)] = &State::kernelPositionEmbeddingBwd<T>;
    t[size_t(KernelId::RMSNormFwd)] = &State::kernelNorm<T>;
    t[size_t(KernelId::LayerNormFwd)] = &State::kernelNorm<T>;
    t[size_t(KernelId::RMSNormBwd)] = &State::kernelNormBwd<T>;
    t[size_t(KernelId::LayerNormBwd)] = &State::kernelNormBwd<T>;
    t[size_t(KernelId::LinearFwd)] = &State::kernelLinearFwd<T>;
    t[size_t(KernelId::LinearBwd)] = &State::kernelLinearBwd<T>;
    t[size_t(KernelId::Split)] = &State::kernelSplitConcat<T>;
    t[size_t(KernelId::Concat)] = &State::kernelSplitConcat<T>;
    t[size_t(KernelId::Rotary)] = &State::kernelRotary<T>;
    t[size_t(KernelId::AttentionFwd)] = &State::kernelAttention<T>;
    t[size_t(KernelId::AttentionBwd)] = &State::kernelAttention<T>;
    t[size_t(KernelId::GeluFwd)] = &State::kernelGeluFwd<T>;
    t[size_t(KernelId::GeluBwd)] = &State::kernelGeluBwd<T>;
    t[size_t(KernelId::SwiGLUFwd)] = &State::kernelSwiGLUFwd<T>;
    t[size_t(KernelId::SwiGLUBwd)] = &State::kernelSwiGLUBwd<T>;
    t[size_t(KernelId::Add)] = &State::kernelAdd<T>;
    t[size_t(KernelId::Copy)] = &State::kernelCopy<T>;
    t[size_t(KernelId::Scale)] = &State::kernelScale<T>;
    t[size_t(KernelId::Fill)] = &State::kernelFill<T>;
    t[size_t(KernelId::BiasAdd)] = &State::kernelBiasAdd<T>;
    t[size_t(KernelId::SumRows)] = &State::kernelSumRows<T>;
    t[size_t(KernelId::CrossEntropyFwd)] = &State::kernelCrossEntropyFwd<T>;
    t[size_t(KernelId::CrossEntropyBwd)] = &State::kernelCrossEntropyBwd<T>;
    t[size_t(KernelId::GlobalNorm)] = &State::kernelGlobalNorm<T>;
    t[size_t(KernelId::SumSquares)] = &State::kernelSumSquares<T>;
    t[size_t(KernelId::VPCEStats)] = &State::kernelVPCEStats<T>;
    t[size_t(KernelId::VPCELoss)] = &State::kernelVPCELoss<T>;
    t[size_t(KernelId::VPCEBwd)] = &State::kernelVPCEBwd<T>;
    t[size_t(KernelId::Sqrt)] = &State::kernelSqrt<T>;
    t[size_t(KernelId::AdamW)] = &State::kernelAdamW<T>;
    t[size_t(KernelId::Fused)] = &State::kernelFused<T>;
    t[size_t(KernelId::MoERouterFwd)] = &State::kernelMoERouter<T>;
    t[size_t(KernelId::MoERouterBwd)] = &State::kernelMoERouter<T>;
    t[size_t(KernelId::MoEExpertCounts)] = &State::kernelMoEExpertCounts<T>;
    t[size_t(KernelId::MoEDispatchFwd)] = &State::kernelMoEDispatchCombine<T>;
    t[size_t(KernelId::MoEDispatchBwd)] = &State::kernelMoEDispatchCombine<T>;
    t[size_t(KernelId::MoECombineFwd)] = &State::kernelMoEDispatchCombine<T>;
    t[size_t(KernelId::MoECombineBwd)] = &State::kernelMoEDispatchCombine<T>;
    t[size_t(KernelId::MoEExpertsFwd)] = &State::kernelMoEExperts<T>;
    t[size_t(KernelId::MoEExpertsBwd)] = &State::kernelMoEExperts<T>;
    return t;
  }();
  return table;
}

template <typename T> bool CudaExecutor::State::kernelEmbeddingFwd(const KernelCall &call) {
  auto &[ins, in, out, error, s] = call;
  auto ok = [&](cudaError_t e) { return check(e, ins.kernel->name, error); };
  if (!ins.args.shard.empty()) {
    // Vocabulary-parallel: this rank's rows [index * part, (index + 1) * part).
    int index = 0, parts = 1;
    if (!plan->place(ins.args.shard, rank, index, parts, error))
      return false;
    int64_t part = in[1].shape[0];
    return ok(cu::embeddingForwardPart(at<int32_t>(in[0]), at<T>(in[1]), at<T>(out[0]),
                                       in[0].elements, in[1].shape[1], index * part, part, s));
  }
  return ok(cu::embeddingForward(at<int32_t>(in[0]), at<T>(in[1]), at<T>(out[0]), in[0].elements,
                                 in[1].shape[1], s));
}

template <typename T> bool CudaExecutor::State::kernelEmbeddingBwd(const KernelCall &call) {
  auto &[ins, in, out, error, s] = call;
  auto ok = [&](cudaError_t e) { return check(e, ins.kernel->name, error); };
  // The step's tokens: each token's rows summed in position order
  // (bit-identical from run to run); other token buffers: atomics.
  float *g = gradTarget(out[0], 0, error);
  const int32_t *tok = at<int32_t>(in[0]);
  if (!g)
    return false;
  bool ordered = orderTokens && tok == tokens.as<int32_t>();
  int64_t n = in[0].elements, h = out[0].shape[1];
  auto *partial = ordered ? static_cast<float *>(tmp(8, size_t(n * h) * 4, error)) : nullptr;
  if (ordered && !partial)
    return false;
  if (!ins.args.shard.empty()) {
    // Vocabulary-parallel: only this rank's rows, in position order.
    int index = 0, parts = 1;
    if (!plan->place(ins.args.shard, rank, index, parts, error))
      return false;
    if (!ordered)
      return (error = "a vocabulary-parallel embedding_bwd of tokens other than the step's", false);
    int64_t part = out[0].shape[0];
    return ok(cu::embeddingBackwardOrderedPart(tok, tokenOrderDev.as<int32_t>(), at<T>(in[1]), g, n,
                                               h, partial, index * part, part, s)) &&
           gradDone(out[0], g, error);
  }
  return ok(ordered ? cu::embeddingBackwardOrdered(tok, tokenOrderDev.as<int32_t>(), at<T>(in[1]),
                                                   g, n, h, partial, s)
                    : cu::embeddingBackward(tok, at<T>(in[1]), g, in[0].elements, out[0].shape[1],
                                            s)) &&
         gradDone(out[0], g, error);
}

template <typename T> bool CudaExecutor::State::kernelPositionEmbeddingFwd(const KernelCall &call) {
  auto &[ins, in, out, error, s] = call;
  auto ok = [&](cudaError_t e) { return check(e, ins.kernel->name, error); };
  // Context parallelism: this rank's rows at their positions.
  const int32_t *pos = nullptr;
  if (!ins.args.cp.empty() && !(pos = cpPositions(ins.args.cp, in[0].shape[1], -1, error)))
    return false;
  return ok(cu::positionEmbeddingForward(at<T>(in[0]), at<T>(in[1]), at<T>(out[0]), in[0].shape[0],
                                         in[0].shape[1], in[0].shape[2], pos, s));
}

template <typename T> bool CudaExecutor::State::kernelPositionEmbeddingBwd(const KernelCall &call) {
  auto &[ins, in, out, error, s] = call;
  auto ok = [&](cudaError_t e) { return check(e, ins.kernel->name, error); };
  const int32_t *pos = nullptr;
  if (!ins.args.cp.empty() && !(pos = cpPositions(ins.args.cp, in[0].shape[1], -1, error)))
    return false;
  float *g = gradTarget(out[0], 0, error);
  return g &&
         ok(cu::positionEmbeddingBackward(at<T>(in[0]), g, in[0].shape[0], in[0].shape[1],
                                          in[0].shape[2], pos, s)) &&
         gradDone(out[0], g, error);
}

template <typename T> bool CudaExecutor::State::kernelNorm(const KernelCall &call) {
  auto &[ins, in, out, error, s] = call;
  auto ok = [&](cudaError_t e) { return check(e, ins.kernel->name, error); };
  int64_t n = rowsOf(in[0]), c = lastDim(in[0]);
  float eps = float(ins.args.eps);
  float *st = normStats(in[0], ins.kernel->id == KernelId::RMSNormFwd, eps, n, error);
  if (!st)
    return false;
  lseFresh.insert(st);
  if (ins.kernel->id == KernelId::RMSNormFwd)
    return ok(cu::rmsNormForward(at<T>(in[0]), at<T>(in[1]), at<T>(out[0]), st, n, c, eps, s));
  return ok(cu::layerNormForward(at<T>(in[0]), at<T>(in[1]), in.size() > 2 ? at<T>(in[2]) : nullptr,
                                 at<T>(out[0]), st, st + n, n, c, eps, s));
}

template <typename T> bool CudaExecutor::State::kernelNormBwd(const KernelCall &call) {
  auto &[ins, in, out, error, s] = call;
  auto ok = [&](cudaError_t e) { return check(e, ins.kernel->name, error); };
  // The statistics the forward of this micro-batch kept for this input,
  // else the forward again (the plan does not keep them).
  bool rms = ins.kernel->id == KernelId::RMSNormBwd;
  int64_t n = rowsOf(in[1]), c = lastDim(in[1]);
  float eps = float(ins.args.eps);
  float *st = normStats(in[1], rms, eps, n, error);
  bool kept = st && lseFresh.count(st);
  auto *y = kept ? nullptr : static_cast<T *>(tmp(2, size_t(in[1].elements) * sizeof(T), error));
  float *dw = st && (kept || y) ? gradTarget(out[1], 3, error) : nullptr;
  float *db = dw && out.size() > 2 ? gradTarget(out[2], 4, error) : nullptr;
  // Row terms of the weight gradient, summed by column (deterministic,
  // and without every row's atomics on the same c addresses).
  auto *terms =
      dw ? static_cast<float *>(tmp(6, cu::normBackwardScratchBytes(n, c), error)) : nullptr;
  if (!dw || (out.size() > 2 && !db) || !terms)
    return false;
  if (rms) {
    if ((!kept && !ok(cu::rmsNormForward(at<T>(in[1]), at<T>(in[2]), y, st, n, c, eps, s))) ||
        !ok(cu::rmsNormBackward(at<T>(in[0]), at<T>(in[1]), at<T>(in[2]), st, at<T>(out[0]), dw, n,
                                c, s, terms)))
      return false;
  } else {
    if (!kept &&
        !ok(cu::layerNormForward(at<T>(in[1]), at<T>(in[2]), nullptr, y, st, st + n, n, c, eps, s)))
      return false;
    // (No bias gradient wanted: db is null and none is summed.)
    if (!ok(cu::layerNormBackward(at<T>(in[0]), at<T>(in[1]), at<T>(in[2]), st, st + n,
                                  at<T>(out[0]), dw, db, n, c, s, terms)))
      return false;
  }
  return gradDone(out[1], dw, error) && (!db || gradDone(out[2], db, error));
}

template <typename T> bool CudaExecutor::State::kernelLinearFwd(const KernelCall &call) {
  auto &[ins, in, out, error, s] = call;
  if (!ins.args.fp8.empty())
    return fp8Linear<T>(ins, error);
  const Buffer &x = in[0], &w = in[1];
  bool tr = ins.args.transposed;
  cu::LinearShape sh{rowsOf(x), tr ? w.shape[0] : w.shape[1], tr ? w.shape[1] : w.shape[0], tr,
                     bf16 ? CUDA_R_16BF : CUDA_R_32F};
  std::string epilogue = ins.args.epilogue;
  bool gelu = !epilogue.empty();
  if ((gelu &&
       (epilogue != "gelu_tanh" || out.size() != 2 || out[1].elements != out[0].elements)) ||
      (!gelu && out.size() != 1)) {
    error = "linear_fwd: an epilogue needs gelu_tanh and two outputs of one size, none one "
            "output";
    return false;
  }
  void *y = gelu ? nullptr : paddedRows(ins, true, 0, sh.ld);
  return gemm->linearForward(at<T>(x), at<T>(w), in.size() > 2 ? at<T>(in[2]) : nullptr,
                             y ? y : at<T>(out[gelu ? 1 : 0]), sh, s, error,
                             gelu ? at<T>(out[0]) : nullptr);
}

template <typename T> bool CudaExecutor::State::kernelLinearBwd(const KernelCall &call) {
  auto &[ins, in, out, error, s] = call;
  auto ok = [&](cudaError_t e) { return check(e, ins.kernel->name, error); };
  if (!ins.args.fp8.empty())
    return fp8Linear<T>(ins, error);
  const Buffer &w = in[2];
  bool tr = ins.args.transposed;
  cu::LinearShape sh{rowsOf(in[1]), tr ? w.shape[0] : w.shape[1], tr ? w.shape[1] : w.shape[0], tr,
                     bf16 ? CUDA_R_16BF : CUDA_R_32F};
  // `accumulate`: the GEMM adds dW into its fp32 accumulator (beta = 1)
  // and the bias gradient is added from a scratch.
  bool accumulate = ins.args.accumulate;
  float *dw = accumulate ? at<float>(out[1]) : gradTarget(out[1], 0, error);
  const void *dy = paddedRows(ins, false, 0, sh.ld);
  if (!dw ||
      !gemm->linearBackward(dy ? dy : at<T>(in[0]), at<T>(in[1]), at<T>(w), at<T>(out[0]), dw, sh,
                            s, error) ||
      (!accumulate && !gradDone(out[1], dw, error)))
    return false;
  if (out.size() < 3)
    return true;
  void *sums = sumsScratch(sh.n, sh.out, error);
  if (accumulate) {
    auto *db = static_cast<float *>(tmp(3, size_t(sh.out) * 4, error));
    return db && sums && ok(cu::sumRows(at<T>(in[0]), db, sh.n, sh.out, s, sums)) &&
           ok(cu::addInto(at<float>(out[2]), static_cast<const float *>(db), sh.out, s));
  }
  float *db = gradTarget(out[2], 3, error);
  return db && sums && ok(cu::sumRows(at<T>(in[0]), db, sh.n, sh.out, s, sums)) &&
         gradDone(out[2], db, error);
}

template <typename T> bool CudaExecutor::State::kernelSplitConcat(const KernelCall &call) {
  auto &[ins, in, out, error, s] = call;
  auto ok = [&](cudaError_t e) { return check(e, ins.kernel->name, error); };
  bool split = ins.kernel->id == KernelId::Split;
  const Buffer &whole = split ? in[0] : out[0];
  int64_t offset = 0;
  for (const Buffer &p : split ? out : in) {
    if (!ok(cu::columns(split ? at<T>(whole) : at<T>(p), split ? at<T>(p) : at<T>(whole),
                        rowsOf(whole), lastDim(whole), offset, lastDim(p), split, s)))
      return false;
    offset += lastDim(p);
  }
  return true;
}

template <typename T> bool CudaExecutor::State::kernelRotary(const KernelCall &call) {
  auto &[ins, in, out, error, s] = call;
  auto ok = [&](cudaError_t e) { return check(e, ins.kernel->name, error); };
  const float *cs = rotaryTable(ins, in[0].shape[1], error);
  if (!cs)
    return false;
  int64_t hd = int64_t(ins.args.head_dim);
  for (int i = 0; i < 2; ++i)
    if (!ok(cu::rotary(at<T>(in[i]), at<T>(out[i]), in[i].shape[0], in[i].shape[1],
                       in[i].shape[2] / hd, hd, cs, ins.args.inverse, s)))
      return false;
  return true;
}

template <typename T> bool CudaExecutor::State::kernelAttention(const KernelCall &call) {
  auto &[ins, in, out, error, s] = call;
  bool fwd = ins.kernel->id == KernelId::AttentionFwd;
  const Buffer &q = in[fwd ? 0 : 1];
  kernels::cpu::AttentionShape a = attentionShape(ins, q, in[fwd ? 1 : 2]);
  cu::AttentionDims d{a.batch, a.seq, a.heads, a.kvHeads, a.headDim, a.scale, a.causal, a.window};
  // Tensor-core attention (attention_gemm.cu). The forward's
  // log-sum-exps are kept by output buffer: the backward reads the
  // output the last forward into that buffer wrote, and its statistics.
  size_t lseBytes = size_t(d.batch * d.heads * d.seq) * 4;
  const Buffer &o = fwd ? out[0] : in[4];
  auto &kept = lses[{spaceKey(o), o.offset, o.name}];
  if (!kept)
    kept = std::make_unique<DevBuf>();
  if (!kept->reserve(lseBytes)) {
    error = "out of GPU memory for attention statistics";
    return false;
  }
  auto *lse = kept->as<float>();
#ifdef LLMOPT_HAVE_CUDNN
  if constexpr (std::is_same<T, cu::bf16>::value) {
    auto shape = std::make_tuple(d.batch, d.seq, d.heads, d.kvHeads, d.headDim, fwd);
    if (cudnnWanted && !cudnn && !(cudnn = cu::CudnnAttention::create(error))) {
      cudnnFailed(error);
      cudnnWanted = false;
    }
    if (cudnnWanted && cu::CudnnAttention::supports(d) && !cudnnRefused.count(shape)) {
      if (fwd) {
        if (cudnn->forward(at<T>(in[0]), at<T>(in[1]), at<T>(in[2]), at<T>(out[0]), lse, d, s,
                           error)) {
          lseFresh.insert(lse);
          return true;
        }
        if (capturing)
          return false; // the capture fails; plain launches try again
        cudnnRefused.insert(shape);
        cudnnFailed(error);
      } else if (lseFresh.count(lse)) {
        if (cudnn->backward(at<T>(in[0]), at<T>(in[1]), at<T>(in[2]), at<T>(in[3]), at<T>(in[4]),
                            lse, at<T>(out[0]), at<T>(out[1]), at<T>(out[2]), d, s, error))
          return true;
        if (capturing)
          return false;
        cudnnRefused.insert(shape);
        cudnnFailed(error);
      }
    }
  }
#endif
  // The GEMM attention's scratch (only on this path: cuDNN needs less).
  void *scratch = tmp(5, cu::attentionGemmScratchBytes(d, sizeof(T)), error);
  if (!scratch)
    return false;
  if (fwd) {
    lseFresh.insert(lse);
    return cu::attentionForwardGemm(*gemm, at<T>(in[0]), at<T>(in[1]), at<T>(in[2]), at<T>(out[0]),
                                    lse, d, scratch, s, error);
  }
  if (!lseFresh.count(lse)) {
    // No forward wrote this output in this step (a plan that recomputes
    // it elsewhere): the statistics again.
    auto *again = static_cast<T *>(tmp(2, size_t(q.elements) * sizeof(T), error));
    if (!again || !cu::attentionForwardGemm(*gemm, at<T>(in[1]), at<T>(in[2]), at<T>(in[3]), again,
                                            lse, d, scratch, s, error))
      return false;
  }
  return cu::attentionBackwardGemm(*gemm, at<T>(in[0]), at<T>(in[1]), at<T>(in[2]), at<T>(in[3]),
                                   at<T>(in[4]), lse, at<T>(out[0]), at<T>(out[1]), at<T>(out[2]),
                                   d, scratch, s, error);
}

template <typename T> bool CudaExecutor::State::kernelGeluFwd(const KernelCall &call) {
  auto &[ins, in, out, error, s] = call;
  auto ok = [&](cudaError_t e) { return check(e, ins.kernel->name, error); };
  return ok(cu::geluForward(at<T>(in[0]), at<T>(out[0]), in[0].elements, ins.args.tanh, s));
}

template <typename T> bool CudaExecutor::State::kernelGeluBwd(const KernelCall &call) {
  auto &[ins, in, out, error, s] = call;
  auto ok = [&](cudaError_t e) { return check(e, ins.kernel->name, error); };
  return ok(cu::geluBackward(at<T>(in[0]), at<T>(in[1]), at<T>(out[0]), in[1].elements,
                             ins.args.tanh, s));
}

template <typename T> bool CudaExecutor::State::kernelSwiGLUFwd(const KernelCall &call) {
  auto &[ins, in, out, error, s] = call;
  auto ok = [&](cudaError_t e) { return check(e, ins.kernel->name, error); };
  return ok(cu::swigluForward(at<T>(in[0]), at<T>(in[1]), at<T>(out[0]), in[0].elements, s));
}

template <typename T> bool CudaExecutor::State::kernelSwiGLUBwd(const KernelCall &call) {
  auto &[ins, in, out, error, s] = call;
  auto ok = [&](cudaError_t e) { return check(e, ins.kernel->name, error); };
  return ok(cu::swigluBackward(at<T>(in[0]), at<T>(in[1]), at<T>(in[2]), at<T>(out[0]),
                               at<T>(out[1]), in[1].elements, s));
}

template <typename T> bool CudaExecutor::State::kernelAdd(const KernelCall &call) {
  auto &[ins, in, out, error, s] = call;
  auto ok = [&](cudaError_t e) { return check(e, ins.kernel->name, error); };
  // Activations (one dtype), or a gradient added into its fp32 accumulator.
  // (Inside a fused body of a bf16 plan everything is an fp32 copy: T is
  // float whatever the buffers' dtypes say.)
  DType a = in[0].dtype, b = in[1].dtype, y = out[0].dtype;
  if (std::is_same<T, float>::value)
    return ok(cu::add(at<float>(in[0]), at<float>(in[1]), at<float>(out[0]), out[0].elements, s));
  if (a == b && b == y)
    return a == DType::F32
               ? ok(cu::add(at<float>(in[0]), at<float>(in[1]), at<float>(out[0]), out[0].elements,
                            s))
               : ok(cu::add(at<T>(in[0]), at<T>(in[1]), at<T>(out[0]), out[0].elements, s));
  if (y == DType::F32 && a == DType::F32 && ptr(in[0]) == ptr(out[0]))
    return ok(cu::addInto(at<float>(out[0]), at<T>(in[1]), out[0].elements, s));
  error = "add: mixed dtypes other than a gradient into its fp32 accumulator";
  return false;
}

template <typename T> bool CudaExecutor::State::kernelCopy(const KernelCall &call) {
  auto &[ins, in, out, error, s] = call;
  auto ok = [&](cudaError_t e) { return check(e, ins.kernel->name, error); };
  if (in[0].dtype != out[0].dtype) {
    error = "copy between dtypes";
    return false;
  }
  if (ptr(out[0]) == ptr(in[0]))
    return true;
  return ok(
      cudaMemcpyAsync(ptr(out[0]), ptr(in[0]), size_t(out[0].bytes), cudaMemcpyDeviceToDevice, s));
}

template <typename T> bool CudaExecutor::State::kernelScale(const KernelCall &call) {
  auto &[ins, in, out, error, s] = call;
  auto ok = [&](cudaError_t e) { return check(e, ins.kernel->name, error); };
  return out[0].dtype == DType::F32 ? ok(cu::scale(at<float>(in[0]), at<float>(out[0]),
                                                   out[0].elements, float(ins.args.factor), s))
                                    : ok(cu::scale(at<T>(in[0]), at<T>(out[0]), out[0].elements,
                                                   float(ins.args.factor), s));
}

template <typename T> bool CudaExecutor::State::kernelFill(const KernelCall &call) {
  auto &[ins, in, out, error, s] = call;
  auto ok = [&](cudaError_t e) { return check(e, ins.kernel->name, error); };
  return out[0].dtype == DType::F32
             ? ok(cu::fill(at<float>(out[0]), out[0].elements, float(ins.args.value), s))
             : ok(cu::fill(at<T>(out[0]), out[0].elements, float(ins.args.value), s));
}

template <typename T> bool CudaExecutor::State::kernelBiasAdd(const KernelCall &call) {
  auto &[ins, in, out, error, s] = call;
  auto ok = [&](cudaError_t e) { return check(e, ins.kernel->name, error); };
  return ok(
      cu::biasAdd(at<T>(in[0]), at<T>(in[1]), at<T>(out[0]), out[0].elements, in[1].elements, s));
}

template <typename T> bool CudaExecutor::State::kernelSumRows(const KernelCall &call) {
  auto &[ins, in, out, error, s] = call;
  auto ok = [&](cudaError_t e) { return check(e, ins.kernel->name, error); };
  float *g = gradTarget(out[0], 0, error);
  int64_t rows = in[0].elements / out[0].elements;
  void *sums = g ? sumsScratch(rows, out[0].elements, error) : nullptr;
  return sums && ok(cu::sumRows(at<T>(in[0]), g, rows, out[0].elements, s, sums)) &&
         gradDone(out[0], g, error);
}

template <typename T> bool CudaExecutor::State::kernelCrossEntropyFwd(const KernelCall &call) {
  auto &[ins, in, out, error, s] = call;
  auto ok = [&](cudaError_t e) { return check(e, ins.kernel->name, error); };
  // The rows' log-sum-exps kept by logits buffer for the backward of the
  // same micro-batch (one read of the logits fewer).
  auto *rowLoss = static_cast<float *>(tmp(1, size_t(rowsOf(in[0])) * 4, error));
  auto &kept = ceLses[{spaceKey(in[0]), in[0].offset, in[0].name}];
  if (!kept)
    kept = std::make_unique<DevBuf>();
  if (!rowLoss || !kept->reserve(size_t(rowsOf(in[0])) * 4))
    return (error = "out of GPU memory for the cross-entropy's row statistics", false);
  lseFresh.insert(kept->as<float>());
  int64_t pitch = 0;
  const void *z = paddedRows(ins, false, 0, pitch);
  return ok(cu::crossEntropyForward(
      z ? static_cast<const T *>(z) : at<T>(in[0]), at<int32_t>(in[1]), rowLoss, at<float>(out[0]),
      rowsOf(in[0]), lastDim(in[0]), int64_t(ins.args.ignore_index), s, kept->as<float>(), pitch));
}

template <typename T> bool CudaExecutor::State::kernelCrossEntropyBwd(const KernelCall &call) {
  auto &[ins, in, out, error, s] = call;
  auto ok = [&](cudaError_t e) { return check(e, ins.kernel->name, error); };
  auto *scale = static_cast<float *>(tmp(1, 16, error));
  auto kept = ceLses.find({spaceKey(in[0]), in[0].offset, in[0].name});
  const float *lse = kept != ceLses.end() && lseFresh.count(kept->second->as<float>())
                         ? kept->second->as<float>()
                         : nullptr;
  int64_t pitch = 0, pitchD = 0;
  const void *z = paddedRows(ins, false, 0, pitch);
  void *dz = paddedRows(ins, true, 0, pitchD);
  return scale &&
         ok(cu::crossEntropyBackward(
             z ? static_cast<const T *>(z) : at<T>(in[0]), at<int32_t>(in[1]), at<float>(in[2]),
             scale, dz ? static_cast<T *>(dz) : at<T>(out[0]), rowsOf(in[0]), lastDim(in[0]),
             int64_t(ins.args.ignore_index), s, lse, pitch, pitchD));
}

template <typename T> bool CudaExecutor::State::kernelGlobalNorm(const KernelCall &call) {
  auto &[ins, in, out, error, s] = call;
  auto ok = [&](cudaError_t e) { return check(e, ins.kernel->name, error); };
  // Every accumulator's squares into one fp64 sum (as the CPU).
  auto *dsum = static_cast<double *>(tmp(1, 8, error));
  if (!dsum || !ok(cudaMemsetAsync(dsum, 0, 8, s)))
    return false;
  std::vector<const float *> arrays;
  std::vector<int64_t> counts;
  for (const Buffer &b : in) {
    arrays.push_back(at<float>(b));
    counts.push_back(b.elements);
  }
  if (!squaresInto(ins, std::move(arrays), std::move(counts), dsum, error))
    return false;
  if (graphs) // on the device: nothing of a step may wait for the host
    return ok(cu::sqrtOfSum(dsum, at<float>(out[0]), s));
  double sum = 0;
  if (!drainDevice(error) || !ok(cudaMemcpy(&sum, dsum, 8, cudaMemcpyDeviceToHost)))
    return false;
  float norm = float(std::sqrt(sum));
  hostNorms[ptr(out[0])] = norm;
  return ok(cudaMemcpy(ptr(out[0]), &norm, 4, cudaMemcpyHostToDevice));
}

template <typename T> bool CudaExecutor::State::kernelAdamW(const KernelCall &call) {
  auto &[ins, in, out, error, s] = call;
  auto ok = [&](cudaError_t e) { return check(e, ins.kernel->name, error); };
  if (adamwFollowers.count(&ins))
    return true; // updated by its run's first instruction
  if (auto it = adamwLeaders.find(&ins); it != adamwLeaders.end())
    return runAdamW(adamwRuns[size_t(it->second)], ins, error);
  // The update of this rank's chunk (ZeRO; the whole otherwise): its
  // moments, its part of the master (all of a ZeRO-3 chunk) and of the
  // working copy, and its part of the gradient (all of a ZeRO-2/3
  // gradient chunk), as the CPU backend.
  Param &p = params.at(ins.args.param);
  bool chunkGrad = isGradShard(in[0]);
  int64_t count = p.shard.size();
  if (in[0].dtype != DType::F32 ||
      (chunkGrad ? count > in[0].elements : p.shard.end > in[0].elements) ||
      (p.valueChunked ? p.n != count : p.shard.end > p.n))
    return (error =
                "adamw of '" + ins.args.param + "': gradient or moments do not match the parameter",
            false);
  float *value = p.master.as<float>() + (p.valueChunked ? 0 : p.shard.begin);
  const float *grad = at<float>(in[0]) + (chunkGrad ? 0 : p.shard.begin);
  cu::bf16 *working = p.working.p ? p.working.as<cu::bf16>() + p.shard.begin : nullptr;
  if (graphs) {
    cu::AdamWArgs a{float(ins.args.lr),
                    float(ins.args.beta1),
                    float(ins.args.beta2),
                    float(ins.args.eps),
                    float(ins.args.weight_decay),
                    1.0f,
                    0};
    return ok(cu::adamwDevice(value, grad, p.m.as<float>(), p.v.as<float>(), working, count, a,
                              at<float>(in[1]), ins.args.max_norm, stepCounter.as<int64_t>(), s));
  }
  float norm = 0;
  if (auto it = hostNorms.find(ptr(in[1])); it != hostNorms.end())
    norm = it->second;
  else if (!drainDevice(error) || !ok(cudaMemcpy(&norm, ptr(in[1]), 4, cudaMemcpyDeviceToHost)))
    return false;
  double maxNorm = ins.args.max_norm;
  cu::AdamWArgs a{float(ins.args.lr),
                  float(ins.args.beta1),
                  float(ins.args.beta2),
                  float(ins.args.eps),
                  float(ins.args.weight_decay),
                  maxNorm > 0 ? float(std::min(1.0, maxNorm / (double(norm) + 1e-6))) : 1.0f,
                  step};
  return ok(cu::adamw(value, grad, p.m.as<float>(), p.v.as<float>(), working, count, a, s));
}

bool CudaExecutor::State::squaresInto(const Instruction &ins, std::vector<const float *> arrays,
                                      std::vector<int64_t> counts, double *dsum,
                                      std::string &error) {
  // Two launches for all the arrays (a global norm of GPT-2 124M's 148
  // gradients took 148 launches, each with its blocks' partials added by
  // its last block).
  SquaresTable &t = squaresTables[&ins];
  if (t.arrays != arrays || t.counts != counts) {
    if (capturing) {
      // A capture cannot wait for the upload: one launch per array.
      for (size_t i = 0; i < arrays.size(); ++i)
        if (!check(cu::sumSquaresAccumulate(arrays[i], counts[i], dsum, stream), ins.kernel->name,
                   error))
          return false;
      return true;
    }
    // A graph captured with the old table launches from its buffers, which
    // the new one may free.
    if (!t.arrays.empty())
      dropGraphs();
    std::vector<cu::SquaresChunk> chunks = cu::squaresChunks(arrays, counts);
    size_t cb = chunks.size() * sizeof(cu::SquaresChunk);
    t.arrays.clear(); // (made again on a failure)
    if (!t.chunks.reserve(std::max<size_t>(cb, 1)) ||
        !t.partials.reserve(std::max<size_t>(chunks.size(), 1) * sizeof(double)))
      return (error = std::string(ins.kernel->name) +
                      ": out of GPU memory for the sums of squares' chunks",
              false);
    // On the instructions' stream, waited for (the host vector is this
    // function's); NCCL's collectives the stream waits on are drained first,
    // under their watchdog.
    if (!drainDevice(error))
      return false;
    if ((cb && cudaMemcpyAsync(t.chunks.p, chunks.data(), cb, cudaMemcpyHostToDevice, stream) !=
                   cudaSuccess) ||
        cudaStreamSynchronize(stream) != cudaSuccess)
      return (error = std::string(ins.kernel->name) + ": cannot upload the sums of squares' chunks",
              false);
    t.count = int64_t(chunks.size());
    t.arrays = std::move(arrays);
    t.counts = std::move(counts);
  }
  return check(cu::sumSquaresChunks(t.chunks.as<cu::SquaresChunk>(), t.count,
                                    t.partials.as<double>(), dsum, stream),
               ins.kernel->name, error);
}

/// ZeRO's gradient norm in two parts: each rank's sum of squares over its
/// chunks (fp64 on the device, rounded to fp32 as the CPU backend does),
/// all-reduced by the plan, then its square root.
template <typename T> bool CudaExecutor::State::kernelSumSquares(const KernelCall &call) {
  auto &[ins, in, out, error, s] = call;
  auto ok = [&](cudaError_t e) { return check(e, ins.kernel->name, error); };
  int index = 0, size = 1;
  if (!ins.args.shard.empty() && !plan->place(ins.args.shard, rank, index, size, error))
    return false;
  auto *dsum = static_cast<double *>(tmp(1, 8, error));
  if (!dsum || !ok(cudaMemsetAsync(dsum, 0, 8, s)))
    return false;
  std::vector<const float *> arrays;
  std::vector<int64_t> counts;
  for (const Buffer &b : in) {
    if (b.dtype != DType::F32)
      return (error = "sum_squares of a buffer that is not fp32", false);
    Chunk c = isGradShard(b) ? Chunk{0, b.elements} : shardChunk(b.elements, size, index);
    arrays.push_back(at<float>(b) + c.begin);
    counts.push_back(c.size());
  }
  if (!squaresInto(ins, std::move(arrays), std::move(counts), dsum, error))
    return false;
  // Rounded to fp32 on the device, in stream order: no host round trip
  // (a CUDA graph can capture it).
  return ok(cu::floatOfSum(dsum, at<float>(out[0]), s));
}

/// The vocabulary-parallel cross-entropy (tensor parallelism's LM head):
/// each rank's log-sum-exp and target logit over its part, gathered over
/// the axis by the plan, then the loss and each part's gradient.
template <typename T> bool CudaExecutor::State::kernelVPCEStats(const KernelCall &call) {
  auto &[ins, in, out, error, s] = call;
  auto ok = [&](cudaError_t e) { return check(e, ins.kernel->name, error); };
  int64_t rows = 0, part = 0, offset = 0, real = 0;
  return vocabPart(ins, in[0], rows, part, offset, real, error) &&
         ok(cu::vpCrossEntropyStats(at<T>(in[0]), at<int32_t>(in[1]), at<float>(out[0]),
                                    at<float>(out[1]), rows, part, real, offset,
                                    int64_t(ins.args.ignore_index), s));
}

template <typename T> bool CudaExecutor::State::kernelVPCELoss(const KernelCall &call) {
  auto &[ins, in, out, error, s] = call;
  auto ok = [&](cudaError_t e) { return check(e, ins.kernel->name, error); };
  int64_t rows = in[1].elements, parts = rows ? in[0].elements / rows : 1;
  return ok(cu::vpCrossEntropyLoss(at<float>(in[0]), at<float>(in[1]), at<int32_t>(in[2]),
                                   at<float>(out[0]), rows, parts, int64_t(ins.args.ignore_index),
                                   s));
}

template <typename T> bool CudaExecutor::State::kernelVPCEBwd(const KernelCall &call) {
  auto &[ins, in, out, error, s] = call;
  auto ok = [&](cudaError_t e) { return check(e, ins.kernel->name, error); };
  int64_t rows = 0, part = 0, offset = 0, real = 0;
  if (!vocabPart(ins, in[0], rows, part, offset, real, error))
    return false;
  int64_t gathered = rows ? in[2].elements / rows : 1;
  auto *counted = static_cast<unsigned long long *>(tmp(24, 8, error));
  // (It counts the rows on the host: NCCL's collectives first, under the
  // watchdog.)
  return counted && drainDevice(error) &&
         ok(cu::vpCrossEntropyBackward(at<T>(in[0]), at<int32_t>(in[1]), at<float>(in[2]),
                                       at<float>(in[3]), at<T>(out[0]), rows, part, real, gathered,
                                       offset, int64_t(ins.args.ignore_index), counted, s));
}

bool CudaExecutor::State::ringDims(const Instruction &ins, int keysRank, cu::AttentionDims &d,
                                   std::string &error) {
  bool bwd = ins.kind == Instruction::Kind::CPRingAttentionBwd;
  kernels::cpu::AttentionShape a = attentionShape(ins, ins.ins[bwd ? 1 : 0], ins.ins[bwd ? 2 : 1]);
  d = cu::AttentionDims{a.batch, a.seq, a.heads, a.kvHeads, a.headDim, a.scale, a.causal, a.window};
  return (d.qPos = cpPositions(ins.axis, a.seq, -1, error)) &&
         (d.kPos = cpPositions(ins.axis, a.seq, keysRank, error));
}

template <typename T> bool CudaExecutor::State::kernelSqrt(const KernelCall &call) {
  auto &[ins, in, out, error, s] = call;
  auto ok = [&](cudaError_t e) { return check(e, ins.kernel->name, error); };
  if (in[0].dtype != DType::F32 || out[0].dtype != DType::F32 || in[0].elements != out[0].elements)
    return (error = "sqrt of a buffer that is not fp32, or into one of another size", false);
  // A scalar (the gradient norm) in practice: through the host, where
  // AdamW's clipping then finds it.
  std::vector<float> x(size_t(in[0].elements));
  if (!drainDevice(error) ||
      !ok(cudaMemcpyAsync(x.data(), ptr(in[0]), x.size() * 4, cudaMemcpyDeviceToHost, s)) ||
      !ok(cudaStreamSynchronize(s)))
    return false;
  for (float &v : x)
    v = std::sqrt(std::max(0.0f, v));
  if (x.size() == 1)
    hostNorms[ptr(out[0])] = x[0];
  return ok(cudaMemcpyAsync(ptr(out[0]), x.data(), x.size() * 4, cudaMemcpyHostToDevice, s)) &&
         ok(cudaStreamSynchronize(s));
}

template <typename T> bool CudaExecutor::State::kernelFused(const KernelCall &call) {
  auto &[ins, in, out, error, s] = call;
  auto ok = [&](cudaError_t e) { return check(e, ins.kernel->name, error); };
  // The generated kernel: one launch over the raw buffers (it converts
  // loads and stores itself and keeps its temporaries in shared memory).
  if (auto it = launchers.find(ins.fusedName); it != launchers.end() && it->second) {
    std::vector<const void *> ip;
    std::vector<void *> op;
    for (const Buffer &b : in)
      ip.push_back(raw(b));
    for (const Buffer &b : out)
      op.push_back(raw(b));
    int64_t cols = lastDim(out[0]), rows = cols ? out[0].elements / cols : 0;
    if (rows == 0)
      return true;
    if (cudaError_t e = cudaError_t(it->second(ip.data(), op.data(), rows, cols, s));
        e == cudaSuccess)
      return true;
    else if (capturing || (e != cudaErrorInvalidValue && e != cudaErrorInvalidConfiguration &&
                           e != cudaErrorLaunchOutOfResources))
      return ok(e);
    // A launch this GPU refuses (shared memory, resources): this fused
    // kernel runs its body kernel by kernel from now on.
    cudaGetLastError();
    std::fprintf(stderr,
                 "llm-run: fused kernel %s cannot launch here; its body runs kernel "
                 "by kernel\n",
                 ins.fusedName.c_str());
    launchers.erase(it);
  }
  // The body kernel by kernel (the generated kernel in one launch is the
  // next step), in fp32 as the generated kernel computes: fp32
  // temporaries, and fp32 copies of the fused kernel's 16-bit buffers.
  while (temps.size() < ins.temps.size())
    temps.push_back(std::make_unique<DevBuf>());
  for (size_t i = 0; i < ins.temps.size(); ++i) {
    int64_t n = 1;
    for (int64_t d : ins.temps[i])
      n *= d;
    if (!temps[i]->reserve(size_t(n) * 4)) {
      error = "out of GPU memory for a fused kernel's temporaries";
      return false;
    }
  }
  std::vector<const Buffer *> wide;
  for (const std::vector<Buffer> *list : {&in, &out})
    for (const Buffer &b : *list)
      if (b.dtype == DType::BF16)
        wide.push_back(&b);
  while (shadowBufs.size() < wide.size())
    shadowBufs.push_back(std::make_unique<DevBuf>());
  for (size_t i = 0; i < wide.size(); ++i) {
    const Buffer &b = *wide[i];
    if (!shadowBufs[i]->reserve(size_t(b.elements) * 4) ||
        !ok(cu::toFloat(static_cast<const cu::bf16 *>(raw(b)), shadowBufs[i]->as<float>(),
                        b.elements, s))) {
      shadows.clear(); // nothing may read through copies that were not made
      return error.empty() ? (error = "out of GPU memory for a fused kernel", false) : false;
    }
    shadows[{spaceKey(b), b.offset, b.name}] = shadowBufs[i]->p;
  }
  // Each body kernel's 16-bit outputs rounded as they are written, as the
  // CPU backend and the generated kernel do.
  bool done = true;
  for (const Instruction &sub : ins.body) {
    if (!(done = kernel<float>(sub, error)))
      break;
    for (size_t i = 0; done && i < wide.size(); ++i)
      for (const Buffer &o : sub.outs)
        if (o.space == wide[i]->space && o.offset == wide[i]->offset && o.name == wide[i]->name)
          done = ok(cu::fromFloat(shadowBufs[i]->as<float>(),
                                  static_cast<cu::bf16 *>(raw(*wide[i])), wide[i]->elements, s)) &&
                 ok(cu::toFloat(static_cast<const cu::bf16 *>(raw(*wide[i])),
                                shadowBufs[i]->as<float>(), wide[i]->elements, s));
  }
  shadows.clear();
  for (size_t i = 0; done && i < wide.size(); ++i)
    if (wide[i] >= out.data() && wide[i] < out.data() + out.size())
      done = ok(cu::fromFloat(shadowBufs[i]->as<float>(), static_cast<cu::bf16 *>(raw(*wide[i])),
                              wide[i]->elements, s));
  return done;
}

template <typename T> bool CudaExecutor::State::kernelMoERouter(const KernelCall &call) {
  auto &[ins, in, out, error, s] = call;
  bool fwd = ins.kernel->id == KernelId::MoERouterFwd;
  if (!fwd && in.size() != 5 && in.size() != 6)
    return (error = "moe_router_bwd takes 5 inputs, or 6 with the sequence's expert counts", false);
  const Buffer &x = in[fwd ? 0 : 1], &gate = in[fwd ? 1 : 2];
  const Buffer &weights = fwd ? out[0] : in[3], &routes = fwd ? out[1] : in[4];
  if (weights.dtype != DType::F32 || routes.dtype != DType::I32 ||
      (!fwd && in[0].dtype != DType::F32))
    return (error = std::string(ins.kernel->name) +
                    ": routing weights must be f32 and expert indices i32",
            false);
  cu::MoERouterDims d{rowsOf(x), lastDim(x), gate.shape[0], int64_t(ins.args.top_k),
                      ins.args.normalize};
  void *scratch = tmp(9, cu::moeRouterScratchBytes(d, sizeof(T)), error);
  if (!scratch)
    return false;
  if (fwd)
    return cu::moeRouterForwardGemm(*gemm, at<T>(x), at<T>(gate), at<float>(weights),
                                    at<int32_t>(routes), d, scratch, s, error);
  if (in.size() == 6 &&
      (in[5].elements != d.experts || in[5].dtype != DType::F32 || ins.args.aux_tokens < 1))
    return (error = "moe_router_bwd: the counts need one f32 entry per expert and "
                    "aux_tokens >= 1",
            false);
  cu::MoEAux aux{float(ins.args.aux_loss), in.size() == 6 ? at<float>(in[5]) : nullptr,
                 int64_t(ins.args.aux_tokens), float(ins.args.aux_scale)};
  float *dgate = gradTarget(out[1], 15, error);
  return dgate &&
         cu::moeRouterBackwardGemm(*gemm, at<float>(in[0]), at<T>(x), at<T>(gate),
                                   at<float>(weights), at<int32_t>(routes), at<T>(out[0]), dgate, d,
                                   aux, scratch, s, error) &&
         gradDone(out[1], dgate, error);
}

template <typename T> bool CudaExecutor::State::kernelMoEExpertCounts(const KernelCall &call) {
  auto &[ins, in, out, error, s] = call;
  auto ok = [&](cudaError_t e) { return check(e, ins.kernel->name, error); };
  int64_t topK = int64_t(ins.args.top_k);
  if (topK < 1 || in[0].elements % topK != 0 || out[0].dtype != DType::F32)
    return (error = "moe_expert_counts: top_k must divide the indices; counts are f32", false);
  return ok(cu::moeExpertCounts(at<int32_t>(in[0]), at<float>(out[0]), in[0].elements / topK,
                                out[0].elements, topK, s));
}

template <typename T> bool CudaExecutor::State::kernelMoEDispatchCombine(const KernelCall &call) {
  auto &[ins, in, out, error, s] = call;
  auto ok = [&](cudaError_t e) { return check(e, ins.kernel->name, error); };
  // Tokens [n, hidden], routes [n, top_k], expert rows [experts, capacity,
  // hidden]; slots recomputed from the routes by each kernel.
  // (Shapes and dtypes checked when the plan was read: check.cpp.) The
  // indices come from the router, in range: not read back to check (a
  // step must not wait for the host; CUDA graphs capture it).
  KernelId id = ins.kernel->id;
  const Buffer &routes = ins.moeIndices(), &rows = ins.moeRows();
  int64_t topK = lastDim(routes), n = topK ? routes.elements / topK : 0;
  int64_t experts = rows.shape[0], capacity = rows.shape[1], hidden = rows.shape[2];
  auto *slots = static_cast<int64_t *>(tmp(10, size_t(std::max<int64_t>(1, n * topK)) * 8, error));
  int *bad = nullptr;
  if (!slots)
    return false;
  const int32_t *idx = at<int32_t>(routes);
  bool valid = true;
  cudaError_t e = id == KernelId::MoEDispatchFwd
                      ? cu::moeDispatchForward(at<T>(in[0]), idx, at<T>(out[0]), n, hidden, topK,
                                               experts, capacity, slots, bad, s, valid)
                  : id == KernelId::MoEDispatchBwd
                      ? cu::moeDispatchBackward(at<T>(in[0]), idx, at<T>(out[0]), n, hidden, topK,
                                                experts, capacity, slots, bad, s, valid)
                  : id == KernelId::MoECombineFwd
                      ? cu::moeCombineForward(at<T>(in[0]), at<float>(in[1]), idx, at<T>(out[0]), n,
                                              topK, hidden, experts, capacity, slots, bad, s, valid)
                      : cu::moeCombineBackward(at<T>(in[0]), at<T>(in[1]), at<float>(in[2]), idx,
                                               at<T>(out[0]), at<float>(out[1]), n, topK, hidden,
                                               experts, capacity, slots, bad, s, valid);
  if (!ok(e) || !valid)
    return false;
  if (id != KernelId::MoEDispatchFwd || graphs)
    return true;
  // The busiest expert's load: the experts compute that many rows (read
  // on the host: NCCL's collectives waited for first, under the watchdog).
  auto *counts = static_cast<float *>(tmp(23, size_t(experts) * 4, error));
  std::vector<float> load(static_cast<size_t>(experts));
  if (!counts || !ok(cu::moeExpertCounts(idx, counts, n, experts, topK, s)) ||
      !drainDevice(error) ||
      !ok(cudaMemcpyAsync(load.data(), counts, size_t(experts) * 4, cudaMemcpyDeviceToHost, s)) ||
      !ok(cudaStreamSynchronize(s)))
    return false;
  float most = load.empty() ? 0.0f : *std::max_element(load.begin(), load.end());
  // Rounded up to 64 rows (zero in, zero out): fewer distinct GEMM shapes
  // for cuBLASLt's heuristic and algorithm cache.
  int64_t busiest = (std::max<int64_t>(1, int64_t(most)) + 63) / 64 * 64;
  expertRows[{spaceKey(rows), rows.offset, rows.name}] = std::min(capacity, busiest);
  return true;
}

template <typename T> bool CudaExecutor::State::kernelMoEExperts(const KernelCall &call) {
  auto &[ins, in, out, error, s] = call;
  bool fwd = ins.kernel->id == KernelId::MoEExpertsFwd;
  const Buffer &x = in[fwd ? 0 : 1];
  size_t first = fwd ? 1 : 2, count = ins.args.swiglu ? 3 : 2;
  if (in.size() != first + count || (!fwd && out.size() != 1 + count) || x.shape.size() != 3)
    return (error = "moe experts take rows [experts, capacity, hidden] and " +
                    std::to_string(count) + " weights",
            false);
  cu::MoEExpertDims d{x.shape[0], x.shape[1], x.shape[2], in[first].shape[1], ins.args.swiglu};
  if (auto it = expertRows.find({spaceKey(x), x.offset, x.name}); it != expertRows.end())
    d.rows = it->second;
  void *scratch = tmp(9, cu::moeExpertsScratchBytes(d, sizeof(T)), error);
  if (!scratch)
    return false;
  // `accumulate`: the GEMMs add the weight gradients into their fp32
  // accumulators (the outputs) themselves.
  bool accumulate = !fwd && ins.args.accumulate;
  const T *w[3] = {};
  float *dw[3] = {};
  for (size_t i = 0; i < count; ++i) {
    w[i] = at<T>(in[first + i]);
    if (fwd)
      continue;
    dw[i] = accumulate ? at<float>(out[1 + i]) : gradTarget(out[1 + i], 12 + i, error);
    if (!dw[i])
      return false;
  }
  if (fwd)
    return cu::moeExpertsForwardGemm(*gemm, at<T>(x), w, at<T>(out[0]), d, scratch, s, error);
  if (!cu::moeExpertsBackwardGemm(*gemm, at<T>(in[0]), at<T>(x), w, at<T>(out[0]), dw, d, scratch,
                                  s, error))
    return false;
  for (size_t i = 0; !accumulate && i < count; ++i)
    if (!gradDone(out[1 + i], dw[i], error))
      return false;
  return true;
}

CudaExecutor::CudaExecutor() : s(std::make_unique<State>()) {}
CudaExecutor::~CudaExecutor() = default;

bool CudaExecutor::available() { return cu::deviceAvailable(); }

bool CudaExecutor::supports(const Plan &plan, int rank, int capability, std::set<std::string> &axes,
                            bool &bf16, std::string &error) {
  const Program *program = plan.programFor(rank);
  if (!program)
    return (error = "no program for rank " + std::to_string(rank), false);
  bool anyBf16 = false;
  // The kernels are built for sm_80 and sm_90a (with their PTX for newer
  // GPUs): an older GPU cannot run them, nor bf16 tensor cores.
  if (capability < 80)
    return (error = "an sm_" + std::to_string(capability) +
                    " GPU: the CUDA backend's kernels need sm_80 or newer (A100, H100 and later)",
            false);
  // A collective inside a computation moves one fp32 or bf16 buffer of
  // three dimensions in and one out.
  auto oneBlockEach = [](const Instruction &ins) {
    for (const std::vector<Buffer> *list : {&ins.ins, &ins.outs})
      if (list->size() != 1 || list->front().shape.size() != 3 ||
          (list->front().dtype != DType::F32 && list->front().dtype != DType::BF16))
        return false;
    return true;
  };
  std::function<bool(const Instruction &)> supported = [&](const Instruction &ins) {
    if (ins.kind != Instruction::Kind::Kernel) {
      // What the step driver runs, with what this backend's memory and
      // kernels take: the collectives inside computations first.
      using K = Instruction::Kind;
      if (ins.kind == K::SeqAllGather || ins.kind == K::SeqReduceScatter ||
          ins.kind == K::SeqSplit || ins.kind == K::CPAllGather || ins.kind == K::CPReduceScatter) {
        if (!oneBlockEach(ins))
          return (error = "the CUDA backend gathers one fp32 or bf16 [batch, seq, hidden] "
                          "buffer per sequence collective",
                  false);
        // The whole holds every rank's rows: parts x the chunk's.
        bool gathers = ins.kind == K::SeqAllGather || ins.kind == K::CPAllGather;
        const Buffer &whole = gathers ? ins.outs[0] : ins.ins[0],
                     &chunk = gathers ? ins.ins[0] : ins.outs[0];
        int index = 0, parts = 1;
        if (!plan.place(ins.axis, rank, index, parts, error))
          return false;
        if (whole.shape[0] != chunk.shape[0] || whole.shape[2] != chunk.shape[2] ||
            whole.shape[1] != chunk.shape[1] * parts)
          return (error = "a sequence collective over '" + ins.axis + "' whose whole is not " +
                          std::to_string(parts) + " chunks",
                  false);
        axes.insert(ins.axis);
        return true;
      }
      if (ins.kind == K::EPDispatch || ins.kind == K::EPCombine) {
        if (!oneBlockEach(ins))
          return (error = "the CUDA backend moves one fp32 or bf16 [experts, capacity, hidden] "
                          "buffer per expert all-to-all",
                  false);
        axes.insert(ins.axis);
        return true;
      }
      if (ins.kind == K::CPRingAttentionFwd || ins.kind == K::CPRingAttentionBwd) {
        // On the baseline attention kernels (positions), head_dim <= 256.
        for (const std::vector<Buffer> *list : {&ins.ins, &ins.outs})
          for (const Buffer &b : *list)
            if (b.dtype != DType::F32 && b.dtype != DType::BF16)
              return (error = "the CUDA backend's ring attention takes fp32 and bf16 buffers",
                      false);
        if (ins.args.head_dim > 256)
          return (error = "the CUDA backend's ring attention takes head_dim up to 256", false);
        const Buffer &q = ins.ins[ins.kind == K::CPRingAttentionBwd ? 1 : 0];
        if (ins.args.kv_heads <= 0 || int64_t(ins.args.heads) % int64_t(ins.args.kv_heads) ||
            q.shape.size() != 3 || q.shape[1] % 2)
          return (error = "ring attention of heads that are not a multiple of its kv heads, or of "
                          "a sequence chunk that does not halve",
                  false);
        axes.insert(ins.axis); // the ring's steps: grouped sends and receives on it
        return true;
      }
      // The rest of what the step driver runs: data parallelism's
      // all-reduces, ZeRO's reduce-scatters and gathers, the pipeline's
      // transfers.
      if (StepDriver::runs(ins.kind)) {
        for (const std::vector<Buffer> *list : {&ins.ins, &ins.outs, &ins.buffers})
          for (const Buffer &b : *list)
            if (b.dtype != DType::F32 && b.dtype != DType::BF16)
              return (error = "the CUDA backend moves fp32 and bf16 buffers only", false);
        if (!ins.axis.empty())
          axes.insert(ins.axis);
        return true;
      }
      error = "the CUDA backend does not run this instruction kind";
      return false;
    }
    if (!State::kernelTable<float>()[size_t(ins.kernel->id)]) {
      error = std::string("the CUDA backend does not run '") + ins.kernel->name + "' yet";
      return false;
    }
    bool fwd = ins.kernel->id == KernelId::LinearFwd;
    bool fp8Linear = (fwd || ins.kernel->id == KernelId::LinearBwd) && ins.args.epilogue.empty() &&
                     !ins.args.accumulate && ins.args.fp8 == (fwd ? "e4m3" : "hybrid");
    // An amax over ranks (tensor parallelism): its axes' communicators.
    if (fp8Linear)
      for (const std::string &axis : ins.args.amaxAxes())
        axes.insert(axis);
    if (fp8Linear) {
      // cuBLASLt's fp8 products (sm_89 / sm_90) take dimensions of 16-byte
      // multiples: the tokens (the weight gradient's k) and both features.
      const Buffer &x = ins.ins[fwd ? 0 : 1], &w = ins.ins[fwd ? 1 : 2];
      if (capability < 89 || rowsOf(x) % 16 || w.shape[0] % 16 || w.shape[1] % 16) {
        error = std::string(ins.kernel->name) +
                ": fp8 GEMMs need an sm_89 / sm_90 GPU (this "
                "is sm_" +
                std::to_string(capability) +
                ") and tokens per micro-batch and "
                "features that are multiples of 16 (" +
                std::to_string(rowsOf(x)) + ", " + std::to_string(w.shape[1]) + " -> " +
                std::to_string(w.shape[0]) + ")";
        return false;
      }
    }
    // Sharded kernels: ZeRO's update and norm, tensor parallelism's
    // vocabulary-parallel embedding and cross-entropy (a padded
    // vocabulary's padding left out, as on the CPU).
    KernelId id = ins.kernel->id;
    bool sharded = id == KernelId::AdamW || id == KernelId::SumSquares ||
                   id == KernelId::EmbeddingFwd || id == KernelId::EmbeddingBwd ||
                   id == KernelId::VPCEStats || id == KernelId::VPCEBwd;
    // Context parallelism's positions: the rotary and learned position
    // embeddings (attention under it is the ring's, not a kernel).
    bool positioned = id == KernelId::Rotary || id == KernelId::PositionEmbeddingFwd ||
                      id == KernelId::PositionEmbeddingBwd;
    if ((!ins.args.fp8.empty() && !fp8Linear) || (!ins.args.shard.empty() && !sharded) ||
        (!ins.args.cp.empty() && !positioned)) {
      error =
          std::string(ins.kernel->name) +
          ": fp8 (other than linears), sharded (other than "
          "ZeRO's and the vocabulary-parallel embedding and loss) and context-parallel "
          "kernels (other than the rotary and position embeddings) are not run by the CUDA backend "
          "yet";
      return false;
    }
    if (id == KernelId::EmbeddingBwd && !ins.args.shard.empty() &&
        (ins.ins[0].space != Buffer::Space::Input || ins.ins[0].offset != 0)) {
      error = "a vocabulary-parallel embedding_bwd of tokens other than the step's is not run by "
              "the CUDA backend";
      return false;
    }
    if (ins.kernel->id == KernelId::AdamW && ins.ins.size() > 2) {
      error = "loss scaling (fp16) is not run by the CUDA backend yet";
      return false;
    }
    for (const std::vector<Buffer> *list : {&ins.ins, &ins.outs})
      for (const Buffer &b : *list) {
        if (b.dtype == DType::F16) {
          error = "fp16 plans are not run by the CUDA backend yet (bf16 and fp32 are)";
          return false;
        }
        anyBf16 |= b.dtype == DType::BF16;
      }
    for (const Instruction &sub : ins.body)
      if (!supported(sub))
        return false;
    return true;
  };
  for (const std::vector<Instruction> *list : {&program->microBatch, &program->step})
    for (const Instruction &ins : *list)
      if (!supported(ins))
        return false;
  for (const ParamSpec &p : plan.params)
    if ((anyBf16 && p.dtype != DType::BF16) || (!anyBf16 && p.dtype != DType::F32))
      return (error = "parameter '" + p.name + "' is not in the plan's activation dtype", false);
  bf16 = anyBf16;
  return true;
}

bool CudaExecutor::init(const Plan &plan, int rank, uint64_t seed, std::string &error) {
  if (!available()) {
    error = "no CUDA device";
    return false;
  }
  // Ranks per node, and whether each has a GPU of its own (NCCL) or some
  // share one (host-staged collectives).
  bool sharedGpu = false;
  std::string sharedWhy;
  if (plan.worldSize != 1) {
    if (!comm)
      return (error = "a plan of " + std::to_string(plan.worldSize) +
                      " ranks needs the launcher's communicator",
              false);
    // A GPU per rank of the node: the launcher's local rank (OpenMPI, Slurm,
    // torchrun), else the rank, modulo the node's GPUs.
    int devices = 0, local = rank, localSize = plan.worldSize;
    for (const char *v : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "LOCAL_RANK"})
      if (const char *e = std::getenv(v)) {
        local = std::atoi(e);
        break;
      }
    for (const char *v :
         {"OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE", "LOCAL_WORLD_SIZE"})
      if (const char *e = std::getenv(v)) {
        localSize = std::max(1, std::atoi(e));
        break;
      }
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0 ||
        cudaSetDevice(local % devices) != cudaSuccess)
      return (error = "cannot select a GPU for local rank " + std::to_string(local), false);
    sharedGpu = localSize > devices;
    if (sharedGpu)
      sharedWhy = std::to_string(localSize) + " ranks share this node's " +
                  std::to_string(devices) +
                  " GPU(s) and NCCL refuses two ranks on one device: run with --comm staged (or "
                  "auto)";
  }
  // What this backend runs (supports names a rank without a program),
  // checked before anything is allocated.
  bool anyBf16 = false;
  std::set<std::string> axes; // of the collectives (NCCL communicators)
  int current = 0, major = 0, minor = 0;
  cudaGetDevice(&current);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, current);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, current);
  if (!supports(plan, rank, major * 10 + minor, axes, anyBf16, error))
    return (error = "GPU " + std::to_string(current) + ": " + error, false);
  const Program *program = plan.programFor(rank);

  // Parameters as the CPU backend makes them, then on the device.
  host.arenasWanted = false;
  if (!host.init(plan, rank, seed, error))
    return false;
  // A parameter of which this rank holds a chunk (ZeRO-3) reaches kernels
  // only through its gathered copy: it has no working copy to read.
  std::function<bool(const Instruction &)> chunkRead = [&](const Instruction &ins) {
    for (const std::vector<Buffer> *list : {&ins.ins, &ins.outs})
      for (const Buffer &b : *list)
        if (b.space == Buffer::Space::State && ins.kind == Instruction::Kind::Kernel)
          if (auto it = host.params.find(b.name);
              it != host.params.end() && it->second.valueChunked)
            return (error = std::string(ins.kernel->name) + " reads parameter '" + b.name +
                            "', of which this rank holds a ZeRO-3 chunk, not its gathered copy",
                    true);
    for (const Instruction &sub : ins.body)
      if (chunkRead(sub))
        return true;
    return false;
  };
  for (const std::vector<Instruction> *list : {&program->microBatch, &program->step})
    for (const Instruction &ins : *list)
      if (chunkRead(ins))
        return false;
  s->plan = &plan;
  s->program = program;
  s->rank = rank;
  s->bf16 = anyBf16;
  if (!driver.init(plan, *program, rank, error))
    return false;
  if (plan.worldSize != 1) {
    // NCCL where each rank has its GPU (--comm auto or nccl), the launcher's
    // communicator through host copies where ranks share one or NCCL is
    // missing (auto) or where asked (--comm staged). Every rank names the
    // same axes: the mesh's, in one order.
    std::vector<std::string> meshAxes;
    for (const char *axis : {"dp", "cp", "tp", "pp", "pp_tied", "ep", "edp"})
      if (plan.axisSize(axis) > 1 || axes.count(axis))
        meshAxes.push_back(axis);
    std::string why;
    if (commMode == "nccl" && sharedGpu)
      return (error = sharedWhy, false);
    if (commMode != "staged" && !sharedGpu)
      s->nccl = makeNcclCommunicator(*comm, meshAxes, s->stream, why);
    if (s->nccl) {
      s->dev = s->nccl.get();
    } else if (commMode == "nccl") {
      return (error = why, false);
    } else {
      if (commMode == "auto" && !why.empty() && rank == 0)
        std::fprintf(stderr, "llm-run: collectives staged through host memory (%s)\n", why.c_str());
      s->staged.reset(); // (before the staging its copies come from)
      s->staging = makeCudaStaging(s->stream);
      s->staged = std::make_unique<StagedCommunicator>(*comm, *s->staging);
      s->dev = s->staged.get();
    }
  }
  // A captured micro-batch would keep the bucketed all-reduces' decision
  // of the micro-batch it was captured in, and the communicators took the
  // default stream.
  if (!axes.empty() || plan.worldSize != 1)
    s->graphs = false;
  // One arena, or on a pipeline stage one stash (older plans: one arena)
  // per micro-batch in flight.
  size_t slots = driver.slots();
  size_t arenaCount = program->stashBytes > 0 ? 1 : slots;
  size_t stashCount = program->stashBytes > 0 ? slots : 0;
  for (size_t i = 0; stepsWanted && i < arenaCount + stashCount; ++i) {
    auto b = std::make_unique<DevBuf>();
    size_t bytes = size_t(i < arenaCount ? program->arenaBytes : program->stashBytes);
    if (!b->reserve(std::max<size_t>(bytes, 4)))
      return (error = "cannot allocate the " + std::to_string(bytes) + "-byte " +
                      (i < arenaCount ? "arena" : "stash") + " of micro-batch slot " +
                      std::to_string(i < arenaCount ? i : i - arenaCount) + " on the GPU",
              false);
    (i < arenaCount ? s->arenas : s->stashes).push_back(std::move(b));
  }
  for (int i = 0; i < 2 && i < int(plan.inputs.size()); ++i)
    if (!(i ? s->labels : s->tokens).reserve(size_t(plan.inputs[size_t(i)].elements) * 4))
      return (error = "cannot allocate the step inputs", false);
  // Each parameter laid out as the CPU backend holds it on this rank
  // (ZeRO's chunks included).
  for (const auto &[name, st] : host.params) {
    State::Param &p = s->params[name];
    p.n = int64_t(st.value.size());
    p.shard = st.shard;
    p.valueChunked = st.valueChunked;
    size_t moments = size_t(std::max<int64_t>(p.shard.size(), 1)) * 4;
    if (!p.master.reserve(size_t(std::max<int64_t>(p.n, 1)) * 4) || !p.m.reserve(moments) ||
        !p.v.reserve(moments) ||
        (anyBf16 && !p.valueChunked && !p.working.reserve(size_t(p.n) * 2)))
      return (error = "out of GPU memory for parameter '" + name + "'", false);
  }
  // Accumulators, sized by their largest use.
  std::map<std::string, int64_t> sizes;
  std::function<void(const Instruction &)> note = [&](const Instruction &ins) {
    for (const std::vector<Buffer> *list : {&ins.ins, &ins.outs})
      for (const Buffer &b : *list)
        if (b.space == Buffer::Space::Accum)
          sizes[b.name] = std::max(sizes[b.name], b.elements);
    for (const Instruction &sub : ins.body)
      note(sub);
    if (ins.kernel && ins.kernel->id == KernelId::EmbeddingFwd && ins.ins.size() > 1) {
      int index = 0, parts = 1;
      if (!ins.args.shard.empty())
        plan.place(ins.args.shard, rank, index, parts);
      s->vocab = ins.ins[1].shape[0] * parts;
    }
    if (ins.kernel && ins.kernel->id == KernelId::EmbeddingBwd)
      s->orderTokens = true;
    if (ins.kernel && ins.kernel->id == KernelId::CrossEntropyFwd && !ins.ins.empty()) {
      s->classes = lastDim(ins.ins[0]);
      s->ignoreIndex = int64_t(ins.args.ignore_index);
    }
    // The vocabulary-parallel loss: the labels index the whole vocabulary
    // (a padded one's real entries), and its ignore index is the plan's.
    if (ins.kernel && ins.kernel->id == KernelId::VPCEStats && !ins.ins.empty()) {
      int index = 0, parts = 1;
      plan.place(ins.args.shard, rank, index, parts);
      s->classes = ins.args.classes >= 0 ? int64_t(ins.args.classes) : lastDim(ins.ins[0]) * parts;
      s->ignoreIndex = int64_t(ins.args.ignore_index);
    }
  };
  for (const std::vector<Instruction> *list : {&program->microBatch, &program->step})
    for (const Instruction &ins : *list)
      note(ins);
  // (Padded logits keep one buffer for the LM head's micro-batch: not with
  // several in flight.)
  if (driver.slots() == 1)
    s->padLogits(*program, anyBf16 ? CUDA_R_16BF : CUDA_R_32F);
  s->groupAdamW(*program);
  for (const auto &[name, n] : sizes) {
    auto b = std::make_unique<DevBuf>();
    if (!b->reserve(size_t(n) * 4))
      return (error = "out of GPU memory for accumulator '" + name + "'", false);
    s->accum[name] = std::move(b);
  }
  // This GPU: its architecture picks the fused kernels' build and names the
  // cuBLASLt algorithm cache.
  cudaDeviceProp prop{};
  int device = 0;
  bool known = cudaGetDevice(&device) == cudaSuccess &&
               cudaGetDeviceProperties(&prop, device) == cudaSuccess;
  std::string sm = std::to_string(prop.major * 10 + prop.minor);
  // The generated fused kernels, compiled for this GPU (LLMOPT_CUDA_FUSED=0:
  // the bodies kernel by kernel, as without a compiler).
  std::set<std::string> fusedNames;
  for (const std::vector<Instruction> *list : {&program->microBatch, &program->step})
    for (const Instruction &ins : *list)
      if (ins.kernel && ins.kernel->id == KernelId::Fused)
        fusedNames.insert(ins.fusedName);
  const char *fusedEnv = std::getenv("LLMOPT_CUDA_FUSED");
  if (!fusedNames.empty() && compileFused && !(fusedEnv && std::string(fusedEnv) == "0")) {
    std::string why;
    if (!known) {
      why = "cannot read the device's properties";
    } else if (s->fused.load(plan, sm, why)) {
      for (const std::string &name : fusedNames)
        if (!(s->launchers[name] = s->fused.find(name))) {
          why = s->fused.path() + " has no launcher '" + name + "'";
          s->launchers.clear();
          break;
        }
    }
    if (!why.empty())
      std::fprintf(stderr, "llm-run: the plan's fused kernels run kernel by kernel (%s)\n",
                   why.c_str());
  }
  if (s->graphs && (cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking) != cudaSuccess ||
                    !s->stepCounter.reserve(8)))
    return (error = "cannot create the stream for CUDA graphs", false);
  std::string why;
  s->gemm = cu::Gemm::create(why);
  if (!s->gemm)
    return (error = "cuBLASLt: " + why, false);
  // cuBLASLt's algorithm choices from earlier runs on this kind of GPU.
  if (std::string dir = kernelCacheDirectory(); known && !dir.empty()) {
    std::string name = prop.name;
    for (char &ch : name)
      if (!std::isalnum(static_cast<unsigned char>(ch)))
        ch = '-';
    s->algorithmCache = dir + "/cublaslt-" + name + "-sm" + sm + "-v" +
                        std::to_string(cu::cublasLtVersion()) + ".bin";
    s->gemm->loadAlgorithms(s->algorithmCache);
    s->savedAlgorithms = s->gemm->cachedAlgorithms();
  }
  s->alone = std::make_unique<DeviceAlone>(s->stream);
  // The step driver's scratch (StepBackend::allocate: collectives' blocks,
  // ring attention's) comes from the stream's memory pool many times a
  // step: up to 1 GiB of it stays in the pool between uses rather than
  // going back to the driver at each synchronization (more would starve
  // what cudaMalloc and the libraries allocate).
  if (cudaMemPool_t pool = nullptr; cudaDeviceGetDefaultMemPool(&pool, device) == cudaSuccess) {
    uint64_t keep = uint64_t(1) << 30;
    cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
  }
  // The parameters on the device, each host copy freed once uploaded: the
  // GPU holds the only copy of the training state from here on.
  for (auto &[name, st] : host.params) {
    if (!write(name, std::move(st), error))
      return false;
    st = ParamState();
  }
  host.release();
  steps = 0;
  lossScale = LossScaleState();
  return true;
}

bool CudaExecutor::idle(std::string &error) const {
  return cudaDeviceSynchronize() == cudaSuccess ||
         (error = std::string("CUDA error before the parameters are read or written: ") +
                  cudaGetErrorString(cudaGetLastError()),
          false);
}

bool CudaExecutor::holds(const std::string &name) const { return s->params.count(name) != 0; }

void CudaExecutor::layout(const std::string &name, Chunk &shard, bool &valueChunked) const {
  const State::Param &p = s->params.at(name);
  shard = p.shard;
  valueChunked = p.valueChunked;
}

bool CudaExecutor::read(const std::string &name, ParamState &out, std::string &error) const {
  auto it = s->params.find(name);
  if (it == s->params.end())
    return (error = "this rank holds no parameter '" + name + "'", false);
  const State::Param &p = it->second;
  if (!idle(error))
    return false;
  size_t n = size_t(p.n), moments = size_t(p.shard.size());
  out.shard = p.shard;
  out.valueChunked = p.valueChunked;
  out.value.resize(n);
  out.m.resize(moments);
  out.v.resize(moments);
  if (cudaMemcpy(out.value.data(), p.master.p, n * 4, cudaMemcpyDeviceToHost) != cudaSuccess ||
      cudaMemcpy(out.m.data(), p.m.p, moments * 4, cudaMemcpyDeviceToHost) != cudaSuccess ||
      cudaMemcpy(out.v.data(), p.v.p, moments * 4, cudaMemcpyDeviceToHost) != cudaSuccess)
    return (error = "cannot read parameter '" + name +
                    "' from the GPU: " + cudaGetErrorString(cudaGetLastError()),
            false);
  return true;
}

bool CudaExecutor::write(const std::string &name, ParamState &&in, std::string &error) {
  auto it = s->params.find(name);
  if (it == s->params.end())
    return (error = "this rank holds no parameter '" + name + "'", false);
  State::Param &p = it->second;
  int64_t moments = p.shard.size();
  if (in.shard.begin != p.shard.begin || in.shard.end != p.shard.end ||
      in.valueChunked != p.valueChunked || int64_t(in.value.size()) != p.n ||
      int64_t(in.m.size()) != moments || int64_t(in.v.size()) != moments)
    return (error = "parameter '" + name + "' is laid out otherwise on this rank", false);
  if (!idle(error))
    return false;
  if (cudaMemcpy(p.master.p, in.value.data(), size_t(p.n) * 4, cudaMemcpyHostToDevice) !=
          cudaSuccess ||
      cudaMemcpy(p.m.p, in.m.data(), size_t(moments) * 4, cudaMemcpyHostToDevice) != cudaSuccess ||
      cudaMemcpy(p.v.p, in.v.data(), size_t(moments) * 4, cudaMemcpyHostToDevice) != cudaSuccess)
    return (error = "cannot write parameter '" + name +
                    "' to the GPU: " + cudaGetErrorString(cudaGetLastError()),
            false);
  // bf16 plans compute with a rounded copy of the master.
  if (p.working.p &&
      (cu::fromFloat(p.master.as<float>(), p.working.as<cu::bf16>(), p.n, nullptr) != cudaSuccess ||
       cudaDeviceSynchronize() != cudaSuccess))
    return (error = "cannot make the bf16 copy of '" + name + "'", false);
  return true;
}

bool CudaExecutor::runTimed(const Instruction &ins, std::string &error) {
  if (!host.profiling || ins.kind != Instruction::Kind::Kernel || !ins.kernel)
    return s->run(ins, error);
  State::Timed t{&ins, nullptr, nullptr, 0};
  if (cudaEventCreate(&t.begin) != cudaSuccess || cudaEventCreate(&t.end) != cudaSuccess ||
      cudaEventRecord(t.begin, s->stream) != cudaSuccess)
    return (error = "cannot record CUDA events for --profile", false);
  auto t0 = std::chrono::steady_clock::now();
  bool ok = s->run(ins, error);
  t.hostSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  cudaEventRecord(t.end, s->stream);
  s->events.push_back(t);
  return ok;
}

// The step driver's backend (step_driver.h): device memory on the
// instructions' stream.

float *CudaExecutor::data(const Buffer &b) {
  if (auto it = s->wide.find(&b); it != s->wide.end())
    return it->second;
  if (b.space == Buffer::Space::State)
    return s->params.at(b.name).master.as<float>();
  return b.dtype == DType::F32 ? s->at<float>(b) : nullptr;
}

bool CudaExecutor::store(const Buffer &b, const float *values, std::string &error) {
  s->overwritten(b);
  if (b.space == Buffer::Space::State)
    return (error = "the step driver wrote parameter '" + b.name + "' outside AdamW", false);
  if (b.dtype == DType::F32)
    return s->check(cudaMemcpyAsync(s->ptr(b), values, size_t(b.elements) * 4,
                                    cudaMemcpyDeviceToDevice, s->stream),
                    "store", error);
  return s->check(cu::fromFloat(values, s->at<cu::bf16>(b), b.elements, s->stream), "store", error);
}

bool CudaExecutor::paramValue(const std::string &name, const float *&value, int64_t &count,
                              std::string &error) {
  auto it = s->params.find(name);
  if (it == s->params.end())
    return (error = "parameter '" + name + "' is not held by this rank", false);
  value = it->second.master.as<float>();
  count = it->second.n;
  return true;
}

bool CudaExecutor::allocate(int64_t n, BackendFloats &out, std::string &error) {
  // From the stream's memory pool, freed in stream order after the
  // collectives that use it.
  void *p = nullptr;
  size_t bytes = size_t(std::max<int64_t>(n, 1)) * 4;
  cudaStream_t st = s->stream;
  if (cudaMallocAsync(&p, bytes, st) != cudaSuccess) {
    cudaGetLastError();
    return (error = "out of GPU memory for " + std::to_string(bytes) +
                    " bytes of a collective's buffers",
            false);
  }
  out = {static_cast<float *>(p), n,
         std::shared_ptr<void>(p, [st](void *q) { cudaFreeAsync(q, st); })};
  return s->check(cudaMemsetAsync(p, 0, bytes, st), "allocate", error);
}

bool CudaExecutor::copy(float *dst, const float *src, int64_t n, std::string &error) {
  return s->check(cudaMemcpyAsync(dst, src, size_t(n) * 4, cudaMemcpyDeviceToDevice, s->stream),
                  "copy", error);
}

bool CudaExecutor::addScaled(float *dst, const float *src, float scale, int64_t n,
                             std::string &error) {
  return s->check(cu::addInto(dst, src, n, s->stream, scale), "add_scaled", error);
}

bool CudaExecutor::clearAccumulators(std::string &error) {
  for (auto &[name, b] : s->accum)
    if (cudaMemsetAsync(b->p, 0, b->bytes, s->stream) != cudaSuccess)
      return (error = "cannot clear the accumulators", false);
  return true;
}

bool CudaExecutor::select(const std::vector<int32_t> &tok, const std::vector<int32_t> &lab,
                          size_t slot, std::string &error) {
  if ((slot >= s->arenas.size() && s->arenas.size() > 1) ||
      (!s->stashes.empty() && slot >= s->stashes.size()))
    return (error = "micro-batch slot " + std::to_string(slot) + " beyond the stage's " +
                    std::to_string(driver.slots()),
            false);
  s->slot = slot;
  if (s->uploaded == &tok)
    return true;
  s->uploaded = &tok;
  cudaStream_t st = s->stream;
  // In stream order: after the previous micro-batch has read its inputs.
  if (s->orderTokens) {
    s->tokenOrder = cu::embeddingOrder(tok.data(), int64_t(tok.size()));
    // Its largest size (n positions, n groups and chunks at most) at
    // once: a captured graph keeps the pointer.
    if (!s->tokenOrderDev.reserve((3 * tok.size() + 4) * 4) ||
        cudaMemcpyAsync(s->tokenOrderDev.p, s->tokenOrder.data(), s->tokenOrder.size() * 4,
                        cudaMemcpyHostToDevice, st) != cudaSuccess)
      return (error = "cannot upload the micro-batch's token order", false);
  }
  if (cudaMemcpyAsync(s->tokens.p, tok.data(), tok.size() * 4, cudaMemcpyHostToDevice, st) !=
          cudaSuccess ||
      cudaMemcpyAsync(s->labels.p, lab.data(), lab.size() * 4, cudaMemcpyHostToDevice, st) !=
          cudaSuccess)
    return (error = "cannot upload the micro-batch", false);
  s->lseFresh.clear();
  return true;
}

bool CudaExecutor::widen(const Instruction &ins, std::string &error) {
  // On a failure nothing stays widened (the driver does not narrow then).
  auto fail = [&](std::string why) {
    s->wide.clear();
    error = std::move(why);
    return false;
  };
  size_t used = 0;
  for (const std::vector<Buffer> *list : {&ins.ins, &ins.outs, &ins.buffers})
    for (const Buffer &b : *list) {
      if (b.dtype == DType::F32 || b.space == Buffer::Space::State)
        continue; // fp32 already; parameters: their fp32 masters
      if (b.dtype != DType::BF16)
        return fail("the CUDA backend moves fp32 and bf16 buffers only");
      if (s->wideBufs.size() <= used)
        s->wideBufs.push_back(std::make_unique<DevBuf>());
      DevBuf &w = *s->wideBufs[used++];
      if (!w.reserve(size_t(b.elements) * 4))
        return fail("out of GPU memory for an fp32 copy of a bf16 buffer");
      std::string why;
      if (!s->check(cu::toFloat(s->at<cu::bf16>(b), w.as<float>(), b.elements, s->stream), "widen",
                    why))
        return fail(why);
      s->wide[&b] = w.as<float>();
    }
  return true;
}

bool CudaExecutor::narrow(const Instruction &ins, std::string &error) {
  // What a data-moving instruction or a collective wrote: the statistics
  // kept for those buffers are stale.
  for (const std::vector<Buffer> *list : {&ins.outs, &ins.buffers})
    for (const Buffer &b : *list)
      s->overwritten(b);
  bool ok = true;
  for (auto &[b, w] : s->wide)
    ok = ok &&
         s->check(cu::fromFloat(w, s->at<cu::bf16>(*b), b->elements, s->stream), "narrow", error);
  s->wide.clear();
  // A gathered parameter (ZeRO-1/2 moves the masters): its bf16 working
  // copy made again.
  if (ins.kind == Instruction::Kind::AllGather)
    for (const Buffer &b : ins.buffers)
      if (b.space == Buffer::Space::State)
        if (State::Param &p = s->params.at(b.name); p.working.p)
          ok = ok && s->check(cu::fromFloat(p.master.as<float>(), p.working.as<cu::bf16>(), p.n,
                                            s->stream),
                              "narrow", error);
  return ok;
}

bool CudaExecutor::compute(const Instruction &ins, Communicator &comm, std::string &error) {
  s->kernelComm = &comm;
  bool ok = runTimed(ins, error);
  s->kernelComm = nullptr;
  return ok;
}

bool CudaExecutor::fill(float *dst, float value, int64_t n, std::string &error) {
  return s->check(cu::fill(dst, n, value, s->stream), "fill", error);
}

bool CudaExecutor::copyStrided(float *dst, const float *src, const StridedCopy &c,
                               std::string &error) {
  return s->copyRows(dst + c.dst, size_t(c.dstPitch) * 4, src + c.src, size_t(c.srcPitch) * 4,
                     size_t(c.width) * 4, size_t(c.rows), error);
}

bool CudaExecutor::ringForward(const Instruction &ins, const float *q, const float *k,
                               const float *v, int keysRank, float *out, float *lse,
                               std::string &error) {
  cu::AttentionDims d;
  return s->ringDims(ins, keysRank, d, error) &&
         s->check(cu::attentionForward(q, k, v, out, lse, d, s->stream), "ring attention", error);
}

bool CudaExecutor::ringMerge(const Instruction &ins, float *out, float *lse, const float *ob,
                             const float *lb, std::string &error) {
  cu::AttentionDims d;
  return s->ringDims(ins, 0, d, error) &&
         s->check(cu::attentionMerge(out, lse, ob, lb, d, s->stream), "ring attention", error);
}

bool CudaExecutor::ringBackward(const Instruction &ins, const float *dout, const float *q,
                                const float *k, const float *v, const float *out, const float *lse,
                                int keysRank, float *dq, float *dk, float *dv, std::string &error) {
  cu::AttentionDims d;
  if (!s->ringDims(ins, keysRank, d, error))
    return false;
  // The baseline backward's fp32 key and value gradients.
  auto *work = static_cast<float *>(
      s->tmp(40, size_t(std::max<int64_t>(2 * ins.ins[2].elements, 1)) * 4, error));
  return work &&
         s->check(cu::attentionBackward(dout, q, k, v, out, lse, dq, dk, dv, work, d, s->stream),
                  "ring attention", error);
}

bool CudaExecutor::computeRun(const Instruction *first, size_t count, Communicator &comm,
                              std::string &error) {
  // From the second step on (when every scratch buffer has its size) each
  // run of kernels replays as a captured CUDA graph, if LLMOPT_CUDA_GRAPHS=1.
  if (s->graphs && s->useCaptures && !host.profiling && s->stepsRun >= 1) {
    if (s->replay(first, count, s->graphExecs[first], error))
      return true;
    if (!error.empty())
      return false;
    // The capture did not work: plain launches from now on.
    s->useCaptures = false;
    s->dropGraphs();
    std::fprintf(stderr, "llm-run: the step could not be captured as a CUDA graph; "
                         "launching its kernels one by one\n");
  }
  return StepBackend::computeRun(first, count, comm, error);
}

bool CudaExecutor::step(const std::vector<std::vector<int32_t>> &tok,
                        const std::vector<std::vector<int32_t>> &lab, StepResult &result,
                        std::string &error) {
  const Program &prog = *s->program;
  if (int64_t(tok.size()) != prog.numMicroBatches || tok.size() != lab.size())
    return (error =
                "the plan runs " + std::to_string(prog.numMicroBatches) + " micro-batches per step",
            false);
  // Every micro-batch checked before any runs: the kernels index tables by
  // token and the logits by label.
  for (size_t m = 0; m < tok.size(); ++m) {
    for (int32_t t : tok[m])
      if (t < 0 || (s->vocab > 0 && t >= s->vocab))
        return (error = "a token id is outside the vocabulary of " + std::to_string(s->vocab),
                false);
    for (int32_t l : lab[m])
      if (l != s->ignoreIndex && (l < 0 || (s->classes > 0 && l >= s->classes)))
        return (error = "a label is outside the vocabulary of " + std::to_string(s->classes),
                false);
  }
  // Events of a step that failed before reading them.
  for (const State::Timed &t : s->events) {
    cudaEventDestroy(t.begin);
    cudaEventDestroy(t.end);
  }
  s->events.clear();
  s->hostNorms.clear();
  s->step = steps + 1 - lossScale.skipped; // AdamW's count, as the CPU backend's
  s->uploaded = nullptr;
  if (s->graphs) {
    int64_t t = s->step; // AdamW's bias corrections read it on the device
    if (cudaMemcpyAsync(s->stepCounter.p, &t, 8, cudaMemcpyHostToDevice, s->stream) !=
            cudaSuccess ||
        cudaStreamSynchronize(s->stream) != cudaSuccess)
      return (error = "cannot upload the step number", false);
  }
  // The micro-batches, the step phase and the collectives: the step
  // driver's, on this backend's memory.
  if (!driver.step(*this, tok, lab, s->dev ? *s->dev : *s->alone, error))
    return false;
  // NCCL's collectives under the watchdog (a rank that never joins one
  // fails the step instead of hanging it).
  if (s->dev && !s->dev->flush(error))
    return false;
  if (s->nccl && !s->nccl->synchronize(error, /*all=*/true))
    return false;
  if (cudaDeviceSynchronize() != cudaSuccess)
    return (error =
                std::string("CUDA error in the step: ") + cudaGetErrorString(cudaGetLastError()),
            false);
  // --profile: each kernel instruction's time between its two events, and
  // the host's issuing it.
  for (const State::Timed &t : s->events) {
    float ms = 0;
    if (cudaEventElapsedTime(&ms, t.begin, t.end) == cudaSuccess)
      host.record(*t.ins, double(ms) * 1e-3, t.hostSeconds);
    cudaEventDestroy(t.begin);
    cudaEventDestroy(t.end);
  }
  s->events.clear();
  float out[2] = {0, 0};
  if (cudaMemcpy(&out[0], s->ptr(prog.loss), 4, cudaMemcpyDeviceToHost) != cudaSuccess ||
      cudaMemcpy(&out[1], s->ptr(prog.gradNorm), 4, cudaMemcpyDeviceToHost) != cudaSuccess)
    return (error = "cannot read the loss and norm", false);
  result.loss = out[0];
  result.gradNorm = out[1];
  // Everything this process holds on the GPU (arena, parameters, moments,
  // scratch, library workspaces), as the driver counts it.
  size_t freeBytes = 0, totalBytes = 0;
  if (cudaMemGetInfo(&freeBytes, &totalBytes) == cudaSuccess)
    result.deviceBytes = int64_t(totalBytes - freeBytes);
  ++steps;
  ++s->stepsRun;
  // New GEMM shapes' algorithms for the next run (a cache: failures only
  // cost the heuristic again).
  if (!s->algorithmCache.empty() && s->gemm->cachedAlgorithms() > s->savedAlgorithms) {
    std::string ignored;
    if (s->gemm->saveAlgorithms(s->algorithmCache, ignored))
      s->savedAlgorithms = s->gemm->cachedAlgorithms();
    else
      s->algorithmCache.clear();
  }
  return true;
}

} // namespace llmopt::runtime
