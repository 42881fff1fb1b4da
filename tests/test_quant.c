/* Dequantisers and IEEE conversions against values worked out by hand from
 * the block layouts in formats.md section 2 (each block's bytes are chosen
 * so every output can be computed on paper; the derivation is in comments). */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "quant.h"

static void expect_floats(const float *got, const float *want, int n, const char *what)
{
    for (int i = 0; i < n; i++)
        cr_assert(got[i] == want[i], "%s: y[%d] = %.9g, expected %.9g", what, i, (double)got[i],
                  (double)want[i]);
}

static void dequant_ok(uint32_t type, const uint8_t *blk, float *y, uint64_t n)
{
    ckv_error e = {0};
    cr_assert_eq(ckv_dequantize(type, blk, y, n, &e), CKV_OK, "%s", e.msg);
}

/* Nibble pattern shared by the 32-element blocks: byte j holds j in the low
 * nibble and 15 - j in the high one, so low outputs ascend and high descend. */
static void nibbles(uint8_t *qs)
{
    for (int j = 0; j < 16; j++)
        qs[j] = (uint8_t)(j | (15 - j) << 4);
}

/* ---- IEEE binary16 ---- */

Test(f16, to_f32_normals_subnormals_specials)
{
    cr_assert(ckv_f16_to_f32(0x3C00) == 1.0f);
    cr_assert(ckv_f16_to_f32(0x3800) == 0.5f);
    cr_assert(ckv_f16_to_f32(0xC000) == -2.0f);
    cr_assert(ckv_f16_to_f32(0x3555) == 0x1.554p-2f); /* 2^-2 * (1 + 0x155/1024) */
    cr_assert(ckv_f16_to_f32(0x7BFF) == 65504.0f);    /* largest finite */
    cr_assert(ckv_f16_to_f32(0x0400) == 0x1p-14f);    /* smallest normal */
    cr_assert(ckv_f16_to_f32(0x0001) == 0x1p-24f);    /* smallest subnormal */
    cr_assert(ckv_f16_to_f32(0x03FF) == 1023.0f * 0x1p-24f);
    cr_assert(ckv_f16_to_f32(0x8001) == -0x1p-24f);
    float nz = ckv_f16_to_f32(0x8000);
    cr_assert(nz == 0.0f && signbit(nz));
    cr_assert(isinf(ckv_f16_to_f32(0x7C00)) && ckv_f16_to_f32(0x7C00) > 0);
    cr_assert(isinf(ckv_f16_to_f32(0xFC00)) && ckv_f16_to_f32(0xFC00) < 0);
    cr_assert(isnan(ckv_f16_to_f32(0x7E00)));
    cr_assert(isnan(ckv_f16_to_f32(0x7C01)));
}

Test(f16, from_f32_rounding)
{
    cr_assert_eq(ckv_f32_to_f16(1.0f), 0x3C00);
    cr_assert_eq(ckv_f32_to_f16(-2.0f), 0xC000);
    cr_assert_eq(ckv_f32_to_f16(-0.0f), 0x8000);
    /* 1 + 2^-11 lies halfway between 0x3C00 and 0x3C01: ties go to even. */
    cr_assert_eq(ckv_f32_to_f16(1.0f + 0x1p-11f), 0x3C00);
    /* 1 + 3*2^-11 is halfway between 0x3C01 and 0x3C02: even is 0x3C02. */
    cr_assert_eq(ckv_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3C02);
    /* Just above the tie rounds up. */
    cr_assert_eq(ckv_f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f), 0x3C01);
    /* 2047 * 2^-11 rounds up across the binade to 1.0. */
    cr_assert_eq(ckv_f32_to_f16(1.0f - 0x1p-12f), 0x3C00);
    cr_assert_eq(ckv_f32_to_f16(65504.0f), 0x7BFF);
    cr_assert_eq(ckv_f32_to_f16(65519.0f), 0x7BFF); /* below the 65520 tie */
    cr_assert_eq(ckv_f32_to_f16(65520.0f), 0x7C00); /* tie: 0x7BFF is odd, so up to inf */
    cr_assert_eq(ckv_f32_to_f16(1e6f), 0x7C00);
    cr_assert_eq(ckv_f32_to_f16(-INFINITY), 0xFC00);
    uint16_t n = ckv_f32_to_f16(NAN);
    cr_assert((n & 0x7C00) == 0x7C00 && (n & 0x3FF) != 0, "NaN became 0x%04x", n);
}

