/* src/report.c — what a run prints: the machine summary, one table row per
 * output with every gate, the launch geometry and timer lines, the rounds, and
 * the same as JSON objects (--json).  Relies on gates.c and stats.c (the
 * verdicts), timer.c (times, rounds), worker.c (lost cases), inject.c (a
 * fault's gate), lowprec.c (labels), gpu.c and compile.c (the machine, the
 * arms), case.c, run.c, ref.c (formats) and util.c (JSON writers). */

/* Tallies of a whole command, for the last line and the exit code. */
struct tally {
    int cases, cases_failed, cases_skipped, outputs, outputs_failed, isa_failed, faulted, hung, dumped;
    int timing_wrote;             /* cases whose timed launches wrote into the inputs (their arms' gates passed) */
};

/* Output o's rate from its timed median: TFLOP/s and % of the device's
 * peak (pct_peak < 0: not known). */
static void report_rate(const struct run *r, int o, struct result *x)
{
    /* fp8 matrix units run at twice the fp16 rate (sm_89+, gfx942, gfx950); FP4's rate is not known here */
    double peak = r->c->dt == DT_F32 ? r->d->peak_f32 : r->d->peak_mma16;
    if (r->q) peak = r->q->f == Q_E2M1 ? 0 : 2 * r->d->peak_mma16;
    x->tflops = r->out[o].flops / (x->t.median_us * 1e-6) / 1e12;
    x->pct_peak = peak > 0 ? 100.0 * x->tflops * 1e12 / peak : -1;
}

static void print_machine(FILE *f, const struct device *d)
{
    fprintf(f, "kgate %s\n", KGATE_VERSION);
    fprintf(f, "  %-12s %s\n", "device:", d->name);
    if (d->kind == DEV_CPU) {
        fprintf(f, "  %-12s cpu (ref.c candidate on %d threads; not a GPU kernel)\n", "arch:",
                d->attr[AT_SMS]);
        fprintf(f, "  %-12s ref.c's %s build of the quantized products and attention\n", "references:",
                ref_fast() ? "AVX2+FMA" : "portable");
    } else {
        fprintf(f, "  %-12s %s (%s %d.%d)\n", "arch:", d->arch, PF_NAME[d->pf],
                d->attr[AT_CC_MAJOR], d->attr[AT_CC_MINOR]);
        fprintf(f, "  %-12s %d SMs/CUs, clock %d MHz, memory clock %d MHz, bus %d bits\n",
                "compute:", d->attr[AT_SMS], d->attr[AT_CLOCK_KHZ] / 1000,
                d->attr[AT_MEM_CLOCK_KHZ] / 1000, d->attr[AT_BUS_BITS]);
        fprintf(f, "  %-12s PCI %s, UUID %s\n", "identity:", *d->pci ? d->pci : "not known",
                *d->uuid ? d->uuid : "not known");
        if (d->pf == PF_CUDA)
            fprintf(f, "  %-12s CUDA driver API %d.%d, compiler %s\n", "software:",
                    d->driver_version / 1000, d->driver_version % 1000 / 10, d->compiler);
        else
            fprintf(f, "  %-12s HIP driver %d, compiler %s\n", "software:", d->driver_version, d->compiler);
    }
    fprintf(f, "  %-12s %.1f GiB, L2 %.1f MiB, flush buffer %s\n", "memory:",
            d->mem_bytes / 1073741824.0, d->attr[AT_L2_BYTES] / 1048576.0, d->flush_note);
    if (d->peak_f32 > 0)
        fprintf(f, "  %-12s fp32 %.1f TFLOP/s, fp16/bf16 matrix %.1f TFLOP/s (SMs x clock x "
                "per-clock rate of %s)\n", "peak:", d->peak_f32 / 1e12, d->peak_mma16 / 1e12,
                d->arch_base);
    else
        fprintf(f, "  %-12s not known for %s: %% of peak is not printed\n", "peak:", d->arch_base);
}

/* The case column: the longest label of the command's cases, at most
 * LABEL_MAX (a longer label gets a line of its own above its row), so that
 * the default table fits 120 columns. */
#define LABEL_MAX 56
static int LABEL_W = 40;

/* Start a row: the case's label in the case column.  A label wider than
 * the column is printed whole on a line of its own, and the row starts
 * below it under an empty case cell, so no column moves. */
static void print_label(const char *label)
{
    if ((int)strlen(label) > LABEL_W) printf("%s\n%-*s", label, LABEL_W, "");
    else printf("%-*s", LABEL_W, label);
}

/* The table's width, which rows of notes (skip, fault, hung, cached) keep to. */
#define TABLE_COLS 120

/* A row that carries a note instead of gates: label, output, verdict and
 * the note, cut with "..." where it would pass TABLE_COLS (its full text
 * is in --json, and for a lost case in the summary). */
static void print_note(const char *label, const char *out, const char *verdict, const char *note)
{
    int room = TABLE_COLS - LABEL_W - 14, n = (int)strlen(note);
    print_label(label);
    if (n <= room) printf(" %-3s %-7s %s\n", out, verdict, note);
    else printf(" %-3s %-7s %.*s...\n", out, verdict, room > 3 ? room - 3 : 0, note);
}

