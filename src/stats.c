/* src/stats.c — one output's statistics against its references, in one
 * pass over the checked elements (and one over all elements for NaN/inf
 * and the checksums): what every gate of gates.c reads.  Relies on run.c
 * (outputs, what the launches did to the inputs), plan.c (the check plan
 * and its references), ref.c (formats) and util.c. */

/* What --repeat found for one output: runs made, whether the kernels declare
 * atomics (then each run was gated instead of compared), and the first
 * difference from run 1. */
struct repeat {
    int runs, atomics;
    int diff_run;                 /* 0: every run was bitwise equal to run 1 */
    size_t diff_row, diff_col;
    double first, other;          /* the two values at the difference */
    int gated_fail_run;           /* atomics: the first run that failed a gate (0: none) */
};

/* What --graph found for one output: whether its launch ran on the graph
 * path, why the capture was refused, and how the replay's storage compares
 * with an eager run's on the same inputs. */
struct graphcheck {
    int on;                       /* the graph path ran (--graph on a GPU) */
    char why[200];                /* the capture was refused: why ("": it was not) */
    int compared;                 /* the eager run was compared (not when the kernels declare atomics) */
    size_t differ;                /* elements whose bytes differ from the eager run's */
    size_t row, col;              /* the first of them */
    double graph_v, eager_v;      /* its two values */
    size_t guard_differ;          /* guard-band bytes that differ */
};

/* What the gates read: one output, its plan, references, the candidate's
 * decoded values and what the read-back and the repeats found. */
struct gate_in {
    const struct output *o;
    const struct plan *p;
    const struct refs *f;
    const float *out;             /* rows x cols */
    size_t unwritten;             /* elements still holding the poison bytes */
    size_t outside;               /* guard-band bytes no longer holding them */
    enum dtype t;
    double rtol, atol;            /* allclose */
    double atol_base;             /* the dtype's (or --atol's), before any scaling */
    int inputs_nonzero;
    enum inputs inputs;           /* the case's distribution */
    const struct repeat *rep;
    const struct qrun *q;         /* low precision: the quantize stage; NULL otherwise */
    double q_gate;                /* low precision: the format's SNR gate, dB (0: not low precision) */
    const char *trades;           /* --trades-precision: why the baseline rule is waived */
    const struct graphcheck *graph;
    const struct inputs_check *in;   /* what the launches did to the inputs (run_inputs_written) */
    const struct ident *id;       /* the op's identities on this output (case.c); id->set 0: none */
};

/* Error sums of one tile or one segment. */
struct acc { size_t n; double ref2, err2, lperr2, max_err; size_t wi, wj; };

/* Everything the gates need, accumulated in one pass over the checked
 * elements (and one over all elements for NaN/inf). */
