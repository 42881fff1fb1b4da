/* ggml tensor types: block geometry and dequantisation to fp32
 * (../shared/docs/formats.md section 2). */
#ifndef CKV_QUANT_H
#define CKV_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

enum ggml_type {
    GGML_F32 = 0, GGML_F16 = 1, GGML_Q4_0 = 2, GGML_Q4_1 = 3,
    GGML_Q5_0 = 6, GGML_Q5_1 = 7, GGML_Q8_0 = 8, GGML_Q8_1 = 9,
    GGML_Q2_K = 10, GGML_Q3_K = 11, GGML_Q4_K = 12, GGML_Q5_K = 13,
    GGML_Q6_K = 14, GGML_Q8_K = 15, GGML_IQ4_NL = 20, GGML_BF16 = 30,
    GGML_TYPE_COUNT = 40
};

/* Elements per block and bytes per block; 0 for unknown types. Known-size
 * types that cannot be dequantised still report sizes so files holding them
 * parse; ggml_type_supported says whether ckv_dequantize handles them. */
uint32_t ggml_block_elems(uint32_t type);
uint32_t ggml_block_bytes(uint32_t type);
bool ggml_type_supported(uint32_t type);
const char *ggml_type_name(uint32_t type);

/* Bytes needed for n elements (n must be a multiple of the block size;
 * returns false on a partial block or overflow). */
bool ggml_row_bytes(uint32_t type, uint64_t n, uint64_t *bytes);

/* Dequantises n elements (a multiple of the block size) from src to dst. */
ckv_status ckv_dequantize(uint32_t type, const void *src, float *dst, uint64_t n, ckv_error *err);

/* IEEE conversions shared by dequantisers and writers. */
float ckv_f16_to_f32(uint16_t h);
uint16_t ckv_f32_to_f16(float f); /* round to nearest even */
float ckv_bf16_to_f32(uint16_t h);
uint16_t ckv_f32_to_bf16(float f); /* round to nearest even */

/* Quantisers used by `ckv synth` (round trip is tested against dequantize). */
ckv_status ckv_quantize(uint32_t type, const float *src, void *dst, uint64_t n, ckv_error *err);

#ifdef __cplusplus
}
#endif
#endif
