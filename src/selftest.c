/* src/selftest.c — `kgate selftest`: number formats, the quantizer, the
 * references and sampling against closed forms on the host, then every gate
 * against clean cases and every planted fault, through the case pipeline that
 * kgate.c hands it.  Relies on every part before it. */

/* The case pipeline selftest drives (kgate.c's run_case): case c on d's
 * current arm with options o; 1 if every gate passed, the failed gates'
 * bits in *failed. */
typedef int (*case_pipeline)(const struct kcase *c, struct device *d, const struct opts *o, int idx, int total,
                             struct tally *tl, unsigned *failed);

struct selftest { int passed, failed; case_pipeline run; };

static void st_report(struct selftest *st, int ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("  %-4s ", ok ? "ok" : "FAIL");
    vprintf(fmt, ap);
    putchar('\n');
    va_end(ap);
    ok ? st->passed++ : st->failed++;
}

/* Block scaling by ref.c's quantizer on closed forms: an fp8 block's scale
 * is fmax/amax (stored as its reciprocal); the MX rules differ on a block
 * whose amax is above the element max times 2^floor(log2 amax) - emax; a
 * NaN anywhere makes its block's scale NaN (fmaxf would skip it). */
static void st_quantizer(struct selftest *st)
{
    float x[8] = { 0.5f, -1.0f, 0.25f, 0.0f, 0.98828125f, 0.1f, NAN, 0.3f };
    uint8_t q[8] = { 0 }, e8[2] = { 0 };
    float s[2] = { 0 };
    struct qgrid g = { 1, 2, 4, 1, 4 };    /* two rows, one scale each */
    q_quantize(x, &g, Q_E4M3, QR_AMAX, q, s, e8);
    int ok = s[0] == 1.0f / 448.0f && q[1] == 0xfe && q[0] == 0x76 && isnan(s[1]) && q[7] == 0x7f;
    st_report(st, ok, "fp8 rowwise: scale 448/amax, -amax -> 0xfe (-448), 0.5 -> 0x76 (224); a NaN makes its "
              "row's scale and codes NaN");
    q_quantize(x, &g, Q_E4M3, QR_MX_SPEC, q, s, e8);
    int spec = e8[0] == 127 - 8 && q[1] == 0xf8 && e8[1] == 0xff;   /* -1 * 2^8 = -256 */
    float y[4] = { 0.9f, 0.1f, 0.2f, 0.3f };
    struct qgrid h = { 1, 1, 4, 1, 4 };
    q_quantize(y, &h, Q_E2M1, QR_MX_SPEC, q, s, e8);
    spec &= e8[0] == 127 - 3 && (q[0] & 0xf) == 0x7;                /* 0.9 * 2^3 = 7.2 saturates to 6 */
    q_quantize(y, &h, Q_E2M1, QR_MX_UP, q, s, e8);
    spec &= e8[0] == 127 - 2 && (q[0] & 0xf) == 0x6;                /* up: 2^-2, 0.9 * 4 = 3.6 -> 4 */
    st_report(st, spec, "MX scales: the spec rule 2^(floor(log2 amax) - emax) clips FP4 0.9 to 6 x 2^-3, the "
              "round-up rule does not; a NaN block gets E8M0 0xFF");
}

/* Every fp16 and bf16 code decodes and re-encodes to itself (NaN to a NaN),
 * and the rounding boundaries land where IEEE round-to-nearest-even says. */
