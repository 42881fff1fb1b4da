/* The CPU decoder against an independent implementation: next-token logits
 * of the default model from Hugging Face transformers (fp32, eager
 * attention) on the same GGUF, produced once by
 * tests/reference/make_logits_fixture.py. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "model.h"
#include "model_path.h"
#include "util.h"

typedef struct {
    uint32_t n;
    int32_t *ids;
    float *logits;
} prompt_ref;

static ckv_model model;
static prompt_ref refs[16];
static uint32_t n_refs, n_vocab;

static void setup(void)
{
    ckv_error err = {0};
    cr_assert(ckv_model_load(&model, test_model_path(), &err) == CKV_OK, "%s", err.msg);
    char *buf;
    size_t len;
    cr_assert(ckv_read_file(test_source_path("tests/fixtures/logits_smollm2.bin"), &buf, &len,
                            &err) == CKV_OK,
              "%s", err.msg);
    cr_assert(len >= 16 && !memcmp(buf, "CKVL", 4));
    uint32_t hdr[3];
    memcpy(hdr, buf + 4, sizeof hdr);
    n_refs = hdr[1];
    n_vocab = hdr[2];
    cr_assert(n_refs <= 16 && n_vocab == (uint32_t)model.cfg.n_vocab);
    size_t off = 16;
    for (uint32_t i = 0; i < n_refs; i++) {
        memcpy(&refs[i].n, buf + off, 4);
        off += 4;
        refs[i].ids = malloc(refs[i].n * sizeof(int32_t));
        refs[i].logits = malloc(n_vocab * sizeof(float));
        memcpy(refs[i].ids, buf + off, refs[i].n * sizeof(int32_t));
        off += refs[i].n * sizeof(int32_t);
        memcpy(refs[i].logits, buf + off, n_vocab * sizeof(float));
        off += n_vocab * sizeof(float);
        cr_assert(off <= len);
    }
    free(buf);
}

static void teardown(void)
{
    for (uint32_t i = 0; i < n_refs; i++) {
        free(refs[i].ids);
        free(refs[i].logits);
    }
    ckv_model_free(&model);
}

/* max |a - b| / max |b| over the vocabulary. */
static double rel_err(const float *a, const float *b, uint32_t n)
{
    double md = 0, mb = 0;
    for (uint32_t i = 0; i < n; i++) {
        md = fmax(md, fabs((double)a[i] - b[i]));
        mb = fmax(mb, fabs((double)b[i]));
    }
    return md / mb;
}

static void run(ckv_cpu *cpu, const prompt_ref *r, int32_t decode_from, float *logits)
{
    ckv_error err = {0};
    ckv_cache cache;
    cr_assert(ckv_cache_init(&cache, model.cfg.n_layer, model.cfg.n_head_kv, model.cfg.head_dim,
                             (int32_t)r->n, false, &err) == CKV_OK);
    /* Prefill the first decode_from tokens, then feed the rest one at a time. */
    cr_assert(ckv_cpu_forward(cpu, &cache, r->ids, decode_from, NULL, logits, &err) == CKV_OK,
              "%s", err.msg);
    for (uint32_t i = (uint32_t)decode_from; i < r->n; i++)
        cr_assert(ckv_cpu_forward(cpu, &cache, &r->ids[i], 1, NULL, logits, &err) == CKV_OK,
                  "%s", err.msg);
    cr_assert_eq(cache.n_pos, (int64_t)r->n);
    ckv_cache_free(&cache);
}

TestSuite(model, .init = setup, .fini = teardown, .timeout = 240);

Test(model, config_matches_smollm2)
{
    const ckv_config *c = &model.cfg;
    cr_assert_eq(c->arch, CKV_ARCH_LLAMA);
    cr_assert_eq(c->n_layer, 30);
    cr_assert_eq(c->n_embd, 576);
    cr_assert_eq(c->n_head, 9);
    cr_assert_eq(c->n_head_kv, 3);
    cr_assert_eq(c->head_dim, 64);
    cr_assert_eq(c->n_ff, 1536);
    cr_assert_eq(c->n_vocab, 49152);
    cr_assert_eq(c->n_ctx, 8192);
    cr_assert_float_eq(c->rope_base, 100000.0f, 1e-3);
    cr_assert_float_eq(c->rms_eps, 1e-5f, 1e-12);
    cr_assert_eq(c->rope_type, CKV_ROPE_NORM);
    cr_assert(c->tied);
}

Test(model, prefill_logits_match_transformers)
{
    ckv_error err = {0};
    ckv_cpu *cpu;
    cr_assert(ckv_cpu_create(&cpu, &model, 256, 0, &err) == CKV_OK);
    float *logits = malloc(n_vocab * sizeof(float));
    for (uint32_t i = 0; i < n_refs; i++) {
        run(cpu, &refs[i], (int32_t)refs[i].n, logits);
        double e = rel_err(logits, refs[i].logits, n_vocab);
        cr_log_info("prompt %u (%u tokens): relative error %.3g", i, refs[i].n, e);
        cr_expect(e < 1e-3, "prompt %u: relative logit error %g >= 1e-3", i, e);
    }
    free(logits);
    ckv_cpu_free(cpu);
}

/* Chunked prefill (batch 100, not a divisor of any prompt length) then token-by-token decode of the last 8 tokens
 * must reach the same
 * logits as the reference: exercises the causal mask across chunks. */
