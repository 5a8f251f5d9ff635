/* test_gpu_seq.c - the CUDA sequence kernels (seq.cu) against the CPU table on the same random
 * inputs: Embedding with bad ids (NaN, negative, too big; the bad block equal to the CPU's) and
 * its deterministic transpose, the masked mean over timesteps, attention masks, every recurrent
 * cell forward and backward over a few steps (masks, zero_masked, GRU's phases),
 * CategoryEncoding. Outputs start as NaN where the kernel writes them all. Skips without a GPU. */
#include "test_gpu_util.h"

#include <stdio.h>

static void expect_close(const dt_nn_ops *g, const float *d, const float *ref, size_t n, double tol,
                         const char *what)
{
    float *h = gpu_down(g, d, n);
    GPU_SYNC();
    double e = gpu_rel_l2(h, ref, n);
    if (!(e <= tol))
        fprintf(stderr, "%s: relative L2 error %.3g > %.3g\n", what, e, tol);
    free(h);
    ASSERT_TRUE(e <= tol);
}

/* The 3-float bad block (count, first bad id, its index) equal to the CPU's, NaN to NaN. */
static void expect_bad(const dt_nn_ops *g, const float *dbad, const float *bad, const char *what)
{
    float h[3];
    g->download(h, dbad, sizeof h);
    GPU_SYNC();
    for (int k = 0; k < 3; k++) {
        int same = (isnan(h[k]) && isnan(bad[k])) || h[k] == bad[k];
        if (!same)
            fprintf(stderr, "%s: bad[%d] = %g, CPU %g\n", what, k, h[k], bad[k]);
        ASSERT_TRUE(same);
    }
}

/* Ids over [-3, rows + 3) with fractions (Keras truncates: -0.5 names row 0), NaN, 1e30 and
 * -1e30 sprinkled in when `bad`. */
static float *make_ids(size_t n, int rows, bool bad, uint64_t seed)
{
    float *ids = malloc(sizeof(float) * (n ? n : 1));
    dt_rng r;
    dt_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) {
        float v = (float)dt_rng_below(&r, (uint64_t)rows);
        if (bad)
            v = -3.0f + (float)(rows + 6) * dt_rng_uniform(&r);
        ids[i] = v;
    }
    if (bad && n > 5) {
        ids[n / 3] = NAN;
        ids[n / 2] = 1e30f;
        ids[n - 1] = -1e30f;
        ids[1] = -0.5f;
    }
    return ids;
}