/* The column heads: the default table (verdict, the binding gate, the
 * time) or, with --wide, every gate's column, the metrics and the timer's
 * spread. */
static void print_header(const struct opts *o)
{
    printf("%-*s %-3s %-7s", LABEL_W, "case", "out", "verdict");
    if (!o->wide) {
        printf(" %-20s %10s %9s %6s\n", "binding gate (use)", "median-us", "TFLOP/s", "%peak");
        return;
    }
    for (size_t g = 0; g < N_GATES; g++) printf(" %9s", GATES[g].column);
    printf(" %7s %7s %8s %10s %10s %10s %4s %9s %6s\n", "snr-dB", "unq-dB", "rel-l2", "median-us", "min-us",
           "max-us", "n", "TFLOP/s", "%peak");
}

/* How much of its limit gate g's verdict v uses: 1 is at the limit, above
 * 1 fails.  Ratios: value / limit; counts: count / allowed (a count that
 * must be zero: 0, or infinite when it is not); decibels (at least the
 * limit): the error power over the power the limit allows; nontrivial
 * (a measure over the need): need / measure.  NaN when not gated. */
static double gate_use(size_t g, const struct verdict *v)
{
    if (isnan(v->value)) return NAN;
    switch (GATES[g].show) {
    case SHOW_RATIO: return v->limit > 0 ? v->value / v->limit : v->value > 0 ? INFINITY : 0;
    case SHOW_COUNT:
        if (v->pass) return v->limit > 0 && g != (size_t)gate_index("nan-inf") ? v->value / v->limit : 0;
        return v->limit > 0 ? fmax(v->value / v->limit, 1.01) : INFINITY;
    case SHOW_DB: return isinf(v->value) ? (v->value > 0 ? 0 : INFINITY) : pow(10, (v->limit - v->value) / 10);
    case SHOW_VALUE: return v->value > 0 ? 1 / v->value : INFINITY;
    }
    return NAN;
}

/* The binding gate of an output, the one nearest its limit (gate_use), as
 * "name use" in buf.  A gate that passed beyond its limit was waived (a
 * truth of zero for nontrivial, --trades-precision for rounding) and binds
 * nothing. */
static void format_binding(char *buf, size_t n, const struct result *x)
{
    double worst = -1;
    size_t at = 0;
    for (size_t g = 0; g < N_GATES; g++) {
        double u = gate_use(g, &x->v[g]);
        if (!isnan(u) && !(x->v[g].pass && u > 1) && u > worst) worst = u, at = g;
    }
    char use[16];
    if (worst < 0) snprintf(use, sizeof use, "-");
    else if (isinf(worst)) snprintf(use, sizeof use, "inf");
    else if (worst >= 99.5) snprintf(use, sizeof use, ">99");
    else snprintf(use, sizeof use, "%.2f", worst);
    snprintf(buf, n, "%-14s %5s", worst < 0 ? "-" : GATES[at].name, use);
}

/* A gate's value as its column shows it; '!' marks a failed gate. */
static void format_gate(char *buf, size_t n, size_t g, const struct verdict *v)
{
    char mark = v->pass ? ' ' : '!';
    if (isnan(v->value)) { snprintf(buf, n, "-%c", mark); return; }
    switch (GATES[g].show) {
    case SHOW_COUNT: snprintf(buf, n, "%.0f%c", v->value, mark); break;
    case SHOW_VALUE: snprintf(buf, n, "%.3g%c", v->value, mark); break;
    case SHOW_DB:
        if (isfinite(v->value)) snprintf(buf, n, "%.1f%c", v->value, mark);
        else snprintf(buf, n, "%s%c", v->value > 0 ? "exact" : "-inf", mark);
        break;
    case SHOW_RATIO:
        snprintf(buf, n, "%.2f%c", v->limit > 0 ? v->value / v->limit : v->value > 0 ? INFINITY : 0, mark);
        break;
    }
}

/* Which stages of a failed low-precision output are wrong, in pipeline
 * order: "scale", "conversion" (the quantize-only kernel against ref.c), and
 * "kernel math" (the product of ref.c's own quantized inputs and scales
 * fails a gate); each as a line in why[].  Returns how many. */
static int q_stages(const struct result *x, char why[3][256])
{
    int n = 0, g_scale = gate_index("scale"), g_conv = gate_index("conversion");
    if (!x->v[g_scale].pass)
        snprintf(why[n++], 256, "scale: the quantize-only kernel's scales differ from ref.c's");
    if (!x->v[g_conv].pass)
        snprintf(why[n++], 256, "conversion: the quantize-only kernel's codes differ from ref.c's");
    char names[160] = "";
    for (size_t g = 0; g < N_GATES; g++)
        if (!x->v[g].pass && (int)g != g_scale && (int)g != g_conv)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", *names ? ", " : "", GATES[g].name);
    if (*names)
        snprintf(why[n++], 256, "kernel math: the product of ref.c's own quantized inputs and scales fails %s", names);
    return n;
}

