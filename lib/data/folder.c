/* folder.c - class folders as Keras's image_dataset_from_directory reads them: the index (class
 * order, file order, numpy's shuffle, the validation split) and the decoding of every file by
 * a small pool of threads.
 *
 * Keras's rules (keras/src/utils/dataset_utils.py: index_directory, iter_valid_files,
 * get_training_or_validation_split), which the index reproduces so that one seed gives one
 * split in both:
 *   1. classes: sorted(os.listdir(dir)) that are directories, not starting with "."; or the
 *      given class_names in their order (each must be one of them);
 *   2. files of a class: os.walk of its folder (symlinked subfolders listed, not entered),
 *      sorted by folder path, then by name within a folder; kept when the lower-cased name
 *      ends in .bmp .gif .jpeg .jpg .png; classes concatenated in class order;
 *   3. shuffle: np.random.RandomState(seed).shuffle(paths) (labels with a fresh generator of
 *      the same seed: the same permutation);
 *   4. split: n_val = int(validation_split * n); "validation" is the last n_val files,
 *      "training" the ones before. */
#include "data/data_internal.h"
#include "core/clock.h"
#include "core/log.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------- numpy's RandomState -- */

typedef struct mt19937 {
    uint32_t s[624];
    int pos;
} mt19937;

static void mt_seed(mt19937 *m, uint32_t seed)
{
    for (int i = 0; i < 624; i++) {
        m->s[i] = seed;
        seed = 1812433253u * (seed ^ (seed >> 30)) + (uint32_t)i + 1;
    }
    m->pos = 624;
}

