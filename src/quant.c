/* ggml block formats: geometry, dequantisation (formats.md section 2) and
 * the reference round-to-nearest quantisers used by `ckv synth`. */
#include "quant.h"

#include <math.h>
#include <string.h>

#include "util.h"

typedef struct {
    const char *name;
    uint32_t elems, bytes;
    bool supported;
} type_info;

/* Sizes from ggml-common.h; types we only parse have supported = false. */
static const type_info types[GGML_TYPE_COUNT] = {
    [GGML_F32] = {"F32", 1, 4, true},
    [GGML_F16] = {"F16", 1, 2, true},
    [GGML_Q4_0] = {"Q4_0", 32, 18, true},
    [GGML_Q4_1] = {"Q4_1", 32, 20, true},
    [GGML_Q5_0] = {"Q5_0", 32, 22, true},
    [GGML_Q5_1] = {"Q5_1", 32, 24, true},
    [GGML_Q8_0] = {"Q8_0", 32, 34, true},
    [GGML_Q8_1] = {"Q8_1", 32, 36, false},
    [GGML_Q2_K] = {"Q2_K", 256, 84, false},
    [GGML_Q3_K] = {"Q3_K", 256, 110, false},
    [GGML_Q4_K] = {"Q4_K", 256, 144, true},
    [GGML_Q5_K] = {"Q5_K", 256, 176, true},
    [GGML_Q6_K] = {"Q6_K", 256, 210, true},
    [GGML_Q8_K] = {"Q8_K", 256, 292, false},
    [16] = {"IQ2_XXS", 256, 66, false},
    [17] = {"IQ2_XS", 256, 74, false},
    [18] = {"IQ3_XXS", 256, 98, false},
    [19] = {"IQ1_S", 256, 50, false},
    [GGML_IQ4_NL] = {"IQ4_NL", 32, 18, true},
    [21] = {"IQ3_S", 256, 110, false},
    [22] = {"IQ2_S", 256, 82, false},
    [23] = {"IQ4_XS", 256, 136, false},
    [24] = {"I8", 1, 1, false},
    [25] = {"I16", 1, 2, false},
    [26] = {"I32", 1, 4, false},
    [27] = {"I64", 1, 8, false},
    [28] = {"F64", 1, 8, false},
    [29] = {"IQ1_M", 256, 56, false},
    [GGML_BF16] = {"BF16", 1, 2, true},
    [34] = {"TQ1_0", 256, 54, false},
    [35] = {"TQ2_0", 256, 66, false},
    [39] = {"MXFP4", 32, 17, false},
};

static const type_info *info(uint32_t type)
{
    return type < GGML_TYPE_COUNT && types[type].elems ? &types[type] : NULL;
}

uint32_t ggml_block_elems(uint32_t type)
{
    const type_info *t = info(type);
    return t ? t->elems : 0;
}

uint32_t ggml_block_bytes(uint32_t type)
{
    const type_info *t = info(type);
    return t ? t->bytes : 0;
}

bool ggml_type_supported(uint32_t type)
{
    const type_info *t = info(type);
    return t && t->supported;
}

const char *ggml_type_name(uint32_t type)
{
    const type_info *t = info(type);
    return t ? t->name : "unknown";
}

bool ggml_row_bytes(uint32_t type, uint64_t n, uint64_t *bytes)
{
    const type_info *t = info(type);
    if (!t || n % t->elems)
        return false;
    return ckv_mul_u64(n / t->elems, t->bytes, bytes);
}

/* ---- IEEE half / bfloat16 ---- */

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

float ckv_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1F, frac = h & 0x3FF;
    if (exp == 0) {
        /* Zero or subnormal: frac * 2^-24 is exact in binary32. */
        float v = ldexpf((float)frac, -24);
        return sign ? -v : v;
    }
    if (exp == 31)
        return bits_f32(sign | 0x7F800000u | (frac << 13));
    return bits_f32(sign | ((exp + 112) << 23) | (frac << 13));
}

