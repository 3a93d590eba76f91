/* src/gemm.c — the gemm op: C = A·B in every layout, with --bwd dA = dC·Bᵀ
 * and dB = Aᵀ·dC, and its row of the op table.  Relies on case.c, run.c,
 * products.c and lowprec.c (the fp8 and MX dtypes). */

static int gemm_set(struct kcase *c, const char *key, const char *val)
{
    if (strcmp(key, "--bwd") == 0) { c->bwd = 1; return 0; }
    int q = q_set(c, key, val);
    if (q >= 0) return q;
    if (strcmp(key, "--dtype") == 0) { case_set_dtype(c, val, 1); return 1; }
    if (strcmp(key, "--layout") == 0) {
        case_need(c, key, val);
        if (strlen(val) != 2 || !strchr("NT", val[0]) || !strchr("NT", val[1]))
            die(EXIT_USAGE, "%s: --layout %s: unknown layout (NN, NT, TN, TT)", c->where, shown(val));
        memcpy(c->layout, val, 3);
        return 1;
    }
    if (strcmp(key, "--shape") == 0) {
        uint32_t d[3];
        if (!val) die(EXIT_USAGE, "%s: --shape needs a value MxNxK", c->where);
        case_parse_dims(c, "--shape", val, 3, d, "MxNxK, e.g. 4096x4096x4096");
        c->m = d[0], c->n = d[1], c->k = d[2];
        return 1;
    }
    return -1;
}

static void gemm_finish(struct kcase *c)
{
    if (!c->m) die(EXIT_USAGE, "%s: gemm needs --shape MxNxK", c->where);
    uint64_t m = c->m, n = c->n, k = c->k;
    if (m * k > MAX_ELEMS || k * n > MAX_ELEMS || m * n > MAX_ELEMS)
        die(EXIT_USAGE, "%s: --shape %ux%ux%u: a matrix would exceed %llu elements", c->where, c->m,
            c->n, c->k, (unsigned long long)MAX_ELEMS);
    q_finish(c);
    c->flops = 2.0 * (double)m * (double)n * (double)k * (c->bwd ? 3 : 1);   /* C, and dA and dB */
    char dt[64];
    q_dtype_label(c, dt, sizeof dt);
    snprintf(c->label, sizeof c->label, "gemm %s %s %ux%ux%u%s", dt, c->layout, c->m, c->n, c->k,
             c->bwd ? " bwd" : "");
}

/* A is M x K ('N': stored [M][K]; 'T': stored [K][M]); B is K x N ('N':
 * [K][N]; 'T': [N][K]); C is [M][N].  With --bwd, dC is [M][N] and
 * dA = dC·Bᵀ, dB = Aᵀ·dC are stored in A's and B's layouts. */
static void gemm_prepare_16(struct run *r)
{
    const struct kcase *c = r->c;
    enum dtype t = c->dt;
    size_t M = c->m, N = c->n, K = c->k;
    int at = c->layout[0] == 'T', bt = c->layout[1] == 'T';
    float *a_st = run_input(r, 1, at ? in_gemm(K, M) : in_gemm(M, K), t);
    float *b_st = run_input(r, 2, bt ? in_gemm(N, K) : in_gemm(K, N), t);
    uint64_t da = run_upload(r, "A", a_st, M * K, t), db = run_upload(r, "B", b_st, K * N, t);
    run_keep(r, "A", a_st, 'f', 2, at ? K : M, at ? M : K, 0);
    run_keep(r, "B", b_st, 'f', 2, bt ? N : K, bt ? K : N, 0);
    int64_t a_sm = at ? 1 : (int64_t)K, a_sk = at ? (int64_t)M : 1;   /* A[m][k] strides */
    int64_t b_sk = bt ? 1 : (int64_t)N, b_sn = bt ? (int64_t)K : 1;   /* B[k][n] strides */
    const float *a = at ? run_transpose(r, a_st, K, M) : a_st;        /* M x K */
    const float *b = bt ? run_transpose(r, b_st, N, K) : b_st;        /* K x N */
    struct output *o = product_output(r, "C", M, N, (int64_t)N, 1, 1,
        (struct prod_launch){ .dx = da, .dy = db, .sxm = a_sm, .sxk = a_sk, .syk = b_sk, .syn = b_sn,
                              .m = M, .n = N, .k = K });
    product_part(o, 0, 0, M, K, a, b);
    if (!c->bwd) return;
    float *dc = run_input(r, 3, in_gemm(M, N), t);
    uint64_t ddc = run_upload(r, "dC", dc, M * N, t);
    run_keep(r, "dC", dc, 'f', 2, M, N, 0);
    const float *a_t = at ? a_st : run_transpose(r, a_st, M, K);      /* K x M */
    const float *b_t = bt ? b_st : run_transpose(r, b_st, K, N);      /* N x K */
    o = product_output(r, "dA", M, K, a_sm, a_sk, 1,
        (struct prod_launch){ .dx = ddc, .dy = db, .sxm = (int64_t)N, .sxk = 1, .syk = b_sn, .syn = b_sk,
                              .m = M, .n = K, .k = N });
    product_part(o, 0, 0, M, N, dc, b_t);
    o = product_output(r, "dB", K, N, b_sk, b_sn, 1,
        (struct prod_launch){ .dx = da, .dy = ddc, .sxm = a_sk, .sxk = a_sm, .syk = (int64_t)N, .syn = 1,
                              .m = K, .n = N, .k = M });
    product_part(o, 0, 0, K, M, a_t, dc);
}

/* The op row's launch hook of gemm and grouped: output o through q_launch
 * when its operands are quantized, else through product_launch. */
static void gemm_launch(struct run *r, int o)
{
    if (r->q) q_launch(r, o);
    else product_launch(r, o);
}

/* The op row's prepare hook of gemm: inputs and outputs (quantized operands
 * through qgemm_prepare), then the scratch its launches need (product_scratch). */
static void gemm_prepare(struct run *r)
{
    if (r->c->qfmt != Q_NONE) qgemm_prepare(r);
    else gemm_prepare_16(r);
    product_scratch(r);
}

/* gemm's row of the op table (ops.c). */
static const struct op OP_GEMM = { "gemm", gemm_set, gemm_finish, gemm_prepare, gemm_launch, product_reference,
                                   NULL };
