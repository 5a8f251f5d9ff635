/* test_data_pipeline_no_x.c - the pipeline's no_x option (fit asks for it when its feed keeps
 * the set on the device and gathers x there): batches without x, and everything else the
 * batches with x give, field for field, over shuffled epochs, every shard policy, replicas,
 * uint8 and float32 features, int32 labels and float targets, and examples without a row
 * (x_row: a FILE shard decoded for one worker). */
#include "dt_test.h"

#include "data/data_internal.h"

#include <stdint.h>

/* n examples over 3 uneven files; x uint8 (u8) or float32, 5 features; int32 labels or 2 float
 * targets; with holes: every 7th example has no row (left out of its batch). */
static dt_dataset *synth(size_t n, bool u8, bool targets, bool holes)
{
    dt_err err = {0};
    dt_dataset *ds;
    ASSERT_OK(dt__dataset_new(&ds, &err), &err);
    ds->n = n;
    ds->x_rank = 1;
    ds->x_shape[0] = 5;
    ds->x_size = 5;
    if (u8) {
        ds->x_u8 = malloc(5 * n);
        for (size_t i = 0; i < 5 * n; i++)
            ds->x_u8[i] = (uint8_t)(i * 37 + 11);
        ds->x_scale = 1.0f / 255.0f;
    } else {
        ds->x_f32 = malloc(5 * n * sizeof(float));
        for (size_t i = 0; i < 5 * n; i++)
            ds->x_f32[i] = (float)i * 0.25f - 3.0f;
    }
    if (targets) {
        ds->y_kind = DT_LABEL_FLOAT;
        ds->y_size = 2;
        ds->y_f32 = malloc(2 * n * sizeof(float));
        for (size_t i = 0; i < 2 * n; i++)
            ds->y_f32[i] = (float)i * -0.5f;
    } else {
        ds->y_kind = DT_LABEL_INT32;
        ds->y_size = 1;
        ds->num_classes = 5;
        ds->y_i32 = malloc(n * sizeof(int32_t));
        for (size_t i = 0; i < n; i++)
            ds->y_i32[i] = (int32_t)(i % 5);
    }
    if (holes) {
        ds->x_row = malloc(n * sizeof(size_t));
        for (size_t i = 0; i < n; i++)
            ds->x_row[i] = i % 7 == 3 ? SIZE_MAX : i;
    }
    size_t counts[3] = {n / 6, n / 3, n - n / 6 - n / 3};
    char *names[3] = {"a", "b", "c"};
    ASSERT_OK(dt__dataset_set_files(ds, names, 3, counts, &err), &err);
    return ds;
}

/* Every batch of two epochs on every replica: no_x gives the same fields as with x, x NULL. */
static void same_batches(const dt_dataset *ds, dt_pipeline_opts o, int *nbatches)
{
    dt_err err = {0};
    for (int r = 0; r < o.num_replicas; r++) {
        o.replica_rank = r;
        dt_pipeline *p, *q;
        dt_pipeline_opts on = o;
        on.no_x = true;
        ASSERT_OK(dt_pipeline_new(ds, &o, &p, &err), &err);
        ASSERT_OK(dt_pipeline_new(ds, &on, &q, &err), &err);
        ASSERT_EQ(dt_pipeline_steps_per_epoch(q), dt_pipeline_steps_per_epoch(p));
        ASSERT_EQ(dt_pipeline_local_count(q), dt_pipeline_local_count(p));
        for (int64_t e = 0; e < 2; e++) {
            ASSERT_OK(dt_pipeline_epoch_begin(p, e, &err), &err);
            ASSERT_OK(dt_pipeline_epoch_begin(q, e, &err), &err);
            for (;;) {
                const dt_batch *a, *b;
                ASSERT_OK(dt_pipeline_next(p, &a, dt_deadline_in(10000), &err), &err);
                ASSERT_OK(dt_pipeline_next(q, &b, dt_deadline_in(10000), &err), &err);
                ASSERT_EQ(a == NULL, b == NULL);
                if (!a)
                    break;
                ASSERT_TRUE(a->x != NULL);
                ASSERT_TRUE(b->x == NULL);
                ASSERT_EQ(b->n, a->n);
                ASSERT_EQ(b->global_n, a->global_n);
                ASSERT_EQ(b->step, a->step);
                ASSERT_EQ(b->epoch, a->epoch);
                ASSERT_EQ(b->last, a->last);
                size_t n = (size_t)a->n;
                ASSERT_TRUE(memcmp(b->index, a->index, n * sizeof(size_t)) == 0);
                ASSERT_EQ(b->y_i32 == NULL, a->y_i32 == NULL);
                ASSERT_EQ(b->y_f32 == NULL, a->y_f32 == NULL);
                if (a->y_i32)
                    ASSERT_TRUE(memcmp(b->y_i32, a->y_i32, n * sizeof(int32_t)) == 0);
                if (a->y_f32)
                    ASSERT_TRUE(memcmp(b->y_f32, a->y_f32, n * ds->y_size * sizeof(float)) == 0);
                /* and the x the other one decoded is the row of each index */
                for (size_t i = 0; i < n; i++) {
                    size_t row = ds->x_row ? ds->x_row[a->index[i]] : a->index[i];
                    ASSERT_TRUE(row != SIZE_MAX);
                    for (size_t k = 0; k < ds->x_size; k++) {
                        float want = ds->x_u8 ? (float)ds->x_u8[row * 5 + k] * ds->x_scale
                                              : ds->x_f32[row * 5 + k];
                        ASSERT_TRUE(memcmp(&a->x[i * 5 + k], &want, sizeof want) == 0);
                    }
                }
                (*nbatches)++;
            }
        }
        dt_pipeline_free(p);
        dt_pipeline_free(q);
    }
}

DT_TEST(data_pipeline_no_x_same_batches)
{
    int nb = 0;
    for (int kind = 0; kind < 4; kind++) {
        bool u8 = kind & 1, targets = kind & 2;
        for (int holes = 0; holes < 2; holes++) {
            dt_dataset *ds = synth(101, u8, targets, holes);
            const dt_shard_policy pols[] = {DT_SHARD_DATA, DT_SHARD_FILE, DT_SHARD_OFF};
            for (int pi = 0; pi < 3; pi++)
                for (int R = 1; R <= 3; R += 2)
                    for (int prefetch = 0; prefetch <= 2; prefetch += 2) {
                        dt_pipeline_opts o = dt_pipeline_opts_default();
                        o.global_batch = 6 * R;
                        o.num_replicas = R;
                        o.policy = pols[pi];
                        o.shuffle = (dt_shuffle){.kind = DT_SHUFFLE_FULL};
                        o.seed = 9;
                        o.prefetch = prefetch;
                        o.drop_remainder = pi == 0 && R == 3;
                        same_batches(ds, o, &nb);
                    }
            dt_dataset_free(ds);
        }
    }
    printf("%d batches without x, each the one with x but for x\n", nb);
    ASSERT_GT(nb, 1000);
}
