/* src/grouped.c — the grouped (MoE) gemm op: C_g = A_g·B_g over ragged
 * groups (empty ones included), with --bwd dA and the per-group dB, and its
 * row of the op table.  Relies on case.c, run.c, products.c, lowprec.c and
 * gemm.c. */

static int grouped_set(struct kcase *c, const char *key, const char *val)
{
    if (strcmp(key, "--layout") == 0) {
        case_need(c, key, val);
        if (strcmp(val, "NN") != 0 && strcmp(val, "NT") != 0)
            die(EXIT_USAGE, "%s: --layout %s: grouped takes NN (B is [G][K][N]) or NT (B is [G][N][K])",
                c->where, shown(val));
        memcpy(c->layout, val, 3);
        return 1;
    }
    if (strcmp(key, "--groups") == 0) {
        if (!val) die(EXIT_USAGE, "%s: --groups needs a list of group sizes, e.g. 0,4096,1", c->where);
        case_parse_lens(c, key, val, 0);
        return 1;
    }
    if (strcmp(key, "--shape") == 0) {
        uint32_t d[2];
        if (!val) die(EXIT_USAGE, "%s: --shape needs a value NxK", c->where);
        case_parse_dims(c, "--shape", val, 2, d, "NxK (the groups give M), e.g. 4096x4096");
        c->n = d[0], c->k = d[1];
        return 1;
    }
    return gemm_set(c, key, val);   /* --dtype, --bwd */
}

/* Check a grouped case (groups given, not all empty; N and K given; sizes
 * within bounds) and fill its label; exit 2 naming c->where if not. */
static void grouped_finish(struct kcase *c)
{
    if (!c->lens) die(EXIT_USAGE, "%s: grouped needs --groups M1,M2,... (sizes may be 0)", c->where);
    if (!c->n) die(EXIT_USAGE, "%s: grouped needs --shape NxK", c->where);
    uint64_t m = 0, lo = UINT32_MAX, hi = 0, n = c->n, k = c->k, g = c->nlens;
    for (size_t i = 0; i < c->nlens; i++) {
        m += c->lens[i];
        lo = c->lens[i] < lo ? c->lens[i] : lo, hi = c->lens[i] > hi ? c->lens[i] : hi;
    }
    if (m == 0) die(EXIT_USAGE, "%s: --groups: every group is empty: nothing to check", c->where);
    if (m > MAX_DIM) die(EXIT_USAGE, "%s: --groups: the sizes add up to %" PRIu64 ", more than %u rows",
                         c->where, m, MAX_DIM);
    if (m * k > MAX_ELEMS || g * k * n > MAX_ELEMS || m * n > MAX_ELEMS)
        die(EXIT_USAGE, "%s: grouped %zu groups of %" PRIu64 " rows x%ux%u: a tensor would exceed %llu "
            "elements", c->where, c->nlens, m, c->n, c->k, (unsigned long long)MAX_ELEMS);
    c->m = (uint32_t)m;
    q_finish(c);
    c->flops = 2.0 * (double)m * (double)n * (double)k * (c->bwd ? 3 : 1);   /* C, and dA and dB */
    char dt[64];
    q_dtype_label(c, dt, sizeof dt);
    snprintf(c->label, sizeof c->label, "grouped %s %s G=%zu M=%" PRIu64 "[%" PRIu64 "..%" PRIu64 "] "
             "N=%u K=%u%s", dt, c->layout, c->nlens, m, lo, hi, c->n, c->k, c->bwd ? " bwd" : "");
}

/* A is [ΣM][K] (the groups' rows one after another), B is [G][K][N] (NN) or
 * [G][N][K] (NT), C = A_g·B_g per group is [ΣM][N].  With --bwd, dC is
 * [ΣM][N], dA = dC_g·B_gᵀ is [ΣM][K] and dB_g = A_gᵀ·dC_g is stored in B's
 * layout (viewed as [G·K][N] for NN, [G·N][K] for NT); an empty group's dB_g
 * is exactly zero. */
