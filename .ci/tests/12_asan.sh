# .ci/tests/12_asan.sh — the ASan/UBSan build of the CPU paths, and the fuzzer under it.
# Sourced by tests.sh, in order, in its shell: its helpers (ok, bad, run, expect, has, ...), $tmp and,
# from 01_build.sh on, $K.

echo "== ASan/UBSan build of the CPU paths"
if make -s kgate-asan >"$tmp/build" 2>&1; then
    ok "kgate-asan builds"
    export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1
    # asan WANT_RC DESCRIPTION ARGS... : expect, and no sanitizer report on stderr
    asan() {
        expect "$1" "asan: $2" ./kgate-asan "${@:3}"
        if grep -q "runtime error\|AddressSanitizer\|LeakSanitizer" "$tmp/err"; then
            bad "asan: $2: $(grep -m1 -A3 "runtime error\|Sanitizer" "$tmp/err")"
        fi
    }
    asan 0 "selftest" selftest --device cpu
    asan 0 "gemm f16 TN bwd with tails" gemm --device cpu --dtype f16 --layout TN --shape 67x129x131 --bwd
    asan 0 "sampled bf16 1300x1500x1100" gemm --device cpu --shape 1300x1500x1100
    asan 1 "--inject unwritten, sampled" gemm --device cpu --shape 1300x1500x1100 --inject unwritten
    asan 0 "--json, size-1 dims" gemm --device cpu --shape 1x1x3000 --bwd --json
    asan 0 "grouped bwd with empty groups" grouped --device cpu --groups 0,65,1,130,0 --shape 70x33 --bwd --repeat 2
    asan 0 "attn varlen causal bwd" attn --device cpu --seqlens 0,37,130:70,5:0 --heads 4:2 --dim 80 --causal --bwd
    AL="$tmp/asan.ledger"
    asan 0 "compare with an A/A copy, bwd" compare gemm --device cpu --shape 40x24x56 --bwd --variant a1 -D GEMM_BM=32 --rounds 2 --ledger "$AL"
    asan 0 "compare, cached arms, --json" compare gemm --device cpu --shape 40x24x56 --bwd --variant a1 -D GEMM_BM=32 --rounds 2 --ledger "$AL" --json
    asan 1 "compare with a planted fault" compare grouped --device cpu --groups 0,33,5 --shape 40x24 --variant a1 -D GEMM_BM=32 --rounds 2 --ledger "$AL" --inject group
    asan 0 "noise on attention" noise attn --device cpu --seq 40:50 --heads 2:1 --dim 32 --rounds 2 --ledger "$AL"
    asan 4 "the budget refusal" compare gemm --device cpu --shape 8x8x8 --variant b -D A=1 --budget 1 --ledger "$AL"
    asan 0 "ledger table" ledger --ledger "$AL"
    asan 0 "ledger best" ledger best --ledger "$AL"
    asan 0 "ledger verify" ledger verify --ledger "$AL"
    asan 1 "--inject mask" attn --device cpu --seq 60:70 --heads 2 --dim 64 --causal --bwd --inject mask
    asan 1 "--inject group, sampled" grouped --device cpu --groups 0,1000,1,700 --shape 1300x1200 --inject group
    asan 2 "bad shapes line" all --device cpu --shapes "$tmp/bad.txt"
    asan 2 "absurd shape" gemm --device cpu --shape 99999999x1x1
    asan 0 "--dump, grouped bwd, scaled" grouped --device cpu --groups 0,65,1,130 --shape 70x33 --bwd --inputs scaled \
        --dump "$tmp/asan_dump1"
    asan 0 "--dump, mxfp4 odd K" gemm --device cpu --dtype mxfp4 --shape 65x40x101 --dump "$tmp/asan_dump2"
    asan 0 "--dump, attn bwd, normal" attn --device cpu --seqlens 0,37,5:0 --heads 4:2 --dim 16 --causal --bwd \
        --inputs normal --dump "$tmp/asan_dump3"
    asan 1 "--inject round, f16 TN bwd" gemm --device cpu --dtype f16 --layout TN --shape 67x129x131 --bwd --inject round
    asan 1 "--inject scale-index, grouped mxfp8" grouped --device cpu --dtype mxfp8 --groups 0,65,1,130 --shape 70x96 \
        --inject scale-index
    asan 0 "all --seeds 2" all --device cpu --shapes "$tmp/two.txt" --seeds 2
    asan 0 "codec e4m3 --decode-all" codec e4m3 --decode-all
    asan 0 "codec e8m0 --decode-all" codec e8m0 --decode-all
    asan 0 "codec values on argv" codec e2m1 0.5 -3 nan
    printf '448\n-0.1\n\n1e-9\n' >"$tmp/codec.in"
    expect 0 "asan: codec values on stdin" bash -c "./kgate-asan codec e5m2 <'$tmp/codec.in'"
    grep -q "runtime error\|AddressSanitizer\|LeakSanitizer" "$tmp/err" && bad "asan: codec stdin: $(head -c 300 "$tmp/err")" || ok "asan: codec on stdin: no sanitizer report"
    asan 2 "codec: a bad value" codec e4m3 one
    asan 2 "shapes: a NUL byte" all --device cpu --shapes "$tmp/nul.txt"
    asan 2 "shapes: /dev/zero" all --device cpu --shapes /dev/zero
    asan 2 "ledger best, no ledger" ledger best --ledger "$tmp/none.ledger"
    asan 0 "diff of a dump with itself, attn bwd" diff "$tmp/asan_dump3" "$tmp/asan_dump3"
    asan 0 "diff --json, grouped bwd" diff "$tmp/asan_dump1" "$tmp/asan_dump1" --json
    asan 2 "diff of two cases" diff "$tmp/asan_dump1" "$tmp/asan_dump2"
    cp -r "$tmp/asan_dump3" "$tmp/asan_dump4" && printf '{"format":"kgate-dump 2","case":"x","seed":[[[' >"$tmp/asan_dump4/manifest.json"
    asan 2 "diff: a malformed manifest" diff "$tmp/asan_dump3" "$tmp/asan_dump4"
    cp -r "$tmp/asan_dump3" "$tmp/asan_dump5" && printf '\223NUMPY\001\000\377\377{' >"$tmp/asan_dump5/O.out.npy"
    asan 2 "diff: a malformed .npy" diff "$tmp/asan_dump3" "$tmp/asan_dump5"
    asan 2 "a repeated option" gemm --device cpu --shape 8x8x8 --dtype f32 --dtype bf16
    asan 1 "a device list, bitflip@1" all --shapes "$tmp/node.txt" --repeat 1 --device cpu,cpu,cpu --inject bitflip@1
    asan 1 "a device list, bitflip@0 on two, --json" gemm --shape 40x24x56 --bwd --device cpu,cpu --inject bitflip@0 --json
    echo "== fuzz: random command lines and shapes files from kgate's own vocabulary (ASan/UBSan/LSan, fixed seed)"
    # A fixed count of vectors (KGATE_FUZZ_N, default below: about 2 minutes on 2 cores), each an argv
    # (commands, every option with valid, boundary and junk values, stray words, a missing value),
    # sometimes a KGATE_* variable, codec's stdin, or a shapes file (valid and broken lines, comments,
    # CRLF, tabs, long lines, many words).  Every command that runs a case gets --device cpu and dims
    # <= 64.  Each runs in a scratch directory (a default ./kgate.ledger lands there, `all` finds no
    # ./shapes.txt) under timeout 20, and must exit with a code of the table (0..6), by no signal, with
    # no sanitizer report.  A failure prints the vector as a shell line; vectors share ledgers, so
    # KGATE_FUZZ_N=<its number> replays it after the same history.
    cat >"$tmp/fuzz.py" <<'PY'
