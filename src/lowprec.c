/* src/lowprec.c — low precision, the fp8 and MX mode of gemm and grouped:
 * its options and label, the quantized operands (ref.c's codes and scales),
 * their product's launches, the quantize-only stage gated byte for byte, its
 * planted faults, and which devices convert which format.  Relies on case.c,
 * run.c, products.c, ref.c (codes, scales, the CPU candidate), gpu.c and
 * compile.c (the arm's sm_90a entries) and util.c. */

/* --- options shared by gemm and grouped --- */

/* The low-precision --dtype names: an element format, MX (blocks of 32 with
 * an E8M0 scale) or not (one fp32 scale per tensor, row or block). */
static const struct { const char *name; enum qfmt f; int mx; } QDTYPES[] = {
    { "e4m3", Q_E4M3, 0 }, { "e5m2", Q_E5M2, 0 },
    { "mxfp8", Q_E4M3, 1 }, { "mxfp8e5m2", Q_E5M2, 1 }, { "mxfp4", Q_E2M1, 1 },
};
#define N_QDTYPES (sizeof QDTYPES / sizeof *QDTYPES)
#define Q_NAMES "e4m3, e5m2, mxfp8, mxfp8e5m2, mxfp4"

#define Q_GIVEN_SCALING 1u
#define Q_GIVEN_RULE 2u
#define Q_GIVEN_OUT 4u
#define Q_GIVEN_ENC 8u

/* The element format a case runs: E4M3/E5M2 in its encoding, or E2M1. */
static enum qfmt q_format(const struct kcase *c)
{
    if (c->enc != ENC_FNUZ) return c->qfmt;
    return c->qfmt == Q_E4M3 ? Q_E4M3_FNUZ : c->qfmt == Q_E5M2 ? Q_E5M2_FNUZ : c->qfmt;
}

/* A two-valued option: 0 if val is a, 1 if it is b; else exit 2 with
 * "WHERE: KEY VAL: expected" (c->where names the case). */
static int q_one_of2(const struct kcase *c, const char *key, const char *val, const char *a, const char *b,
                     const char *expected)
{
    if (strcmp(val, a) == 0) return 0;
    if (strcmp(val, b) == 0) return 1;
    die(EXIT_USAGE, "%s: %s %s: %s", c->where, key, shown(val), expected);
}

/* Options of the low-precision path (--dtype with one of Q_NAMES,
 * --scaling, --mx-rule, --out, --fp8); returns as op->set does, -1 for a
 * key (or a plain --dtype) it leaves to the caller. */
static int q_set(struct kcase *c, const char *key, const char *val)
{
    static const char *const KEYS[] = { "--dtype", "--scaling", "--mx-rule", "--out", "--fp8" };
    for (size_t i = 0; i < sizeof KEYS / sizeof *KEYS; i++)
        if (strcmp(key, KEYS[i]) == 0) case_need(c, key, val);
    if (strcmp(key, "--dtype") == 0) {
        c->qfmt = Q_NONE;
        for (size_t i = 0; i < N_QDTYPES; i++)
            if (strcmp(val, QDTYPES[i].name) == 0) {
                c->qfmt = QDTYPES[i].f, c->mx = QDTYPES[i].mx;
                if (!(c->q_given & Q_GIVEN_OUT)) c->dt = DT_BF16;
                return 1;
            }
        return -1;
    }
    if (strcmp(key, "--scaling") == 0) {
        int k = 0, n = (int)(sizeof QSCALING / sizeof *QSCALING);
        while (k < n && strcmp(val, QSCALING[k]) != 0) k++;
        if (k == n) die(EXIT_USAGE, "%s: --scaling %s: expected tensor, row, block or mx", c->where, shown(val));
        c->scaling = (enum qscaling)k, c->q_given |= Q_GIVEN_SCALING;
        return 1;
    }
    if (strcmp(key, "--mx-rule") == 0) {
        c->qrule = q_one_of2(c, key, val, "spec", "up", "expected spec or up") ? QR_MX_UP : QR_MX_SPEC;
        c->q_given |= Q_GIVEN_RULE;
        return 1;
    }
    if (strcmp(key, "--out") == 0) {
        c->dt = q_one_of2(c, key, val, "bf16", "f32", "a low-precision GEMM writes bf16 or f32") ? DT_F32 : DT_BF16;
        c->q_given |= Q_GIVEN_OUT;
        return 1;
    }
    if (strcmp(key, "--fp8") == 0) {
        c->enc = q_one_of2(c, key, val, "ocp", "fnuz", "expected ocp or fnuz") ? ENC_FNUZ : ENC_OCP;
        c->q_given |= Q_GIVEN_ENC;
        return 1;
    }
    return -1;
}

/* Check a case's low-precision options (exit 2 naming c->where). */
static void q_finish(struct kcase *c)
{
    if (c->qfmt == Q_NONE) {
        if (c->q_given)
            die(EXIT_USAGE, "%s: --scaling, --mx-rule, --out and --fp8 apply to the low-precision dtypes (%s)",
                c->where, Q_NAMES);
        return;
    }
    if (strcmp(c->layout, "NT") != 0)
        die(EXIT_USAGE, "%s: --layout %s: low precision reads A as [M][K] and B as [N][K], K contiguous as fp8 "
            "tensor cores need it: --layout NT", c->where, c->layout);
    if (c->bwd) die(EXIT_USAGE, "%s: --bwd: the low-precision path has forward products only", c->where);
    if (c->mx && (c->q_given & Q_GIVEN_SCALING) && c->scaling != QS_MX)
        die(EXIT_USAGE, "%s: --scaling %s: the MX dtypes carry their own scaling (blocks of 32, E8M0)", c->where,
            QSCALING[c->scaling]);
    if (!c->mx && c->scaling == QS_MX)
        die(EXIT_USAGE, "%s: --scaling mx: give --dtype mxfp8, mxfp8e5m2 or mxfp4", c->where);
    if (!c->mx && (c->q_given & Q_GIVEN_RULE))
        die(EXIT_USAGE, "%s: --mx-rule applies to the MX dtypes (mxfp8, mxfp8e5m2, mxfp4)", c->where);
    if (c->mx && c->enc == ENC_FNUZ)
        die(EXIT_USAGE, "%s: --fp8 fnuz: MX elements are OCP formats", c->where);
    if (c->mx) c->scaling = QS_MX, c->enc = ENC_OCP, c->qrule = c->qrule == QR_MX_UP ? QR_MX_UP : QR_MX_SPEC;
    if (c->qfmt == Q_E2M1) c->enc = ENC_OCP;
}

