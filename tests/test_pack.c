/* Task packs: write/read round trip of hand-made samples (UTF-8 text, a
 * prompt holding U+0000, empty lists, classes, flags), the tokenizer-hash
 * guard, tokenization with and without special tokens, and clear errors on
 * files that are not packs or whose counts do not add up. */
#include <criterion/criterion.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model_path.h"
#include "pack.h"

static char tmpdir[64];

static void setup(void)
{
    strcpy(tmpdir, "/tmp/ckv_pack_XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(pack, .init = setup, .fini = teardown);

static void make_pack(ckv_pack *p)
{
    static int32_t t0[] = {5, 6, 7, 8, 9}, t1[] = {42};
    static char *ans0[] = {"Paris", "the city of Paris"}, *cls1[] = {"yes", "no"};
    static ckv_pack_sample s[2] = {
        {.task = "qa_1", .metric = "string_match_part", .index = 0, .target_length = 4096,
         .max_new_tokens = 32, .length = 37,
         .prompt = "Context: caf\xc3\xa9\0.\nQuestion: where?", .prompt_len = 33,
         .answer_prefix = " Answer:", .context_chars = 16, .tokens = t0, .n_tokens = 5,
         .n_context_tokens = 3, .answers = ans0, .n_answers = 2},
        {.task = "trec", .metric = "classification_score", .index = 1, .max_new_tokens = 64,
         .length = 1, .prompt = "x", .answer_prefix = "", .context_chars = 1, .tokens = t1,
         .n_tokens = 1, .n_context_tokens = 1, .classes = cls1, .n_classes = 2,
         .parse_special = true, .first_line = true},
    };
    memset(p, 0, sizeof *p);
    p->model_path = "models/m.gguf";
    p->tokenizer_hash = 0x0123456789abcdefULL;
    p->samples = s;
    p->n_samples = 2;
}

static void path_of(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/%s", tmpdir, name);
}

Test(pack, round_trip)
{
    ckv_pack w, r;
    make_pack(&w);
    char path[128];
    path_of(path, sizeof path, "p.h5");
    ckv_error e = {0};
    cr_assert_eq(ckv_pack_write(&w, path, &e), CKV_OK, "%s", e.msg);
    cr_assert_eq(ckv_pack_read(&r, path, 0x0123456789abcdefULL, &e), CKV_OK, "%s", e.msg);
    cr_assert_str_eq(r.model_path, "models/m.gguf");
    cr_assert_eq(r.n_samples, 2);
    for (size_t i = 0; i < 2; i++) {
        const ckv_pack_sample *a = &w.samples[i], *b = &r.samples[i];
        cr_assert_str_eq(a->task, b->task);
        cr_assert_str_eq(a->metric, b->metric);
        size_t plen = a->prompt_len ? a->prompt_len : strlen(a->prompt);
        cr_assert_eq(b->prompt_len, plen);
        cr_assert_arr_eq(a->prompt, b->prompt, plen + 1);
        cr_assert_eq(a->parse_special, b->parse_special);
        cr_assert_eq(a->first_line, b->first_line);
        cr_assert_str_eq(a->answer_prefix, b->answer_prefix);
        cr_assert_eq(a->index, b->index);
        cr_assert_eq(a->target_length, b->target_length);
        cr_assert_eq(a->max_new_tokens, b->max_new_tokens);
        cr_assert_eq(a->length, b->length);
        cr_assert_eq(a->context_chars, b->context_chars);
        cr_assert_eq(a->n_tokens, b->n_tokens);
        cr_assert_eq(a->n_context_tokens, b->n_context_tokens);
        cr_assert_arr_eq(a->tokens, b->tokens, a->n_tokens * sizeof *a->tokens);
        cr_assert_eq(a->n_answers, b->n_answers);
        for (uint32_t j = 0; j < a->n_answers; j++)
            cr_assert_str_eq(a->answers[j], b->answers[j]);
        cr_assert_eq(a->n_classes, b->n_classes);
        for (uint32_t j = 0; j < a->n_classes; j++)
            cr_assert_str_eq(a->classes[j], b->classes[j]);
    }
    ckv_pack_free(&r);
    /* any tokenizer accepted with hash 0 */
    cr_assert_eq(ckv_pack_read(&r, path, 0, &e), CKV_OK, "%s", e.msg);
    ckv_pack_free(&r);
}

Test(pack, other_tokenizer_is_an_error)
{
    ckv_pack w, r;
    make_pack(&w);
    char path[128];
    path_of(path, sizeof path, "p.h5");
    ckv_error e = {0};
    cr_assert_eq(ckv_pack_write(&w, path, &e), CKV_OK, "%s", e.msg);
    cr_assert_eq(ckv_pack_read(&r, path, 0x1111, &e), CKV_ERR_ARG);
    cr_assert_not_null(strstr(e.msg, "0123456789abcdef"), "%s", e.msg);
    cr_assert_not_null(strstr(e.msg, "prepare the pack again"), "%s", e.msg);
    cr_assert_eq(r.n_samples, 0);
}

Test(pack, not_a_pack)
{
    char path[128];
    path_of(path, sizeof path, "junk.h5");
    FILE *fp = fopen(path, "w");
    fputs("not hdf5 at all", fp);
    fclose(fp);
    ckv_pack r;
    ckv_error e = {0};
    cr_assert_eq(ckv_pack_read(&r, path, 0, &e), CKV_ERR_IO);
    cr_assert_not_null(strstr(e.msg, "junk.h5"), "%s", e.msg);
    /* an HDF5 file without the pack attributes */
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    H5Fclose(f);
    cr_assert_eq(ckv_pack_read(&r, path, 0, &e), CKV_ERR_FORMAT);
    cr_assert_not_null(strstr(e.msg, "attribute format missing"), "%s", e.msg);
}

Test(pack, counts_beyond_the_data)
{
    ckv_pack w, r;
    make_pack(&w);
    char path[128];
    path_of(path, sizeof path, "p.h5");
    ckv_error e = {0};
    cr_assert_eq(ckv_pack_write(&w, path, &e), CKV_OK, "%s", e.msg);
    /* claim 6 tokens for a 6-token file's first sample: the second runs out */
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t ds = H5Dopen2(f, "samples/n_tokens", H5P_DEFAULT);
    uint32_t n[2] = {6, 1};
    cr_assert_geq(H5Dwrite(ds, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, n), 0);
    H5Dclose(ds);
    H5Fclose(f);
    cr_assert_eq(ckv_pack_read(&r, path, 0, &e), CKV_ERR_FORMAT);
    cr_assert_not_null(strstr(e.msg, "sample 1"), "%s", e.msg);
    /* a dataset with the wrong number of entries */
    f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    H5Ldelete(f, "samples/length", H5P_DEFAULT);
    hsize_t d[1] = {3};
    hid_t sp = H5Screate_simple(1, d, NULL);
    ds = H5Dcreate2(f, "samples/length", H5T_STD_U32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dclose(ds);
    H5Sclose(sp);
    H5Fclose(f);
    cr_assert_eq(ckv_pack_read(&r, path, 0, &e), CKV_ERR_FORMAT);
    cr_assert_not_null(strstr(e.msg, "dataset length"), "%s", e.msg);
}

/* SmolLM2's special tokens are ids 0-2 (<|endoftext|>, <|im_start|>,
 * <|im_end|>, as in its tokenizer_config.json). */
Test(pack, special_tokens_and_nul_bytes)
{
    gguf_file gf;
    ckv_tokenizer *tok = NULL;
    ckv_error e = {0};
    cr_assert_eq(gguf_open(&gf, test_model_path(), &e), CKV_OK, "%s", e.msg);
    cr_assert_eq(ckv_tokenizer_load(&tok, &gf, &e), CKV_OK, "%s", e.msg);
    ckv_pack p;
    cr_assert_eq(ckv_pack_init(&p, "m.gguf", tok, &e), CKV_OK, "%s", e.msg);
    ckv_pack_sample s = {.task = "t", .metric = "m", .prompt = "<|im_start|>user\nHi<|im_end|>\n",
                         .context_chars = 16, .parse_special = true};
    cr_assert_eq(ckv_pack_add(&p, tok, &s, &e), CKV_OK, "%s", e.msg);
    s.parse_special = false;
    cr_assert_eq(ckv_pack_add(&p, tok, &s, &e), CKV_OK, "%s", e.msg);
    const ckv_pack_sample *a = &p.samples[0], *b = &p.samples[1];
    cr_assert_eq(a->tokens[0], 1);
    cr_assert_eq(a->tokens[a->n_tokens - 2], 2);
    cr_assert_gt(b->n_tokens, a->n_tokens);
    for (uint32_t i = 0; i < b->n_tokens; i++)
        cr_assert_gt(b->tokens[i], 2, "plain text never yields a special id");
    /* the bytes after a U+0000 are tokenized too, and the split holds */
    ckv_pack_sample z = {.task = "t", .metric = "m", .prompt = "ab\0cd", .prompt_len = 5,
                         .context_chars = 3};
    cr_assert_eq(ckv_pack_add(&p, tok, &z, &e), CKV_OK, "%s", e.msg);
    const ckv_pack_sample *c = &p.samples[2];
    cr_assert_eq(c->prompt_len, 5);
    char *text = NULL;
    size_t n = 0;
    cr_assert_eq(ckv_detokenize(tok, c->tokens, c->n_tokens, &text, &n, &e), CKV_OK, "%s", e.msg);
    cr_assert_eq(n, 5);
    cr_assert_arr_eq(text, "ab\0cd", 5);
    free(text);
    cr_assert_eq(ckv_detokenize(tok, c->tokens, c->n_context_tokens, &text, &n, &e), CKV_OK);
    cr_assert_eq(n, 3);
    free(text);
    ckv_pack_free(&p);
    ckv_tokenizer_free(tok);
    gguf_close(&gf);
}