Test(f16, from_f32_subnormals)
{
    cr_assert_eq(ckv_f32_to_f16(0x1p-14f), 0x0400);
    cr_assert_eq(ckv_f32_to_f16(0x1p-24f), 0x0001);
    cr_assert_eq(ckv_f32_to_f16(0x1p-25f), 0x0000);        /* tie between 0 and 1: even */
    cr_assert_eq(ckv_f32_to_f16(1.5f * 0x1p-25f), 0x0001); /* above the tie */
    cr_assert_eq(ckv_f32_to_f16(3 * 0x1p-25f), 0x0002);    /* 1.5 units: tie to even 2 */
    cr_assert_eq(ckv_f32_to_f16(5 * 0x1p-25f), 0x0002);    /* 2.5 units: tie to even 2 */
    cr_assert_eq(ckv_f32_to_f16(-0x1p-24f), 0x8001);
    cr_assert_eq(ckv_f32_to_f16(0x1p-30f), 0x0000);
    /* 1023.5 units of 2^-24 ties between 0x03FF (odd) and 0x0400: rounds
     * up into the smallest normal. */
    cr_assert_eq(ckv_f32_to_f16(1023.5f * 0x1p-24f), 0x0400);
}

/* ---- bfloat16 ---- */

Test(bf16, conversions)
{
    cr_assert(ckv_bf16_to_f32(0x3F80) == 1.0f);
    cr_assert(ckv_bf16_to_f32(0x4049) == 3.140625f); /* 2 * (1 + 0x49/128) */
    cr_assert(ckv_bf16_to_f32(0xC000) == -2.0f);
    cr_assert(ckv_bf16_to_f32(0x0001) == 0x1p-133f); /* subnormal */
    cr_assert(isinf(ckv_bf16_to_f32(0x7F80)));
    cr_assert(isnan(ckv_bf16_to_f32(0x7FC0)));
    cr_assert_eq(ckv_f32_to_bf16(1.0f), 0x3F80);
    cr_assert_eq(ckv_f32_to_bf16(1.0f + 0x1p-8f), 0x3F80);     /* tie to even */
    cr_assert_eq(ckv_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3F82); /* tie to even */
    cr_assert_eq(ckv_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3F81);
    cr_assert_eq(ckv_f32_to_bf16(INFINITY), 0x7F80);
    uint16_t n = ckv_f32_to_bf16(NAN);
    cr_assert((n & 0x7F80) == 0x7F80 && (n & 0x7F) != 0, "NaN became 0x%04x", n);
    /* A NaN whose payload lives only in the low 16 bits must stay NaN. */
    uint32_t bits = 0x7F800001;
    float snan;
    memcpy(&snan, &bits, 4);
    cr_assert((ckv_f32_to_bf16(snan) & 0x7F) != 0);
}

Test(dequant, f32_f16_bf16)
{
    const uint8_t f16[] = {0x00, 0x3C, 0x00, 0xC0, 0x01, 0x00};
    const uint8_t bf16[] = {0x80, 0x3F, 0x49, 0x40};
    const uint8_t f32[] = {0x00, 0x00, 0xC0, 0x3F}; /* 0x3FC00000 = 1.5 */
    float y[3];
    dequant_ok(GGML_F16, f16, y, 3);
    expect_floats(y, (const float[]){1.0f, -2.0f, 0x1p-24f}, 3, "F16");
    dequant_ok(GGML_BF16, bf16, y, 2);
    expect_floats(y, (const float[]){1.0f, 3.140625f}, 2, "BF16");
    dequant_ok(GGML_F32, f32, y, 1);
    expect_floats(y, (const float[]){1.5f}, 1, "F32");
}

