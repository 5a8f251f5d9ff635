/* dtrain data - inspect data files (DESIGN verb) and benchmark the input pipeline (bench). */
#include "cli.h"

#include "core/clock.h"
#include "data/data.h"

#include <cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *out)
{
    fprintf(out,
            "usage: dtrain data inspect FILE|FOLDER... [--json] [--label NAME] [--threads N]\n"
            "                           [--replicas R --policy AUTO|FILE|DATA|OFF [--batch B]]\n"
            "       dtrain data bench IMAGES.idx[.gz] LABELS.idx[.gz] [--batch 64] [--epochs 3]\n"
            "                         [--prefetch 2] [--replicas R] [--rank I] [--shuffle]\n"
            "                         [--work-us N] [--json]\n"
            "\n"
            "inspect: detects each file's format (IDX, IDX.gz, TFRecord, TFRecord GZIP, CSV),\n"
            "  counts its records, lists every feature with its dtype and shape (a tf.train.\n"
            "  Example's int64, float and bytes features alike), and shows a histogram of the\n"
            "  label (--label NAME; default the feature or column \"label\", or an IDX label\n"
            "  file). With --replicas and --policy, shows how tf.data's auto-shard policy splits\n"
            "  the files among R replicas (IDX images + labels count as one file); --batch B\n"
            "  (the global batch) adds the steps per epoch that every replica runs.\n"
            "  A FOLDER is read as an image folder (Keras's image_dataset_from_directory:\n"
            "  one subfolder per class): classes with their file counts; for it and for a\n"
            "  TFRecord's JPEG/PNG features, every image is decoded (on --threads N threads,\n"
            "  default one per CPU) and the report gives JPEG/PNG counts, modes, heights and\n"
            "  widths (min, median, max, histogram) and the unreadable files with reasons.\n"
            "bench: loads Fashion-MNIST-style IDX files and pulls batches through the pipeline\n"
            "  (shard, shuffle, batch, prefetch thread) as fast as possible, or with --work-us\n"
            "  of simulated compute per batch; prints batches/s and examples/s.\n"
            "Exit status: 0 ok, 2 bad usage or a bad file (the message names file and offset).\n");
}

typedef struct unit {
    const char *label;
    uint64_t records;
} unit;

static cJSON *shape_json(const dt_data_feature_info *f)
{
    cJSON *a = cJSON_CreateArray();
    if (f->rank < 0)
        cJSON_AddItemToArray(a, cJSON_CreateNull());
    for (int i = 0; i < f->rank; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber((double)f->shape[i]));
    return a;
}

static void shape_str(const dt_data_feature_info *f, char *buf, size_t n)
{
    size_t k = (size_t)snprintf(buf, n, "[");
    if (f->rank < 0)
        k += (size_t)snprintf(buf + k, n - k, "None");
    for (int i = 0; i < f->rank && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)f->shape[i]);
    if (k < n)
        snprintf(buf + k, n - k, "]");
}

static cJSON *size_json(int lo, int med, int hi, const uint64_t *hist)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "min", lo);
    cJSON_AddNumberToObject(o, "median", med);
    cJSON_AddNumberToObject(o, "max", hi);
    cJSON *h = cJSON_AddObjectToObject(o, "histogram");
    for (int b = 0; b < DT_INSPECT_SIZES; b++) {
        char k[32];
        if (b == DT_INSPECT_SIZES - 1)
            snprintf(k, sizeof k, "%d+", dt_data_inspect_size_bucket_lo(b));
        else
            snprintf(k, sizeof k, "%d-%d", dt_data_inspect_size_bucket_lo(b),
                     dt_data_inspect_size_bucket_lo(b + 1) - 1);
        cJSON_AddNumberToObject(h, k, (double)hist[b]);
    }
    return o;
}

