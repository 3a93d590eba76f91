/* kgate — is this GPU kernel right, and only then, how fast?
 *
 * One C program: it loads the GPU runtime at run time (CUDA driver + NVRTC, or
 * HIP + hiprtc), compiles kernels.hip (embedded in the binary) for the
 * device's exact arch, runs each case of shapes.txt on seeded inputs, gates
 * every output against CPU references (ref.c), and times a kernel only after
 * every gate has passed.  `--device cpu` runs the whole pipeline with ref.c's
 * CPU candidate, for machines without a GPU.
 *
 * Build: make            (cc -std=c11 -O3 kgate.c -o kgate -ldl -lpthread -lm)
 * Usage: ./kgate --help
 *
 * This file is the spine.  It includes ref.c and the parts under src/ into one
 * translation unit, in the order data flows: each part uses only what the
 * parts before it define, and none calls back into this file.  Then comes the
 * pipeline of one case, stage by stage,
 *
 *   case -> inputs -> references -> per arm: poisoned outputs, launches
 *   (--graph: captured graphs, replayed, and an eager run to compare),
 *   --repeat runs, every gate -> only if all passed: timer, re-check ->
 *   report -> ledger
 *
 * and the commands built on it, the command table and main.  An op is a file
 * that ends with its row of the op table (src/gemm.c, src/grouped.c,
 * src/attn.c; src/lowprec.c is the fp8 and MX mode of the first two) and an
 * entry in OPS (src/ops.c); a gate is a row of GATES (src/gates.c), a planted
 * fault a row of INJECTS (src/inject.c).  README "Map" has one line per file.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define KGATE_VERSION "0.1"

/* Exit codes (README "Exit codes"). */
enum {
    EXIT_PASS = 0,      /* every gate passed */
    EXIT_GATE = 1,      /* a gate failed */
    EXIT_USAGE = 2,     /* bad usage or input */
    EXIT_NORUNTIME = 3, /* no GPU runtime found */
    EXIT_BUDGET = 4,    /* budget spent: a new candidate beyond --budget */
    EXIT_DEVICE = 5,    /* device, kernel or compiler error */
    EXIT_IO = 6,        /* a file could not be written (ledger, cache, dump): disk full or I/O error */
};

#define KG_TILE 128                 /* the tile of the error map and of sampling */
#define FULL_CHECK_MACS (1ull << 31) /* above this, check a tile-covering sample */
#define MAX_DIM (1u << 20)          /* no dimension above 1,048,576 */
#define MAX_ELEMS (1ull << 30)      /* no tensor above 2^30 elements */
#define KG_ATTN_DMAX 256            /* the largest attention head dim */
#define MAX_GROUPS 4096             /* grouped GEMM groups, attention sequences */
#define MAX_HEADS 1024              /* attention heads (a grid dimension) */
#define MAX_DEFINES 32              /* -D K=V of one variant */

/* ===== The parts, in the order data flows ===== */

#include "src/util.c"     /* die, allocation, seeded rng, SHA-256, files, parsers, JSON, child processes */
#include "ref.c"          /* number formats, thread pool, CPU references, the CPU candidate */
#include "src/gpu.c"      /* embedded kernels, runtime loader, device, memory, launches, graphs */
#include "src/options.c"  /* run options, --help, the device they name */
#include "src/compile.c"  /* code objects: cached compiles in a child process; arms */
#include "src/case.c"     /* one case, the op row's type, the ops' option parsers */
#include "src/run.c"      /* a case while it runs: outputs, owned buffers, inputs, the fault hook, run_exec */
#include "src/plan.c"     /* the check plan and the references on it */
#include "src/products.c" /* the products gemm, grouped and low precision share */
#include "src/lowprec.c"  /* fp8 and MX: quantized operands, the quantize-only stage */
#include "src/gemm.c"     /* op: gemm */
#include "src/grouped.c"  /* op: grouped (MoE) gemm */
#include "src/attn.c"     /* op: attention */
#include "src/inject.c"   /* planted faults */
#include "src/ops.c"      /* the op table; cases from the command line and shapes files */
#include "src/timer.c"    /* the timer (run after the gates); rounds of compare and noise */
#include "src/stats.c"    /* one output's statistics against its references, in one pass */
#include "src/gates.c"    /* the gates; checking one output */
#include "src/dump.c"     /* --dump: inputs, outputs and references as .npy for an oracle */
#include "src/worker.c"   /* cases in a watched worker process: a fault or a hang costs one case */
#include "src/report.c"   /* the table and JSON */
#include "src/ledger.c"   /* the ledger and the budget */
#include "src/isa.c"      /* kgate isa; the --expect gate */
#include "src/codec.c"    /* kgate codec */
#include "src/diff.c"     /* kgate diff: two --dump directories compared */
#include "src/selftest.c" /* kgate selftest */
#include "src/node.c"     /* every GPU of a node: a device list, each entry in its own kgate, compared */

/* ===== The pipeline of one case ===== */

/* The watchdog's limit on each launch of case r (seconds): --timeout, else
 * max(10 s, 100 x the expected time of its largest launch), expected at the
 * device's peak (1 TFLOP/s when it is not known) or, for the CPU
 * candidate, at 1 GFLOP/s, and at most TIMEOUT_MAX_S (as --timeout). */
static double launch_limit(const struct run *r)
{
    if (r->o->timeout > 0) return r->o->timeout;
    double flops = 0, rate = r->d->kind == DEV_CPU ? 1e9 : r->c->dt == DT_F32 ? r->d->peak_f32 : r->d->peak_mma16;
    for (int k = 0; k < r->nout; k++) flops = fmax(flops, r->out[k].flops);
    return fmin(TIMEOUT_MAX_S, fmax(10.0, 100.0 * flops / (rate > 0 ? rate : 1e12)));
}

/* Poison and launch every launch of the case (owners in order, their
 * kernels noted in r->geom for the report), wait; 1 if a launched kernel
 * declares atomics. */
