/* src/ledger.c — the ledger: append-only JSON lines chained by SHA-256,
 * appended under a lock in one write; the budget of candidate code objects;
 * verdicts and bands reused from it; `kgate ledger [verify | best]`.
 * Relies on util.c, gpu.c (the device), options.c, compile.c (arms), case.c,
 * run.c, timer.c (rounds) and report.c (the JSON of a case). */

/* The ledger (README "Porting: variants, compare, noise, the ledger and the
 * budget"): JSON lines, append-only, one per measured arm.  Each line is
 *   {"seq":N,"prev":"<sha256 of line N-1>",<fields>,"line_sha256":"<sha256>"}
 * where line_sha256 hashes the line's text before ',"line_sha256"', and the
 * first line's prev is 64 zeros; `kgate ledger verify` finds any edited,
 * removed or reordered line.  kgate trusts no verdict of a ledger whose
 * chain does not verify.  A case's lines are appended together: under an
 * exclusive flock kgate re-reads and verifies the ledger, checks the budget
 * for every arm, and writes the lines with one write() on an O_APPEND
 * descriptor, then fsyncs; readers take a shared flock.  So concurrent runs
 * never interleave or half-read a line.  A process killed inside that
 * write() can leave the whole lines of its first arms and part of the
 * next: Linux copies a write a page at a time and stops between pages for
 * a fatal signal.  Such a tail (no newline, not a whole line) is an
 * interrupted append, never a line of the ledger: readers pass over it
 * with a note, and the next append cuts it off (struct ledger_tail). */

#define LEDGER_DEFAULT "kgate.ledger"
#define LEDGER_MAX_BYTES ((off_t)256 << 20)   /* the largest ledger kgate reads (a line is 1-8 KiB) */
#define BUDGET_DEFAULT 3
#define LEDGER_ZERO "0000000000000000000000000000000000000000000000000000000000000000"

/* What kgate reads back from one ledger line. */
struct ledger_line {
    long seq;
    char role[16], sha[65], kase[256], arch[64], device[256], verdict[16], arm[64], compare[16];
    char gates[16];               /* the correctness gates' verdict ("" on cached and planted-fault lines) */
    char conditions[512];         /* what the gates were held to (ledger_conditions) */
    char build[65];               /* the kgate binary's SHA-256 (ledger_build; "" on older lines) */
    uint64_t seed;
    int deliverable, band_measured;
    double ratio, band, median_us;
};

struct ledger {
    const char *path;
    struct ledger_line *line;
    size_t n, cap;
    int budget;
};

/* The raw text of top-level field `key` of a one-line JSON object into out
 * (a string without its quotes and with \" and \\ undone; a number, true,
 * false, null or a nested value as written).  0 if found. */
static int ledger_field(const char *s, const char *key, char *out, size_t n)
{
    int depth = 0, in_str = 0;
    size_t klen = strlen(key);
    for (const char *p = s; *p; p++) {
        if (in_str) {
            if (*p == '\\' && p[1]) p++;
            else if (*p == '"') in_str = 0;
            continue;
        }
        if (*p == '{' || *p == '[') { depth++; continue; }
        if (*p == '}' || *p == ']') { depth--; continue; }
        if (*p != '"') continue;
        if (depth == 1 && strncmp(p + 1, key, klen) == 0 && p[1 + klen] == '"' && p[2 + klen] == ':') {
            const char *v = p + 3 + klen;
            size_t o = 0;
            if (*v == '"') {
                for (v++; *v && *v != '"'; v++) {
                    if (*v == '\\' && v[1]) v++;
                    if (o + 1 < n) out[o++] = *v;
                }
            } else {
                int d = 0;
                for (; *v && (d > 0 || (*v != ',' && *v != '}')); v++) {
                    d += (*v == '{' || *v == '[') - (*v == '}' || *v == ']');
                    if (o + 1 < n) out[o++] = *v;
                }
            }
            out[o] = 0;
            return 0;
        }
        in_str = 1;
    }
    return -1;
}

/* A number field of a ledger line; NAN when absent or null. */
static double ledger_field_num(const char *s, const char *key)
{
    char buf[64];
    return ledger_field(s, key, buf, sizeof buf) == 0 && strcmp(buf, "null") ? atof(buf) : NAN;
}

/* The SHA-256 of the running kgate binary (/proc/self/exe), read once: a
 * cached verdict is taken only from a line that this same build wrote, as
 * another build's gates may judge differently.  NULL if it cannot be read
 * (then no verdict is reused). */
static const char *ledger_build(void)
{
    static char hex[65];
    static int done;
    if (done) return *hex ? hex : NULL;
    done = 1;
    size_t len;
    char *exe = read_file("/proc/self/exe", &len);
    if (!exe) return NULL;
    sha256_text(exe, len, hex);
    free(exe);
    return hex;
}