/* The waves of one kernel launch on `sms` SMs/CUs: its tiles (its blocks, or
 * the tiles a persistent grid strides over), the tiles one wave holds (sms x
 * blocks per SM, 0 when either is not known; a persistent grid's blocks),
 * tiles / per_wave waves, and the percentage of the last wave's slots that
 * hold a block (100 when the tiles fill every wave; NAN when not known). */
struct waves { uint64_t tiles, per_wave; double waves, last_pct; };

static struct waves geom_waves(const struct kgeom *g, int sms)
{
    uint64_t blocks = (uint64_t)g->grid[0] * g->grid[1] * g->grid[2];
    struct waves w = { g->tiles ? g->tiles : blocks, 0, NAN, NAN };
    if (g->tiles) w.per_wave = blocks;   /* persistent: each block holds one tile at a time */
    else if (g->per_sm > 0 && sms > 0) w.per_wave = (uint64_t)sms * (uint64_t)g->per_sm;
    if (!w.per_wave) return w;
    uint64_t last = w.tiles % w.per_wave ? w.tiles % w.per_wave : w.per_wave;
    w.waves = (double)w.tiles / (double)w.per_wave;
    w.last_pct = 100.0 * (double)last / (double)w.per_wave;
    return w;
}

/* Below a timed output's row, one line per kernel its launch ran (GPU; the
 * CPU prints nothing), as on the H200: "  geometry C: kg_gemm_bf16 1024
 * tiles (32x32x1) x 256 threads; 132 SMs x 4 blocks/SM = 528 per wave; 1.94
 * waves, last wave 94% full".  The percentage is rounded into 1..99 unless the last wave is
 * exactly full, so "100% full" never hides an idle slot. */
static void print_geometry(const struct run *r, int o)
{
    const struct launch_geom *lg = &r->geom[o];
    const char *sm = r->d->pf == PF_HIP ? "CU" : "SM", *name = r->out[o].name;
    int sms = r->d->attr[AT_SMS];
    if (r->d->kind == DEV_CPU) return;
    if (!lg->n) printf("  geometry %s: no kernel launched (empty grid)\n", name);
    for (int i = 0; i < lg->n; i++) {
        const struct kgeom *g = &lg->k[i];
        struct waves w = geom_waves(g, sms);
        double pct = w.last_pct < 100 ? fmin(fmax(w.last_pct, 1), 99) : 100;
        if (g->tiles) {
            printf("  geometry %s: %s %" PRIu64 " tile%s on a persistent grid of %" PRIu64 " blocks x %u threads "
                   "(%d %ss, %d block%s/%s fit%s); %.2f waves, last wave %.0f%% full\n", name, g->name, w.tiles,
                   w.tiles == 1 ? "" : "s", w.per_wave, g->threads, sms, sm, g->per_sm, g->per_sm == 1 ? "" : "s",
                   sm, g->per_sm == 1 ? "s" : "", w.waves, pct);
            continue;
        }
        printf("  geometry %s: %s %" PRIu64 " tile%s (%ux%ux%u) x %u threads; %d %ss", name, g->name, w.tiles,
               w.tiles == 1 ? "" : "s", g->grid[0], g->grid[1], g->grid[2], g->threads, sms, sm);
        if (w.per_wave)
            printf(" x %d blocks/%s = %" PRIu64 " per wave; %.2f waves, last wave %.0f%% full\n", g->per_sm, sm,
                   w.per_wave, w.waves, pct);
        else
            printf(", blocks/%s not known (no answer from the occupancy API): waves not known\n", sm);
    }
}

/* The table row of output o; outputs computed by another output's launch
 * show "with <owner>" where the time would be. */
static void print_row(const struct run *r, int o, const struct result *res)
{
    const struct output *p = &r->out[o];
    const struct result *x = &res[o];
    int wide = r->o->wide;
    print_label(r->c->label);
    printf(" %-3s %-7s", p->name, x->pass ? "pass" : "FAIL");
    if (wide) {
        for (size_t g = 0; g < N_GATES; g++) {
            char buf[32];
            format_gate(buf, sizeof buf, g, &x->v[g]);
            printf(" %9s", buf);
        }
        printf(" %7.1f", x->s.snr_db);
        if (isnan(x->s.hp_snr_db)) printf(" %7s", "-"); else printf(" %7.1f", x->s.hp_snr_db);
        printf(" %8.2e", x->s.rel_l2);
    } else {
        char bind[40];
        format_binding(bind, sizeof bind, x);
        printf(" %-20s", bind);
    }
    /* the time cells: median (or the output it was timed with), min, max, samples, TFLOP/s, % of peak */
    char t[6][32] = { "-", "-", "-", "-", "-", "-" };
    if (p->launch != o && res[p->launch].timed) {
        snprintf(t[0], sizeof t[0], "with %s", r->out[p->launch].name);
    } else if (x->timed) {
        snprintf(t[0], sizeof t[0], "%.1f", x->t.median_us);
        snprintf(t[1], sizeof t[1], "%.1f", x->t.min_us);
        snprintf(t[2], sizeof t[2], "%.1f", x->t.max_us);
        snprintf(t[3], sizeof t[3], "%d", x->t.n);
        snprintf(t[4], sizeof t[4], "%.2f", x->tflops);
        if (x->pct_peak >= 0) snprintf(t[5], sizeof t[5], "%.1f", x->pct_peak);
    }
    if (wide) printf(" %10s %10s %10s %4s %9s %6s\n", t[0], t[1], t[2], t[3], t[4], t[5]);
    else printf(" %10s %9s %6s\n", t[0], t[4], t[5]);
    if (x->timed && wide) print_geometry(r, o);
    for (size_t g = 0; g < N_GATES; g++)
        if (!x->v[g].pass)
            printf("    FAIL %s (%s): %s\n", GATES[g].name, x->failed_when, x->v[g].detail);
    if (r->q && !x->pass) {
        char why[3][256];
        int n = q_stages(x, why);
        for (int i = 0; i < n; i++) printf("    stage: %s\n", why[i]);
    }
}

