/* src/products.c — what gemm, grouped and low precision share: product
 * outputs made of blocks, group offsets, the launches (portable kernels, the
 * sm_90a wgmma path fed by TMA, the CPU candidate), and the references of a
 * product block by block.  Relies on gpu.c, compile.c (the arm), case.c,
 * run.c, plan.c, ref.c (the CPU candidate, the reference products) and
 * util.c. */

/* A product output of nparts blocks, launched as `pl` says. */
static struct output *product_output(struct run *r, const char *name, size_t rows, size_t cols,
                                     int64_t srow, int64_t scol, size_t nparts, struct prod_launch pl)
{
    struct output *o = run_output(r, name, r->c->dt, rows, cols, srow, scol);
    o->parts = run_owned(r, (nparts ? nparts : 1) * sizeof *o->parts);
    o->nparts = nparts, o->pl = pl;
    return o;
}

/* Add block (row0, rows, inner, x, y) to output o; its work to the totals. */
static void product_part(struct output *o, size_t i, size_t row0, size_t rows, size_t inner, const float *x,
                         const float *y)
{
    o->parts[i] = (struct part){ row0, rows, inner, x, y, NULL };
    o->flops += 2.0 * rows * o->cols * inner;
    o->check_macs += (double)rows * o->cols * inner;
}

/* A grouped case's G+1 group offsets: offs[g] rows, and tile_offs[g] row
 * tiles of 64, before group g; on the host and uploaded. */
struct groups { const uint32_t *offs, *tile_offs; uint64_t doffs, dtiles; };

static struct groups product_groups(struct run *r)
{
    const struct kcase *c = r->c;
    size_t G = c->nlens;
    uint32_t *offs = run_owned(r, (G + 1) * sizeof *offs), *tile_offs = run_owned(r, (G + 1) * sizeof *offs);
    for (size_t g = 0; g < G; g++) {
        offs[g + 1] = offs[g] + c->lens[g];
        tile_offs[g + 1] = tile_offs[g] + (c->lens[g] + 63) / 64;
    }
    return (struct groups){ offs, tile_offs, run_upload_ints(r, "group offsets", offs, G + 1),
                            run_upload_ints(r, "tile offsets", tile_offs, G + 1) };
}

/* Segments, launch arrays and launch fields shared by a grouped case's
 * ragged-rows outputs (C and dA). */
static void product_ragged_rows(struct run *r, struct output *o, const struct groups *gs)
{
    size_t G = r->c->nlens;
    o->seg = gs->offs, o->nseg = G, o->seg_name = "group";
    o->pl.ragged = RAG_ROWS, o->pl.doffs = gs->doffs, o->pl.dtiles = gs->dtiles, o->pl.tiles = gs->tile_offs[G];
    o->pl.groups = G, o->pl.offs = gs->offs;
}

/* Output o of a product on the CPU: per group, read the operands through the
 * launch's strides from the same buffers and run ref.c's candidate. */
static void product_cpu(const struct output *p)
{
    const struct prod_launch *L = &p->pl;
    enum dtype t = p->dt;
    size_t es = DTYPES[t].bytes, groups = L->ragged == RAG_NONE ? 1 : L->groups;
    for (size_t g = 0; g < groups; g++) {
        size_t m = L->m, k = L->k;
        int64_t xo = 0, yo = 0, co = 0;
        if (L->ragged == RAG_ROWS) {
            m = L->offs[g + 1] - L->offs[g];
            xo = (int64_t)L->offs[g] * L->sxm, yo = (int64_t)g * L->syg, co = (int64_t)L->offs[g] * p->srow;
        } else if (L->ragged == RAG_INNER) {
            k = L->offs[g + 1] - L->offs[g];
            xo = (int64_t)L->offs[g] * L->sxk, yo = (int64_t)L->offs[g] * L->syk, co = (int64_t)g * L->scg;
        }
        float *x = run_decode(t, (char *)(uintptr_t)L->dx + xo * (int64_t)es, m, k, L->sxm, L->sxk);
        float *y = run_decode(t, (char *)(uintptr_t)L->dy + yo * (int64_t)es, k, L->n, L->syk, L->syn);
        cpu_candidate_gemm(t, x, y, m, k, L->n, (char *)(uintptr_t)p->buf + co * (int64_t)es, p->srow, p->scol);
        free(x);
        free(y);
    }
}

/* The row tiles of a grouped launch are counted on the host in tiles of 64
 * (product_groups); exit 2 if the current arm's kernels use another tile. */
static void product_tile_check(const struct device *d)
{
    if (d->arm->tile_m != 64)
        die(EXIT_USAGE, "%s (%s): grouped launches count row tiles of 64 on the host, but this build "
            "has GEMM_BM = %d", d->arm->name, d->arm->src_name, d->arm->tile_m);
}

/* --- the sm_90a path (kernels.hip, "GEMM, Hopper path") --- */

/* Whether TMA can read rows at base with a row stride of ld es-byte
 * elements: both aligned to 16 bytes. */
static int tma_aligned(uint64_t base, int64_t ld, size_t es) { return base % 16 == 0 && ld * (int64_t)es % 16 == 0; }

/* Whether a tensor map can hold rows at base, ld es-byte elements apart:
 * tma_aligned, and a stride below the 2^40 bytes the map takes. */
