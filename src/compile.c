/* src/compile.c — code objects: the run-time compiler (NVRTC or hiprtc) or
 * an offline clang, run in a child process, behind an on-disk cache keyed by
 * source, options and compiler; and the arms, the builds of the kernels a
 * command runs side by side.  Relies on util.c, gpu.c and options.c. */

/* A compiled code object and where it came from. */
struct code_obj {
    char *data;
    size_t size;
    char sha[65];              /* sha256 of the code object: its identity */
    char key[65];              /* cache key: source, options, arch, compiler */
    char bin_path[PATH_MAX], log_path[PATH_MAX], sum_path[PATH_MAX];
    int cached;                /* 1 = read from the cache, not compiled now */
    double seconds;            /* compile time when compiled now */
};

/* The code-object cache directory: $KGATE_CACHE, else
 * $XDG_CACHE_HOME/kgate, else $HOME/.cache/kgate, else (no HOME)
 * ./.kgate-cache.  *from says which of these it is, for messages. */
static const char *cache_dir(const char **from)
{
    static char dir[PATH_MAX];
    const char *env = getenv("KGATE_CACHE"), *xdg = getenv("XDG_CACHE_HOME"),
               *home = getenv("HOME");
    if (env && *env) snprintf(dir, sizeof dir, "%s", env), *from = "KGATE_CACHE";
    else if (xdg && *xdg) snprintf(dir, sizeof dir, "%s/kgate", xdg), *from = "$XDG_CACHE_HOME/kgate";
    else if (home && *home) snprintf(dir, sizeof dir, "%s/.cache/kgate", home), *from = "$HOME/.cache/kgate";
    else snprintf(dir, sizeof dir, ".kgate-cache"), *from = "./.kgate-cache, as HOME is unset";
    return dir;
}

/* Write the checksum of a cache entry's code object beside it
 * (co->sum_path: "kgate-sum 1 SIZE SHA256"); 0 on success. */
static int cache_write_sum(const struct code_obj *co, const void *data, size_t n)
{
    char sha[65], line[128];
    sha256_text(data, n, sha);
    int len = snprintf(line, sizeof line, "kgate-sum 1 %zu %s\n", n, sha);
    return write_file_atomic(co->sum_path, line, (size_t)len);
}

/* Read co's cache entry and check it against its checksum: 1 (co->data
 * holds the code object), 0 (no entry), or -1 (a damaged entry: empty,
 * truncated, altered or without its checksum; removed, with a line on
 * stderr, so that it is compiled again and never trusted). */
static int cache_read_entry(struct code_obj *co)
{
    size_t n = 0;
    char *data = read_file(co->bin_path, &n);
    if (!data) return 0;
    char *sum = read_file(co->sum_path, NULL), sha[65], want[65] = "";
    size_t want_n = 0;
    sha256_text(data, n, sha);
    const char *why = !sum || sscanf(sum, "kgate-sum 1 %zu %64s", &want_n, want) != 2 ? "no checksum"
                      : n == 0 ? "empty" : n != want_n ? "size differs from its checksum's"
                      : strcmp(sha, want) != 0 ? "contents differ from its checksum" : NULL;
    free(sum);
    if (!why) {
        co->data = data, co->size = n;
        return 1;
    }
    free(data);
    fprintf(stderr, "kgate: cache entry %s is damaged (%s): compiling again\n", co->bin_path, why);
    unlink(co->bin_path), unlink(co->sum_path);
    return -1;
}

/* $KGATE_COMPILE_TIMEOUT: the seconds a compile may take (default 600);
 * exit 2 naming the variable unless it is a whole number from 1 to 86400. */
static double compile_timeout(void)
{
    const char *env = getenv("KGATE_COMPILE_TIMEOUT");
    uint64_t v = 600;
    if (env && parse_u64(env, 1, 86400, &v) != 0)
        die(EXIT_USAGE, "KGATE_COMPILE_TIMEOUT=%s: expected a whole number of seconds from 1 to 86400", shown(env));
    return (double)v;
}

/* In a compiler's child process: the crash or hang that tests plant with
 * $KGATE_TEST_COMPILER (crash|hang); nothing otherwise. */
static void compiler_test_hook(void)
{
    const char *hook = getenv("KGATE_TEST_COMPILER");
    if (hook && strcmp(hook, "crash") == 0) raise(SIGSEGV);
    if (hook && strcmp(hook, "hang") == 0) for (;;) pause();
}

/* The compiler's child process: compile, write the log and (on success) the
 * code object into the cache, exit 0 (compiled), 1 (compile error), 2
 * (could not run the compiler) or 3 (could not write the code object).  Runs after fork(), so a crash or hang of the
 * compiler takes only this process down. */
