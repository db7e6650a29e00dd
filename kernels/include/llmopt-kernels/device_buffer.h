//===- device_buffer.h - grow-only device memory ------------------*- C++ -*-===//
//
// Device memory that grows to the largest size asked of it and is freed
// with its owner: scratch, workspaces and kept statistics of the CUDA
// kernels and the CUDA backend. A growth frees the old memory first, so the
// contents do not survive it; callers use it in stream order.
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_KERNELS_DEVICE_BUFFER_H
#define LLMOPT_KERNELS_DEVICE_BUFFER_H

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>

namespace llmopt::kernels::cuda {

struct DeviceBuffer {
  void *p = nullptr;
  size_t bytes = 0;
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  ~DeviceBuffer() {
    if (p)
      cudaFree(p);
  }
  /// At least `n` bytes (16 at least once allocated); false, holding none,
  /// when the device has no memory for them.
  bool reserve(size_t n) {
    if (n <= bytes)
      return true;
    if (p)
      cudaFree(p);
    p = nullptr;
    bytes = 0;
    if (cudaMalloc(&p, std::max<size_t>(n, 16)) != cudaSuccess)
      return false;
    bytes = std::max<size_t>(n, 16);
    return true;
  }
  template <typename T> T *as() const { return static_cast<T *>(p); }
};

} // namespace llmopt::kernels::cuda

#endif // LLMOPT_KERNELS_DEVICE_BUFFER_H
