/* src/run.c — a case while it runs: its outputs and inputs (device buffers
 * between guard bands), the buffers it owns, seeded inputs and their uploads,
 * the hook of a planted fault, and each launch run eagerly or through its
 * graph.  Relies on util.c, ref.c, gpu.c, options.c, compile.c (the arm's
 * graphs) and case.c. */

/* A block of a product output: rows [row0, row0 + rows) of the output are
 * x (rows x inner) · y (inner x cols), canonical row-major floats. */
struct part { size_t row0, rows, inner; const float *x, *y; const struct qprod *q; };

/* How a product output is launched.  X[m][k] is at dx + m*sxm + k*sxk,
 * Y[k][n] at dy + k*syk + n*syn, C[m][n] at buf + m*srow + n*scol; and by
 * groups: ragged rows (group g owns rows [offs[g], offs[g+1]) and reads Y at
 * + g*syg) or ragged inner (group g sums k over [offs[g], offs[g+1]) and
 * writes C at + g*scg). */
enum ragged { RAG_NONE, RAG_ROWS, RAG_INNER };
struct prod_launch {
    enum ragged ragged;
    uint64_t dx, dy, doffs, dtiles;   /* doffs, dtiles: device int arrays (groups) */
    int64_t sxm, sxk, syk, syn, syg, scg;
    size_t m, n, k, groups, tiles;    /* tiles: ragged rows' total row tiles of 64 */
    const uint32_t *offs;             /* host copy of the group offsets */
    uint64_t dpack;                   /* sm_90a: the operands packed for TMA (sm90_pack), made by product_scratch */
    int fp4;                          /* the operands are E2M1 codes, two a byte (strides in bytes): sm90_pack
                                       * unpacks them to E4M3 */
    size_t dpack_bytes;
};

/* One output of a case, as the gates see it: a rows x cols matrix of dtype
 * dt stored in device memory with element strides (srow, scol), between two
 * guard bands. */
struct output {
    const char *name;             /* "C", "dA", "dB", "O", "LSE", "dQ", "dK", "dV" */
    enum dtype dt;
    size_t rows, cols;
    int64_t srow, scol;           /* storage strides, elements */
    size_t elems;                 /* storage size, elements */
    uint64_t buf;                 /* device buffer: the first element */
    size_t guard;                 /* bytes poisoned before and after the storage */
    int launch;                   /* the output whose launch computes this one (itself: the owner) */
    double flops;                 /* of the launch, on its owner */
    double check_macs;            /* multiply-adds of a full reference: full or sampled check */
    unsigned head_dim;            /* > 0: a sampled plan's columns are one whole head of this many */
    int grad;                     /* an attention gradient: tolerances as gate_atol says */
    const uint32_t *seg;          /* row segments (groups, sequences): nseg + 1 offsets, or NULL */
    size_t nseg;
    const char *seg_name;         /* "group", "sequence" */
    struct part *parts;           /* products: the blocks the reference multiplies */
    size_t nparts;
    struct prod_launch pl;        /* products: the launch */
};

#define MAX_OUT 6
#define MAX_OWNED 32
#define IN_NAME 32                /* bytes of an input buffer's name, its NUL included */
#define GUARD_BYTES 4096
/* Inputs sit between two bands of 0xff bytes (NaN in f32, f16, bf16, OCP
 * fp8 and E8M0): a kernel that reads past an input's end or before its
 * start (a missed tail predicate) computes NaN, which the gates see. */
#define IN_GUARD_BYTES 65536

/* Each op's own state while it runs, defined in its file: attention's in
 * attn.c, low precision's (and its quantized operands) in lowprec.c. */
struct attn_case;
struct qrun;
struct qoperand;

/* --- the hook of a planted fault (the faults and their table: inject.c) --- */

/* A planted fault, applied to a candidate's output after it is read back and
 * before the gates: each must be caught by the gate named in its row. */
