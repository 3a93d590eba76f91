/* src/case.c — one case: an op with its dtype, layout, shape and options
 * (struct kcase), the row type every op fills (struct op), and the parsers
 * the ops' options share.  Relies on util.c and ref.c (dtypes, formats). */

/* Low precision: how a block of values gets one scale (--scaling), and
 * which fp8 encoding a case uses (--fp8; the device's until it is known). */
enum qscaling { QS_TENSOR, QS_ROW, QS_BLOCK, QS_MX };
static const char *const QSCALING[] = { "tensor", "row", "block", "mx" };
enum fp8_enc { ENC_DEVICE, ENC_OCP, ENC_FNUZ };

/* The distribution of a case's inputs (--inputs), drawn and rounded to the
 * input dtype by run.c's run_input: uniform and scaled normalised to
 * max|x| = 1, normal with the uniform's variance.
 * IN_DEFAULT becomes IN_SCALED for low-precision cases, IN_UNIFORM
 * otherwise (case_finish). */
enum inputs { IN_DEFAULT, IN_UNIFORM, IN_NORMAL, IN_SCALED };
static const char *const INPUTS[] = { "default", "uniform", "normal", "scaled" };

/* One case: an op with its dtype, layout, shape and options. */
struct kcase {
    const struct op *op;
    enum dtype dt;
    char layout[3];               /* gemm: A then B; N = as in C = A·B, T = transposed */
    uint32_t m, n, k;             /* gemm: M x N x K; grouped: N and K (M = the groups' sum) */
    int bwd;
    uint32_t *lens;               /* grouped: G group sizes; attn: B query then B key lengths */
    size_t nlens;                 /* G, or B */
    uint32_t batch, seq_q, seq_k; /* attn, fixed length: --batch B --seq Sq[:Sk] */
    uint32_t hq, hkv, dim;        /* attn: query and KV heads, head dim */
    int causal;
    double scale;                 /* attn: softmax scale; 0 = 1/sqrt(dim) */
    enum qfmt qfmt;               /* low precision: the inputs' element format (Q_NONE: dt in and out) */
    enum fp8_enc enc;             /* low precision: OCP or FNUZ (E4M3/E5M2 become the FNUZ formats) */
    enum qscaling scaling;
    int mx;                       /* low precision: MX blocks of 32 with E8M0 scales */
    enum qrule qrule;             /* MX: QR_MX_SPEC or QR_MX_UP */
    unsigned q_given;             /* Q_GIVEN_* bits: low-precision options that were given */
    enum inputs inputs;           /* --inputs; IN_DEFAULT until case_finish */
    double flops;                 /* the candidate's FLOPs, from the shape (its outputs' launches together) */
    char where[320];              /* "shapes.txt:12" or "command line", for messages */
    char label[160];              /* "gemm bf16 NT 4096x4096x4096 bwd" */
};

struct run;
struct plan;
struct refs;

/* What an op's identities found on one output (the checksum gate's where
 * the references hold no exact sums): sums over every element that the
 * op's algebra fixes, each against its expected value, in units of the
 * spread of its rounding noise. */
struct ident {
    int set;                      /* 0: the op has none for this output */
    double z, off, noise;         /* the worst sum: |residual| / spread, the residual, the spread */
    double limit;                 /* the largest z that passes */
    size_t sums, nonfinite;       /* sums compared; sums left out for a NaN or inf (the nan-inf gate's) */
    char where[160];              /* the worst sum: which identity, and where */
};

/* An op is a row of this table: how to read its options, check a case, make
 * its inputs and outputs, launch the kernels of one output, compute the
 * reference of one output on a check plan, and check its identities. */
