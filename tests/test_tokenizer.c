/* Tokenizer tests. References:
 * - tests/fixtures/tokenizer_strings.txt: ids from Hugging Face `tokenizers`
 *   on the default model's own vocabulary and merges, written once by
 *   tests/reference/make_tokenizer_fixture.py (smollm, gpt2, qwen2 and
 *   llama-bpe pre-tokenizers);
 * - chat strings from transformers' apply_chat_template on the same GGUF;
 * - SentencePiece merges derived by hand on a vocabulary designed here. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_dir.h"
#include "gguf.h"
#include "synth_tokenizer.h"
#include "tokenizer.h"
#include "utf8.h"
#include "util.h"

#ifndef CKV_SOURCE_ROOT
#define CKV_SOURCE_ROOT "."
#endif

/* Bytes the SmolLM2 vocabulary has no token for (found with the gguf Python
 * reader and the GPT-2 byte map); Hugging Face drops them. */
static bool smollm_missing_byte(uint8_t b)
{
    static const uint8_t missing[] = {0x04, 0x06, 0x13, 0x14, 0x16, 0x1D, 0xC0, 0xC1, 0xF1, 0xF2};
    if (b >= 0xF5)
        return true;
    for (size_t i = 0; i < sizeof missing; i++)
        if (missing[i] == b)
            return true;
    return false;
}

static char *source_path(const char *rel)
{
    const char *root = getenv("CKV_SOURCE_ROOT");
    if (!root || !*root)
        root = CKV_SOURCE_ROOT;
    size_t n = strlen(root) + strlen(rel) + 2;
    char *p = malloc(n);
    cr_assert_not_null(p);
    snprintf(p, n, "%s/%s", root, rel);
    return p;
}

static gguf_file model_file;
static ckv_tokenizer *smollm;

static void open_model(void)
{
    const char *env = getenv("CKV_MODEL");
    char *path = env && *env ? strdup(env) : source_path("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    ckv_error err = {0};
    cr_assert_eq(gguf_open(&model_file, path, &err), CKV_OK, "%s", err.msg);
    cr_assert_eq(ckv_tokenizer_load(&smollm, &model_file, &err), CKV_OK, "%s", err.msg);
    free(path);
}

static void close_model(void)
{
    ckv_tokenizer_free(smollm);
    gguf_close(&model_file);
}

/* ---- helpers ---- */

static size_t parse_ids(const char *s, int32_t *out, size_t cap)
{
    size_t n = 0;
    if (!strcmp(s, "-"))
        return 0;
    for (char *end; *s; s = end) {
        long v = strtol(s, &end, 10);
        cr_assert(end != s, "bad id list '%s'", s);
        cr_assert(n < cap);
        out[n++] = (int32_t)v;
        while (*end == ' ')
            end++;
    }
    return n;
}

static size_t unhex(const char *h, char *out)
{
    size_t n = strlen(h) / 2;
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        cr_assert_eq(sscanf(h + 2 * i, "%2x", &v), 1);
        out[i] = (char)v;
    }
    return n;
}

static bool ids_equal(const int32_t *a, size_t na, const int32_t *b, size_t nb)
{
    return na == nb && (na == 0 || !memcmp(a, b, na * sizeof *a));
}

