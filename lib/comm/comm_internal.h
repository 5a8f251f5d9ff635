/* comm_internal.h - shared by the files of lib/comm only: the wire conversions, inline so the
 * per-element loops of ring.c do not pay a call per value. Round to nearest even; NaN stays NaN. */
#ifndef DT_COMM_INTERNAL_H
#define DT_COMM_INTERNAL_H

#include <stdint.h>
#include <string.h>

static inline uint32_t dt__bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float dt__float_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t dt__f32_to_bf16(float f)
{
    uint32_t u = dt__bits_of(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float dt__bf16_to_f32(uint16_t h)
{
    return dt__float_of((uint32_t)h << 16);
}

static inline uint16_t dt__f32_to_f16(float f)
{
    uint32_t u = dt__bits_of(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u);
    if (a >= 0x477ff000u) /* rounds to >= 65520: infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) { /* below the smallest normal half: subnormal or zero */
        if (a < 0x33000000u)
            return (uint16_t)sign;
        uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e; /* 14..24 */
        uint32_t half = m >> shift, rem = m & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1u)))
            half++;
        return (uint16_t)(sign | half);
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u;
    return (uint16_t)(sign | (r >> 13));
}

static inline float dt__f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        float v = (float)m * (1.0f / 16777216.0f); /* m * 2^-24 */
        return sign ? -v : v;
    }
    if (e == 31)
        return dt__float_of(sign | 0x7f800000u | (m << 13));
    return dt__float_of(sign | ((e + 112) << 23) | (m << 13));
}

#endif
