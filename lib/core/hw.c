/*
 * hw.c - the host's GPUs from the driver's device nodes and /proc files (see hw.h).
 */
#include "core/hw.h"

#include <ctype.h>
#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct gpu {
    int minor;                       /* N of /dev/nvidiaN */
    char bus[64];                    /* PCI bus id, the /proc folder's name; "" when unknown */
    char model[DT_HW_GPU_MODEL_LEN]; /* "" when unknown */
    char uuid[96];                   /* "GPU-..."; "" when unknown */
} gpu;

/* "nvidiaN" (digits only: not nvidiactl, nvidia-uvm, nvidia-modeset) -> N, else -1. */
static int dev_minor(const char *name)
{
    if (strncmp(name, "nvidia", 6) != 0 || !isdigit((unsigned char)name[6]))
        return -1;
    char *end;
    long n = strtol(name + 6, &end, 10);
    return *end || n > 1000000 ? -1 : (int)n;
}

/* The value of "key:" in a line of an information file, blanks trimmed, into out; false when
 * the line is another key's. */
static bool field(const char *line, const char *key, char *out, size_t n)
{
    size_t k = strlen(key);
    if (strncmp(line, key, k) != 0 || line[k] != ':')
        return false;
    const char *p = line + k + 1;
    while (*p == ' ' || *p == '\t')
        p++;
    size_t len = strcspn(p, "\r\n");
    while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == '\t'))
        len--;
    snprintf(out, n, "%.*s", (int)len, p);
    return true;
}

/* Fills the bus id, model and UUID of every gpu in g[0..n) that proc_dir describes (matched by
 * its "Device Minor:"; when the driver writes no minors and the counts agree, by bus order). */
static void read_proc(const char *proc_dir, gpu *g, int n)
{
    DIR *d = proc_dir ? opendir(proc_dir) : NULL;
    if (!d)
        return;
    gpu found[DT_HW_MAX_GPUS];
    int nf = 0;
    bool minors = true;
    struct dirent *e;
    while ((e = readdir(d)) && nf < DT_HW_MAX_GPUS) {
        if (e->d_name[0] == '.')
            continue;
        char path[4096], line[512], minor[32] = "";
        snprintf(path, sizeof path, "%s/%s/information", proc_dir, e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        gpu *x = &found[nf++];
        memset(x, 0, sizeof *x);
        snprintf(x->bus, sizeof x->bus, "%.63s", e->d_name); /* "0000:18:00.0" */
        while (fgets(line, sizeof line, f))
            if (!field(line, "Model", x->model, sizeof x->model) &&
                !field(line, "GPU UUID", x->uuid, sizeof x->uuid))
                field(line, "Device Minor", minor, sizeof minor);
        fclose(f);
        x->minor = isdigit((unsigned char)minor[0]) ? atoi(minor) : -1;
        minors = minors && x->minor >= 0;
    }
    closedir(d);
    /* bus order: readdir's is the directory's own */
    for (int i = 1; i < nf; i++)
        for (int j = i; j > 0 && strcmp(found[j - 1].bus, found[j].bus) > 0; j--) {
            gpu t = found[j];
            found[j] = found[j - 1];
            found[j - 1] = t;
        }
    for (int i = 0; i < n; i++)
        for (int k = 0; k < nf; k++)
            if (minors ? found[k].minor == g[i].minor : nf == n && k == i) {
                int m = g[i].minor;
                g[i] = found[k];
                g[i].minor = m;
            }
}

/* The GPUs' order as CUDA numbers them: by PCI bus id where known, else by minor. */
static void sort_gpus(gpu *g, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0; j--) {
            gpu *a = &g[j - 1], *b = &g[j];
            int c = a->bus[0] && b->bus[0] ? strcmp(a->bus, b->bus) : a->minor - b->minor;
            if (c <= 0)
                break;
            gpu t = *a;
            *a = *b;
            *b = t;
        }
}

/* Marks the GPUs visible lists in pick[]; unknown counts the valid entries that name no GPU
 * this host's files describe (a MIG instance, a UUID when no UUID can be read). */
static void pick_visible(const char *visible, const gpu *g, int n, bool *pick, int *unknown)
{
    bool any_uuid = false;
    for (int i = 0; i < n; i++)
        any_uuid = any_uuid || g[i].uuid[0];
    const char *p = visible;
    for (;;) {
        size_t len = strcspn(p, ",");
        char ent[128];
        snprintf(ent, sizeof ent, "%.*s", (int)(len < sizeof ent ? len : sizeof ent - 1), p);
        char *s = ent, *t = ent + strlen(ent);
        while (*s == ' ' || *s == '\t')
            s++;
        while (t > s && (t[-1] == ' ' || t[-1] == '\t'))
            *--t = '\0';
        /* CUDA stops at the first entry it cannot use: what follows is hidden */
        if (isdigit((unsigned char)*s)) {
            char *end;
            long i = strtol(s, &end, 10);
            if (*end || i >= n)
                return;
            pick[i] = true;
        } else if (!strncmp(s, "GPU-", 4) && any_uuid) {
            int hit = -1;
            for (int i = 0; i < n && hit < 0; i++)
                if (!strncmp(g[i].uuid, s, strlen(s)))
                    hit = i;
            if (hit < 0)
                return;
            pick[hit] = true;
        } else if (!strncmp(s, "GPU-", 4) || !strncmp(s, "MIG-", 4)) {
            (*unknown)++;
        } else {
            return; /* "", "-1", anything else */
        }
        if (!p[len])
            return;
        p += len + 1;
    }
}

/* Appends model to out unless it is "" or already there. */
static void add_model(char *out, size_t n, const char *model)
{
    if (!model[0])
        return;
    for (const char *p = out; (p = strstr(p, model)); p++)
        if ((p == out || p[-1] == ' ') && (p[strlen(model)] == ',' || !p[strlen(model)]))
            return;
    size_t used = strlen(out);
    snprintf(out + used, n - used, "%s%s", used ? ", " : "", model);
}

void dt_hw_count_gpus(const char *dev_dir, const char *proc_dir, const char *visible,
                      dt_hw_gpus *out)
{
    memset(out, 0, sizeof *out);
    gpu g[DT_HW_MAX_GPUS];
    int n = 0;
    DIR *d = dev_dir ? opendir(dev_dir) : NULL;
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) && n < DT_HW_MAX_GPUS) {
        int m = dev_minor(e->d_name);
        if (m >= 0) {
            memset(&g[n], 0, sizeof g[n]);
            g[n++].minor = m;
        }
    }
    closedir(d);
    sort_gpus(g, n); /* by minor: read_proc's fallback pairs them with the bus order */
    read_proc(proc_dir, g, n);
    sort_gpus(g, n);

    bool pick[DT_HW_MAX_GPUS] = {false};
    int unknown = 0;
    if (visible)
        pick_visible(visible, g, n, pick, &unknown);
    else
        for (int i = 0; i < n; i++)
            pick[i] = true;
    for (int i = 0; i < n; i++)
        if (pick[i]) {
            out->count++;
            add_model(out->model, sizeof out->model, g[i].model);
        }
    /* entries that name no known GPU: counted (CUDA would show them), capped by what is there */
    out->count += unknown;
    if (out->count > n)
        out->count = n;
    if (unknown) {
        /* their model is known when every GPU here is of one */
        bool one = n > 0 && g[0].model[0];
        for (int i = 1; i < n && one; i++)
            one = !strcmp(g[i].model, g[0].model);
        if (one)
            add_model(out->model, sizeof out->model, g[0].model);
    }
}
