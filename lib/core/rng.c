#include "core/rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

void dt_rng_seed(dt_rng *r, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
}

void dt_rng_seed2(dt_rng *r, uint64_t seed, uint64_t stream)
{
    uint64_t x = seed;
    uint64_t mixed = splitmix64(&x) ^ (stream * 0xd1342543de82ef95ull + 0x632be59bd9b4e019ull);
    dt_rng_seed(r, mixed);
}

uint64_t dt_rng_u64(dt_rng *r)
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

uint64_t dt_rng_below(dt_rng *r, uint64_t n)
{
    /* Reject the top partial block so every residue is equally likely. */
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do {
        x = dt_rng_u64(r);
    } while (x >= limit);
    return x % n;
}

float dt_rng_uniform(dt_rng *r)
{
    return (float)(dt_rng_u64(r) >> 40) * (1.0f / 16777216.0f);
}

double dt_rng_uniform_f64(dt_rng *r)
{
    return (double)(dt_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
}

double dt_rng_normal(dt_rng *r)
{
    double u1 = dt_rng_uniform_f64(r);
    double u2 = dt_rng_uniform_f64(r);
    if (u1 < 1e-300)
        u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}
