/* ref.c — kgate's CPU side of the arithmetic: a small thread pool, number
 * formats, the double-precision references, the same-precision ("lp") references
 * and the CPU candidate that `--device cpu` runs in place of a GPU kernel.
 *
 * This file is #included by kgate.c (one amalgamated program); everything in
 * it is static.  It needs <stdint.h>, <string.h>, <math.h>, <pthread.h>,
 * <stdatomic.h> and xmalloc/xcalloc from src/util.c.
 *
 * Matrices here are row-major and canonical: X is rows×inner, Y is inner×cols,
 * both float (every fp16/bf16/fp32 input value is exactly a float).  The GPU
 * side sees the user's layouts through strides; the CPU side sees canonical
 * copies, so one set of loops serves every layout and every GEMM output
 * (C = A·B, dA = dC·Bᵀ, dB = Aᵀ·dC); a grouped GEMM is one product per group.
 * Attention has its own section: references one (token, head) row at a time,
 * and a flash-style CPU candidate.  It needs KG_ATTN_DMAX from kgate.c.
 * Low precision has two: the fp8/FP4/E8M0 codecs and block quantizer (the
 * contract kernels.hip's kg_quantize meets byte for byte), and products of
 * quantized operands (decoded codes times per-block scales, K contiguous).
 */

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

/* The threads of par_for: $KGATE_THREADS (exit 2 naming it unless it is a
 * whole number from 1 to 256), else the online CPUs (at most 256). */