/* ---- 32-element blocks ---- */

Test(dequant, q4_0)
{
    /* d = 0.5 (0x3800); y[j] = (j - 8) / 2, y[j+16] = (15 - j - 8) / 2. */
    uint8_t b[18] = {0x00, 0x38};
    nibbles(b + 2);
    const float want[32] = {-4, -3.5, -3, -2.5, -2, -1.5, -1, -0.5, 0, 0.5, 1, 1.5, 2, 2.5, 3, 3.5,
                            3.5, 3, 2.5, 2, 1.5, 1, 0.5, 0, -0.5, -1, -1.5, -2, -2.5, -3, -3.5, -4};
    float y[32];
    dequant_ok(GGML_Q4_0, b, y, 32);
    expect_floats(y, want, 32, "Q4_0");
}

Test(dequant, q4_1)
{
    /* d = 0.25 (0x3400), m = -1 (0xBC00): y[j] = j/4 - 1, y[j+16] = (15-j)/4 - 1. */
    uint8_t b[20] = {0x00, 0x34, 0x00, 0xBC};
    nibbles(b + 4);
    const float want[32] = {-1, -0.75, -0.5, -0.25, 0, 0.25, 0.5, 0.75,
                            1, 1.25, 1.5, 1.75, 2, 2.25, 2.5, 2.75,
                            2.75, 2.5, 2.25, 2, 1.75, 1.5, 1.25, 1,
                            0.75, 0.5, 0.25, 0, -0.25, -0.5, -0.75, -1};
    float y[32];
    dequant_ok(GGML_Q4_1, b, y, 32);
    expect_floats(y, want, 32, "Q4_1");
}

/* qh = 0x00FF5555: bit j (j < 16) set for even j, so even low codes gain 16;
 * bit j+16 set for j < 8, so the first 8 high codes gain 16. Low codes:
 * 16,1,18,3,20,5,22,7,24,9,26,11,28,13,30,15; high: 31..24 then 7..0. */
static const uint8_t q5_qh[4] = {0x55, 0x55, 0xFF, 0x00};

Test(dequant, q5_0)
{
    /* d = 0.5: y = (code - 16) / 2. */
    uint8_t b[22] = {0x00, 0x38};
    memcpy(b + 2, q5_qh, 4);
    nibbles(b + 6);
    const float want[32] = {0, -7.5, 1, -6.5, 2, -5.5, 3, -4.5, 4, -3.5, 5, -2.5, 6, -1.5, 7, -0.5,
                            7.5, 7, 6.5, 6, 5.5, 5, 4.5, 4, -4.5, -5, -5.5, -6, -6.5, -7, -7.5, -8};
    float y[32];
    dequant_ok(GGML_Q5_0, b, y, 32);
    expect_floats(y, want, 32, "Q5_0");
}

Test(dequant, q5_1)
{
    /* d = 0.5, m = 1 (0x3C00): y = code / 2 + 1. */
    uint8_t b[24] = {0x00, 0x38, 0x00, 0x3C};
    memcpy(b + 4, q5_qh, 4);
    nibbles(b + 8);
    const float want[32] = {9, 1.5, 10, 2.5, 11, 3.5, 12, 4.5, 13, 5.5, 14, 6.5, 15, 7.5, 16, 8.5,
                            16.5, 16, 15.5, 15, 14.5, 14, 13.5, 13, 4.5, 4, 3.5, 3, 2.5, 2, 1.5, 1};
    float y[32];
    dequant_ok(GGML_Q5_1, b, y, 32);
    expect_floats(y, want, 32, "Q5_1");
}

Test(dequant, q8_0)
{
    /* d = 0.125 (0x3000), qs[j] = 8j - 128 as int8, so y[j] = j - 16. */
    uint8_t b[34] = {0x00, 0x30};
    for (int j = 0; j < 32; j++)
        b[2 + j] = (uint8_t)(8 * j + 128); /* two's complement of 8j - 128 */
    float want[32];
    for (int j = 0; j < 32; j++)
        want[j] = (float)(j - 16);
    float y[32];
    dequant_ok(GGML_Q8_0, b, y, 32);
    expect_floats(y, want, 32, "Q8_0");
}