static int compile_child(const struct rtc *c, const char *src, const char *name,
                         const char *const *opts, int nopts, const struct code_obj *co)
{
    compiler_test_hook();
    void *prog = NULL;
    int r = c->create(&prog, src, name, 0, NULL, NULL);
    if (r != 0) {
        const char *msg = c->err_string(r) ? c->err_string(r) : "unknown compiler error";
        write_file_atomic(co->log_path, msg, strlen(msg));
        return 2;
    }
    int cr = c->compile(prog, nopts, opts);
    size_t n = 0;
    c->log_size(prog, &n);
    char *log = xcalloc(1, n + 1);
    if (n) c->log(prog, log);
    write_file_atomic(co->log_path, log, strlen(log));
    free(log);
    if (cr != 0) return 1;
    if (c->code_size(prog, &n) != 0 || n == 0) return 2;
    char *code = xmalloc(n);
    if (c->code(prog, code) != 0) return 2;
    if (write_file_atomic(co->bin_path, code, n) != 0 || cache_write_sum(co, code, n) != 0) return 3;
    free(code);
    c->destroy(&prog);
    return 0;
}

/* Print up to `max_lines` lines of the compile log to stderr. */
static void print_log_head(const char *path, int max_lines)
{
    char *log = read_file(path, NULL);
    if (!log) return;
    char *p = log;
    for (int i = 0; i < max_lines && *p; i++) {
        size_t n = strcspn(p, "\n");
        fprintf(stderr, "  | %.*s\n", (int)n, p);
        p += n + (p[n] == '\n');
    }
    free(log);
}

/* Fork a compiler's child process: 0 in the child, its pid in the parent;
 * exits 5 if there can be no child. */
static pid_t compile_fork(void)
{
    pid_t pid = fork_tied();
    if (pid < 0) die(EXIT_DEVICE, "cannot fork the compiler: %s", strerror(errno));
    return pid;
}

/* Wait for the compiler child (exit status 0 compiled, 1 compile error,
 * 3 could not write the code object, other: could not run) and return the
 * seconds it took; exit 5 with one clear line if it crashed, hung past
 * $KGATE_COMPILE_TIMEOUT seconds (default 600), or failed; 6 if the code
 * object could not be written into the cache. */
static double compile_wait(pid_t pid, const char *what, const struct code_obj *co)
{
    double limit = compile_timeout(), t0 = now_s();
    int status = 0;
    for (;;) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) break;
        if (w < 0 && errno != EINTR) die(EXIT_DEVICE, "waiting for the compiler: %s", strerror(errno));
        if (now_s() - t0 > limit) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            die(EXIT_DEVICE, "compiler hung: no result after %.0f s compiling %s; killed", limit, what);
        }
        usleep(2000);
    }
    const char *log = access(co->log_path, R_OK) == 0 ? co->log_path : "none written";
    if (WIFSIGNALED(status))
        die(EXIT_DEVICE, "compiler crashed with signal %d (%s) compiling %s (log: %s)",
            WTERMSIG(status), strsignal(WTERMSIG(status)), what, log);
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 2;
    if (code == 1) {
        fprintf(stderr, "kgate: %s does not compile; compiler log (%s):\n", what, co->log_path);
        print_log_head(co->log_path, 40);
        exit(EXIT_DEVICE);
    }
    if (code == 3) die(EXIT_IO, "compiled %s but could not write %s: disk full or I/O error", what, co->bin_path);
    if (code != 0) die(EXIT_DEVICE, "compiler failed to run on %s (log: %s)", what, log);
    return now_s() - t0;
}

/* Name the cache entry of a compile: co's key is a hash of the compiler's
 * identity `ident` ("NVRTC 13.0", clang's version line), the source and the
 * options, its paths sit in cache_dir().  Reads the cached code object when
 * there is one: returns 1 if there was, 0 if it must be compiled into
 * co->bin_path.  Exits 2 if the cache directory cannot be made or written
 * (or $KGATE_COMPILE_TIMEOUT is not valid), before any compile. */
static int cache_lookup(const char *ident, const char *src, const char *const *opts, int nopts,
                        struct code_obj *co)
{
    struct sha256 h;
    sha256_init(&h);
    char ver[256];
    snprintf(ver, sizeof ver, "kgate-cache-1 %s", ident);
    sha256_update(&h, ver, strlen(ver) + 1);
    sha256_update(&h, src, strlen(src) + 1);
    for (int i = 0; i < nopts; i++) sha256_update(&h, opts[i], strlen(opts[i]) + 1);
    sha256_hex(&h, co->key);