static int tma_rows_ok(uint64_t base, int64_t ld, size_t es)
{
    return tma_aligned(base, ld, es) && (uint64_t)ld * es < (1ull << 40);
}

/* A TMA descriptor (CUtensorMap): 128 opaque bytes, 64-byte aligned. */
struct tmap { _Alignas(64) unsigned char b[128]; };

/* Encode into m a tiled tensor map of `rank` dimensions (innermost first:
 * dims, the byte strides of dims 1.., box) of es-byte elements (2: fp16 or
 * bf16 as dt; 1: fp8 codes) at base, with the 128-byte swizzle and zeros
 * out of range; exits 5 when the driver lacks the call or refuses the map
 * (`what` names the kernel family). */
static void tmap_make(const struct device *d, struct tmap *m, size_t es, enum dtype dt, unsigned rank,
                      uint64_t base, const uint64_t *dims, const uint64_t *strides, const unsigned *box,
                      const char *what)
{
    static const unsigned step[3] = { 1, 1, 1 };
    if (!d->rt.tmap_encode) die(EXIT_DEVICE, "the driver lacks cuTensorMapEncodeTiled (sm_90a %s)", what);
    int type = es == 1 ? 0 : dt == DT_BF16 ? 9 : 6;   /* CU_TENSOR_MAP_DATA_TYPE_UINT8 / _BFLOAT16 / _FLOAT16 */
    kg_res r = d->rt.tmap_encode(m->b, type, rank, (void *)(uintptr_t)base, dims, strides, box, step,
                                 0 /* no interleave */, 3 /* 128-byte swizzle */, 2 /* L2 promotion 128 B */,
                                 0 /* zero fill */);
    if (r != 0) die(EXIT_DEVICE, "cuTensorMapEncodeTiled (%s) failed: %s (%d)", what, gpu_err_name(d, r), r);
}

/* Encode into m the tensor map of a K-major operand of `es`-byte elements
 * (2: fp16 or bf16 as dt; 1: fp8 codes): `rows` rows of K elements at device
 * address base, row stride ld elements, read in boxes of 128 bytes x
 * box_rows (tmap_make).  Returns 0, encoding nothing, when TMA cannot take
 * the operand (base or row stride not a multiple of 16 bytes, K = 0). */
static int tmap_encode(const struct device *d, struct tmap *m, size_t es, enum dtype dt, uint64_t base,
                       size_t rows, size_t K, int64_t ld, unsigned box_rows)
{
    if (!K || !rows || !tma_rows_ok(base, ld, es)) return 0;
    const uint64_t dims[2] = { K, rows }, strides[1] = { (uint64_t)ld * es };
    const unsigned box[2] = { (unsigned)(128 / es), box_rows };
    tmap_make(d, m, es, dt, 2, base, dims, strides, box, "GEMM");
    return 1;
}

/* Encode into m the tensor map of an MN-major operand of 16-bit elements
 * (dt): `planes` planes (groups) of K rows of `cols` elements at device
 * address base, row stride ld and plane stride sp elements, read in boxes
 * of 64 elements x 64 rows of K x 1 plane (tmap_make).  Returns 0, encoding
 * nothing, when TMA cannot take the operand (base, row or plane stride not
 * a multiple of 16 bytes, K = 0). */
static int tmap_encode_mn(const struct device *d, struct tmap *m, enum dtype dt, uint64_t base, size_t cols,
                          size_t K, size_t planes, int64_t ld, int64_t sp)
{
    const size_t es = 2;
    uint64_t pstride = (uint64_t)sp * es;
    if (!K || !cols || !planes || !tma_rows_ok(base, ld, es) || pstride % 16 || pstride >= (1ull << 40)) return 0;
    const uint64_t dims[3] = { cols, K, planes }, strides[2] = { (uint64_t)ld * es, pstride };
    const unsigned box[3] = { 64, 64, 1 };
    tmap_make(d, m, es, dt, 3, base, dims, strides, box, "GEMM");
    return 1;
}

/* The tile width (columns) and dynamic shared memory of the sm_90a GEMM
 * entry a launch takes: the arm's (sm90_tile_arm), or, n192 set, the
 * 192-column fp8 entries' (kg_qgemm_sm90_n192_*; lowprec.c, q_sm90_tile). */
struct sm90_tile { int n, smem, n192; };

/* The arm's own tile: kg_gemm_sm90's columns and shared memory. */
static struct sm90_tile sm90_tile_arm(const struct arm *a)
{
    return (struct sm90_tile){ a->sm90_tile_n, a->sm90_smem, 0 };
}

/* The operands, units and tensor maps of one sm_90a launch (kernels.hip,
 * "GEMM, Hopper path"), es-byte elements: X at x, K-major (tx = 0: [m][K],
 * all groups' rows) or MN-major (tx = 1: [K][m]), row stride ldx; Y at y,
 * K-major (ty = 0: Y^T [G x n][K]) or MN-major (ty = 1: [G][K][n]), row
 * stride ldy, group g's at + g x syg. */
struct sm90_args {
    struct tmap ta, tb;
    uint64_t x, y;
    int64_t ldx, ldy, syg;
    int tx, ty, use_tma, G, units, M, N, K;
    struct launch_dims l;
};

