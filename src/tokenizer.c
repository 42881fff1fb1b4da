/* Tokenizer loading from GGUF metadata (formats.md 1.7), special-token
 * splitting, decoding and the vocabulary hash. The model-specific encoders
 * live in tokenizer_bpe.c and tokenizer_spm.c. */
#include "tokenizer_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "utf8.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

ckv_status tok_ids_push(tok_ids *o, int32_t id, ckv_error *err)
{
    if (o->n == o->cap) {
        size_t cap = o->cap ? 2 * o->cap : 256;
        int32_t *v = realloc(o->v, cap * sizeof *v);
        if (!v)
            return ckv_errorf(err, CKV_ERR_NOMEM, "tokenizer: out of memory for %zu ids", cap);
        o->v = v;
        o->cap = cap;
    }
    o->v[o->n++] = id;
    return CKV_OK;
}

static char *dup_str(gguf_str s)
{
    char *p = malloc(s.len + 1);
    if (p) {
        memcpy(p, s.ptr, s.len);
        p[s.len] = 0;
    }
    return p;
}

/* An optional token id: -1 when the key is absent; an error when present
 * but not an integer or outside the vocabulary. */
static ckv_status opt_id(const gguf_file *f, const char *key, int32_t n_vocab, int32_t *out,
                         ckv_error *err)
{
    *out = -1;
    if (!gguf_find(f, key))
        return CKV_OK;
    int64_t v;
    ckv_status st = gguf_get_int(f, key, &v, err);
    if (st)
        return st;
    if (v < 0 || v >= n_vocab)
        return ckv_errorf(err, CKV_ERR_FORMAT, "%s = %lld is outside the vocabulary of %d tokens",
                          key, (long long)v, n_vocab);
    *out = (int32_t)v;
    return CKV_OK;
}

static ckv_status opt_bool(const gguf_file *f, const char *key, bool dflt, bool *out,
                           ckv_error *err)
{
    *out = dflt;
    return gguf_find(f, key) ? gguf_get_bool(f, key, out, err) : CKV_OK;
}

/* Bytes a gpt2 token stands for: its text mapped back through the GPT-2
 * byte map. Texts that are not made of mapped code points (added tokens)
 * stand for themselves. Returns the length written to out. */
static uint32_t gpt2_bytes(const char *text, uint32_t len, char *out)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < len;) {
        uint32_t cp;
        size_t l = ckv_utf8_next(text + i, len - i, &cp);
        int b = l ? tok_gpt2_byte(cp) : -1;
        if (b < 0) {
            memcpy(out, text, len);
            return len;
        }
        out[n++] = (char)b;
        i += (uint32_t)l;
    }
    return n;
}

/* SentencePiece: U+2581 stands for a space; <0xXX> byte tokens for a byte. */
static uint32_t spm_bytes(const char *text, uint32_t len, int32_t type, char *out)
{
    unsigned b;
    char tail;
    if (type == TOK_BYTE && len == 6 && sscanf(text, "<0x%2X%c", &b, &tail) == 2 && tail == '>') {
        out[0] = (char)b;
        return 1;
    }
    if (type != TOK_NORMAL && type != TOK_USER_DEFINED && type != TOK_UNUSED) {
        memcpy(out, text, len);
        return len;
    }
    uint32_t n = 0;
    for (uint32_t i = 0; i < len;) {
        if (len - i >= 3 && !memcmp(text + i, "\xE2\x96\x81", 3)) {
            out[n++] = ' ';
            i += 3;
        } else {
            out[n++] = text[i++];
        }
    }
    return n;
}

/* Copies the vocabulary into one arena: each token's GGUF text (NUL
 * terminated, for sscanf) followed by its decoded bytes. */