DT_TEST(gpu_embed_matches_cpu)
{
    const dt_nn_ops *g = gpu_ops(), *c = dt_nn_ops_cpu();
    /* n, rows, dim, bad ids: a tiny table read 5000 times (long segments in the transpose) */
    static const int cases[][4] = {{0, 7, 5, 0},  {1, 7, 5, 1},       {37, 7, 5, 1},
                                   {37, 7, 1, 0}, {1000, 300, 16, 1}, {5000, 3, 8, 1},
                                   {64, 1, 3, 1}};
    for (size_t s = 0; s < sizeof cases / sizeof *cases; s++)
        for (int with_mask = 0; with_mask < 2; with_mask++) {
            size_t n = (size_t)cases[s][0];
            int rows = cases[s][1], dim = cases[s][2];
            size_t ny = n * (size_t)dim, nt = (size_t)rows * (size_t)dim;
            char what[96];
            snprintf(what, sizeof what, "embed n %zu rows %d dim %d", n, rows, dim);
            float *ids = make_ids(n, rows, cases[s][3], 500 + s);
            float *table = gpu_randn(nt, 1, 510 + s), *y = malloc(sizeof(float) * (ny ? ny : 1));
            float *mask = malloc(sizeof(float) * (n ? n : 1)), bad[3];
            float *gids = gpu_up(g, ids, n), *gtable = gpu_up(g, table, nt);
            float *gy = gpu_poison(g, ny), *gmask = gpu_poison(g, n), *gbad = gpu_poison(g, 3);
            c->embed_fwd(ids, n, table, rows, dim, y, with_mask ? mask : NULL, bad);
            g->embed_fwd(gids, n, gtable, rows, dim, gy, with_mask ? gmask : NULL, gbad);
            expect_close(g, gy, y, ny, 1e-5, what);
            if (with_mask)
                expect_close(g, gmask, mask, n, 0, what);
            expect_bad(g, gbad, bad, what);
            if (cases[s][3] && n > 5)
                ASSERT_TRUE(bad[0] >= 3); /* the test reaches the bad-id path */

            float *dy = gpu_randn(ny, 1, 520 + s), *dt = malloc(sizeof(float) * nt);
            float *gdy = gpu_up(g, dy, ny), *gdt = gpu_poison(g, nt);
            c->embed_bwd(ids, n, dy, rows, dim, dt);
            g->embed_bwd(gids, n, gdy, rows, dim, gdt);
            expect_close(g, gdt, dt, nt, 1e-4, what);
            float *first = gpu_down(g, gdt, nt);
            g->embed_bwd(gids, n, gdy, rows, dim, gdt);
            float *second = gpu_down(g, gdt, nt);
            GPU_SYNC();
            ASSERT_TRUE(memcmp(first, second, sizeof(float) * nt) == 0);
            free(first);
            free(second);
            g->free(gids);
            g->free(gtable);
            g->free(gy);
            g->free(gmask);
            g->free(gbad);
            g->free(gdy);
            g->free(gdt);
            free(ids);
            free(table);
            free(y);
            free(mask);
            free(dy);
            free(dt);
        }
    dt_nn_gpu_unbind();
}

/* Masks: none, binary with one sample fully masked (its mean is 0), and fractional weights. */
DT_TEST(gpu_seq_mean_matches_cpu)
{
    const dt_nn_ops *g = gpu_ops(), *c = dt_nn_ops_cpu();
    static const int shapes[][3] = {{3, 5, 4}, {1, 1, 1}, {4, 33, 70}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int mk = 0; mk < 3; mk++) {
            int n = shapes[s][0], t = shapes[s][1], ch = shapes[s][2];
            size_t nx = (size_t)n * t * ch, ny = (size_t)n * ch, nm = (size_t)n * t;
            float *mask = malloc(sizeof(float) * nm);
            for (size_t i = 0; i < nm; i++)
                mask[i] = mk == 1 ? (float)((i * 7 + 3) % 3 != 0) : 0.25f * (float)(i % 5);
            if (mk == 1 && n > 1)
                for (int i = 0; i < t; i++)
                    mask[(size_t)1 * t + i] = 0; /* sample 1 has no step */
            const float *cm = mk ? mask : NULL;
            float *x = gpu_randn(nx, 1, 600 + s), *y = malloc(sizeof(float) * ny);
            float *gx = gpu_up(g, x, nx), *gm = gpu_up(g, mask, nm), *gy = gpu_poison(g, ny);
            c->seq_mean(n, t, ch, x, cm, y);
            g->seq_mean(n, t, ch, gx, mk ? gm : NULL, gy);
            expect_close(g, gy, y, ny, 1e-4, "seq_mean");
            float *dy = gpu_randn(ny, 1, 610 + s), *gdy = gpu_up(g, dy, ny);
            for (int acc = 0; acc < 2; acc++) {
                float *dx = gpu_randn(nx, 1, 620 + s);
                float *gdx = acc ? gpu_up(g, dx, nx) : gpu_poison(g, nx);
                c->seq_mean_bwd(n, t, ch, dy, cm, dx, acc);
                g->seq_mean_bwd(n, t, ch, gdy, mk ? gm : NULL, gdx, acc);
                expect_close(g, gdx, dx, nx, 1e-5, "seq_mean_bwd");
                g->free(gdx);
                free(dx);
            }
            g->free(gx);
            g->free(gm);
            g->free(gy);
            g->free(gdy);
            free(mask);
            free(x);
            free(y);
            free(dy);
        }
    dt_nn_gpu_unbind();
}