Test(dequant, iq4_nl)
{
    /* d = 0.5: y[j] = T[j] / 2 and y[j+16] = T[15 - j] / 2 with the IQ4_NL table. */
    uint8_t b[18] = {0x00, 0x38};
    nibbles(b + 2);
    const float want[32] = {-63.5, -52, -41.5, -32.5, -24.5, -17.5, -11, -5,
                            0.5, 6.5, 12.5, 19, 26.5, 34.5, 44.5, 56.5,
                            56.5, 44.5, 34.5, 26.5, 19, 12.5, 6.5, 0.5,
                            -5, -11, -17.5, -24.5, -32.5, -41.5, -52, -63.5};
    float y[32];
    dequant_ok(GGML_IQ4_NL, b, y, 32);
    expect_floats(y, want, 32, "IQ4_NL");
}

/* ---- K-quants ----
 * Shared header: d = 1 (0x3C00), dmin = 0.5 (0x3800), and 6-bit scales
 * sc = {1,2,3,4,33,34,35,36}, minimums mn = {0,1,2,3,17,18,19,20}, packed:
 *   bytes 0-3: sc[i] | (sc[i+4] >> 4) << 6   = 0x81 0x82 0x83 0x84 (33>>4 = 2)
 *   bytes 4-7: mn[i] | (mn[i+4] >> 4) << 6   = 0x40 0x41 0x42 0x43 (17>>4 = 1)
 *   bytes 8-11: (sc[i+4] & 15) | (mn[i+4] & 15) << 4 = 0x11 0x22 0x33 0x44 */
static void k_header(uint8_t *b)
{
    const uint8_t hdr[16] = {0x00, 0x3C, 0x00, 0x38, 0x81, 0x82, 0x83, 0x84,
                             0x40, 0x41, 0x42, 0x43, 0x11, 0x22, 0x33, 0x44};
    memcpy(b, hdr, 16);
}

/* qs[32c + l] = (l & 15) | (15 - (l & 15)) << 4 for each chunk c. */
static void k_qs(uint8_t *qs)
{
    for (int i = 0; i < 128; i++)
        qs[i] = (uint8_t)((i & 15) | (15 - (i & 15)) << 4);
}

Test(dequant, q4_k)
{
    uint8_t b[144];
    k_header(b);
    k_qs(b + 16);
    float y[256];
    dequant_ok(GGML_Q4_K, b, y, 256);
    /* Output 64c + l: d*sc[2c]*(l & 15) - dmin*mn[2c];
     * output 64c + 32 + l: d*sc[2c+1]*(15 - (l & 15)) - dmin*mn[2c+1]. */
    cr_assert(y[0] == 0.0f);                 /* 1*0 - 0 */
    cr_assert(y[5] == 5.0f);                 /* 1*5 - 0 */
    cr_assert(y[32 + 5] == 19.5f);           /* 2*10 - 0.5*1 */
    cr_assert(y[64 + 17] == 2.0f);           /* 3*1 - 0.5*2 */
    cr_assert(y[96 + 3] == 46.5f);           /* 4*12 - 0.5*3 */
    cr_assert(y[128 + 15] == 486.5f);        /* 33*15 - 0.5*17 */
    cr_assert(y[160] == 501.0f);             /* 34*15 - 0.5*18 */
    cr_assert(y[192 + 31] == 515.5f);        /* 35*15 - 0.5*19 */
    cr_assert(y[255] == -10.0f, "%g", y[255]); /* 36*0 - 0.5*20: the minimum is subtracted */
}

