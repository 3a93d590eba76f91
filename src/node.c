/* src/node.c — every GPU of a node: `--device all` or `--device 0,3,5`.
 * Each entry of the list runs in its own kgate (this program again, through
 * /proc/self/exe, with --device ENTRY and --json), all at once: each is
 * exactly a one-device run, its watcher, workers and watchdog included, so
 * a device that faults or hangs is that entry's verdict and the others go
 * on.  This process never touches a device; it waits for them all, reads
 * their JSON lines and compares the entries of one model (the device's
 * name): each output's SHA-256 bitwise against the majority, and each
 * entry's time per case against the median entry.  Relies on options.c
 * (the list, NODE_MAX), gpu.c (the GPU count of `all`), inject.c (faults
 * planted in one entry: KIND@N), diff.c (its JSON reader), timer.c
 * (medians), report.c (the label column) and util.c (processes, JSON). */

/* The speed rule: an entry is slow when the median over its cases of (its
 * time / the median time of the model's entries on that case) is above
 * this.  Where it comes from: one H200 times a kernel against itself within
 * +-0.3% (the A/A band), while its clocks and power move whole runs by up
 * to ~9% from one run to the next; 1.25 is above both with a margin.  It
 * awaits measurement on a multi-GPU node, where cards also differ in
 * cooling and power limits. */
#define NODE_SLOW_RATIO 1.25

/* The same rule for CPU entries: they share the machine's cores with each
 * other (and with whatever else runs), and their cases take microseconds.
 * Measured on a 2-core CI machine, three CPU entries on three small cases:
 * clean, an entry's ratio from 0.53 to 1.01 (10 runs); with --inject slow
 * (8 runs per timed launch) 4.7 to 8.1 (6 runs).  Only a gross slowdown
 * is flagged there. */
#define NODE_SLOW_RATIO_CPU 3.0

/* The same rule for the entries of a GPU that the list names more than
 * once (--device 0,0,0): they take turns on one card, so an entry's timed
 * launches may wait for another's kernels; they are compared with each
 * other alone.  Measured on the H200 with 0,0,0 on 8 cases: clean entries
 * 0.99 to 1.00 (2 runs), an entry with --inject slow 7.23 and 7.29 (2
 * runs); 3.0 lies between them with a factor of about 2.5 either way.  Two
 * entries alone cannot exceed 2 (the median of two is their mean), so a
 * slow entry needs a card named three times or more. */
#define NODE_SLOW_RATIO_SHARED 3.0

/* One output of one case of one entry, as its JSON line says. */
struct node_out {
    char name[8], verdict[8], sha[65];
    double us;                    /* its timed median (NAN: not timed, or timed with another output) */
    int disagree;                 /* 1: differs from the majority; 2: there is no majority */
};

/* One case of one entry: its label, verdict (pass, cached, fail, skip,
 * fault, hung), outputs, and the sum of its timed medians (0: not timed). */
struct node_case {
    char label[160], verdict[8];
    int nout;
    struct node_out out[MAX_OUT];
    double us;
};

/* One entry of the list: what it ran on, its process, and what it found. */
struct node_entry {
    char dev[16];                 /* "cpu" or the GPU's number, as the list names it */
    pid_t pid;
    FILE *out, *err;              /* its stdout (JSON lines) and stderr, unlinked files */
    int code;                     /* its exit code; 128 + a signal; 127: not started */
    double wall_s;
    char model[256], pci[32], uuid[48];
    struct node_case *cases;
    int ncases, passed, ndisagree, slow;
    double speed;                 /* its median time ratio to the model's median entry (NAN: not compared) */
    const char *verdict;          /* pass, fail, fault, hung, error */
};

/* String member `key` of object node obj of j into out (cut to n; "" when
 * there is none, or it is no string); 1 if there is one. */