struct stats {
    size_t n;                               /* checked elements */
    size_t n_finite;                        /* of those with a finite reference, finite in the output */
    size_t n_nz;                            /* checked elements with a finite nonzero reference */
    double max_ref;                         /* max |ref| over the finite checked elements */
    size_t close_fail;                      /* allclose */
    double close_worst;                     /* max |out-ref| / (atol + rtol|ref|) */
    size_t cw_i, cw_j;
    double cw_out, cw_ref;
    double max_err, max_lp_err, floor;      /* same precision */
    size_t nan_out, inf_out, nan_ref, inf_ref;   /* all elements (out), checked ones (ref) */
    size_t nan_out_checked, inf_out_checked;
    size_t nf_stray;                        /* non-finite off the checked elements, unvouched (stats_nf_stray) */
    double sum_err, sum_err2, sum_lp_err, sum_lp_err2, sum_ref2, sum_out2, sum_out_ref;
    double sum_hp2, sum_hp_err2;            /* low precision: against the unquantised product */
    /* rounding conformance (16-bit outputs) */
    double rne_margin;                      /* < 0: no unrounded lp (not gated) */
    size_t rne_decided, rne_bad, rne_lp_bad;
    size_t rb_i, rb_j;                      /* the first output that differs from RNE(ref) */
    double rb_out, rb_ref;
    size_t n_sb;                            /* sign-aware bias: elements summed */
    double sum_sb, sum_sb2, sum_sb_lp, sum_sb_lp2, sum_ulp;
    double sum_sb_tc;                       /* ... the fp8 tensor cores' model's (refs' tc), when present */
    size_t tr, tc;                          /* tile grid */
    struct acc *tiles;
    struct acc *segs;                       /* per row segment (nseg of them), or NULL */
    /* derived */
    double mean_err, sd_err, mean_lp_err, rms_lp_err, rms_ref, rel_l2, cosine, snr_db, bias_limit;
    double lp_snr_db, hp_snr_db;            /* the same-precision reference's SNR; the SNR vs unquantised */
    double sb_ulps, sb_lp_ulps, sb_limit;   /* sign-aware bias in ulps: the output's, lp's, the limit */
    double sb_acc_ulps;                     /* ... of which the accumulation's allowance */
    double sb_tc_ulps;                      /* the fp8 tensor cores' model's sign-aware bias (NAN: none) */
    long worst_tile;                        /* -1: no tile had enough checked elements */
    double worst_tile_snr, worst_tile_need, worst_tile_margin;
    struct acc *lines;                      /* products: each row, then each column (freed by stats_worst) */
    long worst_line;                        /* rows 0..rows-1, then columns; -1: none with enough checked */
    double worst_line_snr, worst_line_need, worst_line_margin;
    long worst_seg;                         /* -1: no segments */
    double worst_seg_snr, worst_seg_need;
    /* checksum (products of unquantized operands): rows 0..rows-1, then columns */
    long sums_line;                         /* the worst line; -1: none summed */
    double sums_ratio, sums_out, sums_exact, sums_allow;   /* its |out - exact| / allow, its sums, its allowance */
    int sums_by_limit;                      /* that allowance is the same-precision limit's (sums_allowance) */
    size_t sums_lines, sums_nonfinite;      /* lines summed; lines left out for a non-finite element */
};

#define NONTRIVIAL_FACTOR 10.0 /* nontrivial: how far above its limit a zero output's error must be */
#define RNE_MARGIN_FACTOR 4.0 /* rounding: an element is decided beyond this many x lp's largest error */
#define RNE_BAD_SHARE 0.125   /* ... and at most lp's count plus this share of the decided may differ */
#define TILE_MIN_CHECKED 64     /* the worst-tile gate looks at tiles with at least this many */
#define TILE_SNR_SLACK_DB 10.0  /* a tile may be this much below the same-precision reference */

static void acc_add(struct acc *a, double ref, double e, double lpe, size_t i, size_t j)
{
    a->n++;
    a->ref2 += ref * ref, a->lperr2 += lpe * lpe;
    if (!isfinite(e)) e = INFINITY;
    a->err2 += e * e;
    if (!(fabs(e) <= a->max_err)) a->max_err = fabs(e), a->wi = i, a->wj = j;
}

/* The rounding conformance of one checked element with a finite reference
 * (16-bit outputs): the sign-aware bias sums (|out| - |ref|, and lp's, and
 * the ulp at ref), and, when ref lies farther than the margin from a
 * rounding boundary of the dtype (so any arithmetic within the margin
 * rounds it the same way), whether out and lp equal RNE(ref). */
static void stats_rounding(struct stats *s, const struct gate_in *g, size_t i, size_t j, double out, double ref,
                           double lp, double tc)
{
    enum dtype t = g->t;
    double a = fabs(ref), ra = fabs((double)dt_round(t, (float)ref));
    double up = dt_step(t, (float)ra, 1), down = dt_step(t, (float)ra, -1);
    double hi = (ra + up) / 2, lo = ra > 0 ? (ra + down) / 2 : -hi, ulp = up - ra;
    if (isfinite(out) && isfinite(ulp)) {
        double d = fabs(out) - a, dl = fabs(lp) - a;
        s->n_sb++, s->sum_ulp += ulp;
        s->sum_sb += d, s->sum_sb2 += d * d, s->sum_sb_lp += dl, s->sum_sb_lp2 += dl * dl;
        s->sum_sb_tc += fabs(tc) - a;
    }
    if (s->rne_margin < 0 || !(fmin(a - lo, hi - a) > s->rne_margin)) return;
    double rne = ref < 0 ? -ra : ra;
    s->rne_decided++;
    s->rne_lp_bad += lp != rne;
    if (out != rne && s->rne_bad++ == 0) s->rb_i = i, s->rb_j = j, s->rb_out = out, s->rb_ref = ref;
}

