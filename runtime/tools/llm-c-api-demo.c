/*===- llm-c-api-demo.c - trains a one-rank plan through the C ABI --------===*
 *
 *   llm-c-api-demo PLAN_DIR SHARD.bin STEPS [CKPT_DIR]
 *
 * Plain C: proves llmopt_runtime.h is a C header and that the C interface
 * trains like llm-run (same batches: step k reads the global batch at token
 * k * G * S, as runtime/include/llmopt-runtime/data.h documents). Prints one
 * "step N loss L grad_norm G" line per step.
 *
 *===----------------------------------------------------------------------===*/

#include "llmopt-runtime/llmopt_runtime.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  char err[512];
  if (argc != 4 && argc != 5) {
    fprintf(stderr, "usage: llm-c-api-demo PLAN_DIR SHARD.bin STEPS [CKPT_DIR]\n");
    return 2;
  }
  /* llm-run's default seed, moved as llm-run's is by the test suite's
   * second-seed run (LLMOPT_TEST_SEED). */
  unsigned long long seed = 42;
  const char *env = getenv("LLMOPT_TEST_SEED");
  if (env) {
    char *end = NULL;
    errno = 0;
    seed = strtoull(env, &end, 10);
    if (!*env || *end || errno == ERANGE) {
      fprintf(stderr,
              "llm-c-api-demo: error: LLMOPT_TEST_SEED='%s' must be a non-negative integer\n", env);
      return 2;
    }
  }
  llmopt_trainer *t = llmopt_trainer_open(argv[1], seed, err, sizeof err);
  if (!t) {
    fprintf(stderr, "llm-c-api-demo: error: %s\n", err);
    return 1;
  }
  /* The shard: 256 int32 header (magic, version, count), then tokens. */
  FILE *f = fopen(argv[2], "rb");
  int32_t header[256];
  if (!f || fread(header, sizeof(int32_t), 256, f) != 256 || header[0] != 20240520 ||
      header[1] != 1) {
    fprintf(stderr, "llm-c-api-demo: error: %s: not a version-1 token shard\n", argv[2]);
    llmopt_trainer_close(t);
    return 1;
  }
  int64_t count = header[2];
  uint16_t *data = malloc((size_t)count * sizeof(uint16_t));
  if (!data || fread(data, sizeof(uint16_t), (size_t)count, f) != (size_t)count) {
    fprintf(stderr, "llm-c-api-demo: error: %s: truncated\n", argv[2]);
    llmopt_trainer_close(t);
    return 1;
  }
  fclose(f);
  int64_t micro = llmopt_trainer_micro_batches(t);
  int64_t per = llmopt_trainer_tokens_per_micro_batch(t);
  int64_t n = micro * per;
  int32_t *x = malloc((size_t)n * sizeof(int32_t)), *y = malloc((size_t)n * sizeof(int32_t));
  int steps = atoi(argv[3]);
  int64_t seq = llmopt_trainer_sequence_length(t), sequences = n / seq;
  for (int s = 0; s < steps; ++s) {
    for (int64_t j = 0; j < sequences; ++j)
      for (int64_t i = 0; i < seq; ++i) {
        int64_t at = ((int64_t)s * sequences * seq + j * seq + i) % count;
        x[j * seq + i] = data[at];
        y[j * seq + i] = data[(at + 1) % count];
      }
    float loss = 0, norm = 0;
    if (llmopt_trainer_step(t, x, y, &loss, &norm, err, sizeof err)) {
      fprintf(stderr, "llm-c-api-demo: error: %s\n", err);
      return 1;
    }
    printf("step %lld loss %.6f grad_norm %.6f\n", (long long)llmopt_trainer_steps(t), loss, norm);
  }
  free(x);
  free(y);
  free(data);
  /* With CKPT_DIR: resume from it if it holds a checkpoint is llm-run's job;
   * here the final state is saved there. */
  if (argc == 5 && llmopt_trainer_save(t, argv[4], err, sizeof err)) {
    fprintf(stderr, "llm-c-api-demo: error: %s\n", err);
    llmopt_trainer_close(t);
    return 1;
  }
  llmopt_trainer_close(t);
  return 0;
}
