/*===- llmopt_runtime.h - the runtime's C ABI ------------------------*- C -*-===*
 *
 * A plain C interface to train a plan directory in-process (one rank): for
 * embedding the runtime in other programs or driving it from Python with
 * ctypes. Multi-rank plans run with `llm-run` under mpirun / srun.
 *
 * Every function that can fail returns 0 on success and writes a message
 * (naming the file or argument and the fix) into `err` (at most `err_len`
 * bytes, always terminated) on failure; nothing is partly done.
 *
 *===----------------------------------------------------------------------===*/

#ifndef LLMOPT_RUNTIME_C_H
#define LLMOPT_RUNTIME_C_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct llmopt_trainer llmopt_trainer;

/* Loads and validates PLAN_DIR (checksum, format, bounds) and initializes
 * the parameters from `seed` as llm-run does. The plan must be for one rank.
 * Returns NULL on failure. */
llmopt_trainer *llmopt_trainer_open(const char *plan_dir, uint64_t seed, char *err, size_t err_len);

/* Micro-batches per step, token ids per micro-batch (batch x sequence) and
 * the sequence length. */
int64_t llmopt_trainer_micro_batches(const llmopt_trainer *t);
int64_t llmopt_trainer_tokens_per_micro_batch(const llmopt_trainer *t);
int64_t llmopt_trainer_sequence_length(const llmopt_trainer *t);

/* One optimizer step on `micro_batches x tokens_per_micro_batch` token ids
 * and as many labels (the next tokens). Writes the step's mean loss and
 * gradient norm (before clipping). */
int llmopt_trainer_step(llmopt_trainer *t, const int32_t *tokens, const int32_t *labels,
                        float *loss, float *grad_norm, char *err, size_t err_len);

/* Steps taken (including those restored by a resume). */
int64_t llmopt_trainer_steps(const llmopt_trainer *t);

/* Atomic, checksummed checkpoint into DIR (llm-run's format), and resuming
 * from the newest one in DIR (of this plan, or resharded from another). A
 * resume refused before the state was touched (no or another model's
 * checkpoint, a checksum mismatch) leaves the trainer as it was; one that
 * fails after replacing part of the state leaves a trainer that refuses to
 * step or save (close it and open another). */
int llmopt_trainer_save(llmopt_trainer *t, const char *dir, char *err, size_t err_len);
int llmopt_trainer_resume(llmopt_trainer *t, const char *dir, char *err, size_t err_len);

void llmopt_trainer_close(llmopt_trainer *t);

#ifdef __cplusplus
}
#endif

#endif /* LLMOPT_RUNTIME_C_H */
