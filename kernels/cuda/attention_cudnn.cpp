//===- attention_cudnn.cpp - attention through cuDNN's fused SDPA ---------===//
//
// The cuDNN frontend's graph API (header-only, fetched by scripts/setup.sh):
// a graph of one sdpa (forward, with its softmax statistics) or
// sdpa_backward node over our layouts, described by strides: q is
// [b, s, h, d] in memory, i.e. logical (b, h, s, d) with strides
// (s h d, d, h d, 1); the statistics are (b, h, s, 1), contiguous, which is
// the log-sum-exp layout of the other attention kernels.
//
//===----------------------------------------------------------------------===//

#include "llmopt-kernels/cudnn_attention.h"
#include "llmopt-kernels/device_buffer.h"

#include <cudnn_frontend.h>

#include <map>
#include <tuple>

namespace llmopt::kernels::cuda {
namespace {

namespace fe = cudnn_frontend;
using Tensor = std::shared_ptr<fe::graph::Tensor_attributes>;

enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

struct Built {
  std::shared_ptr<fe::graph::Graph> graph;
  int64_t workspace = 0;
};

class Impl final : public CudnnAttention {
public:
  ~Impl() override {
    if (handle)
      cudnnDestroy(handle);
  }

  bool init(std::string &error) {
    if (cudnnStatus_t s = cudnnCreate(&handle); s != CUDNN_STATUS_SUCCESS) {
      error = std::string("cudnnCreate: ") + cudnnGetErrorString(s);
      return false;
    }
    return true;
  }

  bool forward(const bf16 *q, const bf16 *k, const bf16 *v, bf16 *out, float *lse,
               const AttentionDims &d, cudaStream_t stream, std::string &error) override {
    Built *b = get(d, false, error);
    if (!b)
      return false;
    std::unordered_map<int64_t, void *> pack = {{kQ, const_cast<bf16 *>(q)},
                                                {kK, const_cast<bf16 *>(k)},
                                                {kV, const_cast<bf16 *>(v)},
                                                {kO, out},
                                                {kStats, lse}};
    return run(*b, pack, stream, error);
  }

  bool backward(const bf16 *dout, const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *out,
                const float *lse, bf16 *dq, bf16 *dk, bf16 *dv, const AttentionDims &d,
                cudaStream_t stream, std::string &error) override {
    Built *b = get(d, true, error);
    if (!b)
      return false;
    std::unordered_map<int64_t, void *> pack = {{kQ, const_cast<bf16 *>(q)},
                                                {kK, const_cast<bf16 *>(k)},
                                                {kV, const_cast<bf16 *>(v)},
                                                {kO, const_cast<bf16 *>(out)},
                                                {kDO, const_cast<bf16 *>(dout)},
                                                {kStats, const_cast<float *>(lse)},
                                                {kDQ, dq},
                                                {kDK, dk},
                                                {kDV, dv}};
    return run(*b, pack, stream, error);
  }

private:
  bool run(Built &b, std::unordered_map<int64_t, void *> &pack, cudaStream_t stream,
           std::string &error) {
    if (!workspace.reserve(size_t(b.workspace))) {
      cudaGetLastError(); // not an error of the kernels that come next
      error = "out of GPU memory for cuDNN's attention workspace (" + std::to_string(b.workspace) +
              " bytes)";
      return false;
    }
    if (cudnnStatus_t s = cudnnSetStream(handle, stream); s != CUDNN_STATUS_SUCCESS) {
      error = std::string("cudnnSetStream: ") + cudnnGetErrorString(s);
      return false;
    }
    try {
      auto status = b.graph->execute(handle, pack, workspace.p);
      if (!status.is_good()) {
        error = "cuDNN attention: " + status.get_message();
        return false;
      }
    } catch (const std::exception &e) {
      error = std::string("cuDNN attention: ") + e.what();
      return false;
    }
    return true;
  }

