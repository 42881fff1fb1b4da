/* A C model of the decode merge kernels of kernels/cuda_attention.cu (a
 * review's check, not a test: it models the kernels, it does not run them).
 *   OLD: 134d5f1's attention_merge_warp<V,B> (B = 16 if splits <= 16 else 32,
 *        the ranges past 64 read again 32 at a time)
 *   NEW: ae2e21c's merge_chunk / merge_store / attention_merge_warp /
 *        attention_merge_multi, with the launch's choice of kernel and W; its
 *        multi form's last fold as written there, and beside it the fold of
 *        50a9e54 (merge_chunk over the warps' states in shared memory), whose
 *        bits it compares with the first's.
 * A warp is 32 lanes of per-lane registers; a shuffle is an array read of the
 * source lane's register; shared memory is an array with bounds checks; every
 * global index is checked against part_o [splits][n][H][HD] and part_ml
 * [splits][n][H][2] (and out/ml [n][H][HD] / [n][H][2]). Both against a
 * double reference, on head_dims 64 and 128, 1-300 ranges and spots to
 * 1,024, rows of 1-5 queries over 1-3 heads, nine patterns of empty ranges
 * and spread maxima.
 * Floats in float, expf; the third argument chooses whether `x += a * b` is
 * fmaf (what nvcc's default contraction gives, 1) or a separate multiply and
 * add (0). Compile with -ffp-contract=off so that the host compiler fuses
 * nothing itself:
 *   gcc -O2 -Wall -ffp-contract=off -o /tmp/merge-model docs/experiments/merge-model.c -lm
 *   /tmp/merge-model 300 3 1; /tmp/merge-model 300 3 0
 * (session 77: 16,434 cases each; NEW within 5.45e-7 of the reference, OLD
 * 1.6-1.8e-6; 0 of 1,028,324 words differing from OLD at <= 32 ranges; the
 * two folds 0 of 3,470,304 lanes differing; 0 out-of-bounds accesses). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int use_fma = 1;
static long oob = 0;
#define MAC(acc, a, b) ((acc) = use_fma ? fmaf((a), (b), (acc)) : (acc) + (a) * (b))

typedef struct {
    int splits, n, H, HD;
    float *part_o, *part_ml; /* inputs */
    size_t n_o, n_ml;
    float *out, *ml; /* outputs */
    size_t n_out, n_mlo;
} Buf;

static float rd(const float *p, size_t i, size_t n, const char *what)
{
    if (i >= n) {
        if (oob < 10)
            fprintf(stderr, "OOB read %s[%zu] of %zu\n", what, i, n);
        oob++;
        return NAN;
    }
    return p[i];
}
static void wr(float *p, size_t i, size_t n, float v, const char *what)
{
    if (i >= n) {
        if (oob < 10)
            fprintf(stderr, "OOB write %s[%zu] of %zu\n", what, i, n);
        oob++;
        return;
    }
    p[i] = v;
}
#define PO(i) rd(b->part_o, (i), b->n_o, "part_o")
#define PML(i) rd(b->part_ml, (i), b->n_ml, "part_ml")