/* Parse the fields kgate uses from one ledger line. */
static void ledger_parse(const char *text, struct ledger_line *l)
{
    char buf[32];
    memset(l, 0, sizeof *l);
    double seq = ledger_field_num(text, "seq");
    l->seq = isnan(seq) ? 0 : (long)seq;
    ledger_field(text, "gates_verdict", l->gates, sizeof l->gates);
    ledger_field(text, "conditions", l->conditions, sizeof l->conditions);
    ledger_field(text, "kgate_sha256", l->build, sizeof l->build);
    ledger_field(text, "role", l->role, sizeof l->role);
    ledger_field(text, "code_sha256", l->sha, sizeof l->sha);
    ledger_field(text, "case", l->kase, sizeof l->kase);
    ledger_field(text, "arch", l->arch, sizeof l->arch);
    ledger_field(text, "device", l->device, sizeof l->device);
    ledger_field(text, "verdict", l->verdict, sizeof l->verdict);
    ledger_field(text, "arm", l->arm, sizeof l->arm);
    ledger_field(text, "compare", l->compare, sizeof l->compare);
    if (ledger_field(text, "seed", buf, sizeof buf) == 0) l->seed = strtoull(buf, NULL, 10);
    l->deliverable = !(ledger_field(text, "deliverable", buf, sizeof buf) == 0 && strcmp(buf, "false") == 0);
    l->ratio = ledger_field_num(text, "ratio");
    l->band = ledger_field_num(text, "band");
    l->band_measured = ledger_field(text, "aa_ratio", buf, sizeof buf) == 0 && !isnan(l->band);
    l->median_us = ledger_field_num(text, "median_us");
}

/* Parse one ledger line (without its newline) into lg's table. */
static void ledger_add(struct ledger *lg, const char *text)
{
    if (lg->n == lg->cap) {
        lg->cap = lg->cap ? 2 * lg->cap : 64;
        lg->line = realloc(lg->line, lg->cap * sizeof *lg->line);
        if (!lg->line) die(EXIT_DEVICE, "out of host memory reading the ledger");
    }
    ledger_parse(text, &lg->line[lg->n++]);
}

/* The ledger file: what `kgate` means by "the ledger" for options o. */
static const char *ledger_path(const struct opts *o) { return o->ledger_path ? o->ledger_path : LEDGER_DEFAULT; }

/* A break of the chain at the link to the line before: that line may be
 * the edited one (its own line_sha256 recomputed), so the table stops
 * before it too (ledger_table). */
static const char LEDGER_PREV_BROKEN[] =
    "its prev is not the sha256 of the line before (that line was edited, removed or reordered)";

/* A line without its whole `,"line_sha256":"<64 hex>"}` ending: all that a
 * write killed part-way leaves of a line (ledger_walk). */
static const char LEDGER_SHA_MISSING[] = "its line_sha256 is missing";

/* Check one ledger line (without its newline) against the chain: its seq,
 * the hash of the line before (prev_sha), and its own line_sha256.  NULL
 * if it holds, else what is wrong. */
static const char *ledger_line_problem(const char *line, long seq, const char *prev_sha)
{
    static const char marker[] = ",\"line_sha256\":\"";
    char prev[80], self[65], want[65];
    if (strncmp(line, "{\"seq\":", 7) != 0) return "not a ledger line";
    double at = ledger_field_num(line, "seq");
    if (isnan(at) || at != (double)seq)
        return "its seq is out of order (a line before it was removed, or lines were reordered)";
    if (ledger_field(line, "prev", prev, sizeof prev) != 0 || strcmp(prev, prev_sha) != 0)
        return seq == 1 ? "its prev is not 64 zeros, as the first line's is (lines before it were removed)"
                        : LEDGER_PREV_BROKEN;
    size_t len = strlen(line);
    if (len && line[len - 1] == '\r') return "it ends in a carriage return (the file was given CRLF line ends)";
    const char *m = strstr(line, marker);
    if (!m || len < 2 || strcmp(line + len - 2, "\"}") != 0 || (size_t)(line + len - m) != sizeof marker - 1 + 64 + 2)
        return LEDGER_SHA_MISSING;
    snprintf(self, sizeof self, "%.64s", m + sizeof marker - 1);
    sha256_text(line, (size_t)(m - line), want);
    if (strcmp(self, want) != 0) return "its text does not match its line_sha256 (the line was edited)";
    return NULL;
}

/* What follows a ledger's last newline, when anything does (ledger_walk):
 * a whole line whose newline is missing (an editor may drop it), or the
 * part of a line that an append killed inside its write() left. */
struct ledger_tail {
    size_t at, bytes;             /* where the tail starts, its length (0: the text ends in a newline) */
    int whole;                    /* 1: it is a whole line of the chain (counted), 0: an interrupted append */
};

/* Whether the n bytes at p, which do not hold as a line for reason `why`,
 * are what an append killed inside its write() leaves of line seq chained
 * to prev_sha: its beginning, `{"seq":seq,"prev":"prev_sha",`, or more of
 * it, without the whole line_sha256 ending (a line that has that ending
 * and does not hold was edited, not cut). */
static int ledger_line_start(const char *p, size_t n, long seq, const char *prev_sha, const char *why)
{
    char head[128];
    int h = snprintf(head, sizeof head, "{\"seq\":%ld,\"prev\":\"%s\",", seq, prev_sha);
    return memcmp(p, head, n < (size_t)h ? n : (size_t)h) == 0 && (n <= (size_t)h || why == LEDGER_SHA_MISSING);
}

