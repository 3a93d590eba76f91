/* src/plan.c — the check plan of an output (every element, or a sample that
 * covers every row, column and tile) and the references on it: double, and
 * the same precision as the kernel's, by the op's reference hook.  Relies on
 * util.c, ref.c and run.c. */

/* Which elements of an output are checked.  Full: every element.  Sampled
 * (when a full reference would take more than FULL_CHECK_MACS multiply-adds
 * and no --full): in every tile row of KG_TILE rows, its first and last row
 * and one seeded random row are checked across all columns; and some columns
 * across all rows: in every tile column three of them, or, for outputs made
 * of heads (attention), all columns of one seeded head.  So every row and
 * every tile (tails included) has checked elements. */
struct plan {
    int full;
    size_t nr, nc;                /* sampled rows (all columns), sampled columns (all rows) */
    uint32_t *rows, *cols;        /* full: rows = 0..rows-1, nc = 0 */
    unsigned char *row_in;        /* row_in[i]: row i is among `rows` */
};

/* The lines to check among n: per tile of KG_TILE, first, last and one
 * random line, deduplicated, ascending. */
static uint32_t *plan_sample_lines(size_t n, uint64_t key, size_t *count)
{
    uint32_t *v = xmalloc((3 * (n / KG_TILE + 1)) * sizeof(uint32_t));
    size_t c = 0;
    for (size_t t0 = 0; t0 < n; t0 += KG_TILE) {
        size_t t1 = t0 + KG_TILE < n ? t0 + KG_TILE : n;
        size_t pick[3] = { t0, t0 + 1 + rng_at(key, t0) % (t1 - t0), t1 - 1 };
        if (pick[1] >= t1 - 1) pick[1] = t0;
        for (int i = 0; i < 3; i++)
            if (c == 0 || pick[i] > v[c - 1]) v[c++] = (uint32_t)pick[i];
    }
    *count = c;
    return v;
}

static void plan_build(struct plan *p, const struct output *o, int force_full, uint64_t key)
{
    memset(p, 0, sizeof *p);
    p->row_in = xcalloc(o->rows, 1);
    p->full = force_full || o->check_macs <= (double)FULL_CHECK_MACS;
    if (p->full) {
        p->nr = o->rows;
        p->rows = xmalloc(o->rows * sizeof(uint32_t));
        for (size_t i = 0; i < o->rows; i++) p->rows[i] = (uint32_t)i;
    } else {
        p->rows = plan_sample_lines(o->rows, mix64(key ^ 0x726f7773), &p->nr);
        if (o->head_dim) {
            size_t head = rng_at(mix64(key ^ 0x68656164), 0) % (o->cols / o->head_dim);
            p->nc = o->head_dim;
            p->cols = xmalloc(p->nc * sizeof(uint32_t));
            for (size_t c = 0; c < p->nc; c++) p->cols[c] = (uint32_t)(head * o->head_dim + c);
        } else {
            p->cols = plan_sample_lines(o->cols, mix64(key ^ 0x636f6c73), &p->nc);
        }
    }
    for (size_t r = 0; r < p->nr; r++) p->row_in[p->rows[r]] = 1;
}

static void plan_free(struct plan *p)
{
    free(p->rows);
    free(p->cols);
    free(p->row_in);
}

/* Number of checked elements. */
static size_t plan_count(const struct plan *p, const struct output *o)
{
    return p->nr * o->cols + (o->rows - p->nr) * p->nc;
}

/* Reference values on a plan: block R is nr x cols (the sampled rows), block
 * C is rows x nc (the sampled columns; rows in block R are skipped when read). */
struct refs {
    double *ref_r, *ref_c;        /* double accumulation */
    float *lp_r, *lp_c;           /* same precision, rounded to the output's dtype */
    float *lpu_r, *lpu_c;         /* products: the same before that rounding (NULL otherwise) */
    double *hp_r, *hp_c;          /* low precision: the unquantised product (NULL otherwise) */
    float *tc_r, *tc_c;           /* low precision: the fp8 tensor cores' sums (ref.c's ACC_TC8), rounded */
    double *sum_r, *sum_c;        /* products of unquantized operands: every row's and column's exact sum */
    double *slack_r, *slack_c;    /* ... and what fp32 accumulation may lose of it (product_sums); else NULL */
    double ref_s, lp_s;           /* seconds each took; lp_s < 0: computed with ref */
};

static void refs_alloc(struct refs *f, const struct output *o, const struct plan *p)
{
    memset(f, 0, sizeof *f);
    f->ref_r = xcalloc(p->nr * o->cols, sizeof(double));
    f->lp_r = xcalloc(p->nr * o->cols, sizeof(float));
    f->ref_c = xcalloc(o->rows * p->nc, sizeof(double));
    f->lp_c = xcalloc(o->rows * p->nc, sizeof(float));
    if (o->nparts) {
        f->lpu_r = xcalloc(p->nr * o->cols, sizeof(float));
        f->lpu_c = xcalloc(o->rows * p->nc, sizeof(float));
    }
    if (o->nparts && o->parts[0].q) {
        f->hp_r = xcalloc(p->nr * o->cols, sizeof(double));
        f->hp_c = xcalloc(o->rows * p->nc, sizeof(double));
        f->tc_r = xcalloc(p->nr * o->cols, sizeof(float));
        f->tc_c = xcalloc(o->rows * p->nc, sizeof(float));
    }
}

/* Round n values to dtype t in place, keeping the unrounded ones in keep
 * (unless NULL). */
static void refs_round(enum dtype t, float *v, size_t n, float *keep)
{
    for (size_t i = 0; i < n; i++) {
        if (keep) keep[i] = v[i];
        v[i] = dt_round(t, v[i]);
    }
}

/* The double reference and the same-precision reference of output o on plan
 * p, by the op's reference hook. */
static void refs_compute(struct refs *f, struct run *r, int o, const struct plan *p)
{
    refs_alloc(f, &r->out[o], p);
    r->c->op->reference(r, o, p, f);
}

static void refs_free(struct refs *f)
{
    free(f->ref_r);
    free(f->ref_c);
    free(f->lp_r);
    free(f->lp_c);
    free(f->lpu_r);
    free(f->lpu_c);
    free(f->hp_r);
    free(f->hp_c);
    free(f->tc_r);
    free(f->tc_c);
    free(f->sum_r);
    free(f->sum_c);
    free(f->slack_r);
    free(f->slack_c);
}