static int node_str(const struct jparse *j, int obj, const char *key, char *out, size_t n)
{
    int m = jp_find(j, obj, key);
    *out = 0;
    if (m < 0 || j->nodes[m].kind != 's') return 0;
    snprintf(out, n, "%s", j->nodes[m].str);
    return 1;
}

/* Number member `key` of object node obj of j, or NAN. */
static double node_num(const struct jparse *j, int obj, const char *key)
{
    int m = jp_find(j, obj, key);
    return m >= 0 && j->nodes[m].kind == 'n' ? j->nodes[m].num : NAN;
}

/* The outputs of a case (object node root of j) into c: each object of its
 * "outputs" array, with its sha256 and its time (summed into c->us). */
static void node_outputs(const struct jparse *j, int root, struct node_case *c)
{
    int outs = jp_find(j, root, "outputs");
    if (outs < 0 || j->nodes[outs].kind != 'a') return;
    for (int x = j->nodes[outs].child; x >= 0 && c->nout < MAX_OUT; x = j->nodes[x].next) {
        if (j->nodes[x].kind != 'o') continue;
        struct node_out *o = &c->out[c->nout++];
        memset(o, 0, sizeof *o);
        node_str(j, x, "name", o->name, sizeof o->name);
        node_str(j, x, "verdict", o->verdict, sizeof o->verdict);
        node_str(j, x, "sha256", o->sha, sizeof o->sha);
        o->us = node_num(j, jp_find(j, x, "time"), "median_us");
        if (isfinite(o->us)) c->us += o->us;
    }
}

/* Read entry e's JSON lines: one case per line (a case, a skip, or a case
 * whose worker died: an object with a "case" string), and its model and
 * identity from the first case that names them.  A line that is not such an
 * object (kgate writes none) is passed over. */
static void node_read(struct node_entry *e)
{
    char *line = NULL;
    size_t cap = 0;
    struct jparse j = { 0 };
    rewind(e->out);
    while (getline(&line, &cap, e->out) > 0) {
        free(j.nodes);
        int root = jp_parse_soft(&j, line, "a kgate JSON line");
        if (root < 0 || jp_find(&j, root, "case") < 0) continue;
        e->cases = realloc(e->cases, (size_t)(e->ncases + 1) * sizeof *e->cases);
        if (!e->cases) die(EXIT_DEVICE, "out of host memory");
        struct node_case *c = &e->cases[e->ncases++];
        memset(c, 0, sizeof *c);
        node_str(&j, root, "case", c->label, sizeof c->label);
        node_str(&j, root, "verdict", c->verdict, sizeof c->verdict);
        node_outputs(&j, root, c);
        e->passed += strcmp(c->verdict, "pass") == 0 || strcmp(c->verdict, "cached") == 0 ||
                     strcmp(c->verdict, "skip") == 0;
        if (!*e->model) node_str(&j, root, "device", e->model, sizeof e->model);
        if (!*e->pci) node_str(&j, root, "pci_bus_id", e->pci, sizeof e->pci);
        if (!*e->uuid) node_str(&j, root, "uuid", e->uuid, sizeof e->uuid);
    }
    free(j.nodes);
    free(line);
}

/* Entry e's verdict from its exit code and its cases: pass (0), fail (1),
 * error (2, 3, 4, 6: it could not run; its own message says why), hung or
 * fault (5, or a kgate that died or did not start). */
static const char *node_verdict(const struct node_entry *e)
{
    if (e->code == EXIT_PASS) return "pass";
    if (e->code == EXIT_GATE) return "fail";
    if (e->code == EXIT_USAGE || e->code == EXIT_NORUNTIME || e->code == EXIT_BUDGET || e->code == EXIT_IO)
        return "error";
    for (int i = 0; i < e->ncases; i++)
        if (strcmp(e->cases[i].verdict, "hung") == 0) return "hung";
    return "fault";
}

/* The argv of entry i's kgate: this one's, with --device ENTRY, the
 * --inject fault only where it is planted (KIND@N: entry N alone; KIND:
 * every entry), and --json.  (caller frees the array, not its strings) */