/* Row stride in bytes of a packed operand: K elements rounded up to 16 bytes. */
static size_t pack_ld_bytes(size_t K, size_t es) { return (K * es + 15) / 16 * 16; }

/* Queue kg_pack_rows: `rows` rows of K es-byte elements from src (row r is
 * row r % per of group r / per: at src + (r / per x sg + r % per x ld)
 * elements) into dst, pack_ld_bytes apart; fp4: kg_pack_fp4_e4m3, K E2M1
 * codes a row (two a byte; the strides in bytes) unpacked to one-byte E4M3. */
static void pack_launch(struct device *d, uint64_t src, uint64_t dst, size_t rows, size_t per, size_t K,
                        int64_t ld, int64_t sg, size_t es, int fp4)
{
    long long R = (long long)rows, P = (long long)per;
    int cols = (int)K, dld = (int)pack_ld_bytes(K, es), eb = (int)es;
    uint64_t chunks = (uint64_t)rows * (uint64_t)dld / 16, most = 16ull * dev_sms(d);
    unsigned blocks = (unsigned)((chunks + 255) / 256 < most ? (chunks + 255) / 256 : most);
    void *params[] = { &src, &dst, &R, &P, &cols, &ld, &sg, &dld, fp4 ? NULL : &eb };   /* fp4: 8 arguments */
    gpu_launch(d, fp4 ? "kg_pack_fp4_e4m3" : "kg_pack_rows", blocks, 1, 1, 256, params);
}

/* The packed copies of an sm_90a launch: which operands are packed, the
 * rows (per plane for X; all planes' for Y) and row bytes of each copy,
 * where Y's starts in the scratch (after X's and a guard band), and the
 * scratch's bytes (0: nothing is packed). */
struct pack_plan { int px, py; size_t xrows, xcols, yper, yrows, ycols, ldx, ldy, ybase, bytes; };

/* The packing of s's operands (as sm90_operands sets them) of product L (G
 * groups, 0 when plain): each that TMA cannot read (a row stride or base
 * not aligned to 16 bytes; K-major Y's groups not n rows apart, MN-major
 * Y's group stride not a multiple of 16 bytes) is packed, and both when
 * they are FP4 codes (L->fp4: unpacked to E4M3).  A stored row is K
 * elements of a K-major operand's row, or M (N) elements of an MN-major
 * one's K row. */
static struct pack_plan sm90_pack_plan(const struct prod_launch *L, size_t es, size_t G, const struct sm90_args *s)
{
    struct pack_plan p;
    p.xrows = s->tx ? L->k : L->m, p.xcols = s->tx ? L->m : L->k;
    p.yper = s->ty ? L->k : L->n, p.ycols = s->ty ? L->n : L->k, p.yrows = (G ? G : 1) * p.yper;
    p.ldx = pack_ld_bytes(p.xcols, es), p.ldy = pack_ld_bytes(p.ycols, es);
    p.px = !tma_aligned(s->x, s->ldx, es);
    p.py = !tma_aligned(s->y, s->ldy, es) ||
           (G && (s->ty ? s->syg * (int64_t)es % 16 != 0 : s->syg != (int64_t)L->n * s->ldy));
    if (L->fp4) p.px = p.py = 1;
    if (!L->k || !L->m || !L->n) p.px = p.py = 0;
    p.ybase = p.ldx * p.xrows + IN_GUARD_BYTES;
    p.bytes = p.px || p.py ? p.ybase + p.ldy * p.yrows : 0;
    return p;
}

/* Scratch of `bytes` for L's packed copies, between guard bands as inputs
 * are (run_buffer), filled with 0xff: the band between the copies and
 * every byte they leave unwritten read as NaN. */
static void sm90_pack_scratch(struct run *r, struct prod_launch *L, size_t bytes)
{
    L->dpack = run_scratch(r, "sm90 packing", bytes);
    L->dpack_bytes = bytes;
    dev_fill(r->d, L->dpack, 0xff, bytes);
}

/* When the arm packs: replace in s each operand of L (G groups, 0 when
 * plain) that sm90_pack_plan packs by its packed copy in L's scratch
 * (product_scratch made it before any launch), queued before the GEMM so
 * that its time counts in the launch's. */
static void sm90_pack(struct run *r, struct prod_launch *L, size_t es, size_t G, struct sm90_args *s)
{
    struct pack_plan p = sm90_pack_plan(L, es, G, s);
    if (!r->d->arm->sm90_pack || !p.bytes) return;
    if (p.bytes > L->dpack_bytes)
        die(EXIT_DEVICE, "internal: %s needs %zu bytes of packing scratch, %zu made", r->c->label, p.bytes,
            L->dpack_bytes);
    if (p.px) {
        pack_launch(r->d, s->x, L->dpack, p.xrows, p.xrows, p.xcols, s->ldx, 0, es, L->fp4);
        s->x = L->dpack, s->ldx = (int64_t)(p.ldx / es);
    }
    if (p.py) {
        pack_launch(r->d, s->y, L->dpack + p.ybase, p.yrows, p.yper, p.ycols, s->ldy, s->syg, es, L->fp4);
        s->y = L->dpack + p.ybase, s->ldy = (int64_t)(p.ldy / es), s->syg = (int64_t)(p.yper * p.ldy / es);
    }
}

