/* The job service's state without a daemon: the queue's order and lookups, the state machine,
 * a chief restart's bookkeeping (in memory and through the store on disk), the event history,
 * and the JSON the CLI and the store share. */
#include "dt_test.h"

#include "service/service_internal.h"

#include <stdio.h>
#include <sys/stat.h>

static job *make_job(const char *id, const char *name, job_state st)
{
    job *jb = dt__service_job_new();
    ASSERT_TRUE(jb != NULL);
    snprintf(jb->rec.id, sizeof jb->rec.id, "%s", id);
    snprintf(jb->rec.name, sizeof jb->rec.name, "%s", name);
    jb->rec.spec_json = strdup("{\"name\": \"x\"}");
    jb->rec.spec_len = strlen(jb->rec.spec_json);
    jb->rec.state = st;
    jb->rec.max_restarts = 3;
    jb->rec.rejoin_timeout_s = 300;
    return jb;
}

static jevent event(const char *kind, uint32_t epoch, uint64_t step, const char *message)
{
    jevent ev = {0};
    snprintf(ev.kind, sizeof ev.kind, "%s", kind);
    ev.epoch = epoch;
    ev.epochs = 3;
    ev.step = step;
    ev.steps = 100;
    if (strcmp(kind, "state") == 0)
        snprintf(ev.state, sizeof ev.state, "running");
    ev.message = message ? strdup(message) : NULL;
    return ev;
}

DT_TEST(service_queue_order_and_lookup)
{
    job_queue q = {.next_id = 1};
    dt__service_queue_append(&q, make_job("1", "a", JOB_SUCCEEDED));
    dt__service_queue_append(&q, make_job("2", "b", JOB_QUEUED));
    dt__service_queue_append(&q, make_job("3", "a", JOB_QUEUED));
    dt__service_queue_append(&q, make_job("4", "c", JOB_CANCELLED));
    ASSERT_EQ(q.next_id, 5);

    /* FIFO: the oldest queued job runs first, whatever ended before it. */
    ASSERT_STREQ(dt__service_queue_next(&q)->rec.id, "2");
    ASSERT_TRUE(dt__service_move(dt__service_queue_find(&q, "2"), JOB_PREPARING));
    ASSERT_STREQ(dt__service_queue_next(&q)->rec.id, "3");
    ASSERT_TRUE(dt__service_move(dt__service_queue_find(&q, "3"), JOB_CANCELLED));
    ASSERT_TRUE(dt__service_queue_next(&q) == NULL);

    /* An id is exact; a name means its latest job; nothing else matches. */
    ASSERT_STREQ(dt__service_queue_find(&q, "a")->rec.id, "3");
    ASSERT_STREQ(dt__service_queue_find(&q, "1")->rec.name, "a");
    ASSERT_TRUE(dt__service_queue_find(&q, "") == NULL);
    ASSERT_TRUE(dt__service_queue_find(&q, NULL) == NULL);
    ASSERT_TRUE(dt__service_queue_find(&q, "5") == NULL);
    ASSERT_TRUE(dt__service_queue_find(&q, "d") == NULL);

    /* Ids loaded from disk may have gaps: the next id follows the largest. */
    dt__service_queue_append(&q, make_job("17", "d", JOB_QUEUED));
    ASSERT_EQ(q.next_id, 18);
    dt__service_queue_append(&q, make_job("9", "e", JOB_QUEUED));
    ASSERT_EQ(q.next_id, 18);
    ASSERT_STREQ(dt__service_queue_next(&q)->rec.id, "17");
    dt__service_queue_destroy(&q);
    ASSERT_TRUE(q.head == NULL && q.tail == NULL);
}

