/* src/attn.c — the attention op: O and LSE, with --bwd dQ, dK and dV;
 * fixed-length or varlen, causal (bottom-right), GQA; its inputs, launches,
 * references by (token, head) unit, the gradients' identities (sums over
 * every element, the checksum gate's), its planted mask fault, and its row
 * of the op table.  Relies on case.c, run.c, plan.c, ref.c (the references,
 * the CPU candidate), products.c (tensor maps), gpu.c and compile.c (the
 * arm's kernels) and util.c. */

/* The largest --scale: scores are at most scale·D·max|q|·max|k| in
 * magnitude, and 1e4 · 256 · 64 · 8 (head dim, Q's gain with the tails of
 * normal inputs, K's tails) stays far inside fp32, as do the backward's
 * products; a larger scale only makes the softmax one-hot. */
#define ATTN_SCALE_MAX 1e4

/* The fused sm_90a backward's smallest query block (kernels.hip's FB_BM;
 * the arm's attn_bwd_fused_bm): slabs are counted in it (kg_fb_slab); the
 * kernels put slab s of M x D floats at s·M·D, and kgate allocates
 * ATTN_FB_SLAB floats a slab, the largest M·D (80 rows at head dim 128;
 * 64 x 128 and 128 x 64 are smaller). */
#define ATTN_FB_ROWS 64
#define ATTN_FB_SLAB (80 * 128)

/* Apply attention option `key` (value `val`) to c: 1 if the value was
 * used, 0 for a flag, -1 if key is not an attention option; exit 2 on a
 * bad value. */
static int attn_set(struct kcase *c, const char *key, const char *val)
{
    uint32_t b;
    if (strcmp(key, "--bwd") == 0) { c->bwd = 1; return 0; }
    if (strcmp(key, "--causal") == 0) { c->causal = 1; return 0; }
    static const char *const with_value[] = { "--dtype", "--batch", "--heads", "--seq", "--seqlens",
                                              "--dim", "--scale" };
    for (size_t i = 0; i < sizeof with_value / sizeof *with_value; i++)
        if (strcmp(key, with_value[i]) == 0) case_need(c, key, val);
    if (strcmp(key, "--dtype") == 0) { case_set_dtype(c, val, 0); return 1; }
    if (strcmp(key, "--batch") == 0) { case_parse_pair(c, key, val, 0, 1, MAX_GROUPS, &c->batch, &b); return 1; }
    if (strcmp(key, "--heads") == 0) { case_parse_pair(c, key, val, 1, 1, MAX_HEADS, &c->hq, &c->hkv); return 1; }
    if (strcmp(key, "--seq") == 0) { case_parse_pair(c, key, val, 1, 1, MAX_DIM, &c->seq_q, &c->seq_k); return 1; }
    if (strcmp(key, "--seqlens") == 0) { case_parse_lens(c, key, val, 1); return 1; }
    if (strcmp(key, "--dim") == 0) {
        uint64_t v;
        if (parse_u64(val, 1, KG_ATTN_DMAX, &v) != 0)
            die(EXIT_USAGE, "%s: --dim %s: expected a head dim from 1 to %d", c->where, shown(val), KG_ATTN_DMAX);
        c->dim = (uint32_t)v;
        return 1;
    }
    if (strcmp(key, "--scale") == 0) {
        if (parse_nonneg(val, &c->scale) != 0 || c->scale == 0 || c->scale > ATTN_SCALE_MAX)
            die(EXIT_USAGE, "%s: --scale %s: expected a number > 0 and at most %g (a larger scale can overflow "
                "fp32 scores)", c->where, shown(val), ATTN_SCALE_MAX);
        return 1;
    }
    return -1;
}

/* The attention case's lengths: --seqlens as given, or --batch copies of
 * --seq; checks heads, dims and sizes. */
static void attn_finish(struct kcase *c)
{
    if (c->lens && (c->seq_q || c->batch))
        die(EXIT_USAGE, "%s: give --seqlens, or --batch and --seq, not both", c->where);
    if (!c->lens && !c->seq_q) die(EXIT_USAGE, "%s: attn needs --seq Sq[:Sk] or --seqlens", c->where);
    if (!c->hq) die(EXIT_USAGE, "%s: attn needs --heads Hq[:Hkv]", c->where);
    if (!c->dim) die(EXIT_USAGE, "%s: attn needs --dim D (head dim, 1..%d)", c->where, KG_ATTN_DMAX);
    if (c->hq % c->hkv)
        die(EXIT_USAGE, "%s: --heads %u:%u: query heads must be a multiple of KV heads", c->where, c->hq, c->hkv);
    if (c->hq > MAX_HEADS) die(EXIT_USAGE, "%s: --heads %u: at most %d query heads", c->where, c->hq, MAX_HEADS);
    int varlen = c->lens != NULL;
    if (!varlen) {
        c->nlens = c->batch ? c->batch : 1;
        if (c->nlens > MAX_GROUPS) die(EXIT_USAGE, "%s: --batch %zu: at most %d", c->where, c->nlens, MAX_GROUPS);
        c->lens = xmalloc(2 * c->nlens * sizeof(uint32_t));
        for (size_t i = 0; i < c->nlens; i++) c->lens[i] = c->seq_q, c->lens[c->nlens + i] = c->seq_k;
    }
    uint64_t tq = 0, tk = 0, lo = UINT32_MAX, hi = 0;
    for (size_t i = 0; i < c->nlens; i++) {
        tq += c->lens[i], tk += c->lens[c->nlens + i];
        lo = c->lens[i] < lo ? c->lens[i] : lo, hi = c->lens[i] > hi ? c->lens[i] : hi;
    }
    int useful = 0;   /* a sequence with queries and keys: the only outputs that are not all zero */
    for (size_t i = 0; i < c->nlens; i++) useful |= c->lens[i] > 0 && c->lens[c->nlens + i] > 0;
    if (!useful)
        die(EXIT_USAGE, "%s: every sequence is empty or has no keys: nothing to check (every output would be 0)",
            c->where);
    if (tq > MAX_DIM || tk > MAX_DIM || tq * c->hq * c->dim > MAX_ELEMS || tk * c->hkv * c->dim > MAX_ELEMS)
        die(EXIT_USAGE, "%s: attn with %" PRIu64 " query and %" PRIu64 " key tokens: a tensor would exceed "
            "%u tokens or %llu elements", c->where, tq, tk, MAX_DIM, (unsigned long long)MAX_ELEMS);
    c->flops = 0;   /* forward 4·Sq·Sk·Hq·D per sequence, halved when causal; backward 2.5x more */
    for (size_t i = 0; i < c->nlens; i++)
        c->flops += 4.0 * c->lens[i] * c->lens[c->nlens + i] * c->hq * c->dim * (c->causal ? 0.5 : 1) *
                    (c->bwd ? 3.5 : 1);
    char seqs[64];
    if (varlen) snprintf(seqs, sizeof seqs, "varlen %zu [%" PRIu64 "..%" PRIu64 "]", c->nlens, lo, hi);
    else snprintf(seqs, sizeof seqs, "b%zu s%u:%u", c->nlens, c->seq_q, c->seq_k);
    snprintf(c->label, sizeof c->label, "attn %s %s h%u:%u d%u%s%s", DTYPES[c->dt].name, seqs, c->hq,
             c->hkv, c->dim, c->causal ? " causal" : "", c->bwd ? " bwd" : "");
}

/* An attention case while it runs: geometry, canonical inputs, device
 * buffers, which output is which, and the reference's statistics (made on
 * first use by a backward output). */
