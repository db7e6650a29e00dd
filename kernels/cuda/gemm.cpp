//===- gemm.cpp - linear layers through cuBLASLt ---------------------------===//
//
// cuBLASLt is column-major: a row-major [r, c] buffer is its column-major
// [c, r] transpose. So y[n, out] = x[n, in] W^T becomes
// y^T (out x n) = op(W-buffer) (out x in) * x^T (in x n), and likewise for
// the two backward products.
//
//===----------------------------------------------------------------------===//

#include "llmopt-kernels/gemm.h"

#include "llmopt-kernels/cuda.h"
#include "llmopt-kernels/device_buffer.h"

#include <cublasLt.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <tuple>

namespace llmopt::kernels::cuda {
namespace {

const char *status(cublasStatus_t s) {
  switch (s) {
  case CUBLAS_STATUS_SUCCESS:
    return "success";
  case CUBLAS_STATUS_NOT_INITIALIZED:
    return "not initialized";
  case CUBLAS_STATUS_INVALID_VALUE:
    return "invalid value";
  case CUBLAS_STATUS_NOT_SUPPORTED:
    return "not supported";
  default:
    return "cuBLASLt error";
  }
}

/// One matmul D = alpha op(A) op(B) + beta C (C = D), column-major.
struct Problem {
  cublasOperation_t ta, tb;
  int64_t m, n, k, lda, ldb, ldd;
  cudaDataType_t ab, d;
  bool bias, gelu;
  /// fp8: device pointers to the factors dequantizing A and B.
  const float *scaleA = nullptr, *scaleB = nullptr;
  /// Strided batches (1: one product).
  int64_t batch = 1, strideA = 0, strideB = 0, strideD = 0;
  float alpha = 1;
  /// B's type where it is not `ab` (fp8: E5M2 gradients times E4M3).
  std::optional<cudaDataType_t> typeB;
  auto key() const {
    return std::make_tuple(int(ta), int(tb), m, n, k, lda, ldb, ldd, int(ab), int(d), bias, gelu,
                           batch, strideA, strideB, strideD, int(typeB.value_or(ab)));
  }
};

class LtGemm final : public Gemm {
public:
  ~LtGemm() override {
    if (workspace)
      cudaFree(workspace);
    if (handle)
      cublasLtDestroy(handle);
  }

  bool init(std::string &error) {
    if (cublasStatus_t s = cublasLtCreate(&handle); s != CUBLAS_STATUS_SUCCESS) {
      error = std::string("cublasLtCreate: ") + status(s);
      return false;
    }
    if (cudaMalloc(&workspace, kWorkspace) != cudaSuccess) {
      error = "cannot allocate the cuBLASLt workspace";
      return false;
    }
    return true;
  }

  bool linearForward(const void *x, const void *w, const void *bias, void *y, const LinearShape &s,
                     cudaStream_t stream, std::string &error, void *pre) override {
    // y^T (out x n) = op(W) (out x in) * x^T (in x n).
    Problem p{s.transposed ? CUBLAS_OP_N : CUBLAS_OP_T,
              CUBLAS_OP_N,
              s.out,
              s.n,
              s.in,
              s.transposed ? s.out : s.in,
              s.in,
              s.out,
              s.type,
              s.type,
              bias != nullptr,
              pre != nullptr};
    size_t elem = elementBytes(s.type);
    int64_t wide = linearPaddedOut(s.out, s.type);
    if (!pitchOk(s, wide, error))
      return false;
    if (wide == s.out || pre)
      return run(p, w, x, y, bias, 0.0f, stream, error, pre);
    // An odd `out` (GPT-2's LM head): the product with zero-padded weights
    // into padded rows (y's own with s.ld), else copied into y.
    const void *wp = padWeight(w, s, wide, stream, error);
    const void *bp = bias ? padBias(bias, s, wide, stream, error) : nullptr;
    void *ywide = s.ld == wide ? y : rows.get(size_t(wide) * size_t(s.n) * elem, error);
    if (!wp || (bias && !bp) || !ywide)
      return false;
    p.m = p.ldd = wide;
    if (s.transposed)
      p.lda = wide;
    return run(p, wp, x, ywide, bp, 0.0f, stream, error) &&
           (ywide == y || copyRows(y, size_t(s.out) * elem, ywide, size_t(wide) * elem,
                                   size_t(s.out) * elem, s.n, stream, error));
  }

