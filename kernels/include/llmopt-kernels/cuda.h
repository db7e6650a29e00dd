//===- cuda.h - CUDA kernels of the kernel ABI --------------------*- C++ -*-===//
//
// The CUDA implementations of the row-wise, elementwise and optimizer
// kernels of abi.h, with the semantics of the CPU references in cpu.h (which
// their tests compare against). Pointers are device pointers; `T` is the
// storage type (float or __nv_bfloat16), arithmetic is fp32; weight
// gradients are fp32 and ACCUMULATE (+=) unless said otherwise (sumRows and
// the combine's weight gradients are written), activation gradients are
// written.
// Every launcher enqueues on `stream` and returns the launch status.
//
// fp8: quantizeFp8 below, the GEMM in gemm.h (sm_89 / sm_90).
//
// Attention: attentionForward / attentionBackward are a one-thread-per-row
// baseline (tests only); the backend runs attentionForwardGemm /
// attentionBackwardGemm (tensor cores, below) or cuDNN's fused attention
// (cudnn_attention.h). MoE: router and experts on cuBLASLt (moe.cu),
// dispatch and combine (elementwise.cu). GEMMs: gemm.h (cuBLASLt).
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_KERNELS_CUDA_H
#define LLMOPT_KERNELS_CUDA_H

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