struct attn_case {
    struct attn_geom g;
    struct attn_in in;
    size_t tq, tk, max_sq, max_sk;
    uint64_t d_q, d_k, d_v, d_do, dcu_q, dcu_k, dsum;  /* device buffers */
    uint64_t dq_slabs, dq_locks;              /* the fused sm_90a backward's dQ sums and their locks (GPU, d <= 128) */
    int nslab;                                /* slabs per query head (kg_fb_slab) */
    int o, lse, dq_out, dk_out, dv_out;       /* output indices; -1: none */
    int stats_ready;
};

/* The head dim of the sm_90a backward kernels that hold case a's: 64
 * (0) or 128 (1). */
static int attn_bwd_kdim(const struct attn_case *a)
{
    return a->g.d <= 64 ? 0 : 1;
}

/* The bytes of case a's dQ slabs for the fused sm_90a backward: Hq ·
 * nslab · ATTN_FB_SLAB floats, enough for Hq · nslab slabs of any arm's
 * M x D (at most 80 x 128), packed at stride M·D. */
static size_t attn_slab_bytes(const struct attn_case *a)
{
    return a->g.hq * (size_t)a->nslab * ATTN_FB_SLAB * sizeof(float);
}

/* The bytes of case a's locks for the fused sm_90a backward: one int a
 * slab (kg_fb_dq_sum's count of the adds made), then one more, the post
 * kernel's count of its finished blocks (kg_fb_dq_post_done). */
static size_t attn_lock_bytes(const struct attn_case *a)
{
    return (a->g.hq * (size_t)a->nslab + 1) * sizeof(int);
}

/* K transposed for the references' lp score dots (struct attn_in's kt and
 * kt_ld), owned by run r: element c of KV head hk's key token j at
 * [(hk·d + c)·ld + j], ld = Tk rounded up to 8, plus 8 (rows a power of two
 * apart would share the caches' sets), then KT_KEYS zeros, which a
 * sequence's last keys' sums read and drop. */
static float *attn_k_transposed(struct run *r, const struct attn_case *a, size_t *ld)
{
    size_t tk = a->tk, d = a->g.d, hkv = a->g.hkv;
    *ld = (tk + 7) / 8 * 8 + 8;
    float *kt = run_owned(r, (hkv * d * *ld + KT_KEYS) * sizeof(float));
    for (size_t j = 0; j < tk; j++)
        for (size_t hk = 0; hk < hkv; hk++)
            for (size_t c = 0; c < d; c++) kt[(hk * d + c) * *ld + j] = a->in.k[(j * hkv + hk) * d + c];
    return kt;
}

#define ATTN_Q_GAIN 8.0f   /* Q's scale: scores with a spread of ~2.7, a peaked softmax */
#define ATTN_DO_GAIN 16.0f  /* dO's scale: gradients well above the bf16/f16 atol */
#define ATTN_Q_GAIN_SCALED 32.0f   /* scaled inputs: Q's scale; logits up to |s| ~ 30 (uniform: ~14) */

/* An attention tensor's in_shape (run.c): tokens x heads·d, magnitudes
 * varying per token (2^U(-1, 1)), per (token, head) and per head
 * (2^U(-0.5, 0.5) each). */
static struct in_shape attn_shape(size_t tokens, size_t heads, size_t d)
{
    return (struct in_shape){ tokens, heads * d, d, tokens ? tokens : 1, 0, 0.5, 0 };
}

/* Input stream id of an attention case: tokens x heads x d, normalised, then
 * multiplied by gain (an exact power of two: rounding is unchanged). */
static float *attn_input(struct run *r, int id, size_t tokens, size_t heads, float gain)
{
    size_t d = r->c->dim;
    float *x = run_input(r, id, attn_shape(tokens, heads, d), r->c->dt);
    for (size_t i = 0; i < tokens * heads * d; i++) x[i] *= gain;
    return x;
}

/* The pairs (query, key) a case's mask lets through, over all sequences. */
static double attn_pairs(const struct attn_geom *g)
{
    double n = 0;
    for (size_t b = 0; b < g->b; b++)
        for (size_t i = 0; i < g->cu_q[b + 1] - g->cu_q[b]; i++) n += (double)attn_visible(g, b, i);
    return n;
}

/* Inputs as run_input draws them (max|x| = 1 but for normal inputs,
 * which are not bounded) times a gain: Q [Tq][Hq][D] times ATTN_Q_GAIN
 * (scaled inputs: ATTN_Q_GAIN_SCALED), K and V [Tk][Hkv][D] times 1;
 * outputs O [Tq][Hq][D] and LSE [Tq][Hq] (fp32); with --bwd, dO like O
 * times ATTN_DO_GAIN and outputs dQ, dK, dV in Q's and K's layouts.  Rows
 * are tokens, columns heads x dims; segments are sequences. */
static void attn_prepare(struct run *r)
{
    const struct kcase *c = r->c;
    enum dtype t = c->dt;
    struct attn_case *a = r->attn = run_owned(r, sizeof *a);
    size_t B = c->nlens, hq = c->hq, hkv = c->hkv, d = c->dim;
    uint32_t *cu_q = run_owned(r, (B + 1) * sizeof *cu_q), *cu_k = run_owned(r, (B + 1) * sizeof *cu_k);
    for (size_t b = 0; b < B; b++) {
        cu_q[b + 1] = cu_q[b] + c->lens[b], cu_k[b + 1] = cu_k[b] + c->lens[B + b];
        a->max_sq = c->lens[b] > a->max_sq ? c->lens[b] : a->max_sq;
        a->max_sk = c->lens[B + b] > a->max_sk ? c->lens[B + b] : a->max_sk;
    }
    a->tq = cu_q[B], a->tk = cu_k[B];
    a->g = (struct attn_geom){ B, hq, hkv, d, cu_q, cu_k, c->causal, 0,
                               c->scale > 0 ? c->scale : 1.0 / sqrt((double)d) };
    a->in.q = attn_input(r, 1, a->tq, hq, c->inputs == IN_SCALED ? ATTN_Q_GAIN_SCALED : ATTN_Q_GAIN);
    a->in.k = attn_input(r, 2, a->tk, hkv, 1);
    a->in.v = attn_input(r, 3, a->tk, hkv, 1);
    a->in.kt = attn_k_transposed(r, a, &a->in.kt_ld);
    run_keep(r, "Q", a->in.q, 'f', 3, a->tq, hq, d);
    run_keep(r, "K", a->in.k, 'f', 3, a->tk, hkv, d);
    run_keep(r, "V", a->in.v, 'f', 3, a->tk, hkv, d);
    a->d_q = run_upload(r, "Q", a->in.q, a->tq * hq * d, t);
    a->d_k = run_upload(r, "K", a->in.k, a->tk * hkv * d, t);
    a->d_v = run_upload(r, "V", a->in.v, a->tk * hkv * d, t);
    a->dcu_q = run_upload_ints(r, "cu_seqlens_q", cu_q, B + 1), a->dcu_k = run_upload_ints(r, "cu_seqlens_k", cu_k, B + 1);
    double pairs = attn_pairs(&a->g) * (double)hq * (double)d;
    struct output *o = run_output(r, "O", t, a->tq, hq * d, (int64_t)(hq * d), 1);
    o->flops = 4 * pairs, o->check_macs = 2 * pairs, o->head_dim = (unsigned)d;
    o->seg = cu_q, o->nseg = B, o->seg_name = "sequence";
    a->o = r->nout - 1;
    o = run_output(r, "LSE", DT_F32, a->tq, hq, (int64_t)hq, 1);
    o->launch = a->o, o->check_macs = 2 * pairs, o->head_dim = 1;
    o->seg = cu_q, o->nseg = B, o->seg_name = "sequence";
    a->lse = r->nout - 1;
    a->dq_out = a->dk_out = a->dv_out = -1;
    if (!c->bwd) return;
    a->in.dout = attn_input(r, 4, a->tq, hq, ATTN_DO_GAIN);
    a->d_do = run_upload(r, "dO", a->in.dout, a->tq * hq * d, t);
    run_keep(r, "dO", a->in.dout, 'f', 3, a->tq, hq, d);
    a->dsum = run_scratch(r, "Dsum", a->tq * hq * sizeof(float));   /* exact: a write past it hits the band */
    if (r->d->kind != DEV_CPU && d <= 128) {   /* made before any launch: a graph may capture the first */
        a->nslab = (int)(a->tq / ATTN_FB_ROWS + B + 1);
        a->dq_slabs = run_scratch(r, "dQ slabs", attn_slab_bytes(a));
        a->dq_locks = run_scratch(r, "dQ locks", attn_lock_bytes(a));
    }
    o = run_output(r, "dQ", t, a->tq, hq * d, (int64_t)(hq * d), 1);
    o->flops = 10 * pairs, o->check_macs = 3 * pairs, o->head_dim = (unsigned)d, o->grad = 1;
    o->seg = cu_q, o->nseg = B, o->seg_name = "sequence";
    a->dq_out = r->nout - 1;
    const char *names[2] = { "dK", "dV" };
    for (int i = 0; i < 2; i++) {
        o = run_output(r, names[i], t, a->tk, hkv * d, (int64_t)(hkv * d), 1);
        o->launch = a->dq_out, o->check_macs = 4 * pairs, o->head_dim = (unsigned)d, o->grad = 1;
        o->seg = cu_k, o->nseg = B, o->seg_name = "sequence";
    }
    a->dk_out = r->nout - 2, a->dv_out = r->nout - 1;
}