struct op {
    const char *name;
    /* Apply option `key` (value `val`, NULL for a flag); return 1 if the value
     * was used, 0 if `key` is a flag, -1 if `key` is not an option of this op.
     * Bad values exit 2 naming c->where. */
    int (*set)(struct kcase *c, const char *key, const char *val);
    /* Check that the case is complete and sane (exit 2 if not); fill c->label. */
    void (*finish)(struct kcase *c);
    /* Make seeded inputs, upload them, allocate outputs (struct run) and the
     * scratch the launches use: a launch may not allocate (--graph captures
     * it). */
    void (*prepare)(struct run *r);
    /* Queue the kernels that compute output `o` and the outputs launched with
     * it (on the CPU device: compute them). */
    void (*launch)(struct run *r, int o);
    /* The double and same-precision references of output `o` on plan `p`. */
    void (*reference)(struct run *r, int o, const struct plan *p, struct refs *f);
    /* Check output `o`'s identities on its values `out` (rows x cols, as the
     * gates see them) into x; NULL: the op has none. */
    void (*identity)(struct run *r, int o, const float *out, struct ident *x);
};

static int case_parse_dtype(const char *s, enum dtype *out)
{
    static const char *const alias[][2] = { { "fp32", "f32" }, { "float32", "f32" },
                                            { "fp16", "f16" }, { "half", "f16" },
                                            { "float16", "f16" }, { "bfloat16", "bf16" } };
    for (size_t i = 0; i < sizeof alias / sizeof *alias; i++)
        if (strcmp(s, alias[i][0]) == 0) s = alias[i][1];
    for (int t = 0; t < DT_COUNT; t++)
        if (strcmp(s, DTYPES[t].name) == 0) { *out = (enum dtype)t; return 0; }
    return -1;
}

/* Parse "AxBxC..." into exactly `n` dimensions, each in [1, MAX_DIM]; on
 * failure exit 2 with a line that says what is wrong. */
static void case_parse_dims(const struct kcase *c, const char *flag, const char *s, int n, uint32_t *dims,
                            const char *form)
{
    char buf[128];
    if (strlen(s) >= sizeof buf) die(EXIT_USAGE, "%s: %s %.40s...: too long", c->where, flag, s);
    snprintf(buf, sizeof buf, "%s", s);
    int got = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, "x", &save); tok; tok = strtok_r(NULL, "x", &save)) {
        uint64_t v;
        if (got == n) die(EXIT_USAGE, "%s: %s %s: expected %s", c->where, flag, shown(s), form);
        if (parse_u64(tok, 0, UINT64_MAX, &v) != 0)
            die(EXIT_USAGE, "%s: %s %s: '%s' is not a whole number (expected %s)", c->where, flag,
                shown(s), shown(tok), form);
        if (v == 0) die(EXIT_USAGE, "%s: %s %s: every dimension must be at least 1", c->where, flag, shown(s));
        if (v > MAX_DIM)
            die(EXIT_USAGE, "%s: %s %s: %" PRIu64 " exceeds the largest dimension kgate takes (%u)",
                c->where, flag, shown(s), v, MAX_DIM);
        dims[got++] = (uint32_t)v;
    }
    size_t len = strlen(s);
    if (got != n || s[0] == 'x' || s[len - 1] == 'x' || strstr(s, "xx"))
        die(EXIT_USAGE, "%s: %s %s: expected %s", c->where, flag, shown(s), form);
}

/* Parse "A" or "A:B" (pairs) into whole numbers in [lo, hi]; *b = *a
 * when no ":B" is given.  Exit 2 naming the flag and the range on anything
 * else. */
static void case_parse_pair(const struct kcase *c, const char *flag, const char *s, int pairs, uint32_t lo,
                            uint32_t hi, uint32_t *a, uint32_t *b)
{
    char buf[64];
    const char *colon = pairs ? strchr(s, ':') : NULL;
    size_t n = colon ? (size_t)(colon - s) : strlen(s);
    uint64_t v, w;
    if (n >= sizeof buf) die(EXIT_USAGE, "%s: %s %.40s...: too long", c->where, flag, s);
    snprintf(buf, sizeof buf, "%.*s", (int)n, s);
    if (parse_u64(buf, lo, hi, &v) != 0 || (colon && parse_u64(colon + 1, lo, hi, &w) != 0))
        die(EXIT_USAGE, "%s: %s %s: expected %s from %u to %u", c->where, flag, shown(s),
            pairs ? "N or N:M, each a whole number" : "a whole number", lo, hi);
    *a = (uint32_t)v, *b = colon ? (uint32_t)w : (uint32_t)v;
}