/* The dtype part of a label: "bf16", or for low precision the inputs, the
 * encoding, the scaling or MX rule and the output: "e4m3 ocp row->bf16",
 * "mxfp4 spec->f32". */
static void q_dtype_label(const struct kcase *c, char *buf, size_t n)
{
    if (c->qfmt == Q_NONE) { snprintf(buf, n, "%s", DTYPES[c->dt].name); return; }
    const char *name = "?";
    for (size_t i = 0; i < N_QDTYPES; i++)
        if (QDTYPES[i].f == c->qfmt && QDTYPES[i].mx == c->mx) name = QDTYPES[i].name;
    if (c->mx)
        snprintf(buf, n, "%s %s->%s", name, c->qrule == QR_MX_UP ? "up" : "spec", DTYPES[c->dt].name);
    else
        snprintf(buf, n, "%s %s%s->%s", name, c->enc == ENC_FNUZ ? "fnuz " : c->enc == ENC_OCP ? "ocp " : "",
                 QSCALING[c->scaling], DTYPES[c->dt].name);
}

/* --- quantized operands and their product --- */

/* One quantized operand: its unquantised values, ref.c's codes and scales
 * (what the GEMM reads, uploaded), their decoded floats (what the
 * reference multiplies), and the buffers of the quantize-only kernel, whose
 * codes and scales must equal ref.c's byte for byte. */
struct qoperand {
    const char *name;             /* "A", "B" */
    struct qgrid g;
    float *master;                /* batch*rows x cols, bf16 values: the unquantised inputs */
    uint8_t *codes, *e8;          /* ref.c's codes; MX: E8M0 scale bytes */
    float *s;                     /* not MX: fp32 dequantisation scales (1/scale) */
    float *xq, *sf;               /* decoded codes; scales as floats (MX: 2^e) */
    size_t code_bytes, nblocks;
    uint64_t d_codes, d_scales;   /* ref.c's, as the GEMM reads them */
    uint64_t d_master, d_qcodes, d_qscales;   /* the quantize-only kernel's input and outputs */
};

/* What the quantize-only stage found for one operand: mismatches against
 * ref.c and the first of each kind, as a line. */
struct qstage { size_t scale_bad, code_bad; char scale_at[240], code_at[240]; };

/* A low-precision case while it runs. */
struct qrun {
    enum qfmt f;
    enum qrule rule;              /* QR_AMAX, or the MX rule */
    size_t gk;                    /* the K-block of a scale: K, 128 or 32 */
    struct qoperand op[2];        /* A, B */
    struct qprod *prods;          /* one per group (gemm: one) */
    struct qstage st[2];
    int stage_done;
};

/* The scale block of an operand (rows of `rows`, K columns) under the
 * case's scaling: per tensor, per row, 1 x 128 (A) or 128 x 128 (B), MX 1 x 32. */
static void q_block_shape(const struct kcase *c, int is_b, size_t rows, size_t *gr, size_t *gc)
{
    size_t K = c->k;
    switch (c->scaling) {
    case QS_TENSOR: *gr = rows, *gc = K; break;
    case QS_ROW:    *gr = 1, *gc = K; break;
    case QS_BLOCK:  *gr = is_b ? 128 : 1, *gc = 128; break;
    case QS_MX:     *gr = 1, *gc = 32; break;
    }
    if (*gr == 0) *gr = 1;
    if (*gc == 0) *gc = 1;
}

/* Decode n rows of K codes of format f (q_row_bytes each) into v (n x K). */
static void q_decode_rows(enum qfmt f, const uint8_t *codes, size_t n, size_t K, float *v)
{
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < K; k++) v[i * K + k] = q_decode(f, q_get(f, codes, q_row_bytes(f, K), i, k));
}

/* Decode n scales as the rule stores them (fp32, or E8M0 bytes) into v. */
static void q_decode_scales(enum qrule rule, const void *raw, size_t n, float *v)
{
    for (size_t b = 0; b < n; b++)
        v[b] = rule == QR_AMAX ? ((const float *)raw)[b] : e8m0_decode(((const uint8_t *)raw)[b]);
}

/* Keep operand op's codes, scales and masters for --dump: A's as
 * [rows][...], B's as [batch][rows][...]; scales [batch][row blocks][K blocks]. */
static void q_keep(struct run *r, const struct qoperand *op, int is_a)
{
    static const char *const names[2][4] = { { "B_codes", "B_scales", "B_e8m0", "B_master" },
                                              { "A_codes", "A_scales", "A_e8m0", "A_master" } };
    const struct qgrid *g = &op->g;
    size_t rb = q_row_bytes(r->q->f, g->cols), nbr = qgrid_nbr(g), nbc = qgrid_nbc(g);
    if (is_a) {
        run_keep(r, names[1][0], op->codes, 'u', 2, g->batch * g->rows, rb, 0);
        run_keep(r, names[1][3], op->master, 'f', 2, g->batch * g->rows, g->cols, 0);
    } else {
        run_keep(r, names[0][0], op->codes, 'u', 3, g->batch, g->rows, rb);
        run_keep(r, names[0][3], op->master, 'f', 3, g->batch, g->rows, g->cols);
    }
    run_keep(r, names[is_a][1], op->sf, 'f', 3, g->batch, nbr, nbc);
    if (r->q->rule != QR_AMAX) run_keep(r, names[is_a][2], op->e8, 'u', 3, g->batch, nbr, nbc);
}

