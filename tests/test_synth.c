/* Synthetic models parse with our reader, hold the tensors each architecture
 * needs (counts worked out per formats.md 1.9) and the GPT-2 byte symbols
 * (known values from GPT-2's bytes_to_unicode: space -> U+0120 'Ġ',
 * newline -> U+010A 'Ċ', soft hyphen 0xAD -> U+0143 'Ń'). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "model.h"
#include "quant.h"
#include "synth.h"

static ckv_synth_opts small(const char *arch)
{
    ckv_synth_opts o;
    ckv_synth_defaults(&o);
    o.arch = arch;
    o.n_layer = 3;
    o.n_embd = 64;
    o.n_head = 4;
    o.n_head_kv = 2;
    o.n_ff = 96;
    o.n_vocab = 300;
    o.type = GGML_Q8_0;
    return o;
}

static void parse(const ckv_synth_opts *o, uint8_t **p, gguf_file *f)
{
    size_t n;
    ckv_error e = {0};
    cr_assert_eq(ckv_synth_build(o, p, &n, &e), CKV_OK, "%s", e.msg);
    cr_assert_eq(gguf_parse(f, *p, n, &e), CKV_OK, "%s", e.msg);
}

Test(synth, tensor_counts_per_arch)
{
    /* Per layer: 2 norms + 4 attention + 3 FFN = 9; qwen2 adds 3 biases,
     * qwen3 2 q/k norms; plus token_embd and output_norm (and output). */
    const struct { const char *arch; bool untied; uint64_t want; } cases[] = {
        {"llama", false, 3 * 9 + 2}, {"qwen2", false, 3 * 12 + 2},
        {"qwen3", false, 3 * 11 + 2}, {"llama", true, 3 * 9 + 3}};
    for (size_t k = 0; k < 4; k++) {
        ckv_synth_opts o = small(cases[k].arch);
        o.untied = cases[k].untied;
        uint8_t *p;
        gguf_file f;
        parse(&o, &p, &f);
        cr_assert_eq(f.n_tensors, cases[k].want, "%s: %llu tensors", cases[k].arch,
                     (unsigned long long)f.n_tensors);
        cr_assert_eq(gguf_find_tensor(&f, "output.weight") != NULL, cases[k].untied);
        const gguf_tensor *t = gguf_find_tensor(&f, "blk.2.attn_k.weight");
        cr_assert(t && t->ne[0] == 64 && t->ne[1] == 32 && t->type == GGML_Q8_0); /* 2 kv * 16 */
        t = gguf_find_tensor(&f, "blk.0.ffn_norm.weight");
        cr_assert(t && t->type == GGML_F32 && t->n_dims == 1);
        /* Every tensor dequantises; no value is exactly zero in F32 norms. */
        for (uint64_t i = 0; i < f.n_tensors; i++) {
            const gguf_tensor *ti = &f.tensors[i];
            float *y = malloc(ti->nelem * sizeof *y);
            ckv_error e = {0};
            cr_assert_eq(ckv_dequantize(ti->type, ti->data, y, ti->nelem, &e), CKV_OK, "%s", e.msg);
            if (ti->type == GGML_F32)
                for (uint64_t j = 0; j < ti->nelem; j++)
                    cr_assert(y[j] != 0.0f);
            free(y);
        }
        gguf_close(&f);
        free(p);
    }
}

Test(synth, qwen3_head_dim_keys)
{
    ckv_synth_opts o = small("qwen3");
    o.head_dim = 32; /* 4 heads * 32 = 128 != 64 */
    uint8_t *p;
    gguf_file f;
    parse(&o, &p, &f);
    int64_t v;
    ckv_error e = {0};
    cr_assert_eq(gguf_get_int(&f, "qwen3.attention.key_length", &v, &e), CKV_OK, "%s", e.msg);
    cr_assert_eq(v, 32);
    cr_assert_eq(gguf_get_int(&f, "qwen3.attention.value_length", &v, &e), CKV_OK);
    cr_assert_eq(gguf_find_tensor(&f, "blk.0.attn_q.weight")->ne[1], 128);
    cr_assert_eq(gguf_find_tensor(&f, "blk.0.attn_output.weight")->ne[0], 128);
    cr_assert_eq(gguf_find_tensor(&f, "blk.0.attn_q_norm.weight")->ne[0], 32);
    gguf_close(&f);
    free(p);
    o = small("llama"); /* head_dim = 64 / 4: no key_length */
    parse(&o, &p, &f);
    cr_assert_null(gguf_find(&f, "llama.attention.key_length"));
    gguf_close(&f);
    free(p);
}

