/* The GPU attention's split plan (src/attention_plan.h): values derived by
 * hand from its definition, for the H200's 132 SMs. */
#include <criterion/criterion.h>
#include <math.h>

#include "attention_plan.h"

/* One wave of 396 places (3 blocks x 132 SMs): 8 blocks per range take 49
 * ranges (392 blocks; 50 would be 400, a second wave of 4). */
Test(wave_splits, as_many_as_fit_in_one_wave)
{
    cr_expect_eq(ckv_attention_wave_splits(8, 396), 49);
    cr_expect_eq(ckv_attention_wave_splits(64, 396), 6); /* 384; 7 would be 448 */
    cr_expect_eq(ckv_attention_wave_splits(396, 396), 1);
    cr_expect_eq(ckv_attention_wave_splits(0, 396), 396); /* no blocks counts as 1 */
}

/* More blocks than one wave: for w waves the most splits that fit in them,
 * floor(w * 396 / blocks), until the waves are 90% full:
 *   512 blocks: w=2: 1, 512/792 = .65; w=3: 2, 1024/1188 = .86; w=4: 3, 1536/1584 = .97 -> 3
 *   616 blocks: w=2..4: 1, 1, 2 at .78; w=5: 3, 1848/1980 = .93 -> 3
 *   792 blocks: w=2: 1, two full waves -> 1
 *   500 blocks: w=2: 1, .63; w=3: 2, 1000/1188 = .84; w=4: 3, 1500/1584 = .95 -> 3 */
Test(wave_splits, over_one_wave_until_ninety_percent_full)
{
    cr_expect_eq(ckv_attention_wave_splits(512, 396), 3);
    cr_expect_eq(ckv_attention_wave_splits(616, 396), 3);
    cr_expect_eq(ckv_attention_wave_splits(792, 396), 1);
    cr_expect_eq(ckv_attention_wave_splits(500, 396), 3);
}

/* Blocks that fill one wave only partly take more waves of shorter ranges
 * (26, 19 and 39 sequences of the 8B shape, 8 KV heads each):
 *   208 blocks: w=1: 1, 208/396 = .53; w=2: 3, 624/792 = .79; w=3: 5, 1040/1188 = .88;
 *               w=4: 7, 1456/1584 = .92 -> 7
 *   152 blocks: w=1: 2, 304/396 = .77; w=2: 5, 760/792 = .96 -> 5
 *   312 blocks: w=1..3: 1, 2, 3 at .79; w=4: 5, 1560/1584 = .98 -> 5 */
Test(wave_splits, a_part_full_wave_takes_more_waves)
{
    cr_expect_eq(ckv_attention_wave_splits(208, 396), 7);
    cr_expect_eq(ckv_attention_wave_splits(152, 396), 5);
    cr_expect_eq(ckv_attention_wave_splits(312, 396), 5);
}

/* The 8B's serving batches at 8 KV heads a sequence, one wave of 396 places
 * (docs/performance-notes.md, the eighty-second session):
 *   9 sequences, 72 blocks:   w=1: 5, 360/396 = .91 -> 5
 *   16 sequences, 128 blocks: w=1: 3, 384/396 = .97 -> 3
 *   24 sequences, 192 blocks: w=1: 2, 384/396 = .97 -> 2
 *   32 sequences, 256 blocks: w=1: 1, .65; w=2: 3, 768/792 = .97 -> 3
 * (39 sequences, 312 blocks: 5 in four waves, above.) */
Test(wave_splits, the_serving_batches)
{
    cr_expect_eq(ckv_attention_wave_splits(72, 396), 5);
    cr_expect_eq(ckv_attention_wave_splits(128, 396), 3);
    cr_expect_eq(ckv_attention_wave_splits(192, 396), 2);
    cr_expect_eq(ckv_attention_wave_splits(256, 396), 3);
}

/* 397 blocks never fill 90% within 8 waves: w=2..8 give 1..7 splits at
 * 397/792 = .50, 794/1188 = .67, 1191/1584 = .75, 1588/1980 = .80,
 * 1985/2376 = .84, 2382/2772 = .86, 2779/3168 = .88: the fullest, 7. */
