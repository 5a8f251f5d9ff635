/*
 * common.h - what the fuzz targets (fuzz/fuzz_<name>.c) share: a private temp dir for the
 * parsers that read files, quiet logs, and a reader that splits one fuzz input into parts.
 *
 *     int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
 *     {
 *         char path[FZ_PATH];
 *         fz_write("in.idx", data, size, path);    // under this process's temp dir
 *         ... parse path, free everything ...
 *         return 0;
 *     }
 *
 * The temp dir is made on first use under $TMPDIR (or /tmp) and removed at exit; nothing is
 * written anywhere else.
 */
#ifndef DT_FUZZ_COMMON_H
#define DT_FUZZ_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FZ_PATH 4096

/* Logs below errors off (once; every target calls it from LLVMFuzzerInitialize). */
void fz_init(void);
/* This process's temp dir ("/tmp/dtfuzz-XXXXXX"), made on first call; aborts if it cannot be. */
const char *fz_tmpdir(void);
/* Writes len bytes to <tmpdir>/name (replacing it) and puts that path into path (FZ_PATH
 * bytes); aborts on a write error (a full disk is not a finding). */
void fz_write(const char *name, const void *data, size_t len, char *path);
/* len bytes gzip'd (level 1) into a malloc'd buffer; aborts when out of memory. */
uint8_t *fz_gzip(const void *data, size_t len, size_t *out_len);

/* Consumes an input front to back; reads past the end give zeros / empty parts. */
typedef struct fz_in {
    const uint8_t *p;
    size_t n;
} fz_in;
uint8_t fz_u8(fz_in *in);
uint16_t fz_u16(fz_in *in);
/* The next part: up to a 2-byte little-endian length, clipped to what is left. */
const uint8_t *fz_part(fz_in *in, size_t *len);

#endif
