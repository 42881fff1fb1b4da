// The CUDA backend's process-wide switches and their C boundary (cuda.h):
// programmatic dependent launch (cuda_pdl.cuh) and the wgmma forms of the
// bf16 prefill attention (cuda_attention_prefill.cu) and of K-Means's
// estimate (cuda_kmeans.cu), K-Means's lazy features, and the batch
// decode's deferred scores. Each reads its environment variable once, at
// the first use (for A/B runs of whole programs): the first two are on
// unless it is 0, and active only on a device that has the feature; the
// lazy features' mode is OFF at 0, ON at 1, else AUTO; the deferred scores
// are on unless it is 0.
#include <stdlib.h>
#include <string.h>

#include <atomic>

#include "cuda.h"
#include "cuda_pdl.cuh"

namespace {

// A mode read from env_ once: exactly "0" gives 0, "1" gives 1 where ones_
// is set, anything else (or no variable) fallback_.
class Switch {
public:
    constexpr Switch(const char *env, int fallback, bool ones)
        : env_(env), fallback_(fallback), ones_(ones)
    {
    }
    int mode()
    {
        int v = state_.load(std::memory_order_relaxed);
        if (v < 0) {
            const char *s = getenv(env_);
            v = s && strcmp(s, "0") == 0 ? 0 : s && ones_ && strcmp(s, "1") == 0 ? 1 : fallback_;
            int unread = -1;  // a set() in between wins
            if (!state_.compare_exchange_strong(unread, v, std::memory_order_relaxed))
                v = unread;
        }
        return v;
    }
    bool on()
    {
        return mode() != 0;
    }
    void set(int mode)
    {
        state_.store(mode, std::memory_order_relaxed);
    }

private:
    const char *env_;
    int fallback_;
    bool ones_;
    std::atomic<int> state_{-1};  // -1: the environment not read yet
};

Switch pdl{"CKV_PDL", 1, false}, wgmma{"CKV_WGMMA", 1, false},
    km_lazy{"CKV_KM_LAZY", CKV_KM_LAZY_AUTO, true}, defer{"CKV_DEFER_SCORES", 1, false};

// The current device's compute capability (10 x major + minor), asked once at
// the first use: the GPUs of one process are one model (as the decode
// attention's occupancy cache assumes); 0 when it cannot be asked.
int device_cc()
{
    static const int cc = [] {
        int dev = 0, major = 0, minor = 0;
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
            (void)cudaGetLastError();  // not left for the next launch's check
            return 0;
        }
        return 10 * major + minor;
    }();
    return cc;
}

}  // namespace

bool ckv_pdl_active()
{
    return pdl.on() && device_cc() >= 90;
}

extern "C" void ckv_cuda_set_pdl(bool on)
{
    pdl.set(on);
}

extern "C" bool ckv_cuda_pdl(void)
{
    return ckv_pdl_active();
}

extern "C" void ckv_cuda_set_defer_scores(bool on)
{
    defer.set(on);
}

extern "C" bool ckv_cuda_defer_scores(void)
{
    return defer.on();
}

extern "C" void ckv_cuda_set_wgmma(bool on)
{
    wgmma.set(on);
}

extern "C" void ckv_cuda_set_km_lazy(ckv_km_lazy mode)
{
    km_lazy.set(mode == CKV_KM_LAZY_OFF || mode == CKV_KM_LAZY_ON ? mode : CKV_KM_LAZY_AUTO);
}

extern "C" ckv_km_lazy ckv_cuda_km_lazy(void)
{
    return (ckv_km_lazy)km_lazy.mode();
}

// The sm_90a code runs on compute capability 9.0 only; a build without it
// (gpu_arch other than sm_90a) has no wgmma form.
extern "C" bool ckv_cuda_wgmma(void)
{
#if CKV_HAVE_WGMMA
    return wgmma.on() && device_cc() == 90;
#else
    return false;
#endif
}