static char **node_argv(int argc, char **argv, const char *dev, const char *inject, int planted)
{
    char **a = xcalloc((size_t)argc + 3, sizeof *a);
    int n = 0, json = 0;
    static char exe[] = "/proc/self/exe";
    a[n++] = exe;
    for (int i = 1; i < argc; i++) {
        int row = opts_row(argv[i]);
        int value = row >= 0 && OPT_ROWS[row].takes_value && !(argv[i][1] == 'D' && argv[i][2]) && i + 1 < argc;
        json |= strcmp(argv[i], "--json") == 0;
        if (strcmp(argv[i], "--device") == 0 && value) {
            a[n++] = argv[i], a[n++] = (char *)dev, i++;
        } else if (strcmp(argv[i], "--inject") == 0 && value) {
            if (planted) a[n++] = argv[i], a[n++] = (char *)inject;
            i++;
        } else {
            a[n++] = argv[i];
            if (value) a[n++] = argv[++i];
        }
    }
    static char json_opt[] = "--json";
    if (!json) a[n++] = json_opt;
    a[n] = NULL;
    return a;
}

/* Start entry i's kgate with its stdout and stderr in unlinked temporary
 * files and NODE_ENTRY_ENV set to i. */
static void node_start(struct node_entry *e, int i, char **argv)
{
    e->out = tmpfile(), e->err = tmpfile();
    if (!e->out || !e->err) die(EXIT_IO, "cannot make a temporary file for entry %d: %s", i, strerror(errno));
    e->pid = fork_tied();
    if (e->pid < 0) die(EXIT_DEVICE, "cannot start entry %d: %s", i, strerror(errno));
    if (e->pid == 0) {
        char idx[16];
        snprintf(idx, sizeof idx, "%d", i);
        setenv(NODE_ENTRY_ENV, idx, 1);
        dup2(fileno(e->out), STDOUT_FILENO);
        dup2(fileno(e->err), STDERR_FILENO);
        execv(argv[0], argv);
        fprintf(stderr, "kgate: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
}

/* Wait for every entry's kgate, noting each one's exit code and wall time
 * and saying on stderr when each ends. */
static void node_wait(struct node_entry *e, int n, double t0)
{
    for (int left = n; left > 0;) {
        int st = 0;
        pid_t pid = waitpid(-1, &st, 0);
        if (pid < 0) {
            if (errno == EINTR) continue;
            die(EXIT_DEVICE, "waiting for the entries: %s", strerror(errno));
        }
        for (int i = 0; i < n; i++) {
            if (e[i].pid != pid) continue;
            e[i].code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            e[i].wall_s = now_s() - t0;
            fprintf(stderr, "node: entry %d (--device %s) ended: exit %d, %.1f s\n", i, e[i].dev, e[i].code,
                    e[i].wall_s);
            left--;
        }
    }
}

/* Case ci of entry a and of entry b are the same case of the same model
 * (entries run the same cases in the same order). */
static int node_peer(const struct node_entry *a, const struct node_entry *b, int ci)
{
    return *a->model && strcmp(a->model, b->model) == 0 && ci < b->ncases &&
           strcmp(a->cases[ci].label, b->cases[ci].label) == 0;
}

/* Bitwise agreement of output k of case ci among entry e and its peers
 * (the entries of its model with that output's digest): e's output is
 * marked when its digest is not the majority's, or when there is none. */
static void node_agree_one(struct node_entry *all, int n, int e, int ci, int k)
{
    struct node_out *mine = &all[e].cases[ci].out[k];
    int peers = 0, same = 0, best = 0;
    if (!*mine->sha) return;
    for (int f = 0; f < n; f++) {
        if (!node_peer(&all[e], &all[f], ci) || k >= all[f].cases[ci].nout) continue;
        const char *sha = all[f].cases[ci].out[k].sha;
        if (!*sha || strcmp(all[f].cases[ci].out[k].name, mine->name) != 0) continue;
        peers++, same += strcmp(sha, mine->sha) == 0;
        int count = 0;
        for (int g = 0; g < n; g++)
            count += node_peer(&all[f], &all[g], ci) && k < all[g].cases[ci].nout &&
                     strcmp(all[g].cases[ci].out[k].sha, sha) == 0;
        if (count > best) best = count;
    }
    if (peers < 2 || same == peers) return;
    mine->disagree = 2 * best > peers ? (same == best ? 0 : 1) : 2;
    all[e].ndisagree += mine->disagree != 0;
}

/* Entry e is a GPU that another entry of the list names too (--device
 * 0,0): the entries share the card, so they time each other's kernels
 * too.  (CPU entries always share the CPU; their rule allows for it.) */
static int node_shared(const struct node_entry *all, int n, int e)
{
    for (int f = 0; f < n; f++)
        if (f != e && strcmp(all[e].dev, "cpu") != 0 && strcmp(all[e].dev, all[f].dev) == 0) return 1;
    return 0;
}

/* Whether entry f's times are a yardstick for entry e's: the entries on
 * e's card when e shares it, else the entries that share no card. */
static int node_yardstick(const struct node_entry *all, int n, int e, int f)
{
    return node_shared(all, n, e) ? strcmp(all[e].dev, all[f].dev) == 0 : !node_shared(all, n, f);
}

/* The slow rule that applies to entry e: NODE_SLOW_RATIO_CPU on the CPU,
 * NODE_SLOW_RATIO_SHARED on a shared card, else NODE_SLOW_RATIO. */
static double node_slow_rule(const struct node_entry *all, int n, int e)
{
    if (strcmp(all[e].dev, "cpu") == 0) return NODE_SLOW_RATIO_CPU;
    return node_shared(all, n, e) ? NODE_SLOW_RATIO_SHARED : NODE_SLOW_RATIO;
}

/* Entry e's speed: per case timed on at least two of its yardstick
 * entries of its model (node_yardstick), its time over the median of
 * theirs; the median of those ratios.  Slow beyond node_slow_rule. */
static void node_speed(struct node_entry *all, int n, int e)
{
    struct node_entry *me = &all[e];
    double *ratio = xcalloc((size_t)me->ncases + 1, sizeof *ratio), *t = xcalloc((size_t)n, sizeof *t);
    int nr = 0;
    for (int ci = 0; ci < me->ncases; ci++) {
        int nt = 0;
        for (int f = 0; f < n && me->cases[ci].us > 0; f++)
            if (node_peer(me, &all[f], ci) && node_yardstick(all, n, e, f) && all[f].cases[ci].us > 0)
                t[nt++] = all[f].cases[ci].us;
        if (nt < 2) continue;
        qsort(t, (size_t)nt, sizeof *t, cmp_double);
        ratio[nr++] = me->cases[ci].us / sorted_median(t, nt);
    }
    qsort(ratio, (size_t)nr, sizeof *ratio, cmp_double);
    me->speed = nr ? sorted_median(ratio, nr) : NAN;
    me->slow = nr && me->speed > node_slow_rule(all, n, e);
    free(ratio), free(t);
}

/* Entry e's identity, as a person finds the card: its model, and on a GPU
 * its PCI bus id and UUID. */
static void node_identity(const struct node_entry *e, char *buf, size_t n)
{
    if (strcmp(e->dev, "cpu") == 0 || (!*e->pci && !*e->uuid)) snprintf(buf, n, "%s", *e->model ? e->model : "-");
    else snprintf(buf, n, "%s, PCI %s, UUID %s", e->model, *e->pci ? e->pci : "not known",
                  *e->uuid ? e->uuid : "not known");
}

/* Entry i's rows (a table, as one device's, with each output's digest) and
 * the "kgate: " lines of its stderr (lost cases, its last line). */
static void node_print_entry(FILE *f, const struct node_entry *e, int i)
{
    char id[400], line[2048];
    node_identity(e, id, sizeof id);
    fprintf(f, "\nentry %d: --device %s: %s: exit %d (%s), %.1f s\n", i, e->dev, id, e->code, e->verdict, e->wall_s);
    fprintf(f, "%-*s %-3s %-7s %10s  %-12s\n", LABEL_W, "case", "out", "verdict", "median-us", "sha256");
    for (int ci = 0; ci < e->ncases; ci++) {
        const struct node_case *c = &e->cases[ci];
        if (!c->nout) fprintf(f, "%-*s %-3s %-7s\n", LABEL_W, c->label, "-", c->verdict);
        for (int k = 0; k < c->nout; k++) {
            const struct node_out *x = &c->out[k];
            char us[24] = "-";
            if (isfinite(x->us)) snprintf(us, sizeof us, "%.1f", x->us);
            fprintf(f, "%-*s %-3s %-7s %10s  %.12s%s\n", LABEL_W, c->label, x->name, x->verdict, us, x->sha,
                    x->disagree == 1 ? "  differs from the majority" : x->disagree ? "  no majority" : "");
        }
    }
    rewind(e->err);
    while (fgets(line, sizeof line, e->err))
        if (strncmp(line, "kgate: ", 7) == 0) fprintf(f, "  %s", line);
}

/* The summary: one row per entry (verdict, cases passed, outputs that
 * disagree, speed against the median entry, identity), then a line per
 * finding. */
static void node_summary(FILE *f, const struct node_entry *e, int n, const char *list)
{
    char id[400];
    fprintf(f, "\nnode: --device %s: %d entries; agreement: each output's SHA-256 against the majority of the "
            "entries of its model; slow: time per case over the model's median entry above %.2f (CPU %.2f; "
            "a card named twice or more: %.2f, against the entries on it)\n",
            list, n, NODE_SLOW_RATIO, NODE_SLOW_RATIO_CPU, NODE_SLOW_RATIO_SHARED);
    fprintf(f, "%-5s %-6s %-7s %-7s %-8s %-11s %s\n", "entry", "device", "verdict", "cases", "disagree", "speed",
            "identity");
    for (int i = 0; i < n; i++) {
        char cases[24], speed[24];
        snprintf(cases, sizeof cases, "%d/%d", e[i].passed, e[i].ncases);
        if (isnan(e[i].speed)) snprintf(speed, sizeof speed, "-");
        else snprintf(speed, sizeof speed, "%.2f%s", e[i].speed, e[i].slow ? " SLOW" : "");
        node_identity(&e[i], id, sizeof id);
        fprintf(f, "%-5d %-6s %-7s %-7s %-8d %-11s %s\n", i, e[i].dev, e[i].verdict, cases, e[i].ndisagree, speed, id);
    }
    for (int i = 0; i < n; i++) {
        for (int ci = 0; ci < e[i].ncases; ci++)
            for (int k = 0; k < e[i].cases[ci].nout; k++)
                if (e[i].cases[ci].out[k].disagree)
                    fprintf(f, "kgate: entry %d (--device %s) disagrees: %s %s: %s\n", i, e[i].dev,
                            e[i].cases[ci].label, e[i].cases[ci].out[k].name,
                            e[i].cases[ci].out[k].disagree == 1 ? "its digest differs from the majority's"
                                                                : "no digest has a majority");
        if (e[i].slow)
            fprintf(f, "kgate: entry %d (--device %s) is slow: its time per case is %.2f x the median entry's\n", i,
                    e[i].dev, e[i].speed);
        if (strcmp(e[i].verdict, "pass") != 0)
            fprintf(f, "kgate: entry %d (--device %s): %s (exit %d)\n", i, e[i].dev, e[i].verdict, e[i].code);
    }
}

/* The cross-device findings as one JSON object on stdout. */
static void node_json(const struct node_entry *e, int n, const char *list, int rc)
{
    printf("{\"node\":{");
    json_str(stdout, "devices", list, 1);
    json_num(stdout, "slow_ratio", NODE_SLOW_RATIO, 1);
    json_num(stdout, "slow_ratio_cpu", NODE_SLOW_RATIO_CPU, 1);
    json_num(stdout, "slow_ratio_shared", NODE_SLOW_RATIO_SHARED, 1);
    printf("\"entries\":[");
    for (int i = 0; i < n; i++) {
        printf("%s{\"entry\":%d,", i ? "," : "", i);
        json_str(stdout, "device", e[i].dev, 1);
        json_str(stdout, "model", e[i].model, 1);
        json_str(stdout, "pci_bus_id", e[i].pci, 1);
        json_str(stdout, "uuid", e[i].uuid, 1);
        printf("\"exit\":%d,", e[i].code);
        json_str(stdout, "verdict", e[i].verdict, 1);
        printf("\"cases\":%d,\"passed\":%d,\"disagree\":[", e[i].ncases, e[i].passed);
        for (int ci = 0, first = 1; ci < e[i].ncases; ci++)
            for (int k = 0; k < e[i].cases[ci].nout; k++) {
                const struct node_out *o = &e[i].cases[ci].out[k];
                if (!o->disagree) continue;
                printf("%s{", first ? "" : ","), first = 0;
                json_str(stdout, "case", e[i].cases[ci].label, 1);
                json_str(stdout, "output", o->name, 1);
                json_str(stdout, "sha256", o->sha, 1);
                printf("\"no_majority\":%s}", o->disagree == 2 ? "true" : "false");
            }
        printf("],");
        json_num(stdout, "speed", e[i].speed, 1);
        printf("\"slow\":%s}", e[i].slow ? "true" : "false");
    }
    printf("],\"exit\":%d}}\n", rc);
}

/* Entry i's JSON lines on stdout, each tagged with "entry":i first. */
static void node_json_lines(struct node_entry *e, int i)
{
    char *line = NULL;
    size_t cap = 0;
    rewind(e->out);
    while (getline(&line, &cap, e->out) > 0)
        if (line[0] == '{') printf("{\"entry\":%d,%s", i, line + 1);
    free(line);
}

/* The exit code of a node run: an entry's own 2, 3, 4 or 6 (it could not
 * run: the first such entry's); else 5 if an entry faulted or hung; else 1
 * if an entry failed a gate, disagreed or was slow; else 0. */
static int node_exit(const struct node_entry *e, int n)
{
    int worst = EXIT_PASS;
    for (int i = 0; i < n; i++)
        if (strcmp(e[i].verdict, "error") == 0) return e[i].code;
    for (int i = 0; i < n; i++) {
        if (strcmp(e[i].verdict, "fault") == 0 || strcmp(e[i].verdict, "hung") == 0) worst = EXIT_DEVICE;
        else if (worst == EXIT_PASS && (strcmp(e[i].verdict, "fail") == 0 || e[i].ndisagree || e[i].slow))
            worst = EXIT_GATE;
    }
    return worst;
}

/* The entries a device list names into e (at most NODE_MAX): its entries,
 * or for `all` every GPU the runtime sees (exit 3 without one).  Returns
 * how many. */
static int node_entries(const char *list, struct node_entry *e)
{
    int n = 0;
    if (strcmp(list, "all") == 0) {
        struct device d;
        char msg[2600];
        memset(&d, 0, sizeof d);
        if (gpu_try_runtime(&d, msg, sizeof msg) != 0) die(EXIT_NORUNTIME, "--device all: %s", msg);
        d.rt.dev_count(&n);
        if (n > NODE_MAX) n = NODE_MAX;
        for (int i = 0; i < n; i++) snprintf(e[i].dev, sizeof e[i].dev, "%d", i);
        return n;
    }
    for (const char *p = list; *p; p += *p == ',') {
        size_t len = strcspn(p, ",");
        snprintf(e[n++].dev, sizeof e->dev, "%.*s", (int)len, p);
        p += len;
    }
    return n;
}

/* The --inject of a device list: KIND@N plants KIND in entry N alone,
 * KIND in every entry; *kind gets KIND (a static buffer) and the result
 * is N, or -1 for every entry.  Exit 2 on an unknown KIND, an N that is
 * not an entry, or a cross-device fault without @N. */
static int node_inject(const char *inject, int n, const char **kind)
{
    uint64_t at = 0;
    const char *sep = strchr(inject, '@'), *name = inject_kind(inject);
    *kind = name;
    if (!inject_find(name)) die(EXIT_USAGE, "--inject %s: unknown fault (kgate --help lists them)", shown(inject));
    if (sep && parse_u64(sep + 1, 0, (uint64_t)n - 1, &at) != 0)
        die(EXIT_USAGE, "--inject %s: @N names an entry of the device list, 0..%d", shown(inject), n - 1);
    if (!sep && inject_cross_device(inject_find(name)))
        die(EXIT_USAGE, "--inject %s: plant it in one entry of the list: --inject %s@N", name, name);
    return sep ? (int)at : -1;
}

/* kgate all or a case command on a device list (o->device_list): each
 * entry in its own kgate, at once; per entry its verdicts, times and
 * digests, then the cross-device findings and the summary (with --json:
 * every entry's lines tagged "entry", then one "node" object; the tables go
 * to stderr).  Exit as node_exit says; 2 for a command or option that a
 * list does not run. */
static int node_run(const struct opts *o, int argc, char **argv)
{
    static struct node_entry e[NODE_MAX];
    if (!(o->cmd_kind & (K_ALL | K_CASE)))
        die(EXIT_USAGE, "--device %s: a device list runs `all` or one case (gemm, grouped, attn); %s takes one device",
            shown(o->device_list), o->command);
    if (o->dump_dir) die(EXIT_USAGE, "--dump with a device list: each entry would write the same files; give one device");
    if (o->seeds > 1) die(EXIT_USAGE, "--seeds with a device list: not supported yet; give --seed S");
    int n = node_entries(o->device_list, e);
    if (n == 0) die(EXIT_NORUNTIME, "--device all: the GPU runtime sees no device");
    const char *kind = NULL;
    int planted = o->inject ? node_inject(o->inject, n, &kind) : -1;
    double t0 = now_s();
    for (int i = 0; i < n; i++) {
        char **a = node_argv(argc, argv, e[i].dev, kind, planted < 0 || planted == i);
        node_start(&e[i], i, a);
        free(a);
    }
    node_wait(e, n, t0);
    for (int i = 0; i < n; i++) {
        node_read(&e[i]), e[i].verdict = node_verdict(&e[i]);
        for (int ci = 0; ci < e[i].ncases; ci++)
            if ((int)strlen(e[i].cases[ci].label) > LABEL_W) LABEL_W = (int)strlen(e[i].cases[ci].label);
    }
    if (LABEL_W > LABEL_MAX) LABEL_W = LABEL_MAX;
    for (int i = 0; i < n; i++)
        for (int ci = 0; ci < e[i].ncases; ci++)
            for (int k = 0; k < e[i].cases[ci].nout; k++) node_agree_one(e, n, i, ci, k);
    for (int i = 0; i < n; i++) node_speed(e, n, i);
    int rc = node_exit(e, n);
    FILE *f = o->json ? stderr : stdout;
    for (int i = 0; i < n; i++) {
        if (o->json) node_json_lines(&e[i], i);
        node_print_entry(f, &e[i], i);
    }
    node_summary(f, e, n, o->device_list);
    if (o->json) node_json(e, n, o->device_list, rc);
    fprintf(f, "kgate: node: %d entries: exit %d\n", n, rc);
    for (int i = 0; i < n; i++) fclose(e[i].out), fclose(e[i].err), free(e[i].cases);
    return rc;
}
