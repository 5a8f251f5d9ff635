/*
 * hash.h - FNV-1a, 64-bit: the one non-cryptographic hash of the project (spec and TF_CONFIG
 * hashes, weight hashes, session ids, cache names). Not for anything an attacker chooses to
 * collide; the CRC-32C of crc32c.h is for integrity checks.
 */
#ifndef DT_CORE_HASH_H
#define DT_CORE_HASH_H

#include <stddef.h>
#include <stdint.h>

#define DT_FNV1A64_INIT 0xcbf29ce484222325ull /* the offset basis: start a hash with it */

/* Continues hash h over n bytes at p; chain calls to hash several pieces. */
uint64_t dt_fnv1a64(uint64_t h, const void *p, size_t n);

#endif