/* Make operand `op` (input stream id): batch x rows x K seeded bf16 values,
 * quantized by ref.c, decoded, uploaded; and the quantize-only kernel's
 * buffers allocated. */
static void q_operand(struct run *r, struct qoperand *op, const char *name, int id, size_t batch, size_t rows)
{
    struct qrun *q = r->q;
    size_t K = r->c->k, gr = 1, gc = 1;
    q_block_shape(r->c, id == 2, rows, &gr, &gc);
    op->name = name;
    op->g = (struct qgrid){ batch, rows, K, gr, gc };
    op->nblocks = qgrid_blocks(&op->g);
    op->code_bytes = batch * rows * q_row_bytes(q->f, K);
    op->master = run_input(r, id, in_stacked(batch, rows, K), DT_BF16);
    op->codes = run_owned(r, op->code_bytes + 1);
    op->s = run_host(r, op->nblocks + 1);
    op->e8 = run_owned(r, op->nblocks + 1);
    q_quantize(op->master, &op->g, q->f, q->rule, op->codes, op->s, op->e8);
    op->xq = run_host(r, batch * rows * K + 1);
    q_decode_rows(q->f, op->codes, batch * rows, K, op->xq);
    op->sf = run_host(r, op->nblocks + 1);
    q_decode_scales(q->rule, q->rule == QR_AMAX ? (void *)op->s : (void *)op->e8, op->nblocks, op->sf);
    size_t sbytes = op->nblocks * (q->rule == QR_AMAX ? sizeof(float) : 1);
    static const char *const part[5] = { "codes", "scales", "master", "quantized", "quantized scales" };
    char nm[5][IN_NAME - 8];   /* the buffers' names in messages: "A codes", ... */
    for (int i = 0; i < 5; i++) snprintf(nm[i], sizeof nm[i], "%s %s", name, part[i]);
    op->d_codes = run_upload_bytes(r, nm[0], op->codes, op->code_bytes);
    op->d_scales = run_upload_bytes(r, nm[1], q->rule == QR_AMAX ? (void *)op->s : (void *)op->e8, sbytes);
    op->d_master = run_upload(r, nm[2], op->master, batch * rows * K, DT_F32);
    op->d_qcodes = run_scratch(r, nm[3], op->code_bytes);   /* the quantize stage's outputs */
    op->d_qscales = run_scratch(r, nm[4], sbytes);
    q_keep(r, op, id == 1);
}

/* The exponent sm_90a's fp8 tensor cores give a subnormal code of format f
 * (ref.c's ACC_TC8): its smallest normal exponent; E2M1 codes reach them as
 * E4M3 (the kernels decode them so), and the others' model is sm_90a's. */
static int q_tc_emin(enum qfmt f)
{
    return 1 - QFMTS[f == Q_E2M1 ? Q_E4M3 : f].bias;
}

/* The low-precision part of a gemm or grouped case: format, rule, K-block. */
static struct qrun *q_begin(struct run *r)
{
    const struct kcase *c = r->c;
    struct qrun *q = r->q = run_owned(r, sizeof *q);
    q->f = q_format(c);
    q->rule = c->mx ? c->qrule : QR_AMAX;
    q_block_shape(c, 0, 1, &(size_t){ 0 }, &q->gk);
    return q;
}

/* Low-precision gemm: A [M][K] and B [N][K] quantized (ref.c), C = A·Bᵀ
 * [M][N] in bf16 or f32.  The product's reference multiplies the decoded
 * codes and scales; its parts keep the unquantised values for the SNR
 * against the unquantised (bf16) product. */
static void qgemm_prepare(struct run *r)
{
    const struct kcase *c = r->c;
    struct qrun *q = q_begin(r);
    size_t M = c->m, N = c->n, K = c->k;
    q_operand(r, &q->op[0], "A", 1, 1, M);
    q_operand(r, &q->op[1], "B", 2, 1, N);
    q->prods = run_owned(r, sizeof *q->prods);
    q->prods[0] = (struct qprod){ q->op[0].xq, q->op[1].xq, q->op[0].sf, q->op[1].sf, M, N, K, 0,
                                  q->op[0].g.gr, q->op[1].g.gr, q->gk, q_tc_emin(q->f) };
    /* the strides of the codes' rows in bytes, for the sm_90a path (FP4: two codes a byte, unpacked there) */
    int64_t rb = (int64_t)q_row_bytes(q->f, K);
    struct output *o = product_output(r, "C", M, N, (int64_t)N, 1, 1,
        (struct prod_launch){ .dx = q->op[0].d_codes, .dy = q->op[1].d_codes, .sxm = rb, .sxk = 1,
                              .syk = 1, .syn = rb, .m = M, .n = N, .k = K, .fp4 = q->f == Q_E2M1 });
    product_part(o, 0, 0, M, K, q->op[0].master, run_transpose(r, q->op[1].master, N, K));
    o->parts[0].q = &q->prods[0];
}

/* Low-precision grouped: A [ΣM][K], B [G][N][K] quantized (B's scale blocks
 * per group), C_g = A_g·B_gᵀ [ΣM][N]. */