Test(wave_splits, the_fullest_when_none_is_full_enough)
{
    cr_expect_eq(ckv_attention_wave_splits(397, 396), 7);
}

static ckv_attention_plan_in base(void)
{
    ckv_attention_plan_in p = {0};
    p.per_sm = 4;
    p.min_split = 128;
    p.tile = 32;
    p.n_sm = 132;
    return p;
}

/* The 8B shape's decode at batch 1, 8193 entries: 8 KV heads, 3 blocks fit
 * per SM, ranges of at least 64 in multiples of 8 (the decoder's), the
 * decoder's scratch for 512 rows. */
static ckv_attention_plan_in decode_8b(void)
{
    ckv_attention_plan_in p = base();
    p.blocks = 8;
    p.resident = 3;
    p.min_split = 64;
    p.tile = CKV_ATTENTION_DECODE_TILE;
    p.n = 1;
    p.n_head = 32;
    p.head_dim = 128;
    p.max_len = 8193;
    p.ws_floats = ckv_k_attention_ws(512, 8, 32, 128);
    return p;
}

/* The 8B's decode plan for n rows (`blocks` of them a range) over max_len
 * entries, at most 32 ranges (the decoder's bound), against the ranges and
 * length derived by hand. */
static void expect_decode(int32_t n, int64_t blocks, int32_t max_len, int32_t splits,
                          int32_t split_len)
{
    ckv_attention_plan_in p = decode_8b();
    p.max_splits = 32;
    p.n = n;
    p.blocks = blocks;
    p.max_len = max_len;
    const ckv_k_attention_split s = ckv_attention_split_plan(&p);
    cr_expect_eq(s.splits, splits, "%d rows, %lld blocks, %d entries: %d ranges, not %d", n,
                 (long long)blocks, max_len, s.splits, splits);
    cr_expect_eq(s.split_len, split_len, "%d rows, %lld blocks, %d entries: ranges of %d, not %d",
                 n, (long long)blocks, max_len, s.split_len, split_len);
}

/* 49 ranges (above); ceil(8193 / 49) = 168, a multiple of 8 already (of
 * 32 it would be 192). Ranges of 64 allow 129, the scratch thousands. */
Test(split_plan, decode_fills_one_wave)
{
    const ckv_attention_plan_in p = decode_8b();
    const ckv_k_attention_split s = ckv_attention_split_plan(&p);
    cr_expect_eq(s.splits, 49);
    cr_expect_eq(s.split_len, 168);
}

/* The same with at most 32 ranges (the decoder's bound): ceil(8193 / 32) =
 * 257, up to a multiple of 8: 264, and 8193 / 264 needs all 32 (31 x 264 =
 * 8184, the last 9 entries). At a multiple of 32 it was 288, of which 29
 * ranges held the list: the plan keeps the count it was given, ranges past
 * the list's end being empty, as with any rounding of split_len. */
Test(split_plan, decode_bound_on_ranges)
{
    ckv_attention_plan_in p = decode_8b();
    p.max_splits = 32;
    ckv_k_attention_split s = ckv_attention_split_plan(&p);
    cr_expect_eq(s.splits, 32);
    cr_expect_eq(s.split_len, 264);
    p.tile = 32;
    s = ckv_attention_split_plan(&p);
    cr_expect_eq(s.splits, 32);
    cr_expect_eq(s.split_len, 288);
    p.tile = CKV_ATTENTION_DECODE_TILE;
    p.max_splits = 64; /* above the wave's 49: no effect */
    cr_expect_eq(ckv_attention_split_plan(&p).splits, 49);
}

/* The 8B's batch-8 1K step, 1,025 entries after the append: 64 lists fill
 * one wave in 6 ranges (384 of 396 places); ceil(1025 / 6) = 171, up to a
 * multiple of 8: 176 (5 x 176 + 145; of 32: 192, 5 x 192 + 65). Batch 1 at
 * 4,097 entries: the wave's 49 ranges and the 64-entry floor's 65 are over
 * the bound of 32; ceil(4097 / 32) = 129, up to a multiple of 8: 136 (31
 * ranges hold the list; of 32: 160, and 26 hold it). */