/* ---------------- OLD (main) attention_merge_warp<V, B> ---------------- */
static void old_warp(const Buf *b, int V, int B, int i, int by)
{
    const int HD = 32 * V, splits = b->splits, n = b->n, H = b->H;
    if (i >= n)
        return;
    const size_t per = (size_t)n * H, row = (size_t)i * H + by;
    float mA[32], lA[32], mB[32], lB[32], L[32], O[32][4], wA[32], wB[32], wC[32], lC[32], M[32];
    for (int lane = 0; lane < 32; lane++) {
        mA[lane] = -INFINITY, lA[lane] = 0.0f, mB[lane] = -INFINITY, lB[lane] = 0.0f;
        if (lane < splits) {
            mA[lane] = PML((lane * per + row) * 2);
            lA[lane] = PML((lane * per + row) * 2 + 1);
        }
        if (lane + 32 < splits) {
            mB[lane] = PML(((lane + 32) * per + row) * 2);
            lB[lane] = PML(((lane + 32) * per + row) * 2 + 1);
        }
        L[lane] = 0.0f, wA[lane] = wB[lane] = wC[lane] = lC[lane] = 0.0f, M[lane] = -INFINITY;
        for (int v = 0; v < V; v++)
            O[lane][v] = 0.0f;
    }
    static float ov[32][32][4]; /* [lane][j][v] */
    for (int s0 = 0; s0 < splits; s0 += B) {
        for (int lane = 0; lane < 32; lane++)
            for (int j = 0; j < B; j++)
                for (int v = 0; v < V; v++)
                    ov[lane][j][v] =
                        s0 + j < splits ? PO(((s0 + j) * per + row) * HD + V * lane + v) : 0.0f;
        if (s0 == 0) {
            for (int lane = 0; lane < 32; lane++) {
                M[lane] = fmaxf(mA[lane], mB[lane]);
                for (int s = lane + 64; s < splits; s += 32)
                    M[lane] = fmaxf(M[lane], PML((s * per + row) * 2));
            }
            for (int o = 16; o > 0; o >>= 1) {
                float t[32];
                for (int lane = 0; lane < 32; lane++)
                    t[lane] = fmaxf(M[lane], M[lane ^ o]);
                memcpy(M, t, sizeof t);
            }
            for (int lane = 0; lane < 32; lane++) {
                wA[lane] = mA[lane] == -INFINITY ? 0.0f : expf(mA[lane] - M[lane]);
                wB[lane] = mB[lane] == -INFINITY ? 0.0f : expf(mB[lane] - M[lane]);
            }
        }
        if (s0 >= 64 && s0 % 32 == 0) {
            for (int lane = 0; lane < 32; lane++) {
                float mC = -INFINITY;
                lC[lane] = 0.0f;
                if (s0 + lane < splits) {
                    mC = PML(((s0 + lane) * per + row) * 2);
                    lC[lane] = PML(((s0 + lane) * per + row) * 2 + 1);
                }
                wC[lane] = mC == -INFINITY ? 0.0f : expf(mC - M[lane]);
            }
        }
        for (int j = 0; j < B; j++) {
            const int s = s0 + j;
            if (s >= splits)
                break;
            for (int lane = 0; lane < 32; lane++) {
                const int src = s % 32;
                const float w = s < 32 ? wA[src] : s < 64 ? wB[src] : wC[src];
                const float ls = s < 32 ? lA[src] : s < 64 ? lB[src] : lC[src];
                if (w == 0.0f)
                    continue;
                MAC(L[lane], w, ls);
                for (int v = 0; v < V; v++)
                    MAC(O[lane][v], w, ov[lane][j][v]);
            }
        }
    }
    for (int lane = 0; lane < 32; lane++) {
        if (lane == 0) {
            wr(b->ml, row * 2, b->n_mlo, M[lane], "ml");
            wr(b->ml, row * 2 + 1, b->n_mlo, L[lane], "ml");
        }
        for (int v = 0; v < V; v++)
            wr(b->out, row * HD + V * lane + v, b->n_out, O[lane][v] / L[lane], "out");
    }
}

/* ---------------- NEW (next/merge-multi) ---------------- */
typedef struct {
    float M[32], L[32], O[32][4];
} WarpState;