static int launch_all(struct run *r)
{
    r->d->launched_atomics = r->d->kind == DEV_CPU && getenv("KGATE_TEST_ATOMICS");
    for (int k = 0; k < r->nout; k++)
        if (r->out[k].launch == k) run_poison(r, k), run_launch(r, k);
    dev_sync(r->d);
    return r->d->launched_atomics;
}

/* Test hook (the CPU device, KGATE_TEST_ATOMICS=unwritten): a repeated
 * run leaves output k's middle element as poisoned, as a racy kernel that
 * declares atomics might, so that tests.sh can show such runs are gated. */
static void test_atomics_unwritten(const struct run *r, int k, unsigned char *raw)
{
    const char *e = getenv("KGATE_TEST_ATOMICS");
    if (r->d->kind != DEV_CPU || !e || strcmp(e, "unwritten") != 0) return;
    memset(raw + output_middle_byte(&r->out[k]), 0xff, DTYPES[r->out[k].dt].bytes);
}

/* Runs 2..n of a case on the same inputs: each output compared bit for bit
 * with run 1 (raw1), or, when the kernels declare atomics, gated. */
static void repeat_runs(struct run *r, struct result *res, unsigned char **raw1, int n)
{
    for (int k = 0; k < r->nout; k++) res[k].rep.runs = n;
    for (int run = 2; run <= n; run++) {
        int atomics = launch_all(r);
        for (int k = 0; k < r->nout; k++) {
            struct repeat *rep = &res[k].rep;
            unsigned char *raw = run_output_raw(r, k);
            const struct inject *inj = run_inject(r, INJ_REPEAT);
            struct inject_ctx ix = { .r = r, .oi = k, .o = &r->out[k], .raw = raw };
            if (inj && run == 2) inj->apply(&ix);
            rep->atomics |= atomics;
            if (atomics) {
                test_atomics_unwritten(r, k, raw);
                gate_output(r, k, &res[k], raw, "repeated run");
                if (!res[k].pass && !rep->gated_fail_run) rep->gated_fail_run = run;
            } else if (!rep->diff_run && gate_first_difference(&r->out[k], raw1[k], raw, rep)) {
                rep->diff_run = run;
            }
            free(raw);
        }
    }
}

/* On the graph path (--graph), after the graph's replay (its outputs' raw
 * storage in raw): each output notes that the graph path ran and, when a
 * capture was refused, why (nothing more runs); else one eager run on
 * poisoned outputs, each output compared with the replay bit for bit
 * (unless the kernels declare atomics), with the graph-diff fault
 * (--inject) planted in the eager run's bytes. */
static void graph_check(struct run *r, struct result *res, unsigned char **raw)
{
    const char *refused = run_graph_refused(r);
    for (int k = 0; k < r->nout; k++) {
        memset(&res[k].graph, 0, sizeof res[k].graph);
        res[k].graph.on = 1;
        if (refused) snprintf(res[k].graph.why, sizeof res[k].graph.why, "%s", refused);
    }
    if (refused) return;
    r->eager = 1;
    int atomics = launch_all(r);
    r->eager = 0;
    for (int k = 0; k < r->nout && !atomics; k++) {
        unsigned char *eager = run_output_raw(r, k);
        const struct inject *inj = run_inject(r, INJ_GRAPH);
        struct inject_ctx ix = { .r = r, .oi = k, .o = &r->out[k], .raw = eager };
        if (inj) inj->apply(&ix);
        gate_graph_compare(&r->out[k], raw[k], eager, &res[k].graph);
        free(eager);
    }
}

/* What the timed launches did to the inputs, read before any re-check
 * (and undone: run_inputs_written), so that a re-check is judged on its
 * own launches alone: in a compare the arms' timed launches interleave and
 * name no arm; a cached arm has no re-check.  Returns 0, after one line on
 * stderr and with r->timed_wrote set, if they wrote into an input or its
 * guard bands (the case fails). */
static int timing_left_inputs(struct run *r)
{
    int off = r->inject_off;
    r->inject_off = 1;   /* the read belongs to no arm: no planted fault */
    const struct inputs_check *in = run_inputs_written(r);
    r->inject_off = off;
    if (!in->band && !in->changed) return 1;
    fprintf(stderr, "kgate: %s: the timed launches wrote into the inputs (bytes of guard bands: %zu, of inputs: "
            "%zu; the first %s %s); the case fails\n", r->c->label, in->band, in->changed,
            in->changed ? "in" : "around", in->names[in->changed ? in->changed_in : in->band_in]);
    r->timed_wrote = 1;
    return 0;
}

/* Time every launch of a passed case on the current arm, then re-check its
 * outputs (when references were computed: have_refs; else only the inputs,
 * timing_left_inputs): sets res[].t, .timed, .tflops, .pct_peak; returns 0
 * if a re-check failed. */
static int time_case(struct run *r, struct result *res, int have_refs, int idx, int total, FILE *progress)
{
    int pass = 1;
    for (int k = 0; k < r->nout && pass; k++) {
        if (r->out[k].launch != k) continue;
        if (progress)
            fprintf(progress, "[%d/%d] %s %s: timing\n", idx, total, r->c->label, r->out[k].name);
        time_arms(r, k, &r->d->arm, 1, 0, r->inject_off ? -1 : 0, &res[k].t);
        if (!have_refs) pass &= timing_left_inputs(r);
        for (int j = 0; j < r->nout && have_refs; j++) {
            if (r->out[j].launch != k) continue;
            gate_output(r, j, &res[j], NULL, "re-check after timing");
            pass &= res[j].pass;
        }
        res[k].timed = pass;
        report_rate(r, k, &res[k]);
    }
    return pass;
}

/* The digest of output k of the first run (raw: its storage as read back
 * and gated), after the gates: the digest-only fault (--inject bitflip, a
 * node run's) is planted in a copy, so no gate sees it. */