static cJSON *images_json(const dt_data_image_info *ii)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "count", (double)ii->images);
    cJSON *f = cJSON_AddObjectToObject(o, "formats");
    cJSON_AddNumberToObject(f, "JPEG", (double)ii->jpeg);
    cJSON_AddNumberToObject(f, "PNG", (double)ii->png);
    cJSON_AddNumberToObject(f, "other", (double)ii->other);
    cJSON *m = cJSON_AddObjectToObject(o, "modes");
    for (size_t k = 0; k < ii->nmodes; k++)
        cJSON_AddNumberToObject(m, ii->mode[k], (double)ii->mode_count[k]);
    if (ii->sized) {
        cJSON_AddItemToObject(
            o, "height",
            size_json(ii->height_min, ii->height_median, ii->height_max, ii->height_hist));
        cJSON_AddItemToObject(
            o, "width", size_json(ii->width_min, ii->width_median, ii->width_max, ii->width_hist));
    }
    cJSON_AddNumberToObject(o, "unreadable", (double)ii->unreadable);
    cJSON *b = cJSON_AddArrayToObject(o, "unreadable_files");
    for (size_t k = 0; k < ii->nbad; k++)
        cJSON_AddItemToArray(b, cJSON_CreateString(ii->bad[k]));
    return o;
}

static void images_print(const dt_data_image_info *ii)
{
    printf("  images   %llu: %llu JPEG, %llu PNG, %llu other; %llu unreadable\n",
           (unsigned long long)ii->images, (unsigned long long)ii->jpeg,
           (unsigned long long)ii->png, (unsigned long long)ii->other,
           (unsigned long long)ii->unreadable);
    printf("  modes   ");
    for (size_t k = 0; k < ii->nmodes; k++)
        printf(" %s %llu%s", ii->mode[k], (unsigned long long)ii->mode_count[k],
               k + 1 < ii->nmodes ? "," : "");
    printf("\n");
    if (ii->sized) {
        printf("  height   min %d  median %d  max %d\n", ii->height_min, ii->height_median,
               ii->height_max);
        printf("  width    min %d  median %d  max %d\n", ii->width_min, ii->width_median,
               ii->width_max);
        printf("  %-10s %10s %10s\n", "pixels", "heights", "widths");
        for (int b = 0; b < DT_INSPECT_SIZES; b++) {
            if (!ii->height_hist[b] && !ii->width_hist[b])
                continue;
            char k[32];
            if (b == DT_INSPECT_SIZES - 1)
                snprintf(k, sizeof k, "%d+", dt_data_inspect_size_bucket_lo(b));
            else
                snprintf(k, sizeof k, "%d-%d", dt_data_inspect_size_bucket_lo(b),
                         dt_data_inspect_size_bucket_lo(b + 1) - 1);
            printf("  %-10s %10llu %10llu\n", k, (unsigned long long)ii->height_hist[b],
                   (unsigned long long)ii->width_hist[b]);
        }
    }
    for (size_t k = 0; k < ii->nbad; k++)
        printf("  unreadable: %s\n", ii->bad[k]);
    if (ii->unreadable > ii->nbad)
        printf("  ... and %llu more unreadable\n", (unsigned long long)(ii->unreadable - ii->nbad));
}

