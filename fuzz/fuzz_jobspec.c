/* fuzz_jobspec.c - a job spec as Jobs.Submit receives it: dt_jobspec_parse under a data root and
 * a state dir, then the submit-time checks that read the rest of the spec without training:
 * the data section (dt__train_data_spec: formats, globs, paths inside the root), the optimizer,
 * the loss and dt_train_check_world.
 *
 * The data root (a temp dir) holds a model file, weights and data files of every format, so
 * that paths in the spec can resolve; the state dir is empty. Input: the spec's JSON text. */
#include "common.h"

#include "config/jobspec.h"
#include "data/data.h"
#include "nn/model.h"
#include "nn/optim.h"
#include "train/train.h"
#include "train/train_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char data_root[FZ_PATH], state_dir[FZ_PATH];

static void put(const char *name, const char *text)
{
    char rel[256], path[FZ_PATH];
    snprintf(rel, sizeof rel, "data/%s", name);
    fz_write(rel, text, strlen(text), path);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    fz_init();
    snprintf(data_root, sizeof data_root, "%s/data", fz_tmpdir());
    snprintf(state_dir, sizeof state_dir, "%s/state", fz_tmpdir());
    if (mkdir(data_root, 0755) != 0 || mkdir(state_dir, 0755) != 0)
        abort();
    put("model.json", "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"m\", \"layers\": "
                      "[{\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 2]}},"
                      "{\"class_name\": \"Dense\", \"config\": {\"units\": 2}}]}}");
    put("train.csv", "a,b,label\n1,2,0\n3,4,1\n");
    put("val.csv", "a,b,label\n5,6,1\n");
    put("w.safetensors", "not checked at parse time");
    static const uint8_t images[] = {0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 2, 1, 2, 3, 4};
    static const uint8_t labels[] = {0, 0, 8, 1, 0, 0, 0, 2, 0, 1};
    char path[FZ_PATH];
    fz_write("data/images.idx", images, sizeof images, path);
    fz_write("data/labels.idx", labels, sizeof labels, path);
    fz_write("data/a-0.tfrecord", "", 0, path);
    fz_write("data/a-1.tfrecord", "", 0, path);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dt_jobspec_roots roots = {.data_root = data_root, .state_dir = state_dir};
    dt_jobspec spec;
    dt_err err = {0};
    if (dt_jobspec_parse((const char *)data, size, &roots, &spec, &err) != DT_OK)
        return 0;
    dt_data_spec ds;
    if (dt__train_data_spec(&spec, &ds, &err) == DT_OK)
        dt_data_spec_destroy(&ds);
    dt_optim_cfg cfg;
    dt_optim_cfg_from_json(spec.optimizer, &cfg, &err);
    dt_loss loss;
    dt_loss_from_name(spec.loss, spec.from_logits, &loss, &err);
    dt_train_check_world(&spec, 1 + (int)(spec.hash % 4), &err);
    dt_jobspec_destroy(&spec);
    return 0;
}
