/* dtrain summary - placeholder until the verb lands. */
#include "cli.h"

#include <stdio.h>

int dt_cli_summary(int argc, char **argv)
{
    (void)argc;
    fprintf(stderr, "dtrain %s: not implemented yet\n", argv[0]);
    return 2;
}