DT_TEST(service_state_transitions)
{
    /* from \ to: queued preparing running restarting succeeded failed cancelled */
    static const bool allowed[7][7] = {
        [JOB_QUEUED] = {0, 1, 0, 0, 0, 1, 1},    [JOB_PREPARING] = {1, 0, 1, 1, 0, 1, 1},
        [JOB_RUNNING] = {1, 0, 0, 1, 1, 1, 1},   [JOB_RESTARTING] = {1, 1, 0, 0, 0, 1, 1},
        [JOB_SUCCEEDED] = {0, 0, 0, 0, 0, 0, 0}, [JOB_FAILED] = {1, 0, 0, 0, 0, 0, 0},
        [JOB_CANCELLED] = {1, 0, 0, 0, 0, 0, 0},
    };
    for (int from = JOB_QUEUED; from <= JOB_CANCELLED; from++)
        for (int to = JOB_QUEUED; to <= JOB_CANCELLED; to++) {
            job *jb = make_job("1", "t", (job_state)from);
            bool ok = dt__service_move(jb, (job_state)to);
            if (ok != allowed[from][to])
                DT_FAIL_("%s -> %s: %s, expected %s", dt__service_state_name((job_state)from),
                         dt__service_state_name((job_state)to), ok ? "allowed" : "refused",
                         allowed[from][to] ? "allowed" : "refused");
            ASSERT_EQ(jb->rec.state, ok ? to : from);
            ASSERT_EQ(dt__service_terminal(jb), jb->rec.state >= JOB_SUCCEEDED);
            dt__service_job_free(jb);
        }
    /* Names both ways, and nothing else parses. */
    for (int s = JOB_QUEUED; s <= JOB_CANCELLED; s++) {
        job_state back = JOB_QUEUED;
        ASSERT_TRUE(dt__service_state_parse(dt__service_state_name((job_state)s), &back));
        ASSERT_EQ(back, s);
    }
    job_state x;
    ASSERT_FALSE(dt__service_state_parse("bogus", &x));
    ASSERT_FALSE(dt__service_state_parse("Running", &x));
    ASSERT_FALSE(dt__service_state_parse(NULL, &x));
    ASSERT_STREQ(dt__service_state_name((job_state)42), "unknown");
}

DT_TEST(service_activate_and_rank_reports)
{
    job *jb = make_job("1", "t", JOB_QUEUED);
    dt_err err = {0};
    ASSERT_OK(dt__service_activate(jb, 3, NULL, &err), &err);
    ASSERT_EQ(jb->act->tasks[2], 2); /* every ring task, in order */
    ASSERT_TRUE(jb->act != NULL);
    ASSERT_EQ(jb->act->world, 3);
    ASSERT_EQ(jb->rec.world, 3);
    ASSERT_EQ(jb->rec.nhashes, 3);
    for (int r = 0; r < 3; r++)
        ASSERT_STREQ(jb->rec.hashes[r], ""); /* protobuf-c packs no NULL string */
    ASSERT_TRUE(dt__service_rank_done(jb, 1));
    ASSERT_FALSE(dt__service_rank_done(jb, 1)); /* counted once */
    ASSERT_FALSE(dt__service_rank_done(jb, 3)); /* outside the world */
    ASSERT_TRUE(dt__service_rank_done(jb, 0));
    ASSERT_EQ(jb->act->ndone, 2);

    /* A new start (after a chief restart, on another world) starts from nothing. */
    free(jb->rec.hashes[0]);
    jb->rec.hashes[0] = strdup("00ff");
    const uint32_t shrunk[2] = {0, 2}; /* ring task 1 stayed away */
    ASSERT_OK(dt__service_activate(jb, 2, shrunk, &err), &err);
    ASSERT_EQ(jb->act->ndone, 0);
    ASSERT_EQ(jb->act->tasks[0], 0);
    ASSERT_EQ(jb->act->tasks[1], 2);
    ASSERT_EQ(jb->rec.nhashes, 2);
    ASSERT_STREQ(jb->rec.hashes[0], "");
    dt__service_deactivate(jb);
    ASSERT_TRUE(jb->act == NULL);
    ASSERT_FALSE(dt__service_rank_done(jb, 0)); /* nothing holds the cluster */
    dt__service_deactivate(jb);                 /* twice is fine */
    dt__service_job_free(jb);
}

