#include "attention_plan.h"

#include <math.h>

size_t ckv_k_attention_ws(int32_t n, int32_t splits, int32_t n_head, int32_t head_dim)
{
    return (size_t)splits * n * n_head * (head_dim + 2) + (size_t)n * n_head * 2;
}

int64_t ckv_attention_wave_splits(int64_t blocks, int64_t slots)
{
    if (blocks < 1)
        blocks = 1;
    if (slots < 1)
        slots = 1;
    int64_t best = 1;
    double best_fill = 0.0;
    for (int64_t w = 1; w <= CKV_ATTENTION_MAX_WAVES; w++) {
        const int64_t s = w * slots / blocks;
        if (s < 1)
            continue;
        const int64_t b = blocks * s, waves = (b + slots - 1) / slots;
        const double fill = (double)b / (double)(waves * slots);
        if (fill >= CKV_ATTENTION_WAVE_FILL)
            return s;
        if (fill > best_fill) {
            best = s;
            best_fill = fill;
        }
    }
    return best;
}

ckv_k_attention_split ckv_attention_split_plan(const ckv_attention_plan_in *p)
{
    const int64_t blocks = p->blocks > 0 ? p->blocks : 1;
    const int64_t slots = (int64_t)p->resident * p->n_sm; /* places of a wave (resident > 0) */
    int64_t splits = p->resident > 0
                         ? ckv_attention_wave_splits(blocks, slots)
                         : ((int64_t)p->per_sm * p->n_sm + blocks - 1) / blocks;
    const int64_t by_len = ((int64_t)p->max_len + p->min_split - 1) / p->min_split;
    // The merged max and sum come first; a scratch without room for them
    // holds no range (the caller sized it wrong: 1, not an underflow).
    const size_t fixed = (size_t)p->n * p->n_head * 2;
    const size_t per = (size_t)p->n * p->n_head * (p->head_dim + 2);
    const int64_t by_ws = per && p->ws_floats > fixed ? (int64_t)((p->ws_floats - fixed) / per) : 0;
    if (splits > by_len)
        splits = by_len;
    if (splits > by_ws)
        splits = by_ws;
    if (p->max_splits > 0 && splits > p->max_splits)
        splits = p->max_splits;
    if (splits > CKV_ATTENTION_MAX_SPLITS)
        splits = CKV_ATTENTION_MAX_SPLITS;
    if (splits < 1)
        splits = 1;
    int64_t len = ((int64_t)p->max_len + splits - 1) / splits;
    len = (len + p->tile - 1) / p->tile * p->tile;
    // Under many waves the last range a quarter of the others: ceil(max_len
    // / (splits - 1 + 1 / CKV_ATTENTION_TAIL_PART)), kept where the rounding
    // leaves the last range some entries and the ranges' ends within int32
    // (the kernels add split_len to a range's start in int).
    if (p->resident > 0 && splits > 1 && blocks * splits >= CKV_ATTENTION_TAIL_WAVES * slots) {
        const int64_t parts = (splits - 1) * CKV_ATTENTION_TAIL_PART + 1;
        int64_t t = ((int64_t)p->max_len * CKV_ATTENTION_TAIL_PART + parts - 1) / parts;
        t = (t + p->tile - 1) / p->tile * p->tile;
        if ((splits - 1) * t < p->max_len && splits * t <= INT32_MAX)
            len = t;
    }
    const ckv_k_attention_split r = {(int32_t)splits, (int32_t)(len > 0 ? len : p->tile)};
    return r;
}

/* Measured on the reference H200: where few lists share the SMs (batch 1)
 * the whole-wave plan cut each into many short ranges, whose blocks' fixed
 * part (the query's load, the fold of the warps, the partial store) and the
 * merge's trips outweighed their bytes: at 32 ranges the 8B's batch-1 steps
 * took 1.6-2.0% less at 8K (0.3-2.5% at 32K) and SmolLM2's 21% at 8K, 9% at
 * 32K (runs DW, DX, DY). At 32 ranges SmolLM2's 128K step (3 lists, 96
 * blocks) took 42% more (DX), hence the length bound (with it, DY: 3% less).
 * On an H100 ranges of up to 1,536 entries took SmolLM2's 128K step 3.7%
 * under 1,024 (86 ranges against 128) and every 32K list's step 0.5-0.9%
 * (32,769 entries: 32 ranges, not 33; ZZ115), where a count of 24 instead
 * of 32 cost SmolLM2's 32K step 11.6% (72 blocks on 132 SMs against 99;
 * ZZ114). */
int ckv_attention_decode_long_range(double peak_bw)
{
    double r = peak_bw > 0.0 && isfinite(peak_bw) ? peak_bw / CKV_ATTENTION_DECODE_REF_BW : 1.0;
    r = fmax(r, 0.125); /* keeps the length in range */
    const int len = 512 * (int)lround(2.0 / r);
    return len > 512 ? len : 512;
}

int ckv_attention_decode_max_splits(int32_t max_len, double peak_bw)
{
    enum { COUNT = 32 };
    const int64_t len = ckv_attention_decode_long_range(peak_bw);
    const int64_t by_len = max_len > 0 ? (max_len + len - 1) / len : 0;
    return by_len > COUNT ? (int)by_len : COUNT;
}