static void st_formats(struct selftest *st)
{
    int bad16 = 0, badbf = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = f32_from_f16((uint16_t)h);
        uint16_t back = f16_from_f32(f);
        bad16 += isnan(f) ? !((back & 0x7c00) == 0x7c00 && (back & 0x3ff)) : back != h;
        float g = f32_from_bf16((uint16_t)h);
        uint16_t bb = bf16_from_f32(g);
        badbf += isnan(g) ? !((bb & 0x7f80) == 0x7f80 && (bb & 0x7f)) : bb != h;
    }
    st_report(st, bad16 == 0, "fp16: all 65536 codes decode and re-encode to themselves (%d wrong)", bad16);
    st_report(st, badbf == 0, "bf16: all 65536 codes decode and re-encode to themselves (%d wrong)", badbf);
    static const struct { float in; uint16_t f16, bf16; } cases[] = {
        { 1.0f + 0x1p-11f, 0x3c00, 0x3f80 },       /* f16 tie -> even (1.0) */
        { 1.0f + 3 * 0x1p-11f, 0x3c02, 0x3f80 },   /* f16 tie -> even (up) */
        { 1.0f + 0x1p-8f, 0x3c04, 0x3f80 },        /* bf16 tie -> even (1.0) */
        { 1.0f + 3 * 0x1p-8f, 0x3c0c, 0x3f82 },    /* bf16 tie -> even (up) */
        { 65504.0f, 0x7bff, 0x4780 },              /* f16 max */
        { 65519.0f, 0x7bff, 0x4780 },              /* below the f16 overflow tie */
        { 65520.0f, 0x7c00, 0x4780 },              /* f16 overflow tie -> inf */
        { 0x1p-24f, 0x0001, 0x3380 },              /* smallest f16 subnormal */
        { 0x1p-25f, 0x0000, 0x3300 },              /* tie -> even (zero) */
        { 1.5f * 0x1p-24f, 0x0002, 0x33c0 },       /* tie -> even (2 x 2^-24) */
        { -0.0f, 0x8000, 0x8000 },
        { 3.0e38f, 0x7c00, 0x7f62 },               /* bf16 keeps it, f16 overflows */
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        if (f16_from_f32(cases[i].in) != cases[i].f16 || bf16_from_f32(cases[i].in) != cases[i].bf16) {
            printf("       %a: f16 %04x (want %04x) bf16 %04x (want %04x)\n", cases[i].in,
                   f16_from_f32(cases[i].in), cases[i].f16, bf16_from_f32(cases[i].in), cases[i].bf16);
            bad++;
        }
    }
    st_report(st, bad == 0, "fp16/bf16 rounding boundaries: %zu cases (%d wrong)",
              sizeof cases / sizeof *cases, bad);
}

/* The references against closed forms: integer inputs in [-4, 4] make every
 * product and partial sum exact in fp32 and double, so all three accumulation
 * kinds must equal the int64 result bit for bit, on all elements and on a
 * row/column selection; all-ones inputs give K everywhere. */
static void st_references(struct selftest *st)
{
    enum { R = 37, K = 29, C = 45 };
    static float x[R * K], y[K * C];
    static double ref[R * C];
    static float f32[R * C];
    int64_t exact[R * C];
    for (int i = 0; i < R * K; i++) x[i] = (float)((int)(rng_at(11, (uint64_t)i) % 9) - 4);
    for (int i = 0; i < K * C; i++) y[i] = (float)((int)(rng_at(12, (uint64_t)i) % 9) - 4);
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) {
            int64_t s = 0;
            for (int k = 0; k < K; k++) s += (int64_t)x[i * K + k] * (int64_t)y[k * C + j];
            exact[i * C + j] = s;
        }
    int bad = 0;
    mm_select(ACC_F64, x, y, K, C, NULL, R, NULL, C, ref);
    for (int i = 0; i < R * C; i++) bad += ref[i] != (double)exact[i];
    for (int kind = ACC_F32_SEQ; kind <= ACC_F32_TILED; kind++) {
        mm_select((enum acc_kind)kind, x, y, K, C, NULL, R, NULL, C, f32);
        for (int i = 0; i < R * C; i++) bad += f32[i] != (float)exact[i];
    }
    uint32_t rows[] = { 0, 17, 36 }, cols[] = { 3, 44 };
    double sel[3 * 2];
    mm_select(ACC_F64, x, y, K, C, rows, 3, cols, 2, sel);
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 2; b++) bad += sel[a * 2 + b] != (double)exact[rows[a] * C + cols[b]];
    st_report(st, bad == 0, "references: integer %dx%dx%d product exact in double, fp32 "
              "sequential, fp32 tiled and a row/column selection (%d wrong)", R, C, K, bad);

    enum { KO = 1000 };
    float *ones = xmalloc(KO * 8 * sizeof(float)), *o32 = xmalloc(64 * sizeof(float));
    for (int i = 0; i < KO * 8; i++) ones[i] = 1.0f;
    double o64[64];
    mm_select(ACC_F64, ones, ones, KO, 8, NULL, 8, NULL, 8, o64);
    mm_select(ACC_F32_TILED, ones, ones, KO, 8, NULL, 8, NULL, 8, o32);
    bad = 0;
    for (int i = 0; i < 64; i++) bad += o64[i] != KO || o32[i] != KO;
    st_report(st, bad == 0, "references: all-ones 8x8x%d gives %d everywhere (%d wrong)", KO, KO, bad);
    free(ones);
    free(o32);
}