/* The CPU candidate's attention forward with the mask shifted by `shift`
 * (0, or 1 for the planted `mask` fault): O into o (raw dt) and lse. */
static void attn_cpu_fwd(struct run *r, int shift, void *o, float *lse)
{
    struct attn_case *a = r->attn;
    struct attn_geom g = a->g;
    g.shift = shift;
    cpu_attn_fwd(&g, r->c->dt, a->in.q, a->in.k, a->in.v, a->tq, o, lse);
}

/* The CPU candidate's attention backward, mask shifted likewise, from a
 * forward's O (raw dt) and LSE: dQ, dK, dV into raw dt storage. */
static void attn_cpu_bwd(struct run *r, int shift, const void *o, const float *lse, void *dq, void *dk,
                         void *dv)
{
    struct attn_case *a = r->attn;
    struct attn_geom g = a->g;
    enum dtype t = r->c->dt;
    g.shift = shift;
    float *of = run_decode(t, o, a->tq, g.hq * g.d, (int64_t)(g.hq * g.d), 1);
    cpu_attn_bwd(&g, t, a->in.q, a->in.k, a->in.v, of, a->in.dout, lse, a->tq, a->tk, dq, dk, dv);
    free(of);
}

/* --- the sm_90a forward (kernels.hip, "Attention forward, Hopper path") --- */

/* The head dims of kg_attn_fwd_sm90_d<D>_<dt>, as kgate reads their shared
 * memory into arm->attn_sm90_smem. */
static const unsigned ATTN_SM90_DIMS[3] = { 64, 128, 256 };

/* Whether TMA can read case a's Q, K and V: a head dim that is a multiple
 * of 8 (rows of 16 bytes) and buffers aligned to 16 bytes. */
static int attn_tma_inputs(const struct attn_case *a)
{
    return a->g.d % 8 == 0 && tma_aligned(a->d_q, 0, 2) && tma_aligned(a->d_k, 0, 2) && tma_aligned(a->d_v, 0, 2);
}

/* Which sm_90a forward runs case a on the current arm: the index into
 * ATTN_SM90_DIMS of the smallest head dim that holds d, when the arm has
 * that kernel and TMA can read every tensor (rows of d elements a multiple
 * of 16 bytes, bases aligned to 16); -1 otherwise (the portable kernel). */
static int attn_sm90_pick(const struct run *r)
{
    const struct attn_case *a = r->attn;
    size_t d = a->g.d;
    if (!attn_tma_inputs(a) || r->out[a->o].buf % 4) return -1;
    for (int i = 0; i < 3; i++)
        if (d <= ATTN_SM90_DIMS[i]) return r->d->arm->attn_sm90_smem[i] > 0 ? i : -1;
    return -1;
}

/* Encode into m the TMA map of an attention tensor: `tokens` x `heads` x d
 * elements of dt at base, read in boxes of 64 elements x 1 head x box_rows
 * tokens (tmap_make: zeros past d of a padded head dim and past the last
 * token). */
static void attn_tmap(const struct device *d, struct tmap *m, enum dtype dt, uint64_t base, size_t tokens,
                      size_t heads, size_t dim, unsigned box_rows)
{
    const uint64_t dims[3] = { dim, heads, tokens }, strides[2] = { dim * 2, heads * dim * 2 };
    const unsigned box[3] = { 64, 1, box_rows };
    tmap_make(d, m, 2, dt, 3, base, dims, strides, box, "attention");
}

/* The forward of case a through kg_attn_fwd_sm90_d<D>_<dt> (i: D's index,
 * from attn_sm90_pick): grid (ceil(longest Sq / 128), Hq, B), 384 threads,
 * the kernel's shared memory; tensor maps of Q in boxes of 128 tokens and
 * of K and V in boxes of the kernel's key block (64 at D = 256, else 128). */
static void attn_sm90_fwd(struct run *r, int i)
{
    static const char *const names[3][DT_COUNT] = {
        { NULL, "kg_attn_fwd_sm90_d64_f16", "kg_attn_fwd_sm90_d64_bf16" },
        { NULL, "kg_attn_fwd_sm90_d128_f16", "kg_attn_fwd_sm90_d128_bf16" },
        { NULL, "kg_attn_fwd_sm90_d256_f16", "kg_attn_fwd_sm90_d256_bf16" },
    };
    struct attn_case *a = r->attn;
    enum dtype t = r->c->dt;
    struct output *O = &r->out[a->o], *L = &r->out[a->lse];
    int hq = (int)a->g.hq, hkv = (int)a->g.hkv, d = (int)a->g.d, causal = a->g.causal;
    float scale = (float)a->g.scale;
    struct tmap tq, tk, tv;
    unsigned bn = ATTN_SM90_DIMS[i] == 256 ? 64 : 128;
    attn_tmap(r->d, &tq, t, a->d_q, a->tq, a->g.hq, a->g.d, 128);
    attn_tmap(r->d, &tk, t, a->d_k, a->tk, a->g.hkv, a->g.d, bn);
    attn_tmap(r->d, &tv, t, a->d_v, a->tk, a->g.hkv, a->g.d, bn);
    void *params[] = { &tq, &tk, &tv, &O->buf, &L->buf, &a->dcu_q, &a->dcu_k, &hq, &hkv, &d, &scale, &causal };
    struct launch_dims l = { { (unsigned)((a->max_sq + 127) / 128), (unsigned)hq, (unsigned)a->g.b }, 384,
                             (unsigned)r->d->arm->attn_sm90_smem[i], 0, 0 };
    gpu_launch_dims(r->d, names[i][t], &l, params);
}

/* Whether the current arm runs case a's backward through the fused sm_90a
 * pass: it has one at the case's kernel head dim, and the case is a GPU one
 * at head dim 128 or less (its slabs were made). */
static int attn_fused_bwd(const struct run *r)
{
    return r->d->arm->attn_bwd_fused_smem[attn_bwd_kdim(r->attn)] > 0 && r->attn->dq_slabs;
}