/* A timed output's "geometry" member for --json (GPU; the CPU adds none):
 * per kernel its launch ran, the numbers print_geometry prints, with null
 * for blocks_per_sm, per_wave, waves and last_wave_pct when not known. */
static void json_geometry(FILE *f, const struct run *r, int o)
{
    const struct launch_geom *lg = &r->geom[o];
    int sms = r->d->attr[AT_SMS];
    if (r->d->kind == DEV_CPU) return;
    fprintf(f, ",\"geometry\":[");
    for (int i = 0; i < lg->n; i++) {
        const struct kgeom *g = &lg->k[i];
        struct waves w = geom_waves(g, sms);
        fprintf(f, "%s{", i ? "," : "");
        json_str(f, "kernel", g->name, 1);
        fprintf(f, "\"grid\":[%u,%u,%u],\"tiles\":%" PRIu64 ",\"persistent\":%s,\"threads\":%u,\"sms\":%d,",
                g->grid[0], g->grid[1], g->grid[2], w.tiles, g->tiles ? "true" : "false", g->threads, sms);
        if (w.per_wave) fprintf(f, "\"blocks_per_sm\":%d,\"per_wave\":%" PRIu64 ",", g->per_sm, w.per_wave);
        else fprintf(f, "\"blocks_per_sm\":null,\"per_wave\":null,");
        json_num(f, "waves", w.waves, 1);
        json_num(f, "last_wave_pct", w.last_pct, 0);
        fprintf(f, "}");
    }
    fprintf(f, "]");
}

/* Output k's time and geometry as JSON members (leading comma), when timed. */
static void json_time(FILE *f, const struct run *r, int k, const struct result *x)
{
    if (x->timed) {
        fprintf(f, ",\"time\":{");
        json_num(f, "median_us", x->t.median_us, 1);
        json_num(f, "q1_us", x->t.q1_us, 1);
        json_num(f, "q3_us", x->t.q3_us, 1);
        json_num(f, "min_us", x->t.min_us, 1);
        json_num(f, "max_us", x->t.max_us, 1);
        fprintf(f, "\"n\":%d,", x->t.n);
        json_num(f, "median_rse", x->t.rse, 1);
        fprintf(f, "\"throttled\":%d,", x->t.throttled);
        json_num(f, "sm_clock_mhz", x->t.clock_n ? x->t.clock_mhz : NAN, 1);
        json_num(f, "sm_clock_min_mhz", x->t.clock_n ? x->t.clock_min_mhz : NAN, 1);
        json_num(f, "tflops", x->tflops, 1);
        json_num(f, "pct_peak", x->pct_peak >= 0 ? x->pct_peak : NAN, 0);
        fprintf(f, "}");
        json_geometry(f, r, k);
    }
}

/* One output of a case as a JSON object: gates, metrics, worst tile and
 * group, time (or the output whose launch it was timed with) and, on a GPU,
 * the timed launch's geometry. */
