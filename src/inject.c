/* src/inject.c — planted faults (--inject): each a row of INJECTS with the
 * gate that must catch it; the faults of one op live in its file.  Relies on
 * run.c (the hook), plan.c, case.c, options.c, gpu.c, ref.c, util.c, and
 * products.c, lowprec.c and attn.c (their faults). */

/* Zero the middle output tile. */
static void inj_tile(struct inject_ctx *x)
{
    const struct output *o = x->o;
    size_t r0 = (o->rows - 1) / KG_TILE / 2 * KG_TILE, c0 = (o->cols - 1) / KG_TILE / 2 * KG_TILE;
    for (size_t i = r0; i < o->rows && i < r0 + KG_TILE; i++)
        for (size_t j = c0; j < o->cols && j < c0 + KG_TILE; j++) x->out[i * o->cols + j] = 0;
}

/* Make the last (bottom-right, usually partial) tile wrong: v -> 0.5 - v. */
static void inj_tail(struct inject_ctx *x)
{
    const struct output *o = x->o;
    size_t r0 = (o->rows - 1) / KG_TILE * KG_TILE, c0 = (o->cols - 1) / KG_TILE * KG_TILE;
    for (size_t i = r0; i < o->rows; i++)
        for (size_t j = c0; j < o->cols; j++) x->out[i * o->cols + j] = 0.5f - x->out[i * o->cols + j];
}

/* One NaN in the middle of the output; on a sampled plan the first element
 * from there that the plan does not check (only the nan-inf gate's look at
 * every element can see it). */
static void inj_nan(struct inject_ctx *x)
{
    const struct output *o = x->o;
    size_t at = (o->rows / 2) * o->cols + o->cols / 2;
    for (size_t k = at; !x->plan->full && k < o->rows * o->cols; k++)
        if (!x->plan->row_in[k / o->cols] && !plan_col_checked(x->plan, k / o->cols, k % o->cols)) { at = k; break; }
    x->out[at] = NAN;
}

/* Add half of atol to every element: inside every element tolerance. */
static void inj_bias(struct inject_ctx *x)
{
    for (size_t i = 0; i < x->o->rows * x->o->cols; i++) x->out[i] += (float)(0.5 * x->atol);
}

/* Drop one element in 64 (seeded; at least one) to zero. */
static void inj_drop(struct inject_ctx *x)
{
    size_t n = x->o->rows * x->o->cols;
    x->out[rng_at(x->key, 0) % n] = 0;
    for (size_t i = 0; i < n; i++)
        if (rng_at(x->key, i + 1) % 64 == 0) x->out[i] = 0;
}

/* Shift the middle row right by one column (its first element becomes 0). */
static void inj_row(struct inject_ctx *x)
{
    float *row = x->out + (x->o->rows / 2) * x->o->cols;
    memmove(row + 1, row, (x->o->cols - 1) * sizeof(float));
    row[0] = 0;
}

/* Leave the middle row unwritten: its storage goes back to the poison bytes. */
static void inj_unwritten(struct inject_ctx *x)
{
    const struct output *o = x->o;
    size_t es = DTYPES[o->dt].bytes, i = o->rows / 2;
    for (size_t j = 0; j < o->cols; j++)
        memset(x->raw + o->guard + (size_t)((int64_t)i * o->srow + (int64_t)j * o->scol) * es, 0xff, es);
}

/* Write one element just past the end of the storage, into the guard band. */
static void inj_outside(struct inject_ctx *x)
{
    memset(x->raw + x->o->guard + x->o->elems * DTYPES[x->o->dt].bytes, 0, DTYPES[x->o->dt].bytes);
}

/* One byte written just past the end of the case's first input (a kernel
 * that stores through an input's pointer past its end): its trailing guard
 * band's first byte, as read back. */
static void inj_input_outside(struct inject_ctx *x)
{
    x->raw[0] = 0;
}

/* Write one zero byte into the first input's trailing guard band on the
 * device (after each timed launch: a kernel that writes past an input only
 * when launched back to back, as a race might). */