struct inject_ctx {
    struct run *r;
    int oi;                       /* the output's index */
    const struct output *o;
    const struct plan *plan;      /* its check plan (INJ_VALUES, INJ_RAW) */
    float *out;                   /* rows x cols, decoded */
    unsigned char *raw;           /* the storage with its guard bands, as read back */
    double atol;
    uint64_t key;
    struct qoperand *qop;         /* the quantize stage (INJ_QSTAGE): operand A, */
    uint8_t *qcodes;              /* the kernel's codes and scales as read back */
    unsigned char *qscales;
};

enum inj_stage {
    INJ_QSTAGE,   /* on the quantize-only kernel's codes and scales (low precision) */
    INJ_VALUES,   /* on the decoded values of every check */
    INJ_RAW,      /* on the storage bytes of every check */
    INJ_INGUARD,  /* on the first input's trailing guard band as read back, at every check */
    INJ_INPUT,    /* on the first input's middle byte as read back, at every check */
    INJ_REPEAT,   /* on the storage bytes of the repeated runs (--repeat) only */
    INJ_LAUNCH,   /* in the launch path, before each launch's kernels are queued */
    INJ_GRAPH,    /* on the storage bytes of the graph replay (--graph) only */
    INJ_DIGEST,   /* on a copy of the first run's storage bytes, after the gates: its digest alone (node runs) */
    INJ_TIMED,    /* in the timer: each timed launch runs again (node runs: a slow device) */
    INJ_TIMED_INPUT,   /* in the timer, after each timed launch: on the device, the first input's trailing band */
    INJ_WORKER,   /* in the launch path, before the kernels: the worker dies (a faulting device) */
};

/* A planted fault: a row of INJECTS (inject.c). */
struct inject {
    const char *name, *gate, *what;
    enum inj_stage stage;
    void (*apply)(struct inject_ctx *);
    const char *(*unfit)(const struct kcase *);   /* NULL: any case */
};

/* --- the run --- */

/* An input tensor kept for --dump (dump.c): host values, float32 ('f') or
 * bytes ('u'), up to three dimensions (unused ones 0). */
struct kept { const char *name; const void *data; char type; int ndim; size_t shape[3]; };
#define MAX_KEPT 12

/* Everything one case needs while it runs; run_release frees it. */
struct run {
    const struct kcase *c;
    struct device *d;
    const struct opts *o;
    uint64_t key;                 /* input stream key: seed, case label and lengths */
    int nout;
    struct output out[MAX_OUT];
    void *host[MAX_OWNED];        /* host buffers, owned */
    int nhost;
    uint64_t dev[MAX_OWNED];      /* device buffers, owned */
    int ndev;
    uint64_t in_base[MAX_OWNED];  /* inputs (run_buffer): each buffer's first guard band */
    size_t in_bytes[MAX_OWNED];   /* ... and the bytes between its two bands */
    unsigned char *in_copy[MAX_OWNED];   /* ... and, when kgate uploaded them, those bytes (owned), else NULL */
    char in_name[MAX_OWNED][IN_NAME];  /* ... and each one's name in messages ("A", "group offsets", "scratch Dsum") */
    int nin;
    unsigned long launches;       /* run_exec calls so far */
    struct inputs_check {         /* run_inputs_written: bytes the launches wrote where they must not */
        unsigned long at;         /* ... as of launch at - 1 */
        size_t band, changed;     /* guard-band bytes of inputs and scratch; bytes of the inputs */
        int band_in, changed_in;  /* the first buffer with each (an index of in_name), -1 if none */
        size_t changed_at;        /* ... and the changed one's first byte */
        const char (*names)[IN_NAME];  /* the buffers' names (in_name) */
    } in_check;
    int inputs_nonzero;           /* every input has max|x| > 0 */
    struct attn_case *attn;       /* attn cases: geometry, inputs, statistics */
    struct qrun *q;               /* low-precision cases: operands, scales, the quantize stage */
    struct launch_geom *geom;     /* GPU, per launch owner: the kernels its last launch ran (the current arm's) */
    const struct inject *inj;     /* --inject's fault (src/inject.c), or NULL */
    int inject_off;               /* the arm that runs now is not the one --inject plants a fault in */
    struct kept kept[MAX_KEPT];   /* the inputs as --dump writes them */
    int nkept;
    int eager;                    /* --graph: launch eagerly now (the run the graph's outputs are compared with) */
    uint64_t inj_scratch;         /* --inject graph-alloc: the scratch its launch path allocates */
    int timed_wrote;              /* the timed launches wrote into the inputs (timing_left_inputs): the case fails */
};

