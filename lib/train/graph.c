/* graph.c - CUDA graphs of fit's training step on a device backend (see train_internal.h).
 *
 * A step on a GPU is a few hundred small kernels; at batch 64 of a small model, launching them
 * costs more than running them. So the step is captured once and replayed:
 *   1. the first step of a batch size runs eagerly: it allocates the step's buffers and scratch
 *      (nothing may be allocated inside a capture) and counts its dropout draws;
 *   2. the next full batch of that size runs its host half (dt_model_graph_feed: the batch,
 *      the loss's scale, the dropout keys; dt_optim_prepare: the learning rate and bias
 *      corrections, all uploaded to fixed device addresses), then its device half (forward,
 *      loss, backward, clipping, update) is captured between graph_begin and graph_end, and
 *      the graph is launched;
 *   3. from then on a step of that size is its host half and one graph launch.
 * The step's end (dt_model_train_end: one download of the step's numbers, one sync) stays
 * outside the graph. With several replicas on one host's GPUs the gradients' and moving
 * statistics' all-reduces (NCCL, queued on the same stream) are captured with the kernels
 * between backward and the update; every replica captures and replays its own graph, and a
 * replayed collective meets its siblings' whether they replay or run eagerly (NCCL matches
 * collectives by their order on the communicator). Short batches (an epoch's last) always run
 * eagerly. A capture that fails (something in the step allocated, synchronised or uploaded pageable
 * memory) turns graphs off for the model with the reason logged, and the step runs eagerly from its
 * fed state, so its result is the one it would have had.
 */
#include "core/log.h"
#include "train/train_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dt__train_graphs_init(dt__train_graphs *gs, dt_model *m, const char *off)
{
    memset(gs, 0, sizeof *gs);
    gs->gen = dt_model_graph_gen(m);
    const char *env = getenv("DTRAIN_GRAPHS");
    if (off) {
        snprintf(gs->why, sizeof gs->why, "%s", off);
        return;
    }
    if (env && !strcmp(env, "0")) {
        snprintf(gs->why, sizeof gs->why, "DTRAIN_GRAPHS=0");
        return;
    }
    gs->on = dt_model_graph_fit(m, gs->why, sizeof gs->why);
}

/* Frees the graphs; the sizes stay known (their eager steps grew the buffers and scratch). */
static void drop_graphs(dt__train_graphs *gs, const dt_nn_ops *ops)
{
    for (int i = 0; i < gs->n; i++) {
        if (gs->s[i].graph)
            ops->graph_free(gs->s[i].graph);
        gs->s[i].graph = NULL;
    }
}

void dt__train_graphs_free(dt__train_graphs *gs, dt_model *m)
{
    if (m)
        drop_graphs(gs, dt_model_ops(m));
    gs->n = 0;
}

static void turn_off(dt__train_graphs *gs, const char *why)
{
    gs->on = false;
    snprintf(gs->why, sizeof gs->why, "%s", why);
    DT_WARN("train", "CUDA graphs off, the steps run eagerly: %s", gs->why);
}

/* The device half of a step: forward, loss, backward, the replicas' collectives when there are
 * several (queued on this thread's stream, so a capture records them with the kernels), then
 * the optimizer (its prepared update when fed). */
static dt_status device_half(dt_model *m, dt_optim *o, const dt_loss *loss, const dt_model_batch *b,
                             int global_batch, bool fed, const dt__train_reduce *r, dt_err *err)
{
    DT_TRY(dt_model_train_begin(m, loss, b, global_batch, err));
    if (r)
        DT_TRY(r->fn(r->ctx, err));
    if (fed)
        dt_optim_apply(o);
    else
        DT_TRY(dt_optim_step(o, err));
    return DT_OK;
}

dt_status dt__train_graph_step(dt__train_graphs *gs, dt_model *m, dt_optim *o, const dt_loss *loss,
                               const dt_model_batch *b, int global_batch, bool full,
                               const dt__train_reduce *r, dt_err *err)
{
    const dt_nn_ops *ops = dt_model_ops(m);
    if (dt_model_graph_gen(m) != gs->gen) { /* the buffers the graphs use were reallocated */
        drop_graphs(gs, ops);
        gs->gen = dt_model_graph_gen(m);
    }
    bool w = b->sample_weight != NULL;
    int k = 0;
    while (k < gs->n && !(gs->s[k].n == b->n && gs->s[k].weighted == w))
        k++;
    if (!gs->on || !full || k == gs->n) {
        /* eager: graphs off, a short batch, or the first step of this size */
        if (gs->on && full && gs->n < DT__TRAIN_GRAPHS)
            gs->s[gs->n++] = (dt__train_graph){.n = b->n, .weighted = w};
        gs->eager++;
        return device_half(m, o, loss, b, global_batch, false, r, err);
    }
    DT_TRY(dt_model_graph_feed(m, loss, b, global_batch, err));
    DT_TRY(dt_optim_prepare(o, err));
    dt__train_graph *s = &gs->s[k];
    char msg[512] = "";
    if (!s->graph) {
        if (ops->graph_begin(msg, sizeof msg) != 0) {
            turn_off(gs, msg);
        } else {
            dt_status st = device_half(m, o, loss, b, global_batch, true, r, err);
            void *g = NULL;
            int rc = ops->graph_end(&g, msg, sizeof msg);
            if (st != DT_OK) {
                if (g)
                    ops->graph_free(g);
                return st;
            }
            char why[256];
            if (rc == 0 && !dt_model_graph_fit(m, why, sizeof why)) {
                ops->graph_free(g); /* captured, but something in it cannot be replayed */
                g = NULL;
                snprintf(msg, sizeof msg, "%s", why);
            }
            if (g) {
                s->graph = g;
                gs->captured++;
                DT_INFO("train", "the step of %d samples is a CUDA graph from now on", b->n);
            } else {
                turn_off(gs, msg);
            }
        }
        if (!s->graph) { /* nothing ran: the fed step, eagerly */
            gs->eager++;
            DT_TRY(device_half(m, o, loss, b, global_batch, true, r, err));
            dt_optim_advance(o);
            return DT_OK;
        }
    }
    if (ops->graph_launch(s->graph, msg, sizeof msg) != 0)
        return dt_err_set(err, DT_EIO, "%s: %s", ops->name, msg);
    dt_model_graph_replayed(m);
    dt_optim_advance(o);
    gs->replayed++;
    return DT_OK;
}