static void grouped_prepare_16(struct run *r)
{
    const struct kcase *c = r->c;
    enum dtype t = c->dt;
    size_t G = c->nlens, N = c->n, K = c->k;
    int bt = c->layout[1] == 'T';
    struct groups gs = product_groups(r);
    const uint32_t *offs = gs.offs;
    size_t M = offs[G];
    float *a = run_input(r, 1, in_gemm(M, K), t);
    float *b_st = run_input(r, 2, bt ? in_stacked(G, N, K) : in_stacked(G, K, N), t);
    uint64_t da = run_upload(r, "A", a, M * K, t), db = run_upload(r, "B", b_st, G * K * N, t);
    run_keep(r, "A", a, 'f', 2, M, K, 0);
    run_keep(r, "B", b_st, 'f', 3, G, bt ? N : K, bt ? K : N);
    int64_t b_sk = bt ? 1 : (int64_t)N, b_sn = bt ? (int64_t)K : 1, b_sg = (int64_t)(K * N);
    const float *b = bt ? run_transpose_blocks(r, b_st, G, N, K) : b_st;  /* canonical [G][K][N] */
    struct output *o = product_output(r, "C", M, N, (int64_t)N, 1, G,
        (struct prod_launch){ .dx = da, .dy = db, .sxm = (int64_t)K, .sxk = 1, .syk = b_sk, .syn = b_sn,
                              .syg = b_sg, .m = M, .n = N, .k = K });
    product_ragged_rows(r, o, &gs);
    for (size_t g = 0; g < G; g++) product_part(o, g, offs[g], c->lens[g], K, a + offs[g] * K, b + g * K * N);
    if (!c->bwd) return;
    float *dc = run_input(r, 3, in_gemm(M, N), t);
    uint64_t ddc = run_upload(r, "dC", dc, M * N, t);
    run_keep(r, "dC", dc, 'f', 2, M, N, 0);
    const float *b_t = bt ? b_st : run_transpose_blocks(r, b_st, G, K, N);   /* canonical [G][N][K] */
    o = product_output(r, "dA", M, K, (int64_t)K, 1, G,
        (struct prod_launch){ .dx = ddc, .dy = db, .sxm = (int64_t)N, .sxk = 1, .syk = b_sn, .syn = b_sk,
                              .syg = b_sg, .m = M, .n = K, .k = N });
    product_ragged_rows(r, o, &gs);
    for (size_t g = 0; g < G; g++) product_part(o, g, offs[g], c->lens[g], N, dc + offs[g] * N, b_t + g * K * N);
    /* dB: group g's rows of the [G·R][W] view are dB_g (NN: R = K, W = N) or dB_gᵀ (NT: R = N, W = K) */
    size_t R = bt ? N : K, W = bt ? K : N;
    uint32_t *rows = run_owned(r, (G + 1) * sizeof *rows);
    for (size_t g = 0; g <= G; g++) rows[g] = (uint32_t)(g * R);
    float *xt = run_transpose_groups(r, bt ? dc : a, offs, G, R);    /* per group R x M_g */
    const float *y = bt ? a : dc;                                    /* rows offs[g].. of [ΣM][W] */
    o = product_output(r, "dB", G * R, W, (int64_t)W, 1, G,
        (struct prod_launch){ .ragged = RAG_INNER, .dx = bt ? ddc : da, .dy = bt ? da : ddc, .sxm = 1,
                              .sxk = (int64_t)R, .syk = (int64_t)W, .syn = 1, .scg = (int64_t)(R * W),
                              .m = R, .n = W, .doffs = gs.doffs, .groups = G, .offs = offs });
    o->seg = rows, o->nseg = G, o->seg_name = "group";
    for (size_t g = 0; g < G; g++) product_part(o, g, g * R, R, c->lens[g], xt + offs[g] * R, y + offs[g] * W);
}

/* The op row's prepare hook of grouped: inputs and outputs (quantized operands
 * through qgrouped_prepare), then the scratch its launches need (product_scratch). */
static void grouped_prepare(struct run *r)
{
    if (r->c->qfmt != Q_NONE) qgrouped_prepare(r);
    else grouped_prepare_16(r);
    product_scratch(r);
}

/* grouped's row of the op table (ops.c): launched as gemm's outputs are. */
static const struct op OP_GROUPED = { "grouped", grouped_set, grouped_finish, grouped_prepare, gemm_launch,
                                      product_reference, NULL };
