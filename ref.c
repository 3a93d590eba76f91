/* ref.c — kgate's CPU side of the arithmetic: number formats, a small thread
 * pool, the double-precision references, the same-precision ("lp") references
 * and the CPU candidate that `--device cpu` runs in place of a GPU kernel.
 *
 * This file is #included by kgate.c (one amalgamated program); everything in
 * it is static.  It needs <stdint.h>, <string.h>, <math.h>, <pthread.h>,
 * <stdatomic.h> and xmalloc/xcalloc from kgate.c's utility section.
 *
 * Matrices here are row-major and canonical: X is rows×inner, Y is inner×cols,
 * both float (every fp16/bf16/fp32 input value is exactly a float).  The GPU
 * side sees the user's layouts through strides; the CPU side sees canonical
 * copies, so one set of loops serves every layout and every GEMM output
 * (C = A·B, dA = dC·Bᵀ, dB = Aᵀ·dC).
 */

/* ===== Number formats ===== */

enum dtype { DT_F32, DT_F16, DT_BF16, DT_COUNT };

/* Bit-exact views between float and its 32-bit pattern. */
static uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float f32_from_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* float -> bf16 bits, round to nearest even; NaN stays a (quiet) NaN. */
static uint16_t bf16_from_f32(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static float f32_from_bf16(uint16_t h) { return f32_from_bits((uint32_t)h << 16); }

/* float -> IEEE binary16 bits, round to nearest even, overflow to inf,
 * subnormals rounded correctly from the exact float value. */
static uint16_t f16_from_f32(float f)
{
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7e00u;              /* NaN */
    if (a >= 0x477ff000u) return sign | 0x7c00u;             /* >= 65520: inf */
    if (a >= 0x38800000u) {                                  /* normal half */
        uint32_t mant_odd = (a >> 13) & 1u;
        a += 0xfffu + mant_odd;                              /* RNE on 13 bits */
        return sign | (uint16_t)((a - 0x38000000u) >> 13);
    }
    if (a < 0x33000000u) return sign;                        /* < 2^-25: zero */
    /* subnormal half: value = m * 2^-24, m = round(|f| * 2^24) */
    int e = (int)(a >> 23);                                  /* biased f32 exp */
    uint32_t m = (a & 0x7fffffu) | 0x800000u;                /* 24-bit mantissa */
    int shift = 126 - e;                                     /* 14..24 */
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return sign | (uint16_t)q;
}

static float f32_from_f16(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f) return f32_from_bits(sign | 0x7f800000u | (m << 13));
    if (e != 0) return f32_from_bits(sign | ((e + 112u) << 23) | (m << 13));
    float v = (float)m * 0x1p-24f;                           /* subnormal or zero */
    return sign ? -v : v;
}

/* One row per dtype: storage size, unit roundoff of a stored value, default
 * tolerances (notes/gates.md) and the peak class used for % of peak. */
struct dtype_info {
    const char *name;
    size_t bytes;
    double unit_roundoff;   /* 2^-(mantissa bits + 1) */
    double rtol, atol;      /* allclose defaults on inputs normalised to max|x| = 1 */
    double tile_snr_cap;    /* dB: the worst-tile gate never asks for more than this - 10 */
};

static const struct dtype_info DTYPES[DT_COUNT] = {
    [DT_F32]  = { "f32",  4, 0x1p-24, 1e-4, 1e-4, 80.0 },
    [DT_F16]  = { "f16",  2, 0x1p-11, 1e-2, 1e-2, 60.0 },
    [DT_BF16] = { "bf16", 2, 0x1p-8,  1e-2, 1e-2, 50.0 },
};

/* Round a float to the nearest value representable in dtype t. */
static float dt_round(enum dtype t, float f)
{
    switch (t) {
    case DT_F16:  return f32_from_f16(f16_from_f32(f));
    case DT_BF16: return f32_from_bf16(bf16_from_f32(f));
    default:      return f;
    }
}

/* Store float f (already representable or not: it is rounded) as dtype t at
 * element index i of raw buffer p. */