/* Which sm_90a backward runs case a on the current arm: 0 (head dim 64)
 * or 1 (128) for the smallest that holds d, when the arm has both passes
 * of it (or its fused pass), TMA can read Q, K, V and dO (as
 * attn_sm90_pick) and dK and dV are 16-byte aligned (kgate's outputs
 * are); -1 otherwise (the portable kernels). */
static int attn_sm90_bwd_pick(const struct run *r)
{
    const struct attn_case *a = r->attn;
    const struct arm *arm = r->d->arm;
    size_t d = a->g.d;
    if (d > 128 || !attn_tma_inputs(a) || !tma_aligned(a->d_do, 0, 2) || r->out[a->dq_out].buf % 4 ||
        r->out[a->dk_out].buf % 16 || r->out[a->dv_out].buf % 16)   /* 16: dK and dV in 16-byte stores (FB_EPI_V4) */
        return -1;
    int i = attn_bwd_kdim(a);
    if (attn_fused_bwd(r)) return i;
    return arm->attn_bwd_smem[i][0] > 0 && arm->attn_bwd_smem[i][1] > 0 ? i : -1;
}

/* What every sm_90a backward kernel of an attention case is given: the
 * tensor maps of Q and dO (boxes of q_rows tokens) and of K and V (k_rows),
 * the outputs' buffers and the scalars, as kernel parameters point at
 * them. */
struct attn_bwd_args {
    struct tmap tq, tdo, tk, tv;
    uint64_t L, dQ, dK, dV;
    int hq, hkv, d, causal;
    float scale;
};

/* Fill x for case a with Q and dO in boxes of q_rows tokens, K and V in
 * boxes of k_rows. */
static void attn_bwd_args(struct run *r, struct attn_bwd_args *x, unsigned q_rows, unsigned k_rows)
{
    struct attn_case *a = r->attn;
    enum dtype t = r->c->dt;
    const struct attn_geom *g = &a->g;
    *x = (struct attn_bwd_args){ .L = r->out[a->lse].buf, .dQ = r->out[a->dq_out].buf, .dK = r->out[a->dk_out].buf,
                                 .dV = r->out[a->dv_out].buf, .hq = (int)g->hq, .hkv = (int)g->hkv, .d = (int)g->d,
                                 .causal = g->causal, .scale = (float)g->scale };
    attn_tmap(r->d, &x->tq, t, a->d_q, a->tq, g->hq, g->d, q_rows);
    attn_tmap(r->d, &x->tdo, t, a->d_do, a->tq, g->hq, g->d, q_rows);
    attn_tmap(r->d, &x->tk, t, a->d_k, a->tk, g->hkv, g->d, k_rows);
    attn_tmap(r->d, &x->tv, t, a->d_v, a->tk, g->hkv, g->d, k_rows);
}

/* The fused backward of case a (kernel head dim i: 0 for 64, 1 for 128;
 * the arm has it), after kg_attn_bwd_pre_<dt> has written Dsum: the slabs'
 * locks zeroed (the slabs themselves when the arm adds in any order, -D
 * FB_DQ_ATOMIC=1; the slabs filled with NaN in a stress build, -D
 * FB_STRESS_NS), then kg_attn_bwd_fused_sm90_d<D>_<dt> (at 128 without
 * a mask d128nc, when the arm has it: FB_NC_BM query rows) on grid
 * (ceil(longest Sk / 128), Hkv, B), 384 threads, with Q and dO in boxes of
 * the arm's M rows (attn_bwd_fused_bm) and K and V of 128 (dK, dV and the
 * dQ sums), then kg_attn_bwd_dq_post_sm90_d<D>_<dt> on grid (ceil(longest
 * Sq / M), Hq, B), 256 threads (dQ), allowed to start while the fused pass
 * runs when the arm says so (FB_POST_EARLY: each of its blocks waits for
 * its slab's adds, and the last for the fused pass).  The fused kernel is
 * told the device's SM count: its rotated walk (no mask) makes a key block
 * wait for later blocks of its head, safe only when they all fit at once. */
static void attn_sm90_bwd_fused(struct run *r, int i)
{
    static const char *const fused[3][DT_COUNT] = {
        { NULL, "kg_attn_bwd_fused_sm90_d64_f16", "kg_attn_bwd_fused_sm90_d64_bf16" },
        { NULL, "kg_attn_bwd_fused_sm90_d128_f16", "kg_attn_bwd_fused_sm90_d128_bf16" },
        { NULL, "kg_attn_bwd_fused_sm90_d128nc_f16", "kg_attn_bwd_fused_sm90_d128nc_bf16" },
    };
    static const char *const post[3][DT_COUNT] = {
        { NULL, "kg_attn_bwd_dq_post_sm90_d64_f16", "kg_attn_bwd_dq_post_sm90_d64_bf16" },
        { NULL, "kg_attn_bwd_dq_post_sm90_d128_f16", "kg_attn_bwd_dq_post_sm90_d128_bf16" },
        { NULL, "kg_attn_bwd_dq_post_sm90_d128nc_f16", "kg_attn_bwd_dq_post_sm90_d128nc_bf16" },
    };
    struct attn_case *a = r->attn;
    const struct arm *arm = r->d->arm;
    enum dtype t = r->c->dt;
    struct attn_bwd_args x;
    if (i == 1 && !a->g.causal && arm->attn_bwd_fused_smem[2] > 0) i = 2;
    int rows = arm->attn_bwd_fused_bm[i];
    attn_bwd_args(r, &x, (unsigned)rows, 128);
    if (arm->attn_bwd_fused_atomic) dev_fill(r->d, a->dq_slabs, 0, attn_slab_bytes(a));
    else if (arm->attn_bwd_stress) dev_fill(r->d, a->dq_slabs, 0xff, attn_slab_bytes(a));   /* NaN */
    dev_fill(r->d, a->dq_locks, 0, attn_lock_bytes(a));
    int nres = (int)dev_sms(r->d);   /* one block an SM: the blocks that run at once (a rotated walk's bound) */
    void *kp[] = { &x.tq,       &x.tdo,    &x.tk,     &x.tv,  &x.L,    &a->dsum, &x.dK,      &x.dV, &a->dq_slabs,
                   &a->dq_locks, &a->nslab, &a->dcu_q, &a->dcu_k, &x.hq, &x.hkv,   &x.d, &x.scale, &x.causal, &nres };
    struct launch_dims l = { { (unsigned)((a->max_sk + 127) / 128), (unsigned)x.hkv, (unsigned)a->g.b }, 384,
                             (unsigned)arm->attn_bwd_fused_smem[i], 0, 0 };
    gpu_launch_dims(r->d, fused[i][t], &l, kp);
    void *pp[] = { &a->dq_slabs, &a->dq_locks, &x.dQ, &a->dcu_q, &a->dcu_k, &x.hq, &x.d, &a->nslab, &x.scale,
                   &x.causal };
    l = (struct launch_dims){ { (unsigned)((a->max_sq + rows - 1) / rows), (unsigned)x.hq, (unsigned)a->g.b }, 256,
                              0, 0, arm->attn_bwd_post_early };
    gpu_launch_dims(r->d, post[i][t], &l, pp);
}

/* The backward of case a through the sm_90a kernels (i from
 * attn_sm90_bwd_pick), after kg_attn_bwd_pre_<dt> has written Dsum: the
 * fused pass when the arm has it at that head dim, else two passes:
 * kg_attn_bwd_dkdv_sm90_d<D>_<dt> on grid (ceil(longest Sk / 128), Hkv, B)
 * with Q and dO in boxes of the arm's query rows, K and V in boxes of 128;
 * kg_attn_bwd_dq_sm90_d<D>_<dt> on grid (ceil(longest Sq / 128), Hq, B)
 * with Q and dO in boxes of 128, K and V of the arm's keys; 384 threads
 * each. */