static void output_digest(struct run *r, int k, const unsigned char *raw, char hex[65])
{
    const struct output *p = &r->out[k];
    const struct inject *inj = run_inject(r, INJ_DIGEST);
    if (!inj || k != 0) {
        gate_digest(p, raw, hex);
        return;
    }
    size_t bytes = p->elems * DTYPES[p->dt].bytes + 2 * p->guard;
    unsigned char *copy = xmalloc(bytes);
    memcpy(copy, raw, bytes);
    struct inject_ctx ix = { .r = r, .oi = k, .o = p, .raw = copy };
    inj->apply(&ix);
    gate_digest(p, copy, hex);
    free(copy);
}

/* Gate arm ac on run r: the quantize stage (low precision), every launch on
 * poisoned outputs (--graph: captured graphs, replayed), `repeat` runs in
 * all (the first checked, the others compared bit for bit or, with atomics,
 * gated; none after a refused capture), the graph's replay against an eager
 * run (graph_check), every gate of every output, the check named `when`.
 * Sets ac->pass. */
static void gate_arm(struct run *r, struct arm_case *ac, int repeat, const char *when, int idx, int total,
                     FILE *progress)
{
    arm_use(r->d, ac->arm);
    r->geom = ac->geom;
    r->inject_off = !ac->inject_target;
    struct result *res = ac->res;
    if (r->q) q_stage(r);
    launch_all(r);
    unsigned char **raw1 = xcalloc((size_t)r->nout, sizeof *raw1);
    for (int k = 0; k < r->nout; k++) raw1[k] = run_output_raw(r, k);
    int refused = run_graph_path(r) && run_graph_refused(r);
    if (repeat > 1 && !refused) {
        if (progress) fprintf(progress, "[%d/%d] %s: %d more runs\n", idx, total, r->c->label, repeat - 1);
        repeat_runs(r, res, raw1, repeat);
    }
    if (run_graph_path(r)) graph_check(r, res, raw1);
    ac->pass = 1;
    for (int k = 0; k < r->nout; k++) {
        if (!res[k].rep.atomics || res[k].pass) gate_output(r, k, &res[k], raw1[k], when);
        ac->pass &= res[k].pass;
        if (r->o->json && !res[k].sha256[0]) output_digest(r, k, raw1[k], res[k].sha256);   /* --json prints it */
        free(raw1[k]);
    }
    free(raw1);
    ac->gates_pass = ac->pass, ac->gated = 1;
    if (r->o->expect && !isa_gate(r, ac)) ac->pass = 0;
}

/* Launch every output of arm ac once, untimed and ungated, to note its
 * launch geometry (for an arm whose gates the ledger's verdict stands for:
 * the report and --expect read it). */
static void record_geometry(struct run *r, struct arm_case *ac)
{
    arm_use(r->d, ac->arm);
    r->geom = ac->geom;
    for (int k = 0; k < r->nout; k++)
        if (r->out[k].launch == k) run_launch(r, k);
    dev_sync(r->d);
}

/* Time the arms in rd->n rounds; in each, every timed launch of every arm
 * is sampled interleaved (time_arms, the first arm rotating per round).
 * Round i's ratios: the candidate's summed medians over the reference's
 * (arm 0), and the A/A copy's.  Each arm's rows get the rounds merged.  The
 * band is max |A/A - 1| when a copy ran (else the caller's, from the
 * ledger).  Then the inputs are checked (timing_left_inputs: a write fails
 * every arm) and, when references exist, every arm runs once more and is
 * re-checked.  Returns 0 if either failed. */
static int time_rounds(struct run *r, struct arm_case *ac, int narms, struct rounds *rd, int have_refs,
                       int idx, int total, FILE *progress)
{
    struct arm *arms[TIMER_MAX_ARMS];
    int nout = r->nout, n = rd->n, inj_arm = -1;
    struct timing *t = xcalloc((size_t)(narms * nout * n), sizeof *t);
    for (int a = 0; a < narms; a++) arms[a] = ac[a].arm, inj_arm = ac[a].inject_target ? a : inj_arm;
    for (int i = 0; i < n; i++) {
        if (progress) fprintf(progress, "[%d/%d] %s: timing, round %d of %d\n", idx, total, r->c->label, i + 1, n);
        double tot[TIMER_MAX_ARMS] = { 0 };
        for (int k = 0; k < nout; k++) {
            if (r->out[k].launch != k) continue;
            struct timing tr[TIMER_MAX_ARMS];
            time_arms(r, k, arms, narms, i % narms, inj_arm, tr);
            for (int a = 0; a < narms; a++) t[(a * nout + k) * n + i] = tr[a], tot[a] += tr[a].median_us;
        }
        rd->ratio[i] = rd->cand >= 0 ? tot[rd->cand] / tot[0] : NAN;
        rd->aa[i] = rd->copy >= 0 ? tot[rd->copy] / tot[0] : NAN;
    }
    for (int a = 0; a < narms; a++)
        for (int k = 0; k < nout; k++) {
            if (r->out[k].launch != k) continue;
            timing_merge(&t[(a * nout + k) * n], n, &ac[a].res[k].t);
            report_rate(r, k, &ac[a].res[k]);
            ac[a].total_us += ac[a].res[k].t.median_us;
        }
    free(t);
    if (rd->copy >= 0) {
        rounds_spread(rd->aa, n, &rd->aa_med, &rd->aa_lo, &rd->aa_hi);
        rd->band = fmax(fabs(rd->aa_lo - 1), fabs(rd->aa_hi - 1));
        rd->band_line = 0;
    }
    if (rd->cand >= 0) {
        rounds_spread(rd->ratio, n, &rd->ratio_med, &rd->ratio_lo, &rd->ratio_hi);
        rd->verdict = rounds_verdict(rd);
    }
    int pass = timing_left_inputs(r);
    for (int a = 0; a < narms; a++) {
        if (have_refs) gate_arm(r, &ac[a], 1, "re-check after timing", idx, total, progress);
        ac[a].pass &= !r->timed_wrote;   /* no arm named: every arm's verdict fails, its gates' stands */
        pass &= ac[a].pass;
    }
    for (int a = 0; a < narms; a++)
        for (int k = 0; k < nout; k++) ac[a].res[k].timed = pass && r->out[k].launch == k;
    return pass;
}