    const char *from, *dir = cache_dir(&from);
    char what[96];
    snprintf(what, sizeof what, "the code-object cache (%s)", from);
    usable_dir(dir, what, NULL);
    compile_timeout();
    if (snprintf(co->bin_path, sizeof co->bin_path, "%s/%s.bin", dir, co->key) >= PATH_MAX ||
        snprintf(co->log_path, sizeof co->log_path, "%s/%s.log", dir, co->key) >= PATH_MAX ||
        snprintf(co->sum_path, sizeof co->sum_path, "%s/%s.sum", dir, co->key) >= PATH_MAX)
        die(EXIT_USAGE, "cache directory path too long: %s", dir);
    co->cached = cache_read_entry(co) == 1;
    return co->cached;
}

/* After cache_lookup and, when it missed, a compile into co->bin_path (and
 * its checksum): read the code object, check it, hash it (its identity),
 * and say on stderr where it came from.  Exits 5 if the compile left no
 * code object that matches its checksum. */
static void cache_finish(const char *what, struct code_obj *co)
{
    if (!co->data && cache_read_entry(co) != 1)
        die(EXIT_DEVICE, "compiled %s but %s is missing or does not match its checksum", what, co->bin_path);
    struct sha256 h;
    sha256_init(&h);
    sha256_update(&h, co->data, co->size);
    sha256_hex(&h, co->sha);
    if (co->cached)
        fprintf(stderr, "kgate: %s: cached code object %.12s (%s)\n", what, co->sha, co->bin_path);
    else
        fprintf(stderr, "kgate: %s: compiled in %.2f s, code object %.12s (%s)\n", what,
                co->seconds, co->sha, co->bin_path);
}

/* Compile `src` for `arch` with the run-time compiler `c` of platform pf, or
 * take the code object from the on-disk cache (keyed by a hash of source,
 * options, arch and compiler version).  The compile runs in a child process.
 * `name` names the source in messages.  Exits 2 if the cache is unusable,
 * 6 if the code object cannot be written, 5 on any other failure. */
static void compile_source(const struct rtc *c, enum platform pf, const char *src,
                           const char *name, const char *arch, const char *const *extra,
                           int nextra, struct code_obj *co)
{
    const char *opts[64];
    char archopt[128];
    int nopts = 0;
    snprintf(archopt, sizeof archopt, "%s=%s",
             pf == PF_CUDA ? "--gpu-architecture" : "--offload-arch", arch);
    opts[nopts++] = archopt;
    if (pf == PF_HIP) opts[nopts++] = "-O3";
    for (int i = 0; i < nextra && nopts < 64; i++) opts[nopts++] = extra[i];

    char ident[160], what[320];
    rtc_ident(c, pf, ident, sizeof ident);
    snprintf(what, sizeof what, "%s for %s with %s", name, arch, ident);
    if (!cache_lookup(ident, src, opts, nopts, co)) {
        pid_t pid = compile_fork();
        if (pid == 0) _exit(compile_child(c, src, name, opts, nopts, co));
        co->seconds = compile_wait(pid, what, co);
    }
    cache_finish(what, co);
}

/* --- the offline compiler of HIP device code for AMD (no hiprtc) --- */

/* Offline compilers of HIP device code for AMD, tried in order when no
 * hiprtc loads (kernels.hip's prelude covers clang without HIP headers). */
static const char *const HIP_CLANG[] = { "/opt/rocm/llvm/bin/clang", "clang-20", "clang-19", NULL };

/* The first line of `clang --version`: the compiler's identity in the cache
 * key.  Exits 5 if clang does not answer. */
static void clang_ident(const char *clang, char *out, size_t n)
{
    const char *argv[] = { clang, "--version", NULL };
    pid_t pid;
    FILE *f = tool_open(argv, &pid);
    if (!f) die(EXIT_DEVICE, "cannot run %s: %s", clang, strerror(errno));
    int got = tool_line(f, out, n);
    if (tool_close(f, pid) != 0 || !got || !*out) die(EXIT_DEVICE, "%s --version failed", clang);
}

/* The offline compiler's child process: exec argv (argv[0] a path) with
 * stdout and stderr into the compile log; 2 (could not run) if it cannot. */
static int clang_child(const char *const *argv, const char *log_path)
{
    compiler_test_hook();
    int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return 2;
    exec_into(fd, argv);
    dprintf(STDERR_FILENO, "cannot run %s: %s\n", argv[0], strerror(errno));
    return 2;
}

/* Compile `src` for AMD `arch` with the offline compiler `clang` (a path):
 * device code only, no HIP headers (kernels.hip's bare-clang prelude), -O3,
 * plus `extra` options.  Same cache as compile_source, keyed by clang's
 * version line, the source (with a #line naming it) and the options; that
 * source is written beside the code object.  The compile runs in a child process, with
 * compile_source's crash, hang and error handling (exit 5; 6 if the code
 * object cannot be written). */