/* Parse a comma-separated list ("0,4096,1" or, with pairs, "5:7,0,3:1")
 * into c->lens: the first entries of each item, then (pairs) the second
 * entries, c->nlens items, at most MAX_GROUPS. */
static void case_parse_lens(struct kcase *c, const char *flag, const char *s, int pairs)
{
    size_t n = 1;
    for (const char *p = s; *p; p++) n += *p == ',';
    if (n > MAX_GROUPS) die(EXIT_USAGE, "%s: %s: %zu entries, at most %d", c->where, flag, n, MAX_GROUPS);
    if (!*s || s[0] == ',' || s[strlen(s) - 1] == ',' || strstr(s, ",,"))
        die(EXIT_USAGE, "%s: %s %s: expected a comma-separated list of whole numbers", c->where, flag, shown(s));
    free(c->lens);
    c->lens = xmalloc(2 * n * sizeof(uint32_t));
    c->nlens = n;
    const char *p = s;
    for (size_t i = 0; i < n; i++) {
        char item[64];
        size_t len = strcspn(p, ",");
        if (len >= sizeof item) die(EXIT_USAGE, "%s: %s: entry '%.20s...' too long", c->where, flag, p);
        snprintf(item, sizeof item, "%.*s", (int)len, p);
        case_parse_pair(c, flag, item, pairs, 0, MAX_DIM, &c->lens[i], &c->lens[n + i]);
        p += len + 1;
    }
}

/* Exit 2 if case option `key` came without its value (val NULL: the end of
 * the line or of the command). */
static void case_need(const struct kcase *c, const char *key, const char *val)
{
    if (!val) die(EXIT_USAGE, "%s: %s needs a value (see kgate %s --help)", c->where, key, c->op->name);
}

/* --dtype VAL: f16 or bf16, or f32 too when allow_f32; exit 2 otherwise. */
static void case_set_dtype(struct kcase *c, const char *val, int allow_f32)
{
    case_need(c, "--dtype", val);
    if (case_parse_dtype(val, &c->dt) != 0 || (!allow_f32 && c->dt == DT_F32))
        die(EXIT_USAGE, "%s: --dtype %s: unknown dtype for %s (%s)", c->where, shown(val),
            c->op->name, allow_f32 ? "f32, f16, bf16" : "f16, bf16");
}

/* --inputs NAME, the option every op takes: 1 if key is it (the value
 * used), -1 if not; exit 2 on an unknown name. */
static int case_set_inputs(struct kcase *c, const char *key, const char *val)
{
    if (strcmp(key, "--inputs") != 0) return -1;
    case_need(c, key, val);
    for (int i = IN_UNIFORM; val && i <= IN_SCALED; i++)
        if (strcmp(val, INPUTS[i]) == 0) { c->inputs = (enum inputs)i; return 1; }
    die(EXIT_USAGE, "%s: --inputs %s: unknown distribution (uniform, normal, scaled)", c->where, shown(val));
}

/* The op's finish, then the inputs' distribution resolved (low precision:
 * scaled, else uniform, unless --inputs named one) and, when it is not
 * uniform, named at the end of the label. */
static void case_finish(struct kcase *c)
{
    c->op->finish(c);
    if (c->inputs == IN_DEFAULT) c->inputs = c->qfmt != Q_NONE ? IN_SCALED : IN_UNIFORM;
    if (c->inputs != IN_UNIFORM)
        snprintf(c->label + strlen(c->label), sizeof c->label - strlen(c->label), " %s", INPUTS[c->inputs]);
}

static void case_init(struct kcase *c, const struct op *op, const char *where)
{
    memset(c, 0, sizeof *c);
    c->op = op;
    c->dt = DT_BF16;
    c->qfmt = Q_NONE;
    memcpy(c->layout, "NT", 3);
    snprintf(c->where, sizeof c->where, "%s", where);
}

static void case_free(struct kcase *c)
{
    free(c->lens);
    c->lens = NULL;
}