/* Plans and references for every output of r into base[] (shared by the
 * arms), with progress lines. */
static void case_references(struct run *r, struct result *base, int idx, int total, FILE *progress)
{
    const struct kcase *c = r->c;
    for (int k = 0; k < r->nout; k++) {
        const struct output *p = &r->out[k];
        plan_build(&base[k].plan, p, r->o->full, mix64(r->key ^ (uint64_t)k));
        refs_compute(&base[k].refs, r, k, &base[k].plan);
        base[k].atol = gate_atol(r, k, &base[k]);
        if (!progress) continue;
        fprintf(progress, "[%d/%d] %s %s: references on %zu of %zu elements (%s): ", idx, total, c->label,
                p->name, plan_count(&base[k].plan, p), p->rows * p->cols,
                base[k].plan.full ? "all" : "tile-covering sample");
        if (base[k].refs.lp_s >= 0)
            fprintf(progress, "double %.2f s, same-precision %.2f s\n", base[k].refs.ref_s, base[k].refs.lp_s);
        else
            fprintf(progress, "double and same-precision %.2f s\n", base[k].refs.ref_s);
    }
}

/* The largest candidate the CPU device runs, in FLOPs: its candidate is
 * ref.c's, at a few GFLOP/s on a CI machine's cores; a case past it (the
 * vendor-sized and Llama rows of shapes.txt: an 8192^3 GEMM took 46 s a
 * launch on 2 cores) is for a GPU. */
#define CPU_MAX_FLOPS 1e11

/* Why case c cannot run on device d, or NULL: an fp8/MX format the device
 * cannot convert (q_unsupported), or, on the CPU device, a candidate of
 * more than CPU_MAX_FLOPS. */
static const char *case_unsupported(const struct device *d, const struct kcase *c)
{
    static char why[200];
    if (d->kind == DEV_CPU && c->flops > CPU_MAX_FLOPS) {
        snprintf(why, sizeof why, "%.0f GFLOP: over the CPU device's %.0f (a case for a GPU)", c->flops / 1e9,
                 CPU_MAX_FLOPS / 1e9);
        return why;
    }
    return q_unsupported(d, c);
}

/* The whole pipeline for one case on narms arms: inputs, references (unless
 * every arm's verdict is cached in the ledger), then per arm poisoned
 * outputs, launches, --repeat runs and gates; only if every arm passed, the
 * timer (one arm: time_case; compare and noise: rounds into rd) and a
 * re-check.  Reports the case and writes its ledger lines (lg, if kept);
 * returns 1 if it passed. */
static int run_arms(const struct kcase *c, struct device *d, const struct opts *o, struct arm_case *ac,
                    int narms, struct rounds *rd, struct ledger *lg, int idx, int total, struct tally *tl,
                    unsigned *failed_gates)
{
    const char *skip = case_unsupported(d, c);
    if (skip) {
        report_skip(c, o, skip);
        tl->cases++, tl->cases_skipped++;
        return 1;
    }
    const struct inject *inj = o->inject ? inject_find(o->inject) : NULL;
    if (lg && !o->dump_dir) ledger_lookup_cached(lg, c, o, d, ac, narms);   /* a dump needs the references */
    struct run r = { .c = c, .d = d, .o = o, .inputs_nonzero = 1, .geom = ac[0].geom, .inj = inj };
    r.key = hash_str(mix64(o->seed), c->label);
    for (size_t i = 0; i < 2 * c->nlens && c->lens; i++) r.key = mix64(r.key ^ c->lens[i]);
    FILE *progress = o->quiet ? NULL : stderr;
    if (progress) fprintf(progress, "[%d/%d] %s (%s): inputs\n", idx, total, c->label, c->where);
    c->op->prepare(&r);
    worker_limit(launch_limit(&r), o->timeout > 0);
    int have_refs = 0, pass = 1, repeat = o->repeat > 1 ? o->repeat : 1;
    for (int a = 0; a < narms; a++) {
        have_refs |= !ac[a].cached;
        ac[a].inject_target = narms == 1 || a == (rd && rd->cand >= 0 ? rd->cand : 0);
    }
    struct result *base = xcalloc((size_t)r.nout, sizeof *base);
    if (have_refs) case_references(&r, base, idx, total, progress);
    for (int a = 0; a < narms; a++) {
        ac[a].res = xcalloc((size_t)r.nout, sizeof *ac[a].res);
        for (int k = 0; k < r.nout; k++)
            ac[a].res[k].plan = base[k].plan, ac[a].res[k].refs = base[k].refs, ac[a].res[k].atol = base[k].atol;
        if (!ac[a].cached) {
            gate_arm(&r, &ac[a], repeat, "check", idx, total, progress);
        } else {
            record_geometry(&r, &ac[a]);
            if (o->expect && !isa_gate(&r, &ac[a])) ac[a].pass = 0;
        }
        pass &= ac[a].pass;
    }
    if (o->dump_dir) dump_case(&r, ac[0].res, idx), tl->dumped++;
    if (pass && rd) {
        pass = time_rounds(&r, ac, narms, rd, have_refs, idx, total, progress);
    } else if (pass && !o->untimed) {
        arm_use(d, ac[0].arm);
        pass = ac[0].pass = time_case(&r, ac[0].res, have_refs, idx, total, progress);
        if (!pass && !r.timed_wrote) ac[0].gates_pass = 0;   /* the re-check after timing failed */
        for (int k = 0; k < r.nout && pass; k++)
            if (ac[0].res[k].timed) ac[0].total_us += ac[0].res[k].t.median_us;
    }
    for (int a = 0; a < narms; a++)
        for (int k = 0; k < r.nout; k++) {
            if (!pass) ac[a].res[k].timed = 0, ac[a].total_us = 0;   /* a failed case has no time */
            for (size_t g = 0; g < N_GATES; g++)
                if (ac[a].gated && !ac[a].res[k].v[g].pass && failed_gates) *failed_gates |= 1u << g;
        }
    report_arms(&r, ac, narms, rd, pass);
    if (lg) ledger_write_case(lg, &r, ac, narms, rd, pass);
    tl->cases++, tl->cases_failed += !pass, tl->timing_wrote += r.timed_wrote;
    int isa_failed = 0;
    for (int a = 0; a < narms; a++) isa_failed |= ac[a].isa_checked && !ac[a].isa_pass;
    tl->isa_failed += isa_failed;
    for (int a = 0; a < narms; a++) {
        for (int k = 0; k < r.nout; k++) {
            tl->outputs++, tl->outputs_failed += ac[a].gated ? !ac[a].res[k].pass : !ac[a].gates_pass;
            free(ac[a].res[k].s.tiles);
            free(ac[a].res[k].s.segs);
            free(ac[a].res[k].out);
        }
        free(ac[a].res);
        ac[a].res = NULL;
    }
    for (int k = 0; k < r.nout; k++) plan_free(&base[k].plan), refs_free(&base[k].refs);
    free(base);
    for (int a = 0; a < narms; a++) graph_free(d, ac[a].arm->graphs, GRAPH_SLOTS);
    run_release(&r);
    return pass;
}

