/* src/options.c — the run options of every command (struct opts), their
 * parser, the --help text, the device the options name, and `kgate
 * devices`.  Relies on util.c (parsers) and gpu.c (devices, the --expect
 * classes). */

#define TIMEOUT_MAX_S 86400.0   /* --timeout, and the watchdog's default limit, at most (a day) */

/* Options that apply to a whole run (not to one case). */
struct opts {
    int device_cpu, device_index;
    const char *kernels_path;     /* NULL: the embedded kernels.hip */
    const char *shapes_path;
    uint64_t seed;
    int json, full;
    double rtol, atol;            /* < 0: the dtype's default */
    const char *why;
    const char *inject;           /* NULL: none */
    const char *arch;             /* isa: compile target */
    int quiet;                    /* selftest: no rows, no progress */
    int repeat;                   /* runs per case compared (--repeat); 0: the command's default */
    const char *trades_precision; /* low precision: why the baseline SNR rule is waived */
    const char *variant;          /* --variant NAME: the candidate arm's name */
    const char *defines[MAX_DEFINES]; /* -D K=V, as given */
    int ndefines;
    int diagnostic;               /* --diagnostic: the variant is not deliverable */
    const char *ledger_path;      /* --ledger FILE; NULL: ./kgate.ledger where a ledger is kept */
    int budget;                   /* --budget N: distinct candidate code objects (0: the default) */
    const char *expect;           /* --expect wgmma|mma|mfma|wmma: the matrix instructions required */
    int rounds;                   /* compare and noise: interleaved rounds (0: the default) */
    const char *command;          /* argv[1], for the ledger */
    const char *dump_dir;         /* --dump DIR: inputs, outputs and references for bench/oracle.py */
    int seeds;                    /* all --seeds N: the suite on seeds seed .. seed + N - 1 (0: one) */
    int untimed;                  /* gate only, no timer (--seeds: every seed after the first) */
    int wide;                     /* --wide: every gate's column, the metrics, geometry and timer lines */
    double timeout;               /* --timeout S: the watchdog's limit per launch (0: from the case) */
    unsigned cmd_kind;            /* the command's K_* bit (main sets it; 0: no check, as for shapes lines) */
    unsigned long long seen;      /* the OPT_ROWS given so far: each may be given once (-D excepted) */
    const char *diff_dirs[2];     /* diff: the two --dump directories A and B */
    int graph;                    /* --graph: every launch captured into a graph once, then replayed */
    const char *device_list;      /* --device all or A,B,...: each entry in its own kgate (node.c); NULL: one device */
    int device_list_cpu;          /* the list names the CPU among its entries */
    int cpu_sums_sm90;            /* --cpu-sums sm90a: the CPU candidate's fp8 products summed as ref.c's ACC_TC8 */
};

/* The most entries of a device list (--device A,B,...). */
#define NODE_MAX 64

/* The kinds of command, as bits: which commands an option means something
 * to (OPT_ROWS). */
enum { K_CASE = 1, K_COMPARE = 2, K_NOISE = 4, K_ALL = 8, K_LEDGER = 16, K_DEVICES = 32, K_SELFTEST = 64,
       K_ISA = 128, K_DIFF = 256 };
#define K_RUNS (K_CASE | K_COMPARE | K_NOISE | K_ALL)   /* the commands that run cases */
static const char *const K_NAMES[] = { "gemm, grouped, attn", "compare", "noise", "all", "ledger", "devices",
                                       "selftest", "isa", "diff" };

/* Every run option: whether it takes a value, and the commands it means
 * something to.  An option given to any other command, or given twice
 * (except -D, which adds a definition each time), is refused. */
static const struct opt_row { const char *key; int takes_value; unsigned cmds; } OPT_ROWS[] = {
    { "--device", 1, K_RUNS | K_SELFTEST | K_ISA },  { "--kernels", 1, K_RUNS | K_SELFTEST | K_ISA },
    { "--shapes", 1, K_ALL },                       { "--seed", 1, K_RUNS | K_SELFTEST },
    { "--rtol", 1, K_RUNS },                        { "--atol", 1, K_RUNS },
    { "--why", 1, K_RUNS },                         { "--inject", 1, K_RUNS },
    { "--arch", 1, K_ISA },                         { "--repeat", 1, K_RUNS },
    { "--trades-precision", 1, K_RUNS },            { "--variant", 1, K_RUNS | K_SELFTEST | K_ISA },
    { "-D", 1, K_RUNS | K_SELFTEST | K_ISA },       { "--diagnostic", 0, K_RUNS | K_SELFTEST | K_ISA },
    { "--ledger", 1, K_RUNS | K_LEDGER },           { "--budget", 1, K_RUNS },
    { "--expect", 1, K_RUNS | K_ISA },              { "--rounds", 1, K_COMPARE | K_NOISE },
    { "--dump", 1, K_CASE | K_ALL },                { "--seeds", 1, K_CASE | K_ALL },
    { "--json", 0, K_RUNS | K_DIFF },               { "--full", 0, K_RUNS | K_SELFTEST },
    { "--timeout", 1, K_RUNS },                     { "--wide", 0, K_RUNS },
    { "--graph", 0, K_RUNS | K_SELFTEST },          { "--cpu-sums", 1, K_CASE | K_ALL },
};

