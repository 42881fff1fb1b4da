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
    cr_assert(ckv_cpu_decode_batch(cpu, ptr, last, (int32_t)nb, false, logits, &err) == CKV_OK,
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
