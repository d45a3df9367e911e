/*
 * The queue and consumer-group name rule shared by the wire protocol, the
 * client library and the index, and the stored form of a namespaced queue
 * name (declared in tern_common.h).
 */
#include <string.h>

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

int tern_qname_valid(const char *s, size_t len)
{
    const char *sep;
    size_t ns_len;
    if (s == NULL || len == 0 || len > TERN_NAME_MAX) {
        return 0;
    }
    sep = memchr(s, TERN_NS_SEP, len);
    if (sep == NULL) {
        return tern_name_valid(s, len);
    }
    ns_len = (size_t)(sep - s);
    return ns_len <= TERN_NS_NAME_MAX && tern_name_valid(s, ns_len) &&
           tern_name_valid(sep + 1, len - ns_len - 1);
}

void tern_qname_split(const char *s,
                      size_t len,
                      const char **ns,
                      size_t *ns_len,
                      const char **name,
                      size_t *name_len)
{
    const char *sep = len > 0 ? memchr(s, TERN_NS_SEP, len) : NULL;
    if (sep == NULL) {
        *ns = s;
        *ns_len = 0;
        *name = s;
        *name_len = len;
        return;
    }
    *ns = s;
    *ns_len = (size_t)(sep - s);
    *name = sep + 1;
    *name_len = len - *ns_len - 1;
}

int tern_qname_join(char *buf, size_t cap, const char *ns, const char *name)
{
    size_t nl = name != NULL ? strnlen(name, TERN_NAME_MAX + 1) : 0;
    size_t sl = 0, total;
    if (!tern_name_valid(name, nl)) {
        return TERN_EBADNAME;
    }
    if (ns != NULL && ns[0] != '\0' && strcmp(ns, TERN_NS_DEFAULT) != 0) {
        sl = strnlen(ns, TERN_NS_NAME_MAX + 1);
        if (sl > TERN_NS_NAME_MAX || !tern_name_valid(ns, sl)) {
            return TERN_EBADNAME;
        }
    }
    total = sl > 0 ? sl + 1 + nl : nl;
    if (total > TERN_NAME_MAX || total + 1 > cap) {
        return TERN_EBADNAME;
    }
    if (sl > 0) {
        memcpy(buf, ns, sl);
        buf[sl] = TERN_NS_SEP;
        memcpy(buf + sl + 1, name, nl);
    } else {
        memcpy(buf, name, nl);
    }
    buf[total] = '\0';
    return (int)total;
}