static int par_threads(void)
{
    const char *env = getenv("KGATE_THREADS");
    uint64_t v;
    if (env && parse_u64(env, 1, 256, &v) != 0)
        die(EXIT_USAGE, "KGATE_THREADS=%s: expected a whole number of threads from 1 to 256", shown(env));
    long n = env ? (long)v : sysconf(_SC_NPROCESSORS_ONLN);
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
 * tolerances (README "The gates") and the peak class used for % of peak. */
struct dtype_info {
    const char *name;
    size_t bytes;
    double unit_roundoff;   /* 2^-(mantissa bits + 1) */
    double rtol, atol;      /* allclose defaults on inputs normalised to max|x| = 1 */
    double tile_snr_cap;    /* dB: the worst-tile gate never asks for more than this - 10 */
    double tiny;            /* the least subnormal: the spacing of values below the least normal */
};

static const struct dtype_info DTYPES[DT_COUNT] = {
    [DT_F32]  = { "f32",  4, 0x1p-24, 1e-4, 1e-4, 80.0, 0x1p-149 },
    [DT_F16]  = { "f16",  2, 0x1p-11, 1e-2, 1e-2, 60.0, 0x1p-24 },
    [DT_BF16] = { "bf16", 2, 0x1p-8,  1e-2, 1e-2, 50.0, 0x1p-133 },
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

/* The 16-bit dtype t's value next to x (representable in t) away from zero
 * (dir > 0) or toward it (dir < 0): one step of its sign-magnitude bits;
 * toward zero from 0 stays 0.  f32: x. */
static float dt_step(enum dtype t, float x, int dir)
{
    if (t == DT_F32) return x;
    uint16_t b = t == DT_F16 ? f16_from_f32(x) : bf16_from_f32(x);
    if (dir < 0 && (b & 0x7fffu) == 0) return x;
    b = (uint16_t)(dir > 0 ? b + 1 : b - 1);
    return t == DT_F16 ? f32_from_f16(b) : f32_from_bf16(b);
}

/* f rounded to dtype t toward zero (a truncating conversion). */
static float dt_round_rz(enum dtype t, float f)
{
    float r = dt_round(t, f);
    return fabsf(r) > fabsf(f) ? dt_step(t, r, -1) : r;
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

/* ===== Low-precision formats: fp8, FP4 and the E8M0 scale ===== */

/* Element formats of quantized operands (the same numbers as kernels.hip's
 * `fmt`).  OCP ("fn") is the encoding of NVIDIA and gfx950, FNUZ that of
 * gfx942: the same bits mean different values (README "Low precision (fp8
 * and MX)"). */
enum qfmt { Q_E4M3, Q_E5M2, Q_E4M3_FNUZ, Q_E5M2_FNUZ, Q_E2M1, Q_COUNT, Q_NONE = -1 };

struct qfmt_info {
    const char *name;
    int ebits, mbits, bias;
    double max;             /* largest finite magnitude */
    int fnuz;               /* 0x80 is the only NaN; no -0, no inf */
    int has_inf;            /* OCP E5M2: exponent all ones, mantissa 0 */
    unsigned nan_code;      /* what NaN encodes to (E2M1 has no NaN: its max) */
    int emax;               /* floor(log2(max)): MX's emax_elem */
    double snr_gate;        /* dB a GEMM must reach against the reference on the same quantized inputs */
};

static const struct qfmt_info QFMTS[Q_COUNT] = {
    [Q_E4M3]      = { "e4m3",     4, 3, 7,  448,   0, 0, 0x7f, 8,  25 },
    [Q_E5M2]      = { "e5m2",     5, 2, 15, 57344, 0, 1, 0x7e, 15, 20 },
    [Q_E4M3_FNUZ] = { "e4m3fnuz", 4, 3, 8,  240,   1, 0, 0x80, 7,  25 },
    [Q_E5M2_FNUZ] = { "e5m2fnuz", 5, 2, 16, 57344, 1, 0, 0x80, 15, 20 },
    [Q_E2M1]      = { "e2m1",     2, 1, 1,  6,     0, 0, 0x07, 2,  10 },
};

static int q_bits(enum qfmt f) { return 1 + QFMTS[f].ebits + QFMTS[f].mbits; }

/* The exact value of `code` in format f (NaN and inf as the format says). */
static float q_decode(enum qfmt f, unsigned code)
{
    const struct qfmt_info *q = &QFMTS[f];
    int bits = q_bits(f);
    unsigned sign = code >> (bits - 1) & 1u, mag = code & ((1u << (bits - 1)) - 1u);
    unsigned e = mag >> q->mbits, m = mag & ((1u << q->mbits) - 1u), eall = (1u << q->ebits) - 1u;
    if (q->fnuz && code == 0x80) return NAN;
    if (bits == 8 && !q->fnuz && e == eall) {
        if (q->has_inf) return m ? NAN : sign ? -INFINITY : INFINITY;
        if (m == (1u << q->mbits) - 1u) return NAN;
    }
    double v = e ? ldexp((double)((1u << q->mbits) + m), (int)e - q->bias - q->mbits)
                 : ldexp((double)m, 1 - q->bias - q->mbits);
    return (float)(sign ? -v : v);
}

/* f's code of magnitude a (finite, representable, <= max), sign bit clear. */
static unsigned q_code_of(enum qfmt f, double a)
{
    const struct qfmt_info *q = &QFMTS[f];
    int e, emin = 1 - q->bias;
    if (a == 0) return 0;
    frexp(a, &e);
    e -= 1;                                   /* a in [2^e, 2^(e+1)) */
    if (e < emin) return (unsigned)(a / ldexp(1.0, emin - q->mbits));   /* subnormal */
    return (unsigned)(e + q->bias) << q->mbits | (unsigned)(a / ldexp(1.0, e - q->mbits) - (1 << q->mbits));
}

/* float -> format f: round to nearest even from the exact value, saturating
 * (finite overflow and inf give ±max; FNUZ: inf gives NaN), NaN to the
 * format's NaN code; FNUZ zero is always 0x00, OCP keeps the sign of zero. */
static unsigned q_encode(enum qfmt f, float v)
{
    const struct qfmt_info *q = &QFMTS[f];
    unsigned sign = signbit(v) ? 1u << (q_bits(f) - 1) : 0;
    if (isnan(v) || (isinf(v) && q->fnuz)) return q->nan_code;
    double a = isinf(v) ? q->max : fabs((double)v), t, fl, r;
    int e, emin = 1 - q->bias;
    frexp(a, &e);
    e = a == 0 || e - 1 < emin ? emin : e - 1;
    double quantum = ldexp(1.0, e - q->mbits);   /* the spacing of f's values around a */
    t = a / quantum, fl = floor(t);              /* exact: a has 24 bits, quantum is 2^n */
    r = t - fl > 0.5 || (t - fl == 0.5 && fmod(fl, 2.0) != 0) ? fl + 1 : fl;
    a = r * quantum > q->max ? q->max : r * quantum;
    if (a == 0) return q->fnuz ? 0 : sign;
    return sign | q_code_of(f, a);
}

/* The code next to `code` on the other side of v: the rounding that round to
 * nearest even did not choose (for an exactly representable v, one step
 * toward zero, or up from zero).  The planted `quant` fault. */
static unsigned q_wrong_way(enum qfmt f, float v, unsigned code)
{
    unsigned sbit = 1u << (q_bits(f) - 1), mag = code & (sbit - 1u), top = q_code_of(f, QFMTS[f].max);
    double got = fabs((double)q_decode(f, code)), want = fabs((double)v);
    if ((got < want && mag < top) || mag == 0) mag++;
    else mag--;
    if (QFMTS[f].fnuz && mag == 0) return 0;
    return (code & sbit) | mag;
}

/* An E8M0 scale byte: 2^(c - 127); 0xFF is NaN. */
static float e8m0_decode(unsigned c) { return c == 0xff ? NAN : ldexpf(1.0f, (int)c - 127); }

/* How a block of values gets its scale. */
enum qrule {
    QR_AMAX,      /* scale = fmax / max(amax, 1e-12), stored as its fp32 reciprocal */
    QR_MX_SPEC,   /* MX, the OCP spec: 2^(floor(log2 amax) - emax_elem), E8M0 */
    QR_MX_UP,     /* MX, rounded up (NVIDIA, TransformerEngine): the smallest 2^e with amax <= max·2^e */
};

/* batch matrices of rows x cols, cut into scale blocks of gr x gc (the last
 * ones partial); block (z, bi, bj) has index (z*nbr + bi)*nbc + bj. */
struct qgrid { size_t batch, rows, cols, gr, gc; };

static size_t qgrid_nbr(const struct qgrid *g) { return (g->rows + g->gr - 1) / g->gr; }
static size_t qgrid_nbc(const struct qgrid *g) { return (g->cols + g->gc - 1) / g->gc; }
static size_t qgrid_blocks(const struct qgrid *g) { return g->batch * qgrid_nbr(g) * qgrid_nbc(g); }

/* Bytes per row of codes: one per element, FP4 two per byte (element 2j in
 * the low nibble; an odd row's last high nibble is 0). */
static size_t q_row_bytes(enum qfmt f, size_t cols) { return f == Q_E2M1 ? (cols + 1) / 2 : cols; }

static unsigned q_get(enum qfmt f, const uint8_t *codes, size_t rowbytes, size_t r, size_t c)
{
    if (f != Q_E2M1) return codes[r * rowbytes + c];
    return codes[r * rowbytes + c / 2] >> (c % 2 * 4) & 0xfu;
}

static void q_put(enum qfmt f, uint8_t *codes, size_t rowbytes, size_t r, size_t c, unsigned code)
{
    if (f != Q_E2M1) { codes[r * rowbytes + c] = (uint8_t)code; return; }
    uint8_t *b = &codes[r * rowbytes + c / 2];
    *b = (uint8_t)(c % 2 ? (*b & 0x0fu) | code << 4 : (*b & 0xf0u) | code);
}

/* The MX shared exponent of a block with largest magnitude amax, in
 * [-127, 127]; 128 (the E8M0 NaN 0xFF) when amax is NaN. */
static int mx_exponent(enum qfmt f, enum qrule rule, float amax)
{
    if (isnan(amax)) return 128;
    if (!(amax > 0)) return -127;
    int e = ilogbf(amax) - QFMTS[f].emax;
    if (rule == QR_MX_UP && (double)amax > ldexp(QFMTS[f].max, e)) e++;
    return e < -127 ? -127 : e > 127 ? 127 : e;
}

/* One scale block of x: its rows and columns, and what scales its
 * values: scale (QR_AMAX: x·scale, scale = fmax / max(amax, 1e-12) in
 * fp32) or e (MX: x·2^-e, exact).  A NaN anywhere in the block makes amax
 * NaN (never fmaxf, which would skip it), so its scale and codes NaN. */
struct qblock { size_t r0, r1, c0, c1; float scale; int e; };

static struct qblock q_block(const float *x, const struct qgrid *g, enum qfmt f, enum qrule rule, size_t b)
{
    size_t nbr = qgrid_nbr(g), nbc = qgrid_nbc(g), z = b / (nbr * nbc), bi = b / nbc % nbr, bj = b % nbc;
    struct qblock k = { z * g->rows + bi * g->gr, 0, bj * g->gc, 0, 0, 0 };
    k.r1 = k.r0 + g->gr < (z + 1) * g->rows ? k.r0 + g->gr : (z + 1) * g->rows;
    k.c1 = k.c0 + g->gc < g->cols ? k.c0 + g->gc : g->cols;
    float amax = 0;
    for (size_t r = k.r0; r < k.r1; r++)
        for (size_t c = k.c0; c < k.c1; c++)
            if (!(fabsf(x[r * g->cols + c]) <= amax) && !isnan(amax)) amax = fabsf(x[r * g->cols + c]);   /* NaN sticks */
    if (rule == QR_AMAX) k.scale = (float)QFMTS[f].max / (amax > 1e-12f || isnan(amax) ? amax : 1e-12f);
    else k.e = mx_exponent(f, rule, amax);
    return k;
}

/* Value v of block k, scaled for encoding. */
static float q_scaled(const struct qblock *k, enum qrule rule, float v)
{
    return rule == QR_AMAX ? v * k->scale : k->e == 128 ? NAN : ldexpf(v, -k->e);
}

/* The quantizer's work: every block's scale first (qblock_item, one block a
 * work item), then the codes row by row (qrow_item, one row of the batch a
 * work item; an FP4 byte never spans two rows). */
struct qquant_job {
    const float *x;
    const struct qgrid *g;
    enum qfmt f;
    enum qrule rule;
    struct qblock *k;             /* qgrid_blocks(g) of them */
    uint8_t *codes;
    size_t rb;                    /* q_row_bytes of a row */
    float *s;                     /* QR_AMAX: per block, 1 / scale */
    uint8_t *e8;                  /* MX: per block, the E8M0 byte */
};

static void qblock_item(void *ctx, size_t b)
{
    struct qquant_job *j = ctx;
    j->k[b] = q_block(j->x, j->g, j->f, j->rule, b);
    if (j->rule == QR_AMAX) j->s[b] = 1.0f / j->k[b].scale;
    else j->e8[b] = (uint8_t)(j->k[b].e + 127);
}

static void qrow_item(void *ctx, size_t row)
{
    const struct qquant_job *j = ctx;
    const struct qgrid *g = j->g;
    size_t nbr = qgrid_nbr(g), nbc = qgrid_nbc(g), z = row / g->rows, bi = row % g->rows / g->gr;
    for (size_t bj = 0; bj < nbc; bj++) {
        const struct qblock *k = &j->k[(z * nbr + bi) * nbc + bj];
        for (size_t c = k->c0; c < k->c1; c++)
            q_put(j->f, j->codes, j->rb, row, c, q_encode(j->f, q_scaled(k, j->rule, j->x[row * g->cols + c])));
    }
    if (j->f == Q_E2M1 && g->cols % 2) q_put(j->f, j->codes, j->rb, row, g->cols, 0);
}

/* Quantize x (batch x rows x cols, row-major) to format f as `rule` says,
 * one scale per block of g: codes (batch*rows rows of q_row_bytes; an odd
 * FP4 row's last high nibble 0), and per block either s (QR_AMAX: the
 * dequantisation scale 1/scale, fp32) or e8 (MX: the E8M0 byte).  The
 * contract of kernels.hip's kg_quantize, which must agree byte for byte.
 * On all CPUs (par_for): each code depends on its value and its block alone. */
static void q_quantize(const float *x, const struct qgrid *g, enum qfmt f, enum qrule rule, uint8_t *codes,
                       float *s, uint8_t *e8)
{
    size_t nb = qgrid_blocks(g);
    struct qquant_job j = { x, g, f, rule, xmalloc((nb + 1) * sizeof(struct qblock)), codes, q_row_bytes(f, g->cols), s,
                            e8 };
    par_for(nb, qblock_item, &j);
    par_for(g->batch * g->rows, qrow_item, &j);
    free(j.k);
}

/* ===== Matrix products on the CPU ===== */

/* How a product accumulates. */
enum acc_kind {
    ACC_F64,        /* double accumulation: the reference */
    ACC_F32_SEQ,    /* fp32 multiply and add, k = 0..K-1 in order: the lp reference */
    ACC_F32_TILED,  /* fp32, partial sums per k-tile of 32 then added: the CPU candidate */
    ACC_TC8,        /* quantized products as sm_90a's fp8 tensor cores sum them (tc8_stage) */
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
typedef double kg_v4d __attribute__((vector_size(32)));
typedef float kg_v4f __attribute__((vector_size(16)));
typedef float kg_v8f __attribute__((vector_size(32)));

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

/* ===== Products of quantized operands ===== */

/* A product of quantized operands, the way kgate's kernels define it:
 *   out[i][j] = sum over K-blocks kb of (sx(i,kb) · sy(j,kb)) · P_kb(i,j),
 *   P_kb(i,j) = sum over k in [kb·gk, min(inner, (kb+1)·gk)) of x[i][k] · y[j][k]
 * x (rows x inner) and y (cols x inner: B stored [N][K]) hold the decoded
 * codes (exact floats); sx[((xrow0 + i) / grx)·nkb + kb] and
 * sy[(j / gry)·nkb + kb] the dequantisation scales, nkb = ceil(inner / gk). */
struct qprod {
    const float *x, *y, *sx, *sy;
    size_t rows, cols, inner, xrow0, grx, gry, gk;
    int tc_emin;   /* ACC_TC8: the exponent the fp8 tensor cores give a subnormal code (q_tc_emin) */
};

/* Two builds of the quantized products' loop: the portable one and, on
 * x86-64, one for CPUs with AVX2 and FMA (since 2013; not in x86-64's
 * baseline), picked at run time unless $KGATE_REF_PORTABLE=1.  Their bodies
 * are REF_INLINE, so that each build has its own copy; fmaf is an
 * instruction in the fast one, a library call in the other.  Both give the
 * same bits: fmaf rounds once either way, every other product is its own
 * statement (no compiler may fuse it into the add that follows), and the
 * vector lanes hold the same partial sums. */
#define REF_INLINE static inline __attribute__((always_inline))
#if defined(__x86_64__) && defined(__GNUC__)
#define REF_FAST __attribute__((target("avx2,fma")))
#else
#define REF_FAST
#endif
/* gcc fuses no product into an add under -std=c11; clang would, within an
 * expression, where the fast build has FMA: from here on it may not either,
 * so that the attention references' two builds (src/attn.c) give the same
 * bits too. */
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

/* Whether the fast build runs: the CPU has AVX2 and FMA, and
 * $KGATE_REF_PORTABLE is not 1 (exit 2 unless it is 0 or 1). */
static int ref_fast(void)
{
    const char *env = getenv("KGATE_REF_PORTABLE");
    uint64_t v = 0;
    if (env && parse_u64(env, 0, 1, &v) != 0)
        die(EXIT_USAGE, "KGATE_REF_PORTABLE=%s: expected 0 or 1", shown(env));
    if (v) return 0;
#if defined(__x86_64__) && defined(__GNUC__)
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return 0;
#endif
}

/* Quantized products run QP_COLS output columns of a row side by side: each
 * column's arithmetic is that of the column alone, in the same order, but
 * the columns' fp32 chains (one fused multiply-add after another) interleave
 * instead of waiting on each other. */
#define QP_COLS 8

/* The fp8 tensor cores' sums: sm_90a's QGMMA (wgmma ...k32 on e4m3/e5m2)
 * as the kernels use it.  A k32 step adds 32 products to the partial c:
 * each product's exponent is the sum of its operands' (a subnormal code's
 * taken as the format's smallest, emin), every term (c's too) is truncated
 * toward zero TC8_ALIGN bits below the largest of them, the terms are added
 * exactly, and the sum is truncated to TC8_BITS fraction bits.  Every
 * TC8_STAGE k the kernels add the partial to an fp32 sum.  Fitted on the
 * H200's fp32 outputs: bitwise on every element of e4m3 and e5m2, normal
 * and uniform inputs, K 32..1024, per tensor, row and block scales (README,
 * "The fp8 tensor cores' sums"); Khattak & Mikaitis, "Accurate models of
 * NVIDIA tensor cores", arXiv:2512.07004, model the same features.  The
 * sign-bias gate's allowance (gates.c) and --cpu-sums sm90a use it. */
#define TC8_STEP 32
#define TC8_STAGE 128
#define TC8_ALIGN 13
#define TC8_BITS 13

/* floor(log2 |v|) of a nonzero normal double. */
static inline int tc8_exp(double v)
{
    uint64_t b;
    memcpy(&b, &v, sizeof b);
    return (int)((b >> 52) & 0x7ff) - 1023;
}

/* The exponent the tensor cores give code value v (a normal float): its
 * own, or emin for a subnormal code. */
static inline int tc8_code_exp(float v, int emin)
{
    union { float f; uint32_t u; } b = { v };   /* not memcpy: this loop vectorizes */
    int e = (int)((b.u >> 23) & 0xff) - 127;
    return e < emin ? emin : e;
}

/* 2^e as a double (|e| < 1000). */
static inline double tc8_pow2(int e)
{
    uint64_t b = (uint64_t)(1023 + e) << 52;
    double v;
    memcpy(&v, &b, sizeof v);
    return v;
}

#define TC8_NONE (-100000)   /* the exponent of a zero term: below every other */

/* One k32 step: c + the sum of the n <= TC8_STEP products x[k]·y[k] as the
 * tensor cores add them (emin: the codes' format's).  In units of
 * 2^(emax - TC8_ALIGN) every term is below 2^15 and the sum below 2^21: an
 * int32 holds them, and converting to it truncates.  Finite codes' exponents
 * are below 16 and a partial's below 64; an inf or NaN code's is 128, so a
 * step with one returns the plain sum (inf or NaN). */
REF_INLINE double tc8_step(double c, const float *x, const float *y, size_t n, int emin)
{
    double t[TC8_STEP];
    int e[TC8_STEP], emax = c != 0 ? tc8_exp(c) : TC8_NONE;
    for (size_t k = 0; k < n; k++) {
        t[k] = (double)x[k] * y[k];   /* exact: 8-bit significands */
        e[k] = t[k] != 0 ? tc8_code_exp(x[k], emin) + tc8_code_exp(y[k], emin) : TC8_NONE;
    }
    for (size_t k = 0; k < n; k++) emax = e[k] > emax ? e[k] : emax;
    if (emax >= 64) {
        for (size_t k = 0; k < n; k++) c += t[k];
        return c;
    }
    if (emax == TC8_NONE) return 0;
    double unit = tc8_pow2(TC8_ALIGN - emax);
    int32_t sum = (int32_t)(c * unit);
    for (size_t k = 0; k < n; k++) sum += (int32_t)(t[k] * unit);
    uint32_t mag = sum < 0 ? 0u - (uint32_t)sum : (uint32_t)sum;
    int shift = 0;
    while (mag >> (TC8_BITS + 1)) mag >>= 1, shift++;   /* TC8_BITS fraction bits, truncated */
    double v = (double)(mag << shift) * tc8_pow2(emax - TC8_ALIGN);
    return sum < 0 ? -v : v;
}

/* The sum over k in [k0, k1) of x[k]·y[k] as the kernels' tensor cores sum
 * it: steps of TC8_STEP into a partial, added to fp32 every TC8_STAGE k
 * (counted from k0, where a scale block starts a stage). */
REF_INLINE float tc8_stage(const float *x, const float *y, size_t k0, size_t k1, int emin)
{
    float acc = 0;
    for (size_t s0 = k0; s0 < k1; s0 += TC8_STAGE) {
        size_t s1 = s0 + TC8_STAGE < k1 ? s0 + TC8_STAGE : k1;
        double c = 0;
        for (size_t k = s0; k < s1; k += TC8_STEP)
            c = tc8_step(c, x + k, y + k, s1 - k < TC8_STEP ? s1 - k : TC8_STEP, emin);
        acc += (float)c;   /* c: at most TC8_BITS + 1 bits, exact in fp32 */
    }
    return acc;
}

/* P_kb of QP_COLS columns: part[c] = the sum over k in [k0, k1) of
 * x[k]·y[c][k] as `kind` sums it: ACC_F64 in four double partial sums (exact
 * products); ACC_F32_SEQ in fp32, k in order (the kernels' order, the
 * same-precision reference); ACC_F32_TILED in four interleaved fp32 partial
 * sums (the CPU candidate: another order); ACC_TC8 as tc8_stage (emin: the
 * codes' format's).  Products and sums are separate statements, so that no
 * compiler contracts them into one rounding. */
REF_INLINE void qprod_block(enum acc_kind kind, const float *x, const float *const y[QP_COLS], size_t k0, size_t k1,
                           int emin, double part[QP_COLS])
{
    size_t k = k0;
    if (kind == ACC_F64) {
        double s[QP_COLS][4] = { { 0 } };
        for (; k + 4 <= k1; k += 4)
            for (int c = 0; c < QP_COLS; c++)
                for (int l = 0; l < 4; l++) {
                    double m = (double)x[k + l] * y[c][k + l];
                    s[c][l] += m;
                }
        for (; k < k1; k++)
            for (int c = 0; c < QP_COLS; c++) {
                double m = (double)x[k] * y[c][k];
                s[c][0] += m;
            }
        for (int c = 0; c < QP_COLS; c++) part[c] = (s[c][0] + s[c][1]) + (s[c][2] + s[c][3]);
        return;
    }
    float acc[QP_COLS] = { 0 };
    if (kind == ACC_TC8) {
        for (int c = 0; c < QP_COLS; c++) part[c] = tc8_stage(x, y[c], k0, k1, emin);
        return;
    }
    if (kind == ACC_F32_TILED) {
        kg_v4f v[QP_COLS] = { { 0 } };
        for (; k + 4 <= k1; k += 4) {
            kg_v4f a, b;
            memcpy(&a, x + k, sizeof a);
            for (int c = 0; c < QP_COLS; c++) {
                memcpy(&b, y[c] + k, sizeof b);
                kg_v4f m = a * b;
                v[c] += m;
            }
        }
        for (int c = 0; c < QP_COLS; c++) acc[c] = (v[c][0] + v[c][1]) + (v[c][2] + v[c][3]);
    }
    for (; k < k1; k++)
        for (int c = 0; c < QP_COLS; c++) acc[c] = fmaf(x[k], y[c][k], acc[c]);
    for (int c = 0; c < QP_COLS; c++) part[c] = acc[c];
}

/* Elements (i, j[c]) of p for QP_COLS columns j: each K-block's P_kb as
 * qprod_block sums it, then in double acc += sx·sy·P_kb (ACC_F64), or in
 * fp32 acc = fma(P_kb, sx·sy, acc) (the kernels' arithmetic). */
REF_INLINE void qprod_elems(const struct qprod *p, enum acc_kind kind, size_t i, const size_t j[QP_COLS],
                           double out[QP_COLS])
{
    size_t nkb = (p->inner + p->gk - 1) / p->gk;
    const float *x = p->x + i * p->inner, *sx = p->sx + (p->xrow0 + i) / p->grx * nkb;
    const float *y[QP_COLS], *sy[QP_COLS];
    double acc64[QP_COLS] = { 0 }, part[QP_COLS];
    float acc[QP_COLS] = { 0 };
    for (int c = 0; c < QP_COLS; c++) y[c] = p->y + j[c] * p->inner, sy[c] = p->sy + j[c] / p->gry * nkb;
    for (size_t kb = 0, k0 = 0; k0 < p->inner; kb++, k0 += p->gk) {
        qprod_block(kind, x, y, k0, k0 + p->gk < p->inner ? k0 + p->gk : p->inner, p->tc_emin, part);
        for (int c = 0; c < QP_COLS; c++) {
            if (kind == ACC_F64) {
                double w = (double)sx[kb] * (double)sy[c][kb], m = w * part[c];
                acc64[c] += m;
            } else {
                acc[c] = fmaf((float)part[c], sx[kb] * sy[c][kb], acc[c]);
            }
        }
    }
    for (int c = 0; c < QP_COLS; c++) out[c] = kind == ACC_F64 ? acc64[c] : acc[c];
}

/* out[r][c] = element (rows[r], cols[c]) of p, by `kind` (qprod_elems;
 * ACC_F64: double out, otherwise float).  rows or cols NULL: all of them
 * (nr, nc the counts). */
struct qsel_job {
    enum acc_kind kind;
    const struct qprod *p;
    const uint32_t *rows, *cols;
    size_t nc;
    void *out;
};

/* Row r of the job, QP_COLS columns at a time (the last group repeats its
 * last column to fill the lanes and keeps only its own). */
REF_INLINE void qsel_row(const struct qsel_job *j, size_t r)
{
    size_t i = j->rows ? j->rows[r] : r;
    for (size_t c0 = 0; c0 < j->nc; c0 += QP_COLS) {
        size_t col[QP_COLS], n = j->nc - c0 < QP_COLS ? j->nc - c0 : QP_COLS;
        double v[QP_COLS];
        for (size_t c = 0; c < QP_COLS; c++) {
            size_t at = c0 + (c < n ? c : n - 1);
            col[c] = j->cols ? j->cols[at] : at;
        }
        qprod_elems(j->p, j->kind, i, col, v);
        for (size_t c = 0; c < n; c++) {
            if (j->kind == ACC_F64) ((double *)j->out)[r * j->nc + c0 + c] = v[c];
            else ((float *)j->out)[r * j->nc + c0 + c] = (float)v[c];
        }
    }
}

static void qsel_item(void *ctx, size_t r) { qsel_row(ctx, r); }
REF_FAST static void qsel_item_fast(void *ctx, size_t r) { qsel_row(ctx, r); }

static void qprod_select(enum acc_kind kind, const struct qprod *p, const uint32_t *rows, size_t nr,
                         const uint32_t *cols, size_t nc, void *out)
{
    struct qsel_job j = { kind, p, rows, cols, nc, out };
    par_for(nr, ref_fast() ? qsel_item_fast : qsel_item, &j);
}

/* The CPU "kernel" of a quantized product: every element as qprod_elems
 * sums it by `kind` (ACC_F32_TILED, or ACC_TC8 as sm_90a's tensor cores),
 * rounded to dtype t and stored at i*scm + j*scn of raw buffer c. */
static void cpu_candidate_qgemm(enum acc_kind kind, enum dtype t, const struct qprod *p, void *c, int64_t scm,
                                int64_t scn)
{
    float *acc = xmalloc(p->rows * p->cols * sizeof(float) + 1);
    qprod_select(kind, p, NULL, p->rows, NULL, p->cols, acc);
    for (size_t i = 0; i < p->rows; i++)
        for (size_t j = 0; j < p->cols; j++)
            dt_store(t, c, (size_t)((int64_t)i * scm + (int64_t)j * scn), acc[i * p->cols + j]);
    free(acc);
}

/* ===== Attention on the CPU ===== */

/* Attention of a varlen batch, in kgate's "THD" layout: Q, O, dO, dQ are
 * [Tq][hq][d], K, V, dK, dV are [Tk][hkv][d], LSE is [Tq][hq]; sequence b has
 * query tokens [cu_q[b], cu_q[b+1]) and key tokens [cu_k[b], cu_k[b+1]).
 * Query head h reads KV head h / (hq / hkv).  Scores are scale·q·k; with
 * causal, local query i sees local key j iff j <= i + Sk - Sq (+ shift, which
 * only the planted `mask` fault sets), bottom-right aligned.  A query that
 * sees no key has O = 0 and LSE = -inf. */
struct attn_geom {
    size_t b, hq, hkv, d;
    const uint32_t *cu_q, *cu_k;   /* b + 1 prefix offsets each */
    int causal, shift;
    double scale;
};

/* The canonical (float) tensors, and the softmax statistics of every query
 * row that the backward references share: in double (ref) and as the
 * same-precision computation gives them (lp). */
struct attn_in {
    const float *q, *k, *v, *dout;
    float *kt;                     /* K transposed, for the lp score dots: element c of KV head hk's key
                                      token j at kt[(hk·d + c)·kt_ld + j], KT_KEYS floats of zeros after */
    size_t kt_ld;
    double *lse_ref, *dsum_ref;    /* [Tq][hq] */
    float *lse_lp, *dsum_lp;
    double *p2, *ds2;              /* [Tq][hq]: sum over keys of P^2 and of dS^2, exactly (the identities' noise) */
};

/* The sequence that owns token t, given prefix offsets cu[0..b]. */
static size_t attn_seq_of(const uint32_t *cu, size_t b, size_t t)
{
    size_t lo = 0, hi = b;            /* cu[lo] <= t < cu[hi] */
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (cu[mid] <= t) lo = mid; else hi = mid;
    }
    return lo;
}

/* How many keys (a prefix 0..n-1 of the sequence's keys) local query i of
 * sequence b sees. */
static size_t attn_visible(const struct attn_geom *g, size_t b, size_t i)
{
    int64_t sq = g->cu_q[b + 1] - g->cu_q[b], sk = g->cu_k[b + 1] - g->cu_k[b];
    if (!g->causal) return (size_t)sk;
    int64_t n = (int64_t)i + sk - sq + 1 + g->shift;
    return n < 0 ? 0 : n > sk ? (size_t)sk : (size_t)n;
}

static const float *attn_row(const float *x, size_t tok, size_t heads, size_t h, size_t d)
{
    return x + (tok * heads + h) * d;
}

/* sum a[i]*b[i] in fp32 with 8 partial sums, as a vectorised kernel adds:
 * the CPU candidate's arithmetic. */
static float dot_f32_par(const float *a, const float *b, size_t n)
{
    kg_v4f s0 = { 0, 0, 0, 0 }, s1 = { 0, 0, 0, 0 };
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        kg_v4f a0, b0, a1, b1;
        memcpy(&a0, a + i, 16), memcpy(&b0, b + i, 16);
        memcpy(&a1, a + i + 4, 16), memcpy(&b1, b + i + 4, 16);
        s0 += a0 * b0;
        s1 += a1 * b1;
    }
    kg_v4f s = s0 + s1;
    float r = (s[0] + s[1]) + (s[2] + s[3]);
    for (; i < n; i++) r += a[i] * b[i];
    return r;
}

/* Dot products for the references, up to DOT_BATCH independent ones at a
 * time (pairs past nb repeat pair 0, their results dropped): interleaved so
 * that their dependent adds overlap in the pipeline, each summed exactly as
 * it would be alone. */
#define DOT_BATCH 8

/* out[b] = sum a[b][i]*c[b][i] in double, b < nb <= DOT_BATCH, four at a
 * time; each over four partial sums, of i mod 4, added in lane order (the
 * reference: order does not matter at this precision, but it is fixed). */
REF_INLINE void dot_f64_batch(const float *const *a, const float *const *c, size_t nb, size_t n, double *out)
{
    for (size_t b0 = 0; b0 < nb; b0 += 4) {
        const float *x[4], *y[4];
        kg_v4d s[4];
        for (size_t b = 0; b < 4; b++) {
            size_t k = b0 + b < nb ? b0 + b : b0;
            x[b] = a[k], y[b] = c[k], s[b] = (kg_v4d){ 0, 0, 0, 0 };
        }
        size_t i = 0;
        for (; i + 4 <= n; i += 4)
            for (size_t b = 0; b < 4; b++) {
                kg_v4d xv = { x[b][i], x[b][i + 1], x[b][i + 2], x[b][i + 3] };
                kg_v4d yv = { y[b][i], y[b][i + 1], y[b][i + 2], y[b][i + 3] };
                kg_v4d pv = xv * yv;
                s[b] += pv;
            }
        for (size_t b = 0; b < 4 && b0 + b < nb; b++) {
            double r = s[b][0] + s[b][1] + s[b][2] + s[b][3];
            for (size_t j = i; j < n; j++) r += (double)x[b][j] * y[b][j];
            out[b0 + b] = r;
        }
    }
}

/* out[b] = sum x[i]*c[b][i] in double, b < nb <= DOT_BATCH, one row x
 * (already in double: exact) against nb rows: dot_f64_batch's sums, the
 * same bits, with x converted once and all DOT_BATCH sums in flight. */
REF_INLINE void dot_f64_row(const double *x, const float *const *c, size_t nb, size_t n, double *out)
{
    const float *y[DOT_BATCH];
    kg_v4d s[DOT_BATCH];
    for (size_t b = 0; b < DOT_BATCH; b++) y[b] = c[b < nb ? b : 0], s[b] = (kg_v4d){ 0, 0, 0, 0 };
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        kg_v4d xv;
        memcpy(&xv, x + i, sizeof xv);
        for (size_t b = 0; b < DOT_BATCH; b++) {
            kg_v4d yv = { y[b][i], y[b][i + 1], y[b][i + 2], y[b][i + 3] };
            kg_v4d pv = xv * yv;
            s[b] += pv;
        }
    }
    for (size_t b = 0; b < nb; b++) {
        double r = s[b][0] + s[b][1] + s[b][2] + s[b][3];
        for (size_t j = i; j < n; j++) r += x[j] * y[b][j];
        out[b] = r;
    }
}

/* y[c] += a[k]·x[k][c] in double and z[c] += b[k]·x[k][c] in fp32, c < n,
 * for the nb <= DOT_BATCH rows x[k] in k order: each element as alone (its
 * product, then its add; row after row), four elements at a time, in one
 * pass over y and z. */
REF_INLINE void axpy_pairs(double *y, float *z, const double *a, const float *b, const float *const *x, size_t nb,
                           size_t n)
{
    size_t c = 0;
    for (; c + 4 <= n; c += 4) {
        kg_v4f zv;
        kg_v4d yv;
        memcpy(&zv, z + c, sizeof zv), memcpy(&yv, y + c, sizeof yv);
        for (size_t k = 0; k < nb; k++) {
            kg_v4f xf;
            memcpy(&xf, x[k] + c, sizeof xf);
            kg_v4d xd = { xf[0], xf[1], xf[2], xf[3] }, pd = xd * a[k];
            kg_v4f pf = xf * b[k];
            yv += pd, zv += pf;
        }
        memcpy(y + c, &yv, sizeof yv), memcpy(z + c, &zv, sizeof zv);
    }
    for (; c < n; c++)
        for (size_t k = 0; k < nb; k++) {
            double pd = a[k] * x[k][c];
            float pf = b[k] * x[k][c];
            y[c] += pd, z[c] += pf;
        }
}

/* out[b] = sum a[b][i]*c[b][i] in fp32, i in order, each product and sum
 * rounded (the lp, eager-framework, arithmetic), b < nb <= DOT_BATCH. */
REF_INLINE void dot_f32_seq_batch(const float *const *a, const float *const *c, size_t nb, size_t n, float *out)
{
    if (nb == 0) return;
    const float *x[DOT_BATCH], *y[DOT_BATCH];
    float s[DOT_BATCH];
    for (size_t b = 0; b < DOT_BATCH; b++) x[b] = a[b < nb ? b : 0], y[b] = c[b < nb ? b : 0], s[b] = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t b = 0; b < DOT_BATCH; b++) s[b] += x[b][i] * y[b][i];
    for (size_t b = 0; b < nb; b++) out[b] = s[b];
}

