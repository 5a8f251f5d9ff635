/*
 * dropout_hash.h - the counter-based draws of dropout, shared by the CPU and CUDA backends.
 *
 * A sequential generator cannot be reproduced by thousands of GPU threads, so dropout takes one
 * key from the step's rng per call and element i draws u_i from (key, i) alone: splitmix64's
 * output at counter i + 1 from state key. Both backends compute it with this one function, so
 * their masks are equal bit for bit. Header-only; C and CUDA (host and device).
 */
#ifndef DT_NN_DROPOUT_HASH_H
#define DT_NN_DROPOUT_HASH_H

#include "core/rng.h"

#include <stdint.h>

#ifdef __CUDACC__
#define DT_NN_HD __host__ __device__
#else
#define DT_NN_HD
#endif

/* splitmix64's finaliser (Stafford's mix 13): a bijection of 64-bit words that spreads every
 * input bit over the output. */
static inline DT_NN_HD uint64_t dt__nn_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Element i's uniform in [0, 1) with 24 random bits (dt_rng_uniform's resolution). */
static inline DT_NN_HD float dt__nn_dropout_u(uint64_t key, uint64_t i)
{
    return (float)(dt__nn_mix64(key + (i + 1) * 0x9e3779b97f4a7c15ull) >> 40) * 0x1p-24f;
}

/* The call's key: dt_rng_u64's xoshiro256** step, written out for the CUDA library, which is
 * dlopen'ed and linked without libdtrain's symbols. The CPU calls dt_rng_u64 itself;
 * test_gpu_elem.c's gpu_dropout_key_is_rng_u64 checks the two agree. Host only. */
static inline uint64_t dt__nn_dropout_key(dt_rng *r)
{
    uint64_t *s = r->s;
    uint64_t x = s[1] * 5;
    uint64_t result = ((x << 7) | (x >> 57)) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = (s[3] << 45) | (s[3] >> 19);
    return result;
}

#undef DT_NN_HD

#endif
