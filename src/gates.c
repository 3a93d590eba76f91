/* src/gates.c — the gates: each a row of GATES, judging one output by its
 * statistics (stats.c), and checking an output (read back, decoded, planted
 * fault applied, every gate run).  Relies on stats.c, run.c (read back),
 * plan.c, timer.c (a result holds its time), lowprec.c (the quantize
 * stage), options.c, case.c, ref.c (formats) and util.c (digests). */

/* A gate's verdict: pass, the measured value and the limit it was held to,
 * and one line of detail. */
struct verdict { int pass; double value, limit; char detail[400]; };

typedef void (*gate_fn)(const struct stats *, const struct gate_in *, struct verdict *);

/* A gate that does not apply to this output: passes, shows "-". */
static void not_gated(struct verdict *v, const char *why)
{
    v->pass = 1, v->value = NAN, v->limit = 0;
    snprintf(v->detail, sizeof v->detail, "%s", why);
}

#define Q_ONLY "applies to low-precision (quantized) products"
#define Q_REPLACED "low precision: the snr and baseline gates replace element tolerances"

/* allclose: every checked element within atol + rtol|ref| (catches a wrong
 * element, row or tile). */
static void gate_allclose(const struct stats *s, const struct gate_in *g, struct verdict *v)
{
    if (g->q_gate > 0) { not_gated(v, Q_REPLACED); return; }
    v->value = s->close_worst, v->limit = 1.0, v->pass = s->close_fail == 0;
    snprintf(v->detail, sizeof v->detail,
             "%zu of %zu checked elements outside atol %.3g + rtol %.3g*|ref|; worst at (%zu,%zu): "
             "out %.6g ref %.6g",
             s->close_fail, s->n, g->atol, g->rtol, s->cw_i, s->cw_j, s->cw_out, s->cw_ref);
}

/* same precision: max|out-ref| <= 2 max|lp-ref| + floor (catches error beyond
 * what the kernel's precision explains). */
static void gate_same_precision(const struct stats *s, const struct gate_in *g, struct verdict *v)
{
    if (g->q_gate > 0) { not_gated(v, Q_REPLACED); return; }
    v->value = s->max_err, v->limit = 2.0 * s->max_lp_err + s->floor;
    v->pass = s->max_err <= v->limit;
    snprintf(v->detail, sizeof v->detail,
             "max|out-ref| %.4g vs 2 x max|lp-ref| %.4g + floor %.4g (lp: the same arithmetic "
             "in %s on the CPU)",
             s->max_err, s->max_lp_err, s->floor, DTYPES[g->t].name);
}

/* NaN/inf: the output has the reference's counts on the checked elements
 * (usually none), and elsewhere only what a checked reference element of
 * the same row vouches for (stats_nf_stray). */
static void gate_nan_inf(const struct stats *s, const struct gate_in *g, struct verdict *v)
{
    (void)g;
    size_t want = s->nan_ref + s->inf_ref, got = s->nan_out + s->inf_out;
    v->value = (double)got, v->limit = (double)want;
    v->pass = s->nan_out_checked == s->nan_ref && s->inf_out_checked == s->inf_ref && s->nf_stray == 0;
    int n = snprintf(v->detail, sizeof v->detail, "output has %zu NaN and %zu inf (%zu and %zu on checked elements); "
                     "reference %zu and %zu", s->nan_out, s->inf_out, s->nan_out_checked, s->inf_out_checked,
                     s->nan_ref, s->inf_ref);
    if (s->nf_stray && n > 0 && (size_t)n < sizeof v->detail)
        snprintf(v->detail + n, sizeof v->detail - (size_t)n, "; %zu off the checked elements in rows whose checked "
                 "reference has no such value", s->nf_stray);
}

/* written: no element still holds the poison bytes (catches outputs the
 * kernel never wrote). */
static void gate_written(const struct stats *s, const struct gate_in *g, struct verdict *v)
{
    (void)s;
    v->value = (double)g->unwritten, v->limit = 0, v->pass = g->unwritten == 0;
    snprintf(v->detail, sizeof v->detail,
             "%zu of %zu output elements still hold the poison bytes written before the launch",
             g->unwritten, g->o->rows * g->o->cols);
}

/* nontrivial's detail for uniform and normal inputs (need: 10 x atol): the
 * measure and, when it fails on nonzero inputs, that the case is at fault,
 * not the kernel, and the atol at which kgate could judge it. */
static void gate_nontrivial_rms(const struct stats *s, const struct gate_in *g, struct verdict *v, double need)
{
    char hint[200] = "";
    if (!v->pass && g->inputs_nonzero && s->n_nz > 0)
        snprintf(hint, sizeof hint, " (the case's doing, not the kernel's: an --atol below %.2g, or other --inputs, "
                 "make it a case kgate can judge)", s->rms_ref / NONTRIVIAL_FACTOR);
    snprintf(v->detail, sizeof v->detail, "reference rms %.4g (over its %zu nonzero checked elements) must exceed "
             "%g x atol = %.4g%s, or a kernel returning zeros could pass%s", s->rms_ref, s->n_nz, NONTRIVIAL_FACTOR,
             need, g->inputs_nonzero ? "" : " and inputs must be nonzero", hint);
}

