/* dtrain cluster - every task of the cluster with its address, rank, state and heartbeat. */
#include "cli.h"

#include "dtrain.pb-c.h"
#include "rpc/rpc.h"

#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: dtrain cluster [--addr HOST:PORT] [--token-file FILE] [--timeout SEC] "
            "[--json]\n\n"
            "Shows the cluster as the daemon at --addr sees it (the chief knows it best): each\n"
            "task's address, rank, state (joined, missing, dead, left; unhealthy: alive but out\n"
            "of jobs until it recovers, e.g. its trainer hung, with the reason below the table),\n"
            "seconds since its last heartbeat, version, cores, GPUs and their model (as the\n"
            "task's driver names them; CUDA_VISIBLE_DEVICES in its environment is honoured).\n"
            "--token-file defaults to $DTRAIN_TOKEN_FILE. Exit 1 when the daemon cannot be\n"
            "reached.\n");
}

static void print_json(const Dtrain__V1__ClusterView *v)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "generation", (double)v->generation);
    cJSON_AddStringToObject(j, "chief", v->chief ? v->chief : "");
    cJSON_AddBoolToObject(j, "formed", v->formed);
    cJSON_AddStringToObject(j, "reporter", v->reporter ? v->reporter : "");
    cJSON *tasks = cJSON_AddArrayToObject(j, "tasks");
    for (size_t i = 0; i < v->n_members; i++) {
        const Dtrain__V1__Member *m = v->members[i];
        cJSON *t = cJSON_CreateObject();
        char name[64];
        snprintf(name, sizeof name, "%s:%u", m->task ? m->task->type : "?",
                 m->task ? m->task->index : 0);
        cJSON_AddStringToObject(t, "task", name);
        cJSON_AddStringToObject(t, "address", m->address ? m->address : "");
        cJSON_AddNumberToObject(t, "rank", m->rank);
        cJSON_AddStringToObject(t, "state", m->state ? m->state : "missing");
        if (m->unhealthy && *m->unhealthy)
            cJSON_AddStringToObject(t, "unhealthy", m->unhealthy);
        else
            cJSON_AddNullToObject(t, "unhealthy");
        if (m->heartbeat_age_s >= 0)
            cJSON_AddNumberToObject(t, "heartbeat_age_s", m->heartbeat_age_s);
        else
            cJSON_AddNullToObject(t, "heartbeat_age_s");
        cJSON_AddStringToObject(t, "version", m->version ? m->version : "");
        cJSON_AddNumberToObject(t, "cores", m->cores);
        cJSON_AddNumberToObject(t, "gpus", m->gpus);
        cJSON_AddStringToObject(t, "gpu_model", m->gpu_model ? m->gpu_model : "");
        cJSON_AddItemToArray(tasks, t);
    }
    dt_cli_print_json(j);
}

static void print_table(const Dtrain__V1__ClusterView *v)
{
    printf("chief %s, generation %llu, %s (as seen by %s)\n\n", v->chief,
           (unsigned long long)v->generation, v->formed ? "formed" : "forming", v->reporter);
    printf("%-12s %-24s %4s  %-8s %9s  %-8s %5s %4s  %s\n", "TASK", "ADDRESS", "RANK", "STATE",
           "HEARTBEAT", "VERSION", "CORES", "GPUS", "GPU MODEL");
    for (size_t i = 0; i < v->n_members; i++) {
        const Dtrain__V1__Member *m = v->members[i];
        char name[64], age[32];
        snprintf(name, sizeof name, "%s:%u", m->task ? m->task->type : "?",
                 m->task ? m->task->index : 0);
        if (m->heartbeat_age_s >= 0)
            snprintf(age, sizeof age, "%.1fs ago", m->heartbeat_age_s);
        else
            snprintf(age, sizeof age, "never");
        bool sick = m->unhealthy && *m->unhealthy;
        printf("%-12s %-24s %4d  %-8s %9s  %-8s %5u %4u  %s\n", name, m->address, m->rank,
               sick ? "unhealthy" : m->state, age, m->version && *m->version ? m->version : "-",
               m->cores, m->gpus, m->gpu_model && *m->gpu_model ? m->gpu_model : "-");
    }
    for (size_t i = 0; i < v->n_members; i++) {
        const Dtrain__V1__Member *m = v->members[i];
        if (m->unhealthy && *m->unhealthy)
            printf("\n%s:%u is unhealthy: %s\n", m->task ? m->task->type : "?",
                   m->task ? m->task->index : 0, m->unhealthy);
    }
}

int dt_cli_cluster(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"addr", required_argument, NULL, 'a'},    {"token-file", required_argument, NULL, 't'},
        {"timeout", required_argument, NULL, 'T'}, {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0},
    };
    const char *addr_flag = NULL, *token_file = getenv("DTRAIN_TOKEN_FILE");
    double timeout_s = 5;
    int json = 0, ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (ch) {
        case 'a':
            addr_flag = optarg;
            break;
        case 't':
            token_file = optarg;
            break;
        case 'T':
            timeout_s = atof(optarg);
            break;
        case 'j':
            json = 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            return dt_cli_bad_option("cluster", argc, argv, "h", longopts);
        }
    }
    if (optind < argc) {
        fprintf(stderr, "dtrain cluster: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (timeout_s <= 0)
        timeout_s = 5;
    dt_cli_conn conn = {0};
    int orc = dt_cli_conn_open(&conn, "cluster", addr_flag, token_file);
    if (orc) {
        dt_cli_conn_close(&conn);
        return orc;
    }
    dt_err err = {0};
    Dtrain__V1__ClusterInfoRequest req = DTRAIN__V1__CLUSTER_INFO_REQUEST__INIT;
    Dtrain__V1__ClusterInfoReply *rep = NULL;
    dt_status st = dt_rpc_unary(conn.ch, DT_RPC_CLUSTER_INFO, &req.base,
                                &dtrain__v1__cluster_info_reply__descriptor,
                                (ProtobufCMessage **)&rep, (int64_t)(timeout_s * 1000), &err);
    int rc = 0;
    if (st != DT_OK) {
        fprintf(stderr, "dtrain cluster: %s\n", err.msg);
        if (st == DT_EPEER)
            fprintf(stderr, "  is dtraind running there? pass --addr HOST:PORT or set "
                            "DTRAIN_ADDR\n");
        rc = st == DT_EAUTH ? 2 : 1;
    } else if (!rep->view) {
        fprintf(stderr, "dtrain cluster: %s sent an empty view\n", conn.addr);
        rc = 1;
    } else if (json) {
        print_json(rep->view);
    } else {
        print_table(rep->view);
    }
    if (rep)
        protobuf_c_message_free_unpacked(&rep->base, NULL);
    dt_cli_conn_close(&conn);
    return rc;
}