static void dt_store(enum dtype t, void *p, size_t i, float f)
{
    switch (t) {
    case DT_F16:  ((uint16_t *)p)[i] = f16_from_f32(f); break;
    case DT_BF16: ((uint16_t *)p)[i] = bf16_from_f32(f); break;
    default:      ((float *)p)[i] = f; break;
    }
}

/* Element i of raw buffer p of dtype t, as a float. */
static float dt_load(enum dtype t, const void *p, size_t i)
{
    switch (t) {
    case DT_F16:  return f32_from_f16(((const uint16_t *)p)[i]);
    case DT_BF16: return f32_from_bf16(((const uint16_t *)p)[i]);
    default:      return ((const float *)p)[i];
    }
}

/* ===== Thread pool ===== */

/* par_for runs fn(ctx, i) for every i in [0, n) on all online CPUs (or
 * $KGATE_THREADS), handing out indices one at a time; it returns when all
 * are done.  Work items must be independent. */
typedef void (*par_fn)(void *ctx, size_t i);

struct par_job { par_fn fn; void *ctx; size_t n; atomic_size_t next; };

static void *par_worker(void *arg)
{
    struct par_job *j = arg;
    for (;;) {
        size_t i = atomic_fetch_add(&j->next, 1);
        if (i >= j->n) return NULL;
        j->fn(j->ctx, i);
    }
}

static int par_threads(void)
{
    const char *env = getenv("KGATE_THREADS");
    long n = env ? strtol(env, NULL, 10) : sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 256 ? 256 : (int)n;
}

static void par_for(size_t n, par_fn fn, void *ctx)
{
    struct par_job j = { fn, ctx, n, 0 };
    int nt = par_threads();
    if ((size_t)nt > n) nt = (int)n;
    pthread_t tid[256];
    int started = 0;
    for (int t = 1; t < nt; t++)
        if (pthread_create(&tid[started], NULL, par_worker, &j) == 0) started++;
    par_worker(&j);
    for (int t = 0; t < started; t++) pthread_join(tid[t], NULL);
}

/* ===== Matrix products on the CPU ===== */

/* How a product accumulates. */
enum acc_kind {
    ACC_F64,        /* double accumulation: the reference */
    ACC_F32_SEQ,    /* fp32 multiply and add, k = 0..K-1 in order: the lp reference */
    ACC_F32_TILED,  /* fp32, partial sums per k-tile of 32 then added: the CPU candidate */
};

/* Blocking: a work item is MM_RB rows x MM_CB columns of the output; within
 * it, k advances in blocks of MM_KB and a 4 x 4 micro-tile keeps its
 * accumulators in registers.  Y is packed into panels of 4 columns
 * ([nc/4][inner][4]) so the micro-kernel streams contiguous memory. */
#define MM_MR 4
#define MM_NR 4
#define MM_RB 64
#define MM_CB 512
#define MM_KB 256
#define MM_KTILE 32

struct mm_job {
    enum acc_kind kind;
    const float *x;          /* rows_total x inner, row-major */
    size_t inner;
    const uint32_t *rows;    /* selected rows of X (nr of them) */
    size_t nr;
    const float *yp;         /* packed panels: ceil(nc/4) x inner x 4 */
    size_t nc;
    void *out;               /* nr x nc, zeroed: double for ACC_F64, float otherwise */
    size_t col_items;        /* work items across the columns */
};

/* Two doubles and four floats per vector (SSE2, present on every x86-64; other
 * targets lower them to what they have).  GCC/clang vector extensions: the
 * compiler alone does not keep a 4 x 4 tile of accumulators in registers. */
typedef double kg_v2d __attribute__((vector_size(16)));
typedef float kg_v4f __attribute__((vector_size(16)));

