/*
 * json.h - checks on parsed JSON that cJSON does not make.
 *
 * cJSON keeps every member of an object, duplicates included, and its lookups return the first:
 * {"dir": "ok", "dir": "../escape"} reads as "ok" here and may read as "../escape" elsewhere
 * (Python's json keeps the last). A spec that means two things is refused instead.
 *
 *     cJSON *root = cJSON_Parse(text);
 *     if (dt_json_unique_keys(root, "$", err) != DT_OK) ...   // "$.checkpoint.dir: duplicate key"
 */
#ifndef DT_CORE_JSON_H
#define DT_CORE_JSON_H

#include "core/status.h"

#include <stdbool.h>

typedef struct cJSON cJSON;

/* DT_EINVAL naming the JSON path of the first object member whose key repeats in its object
 * (path is how the caller names root: "$", "$.model"). Nesting deeper than 512 levels is
 * refused too (cJSON parses at most 1000). O(n log n) in the members of each object. */
dt_status dt_json_unique_keys(const cJSON *root, const char *path, dt_err *err);

/* v is a JSON number with an integral value in [lo, hi] (finite, no fraction): *out gets it.
 * False otherwise, out untouched. Never casts an out-of-range double. */
bool dt_json_int(const cJSON *v, long long lo, long long hi, long long *out);

#endif