/* nontrivial: a kernel returning zeros would fail by a wide margin, and no
 * input is all zero.  Uniform and normal inputs (every element of a similar
 * size): the reference's rms over its nonzero checked elements exceeds
 * NONTRIVIAL_FACTOR x atol, so zeros fail allclose nearly everywhere.
 * Scaled inputs put most elements far below the largest by design, so
 * allclose's atol (in units of max|x| = 1) sees only the largest; there
 * max|ref| must exceed NONTRIVIAL_FACTOR x the same-precision limit, which
 * zeros then fail.  Column: the measure over its need (> 1 passes). */
static void gate_nontrivial(const struct stats *s, const struct gate_in *g, struct verdict *v)
{
    int scaled = g->inputs == IN_SCALED;
    double same_limit = 2.0 * s->max_lp_err + s->floor;
    double measure = scaled ? s->max_ref : s->rms_ref, need = NONTRIVIAL_FACTOR * (scaled ? same_limit : g->atol_base);
    v->value = need > 0 ? measure / need : INFINITY, v->limit = 1;
    v->pass = g->inputs_nonzero && s->n_nz > 0 && v->value > 1;
    if (g->inputs_nonzero && s->n > 0 && s->n_nz == 0 && s->n_finite == s->n) {
        v->pass = 1;   /* the truth is zero: tile and group gates hold the output to it */
        snprintf(v->detail, sizeof v->detail, "the reference is exactly zero on all %zu checked elements (e.g. "
                 "the gradient of a softmax over one key): the tile and group gates hold the output to it", s->n);
        return;
    }
    if (scaled)
        snprintf(v->detail, sizeof v->detail, "scaled inputs: max|ref| %.4g must exceed %g x the same-precision "
                 "limit %.4g%s, or a kernel returning zeros could pass", s->max_ref, NONTRIVIAL_FACTOR, same_limit,
                 g->inputs_nonzero ? "" : ", and inputs must be nonzero");
    else
        gate_nontrivial_rms(s, g, v, need);
}

#define SIXTEEN_ONLY "applies to 16-bit outputs (f16, bf16)"

/* rounding: among the checked elements whose reference lies farther than
 * the margin (stats_rne_margin) from a rounding boundary, the outputs that
 * differ from the dtype's round-to-nearest-even of the reference: no more
 * than lp's on the same elements (by the margin's construction, none) plus
 * RNE_BAD_SHARE of them (catches a conversion that truncates or rounds the
 * wrong way).  A wrong rounding mode moves every decided element whose
 * fraction lies on the other side of the tie: about half of them.  Sums
 * less exact than lp's move only the few that lie within their error of a
 * boundary: on the H200 the fp8 tensor-core kernels (whose accumulation
 * keeps ~14 bits: DeepSeek-V3 report, 3.3.2) moved 0.5-2.9% over seeds
 * 42..46.  The share lies between the two.  --trades-precision (sums
 * declared less exact than lp's) waives the count; sign-bias still holds. */
static void gate_rounding(const struct stats *s, const struct gate_in *g, struct verdict *v)
{
    if (DTYPES[g->t].bytes == 4) { not_gated(v, SIXTEEN_ONLY); return; }
    if (s->rne_margin < 0) {
        not_gated(v, "no unrounded same-precision result: attention's lp rounds its probabilities, so its "
                  "error is no margin; the sign-aware bias gate holds its rounding");
        return;
    }
    if (s->rne_decided == 0) {
        not_gated(v, "no checked element lies farther than the margin from a rounding boundary");
        return;
    }
    v->value = (double)s->rne_bad, v->limit = (double)s->rne_lp_bad + floor(RNE_BAD_SHARE * (double)s->rne_decided);
    v->pass = v->value <= v->limit || g->trades;   /* sums declared less exact: the count cannot tell */
    int n = snprintf(v->detail, sizeof v->detail, "%zu of the %zu elements farther than %.3g (%g x lp's largest "
                     "error) from a rounding boundary differ from round-to-nearest-even of the reference; limit "
                     "%.0f: lp's %zu + %g of them", s->rne_bad, s->rne_decided, s->rne_margin, RNE_MARGIN_FACTOR,
                     v->limit, s->rne_lp_bad, RNE_BAD_SHARE);
    if (s->rne_bad && n > 0 && (size_t)n < sizeof v->detail)
        n += snprintf(v->detail + n, sizeof v->detail - (size_t)n, "; first at (%zu,%zu): out %.9g, ref %.9g rounds "
                      "to %.9g", s->rb_i, s->rb_j, s->rb_out, s->rb_ref, (double)dt_round(g->t, (float)s->rb_ref));
    if (g->trades && n > 0 && (size_t)n < sizeof v->detail)
        snprintf(v->detail + n, sizeof v->detail - (size_t)n, "; waived: --trades-precision %s", g->trades);
}

/* sign-bias: the mean of |out| - |ref| in ulps of the output within 6
 * spreads of the mean, plus twice lp's, plus the accumulation's allowance
 * (stats_sign_bias) (catches rounding toward zero: half an ulp, which
 * zero-mean outputs hide from the signed bias gate). */