static void json_output(FILE *f, const struct run *r, int k, const struct result *res)
{
    const struct output *o = &r->out[k];
    const struct result *x = &res[k];
    fprintf(f, "{");
    json_str(f, "name", o->name, 1);
    json_str(f, "dtype", DTYPES[o->dt].name, 1);
    fprintf(f, "\"rows\":%zu,\"cols\":%zu,\"checked\":%zu,\"full\":%s,", o->rows, o->cols, x->s.n,
           x->plan.full ? "true" : "false");
    json_str(f, "verdict", x->pass ? "pass" : "fail", 1);
    if (x->sha256[0]) json_str(f, "sha256", x->sha256, 1);
    fprintf(f, "\"gates\":{");
    for (size_t g = 0; g < N_GATES; g++) {
        fprintf(f, "%s\"%s\":{\"pass\":%s,", g ? "," : "", GATES[g].name, x->v[g].pass ? "true" : "false");
        json_num(f, "value", x->v[g].value, 1);
        json_num(f, "limit", x->v[g].limit, 0);
        fprintf(f, "}");
    }
    fprintf(f, "},\"metrics\":{");
    json_num(f, "max_abs", x->s.max_err, 1);
    json_num(f, "mean_signed", x->s.mean_err, 1);
    json_num(f, "rel_l2", x->s.rel_l2, 1);
    json_num(f, "cosine", x->s.cosine, 1);
    json_num(f, "snr_db", x->s.snr_db, 0);
    fprintf(f, "}");
    if (r->q) {
        char why[3][256];
        int n = x->pass ? 0 : q_stages(x, why);
        fprintf(f, ",\"quant\":{");
        json_str(f, "format", QFMTS[r->q->f].name, 1);
        json_str(f, "scaling", QSCALING[r->c->scaling], 1);
        if (r->c->mx) json_str(f, "mx_rule", r->c->qrule == QR_MX_UP ? "up" : "spec", 1);
        json_num(f, "snr_vs_unquantised_db", x->s.hp_snr_db, 1);
        json_num(f, "reference_arm_snr_db", x->s.lp_snr_db, 1);
        json_num(f, "tensor_core_model_sign_bias_ulps", x->s.sb_tc_ulps, 1);   /* gates.c's allowance */
        fprintf(f, "\"stages\":[");
        for (int i = 0; i < n; i++) fprintf(f, "%s\"%.*s\"", i ? "," : "", (int)strcspn(why[i], ":"), why[i]);
        fprintf(f, "]}");
    }
    if (x->s.worst_tile >= 0)
        fprintf(f, ",\"worst_tile\":[%zu,%zu]", (size_t)x->s.worst_tile / x->s.tc,
               (size_t)x->s.worst_tile % x->s.tc);
    if (x->s.worst_seg >= 0) {
        fprintf(f, ",");
        json_str(f, "worst_segment_kind", o->seg_name, 1);
        fprintf(f, "\"worst_segment\":%ld", x->s.worst_seg);
    }
    if (x->rep.runs > 1) fprintf(f, ",\"repeat\":{\"runs\":%d,\"atomics\":%s}", x->rep.runs,
                                x->rep.atomics ? "true" : "false");
    if (o->launch != k && res[o->launch].timed) {
        fprintf(f, ",");
        json_str(f, "timed_with", r->out[o->launch].name, 0);
    }
    json_time(f, r, k, x);
    fprintf(f, "}");
}

/* One arm's part in one case. */
struct arm_case {
    struct arm *arm;
    struct result *res;           /* per output */
    int pass;                     /* every gate passed; when cached, the ledger's verdict */
    long cached;                  /* > 0: the ledger line whose verdict is reused (no gates ran) */
    double total_us;              /* the sum of its timed launches' medians */
    struct launch_geom geom[MAX_OUT]; /* GPU, per launch owner: the kernels its last launch ran */
    int isa_checked, isa_pass;    /* --expect: the timed kernels hold the class */
    int gates_pass;               /* the correctness gates alone (pass adds --expect) */
    int gated;                    /* its gates ran in this run (not only reused) */
    int inject_target;            /* --inject plants its fault in this arm */
    char isa_why[512];
};

/* The JSON fields that name an arm: its name, role, options and identity. */
static void report_json_arm(FILE *f, const struct arm *a, int comma)
{
    json_str(f, "arm", a->name, 1);
    json_str(f, "role", a->copy ? "aa-copy" : a->candidate ? "candidate" : "reference", 1);
    json_str(f, "source", a->src_name, 1);
    json_str(f, "defines", a->options, 1);
    if (a->diagnostic) fprintf(f, "\"deliverable\":false,");
    json_str(f, "code_sha256", a->code.sha, comma);
}

/* --expect's answer for an arm, as a JSON member (trailing comma). */
static void report_json_isa(FILE *f, const struct opts *o, const struct arm_case *ac)
{
    if (!ac->isa_checked) return;
    fprintf(f, "\"isa\":{");
    json_str(f, "expect", o->expect, 1);
    fprintf(f, "\"pass\":%s,", ac->isa_pass ? "true" : "false");
    json_str(f, "why", ac->isa_why, 0);
    fprintf(f, "},");
}

/* An arm's verdict on a case: fail, pass (its gates ran in this run) or
 * cached (the ledger's verdict reused). */
static const char *report_verdict(const struct arm_case *ac)
{
    return !ac->pass ? "fail" : ac->gated ? "pass" : "cached";
}

/* An arm's outputs as a JSON array member (no comma): every gate of each
 * output whose gates ran, else its name and time. */
static void report_json_outputs(FILE *f, const struct run *r, const struct arm_case *ac)
{
    fprintf(f, "\"outputs\":[");
    for (int k = 0; k < r->nout; k++) {
        if (k) fprintf(f, ",");
        if (ac->gated) {
            json_output(f, r, k, ac->res);
            continue;
        }
        fprintf(f, "{");
        json_str(f, "name", r->out[k].name, 0);
        json_time(f, r, k, &ac->res[k]);
        fprintf(f, "}");
    }
    fprintf(f, "]");
}

