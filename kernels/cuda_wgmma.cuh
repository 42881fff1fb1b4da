// Hopper's warpgroup MMA (wgmma, sm_90a): the four warps of a warpgroup
// issue one asynchronous m64nNk16 product together. A comes from registers
// in the m16n8k16 A layout, warp w holding rows 16w .. 16w + 15; D is, for
// each 8-column block i, the m16n8 C fragment of those rows (d[i][0..3]). B
// is read from shared memory through a descriptor.
//
// The shared layout every operand here uses is the 128-byte swizzle: a
// block of rows of 64 bf16 (128 bytes), row r's 16-byte piece c stored at
// piece c ^ (r % 8), the block starting on a 1024-byte boundary (so that
// the descriptor's base offset is 0). Rows 8 apart are 1024 bytes apart
// (the stride byte offset). As B of a product over k (ckv_wgmma_desc):
//  - K-major (trans 0): rows are B's columns n, pieces its k; k-step s of
//    16 starts 32 bytes further into the rows; the leading byte offset is
//    unused.
//  - MN-major (trans 1): rows are B's k, pieces its columns n; k-step s
//    starts 16 rows (2048 bytes) further; the leading byte offset is the
//    distance from columns 0..63 to 64..127 (the next block of rows).
// (PTX ISA, "Matrix Descriptor Format" and "Canonical Layouts".)
//
// nvcc -arch=sm_90a also embeds compute_90 PTX (cuobjdump -lptx lists
// sm_90 and sm_90a PTX beside the sm_90a cubin), which later devices can
// compile and where these instructions do not exist: there the calls trap. Callers take this
// path only on a device of compute capability 9.0, which runs the sm_90a
// code (ckv_cuda_wgmma).
#ifndef CKV_KERNELS_CUDA_WGMMA_CUH
#define CKV_KERNELS_CUDA_WGMMA_CUH

#include <stdint.h>

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define CKV_WG(...) asm volatile(__VA_ARGS__)
#else
#define CKV_WG(...) __trap()
#endif

// Byte offset of row r's 16-byte piece c in a 128-byte-swizzled block.
__host__ __device__ constexpr uint32_t ckv_swizzle128(int r, int c)
{
    return (uint32_t)(r * 128 + ((c ^ (r & 7)) << 4));
}

__device__ __forceinline__ uint64_t ckv_wgmma_desc(uint32_t smem, uint32_t lead_bytes)
{
    return (uint64_t)((smem & 0x3FFFF) >> 4) | (uint64_t)((lead_bytes & 0x3FFFF) >> 4) << 16 |
           (uint64_t)(1024 >> 4) << 32 | (uint64_t)1 << 62;
}

// The descriptor of the operand `bytes` on from d's: one add to the start
// address field (bits 0-13, which cannot carry: shared memory ends below
// 256 KB), so that a loop offsets a descriptor formed once instead of
// forming each (four uniform instructions a descriptor).
__device__ __forceinline__ uint64_t ckv_wgmma_desc_at(uint64_t d, uint32_t bytes)
{
    return (d & ~0xFFFFFFFFull) | (uint32_t)((uint32_t)d + (bytes >> 4));
}

// Orders this thread's register writes (A, D) before the wgmma that follow
// (shared-memory writes need ckv_fence_proxy_async).
__device__ __forceinline__ void ckv_wgmma_fence()
{
    CKV_WG("wgmma.fence.sync.aligned;" ::: "memory");
}
// Makes this thread's completed cp.async writes visible to wgmma's reads
// (the async proxy); a barrier after it covers the other threads'.
__device__ __forceinline__ void ckv_fence_proxy_async()
{
    CKV_WG("fence.proxy.async.shared::cta;" ::: "memory");
}
__device__ __forceinline__ void ckv_wgmma_commit()
{
    CKV_WG("wgmma.commit_group.sync.aligned;" ::: "memory");
}
// Waits until at most N committed groups are still running. The
// accumulators must then go through ckv_wgmma_hold, so that the compiler
// reads them after the wait, not before.
template <int N>
__device__ __forceinline__ void ckv_wgmma_wait()
{
    CKV_WG("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
template <int R>
__device__ __forceinline__ void ckv_wgmma_hold(float (&d)[R][4])
{
#pragma unroll
    for (int i = 0; i < R; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
            asm volatile("" : "+f"(d[i][j])::"memory");
}
// The same for A fragments in registers: an operand of a running product
// must keep its registers until the wait, so it is held live up to there.
template <int R, int C>
__device__ __forceinline__ void ckv_wgmma_hold(uint32_t (&a)[R][C])
{
#pragma unroll
    for (int i = 0; i < R; i++)
#pragma unroll
        for (int j = 0; j < C; j++)
            asm volatile("" : "+r"(a[i][j])::"memory");
}

// The 4 accumulators of d[i] as operands of constraint c: "+f" adds to
// them, "=f" only writes them (scale-d 0: their old values are not read,
// so the compiler need not set them first).
#define CKV_WG_D4(c, x) c(x[0]), c(x[1]), c(x[2]), c(x[3])
#define CKV_WG_D64(c, d)                                                                    \
    CKV_WG_D4(c, d[0]), CKV_WG_D4(c, d[1]), CKV_WG_D4(c, d[2]), CKV_WG_D4(c, d[3]),         \
        CKV_WG_D4(c, d[4]), CKV_WG_D4(c, d[5]), CKV_WG_D4(c, d[6]), CKV_WG_D4(c, d[7])
#define CKV_WG_N64                                                                           \
    "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                              \
    "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "                                  \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "               \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "     \
    "{%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}"
#define CKV_WG_N128                                                                          \
    "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                              \
    "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "                                 \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "               \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "      \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "      \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "     \
    "{%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}"
#define CKV_WG_IN "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(acc), "n"(TRANS)

// d (+)= a B, m64nNk16, bf16 in, f32 accumulate; acc 0 overwrites d. FRESH:
// acc is 0 and d is written only (its old values are not operands).
template <int N, int TRANS, bool FRESH = false>
__device__ __forceinline__ void ckv_wgmma_bf16(float (&d)[N / 8][4], const uint32_t (&a)[4],
                                               uint64_t b, int acc)
{
    static_assert(N == 64 || N == 128, "the products of this file");
    if constexpr (N == 64 && FRESH)
        CKV_WG(CKV_WG_N64 : CKV_WG_D64("=f", d) : CKV_WG_IN);
    else if constexpr (N == 64)
        CKV_WG(CKV_WG_N64 : CKV_WG_D64("+f", d) : CKV_WG_IN);
    else if constexpr (FRESH)
        CKV_WG(CKV_WG_N128 : CKV_WG_D64("=f", d), CKV_WG_D64("=f", (d + 8)) : CKV_WG_IN);
    else
        CKV_WG(CKV_WG_N128 : CKV_WG_D64("+f", d), CKV_WG_D64("+f", (d + 8)) : CKV_WG_IN);
}

#undef CKV_WG_IN
#undef CKV_WG_N128
#undef CKV_WG_N64
#undef CKV_WG_D64
#undef CKV_WG_D4
#undef CKV_WG

#endif
