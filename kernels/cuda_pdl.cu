// The process-wide switch behind ckv_pdl_launch (cuda_pdl.cuh) and its C
// boundary (cuda.h).
#include <stdlib.h>
#include <string.h>

#include <atomic>

#include "cuda.h"
#include "cuda_pdl.cuh"

namespace {

// On unless CKV_PDL=0 at the first use (for A/B runs of whole programs).
std::atomic<bool> &setting()
{
    static std::atomic<bool> on{[] {
        const char *s = getenv("CKV_PDL");
        return !s || strcmp(s, "0") != 0;
    }()};
    return on;
}

// Asked once, of the current device at the first launch: the GPUs of one
// process are one model (as the decode attention's occupancy cache assumes).
bool supported()
{
    static const bool yes = [] {
        int dev = 0, major = 0;
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
            (void)cudaGetLastError();  // not left for the next launch's check
            return false;
        }
        return major >= 9;
    }();
    return yes;
}

}  // namespace

bool ckv_pdl_active()
{
    return setting().load(std::memory_order_relaxed) && supported();
}

extern "C" void ckv_cuda_set_pdl(bool on)
{
    setting().store(on, std::memory_order_relaxed);
}

extern "C" bool ckv_cuda_pdl(void)
{
    return ckv_pdl_active();
}