DT_TEST(gpu_attn_mask_matches_cpu)
{
    const dt_nn_ops *g = gpu_ops(), *c = dt_nn_ops_cpu();
    static const int shapes[][4] = {{2, 3, 4, 5}, {1, 1, 6, 6}, {3, 2, 7, 3}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int combo = 0; combo < 16; combo++) {
            int n = shapes[s][0], heads = shapes[s][1], tq = shapes[s][2], tv = shapes[s][3];
            size_t ns = (size_t)n * heads * tq * tv;
            float *qm = malloc(sizeof(float) * (size_t)n * tq);
            float *vm = malloc(sizeof(float) * (size_t)n * tv);
            float *km = malloc(sizeof(float) * (size_t)n * tv);
            for (int i = 0; i < n * tq; i++)
                qm[i] = (float)(i % 3 != 1);
            for (int i = 0; i < n * tv; i++) {
                vm[i] = (float)(i % 4 != 2);
                km[i] = (float)(i % 5 != 0);
            }
            float *sc = gpu_randn(ns, 1, 700 + s);
            float *gs = gpu_up(g, sc, ns), *gq = gpu_up(g, qm, (size_t)n * tq),
                  *gv = gpu_up(g, vm, (size_t)n * tv), *gk = gpu_up(g, km, (size_t)n * tv);
            bool q = combo & 1, v = combo & 2, k = combo & 4, causal = combo & 8;
            c->attn_mask(sc, q ? qm : NULL, v ? vm : NULL, k ? km : NULL, n, heads, tq, tv, causal);
            g->attn_mask(gs, q ? gq : NULL, v ? gv : NULL, k ? gk : NULL, n, heads, tq, tv, causal);
            expect_close(g, gs, sc, ns, 1e-5, "attn_mask");
            g->free(gs);
            g->free(gq);
            g->free(gv);
            g->free(gk);
            free(sc);
            free(qm);
            free(vm);
            free(km);
        }
    dt_nn_gpu_unbind();
}

DT_TEST(gpu_cat_encode_matches_cpu)
{
    const dt_nn_ops *g = gpu_ops(), *c = dt_nn_ops_cpu();
    /* n, t, tokens, mode */
    static const int cases[][4] = {{9, 1, 6, DT_NN_CAT_ONE_HOT},   {5, 8, 7, DT_NN_CAT_MULTI_HOT},
                                   {5, 8, 7, DT_NN_CAT_COUNT},     {40, 30, 4, DT_NN_CAT_COUNT},
                                   {3, 0, 5, DT_NN_CAT_MULTI_HOT}, {1, 12, 1, DT_NN_CAT_COUNT}};
    for (size_t s = 0; s < sizeof cases / sizeof *cases; s++) {
        int n = cases[s][0], t = cases[s][1], tokens = cases[s][2];
        size_t ni = (size_t)n * t, ny = (size_t)n * tokens;
        float *ids = make_ids(ni, tokens, true, 800 + s);
        if (ni > 7) { /* a fraction just below tokens is in range, -1 is not */
            ids[2] = (float)tokens - 0.5f;
            ids[4] = -1.0f;
            ids[6] = (float)tokens;
        }
        float *y = malloc(sizeof(float) * ny), bad[3];
        float *gids = gpu_up(g, ids, ni), *gy = gpu_poison(g, ny), *gbad = gpu_poison(g, 3);
        c->cat_encode(ids, n, t, tokens, (dt_nn_cat_mode)cases[s][3], y, bad);
        g->cat_encode(gids, n, t, tokens, (dt_nn_cat_mode)cases[s][3], gy, gbad);
        expect_close(g, gy, y, ny, 0, "cat_encode"); /* small integers: exact */
        expect_bad(g, gbad, bad, "cat_encode");
        if (ni > 7)
            ASSERT_TRUE(bad[0] >= 2);
        g->free(gids);
        g->free(gy);
        g->free(gbad);
        free(ids);
        free(y);
    }
    dt_nn_gpu_unbind();
}