static void show_ids(char *buf, size_t cap, const int32_t *ids, size_t n)
{
    size_t k = 0;
    buf[0] = 0;
    for (size_t i = 0; i < n && k + 16 < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%d", i ? " " : "", ids[i]);
}

/* Encodes text and compares with the expected ids; returns true if equal. */
static bool check_encode(const ckv_tokenizer *t, const char *text, size_t len, bool special,
                         const int32_t *want, size_t n_want, const char *what, size_t line)
{
    int32_t *ids;
    size_t n;
    ckv_error err = {0};
    cr_assert_eq(ckv_tokenize(t, text, len, false, special, &ids, &n, &err), CKV_OK, "%s", err.msg);
    bool ok = ids_equal(ids, n, want, n_want);
    if (!ok) {
        char got[512], exp[512];
        show_ids(got, sizeof got, ids, n);
        show_ids(exp, sizeof exp, want, n_want);
        cr_log_error("fixture line %zu (%s): got [%s], want [%s]", line, what, got, exp);
    }
    free(ids);
    return ok;
}

static void check_decode(const ckv_tokenizer *t, const int32_t *ids, size_t n, const char *want,
                         size_t want_len, const char *what)
{
    char *text;
    size_t len;
    ckv_error err = {0};
    cr_assert_eq(ckv_detokenize(t, ids, n, &text, &len, &err), CKV_OK, "%s", err.msg);
    cr_expect(len == want_len && !memcmp(text, want, len), "%s: decoded %zu bytes, want %zu",
              what, len, want_len);
    cr_expect_eq(text[len], 0);
    free(text);
}

/* ---- a minimal GGUF v3 writer for in-memory test models ---- */

typedef struct {
    uint8_t *p;
    size_t n, cap;
    uint64_t n_kv;
} gbuf;

static void put(gbuf *b, const void *d, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = 2 * (b->n + n) + 1024;
        b->p = realloc(b->p, b->cap);
        cr_assert_not_null(b->p);
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}

static void put_u32(gbuf *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(gbuf *b, uint64_t v) { put(b, &v, 8); }

static void put_str(gbuf *b, const char *s, size_t n)
{
    put_u64(b, n);
    put(b, s, n);
}

static void key(gbuf *b, const char *k, uint32_t type)
{
    put_str(b, k, strlen(k));
    put_u32(b, type);
    b->n_kv++;
}

static void kv_str(gbuf *b, const char *k, const char *v)
{
    key(b, k, GGUF_STRING);
    put_str(b, v, strlen(v));
}

static void kv_u32(gbuf *b, const char *k, uint32_t v)
{
    key(b, k, GGUF_UINT32);
    put_u32(b, v);
}

static void kv_bool(gbuf *b, const char *k, bool v)
{
    key(b, k, GGUF_BOOL);
    uint8_t x = v;
    put(b, &x, 1);
}

static void kv_array(gbuf *b, const char *k, uint32_t type, uint64_t n)
{
    key(b, k, GGUF_ARRAY);
    put_u32(b, type);
    put_u64(b, n);
}

static void kv_strs(gbuf *b, const char *k, const gguf_str *s, uint64_t n)
{
    kv_array(b, k, GGUF_STRING, n);
    for (uint64_t i = 0; i < n; i++)
        put_str(b, s[i].ptr, s[i].len);
}

/* Header + metadata; the caller frees the returned buffer. */
static uint8_t *finish(gbuf *body, size_t *size)
{
    gbuf g = {0};
    put_u32(&g, 0x46554747u);
    put_u32(&g, 3);
    put_u64(&g, 0);
    put_u64(&g, body->n_kv);
    put(&g, body->p, body->n);
    free(body->p);
    *size = g.n;
    return g.p;
}

/* ---- fixture vs Hugging Face ---- */

typedef struct {
    char *buf;
    char **lines;
    size_t n;
} fixture;

static fixture read_fixture(void)
{
    fixture fx = {0};
    char *path = source_path("tests/fixtures/tokenizer_strings.txt");
    size_t len;
    ckv_error err = {0};
    cr_assert_eq(ckv_read_file(path, &fx.buf, &len, &err), CKV_OK, "%s", err.msg);
    free(path);
    fx.lines = calloc(len + 1, sizeof *fx.lines);
    for (char *save = NULL, *l = strtok_r(fx.buf, "\n", &save); l; l = strtok_r(NULL, "\n", &save))
        if (l[0] != '#')
            fx.lines[fx.n++] = l;
    return fx;
}

/* Splits a fixture line into its 6 tab-separated fields (in place). */
static void fields(char *line, char *f[6])
{
    for (int i = 0; i < 6; i++) {
        f[i] = line;
        char *tab = strchr(line, '\t');
        cr_assert(tab || i == 5, "fixture line has %d fields", i + 1);
        if (tab) {
            *tab = 0;
            line = tab + 1;
        }
    }
}

enum { MAX_IDS = 4096, MAX_TEXT = 8192 };

Test(tokenizer, smollm_matches_hugging_face, .init = open_model, .fini = close_model)
{
    fixture fx = read_fixture();
    cr_assert_geq(fx.n, 200);
    static int32_t sp[MAX_IDS], ns[MAX_IDS];
    static char text[MAX_TEXT], kept[MAX_TEXT];
    size_t bad = 0;
    for (size_t i = 0; i < fx.n; i++) {
        char *f[6];
        fields(fx.lines[i], f);
        size_t len = unhex(f[0], text);
        size_t nsp = parse_ids(f[1], sp, MAX_IDS), nns = parse_ids(f[2], ns, MAX_IDS);
        bad += !check_encode(smollm, text, len, true, sp, nsp, "smollm, parse_special", i + 1);
        bad += !check_encode(smollm, text, len, false, ns, nns, "smollm, special as text", i + 1);
        size_t k = 0;
        for (size_t j = 0; j < len; j++)
            if (!smollm_missing_byte((uint8_t)text[j]))
                kept[k++] = text[j];
        check_decode(smollm, sp, nsp, kept, k, "decode(parse_special ids)");
        check_decode(smollm, ns, nns, kept, k, "decode(special-as-text ids)");
    }
    cr_expect_eq(bad, 0, "%zu of %zu encodings differ from Hugging Face", bad, 2 * fx.n);
    free(fx.lines);
    free(fx.buf);
}

/* The SmolLM2 vocabulary and merges under another tokenizer.ggml.pre. */
static ckv_tokenizer *with_pre(const char *pre, uint8_t **mem)
{
    ckv_error err = {0};
    gbuf b = {0};
    gguf_str *toks, *merges;
    int32_t *types;
    uint64_t nt, nm, nty;
    cr_assert_eq(gguf_get_str_array(&model_file, "tokenizer.ggml.tokens", &toks, &nt, &err), CKV_OK);
    cr_assert_eq(gguf_get_str_array(&model_file, "tokenizer.ggml.merges", &merges, &nm, &err), CKV_OK);
    cr_assert_eq(gguf_get_i32_array(&model_file, "tokenizer.ggml.token_type", &types, &nty, &err),
                 CKV_OK);
    kv_str(&b, "tokenizer.ggml.model", "gpt2");
    kv_str(&b, "tokenizer.ggml.pre", pre);
    kv_strs(&b, "tokenizer.ggml.tokens", toks, nt);
    kv_strs(&b, "tokenizer.ggml.merges", merges, nm);
    kv_array(&b, "tokenizer.ggml.token_type", GGUF_INT32, nty);
    put(&b, types, nty * sizeof *types);
    free(toks);
    free(merges);
    free(types);
    size_t size;
    *mem = finish(&b, &size);
    gguf_file f;
    ckv_tokenizer *t;
    cr_assert_eq(gguf_parse(&f, *mem, size, &err), CKV_OK, "%s", err.msg);
    cr_assert_eq(ckv_tokenizer_load(&t, &f, &err), CKV_OK, "%s", err.msg);
    gguf_close(&f);
    return t;
}

/* The hash covers the tokenizer only, not the rest of the file. */
Test(tokenizer, hash_depends_on_tokenizer_only, .init = open_model, .fini = close_model)
{
    uint8_t *mem;
    ckv_tokenizer *t = with_pre("smollm", &mem);
    cr_expect_eq(ckv_tokenizer_hash(t), ckv_tokenizer_hash(smollm));
    ckv_tokenizer_free(t);
    free(mem);
}

Test(tokenizer, other_pretokenizers_match_hugging_face, .init = open_model, .fini = close_model)
{
    static const char *pres[] = {"gpt2", "qwen2", "llama-bpe"};
    fixture fx = read_fixture();
    static int32_t want[MAX_IDS];
    static char text[MAX_TEXT];
    for (int p = 0; p < 3; p++) {
        uint8_t *mem;
        ckv_tokenizer *t = with_pre(pres[p], &mem);
        cr_expect_str_eq(ckv_tokenizer_pre(t), pres[p]);
        cr_expect_neq(ckv_tokenizer_hash(t), ckv_tokenizer_hash(smollm),
                      "the pre-tokenizer is part of the hash");
        size_t bad = 0;
        for (size_t i = 0; i < fx.n; i++) {
            char *f[6], *copy = strdup(fx.lines[i]);
            fields(copy, f);
            size_t len = unhex(f[0], text);
            size_t n = parse_ids(f[3 + p], want, MAX_IDS);
            bad += !check_encode(t, text, len, true, want, n, pres[p], i + 1);
            free(copy);
        }
        cr_expect_eq(bad, 0, "%s: %zu of %zu encodings differ from Hugging Face", pres[p], bad,
                     fx.n);
        ckv_tokenizer_free(t);
        free(mem);
    }
    free(fx.lines);
    free(fx.buf);
}

/* ---- any bytes round-trip ---- */

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)((rng >> 11) % n);
}

