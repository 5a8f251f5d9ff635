/* ops_cpu_attn.c - the CPU kernel of attention masking (MultiHeadAttention). The rest of
 * attention is GEMMs and the row softmax. Contract: nn/ops.h. */
#include "nn/ops_cpu.h"

void dt__nn_cpu_attn_mask(float *s, const float *qm, const float *vm, const float *km, int n,
                          int heads, int tq, int tv, bool causal)
{
    /* Keras adds (1 - mask) * -1e9 in float32: a masked score becomes -1e9 (plus what float32
     * keeps of it), so its softmax weight is 0, and a row masked whole becomes uniform. */
    const float big = -1e9f;
    for (int b = 0; b < n; b++)
        for (int h = 0; h < heads; h++)
            for (int t = 0; t < tq; t++) {
                float *row = s + (((size_t)b * heads + h) * tq + t) * tv;
                bool q_off = qm && qm[(size_t)b * tq + t] == 0.0f;
                for (int u = 0; u < tv; u++) {
                    bool off = q_off || (vm && vm[(size_t)b * tv + u] == 0.0f) ||
                               (km && km[(size_t)b * tv + u] == 0.0f) || (causal && u > t);
                    if (off)
                        row[u] += big;
                }
            }
}