Test(dequant, q5_k)
{
    /* Layout: header 16, qh[32] at 16, qs[128] at 48. qh[l] = 0x55 for even
     * l (bits 0,2,4,6: the low-nibble half of every chunk gains 16) and 0xAA
     * for odd l (bits 1,3,5,7: the high-nibble half gains 16). */
    uint8_t b[176];
    k_header(b);
    for (int l = 0; l < 32; l++)
        b[16 + l] = l % 2 ? 0xAA : 0x55;
    k_qs(b + 48);
    float y[256];
    dequant_ok(GGML_Q5_K, b, y, 256);
    cr_assert(y[4] == 20.0f);          /* 1*(4+16) - 0 */
    cr_assert(y[5] == 5.0f);           /* 1*5 - 0 */
    cr_assert(y[32 + 4] == 21.5f);     /* 2*11 - 0.5 */
    cr_assert(y[32 + 5] == 51.5f);     /* 2*(10+16) - 0.5 */
    cr_assert(y[128 + 14] == 981.5f);  /* 33*(14+16) - 8.5 */
    cr_assert(y[128 + 15] == 486.5f);  /* 33*15 - 8.5 */
    cr_assert(y[224 + 30] == 26.0f);   /* 36*1 - 10 */
    cr_assert(y[224 + 31] == 566.0f);  /* 36*(0+16) - 10 */
}

Test(dequant, q6_k)
{
    /* ql[i] = i (low nibble i & 15, high nibble i >> 4), qh[i] = 0xE4 so the
     * 2-bit fields are 0,1,2,3 for q1..q4, scales alternate in sign
     * {1,-2,3,-4,...,15,-16}, and d = 0.5 sits LAST, at byte 208. */
    uint8_t b[210];
    for (int i = 0; i < 128; i++)
        b[i] = (uint8_t)i;
    memset(b + 128, 0xE4, 64);
    for (int k = 0; k < 16; k++)
        b[192 + k] = (uint8_t)(int8_t)(k % 2 ? -(k + 1) : k + 1);
    b[208] = 0x00;
    b[209] = 0x38;
    float y[256];
    dequant_ok(GGML_Q6_K, b, y, 256);
    cr_assert(y[0] == -16.0f);          /* q1 = 0 - 32; 0.5*1*-32 */
    cr_assert(y[17] == 31.0f);          /* ql[17] & 15 = 1: q1 = -31; sc[1] = -2 */
    cr_assert(y[32 + 3] == -19.5f);     /* ql[35] & 15 = 3: q2 = 3+16-32 = -13; sc[2] = 3 */
    cr_assert(y[64 + 20] == -3.0f);     /* ql[20] >> 4 = 1: q3 = 1+32-32 = 1; sc[5] = -6 */
    cr_assert(y[96 + 31] == -76.0f);    /* ql[63] >> 4 = 3: q4 = 3+48-32 = 19; sc[7] = -8 */
    cr_assert(y[128] == -144.0f);       /* ql[64] & 15 = 0: q1 = -32; sc[8] = 9 */
    cr_assert(y[128 + 64 + 16] == -35.0f); /* ql[80] >> 4 = 5: q3 = 5; sc[13] = -14 */
    cr_assert(y[255] == -184.0f);       /* ql[127] >> 4 = 7: q4 = 23; sc[15] = -16 */
}

Test(dequant, multiple_blocks_advance)
{
    /* Two Q8_0 blocks with d = 1 and d = 2 and qs = 1: 32 ones then 32 twos. */
    uint8_t b[68] = {0};
    b[1] = 0x3C;
    b[35] = 0x40;
    for (int j = 0; j < 32; j++)
        b[2 + j] = b[36 + j] = 1;
    float y[64];
    dequant_ok(GGML_Q8_0, b, y, 64);
    cr_assert(y[31] == 1.0f && y[32] == 2.0f && y[63] == 2.0f);
}

Test(dequant, unsupported_and_partial)
{
    uint8_t b[292] = {0};
    float y[256];
    ckv_error e = {0};
    cr_assert_eq(ckv_dequantize(GGML_Q2_K, b, y, 256, &e), CKV_ERR_UNSUPPORTED);
    cr_assert(strstr(e.msg, "Q2_K"), "%s", e.msg);
    cr_assert_eq(ckv_dequantize(4, b, y, 32, &e), CKV_ERR_UNSUPPORTED); /* removed type */
    cr_assert(strstr(e.msg, "unknown tensor type 4"), "%s", e.msg);
    cr_assert_eq(ckv_dequantize(GGML_Q4_0, b, y, 31, &e), CKV_ERR_ARG);
    cr_assert(strstr(e.msg, "31"), "%s", e.msg);
}

