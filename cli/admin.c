/*
 * `tern user|acl|namespace|admin ...`: the CLI's administration commands
 * (libtern's tern_user_* / tern_acl_* / tern_namespace_* calls), and the
 * password input they and the login share. Syntax and output formats are
 * in cli.c's header comment. A password is read from a file or stdin
 * (never from the command line, where other users could see it in the
 * process list), its first line without the line end.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int cli_read_password(FILE *f, const char *what, char *buf, size_t cap)
{
    size_t n;
    if (fgets(buf, (int)cap, f) == NULL) {
        (void)fprintf(stderr, "tern: %s: no password to read\n", what);
        return -1;
    }
    n = strcspn(buf, "\r\n");
    if (buf[n] == '\0' && n == cap - 1) {
        (void)fprintf(stderr, "tern: %s: password longer than %zu bytes\n",
                      what, cap - 2);
        return -1;
    }
    buf[n] = '\0';
    if (n == 0) {
        (void)fprintf(stderr, "tern: %s: empty password\n", what);
        return -1;
    }
    return 0;
}

int cli_read_password_file(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    int rv;
    if (f == NULL) {
        (void)fprintf(stderr, "tern: password file %s: %s\n", path,
                      strerror(errno));
        return -1;
    }
    rv = cli_read_password(f, path, buf, cap);
    (void)fclose(f);
    return rv;
}

/* Wipe a password buffer (volatile stores: not optimised away). */
void cli_wipe(void *p, size_t n)
{
    volatile unsigned char *v = p;
    for (size_t i = 0; i < n; i++) {
        v[i] = 0;
    }
}

/* The password of `user set` / `user hash` from --password-file F or
 * --password-stdin (argv[k] the option; *k advanced past its value).
 * 1: the option was one of them and buf holds the password; 0: another
 * option; -1: error (printed). */
static int password_opt(int argc, char **argv, int *k, char *buf, size_t cap)
{
    if (strcmp(argv[*k], "--password-file") == 0 && *k + 1 < argc) {
        (*k)++;
        return cli_read_password_file(argv[*k], buf, cap) == 0 ? 1 : -1;
    }
    if (strcmp(argv[*k], "--password-stdin") == 0) {
        return cli_read_password(stdin, "stdin", buf, cap) == 0 ? 1 : -1;
    }
    return 0;
}

/* ---- permissions ---- */

static const struct
{
    const char *name;
    uint32_t bit;
} perm_names[] = {
    {"produce", TERN_PERM_PRODUCE},
    {"consume", TERN_PERM_CONSUME},
    {"manage", TERN_PERM_MANAGE},
    {"admin", TERN_PERM_ADMIN},
};

int cli_parse_perms(const char *s, uint32_t *out)
{
    uint32_t perms = 0;
    const char *p = s;
    if (strcmp(s, "all") == 0) {
        *out = TERN_PERM_ALL;
        return 0;
    }
    while (*p != '\0') {
        size_t len = strcspn(p, ",");
        uint32_t bit = 0;
        for (size_t i = 0; i < sizeof perm_names / sizeof perm_names[0]; i++) {
            if (strlen(perm_names[i].name) == len &&
                strncmp(p, perm_names[i].name, len) == 0) {
                bit = perm_names[i].bit;
            }
        }
        if (bit == 0) {
            (void)fprintf(stderr,
                          "tern: permissions \"%s\": a comma list of "
                          "produce, consume, manage, admin, or all\n",
                          s);
            return -1;
        }
        perms |= bit;
        p += len;
        if (*p == ',') {
            p++;
        }
    }
    if (perms == 0) {
        (void)fprintf(stderr, "tern: permissions \"%s\": none given\n", s);
        return -1;
    }
    *out = perms;
    return 0;
}

