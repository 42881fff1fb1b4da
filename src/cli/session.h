/* Loading a model, its tokenizer and a decoder (CPU, or CUDA with --device)
 * for a command, with errors printed the same way everywhere. */
#ifndef CKV_CLI_SESSION_H
#define CKV_CLI_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cpu.h"
#include "model.h"
#include "tokenizer.h"

typedef enum { CLI_DEVICE_CPU = 0, CLI_DEVICE_CUDA, CLI_DEVICE_AUTO } cli_device;

typedef struct ckv_gpu ckv_gpu;
typedef struct ckv_gpu_cache ckv_gpu_cache;

typedef struct {
    ckv_model model;
    ckv_tokenizer *tok;
    ckv_cpu *cpu;   /* set on the CPU */
    ckv_gpu *gpu;   /* set on CUDA */
    char device_name[256];
    ckv_kv_dtype kv_dtype; /* of the caches cli_seq_init makes (fp32 unless set) */
} cli_session;

/* The documentation line of --device, for the commands' help. */
#define CLI_DEVICE_HELP \
    "      --device D         cpu (default), cuda (the first GPU) or auto (cuda when usable)\n"

/* Parses a --device value; prints a usage error and returns false if bad. */
bool cli_device_parse(const char *cmd, const char *arg, cli_device *out);

/* The documentation line of --kv-dtype, and its parser (as --device's). */
#define CLI_KV_DTYPE_HELP \
    "      --kv-dtype T       the KV cache's keys and values: f32 (default) or bf16\n"
bool cli_kv_dtype_parse(const char *cmd, const char *arg, ckv_kv_dtype *out);

/* Returns CLI_OK, or prints "ckv CMD: ..." and returns CLI_FAIL. The
 * decoder runs on the CPU. */
int cli_session_open(cli_session *s, const char *cmd, const char *model_path, int threads);
/* As cli_session_open on the given device; cuda fails with a clear message
 * when ckv was built without CUDA or no GPU is usable, auto falls back to
 * the CPU. */
int cli_session_open_on(cli_session *s, const char *cmd, const char *model_path, int threads,
                        cli_device device);
void cli_session_close(cli_session *s);

/* One sequence's KV cache on the session's device (cpu: the cache itself;
 * gpu: the GPU cache, and cpu a host copy made by cli_seq_cache). */
typedef struct {
    ckv_cache cpu;
    ckv_gpu_cache *gpu;
    bool track_score;
} cli_seq;

/* track_score: accumulate each entry's attention (H2O), as ckv_cache_init. */
ckv_status cli_seq_init(const cli_session *s, cli_seq *q, int32_t capacity, bool track_score,
                        ckv_error *err);
void cli_seq_free(cli_seq *q);
/* ckv_cpu_forward or ckv_gpu_forward, whichever device the session has. */
ckv_status cli_seq_forward(cli_session *s, cli_seq *q, const int32_t *ids, int32_t n,
                           const ckv_forward_opts *opts, float *logits, ckv_error *err);
/* The cache on the host: on the GPU, downloaded into q->cpu first. */
ckv_status cli_seq_cache(const cli_session *s, cli_seq *q, const ckv_cache **out,
                         ckv_error *err);
/* Prints "device: ..." with the memory the decoder and the sequence hold. */
void cli_seq_report(const cli_session *s, const cli_seq *q, const char *cmd);

/* Turns a prompt into ids: with chat, renders the model's chat format around
 * it first. Special-token strings in the text are parsed as special tokens. */
int cli_prompt_ids(cli_session *s, const char *cmd, const char *prompt, bool chat,
                   const char *system, int32_t **ids, size_t *n);

/* Prints bytes with C-style escapes for non-printable ones. */
void cli_print_escaped(const char *s, size_t n);

#endif