static void qgrouped_prepare(struct run *r)
{
    const struct kcase *c = r->c;
    struct qrun *q = q_begin(r);
    size_t G = c->nlens, N = c->n, K = c->k;
    struct groups gs = product_groups(r);
    const uint32_t *offs = gs.offs;
    size_t M = offs[G];
    q_operand(r, &q->op[0], "A", 1, 1, M);
    q_operand(r, &q->op[1], "B", 2, G, N);
    const float *bt = run_transpose_blocks(r, q->op[1].master, G, N, K);   /* canonical [G][K][N] */
    size_t nkb = (K + q->gk - 1) / q->gk, b_blocks = qgrid_nbr(&q->op[1].g) * nkb;
    q->prods = run_owned(r, G * sizeof *q->prods);
    int64_t rb = (int64_t)q_row_bytes(q->f, K);
    struct output *o = product_output(r, "C", M, N, (int64_t)N, 1, G,                 /* strides as qgemm's */
        (struct prod_launch){ .dx = q->op[0].d_codes, .dy = q->op[1].d_codes, .sxm = rb, .sxk = 1, .syk = 1,
                              .syn = rb, .syg = (int64_t)N * rb, .m = M, .n = N, .k = K, .fp4 = q->f == Q_E2M1 });
    product_ragged_rows(r, o, &gs);
    for (size_t g = 0; g < G; g++) {
        q->prods[g] = (struct qprod){ q->op[0].xq + offs[g] * K, q->op[1].xq + g * N * K, q->op[0].sf,
                                      q->op[1].sf + g * b_blocks, c->lens[g], N, K, offs[g],
                                      q->op[0].g.gr, q->op[1].g.gr, q->gk, q_tc_emin(q->f) };
        product_part(o, g, offs[g], c->lens[g], K, q->op[0].master + offs[g] * K, bt + g * K * N);
        o->parts[g].q = &q->prods[g];
    }
}

/* i's neighbour among n indices (i ^ 1, or i - 1 past the end; i alone). */
static size_t q_neighbour(size_t i, size_t n)
{
    return (i ^ 1) < n ? i ^ 1 : i > 0 ? i - 1 : i;
}

/* The index of the scale block next to block b of operand op's grid, as a
 * wrong scale index reads it: the neighbouring K block when a row has
 * several, else the neighbouring row block of its matrix, else the
 * neighbouring matrix's block (b itself when there is none). */
static size_t q_neighbour_block(const struct qoperand *op, size_t b)
{
    size_t nbr = qgrid_nbr(&op->g), nbc = qgrid_nbc(&op->g), per = nbr * nbc;
    size_t z = b / per, bi = b % per / nbc, bj = b % nbc;
    if (nbc > 1) return z * per + bi * nbc + q_neighbour(bj, nbc);
    if (nbr > 1) return z * per + q_neighbour(bi, nbr) * nbc + bj;
    return q_neighbour(z, op->g.batch) * per + bi * nbc + bj;
}

/* A low-precision product on the CPU: the codes and scales read back from
 * the buffers the GPU kernel would read, decoded, multiplied by ref.c's
 * candidate (qprod_elems, ACC_F32_TILED; --cpu-sums sm90a: ACC_TC8) per
 * group. */
static void q_cpu_product(struct run *r, const struct output *p)
{
    const struct qrun *q = r->q;
    const struct qoperand *A = &q->op[0], *B = &q->op[1];
    size_t K = r->c->k, groups = p->pl.ragged == RAG_ROWS ? p->pl.groups : 1;
    size_t na = A->g.batch * A->g.rows, nb = B->g.batch * B->g.rows;
    float *a = xmalloc(na * K * sizeof(float) + 1), *b = xmalloc(nb * K * sizeof(float) + 1);
    float *sa = xmalloc(A->nblocks * sizeof(float) + 1), *sb = xmalloc(B->nblocks * sizeof(float) + 1);
    q_decode_rows(q->f, (const uint8_t *)(uintptr_t)A->d_codes, na, K, a);
    q_decode_rows(q->f, (const uint8_t *)(uintptr_t)B->d_codes, nb, K, b);
    q_decode_scales(q->rule, (const void *)(uintptr_t)A->d_scales, A->nblocks, sa);
    q_decode_scales(q->rule, (const void *)(uintptr_t)B->d_scales, B->nblocks, sb);
    for (size_t g = 0; g < groups; g++) {
        struct qprod pr = q->prods[g];   /* the reference's geometry, the buffers' values */
        pr.x = a + (pr.x - A->xq), pr.y = b + (pr.y - B->xq), pr.sx = sa, pr.sy = sb + (pr.sy - B->sf);
        size_t row0 = p->pl.ragged == RAG_ROWS ? p->pl.offs[g] : 0;
        cpu_candidate_qgemm(r->o->cpu_sums_sm90 ? ACC_TC8 : ACC_F32_TILED, p->dt, &pr,
                            (char *)(uintptr_t)p->buf + row0 * p->srow * DTYPES[p->dt].bytes, p->srow, p->scol);
    }
    free(a), free(b), free(sa), free(sb);
}

/* The columns that must divide B's scale blocks (grb) for blockwise fp8
 * entries at tiles of `cols` columns: half the tile, whose halves each lie in
 * one block; 192 columns: 128, so that each of the tile's runs of 64 does
 * (kernels.hip, kg_wg_scale_rows). */
static int sm90_blk_cols(int cols)
{
    return cols == 192 ? 128 : cols / 2;
}

/* Which sm_90a fp8 entry family takes a low-precision case on the arm a,
 * for an output of K columns of inner dimension: 0 none, 1 scales of one
 * block along K (per tensor or per row: kg_qgemm_sm90_<fmt>_<out>, scaled in
 * the epilogue), 2 blockwise, a scale per 128 of K whose row blocks of B
 * hold whole halves of the tile (kg_qgemm_sm90_blk_*, scaled as each stage
 * is added), 3 MX (kg_qgemm_sm90_mx_*, each k32 step added times its E8M0
 * scales; MXFP4's codes unpacked to E4M3 first, which needs the arm's
 * packing).  fp32 scales take OCP E4M3 and E5M2. */