DT_TEST(service_progress_updates_the_record)
{
    job_record rec = {0};
    jevent ev = event("epoch_begin", 2, 0, NULL);
    dt__service_record_progress(&rec, &ev);
    ASSERT_EQ(rec.epoch, 2);
    ASSERT_EQ(rec.epochs, 3);
    ASSERT_EQ(rec.steps_per_epoch, 100);
    ev = event("step", 2, 40, NULL);
    snprintf(ev.metrics[0].name, sizeof ev.metrics[0].name, "loss");
    ev.metrics[0].value = 0.5;
    snprintf(ev.metrics[1].name, sizeof ev.metrics[1].name, "global_step");
    ev.metrics[1].value = 140;
    ev.nmetrics = 2;
    dt__service_record_progress(&rec, &ev);
    ASSERT_EQ(rec.step, 40);
    ASSERT_EQ(rec.global_step, 140); /* a position, not a metric */
    ASSERT_EQ(rec.nmetrics, 1);
    ASSERT_STREQ(rec.metrics[0].name, "loss");
    ev.metrics[0].value = 0.25; /* the same metric is updated in place */
    dt__service_record_progress(&rec, &ev);
    ASSERT_EQ(rec.nmetrics, 1);
    ASSERT_NEAR(rec.metrics[0].value, 0.25, 0);
    ev = event("epoch_begin", 3, 0, NULL);
    dt__service_record_progress(&rec, &ev);
    ASSERT_EQ(rec.step, 0);
    ASSERT_EQ(rec.epoch, 3);
    /* More metrics than a record keeps are dropped, not written past it. */
    ev = event("epoch_end", 3, 100, NULL);
    for (int i = 0; i < JOB_MAX_METRICS; i++) {
        snprintf(ev.metrics[i].name, sizeof ev.metrics[i].name, "m%d", i);
        ev.metrics[i].value = i;
    }
    ev.nmetrics = JOB_MAX_METRICS;
    dt__service_record_progress(&rec, &ev);
    ASSERT_EQ(rec.nmetrics, JOB_MAX_METRICS);
    ASSERT_STREQ(rec.metrics[0].name, "loss");
    char last[16];
    snprintf(last, sizeof last, "m%d", JOB_MAX_METRICS - 2);
    ASSERT_STREQ(rec.metrics[JOB_MAX_METRICS - 1].name, last);
}

DT_TEST(service_events_keep_the_newest)
{
    job_events e = {0};
    for (int i = 0; i < JOB_MAX_EVENTS + 10; i++) {
        char msg[32];
        snprintf(msg, sizeof msg, "event %d", i + 1);
        jevent ev = event("state", 1, 0, msg);
        dt__service_events_add(&e, &ev);
        ASSERT_TRUE(ev.message == NULL); /* taken */
        ASSERT_EQ(ev.seq, (uint64_t)i + 1);
    }
    ASSERT_EQ(e.nev, JOB_MAX_EVENTS);
    ASSERT_EQ(e.next_seq, JOB_MAX_EVENTS + 10);
    ASSERT_EQ(dt__service_events_at(&e, 0)->seq, 11);
    ASSERT_STREQ(dt__service_events_at(&e, 0)->message, "event 11");
    ASSERT_EQ(dt__service_events_at(&e, JOB_MAX_EVENTS - 1)->seq, JOB_MAX_EVENTS + 10);
    ASSERT_TRUE(dt__service_events_at(&e, JOB_MAX_EVENTS) == NULL);
    ASSERT_FLT(1e9, dt__service_events_at(&e, 0)->time_unix); /* stamped */
    dt__service_events_destroy(&e);
    ASSERT_EQ(e.nev, 0);
}