# fuzz vector generator: DIR COUNT SEED -> NUL-separated records on stdout:
#   argc, argv..., env ("" or NAME=VALUE), stdin path, the command as a shell line; files under DIR
import random, shlex, sys
D, COUNT, R = sys.argv[1], int(sys.argv[2]), random.Random(int(sys.argv[3]))
P = lambda x: R.random() < x
C = R.choice
def lst(f, lo, hi): return ",".join(f() for _ in range(R.randint(lo, hi)))
LONG = "7" * 10000
JUNK = ["", " ", "0", "1", "-1", "-0", "+1", "1.5", "1e3", "0x10", "abc", "18446744073709551615",
        "18446744073709551616", "99999999999999999999999", "1e308", "-1e308", "1e-400", "nan", "inf",
        "-inf", "--", "-", "--json", "-x", "\udcff\udcfe", "\u00e9", "\u0661", "1 2", "1\t2", LONG, "x" * 300]
CLEAN = [False]                       # this vector's values all valid
def val(good, edge):                  # an option's value: mostly valid, else its edges, else generic junk
    r = 0 if CLEAN[0] else R.random()
    return good() if r < 0.75 else C(edge) if r < 0.92 else C(JUNK)
def dim(): return str(C([1, 1, 2, 3, 5, 7, 8, 13, 16, 17, 31, 32, 33, 48, 63, 64]))
def seq(): return dim() if P(0.5) else dim() + ":" + dim()
def seqlen(): return C([dim(), "0", dim() + ":" + dim(), "0:" + dim(), dim() + ":0"])
BIG = "18446744073709551616"
CASE = {  # option: (valid value or None for a flag, its edge values)
    "--dtype": (lambda: C(["f32", "f16", "bf16", "bf16", "e4m3", "e5m2", "mxfp8", "mxfp8e5m2", "mxfp4"]),
                ["fp64", "BF16", "f8", "e3m4", "e8m0", "e2m1", "int8"]),
    "--layout": (lambda: C(["NN", "NT", "TN", "TT"]), ["N", "XY", "nt", "NTT", "TTN"]),
    "--bwd": (None, []),
    "--inputs": (lambda: C(["uniform", "normal", "scaled"]), ["Uniform", "zeros", "scaled,normal"]),
    "--scaling": (lambda: C(["tensor", "row", "block"]), ["mx", "col", "Block"]),
    "--mx-rule": (lambda: C(["spec", "up"]), ["down", "SPEC"]),
    "--out": (lambda: C(["bf16", "f32"]), ["f16", "e4m3"]),
    "--fp8": (lambda: C(["ocp", "fnuz"]), ["ieee", "OCP"]),
}
GEMM = {"--shape": (lambda: "x".join(dim() for _ in range(3)),
                    ["0x5x5", "-5x5x5", "8x8", "1x1x1x1", "axbxc", "4x4x", "x8x8", "8xx8", "8X8X8", "+8x8x8",
                     "08x8x8", "1e1x2x2", " 8x8x8", "8x8x8 ", "\uff18x8x8", "1048577x1x1", "1048576x1048576x1",
                     BIG + "x1x1", "4294967297x1x1", "1048576x1x1", "1x1048576x1", "1x1x1048576"])}