/* One case on the current arm alone, no ledger (selftest). */
static int run_case(const struct kcase *c, struct device *d, const struct opts *o, int idx, int total,
                    struct tally *tl, unsigned *failed_gates)
{
    struct arm_case ac = { .arm = d->arm };
    return run_arms(c, d, o, &ac, 1, NULL, NULL, idx, total, tl, failed_gates);
}

/* Before any case runs: exit 2 naming the case if the options do not fit
 * one of them (a tolerance loosened without --why, an --inject it cannot
 * carry), so that bad input stops the command before its header. */
static void cases_check(const struct kcase *cases, size_t n, const struct opts *o)
{
    const struct inject *inj = o->inject ? inject_find(o->inject) : NULL;
    for (size_t i = 0; i < n; i++) {
        const struct kcase *c = &cases[i];
        gate_check_tolerance(o, c);
        if (inj && inj->unfit && inj->unfit(c))
            die(EXIT_USAGE, "%s: --inject %s %s; %s is not", c->where, inj->name, inj->unfit(c), c->label);
    }
}

/* The cases of one seed of a run, in worker processes (worker.c), and
 * what they record where the watcher reads it (shared memory). */
struct run_job {
    struct kcase *cases;
    size_t n;
    struct opts o;                /* this seed's options */
    int seed_index;
    struct tally *tl;             /* shared */
    int *passed, *skipped;        /* shared, per case: seeds passed; skipped on this device */
    uint64_t *first_fail;         /* shared, per case: the first seed it failed on */
    struct lost *lost;            /* the watcher's: this seed's cases that faulted or hung */
    int nlost;
};

/* In a worker: open the device, build the arm, keep the ledger when a
 * candidate (or --ledger) asks for one (its budget checked first), then run
 * cases first.. of the job, reporting each (the run's header when first is
 * the first case). */
static void run_job_work(void *ctx, int first)
{
    struct run_job *j = ctx;
    const struct opts *o = &j->o;
    struct device d;
    struct arm arm;
    struct ledger lg, *lgp = NULL;
    char *file;
    opts_open_device(&d, o);
    arm_from_opts(&arm, o, &file);
    arm_build(&d, &arm);
    arm_use(&d, &arm);
    if (arm.candidate || o->ledger_path) {
        ledger_open(&lg, o);
        ledger_budget_check(&lg, &arm, j->n == 1 ? j->cases[0].label : NULL);
        lgp = &lg;
    }
    worker_ready();
    if (first == 0) report_start(&d, o, j->cases, j->n);
    else report_cases(j->cases, j->n, &d);
    for (size_t i = (size_t)first; i < j->n; i++) {
        worker_task((int)i, j->cases[i].label);
        struct arm_case ac = { .arm = &arm };
        j->skipped[i] = case_unsupported(&d, &j->cases[i]) != NULL;
        int pass = run_arms(&j->cases[i], &d, o, &ac, 1, NULL, lgp, (int)i + 1, (int)j->n, j->tl, NULL);
        if (!pass && j->passed[i] == j->seed_index) j->first_fail[i] = o->seed;
        j->passed[i] += pass;
    }
    opts_close_device(&d);
    arm_free(&arm);
    free(file);
    if (lgp) free(lg.line);
}

/* In the watcher: a case whose worker died (fault or hung) is reported and
 * counted failed. */
static void run_job_lost(void *ctx, const struct lost *l)
{
    struct run_job *j = ctx;
    const struct kcase *c = &j->cases[l->task];
    report_lost(c, &j->o, l);
    tally_lost(j->tl, l->how);
    j->lost = realloc(j->lost, (size_t)(j->nlost + 1) * sizeof *j->lost);
    if (!j->lost) die(EXIT_DEVICE, "out of host memory");
    j->lost[j->nlost] = *l;
    snprintf(j->lost[j->nlost++].where, sizeof l->where, "%s", c->where);
    if (j->passed[l->task] == j->seed_index) j->first_fail[l->task] = j->o.seed;
}

/* `kgate all` runs every case this many times (--repeat): on a GPU 3, on
 * the CPU (whose candidate is deterministic by construction) 2. */
#define DEFAULT_REPEAT_ALL_GPU 3
#define DEFAULT_REPEAT_ALL_CPU 2

/* Run cases on the chosen device and arm and print the table, each seed's
 * cases in workers (a case that faults or hangs is reported and the run
 * goes on); exit code 0, 1 (a gate failed) or 5 (a case faulted or hung;
 * it outranks 1), or the code that stopped the run.  A candidate arm (or
 * --ledger) keeps the ledger: the budget is checked first and every
 * measured case gets a line.  With --seeds N the cases run on N seeds
 * (after the first, gated but not timed) and a summary says per case on how
 * many they passed. */
