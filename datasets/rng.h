/* Seeded, fully specified random numbers for dataset generation: the same
 * seed gives the same stream on any machine and compiler. xoshiro256**
 * (Blackman & Vigna), seeded by SplitMix64; every sampling decision uses
 * integers only (unbiased bounded draws by rejection). */
#ifndef CKV_RNG_H
#define CKV_RNG_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    uint64_t s[4];
} ckv_rng;

/* Seeds from one 64-bit value (four SplitMix64 outputs). */
void ckv_rng_seed(ckv_rng *r, uint64_t seed);
/* Seeds from a list of values (e.g. user seed, task hash, length, sample
 * index), so independent streams can be derived without sharing state. */
void ckv_rng_seed_n(ckv_rng *r, const uint64_t *vals, size_t n);

uint64_t ckv_rng_next(ckv_rng *r);
/* Uniform in [0, n); n must be > 0. */
uint64_t ckv_rng_below(ckv_rng *r, uint64_t n);
/* Uniform in [lo, hi], inclusive; lo <= hi. */
int64_t ckv_rng_range(ckv_rng *r, int64_t lo, int64_t hi);

/* Fisher-Yates shuffle of n elements of `size` bytes each. */
void ckv_rng_shuffle(ckv_rng *r, void *base, size_t n, size_t size);

/* k distinct values from [0, n) in draw order (k <= n), written to out.
 * scratch must hold n entries (a partial Fisher-Yates runs over it). */
void ckv_rng_sample(ckv_rng *r, size_t n, size_t k, size_t *scratch, size_t *out);

/* FNV-1a 64 of a string: a stable way to put names into seeds. */
uint64_t ckv_fnv1a64(const char *s);

#ifdef __cplusplus
}
#endif
#endif