GROUPED = {"--shape": (lambda: dim() + "x" + dim(),
                       ["0x5", "-1x5", "8x8x8", "8", "axb", "8x", "x8", "1048577x1", "1x1048577", BIG + "x1"]),
           "--groups": (lambda: lst(lambda: C(["0", "1", "2", "3", "7", "16", "33", "64"]), 1, 6),
                        ["0", "0,0,0", "1,,2", ",", "1,-2", "1,2,", ",1", "1;2", " 1,2", "1048576,1", "1048577",
                         BIG, "4294967296,1", ",".join(["0"] * 4097)])}   # valid: no K = 2^20, no thousands of
# groups (x its rows, or per-group work under ASan: 5-20 s, and more in noise: legitimate work, not in 20 s)
ATTN = {"--heads": (lambda: C(["1", "2", "4", "4:2", "4:1", "2:1", "3", "3:1", "2:2"]),
                    ["0", "0:0", "4:0", "4:3", "6:4", ":", "2:", ":2", "1025", "1024:1", "2048:1", "-1", BIG,
                     "2:1:1"]),
        "--dim": (lambda: C(["1", "2", "3", "8", "16", "24", "32", "33", "64"]), ["0", "256", "257", "-1", BIG]),
        "--seq": (seq, ["0", "0:5", "5:0", "0:0", "5:", ":5", "5:5:5", "1048577", "1048577:1", BIG]),
        "--batch": (lambda: C(["1", "2", "3"]), ["0", "4096", "4097", BIG]),
        "--seqlens": (lambda: lst(seqlen, 1, 5),
                      ["0", "0,0", "0:0,0:0", "3:4:5", "1,,2", ",", "1048577", ",".join(["1"] * 4096),
                       ",".join(["1"] * 4097)]),
        "--causal": (None, []),
        "--scale": (lambda: C(["0.125", "1", "0.5", "1e-3", "2"]),
                    ["0", "-1", "nan", "inf", "-inf", "1e308", "1e-308", "1e38", "4.9e-324", "0x1p-3"])}
