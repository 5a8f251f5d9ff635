/*
 * dtrain bench data SPEC - input pipeline throughput of a job's data: the training split of a
 * job spec ($.data.train), of a data spec ({"train": ...}) or a split itself ({"format": ...}),
 * loaded as a job loads it (an image folder decoded, cropped and resized on --threads threads,
 * default the spec's num_parallel_calls, else one per CPU), then one epoch batched as the
 * trainer gets it (uint8 -> float32 batches of --batch, on the prefetch thread). Prints images/s
 * for decode + resize, for batching, and for the two together (one pass over the data, what a
 * torch DataLoader epoch does), and per thread. Relative paths are taken from SPEC's folder.
 */
#include "cli.h"
#include "cli_bench.h"

#include "core/buf.h"
#include "core/clock.h"
#include "core/limits.h"
#include "data/data.h"

#include <cJSON.h>
#include <getopt.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: dtrain bench data SPEC [--threads N] [--batch B] [--repeat K] [--json]\n\n"
            "SPEC: a job spec (its $.data.train), a data spec ({\"train\": ...}) or one split\n"
            "  ({\"format\": \"image_folder\", ...}), a file or inline JSON.\n"
            "Loads the split as a job does (decode + crop + resize of every image on --threads\n"
            "  threads; default the spec's num_parallel_calls, else AUTOTUNE: one per CPU), then\n"
            "  batches one epoch (--batch, default 32) through the pipeline. --repeat K runs it K\n"
            "  times and keeps the fastest. Prints images/s for decode+resize, batch, and both\n"
            "  (one pass), and per thread. --json prints {\"images\", \"threads\", \"load_s\",\n"
            "  \"batch_s\", \"decode_images_per_s\", \"batch_images_per_s\", \"images_per_s\",\n"
            "  \"images_per_s_per_thread\", \"format\", \"image_size\"}.\n"
            "Exit status: 0 ok, 2 bad usage or data (the message names the JSON path or file).\n");
}

/* The split in SPEC, parsed with relative paths from SPEC's folder; *json_path names it. */
static dt_status load_split(const char *arg, dt_data_source *src, int *spec_threads, dt_err *err)
{
    const char *p = arg;
    while (*p == ' ' || *p == '\t' || *p == '\n')
        p++;
    char *text = NULL, *base = NULL;
    size_t len = 0;
    if (*p != '{') {
        DT_TRY(dt_file_read_all(arg, DT_MAX_JOBSPEC, &text, &len, err));
        char *copy = strdup(arg);
        base = copy ? strdup(dirname(copy)) : NULL;
        free(copy);
    }
    cJSON *j = cJSON_Parse(text ? text : arg);
    free(text);
    dt_status st = DT_OK;
    *spec_threads = 0;
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(j, "data");
    if (!cJSON_IsObject(j)) {
        st = dt_err_set(err, DT_EINVAL, "%s: not a JSON object", *p == '{' ? "SPEC" : arg);
    } else if (cJSON_IsObject(d) || cJSON_GetObjectItemCaseSensitive(j, "train")) {
        dt_data_spec spec;
        st = dt_data_spec_parse(cJSON_IsObject(d) ? d : j, cJSON_IsObject(d) ? "$.data" : "$", base,
                                &spec, err);
        if (st == DT_OK) {
            *src = spec.train; /* the split's strings move to src */
            memset(&spec.train, 0, sizeof spec.train);
            *spec_threads = spec.num_parallel_calls;
            dt_data_spec_destroy(&spec);
        }
    } else {
        st = dt_data_source_parse(j, "$", base, src, err);
    }
    cJSON_Delete(j);
    free(base);
    return st;
}