/* One checked element: output (i, j) against ref and lp.  A non-finite
 * reference (-inf: the LSE of a row that sees no key) must be matched
 * exactly and is left out of the sums. */
static void stats_visit(struct stats *s, const struct gate_in *g, size_t i, size_t j, double ref, double lp,
                        double hp, double tc, size_t seg)
{
    double out = g->out[i * g->o->cols + j];
    s->n++;
    s->nan_out_checked += isnan(out) != 0, s->inf_out_checked += isinf(out) != 0;
    if (!isfinite(ref)) {
        s->nan_ref += isnan(ref) != 0, s->inf_ref += isinf(ref) != 0;
        int same = out == ref || (isnan(out) && isnan(ref));
        if (!same) {
            s->close_fail++, s->max_err = INFINITY;
            if (!(s->close_worst == INFINITY)) s->close_worst = INFINITY, s->cw_i = i, s->cw_j = j, s->cw_out = out,
                                                s->cw_ref = ref;
        }
        return;
    }
    double e = out - ref, tol = g->atol + g->rtol * fabs(ref);
    double ratio = isfinite(out) ? fabs(e) / tol : INFINITY;
    if (!(fabs(e) <= tol)) s->close_fail++;
    if (!(ratio <= s->close_worst)) {
        s->close_worst = ratio;
        s->cw_i = i, s->cw_j = j, s->cw_out = out, s->cw_ref = ref;
    }
    if (!(fabs(e) <= s->max_err)) s->max_err = isfinite(out) ? fabs(e) : INFINITY;
    double lpe = fabs(lp - ref), fl = fabs((double)dt_round(g->t, (float)ref) - ref);
    if (lpe > s->max_lp_err) s->max_lp_err = lpe;
    if (fl > s->floor) s->floor = fl;
    s->sum_lp_err += lp - ref, s->sum_lp_err2 += (lp - ref) * (lp - ref);
    s->n_nz += ref != 0;
    if (fabs(ref) > s->max_ref) s->max_ref = fabs(ref);
    acc_add(&s->tiles[(i / KG_TILE) * s->tc + j / KG_TILE], ref, e, lp - ref, i, j);
    if (s->segs) acc_add(&s->segs[seg], ref, e, lp - ref, i, j);
    if (s->lines) {
        acc_add(&s->lines[i], ref, e, lp - ref, i, j);
        acc_add(&s->lines[g->o->rows + j], ref, e, lp - ref, i, j);
    }
    if (!isfinite(out)) return;
    s->n_finite++;
    s->sum_hp2 += hp * hp, s->sum_hp_err2 += (out - hp) * (out - hp);
    s->sum_err += e, s->sum_err2 += e * e, s->sum_ref2 += ref * ref;
    s->sum_out2 += out * out, s->sum_out_ref += out * ref;
    if (DTYPES[g->t].bytes < 4) stats_rounding(s, g, i, j, out, ref, lp, tc);
}

static double snr_db(double sig2, double err2)
{
    if (err2 == 0) return INFINITY;
    return 10.0 * log10(sig2 / err2);
}

/* What a block (tile or segment) must reach: the same-precision reference's
 * SNR on it, at most that reference's SNR over the whole output (lp_all),
 * capped per dtype, minus TILE_SNR_SLACK_DB.  The bound by lp_all: on a
 * block with few independent errors (a sampled tile that holds one row with
 * signal; a 1-token sequence) lp's SNR is one draw, which may lie far above
 * the SNR the arithmetic gives, as lp_all measures it (on one such tile of
 * an attention dQ a correct GPU kernel fell 10.4 dB and the CPU candidate
 * 13.9 dB below lp's 50-plus, with lp_all at 40).  For low precision
 * at least the format's SNR gate, and only that when the run declares
 * --trades-precision.  A block whose
 * reference is exactly zero (an empty group's dB, a vanishing gradient) is
 * held instead to its lp error energy within the same slack, so to exact
 * zero when lp is exactly zero too; its "SNR" is then lp's error over the
 * output's, in dB.  Returns the margin (SNR - need). */
