//===- GpuKernelBench.cpp - GPU kernel timings (Google Benchmark) ---------===//
//
// Times, with CUDA events (manual time), the GPU pieces the profiles of
// GPT-2 124M and Llama 3.2 1B pointed at: the LM head's GEMMs with and
// without a vocabulary whose rows are not a multiple of 16 bytes, the copy
// that pads such rows, and the column sums of gradients (bias and norm
// weights) with and without row chunks. Run on a GPU machine; figures go to
// docs/benchmarks.md with command, machine and date.
//
//===----------------------------------------------------------------------===//

#include "llmopt-kernels/cuda.h"
#include "llmopt-kernels/gemm.h"

#include <benchmark/benchmark.h>

#include <cuda_runtime.h>

#include <functional>
#include <memory>
#include <string>

namespace gpu = llmopt::kernels::cuda;

namespace {

struct DevMem {
  void *p = nullptr;
  explicit DevMem(size_t bytes) {
    if (cudaMalloc(&p, bytes) != cudaSuccess)
      p = nullptr;
    else
      cudaMemset(p, 0, bytes);
  }
  ~DevMem() { cudaFree(p); }
};

/// Times `body` per iteration with CUDA events on the default stream.
void timeWithEvents(benchmark::State &state, const std::function<bool()> &body, double flops,
                    double bytes) {
  if (!gpu::deviceAvailable()) {
    state.SkipWithError("no GPU");
    return;
  }
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  if (!body()) { // warm-up (algorithm choice, allocations)
    state.SkipWithError("the kernel failed");
    return;
  }
  cudaDeviceSynchronize();
  for (auto _ : state) {
    cudaEventRecord(a);
    body();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    state.SetIterationTime(ms / 1e3);
  }
  if (flops > 0)
    state.counters["TFLOP/s"] =
        benchmark::Counter(flops * 1e-12, benchmark::Counter::kIsIterationInvariantRate);
  if (bytes > 0)
    state.counters["GB/s"] =
        benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
}

gpu::Gemm *gemm() {
  static std::unique_ptr<gpu::Gemm> g = [] {
    std::string error;
    return gpu::Gemm::create(error);
  }();
  return g.get();
}

// Args: rows, in, out. bf16 activations and weights.
void BM_LinearForward(benchmark::State &state) {
  int64_t n = state.range(0), in = state.range(1), out = state.range(2);
  DevMem x(size_t(n * in) * 2), w(size_t(in * out) * 2), y(size_t(n * out) * 2);
  gpu::LinearShape s{n, in, out, false, CUDA_R_16BF};
  std::string error;
  timeWithEvents(
      state,
      [&] { return gemm() && gemm()->linearForward(x.p, w.p, nullptr, y.p, s, nullptr, error); },
      2.0 * double(n) * double(in) * double(out), 0);
}

// Args: rows, in, out, with dx (1) or only dW (0).
void BM_LinearBackward(benchmark::State &state) {
  int64_t n = state.range(0), in = state.range(1), out = state.range(2);
  bool withDx = state.range(3) != 0;
  DevMem x(size_t(n * in) * 2), w(size_t(in * out) * 2), dy(size_t(n * out) * 2),
      dx(size_t(n * in) * 2), dw(size_t(in * out) * 4);
  gpu::LinearShape s{n, in, out, false, CUDA_R_16BF};
  std::string error;
  timeWithEvents(
      state,
      [&] {
        return gemm() && gemm()->linearBackward(dy.p, x.p, w.p, withDx ? dx.p : nullptr,
                                                static_cast<float *>(dw.p), s, nullptr, error);
      },
      (withDx ? 4.0 : 2.0) * double(n) * double(in) * double(out), 0);
}

// Args: rows, n, k, ldc: C [rows, n] = A [rows, k] B [n, k]^T with C's rows
// `ldc` apart (an LM head's aligned part written straight into logits of
// an odd vocabulary: ldc 50257).
void BM_GemmLeadingDim(benchmark::State &state) {
  int64_t m = state.range(0), n = state.range(1), k = state.range(2), ldc = state.range(3);
  DevMem a(size_t(m * k) * 2), b(size_t(n * k) * 2), c(size_t(m * ldc) * 2);
  gpu::BatchedShape s;
  s.m = m, s.n = n, s.k = k, s.transB = true, s.lda = k, s.ldb = k, s.ldc = ldc;
  s.ab = s.c = CUDA_R_16BF;
  std::string error;
  timeWithEvents(
      state, [&] { return gemm() && gemm()->batched(a.p, b.p, c.p, s, nullptr, error); },
      2.0 * double(m) * double(n) * double(k), 0);
}

// Args: rows, columns: bf16 rows copied into rows padded to 16 bytes.
void BM_PadRows(benchmark::State &state) {
  int64_t n = state.range(0), c = state.range(1), ld = (c + 7) / 8 * 8;
  DevMem src(size_t(n * c) * 2), dst(size_t(n * ld) * 2);
  timeWithEvents(
      state,
      [&] {
        return cudaMemcpy2DAsync(dst.p, size_t(ld) * 2, src.p, size_t(c) * 2, size_t(c) * 2,
                                 size_t(n), cudaMemcpyDeviceToDevice, nullptr) == cudaSuccess;
      },
      0, 2.0 * double(n * c) * 2);
}

// Args: rows, columns, with row chunks (1) or one block per 32 columns (0).
void BM_SumRows(benchmark::State &state) {
  int64_t n = state.range(0), c = state.range(1);
  bool chunks = state.range(2) != 0;
  DevMem g(size_t(n * c) * 2), out(size_t(c) * 4),
      scratch(std::max<size_t>(16, gpu::sumRowsScratchBytes(n, c)));
  timeWithEvents(
      state,
      [&] {
        return gpu::sumRows(static_cast<const gpu::bf16 *>(g.p), static_cast<float *>(out.p), n, c,
                            nullptr, chunks ? scratch.p : nullptr) == cudaSuccess;
      },
      0, double(n * c) * 2);
}

// Args: rows, columns: layer norm backward with column-summed weight and
// bias gradients (the CUDA backend's path).
void BM_LayerNormBackward(benchmark::State &state) {
  int64_t n = state.range(0), c = state.range(1);
  DevMem d(size_t(n * c) * 2), x(size_t(n * c) * 2), w(size_t(c) * 2), stats(size_t(n) * 8),
      dx(size_t(n * c) * 2), dw(size_t(c) * 4), db(size_t(c) * 4),
      scratch(gpu::normBackwardScratchBytes(n, c));
  auto *st = static_cast<float *>(stats.p);
  timeWithEvents(
      state,
      [&] {
        using T = gpu::bf16;
        return gpu::layerNormBackward(static_cast<const T *>(d.p), static_cast<const T *>(x.p),
                                      static_cast<const T *>(w.p), st, st + n,
                                      static_cast<T *>(dx.p), static_cast<float *>(dw.p),
                                      static_cast<float *>(db.p), n, c, nullptr,
                                      static_cast<float *>(scratch.p)) == cudaSuccess;
      },
      0, 3.0 * double(n * c) * 2);
}

} // namespace

// GPT-2 124M, B=16 x T=1024: the LM head (vocabulary 50257, and 50304 =
// padded to a multiple of 64 for comparison) and an MLP GEMM.
BENCHMARK(BM_LinearForward)
    ->Args({16384, 768, 50257})
    ->Args({16384, 768, 50304})
    ->Args({16384, 768, 3072})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LinearBackward)
    ->Args({16384, 768, 50257, 1})
    ->Args({16384, 768, 50257, 0})
    ->Args({16384, 768, 50304, 1})
    ->Args({16384, 768, 50304, 0})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_GemmLeadingDim)
    ->Args({16384, 50176, 768, 50257})
    ->Args({16384, 50176, 768, 50304})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PadRows)->Args({16384, 50257})->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SumRows)
    ->Args({16384, 768, 0})
    ->Args({16384, 768, 1})
    ->Args({16384, 3072, 1})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LayerNormBackward)
    ->Args({16384, 768})
    ->Args({16384, 2048})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