uint16_t ckv_f32_to_f16(float f)
{
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t exp = (u >> 23) & 0xFF, frac = u & 0x7FFFFF;
    if (exp == 0xFF) /* inf stays inf; NaN keeps a quiet payload bit */
        return sign | 0x7C00 | (frac ? 0x200 | (uint16_t)(frac >> 13) : 0);
    int e = (int)exp - 127 + 15;
    if (e >= 31)
        return sign | 0x7C00;
    uint32_t mant, shift;
    if (e <= 0) {
        /* Subnormal half: shift the full 24-bit significand so that one
         * unit is 2^-24, rounding to nearest even below. */
        if (e < -10)
            return sign; /* below half the smallest subnormal */
        mant = frac | 0x800000;
        shift = (uint32_t)(14 - e);
    } else {
        mant = frac;
        shift = 13;
    }
    uint32_t q = mant >> shift, rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1)))
        q++;
    /* For normals a carry out of the fraction correctly bumps the exponent
     * (and 0x7BFF + 1 becomes infinity). */
    if (e <= 0)
        return sign | (uint16_t)q;
    return sign | (uint16_t)(((uint32_t)e << 10) + q);
}

float ckv_bf16_to_f32(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

uint16_t ckv_f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7FFFFFFF) > 0x7F800000) /* NaN: keep it NaN after truncation */
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7FFF + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

/* ---- dequantisers: one block each, src already advanced ---- */

static float rd_f16(const uint8_t *p)
{
    return ckv_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
}

static void wr_f16(uint8_t *p, float f)
{
    uint16_t h = ckv_f32_to_f16(f);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

static uint32_t rd_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void dq_q4_0(const uint8_t *b, float *y)
{
    float d = rd_f16(b);
    for (int j = 0; j < 16; j++) {
        y[j] = (float)((b[2 + j] & 0xF) - 8) * d;
        y[j + 16] = (float)((b[2 + j] >> 4) - 8) * d;
    }
}

static void dq_q4_1(const uint8_t *b, float *y)
{
    float d = rd_f16(b), m = rd_f16(b + 2);
    for (int j = 0; j < 16; j++) {
        y[j] = (float)(b[4 + j] & 0xF) * d + m;
        y[j + 16] = (float)(b[4 + j] >> 4) * d + m;
    }
}

/* Q5_0 and Q5_1 share the 5-bit unpacking; Q5_0 centres by -16, Q5_1 adds m. */
static void dq_q5(const uint8_t *qh_p, const uint8_t *qs, float d, float m, int centre, float *y)
{
    uint32_t qh = rd_u32(qh_p);
    for (int j = 0; j < 16; j++) {
        int lo = (qs[j] & 0xF) | (int)((qh >> j) & 1) << 4;
        int hi = (qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
        y[j] = (float)(lo - centre) * d + m;
        y[j + 16] = (float)(hi - centre) * d + m;
    }
}

static void dq_q8_0(const uint8_t *b, float *y)
{
    float d = rd_f16(b);
    for (int j = 0; j < 32; j++)
        y[j] = (float)(int8_t)b[2 + j] * d;
}

static const int8_t iq4nl_table[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                       1,    13,   25,  38,  53,  69,  89,  113};

static void dq_iq4_nl(const uint8_t *b, float *y)
{
    float d = rd_f16(b);
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)iq4nl_table[b[2 + j] & 0xF];
        y[j + 16] = d * (float)iq4nl_table[b[2 + j] >> 4];
    }
}

/* 6-bit scale and minimum of sub-block i from the 12-byte K-quant packing. */
static void k_scale_min(int i, const uint8_t *s, int *sc, int *mn)
{
    if (i < 4) {
        *sc = s[i] & 63;
        *mn = s[i + 4] & 63;
    } else {
        *sc = (s[i + 4] & 0xF) | ((s[i - 4] >> 6) << 4);
        *mn = (s[i + 4] >> 4) | ((s[i] >> 6) << 4);
    }
}