  bool linearBackward(const void *dy, const void *x, const void *w, void *dx, float *dw,
                      const LinearShape &s, cudaStream_t stream, std::string &error) override {
    // An odd `out`: dy copied into rows padded with zeros, and the weights
    // padded with zeros, so that dx's product runs over a multiple of 128.
    size_t elem = elementBytes(s.type);
    int64_t wide = linearPaddedOut(s.out, s.type), ldy = s.out;
    if (!pitchOk(s, wide, error))
      return false;
    if (wide != s.out && s.ld == wide) {
      ldy = wide; // dy in padded rows already, the padding zero
      if (dx && !(w = padWeight(w, s, wide, stream, error)))
        return false;
    } else if (wide != s.out) {
      void *dywide = rows.get(size_t(wide) * size_t(s.n) * elem, error);
      if (!dywide ||
          !copyRows(dywide, size_t(wide) * elem, dy, size_t(s.out) * elem, size_t(s.out) * elem,
                    s.n, stream, error) ||
          !zeroColumns(dywide, size_t(wide) * elem, size_t(s.out) * elem, s.n, stream, error))
        return false;
      dy = dywide;
      ldy = wide;
      if (dx && !(w = padWeight(w, s, wide, stream, error)))
        return false;
    }
    if (dx) {
      // dx^T (in x n) = op(W) (in x out) * dy^T (out x n).
      Problem p{s.transposed ? CUBLAS_OP_T : CUBLAS_OP_N,
                CUBLAS_OP_N,
                s.in,
                s.n,
                wide,
                s.transposed ? wide : s.in,
                ldy,
                s.in,
                s.type,
                s.type,
                false,
                false};
      if (!run(p, w, dy, dx, nullptr, 0.0f, stream, error))
        return false;
    }
    if (!s.transposed && wide != s.out) {
      // dW^T (in x wide) = x^T (in x n) * dy (n x wide) into a scratch,
      // then its first `out` columns added to dW (measured: 1.5 ms and an
      // add instead of 2.3 ms for n = 50257 columns).
      float *dwide = static_cast<float *>(gradients.get(size_t(wide) * size_t(s.in) * 4, error));
      Problem p{CUBLAS_OP_N, CUBLAS_OP_T, s.in,   wide,       s.n,   s.in,
                ldy,         s.in,        s.type, CUDA_R_32F, false, false};
      if (!dwide || !run(p, x, dy, dwide, nullptr, 0.0f, stream, error))
        return false;
      if (addInto(dw, static_cast<const float *>(dwide), s.out * s.in, stream) != cudaSuccess) {
        error = "cannot add a linear's weight gradient";
        return false;
      }
      return true;
    }
    if (!s.transposed) {
      // dW^T (in x out) += x^T (in x n) * dy (n x out).
      Problem p{CUBLAS_OP_N, CUBLAS_OP_T, s.in,   s.out,      s.n,   s.in,
                ldy,         s.in,        s.type, CUDA_R_32F, false, false};
      return run(p, x, dy, dw, nullptr, 1.0f, stream, error);
    }
    // [in, out] weights: dW^T (out x in) += dy^T (out x n) * x (n x in).
    Problem p{CUBLAS_OP_N, CUBLAS_OP_T, s.out,  s.in,       s.n,   ldy,
              s.in,        s.out,       s.type, CUDA_R_32F, false, false};
    return run(p, dy, x, dw, nullptr, 1.0f, stream, error);
  }

  bool linearForwardFp8(const uint8_t *xq, const uint8_t *wq, const float *xScaleInv,
                        const float *wScaleInv, const void *bias, void *y, const LinearShape &s,
                        cudaStream_t stream, std::string &error) override {
    if (s.transposed) {
      error = "fp8 GEMMs need [out, in] weights (cuBLASLt's TN layout)";
      return false;
    }
    // cuBLASLt's fp8 bias epilogue wants a bf16 bias whatever D is; the
    // fp8 linears (Llama-style) have none.
    if (bias) {
      error = "fp8 GEMMs take no bias here (add it separately)";
      return false;
    }
    return fp8Product(xq, false, wq, false, xScaleInv, wScaleInv, y, s.n, s.in, s.out, s.type, 0.0f,
                      stream, error);
  }

