/* src/util.c — what every part uses: the one way to fail (die), checked
 * allocation, the clock, seeded random numbers, SHA-256, whole-file reads and
 * atomic writes, strict number parsers, JSON writers, and child processes.
 * Relies on the C library only (and kgate.c's exit codes). */

/* What a worker process (worker.c) shares with the process that watches
 * it, in a MAP_SHARED page: the task it is on, the deadline of its
 * outstanding launches (the watchdog), and its last die() line, so that the
 * watcher can name the error of a case that ended the worker.  NULL outside
 * a worker. */
struct watch {
    _Atomic int ready;            /* the worker opened its device and built its arms */
    _Atomic int current;          /* the task it is on; -1 between tasks */
    _Atomic long long deadline_ms; /* CLOCK_MONOTONIC ms by which its launches must end; 0: none outstanding */
    double limit_s;               /* the current task's per-launch limit (the worker's own copy) */
    int limit_given;              /* 1: limit_s is --timeout's; 0: the case's default */
    double started;               /* when the worker was forked (now_s) */
    int first;                    /* the first task it runs (> 0: it replaces a lost worker) */
    char label[160];              /* the current task's case */
    char msg[480];                /* its last die() message */
};
static struct watch *g_watch;

/* Print "kgate: <message>" on stderr and exit with `code` (in a worker, the
 * message is also left for its watcher). */
static _Noreturn void die(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fflush(stdout);   /* what was already reported comes before the error */
    if (g_watch) {
        va_list copy;
        va_copy(copy, ap);
        vsnprintf(g_watch->msg, sizeof g_watch->msg, fmt, copy);
        va_end(copy);
    }
    fputs("kgate: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(code);
}

/* A value the user gave, as a message echoes it: whole when it is at most
 * 60 bytes, else its first 60 and "...".  The result lives in one of 4
 * rotating buffers, so one message may show up to 4 values. */
static const char *shown(const char *s)
{
    static char ring[4][64 + 4];
    static unsigned next;
    if (!s) return "";
    if (strlen(s) <= 60) return s;
    char *b = ring[next++ % 4];
    snprintf(b, sizeof ring[0], "%.60s...", s);
    return b;
}

/* Allocate n bytes (1 when n is 0); exit 5 when the host has no memory. */
static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) die(EXIT_DEVICE, "out of host memory (%zu bytes)", n);
    return p;
}

/* Allocate n zeroed elements of `size` bytes; exit 5 when the host has no
 * memory. */
static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) die(EXIT_DEVICE, "out of host memory (%zu x %zu bytes)", n, size);
    return p;
}

/* Seconds on the monotonic clock. */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The watchdog, in a worker: a launch is about to be queued (or, on the CPU
 * device, to run); its work must end within the task's limit.  Each launch
 * moves the deadline on; watch_done() clears it once the work has ended. */
static void watch_launch(void)
{
    if (g_watch && g_watch->limit_s > 0)
        atomic_store(&g_watch->deadline_ms, (long long)((now_s() + g_watch->limit_s) * 1e3));
}

/* The watchdog: every launch queued so far has ended (a synchronize returned). */
static void watch_done(void)
{
    if (g_watch) atomic_store(&g_watch->deadline_ms, 0);
}

/* splitmix64: seeds and hashes small integers into well-mixed 64-bit words. */
static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* A counter-based generator: value i of stream `key` is mix64(key ^ mix64(i)),
 * so any element can be generated independently (and in parallel). */
static uint64_t rng_at(uint64_t key, uint64_t i) { return mix64(key ^ mix64(i)); }

/* Uniform in [-1, 1) with 24 random bits. */
static float rng_sym(uint64_t key, uint64_t i)
{
    return (float)(rng_at(key, i) >> 40) * 0x1p-23f - 1.0f;
}

