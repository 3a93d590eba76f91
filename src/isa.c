/* src/isa.c — `kgate isa` and the --expect gate: a code object
 * disassembled (cuobjdump, nvdisasm, llvm-objdump) and its resources read,
 * matrix-unit instructions counted per kernel.  Relies on util.c (child
 * processes), gpu.c, options.c, compile.c, run.c and report.c (an arm's
 * case, for --expect). */

/* A function's resources, as its compiler recorded them (-1: not recorded). */
enum { IR_REGS, IR_AGPRS, IR_SGPRS, IR_SHARED, IR_STACK, IR_LOCAL, IR_VSPILL, IR_SSPILL, IR_COUNT };
/* The resource columns of each platform: heading and resource. */
static const struct { const char *head; int r; } ISA_COLUMNS[PF_COUNT][IR_COUNT] = {
    { { "regs", IR_REGS }, { "shared", IR_SHARED }, { "stack", IR_STACK }, { "local", IR_LOCAL } },
    { { "vgpr", IR_REGS }, { "agpr", IR_AGPRS }, { "sgpr", IR_SGPRS }, { "lds", IR_SHARED },
      { "scratch", IR_STACK }, { "vspill", IR_VSPILL }, { "sspill", IR_SSPILL } },
};

static const char *const VENDOR[PF_COUNT] = { "NVIDIA", "AMD" };

/* The class of opcode `op` on platform pf, or -1: op is one of the class's
 * prefixes followed by '.', '_' or nothing ("HMMA.16816.F32.BF16",
 * "v_mfma_f32_32x32x8_bf16"). */
static int isa_op_class(enum platform pf, const char *op)
{
    for (int c = 0; c < IC_COUNT; c++) {
        if (MATRIX_CLASSES[c].pf != pf) continue;
        for (int i = 0; MATRIX_CLASSES[c].ops[i]; i++) {
            size_t len = strlen(MATRIX_CLASSES[c].ops[i]);
            if (strncmp(op, MATRIX_CLASSES[c].ops[i], len) == 0 && strchr("._", op[len])) return c;
        }
    }
    return -1;
}

/* A key of a tool's resource records, and the resource it gives. */
struct isa_key { const char *key; int r; };

/* The resource that `key` (klen characters) names in keys[0..n), or -1. */
static int isa_key(const struct isa_key *keys, size_t n, const char *key, size_t klen)
{
    for (size_t i = 0; i < n; i++)
        if (strlen(keys[i].key) == klen && strncmp(key, keys[i].key, klen) == 0) return keys[i].r;
    return -1;
}

/* One function of a code object, as its disassembly shows it. */
struct isa_kernel {
    char name[128];
    int listed;                /* the disassembler showed its code */
    int insts;                 /* instructions, not counting the nops that pad its end */
    int nops;                  /* nops since its last other instruction: padding, if last */
    int matrix[IC_COUNT];      /* matrix-unit instructions, by class */
    char first[64];            /* the first matrix instruction's opcode; "" if none */
    long res[IR_COUNT];
};

/* A line parser's state across the lines of one tool's output. */
struct isa_parse {
    int cur;                   /* the function lines now belong to; -1 none */
    int field;                 /* nvdisasm: the resource a coming value gives; -1 none */
    char name[128];            /* ... and whose */
    long vals[IR_COUNT];       /* llvm-readobj: a record's values before its .name */
};

struct isa_list;

/* A tool that lists a code object: the names it is looked for under, its
 * option, the parser of its output lines, and (for resources) what the
 * resource columns then mean. */
struct isa_tool {
    enum platform pf;
    const char *names[6];
    const char *arg;           /* NULL: the code object is its only argument */
    void (*line)(struct isa_list *l, struct isa_parse *p, const char *line);
    const char *legend;        /* NULL: it gives no resources */
};

/* The listing of one code object: its functions in the disassembler's
 * order, and the tools that made it. */
struct isa_list {
    enum platform pf;
    char bin[PATH_MAX];
    struct isa_kernel *k;
    int n, cap;
    const struct isa_tool *dis, *res;   /* res NULL: no resource reader found */
    char dis_path[PATH_MAX], res_path[PATH_MAX];
    char res_tried[512];                /* the resource readers looked for */
};

