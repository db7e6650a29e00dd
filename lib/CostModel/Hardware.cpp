//===- Hardware.cpp - GPU and cluster presets and the cluster schema ------===//

#include "llmopt/CostModel/Hardware.h"
#include "llmopt/Support/JSONDepth.h"

#include "JSONFields.h"
#include "JSONMerge.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <functional>

#include <cmath>

using namespace llmopt::cost;
namespace json = llvm::json;

static constexpr double GiB = double(1ull << 30);
static constexpr double GB = 1e9;
static constexpr double TFLOPS = 1e12;

const char *llmopt::cost::toString(DType d) {
  switch (d) {
  case DType::BF16:
    return "bf16";
  case DType::FP16:
    return "fp16";
  case DType::FP32:
    return "fp32";
  case DType::FP8:
    return "fp8";
  }
  return "?";
}

double llmopt::cost::bytesOf(DType d) {
  switch (d) {
  case DType::FP32:
    return 4;
  case DType::FP8:
    return 1;
  default:
    return 2;
  }
}

double GpuSpec::peakFlops(DType d) const {
  switch (d) {
  case DType::FP8:
    return fp8Flops > 0 ? fp8Flops : bf16Flops;
  case DType::FP32:
    return fp32Flops;
  default:
    return bf16Flops;
  }
}

//===----------------------------------------------------------------------===//
// Presets (shared/reference/hardware.json; docs/cost-model.md)
//===----------------------------------------------------------------------===//

static GpuSpec a100(double hbmGiB, double hbmTBs) {
  GpuSpec g;
  g.name = hbmGiB > 50 ? "A100-SXM4-80GB" : "A100-SXM4-40GB";
  g.bf16Flops = 312 * TFLOPS;
  g.fp32Flops = 156 * TFLOPS; // TF32
  g.hbmBytes = hbmGiB * GiB;
  g.hbmBandwidth = hbmTBs * 1e12;
  // Calibrated on Korthikanti et al. 2022 (docs/cost-model.md).
  g.gemmEfficiency = 0.80;
  g.gemmHalfDim = 24;
  g.bmmEfficiency = 0.45;
  g.flashAttentionEfficiency = 0.55;
  g.memEfficiency = 0.8;
  return g;
}

static GpuSpec h100(const std::string &name, double hbmGiB, double hbmTBs) {
  GpuSpec g;
  g.name = name;
  g.bf16Flops = 989.4 * TFLOPS;
  g.fp8Flops = 1978.9 * TFLOPS;
  g.fp32Flops = 494.7 * TFLOPS; // TF32
  g.hbmBytes = hbmGiB * GiB;
  g.hbmBandwidth = hbmTBs * 1e12;
  // 8192^3 bf16 GEMM measured at 798 TFLOP/s (hardware.json): 0.807 of peak
  // = gemmEfficiency * (8192 / (8192 + gemmHalfDim))^3. gemmHalfDim fitted
  // (with that anchor) to the 18 GEMM shapes of llm-run's cuBLASLt profiles
  // of GPT-2 124M and Llama 3.2 1B on an H200 (the H100's tensor cores;
  // 2026-11-26, docs/cost-model.md): 232, rms log error 5.0% (64 before:
  // K = 768 GEMMs predicted at 0.70 of peak, measured 0.42-0.63).
  g.gemmHalfDim = 232;
  g.gemmEfficiency = 0.807 / std::pow(8192.0 / (8192.0 + g.gemmHalfDim), 3);
  // FlashAttention-2 runs at ~35 % of an H100's peak (Shah et al. 2024,
  // FlashAttention-3, Figure 1 baselines).
  g.flashAttentionEfficiency = 0.35;
  g.bmmEfficiency = 0.4;
  // Device copy measured at 3.0 of 3.35 TB/s.
  g.memEfficiency = 3.0 / 3.35;
  return g;
}

