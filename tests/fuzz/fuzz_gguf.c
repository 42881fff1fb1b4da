/* libFuzzer target: parse arbitrary bytes as GGUF, then use everything the
 * parse returned (typed getters on every key, dequantisation of every
 * supported tensor). Any crash, sanitizer report or leak is a bug. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "quant.h"

static void exercise_key(const gguf_file *f, const gguf_kv *kv)
{
    char key[128];
    size_t n = kv->key.len < sizeof key - 1 ? (size_t)kv->key.len : sizeof key - 1;
    memcpy(key, kv->key.ptr, n);
    key[n] = 0;
    ckv_error e;
    int64_t i;
    double d;
    bool b;
    gguf_str s;
    uint64_t cnt;
    gguf_get_int(f, key, &i, &e);
    gguf_get_float(f, key, &d, &e);
    gguf_get_bool(f, key, &b, &e);
    gguf_get_str(f, key, &s, &e);
    gguf_str *ss;
    if (gguf_get_str_array(f, key, &ss, &cnt, &e) == CKV_OK)
        free(ss);
    float *fv;
    if (gguf_get_f32_array(f, key, &fv, &cnt, &e) == CKV_OK)
        free(fv);
    int32_t *iv;
    if (gguf_get_i32_array(f, key, &iv, &cnt, &e) == CKV_OK)
        free(iv);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    gguf_file f;
    ckv_error e;
    if (gguf_parse(&f, data, size, &e) != CKV_OK)
        return 0;
    for (uint64_t k = 0; k < f.n_kv; k++)
        exercise_key(&f, &f.kv[k]);
    for (uint64_t t = 0; t < f.n_tensors; t++) {
        const gguf_tensor *ti = &f.tensors[t];
        if (!ggml_type_supported(ti->type))
            continue;
        /* Tensor bytes lie inside the input, so nelem is at most a few
         * times its size. */
        float *y = malloc((size_t)ti->nelem * sizeof *y);
        if (y) {
            ckv_dequantize(ti->type, ti->data, y, ti->nelem, &e);
            free(y);
        }
    }
    gguf_close(&f);
    return 0;
}