Test(geometry, block_sizes_and_row_bytes)
{
    cr_assert_eq(ggml_block_bytes(GGML_Q4_K), 144);
    cr_assert_eq(ggml_block_elems(GGML_Q6_K), 256);
    cr_assert_eq(ggml_block_bytes(GGML_Q6_K), 210);
    cr_assert_eq(ggml_block_bytes(GGML_Q5_0), 22);
    cr_assert_eq(ggml_block_bytes(GGML_IQ4_NL), 18);
    cr_assert_eq(ggml_block_elems(5), 0);
    cr_assert(!ggml_type_supported(GGML_Q3_K));
    cr_assert(ggml_type_supported(GGML_BF16));
    cr_assert_str_eq(ggml_type_name(GGML_Q5_K), "Q5_K");
    uint64_t n;
    cr_assert(ggml_row_bytes(GGML_Q4_K, 512, &n) && n == 288);
    cr_assert(ggml_row_bytes(GGML_F16, 3, &n) && n == 6);
    cr_assert(!ggml_row_bytes(GGML_Q4_0, 33, &n));
    cr_assert(!ggml_row_bytes(GGML_F32, UINT64_MAX / 2, &n)); /* overflow */
}

/* ---- quantisers ---- */

Test(quantize, q8_0_rounds_half_away)
{
    /* max |x| = 127 makes d = 1 exactly, so codes are round(x). */
    float x[32];
    for (int j = 0; j < 32; j++)
        x[j] = (float)j;
    x[0] = 127.0f;
    x[1] = 2.5f;  /* roundf: 3 */
    x[2] = -2.5f; /* -3 */
    x[3] = 0.4f;  /* 0 */
    uint8_t b[34];
    ckv_error e = {0};
    cr_assert_eq(ckv_quantize(GGML_Q8_0, x, b, 32, &e), CKV_OK, "%s", e.msg);
    cr_assert(b[0] == 0x00 && b[1] == 0x3C);
    cr_assert_eq((int8_t)b[2], 127);
    cr_assert_eq((int8_t)b[3], 3);
    cr_assert_eq((int8_t)b[4], -3);
    cr_assert_eq((int8_t)b[5], 0);
    cr_assert_eq((int8_t)b[2 + 31], 31);
}

Test(quantize, q4_0_scale_from_signed_extreme)
{
    /* Extreme -8 gives d = -8 / -8 = 1; code = trunc(x + 8.5). */
    float x[32] = {0};
    x[0] = -8.0f; /* code 0 */
    x[1] = 7.0f;  /* 15 */
    x[2] = 0.5f;  /* 9: x + 8 = 8.5 rounds half up */
    x[3] = -0.5f; /* 8 */
    x[16] = 3.0f; /* 11, high nibble of byte 0 */
    uint8_t b[18];
    ckv_error e = {0};
    cr_assert_eq(ckv_quantize(GGML_Q4_0, x, b, 32, &e), CKV_OK, "%s", e.msg);
    cr_assert(b[0] == 0x00 && b[1] == 0x3C);
    cr_assert_eq(b[2], 0x00 | 11 << 4);
    cr_assert_eq(b[3], 15 | 8 << 4); /* x[17] = 0 gives 8 */
    cr_assert_eq(b[4], 9 | 8 << 4);
    cr_assert_eq(b[5], 8 | 8 << 4);
    /* A positive extreme gives a negative d: max 8 -> d = -1 (0xBC00), 8 -> code 0. */
    memset(x, 0, sizeof x);
    x[0] = 8.0f;
    cr_assert_eq(ckv_quantize(GGML_Q4_0, x, b, 32, &e), CKV_OK);
    cr_assert(b[0] == 0x00 && b[1] == 0xBC);
    cr_assert_eq(b[2] & 0xF, 0);
}

