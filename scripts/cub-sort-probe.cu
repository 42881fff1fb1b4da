// A probe behind docs/performance-notes.md's run ZD (the thirty-sixth
// session): K-Means's group sort (cub's segmented stable sort of a list's
// cluster ids, ckv_pol_sort_int) against one radix sort of composite keys
// (list x rows + cluster) over every list, at decode-time shapes: a list's k =
// rows - 64 clusters, rows 0 .. k - 1 each its own, the last 64 random. Prints
// each form's median of 21 runs (CUDA events) and whether both give the same
// order (the radix sort is stable by construction). Then two forms for the
// thirty-seventh session: cub's segmented radix sort over the cluster ids'
// bits only, and a counting sort a list (one block: a histogram of the
// clusters in shared memory, its scan, an atomic scatter, then each
// cluster's members put back in slot order), against the same order.
//
//   nvcc -O2 -std=c++17 -arch=sm_90a -o /tmp/cub-sort-probe scripts/cub-sort-probe.cu
//   /tmp/cub-sort-probe
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include <cub/cub.cuh>

#define CHECK(x)                                                                        \
    do {                                                                                \
        cudaError_t e_ = (x);                                                           \
        if (e_ != cudaSuccess) {                                                        \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
            exit(1);                                                                    \
        }                                                                               \
    } while (0)

// One block a list: counts, starts, scatter (unordered within a cluster),
// then each cluster's few members sorted by slot (insertion sort: a
// decode-time list's clusters hold one or two).
enum { COUNT_THREADS = 1024 };

__global__ void __launch_bounds__(COUNT_THREADS)
    count_sort_kernel(const int *key, const int *val, int *key_out, int *val_out, const int *seg,
                      int bins)
{
    typedef cub::BlockScan<int, COUNT_THREADS> Scan;
    __shared__ typename Scan::TempStorage tmp;
    extern __shared__ int at[];  // bins: counts, then each cluster's next place
    const int b = seg[blockIdx.x], n = seg[blockIdx.x + 1] - b;
    for (int i = threadIdx.x; i < bins; i += COUNT_THREADS)
        at[i] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += COUNT_THREADS)
        atomicAdd(&at[key[b + i]], 1);
    __syncthreads();
    // Each thread scans a run of bins / COUNT_THREADS (rounded up) bins.
    const int per = (bins + COUNT_THREADS - 1) / COUNT_THREADS, lo = threadIdx.x * per;
    int sum = 0;
    for (int i = lo; i < min(lo + per, bins); i++)
        sum += at[i];
    int ex;
    Scan(tmp).ExclusiveSum(sum, ex);
    for (int i = lo; i < min(lo + per, bins); i++) {
        const int c = at[i];
        at[i] = ex;
        ex += c;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += COUNT_THREADS) {
        const int k = key[b + i], p = atomicAdd(&at[k], 1);
        key_out[b + p] = k;
        val_out[b + p] = val[b + i];
    }
    __syncthreads();
    // at[c] is now cluster c's end; its start is at[c - 1] (0 for c == 0).
    for (int c = threadIdx.x; c < bins; c += COUNT_THREADS) {
        const int e = at[c], s = c ? at[c - 1] : 0;
        for (int i = s + 1; i < e; i++) {
            const int x = val_out[b + i];
            int j = i - 1;
            while (j >= s && val_out[b + j] > x) {
                val_out[b + j + 1] = val_out[b + j];
                j--;
            }
            val_out[b + j + 1] = x;
        }
    }
}

// The median of 21 runs of f, in microseconds.
template <typename F>
static float median_us(F f)
{
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    std::vector<float> t;
    for (int r = 0; r < 21; r++) {
        CHECK(cudaEventRecord(a));
        f();
        CHECK(cudaEventRecord(b));
        CHECK(cudaEventSynchronize(b));
        float ms;
        CHECK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms);
    }
    std::sort(t.begin(), t.end());
    CHECK(cudaEventDestroy(a));
    CHECK(cudaEventDestroy(b));
    return t[t.size() / 2] * 1e3f;
}