Test(split_plan, decode_ranges_in_steps_of_eight)
{
    expect_decode(8, 64, 1025, 6, 176);
    expect_decode(1, 8, 4097, 32, 136);
}

/* The serving batches after the step's append (8,193 and 32,769 entries;
 * 396 places): 39 sequences, 312 blocks, 5 ranges (above) are 1,560 blocks,
 * 3.94 waves, so the last range is a quarter: ceil(8193 / 4.25) = 1928 (a
 * multiple of 8), 4 x 1928 = 7712, the last 481 entries. 64 sequences, 512
 * blocks: 3 ranges (1,536 blocks, 3.88 waves): ceil(8193 / 2.25) = 3642, up
 * to 3648, the last 8193 - 7296 = 897. 158 sequences at 2,049 entries, 1,264
 * blocks: 2 ranges (w = 7: 2528 / 2772 = .91), 6.38 waves: ceil(2049 /
 * 1.25) = 1640, the last 409. Under 3 waves the ranges stay equal: 9
 * sequences (72 blocks, 5 ranges, 0.91 waves) ceil(32769 / 5) = 6554, up
 * to 6560; 32 sequences (256 blocks, 3 ranges, 1.94 waves) ceil(8193 / 3) =
 * 2731, up to 2736. */
Test(split_plan, decode_last_range_a_quarter_under_many_waves)
{
    expect_decode(39, 312, 8193, 5, 1928);
    expect_decode(64, 512, 8193, 3, 3648);
    expect_decode(158, 1264, 2049, 2, 1640);
    expect_decode(9, 72, 32769, 5, 6560);
    expect_decode(32, 256, 8193, 3, 2736);
}

/* The bound is inclusive: 594 blocks (w = 3: 1188 / 594 = 2 splits, 1,188
 * blocks, 3 waves exactly, full) take the short last range: ceil(8193 /
 * 1.25) = 6555, up to 6560, the last 1,633 entries; 593 blocks (w = 3: 1188
 * / 593 = 2, 1,186 blocks, fill 1186 / 1188) stay equal: ceil(8193 / 2) =
 * 4097, up to 4104. Where the rounding would leave the last range empty the
 * ranges stay equal: 312 blocks at 384 entries (5 ranges): ceil(1536 / 17)
 * = 91, up to 96, and 4 x 96 = 384 fills the list, so 384 / 5 -> 80 (the
 * last 64). */
Test(split_plan, decode_last_range_bounds)
{
    expect_decode(64, 594, 8193, 2, 6560);
    expect_decode(64, 593, 8193, 2, 4104);
    expect_decode(39, 312, 384, 5, 80);
}

/* A 512-row prefill chunk of SmolLM2 (9 query heads, head_dim 64) over 4096
 * entries: 8 row groups of 64 x 9 heads = 72 blocks; 4 per SM, rounded up:
 * ceil(528 / 72) = 8; ranges of 128 allow 32; the decoder's scratch holds
 * 8: 8 ranges of 512. */
Test(split_plan, prefill_aims_at_four_per_sm)
{
    ckv_attention_plan_in p = base();
    p.blocks = 72;
    p.n = 512;
    p.n_head = 9;
    p.head_dim = 64;
    p.max_len = 4096;
    p.ws_floats = ckv_k_attention_ws(512, 8, 9, 64);
    const ckv_k_attention_split s = ckv_attention_split_plan(&p);
    cr_expect_eq(s.splits, 8);
    cr_expect_eq(s.split_len, 512);
}

/* The caps: 16 blocks per SM for one block per range wants 2112 ranges,
 * 2^20 entries in ranges of 64 allow 16384, the scratch is ample: the
 * merge's 1024, of 1024 entries each. A scratch of 3 ranges caps at 3
 * (ceil(5000 / 3) = 1667 -> 1696). One without room for the merged sums
 * (10 floats for 1 row x 6 heads x 2) gives 1 range, not an underflow. */