static void attn_sm90_bwd(struct run *r, int i)
{
    static const char *const dkdv[2][DT_COUNT] = {
        { NULL, "kg_attn_bwd_dkdv_sm90_d64_f16", "kg_attn_bwd_dkdv_sm90_d64_bf16" },
        { NULL, "kg_attn_bwd_dkdv_sm90_d128_f16", "kg_attn_bwd_dkdv_sm90_d128_bf16" },
    };
    static const char *const dq[2][DT_COUNT] = {
        { NULL, "kg_attn_bwd_dq_sm90_d64_f16", "kg_attn_bwd_dq_sm90_d64_bf16" },
        { NULL, "kg_attn_bwd_dq_sm90_d128_f16", "kg_attn_bwd_dq_sm90_d128_bf16" },
    };
    struct attn_case *a = r->attn;
    const struct arm *arm = r->d->arm;
    if (attn_fused_bwd(r)) {
        attn_sm90_bwd_fused(r, i);
        return;
    }
    enum dtype t = r->c->dt;
    struct attn_bwd_args x;
    attn_bwd_args(r, &x, (unsigned)arm->attn_bwd_bm, 128);
    void *kp[] = { &x.tq,      &x.tdo,     &x.tk, &x.tv,  &x.L, &a->dsum, &x.dK,     &x.dV,
                   &a->dcu_q, &a->dcu_k, &x.hq, &x.hkv, &x.d, &x.scale, &x.causal };
    struct launch_dims l = { { (unsigned)((a->max_sk + 127) / 128), (unsigned)x.hkv, (unsigned)a->g.b }, 384,
                             (unsigned)arm->attn_bwd_smem[i][0], 0, 0 };
    gpu_launch_dims(r->d, dkdv[i][t], &l, kp);
    attn_bwd_args(r, &x, 128, (unsigned)arm->attn_bwd_dq_bn);
    void *qp[] = { &x.tq, &x.tdo, &x.tk, &x.tv, &x.L, &a->dsum, &x.dQ, &a->dcu_q, &a->dcu_k, &x.hq, &x.hkv, &x.d,
                   &x.scale, &x.causal };
    l = (struct launch_dims){ { (unsigned)((a->max_sq + 127) / 128), (unsigned)x.hq, (unsigned)a->g.b }, 384,
                              (unsigned)arm->attn_bwd_smem[i][1], 0, 0 };
    gpu_launch_dims(r->d, dq[i][t], &l, qp);
}

/* The forward (owner O: O and LSE) or the backward (owner dQ: dQ, dK, dV)
 * of an attention case.  GPU: the forward through the sm_90a kernel when
 * attn_sm90_pick finds one, else on gfx942 through kg_attn_fwd_mfma_<dt>
 * when the arm has it and the head dim fits (256 threads, grid
 * (ceil(longest sequence / 128), heads, sequences)), else kg_attn_fwd_<dt>; the backward through
 * kg_attn_bwd_pre_<dt>, then the sm_90a passes when attn_sm90_bwd_pick finds
 * them, else kg_attn_bwd_dkdv_<dt> and kg_attn_bwd_dq_<dt>, reading the
 * forward's O and LSE; the portable kernels: 256 threads, grid
 * (ceil(longest sequence / 16), heads, sequences), striding over their own
 * tiles.  CPU: ref.c's flash-style candidate on the canonical inputs (the
 * values the device buffers hold). */
static void attn_launch(struct run *r, int o)
{
    static const char *const fwd[DT_COUNT] = { NULL, "kg_attn_fwd_f16", "kg_attn_fwd_bf16" };
    static const char *const fwd_mfma[DT_COUNT] = { NULL, "kg_attn_fwd_mfma_f16", "kg_attn_fwd_mfma_bf16" };
    static const char *const pre[DT_COUNT] = { NULL, "kg_attn_bwd_pre_f16", "kg_attn_bwd_pre_bf16" };
    static const char *const dkdv[DT_COUNT] = { NULL, "kg_attn_bwd_dkdv_f16", "kg_attn_bwd_dkdv_bf16" };
    static const char *const dq[DT_COUNT] = { NULL, "kg_attn_bwd_dq_f16", "kg_attn_bwd_dq_bf16" };
    struct attn_case *a = r->attn;
    enum dtype t = r->c->dt;
    struct output *O = &r->out[a->o], *L = &r->out[a->lse];
    if (r->d->kind == DEV_CPU) {
        void *ob = (void *)(uintptr_t)O->buf;
        float *lb = (float *)(uintptr_t)L->buf;
        if (o == a->o) attn_cpu_fwd(r, 0, ob, lb);
        else attn_cpu_bwd(r, 0, ob, lb, (void *)(uintptr_t)r->out[a->dq_out].buf,
                          (void *)(uintptr_t)r->out[a->dk_out].buf, (void *)(uintptr_t)r->out[a->dv_out].buf);
        return;
    }
    int B = (int)a->g.b, hq = (int)a->g.hq, hkv = (int)a->g.hkv, d = (int)a->g.d, causal = a->g.causal;
    int tq = (int)a->tq;
    float scale = (float)a->g.scale;
    unsigned gq = (unsigned)((a->max_sq + 15) / 16), gk = (unsigned)((a->max_sk + 15) / 16);
    int fast = o == a->o ? attn_sm90_pick(r) : -1;
    if (fast >= 0) {
        attn_sm90_fwd(r, fast);
        return;
    }
    if (o == a->o) {
        void *params[] = { &a->d_q, &a->d_k, &a->d_v, &O->buf, &L->buf, &a->dcu_q, &a->dcu_k, &B, &hq, &hkv, &d,
                           &scale, &causal };
        int mf = r->d->arm->attn_mfma_dmax >= d;
        gpu_launch(r->d, mf ? fwd_mfma[t] : fwd[t], mf ? (unsigned)((a->max_sq + 127) / 128) : gq, (unsigned)hq,
                   (unsigned)B, 256, params);
        return;
    }
    uint64_t dQ = r->out[a->dq_out].buf, dK = r->out[a->dk_out].buf, dV = r->out[a->dv_out].buf;
    void *pp[] = { &O->buf, &a->d_do, &a->dsum, &tq, &hq, &d };
    gpu_launch(r->d, pre[t], (unsigned)((a->tq * a->g.hq + 255) / 256), 1, 1, 256, pp);
    int fast_bwd = attn_sm90_bwd_pick(r);
    if (fast_bwd >= 0) {
        attn_sm90_bwd(r, fast_bwd);
        return;
    }
    void *kp[] = { &a->d_q, &a->d_k, &a->d_v, &a->d_do, &L->buf, &a->dsum, &dK, &dV, &a->dcu_q, &a->dcu_k, &B, &hq,
                   &hkv, &d, &scale, &causal };
    gpu_launch(r->d, dkdv[t], gk, (unsigned)hkv, (unsigned)B, 256, kp);
    void *qp[] = { &a->d_q, &a->d_k, &a->d_v, &a->d_do, &L->buf, &a->dsum, &dQ, &a->dcu_q, &a->dcu_k, &B, &hq,
                   &hkv, &d, &scale, &causal };
    gpu_launch(r->d, dq[t], gq, (unsigned)hq, (unsigned)B, 256, qp);
}

/* --- attention references: (token, head) units --- */

enum attn_which { AW_O, AW_LSE, AW_DQ, AW_DK, AW_DV };