  bool fp8Product(const uint8_t *aq, bool aE5M2, const uint8_t *bq, bool bE5M2,
                  const float *aScaleInv, const float *bScaleInv, void *y, int64_t n, int64_t k,
                  int64_t out, cudaDataType_t yType, float beta, cudaStream_t stream,
                  std::string &error) override {
    if (aE5M2 && bE5M2) {
      error = "fp8 GEMMs take at most one E5M2 operand";
      return false;
    }
    // y^T (out x n) = B-op (out x k) * A^T (k x n): cuBLASLt's A is our B,
    // transposed; its B our A.
    Problem p{
        CUBLAS_OP_T, CUBLAS_OP_N, out,  n, k, k, k, out, bE5M2 ? CUDA_R_8F_E5M2 : CUDA_R_8F_E4M3,
        yType,       false,       false};
    p.typeB = aE5M2 ? CUDA_R_8F_E5M2 : CUDA_R_8F_E4M3;
    p.scaleA = bScaleInv;
    p.scaleB = aScaleInv;
    return run(p, bq, aq, y, nullptr, beta, stream, error);
  }

  bool batched(const void *a, const void *b, void *c, const BatchedShape &s, cudaStream_t stream,
               std::string &error) override {
    // Row-major C (m x n) = op(A) op(B) is column-major C^T (n x m) =
    // op(B)^T op(A)^T, and a row-major buffer is its column-major transpose:
    // cuBLASLt's A is our B, its B our A.
    Problem p{s.transB ? CUBLAS_OP_T : CUBLAS_OP_N,
              s.transA ? CUBLAS_OP_T : CUBLAS_OP_N,
              s.n,
              s.m,
              s.k,
              s.ldb,
              s.lda,
              s.ldc,
              s.ab,
              s.c,
              false,
              false};
    p.batch = s.batch;
    p.strideA = s.strideB;
    p.strideB = s.strideA;
    p.strideD = s.strideC;
    p.alpha = s.alpha;
    return run(p, b, a, c, nullptr, s.beta, stream, error);
  }

  size_t cachedAlgorithms() const override { return algos.size(); }

  // The file: a magic line, then per entry the problem key's 17 integers and
  // the algorithm's 8 words, little-endian as in memory (v1 files, of 16
  // key words, are not read).
  static constexpr char kMagic[] = "llm-opt cuBLASLt algorithms v2\n";
  static constexpr size_t kKeyWords = 17;

  bool loadAlgorithms(const std::string &path) override {
    std::ifstream f(path, std::ios::binary);
    std::string magic(sizeof(kMagic) - 1, '\0');
    if (!f || !f.read(magic.data(), std::streamsize(magic.size())) || magic != kMagic)
      return false;
    std::map<Key, cublasLtMatmulAlgo_t> loaded;
    int64_t w[kKeyWords];
    cublasLtMatmulAlgo_t algo;
    while (f.read(reinterpret_cast<char *>(w), sizeof(w))) {
      if (!f.read(reinterpret_cast<char *>(&algo), sizeof(algo)))
        return false; // truncated: use none of it
      Key k{int(w[0]), int(w[1]),  w[2],       w[3],  w[4],  w[5],  w[6],  w[7],      int(w[8]),
            int(w[9]), w[10] != 0, w[11] != 0, w[12], w[13], w[14], w[15], int(w[16])};
      loaded.emplace(k, algo);
    }
    for (auto &[k, a] : loaded)
      if (algos.emplace(k, a).second)
        unchecked.insert(k);
    return true;
  }

  bool saveAlgorithms(const std::string &path, std::string &error) const override {
    std::string tmp = path + ".tmp" + std::to_string(reinterpret_cast<uintptr_t>(this));
    {
      std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
      f.write(kMagic, std::streamsize(sizeof(kMagic) - 1));
      for (const auto &[k, a] : algos) {
        int64_t w[kKeyWords] = {std::get<0>(k),  std::get<1>(k),  std::get<2>(k),  std::get<3>(k),
                                std::get<4>(k),  std::get<5>(k),  std::get<6>(k),  std::get<7>(k),
                                std::get<8>(k),  std::get<9>(k),  std::get<10>(k), std::get<11>(k),
                                std::get<12>(k), std::get<13>(k), std::get<14>(k), std::get<15>(k),
                                std::get<16>(k)};
        f.write(reinterpret_cast<const char *>(w), sizeof(w));
        f.write(reinterpret_cast<const char *>(&a), sizeof(a));
      }
      if (!f.flush()) {
        error = tmp + ": cannot write the cuBLASLt algorithm cache";
        std::remove(tmp.c_str());
        return false;
      }
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
      error = path + ": cannot write the cuBLASLt algorithm cache";
      std::remove(tmp.c_str());
      return false;
    }
    return true;
  }

private:
  static constexpr size_t kWorkspace = 32u << 20;

