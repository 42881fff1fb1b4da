// Correctly rounded double division by a divisor shared by many quotients,
// with the divisor's part of the work done once: ckv_ddiv(a, n,
// ckv_ddiv_rcp(n)) returns __ddiv_rn(a, n), bit for bit, for every a and n.
//
// __ddiv_rn compiles (sm_90, CUDA 13; the SASS source page of run ZZ10) to
// a reciprocal of n refined from MUFU.RCP64H (the seed's low word 1) by two
// Newton steps, the quotient a y corrected once by its residual, and a test
// of the exponents that sends the rare operands (a or the quotient near the
// bottom of the range, n not finite) to a slow path. The reciprocal depends
// on n alone, yet each division forms it again: 7 of its 15 instructions,
// which the compiler does not hoist out of a loop over a row. Here it is
// formed once by the same operations, the quotient and its correction are
// the same, and the fast path's test is the same comparisons on the same
// words (the high words read as floats, compared as their bits: float
// order for non-negative finite values, NaN patterns above 0x7f800000);
// the rest takes __ddiv_rn itself. gpu_policy_parity checks the bits
// against the CPU's IEEE division (correctly rounded, as __ddiv_rn is) on
// edge and random operands.
#ifndef CKV_KERNELS_CUDA_DDIV_CUH
#define CKV_KERNELS_CUDA_DDIV_CUH

#include <stdint.h>

__device__ __forceinline__ double ckv_ddiv_rcp(double n)
{
    double s;
    asm("rcp.approx.ftz.f64 %0, %1;" : "=d"(s) : "d"(n));
    const double r0 = __hiloint2double(__double2hiint(s), 1);
    const double t = __fma_rn(-n, r0, 1.0);
    const double y1 = __fma_rn(r0, __fma_rn(t, t, t), r0);
    return __fma_rn(y1, __fma_rn(-n, y1, 1.0), y1);
}

// The fast path alone: the quotient, with ok false where __ddiv_rn must
// give it instead (a caller may test many quotients' oks at once, so that
// their divisions overlap instead of each waiting at its own branch).
__device__ __forceinline__ double ckv_ddiv_fast(double a, double n, double y, bool &ok)
{
    const double q0 = __dmul_rn(a, y);
    const double q = __fma_rn(y, __fma_rn(-n, q0, a), q0);
    const uint32_t ah = (uint32_t)__double2hiint(a) & 0x7fffffffu,
                   nh = (uint32_t)__double2hiint(n) & 0x7fffffffu,
                   qh = (uint32_t)__double2hiint(q) & 0x7fffffffu;
    ok = ah >= 0x03600000u && nh < 0x7f800000u && qh > 0x00100000u && qh <= 0x7f800000u;
    return q;
}

__device__ __forceinline__ double ckv_ddiv(double a, double n, double y)
{
    bool ok;
    const double q = ckv_ddiv_fast(a, n, y, ok);
    return ok ? q : __ddiv_rn(a, n);
}

#endif