/* Walk the ledger text (len bytes) line by line against the chain (see
 * ledger_line_problem), adding each line to lg when lg is not NULL.
 * Returns 0 if every line holds; else the number of the first line that
 * does not, with *why saying what is wrong (a NUL byte included).  A tail
 * after the last newline goes to *tail: counted as a line when it is a
 * whole one, left out when it begins as the next line would
 * (ledger_line_start: an interrupted append), else it is the line that
 * does not hold.  *lines gets the number of lines read, *last_sha the
 * sha256 of the last one (64 zeros for an empty ledger). */
static long ledger_walk(const char *text, size_t len, struct ledger *lg, const char **why, long *lines,
                        char last_sha[65], struct ledger_tail *tail)
{
    long seq = 0;
    snprintf(last_sha, 65, "%s", LEDGER_ZERO);
    *tail = (struct ledger_tail){ len, 0, 0 };
    *lines = 0;
    for (size_t at = 0; at < len;) {
        const char *p = text + at, *nl = memchr(p, '\n', len - at);
        size_t n = nl ? (size_t)(nl - p) : len - at;
        char *line = xmalloc(n + 1);
        memcpy(line, p, n);
        line[n] = 0;
        seq++;
        *why = memchr(p, 0, n) ? "it holds a NUL byte" : ledger_line_problem(line, seq, last_sha);
        if (!nl) *tail = (struct ledger_tail){ at, n, !*why };
        if (!nl && *why && ledger_line_start(p, n, seq, last_sha, *why)) {   /* an interrupted append: not a line */
            free(line);
            *why = NULL;
            break;
        }
        if (!nl && *why) *tail = (struct ledger_tail){ len, 0, 0 };
        *lines = seq;
        if (!*why && lg) ledger_add(lg, line);
        free(line);
        if (*why) return seq;
        sha256_text(p, n, last_sha);
        at += n + 1;
    }
    return 0;
}

/* A note on the tail t of ledger `path` (NULL when there is none): what it
 * is, and what the next append does with it, or, with `cut`, that this
 * append cut it off. */
static const char *ledger_tail_note(const char *path, const struct ledger_tail *t, int cut)
{
    static char note[PATH_MAX + 200];
    if (!t->bytes) return NULL;
    if (t->whole)
        snprintf(note, sizeof note, "the ledger %s: its last line lacks its newline; the next append adds it",
                 shown(path));
    else
        snprintf(note, sizeof note, "the ledger %s %s in an interrupted append (%zu byte%s without a newline, left "
                 "by a run killed while writing): %s", shown(path), cut ? "ended" : "ends", t->bytes,
                 t->bytes == 1 ? "" : "s", cut ? "cut off" : "not a line of the ledger; the next append cuts it off");
    return note;
}

/* The whole content of open file fd (the ledger at path) into a new
 * string; NULL on a read error.  Exit 2 if it is larger than
 * LEDGER_MAX_BYTES. */
static char *ledger_read_fd(int fd, const char *path, size_t *len)
{
    off_t end = lseek(fd, 0, SEEK_END);
    if (end < 0) return NULL;
    if (end > LEDGER_MAX_BYTES)
        die(EXIT_USAGE, "the ledger %s holds %lld bytes, more than the %lld kgate reads: start another (--ledger "
            "FILE)", shown(path), (long long)end, (long long)LEDGER_MAX_BYTES);
    char *s = xmalloc((size_t)end + 1);
    size_t got = 0;
    while (got < (size_t)end) {
        ssize_t r = pread(fd, s + got, (size_t)end - got, (off_t)got);
        if (r <= 0) { free(s); return NULL; }
        got += (size_t)r;
    }
    s[got] = 0;
    *len = got;
    return s;
}

/* Check what the ledger path names before any work: exit 2 if it is
 * anything but a regular file (a directory, a device such as /dev/null, a
 * FIFO), or, when must_exist, if there is nothing there.  Returns 1 if the
 * file exists, 0 if it does not (it may then be created). */
static int ledger_check_path(const char *path, int must_exist)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        if (errno == ENOENT && !must_exist) return 0;
        if (errno == ENOENT)
            die(EXIT_USAGE, "no ledger at %s (nothing was measured there; --ledger FILE names another)", shown(path));
        die(EXIT_USAGE, "cannot use the ledger %s: %s", shown(path), strerror(errno));
    }
    if (!S_ISREG(st.st_mode))
        die(EXIT_USAGE, "the ledger %s is %s, not a regular file", shown(path), file_kind(st.st_mode));
    return 1;
}

/* The whole ledger file at path (checked by ledger_check_path), read
 * read-only under a shared lock (so never in the middle of an append);
 * NULL with errno set if it cannot be read. */
static char *ledger_read(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    if (fd < 0) return NULL;
    char *text = flock(fd, LOCK_SH) == 0 ? ledger_read_fd(fd, path, len) : NULL;
    int err = errno;
    close(fd);
    errno = err;
    return text;
}