static double acc_margin(const struct acc *a, const struct gate_in *g, double lp_all, double *snr, double *need)
{
    enum dtype t = g->t;
    if (a->ref2 == 0) {
        *snr = a->err2 == 0 ? INFINITY : a->lperr2 == 0 ? -INFINITY : 10.0 * log10(a->lperr2 / a->err2);
        *need = -TILE_SNR_SLACK_DB;
        return *snr - *need;
    }
    *snr = snr_db(a->ref2, a->err2);
    double lp = fmin(fmin(snr_db(a->ref2, a->lperr2), lp_all), DTYPES[t].tile_snr_cap);
    *need = lp - TILE_SNR_SLACK_DB;
    if (g->q_gate > 0) *need = g->trades ? g->q_gate : fmax(g->q_gate, *need);
    return *snr == INFINITY ? INFINITY : *snr - *need;
}

/* Whether margin m is worse than the worst so far: lower, and a NaN margin
 * (no path makes one now) the worst of all. */
static int margin_worse(double m, double worst)
{
    return isnan(m) || (!isnan(worst) && m < worst);
}

/* The block of a[0..n) furthest below what it needs (margin_worse), among
 * those with at least min_n checked elements and, with skip_zero, not
 * exactly zero in both reference and error: its index (-1: none), and its
 * SNR, need and margin in *snr, *need and *margin. */
static long acc_worst(const struct acc *a, size_t n, size_t min_n, int skip_zero, const struct gate_in *g,
                      double lp_all, double *snr, double *need, double *margin)
{
    long worst = -1;
    double s, d;
    *margin = INFINITY;
    for (size_t k = 0; k < n; k++) {
        if (a[k].n < min_n || (skip_zero && a[k].ref2 == 0 && a[k].err2 == 0)) continue;
        double m = acc_margin(&a[k], g, lp_all, &s, &d);
        if (worst < 0 || margin_worse(m, *margin)) worst = (long)k, *margin = m, *snr = s, *need = d;
    }
    return worst;
}

/* The worst tile and, in a product, the worst row or column (among those
 * with TILE_MIN_CHECKED checked elements), and the worst segment (any with
 * a checked element): the ones furthest below what they need.  A row or
 * column is a block of its own because on scaled inputs a row of small
 * magnitude weighs nothing in its tile's SNR: zeroing 64 such rows of a
 * bf16 product passed every gate before. */
static void stats_worst(struct stats *s, const struct gate_in *g)
{
    const struct output *o = g->o;
    double seg_margin;
    s->worst_tile = acc_worst(s->tiles, s->tr * s->tc, TILE_MIN_CHECKED, 1, g, s->lp_snr_db, &s->worst_tile_snr,
                              &s->worst_tile_need, &s->worst_tile_margin);
    s->worst_line = s->lines ? acc_worst(s->lines, o->rows + o->cols, TILE_MIN_CHECKED, 1, g, s->lp_snr_db,
                                         &s->worst_line_snr, &s->worst_line_need, &s->worst_line_margin) : -1;
    s->worst_seg = s->segs ? acc_worst(s->segs, o->nseg, 1, 0, g, s->lp_snr_db, &s->worst_seg_snr,
                                       &s->worst_seg_need, &seg_margin) : -1;
    free(s->lines);
    s->lines = NULL;
}

/* max |x - ref| over the checked elements of output o with a finite
 * reference, x laid out as the refs' blocks (x_r beside ref_r, x_c beside
 * ref_c; rows of the row block skipped in the column block). */