/* dot_f32_seq_batch of one row x against keys 0 .. nb - 1 whose element i
 * lies at kt[i·ld + j] (K transposed), into out[j]: KT_KEYS sums at a
 * time as KT_KEYS / 8 vectors, each lane's product and sum rounded in i
 * order as there (the same bits).  Reads up to KT_KEYS - 1 floats past key
 * nb - 1 (dropped). */
#define KT_KEYS 32
REF_INLINE void dot_f32_seq_kt(const float *x, const float *kt, size_t ld, size_t nb, size_t n, float *out)
{
    for (size_t j0 = 0; j0 < nb; j0 += KT_KEYS) {
        kg_v8f s[KT_KEYS / 8] = { { 0 } };
        for (size_t i = 0; i < n; i++)
            for (size_t v = 0; v < KT_KEYS / 8; v++) {
                kg_v8f kv;
                memcpy(&kv, kt + i * ld + j0 + 8 * v, sizeof kv);
                kg_v8f pv = kv * x[i];
                s[v] += pv;
            }
        for (size_t j = j0; j < nb && j < j0 + KT_KEYS; j++) out[j] = s[(j - j0) / 8][(j - j0) % 8];
    }
}

/* --- references: one (token, head) unit at a time, or a few rows of one head --- */

/* The forward's rows at once (attn_ref_rows): query rows a work item of the
 * statistics takes together, so that each chunk of K, K transposed and V is
 * read from memory once for all of them, and from the L1 cache after. */