static void merge_chunk(const Buf *b, int V, int B, size_t per, size_t row, int c0, WarpState *st)
{
    const int HD = 32 * V, splits = b->splits;
    float m[32], l[32], mc[32], wl[32];
    static float ov[32][32][4];
    for (int lane = 0; lane < 32; lane++) {
        m[lane] = -INFINITY, l[lane] = 0.0f;
        if (c0 + lane < splits) {
            m[lane] = PML(((c0 + lane) * per + row) * 2);
            l[lane] = PML(((c0 + lane) * per + row) * 2 + 1);
        }
        for (int j = 0; j < B; j++)
            for (int v = 0; v < V; v++)
                ov[lane][j][v] =
                    c0 + j < splits ? PO(((c0 + j) * per + row) * HD + V * lane + v) : 0.0f;
        mc[lane] = m[lane];
    }
    for (int o = 16; o > 0; o >>= 1) {
        float t[32];
        for (int lane = 0; lane < 32; lane++)
            t[lane] = fmaxf(mc[lane], mc[lane ^ o]);
        memcpy(mc, t, sizeof t);
    }
    /* the early return: per lane (it is uniform; checked) */
    int ret = 0;
    for (int lane = 0; lane < 32; lane++)
        ret += mc[lane] == -INFINITY;
    if (ret != 0 && ret != 32) {
        fprintf(stderr, "divergent early return\n");
        exit(2);
    }
    if (ret)
        return;
    for (int lane = 0; lane < 32; lane++) {
        const float Mn = fmaxf(st->M[lane], mc[lane]),
                    a = st->M[lane] == -INFINITY ? 0.0f : expf(st->M[lane] - Mn);
        st->M[lane] = Mn;
        st->L[lane] *= a;
        for (int v = 0; v < V; v++)
            st->O[lane][v] *= a;
        wl[lane] = m[lane] == -INFINITY ? 0.0f : expf(m[lane] - st->M[lane]);
    }
    for (int j = 0; j < B; j++) {
        if (c0 + j >= splits)
            break;
        if (j >= 32) {
            fprintf(stderr, "shuffle lane out of range\n");
            exit(2);
        }
        for (int lane = 0; lane < 32; lane++) {
            const float w = wl[j], ls = l[j];
            if (w == 0.0f)
                continue;
            MAC(st->L[lane], w, ls);
            for (int v = 0; v < V; v++)
                MAC(st->O[lane][v], w, ov[lane][j][v]);
        }
    }
}

static void merge_store(const Buf *b, int V, size_t row, const float *M, const float *L,
                        float (*O)[4])
{
    for (int lane = 0; lane < 32; lane++) {
        if (lane == 0) {
            wr(b->ml, row * 2, b->n_mlo, M[lane], "ml");
            wr(b->ml, row * 2 + 1, b->n_mlo, L[lane], "ml");
        }
        for (int v = 0; v < V; v++)
            wr(b->out, row * (32 * V) + V * lane + v, b->n_out, O[lane][v] / L[lane], "out");
    }
}

static void init_state(WarpState *st, int V)
{
    for (int lane = 0; lane < 32; lane++) {
        st->M[lane] = -INFINITY, st->L[lane] = 0.0f;
        for (int v = 0; v < V; v++)
            st->O[lane][v] = 0.0f;
    }
}

static void new_warp(const Buf *b, int V, int B, int i, int by)
{
    if (i >= b->n)
        return;
    const size_t per = (size_t)b->n * b->H, row = (size_t)i * b->H + by;
    WarpState st;
    init_state(&st, V);
    merge_chunk(b, V, B, per, row, 0, &st);
    merge_store(b, V, row, st.M, st.L, st.O);
}