static double refs_max_err(const struct plan *p, const struct output *o, const struct refs *f, const float *x_r,
                           const float *x_c)
{
    double m = 0;
    for (size_t k = 0; k < p->nr * o->cols; k++)
        if (isfinite(f->ref_r[k])) m = fmax(m, fabs(x_r[k] - f->ref_r[k]));
    for (size_t i = 0; i < o->rows && p->nc; i++)
        for (size_t c = 0; c < p->nc && !p->row_in[i]; c++)
            if (isfinite(f->ref_c[i * p->nc + c])) m = fmax(m, fabs(x_c[i * p->nc + c] - f->ref_c[i * p->nc + c]));
    return m;
}

/* The rounding gate's margin: RNE_MARGIN_FACTOR x the largest |lpu - ref|
 * (lp's error before its rounding to the dtype) over the checked elements
 * with a finite reference; -1 when there is no unrounded lp (attention,
 * whose lp rounds the probabilities, and f32 outputs). */
static double stats_rne_margin(const struct gate_in *g)
{
    if (!g->f->lpu_r || DTYPES[g->t].bytes == 4) return -1;
    return RNE_MARGIN_FACTOR * refs_max_err(g->p, g->o, g->f, g->f->lpu_r, g->f->lpu_c);
}

/* The sign-aware bias, in ulps: the mean of |out| - |ref| over the mean ulp
 * at ref, lp's the same way, and the limit: 6 spreads of the mean, plus
 * twice lp's, plus an allowance for an accumulation that errs toward zero:
 * tensor cores' fp32 sums truncate (Fasi, Higham, Mikaitis, Pranesh,
 * "Numerical behavior of NVIDIA tensor cores", PeerJ CS 2021), by up to
 * twice lp's largest unrounded error, in ulps; fp8 tensor cores' sums keep
 * ~13 bits and truncate, so quantized products allow twice the lean of
 * ref.c's model of them (ACC_TC8: refs' tc), when that is more.  A
 * truncating conversion errs by half an ulp. */
static void stats_sign_bias(struct stats *s, int has_tc)
{
    double n = (double)(s->n_sb ? s->n_sb : 1), ulp = s->sum_ulp > 0 ? s->sum_ulp / n : 1;
    double m = s->sum_sb / n, ml = s->sum_sb_lp / n;
    double sd = sqrt(fmax(0.0, s->sum_sb2 / n - m * m)), sdl = sqrt(fmax(0.0, s->sum_sb_lp2 / n - ml * ml));
    s->sb_ulps = m / ulp, s->sb_lp_ulps = ml / ulp;
    s->sb_tc_ulps = has_tc && s->n_sb ? s->sum_sb_tc / n / ulp : NAN;
    s->sb_acc_ulps = s->rne_margin > 0 ? 2.0 * s->rne_margin / RNE_MARGIN_FACTOR / ulp : 0;
    if (!isnan(s->sb_tc_ulps)) s->sb_acc_ulps = fmax(s->sb_acc_ulps, 2.0 * fabs(s->sb_tc_ulps));
    s->sb_limit = 6.0 * fmax(sd, sdl) / sqrt(n) / ulp + 2.0 * fabs(s->sb_lp_ulps) + s->sb_acc_ulps;
}

/* A value's non-finite class: 1 -inf, 2 +inf, 4 NaN, 0 finite. */
static unsigned nf_class(double v)
{
    return isnan(v) ? 4u : v == -INFINITY ? 1u : v == INFINITY ? 2u : 0u;
}

/* The non-finite outputs off a sampled plan's checked elements that no
 * checked reference vouches for: an unchecked element may hold -inf (+inf,
 * NaN) only where a checked reference element of its row holds the same
 * (the LSE of a row that sees no key is -inf in every head).  0 on a full
 * plan, where every element is checked. */