bool llmopt::cost::getClusterPreset(const std::string &name, ClusterSpec &c) {
  c = ClusterSpec();
  c.name = name;
  c.gpusPerNode = 8;
  c.numNodes = 1;
  if (name == "dgx-a100-40gb" || name == "dgx-a100-80gb") {
    bool big = name == "dgx-a100-80gb";
    c.gpu = a100(big ? 80 : 40, big ? 2.039 : 1.555);
    c.intraBusBandwidth = 232.5 * GB; // nccl-tests, 8x A100 all-reduce
    c.nicsPerNode = 8;                // 8x HDR 200 Gb/s
    c.nicBandwidth = 25 * GB * 0.94;  // same efficiency as measured on NDR
    c.hostMemoryBytes = (big ? 2048 : 1024) * GiB;
    c.pcieBandwidth = 25 * GB; // PCIe Gen4 x16
    return true;
  }
  if (name == "dgx-h100" || name == "dgx-h200") {
    bool h200 = name == "dgx-h200";
    c.gpu = h200 ? h100("H200-SXM-141GB", 141, 4.8) : h100("H100-SXM5-80GB", 80, 3.35);
    if (h200)
      c.gpu.memEfficiency = 0.85;
    c.intraBusBandwidth = 370 * GB;          // ring, nccl-tests
    c.intraAllReduceBusBandwidth = 480 * GB; // NVLS all-reduce
    c.nicsPerNode = 8;                       // 8x NDR 400 Gb/s
    c.nicBandwidth = 47 * GB;                // measured per NIC
    c.hostMemoryBytes = 2048 * GiB;
    c.pcieBandwidth = 50 * GB; // PCIe Gen5 x16
    return true;
  }
  if (name == "pcie-8x-h100") {
    c.gpu = h100("H100-PCIe-80GB", 80, 2.0);
    c.gpu.bf16Flops = 756 * TFLOPS; // H100 PCIe datasheet, dense
    c.gpu.fp8Flops = 1513 * TFLOPS;
    c.gpu.fp32Flops = 378 * TFLOPS;
    c.gpu.memEfficiency = 0.85;
    c.nvlink = false;
    c.intraBusBandwidth = 40 * GB; // PCIe Gen5 through switches (assumed)
    c.intraStepLatency = 6e-6;
    c.nicsPerNode = 4;
    c.nicBandwidth = 47 * GB;
    c.hostMemoryBytes = 1024 * GiB;
    c.pcieBandwidth = 50 * GB;
    return true;
  }
  return false;
}

std::vector<std::string> llmopt::cost::clusterPresetNames() {
  return {"dgx-a100-40gb", "dgx-a100-80gb", "dgx-h100", "dgx-h200", "pcie-8x-h100"};
}

//===----------------------------------------------------------------------===//
// JSON schema
//===----------------------------------------------------------------------===//

json::Value llmopt::cost::toJSON(const ClusterSpec &c) {
  const GpuSpec &g = c.gpu;
  return json::Object{
      {"name", c.name},
      {"gpus_per_node", c.gpusPerNode},
      {"nodes", c.numNodes},
      {"gpu",
       json::Object{
           {"name", g.name},
           {"bf16_tflops", g.bf16Flops / TFLOPS},
           {"fp8_tflops", g.fp8Flops / TFLOPS},
           {"fp32_tflops", g.fp32Flops / TFLOPS},
           {"hbm_gib", g.hbmBytes / GiB},
           {"hbm_tb_s", g.hbmBandwidth / 1e12},
           {"gemm_efficiency", g.gemmEfficiency},
           {"gemm_half_dim", g.gemmHalfDim},
           {"flash_attention_efficiency", g.flashAttentionEfficiency},
           {"fp8_gemm_efficiency", g.fp8GemmEfficiency},
           {"bmm_efficiency", g.bmmEfficiency},
           {"mem_efficiency", g.memEfficiency},
           {"throughput_scale", g.throughputScale},
           {"reserved_gib", g.reservedBytes / GiB},
       }},
      {"intra_node",
       json::Object{
           {"kind", c.nvlink ? "nvlink" : "pcie"},
           {"bus_bandwidth_gb_s", c.intraBusBandwidth / GB},
           {"allreduce_bus_bandwidth_gb_s", c.intraAllReduceBusBandwidth / GB},
           {"step_latency_us", c.intraStepLatency * 1e6},
       }},
      {"network",
       json::Object{
           {"nics_per_node", c.nicsPerNode},
           {"nic_bandwidth_gb_s", c.nicBandwidth / GB},
           {"step_latency_us", c.interStepLatency * 1e6},
       }},
      {"collective_base_latency_us", c.collectiveBaseLatency * 1e6},
      {"host",
       json::Object{
           {"memory_gib", c.hostMemoryBytes / GiB},
           {"pcie_gb_s", c.pcieBandwidth / GB},
           {"cpu_adam_params_per_s", c.cpuAdamParamsPerS},
       }},
  };
}

