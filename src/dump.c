/* src/dump.c — --dump DIR: a case's inputs, scales, outputs and double
 * references as NumPy .npy files with a JSON manifest, for an independent
 * oracle (bench/oracle.py) to recompute every output from the inputs alone.
 * The format is README's "--dump".  Relies on util.c, ref.c, options.c,
 * run.c, plan.c, case.c, lowprec.c, attn.c (their cases' geometry) and
 * gates.c (a checked output's result). */

#define DUMP_FORMAT "kgate-dump 2"   /* 2: cols_checked rows x nc, each row its own columns */

/* Write an .npy file (format 1.0, C order): ndim dimensions of shape, each
 * element `size` bytes of NumPy type descr ("<f4", "<f8", "<u4", "|u1").
 * Exit 6 (EXIT_IO) naming the path if it cannot be written. */
static void npy_write(const char *path, const char *descr, size_t size, int ndim, const size_t *shape, const void *data)
{
    char head[256], dims[128] = "";
    size_t n = 1;
    for (int i = 0; i < ndim; i++) {
        const char *sep = ndim == 1 ? "," : i + 1 < ndim ? ", " : "";   /* (5,) and (3, 4) */
        snprintf(dims + strlen(dims), sizeof dims - strlen(dims), "%zu%s", shape[i], sep);
        n *= shape[i];
    }
    int len = snprintf(head, sizeof head, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, dims);
    size_t total = 10 + (size_t)len + 1, pad = (64 - total % 64) % 64;   /* magic, version, length; the '\n' */
    FILE *f = fopen(path, "wb");
    if (!f) die(EXIT_IO, "--dump: cannot write %s: %s", shown(path), strerror(errno));
    uint16_t hl = (uint16_t)(len + pad + 1);
    unsigned char pre[10] = { 0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hl & 0xff),
                              (unsigned char)(hl >> 8) };   /* magic, version 1.0, header length */
    int ok = fwrite(pre, 1, 10, f) == 10 && fwrite(head, 1, (size_t)len, f) == (size_t)len;
    for (size_t i = 0; i < pad && ok; i++) ok = fputc(' ', f) != EOF;
    ok = ok && fputc('\n', f) != EOF && (n == 0 || fwrite(data, size, n, f) == n);
    if (fclose(f) != 0 || !ok) die(EXIT_IO, "--dump: cannot write %s: %s", shown(path), strerror(errno));
}

/* dir/name as a path (static storage: one at a time). */
static const char *dump_path(const char *dir, const char *name)
{
    static char path[PATH_MAX + 80];   /* dir (< PATH_MAX) and a name of < 80 */
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return path;
}

/* A JSON array of n whole numbers. */
static void dump_json_lens(FILE *f, const char *key, const uint32_t *v, size_t n)
{
    fprintf(f, "\"%s\":[", key);
    for (size_t i = 0; i < n; i++) fprintf(f, "%s%u", i ? "," : "", v[i]);
    fprintf(f, "],");
}

/* The manifest's fields that say what the case computes: its op's shape,
 * layout and options, and low precision's format and scale blocks. */
static void dump_case_fields(FILE *f, const struct run *r)
{
    const struct kcase *c = r->c;
    json_str(f, "op", c->op->name, 1);
    fprintf(f, "\"bwd\":%s,", c->bwd ? "true" : "false");
    if (strcmp(c->op->name, "attn") == 0) {
        const struct attn_case *a = r->attn;
        dump_json_lens(f, "seqlens_q", c->lens, c->nlens);
        dump_json_lens(f, "seqlens_k", c->lens + c->nlens, c->nlens);
        fprintf(f, "\"heads_q\":%u,\"heads_kv\":%u,\"dim\":%u,\"causal\":%s,\"scale\":%.17g,", c->hq, c->hkv, c->dim,
                c->causal ? "true" : "false", a->g.scale);
        return;
    }
    json_str(f, "layout", c->layout, 1);
    fprintf(f, "\"m\":%u,\"n\":%u,\"k\":%u,", c->m, c->n, c->k);
    if (strcmp(c->op->name, "grouped") == 0) dump_json_lens(f, "groups", c->lens, c->nlens);
    if (!r->q) return;
    const struct qrun *q = r->q;
    fprintf(f, "\"quant\":{\"format\":\"%s\",\"scaling\":\"%s\",\"k_block\":%zu,\"A_block\":[%zu,%zu],"
            "\"B_block\":[%zu,%zu]},", QFMTS[q->f].name, QSCALING[c->scaling], q->gk, q->op[0].g.gr, q->op[0].g.gc,
            q->op[1].g.gr, q->op[1].g.gc);
}

/* Write array `what` of output o as dir/<o>.<what>.npy (npy_write's
 * arguments) and name the file in the manifest as "key":"file"; sep follows. */
static void dump_array(FILE *m, const char *dir, const struct output *o, const char *what, const char *key,
                       const char *descr, size_t size, int ndim, const size_t *shape, const void *data, const char *sep)
{
    char name[64];
    snprintf(name, sizeof name, "%s.%s.npy", o->name, what);
    npy_write(dump_path(dir, name), descr, size, ndim, shape, data);
    fprintf(m, "\"%s\":\"%s\"%s", key, name, sep);
}

/* Output k's files: the decoded output as the gates saw it, the checked
 * rows and columns, and the double reference on them (rows of the row
 * block are NaN in the column block: read them from the row block). */