struct attn_ref_job {
    struct run *r;
    enum attn_which which;
    const struct output *o;
    const struct plan *p;
    struct refs *f;
    size_t heads, uc;             /* units per row; columns per unit */
    const uint32_t *col_rows;     /* rows checked on the plan's columns only: each on one head */
    size_t ncol_rows;
};

/* One unit's double and same-precision values (uc of each). */
REF_INLINE void attn_unit(const struct attn_ref_job *j, size_t tok, size_t head, double *ref, float *lp)
{
    struct attn_case *a = j->r->attn;
    enum dtype t = j->r->c->dt;
    double o[KG_ATTN_DMAX], lse, other[KG_ATTN_DMAX];
    float o_lp[KG_ATTN_DMAX], lse_lp, other_lp[KG_ATTN_DMAX];
    switch (j->which) {
    case AW_O: attn_ref_fwd(&a->g, &a->in, t, tok, head, ref, &lse, lp, &lse_lp); break;
    case AW_LSE: attn_ref_fwd(&a->g, &a->in, t, tok, head, o, ref, o_lp, lp); break;
    case AW_DQ: attn_ref_dq(&a->g, &a->in, t, tok, head, ref, lp); break;
    case AW_DK: attn_ref_dkdv(&a->g, &a->in, t, tok, head, ref, other, lp, other_lp); break;
    case AW_DV: attn_ref_dkdv(&a->g, &a->in, t, tok, head, other, ref, other_lp, lp); break;
    }
}

/* Work item i: the units of the plan's rows (head by row: the threads'
 * items at any moment share a head, so its K and V stay in the caches; at
 * B4 H32 S4096 d128 a head's K and V are 4 MiB of floats, all the heads'
 * are 128), then the units of the rows checked only on the plan's columns
 * (the one head of its column group, plan_cols).  Two builds, as ref.c's
 * quantized products (REF_FAST: AVX2 and FMA, unless $KGATE_REF_PORTABLE=1),
 * with the same bits. */
REF_INLINE void attn_ref_do(void *ctx, size_t i)
{
    const struct attn_ref_job *j = ctx;
    const struct plan *p = j->p;
    double ref[KG_ATTN_DMAX];
    float lp[KG_ATTN_DMAX];
    size_t cols = j->o->cols;
    if (i < p->nr * j->heads) {
        size_t pr = i % p->nr, h = i / p->nr;
        attn_unit(j, p->rows[pr], h, ref, lp);
        for (size_t c = 0; c < j->uc; c++)
            j->f->ref_r[pr * cols + h * j->uc + c] = ref[c], j->f->lp_r[pr * cols + h * j->uc + c] = lp[c];
        return;
    }
    size_t row = j->col_rows[i - p->nr * j->heads], head = plan_cols(p, row)[0] / j->uc;
    attn_unit(j, row, head, ref, lp);
    for (size_t c = 0; c < p->nc; c++) {
        size_t u = plan_cols(p, row)[c] - head * j->uc;
        j->f->ref_c[row * p->nc + c] = ref[u], j->f->lp_c[row * p->nc + c] = lp[u];
    }
}
static void attn_ref_item(void *ctx, size_t i) { attn_ref_do(ctx, i); }
REF_FAST static void attn_ref_item_fast(void *ctx, size_t i) { attn_ref_do(ctx, i); }

/* The blocks of ATTN_ROWS query tokens (the last may hold fewer) of one
 * head of a case of tq tokens: the statistics' work items per head. */
static size_t attn_stats_blocks(size_t tq) { return (tq + ATTN_ROWS - 1) / ATTN_ROWS; }

/* The backward references' statistics (LSE and rowsum(dO·O) of every query
 * row, in double and in lp, and its sums of P^2 and dS^2), made once per
 * case; item u is the ATTN_ROWS tokens of block u % nblk of head u / nblk,
 * nblk = attn_stats_blocks(Tq) (head by token, for the caches, as
 * attn_ref_item; and its two builds). */
REF_INLINE void attn_stats_do(void *ctx, size_t u)
{
    struct run *r = ctx;
    size_t tq = r->attn->tq, nblk = attn_stats_blocks(tq), t0 = u % nblk * ATTN_ROWS;
    attn_ref_stats(&r->attn->g, &r->attn->in, r->c->dt, t0, tq - t0 < ATTN_ROWS ? tq - t0 : ATTN_ROWS, u / nblk);
}
static void attn_stats_item(void *ctx, size_t u) { attn_stats_do(ctx, u); }
REF_FAST static void attn_stats_item_fast(void *ctx, size_t u) { attn_stats_do(ctx, u); }

static void attn_stats(struct run *r)
{
    struct attn_case *a = r->attn;
    if (a->stats_ready) return;
    size_t n = a->tq * a->g.hq;
    a->in.lse_ref = run_owned(r, n * sizeof(double)), a->in.dsum_ref = run_owned(r, n * sizeof(double));
    a->in.lse_lp = run_owned(r, n * sizeof(float)), a->in.dsum_lp = run_owned(r, n * sizeof(float));
    a->in.p2 = run_owned(r, n * sizeof(double)), a->in.ds2 = run_owned(r, n * sizeof(double));
    par_for(attn_stats_blocks(a->tq) * a->g.hq, ref_fast() ? attn_stats_item_fast : attn_stats_item, r);
    a->stats_ready = 1;
}

/* The references of attention output o on plan p: each needed (token, head)
 * unit computed once, in double and in lp together (ref.c). */
static void attn_reference(struct run *r, int o, const struct plan *p, struct refs *f)
{
    struct attn_case *a = r->attn;
    const struct output *out = &r->out[o];
    struct attn_ref_job j = { r, AW_O, out, p, f, 0, out->head_dim, NULL, 0 };
    j.which = o == a->o ? AW_O : o == a->lse ? AW_LSE : o == a->dq_out ? AW_DQ : o == a->dk_out ? AW_DK : AW_DV;
    j.heads = out->cols / j.uc;
    double t0 = now_s();
    if (j.which >= AW_DQ) attn_stats(r);
    uint32_t *col_rows = xmalloc((out->rows + 1) * sizeof *col_rows);
    if (p->nc)
        for (size_t i = 0; i < out->rows; i++)
            if (!p->row_in[i]) col_rows[j.ncol_rows++] = (uint32_t)i;
    j.col_rows = col_rows;
    par_for(p->nr * j.heads + j.ncol_rows, ref_fast() ? attn_ref_item_fast : attn_ref_item, &j);
    free(col_rows);
    f->ref_s = now_s() - t0, f->lp_s = -1;
}

/* --- the backward's identities: sums over every element (checksum gate) --- */

/* A sum's z beyond which the checksum gate fails it (the largest clean z is
 * the rounding noise's maximum over the case's sums; see README). */
#define ATTN_IDENT_Z 10.0
#define ATTN_IDENT_AB 16   /* rows a of the D x D identities one work item sums */

/* The noise model, u being the unit roundoff of the case's dtype: a
 * rounding to it moves a value x by at most u|x| (an ulp is at most 2u|x|),
 * uniformly, so by a spread of at most u|x|/sqrt(3), and, below the least
 * normal, by half the least subnormal (a spread of tiny/sqrt(12): f16's
 * 2^-24 matters where dS is pure rounding, as in a sequence of one key).
 * A stored element carries one such rounding; each P and dS term of a
 * kernel's products carries one (P) or two (dS: of P, then of dS itself),
 * independently.  In a column sum the terms' variances come from the exact
 * sums of P^2 and dS^2 of every query row (attn_ref_squares); in a D x D
 * sum each stored element's kappa^2 = u^2/3 + u^2/4 stands for its own
 * rounding and the terms' (those of P and dS summed into it, taken as u/2
 * of |x|). */