/* The index of function `name` (its first `len` characters) in l, or -1. */
static int isa_find(const struct isa_list *l, const char *name, size_t len)
{
    for (int i = 0; i < l->n; i++)
        if (strlen(l->k[i].name) == len && strncmp(l->k[i].name, name, len) == 0) return i;
    return -1;
}

/* The index of function `name` (`len` characters), added (resources not
 * recorded) if l lacks it. */
static int isa_add(struct isa_list *l, const char *name, size_t len)
{
    int i = isa_find(l, name, len);
    if (i >= 0) return i;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->k = realloc(l->k, (size_t)l->cap * sizeof *l->k);
        if (!l->k) die(EXIT_DEVICE, "out of host memory listing %s", l->bin);
    }
    struct isa_kernel *k = &l->k[l->n];
    memset(k, 0, sizeof *k);
    snprintf(k->name, sizeof k->name, "%.*s", (int)len, name);
    for (int r = 0; r < IR_COUNT; r++) k->res[r] = -1;
    return l->n++;
}

/* Count instruction `op` in function i (a nop once another instruction
 * follows it: the nops at the end of a function pad it). */
static void isa_count(struct isa_list *l, int i, const char *op)
{
    struct isa_kernel *k = &l->k[i];
    if (strcmp(op, l->pf == PF_CUDA ? "NOP" : "s_nop") == 0) {
        k->nops++;
        return;
    }
    k->insts += k->nops + 1;
    k->nops = 0;
    int c = isa_op_class(l->pf, op);
    if (c < 0) return;
    if (!*k->first) snprintf(k->first, sizeof k->first, "%s", op);
    k->matrix[c]++;
}

/* The opcode of a SASS code line (an address comment, an optional
 * predicate, then "HMMA.16816.F32 R8, ..."), or NULL for any other line
 * (encoding comments, labels, directives). */
static const char *sass_opcode(const char *line, char *buf, size_t n)
{
    const char *p = line + strspn(line, " \t"), *end = strstr(p, "*/");
    if (strncmp(p, "/*", 2) != 0 || !end) return NULL;
    p = end + 2 + strspn(end + 2, " \t");
    if (*p == '@') p += strcspn(p, " \t"), p += strspn(p, " \t");
    if (!(*p >= 'A' && *p <= 'Z')) return NULL;
    snprintf(buf, n, "%.*s", (int)strcspn(p, " \t;"), p);
    return buf;
}

/* cuobjdump -sass: "Function : NAME" opens a function, its code lines follow. */
static void parse_sass(struct isa_list *l, struct isa_parse *p, const char *line)
{
    const char *f = strstr(line, "Function : ");
    char op[64];
    if (f) {
        p->cur = isa_add(l, f + 11, strcspn(f + 11, " \t"));
        l->k[p->cur].listed = 1;
    } else if (p->cur >= 0 && sass_opcode(line, op, sizeof op)) {
        isa_count(l, p->cur, op);
    }
}

/* cuobjdump -res-usage: " Function NAME:" then "REG:40 STACK:0 SHARED:8448
 * LOCAL:0 CONSTANT[0]:...". */
static void parse_resusage(struct isa_list *l, struct isa_parse *p, const char *line)
{
    static const struct isa_key KEYS[] = {
        { "REG", IR_REGS }, { "STACK", IR_STACK }, { "SHARED", IR_SHARED }, { "LOCAL", IR_LOCAL },
    };
    const char *s = line + strspn(line, " \t");
    if (strncmp(s, "Function ", 9) == 0) {
        p->cur = isa_find(l, s + 9, strcspn(s + 9, ":"));
        return;
    }
    for (; p->cur >= 0 && *s; s += strcspn(s, " \t"), s += strspn(s, " \t")) {
        size_t klen = strcspn(s, ": \t");
        int r = s[klen] == ':' ? isa_key(KEYS, sizeof KEYS / sizeof *KEYS, s, klen) : -1;
        if (r >= 0) l->k[p->cur].res[r] = strtol(s + klen + 1, NULL, 10);
    }
}