/* Encode s's tensor maps of X and Y (sm90_args: after packing) for the
 * arm a and tiles of tile_n columns (Y's box: tile_n / cluster rows); 1
 * when TMA takes both. */
static int sm90_tmaps(const struct device *d, const struct arm *a, const struct prod_launch *L, size_t es,
                      enum dtype dt, size_t G, int tile_n, struct sm90_args *s)
{
    size_t cl = (size_t)a->sm90_cluster;
    int x = s->tx ? tmap_encode_mn(d, &s->ta, dt, s->x, L->m, L->k, 1, s->ldx, s->ldx * (int64_t)L->k)
                  : tmap_encode(d, &s->ta, es, dt, s->x, L->m, L->k, s->ldx, (unsigned)a->sm90_tile_m);
    if (!x) return 0;
    if (s->ty)
        return tmap_encode_mn(d, &s->tb, dt, s->y, L->n, L->k, G ? G : 1, s->ldy,
                              G ? s->syg : s->ldy * (int64_t)L->k);
    return (!G || s->syg == (int64_t)L->n * s->ldy) &&
           tmap_encode(d, &s->tb, es, dt, s->y, G ? G * L->n : L->n, L->k, s->ldy, (unsigned)(tile_n / cl));
}

/* s cleared, with L's operands as an sm_90a launch reads them before any
 * packing: X and Y MN-major as tx, ty say, their row strides, Y's group
 * stride. */
static void sm90_operands(const struct prod_launch *L, int tx, int ty, struct sm90_args *s)
{
    memset(s, 0, sizeof *s);
    s->tx = tx, s->ty = ty;
    s->x = L->dx, s->y = L->dy, s->ldx = tx ? L->sxk : L->sxm, s->ldy = ty ? L->syk : L->syn, s->syg = L->syg;
}

/* The clusters of arm a that device d runs at once (one block an SM; at
 * least 1): the persistent grid's width. */
static size_t sm90_clusters(const struct device *d, const struct arm *a)
{
    size_t n = dev_sms(d) / (size_t)a->sm90_cluster;
    return n ? n : 1;
}

/* The units of an sm_90a launch over the product L with tiles of the arm's
 * rows and tile_n columns (a unit: the arm's cluster of tiles stacked in
 * M); its tiles in *tiles unless tiles is NULL. */
static size_t sm90_units(const struct arm *a, const struct prod_launch *L, int tile_n, size_t *tiles)
{
    size_t G = L->ragged == RAG_ROWS ? L->groups : 0, tn = tile_count((int)L->n, tile_n);
    size_t cl = (size_t)a->sm90_cluster, units = 0, all = 0;
    size_t per = L->ragged == RAG_INNER ? L->groups : 1;   /* a ragged inner dimension: M x N tiles per group */
    for (size_t g = 0; g < (G ? G : 1); g++) {
        size_t tm = tile_count((int)(G ? L->offs[g + 1] - L->offs[g] : L->m), a->sm90_tile_m);
        all += per * tm * tn, units += per * ((tm + cl - 1) / cl * tn);
    }
    if (tiles) *tiles = all;
    return units;
}

/* Units, grid and tensor maps of an sm_90a launch over the product L of
 * es-byte elements (dt for the tensor map; groups when L is ragged rows),
 * X and Y MN-major as tx, ty say, on an entry of tile t: a persistent grid
 * of one 384-thread block per SM in clusters of the arm's size, at most one
 * cluster per unit (sm90_units); packed operands where sm90_pack makes
 * them; TMA when sm90_tmaps takes both operands, the loads producer
 * otherwise. */
static void sm90_args(struct run *r, struct prod_launch *L, size_t es, enum dtype dt, int tx, int ty,
                      struct sm90_tile t, struct sm90_args *s)
{
    const struct arm *a = r->d->arm;
    size_t G = L->ragged == RAG_ROWS ? L->groups : 0, cl = (size_t)a->sm90_cluster, tiles;
    size_t units = sm90_units(a, L, t.n, &tiles);
    if (units > INT32_MAX) die(EXIT_USAGE, "%s: %zu tiles: too many for one launch", r->c->label, tiles);
    sm90_operands(L, tx, ty, s);
    sm90_pack(r, L, es, G, s);
    s->use_tma = sm90_tmaps(r->d, a, L, es, dt, G, t.n, s);
    s->G = (int)(L->ragged == RAG_NONE ? 0 : L->groups), s->units = (int)units, s->M = (int)L->m, s->N = (int)L->n;
    s->K = (int)L->k;
    size_t clusters = sm90_clusters(r->d, a);
    unsigned blocks = (unsigned)((units < clusters ? units : clusters) * cl);
    s->l = (struct launch_dims){ { blocks, 1, 1 }, 384, (unsigned)t.smem, tiles, 0 };
}

/* A product L whose output (row and column strides *srow, *scol) is
 * column-major (*srow = 1, *scol != 1: a backward product stored in a T
 * operand's layout), not ragged, turned into its transpose Cᵀ = Yᵀ·Xᵀ in
 * place: X and Y swapped, M and N swapped, the output strides swapped, so
 * that the epilogue's stores run along rows, 16 bytes at a time. */