static size_t random_chunk(char *o)
{
    static const char *const bad[] = {
        "\x80", "\xBF", "\xC0\xAF", "\xC1\x81", "\xE0\x80\xAF", "\xF0\x80\x80\xAF", /* overlong */
        "\xE2\x82", "\xF0\x9F\x98", "\xC3", "\xE2",                               /* truncated */
        "\xED\xA0\x80", "\xED\xBF\xBF", "\xFF", "\xFE", "\xF5\x80\x80\x80",       /* never valid */
        "<|im_end|>", "<|im_start|>", "<|im_", "<|endoftext|>"};
    size_t n = 0;
    switch (rnd(9)) {
    case 0:
        for (uint32_t k = 1 + rnd(8); k--;)
            o[n++] = (char)('a' + rnd(26) - (rnd(4) ? 0 : 32));
        return n;
    case 1:
        for (uint32_t k = 1 + rnd(4); k--;)
            o[n++] = " \t\n\r"[rnd(4)];
        return n;
    case 2:
        for (uint32_t k = 1 + rnd(6); k--;)
            o[n++] = (char)('0' + rnd(10));
        return n;
    case 3: {
        static const uint32_t lo[] = {0x80, 0x800, 0xE000, 0x10000}, span[] = {0x780, 0xD000, 0x2000, 0x100000};
        int k = (int)rnd(4);
        return ckv_utf8_put(lo[k] + rnd(span[k]), o);
    }
    case 4:
        o[0] = 0;
        return 1;
    case 5:
        o[0] = (char)rnd(256);
        return 1;
    case 6:
        o[n++] = '\'';
        o[n++] = "stmdlrv"[rnd(7)];
        return n;
    default: {
        const char *s = bad[rnd(sizeof bad / sizeof bad[0])];
        memcpy(o, s, strlen(s));
        return strlen(s);
    }
    }
}

Test(tokenizer, any_bytes_round_trip, .init = open_model, .fini = close_model)
{
    static char text[4096], kept[4096];
    size_t total = 0;
    for (int iter = 0; iter < 3000; iter++) {
        size_t len = 0;
        for (uint32_t c = 1 + rnd(60); c--;)
            len += random_chunk(text + len);
        size_t k = 0;
        for (size_t j = 0; j < len; j++)
            if (!smollm_missing_byte((uint8_t)text[j]))
                kept[k++] = text[j];
        for (int special = 0; special < 2; special++) {
            int32_t *ids;
            size_t n;
            ckv_error err = {0};
            cr_assert_eq(ckv_tokenize(smollm, text, len, false, special, &ids, &n, &err), CKV_OK,
                         "%s", err.msg);
            char label[64];
            snprintf(label, sizeof label, "random string %d (parse_special %d)", iter, special);
            check_decode(smollm, ids, n, kept, k, label);
            free(ids);
        }
        total += len;
    }
    cr_expect_gt(total, 100000);
}

/* Invalid UTF-8 is split into single bytes: 0x80 is GPT-2's U+0122 'Ģ',
 * id 218 in Hugging Face's encoding of U+40000 (F1 80 80 80, F1 dropped);
 * 'a' = 81 and 'b' = 82 from its encoding of "a\x04b". */
