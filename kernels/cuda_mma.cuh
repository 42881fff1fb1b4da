// Warp-level tensor-core pieces shared by the kernels that run their
// products on mma.sync (cuda_attention_prefill.cu,
// cuda_attention_decode_mma.cu, cuda_gemv.cu; the FP64 product:
// cuda_csm.cu): the bf16 m16n8k16 product, bf16 pairs as one register,
// ldmatrix, the FP64 m16n8k4 product, the s8 m16n8k16 product
// (cuda_kmeans.cu's own pass), and the log2 units the softmaxes use
// (scores times log2 e so that exp is exp2; a max goes out times ln 2).
//
// Fragments of mma.m16n8k16 with .bf16 (PTX ISA, "Matrix Fragments for
// mma.m16n8k16"; lane = 4 g + t): A 16x16 (row): a0 (g, 2t..2t+1), a1
// (g + 8, 2t..), a2 (g, 2t + 8..), a3 (g + 8, 2t + 8..); B 16x8 (col): b0
// (k 2t..2t+1, n g), b1 (k 2t + 8.., n g); C/D 16x8: (g, 2t), (g, 2t + 1),
// (g + 8, 2t), (g + 8, 2t + 1).
#ifndef CKV_KERNELS_CUDA_MMA_CUH
#define CKV_KERNELS_CUDA_MMA_CUH

#include <stdint.h>

#include "cuda_kernels.h"

constexpr float CKV_LOG2E = 1.4426950408889634f;
constexpr float CKV_LN2 = 0.6931471805599453f;

// Two bf16 (the first in the low half) as one register.
__device__ __forceinline__ uint32_t ckv_pack_bf16(ckv_bf16 lo, ckv_bf16 hi)
{
    return (uint32_t)lo | (uint32_t)hi << 16;
}

// d += A B, one m16n8k16 bf16 step with fp32 accumulation.
__device__ __forceinline__ void ckv_mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1,
                                             uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// d += A B, one m16n8k4 FP64 step (sm_90): A 16x4 (lane 4g + t holds (g,
// t) in a0 and (g + 8, t) in a1), B 4x8 ((t, g)), C/D 16x8 ((g, 2t), (g,
// 2t + 1), (g + 8, 2t), (g + 8, 2t + 1)). Each element of D is its C plus
// the four products added one after another in k order, each sum rounded
// once to nearest: a chain of fma(a_k, b_k, acc). The PTX ISA does not say
// so; on the H200 every FP64 shape did so bit for bit (runs EK, EQ: 2-4M
// sums of 128 products a shape and exponent range, with exponents spread up
// to 2^-120 .. 2^120, where another order or a single rounding of the four
// changed 14-78% of them in a CPU emulation of the same data). It runs at
// twice m8n8k4's rate: 126 multiply-adds a cycle an SM against 64 (run EQ).
// tests/gpu/policy_parity.c checks CentroidKV's cosines, which rest on it,
// against the CPU's bit for bit.
__device__ __forceinline__ void ckv_mma_f64_m16(double (&d)[4], double a0, double a1, double b)
{
    asm("mma.sync.aligned.m16n8k4.row.col.f64.f64.f64.f64 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
        "{%0, %1, %2, %3};"
        : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
        : "d"(a0), "d"(a1), "d"(b));
}

// d = A B, one m16n8k16 s8 step with s32 accumulation from zero. The .s8
// fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16" with integer
// types; a register's four bytes its elements, the lowest first): a0 (g,
// 4t..4t+3), a1 (g + 8, 4t..4t+3), b0 (k 4t..4t+3, n g); C/D as above.
__device__ __forceinline__ void ckv_mma_s8(int32_t (&d)[4], uint32_t a0, uint32_t a1,
                                           uint32_t b0)
{
    asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
        "{%7, %7, %7, %7};"
        : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
        : "r"(a0), "r"(a1), "r"(b0), "r"(0));
}

// Four 8x8 matrices of 16-bit elements from shared memory: lane l gives the
// address of row l % 8 of matrix l / 8 (16 contiguous bytes), and gets r[i]
// = matrix i's elements (l / 4, 2 (l % 4) .. + 1); with trans, its elements
// (2 (l % 4) .. + 1, l / 4), a column pair.
__device__ __forceinline__ void ckv_ldmatrix_x4(uint32_t (&r)[4], const void *row)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(static_cast<uint32_t>(__cvta_generic_to_shared(row))));
}
__device__ __forceinline__ void ckv_ldmatrix_x4_trans(uint32_t (&r)[4], const void *row)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(static_cast<uint32_t>(__cvta_generic_to_shared(row))));
}

#endif
