/* Byte-level BPE (tokenizer.ggml.model = gpt2): the text is cut into pieces
 * by the pre-tokenizer regexes (formats.md 1.8), then the bytes of each
 * piece are merged pairwise, lowest merge rank first.
 *
 * Input that is not valid UTF-8 cannot go through the Unicode regexes: each
 * byte that does not start a well-formed sequence becomes a piece of its
 * own and is encoded as its byte token, so it round-trips like the rest.
 * Bytes whose token the vocabulary lacks (SmolLM2 has none for 0x04, 0x06,
 * 0x13, 0x14, 0x16, 0x1D, 0xC0, 0xC1, 0xF1, 0xF2 and 0xF5-0xFF) cannot be
 * represented at all and are dropped, as in Hugging Face tokenizers. */
#include "tokenizer_impl.h"

#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "heap.h"
#include "utf8.h"

/* Bytes that GPT-2 keeps as their own code point (printable Latin-1). */
static bool gpt2_printable(unsigned b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
}

uint32_t tok_gpt2_codepoint(uint8_t b)
{
    if (gpt2_printable(b))
        return b;
    uint32_t n = 0; /* rank of b among the non-printable bytes */
    for (unsigned i = 0; i < b; i++)
        n += !gpt2_printable(i);
    return 256 + n;
}

int tok_gpt2_byte(uint32_t cp)
{
    if (cp < 256)
        return gpt2_printable(cp) ? (int)cp : -1;
    for (unsigned b = 0, n = 0; b < 256; b++)
        if (!gpt2_printable(b) && 256 + n++ == cp)
            return (int)b;
    return -1;
}

#define GPT2_PATTERN \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define QWEN2_PATTERN(NUM)                                                                     \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|" NUM                            \
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* The regex stages of each supported tokenizer.ggml.pre. The GPT-2 pattern
 * ends in "|\s+" as in Hugging Face's ByteLevel; llama.cpp's copy omits it,
 * which splits the same way because unmatched text is kept as a piece. */
static const struct {
    const char *name;
    const char *stages[TOK_MAX_STAGES];
} pre_tokenizers[] = {
    {"default", {GPT2_PATTERN}},
    {"gpt2", {GPT2_PATTERN}},
    /* SmolLM2: Digits(individual_digits) then ByteLevel. */
    {"smollm", {"\\p{N}", GPT2_PATTERN}},
    {"qwen2", {QWEN2_PATTERN("\\p{N}")}},
    {"llama-bpe", {QWEN2_PATTERN("\\p{N}{1,3}")}},
};

ckv_status tok_bpe_init(ckv_tokenizer *t, const char *pre, ckv_error *err)
{
    size_t k = 0, n = sizeof pre_tokenizers / sizeof pre_tokenizers[0];
    while (k < n && strcmp(pre_tokenizers[k].name, pre))
        k++;
    if (k == n)
        return ckv_errorf(err, CKV_ERR_UNSUPPORTED,
                          "tokenizer.ggml.pre = \"%s\": supported are default, gpt2, smollm, "
                          "qwen2, llama-bpe", pre);
    for (int s = 0; s < TOK_MAX_STAGES && pre_tokenizers[k].stages[s]; s++) {
        int code;
        PCRE2_SIZE off;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)pre_tokenizers[k].stages[s], PCRE2_ZERO_TERMINATED,
                                       PCRE2_UTF | PCRE2_UCP, &code, &off, NULL);
        if (!re) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(code, msg, sizeof msg);
            return ckv_errorf(err, CKV_ERR_UNSUPPORTED, "pre-tokenizer %s: regex %d: %s at %zu",
                              pre, s, (const char *)msg, (size_t)off);
        }
        t->stage[s] = re;
        t->n_stages = s + 1;
        /* Without JIT support the interpreter gives the same matches. */
        t->stage_jit[s] = pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) == 0;
    }
    return CKV_OK;
}