static int cmd_run(struct kcase *cases, size_t n, const struct opts *o)
{
    double t0 = now_s();
    int seeds = o->seeds > 1 ? o->seeds : 1, failed = 0, lost = 0;
    cases_check(cases, n, o);
    dump_prepare(o);   /* before any work */
    const size_t head = (sizeof(struct tally) + 7) / 8 * 8;   /* first_fail's uint64_t aligned after it */
    size_t bytes = head + n * (2 * sizeof(int) + sizeof(uint64_t));
    char *sh = shared_alloc(bytes);
    struct run_job j = { .cases = cases, .n = n, .tl = (struct tally *)(void *)sh };
    j.first_fail = (uint64_t *)(void *)(sh + head);
    j.passed = (int *)(void *)(j.first_fail + n), j.skipped = j.passed + n;
    report_width(cases, n);
    for (int s = 0; s < seeds; s++) {
        j.o = *o, j.seed_index = s, j.nlost = 0;
        j.o.seed = o->seed + (uint64_t)s, j.o.untimed = o->untimed || s > 0;
        memset(j.tl, 0, sizeof *j.tl);
        int rc = supervise((int)n, run_job_work, run_job_lost, &j);
        if (rc) {
            shared_free(sh, bytes);
            free(j.lost);
            return rc;
        }
        report_tally(o->json ? stderr : stdout, j.tl, j.lost, j.nlost, now_s() - t0);
        failed |= j.tl->cases_failed > 0, lost |= j.tl->faulted + j.tl->hung > 0;
    }
    if (o->seeds > 1) failed = report_seeds(cases, n, o, j.passed, j.first_fail, j.skipped) > 0;
    dump_report(o, j.tl->dumped, j.tl->cases);
    shared_free(sh, bytes);
    free(j.lost);
    return lost ? EXIT_DEVICE : failed ? EXIT_GATE : EXIT_PASS;
}

/* The number of rounds of a compare or noise: --rounds, else 10. */
static int rounds_of(const struct opts *o) { return o->rounds ? o->rounds : 10; }

/* A compare or a noise, in a worker: its case and options, and its tally
 * (shared with the watcher). */
struct cmp_job { struct kcase *c; const struct opts *o; struct tally *tl; struct lost lost; };

/* In a worker: kgate compare CASE --variant NAME (-D K=V ... | --kernels
 * FILE): the reference arm and the candidate gated on the same inputs,
 * then timed in interleaved rounds with, unless the ledger holds one, an
 * A/A copy of the reference for the band; the verdict is faster, parity or
 * slower.  Two (or three) ledger lines. */
static void compare_work(void *ctx, int first)
{
    struct cmp_job *j = ctx;
    const struct opts *o = j->o;
    struct kcase *c = j->c;
    struct device d;
    struct arm ref, cand, copy;
    struct ledger lg;
    char *file;
    (void)first;
    opts_open_device(&d, o);
    arm_reference(&ref);
    arm_from_opts(&cand, o, &file);
    if (!cand.candidate)
        die(EXIT_USAGE, "compare needs a candidate: --variant NAME with -D NAME=VALUE ... or --kernels FILE");
    ledger_open(&lg, o);
    arm_build(&d, &ref);
    arm_build(&d, &cand);
    if (strcmp(ref.code.sha, cand.code.sha) == 0)
        die(EXIT_USAGE, "'%s' compiles to the reference's code object (%.12s): its changes make no difference",
            cand.name, cand.code.sha);
    ledger_budget_check(&lg, &cand, c->label);
    struct rounds rd = { .n = rounds_of(o), .cand = 1, .copy = -1 };
    rd.band = ledger_band(&lg, c, o, &d, ref.code.sha, &rd.band_line);
    struct arm_case ac[3] = { { .arm = &ref }, { .arm = &cand }, { .arm = &copy } };
    int narms = 2;
    if (rd.band < 0) {
        arm_copy(&copy, &ref);
        arm_build(&d, &copy);
        rd.copy = narms++;
    }
    worker_ready();
    report_start(&d, o, c, 1);
    worker_task(0, c->label);
    run_arms(c, &d, o, ac, narms, &rd, &lg, 1, 1, j->tl, NULL);
    opts_close_device(&d);
    arm_free(&ref), arm_free(&cand);
    if (narms == 3) arm_free(&copy);
    free(file);
    free(lg.line);
}

/* In a worker: kgate noise CASE: the arm the options name (the reference
 * by default) and its A/A copy, gated, then timed against each other in
 * interleaved rounds; their spread is the band `compare` uses.  Ledger
 * lines for both. */
static void noise_work(void *ctx, int first)
{
    struct cmp_job *j = ctx;
    const struct opts *o = j->o;
    struct kcase *c = j->c;
    struct device d;
    struct arm arm, copy;
    struct ledger lg;
    char *file;
    (void)first;
    opts_open_device(&d, o);
    arm_from_opts(&arm, o, &file);
    ledger_open(&lg, o);
    arm_build(&d, &arm);
    ledger_budget_check(&lg, &arm, c->label);
    arm_copy(&copy, &arm);
    arm_build(&d, &copy);
    if (strcmp(arm.code.sha, copy.code.sha) == 0 && !o->quiet)
        fprintf(stderr, "kgate: %s has no KG_BUILD_ID hook: both arms load the same code object, as two modules\n",
                arm.src_name);
    struct rounds rd = { .n = rounds_of(o), .cand = -1, .copy = 1, .band = -1 };
    struct arm_case ac[2] = { { .arm = &arm }, { .arm = &copy } };
    worker_ready();
    report_start(&d, o, c, 1);
    worker_task(0, c->label);
    run_arms(c, &d, o, ac, 2, &rd, &lg, 1, 1, j->tl, NULL);
    opts_close_device(&d);
    arm_free(&arm), arm_free(&copy);
    free(file);
    free(lg.line);
}

/* In the watcher: the compare's or noise's worker died during its case. */
static void cmp_job_lost(void *ctx, const struct lost *l)
{
    struct cmp_job *j = ctx;
    report_lost(j->c, j->o, l);
    tally_lost(j->tl, l->how);
    j->lost = *l;
    snprintf(j->lost.where, sizeof j->lost.where, "%s", j->c->where);
}