static void gate_sign_bias(const struct stats *s, const struct gate_in *g, struct verdict *v)
{
    if (DTYPES[g->t].bytes == 4) { not_gated(v, SIXTEEN_ONLY); return; }
    v->value = fabs(s->sb_ulps), v->limit = s->sb_limit, v->pass = v->value <= v->limit;
    int n = snprintf(v->detail, sizeof v->detail, "mean(|out| - |ref|) %.4g ulp of %s over %zu elements vs limit "
                     "%.4g (6 spreads of the mean + 2 x lp's %.4g + the accumulation's %.4g)", s->sb_ulps,
                     DTYPES[g->t].name, s->n_sb, s->sb_limit, fabs(s->sb_lp_ulps), s->sb_acc_ulps);
    if (!isnan(s->sb_tc_ulps) && n > 0 && (size_t)n < sizeof v->detail)
        snprintf(v->detail + n, sizeof v->detail - (size_t)n, "; the fp8 tensor cores' model leans %.4g",
                 s->sb_tc_ulps);
}

/* in bounds: the guard bands around the output, and around every input,
 * still hold the poison bytes (catches a kernel writing past the end or
 * before the start of a buffer). */
static void gate_in_bounds(const struct stats *s, const struct gate_in *g, struct verdict *v)
{
    (void)s;
    const struct inputs_check *in = g->in;
    size_t n = g->outside + in->band + in->changed;
    v->value = (double)n, v->limit = 0, v->pass = n == 0;
    int k = snprintf(v->detail, sizeof v->detail, "%zu bytes of the %zu-byte guard bands before and after the "
                     "output were written, %zu of the guard bands of the inputs and scratch buffers, and %zu of "
                     "the inputs themselves",
                     g->outside, 2 * g->o->guard, in->band, in->changed);
    if (in->band && k > 0 && (size_t)k < sizeof v->detail)
        k += snprintf(v->detail + k, sizeof v->detail - (size_t)k, " (the first band written: around %s)",
                      in->names[in->band_in]);
    if (in->changed && k > 0 && (size_t)k < sizeof v->detail)
        snprintf(v->detail + k, sizeof v->detail - (size_t)k, " (the first byte changed: byte %zu of %s)",
                 in->changed_at, in->names[in->changed_in]);
}

/* bias: the mean signed error within 6 spreads of the mean (catches a small
 * systematic error hiding under every element tolerance). */
static void gate_bias(const struct stats *s, const struct gate_in *g, struct verdict *v)
{
    (void)g;
    v->value = fabs(s->mean_err), v->limit = s->bias_limit;
    v->pass = fabs(s->mean_err) <= s->bias_limit;
    snprintf(v->detail, sizeof v->detail,
             "mean signed error %.4g vs limit %.4g = 6 x max(sd %.4g, lp rms %.4g) / sqrt(%zu) + "
             "2 x |lp mean error| %.4g",
             s->mean_err, s->bias_limit, s->sd_err, s->rms_lp_err, s->n_finite, fabs(s->mean_lp_err));
}

/* worst tile: every tile near the same-precision reference's SNR on it
 * (catches one bad tile that global metrics average away). */
static void gate_worst_tile(const struct stats *s, const struct gate_in *g, struct verdict *v)
{
    int line = s->worst_line >= 0 && (s->worst_tile < 0 || margin_worse(s->worst_line_margin, s->worst_tile_margin));
    if (s->worst_tile < 0 && !line) {
        v->pass = 1, v->value = NAN, v->limit = 0;
        snprintf(v->detail, sizeof v->detail, "no tile has %d checked elements; element gates cover it",
                 TILE_MIN_CHECKED);
        return;
    }
    double snr = line ? s->worst_line_snr : s->worst_tile_snr, need = line ? s->worst_line_need : s->worst_tile_need;
    v->value = snr, v->limit = need;
    v->pass = snr >= need;
    char where[96], why[160];
    if (line) {
        int col = (size_t)s->worst_line >= g->o->rows;
        snprintf(where, sizeof where, "worst %s %zu", col ? "column" : "row",
                 (size_t)s->worst_line - (col ? g->o->rows : 0));
    } else {
        size_t ti = (size_t)s->worst_tile / s->tc, tj = (size_t)s->worst_tile % s->tc;
        size_t r1 = (ti + 1) * KG_TILE < g->o->rows ? (ti + 1) * KG_TILE : g->o->rows;
        size_t c1 = (tj + 1) * KG_TILE < g->o->cols ? (tj + 1) * KG_TILE : g->o->cols;
        snprintf(where, sizeof where, "worst tile (%zu,%zu), rows %zu..%zu cols %zu..%zu", ti, tj, ti * KG_TILE,
                 r1 - 1, tj * KG_TILE, c1 - 1);
    }
    snprintf(why, sizeof why, "same-precision reference on that %s, at most its %.1f over the output, capped "
             "at %.0f, minus %.0f", line ? "line" : "tile", s->lp_snr_db, DTYPES[g->t].tile_snr_cap,
             TILE_SNR_SLACK_DB);
    if (g->q_gate > 0 && g->trades) snprintf(why, sizeof why, "the %s SNR gate; --trades-precision", QFMTS[g->q->f].name);
    else if (g->q_gate > 0) snprintf(why + strlen(why), sizeof why - strlen(why), ", at least the %s SNR gate",
                                     QFMTS[g->q->f].name);
    snprintf(v->detail, sizeof v->detail, "%s: SNR %.1f dB, needs %.1f dB (%s)", where, snr, need, why);
}

