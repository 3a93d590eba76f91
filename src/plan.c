/* src/plan.c — the check plan of an output (every element, or a sample that
 * covers every row, column and tile) and the references on it: double, and
 * the same precision as the kernel's, by the op's reference hook.  Relies on
 * util.c, ref.c and run.c. */

/* Which elements of an output are checked.  Full: every element.  Sampled
 * (when a full reference would take more than FULL_CHECK_MACS multiply-adds
 * and no --full): in every tile row of KG_TILE rows, its first and last row
 * and one seeded random row are checked across all columns (the row
 * block); and every other row on nc columns of its own (the column block).
 * The rows take turns over ng column groups (plan_groups), so that a few
 * consecutive rows check many different columns: a 16 x 16 fragment of a
 * product computed wrong off the sampled rows is seen by some row's
 * columns (in attention, when there are at most 16 heads; a 64-row block
 * of one head, when there are at most 64).  Products: PLAN_COL_GROUPS
 * groups (plan_col_groups).  Outputs made of heads (attention): a group per
 * head, its columns the head's.  So every row and every tile (tails
 * included) has checked elements. */
struct plan {
    int full;
    size_t nr, nc;                /* sampled rows (all columns); columns a row of the column block checks */
    size_t ng;                    /* column groups */
    uint32_t *grp;                /* grp[i]: row i's column group (plan_groups); NULL on a full plan */
    uint32_t *rows, *cols;        /* full: rows = 0..rows-1, nc = 0; cols: ng x nc, each group ascending */
    unsigned char *row_in;        /* row_in[i]: row i is among `rows` */
};

#define PLAN_COL_GROUPS 16   /* a product's column groups: a 16-row fragment meets all of them */
#define PLAN_GROUP_RUN 64    /* rows that take the groups in one turn */

/* The column group of every row of output o (into p->grp): within each
 * segment (a group of a grouped GEMM, a sequence; else the whole output),
 * the rows of each run of PLAN_GROUP_RUN from the segment's first row take
 * the ng groups in turn, from a seeded start of the run's own.  So 16
 * consecutive rows of a run meet 16 groups, whatever a segment's offset,
 * and a fault on every 64th row meets a random group in each run. */
static void plan_groups(struct plan *p, const struct output *o, uint64_t key)
{
    p->grp = xcalloc(o->rows + 1, sizeof *p->grp);   /* a row no segment holds: group 0 */
    size_t nseg = o->seg ? o->nseg : 1;
    for (size_t k = 0; k < nseg; k++) {
        size_t s0 = o->seg ? o->seg[k] : 0, s1 = o->seg ? o->seg[k + 1] : o->rows;
        for (size_t i = s0; i < s1; i++)
            p->grp[i] = (uint32_t)((i - s0 + rng_at(key ^ mix64(s0), (i - s0) / PLAN_GROUP_RUN)) % p->ng);
    }
}

/* The nc columns that row i of plan p checks in the column block (ascending). */
static const uint32_t *plan_cols(const struct plan *p, size_t i)
{
    return p->cols + p->grp[i] * p->nc;
}

/* Whether the column block checks element (i, j): i is not a sampled row
 * and j is among plan_cols(p, i) (a binary search). */
static int plan_col_checked(const struct plan *p, size_t i, size_t j)
{
    if (p->full || p->row_in[i] || !p->nc) return 0;
    const uint32_t *c = plan_cols(p, i);
    size_t lo = 0, hi = p->nc;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c[mid] < j) lo = mid + 1; else hi = mid;
    }
    return lo < p->nc && c[lo] == j;
}

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

/* A product's column groups (PLAN_COL_GROUPS of them, into p): per tile
 * column of KG_TILE, its first and last column in every group, and between
 * them one column per group, the groups' evenly spaced from a seeded
 * offset (a tile column of 1 or 2 columns: those alone).  So any 16
 * consecutive rows of a run (plan_groups) check a column in every 8
 * consecutive interior columns of a 128-wide tile.  Every group has the
 * same count, nc. */
static void plan_col_groups(struct plan *p, size_t cols, uint64_t key)
{
    size_t nc = 0;
    for (size_t t0 = 0; t0 < cols; t0 += KG_TILE) nc += cols - t0 < 3 ? cols - t0 : 3;
    p->ng = PLAN_COL_GROUPS, p->nc = nc;
    p->cols = xmalloc((p->ng * nc + 1) * sizeof(uint32_t));
    for (size_t g = 0; g < p->ng; g++) {
        uint32_t *c = p->cols + g * nc;
        for (size_t t0 = 0; t0 < cols; t0 += KG_TILE) {
            size_t t1 = t0 + KG_TILE < cols ? t0 + KG_TILE : cols;
            *c++ = (uint32_t)t0;
            size_t m = t1 - t0 - 2;   /* the interior columns */
            if (t1 - t0 >= 3) *c++ = (uint32_t)(t0 + 1 + (rng_at(key, t0) + g * m / p->ng) % m);
            if (t1 - t0 >= 2) *c++ = (uint32_t)(t1 - 1);
        }
    }
}

/* An attention output's column groups (into p): one per head of head_dim
 * columns, the head's own. */
static void plan_head_groups(struct plan *p, size_t cols, size_t head_dim)
{
    p->ng = cols / head_dim, p->nc = head_dim;
    p->cols = xmalloc((cols + 1) * sizeof(uint32_t));
    for (size_t j = 0; j < cols; j++) p->cols[j] = (uint32_t)j;
}

static void plan_build(struct plan *p, const struct output *o, int force_full, uint64_t key)
{
    memset(p, 0, sizeof *p);
    p->row_in = xcalloc(o->rows, 1);
    p->ng = 1;
    p->full = force_full || o->check_macs <= (double)FULL_CHECK_MACS;
    if (p->full) {
        p->nr = o->rows;
        p->rows = xmalloc(o->rows * sizeof(uint32_t));
        for (size_t i = 0; i < o->rows; i++) p->rows[i] = (uint32_t)i;
    } else {
        p->rows = plan_sample_lines(o->rows, mix64(key ^ 0x726f7773), &p->nr);
        if (o->head_dim) plan_head_groups(p, o->cols, o->head_dim);
        else plan_col_groups(p, o->cols, mix64(key ^ 0x636f6c73));
        plan_groups(p, o, mix64(key ^ 0x68656164));
    }
    for (size_t r = 0; r < p->nr; r++) p->row_in[p->rows[r]] = 1;
}

static void plan_free(struct plan *p)
{
    free(p->grp);
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
 * C is rows x nc (row i's element c at column plan_cols(p, i)[c]; rows in
 * block R are skipped when read). */
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
