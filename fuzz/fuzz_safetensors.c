/* fuzz_safetensors.c - safetensors files (weights, checkpoints, a job's initial_weights):
 * dt_st_parse and every accessor, a write-back through dt_st_writer that must parse again to
 * the same tensors, and dt_train_load_weights into a small model with an Adam optimizer (its
 * slots are read from "optimizer/..." tensors) as a job's initial_weights is loaded.
 *
 * Input: the file. */
#include "common.h"

#include "io/safetensors.h"
#include "nn/model.h"
#include "nn/optim.h"
#include "train/train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Dense(3) over 4 inputs, then BatchNormalization: trainable weights and state. */
static const char model_json[] =
    "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"fz\", \"layers\": ["
    "{\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 4], \"name\": \"in\"}},"
    "{\"class_name\": \"Dense\", \"config\": {\"name\": \"dense\", \"units\": 3}},"
    "{\"class_name\": \"BatchNormalization\", \"config\": {\"name\": \"bn\"}}]}}";

static dt_model *model;
static dt_optim *optim;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    fz_init();
    dt_err err = {0};
    dt_model_opts o = {.seed = 1};
    dt_optim_cfg cfg;
    dt_optim_defaults(DT_OPTIM_ADAM, &cfg);
    if (dt_model_from_json(model_json, strlen(model_json), &o, &model, &err) != DT_OK ||
        dt_optim_new(&cfg, model, &optim, &err) != DT_OK) {
        fprintf(stderr, "fuzz_safetensors: %s\n", err.msg);
        abort();
    }
    return 0;
}

/* Every accessor, every byte of every tensor. */
static uint64_t walk(const dt_st_file *f)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < dt_st_count(f); i++) {
        const dt_st_tensor *t = dt_st_at(f, i);
        if (dt_st_find(f, t->name) != t)
            abort(); /* names are unique: find must give this tensor back */
        const uint8_t *p = t->data;
        for (size_t k = 0; k < t->nbytes; k++)
            sum += p[k];
        sum += (uint64_t)t->ndim + strlen(dt_st_dtype_name(t->dtype));
    }
    for (size_t i = 0; i < dt_st_metadata_count(f); i++) {
        const char *k, *v;
        if (dt_st_metadata_at(f, i, &k, &v) != DT_OK || dt_st_metadata(f, k) != v)
            abort();
    }
    return sum;
}

/* Writes f again and parses the result: the same tensors and metadata must come back. */
static void round_trip(const dt_st_file *f)
{
    dt_err err = {0};
    dt_st_writer *w = dt_st_writer_new();
    void *bytes = NULL;
    size_t len = 0;
    dt_st_file *g = NULL;
    if (!w)
        return;
    for (size_t i = 0; i < dt_st_count(f); i++) {
        const dt_st_tensor *t = dt_st_at(f, i);
        if (dt_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data, &err) != DT_OK)
            goto done; /* the writer may refuse a name the reader takes ("", "__metadata__") */
    }
    for (size_t i = 0; i < dt_st_metadata_count(f); i++) {
        const char *k, *v;
        dt_st_metadata_at(f, i, &k, &v);
        if (dt_st_writer_set_metadata(w, k, v, &err) != DT_OK)
            abort();
    }
    if (dt_st_writer_serialize(w, &bytes, &len, &err) != DT_OK)
        goto done;
    if (dt_st_parse(bytes, len, &g, &err) != DT_OK) {
        fprintf(stderr, "fuzz_safetensors: the writer's output does not parse: %s\n", err.msg);
        abort();
    }
    if (dt_st_count(g) != dt_st_count(f) || dt_st_metadata_count(g) != dt_st_metadata_count(f))
        abort();
    for (size_t i = 0; i < dt_st_count(f); i++) {
        const dt_st_tensor *a = dt_st_at(f, i), *b = dt_st_find(g, a->name);
        if (!b || b->dtype != a->dtype || b->ndim != a->ndim || b->nbytes != a->nbytes ||
            memcmp(b->shape, a->shape, sizeof a->shape) != 0 ||
            (a->nbytes && memcmp(a->data, b->data, a->nbytes) != 0))
            abort();
    }
done:
    dt_st_free(g);
    free(bytes);
    dt_st_writer_free(w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dt_err err = {0};
    dt_st_file *f = NULL;
    if (dt_st_parse(data, size, &f, &err) == DT_OK) {
        walk(f);
        round_trip(f);
        dt_st_free(f);
    }
    char path[FZ_PATH];
    fz_write("weights.safetensors", data, size, path);
    dt_train_load_weights(model, optim, path, &err);
    return 0;
}