namespace {
/// Reads the schema back, checking every field's type and range (fields
/// beyond it are refused where the file is read).
bool fromJSON(const json::Object &o, ClusterSpec &c, std::string &error, const std::string &where) {
  Fields r(o, "", error, where);
  if (const json::Value *n = o.get("name"))
    if (std::optional<llvm::StringRef> s = n->getAsString())
      c.name = s->str();
  bool ok = r.count("gpus_per_node", c.gpusPerNode) && r.count("nodes", c.numNodes) &&
            r.positive("collective_base_latency_us", c.collectiveBaseLatency, 1e-6, true);
  if (!ok)
    return false;
  const json::Object *g = r.object("gpu");
  const json::Object *in = g ? r.object("intra_node") : nullptr;
  const json::Object *net = in ? r.object("network") : nullptr;
  const json::Object *host = net ? r.object("host") : nullptr;
  if (!g || !in || !net || !host)
    return false;
  if (const json::Value *n = g->get("name"))
    if (std::optional<llvm::StringRef> s = n->getAsString())
      c.gpu.name = s->str();
  GpuSpec &gpu = c.gpu;
  Fields gf(*g, "gpu.", error, where);
  ok = gf.positive("bf16_tflops", gpu.bf16Flops, TFLOPS) &&
       gf.positive("fp8_tflops", gpu.fp8Flops, TFLOPS, true) &&
       gf.positive("fp32_tflops", gpu.fp32Flops, TFLOPS) &&
       gf.positive("hbm_gib", gpu.hbmBytes, GiB) &&
       gf.positive("hbm_tb_s", gpu.hbmBandwidth, 1e12) &&
       gf.positive("gemm_efficiency", gpu.gemmEfficiency) &&
       gf.positive("gemm_half_dim", gpu.gemmHalfDim, 1, true) &&
       gf.positive("flash_attention_efficiency", gpu.flashAttentionEfficiency) &&
       gf.positive("fp8_gemm_efficiency", gpu.fp8GemmEfficiency) &&
       gf.positive("bmm_efficiency", gpu.bmmEfficiency) &&
       gf.positive("mem_efficiency", gpu.memEfficiency) &&
       gf.positive("throughput_scale", gpu.throughputScale) &&
       gf.positive("reserved_gib", gpu.reservedBytes, GiB, true);
  if (!ok)
    return false;
  for (auto [key, v] : {std::pair<const char *, double>{"gemm_efficiency", gpu.gemmEfficiency},
                        {"flash_attention_efficiency", gpu.flashAttentionEfficiency},
                        {"fp8_gemm_efficiency", gpu.fp8GemmEfficiency},
                        {"throughput_scale", gpu.throughputScale},
                        {"bmm_efficiency", gpu.bmmEfficiency},
                        {"mem_efficiency", gpu.memEfficiency}})
    if (v > 1)
      return gf.fail(key, "is a fraction of peak and must be at most 1");
  Fields inf(*in, "intra_node.", error, where);
  const json::Value *kind = in->get("kind");
  std::optional<llvm::StringRef> k = kind ? kind->getAsString() : std::nullopt;
  if (!k || (*k != "nvlink" && *k != "pcie"))
    return inf.fail("kind", "must be \"nvlink\" or \"pcie\"");
  c.nvlink = *k == "nvlink";
  Fields nf(*net, "network.", error, where), hf(*host, "host.", error, where);
  return inf.positive("bus_bandwidth_gb_s", c.intraBusBandwidth, GB) &&
         inf.positive("allreduce_bus_bandwidth_gb_s", c.intraAllReduceBusBandwidth, GB, true) &&
         inf.positive("step_latency_us", c.intraStepLatency, 1e-6, true) &&
         nf.count("nics_per_node", c.nicsPerNode) &&
         nf.positive("nic_bandwidth_gb_s", c.nicBandwidth, GB) &&
         nf.positive("step_latency_us", c.interStepLatency, 1e-6, true) &&
         hf.positive("memory_gib", c.hostMemoryBytes, GiB) &&
         hf.positive("pcie_gb_s", c.pcieBandwidth, GB) &&
         hf.positive("cpu_adam_params_per_s", c.cpuAdamParamsPerS);
}

} // namespace

void llmopt::cost::mergeJSON(json::Object &dst, const json::Object &src) {
  for (const auto &kv : src) {
    json::Value *d = dst.get(kv.first);
    if (d && d->getAsObject() && kv.second.getAsObject())
      mergeJSON(*d->getAsObject(), *kv.second.getAsObject());
    else
      dst[kv.first] = kv.second;
  }
}

