/* src/codec.c — `kgate codec`: ref.c's fp8, FP4 and E8M0 codecs on the
 * command line.  Relies on util.c and ref.c. */

/* A format name of `kgate codec`: an element format (e4m3/e5m2 in the
 * encoding `enc` names, e4m3fnuz, e5m2fnuz, e2m1), or e8m0 (returns Q_COUNT). */
static enum qfmt codec_format(const char *s, const char *enc)
{
    int fnuz = enc && strcmp(enc, "fnuz") == 0;
    if (enc && !fnuz && strcmp(enc, "ocp") != 0) die(EXIT_USAGE, "codec: --fp8 %s: expected ocp or fnuz", shown(enc));
    if (enc && strcmp(s, "e4m3") != 0 && strcmp(s, "e5m2") != 0)
        die(EXIT_USAGE, "codec: --fp8 applies to e4m3 and e5m2, not %s", shown(s));
    if (strcmp(s, "e8m0") == 0) return Q_COUNT;
    if (strcmp(s, "e4m3") == 0) return fnuz ? Q_E4M3_FNUZ : Q_E4M3;
    if (strcmp(s, "e5m2") == 0) return fnuz ? Q_E5M2_FNUZ : Q_E5M2;
    for (int f = 0; f < Q_COUNT; f++)
        if (strcmp(s, QFMTS[f].name) == 0) return (enum qfmt)f;
    die(EXIT_USAGE, "codec: unknown format '%s' (e4m3, e5m2, e4m3fnuz, e5m2fnuz, e2m1, e8m0)", shown(s));
}

/* A value as codec prints it: %.9g, NaN always "nan". */
static void codec_value(float v)
{
    if (isnan(v)) printf("nan");
    else printf("%.9g", v);
}

/* Encode one value written as text (an fp32 value: decimal, hex float,
 * nan, inf); exit 2 if it is not one, naming its stdin line when line > 0. */
static void codec_encode(enum qfmt f, const char *text, int line)
{
    char *end, where[48] = "";
    if (line > 0) snprintf(where, sizeof where, "stdin line %d: ", line);
    errno = 0;
    float v = strtof(text, &end);
    if (end == text || *end) die(EXIT_USAGE, "codec: %s'%s' is not a number", where, shown(text));
    if (errno == ERANGE && isinf(v)) die(EXIT_USAGE, "codec: %s%s is beyond fp32's range", where, shown(text));
    unsigned code = q_encode(f, v);
    printf("%s 0x%02x ", text, code);
    codec_value(q_decode(f, code));
    putchar('\n');
}

/* kgate codec FORMAT [--fp8 ocp|fnuz] (--decode-all | X ... | < lines, one
 * value a line):
 * ref.c's own decoders and encoders, for tests and for a kernel engineer's
 * questions ("what does 0x7e mean in e4m3fnuz?"). */
static int cmd_codec(int argc, char **argv)
{
    const char *fmt = NULL, *enc = NULL;
    int decode_all = 0, nvalues = 0;
    char **values = xmalloc((size_t)argc * sizeof *values);
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--fp8") == 0) {
            if (i + 1 == argc) die(EXIT_USAGE, "codec: --fp8 needs ocp or fnuz");
            if (enc) die(EXIT_USAGE, "codec: --fp8 is given twice: give it once");
            enc = argv[++i];
        } else if (strcmp(argv[i], "--decode-all") == 0) {
            if (decode_all) die(EXIT_USAGE, "codec: --decode-all is given twice: give it once");
            decode_all = 1;
        } else if (strncmp(argv[i], "--", 2) == 0) {
            die(EXIT_USAGE, "codec: unknown option '%s' (--fp8 ocp|fnuz, --decode-all)", shown(argv[i]));
        } else if (!fmt) {
            fmt = argv[i];
        } else {
            values[nvalues++] = argv[i];
        }
    }
    if (!fmt) die(EXIT_USAGE, "codec: give a format (e4m3, e5m2, e4m3fnuz, e5m2fnuz, e2m1, e8m0)");
    enum qfmt f = codec_format(fmt, enc);
    if (decode_all) {
        if (nvalues) die(EXIT_USAGE, "codec: --decode-all takes no values");
        unsigned n = f == Q_COUNT ? 256 : 1u << q_bits(f);
        for (unsigned c = 0; c < n; c++) {
            printf("0x%02x ", c);
            codec_value(f == Q_COUNT ? e8m0_decode(c) : q_decode(f, c));
            putchar('\n');
        }
        free(values);
        return EXIT_PASS;
    }
    if (f == Q_COUNT) die(EXIT_USAGE, "codec: e8m0 is decode-only (--decode-all)");
    for (int i = 0; i < nvalues; i++) codec_encode(f, values[i], 0);
    if (nvalues) { free(values); return EXIT_PASS; }
    free(values);
    char line[256];
    for (int n = 1; fgets(line, sizeof line, stdin); n++) {
        size_t len = strlen(line);
        if (len == sizeof line - 1 && line[len - 1] != '\n' && !feof(stdin))
            die(EXIT_USAGE, "codec: stdin line %d: longer than %zu characters", n, sizeof line - 2);
        while (len && isspace((unsigned char)line[len - 1])) line[--len] = 0;
        if (*line) codec_encode(f, line, n);
    }
    return EXIT_PASS;
}