static int inspect(int argc, char **argv)
{
    static const struct option opts[] = {
        {"json", no_argument, 0, 'j'},           {"label", required_argument, 0, 'l'},
        {"replicas", required_argument, 0, 'r'}, {"policy", required_argument, 0, 'p'},
        {"batch", required_argument, 0, 'b'},    {"threads", required_argument, 0, 't'},
        {"help", no_argument, 0, 'h'},           {0, 0, 0, 0}};
    bool json = false;
    const char *label = "", *policy_s = NULL;
    int replicas = 0, batch = 0, threads = 0, c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'j':
            json = true;
            break;
        case 'l':
            label = optarg;
            break;
        case 'r':
            replicas = dt_cli_int(optarg);
            break;
        case 'p':
            policy_s = optarg;
            break;
        case 'b':
            batch = dt_cli_int(optarg);
            break;
        case 't':
            threads = dt_cli_int(optarg);
            if (threads < 1 || threads > DT_MAX_DATA_THREADS) {
                fprintf(stderr, "dtrain data inspect: --threads must be 1..%d\n",
                        DT_MAX_DATA_THREADS);
                return 2;
            }
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            return dt_cli_bad_option("data inspect", argc, argv, "h", opts);
        }
    }
    int nfiles = argc - optind;
    if (nfiles < 1) {
        fprintf(stderr, "dtrain data inspect: give at least one FILE\n");
        usage(stderr);
        return 2;
    }
    dt_err err = {0};
    dt_shard_policy policy = DT_SHARD_AUTO;
    if ((replicas || policy_s) && (replicas < 1 || replicas > 65536)) {
        fprintf(stderr, "dtrain data inspect: --replicas must be 1..65536\n");
        return 2;
    }
    if (policy_s && dt_shard_policy_parse(policy_s, &policy, &err) != DT_OK) {
        fprintf(stderr, "dtrain data inspect: --policy: %s\n", err.msg);
        return 2;
    }
    if (batch < 0 || (batch && replicas && batch % replicas)) {
        fprintf(stderr, "dtrain data inspect: --batch must be a positive multiple of "
                        "--replicas\n");
        return 2;
    }
    dt_data_file_info *info = calloc((size_t)nfiles, sizeof *info);
    int rc = 0;
    cJSON *root = cJSON_CreateObject(), *files = cJSON_AddArrayToObject(root, "files");
    bool all_idx = true;
    for (int i = 0; i < nfiles; i++) {
        const char *path = argv[optind + i];
        if (dt_data_inspect_threads(path, label, threads, &info[i], &err) != DT_OK) {
            fprintf(stderr, "dtrain data inspect: %s\n", err.msg);
            rc = 2;
            goto out;
        }
        dt_data_file_info *fi = &info[i];
        all_idx = all_idx && strncmp(fi->format, "idx", 3) == 0;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "path", path);
        cJSON_AddStringToObject(o, "format", fi->format);
        cJSON_AddNumberToObject(o, "records", (double)fi->records);
        cJSON *fs = cJSON_AddObjectToObject(o, "features");
        for (size_t k = 0; k < fi->nfeatures; k++) {
            cJSON *f = cJSON_AddObjectToObject(fs, fi->features[k].name);
            cJSON_AddStringToObject(f, "dtype", fi->features[k].dtype);
            cJSON_AddItemToObject(f, "shape", shape_json(&fi->features[k]));
        }
        if (fi->has_labels) {
            cJSON_AddStringToObject(o, "label", fi->label_name);
            cJSON *h = cJSON_AddArrayToObject(o, "label_histogram");
            for (size_t k = 0; k < fi->nlabel_hist; k++)
                cJSON_AddItemToArray(h, cJSON_CreateNumber((double)fi->label_hist[k]));
            if (fi->labels_out_of_range)
                cJSON_AddNumberToObject(o, "labels_out_of_range", (double)fi->labels_out_of_range);
        }
        if (fi->nclasses) {
            cJSON *cl = cJSON_AddObjectToObject(o, "classes");
            for (size_t k = 0; k < fi->nclasses; k++)
                cJSON_AddNumberToObject(cl, fi->class_names[k], (double)fi->label_hist[k]);
        }
        if (fi->images)
            cJSON_AddItemToObject(o, "images", images_json(fi->images));
        cJSON_AddItemToArray(files, o);
        if (!json) {
            printf("%s\n  format   %s\n  records  %llu\n", path, fi->format,
                   (unsigned long long)fi->records);
            printf("  %-24s %-12s %s\n", "feature", "dtype", "shape");
            for (size_t k = 0; k < fi->nfeatures; k++) {
                char sh[128];
                shape_str(&fi->features[k], sh, sizeof sh);
                printf("  %-24s %-12s %s\n", fi->features[k].name, fi->features[k].dtype, sh);
            }
            if (fi->nclasses) {
                printf("  classes  %zu\n", fi->nclasses);
                for (size_t k = 0; k < fi->nclasses; k++)
                    printf("    %-24s %llu\n", fi->class_names[k],
                           (unsigned long long)fi->label_hist[k]);
            } else if (fi->has_labels) {
                printf("  label histogram (%s):", fi->label_name);
                for (size_t k = 0; k < fi->nlabel_hist; k++)
                    printf("%s%zu: %llu", k % 8 ? "  " : "\n    ", k,
                           (unsigned long long)fi->label_hist[k]);
                printf("\n");
            }
            if (fi->images)
                images_print(fi->images);
        }
    }
    if (replicas) {
        /* Shard units: IDX images + labels are one data set; other files one unit each. */
        /* A lone image folder: its files are the units, one example each. */
        bool folder = nfiles == 1 && info[0].nclasses;
        size_t nunits = folder ? (size_t)info[0].records : all_idx ? 1 : (size_t)nfiles;
        size_t *start = calloc(nunits + 1, sizeof(size_t));
        for (size_t u = 0; u < nunits; u++)
            start[u + 1] = start[u] + (folder ? 1 : info[u].records);
        cJSON *sh = cJSON_AddObjectToObject(root, "sharding");
        cJSON_AddStringToObject(sh, "policy", dt_shard_policy_name(policy));
        cJSON_AddNumberToObject(sh, "replicas", replicas);
        cJSON_AddNumberToObject(sh, "files", (double)nunits);
        cJSON *reps = NULL;
        int64_t steps = 0;
        for (int r = 0; r < replicas; r++) {
            dt_shard_plan plan;
            if (dt_shard_resolve(policy, nunits, replicas, r, &plan, &err) != DT_OK) {
                fprintf(stderr, "dtrain data inspect: %s\n", err.msg);
                free(start);
                rc = 2;
                goto out;
            }
            if (r == 0) {
                cJSON_AddStringToObject(sh, "resolved", dt_shard_policy_name(plan.policy));
                reps = cJSON_AddArrayToObject(sh, "shards");
                if (!json)
                    printf("sharding: policy %s -> %s over %d replicas (%zu file%s)\n",
                           dt_shard_policy_name(policy), dt_shard_policy_name(plan.policy),
                           replicas, nunits, nunits == 1 ? "" : "s");
            }
            size_t cnt = dt_shard_count(&plan, start, nunits);
            cJSON *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "replica", r);
            cJSON_AddNumberToObject(o, "records", (double)cnt);
            cJSON *fl = cJSON_AddArrayToObject(o, "files");
            if (!json)
                printf("  replica %-3d %8zu records  ", r, cnt);
            for (size_t u = 0; u < nunits && !folder; u++)
                if (dt_shard_reads_file(&plan, u)) {
                    cJSON_AddItemToArray(fl, cJSON_CreateString(argv[optind + u]));
                    if (!json && plan.policy == DT_SHARD_FILE)
                        printf(" %s", argv[optind + u]);
                }
            if (!json && plan.policy == DT_SHARD_DATA)
                printf(" records j with j %% %d == %d", replicas, r);
            if (!json && plan.policy == DT_SHARD_OFF)
                printf(" everything");
            if (!json)
                printf("\n");
            cJSON_AddItemToArray(reps, o);
            if (batch) {
                int64_t b = batch / replicas, s = ((int64_t)cnt + b - 1) / b;
                steps = s > steps ? s : steps;
            }
        }
        if (batch) {
            cJSON_AddNumberToObject(sh, "global_batch", batch);
            cJSON_AddNumberToObject(sh, "steps_per_epoch", (double)steps);
            if (!json)
                printf("  global batch %d: %lld steps per epoch on every replica\n", batch,
                       (long long)steps);
        }
        free(start);
    }
    if (json) {
        dt_cli_print_json(root);
        root = NULL;
    }
