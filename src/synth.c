/* Synthetic GGUF v3 models (formats.md section 1): every tensor the
 * architecture needs, seeded random weights, and a minimal GPT-2 byte-level
 * BPE tokenizer laid out like SmolLM2's (specials 0-2, then bytes, then merges). */
#include "synth.h"

#include "splitmix.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "quant.h"
#include "util.h"

/* ---- growable little-endian output ---- */

typedef struct {
    uint8_t *p;
    size_t n, cap;
    uint64_t n_kv; /* metadata entries written, patched into the header */
    bool oom;
} outbuf;

/* Appends n bytes and returns where they go (NULL once out of memory). */
static uint8_t *reserve(outbuf *b, size_t n)
{
    if (b->oom)
        return NULL;
    if (n > SIZE_MAX / 2 - b->n) {
        b->oom = true;
        return NULL;
    }
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n)
            cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return NULL;
        }
        b->p = p;
        b->cap = cap;
    }
    uint8_t *at = b->p + b->n;
    b->n += n;
    return at;
}

static void put(outbuf *b, const void *d, size_t n)
{
    uint8_t *at = reserve(b, n);
    if (at)
        memcpy(at, d, n);
}

static void put_zeros(outbuf *b, size_t n)
{
    uint8_t *at = reserve(b, n);
    if (at)
        memset(at, 0, n);
}

static void put_le(outbuf *b, uint64_t v, int n)
{
    uint8_t c[8];
    for (int i = 0; i < n; i++)
        c[i] = (uint8_t)(v >> (8 * i));
    put(b, c, (size_t)n);
}

static void put_str(outbuf *b, const char *s)
{
    put_le(b, strlen(s), 8);
    put(b, s, strlen(s));
}

static void put_f32(outbuf *b, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    put_le(b, u, 4);
}

static void kv_head(outbuf *b, const char *key, uint32_t type)
{
    b->n_kv++;
    put_str(b, key);
    put_le(b, type, 4);
}

static void kv_u32(outbuf *b, const char *key, uint32_t v)
{
    kv_head(b, key, GGUF_UINT32);
    put_le(b, v, 4);
}

static void kv_f32(outbuf *b, const char *key, float v)
{
    kv_head(b, key, GGUF_FLOAT32);
    put_f32(b, v);
}

static void kv_bool(outbuf *b, const char *key, bool v)
{
    kv_head(b, key, GGUF_BOOL);
    put_le(b, v, 1);
}

static void kv_str(outbuf *b, const char *key, const char *v)
{
    kv_head(b, key, GGUF_STRING);
    put_str(b, v);
}

static void kv_arch_u32(outbuf *b, const char *arch, const char *suffix, uint32_t v)
{
    char key[96];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    kv_u32(b, key, v);
}

/* ---- tokenizer ---- */

static const char *const specials[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
enum { N_SPECIAL = 3, BOS_ID = 1, EOS_ID = 2, TOKEN_NORMAL = 1, TOKEN_CONTROL = 3 };

/* Ranked merges; each result is a token, and later merges build on earlier
 * ones ("Ġt he" needs "Ġt" and "he"). Ġ is the byte symbol for space. */
static const char *const merges[][2] = {
    {"Ġ t", "Ġt"}, {"h e", "he"}, {"i n", "in"}, {"Ġ a", "Ġa"}, {"e r", "er"},
    {"o n", "on"}, {"Ġt he", "Ġthe"}, {"r e", "re"}, {"Ġ s", "Ġs"}, {"a t", "at"},
};
enum { N_MERGES = sizeof merges / sizeof merges[0] };

static const char chat_template[] =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}";

uint32_t ckv_synth_min_vocab(void)
{
    return N_SPECIAL + 256 + N_MERGES;
}

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the
 * other 68 bytes, in increasing order, to U+0100 onwards. Writes UTF-8. */
static void byte_symbol(unsigned b, char out[4])
{
    bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    unsigned cp = b;
    if (!printable) {
        cp = 256;
        for (unsigned x = 0; x < b; x++)
            if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE)))
                cp++;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
    } else {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        out[2] = 0;
    }
}