static void sm90_transpose(struct prod_launch *L, int64_t *srow, int64_t *scol)
{
    if (L->ragged != RAG_NONE || *srow != 1 || *scol == 1) return;
    struct prod_launch t = *L;
    t.dx = L->dy, t.dy = L->dx, t.m = L->n, t.n = L->m;
    t.sxm = L->syn, t.sxk = L->syk, t.syk = L->sxk, t.syn = L->sxm;
    *L = t;
    int64_t s = *srow;
    *srow = *scol, *scol = s;
}

/* Queue grouped's weight gradient o (ragged inner dimension, both operands
 * MN-major, as grouped_prepare makes it) on kg_gemm_sm90_wgrad_<dt>: L is
 * o's launch with k set to all groups' rows. */
static void sm90_wgrad(struct run *r, struct output *p, struct prod_launch *L)
{
    struct sm90_args s;
    sm90_args(r, L, 2, p->dt, 1, 1, sm90_tile_arm(r->d->arm), &s);
    void *params[] = { &s.ta, &s.tb, &s.use_tma, &s.x, &s.y, &p->buf, &L->doffs, &s.G, &s.units, &s.M,
                       &s.N, &s.ldx, &s.ldy, &p->srow, &p->scol, &L->scg };
    gpu_launch_dims(r->d, p->dt == DT_BF16 ? "kg_gemm_sm90_wgrad_bf16" : "kg_gemm_sm90_wgrad_f16", &s.l, params);
}

/* Output o through the sm_90a GEMM when the current arm has it and o
 * qualifies: an fp16 or bf16 product, plain or grouped by ragged rows, each
 * of whose operands has K contiguous (K-major) or M (N) contiguous
 * (MN-major; only when the arm has every layout's entry), or grouped's
 * weight gradient (ragged inner dimension: sm90_wgrad).  The entry is
 * named by kgate's --layout letters of the operands' majors:
 * kg_gemm_sm90_<dt> (NT: both K-major), kg_gemm_sm90_{nn,tn,tt}_<dt>.  A
 * column-major output is computed as its transpose (sm90_transpose).
 * Returns 0, launching nothing, when o does not qualify. */
static int sm90_launch(struct run *r, struct output *p)
{
    static const char *const fname[2][2][2] = {   /* [X MN-major][Y MN-major][bf16] */
        { { "kg_gemm_sm90_f16", "kg_gemm_sm90_bf16" }, { "kg_gemm_sm90_nn_f16", "kg_gemm_sm90_nn_bf16" } },
        { { "kg_gemm_sm90_tt_f16", "kg_gemm_sm90_tt_bf16" }, { "kg_gemm_sm90_tn_f16", "kg_gemm_sm90_tn_bf16" } },
    };
    const struct arm *a = r->d->arm;
    if (a->sm90_smem <= 0 || (p->dt != DT_BF16 && p->dt != DT_F16)) return 0;
    struct prod_launch L = p->pl;   /* a copy, which sm90_transpose may turn */
    int64_t srow = p->srow, scol = p->scol;
    if (a->sm90_layouts) sm90_transpose(&L, &srow, &scol);
    int tx = L.sxk != 1, ty = L.syk != 1;   /* K-major wherever K is contiguous */
    if (L.ragged == RAG_INNER) {
        if (!a->sm90_layouts || L.sxm != 1 || L.syn != 1 || p->scol != 1) return 0;
        L.k = L.offs[L.groups];
        sm90_wgrad(r, p, &L);
        return 1;
    }
    if ((tx && L.sxm != 1) || (ty && L.syn != 1) || ((tx || ty) && !a->sm90_layouts)) return 0;
    struct sm90_args s;
    sm90_args(r, &L, 2, p->dt, tx, ty, sm90_tile_arm(r->d->arm), &s);
    void *params[] = { &s.ta, &s.tb, &s.use_tma, &s.x, &s.y, &p->buf, &L.doffs, &s.G, &s.units, &s.M,
                       &s.N, &s.K, &s.ldx, &s.ldy, &s.syg, &srow, &scol };
    gpu_launch_dims(r->d, fname[tx][ty][p->dt == DT_BF16], &s.l, params);
    return 1;
}

/* Whether output o runs on the gfx942 MFMA kernels: the current arm has
 * them and o is an fp16 or bf16 product (any layout, any strides, plain or
 * grouped), launched as the portable kernels are but in tiles of 128. */
static int mfma_takes(const struct run *r, const struct output *p)
{
    return r->d->arm->mfma_tile > 0 && (p->dt == DT_BF16 || p->dt == DT_F16);
}

/* Before any launch (a launch that allocates cannot be captured: --graph):
 * on an sm_90 GPU, the packing scratch of each product output whose
 * operands an sm_90a launch would pack, as stored or as its transpose
 * (sm90_transpose), on 16-bit (or, quantized, 1-byte) elements; the larger
 * of the two. */