OPS = {"gemm": GEMM, "grouped": GROUPED, "attn": ATTN}
REQUIRED = {"gemm": ["--shape"], "grouped": ["--groups", "--shape"], "attn": ["--heads", "--dim", "--seq"]}
INJECT = ["tile", "tail", "nan", "bias", "drop", "row", "unwritten", "outside", "input-outside", "input-inside",
          "input-timed", "group", "small-row", "tilepos", "mask", "race", "round", "scale", "quant", "scale-index", "precision"]
def why(): return C(["a reason", "bf16 accumulate", "\u00e9t\u00e9"])
RUN = {
    "--seed": (lambda: C(["0", "1", "7", "42", "12345"]), ["18446744073709551615", BIG, "-1", "1e3", "0x2a"]),
    "--repeat": (lambda: C(["1", "2", "3"]), ["0", "1001", "-1"]),   # 1000 (valid): up to 1000 x a case
    "--full": (None, []),
    "--rtol": (lambda: C(["0", "1e-4", "1e-2", "0.05", "1"]), ["-1", "nan", "inf", "1e308", "1e-400", "-0"]),
    "--atol": (lambda: C(["0", "1e-4", "1e-2", "0.05", "1"]), ["-1", "nan", "inf", "1e308", "1e-400", "-0"]),
    "--why": (why, ["", "x" * 10000, "\udcff\udcfe", "line\nbreak", "tab\there", '"quote"\\', "\u0007"]),
    "--inject": (lambda: C(INJECT), ["bogus", "TILE", "", "tile,nan"]),
    "--trades-precision": (why, ["", "y" * 10000, "\udcfe"]),
    "--json": (None, []),
    "--dump": (lambda: C([D + "/dump", "dump", D + "/dump/sub"]),
               ["", D + "/no/such/dir", D + "/file", "/proc/self/nope"]),
    "--kernels": (lambda: D + "/tiny.hip", [D + "/none.hip", D, "", D + "/file", D + "/empty.txt"]),
    "--device": (lambda: "cpu", ["gpu0", "CPU", "cpu ", "-1", "1025", BIG]),
}
PORT = {
    "--variant": (lambda: C(["v1", "a.b-c_d", "x" * 48, "tile128"]), ["", "x" * 49, "bad name", "a/b", "\u00e9"]),
    "-D": (lambda: C(["GEMM_BM=32", "GEMM_BN=64", "KG_X", "KG_Y=1", "_Z=2", "KG_A=0x10"]),
           ["1X", "X=", "X=a b", 'X="', "X=\\", "=1", "", "X Y"]),
    "--diagnostic": (None, []),
    "--rounds": (lambda: C(["2", "3"]), ["0", "1", "101", "-1"]),
    "--ledger": (lambda: C([D + "/a.ledger", D + "/a.ledger", D + "/b.ledger", "rel.ledger"]),
                 [D + "/junk.ledger", D + "/empty.ledger", D + "/new%d.ledger", D + "/no/such/x.ledger", "", D]),
    "--budget": (lambda: C(["1", "2", "3"]), ["0", "1000", "1001", "-1"]),
    "--expect": (lambda: C(["wgmma", "mma", "mfma", "wmma"]), ["WGMMA", "hgmma", ""]),
}
ALL = {"--shapes": (lambda: D + "/s%d.txt", [D + "/none.txt", D, "", D + "/empty.txt"]),
       "--seeds": (lambda: C(["1", "2", "3"]), ["0", "1001", "-1", BIG])}   # 1000 (valid): 1000 x the suite