static void compile_clang(const char *clang, const char *src, const char *name, const char *arch,
                          const char *const *extra, int nextra, struct code_obj *co)
{
    char archopt[128], ident[200], what[PATH_MAX + 600];
    snprintf(archopt, sizeof archopt, "--offload-arch=%s", arch);
    /* -fuse-cuid=none: no symbol named after the path of the source's copy,
     * so the code object is the same wherever the cache is. */
    const char *opts[64] = { "-x", "hip", archopt, "-nogpulib", "-nogpuinc", "--cuda-device-only",
                             "--no-gpu-bundle-output", "-fuse-cuid=none", "-O3" };
    int nopts = 9;
    for (int i = 0; i < nextra && nopts < 64; i++) opts[nopts++] = extra[i];
    clang_ident(clang, ident, sizeof ident);
    snprintf(what, sizeof what, "%s for %s with %s (%s)", name, arch, clang, ident);
    size_t len = strlen(src) + strlen(name) + 32;
    char *text = xmalloc(len);   /* what clang reads: messages (and the code object) name the source */
    len = (size_t)snprintf(text, len, "#line 1 \"%s\"\n%s", strpbrk(name, "\"\\\n") ? "source" : name, src);
    if (!cache_lookup(ident, text, opts, nopts, co)) {
        char src_path[PATH_MAX + 8], out_path[PATH_MAX + 32];
        snprintf(src_path, sizeof src_path, "%.*s.hip", (int)strlen(co->bin_path) - 4, co->bin_path);
        snprintf(out_path, sizeof out_path, "%s.tmp.%d", co->bin_path, (int)getpid());
        if (write_file_atomic(src_path, text, len) != 0)
            die(EXIT_IO, "cannot write %s: %s", shown(src_path), strerror(errno));
        const char *argv[64 + 5];
        int n = 0;
        argv[n++] = clang;
        for (int i = 0; i < nopts; i++) argv[n++] = opts[i];
        argv[n++] = src_path, argv[n++] = "-o", argv[n++] = out_path, argv[n] = NULL;
        pid_t pid = compile_fork();
        if (pid == 0) _exit(clang_child(argv, co->log_path));
        co->seconds = compile_wait(pid, what, co);
        size_t size = 0;
        char *code = read_file(out_path, &size);
        if (!code || size == 0 || cache_write_sum(co, code, size) != 0 || rename(out_path, co->bin_path) != 0)
            die(EXIT_DEVICE, "%s compiled %s but wrote no %s", clang, name, out_path);
        co->data = code, co->size = size;   /* cache_finish hashes it; no second read */
    }
    free(text);
    cache_finish(what, co);
}

/* --- arms: the builds a command runs side by side --- */

/* One build of the kernels: the reference arm (kernels.hip as shipped) or a
 * candidate (--variant NAME with -D definitions, or a --kernels FILE).  Its
 * identity is the sha256 of its code object.  The CPU device compiles
 * nothing and always runs ref.c's candidate; there an arm's identity is the
 * sha256 of its source and options, so that the ledger and the budget work
 * the same way without a GPU. */
