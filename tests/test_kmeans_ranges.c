/* The K-Means estimate's balanced ranges (src/kmeans_ranges.h): each
 * block's segments walked as the kernel walks them, checked against a
 * count of which block walks which tile, and values derived by hand for
 * SmolLM2's 90 lists on an H100's 132 SMs. */
#include <criterion/criterion.h>
#include <string.h>

#include "kmeans_ranges.h"

enum { MAX_TILES = 65536, MAX_BLOCKS = 1024, MAX_LISTS = 128 };

/* Walks every block's segments for `live` lists of tl tiles shared by wb
 * blocks and checks: every tile walked once; a segment inside one list;
 * the ns every walker of a list states is the number of blocks that walk
 * it, at most CKV_KM_RANGE_SLOTS, and their slots are 0 .. ns - 1, each
 * once. Returns the most segments a block took. */
static int walk_all(int32_t live, int32_t tl, int32_t wb)
{
    static int walked[MAX_TILES];
    static int walkers[MAX_LISTS], slot_seen[MAX_LISTS][CKV_KM_RANGE_SLOTS];
    static int32_t stated[MAX_LISTS];
    const int32_t wt = live * tl;
    cr_assert(wt <= MAX_TILES && live <= MAX_LISTS && wb <= MAX_BLOCKS);
    memset(walked, 0, (size_t)wt * sizeof *walked);
    memset(walkers, 0, (size_t)live * sizeof *walkers);
    memset(slot_seen, 0, (size_t)live * sizeof *slot_seen);
    memset(stated, 0, (size_t)live * sizeof *stated);
    int most = 0;
    for (int32_t b = 0; b < wb; b++) {
        int32_t done = 0;
        int segs = 0;
        ckv_km_segment s;
        do {
            s = ckv_km_segment_of(b, done, tl, wt, wb);
            cr_assert(s.v >= 0 && s.v < live, "live %d tl %d wb %d block %d: list %d", live, tl,
                      wb, b, s.v);
            cr_assert(s.nt >= 1 && s.t0 >= 0 && s.t0 + s.nt <= tl,
                      "live %d tl %d wb %d block %d: tiles %d + %d of %d", live, tl, wb, b,
                      s.t0, s.nt, tl);
            for (int32_t t = s.t0; t < s.t0 + s.nt; t++)
                walked[s.v * tl + t]++;
            cr_assert(s.ns >= 1 && s.ns <= CKV_KM_RANGE_SLOTS && s.sl >= 0 && s.sl < s.ns,
                      "live %d tl %d wb %d block %d: slot %d of %d", live, tl, wb, b, s.sl,
                      s.ns);
            cr_assert(stated[s.v] == 0 || stated[s.v] == s.ns);
            stated[s.v] = s.ns;
            walkers[s.v]++;
            slot_seen[s.v][s.sl]++;
            done += s.nt;
            segs++;
        } while (s.more);
        cr_assert_eq(ckv_km_range_at(b, wt, wb) + done, ckv_km_range_at(b + 1, wt, wb));
        most = segs > most ? segs : most;
    }
    for (int32_t i = 0; i < wt; i++)
        cr_assert_eq(walked[i], 1, "live %d tl %d wb %d: tile %d walked %d times", live, tl, wb,
                     i, walked[i]);
    for (int32_t v = 0; v < live; v++) {
        cr_assert_eq(walkers[v], stated[v], "live %d tl %d wb %d: list %d", live, tl, wb, v);
        for (int32_t sl = 0; sl < stated[v]; sl++)
            cr_assert_eq(slot_seen[v][sl], 1);
    }
    return most;
}

/* The owner of a tile is the block whose range holds it, by search. */
Test(kmeans_ranges, owner_is_the_range_that_holds_the_tile)
{
    for (int32_t wt = 1; wt <= 300; wt++)
        for (int32_t wb = 1; wb <= wt && wb <= 140; wb++)
            for (int32_t i = 0; i < wt; i++) {
                int32_t b = 0;
                while (ckv_km_range_at(b + 1, wt, wb) <= i)
                    b++;
                cr_assert_eq(ckv_km_range_owner(i, wt, wb), b, "wt %d wb %d tile %d", wt, wb, i);
            }
}

/* Equal shares (head_dim 64): any workers; slices of each live list
 * (head_dim 128): n a list of all the lists launched, one segment a block. */
Test(kmeans_ranges, every_tile_once_and_the_slots_of_each_list)
{
    for (int32_t live = 1; live <= 12; live++)
        for (int32_t lists = live; lists <= live + 3; lists += 3)
            for (int32_t tl = 1; tl <= 40; tl++) {
                for (int32_t workers = 1; workers <= 140; workers += workers < 20 ? 1 : 7) {
                    const int32_t wb = ckv_km_range_blocks(true, workers, lists, live, tl);
                    cr_assert(wb >= 1 && wb <= workers && wb <= live * tl);
                    walk_all(live, tl, wb);
                }
                for (int32_t n = 1; n <= CKV_KM_RANGE_SLOTS; n++) {
                    const int32_t ws = ckv_km_range_blocks(false, n * lists, lists, live, tl);
                    const int32_t want = n < tl ? n : tl;
                    cr_assert_eq(ws, live * (want < 15 ? want : 15), "live %d tl %d n %d", live,
                                 tl, n);
                    cr_assert_eq(walk_all(live, tl, ws), 1, "live %d tl %d n %d", live, tl, n);
                }
            }
}