out:
    for (int i = 0; i < nfiles; i++)
        dt_data_file_info_destroy(&info[i]);
    free(info);
    cJSON_Delete(root);
    return rc;
}

static int bench(int argc, char **argv)
{
    static const struct option opts[] = {
        {"batch", required_argument, 0, 'b'},    {"epochs", required_argument, 0, 'e'},
        {"prefetch", required_argument, 0, 'p'}, {"replicas", required_argument, 0, 'r'},
        {"rank", required_argument, 0, 'k'},     {"shuffle", no_argument, 0, 's'},
        {"work-us", required_argument, 0, 'w'},  {"json", no_argument, 0, 'j'},
        {"help", no_argument, 0, 'h'},           {0, 0, 0, 0}};
    int batch = 64, epochs = 3, prefetch = 2, replicas = 1, rank = 0, work_us = 0, c;
    bool shuffle = false, json = false;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'b':
            batch = dt_cli_int(optarg);
            break;
        case 'e':
            epochs = dt_cli_int(optarg);
            break;
        case 'p':
            prefetch = dt_cli_int(optarg);
            break;
        case 'r':
            replicas = dt_cli_int(optarg);
            break;
        case 'k':
            rank = dt_cli_int(optarg);
            break;
        case 's':
            shuffle = true;
            break;
        case 'w':
            work_us = dt_cli_int(optarg);
            break;
        case 'j':
            json = true;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            return dt_cli_bad_option("data bench", argc, argv, "h", opts);
        }
    }
    if (argc - optind != 2 || epochs < 1 || work_us < 0) {
        fprintf(stderr, "dtrain data bench: give IMAGES and LABELS (IDX files)\n");
        usage(stderr);
        return 2;
    }
    dt_err err = {0};
    dt_dataset *ds = NULL;
    dt_pipeline *p = NULL;
    uint64_t t0 = dt_now_ns();
    int64_t shape[3] = {28, 28, 1};
    if (dt_idx_load(argv[optind], argv[optind + 1], 1.0f / 255, 0, shape, &ds, &err) != DT_OK) {
        fprintf(stderr, "dtrain data bench: %s\n", err.msg);
        return 2;
    }
    double load_s = (double)(dt_now_ns() - t0) * 1e-9;
    dt_pipeline_opts o = dt_pipeline_opts_default();
    o.global_batch = batch;
    o.num_replicas = replicas;
    o.replica_rank = rank;
    o.prefetch = prefetch;
    o.shuffle.kind = shuffle ? DT_SHUFFLE_FULL : DT_SHUFFLE_NONE;
    o.seed = 42;
    if (dt_pipeline_new(ds, &o, &p, &err) != DT_OK) {
        fprintf(stderr, "dtrain data bench: %s\n", err.msg);
        dt_dataset_free(ds);
        return 2;
    }
    int rc = 0;
    int64_t batches = 0, examples = 0;
    double sink = 0;
    t0 = dt_now_ns();
    for (int e = 0; e < epochs && rc == 0; e++) {
        if (dt_pipeline_epoch_begin(p, e, &err) != DT_OK) {
            rc = 2;
            break;
        }
        for (;;) {
            const dt_batch *b;
            if (dt_pipeline_next(p, &b, dt_deadline_in(60000), &err) != DT_OK) {
                rc = 2;
                break;
            }
            if (!b)
                break;
            sink += b->x[0] + (b->n ? b->x[(size_t)(b->n - 1) * ds->x_size] : 0);
            batches++;
            examples += b->n;
            if (work_us) { /* simulated compute: spin, as a busy trainer thread would */
                uint64_t until = dt_now_ns() + (uint64_t)work_us * 1000;
                while (dt_now_ns() < until)
                    ;
            }
        }
    }
    double s = (double)(dt_now_ns() - t0) * 1e-9;
    if (rc != 0) {
        fprintf(stderr, "dtrain data bench: %s\n", err.msg);
    } else if (json) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddNumberToObject(j, "batch", batch);
        cJSON_AddNumberToObject(j, "prefetch", prefetch);
        cJSON_AddNumberToObject(j, "epochs", epochs);
        cJSON_AddNumberToObject(j, "batches", (double)batches);
        cJSON_AddNumberToObject(j, "examples", (double)examples);
        cJSON_AddNumberToObject(j, "load_s", load_s);
        cJSON_AddNumberToObject(j, "time_s", s);
        cJSON_AddNumberToObject(j, "batches_per_s", (double)batches / s);
        cJSON_AddNumberToObject(j, "examples_per_s", (double)examples / s);
        cJSON_AddNumberToObject(j, "work_us", work_us);
        dt_cli_print_json(j);
    } else {
        printf("loaded %zu examples in %.3f s\n", ds->n, load_s);
        printf("batch %d, prefetch %d, %d epochs: %lld batches, %lld examples in %.3f s\n", batch,
               prefetch, epochs, (long long)batches, (long long)examples, s);
        printf("%.1f batches/s  %.1f examples/s  (%.1f us/batch)\n", (double)batches / s,
               (double)examples / s, 1e6 * s / (double)(batches ? batches : 1));
    }
    (void)sink;
    dt_pipeline_free(p);
    dt_dataset_free(ds);
    return rc;
}

int dt_cli_data(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "inspect") == 0)
        return inspect(argc - 1, argv + 1);
    if (strcmp(argv[1], "bench") == 0)
        return bench(argc - 1, argv + 1);
    static const char *const names[] = {"inspect", "bench"};
    const char *near = dt_cli_nearest(argv[1], names, 2);
    fprintf(stderr, "dtrain data: unknown command \"%s\"%s%s%s (inspect, bench; see --help)\n",
            argv[1], near ? "; did you mean " : "", near ? near : "", near ? "?" : "");
    return 2;
}