/* Q4_K and Q5_K differ only in the fifth bit, taken from qh (NULL for Q4_K). */
static void dq_q45_k(const uint8_t *b, const uint8_t *qh, const uint8_t *qs, float *y)
{
    float d = rd_f16(b), dmin = rd_f16(b + 2);
    const uint8_t *scales = b + 4;
    for (int c = 0; c < 4; c++) {
        int sc0, mn0, sc1, mn1;
        k_scale_min(2 * c, scales, &sc0, &mn0);
        k_scale_min(2 * c + 1, scales, &sc1, &mn1);
        float d0 = d * (float)sc0, m0 = dmin * (float)mn0;
        float d1 = d * (float)sc1, m1 = dmin * (float)mn1;
        const uint8_t *ql = qs + 32 * c;
        for (int l = 0; l < 32; l++) {
            int lo = ql[l] & 0xF, hi = ql[l] >> 4;
            if (qh) {
                lo += (qh[l] >> (2 * c)) & 1 ? 16 : 0;
                hi += (qh[l] >> (2 * c + 1)) & 1 ? 16 : 0;
            }
            y[64 * c + l] = d0 * (float)lo - m0;
            y[64 * c + 32 + l] = d1 * (float)hi - m1;
        }
    }
}

static void dq_q6_k(const uint8_t *b, float *y)
{
    float d = rd_f16(b + 208);
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = b + 64 * h, *qh = b + 128 + 32 * h;
        const int8_t *sc = (const int8_t *)(b + 192 + 8 * h);
        float *o = y + 128 * h;
        for (int l = 0; l < 32; l++) {
            int is = l / 16;
            int q1 = ((ql[l] & 0xF) | ((qh[l] >> 0) & 3) << 4) - 32;
            int q2 = ((ql[l + 32] & 0xF) | ((qh[l] >> 2) & 3) << 4) - 32;
            int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
            int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
            o[l] = d * (float)sc[is + 0] * (float)q1;
            o[l + 32] = d * (float)sc[is + 2] * (float)q2;
            o[l + 64] = d * (float)sc[is + 4] * (float)q3;
            o[l + 96] = d * (float)sc[is + 6] * (float)q4;
        }
    }
}

static void dq_block(uint32_t type, const uint8_t *b, float *y)
{
    switch (type) {
    case GGML_F32: memcpy(y, b, 4); break;
    case GGML_F16: y[0] = rd_f16(b); break;
    case GGML_BF16: y[0] = ckv_bf16_to_f32((uint16_t)(b[0] | b[1] << 8)); break;
    case GGML_Q4_0: dq_q4_0(b, y); break;
    case GGML_Q4_1: dq_q4_1(b, y); break;
    case GGML_Q5_0: dq_q5(b + 2, b + 6, rd_f16(b), 0.0f, 16, y); break;
    case GGML_Q5_1: dq_q5(b + 4, b + 8, rd_f16(b), rd_f16(b + 2), 0, y); break;
    case GGML_Q8_0: dq_q8_0(b, y); break;
    case GGML_IQ4_NL: dq_iq4_nl(b, y); break;
    case GGML_Q4_K: dq_q45_k(b, NULL, b + 16, y); break;
    case GGML_Q5_K: dq_q45_k(b, b + 16, b + 48, y); break;
    case GGML_Q6_K: dq_q6_k(b, y); break;
    default: break; /* unreachable: callers check ggml_type_supported */
    }
}

/* Checks type and n shared by both directions. */
static ckv_status check_n(uint32_t type, uint64_t n, const char *what, ckv_error *err)
{
    const type_info *t = info(type);
    if (!t)
        return ckv_errorf(err, CKV_ERR_UNSUPPORTED, "%s: unknown tensor type %u", what, type);
    if (!t->supported)
        return ckv_errorf(err, CKV_ERR_UNSUPPORTED, "%s: tensor type %s (%u) is not supported",
                          what, t->name, type);
    if (n % t->elems)
        return ckv_errorf(err, CKV_ERR_ARG,
                          "%s: %llu elements is not a multiple of the %s block size %u", what,
                          (unsigned long long)n, t->name, t->elems);
    return CKV_OK;
}

ckv_status ckv_dequantize(uint32_t type, const void *src, float *dst, uint64_t n, ckv_error *err)
{
    ckv_status st = check_n(type, n, "dequantize", err);
    if (st)
        return st;
    const type_info *t = info(type);
    const uint8_t *b = src;
    if (type == GGML_F32) {
        memcpy(dst, src, n * 4);
        return CKV_OK;
    }
    for (uint64_t i = 0; i < n / t->elems; i++)
        dq_block(type, b + i * t->bytes, dst + i * t->elems);
    return CKV_OK;
}

