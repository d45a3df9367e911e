/*
 * The latency histogram of `tern bench`: log2 buckets of microseconds
 * (bucket 0 holds values below 1 us, bucket k >= 1 the values in
 * [2^(k-1), 2^k) us), drawn as a text bar chart with each bucket's count
 * and the percentiles p50/p90/p99/p99.9/max, or as a self-contained SVG
 * document (no dependency: the elements are written by hand). Input is the
 * sorted array of samples the bench collected (caller-owned, borrowed for
 * the call); percentiles are nearest-rank on it.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

/* Width of the longest text bar, in characters. */
#define CLI__BAR_WIDTH 40

static int bucket_of(int64_t us)
{
    int k = 0;
    while (us > 0 && k < CLI_HIST_BUCKETS - 1) {
        us >>= 1;
        k++;
    }
    return k;
}

/* Lower and upper bound of bucket k, in us. */
static int64_t bucket_lo(int k)
{
    return k == 0 ? 0 : (int64_t)1 << (k - 1);
}

static int64_t bucket_hi(int k)
{
    return (int64_t)1 << k;
}

int64_t cli_hist_pct(const int64_t *sorted, size_t n, double p)
{
    size_t i;
    if (n == 0) {
        return 0;
    }
    i = (size_t)(p * (double)(n - 1) + 0.5);
    return sorted[i < n ? i : n - 1];
}

void cli_hist_fill(struct cli_hist *h, const int64_t *sorted, size_t n)
{
    memset(h, 0, sizeof *h);
    h->lo = CLI_HIST_BUCKETS;
    h->hi = -1;
    for (size_t i = 0; i < n; i++) {
        int k = bucket_of(sorted[i]);
        h->count[k]++;
        h->lo = k < h->lo ? k : h->lo;
        h->hi = k > h->hi ? k : h->hi;
    }
    for (int k = 0; k < CLI_HIST_BUCKETS; k++) {
        h->peak = h->count[k] > h->peak ? h->count[k] : h->peak;
    }
    h->n = n;
    h->p50 = cli_hist_pct(sorted, n, 0.50);
    h->p90 = cli_hist_pct(sorted, n, 0.90);
    h->p99 = cli_hist_pct(sorted, n, 0.99);
    h->p999 = cli_hist_pct(sorted, n, 0.999);
    h->max = n > 0 ? sorted[n - 1] : 0;
}

void cli_hist_print(FILE *f, const struct cli_hist *h, const char *title)
{
    (void)fprintf(f, "  %s histogram (us, log2 buckets, %zu samples):\n", title,
                  h->n);
    for (int k = h->lo; k <= h->hi; k++) {
        int w =
            h->peak > 0
                ? (int)((h->count[k] * CLI__BAR_WIDTH + h->peak - 1) / h->peak)
                : 0;
        char bar[CLI__BAR_WIDTH + 1];
        memset(bar, '#', (size_t)w);
        bar[w] = '\0';
        (void)fprintf(f, "  %9" PRId64 " .. %-9" PRId64 " |%-*s %" PRIu64 "\n",
                      bucket_lo(k), bucket_hi(k), CLI__BAR_WIDTH, bar,
                      h->count[k]);
    }
    (void)fprintf(f,
                  "  p50 %" PRId64 " us  p90 %" PRId64 " us  p99 %" PRId64
                  " us  p999 %" PRId64 " us  max %" PRId64 " us\n",
                  h->p50, h->p90, h->p99, h->p999, h->max);
}

int cli_hist_svg(FILE *f, const struct cli_hist *h, const char *title)
{
    const int bw = 36, gap = 6, left = 60, top = 40, ph = 240;
    int nb = h->hi >= h->lo ? h->hi - h->lo + 1 : 0;
    int width = left + nb * (bw + gap) + 40;
    int height = top + ph + 90;
    (void)fprintf(f,
                  "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                  "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" "
                  "height=\"%d\" font-family=\"monospace\" "
                  "font-size=\"11\">\n"
                  "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
                  "<text x=\"%d\" y=\"20\" font-size=\"14\">",
                  width < 420 ? 420 : width, height, left);
    for (const char *t = title; *t != '\0'; t++) {
        if (*t == '<') {
            (void)fputs("&lt;", f);
        } else if (*t == '&') {
            (void)fputs("&amp;", f);
        } else if (*t == '>') {
            (void)fputs("&gt;", f);
        } else {
            (void)fputc(*t, f);
        }
    }
    (void)fprintf(f, " (us, log2 buckets, %zu samples)</text>\n", h->n);
    (void)fprintf(f,
                  "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" "
                  "stroke=\"black\"/>\n",
                  left - 4, top + ph, left + nb * (bw + gap), top + ph);
    for (int k = h->lo; k <= h->hi; k++) {
        int x = left + (k - h->lo) * (bw + gap);
        int bh = h->peak > 0 ? (int)(h->count[k] * (uint64_t)ph / h->peak) : 0;
        (void)fprintf(f,
                      "<rect class=\"bar\" x=\"%d\" y=\"%d\" width=\"%d\" "
                      "height=\"%d\" fill=\"steelblue\"><title>%" PRId64
                      "..%" PRId64 " us: %" PRIu64 "</title></rect>\n",
                      x, top + ph - bh, bw, bh, bucket_lo(k), bucket_hi(k),
                      h->count[k]);
        (void)fprintf(f,
                      "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">%" PRIu64
                      "</text>\n",
                      x + bw / 2, top + ph - bh - 3, h->count[k]);
        (void)fprintf(f,
                      "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">%" PRId64
                      "</text>\n",
                      x + bw / 2, top + ph + 14, bucket_hi(k));
    }
    (void)fprintf(f,
                  "<text x=\"%d\" y=\"%d\">upper bound of each bucket, "
                  "us</text>\n"
                  "<text x=\"%d\" y=\"%d\">p50 %" PRId64 " us  p90 %" PRId64
                  " us  p99 %" PRId64 " us  p999 %" PRId64 " us  max %" PRId64
                  " us</text>\n</svg>\n",
                  left, top + ph + 32, left, top + ph + 56, h->p50, h->p90,
                  h->p99, h->p999, h->max);
    return ferror(f) ? -1 : 0;
}