static void inj_input_timed(struct inject_ctx *x)
{
    struct run *r = x->r;
    dev_fill(r->d, r->in_base[0] + IN_GUARD_BYTES + r->in_bytes[0], 0, 1);
}

/* Flip the lowest bit of a byte in the middle of the case's first input,
 * as read back (a kernel that stores through an input's pointer). */
static void inj_input_inside(struct inject_ctx *x)
{
    x->raw[0] ^= 1;
}

/* Flip the lowest bit of the middle element (applied to repeated runs only:
 * a run that differs from the first, as a race makes it). */
static void inj_race(struct inject_ctx *x)
{
    x->raw[output_middle_byte(x->o)] ^= 1;
}

/* Each timed launch runs INJ_SLOW_RUNS times in all (the timer times
 * them as one): a device that is clearly slower than its peers. */
#define INJ_SLOW_RUNS 8
static void inj_slow(struct inject_ctx *x)
{
    for (int i = 1; i < INJ_SLOW_RUNS; i++) run_exec(x->r, x->oi, x->r->c->op->launch, x->oi);
}

/* The worker dies of SIGSEGV before the launch's kernels run, as a kernel
 * that faults takes its process down. */
static void inj_fault(struct inject_ctx *x)
{
    (void)x;
    raise(SIGSEGV);
}

/* The launch path allocates a scratch buffer on its first launch (a lazily
 * sized workspace) and clears it before each: harmless eagerly; inside a
 * graph's capture, an allocation the graph cannot hold. */
static void inj_graph_alloc(struct inject_ctx *x)
{
    struct run *r = x->r;
    if (!r->inj_scratch) r->inj_scratch = run_dev(r, 4096);
    dev_fill(r->d, r->inj_scratch, 0, 4096);
}

/* The launch path reads a byte back from the device before it queues the
 * kernels (a group count read with .item(), say): harmless eagerly; inside
 * a graph's capture, a read back the graph cannot hold. */
static void inj_graph_sync(struct inject_ctx *x)
{
    unsigned char v;
    dev_download(x->r->d, &v, x->r->out[0].buf, 1);
}

/* Scale one group's (or sequence's) rows by 1 + 2^-5: the middle of the
 * segments that have rows. */
static void inj_group(struct inject_ctx *x)
{
    const struct output *o = x->o;
    size_t nonempty = 0, pick = 0, k = 0;
    for (size_t s = 0; s < o->nseg; s++) nonempty += o->seg[s + 1] > o->seg[s];
    for (size_t s = 0; s < o->nseg; s++)
        if (o->seg[s + 1] > o->seg[s] && k++ == nonempty / 2) pick = s;
    for (size_t i = o->seg[pick]; i < o->seg[pick + 1]; i++)
        for (size_t j = 0; j < o->cols; j++) x->out[i * o->cols + j] *= 1.03125f;
}

/* The group fault's unfit hook: NULL if case c's outputs are made of groups
 * or sequences, else why it cannot be planted in it. */
static const char *inj_unfit_segments(const struct kcase *c)
{
    return strcmp(c->op->name, "gemm") == 0 ? "needs a grouped or attn case (outputs made of groups or sequences)" : NULL;
}

/* Zero the output row of least magnitude among those not already zero (a
 * small-scaled row lost to an underflowing scale product, say): on scaled
 * inputs it weighs nothing in its tile, so only a row's own SNR sees it. */
static void inj_small_row(struct inject_ctx *x)
{
    const struct output *o = x->o;
    double least = INFINITY;
    size_t pick = 0;
    for (size_t i = 0; i < o->rows; i++) {
        double e = 0;
        for (size_t j = 0; j < o->cols; j++) e += (double)x->out[i * o->cols + j] * x->out[i * o->cols + j];
        if (e > 0 && e < least) least = e, pick = i;
    }
    for (size_t j = 0; j < o->cols; j++) x->out[pick * o->cols + j] = 0;
}

