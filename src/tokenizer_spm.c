/* SentencePiece BPE (tokenizer.ggml.model = llama), as llama.cpp does it:
 * spaces become U+2581, a dummy space is put before the text at the start
 * and after every special token (add_space_prefix), the text is split into
 * characters, and adjacent symbols whose concatenation is a vocabulary
 * piece are merged, highest score first (leftmost among equal scores).
 * Symbols left that are not pieces are written as byte tokens <0xXX> (or
 * the unknown token without byte tokens). A byte that is not valid UTF-8 is
 * a symbol of its own, so with byte tokens every input round-trips. */
#include "tokenizer_impl.h"

#include <stdlib.h>
#include <string.h>

#include "heap.h"
#include "utf8.h"

#define SPACE_UTF8 "\xE2\x96\x81" /* U+2581 LOWER ONE EIGHTH BLOCK */

typedef struct {
    float score;
    int32_t left, right;
    size_t size;
} bigram;

typedef struct {
    size_t off, n; /* into the escaped text; n == 0 once merged away */
    int32_t prev, next;
} symbol;

typedef struct {
    const ckv_tokenizer *t;
    ckv_error *err;
    char *text;
    size_t text_cap;
    symbol *sym;
    size_t sym_cap;
    ckv_heap heap; /* of bigram */
} spm_run;

/* Heap order: higher score first, then the leftmost pair. */
static bool before(const void *x, const void *y)
{
    const bigram *a = x, *b = y;
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

/* Pieces that take part in merges: normal and user-defined ones (never
 * control, unknown or byte tokens, which text must not spell out). */
static int32_t piece_id(const ckv_tokenizer *t, const char *s, size_t n)
{
    int32_t id = ckv_strmap_get(&t->by_text, s, n);
    return id >= 0 && (t->type[id] == TOK_NORMAL || t->type[id] == TOK_USER_DEFINED) ? id : -1;
}

static ckv_status try_bigram(spm_run *r, int32_t left, int32_t right)
{
    if (left < 0 || right < 0)
        return CKV_OK;
    size_t size = r->sym[left].n + r->sym[right].n;
    int32_t id = piece_id(r->t, r->text + r->sym[left].off, size);
    if (id < 0)
        return CKV_OK;
    const bigram b = {r->t->score[id], left, right, size};
    return ckv_heap_push(&r->heap, &b, sizeof b, before, r->err);
}

static ckv_status reserve(spm_run *r, size_t n)
{
    if (n > r->text_cap) {
        char *p = realloc(r->text, n);
        if (!p)
            return ckv_errorf(r->err, CKV_ERR_NOMEM, "tokenizer: out of memory for %zu bytes", n);
        r->text = p;
        r->text_cap = n;
    }
    if (n > r->sym_cap) {
        symbol *s = realloc(r->sym, n * sizeof *s);
        if (!s)
            return ckv_errorf(r->err, CKV_ERR_NOMEM, "tokenizer: out of memory for %zu bytes", n);
        r->sym = s;
        r->sym_cap = n;
    }
    return CKV_OK;
}

static ckv_status encode_text(spm_run *r, const char *s, size_t n, bool prefix, tok_ids *out)
{
    const ckv_tokenizer *t = r->t;
    /* Each byte becomes at most 3 (a space -> U+2581), plus the prefix. */
    if (n > (INT32_MAX - 3) / 3)
        return ckv_errorf(r->err, CKV_ERR_UNSUPPORTED, "tokenizer: text of %zu bytes", n);
    ckv_status st = reserve(r, 3 * n + 3);
    if (st)
        return st;
    size_t len = 0;
    if (prefix) {
        memcpy(r->text, SPACE_UTF8, 3);
        len = 3;
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') {
            memcpy(r->text + len, SPACE_UTF8, 3);
            len += 3;
        } else {
            r->text[len++] = s[i];
        }
    }

    int32_t n_sym = 0;
    for (size_t off = 0; off < len;) {
        size_t l = ckv_utf8_next(r->text + off, len - off, NULL);
        if (!l)
            l = 1;
        r->sym[n_sym] = (symbol){off, l, n_sym - 1, off + l < len ? n_sym + 1 : -1};
        n_sym++;
        off += l;
    }
    r->heap.n = 0;
    for (int32_t i = 0; i + 1 < n_sym; i++)
        if ((st = try_bigram(r, i, i + 1)))
            return st;
    while (r->heap.n) {
        bigram b;
        ckv_heap_pop(&r->heap, &b, sizeof b, before);
        symbol *L = &r->sym[b.left], *R = &r->sym[b.right];
        /* Stale: one side was merged away or has grown since. */
        if (!L->n || !R->n || L->n + R->n != b.size)
            continue;
        L->n += R->n;
        R->n = 0;
        L->next = R->next;
        if (R->next >= 0)
            r->sym[R->next].prev = b.left;
        if ((st = try_bigram(r, L->prev, b.left)) || (st = try_bigram(r, b.left, L->next)))
            return st;
    }

    for (int32_t i = 0; i >= 0 && n_sym; i = r->sym[i].next) {
        const symbol *y = &r->sym[i];
        int32_t id = ckv_strmap_get(&t->by_text, r->text + y->off, y->n);
        if (id >= 0) {
            if ((st = tok_ids_push(out, id, r->err)))
                return st;
            continue;
        }
        for (size_t k = 0; k < y->n; k++) {
            uint8_t b = (uint8_t)r->text[y->off + k];
            id = t->byte_tok[b] >= 0 ? t->byte_tok[b] : t->unk;
            if (id < 0)
                return ckv_errorf(r->err, CKV_ERR_UNSUPPORTED,
                                  "tokenizer: byte 0x%02X has no token and the vocabulary has "
                                  "neither byte tokens nor an unknown token", b);
            if ((st = tok_ids_push(out, id, r->err)))
                return st;
        }
    }
    return CKV_OK;
}

ckv_status tok_spm_encode(const ckv_tokenizer *t, const tok_segment *seg, size_t n_seg,
                          tok_ids *out, ckv_error *err)
{
    spm_run r = {.t = t, .err = err};
    ckv_status st = CKV_OK;
    bool after_special = true; /* the start counts as after a special token */
    for (size_t i = 0; !st && i < n_seg; i++) {
        if (seg[i].special >= 0) {
            st = tok_ids_push(out, seg[i].special, err);
            after_special = true;
        } else {
            st = encode_text(&r, seg[i].s, seg[i].n, t->add_space_prefix && after_special, out);
            after_special = false;
        }
    }
    free(r.text);
    free(r.sym);
    ckv_heap_free(&r.heap);
    return st;
}