  static size_t elementBytes(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }
  static bool pitchOk(const LinearShape &s, int64_t wide, std::string &error) {
    if (s.ld == 0 || s.ld == s.out || s.ld == wide)
      return true;
    error = "a linear's row pitch must be its output size or linearPaddedOut of it";
    return false;
  }

  /// A buffer of padded operands (used in stream order, one use at a time).
  struct Scratch : DeviceBuffer {
    void *get(size_t need, std::string &error) {
      if (reserve(need))
        return p;
      error =
          "out of GPU memory for " + std::to_string(need) + " bytes of a linear's padded operands";
      return nullptr;
    }
  };

  /// The weights with `wide` - out zero rows ([out, in]) or columns
  /// ([in, out], transposed).
  const void *padWeight(const void *w, const LinearShape &s, int64_t wide, cudaStream_t stream,
                        std::string &error) {
    size_t elem = elementBytes(s.type);
    void *wp = weights.get(size_t(wide) * size_t(s.in) * elem, error);
    if (!wp)
      return nullptr;
    if (!s.transposed) {
      size_t used = size_t(s.out) * size_t(s.in) * elem;
      if (cudaMemcpyAsync(wp, w, used, cudaMemcpyDeviceToDevice, stream) != cudaSuccess ||
          cudaMemsetAsync(static_cast<char *>(wp) + used, 0,
                          size_t(wide - s.out) * size_t(s.in) * elem, stream) != cudaSuccess) {
        error = "cannot pad a linear's weights";
        return nullptr;
      }
      return wp;
    }
    if (!copyRows(wp, size_t(wide) * elem, w, size_t(s.out) * elem, size_t(s.out) * elem, s.in,
                  stream, error) ||
        !zeroColumns(wp, size_t(wide) * elem, size_t(s.out) * elem, s.in, stream, error))
      return nullptr;
    return wp;
  }

  const void *padBias(const void *b, const LinearShape &s, int64_t wide, cudaStream_t stream,
                      std::string &error) {
    size_t elem = elementBytes(s.type);
    void *bp = biases.get(size_t(wide) * elem, error);
    if (bp &&
        cudaMemcpyAsync(bp, b, size_t(s.out) * elem, cudaMemcpyDeviceToDevice, stream) ==
            cudaSuccess &&
        cudaMemsetAsync(static_cast<char *>(bp) + size_t(s.out) * elem, 0,
                        size_t(wide - s.out) * elem, stream) == cudaSuccess)
      return bp;
    if (bp)
      error = "cannot pad a linear's bias";
    return nullptr;
  }

  static bool copyRows(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                       int64_t count, cudaStream_t stream, std::string &error) {
    if (cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, size_t(count), cudaMemcpyDeviceToDevice,
                          stream) == cudaSuccess)
      return true;
    error = "cannot copy a linear's rows to or from their padding";
    return false;
  }

  /// Zeros bytes [used, pitch) of `count` rows of `pitch` bytes.
  static bool zeroColumns(void *p, size_t pitch, size_t used, int64_t count, cudaStream_t stream,
                          std::string &error) {
    if (cudaMemset2DAsync(static_cast<char *>(p) + used, pitch, 0, pitch - used, size_t(count),
                          stream) == cudaSuccess)
      return true;
    error = "cannot zero a linear's padding";
    return false;
  }