/* The row of OPT_ROWS for argument `key` ("-DNAME" is -D's), or -1. */
static int opts_row(const char *key)
{
    for (size_t i = 0; i < sizeof OPT_ROWS / sizeof *OPT_ROWS; i++)
        if (strcmp(key, OPT_ROWS[i].key) == 0 || (OPT_ROWS[i].key[1] == 'D' && strncmp(key, "-D", 2) == 0))
            return (int)i;
    return -1;
}

/* Exit 2 if option row `row` (given as `key`) means nothing to the command
 * of o (o->cmd_kind) or was given before; note it as given. */
static void opts_check_use(struct opts *o, int row, const char *key)
{
    if (!o->cmd_kind) return;
    unsigned cmds = OPT_ROWS[row].cmds;
    if (!(cmds & o->cmd_kind)) {
        char list[160] = "";
        int n = 0, k = 0;
        for (unsigned b = 0; b < 9; b++) n += (cmds >> b) & 1;
        for (unsigned b = 0; b < 9; b++)
            if ((cmds >> b) & 1)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", k == 0 ? "" : k == n - 1 ? " and " : ", ",
                         K_NAMES[b]), k++;
        die(EXIT_USAGE, "%s: %s does not take it (only %s %s)", key, o->command, list, n == 1 ? "does" : "do");
    }
    if (OPT_ROWS[row].key[1] == 'D') return;
    if (o->seen & 1ull << row) die(EXIT_USAGE, "%s is given twice: give it once", key);
    o->seen |= 1ull << row;
}

/* The whole-number value `val` of option `key`, from lo to hi; exit 2
 * saying so otherwise. */
static int opts_whole(const char *key, const char *val, int lo, int hi)
{
    uint64_t v;
    if (parse_u64(val, (uint64_t)lo, (uint64_t)hi, &v) != 0)
        die(EXIT_USAGE, "%s %s: expected a whole number from %d to %d", key, shown(val), lo, hi);
    return (int)v;
}

/* A -D definition: NAME or NAME=VALUE, NAME an identifier, VALUE without
 * spaces or quotes (it reaches the compiler as one option). */