void cli_format_perms(uint32_t perms, char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = '\0';
    if (perms == TERN_PERM_ALL) {
        (void)snprintf(buf, cap, "all");
        return;
    }
    for (size_t i = 0; i < sizeof perm_names / sizeof perm_names[0]; i++) {
        if ((perms & perm_names[i].bit) != 0 && n < cap) {
            int w = snprintf(buf + n, cap - n, "%s%s", n > 0 ? "," : "",
                             perm_names[i].name);
            n += w > 0 ? (size_t)w : 0;
        }
    }
    if (n == 0) {
        (void)snprintf(buf, cap, "-");
    }
}

/* "admin,cert", "admin", "cert" or "-". */
static const char *user_flags_text(uint32_t f)
{
    if ((f & TERN_USER_ADMIN) != 0 && (f & TERN_USER_CERT) != 0) {
        return "admin,cert";
    }
    if ((f & TERN_USER_ADMIN) != 0) {
        return "admin";
    }
    return (f & TERN_USER_CERT) != 0 ? "cert" : "-";
}

/* ---- the list printer (user, acl and namespace list) ---- */

/* One field of a printed row: a JSON member (key not NULL) and/or a text
 * column (text not 0). A string (s) or, when s is NULL, a number (v), or
 * a JSON boolean (is_bool). */
struct field
{
    const char *key;
    int text;
    int is_bool;
    const char *s;
    uint64_t v;
};

#define CLI__MAX_FIELDS 8

/* Fills f[0..) with the fields of row i of list l (strings borrowed from
 * l or from scratch, a caller-owned buffer of 64 bytes); returns how
 * many. */
typedef size_t (*row_fields_cb)(const void *l,
                                size_t i,
                                struct field *f,
                                char *scratch);

/* Print the n rows of l: text, one tab-separated line a row, or one JSON
 * object {"<title>":[{...},...]}. */
static void print_list(const char *title,
                       const void *l,
                       size_t n,
                       row_fields_cb row,
                       int json)
{
    if (json) {
        (void)printf("{\"%s\":[", title);
    }
    for (size_t i = 0; i < n; i++) {
        struct field f[CLI__MAX_FIELDS];
        char scratch[64];
        size_t nf = row(l, i, f, scratch);
        int col = 0;
        if (json) {
            (void)printf("%s{", i > 0 ? "," : "");
        }
        for (size_t k = 0; k < nf; k++) {
            if (json && f[k].key != NULL) {
                (void)printf("%s\"%s\":", col++ > 0 ? "," : "", f[k].key);
                if (f[k].s != NULL) {
                    cli_json_string(stdout, f[k].s);
                } else if (f[k].is_bool) {
                    (void)printf("%s", f[k].v != 0 ? "true" : "false");
                } else {
                    (void)printf("%" PRIu64, f[k].v);
                }
            } else if (!json && f[k].text) {
                (void)printf("%s", col++ > 0 ? "\t" : "");
                if (f[k].s != NULL) {
                    (void)printf("%s", f[k].s);
                } else {
                    (void)printf("%" PRIu64, f[k].v);
                }
            }
        }
        (void)printf("%s", json ? "}" : "\n");
    }
    if (json) {
        (void)printf("]}\n");
    }
}

static struct field str_field(const char *key, int text, const char *s)
{
    struct field f = {key, text, 0, s, 0};
    return f;
}

static struct field num_field(const char *key, int is_bool, uint64_t v)
{
    struct field f = {key, !is_bool, is_bool, NULL, v};
    return f;
}

/* user list: "<name>\t<flags>\t<password|->";
 * {"name","admin","cert","password"}. */
static size_t user_fields(const void *l, size_t i, struct field *f, char *s)
{
    uint32_t flags = tern_user_list_flags(l, i);
    int pw = tern_user_list_has_password(l, i);
    (void)s;
    f[0] = str_field("name", 1, tern_user_list_name(l, i));
    f[1] = num_field("admin", 1, (flags & TERN_USER_ADMIN) != 0);
    f[2] = num_field("cert", 1, (flags & TERN_USER_CERT) != 0);
    f[3] = str_field(NULL, 1, user_flags_text(flags));
    f[4] = num_field("password", 1, pw != 0);
    f[5] = str_field(NULL, 1, pw ? "password" : "-");
    return 6;
}

