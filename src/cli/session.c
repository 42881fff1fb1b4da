#include "session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckv_config.h"
#include "opts.h"
#if CKV_HAVE_CUDA
#include "cuda.h"
#endif

bool cli_device_parse(const char *cmd, const char *arg, cli_device *out)
{
    if (!strcmp(arg, "cpu"))
        *out = CLI_DEVICE_CPU;
    else if (!strcmp(arg, "cuda"))
        *out = CLI_DEVICE_CUDA;
    else if (!strcmp(arg, "auto"))
        *out = CLI_DEVICE_AUTO;
    else {
        cli_usage_error(cmd, "--device: '%s' is not cpu, cuda or auto", arg);
        return false;
    }
    return true;
}

/* Whether device 0 is usable; its name in s->device_name. */
static ckv_status probe_gpu(cli_session *s, ckv_error *err)
{
#if CKV_HAVE_CUDA
    int32_t n = 0;
    ckv_cuda_device d;
    ckv_status st = ckv_cuda_device_count(&n, err);
    if (!st)
        st = ckv_cuda_device_query(0, &d, err);
    if (!st)
        snprintf(s->device_name, sizeof s->device_name, "%s", d.name);
    else
        ckv_error_prefix(err, "no usable GPU");
    return st;
#else
    (void)s;
    return ckv_errorf(err, CKV_ERR_DEVICE, "--device cuda: ckv was built without CUDA "
                      "(configure with -Dcuda=enabled)");
#endif
}

int cli_session_open_on(cli_session *s, const char *cmd, const char *model_path, int threads,
                        cli_device device)
{
    memset(s, 0, sizeof *s);
    ckv_error err = {0};
    if (device != CLI_DEVICE_CPU) {
        ckv_status st = probe_gpu(s, &err);
        if (st && device == CLI_DEVICE_CUDA)
            return cli_fail(cmd, &err);
        if (st)
            fprintf(stderr, "ckv %s: --device auto: %s; running on the CPU\n", cmd, err.msg);
        device = st ? CLI_DEVICE_CPU : CLI_DEVICE_CUDA;
    }
    if (device == CLI_DEVICE_CPU)
        snprintf(s->device_name, sizeof s->device_name, "cpu");
    const char *path = ckv_default_model_path(model_path);
    if (ckv_model_load(&s->model, path, &err))
        return cli_fail(cmd, &err);
    ckv_status st = ckv_tokenizer_load(&s->tok, &s->model.gguf, &err);
#if CKV_HAVE_CUDA
    if (!st && device == CLI_DEVICE_CUDA)
        st = ckv_gpu_create(&s->gpu, &s->model, 0, 512, &err);
#endif
    if (!st && device == CLI_DEVICE_CPU)
        st = ckv_cpu_create(&s->cpu, &s->model, 256, threads, &err);
    if (st) {
        ckv_error_prefix(&err, "%s", path);
        cli_session_close(s);
        return cli_fail(cmd, &err);
    }
    return CLI_OK;
}

bool cli_kv_dtype_parse(const char *cmd, const char *arg, ckv_kv_dtype *out)
{
    if (ckv_kv_dtype_parse(arg, out))
        return true;
    cli_usage_error(cmd, "--kv-dtype: '%s' is not f32 or bf16", arg);
    return false;
}

int cli_session_open(cli_session *s, const char *cmd, const char *model_path, int threads)
{
    return cli_session_open_on(s, cmd, model_path, threads, CLI_DEVICE_CPU);
}

ckv_status cli_seq_init(const cli_session *s, cli_seq *q, int32_t capacity, bool track_score,
                        ckv_error *err)
{
    memset(q, 0, sizeof *q);
    q->track_score = track_score;
    const ckv_config *c = &s->model.cfg;
#if CKV_HAVE_CUDA
    if (s->gpu)
        return ckv_gpu_cache_create(&q->gpu, s->gpu, capacity, track_score, s->kv_dtype, err);
#endif
    ckv_status st = ckv_cache_init(&q->cpu, c->n_layer, c->n_head_kv, c->head_dim, capacity,
                                   track_score, err);
    q->cpu.dtype = s->kv_dtype;
    return st;
}