/* Read the ledger at lg->path into lg (nothing if the file does not exist
 * yet), every line checked against the chain: exit 2 if it cannot be read
 * or does not verify, for no verdict is taken from a ledger that was
 * edited.  A note on stderr for its tail (ledger_tail_note). */
static void ledger_load(struct ledger *lg)
{
    size_t len = 0;
    char *text = ledger_read(lg->path, &len);
    if (!text && errno == ENOENT) return;
    if (!text) die(EXIT_USAGE, "cannot read the ledger %s: %s", shown(lg->path), strerror(errno));
    const char *why = NULL;
    struct ledger_tail tail;
    long lines = 0, bad = ledger_walk(text, len, lg, &why, &lines, (char[65]){ 0 }, &tail);
    free(text);   /* before die: LeakSanitizer reports a buffer only a register still points to */
    if (bad)
        die(EXIT_USAGE, "the ledger %s does not verify at line %ld: %s (kgate ledger verify)", shown(lg->path), bad, why);
    const char *note = ledger_tail_note(lg->path, &tail, 0);
    if (note) fprintf(stderr, "kgate: %s\n", note);
}

/* Open the ledger the options name for appends and read it: exit 2 before
 * any work if it is not a regular file, cannot be written, or its
 * <ledger>.objects directory (compile logs) cannot be made or written. */
static void ledger_open(struct ledger *lg, const struct opts *o)
{
    memset(lg, 0, sizeof *lg);
    lg->path = ledger_path(o);
    lg->budget = o->budget ? o->budget : BUDGET_DEFAULT;
    if (!ledger_check_path(lg->path, 0)) {   /* kgate makes the ledger, not the directory it is to be in */
        char parent[PATH_MAX];
        snprintf(parent, sizeof parent, "%s", lg->path);
        char *slash = strrchr(parent, '/');
        if (slash) *(slash == parent ? slash + 1 : slash) = 0;
        struct stat st;
        if (slash && stat(parent, &st) != 0)
            die(EXIT_USAGE, "cannot make the ledger %s: %s: %s", shown(lg->path), shown(parent), strerror(errno));
    }
    char dir[PATH_MAX];
    if (snprintf(dir, sizeof dir, "%s.objects", lg->path) >= (int)sizeof dir)
        die(EXIT_USAGE, "the ledger path %s is too long", shown(lg->path));
    usable_dir(dir, "the ledger's objects directory", NULL);
    int fd = open(lg->path, O_WRONLY | O_APPEND | O_CREAT | O_NONBLOCK, 0644);
    if (fd < 0) die(EXIT_USAGE, "cannot write the ledger %s: %s", shown(lg->path), strerror(errno));
    close(fd);
    ledger_load(lg);
}

/* Open the ledger the options name for reading only (ledger best): exit 2
 * if there is none or it is not a regular file; nothing is created. */
static void ledger_open_read(struct ledger *lg, const struct opts *o)
{
    memset(lg, 0, sizeof *lg);
    lg->path = ledger_path(o);
    lg->budget = o->budget ? o->budget : BUDGET_DEFAULT;
    ledger_check_path(lg->path, 1);
    ledger_load(lg);
}

/* Distinct candidate code objects in the ledger (diagnostic ones count);
 * with `sha`, whether that one is among them (*known). */
static int ledger_candidates(const struct ledger *lg, const char *sha, int *known)
{
    int count = 0;
    if (known) *known = 0;
    for (size_t i = 0; i < lg->n; i++) {
        if (strcmp(lg->line[i].role, "candidate") != 0) continue;
        int seen = 0;
        for (size_t j = 0; j < i && !seen; j++)
            seen = strcmp(lg->line[j].role, "candidate") == 0 && strcmp(lg->line[j].sha, lg->line[i].sha) == 0;
        count += !seen;
        if (known && sha && strcmp(lg->line[i].sha, sha) == 0) *known = 1;
    }
    return count;
}

/* The best correct checkpoint: the passing deliverable candidate line with
 * the lowest time ratio, on case `kase` if there is one there (kase may be
 * NULL), else on any case.  NULL if none. */
static const struct ledger_line *ledger_best_line(const struct ledger *lg, const char *kase)
{
    const struct ledger_line *best = NULL;
    for (int pass = 0; pass < 2 && !best; pass++)
        for (size_t i = 0; i < lg->n; i++) {
            const struct ledger_line *l = &lg->line[i];
            if (strcmp(l->role, "candidate") || !l->deliverable || isnan(l->ratio) ||
                (strcmp(l->verdict, "pass") && strcmp(l->verdict, "cached")))
                continue;
            if (pass == 0 && (!kase || strcmp(l->kase, kase))) continue;
            if (!best || l->ratio < best->ratio) best = l;
        }
    return best;
}

/* Where checkpoint b stands against the reference: its time ratio, the
 * verdict against the band, and the gap that remains when it is slower. */