/* Why at most 15 blocks a list: 3 lists of 47 tiles in 47 ranges of 3
 * tiles (16 a list, over the cap) put list 1's tiles 47-93 in the ranges of
 * blocks 15 (45-47) to 31 (93-95), 17 blocks, one more than the scratch's
 * slots; the cap gives 45 blocks, and every list within 16 (their ranges
 * from floor(141 b / 45) meet the lists' ends, 47 and 94, at blocks 15 and
 * 30: one segment a block). */
Test(kmeans_ranges, sixteen_a_list_would_touch_seventeen_slots)
{
    const ckv_km_segment s = ckv_km_segment_of(15, 0, 47, 141, 47);
    cr_expect(s.v == 0 && s.t0 == 45 && s.nt == 2 && s.sl == 15 && s.ns == 16 && s.more);
    const ckv_km_segment t = ckv_km_segment_of(15, 2, 47, 141, 47);
    cr_expect(t.v == 1 && t.t0 == 0 && t.nt == 1 && t.sl == 0 && t.ns == 17);
    cr_expect_eq(ckv_km_range_blocks(true, 47, 3, 3, 47), 45);
    cr_expect_eq(walk_all(3, 47, 45), 1);
}

Test(kmeans_ranges, no_blocks_without_tiles)
{
    cr_expect_eq(ckv_km_range_blocks(true, 132, 90, 0, 512), 0);
    cr_expect_eq(ckv_km_range_blocks(true, 132, 90, 90, 0), 0);
    cr_expect_eq(ckv_km_range_blocks(false, 0, 90, 90, 512), 0);
    cr_expect_eq(ckv_km_range_blocks(true, 132, 90, 91, 512), 0); /* more live than lists */
}

/* SmolLM2 at 128K: 90 lists of 32,768 centroids, 512 tiles of 64, on 132
 * SMs: 46,080 tiles, block b from floor(46,080 b / 132) = floor(349.09 b):
 * 0, 349, 698, 1047. Block 0 walks list 0's tiles 0-348, slot 0 of 2
 * (list 0 ends at 512, inside block 1's range); block 1 list 0's 349-511
 * (slot 1 of 2), then list 1's 0-185 (to 698 = 512 + 186), slot 0 of 2
 * (list 1, tiles 512-1023, ends inside block 2's range, 698-1046). */
Test(kmeans_ranges, smollm2_128k_on_132_sms)
{
    const int32_t wb = ckv_km_range_blocks(true, 132, 90, 90, 512);
    cr_assert_eq(wb, 132);
    ckv_km_segment s = ckv_km_segment_of(0, 0, 512, 46080, wb);
    cr_expect(s.v == 0 && s.t0 == 0 && s.nt == 349 && s.sl == 0 && s.ns == 2 && !s.more);
    s = ckv_km_segment_of(1, 0, 512, 46080, wb);
    cr_expect(s.v == 0 && s.t0 == 349 && s.nt == 163 && s.sl == 1 && s.ns == 2 && s.more);
    s = ckv_km_segment_of(1, 163, 512, 46080, wb);
    cr_expect(s.v == 1 && s.t0 == 0 && s.nt == 186 && s.sl == 0 && s.ns == 2 && !s.more);
    cr_expect_eq(walk_all(90, 512, wb), 2);
}

/* One list of 90 left (a late pass), 512 tiles: 15 blocks either way, the
 * slices' ranges floor(512 b / 15): 0, 34, 68, ...; the 8B's 256 lists
 * with 2 live at 15 slices: 30 blocks; 20 live at 6 a list: 120, not 15 a
 * list (the workers are 6 a list of all 256); 90 lists at head_dim 128
 * with 4 a list: 360 blocks of 128 tiles, block 5 list 1's second slice
 * (tiles 640-767 of all, 128-255 of the list's). */
Test(kmeans_ranges, one_list_and_the_aligned_slices)
{
    cr_expect_eq(ckv_km_range_blocks(true, 132, 90, 1, 512), 15);
    cr_expect_eq(ckv_km_range_blocks(false, 90 * 15, 90, 1, 512), 15);
    cr_expect_eq(ckv_km_range_blocks(false, 256 * 15, 256, 2, 512), 30);
    cr_expect_eq(ckv_km_range_blocks(false, 256 * 6, 256, 20, 512), 120);
    const ckv_km_segment s = ckv_km_segment_of(1, 0, 512, 512, 15);
    cr_expect(s.v == 0 && s.t0 == 34 && s.nt == 34 && s.sl == 1 && s.ns == 15 && !s.more);
    cr_expect_eq(ckv_km_range_blocks(false, 360, 90, 90, 512), 360);
    const ckv_km_segment a = ckv_km_segment_of(5, 0, 512, 46080, 360);
    cr_expect(a.v == 1 && a.t0 == 128 && a.nt == 128 && a.sl == 1 && a.ns == 4 && !a.more);
}