Test(model, chunked_prefill_and_decode_match_transformers)
{
    ckv_error err = {0};
    ckv_cpu *cpu;
    cr_assert(ckv_cpu_create(&cpu, &model, 100, 0, &err) == CKV_OK);
    float *logits = malloc(n_vocab * sizeof(float));
    for (uint32_t i = 0; i < n_refs; i++) {
        int32_t tail = refs[i].n > 8 ? 8 : (int32_t)refs[i].n - 1;
        run(cpu, &refs[i], (int32_t)refs[i].n - tail, logits);
        double e = rel_err(logits, refs[i].logits, n_vocab);
        cr_expect(e < 1e-3, "prompt %u: relative logit error %g >= 1e-3", i, e);
    }
    free(logits);
    ckv_cpu_free(cpu);
}

/* A batched decode step over sequences of different lengths: each short
 * prompt minus its last token is prefilled into its own cache, then all last
 * tokens go through one ckv_cpu_decode_batch call; every row must match that
 * prompt's reference logits. */
Test(model, batched_decode_matches_transformers)
{
    ckv_error err = {0};
    ckv_cpu *cpu;
    cr_assert(ckv_cpu_create(&cpu, &model, 64, 0, &err) == CKV_OK);
    ckv_cache caches[16];
    ckv_cache *ptr[16];
    int32_t last[16];
    uint32_t nb = 0;
    while (nb < n_refs && refs[nb].n < 64)
        nb++;
    cr_assert(nb >= 3, "the fixture needs short prompts of different lengths");
    for (uint32_t i = 0; i < nb; i++) {
        cr_assert(ckv_cache_init(&caches[i], model.cfg.n_layer, model.cfg.n_head_kv,
                                 model.cfg.head_dim, (int32_t)refs[i].n, false, &err) == CKV_OK);
        cr_assert(ckv_cpu_forward(cpu, &caches[i], refs[i].ids, (int32_t)refs[i].n - 1, NULL, NULL,
                                  &err) == CKV_OK,
                  "%s", err.msg);
        ptr[i] = &caches[i];
        last[i] = refs[i].ids[refs[i].n - 1];
    }
    float *logits = malloc((size_t)nb * n_vocab * sizeof(float));
    cr_assert(ckv_cpu_decode_batch(cpu, ptr, last, (int32_t)nb, false, logits, NULL, &err) == CKV_OK,
              "%s", err.msg);
    for (uint32_t i = 0; i < nb; i++) {
        double e = rel_err(logits + (size_t)i * n_vocab, refs[i].logits, n_vocab);
        cr_expect(e < 1e-3, "prompt %u: relative logit error %g >= 1e-3", i, e);
        cr_expect_eq(caches[i].n_pos, (int64_t)refs[i].n);
        ckv_cache_free(&caches[i]);
    }
    free(logits);
    ckv_cpu_free(cpu);
}

/* A batched step must give each row exactly what a single-sequence step
 * gives: ckv_matmul_nt computes every output element from its own row, so
 * batching changes no summation order. The single-sequence queries come from
 * the last-W capture (W = 1), which check_dump_kv.py compares with
 * transformers; the batch's per-row q_out must equal them bit for bit, and so
 * must the logits. */
Test(model, batched_decode_rows_equal_single_steps_with_queries)
{
    ckv_error err = {0};
    ckv_cpu *cpu;
    cr_assert(ckv_cpu_create(&cpu, &model, 64, 0, &err) == CKV_OK);
    enum { NB = 3 };
    cr_assert(n_refs >= NB);
    const ckv_config *c = &model.cfg;
    size_t qs = (size_t)c->n_layer * c->n_head * c->head_dim;
    ckv_cache batch[NB], single[NB];
    ckv_cache *ptr[NB];
    int32_t last[NB];
    for (int i = 0; i < NB; i++) {
        int32_t n = refs[i].n < 40 ? (int32_t)refs[i].n : 40;
        for (int k = 0; k < 2; k++) {
            ckv_cache *cc = k ? &single[i] : &batch[i];
            cr_assert(ckv_cache_init(cc, c->n_layer, c->n_head_kv, c->head_dim, n, false, &err) ==
                      CKV_OK);
            cr_assert(ckv_cpu_forward(cpu, cc, refs[i].ids, n - 1, NULL, NULL, &err) == CKV_OK,
                      "%s", err.msg);
        }
        ptr[i] = &batch[i];
        last[i] = refs[i].ids[n - 1];
    }
    float *logits = malloc((size_t)NB * n_vocab * sizeof(float));
    float *q = malloc(NB * qs * sizeof(float));
    float *l1 = malloc(n_vocab * sizeof(float)), *q1 = malloc(qs * sizeof(float));
    cr_assert(ckv_cpu_decode_batch(cpu, ptr, last, NB, false, logits, q, &err) == CKV_OK, "%s",
              err.msg);
    for (int i = 0; i < NB; i++) {
        ckv_forward_opts o = {.q_window = 1, .q_window_out = q1};
        cr_assert(ckv_cpu_forward(cpu, &single[i], &last[i], 1, &o, l1, &err) == CKV_OK, "%s",
                  err.msg);
        cr_expect(memcmp(l1, logits + (size_t)i * n_vocab, n_vocab * sizeof(float)) == 0,
                  "row %d: batched logits differ from a single step", i);
        cr_expect(memcmp(q1, q + i * qs, qs * sizeof(float)) == 0,
                  "row %d: batched queries differ from a single step", i);
        ckv_cache_free(&batch[i]);
        ckv_cache_free(&single[i]);
    }
    free(logits);
    free(q);
    free(l1);
    free(q1);
    ckv_cpu_free(cpu);
}