static void checkpoint_standing(const struct ledger_line *b, char *buf, size_t n)
{
    if (strcmp(b->compare, "slower") == 0)
        snprintf(buf, n, "%.4f of the reference's time, slower: a remaining gap of %.1f%%", b->ratio, 100 * (b->ratio - 1));
    else if (strcmp(b->compare, "faster") == 0)
        snprintf(buf, n, "%.4f of the reference's time, faster by %.1f%%", b->ratio, 100 * (1 - b->ratio));
    else
        snprintf(buf, n, "%.4f of the reference's time, at parity (inside the band of +-%.2f%%)", b->ratio, 100 * b->band);
}

/* Exit 4 if arm a is a candidate whose code object is new to the ledger and
 * the budget is spent, naming the best correct checkpoint and its gap. */
static void ledger_budget_check(const struct ledger *lg, const struct arm *a, const char *kase)
{
    int known = 0, used = ledger_candidates(lg, a->code.sha, &known);
    if (!a->candidate || known || used < lg->budget) return;
    const struct ledger_line *b = ledger_best_line(lg, kase);
    char best[1024] = "no candidate has passed every gate yet", standing[128];
    if (b) {
        checkpoint_standing(b, standing, sizeof standing);
        snprintf(best, sizeof best, "the best correct checkpoint is '%s' (code object %.12s, ledger line %ld) on "
                 "%s, %s: %s", b->arm, b->sha, b->seq, b->kase, b->device, standing);
    }
    die(EXIT_BUDGET, "budget spent: %d of %d candidate code objects are measured in %s, and '%s' (code object "
        "%.12s) is new; %s.  Re-running a measured code object costs nothing; --budget N raises the limit",
        used, lg->budget, lg->path, a->name, a->code.sha, best);
}

/* What a run holds the gates to, as one line: tolerances, checked
 * elements, repeats, the precision waiver, and the graph path when it ran
 * (an eager line's conditions read as before --graph existed).  A cached
 * verdict is reused, and an A/A band, only under the same conditions. */
static void ledger_conditions(const struct opts *o, char *buf, size_t n)
{
    snprintf(buf, n, "rtol %g atol %g full %d repeat %d trades-precision %s%s", o->rtol, o->atol, o->full,
             o->repeat > 1 ? o->repeat : 1, o->trades_precision ? "yes" : "no", o->graph ? " path graph" : "");
}

/* The latest ledger line that settled arm a's correctness on case c: same
 * kgate build (ledger_build), code object, case, seed, device and
 * conditions, the gates run there (not reused, no planted fault).  NULL if
 * none. */
static const struct ledger_line *ledger_verdict_line(const struct ledger *lg, const struct kcase *c,
                                                     const struct opts *o, const struct device *d,
                                                     const struct arm *a)
{
    char cond[512];
    const char *build = ledger_build();
    ledger_conditions(o, cond, sizeof cond);
    for (size_t i = lg->n; i-- > 0 && build;) {
        const struct ledger_line *l = &lg->line[i];
        if (strcmp(l->build, build) == 0 && strcmp(l->sha, a->code.sha) == 0 && strcmp(l->kase, c->label) == 0 &&
            l->seed == o->seed && strcmp(l->arch, d->arch) == 0 && strcmp(l->device, d->name) == 0 && strcmp(l->conditions, cond) == 0 &&
            (strcmp(l->gates, "pass") == 0 || strcmp(l->gates, "fail") == 0))
            return l;
    }
    return NULL;
}

/* Mark the arms whose verdict on case c the ledger already holds: their
 * gates are not run again (a planted fault always runs them). */
static void ledger_lookup_cached(const struct ledger *lg, const struct kcase *c, const struct opts *o,
                                 const struct device *d, struct arm_case *ac, int narms)
{
    for (int a = 0; a < narms && !o->inject; a++) {
        const struct ledger_line *l = ledger_verdict_line(lg, c, o, d, ac[a].arm);
        if (!l) continue;
        ac[a].cached = l->seq;
        ac[a].pass = ac[a].gates_pass = strcmp(l->gates, "pass") == 0;
    }
}

/* The A/A band last measured for case c with reference code object `sha`
 * on this device and seed, on the same path (eager or graph); its line in
 * *line.  < 0 if none. */
static double ledger_band(const struct ledger *lg, const struct kcase *c, const struct opts *o,
                          const struct device *d, const char *sha, long *line)
{
    for (size_t i = lg->n; i-- > 0;) {
        const struct ledger_line *l = &lg->line[i];
        if (l->band_measured && strcmp(l->sha, sha) == 0 && strcmp(l->kase, c->label) == 0 &&
            l->seed == o->seed && strcmp(l->device, d->name) == 0 && strcmp(l->arch, d->arch) == 0 &&
            (strstr(l->conditions, " path graph") != NULL) == (o->graph != 0)) {
            *line = l->seq;
            return l->band;
        }
    }
    return -1;
}

/* Cut the tail t of the ledger open as fd (held under the exclusive lock)
 * off when it is an interrupted append, with a note; a whole last line
 * without its newline keeps its place (the caller writes the newline). */