#define ATTN_IDENT_KAPPA2(u2) ((u2) / 3 + (u2) / 4)

/* One identity's work: the gated output (out, decoded as the gates see it),
 * the other output it needs (dQ: the kernel's dK; dK and dV: its O, both
 * decoded), the dtype's unit roundoff squared, and each work item's worst
 * sum. */
struct attn_ident_job {
    struct run *r;
    int which;                    /* AW_DQ, AW_DK or AW_DV */
    const float *out, *other;
    double u2, tiny2;             /* the dtype's unit roundoff squared; its least subnormal's, over 12 */
    size_t nab;                   /* blocks of ATTN_IDENT_AB rows a per (sequence, KV head) */
    struct ident *item;
};

/* Fold a sum (residual off, noise variance var) into x, the worst so far,
 * with its place named by `what` and (b, hk, a, c): a < 0 for a column sum. */
static void attn_ident_fold(struct ident *x, double off, double var, const char *what, size_t b, size_t hk,
                            long a, size_t c)
{
    if (!isfinite(off) || !isfinite(var)) { x->nonfinite++; return; }
    double sd = sqrt(var), z = sd > 0 ? fabs(off) / sd : (off != 0 ? INFINITY : 0);
    x->sums++;
    if (x->sums > 1 && !(z > x->z)) return;
    x->z = z, x->off = off, x->noise = sd;
    if (a < 0) snprintf(x->where, sizeof x->where, "%s, sequence %zu, KV head %zu, column %zu", what, b, hk, c);
    else snprintf(x->where, sizeof x->where, "%s, sequence %zu, KV head %zu, entry (%ld,%zu)", what, b, hk, a, c);
}

/* acc[a - a0][c] += sign * sum over tokens t0..t1-1 and heads h0..h1-1 of
 * x[t][h][a] * y[t][h][c], and var[..] += the same of kappa2 x^2 y^2 +
 * fx y^2 + fy x^2 (fx, fy: the variance of x's or y's rounding below the
 * least normal, 0 for an input). */
static void attn_ident_outer(double *acc, double *var, const float *x, const float *y, size_t t0, size_t t1,
                             size_t heads, size_t h0, size_t h1, size_t d, size_t a0, size_t a1, double sign,
                             double kappa2, double fx, double fy)
{
    for (size_t t = t0; t < t1; t++)
        for (size_t h = h0; h < h1; h++) {
            const float *xr = x + (t * heads + h) * d, *yr = y + (t * heads + h) * d;
            for (size_t a = a0; a < a1; a++) {
                double xa = xr[a], w = kappa2 * xa * xa + fx, f = fy * xa * xa;
                double *ac = acc + (a - a0) * d, *vc = var + (a - a0) * d;
                for (size_t c = 0; c < d; c++) ac[c] += sign * xa * yr[c], vc[c] += w * (double)yr[c] * yr[c] + f;
            }
        }
}

/* The column sums of sequence b, KV head hk (dK, dV: every key's), each
 * against its expected value:
 *   sum_k dV_k = the sum of dO over the group's query rows that see a key
 *     (each row of P sums to 1);
 *   sum_k dK_k = scale * sum_i Q_i (dsum_i - D_i), with dsum_i = dO_i . O_i
 *     exactly (the reference's) and D_i the kernel's, from its stored O
 *     (each row of dS sums to dsum_i - D_i).
 * The noise: each stored element's rounding; each row's P terms (dV: u^2/3
 * sum_k P^2 dO^2) or dS terms (dK: 2 u^2/3 sum_k dS^2 scale^2 Q^2), each
 * term with its subnormal floor; D_i's fp32 sum (2^-22 of sum |dO O|). */
static void attn_ident_colsums(const struct attn_ident_job *j, size_t b, size_t hk, struct ident *x)
{
    struct attn_case *a = j->r->attn;
    const struct attn_geom *g = &a->g;
    size_t d = g->d, grp = g->hq / g->hkv, sq = g->cu_q[b + 1] - g->cu_q[b];
    double sum[KG_ATTN_DMAX] = { 0 }, var[KG_ATTN_DMAX] = { 0 }, u2 = j->u2;
    for (size_t k = g->cu_k[b]; k < g->cu_k[b + 1]; k++) {
        const float *o = j->out + (k * g->hkv + hk) * d;
        for (size_t c = 0; c < d; c++) sum[c] += o[c], var[c] += u2 / 3 * (double)o[c] * o[c] + j->tiny2;
    }
    for (size_t i = 0; i < sq; i++) {
        size_t nk = attn_visible(g, b, i), t = g->cu_q[b] + i;
        if (!nk) continue;
        double sub = (double)nk * j->tiny2;   /* each term's subnormal rounding */
        for (size_t h = hk * grp; h < (hk + 1) * grp; h++) {
            const float *dout = attn_row(a->in.dout, t, g->hq, h, d);
            size_t r = t * g->hq + h;
            if (j->which == AW_DV) {
                for (size_t c = 0; c < d; c++)
                    sum[c] -= dout[c], var[c] += (u2 / 3 * a->in.p2[r] + sub) * dout[c] * dout[c];
                continue;
            }
            const float *o = attn_row(j->other, t, g->hq, h, d), *q = attn_row(a->in.q, t, g->hq, h, d);
            double dk = 0, mag = 0;
            for (size_t c = 0; c < d; c++) dk += (double)dout[c] * o[c], mag += fabs((double)dout[c] * o[c]);
            double w = g->scale * (a->in.dsum_ref[r] - dk), e = g->scale * mag * 0x1p-22;
            double v = e * e + g->scale * g->scale * (2 * u2 / 3 * a->in.ds2[r] + 2 * sub);
            for (size_t c = 0; c < d; c++) sum[c] -= w * q[c], var[c] += v * (double)q[c] * q[c];
        }
    }
    for (size_t c = 0; c < d; c++)
        attn_ident_fold(x, sum[c], var[c], j->which == AW_DV ? "sum of dV = sum of dO" : "sum of dK = "
                        "scale * sum of Q (dsum - D)", b, hk, -1, c);
}

/* dQ's identity holds exactly only when dQ and dK come from the same dS:
 * a kernel that computes dS again for dQ (two passes) gets another fp32
 * rounding of dP - D, which is all of dS where a row sees one key or its
 * softmax is one-hot.  Its spread is taken as 2^-21 sum_d |dO_d| max|V|
 * (D's and dP's fp32 sums over the head dim) times P, so that over the
 * keys it adds, to var[a - a0][c], scale^2 sum_i Q_ia^2 e_i^2 sum_k P_ik^2
 * times max_k K_kc^2 (the sequence's keys). */
static void attn_ident_redo_ds(const struct attn_ident_job *j, size_t b, size_t hk, size_t a0, size_t a1,
                               double *var)
{
    struct attn_case *a = j->r->attn;
    const struct attn_geom *g = &a->g;
    size_t d = g->d, grp = g->hq / g->hkv;
    double kmax[KG_ATTN_DMAX] = { 0 }, vmax = 0, sa[ATTN_IDENT_AB] = { 0 };
    for (size_t k = g->cu_k[b]; k < g->cu_k[b + 1]; k++) {
        const float *kr = attn_row(a->in.k, k, g->hkv, hk, d), *vr = attn_row(a->in.v, k, g->hkv, hk, d);
        for (size_t c = 0; c < d; c++)
            kmax[c] = fmax(kmax[c], (double)kr[c] * kr[c]), vmax = fmax(vmax, fabs(vr[c]));
    }
    for (size_t t = g->cu_q[b]; t < g->cu_q[b + 1]; t++)
        for (size_t h = hk * grp; h < (hk + 1) * grp; h++) {
            const float *dout = attn_row(a->in.dout, t, g->hq, h, d), *q = attn_row(a->in.q, t, g->hq, h, d);
            double l1 = 0;
            for (size_t c = 0; c < d; c++) l1 += fabs(dout[c]);
            double e = 0x1p-21 * l1 * vmax * g->scale, w = e * e * a->in.p2[t * g->hq + h];
            for (size_t r = a0; r < a1; r++) sa[r - a0] += w * (double)q[r] * q[r];
        }
    for (size_t r = a0; r < a1; r++)
        for (size_t c = 0; c < d; c++) var[(r - a0) * d + c] += sa[r - a0] * kmax[c];
}