/* Fold the bytes of s into hash h. */
static uint64_t hash_str(uint64_t h, const char *s)
{
    while (*s) h = mix64(h ^ (unsigned char)*s++);
    return h;
}

/* --- SHA-256 (FIPS 180-4), for code-object and cache identities --- */

struct sha256 { uint32_t h[8]; uint64_t len; unsigned char buf[64]; size_t nbuf; };

static const uint32_t SHA_K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

#define ROR32(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void sha256_block(struct sha256 *s, const unsigned char *p)
{
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
               (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = ROR32(w[i - 15], 7) ^ ROR32(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ROR32(w[i - 2], 17) ^ ROR32(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    /* the working variables a..h in locals, so that they stay in registers (an
     * array shifted each round ran at a third of the speed: every output's
     * digest goes through here, node.c) */
    uint32_t a = s->h[0], b = s->h[1], c = s->h[2], d = s->h[3], e = s->h[4], f = s->h[5], g = s->h[6],
             h = s->h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = h + (ROR32(e, 6) ^ ROR32(e, 11) ^ ROR32(e, 25)) + ((e & f) ^ (~e & g)) + SHA_K[i] + w[i];
        uint32_t t2 = (ROR32(a, 2) ^ ROR32(a, 13) ^ ROR32(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        h = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
    }
    uint32_t v[8] = { a, b, c, d, e, f, g, h };
    for (int i = 0; i < 8; i++) s->h[i] += v[i];
}

static void sha256_init(struct sha256 *s)
{
    static const uint32_t h0[8] = { 0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                    0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19 };
    memcpy(s->h, h0, sizeof h0);
    s->len = 0;
    s->nbuf = 0;
}

static void sha256_update(struct sha256 *s, const void *data, size_t n)
{
    const unsigned char *p = data;
    s->len += n;
    while (n > 0) {
        size_t take = 64 - s->nbuf < n ? 64 - s->nbuf : n;
        memcpy(s->buf + s->nbuf, p, take);
        s->nbuf += take, p += take, n -= take;
        if (s->nbuf == 64) sha256_block(s, s->buf), s->nbuf = 0;
    }
}

/* Finish and write the digest as 64 lowercase hex digits plus NUL. */
static void sha256_hex(struct sha256 *s, char out[65])
{
    uint64_t bits = s->len * 8;
    unsigned char pad = 0x80, zero = 0, len[8];
    sha256_update(s, &pad, 1);
    while (s->nbuf != 56) sha256_update(s, &zero, 1);
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)(bits >> (56 - 8 * i));
    sha256_update(s, len, 8);
    for (int i = 0; i < 8; i++) snprintf(out + 8 * i, 9, "%08x", s->h[i]);
}

/* sha256 of n bytes, as hex. */
static void sha256_text(const char *s, size_t n, char out[65])
{
    struct sha256 h;
    sha256_init(&h);
    sha256_update(&h, s, n);
    sha256_hex(&h, out);
}

/* --- files --- */

/* Why the last read_file_max failed when errno cannot say it (a FIFO that
 * gave nothing), else NULL; read_why() gives the reason either way. */
static _Thread_local const char *read_problem;
static const char *read_why(void) { return read_problem ? read_problem : strerror(errno); }

#define FIFO_WAIT_S 10   /* how long read_file_max waits for a FIFO's first byte or its writer's close */
#define FIFO_STR_(x) #x
#define FIFO_STR(x) FIFO_STR_(x)

/* Read a whole file of at most `max` bytes (0: no limit) into a new
 * NUL-terminated string, its length in *len (when len is not NULL; the text
 * may hold NUL bytes).  NULL with errno set if it cannot be read (the
 * reason: read_why()): EISDIR for a directory, ETIMEDOUT for a FIFO (a
 * pipe, /dev/stdin, <(...)) that neither gave a byte nor was closed within
 * FIFO_WAIT_S seconds (it is opened without blocking, so one with no writer never
 * holds kgate), EFBIG when it holds more than max bytes (it reads at most
 * max + 1, so /dev/zero is refused quickly), else the error of the read. */
static char *read_file_max(const char *path, size_t max, size_t *len)
{
    read_problem = NULL;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat st;
    if (fstat(fd, &st) != 0) { int e = errno; close(fd); errno = e; return NULL; }
    if (S_ISDIR(st.st_mode)) { close(fd); errno = EISDIR; return NULL; }
    struct pollfd pf = { fd, POLLIN, 0 };
    if (S_ISFIFO(st.st_mode) && poll(&pf, 1, FIFO_WAIT_S * 1000) <= 0) {
        close(fd);
        read_problem = "it is a FIFO that gave no data for " FIFO_STR(FIFO_WAIT_S) " s (no writer?)";
        errno = ETIMEDOUT;
        return NULL;
    }
    FILE *f = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) == 0 ? fdopen(fd, "rb") : NULL;
    if (!f) { int e = errno; close(fd); errno = e; return NULL; }
    size_t cap = 1 << 16, n = 0;
    char *buf = xmalloc(cap + 1);
    size_t got;
    for (;;) {
        size_t want = cap - n;
        if (max && want > max + 1 - n) want = max + 1 - n;
        if (want == 0) break;
        if ((got = fread(buf + n, 1, want, f)) == 0) break;
        n += got;
        if (max && n > max) break;
        if (n == cap) buf = realloc(buf, (cap *= 2) + 1);
        if (!buf) die(EXIT_DEVICE, "out of host memory reading %s", shown(path));
    }
    int err = ferror(f) ? (errno ? errno : EIO) : 0;
    fclose(f);
    if (!err && max && n > max) err = EFBIG;
    if (err) { free(buf); errno = err; return NULL; }
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

/* Read a whole file, any size; NULL (errno set) if it cannot be read. */
static char *read_file(const char *path, size_t *len) { return read_file_max(path, 0, len); }

/* Write a file atomically (temporary file, then rename); 0 on success. */
static int write_file_atomic(const char *path, const void *data, size_t n)
{
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) return -1;
    int ok = fwrite(data, 1, n, f) == n;
    ok &= fclose(f) == 0;
    if (!ok || rename(tmp, path) != 0) { unlink(tmp); return -1; }
    return 0;
}

/* What a file of mode `mode` is, for a message ("a directory", ...). */
static const char *file_kind(mode_t mode)
{
    return S_ISREG(mode) ? "a regular file" : S_ISDIR(mode) ? "a directory" : S_ISCHR(mode) ? "a character device"
         : S_ISBLK(mode) ? "a block device" : S_ISFIFO(mode) ? "a FIFO" : S_ISSOCK(mode) ? "a socket" : "not a file";
}

/* The directories one mkdir_p made: each the first end[i] bytes of path. */
#define MADE_DIRS_MAX 64
struct made_dirs { char path[PATH_MAX]; size_t end[MADE_DIRS_MAX]; int n; };

/* mkdir -p; 0 on success.  With `made`, records each directory it made
 * (mkdir returned 0), parents first. */
static int mkdir_p(const char *path, struct made_dirs *made)
{
    char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    if (!*buf) return errno = ENOENT, -1;
    if (made) snprintf(made->path, sizeof made->path, "%s", path), made->n = 0;
    for (char *p = buf + 1;; p++)
        if (*p == '/' || !*p) {
            char c = *p;
            *p = 0;
            if (mkdir(buf, 0755) == 0) {
                if (made && made->n < MADE_DIRS_MAX) made->end[made->n++] = strlen(buf);
            } else if (errno != EEXIST) {
                return -1;
            }
            if (!c) return 0;
            *p = '/';
        }
}

/* Remove the directories that mkdir_p made (`made`), deepest first, each
 * only if it is empty (rmdir), stopping at the first that is not; the
 * number removed. */
static int made_dirs_remove(struct made_dirs *made)
{
    int removed = 0;
    while (made->n > 0) {
        char buf[PATH_MAX];
        snprintf(buf, sizeof buf, "%.*s", (int)made->end[made->n - 1], made->path);
        if (rmdir(buf) != 0) break;
        made->n--, removed++;
    }
    return removed;
}

/* Make directory `dir` (and its parents) if it is not there, recording
 * what it made in `made` (may be NULL), and check it is a directory kgate
 * can write into; exit 2 naming `what` (e.g. "--dump DIR") and saying what
 * is wrong if not. */
static void usable_dir(const char *dir, const char *what, struct made_dirs *made)
{
    struct stat st;
    if (mkdir_p(dir, made) != 0) die(EXIT_USAGE, "%s %s: cannot create it: %s", what, shown(dir), strerror(errno));
    if (stat(dir, &st) != 0) die(EXIT_USAGE, "%s %s: %s", what, shown(dir), strerror(errno));
    if (!S_ISDIR(st.st_mode)) die(EXIT_USAGE, "%s %s: it is %s, not a directory", what, shown(dir), file_kind(st.st_mode));
    if (access(dir, W_OK | X_OK) != 0) die(EXIT_USAGE, "%s %s: cannot write into it: %s", what, shown(dir), strerror(errno));
}

/* --- strict parsers and JSON writers --- */

/* Strictly parse a decimal integer in [lo, hi]; 0 on success. */
static int parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
    if (!s || !*s) return -1;
    uint64_t v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9') return -1;
        uint64_t digit = (uint64_t)(*p - '0');
        if (v > (UINT64_MAX - digit) / 10) return -1;   /* v * 10 + digit would wrap */
        v = v * 10 + digit;
    }
    if (v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

/* Strictly parse a finite non-negative number; 0 on success. */
static int parse_nonneg(const char *s, double *out)
{
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*end || errno || !isfinite(v) || v < 0) return -1;
    *out = v;
    return 0;
}

/* A number for JSON: null when not finite. */
static void json_num(FILE *f, const char *key, double v, int comma)
{
    if (isfinite(v)) fprintf(f, "\"%s\":%.9g%s", key, v, comma ? "," : "");
    else fprintf(f, "\"%s\":null%s", key, comma ? "," : "");
}

/* The length of the UTF-8 sequence that starts at s (1..4), or 0 if s does
 * not start a valid one (overlong forms, surrogates and code points above
 * U+10FFFF are invalid). */
static int utf8_len(const unsigned char *s)
{
    unsigned c = s[0], cp, n;
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) n = 2, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef) n = 3, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4) n = 4, cp = c & 0x07;
    else return 0;
    for (unsigned i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    if ((n == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)))
        return 0;
    return (int)n;
}