#define ATTN_ROWS 8

/* One query row of attn_ref_rows: its inputs in double (exact), how many keys
 * it sees, and its softmax so far, in double and in lp. */
struct attn_fwd_row {
    const float *q;
    size_t nk;
    double q64[KG_ATTN_DMAX], do64[KG_ATTN_DMAX];
    double *s, m, l;
    float *s32, m32, l32, *acc;
};

/* How many keys a row that sees nk keys takes from key j0 in a chunk of at
 * most n (0 once j0 reaches nk). */
REF_INLINE size_t attn_chunk_keys(size_t nk, size_t j0, size_t n)
{
    return nk <= j0 ? 0 : nk - j0 < n ? nk - j0 : n;
}

/* Rows of x (K or V) of the chunk of keys k0 + j0 .. (KV head hk), up to
 * DOT_BATCH of them and none past key k0 + most - 1, into rows. */
REF_INLINE void attn_chunk_rows(const struct attn_geom *g, const float *x, size_t k0, size_t j0, size_t most,
                                size_t hk, const float **rows)
{
    for (size_t i = 0; i < attn_chunk_keys(most, j0, DOT_BATCH); i++)
        rows[i] = attn_row(x, k0 + j0 + i, g->hkv, hk, g->d);
}

/* Forward of the nr <= ATTN_ROWS query tokens t0 .. t0 + nr - 1 of head h,
 * all of one sequence.  Row r's ref: in double, o[r·d ..] and lse[r] (and,
 * if p and p[r] are not NULL, each visible key's probability in p[r]; if dp
 * and dp[r] are not NULL, each visible key's dO·V in double in dp[r]).  lp:
 * the same computation as an eager framework does it in dtype dt: scores in
 * fp32, rounded to dt; softmax in fp32 (its LSE from the rounded scores);
 * the probabilities rounded to dt; P·V in fp32, rounded to dt.  Each row's
 * products and sums are made in the same order whatever nr is (the same
 * bits); the rows take each chunk of keys in turn, while it is in the
 * caches. */
