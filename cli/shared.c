/*
 * `tern consume QUEUE --group G --shared` and `tern group config`: shared
 * group consumption (docs/WORKQUEUES.md) through tern_receive and
 * tern_settle. Each received message is printed as "offset<TAB>count<TAB>
 * payload id" (the payload up to its first '.'); with --ack the batch is
 * acknowledged after it is printed.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

#define CLI__RECEIVE_MAX  256u
#define CLI__RECEIVE_WAIT 1000u

static int retryable(int rv)
{
    return rv != TERN_ENOQUEUE && rv != TERN_EBADNAME && rv != TERN_EINVAL &&
           rv != TERN_ENOTFOUND && rv != TERN_EDENIED && rv != -ENOMEM;
}

/* Acknowledge every message of r (one SETTLE). */
static int ack_all(struct tern_client *c,
                   const char *queue,
                   const char *group,
                   const struct tern_fetch_result *r)
{
    size_t n = tern_fetch_result_count(r);
    struct tern_settle_item *items;
    int rv;
    if (n == 0) {
        return 0;
    }
    items = calloc(n, sizeof(*items));
    if (items == NULL) {
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        (void)tern_fetch_result_receipt(r, i, &items[i].receipt);
        items[i].action = TERN_SETTLE_ACK;
    }
    rv = tern_settle(c, queue, group, items, n);
    free(items);
    return rv;
}

int cli_shared_consume(struct tern_client *c,
                       const char *queue,
                       const char *group,
                       int ack,
                       uint64_t max,
                       int follow,
                       uint64_t idle_ms)
{
    uint64_t printed = 0;
    int64_t last_msg_us = cli_now_us();
    while (max == 0 || printed < max) {
        struct tern_fetch_result *r = NULL;
        uint32_t want = CLI__RECEIVE_MAX;
        uint32_t wait_ms = follow ? CLI__RECEIVE_WAIT : 0;
        int rv;
        if (max != 0 && max - printed < want) {
            want = (uint32_t)(max - printed);
        }
        if (follow && idle_ms > 0) {
            int64_t left =
                (int64_t)idle_ms - (cli_now_us() - last_msg_us) / 1000;
            if (left <= 0) {
                break;
            }
            wait_ms = (uint32_t)(left < wait_ms ? left : wait_ms);
        }
        rv = tern_receive(c, queue, group, want, wait_ms, &r);
        if (rv != 0) {
            if (follow && retryable(rv)) {
                struct timespec ts = {0, 100000000L};
                (void)nanosleep(&ts, NULL);
                continue;
            }
            cli_error(c, rv, "receive %s/%s", queue, group);
            return 1;
        }
        size_t n = tern_fetch_result_count(r);
        for (size_t i = 0; i < n; i++) {
            struct tern_receipt rc;
            const void *data;
            size_t len;
            (void)tern_fetch_result_get(r, i, NULL, NULL, &data, &len);
            (void)tern_fetch_result_receipt(r, i, &rc);
            /* "<offset>\t<count>\t<payload>": the delivery count in the
             * stream consume's text line. */
            (void)printf("%" PRIu64 "\t%" PRIu32 "\t", rc.offset, rc.count);
            cli_print_payload(stdout, data, len);
        }
        (void)fflush(stdout);
        printed += n;
        if (n > 0) {
            last_msg_us = cli_now_us();
        }
        if (ack && n > 0) {
            /* Following, a retryable failure is tried again a few times,
             * then passed over with a warning (it does not make the exit
             * status): the messages come again, released when the
             * connection closed or at their ack timeout. */
            rv = ack_all(c, queue, group, r);
            for (int t = 0; rv != 0 && follow && retryable(rv) && t < 3; t++) {
                struct timespec ts = {0, 100000000L};
                (void)nanosleep(&ts, NULL);
                rv = ack_all(c, queue, group, r);
            }
            if (rv != 0 && follow && retryable(rv)) {
                (void)fprintf(stderr,
                              "tern: warning: ack %s/%s: %s (%s); those "
                              "messages come again\n",
                              queue, group, tern_strerror(rv),
                              tern_client_errmsg(c));
            } else if (rv != 0) {
                cli_error(c, rv, "ack %s/%s", queue, group);
                tern_fetch_result_free(r);
                return 1;
            }
        }
        tern_fetch_result_free(r);
        if (!follow && n == 0) {
            break;
        }
    }
    return 0;
}

/* tern group config QUEUE GROUP --shared [--ack-timeout D]
 * [--max-deliveries N] [--dlq NAME] */
int cli_group(struct tern_client *c, int argc, char **argv)
{
    static const struct option opts[] = {
        {"shared", no_argument, NULL, 's'},
        {"ack-timeout", required_argument, NULL, 'a'},
        {"max-deliveries", required_argument, NULL, 'm'},
        {"dlq", required_argument, NULL, 'd'},
        {NULL, 0, NULL, 0},
    };
    struct tern_shared_options o = {0};
    uint64_t v;
    int shared = 0, ch, rv;
    if (argc < 2 || strcmp(argv[1], "config") != 0) {
        (void)fprintf(stderr,
                      "tern: group config QUEUE GROUP --shared "
                      "[--ack-timeout D] [--max-deliveries N] "
                      "[--dlq NAME]\n");
        return 2;
    }
    argc--;
    argv++;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (ch) {
        case 's':
            shared = 1;
            break;
        case 'a':
            if (cli_parse_duration_ms(optarg, &v) != 0 || v == 0) {
                (void)fprintf(stderr,
                              "tern: --ack-timeout: bad duration "
                              "\"%s\" (such as 30s)\n",
                              optarg);
                return 2;
            }
            o.ack_timeout_ms = v;
            break;
        case 'm':
            if (cli_parse_u64("--max-deliveries", optarg, &v) != 0 || v == 0 ||
                v > UINT32_MAX) {
                return 2;
            }
            o.max_deliveries = (uint32_t)v;
            break;
        case 'd':
            o.dlq = optarg;
            break;
        default:
            return 2;
        }
    }
    if (!shared || optind + 2 != argc) {
        (void)fprintf(stderr, "tern: group config QUEUE GROUP --shared ...\n");
        return 2;
    }
    rv = tern_shared_config(c, argv[optind], argv[optind + 1], &o);
    if (rv != 0) {
        cli_error(c, rv, "group config %s/%s", argv[optind], argv[optind + 1]);
        return 1;
    }
    return 0;
}