Test(tokenizer, invalid_utf8_is_byte_tokens, .init = open_model, .fini = close_model)
{
    static const int32_t want[] = {81, 218, 82};
    cr_expect(check_encode(smollm, "a\x80" "b", 3, true, want, 3, "a 0x80 b", 0));
    static const int32_t want_ff[] = {81, 82};
    cr_expect(check_encode(smollm, "a\xFF" "b", 3, true, want_ff, 2, "a 0xFF b", 0));
    cr_expect(check_encode(smollm, "\xFF\xFE", 2, true, NULL, 0, "0xFF 0xFE", 0));
    int32_t *ids;
    size_t n;
    ckv_error err = {0};
    cr_assert_eq(ckv_tokenize(smollm, "\xED\xA0\x80", 3, false, true, &ids, &n, &err), CKV_OK);
    cr_expect_eq(n, 3, "a UTF-8-encoded surrogate is three single-byte pieces");
    free(ids);
}

Test(tokenizer, smollm_metadata, .init = open_model, .fini = close_model)
{
    cr_expect_str_eq(ckv_tokenizer_model(smollm), "gpt2");
    cr_expect_str_eq(ckv_tokenizer_pre(smollm), "smollm");
    cr_expect_eq(ckv_tokenizer_vocab(smollm), 49152);
    cr_expect_eq(ckv_token_bos(smollm), 1);
    cr_expect_eq(ckv_token_eos(smollm), 2);
    cr_expect(ckv_token_is_eog(smollm, 2), "<|im_end|> (eos) ends generation");
    cr_expect(ckv_token_is_eog(smollm, 0), "<|endoftext|> ends generation");
    cr_expect(!ckv_token_is_eog(smollm, 1));
    cr_expect(!ckv_token_is_eog(smollm, 81));
    cr_expect(!ckv_token_is_eog(smollm, -1));
    cr_expect(!ckv_token_is_eog(smollm, 49152));
    size_t len;
    const char *b = ckv_token_bytes(smollm, 1, &len);
    cr_expect(len == 12 && !memcmp(b, "<|im_start|>", 12));
    b = ckv_token_bytes(smollm, 216, &len); /* "Ġ" */
    cr_expect(len == 1 && b[0] == ' ');
    cr_expect_null(ckv_token_bytes(smollm, 49152, &len));
    /* tokenizer.ggml.add_bos_token is false: add_bos adds nothing. */
    int32_t *ids;
    size_t n;
    ckv_error err = {0};
    cr_assert_eq(ckv_tokenize(smollm, "Hi", 2, true, true, &ids, &n, &err), CKV_OK);
    cr_expect(n == 1 && ids[0] != 1);
    free(ids);
    int32_t bad_id = 49152;
    char *text;
    cr_expect_eq(ckv_detokenize(smollm, &bad_id, 1, &text, &len, &err), CKV_ERR_ARG);
}

/* Expected strings: transformers 5.0 apply_chat_template(...,
 * add_generation_prompt=True) with the GGUF's chat template. */
Test(tokenizer, smollm_chat_matches_transformers, .init = open_model, .fini = close_model)
{
    cr_expect_eq(ckv_tokenizer_chat_format(smollm), CKV_CHAT_CHATML);
    char *s;
    ckv_error err = {0};
    cr_assert_eq(ckv_chat_render(smollm, NULL, "What is the capital of France?", &s, &err), CKV_OK);
    cr_expect_str_eq(s, "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained "
                        "by Hugging Face<|im_end|>\n<|im_start|>user\nWhat is the capital of "
                        "France?<|im_end|>\n<|im_start|>assistant\n");
    free(s);
    cr_assert_eq(ckv_chat_render(smollm, "Be brief.", "Hi", &s, &err), CKV_OK);
    cr_expect_str_eq(s, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                        "<|im_start|>assistant\n");
    free(s);
}

/* ---- SentencePiece on a vocabulary designed for hand derivation ---- */

enum { SPM_UNK = 0, SPM_BOS = 1, SPM_EOS = 2, SPM_BYTE0 = 3 };
#define SP "\xE2\x96\x81"
static const struct {
    const char *text;
    float score;
    int32_t type;
} spm_pieces[] = {
    {SP, -10, 1},   {"h", -10, 1},     {"e", -10, 1},    {"l", -10, 1},      {"o", -10, 1},
    {"w", -10, 1},  {"r", -10, 1},     {"d", -10, 1},    {"ll", -1, 1},      {"he", -2, 1},
    {"hell", -0.5f, 1}, {"hello", -0.2f, 1}, {SP "w", -3, 1}, {"or", -4, 1}, {"ld", -5, 1},
    {"orld", -6, 1}, {"<s", -1, 1},    {"[x]", 0, 4},
};
/* Ids of the pieces above (after <unk>, <s>, </s> and, with byte tokens, 256 of those). */
static int32_t piece(int k, bool bytes)
{
    return 3 + (bytes ? 256 : 0) + k;
}
enum { P_SP, P_H, P_E, P_L, P_O, P_W, P_R, P_D, P_LL, P_HE, P_HELL, P_HELLO, P_SPW, P_OR, P_LD,
       P_ORLD, P_LT_S, P_X };

static uint8_t *spm_mem;
static gguf_file spm_file;