/* acl list: "<user>\t<namespace>\t<pattern>\t<perms>"; the same keys. */
static size_t acl_fields(const void *l, size_t i, struct field *f, char *s)
{
    cli_format_perms(tern_acl_list_perms(l, i), s, 64);
    f[0] = str_field("user", 1, tern_acl_list_user(l, i));
    f[1] = str_field("namespace", 1, tern_acl_list_namespace(l, i));
    f[2] = str_field("pattern", 1, tern_acl_list_pattern(l, i));
    f[3] = str_field("perms", 1, s);
    return 4;
}

/* namespace list: "<name>\t<max_queues>\t<max_bytes>\t<rate>". */
static size_t namespace_fields(const void *l,
                               size_t i,
                               struct field *f,
                               char *s)
{
    (void)s;
    f[0] = str_field("name", 1, tern_namespace_list_name(l, i));
    f[1] = num_field("max_queues", 0, tern_namespace_list_max_queues(l, i));
    f[2] = num_field("max_bytes", 0, tern_namespace_list_max_bytes(l, i));
    f[3] = num_field("produce_bytes_per_s", 0,
                     tern_namespace_list_produce_bytes_per_s(l, i));
    return 4;
}

static int user_list(struct tern_client *c, int json)
{
    struct tern_user_list *l;
    int rv = tern_user_list(c, &l);
    if (rv != 0) {
        cli_error(c, rv, "user list");
        return 1;
    }
    print_list("users", l, tern_user_list_count(l), user_fields, json);
    tern_user_list_free(l);
    return 0;
}

static int acl_list(struct tern_client *c, const char *user, int json)
{
    struct tern_acl_list *l;
    int rv = tern_acl_list(c, user, &l);
    if (rv != 0) {
        cli_error(c, rv, "acl list");
        return 1;
    }
    print_list("grants", l, tern_acl_list_count(l), acl_fields, json);
    tern_acl_list_free(l);
    return 0;
}

static int namespace_list(struct tern_client *c, int json)
{
    struct tern_namespace_list *l;
    int rv = tern_namespace_list(c, &l);
    if (rv != 0) {
        cli_error(c, rv, "namespace list");
        return 1;
    }
    print_list("namespaces", l, tern_namespace_list_count(l), namespace_fields,
               json);
    tern_namespace_list_free(l);
    return 0;
}

/* ---- user ---- */

int cli_user_hash(int argc, char **argv)
{
    char pw[CLI_PASSWORD_MAX];
    char text[TERN_CREDENTIAL_TEXT_MAX];
    int have = 0;
    int rv;
    for (int k = 2; k < argc; k++) {
        int got = password_opt(argc, argv, &k, pw, sizeof pw);
        if (got < 0) {
            return 1;
        }
        if (got == 0) {
            cli_usage(stderr);
            return 2;
        }
        have = 1;
    }
    if (!have) {
        (void)fprintf(stderr,
                      "tern: user hash: --password-file FILE or "
                      "--password-stdin\n");
        return 2;
    }
    rv = tern_credential_make(pw, 0, text, sizeof text);
    cli_wipe(pw, sizeof pw);
    if (rv != 0) {
        cli_error(NULL, rv,
                  "user hash (a password is printable ASCII, at most "
                  "1024 bytes)");
        return 1;
    }
    (void)printf("%s\n", text);
    return 0;
}