/* Work item i: sequence b, KV head hk, rows a0..a1 of a D x D identity:
 *   dQ: sum over the group's query rows of Q (x) dQ = sum over keys of dK (x) K
 *       (both are scale * sum_ij dS_ij Q_i (x) K_j);
 *   dV: sum over keys of V (x) dV = sum over query rows of O (x) dO
 *       (both are sum_ij P_ij V_j (x) dO_i);
 * then (first block) the column sums of dK or dV. */
static void attn_ident_item(void *ctx, size_t i)
{
    const struct attn_ident_job *j = ctx;
    struct attn_case *a = j->r->attn;
    const struct attn_geom *g = &a->g;
    size_t d = g->d, grp = g->hq / g->hkv, blk = i % j->nab, u = i / j->nab, b = u / g->hkv, hk = u % g->hkv;
    size_t a0 = blk * ATTN_IDENT_AB, a1 = a0 + ATTN_IDENT_AB < d ? a0 + ATTN_IDENT_AB : d;
    size_t q0 = g->cu_q[b], q1 = g->cu_q[b + 1], k0 = g->cu_k[b], k1 = g->cu_k[b + 1];
    struct ident *x = &j->item[i];
    if (j->which != AW_DQ && blk == 0) attn_ident_colsums(j, b, hk, x);
    if (j->which == AW_DK) return;
    double *acc = xcalloc(2 * ATTN_IDENT_AB * d, sizeof *acc), *var = acc + ATTN_IDENT_AB * d;
    double kappa2 = ATTN_IDENT_KAPPA2(j->u2), f = j->tiny2;
    if (j->which == AW_DQ) {
        attn_ident_outer(acc, var, a->in.q, j->out, q0, q1, g->hq, hk * grp, (hk + 1) * grp, d, a0, a1, 1, kappa2,
                         0, f);
        attn_ident_outer(acc, var, j->other, a->in.k, k0, k1, g->hkv, hk, hk + 1, d, a0, a1, -1, kappa2, f, 0);
        attn_ident_redo_ds(j, b, hk, a0, a1, var);
    } else {
        attn_ident_outer(acc, var, a->in.v, j->out, k0, k1, g->hkv, hk, hk + 1, d, a0, a1, 1, kappa2, 0, f);
        attn_ident_outer(acc, var, j->other, a->in.dout, q0, q1, g->hq, hk * grp, (hk + 1) * grp, d, a0, a1, -1,
                         kappa2, f, 0);
    }
    for (size_t r = a0; r < a1; r++)
        for (size_t c = 0; c < d; c++)
            attn_ident_fold(x, acc[(r - a0) * d + c], var[(r - a0) * d + c], j->which == AW_DQ ? "Q^T dQ = dK^T K (with the "
                            "kernel's dK: either may be off)" : "V^T dV = O^T dO (with the kernel's O: either may be "
                            "off)", b, hk, (long)r, c);
    free(acc);
}

/* Output k of the case as the device holds it, decoded (caller frees). */
static float *attn_ident_read(struct run *r, int k)
{
    const struct output *p = &r->out[k];
    unsigned char *raw = run_output_raw(r, k);
    float *v = run_decode(p->dt, raw + p->guard, p->rows, p->cols, p->srow, p->scol);
    free(raw);
    return v;
}

/* The checksum gate's sums of a backward output o (values out): dQ's
 * identity with the kernel's dK, dK's column sums, dV's column sums and
 * its identity with the kernel's O, each sum in units of its noise's
 * spread (ATTN_IDENT_KAPPA2 and attn_ident_colsums); x->set stays 0 for O
 * and LSE. */
static void attn_identity(struct run *r, int o, const float *out, struct ident *x)
{
    struct attn_case *a = r->attn;
    memset(x, 0, sizeof *x);
    if (o != a->dq_out && o != a->dk_out && o != a->dv_out) return;
    attn_stats(r);
    size_t nab = (a->g.d + ATTN_IDENT_AB - 1) / ATTN_IDENT_AB, n = a->g.b * a->g.hkv * nab;
    struct attn_ident_job j = { r, o == a->dq_out ? AW_DQ : o == a->dk_out ? AW_DK : AW_DV, out, NULL,
                                0, 0, nab, xcalloc(n + 1, sizeof(struct ident)) };
    const struct dtype_info *t = &DTYPES[r->out[o].dt];
    j.u2 = t->unit_roundoff * t->unit_roundoff, j.tiny2 = t->tiny * t->tiny / 12;
    float *other = attn_ident_read(r, j.which == AW_DQ ? a->dk_out : a->o);
    j.other = other;
    par_for(n, attn_ident_item, &j);
    size_t sums = 0, nonfinite = 0;
    const struct ident *worst = NULL;
    for (size_t i = 0; i < n; i++) {
        const struct ident *y = &j.item[i];
        sums += y->sums, nonfinite += y->nonfinite;
        if (y->sums && (!worst || y->z > worst->z)) worst = y;
    }
    if (worst) *x = *worst;
    x->set = 1, x->sums = sums, x->nonfinite = nonfinite, x->limit = ATTN_IDENT_Z;
    free(other);
    free(j.item);
}

/* --- its planted fault --- */

/* Replace the output by what a kernel whose causal mask is shifted by one
 * (each query sees one key more) computes: the CPU candidate so shifted. */
static void attn_inj_mask(struct inject_ctx *x)
{
    struct run *r = x->r;
    struct attn_case *a = r->attn;
    enum dtype t = r->c->dt;
    size_t es = DTYPES[t].bytes, qe = a->tq * a->g.hq * a->g.d, ke = a->tk * a->g.hkv * a->g.d;
    void *o = xmalloc(qe * es), *dq = xmalloc(qe * es), *dk = xmalloc(ke * es), *dv = xmalloc(ke * es);
    float *lse = xmalloc((a->tq * a->g.hq + 1) * sizeof(float));
    int bwd = x->oi == a->dq_out || x->oi == a->dk_out || x->oi == a->dv_out;
    attn_cpu_fwd(r, 1, o, lse);
    if (bwd) attn_cpu_bwd(r, 1, o, lse, dq, dk, dv);
    const void *src = x->oi == a->o ? o : x->oi == a->lse ? (void *)lse : x->oi == a->dq_out ? dq
                    : x->oi == a->dk_out ? dk : dv;
    const struct output *p = x->o;
    for (size_t i = 0; i < p->rows * p->cols; i++) x->out[i] = dt_load(p->dt, src, i);
    free(o), free(dq), free(dk), free(dv), free(lse);
}

/* The mask fault's unfit hook: NULL if case c is causal attention, else why
 * it cannot be planted in it. */
static const char *attn_inj_unfit(const struct kcase *c)
{
    return strcmp(c->op->name, "attn") != 0 || !c->causal ? "needs a causal attn case" : NULL;
}

/* attn's row of the op table (ops.c). */
static const struct op OP_ATTN = { "attn", attn_set, attn_finish, attn_prepare, attn_launch, attn_reference,
                                   attn_identity };