/* ---- recurrent cells ------------------------------------------------------------------------ */

#define RN  5 /* rows */
#define RU  7 /* units */
#define RT  3 /* steps */
#define LDM 2 /* the mask's stride (one timestep of a (n, t) mask) */

/* One side's buffers of a sequence of RT steps: a (pre-activations, row stride lda) per step,
 * r, q, dq per step, the states h[0..RT], c[0..RT], y (row stride ldy), dh, dc. */
typedef struct rnn_side {
    float *a[RT], *r[RT], *q[RT], *h[RT + 1], *c[RT + 1], *y, *dy, *dh, *dc, *dq, *mask;
} rnn_side;

typedef struct rnn_case {
    dt_nn_cell cell;
    dt_nn_cell_act act, rec;
    bool reset_after;
} rnn_case;

/* A copy of host data on this side (the GPU's: uploaded; the CPU's: duplicated). */
static float *side_copy(const dt_nn_ops *o, const float *h, size_t n)
{
    if (o == dt_nn_ops_cpu()) {
        float *d = malloc(sizeof(float) * (n ? n : 1));
        memcpy(d, h, sizeof(float) * n);
        return d;
    }
    return gpu_up(o, h, n);
}

static void side_free(const dt_nn_ops *o, float *p)
{
    if (o == dt_nn_ops_cpu())
        free(p);
    else
        o->free(p);
}

/* A device buffer against its CPU twin. */
static void cmp(const dt_nn_ops *g, const float *d, const float *ref, size_t n, const char *what,
                const rnn_case *k, int step)
{
    char msg[160];
    snprintf(msg, sizeof msg, "%s: cell %d act %d rec %d reset_after %d step %d", what,
             (int)k->cell, (int)k->act, (int)k->rec, (int)k->reset_after, step);
    expect_close(g, d, ref, n, 1e-5, msg);
}