struct arm {
    char name[64];                /* "reference", or the --variant name */
    const char *src, *src_name;   /* the source text and what to call it */
    char *defines[MAX_DEFINES + 1]; /* "-DNAME=VALUE", owned */
    int ndefines;
    char options[1024];           /* the definitions as one line, for reports and the ledger */
    int candidate, diagnostic;
    int copy;                     /* the A/A copy of another arm (noise, compare) */
    struct code_obj code;
    void *module;                 /* GPU: the loaded code object */
    struct kfns kfns;
    int tile_m, tile_n;           /* the GEMM tile it publishes (kg_gemm_tile_m/_n; 64 if absent) */
    int f32_tile_m, f32_tile_n;   /* kg_gemm_f32's (kg_gemm_f32_tile_m/_n; tile_m/_n if absent) */
    int sm90_smem;                /* kg_gemm_sm90_smem: > 0 = it has the sm_90a GEMM, with this much dynamic smem */
    int sm90_tile_m, sm90_tile_n; /* that GEMM's tile */
    int sm90_cluster;             /* its blocks per cluster (1 or 2) */
    int sm90_pack;                /* 1: operands TMA cannot read are packed first (kg_pack_rows) */
    int sm90_layouts;             /* 1: it has every layout's entry (kg_gemm_sm90_{nn,tn,tt}_<dt>) */
    int sm90_qblock;              /* kg_qgemm_sm90_block: the K of a scale block kg_qgemm_sm90_blk_* take (0: none) */
    int sm90_qf32;                /* kg_qgemm_sm90_f32: 1 = it has the fp8 entries with an fp32 output (kg_qgemm_sm90_*_f32) */
    int sm90_qmx;                 /* kg_qgemm_sm90_mx: 32 = it has the MX entries (kg_qgemm_sm90_mx_*); 0: none */
    int sm90_q192_smem;           /* kg_qgemm_sm90_n192_smem: > 0 = it has the per-tensor / per-row fp8 entries
                                     at tiles of 128 x 192 (kg_qgemm_sm90_n192_*), with this much dynamic smem */
    int sm90_qblk192;             /* kg_qgemm_sm90_n192_blk: 1 = it has the blockwise ones too (bf16 output) */
    int mfma_tile;                /* kg_gemm_mfma_tile: 128 = it has the gfx942 MFMA GEMM (kg_gemm_mfma_<dt>); 0: none */
    int mfma_qtile;               /* kg_qgemm_mfma_tile: 128 = it has the gfx942 MFMA fp8 GEMM (kg_qgemm_mfma_*); 0: none */
    int attn_mfma_dmax;           /* kg_attn_fwd_mfma_dmax: the head dims (1 ..) of the gfx942 MFMA attention forward; 0: none */
    int attn_sm90_smem[3];        /* kg_attn_sm90_smem_d{64,128,256}: > 0 = it has that sm_90a attention forward */
    int attn_bwd_smem[2][2];      /* [d64, d128][dK/dV, dQ]: kg_attn_bwd_sm90_smem_d<D>, kg_attn_bwd_dq_sm90_smem_d<D> */
    int attn_bwd_bm, attn_bwd_dq_bn;  /* the sm_90a backward's boxes: dK/dV's query rows, dQ's keys (64 or 128) */
    int attn_bwd_fused_smem[3];   /* kg_attn_bwd_fused_sm90_smem_d{64,128,128nc}: > 0 = it has that fused backward
                                     (d128nc: head dim 128 without a mask) */
    int attn_bwd_fused_bm[3];     /* kg_attn_bwd_fused_sm90_bm_d{64,128,128nc}: its query rows a step (Q/dO boxes,
                                     slab rows) */
    int attn_bwd_fused_atomic;    /* kg_attn_bwd_fused_sm90_atomic: 1 = its dQ sums need zeroed slabs, not locks */
    int attn_bwd_post_early;      /* kg_attn_bwd_fused_sm90_post_early: 1 = its post kernel may start while the
                                     fused pass runs (programmatic dependent launch) */
    int attn_bwd_stress;          /* kg_attn_bwd_fused_sm90_stress: 1 = a diagnostic build (-D FB_STRESS_NS)
                                     whose dQ slabs kgate fills with NaN before each launch */
    struct graph_slot graphs[GRAPH_SLOTS]; /* --graph: the current case's launches, captured (run_exec) */
};

/* Add the definition "NAME[=VALUE]" to arm a. */
static void arm_define(struct arm *a, const char *def)
{
    if (a->ndefines == MAX_DEFINES) die(EXIT_USAGE, "at most %d -D definitions", MAX_DEFINES);
    size_t n = strlen(def) + 3;
    a->defines[a->ndefines] = xmalloc(n);
    snprintf(a->defines[a->ndefines++], n, "-D%s", def);
    size_t used = strlen(a->options);
    snprintf(a->options + used, sizeof a->options - used, "%s-D%s", used ? " " : "", def);
}

/* The CPU device's stand-in for a code object: the sha256 of the arm's
 * source and definitions. */
static void arm_hash_cpu(struct arm *a)
{
    struct sha256 h;
    sha256_init(&h);
    sha256_update(&h, "kgate-cpu-arm", 14);
    sha256_update(&h, a->src, strlen(a->src) + 1);
    for (int i = 0; i < a->ndefines; i++) sha256_update(&h, a->defines[i], strlen(a->defines[i]) + 1);
    sha256_hex(&h, a->code.sha);
}

/* Make arm a's kernels the ones that launch on d. */
static void arm_use(struct device *d, struct arm *a)
{
    d->arm = a;
    d->module = a->module;
    d->kfns = &a->kfns;
}

/* Read the sm_90a attention backward that arm a's code object publishes
 * (none: every size 0): the two passes at head dims 64 and 128, and the
 * fused pass at each (at 128 also its entry without a mask); exit 5 on
 * sizes or boxes kgate cannot launch. */
