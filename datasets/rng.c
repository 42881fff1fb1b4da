#include "rng.h"

#include "splitmix.h"

void ckv_rng_seed(ckv_rng *r, uint64_t seed)
{
    uint64_t st = seed;
    for (int i = 0; i < 4; i++)
        r->s[i] = ckv_splitmix64(&st);
}

void ckv_rng_seed_n(ckv_rng *r, const uint64_t *vals, size_t n)
{
    /* Fold each value through SplitMix64 so that (a, b) and (b, a) differ. */
    uint64_t st = 0x6a09e667f3bcc909ULL;
    for (size_t i = 0; i < n; i++) {
        st ^= vals[i];
        st = ckv_splitmix64(&st);
    }
    ckv_rng_seed(r, st);
}

static inline uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t ckv_rng_next(ckv_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

uint64_t ckv_rng_below(ckv_rng *r, uint64_t n)
{
    /* Reject the top partial block so every residue is equally likely. */
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do
        x = ckv_rng_next(r);
    while (x >= limit);
    return x % n;
}

int64_t ckv_rng_range(ckv_rng *r, int64_t lo, int64_t hi)
{
    uint64_t span = (uint64_t)hi - (uint64_t)lo;
    if (span == UINT64_MAX)
        return (int64_t)ckv_rng_next(r);
    return (int64_t)((uint64_t)lo + ckv_rng_below(r, span + 1));
}

void ckv_rng_shuffle(ckv_rng *r, void *base, size_t n, size_t size)
{
    unsigned char *b = base;
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)ckv_rng_below(r, i);
        unsigned char *x = b + j * size, *y = b + (i - 1) * size;
        for (size_t q = 0; j != i - 1 && q < size; q++) {
            unsigned char t = x[q];
            x[q] = y[q];
            y[q] = t;
        }
    }
}

void ckv_rng_sample(ckv_rng *r, size_t n, size_t k, size_t *scratch, size_t *out)
{
    for (size_t i = 0; i < n; i++)
        scratch[i] = i;
    for (size_t i = 0; i < k; i++) {
        size_t j = i + (size_t)ckv_rng_below(r, n - i);
        size_t t = scratch[i];
        scratch[i] = scratch[j];
        scratch[j] = t;
        out[i] = scratch[i];
    }
}

uint64_t ckv_fnv1a64(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ULL;
    }
    return h;
}
