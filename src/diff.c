/* src/diff.c — `kgate diff A B`: two `--dump` directories of one case and
 * seed (two GPUs, two machines, two builds) compared output by output:
 * the share bitwise equal, the largest difference in ulps of the output's
 * dtype, the SNR of A against B, the SNR of each against its dumped double
 * reference, the worst 128x128 tile, and a verdict (README "Comparing two
 * dumps").  It reads kgate's own manifests only: a small strict JSON reader
 * for the shape dump.c writes, and .npy files of the header npy_write
 * writes.  Relies on util.c (die, files, SHA-256, JSON writers), ref.c
 * (DTYPES) and dump.c (DUMP_FORMAT). */

#define DIFF_ULPS 1.0           /* "within": every element at most this many ulps of its dtype apart, */
#define DIFF_SNR_SLACK_DB 6.0   /* or A vs B at least the better SNR against the reference minus this */
#define DIFF_TILE_SLACK_DB 10.0 /* and A vs B in the worst tile at least that SNR minus this */

/* --- a strict JSON reader for kgate's manifests --- */

/* One JSON value; an object's members and an array's items are a chain of
 * nodes from `child` through `next` (-1 ends it), a member's name in key. */
struct jnode {
    char kind;                  /* 'o' object, 'a' array, 's' string, 'n' number, 't'/'f' bool, 'z' null */
    const char *key, *str;      /* member name (in an object); a string's decoded text */
    double num;
    int len;                    /* a number's text, at str, is len bytes (not NUL-terminated) */
    int child, next;
};

/* The parser's state: the text (strings are decoded in place), the node
 * pool (grown as needed: nodes are named by index), and the manifest's
 * path for messages; soft: where a failure jumps (jp_parse_soft) instead
 * of exiting. */
struct jparse {
    char *p, *start;
    struct jnode *nodes;
    int n, cap, depth;
    const char *path;
    jmp_buf *soft;
};

/* Exit 2: the manifest at j->path is not JSON of kgate's shape, at the
 * current byte (with j->soft: back to jp_parse_soft instead). */
static _Noreturn void jp_fail(const struct jparse *j, const char *what)
{
    if (j->soft) longjmp(*j->soft, 1);
    die(EXIT_USAGE, "diff: %s: not a kgate manifest (%s at byte %td)", shown(j->path), what, j->p - j->start);
}