/* Whether plan p checks, on some row of rows [r0, r0 + 16), some column of
 * [c0, c0 + 8) (a sampled row checks them all). */
static int st_window_seen(const struct plan *p, size_t r0, size_t c0)
{
    for (size_t i = r0; i < r0 + 16; i++)
        for (size_t j = c0; j < c0 + 8; j++)
            if (p->row_in[i] || plan_col_checked(p, i, j)) return 1;
    return 0;
}

/* The column groups of a sampled product whose segments (groups) start at
 * rows that are not multiples of 16 or 64: every 16 rows from a segment's
 * first row (within a run of 64) check a column in every 8 consecutive
 * interior columns of every full tile column. */
static void st_sampling_windows(struct selftest *st)
{
    static const uint32_t seg[] = { 0, 300, 1013, 1500 };
    struct output o = { .rows = 1500, .cols = 1536, .check_macs = 1e12, .seg = seg, .nseg = 3 };
    size_t windows = 0, missed = 0;
    for (uint64_t key = 1; key <= 4; key++) {
        struct plan p;
        plan_build(&p, &o, 0, key);
        for (size_t k = 0; k < o.nseg; k++)
            for (size_t r0 = seg[k]; r0 + 16 <= seg[k + 1]; r0 += 16)
                for (size_t t0 = 0; t0 + KG_TILE <= o.cols; t0 += KG_TILE)
                    for (size_t c0 = t0 + 1; c0 + 8 <= t0 + KG_TILE - 1; c0++, windows++)
                        missed += !st_window_seen(&p, r0, c0);
        plan_free(&p);
    }
    st_report(st, missed == 0 && windows > 0,
              "sampling: 16 rows from a group's start x 8 interior columns, %zu windows on 4 keys, %zu unchecked",
              windows, missed);
}

/* The tile-covering sample of a 1000 x 777 x 10^4 output checks every row,
 * every column and every tile. */
static void st_sampling(struct selftest *st)
{
    struct output o = { .rows = 1000, .cols = 777, .check_macs = 1000.0 * 777 * 10000 };
    struct plan p;
    plan_build(&p, &o, 0, 99);
    size_t tr = (o.rows + KG_TILE - 1) / KG_TILE, tc = (o.cols + KG_TILE - 1) / KG_TILE;
    unsigned char *tile = xcalloc(tr * tc, 1), *col = xcalloc(o.cols, 1);
    for (size_t r = 0; r < p.nr; r++)
        for (size_t j = 0; j < o.cols; j++) tile[p.rows[r] / KG_TILE * tc + j / KG_TILE] = col[j] = 1;
    size_t missing = 0;
    for (size_t i = 0; i < o.rows; i++)
        for (size_t c = 0; c < p.nc; c++) tile[i / KG_TILE * tc + plan_cols(&p, i)[c] / KG_TILE] = 1;
    for (size_t k = 0; k < tr * tc; k++) missing += !tile[k];
    for (size_t j = 0; j < o.cols; j++) missing += !col[j];
    st_report(st, !p.full && missing == 0 && p.nc > 0,
              "sampling: 1000x777 sampled plan (%zu rows, %zu cols) covers every tile, row and "
              "column (%zu missing)", p.nr, p.nc, missing);
    free(tile);
    free(col);
    plan_free(&p);
}

