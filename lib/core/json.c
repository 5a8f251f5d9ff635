/* json.c - duplicate keys and exact integers in parsed JSON (json.h). */
#include "core/json.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 512

static int by_key(const void *a, const void *b)
{
    const cJSON *x = *(const cJSON *const *)a, *y = *(const cJSON *const *)b;
    return strcmp(x->string ? x->string : "", y->string ? y->string : "");
}

/* path + ".key" or "[i]" into buf. */
static void child_path(char *buf, size_t n, const char *path, const cJSON *parent, const cJSON *c,
                       int i)
{
    if (cJSON_IsObject(parent))
        snprintf(buf, n, "%s.%s", path, c->string ? c->string : "");
    else
        snprintf(buf, n, "%s[%d]", path, i);
}

static dt_status check(const cJSON *node, const char *path, int depth, dt_err *err)
{
    if (!cJSON_IsObject(node) && !cJSON_IsArray(node))
        return DT_OK;
    if (depth > MAX_DEPTH)
        return dt_err_set(err, DT_EINVAL, "%s: nested deeper than %d levels", path, MAX_DEPTH);
    size_t n = 0;
    for (const cJSON *c = node->child; c; c = c->next)
        n++;
    if (cJSON_IsObject(node) && n > 1) {
        const cJSON **v = malloc(n * sizeof *v);
        if (!v)
            return dt_err_set(err, DT_ENOMEM, "%s: out of memory", path);
        size_t k = 0;
        for (const cJSON *c = node->child; c; c = c->next)
            v[k++] = c;
        qsort(v, n, sizeof *v, by_key);
        const cJSON *dup = NULL;
        for (size_t i = 1; i < n && !dup; i++)
            if (by_key(&v[i - 1], &v[i]) == 0)
                dup = v[i];
        free(v);
        if (dup) {
            char p[512];
            child_path(p, sizeof p, path, node, dup, 0);
            return dt_err_set(err, DT_EINVAL,
                              "%s: duplicate key (JSON readers disagree on which one counts); "
                              "keep one",
                              p);
        }
    }
    int i = 0;
    for (const cJSON *c = node->child; c; c = c->next, i++) {
        if (!cJSON_IsObject(c) && !cJSON_IsArray(c))
            continue;
        char p[512];
        child_path(p, sizeof p, path, node, c, i);
        dt_status st = check(c, p, depth + 1, err);
        if (st != DT_OK)
            return st;
    }
    return DT_OK;
}

dt_status dt_json_unique_keys(const cJSON *root, const char *path, dt_err *err)
{
    return check(root, path && *path ? path : "$", 0, err);
}

bool dt_json_int(const cJSON *v, long long lo, long long hi, long long *out)
{
    if (!cJSON_IsNumber(v))
        return false;
    double d = v->valuedouble;
    if (!isfinite(d) || d != floor(d) || d < (double)lo || d > (double)hi)
        return false;
    *out = (long long)d;
    return true;
}
