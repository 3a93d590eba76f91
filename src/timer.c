/* src/timer.c — the timer: one launch sampled between device events with
 * the L2 flushed and the outputs poisoned outside the window, arms
 * interleaved, medians with their spread, the SM clock per sample; the rounds
 * of compare and noise.  Relies on gpu.c, compile.c (arms), run.c and util.c
 * (the watchdog's hooks). */

/* What the timer knows of one launch of one arm (README "The timer": median,
 * spread, n, the SM clock per sample, throttled samples flagged). */
struct timing {
    int n;                        /* samples kept (throttled ones are not) */
    int throttled;                /* samples taken below 75% of the device's SM clock, dropped */
    int clock_n;                  /* samples with an SM clock reading */
    double median_us, min_us, max_us, q1_us, q3_us;
    double rse;                   /* relative standard error of the median */
    double clock_mhz, clock_min_mhz; /* median and lowest SM clock over the samples */
};

#define TIMER_MAX_SAMPLES 2000
#define TIMER_MIN_SAMPLES_GPU 20
#define TIMER_MIN_SAMPLES_CPU 3
#define TIMER_RSE_GPU 0.002       /* stop once the median is known to 0.2%... */
#define TIMER_RSE_CPU 0.01        /* (CPU: or once 0.25 s of candidate time is sampled) */
#define TIMER_CPU_ENOUGH_MS 250.0
#define TIMER_CAP_S 3.0           /* ...or this much wall time has passed (n >= 3; CPU n >= 1) */
#define TIMER_HARD_CAP_S 20.0     /* ...or this much, whatever n */
#define TIMER_WARMUP_S 0.05       /* GPU warm-up by time, before the first sample */
#define TIMER_THROTTLED 0.75      /* a sample below this fraction of the device's clock */
#define TIMER_MAX_ARMS 3

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of n sorted values. */
static double sorted_median(const double *x, int n)
{
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

/* The relative standard error of the median of n sorted samples, without
 * assuming a distribution: half the width of the order statistics that
 * bracket the median with 95% confidence (ranks n/2 -+ 0.98 sqrt(n)),
 * divided by 1.96 and by the median.  1 (unknown) below 3 samples. */
static double median_rse(const double *x, int n)
{
    if (n < 3) return 1;
    double h = 0.98 * sqrt((double)n);
    int lo = (int)floor(n / 2.0 - h), hi = (int)ceil(n / 2.0 + h);
    if (lo < 0) lo = 0;
    if (hi > n - 1) hi = n - 1;
    double med = sorted_median(x, n);
    return med > 0 ? (x[hi] - x[lo]) / (2 * 1.96) / med : 1;
}

/* The clock probe kg_clock of the current arm, or NULL when its code object
 * has none (it is optional in a --kernels file). */
static void *clock_probe(struct device *d)
{
    void *fn = NULL;
    if (d->kind == DEV_CPU || d->rt.module_fn(&fn, d->module, "kg_clock") != 0) return NULL;
    return fn;
}

/* One sample of launch o: L2 flushed and its outputs poisoned (both queued
 * before the start event, so outside the timed window), then the launch
 * (run_exec: a graph's replay on the graph path) between two device events
 * (GPU) or two clock reads (CPU).  On the GPU the
 * clock probe `probe` (if any) then writes the SM clock into
 * d->clock_buf[2*slot], after the stop event.  Milliseconds. */
static double time_one(struct run *r, int o, unsigned char flush_byte, void *probe, int slot)
{
    struct device *d = r->d;
    dev_fill(d, d->flush, flush_byte, d->flush_bytes);
    run_poison(r, o);
    const struct inject *slow = run_inject(r, INJ_TIMED);   /* the timer's faults (--inject) */
    if (!slow) slow = run_inject(r, INJ_TIMED_INPUT);
    struct inject_ctx ix = { .r = r, .oi = o };
    if (d->kind == DEV_CPU) {
        double t0 = now_s();
        watch_launch();
        run_exec(r, o, r->c->op->launch, o);
        if (slow) slow->apply(&ix);
        watch_done();
        return (now_s() - t0) * 1e3;
    }
    float ms = 0;
    gpu_check(d, d->rt.event_record(d->ev[0], d->stream), "recording a timer event");
    run_exec(r, o, r->c->op->launch, o);
    if (slow) slow->apply(&ix);
    gpu_check(d, d->rt.event_record(d->ev[1], d->stream), "recording a timer event");
    if (probe && slot >= 0) {
        uint64_t at = d->clock_buf + (uint64_t)slot * 2 * sizeof(uint64_t);
        void *params[] = { &at };
        gpu_check(d, d->rt.launch(probe, 1, 1, 1, 32, 1, 1, 0, d->stream, params, NULL), "launching kg_clock");
    }
    gpu_check(d, d->rt.event_sync(d->ev[1]), "running the kernel (timer event)");
    watch_done();
    gpu_check(d, d->rt.event_elapsed(&ms, d->ev[0], d->ev[1]), "reading a timer event");
    return ms;
}

/* Events and the clock buffer, made on first use. */
static void timer_init(struct device *d)
{
    if (d->kind != DEV_GPU || d->ev[0]) return;
    for (int i = 0; i < 2; i++) gpu_check(d, d->rt.event_create(&d->ev[i], 0), "creating an event");
    d->clock_buf = dev_alloc(d, (size_t)TIMER_MAX_ARMS * TIMER_MAX_SAMPLES * 2 * sizeof(uint64_t));
}

/* The samples of one arm during one measurement. */
struct samples { double ms[TIMER_MAX_SAMPLES], mhz[TIMER_MAX_SAMPLES]; int n; void *probe; };

/* Summarise n samples into t: throttled samples (SM clock below
 * TIMER_THROTTLED of the device's) are counted and dropped, unless every
 * sample is throttled; then median, quartiles, min, max, RSE, clock. */
static void timing_summary(const struct device *d, const struct samples *s, struct timing *t)
{
    static double keep[TIMER_MAX_SAMPLES], clk[TIMER_MAX_SAMPLES];
    double floor_mhz = TIMER_THROTTLED * d->attr[AT_CLOCK_KHZ] / 1000.0;
    int n = 0, nc = 0;
    memset(t, 0, sizeof *t);
    for (int i = 0; i < s->n; i++) {
        if (s->mhz[i] > 0) clk[nc++] = s->mhz[i];
        if (s->mhz[i] > 0 && floor_mhz > 0 && s->mhz[i] < floor_mhz) t->throttled++;
        else keep[n++] = s->ms[i];
    }
    if (n == 0) {   /* all throttled: keep them, the count says so */
        for (int i = 0; i < s->n; i++) keep[i] = s->ms[i];
        n = s->n;
    }
    qsort(keep, (size_t)n, sizeof *keep, cmp_double);
    t->n = n;
    t->min_us = keep[0] * 1e3, t->max_us = keep[n - 1] * 1e3;
    t->median_us = sorted_median(keep, n) * 1e3;
    t->q1_us = keep[n / 4] * 1e3, t->q3_us = keep[(3 * n) / 4 < n ? (3 * n) / 4 : n - 1] * 1e3;
    t->rse = median_rse(keep, n);
    t->clock_n = nc;
    if (nc) {
        qsort(clk, (size_t)nc, sizeof *clk, cmp_double);
        t->clock_mhz = sorted_median(clk, nc), t->clock_min_mhz = clk[0];
    }
}

/* Whether every arm's median is known well enough to stop: at least the
 * minimum samples and an RSE of the median at most the target (on the CPU,
 * also enough once 0.25 s of candidate time is sampled).  Throttled samples
 * count here: the SM clock is read back only after sampling. */
static int timer_converged(const struct device *d, struct samples *s, int narms)
{
    static double tmp[TIMER_MAX_SAMPLES];
    int gpu = d->kind == DEV_GPU;
    for (int a = 0; a < narms; a++) {
        if (s[a].n < (gpu ? TIMER_MIN_SAMPLES_GPU : TIMER_MIN_SAMPLES_CPU)) return 0;
        double sum_ms = 0;
        for (int i = 0; i < s[a].n; i++) sum_ms += s[a].ms[i];
        if (!gpu && sum_ms >= TIMER_CPU_ENOUGH_MS) continue;   /* the CPU candidate's time is not the point */
        memcpy(tmp, s[a].ms, (size_t)s[a].n * sizeof *tmp);
        qsort(tmp, (size_t)s[a].n, sizeof *tmp, cmp_double);
        if (median_rse(tmp, s[a].n) > (gpu ? TIMER_RSE_GPU : TIMER_RSE_CPU)) return 0;
    }
    return 1;
}

/* Read back the SM clock of every sample (MHz = cycles / ns * 1000). */
static void timer_read_clocks(struct device *d, struct samples *s, int narms)
{
    if (d->kind != DEV_GPU) return;
    static uint64_t buf[TIMER_MAX_ARMS * TIMER_MAX_SAMPLES * 2];
    dev_download(d, buf, d->clock_buf, sizeof buf);
    for (int a = 0; a < narms; a++)
        for (int i = 0; i < s[a].n; i++) {
            const uint64_t *c = &buf[((size_t)a * TIMER_MAX_SAMPLES + (size_t)i) * 2];
            s[a].mhz[i] = s[a].probe && c[1] ? 1e3 * (double)c[0] / (double)c[1] : 0;
        }
}

/* Time launch o of each of the narms arms, interleaved (arm `first`, then
 * the next, ... A B A B ...), after a warm-up by time: samples until every
 * arm's median is known to the target RSE, or the wall-time cap is hit.
 * t[a] gets arm a's summary; --inject's fault goes into arm inj_arm's
 * launches (-1: none).  The outputs are left holding the last timed
 * launch's result, of the last arm timed. */
static void time_arms(struct run *r, int o, struct arm **arms, int narms, int first, int inj_arm, struct timing *t)
{
    struct device *d = r->d;
    static struct samples s[TIMER_MAX_ARMS];
    timer_init(d);
    double start = now_s();
    for (int a = 0; a < narms; a++) {
        s[a].n = 0;
        arm_use(d, arms[a]);
        s[a].probe = clock_probe(d);
    }
    if (d->kind == DEV_GPU)
        for (int i = 0; i < 2 || now_s() - start < TIMER_WARMUP_S; i++) {
            arm_use(d, arms[i % narms]);
            r->inject_off = i % narms != inj_arm;
            time_one(r, o, 0, NULL, -1);
        }
    int cap_n = d->kind == DEV_GPU ? 3 : 1;   /* the CPU candidate's time is not the point */
    start = now_s();
    for (int i = 0; s[0].n < TIMER_MAX_SAMPLES; i++) {
        for (int j = 0; j < narms; j++) {
            int a = (first + j) % narms;
            arm_use(d, arms[a]);
            r->inject_off = a != inj_arm;
            int slot = a * TIMER_MAX_SAMPLES + s[a].n;
            s[a].ms[s[a].n] = time_one(r, o, (unsigned char)(i + 1), s[a].probe, slot);
            s[a].n++;
        }
        double wall = now_s() - start;
        if ((i % 4 == 3 && timer_converged(d, s, narms)) || (s[0].n >= cap_n && wall >= TIMER_CAP_S) ||
            wall >= TIMER_HARD_CAP_S)
            break;
    }
    timer_read_clocks(d, s, narms);
    for (int a = 0; a < narms; a++) timing_summary(d, &s[a], &t[a]);
}

/* One measurement of several arms as rounds merge into one summary per arm:
 * the median of the round medians (and of the round quartiles), the lowest
 * min, the highest max, the samples summed, the largest round RSE. */
static void timing_merge(const struct timing *rounds, int nr, struct timing *t)
{
    double med[100], q1[100], q3[100], clk[100];
    memset(t, 0, sizeof *t);
    t->min_us = INFINITY, t->clock_min_mhz = INFINITY;
    int nc = 0;
    for (int i = 0; i < nr; i++) {
        med[i] = rounds[i].median_us, q1[i] = rounds[i].q1_us, q3[i] = rounds[i].q3_us;
        t->n += rounds[i].n, t->throttled += rounds[i].throttled, t->clock_n += rounds[i].clock_n;
        t->min_us = fmin(t->min_us, rounds[i].min_us), t->max_us = fmax(t->max_us, rounds[i].max_us);
        if (rounds[i].clock_n) clk[nc++] = rounds[i].clock_mhz, t->clock_min_mhz = fmin(t->clock_min_mhz, rounds[i].clock_min_mhz);
    }
    qsort(med, (size_t)nr, sizeof *med, cmp_double);
    qsort(q1, (size_t)nr, sizeof *q1, cmp_double);
    qsort(q3, (size_t)nr, sizeof *q3, cmp_double);
    t->median_us = sorted_median(med, nr), t->q1_us = sorted_median(q1, nr), t->q3_us = sorted_median(q3, nr);
    for (int i = 0; i < nr; i++) t->rse = fmax(t->rse, rounds[i].rse);   /* every round's median is this good */
    if (nc) qsort(clk, (size_t)nc, sizeof *clk, cmp_double), t->clock_mhz = sorted_median(clk, nc);
    else t->clock_min_mhz = 0;
}

/* --- rounds: compare and noise --- */

#define MAX_ROUNDS 100

/* What compare and noise measure: per round, the candidate's and the A/A
 * copy's time over the reference's (arm 0); the band is the A/A half-width,
 * max |copy / reference - 1| over the rounds. */
struct rounds {
    int n;                        /* rounds */
    int cand, copy;               /* arm indexes; -1: none */
    double ratio[MAX_ROUNDS], aa[MAX_ROUNDS];
    double ratio_med, ratio_lo, ratio_hi, aa_med, aa_lo, aa_hi;
    double band;                  /* < 0: not known */
    long band_line;               /* > 0: the band was read from this ledger line */
    const char *verdict;          /* faster, parity, slower; NULL when not compared */
};

/* The median, lowest and highest of n values (n >= 1). */
static void rounds_spread(const double *v, int n, double *med, double *lo, double *hi)
{
    double x[100];
    memcpy(x, v, (size_t)n * sizeof *x);
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    *med = sorted_median(x, n), *lo = x[0], *hi = x[n - 1];
}

/* Fewer rounds than this give parity whatever the ratios: with every round
 * on one side of 1 as the rule, a no-change variant passes it by chance with
 * probability 2^-n (one-sided), below 0.01 only from n = 7. */
#define VERDICT_MIN_ROUNDS 7

/* The verdict of a time ratio (candidate / reference) against the A/A
 * band: faster or slower only outside the band with every round on the
 * same side of 1, over at least VERDICT_MIN_ROUNDS rounds; at parity
 * otherwise. */
static const char *rounds_verdict(const struct rounds *rd)
{
    if (rd->n < VERDICT_MIN_ROUNDS) return "parity";
    if (rd->ratio_med < 1 - rd->band && rd->ratio_hi < 1) return "faster";
    if (rd->ratio_med > 1 + rd->band && rd->ratio_lo > 1) return "slower";
    return "parity";
}