static ckv_tokenizer *spm_model(bool bytes, const char *chat_template)
{
    size_t np = sizeof spm_pieces / sizeof spm_pieces[0], n = 3 + (bytes ? 256 : 0) + np;
    gguf_str *toks = calloc(n, sizeof *toks);
    float *scores = calloc(n, sizeof *scores);
    int32_t *types = calloc(n, sizeof *types);
    static char byte_text[256][8];
    size_t k = 0;
    toks[k] = (gguf_str){"<unk>", 5}, types[k++] = 2;
    toks[k] = (gguf_str){"<s>", 3}, types[k++] = 3;
    toks[k] = (gguf_str){"</s>", 4}, types[k++] = 3;
    for (int b = 0; bytes && b < 256; b++) {
        snprintf(byte_text[b], sizeof byte_text[b], "<0x%02X>", b);
        toks[k] = (gguf_str){byte_text[b], 6}, types[k++] = 6;
    }
    for (size_t i = 0; i < np; i++) {
        toks[k] = (gguf_str){spm_pieces[i].text, strlen(spm_pieces[i].text)};
        scores[k] = spm_pieces[i].score;
        types[k++] = spm_pieces[i].type;
    }
    gbuf b = {0};
    kv_str(&b, "general.architecture", "llama");
    kv_str(&b, "tokenizer.ggml.model", "llama");
    kv_strs(&b, "tokenizer.ggml.tokens", toks, n);
    kv_array(&b, "tokenizer.ggml.scores", GGUF_FLOAT32, n);
    put(&b, scores, n * sizeof *scores);
    kv_array(&b, "tokenizer.ggml.token_type", GGUF_INT32, n);
    put(&b, types, n * sizeof *types);
    kv_u32(&b, "tokenizer.ggml.bos_token_id", SPM_BOS);
    kv_u32(&b, "tokenizer.ggml.eos_token_id", SPM_EOS);
    kv_u32(&b, "tokenizer.ggml.unknown_token_id", SPM_UNK);
    kv_bool(&b, "tokenizer.ggml.add_bos_token", true);
    if (chat_template)
        kv_str(&b, "tokenizer.chat_template", chat_template);
    free(toks);
    free(scores);
    free(types);
    size_t size;
    spm_mem = finish(&b, &size);
    ckv_error err = {0};
    ckv_tokenizer *t;
    cr_assert_eq(gguf_parse(&spm_file, spm_mem, size, &err), CKV_OK, "%s", err.msg);
    cr_assert_eq(ckv_tokenizer_load(&t, &spm_file, &err), CKV_OK, "%s", err.msg);
    return t;
}

static void spm_free(ckv_tokenizer *t)
{
    ckv_tokenizer_free(t);
    gguf_close(&spm_file);
    free(spm_mem);
}

static void spm_expect(const ckv_tokenizer *t, const char *text, bool special, bool bos,
                       const int32_t *want, size_t n_want)
{
    int32_t *ids;
    size_t n;
    ckv_error err = {0};
    cr_assert_eq(ckv_tokenize(t, text, strlen(text), bos, special, &ids, &n, &err), CKV_OK, "%s",
                 err.msg);
    char got[256], exp[256];
    show_ids(got, sizeof got, ids, n);
    show_ids(exp, sizeof exp, want, n_want);
    cr_expect(ids_equal(ids, n, want, n_want), "\"%s\": got [%s], want [%s]", text, got, exp);
    if (!bos)
        check_decode(t, ids, n, text, strlen(text), text);
    free(ids);
}

/* "hello world" -> "▁hello▁world": ll (-1), he (-2), hell (-0.5), hello
 * (-0.2), ▁w (-3), or (-4), ld (-5), orld (-6) merge in that order. */
Test(tokenizer, spm_merges_by_score)
{
    ckv_tokenizer *t = spm_model(true, "{{ bos_token + '[INST] ' + content + ' [/INST]' }}");
#define P(k) piece(k, true)
    cr_expect_str_eq(ckv_tokenizer_model(t), "llama");
    int32_t hw[] = {P(P_SP), P(P_HELLO), P(P_SPW), P(P_ORLD)};
    spm_expect(t, "hello world", true, false, hw, 4);
    /* Two equal-score pairs: the leftmost merges first. */
    int32_t lll[] = {P(P_SP), P(P_LL), P(P_L)};
    spm_expect(t, "lll", true, false, lll, 3);
    /* add_bos_token is true: BOS first. */
    int32_t bos[] = {SPM_BOS, P(P_SP), P(P_HELLO)};
    spm_expect(t, "hello", true, true, bos, 3);
    /* Byte fallback: é = C3 A9, and a byte that is not UTF-8. */
    int32_t e_acute[] = {P(P_SP), SPM_BYTE0 + 0xC3, SPM_BYTE0 + 0xA9};
    spm_expect(t, "\xC3\xA9", true, false, e_acute, 3);
    int32_t ff[] = {P(P_SP), SPM_BYTE0 + 0xFF, P(P_H)};
    spm_expect(t, "\xFFh", true, false, ff, 3);
    /* "<s" merges, but "<s>" is a control token and never formed from text. */
    int32_t lt_s[] = {P(P_SP), P(P_LT_S), SPM_BYTE0 + '>'};
    spm_expect(t, "<s>", false, false, lt_s, 3);
    /* With parse_special it is <s>, and the text after it gets a dummy space. */
    int32_t s_hello[] = {SPM_BOS, P(P_SP), P(P_HELLO)};
    spm_expect(t, "<s>hello", true, false, s_hello, 3);
    /* A user-defined piece matches even without parse_special. */
    int32_t ud[] = {P(P_SP), SPM_BYTE0 + 'a', P(P_X), P(P_SP), SPM_BYTE0 + 'b'};
    spm_expect(t, "a[x]b", false, false, ud, 5);
    cr_expect(ckv_token_is_eog(t, SPM_EOS));
    cr_expect(!ckv_token_is_eog(t, SPM_BOS));
    size_t len;
    const char *b = ckv_token_bytes(t, SPM_BYTE0 + 0x41, &len);
    cr_expect(len == 1 && b[0] == 'A');
    b = ckv_token_bytes(t, P(P_SPW), &len);
    cr_expect(len == 2 && !memcmp(b, " w", 2));
    cr_expect_eq(ckv_tokenizer_chat_format(t), CKV_CHAT_LLAMA2);
    char *s;
    ckv_error err = {0};
    cr_assert_eq(ckv_chat_render(t, "S", "U", &s, &err), CKV_OK);
    cr_expect_str_eq(s, "[INST] <<SYS>>\nS\n<</SYS>>\n\nU [/INST]");
    free(s);
#undef P
    spm_free(t);
}