static void *run_owned(struct run *r, size_t bytes)
{
    if (r->nhost == MAX_OWNED) die(EXIT_DEVICE, "internal: too many host buffers");
    return r->host[r->nhost++] = xcalloc(1, bytes);
}

static float *run_host(struct run *r, size_t n) { return run_owned(r, n * sizeof(float)); }

static uint64_t run_dev(struct run *r, size_t bytes)
{
    if (r->ndev == MAX_OWNED) die(EXIT_DEVICE, "internal: too many device buffers");
    return r->dev[r->ndev++] = dev_alloc(r->d, bytes);
}

/* Where output o's middle element (row rows/2, column cols/2) lies in its
 * storage as read back with its guard bands, in bytes. */
static size_t output_middle_byte(const struct output *o)
{
    int64_t at = (int64_t)(o->rows / 2) * o->srow + (int64_t)(o->cols / 2) * o->scol;
    return o->guard + (size_t)at * DTYPES[o->dt].bytes;
}

/* A device buffer of `bytes` named `name` (in messages) for an input or a
 * kernel's scratch, between its guard bands (IN_GUARD_BYTES each, filled
 * with 0xff).  With raw (malloc'd; the run owns it now) the buffer is an
 * input: raw is uploaded into it and kept as what it must still hold at
 * every check (run_inputs_written); without, scratch.  Returns its start. */
static uint64_t run_buffer(struct run *r, const char *name, size_t bytes, unsigned char *raw)
{
    if (r->nin == MAX_OWNED) die(EXIT_DEVICE, "internal: too many input buffers");
    uint64_t p = run_dev(r, bytes + 2 * IN_GUARD_BYTES);
    dev_fill(r->d, p, 0xff, IN_GUARD_BYTES);
    dev_fill(r->d, p + IN_GUARD_BYTES + bytes, 0xff, IN_GUARD_BYTES);
    if (raw) dev_upload(r->d, p + IN_GUARD_BYTES, raw, bytes);
    int i = r->nin++;
    r->in_base[i] = p, r->in_bytes[i] = bytes, r->in_copy[i] = raw;
    snprintf(r->in_name[i], sizeof r->in_name[i], "%s", name);
    return p + IN_GUARD_BYTES;
}

/* A kernel's scratch buffer of `bytes`, named "scratch <name>", between
 * guard bands (run_buffer); returns its start. */
static uint64_t run_scratch(struct run *r, const char *name, size_t bytes)
{
    char full[IN_NAME];
    snprintf(full, sizeof full, "scratch %.23s", name);
    return run_buffer(r, full, bytes, NULL);
}

static void run_release(struct run *r)
{
    for (int i = 0; i < r->nhost; i++) free(r->host[i]);
    for (int i = 0; i < r->ndev; i++) dev_free(r->d, r->dev[i]);
    for (int i = 0; i < r->nin; i++) free(r->in_copy[i]);
    r->nhost = r->ndev = r->nin = 0;
}

/* How an input tensor is laid out, for the scaled distribution: rows x
 * cols stored row-major; magnitudes vary per row (2^U(-2s, 2s)), per
 * segment (a row's run of seg columns: 2^U(-s, s)), per block (blk rows of
 * a segment's columns: 2^U(-s, s)), per matrix of a stack (mat rows each,
 * when the tensor holds more than one: 2^U(-s, s)), and, with outliers,
 * one column in OUTLIER_EVERY (seeded) is OUTLIER_GAIN times larger.  GEMM
 * operands: seg = blk = 128 (the 1x128 and 128x128 scale blocks), s = 2,
 * outliers, and mat the rows of one group's B (grouped: each group's
 * per-tensor scale then differs from its neighbour's, as experts' do);
 * attention: seg = the head dim and blk = every row (per token, per token
 * and head, per head), s = 0.5. */
struct in_shape { size_t rows, cols, seg, blk, mat; double s; int outliers; };