static size_t stats_nf_stray(const struct gate_in *g)
{
    const struct output *o = g->o;
    const struct plan *p = g->p;
    const struct refs *f = g->f;
    if (p->full) return 0;
    unsigned char *cls = xcalloc(o->rows, 1);
    for (size_t r = 0; r < p->nr; r++)
        for (size_t j = 0; j < o->cols; j++) cls[p->rows[r]] |= (unsigned char)nf_class(f->ref_r[r * o->cols + j]);
    for (size_t i = 0; i < o->rows; i++)
        for (size_t c = 0; c < p->nc && !p->row_in[i]; c++) cls[i] |= (unsigned char)nf_class(f->ref_c[i * p->nc + c]);
    size_t stray = 0;
    for (size_t i = 0; i < o->rows; i++) {
        const uint32_t *mine = p->nc ? plan_cols(p, i) : NULL;   /* ascending: walked beside j */
        for (size_t j = 0, c = 0; j < o->cols && !p->row_in[i]; j++) {
            int checked = c < p->nc && mine[c] == j;
            c += checked;
            unsigned k = checked ? 0 : nf_class(g->out[i * o->cols + j]);
            stray += k && !(cls[i] & k);
        }
    }
    free(cls);
    return stray;
}

/* What storing an element v of dtype t may move it from the fp32 sum it
 * rounds: SUM_OUT_ROUNDOFFS unit roundoffs of |v| (one ulp: round to
 * nearest moves half that, truncation less than all of it), plus the
 * dtype's least subnormal step.  The double sums of the checksum gate err
 * by far less (2^-53 a term). */
#define SUM_OUT_ROUNDOFFS 2.0
static double sums_store_allow(enum dtype t, double v)
{
    double u = SUM_OUT_ROUNDOFFS * DTYPES[t].unit_roundoff;
    return u * fabs(v) / (1 - u) + DTYPES[t].tiny;
}

/* The allowance of line l (rows, then columns) of the checksum gate: the
 * lesser of two bounds on |sum of out - exact sum| that a kernel within the
 * gates meets.  Arithmetic: the accumulation's slack (product_sums) plus
 * sums_store_allow of each element, `store`; in any fp32 summation.  The
 * same-precision limit (> 0) times the line's length, on a full plan
 * only: a line beyond it holds an element beyond that limit, which the gate
 * then holds every element to.  On a sample the limit is the checked
 * elements' maximum, and an unchecked element larger than all of them may
 * round by more (a review's repro: scaled 6x512x1048576, seed 34).
 * *by_limit: the second was the lesser. */
static double sums_allowance(const struct gate_in *g, const struct stats *s, size_t l, double store, int *by_limit)
{
    size_t R = g->o->rows;
    double arith = store + (l < R ? g->f->slack_r[l] : g->f->slack_c[l - R]);
    double limit = (2.0 * s->max_lp_err + s->floor) * (double)(l < R ? g->o->cols : R);
    *by_limit = g->p->full && limit > 0 && limit < arith;
    return *by_limit ? limit : arith;
}

/* The checksum gate's search (when refs hold the exact sums): every row's
 * and every column's sum of out against its exact sum, as a ratio to its
 * allowance (sums_allowance).  A line holding a NaN or inf is the nan-inf
 * gate's. */
static void stats_sums(struct stats *s, const struct gate_in *g)
{
    const struct output *o = g->o;
    size_t R = o->rows, C = o->cols;
    double *sum = xcalloc(2 * (R + C) + 1, sizeof *sum), *store = sum + R + C;
    for (size_t i = 0; i < R; i++)
        for (size_t j = 0; j < C; j++) {
            double v = g->out[i * C + j], a = sums_store_allow(g->t, v);
            sum[i] += v, sum[R + j] += v, store[i] += a, store[R + j] += a;
        }
    s->sums_line = -1;
    for (size_t l = 0; l < R + C; l++) {
        int by_limit;
        double exact = l < R ? g->f->sum_r[l] : g->f->sum_c[l - R], all = sums_allowance(g, s, l, store[l], &by_limit);
        if (!isfinite(sum[l])) { s->sums_nonfinite++; continue; }
        double off = fabs(sum[l] - exact), ratio = all > 0 ? off / all : (off > 0 ? INFINITY : 0);   /* all: inf when unbounded */
        s->sums_lines++;
        if (s->sums_line < 0 || ratio > s->sums_ratio)
            s->sums_line = (long)l, s->sums_ratio = ratio, s->sums_out = sum[l], s->sums_exact = exact,
            s->sums_allow = all, s->sums_by_limit = by_limit;
    }
    free(sum);
}