static void put_tokenizer(outbuf *b, uint32_t n_vocab)
{
    char sym[4], name[32];
    kv_str(b, "tokenizer.ggml.model", "gpt2");
    kv_str(b, "tokenizer.ggml.pre", "default");
    kv_head(b, "tokenizer.ggml.tokens", GGUF_ARRAY);
    put_le(b, GGUF_STRING, 4);
    put_le(b, n_vocab, 8);
    for (int i = 0; i < N_SPECIAL; i++)
        put_str(b, specials[i]);
    for (unsigned c = 0; c < 256; c++) {
        byte_symbol(c, sym);
        put_str(b, sym);
    }
    for (int i = 0; i < N_MERGES; i++)
        put_str(b, merges[i][1]);
    /* Padding up to n_vocab: reserved control tokens, as Llama 3 does. */
    for (uint32_t i = ckv_synth_min_vocab(); i < n_vocab; i++) {
        snprintf(name, sizeof name, "<|reserved_%u|>", i);
        put_str(b, name);
    }
    kv_head(b, "tokenizer.ggml.token_type", GGUF_ARRAY);
    put_le(b, GGUF_INT32, 4);
    put_le(b, n_vocab, 8);
    for (uint32_t i = 0; i < n_vocab; i++) {
        bool control = i < N_SPECIAL || i >= ckv_synth_min_vocab();
        put_le(b, control ? TOKEN_CONTROL : TOKEN_NORMAL, 4);
    }
    kv_head(b, "tokenizer.ggml.merges", GGUF_ARRAY);
    put_le(b, GGUF_STRING, 4);
    put_le(b, N_MERGES, 8);
    for (int i = 0; i < N_MERGES; i++)
        put_str(b, merges[i][0]);
    kv_u32(b, "tokenizer.ggml.bos_token_id", BOS_ID);
    kv_u32(b, "tokenizer.ggml.eos_token_id", EOS_ID);
    kv_bool(b, "tokenizer.ggml.add_bos_token", false);
    kv_str(b, "tokenizer.chat_template", chat_template);
}

/* ---- tensors ---- */

enum init { INIT_MATRIX, INIT_NORM, INIT_BIAS };

typedef struct {
    char name[64];
    uint32_t n_dims;
    uint64_t ne[2];
    uint32_t type;
    enum init init;
    uint64_t nbytes, offset;
} tensor_spec;

typedef struct {
    tensor_spec *t;
    size_t n, cap;
} tensor_list;

static ckv_status add_tensor(tensor_list *l, const char *name, uint64_t ne0, uint64_t ne1,
                             uint32_t type, enum init init, ckv_error *err)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        tensor_spec *t = realloc(l->t, cap * sizeof *t);
        if (!t)
            return ckv_errorf(err, CKV_ERR_NOMEM, "synth: out of memory for tensor list");
        l->t = t;
        l->cap = cap;
    }
    tensor_spec *t = &l->t[l->n];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->n_dims = ne1 ? 2 : 1;
    t->ne[0] = ne0;
    t->ne[1] = ne1 ? ne1 : 1;
    t->type = type;
    t->init = init;
    uint64_t n;
    /* Rows, not just the whole tensor, must hold whole blocks. */
    if (ne0 % ggml_block_elems(type) || !ckv_mul_u64(ne0, t->ne[1], &n) ||
        !ggml_row_bytes(type, n, &t->nbytes))
        return ckv_errorf(err, CKV_ERR_ARG,
                          "synth: tensor '%s' [%llu, %llu]: row length %llu is not a multiple of "
                          "the %s block size %u (or the size overflows)",
                          name, (unsigned long long)ne0, (unsigned long long)t->ne[1],
                          (unsigned long long)ne0, ggml_type_name(type), ggml_block_elems(type));
    l->n++;
    return CKV_OK;
}