/* The small-row fault's unfit hook: NULL if case c is a product (gemm or
 * grouped, whose rows and columns the worst-tile gate holds on their own). */
static const char *inj_unfit_products(const struct kcase *c)
{
    return strcmp(c->op->name, "attn") == 0 ? "needs a gemm or grouped case (a product's rows are gated on their own)"
                                            : NULL;
}

/* The first of the KG_TILE lines from t0 (n in all) that is not in the
 * plan's list `in` (marks, indexed by line), or t0 if every one is. */
static size_t inj_unchecked_line(const unsigned char *in, size_t t0, size_t n)
{
    for (size_t i = t0; i < n && i < t0 + KG_TILE; i++)
        if (!in[i]) return i;
    return t0;
}

/* What the tilepos and fragment faults add to an element: 16 times the
 * output's rms (a value read from a stale or uninitialized buffer). */
static float inj_rms16(const struct inject_ctx *x)
{
    const struct output *o = x->o;
    double e = 0;
    for (size_t k = 0; k < o->rows * o->cols; k++) e += (double)x->out[k] * x->out[k];
    return (float)(16 * sqrt(e / (double)(o->rows * o->cols + !o->rows)));
}

/* The first of the KG_TILE columns from u0 (n in all) that plan p does not
 * check on row i, or u0 if it checks every one. */
static size_t inj_unchecked_col(const struct plan *p, size_t i, size_t u0, size_t n)
{
    for (size_t j = u0; j < n && j < u0 + KG_TILE; j++)
        if (!plan_col_checked(p, i, j)) return j;
    return u0;
}

/* In every tile, the element at its first row the plan does not check and
 * that row's first column it does not check gets 16 times the output's rms
 * added (a fragment read from a stale or uninitialized buffer): on a
 * sampled plan no checked element changes, so the sample alone cannot see
 * it. */
static void inj_tilepos(struct inject_ctx *x)
{
    const struct output *o = x->o;
    const struct plan *p = x->plan;
    float add = inj_rms16(x);
    for (size_t t0 = 0; t0 < o->rows; t0 += KG_TILE) {
        size_t i = inj_unchecked_line(p->row_in, t0, o->rows);
        for (size_t u0 = 0; u0 < o->cols; u0 += KG_TILE)
            x->out[i * o->cols + inj_unchecked_col(p, i, u0, o->cols)] += add;
    }
}

/* A 16 x 16 fragment of the middle tile computed wrong, 16 times the
 * output's rms off, on 16 rows (aligned to 16) that are not sampled rows
 * of the plan: in a product columns 16..31 of the tile, in attention 16
 * columns of the middle head (a warp's fragment, or one head's rows,
 * wrong).  Only the plan's column block can see it on a sampled plan. */
static void inj_fragment(struct inject_ctx *x)
{
    const struct output *o = x->o;
    const struct plan *p = x->plan;
    size_t t0 = (o->rows - 1) / KG_TILE / 2 * KG_TILE, r0 = t0;
    for (size_t a = t0; a < o->rows && a < t0 + KG_TILE; a += 16) {
        int clear = 1;
        for (size_t i = a; i < a + 16 && i < o->rows; i++) clear &= !p->row_in[i];
        if (clear) { r0 = a; break; }
    }
    size_t c0 = o->head_dim > 1 ? o->cols / o->head_dim / 2 * o->head_dim : (o->cols - 1) / KG_TILE / 2 * KG_TILE + 16;
    if (c0 >= o->cols) c0 = 0;
    float add = inj_rms16(x);
    for (size_t i = r0; i < o->rows && i < r0 + 16; i++)
        for (size_t j = c0; j < o->cols && j < c0 + 16; j++) x->out[i * o->cols + j] += add;
}

/* The fragment fault's unfit hook: NULL unless case c is attention with
 * more than 16 query heads, where a row checks one head and 16 rows 16 of
 * them (plan.c), so a sample sees a fault on 16 rows of one head only at
 * odds of 16 in the heads. */