ISA = {"--arch": (lambda: C(["gfx942", "sm_90a"]), ["sm_80x", "gfx", "", "bogus", "sm_", "-1"])}
EVERY = {**CASE, **GEMM, **GROUPED, **ATTN, **RUN, **PORT, **ALL, **ISA}
JUNKOPT = ["--frob", "-", "--", "-h", "--help", "--shape=8x8x8", "foo", "--device=cpu", "-Dx", "-D", "--bwd=1"]

def pool(table):                      # option names to draw from: --kernels and --dump less often
    return [k for k in table for _ in range(1 if k in ("--kernels", "--dump", "--device") else 4)]

def opt(o, table, n):                 # [option] or [option, value]
    good, edge = table[o]
    if good is None: return [o]
    v = val(good, edge) if edge else good()
    if o == "--device" and v.isascii() and v.isdigit() and int(v) <= 1024: v = "cpu"   # never a GPU
    return [o, v.replace("%d", str(n))]

def case_opts(op, n):                 # the case options of op: the required ones mostly, some others
    pairs = [opt(o, OPS[op], n) for o in REQUIRED[op] if P(0.95)]
    if op == "attn" and P(0.3):     # --seqlens instead of --seq (sometimes both)
        pairs = [p for p in pairs if p[0] != "--seq" or P(0.1)] + [opt("--seqlens", ATTN, n)]
    names = list(CASE) + list(OPS[op])
    pairs += [opt(C(names), {**CASE, **OPS[op]}, n) for _ in range(R.randint(0, 3))]
    return pairs

def shapes_file(n):                   # --shapes file s<n>.txt: lines, valid and not
    lines, valid = [], P(0.6)
    for _ in range(R.randint(1, 4)):
        r = R.random()
        if valid or r < 0.55:
            op = C(list(OPS))
            words = [op] + [w for p in case_opts(op, n) for w in p]
            if valid: words = [op] + [w for p in valid_case(op) for w in p]
            sep = C([" ", " ", "\t", "  "])
            line = sep.join(words)
            if P(0.2): line += C([" # comment", "#", "\t# x --bwd"])
        elif r < 0.65: line = C(["# a comment", "", "   ", "\t", "#"])
        elif r < 0.72: line = C(["conv --shape 8x8x8", "GEMM --shape 8x8x8", "--shape 8x8x8", "gemm"])
        elif r < 0.78: line = "gemm --shape 8x8x8 " + " ".join(opt(C(list(RUN)), RUN, n))
        elif r < 0.83: line = "gemm --shape 8x8x8" + " --bwd" * R.choice([62, 63, 64, 200])
        elif r < 0.88: line = "gemm --shape 8x8x8 --why " + "w" * R.choice([300, 5000, 70000])
        elif r < 0.92: line = "gemm --shape \udcff8x8x8"
        elif r < 0.95: line = "gemm --shape 8x8x8 \x00 --bwd"
        else: line = "attn --heads 2 --dim 8 --seq " + C(["8", "0", "8:0"]) + " --causal"
        lines.append(line)
    eol = C(["\n", "\n", "\r\n", "\r"])
    text = eol.join(lines) + ("" if P(0.2) else eol)
    with open("%s/s%d.txt" % (D, n), "wb") as f: f.write(text.encode("utf-8", "surrogateescape"))