/* ---- quantisers ----
 * These follow ggml's *_ref quantisers (round to nearest, one scale per
 * block from the block's extreme values):
 *  Q8_0: d = max|x| / 127, q = round(x / d) (roundf: halves away from zero).
 *  Q4_0: d = -m / 8 where m is the signed value of largest magnitude, so m
 *        maps to code 0 exactly; q = min(15, trunc(x / d + 8.5)), i.e. round
 *        half up of x / d + 8.
 *  Q4_1: d = (max - min) / 15, m = min; q = min(15, trunc((x - min) / d + 0.5)).
 * A zero scale (constant-zero block) stores d = 0 and all codes at the
 * centre, as ggml does. */

static void q_q8_0(const float *x, uint8_t *b)
{
    float amax = 0.0f;
    for (int j = 0; j < 32; j++)
        amax = fmaxf(amax, fabsf(x[j]));
    float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    wr_f16(b, d);
    for (int j = 0; j < 32; j++)
        b[2 + j] = (uint8_t)(int8_t)roundf(x[j] * id);
}

static void q_q4_0(const float *x, uint8_t *b)
{
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; j++)
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    float d = max / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    wr_f16(b, d);
    for (int j = 0; j < 16; j++) {
        int q0 = (int)(x[j] * id + 8.5f), q1 = (int)(x[j + 16] * id + 8.5f);
        q0 = q0 > 15 ? 15 : q0;
        q1 = q1 > 15 ? 15 : q1;
        b[2 + j] = (uint8_t)(q0 | q1 << 4);
    }
}

static void q_q4_1(const float *x, uint8_t *b)
{
    float min = x[0], max = x[0];
    for (int j = 1; j < 32; j++) {
        min = fminf(min, x[j]);
        max = fmaxf(max, x[j]);
    }
    float d = (max - min) / 15.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    wr_f16(b, d);
    wr_f16(b + 2, min);
    for (int j = 0; j < 16; j++) {
        int q0 = (int)((x[j] - min) * id + 0.5f), q1 = (int)((x[j + 16] - min) * id + 0.5f);
        q0 = q0 > 15 ? 15 : q0;
        q1 = q1 > 15 ? 15 : q1;
        b[4 + j] = (uint8_t)(q0 | q1 << 4);
    }
}

ckv_status ckv_quantize(uint32_t type, const float *src, void *dst, uint64_t n, ckv_error *err)
{
    if (type != GGML_F32 && type != GGML_F16 && type != GGML_BF16 && type != GGML_Q8_0 &&
        type != GGML_Q4_0 && type != GGML_Q4_1)
        return ckv_errorf(err, CKV_ERR_UNSUPPORTED, "quantize: no quantiser for type %s (%u)",
                          ggml_type_name(type), type);
    ckv_status st = check_n(type, n, "quantize", err);
    if (st)
        return st;
    uint8_t *b = dst;
    for (uint64_t i = 0; i < n; i++)
        if (!isfinite(src[i]) && type != GGML_F32 && type != GGML_F16 && type != GGML_BF16)
            return ckv_errorf(err, CKV_ERR_NUMERIC, "quantize: element %llu is not finite",
                              (unsigned long long)i);
    switch (type) {
    case GGML_F32: memcpy(dst, src, n * 4); break;
    case GGML_F16:
        for (uint64_t i = 0; i < n; i++)
            wr_f16(b + 2 * i, src[i]);
        break;
    case GGML_BF16:
        for (uint64_t i = 0; i < n; i++) {
            uint16_t h = ckv_f32_to_bf16(src[i]);
            b[2 * i] = (uint8_t)h;
            b[2 * i + 1] = (uint8_t)(h >> 8);
        }
        break;
    case GGML_Q8_0:
        for (uint64_t i = 0; i < n / 32; i++)
            q_q8_0(src + 32 * i, b + 34 * i);
        break;
    case GGML_Q4_0:
        for (uint64_t i = 0; i < n / 32; i++)
            q_q4_0(src + 32 * i, b + 18 * i);
        break;
    case GGML_Q4_1:
        for (uint64_t i = 0; i < n / 32; i++)
            q_q4_1(src + 32 * i, b + 20 * i);
        break;
    }
    return CKV_OK;
}