static const char *inj_unfit_fragment(const struct kcase *c)
{
    return strcmp(c->op->name, "attn") == 0 && c->hq > 16
               ? "needs at most 16 query heads on attention (a sampled row checks one head; 16 rows, 16 heads)" : NULL;
}

/* The tilepos fault's unfit hook: NULL if case c is a gemm or grouped case
 * of unquantized operands (the checksum gate sums those). */
static const char *inj_unfit_checksum(const struct kcase *c)
{
    if (strcmp(c->op->name, "attn") == 0)
        return c->bwd ? NULL : "needs attention's --bwd (the checksum gate sums its gradients; O and LSE have no "
                               "such sum)";
    return c->qfmt != Q_NONE ? "needs a gemm or grouped case of f32, f16 or bf16, or attention's --bwd (the "
                               "checksum gate sums those)" : NULL;
}

static const struct inject INJECTS[] = {
    { "tile", "worst-tile", "the middle output tile zeroed", INJ_VALUES, inj_tile, NULL },
    { "tail", "allclose", "the last (partial) tile wrong", INJ_VALUES, inj_tail, NULL },
    { "nan", "nan-inf", "one NaN in the output (on a sample, off the checked elements)", INJ_VALUES, inj_nan, NULL },
    { "bias", "bias", "0.5*atol added to every element", INJ_VALUES, inj_bias, NULL },
    { "drop", "allclose", "one element in 64 dropped to zero", INJ_VALUES, inj_drop, NULL },
    { "row", "allclose", "the middle row shifted by one column", INJ_VALUES, inj_row, NULL },
    { "unwritten", "written", "the middle row left unwritten", INJ_RAW, inj_unwritten, NULL },
    { "outside", "in-bounds", "one element written past the end of the output", INJ_RAW, inj_outside, NULL },
    { "input-outside", "in-bounds", "one byte written past the end of the first input", INJ_INGUARD, inj_input_outside,
      NULL },
    { "input-inside", "in-bounds", "one bit flipped in the middle of the first input", INJ_INPUT, inj_input_inside,
      NULL },
    { "input-timed", "in-bounds", "one byte written past the end of the first input by each timed launch alone",
      INJ_TIMED_INPUT, inj_input_timed, NULL },
    { "group", "group", "one group's (sequence's) rows scaled by 1+2^-5", INJ_VALUES, inj_group,
      inj_unfit_segments },
    { "small-row", "worst-tile", "the output row of least magnitude zeroed (on scaled inputs it weighs nothing in "
      "its tile)", INJ_VALUES, inj_small_row, inj_unfit_products },
    { "fragment", "allclose", "a 16 x 16 fragment of the middle tile 16 x the output's rms off, off the sampled "
      "rows (attention: 16 columns of the middle head)", INJ_VALUES, inj_fragment, inj_unfit_fragment },
    { "tilepos", "checksum", "one element per tile, off the checked rows and columns, 16 x the output's rms off",
      INJ_VALUES, inj_tilepos, inj_unfit_checksum },
    { "round", "rounding", "the fp32 to 16-bit output conversion truncates (round toward zero)", INJ_VALUES,
      product_inj_round, product_inj_round_unfit },
    { "mask", "allclose", "the causal mask shifted by one key", INJ_VALUES, attn_inj_mask, attn_inj_unfit },
    { "race", "determinism", "one bit of a repeated run flipped (needs --repeat 2 or more)", INJ_REPEAT,
      inj_race, NULL },
    { "graph-alloc", "graph", "the launch path allocates scratch on its first launch (passes eagerly)", INJ_LAUNCH,
      inj_graph_alloc, NULL },
    { "graph-sync", "graph", "the launch path reads a value back from the device (passes eagerly)", INJ_LAUNCH,
      inj_graph_sync, NULL },
    { "graph-diff", "graph", "one bit differs between the graph's replay and the eager run (needs --graph)",
      INJ_GRAPH, inj_race, NULL },
    { "scale", "scale", "one scale block of A off by a power of two (quantize stage)", INJ_QSTAGE, q_inj_scale,
      q_inj_unfit },
    { "quant", "conversion", "one scale block of A rounded the wrong way (quantize stage)", INJ_QSTAGE,
      q_inj_quant, q_inj_unfit },
    { "scale-index", "snr", "each A scale block read from its neighbour's (row or K block): a wrong scale index",
      INJ_VALUES, q_inj_scale_index, q_inj_index_unfit },
    { "precision", "baseline", "every element off by up to 2^-6 of itself (a narrow accumulator)", INJ_VALUES,
      q_inj_precision, q_inj_unfit },
    { "fault", "worker", "the worker dies of SIGSEGV at each launch (its cases: verdict fault, exit 5)",
      INJ_WORKER, inj_fault, NULL },
    { "bitflip", "agreement", "one bit of the first output flipped after the gates: only its digest differs "
      "(a device list: bitflip@N)", INJ_DIGEST, inj_race, NULL },
    { "slow", "speed", "each timed launch runs 8 times (a device list: slow@N)", INJ_TIMED, inj_slow, NULL },
};
#define N_INJECTS (sizeof INJECTS / sizeof *INJECTS)