#define MERGE_MULTI_WARPS 8
#define MERGE_CHUNK 32
static long chunks_folded, fold_cmp, fold_diff;
static void new_multi(const Buf *b, int V, int blockDim, int bx, int by)
{
    const int HD = 32 * V, W = blockDim / 32;
    float so[MERGE_MULTI_WARPS * 128], sm[MERGE_MULTI_WARPS], sl[MERGE_MULTI_WARPS];
    for (int k = 0; k < MERGE_MULTI_WARPS * 128; k++)
        so[k] = NAN; /* shared memory is garbage until written */
    for (int k = 0; k < MERGE_MULTI_WARPS; k++)
        sm[k] = sl[k] = NAN;
    const size_t per = (size_t)b->n * b->H, row = (size_t)bx * b->H + by;
    static WarpState st[MERGE_MULTI_WARPS];
    if (W > MERGE_MULTI_WARPS || W < 1) {
        fprintf(stderr, "W %d\n", W);
        exit(2);
    }
    for (int w = 0; w < W; w++) {
        init_state(&st[w], V);
        for (int c0 = MERGE_CHUNK * w; c0 < b->splits; c0 += MERGE_CHUNK * W) {
            merge_chunk(b, V, MERGE_CHUNK, per, row, c0, &st[w]);
            chunks_folded++;
        }
        for (int lane = 0; lane < 32; lane++) {
            if (lane == 0) {
                sm[w] = st[w].M[lane];
                sl[w] = st[w].L[lane];
            }
            for (int v = 0; v < V; v++) {
                const int idx = w * HD + V * lane + v; /* so[w][V lane + v] */
                if (w >= MERGE_MULTI_WARPS || V * lane + v >= HD) {
                    oob++;
                    continue;
                }
                so[idx] = st[w].O[lane][v];
            }
        }
    }
    /* __syncthreads(); warps != 0 return */
    float Mx[32], Lx[32], Ox[32][4];
    for (int lane = 0; lane < 32; lane++) {
        Mx[lane] = -INFINITY, Lx[lane] = 0.0f;
        for (int v = 0; v < V; v++)
            Ox[lane][v] = 0.0f;
        for (int u = 0; u < W; u++)
            Mx[lane] = fmaxf(Mx[lane], sm[u]);
        for (int u = 0; u < W; u++) {
            if (sm[u] == -INFINITY)
                continue;
            const float e = expf(sm[u] - Mx[lane]);
            MAC(Lx[lane], e, sl[u]);
            for (int v = 0; v < V; v++)
                MAC(Ox[lane][v], e, so[u * HD + V * lane + v]);
        }
    }
    /* the proposed fold: merge_chunk<V, 8> over the warps' states in the
     * part_ml / part_o layout, per 1, row 0, splits W */
    {
        float sml[2 * MERGE_MULTI_WARPS];
        for (int u = 0; u < W; u++)
            sml[2 * u] = sm[u], sml[2 * u + 1] = sl[u];
        Buf t = {0};
        t.splits = W, t.n = 1, t.H = 1, t.HD = HD;
        t.part_o = so, t.part_ml = sml, t.n_o = (size_t)W * HD, t.n_ml = 2 * (size_t)W;
        WarpState fs;
        init_state(&fs, V);
        merge_chunk(&t, V, MERGE_MULTI_WARPS, 1, 0, 0, &fs);
        for (int lane = 0; lane < 32; lane++) {
            int d = memcmp(&fs.M[lane], &Mx[lane], 4) || memcmp(&fs.L[lane], &Lx[lane], 4);
            for (int v = 0; v < V; v++)
                d |= memcmp(&fs.O[lane][v], &Ox[lane][v], 4) != 0;
            fold_cmp++;
            if (d) {
                fold_diff++;
                if (fold_diff < 5)
                    fprintf(stderr, "fold differs W %d lane %d M %g/%g L %g/%g\n", W, lane,
                            fs.M[lane], Mx[lane], fs.L[lane], Lx[lane]);
            }
        }
    }
    merge_store(b, V, row, Mx, Lx, Ox);
}

/* The launches. */
static void launch_old(const Buf *b)
{
    const int V = b->HD / 32, B = b->splits > 16 ? 32 : 16;
    for (int bx = 0; bx < (b->n + 3) / 4; bx++)
        for (int by = 0; by < b->H; by++)
            for (int w = 0; w < 4; w++)
                old_warp(b, V, B, bx * 4 + w, by);
}
static void launch_new(const Buf *b)
{
    const int V = b->HD / 32;
    if (b->splits > MERGE_CHUNK) {
        const int chunks = (b->splits + MERGE_CHUNK - 1) / MERGE_CHUNK;
        const int warps = chunks < MERGE_MULTI_WARPS ? chunks : MERGE_MULTI_WARPS;
        for (int bx = 0; bx < b->n; bx++)
            for (int by = 0; by < b->H; by++)
                new_multi(b, V, warps * 32, bx, by);
    } else {
        const int B = b->splits > 16 ? 32 : 16;
        for (int bx = 0; bx < (b->n + 3) / 4; bx++)
            for (int by = 0; by < b->H; by++)
                for (int w = 0; w < 4; w++)
                    new_warp(b, V, B, bx * 4 + w, by);
    }
}