/* group: every group (sequence) near the same-precision reference's SNR on
 * it, as for tiles; a group whose reference is all zero (an empty group's
 * dB) is held to lp's error energy on it (so to exactly zero when lp is
 * exactly zero) (catches one group computed wrong, or garbage where
 * nothing should be). */
static void gate_group(const struct stats *s, const struct gate_in *g, struct verdict *v)
{
    const struct output *o = g->o;
    if (s->worst_seg < 0) {
        v->pass = 1, v->value = NAN, v->limit = 0;
        snprintf(v->detail, sizeof v->detail, "the output has no groups or sequences");
        return;
    }
    size_t k = (size_t)s->worst_seg;
    const struct acc *a = &s->segs[k];
    v->value = s->worst_seg_snr, v->limit = s->worst_seg_need;
    v->pass = s->worst_seg_snr >= s->worst_seg_need;
    char where[96], what[128];
    snprintf(where, sizeof where, "worst %s %zu of %zu, rows %u..%u", o->seg_name, k, o->nseg, o->seg[k],
             o->seg[k + 1] - 1);
    if (a->ref2 == 0 && a->lperr2 == 0)
        snprintf(what, sizeof what, "its reference is exactly zero, and so must the output be");
    else if (a->ref2 == 0)
        snprintf(what, sizeof what, "its reference is exactly zero: error energy %.1f dB below lp's, needs %.1f",
                 s->worst_seg_snr, s->worst_seg_need);
    else
        snprintf(what, sizeof what, "SNR %.1f dB, needs %.1f dB", s->worst_seg_snr, s->worst_seg_need);
    snprintf(v->detail, sizeof v->detail, "%s: %s; its largest error %.4g at (%zu,%zu), tile (%zu,%zu)", where,
             what, a->max_err, a->wi, a->wj, a->wi / KG_TILE, a->wj / KG_TILE);
}

/* checksum, where the op has identities (attention's gradients): every
 * sum that the op's algebra fixes within x->limit spreads of its rounding
 * noise of its expected value (attn_identity). */
static void gate_identities(const struct ident *x, struct verdict *v)
{
    if (!x->sums) {
        not_gated(v, x->nonfinite ? "every identity's sum holds a NaN or inf (the nan-inf gate's)" :
                  "no identity to sum (no sequence holds both queries and keys)");
        return;
    }
    v->value = x->z / x->limit, v->limit = 1, v->pass = x->z <= x->limit;
    snprintf(v->detail, sizeof v->detail, "worst identity: %s: off by %.4g, its rounding noise %.3g: %.1f spreads, "
             "allowed %g; %zu sums, %zu with a NaN or inf left to nan-inf", x->where, x->off, x->noise, x->z,
             x->limit, x->sums, x->nonfinite);
}

/* checksum: in a product of unquantized operands, every row's and every
 * column's sum over all its elements within what fp32 accumulation and the
 * output's rounding allow of the exact sum (catches a gross error at
 * elements the sample does not check). */
static void gate_checksum(const struct stats *s, const struct gate_in *g, struct verdict *v)
{
    if (g->id->set) {
        gate_identities(g->id, v);
        return;
    }
    if (!g->f->sum_r) {
        not_gated(v, g->o->nparts ? "quantized operands: the fp8 tensor cores align their sums to 13 bits, which "
                  "bounds an element only by about 2% of sum |x||y|" : "attention: a sum of O needs the softmax's "
                  "own cost; the sample alone checks it");
        return;
    }
    if (s->sums_line < 0) {
        not_gated(v, "every row and column holds a NaN or inf (the nan-inf gate's)");
        return;
    }
    v->value = s->sums_ratio, v->limit = 1, v->pass = s->sums_ratio <= 1;
    int col = (size_t)s->sums_line >= g->o->rows;
    snprintf(v->detail, sizeof v->detail, "worst %s %zu: sum %.9g, exact %.9g, off by %.3g, allowed %.3g (%s); %zu "
             "rows and columns summed, %zu with a NaN or inf left to nan-inf", col ? "column" : "row",
             (size_t)s->sums_line - (col ? g->o->rows : 0), s->sums_out, s->sums_exact,
             fabs(s->sums_out - s->sums_exact), s->sums_allow, s->sums_by_limit ? "the same-precision limit times "
             "the line's length" : "fp32 accumulation, 2^-21 a term of sum |x||y|, and one ulp of each element",
             s->sums_lines, s->sums_nonfinite);
}

/* determinism: with --repeat N, every run bitwise equal to the first, or,
 * for kernels that declare atomics, every run passing the gates (catches a
 * race: an output that moves between runs). */