/* One case on one arm as one JSON object (no newline). */
static void json_case(FILE *f, const struct run *r, const struct arm_case *ac)
{
    fprintf(f, "{");
    json_str(f, "case", r->c->label, 1);
    json_str(f, "where", r->c->where, 1);
    fprintf(f, "\"seed\":%" PRIu64 ",", r->o->seed);
    json_str(f, "inputs", INPUTS[r->c->inputs], 1);
    json_str(f, "device", r->d->name, 1);
    json_str(f, "arch", r->d->arch, 1);
    if (r->d->kind == DEV_GPU) json_str(f, "pci_bus_id", r->d->pci, 1), json_str(f, "uuid", r->d->uuid, 1);
    json_str(f, "path", r->o->graph ? "graph" : "eager", 1);
    report_json_arm(f, ac->arm, 1);
    if (r->o->why) json_str(f, "why", r->o->why, 1);
    if (r->o->trades_precision) json_str(f, "trades_precision", r->o->trades_precision, 1);
    if (r->o->inject) json_str(f, "inject", r->o->inject, 1);
    if (ac->cached) fprintf(f, "\"cached_from_line\":%ld,", ac->cached);
    report_json_isa(f, r->o, ac);
    json_str(f, "verdict", report_verdict(ac), 1);
    report_json_outputs(f, r, ac);
    fprintf(f, "}");
}

/* The rounds of a compare or noise as JSON fields (trailing comma): for
 * arm a's ledger line, the A/A ratios on the reference's (a = 0) and the
 * ratio and verdict on the candidate's; for a < 0, both.  The band always. */
static void report_json_rounds(FILE *f, const struct rounds *rd, int a)
{
    fprintf(f, "\"rounds\":%d,", rd->n);
    if (rd->copy >= 0 && a <= 0) {
        json_num(f, "aa_ratio", rd->aa_med, 1);
        json_num(f, "aa_lo", rd->aa_lo, 1);
        json_num(f, "aa_hi", rd->aa_hi, 1);
    }
    if (rd->cand >= 0 && (a < 0 || a == rd->cand)) {
        json_num(f, "ratio", rd->ratio_med, 1);
        json_num(f, "ratio_lo", rd->ratio_lo, 1);
        json_num(f, "ratio_hi", rd->ratio_hi, 1);
        json_str(f, "compare", rd->verdict ? rd->verdict : "none", 1);
    }
    if (rd->band_line > 0) fprintf(f, "\"band_from_line\":%ld,", rd->band_line);
    json_num(f, "band", rd->band >= 0 ? rd->band : NAN, 1);
}

/* The timer's line under a timed row: median, quartiles, min, samples,
 * RSE of the median, the SM clock and throttled samples. */
static void print_timer(const struct device *d, const struct timing *t)
{
    printf("    timer: median %.1f us (IQR %.1f-%.1f, min %.1f), n %d, median RSE %.3f%%", t->median_us, t->q1_us,
           t->q3_us, t->min_us, t->n, 100 * t->rse);
    if (t->clock_n)
        printf(", SM clock %.0f MHz (lowest %.0f), %d throttled sample%s dropped\n", t->clock_mhz,
               t->clock_min_mhz, t->throttled, t->throttled == 1 ? "" : "s");
    else
        printf(", SM clock not read (%s)\n", d->kind == DEV_CPU ? "CPU device" : "the code object has no kg_clock");
}

/* What a compare or noise measured, after the arms' rows. */
static void print_rounds(const struct arm_case *ac, const struct rounds *rd)
{
    if (rd->copy >= 0)
        printf("A/A: %s copy / %s time %.4f (%.4f - %.4f over %d rounds): band +-%.2f%%\n", ac[0].arm->name,
               ac[0].arm->name, rd->aa_med, rd->aa_lo, rd->aa_hi, rd->n, 100 * rd->band);
    if (rd->cand < 0) return;
    char band[96];
    if (rd->band_line > 0) snprintf(band, sizeof band, "band +-%.2f%% (ledger line %ld)", 100 * rd->band, rd->band_line);
    else snprintf(band, sizeof band, "band +-%.2f%% (measured now)", 100 * rd->band);
    printf("compare: %s / %s time %.4f (%.4f - %.4f over %d rounds), %s: %s%s\n", ac[rd->cand].arm->name,
           ac[0].arm->name, rd->ratio_med, rd->ratio_lo, rd->ratio_hi, rd->n, band, rd->verdict,
           rd->n < VERDICT_MIN_ROUNDS ? " (faster/slower need at least 7 rounds)" : "");
}

/* Report a case on its arms: table rows (with an arm header line when
 * there are several or the arm is a candidate, and a timer line under each
 * timed row with --wide, or when the arm's verdict came from the ledger)
 * and the rounds; or, with --json, one object per arm and one for the
 * rounds. */