/* kgate compare or noise (work: compare_work or noise_work) in a worker:
 * exit 0, 1 (a gate failed), 4 (budget) or 5 (the case faulted or hung:
 * the ledger is left as it was). */
static int cmd_rounds(struct kcase *c, const struct opts *o, void (*work)(void *ctx, int first))
{
    double t0 = now_s();
    cases_check(c, 1, o);
    struct cmp_job j = { .c = c, .o = o, .tl = shared_alloc(sizeof(struct tally)) };
    report_width(c, 1);
    int rc = supervise(1, work, cmp_job_lost, &j);
    if (!rc) {
        report_tally(o->json ? stderr : stdout, j.tl, &j.lost, j.tl->faulted + j.tl->hung, now_s() - t0);
        rc = j.tl->faulted + j.tl->hung ? EXIT_DEVICE : j.tl->cases_failed ? EXIT_GATE : EXIT_PASS;
    }
    shared_free(j.tl, sizeof(struct tally));
    return rc;
}

/* The default shapes file: ./shapes.txt, else shapes.txt beside the kgate
 * binary (the directory of /proc/self/exe), else ./shapes.txt (so that the
 * error names what was looked for first).  Returns a static buffer. */
static const char *default_shapes(void)
{
    static char path[PATH_MAX];
    snprintf(path, sizeof path, "shapes.txt");
    if (access(path, F_OK) == 0) return path;
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return path;
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash) return path;
    *slash = 0;
    char beside[PATH_MAX];
    if (snprintf(beside, sizeof beside, "%s/shapes.txt", exe) < (int)sizeof beside && access(beside, F_OK) == 0)
        snprintf(path, sizeof path, "%s", beside);
    return path;
}

/* Exit 2 when --cpu-sums or --trades-precision is given and no case is low
 * precision (lowp 0); `none` says which cases, for the message. */
static void lowp_options_need(const struct opts *o, int lowp, const char *none)
{
    if (lowp) return;
    if (o->seen >> opts_row("--cpu-sums") & 1)
        die(EXIT_USAGE, "--cpu-sums sets how the CPU candidate sums fp8 and MX products; %s", none);
    if (o->trades_precision) die(EXIT_USAGE, "--trades-precision waives the low-precision SNR baseline rule; %s", none);
}

/* The cases of kgate all (n of them; the caller frees each and the array):
 * every case of a shapes file (--shapes, default shapes.txt in the current
 * directory, else beside the binary).  --trades-precision and --cpu-sums
 * need a low-precision case among them (exit 2). */
static struct kcase *all_cases(const struct opts *o, size_t *n)
{
    struct kcase *cases = ops_read_shapes(o->shapes_path ? o->shapes_path : default_shapes(), n);
    int lowp = 0;
    for (size_t i = 0; i < *n; i++) lowp |= cases[i].qfmt != Q_NONE;
    lowp_options_need(o, lowp, "no case of the shapes file is low precision");
    return cases;
}

/* kgate all: every case of all_cases. */
static int cmd_all(const struct opts *o, const char *sub)
{
    (void)sub;
    size_t n;
    struct kcase *cases = all_cases(o, &n);
    int rc = cmd_run(cases, n, o);
    for (size_t i = 0; i < n; i++) case_free(&cases[i]);
    free(cases);
    return rc;
}

/* kgate selftest, through this file's pipeline. */
static int cmd_selftest(const struct opts *o, const char *sub)
{
    (void)sub;
    return selftest_run(o, run_case);
}

/* The commands besides a case (gemm, grouped, attn: cmd_run), compare and
 * noise (a case after the command) and codec (its own arguments): each runs
 * with the parsed options and, for ledger, its subcommand. */
static const struct command { const char *name; int (*run)(const struct opts *o, const char *sub); } COMMANDS[] = {
    { "all", cmd_all }, { "ledger", cmd_ledger }, { "devices", cmd_devices }, { "selftest", cmd_selftest },
    { "isa", cmd_isa }, { "diff", cmd_diff },
};

/* The K_* bit (options.c) of command `cmd`, or 0 for an unknown command. */
static unsigned command_kind(const char *cmd)
{
    static const struct { const char *name; unsigned kind; } KINDS[] = {
        { "compare", K_COMPARE }, { "noise", K_NOISE }, { "all", K_ALL }, { "ledger", K_LEDGER },
        { "devices", K_DEVICES }, { "selftest", K_SELFTEST }, { "isa", K_ISA }, { "diff", K_DIFF },
    };
    for (size_t i = 0; i < sizeof KINDS / sizeof *KINDS; i++)
        if (strcmp(cmd, KINDS[i].name) == 0) return KINDS[i].kind;
    return ops_find(cmd) ? K_CASE : 0;
}

/* Exit 2 on options that parse but mean nothing for this run, before any
 * work: --budget without a candidate arm, --why without a tolerance,
 * --graph or --kernels on the CPU device, --cpu-sums sm90a off it,
 * --trades-precision or --cpu-sums on a case that is not low precision
 * (one: the case of a case command, compare or noise; NULL for other
 * commands); and, for a command that runs cases, an environment variable
 * it would refuse later (KGATE_REF_PORTABLE, read by ref_fast). */
static void check_meaningful(const struct opts *o, const struct kcase *one)
{
    if (o->cmd_kind & (K_RUNS | K_SELFTEST)) (void)ref_fast();
    if (o->budget && !o->variant && !o->kernels_path && !o->ndefines)
        die(EXIT_USAGE, "--budget limits the candidate code objects a ledger holds; this run has no candidate "
            "(--variant NAME with -D, or --kernels FILE)");
    if (o->why && o->rtol < 0 && o->atol < 0)
        die(EXIT_USAGE, "--why gives the reason for a looser --rtol or --atol; neither is given");
    if (o->graph && o->device_cpu)
        die(EXIT_USAGE, "--graph: graphs need a GPU (CUDA graphs or hipGraphs); the CPU device has none");
    if (o->kernels_path && o->device_cpu)
        die(EXIT_USAGE, "--kernels needs a GPU device; --device cpu runs ref.c's candidate");
    if (o->cpu_sums_sm90 && !o->device_cpu && !o->device_list)
        die(EXIT_USAGE, "--cpu-sums sm90a is the CPU candidate's arithmetic: it needs --device cpu");
    if (one) {
        char none[sizeof one->label + 32];
        snprintf(none, sizeof none, "%s is not low precision", one->label);
        lowp_options_need(o, one->qfmt != Q_NONE, none);
    }
}