static ckv_status add_layer(tensor_list *l, const ckv_synth_opts *o, uint32_t i, uint32_t hd,
                            ckv_error *err)
{
    const uint64_t E = o->n_embd, Q = (uint64_t)o->n_head * hd, KV = (uint64_t)o->n_head_kv * hd;
    const struct {
        const char *suffix;
        uint64_t ne0, ne1;
        bool matrix;
        enum init init;
    } parts[] = {
        {"attn_norm.weight", E, 0, false, INIT_NORM},
        {"attn_q.weight", E, Q, true, INIT_MATRIX},
        {"attn_k.weight", E, KV, true, INIT_MATRIX},
        {"attn_v.weight", E, KV, true, INIT_MATRIX},
        {"attn_output.weight", Q, E, true, INIT_MATRIX},
        {"ffn_norm.weight", E, 0, false, INIT_NORM},
        {"ffn_gate.weight", E, o->n_ff, true, INIT_MATRIX},
        {"ffn_up.weight", E, o->n_ff, true, INIT_MATRIX},
        {"ffn_down.weight", o->n_ff, E, true, INIT_MATRIX},
    };
    char name[64];
    ckv_status st;
    for (size_t k = 0; k < sizeof parts / sizeof parts[0]; k++) {
        snprintf(name, sizeof name, "blk.%u.%s", i, parts[k].suffix);
        if ((st = add_tensor(l, name, parts[k].ne0, parts[k].ne1,
                             parts[k].matrix ? o->type : GGML_F32, parts[k].init, err)))
            return st;
    }
    if (!strcmp(o->arch, "qwen2")) {
        const char *bias[] = {"attn_q.bias", "attn_k.bias", "attn_v.bias"};
        const uint64_t len[] = {Q, KV, KV};
        for (int k = 0; k < 3; k++) {
            snprintf(name, sizeof name, "blk.%u.%s", i, bias[k]);
            if ((st = add_tensor(l, name, len[k], 0, GGML_F32, INIT_BIAS, err)))
                return st;
        }
    }
    if (!strcmp(o->arch, "qwen3")) {
        const char *norm[] = {"attn_q_norm.weight", "attn_k_norm.weight"};
        for (int k = 0; k < 2; k++) {
            snprintf(name, sizeof name, "blk.%u.%s", i, norm[k]);
            if ((st = add_tensor(l, name, hd, 0, GGML_F32, INIT_NORM, err)))
                return st;
        }
    }
    return CKV_OK;
}

/* ---- random numbers: SplitMix64, one stream per tensor ---- */

/* Uniform in (0, 1): 53 random bits, offset by half a unit so never 0. */
static double uniform01(uint64_t *s)
{
    return ((double)(ckv_splitmix64(s) >> 11) + 0.5) * 0x1p-53;
}