int main()
{
    // SmolLM2's and the 8B's lists at 32K and 128K tokens, a 25% budget.
    const int shapes[][2] = {{90, 8256}, {256, 8256}, {90, 32832}, {256, 32832}};
    for (const auto &sh : shapes) {
        const int L = sh[0], M = sh[1], k = M - 64;
        const size_t n = (size_t)L * M;
        std::mt19937 g(7);
        std::vector<int> key(n), val(n), comp(n), seg(L + 1);
        for (int l = 0; l < L; l++) {
            seg[l] = l * M;
            for (int m = 0; m < M; m++) {
                const int c = m < k ? m : (int)(g() % k);
                key[(size_t)l * M + m] = c;
                val[(size_t)l * M + m] = m;
                comp[(size_t)l * M + m] = l * M + c;
            }
        }
        seg[L] = L * M;
        int bits = 1;
        while ((1L << bits) < (long)n)
            bits++;
        int *dk, *dv, *dko, *dvo, *dc, *dco, *ds;
        for (int **p : {&dk, &dv, &dko, &dvo, &dc, &dco})
            CHECK(cudaMalloc(p, n * sizeof(int)));
        CHECK(cudaMalloc(&ds, (L + 1) * sizeof(int)));
        CHECK(cudaMemcpy(dk, key.data(), n * sizeof(int), cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(dv, val.data(), n * sizeof(int), cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(dc, comp.data(), n * sizeof(int), cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(ds, seg.data(), (L + 1) * sizeof(int), cudaMemcpyHostToDevice));
        size_t seg_bytes = 0, radix_bytes = 0;
        CHECK(cub::DeviceSegmentedSort::StableSortPairs(nullptr, seg_bytes, dk, dko, dv, dvo,
                                                        (int)n, L, ds, ds + 1));
        CHECK(cub::DeviceRadixSort::SortPairs(nullptr, radix_bytes, dc, dco, dv, dvo, (int)n, 0,
                                              bits));
        void *tmp;
        CHECK(cudaMalloc(&tmp, std::max(seg_bytes, radix_bytes)));
        std::vector<int> by_seg(n), by_radix(n);
        const float us_seg = median_us([&] {
            CHECK(cub::DeviceSegmentedSort::StableSortPairs(tmp, seg_bytes, dk, dko, dv, dvo,
                                                            (int)n, L, ds, ds + 1));
        });
        CHECK(cudaMemcpy(by_seg.data(), dvo, n * sizeof(int), cudaMemcpyDeviceToHost));
        const float us_radix = median_us([&] {
            CHECK(cub::DeviceRadixSort::SortPairs(tmp, radix_bytes, dc, dco, dv, dvo, (int)n, 0,
                                                  bits));
        });
        CHECK(cudaMemcpy(by_radix.data(), dvo, n * sizeof(int), cudaMemcpyDeviceToHost));
        printf("lists %d rows %d: segmented stable %.1f us, radix of composite keys (%d bits) "
               "%.1f us, same order %s\n",
               L, M, us_seg, bits, us_radix, by_seg == by_radix ? "yes" : "NO");
        int kbits = 1;
        while ((1 << kbits) < k)
            kbits++;
        size_t sr_bytes = 0;
        CHECK(cub::DeviceSegmentedRadixSort::SortPairs(nullptr, sr_bytes, dk, dko, dv, dvo, (int)n,
                                                       L, ds, ds + 1, 0, kbits));
        void *sr_tmp;
        CHECK(cudaMalloc(&sr_tmp, sr_bytes));
        std::vector<int> by_sr(n), by_count(n);
        const float us_sr = median_us([&] {
            CHECK(cub::DeviceSegmentedRadixSort::SortPairs(sr_tmp, sr_bytes, dk, dko, dv, dvo,
                                                           (int)n, L, ds, ds + 1, 0, kbits));
        });
        CHECK(cudaMemcpy(by_sr.data(), dvo, n * sizeof(int), cudaMemcpyDeviceToHost));
        const size_t smem = (size_t)k * sizeof(int);
        CHECK(cudaFuncSetAttribute(count_sort_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)smem));
        CHECK(cudaMemset(dvo, 0xff, n * sizeof(int)));
        const float us_count = median_us([&] {
            count_sort_kernel<<<L, COUNT_THREADS, smem>>>(dk, dv, dko, dvo, ds, k);
            CHECK(cudaGetLastError());
        });
        CHECK(cudaMemcpy(by_count.data(), dvo, n * sizeof(int), cudaMemcpyDeviceToHost));
        printf("lists %d rows %d: segmented radix (%d bits) %.1f us, same order %s; counting "
               "sort %.1f us, same order %s\n",
               L, M, kbits, us_sr, by_sr == by_seg ? "yes" : "NO", us_count,
               by_count == by_seg ? "yes" : "NO");
        CHECK(cudaFree(sr_tmp));
        for (int *p : {dk, dv, dko, dvo, dc, dco, ds})
            CHECK(cudaFree(p));
        CHECK(cudaFree(tmp));
    }
    return 0;
}
