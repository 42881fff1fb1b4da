#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant.h"

const char *ckv_arch_name(ckv_arch a)
{
    switch (a) {
    case CKV_ARCH_LLAMA: return "llama";
    case CKV_ARCH_QWEN2: return "qwen2";
    case CKV_ARCH_QWEN3: return "qwen3";
    }
    return "?";
}

/* Reads "<arch>.<suffix>" as an integer in [lo, hi]; def < lo means required. */
static ckv_status arch_int(const gguf_file *f, const char *arch, const char *suffix, int64_t def,
                           int64_t lo, int64_t hi, int32_t *out, ckv_error *err)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int64_t v = def;
    if (gguf_find(f, key)) {
        ckv_status st = gguf_get_int(f, key, &v, err);
        if (st)
            return st;
    } else if (def < lo) {
        return ckv_errorf(err, CKV_ERR_FORMAT, "metadata key %s is missing", key);
    }
    if (v < lo || v > hi)
        return ckv_errorf(err, CKV_ERR_FORMAT, "metadata %s = %lld is out of range [%lld, %lld]",
                          key, (long long)v, (long long)lo, (long long)hi);
    *out = (int32_t)v;
    return CKV_OK;
}

static ckv_status arch_float(const gguf_file *f, const char *arch, const char *suffix, double def,
                             bool required, float *out, ckv_error *err)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    double v = def;
    if (gguf_find(f, key)) {
        ckv_status st = gguf_get_float(f, key, &v, err);
        if (st)
            return st;
    } else if (required) {
        return ckv_errorf(err, CKV_ERR_FORMAT, "metadata key %s is missing", key);
    }
    if (!isfinite(v) || v <= 0)
        return ckv_errorf(err, CKV_ERR_FORMAT, "metadata %s = %g must be positive and finite", key,
                          v);
    *out = (float)v;
    return CKV_OK;
}

ckv_status ckv_config_from_gguf(ckv_config *c, const gguf_file *f, ckv_error *err)
{
    memset(c, 0, sizeof *c);
    gguf_str a;
    ckv_status st = gguf_get_str(f, "general.architecture", &a, err);
    if (st)
        return st;
    const char *arch;
    if (gguf_str_eq(a, "llama")) {
        c->arch = CKV_ARCH_LLAMA;
        c->rope_type = CKV_ROPE_NORM;
    } else if (gguf_str_eq(a, "qwen2")) {
        c->arch = CKV_ARCH_QWEN2;
        c->rope_type = CKV_ROPE_NEOX;
        c->qkv_bias = true;
    } else if (gguf_str_eq(a, "qwen3")) {
        c->arch = CKV_ARCH_QWEN3;
        c->rope_type = CKV_ROPE_NEOX;
        c->qk_norm = true;
    } else {
        return ckv_errorf(err, CKV_ERR_UNSUPPORTED,
                          "general.architecture '%.*s' is not supported (llama, qwen2, qwen3)",
                          (int)(a.len > 64 ? 64 : a.len), a.ptr);
    }
    arch = ckv_arch_name(c->arch);
    const int64_t big = 1 << 20;
    if ((st = arch_int(f, arch, "block_count", -1, 1, 4096, &c->n_layer, err)) ||
        (st = arch_int(f, arch, "embedding_length", -1, 1, big, &c->n_embd, err)) ||
        (st = arch_int(f, arch, "feed_forward_length", -1, 1, big, &c->n_ff, err)) ||
        (st = arch_int(f, arch, "attention.head_count", -1, 1, 4096, &c->n_head, err)))
        return st;
    if ((st = arch_int(f, arch, "attention.head_count_kv", c->n_head, 1, c->n_head, &c->n_head_kv,
                       err)))
        return st;
    if (c->n_head % c->n_head_kv)
        return ckv_errorf(err, CKV_ERR_FORMAT,
                          "%s.attention.head_count %d is not a multiple of head_count_kv %d", arch,
                          c->n_head, c->n_head_kv);
    int32_t vlen;
    if ((st = arch_int(f, arch, "attention.key_length", c->n_embd / c->n_head, 2, 4096,
                       &c->head_dim, err)) ||
        (st = arch_int(f, arch, "attention.value_length", c->head_dim, 1, 4096, &vlen, err)))
        return st;
    if (vlen != c->head_dim)
        return ckv_errorf(err, CKV_ERR_UNSUPPORTED,
                          "%s.attention.value_length %d differs from key_length %d", arch, vlen,
                          c->head_dim);
    if ((st = arch_int(f, arch, "rope.dimension_count", c->head_dim, 2, 4096, &c->n_rot, err)))
        return st;
    if (c->n_rot != c->head_dim)
        return ckv_errorf(err, CKV_ERR_UNSUPPORTED,
                          "%s.rope.dimension_count %d differs from head dim %d (partial rotary)",
                          arch, c->n_rot, c->head_dim);
    if (c->head_dim % 2)
        return ckv_errorf(err, CKV_ERR_FORMAT, "head dim %d is odd", c->head_dim);
    if ((st = arch_int(f, arch, "context_length", 2048, 1, INT32_MAX, &c->n_ctx, err)) ||
        (st = arch_float(f, arch, "rope.freq_base", 10000.0, false, &c->rope_base, err)) ||
        (st = arch_float(f, arch, "attention.layer_norm_rms_epsilon", 0, true, &c->rms_eps, err)))
        return st;

    c->rope_freq_scale = 1.0f;
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    if (gguf_find(f, key)) {
        gguf_str t;
        if ((st = gguf_get_str(f, key, &t, err)))
            return st;
        if (gguf_str_eq(t, "linear")) {
            float factor;
            if ((st = arch_float(f, arch, "rope.scaling.factor", 0, true, &factor, err)))
                return st;
            c->rope_freq_scale = 1.0f / factor;
        } else if (!gguf_str_eq(t, "none")) {
            return ckv_errorf(err, CKV_ERR_UNSUPPORTED, "%s '%.*s' is not supported (none, linear)",
                              key, (int)(t.len > 32 ? 32 : t.len), t.ptr);
        }
    } else {
        snprintf(key, sizeof key, "%s.rope.scale_linear", arch);
        if (gguf_find(f, key)) {
            float factor;
            if ((st = arch_float(f, arch, "rope.scale_linear", 0, true, &factor, err)))
                return st;
            c->rope_freq_scale = 1.0f / factor;
        }
    }

    const gguf_tensor *emb = gguf_find_tensor(f, "token_embd.weight");
    if (!emb)
        return ckv_errorf(err, CKV_ERR_FORMAT, "tensor token_embd.weight is missing");
    if (emb->ne[1] < 1 || emb->ne[1] > INT32_MAX)
        return ckv_errorf(err, CKV_ERR_FORMAT, "token_embd.weight: vocabulary %llu out of range",
                          (unsigned long long)emb->ne[1]);
    c->n_vocab = (int32_t)emb->ne[1];
    c->tied = gguf_find_tensor(f, "output.weight") == NULL;
    c->has_rope_freqs = gguf_find_tensor(f, "rope_freqs.weight") != NULL;
    return CKV_OK;
}

