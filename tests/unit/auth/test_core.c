/*
 * Unit tests of auth/'s shared core: HMAC-SHA-256 against the RFC 4231
 * vectors, constant-time comparison, random bytes.
 */
#include <string.h>

#include <criterion/criterion.h>

#include "auth.h"

static void hex(const uint8_t *p, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    size_t i;

    for (i = 0; i < n; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
    out[2 * n] = '\0';
}

/* RFC 4231 test case 2: key "Jefe", data "what do ya want for nothing?". */
Test(auth_core, hmac_rfc4231_case2)
{
    struct auth_iov iov = {"what do ya want for nothing?", 28};
    uint8_t mac[AUTH_MAC_SIZE];
    char text[2 * AUTH_MAC_SIZE + 1];

    cr_assert_eq(auth_hmac("Jefe", 4, &iov, 1, mac), 0);
    hex(mac, sizeof mac, text);
    cr_assert_str_eq(text,
                     "5bdcc146bf60754e6a042426089575c7"
                     "5a003f089d2739839dec58b964ec3843");
}

/* The MAC of split input equals the MAC of the whole (empty parts too). */
Test(auth_core, hmac_iov_split)
{
    struct auth_iov whole = {"what do ya want for nothing?", 28};
    struct auth_iov parts[3] = {
        {"what do ya ", 11}, {"", 0}, {"want for nothing?", 17}};
    uint8_t a[AUTH_MAC_SIZE], b[AUTH_MAC_SIZE];

    cr_assert_eq(auth_hmac("Jefe", 4, &whole, 1, a), 0);
    cr_assert_eq(auth_hmac("Jefe", 4, parts, 3, b), 0);
    cr_assert_eq(memcmp(a, b, sizeof a), 0);
    cr_assert_eq(auth_hmac("Jeff", 4, &whole, 1, b), 0);
    cr_assert_neq(memcmp(a, b, sizeof a), 0);
}

Test(auth_core, equal)
{
    cr_assert(auth_equal("abcdef", "abcdef", 6));
    cr_assert_not(auth_equal("abcdef", "abcdeg", 6));
    cr_assert_not(auth_equal("xbcdef", "abcdef", 6));
    cr_assert(auth_equal("a", "b", 0));
}

Test(auth_core, random_and_wipe)
{
    uint8_t a[64], b[64], zero[64] = {0};
    char errmsg[TERN_ERRMSG_SIZE] = "";

    cr_assert_eq(auth_random(a, sizeof a, errmsg), 0, "%s", errmsg);
    cr_assert_eq(auth_random(b, sizeof b, errmsg), 0, "%s", errmsg);
    cr_assert_neq(memcmp(a, b, sizeof a), 0);
    auth_wipe(a, sizeof a);
    cr_assert_eq(memcmp(a, zero, sizeof a), 0);
}