void tok_bpe_free(ckv_tokenizer *t)
{
    for (int s = 0; s < t->n_stages; s++)
        pcre2_code_free(t->stage[s]);
    t->n_stages = 0;
}

/* Scratch for one ckv_tokenize call. */
typedef struct {
    const ckv_tokenizer *t;
    tok_ids *out;
    ckv_error *err;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jstack;
    /* Symbols of the current piece: a linked list over positions. */
    int32_t *id, *prev, *next;
    ckv_heap heap; /* of (rank << 32 | position), smallest first */
    size_t cap;
} bpe_run;

static ckv_status grow(bpe_run *r, size_t n)
{
    if (n <= r->cap)
        return CKV_OK;
    size_t cap = r->cap ? r->cap : 64;
    while (cap < n)
        cap *= 2;
    int32_t *a = realloc(r->id, cap * sizeof *a);
    if (a)
        r->id = a;
    int32_t *b = a ? realloc(r->prev, cap * sizeof *b) : NULL;
    if (b)
        r->prev = b;
    int32_t *c = b ? realloc(r->next, cap * sizeof *c) : NULL;
    if (!c)
        return ckv_errorf(r->err, CKV_ERR_NOMEM, "tokenizer: out of memory for a %zu-byte piece", n);
    r->next = c;
    r->cap = cap;
    return CKV_OK;
}

static bool smaller(const void *a, const void *b)
{
    return *(const uint64_t *)a < *(const uint64_t *)b;
}

/* Queues the pair starting at position i if its two symbols merge. */
static ckv_status push_pair(bpe_run *r, int32_t i)
{
    if (i < 0 || r->next[i] < 0)
        return CKV_OK;
    uint64_t m;
    uint64_t key = (uint64_t)(uint32_t)r->id[i] << 32 | (uint32_t)r->id[r->next[i]];
    if (!ckv_u64map_get(&r->t->merges, key, &m))
        return CKV_OK;
    const uint64_t v = (m & 0xFFFFFFFF00000000ull) | (uint32_t)i;
    return ckv_heap_push(&r->heap, &v, sizeof v, smaller, r->err);
}

/* Merges the bytes of one piece, lowest rank first and leftmost among
 * equal ranks (as Hugging Face's BPE word merge). Bytes without a token
 * are left out, as Hugging Face does when there is no unknown token. */
static ckv_status bpe_piece(bpe_run *r, const char *s, size_t n)
{
    const ckv_tokenizer *t = r->t;
    if (n == 1)
        return t->byte_tok[(uint8_t)s[0]] < 0 ? CKV_OK
                                               : tok_ids_push(r->out, t->byte_tok[(uint8_t)s[0]], r->err);
    if (n > INT32_MAX)
        return ckv_errorf(r->err, CKV_ERR_UNSUPPORTED, "tokenizer: piece of %zu bytes", n);
    ckv_status st = grow(r, n);
    if (st)
        return st;
    int32_t m = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = t->byte_tok[(uint8_t)s[i]];
        if (id < 0)
            continue;
        r->id[m] = id;
        r->prev[m] = m - 1;
        r->next[m] = m + 1;
        m++;
    }
    if (m == 0)
        return CKV_OK;
    r->next[m - 1] = -1;
    r->heap.n = 0;
    for (int32_t i = 0; i + 1 < m; i++)
        if ((st = push_pair(r, i)))
            return st;
    while (r->heap.n) {
        uint64_t top;
        ckv_heap_pop(&r->heap, &top, sizeof top, smaller);
        int32_t i = (int32_t)(uint32_t)top, j = r->next[i];
        uint64_t m;
        /* Stale entries: the symbol was absorbed, or its pair changed. */
        if (r->id[i] < 0 || j < 0 ||
            !ckv_u64map_get(&t->merges, (uint64_t)(uint32_t)r->id[i] << 32 | (uint32_t)r->id[j], &m) ||
            (m >> 32) != (top >> 32))
            continue;
        r->id[i] = (int32_t)(uint32_t)m;
        r->id[j] = -1;
        r->next[i] = r->next[j];
        if (r->next[j] >= 0)
            r->prev[r->next[j]] = i;
        if ((st = push_pair(r, r->prev[i])) || (st = push_pair(r, i)))
            return st;
    }
    for (int32_t i = 0; i >= 0; i = r->next[i])
        if ((st = tok_ids_push(r->out, r->id[i], r->err)))
            return st;
    return CKV_OK;
}