void cli_seq_free(cli_seq *q)
{
#if CKV_HAVE_CUDA
    ckv_gpu_cache_free(q->gpu);
#endif
    ckv_cache_free(&q->cpu);
    memset(q, 0, sizeof *q);
}

ckv_status cli_seq_forward(cli_session *s, cli_seq *q, const int32_t *ids, int32_t n,
                           const ckv_forward_opts *opts, float *logits, ckv_error *err)
{
#if CKV_HAVE_CUDA
    if (s->gpu)
        return ckv_gpu_forward(s->gpu, q->gpu, ids, n, opts, logits, err);
#endif
    return ckv_cpu_forward(s->cpu, &q->cpu, ids, n, opts, logits, err);
}

ckv_status cli_seq_cache(const cli_session *s, cli_seq *q, const ckv_cache **out,
                         ckv_error *err)
{
#if CKV_HAVE_CUDA
    if (s->gpu) {
        const ckv_config *c = &s->model.cfg;
        ckv_status st = CKV_OK;
        if (!q->cpu.len)
            st = ckv_cache_init(&q->cpu, c->n_layer, c->n_head_kv, c->head_dim,
                                ckv_gpu_cache_capacity(q->gpu), q->track_score, err);
        if (!st)
            st = ckv_gpu_cache_download(q->gpu, &q->cpu, err);
        if (st)
            return st;
    }
#else
    (void)s;
    (void)err;
#endif
    *out = &q->cpu;
    return CKV_OK;
}

void cli_seq_report(const cli_session *s, const cli_seq *q, const char *cmd)
{
#if CKV_HAVE_CUDA
    if (s->gpu) {
        fprintf(stderr, "ckv %s: device %s: decoder %.1f MiB, cache %.1f MiB of device memory\n",
                cmd, s->device_name, (double)ckv_gpu_bytes(s->gpu) / (1 << 20),
                (double)ckv_gpu_cache_bytes(q->gpu) / (1 << 20));
        return;
    }
#endif
    (void)q;
    fprintf(stderr, "ckv %s: device %s\n", cmd, s->device_name);
}

void cli_session_close(cli_session *s)
{
#if CKV_HAVE_CUDA
    ckv_gpu_free(s->gpu);
#endif
    ckv_cpu_free(s->cpu);
    if (s->tok)
        ckv_tokenizer_free(s->tok);
    if (s->model.path)
        ckv_model_free(&s->model);
    memset(s, 0, sizeof *s);
}

int cli_prompt_ids(cli_session *s, const char *cmd, const char *prompt, bool chat,
                   const char *system, int32_t **ids, size_t *n)
{
    ckv_error err = {0};
    char *rendered = NULL;
    if (chat && ckv_chat_render(s->tok, system, prompt, &rendered, &err))
        return cli_fail(cmd, &err);
    const char *text = rendered ? rendered : prompt;
    ckv_status st = ckv_tokenize(s->tok, text, strlen(text), true, true, ids, n, &err);
    free(rendered);
    if (st)
        return cli_fail(cmd, &err);
    if (*n == 0) {
        free(*ids);
        *ids = NULL;
        ckv_errorf(&err, CKV_ERR_ARG, "the prompt is empty after tokenization");
        return cli_fail(cmd, &err);
    }
    return CLI_OK;
}

void cli_print_escaped(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '\n')
            fputs("\\n", stdout);
        else if (ch == '\t')
            fputs("\\t", stdout);
        else if (ch == '\\')
            fputs("\\\\", stdout);
        else if (ch < 0x20 || ch == 0x7f)
            printf("\\x%02x", ch);
        else
            putchar(ch);
    }
}