/* Before a device list's entries start (node.c): exit 2 with one line on
 * what each entry would refuse alike, so that bad input is not reported
 * once per entry: --graph or --kernels with a CPU entry, the candidate's
 * options and --kernels file, and the cases (one's, or the shapes file's
 * for all) with their tolerance and --inject KIND. */
static void node_precheck(const struct opts *o, const struct kcase *one)
{
    if (!(o->cmd_kind & (K_ALL | K_CASE))) return;   /* node_run refuses the command */
    if ((o->graph || o->kernels_path) && o->device_list_cpu)
        die(EXIT_USAGE, "%s: the device list's CPU entry has no GPU kernels to run (--device %s)",
            o->graph ? "--graph" : "--kernels", shown(o->device_list));
    struct arm a;
    char *file;
    arm_from_opts(&a, o, &file);
    arm_free(&a);
    free(file);
    struct opts oc = *o;   /* --inject KIND@N: the cases are checked for KIND */
    if (o->inject) {
        const char *kind = inject_kind(o->inject);
        oc.inject = inject_find(kind) ? kind : NULL;   /* an unknown KIND: node_inject says so */
        int repeat = o->repeat ? o->repeat : one ? 1 : DEFAULT_REPEAT_ALL_CPU;   /* each entry's default, at least */
        if (oc.inject) inject_check_stage(inject_find(kind), repeat, o->graph);
    }
    if (one) {
        cases_check(one, 1, &oc);
        return;
    }
    size_t n;
    struct kcase *cases = all_cases(o, &n);
    cases_check(cases, n, &oc);
    for (size_t i = 0; i < n; i++) case_free(&cases[i]);
    free(cases);
}

int main(int argc, char **argv)
{
    if (argc < 2) die(EXIT_USAGE, "no command given (kgate --help lists them)");
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        if (argc > 2) return opts_command_help(argv[2]);
        fputs(USAGE, stdout);
        return EXIT_PASS;
    }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0) {
        if (argc > 2) die(EXIT_USAGE, "%s takes nothing after it ('%s')", argv[1], shown(argv[2]));
        return opts_version();
    }
    for (int i = 2; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) return opts_command_help(argv[1]);
    if (argv[1][0] == '-')
        die(EXIT_USAGE, "no command given: '%s' is an option, and the command comes first (kgate COMMAND "
            "[options]; kgate --help lists them)", shown(argv[1]));
    if (strcmp(argv[1], "codec") == 0) return cmd_codec(argc, argv);
    struct opts o = { .seed = 42, .rtol = -1, .atol = -1 };
    const char *cmd = argv[1], *sub = NULL;
    o.command = cmd;
    o.cmd_kind = command_kind(cmd);
    if (!o.cmd_kind) die(EXIT_USAGE, "unknown command '%s' (see kgate --help)", shown(cmd));
    int compare = strcmp(cmd, "compare") == 0, noise = strcmp(cmd, "noise") == 0;
    const struct op *op = ops_find(compare || noise ? (argc > 2 ? argv[2] : "") : cmd);
    if ((compare || noise) && !op)
        die(EXIT_USAGE, "%s: give a case: %s gemm|grouped|attn OPTIONS (see kgate --help)", cmd, cmd);
    if (strcmp(cmd, "ledger") == 0 && argc > 2 && strncmp(argv[2], "--", 2) != 0) sub = argv[2];
    struct kcase one;
    if (op) {
        case_init(&one, op, "command line");
        ops_parse_case(&one, &o, argc, argv, compare || noise ? 3 : 2, 1);
    } else {
        for (int i = sub ? 3 : 2; i < argc;) {
            if (o.cmd_kind == K_DIFF && argv[i][0] != '-') {   /* diff's two directories */
                if (o.diff_dirs[1]) die(EXIT_USAGE, "diff: '%s': give two --dump directories: kgate diff A B", shown(argv[i]));
                o.diff_dirs[o.diff_dirs[0] != NULL] = argv[i++];
                continue;
            }
            int used = opts_parse(&o, argc, argv, i);
            if (!used) die(EXIT_USAGE, "%s: unknown option '%s' (see kgate --help)", cmd, shown(argv[i]));
            i += used;
        }
    }
    check_meaningful(&o, op ? &one : NULL);
    if (o.device_list) {
        node_precheck(&o, op ? &one : NULL);
        if (op) case_free(&one);
        return node_run(&o, argc, argv);
    }
    if (o.seeds > 1 && o.dump_dir) die(EXIT_USAGE, "--dump writes one seed's case: give --seed S, not --seeds N");
    int all_repeat = o.device_cpu ? DEFAULT_REPEAT_ALL_CPU : DEFAULT_REPEAT_ALL_GPU;
    inject_check(&o, !op && strcmp(cmd, "all") == 0 ? all_repeat : 1);
    if (op) {
        int rc = compare ? cmd_rounds(&one, &o, compare_work) : noise ? cmd_rounds(&one, &o, noise_work)
                         : cmd_run(&one, 1, &o);
        case_free(&one);
        return rc;
    }
    for (size_t i = 0; i < sizeof COMMANDS / sizeof *COMMANDS; i++)
        if (strcmp(cmd, COMMANDS[i].name) == 0) return COMMANDS[i].run(&o, sub);
    die(EXIT_USAGE, "unknown command '%s' (see kgate --help)", shown(cmd));
}