static ckv_status regex_error(bpe_run *r, int rc)
{
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(rc, msg, sizeof msg);
    return ckv_errorf(r->err, CKV_ERR_UNSUPPORTED, "pre-tokenizer %s: %s", r->t->pre_name,
                      (const char *)msg);
}

/* Cuts valid UTF-8 s[0..n) with regex stage k into matches and the text
 * between them (both kept, as Hugging Face's Split "isolated"), passing
 * each to the next stage, and the last stage's pieces to BPE. */
static ckv_status split(bpe_run *r, int k, const char *s, size_t n)
{
    if (k == r->t->n_stages)
        return bpe_piece(r, s, n);
    pcre2_code *re = r->t->stage[k];
    size_t pos = 0;
    ckv_status st;
    while (pos < n) {
        int rc = PCRE2_ERROR_JIT_STACKLIMIT;
        if (r->t->stage_jit[k])
            rc = pcre2_jit_match(re, (PCRE2_SPTR)s, n, pos, 0, r->md, r->mctx);
        /* Without JIT, or past the JIT stack, the interpreter finds the same match. */
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
            rc = pcre2_match(re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, r->md,
                             r->mctx);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0)
            return regex_error(r, rc);
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(r->md);
        size_t a = ov[0], b = ov[1];
        if (b == a) /* no pattern matches empty text; guard against looping */
            break;
        if (a > pos && (st = split(r, k + 1, s + pos, a - pos)))
            return st;
        if ((st = split(r, k + 1, s + a, b - a)))
            return st;
        pos = b;
    }
    return pos < n ? split(r, k + 1, s + pos, n - pos) : CKV_OK;
}

static ckv_status encode_text(bpe_run *r, const char *s, size_t n)
{
    size_t pos = 0;
    ckv_status st;
    while (pos < n) {
        size_t v = ckv_utf8_valid_prefix(s + pos, n - pos);
        if (v && (st = split(r, 0, s + pos, v)))
            return st;
        pos += v;
        if (pos < n && (st = bpe_piece(r, s + pos++, 1)))
            return st;
    }
    return CKV_OK;
}

ckv_status tok_bpe_encode(const ckv_tokenizer *t, const tok_segment *seg, size_t n_seg,
                          tok_ids *out, ckv_error *err)
{
    bpe_run r = {.t = t, .out = out, .err = err};
    ckv_status st = CKV_OK;
    r.md = pcre2_match_data_create(1, NULL);
    r.mctx = pcre2_match_context_create(NULL);
    r.jstack = pcre2_jit_stack_create(32 * 1024, 1024 * 1024, NULL);
    if (!r.md || !r.mctx || !r.jstack)
        st = ckv_errorf(err, CKV_ERR_NOMEM, "tokenizer: out of memory for regex matching");
    else
        pcre2_jit_stack_assign(r.mctx, NULL, r.jstack);
    for (size_t i = 0; !st && i < n_seg; i++)
        st = seg[i].special >= 0 ? tok_ids_push(out, seg[i].special, err)
                                 : encode_text(&r, seg[i].s, seg[i].n);
    pcre2_jit_stack_free(r.jstack);
    pcre2_match_context_free(r.mctx);
    pcre2_match_data_free(r.md);
    free(r.id);
    free(r.prev);
    free(r.next);
    ckv_heap_free(&r.heap);
    return st;
}
