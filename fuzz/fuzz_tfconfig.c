/* fuzz_tfconfig.c - TF_CONFIG text: dt_tfconfig_parse, then what a daemon does with a spec
 * (canonical text, ranks, addresses), and dt_tfconfig_diff on the input as a peer's canonical
 * text (a Join request carries it off the network). */
#include "common.h"

#include "config/tfconfig.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    fz_init();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dt_cluster_spec spec;
    dt_err err = {0};
    char *text = malloc(size + 1); /* NUL-terminated copy for the string APIs */
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    char diff[512];
    if (dt_tfconfig_parse((const char *)data, size, &spec, &err) == DT_OK) {
        char *canon = dt_tfconfig_canonical(&spec);
        for (int r = 0; r < spec.world_size; r++) {
            const dt_task *t = dt_tfconfig_by_rank(&spec, r);
            char host[DT_MAX_ADDRESS], name[32];
            int port;
            if (!t ||
                dt_tfconfig_split_address(t->address, host, sizeof host, &port, &err) != DT_OK)
                abort(); /* a parsed spec's ranks and addresses must be valid */
            dt_task_name(t, name, sizeof name);
        }
        dt_tfconfig_diff(canon, text, diff, sizeof diff);
        dt_tfconfig_diff(text, canon, diff, sizeof diff);
        free(canon);
        dt_tfconfig_destroy(&spec);
    } else {
        dt_tfconfig_diff("worker:0=127.0.0.1:7000\n", text, diff, sizeof diff);
    }
    char host[DT_MAX_ADDRESS];
    int port;
    dt_tfconfig_split_address(text, host, sizeof host, &port, &err);
    free(text);
    return 0;
}
