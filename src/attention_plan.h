/* How the GPU attention cuts each cache list into ranges (split-KV): one
 * block per range and row group, partial softmax sums merged afterwards
 * (kernels/cuda_attention.cu). Plain arithmetic, apart from the CUDA code so
 * that the CPU tests check it. */
#ifndef CKV_ATTENTION_PLAN_H
#define CKV_ATTENTION_PLAN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The most ranges a list is cut into: the merge kernel stages every range's
 * max and sum in shared memory. */
#define CKV_ATTENTION_MAX_SPLITS 1024

typedef struct {
    int32_t splits, split_len;
} ckv_k_attention_split;

/* Scratch for the attention, in floats, for n queries split `splits` ways:
 * every range's unnormalised outputs, max and sum, then the merged max and
 * sum. */
size_t ckv_k_attention_ws(int32_t n, int32_t splits, int32_t n_head, int32_t head_dim);

/* Splits whose `blocks` blocks per range fill whole waves of `slots` places
 * (blocks that fit on the GPU at once): for 1, 2, ... CKV_ATTENTION_MAX_WAVES
 * waves, the most splits that fit in them; the first whose waves are at
 * least CKV_ATTENTION_WAVE_FILL full, else the fullest (the fewest splits on
 * a tie). A list's blocks each stream at a bounded rate, so a half-empty
 * wave leaves bandwidth unused: two full waves of short ranges beat one
 * half-full wave of long ones. */
#define CKV_ATTENTION_MAX_WAVES 8
#define CKV_ATTENTION_WAVE_FILL 0.9
int64_t ckv_attention_wave_splits(int64_t blocks, int64_t slots);

typedef struct {
    int64_t blocks;   /* blocks of one range's launch (row groups x heads) */
    int resident;     /* blocks that fit on one SM at once, to plan whole
                         waves; 0: aim at per_sm per SM, rounded up */
    int per_sm;
    int min_split;    /* no range but the last shorter than this many entries */
    int max_splits;   /* at most this many ranges (0: no bound but the scratch's
                         and CKV_ATTENTION_MAX_SPLITS) */
    int tile;         /* split_len is a multiple of it */
    int32_t n, n_head, head_dim; /* the scratch's queries and heads */
    int32_t max_len;  /* the longest list after the append */
    int32_t n_sm;
    size_t ws_floats; /* the scratch there is */
} ckv_attention_plan_in;

/* The most ranges a decode list of max_len entries (after the step's
 * append) is cut into on a card whose memory peaks at peak_bw bytes/s:
 * max(32, ceil(max_len / L)). Few lists (batch 1) cut into many short
 * ranges pay each block's fixed part and the merge's trips, whatever the
 * card, hence the count; long lists need the blocks for the bytes in
 * flight, which the copy rate's latency times its rate sets, hence L
 * (ckv_attention_decode_long_range), which scales inversely with the card's
 * peak bandwidth against the reference, an H200 (4.8 TB/s) where 32 ranges
 * and 1,024 entries were measured best (runs DW, DX, DY): L = 1,024 / r to
 * the nearest multiple of 512, at least 512 (peak_bw 0: unknown, taken as
 * the reference's). An H100 (3.35 TB/s) gets 1,536. */
#define CKV_ATTENTION_DECODE_REF_BW 4.8e12
/* A decode range's length is a multiple of a warp's step (8 entries), not of
 * the prefill's 32-entry tiles, so that the ranges are nearer equal (1,025
 * entries in 6: 5 x 176 + 145, not 5 x 192 + 65). A block's time goes by
 * rounds of its 4 warps' steps (32 entries), which that often leaves as they
 * were (the 8B's batch-8 1K ranges take 6 either way, and its steps did not
 * change), but SmolLM2's steps took 0.4-1.8% less at batch 8, 8K-128K and
 * batch 1, 32K-128K, nothing more (ZZ120). Both decode kernels mask entries
 * past a range's end. */
#define CKV_ATTENTION_DECODE_TILE 8
int ckv_attention_decode_max_splits(int32_t max_len, double peak_bw);
int ckv_attention_decode_long_range(double peak_bw);

/* A decode launch of at least CKV_ATTENTION_TAIL_WAVES waves (blocks x
 * splits over resident x n_sm places) makes the last range of a list of
 * max_len entries a CKV_ATTENTION_TAIL_PART-th of the others' length
 * (before the tile's rounding; a shorter list's last range is shorter or
 * empty; equal ranges where the rounding would leave it empty). The hardware hands out
 * blocks in launch order, the last ranges last; after the last block
 * starts, the places empty over about one block's time, and once fewer
 * blocks are left than the copy rate needs (a block alone streams about 22
 * GB/s on an H100: about 140 for 3.1 TB/s) the rate falls. Short last
 * blocks shorten that drain (longest first, shortest last). Measured on an
 * H100 (ZZ141-ZZ143, per-block traces): the 8B's 39 x 8K attention 446 ->
 * 440 us, 39 x 32K 1,729 -> 1,698, 64 rows 0.6% faster, the 39 x 8K step
 * 20.41 -> 20.20 ms. Under fewer waves the longer other ranges cost more
 * than the drain saves (32 x 8K in 3 ranges, 1.94 waves: 364 -> 413 us;
 * one-wave 9 x 32K: 418 -> 433), hence the bound. */
#define CKV_ATTENTION_TAIL_WAVES 3
#define CKV_ATTENTION_TAIL_PART 4

/* Splits and their length: as above, then at most max_len / min_split,
 * what the scratch holds and CKV_ATTENTION_MAX_SPLITS, at least 1; the
 * length a multiple of tile, covering max_len (the last range's as above). */
ckv_k_attention_split ckv_attention_split_plan(const ckv_attention_plan_in *p);

#ifdef __cplusplus
}
#endif

#endif