/* acc[r][c] += sum over k in [k0, k1) of x[r][k] * y[k][c], in double. */
static void mm_micro_f64(const float *const x[MM_MR], const float *yq, size_t k0, size_t k1,
                         double acc[MM_MR][MM_NR])
{
    kg_v2d a[MM_MR][2];
    memcpy(a, acc, sizeof a);
    for (size_t k = k0; k < k1; k++) {
        const float *y = yq + k * MM_NR;
        kg_v2d y01 = { y[0], y[1] }, y23 = { y[2], y[3] };
        for (int r = 0; r < MM_MR; r++) {
            double xs = x[r][k];
            kg_v2d xv = { xs, xs };
            a[r][0] += xv * y01;
            a[r][1] += xv * y23;
        }
    }
    memcpy(acc, a, sizeof a);
}

/* The same in fp32, each product and each sum rounded to fp32 (no
 * contraction into FMA: ISO C mode), k in order; tiled: per k-tile of
 * MM_KTILE a partial sum, then added to acc (k0 is a multiple of MM_KTILE). */
static void mm_micro_f32(const float *const x[MM_MR], const float *yq, size_t k0, size_t k1,
                         float acc[MM_MR][MM_NR], int tiled)
{
    size_t step = tiled ? MM_KTILE : k1 - k0;
    kg_v4f a[MM_MR];
    memcpy(a, acc, sizeof a);
    for (size_t t0 = k0; t0 < k1; t0 += step) {
        size_t t1 = t0 + step < k1 ? t0 + step : k1;
        kg_v4f part[MM_MR] = { { 0 } };
        for (size_t k = t0; k < t1; k++) {
            kg_v4f y;
            memcpy(&y, yq + k * MM_NR, sizeof y);
            for (int r = 0; r < MM_MR; r++) {
                float xs = x[r][k];
                kg_v4f xv = { xs, xs, xs, xs }, p = xv * y;
                if (tiled) part[r] = part[r] + p;
                else a[r] = a[r] + p;
            }
        }
        if (tiled)
            for (int r = 0; r < MM_MR; r++) a[r] = a[r] + part[r];
    }
    memcpy(acc, a, sizeof a);
}

/* One micro-tile: rows r..r+nrow-1 (x pointers given), columns c..c+ncol-1,
 * k in [k0, k1): accumulators loaded from out, advanced, stored back. */
static void mm_tile(const struct mm_job *j, const float *const x[MM_MR], size_t r, size_t c,
                    int nrow, int ncol, size_t k0, size_t k1)
{
    const float *yq = j->yp + (c / MM_NR) * j->inner * MM_NR;
    if (j->kind == ACC_F64) {
        double acc[MM_MR][MM_NR] = { { 0 } }, *out = j->out;
        for (int a = 0; a < nrow; a++)
            for (int b = 0; b < ncol; b++) acc[a][b] = out[(r + a) * j->nc + c + b];
        mm_micro_f64(x, yq, k0, k1, acc);
        for (int a = 0; a < nrow; a++)
            for (int b = 0; b < ncol; b++) out[(r + a) * j->nc + c + b] = acc[a][b];
    } else {
        float acc[MM_MR][MM_NR] = { { 0 } }, *out = j->out;
        for (int a = 0; a < nrow; a++)
            for (int b = 0; b < ncol; b++) acc[a][b] = out[(r + a) * j->nc + c + b];
        mm_micro_f32(x, yq, k0, k1, acc, j->kind == ACC_F32_TILED);
        for (int a = 0; a < nrow; a++)
            for (int b = 0; b < ncol; b++) out[(r + a) * j->nc + c + b] = acc[a][b];
    }
}