/* nvdisasm (the whole cubin): a "//---- .text.NAME ----" header opens a
 * function's code.  Resources: the .nv.info records EIATTR_REGCOUNT and
 * EIATTR_MIN_STACK_SIZE ("index@(NAME)", then ".word 0x..."), and the sizes
 * (".zero N") of sections .nv.shared.NAME and .nv.local.NAME; nvdisasm shows
 * every section, so a function without them has none. */
static void parse_nvdisasm(struct isa_list *l, struct isa_parse *p, const char *line)
{
    const char *s;
    char op[64];
    if (strncmp(line, "//--", 4) == 0) {
        s = line + strspn(line, "/- ");
        size_t len = strcspn(s, " \t");
        p->cur = p->field = -1;
        if (strncmp(s, ".text.", 6) == 0) {
            p->cur = isa_add(l, s + 6, len - 6);
            struct isa_kernel *k = &l->k[p->cur];
            k->listed = 1;
            if (k->res[IR_SHARED] < 0) k->res[IR_SHARED] = 0;
            if (k->res[IR_LOCAL] < 0) k->res[IR_LOCAL] = 0;
        } else if (strncmp(s, ".nv.shared.", 11) == 0 || strncmp(s, ".nv.local.", 10) == 0) {
            p->field = s[4] == 's' ? IR_SHARED : IR_LOCAL;
            s += p->field == IR_SHARED ? 11 : 10, len -= p->field == IR_SHARED ? 11 : 10;
            snprintf(p->name, sizeof p->name, "%.*s", (int)len, s);
        }
    } else if ((s = strstr(line, "nvinfo : "))) {
        p->field = strstr(s, "EIATTR_REGCOUNT") ? IR_REGS : strstr(s, "EIATTR_MIN_STACK_SIZE") ? IR_STACK : -1;
        *p->name = 0;
    } else if (p->field >= 0 && (s = strstr(line, "index@("))) {
        snprintf(p->name, sizeof p->name, "%.*s", (int)strcspn(s + 7, ")"), s + 7);
    } else if (p->field >= 0 && *p->name && ((s = strstr(line, ".word")) || (s = strstr(line, ".zero")))) {
        int i = isa_add(l, p->name, strlen(p->name));
        l->k[i].res[p->field] = strtol(s + 5, NULL, 0);
        p->field = -1;
    } else if (p->cur >= 0 && sass_opcode(line, op, sizeof op)) {
        isa_count(l, p->cur, op);
    }
}

/* llvm-objdump -d: "0000000000001900 <NAME>:" opens a function; its
 * instructions are indented ("\tv_mfma_f32_32x32x8_bf16 v[0:15], ..."). */
static void parse_objdump(struct isa_list *l, struct isa_parse *p, const char *line)
{
    const char *s = strchr(line, '<');
    if (*line != ' ' && *line != '\t' && s && strstr(s, ">:")) {
        p->cur = isa_add(l, s + 1, strcspn(s + 1, ">"));
        l->k[p->cur].listed = 1;
        return;
    }
    if (p->cur < 0 || (*line != ' ' && *line != '\t')) return;
    s = line + strspn(line, " \t");
    if (*s < 'a' || *s > 'z') return;
    char op[64];
    snprintf(op, sizeof op, "%.*s", (int)strcspn(s, " \t"), s);
    isa_count(l, p->cur, op);
}

/* llvm-readobj --notes: the amdhsa.kernels metadata (YAML).  A kernel's
 * record starts "  - .key:", its keys are ".key: value" 4 columns in (its
 * .args list is deeper); its .name comes after some of its values. */