static void gate_determinism(const struct stats *s, const struct gate_in *g, struct verdict *v)
{
    (void)s;
    const struct repeat *r = g->rep;
    v->limit = 0;
    if (!r || r->runs < 2) {
        v->pass = 1, v->value = NAN;
        snprintf(v->detail, sizeof v->detail, "not repeated (--repeat N compares N runs)");
        return;
    }
    v->value = r->runs;
    v->pass = !r->diff_run && !r->gated_fail_run;
    if (r->atomics)
        snprintf(v->detail, sizeof v->detail, "the kernel declares atomics: each of %d runs held to the gates; "
                 "run %d failed them", r->runs, r->gated_fail_run);
    else
        snprintf(v->detail, sizeof v->detail, "run %d of %d differs from run 1 first at element (%zu,%zu): "
                 "%.9g vs %.9g", r->diff_run, r->runs, r->diff_row, r->diff_col, r->other, r->first);
}

/* graph: with --graph, every launch of the case captured into a graph (a
 * refused capture fails, naming the call a graph cannot hold: an
 * allocation, a copy from the host, a read back, a wait), and the replay's
 * output bitwise equal to an eager run's, unless the kernels declare
 * atomics (catches what capture freezes or forbids). */
static void gate_graph(const struct stats *s, const struct gate_in *g, struct verdict *v)
{
    (void)s;
    const struct graphcheck *x = g->graph;
    if (!x || !x->on) { not_gated(v, "the eager path (--graph runs and checks the graph path)"); return; }
    v->limit = 0, v->value = NAN;
    if (x->why[0]) {
        v->pass = 0, v->value = INFINITY;
        snprintf(v->detail, sizeof v->detail, "the launch cannot be captured into a graph: %s", x->why);
    } else if (!x->compared) {
        v->pass = 1;
        snprintf(v->detail, sizeof v->detail, "the kernel declares atomics: the graph's replays are held to the "
                 "gates, not compared bit for bit with an eager run");
    } else {
        v->value = (double)x->differ, v->pass = x->differ == 0 && x->guard_differ == 0;
        if (v->pass)
            snprintf(v->detail, sizeof v->detail, "the graph's replay equals an eager run bit for bit");
        else if (x->differ)
            snprintf(v->detail, sizeof v->detail, "the graph's replay differs from an eager run in %zu elements, "
                     "first at (%zu,%zu): graph %.9g, eager %.9g", x->differ, x->row, x->col, x->graph_v, x->eager_v);
        else
            snprintf(v->detail, sizeof v->detail, "the graph's replay differs from an eager run in %zu guard-band "
                     "bytes", x->guard_differ);
    }
}

/* snr: low precision, SNR against the reference on the same quantized
 * inputs at least the format's gate: E4M3 25, E5M2 20, FP4 10 dB (catches a
 * product computed wrong, where element tolerances mean nothing). */
static void gate_snr(const struct stats *s, const struct gate_in *g, struct verdict *v)
{
    if (!g->q_gate) { not_gated(v, Q_ONLY); return; }
    v->value = s->snr_db, v->limit = g->q_gate, v->pass = s->snr_db >= g->q_gate;
    snprintf(v->detail, sizeof v->detail, "SNR %.1f dB against the double product of the same quantized "
             "inputs and scales; %s needs %.0f dB", s->snr_db, QFMTS[g->q->f].name, g->q_gate);
}

#define BASELINE_SLACK_DB 3.0   /* a candidate may be this much below the reference arm's SNR */
#define BASELINE_CAP_DB 120.0   /* ... whose SNR counts up to this */

/* baseline: low precision, SNR no more than 3 dB below the reference
 * arm's on the same shapes (ref.c's same-precision product: fp32 block
 * sums in the kernels' order, output rounded), unless the run declares
 * --trades-precision (catches a kernel that loses precision, e.g. a narrow
 * accumulator, while staying above the format's gate). */
static void gate_baseline(const struct stats *s, const struct gate_in *g, struct verdict *v)
{
    if (!g->q_gate) { not_gated(v, Q_ONLY); return; }
    double base = s->lp_snr_db < BASELINE_CAP_DB ? s->lp_snr_db : BASELINE_CAP_DB;
    v->value = s->snr_db - base, v->limit = -BASELINE_SLACK_DB;
    v->pass = v->value >= v->limit || g->trades;
    snprintf(v->detail, sizeof v->detail, "SNR %.1f dB vs the reference arm's %.1f dB (ref.c, the kernels' "
             "order in fp32; counted up to %.0f): %.1f dB apart, at most %.0f below%s%s", s->snr_db,
             s->lp_snr_db, BASELINE_CAP_DB, v->value, BASELINE_SLACK_DB,
             g->trades ? "; waived: --trades-precision " : "", g->trades ? g->trades : "");
}

/* The quantize-only stage's mismatches of one kind over both operands, and
 * the first one's line. */
static size_t q_stage_bad(const struct qrun *q, int scale, const char **at)
{
    size_t n = 0;
    *at = "";
    for (int i = 1; i >= 0; i--) {
        size_t k = scale ? q->st[i].scale_bad : q->st[i].code_bad;
        if (k) *at = scale ? q->st[i].scale_at : q->st[i].code_at;
        n += k;
    }
    return n;
}

/* scale (which = 1) or conversion (0): the quantize-only stage's
 * mismatches against ref.c; fails when the stage did not run. */