static int user_set(struct tern_client *c, int argc, char **argv)
{
    char pw[CLI_PASSWORD_MAX];
    uint32_t flags = 0;
    int have = 0;
    int none = 0;
    int rv;
    if (argc < 3 || argv[2][0] == '-') {
        cli_usage(stderr);
        return 2;
    }
    for (int k = 3; k < argc; k++) {
        int got;
        if (strcmp(argv[k], "--admin") == 0) {
            flags |= TERN_USER_ADMIN;
            continue;
        }
        if (strcmp(argv[k], "--cert") == 0) {
            flags |= TERN_USER_CERT;
            continue;
        }
        if (strcmp(argv[k], "--no-password") == 0) {
            none = 1;
            continue;
        }
        got = have ? 0 : password_opt(argc, argv, &k, pw, sizeof pw);
        if (got < 0) {
            return 1;
        }
        if (got == 0) {
            cli_usage(stderr);
            return 2;
        }
        have = 1;
    }
    if (have == none) {
        (void)fprintf(stderr,
                      "tern: user set: one of --password-file FILE, "
                      "--password-stdin, --no-password\n");
        cli_wipe(pw, sizeof pw);
        return 2;
    }
    rv = tern_user_set(c, argv[2], have ? pw : NULL, flags);
    cli_wipe(pw, sizeof pw);
    if (rv != 0) {
        cli_error(c, rv, "user set %s", argv[2]);
        return 1;
    }
    return 0;
}

int cli_user(struct tern_client *c, int argc, char **argv)
{
    int rv;
    if (argc < 2) {
        cli_usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "set") == 0) {
        return user_set(c, argc, argv);
    }
    if (strcmp(argv[1], "delete") == 0 && argc == 3) {
        rv = tern_user_delete(c, argv[2]);
        if (rv != 0) {
            cli_error(c, rv, "user delete %s", argv[2]);
            return 1;
        }
        return 0;
    }
    if (strcmp(argv[1], "list") == 0 &&
        (argc == 2 || (argc == 3 && strcmp(argv[2], "--json") == 0))) {
        return user_list(c, argc == 3);
    }
    cli_usage(stderr);
    return 2;
}

/* ---- acl ---- */

int cli_acl(struct tern_client *c, int argc, char **argv)
{
    uint32_t perms;
    int rv;
    if (argc >= 2 && strcmp(argv[1], "set") == 0 && argc == 6) {
        if (cli_parse_perms(argv[5], &perms) != 0) {
            return 2;
        }
        rv = tern_acl_set(c, argv[2], argv[3], argv[4], perms);
        if (rv != 0) {
            cli_error(c, rv, "acl set %s %s %s", argv[2], argv[3], argv[4]);
            return 1;
        }
        return 0;
    }
    if (argc >= 2 && strcmp(argv[1], "delete") == 0 && argc == 5) {
        rv = tern_acl_delete(c, argv[2], argv[3], argv[4]);
        if (rv != 0) {
            cli_error(c, rv, "acl delete %s %s %s", argv[2], argv[3], argv[4]);
            return 1;
        }
        return 0;
    }
    if (argc >= 2 && strcmp(argv[1], "list") == 0) {
        const char *user = NULL;
        int json = 0;
        for (int k = 2; k < argc; k++) {
            if (strcmp(argv[k], "--json") == 0) {
                json = 1;
            } else if (user == NULL && argv[k][0] != '-') {
                user = argv[k];
            } else {
                cli_usage(stderr);
                return 2;
            }
        }
        return acl_list(c, user, json);
    }
    cli_usage(stderr);
    return 2;
}

/* ---- namespace ---- */

static int namespace_set(struct tern_client *c, int argc, char **argv)
{
    uint64_t q = 0, b = 0, r = 0;
    int rv;
    if (argc < 3 || argv[2][0] == '-') {
        cli_usage(stderr);
        return 2;
    }
    /* Options come in pairs: each step consumes an option and its value. */
    for (int k = 3; k < argc; k += 2) {
        uint64_t *dst;
        if (strcmp(argv[k], "--max-queues") == 0) {
            dst = &q;
        } else if (strcmp(argv[k], "--max-bytes") == 0) {
            dst = &b;
        } else if (strcmp(argv[k], "--produce-rate") == 0) {
            dst = &r;
        } else {
            cli_usage(stderr);
            return 2;
        }
        if (k + 1 >= argc || cli_parse_u64(argv[k], argv[k + 1], dst) != 0) {
            return 2;
        }
    }
    rv = tern_namespace_set(c, argv[2], q, b, r);
    if (rv != 0) {
        cli_error(c, rv, "namespace set %s", argv[2]);
        return 1;
    }
    return 0;
}

