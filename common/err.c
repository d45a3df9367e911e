/* Error strings for tern codes and -errno, and the errmsg helpers. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "tern_common.h"

const char *tern_strerror(int code)
{
    switch (code) {
    case 0:
        return "success";
#define TERN__ERRNO_STR(name, value, msg)                                      \
    case name:                                                                 \
        return msg;
        TERN_ERRNO_MAP(TERN__ERRNO_STR)
#undef TERN__ERRNO_STR
    default:
        break;
    }
    if (code < 0 && code > -4096) {
        return strerror(-code);
    }
    return "unknown error";
}

const char *tern_err_name(int code)
{
    switch (code) {
    case 0:
        return "OK";
#define TERN__ERRNO_NAME(name, value, msg)                                     \
    case name:                                                                 \
        return #name;
        TERN_ERRNO_MAP(TERN__ERRNO_NAME)
#undef TERN__ERRNO_NAME
    default:
        break;
    }
    if (code < 0 && code > -4096) {
        const char *n = strerrorname_np(-code);
        return n != NULL ? n : "ERRNO";
    }
    return "UNKNOWN";
}

void tern_errmsg_printf(char *errmsg, const char *fmt, ...)
{
    va_list ap;
    if (errmsg == NULL) {
        return;
    }
    va_start(ap, fmt);
    if (vsnprintf(errmsg, TERN_ERRMSG_SIZE, fmt, ap) < 0) {
        errmsg[0] = '\0'; /* encoding error: contents unspecified */
    }
    va_end(ap);
}

void tern_errmsg_wrapf(char *errmsg, const char *fmt, ...)
{
    char out[TERN_ERRMSG_SIZE];
    size_t n;
    va_list ap;
    if (errmsg == NULL) {
        return;
    }
    va_start(ap, fmt);
    if (vsnprintf(out, sizeof out, fmt, ap) < 0) {
        out[0] = '\0'; /* encoding error: strlen below needs a string */
    }
    va_end(ap);
    n = strlen(out);
    if (n + 2 < sizeof out) {
        out[n++] = ':';
        out[n++] = ' ';
        out[n] = '\0';
        strncat(out, errmsg, sizeof out - n - 1);
    }
    memcpy(errmsg, out, TERN_ERRMSG_SIZE);
}

void tern_invariant_failed(const char *expr, const char *file, int line)
{
    (void)fprintf(stderr, "tern: invariant violated: %s (%s:%d)\n", expr, file,
                  line);
    (void)fflush(stderr);
    abort();
}
