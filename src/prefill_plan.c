#include "prefill_plan.h"

int32_t ckv_prefill_pass(const int32_t *n, int32_t k, int32_t rows, int32_t *seq, int32_t *at,
                         ckv_prefill_piece *out)
{
    int32_t used = 0, count = 0;
    while (*seq < k && used < rows) {
        const int32_t left = n[*seq] - *at, take = left < rows - used ? left : rows - used;
        out[count++] = (ckv_prefill_piece){*seq, *at, used, take, take == left};
        used += take;
        *at += take;
        if (*at == n[*seq]) {
            ++*seq;
            *at = 0;
        }
    }
    return count;
}