static void run_rnn_case(const dt_nn_ops *g, const rnn_case *k, bool masked, bool zero_masked,
                         uint64_t seed)
{
    const dt_nn_ops *c = dt_nn_ops_cpu();
    int G = k->cell == DT_NN_CELL_LSTM ? 4 : k->cell == DT_NN_CELL_GRU ? 3 : 1;
    int lda = G * RU + 3, ldy = RU + 2;
    size_t na = (size_t)RN * lda, nr = (size_t)RN * G * RU, nu = (size_t)RN * RU,
           ny = (size_t)RN * ldy;
    bool split = k->cell == DT_NN_CELL_GRU && !k->reset_after;
    /* host originals, the same for both sides */
    float *a0[RT], *r0[RT], *hq = gpu_randn(nu, 1, seed + 1), *h0 = gpu_randn(nu, 1, seed + 2);
    float *c0 = gpu_randn(nu, 1, seed + 3), *y0 = gpu_randn(ny, 1, seed + 4);
    float *dy = gpu_randn(ny, 1, seed + 5), *dh = gpu_randn(nu, 1, seed + 6);
    float *dc = gpu_randn(nu, 1, seed + 7), *dq = gpu_randn(nu, 1, seed + 8);
    float *nan = malloc(sizeof(float) * ny), mask[RN * LDM];
    for (size_t i = 0; i < ny; i++)
        nan[i] = NAN;
    for (int b = 0; b < RN; b++) /* every row's units are written; ldy's padding never */
        for (int j = 0; j < RU; j++)
            y0[(size_t)b * ldy + j] = NAN;
    for (int b = 0; b < RN * LDM; b++)
        mask[b] = (b / LDM) % 3 == 1 ? 0.0f : 1.0f; /* rows 1 and 4 masked */
    for (int t = 0; t < RT; t++) {
        a0[t] = gpu_randn(na, 1.5f, seed + 10 + t);
        r0[t] = gpu_randn(nr, 1.5f, seed + 20 + t);
    }
    rnn_side sd[2];
    const dt_nn_ops *ops[2] = {c, g};
    for (int w = 0; w < 2; w++) {
        const dt_nn_ops *o = ops[w];
        rnn_side *p = &sd[w];
        for (int t = 0; t < RT; t++) {
            p->a[t] = side_copy(o, a0[t], na);
            p->r[t] = side_copy(o, r0[t], nr);
            p->q[t] = side_copy(o, hq, nu); /* masked rows keep it */
        }
        p->h[0] = side_copy(o, h0, nu);
        p->c[0] = side_copy(o, c0, nu);
        for (int t = 1; t <= RT; t++) {
            /* every row of h1 and c1 is written (c1: LSTM only; else never read) */
            p->h[t] = side_copy(o, nan, nu);
            p->c[t] = side_copy(o, k->cell == DT_NN_CELL_LSTM ? nan : c0, nu);
        }
        p->y = side_copy(o, y0, ny);
        p->dy = side_copy(o, dy, ny);
        p->dh = side_copy(o, dh, nu);
        p->dc = side_copy(o, dc, nu);
        p->dq = side_copy(o, dq, nu);
        p->mask = side_copy(o, mask, RN * LDM);
    }
    /* forward, step by step; the GPU's states feed its next step, the CPU's its own */
    for (int t = 0; t < RT; t++) {
        for (int phase = 0; phase < (split ? 2 : 1); phase++)
            for (int w = 0; w < 2; w++) {
                rnn_side *p = &sd[w];
                dt_nn_rnn_step st = {.cell = k->cell,
                                     .n = RN,
                                     .u = RU,
                                     .act = k->act,
                                     .rec = k->rec,
                                     .reset_after = k->reset_after,
                                     .zero_masked = zero_masked,
                                     .phase = split ? phase : 0,
                                     .mask = masked ? p->mask : NULL,
                                     .ldm = LDM,
                                     .a = p->a[t],
                                     .lda = lda,
                                     .r = p->r[t],
                                     .q = p->q[t],
                                     .h0 = p->h[t],
                                     .h1 = p->h[t + 1],
                                     .c0 = p->c[t],
                                     .c1 = p->c[t + 1],
                                     .y = p->y,
                                     .ldy = ldy};
                ops[w]->rnn_fwd(&st);
            }
        cmp(g, sd[1].a[t], sd[0].a[t], na, "rnn_fwd a", k, t);
        cmp(g, sd[1].h[t + 1], sd[0].h[t + 1], nu, "rnn_fwd h1", k, t);
        cmp(g, sd[1].c[t + 1], sd[0].c[t + 1], nu, "rnn_fwd c1", k, t);
        cmp(g, sd[1].q[t], sd[0].q[t], nu, "rnn_fwd q", k, t);
        cmp(g, sd[1].y, sd[0].y, ny, "rnn_fwd y", k, t);
    }
    /* backward, last step first; dh and dc carry over (the layer would add d(a) U^T) */
    for (int t = RT - 1; t >= 0; t--) {
        /* the layer passes r to the backward only for GRU reset_after; step 1 does so too */
        bool r_bwd = (k->cell == DT_NN_CELL_GRU && k->reset_after) || t != 1;
        for (int phase = split ? 1 : 0; phase >= 0; phase--)
            for (int w = 0; w < 2; w++) {
                rnn_side *p = &sd[w];
                dt_nn_rnn_step st = {.cell = k->cell,
                                     .n = RN,
                                     .u = RU,
                                     .act = k->act,
                                     .rec = k->rec,
                                     .reset_after = k->reset_after,
                                     .zero_masked = zero_masked,
                                     .phase = split ? phase : 0,
                                     .mask = masked ? p->mask : NULL,
                                     .ldm = LDM,
                                     .a = p->a[t],
                                     .lda = lda,
                                     .r = r_bwd ? p->r[t] : NULL,
                                     .q = p->q[t],
                                     .h0 = p->h[t],
                                     .h1 = p->h[t + 1],
                                     .c0 = p->c[t],
                                     .c1 = p->c[t + 1],
                                     .y = p->y,
                                     .ldy = ldy,
                                     .dy = t % 2 ? NULL : p->dy,
                                     .dh = p->dh,
                                     .dc = p->dc,
                                     .dq = p->dq};
                ops[w]->rnn_bwd(&st);
            }
        cmp(g, sd[1].a[t], sd[0].a[t], na, "rnn_bwd a", k, t);
        cmp(g, sd[1].r[t], sd[0].r[t], nr, "rnn_bwd r", k, t);
        cmp(g, sd[1].dh, sd[0].dh, nu, "rnn_bwd dh", k, t);
        cmp(g, sd[1].dc, sd[0].dc, nu, "rnn_bwd dc", k, t);
    }
    for (int w = 0; w < 2; w++) {
        rnn_side *p = &sd[w];
        for (int t = 0; t < RT; t++) {
            side_free(ops[w], p->a[t]);
            side_free(ops[w], p->r[t]);
            side_free(ops[w], p->q[t]);
        }
        for (int t = 0; t <= RT; t++) {
            side_free(ops[w], p->h[t]);
            side_free(ops[w], p->c[t]);
        }
        float *rest[] = {p->y, p->dy, p->dh, p->dc, p->dq, p->mask};
        for (size_t i = 0; i < sizeof rest / sizeof *rest; i++)
            side_free(ops[w], rest[i]);
    }
    for (int t = 0; t < RT; t++) {
        free(a0[t]);
        free(r0[t]);
    }
    free(hq);
    free(h0);
    free(c0);
    free(y0);
    free(dy);
    free(dh);
    free(dc);
    free(dq);
    free(nan);
}

