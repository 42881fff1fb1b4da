/* How the K-Means wgmma estimate's balanced blocks share the tiles of
 * centroids of the lists they find live (kernels/cuda_kmeans.cu,
 * km_estimate_wg_kernel's BAL): the lists' tiles end to end, wt of them,
 * cut into wb equal contiguous ranges, one a block. A block walks each list
 * its range touches in turn (a segment), and the last of a list's blocks
 * to arrive merges their tops from the list's scratch, a slot a block.
 * Plain arithmetic, apart from the CUDA code so that the CPU tests check
 * it. */
#ifndef CKV_KMEANS_RANGES_H
#define CKV_KMEANS_RANGES_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __CUDACC__
#define CKV_KM_RANGES_FN static inline __host__ __device__
#else
#define CKV_KM_RANGES_FN static inline
#endif

/* The most blocks that walk one list: its scratch's slots. */
#define CKV_KM_RANGE_SLOTS 16
/* The most blocks a live list, which keeps each list's within the slots:
 * a list's tl tiles touch at most ceil((tl - 1) wb / wt) + 1 ranges. */
#define CKV_KM_RANGE_PER_LIST (CKV_KM_RANGE_SLOTS - 1)

/* Block b's range: tiles ckv_km_range_at(b) .. ckv_km_range_at(b + 1) - 1
 * (0 < wb <= wt: none empty). */
CKV_KM_RANGES_FN int32_t ckv_km_range_at(int32_t b, int32_t wt, int32_t wb)
{
    return (int32_t)((int64_t)b * wt / wb);
}

/* The block whose range holds tile i: the largest b with
 * ckv_km_range_at(b) <= i. */
CKV_KM_RANGES_FN int32_t ckv_km_range_owner(int32_t i, int32_t wt, int32_t wb)
{
    return (int32_t)(((int64_t)(i + 1) * wb - 1) / wt);
}

/* The blocks that share `live` of `lists` lists of tl tiles each, of
 * `workers` launched (0 where there is no tile). multi: a block's range may
 * touch several lists, so equal shares of all the tiles, at most one a
 * worker; otherwise n = workers / lists equal slices of each live list (the
 * host counts workers by all the grid's lists, since it does not know which
 * of them are live; at least 1: workers >= lists is the caller's) up to tl,
 * so that no range crosses a list. Both at most CKV_KM_RANGE_PER_LIST a
 * list. */
CKV_KM_RANGES_FN int32_t ckv_km_range_blocks(bool multi, int32_t workers, int32_t lists,
                                             int32_t live, int32_t tl)
{
    if (live < 1 || live > lists || tl < 1 || workers < 1)
        return 0;
    const int32_t most = tl < CKV_KM_RANGE_PER_LIST ? tl : CKV_KM_RANGE_PER_LIST;
    int32_t n = workers / lists;
    n = n < 1 ? 1 : n > most ? most : n;
    if (!multi)
        return live * n;
    const int32_t wt = live * tl, cap = live * CKV_KM_RANGE_PER_LIST;
    int32_t wb = workers < wt ? workers : wt;
    return wb < cap ? wb : cap;
}

/* A segment: tiles t0 .. t0 + nt - 1 of the vth live list, walked by the
 * block in slot sl of the ns blocks whose ranges touch that list; more:
 * another segment follows in the block's range. */
typedef struct {
    int32_t v, t0, nt, sl, ns;
    bool more;
} ckv_km_segment;

/* Block b's segment after the `done` tiles of its range it has walked, of
 * wb ranges over wt tiles in lists of tl. */
CKV_KM_RANGES_FN ckv_km_segment ckv_km_segment_of(int32_t b, int32_t done, int32_t tl,
                                                  int32_t wt, int32_t wb)
{
    const int32_t x = ckv_km_range_at(b, wt, wb) + done, hi = ckv_km_range_at(b + 1, wt, wb);
    const int32_t v = x / tl, end = (v + 1) * tl, e = hi < end ? hi : end;
    const int32_t first = ckv_km_range_owner(v * tl, wt, wb);
    ckv_km_segment s;
    s.v = v;
    s.t0 = x - v * tl;
    s.nt = e - x;
    s.sl = b - first;
    s.ns = ckv_km_range_owner(end - 1, wt, wb) - first + 1;
    s.more = e < hi;
    return s;
}

#endif
