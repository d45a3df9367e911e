/*
 * auth/auth.c: the primitives every part of auth/ shares: random bytes,
 * constant-time comparison, wiping secrets and HMAC-SHA-256.
 */
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "auth.h"

int auth_random(void *buf, size_t len, char *errmsg)
{
    unsigned char *p = buf;

    while (len > 0) {
        int chunk = len > (1u << 20) ? (1 << 20) : (int)len;
        if (RAND_bytes(p, chunk) != 1) {
            unsigned long e = ERR_get_error();
            char why[128];

            ERR_error_string_n(e, why, sizeof why);
            tern_errmsg_printf(errmsg, "random bytes: %s", why);
            return TERN_EINTERNAL;
        }
        p += chunk;
        len -= (size_t)chunk;
    }
    return 0;
}

bool auth_equal(const void *a, const void *b, size_t len)
{
    return CRYPTO_memcmp(a, b, len) == 0;
}

void auth_wipe(void *p, size_t len)
{
    OPENSSL_cleanse(p, len);
}

int auth_hmac(const void *key,
              size_t key_len,
              const struct auth_iov *iov,
              unsigned n,
              uint8_t out[AUTH_MAC_SIZE])
{
    EVP_MAC *mac = NULL;
    EVP_MAC_CTX *ctx = NULL;
    OSSL_PARAM params[2];
    size_t out_len = 0;
    int rv = TERN_EINTERNAL;
    unsigned i;

    mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    if (mac == NULL) {
        goto err;
    }
    ctx = EVP_MAC_CTX_new(mac);
    if (ctx == NULL) {
        goto err_mac;
    }
    params[0] = OSSL_PARAM_construct_utf8_string("digest", "SHA256", 0);
    params[1] = OSSL_PARAM_construct_end();
    if (EVP_MAC_init(ctx, key, key_len, params) != 1) {
        goto err_ctx;
    }
    for (i = 0; i < n; i++) {
        if (iov[i].len > 0 &&
            EVP_MAC_update(ctx, iov[i].base, iov[i].len) != 1) {
            goto err_ctx;
        }
    }
    if (EVP_MAC_final(ctx, out, &out_len, AUTH_MAC_SIZE) != 1 ||
        out_len != AUTH_MAC_SIZE) {
        goto err_ctx;
    }
    rv = 0;

err_ctx:
    EVP_MAC_CTX_free(ctx);
err_mac:
    EVP_MAC_free(mac);
err:
    return rv;
}