/* Box-Muller; the second variate is discarded for simplicity. */
static float gaussian(uint64_t *s)
{
    double u1 = uniform01(s), u2 = uniform01(s);
    return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

/* Seeding each tensor from (seed, name) keeps its values independent of
 * the other tensors and of --type, so files of different types compare. */
static uint64_t tensor_seed(uint64_t seed, const char *name)
{
    uint64_t h = 0xCBF29CE484222325ull; /* FNV-1a */
    for (const char *p = name; *p; p++)
        h = (h ^ (uint8_t)*p) * 0x100000001B3ull;
    return seed ^ h;
}

/* Matrices and biases ~ N(0, std) (0.02 like common initialisers), norms ~
 * 1 + N(0, 0.1). A value of exactly zero is redrawn. */
static ckv_status fill_tensor(const tensor_spec *t, uint64_t seed, float std, float *tmp,
                              uint8_t *dst, ckv_error *err)
{
    uint64_t s = tensor_seed(seed, t->name), n = t->ne[0] * t->ne[1];
    for (uint64_t i = 0; i < n; i++) {
        float v;
        do {
            float g = gaussian(&s);
            v = t->init == INIT_NORM ? 1.0f + 0.1f * g : std * g;
        } while (v == 0.0f);
        tmp[i] = v;
    }
    ckv_status st = ckv_quantize(t->type, tmp, dst, n, err);
    if (st)
        ckv_error_prefix(err, "synth: tensor '%s'", t->name);
    return st;
}

/* ---- options ---- */

void ckv_synth_defaults(ckv_synth_opts *o)
{
    memset(o, 0, sizeof *o);
    o->arch = "llama";
    o->n_vocab = 512;
    o->n_ctx = 2048;
    o->seed = 1;
    o->type = GGML_F32;
    o->rope_freq_base = 10000.0f;
    o->rms_eps = 1e-5f;
    o->std = 0.02f;
}

static ckv_status check_opts(const ckv_synth_opts *o, uint32_t *hd, ckv_error *err)
{
    if (!o->arch || (strcmp(o->arch, "llama") && strcmp(o->arch, "qwen2") && strcmp(o->arch, "qwen3")))
        return ckv_errorf(err, CKV_ERR_ARG, "synth: arch '%s' is not llama, qwen2 or qwen3",
                          o->arch ? o->arch : "(null)");
    if (!o->n_layer || !o->n_embd || !o->n_head || !o->n_head_kv || !o->n_ff || !o->n_ctx)
        return ckv_errorf(err, CKV_ERR_ARG,
                          "synth: layers, hidden, heads, kv-heads, ff and ctx must all be >= 1");
    if (o->n_head % o->n_head_kv)
        return ckv_errorf(err, CKV_ERR_ARG, "synth: heads %u is not a multiple of kv-heads %u",
                          o->n_head, o->n_head_kv);
    if (!o->head_dim && o->n_embd % o->n_head)
        return ckv_errorf(err, CKV_ERR_ARG,
                          "synth: hidden %u is not a multiple of heads %u (give --head-dim)",
                          o->n_embd, o->n_head);
    *hd = o->head_dim ? o->head_dim : o->n_embd / o->n_head;
    if (*hd % 2)
        return ckv_errorf(err, CKV_ERR_ARG, "synth: head_dim %u must be even for RoPE", *hd);
    if (o->n_vocab < ckv_synth_min_vocab())
        return ckv_errorf(err, CKV_ERR_ARG, "synth: vocab %u is below the minimum %u", o->n_vocab,
                          ckv_synth_min_vocab());
    uint32_t t = o->type;
    if (t != GGML_F32 && t != GGML_F16 && t != GGML_BF16 && t != GGML_Q8_0 && t != GGML_Q4_0 &&
        t != GGML_Q4_1)
        return ckv_errorf(err, CKV_ERR_ARG, "synth: type %s is not one of f32, f16, bf16, q8_0, "
                          "q4_0, q4_1", ggml_type_name(t));
    if (!(o->rope_freq_base > 0.0f) || !(o->rms_eps > 0.0f))
        return ckv_errorf(err, CKV_ERR_ARG, "synth: rope freq_base and rms eps must be > 0");
    return CKV_OK;
}

static uint32_t file_type(uint32_t t)
{
    switch (t) {
    case GGML_F16: return 1;
    case GGML_Q4_0: return 2;
    case GGML_Q4_1: return 3;
    case GGML_Q8_0: return 7;
    case GGML_BF16: return 32;
    default: return 0;
    }
}

static void put_metadata(outbuf *b, const ckv_synth_opts *o, uint32_t hd)
{
    const char *a = o->arch;
    char key[96];
    kv_str(b, "general.architecture", a);
    kv_str(b, "general.name", "ckv-synth");
    kv_u32(b, "general.file_type", file_type(o->type));
    if (ggml_block_elems(o->type) > 1)
        kv_u32(b, "general.quantization_version", 2);
    kv_arch_u32(b, a, "context_length", o->n_ctx);
    kv_arch_u32(b, a, "embedding_length", o->n_embd);
    kv_arch_u32(b, a, "block_count", o->n_layer);
    kv_arch_u32(b, a, "feed_forward_length", o->n_ff);
    kv_arch_u32(b, a, "attention.head_count", o->n_head);
    kv_arch_u32(b, a, "attention.head_count_kv", o->n_head_kv);
    if (hd * o->n_head != o->n_embd) {
        kv_arch_u32(b, a, "attention.key_length", hd);
        kv_arch_u32(b, a, "attention.value_length", hd);
    }
    kv_arch_u32(b, a, "rope.dimension_count", hd);
    kv_arch_u32(b, a, "vocab_size", o->n_vocab);
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", a);
    kv_f32(b, key, o->rms_eps);
    snprintf(key, sizeof key, "%s.rope.freq_base", a);
    kv_f32(b, key, o->rope_freq_base);
    put_tokenizer(b, o->n_vocab);
}

enum { ALIGN = 32 };

ckv_status ckv_synth_build(const ckv_synth_opts *o, uint8_t **out, size_t *len, ckv_error *err)
{
    uint32_t hd = 0;
    ckv_status st = check_opts(o, &hd, err);
    if (st)
        return st;
    tensor_list l = {0};
    float *tmp = NULL;
    outbuf b = {0};
    if ((st = add_tensor(&l, "token_embd.weight", o->n_embd, o->n_vocab, o->type, INIT_MATRIX, err)))
        goto done;
    for (uint32_t i = 0; i < o->n_layer; i++)
        if ((st = add_layer(&l, o, i, hd, err)))
            goto done;
    if ((st = add_tensor(&l, "output_norm.weight", o->n_embd, 0, GGML_F32, INIT_NORM, err)))
        goto done;
    if (o->untied &&
        (st = add_tensor(&l, "output.weight", o->n_embd, o->n_vocab, o->type, INIT_MATRIX, err)))
        goto done;

    uint64_t off = 0, max_elems = 0;
    for (size_t i = 0; i < l.n; i++) {
        l.t[i].offset = off;
        uint64_t end;
        if (!ckv_add_u64(off, l.t[i].nbytes, &end) || !ckv_add_u64(end, ALIGN, &end) ||
            end > SIZE_MAX / 2) {
            st = ckv_errorf(err, CKV_ERR_ARG, "synth: model size overflows");
            goto done;
        }
        off = (end - 1) / ALIGN * ALIGN;
        uint64_t n = l.t[i].ne[0] * l.t[i].ne[1];
        max_elems = n > max_elems ? n : max_elems;
    }
    tmp = malloc((size_t)max_elems * sizeof *tmp);
    if (!tmp) {
        st = ckv_errorf(err, CKV_ERR_NOMEM, "synth: out of memory for %llu elements",
                        (unsigned long long)max_elems);
        goto done;
    }

    put_le(&b, 0x46554747, 4); /* "GGUF" */
    put_le(&b, 3, 4);
    put_le(&b, l.n, 8);
    size_t n_kv_at = b.n;
    put_le(&b, 0, 8);
    put_metadata(&b, o, hd);
    if (!b.oom)
        for (int k = 0; k < 8; k++)
            b.p[n_kv_at + k] = (uint8_t)(b.n_kv >> (8 * k));
    for (size_t i = 0; i < l.n; i++) {
        put_str(&b, l.t[i].name);
        put_le(&b, l.t[i].n_dims, 4);
        for (uint32_t d = 0; d < l.t[i].n_dims; d++)
            put_le(&b, l.t[i].ne[d], 8);
        put_le(&b, l.t[i].type, 4);
        put_le(&b, l.t[i].offset, 8);
    }
    put_zeros(&b, (ALIGN - b.n % ALIGN) % ALIGN);
    size_t data = b.n;
    for (size_t i = 0; i < l.n && !b.oom; i++) {
        put_zeros(&b, data + l.t[i].offset - b.n); /* inter-tensor padding */
        uint8_t *at = reserve(&b, (size_t)l.t[i].nbytes);
        if (at && (st = fill_tensor(&l.t[i], o->seed, o->std, tmp, at, err)))
            goto done;
    }
    if (b.oom) {
        st = ckv_errorf(err, CKV_ERR_NOMEM, "synth: out of memory building the file");
        goto done;
    }
    *out = b.p;
    *len = b.n;
    b.p = NULL;
done:
    free(b.p);
    free(tmp);
    free(l.t);
    return st;
}

ckv_status ckv_synth_write(const ckv_synth_opts *o, const char *path, ckv_error *err)
{
    uint8_t *p;
    size_t n;
    ckv_status st = ckv_synth_build(o, &p, &n, err);
    if (st)
        return st;
    st = ckv_write_file_atomic(path, p, n, err);
    free(p);
    return st;
}