static void arm_read_attn_bwd(struct device *d, struct arm *a)
{
    static const char *const pass[2] = { "kg_attn_bwd_sm90", "kg_attn_bwd_dq_sm90" };
    /* the two passes' head dims, then the fused pass's entries (the third: 128 without a mask) */
    static const char *const dim[3] = { "_smem_d64", "_smem_d128", "_smem_d128nc" };
    for (int i = 0; i < 2; i++)
        for (int p = 0; p < 2; p++) {
            int v = a->attn_bwd_smem[i][p] = module_int(d, pass[p], dim[i], 0);
            if (v < 0 || v > 256 * 1024)
                die(EXIT_DEVICE, "%s publishes an sm_90a attention backward (%s%s) of %d bytes of shared memory "
                    "(want 0, none, to 262144)", a->src_name, pass[p], dim[i], v);
        }
    static const char *const rows[3] = { "_bm_d64", "_bm_d128", "_bm_d128nc" };
    static const int other[3] = { 128, 64, 80 };   /* the rows each may take besides 64 */
    for (int i = 0; i < 3; i++) {
        int v = a->attn_bwd_fused_smem[i] = module_int(d, "kg_attn_bwd_fused_sm90", dim[i], 0);
        if (v < 0 || v > 256 * 1024)
            die(EXIT_DEVICE, "%s publishes a fused sm_90a attention backward (kg_attn_bwd_fused_sm90%s) of %d "
                "bytes of shared memory (want 0, none, to 262144)", a->src_name, dim[i], v);
        int m = a->attn_bwd_fused_bm[i] = module_int(d, "kg_attn_bwd_fused_sm90", rows[i], 64);
        if (v && m != 64 && m != other[i])
            die(EXIT_DEVICE, "%s publishes a fused sm_90a attention backward (kg_attn_bwd_fused_sm90%s) of %d query "
                "rows a step (want 64; 128 at head dim 64, 80 at 128 without a mask)", a->src_name, rows[i], m);
    }
    a->attn_bwd_fused_atomic = module_int(d, "kg_attn_bwd_fused_sm90", "_atomic", 0) != 0;
    a->attn_bwd_post_early = module_int(d, "kg_attn_bwd_fused_sm90", "_post_early", 0) != 0;
    a->attn_bwd_stress = module_int(d, "kg_attn_bwd_fused_sm90", "_stress", 0) != 0;
    a->attn_bwd_bm = module_int(d, "kg_attn_bwd_sm90", "_bm", 0);
    a->attn_bwd_dq_bn = module_int(d, "kg_attn_bwd_dq_sm90", "_bn", 0);
    int has = a->attn_bwd_smem[0][0] || a->attn_bwd_smem[1][0];
    if (has && ((a->attn_bwd_bm != 64 && a->attn_bwd_bm != 128) || (a->attn_bwd_dq_bn != 64 && a->attn_bwd_dq_bn != 128)))
        die(EXIT_DEVICE, "%s publishes an sm_90a attention backward with boxes of %d query rows and %d keys (want 64 "
            "or 128 each)", a->src_name, a->attn_bwd_bm, a->attn_bwd_dq_bn);
    if ((a->attn_bwd_fused_smem[0] || a->attn_bwd_fused_smem[1] || a->attn_bwd_fused_smem[2]) && a->attn_bwd_bm != 64)
        die(EXIT_DEVICE, "%s publishes a fused sm_90a attention backward with boxes of %d query rows (want 64)",
            a->src_name, a->attn_bwd_bm);
}

/* Build arm a for device d: compile (or take from the cache) and load its
 * code object, and read the GEMM tiles it publishes; on the CPU, hash it. */