static void ledger_cut_tail(int fd, const char *path, const struct ledger_tail *t)
{
    if (!t->bytes || t->whole) return;
    if (ftruncate(fd, (off_t)t->at) != 0)
        die(EXIT_IO, "cannot cut the interrupted append off the ledger %s: %s", shown(path), strerror(errno));
    fprintf(stderr, "kgate: %s\n", ledger_tail_note(path, t, 1));
}

/* Append one line per arm of a case (fields[a]: JSON members, no braces,
 * for arm a), chained.  Under an exclusive lock it re-reads and verifies
 * the whole ledger (another process may have appended meanwhile), cuts an
 * interrupted append off, checks the budget for every arm before writing
 * any (exit 4 when a concurrent run took the last slot), then writes the
 * lines, each with its budget count, in one write() and fsyncs; a short
 * write is cut back off.  Returns the first line's seq. */
static long ledger_append(struct ledger *lg, char *const *fields, const struct arm *const *arms, int narms,
                          const char *kase)
{
    int fd = open(lg->path, O_RDWR | O_APPEND | O_CREAT, 0644);
    if (fd < 0) die(EXIT_IO, "cannot open the ledger %s: %s", shown(lg->path), strerror(errno));
    if (flock(fd, LOCK_EX) != 0) die(EXIT_IO, "cannot lock the ledger %s: %s", shown(lg->path), strerror(errno));
    const char *hold = getenv("KGATE_TEST_LEDGER_HOLD");   /* tests: kill -9 while the lock is held */
    if (hold) fprintf(stderr, "kgate: holding the ledger lock (test)\n"), usleep((useconds_t)(atof(hold) * 1e6));
    size_t old = 0;
    char *text = ledger_read_fd(fd, lg->path, &old), prev[65];
    if (!text) die(EXIT_IO, "cannot read the ledger %s: %s", shown(lg->path), strerror(errno));
    const char *why = NULL;
    struct ledger_tail tail;
    long lines = 0;
    lg->n = 0;
    long bad = ledger_walk(text, old, lg, &why, &lines, prev, &tail);
    free(text);
    if (bad)
        die(EXIT_USAGE, "the ledger %s does not verify at line %ld: %s; nothing appended", shown(lg->path), bad, why);
    ledger_cut_tail(fd, lg->path, &tail);
    old = tail.bytes && !tail.whole ? tail.at : old;
    for (int a = 0; a < narms; a++) ledger_budget_check(lg, arms[a], kase);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (tail.bytes && tail.whole) fputc('\n', f);
    for (int a = 0; a < narms; a++) {
        char *line = NULL, self[65];
        size_t n = 0;
        FILE *g = open_memstream(&line, &n);
        int known = 0, used = ledger_candidates(lg, arms[a]->code.sha, &known);
        fprintf(g, "{\"seq\":%ld,\"prev\":\"%s\",%s,\"budget_used\":%d,\"budget\":%d", lines + 1 + a, prev,
                fields[a], used + (arms[a]->candidate && !known), lg->budget);
        fflush(g);
        sha256_text(line, n, self);
        fprintf(g, ",\"line_sha256\":\"%s\"}", self);
        fclose(g);
        ledger_add(lg, line);
        sha256_text(line, strlen(line), prev);
        fprintf(f, "%s\n", line);
        free(line);
    }
    fclose(f);
    const char *tear = getenv("KGATE_TEST_LEDGER_TEAR");   /* tests: killed inside the write, after N bytes */
    if (tear && write(fd, buf, (size_t)atol(tear) < len ? (size_t)atol(tear) : len) >= 0) raise(SIGKILL);
    ssize_t w = write(fd, buf, len);
    if (w != (ssize_t)len || fsync(fd) != 0) {
        int err = errno;
        if (w > 0 && ftruncate(fd, (off_t)old) != 0) err = errno;
        die(EXIT_IO, "writing the ledger %s failed: %s; nothing appended (disk full or I/O error)", shown(lg->path),
            w < 0 || w == (ssize_t)len ? strerror(err) : "a short write, cut back off");
    }
    flock(fd, LOCK_UN);
    close(fd);
    free(buf);
    return lines + 1;
}

/* Keep arm a's compile options and log beside the ledger, in
 * <ledger>.objects/<sha256>.txt (once per code object). */
static void ledger_keep_log(const struct ledger *lg, const struct device *d, const struct arm *a)
{
    char dir[PATH_MAX], path[PATH_MAX + 80];
    snprintf(dir, sizeof dir, "%s.objects", lg->path);
    snprintf(path, sizeof path, "%s/%s.txt", dir, a->code.sha);
    if (access(path, F_OK) == 0) return;
    if (mkdir_p(dir, NULL) != 0) die(EXIT_IO, "cannot create %s: %s", shown(dir), strerror(errno));
    char *log = d->kind == DEV_GPU ? read_file(a->code.log_path, NULL) : NULL;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    fprintf(f, "arm: %s\nsource: %s\noptions: %s\narch: %s\ncompiler: %s\ncode object: %s (%zu bytes)\n"
            "compile log:\n%s\n", a->name, a->src_name, *a->options ? a->options : "(none)", d->arch, d->compiler,
            d->kind == DEV_GPU ? a->code.bin_path : "none (CPU device)", a->code.size,
            log ? log : "(none)");
    fclose(f);
    if (write_file_atomic(path, text, len) != 0) die(EXIT_IO, "cannot write %s: %s", shown(path), strerror(errno));
    free(text);
    free(log);
}