static int q_sm90_family(const struct arm *a, const struct qrun *q, size_t K)
{
    size_t grb = q->op[1].g.gr;
    if (a->sm90_smem <= 0) return 0;
    if (q->rule != QR_AMAX)
        return a->sm90_qmx && q->gk == (size_t)a->sm90_qmx &&
               (q->f == Q_E4M3 || q->f == Q_E5M2 || (q->f == Q_E2M1 && a->sm90_pack)) ? 3 : 0;
    if (q->f != Q_E4M3 && q->f != Q_E5M2) return 0;
    if (q->gk >= K) return 1;
    return a->sm90_qblock && q->gk == (size_t)a->sm90_qblock && a->sm90_tile_n >= 2 &&
           grb % (size_t)sm90_blk_cols(a->sm90_tile_n) == 0 ? 2 : 0;
}

/* Whether the 192-column fp8 entries of family fam (q_sm90_family; kg_qgemm_sm90_n192_*,
 * whose partial sums span the tile's width) take the product L on arm a,
 * `slots` (> 0) clusters at once: their persistent grid's rounds (units
 * over slots) times 192 are fewer than the rounds times the arm's tile
 * columns; blockwise (family 2) by 6% at least, since its one partial at 192
 * columns costs more a column than its two halves at 256 (measured on an
 * H100: 8192^3, 21 rounds of 192 against 16 of 256, took 1.035 the time,
 * 1.052 a column-round; 2000x3000x1024, 2 rounds either way, 0.856).  Per
 * tensor, 8192^3 takes 192 columns; 4096^3 keeps 4 rounds of 256 against 6
 * of 192; a product of one round either way takes 192. */
static int q_sm90_narrow(const struct arm *a, const struct prod_launch *L, size_t slots, int fam)
{
    size_t wide = sm90_units(a, L, a->sm90_tile_n, NULL), narrow = sm90_units(a, L, 192, NULL);
    size_t pct = fam == 2 ? 106 : 100;
    return (narrow + slots - 1) / slots * 192 * pct < (wide + slots - 1) / slots * (size_t)a->sm90_tile_n * 100;
}

/* The tile of the sm_90a fp8 entry of family fam (q_sm90_family) for the
 * product L, with an fp32 output or not: 128 x 192 where the arm has such
 * entries (per-tensor and per-row scales, family 1; blockwise, family 2,
 * with a bf16 output and B's scale blocks a multiple of 128 columns) and
 * q_sm90_narrow says so, else the arm's. */
static struct sm90_tile q_sm90_tile(const struct run *r, const struct prod_launch *L, int fam, int f32)
{
    const struct arm *a = r->d->arm;
    int has = fam == 1 || (fam == 2 && a->sm90_qblk192 && !f32 && r->q->op[1].g.gr % sm90_blk_cols(192) == 0);
    if (has && a->sm90_q192_smem > 0 && q_sm90_narrow(a, L, sm90_clusters(r->d, a), fam))
        return (struct sm90_tile){ 192, a->sm90_q192_smem, 1 };
    return sm90_tile_arm(a);
}

/* A low-precision product through the sm_90a fp8 GEMM when the current arm
 * has the family that takes the case (q_sm90_family) and a bf16 output, or
 * an fp32 one under --trades-precision when the arm has those entries
 * (their fp8 tensor-core sums, promoted every 128 of K or, MX, every 32,
 * fall short of an fp32 output's baseline against the portable kernel's
 * fp32 sums: kernels.hip "Input types").  Returns 0, launching nothing,
 * otherwise. */
static int q_sm90_launch(struct run *r, struct output *p)
{
    const struct arm *a = r->d->arm;
    const struct qrun *q = r->q;
    struct prod_launch *L = &p->pl;
    int gra = (int)q->op[0].g.gr, grb = (int)q->op[1].g.gr, fam = q_sm90_family(a, q, L->k);
    int f32 = p->dt == DT_F32 && r->o->trades_precision && a->sm90_qf32;
    if (!fam || (p->dt != DT_BF16 && !f32)) return 0;
    static const char *const fname[2][5][2] = {   /* [f32][family - 1, or 3 + family - 1 at 192 columns][E5M2] */
        { { "kg_qgemm_sm90_e4m3_bf16", "kg_qgemm_sm90_e5m2_bf16" },
          { "kg_qgemm_sm90_blk_e4m3_bf16", "kg_qgemm_sm90_blk_e5m2_bf16" },
          { "kg_qgemm_sm90_mx_e4m3_bf16", "kg_qgemm_sm90_mx_e5m2_bf16" },
          { "kg_qgemm_sm90_n192_e4m3_bf16", "kg_qgemm_sm90_n192_e5m2_bf16" },
          { "kg_qgemm_sm90_n192_blk_e4m3_bf16", "kg_qgemm_sm90_n192_blk_e5m2_bf16" } },
        { { "kg_qgemm_sm90_e4m3_f32", "kg_qgemm_sm90_e5m2_f32" },
          { "kg_qgemm_sm90_blk_e4m3_f32", "kg_qgemm_sm90_blk_e5m2_f32" },
          { "kg_qgemm_sm90_mx_e4m3_f32", "kg_qgemm_sm90_mx_e5m2_f32" },
          { "kg_qgemm_sm90_n192_e4m3_f32", "kg_qgemm_sm90_n192_e5m2_f32" },
          { NULL, NULL } } };   /* no blockwise fp32 output at 192 columns (q_sm90_tile) */
    struct sm90_args s;
    struct sm90_tile t = q_sm90_tile(r, L, fam, f32);
    sm90_args(r, L, 1, p->dt, 0, 0, t, &s);
    void *params[] = { &s.ta, &s.tb, &s.use_tma, &s.x, &s.y, (void *)&q->op[0].d_scales,
                       (void *)&q->op[1].d_scales, &p->buf, &L->doffs, &s.G, &s.units, &s.M, &s.N, &s.K, &gra,
                       &grb };
    gpu_launch_dims(r->d, fname[f32][t.n192 ? 3 + fam - 1 : fam - 1][q->f == Q_E5M2], &s.l, params);
    return 1;
}