/* ---------------- data and reference ---------------- */
static uint64_t rs = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    uint64_t z = (rs += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double uni(void) { return (rnd() >> 11) * (1.0 / 9007199254740992.0); }

enum { P_RANDOM, P_PREFIX, P_CHUNKS, P_WARPS, P_ALL_EMPTY, P_ONE, P_LAST_ONLY, P_STAIR_UP, P_STAIR_DOWN, P_NPAT };
static const char *pname[] = {"random", "prefix", "chunks", "warps", "allempty", "one", "lastonly", "stairup", "stairdn"};

/* Fill one case: pattern pat, spread of maxima, empty probability. */
static void fill(Buf *b, int pat, double spread, double pempty, int poison)
{
    const int S = b->splits, n = b->n, H = b->H, HD = b->HD;
    const int chunks = (S + 31) / 32, W = chunks < 8 ? chunks : 8;
    for (int r = 0; r < n * H; r++) {
        int prefix = 1 + (int)(uni() * S);
        int empty_chunk_mask[64] = {0}, empty_warp[8] = {0}, one = (int)(uni() * S);
        for (int c = 0; c < chunks; c++)
            empty_chunk_mask[c] = uni() < 0.5;
        for (int w = 0; w < W; w++)
            empty_warp[w] = uni() < 0.5;
        double base = (uni() - 0.5) * 200; /* offset of the row's maxima */
        for (int s = 0; s < S; s++) {
            int empty;
            switch (pat) {
            case P_RANDOM: empty = uni() < pempty; break;
            case P_PREFIX: empty = s >= prefix || uni() < pempty * 0.2; break;
            case P_CHUNKS: empty = empty_chunk_mask[s / 32] || uni() < pempty * 0.2; break;
            case P_WARPS: empty = empty_warp[(s / 32) % W] || uni() < pempty * 0.2; break;
            case P_ALL_EMPTY: empty = 1; break;
            case P_ONE: empty = s != one; break;
            case P_LAST_ONLY: empty = s != S - 1; break;
            default: empty = uni() < pempty * 0.3; break;
            }
            const size_t row = (size_t)s * n * H + r;
            if (empty) {
                b->part_ml[row * 2] = -INFINITY;
                b->part_ml[row * 2 + 1] = 0.0f;
                for (int d = 0; d < HD; d++)
                    b->part_o[row * HD + d] = poison ? NAN : 0.0f;
            } else {
                float m = (float)(base + (uni() - 0.5) * spread);
                if (pat == P_STAIR_UP || pat == P_STAIR_DOWN) /* chunk k's maxima 60 k apart: weights of earlier/later chunks underflow */
                    m = (float)((pat == P_STAIR_UP ? 1 : -1) * 60.0 * (s / 32) + (uni() - 0.5) * 4);
                const float l = (float)(1.0 + uni() * 63.0);
                b->part_ml[row * 2] = m;
                b->part_ml[row * 2 + 1] = l;
                for (int d = 0; d < HD; d++)
                    b->part_o[row * HD + d] = (float)(l * (2 * uni() - 1));
            }
        }
    }
}

typedef struct {
    double max_rel, max_rel_L, l2;
    long cmp, m_mismatch, nan_rows, nan_expected;
} Err;

/* Accumulates one case's errors: the worst of each relative error, the
 * sum of each count. */
static void err_add(Err *tot, const Err *e)
{
    tot->max_rel = fmax(tot->max_rel, e->max_rel);
    tot->l2 = fmax(tot->l2, e->l2);
    tot->max_rel_L = fmax(tot->max_rel_L, e->max_rel_L);
    tot->m_mismatch += e->m_mismatch;
    tot->nan_rows += e->nan_rows;
    tot->nan_expected += e->nan_expected;
    tot->cmp += e->cmp;
}

/* Compare out/ml against the double reference; an all-empty row must give
 * M = -inf, L = 0 and out NaN (0/0) in both forms (checked separately). */
static void check(const Buf *b, Err *e)
{
    const int S = b->splits, n = b->n, H = b->H, HD = b->HD;
    for (int r = 0; r < n * H; r++) {
        double M = -INFINITY;
        for (int s = 0; s < S; s++)
            if (b->part_ml[((size_t)s * n * H + r) * 2] > M)
                M = b->part_ml[((size_t)s * n * H + r) * 2];
        if (M == -INFINITY) {
            e->nan_expected++;
            int nan = 1;
            for (int d = 0; d < HD; d++)
                nan &= isnan(b->out[(size_t)r * HD + d]);
            nan &= b->ml[r * 2] == -INFINITY && b->ml[r * 2 + 1] == 0.0f;
            e->nan_rows += nan;
            continue;
        }
        double L = 0, O[128] = {0}, num = 0, den = 0, omax = 0;
        for (int s = 0; s < S; s++) {
            const size_t row = (size_t)s * n * H + r;
            const double m = b->part_ml[row * 2];
            if (m == -INFINITY)
                continue;
            const double w = exp(m - M);
            L += w * b->part_ml[row * 2 + 1];
            for (int d = 0; d < HD; d++)
                O[d] += w * b->part_o[row * HD + d];
        }
        for (int d = 0; d < HD; d++) {
            O[d] /= L;
            if (fabs(O[d]) > omax)
                omax = fabs(O[d]);
        }
        for (int d = 0; d < HD; d++) {
            const double g = b->out[(size_t)r * HD + d], err = fabs(g - O[d]);
            const double rel = err / omax; /* relative to the row's largest */
            if (!(rel <= e->max_rel))
                e->max_rel = isnan(rel) ? INFINITY : rel > e->max_rel ? rel : e->max_rel;
            num += err * err, den += O[d] * O[d];
        }
        const double rl2 = sqrt(num / den);
        if (!(rl2 <= e->l2))
            e->l2 = isnan(rl2) ? INFINITY : rl2;
        if ((double)b->ml[r * 2] != M)
            e->m_mismatch++;
        const double rL = fabs(b->ml[r * 2 + 1] - L) / L;
        if (!(rL <= e->max_rel_L))
            e->max_rel_L = isnan(rL) ? INFINITY : rL;
        e->cmp++;
    }
}

static Buf alloc(int S, int n, int H, int HD)
{
    Buf b = {.splits = S, .n = n, .H = H, .HD = HD};
    b.n_o = (size_t)S * n * H * HD;
    b.n_ml = (size_t)S * n * H * 2;
    b.n_out = (size_t)n * H * HD;
    b.n_mlo = (size_t)n * H * 2;
    b.part_o = malloc(4 * b.n_o);
    b.part_ml = malloc(4 * b.n_ml);
    b.out = malloc(4 * b.n_out);
    b.ml = malloc(4 * b.n_mlo);
    return b;
}
static void release(Buf *b) { free(b->part_o), free(b->part_ml), free(b->out), free(b->ml); }

int main(int argc, char **argv)
{
    int maxS = argc > 1 ? atoi(argv[1]) : 300, reps = argc > 2 ? atoi(argv[2]) : 3;
    use_fma = argc > 3 ? atoi(argv[3]) : 1;
    const double spreads[] = {0.5, 5, 50, 300};
    Err tot = {0}, totold = {0};
    long cases = 0, bit_cases = 0, bit_diff_rows = 0, bit_cmp_words = 0, poison_bad = 0;
    double worst_by_pat[P_NPAT] = {0}, worst_old_gt32 = 0;
    int spot[] = {333, 400, 500, 511, 512, 513, 700, 767, 768, 769, 1000, 1023, 1024};
    int nspot = sizeof spot / sizeof spot[0];
    for (int pass = 0; pass < 2; pass++) {
        int Smax = pass == 0 ? maxS : nspot;
        for (int si = 0; si < Smax; si++) {
            const int S = pass == 0 ? si + 1 : spot[si];
            for (int hdi = 0; hdi < 2; hdi++)
                for (int pat = 0; pat < P_NPAT; pat++)
                    for (int rep = 0; rep < (pass == 0 ? reps : 1); rep++) {
                        const int HD = hdi ? 128 : 64, n = 1 + (int)(uni() * 5),
                                  H = 1 + (int)(uni() * 3);
                        const double spread = spreads[rnd() % 4], pe = uni();
                        Buf b = alloc(S, n, H, HD), c = alloc(S, n, H, HD);
                        fill(&b, pat, spread, pe, 0);
                        memcpy(c.part_o, b.part_o, 4 * b.n_o);
                        memcpy(c.part_ml, b.part_ml, 4 * b.n_ml);
                        launch_new(&b);
                        launch_old(&c);
                        Err e = {0}, eo = {0};
                        check(&b, &e);
                        check(&c, &eo);
                        err_add(&tot, &e);
                        err_add(&totold, &eo);
                        if (e.max_rel > worst_by_pat[pat])
                            worst_by_pat[pat] = e.max_rel;
                        if (S > 32 && eo.max_rel > worst_old_gt32)
                            worst_old_gt32 = eo.max_rel;
                        /* bits: new against old */
                        if (S <= 32) {
                            bit_cases++;
                            if (memcmp(b.out, c.out, 4 * b.n_out) ||
                                memcmp(b.ml, c.ml, 4 * b.n_mlo)) {
                                /* NaN == NaN bitwise too (same canonical NaN expected) */
                                bit_diff_rows++;
                                if (bit_diff_rows < 5)
                                    fprintf(stderr, "bits differ S %d HD %d pat %s\n", S, HD,
                                            pname[pat]);
                            }
                            bit_cmp_words += b.n_out + b.n_mlo;
                        }
                        /* poisoned empty outputs: the result must not change */
                        if (pat != P_ALL_EMPTY && (rnd() & 3) == 0) {
                            Buf p = alloc(S, n, H, HD);
                            memcpy(p.part_ml, b.part_ml, 4 * b.n_ml);
                            memcpy(p.part_o, b.part_o, 4 * b.n_o);
                            for (size_t r = 0; r < (size_t)S * n * H; r++)
                                if (p.part_ml[r * 2] == -INFINITY)
                                    for (int d = 0; d < HD; d++)
                                        p.part_o[r * HD + d] = NAN;
                            launch_new(&p);
                            if (memcmp(p.out, b.out, 4 * b.n_out))
                                poison_bad++;
                            release(&p);
                        }
                        release(&b), release(&c);
                        cases++;
                    }
        }
    }
    printf("fma %d: %ld cases (splits 1..%d x3 reps + spot %d..%d), %ld rows compared, chunks "
           "folded %ld\n",
           use_fma, cases, maxS, spot[0], spot[nspot - 1], tot.cmp, chunks_folded);
    printf("NEW: max |err|/max|ref row| %.3e, max rel L2 (row) %.3e, max rel err L %.3e, M != "
           "max: %ld\n",
           tot.max_rel, tot.l2, tot.max_rel_L, tot.m_mismatch);
    printf("OLD: max |err|/max|ref row| %.3e, max rel L2 (row) %.3e, max rel err L %.3e, M != "
           "max: %ld; (splits > 32: %.3e)\n",
           totold.max_rel, totold.l2, totold.max_rel_L, totold.m_mismatch, worst_old_gt32);
    for (int p = 0; p < P_NPAT; p++)
        printf("  NEW pattern %-9s worst %.3e\n", pname[p], worst_by_pat[p]);
    printf("all-empty rows: NEW %ld of %ld gave (M -inf, L 0, out NaN); OLD %ld of %ld\n",
           tot.nan_rows, tot.nan_expected, totold.nan_rows, totold.nan_expected);
    printf("splits <= 32: %ld cases, %ld differ in bits from OLD (%ld words compared)\n",
           bit_cases, bit_diff_rows, bit_cmp_words);
    printf("poisoned (NaN) outputs of empty ranges changed NEW's result in %ld cases\n",
           poison_bad);
    printf("fold by merge_chunk: %ld lanes compared, %ld differ in bits\n", fold_cmp, fold_diff);
    printf("out-of-bounds accesses: %ld\n", oob);
    return 0;
}