  bool run(const Problem &p, const void *a, const void *b, void *d, const void *bias, float beta,
           cudaStream_t stream, std::string &error, void *aux = nullptr) {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
    auto cleanup = [&] {
      if (op)
        cublasLtMatmulDescDestroy(op);
      for (cublasLtMatrixLayout_t l : {la, lb, ld})
        if (l)
          cublasLtMatrixLayoutDestroy(l);
    };
    auto check = [&](cublasStatus_t s, const char *what) {
      if (s == CUBLAS_STATUS_SUCCESS)
        return true;
      error = std::string(what) + ": " + status(s);
      return false;
    };
    int64_t ar = p.ta == CUBLAS_OP_N ? p.m : p.k, ac = p.ta == CUBLAS_OP_N ? p.k : p.m;
    int64_t br = p.tb == CUBLAS_OP_N ? p.k : p.n, bc = p.tb == CUBLAS_OP_N ? p.n : p.k;
    bool ok =
        check(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul descriptor") &&
        check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &p.ta, sizeof(p.ta)),
              "transa") &&
        check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &p.tb, sizeof(p.tb)),
              "transb") &&
        check(cublasLtMatrixLayoutCreate(&la, p.ab, uint64_t(ar), uint64_t(ac), p.lda),
              "layout A") &&
        check(cublasLtMatrixLayoutCreate(&lb, p.typeB.value_or(p.ab), uint64_t(br), uint64_t(bc),
                                         p.ldb),
              "layout B") &&
        check(cublasLtMatrixLayoutCreate(&ld, p.d, uint64_t(p.m), uint64_t(p.n), p.ldd),
              "layout D");
    if (ok && p.batch > 1) {
      int32_t count = int32_t(p.batch);
      for (auto [l, stride] :
           {std::pair{la, p.strideA}, std::pair{lb, p.strideB}, std::pair{ld, p.strideD}})
        ok = ok &&
             check(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                                    sizeof(count)),
                   "batch count") &&
             check(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                    &stride, sizeof(stride)),
                   "batch stride");
    }
    if (ok && p.scaleA)
      ok = check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &p.scaleA,
                                                sizeof(p.scaleA)),
                 "A scale") &&
           check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &p.scaleB,
                                                sizeof(p.scaleB)),
                 "B scale");
    if (ok && (bias || aux)) {
      cublasLtEpilogue_t epilogue =
          aux ? (bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX)
              : CUBLASLT_EPILOGUE_BIAS;
      ok = check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                                sizeof(epilogue)),
                 "epilogue");
      if (ok && bias)
        ok = check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                  sizeof(bias)),
                   "bias pointer");
      // The pre-activation, laid out like D.
      if (ok && aux)
        ok = check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                  &aux, sizeof(aux)),
                   "aux pointer") &&
             check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &p.ldd,
                                                  sizeof(p.ldd)),
                   "aux leading dimension");
    }
    if (!ok) {
      cleanup();
      return false;
    }
    // The heuristic's choice, once per problem. One read from the cache
    // file is checked against this problem before its first use.
    auto it = algos.find(p.key());
    if (it != algos.end() && unchecked.erase(p.key())) {
      cublasLtMatmulHeuristicResult_t checked{};
      if (cublasLtMatmulAlgoCheck(handle, op, la, lb, ld, ld, &it->second, &checked) !=
              CUBLAS_STATUS_SUCCESS ||
          checked.workspaceSize > kWorkspace) {
        algos.erase(it);
        it = algos.end();
      }
    }
    if (it == algos.end()) {
      cublasLtMatmulPreference_t pref = nullptr;
      size_t ws = kWorkspace;
      cublasLtMatmulHeuristicResult_t result{};
      int found = 0;
      ok = check(cublasLtMatmulPreferenceCreate(&pref), "preference") &&
           check(cublasLtMatmulPreferenceSetAttribute(
                     pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
                 "workspace preference") &&
           check(
               cublasLtMatmulAlgoGetHeuristic(handle, op, la, lb, ld, ld, pref, 1, &result, &found),
               "heuristic");
      if (pref)
        cublasLtMatmulPreferenceDestroy(pref);
      if (ok && found == 0) {
        error = "cuBLASLt has no algorithm for this GEMM";
        ok = false;
      }
      if (!ok) {
        cleanup();
        return false;
      }
      it = algos.emplace(p.key(), result.algo).first;
    }
    float alpha = p.alpha;
    ok = check(cublasLtMatmul(handle, op, &alpha, a, la, b, lb, &beta, d, ld, d, ld, &it->second,
                              workspace, kWorkspace, stream),
               "cublasLtMatmul");
    cleanup();
    return ok;
  }

  cublasLtHandle_t handle = nullptr;
  void *workspace = nullptr;
  Scratch rows, weights, biases, gradients; // padded operands of linears with an odd `out`
  using Key = decltype(Problem{}.key());
  std::map<Key, cublasLtMatmulAlgo_t> algos;
  std::set<Key> unchecked; // read from a file, not yet checked
};

} // namespace

size_t cublasLtVersion() { return cublasLtGetVersion(); }

int64_t linearPaddedOut(int64_t out, cudaDataType_t type) {
  size_t elem = type == CUDA_R_32F ? 4 : 2;
  return (size_t(out) * elem) % 16 == 0 ? out : (out + 127) / 128 * 128;
}

std::unique_ptr<Gemm> Gemm::create(std::string &error) {
  auto g = std::make_unique<LtGemm>();
  if (!g->init(error))
    return nullptr;
  return g;
}

} // namespace llmopt::kernels::cuda