DT_TEST(service_events_grow_compact_and_find)
{
    job_events e = {0};
    /* Small until needed: a job with a few events holds a few, not the whole ring. */
    const char *kinds[] = {"state", "epoch_begin", "step", "step", "epoch_end"};
    for (int i = 0; i < 5; i++) {
        jevent ev = event(kinds[i], 1, (uint64_t)i, NULL);
        dt__service_events_add(&e, &ev);
    }
    ASSERT_EQ(e.nev, 5);
    ASSERT_LE(e.cap, 16);
    for (int i = 5; i < 100; i++) {
        jevent ev =
            event(i % 10 == 9 ? "epoch_end" : "step", 1 + (uint32_t)i / 10, (uint64_t)i, NULL);
        dt__service_events_add(&e, &ev);
    }
    ASSERT_EQ(e.nev, 100);
    ASSERT_LT(e.cap, 256);
    for (size_t i = 0; i < e.nev; i++)
        ASSERT_EQ(dt__service_events_at(&e, i)->seq, i + 1);
    ASSERT_EQ(dt__service_events_after(&e, 0), 0);
    ASSERT_EQ(dt__service_events_after(&e, 41), 41);
    ASSERT_EQ(dt__service_events_after(&e, 100), 100);
    /* An ended job keeps its states, epochs and each epoch's last step, with their numbers:
     * 1 2 4 5, then 9 10, 19 20, ... 99 100. */
    dt__service_events_compact(&e);
    ASSERT_EQ(e.nev, 4 + 2 * 10);
    ASSERT_EQ(e.next_seq, 100);
    uint64_t head[] = {1, 2, 4, 5, 9, 10, 19};
    for (size_t i = 0; i < sizeof head / sizeof head[0]; i++)
        ASSERT_EQ(dt__service_events_at(&e, i)->seq, head[i]);
    ASSERT_STREQ(dt__service_events_at(&e, 4)->kind, "step");
    ASSERT_EQ(dt__service_events_after(&e, 5), 4); /* seqs with gaps: the first after 5 is 9 */
    ASSERT_EQ(dt__service_events_after(&e, 6), 4);
    ASSERT_EQ(dt__service_events_after(&e, 99), 23);
    ASSERT_EQ(dt__service_events_after(&e, 100), 24);
    jevent ev = event("state", 10, 0, "more after the end");
    dt__service_events_add(&e, &ev);
    ASSERT_EQ(dt__service_events_at(&e, 24)->seq, 101);
    ASSERT_STREQ(dt__service_events_at(&e, 24)->message, "more after the end");
    dt__service_events_destroy(&e);
}

/* Jobs as a chief that died under them left them, saved and loaded again. */
static void save_all(const char *dir, job **jobs, int n)
{
    dt_err err = {0};
    for (int i = 0; i < n; i++)
        ASSERT_OK(dt__service_save(dir, jobs[i], true, &err), &err);
}

static job *load_and_recover(const char *dir, job_queue *q, int expect)
{
    job **list = NULL;
    int n = 0;
    dt_err err = {0};
    ASSERT_OK(dt__service_load(dir, &list, &n, &err), &err);
    ASSERT_EQ(n, expect);
    bool changed[8] = {0};
    ASSERT_LE(n, 8);
    dt__service_queue_recover(q, list, n, changed);
    for (int i = 0; i < n; i++)
        if (changed[i])
            ASSERT_OK(dt__service_save(dir, list[i], false, &err), &err);
    job *first = n ? list[0] : NULL;
    free(list);
    return first;
}