static void parse_notes(struct isa_list *l, struct isa_parse *p, const char *line)
{
    static const struct isa_key KEYS[] = {
        { ".vgpr_count", IR_REGS }, { ".agpr_count", IR_AGPRS }, { ".sgpr_count", IR_SGPRS },
        { ".group_segment_fixed_size", IR_SHARED }, { ".private_segment_fixed_size", IR_STACK },
        { ".vgpr_spill_count", IR_VSPILL }, { ".sgpr_spill_count", IR_SSPILL },
    };
    if (strncmp(line, "  - .", 5) == 0) {
        p->cur = -1;
        for (int r = 0; r < IR_COUNT; r++) p->vals[r] = -1;
    } else if (strncmp(line, "    .", 5) != 0) {
        return;
    }
    const char *key = line + 4, *val = key + strcspn(key, ":");
    size_t klen = (size_t)(val - key);
    if (!*val) return;
    val += 1 + strspn(val + 1, " '\"");
    if (klen == 5 && strncmp(key, ".name", 5) == 0) {
        if ((p->cur = isa_find(l, val, strcspn(val, " '\""))) >= 0)
            for (int r = 0; r < IR_COUNT; r++)
                if (p->vals[r] >= 0) l->k[p->cur].res[r] = p->vals[r];
        return;
    }
    int r = isa_key(KEYS, sizeof KEYS / sizeof *KEYS, key, klen);
    if (r >= 0) *(p->cur >= 0 ? &l->k[p->cur].res[r] : &p->vals[r]) = strtol(val, NULL, 10);
}

/* Disassemblers, per platform in order of preference.  cuobjdump's resources
 * come from ISA_RESOURCES; nvdisasm's from its own listing.  llvm-objdump 14
 * (Debian's unversioned one) cannot read gfx942, hence the newer ones first. */
static const struct isa_tool ISA_DISASM[] = {
    { PF_CUDA, { "cuobjdump", "/usr/local/cuda/bin/cuobjdump" }, "-sass", parse_sass, NULL },
    { PF_CUDA, { "nvdisasm", "/usr/local/cuda/bin/nvdisasm" }, NULL, parse_nvdisasm,
      "regs: registers per thread (EIATTR_REGCOUNT); shared: static shared memory, bytes per block; "
      "stack (EIATTR_MIN_STACK_SIZE), local: bytes per thread, nonzero for spills or local arrays "
      "(nvdisasm)" },
    { PF_HIP, { "/opt/rocm/llvm/bin/llvm-objdump", "llvm-objdump-20", "llvm-objdump-19", "llvm-objdump" },
      "-d", parse_objdump, NULL },
};
/* Resource readers, per platform in order of preference. */
static const struct isa_tool ISA_RESOURCES[] = {
    { PF_CUDA, { "cuobjdump", "/usr/local/cuda/bin/cuobjdump" }, "-res-usage", parse_resusage,
      "regs: registers per thread; shared: static shared memory, bytes per block; stack, local: bytes "
      "per thread, nonzero for spills or local arrays (cuobjdump -res-usage)" },
    { PF_HIP, { "/opt/rocm/llvm/bin/llvm-readobj", "llvm-readobj-20", "llvm-readobj-19", "llvm-readobj" },
      "--notes", parse_notes,
      "vgpr, agpr, sgpr: registers; lds: bytes per workgroup; scratch: bytes per work-item; vspill, "
      "sspill: registers spilled (amdhsa.kernels, llvm-readobj --notes)" },
};

/* The first tool of rows[0..nrows) for platform pf that is installed (its
 * path in `path`), or NULL; `tried` lists the names looked for. */
static const struct isa_tool *isa_find_tool(const struct isa_tool *rows, size_t nrows, enum platform pf,
                                            char *path, size_t n, char *tried, size_t tn)
{
    for (size_t i = 0; i < nrows; i++) {
        if (rows[i].pf != pf) continue;
        if (find_tool(rows[i].names, path, n) == 0) return &rows[i];
        for (int j = 0; rows[i].names[j]; j++) list_add(tried, tn, rows[i].names[j]);
    }
    return NULL;
}

/* Run tool t (at `path`) on l's code object, each line of its output to
 * t's parser; 0 if it exited 0, else -1 and `why` says how it failed. */
static int isa_run(const struct isa_tool *t, const char *path, struct isa_list *l, char *why, size_t n)
{
    const char *argv[] = { path, t->arg ? t->arg : l->bin, t->arg ? l->bin : NULL, NULL };
    pid_t pid;
    FILE *f = tool_open(argv, &pid);
    if (!f) {
        snprintf(why, n, "cannot run %.300s: %s", path, strerror(errno));
        return -1;
    }
    struct isa_parse p = { .cur = -1, .field = -1 };
    for (int r = 0; r < IR_COUNT; r++) p.vals[r] = -1;
    char line[1024], last[200] = "";
    while (tool_line(f, line, sizeof line)) {
        t->line(l, &p, line);
        if (*line) snprintf(last, sizeof last, "%.199s", line);
    }
    int rc = tool_close(f, pid);
    if (rc == 0) return 0;
    snprintf(why, n, "%.300s %s %.300s failed (exit %d): %s", path, t->arg ? t->arg : "", l->bin, rc, last);
    return -1;
}