/* The fault named `name`, or NULL. */
static const struct inject *inject_find(const char *name)
{
    for (size_t i = 0; i < N_INJECTS; i++)
        if (strcmp(INJECTS[i].name, name) == 0) return &INJECTS[i];
    return NULL;
}

/* The fault KIND of `--inject KIND` or `KIND@N` (a static buffer). */
static const char *inject_kind(const char *inject)
{
    static char name[64];
    snprintf(name, sizeof name, "%.*s", (int)strcspn(inject, "@"), inject);
    return name;
}

/* Whether fault inj is one that only the cross-device checks of a device
 * list catch (node.c): a digest or a time, not a gate of one device. */
static int inject_cross_device(const struct inject *inj)
{
    return inj->stage == INJ_DIGEST || inj->stage == INJ_TIMED;
}

/* The environment variable a device list's driver (node.c) sets for each
 * device's kgate: its entry in the list. */
#define NODE_ENTRY_ENV "KGATE_NODE_ENTRY"

/* Exit 2 when fault inj cannot be planted in a run of `repeat` runs per
 * case (race: repeated runs), with or without --graph (graph-diff). */
static void inject_check_stage(const struct inject *inj, int repeat, int graph)
{
    if (inj->stage == INJ_REPEAT && repeat < 2)
        die(EXIT_USAGE, "--inject %s plants its fault in repeated runs: give --repeat 2 or more", inj->name);
    if (inj->stage == INJ_GRAPH && !graph)
        die(EXIT_USAGE, "--inject %s plants its fault in the graph path's check: give --graph", inj->name);
}

/* Set the command's default --repeat; exit 2 on an unknown fault, on
 * `race` without repeated runs, on `graph-diff` without --graph, or on a
 * cross-device fault outside a device list's run. */
static void inject_check(struct opts *o, int default_repeat)
{
    if (!o->repeat) o->repeat = default_repeat;
    if (!o->inject) return;
    if (strchr(o->inject, '@'))
        die(EXIT_USAGE, "--inject %s: KIND@N plants a fault in entry N of a device list: give --device LIST",
            shown(o->inject));
    if (!inject_find(o->inject)) {
        char names[512] = "";
        for (size_t i = 0; i < N_INJECTS; i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "", INJECTS[i].name);
        die(EXIT_USAGE, "--inject %s: unknown fault (%s)", shown(o->inject), names);
    }
    inject_check_stage(inject_find(o->inject), o->repeat, o->graph);
    if (inject_cross_device(inject_find(o->inject)) && !getenv(NODE_ENTRY_ENV))
        die(EXIT_USAGE, "--inject %s: only the cross-device checks of a device list catch it: give --device "
            "LIST and --inject %s@N (N: the entry of the list it is planted in)", o->inject, o->inject);
}