int cli_namespace(struct tern_client *c, int argc, char **argv)
{
    int rv;
    if (argc >= 2 && strcmp(argv[1], "set") == 0) {
        return namespace_set(c, argc, argv);
    }
    if (argc == 3 && strcmp(argv[1], "delete") == 0) {
        rv = tern_namespace_delete(c, argv[2]);
        if (rv != 0) {
            cli_error(c, rv, "namespace delete %s", argv[2]);
            return 1;
        }
        return 0;
    }
    if (argc >= 2 && strcmp(argv[1], "list") == 0 &&
        (argc == 2 || (argc == 3 && strcmp(argv[2], "--json") == 0))) {
        return namespace_list(c, argc == 3);
    }
    cli_usage(stderr);
    return 2;
}

/* ---- admin backup ---- */

/* tern admin backup [--node HOST:PORT] [--verify] [--any-state]
 * [--wait-ms N] DIR: DIR is on the node's host; --any-state: do not wait
 * for what the leader acknowledged (tern_admin_backup). Prints "backup
 * DIR on SERVER: cluster C node N term T last_applied A log [S, E) files
 * F bytes B" ("verified on" with --verify). */
int cli_admin(struct tern_client *c, int argc, char **argv)
{
    struct tern_backup_info info;
    const char *node = NULL, *dir = NULL;
    uint32_t flags = 0;
    uint64_t wait_ms = 600000;
    int rv;
    if (argc < 3 || strcmp(argv[1], "backup") != 0) {
        cli_usage(stderr);
        return 2;
    }
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--node") == 0 && i + 1 < argc) {
            node = argv[++i];
        } else if (strcmp(argv[i], "--verify") == 0) {
            flags |= TERN_BACKUP_VERIFY;
        } else if (strcmp(argv[i], "--any-state") == 0) {
            flags |= TERN_BACKUP_ANY_STATE;
        } else if (strcmp(argv[i], "--wait-ms") == 0 && i + 1 < argc) {
            if (cli_parse_u64("--wait-ms", argv[++i], &wait_ms) != 0 ||
                wait_ms > UINT32_MAX) {
                return 2;
            }
        } else if (argv[i][0] != '-' && dir == NULL) {
            dir = argv[i];
        } else {
            (void)fprintf(stderr, "tern admin backup: unexpected '%s'\n",
                          argv[i]);
            cli_usage(stderr);
            return 2;
        }
    }
    if (dir == NULL) {
        cli_usage(stderr);
        return 2;
    }
    rv = tern_admin_backup(c, node, dir, flags, (uint32_t)wait_ms, &info);
    if (rv != 0) {
        cli_error(c, rv, "admin backup %s%s", dir,
                  (flags & TERN_BACKUP_VERIFY) != 0 ? " --verify" : "");
        return 1;
    }
    (void)printf(
        "backup %s %s %s: cluster %s node %llu term %llu "
        "last_applied %llu log [%llu, %llu) files %u bytes %llu\n",
        dir, (flags & TERN_BACKUP_VERIFY) != 0 ? "verified on" : "on",
        info.server, info.cluster, (unsigned long long)info.node_id,
        (unsigned long long)info.term, (unsigned long long)info.last_applied,
        (unsigned long long)info.log_start, (unsigned long long)info.log_end,
        info.n_files, (unsigned long long)info.total_bytes);
    return 0;
}
