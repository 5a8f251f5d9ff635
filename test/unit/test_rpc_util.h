/* test_rpc_util.h - a real gRPC server on a loop thread of its own, for tests that play a peer
 * (a rogue chief, a flood target). Header-only (static) like the other test helpers. */
#ifndef DT_TEST_RPC_UTIL_H
#define DT_TEST_RPC_UTIL_H

#include "dt_test.h"
#include "rpc/rpc.h"

#include <pthread.h>
#include <uv.h>

typedef struct tr_server {
    uv_loop_t loop;
    uv_async_t stop;
    dt_rpc_server *srv;
    pthread_t thread;
} tr_server;

static void tr__on_stop(uv_async_t *a)
{
    tr_server *s = a->data;
    dt_rpc_server_free(s->srv); /* on the loop thread, as it must be */
    uv_close((uv_handle_t *)a, NULL);
}

static void *tr__loop_main(void *arg)
{
    tr_server *s = arg;
    uv_run(&s->loop, UV_RUN_DEFAULT);
    return NULL;
}

/* Serves handler on 127.0.0.1 (a free port; dt_rpc_server_port(s->srv)); token may be NULL. */
static inline void tr_server_start(tr_server *s, dt_rpc_handler handler, const char *token)
{
    dt_err err = {0};
    ASSERT_EQ(uv_loop_init(&s->loop), 0);
    ASSERT_EQ(uv_async_init(&s->loop, &s->stop, tr__on_stop), 0);
    s->stop.data = s;
    dt_rpc_server_opts so = {
        .address = "127.0.0.1:0", .loop = &s->loop, .handler = handler, .token = token};
    ASSERT_OK(dt_rpc_server_new(&so, &s->srv, &err), &err);
    ASSERT_EQ(pthread_create(&s->thread, NULL, tr__loop_main, s), 0);
}

static inline void tr_server_stop(tr_server *s)
{
    uv_async_send(&s->stop);
    pthread_join(s->thread, NULL);
    uv_loop_close(&s->loop);
}

#endif
