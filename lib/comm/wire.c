/* wire.c - the public float32 <-> float16 / bfloat16 conversions (see comm_internal.h). */
#include "comm/comm.h"
#include "comm/comm_internal.h"

uint16_t dt_comm_f32_to_bf16(float f)
{
    return dt__f32_to_bf16(f);
}

float dt_comm_bf16_to_f32(uint16_t h)
{
    return dt__bf16_to_f32(h);
}

uint16_t dt_comm_f32_to_f16(float f)
{
    return dt__f32_to_f16(f);
}

float dt_comm_f16_to_f32(uint16_t h)
{
    return dt__f16_to_f32(h);
}