REF_INLINE void attn_ref_rows(const struct attn_geom *g, const struct attn_in *in, enum dtype dt, size_t t0,
                              size_t nr, size_t h, double *o, double *lse, float *o_lp, float *lse_lp, double *const *p,
                              double *const *dp)
{
    size_t b = attn_seq_of(g->cu_q, g->b, t0), hk = h / (g->hq / g->hkv), k0 = g->cu_k[b], d = g->d, most = 0;
    struct attn_fwd_row w[ATTN_ROWS];
    for (size_t r = 0; r < nr; r++) {
        struct attn_fwd_row *x = &w[r];
        x->nk = attn_visible(g, b, t0 + r - g->cu_q[b]);
        most = x->nk > most ? x->nk : most;
        x->q = attn_row(in->q, t0 + r, g->hq, h, d);
        const float *dout = dp && dp[r] ? attn_row(in->dout, t0 + r, g->hq, h, d) : NULL;   /* a forward has none */
        for (size_t c = 0; c < d; c++)
            x->q64[c] = x->q[c], x->do64[c] = dout ? dout[c] : 0, o[r * d + c] = 0, o_lp[r * d + c] = 0;
        lse[r] = -INFINITY, lse_lp[r] = -INFINITY;
        x->s = xmalloc(x->nk * sizeof(double) + 1), x->m = -INFINITY, x->l = 0;
        x->s32 = xmalloc(x->nk * sizeof(float) + 1), x->m32 = -INFINITY, x->l32 = 0;
        x->acc = xcalloc(d, sizeof(float));
    }
    const float *kt = in->kt + hk * d * in->kt_ld + k0;
    for (size_t j0 = 0; j0 < most; j0 += KT_KEYS)   /* the lp dots */
        for (size_t r = 0; r < nr; r++)
            if (w[r].nk > j0)
                dot_f32_seq_kt(w[r].q, kt + j0, in->kt_ld, attn_chunk_keys(w[r].nk, j0, KT_KEYS), d, w[r].s32 + j0);
    for (size_t j0 = 0; j0 < most; j0 += DOT_BATCH) {   /* the double dots, the scores, their maxima */
        const float *ks[DOT_BATCH];
        attn_chunk_rows(g, in->k, k0, j0, most, hk, ks);
        for (size_t r = 0; r < nr; r++) {
            struct attn_fwd_row *x = &w[r];
            size_t nb = attn_chunk_keys(x->nk, j0, DOT_BATCH);
            double d64[DOT_BATCH];
            if (nb) dot_f64_row(x->q64, ks, nb, d, d64);
            for (size_t bb = 0, j = j0; bb < nb; bb++, j++) {
                x->s[j] = g->scale * d64[bb];
                x->s32[j] = dt_round(dt, x->s32[j] * (float)g->scale);
                x->m = x->s[j] > x->m ? x->s[j] : x->m;
                x->m32 = x->s32[j] > x->m32 ? x->s32[j] : x->m32;
            }
        }
    }
    for (size_t r = 0; r < nr; r++)
        for (size_t j = 0; j < w[r].nk; j++) {
            struct attn_fwd_row *x = &w[r];
            x->s[j] = exp(x->s[j] - x->m), x->l += x->s[j];
            x->s32[j] = expf(x->s32[j] - x->m32), x->l32 += x->s32[j];
        }
    for (size_t j0 = 0; j0 < most; j0 += DOT_BATCH) {   /* P·V, and dO·V while these rows of V are in the caches */
        const float *vs[DOT_BATCH];
        attn_chunk_rows(g, in->v, k0, j0, most, hk, vs);
        for (size_t r = 0; r < nr; r++) {
            struct attn_fwd_row *x = &w[r];
            size_t nb = attn_chunk_keys(x->nk, j0, DOT_BATCH);
            float pl[DOT_BATCH];
            if (!nb) continue;
            if (dp && dp[r]) dot_f64_row(x->do64, vs, nb, d, dp[r] + j0);
            for (size_t bb = 0, j = j0; bb < nb; bb++, j++) pl[bb] = dt_round(dt, x->s32[j] / x->l32);
            axpy_pairs(o + r * d, x->acc, x->s + j0, pl, vs, nb, d);
        }
    }
    for (size_t r = 0; r < nr; r++) {
        struct attn_fwd_row *x = &w[r];
        if (x->nk) {
            for (size_t c = 0; c < d; c++) o[r * d + c] /= x->l, o_lp[r * d + c] = dt_round(dt, x->acc[c]);
            for (size_t j = 0; j < x->nk && p && p[r]; j++) p[r][j] = x->s[j] / x->l;
            lse[r] = x->m + log(x->l), lse_lp[r] = x->m32 + logf(x->l32);
        }
        free(x->s), free(x->s32), free(x->acc);
    }
}