static void product_scratch(struct run *r)
{
    if (r->d->kind != DEV_GPU || strcmp(r->d->arch_base, "sm_90") != 0) return;
    size_t es = r->q ? 1 : 2;
    for (int o = 0; o < r->nout; o++) {
        struct output *p = &r->out[o];
        size_t bytes = 0;
        for (int t = 0; t < 2 && (r->q || p->dt != DT_F32); t++) {
            struct prod_launch L = p->pl;
            int64_t srow = p->srow, scol = p->scol;
            if (t) sm90_transpose(&L, &srow, &scol);
            int tx = !r->q && L.sxk != 1, ty = !r->q && L.syk != 1;
            if (L.ragged == RAG_INNER) L.k = L.offs[L.groups], tx = ty = 1;
            struct sm90_args s;
            sm90_operands(&L, tx, ty, &s);
            struct pack_plan pp = sm90_pack_plan(&L, es, L.ragged == RAG_ROWS ? L.groups : 0, &s);
            bytes = pp.bytes > bytes ? pp.bytes : bytes;
        }
        if (bytes) sm90_pack_scratch(r, &p->pl, bytes);
    }
}

/* Output o of a product (gemm or grouped).  GPU: the portable kernels, a
 * BM x BN tile (the arm's; 64 x 64 as shipped) per block of 256 threads:
 * kg_gemm_<dt> (grid N/BN x M/BM; kg_gemm_f32 in the tile it publishes, if
 * any), kg_grouped_<dt> (ragged rows; grid N/BN x the groups' row tiles) or
 * kg_grouped_wgrad_<dt> (ragged inner; grid N/BN x M/BM x G); on gfx942 the
 * same launches of their MFMA twins (mfma_takes: <name>_mfma_<dt>, tiles of
 * 128; ragged rows still counted in tiles of 64, a block at an odd one
 * leaving at once); first the sm_90a path where it takes o.  CPU:
 * product_cpu. */
static void product_launch(struct run *r, int o)
{
    static const char *const fname[2][3][DT_COUNT] = {
        { { "kg_gemm_f32", "kg_gemm_f16", "kg_gemm_bf16" },
          { "kg_grouped_f32", "kg_grouped_f16", "kg_grouped_bf16" },
          { "kg_grouped_wgrad_f32", "kg_grouped_wgrad_f16", "kg_grouped_wgrad_bf16" } },
        { { NULL, "kg_gemm_mfma_f16", "kg_gemm_mfma_bf16" },
          { NULL, "kg_grouped_mfma_f16", "kg_grouped_mfma_bf16" },
          { NULL, "kg_grouped_wgrad_mfma_f16", "kg_grouped_wgrad_mfma_bf16" } },
    };
    struct output *p = &r->out[o];
    struct prod_launch *L = &p->pl;
    if (r->d->kind == DEV_CPU) { product_cpu(p); return; }
    if (sm90_launch(r, p)) return;
    const struct arm *a = r->d->arm;
    int mf = mfma_takes(r, p), tm = mf ? a->mfma_tile : a->tile_m, tn = mf ? a->mfma_tile : a->tile_n;
    const char *name = fname[mf][L->ragged][p->dt];
    int M = (int)L->m, N = (int)L->n, K = (int)L->k, G = (int)L->groups;
    unsigned gx = tile_count(N, tn), gm = tile_count(M, tm);
    if (L->ragged == RAG_ROWS) product_tile_check(r->d);
    if (L->ragged == RAG_NONE) {
        void *params[] = { &L->dx, &L->dy, &p->buf, &M, &N, &K, &L->sxm, &L->sxk,
                           &L->syk, &L->syn, &p->srow, &p->scol };
        if (p->dt == DT_F32) gx = tile_count(N, a->f32_tile_n), gm = tile_count(M, a->f32_tile_m);
        gpu_launch(r->d, name, gx, gm, 1, 256, params);
    } else if (L->ragged == RAG_ROWS) {
        void *params[] = { &L->dx, &L->dy, &p->buf, &L->doffs, &L->dtiles, &G, &N, &K, &L->sxm, &L->sxk,
                           &L->syk, &L->syn, &L->syg, &p->srow, &p->scol };
        gpu_launch(r->d, name, gx, (unsigned)L->tiles, 1, 256, params);
    } else {
        void *params[] = { &L->dx, &L->dy, &p->buf, &L->doffs, &G, &M, &N, &L->sxm, &L->sxk,
                           &L->syk, &L->syn, &L->scg, &p->srow, &p->scol };
        gpu_launch(r->d, name, gx, gm, (unsigned)G, 256, params);
    }
}

/* --- references --- */

/* Block pt's product on the given rows (nr of them; NULL: all) and columns
 * (nc of them; NULL: all), accumulated as `kind`, into out (double for
 * ACC_F64, float otherwise): ref.c's qprod for quantized operands (quant),
 * else mm_select on the canonical x and y. */
static void product_select(enum acc_kind kind, int quant, const struct part *pt, size_t cols, const uint32_t *rows,
                           size_t nr, const uint32_t *sel, size_t nc, void *out)
{
    if (quant) qprod_select(kind, pt->q, rows, nr, sel, nc, out);
    else mm_select(kind, pt->x, pt->y, pt->inner, cols, rows, nr, sel, nc, out);
}

/* Block pt's rows on the plan's column block, accumulated as `kind`, into
 * out_c from row pt->row0: column group by column group, each on the rows
 * of the block that check it (the plan's grp; the rows sorted by group). */