static ckv_status load_vocab(ckv_tokenizer *t, const gguf_file *f, ckv_error *err)
{
    gguf_str *toks = NULL;
    uint64_t n = 0;
    ckv_status st = gguf_get_str_array(f, "tokenizer.ggml.tokens", &toks, &n, err);
    if (st)
        return st;
    if (n == 0 || n > INT32_MAX) {
        free(toks);
        return ckv_errorf(err, CKV_ERR_FORMAT, "tokenizer.ggml.tokens: %llu tokens",
                          (unsigned long long)n);
    }
    t->n_vocab = (int32_t)n;
    uint64_t total = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (toks[i].len > UINT32_MAX / 2) {
            free(toks);
            return ckv_errorf(err, CKV_ERR_FORMAT, "tokenizer.ggml.tokens[%llu]: %llu bytes",
                              (unsigned long long)i, (unsigned long long)toks[i].len);
        }
        total += 2 * toks[i].len + 1;
    }

    t->type = malloc(n * sizeof *t->type);
    t->score = malloc(n * sizeof *t->score);
    t->tok = malloc(n * sizeof *t->tok);
    t->eog = calloc(n, 1);
    t->arena = malloc(total ? total : 1);
    if (!t->type || !t->score || !t->tok || !t->eog || !t->arena ||
        !ckv_strmap_init(&t->by_text, n)) {
        free(toks);
        return ckv_errorf(err, CKV_ERR_NOMEM, "tokenizer: out of memory for %llu tokens",
                          (unsigned long long)n);
    }

    int32_t *ty = NULL;
    float *sc = NULL;
    uint64_t nt = n, ns = n;
    if (gguf_find(f, "tokenizer.ggml.token_type"))
        st = gguf_get_i32_array(f, "tokenizer.ggml.token_type", &ty, &nt, err);
    if (!st && gguf_find(f, "tokenizer.ggml.scores"))
        st = gguf_get_f32_array(f, "tokenizer.ggml.scores", &sc, &ns, err);
    if (!st && (nt != n || ns != n))
        st = ckv_errorf(err, CKV_ERR_FORMAT, "tokenizer.ggml.%s has %llu entries for %llu tokens",
                        nt != n ? "token_type" : "scores",
                        (unsigned long long)(nt != n ? nt : ns), (unsigned long long)n);
    for (uint64_t i = 0; !st && i < n; i++) {
        t->type[i] = ty ? ty[i] : TOK_NORMAL;
        t->score[i] = sc ? sc[i] : 0.0f;
    }
    free(ty);
    free(sc);
    if (st) {
        free(toks);
        return st;
    }

    char *p = t->arena;
    for (uint64_t i = 0; i < n; i++) {
        tok_entry *e = &t->tok[i];
        e->text = p;
        e->text_len = (uint32_t)toks[i].len;
        memcpy(p, toks[i].ptr, toks[i].len);
        p[toks[i].len] = 0;
        p += toks[i].len + 1;
        e->bytes = p;
        if (t->model == TOK_MODEL_GPT2 && t->type[i] == TOK_NORMAL)
            e->bytes_len = gpt2_bytes(e->text, e->text_len, p);
        else if (t->model == TOK_MODEL_LLAMA)
            e->bytes_len = spm_bytes(e->text, e->text_len, t->type[i], p);
        else
            memcpy(p, e->text, e->bytes_len = e->text_len);
        p += e->bytes_len;
        /* Duplicate texts keep their first id. */
        ckv_strmap_put(&t->by_text, e->text, e->text_len, (int32_t)i);
    }
    free(toks);
    return CKV_OK;
}

/* gpt2 merges "a b": rank = index. Merges whose parts or result are not in
 * the vocabulary can never apply and are skipped, as are repeats. */
static ckv_status load_merges(ckv_tokenizer *t, const gguf_file *f, ckv_error *err)
{
    gguf_str *m = NULL;
    uint64_t n = 0;
    ckv_status st = gguf_get_str_array(f, "tokenizer.ggml.merges", &m, &n, err);
    if (st)
        return st;
    if (n > INT32_MAX) {
        free(m);
        return ckv_errorf(err, CKV_ERR_FORMAT, "tokenizer.ggml.merges: %llu merges",
                          (unsigned long long)n);
    }
    if (!ckv_u64map_init(&t->merges, n)) {
        free(m);
        return ckv_errorf(err, CKV_ERR_NOMEM, "tokenizer: out of memory for %llu merges",
                          (unsigned long long)n);
    }
    char *buf = NULL;
    size_t cap = 0;
    for (uint64_t r = 0; r < n; r++) {
        const char *s = m[r].ptr;
        size_t len = m[r].len;
        /* The separator is the first space after the first byte, as in llama.cpp. */
        const char *sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
        if (!sp)
            continue;
        size_t la = (size_t)(sp - s), lb = len - la - 1;
        int32_t a = ckv_strmap_get(&t->by_text, s, la);
        int32_t b = ckv_strmap_get(&t->by_text, sp + 1, lb);
        if (la + lb > cap) {
            cap = 2 * (la + lb);
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                free(m);
                return ckv_errorf(err, CKV_ERR_NOMEM, "tokenizer: out of memory");
            }
            buf = nb;
        }
        memcpy(buf, s, la);
        memcpy(buf + la, sp + 1, lb);
        int32_t ab = ckv_strmap_get(&t->by_text, buf, la + lb);
        if (a < 0 || b < 0 || ab < 0)
            continue;
        ckv_u64map_put(&t->merges, (uint64_t)a << 32 | (uint32_t)b, r << 32 | (uint32_t)ab);
    }
    free(buf);
    free(m);
    return CKV_OK;
}

