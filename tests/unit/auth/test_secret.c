/*
 * Unit tests of the cluster secret (auth/secret.c): create and load round
 * trip, the permission and format checks, and the transcript MAC.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "auth.h"

static char dir[64];
static char path[128];

static void setup(void)
{
    strcpy(dir, "/tmp/tern-auth-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/secret", dir);
}

static void teardown(void)
{
    unlink(path);
    rmdir(dir);
}

static void write_file(const char *text, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    cr_assert_eq(chmod(path, mode), 0);
}

TestSuite(auth_secret, .init = setup, .fini = teardown);

Test(auth_secret, create_then_load)
{
    struct auth_secret a, b;
    char errmsg[TERN_ERRMSG_SIZE] = "";
    struct stat st;

    cr_assert_eq(auth_secret_create(path, errmsg), 0, "%s", errmsg);
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0600);
    cr_assert_eq(auth_secret_load(path, &a, errmsg), 0, "%s", errmsg);
    cr_assert_eq(auth_secret_load(path, &b, errmsg), 0, "%s", errmsg);
    cr_assert_eq(memcmp(&a, &b, sizeof a), 0);
    /* Never overwrites an existing secret. */
    cr_assert_eq(auth_secret_create(path, errmsg), -EEXIST);
}

Test(auth_secret, load_hex_with_trailing_newline)
{
    struct auth_secret s;
    char errmsg[TERN_ERRMSG_SIZE] = "";

    write_file(
        "000102030405060708090a0b0c0d0e0f"
        "101112131415161718191A1B1C1D1E1F\n",
        0600);
    cr_assert_eq(auth_secret_load(path, &s, errmsg), 0, "%s", errmsg);
    for (int i = 0; i < AUTH_SECRET_SIZE; i++) {
        cr_assert_eq(s.key[i], i);
    }
}

Test(auth_secret, refuses_open_permissions)
{
    struct auth_secret s;
    char errmsg[TERN_ERRMSG_SIZE] = "";

    write_file(
        "000102030405060708090a0b0c0d0e0f"
        "101112131415161718191a1b1c1d1e1f\n",
        0644);
    cr_assert_eq(auth_secret_load(path, &s, errmsg), TERN_EAUTH);
    cr_assert(strstr(errmsg, "chmod 600") != NULL, "%s", errmsg);
}

Test(auth_secret, refuses_bad_format)
{
    static const char *bad[] = {
        "",
        "0001020304",
        "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1g",
        "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f00",
    };
    struct auth_secret s;
    char errmsg[TERN_ERRMSG_SIZE];

    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_file(bad[i], 0600);
        errmsg[0] = '\0';
        cr_assert_eq(auth_secret_load(path, &s, errmsg), TERN_EAUTH, "case %zu",
                     i);
        cr_assert(strstr(errmsg, "hex digits") != NULL, "%s", errmsg);
    }
}

Test(auth_secret, missing_file)
{
    struct auth_secret s;
    char errmsg[TERN_ERRMSG_SIZE] = "";

    cr_assert_eq(auth_secret_load(path, &s, errmsg), -ENOENT);
}

/* The transcript is length-prefixed: moving a byte between parts or into
 * the label changes the MAC, as does another key. */
Test(auth_secret, mac_is_unambiguous)
{
    struct auth_secret k1, k2;
    struct auth_iov ab_c[2] = {{"ab", 2}, {"c", 1}};
    struct auth_iov a_bc[2] = {{"a", 1}, {"bc", 2}};
    uint8_t m1[AUTH_MAC_SIZE], m2[AUTH_MAC_SIZE], m3[AUTH_MAC_SIZE];

    memset(&k1, 1, sizeof k1);
    memset(&k2, 2, sizeof k2);
    cr_assert_eq(auth_secret_mac(&k1, "tern test", ab_c, 2, m1), 0);
    cr_assert_eq(auth_secret_mac(&k1, "tern test", a_bc, 2, m2), 0);
    cr_assert_neq(memcmp(m1, m2, sizeof m1), 0);
    cr_assert_eq(auth_secret_mac(&k1, "tern tes", ab_c, 2, m2), 0);
    cr_assert_neq(memcmp(m1, m2, sizeof m1), 0);
    cr_assert_eq(auth_secret_mac(&k2, "tern test", ab_c, 2, m2), 0);
    cr_assert_neq(memcmp(m1, m2, sizeof m1), 0);
    cr_assert_eq(auth_secret_mac(&k1, "tern test", ab_c, 2, m3), 0);
    cr_assert_eq(memcmp(m1, m3, sizeof m1), 0);
}