/* The ledger fields of arm a of run r (JSON members, no braces): where and
 * when, what ran, under which conditions, the arm's verdict (and its gates'
 * alone, which later runs may reuse: not on a line with a planted fault),
 * its time and the rounds when the case was timed (timed), and every gate
 * value of every output (ledger_append adds the budget count). */
static void ledger_fields(FILE *f, const struct run *r, const struct arm_case *ac, int a, const struct rounds *rd,
                          int timed)
{
    const struct device *d = r->d;
    char when[32];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    json_str(f, "time", when, 1);
    fprintf(f, "\"kgate\":\"%s\",", KGATE_VERSION);
    json_str(f, "kgate_sha256", ledger_build() ? ledger_build() : "", 1);
    json_str(f, "command", r->o->command ? r->o->command : "", 1);
    json_str(f, "device", d->name, 1);
    json_str(f, "arch", d->arch, 1);
    fprintf(f, "\"driver\":%d,", d->driver_version);
    json_str(f, "compiler", d->compiler, 1);
    json_str(f, "case", r->c->label, 1);
    fprintf(f, "\"seed\":%" PRIu64 ",", r->o->seed);
    json_str(f, "inputs", INPUTS[r->c->inputs], 1);
    json_str(f, "path", r->o->graph ? "graph" : "eager", 1);
    report_json_arm(f, ac[a].arm, 1);
    char cond[512];
    ledger_conditions(r->o, cond, sizeof cond);
    json_str(f, "conditions", cond, 1);
    if (r->o->why) json_str(f, "why", r->o->why, 1);
    if (r->o->inject) json_str(f, "inject", r->o->inject, 1);
    if (ac[a].cached) fprintf(f, "\"cached_from_line\":%ld,", ac[a].cached);
    report_json_isa(f, r->o, &ac[a]);
    json_str(f, "verdict", report_verdict(&ac[a]), 1);
    if (ac[a].gated && !r->o->inject) json_str(f, "gates_verdict", ac[a].gates_pass ? "pass" : "fail", 1);
    json_num(f, "median_us", timed && ac[a].total_us > 0 ? ac[a].total_us : NAN, 1);
    if (rd && timed) report_json_rounds(f, rd, a);
    report_json_outputs(f, r, &ac[a]);
}

/* One ledger line per arm of a case that ran, appended together
 * (ledger_append), and each arm's compile log and options beside the
 * ledger. */
static void ledger_write_case(struct ledger *lg, struct run *r, struct arm_case *ac, int narms,
                              const struct rounds *rd, int pass)
{
    char *fields[TIMER_MAX_ARMS];
    const struct arm *arms[TIMER_MAX_ARMS];
    for (int a = 0; a < narms; a++) {
        r->geom = ac[a].geom;
        size_t len = 0;
        FILE *f = open_memstream(&fields[a], &len);
        ledger_fields(f, r, ac, a, rd, pass);
        fclose(f);
        arms[a] = ac[a].arm;
        ledger_keep_log(lg, r->d, ac[a].arm);
    }
    long seq = ledger_append(lg, fields, arms, narms, r->c->label);
    for (int a = 0; a < narms; a++) {
        free(fields[a]);
        if (!r->o->quiet)
            fprintf(stderr, "kgate: ledger %s line %ld: %s %s\n", lg->path, seq + a, ac[a].arm->name, r->c->label);
    }
}

/* --- kgate ledger [verify | best] --- */

/* kgate ledger verify: every line whole and chained; exit 0, or 1 naming
 * the first line that breaks the chain.  Prints the last line's sha256:
 * kept elsewhere, it also shows lines cut off the end or a last line
 * rewritten with its hashes.  A note for its tail (ledger_tail_note). */
static int ledger_verify(const char *path)
{
    size_t len = 0;
    ledger_check_path(path, 1);
    char *text = ledger_read(path, &len);
    if (!text) die(EXIT_USAGE, "cannot read the ledger %s: %s", shown(path), strerror(errno));
    const char *why = NULL;
    char last[65];
    struct ledger_tail tail;
    long lines = 0, bad = ledger_walk(text, len, NULL, &why, &lines, last, &tail);
    free(text);
    if (bad) {
        printf("ledger %s: line %ld: %s\n", shown(path), bad, why);
        return EXIT_GATE;
    }
    printf("ledger %s: %ld line%s, chain intact; last line sha256 %s\n", shown(path), lines, lines == 1 ? "" : "s",
           last);
    const char *note = ledger_tail_note(path, &tail, 0);
    if (note) printf("%s\n", note);
    return EXIT_PASS;
}

/* A number of a ledger line as a table cell: "-" when absent. */
static void cell_num(char *buf, size_t n, const char *line, const char *key, const char *fmt, double scale)
{
    double v = ledger_field_num(line, key);
    if (isnan(v)) snprintf(buf, n, "-");
    else snprintf(buf, n, fmt, v * scale);
}