static void gate_qstage(const struct gate_in *g, struct verdict *v, int which)
{
    if (!g->q_gate) { not_gated(v, Q_ONLY); return; }
    const struct qrun *q = g->q;
    const char *at;
    v->value = (double)q_stage_bad(q, which, &at), v->limit = 0, v->pass = q->stage_done && v->value == 0;
    if (!q->stage_done)
        snprintf(v->detail, sizeof v->detail, "the quantize-only stage did not run: nothing was compared");
    else if (which)
        snprintf(v->detail, sizeof v->detail, "%.0f of %zu scales of the quantize-only kernel differ from ref.c's%s%s",
                 v->value, q->op[0].nblocks + q->op[1].nblocks, *at ? "; first: " : "", at);
    else
        snprintf(v->detail, sizeof v->detail, "%.0f codes of the quantize-only kernel differ from ref.c's%s%s",
                 v->value, *at ? "; first: " : "", at);
}

/* scale: low precision, the quantize-only kernel's scales equal ref.c's,
 * bit for bit (catches a wrong amax, rounding of the scale or MX rule). */
static void gate_scale(const struct stats *s, const struct gate_in *g, struct verdict *v)
{
    (void)s;
    gate_qstage(g, v, 1);
}

/* conversion: low precision, the quantize-only kernel's codes equal
 * ref.c's (round to nearest even from the exact fp32 value, saturating). */
static void gate_conversion(const struct stats *s, const struct gate_in *g, struct verdict *v)
{
    (void)s;
    gate_qstage(g, v, 0);
}

/* How a gate's column shows its verdict ("-" for a NaN value: not gated). */
enum gate_fmt {
    SHOW_RATIO,   /* value / limit: <= 1 passes */
    SHOW_COUNT,   /* a count */
    SHOW_VALUE,   /* the value itself */
    SHOW_DB,      /* decibels; +inf is "exact" */
};

/* The gates, in the order they are printed. */
struct gate { const char *name, *column; enum gate_fmt show; gate_fn eval; };
static const struct gate GATES[] = {
    { "allclose", "allclose", SHOW_RATIO, gate_allclose },
    { "same-precision", "same-prec", SHOW_RATIO, gate_same_precision },
    { "nan-inf", "nan/inf", SHOW_COUNT, gate_nan_inf },
    { "written", "unwritten", SHOW_COUNT, gate_written },
    { "in-bounds", "oob", SHOW_COUNT, gate_in_bounds },
    { "nontrivial", "nontriv", SHOW_VALUE, gate_nontrivial },
    { "bias", "bias", SHOW_RATIO, gate_bias },
    { "rounding", "rne", SHOW_COUNT, gate_rounding },
    { "sign-bias", "sbias", SHOW_RATIO, gate_sign_bias },
    { "snr", "snr-gate", SHOW_DB, gate_snr },
    { "baseline", "vs-base", SHOW_DB, gate_baseline },
    { "scale", "scale", SHOW_COUNT, gate_scale },
    { "conversion", "convert", SHOW_COUNT, gate_conversion },
    { "worst-tile", "tile-dB", SHOW_DB, gate_worst_tile },
    { "group", "group-dB", SHOW_DB, gate_group },
    { "checksum", "sums", SHOW_RATIO, gate_checksum },
    { "determinism", "repeat", SHOW_COUNT, gate_determinism },
    { "graph", "graph", SHOW_COUNT, gate_graph },
};
#define N_GATES (sizeof GATES / sizeof *GATES)

/* The index of the gate named `name` in GATES. */
static int gate_index(const char *name)
{
    for (size_t g = 0; g < N_GATES; g++)
        if (strcmp(GATES[g].name, name) == 0) return (int)g;
    die(EXIT_DEVICE, "internal: no gate %s", name);
}

/* --- checking one output: its result, tolerances, storage read back, every gate --- */

/* Everything known about one output of one case. */
struct result {
    struct plan plan;
    struct refs refs;
    struct stats s;
    struct verdict v[N_GATES];
    int pass;                     /* every gate passed (on the last check made) */
    const char *failed_when;      /* "check", "repeated run" or "re-check after timing" */
    struct repeat rep;            /* what --repeat found */
    struct graphcheck graph;      /* what --graph found */
    double atol;                  /* the allclose atol it is held to */
    int timed;                    /* on a launch's owner: its time is known */
    struct timing t;
    double tflops, pct_peak;      /* pct_peak < 0: peak not known */
    float *out;                   /* --dump: the output as the first check decoded it (rows x cols) */
    char sha256[65];              /* the first run's storage bytes (guard bands not included), hex; "": not read */
    struct ident id;              /* the op's identities on the output as last checked (the checksum gate's) */
};

/* An attention gradient's default rtol and atol: at least GRAD_TOL_ULPS
 * unit roundoffs of its dtype (bf16 0.0625, f16 the default 0.01).  A
 * flash-attention backward reads O in the kernel's dtype; that rounding
 * enters every row's D = sum O·dO and the cancellation in ds = P·(dP - D)
 * amplifies it, growing with the sequence: on the H200 the portable kernels'
 * bf16 dK reached 0.74 of a 10-roundoff limit at 2048 tokens.  The
 * same-precision gate stays the tight one.  Scaled inputs (logits up to
 * |s| ~ 30 on the largest heads) make some rows more peaked and that cancellation
 * sharper: the CPU candidate's bf16 dK reached 1.45 of this limit over 4
 * seeds of scaled attention cases, and 1.16 of twice it over 8 more, so no
 * count of roundoffs is principled there.  Nor on uniform inputs where few
 * peaked rows meet a key: on the H200 the fused backward's bf16 dV reached
 * 1.06 of this limit (seed 43 of a varlen case with 700 queries on 129
 * keys: an element of -0.07 summed from terms of 105 in magnitude, its
 * error 0.116 that of P rounded to bf16, while lp's largest was 0.34).
 * So the atol of a gradient is at least the same-precision reference's
 * largest error (an element error the arithmetic explains). */