int dt_cli_bench_data(int argc, char **argv)
{
    static const struct option opts[] = {
        {"threads", required_argument, 0, 't'}, {"batch", required_argument, 0, 'b'},
        {"repeat", required_argument, 0, 'r'},  {"json", no_argument, 0, 'j'},
        {"help", no_argument, 0, 'h'},          {0, 0, 0, 0}};
    int threads = -1, batch = 32, repeat = 1, c;
    bool json = false;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 't':
            threads = dt_cli_int(optarg);
            if (threads < 1 || threads > DT_MAX_DATA_THREADS) {
                fprintf(stderr, "dtrain bench data: --threads must be 1..%d\n",
                        DT_MAX_DATA_THREADS);
                return 2;
            }
            break;
        case 'b':
            batch = dt_cli_int(optarg);
            break;
        case 'r':
            repeat = dt_cli_int(optarg);
            break;
        case 'j':
            json = true;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            return dt_cli_bad_option("bench data", argc, argv, "h", opts);
        }
    }
    if (argc - optind != 1 || batch < 1 || repeat < 1 || repeat > 1000) {
        fprintf(stderr, "dtrain bench data: give one SPEC; --batch >= 1, --repeat 1..1000\n");
        usage(stderr);
        return 2;
    }
    dt_err err = {0};
    dt_data_source src = {0};
    int spec_threads;
    if (load_split(argv[optind], &src, &spec_threads, &err) != DT_OK) {
        fprintf(stderr, "dtrain bench data: %s\n", err.msg);
        return 2;
    }
    src.image.threads = threads > 0 ? threads : spec_threads;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = src.image.threads > 0 ? src.image.threads : (int)(cpus > 0 ? cpus : 1);
    int rc = 0;
    double best_load = 1e30, best_batch = 1e30;
    size_t n = 0;
    for (int r = 0; r < repeat && rc == 0; r++) {
        dt_dataset *ds = NULL;
        dt_pipeline *p = NULL;
        uint64_t t0 = dt_now_ns();
        if (dt_dataset_load(&src, &ds, &err) != DT_OK) {
            rc = 2;
            break;
        }
        double load_s = (double)(dt_now_ns() - t0) * 1e-9;
        n = ds->n;
        dt_pipeline_opts o = dt_pipeline_opts_default();
        o.global_batch = batch;
        t0 = dt_now_ns();
        if (dt_pipeline_new(ds, &o, &p, &err) != DT_OK ||
            dt_pipeline_epoch_begin(p, 0, &err) != DT_OK) {
            rc = 2;
        }
        volatile float sink = 0;
        while (rc == 0) {
            const dt_batch *b;
            if (dt_pipeline_next(p, &b, dt_deadline_in(600000), &err) != DT_OK) {
                rc = 2;
                break;
            }
            if (!b)
                break;
            if (b->n) /* touch the batch, as a trainer would read it */
                sink += b->x[(size_t)(b->n - 1) * ds->x_size];
        }
        (void)sink;
        double batch_s = (double)(dt_now_ns() - t0) * 1e-9;
        dt_pipeline_free(p);
        dt_dataset_free(ds);
        if (load_s + batch_s < best_load + best_batch) {
            best_load = load_s;
            best_batch = batch_s;
        }
    }
    if (rc != 0) {
        fprintf(stderr, "dtrain bench data: %s\n", err.msg);
        dt_data_source_destroy(&src);
        return rc;
    }
    double total = best_load + best_batch;
    double ips = total > 0 ? (double)n / total : 0;
    bool images = src.format == DT_DATA_FORMAT_IMAGE_FOLDER;
    if (json) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "format", dt_data_format_name(src.format));
        if (images) {
            cJSON *sz = cJSON_AddArrayToObject(j, "image_size");
            cJSON_AddItemToArray(sz, cJSON_CreateNumber(src.image.height));
            cJSON_AddItemToArray(sz, cJSON_CreateNumber(src.image.width));
        }
        cJSON_AddNumberToObject(j, "images", (double)n);
        cJSON_AddNumberToObject(j, "threads", nt);
        cJSON_AddNumberToObject(j, "batch", batch);
        cJSON_AddNumberToObject(j, "load_s", best_load);
        cJSON_AddNumberToObject(j, "batch_s", best_batch);
        cJSON_AddNumberToObject(j, "decode_images_per_s", best_load > 0 ? n / best_load : 0);
        cJSON_AddNumberToObject(j, "batch_images_per_s", best_batch > 0 ? n / best_batch : 0);
        cJSON_AddNumberToObject(j, "images_per_s", ips);
        cJSON_AddNumberToObject(j, "images_per_s_per_thread", ips / nt);
        dt_cli_print_json(j);
    } else {
        printf("%s, %zu examples", dt_data_format_name(src.format), n);
        if (images)
            printf(" at %dx%dx%d", src.image.height, src.image.width, src.image.channels);
        printf(", %d thread%s, batch %d%s\n", nt, nt == 1 ? "" : "s", batch,
               repeat > 1 ? " (fastest of the runs)" : "");
        printf("  decode+resize  %8.3f s  %10.1f images/s\n", best_load,
               best_load > 0 ? n / best_load : 0);
        printf("  batch          %8.3f s  %10.1f images/s\n", best_batch,
               best_batch > 0 ? n / best_batch : 0);
        printf("  one pass       %8.3f s  %10.1f images/s  (%.1f per thread)\n", total, ips,
               ips / nt);
    }
    dt_data_source_destroy(&src);
    return 0;
}