/* Forward, query token t, head h, alone (attn_ref_rows of one row, without
 * the probabilities or dO·V). */
REF_INLINE void attn_ref_fwd(const struct attn_geom *g, const struct attn_in *in, enum dtype dt, size_t t,
                             size_t h, double *o, double *lse, float *o_lp, float *lse_lp)
{
    attn_ref_rows(g, in, dt, t, 1, h, o, lse, o_lp, lse_lp, NULL, NULL);
}

/* Sums over the nk keys query token t (head h) sees of P^2 and of dS^2 =
 * (P (dP - D))^2, in double, from its P (p), its dP (dp: dO·V of each key)
 * and D (ds), into in->p2 and in->ds2: the spreads of a kernel's rounding
 * of P and dS in a sum over every key (the identities of attn.c). */
REF_INLINE void attn_ref_squares(const struct attn_geom *g, struct attn_in *in, size_t t, size_t h, size_t nk,
                                 const double *p, const double *dp, double ds)
{
    double p2 = 0, ds2 = 0;
    for (size_t j = 0; j < nk; j++) {
        double dsj = p[j] * (dp[j] - ds);
        p2 += p[j] * p[j], ds2 += dsj * dsj;
    }
    in->p2[t * g->hq + h] = p2, in->ds2[t * g->hq + h] = ds2;
}

/* The backward's per-row statistics for the query tokens t0 .. t0 + n - 1
 * (n <= ATTN_ROWS), head h: LSE and D = sum_d dO·O, in double (from the
 * double O) and in lp (fp32 from lp's O rounded to dt); and the sums of P^2
 * and dS^2 (attn_ref_squares).  The tokens of one sequence go through
 * attn_ref_rows together. */
REF_INLINE void attn_ref_stats(const struct attn_geom *g, struct attn_in *in, enum dtype dt, size_t t0, size_t n,
                               size_t h)
{
    size_t d = g->d;
    for (size_t t1 = t0; t1 < t0 + n;) {
        size_t b = attn_seq_of(g->cu_q, g->b, t1), nr = t0 + n - t1, all = 0, nk[ATTN_ROWS];
        nr = g->cu_q[b + 1] - t1 < nr ? g->cu_q[b + 1] - t1 : nr;   /* the rows of this sequence */
        for (size_t r = 0; r < nr; r++) nk[r] = attn_visible(g, b, t1 + r - g->cu_q[b]), all += nk[r];
        double o[ATTN_ROWS * KG_ATTN_DMAX], lse[ATTN_ROWS], *p[ATTN_ROWS], *dp[ATTN_ROWS];
        float o_lp[ATTN_ROWS * KG_ATTN_DMAX], lse_lp[ATTN_ROWS];
        double *buf = xmalloc(2 * all * sizeof *buf + 1), *at = buf;
        for (size_t r = 0; r < nr; r++) p[r] = at, dp[r] = at + nk[r], at += 2 * nk[r];
        attn_ref_rows(g, in, dt, t1, nr, h, o, lse, o_lp, lse_lp, p, dp);
        for (size_t r = 0; r < nr; r++) {
            size_t t = t1 + r;
            const float *dout = attn_row(in->dout, t, g->hq, h, d);
            double ds = 0;
            float ds32 = 0;
            for (size_t c = 0; c < d; c++) ds += o[r * d + c] * dout[c], ds32 += o_lp[r * d + c] * dout[c];
            in->lse_ref[t * g->hq + h] = lse[r], in->dsum_ref[t * g->hq + h] = ds;
            in->lse_lp[t * g->hq + h] = lse_lp[r], in->dsum_lp[t * g->hq + h] = ds32;
            attn_ref_squares(g, in, t, h, nk[r], p[r], dp[r], ds);
        }
        free(buf);
        t1 += nr;
    }
}