#define GRAD_TOL_ULPS 16.0

static double gate_grad_tol(enum dtype t, double dflt)
{
    return fmax(dflt, GRAD_TOL_ULPS * DTYPES[t].unit_roundoff);
}

/* Whether --rtol/--atol apply to output o: to the outputs of the case's
 * dtype (every output of a low-precision case).  Attention's LSE, fp32
 * whatever the case's dtype, keeps the fp32 defaults: loosening O for a
 * bf16 case must not loosen LSE 100-fold unasked. */
static int gate_takes_options(const struct run *r, int o)
{
    return r->q || r->out[o].dt == r->c->dt;
}

/* The options' tolerances (gate_takes_options), else output o's dtype's
 * (for a gradient, gate_grad_tol of them). */
static double gate_rtol(const struct run *r, int o)
{
    const struct output *p = &r->out[o];
    if (r->o->rtol >= 0 && gate_takes_options(r, o)) return r->o->rtol;
    return p->grad ? gate_grad_tol(p->dt, DTYPES[p->dt].rtol) : DTYPES[p->dt].rtol;
}

/* The options' atol, else the dtype's: what the nontrivial gate measures
 * the reference against. */
static double gate_base_atol(const struct run *r, int o)
{
    return r->o->atol >= 0 && gate_takes_options(r, o) ? r->o->atol : DTYPES[r->out[o].dt].atol;
}

/* The allclose atol of output o: gate_base_atol; for a gradient (which has
 * no natural unit: its scale follows dO and Q) that times the reference's
 * rms when the rms exceeds 1.  Given --atol, that product alone; else the
 * atol is first widened by gate_grad_tol, and is at least the
 * same-precision reference's largest error (GRAD_TOL_ULPS says why). */
static double gate_atol(const struct run *r, int o, const struct result *res)
{
    const struct output *p = &r->out[o];
    if (!p->grad) return gate_base_atol(r, o);
    double sum = 0;
    size_t n = 0;
    const struct plan *pl = &res->plan;
    const struct refs *f = &res->refs;
    for (size_t i = 0; i < pl->nr * p->cols; i++)
        if (isfinite(f->ref_r[i])) sum += f->ref_r[i] * f->ref_r[i], n++;
    for (size_t i = 0; i < p->rows && pl->nc; i++)
        for (size_t c = 0; c < pl->nc && !pl->row_in[i]; c++) {
            double v = f->ref_c[i * pl->nc + c];
            if (isfinite(v)) sum += v * v, n++;
        }
    double rms = n ? sqrt(sum / (double)n) : 0, atol = gate_base_atol(r, o);
    if (r->o->atol >= 0 && gate_takes_options(r, o)) return atol * (rms > 1 ? rms : 1);
    atol = gate_grad_tol(p->dt, atol) * (rms > 1 ? rms : 1);
    return fmax(atol, refs_max_err(pl, p, f, f->lp_r, f->lp_c));
}

/* Exit 2 if --rtol/--atol loosen case c's dtype defaults without --why.
 * The options are the command line's; a case from a shapes file is named
 * after them as the one they loosen. */
static void gate_check_tolerance(const struct opts *o, const struct kcase *c)
{
    const struct dtype_info *t = &DTYPES[c->dt];
    if ((o->rtol <= t->rtol && o->atol <= t->atol) || o->why) return;
    char which[sizeof c->where + sizeof c->label + 8] = "";
    if (strcmp(c->where, "command line") != 0) snprintf(which, sizeof which, " (%s: %s)", c->where, c->label);
    die(EXIT_USAGE, "command line: --rtol/--atol looser than the %s defaults (rtol %g, atol %g) need --why \"reason\"%s",
        t->name, t->rtol, t->atol, which);
}

/* Decode output o from its raw storage (with guard bands), planting the
 * --inject fault (if any): its values (rows x cols, caller frees);
 * *unwritten counts the elements still holding the poison bytes, *outside
 * the guard bytes that no longer do. */
static float *gate_decode(struct run *r, int o, unsigned char *raw, const struct result *res, size_t *unwritten,
                          size_t *outside)
{
    const struct output *p = &r->out[o];
    size_t es = DTYPES[p->dt].bytes;
    struct inject_ctx ix = { .r = r, .oi = o, .o = p, .plan = &res->plan, .raw = raw, .atol = res->atol,
                             .key = mix64(r->key ^ 0x696e6a) };
    const struct inject *inj = run_inject(r, INJ_RAW);
    if (inj) inj->apply(&ix);
    *unwritten = *outside = 0;
    unsigned char *st = raw + p->guard;
    for (size_t i = 0; i < p->elems; i++) {
        size_t k = 0;
        while (k < es && st[i * es + k] == 0xff) k++;
        *unwritten += k == es;
    }
    for (size_t i = 0; i < p->guard; i++) *outside += (raw[i] != 0xff) + (st[p->elems * es + i] != 0xff);
    ix.out = run_decode(p->dt, st, p->rows, p->cols, p->srow, p->scol);
    if ((inj = run_inject(r, INJ_VALUES))) inj->apply(&ix);
    return ix.out;
}

