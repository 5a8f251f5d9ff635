/* dtrain bench - placeholder, replaced below. */
#include "cli.h"
#include <stdio.h>
int dt_cli_bench(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return 2;
}
