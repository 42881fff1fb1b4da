/* Model shapes for the GPU benchmarks. References: the SmolLM2-135M preset
 * against the configuration read from the real GGUF file; parameter counts
 * against the published totals (safetensors metadata): Llama-3.1-8B
 * 8,030,261,248 and SmolLM2-135M 134,515,008, from which the embedding table
 * (untied in Llama: counted once as the output matrix) and the RMSNorm
 * weights (2 per layer + the final one) are taken away by hand. */
#include <criterion/criterion.h>
#include <string.h>

#include "gguf.h"
#include "model.h"
#include "model_path.h"
#include "model_presets.h"

Test(presets, smollm2_matches_the_real_gguf)
{
    ckv_error err = {0};
    gguf_file f;
    ckv_config real, p;
    cr_assert_eq(gguf_open(&f, test_model_path(), &err), CKV_OK, "%s", err.msg);
    cr_assert_eq(ckv_config_from_gguf(&real, &f, &err), CKV_OK, "%s", err.msg);
    gguf_close(&f);
    cr_assert_eq(ckv_model_preset("smollm2-135m", &p, &err), CKV_OK, "%s", err.msg);
    cr_expect_eq(p.arch, real.arch);
    cr_expect_eq(p.n_layer, real.n_layer);
    cr_expect_eq(p.n_embd, real.n_embd);
    cr_expect_eq(p.n_head, real.n_head);
    cr_expect_eq(p.n_head_kv, real.n_head_kv);
    cr_expect_eq(p.head_dim, real.head_dim);
    cr_expect_eq(p.n_ff, real.n_ff);
    cr_expect_eq(p.n_vocab, real.n_vocab);
    cr_expect_eq(p.n_ctx, real.n_ctx);
    cr_expect_eq(p.n_rot, real.n_rot);
    cr_expect_float_eq(p.rope_base, real.rope_base, 1e-3);
    cr_expect_float_eq(p.rms_eps, real.rms_eps, 1e-9);
    cr_expect_eq(p.rope_type, real.rope_type);
    cr_expect_eq(p.tied, real.tied);
}

Test(presets, matrix_params_match_published_totals)
{
    ckv_error err = {0};
    ckv_config c;
    cr_assert_eq(ckv_model_preset("llama3.1-8b", &c, &err), CKV_OK, "%s", err.msg);
    /* 8,030,261,248 - embedding 128256 * 4096 - norms (2 * 32 + 1) * 4096 */
    cr_expect_eq(ckv_config_matrix_params(&c), 7504658432ull);
    cr_assert_eq(ckv_model_preset("smollm2-135m", &c, &err), CKV_OK, "%s", err.msg);
    /* 134,515,008 - norms (2 * 30 + 1) * 576; the tied embedding is the output matrix */
    cr_expect_eq(ckv_config_matrix_params(&c), 134479872ull);
}

Test(presets, unknown_name_lists_the_known_ones)
{
    ckv_error err = {0};
    ckv_config c;
    cr_assert_eq(ckv_model_preset("llama-9000", &c, &err), CKV_ERR_ARG);
    cr_expect(strstr(err.msg, "llama-9000") && strstr(err.msg, "mistral-7b"), "%s", err.msg);
    const char *const *names = ckv_model_preset_names();
    int n = 0;
    while (names[n])
        cr_assert_eq(ckv_model_preset(names[n++], &c, &err), CKV_OK, "%s", err.msg);
    cr_expect_eq(n, 3);
}