def valid_case(op):                   # a case with every value valid (it may still be refused: --inject)
    if op == "gemm":
        return [["--shape", "x".join(dim() for _ in range(3))]] + R.sample(
            [[], ["--bwd"], ["--dtype", C(["f16", "f32"])], ["--layout", C(["NN", "TN", "TT"])], ["--inputs", "normal"]], 2)
    if op == "grouped":
        return [["--groups", GROUPED["--groups"][0]()], ["--shape", dim() + "x" + dim()]] + R.sample(
            [[], ["--bwd"], ["--layout", "NN"], ["--dtype", C(["mxfp4", "e4m3", "f16"])]], 1)
    return ([["--heads", ATTN["--heads"][0]()], ["--dim", ATTN["--dim"][0]()],
             C([["--seq", seq()], ["--seqlens", lst(seqlen, 1, 4)]])] +
            R.sample([[], ["--causal"], ["--bwd"], ["--dtype", "f16"]], 2))

def vector(n):
    CLEAN[0] = P(0.4)
    r = R.random()
    cmd = (C(["gemm", "grouped", "attn"]) if r < 0.45 else "all" if r < 0.6 else
           C(["compare", "noise"]) if r < 0.72 else "ledger" if r < 0.8 else "codec" if r < 0.88 else "isa" if r < 0.93 else
           C(["devices", "--help", "help", "-h", "frob", "", "GEMM", "gemm\udcff", "x" * 10000]))
    if P(0.004): cmd = "selftest"     # 5-10 s under ASan: a few per run
    args, stdin, env = [cmd], "/dev/null", ""
    pairs = []
    if cmd in OPS or cmd in ("compare", "noise"):
        op = cmd if cmd in OPS else C(list(OPS) + ["conv"] if P(0.05) else list(OPS))
        if cmd not in OPS: args.append(op)
        if op in OPS:
            pairs += valid_case(op) if P(0.35) else case_opts(op, n)
        if cmd == "compare" or P(0.1):
            pairs.append(opt("--variant", PORT, n))
            pairs += [opt("-D", PORT, n) for _ in range(R.randint(0, 2) if P(0.9) else 33)]
        extra = {**RUN, **PORT}
        extra.pop("--device")
        if cmd not in OPS:
            extra.pop("--dump")
        pairs += [opt(C(pool(extra)), extra, n) for _ in range(R.randint(0, 3))]
        if cmd not in OPS and not any(p[:1] == ["--rounds"] for p in pairs):   # the default 10 rounds of
            pairs.append(["--rounds", C(["2", "3"])])  # a tiny case time up to 3 s each on a loaded machine
    elif cmd == "all":
        shapes_file(n)
        pairs.append(opt("--shapes", ALL, n) if P(0.95) else [])
        extra = {**RUN, **ALL, "--expect": PORT["--expect"], "--ledger": PORT["--ledger"]}
        extra.pop("--device")
        pairs += [opt(C(pool(extra)), extra, n) for _ in range(R.randint(0, 2))]
    elif cmd == "ledger":
        if P(0.8): args.append(C(["verify", "best", "verify", "best", "frob", "", "-", "verify\udcff"]))
        pairs.append(opt("--ledger", PORT, n) if P(0.95) else [])
        if P(0.2): pairs.append(opt(C(list(EVERY)), EVERY, n))
    elif cmd == "codec":
        args.append(C(["e4m3", "e5m2", "e4m3fnuz", "e5m2fnuz", "e2m1", "e8m0"]) if P(0.9) else C(JUNK))
        if P(0.3): pairs.append(["--fp8", val(lambda: C(["ocp", "fnuz"]), ["ieee", ""])] if P(0.9) else ["--fp8"])
        r = R.random()
        if r < 0.2: pairs.append(["--decode-all"])
        elif r < 0.7:
            vals = ["0", "-0", "1", "448", "449", "57344", "6", "0.5", "1e-3", "1e308", "1e40", "nan", "inf",
                    "-inf", "1.0abc", "0x1p-9", "240", "0.0019531", "1e-45", "-1e-9", "3.4e38", "0.%0300d1" % 0]
            pairs += [[C(vals) if P(0.85) else C(JUNK)] for _ in range(R.randint(1, 5))]
        else:
            stdin = "%s/in%d.txt" % (D, n)
            ls = [C(["1", "0.5", "-448", "nan", "", " 2 ", "abc", "1e400", "x" * 5000, "\udcff", "1\r",
                     "0.%0300d1" % 0]) for _ in range(R.randint(0, 6))]
            with open(stdin, "wb") as f:
                f.write("\n".join(ls).encode("utf-8", "surrogateescape") + (b"\n" if P(0.8) else b""))
        if P(0.1): pairs.append(opt(C(list(EVERY)), EVERY, n))
    elif cmd == "isa":
        pairs.append(opt("--arch", ISA, n))   # always: without it isa compiles for GPU 0 (uncached)
        if P(0.4): pairs.append(opt("--expect", PORT, n))
        if P(0.2):       # a candidate: only with the tiny --kernels file (kernels.hip with -D: a full compile)
            pairs += [["--kernels", D + "/tiny.hip"], opt("--variant", PORT, n), opt("-D", PORT, n)]
        if P(0.15): pairs.append(opt(C(list(EVERY)), EVERY, n))
    else:
        if P(0.5): pairs.append(opt(C(list(EVERY)), EVERY, n))
    runs = cmd in OPS or cmd in ("all", "compare", "noise", "selftest")
    if runs:                          # every command that runs a case runs it on the CPU
        pairs.insert(R.randint(0, len(pairs)), ["--device", "cpu" if P(0.95) else C(RUN["--device"][1])])
    R.shuffle(pairs) if P(0.3) else None
    args += [w for p in pairs for w in p]
    r = 1 if CLEAN[0] else R.random()
    if r < 0.04 and len(args) > 2: args.pop()                               # an option's value missing
    elif r < 0.08: args.insert(R.randint(1, len(args)), C(JUNKOPT))        # a stray word
    elif r < 0.1: args.append(C(list(EVERY)))                              # an option at the end
    if P(0.08):
        env = C(["KGATE_THREADS=", "KGATE_THREADS=1", "KGATE_THREADS=3", "KGATE_THREADS=0", "KGATE_THREADS=-5",
                 "KGATE_THREADS=abc", "KGATE_THREADS=1000000", "KGATE_THREADS=" + BIG, "KGATE_COMPILE_TIMEOUT=0",
                 "KGATE_COMPILE_TIMEOUT=nan", "KGATE_COMPILE_TIMEOUT=-1", "KGATE_CACHE=",
                 "KGATE_CACHE=" + D + "/file", "KGATE_REF_PORTABLE=1", "KGATE_REF_PORTABLE=x"])
    return args, env, stdin