/* Work item i: a block of MM_RB rows and MM_CB columns, all of k. */
static void mm_item(void *ctx, size_t i)
{
    const struct mm_job *j = ctx;
    size_t r0 = i / j->col_items * MM_RB, c0 = i % j->col_items * MM_CB;
    size_t r1 = r0 + MM_RB < j->nr ? r0 + MM_RB : j->nr, c1 = c0 + MM_CB < j->nc ? c0 + MM_CB : j->nc;
    for (size_t k0 = 0; k0 < j->inner; k0 += MM_KB) {
        size_t k1 = k0 + MM_KB < j->inner ? k0 + MM_KB : j->inner;
        for (size_t r = r0; r < r1; r += MM_MR) {
            int nrow = r1 - r < MM_MR ? (int)(r1 - r) : MM_MR;
            const float *x[MM_MR];
            for (int a = 0; a < MM_MR; a++)   /* rows past the end repeat the last; not stored */
                x[a] = j->x + (size_t)j->rows[r + (a < nrow ? a : nrow - 1)] * j->inner;
            for (size_t c = c0; c < c1; c += MM_NR)
                mm_tile(j, x, r, c, nrow, c1 - c < MM_NR ? (int)(c1 - c) : MM_NR, k0, k1);
        }
    }
}

struct pack_job { const float *y; size_t cols; const uint32_t *sel; size_t nc, inner; float *yp; };

/* Pack row k of the selected columns of y into the 4-column panels (zero
 * past the last column). */
static void pack_item(void *ctx, size_t k)
{
    const struct pack_job *p = ctx;
    const float *src = p->y + k * p->cols;
    for (size_t c = 0; c < (p->nc + MM_NR - 1) / MM_NR * MM_NR; c++)
        p->yp[(c / MM_NR) * p->inner * MM_NR + k * MM_NR + c % MM_NR] = c < p->nc ? src[p->sel[c]] : 0.0f;
}

/* The product of selected rows and columns:
 *   out[r][c] = sum_k x[rows[r]][k] * y[k][cols[c]]
 * x is (any rows) x inner, y is inner x ycols, both row-major float.  rows or
 * cols NULL means all of them (nr, nc then give the counts).  out is nr x nc,
 * double for ACC_F64 and float otherwise; accumulation as `kind` says. */
static void mm_select(enum acc_kind kind, const float *x, const float *y, size_t inner,
                      size_t ycols, const uint32_t *rows, size_t nr,
                      const uint32_t *cols, size_t nc, void *out)
{
    uint32_t *all_rows = NULL, *all_cols = NULL;
    if (!rows) {
        rows = all_rows = xmalloc(nr * sizeof(uint32_t));
        for (size_t r = 0; r < nr; r++) all_rows[r] = (uint32_t)r;
    }
    if (!cols) {
        cols = all_cols = xmalloc(nc * sizeof(uint32_t));
        for (size_t c = 0; c < nc; c++) all_cols[c] = (uint32_t)c;
    }
    size_t panels = (nc + MM_NR - 1) / MM_NR;
    float *yp = xmalloc(panels * MM_NR * inner * sizeof(float));
    struct pack_job pj = { y, ycols, cols, nc, inner, yp };
    par_for(inner, pack_item, &pj);
    memset(out, 0, nr * nc * (kind == ACC_F64 ? sizeof(double) : sizeof(float)));
    struct mm_job j = { kind, x, inner, rows, nr, yp, nc, out, (nc + MM_CB - 1) / MM_CB };
    par_for((nr + MM_RB - 1) / MM_RB * j.col_items, mm_item, &j);
    free(yp);
    free(all_rows);
    free(all_cols);
}

/* ===== The CPU candidate ===== */

/* The CPU "kernel": C = X·Y computed the way a GPU kernel computes it
 * (inputs already in the kernel's precision, fp32 accumulation in k-tile
 * order, output rounded to dtype t) and stored through strides into raw
 * buffer c: element (i, j) at i*scm + j*scn.  Every element is written. */
static void cpu_candidate_gemm(enum dtype t, const float *x, const float *y, size_t rows,
                               size_t inner, size_t cols, void *c, int64_t scm, int64_t scn)
{
    float *acc = xmalloc(rows * cols * sizeof(float) + 1);
    mm_select(ACC_F32_TILED, x, y, inner, cols, NULL, rows, NULL, cols, acc);
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < cols; j++)
            dt_store(t, c, (size_t)((int64_t)i * scm + (int64_t)j * scn), acc[i * cols + j]);
    free(acc);
}
