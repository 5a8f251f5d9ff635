/* hash.c - FNV-1a, 64-bit (see hash.h). */
#include "core/hash.h"

uint64_t dt_fnv1a64(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ c[i]) * 0x100000001b3ull;
    return h;
}
