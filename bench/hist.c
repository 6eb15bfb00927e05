
/*
 * The latency histogram: HdrHistogram's layout with two significant
 * digits, in nanoseconds.
 *
 * Values below 256 ns get a counter each; above, every power of two
 * [2^k, 2^(k+1)) is cut into 128 equal sub-buckets, so a counter stands for
 * a range 1/128 of its values wide: each value is known to within 0.8%,
 * from 1 us (exact to the ns there) to 137 s, in 3,968 counters (31 KiB).
 * Recording is a count-leading-zeros, a shift and an increment: cheap
 * enough for every delivered message, with no allocation and no sorting.
 *
 * A percentile is the highest value of the counter where the cumulative
 * count reaches the rank (HdrHistogram's "highest equivalent value"), so a
 * reported figure never understates; max is kept exactly beside it.
 */

#include <string.h>

#include "ioa_bench.h"


static size_t
ib_hist_index(uint64_t v)
{
    unsigned  pos, bucket;

    pos = 63 - (unsigned) __builtin_clzll(v | (2 * IB_HIST_SUB - 1));
    bucket = pos - IB_HIST_SUB_BITS;

    return (size_t) bucket * IB_HIST_SUB + (size_t) (v >> bucket);
}


static uint64_t
ib_hist_highest(size_t idx)
{
    unsigned  bucket;
    uint64_t  sub;

    if (idx < 2 * IB_HIST_SUB) {
        return idx;
    }

    bucket = (unsigned) (idx / IB_HIST_SUB) - 1;
    sub = idx - (uint64_t) bucket * IB_HIST_SUB;

    return (sub << bucket) + (1ULL << bucket) - 1;
}


void
ib_hist_reset(ib_hist_t *h)
{
    memset(h, 0, sizeof(ib_hist_t));
}


void
ib_hist_record(ib_hist_t *h, uint64_t v)
{
    if (h->total == 0 || v < h->min) {
        h->min = v;
    }

    if (v > h->max) {
        h->max = v;
    }

    if (v > IB_HIST_MAX) {
        v = IB_HIST_MAX;
        h->clamped++;
    }

    h->counts[ib_hist_index(v)]++;
    h->total++;
}


uint64_t
ib_hist_percentile(const ib_hist_t *h, double pct)
{
    size_t    i;
    uint64_t  rank, seen, v;

    if (h->total == 0) {
        return 0;
    }

    if (pct >= 100.0) {
        return h->max;
    }

    rank = (uint64_t) (pct / 100.0 * (double) h->total + 0.999999);

    if (rank == 0) {
        rank = 1;
    }

    seen = 0;

    for (i = 0; i < IB_HIST_LEN; i++) {
        seen += h->counts[i];

        if (seen >= rank) {
            v = ib_hist_highest(i);
            return v < h->max ? v : h->max;
        }
    }

    return h->max;
}