static int opts_define_ok(const char *d)
{
    if (!(isalpha((unsigned char)*d) || *d == '_')) return 0;
    size_t n = strspn(d, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_");
    if (!d[n]) return 1;
    if (d[n] != '=' || !d[n + 1]) return 0;
    for (const char *p = d + n + 1; *p; p++)
        if (isspace((unsigned char)*p) || *p == '"' || *p == '\'' || *p == '\\') return 0;
    return 1;
}

/* The porting options (--variant, -D, --diagnostic, --ledger, --budget,
 * --expect, --rounds); `val` is the next argument.  Returns the arguments
 * used, 0 if `key` is none of them; exit 2 on a bad value. */
static int opts_parse_variant(struct opts *o, const char *key, const char *val)
{
    if (strcmp(key, "--diagnostic") == 0) { o->diagnostic = 1; return 1; }
    if (strncmp(key, "-D", 2) == 0) {
        const char *d = key[2] ? key + 2 : val;
        if (!opts_define_ok(d)) die(EXIT_USAGE, "-D %s: expected NAME or NAME=VALUE (an identifier; no spaces or quotes)", shown(d));
        if (o->ndefines == MAX_DEFINES) die(EXIT_USAGE, "-D %s: at most %d definitions", shown(d), MAX_DEFINES);
        o->defines[o->ndefines++] = d;
        return key[2] ? 1 : 2;
    }
    if (strcmp(key, "--variant") == 0) {
        size_t n = strspn(val, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-.");
        if (!*val || val[n] || n > 48)
            die(EXIT_USAGE, "--variant %s: expected a name of up to 48 letters, digits, '_', '-' and '.'", shown(val));
        o->variant = val;
        return 2;
    }
    if (strcmp(key, "--ledger") == 0) {
        if (!*val) die(EXIT_USAGE, "--ledger: expected a file name, not an empty one");
        o->ledger_path = val;
        return 2;
    }
    if (strcmp(key, "--budget") == 0) { o->budget = opts_whole(key, val, 1, 1000); return 2; }
    if (strcmp(key, "--rounds") == 0) { o->rounds = opts_whole(key, val, 2, 100); return 2; }
    if (strcmp(key, "--expect") == 0) {
        if (matrix_class(val) < 0) die(EXIT_USAGE, "--expect %s: expected wgmma, mma, mfma or wmma", shown(val));
        o->expect = val;
        return 2;
    }
    return 0;
}

/* Exit 2 unless `val` is a device list: `all`, or entries separated by
 * commas, each a GPU number (0..1024) or `cpu`, at most NODE_MAX; the same
 * entry may be named twice.  Returns 1 if an entry is `cpu`. */
static int opts_device_list(const char *val)
{
    if (strcmp(val, "all") == 0) return 0;
    int n = 0, cpu = 0;
    for (const char *p = val;; p++) {
        size_t len = strcspn(p, ",");
        char e[16];
        uint64_t v;
        snprintf(e, sizeof e, "%.*s", (int)(len < sizeof e ? len : sizeof e - 1), p);
        if (++n > NODE_MAX) die(EXIT_USAGE, "--device %s: at most %d entries", shown(val), NODE_MAX);
        if (len == 0) die(EXIT_USAGE, "--device %s: entry %d is empty (a list: 0,3,5 or cpu,cpu)", shown(val), n);
        if (len >= sizeof e || (strcmp(e, "cpu") != 0 && parse_u64(e, 0, 1024, &v) != 0))
            die(EXIT_USAGE, "--device %s: entry %d: expected a device number or 'cpu'", shown(val), n);
        cpu |= strcmp(e, "cpu") == 0;
        p += len;
        if (!*p) return cpu;
    }
}

/* Run option argv[i] (and its value argv[i + 1]) into o: returns how many
 * arguments were used (1 or 2), or 0 if argv[i] is not a run option.  Exit
 * 2 on a bad or missing value, an option given twice (-D excepted), or one
 * that means nothing to the command (o->cmd_kind, when set). */
static int opts_parse(struct opts *o, int argc, char **argv, int i)
{
    const char *key = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
    int row = opts_row(key);
    if (row < 0) return 0;
    if (OPT_ROWS[row].takes_value && !(key[1] == 'D' && key[2]) && !val)
        die(EXIT_USAGE, "%s needs a value (see kgate --help)", key);
    opts_check_use(o, row, key);
    if (strcmp(key, "--json") == 0) { o->json = 1; return 1; }
    if (strcmp(key, "--full") == 0) { o->full = 1; return 1; }
    if (strcmp(key, "--wide") == 0) { o->wide = 1; return 1; }
    if (strcmp(key, "--graph") == 0) { o->graph = 1; return 1; }
    if (strcmp(key, "--cpu-sums") == 0) {
        if (strcmp(val, "fp32") != 0 && strcmp(val, "sm90a") != 0)
            die(EXIT_USAGE, "--cpu-sums %s: expected fp32 or sm90a", shown(val));
        o->cpu_sums_sm90 = strcmp(val, "sm90a") == 0;
        return 2;
    }
    if (strcmp(key, "--timeout") == 0) {
        if (parse_nonneg(val, &o->timeout) != 0 || !(o->timeout > 0) || o->timeout > TIMEOUT_MAX_S)
            die(EXIT_USAGE, "--timeout %s: expected seconds, more than 0 and at most %.0f", shown(val), TIMEOUT_MAX_S);
        return 2;
    }
    if (strcmp(key, "--device") == 0) {
        uint64_t v;
        if (strcmp(val, "cpu") == 0) o->device_cpu = 1;
        else if (parse_u64(val, 0, 1024, &v) == 0) o->device_index = (int)v, o->device_cpu = 0;
        else if (strchr(val, ',') || strcmp(val, "all") == 0) o->device_list_cpu = opts_device_list(val), o->device_list = val;
        else die(EXIT_USAGE, "--device %s: expected a device number, 'cpu', 'all' or a list (0,3,5; cpu,cpu)",
                 shown(val));
        return 2;
    }
    if (strcmp(key, "--seed") == 0) {
        if (parse_u64(val, 0, UINT64_MAX, &o->seed) != 0)
            die(EXIT_USAGE, "--seed %s: expected a whole number from 0 to 18446744073709551615 (2^64 - 1)", shown(val));
        return 2;
    }
    if (strcmp(key, "--repeat") == 0) { o->repeat = opts_whole(key, val, 1, 1000); return 2; }
    if (strcmp(key, "--rtol") == 0 || strcmp(key, "--atol") == 0) {
        double *dst = key[2] == 'r' ? &o->rtol : &o->atol;
        if (parse_nonneg(val, dst) != 0) die(EXIT_USAGE, "%s %s: expected a number >= 0", key, shown(val));
        return 2;
    }
    if (strcmp(key, "--seeds") == 0) { o->seeds = opts_whole(key, val, 1, 1000); return 2; }
    if (strcmp(key, "--dump") == 0) {
        if (!*val) die(EXIT_USAGE, "--dump needs a directory");
        o->dump_dir = val;
        return 2;
    }
    if (strcmp(key, "--kernels") == 0) { o->kernels_path = val; return 2; }
    if (strcmp(key, "--shapes") == 0) { o->shapes_path = val; return 2; }
    if (strcmp(key, "--why") == 0) { check_reason(key, val); o->why = val; return 2; }
    if (strcmp(key, "--inject") == 0) { o->inject = val; return 2; }
    if (strcmp(key, "--arch") == 0) { o->arch = val; return 2; }
    if (strcmp(key, "--trades-precision") == 0) {
        check_reason(key, val);
        o->trades_precision = val;
        return 2;
    }
    return opts_parse_variant(o, key, val);
}

static const char USAGE[] =
    "usage: kgate COMMAND [options]      kgate COMMAND --help: that command alone; kgate --version\n"
    "\n"
    "Is a GPU kernel right, and only then, how fast?  Every output is gated against\n"
    "CPU references; a time is printed only for a case that passed every gate.\n"
    "\n"
    "commands:\n"
    "  all       [--shapes FILE] [--seeds N] every case of a shapes file (default ./shapes.txt, else\n"
    "                                        shapes.txt beside the kgate binary; at most 1 MiB),\n"
    "                                        each run 3 times (2 on --device cpu) unless --repeat;\n"
    "                                        --seeds N: on seeds --seed .. +N-1 (after the first\n"
    "                                        gated, not timed), and how many each case passed\n"
    "  gemm      --shape MxNxK [--dtype D] [--layout L] [--bwd]\n"
    "                                        one GEMM: C = A·B; --bwd adds dA = dC·Bᵀ, dB = Aᵀ·dC\n"
    "  grouped   --groups M1,M2,... --shape NxK [--dtype D] [--layout NN|NT] [--bwd]\n"
    "                                        a grouped (MoE) GEMM: C_g = A_g·B_g per group\n"
    "  attn      --heads Hq[:Hkv] --dim D (--seq Sq[:Sk] [--batch B] | --seqlens S,Sq:Sk,...)\n"
    "            [--causal] [--scale X] [--dtype f16|bf16] [--bwd]\n"
    "                                        attention: O and LSE; --bwd adds dQ, dK, dV\n"
    "  compare   CASE --variant NAME (-D K=V ... | --kernels FILE)\n"
    "                                        the reference arm (kernels.hip as shipped) and the\n"
    "                                        candidate: every gate on both, then timed interleaved in\n"
    "                                        rounds: time ratio, spread, A/A band, faster|parity|slower\n"
    "  noise     CASE                        the A/A band: the arm timed against a copy of itself\n"
    "  ledger    [verify | best]             the ledger as a table; check its hash chain; the best\n"
    "                                        correct checkpoint per case\n"
    "  devices                               list the CPU and the GPUs the runtime sees, each GPU with\n"
    "                                        its SMs, clock, memory and identity (exit 0 with the CPU\n"
    "                                        alone when no GPU runtime is found)\n"
    "  selftest                              prove every gate against clean runs and planted faults\n"
    "  isa       [--arch A] [--expect C]     compile kernels.hip for A (sm_90a, gfx942, ...; default\n"
    "                                        GPU 0; gfx* without hiprtc: clang offline) and list per\n"
    "                                        kernel its matrix instructions, registers, shared memory\n"
    "                                        and spills; --expect wgmma|mma|mfma|wmma: exit 1 unless a\n"
    "                                        kernel has them (always when no disassembler can count)\n"
    "  diff      A B [--json]                two --dump directories of one case and seed (two GPUs,\n"
    "                                        machines or builds): per output the share bitwise equal,\n"
    "                                        max ulps apart, SNR A vs B and each vs its reference, the\n"
    "                                        worst 128x128 tile; equal, within the precision of the\n"
    "                                        dtype (every element within 1 ulp, or SNR A vs B at least\n"
    "                                        the better SNR vs reference - 6 dB, its worst tile - 10),\n"
    "                                        exit 0; different, exit 1; other case/seed/inputs: exit 2\n"
    "  codec     FORMAT [--fp8 ocp|fnuz] (--decode-all | X ...)\n"
    "                                        ref.c's codecs: e4m3, e5m2, e4m3fnuz, e5m2fnuz, e2m1,\n"
    "                                        e8m0 (decode only); values from stdin, one a line, when\n"
    "                                        none given\n"
    "\n"
    "case options:\n"
    "  --dtype D        f32, f16, bf16 (default bf16; attn: f16, bf16); inputs and outputs,\n"
    "                   fp32 accumulation; gemm and grouped also take the low-precision dtypes\n"
    "  --layout L       gemm: NN, NT, TN, TT (default NT): A then B; N = A [M][K], B [K][N];\n"
    "                   T = A stored [K][M], B stored [N][K].  grouped: NN (B [G][K][N]) or\n"
    "                   NT (B [G][N][K]); A is [sum M][K]\n"
    "  --shape MxNxK    gemm; grouped: NxK.  Each dimension 1..1048576\n"
    "  --groups LIST    grouped: the group sizes M_g, comma-separated, 0 allowed (up to 4096\n"
    "                   groups; not all 0)\n"
    "  --seq Sq[:Sk]    attn: query and key length of every sequence, each 1..1048576\n"
    "  --batch B        attn: with --seq, the sequences (1..4096, default 1)\n"
    "  --seqlens LIST   attn: varlen batch, one entry per sequence: S, or Sq:Sk (0 allowed; at\n"
    "                   most 4096 entries, and some sequence with queries and keys)\n"
    "  --heads Hq[:Hkv] attn: query heads (up to 1024), KV heads (Hq a multiple of Hkv: MHA,\n"
    "                   GQA, MQA)\n"
    "  --dim D          attn: head dim, 1..256\n"
    "  --causal         attn: causal mask, bottom-right aligned when Sq != Sk\n"
    "  --scale X        attn: softmax scale, > 0 and at most 1e4 (default 1/sqrt(D))\n"
    "  --bwd            the backward outputs too, each gated\n"
    "  --inputs NAME    uniform (in [-1,1), max|x| = 1), normal (N(0,1/3)) or scaled (row, block\n"
    "                   and outlier-channel magnitudes spanning 2^+-8; the default of fp8 and MX)\n"
    "\n"
    "low precision (gemm and grouped; layout NT, forward; gated by SNR, README):\n"
    "  --dtype e4m3|e5m2 [--scaling tensor|row|block]   fp8, fp32 scales (default tensor; block:\n"
    "                   A 1x128, B 128x128)\n"
    "  --dtype mxfp8|mxfp8e5m2|mxfp4 [--mx-rule spec|up]   MX: blocks of 32, E8M0 scales (their\n"
    "                   one --scaling, mx); spec (default): the OCP MX rule, up: rounded up\n"
    "                   (NVIDIA, TransformerEngine)\n"
    "  --out bf16|f32   the output (default bf16)\n"
    "  --fp8 ocp|fnuz   the fp8 encoding (default: the device's; OCP on NVIDIA and the CPU)\n"
    "\n"
    "run options:\n"
    "  --device N|cpu   GPU N (default 0), or cpu: ref.c's candidate runs the same pipeline\n"
    "  --device N       isa: GPU N's arch is the default --arch (default 0; a GPU only)\n"
    "  --device all|LIST  every GPU, or a list (0,3,5; cpu,cpu; 0,cpu; an entry may repeat):\n"
    "                   all and the case commands run each entry in its own kgate, all at once,\n"
    "                   then compare the entries of one model: each output's SHA-256 against\n"
    "                   the majority, the time per case against the median entry (slow above\n"
    "                   1.25x; CPU entries 3x); a summary row per entry (README)\n"
    "  --kernels FILE   compile FILE instead of the embedded kernels.hip (same entry points;\n"
    "                   a GPU device only: the CPU device always runs ref.c's candidate)\n"
    "  --seed N         input seed, 0..2^64-1 (default 42; printed)\n"
    "  --seeds N        run each case on seeds --seed .. +N-1 (1..1000; the first gated and\n"
    "                   timed, the others gated) and count the seeds each passed\n"
    "  --repeat N       run each case N times on the same inputs (1..1000): outputs must be\n"
    "                   bitwise equal, or, for kernels that declare atomics, pass every gate\n"
    "  --full           check every element (default: all up to 2^31 multiply-adds per output,\n"
    "                   a tile-covering sample above)\n"
    "  --rtol X --atol Y  allclose tolerances (defaults: f32 1e-4, f16/bf16 1e-2; attention\n"
    "                   gradients: see README); looser than the default needs --why \"reason\"\n"
    "  --why TEXT       the reason for a looser tolerance, printed in the report (UTF-8 text,\n"
    "                   not blank; only with --rtol or --atol)\n"
    "  --inject KIND    plant a fault in the candidate's output (compare: the candidate arm's;\n"
    "                   noise: the first arm's): tile, tail, nan, bias, drop, row,\n"
    "                   unwritten, outside, input-outside, input-inside, input-timed,\n"
    "                   fragment, race; grouped and attn: group; gemm and grouped:\n"
    "                   small-row, round; them and attn --bwd: tilepos; causal attn: mask;\n"
    "                   low precision: scale, quant, scale-index, precision; --graph:\n"
    "                   graph-alloc, graph-sync, graph-diff; the gate meant for it must fail;\n"
    "                   fault: the worker dies (verdict fault); a device list: KIND@N plants\n"
    "                   KIND in entry N alone; bitflip@N (a digest differs) and slow@N (each\n"
    "                   timed launch runs 8 times) are caught by the cross-device checks\n"
    "  --trades-precision TEXT  low precision: waive the 3 dB baseline rule, for this reason\n"
    "  --timeout S      the watchdog: a launch that has not ended after S seconds is hung\n"
    "                   (default: max(10 s, 100 x the case's time at the device's peak; the\n"
    "                   CPU candidate's at 1 GFLOP/s; at most 86400)); its case is reported hung,\n"
    "                   the run goes on\n"
    "  --wide           the full table: every gate's column, SNRs, rel-l2, the timer's spread,\n"
    "                   and geometry and timer lines under each timed row\n"
    "  --expect C       a gate: each arm's code object must hold matrix instructions of class C\n"
    "                   (wgmma, mma, mfma, wmma), or the case fails (the CPU device has none)\n"
    "  --json           one JSON object per case on stdout (the summary goes to stderr)\n"
    "  --graph          the graph path: each launch (packing, quantizing and every kernel of\n"
    "                   a backward included) captured once into a CUDA graph or hipGraph and\n"
    "                   replayed, gated, compared bit for bit with an eager run, and timed\n"
    "                   (a GPU device only)\n"
    "  --dump DIR       write inputs, outputs and double references as .npy files and a\n"
    "                   manifest (all: DIR/case-NNN) for bench/oracle.py\n"
    "  --cpu-sums fp32|sm90a   --device cpu, low precision: the candidate sums fp8 and MX\n"
    "                   products in fp32 (default), or as sm_90a's tensor cores do (ref.c's\n"
    "                   model; bit for bit the H200's fp8 outputs on the cases tests.sh records)\n"
    "\n"
    "porting (CASE: a case as on the command line, e.g. gemm --shape 2048x2048x2048):\n"
    "  --variant NAME   the candidate's name; with -D or --kernels it makes a candidate arm\n"
    "  -D NAME[=VALUE]  a definition for the candidate's compile (repeatable; e.g. GEMM_BM=128)\n"
    "  --diagnostic     the variant counts against the budget but is not deliverable\n"
    "  --rounds N       compare and noise: interleaved rounds (2..100, default 10); faster or\n"
    "                   slower need at least 7 (below that the verdict is parity)\n"
    "  --ledger FILE    the ledger (default ./kgate.ledger; kept by compare and noise, and by\n"
    "                   any run of a candidate or given --ledger)\n"
    "  --budget N       distinct candidate code objects the ledger may hold (1..1000, default 3);\n"
    "                   a new one beyond it is refused with exit 4\n"
    "An option may be given once (-D excepted), and only to a command it means something to.\n"
    "\n"
    "exit: 0 every gate passed (skipped cases: the device lacks their format, or the CPU device\n"
    "        their size), 1 a gate failed (diff: 0 equal or within the dtype's precision,\n"
    "        1 different; ledger and ledger verify: 1 a line breaks the chain),\n"
    "      2 bad usage or input, 3 no GPU runtime (or run-time compiler), 4 budget spent,\n"
    "      5 device, kernel or compiler error (a case that faulted or hung: the run goes on,\n"
    "        and 5 outranks 1), 6 a file could not be written (ledger, cache, dump): disk\n"
    "        full or I/O error\n"
    "      a device list: 1 also for an entry that disagrees or is slow, 5 for one that faulted\n"
    "        or hung (5 outranks 1), and an entry's own 2, 3, 4 or 6 (the first) outranks both\n"
    "environment: KGATE_CACHE (code-object cache dir; else $XDG_CACHE_HOME/kgate, else\n"
    "      ~/.cache/kgate, else ./.kgate-cache when HOME is unset), KGATE_THREADS (1..256),\n"
    "      KGATE_REF_PORTABLE (1: the references' portable build, not the AVX2+FMA one),\n"
    "      KGATE_NVRTC, KGATE_HIPRTC, KGATE_CUDA, KGATE_HIP (library paths),\n"
    "      KGATE_COMPILE_TIMEOUT (seconds, 1..86400, default 600)\n";

/* The line of USAGE that begins with `head`, or the empty end of USAGE. */
static const char *usage_find(const char *head)
{
    const char *p = USAGE;
    size_t hn = strlen(head);
    while (*p && strncmp(p, head, hn) != 0) p = strchr(p, '\n') ? strchr(p, '\n') + 1 : p + strlen(p);
    return p;
}

/* Print the part of USAGE that starts at the line beginning with `head`
 * and ends before the first line for which `end` says so; 0 if there is no
 * such line. */
static int usage_print_from(const char *head, int (*end)(const char *line))
{
    const char *p = usage_find(head);
    if (!*p) return 0;
    do {
        size_t n = strcspn(p, "\n");
        printf("%.*s\n", (int)n, p);
        p += n + (p[n] == '\n');
    } while (*p && !end(p));
    return 1;
}

/* Where a command's entry under "commands:" ends: the next command (two
 * spaces and a name) or a blank line. */
static int usage_end_command(const char *line)
{
    return *line == '\n' || (line[0] == ' ' && line[1] == ' ' && line[2] != ' ');
}

/* Where a section of options ends: a blank line. */
static int usage_end_section(const char *line) { return *line == '\n'; }

/* The help entries whose commands OPT_ROWS cannot say: an option whose
 * entries differ by command (--device: isa's is a GPU alone; a device list
 * is for all and the case commands), an option of low-precision cases,
 * which attn never is, and the case options of one op (compare and noise
 * take any op's).  cmds: the commands that show the entry (a new command
 * that takes --device goes in the first row too). */
static const struct { const char *entry, *cmds; } HELP_WHERE[] = {
    { "--device N|cpu ", " all gemm grouped attn compare noise selftest " },
    { "--device N ", " isa " },
    { "--device all|LIST ", " all gemm grouped attn " },
    { "--trades-precision ", " all gemm grouped compare noise " },
    { "--cpu-sums ", " all gemm grouped " },
    { "--layout ", " gemm grouped compare noise " },
    { "--shape ", " gemm grouped compare noise " },
    { "--groups ", " grouped compare noise " },
    { "--seq ", " attn compare noise " },
    { "--batch ", " attn compare noise " },
    { "--seqlens ", " attn compare noise " },
    { "--heads ", " attn compare noise " },
    { "--dim ", " attn compare noise " },
    { "--causal ", " attn compare noise " },
    { "--scale ", " attn compare noise " },
};

/* Whether USAGE's option entry at line p (after its two spaces) is shown to
 * command cmd of kind `kind`: HELP_WHERE's row for it, else OPT_ROWS's. */
static int usage_entry_shown(const char *p, const char *cmd, unsigned kind)
{
    char key[40], word[40];
    for (size_t i = 0; i < sizeof HELP_WHERE / sizeof *HELP_WHERE; i++)
        if (strncmp(p, HELP_WHERE[i].entry, strlen(HELP_WHERE[i].entry)) == 0) {
            snprintf(word, sizeof word, " %s ", cmd);
            return strstr(HELP_WHERE[i].cmds, word) != NULL;
        }
    snprintf(key, sizeof key, "%.*s", (int)strcspn(p, " \n"), p);
    int row = opts_row(key);
    return row < 0 || (OPT_ROWS[row].cmds & kind);
}

/* Print the section of USAGE that starts at the line beginning with `head`
 * (up to a blank line), leaving out each option entry (its line "  --key
 * ..." and the deeper-indented lines under it) that means nothing to
 * command cmd of kind `kind` (usage_entry_shown). */
static void usage_print_section(const char *head, const char *cmd, unsigned kind)
{
    const char *p = usage_find(head);
    int skip = 0;
    while (*p && *p != '\n') {
        size_t n = strcspn(p, "\n");
        if (p[0] == ' ' && p[1] == ' ' && p[2] == '-') {   /* an entry */
            skip = !usage_entry_shown(p + 2, cmd, kind);
        } else if (p[0] != ' ') {
            skip = 0;   /* a heading or a note */
        }
        if (!skip) printf("%.*s\n", (int)n, p);
        p += n + (p[n] == '\n');
    }
}

/* kgate COMMAND --help: COMMAND's entry of USAGE and the option sections
 * it takes, each without the run options that mean nothing to it
 * (usage_print_section), then the exit codes.  Exit 0, or 2 for an unknown
 * command. */
static int opts_command_help(const char *cmd)
{
    static const struct { const char *cmd; unsigned kind; const char *sections[4]; } TAKES[] = {
        { "all", K_ALL, { "run options:", "porting" } },
        { "gemm", K_CASE, { "case options:", "low precision", "run options:", "porting" } },
        { "grouped", K_CASE, { "case options:", "low precision", "run options:", "porting" } },
        { "attn", K_CASE, { "case options:", "run options:", "porting" } },
        { "compare", K_COMPARE, { "case options:", "low precision", "run options:", "porting" } },
        { "noise", K_NOISE, { "case options:", "low precision", "run options:", "porting" } },
        { "ledger", K_LEDGER, { "porting" } }, { "devices", K_DEVICES, { NULL } },
        { "selftest", K_SELFTEST, { "run options:", "porting" } }, { "isa", K_ISA, { "run options:", "porting" } },
        { "codec", 0, { NULL } }, { "diff", K_DIFF, { "run options:" } },
    };
    char head[32];
    for (size_t i = 0; i < sizeof TAKES / sizeof *TAKES; i++) {
        if (strcmp(cmd, TAKES[i].cmd) != 0) continue;
        printf("usage: kgate %s [options]\n\n", cmd);
        snprintf(head, sizeof head, "  %s ", cmd);
        usage_print_from(head, usage_end_command);
        for (int s = 0; s < 4 && TAKES[i].sections[s]; s++) {
            printf("\n");
            usage_print_section(TAKES[i].sections[s], cmd, TAKES[i].kind);
        }
        printf("\n");
        usage_print_from("exit:", usage_end_section);
        return EXIT_PASS;
    }
    die(EXIT_USAGE, "%.60s --help: unknown command (kgate --help lists them)", cmd);
}

/* kgate --version: the version, the embedded kernels.hip's sha256 and the
 * compiler that built kgate. */
static int opts_version(void)
{
    char sha[65];
    sha256_text(kg_embedded_src, strlen(kg_embedded_src), sha);
#if defined(__clang__)
    const char *cc = "clang " __clang_version__;
#elif defined(__GNUC__)
    const char *cc = "gcc " __VERSION__;
#else
    const char *cc = "an unknown C compiler";
#endif
    printf("kgate %s (embedded kernels.hip %.12s; built with %s)\n", KGATE_VERSION, sha, cc);
    return EXIT_PASS;
}

/* Open the device the options name: the CPU, or GPU N (each arm builds
 * and loads its own kernels). */
static void opts_open_device(struct device *d, const struct opts *o)
{
    memset(d, 0, sizeof *d);
    if (o->device_cpu) {
        cpu_open(d);
        return;
    }
    gpu_open(d, o->device_index);
}

/* Give back what opts_open_device took. */
static void opts_close_device(struct device *d)
{
    dev_free(d, d->flush);
    dev_free(d, d->clock_buf);
    d->flush = d->clock_buf = 0;
}

/* kgate devices: the CPU, and every GPU the runtime sees.  With no GPU
 * runtime it says so on stderr and still exits 0: the CPU device is there. */
static int cmd_devices(const struct opts *o, const char *sub)
{
    (void)o, (void)sub;
    struct device d;
    memset(&d, 0, sizeof d);
    char cpu[256], msg[2600];
    cpu_name(cpu, sizeof cpu);
    printf("cpu  %s (--device cpu)\n", cpu);
    if (gpu_try_runtime(&d, msg, sizeof msg) != 0) {
        fflush(stdout);
        fprintf(stderr, "kgate: %s; only the CPU device is available\n", msg);
        return EXIT_PASS;
    }
    int n = 0;
    d.rt.dev_count(&n);
    for (int i = 0; i < n; i++) {
        struct device g;
        memset(&g, 0, sizeof g);
        g.pf = d.pf, g.rt = d.rt, g.rtc = d.rtc;
        int h;
        gpu_check(&g, g.rt.dev_get(&h, i), "getting a device");
        char name[256] = "";
        g.rt.dev_name(name, sizeof name, h);
        int sms = 0, khz = 0;
        g.rt.dev_attr(&sms, ATTR_ID[g.pf][AT_SMS], h);
        g.rt.dev_attr(&khz, ATTR_ID[g.pf][AT_CLOCK_KHZ], h);
        size_t mem = 0;
        g.rt.dev_mem(&mem, h);
        char pci[32], uuid[48];
        gpu_identity(&g, h, pci, sizeof pci, uuid, sizeof uuid);
        printf("%-4d %s, %d SMs/CUs, clock %d MHz, %.1f GiB (%s), PCI %s, UUID %s\n", i, name, sms, khz / 1000,
               mem / 1073741824.0, PF_NAME[g.pf], *pci ? pci : "not known", *uuid ? uuid : "not known");
    }
    return EXIT_PASS;
}