namespace llmopt::kernels::cuda {

using bf16 = __nv_bfloat16;

/// Whether a CUDA device is present (tests skip themselves without one).
bool deviceAvailable();

#define LLMOPT_CUDA_FOR_TYPES(X) X(float) X(bf16)

#define LLMOPT_CUDA_DECLARE(T)                                                                     \
  cudaError_t rmsNormForward(const T *x, const T *weight, T *out, float *rstd, int64_t n,          \
                             int64_t c, float eps, cudaStream_t stream);                           \
  cudaError_t rmsNormBackward(const T *dout, const T *x, const T *weight, const float *rstd,       \
                              T *dx, float *dweight, int64_t n, int64_t c, cudaStream_t stream,    \
                              float *scratch = nullptr);                                           \
  cudaError_t layerNormForward(const T *x, const T *weight, const T *bias, T *out, float *mean,    \
                               float *rstd, int64_t n, int64_t c, float eps, cudaStream_t stream); \
  cudaError_t layerNormBackward(const T *dout, const T *x, const T *weight, const float *mean,     \
                                const float *rstd, T *dx, float *dweight, float *dbias, int64_t n, \
                                int64_t c, cudaStream_t stream, float *scratch = nullptr);         \
  cudaError_t geluForward(const T *x, T *out, int64_t count, bool tanhApprox,                      \
                          cudaStream_t stream);                                                    \
  cudaError_t geluBackward(const T *dout, const T *x, T *dx, int64_t count, bool tanhApprox,       \
                           cudaStream_t stream);                                                   \
  cudaError_t swigluForward(const T *gate, const T *up, T *out, int64_t count,                     \
                            cudaStream_t stream);                                                  \
  cudaError_t swigluBackward(const T *dout, const T *gate, const T *up, T *dgate, T *dup,          \
                             int64_t count, cudaStream_t stream);                                  \
  cudaError_t embeddingForward(const int32_t *tokens, const T *table, T *out, int64_t n,           \
                               int64_t hidden, cudaStream_t stream);                               \
  /* order: embeddingOrder(tokens) on the device: each token's rows added in position */           \
  /* order (deterministic, no atomics; without it, atomics); scratch: n x hidden floats */         \
  cudaError_t embeddingBackwardOrdered(const int32_t *tokens, const int32_t *order, const T *dout, \
                                       float *dtable, int64_t n, int64_t hidden, float *scratch,   \
                                       cudaStream_t stream);                                       \
  cudaError_t embeddingBackward(const int32_t *tokens, const T *dout, float *dtable, int64_t n,    \
                                int64_t hidden, cudaStream_t stream);                              \
  /* A vocabulary-parallel part, rows [offset, offset + part) of the table: other tokens' */       \
  /* rows are zero (forward) or left out (backward, in position order as above) */                 \
  cudaError_t embeddingForwardPart(const int32_t *tokens, const T *table, T *out, int64_t n,       \
                                   int64_t hidden, int64_t offset, int64_t part,                   \
                                   cudaStream_t stream);                                           \
  cudaError_t embeddingBackwardOrderedPart(                                                        \
      const int32_t *tokens, const int32_t *order, const T *dout, float *dtable, int64_t n,        \
      int64_t hidden, float *scratch, int64_t offset, int64_t part, cudaStream_t stream);          \
  /* cosSin: rotaryTable's [seq, headDim / 2] (cos, sin) pairs on the device */                    \
  cudaError_t rotary(const T *x, T *out, int64_t batch, int64_t seq, int64_t heads,                \
                     int64_t headDim, const float *cosSin, bool inverse, cudaStream_t stream);     \
  /* rowLoss: n floats of scratch; loss: the mean over counted rows; rowLse (optional):  */        \
  /* n floats receiving each row's log-sum-exp, which the backward then reads instead of */        \
  /* reading the logits twice (rows of the ignore index are not written); ld / ldD: the */         \
  /* row pitch of logits / dlogits (0: vocab), dlogits' padding zeroed */                          \
  cudaError_t crossEntropyForward(const T *logits, const int32_t *labels, float *rowLoss,          \
                                  float *loss, int64_t n, int64_t vocab, int64_t ignoreIndex,      \
                                  cudaStream_t stream, float *rowLse = nullptr, int64_t ld = 0);   \
  cudaError_t crossEntropyBackward(                                                                \
      const T *logits, const int32_t *labels, const float *dloss, float *scratch, T *dlogits,      \
      int64_t n, int64_t vocab, int64_t ignoreIndex, cudaStream_t stream,                          \
      const float *rowLse = nullptr, int64_t ld = 0, int64_t ldD = 0);
LLMOPT_CUDA_FOR_TYPES(LLMOPT_CUDA_DECLARE)
#undef LLMOPT_CUDA_DECLARE
/// The positions of n tokens grouped by token id, in position order within
/// a token, cut into chunks of at most `rowsPerChunk` positions of one
/// token: [n positions][the count K of distinct tokens][K + 1: each token's
/// first chunk][the count C of chunks][C + 1 chunk starts], for
/// embeddingBackwardOrdered (computed on the host, where the tokens are
/// read).
std::vector<int32_t> embeddingOrder(const int32_t *tokens, int64_t n, int64_t rowsPerChunk = 64);
/// The rotary embedding's (cos, sin) of position p and pair i, for p < seq
/// and i < invFreq.size(), at [p][i][0..1]: the angle p * invFreq[i] in
/// double, as the CPU reference, rounded to float (computed once on the
/// host; per element in double on the GPU it made the kernel 6x slower than
/// its memory traffic).
std::vector<float> rotaryTable(const std::vector<double> &invFreq, int64_t seq);

/// Attention with the CPU reference's semantics (causal, sliding window,
/// GQA), one thread per query row: a correctness baseline, not the
/// flash-style kernel the CUDA backend needs for speed. `lse` (fp32,
/// [batch, heads, seq]) is written by the forward. The backward needs
/// `scratch` of 2 x (k elements) floats for the fp32 key / value gradients.
struct AttentionDims {
  int64_t batch = 1, seq = 1, heads = 1, kvHeads = 1, headDim = 1;
  float scale = 1;
  bool causal = true;
  int64_t window = 0;
  /// Context parallelism, in the baseline kernels only (the tensor-core and
  /// cuDNN paths take none of it): keys and values of kvSeq positions (0:
  /// seq), query i at position qPos[i] among them (null: i), and for a
  /// ring's block the keys' own positions kPos (null: 0..kvSeq-1), device
  /// arrays. A query that sees no key gets log-sum-exp -inf and a zero
  /// output, as the CPU reference.
  int64_t kvSeq = 0;
  const int32_t *qPos = nullptr, *kPos = nullptr;
};
#define LLMOPT_CUDA_DECLARE_ATTENTION(T)                                                           \
  cudaError_t attentionForward(const T *q, const T *k, const T *v, T *out, float *lse,             \
                               const AttentionDims &d, cudaStream_t stream);                       \
  cudaError_t attentionBackward(const T *dout, const T *q, const T *k, const T *v, const T *out,   \
                                const float *lse, T *dq, T *dk, T *dv, float *scratch,             \
                                const AttentionDims &d, cudaStream_t stream);
LLMOPT_CUDA_FOR_TYPES(LLMOPT_CUDA_DECLARE_ATTENTION)
#undef LLMOPT_CUDA_DECLARE_ATTENTION
/// Ring attention's merge of a block's partial result (`ob`, `lb`) into the
/// running one (`out`, `lse`, fp32, [batch, seq, heads, headDim] and
/// [batch, heads, seq]) by log-sum-exp; rows the block does not see (lb
/// -inf) keep theirs.
cudaError_t attentionMerge(float *out, float *lse, const float *ob, const float *lb,
                           const AttentionDims &d, cudaStream_t stream);

/// Attention on the tensor cores (attention_gemm.cu): packed heads,
/// S = scale Q K^T and O = P V as strided batched cuBLASLt products, the
/// masked softmax as a row kernel, chunked over (batch, head) pairs so that
/// the fp32 scores stay under 1 GiB. Same contract as attentionForward /
/// attentionBackward (dk, dv written), with `scratch` of
/// attentionGemmScratchBytes(d, sizeof(T)) device bytes; false with `error`
/// set on a cuBLASLt or launch failure.
class Gemm;
size_t attentionGemmScratchBytes(const AttentionDims &d, size_t elementBytes);
#define LLMOPT_CUDA_DECLARE_ATTENTION_GEMM(T)                                                      \
  bool attentionForwardGemm(Gemm &gemm, const T *q, const T *k, const T *v, T *out, float *lse,    \
                            const AttentionDims &d, void *scratch, cudaStream_t stream,            \
                            std::string &error);                                                   \
  bool attentionBackwardGemm(Gemm &gemm, const T *dout, const T *q, const T *k, const T *v,        \
                             const T *out, const float *lse, T *dq, T *dk, T *dv,                  \
                             const AttentionDims &d, void *scratch, cudaStream_t stream,           \
                             std::string &error);
LLMOPT_CUDA_FOR_TYPES(LLMOPT_CUDA_DECLARE_ATTENTION_GEMM)
#undef LLMOPT_CUDA_DECLARE_ATTENTION_GEMM

/// Mixture of experts on the tensor cores (moe.cu), with cpu.h's semantics.
/// The router: logits = x gate^T (fp32, one cuBLASLt product), softmax and
/// top-k per token; its backward rebuilds the logits and writes dx,
/// accumulating the gate's gradient (fp32), with the load-balancing loss's
/// gradient when `aux.coef` > 0 (`aux.counts`, device, E floats, over
/// `aux.tokens` tokens: the whole sequence's counts; null: this call's).
/// The experts: x [experts, capacity, hidden] through each expert's MLP
/// (swiglu: gate, up [E, ffn, hidden], down [E, hidden, ffn]; else fc1, fc2
/// with exact GeLU), strided batched products over groups of experts; the
/// backward recomputes the hidden activations, writes dx and accumulates
/// the weights' gradients (fp32). Scratch: the *ScratchBytes below.
struct MoERouterDims {
  int64_t tokens = 1, hidden = 1, experts = 1, topK = 1;
  bool normalize = false;
};
struct MoEAux {
  float coef = 0;
  const float *counts = nullptr;
  int64_t tokens = 0;
  float scale = 1;
};
struct MoEExpertDims {
  int64_t experts = 1, capacity = 1, hidden = 1, ffn = 1;
  bool swiglu = true;
  /// Scratch bytes a group of experts may take (0: 1 GiB; one expert's
  /// when that is more).
  size_t scratchBudget = 0;
  /// Rows of each expert to compute (0: all `capacity`): a dispatch fills
  /// each expert's slots from the first, so rows past the busiest expert's
  /// load are zero in (the rows and, backward, their output gradient, as
  /// the combine's backward leaves it), and are written zero out.
  int64_t rows = 0;
};
size_t moeRouterScratchBytes(const MoERouterDims &d, size_t elementBytes);
size_t moeExpertsScratchBytes(const MoEExpertDims &d, size_t elementBytes);
/// counts[e] (written): how many of the tokens' top-k choices went to e.
cudaError_t moeExpertCounts(const int32_t *indices, float *counts, int64_t tokens, int64_t experts,
                            int64_t topK, cudaStream_t stream);
#define LLMOPT_CUDA_DECLARE_MOE(T)                                                                 \
  bool moeRouterForwardGemm(Gemm &gemm, const T *x, const T *gate, float *weights,                 \
                            int32_t *indices, const MoERouterDims &d, void *scratch,               \
                            cudaStream_t stream, std::string &error);                              \
  bool moeRouterBackwardGemm(Gemm &gemm, const float *dweights, const T *x, const T *gate,         \
                             const float *weights, const int32_t *indices, T *dx, float *dgate,    \
                             const MoERouterDims &d, const MoEAux &aux, void *scratch,             \
                             cudaStream_t stream, std::string &error);                             \
  bool moeExpertsForwardGemm(Gemm &gemm, const T *x, const T *const *weights, T *out,              \
                             const MoEExpertDims &d, void *scratch, cudaStream_t stream,           \
                             std::string &error);                                                  \
  bool moeExpertsBackwardGemm(Gemm &gemm, const T *dout, const T *x, const T *const *weights,      \
                              T *dx, float *const *dweights, const MoEExpertDims &d,               \
                              void *scratch, cudaStream_t stream, std::string &error);
LLMOPT_CUDA_FOR_TYPES(LLMOPT_CUDA_DECLARE_MOE)
#undef LLMOPT_CUDA_DECLARE_MOE

/// fp8 GEMM inputs (per-tensor current scaling, the CPU reference's
/// fakeQuantizeFp8): `amax` (one float of device scratch) receives max |x|,
/// then `out[i]` = fp8(x[i] * 448 / amax) (57344 for E5M2), saturating,
/// ties to even, as raw fp8 bytes; `scaleInv` (one float) = amax / 448, the
/// factor cuBLASLt multiplies the product by. `amaxOverride`, when not
/// null, is used instead of this tensor's amax (an amax reduced over the
/// ranks holding parts of the tensor).
/// quantizeFp8Transposed writes x [rows, cols] transposed, out[c * rows +
/// r] (what cuBLASLt's fp8 TN products read in a backward).
#define LLMOPT_CUDA_DECLARE_FP8(T)                                                                 \
  cudaError_t quantizeFp8(const T *x, int64_t n, bool e5m2, uint8_t *out, float *amax,             \
                          float *scaleInv, const float *amaxOverride, cudaStream_t stream);        \
  cudaError_t quantizeFp8Transposed(const T *x, int64_t rows, int64_t cols, bool e5m2,             \
                                    uint8_t *out, float *amax, float *scaleInv,                    \
                                    const float *amaxOverride, cudaStream_t stream);
LLMOPT_CUDA_FOR_TYPES(LLMOPT_CUDA_DECLARE_FP8)
#undef LLMOPT_CUDA_DECLARE_FP8

/// The plan's small kernels (elementwise.cu). addInto adds x, times
/// `scale`, into the fp32 `acc`; `columns` copies columns
/// [offset, offset + size) of x [rows, c] into y [rows, size] (`gather`) or
/// back (split / concat); sumRows writes the fp32 column sums (bias
/// gradients; sumRowsInto adds them), deterministically, on a block per 32
/// columns and chunk of rows given `scratch` of sumRowsScratchBytes (else
/// one chunk: few blocks for narrow rows) (the norms' backward, given a
/// `scratch` of normBackwardScratchBytes, sums its weight and bias
/// gradients that way instead of with atomics); the vocabulary-parallel cross-entropy runs stats
/// (per row: this part's log-sum-exp and target logit), then, after the all-gather of the
/// log-sum-exps into `all` [parts, rows], loss and backward, over the part's first `real`
/// entries (a padded vocabulary: the rest are padding, with no gradient); MoE dispatch (backward:
/// sum a token's copies) and combine (hidden before top_k in dispatch's arguments, as the CPU
/// reference) assign each expert's slots in token order (`slots`: tokens x top_k int64 scratch,
/// `bad`: one int), `ok` false when an index is not an expert; with `bad` null nothing is checked
/// (no copy to the host, so that CUDA graphs can capture the step: for indices from the router) and
/// a choice of an index outside the experts is dropped.
#define LLMOPT_CUDA_DECLARE_SMALL(T)                                                               \
  cudaError_t toFloat(const T *x, float *y, int64_t n, cudaStream_t stream);                       \
  cudaError_t fromFloat(const float *x, T *y, int64_t n, cudaStream_t stream);                     \
  cudaError_t addInto(float *acc, const T *x, int64_t n, cudaStream_t stream, float scale = 1.0f); \
  cudaError_t add(const T *a, const T *b, T *y, int64_t n, cudaStream_t stream);                   \
  cudaError_t scale(const T *x, T *y, int64_t n, float factor, cudaStream_t stream);               \
  cudaError_t fill(T *y, int64_t n, float value, cudaStream_t stream);                             \
  cudaError_t biasAdd(const T *x, const T *bias, T *y, int64_t n, int64_t c, cudaStream_t stream); \
  cudaError_t sumRows(const T *g, float *out, int64_t rows, int64_t c, cudaStream_t stream,        \
                      void *scratch = nullptr);                                                    \
  cudaError_t sumRowsInto(const T *g, float *out, int64_t rows, int64_t c, cudaStream_t stream,    \
                          void *scratch = nullptr);                                                \
  cudaError_t columns(const T *x, T *y, int64_t rows, int64_t c, int64_t offset, int64_t size,     \
                      bool gather, cudaStream_t stream);                                           \
  cudaError_t positionEmbeddingForward(const T *x, const T *table, T *out, int64_t batch,          \
                                       int64_t seq, int64_t hidden, const int32_t *positions,      \
                                       cudaStream_t stream);                                       \
  cudaError_t positionEmbeddingBackward(const T *dout, float *dtable, int64_t batch, int64_t seq,  \
                                        int64_t hidden, const int32_t *positions,                  \
                                        cudaStream_t stream);                                      \
  cudaError_t vpCrossEntropyStats(const T *logits, const int32_t *labels, float *lse,              \
                                  float *target, int64_t rows, int64_t part, int64_t real,         \
                                  int64_t offset, int64_t ignoreIndex, cudaStream_t stream);       \
  cudaError_t vpCrossEntropyBackward(                                                              \
      const T *logits, const int32_t *labels, const float *all, const float *dloss, T *dlogits,    \
      int64_t rows, int64_t part, int64_t real, int64_t parts, int64_t offset,                     \
      int64_t ignoreIndex, unsigned long long *scratch, cudaStream_t stream);                      \
  cudaError_t moeDispatchForward(const T *x, const int32_t *indices, T *rows, int64_t tokens,      \
                                 int64_t hidden, int64_t topK, int64_t experts, int64_t capacity,  \
                                 int64_t *slots, int *bad, cudaStream_t stream, bool &ok);         \
  cudaError_t moeDispatchBackward(const T *drows, const int32_t *indices, T *dx, int64_t tokens,   \
                                  int64_t hidden, int64_t topK, int64_t experts, int64_t capacity, \
                                  int64_t *slots, int *bad, cudaStream_t stream, bool &ok);        \
  cudaError_t moeCombineForward(const T *expertOut, const float *weights, const int32_t *indices,  \
                                T *out, int64_t tokens, int64_t topK, int64_t hidden,              \
                                int64_t experts, int64_t capacity, int64_t *slots, int *bad,       \
                                cudaStream_t stream, bool &ok);                                    \
  cudaError_t moeCombineBackward(                                                                  \
      const T *dout, const T *expertOut, const float *weights, const int32_t *indices,             \
      T *dexpertOut, float *dweights, int64_t tokens, int64_t topK, int64_t hidden,                \
      int64_t experts, int64_t capacity, int64_t *slots, int *bad, cudaStream_t stream, bool &ok);
LLMOPT_CUDA_FOR_TYPES(LLMOPT_CUDA_DECLARE_SMALL)
#undef LLMOPT_CUDA_DECLARE_SMALL
/// Scratch bytes for sumRows over `rows` x `c` (0: one chunk).
size_t sumRowsScratchBytes(int64_t rows, int64_t c);
/// Scratch bytes for the norms' backward over n x c: the weight gradient's
/// row terms and their column sums' partials.
size_t normBackwardScratchBytes(int64_t n, int64_t c);
/// Sum of squares of x (fp32) into *out, or its square root with `root`;
/// `scratch` is one double of device memory.
cudaError_t sumSquares(const float *x, int64_t n, double *scratch, float *out, bool root,
                       cudaStream_t stream);
/// Adds the sum of squares of x to *sum (fp64, on the device).
cudaError_t sumSquaresAccumulate(const float *x, int64_t n, double *sum, cudaStream_t stream);
/// The sum of squares of many fp32 arrays (a global norm's gradients) added
/// to *sum (fp64, on the device) in two launches instead of one per array: a
/// block per chunk (squaresChunks cuts each array, in order, into chunks of
/// at most kSquaresChunk elements) writes its sum to partials[chunk], then
/// one block adds the partials in chunk order. No atomics: the same chunks
/// give the same bits. `chunks` and `partials` (`count` doubles) are device
/// arrays.
struct SquaresChunk {
  const float *x;
  int64_t n;
};
constexpr int64_t kSquaresChunk = 65536;
std::vector<SquaresChunk> squaresChunks(const std::vector<const float *> &arrays,
                                        const std::vector<int64_t> &counts);
cudaError_t sumSquaresChunks(const SquaresChunk *chunks, int64_t count, double *partials,
                             double *sum, cudaStream_t stream);
cudaError_t vpCrossEntropyLoss(const float *all, const float *target, const int32_t *labels,
                               float *loss, int64_t rows, int64_t parts, int64_t ignoreIndex,
                               cudaStream_t stream);

/// AdamW on an fp32 master copy and moments; the gradient is scaled by
/// `gradScale` first (clipping); `working` (may be null) receives the
/// updated parameter in its storage type.
struct AdamWArgs {
  float lr, beta1, beta2, eps, weightDecay, gradScale;
  int64_t step;
};
cudaError_t adamw(float *param, const float *grad, float *m, float *v, bf16 *working, int64_t count,
                  const AdamWArgs &args, cudaStream_t stream);
/// AdamW with the global norm and the step read from device memory (for
/// CUDA graphs, which replay one step's launches): args.gradScale and
/// args.step are ignored; the gradient is scaled by min(1, maxNorm / (norm +
/// 1e-6)) when maxNorm > 0 (in double, as the host computes it).
cudaError_t adamwDevice(float *param, const float *grad, float *m, float *v, bf16 *working,
                        int64_t count, const AdamWArgs &args, const float *norm, double maxNorm,
                        const int64_t *step, cudaStream_t stream);
/// Multi-tensor AdamW: one launch updates many parameters (a block per
/// chunk of at most kAdamWChunk of a tensor's elements), each with its own
/// weight decay; the rest of `a` is shared. `tensors` and `chunks` are
/// device arrays (adamwChunks makes the chunks from the tensors' counts, in
/// order); with `norm` (and `step`) on the device as adamwDevice, else with
/// a.gradScale and a.step as adamw. Element by element the same update as
/// those (bit-identical).
struct AdamWTensor {
  float *param;
  const float *grad;
  float *m, *v;
  bf16 *working; ///< may be null
  int64_t count;
  float weightDecay;
};
struct AdamWChunk {
  int32_t tensor;
  int64_t begin, end;
};
constexpr int64_t kAdamWChunk = 65536;
std::vector<AdamWChunk> adamwChunks(const std::vector<int64_t> &counts);
cudaError_t adamwMulti(const AdamWTensor *tensors, const AdamWChunk *chunks, int64_t count,
                       const AdamWArgs &a, const float *norm, double maxNorm, const int64_t *step,
                       cudaStream_t stream);
/// out = sqrt(*sum) (the global norm from sumSquaresAccumulate), on the device.
cudaError_t sqrtOfSum(const double *sum, float *out, cudaStream_t stream);
/// out = float(*sum), rounded to nearest as the host rounds (ZeRO's partial
/// sums of squares before their all-reduce), on the device.
cudaError_t floatOfSum(const double *sum, float *out, cudaStream_t stream);

} // namespace llmopt::kernels::cuda

#endif // LLMOPT_KERNELS_CUDA_H