static void arm_build(struct device *d, struct arm *a)
{
    a->tile_m = a->tile_n = a->f32_tile_m = a->f32_tile_n = 64;
    a->sm90_smem = a->sm90_qblock = a->sm90_qf32 = a->sm90_qmx = a->sm90_q192_smem = a->sm90_qblk192 = 0;
    a->mfma_tile = a->mfma_qtile = a->attn_mfma_dmax = 0;
    memset(a->attn_sm90_smem, 0, sizeof a->attn_sm90_smem);
    memset(a->attn_bwd_smem, 0, sizeof a->attn_bwd_smem);
    memset(a->attn_bwd_fused_smem, 0, sizeof a->attn_bwd_fused_smem);
    if (d->kind == DEV_CPU) { arm_hash_cpu(a); return; }
    compile_source(&d->rtc, d->pf, a->src, a->src_name, d->arch, (const char *const *)a->defines,
                   a->ndefines, &a->code);
    gpu_check(d, d->rt.module_load(&a->module, a->code.data), "loading the code object");
    arm_use(d, a);
    a->tile_m = module_int(d, "kg_gemm_tile", "_m", 64);
    a->tile_n = module_int(d, "kg_gemm_tile", "_n", 64);
    if (a->tile_m < 1 || a->tile_n < 1 || a->tile_m > 4096 || a->tile_n > 4096)
        die(EXIT_DEVICE, "%s publishes a GEMM tile of %dx%d", a->src_name, a->tile_m, a->tile_n);
    a->f32_tile_m = module_int(d, "kg_gemm_f32_tile", "_m", a->tile_m);
    a->f32_tile_n = module_int(d, "kg_gemm_f32_tile", "_n", a->tile_n);
    if (a->f32_tile_m < 1 || a->f32_tile_n < 1 || a->f32_tile_m > 4096 || a->f32_tile_n > 4096)
        die(EXIT_DEVICE, "%s publishes an f32 GEMM tile of %dx%d", a->src_name, a->f32_tile_m, a->f32_tile_n);
    a->mfma_tile = module_int(d, "kg_gemm_mfma", "_tile", 0);
    if (a->mfma_tile != 0 && a->mfma_tile != 128)
        die(EXIT_DEVICE, "%s publishes an MFMA GEMM tile of %d (want 128 x 128)", a->src_name, a->mfma_tile);
    a->mfma_qtile = module_int(d, "kg_qgemm_mfma", "_tile", 0);
    if (a->mfma_qtile != 0 && a->mfma_qtile != 128)
        die(EXIT_DEVICE, "%s publishes an MFMA fp8 GEMM tile of %d (want 128 x 128)", a->src_name, a->mfma_qtile);
    a->attn_mfma_dmax = module_int(d, "kg_attn_fwd_mfma", "_dmax", 0);
    if (a->attn_mfma_dmax < 0 || a->attn_mfma_dmax > 256)
        die(EXIT_DEVICE, "%s publishes an MFMA attention forward for head dims up to %d (want 0 .. 256)", a->src_name,
            a->attn_mfma_dmax);
    a->sm90_smem = module_int(d, "kg_gemm_sm90", "_smem", 0);
    a->sm90_tile_m = module_int(d, "kg_gemm_sm90", "_tile_m", 0);
    a->sm90_tile_n = module_int(d, "kg_gemm_sm90", "_tile_n", 0);
    a->sm90_cluster = module_int(d, "kg_gemm_sm90", "_cluster", 1);
    a->sm90_pack = module_int(d, "kg_gemm_sm90", "_pack", 0);
    a->sm90_layouts = module_int(d, "kg_gemm_sm90", "_layouts", 0);
    if (a->sm90_smem && (a->sm90_smem < 0 || a->sm90_tile_m != 128 || a->sm90_tile_n < 1 || a->sm90_tile_n > 256 ||
                         (a->sm90_cluster != 1 && a->sm90_cluster != 2) || a->sm90_tile_n % a->sm90_cluster))
        die(EXIT_DEVICE, "%s publishes an sm_90a GEMM of %d bytes of shared memory, tile %dx%d and clusters of %d "
            "(want 128 x 1..256, clusters of 1 or 2 that divide the tile's columns)",
            a->src_name, a->sm90_smem, a->sm90_tile_m, a->sm90_tile_n, a->sm90_cluster);
    if (a->sm90_smem && a->sm90_layouts && a->sm90_tile_n / a->sm90_cluster % 64)
        die(EXIT_DEVICE, "%s publishes every layout's sm_90a GEMM with a tile of %d columns in clusters of %d (MN-major "
            "operands load 64 columns a box: want a multiple of 64 per block)", a->src_name, a->sm90_tile_n,
            a->sm90_cluster);
    a->sm90_qblock = a->sm90_smem ? module_int(d, "kg_qgemm_sm90", "_block", 0) : 0;
    if (a->sm90_qblock != 0 && a->sm90_qblock != 128)
        die(EXIT_DEVICE, "%s publishes blockwise sm_90a fp8 entries for scale blocks of %d along K (want 128, one "
            "stage of fp8)", a->src_name, a->sm90_qblock);
    a->sm90_qf32 = a->sm90_smem ? module_int(d, "kg_qgemm_sm90", "_f32", 0) == 1 : 0;
    a->sm90_qmx = a->sm90_smem ? module_int(d, "kg_qgemm_sm90", "_mx", 0) : 0;
    a->sm90_q192_smem = a->sm90_smem ? module_int(d, "kg_qgemm_sm90_n192", "_smem", 0) : 0;
    if (a->sm90_q192_smem < 0 || (a->sm90_q192_smem && 192 % a->sm90_cluster))
        die(EXIT_DEVICE, "%s publishes 192-column sm_90a fp8 entries of %d bytes of shared memory in clusters of %d "
            "(want a positive size, clusters that divide 192)", a->src_name, a->sm90_q192_smem, a->sm90_cluster);
    a->sm90_qblk192 = a->sm90_q192_smem > 0 && a->sm90_qblock ? module_int(d, "kg_qgemm_sm90_n192", "_blk", 0) == 1 : 0;
    if (a->sm90_qmx != 0 && a->sm90_qmx != 32)
        die(EXIT_DEVICE, "%s publishes sm_90a MX entries for scale blocks of %d along K (want 32, the MX block)",
            a->src_name, a->sm90_qmx);
    static const char *const attn_smem[3] = { "_smem_d64", "_smem_d128", "_smem_d256" };
    for (int i = 0; i < 3; i++) {
        a->attn_sm90_smem[i] = module_int(d, "kg_attn_sm90", attn_smem[i], 0);
        if (a->attn_sm90_smem[i] < 0 || a->attn_sm90_smem[i] > 256 * 1024)
            die(EXIT_DEVICE, "%s publishes an sm_90a attention forward (kg_attn_sm90%s) of %d bytes of shared memory "
                "(want 0, none, to 262144)", a->src_name, attn_smem[i], a->attn_sm90_smem[i]);
    }
    arm_read_attn_bwd(d, a);
}