/* A string member of a JSON object: "key":"s" and, with comma, a ','.
 * Quotes, backslashes and control characters are escaped; a byte that is
 * not part of valid UTF-8 is written as U+FFFD, so the output is always
 * valid JSON. */
static void json_str(FILE *f, const char *key, const char *s, int comma)
{
    fprintf(f, "\"%s\":\"", key);
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        int n = utf8_len(p);
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p < 0x20 || *p == 0x7f) fprintf(f, "\\u%04x", *p);
        else if (n == 0) fputs("\\ufffd", f);
        else fwrite(p, 1, (size_t)n, f);
        p += n ? n : 1;
    }
    fprintf(f, "\"%s", comma ? "," : "");
}

/* Free text a user gives as a reason (--why, --trades-precision), checked
 * for the report, --json and the ledger: exit 2 naming `flag` if it is
 * empty or only blanks, holds a control character or invalid UTF-8, or is
 * longer than 1000 bytes. */
static void check_reason(const char *flag, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    int blank = 1;
    if (strlen(s) > 1000) die(EXIT_USAGE, "%s %s: at most 1000 bytes", flag, shown(s));
    for (int n; *p; p += n) {
        if (*p < 0x20 || *p == 0x7f) die(EXIT_USAGE, "%s: the reason holds a control character (byte 0x%02x)", flag, *p);
        if (!(n = utf8_len(p))) die(EXIT_USAGE, "%s: the reason is not valid UTF-8 (byte 0x%02x)", flag, *p);
        blank &= *p == ' ';
    }
    if (blank) die(EXIT_USAGE, "%s needs a reason (not empty, not only blanks)", flag);
}

