/*
 * A program outside the tree that uses an installed libtern: the header's
 * version against the loaded library's, an error string, and a client
 * object made and freed (no server is contacted). Prints one line the
 * package tests compare.
 */
#include <stdio.h>

#include <tern/tern.h>

int main(void)
{
    struct tern_client *c = NULL;
    int rv = tern_client_new("127.0.0.1:7400", NULL, &c);
    if (rv != 0) {
        (void)fprintf(stderr, "tern_client_new: %s\n", tern_strerror(rv));
        return 1;
    }
    tern_client_free(c);
    if (tern_version_number() != TERN_VERSION_NUMBER) {
        (void)fprintf(stderr, "header %d, library %d\n", TERN_VERSION_NUMBER,
                      tern_version_number());
        return 1;
    }
    (void)printf("libtern %d %s\n", tern_version_number(),
                 tern_err_name(TERN_ENOTLEADER));
    return 0;
}