DT_TEST(service_chief_restart_bookkeeping)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/state", dt_test_tmpdir());
    job *jobs[5] = {
        make_job("1", "done", JOB_SUCCEEDED),   make_job("2", "running", JOB_RUNNING),
        make_job("3", "tired", JOB_RESTARTING), make_job("4", "requeued", JOB_QUEUED),
        make_job("10", "fresh", JOB_QUEUED),
    };
    jobs[1]->rec.epoch = 2;
    jobs[1]->rec.step = 17;
    jobs[1]->rec.started = 1000;
    jobs[2]->rec.restarts = 3;
    jobs[3]->rec.started = 1000; /* queued again by an earlier restart, never run since */
    jobs[3]->rec.restarts = 1;
    save_all(dir, jobs, 5);
    for (int i = 0; i < 5; i++)
        dt__service_job_free(jobs[i]);

    job_queue q = {0};
    load_and_recover(dir, &q, 5);
    ASSERT_EQ(q.next_id, 11);
    job *done = dt__service_queue_find(&q, "1"), *run = dt__service_queue_find(&q, "2");
    job *tired = dt__service_queue_find(&q, "3"), *requeued = dt__service_queue_find(&q, "4");
    job *fresh = dt__service_queue_find(&q, "10");
    ASSERT_EQ(done->rec.state, JOB_SUCCEEDED);
    ASSERT_FALSE(done->resume);
    /* Running under the chief: queued again, to resume from its checkpoint, once counted. */
    ASSERT_EQ(run->rec.state, JOB_QUEUED);
    ASSERT_TRUE(run->resume);
    ASSERT_EQ(run->rec.restarts, 1);
    ASSERT_EQ(run->rec.epoch, 2);
    ASSERT_EQ(run->rec.step, 17);
    /* Resumed too often: failed, saying so. */
    ASSERT_EQ(tired->rec.state, JOB_FAILED);
    ASSERT_FALSE(tired->resume);
    ASSERT_CONTAINS(tired->rec.error, "max_restarts times already");
    ASSERT_CONTAINS(tired->rec.error, "restarting");
    ASSERT_FLT(0, tired->rec.finished);
    ASSERT_EQ(tired->rec.restarts, 3);
    /* Queued by an earlier restart: still resumes; never started: starts fresh. */
    ASSERT_EQ(requeued->rec.state, JOB_QUEUED);
    ASSERT_TRUE(requeued->resume);
    ASSERT_EQ(requeued->rec.restarts, 1);
    ASSERT_FALSE(fresh->resume);
    /* The queue runs the oldest queued job first: the one that was running. */
    ASSERT_STREQ(dt__service_queue_next(&q)->rec.id, "2");
    dt__service_queue_destroy(&q);

    /* What was saved is what the next start sees: the restart is counted on disk, and a job
     * that keeps killing its chief fails after max_restarts (3) resumes. */
    for (uint32_t k = 2; k <= 3 + 1; k++) {
        load_and_recover(dir, &q, 5);
        run = dt__service_queue_find(&q, "2");
        ASSERT_EQ(run->rec.restarts, k - 1);
        ASSERT_EQ(run->rec.state, JOB_QUEUED);
        run->rec.state = JOB_RUNNING; /* it starts again, and the chief dies again */
        dt_err err = {0};
        ASSERT_OK(dt__service_save(dir, run, false, &err), &err);
        dt__service_queue_destroy(&q);
    }
    load_and_recover(dir, &q, 5);
    run = dt__service_queue_find(&q, "2");
    ASSERT_EQ(run->rec.state, JOB_FAILED);
    ASSERT_EQ(run->rec.restarts, 3);
    ASSERT_CONTAINS(run->rec.error, "epoch 2, step 17");
    dt__service_queue_destroy(&q);
}