/* --- child processes: tools run without a shell --- */

/* Find an executable: each candidate is a path or a name looked up in $PATH. */
static int find_tool(const char *const *names, char *out, size_t n)
{
    const char *path = getenv("PATH");
    for (int i = 0; names[i]; i++) {
        if (strchr(names[i], '/')) {
            if (access(names[i], X_OK) == 0) { snprintf(out, n, "%s", names[i]); return 0; }
            continue;
        }
        for (const char *p = path ? path : ""; *p;) {
            size_t len = strcspn(p, ":");
            snprintf(out, n, "%.*s/%s", (int)len, p, names[i]);
            if (len && access(out, X_OK) == 0) return 0;
            p += len + (p[len] == ':');
        }
    }
    return -1;
}

/* Append `name` to a ", "-separated list in buf; "..." ends a list that no
 * longer fits. */
static void list_add(char *buf, size_t n, const char *name)
{
    size_t used = strlen(buf);
    if (used + 4 >= n || (used >= 3 && strcmp(buf + used - 3, "...") == 0)) return;
    if ((size_t)snprintf(buf + used, n - used, "%s%s", used ? ", " : "", name) >= n - used)
        snprintf(buf + n - 4, 4, "...");
}

/* Fork a child that dies with its parent (SIGKILL when the parent exits,
 * even by a signal: no compiler or worker outlives kgate to write a cache
 * entry or use a device after it).  fork()'s return value. */
