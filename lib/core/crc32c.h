/*
 * crc32c.h - CRC-32C (Castagnoli), as TFRecord and our checkpoint metadata use it.
 *
 *     uint32_t c = dt_crc32c(0, data, len);       // extend: dt_crc32c(c, more, n)
 *     uint32_t masked = dt_crc32c_mask(c);        // TFRecord's masked form
 */
#ifndef DT_CORE_CRC32C_H
#define DT_CORE_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Continues crc over data; start with crc = 0. Thread-safe. */
uint32_t dt_crc32c(uint32_t crc, const void *data, size_t len);
/* TFRecord's mask: ((crc >> 15) | (crc << 17)) + 0xa282ead8. */
uint32_t dt_crc32c_mask(uint32_t crc);

#endif