/* Whether output p goes to gfx942's MFMA fp8 entries: the arm has them
 * (kg_qgemm_mfma_tile) and the case is FNUZ E4M3 or E5M2 (the encoding
 * gfx942 converts) with fp32 scales of one block along K (per tensor or
 * per row), plain or grouped, with a bf16 or fp32 output. */
static int q_mfma_takes(const struct run *r, const struct output *p)
{
    const struct qrun *q = r->q;
    return r->d->arm->mfma_qtile > 0 && (q->f == Q_E4M3_FNUZ || q->f == Q_E5M2_FNUZ) && q->rule == QR_AMAX &&
           q->gk >= p->pl.k;
}

/* A low-precision product: GPU kg_qgemm_<out> (grid N/BN x M/BM, the arm's
 * tile) or kg_qgrouped_<out> (grid N/BN x the groups' row tiles), 256
 * threads, reading ref.c's codes and scales; on gfx942 (q_mfma_takes) the
 * same launches of kg_q{gemm,grouped}_mfma_{fp8,bf8}_<out>, tiles of 128
 * (ragged rows still counted in tiles of 64, a block at an odd one leaving
 * at once); first the sm_90a path where it takes the output.  CPU:
 * q_cpu_product. */
static void q_launch(struct run *r, int o)
{
    static const char *const fname[2][2][3] = {   /* [grouped][f32]: portable, MFMA E4M3, MFMA E5M2 */
        { { "kg_qgemm_bf16", "kg_qgemm_mfma_fp8_bf16", "kg_qgemm_mfma_bf8_bf16" },
          { "kg_qgemm_f32", "kg_qgemm_mfma_fp8_f32", "kg_qgemm_mfma_bf8_f32" } },
        { { "kg_qgrouped_bf16", "kg_qgrouped_mfma_fp8_bf16", "kg_qgrouped_mfma_bf8_bf16" },
          { "kg_qgrouped_f32", "kg_qgrouped_mfma_fp8_f32", "kg_qgrouped_mfma_bf8_f32" } } };
    struct output *p = &r->out[o];
    struct qrun *q = r->q;
    struct prod_launch *L = &p->pl;
    if (r->d->kind == DEV_CPU) { q_cpu_product(r, p); return; }
    if (q_sm90_launch(r, p)) return;
    const struct arm *a = r->d->arm;
    int grouped = L->ragged == RAG_ROWS, f32 = p->dt == DT_F32, mf = q_mfma_takes(r, p);
    const char *name = fname[grouped][f32][mf ? 1 + (q->f == Q_E5M2_FNUZ) : 0];
    int M = (int)L->m, N = (int)L->n, K = (int)L->k, G = (int)L->groups, fmt = (int)q->f, mx = q->rule != QR_AMAX;
    int gra = (int)q->op[0].g.gr, grb = (int)q->op[1].g.gr, gck = (int)q->gk;
    unsigned gx = tile_count(N, mf ? a->mfma_qtile : a->tile_n);
    uint64_t *sa = &q->op[0].d_scales, *sb = &q->op[1].d_scales;
    if (!grouped) {
        void *params[] = { &L->dx, &L->dy, sa, sb, &p->buf, &M, &N, &K, &fmt, &mx, &gra, &grb, &gck };
        gpu_launch(r->d, name, gx, tile_count(M, mf ? a->mfma_qtile : a->tile_m), 1, 256, params);
    } else {
        product_tile_check(r->d);
        void *params[] = { &L->dx, &L->dy, sa, sb, &p->buf, &L->doffs, &L->dtiles, &G, &N, &K, &fmt, &mx,
                           &gra, &grb, &gck };
        gpu_launch(r->d, name, gx, (unsigned)L->tiles, 1, 256, params);
    }
}

/* --- the quantize-only stage --- */

/* Run the quantize-only kernel on operand op's unquantised values into its
 * poisoned buffers: GPU kg_quantize (one block of 256 threads per scale
 * block; FP4 blocks are 32 wide, so no two share a byte), CPU ref.c's
 * q_quantize as the candidate. */
static void q_stage_launch(struct run *r, struct qoperand *op)
{
    const struct qrun *q = r->q;
    int mx = q->rule != QR_AMAX;
    dev_fill(r->d, op->d_qcodes, 0xff, op->code_bytes);
    dev_fill(r->d, op->d_qscales, 0xff, op->nblocks * (mx ? 1 : sizeof(float)));
    if (r->d->kind == DEV_CPU) {
        q_quantize(op->master, &op->g, q->f, q->rule, (uint8_t *)(uintptr_t)op->d_qcodes,
                   (float *)(uintptr_t)op->d_qscales, (uint8_t *)(uintptr_t)op->d_qscales);
        return;
    }
    uint64_t s = mx ? 0 : op->d_qscales, e = mx ? op->d_qscales : 0;
    int batch = (int)op->g.batch, rows = (int)op->g.rows, cols = (int)op->g.cols, gr = (int)op->g.gr;
    int gc = (int)op->g.gc, fmt = (int)q->f, rule = (int)q->rule;
    void *params[] = { &op->d_master, &op->d_qcodes, &s, &e, &batch, &rows, &cols, &gr, &gc, &fmt, &rule };
    gpu_launch(r->d, "kg_quantize", (unsigned)op->nblocks, 1, 1, 256, params);
}

/* A scale as text: "0.0078125" or, for E8M0, "2^-7 (0x78)". */
static void q_scale_text(char *buf, size_t n, int mx, const unsigned char *scales, size_t b)
{
    if (mx) { snprintf(buf, n, "2^%d (0x%02x)", scales[b] - 127, scales[b]); return; }
    float v;
    memcpy(&v, scales + b * sizeof v, sizeof v);
    snprintf(buf, n, "%.9g", v);
}

