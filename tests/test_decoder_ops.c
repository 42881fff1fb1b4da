/* ckv_swiglu_bf16, the CPU twin of the GPU's SwiGLU output (ckv_k_swiglu
 * and the GEMV's SwiGLU epilogue): values derived by hand. */
#include <criterion/criterion.h>

#include "decoder_ops.h"

/* Two rows of n_ff = 2, gate then up in each row:
 *   silu(1) * 2    = 2 / (1 + e^-1)      =  1.46212 -> 1 + 59/128     = 0x3FBB
 *   silu(-2) * 3   = -6 / (1 + e^2)      = -0.71522 -> -(1 + 55/128)/2 = 0xBF37
 *   silu(0) * 5    = 0                                                 = 0x0000
 *   silu(3) * -0.5 = -1.5 / (1 + e^-3)   = -1.42886 -> -(1 + 55/128)   = 0xBFB7
 * (bf16 keeps 7 mantissa bits: 0.46212 * 128 = 59.15, 0.43044 * 128 = 55.10,
 * 0.42886 * 128 = 54.89, each rounded to the nearest). */
Test(swiglu_bf16, rows_of_gate_then_up_rounded_to_bf16)
{
    const float gu[8] = {1, -2, 2, 3, 0, 3, 5, -0.5f};
    uint16_t out[4] = {0xFFFF, 0xFFFF, 0xFFFF, 0xFFFF};
    ckv_swiglu_bf16(out, gu, 2, 2);
    cr_expect_eq(out[0], 0x3FBB, "got %#x", out[0]);
    cr_expect_eq(out[1], 0xBF37, "got %#x", out[1]);
    cr_expect_eq(out[2], 0x0000, "got %#x", out[2]);
    cr_expect_eq(out[3], 0xBFB7, "got %#x", out[3]);
}