DT_TEST(service_store_keeps_events_and_skips_strangers)
{
    char dir[4096], path[4400];
    snprintf(dir, sizeof dir, "%s/state", dt_test_tmpdir());
    job *jb = make_job("7", "hist", JOB_RUNNING);
    dt_err err = {0};
    ASSERT_OK(dt__service_save(dir, jb, true, &err), &err);
    /* state, epoch_begin, steps (not logged), epoch_end with metrics, state with a message */
    const char *kinds[] = {"state", "epoch_begin", "step", "step", "epoch_end", "state"};
    for (int i = 0; i < 6; i++) {
        jevent ev = event(kinds[i], 1, (uint64_t)i * 10, i == 5 ? "failed: worker:1 died" : NULL);
        if (strcmp(kinds[i], "epoch_end") == 0) {
            snprintf(ev.metrics[0].name, sizeof ev.metrics[0].name, "loss");
            ev.metrics[0].value = 0.75;
            ev.nmetrics = 1;
            ev.elapsed_s = 3.5;
        }
        dt__service_events_add(&jb->events, &ev);
        dt__service_log_event(dir, jb, dt__service_events_at(&jb->events, jb->events.nev - 1));
    }
    /* Not jobs: a name that is no id, a directory without state, a bad state file. */
    snprintf(path, sizeof path, "%s/jobs/notes", dir);
    ASSERT_EQ(mkdir(path, 0700), 0);
    snprintf(path, sizeof path, "%s/jobs/8", dir);
    ASSERT_EQ(mkdir(path, 0700), 0);
    snprintf(path, sizeof path, "%s/jobs/9", dir);
    ASSERT_EQ(mkdir(path, 0700), 0);
    snprintf(path, sizeof path, "%s/jobs/9/state.json", dir);
    FILE *f = fopen(path, "w");
    ASSERT_TRUE(f != NULL);
    fputs("{\"state\": \"runn", f); /* cut short */
    fclose(f);

    job **list = NULL;
    int n = 0;
    ASSERT_OK(dt__service_load(dir, &list, &n, &err), &err);
    ASSERT_EQ(n, 1);
    job *back = list[0];
    free(list);
    ASSERT_STREQ(back->rec.id, "7");
    ASSERT_STREQ(back->rec.name, "hist");
    ASSERT_EQ(back->rec.state, JOB_RUNNING);
    ASSERT_STREQ(back->rec.spec_json, jb->rec.spec_json);
    /* Four logged events keep their numbers (the steps' gap included); the next is 7. */
    ASSERT_EQ(back->events.nev, 4);
    uint64_t seqs[] = {1, 2, 5, 6};
    for (int i = 0; i < 4; i++)
        ASSERT_EQ(dt__service_events_at(&back->events, (size_t)i)->seq, seqs[i]);
    ASSERT_EQ(back->events.next_seq, 6);
    const jevent *end = dt__service_events_at(&back->events, 2);
    ASSERT_STREQ(end->kind, "epoch_end");
    ASSERT_EQ(end->nmetrics, 1);
    ASSERT_NEAR(end->metrics[0].value, 0.75, 0);
    ASSERT_NEAR(end->elapsed_s, 3.5, 0);
    ASSERT_STREQ(dt__service_events_at(&back->events, 3)->message, "failed: worker:1 died");
    dt__service_job_free(back);
    dt__service_job_free(jb);
}

static const cJSON *key(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!v)
        DT_FAIL_("no key \"%s\"", k);
    return v;
}