Test(tokenizer, spm_without_byte_tokens_uses_unknown)
{
    ckv_tokenizer *t = spm_model(false, NULL);
    int32_t *ids;
    size_t n;
    ckv_error err = {0};
    cr_assert_eq(ckv_tokenize(t, "\xC3\xA9", 2, false, true, &ids, &n, &err), CKV_OK);
    cr_expect(n == 3 && ids[0] == piece(P_SP, false) && ids[1] == SPM_UNK && ids[2] == SPM_UNK);
    free(ids);
    spm_free(t);
}

/* ---- malformed metadata ---- */

static ckv_status load_kvs(void (*fill)(gbuf *), ckv_error *err)
{
    gbuf b = {0};
    fill(&b);
    size_t size;
    uint8_t *mem = finish(&b, &size);
    gguf_file f;
    cr_assert_eq(gguf_parse(&f, mem, size, err), CKV_OK, "%s", err->msg);
    ckv_tokenizer *t = NULL;
    ckv_status st = ckv_tokenizer_load(&t, &f, err);
    cr_expect_null(t);
    ckv_tokenizer_free(t);
    gguf_close(&f);
    free(mem);
    return st;
}

static const gguf_str two_tokens[] = {{"a", 1}, {"b", 1}};

static void fill_bert(gbuf *b)
{
    kv_str(b, "tokenizer.ggml.model", "bert");
    kv_strs(b, "tokenizer.ggml.tokens", two_tokens, 2);
}

static void fill_bad_pre(gbuf *b)
{
    kv_str(b, "tokenizer.ggml.model", "gpt2");
    kv_str(b, "tokenizer.ggml.pre", "deepseek-coder");
    kv_strs(b, "tokenizer.ggml.tokens", two_tokens, 2);
    kv_strs(b, "tokenizer.ggml.merges", two_tokens, 0);
}

static void fill_no_merges(gbuf *b)
{
    kv_str(b, "tokenizer.ggml.model", "gpt2");
    kv_strs(b, "tokenizer.ggml.tokens", two_tokens, 2);
}

static void fill_short_types(gbuf *b)
{
    kv_str(b, "tokenizer.ggml.model", "llama");
    kv_strs(b, "tokenizer.ggml.tokens", two_tokens, 2);
    kv_array(b, "tokenizer.ggml.token_type", GGUF_INT32, 1);
    put_u32(b, 1);
}

static void fill_bos_out_of_range(gbuf *b)
{
    kv_str(b, "tokenizer.ggml.model", "llama");
    kv_strs(b, "tokenizer.ggml.tokens", two_tokens, 2);
    kv_u32(b, "tokenizer.ggml.bos_token_id", 2);
}

static void fill_no_tokens(gbuf *b)
{
    kv_str(b, "tokenizer.ggml.model", "llama");
}

Test(tokenizer, malformed_metadata_is_an_error)
{
    ckv_error err = {0};
    cr_expect_eq(load_kvs(fill_bert, &err), CKV_ERR_UNSUPPORTED);
    cr_expect(strstr(err.msg, "bert"), "%s", err.msg);
    cr_expect_eq(load_kvs(fill_bad_pre, &err), CKV_ERR_UNSUPPORTED);
    cr_expect(strstr(err.msg, "deepseek-coder"), "%s", err.msg);
    cr_expect_eq(load_kvs(fill_no_merges, &err), CKV_ERR_FORMAT);
    cr_expect(strstr(err.msg, "tokenizer.ggml.merges"), "%s", err.msg);
    cr_expect_eq(load_kvs(fill_short_types, &err), CKV_ERR_FORMAT);
    cr_expect(strstr(err.msg, "token_type"), "%s", err.msg);
    cr_expect_eq(load_kvs(fill_bos_out_of_range, &err), CKV_ERR_FORMAT);
    cr_expect(strstr(err.msg, "bos_token_id"), "%s", err.msg);
    cr_expect_eq(load_kvs(fill_no_tokens, &err), CKV_ERR_FORMAT);
    cr_expect(strstr(err.msg, "tokenizer.ggml.tokens"), "%s", err.msg);
}

/* Chat formats from template markers. Expected strings follow the published
 * templates: Qwen2.5's (default system prompt inside a Jinja string with an
 * escaped newline) and Llama 3's (BOS left to ckv_tokenize). */