Test(quantize, q4_1_min_and_scale)
{
    /* min -1, max 14: d = 15/15 = 1, m = -1 (0xBC00); code = trunc(x + 1 + 0.5). */
    float x[32];
    for (int j = 0; j < 32; j++)
        x[j] = 2.0f;
    x[0] = -1.0f; /* 0 */
    x[1] = 14.0f; /* 15 */
    x[2] = 0.5f;  /* 1.5 + 0.5 -> 2 */
    x[3] = 0.4f;  /* 1.4 + 0.5 -> 1 */
    uint8_t b[20];
    ckv_error e = {0};
    cr_assert_eq(ckv_quantize(GGML_Q4_1, x, b, 32, &e), CKV_OK, "%s", e.msg);
    cr_assert(b[0] == 0x00 && b[1] == 0x3C && b[2] == 0x00 && b[3] == 0xBC);
    cr_assert_eq(b[4], 0 | 3 << 4); /* x[16] = 2 -> 3 */
    cr_assert_eq(b[5], 15 | 3 << 4);
    cr_assert_eq(b[6], 2 | 3 << 4);
    cr_assert_eq(b[7], 1 | 3 << 4);
}

Test(quantize, round_trip_error_within_half_step)
{
    /* Deterministic non-zero test signal; each dequantised value must lie
     * within half a quantisation step (plus f16 scale rounding) of x. */
    float x[256], y[256];
    for (int i = 0; i < 256; i++)
        x[i] = sinf(0.37f * (float)i + 0.1f) * (1.0f + 0.01f * (float)i);
    const uint32_t types[] = {GGML_Q8_0, GGML_Q4_0, GGML_Q4_1, GGML_F16, GGML_BF16, GGML_F32};
    uint8_t buf[1024];
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        ckv_error e = {0};
        cr_assert_eq(ckv_quantize(types[k], x, buf, 256, &e), CKV_OK, "%s", e.msg);
        dequant_ok(types[k], buf, y, 256);
        for (int blk = 0; blk < 8; blk++) {
            float lo = x[32 * blk], hi = lo;
            for (int j = 0; j < 32; j++) {
                lo = fminf(lo, x[32 * blk + j]);
                hi = fmaxf(hi, x[32 * blk + j]);
            }
            float amax = fmaxf(fabsf(lo), fabsf(hi));
            /* Half a step, plus the f16 rounding of the stored scale
             * (up to 127 * d * 2^-11 for Q8_0); Q4_0 allows a full step
             * because codes span -8..7, so +amax clamps to 7d. */
            float tol = types[k] == GGML_Q8_0   ? amax / 127 * 0.57f
                        : types[k] == GGML_Q4_0 ? amax / 8 * 1.01f
                        : types[k] == GGML_Q4_1 ? (hi - lo) / 15 * 0.52f + amax * 0x1p-10f
                        : types[k] == GGML_F16  ? amax * 0x1p-11f
                        : types[k] == GGML_BF16 ? amax * 0x1p-8f
                                                : 0.0f;
            for (int j = 0; j < 32; j++) {
                int i = 32 * blk + j;
                cr_assert(fabsf(y[i] - x[i]) <= tol, "%s x[%d]=%g y=%g tol=%g",
                          ggml_type_name(types[k]), i, x[i], y[i], tol);
            }
        }
    }
}

Test(quantize, rejects_bad_input)
{
    float x[32];
    for (int j = 0; j < 32; j++)
        x[j] = 1.0f;
    x[7] = NAN;
    uint8_t b[64];
    ckv_error e = {0};
    cr_assert_eq(ckv_quantize(GGML_Q8_0, x, b, 32, &e), CKV_ERR_NUMERIC);
    cr_assert(strstr(e.msg, "element 7"), "%s", e.msg);
    cr_assert_eq(ckv_quantize(GGML_Q4_K, x, b, 32, &e), CKV_ERR_UNSUPPORTED);
    cr_assert(strstr(e.msg, "Q4_K"), "%s", e.msg);
    x[7] = 1.0f;
    cr_assert_eq(ckv_quantize(GGML_Q4_1, x, b, 16, &e), CKV_ERR_ARG);
}