/* Give back what arm_build and arm_define took. */
static void arm_free(struct arm *a)
{
    for (int i = 0; i < a->ndefines; i++) free(a->defines[i]);
    free(a->code.data);
    a->code.data = NULL;
    a->ndefines = 0;
}

/* The reference arm: the embedded kernels.hip as shipped. */
static void arm_reference(struct arm *a)
{
    memset(a, 0, sizeof *a);
    snprintf(a->name, sizeof a->name, "reference");
    a->src = kg_embedded_src, a->src_name = "kernels.hip (embedded)";
}

#define KERNELS_MAX_BYTES (16u << 20)   /* a --kernels file: at most 16 MiB (kernels.hip is about 250 KB) */

/* The arm the options name: a candidate when --variant, -D or --kernels is
 * given (named by --variant, else by the --kernels file), else the
 * reference.  *file owns a --kernels file's text.  Exit 2 on a variant
 * without a change or a change without a name. */
static void arm_from_opts(struct arm *a, const struct opts *o, char **file)
{
    arm_reference(a);
    *file = NULL;
    if (!o->variant && !o->ndefines && !o->kernels_path) {
        if (o->diagnostic) die(EXIT_USAGE, "--diagnostic marks a variant: give --variant NAME and its -D or --kernels");
        return;
    }
    if (o->variant && !o->ndefines && !o->kernels_path)
        die(EXIT_USAGE, "--variant %s: give what differs from the reference: -D NAME=VALUE or --kernels FILE", shown(o->variant));
    if (!o->variant && !o->kernels_path)
        die(EXIT_USAGE, "-D makes a candidate: name it with --variant NAME (the ledger records it)");
    a->candidate = 1, a->diagnostic = o->diagnostic;
    if (o->kernels_path) {
        *file = read_file_max(o->kernels_path, KERNELS_MAX_BYTES, NULL);
        if (!*file && errno == EFBIG)
            die(EXIT_USAGE, "--kernels %s: larger than %u bytes (16 MiB): not a kernels file", shown(o->kernels_path),
                KERNELS_MAX_BYTES);
        if (!*file) die(EXIT_USAGE, "cannot read --kernels %s: %s", shown(o->kernels_path), read_why());
        a->src = *file, a->src_name = o->kernels_path;
    }
    const char *base = o->kernels_path ? strrchr(o->kernels_path, '/') : NULL;
    snprintf(a->name, sizeof a->name, "%s", o->variant ? o->variant : base ? base + 1 : o->kernels_path);
    for (int i = 0; i < o->ndefines; i++) arm_define(a, o->defines[i]);
}

/* The A/A copy of arm `of`: the same source and definitions plus
 * KG_BUILD_ID=2, a distinct code object with the same kernels. */
static void arm_copy(struct arm *a, const struct arm *of)
{
    memset(a, 0, sizeof *a);
    snprintf(a->name, sizeof a->name, "%.58s-copy", of->name);
    a->src = of->src, a->src_name = of->src_name;
    for (int i = 0; i < of->ndefines; i++) arm_define(a, of->defines[i] + 2);
    arm_define(a, "KG_BUILD_ID=2");
    a->copy = 1;
}

/* Compile the kernels for `arch` with the platform's run-time compiler, or,
 * for AMD when no hiprtc loads, with an offline clang (HIP_CLANG).  Exits 3
 * naming everything tried when there is neither. */
static void compile_for_arch(enum platform pf, const struct arm *a, const char *arch, struct code_obj *co)
{
    const char *src = a->src, *name = a->src_name;
    const char *const *defs = (const char *const *)a->defines;
    struct rtc c;
    char msg[1400], clang[PATH_MAX];
    if (rtc_open(pf, &c, msg, sizeof msg) == 0) {
        compile_source(&c, pf, src, name, arch, defs, a->ndefines, co);
        return;
    }
    if (pf == PF_HIP && find_tool(HIP_CLANG, clang, sizeof clang) == 0) {
        compile_clang(clang, src, name, arch, defs, a->ndefines, co);
        return;
    }
    if (pf == PF_CUDA) die(EXIT_NORUNTIME, "%s", msg);
    char tried[256] = "";
    for (int i = 0; HIP_CLANG[i]; i++) list_add(tried, sizeof tried, HIP_CLANG[i]);
    die(EXIT_NORUNTIME, "%s, and no clang for HIP (tried %s)", msg, tried);
}