bool llmopt::cost::parseCluster(const std::string &spec, const std::string &fileContents,
                                const std::vector<std::pair<std::string, std::string>> &overrides,
                                int gpus, ClusterSpec &out, std::string &error) {
  error.clear();
  json::Value base = json::Object{};
  std::string where;
  if (fileContents.empty()) {
    ClusterSpec preset;
    if (!getClusterPreset(spec, preset)) {
      std::string names;
      for (const std::string &n : clusterPresetNames())
        names += (names.empty() ? "" : ", ") + n;
      error = "unknown cluster '" + spec + "': use a preset (" + names +
              ") or a cluster JSON file (schema in docs/cost-model.md)";
      return false;
    }
    base = toJSON(preset);
  } else {
    where = spec + ": ";
    if (std::string deep = jsonDepthError(fileContents, spec); !deep.empty()) {
      error = deep;
      return false;
    }
    llvm::Expected<json::Value> parsed = json::parse(fileContents);
    if (!parsed) {
      error = where + "malformed JSON: " + llvm::toString(parsed.takeError());
      return false;
    }
    const json::Object *obj = parsed->getAsObject();
    if (!obj) {
      error = where + "a cluster file must be a JSON object";
      return false;
    }
    // Every field must be one of the schema's: a typo would otherwise leave
    // the preset's value in place without a word.
    {
      ClusterSpec any;
      getClusterPreset("dgx-h100", any);
      json::Value schema = toJSON(any);
      std::function<bool(const json::Object &, const json::Object &, const std::string &)> known =
          [&](const json::Object &o, const json::Object &ref, const std::string &prefix) {
            for (const auto &kv : o) {
              std::string name = prefix + kv.first.str();
              // `preset`, and notes for readers (`_note`, `_source`).
              if ((prefix.empty() && kv.first == "preset") || kv.first.str().rfind('_', 0) == 0)
                continue;
              const json::Value *r = ref.get(kv.first);
              if (!r) {
                std::string fields;
                for (const auto &f : ref)
                  fields += (fields.empty() ? "" : ", ") + prefix + f.first.str();
                error = where + "field '" + name + "' is not a field of a cluster (" +
                        (prefix.empty() ? "top level: " : "") + fields + ")";
                return false;
              }
              if (r->getAsObject() && kv.second.getAsObject() &&
                  !known(*kv.second.getAsObject(), *r->getAsObject(), name + "."))
                return false;
            }
            return true;
          };
      if (!known(*obj, *schema.getAsObject(), ""))
        return false;
    }
    // A file may start from a preset and change some fields.
    json::Object merged;
    if (const json::Value *p = obj->get("preset")) {
      std::optional<llvm::StringRef> name = p->getAsString();
      ClusterSpec preset;
      if (!name || !getClusterPreset(name->str(), preset)) {
        error = where + "field 'preset' must name a preset (dgx-a100-40gb, "
                        "dgx-a100-80gb, dgx-h100, dgx-h200, pcie-8x-h100)";
        return false;
      }
      merged = std::move(*toJSON(preset).getAsObject());
    }
    mergeJSON(merged, *obj);
    merged.erase("preset");
    base = std::move(merged);
  }

  json::Object &root = *base.getAsObject();
  for (const auto &[path, value] : overrides) {
    // Dotted path into the schema; the value parsed as JSON (numbers, strings
    // without quotes are taken as strings).
    llvm::SmallVector<llvm::StringRef> parts;
    llvm::StringRef(path).split(parts, '.');
    json::Object *obj = &root;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      json::Value *v = obj->get(parts[i]);
      if (!v || !v->getAsObject()) {
        error = "cluster override '" + path + "': no object '" + parts[i].str() +
                "' in the cluster schema";
        return false;
      }
      obj = v->getAsObject();
    }
    if (!obj->get(parts.back())) {
      error = "cluster override '" + path + "': no field '" + parts.back().str() +
              "' in the cluster schema (see docs/cost-model.md)";
      return false;
    }
    if (std::string deep = jsonDepthError(value, "cluster override '" + path + "'");
        !deep.empty()) {
      error = deep;
      return false;
    }
    llvm::Expected<json::Value> v = json::parse(value);
    if (v)
      (*obj)[parts.back()] = std::move(*v);
    else {
      llvm::consumeError(v.takeError());
      (*obj)[parts.back()] = value;
    }
  }

  out = ClusterSpec();
  if (!fromJSON(root, out, error, where))
    return false;
  if (gpus > 0) {
    if (gpus < out.gpusPerNode) {
      out.gpusPerNode = gpus;
      out.numNodes = 1;
    } else if (gpus % out.gpusPerNode != 0) {
      error = llvm::formatv("gpus={0} is not a whole number of {1}-GPU nodes: use a "
                            "multiple of {1}",
                            gpus, out.gpusPerNode)
                  .str();
      return false;
    } else {
      out.numNodes = gpus / out.gpusPerNode;
    }
  }
  return true;
}