#define IN_BLOCK 128         /* the 1x128 and 128x128 blocks of blockwise fp8 scaling */
#define OUTLIER_EVERY 128
#define OUTLIER_GAIN 16.0f   /* LLM.int8(): outlier features up to ~20x the others */

/* A GEMM operand's in_shape: rows x cols. */
static struct in_shape in_gemm(size_t rows, size_t cols)
{
    return (struct in_shape){ rows, cols, IN_BLOCK, IN_BLOCK, 0, 2.0, 1 };
}

/* A stack of `batch` GEMM operands (a grouped B): batch x rows x cols. */
static struct in_shape in_stacked(size_t batch, size_t rows, size_t cols)
{
    struct in_shape sh = in_gemm(batch * rows, cols);
    sh.mat = batch > 1 ? rows : 0;
    return sh;
}

/* The magnitude factor of element (i, j) of the scaled distribution. */
static float in_scaled_factor(const struct in_shape *sh, uint64_t key, size_t i, size_t j)
{
    size_t nseg = (sh->cols + sh->seg - 1) / sh->seg, sg = j / sh->seg;
    double e = 2 * sh->s * rng_sym(mix64(key ^ 1), i) + sh->s * rng_sym(mix64(key ^ 2), i * nseg + sg) +
               sh->s * rng_sym(mix64(key ^ 3), i / sh->blk * nseg + sg) +
               (sh->mat ? sh->s * rng_sym(mix64(key ^ 5), i / sh->mat) : 0.0);
    float f = exp2f((float)e);
    if (sh->outliers && rng_at(mix64(key ^ 4), j) % OUTLIER_EVERY == 0) f *= OUTLIER_GAIN;
    return f;
}

