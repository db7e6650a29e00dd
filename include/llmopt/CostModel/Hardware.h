//===- Hardware.h - GPUs and clusters ---------------------------*- C++ -*-===//
//
// Plain C++ descriptions of a GPU and a cluster: peaks from datasheets,
// bandwidths as NCCL users measure them, and the efficiency parameters the
// time model calibrates. Presets carry the values of
// shared/reference/hardware.json; docs/cost-model.md lists them with sources.
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_COSTMODEL_HARDWARE_H
#define LLMOPT_COSTMODEL_HARDWARE_H

#include <string>
#include <vector>

namespace llvm::json {
class Value;
}

namespace llmopt::cost {

enum class DType { BF16, FP16, FP32, FP8 };

const char *toString(DType d);
/// Bytes per element of a 16-bit, 32-bit or 8-bit type.
double bytesOf(DType d);

struct GpuSpec {
  std::string name;
  /// Dense peak FLOP/s.
  double bf16Flops = 0;
  double fp8Flops = 0;
  double fp32Flops = 0;
  double hbmBytes = 0;
  /// HBM bandwidth, bytes/s (datasheet).
  double hbmBandwidth = 0;

  // Efficiency (calibrated; see docs/cost-model.md).
  /// Fraction of peak a large, square GEMM reaches.
  double gemmEfficiency = 0.8;
  /// A GEMM dimension of this size halves the efficiency term of that
  /// dimension: eff = gemmEfficiency * prod_d d / (d + gemmHalfDim).
  double gemmHalfDim = 64;
  /// fp8 GEMMs reach this fraction of what a bf16 GEMM of the same shape
  /// reaches of its peak (scaling and casts cost the rest).
  double fp8GemmEfficiency = 0.7;
  /// Fraction of peak of a fused (flash) attention kernel.
  double flashAttentionEfficiency = 0.6;
  /// Fraction of peak of the batched GEMMs of a non-fused attention.
  double bmmEfficiency = 0.5;
  /// Fraction of HBM bandwidth memory-bound kernels reach.
  double memEfficiency = 0.75;
  /// Sustained fraction of the datasheet compute rate that the GPU's power
  /// budget and the training stack allow (1 for an SXM part at full power
  /// with fused kernels; below 1 for power-capped parts or less tuned stacks).
  /// Scales GEMM and attention throughput, not memory bandwidth.
  double throughputScale = 1.0;
  /// Memory reserved by the CUDA context, cuBLAS workspaces and NCCL.
  double reservedBytes = 2.0 * (1ull << 30);

  double peakFlops(DType d) const;
};

struct ClusterSpec {
  std::string name;
  GpuSpec gpu;
  int gpusPerNode = 8;
  int numNodes = 1;
  /// Intra-node fabric: NVLink/NVSwitch or PCIe. Bandwidths are the bus
  /// bandwidth NCCL reaches per GPU, bytes/s.
  bool nvlink = true;
  double intraBusBandwidth = 0;
  /// All-reduce bus bandwidth when NVLink SHARP (NVLS) beats the ring; 0 for
  /// the ring's.
  double intraAllReduceBusBandwidth = 0;
  /// Latency of one ring step inside a node and across nodes, seconds, and
  /// the fixed start-up cost of a collective.
  double intraStepLatency = 3.4e-6;
  double interStepLatency = 14e-6;
  double collectiveBaseLatency = 8.4e-6;
  /// Network: NICs per node and what NCCL reaches over each, bytes/s.
  int nicsPerNode = 8;
  double nicBandwidth = 0;
  /// Host memory per node and host-device bandwidth per GPU (offload).
  double hostMemoryBytes = 2.0e12;
  double pcieBandwidth = 25e9;
  /// CPU Adam throughput per GPU's share of the host, parameters/s (offload).
  double cpuAdamParamsPerS = 1.0e9;

  int totalGpus() const { return gpusPerNode * numNodes; }
  /// Bandwidth of the network per GPU when every GPU of a node is talking.
  double nicShareBandwidth() const { return nicsPerNode * nicBandwidth / gpusPerNode; }
};

/// Names of the presets: dgx-a100-40gb, dgx-a100-80gb, dgx-h100, dgx-h200,
/// pcie-8x-h100.
std::vector<std::string> clusterPresetNames();

/// Looks a preset up by name; returns false when unknown.
bool getClusterPreset(const std::string &name, ClusterSpec &out);

/// Builds a cluster from a preset name or a JSON file's contents, with
/// overrides `key=value` (any field of the JSON schema, and `gpus=N` which
/// sets the node count). On error returns false with `error` naming the field
/// or file and the fix.
bool parseCluster(const std::string &spec, const std::string &fileContents,
                  const std::vector<std::pair<std::string, std::string>> &overrides, int gpus,
                  ClusterSpec &out, std::string &error);

/// The cluster as JSON (the schema parseCluster reads).
llvm::json::Value toJSON(const ClusterSpec &c);

} // namespace llmopt::cost

#endif // LLMOPT_COSTMODEL_HARDWARE_H