Test(tokenizer, chat_formats_from_templates)
{
    static const char qwen[] =
        "{%- if messages[0]['role'] == 'system' %}\n"
        "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n"
        "{%- else %}\n"
        "{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
        "assistant.<|im_end|>\\n' }}\n"
        "{%- endif %}";
    char *s;
    ckv_error err = {0};
    ckv_tokenizer *t = spm_model(true, qwen);
    cr_expect_eq(ckv_tokenizer_chat_format(t), CKV_CHAT_CHATML);
    cr_assert_eq(ckv_chat_render(t, NULL, "U", &s, &err), CKV_OK);
    cr_expect_str_eq(s, "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a "
                        "helpful assistant.<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
                        "<|im_start|>assistant\n");
    free(s);
    spm_free(t);

    t = spm_model(true, "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}");
    cr_expect_eq(ckv_tokenizer_chat_format(t), CKV_CHAT_LLAMA3);
    cr_assert_eq(ckv_chat_render(t, "S", "U", &s, &err), CKV_OK);
    cr_expect_str_eq(s, "<|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
                        "<|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|>"
                        "<|start_header_id|>assistant<|end_header_id|>\n\n");
    free(s);
    spm_free(t);

    /* No template and no <|im_start|> token: the text as is. */
    t = spm_model(true, NULL);
    cr_expect_eq(ckv_tokenizer_chat_format(t), CKV_CHAT_NONE);
    cr_assert_eq(ckv_chat_render(t, NULL, "U", &s, &err), CKV_OK);
    cr_expect_str_eq(s, "U");
    free(s);
    spm_free(t);
}

/* ---- ckv synth's tokenizer: no model file needed ---- */

/* Its layout (src/synth.c, checked by test_synth's tokenizer_layout):
 * 0-2 <|endoftext|> <|im_start|> <|im_end|>, 3 + b the token of byte b,
 * 259.. the ten merge results ("Ġa" is 262), 269-299 <|reserved_N|>. */
enum { SYN_IM_START = 1, SYN_IM_END = 2, SYN_BYTE0 = 3, SYN_SP_A = 262, SYN_VOCAB = SYNTH_TOKENIZER_VOCAB };

static uint8_t *synth_mem;
static gguf_file synth_gguf;
static ckv_tokenizer *synth;

static void open_synth(void)
{
    ckv_synth_opts o;
    synth_tokenizer_opts(&o);
    size_t len;
    ckv_error err = {0};
    cr_assert_eq(ckv_synth_build(&o, &synth_mem, &len, &err), CKV_OK, "%s", err.msg);
    cr_assert_eq(gguf_parse(&synth_gguf, synth_mem, len, &err), CKV_OK, "%s", err.msg);
    cr_assert_eq(ckv_tokenizer_load(&synth, &synth_gguf, &err), CKV_OK, "%s", err.msg);
}

static void close_synth(void)
{
    ckv_tokenizer_free(synth);
    gguf_close(&synth_gguf);
    free(synth_mem);
}

/* Encodes, compares with the expected ids (NULL: skip) and decodes back. */
static void synth_expect(const char *text, size_t len, bool special, const int32_t *want,
                         size_t n_want)
{
    int32_t *ids;
    size_t n;
    ckv_error err = {0};
    cr_assert_eq(ckv_tokenize(synth, text, len, false, special, &ids, &n, &err), CKV_OK, "%s",
                 err.msg);
    if (want)
        cr_expect(ids_equal(ids, n, want, n_want), "'%.40s': %zu ids, %zu expected", text, n,
                  n_want);
    char *back;
    size_t blen;
    cr_assert_eq(ckv_detokenize(synth, ids, n, &back, &blen, &err), CKV_OK, "%s", err.msg);
    cr_expect(blen == len && !memcmp(back, text, len), "'%.40s' does not round-trip", text);
    free(back);
    free(ids);
}

/* Byte tokens of text in which no merge applies. */
static size_t byte_ids(const char *text, int32_t *out)
{
    size_t n = strlen(text);
    for (size_t i = 0; i < n; i++)
        out[i] = SYN_BYTE0 + (uint8_t)text[i];
    return n;
}

/* Model output is decoded id by id; an id the model cannot have produced is
 * an error naming it, never a read outside the vocabulary. */
