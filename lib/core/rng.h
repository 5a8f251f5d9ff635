/*
 * rng.h - a seeded, reproducible random number generator (xoshiro256**, seeded by splitmix64).
 *
 * The whole state is four words, so it can be saved in checkpoints and restored bit-exactly.
 * Not thread-safe: each thread or purpose owns its own dt_rng.
 *
 *     dt_rng r;
 *     dt_rng_seed(&r, 42);
 *     float u = dt_rng_uniform(&r);          // [0, 1)
 */
#ifndef DT_CORE_RNG_H
#define DT_CORE_RNG_H

#include <stdint.h>

typedef struct dt_rng {
    uint64_t s[4];
} dt_rng;

void dt_rng_seed(dt_rng *r, uint64_t seed);
/* Derives an independent stream, e.g. per epoch or per layer: same (seed, stream) -> same rng. */
void dt_rng_seed2(dt_rng *r, uint64_t seed, uint64_t stream);
uint64_t dt_rng_u64(dt_rng *r);
/* Uniform integer in [0, n); n > 0. Unbiased (rejection sampling). */
uint64_t dt_rng_below(dt_rng *r, uint64_t n);
/* Uniform float in [0, 1) with 24 random bits; double with 53. */
float dt_rng_uniform(dt_rng *r);
double dt_rng_uniform_f64(dt_rng *r);
/* Standard normal (Box-Muller; each call consumes two uniforms). */
double dt_rng_normal(dt_rng *r);

#endif