/* Compare the kernel's scales with ref.c's: count, and the first as a line. */
static void q_compare_scales(const struct qrun *q, const struct qoperand *op, const unsigned char *got,
                             struct qstage *st)
{
    int mx = q->rule != QR_AMAX;
    size_t es = mx ? 1 : sizeof(float), nbr = qgrid_nbr(&op->g), nbc = qgrid_nbc(&op->g);
    const unsigned char *want = mx ? op->e8 : (const unsigned char *)op->s;
    for (size_t b = 0; b < op->nblocks; b++) {
        if (memcmp(got + b * es, want + b * es, es) == 0) continue;
        if (st->scale_bad++) continue;
        char k[48], w[48];
        q_scale_text(k, sizeof k, mx, got, b);
        q_scale_text(w, sizeof w, mx, want, b);
        snprintf(st->scale_at, sizeof st->scale_at, "%s scale block %zu (matrix %zu, rows %zu.., cols %zu..): "
                 "kernel %s, ref.c %s", op->name, b, b / (nbr * nbc), b / nbc % nbr * op->g.gr,
                 b % nbc * op->g.gc, k, w);
    }
}

/* Compare the kernel's codes with ref.c's element by element (and an odd
 * FP4 row's padding nibble): count, and the first as a line. */
static void q_compare_codes(const struct qrun *q, const struct qoperand *op, const uint8_t *got,
                            struct qstage *st)
{
    size_t rows = op->g.batch * op->g.rows, K = op->g.cols, rb = q_row_bytes(q->f, K);
    size_t width = K + (q->f == Q_E2M1 && K % 2);
    for (size_t i = 0; i < rows; i++)
        for (size_t k = 0; k < width; k++) {
            unsigned a = q_get(q->f, got, rb, i, k), b = q_get(q->f, op->codes, rb, i, k);
            if (a == b || st->code_bad++) continue;
            if (k == K) {
                snprintf(st->code_at, sizeof st->code_at, "%s row %zu: the padding nibble of an odd FP4 row "
                         "is 0x%x, must be 0", op->name, i, a);
                continue;
            }
            char kv[32], wv[32];
            snprintf(kv, sizeof kv, "%.9g", q_decode(q->f, a));
            snprintf(wv, sizeof wv, "%.9g", q_decode(q->f, b));
            snprintf(st->code_at, sizeof st->code_at, "%s[%zu][%zu] (x = %.9g): kernel 0x%02x (%s), ref.c "
                     "0x%02x (%s)", op->name, i, k, op->master[i * K + k], a, kv, b, wv);
        }
}

/* Plant the --inject fault of the quantize stage (if any) in operand op's
 * codes and scales as read back from the quantize-only kernel. */
static void q_stage_inject(struct run *r, struct qoperand *op, uint8_t *codes, unsigned char *scales)
{
    const struct inject *inj = run_inject(r, INJ_QSTAGE);
    struct inject_ctx ix = { .r = r, .qop = op, .qcodes = codes, .qscales = scales };
    if (inj) inj->apply(&ix);
}

/* run_exec's launch of the quantize stage of operand i. */
static void q_stage_exec(struct run *r, int i) { q_stage_launch(r, &r->q->op[i]); }

/* The quantize-only stage of a low-precision case: each operand quantized
 * by the kernel, read back (with --inject scale or quant planted in A), and
 * compared with ref.c's codes and scales; the scale and conversion gates
 * read the result. */
static void q_stage(struct run *r)
{
    struct qrun *q = r->q;
    for (int i = 0; i < 2; i++) {
        struct qoperand *op = &q->op[i];
        size_t sbytes = op->nblocks * (q->rule != QR_AMAX ? 1 : sizeof(float));
        run_exec(r, MAX_OUT + i, q_stage_exec, i);
        uint8_t *codes = xmalloc(op->code_bytes + 1);
        unsigned char *scales = xmalloc(sbytes + 1);
        dev_download(r->d, codes, op->d_qcodes, op->code_bytes);
        dev_download(r->d, scales, op->d_qscales, sbytes);
        if (i == 0) q_stage_inject(r, op, codes, scales);
        memset(&q->st[i], 0, sizeof q->st[i]);
        q_compare_scales(q, op, scales, &q->st[i]);
        q_compare_codes(q, op, codes, &q->st[i]);
        free(codes);
        free(scales);
    }
    q->stage_done = 1;
}

/* --- its planted faults, and the formats a device converts --- */

/* The middle scale block of operand A: its scale off by a power of two
 * (times 2; MX: the exponent + 1). */
static void q_inj_scale(struct inject_ctx *x)
{
    size_t b = x->qop->nblocks / 2;
    if (x->r->q->rule != QR_AMAX) { x->qscales[b] = (unsigned char)(x->qscales[b] < 254 ? x->qscales[b] + 1 : 253); return; }
    float v;
    memcpy(&v, x->qscales + b * sizeof v, sizeof v);
    v *= 2;
    memcpy(x->qscales + b * sizeof v, &v, sizeof v);
}

/* The middle scale block of operand A rounded the wrong way: every code the
 * other neighbour of its value (ref.c's q_wrong_way). */
static void q_inj_quant(struct inject_ctx *x)
{
    const struct qrun *q = x->r->q;
    const struct qoperand *op = x->qop;
    struct qblock k = q_block(op->master, &op->g, q->f, q->rule, op->nblocks / 2);
    size_t rb = q_row_bytes(q->f, op->g.cols);
    for (size_t i = k.r0; i < k.r1; i++)
        for (size_t c = k.c0; c < k.c1; c++) {
            float v = q_scaled(&k, q->rule, op->master[i * op->g.cols + c]);
            q_put(q->f, x->qcodes, rb, i, c, q_wrong_way(q->f, v, q_get(q->f, x->qcodes, rb, i, c)));
        }
}

