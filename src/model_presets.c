/* Values from each model's published config.json. */
#include "model_presets.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    const char *name;
    ckv_config cfg;
} preset;

/* arch, layers, embd, heads, kv heads, head dim, ff, vocab, ctx, rot, rope base, freq scale,
 * eps, rope type, qkv bias, qk norm, tied, rope_freqs */
static const preset presets[] = {
    {"llama3.1-8b", {CKV_ARCH_LLAMA, 32, 4096, 32, 8, 128, 14336, 128256, 131072, 128, 500000.0f,
                     1.0f, 1e-5f, CKV_ROPE_NORM, false, false, false, false}},
    /* Mistral-7B v0.3 (32768 vocabulary) */
    {"mistral-7b", {CKV_ARCH_LLAMA, 32, 4096, 32, 8, 128, 14336, 32768, 32768, 128, 1000000.0f,
                    1.0f, 1e-5f, CKV_ROPE_NORM, false, false, false, false}},
    {"smollm2-135m", {CKV_ARCH_LLAMA, 30, 576, 9, 3, 64, 1536, 49152, 8192, 64, 100000.0f, 1.0f,
                      1e-5f, CKV_ROPE_NORM, false, false, true, false}},
};
#define N_PRESETS (sizeof presets / sizeof presets[0])

const char *const *ckv_model_preset_names(void)
{
    static const char *names[N_PRESETS + 1];
    for (size_t i = 0; i < N_PRESETS; i++)
        names[i] = presets[i].name;
    return names;
}

ckv_status ckv_model_preset(const char *name, ckv_config *c, ckv_error *err)
{
    for (size_t i = 0; i < N_PRESETS; i++)
        if (!strcmp(name, presets[i].name)) {
            *c = presets[i].cfg;
            return CKV_OK;
        }
    char known[256] = "";
    for (size_t i = 0; i < N_PRESETS; i++)
        snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "",
                 presets[i].name);
    return ckv_errorf(err, CKV_ERR_ARG, "unknown model shape '%s' (known: %s)", name, known);
}

uint64_t ckv_config_matrix_params(const ckv_config *c)
{
    const uint64_t E = (uint64_t)c->n_embd, hd = (uint64_t)c->head_dim, H = (uint64_t)c->n_head,
                   KV = (uint64_t)c->n_head_kv, F = (uint64_t)c->n_ff;
    const uint64_t layer = (H + 2 * KV) * hd * E + E * H * hd + 3 * F * E;
    return (uint64_t)c->n_layer * layer + (uint64_t)c->n_vocab * E;
}