DT_TEST(service_json_is_one_shape_for_cli_and_store)
{
    job *jb = make_job("12", "shape", JOB_QUEUED);
    jb->rec.epochs = 3;
    jb->rec.params = 101770;
    jb->rec.submitted = 1700000000.5;
    snprintf(jb->rec.metrics[0].name, sizeof jb->rec.metrics[0].name, "loss");
    jb->rec.metrics[0].value = 0.125;
    jb->rec.nmetrics = 1;
    info_buf b;
    dt__service_job_pb(&jb->rec, &b);
    cJSON *o = dt_service_job_json(&b.info);
    ASSERT_TRUE(o != NULL);
    ASSERT_STREQ(key(o, "id")->valuestring, "12");
    ASSERT_STREQ(key(o, "state")->valuestring, "queued");
    ASSERT_TRUE(cJSON_IsNull(key(o, "error")));            /* none yet */
    ASSERT_TRUE(cJSON_IsNull(key(o, "started_unix")));     /* not yet */
    ASSERT_TRUE(cJSON_IsNumber(key(o, "submitted_unix"))); /* when it was */
    ASSERT_TRUE(cJSON_IsArray(key(o, "weights_hashes")));
    ASSERT_NEAR(key(key(o, "metrics"), "loss")->valuedouble, 0.125, 0);
    const char *keys[] = {"name",          "epoch",       "epochs",   "step",   "steps_per_epoch",
                          "global_step",   "world_size",  "examples", "params", "restarts",
                          "finished_unix", "weights_path"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        key(o, keys[i]);
    /* And back, as the store reads state.json. */
    job_record rec = {0};
    dt__service_record_from_json(o, &rec);
    ASSERT_STREQ(rec.name, "shape");
    ASSERT_EQ(rec.epochs, 3);
    ASSERT_EQ(rec.params, 101770);
    ASSERT_NEAR(rec.submitted, 1700000000.5, 0);
    ASSERT_FEQ(rec.started, 0);
    ASSERT_STREQ(rec.error, "");
    ASSERT_EQ(rec.nmetrics, 1);
    ASSERT_EQ(rec.max_restarts, 3);
    ASSERT_EQ(rec.rejoin_timeout_s, 300);
    ASSERT_TRUE(cJSON_IsNull(key(key(o, "fault_tolerance"), "min_workers"))); /* all */
    /* A state.json of a job stored before $.fault_tolerance existed: its defaults. */
    cJSON_DeleteItemFromObject(o, "fault_tolerance");
    job_record old = {0};
    dt__service_record_from_json(o, &old);
    ASSERT_EQ(old.max_restarts, 3);
    ASSERT_EQ(old.rejoin_timeout_s, 300);
    ASSERT_EQ(old.min_workers, 0);
    cJSON_Delete(o);

    /* Events: a state event says its state and message; progress says metrics and time. */
    jevent st = event("state", 1, 0, "why");
    jevent step = event("step", 1, 5, NULL);
    snprintf(step.metrics[0].name, sizeof step.metrics[0].name, "accuracy");
    step.metrics[0].value = 0.5;
    step.nmetrics = 1;
    step.elapsed_s = 2;
    jevent *evs[] = {&st, &step};
    for (int i = 0; i < 2; i++) {
        Dtrain__V1__JobEvent pb;
        Dtrain__V1__Metric m[JOB_MAX_METRICS], *mp[JOB_MAX_METRICS];
        evs[i]->seq = (uint64_t)i + 1;
        dt__service_event_pb(evs[i], &pb, m, mp);
        cJSON *e = dt_service_event_json("12", &pb);
        ASSERT_STREQ(key(e, "job")->valuestring, "12");
        ASSERT_EQ(key(e, "seq")->valueint, i + 1);
        ASSERT_STREQ(key(e, "kind")->valuestring, evs[i]->kind);
        ASSERT_EQ(cJSON_HasObjectItem(e, "state"), i == 0);
        ASSERT_EQ(cJSON_HasObjectItem(e, "message"), i == 0);
        ASSERT_EQ(cJSON_HasObjectItem(e, "metrics"), i == 1);
        ASSERT_EQ(cJSON_HasObjectItem(e, "elapsed_s"), i == 1);
        jevent back = {0};
        dt__service_event_from_json(e, &back);
        ASSERT_EQ(back.seq, evs[i]->seq);
        ASSERT_EQ(back.step, evs[i]->step);
        ASSERT_EQ(back.nmetrics, evs[i]->nmetrics);
        ASSERT_STREQ(back.message ? back.message : "", evs[i]->message ? evs[i]->message : "");
        free(back.message);
        cJSON_Delete(e);
    }
    free(st.message);
    dt__service_job_free(jb);
}

/* A restarted chief must never take the previous run's traffic for the current run's: reports
 * and cancels carry the run's session, and those of another session change nothing. Run by
 * test/integration/jobs_two.sh while a two-task job runs (DT_STALE_PROBE_* name it). */
DT_TEST(service_rpc_stale_reports_change_nothing)
{
    const char *chief = getenv("DT_STALE_PROBE_CHIEF");
    const char *worker = getenv("DT_STALE_PROBE_WORKER");
    const char *id = getenv("DT_STALE_PROBE_JOB");
    if (!chief || !worker || !id)
        DT_SKIP("run by test/integration/jobs_two.sh against its running job");
    const uint64_t stale = 0x5eed5eed5eed5eedull;
    dt_err err = {0};
    dt_rpc_channel *ch = NULL, *wch = NULL;
    ASSERT_OK(dt_rpc_channel_new(chief, NULL, &ch, &err), &err);
    ASSERT_OK(dt_rpc_channel_new(worker, NULL, &wch, &err), &err);

    /* worker:1's trainer of an earlier run says it failed: dropped. */
    Dtrain__V1__FinishedRequest fin = DTRAIN__V1__FINISHED_REQUEST__INIT;
    fin.id = (char *)id;
    fin.rank = 1;
    fin.code = DT_EIO;
    fin.error = "a stale failure";
    fin.weights_hash = fin.weights_path = "";
    fin.session = stale;
    Dtrain__V1__Ack *ack = NULL;
    ASSERT_OK(dt_rpc_unary(ch, DT_RPC_RUN_FINISHED, &fin.base, &dtrain__v1__ack__descriptor,
                           (ProtobufCMessage **)&ack, 5000, &err),
              &err);
    protobuf_c_message_free_unpacked(&ack->base, NULL);

    /* ... and asks whether to go: it is told to stop, and the run goes on. */
    Dtrain__V1__PreparedRequest prep = DTRAIN__V1__PREPARED_REQUEST__INIT;
    prep.id = (char *)id;
    prep.rank = 1;
    prep.ok = false;
    prep.error = "a stale preparation";
    prep.session = stale;
    Dtrain__V1__PreparedReply *rep = NULL;
    ASSERT_OK(dt_rpc_unary(ch, DT_RPC_RUN_PREPARED, &prep.base,
                           &dtrain__v1__prepared_reply__descriptor, (ProtobufCMessage **)&rep, 5000,
                           &err),
              &err);
    ASSERT_EQ(rep->decision, DTRAIN__V1__PREPARED_REPLY__DECISION__ABORT);
    ASSERT_CONTAINS(rep->message, "earlier run");
    protobuf_c_message_free_unpacked(&rep->base, NULL);

    /* A cancel meant for an earlier run of the job leaves the worker's run alone. */
    Dtrain__V1__CancelJobRequest cancel = DTRAIN__V1__CANCEL_JOB_REQUEST__INIT;
    cancel.id = (char *)id;
    cancel.reason = "a stale cancel";
    cancel.session = stale;
    ASSERT_OK(dt_rpc_unary(wch, DT_RPC_RUN_CANCEL, &cancel.base, &dtrain__v1__ack__descriptor,
                           (ProtobufCMessage **)&ack, 5000, &err),
              &err);
    protobuf_c_message_free_unpacked(&ack->base, NULL);

    /* The job is still running, with no error. */
    Dtrain__V1__JobRef ref = DTRAIN__V1__JOB_REF__INIT;
    ref.id = (char *)id;
    Dtrain__V1__JobReply *job = NULL;
    ASSERT_OK(dt_rpc_unary(ch, DT_RPC_JOBS_STATUS, &ref.base, &dtrain__v1__job_reply__descriptor,
                           (ProtobufCMessage **)&job, 5000, &err),
              &err);
    ASSERT_STREQ(job->job->state, "running");
    ASSERT_STREQ(job->job->error, "");
    protobuf_c_message_free_unpacked(&job->base, NULL);
    dt_rpc_channel_free(ch);
    dt_rpc_channel_free(wch);
}

/* Ids cross the wire and name directories (jobs/<id>, eval/<id>): only numbers pass. */
DT_TEST(service_ids_from_the_wire)
{
    static const char *const ok[] = {"1", "42", "00012", "12345678901234567890"};
    static const char *const bad[] = {"",     "../../outside-eval",    "1/../2", "-1", "1 ",
                                      "1\n2", "123456789012345678901", "0x10",   ".",  NULL};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
        ASSERT_TRUE(dt__service_id_ok(ok[i]));
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        if (dt__service_id_ok(bad[i]))
            DT_FAIL_("id '%s' was accepted", bad[i] ? bad[i] : "(null)");
}