/* Fill s (zeroed first; it owns the tile and segment arrays it allocates)
 * with everything the gates read from g: the checked elements' sums, the
 * worst tile, row, column and segment, NaN/inf counts and the checksums. */
static void stats_compute(struct stats *s, const struct gate_in *g)
{
    const struct output *o = g->o;
    const struct plan *p = g->p;
    memset(s, 0, sizeof *s);
    s->tr = (o->rows + KG_TILE - 1) / KG_TILE, s->tc = (o->cols + KG_TILE - 1) / KG_TILE;
    s->tiles = xcalloc(s->tr * s->tc, sizeof *s->tiles);
    if (o->nparts) s->lines = xcalloc(o->rows + o->cols, sizeof *s->lines);
    uint32_t *seg_of = NULL;
    if (o->seg) {
        s->segs = xcalloc(o->nseg, sizeof *s->segs);
        seg_of = xmalloc((o->rows + 1) * sizeof *seg_of);
        for (size_t k = 0; k < o->nseg; k++)
            for (size_t i = o->seg[k]; i < o->seg[k + 1]; i++) seg_of[i] = (uint32_t)k;
    }
    const struct refs *f = g->f;
    s->rne_margin = stats_rne_margin(g);
    for (size_t r = 0; r < p->nr; r++)
        for (size_t j = 0; j < o->cols; j++) {
            size_t at = r * o->cols + j;
            stats_visit(s, g, p->rows[r], j, f->ref_r[at], f->lp_r[at], f->hp_r ? f->hp_r[at] : 0,
                        f->tc_r ? f->tc_r[at] : 0, seg_of ? seg_of[p->rows[r]] : 0);
        }
    for (size_t i = 0; i < o->rows && p->nc; i++)
        if (!p->row_in[i])
            for (size_t c = 0; c < p->nc; c++) {
                size_t at = i * p->nc + c;
                stats_visit(s, g, i, plan_cols(p, i)[c], f->ref_c[at], f->lp_c[at], f->hp_c ? f->hp_c[at] : 0,
                            f->tc_c ? f->tc_c[at] : 0, seg_of ? seg_of[i] : 0);
            }
    free(seg_of);
    for (size_t k = 0; k < o->rows * o->cols; k++) {
        if (isnan(g->out[k])) s->nan_out++;
        else if (isinf(g->out[k])) s->inf_out++;
    }
    s->nf_stray = s->nan_out + s->inf_out ? stats_nf_stray(g) : 0;   /* nothing to vouch for otherwise */
    if (f->sum_r) stats_sums(s, g);
    double nf = s->n_finite ? (double)s->n_finite : 1.0, nl = (double)(s->n ? s->n : 1);
    s->mean_err = s->sum_err / nf;
    s->sd_err = sqrt(fmax(0.0, s->sum_err2 / nf - s->mean_err * s->mean_err));
    s->mean_lp_err = s->sum_lp_err / nl;
    s->rms_lp_err = sqrt(s->sum_lp_err2 / nl);
    s->rms_ref = sqrt(s->sum_ref2 / (double)(s->n_nz ? s->n_nz : 1));
    s->rel_l2 = s->sum_ref2 > 0 ? sqrt(s->sum_err2 / s->sum_ref2) : (s->sum_err2 > 0 ? INFINITY : 0);
    s->cosine = s->sum_out2 > 0 && s->sum_ref2 > 0 ? s->sum_out_ref / sqrt(s->sum_out2 * s->sum_ref2) : 0;
    s->snr_db = snr_db(s->sum_ref2, s->sum_err2);
    s->lp_snr_db = snr_db(s->sum_ref2, s->sum_lp_err2);
    s->hp_snr_db = g->f->hp_r ? snr_db(s->sum_hp2, s->sum_hp_err2) : NAN;
    /* The spread of a mean of n errors: sd/sqrt(n), with sd at least the
     * same-precision reference's rms error (so few elements cannot make it 0). */
    s->bias_limit = 6.0 * fmax(s->sd_err, s->rms_lp_err) / sqrt(nf) + 2.0 * fabs(s->mean_lp_err);
    stats_sign_bias(s, f->tc_r != NULL);
    stats_worst(s, g);
}