/* Loads a tensor with exactly the expected shape, dequantised to fp32. */
static ckv_status load_tensor(const gguf_file *f, const char *name, int64_t ne0, int64_t ne1,
                              bool optional, float **out, uint64_t *n_params, ckv_error *err)
{
    *out = NULL;
    const gguf_tensor *t = gguf_find_tensor(f, name);
    if (!t) {
        if (optional)
            return CKV_OK;
        return ckv_errorf(err, CKV_ERR_FORMAT, "tensor %s is missing", name);
    }
    uint64_t want_dims = ne1 > 1 ? 2 : 1;
    if (t->ne[0] != (uint64_t)ne0 || t->ne[1] != (uint64_t)ne1 || t->ne[2] != 1 || t->ne[3] != 1 ||
        t->n_dims > 2 || (t->n_dims < want_dims && ne1 > 1))
        return ckv_errorf(err, CKV_ERR_FORMAT,
                          "tensor %s has shape [%llu, %llu, %llu, %llu], expected [%lld, %lld]",
                          name, (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                          (unsigned long long)t->ne[2], (unsigned long long)t->ne[3],
                          (long long)ne0, (long long)ne1);
    float *buf = malloc(t->nelem * sizeof(float));
    if (!buf)
        return ckv_errorf(err, CKV_ERR_NOMEM, "tensor %s: out of memory (%llu elements)", name,
                          (unsigned long long)t->nelem);
    ckv_status st = ckv_dequantize(t->type, t->data, buf, t->nelem, err);
    if (st) {
        free(buf);
        return ckv_error_prefix(err, "tensor %s", name);
    }
    for (uint64_t i = 0; i < t->nelem; i++)
        if (!isfinite(buf[i])) {
            free(buf);
            return ckv_errorf(err, CKV_ERR_NUMERIC, "tensor %s: element %llu is not finite", name,
                              (unsigned long long)i);
        }
    *n_params += t->nelem;
    *out = buf;
    return CKV_OK;
}

static ckv_status load_layer(ckv_model *m, int il, ckv_error *err)
{
    const ckv_config *c = &m->cfg;
    const gguf_file *f = &m->gguf;
    ckv_layer *L = &m->layers[il];
    int64_t qd = (int64_t)c->n_head * c->head_dim, kvd = (int64_t)c->n_head_kv * c->head_dim;
    struct {
        const char *suffix;
        int64_t ne0, ne1;
        bool present;
        float **dst;
    } spec[] = {
        {"attn_norm.weight", c->n_embd, 1, true, &L->attn_norm},
        {"attn_q.weight", c->n_embd, qd, true, &L->wq},
        {"attn_k.weight", c->n_embd, kvd, true, &L->wk},
        {"attn_v.weight", c->n_embd, kvd, true, &L->wv},
        {"attn_output.weight", qd, c->n_embd, true, &L->wo},
        {"attn_q.bias", qd, 1, c->qkv_bias, &L->bq},
        {"attn_k.bias", kvd, 1, c->qkv_bias, &L->bk},
        {"attn_v.bias", kvd, 1, c->qkv_bias, &L->bv},
        {"attn_q_norm.weight", c->head_dim, 1, c->qk_norm, &L->q_norm},
        {"attn_k_norm.weight", c->head_dim, 1, c->qk_norm, &L->k_norm},
        {"ffn_norm.weight", c->n_embd, 1, true, &L->ffn_norm},
        {"ffn_gate.weight", c->n_embd, c->n_ff, true, &L->w_gate},
        {"ffn_up.weight", c->n_embd, c->n_ff, true, &L->w_up},
        {"ffn_down.weight", c->n_ff, c->n_embd, true, &L->w_down},
    };
    for (size_t i = 0; i < sizeof spec / sizeof spec[0]; i++) {
        if (!spec[i].present)
            continue;
        char name[96];
        snprintf(name, sizeof name, "blk.%d.%s", il, spec[i].suffix);
        ckv_status st = load_tensor(f, name, spec[i].ne0, spec[i].ne1, false, spec[i].dst,
                                    &m->n_params, err);
        if (st)
            return st;
    }
    return CKV_OK;
}

ckv_status ckv_model_load(ckv_model *m, const char *path, ckv_error *err)
{
    memset(m, 0, sizeof *m);
    ckv_status st = gguf_open(&m->gguf, path, err);
    if (st)
        return st;
    m->file_bytes = m->gguf.size;
    m->path = strdup(path);
    if (!m->path) {
        st = ckv_errorf(err, CKV_ERR_NOMEM, "%s: out of memory", path);
        goto fail;
    }
    if ((st = ckv_config_from_gguf(&m->cfg, &m->gguf, err)))
        goto fail;
    const ckv_config *c = &m->cfg;
    m->layers = calloc((size_t)c->n_layer, sizeof *m->layers);
    if (!m->layers) {
        st = ckv_errorf(err, CKV_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if ((st = load_tensor(&m->gguf, "token_embd.weight", c->n_embd, c->n_vocab, false,
                          &m->tok_embd, &m->n_params, err)) ||
        (st = load_tensor(&m->gguf, "output_norm.weight", c->n_embd, 1, false, &m->output_norm,
                          &m->n_params, err)) ||
        (st = load_tensor(&m->gguf, "output.weight", c->n_embd, c->n_vocab, true, &m->output,
                          &m->n_params, err)) ||
        (st = load_tensor(&m->gguf, "rope_freqs.weight", c->n_rot / 2, 1, true, &m->rope_freqs,
                          &m->n_params, err)))
        goto fail;
    if (!m->output)
        m->output = m->tok_embd;
    if (m->rope_freqs)
        for (int i = 0; i < c->n_rot / 2; i++)
            if (!(m->rope_freqs[i] > 0)) {
                st = ckv_errorf(err, CKV_ERR_FORMAT, "rope_freqs.weight[%d] = %g is not positive",
                                i, m->rope_freqs[i]);
                goto fail;
            }
    for (int il = 0; il < c->n_layer; il++)
        if ((st = load_layer(m, il, err)))
            goto fail;
    return CKV_OK;
fail:
    ckv_error_prefix(err, "%s", path);
    ckv_model_free(m);
    return st;
}

void ckv_model_free(ckv_model *m)
{
    if (m->layers) {
        for (int il = 0; il < m->cfg.n_layer; il++) {
            ckv_layer *L = &m->layers[il];
            float *all[] = {L->attn_norm, L->wq, L->wk, L->wv, L->wo, L->bq, L->bk,
                            L->bv, L->q_norm, L->k_norm, L->ffn_norm, L->w_gate, L->w_up, L->w_down};
            for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
                free(all[i]);
        }
        free(m->layers);
    }
    if (m->output != m->tok_embd)
        free(m->output);
    free(m->tok_embd);
    free(m->output_norm);
    free(m->rope_freqs);
    free(m->path);
    gguf_close(&m->gguf);
    memset(m, 0, sizeof *m);
}
