/* test_image_util.h - what the image tests share: the PIL / torch reference script
 * (test/ref/image_ref.py, run with Debian's /usr/bin/python3), raw files, and a comparison
 * that prints the largest difference. Static: each test file gets its own copy. */
#ifndef DT_TEST_IMAGE_UTIL_H
#define DT_TEST_IMAGE_UTIL_H

#include "core/buf.h"
#include "data/data.h"
#include "dt_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define IMG_PY dt_test_python()

/* Skips unless Debian's python3 has PIL (and torch when torch is true). */
static inline void img_need_python(bool torch)
{
    if (access(IMG_PY, X_OK) != 0)
        DT_SKIP("no %s (Debian's python3)", IMG_PY);
    if (!dt_test_python_has("PIL, numpy"))
        DT_SKIP("%s has no PIL: apt-get install python3-pil (make deps)", IMG_PY);
    if (torch && !dt_test_python_has("torch"))
        DT_SKIP("%s has no torch: apt-get install python3-torch (make deps)", IMG_PY);
}

/* Runs image_ref.py with args; its stdout (malloc'd) in *out when out is not NULL. */
static inline void img_ref(const char *args, char **out)
{
    char cmd[4096], path[1200];
    snprintf(path, sizeof path, "%s/ref.out", dt_test_tmpdir());
    dt_test_python_cmd(cmd, sizeof cmd, " '%s' %s > '%s'",
                       dt_test_src_path("test/ref/image_ref.py"), args, path);
    int rc = system(cmd);
    ASSERT_EQ(rc == -1 ? -1 : WIFEXITED(rc) ? WEXITSTATUS(rc) : 128, 0);
    if (out) {
        dt_err err = {0};
        size_t len;
        ASSERT_OK(dt_file_read_all(path, 1 << 24, out, &len, &err), &err);
    }
}

/* The whole file (malloc'd), its size in *len. */
static inline uint8_t *img_read(const char *dir, const char *name, size_t *len)
{
    char path[2400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char *data = NULL;
    dt_err err = {0};
    ASSERT_OK(dt_file_read_all(path, 1u << 30, &data, len, &err), &err);
    return (uint8_t *)data;
}

static inline void img_write(const char *dir, const char *name, const void *data, size_t len)
{
    char path[2400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    dt_err err = {0};
    ASSERT_OK(dt_file_write_atomic(path, data, len, &err), &err);
}

/* Largest |a - b| over n uint8 values. */
static inline int img_maxdiff_u8(const uint8_t *a, const uint8_t *b, size_t n)
{
    int m = 0;
    for (size_t i = 0; i < n; i++) {
        int d = abs((int)a[i] - (int)b[i]);
        m = d > m ? d : m;
    }
    return m;
}

static inline double img_maxdiff_f32(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        m = d > m ? d : m;
    }
    return m;
}

/* Every batch of two epochs of worker w of W: (index, label, pixels, global_n) equal between a
 * pipeline over the full data set and one over w's shard (FILE, AUTO or DATA). file_of (NULL:
 * not checked) gives an example's file, which under FILE must be one of w's. Returns the
 * examples seen. */
static inline size_t img_same_batches(const dt_dataset *full, const dt_dataset *part,
                                      dt_shard_policy pol, int W, int w, uint64_t seed,
                                      int (*file_of)(size_t))
{
    dt_err err = {0};
    dt_pipeline_opts o = dt_pipeline_opts_default();
    o.global_batch = 4 * W;
    o.num_replicas = W;
    o.replica_rank = w;
    o.policy = pol;
    o.shuffle.kind = DT_SHUFFLE_FULL;
    o.seed = seed;
    dt_pipeline *pa, *pb;
    ASSERT_OK(dt_pipeline_new(full, &o, &pa, &err), &err);
    ASSERT_OK(dt_pipeline_new(part, &o, &pb, &err), &err);
    ASSERT_EQ(dt_pipeline_steps_per_epoch(pa), dt_pipeline_steps_per_epoch(pb));
    size_t seen = 0;
    for (int e = 0; e < 2; e++) {
        ASSERT_OK(dt_pipeline_epoch_begin(pa, e, &err), &err);
        ASSERT_OK(dt_pipeline_epoch_begin(pb, e, &err), &err);
        for (;;) {
            const dt_batch *a, *b;
            ASSERT_OK(dt_pipeline_next(pa, &a, dt_deadline_in(30000), &err), &err);
            ASSERT_OK(dt_pipeline_next(pb, &b, dt_deadline_in(30000), &err), &err);
            ASSERT_EQ(a == NULL, b == NULL);
            if (!a)
                break;
            ASSERT_EQ(a->n, b->n);
            ASSERT_EQ(a->global_n, b->global_n);
            for (int i = 0; i < a->n; i++) {
                ASSERT_EQ(a->index[i], b->index[i]);
                ASSERT_EQ(a->y_i32[i], b->y_i32[i]);
                if (file_of && pol != DT_SHARD_DATA)
                    ASSERT_EQ(file_of((size_t)b->index[i]) % W, w);
            }
            ASSERT_EQ(memcmp(a->x, b->x, (size_t)a->n * full->x_size * sizeof(float)), 0);
            seen += (size_t)a->n;
        }
    }
    dt_pipeline_free(pa);
    dt_pipeline_free(pb);
    return seen;
}

#endif