/* kgate ledger: every whole line as a table row, with the path its
 * launches took (a line from before --graph: eager) and the budget count;
 * when the chain does not verify, only the rows before the line that
 * breaks it (and before the line before that, when the break is their
 * link: LEDGER_PREV_BROKEN), so that no edited value is shown, then exit 1
 * naming the line. */
static int ledger_table(const char *path)
{
    size_t len = 0;
    ledger_check_path(path, 1);
    char *text = ledger_read(path, &len);
    if (!text) die(EXIT_USAGE, "cannot read the ledger %s: %s", shown(path), strerror(errno));
    const char *why = NULL;
    struct ledger_tail tail;
    long lines = 0, bad = ledger_walk(text, len, NULL, &why, &lines, (char[65]){ 0 }, &tail);
    printf("%5s %-20s %-40s %-14s %-10s %-12s %-7s %-5s %11s %7s %7s %-7s %6s\n", "line", "time (UTC)", "case",
           "arm", "role", "code object", "verdict", "path", "median-us", "ratio", "band-%", "compare", "budget");
    long ln = 0, stop = bad && why == LEDGER_PREV_BROKEN ? bad - 1 : bad;   /* the first row not shown */
    text[tail.bytes && !tail.whole ? tail.at : len] = 0;   /* an interrupted append is no row */
    for (char *p = text, *nl; *p; p = nl ? nl + 1 : p + strlen(p)) {
        nl = strchr(p, '\n');
        if (bad && ++ln >= stop) break;
        if (nl) *nl = 0;
        char when[32] = "", kase[256] = "", arm[64] = "", role[16] = "", sha[65] = "", verdict[16] = "",
             cmp[16] = "-", med[32], ratio[32], band[32], used[16] = "?", budget[16] = "?", path[16] = "eager";
        ledger_field(p, "time", when, sizeof when);
        ledger_field(p, "case", kase, sizeof kase);
        ledger_field(p, "arm", arm, sizeof arm);
        ledger_field(p, "role", role, sizeof role);
        ledger_field(p, "code_sha256", sha, sizeof sha);
        ledger_field(p, "verdict", verdict, sizeof verdict);
        ledger_field(p, "path", path, sizeof path);
        ledger_field(p, "compare", cmp, sizeof cmp);
        ledger_field(p, "budget_used", used, sizeof used);
        ledger_field(p, "budget", budget, sizeof budget);
        cell_num(med, sizeof med, p, "median_us", "%.1f", 1);
        cell_num(ratio, sizeof ratio, p, "ratio", "%.4f", 1);
        cell_num(band, sizeof band, p, "band", "%.2f", 100);
        char count[40], seq[32];
        snprintf(count, sizeof count, "%s/%s", used, budget);
        cell_num(seq, sizeof seq, p, "seq", "%.0f", 1);
        printf("%5s %-20s %-40.40s %-14.14s %-10s %-12.12s %-7s %-5s %11s %7s %7s %-7s %6s\n",
               seq, when, kase, arm, role, sha, verdict, path, med, ratio, band, cmp, count);
    }
    free(text);
    const char *note = bad ? NULL : ledger_tail_note(path, &tail, 0);
    if (bad)
        fprintf(stderr, "kgate: ledger %s: line %ld: %s (kgate ledger verify); the table stops before line %ld\n",
                shown(path), bad, why, stop);
    else if (note)
        fprintf(stderr, "kgate: %s\n", note);
    return bad ? EXIT_GATE : EXIT_PASS;
}

/* kgate ledger best: per case, the best correct deliverable candidate. */
static int ledger_best(const struct opts *o)
{
    struct ledger lg;
    ledger_open_read(&lg, o);
    if (!lg.n) printf("the ledger %s holds no lines: no checkpoint yet\n", shown(lg.path));
    for (size_t i = 0; i < lg.n; i++) {
        const char *kase = lg.line[i].kase;
        int first = 1;
        for (size_t j = 0; j < i && first; j++) first = strcmp(lg.line[j].kase, kase) != 0;
        if (!first) continue;
        const struct ledger_line *b = ledger_best_line(&lg, kase);
        char standing[128];
        if (b && strcmp(b->kase, kase) == 0)
            checkpoint_standing(b, standing, sizeof standing),
            printf("%s: '%s' (code object %.12s, ledger line %ld, %s): %s\n", kase, b->arm, b->sha, b->seq, b->device,
                   standing);
        else
            printf("%s: no correct deliverable candidate measured against the reference\n", kase);
    }
    free(lg.line);
    return EXIT_PASS;
}

/* kgate ledger [verify | best] [--ledger FILE]. */
static int cmd_ledger(const struct opts *o, const char *sub)
{
    if (!sub) return ledger_table(ledger_path(o));
    if (strcmp(sub, "verify") == 0) return ledger_verify(ledger_path(o));
    if (strcmp(sub, "best") == 0) return ledger_best(o);
    die(EXIT_USAGE, "ledger %s: expected verify or best (or nothing, for the table)", sub);
}