Test(split_plan, capped_by_the_merge_and_the_scratch)
{
    ckv_attention_plan_in p = base();
    p.blocks = 1;
    p.resident = 16;
    p.min_split = 64;
    p.n = 1;
    p.n_head = 6;
    p.head_dim = 64;
    p.max_len = 1 << 20;
    p.ws_floats = ckv_k_attention_ws(1, 4096, 6, 64);
    ckv_k_attention_split s = ckv_attention_split_plan(&p);
    cr_expect_eq(s.splits, CKV_ATTENTION_MAX_SPLITS);
    cr_expect_eq(s.split_len, 1024);

    p.max_len = 5000;
    p.ws_floats = ckv_k_attention_ws(1, 3, 6, 64);
    s = ckv_attention_split_plan(&p);
    cr_expect_eq(s.splits, 3);
    cr_expect_eq(s.split_len, 1696);

    p.ws_floats = 10;
    s = ckv_attention_split_plan(&p);
    cr_expect_eq(s.splits, 1);
    cr_expect_eq(s.split_len, 5024);
}

/* The scratch formula: per range and row and head, head_dim outputs, a max
 * and a sum; then a merged max and sum per row and head:
 * 3 x 2 x 4 x (64 + 2) + 2 x 4 x 2 = 1584 + 16 = 1600. */
Test(split_plan, scratch_size)
{
    cr_expect_eq(ckv_k_attention_ws(2, 3, 4, 64), 1600);
}

/* The decode plan's long-range length against the card's peak bandwidth,
 * from the clock and bus width CUDA reports (2 transfers a clock), r = bw /
 * 4.8 TB/s, 1,024 / r to the nearest multiple of 512. An H200 (3,201 MHz,
 * 6,144 bits: 4.917 TB/s, r = 1.0244): 999.6 -> 1024, the reference's own.
 * An H100 (2,619 MHz, 5,120 bits: 3.352 TB/s, r = 0.6984): 1466.2 -> 1536.
 * An 8 TB/s card (r = 1.667): 614.4 -> 512. A 1 TB/s card (r = 0.2083):
 * 4915 -> 5120. A 0.1 TB/s card: r held at 1/8, 8192. Unknown (0, or not
 * finite): 1024. */
Test(decode_long_range, scales_with_the_cards_bandwidth)
{
    const struct {
        double bw;
        int len;
    } c[] = {{2.0 * 3201e6 * 6144 / 8, 1024}, {2.0 * 2619e6 * 5120 / 8, 1536},
             {8e12, 512},   {1e12, 5120},  {0.1e12, 8192}, {0.0, 1024}, {INFINITY, 1024},
             {NAN, 1024},   {CKV_ATTENTION_DECODE_REF_BW, 1024}};
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        const int l = ckv_attention_decode_long_range(c[i].bw);
        cr_expect_eq(l, c[i].len, "bw %g: ranges of %d, expected %d", c[i].bw, l, c[i].len);
    }
}

/* The decode plan's range bound, max(32, ceil(max_len / L)), with L as
 * above: 1,024 on an H200 (4.917 TB/s), 1,536 on an H100 (3.352 TB/s). A
 * 32K context's list after the step's append, 32,769 entries: 33 ranges on
 * the H200, 32 on the H100 (ceil = 22). 32,768: 32 either way. 128K after
 * the append, 131,073: 129 and 86 (85.3 up). 49,153 on the H100: 33
 * (32.0007 up). Short lists and empty ones: 32. */
Test(decode_max_splits, the_count_or_the_long_ranges)
{
    const double h200 = 2.0 * 3201e6 * 6144 / 8, h100 = 2.0 * 2619e6 * 5120 / 8;
    const struct {
        int32_t len;
        double bw;
        int splits;
    } c[] = {{32769, h200, 33}, {32769, h100, 32}, {32768, h200, 32}, {32768, h100, 32},
             {131073, h200, 129}, {131073, h100, 86}, {49153, h100, 33}, {1024, h100, 32},
             {0, h200, 32}};
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        const int s = ckv_attention_decode_max_splits(c[i].len, c[i].bw);
        cr_expect_eq(s, c[i].splits, "%d entries at bw %g: %d ranges, expected %d", c[i].len,
                     c[i].bw, s, c[i].splits);
    }
}
