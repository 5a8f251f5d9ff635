/* inspect_image.c - what `dtrain data inspect` says about images: an image folder (classes with
 * their file counts) and the JPEG/PNG values of TFRecords: formats by signature, PIL's modes,
 * sizes (min / median / max and a histogram per power of two), and the files that cannot be
 * decoded, each with its reason.
 *
 * Every image is decoded as a job would decode it (so a truncated JPEG or a PNG with a bad CRC
 * is found, not only a bad header), but cheaply: JPEGs at 1/8 scale (libjpeg-turbo still reads
 * every coefficient, so truncation is seen), in the file's own channels. A folder's files are
 * decoded on a pool of threads, results by file index, then summed in file order: the report
 * does not depend on the thread count. */
#include "data/data_internal.h"
#include "core/log.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int dt_data_inspect_size_bucket_lo(int b)
{
    return b <= 0 ? 0 : 32 << b;
}

static int size_bucket(int px)
{
    int b = 0;
    while (b < DT_INSPECT_SIZES - 1 && px >= dt_data_inspect_size_bucket_lo(b + 1))
        b++;
    return b;
}

void dt__inspect_probe(const uint8_t *data, size_t len, const char *what, dt__img_probe *out)
{
    memset(out, 0, sizeof *out);
    const char *kind = dt_image_kind(data, len);
    out->kind = !kind ? 0 : kind[0] == 'J' ? 1 : 2;
    dt_image_opts o = dt_image_opts_default();
    o.channels = 0;         /* the file's own */
    o.height = o.width = 1; /* JPEG: the smallest DCT scale */
    dt_image im = {0};
    dt_err e = {0};
    out->ok = dt_image_decode(data, len, &o, what, &im, &e) == DT_OK;
    out->h = im.src_h;
    out->w = im.src_w;
    snprintf(out->mode, sizeof out->mode, "%s", im.mode);
    if (!out->ok)
        out->reason = strdup(e.msg);
    dt_image_destroy(&im);
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

dt_status dt__inspect_images_sum(const dt__img_probe *p, size_t n, dt_data_image_info **out,
                                 dt_err *err)
{
    *out = NULL;
    if (n == 0)
        return DT_OK;
    dt_data_image_info *ii = calloc(1, sizeof *ii);
    int *hs = malloc(n * sizeof *hs), *ws = malloc(n * sizeof *ws);
    if (!ii || !hs || !ws) {
        free(ii);
        free(hs);
        free(ws);
        return dt_err_set(err, DT_ENOMEM, "inspect: out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        ii->images++;
        ii->jpeg += p[i].kind == 1;
        ii->png += p[i].kind == 2;
        ii->other += p[i].kind == 0;
        if (!p[i].ok) {
            ii->unreadable++;
            if (ii->nbad < DT_INSPECT_BAD)
                snprintf(ii->bad[ii->nbad++], sizeof ii->bad[0], "%s",
                         p[i].reason ? p[i].reason : "?");
        }
        if (p[i].h > 0 && p[i].w > 0) {
            hs[ii->sized] = p[i].h;
            ws[ii->sized] = p[i].w;
            ii->sized++;
            ii->height_hist[size_bucket(p[i].h)]++;
            ii->width_hist[size_bucket(p[i].w)]++;
        }
        if (p[i].mode[0]) {
            size_t m = 0;
            while (m < ii->nmodes && strcmp(ii->mode[m], p[i].mode) != 0)
                m++;
            if (m == ii->nmodes && m < DT_INSPECT_MODES)
                snprintf(ii->mode[ii->nmodes++], sizeof ii->mode[0], "%s", p[i].mode);
            if (m < ii->nmodes)
                ii->mode_count[m]++;
        }
    }
    if (ii->sized) {
        qsort(hs, ii->sized, sizeof *hs, cmp_int);
        qsort(ws, ii->sized, sizeof *ws, cmp_int);
        size_t mid = (ii->sized - 1) / 2; /* the lower median: a size some image has */
        ii->height_min = hs[0];
        ii->height_median = hs[mid];
        ii->height_max = hs[ii->sized - 1];
        ii->width_min = ws[0];
        ii->width_median = ws[mid];
        ii->width_max = ws[ii->sized - 1];
    }
    free(hs);
    free(ws);
    *out = ii;
    return DT_OK;
}

/* ------------------------------------------------------------------------- image folder -- */

typedef struct probe_pool {
    char *const *files;
    dt__img_probe *p; /* (n) */
    size_t n;
    atomic_size_t next;
} probe_pool;

static void *probe_run(void *arg)
{
    probe_pool *pp = arg;
    for (;;) {
        size_t i = atomic_fetch_add(&pp->next, 1);
        if (i >= pp->n)
            break;
        char *data = NULL;
        size_t len = 0;
        dt_err e = {0};
        if (dt_file_read_regular(pp->files[i], DT_MAX_IMAGE_FILE, &data, &len, &e) != DT_OK) {
            memset(&pp->p[i], 0, sizeof pp->p[i]);
            pp->p[i].reason = strdup(e.msg);
            continue;
        }
        dt__inspect_probe((const uint8_t *)data, len, pp->files[i], &pp->p[i]);
        free(data);
    }
    return NULL;
}

dt_status dt__inspect_folder(const char *path, int threads, dt_data_file_info *info, dt_err *err)
{
    dt_data_source src = {0};
    src.format = DT_DATA_FORMAT_IMAGE_FOLDER;
    src.label_mode = DT_LABEL_MODE_INT;
    src.image = dt_image_opts_default();
    src.directory = strdup(path);
    if (!src.directory)
        return dt_err_set(err, DT_ENOMEM, "inspect: out of memory");
    dt_status st = dt_image_folder_index(&src, 0, NULL, false, false, 0, path, err);
    if (st != DT_OK) {
        dt_data_source_destroy(&src);
        return st;
    }
    snprintf(info->format, sizeof info->format, "image_folder");
    info->records = src.nfiles;
    dt__img_probe *p = calloc(src.nfiles, sizeof *p);
    long nt = threads > 0 ? threads : sysconf(_SC_NPROCESSORS_ONLN);
    nt = nt < 1 ? 1 : nt > DT_MAX_DATA_THREADS ? DT_MAX_DATA_THREADS : nt;
    if ((size_t)nt > src.nfiles)
        nt = (long)src.nfiles;
    pthread_t *tids = calloc((size_t)nt, sizeof *tids);
    if (!p || !tids) {
        st = dt_err_set(err, DT_ENOMEM, "inspect: out of memory");
        goto out;
    }
    probe_pool pp = {.files = src.files, .p = p, .n = src.nfiles};
    atomic_init(&pp.next, 0);
    long started = 1;
    for (long t = 1; t < nt && pthread_create(&tids[t], NULL, probe_run, &pp) == 0; t++)
        started = t + 1;
    probe_run(&pp);
    for (long t = 1; t < started; t++)
        pthread_join(tids[t], NULL);
    DT_TRY_GOTO(dt__inspect_images_sum(p, src.nfiles, &info->images, err), st, out);
    /* the image feature a job gets: [height, width, channels] set by its image_size */
    dt_data_feature_info *f = calloc(1, sizeof *f);
    info->class_names = calloc(src.nclasses ? src.nclasses : 1, sizeof(char *));
    info->label_hist = calloc(src.nclasses ? src.nclasses : 1, sizeof(uint64_t));
    if (!f || !info->class_names || !info->label_hist) {
        free(f);
        st = dt_err_set(err, DT_ENOMEM, "inspect: out of memory");
        goto out;
    }
    snprintf(f->name, sizeof f->name, "image");
    snprintf(f->dtype, sizeof f->dtype, "uint8");
    f->rank = -1; /* each file its own size until resized */
    info->features = f;
    info->nfeatures = 1;
    info->has_labels = true;
    snprintf(info->label_name, sizeof info->label_name, "class");
    info->nlabel_hist = info->nclasses = src.nclasses;
    for (size_t k = 0; k < src.nclasses; k++) {
        info->class_names[k] = src.class_names[k];
        src.class_names[k] = NULL;
    }
    for (size_t i = 0; i < src.nfiles; i++)
        info->label_hist[src.file_labels[i]]++;
out:
    for (size_t i = 0; p && i < src.nfiles; i++)
        free(p[i].reason);
    free(p);
    free(tids);
    dt_data_source_destroy(&src);
    return st;
}