/* Value i of N(0, 1) in stream key (Box-Muller on two 53-bit uniforms). */
static double rng_normal(uint64_t key, uint64_t i)
{
    double u1 = ((double)(rng_at(key, 2 * i) >> 11) + 0.5) * 0x1p-53;
    double u2 = (double)(rng_at(key, 2 * i + 1) >> 11) * 0x1p-53;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* run_input's work on all CPUs (par_for): values in chunks of RUN_CHUNK,
 * each chunk's largest magnitude, then the rounding of every chunk. */
#define RUN_CHUNK 65536

/* The end of chunk c of n elements (RUN_CHUNK each, the last short). */
static size_t run_chunk_end(size_t c, size_t n) { return (c + 1) * RUN_CHUNK < n ? (c + 1) * RUN_CHUNK : n; }
struct input_job {
    float *v;
    size_t n;
    uint64_t key;
    enum inputs dist;
    const struct in_shape *sh;
    enum dtype t;
    float *chunk_max;             /* one per chunk */
    float mx;                     /* the divisor of the rounding pass */
};

static void input_draw_item(void *ctx, size_t c)
{
    struct input_job *j = ctx;
    size_t i1 = run_chunk_end(c, j->n);
    float mx = 0;
    for (size_t i = c * RUN_CHUNK; i < i1; i++) {
        float v = j->dist == IN_NORMAL ? (float)rng_normal(j->key, i) : rng_sym(j->key, i);
        if (j->dist == IN_SCALED)
            v *= in_scaled_factor(j->sh, mix64(j->key ^ 0x7363616c), i / j->sh->cols, i % j->sh->cols);
        j->v[i] = v;
        mx = fabsf(v) > mx ? fabsf(v) : mx;
    }
    j->chunk_max[c] = mx;
}

static void input_round_item(void *ctx, size_t c)
{
    struct input_job *j = ctx;
    size_t i1 = run_chunk_end(c, j->n);
    for (size_t i = c * RUN_CHUNK; i < i1; i++) j->v[i] = dt_round(j->t, j->v[i] / j->mx);
}

/* A seeded input tensor (stream `id` of the run's key) laid out as sh, drawn
 * from the case's distribution, rounded to dtype t: uniform in [-1, 1),
 * normalised to max|x| = 1; normal, N(0, 1/3) (the uniform's variance: the
 * same expected |a|·|b| per product term, so the same tolerances; no
 * normalisation: its tails reach ~5 sigma); scaled, uniform times
 * in_scaled_factor, normalised to max|x| = 1. */
static float *run_input(struct run *r, int id, struct in_shape sh, enum dtype t)
{
    size_t n = sh.rows * sh.cols, chunks = (n + RUN_CHUNK - 1) / RUN_CHUNK;
    struct input_job j = { run_host(r, n), n, mix64(r->key ^ (uint64_t)id), r->c->inputs, &sh, t,
                           xcalloc(chunks + 1, sizeof(float)), 0 };
    par_for(chunks, input_draw_item, &j);
    for (size_t c = 0; c < chunks; c++) j.mx = j.chunk_max[c] > j.mx ? j.chunk_max[c] : j.mx;
    free(j.chunk_max);
    if (j.dist == IN_NORMAL) j.mx = j.mx > 0 ? 1.7320508f : 0;   /* sqrt(3): N(0, 1) to N(0, 1/3) */
    if (j.mx > 0) par_for(chunks, input_round_item, &j);
    else if (n > 0) r->inputs_nonzero = 0;
    return j.v;
}

/* Keep input `name` for --dump: data (float32 values, type 'f', or bytes,
 * 'u') of shape d0 x d1 (x d2 when ndim is 3), as stored. */
static void run_keep(struct run *r, const char *name, const void *data, char type, int ndim, size_t d0, size_t d1,
                     size_t d2)
{
    if (r->nkept == MAX_KEPT) die(EXIT_DEVICE, "internal: too many kept inputs");
    r->kept[r->nkept++] = (struct kept){ name, data, type, ndim, { d0, d1, d2 } };
}

/* run_upload's conversion on all CPUs: chunk c of v stored as dtype t. */
struct store_job { const float *v; size_t n; enum dtype t; void *raw; };

static void store_item(void *ctx, size_t c)
{
    const struct store_job *j = ctx;
    size_t i1 = run_chunk_end(c, j->n);
    for (size_t i = c * RUN_CHUNK; i < i1; i++) dt_store(j->t, j->raw, i, j->v[i]);
}

/* Upload float values (exactly representable in t) as dtype t, input
 * `name`; returns the device buffer (between guard bands: run_buffer). */
static uint64_t run_upload(struct run *r, const char *name, const float *v, size_t n, enum dtype t)
{
    size_t bytes = n * DTYPES[t].bytes;
    struct store_job j = { v, n, t, xmalloc(bytes + 1) };
    par_for((n + RUN_CHUNK - 1) / RUN_CHUNK, store_item, &j);
    return run_buffer(r, name, bytes, j.raw);
}

/* Upload n whole numbers as a device int array, input `name` (between
 * guard bands: run_buffer; a read past its end gives -1). */
static uint64_t run_upload_ints(struct run *r, const char *name, const uint32_t *v, size_t n)
{
    int32_t *tmp = xmalloc(n * sizeof *tmp + 1);
    for (size_t i = 0; i < n; i++) tmp[i] = (int32_t)v[i];
    return run_buffer(r, name, n * sizeof *tmp, (unsigned char *)tmp);
}

/* Upload n raw bytes (fp8 and MX codes, scales), input `name`; returns the
 * device buffer (between guard bands: run_buffer). */
static uint64_t run_upload_bytes(struct run *r, const char *name, const void *v, size_t n)
{
    unsigned char *raw = xmalloc(n + 1);
    memcpy(raw, v, n);
    return run_buffer(r, name, n, raw);
}

/* The transposes' work on all CPUs (par_for): item i is row block
 * i % nrb (RUN_TILE rows) of matrix i / nrb, written to its RUN_TILE-wide
 * column block of the result, tile by tile so that reads and writes both
 * stay in cache. */
#define RUN_TILE 64
struct transpose_job { const float *in; float *out; size_t rows, cols, nrb; };

static void transpose_item(void *ctx, size_t i)
{
    const struct transpose_job *j = ctx;
    size_t off = i / j->nrb * j->rows * j->cols, r0 = i % j->nrb * RUN_TILE;
    size_t r1 = r0 + RUN_TILE < j->rows ? r0 + RUN_TILE : j->rows;
    for (size_t c0 = 0; c0 < j->cols; c0 += RUN_TILE) {
        size_t c1 = c0 + RUN_TILE < j->cols ? c0 + RUN_TILE : j->cols;
        for (size_t r = r0; r < r1; r++)
            for (size_t c = c0; c < c1; c++) j->out[off + c * j->rows + r] = j->in[off + r * j->cols + c];
    }
}

/* Each of n consecutive rows x cols matrices transposed in place of its
 * block: out[b][c][r] = in[b][r][c]. */
static float *run_transpose_blocks(struct run *r, const float *in, size_t n, size_t rows, size_t cols)
{
    struct transpose_job j = { in, run_host(r, n * rows * cols), rows, cols, (rows + RUN_TILE - 1) / RUN_TILE };
    par_for(n * j.nrb, transpose_item, &j);
    return j.out;
}

/* out[c][r] = in[r][c] for an rows x cols matrix. */
static float *run_transpose(struct run *r, const float *in, size_t rows, size_t cols)
{
    return run_transpose_blocks(r, in, 1, rows, cols);
}

/* run_transpose_groups' work on all CPUs: group g a work item, tiled as
 * transpose_item. */
struct transpose_groups_job { const float *in; float *out; const uint32_t *offs; size_t width; };

static void transpose_group_item(void *ctx, size_t g)
{
    const struct transpose_groups_job *j = ctx;
    struct transpose_job t = { j->in + (size_t)j->offs[g] * j->width, j->out + (size_t)j->offs[g] * j->width,
                               j->offs[g + 1] - j->offs[g], j->width, 0 };
    t.nrb = (t.rows + RUN_TILE - 1) / RUN_TILE;
    for (size_t i = 0; i < t.nrb; i++) transpose_item(&t, i);
}

/* Per group g, the rows [offs[g], offs[g+1]) of in (width columns)
 * transposed, stored as a width x M_g block at offs[g] * width. */
static float *run_transpose_groups(struct run *r, const float *in, const uint32_t *offs, size_t g, size_t width)
{
    struct transpose_groups_job j = { in, run_host(r, offs[g] * width), offs, width };
    par_for(g, transpose_group_item, &j);
    return j.out;
}

/* run_decode's work on all CPUs: row i of the matrix. */
struct decode_job { enum dtype t; const void *raw; size_t cols; int64_t rs, cs; float *v; };

static void decode_item(void *ctx, size_t i)
{
    const struct decode_job *j = ctx;
    for (size_t c = 0; c < j->cols; c++)
        j->v[i * j->cols + c] = dt_load(j->t, j->raw, (size_t)((int64_t)i * j->rs + (int64_t)c * j->cs));
}

/* A rows x cols matrix read through strides from raw storage of dtype t, as
 * row-major floats (caller frees). */
static float *run_decode(enum dtype t, const void *raw, size_t rows, size_t cols, int64_t rs,
                         int64_t cs)
{
    struct decode_job j = { t, raw, cols, rs, cs, xmalloc(rows * cols * sizeof(float) + 1) };
    par_for(rows, decode_item, &j);
    return j.v;
}

/* A new output of the run: rows x cols of dtype t with strides (srow,
 * scol), its device storage between two guard bands; it owns its launch. */
static struct output *run_output(struct run *r, const char *name, enum dtype t, size_t rows, size_t cols,
                                 int64_t srow, int64_t scol)
{
    if (r->nout == MAX_OUT) die(EXIT_DEVICE, "internal: too many outputs");
    struct output *o = &r->out[r->nout];
    memset(o, 0, sizeof *o);
    o->name = name, o->dt = t, o->rows = rows, o->cols = cols, o->srow = srow, o->scol = scol;
    o->elems = rows * cols, o->guard = GUARD_BYTES, o->launch = r->nout++;
    o->buf = run_dev(r, o->elems * DTYPES[t].bytes + 2 * o->guard) + o->guard;
    return o;
}

/* Output o's storage with its guard bands, as the device holds it (caller
 * frees). */
static unsigned char *run_output_raw(struct run *r, int o)
{
    const struct output *p = &r->out[o];
    size_t bytes = p->elems * DTYPES[p->dt].bytes + 2 * p->guard;
    unsigned char *raw = xmalloc(bytes);
    dev_download(r->d, raw, p->buf - p->guard, bytes);
    return raw;
}

/* Fill every output that launch o computes, guard bands included, with the
 * poison bytes 0xff (queued on the device's stream). */
static void run_poison(struct run *r, int o)
{
    for (int k = 0; k < r->nout; k++) {
        const struct output *p = &r->out[k];
        if (p->launch == o) dev_fill(r->d, p->buf - p->guard, 0xff, p->elems * DTYPES[p->dt].bytes + 2 * p->guard);
    }
}

/* Tests of the worker and the watchdog: $KGATE_TEST_CPU_FAULT is
 * "KIND=TEXT[;KIND=TEXT...]"; the CPU candidate of a case whose label
 * contains TEXT then dies of SIGSEGV (segv), fails as a device would (error:
 * exit 5 with a message), or never ends (spin). */
static void run_test_fault(const struct run *r)
{
    const char *spec = getenv("KGATE_TEST_CPU_FAULT");
    char item[200];
    for (const char *p = spec; p && *p; p += strcspn(p, ";"), p += *p == ';') {
        snprintf(item, sizeof item, "%.*s", (int)strcspn(p, ";"), p);
        char *text = strchr(item, '=');
        if (!text || !strstr(r->c->label, text + 1)) continue;
        *text = 0;
        if (strcmp(item, "segv") == 0) raise(SIGSEGV);
        if (strcmp(item, "error") == 0) die(EXIT_DEVICE, "running the kernel failed: KGATE_TEST_CPU_FAULT error (a test)");
        if (strcmp(item, "spin") == 0) for (;;) pause();
    }
}

/* The --inject fault if it is planted at `stage`, else NULL. */
static const struct inject *run_inject(const struct run *r, enum inj_stage stage)
{
    const struct inject *inj = r->inject_off ? NULL : r->inj;
    return inj && inj->stage == stage ? inj : NULL;
}

/* Bytes of input i's two guard bands (run_buffer) that no longer hold
 * 0xff: a kernel that wrote past its end or before its start; the bands
 * are poisoned again, so that later launches are judged on their own.  A
 * fault planted at INJ_INGUARD is applied to the first input's trailing
 * band as read. */
static size_t run_input_band_written(struct run *r, int i)
{
    unsigned char *band = xmalloc(IN_GUARD_BYTES);
    const struct inject *inj = run_inject(r, INJ_INGUARD);
    size_t n = 0;
    for (int side = 0; side < 2; side++) {
        uint64_t at = r->in_base[i] + (side ? IN_GUARD_BYTES + r->in_bytes[i] : 0);
        size_t was = n;
        dev_download(r->d, band, at, IN_GUARD_BYTES);
        if (inj && i == 0 && side == 1) {
            struct inject_ctx ix = { .r = r, .raw = band };
            inj->apply(&ix);
        }
        for (size_t k = 0; k < IN_GUARD_BYTES; k++) n += band[k] != 0xff;
        if (n > was) dev_fill(r->d, at, 0xff, IN_GUARD_BYTES);
    }
    free(band);
    return n;
}

/* Bytes of input i that differ from what kgate uploaded (0 for a buffer it
 * did not upload: a kernel's scratch), the first one's offset in *first;
 * the input is uploaded again, so that later launches read what they
 * should.  A fault planted at INJ_INPUT is applied to the input as read. */
static size_t run_input_changed(struct run *r, int i, size_t *first)
{
    if (!r->in_copy[i]) return 0;
    size_t n = r->in_bytes[i], changed = 0;
    unsigned char *now = xmalloc(n + 1);
    dev_download(r->d, now, r->in_base[i] + IN_GUARD_BYTES, n);
    const struct inject *inj = run_inject(r, INJ_INPUT);
    if (inj && i == 0 && n) {
        struct inject_ctx ix = { .r = r, .raw = now + n / 2 };
        inj->apply(&ix);
    }
    if (memcmp(now, r->in_copy[i], n) != 0)
        for (size_t k = n; k-- > 0;)
            if (now[k] != r->in_copy[i][k]) changed++, *first = k;
    if (changed) dev_upload(r->d, r->in_base[i] + IN_GUARD_BYTES, r->in_copy[i], n), dev_sync(r->d);
    free(now);
    return changed;
}

/* What the launches since the run began did to the inputs: guard-band
 * bytes written and bytes changed (the in-bounds gate counts both); read
 * from the device once per launch count, so the outputs of one check share
 * it. */
static const struct inputs_check *run_inputs_written(struct run *r)
{
    struct inputs_check *c = &r->in_check;
    if (c->at == r->launches + 1) return c;
    memset(c, 0, sizeof *c);
    c->at = r->launches + 1, c->band_in = c->changed_in = -1, c->names = (const char (*)[IN_NAME])r->in_name;
    for (int i = 0; i < r->nin; i++) {
        size_t first = 0, n = run_input_changed(r, i, &first), b = run_input_band_written(r, i);
        if (n && c->changed_in < 0) c->changed_in = i, c->changed_at = first;
        if (b && c->band_in < 0) c->band_in = i;
        c->changed += n, c->band += b;
    }
    return c;
}

/* Whether launches run on the graph path now: --graph on a GPU, outside the
 * eager run the graph's outputs are compared with. */
static int run_graph_path(const struct run *r) { return r->o->graph && r->d->kind == DEV_GPU && !r->eager; }

_Static_assert(MAX_OUT + 2 <= GRAPH_SLOTS, "a graph slot per launch owner and per quantized operand");

/* Run launch `slot` of the case (an owner's index; MAX_OUT + i: the quantize
 * stage of operand i) on the current arm: fn(r, arg) queues it, after the
 * launch-path fault (--inject, INJ_LAUNCH) if one is planted.  On the graph
 * path the first call captures that into the arm's graph of the slot, and
 * every call replays it; a graph the capture refused runs nothing (its
 * outputs stay poisoned, and the graph gate names why). */
static void run_exec(struct run *r, int slot, void (*fn)(struct run *, int), int arg)
{
    struct device *d = r->d;
    const struct inject *inj = run_inject(r, INJ_LAUNCH);
    struct inject_ctx ix = { .r = r, .oi = arg };
    r->launches++;
    if (!run_graph_path(r)) {
        if (inj) inj->apply(&ix);
        fn(r, arg);
        return;
    }
    struct graph_slot *g = &d->arm->graphs[slot];
    if (!g->tried) {
        int atomics = d->launched_atomics;
        g->tried = 1;
        d->launched_atomics = 0;
        graph_begin(d);
        if (inj) inj->apply(&ix);
        fn(r, arg);
        graph_end(d, g);
        g->atomics = d->launched_atomics;
        d->launched_atomics = atomics;
    }
    d->launched_atomics |= g->atomics;
    if (g->exec) graph_replay(d, g);
}

/* Why the current arm's graphs of this case were refused (the first slot
 * refused), or NULL. */
static const char *run_graph_refused(const struct run *r)
{
    for (int i = 0; i < GRAPH_SLOTS; i++)
        if (r->d->arm->graphs[i].why[0]) return r->d->arm->graphs[i].why;
    return NULL;
}

/* Launch o (an owner) through run_exec, with gpu_launch noting each kernel
 * it runs in r->geom[o] (replacing the previous launch's notes; a graph's
 * replay keeps its capture's); the CPU notes none, and runs the candidate
 * now, under the watchdog. */
static void run_launch(struct run *r, int o)
{
    if (!run_graph_path(r) || !r->d->arm->graphs[o].tried) r->geom[o].n = 0, r->d->geom = &r->geom[o];
    if (r->d->kind == DEV_CPU) watch_launch(), run_test_fault(r);   /* the CPU candidate runs now, inside launch */
    const struct inject *inj = run_inject(r, INJ_WORKER);
    struct inject_ctx ix = { .r = r, .oi = o };
    if (inj) inj->apply(&ix);   /* --inject fault: the worker dies here, as a kernel's fault kills it */
    run_exec(r, o, r->c->op->launch, o);
    r->d->geom = NULL;
}
