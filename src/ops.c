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

/* Apply case options argv[from..to) to c (global options are skipped when
 * allow_global); exit 2 on anything unknown. */
static void ops_parse_case(struct kcase *c, struct opts *o, int argc, char **argv, int from,
                           int allow_global)
{
    for (int i = from; i < argc;) {
        int used = allow_global ? opts_parse(o, argc, argv, i) : 0;
        if (used) { i += used; continue; }
        if (strncmp(argv[i], "--", 2) != 0)
            die(EXIT_USAGE, "%s: unexpected argument '%s'", c->where, argv[i]);
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        int r = case_set_inputs(c, argv[i], val);
        if (r < 0) r = c->op->set(c, argv[i], val);
        if (r < 0) {
            if (!allow_global && opts_parse(&(struct opts){ 0 }, argc, argv, i))
                die(EXIT_USAGE, "%s: %s is a run option, not a case option", c->where, argv[i]);
            die(EXIT_USAGE, "%s: unknown option '%s' for %s", c->where, argv[i], c->op->name);
        }
        i += 1 + r;
    }
    case_finish(c);
}

/* Read a shapes file: one case per line, written as a kgate command without
 * the program name ("gemm --dtype bf16 --layout NT --shape 4096x4096x4096");
 * '#' starts a comment; blank lines are skipped.  Exits 2 naming the file and
 * line of anything that does not parse. */
static struct kcase *ops_read_shapes(const char *path, size_t *count)
{
    char *text = read_file(path, NULL);
    if (!text) die(EXIT_USAGE, "cannot read shapes file %s: %s", path, strerror(errno));
    size_t cap = 16, n = 0;
    struct kcase *cases = xmalloc(cap * sizeof *cases);
    int lineno = 0;
    for (char *line = text, *next; line; line = next) {
        lineno++;
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        line[strcspn(line, "#")] = 0;
        char *argv[64];
        int argc = 0;
        for (char *save = NULL, *tok = strtok_r(line, " \t\r", &save); tok;
             tok = strtok_r(NULL, " \t\r", &save)) {
            if (argc == 64) die(EXIT_USAGE, "%s:%d: too many words", path, lineno);
            argv[argc++] = tok;
        }
        if (argc == 0) continue;
        char where[320];
        snprintf(where, sizeof where, "%s:%d", path, lineno);
        const struct op *op = ops_find(argv[0]);
        if (!op) die(EXIT_USAGE, "%s: unknown operation '%s'", where, argv[0]);
        if (n == cap) cases = realloc(cases, (cap *= 2) * sizeof *cases);
        if (!cases) die(EXIT_DEVICE, "out of host memory reading %s", path);
        case_init(&cases[n], op, where);
        ops_parse_case(&cases[n], NULL, argc, argv, 1, 0);
        n++;
    }
    free(text);
    if (n == 0) die(EXIT_USAGE, "%s: no cases in the file", path);
    *count = n;
    return cases;
}