static void report_arms(struct run *r, struct arm_case *ac, int narms, const struct rounds *rd, int pass)
{
    const struct opts *o = r->o;
    if (o->quiet) return;
    for (int a = 0; a < narms; a++) {
        r->geom = ac[a].geom;
        if (o->json) {
            json_case(stdout, r, &ac[a]);
            printf("\n");
            continue;
        }
        if (narms > 1 || ac[a].arm->candidate)
            printf("arm %s: %s%s%s, code object %.12s%s\n", ac[a].arm->name, ac[a].arm->src_name,
                   *ac[a].arm->options ? " " : "", ac[a].arm->options, ac[a].arm->code.sha,
                   ac[a].arm->diagnostic ? " (diagnostic: not deliverable)" : "");
        if (ac[a].cached) {
            char note[160];
            snprintf(note, sizeof note, "verdict of ledger line %ld (same code object and conditions)%s", ac[a].cached,
                     ac[a].gated ? "; gated again:" : "");
            print_note(r->c->label, "-", ac[a].gated || ac[a].gates_pass ? "cached" : "FAIL", note);
        }
        for (int k = 0; k < r->nout; k++) {
            if (ac[a].gated) print_row(r, k, ac[a].res);
            else if (ac[a].res[k].timed && o->wide) print_geometry(r, k);
            if (ac[a].res[k].timed && (o->wide || !ac[a].gated)) print_timer(r->d, &ac[a].res[k].t);
        }
        if (ac[a].isa_checked)
            printf("    %s isa: expect %s: %s\n", ac[a].isa_pass ? "pass" : "FAIL", o->expect, ac[a].isa_why);
    }
    if (r->timed_wrote && !o->json)
        print_note(r->c->label, "-", "FAIL", rd ? "the timed launches wrote into the inputs (stderr); no arm named"
                                                : "the timed launches wrote into the inputs (stderr)");
    if (r->timed_wrote && o->json) {
        printf("{");
        json_str(stdout, "case", r->c->label, 1);
        printf("\"timed_launches_wrote_inputs\":true,\"arms\":%d}\n", narms);
    }
    if (rd && pass && !o->json) print_rounds(ac, rd);
    if (rd && pass && o->json) {
        printf("{");
        json_str(stdout, "case", r->c->label, 1);
        report_json_rounds(stdout, rd, -1);
        printf("\"arms\":%d}\n", narms);
    }
    fflush(stdout);
}

/* Report a skipped case: a table row or a JSON line. */
static void report_skip(const struct kcase *c, const struct opts *o, const char *why)
{
    if (o->quiet) return;
    if (o->json) {
        printf("{");
        json_str(stdout, "case", c->label, 1);
        json_str(stdout, "where", c->where, 1);
        json_str(stdout, "verdict", "skip", 1);
        json_str(stdout, "reason", why, 0);
        printf("}\n");
    } else {
        print_note(c->label, "-", "skip", why);
    }
    fflush(stdout);
}

/* Report a case whose worker died (worker.c): a row (or a JSON line) with
 * the verdict fault or hung and the error in words. */
static void report_lost(const struct kcase *c, const struct opts *o, const struct lost *l)
{
    const char *label = *l->label ? l->label : c->label;
    fflush(stdout);
    if (o->json) {
        printf("{");
        json_str(stdout, "case", label, 1);
        json_str(stdout, "where", c->where, 1);
        json_str(stdout, "verdict", LOST_NAME[l->how], 1);
        json_str(stdout, "error", l->why, 0);
        printf("}\n");
    } else {
        print_note(label, "-", LOST_NAME[l->how], l->why);
    }
    fflush(stdout);
}

/* Count a case whose worker died in tally tl: a failed case, faulted or hung. */
static void tally_lost(struct tally *tl, enum lost_how how)
{
    tl->cases++, tl->cases_failed++;
    if (how == LOST_HUNG) tl->hung++;
    else tl->faulted++;
}

/* The run's departures from the defaults: tolerances (with --why) and a
 * planted fault. */
static void print_why(const struct opts *o)
{
    char rt[32] = "default", at[32] = "default";
    if (o->rtol >= 0) snprintf(rt, sizeof rt, "%g", o->rtol);
    if (o->atol >= 0) snprintf(at, sizeof at, "%g", o->atol);
    if (o->rtol >= 0 || o->atol >= 0)
        printf("tolerance: rtol %s, atol %s on the outputs of each case's dtype (why: %s)\n", rt, at,
               o->why ? o->why : "none given");
    if (o->trades_precision) printf("trades precision: the baseline SNR rule is waived (why: %s)\n", o->trades_precision);
    if (o->inject) {
        const struct inject *inj = inject_find(o->inject);
        printf("inject: %s (%s; the %s gate must catch it)\n", inj->name, inj->what, inj->gate);
    }
}

/* The run's header: the machine, the seed, the inputs, the repeats, the
 * path the launches take. */
