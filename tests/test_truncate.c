/* LongBench middle truncation with the default model's tokenizer, against
 * tests/fixtures/longbench_truncation.jsonl: pred.py's rule run once outside
 * the project with Hugging Face `tokenizers` built from the same GGUF
 * (decode(first half) + decode(last half), skip_special_tokens=True),
 * recorded as the byte count and SHA-256 of the expected prompt (the
 * benchmark's text itself stays in the data directory). The cases cover English, Chinese cut inside a character (U+FFFD), a context
 * holding U+0000, an odd max length and a prompt that fits. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <nettle/sha2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "datadir.h"
#include "gguf.h"
#include "longbench.h"
#include "tokenizer.h"
#include "truncate.h"

static gguf_file model_file;
static ckv_tokenizer *tok;

static void open_model(void)
{
    const char *env = getenv("CKV_MODEL");
    const char *path = env && *env ? env : CKV_SOURCE_ROOT "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
    ckv_error err = {0};
    cr_assert_eq(gguf_open(&model_file, path, &err), CKV_OK, "%s", err.msg);
    cr_assert_eq(ckv_tokenizer_load(&tok, &model_file, &err), CKV_OK, "%s", err.msg);
}

static void close_model(void)
{
    ckv_tokenizer_free(tok);
    gguf_close(&model_file);
}

Test(truncate, matches_longbench_pred_py, .init = open_model, .fini = close_model)
{
    ckv_error err = {0};
    const char *env = getenv("CKV_DATA_DIR");
    const char *dir = ckv_data_dir(env && *env ? NULL : CKV_SOURCE_ROOT "/../shared/data");
    cr_assert_not_null(dir, "set CKV_DATA_DIR to the shared data");
    ckv_longbench_config cfg;
    cr_assert_eq(ckv_longbench_config_load(dir, &cfg, &err), CKV_OK, "%s", err.msg);
    FILE *fp = fopen(CKV_SOURCE_ROOT "/tests/fixtures/longbench_truncation.jsonl", "r");
    cr_assert_not_null(fp);
    char *line = NULL;
    size_t cap = 0, cases = 0, cut = 0;
    while (getline(&line, &cap, fp) > 0) {
        json_t *o = json_loads(line, JSON_ALLOW_NUL, NULL);
        cr_assert_not_null(o);
        char path[4300];
        snprintf(path, sizeof path, "%s/longbench/%s", dir,
                 json_string_value(json_object_get(o, "file")));
        size_t k = (size_t)json_integer_value(json_object_get(o, "record"));
        ckv_sample *s;
        size_t n;
        cr_assert_eq(ckv_longbench_load(&cfg, path, NULL, k + 1, &s, &n, &err), CKV_OK, "%s",
                     err.msg);
        size_t want_bytes = (size_t)json_integer_value(json_object_get(o, "bytes"));
        const char *want_sha = json_string_value(json_object_get(o, "sha256"));
        cr_assert(want_sha && strlen(want_sha) == 64, "%s: fixture lacks sha256", path);
        const char *question = s[k].prompt + s[k].context_len;
        size_t ql = s[k].prompt_len - s[k].context_len;
        char *q = malloc(ql + 1);
        memcpy(q, question, ql);
        bool truncated;
        cr_assert_eq(ckv_sample_truncate(tok, &s[k], (int32_t)json_integer_value(
                                                         json_object_get(o, "max_length")),
                                         &truncated, &err),
                     CKV_OK, "%s", err.msg);
        cr_expect_eq(s[k].prompt_len, want_bytes, "%s: %zu bytes, want %zu", path,
                     s[k].prompt_len, want_bytes);
        struct sha256_ctx h;
        uint8_t dig[SHA256_DIGEST_SIZE];
        char hex[2 * SHA256_DIGEST_SIZE + 1];
        sha256_init(&h);
        sha256_update(&h, s[k].prompt_len, (const uint8_t *)s[k].prompt);
        sha256_digest(&h, sizeof dig, dig);
        for (size_t b = 0; b < sizeof dig; b++)
            snprintf(hex + 2 * b, 3, "%02x", dig[b]);
        cr_expect_str_eq(hex, want_sha, "%s: truncated text differs", path);
        cr_expect_eq(truncated, json_integer_value(json_object_get(o, "n_tokens")) >
                                    json_integer_value(json_object_get(o, "max_length")));
        /* The short question survives at the end and stays the split. */
        cr_expect_eq(s[k].prompt_len - s[k].context_len, ql);
        cr_expect(!memcmp(s[k].prompt + s[k].context_len, q, ql));
        cut += truncated;
        free(q);
        ckv_samples_free(s, n);
        json_decref(o);
        cases++;
    }
    free(line);
    fclose(fp);
    cr_expect_eq(cases, 5);
    cr_expect_eq(cut, 4);
    ckv_longbench_config_free(&cfg);
}

Test(truncate, rejects_a_budget_without_halves, .init = open_model, .fini = close_model)
{
    char *out;
    size_t n;
    bool t;
    ckv_error err = {0};
    cr_expect_eq(ckv_truncate_middle(tok, "abc", 3, 1, &out, &n, &t, &err), CKV_ERR_ARG);
}