/* Skip JSON white space. */
static void jp_space(struct jparse *j)
{
    while (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r') j->p++;
}

/* A string at j->p (at its opening quote), decoded in place (\uXXXX above
 * ASCII kept as '?'); its text. */
static const char *jp_string(struct jparse *j)
{
    if (*j->p != '"') jp_fail(j, "expected a string");
    char *w = ++j->p, *s = w;
    for (;;) {
        unsigned char c = (unsigned char)*j->p;
        if (c == 0 || c < 0x20) jp_fail(j, "unterminated string");
        if (c == '"') break;
        if (c != '\\') { *w++ = *j->p++; continue; }
        char e = j->p[1];
        const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t", *at = e ? strchr(from, e) : NULL;
        if (at) { *w++ = to[at - from]; j->p += 2; continue; }
        if (e != 'u' || !isxdigit((unsigned char)j->p[2]) || !isxdigit((unsigned char)j->p[3]) ||
            !isxdigit((unsigned char)j->p[4]) || !isxdigit((unsigned char)j->p[5]))
            jp_fail(j, "bad escape");
        unsigned long cp = strtoul((char[5]){ j->p[2], j->p[3], j->p[4], j->p[5], 0 }, NULL, 16);
        *w++ = cp < 0x80 && cp >= 0x20 ? (char)cp : '?';
        j->p += 6;
    }
    j->p++;
    *w = 0;   /* w is at most the closing quote, already passed */
    return s;
}

static int jp_value(struct jparse *j);

/* The members (object: "key": value) or items of a container whose
 * opening bracket is at j->p, chained under node `at`. */
static void jp_members(struct jparse *j, int at, int object)
{
    char close = object ? '}' : ']';
    j->p++;
    jp_space(j);
    if (*j->p == close) { j->p++; return; }
    int last = -1;
    for (;;) {
        jp_space(j);
        const char *key = NULL;
        if (object) {
            key = jp_string(j);
            jp_space(j);
            if (*j->p != ':') jp_fail(j, "expected ':'");
            j->p++;
        }
        int v = jp_value(j);
        j->nodes[v].key = key;
        if (last < 0) j->nodes[at].child = v;
        else j->nodes[last].next = v;
        last = v;
        jp_space(j);
        if (*j->p == ',') { j->p++; continue; }
        if (*j->p == close) { j->p++; return; }
        jp_fail(j, object ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

/* A new node of kind `kind` in j's pool (grown when full); its index. */
static int jp_node(struct jparse *j, char kind)
{
    if (j->n == j->cap) {
        j->cap = j->cap ? 2 * j->cap : 256;
        j->nodes = realloc(j->nodes, (size_t)j->cap * sizeof *j->nodes);
        if (!j->nodes) die(EXIT_DEVICE, "out of host memory reading %s", shown(j->path));
    }
    j->nodes[j->n] = (struct jnode){ .kind = kind, .child = -1, .next = -1 };
    return j->n++;
}

/* One value at j->p (white space before it skipped); its node. */
static int jp_value(struct jparse *j)
{
    jp_space(j);
    if (j->depth > 16) jp_fail(j, "nested too deep");
    char c = *j->p;
    if (c == '{' || c == '[') {
        int at = jp_node(j, c == '{' ? 'o' : 'a');
        j->depth++;
        jp_members(j, at, c == '{');
        j->depth--;
        return at;
    }
    if (c == '"') {
        int at = jp_node(j, 's');
        const char *str = jp_string(j);
        j->nodes[at].str = str;
        return at;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        int at = jp_node(j, 'n');
        char *end;
        double v = strtod(j->p, &end);
        if (end == j->p || !isfinite(v)) jp_fail(j, "bad number");
        j->nodes[at].num = v, j->nodes[at].str = j->p, j->nodes[at].len = (int)(end - j->p);
        j->p = end;
        return at;
    }
    static const char *const WORDS[] = { "true", "false", "null" };
    for (int w = 0; w < 3; w++)
        if (strncmp(j->p, WORDS[w], strlen(WORDS[w])) == 0) {
            j->p += strlen(WORDS[w]);
            return jp_node(j, "tfz"[w]);
        }
    jp_fail(j, "expected a value");
}

/* The root node of `text` (decoded in place) parsed as one JSON value with
 * nothing but white space after it, into j (cleared first; the caller frees
 * j->nodes); -1 if it is not that. */
static int jp_parse_soft(struct jparse *j, char *text, const char *path)
{
    jmp_buf back;
    *j = (struct jparse){ .p = text, .start = text, .path = path, .soft = &back };
    if (setjmp(back)) return -1;
    int root = jp_value(j);
    jp_space(j);
    return *j->p ? -1 : root;
}

/* Member `key` of node obj of j, or -1 (none, or obj is not an object). */
static int jp_find(const struct jparse *j, int obj, const char *key)
{
    if (obj < 0 || j->nodes[obj].kind != 'o') return -1;
    for (int m = j->nodes[obj].child; m >= 0; m = j->nodes[m].next)
        if (strcmp(j->nodes[m].key, key) == 0) return m;
    return -1;
}

/* --- a dump: its manifest and its .npy files --- */

/* One dump directory: its manifest's text, the parsed nodes, the root. */
struct dmp {
    const char *dir;
    char path[PATH_MAX + 80];   /* the manifest's path, for messages */
    char *text;
    struct jparse j;
};

/* Read and parse DIR/manifest.json of dump d (exit 2 with one line if it
 * cannot be read, is not JSON, or is not a DUMP_FORMAT object). */
static void diff_open(struct dmp *d, const char *dir)
{
    struct stat st;
    d->dir = dir;
    if (stat(dir, &st) != 0) die(EXIT_USAGE, "diff: %s: %s", shown(dir), strerror(errno));
    if (!S_ISDIR(st.st_mode))
        die(EXIT_USAGE, "diff: %s is %s, not a --dump directory", shown(dir), file_kind(st.st_mode));
    snprintf(d->path, sizeof d->path, "%s/manifest.json", dir);
    size_t len;
    d->text = read_file_max(d->path, 16u << 20, &len);
    if (!d->text) {
        char first[PATH_MAX + 80], why[160];
        snprintf(why, sizeof why, "%s", read_why());   /* before access() sets errno */
        snprintf(first, sizeof first, "%s/case-001/manifest.json", dir);
        if (access(first, F_OK) == 0)
            die(EXIT_USAGE, "diff: %s is an `all --dump` directory: compare its case-NNN directories one by one",
                shown(dir));
        die(EXIT_USAGE, "diff: %s: cannot read: %s (not a --dump directory?)", shown(d->path), why);
    }
    if (strlen(d->text) != len) die(EXIT_USAGE, "diff: %s: not a kgate manifest (a NUL byte)", shown(d->path));
    d->j = (struct jparse){ .p = d->text, .start = d->text, .path = d->path };
    jp_value(&d->j);
    jp_space(&d->j);
    if (*d->j.p) jp_fail(&d->j, "text after the object");
    if (d->j.nodes[0].kind != 'o') jp_fail(&d->j, "not an object");
}

/* Give back what diff_open took. */
static void diff_close(struct dmp *d)
{
    free(d->j.nodes);
    free(d->text);
}

/* Member `key` of object node `obj` of dump d, of kind `kind` ('b': a
 * bool); exit 2 naming the manifest if it is missing or of another kind. */
static const struct jnode *diff_get(const struct dmp *d, int obj, const char *key, char kind)
{
    int m = jp_find(&d->j, obj, key);
    const struct jnode *n = m >= 0 ? &d->j.nodes[m] : NULL;
    if (n && (n->kind == kind || (kind == 'b' && (n->kind == 't' || n->kind == 'f')))) return n;
    die(EXIT_USAGE, "diff: %s: not a kgate manifest (no %s \"%s\")", shown(d->path),
        kind == 's' ? "string" : kind == 'n' ? "number" : kind == 'o' ? "object" : kind == 'a' ? "array" : "bool", key);
}

/* A whole number member of object obj, 0..max (exit 2 otherwise). */
static size_t diff_whole(const struct dmp *d, int obj, const char *key, double max)
{
    double v = diff_get(d, obj, key, 'n')->num;
    if (!(v >= 0 && v <= max && v == floor(v)))
        die(EXIT_USAGE, "diff: %s: \"%s\" is %g, not a whole number up to %.0f", shown(d->path), key, v, max);
    return (size_t)v;
}

/* An .npy file as npy_write writes it: the whole file, its descr, shape
 * and elements. */
struct npy {
    char *raw;
    char descr[4];
    int ndim;
    size_t shape[2], n, size;
    const unsigned char *data;
};

/* Parse the dimensions "a, b" / "a," / "" of a shape tuple at s (ending at
 * ')'), at most 2, each and their product at most MAX_ELEMS; -1 if not. */
static int npy_shape(const char *s, struct npy *a)
{
    a->ndim = 0, a->n = 1;
    while (*s != ')') {
        if (a->ndim == 2 || !isdigit((unsigned char)*s)) return -1;
        char *end;
        errno = 0;
        unsigned long long v = strtoull(s, &end, 10);
        if (errno || v > MAX_ELEMS) return -1;
        a->shape[a->ndim++] = (size_t)v;
        a->n *= (size_t)v;
        if (a->n > MAX_ELEMS) return -1;
        s = end;
        if (*s == ',') s += s[1] == ' ' ? 2 : 1;
        else if (*s != ')') return -1;
    }
    return a->ndim == 1 && s[-1] != ',' ? -1 : 0;   /* (5,) for one dimension */
}

/* The path of file `name` of dump d into path (PATH_MAX + 80 bytes); exit
 * 2 if the manifest names a file outside the dump directory. */
static void diff_file(const struct dmp *d, const char *name, char *path)
{
    if (strchr(name, '/'))
        die(EXIT_USAGE, "diff: %s: file \"%s\" is not in the dump directory", shown(d->path), shown(name));
    snprintf(path, PATH_MAX + 80, "%s/%s", d->dir, name);
}

/* Read DIR/name of dump d as an .npy file of NumPy type `descr` ("<f4",
 * "<f8", "<u4"): format 1.0, C order, the header npy_write writes, and
 * exactly its elements after it.  Exit 2 with one line otherwise. */
static void npy_read(const struct dmp *d, const char *name, const char *descr, struct npy *a)
{
    char path[PATH_MAX + 80];
    diff_file(d, name, path);
    size_t len;
    memset(a, 0, sizeof *a);
    a->raw = read_file(path, &len);
    if (!a->raw) die(EXIT_USAGE, "diff: %s: cannot read: %s", shown(path), read_why());
    const unsigned char *u = (const unsigned char *)a->raw;
    if (len < 10 || memcmp(u, "\x93NUMPY\x01\x00", 8) != 0)
        die(EXIT_USAGE, "diff: %s: not an .npy file of format 1.0", shown(path));
    size_t hl = u[8] | (size_t)u[9] << 8;
    char head[256 + 64];
    if (hl >= sizeof head || 10 + hl > len || hl == 0 || a->raw[10 + hl - 1] != '\n')
        die(EXIT_USAGE, "diff: %s: malformed .npy header", shown(path));
    memcpy(head, a->raw + 10, hl - 1);
    head[hl - 1] = 0;
    for (size_t e = strlen(head); e > 0 && head[e - 1] == ' ';) head[--e] = 0;   /* the padding */
    static const char pre[] = "{'descr': '", mid[] = "', 'fortran_order': False, 'shape': (", post[] = "), }";
    size_t hn = strlen(head), pn = strlen(pre), mn = strlen(mid);
    if (hn < pn + 3 + mn + strlen(post) || strncmp(head, pre, pn) != 0 || strncmp(head + pn + 3, mid, mn) != 0 ||
        strcmp(head + hn - strlen(post), post) != 0)
        die(EXIT_USAGE, "diff: %s: not an .npy header kgate writes (format 1.0, C order)", shown(path));
    memcpy(a->descr, head + pn, 3);
    if (strcmp(a->descr, descr) != 0)
        die(EXIT_USAGE, "diff: %s: dtype '%s', expected '%s'", shown(path), a->descr, descr);
    head[hn - strlen(post) + 1] = 0;   /* the shape, up to its ')' */
    if (npy_shape(head + pn + 3 + mn, a) != 0) die(EXIT_USAGE, "diff: %s: malformed .npy shape", shown(path));
    a->size = descr[2] == '8' ? 8 : 4;
    if (len - 10 - hl != a->n * a->size)
        die(EXIT_USAGE, "diff: %s: %zu bytes of data, the shape needs %zu", shown(path), len - 10 - hl, a->n * a->size);
    a->data = u + 10 + hl;
}

/* Exit 2 unless .npy a has shape (r, c) (c == (size_t)-1: one dimension). */
static void npy_expect(const struct npy *a, const char *path, const char *name, size_t r, size_t c)
{
    int one = c == (size_t)-1;
    if (a->ndim != (one ? 1 : 2) || a->shape[0] != r || (!one && a->shape[1] != c))
        die(EXIT_USAGE, "diff: %s: %s has a shape that does not match the manifest", shown(path), shown(name));
}

/* Element i of a float32 .npy (little-endian data, as npy_write writes on
 * the little-endian machines kgate runs on). */
static float npy_f32(const struct npy *a, size_t i) { float v; memcpy(&v, a->data + 4 * i, 4); return v; }

/* Element i of a float64 .npy. */
static double npy_f64(const struct npy *a, size_t i) { double v; memcpy(&v, a->data + 8 * i, 8); return v; }

/* Element i of a uint32 .npy. */
static uint32_t npy_u32(const struct npy *a, size_t i) { uint32_t v; memcpy(&v, a->data + 4 * i, 4); return v; }

/* --- refusing two dumps of different things --- */

/* Exit 2 unless string member `key` of the two manifests' roots is equal. */
static void diff_same_str(const struct dmp *a, const struct dmp *b, const char *key)
{
    const char *x = diff_get(a, 0, key, 's')->str, *y = diff_get(b, 0, key, 's')->str;
    if (strcmp(x, y) != 0)
        die(EXIT_USAGE, "diff: refused: different %s: \"%s\" in %s, \"%s\" in %s", key, shown(x), shown(a->dir),
            shown(y), shown(b->dir));
}

/* The sha256 of file DIR/name of dump d, as hex. */
static void diff_sha(const struct dmp *d, const char *name, char out[65])
{
    char path[PATH_MAX + 80];
    diff_file(d, name, path);
    size_t len;
    char *t = read_file(path, &len);
    if (!t) die(EXIT_USAGE, "diff: %s: cannot read: %s", shown(path), read_why());
    sha256_text(t, len, out);
    free(t);
}

/* Exit 2 (one line) unless dumps a and b are of one case: the same format,
 * case, seed, inputs distribution, the same input tensors byte for byte
 * (sha256 of each file).  Returns the number of input tensors.  (The
 * outputs' names, dtypes and shapes are checked as diff_output compares
 * them.) */
static int diff_same_case(const struct dmp *a, const struct dmp *b)
{
    const struct dmp *d2[2] = { a, b };
    for (int s = 0; s < 2; s++)
        if (strcmp(diff_get(d2[s], 0, "format", 's')->str, DUMP_FORMAT) != 0)
            die(EXIT_USAGE, "diff: %s: format \"%s\"; this kgate reads \"%s\"", shown(d2[s]->path),
                shown(diff_get(d2[s], 0, "format", 's')->str), DUMP_FORMAT);
    diff_same_str(a, b, "case");
    const struct jnode *sa = diff_get(a, 0, "seed", 'n'), *sb = diff_get(b, 0, "seed", 'n');   /* as text: 64 bits */
    if (sa->len != sb->len || memcmp(sa->str, sb->str, (size_t)sa->len) != 0)
        die(EXIT_USAGE, "diff: refused: different seeds: %.*s in %s, %.*s in %s", sa->len, sa->str, shown(a->dir),
            sb->len, sb->str, shown(b->dir));
    diff_same_str(a, b, "inputs");
    const struct jnode *ta = diff_get(a, 0, "tensors", 'o'), *tb = diff_get(b, 0, "tensors", 'o');
    int n = 0, nb = 0;
    for (int c = tb->child; c >= 0; c = b->j.nodes[c].next) nb++;
    for (int c = ta->child; c >= 0; c = a->j.nodes[c].next, n++) {
        const struct jnode *x = &a->j.nodes[c];
        if (x->kind != 's')
            die(EXIT_USAGE, "diff: %s: not a kgate manifest (tensor %s is not a file name)", shown(a->path),
                shown(x->key));
        const char *fb = diff_get(b, (int)(tb - b->j.nodes), x->key, 's')->str;
        char ha[65], hb[65];
        diff_sha(a, x->str, ha);
        diff_sha(b, fb, hb);
        if (strcmp(ha, hb) != 0)
            die(EXIT_USAGE, "diff: refused: input %s differs (sha256 %.12s in %s, %.12s in %s): not the same inputs",
                shown(x->key), ha, shown(a->dir), hb, shown(b->dir));
    }
    if (n != nb)
        die(EXIT_USAGE, "diff: refused: %d input tensors in %s, %d in %s", n, shown(a->dir), nb, shown(b->dir));
    return n;
}

/* --- comparing one output --- */

/* What diff finds for one output. */
struct diff_out {
    const char *name, *dtype;
    size_t rows, cols, n, equal;
    double max_ulp;             /* INFINITY: a NaN or inf against something else */
    size_t max_i, max_j;
    double snr_ab, snr_ref[2];  /* dB; INFINITY when no difference */
    size_t ref_checked[2];      /* elements with a reference */
    long worst;                 /* the tile with the lowest A-vs-B SNR, -1 when none differs */
    size_t ti, tj, r0, r1, c0, c1; /* that tile: its coordinates, first and last row and column */
    size_t tile_differ, tile_n;
    double tile_snr;
    const char *verdict;        /* "equal", "within", "different" */
    char why[160];
};

/* A dtype's precision: its mantissa bits and its smallest normal's exponent. */
struct diff_prec { int mant, emin; };

/* The precision of dtype dt (f32, f16, bf16; diff_output refuses others). */
static struct diff_prec diff_prec_of(const char *dt)
{
    if (strcmp(dt, "f32") == 0) return (struct diff_prec){ 23, -126 };
    if (strcmp(dt, "f16") == 0) return (struct diff_prec){ 10, -14 };
    return (struct diff_prec){ 7, -126 };
}

/* The ulp at magnitude x of a dtype of precision p: 2^(e - mantissa bits)
 * for x in [2^e, 2^(e+1)), e no lower than the smallest normal's. */
static double diff_ulp_at(struct diff_prec p, double x)
{
    int e = 0;
    if (x > 0) frexp(x, &e), e -= 1;
    return ldexp(1.0, (x > 0 && e > p.emin ? e : p.emin) - p.mant);
}

/* How many ulps (precision p) a and b are apart, the ulp taken at the
 * larger magnitude of the two: 0 when bitwise equal, INFINITY when either
 * is not finite (and they are not bitwise equal). */
static double diff_ulps(struct diff_prec p, float a, float b)
{
    if (memcmp(&a, &b, 4) == 0) return 0;
    if (!isfinite(a) || !isfinite(b)) return INFINITY;
    return fabs((double)a - b) / diff_ulp_at(p, fmax(fabs(a), fabs(b)));
}

/* 10 log10(sig2 / err2): INFINITY when err2 is 0, -INFINITY when only the
 * signal is 0. */
static double diff_snr(double sig2, double err2)
{
    if (err2 == 0) return INFINITY;
    if (sig2 == 0) return -INFINITY;
    return 10.0 * log10(sig2 / err2);
}

/* Add one element (out against its reference) to the sums of an SNR: a
 * non-finite reference (LSE's -inf) adds nothing when out equals it, and
 * any other non-finite difference makes the error infinite. */
static void diff_ref_add(float out, double ref, double *sig, double *err)
{
    if (!isfinite(ref) && (double)out == ref) return;
    double e = out - ref;
    if (isfinite(e) && isfinite(ref)) *sig += ref * ref, *err += e * e;
    else *err = INFINITY;
}

/* The SNR of output `out` (rows x cols) of dump d against its double
 * reference, on every element the reference covers (the checked rows, and
 * outside them each row's checked columns, cols_checked's row); the number
 * of them in *checked. */
static double diff_ref_snr(const struct dmp *d, int o, const struct npy *out, size_t rows, size_t cols, size_t *checked)
{
    struct npy rr, rref, cc, cref;
    npy_read(d, diff_get(d, o, "rows_checked", 's')->str, "<u4", &rr);
    npy_expect(&rr, d->path, "rows_checked", rr.n, (size_t)-1);
    npy_read(d, diff_get(d, o, "ref_rows", 's')->str, "<f8", &rref);
    npy_expect(&rref, d->path, "ref_rows", rr.n, cols);
    npy_read(d, diff_get(d, o, "cols_checked", 's')->str, "<u4", &cc);
    size_t nc = cc.ndim == 2 ? cc.shape[1] : 0;
    npy_expect(&cc, d->path, "cols_checked", rows, nc);
    npy_read(d, diff_get(d, o, "ref_cols", 's')->str, "<f8", &cref);
    npy_expect(&cref, d->path, "ref_cols", rows, nc);
    double sig = 0, err = 0;
    *checked = 0;
    for (size_t r = 0; r < rr.n; r++) {
        uint32_t i = npy_u32(&rr, r);
        if (i >= rows) die(EXIT_USAGE, "diff: %s: a checked row %u beyond %zu rows", shown(d->path), i, rows);
        for (size_t j = 0; j < cols; j++) {
            diff_ref_add(npy_f32(out, (size_t)i * cols + j), npy_f64(&rref, r * cols + j), &sig, &err);
            ++*checked;
        }
    }
    for (size_t i = 0; i < rows; i++)
        for (size_t c = 0; c < nc; c++) {
            uint32_t j = npy_u32(&cc, i * nc + c);
            if (j >= cols) die(EXIT_USAGE, "diff: %s: a checked column %u beyond %zu columns", shown(d->path), j, cols);
            double ref = npy_f64(&cref, i * nc + c);
            if (isnan(ref)) continue;   /* a row the row block covers */
            diff_ref_add(npy_f32(out, i * cols + j), ref, &sig, &err);
            ++*checked;
        }
    free(rr.raw), free(rref.raw), free(cc.raw), free(cref.raw);
    return diff_snr(sig, err);
}

/* Element-wise A against B: equal bits, the largest ulp difference and
 * where, the SNR of A against B, and the tile (KG_TILE x KG_TILE) with the
 * lowest A-vs-B SNR. */
static void diff_elements(struct diff_out *x, const struct npy *a, const struct npy *b)
{
    size_t tr = (x->rows + KG_TILE - 1) / KG_TILE, tc = (x->cols + KG_TILE - 1) / KG_TILE;
    double *tsig = xcalloc(tr * tc, sizeof *tsig), *terr = xcalloc(tr * tc, sizeof *terr), sig = 0, err = 0;
    size_t *tdiff = xcalloc(tr * tc, sizeof *tdiff);
    struct diff_prec p = diff_prec_of(x->dtype);
    for (size_t i = 0; i < x->rows; i++)
        for (size_t j = 0; j < x->cols; j++) {
            size_t k = i * x->cols + j, t = (i / KG_TILE) * tc + j / KG_TILE;
            float va = npy_f32(a, k), vb = npy_f32(b, k);
            double u = diff_ulps(p, va, vb), e = (double)va - vb;
            double e2 = u == 0 ? 0 : isfinite(e) ? e * e : INFINITY, s2 = isfinite(va) ? (double)va * va : 0;
            x->equal += u == 0 && memcmp(&va, &vb, 4) == 0;
            if (u > x->max_ulp) x->max_ulp = u, x->max_i = i, x->max_j = j;
            sig += s2, err += e2, tsig[t] += s2, terr[t] += e2, tdiff[t] += memcmp(&va, &vb, 4) != 0;
        }
    x->snr_ab = diff_snr(sig, err);
    x->worst = -1;
    for (size_t t = 0; t < tr * tc; t++) {
        double s = diff_snr(tsig[t], terr[t]);
        if (tdiff[t] && (x->worst < 0 || s < x->tile_snr))
            x->worst = (long)t, x->tile_snr = s, x->tile_differ = tdiff[t];
    }
    if (x->worst >= 0) {
        x->ti = (size_t)x->worst / tc, x->tj = (size_t)x->worst % tc;
        x->r0 = x->ti * KG_TILE, x->r1 = (x->r0 + KG_TILE < x->rows ? x->r0 + KG_TILE : x->rows) - 1;
        x->c0 = x->tj * KG_TILE, x->c1 = (x->c0 + KG_TILE < x->cols ? x->c0 + KG_TILE : x->cols) - 1;
        x->tile_n = (x->r1 - x->r0 + 1) * (x->c1 - x->c0 + 1);
    }
    free(tsig), free(terr), free(tdiff);
}

/* The verdict of one compared output (README "Comparing two dumps"):
 * equal when every element is bitwise equal; within the precision of the
 * dtype when every element is at most DIFF_ULPS ulps apart, or when the
 * A-vs-B SNR is at least the better SNR against the reference minus
 * DIFF_SNR_SLACK_DB and in the worst tile at least it minus
 * DIFF_TILE_SLACK_DB; different otherwise. */
static void diff_verdict(struct diff_out *x)
{
    double best = fmax(x->snr_ref[0], x->snr_ref[1]);
    x->verdict = "different";
    if (x->equal == x->n) {
        x->verdict = "equal";
        snprintf(x->why, sizeof x->why, "every element bitwise equal");
    } else if (x->max_ulp <= DIFF_ULPS) {
        x->verdict = "within";
        snprintf(x->why, sizeof x->why, "every element within %g ulp of %s", DIFF_ULPS, x->dtype);
    } else if (x->snr_ab >= best - DIFF_SNR_SLACK_DB && x->tile_snr >= best - DIFF_TILE_SLACK_DB) {
        x->verdict = "within";
        snprintf(x->why, sizeof x->why, "SNR A vs B %.1f dB >= %.1f - %.0f, worst tile %.1f dB >= %.1f - %.0f",
                 x->snr_ab, best, DIFF_SNR_SLACK_DB, x->tile_snr, best, DIFF_TILE_SLACK_DB);
    } else {
        snprintf(x->why, sizeof x->why, "max %.3g ulp > %g; SNR A vs B %.1f dB (needs %.1f), worst tile %.1f dB "
                 "(needs %.1f)", x->max_ulp, DIFF_ULPS, x->snr_ab, best - DIFF_SNR_SLACK_DB, x->tile_snr,
                 best - DIFF_TILE_SLACK_DB);
    }
}

/* Compare output node oa of dump a with output ob of dump b (same name,
 * dtype and shape, else exit 2) into x. */
static void diff_output(struct diff_out *x, const struct dmp *a, int oa, const struct dmp *b, int ob)
{
    memset(x, 0, sizeof *x);
    x->name = diff_get(a, oa, "name", 's')->str;
    x->dtype = diff_get(a, oa, "dtype", 's')->str;
    x->rows = diff_whole(a, oa, "rows", MAX_ELEMS), x->cols = diff_whole(a, oa, "cols", MAX_ELEMS);
    if (strcmp(x->dtype, "f32") != 0 && strcmp(x->dtype, "f16") != 0 && strcmp(x->dtype, "bf16") != 0)
        die(EXIT_USAGE, "diff: %s: output %s has dtype \"%s\" (f32, f16, bf16 expected)", shown(a->path),
            shown(x->name), shown(x->dtype));
    if (strcmp(x->name, diff_get(b, ob, "name", 's')->str) != 0 ||
        strcmp(x->dtype, diff_get(b, ob, "dtype", 's')->str) != 0 || x->rows != diff_whole(b, ob, "rows", MAX_ELEMS) ||
        x->cols != diff_whole(b, ob, "cols", MAX_ELEMS))
        die(EXIT_USAGE, "diff: refused: output %s is not the same output in %s and %s", shown(x->name), shown(a->dir),
            shown(b->dir));
    struct npy na, nb;
    npy_read(a, diff_get(a, oa, "out", 's')->str, "<f4", &na);
    npy_expect(&na, a->path, x->name, x->rows, x->cols);
    npy_read(b, diff_get(b, ob, "out", 's')->str, "<f4", &nb);
    npy_expect(&nb, b->path, x->name, x->rows, x->cols);
    x->n = x->rows * x->cols;
    diff_elements(x, &na, &nb);
    x->snr_ref[0] = diff_ref_snr(a, oa, &na, x->rows, x->cols, &x->ref_checked[0]);
    x->snr_ref[1] = diff_ref_snr(b, ob, &nb, x->rows, x->cols, &x->ref_checked[1]);
    free(na.raw), free(nb.raw);
    diff_verdict(x);
}

/* --- the report --- */

/* An SNR as text: "inf" when there is no difference. */
static const char *diff_db(double v, char *buf, size_t n)
{
    if (v == INFINITY) snprintf(buf, n, "inf");
    else if (v == -INFINITY) snprintf(buf, n, "-inf");
    else snprintf(buf, n, "%.1f", v);
    return buf;
}

/* One output's lines of the text report. */
static void diff_print_output(const struct diff_out *x)
{
    char s1[32], s2[32], s3[32];
    printf("%s %s %zux%zu: %.4f%% bitwise equal (%zu of %zu); max %.3g ulp", x->name, x->dtype, x->rows, x->cols,
           x->n ? 100.0 * x->equal / x->n : 100.0, x->equal, x->n, x->max_ulp);
    if (x->max_ulp > 0) printf(" at (%zu,%zu)", x->max_i, x->max_j);
    printf("; SNR A vs B %s dB; vs reference: A %s dB, B %s dB (%zu checked elements)\n",
           diff_db(x->snr_ab, s1, sizeof s1), diff_db(x->snr_ref[0], s2, sizeof s2),
           diff_db(x->snr_ref[1], s3, sizeof s3), x->ref_checked[0]);
    if (x->worst >= 0)
        printf("  worst tile (%zu,%zu), rows %zu..%zu cols %zu..%zu: %zu of %zu elements differ, SNR A vs B %s dB\n",
               x->ti, x->tj, x->r0, x->r1, x->c0, x->c1, x->tile_differ, x->tile_n,
               diff_db(x->tile_snr, s1, sizeof s1));
    printf("  %s: %s\n", strcmp(x->verdict, "within") == 0 ? "within the precision of the dtype" : x->verdict, x->why);
}

/* One output as a JSON object (infinite SNRs and ulps are null). */
static void diff_json_output(const struct diff_out *x, int comma)
{
    printf("{");
    json_str(stdout, "name", x->name, 1);
    json_str(stdout, "dtype", x->dtype, 1);
    printf("\"rows\":%zu,\"cols\":%zu,\"bitwise_equal\":%zu,", x->rows, x->cols, x->equal);
    json_num(stdout, "bitwise_equal_share", x->n ? (double)x->equal / x->n : 1.0, 1);
    json_num(stdout, "max_ulp", x->max_ulp, 1);
    printf("\"max_ulp_at\":[%zu,%zu],", x->max_i, x->max_j);
    json_num(stdout, "snr_a_vs_b_db", x->snr_ab, 1);
    json_num(stdout, "snr_a_vs_ref_db", x->snr_ref[0], 1);
    json_num(stdout, "snr_b_vs_ref_db", x->snr_ref[1], 1);
    printf("\"ref_checked\":%zu,\"worst_tile\":", x->ref_checked[0]);
    if (x->worst < 0) printf("null,");
    else {
        printf("{\"tile\":[%zu,%zu],\"rows\":[%zu,%zu],\"cols\":[%zu,%zu],\"differ\":%zu,\"elements\":%zu,", x->ti,
               x->tj, x->r0, x->r1, x->c0, x->c1, x->tile_differ, x->tile_n);
        json_num(stdout, "snr_a_vs_b_db", x->tile_snr, 0);
        printf("},");
    }
    json_str(stdout, "verdict", x->verdict, 1);
    json_str(stdout, "why", x->why, 0);
    printf("}%s", comma ? "," : "");
}

/* The fault dump d was made with (its manifest's "inject"), or NULL. */
static const char *diff_inject(const struct dmp *d)
{
    for (int c = d->j.nodes[0].child; c >= 0; c = d->j.nodes[c].next)
        if (strcmp(d->j.nodes[c].key, "inject") == 0 && d->j.nodes[c].kind == 's') return d->j.nodes[c].str;
    return NULL;
}

/* Every output of dump a against the same output of dump b (the same
 * number of outputs, each an object, else exit 2); their count in *n. */
static struct diff_out *diff_all(const struct dmp *a, const struct dmp *b, int *n)
{
    const struct jnode *la = diff_get(a, 0, "outputs", 'a'), *lb = diff_get(b, 0, "outputs", 'a');
    int nb = 0;
    *n = 0;
    for (int c = la->child; c >= 0; c = a->j.nodes[c].next) ++*n;
    for (int c = lb->child; c >= 0; c = b->j.nodes[c].next) nb++;
    if (*n != nb) die(EXIT_USAGE, "diff: refused: %d outputs in %s, %d in %s", *n, shown(a->dir), nb, shown(b->dir));
    struct diff_out *x = xcalloc((size_t)*n + 1, sizeof *x);
    for (int k = 0, ca = la->child, cb = lb->child; k < *n; k++, ca = a->j.nodes[ca].next, cb = b->j.nodes[cb].next) {
        if (a->j.nodes[ca].kind != 'o' || b->j.nodes[cb].kind != 'o')
            die(EXIT_USAGE, "diff: %s: not a kgate manifest (an output is not an object)",
                shown(a->j.nodes[ca].kind != 'o' ? a->path : b->path));
        diff_output(&x[k], a, ca, b, cb);
    }
    return x;
}

/* The run's verdict, its worst output's: 0 equal, 1 within, 2 different. */
static int diff_worst(const struct diff_out *x, int n)
{
    int worst = 0;
    for (int k = 0; k < n; k++) {
        int v = strcmp(x[k].verdict, "equal") == 0 ? 0 : strcmp(x[k].verdict, "within") == 0 ? 1 : 2;
        worst = v > worst ? v : worst;
    }
    return worst;
}

/* The report's head: the case, seed and inputs of the two dumps, their
 * directories and any planted fault; with json, the object's opening
 * members up to the outputs' '['. */
static void diff_print_head(int json, const struct dmp *a, const struct dmp *b, int ninputs)
{
    const char *inj[2] = { diff_inject(a), diff_inject(b) };
    const char *label = diff_get(a, 0, "case", 's')->str, *inputs = diff_get(a, 0, "inputs", 's')->str;
    const struct jnode *seed = diff_get(a, 0, "seed", 'n');
    if (json) {
        printf("{\"command\":\"diff\",");
        json_str(stdout, "a", a->dir, 1);
        json_str(stdout, "b", b->dir, 1);
        json_str(stdout, "case", label, 1);
        printf("\"seed\":%.*s,", seed->len, seed->str);
        json_str(stdout, "inputs", inputs, 1);
        for (int s = 0; s < 2; s++)
            if (inj[s]) json_str(stdout, s ? "inject_b" : "inject_a", inj[s], 1);
        printf("\"inputs_identical\":%d,\"outputs\":[", ninputs);
        return;
    }
    printf("kgate diff: %s, seed %.*s, inputs %s; %d input tensors byte-identical (sha256)\n", label, seed->len,
           seed->str, inputs, ninputs);
    for (int s = 0; s < 2; s++)
        printf("  %s %s%s%s%s\n", s ? "B" : "A", s ? b->dir : a->dir, inj[s] ? "  (--inject " : "",
               inj[s] ? inj[s] : "", inj[s] ? ")" : "");
}

/* kgate diff A B [--json]: refuse two dumps of different cases, seeds or
 * inputs (exit 2), else compare every output and print the report; exit 0
 * when every output is equal or within the precision of its dtype, 1 when
 * one is different. */
static int cmd_diff(const struct opts *o, const char *sub)
{
    (void)sub;
    if (!o->diff_dirs[0] || !o->diff_dirs[1]) die(EXIT_USAGE, "diff: give two --dump directories: kgate diff A B");
    struct dmp a, b;
    diff_open(&a, o->diff_dirs[0]);
    diff_open(&b, o->diff_dirs[1]);
    int ninputs = diff_same_case(&a, &b), n;
    struct diff_out *x = diff_all(&a, &b, &n);
    int worst = diff_worst(x, n);
    diff_print_head(o->json, &a, &b, ninputs);
    for (int k = 0; k < n; k++) {
        if (o->json) diff_json_output(&x[k], k + 1 < n);
        else diff_print_output(&x[k]);
    }
    static const char *const VERDICT[] = { "equal", "within the precision of the dtype", "different" };
    if (o->json) printf("],\"verdict\":\"%s\"}\n", worst == 0 ? "equal" : worst == 1 ? "within" : "different");
    else printf("verdict: %s\n", VERDICT[worst]);
    free(x);
    diff_close(&a);
    diff_close(&b);
    return worst == 2 ? EXIT_GATE : EXIT_PASS;
}