enum { ISA_LISTED, ISA_NO_DISASSEMBLER, ISA_TOOL_FAILED };

/* Fill l (pf and bin set): its functions and their instructions from the
 * platform's first disassembler found, then their resources from its first
 * resource reader found.  ISA_LISTED, or why not (in `why`). */
static int isa_disassemble(struct isa_list *l, char *why, size_t n)
{
    char tried[512] = "";
    l->dis = isa_find_tool(ISA_DISASM, sizeof ISA_DISASM / sizeof *ISA_DISASM, l->pf, l->dis_path,
                           sizeof l->dis_path, tried, sizeof tried);
    if (!l->dis) {
        snprintf(why, n, "no disassembler found (tried %s)", tried);
        return ISA_NO_DISASSEMBLER;
    }
    if (isa_run(l->dis, l->dis_path, l, why, n) != 0) return ISA_TOOL_FAILED;
    int kept = 0;
    for (int i = 0; i < l->n; i++)     /* nvdisasm: resources of no function shown */
        if (l->k[i].listed) l->k[kept++] = l->k[i];
    if (!(l->n = kept)) {
        snprintf(why, n, "%.300s shows no function in %.300s", l->dis_path, l->bin);
        return ISA_TOOL_FAILED;
    }
    l->res = isa_find_tool(ISA_RESOURCES, sizeof ISA_RESOURCES / sizeof *ISA_RESOURCES, l->pf,
                           l->res_path, sizeof l->res_path, l->res_tried, sizeof l->res_tried);
    if (l->res && isa_run(l->res, l->res_path, l, why, n) != 0) return ISA_TOOL_FAILED;
    return ISA_LISTED;
}

/* The listing of the code object at bin_path (platform pf), disassembled
 * once per process: the last listing made is kept, so that gating several
 * cases on one code object runs the disassembler once.  NULL when there is
 * none: `why` says why, *status (if not NULL) is ISA_NO_DISASSEMBLER or
 * ISA_TOOL_FAILED. */
static const struct isa_list *isa_listing(enum platform pf, const char *bin_path, char *why, size_t n,
                                          int *status)
{
    static struct isa_list l;
    if (l.n && l.pf == pf && strcmp(l.bin, bin_path) == 0) return &l;
    free(l.k);
    memset(&l, 0, sizeof l);
    l.pf = pf;
    snprintf(l.bin, sizeof l.bin, "%s", bin_path);
    int st = isa_disassemble(&l, why, n);
    if (status) *status = st;
    if (st == ISA_LISTED) return &l;
    free(l.k);
    memset(&l, 0, sizeof l);
    return NULL;
}

/* Does the listing hold matrix instructions of class c?  With `kernels`
 * (nkernels names): each of them must be in the code object and hold one;
 * with kernels NULL: at least one function of the code object must.  1
 * pass, 0 fail; `why` names the functions that hold it, or those that lack
 * it. */
static int isa_check(const struct isa_list *l, int c, const char *const *kernels, int nkernels, char *why,
                     size_t n)
{
    const char *cls = MATRIX_CLASSES[c].name;
    char names[600] = "";
    int count = 0;
    if (!kernels) {
        for (int i = 0; i < l->n; i++)
            if (l->k[i].matrix[c]) count++, list_add(names, sizeof names, l->k[i].name);
        char other[32] = "";
        if (MATRIX_CLASSES[c].pf != l->pf) snprintf(other, sizeof other, " (an %s class)", VENDOR[MATRIX_CLASSES[c].pf]);
        if (count) snprintf(why, n, "%d of %d kernels hold %s instructions: %s", count, l->n, cls, names);
        else snprintf(why, n, "none of the %d kernels holds %s instructions%s", l->n, cls, other);
        return count > 0;
    }
    for (int j = 0; j < nkernels; j++) {
        int i = isa_find(l, kernels[j], strlen(kernels[j]));
        char item[200];
        snprintf(item, sizeof item, "%s%s", kernels[j], i < 0 ? " (not in the code object)" : "");
        if (i < 0 || !l->k[i].matrix[c]) count++, list_add(names, sizeof names, item);
    }
    if (count) snprintf(why, n, "%d of %d kernels lack %s instructions: %s", count, nkernels, cls, names);
    else snprintf(why, n, "all %d kernels hold %s instructions", nkernels, cls);
    return count == 0;
}