static void load_byte_tokens(ckv_tokenizer *t)
{
    for (int b = 0; b < 256; b++) {
        char txt[8];
        size_t len;
        if (t->model == TOK_MODEL_GPT2)
            len = ckv_utf8_put(tok_gpt2_codepoint((uint8_t)b), txt);
        else
            len = (size_t)snprintf(txt, sizeof txt, "<0x%02X>", b);
        t->byte_tok[b] = ckv_strmap_get(&t->by_text, txt, len);
    }
}

static int cmp_special(const void *pa, const void *pb)
{
    const tok_special *a = pa, *b = pb;
    if (a->first != b->first)
        return a->first < b->first ? -1 : 1;
    if (a->len != b->len)
        return a->len > b->len ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

static bool is_special_type(int32_t type)
{
    return type == TOK_CONTROL || type == TOK_UNKNOWN || type == TOK_USER_DEFINED;
}

/* Control, unknown and user-defined tokens are matched as whole strings. */
static ckv_status load_specials(ckv_tokenizer *t, ckv_error *err)
{
    size_t n = 0;
    for (int32_t i = 0; i < t->n_vocab; i++)
        n += is_special_type(t->type[i]) && t->tok[i].text_len;
    t->specials = malloc((n ? n : 1) * sizeof *t->specials);
    if (!t->specials)
        return ckv_errorf(err, CKV_ERR_NOMEM, "tokenizer: out of memory");
    for (int32_t i = 0; i < t->n_vocab; i++) {
        const tok_entry *e = &t->tok[i];
        if (is_special_type(t->type[i]) && e->text_len)
            t->specials[t->n_specials++] = (tok_special){
                i, e->text_len, (uint8_t)e->text[0], t->type[i] != TOK_USER_DEFINED};
    }
    qsort(t->specials, t->n_specials, sizeof *t->specials, cmp_special);
    for (size_t i = t->n_specials; i-- > 0;) {
        t->special_start[t->specials[i].first] = (uint32_t)i;
        t->special_count[t->specials[i].first]++;
    }
    return CKV_OK;
}

static void hash_str(XXH3_state_t *h, const char *s, uint64_t len)
{
    XXH3_64bits_update(h, &len, sizeof len);
    XXH3_64bits_update(h, s, len);
}

/* Hash of model, pre-tokenizer, tokens, merges, types and scores; every
 * string is length-prefixed so that boundaries count. */
static ckv_status compute_hash(ckv_tokenizer *t, const gguf_file *f, ckv_error *err)
{
    XXH3_state_t h;
    XXH3_INITSTATE(&h);
    XXH3_64bits_reset(&h);
    hash_str(&h, t->model_name, strlen(t->model_name));
    hash_str(&h, t->pre_name, strlen(t->pre_name));
    for (int32_t i = 0; i < t->n_vocab; i++)
        hash_str(&h, t->tok[i].text, t->tok[i].text_len);
    if (gguf_find(f, "tokenizer.ggml.merges")) {
        gguf_str *m;
        uint64_t n;
        ckv_status st = gguf_get_str_array(f, "tokenizer.ggml.merges", &m, &n, err);
        if (st)
            return st;
        for (uint64_t i = 0; i < n; i++)
            hash_str(&h, m[i].ptr, m[i].len);
        free(m);
    }
    XXH3_64bits_update(&h, t->type, (size_t)t->n_vocab * sizeof *t->type);
    XXH3_64bits_update(&h, t->score, (size_t)t->n_vocab * sizeof *t->score);
    t->hash = XXH3_64bits_digest(&h);
    return CKV_OK;
}

static const char *const eog_names[] = {"<|im_end|>", "<|eot_id|>", "<|endoftext|>", "</s>"};

static ckv_status load_ids(ckv_tokenizer *t, const gguf_file *f, ckv_error *err)
{
    int32_t eot, eom;
    ckv_status st;
    if ((st = opt_id(f, "tokenizer.ggml.bos_token_id", t->n_vocab, &t->bos, err)) ||
        (st = opt_id(f, "tokenizer.ggml.eos_token_id", t->n_vocab, &t->eos, err)) ||
        (st = opt_id(f, "tokenizer.ggml.unknown_token_id", t->n_vocab, &t->unk, err)) ||
        (st = opt_id(f, "tokenizer.ggml.eot_token_id", t->n_vocab, &eot, err)) ||
        (st = opt_id(f, "tokenizer.ggml.eom_token_id", t->n_vocab, &eom, err)))
        return st;
    /* llama.cpp's defaults: SentencePiece models add BOS and a dummy space. */
    bool spm = t->model == TOK_MODEL_LLAMA;
    if ((st = opt_bool(f, "tokenizer.ggml.add_bos_token", spm, &t->add_bos, err)) ||
        (st = opt_bool(f, "tokenizer.ggml.add_space_prefix", spm, &t->add_space_prefix, err)))
        return st;
    int32_t ids[] = {t->eos, eot, eom};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
        if (ids[i] >= 0)
            t->eog[ids[i]] = 1;
    for (size_t i = 0; i < sizeof eog_names / sizeof eog_names[0]; i++) {
        int32_t id = ckv_strmap_get(&t->by_text, eog_names[i], strlen(eog_names[i]));
        if (id >= 0)
            t->eog[id] = 1;
    }
    return CKV_OK;
}

static ckv_status load(ckv_tokenizer *t, const gguf_file *f, ckv_error *err)
{
    gguf_str model, pre = {"default", 7};
    ckv_status st = gguf_get_str(f, "tokenizer.ggml.model", &model, err);
    if (st)
        return st;
    if (gguf_str_eq(model, "gpt2"))
        t->model = TOK_MODEL_GPT2;
    else if (gguf_str_eq(model, "llama"))
        t->model = TOK_MODEL_LLAMA;
    else
        return ckv_errorf(err, CKV_ERR_UNSUPPORTED,
                          "tokenizer.ggml.model = \"%.*s\": only \"gpt2\" and \"llama\" are supported",
                          (int)(model.len > 64 ? 64 : model.len), model.ptr);
    if (gguf_find(f, "tokenizer.ggml.pre") && (st = gguf_get_str(f, "tokenizer.ggml.pre", &pre, err)))
        return st;
    t->model_name = dup_str(model);
    t->pre_name = dup_str(pre);
    if (!t->model_name || !t->pre_name)
        return ckv_errorf(err, CKV_ERR_NOMEM, "tokenizer: out of memory");

    if ((st = load_vocab(t, f, err)))
        return st;
    if (t->model == TOK_MODEL_GPT2 &&
        ((st = load_merges(t, f, err)) || (st = tok_bpe_init(t, t->pre_name, err))))
        return st;
    load_byte_tokens(t);
    if ((st = load_specials(t, err)) ||
        (st = load_ids(t, f, err)) || (st = compute_hash(t, f, err)))
        return st;
    gguf_str tmpl = {"", 0};
    if (gguf_find(f, "tokenizer.chat_template") &&
        (st = gguf_get_str(f, "tokenizer.chat_template", &tmpl, err)))
        return st;
    return tok_chat_init(t, tmpl.ptr, tmpl.len, err);
}

ckv_status ckv_tokenizer_load(ckv_tokenizer **out, const gguf_file *f, ckv_error *err)
{
    *out = NULL;
    ckv_tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        return ckv_errorf(err, CKV_ERR_NOMEM, "tokenizer: out of memory");
    ckv_status st = load(t, f, err);
    if (st) {
        ckv_tokenizer_free(t);
        return st;
    }
    *out = t;
    return CKV_OK;
}

void ckv_tokenizer_free(ckv_tokenizer *t)
{
    if (!t)
        return;
    tok_bpe_free(t);
    ckv_strmap_free(&t->by_text);
    ckv_u64map_free(&t->merges);
    free(t->model_name);
    free(t->pre_name);
    free(t->tok);
    free(t->type);
    free(t->score);
    free(t->arena);
    free(t->eog);
    free(t->specials);
    free(t->chat_default_system);
    free(t);
}

/* The longest special token whose text starts at s, or -1. */
static int32_t match_special(const ckv_tokenizer *t, const char *s, size_t n, bool parse_special)
{
    uint8_t c = (uint8_t)s[0];
    const tok_special *sp = t->specials + t->special_start[c];
    for (uint32_t i = 0; i < t->special_count[c]; i++)
        if ((parse_special || !sp[i].needs_parse_special) && sp[i].len <= n &&
            !memcmp(s, t->tok[sp[i].id].text, sp[i].len))
            return sp[i].id;
    return -1;
}

/* Splits text into plain stretches and special tokens (leftmost, then
 * longest match, as Hugging Face's added-token matcher). */
static ckv_status segment(const ckv_tokenizer *t, const char *text, size_t len, bool parse_special,
                          tok_segment **out, size_t *n_out, ckv_error *err)
{
    size_t n = 0, cap = 8, start = 0;
    tok_segment *seg = malloc(cap * sizeof *seg);
    if (!seg)
        return ckv_errorf(err, CKV_ERR_NOMEM, "tokenizer: out of memory");
    for (size_t i = 0; i <= len; i++) {
        int32_t id = -1;
        if (i < len && t->special_count[(uint8_t)text[i]])
            id = match_special(t, text + i, len - i, parse_special);
        if (id < 0 && i < len)
            continue;
        if (n + 2 > cap) {
            cap *= 2;
            tok_segment *ns = realloc(seg, cap * sizeof *seg);
            if (!ns) {
                free(seg);
                return ckv_errorf(err, CKV_ERR_NOMEM, "tokenizer: out of memory");
            }
            seg = ns;
        }
        if (i > start)
            seg[n++] = (tok_segment){text + start, i - start, -1};
        if (id >= 0) {
            seg[n++] = (tok_segment){text + i, t->tok[id].text_len, id};
            i += t->tok[id].text_len - 1;
            start = i + 1;
        }
    }
    *out = seg;
    *n_out = n;
    return CKV_OK;
}

ckv_status ckv_tokenize(const ckv_tokenizer *t, const char *text, size_t len, bool add_bos,
                        bool parse_special, int32_t **out, size_t *n_out, ckv_error *err)
{
    *out = NULL;
    *n_out = 0;
    tok_ids ids = {0};
    tok_segment *seg = NULL;
    size_t n_seg = 0;
    ckv_status st = CKV_OK;
    if (add_bos && t->add_bos && t->bos >= 0)
        st = tok_ids_push(&ids, t->bos, err);
    if (!st)
        st = segment(t, text, len, parse_special, &seg, &n_seg, err);
    if (!st)
        st = t->model == TOK_MODEL_GPT2 ? tok_bpe_encode(t, seg, n_seg, &ids, err)
                                        : tok_spm_encode(t, seg, n_seg, &ids, err);
    free(seg);
    if (st) {
        free(ids.v);
        return st;
    }
    if (!ids.v && !(ids.v = malloc(sizeof *ids.v)))
        return ckv_errorf(err, CKV_ERR_NOMEM, "tokenizer: out of memory");
    *out = ids.v;
    *n_out = ids.n;
    return CKV_OK;
}

ckv_status ckv_detokenize(const ckv_tokenizer *t, const int32_t *ids, size_t n, char **out,
                          size_t *out_len, ckv_error *err)
{
    *out = NULL;
    *out_len = 0;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_vocab)
            return ckv_errorf(err, CKV_ERR_ARG, "detokenize: id %d at position %zu is outside "
                              "the vocabulary of %d tokens", ids[i], i, t->n_vocab);
        total += t->tok[ids[i]].bytes_len;
    }
    char *buf = malloc(total + 1);
    if (!buf)
        return ckv_errorf(err, CKV_ERR_NOMEM, "detokenize: out of memory for %zu bytes", total);
    /* The encoder put one dummy space at the start and after each special
     * token (SentencePiece with add_space_prefix); take it back out. */
    bool strip = t->model == TOK_MODEL_LLAMA && t->add_space_prefix;
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        const tok_entry *e = &t->tok[ids[i]];
        const char *b = e->bytes;
        uint32_t bl = e->bytes_len;
        bool special = is_special_type(t->type[ids[i]]);
        if (strip && !special && bl && b[0] == ' ') {
            b++;
            bl--;
        }
        if (t->model == TOK_MODEL_LLAMA && t->add_space_prefix)
            strip = special;
        memcpy(buf + len, b, bl);
        len += bl;
    }
    buf[len] = 0;
    *out = buf;
    *out_len = len;
    return CKV_OK;
}

const char *ckv_token_bytes(const ckv_tokenizer *t, int32_t id, size_t *len)
{
    if (id < 0 || id >= t->n_vocab)
        return NULL;
    *len = t->tok[id].bytes_len;
    return t->tok[id].bytes;
}

int32_t ckv_tokenizer_vocab(const ckv_tokenizer *t) { return t->n_vocab; }
int32_t ckv_token_bos(const ckv_tokenizer *t) { return t->bos; }
int32_t ckv_token_eos(const ckv_tokenizer *t) { return t->eos; }
const char *ckv_tokenizer_model(const ckv_tokenizer *t) { return t->model_name; }
const char *ckv_tokenizer_pre(const ckv_tokenizer *t) { return t->pre_name; }
uint64_t ckv_tokenizer_hash(const ckv_tokenizer *t) { return t->hash; }

bool ckv_token_is_eog(const ckv_tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_vocab && t->eog[id];
}
