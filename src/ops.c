/* src/ops.c — the op table (one entry per op file) and cases read from the
 * command line and from shapes files.  Relies on case.c, options.c and the
 * op files. */

/* The ops: each one's row (struct op, case.c) is defined in its file. */
static const struct op *const OPS[] = { &OP_GEMM, &OP_GROUPED, &OP_ATTN };

/* The op named `name`, or NULL. */
static const struct op *ops_find(const char *name)
{
    for (size_t i = 0; i < sizeof OPS / sizeof *OPS; i++)
        if (strcmp(OPS[i]->name, name) == 0) return OPS[i];
    return NULL;
}

/* Apply case options argv[from..argc) to c (run options go to o when
 * allow_global); exit 2 on anything unknown and on a case option given
 * twice. */
static void ops_parse_case(struct kcase *c, struct opts *o, int argc, char **argv, int from,
                           int allow_global)
{
    const char *keys[64];   /* the case options given so far: each known and given once, so few */
    int nkeys = 0;
    for (int i = from; i < argc;) {
        int used = allow_global ? opts_parse(o, argc, argv, i) : 0;
        if (used) { i += used; continue; }
        if (strncmp(argv[i], "--", 2) != 0)
            die(EXIT_USAGE, "%s: unexpected argument '%s'", c->where, shown(argv[i]));
        for (int j = 0; j < nkeys; j++)
            if (strcmp(keys[j], argv[i]) == 0) die(EXIT_USAGE, "%s: %s is given twice: give it once", c->where, shown(argv[i]));
        if (nkeys < (int)(sizeof keys / sizeof *keys)) keys[nkeys++] = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        int r = case_set_inputs(c, argv[i], val);
        if (r < 0) r = c->op->set(c, argv[i], val);
        if (r < 0) {
            if (!allow_global && opts_row(argv[i]) >= 0)
                die(EXIT_USAGE, "%s: %s is a run option, not a case option", c->where, shown(argv[i]));
            die(EXIT_USAGE, "%s: unknown option '%s' for %s", c->where, shown(argv[i]), c->op->name);
        }
        i += 1 + r;
    }
    case_finish(c);
}

#define SHAPES_MAX_BYTES (1u << 20)   /* a shapes file: at most 1 MiB */
#define SHAPES_MAX_LINE 4096          /* and at most 4096 bytes a line */

/* Read a shapes file: one case per line, written as a kgate command without
 * the program name ("gemm --dtype bf16 --layout NT --shape 4096x4096x4096");
 * '#' starts a comment; blank lines are skipped.  Exits 2 naming the file
 * (and line) of anything that does not parse, of a file over 1 MiB (read no
 * further than that), a line over 4096 bytes and a NUL byte. */
static struct kcase *ops_read_shapes(const char *path, size_t *count)
{
    size_t len = 0;
    char *text = read_file_max(path, SHAPES_MAX_BYTES, &len);
    if (!text && errno == EFBIG)
        die(EXIT_USAGE, "shapes file %s: larger than %u bytes (1 MiB): not a shapes file", shown(path), SHAPES_MAX_BYTES);
    if (!text) die(EXIT_USAGE, "cannot read shapes file %s: %s", shown(path), read_why());
    size_t cap = 16, n = 0;
    struct kcase *cases = xmalloc(cap * sizeof *cases);
    int lineno = 0;
    for (char *line = text, *next; line < text + len; line = next) {
        lineno++;
        char *nl = memchr(line, '\n', (size_t)(text + len - line));
        next = nl ? nl + 1 : text + len;
        size_t n_line = (size_t)((nl ? nl : text + len) - line);
        if (n_line > SHAPES_MAX_LINE)
            die(EXIT_USAGE, "%s:%d: the line is longer than %d bytes", shown(path), lineno, SHAPES_MAX_LINE);
        if (memchr(line, 0, n_line))
            die(EXIT_USAGE, "%s:%d: the line holds a NUL byte (column %zu): not a text file", shown(path), lineno,
                (size_t)((char *)memchr(line, 0, n_line) - line) + 1);
        line[n_line] = 0;
        line[strcspn(line, "#")] = 0;
        char *argv[64];
        int argc = 0;
        for (char *save = NULL, *tok = strtok_r(line, " \t\r", &save); tok;
             tok = strtok_r(NULL, " \t\r", &save)) {
            if (argc == 64) die(EXIT_USAGE, "%s:%d: too many words", shown(path), lineno);
            argv[argc++] = tok;
        }
        if (argc == 0) continue;
        char where[320];
        snprintf(where, sizeof where, "%s:%d", shown(path), lineno);
        const struct op *op = ops_find(argv[0]);
        if (!op) die(EXIT_USAGE, "%s: unknown operation '%s'", where, shown(argv[0]));
        if (n == cap) cases = realloc(cases, (cap *= 2) * sizeof *cases);
        if (!cases) die(EXIT_DEVICE, "out of host memory reading %s", shown(path));
        case_init(&cases[n], op, where);
        ops_parse_case(&cases[n], NULL, argc, argv, 1, 0);
        n++;
    }
    free(text);
    if (n == 0) die(EXIT_USAGE, "%s: no cases in the file", shown(path));
    *count = n;
    return cases;
}
