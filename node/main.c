/*
 * ternd: the tern server process. Parses the configuration (config.c),
 * then runs the node (node.c) until SIGTERM/SIGINT; --version prints the
 * version and exits.
 * Exit codes: 0 clean stop, 1 runtime failure, 2 bad configuration.
 */
#include <stdio.h>
#include <string.h>

#include <tern/tern.h>
#include <tern_common.h>

#include "config.h"
#include "node.h"

int main(int argc, char **argv)
{
    struct node_config c;
    char errmsg[TERN_ERRMSG_SIZE] = "";
    int rv;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--version") == 0) {
            (void)printf("ternd %d.%d.%d\n", TERN_VERSION_MAJOR,
                         TERN_VERSION_MINOR, TERN_VERSION_PATCH);
            return 0;
        }
    }
    node_config_init(&c);
    rv = node_config_parse_args(&c, argc, argv, errmsg);
    if (rv != 0) {
        (void)fprintf(stderr, "ternd: %s\n", errmsg);
        (void)fprintf(stderr, "ternd: run 'ternd --help' for usage\n");
        node_config_free(&c);
        return 2;
    }
    if (c.help) {
        (void)fputs(node_config_usage(), stdout);
        node_config_free(&c);
        return 0;
    }
    rv = node_run(&c);
    node_config_free(&c);
    return rv;
}