/* Gate: does the code object at bin_path (platform pf) hold matrix
 * instructions of class `expect` (wgmma, mma, mfma, wmma)?  With `kernels`
 * (nkernels names, e.g. the kernels a case launched) each of them must hold
 * one; with kernels NULL, at least one of its functions must.  1 pass, 0
 * fail, `why` says what: the kernels that hold it or lack it, or that there
 * is no disassembler (never a pass then).  Prints nothing on stdout. */
static int isa_expect(enum platform pf, const char *bin_path, const char *expect, const char *const *kernels,
                      int nkernels, char *why, size_t n)
{
    int c = matrix_class(expect);
    if (c < 0) {
        snprintf(why, n, "unknown matrix instruction class '%s' (%s)", expect, MATRIX_CLASS_NAMES);
        return 0;
    }
    const struct isa_list *l = isa_listing(pf, bin_path, why, n, NULL);
    return l ? isa_check(l, c, kernels, nkernels, why, n) : 0;
}

/* Print the listing: a row per function (instructions, matrix instructions
 * in all and by class, resources, the first matrix instruction), then what
 * the resource columns mean and where they came from. */
static void isa_print(const struct isa_list *l)
{
    int w = 6;
    for (int i = 0; i < l->n; i++) w = (int)strlen(l->k[i].name) > w ? (int)strlen(l->k[i].name) : w;
    printf("%-*s %7s %7s", w, "kernel", "insts", "matrix");
    for (int c = 0; c < IC_COUNT; c++)
        if (MATRIX_CLASSES[c].pf == l->pf) printf(" %6s", MATRIX_CLASSES[c].name);
    for (int j = 0; j < IR_COUNT && ISA_COLUMNS[l->pf][j].head; j++) printf(" %7s", ISA_COLUMNS[l->pf][j].head);
    printf("  first matrix instruction\n");
    for (int i = 0; i < l->n; i++) {
        const struct isa_kernel *k = &l->k[i];
        int matrix = 0;
        for (int c = 0; c < IC_COUNT; c++) matrix += k->matrix[c];
        printf("%-*s %7d %7d", w, k->name, k->insts, matrix);
        for (int c = 0; c < IC_COUNT; c++)
            if (MATRIX_CLASSES[c].pf == l->pf) printf(" %6d", k->matrix[c]);
        for (int j = 0; j < IR_COUNT && ISA_COLUMNS[l->pf][j].head; j++) {
            long v = k->res[ISA_COLUMNS[l->pf][j].r];
            if (v < 0) printf(" %7s", "-"); else printf(" %7ld", v);
        }
        printf("  %s\n", *k->first ? k->first : "-");
    }
    const char *legend = l->res ? l->res->legend : l->dis->legend;
    printf("instructions: %s%s%s\n", l->dis_path, l->dis->arg ? " " : "", l->dis->arg ? l->dis->arg : "");
    if (legend) printf("resources: %s\n", legend);
    else printf("resources: not available: no reader of the compiler's records found (tried %s)\n", l->res_tried);
}

/* Whether --arch names a target as written: sm_ and two or three digits,
 * then optionally a or f (sm_90a, sm_100f); or gfx, a digit and two or
 * three more hex digits (gfx942, gfx90a, gfx1100), then optionally target
 * features, each a colon, a lowercase name and + or - (gfx942:sramecc+:xnack-,
 * as ROCm names a device). */