/* Scores' backward terms, nb <= DOT_BATCH of them at once: score b is query
 * token t[b] (head h[b]) with key token kt[b] (KV head hk): p and
 * ds = p·(dp - D), in double (pd[b]) and in lp (pl[b]: each of s, p, dp and
 * ds rounded to dt, as eager autograd stores them). */
REF_INLINE void attn_ref_pds(const struct attn_geom *g, const struct attn_in *in, enum dtype dt, const size_t *t,
                             const size_t *h, const size_t *kt, size_t hk, size_t nb, double pd[][2], float pl[][2])
{
    const float *q[DOT_BATCH] = { 0 }, *k[DOT_BATCH] = { 0 }, *v[DOT_BATCH] = { 0 }, *dout[DOT_BATCH] = { 0 };
    double s64[DOT_BATCH], dp64[DOT_BATCH];
    float s32[DOT_BATCH], dp32[DOT_BATCH];
    for (size_t b = 0; b < nb; b++) {
        q[b] = attn_row(in->q, t[b], g->hq, h[b], g->d), dout[b] = attn_row(in->dout, t[b], g->hq, h[b], g->d);
        k[b] = attn_row(in->k, kt[b], g->hkv, hk, g->d), v[b] = attn_row(in->v, kt[b], g->hkv, hk, g->d);
    }
    dot_f64_batch(q, k, nb, g->d, s64);
    dot_f64_batch(dout, v, nb, g->d, dp64);
    dot_f32_seq_batch(q, k, nb, g->d, s32);
    dot_f32_seq_batch(dout, v, nb, g->d, dp32);
    for (size_t b = 0; b < nb; b++) {
        size_t r = t[b] * g->hq + h[b];
        double s = g->scale * s64[b], p = isinf(in->lse_ref[r]) ? 0 : exp(s - in->lse_ref[r]);
        pd[b][0] = p, pd[b][1] = p * (dp64[b] - in->dsum_ref[r]);
        float sl = dt_round(dt, s32[b] * (float)g->scale);
        float p32 = isinf(in->lse_lp[r]) ? 0 : dt_round(dt, expf(sl - in->lse_lp[r]));
        float dpl = dt_round(dt, dp32[b]);
        pl[b][0] = p32, pl[b][1] = dt_round(dt, p32 * (dpl - in->dsum_lp[r]));
    }
}

/* dQ of query token t, head h: scale · sum_j ds_j K_j (ref in double; lp in
 * fp32 in key order, rounded to dt).  The stats must be ready. */
REF_INLINE void attn_ref_dq(const struct attn_geom *g, const struct attn_in *in, enum dtype dt, size_t t,
                            size_t h, double *dq, float *dq_lp)
{
    size_t b = attn_seq_of(g->cu_q, g->b, t), nk = attn_visible(g, b, t - g->cu_q[b]);
    size_t hk = h / (g->hq / g->hkv), k0 = g->cu_k[b], d = g->d;
    float acc[KG_ATTN_DMAX] = { 0 };
    for (size_t c = 0; c < d; c++) dq[c] = 0;
    for (size_t j0 = 0; j0 < nk; j0 += DOT_BATCH) {
        size_t nb = nk - j0 < DOT_BATCH ? nk - j0 : DOT_BATCH, ts[DOT_BATCH], hs[DOT_BATCH], kts[DOT_BATCH];
        double pd[DOT_BATCH][2];
        float pl[DOT_BATCH][2];
        for (size_t x = 0; x < nb; x++) ts[x] = t, hs[x] = h, kts[x] = k0 + j0 + x;
        attn_ref_pds(g, in, dt, ts, hs, kts, hk, nb, pd, pl);
        double a[DOT_BATCH];
        float al[DOT_BATCH];
        const float *ks[DOT_BATCH];
        for (size_t x = 0; x < nb; x++) a[x] = pd[x][1], al[x] = pl[x][1], ks[x] = attn_row(in->k, kts[x], g->hkv, hk, d);
        axpy_pairs(dq, acc, a, al, ks, nb, d);
    }
    for (size_t c = 0; c < d; c++)
        dq[c] *= g->scale, dq_lp[c] = dt_round(dt, acc[c] * (float)g->scale);
}

/* dK and dV's sums over nb <= DOT_BATCH scores of key token kt (KV head
 * hk), in the given order: query token t[x], head h[x] adds p·dO to dv and
 * av, ds·Q to dk and ak (double, then lp in fp32). */
REF_INLINE void attn_ref_dkdv_add(const struct attn_geom *g, const struct attn_in *in, enum dtype dt, const size_t *t,
                                  const size_t *h, size_t kt, size_t hk, size_t nb, double *dk, double *dv, float *ak,
                                  float *av)
{
    size_t kts[DOT_BATCH] = { 0 };
    double pd[DOT_BATCH][2];
    float pl[DOT_BATCH][2];
    for (size_t x = 0; x < nb; x++) kts[x] = kt;
    attn_ref_pds(g, in, dt, t, h, kts, hk, nb, pd, pl);
    double a[2][DOT_BATCH];
    float al[2][DOT_BATCH];
    const float *rows[2][DOT_BATCH];   /* dO's rows for dV, Q's for dK */
    for (size_t x = 0; x < nb; x++)
        for (int w = 0; w < 2; w++)
            a[w][x] = pd[x][w], al[w][x] = pl[x][w],
            rows[w][x] = attn_row(w ? in->q : in->dout, t[x], g->hq, h[x], g->d);
    axpy_pairs(dv, av, a[0], al[0], rows[0], nb, g->d);
    axpy_pairs(dk, ak, a[1], al[1], rows[1], nb, g->d);
}

/* dK and dV of key token kt, KV head hk: sums over every query head of the
 * group and every query that sees the key (ref in double; lp in fp32, heads
 * then queries in order, rounded to dt).  The stats must be ready. */
REF_INLINE void attn_ref_dkdv(const struct attn_geom *g, const struct attn_in *in, enum dtype dt, size_t kt,
                              size_t hk, double *dk, double *dv, float *dk_lp, float *dv_lp)
{
    size_t b = attn_seq_of(g->cu_k, g->b, kt), j = kt - g->cu_k[b], d = g->d, grp = g->hq / g->hkv;
    size_t ts[DOT_BATCH], hs[DOT_BATCH], nb = 0;
    float ak[KG_ATTN_DMAX] = { 0 }, av[KG_ATTN_DMAX] = { 0 };
    for (size_t c = 0; c < d; c++) dk[c] = dv[c] = 0;
    for (size_t h = hk * grp; h < (hk + 1) * grp; h++)
        for (size_t t = g->cu_q[b]; t < g->cu_q[b + 1]; t++) {
            if (attn_visible(g, b, t - g->cu_q[b]) <= j) continue;
            ts[nb] = t, hs[nb] = h;
            if (++nb == DOT_BATCH) attn_ref_dkdv_add(g, in, dt, ts, hs, kt, hk, nb, dk, dv, ak, av), nb = 0;
        }
    if (nb) attn_ref_dkdv_add(g, in, dt, ts, hs, kt, hk, nb, dk, dv, ak, av);
    for (size_t c = 0; c < d; c++) {
        dk[c] *= g->scale;
        dk_lp[c] = dt_round(dt, ak[c] * (float)g->scale), dv_lp[c] = dt_round(dt, av[c]);
    }
}

/* --- the CPU candidate: computed the way a flash-attention kernel does --- */

#define CPU_ATTN_BN 64    /* keys per block of the online softmax */

struct cpu_attn_job {
    const struct attn_geom *g;
    enum dtype dt;
    const float *q, *k, *v, *o, *dout, *lse;   /* inputs (o, lse: the forward's outputs) */
    float *dsum;                               /* [Tq][hq] */
    void *o_out, *dq_out, *dk_out, *dv_out;    /* raw dt storage */
    float *lse_out;
    int gpu_round;   /* $KGATE_TEST_GPU_ROUNDING (cpu_attn_gpu_round) */
};

