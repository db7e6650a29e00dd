//===- TrainingStepGradientTest.cpp - generated backward vs finite differences
//
// Imports tiny models of each architecture in fp32, runs
// llm-build-training-step, interprets @train_step with the reference kernels,
// and checks every parameter's gradient (as llm.adamw receives it) against
// central differences of @forward's loss (Richardson-extrapolated). Also checks that @train_step's
// loss is @forward's and that AdamW moved the parameters.
//
//===----------------------------------------------------------------------===//

#include "llmopt/Dialect/LLM/IR/LLMOps.h"
#include "llmopt/Dialect/LLM/Transforms/Passes.h"
#include "llmopt/Import/HFConfig.h"
#include "llmopt/Reference/Interpreter.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "gtest/gtest.h"

#include <cmath>
#include <random>

using namespace mlir;
using namespace llmopt;
using namespace llmopt::llm;
using namespace llmopt::reference;

namespace {

struct Case {
  const char *name;
  const char *config;
};

// Small enough to difference every parameter in milliseconds; initialization
// large enough (std 0.5) that every parameter moves the loss measurably.
const Case kCases[] = {
    {"gpt2", R"({"model_type": "gpt2", "n_embd": 16, "n_layer": 2, "n_head": 4,
                 "n_positions": 8, "vocab_size": 11, "initializer_range": 0.5})"},
    {"llama", R"({"model_type": "llama", "hidden_size": 16, "intermediate_size": 24,
                  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                  "vocab_size": 11, "max_position_embeddings": 64, "initializer_range": 0.5,
                  "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                   "high_freq_factor": 4.0,
                                   "original_max_position_embeddings": 4}})"},
    {"mistral", R"({"model_type": "mistral", "hidden_size": 16, "intermediate_size": 24,
                    "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 1,
                    "vocab_size": 11, "max_position_embeddings": 64, "sliding_window": 3,
                    "initializer_range": 0.5})"},
    {"qwen2", R"({"model_type": "qwen2", "hidden_size": 16, "intermediate_size": 24,
                  "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
                  "vocab_size": 11, "max_position_embeddings": 64, "tie_word_embeddings": true,
                  "initializer_range": 0.5})"},
    {"mixtral", R"({"model_type": "mixtral", "hidden_size": 16, "intermediate_size": 24,
                    "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
                    "num_local_experts": 4, "num_experts_per_tok": 2, "vocab_size": 11,
                    "max_position_embeddings": 64, "initializer_range": 0.5})"},
};

class TrainingStepGradient : public ::testing::TestWithParam<Case> {};

TEST_P(TrainingStepGradient, MatchesFiniteDifferences) {
  MLIRContext ctx;
  ctx.loadDialect<llm::LLMDialect, func::FuncDialect, arith::ArithDialect>();
  HFImportOptions opts;
  opts.dtype = "f32";
  OwningOpRef<ModuleOp> module =
      importHFConfig(GetParam().config, std::string(GetParam().name) + ".json", &ctx, opts);
  ASSERT_TRUE(module);
  PassManager pm(&ctx);
  BuildTrainingStepOptions stepOpts;
  stepOpts.maxGradNorm = 0;
  pm.addPass(createBuildTrainingStep(stepOpts));
  ASSERT_TRUE(succeeded(pm.run(*module)));
  auto forward = module->lookupSymbol<func::FuncOp>("forward");
  auto step = module->lookupSymbol<func::FuncOp>("train_step");
  ASSERT_TRUE(forward && step);

  const int64_t batch = 2, seq = 6, vocab = 11;
  std::mt19937 gen(7);
  std::uniform_int_distribution<int32_t> tok(0, vocab - 1);
  std::vector<int32_t> tokens(batch * seq), labels(batch * seq);
  for (auto &t : tokens)
    t = tok(gen);
  for (auto &l : labels)
    l = tok(gen);
  labels[3] = -100; // an ignored position
  std::vector<Tensor> args = {Tensor::idsOf({batch, seq}, tokens),
                              Tensor::idsOf({batch, seq}, labels)};

  Interpreter in;
  in.initParams(forward, 42);
  auto lossOf = [&]() -> double {
    FailureOr<std::vector<Tensor>> r = in.run(forward, args);
    EXPECT_TRUE(succeeded(r)) << in.error;
    return r->front().data[0];
  };
  double loss0 = lossOf();

  Interpreter trainer = in;
  FailureOr<std::vector<Tensor>> out = trainer.run(step, args);
  ASSERT_TRUE(succeeded(out)) << trainer.error;
  EXPECT_NEAR(out->at(0).data[0], loss0, 1e-6) << "train_step's loss is forward's";
  double normSq = 0;

  int checked = 0;
  for (auto &entry : in.params) {
    std::string name = entry.getKey().str();
    ParamState &p = entry.getValue();
    ASSERT_TRUE(trainer.lastGrads.count(name)) << name << " got no update";
    const std::vector<float> &g = trainer.lastGrads[name];
    ASSERT_EQ(g.size(), p.value.size()) << name;
    for (float x : g)
      normSq += double(x) * x;
    EXPECT_NE(trainer.params[name].value, p.value) << name << " did not move";
    // Every element of small tensors, a spread of elements of large ones.
    size_t stride = std::max<size_t>(1, p.value.size() / 24);
    for (size_t i = 0; i < p.value.size(); i += stride) {
      // Richardson extrapolation of central differences at h and h/2:
      // fourth-order accurate, so curvature does not pass for an error.
      float saved = p.value[i];
      auto central = [&](float h) {
        p.value[i] = saved + h;
        double up = lossOf();
        p.value[i] = saved - h;
        double down = lossOf();
        p.value[i] = saved;
        return (up - down) / (2.0 * h);
      };
      double numeric = (4 * central(5e-3f) - central(1e-2f)) / 3;
      EXPECT_NEAR(g[i], numeric, 3e-4 + 2e-2 * std::abs(numeric))
          << GetParam().name << ": " << name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 100);
  EXPECT_NEAR(out->at(1).data[0], std::sqrt(normSq), 1e-3 * std::sqrt(normSq))
      << "grad_norm output";
}

INSTANTIATE_TEST_SUITE_P(Architectures, TrainingStepGradient, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case> &i) {
                           return std::string(i.param.name);
                         });

} // namespace