static void st_sha256(struct selftest *st)
{
    struct sha256 h;
    char hex[65];
    sha256_init(&h);
    sha256_update(&h, "abc", 3);
    sha256_hex(&h, hex);
    st_report(st, strcmp(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad") == 0,
              "sha256(\"abc\") matches FIPS 180-4");
}

/* The sm_90a fp8 tile choice (lowprec.c, q_sm90_narrow) on an arm of
 * 128 x 256 tiles with the 192-column entries and 132 SMs, as the H200:
 * rounds of the SMs times the tile's columns decide, blockwise by 6% at
 * least. */
static void st_fp8_tiles(struct selftest *st)
{
    struct arm a;
    memset(&a, 0, sizeof a);
    a.sm90_tile_m = 128, a.sm90_tile_n = 256, a.sm90_cluster = 1, a.sm90_q192_smem = 1;
    static const uint32_t offs[9] = { 0, 2048, 4096, 6144, 8192, 10240, 12288, 14336, 16384 };
    struct prod_launch L;
    memset(&L, 0, sizeof L);
    int got = 0, want = 0;
    static const struct { size_t m, n, k; int narrow, blk; } cs[] = {
        { 8192, 8192, 8192, 1, 0 },   /* 2752 tiles, 21 rounds x 192 = 4032 < 16 x 256 = 4096 (blockwise: < 6% fewer) */
        { 4096, 4096, 4096, 0, 0 },   /* 6 x 192 = 1152 > 4 x 256 = 1024 */
        { 2048, 2048, 2048, 0, 0 },   /* 2 x 192 > 1 x 256 */
        { 1024, 4096, 4096, 0, 0 },   /* 176 tiles of 192: 2 rounds; 128 of 256: 1 */
        { 1000, 1000, 1000, 1, 1 },   /* one round either way: the shorter tile */
        { 1, 4096, 4096, 1, 1 },
        { 2000, 3000, 1024, 1, 1 },   /* 2 rounds either way */
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        L.ragged = RAG_NONE, L.m = cs[i].m, L.n = cs[i].n, L.k = cs[i].k;
        got |= q_sm90_narrow(&a, &L, 132, 1) << i, want |= cs[i].narrow << i;
        got |= q_sm90_narrow(&a, &L, 132, 2) << (i + 16), want |= cs[i].blk << (i + 16);
    }
    L.ragged = RAG_ROWS, L.groups = 8, L.offs = offs, L.m = 16384, L.n = 4096, L.k = 4096;
    int grouped = q_sm90_narrow(&a, &L, 132, 1) | q_sm90_narrow(&a, &L, 132, 2);   /* 22 rounds x 192 > 16 x 256 */
    st_report(st, got == want && !grouped, "fp8 tiles on 132 SMs: 192 columns for 8192^3 (per tensor, not blockwise), "
              "1000^3, 1x4096x4096 and 2000x3000x1024, 256 for 4096^3, 2048^3, 1024x4096x4096 and grouped 8 x 2048 "
              "at 4096x4096 (rounds x columns; blockwise's 192 by 6%% fewer)");
}

/* Run one selftest case ("op options...") with fault `inj` (or none) and
 * `repeat` runs; returns 1 if it passed and sets *failed to the gates that
 * failed; -1 (and a "skip" line) if the device lacks the case's format. */
static int st_run(case_pipeline run, struct device *d, const struct opts *base, const char *args, const struct inject *inj,
                  int repeat, struct kcase *c, unsigned *failed)
{
    char text[160], *argv[24];
    snprintf(text, sizeof text, "%s", args);
    int argc = 0;
    for (char *save = NULL, *t = strtok_r(text, " ", &save); t && argc < 24; t = strtok_r(NULL, " ", &save))
        argv[argc++] = t;
    case_init(c, ops_find(argv[0]), "selftest");
    ops_parse_case(c, NULL, argc, argv, 1, 0);
    q_resolve(c, d);
    const char *skip = q_unsupported(d, c);
    if (skip) {
        printf("  skip %s: %s\n", c->label, skip);
        case_free(c);
        return -1;
    }
    struct opts o = *base;
    o.quiet = 1, o.inject = inj ? inj->name : NULL, o.repeat = repeat;
    struct tally tl = { 0 };
    *failed = 0;
    int pass = run(c, d, &o, 0, 0, &tl, failed);
    case_free(c);
    return pass;
}

/* The selftest's case for a fault: a gemm, unless the fault needs groups
 * or a causal mask. */
static const char *st_case_for(const struct inject *inj)
{
    if (strcmp(inj->name, "group") == 0) return "grouped --dtype bf16 --groups 0,77,1,130,0 --shape 96x70 --bwd";
    if (strcmp(inj->name, "small-row") == 0) return "gemm --dtype bf16 --layout NN --shape 300x260x333 --inputs scaled";
    if (strcmp(inj->name, "tilepos") == 0) return "gemm --dtype bf16 --layout NN --shape 1500x1500x1000";   /* sampled */
    if (strcmp(inj->name, "mask") == 0) return "attn --dtype bf16 --seq 113:203 --heads 4:2 --dim 64 --causal --bwd";
    if (inj->unfit == q_inj_unfit) return "gemm --dtype e4m3 --scaling block --shape 300x260x300";
    if (inj->unfit == q_inj_index_unfit) return "gemm --dtype e4m3 --scaling row --shape 300x260x300";
    return "gemm --dtype bf16 --layout NT --shape 300x260x70";
}

/* Clean cases of every op pass every gate on the device; every planted
 * fault makes its own gate fail. */
static void st_gates(struct selftest *st, struct device *d, const struct opts *base)
{
    static const char *const clean[] = {
        "gemm --dtype f32 --layout NN --shape 200x150x90",
        "gemm --dtype f16 --layout TN --shape 130x257x64",
        "gemm --dtype bf16 --layout TT --shape 129x131x77 --bwd",
        "grouped --dtype f16 --layout NN --groups 0,65,1,130,0 --shape 70x33 --bwd",
        "attn --dtype bf16 --seqlens 0,37,130:70,5:0 --heads 4:2 --dim 80 --causal --bwd",
        "attn --dtype f16 --seq 239:1 --heads 2:1 --dim 64 --causal --bwd",
        "gemm --dtype e4m3 --scaling row --shape 200x150x96",
        "gemm --dtype e5m2 --scaling block --out f32 --shape 129x131x300",
        "gemm --dtype mxfp4 --mx-rule up --shape 130x70x101",
        "grouped --dtype mxfp8 --groups 0,65,1,130 --shape 70x96",
    };
    struct kcase c;
    unsigned failed;
    char label[160];
    for (size_t i = 0; i < sizeof clean / sizeof *clean; i++) {
        int pass = st_run(st->run, d, base, clean[i], NULL, 2, &c, &failed);
        if (pass < 0) continue;
        snprintf(label, sizeof label, "%s", c.label);
        st_report(st, pass, "clean %s passes every gate, 2 runs bitwise equal", label);
    }
    for (size_t i = 0; i < N_INJECTS; i++) {
        const struct inject *inj = &INJECTS[i];
        if ((inj->stage == INJ_LAUNCH || inj->stage == INJ_GRAPH) && !base->graph) continue;   /* graph faults */
        if (inj->stage == INJ_WORKER || inject_cross_device(inj)) continue;   /* tests.sh: a worker's, a list's */
        if (inj->stage == INJ_TIMED_INPUT) continue;   /* tests.sh: the selftest times nothing */
        int pass = st_run(st->run, d, base, st_case_for(inj), inj, inj->stage == INJ_REPEAT ? 2 : 1, &c, &failed);
        if (pass < 0) continue;
        size_t g = 0;
        while (g < N_GATES && strcmp(GATES[g].name, inj->gate) != 0) g++;
        char names[256] = "";
        for (size_t k = 0; k < N_GATES; k++)
            if (failed & (1u << k))
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s",
                         *names ? "," : "", GATES[k].name);
        st_report(st, !pass && (failed & (1u << g)), "--inject %-9s (%s) caught by %s on %s [failed: %s]",
                  inj->name, inj->what, inj->gate, c.label, *names ? names : "none");
    }
}

/* kgate selftest: arithmetic and references on the host, then every gate
 * against clean runs and planted faults on the chosen device. */
static int selftest_run(const struct opts *o, case_pipeline run)
{
    struct selftest st = { 0, 0, run };
    printf("host checks\n");
    st_sha256(&st);
    st_formats(&st);
    st_quantizer(&st);
    st_references(&st);
    st_sampling(&st);
    st_sampling_windows(&st);
    st_fp8_tiles(&st);
    struct device d;
    struct arm arm;
    char *file;
    opts_open_device(&d, o);
    arm_from_opts(&arm, o, &file);
    arm_build(&d, &arm);
    arm_use(&d, &arm);
    printf("gate checks on %s (%s), %s %s\n", d.name, d.arch, arm.src_name, arm.options);
    st_gates(&st, &d, o);
    opts_close_device(&d);
    arm_free(&arm);
    free(file);
    printf("selftest: %d passed, %d failed\n", st.passed, st.failed);
    return st.failed ? EXIT_GATE : EXIT_PASS;
}
