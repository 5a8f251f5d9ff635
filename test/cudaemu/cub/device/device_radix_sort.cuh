/*
 * cub/device/device_radix_sort.cuh - the host emulator's CUB radix sort: SortPairs over a
 * DoubleBuffer, stable, on the key bits [begin_bit, end_bit) only, as CUB sorts.
 *
 * To catch misuse as a GPU would show it: the temporary storage it asks for grows with the
 * count, a call with less than it asked for fails (cudaErrorInvalidValue), and the storage and
 * the buffers it leaves behind (the ones not Current()) are filled with garbage.
 */
#ifndef DT_CUDAEMU_CUB_DEVICE_RADIX_SORT_CUH
#define DT_CUDAEMU_CUB_DEVICE_RADIX_SORT_CUH

#include "../../cuda_runtime.h"

#include <algorithm>
#include <numeric>
#include <vector>

namespace cub
{

template <typename T> struct DoubleBuffer {
    T *d_buffers[2];
    int selector;
    DoubleBuffer() : d_buffers{NULL, NULL}, selector(0) {}
    DoubleBuffer(T *cur, T *alt) : d_buffers{cur, alt}, selector(0) {}
    T *Current()
    {
        return d_buffers[selector];
    }
    T *Alternate()
    {
        return d_buffers[selector ^ 1];
    }
};

struct DeviceRadixSort {
    static size_t TempBytes(size_t n)
    {
        return 512 + (n / 64 + 1) * 16;
    }

    template <typename K, typename V, typename N>
    static cudaError_t SortPairs(void *temp, size_t &temp_bytes, DoubleBuffer<K> &keys,
                                 DoubleBuffer<V> &values, N num_items, int begin_bit = 0,
                                 int end_bit = (int)(sizeof(K) * 8), cudaStream_t s = 0)
    {
        (void)s;
        size_t n = (size_t)num_items;
        if (!temp) {
            temp_bytes = TempBytes(n);
            return cudaSuccess;
        }
        if (temp_bytes < TempBytes(n) || begin_bit < 0 || end_bit > (int)(sizeof(K) * 8) ||
            begin_bit > end_bit)
            return cudaErrorInvalidValue;
        memset(temp, 0xa5, TempBytes(n));
        if (n == 0 || begin_bit == end_bit)
            return cudaSuccess; /* CUB leaves the selectors as they are */
        K *ki = keys.Current(), *ko = keys.Alternate();
        V *vi = values.Current(), *vo = values.Alternate();
        unsigned bits = (unsigned)(end_bit - begin_bit);
        K mask = bits >= sizeof(K) * 8 ? (K) ~(K)0 : (K)(((K)1 << bits) - 1);
        std::vector<size_t> ix(n);
        std::iota(ix.begin(), ix.end(), (size_t)0);
        std::stable_sort(ix.begin(), ix.end(), [&](size_t a, size_t b) {
            return (K)((ki[a] >> begin_bit) & mask) < (K)((ki[b] >> begin_bit) & mask);
        });
        for (size_t i = 0; i < n; i++) {
            ko[i] = ki[ix[i]];
            vo[i] = vi[ix[i]];
        }
        memset(ki, 0xa5, n * sizeof(K));
        memset(vi, 0xa5, n * sizeof(V));
        keys.selector ^= 1;
        values.selector ^= 1;
        return cudaSuccess;
    }
};

} // namespace cub

#endif