static pid_t fork_tied(void)
{
    pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(127);   /* the parent is already gone */
    }
    return pid;
}

/* In a child process: exec argv (argv[0] a path, no shell) with its stdout
 * and stderr on fd.  Returns only if it cannot (errno set). */
static void exec_into(int fd, const char *const *argv)
{
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    close(fd);
    execv(argv[0], (char *const *)argv);
}

/* Start the program at argv[0] (a path) with its stdout and stderr into a
 * pipe, without a shell: the pipe's read end, or NULL (errno set). */
static FILE *tool_open(const char *const *argv, pid_t *pid)
{
    int fd[2];
    if (pipe(fd) != 0) return NULL;
    if ((*pid = fork_tied()) < 0) {
        close(fd[0]), close(fd[1]);
        return NULL;
    }
    if (*pid == 0) {
        close(fd[0]);
        exec_into(fd[1], argv);
        _exit(127);
    }
    close(fd[1]);
    FILE *f = fdopen(fd[0], "r");
    if (!f) close(fd[0]), waitpid(*pid, NULL, 0);
    return f;
}

/* Read what is left of a tool_open pipe, close it and reap the tool: its
 * exit status, 128 + the signal that ended it, or 127 if it did not run. */
static int tool_close(FILE *f, pid_t pid)
{
    char buf[4096];
    while (fread(buf, 1, sizeof buf, f) > 0) {}
    fclose(f);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return 127;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* One line of a tool's output into buf, without its newline; the rest of a
 * line longer than buf is dropped.  0 at the end of the output. */
static int tool_line(FILE *f, char *buf, size_t n)
{
    if (!fgets(buf, (int)n, f)) return 0;
    size_t len = strlen(buf);
    if (len && buf[len - 1] == '\n') buf[len - 1] = 0;
    else for (int ch = 0; ch != EOF && ch != '\n';) ch = fgetc(f);
    return 1;
}
