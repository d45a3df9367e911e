/*
 * The queue and consumer-group name rule shared by the wire protocol, the
 * client library and the index (declared in tern_common.h).
 */
#include "tern_common.h"

int tern_name_valid(const char *s, size_t len)
{
    if (s == NULL || len == 0 || len > TERN_NAME_MAX) {
        return 0;
    }
    for (size_t i = 0; i < len; i++) {
        char ch = s[i];
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                 (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' ||
                 ch == '-';
        if (!ok) {
            return 0;
        }
    }
    return 1;
}