  Built *get(const AttentionDims &d, bool backward, std::string &error) {
    if (!supports(d)) {
      error = "cuDNN attention takes head_dim a multiple of 8 up to 128 and no window";
      return nullptr;
    }
    auto key =
        std::make_tuple(d.batch, d.seq, d.heads, d.kvHeads, d.headDim, d.scale, d.causal, backward);
    if (auto it = graphs.find(key); it != graphs.end())
      return &it->second;
    // The frontend reports most failures as statuses, some by throwing.
    try {
      return build(d, backward, key, error);
    } catch (const std::exception &e) {
      error = std::string("cuDNN attention: ") + e.what();
      return nullptr;
    }
  }

  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, float, bool, bool>;
  Built *build(const AttentionDims &d, bool backward, const Key &key, std::string &error) {
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    int64_t b = d.batch, s = d.seq, h = d.heads, hk = d.kvHeads, hd = d.headDim;
    auto input = [&](const char *name, Uid uid, int64_t heads) {
      return g->tensor(fe::graph::Tensor_attributes()
                           .set_name(name)
                           .set_uid(uid)
                           .set_dim({b, heads, s, hd})
                           .set_stride({s * heads * hd, hd, heads * hd, 1}));
    };
    auto output = [&](const Tensor &t, Uid uid, int64_t heads) {
      t->set_output(true)
          .set_uid(uid)
          .set_dim({b, heads, s, hd})
          .set_stride({s * heads * hd, hd, heads * hd, 1});
    };
    Tensor q = input("Q", kQ, h), k = input("K", kK, hk), v = input("V", kV, hk);
    if (!backward) {
      auto options = fe::graph::SDPA_attributes()
                         .set_name("attention")
                         .set_generate_stats(true)
                         .set_attn_scale(d.scale);
      if (d.causal)
        options.set_causal_mask(true);
      auto [o, stats] = g->sdpa(q, k, v, options);
      output(o, kO, h);
      stats->set_output(true).set_uid(kStats).set_data_type(fe::DataType_t::FLOAT);
    } else {
      Tensor o = input("O", kO, h), dO = input("dO", kDO, h);
      Tensor stats = g->tensor(fe::graph::Tensor_attributes()
                                   .set_name("Stats")
                                   .set_uid(kStats)
                                   .set_dim({b, h, s, 1})
                                   .set_stride({h * s, s, 1, 1})
                                   .set_data_type(fe::DataType_t::FLOAT));
      auto options = fe::graph::SDPA_backward_attributes()
                         .set_name("attention_backward")
                         .set_attn_scale(d.scale)
                         .set_deterministic_algorithm(true);
      if (d.causal)
        options.set_causal_mask(true);
      auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, dO, stats, options);
      output(dq, kDQ, h);
      output(dk, kDK, hk);
      output(dv, kDV, hk);
    }
    Built built;
    built.graph = g;
    auto check = [&](fe::error_t status, const char *what) {
      if (status.is_good())
        return true;
      error = std::string("cuDNN attention (") + what + "): " + status.get_message();
      return false;
    };
    if (!check(g->validate(), "validate") ||
        !check(g->build_operation_graph(handle), "operation graph") ||
        !check(g->create_execution_plans({fe::HeurMode_t::A}), "execution plans") ||
        !check(g->check_support(handle), "support") || !check(g->build_plans(handle), "plans") ||
        !check(g->get_workspace_size(built.workspace), "workspace"))
      return nullptr;
    return &graphs.emplace(key, std::move(built)).first->second;
  }

  cudnnHandle_t handle = nullptr;
  DeviceBuffer workspace;
  std::map<Key, Built> graphs;
};

} // namespace

bool CudnnAttention::supports(const AttentionDims &d) {
  return d.headDim % 8 == 0 && d.headDim <= 128 && d.kvHeads > 0 && d.heads % d.kvHeads == 0 &&
         d.window == 0;
}

std::unique_ptr<CudnnAttention> CudnnAttention::create(std::string &error) {
  auto a = std::make_unique<Impl>();
  if (!a->init(error))
    return nullptr;
  return a;
}

} // namespace llmopt::kernels::cuda
