//===- cpu.h - reference kernels (plain C++, fp32) ---------------*- C++ -*-===//
//
// The CPU reference of every kernel a training plan runs: the CPU backend
// executes them, and the CUDA kernels are validated against them. Plain
// C++17, no LLVM, fp32 storage and fp32 accumulation, row-major tensors.
//
// Conventions:
//  - activations are [N, C] with N = batch * seq rows (attention and rotary
//    take batch and seq separately);
//  - weights of linear layers are [out, in] (nn.Linear), or [in, out] when
//    `transposed` (GPT-2's Conv1D);
//  - backward kernels ACCUMULATE parameter gradients (+=) so micro-batches
//    and tied weights add up, and WRITE activation gradients (=).
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_KERNELS_CPU_H
#define LLMOPT_KERNELS_CPU_H

#include <cstdint>
#include <vector>

namespace llmopt::kernels::cpu {

// --- embeddings (embedding.cpp) ---------------------------------------------
/// out[n, :] = table[tokens[n], :]. Tokens outside [0, vocab) are an error
/// the caller checks first (returns false).
bool embeddingForward(const int32_t *tokens, const float *table, float *out, int64_t n,
                      int64_t vocab, int64_t hidden);
/// dtable[tokens[n], :] += dout[n, :].
void embeddingBackward(const int32_t *tokens, const float *dout, float *dtable, int64_t n,
                       int64_t hidden);
/// Vocabulary parallelism: this rank holds table rows [start, start + rows);
/// other tokens give zero rows, so the ranks' outputs sum to the whole
/// lookup. Backward accumulates only the rank's rows.
void embeddingForwardPart(const int32_t *tokens, const float *table, float *out, int64_t n,
                          int64_t start, int64_t rows, int64_t hidden);
void embeddingBackwardPart(const int32_t *tokens, const float *dout, float *dtable, int64_t n,
                           int64_t start, int64_t rows, int64_t hidden);
/// out[b, s, :] = x[b, s, :] + table[pos(s), :] (in place allowed), pos(s) =
/// positions[s] or s when null.
void positionEmbeddingForward(const float *x, const float *table, float *out, int64_t batch,
                              int64_t seq, int64_t hidden, const int32_t *positions = nullptr);
/// dtable[pos(s), :] += sum_b dout[b, s, :].
void positionEmbeddingBackward(const float *dout, float *dtable, int64_t batch, int64_t seq,
                               int64_t hidden, const int32_t *positions = nullptr);

// --- norms (norm.cpp) ---------------------------------------------------------
/// Layer norm over the last dimension; keeps mean and rstd per row for
/// backward. `bias` may be null.
void layerNormForward(const float *x, const float *weight, const float *bias, float *out,
                      float *mean, float *rstd, int64_t n, int64_t c, float eps);
void layerNormBackward(const float *dout, const float *x, const float *weight, const float *mean,
                       const float *rstd, float *dx, float *dweight, float *dbias, int64_t n,
                       int64_t c);
/// RMS norm over the last dimension; keeps rstd per row.
void rmsNormForward(const float *x, const float *weight, float *out, float *rstd, int64_t n,
                    int64_t c, float eps);
void rmsNormBackward(const float *dout, const float *x, const float *weight, const float *rstd,
                     float *dx, float *dweight, int64_t n, int64_t c);

// --- linear (linear.cpp) -------------------------------------------------------
/// out[n, o] = sum_i x[n, i] W[o, i] + b[o]; W is [in, out] when transposed.
/// `bias` may be null.
void linearForward(const float *x, const float *weight, const float *bias, float *out, int64_t n,
                   int64_t in, int64_t out_features, bool transposed);
/// dx = dout W (written; may be null), dW += dout^T x, db += sum_n dout (may
/// be null).
void linearBackward(const float *dout, const float *x, const float *weight, float *dx,
                    float *dweight, float *dbias, int64_t n, int64_t in, int64_t out_features,
                    bool transposed);

// --- fp8 (fp8.cpp) --------------------------------------------------------------
/// The fp8 formats of GEMM inputs (OCP FP8): E4M3 (no infinities, largest
/// 448, smallest subnormal 2^-9) and E5M2 (largest 57344, smallest subnormal
/// 2^-16).
enum class Fp8 { E4M3, E5M2 };
/// Largest finite value of `format`.
float fp8Max(Fp8 format);
/// `x` rounded to the nearest `format` value, ties to even, saturated to
/// +-fp8Max (as Transformer Engine casts); NaN stays NaN.
float roundToFp8(float x, Fp8 format);
/// Largest |x[i]| (0 for n == 0).
float absMax(const float *x, int64_t n);
/// Per-tensor scaled fp8 round trip: y = roundToFp8(x * s) / s with
/// s = fp8Max / amax (1 when amax is 0 or not finite); `amax` is the
/// tensor's (over every rank holding a part of it). `y` may alias `x`.
void fakeQuantizeFp8(const float *x, float *y, int64_t n, Fp8 format, float amax);

// --- activations (activation.cpp) ----------------------------------------------
/// GeLU, exact (erf) or with the tanh approximation.
void geluForward(const float *x, float *out, int64_t count, bool tanhApprox);
void geluBackward(const float *dout, const float *x, float *dx, int64_t count, bool tanhApprox);
/// out = silu(gate) * up.
void swigluForward(const float *gate, const float *up, float *out, int64_t count);
void swigluBackward(const float *dout, const float *gate, const float *up, float *dgate, float *dup,
                    int64_t count);

// --- rotary embedding (rotary.cpp) ----------------------------------------------
/// Context extension of the rotary frequencies: Hugging Face's "linear"
/// (every frequency divided by `linearFactor`; 1 disables) and "llama3"
/// (frequency-dependent, `factor` with the low / high frequency factors and
/// the original length; factor 0 disables).
struct RopeScaling {
  float factor = 0;
  float lowFreqFactor = 1;
  float highFreqFactor = 4;
  float originalMaxPositions = 8192;
  float linearFactor = 1;
};
/// Rotates each head of x [batch, seq, heads * headDim] in place-safe fashion
/// (pairs (i, i + headDim/2), the Hugging Face layout). `inverse` rotates
/// back (the backward pass).
/// `positions` (null: 0..seq-1) are the tokens' positions in the sequence
/// (context parallelism holds non-contiguous chunks).
/// RoPE's inverse frequencies (headDim / 2 of them) with Llama 3 scaling.
std::vector<double> ropeInverseFrequencies(int64_t headDim, float theta,
                                           const RopeScaling &scaling);
void rotary(const float *x, float *out, int64_t batch, int64_t seq, int64_t heads, int64_t headDim,
            float theta, const RopeScaling &scaling, bool inverse,
            const int32_t *positions = nullptr);

// --- attention (attention.cpp) --------------------------------------------------
struct AttentionShape {
  int64_t batch = 1, seq = 1, heads = 1, kvHeads = 1, headDim = 1;
  float scale = 1;
  bool causal = true;
  int64_t window = 0; ///< 0: unlimited
  /// Context parallelism: keys and values span kvSeq positions (0: seq) and
  /// query i sits at position qPos[i] among them (null: i).
  int64_t kvSeq = 0;
  const int32_t *qPos = nullptr;
  /// Ring attention: the keys' positions (null: 0..kvSeq-1). A query that
  /// sees none of them gets log-sum-exp -inf and a zero output.
  const int32_t *kPos = nullptr;
};
/// out [b, s, heads * d] = softmax(q k^T * scale + mask) v per head, with
/// GQA (query head h reads kv head h / (heads / kvHeads)). Keeps the
/// log-sum-exp [b, heads, s] for backward.
void attentionForward(const float *q, const float *k, const float *v, float *out, float *lse,
                      const AttentionShape &shape);
/// Writes dq, dk, dv (kv gradients summed over the query heads sharing them).
void attentionBackward(const float *dout, const float *q, const float *k, const float *v,
                       const float *out, const float *lse, float *dq, float *dk, float *dv,
                       const AttentionShape &shape);

// --- loss (loss.cpp) ------------------------------------------------------------
/// Mean cross-entropy over rows whose label != ignoreIndex; returns the loss
/// and the number of counted rows in `counted`. Labels outside the vocabulary
/// (other than ignoreIndex) make it return false.
bool crossEntropyForward(const float *logits, const int32_t *labels, int64_t n, int64_t vocab,
                         int64_t ignoreIndex, float *loss, int64_t *counted);
/// dlogits = (softmax(logits) - onehot(label)) * dloss / counted, zero rows
/// for ignored labels.
void crossEntropyBackward(const float *logits, const int32_t *labels, float dloss, int64_t counted,
                          float *dlogits, int64_t n, int64_t vocab, int64_t ignoreIndex);

// --- mixture of experts (moe.cpp) ----------------------------------------------
/// Rows of the [experts, capacity, hidden] buffers: routed copy i = n * topK + j
/// of token n takes row slots[i] of expert indices[i], or -1 when the expert
/// is full (dropped). Returns false for an expert index out of range.
bool moeSlots(const int32_t *indices, int64_t n, int64_t topK, int64_t experts, int64_t capacity,
              int64_t *slots);
/// Softmax over x gate^T [n, experts] (fp32), the topK best experts
/// (ties to the lower number) and their weights, renormalized to sum to one
/// when `normalize` (Mixtral).
void moeRouterForward(const float *x, const float *gate, float *weights, int32_t *indices,
                      int64_t n, int64_t hidden, int64_t experts, int64_t topK, bool normalize);
/// dx written, dgate accumulated; `weights` and `indices` are the forward's.
/// With `auxLossCoef` > 0 the gradient of the load-balancing loss (Switch
/// Transformer, Megatron's aux_loss)
///   aux = auxLossCoef * E * sum_e f_e * P_e,  f_e = count_e / (n * topK),
///   P_e = mean over the n tokens of softmax(logits)_e
/// is added (f, from the top-k choice, is constant); the forward loss does
/// not include it (as Megatron's MoEAuxLossAutoScaler). When the router
/// sees a chunk of the tokens (sequence or context parallelism),
/// `auxCounts` are count_e over all `auxTokens` tokens of the sequence
/// (summed over the chunks) and the aux gradient is multiplied by
/// `auxScale`; by default the n tokens here are all of them.
void moeRouterBackward(const float *dweights, const float *x, const float *gate,
                       const float *weights, const int32_t *indices, float *dx, float *dgate,
                       int64_t n, int64_t hidden, int64_t experts, int64_t topK, bool normalize,
                       float auxLossCoef = 0.0f, const float *auxCounts = nullptr,
                       int64_t auxTokens = 0, float auxScale = 1.0f);
/// count_e: how many of the n tokens' top-k choices went to each expert.
void moeExpertCounts(const int32_t *indices, float *counts, int64_t n, int64_t experts,
                     int64_t topK);
/// The load-balancing loss above (for tests and reporting).
float moeAuxLoss(const float *x, const float *gate, const int32_t *indices, int64_t n,
                 int64_t hidden, int64_t experts, int64_t topK, float auxLossCoef);
/// out [experts, capacity, hidden]: each token's copies at their slots,
/// zero rows elsewhere. Backward sums a token's copies' gradients.
bool moeDispatchForward(const float *x, const int32_t *indices, float *out, int64_t n,
                        int64_t hidden, int64_t topK, int64_t experts, int64_t capacity);
bool moeDispatchBackward(const float *dout, const int32_t *indices, float *dx, int64_t n,
                         int64_t hidden, int64_t topK, int64_t experts, int64_t capacity);
/// out[n] = sum_j weights[n, j] * expertOut[indices[n, j], slot]; backward
/// writes the expert-output and routing-weight gradients.
bool moeCombineForward(const float *expertOut, const float *weights, const int32_t *indices,
                       float *out, int64_t n, int64_t hidden, int64_t topK, int64_t experts,
                       int64_t capacity);
bool moeCombineBackward(const float *dout, const float *expertOut, const float *weights,
                        const int32_t *indices, float *dexpertOut, float *dweights, int64_t n,
                        int64_t hidden, int64_t topK, int64_t experts, int64_t capacity);
struct MoEExpertShape {
  int64_t experts = 1, capacity = 1, hidden = 1, ffn = 1;
  bool swiglu = true; ///< weights gate, up, down; else fc1, fc2 with exact GeLU
  /// fp8 GEMM inputs (0: none; 1: forward, all E4M3; 2: backward, Transformer
  /// Engine's hybrid recipe, gradients E5M2): activations and their
  /// gradients scaled per row (each token its own scale, so that a row
  /// rounds the same whichever tokens share its expert: the same bits under
  /// expert parallelism as on one rank), each expert's weight per tensor.
  int fp8 = 0;
  /// With fp8: the amax of weight w of expert e at [w * experts + e] (the
  /// whole tensor's, where the ffn is split over ranks); null: this rank's.
  const float *weightAmax = nullptr;
  /// With fp8 where the ffn is split over ranks: makes `n` per-row amaxes of
  /// the hidden activations (or their gradients) the whole rows' (the
  /// maximum over the ranks); false on failure. Null: the rows are whole.
  bool (*rowAmax)(void *context, float *amax, int64_t n) = nullptr;
  void *rowAmaxContext = nullptr;
  /// Backward: each expert's weight gradients are summed apart (in a
  /// scratch of one expert's weights) and then added to `dweights`, the
  /// sums a separate add of the whole gradient would make (fp32
  /// accumulators written in place); else they are accumulated directly.
  bool addApart = false;
};
/// Expert e's MLP on rows [e, :, :] of x; weights [experts, ffn, hidden]
/// (gate / up / fc1) and [experts, hidden, ffn] (down / fc2), no biases, so
/// zero rows stay zero. Backward writes dx, accumulates the weight
/// gradients, and recomputes the hidden activations. False only when
/// `shape.rowAmax` fails.
bool moeExpertsForward(const float *x, const float *const *weights, float *out,
                       const MoEExpertShape &shape);
bool moeExpertsBackward(const float *dout, const float *x, const float *const *weights, float *dx,
                        float *const *dweights, const MoEExpertShape &shape);
/// Each of `rows` rows of `x` (`cols` wide) rounded to fp8 with its own
/// amax (`amax[r]`, or the row's own when null) into `y` (may alias `x`).
void fakeQuantizeFp8Rows(const float *x, float *y, int64_t rows, int64_t cols, Fp8 format,
                         const float *amax = nullptr);

// --- optimizer (adamw.cpp) -------------------------------------------------------
/// Sum of squares of a gradient buffer (the global norm is the square root of
/// the sum over all buffers and ranks).
double sumOfSquares(const float *x, int64_t count);
struct AdamWParams {
  float lr = 3e-4f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weightDecay = 0.1f;
  /// Multiplies the gradient first (clipping: min(1, maxNorm / norm)).
  float gradScale = 1;
  int64_t step = 1; ///< 1-based, for bias correction
};
/// Decoupled weight decay Adam (Loshchilov and Hutter 2019), in place on the
/// fp32 parameter and moments.
void adamw(float *param, const float *grad, float *m, float *v, int64_t count,
           const AdamWParams &p);

} // namespace llmopt::kernels::cpu

#endif // LLMOPT_KERNELS_CPU_H