static void print_run_header(FILE *f, const struct device *d, const struct opts *o)
{
    print_machine(f, d);
    fprintf(f, "  %-12s %" PRIu64 "\n", "seed:", o->seed);
    fprintf(f, "  %-12s uniform, unless the case's label ends with its distribution (normal, scaled; --inputs)\n",
            "inputs:");
    fprintf(f, "  %-12s %d run%s per case%s\n", "repeat:", o->repeat, o->repeat == 1 ? "" : "s",
            o->repeat > 1 ? " (outputs bitwise equal, or gated when a kernel declares atomics)" : "");
    fprintf(f, "  %-12s %s\n\n", "path:", o->graph ? "graph (each launch captured once into a graph and replayed; "
            "checked against an eager run bit for bit)" : "eager (each launch queued as it is called; --graph: "
            "through a captured graph)");
}

/* Size the label column for the cases: their longest label, at most
 * LABEL_MAX. */
static void report_width(const struct kcase *cases, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((int)strlen(cases[i].label) > LABEL_W) LABEL_W = (int)strlen(cases[i].label);
    if (LABEL_W > LABEL_MAX) LABEL_W = LABEL_MAX;
}

/* Resolve the cases' encodings for the device and size the label column. */
static void report_cases(struct kcase *cases, size_t n, const struct device *d)
{
    for (size_t i = 0; i < n; i++) q_resolve(&cases[i], d);
    report_width(cases, n);
}

/* Resolve the cases for the device and print what comes before the rows:
 * the run's header and, as a table, the departures from the defaults and
 * the column heads.  Returns the stream the summary goes to. */
static FILE *report_start(const struct device *d, const struct opts *o, struct kcase *cases, size_t n)
{
    FILE *summary = o->json ? stderr : stdout;
    print_run_header(summary, d, o);
    report_cases(cases, n, d);
    if (!o->json) {
        print_why(o);
        print_header(o);
    }
    return summary;
}

/* The end of a command: a line per case that faulted or hung (lost[0..nlost),
 * with where it was given and the error), then the last line: cases (those
 * that faulted or hung: their outputs are not counted, none was read),
 * outputs passed and failed, skipped, and the wall time since the command
 * started. */
static void report_tally(FILE *f, const struct tally *tl, const struct lost *lost, int nlost, double wall_s)
{
    fputc('\n', f);
    for (int i = 0; i < nlost; i++)
        fprintf(f, "kgate: %s: %s (%s): %s\n", LOST_NAME[lost[i].how], lost[i].label, lost[i].where, lost[i].why);
    fprintf(f, "kgate: %d case%s", tl->cases, tl->cases == 1 ? "" : "s");
    if (tl->faulted || tl->hung) {
        fprintf(f, " (");
        if (tl->faulted) fprintf(f, "%d faulted%s", tl->faulted, tl->hung ? ", " : "");
        if (tl->hung) fprintf(f, "%d hung", tl->hung);
        fprintf(f, ")");
    }
    fprintf(f, ", %d output%s: %d passed, %d failed", tl->outputs, tl->outputs == 1 ? "" : "s",
            tl->outputs - tl->outputs_failed, tl->outputs_failed);
    if (tl->cases_skipped) fprintf(f, "; %d case%s skipped", tl->cases_skipped, tl->cases_skipped == 1 ? "" : "s");
    if (tl->isa_failed) fprintf(f, "; %d case%s failed --expect", tl->isa_failed, tl->isa_failed == 1 ? "" : "s");
    if (tl->timing_wrote)
        fprintf(f, "; %d case%s failed: the timed launches wrote into the inputs", tl->timing_wrote,
                tl->timing_wrote == 1 ? "" : "s");
    fprintf(f, "; %.1f s\n", wall_s);
}

/* The --seeds summary: per case, on how many of the n seeds it passed and
 * the first seed it failed on; returns the cases that failed on some seed. */
static size_t report_seeds(const struct kcase *cases, size_t n, const struct opts *o, const int *passed,
                           const uint64_t *first_fail, const int *skip_case)
{
    size_t bad = 0, skipped = 0;
    report_width(cases, n);
    printf("\nseeds %" PRIu64 "..%" PRIu64 ": cases passed on every seed, or on how many\n", o->seed,
           o->seed + (uint64_t)o->seeds - 1);
    for (size_t i = 0; i < n; i++) {
        if (skip_case[i]) {
            printf("  %-*s skip (not run here: its table row says why)\n", LABEL_W, cases[i].label);
            skipped++;
            continue;
        }
        bad += passed[i] < o->seeds;
        if (passed[i] == o->seeds) printf("  %-*s %d/%d\n", LABEL_W, cases[i].label, passed[i], o->seeds);
        else printf("  %-*s %d/%d FAIL (first on seed %" PRIu64 ")\n", LABEL_W, cases[i].label, passed[i], o->seeds,
                    first_fail[i]);
    }
    printf("kgate: %zu case%s on %d seeds: %zu passed on every seed, %zu failed on some", n, n == 1 ? "" : "s",
           o->seeds, n - bad - skipped, bad);
    if (skipped) printf("; %zu skipped", skipped);
    printf("\n");
    return bad;
}