with open(D + "/tiny.hip", "w") as f:   # compiles for sm_90a (NVRTC) and gfx942 (clang-19 -nogpuinc)
    f.write('#ifndef __global__\n#define __global__ __attribute__((global))\n#endif\n'
            'extern "C" __global__ void k(float *x) { x[0] = 1; }\n')
with open(D + "/junk.ledger", "wb") as f:
    f.write(b'{"seq":1}\nnot json\n\xff\xfe\n{"prev":"' + b"0" * 64 + b'"}\n')
open(D + "/empty.ledger", "w").close(); open(D + "/empty.txt", "w").close()
with open(D + "/file", "w") as f: f.write("a file\n")
def q(b):                             # bytes as one shell word
    if all(32 <= c < 127 for c in b): return shlex.quote(b.decode())
    return "$'" + "".join(chr(c) if 32 <= c < 127 and c not in b"'\\" else "\\x%02x" % c for c in b) + "'"
def show(w):                          # a word as shell text, exact; a long run of a unit as printf's
    b = w.encode("utf-8", "surrogateescape")
    for pre in range(5 if len(b) > 200 else 0):
        for p in range(1, 5):
            unit, k = b[pre:pre + p], 1
            while b[pre + k * p:pre + (k + 1) * p] == unit: k += 1
            if len(b) - pre - k * p <= 4 and not set(unit) & set(b"%\\"):
                return "%s\"$(printf %%.0s%s $(seq %d))\"%s" % (q(b[:pre]) if pre else "", q(unit), k,
                                                            q(b[pre + k * p:]) if len(b) > pre + k * p else "")
    return q(b)
