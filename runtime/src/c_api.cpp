//===- c_api.cpp - the runtime's C ABI -------------------------------------===//

#include "llmopt-runtime/llmopt_runtime.h"

#include "llmopt-runtime/checkpoint.h"
#include "llmopt-runtime/executor.h"

#include <cstring>
#include <string>

using namespace llmopt::runtime;

struct llmopt_trainer {
  Plan plan;
  CpuExecutor exe;
  SingleRank comm;
  /// Set by a failed resume, which may have replaced part of the state.
  std::string broken;
};

static const char *kBroken = "a resume failed and left the trainer's state incomplete (";

static int fail(char *err, size_t len, const std::string &msg) {
  if (err && len) {
    size_t n = std::min(len - 1, msg.size());
    std::memcpy(err, msg.data(), n);
    err[n] = '\0';
  }
  return 1;
}

extern "C" {

llmopt_trainer *llmopt_trainer_open(const char *plan_dir, uint64_t seed, char *err,
                                    size_t err_len) {
  if (!plan_dir) {
    fail(err, err_len, "plan_dir is NULL");
    return nullptr;
  }
  auto *t = new llmopt_trainer();
  std::string error;
  if (!loadPlan(plan_dir, t->plan, error)) {
    fail(err, err_len, error);
    delete t;
    return nullptr;
  }
  if (t->plan.worldSize != 1) {
    fail(err, err_len,
         std::string(plan_dir) + ": the plan is for " + std::to_string(t->plan.worldSize) +
             " ranks; the C interface runs one rank (launch llm-run with mpirun -np " +
             std::to_string(t->plan.worldSize) + ")");
    delete t;
    return nullptr;
  }
  if (!t->exe.init(t->plan, 0, seed, error)) {
    fail(err, err_len, error);
    delete t;
    return nullptr;
  }
  return t;
}

int64_t llmopt_trainer_micro_batches(const llmopt_trainer *t) {
  return t ? t->plan.programs.front().numMicroBatches : 0;
}

int64_t llmopt_trainer_tokens_per_micro_batch(const llmopt_trainer *t) {
  return t && !t->plan.inputs.empty() ? t->plan.inputs[0].elements : 0;
}

int64_t llmopt_trainer_sequence_length(const llmopt_trainer *t) {
  return t && !t->plan.inputs.empty() && t->plan.inputs[0].shape.size() == 2
             ? t->plan.inputs[0].shape[1]
             : 0;
}

int llmopt_trainer_step(llmopt_trainer *t, const int32_t *tokens, const int32_t *labels,
                        float *loss, float *grad_norm, char *err, size_t err_len) {
  if (!t || !tokens || !labels)
    return fail(err, err_len, "trainer, tokens and labels must not be NULL");
  if (!t->broken.empty())
    return fail(err, err_len, kBroken + t->broken + "); create a new trainer");
  int64_t micro = llmopt_trainer_micro_batches(t), per = llmopt_trainer_tokens_per_micro_batch(t);
  std::vector<std::vector<int32_t>> x(static_cast<size_t>(micro)), y(static_cast<size_t>(micro));
  for (int64_t i = 0; i < micro; ++i) {
    x[size_t(i)].assign(tokens + i * per, tokens + (i + 1) * per);
    y[size_t(i)].assign(labels + i * per, labels + (i + 1) * per);
  }
  StepResult r;
  std::string error;
  if (!t->exe.step(x, y, t->comm, r, error))
    return fail(err, err_len, "step " + std::to_string(t->exe.steps + 1) + ": " + error);
  if (loss)
    *loss = r.loss;
  if (grad_norm)
    *grad_norm = r.gradNorm;
  return 0;
}

int64_t llmopt_trainer_steps(const llmopt_trainer *t) { return t ? t->exe.steps : 0; }

int llmopt_trainer_save(llmopt_trainer *t, const char *dir, char *err, size_t err_len) {
  if (!t || !dir)
    return fail(err, err_len, "trainer and dir must not be NULL");
  if (!t->broken.empty())
    return fail(err, err_len, kBroken + t->broken + "); create a new trainer");
  std::string error;
  if (!saveCheckpoint(dir, t->exe, t->plan, t->comm, error))
    return fail(err, err_len, error);
  return 0;
}

int llmopt_trainer_resume(llmopt_trainer *t, const char *dir, char *err, size_t err_len) {
  if (!t || !dir)
    return fail(err, err_len, "trainer and dir must not be NULL");
  std::string error;
  bool changed = false;
  if (!loadCheckpoint(dir, t->exe, t->plan, 0, 1, error, &changed)) {
    if (changed)
      t->broken = error;
    return fail(err, err_len, error);
  }
  return 0;
}

void llmopt_trainer_close(llmopt_trainer *t) { delete t; }

} // extern "C"