/* Tests of the checksum gate's noise model on attention (attn.c):
 * $KGATE_TEST_GPU_ROUNDING=1 makes the candidate round as a GPU kernel
 * does: P to dt before its products (forward and backward), dS to dt, and D
 * summed in another order than dP; =2 also sums dQ's dP in reverse (a
 * two-pass kernel's dQ sees another dS than dK's).  0 otherwise. */
static int cpu_attn_gpu_round(void)
{
    const char *v = getenv("KGATE_TEST_GPU_ROUNDING");
    return v && (strcmp(v, "1") == 0 || strcmp(v, "2") == 0) ? v[0] - '0' : 0;
}

/* Forward of one (token, head) unit: an online softmax over blocks of
 * CPU_ATTN_BN keys in fp32, the accumulator rescaled per block, P in fp32. */
static void cpu_attn_fwd_item(void *ctx, size_t u)
{
    const struct cpu_attn_job *j = ctx;
    const struct attn_geom *g = j->g;
    size_t t = u / g->hq, h = u % g->hq, d = g->d, hk = h / (g->hq / g->hkv);
    size_t b = attn_seq_of(g->cu_q, g->b, t), nk = attn_visible(g, b, t - g->cu_q[b]), k0 = g->cu_k[b];
    const float *q = attn_row(j->q, t, g->hq, h, d);
    float acc[KG_ATTN_DMAX] = { 0 }, s[CPU_ATTN_BN], m = -INFINITY, l = 0;
    for (size_t j0 = 0; j0 < nk; j0 += CPU_ATTN_BN) {
        size_t n = nk - j0 < CPU_ATTN_BN ? nk - j0 : CPU_ATTN_BN;
        float mb = m;
        for (size_t x = 0; x < n; x++) {
            s[x] = dot_f32_par(q, attn_row(j->k, k0 + j0 + x, g->hkv, hk, d), d) * (float)g->scale;
            mb = s[x] > mb ? s[x] : mb;
        }
        float alpha = expf(m - mb);   /* m = -inf on the first block: alpha = 0 */
        l *= alpha;
        for (size_t c = 0; c < d; c++) acc[c] *= alpha;
        for (size_t x = 0; x < n; x++) {
            float p = expf(s[x] - mb);
            const float *v = attn_row(j->v, k0 + j0 + x, g->hkv, hk, d);
            l += p;
            if (j->gpu_round) p = dt_round(j->dt, p);
            for (size_t c = 0; c < d; c++) acc[c] += p * v[c];
        }
        m = mb;
    }
    for (size_t c = 0; c < d; c++) dt_store(j->dt, j->o_out, u * d + c, nk ? acc[c] / l : 0.0f);
    j->lse_out[u] = nk ? m + logf(l) : -INFINITY;
}

/* D = sum_d O·dO of one (token, head) unit, fp32, from the forward's O. */
static void cpu_attn_dsum_item(void *ctx, size_t u)
{
    const struct cpu_attn_job *j = ctx;
    const float *o = j->o + u * j->g->d, *dout = j->dout + u * j->g->d;
    j->dsum[u] = dot_f32_par(o, dout, j->g->d);
    if (!j->gpu_round) return;
    double s = 0;   /* another order (and precision) than dP's */
    for (size_t c = 0; c < j->g->d; c++) s += (double)o[c] * dout[c];
    j->dsum[u] = (float)s;
}

/* sum a[i]*b[i] in fp32 from the last element down (the test hook's dQ). */
static float dot_f32_rev(const float *a, const float *b, size_t n)
{
    float s = 0;
    for (size_t i = n; i-- > 0;) s += a[i] * b[i];
    return s;
}

/* p and ds of one score, from the forward's LSE and the row's D (fp32);
 * for_dq: dQ's (the test hook's =2 sums its dP in reverse). */
static void cpu_attn_pds(const struct cpu_attn_job *j, size_t t, size_t h, size_t kt, size_t hk, int for_dq,
                         float *p, float *ds)
{
    const struct attn_geom *g = j->g;
    size_t r = t * g->hq + h;
    const float *dout = attn_row(j->dout, t, g->hq, h, g->d), *v = attn_row(j->v, kt, g->hkv, hk, g->d);
    float s = dot_f32_par(attn_row(j->q, t, g->hq, h, g->d), attn_row(j->k, kt, g->hkv, hk, g->d), g->d);
    float dp = for_dq && j->gpu_round == 2 ? dot_f32_rev(dout, v, g->d) : dot_f32_par(dout, v, g->d);
    *p = isinf(j->lse[r]) ? 0.0f : expf(s * (float)g->scale - j->lse[r]);
    *ds = *p * (dp - j->dsum[r]);
    if (j->gpu_round) *ds = dt_round(j->dt, *ds), *p = dt_round(j->dt, *p);
}

/* dQ of one (token, head) unit. */
static void cpu_attn_dq_item(void *ctx, size_t u)
{
    const struct cpu_attn_job *j = ctx;
    const struct attn_geom *g = j->g;
    size_t t = u / g->hq, h = u % g->hq, d = g->d, hk = h / (g->hq / g->hkv);
    size_t b = attn_seq_of(g->cu_q, g->b, t), nk = attn_visible(g, b, t - g->cu_q[b]), k0 = g->cu_k[b];
    float acc[KG_ATTN_DMAX] = { 0 };
    for (size_t x = 0; x < nk; x++) {
        float p, ds;
        cpu_attn_pds(j, t, h, k0 + x, hk, 1, &p, &ds);
        const float *k = attn_row(j->k, k0 + x, g->hkv, hk, d);
        for (size_t c = 0; c < d; c++) acc[c] += ds * k[c];
    }
    for (size_t c = 0; c < d; c++) dt_store(j->dt, j->dq_out, u * d + c, acc[c] * (float)g->scale);
}

/* dK and dV of one (key token, KV head) unit. */
static void cpu_attn_dkdv_item(void *ctx, size_t u)
{
    const struct cpu_attn_job *j = ctx;
    const struct attn_geom *g = j->g;
    size_t kt = u / g->hkv, hk = u % g->hkv, d = g->d, grp = g->hq / g->hkv;
    size_t b = attn_seq_of(g->cu_k, g->b, kt), jj = kt - g->cu_k[b];
    float ak[KG_ATTN_DMAX] = { 0 }, av[KG_ATTN_DMAX] = { 0 };
    for (size_t h = hk * grp; h < (hk + 1) * grp; h++)
        for (size_t t = g->cu_q[b]; t < g->cu_q[b + 1]; t++) {
            if (attn_visible(g, b, t - g->cu_q[b]) <= jj) continue;
            float p, ds;
            cpu_attn_pds(j, t, h, kt, hk, 0, &p, &ds);
            const float *q = attn_row(j->q, t, g->hq, h, d), *dout = attn_row(j->dout, t, g->hq, h, d);
            for (size_t c = 0; c < d; c++) av[c] += p * dout[c], ak[c] += ds * q[c];
        }
    for (size_t c = 0; c < d; c++) {
        dt_store(j->dt, j->dk_out, u * d + c, ak[c] * (float)g->scale);
        dt_store(j->dt, j->dv_out, u * d + c, av[c]);
    }
}

/* The CPU candidate's forward: O (raw dt storage) and LSE for every query
 * token and head. */
static void cpu_attn_fwd(const struct attn_geom *g, enum dtype dt, const float *q, const float *k,
                         const float *v, size_t tq, void *o, float *lse)
{
    struct cpu_attn_job j = { g, dt, q, k, v, NULL, NULL, NULL, NULL, o, NULL, NULL, NULL, lse, cpu_attn_gpu_round() };
    par_for(tq * g->hq, cpu_attn_fwd_item, &j);
}

/* The CPU candidate's backward, from the forward's O (decoded) and LSE:
 * D = rowsum(O·dO), then dK/dV per key and dQ per query (raw dt storage). */
static void cpu_attn_bwd(const struct attn_geom *g, enum dtype dt, const float *q, const float *k,
                         const float *v, const float *o, const float *dout, const float *lse, size_t tq,
                         size_t tk, void *dq, void *dk, void *dv)
{
    float *dsum = xmalloc(tq * g->hq * sizeof(float));
    struct cpu_attn_job j = { g, dt, q, k, v, o, dout, lse, dsum, NULL, dq, dk, dv, NULL, cpu_attn_gpu_round() };
    par_for(tq * g->hq, cpu_attn_dsum_item, &j);
    par_for(tk * g->hkv, cpu_attn_dkdv_item, &j);
    par_for(tq * g->hq, cpu_attn_dq_item, &j);
    free(dsum);
}