static uint32_t mt_next(mt19937 *m)
{
    if (m->pos == 624) {
        for (int i = 0; i < 624; i++) {
            uint32_t y = (m->s[i] & 0x80000000u) | (m->s[(i + 1) % 624] & 0x7fffffffu);
            m->s[i] = m->s[(i + 397) % 624] ^ (y >> 1) ^ ((y & 1) ? 0x9908b0dfu : 0);
        }
        m->pos = 0;
    }
    uint32_t y = m->s[m->pos++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    return y ^ (y >> 18);
}

/* numpy's random_interval: a uniform value in [0, max] by masked rejection. */
static uint32_t mt_interval(mt19937 *m, uint32_t max)
{
    if (max == 0)
        return 0;
    uint32_t mask = max;
    mask |= mask >> 1;
    mask |= mask >> 2;
    mask |= mask >> 4;
    mask |= mask >> 8;
    mask |= mask >> 16;
    uint32_t v;
    while ((v = mt_next(m) & mask) > max)
        ;
    return v;
}

void dt_image_numpy_shuffle(uint32_t seed, size_t *perm, size_t n)
{
    mt19937 m;
    mt_seed(&m, seed);
    for (size_t i = 0; i < n; i++)
        perm[i] = i;
    for (size_t i = n; i-- > 1;) { /* for i in reversed(range(1, n)) */
        size_t j = mt_interval(&m, (uint32_t)i);
        size_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

/* ------------------------------------------------------------------------------- listing -- */

typedef struct strvec {
    char **v;
    size_t n, cap;
} strvec;

static dt_status sv_push(strvec *s, char *str, dt_err *err)
{
    if (!str)
        return dt_err_set(err, DT_ENOMEM, "image_folder: out of memory");
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        char **v = realloc(s->v, cap * sizeof *v);
        if (!v) {
            free(str);
            return dt_err_set(err, DT_ENOMEM, "image_folder: out of memory");
        }
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = str;
    return DT_OK;
}

static void sv_free(strvec *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->v[i]);
    free(s->v);
    memset(s, 0, sizeof *s);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static char *join(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    bool slash = la > 0 && a[la - 1] == '/';
    char *s = malloc(la + lb + 2);
    if (s)
        snprintf(s, la + lb + 2, "%s%s%s", a, slash ? "" : "/", b);
    return s;
}

/* The entries of dir (no "." / ".."), sorted; *is_dir[i] as os.walk's entry.is_dir() (a
 * symlink to a folder counts) and *is_link[i] whether it is a symlink. */
static dt_status list_dir(const char *dir, strvec *names, bool **is_dir, bool **is_link,
                          dt_err *err)
{
    DIR *d = opendir(dir);
    *is_dir = *is_link = NULL;
    if (!d)
        return dt_err_set(err, errno == ENOENT ? DT_ENOENT : DT_EIO, "%s: cannot open folder: %s",
                          dir, strerror(errno));
    dt_status st = DT_OK;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if ((st = sv_push(names, strdup(e->d_name), err)) != DT_OK)
            break;
    }
    closedir(d);
    if (st != DT_OK)
        return st;
    if (names->n > 1)
        qsort(names->v, names->n, sizeof(char *), cmp_str);
    *is_dir = calloc(names->n + 1, sizeof(bool));
    *is_link = calloc(names->n + 1, sizeof(bool));
    if (!*is_dir || !*is_link)
        return dt_err_set(err, DT_ENOMEM, "%s: out of memory", dir);
    for (size_t i = 0; i < names->n; i++) {
        char *p = join(dir, names->v[i]);
        if (!p)
            return dt_err_set(err, DT_ENOMEM, "%s: out of memory", dir);
        struct stat ls, s;
        (*is_link)[i] = lstat(p, &ls) == 0 && S_ISLNK(ls.st_mode);
        (*is_dir)[i] = stat(p, &s) == 0 && S_ISDIR(s.st_mode);
        free(p);
    }
    return DT_OK;
}

static bool image_ext(const char *name)
{
    static const char *const ext[] = {".bmp", ".gif", ".jpeg", ".jpg", ".png"};
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++) {
        size_t k = strlen(ext[i]);
        if (n >= k && strcasecmp(name + n - k, ext[i]) == 0)
            return true;
    }
    return false;
}

/* Every folder under root (root included) that os.walk would enter. */
static dt_status walk_dirs(const char *root, strvec *dirs, int depth, dt_err *err)
{
    if (depth > 64)
        return dt_err_set(err, DT_ETOOBIG, "%s: folders nested more than 64 deep", root);
    DT_TRY(sv_push(dirs, strdup(root), err));
    strvec names = {0};
    bool *is_dir = NULL, *is_link = NULL;
    dt_status st = list_dir(root, &names, &is_dir, &is_link, err);
    for (size_t i = 0; st == DT_OK && i < names.n; i++) {
        if (!is_dir[i] || is_link[i])
            continue;
        char *p = join(root, names.v[i]);
        st = p ? walk_dirs(p, dirs, depth + 1, err)
               : dt_err_set(err, DT_ENOMEM, "image_folder: out of memory");
        free(p);
    }
    sv_free(&names);
    free(is_dir);
    free(is_link);
    return st;
}

/* Appends the image files of one class folder, in Keras's order, with their label. */
static dt_status index_class(const char *dir, int32_t label, strvec *files, int32_t **labels,
                             size_t *cap_labels, dt_err *err)
{
    strvec dirs = {0};
    dt_status st = walk_dirs(dir, &dirs, 0, err);
    if (st == DT_OK)
        qsort(dirs.v, dirs.n, sizeof(char *), cmp_str); /* sorted(walk, key=root) */
    for (size_t d = 0; st == DT_OK && d < dirs.n; d++) {
        strvec names = {0};
        bool *is_dir = NULL, *is_link = NULL;
        st = list_dir(dirs.v[d], &names, &is_dir, &is_link, err);
        for (size_t i = 0; st == DT_OK && i < names.n; i++) {
            if (is_dir[i] || !image_ext(names.v[i]))
                continue;
            if (files->n >= DT_MAX_IMAGE_FILES) {
                st = dt_err_set(err, DT_ETOOBIG, "%s: more than %u image files (limit)", dir,
                                DT_MAX_IMAGE_FILES);
                break;
            }
            if ((st = sv_push(files, join(dirs.v[d], names.v[i]), err)) != DT_OK)
                break;
            if (files->n > *cap_labels) {
                size_t cap = *cap_labels ? 2 * *cap_labels : 256;
                int32_t *l = realloc(*labels, cap * sizeof(int32_t));
                if (!l) {
                    st = dt_err_set(err, DT_ENOMEM, "image_folder: out of memory");
                    break;
                }
                *labels = l;
                *cap_labels = cap;
            }
            (*labels)[files->n - 1] = label;
        }
        sv_free(&names);
        free(is_dir);
        free(is_link);
    }
    sv_free(&dirs);
    return st;
}

dt_status dt_image_folder_index(dt_data_source *src, double validation_split, const char *subset,
                                bool shuffle, bool has_seed, uint64_t seed, const char *json_path,
                                dt_err *err)
{
    dt_status st = DT_OK;
    strvec classes = {0}, files = {0};
    int32_t *labels = NULL;
    size_t cap_labels = 0;
    size_t *perm = NULL;
    bool inferred = src->label_mode != DT_LABEL_MODE_NONE;
    struct stat sb;
    if (stat(src->directory, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return dt_err_set(err, DT_ENOENT, "%s.directory: \"%s\" is not a folder", json_path,
                          src->directory);
    if (inferred) {
        strvec names = {0};
        bool *is_dir = NULL, *is_link = NULL;
        st = list_dir(src->directory, &names, &is_dir, &is_link, err);
        for (size_t i = 0; st == DT_OK && i < names.n; i++)
            if (is_dir[i] && names.v[i][0] != '.')
                st = sv_push(&classes, strdup(names.v[i]), err);
        sv_free(&names);
        free(is_dir);
        free(is_link);
        if (st != DT_OK)
            goto fail;
        if (src->nclasses) { /* given class_names: a subset of the folders, in their order */
            for (size_t k = 0; k < src->nclasses; k++) {
                bool found = false;
                for (size_t i = 0; i < classes.n && !found; i++)
                    found = strcmp(classes.v[i], src->class_names[k]) == 0;
                if (!found) {
                    st = dt_err_set(err, DT_EINVAL,
                                    "%s.class_names[%zu]: \"%s\" is not a subfolder of %s",
                                    json_path, k, src->class_names[k], src->directory);
                    goto fail;
                }
            }
        } else {
            src->class_names = classes.v;
            src->nclasses = classes.n;
            classes.v = NULL;
            classes.n = classes.cap = 0;
        }
        if (src->nclasses == 0) {
            st = dt_err_set(err, DT_EINVAL,
                            "%s.directory: %s has no class subfolders (labels \"inferred\" takes "
                            "one folder per class)",
                            json_path, src->directory);
            goto fail;
        }
        if (src->label_mode == DT_LABEL_MODE_BINARY && src->nclasses != 2) {
            st = dt_err_set(err, DT_EINVAL,
                            "%s.label_mode: \"binary\" needs exactly 2 classes, %s has %zu",
                            json_path, src->directory, src->nclasses);
            goto fail;
        }
        for (size_t k = 0; k < src->nclasses; k++) {
            char *dir = join(src->directory, src->class_names[k]);
            st = dir ? index_class(dir, (int32_t)k, &files, &labels, &cap_labels, err)
                     : dt_err_set(err, DT_ENOMEM, "image_folder: out of memory");
            free(dir);
            if (st != DT_OK)
                goto fail;
        }
    } else {
        DT_TRY_GOTO(index_class(src->directory, 0, &files, &labels, &cap_labels, err), st, fail);
    }
    size_t n = files.n;
    if (n == 0) {
        st = dt_err_set(err, DT_EINVAL,
                        "%s.directory: no image files (.bmp .gif .jpeg .jpg .png) under %s",
                        json_path, src->directory);
        goto fail;
    }
    if (shuffle && has_seed) {
        perm = malloc(n * sizeof *perm);
        char **v = malloc(n * sizeof *v);
        int32_t *l = malloc(n * sizeof *l);
        if (!perm || !v || !l) {
            free(v);
            free(l);
            st = dt_err_set(err, DT_ENOMEM, "image_folder: out of memory");
            goto fail;
        }
        dt_image_numpy_shuffle((uint32_t)seed, perm, n);
        for (size_t i = 0; i < n; i++) {
            v[i] = files.v[perm[i]];
            l[i] = labels[perm[i]];
        }
        free(files.v);
        free(labels);
        files.v = v;
        labels = l;
    }
    size_t from = 0, to = n;
    if (validation_split > 0) {
        size_t nval = (size_t)(validation_split * (double)n);
        if (nval == 0) {
            /* Keras slices [:-0] (nothing) for training and [-0:] (everything) for validation */
            st = dt_err_set(err, DT_EINVAL,
                            "%s.validation_split: %g of %zu files is 0 files; Keras would give "
                            "\"training\" no file at all: use a larger split or more files",
                            json_path, validation_split, n);
            goto fail;
        }
        if (strcmp(subset, "training") == 0)
            to = n - nval;
        else
            from = n - nval;
    }
    src->nfiles = to - from;
    src->files = malloc(src->nfiles * sizeof(char *));
    src->file_labels = inferred ? malloc(src->nfiles * sizeof(int32_t)) : NULL;
    if (!src->files || (inferred && !src->file_labels)) {
        src->nfiles = 0;
        st = dt_err_set(err, DT_ENOMEM, "image_folder: out of memory");
        goto fail;
    }
    for (size_t i = from; i < to; i++) {
        src->files[i - from] = files.v[i];
        files.v[i] = NULL;
        if (inferred)
            src->file_labels[i - from] = labels[i];
    }
    DT_INFO("data", "image_folder %s: %zu files of %zu classes, %zu used%s%s", src->directory, n,
            src->nclasses, src->nfiles, subset ? " for " : "", subset ? subset : "");
fail:
    sv_free(&classes);
    sv_free(&files);
    free(labels);
    free(perm);
    return st;
}

/* ------------------------------------------------------------------------------- loading -- */

typedef struct pool_worker {
    pthread_t tid;
    struct pool_job *job;
    size_t first_bad; /* lowest row this worker could not decode (SIZE_MAX: none) */
    dt_err err;       /* its reason */
    size_t bad;       /* how many it could not decode */
    bool reporter;    /* worker 0, the loading thread: reports progress */
} pool_worker;

typedef struct pool_job {
    const dt_data_source *src;
    const size_t *todo; /* (m) file index of each row, increasing */
    uint8_t *x;         /* (m, row) */
    size_t row;
    bool *ok; /* (m) */
    atomic_size_t next, done;
    atomic_size_t stop_after; /* fail mode: rows past the lowest failure are not needed */
    size_t m;
    /* progress, reported by worker 0 (the loading thread) only */
    const dt_data_load_opts *lo;
    int64_t t0, last_ms;
} pool_job;

/* Worker 0's progress line every 5 s of a long decode, and the caller's callback every 2 s. */
static void pool_progress(pool_job *j)
{
    int64_t now = dt_now_ms();
    if (now - j->last_ms < 2000)
        return;
    size_t done = atomic_load(&j->done);
    if (j->lo && j->lo->progress)
        j->lo->progress(j->lo->progress_arg, done, j->m);
    if (now - j->t0 >= 5000 && (now - j->t0) / 5000 != (j->last_ms - j->t0) / 5000)
        DT_INFO("data", "image_folder %s: decoded %zu of %zu images (%.0f/s)",
                j->src->directory ? j->src->directory : "?", done, j->m,
                (double)done * 1000.0 / (double)(now - j->t0));
    j->last_ms = now;
}

static void *pool_run(void *arg)
{
    pool_worker *w = arg;
    pool_job *j = w->job;
    for (;;) {
        size_t k = atomic_fetch_add(&j->next, 1);
        if (k >= j->m)
            break;
        /* Every row below the lowest failure is still decoded, so the error reported is the
         * first bad file in order whatever the threads' timing. */
        if (k > atomic_load(&j->stop_after))
            continue;
        const char *path = j->src->files[j->todo[k]];
        char *data = NULL;
        size_t len = 0;
        dt_err e = {0};
        dt_status st = dt_file_read_regular(path, DT_MAX_IMAGE_FILE, &data, &len, &e);
        if (st == DT_OK)
            st = dt_image_load_u8((const uint8_t *)data, len, &j->src->image, path,
                                  j->x + k * j->row, &e);
        free(data);
        j->ok[k] = st == DT_OK;
        atomic_fetch_add(&j->done, 1);
        if (w->reporter)
            pool_progress(j);
        if (st == DT_OK)
            continue;
        w->bad++;
        if (k < w->first_bad) {
            w->first_bad = k;
            w->err = e;
            w->err.code = st;
        }
        if (j->src->image.on_error == DT_ON_ERROR_FAIL) {
            size_t cur = atomic_load(&j->stop_after);
            while (k < cur && !atomic_compare_exchange_weak(&j->stop_after, &cur, k))
                ;
        }
    }
    return NULL;
}

/* "num_parallel_calls" threads (0 = AUTOTUNE: the online CPUs), never more than the files. */
static int pool_threads(const dt_image_opts *o, size_t n)
{
    long t = o->threads > 0 ? o->threads : sysconf(_SC_NPROCESSORS_ONLN);
    if (t < 1)
        t = 1;
    if (t > DT_MAX_DATA_THREADS)
        t = DT_MAX_DATA_THREADS;
    if ((size_t)t > n)
        t = (long)n;
    return (int)t;
}

/* Decodes the files todo[0..m) into job->x (row k = file todo[k]) on nt threads, the calling
 * thread being one of them. Returns how many failed; *fw the worker with the first failure. */
static size_t pool_decode(pool_job *job, pool_worker *ws, int nt, int *fw)
{
    atomic_init(&job->next, 0);
    atomic_init(&job->done, 0);
    atomic_init(&job->stop_after, SIZE_MAX);
    job->t0 = job->last_ms = dt_now_ms();
    int started = 0;
    for (int t = 0; t < nt; t++) {
        ws[t].job = job;
        ws[t].first_bad = SIZE_MAX;
        ws[t].reporter = t == 0;
        if (t > 0 && pthread_create(&ws[t].tid, NULL, pool_run, &ws[t]) != 0)
            break; /* fewer threads: the ones started (and the caller) do all the work */
        started = t + 1;
    }
    pool_run(&ws[0]); /* the calling thread is worker 0 */
    for (int t = 1; t < started; t++)
        pthread_join(ws[t].tid, NULL);
    size_t bad = 0, first = SIZE_MAX;
    *fw = 0;
    for (int t = 0; t < started; t++) {
        bad += ws[t].bad;
        if (ws[t].first_bad < first) {
            first = ws[t].first_bad;
            *fw = t;
        }
    }
    return bad;
}

dt_status dt_image_folder_load(const dt_data_source *src, const dt_data_load_opts *lo,
                               dt_dataset **out, dt_err *err)
{
    dt_status st = DT_OK;
    dt_dataset *ds = NULL;
    pool_worker *ws = NULL;
    size_t *counts = NULL, *todo = NULL;
    const dt_image_opts *o = &src->image;
    pool_job job = {.src = src, .lo = lo};
    *out = NULL;
    size_t n = src->nfiles;
    const char *dir = src->directory ? src->directory : "?";
    if (n == 0 || o->height < 1 || o->width < 1 || o->channels < 1)
        return dt_err_set(err, DT_EINVAL, "image_folder %s: no files or no image_size", dir);
    /* Which files this process decodes: a FILE shard's, or all of them. */
    int W = lo && lo->num_workers > 1 ? lo->num_workers : 1;
    dt_shard_plan plan = {.policy = DT_SHARD_OFF, .num_workers = 1};
    if (W > 1)
        DT_TRY(dt_shard_resolve(lo->policy, n, W, lo->worker_index, &plan, err));
    bool index_only = lo && lo->index_only;
    bool partial = plan.policy == DT_SHARD_FILE || index_only;
    todo = malloc(n * sizeof *todo);
    if (!todo)
        return dt_err_set(err, DT_ENOMEM, "image_folder: out of memory");
    size_t m = 0;
    for (size_t i = 0; i < n && !index_only; i++)
        if (dt_shard_reads_file(&plan, i))
            todo[m++] = i;
    job.todo = todo;
    job.m = m;
    job.row = (size_t)o->height * (size_t)o->width * (size_t)o->channels;
    if ((uint64_t)m * job.row > DT_MAX_IMAGE_DATASET) {
        st = dt_err_set(err, DT_ETOOBIG,
                        "image_folder %s: %zu images of %dx%dx%d are %.2f GiB decoded, over the "
                        "%.0f GiB limit (DT_MAX_IMAGE_DATASET); use a smaller image_size, fewer "
                        "files or more workers (shard_policy FILE)",
                        dir, m, o->height, o->width, o->channels,
                        (double)m * (double)job.row / (1u << 30),
                        (double)DT_MAX_IMAGE_DATASET / (1u << 30));
        goto fail;
    }
    DT_TRY_GOTO(dt__dataset_new(&ds, err), st, fail);
    /* (index only: m = 0, one byte each so that nothing is NULL) */
    job.x = malloc(m ? m * job.row : 1);
    job.ok = calloc(m ? m : 1, sizeof(bool));
    counts = calloc(n, sizeof(size_t));
    int nt = m ? pool_threads(o, m) : 1;
    ws = calloc((size_t)nt, sizeof *ws);
    if (!job.x || !job.ok || !counts || !ws) {
        st = dt_err_set(err, DT_ENOMEM, "image_folder %s: cannot allocate %.2f GiB for %zu images",
                        dir, (double)m * (double)job.row / (1u << 30), m);
        goto fail;
    }
    int fw = 0;
    size_t bad = m ? pool_decode(&job, ws, nt, &fw) : 0;
    int64_t ms = dt_now_ms() - job.t0;
    if (lo && lo->progress)
        lo->progress(lo->progress_arg, m, m);
    if (bad && o->on_error == DT_ON_ERROR_FAIL) {
        *err = ws[fw].err;
        st = ws[fw].err.code ? ws[fw].err.code : DT_EINVAL;
        goto fail;
    }
    if (m && bad == m) {
        st = dt_err_set(err, DT_EINVAL, "image_folder %s: none of the %zu files decoded; first: %s",
                        dir, m, ws[fw].err.msg);
        goto fail;
    }
    if (bad)
        DT_WARN("data",
                "image_folder %s: skipped %zu of %zu files that could not be decoded "
                "(\"on_error\": \"skip\")%s; first: %s",
                dir, bad, m,
                partial ? " (each leaves its step one example short: the other workers plan "
                          "with it)"
                        : "",
                ws[fw].err.msg);
    if (m)
        DT_INFO("data",
                "image_folder %s: decoded %zu of %zu files%s in %.1f s on %d threads (%.0f/s)", dir,
                m - bad, n, partial ? " (this worker's FILE shard)" : "", (double)ms / 1000.0, nt,
                ms > 0 ? (double)m * 1000.0 / (double)ms : 0.0);
    /* Compact the decoded rows in file order. Everything decoded: a skipped file keeps its
     * place in the file list (FILE sharding counts files) with no example. A shard: every file
     * keeps one example, held (x_row) or not. */
    size_t k = 0;
    if (partial) {
        ds->x_row = malloc(n * sizeof(size_t));
        if (!ds->x_row) {
            st = dt_err_set(err, DT_ENOMEM, "image_folder: out of memory");
            goto fail;
        }
        for (size_t i = 0; i < n; i++) {
            ds->x_row[i] = SIZE_MAX;
            counts[i] = 1;
        }
        ds->shard_workers = index_only ? -1 : W;
        ds->shard_index = index_only ? 0 : lo->worker_index;
    }
    for (size_t r = 0; r < m; r++) {
        if (!job.ok[r])
            continue;
        if (k != r)
            memmove(job.x + k * job.row, job.x + r * job.row, job.row);
        if (partial)
            ds->x_row[todo[r]] = k;
        else
            counts[r] = 1;
        k++;
    }
    ds->n = partial ? n : k;
    ds->x_u8 = job.x;
    job.x = NULL;
    ds->x_scale = src->scale;
    ds->x_rank = 3;
    ds->x_shape[0] = o->height;
    ds->x_shape[1] = o->width;
    ds->x_shape[2] = o->channels;
    ds->x_size = job.row;
    if (src->label_mode != DT_LABEL_MODE_NONE && src->file_labels) {
        size_t nc = src->nclasses, ne = ds->n;
        bool onehot = src->label_mode == DT_LABEL_MODE_CATEGORICAL;
        ds->y_size = onehot ? nc : 1;
        if (src->label_mode == DT_LABEL_MODE_INT) {
            ds->y_kind = DT_LABEL_INT32;
            ds->y_i32 = malloc((ne ? ne : 1) * sizeof(int32_t));
        } else {
            ds->y_kind = DT_LABEL_FLOAT;
            ds->y_f32 = calloc((ne ? ne : 1) * ds->y_size, sizeof(float));
        }
        if (!ds->y_i32 && !ds->y_f32) {
            st = dt_err_set(err, DT_ENOMEM, "image_folder: out of memory");
            goto fail;
        }
        ds->num_classes = ds->y_kind == DT_LABEL_INT32 ? (int)nc : 0;
        /* Labels of every example: a shard's unheld files too (they cost 4 bytes each). */
        for (size_t i = 0, e = 0; i < n; i++) {
            if (!counts[i])
                continue;
            int32_t l = src->file_labels[i];
            if (ds->y_i32)
                ds->y_i32[e] = l;
            else if (onehot)
                ds->y_f32[e * nc + (size_t)l] = 1.0f;
            else
                ds->y_f32[e] = (float)l;
            e++;
        }
    }
    DT_TRY_GOTO(dt__dataset_set_files(ds, src->files, n, counts, err), st, fail);
    *out = ds;
    ds = NULL;
fail:
    dt_dataset_free(ds);
    free(job.x);
    free(job.ok);
    free(counts);
    free(todo);
    free(ws);
    return st;
}