Test(tokenizer, synth_decode_rejects_ids_outside_vocabulary, .init = open_synth,
     .fini = close_synth)
{
    char *s;
    size_t len;
    ckv_error err = {0};
    int32_t ok[] = {SYN_BYTE0 + 'h', SYN_BYTE0 + 'i', SYN_IM_END};
    cr_assert_eq(ckv_detokenize(synth, ok, 3, &s, &len, &err), CKV_OK, "%s", err.msg);
    cr_expect(len == 12 && !strcmp(s, "hi<|im_end|>"), "'%s'", s);
    free(s);
    const struct {
        int32_t ids[2];
        int at; /* the bad one */
        const char *msg;
    } bad[] = {
        {{SYN_BYTE0 + 'h', SYN_VOCAB}, 1, "id 300 at position 1 is outside the vocabulary of 300"},
        {{-1, 0}, 0, "id -1 at position 0"},
        {{INT32_MIN, 0}, 0, "id -2147483648 at position 0"},
        {{0, INT32_MAX}, 1, "id 2147483647 at position 1"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        s = (char *)"untouched";
        cr_expect_eq(ckv_detokenize(synth, bad[i].ids, 2, &s, &len, &err), CKV_ERR_ARG);
        cr_expect_null(s);
        cr_expect(strstr(err.msg, bad[i].msg), "%s", err.msg);
        cr_expect_null(ckv_token_bytes(synth, bad[i].ids[bad[i].at], &len));
        cr_expect(!ckv_token_is_eog(synth, bad[i].ids[bad[i].at]));
    }
    cr_expect(ckv_token_is_eog(synth, SYN_IM_END));
}

/* Fragments of special tokens are plain text even with parse_special;
 * complete ones are their id only with it. No merge applies inside
 * "<|im_start|>" ("s t", "i m" are not merges). */
Test(tokenizer, synth_special_fragments_stay_text, .init = open_synth, .fini = close_synth)
{
    int32_t want[64];
    static const char *const fragments[] = {"<|im_start", "<|im_start|", "|im_start|>", "<|im_end",
                                            "<|", "<"};
    for (size_t i = 0; i < sizeof fragments / sizeof fragments[0]; i++) {
        size_t n = byte_ids(fragments[i], want);
        synth_expect(fragments[i], strlen(fragments[i]), true, want, n);
    }
    int32_t one[] = {SYN_IM_START};
    synth_expect("<|im_start|>", 12, true, one, 1);
    synth_expect("<|im_start|>", 12, false, want, byte_ids("<|im_start|>", want));
    /* Leftmost match first: the fragment before a complete token stays text. */
    const char *mixed = "<|im_sta<|im_start|><|im_end|>";
    size_t n = byte_ids("<|im_sta", want);
    want[n++] = SYN_IM_START;
    want[n++] = SYN_IM_END;
    synth_expect(mixed, strlen(mixed), true, want, n);
    int32_t reserved[] = {299};
    synth_expect("<|reserved_299|>", 16, true, reserved, 1);
}

/* Bytes outside well-formed UTF-8 (a lone 0xFF, an overlong C0 80, a
 * surrogate ED A0 80, a truncated F4 90) are each their byte token. */
Test(tokenizer, synth_invalid_utf8_is_byte_tokens, .init = open_synth, .fini = close_synth)
{
    static const char bad[] = "a\xFF\xC0\x80\xED\xA0\x80\xF4\x90";
    int32_t want[16];
    size_t n = byte_ids(bad, want);
    synth_expect(bad, sizeof bad - 1, false, want, n);
    synth_expect(bad, sizeof bad - 1, true, want, n);
    char all[512];
    for (int i = 0; i < 512; i++)
        all[i] = (char)(i < 256 ? i : 511 - i);
    synth_expect(all, sizeof all, true, NULL, 0);
}

/* A 1 MiB run (a model that repeats itself, a padded document): " a"
 * repeated is one "Ġa" per pair, 1 MiB of spaces one token per byte. */
Test(tokenizer, synth_huge_runs, .init = open_synth, .fini = close_synth)
{
    size_t len = (size_t)1 << 20;
    char *text = malloc(len);
    int32_t *want = malloc(len * sizeof *want);
    cr_assert(text && want);
    for (size_t i = 0; i < len; i++)
        text[i] = i % 2 ? 'a' : ' ';
    for (size_t i = 0; i < len / 2; i++)
        want[i] = SYN_SP_A;
    synth_expect(text, len, false, want, len / 2);
    memset(text, ' ', len);
    for (size_t i = 0; i < len; i++)
        want[i] = SYN_BYTE0 + ' ';
    synth_expect(text, len, true, want, len);
    free(want);
    free(text);
}

/* Every input in tests/fuzz/regressions/tokenizer/ (fuzz_tokenizer's
 * format: two control bytes, then the payload): the payload encodes and
 * decodes back with and without specials, alone and as a chat user
 * message, and read as int32 ids it decodes or is refused with a message. */
static void replay_one(const char *path, const char *name, void *ctx)
{
    (void)ctx;
    size_t size;
    char *data;
    ckv_error err = {0};
    cr_assert_eq(ckv_read_file(path, &data, &size, &err), CKV_OK, "%s", err.msg);
    cr_assert_geq(size, 2, "%s", name);
    const char *p = data + 2;
    size_t n = size - 2;
    synth_expect(p, n, false, NULL, 0);
    synth_expect(p, n, true, NULL, 0);
    char *user = ckv_strndup(p, n), *chat;
    cr_assert_eq(ckv_chat_render(synth, NULL, user, &chat, &err), CKV_OK, "%s", err.msg);
    synth_expect(chat, strlen(chat), true, NULL, 0);
    free(chat);
    free(user);
    int32_t *ids = malloc((n / 4 + 1) * sizeof *ids);
    cr_assert_not_null(ids);
    bool inside = true;
    for (size_t i = 0; i < n / 4; i++) {
        memcpy(&ids[i], p + 4 * i, 4); /* little-endian host, as the fuzzer reads them */
        inside &= ids[i] >= 0 && ids[i] < SYN_VOCAB;
    }
    char *out = NULL;
    size_t out_len;
    ckv_status st = ckv_detokenize(synth, ids, n / 4, &out, &out_len, &err);
    cr_expect(inside ? st == CKV_OK : st == CKV_ERR_ARG && err.msg[0], "%s: %d '%s'",
              name, st, err.msg);
    free(out);
    free(ids);
    free(data);
}

Test(tokenizer, fuzz_regressions_do_not_crash, .init = open_synth, .fini = close_synth)
{
    cr_assert_gt(fuzz_dir_each(CKV_SOURCE_ROOT "/tests/fuzz/regressions/tokenizer", replay_one,
                               NULL),
                 0);
}