/* Every cell (SIMPLE, LSTM, GRU with reset_after true and false) with smooth and hard
 * activations, x (no mask, masked rows) x zero_masked. */
DT_TEST(gpu_rnn_matches_cpu)
{
    const dt_nn_ops *g = gpu_ops();
    static const rnn_case cases[] = {
        {DT_NN_CELL_SIMPLE, DT_NN_CACT_TANH, DT_NN_CACT_SIGMOID, false},
        {DT_NN_CELL_SIMPLE, DT_NN_CACT_RELU, DT_NN_CACT_SIGMOID, false},
        {DT_NN_CELL_SIMPLE, DT_NN_CACT_LINEAR, DT_NN_CACT_SIGMOID, false},
        {DT_NN_CELL_LSTM, DT_NN_CACT_TANH, DT_NN_CACT_SIGMOID, false},
        {DT_NN_CELL_LSTM, DT_NN_CACT_TANH, DT_NN_CACT_HARD_SIGMOID2, false},
        {DT_NN_CELL_LSTM, DT_NN_CACT_RELU, DT_NN_CACT_HARD_SIGMOID3, false},
        {DT_NN_CELL_GRU, DT_NN_CACT_TANH, DT_NN_CACT_SIGMOID, true},
        {DT_NN_CELL_GRU, DT_NN_CACT_TANH, DT_NN_CACT_HARD_SIGMOID3, true},
        {DT_NN_CELL_GRU, DT_NN_CACT_TANH, DT_NN_CACT_SIGMOID, false},
        {DT_NN_CELL_GRU, DT_NN_CACT_TANH, DT_NN_CACT_HARD_SIGMOID2, false},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++)
        for (int masked = 0; masked < 2; masked++)
            for (int zm = 0; zm < 2; zm++)
                run_rnn_case(g, &cases[k], masked, zm, 900 + 40 * k + 4 * masked + 2 * zm);
    dt_nn_gpu_unbind();
}
