/*
 * `tern consume QUEUE --group G --exclusive [--lease 30s] [--wait D]
 * [--follow]`: the single active consumer of a stream group
 * (docs/WORKQUEUES.md). It claims the group (tern_group_claim); while
 * another consumer holds it, it prints one line "waiting: group G held by
 * consumer X until T" and claims again every lease / 3 (at most --wait
 * long when given). Holding it, it renews the claim every lease / 3
 * (before a fetch, when due), fetches from the group's offset, prints
 * "offset<TAB>payload id" per message and commits after each batch. A
 * batch that arrives when a renewal is due is printed only after the
 * renewal, and only if the claim had no gap (else it is fetched again). A
 * fetch or commit refused with TERN_ECLAIMED (the claim lapsed, or a new
 * connection after a leader change) claims again first. At exit the
 * claim is released.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

#define CLI__EXCL_FETCH_MAX   1000u
#define CLI__EXCL_FETCH_BYTES (4u << 20)

static void sleep_ms(uint64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    (void)nanosleep(&ts, NULL);
}

static int64_t now_ms(void)
{
    return cli_now_us() / 1000;
}

static int fatal(int rv)
{
    return rv == TERN_ENOQUEUE || rv == TERN_EBADNAME || rv == TERN_EINVAL ||
           rv == TERN_EDENIED || rv == TERN_EOFFSET || rv == -ENOMEM;
}

/* Claim until granted: 0 (*sent: this clock's time just before the
 * granted request was sent), 1 when wait_ms passed first, or -1 after a
 * fatal error (printed). */
static int claim_wait(struct tern_client *c,
                      const char *queue,
                      const char *group,
                      uint64_t lease_ms,
                      uint64_t wait_ms,
                      int *said,
                      int64_t *sent)
{
    int64_t start = now_ms();
    for (;;) {
        int granted = 0;
        uint64_t holder = 0, until = 0;
        int64_t at = now_ms();
        int rv = tern_group_claim(c, queue, group, (uint32_t)lease_ms, &granted,
                                  &holder, &until);
        if (rv == 0 && granted) {
            *sent = at;
            return 0;
        }
        if (rv != 0 && fatal(rv)) {
            cli_error(c, rv, "claim %s/%s", queue, group);
            return -1;
        }
        if (rv == 0 && !*said) {
            (void)printf("waiting: group %s held by consumer %" PRIu64
                         " until %" PRIu64 "\n",
                         group, holder, until);
            (void)fflush(stdout);
            *said = 1;
        }
        if (wait_ms > 0 && (uint64_t)(now_ms() - start) >= wait_ms) {
            return 1;
        }
        sleep_ms(rv == 0 ? lease_ms / 3 : 100);
    }
}

int cli_exclusive_consume(struct tern_client *c,
                          const char *queue,
                          const char *group,
                          uint64_t lease_ms,
                          uint64_t wait_ms,
                          uint64_t max,
                          int follow)
{
    uint64_t printed = 0;
    int said = 0, code = 0;
    int64_t renewed = 0;
    int rv = claim_wait(c, queue, group, lease_ms, wait_ms, &said, &renewed);
    if (rv != 0) {
        if (rv == 1) {
            (void)fprintf(stderr, "tern: group %s: not granted within --wait\n",
                          group);
        }
        return 1;
    }
    while (max == 0 || printed < max) {
        struct tern_fetch_result *r = NULL;
        uint32_t want = CLI__EXCL_FETCH_MAX;
        uint64_t third = lease_ms / 3;
        if (max != 0 && max - printed < want) {
            want = (uint32_t)(max - printed);
        }
        if ((uint64_t)(now_ms() - renewed) >= third) {
            said = 0;
            rv = claim_wait(c, queue, group, lease_ms, 0, &said, &renewed);
            if (rv != 0) {
                code = 1;
                break;
            }
        }
        /* A long poll no longer than the renewal period. */
        uint32_t wait = follow ? (uint32_t)(third < 1000 ? third : 1000) : 0;
        struct tern_fetch_options fo = {want, CLI__EXCL_FETCH_BYTES, wait, NULL,
                                        0};
        rv = tern_group_fetch_ex(c, queue, group, &fo, &r);
        if (rv == TERN_ECLAIMED) {
            renewed = 0; /* claim again before the next fetch */
            continue;
        }
        if (rv != 0) {
            if (follow && !fatal(rv)) {
                sleep_ms(100);
                continue;
            }
            cli_error(c, rv, "consume %s", queue);
            code = 1;
            break;
        }
        size_t n = tern_fetch_result_count(r);
        if (n > 0 && (uint64_t)(now_ms() - renewed) >= third) {
            /* The answer may have waited (a long poll, or this process
             * stopped): print it only under a claim held without a gap.
             * The claim of `renewed` lasts at least lease_ms of this
             * clock from it; a renewal granted before that ends is the
             * same tenure, one granted later may follow another holder,
             * who may have consumed the batch: fetch again. */
            int64_t prev = renewed;
            said = 0;
            rv = claim_wait(c, queue, group, lease_ms, 0, &said, &renewed);
            if (rv != 0) {
                tern_fetch_result_free(r);
                code = 1;
                break;
            }
            if ((uint64_t)(now_ms() - prev) >= lease_ms) {
                tern_fetch_result_free(r);
                continue;
            }
        }
        for (size_t i = 0; i < n; i++) {
            uint64_t off;
            const void *data;
            size_t len;
            (void)tern_fetch_result_get(r, i, &off, NULL, &data, &len);
            (void)printf("%" PRIu64 "\t", off);
            cli_print_payload(stdout, data, len);
        }
        (void)fflush(stdout);
        printed += n;
        uint64_t next = tern_fetch_result_next_offset(r);
        uint64_t end = tern_fetch_result_end_offset(r);
        tern_fetch_result_free(r);
        if (n > 0) {
            rv = tern_group_commit(c, queue, group, next);
            for (int k = 0; rv != 0 && k < 50 && !fatal(rv); k++) {
                /* Refused by a claim (a new connection) or an election:
                 * claim again, then commit again. */
                said = 0;
                if (claim_wait(c, queue, group, lease_ms, 0, &said, &renewed) !=
                    0) {
                    break;
                }
                rv = tern_group_commit(c, queue, group, next);
            }
            if (rv != 0) {
                cli_error(c, rv, "commit %s/%s", queue, group);
                code = 1;
                break;
            }
        }
        if (!follow && (n == 0 || next >= end)) {
            break;
        }
    }
    rv = tern_group_release(c, queue, group);
    if (rv != 0 && code == 0) {
        cli_error(c, rv, "release %s/%s", queue, group);
    }
    return code;
}