/* Run every gate on output o from its raw storage (downloaded if raw is
 * NULL): sets res->s, res->v and res->pass; res->plan and res->refs must be
 * ready.  After a refused capture (--graph) the graph gate alone runs: the
 * outputs hold no replay's result.  `when` names the check in failure
 * lines. */
static void gate_output(struct run *r, int o, struct result *res, unsigned char *raw, const char *when)
{
    unsigned char *own = raw ? NULL : (raw = run_output_raw(r, o));
    size_t unwritten, outside;
    float *out = gate_decode(r, o, raw, res, &unwritten, &outside);
    struct gate_in g = { &r->out[o], &res->plan, &res->refs, out, unwritten, outside, r->out[o].dt,
                         gate_rtol(r, o), res->atol, gate_base_atol(r, o), r->inputs_nonzero, r->c->inputs, &res->rep,
                         r->q, r->q ? QFMTS[r->q->f].snr_gate : 0, r->o->trades_precision, &res->graph,
                         run_inputs_written(r), &res->id };
    free(res->s.tiles);
    free(res->s.segs);
    stats_compute(&res->s, &g);
    memset(&res->id, 0, sizeof res->id);
    if (r->c->op->identity && !res->graph.why[0]) r->c->op->identity(r, o, out, &res->id);
    res->pass = 1;
    size_t graph = (size_t)gate_index("graph");
    for (size_t k = 0; k < N_GATES; k++) {
        memset(&res->v[k], 0, sizeof res->v[k]);
        if (res->graph.why[0] && k != graph) not_gated(&res->v[k], "not run: the launch could not be captured");
        else GATES[k].eval(&res->s, &g, &res->v[k]);
        res->pass &= res->v[k].pass;
    }
    res->failed_when = when;
    if (r->o->dump_dir && !res->out) res->out = out;   /* dump.c writes it and frees it */
    else free(out);
    free(own);
}

/* The digest of output p's storage bytes in raw (with its guard bands,
 * which are not hashed) into hex[65]: the same bytes on two devices give
 * the same digest (a node run compares them across devices, node.c). */
static void gate_digest(const struct output *p, const unsigned char *raw, char hex[65])
{
    struct sha256 h;
    sha256_init(&h);
    sha256_update(&h, raw + p->guard, p->elems * DTYPES[p->dt].bytes);
    sha256_hex(&h, hex);
}

/* The elements of output p whose bytes differ between raw storages a and
 * b (guard bands not counted), and the first of them, in row-major order,
 * at (*row, *col). */
static size_t gate_differing(const struct output *p, const unsigned char *a, const unsigned char *b, size_t *row,
                             size_t *col)
{
    size_t es = DTYPES[p->dt].bytes, n = 0;
    for (size_t i = 0; i < p->rows; i++)
        for (size_t j = 0; j < p->cols; j++) {
            size_t at = p->guard + (size_t)((int64_t)i * p->srow + (int64_t)j * p->scol) * es;
            if (memcmp(a + at, b + at, es) != 0 && !n++) *row = i, *col = j;
        }
    return n;
}

/* Compare output p's storage from a graph's replay (graph) with an eager
 * run's (eager) into x: the elements and guard-band bytes that differ, and
 * the first differing element. */
static void gate_graph_compare(const struct output *p, const unsigned char *graph, const unsigned char *eager,
                               struct graphcheck *x)
{
    size_t es = DTYPES[p->dt].bytes, end = p->guard + p->elems * es;
    x->compared = 1, x->guard_differ = 0;
    for (size_t i = 0; i < p->guard; i++)
        x->guard_differ += (graph[i] != eager[i]) + (graph[end + i] != eager[end + i]);
    x->differ = gate_differing(p, graph, eager, &x->row, &x->col);
    if (!x->differ) return;
    size_t e = (size_t)((int64_t)x->row * p->srow + (int64_t)x->col * p->scol);
    x->graph_v = dt_load(p->dt, graph + p->guard, e), x->eager_v = dt_load(p->dt, eager + p->guard, e);
}

/* The first element where two raw storages of output o differ, as (row,
 * col) and the two values; 0 if they are bitwise equal. */
static int gate_first_difference(const struct output *p, const unsigned char *a, const unsigned char *b,
                                 struct repeat *rep)
{
    size_t es = DTYPES[p->dt].bytes;
    if (memcmp(a, b, p->elems * es + 2 * p->guard) == 0) return 0;
    if (!gate_differing(p, a, b, &rep->diff_row, &rep->diff_col)) {
        rep->diff_row = rep->diff_col = SIZE_MAX;   /* the guard bands differ */
        return 1;
    }
    size_t e = (size_t)((int64_t)rep->diff_row * p->srow + (int64_t)rep->diff_col * p->scol);
    rep->first = dt_load(p->dt, a + p->guard, e), rep->other = dt_load(p->dt, b + p->guard, e);
    return 1;
}