static void product_ref_cols(enum acc_kind kind, int quant, const struct output *o, const struct part *pt,
                             const struct plan *p, void *out_c)
{
    size_t es = kind == ACC_F64 ? sizeof(double) : sizeof(float), nc = p->nc;
    size_t *start = xcalloc(p->ng + 1, sizeof *start), *at = xcalloc(p->ng + 1, sizeof *at);
    uint32_t *rows = xmalloc((pt->rows + 1) * sizeof *rows);
    for (size_t i = 0; i < pt->rows; i++) start[p->grp[pt->row0 + i] + 1]++;
    for (size_t g = 0; g < p->ng; g++) start[g + 1] += start[g], at[g] = start[g];
    for (size_t i = 0; i < pt->rows; i++) rows[at[p->grp[pt->row0 + i]]++] = (uint32_t)i;
    free(at);
    char *tmp = xmalloc(pt->rows * nc * es + 1), *dst = (char *)out_c + pt->row0 * nc * es;
    for (size_t g = 0; g < p->ng; g++) {
        size_t n = start[g + 1] - start[g];
        if (!n) continue;
        product_select(kind, quant, pt, o->cols, rows + start[g], n, p->cols + g * nc, nc, tmp);
        for (size_t r = 0; r < n; r++) memcpy(dst + rows[start[g] + r] * nc * es, tmp + r * nc * es, nc * es);
    }
    free(start);
    free(rows);
    free(tmp);
}

/* One reference of block pt on the plan, accumulated as `kind`: the plan's
 * rows that fall in it (local, b - a of them) into out_r from row a, and all
 * its rows on their columns (product_ref_cols) into out_c from row
 * pt->row0; a float reference is rounded to the output's dtype, its
 * unrounded values kept in keep_r and keep_c (when not NULL) at the same
 * places. */
static void product_ref_block(enum acc_kind kind, int quant, const struct output *o, const struct part *pt,
                              const struct plan *p, const uint32_t *local, size_t a, size_t b, void *out_r, void *out_c,
                              float *keep_r, float *keep_c)
{
    size_t es = kind == ACC_F64 ? sizeof(double) : sizeof(float);
    char *r = (char *)out_r + a * o->cols * es;
    if (b > a) {
        product_select(kind, quant, pt, o->cols, local, b - a, NULL, o->cols, r);
        if (kind != ACC_F64) refs_round(o->dt, (float *)r, (b - a) * o->cols, keep_r ? keep_r + a * o->cols : NULL);
    }
    if (p->nc) {
        product_ref_cols(kind, quant, o, pt, p, out_c);
        if (kind != ACC_F64)
            refs_round(o->dt, (float *)out_c + pt->row0 * p->nc, pt->rows * p->nc,
                       keep_c ? keep_c + pt->row0 * p->nc : NULL);
    }
}

/* The references of one product block on the plan: the plan's rows that fall
 * in the block (a contiguous run of them, as both ascend) and all rows on the
 * plan's columns; double, then fp32 in the kernels' order rounded to the
 * dtype.  Quantized operands multiply their decoded codes and scales, and
 * add the fp8 tensor cores' sums (ACC_TC8) as tc (its time counted in
 * lp_s) and the unquantised (bf16) product as hp.  A block with no inner
 * dimension is exactly zero (already, from refs_alloc). */
static void product_refs_part(struct refs *f, const struct output *o, const struct part *pt, const struct plan *p,
                              double *ref_s, double *lp_s)
{
    size_t a = 0, b;
    while (a < p->nr && p->rows[a] < pt->row0) a++;
    for (b = a; b < p->nr && p->rows[b] < pt->row0 + pt->rows; b++) {}
    if (pt->inner == 0 || pt->rows == 0) return;
    uint32_t *local = xmalloc((b - a + 1) * sizeof *local);
    for (size_t i = a; i < b; i++) local[i - a] = (uint32_t)(p->rows[i] - pt->row0);
    int quant = pt->q != NULL;
    double t0 = now_s();
    product_ref_block(ACC_F64, quant, o, pt, p, local, a, b, f->ref_r, f->ref_c, NULL, NULL);
    double t1 = now_s();
    product_ref_block(ACC_F32_SEQ, quant, o, pt, p, local, a, b, f->lp_r, f->lp_c, f->lpu_r, f->lpu_c);
    if (quant) product_ref_block(ACC_TC8, 1, o, pt, p, local, a, b, f->tc_r, f->tc_c, NULL, NULL);
    *ref_s += t1 - t0, *lp_s += now_s() - t1;
    if (quant) product_ref_block(ACC_F64, 0, o, pt, p, local, a, b, f->hp_r, f->hp_c, NULL, NULL);
    free(local);
}

/* What one fp32 operation of a kernel's accumulation may lose, as a share
 * of the sum of |terms| so far: fp32's unit roundoff 2^-24 times 8.  A
 * scalar FMA loses 2^-24.  A tensor core adds a block of n exact products
 * to its accumulator aligned to their largest exponent, truncating each
 * addend and the result (Fasi et al., "Numerical behavior of NVIDIA tensor
 * cores", PeerJ CS 2021): at most n + 2 truncations of 2^-23 per block,
 * 2^-22 a term for n >= 2. */
#define SUM_ACC_UNIT 0x1p-21

