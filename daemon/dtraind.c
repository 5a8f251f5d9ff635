/* dtraind - the daemon: placeholder main until the cluster lands. */
#include "core/log.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    dt_log_init();
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--version") == 0) {
            printf("dtraind %s\n", DT_VERSION);
            return 0;
        }
    }
    fprintf(stderr, "dtraind: not implemented yet\n");
    return 2;
}