out = sys.stdout.buffer
for n in range(COUNT):
    args, env, stdin = vector(n)
    line = " ".join([show(env)] * bool(env) + ["kgate-asan"] + [show(a.replace("\x00", "")) for a in args])
    if stdin != "/dev/null":
        line += " < <(printf %s " + show(open(stdin, "rb").read().decode("utf-8", "surrogateescape")) + ")"
    rec = [str(len(args))] + args + [env, stdin, line]
    out.write(b"".join(a.replace("\x00", "").encode("utf-8", "surrogateescape") + b"\0" for a in rec))
PY
    FZ=$tmp/fuzz
    fuzz_n=${KGATE_FUZZ_N:-1000}
    mkdir -p "$FZ/cwd"
    cp ./kgate-asan "$FZ/kgate-asan"   # a copy with no shapes.txt beside it: `all` then finds none
    ./kgate-asan isa --arch gfx942 >/dev/null 2>&1; ./kgate-asan isa --arch sm_90a >/dev/null 2>&1 # the cache isa vectors read
    python3 "$tmp/fuzz.py" "$FZ" "$fuzz_n" 20250611 >"$FZ/vectors"
    declare -A fuzz_rc=()
    fuzz_runs=0 fuzz_bad=0 fuzz_t0=$SECONDS
    while IFS= read -r -d '' n; do
        fargs=()
        for ((j = 0; j < n; j++)); do IFS= read -r -d '' a; fargs+=("$a"); done
        IFS= read -r -d '' fenv; IFS= read -r -d '' fin; IFS= read -r -d '' fline
        (cd "$FZ/cwd" && exec env ${fenv:+"$fenv"} timeout -k 5 20 "$FZ/kgate-asan" "${fargs[@]}" \
            <"$fin" >"$FZ/out" 2>"$FZ/err"); rc=$?
        fuzz_runs=$((fuzz_runs + 1))
        fuzz_rc[$rc]=$((${fuzz_rc[$rc]:-0} + 1))
        why="" san="runtime error\|AddressSanitizer\|LeakSanitizer\|UndefinedBehaviorSanitizer"
        if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then why="timed out (20 s)"
        elif [ $rc -gt 128 ]; then why="killed by signal $((rc - 128))"
        elif [ $rc -gt 6 ]; then why="exit $rc, not in the table"; fi
        grep -q "$san" "$FZ/err" && why="${why:+$why, }sanitizer report (exit $rc)"
        [ -z "$why" ] && continue
        fuzz_bad=$((fuzz_bad + 1))
        bad "fuzz vector $fuzz_runs: $why: $fline"
        for a in "${fargs[@]}"; do
            case $a in "$FZ"/s*.txt) [ -f "$a" ] && echo "     ${a#"$FZ/"}: $(head -c 300 "$a" | cat -A | head -5)";; esac
        done
        { grep -m1 -A6 "$san" "$FZ/err" || head -3 "$FZ/err"; } | cut -c1-200 | sed 's/^/     /'
    done <"$FZ/vectors"
    fuzz_hist=$(printf '%s\n' "${!fuzz_rc[@]}" | sort -n | while read -r c; do printf ' %s:%s' "$c" "${fuzz_rc[$c]}"; done)
    # every vector read back, and the mix reached both ends: some ran to a verdict (0 or 1), some were refused (2)
    if [ "$fuzz_runs" -eq "$fuzz_n" ] && [ "${fuzz_rc[2]:-0}" -gt 0 ] && [ $((${fuzz_rc[0]:-0} + ${fuzz_rc[1]:-0})) -gt 0 ]; then
        ok "fuzz: $fuzz_runs vectors in $((SECONDS - fuzz_t0)) s, $fuzz_bad failed; exit code:count$fuzz_hist"
    else bad "fuzz: $fuzz_runs of $fuzz_n vectors read back from the generator; exit code:count$fuzz_hist"; fi
else
    bad "kgate-asan build: $(head -c 800 "$tmp/build")"
fi