/* gamma_K = K·u / (1 - K·u) for K terms at SUM_ACC_UNIT: an element's sum
 * lies within gamma_K · sum |x||y| of the exact one, in any order; infinity
 * when K·u reaches 1/2 (no useful bound). */
static double product_gamma(size_t k)
{
    double ku = (double)k * SUM_ACC_UNIT;
    return ku < 0.5 ? ku / (1 - ku) : INFINITY;
}

/* Block pt's share of every row's and column's sum, exact products summed
 * in double: sum_r and slack_r of its rows (from pt->row0) are set, sum_c
 * and slack_c (cols of them) added to; slack is product_gamma(inner) times
 * the same sums of |x||y|.  Rows: x·(y·1); columns: (1ᵀx)·y. */
static void product_sums_part(const struct part *pt, size_t cols, double *sum_r, double *slack_r, double *sum_c,
                              double *slack_c)
{
    size_t K = pt->inner;
    double gamma = product_gamma(K), *v = xcalloc(4 * K + 1, sizeof *v);
    double *ys = v, *ya = v + K, *xs = v + 2 * K, *xa = v + 3 * K;
    for (size_t k = 0; k < K; k++)
        for (size_t j = 0; j < cols; j++) ys[k] += pt->y[k * cols + j], ya[k] += fabs(pt->y[k * cols + j]);
    for (size_t i = 0; i < pt->rows; i++) {
        const float *x = pt->x + i * K;
        double s = 0, a = 0;
        for (size_t k = 0; k < K; k++) s += x[k] * ys[k], a += fabs(x[k]) * ya[k], xs[k] += x[k], xa[k] += fabs(x[k]);
        sum_r[pt->row0 + i] = s, slack_r[pt->row0 + i] = a > 0 ? gamma * a : 0;
    }
    for (size_t k = 0; k < K; k++)
        for (size_t j = 0; j < cols; j++) {
            double t = xa[k] * fabs(pt->y[k * cols + j]);   /* 0 stays 0 when gamma is unbounded */
            sum_c[j] += xs[k] * pt->y[k * cols + j], slack_c[j] += t > 0 ? gamma * t : 0;
        }
    free(v);
}

/* Every row's and column's exact sum of product output o, and its
 * accumulation slack, into f (the checksum gate's); left NULL when a block
 * has quantized operands: the fp8 tensor cores align their sums to 13
 * bits, which bounds an element only by about 2% of sum |x||y|. */
static void product_sums(struct refs *f, const struct output *o)
{
    for (size_t i = 0; i < o->nparts; i++)
        if (o->parts[i].q) return;
    f->sum_r = xcalloc(o->rows + 1, sizeof(double)), f->slack_r = xcalloc(o->rows + 1, sizeof(double));
    f->sum_c = xcalloc(o->cols + 1, sizeof(double)), f->slack_c = xcalloc(o->cols + 1, sizeof(double));
    for (size_t i = 0; i < o->nparts; i++)
        product_sums_part(&o->parts[i], o->cols, f->sum_r, f->slack_r, f->sum_c, f->slack_c);
}

/* The op row's reference hook of a product output (gemm, grouped, low
 * precision): block by block on plan p (product_refs_part), then every
 * row's and column's sum (product_sums). */
static void product_reference(struct run *r, int o, const struct plan *p, struct refs *f)
{
    const struct output *out = &r->out[o];
    for (size_t i = 0; i < out->nparts; i++) product_refs_part(f, out, &out->parts[i], p, &f->ref_s, &f->lp_s);
    double t0 = now_s();
    product_sums(f, out);
    f->ref_s += now_s() - t0;
}

/* --- its planted fault --- */

/* Replace the output by what a kernel whose epilogue converts fp32 to the
 * output dtype by truncation (round toward zero, cvt.rz) computes: the CPU
 * candidate's fp32 sums (quantized products: sm_90a's fp8 tensor cores',
 * ACC_TC8, so that the fault leans by half an ulp beyond the sums' own),
 * part by part, so converted. */
static void product_inj_round(struct inject_ctx *x)
{
    const struct output *o = x->o;
    float *acc = xcalloc(o->rows * o->cols + 1, sizeof(float));
    for (size_t k = 0; k < o->nparts; k++) {
        const struct part *pt = &o->parts[k];
        float *dst = acc + pt->row0 * o->cols;
        if (pt->q) cpu_candidate_qgemm(ACC_TC8, DT_F32, pt->q, dst, (int64_t)o->cols, 1);
        else if (pt->inner && pt->rows) cpu_candidate_gemm(DT_F32, pt->x, pt->y, pt->rows, pt->inner, o->cols, dst,
                                                           (int64_t)o->cols, 1);
    }
    for (size_t i = 0; i < o->rows * o->cols; i++) x->out[i] = dt_round_rz(o->dt, acc[i]);
    free(acc);
}

/* The round fault's unfit hook: NULL if case c is a gemm or grouped case
 * with a 16-bit output, else why it cannot be planted in it. */
static const char *product_inj_round_unfit(const struct kcase *c)
{
    if (strcmp(c->op->name, "attn") == 0) return "needs a gemm or grouped case";
    return c->dt == DT_F32 ? "needs a 16-bit output (f16, bf16)" : NULL;
}