/* Every element off by up to 2^-6 of itself (seeded): what a narrow
 * accumulator does to a low-precision product, above the format's gate. */
static void q_inj_precision(struct inject_ctx *x)
{
    for (size_t i = 0; i < x->o->rows * x->o->cols; i++) x->out[i] *= 1.0f + 0x1p-6f * rng_sym(x->key, i);
}

/* Replace the output by what a kernel with a wrong scale index computes:
 * each A scale block read from its neighbour's (the next K block, or the
 * next row when a row has one scale); where A has one scale (per tensor,
 * grouped), each group's B scale read from the next group's (a wrong
 * expert index).  From ref.c's candidate on the host's decoded codes and
 * scales so indexed (any device).  Caught when neighbouring blocks' amaxes
 * differ, as scaled inputs make them; uniform inputs give every block
 * nearly the same scale. */
static void q_inj_scale_index(struct inject_ctx *x)
{
    const struct qrun *q = x->r->q;
    const struct qoperand *A = &q->op[0], *B = &q->op[1], *op = A->nblocks > 1 ? A : B;
    const struct output *p = x->o;
    size_t groups = p->pl.ragged == RAG_ROWS ? p->pl.groups : 1;
    float *sa = xmalloc(op->nblocks * sizeof(float) + 1);
    for (size_t k = 0; k < op->nblocks; k++) sa[k] = op->sf[q_neighbour_block(op, k)];
    void *raw = xcalloc(1, p->elems * DTYPES[p->dt].bytes + 1);
    for (size_t g = 0; g < groups; g++) {
        struct qprod pr = q->prods[g];
        if (op == A) pr.sx = sa + (pr.sx - A->sf);
        else pr.sy = sa + (pr.sy - B->sf);
        size_t row0 = p->pl.ragged == RAG_ROWS ? p->pl.offs[g] : 0;
        cpu_candidate_qgemm(ACC_F32_TILED, p->dt, &pr, (char *)raw + row0 * p->srow * DTYPES[p->dt].bytes, p->srow,
                            p->scol);
    }
    for (size_t i = 0; i < p->rows; i++)
        for (size_t j = 0; j < p->cols; j++)
            x->out[i * p->cols + j] = dt_load(p->dt, raw, (size_t)((int64_t)i * p->srow + (int64_t)j * p->scol));
    free(raw), free(sa);
}

/* The scale-index fault's unfit hook: NULL if case c is low precision with
 * more than one scale per tensor, or grouped in two groups or more (a
 * scale per group's B), else why it cannot be planted. */
static const char *q_inj_index_unfit(const struct kcase *c)
{
    if (c->qfmt == Q_NONE) return "needs a low-precision case (--dtype " Q_NAMES ")";
    return c->scaling == QS_TENSOR && (strcmp(c->op->name, "grouped") != 0 || c->nlens < 2)
               ? "needs row, block or MX scaling, or two groups or more (one scale per tensor has no neighbour)"
               : NULL;
}

/* The unfit hook of the faults above: NULL if case c is low precision, else
 * why they cannot be planted in it. */
static const char *q_inj_unfit(const struct kcase *c)
{
    return c->qfmt == Q_NONE ? "needs a low-precision case (--dtype " Q_NAMES ")" : NULL;
}

/* The fp8 encoding device d converts: FNUZ on gfx942, OCP elsewhere (the
 * CPU included). */
static enum fp8_enc q_device_enc(const struct device *d)
{
    return d->kind == DEV_GPU && d->pf == PF_HIP && strcmp(d->arch_base, "gfx942") == 0 ? ENC_FNUZ : ENC_OCP;
}

/* Give a low-precision case the device's encoding unless it names one, and
 * label it so. */
static void q_resolve(struct kcase *c, const struct device *d)
{
    if (c->qfmt == Q_NONE || c->enc != ENC_DEVICE) return;
    c->enc = q_device_enc(d);
    case_finish(c);
}

/* NULL if device d converts case c's low-precision format, else why not:
 * the case is then skipped, never passed.  NVIDIA converts OCP fp8 from
 * sm_89 on (E2M1 and E8M0 in software); gfx942 FNUZ only; gfx950 OCP and MX. */
static const char *q_unsupported(const struct device *d, const struct kcase *c)
{
    static char why[200];
    if (c->qfmt == Q_NONE || d->kind == DEV_CPU) return NULL;
    int gfx942 = strcmp(d->arch_base, "gfx942") == 0, gfx950 = strcmp(d->arch_base, "gfx950") == 0;
    if (d->pf == PF_CUDA && d->attr[AT_CC_MAJOR] * 10 + d->attr[AT_CC_MINOR] < 89)
        snprintf(why, sizeof why, "%s has no fp8 conversion (NVIDIA: sm_89 and newer)", d->arch_base);
    else if (d->pf == PF_CUDA && c->enc == ENC_FNUZ)
        snprintf(why, sizeof why, "FNUZ is gfx942's encoding; NVIDIA converts OCP (--fp8 ocp)");
    else if (d->pf == PF_HIP && !gfx942 && !gfx950)
        snprintf(why, sizeof why, "%s has no fp8 conversion (gfx942: FNUZ, gfx950: OCP and MX)", d->arch_base);
    else if (gfx942 && c->mx)
        snprintf(why, sizeof why, "MX formats need gfx950; gfx942 has no MX conversion");
    else if (gfx942 && c->enc == ENC_OCP)
        snprintf(why, sizeof why, "gfx942 converts the FNUZ encoding only (--fp8 fnuz)");
    else if (gfx950 && c->enc == ENC_FNUZ)
        snprintf(why, sizeof why, "gfx950 converts the OCP encoding only (--fp8 ocp)");
    else
        return NULL;
    return why;
}
