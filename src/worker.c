/* src/worker.c — cases in a worker process, watched.  A kernel that faults
 * leaves its CUDA or HIP context unusable, and a kernel that spins cannot be
 * stopped from the host at all; both end only with the process that owns the
 * context.  So the commands that run cases do it in a child process (the
 * worker): it opens the device, builds its arms and runs the tasks in order.
 * The process that forked it (the watcher) never touches the device; it
 * waits, and kills the worker when a launch outlives the watchdog's
 * deadline.  A worker that dies during a task (a device error, a signal, the
 * watchdog) costs that one task, reported `fault` or `hung`; a new worker
 * goes on with the next.  A fresh worker per command, not per case, keeps
 * the cost to one device start per run and one more per lost case.
 * Relies on util.c (die, struct watch, the watchdog's hooks). */

/* Zeroed memory shared by the watcher and its workers (fork keeps it
 * shared): the watch page and what the tasks record.  Exits 5 on failure. */
static void *shared_alloc(size_t n)
{
    void *p = mmap(NULL, n ? n : 1, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) die(EXIT_DEVICE, "cannot map %zu bytes of shared memory: %s", n, strerror(errno));
    return p;
}

static void shared_free(void *p, size_t n)
{
    if (p) munmap(p, n ? n : 1);
}

/* How a task ended its worker. */
enum lost_how { LOST_FAULT, LOST_HUNG };
static const char *const LOST_NAME[] = { "fault", "hung" };

/* A task whose worker died during it: which, how, and the error in words
 * (the worker's last die() line, the signal, or the watchdog's limit). */
struct lost { int task; enum lost_how how; char label[160], where[320], why[600]; };

/* In a worker: its device is open and its arms built; tasks follow.  A
 * worker that replaces a lost one says what its start cost. */
static void worker_ready(void)
{
    if (!g_watch) return;
    if (g_watch->first > 0)
        fprintf(stderr, "kgate: a new worker goes on from case %d: device opened and arms built in %.2f s\n",
                g_watch->first + 1, now_s() - g_watch->started);
    atomic_store(&g_watch->ready, 1);
}

/* In a worker: task `i` (its case label) starts now, with no launch limit
 * until worker_limit sets one; i = -1: between tasks. */
static void worker_task(int i, const char *label)
{
    if (!g_watch) return;
    fflush(stdout);   /* the finished task's rows are out before the next begins */
    g_watch->limit_s = 0;
    atomic_store(&g_watch->deadline_ms, 0);
    snprintf(g_watch->msg, sizeof g_watch->msg, "%s", "");
    if (label) snprintf(g_watch->label, sizeof g_watch->label, "%s", label);
    atomic_store(&g_watch->current, i);
}

/* In a worker: each launch of the current task must end within `seconds`
 * (given: 1 if they are --timeout's, 0 if the case's default). */
static void worker_limit(double seconds, int given)
{
    if (g_watch) g_watch->limit_s = seconds, g_watch->limit_given = given;
}

/* Wait for worker `pid`; kill it when its launches outlive their deadline.
 * Returns its wait status; *hung = 1 if the watchdog killed it. */
static int worker_wait(pid_t pid, struct watch *w, int *hung)
{
    int status = 0;
    *hung = 0;
    for (;;) {
        pid_t got = waitpid(pid, &status, WNOHANG);
        if (got == pid) return status;
        if (got < 0 && errno != EINTR) die(EXIT_DEVICE, "waiting for the worker: %s", strerror(errno));
        long long dl = atomic_load(&w->deadline_ms);
        if (!*hung && dl > 0 && now_s() * 1e3 > (double)dl) {
            kill(pid, SIGKILL);
            *hung = 1;
        }
        usleep(20000);
    }
}

/* The error of a worker that died during a task, in words. */
static void worker_why(const struct watch *w, int status, int hung, char *why, size_t n)
{
    if (hung)
        snprintf(why, n, "a launch did not end within the watchdog's %g s (%s); the worker was killed", w->limit_s,
                 w->limit_given ? "--timeout" : "the case's default; --timeout S sets it");
    else if (WIFSIGNALED(status))
        snprintf(why, n, "the worker died of signal %d (%s)%s%s", WTERMSIG(status), strsignal(WTERMSIG(status)),
                 *w->msg ? ": " : "", w->msg);
    else if (*w->msg)
        snprintf(why, n, "%s", w->msg);
    else
        snprintf(why, n, "the worker exited with status %d during the case", WEXITSTATUS(status));
}

/* Run tasks [0, ntasks) in worker processes.  A worker runs work(ctx,
 * first): it opens its device, calls worker_ready(), then runs tasks first,
 * first + 1, ... in order, each after worker_task(i, label), and returns.
 * When a worker dies during task i by a device error (exit 5), a signal or
 * the watchdog, lost(ctx, &l) reports task i in this process and a new
 * worker goes on from i + 1.  Returns 0 when every task ran or was reported
 * lost; otherwise the exit code that stops the command: a worker's own
 * (usage 2, no runtime 3, budget 4, file 6, or anything before its first
 * task, its message already printed), or 5 after a signal before it. */
static int supervise(int ntasks, void (*work)(void *ctx, int first), void (*lost)(void *ctx, const struct lost *l),
                     void *ctx)
{
    struct watch *w = shared_alloc(sizeof *w);
    int first = 0, rc = 0;
    while (first < ntasks && rc == 0) {
        memset(w, 0, sizeof *w);
        atomic_store(&w->current, -1);
        w->started = now_s(), w->first = first;
        pid_t pid = fork_tied();
        if (pid < 0) die(EXIT_DEVICE, "cannot fork a worker: %s", strerror(errno));
        if (pid == 0) {
            g_watch = w;
            work(ctx, first);
            worker_task(-1, NULL);
            exit(EXIT_PASS);
        }
        int hung, status = worker_wait(pid, w, &hung);
        int cur = atomic_load(&w->current), code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        if (code == EXIT_PASS && cur < 0) break;   /* every task from `first` on ran */
        if (!atomic_load(&w->ready) || cur < 0 || (!hung && code >= 0 && code != EXIT_DEVICE && code != EXIT_PASS &&
                                                   code != EXIT_GATE)) {
            rc = code > 0 ? code : EXIT_DEVICE;
            if (code < 0)
                fprintf(stderr, "kgate: the worker died of signal %d (%s) %s\n", WTERMSIG(status), strsignal(WTERMSIG(status)),
                        atomic_load(&w->ready) ? "between cases" : "before its first case");
            break;
        }
        struct lost l = { .task = cur, .how = hung ? LOST_HUNG : LOST_FAULT };
        snprintf(l.label, sizeof l.label, "%s", w->label);
        worker_why(w, status, hung, l.why, sizeof l.why);
        lost(ctx, &l);
        first = cur + 1;
    }
    shared_free(w, sizeof *w);
    return rc;
}