static void dump_output(FILE *m, const char *dir, const struct run *r, int k, const struct result *res)
{
    const struct output *o = &r->out[k];
    const struct plan *p = &res->plan;
    if (!res->out) die(EXIT_DEVICE, "internal: --dump: output %s was never decoded", o->name);
    fprintf(m, "%s{\"name\":\"%s\",\"dtype\":\"%s\",\"rows\":%zu,\"cols\":%zu,\"grad\":%s,\"full\":%s,", k ? "," : "",
            o->name, DTYPES[o->dt].name, o->rows, o->cols, o->grad ? "true" : "false", p->full ? "true" : "false");
    size_t shape[2] = { o->rows, o->cols }, nr[1] = { p->nr }, rs[2] = { p->nr, o->cols }, cs[2] = { o->rows, p->nc };
    dump_array(m, dir, o, "out", "out", "<f4", 4, 2, shape, res->out, ",");
    dump_array(m, dir, o, "rows", "rows_checked", "<u4", 4, 1, nr, p->rows, ",");
    dump_array(m, dir, o, "ref_rows", "ref_rows", "<f8", 8, 2, rs, res->refs.ref_r, ",");
    uint32_t *cc = xmalloc(o->rows * p->nc * sizeof *cc + 1);   /* row i's columns: plan_cols */
    for (size_t i = 0; i < o->rows && p->nc; i++) memcpy(cc + i * p->nc, plan_cols(p, i), p->nc * sizeof *cc);
    dump_array(m, dir, o, "cols", "cols_checked", "<u4", 4, 2, cs, cc, ",");
    free(cc);
    double *rc = xmalloc(o->rows * p->nc * sizeof(double) + 1);
    for (size_t i = 0; i < o->rows * p->nc; i++) rc[i] = p->row_in[i / p->nc] ? NAN : res->refs.ref_c[i];
    dump_array(m, dir, o, "ref_cols", "ref_cols", "<f8", 8, 2, cs, rc, "}");
    free(rc);
}

/* --dump: case idx of run r into dir (`kgate all`: dir/case-NNN), with
 * each output's result res[k] (its decoded output kept by the check). */
static void dump_case(const struct run *r, const struct result *res, int idx)
{
    char dir[PATH_MAX];
    if (strcmp(r->o->command, "all") == 0) snprintf(dir, sizeof dir, "%s/case-%03d", r->o->dump_dir, idx);
    else snprintf(dir, sizeof dir, "%s", r->o->dump_dir);
    if (mkdir_p(dir, NULL) != 0) die(EXIT_IO, "--dump: cannot create %s: %s", shown(dir), strerror(errno));
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    if (!m) die(EXIT_DEVICE, "out of host memory");
    fprintf(m, "{\"format\":\"%s\",", DUMP_FORMAT);
    json_str(m, "case", r->c->label, 1);
    fprintf(m, "\"seed\":%" PRIu64 ",", r->o->seed);
    json_str(m, "inputs", INPUTS[r->c->inputs], 1);
    json_str(m, "dtype", DTYPES[r->c->dt].name, 1);
    if (r->o->inject) json_str(m, "inject", r->o->inject, 1);
    dump_case_fields(m, r);
    fprintf(m, "\"tensors\":{");
    for (int i = 0; i < r->nkept; i++) {
        const struct kept *t = &r->kept[i];
        char name[64];
        snprintf(name, sizeof name, "%s.npy", t->name);
        int f32 = t->type == 'f';
        npy_write(dump_path(dir, name), f32 ? "<f4" : "|u1", f32 ? 4 : 1, t->ndim, t->shape, t->data);
        fprintf(m, "%s\"%s\":\"%s\"", i ? "," : "", t->name, name);
    }
    fprintf(m, "},\"outputs\":[");
    for (int k = 0; k < r->nout; k++) dump_output(m, dir, r, k, &res[k]);
    fprintf(m, "]}\n");
    fclose(m);
    if (write_file_atomic(dump_path(dir, "manifest.json"), text, len) != 0)
        die(EXIT_IO, "--dump: cannot write %s/manifest.json: %s", shown(dir), strerror(errno));
    free(text);
}

/* The directories --dump's DIR needed made, and the process that made
 * them (a worker's exit leaves them alone). */
static struct made_dirs dump_made;
static pid_t dump_owner;

/* At the exit of the process that made --dump's directories: remove those
 * left empty (the run stopped before a case wrote into them). */
static void dump_unmake(void)
{
    if (getpid() == dump_owner) made_dirs_remove(&dump_made);
}

/* Before any case runs: make --dump's DIR (exit 2 if it cannot be used),
 * remembering what was made, so that a run that writes nothing there
 * leaves no new directory behind. */
static void dump_prepare(const struct opts *o)
{
    if (!o->dump_dir) return;
    usable_dir(o->dump_dir, "--dump", &dump_made);
    dump_owner = getpid();
    atexit(dump_unmake);
}

/* After the cases: say on stderr when `written` of the `cases` cases were
 * dumped and not all (the others skipped, or their worker died before the
 * gates), and when none was, remove what dump_prepare made. */
static void dump_report(const struct opts *o, int written, int cases)
{
    if (!o->dump_dir || written >= cases) return;
    if (written) {
        fprintf(stderr, "kgate: --dump %s: %d of %d cases written (the rest skipped or lost)\n",
                shown(o->dump_dir), written, cases);
        return;
    }
    int removed = made_dirs_remove(&dump_made);
    fprintf(stderr, "kgate: --dump %s: nothing written: no case reached its gates (skipped or lost)%s\n",
            shown(o->dump_dir), removed ? "; the directories this run made are removed" : "");
}