static int isa_arch_ok(const char *arch)
{
    size_t n = strlen(arch);
    if (strncmp(arch, "sm_", 3) == 0) {
        size_t d = strspn(arch + 3, "0123456789");
        return (d == 2 || d == 3) && (n == 3 + d || (n == 4 + d && (arch[n - 1] == 'a' || arch[n - 1] == 'f')));
    }
    if (strncmp(arch, "gfx", 3) != 0 || !isdigit((unsigned char)arch[3])) return 0;
    size_t h = strspn(arch + 3, "0123456789abcdef");
    if (h != 3 && h != 4) return 0;
    for (const char *p = arch + 3 + h; *p;) {   /* the features */
        size_t name = p[0] == ':' ? strspn(p + 1, "abcdefghijklmnopqrstuvwxyz0123456789") : 0;
        if (name == 0 || (p[1 + name] != '+' && p[1 + name] != '-')) return 0;
        p += name + 2;
    }
    return 1;
}

/* kgate isa [--arch A] [--kernels FILE] [--expect CLASS]: compile for A
 * (default: GPU 0's arch) and list each kernel's instructions, matrix
 * instructions and resources when a disassembler is found.  --expect: exit
 * 1 unless a kernel holds that class, and always when nothing can count. */
static int cmd_isa(const struct opts *o, const char *sub)
{
    (void)sub;
    struct device d;
    memset(&d, 0, sizeof d);
    const char *arch = o->arch;
    if (o->device_cpu)
        die(EXIT_USAGE, "isa --device cpu: the CPU device runs no code object (isa compiles for --arch A or a GPU's)");
    if (arch && !isa_arch_ok(arch)) die(EXIT_USAGE, "--arch %s: expected sm_XY or sm_XYZ, then optionally a or f (NVIDIA: sm_90a), or "
                       "gfx and 3 or 4 hex digits, then optionally :feature+ or :feature- (AMD: gfx942:sramecc+)",
                       shown(arch));
    if (!arch) {
        gpu_open(&d, o->device_index);
        arch = d.arch;
    }
    enum platform pf = strncmp(arch, "sm_", 3) == 0 ? PF_CUDA : PF_HIP;
    struct arm arm;
    char *file;
    arm_from_opts(&arm, o, &file);
    struct code_obj co;
    memset(&co, 0, sizeof co);
    compile_for_arch(pf, &arm, arch, &co);
    printf("%s%s%s for %s: code object %zu bytes, sha256 %s\n", arm.src_name, *arm.options ? " " : "", arm.options,
           arch, co.size, co.sha);
    char why[1024];
    int status = ISA_LISTED;
    const struct isa_list *l = isa_listing(pf, co.bin_path, why, sizeof why, &status);
    if (status == ISA_TOOL_FAILED) die(EXIT_DEVICE, "%s", why);
    if (l) isa_print(l);
    else printf("%s: instruction counts are not available\n", why);
    int pass = 1;
    if (o->expect) {
        pass = isa_expect(pf, co.bin_path, o->expect, NULL, 0, why, sizeof why);
        printf("expect %s: %s: %s\n", o->expect, pass ? "pass" : "FAIL", why);
    }
    free(file);
    free(co.data);
    arm_free(&arm);
    return pass ? EXIT_PASS : EXIT_GATE;
}

/* --expect: whether every kernel that arm ac's timed launches ran (its
 * launch geometry names them) holds matrix instructions of the class
 * asked for (kgate isa's disassembly).  Notes the answer in ac; the CPU
 * device, which runs no code object, never passes. */
static int isa_gate(const struct run *r, struct arm_case *ac)
{
    const char *names[MAX_OUT * MAX_GEOM];
    int n = 0;
    ac->isa_checked = 1;
    if (r->d->kind == DEV_CPU) {
        snprintf(ac->isa_why, sizeof ac->isa_why, "the CPU device runs ref.c, no code object");
        return ac->isa_pass = 0;
    }
    for (int k = 0; k < r->nout; k++)
        for (int i = 0; i < ac->geom[k].n && r->out[k].launch == k; i++) names[n++] = ac->geom[k].k[i].name;
    if (n == 0) {
        snprintf(ac->isa_why, sizeof ac->isa_why, "the case launched no kernel: nothing to check");
        return ac->isa_pass = 0;
    }
    ac->isa_pass = isa_expect(r->d->pf, ac->arm->code.bin_path, r->o->expect, names, n, ac->isa_why,
                              sizeof ac->isa_why);
    return ac->isa_pass;
}