Test(synth, tokenizer_layout)
{
    ckv_synth_opts o = small("llama");
    uint8_t *p;
    gguf_file f;
    parse(&o, &p, &f);
    gguf_str *tok;
    uint64_t n;
    int32_t *types;
    uint64_t nt;
    ckv_error e = {0};
    cr_assert_eq(gguf_get_str_array(&f, "tokenizer.ggml.tokens", &tok, &n, &e), CKV_OK);
    cr_assert_eq(gguf_get_i32_array(&f, "tokenizer.ggml.token_type", &types, &nt, &e), CKV_OK);
    cr_assert(n == 300 && nt == 300);
    cr_assert(gguf_str_eq(tok[1], "<|im_start|>") && types[1] == 3);
    cr_assert(gguf_str_eq(tok[2], "<|im_end|>") && types[2] == 3);
    cr_assert(gguf_str_eq(tok[3 + 'A'], "A") && types[3 + 'A'] == 1);
    cr_assert(gguf_str_eq(tok[3 + 0x20], "\xC4\xA0"));  /* U+0120 */
    cr_assert(gguf_str_eq(tok[3 + 0x0A], "\xC4\x8A"));  /* U+010A */
    cr_assert(gguf_str_eq(tok[3 + 0xAD], "\xC5\x83"));  /* U+0143 */
    cr_assert(gguf_str_eq(tok[3 + 0xFF], "\xC3\xBF"));  /* 'ÿ' maps to itself */
    cr_assert(gguf_str_eq(tok[299], "<|reserved_299|>") && types[299] == 3);
    int64_t id;
    cr_assert_eq(gguf_get_int(&f, "tokenizer.ggml.bos_token_id", &id, &e), CKV_OK);
    cr_assert_eq(id, 1);
    cr_assert_eq(gguf_get_int(&f, "tokenizer.ggml.eos_token_id", &id, &e), CKV_OK);
    cr_assert_eq(id, 2);
    free(tok);
    free(types);
    gguf_close(&f);
    free(p);
}

Test(synth, rejects_bad_shapes)
{
    ckv_error e = {0};
    uint8_t *p;
    size_t n;
    ckv_synth_opts o = small("llama");
    o.n_embd = 48; /* Q8_0 rows need multiples of 32 */
    o.n_head = 3;
    o.n_head_kv = 3;
    cr_assert_eq(ckv_synth_build(&o, &p, &n, &e), CKV_ERR_ARG);
    cr_assert(strstr(e.msg, "token_embd.weight") && strstr(e.msg, "block size 32"), "%s", e.msg);
    o = small("llama");
    o.n_head_kv = 3;
    cr_assert_eq(ckv_synth_build(&o, &p, &n, &e), CKV_ERR_ARG);
    cr_assert(strstr(e.msg, "kv-heads 3"), "%s", e.msg);
    o = small("gemma");
    cr_assert_eq(ckv_synth_build(&o, &p, &n, &e), CKV_ERR_ARG);
    o = small("llama");
    o.n_vocab = 100;
    cr_assert_eq(ckv_synth_build(&o, &p, &n, &e), CKV_ERR_ARG);
    cr_assert(strstr(e.msg, "vocab 100"), "%s", e.msg);
}

Test(model_path, resolution_order)
{
    setenv("CKV_MODEL", "/env/model.gguf", 1);
    cr_assert_str_eq(ckv_default_model_path("x.gguf"), "x.gguf");
    cr_assert_str_eq(ckv_default_model_path(NULL), "/env/model.gguf");
    unsetenv("CKV_MODEL");
    cr_assert_str_eq(ckv_default_model_path(NULL), "models/SmolLM2-135M-Instruct.Q4_1.gguf");
}
