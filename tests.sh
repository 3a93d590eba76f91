#!/usr/bin/env bash
# tests.sh — kgate's one test command.  Needs no GPU: every gate is proved on
# --device cpu against clean runs and planted faults, the references against
# closed forms, the CLI against bad input, kernels.hip against NVRTC (sm_90a)
# and clang-19 (gfx942) when they are installed (kgate isa counts their matrix
# instructions), compare/noise/the ledger/the budget end to end (concurrent
# appends and kill -9 included), and the CPU paths under ASan/UBSan.  With a GPU present it also runs `kgate all` and `kgate selftest`
# on it.  The last line is "N passed, N failed"; the exit status is 0 only if
# nothing failed.  It starts with the golden check (.ci/golden.txt: kgate's own output on fixed
# CPU commands, byte for byte apart from times) and the tree's shape (src/ and README's Map).
#
#   ./tests.sh            everything
#   KGATE_QUICK=1 ./tests.sh   skip `kgate all --device cpu` (a few minutes on 2 cores)
set -u
cd "$(dirname "$0")"

passed=0
failed=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export KGATE_CACHE="$tmp/cache"

ok()  { passed=$((passed + 1)); echo "ok   $*"; }
bad() { failed=$((failed + 1)); echo "FAIL $*"; }

# run CMD... : run with stdout in $tmp/out, stderr in $tmp/err, status in $rc
run() { "$@" >"$tmp/out" 2>"$tmp/err"; rc=$?; }

# expect WANT_RC DESCRIPTION CMD... : the command exits with WANT_RC
expect() {
    local want=$1 desc=$2
    shift 2
    run "$@"
    if [ "$rc" -eq "$want" ]; then ok "$desc (exit $rc)"
    else bad "$desc: exit $rc, want $want; stderr: $(head -c 400 "$tmp/err")"; fi
}

# has FILE PATTERN DESCRIPTION : FILE contains PATTERN (extended regexp)
has() {
    if grep -Eq -- "$2" "$1"; then ok "$3"; else bad "$3: no /$2/ in $(head -c 600 "$1")"; fi
}

# col FILE ROWREGEX NAME : in a --wide table (one word per column head), the value under NAME
# in the first row matching ROWREGEX; "?" if there is none.  A row's case label is its only
# field of several words, so a column is found counting from the row's end.
col() {
    awk -v re="$2" -v name="$3" '
        /^case / { for (k = 1; k <= NF; k++) if ($k == name) from_end = NF - k; nh = NF; next }
        nh && $0 ~ re { print (from_end != "" && NF >= nh) ? $(NF - from_end) : "?"; found = 1; exit }
        END { if (!found) print "?" }' "$1"
}

# one_line DESCRIPTION : the last command's stderr is exactly one line
one_line() {
    local n
    n=$(wc -l <"$tmp/err")
    if [ "$n" -eq 1 ]; then ok "$1: one line: $(cat "$tmp/err")"
    else bad "$1: stderr has $n lines: $(head -c 400 "$tmp/err")"; fi
}
# Fault $1 planted in each case after $2 (CPU, one run): exit 1, and on each output one failure line,
# "    FAIL $2" (a grep pattern); with $sampled set, stderr must match it too (the check was a sample).
alone_on_each() {
    local kind=$1 line=$2 c n m o; shift 2
    for c in "$@"; do
        expect 1 "--inject $kind, $c" $K $c --device cpu --repeat 1 --inject $kind
        n=$(grep -c "^    FAIL $line" "$tmp/out"); m=$(grep -c "^    FAIL" "$tmp/out")
        o=$(sed -n 's/^kgate: 1 case, \([0-9]*\) outputs\{0,1\}: .*/\1/p' "$tmp/out")
        [ "$n" -eq "$o" ] && [ "$m" -eq "$n" ] && ok "--inject $kind, $c: ${line%% *} alone fails, on each of its $o outputs" \
            || bad "--inject $kind, $c: $n ${line%% *} failures, $m failures, $o outputs"
        [ -z "${sampled:-}" ] || has "$tmp/err" "$sampled" "--inject $kind, $c: a sampled check"
    done
}

echo "== build: gcc and clang, -Wall -Wextra -Werror"
if make -s clean && make -s CFLAGS="-O2 -Werror" >"$tmp/build" 2>&1; then ok "gcc build, no warnings"
else bad "gcc build: $(head -c 800 "$tmp/build")"; fi
if command -v clang >/dev/null; then
    if clang -std=c11 -Wall -Wextra -Werror -O2 -o "$tmp/kgate-clang" kgate.c -ldl -lpthread -lm \
        >"$tmp/build" 2>&1; then ok "clang build, no warnings"
    else bad "clang build: $(head -c 800 "$tmp/build")"; fi
fi
K=./kgate
[ -x "$K" ] || { echo "no kgate binary"; echo "$passed passed, $((failed + 1)) failed"; exit 1; }

echo "== golden: kgate's output on fixed CPU cases, byte for byte (.ci/golden.txt)"
# Run each '$ ARGS' line of .ci/golden.txt and write the file anew from what kgate printed (see
# its header): stdout, stderr's "kgate: " lines, the exit code; times, ratios and the machine out.
golden_write() {
    local line args g="$tmp/golden" cpu
    cpu=$($K devices 2>/dev/null | sed -n 's/^cpu  \(.*\) (--device cpu)$/\1/p' | sed 's/[]\/$*.^[]/\\&/g')
    rm -rf "$g" && mkdir -p "$g"
    grep '^#' .ci/golden.txt
    grep '^\$ ' .ci/golden.txt | while IFS= read -r line; do
        read -r -a args <<<"${line#\$ }"
        args=("${args[@]//TMP/$g}")
        $K "${args[@]}" >"$g.out" 2>"$g.err"
        echo "exit $?" >"$g.rc"
        echo "$line"
        { cat "$g.out"; grep '^kgate: ' "$g.err" | sed 's/^/stderr: /'; cat "$g.rc"; } |
            grep -Ev '^  (device|arch|references|compute|software|memory|peak): |^gate checks on ' |
            sed -E -e "s#$g#TMP#g" -e "s/${cpu:-CPU NAME}/CPU/g" -e 's/"time":\{[^{}]*\}/"time":{}/g' \
                -e 's/^((stderr: )?kgate: [0-9]+ cases?[, ].*); [0-9.]+ s$/\1; - s/' \
                -e 's/"device":"[^"]*"/"device":"-"/g' -e 's/"compare":"[a-z]+"/"compare":"-"/g' \
                -e 's/"(aa_ratio|aa_lo|aa_hi|ratio|ratio_lo|ratio_hi|band)":[^,}]*/"\1":-/g'
    done
}
golden_write >"$tmp/golden.txt"
if [ "${KGATE_GOLDEN:-}" = write ]; then
    cp "$tmp/golden.txt" .ci/golden.txt && echo "golden: .ci/golden.txt written anew (not a test)"
elif diff -u .ci/golden.txt "$tmp/golden.txt" >"$tmp/golden.diff"; then
    ok "golden: $(grep -c '^\$ ' .ci/golden.txt) commands print what .ci/golden.txt holds"
else
    bad "golden: the output differs from .ci/golden.txt: $(head -c 1500 "$tmp/golden.diff")"
fi

echo "== the tree: kgate.c the spine, one part per file under src/, README's Map"
miss=""
for f in src/*.c; do
    grep -q "^#include \"$f\"" kgate.c || miss="$miss $f(not included by kgate.c)"
    grep -q "^| \`$f\`" README.md || miss="$miss $f(not in README's Map)"
done
for f in $(sed -n 's/^| `\(src\/[a-z0-9_]*\.c\)`.*/\1/p' README.md); do [ -f "$f" ] || miss="$miss $f(in the Map, not in the tree)"; done
[ -z "$miss" ] && ok "every src/ file is included by kgate.c and has its line in README's Map" || bad "the tree and its Map differ:$miss"
big=$(wc -l kgate.c src/*.c | awk '$2 != "total" && (($2 == "kgate.c" && $1 > 1000) || $1 > 1500) {print $2 " " $1}')
[ -z "$big" ] && ok "kgate.c is at most 1000 lines and every src/ file at most 1500" || bad "files past their size (split them): $big"

echo "== selftest on the CPU device: formats, references, sampling, every gate vs every fault"
expect 0 "kgate selftest --device cpu" $K selftest --device cpu
# its summary counts what it printed: one "ok" line per check, and more than one check per fault
n=$(grep -c '^  ok ' "$tmp/out"); nf=$(grep -c '^    { "' src/inject.c)
has "$tmp/out" "^selftest: $n passed, 0 failed$" "selftest reports its $n checks passed, 0 failed"
[ "$n" -gt "$nf" ] && ok "selftest ran more checks ($n) than kgate has planted faults ($nf)" || bad "selftest: $n checks for $nf faults"

echo "== quantizers: every code decoded, every boundary encoded, ml_dtypes as an oracle"
skip() { echo "skip $*"; }
# Every code of every format against the notes' table (notes/lowprec.md), computed here in plain
# python3 from sign, exponent and mantissa (exponent bits, mantissa bits, bias), NaN and inf as listed.
cat >"$tmp/qdecode.py" <<'PY'
import sys
f = sys.argv[1]
E, M, B = {"e4m3": (4, 3, 7), "e5m2": (5, 2, 15), "e4m3fnuz": (4, 3, 8), "e5m2fnuz": (5, 2, 16),
           "e2m1": (2, 1, 1), "e8m0": (8, 0, 127)}[f]
for c in range(1 << (E + M + (f != "e8m0"))):
    s, e, m = (-1) ** (c >> (E + M)), c >> M & (1 << E) - 1, c & (1 << M) - 1
    v = s * (m * 2.0 ** (1 - B - M) if e == 0 else (1 + m / 2 ** M) * 2.0 ** (e - B))
    if f == "e8m0": v = 2.0 ** (c - 127)                              # no sign, no mantissa
    if f == "e5m2" and e == 31: v = s * float("inf")                  # 0x7c, 0xfc
    if (f == "e8m0" and c == 0xff or f.endswith("fnuz") and c == 0x80 or
            f == "e4m3" and c & 0x7f == 0x7f or f == "e5m2" and e == 31 and m): v = float("nan")
    print("0x%02x %s" % (c, "%.9g" % v))
PY
# ... and the specials, written out by hand from the same table
specials="e4m3:0x7f:nan e4m3:0xff:nan e4m3:0x7e:448 e4m3:0xfe:-448 e4m3:0x80:-0 e4m3:0x01:0.001953125
    e4m3:0x08:0.015625 e4m3:0x38:1
    e5m2:0x7c:inf e5m2:0xfc:-inf e5m2:0x7d:nan e5m2:0x7e:nan e5m2:0x7f:nan e5m2:0xfd:nan e5m2:0x7b:57344
    e5m2:0x80:-0 e5m2:0x01:1.52587891e-05 e5m2:0x3c:1
    e4m3fnuz:0x80:nan e4m3fnuz:0x7f:240 e4m3fnuz:0xff:-240 e4m3fnuz:0x00:0 e4m3fnuz:0x01:0.0009765625
    e4m3fnuz:0x08:0.0078125 e4m3fnuz:0x40:1
    e5m2fnuz:0x80:nan e5m2fnuz:0x7f:57344 e5m2fnuz:0xff:-57344 e5m2fnuz:0x01:7.62939453e-06
    e5m2fnuz:0x04:3.05175781e-05 e5m2fnuz:0x40:1
    e2m1:0x00:0 e2m1:0x01:0.5 e2m1:0x02:1 e2m1:0x03:1.5 e2m1:0x04:2 e2m1:0x05:3 e2m1:0x06:4 e2m1:0x07:6
    e2m1:0x08:-0 e2m1:0x0f:-6
    e8m0:0xff:nan e8m0:0x7f:1 e8m0:0x00:5.87747175e-39 e8m0:0x80:2 e8m0:0xfe:1.70141183e+38"
for f in e4m3 e5m2 e4m3fnuz e5m2fnuz e2m1 e8m0; do
    run $K codec $f --decode-all
    cp "$tmp/out" "$tmp/dec.$f"
    python3 "$tmp/qdecode.py" $f >"$tmp/want"
    if [ $rc -eq 0 ] && diff "$tmp/want" "$tmp/dec.$f" >"$tmp/diff"; then
        ok "decode: all $(wc -l <"$tmp/want") $f codes equal sign/exponent/mantissa by the notes' table"
    else bad "decode $f (exit $rc) $(head -c 200 "$tmp/err"): want <, got >: $(grep '^[<>]' "$tmp/diff" | head -6 | tr '\n' ' ')"; fi
    want="" miss=""
    for s in $specials; do
        [ "${s%%:*}" = $f ] || continue
        c=${s#*:} && want="$want ${c%%:*}=${c#*:}"
        grep -qx "${c%%:*} ${c#*:}" "$tmp/dec.$f" || miss="$miss ${c%%:*}=${c#*:}"
    done
    [ -z "$miss" ] && ok "decode: $f specials$want" || bad "decode: $f specials wrong or missing:$miss"
done
for f in e4m3 e5m2; do
    for enc in ocp fnuz; do
        want=$f && [ $enc = fnuz ] && want=${f}fnuz
        run $K codec $f --fp8 $enc --decode-all
        cmp -s "$tmp/out" "$tmp/dec.$want" && ok "decode: $f --fp8 $enc is $want" || bad "decode: $f --fp8 $enc is not $want"
    done
done

# Every boundary encoded: FORMAT INPUT=CODE ... (hex floats are exact fp32; "x±ulp" means one fp32 ulp off x)
cat >"$tmp/bounds" <<'EOF'
# e4m3: max, max+ulp, the overflow tie 464 (to even 448) and 464±ulp, far overflow, ±inf saturate, NaN
e4m3     448=0x7e -448=0xfe 0x1.c00002p+8=0x7e 0x1.cffffep+8=0x7e 464=0x7e 0x1.d00002p+8=0x7e -464=0xfe
e4m3     1e30=0x7e -1e30=0xfe inf=0x7e -inf=0xfe nan=0x7f -nan=0x7f
# interior ties to even (400: 384|416, 432: 416|448, 1.0625: 1|1.125, 1.1875: 1.125|1.25), 1.0625-ulp,
# and the double-rounding trap: 1.0625+2^-20 is 1.125 directly (bf16 first gives 1.0625, then 1.0)
e4m3     400=0x7c 432=0x7e 1=0x38 1.0625=0x38 0x1.0ffffep+0=0x38 0x1.10001p+0=0x39 1.1875=0x3a
# min subnormal 2^-9, half of it (tie to 0) and half+ulp, 1.5x and 2.5x (tie to 2), the largest
# subnormal, the subnormal/normal tie 7.5 x 2^-9 (to 2^-6) and tie-ulp, min normal, zeros, underflow
e4m3     0x1p-9=0x01 0x1p-10=0x00 0x1.000002p-10=0x01 0x1.8p-9=0x02 0x1.4p-8=0x02 0x1.cp-7=0x07
e4m3     0x1.ep-7=0x08 0x1.dffffep-7=0x07 0x1p-6=0x08 0=0x00 -0=0x80 -0x1p-10=0x80 -0x1p-9=0x81
e4m3     0x1p-149=0x00 -0x1p-149=0x80
# FNUZ: 248 ties to 256, past max, so saturates to 240; inf and NaN give NaN 0x80; no -0
e4m3fnuz 240=0x7f -240=0xff 0x1.e00002p+7=0x7f 0x1.effffep+7=0x7f 248=0x7f -248=0xff 232=0x7e 1e30=0x7f
e4m3fnuz -1e30=0xff inf=0x80 -inf=0x80 nan=0x80 0=0x00 -0=0x00 0x1p-10=0x01 0x1p-11=0x00 -0x1p-11=0x00
e4m3fnuz -0x1p-10=0x81 0x1.8p-10=0x02 0x1.ep-8=0x08 0x1.dffffep-8=0x07 0x1p-7=0x08 1.0625=0x40
e4m3fnuz 0x1.10001p+0=0x41
# e5m2: 61440 ties to 65536 (inf), so saturates to 57344; 53248 ties to even 49152; inf saturates
e5m2     57344=0x7b -57344=0xfb 0x1.c00002p+15=0x7b 0x1.dffffep+15=0x7b 61440=0x7b -61440=0xfb 53248=0x7a
e5m2     1e30=0x7b inf=0x7b -inf=0xfb nan=0x7e -nan=0x7e 0x1p-16=0x01 0x1p-17=0x00 -0x1p-17=0x80
e5m2     0x1.8p-16=0x02 0x1.8p-15=0x03 0x1.cp-15=0x04 0x1.bffffep-15=0x03 0x1p-14=0x04 0=0x00 -0=0x80
e5m2     1.125=0x3c 0x1.20001p+0=0x3d
e5m2fnuz 57344=0x7f -57344=0xff 0x1.c00002p+15=0x7f 0x1.dffffep+15=0x7f 61440=0x7f -61440=0xff 53248=0x7e
e5m2fnuz 1e30=0x7f inf=0x80 -inf=0x80 nan=0x80 0x1p-17=0x01 0x1p-18=0x00 -0x1p-18=0x00 0x1.8p-17=0x02
e5m2fnuz 0x1.cp-16=0x04 0x1p-15=0x04 -0=0x00
# FP4: every tie (0.25 0.75 1.25 1.75 2.5 3.5 5 7) and some ±ulp; 7 saturates to 6; NaN gives 6
# (no NaN in FP4), inf saturates, -0 and negative underflow keep the sign
e2m1     0=0x00 -0=0x08 0.25=0x00 0x1.000002p-2=0x01 0.5=0x01 0x1.7ffffep-1=0x01 0.75=0x02 1=0x02
e2m1     1.25=0x02 1.5=0x03 1.75=0x04 2.5=0x04 3=0x05 0x1.bffffep+1=0x05 3.5=0x06 5=0x06
e2m1     0x1.3ffffep+2=0x06 0x1.400002p+2=0x07 6=0x07 0x1.800002p+2=0x07 7=0x07 1e30=0x07 inf=0x07
e2m1     -inf=0x0f nan=0x07 -0.25=0x08 -0.75=0x0a -5=0x0e -7=0x0f
EOF
for f in e4m3 e4m3fnuz e5m2 e5m2fnuz e2m1; do
    awk -v f=$f '$1 == f { for (i = 2; i <= NF; i++) print $i }' "$tmp/bounds" | tr = ' ' >"$tmp/want"
    cut -d' ' -f1 "$tmp/want" >"$tmp/in"
    run $K codec $f <"$tmp/in"
    cut -d' ' -f1,2 "$tmp/out" >"$tmp/got"
    if [ $rc -eq 0 ] && cmp -s "$tmp/want" "$tmp/got"; then
        ok "encode: $(wc -l <"$tmp/want") $f boundary values give their codes"
    else bad "encode $f (exit $rc) $(head -c 200 "$tmp/err"): $(paste -d' ' "$tmp/want" "$tmp/got" |
        awk '$1 != $3 || $2 != $4 { printf "%s want %s got %s; ", $1, $2, $4 }' | head -c 600)"; fi
done
run $K codec e4m3 --fp8 fnuz 248 -0 inf
[ "$(cut -d' ' -f2 "$tmp/out" | tr '\n' ' ')" = "0x7f 0x00 0x80 " ] && ok "encode: e4m3 --fp8 fnuz is e4m3fnuz" \
    || bad "encode: e4m3 --fp8 fnuz: $(cat "$tmp/out" "$tmp/err" | tr '\n' ' ')"

# ml_dtypes, where installed, as an independent oracle: every code decoded, and a dense sweep of fp32
# values encoded (every value, every midpoint, ±1 fp32 ulp of each, 4000 seeded random values over the
# format's binades, subnormals and a few below).  Only |x| <= max is compared: ml_dtypes' astype does
# not saturate (465 -> NaN in e4m3fn), so overflow, inf and NaN are left to the boundary table above.
if python3 -c 'import numpy, ml_dtypes' 2>/dev/null; then
    cat >"$tmp/oracle.py" <<'PY'
import math, random, subprocess, sys
import numpy as np, ml_dtypes as md
def kgate(args, stdin=None):
    out = subprocess.run([sys.argv[1], "codec", *args], input=stdin, capture_output=True, text=True, check=True)
    return [l.split() for l in out.stdout.splitlines()]
def same(a, b): return math.isnan(a) and math.isnan(b) or a == b and math.copysign(1, a) == math.copysign(1, b)
fmts = {"e4m3": md.float8_e4m3fn, "e5m2": md.float8_e5m2, "e4m3fnuz": md.float8_e4m3fnuz,
        "e5m2fnuz": md.float8_e5m2fnuz, "e2m1": md.float4_e2m1fn, "e8m0": getattr(md, "float8_e8m0fnu", None)}
rng = random.Random(1129)
for f, dt in fmts.items():
    if dt is None: print(f"skip oracle: this ml_dtypes has no float8_e8m0fnu"); continue
    ml = np.arange(16 if f == "e2m1" else 256, dtype=np.uint8).view(dt).astype(np.float32).tolist()
    got = [float(np.float32(w[1])) for w in kgate([f, "--decode-all"])]
    bad = [f"0x{c:02x} kgate {g} ml_dtypes {w}" for c, (g, w) in enumerate(zip(got, ml)) if not same(g, w)]
    if len(got) != len(ml) or bad: print(f"bad oracle decode {f}: {len(got)} codes, {len(bad)} differ: {'; '.join(bad[:5])}")
    else: print(f"ok oracle decode: all {len(ml)} {f} codes equal ml_dtypes.{dt.__name__}'s")
    if f == "e8m0": continue
    fin = sorted(v for v in ml if math.isfinite(v))
    mx, tiny = fin[-1], min(v for v in fin if v > 0)
    mids = [(a + b) / 2 for a, b in zip(fin, fin[1:]) if a != b]
    xs = np.array(fin + mids, dtype=np.float32)
    xs = np.concatenate([xs, np.nextafter(xs, np.float32(np.inf)), np.nextafter(xs, np.float32(-np.inf))])
    lo, hi = math.frexp(tiny)[1] - 4, math.frexp(mx)[1] - 1
    rnd = [rng.choice((-1, 1)) * (1 + rng.getrandbits(23) / 2**23) * 2.0**rng.randint(lo, hi) for _ in range(4000)]
    xs = np.concatenate([xs, np.array(rnd, dtype=np.float32)])
    xs = xs[np.abs(xs) <= mx].tolist()                    # in range only: ml_dtypes does not saturate
    out = kgate([f], "".join(x.hex() + "\n" for x in xs))
    mc = np.array(xs, dtype=np.float32).astype(dt).view(np.uint8).tolist()
    bad = [f"{x.hex()} kgate {w[1]} ml_dtypes 0x{m:02x}" for x, w, m in zip(xs, out, mc)
           if w[0] != x.hex() or int(w[1], 16) != m]
    if len(out) != len(xs) or bad: print(f"bad oracle encode {f}: {len(out)} of {len(xs)} answered, {len(bad)} differ: {'; '.join(bad[:5])}")
    else: print(f"ok oracle encode: {len(xs)} in-range fp32 values (|x| <= {mx:g}; {len(fin)} values, {len(mids)} midpoints, ±1 ulp, "
                f"{sum(abs(r) <= mx for r in rnd)} random) encode to ml_dtypes.{dt.__name__}'s codes")
PY
    python3 "$tmp/oracle.py" "$K" >"$tmp/oracle" 2>"$tmp/err"; rc=$?
    while read -r verdict line; do
        case $verdict in ok) ok "$line" ;; skip) skip "$line" ;; *) bad "$line" ;; esac
    done <"$tmp/oracle"
    [ $rc -eq 0 ] || bad "the ml_dtypes oracle failed (exit $rc): $(tail -c 600 "$tmp/err")"
else
    skip "ml_dtypes oracle: python3 cannot import numpy and ml_dtypes (.ci/run pip-installs them)"
fi

echo "== every planted fault is caught by its gate (full and sampled checks, every dtype)"
for shape in 300x260x70 1500x1300x1200; do
    for dt in f32 f16 bf16; do
        for fault in tile:worst-tile tail:allclose nan:nan-inf bias:bias drop:allclose \
                     row:allclose unwritten:written; do
            kind=${fault%%:*} gate=${fault#*:}
            expect 1 "--inject $kind, $dt $shape" $K gemm --device cpu --dtype $dt --shape $shape \
                --inject $kind
            has "$tmp/out" "FAIL $gate \(check\)" "--inject $kind, $dt $shape: '$gate' names the fault"
            if grep -E "^gemm " "$tmp/out" | grep -vqE " FAIL .* - +- +-$"; then
                bad "--inject $kind, $dt $shape: a row passed or printed a time"
            fi
        done
    done
done
expect 1 "--inject tile, bwd: every output fails" $K gemm --device cpu --shape 200x300x100 --bwd --inject tile
n=$(grep -c "FAIL worst-tile" "$tmp/out")
[ "$n" -eq 3 ] && ok "--inject tile, bwd: C, dA and dB each fail worst-tile" || bad "bwd inject: $n of 3 outputs failed"
expect 1 "--inject tile names the tile" $K gemm --device cpu --shape 1000x1000x1000 --inject tile
has "$tmp/out" "worst tile \(3,3\), rows 384\.\.511 cols 384\.\.511: SNR 0\.0 dB" "the zeroed tile is named by coordinates"
expect 1 "--inject outside, gemm" $K gemm --device cpu --shape 300x260x70 --inject outside
has "$tmp/out" "FAIL in-bounds \(check\)" "--inject outside: 'in-bounds' names the fault"
expect 1 "--inject race with --repeat 3" $K gemm --device cpu --shape 300x260x70 --repeat 3 --inject race
has "$tmp/out" "FAIL determinism \(check\): run 2 of 3 differs from run 1 first at element \(150,130\)" \
    "--inject race: the first differing run and element are named"

echo "== grouped GEMM and attention: every planted fault caught by its gate (full and sampled checks)"
# inject_op FAULT:GATE DESCRIPTION ARGS... : the fault makes the case fail, naming the gate, with no time
inject_op() {
    local kind=${1%%:*} gate=${1#*:} desc=$2
    shift 2
    local extra=""
    [ "$kind" = race ] && extra="--repeat 2"
    expect 1 "--inject $kind, $desc" $K "$@" --device cpu --inject $kind $extra
    has "$tmp/out" "FAIL $gate \(check\)" "--inject $kind, $desc: '$gate' names the fault"
    if grep -E "^(grouped|attn) " "$tmp/out" | grep -E " FAIL " | grep -qvE " - +- +-$"; then
        bad "--inject $kind, $desc: a failed row printed a time"
    fi
}
faults="tile:worst-tile tail:allclose nan:nan-inf bias:bias drop:allclose row:allclose unwritten:written
        outside:in-bounds group:group race:determinism"
for f in $faults; do
    inject_op $f "grouped bf16 bwd (full)" grouped --groups 0,77,1,300,0,130 --shape 96x70 --bwd
    inject_op $f "grouped f16 NN (sampled)" grouped --dtype f16 --layout NN --groups 0,1000,1,700 --shape 1300x1200
    inject_op $f "attn bf16 causal GQA bwd (full)" attn --seq 113:203 --heads 4:2 --dim 64 --causal --bwd
    inject_op $f "attn f16 varlen (sampled)" attn --dtype f16 --seqlens 3000,700:900 --heads 8:2 --dim 64 --causal
done
inject_op mask:allclose "attn bf16 causal bwd" attn --seq 113:203 --heads 4:2 --dim 64 --causal --bwd
inject_op mask:allclose "attn f16 varlen causal" attn --dtype f16 --seqlens 0,37,130:70,5:0 --heads 4:2 --dim 80 --causal
expect 1 "--inject group names the group" $K grouped --device cpu --groups 0,77,1,300,0,130 --shape 96x70 --inject group
has "$tmp/out" "FAIL group \(check\): worst group 3 of 6, rows 78\.\.377" "the wrong group is named by index and rows"
has "$tmp/out" "FAIL group \(check\): worst group 3 of 6, rows 78\.\.377: .*; its largest error [0-9.]+ at \(([0-9]+),[0-9]+\), tile \([0-9]+,[0-9]+\)$" \
    "and the group's largest error, with its tile"
# ... and no clean run fails them for want of averaging: a tile's (group's) need is at most lp's SNR
# over the whole output.  On seed 46 this row's sampled dQ tile (9,1) holds one row with signal, where
# lp's SNR is one draw (>= 50 dB); a correct dQ fell 13.9 dB below it there (this CPU candidate; the
# H200's fused kernel 10.4) and failed worst-tile before the bound (2026-12-04).
expect 0 "worst-tile: a sampled tile with one row of signal is held to at most lp's SNR over the output (seed 46)" \
    $K attn --device cpu --dtype bf16 --seqlens 0:64,7:300,900:2048,1,300:0,65:4000,700:129 --heads 8 --dim 128 \
    --bwd --seed 46

echo "== low precision: every fault attributed to its stage (quantize-only kernel, scales, kernel math)"
# stage_is FAULT CASE... : the case fails with exactly the stage lines given after '--'
lp_fault() {
    local kind=$1 gate=$2 stage=$3
    shift 3
    expect 1 "--inject $kind, $*" $K "$@" --device cpu --inject $kind
    has "$tmp/out" "FAIL $gate \(check\)" "--inject $kind, $*: the $gate gate fires"
    has "$tmp/out" "stage: $stage:" "--inject $kind, $*: attributed to $stage"
    if grep -E "stage: " "$tmp/out" | grep -vq "stage: $stage:"; then
        bad "--inject $kind, $*: blamed another stage too: $(grep 'stage: ' "$tmp/out")"
    fi
}
for dt in "e4m3 --scaling tensor" "e4m3 --scaling row" "e4m3 --scaling block" "e5m2 --scaling block --out f32" \
          "e4m3 --fp8 fnuz --scaling row" "e5m2 --fp8 fnuz --scaling tensor" "mxfp8" "mxfp8e5m2 --mx-rule up" \
          "mxfp4" "mxfp4 --mx-rule up --out f32"; do
    lp_fault scale scale scale gemm --dtype $dt --shape 300x260x333
    lp_fault quant conversion conversion gemm --dtype $dt --shape 300x260x333
done
lp_fault scale scale scale grouped --dtype mxfp8 --groups 0,130,1,200 --shape 96x300
lp_fault quant conversion conversion grouped --dtype e4m3 --scaling block --groups 0,130,1,200 --shape 96x300
lp_fault group group "kernel math" grouped --dtype e4m3 --scaling row --groups 0,130,1,200 --shape 96x300
# A dropped-values bug (one element in 64 zeroed: ~18 dB) fails the SNR gate of E4M3 and E5M2
# and the baseline of every format; a narrow accumulator (2^-6 relative noise, ~41 dB) passes
# the E4M3 gate but not the baseline: only --trades-precision waives that.
lp_fault drop snr "kernel math" gemm --dtype e4m3 --scaling row --shape 1000x520x256
lp_fault drop baseline "kernel math" gemm --dtype mxfp4 --shape 1000x520x256
lp_fault nan nan-inf "kernel math" gemm --dtype mxfp8 --shape 300x260x333
lp_fault unwritten written "kernel math" gemm --dtype e5m2 --scaling row --shape 300x260x333
lp_fault precision baseline "kernel math" gemm --dtype e4m3 --scaling block --shape 1000x520x256
has "$tmp/out" "FAIL baseline .*[0-9.]+ dB apart, at most 3 below" "baseline: the detail says how far apart"
if grep -q "FAIL snr " "$tmp/out"; then bad "precision: the E4M3 snr gate fired too (the fault is meant to pass it)"; else ok "precision: the E4M3 snr gate passes it (the baseline, rounding and worst tile catch it)"; fi
expect 0 "--inject precision with --trades-precision passes" $K gemm --device cpu --dtype e4m3 --scaling block \
    --shape 1000x520x256 --inject precision --trades-precision "a narrow fp8 accumulator"
has "$tmp/out" "trades precision: .*narrow fp8 accumulator" "the waiver and its reason are printed"
# A zeroed 128x128 tile of a 2560x2560 output costs ~26 dB overall: above the E4M3 gate, so only
# the worst tile's SNR (and the baseline, waived here) can catch it.
lp_fault tile worst-tile "kernel math" gemm --dtype e4m3 --scaling row --shape 2560x2560x64 \
    --trades-precision "isolate the worst-tile gate"
if grep -qE "FAIL (snr|baseline) " "$tmp/out"; then bad "tile: a gate other than worst-tile fired"; else ok "tile: the overall SNR passes, the worst tile fails"; fi
run $K gemm --device cpu --dtype mxfp4 --shape 300x260x333 --inject quant --json
if python3 -c 'import json,sys; o=json.load(open(sys.argv[1]))["outputs"][0]; q=o["quant"]
assert o["verdict"]=="fail" and q["stages"]==["conversion"] and q["format"]=="e2m1", q' "$tmp/out" 2>"$tmp/py"
then ok "--json names the failing stage"; else bad "--json stages: $(cat "$tmp/py") $(head -c 300 "$tmp/out")"; fi
run $K gemm --device cpu --dtype e4m3 --scaling row --shape 512x512x512 --json
if python3 -c 'import json,sys; q=json.load(open(sys.argv[1]))["outputs"][0]["quant"]
assert 27 < q["snr_vs_unquantised_db"] < 31 and q["reference_arm_snr_db"] > 50, q' "$tmp/out" 2>"$tmp/py"
then ok "e4m3 rowwise: SNR vs the unquantised product ~29 dB (notes/lowprec.md: 28.6)"
else bad "e4m3 SNR vs unquantised: $(cat "$tmp/py")"; fi

echo "== clean runs pass every gate: every dtype and layout, tails, size-1 dims, backward"
for dt in f32 f16 bf16; do
    for lay in NN NT TN TT; do
        expect 0 "clean $dt $lay 67x129x131 bwd" $K gemm --device cpu --dtype $dt --layout $lay \
            --shape 67x129x131 --bwd
    done
done
for shape in 1x1x1 1x77x300 77x1x300 300x77x1 1x1x5000; do
    expect 0 "clean bf16 $shape bwd" $K gemm --device cpu --shape $shape --bwd
done
expect 0 "clean sampled bf16 1500x1300x1200" $K gemm --device cpu --shape 1500x1300x1200
has "$tmp/err" "tile-covering sample" "a large case is checked by the tile-covering sample"
expect 0 "clean --full bf16 1500x1300x1200" $K gemm --device cpu --shape 1500x1300x1200 --full
has "$tmp/err" "references on 1950000 of 1950000 elements \(all\)" "--full checks every element"
has "$tmp/out" "^gemm bf16 NT 1500x1300x1200 +C +pass +[a-z-]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +-$" \
    "a passed case prints its time"
for dt in f32 f16 bf16; do
    for lay in NN NT; do
        expect 0 "clean grouped $dt $lay bwd, empty and 1-row groups" $K grouped --device cpu --dtype $dt \
            --layout $lay --groups 0,65,1,130,0,64 --shape 70x33 --bwd
    done
done
expect 0 "clean grouped G=1" $K grouped --device cpu --groups 5 --shape 7x9 --bwd
expect 0 "clean grouped, every group empty but one" $K grouped --device cpu --groups 0,0,3,0 --shape 8x8 --bwd
expect 1 "--inject bias on empty groups' dB" $K grouped --device cpu --groups 0,0,3,0 --shape 8x8 --bwd --inject bias
has "$tmp/out" "FAIL group \(check\): worst group 0 of 4, rows 0\.\.7: its reference is exactly zero, and so must the output be" \
    "an empty group's dB must be exactly zero"
for dt in f16 bf16; do
    for a in "--seq 1:1 --heads 2:1 --dim 64" "--seq 239:1 --heads 4:2 --dim 128 --causal" \
             "--seq 1:239 --heads 4:4 --dim 80" "--seq 113:203 --heads 8:2 --dim 111 --causal" \
             "--seqlens 0,7,300,1,5:0,0:5,37:100 --heads 4:1 --dim 96 --causal" \
             "--batch 3 --seq 65:64 --heads 2:2 --dim 17 --causal"; do
        expect 0 "clean attn $dt $a --bwd" $K attn --device cpu --dtype $dt $a --bwd
    done
done
expect 0 "clean sampled attn" $K attn --device cpu --dtype bf16 --seqlens 3000,700:900 --heads 8:2 --dim 64 --causal
has "$tmp/err" "O: references on .* \(tile-covering sample\)" "a large attention output is checked on a sample"
# A product's rows and columns are gated on their own (worst-tile): on scaled inputs the row of least
# magnitude weighs nothing in its tile, so zeroing it passed every gate before 2026-12-05.
for c in "gemm --dtype bf16 --layout NN --shape 1023x1025x1021 --inputs scaled" "gemm --dtype e4m3 --scaling row --shape 512x512x512" \
         "grouped --groups 0,130,1,200 --shape 96x300 --inputs scaled"; do
    expect 1 "--inject small-row, $c" $K $c --device cpu --repeat 1 --inject small-row
    has "$tmp/out" "^    FAIL worst-tile \(check\): worst row [0-9]+: SNR 0\.0 dB, needs [0-9.]+ dB" "--inject small-row, $c: the row named by worst-tile"
    grep "^    FAIL" "$tmp/out" | grep -vq -E "FAIL (worst-tile|checksum)" && bad "--inject small-row, $c: another gate fired: $(grep '^    FAIL' "$tmp/out" | cut -c1-60)" \
        || ok "--inject small-row, $c: worst-tile sees it, and no gate but it and checksum (which sums that row too)"
done
# Every row's and column's sum is checked over all its elements (checksum): one element per tile, off the
# checked rows and columns, 16 x the output's rms off (--inject tilepos) passes every other gate.
sampled="references on [0-9]* of [0-9]* elements \(tile-covering sample\)" \
alone_on_each tilepos "checksum (check): worst \(row\|column\) [0-9]*: sum .*, exact .*, off by .*, allowed " \
    "gemm --dtype bf16 --layout NN --shape 1500x1500x1000" "gemm --dtype f32 --layout TN --shape 1300x1300x1300" \
    "grouped --dtype f16 --groups 0,700,1,1300,0,900 --shape 1024x1024" "gemm --dtype f16 --shape 2100x1100x1000 --bwd"
expect 0 "checksum: a clean sampled gemm" $K gemm --device cpu --dtype bf16 --layout NN --shape 1500x1500x1000 --repeat 1 --json
python3 -c 'import json,sys
g=json.loads(open(sys.argv[1]).read())["outputs"][0]["gates"]["checksum"]
assert g["pass"] and 0 < g["value"] < 0.5 and g["limit"] == 1, g' "$tmp/out" 2>"$tmp/py" \
    && ok "checksum: a clean sampled gemm sums within half its allowance" || bad "checksum json: $(cat "$tmp/py")"
for c in "attn --seq 64 --heads 2 --dim 16" "gemm --dtype e4m3 --scaling row --shape 64x64x64"; do
    expect 2 "--inject tilepos on $c" $K $c --device cpu --inject tilepos
    one_line "--inject tilepos on $c"
    expect 0 "checksum on $c" $K $c --device cpu --repeat 1 --json
    python3 -c 'import json,sys
g=json.loads(open(sys.argv[1]).read())["outputs"][0]["gates"]["checksum"]
assert g["pass"] and g["value"] is None, g' "$tmp/out" 2>"$tmp/py" && ok "checksum on $c: not gated" || bad "checksum on $c: $(cat "$tmp/py")"
done
# Attention's gradients are summed over every element too (checksum): four identities of the softmax's
# algebra (the column sums of dK and dV; Q^T dQ = dK^T K; V^T dV = O^T dO), each sum within 10 spreads
# of its rounding noise.  One element per tile off the sample (--inject tilepos) fails dQ, dK and dV
# there alone; O and LSE have no such sum, and their fault stays unseen.
c="attn --dtype bf16 --seqlens 3000,700:900 --heads 8:2 --dim 64 --causal --bwd"
expect 1 "--inject tilepos, $c" $K $c --device cpu --repeat 1 --inject tilepos
for o in dQ dK dV; do
    has "$tmp/out" "^attn .* bwd $o +FAIL +checksum " "--inject tilepos on attention: $o fails checksum"
done
[ "$(grep -c '^    FAIL' "$tmp/out")" -eq 3 ] && [ "$(grep -c '^    FAIL checksum (check): worst identity: .*: off by .*, its rounding noise .* spreads, allowed 10; [0-9]* sums' "$tmp/out")" -eq 3 ] \
    && ok "--inject tilepos on attention: checksum alone fails, on each gradient, naming the identity" \
    || bad "--inject tilepos on attention: $(grep '^    FAIL' "$tmp/out" | cut -c1-100)"
has "$tmp/out" "^attn .* bwd O +pass " "--inject tilepos on attention: O has no identity (its fault is not seen)"
has "$tmp/err" "dQ: references on [0-9]* of [0-9]* elements \(tile-covering sample\)" "--inject tilepos on attention: a sampled check"
for c in "attn --dtype bf16 --seqlens 0,7,300,1,5:0,0:5,37:100 --heads 4:1 --dim 96 --causal --bwd" \
         "attn --dtype f16 --batch 2 --seq 200:333 --heads 6:3 --dim 64 --bwd" \
         "attn --dtype bf16 --seqlens 3000,700:900 --heads 8:2 --dim 64 --causal --bwd --inputs scaled"; do
    expect 0 "checksum on $c" $K $c --device cpu --repeat 1 --json
    python3 -c 'import json,sys
for o in json.loads(open(sys.argv[1]).read())["outputs"]:
    g=o["gates"]["checksum"]
    if o["name"] in ("O", "LSE"): assert g["pass"] and g["value"] is None, (o["name"], g)
    else: assert g["pass"] and 0 < g["value"] < 0.5 and g["limit"] == 1, (o["name"], g)' "$tmp/out" 2>"$tmp/py" \
        && ok "checksum on $c: each gradient within half its limit, O and LSE not gated" || bad "checksum on $c: $(cat "$tmp/py")"
done
# The identities' noise model against a candidate that rounds as the GPU kernels do
# (KGATE_TEST_GPU_ROUNDING=1: P and dS rounded to the dtype, D summed in another order than dP; =2: dQ's
# dP summed in reverse too, as a two-pass kernel's dQ sees another dS than its dK).  On the H200 the
# f16 one-key sequence failed at 2681 spreads before the subnormal floor; the others are its regimes:
# a 1x1 case and a one-hot softmax (dS pure rounding), 3 keys (few terms), a 1-token sequence in f16.
for h in 1 2; do
    for c in "attn --dtype bf16 --seq 1:1 --heads 4:2 --dim 64 --causal --bwd" \
             "attn --dtype f16 --seq 799:3 --heads 4:1 --dim 64 --causal --bwd" \
             "attn --dtype f16 --seqlens 0:64,7:300,900:2048,1,300:0,65:4000,700:129 --heads 8 --dim 40 --bwd" \
             "attn --dtype bf16 --seqlens 0,7,300,1,65 --heads 8:1 --dim 128 --causal --scale 100 --bwd"; do
        expect 0 "GPU-like rounding ($h), $c" env KGATE_TEST_GPU_ROUNDING=$h $K $c --device cpu --repeat 1 --json
        python3 -c 'import json,sys
for o in json.loads(open(sys.argv[1]).read())["outputs"]:
    g=o["gates"]["checksum"]
    assert o["name"] in ("O", "LSE") or (g["pass"] and g["value"] < 0.5), (o["name"], g)' "$tmp/out" 2>"$tmp/py" \
            && ok "GPU-like rounding ($h), $c: each gradient within half its limit" || bad "GPU-like rounding ($h), $c: $(cat "$tmp/py")"
    done
done
# Off the sampled rows, each row is checked on columns of its own, the rows taking turns over column
# groups (heads, for attention): a 16 x 16 fragment there is seen.  Before 2026-12-05 every such row
# was checked on the same columns (one seeded head): this fault passed O's gates on 3 of 4 seeds.
run $K attn --device cpu --seq 2048 --heads 8 --dim 64 --inject fragment --seeds 4
has "$tmp/out" "^  attn bf16 b1 s2048:2048 h8:8 d64 +0/4 FAIL" "--inject fragment on a sampled attention forward: failed on each of 4 seeds"
[ "$(grep -c "^    FAIL allclose (check): [0-9]* of [0-9]* checked" "$tmp/out")" -eq 8 ] \
    && grep -q "tile-covering sample" "$tmp/err" && ok "--inject fragment: allclose fails O and LSE on every seed, on a sample" \
    || bad "--inject fragment: $(grep -c "FAIL allclose" "$tmp/out") allclose failures, want 8"
expect 1 "--inject fragment on a sampled gemm" $K gemm --device cpu --shape 1500x1500x1000 --inject fragment
has "$tmp/out" "^    FAIL allclose \(check\)" "--inject fragment on a sampled gemm: allclose sees it"
expect 2 "--inject fragment on attention of 32 heads (a row checks one head: 16 rows, 16 heads)" $K attn --device cpu \
    --seq 64 --heads 32 --dim 16 --inject fragment
one_line "--inject fragment on attention of 32 heads"
expect 2 "--inject small-row on attn" $K attn --device cpu --seq 64 --heads 2 --dim 16 --inject small-row
one_line "--inject small-row on attn"
# The inputs' guard bands are checked after every run too (in-bounds): a store through an input's
# pointer past its end.  --inject input-outside plants one such byte, as read back, in the arm it targets.
IO=("gemm --shape 64x48x40 --bwd" "attn --seq 64:80 --heads 2:1 --dim 16 --causal --bwd" "grouped --dtype mxfp8 --groups 0,65,1 --shape 70x96")
G0="in-bounds (check): 0 bytes of the [0-9]*-byte guard bands before and after the output were written"
# Each names the first buffer hit (gemm's A, attention's Q, grouped's group offsets: upload order).
IN_FIRST=(A Q "group offsets")
for i in 0 1 2; do
    alone_on_each input-outside "$G0, 1 of the guard bands of the inputs and scratch buffers, and 0 of the inputs themselves (the first band written: around ${IN_FIRST[i]})$" "${IO[i]}"
done
# ... and their contents too: a store through an input's pointer inside it (--inject input-inside: one bit
# of the first input's middle byte, as read back).
for i in 0 1 2; do
    alone_on_each input-inside "$G0, 0 of the guard bands of the inputs and scratch buffers, and 1 of the inputs themselves (the first byte changed: byte [0-9]* of ${IN_FIRST[i]})$" "${IO[i]}"
done
expect 1 "compare --inject input-outside" $K compare gemm --device cpu --shape 64x48x40 --variant io -D X=1 --rounds 2 \
    --inject input-outside --ledger "$tmp/io.ledger"
[ "$(grep -c " pass " "$tmp/out")" -eq 2 ] && [ "$(grep -c "FAIL in-bounds (check)" "$tmp/out")" -eq 1 ] \
    && ok "compare --inject input-outside: the candidate fails in-bounds, the reference and its copy pass" \
    || bad "compare --inject input-outside: $(grep -E ' pass |FAIL' "$tmp/out" | cut -c1-80)"
# A write past an input by the timed launches alone (--inject input-timed): one arm's re-check after
# timing fails in-bounds; in a compare the interleaved timing names no arm, so the case fails with a
# line that says so, and the arms' re-checks pass (before 2026-12-05 the first arm re-checked, the
# reference, was blamed).
expect 1 "--inject input-timed" $K gemm --device cpu --shape 64x48x40 --inject input-timed
has "$tmp/out" "^    FAIL in-bounds \(re-check after timing\): .*, 1 of the guard bands of the inputs and scratch buffers, and 0 of the inputs themselves \(the first band written: around A\)$" \
    "--inject input-timed: the re-check after timing fails in-bounds, around A"
expect 1 "compare --inject input-timed" $K compare gemm --device cpu --shape 64x48x40 --variant it -D X=1 --rounds 2 \
    --inject input-timed --ledger "$tmp/it.ledger"
[ "$(grep -c " pass " "$tmp/out")" -eq 3 ] && [ "$(grep -c FAIL "$tmp/out")" -eq 1 ] \
    && ok "compare --inject input-timed: no arm's gates are blamed (three passes)" || bad "compare --inject input-timed: $(grep -E ' pass |FAIL' "$tmp/out" | cut -c1-80)"
has "$tmp/out" "^gemm bf16 NT 64x48x40 +- +FAIL +the timed launches wrote into the inputs \(stderr\); no arm named$" \
    "compare --inject input-timed: the table's row for the case"
has "$tmp/err" "^kgate: gemm bf16 NT 64x48x40: the timed launches wrote into the inputs \(bytes of guard bands: [1-9][0-9]*, of inputs: 0; the first around A\); the case fails$" \
    "compare --inject input-timed: the case fails, with a line that names the buffer"
python3 -c 'import json,sys
v=[json.loads(l)["verdict"] for l in open(sys.argv[1])]
assert v == ["fail"] * 3, v' "$tmp/it.ledger" 2>"$tmp/py" && ok "compare --inject input-timed: each arm's ledger line says fail" || bad "input-timed ledger: $(cat "$tmp/py")"
has "$tmp/out" "; 1 case failed: the timed launches wrote into the inputs;" "compare --inject input-timed: the summary counts it"
# Off a sample's checked elements, a NaN or inf passes only in a row whose checked reference holds
# the same: 9000 rows that see no key, -inf in every head of LSE (sampled), pass; one NaN does not,
# though the checked -inf are many (it passed before 2026-12-05: want > 0 let anything through).
NK=(attn --device cpu --dtype bf16 --seq 12000:3000 --heads 8 --dim 64 --causal --repeat 1)
expect 0 "a sampled LSE with 72000 -inf (rows that see no key) passes" $K "${NK[@]}"
has "$tmp/err" "LSE: references on [0-9]+ of 96000 elements \(tile-covering sample\)" "... its LSE checked on a sample"
expect 1 "one NaN off the sample of that LSE fails" $K "${NK[@]}" --inject nan
has "$tmp/out" "FAIL nan-inf \(check\): output has 1 NaN and 71999 inf \([0-9]+ and [0-9]+ on checked elements\); reference 0 and [0-9]+; 1 off the checked elements in rows whose checked reference has no such value" \
    "... named as off the checked elements, where no checked reference vouches for it"
# --rtol/--atol apply to the outputs of the case's dtype: tightening a bf16 case to 0.005 halves
# O's tolerance and leaves LSE (fp32) at its own defaults, which a bf16 tolerance would loosen 100x.
tol_ratio() { python3 -c 'import json,sys
o = json.loads(sys.stdin.read())
print(" ".join("%s=%.9g" % (x["name"], x["gates"]["allclose"]["value"]) for x in o["outputs"]))'; }
a=$($K attn --device cpu --seq 256 --heads 2 --dim 32 --json 2>/dev/null | tol_ratio)
b=$($K attn --device cpu --seq 256 --heads 2 --dim 32 --json --atol 0.005 --rtol 0.005 2>/dev/null | tol_ratio)
oa=${a%% *}; ob=${b%% *}
[ "${a#* }" = "${b#* }" ] && [ "$oa" != "$ob" ] && ok "--atol/--rtol apply to O (bf16), not to LSE (fp32): $a, then $b" \
    || bad "tolerance options per output: default '$a', with --atol/--rtol 0.005 '$b'"
expect 0 "attn --repeat 3" $K attn --device cpu --seq 113:203 --heads 4:2 --dim 64 --causal --bwd --repeat 3 --wide
has "$tmp/out" "repeat: +3 runs per case" "the repeat count is printed"
n=$(grep -cE "^attn .* pass( .*)? 3 " "$tmp/out")
[ "$n" -eq 5 ] && ok "every attention output shows 3 bitwise-equal runs" || bad "--repeat 3: $n of 5 rows show 3 runs"
KGATE_TEST_ATOMICS=1 run $K attn --device cpu --seq 113:203 --heads 4:2 --dim 64 --bwd --repeat 3 --json
if [ $rc -eq 0 ] && python3 -c 'import json,sys
o=json.loads(open(sys.argv[1]).read())
assert all(x["repeat"]["atomics"] and x["repeat"]["runs"]==3 for x in o["outputs"])' "$tmp/out" 2>"$tmp/py"; then
    ok "kernels that declare atomics: the repeated runs counted, atomics noted"
else bad "atomics: exit $rc $(cat "$tmp/py")"; fi
# ... not compared bit for bit: a run that differs by one bit passes ...
KGATE_TEST_ATOMICS=1 expect 0 "atomics: a repeated run one bit off passes (not compared)" \
    $K attn --device cpu --seq 113:203 --heads 4:2 --dim 64 --bwd --repeat 3 --inject race
# ... but gated: a repeated run that leaves an element unwritten fails, and only that run is blamed.
KGATE_TEST_ATOMICS=unwritten expect 1 "atomics: a repeated run with an unwritten element fails" \
    $K attn --device cpu --seq 113:203 --heads 4:2 --dim 64 --bwd --repeat 3
has "$tmp/out" "^    FAIL written \(repeated run\): 1 of [0-9]+ output elements still hold the poison" "atomics: the repeated run's gates named it"
has "$tmp/out" "FAIL determinism \(repeated run\): the kernel declares atomics: each of 3 runs held to the gates; run 2 failed them" \
    "atomics: the determinism gate names the run that failed"
grep -q "(check)" "$tmp/out" && bad "atomics: run 1's check failed too" || ok "atomics: run 1 passed its check"
expect 0 "--json" $K gemm --device cpu --shape 100x100x100 --bwd --json
if python3 -c 'import json,sys
o=json.loads(open(sys.argv[1]).read())
assert o["verdict"]=="pass" and len(o["outputs"])==3
assert all(g["pass"] for x in o["outputs"] for g in x["gates"].values())
assert all(x["time"]["n"]>=1 for x in o["outputs"])' "$tmp/out" 2>"$tmp/py"; then ok "--json: one object, 3 gated and timed outputs"
else bad "--json: $(cat "$tmp/py")"; fi
expect 0 "--json attn bwd" $K attn --device cpu --seq 60:70 --heads 2 --dim 64 --causal --bwd --json
if python3 -c 'import json,sys
o=json.loads(open(sys.argv[1]).read())
x={y["name"]:y for y in o["outputs"]}
assert list(x)==["O","LSE","dQ","dK","dV"] and x["LSE"]["dtype"]=="f32"
assert x["O"]["time"]["n"]>=1 and x["LSE"]["timed_with"]=="O" and x["dK"]["timed_with"]=="dQ"
assert x["O"]["worst_segment_kind"]=="sequence"' "$tmp/out" 2>"$tmp/py"; then
    ok "--json attn: O and LSE timed as one launch, dQ/dK/dV as another"
else bad "--json attn: $(cat "$tmp/py")"; fi
expect 1 "--json of a failing case" $K gemm --device cpu --shape 100x100x100 --inject nan --json
if python3 -c 'import json,sys
o=json.loads(open(sys.argv[1]).read())
assert o["verdict"]=="fail" and not o["outputs"][0]["gates"]["nan-inf"]["pass"]
assert "time" not in o["outputs"][0]' "$tmp/out" 2>"$tmp/py"; then ok "--json failure: no time, nan-inf failed"
else bad "--json failure: $(cat "$tmp/py")"; fi
expect 0 "another seed passes" $K gemm --device cpu --shape 100x100x100 --seed 7 --dump "$tmp/seed7"
has "$tmp/out" "seed: +7" "the seed is printed"
expect 0 "the default seed, dumped" $K gemm --device cpu --shape 100x100x100 --dump "$tmp/seed42"
expect 0 "seed 7 again, dumped" $K gemm --device cpu --shape 100x100x100 --seed 7 --dump "$tmp/seed7b"
a7=$(sha256sum <"$tmp/seed7/A.npy"); a7b=$(sha256sum <"$tmp/seed7b/A.npy"); a42=$(sha256sum <"$tmp/seed42/A.npy")
[ "$a7" != "$a42" ] && [ "$a7" = "$a7b" ] && ok "a seed sets the inputs: seeds 7 and 42 differ, seed 7 twice is the same" \
    || bad "inputs by seed: 7 ${a7:0:12}, 7 again ${a7b:0:12}, 42 ${a42:0:12}"

echo "== trust: input distributions, a wrong scale index, rounding conformance, the oracle, seeds"
expect 2 "--inputs with an unknown name" $K gemm --device cpu --shape 64x64x64 --inputs gaussian
one_line "--inputs gaussian"
expect 0 "--inputs normal, bf16 NN bwd" $K gemm --device cpu --layout NN --shape 200x150x90 --bwd --inputs normal --json
python3 -c 'import json,sys
o=json.loads(open(sys.argv[1]).read()); assert o["inputs"]=="normal" and o["case"].endswith(" normal"), o["case"]' \
    "$tmp/out" 2>"$tmp/py" && ok "--json and the label name the distribution" || bad "--inputs in --json: $(cat "$tmp/py")"
expect 0 "low precision runs on scaled inputs by default" $K gemm --device cpu --dtype e4m3 --scaling row --shape 64x64x256
has "$tmp/out" "row->bf16 NT 64x64x256 scaled " "the low-precision label ends with 'scaled'"
for c in "gemm --layout TT --shape 129x131x300" "gemm --dtype f16 --layout TN --shape 130x257x64 --bwd" \
         "gemm --dtype f32 --layout NN --shape 127x255x33" "grouped --groups 0,65,1,130,0 --shape 70x200 --bwd" \
         "attn --seqlens 0,37,130:70,5:0 --heads 4:2 --dim 80 --causal --bwd" \
         "attn --dtype f16 --seq 239:1 --heads 2:1 --dim 64 --causal --bwd"; do
    expect 0 "clean on scaled inputs: $c" $K $c --device cpu --inputs scaled
done
# The class uniform inputs hide: a kernel that reads a neighbouring row's A scale.  Every row of
# a uniform input has amax within a bf16 rounding of 1, so all row scales agree and it passes;
# scaled inputs (the low-precision default) make it fail the SNR gate.  The shape the H200 uses.
expect 0 "uniform inputs hide a wrong row-scale index (1024x4096x4096)" $K gemm --device cpu --dtype e4m3 \
    --scaling row --shape 1024x4096x4096 --repeat 1 --inject scale-index --inputs uniform
expect 1 "scaled inputs catch it" $K gemm --device cpu --dtype e4m3 --scaling row --shape 1024x4096x4096 --repeat 1 \
    --inject scale-index
has "$tmp/out" "FAIL snr \(check\)" "a wrong row-scale index fails snr"
for c in "gemm --dtype e4m3 --scaling block --shape 300x260x1000" "gemm --dtype mxfp8 --shape 200x150x256" \
         "gemm --dtype mxfp4 --mx-rule up --shape 130x70x101" "grouped --dtype e4m3 --scaling row --groups 0,130,1,200 --shape 96x300" \
         "gemm --dtype e5m2 --fp8 fnuz --scaling block --out f32 --shape 300x260x333"; do
    lp_fault scale-index snr "kernel math" $c
done
expect 2 "--inject scale-index on tensor scaling" $K gemm --device cpu --dtype e4m3 --shape 64x64x64 --inject scale-index
one_line "scale-index needs more than one scale"
expect 2 "--inject scale-index on one group's tensor scaling" $K grouped --device cpu --dtype e4m3 --groups 64 \
    --shape 64x64 --inject scale-index
one_line "scale-index on one group needs more than one scale"
# A wrong expert index: per tensor and grouped, each group's B scale read from the next group's.
# Scaled inputs give each group's B its own magnitude (2^U(-2, 2), run.c in_stacked), so it fails
# the SNR gate that --trades-precision keeps: 4.7 dB, where the inputs without that factor gave
# 15.8 dB on this case, and an H200 kernel reading group 0's scale for every group passed (the
# gates --trades-precision waives were the ones to fire).  Uniform inputs hide it.
c="grouped --dtype e5m2 --scaling tensor --out f32 --groups 64,0,200,7 --shape 260x1024"
expect 0 "uniform inputs hide a wrong group-scale index" $K $c --device cpu --repeat 1 --inject scale-index --inputs uniform
lp_fault scale-index snr "kernel math" $c --trades-precision test
# A truncating epilogue: inside every element tolerance, and its signed errors cancel on
# zero-mean outputs, so the bias gate passes it; the rounding and sign-bias gates do not.
for c in "gemm --shape 300x260x70" "gemm --dtype f16 --layout TN --shape 257x129x65 --bwd --inputs scaled" \
         "grouped --layout NN --groups 0,77,1,300,0,130 --shape 96x70 --bwd" "gemm --dtype e4m3 --scaling row --shape 300x260x333"; do
    expect 1 "--inject round, $c" $K $c --device cpu --inject round
    has "$tmp/out" "FAIL rounding \(check\): [0-9]+ of the [0-9]+ elements farther" "--inject round, $c: rounding names it"
    has "$tmp/out" "FAIL sign-bias \(check\)" "--inject round, $c: sign-bias too"
    if grep -q "FAIL bias " "$tmp/out"; then bad "--inject round, $c: the signed bias gate fired (truncation should hide from it)"
    else ok "--inject round, $c: the signed bias gate does not see it"; fi
done
expect 2 "--inject round on an f32 output" $K gemm --device cpu --dtype f32 --shape 64x64x64 --inject round
one_line "round needs a 16-bit output"
has "$tmp/err" "--inject round needs a 16-bit output \(f16, bf16\)" "--inject round on f32: says why"
# ref.c's model of sm_90a's fp8 tensor cores (ACC_TC8, README "The fp8 tensor cores' sums"): the
# CPU candidate summing as it does (--cpu-sums sm90a) gives what an H200 gave, bit for bit: each
# sha256 below is that of the C.out.npy that `kgate gemm ARGS --dump` wrote on the H200 (seed 42,
# kernels.hip 3a2a55d0ff18, 2026-12-03).  The default fp32 sums must differ, or this could not fail.
while read -r sha args; do
    rm -rf "$tmp/tc8"
    expect 0 "--cpu-sums sm90a, $args" $K gemm $args --device cpu --cpu-sums sm90a --repeat 1 \
        --trades-precision test --dump "$tmp/tc8"
    got=$(sha256sum "$tmp/tc8/C.out.npy" 2>/dev/null | cut -c1-64)
    if [ "$got" = "$sha" ]; then ok "--cpu-sums sm90a, $args: the H200's output, bit for bit"
    else bad "--cpu-sums sm90a, $args: C.out.npy sha256 $got, the H200's $sha"; fi
    rm -rf "$tmp/tc8"
    run $K gemm $args --device cpu --repeat 1 --trades-precision test --dump "$tmp/tc8"
    got=$(sha256sum "$tmp/tc8/C.out.npy" 2>/dev/null | cut -c1-64)
    if [ -n "$got" ] && [ "$got" != "$sha" ]; then ok "--cpu-sums fp32, $args: not the H200's output"
    else bad "--cpu-sums fp32, $args: sha256 '$got' (the H200's is $sha)"; fi
done <<'TC8'
568c18d62b87d3f8aac6b4b7408d913af4265d63aaaf1e7a5b6eb74b619a15a2 --dtype e4m3 --scaling tensor --out f32 --shape 256x256x1024 --inputs normal
c689a826f8f1a36b69f5c8e8591edf38a19cd1b445ef0be5b3d337c52914bf6f --dtype e5m2 --scaling tensor --out f32 --shape 256x256x256 --inputs uniform
8c895eac8b131a9ba9f43f23e26b9da3a655c874c9a50bc8d7470b7914b7b3ab --dtype e5m2 --scaling tensor --out f32 --shape 256x256x32 --inputs normal
ee723ec6a6882a89645b92a3417fa13924bf45f849af102939b4798e62a67224 --dtype e4m3 --scaling row --out f32 --shape 256x256x256 --inputs normal
f8ea5c140ac46ae554e005915ffd705e9d091bfe0764e02f04e21e0e4eb77153 --dtype e4m3 --scaling block --out f32 --shape 256x256x256 --inputs normal
7f25856cd1bd68deada8e7120afda0a49af0bc171cf3eac1cd1d4612874d61c7 --dtype e4m3 --scaling tensor --out bf16 --shape 512x512x2048 --inputs normal
TC8
# Dense fp8 inputs: the tensor cores' truncating sums lean toward zero by ~0.007 ulp of bf16,
# more than fp32 sums' allowance (the H200's kernels failed sign-bias on them before it held the
# model's lean).  The H200's own outputs (the emulation) pass, leaning exactly as the model; a
# truncating epilogue on the same sums (--inject round) fails.
c="gemm --dtype e4m3 --shape 512x512x1024 --inputs normal"
expect 0 "dense e4m3, the H200's sums (--cpu-sums sm90a) pass sign-bias" $K $c --device cpu --cpu-sums sm90a \
    --repeat 1 --json
python3 -c 'import json,sys
o=json.loads(open(sys.argv[1]).read())["outputs"][0]; g=o["gates"]["sign-bias"]
tc=o["quant"]["tensor_core_model_sign_bias_ulps"]
assert g["pass"] and 0.004 < g["value"] < g["limit"] and tc == -g["value"], (g, tc)' "$tmp/out" 2>"$tmp/py" \
    && ok "dense e4m3: leans as the model (> 0.004 ulp) and within the limit" || bad "dense e4m3 lean: $(cat "$tmp/py")"
expect 1 "dense e4m3, the H200's sums, --inject round" $K $c --device cpu --cpu-sums sm90a --repeat 1 --inject round
has "$tmp/out" "FAIL sign-bias \(check\): mean\(\|out\| - \|ref\|\) -0\.5" "dense e4m3 --inject round: sign-bias names it"
expect 2 "--cpu-sums fp16" $K gemm --device cpu --dtype e4m3 --shape 8x8x8 --cpu-sums fp16
one_line "--cpu-sums fp16"
expect 2 "--cpu-sums on a GPU device" $K gemm --dtype e4m3 --shape 8x8x8 --cpu-sums sm90a
one_line "--cpu-sums on a GPU device"
expect 0 "the rounding gate decides most elements of a clean bf16 product" $K gemm --device cpu --shape 300x260x1000 --json
python3 -c 'import json,sys
o=json.loads(open(sys.argv[1]).read())["outputs"][0]["gates"]
assert o["rounding"]["value"]==0 and o["rounding"]["limit"]>1000 and o["sign-bias"]["value"] < o["sign-bias"]["limit"], o' \
    "$tmp/out" 2>"$tmp/py" && ok "clean: no element off RNE, sign-bias within its limit" || bad "rounding json: $(cat "$tmp/py")"
expect 1 "nan-inf counts -inf references as a count, not an underflow" $K attn --device cpu --dtype bf16 --seq 70:50 \
    --heads 2 --dim 32 --causal --inject nan
has "$tmp/out" "FAIL nan-inf \(check\): output has 1 NaN and 40 inf \(1 and 40 on checked elements\); reference 0 and 40" \
    "-inf LSE rows counted as 40 infs on both sides"
# The oracle: kgate's references against an independent float64 implementation (NumPy here).
D="$tmp/dump"
printf 'gemm --shape 64x48x40 --layout NN\nattn --seq 30:20 --heads 2 --dim 16 --causal --bwd\n' >"$tmp/two.txt"
i=0
for c in "gemm --dtype f32 --layout NN --shape 70x50x40 --bwd" "gemm --layout TT --shape 129x131x77 --bwd --inputs scaled" \
         "gemm --dtype f16 --layout TN --shape 1x300x77 --bwd" "gemm --shape 1500x1300x1200" \
         "grouped --layout NT --groups 0,77,1,130,0 --shape 96x70 --bwd --inputs normal" \
         "grouped --dtype f16 --layout NN --groups 63,0,129,1 --shape 70x33 --bwd" \
         "attn --seqlens 0,37,130:70,5:0 --heads 4:2 --dim 80 --causal --bwd --inputs scaled" \
         "attn --dtype f16 --seq 239:1 --heads 4:1 --dim 64 --causal --bwd" \
         "attn --dtype f16 --seqlens 3000,700:900 --heads 8:2 --dim 64 --causal" \
         "gemm --dtype e4m3 --scaling tensor --shape 200x150x96" "gemm --dtype e4m3 --scaling row --shape 200x150x96" \
         "gemm --dtype e4m3 --scaling block --shape 300x260x333" "gemm --dtype e5m2 --fp8 fnuz --scaling block --out f32 --shape 129x131x300" \
         "gemm --dtype e4m3 --fp8 fnuz --scaling tensor --shape 64x64x64" "gemm --dtype mxfp8 --shape 130x70x96" \
         "gemm --dtype mxfp8e5m2 --mx-rule up --shape 70x64x200" "gemm --dtype mxfp4 --mx-rule up --shape 130x70x101" \
         "grouped --dtype e4m3 --scaling block --groups 257,0,100,31 --shape 200x300" "grouped --dtype mxfp4 --groups 64,0,200,7 --shape 60x99"; do
    i=$((i + 1))
    expect 0 "--dump $c" $K $c --device cpu --repeat 1 --dump "$D/c$i"
done
[ -f "$D/c1/manifest.json" ] && [ -f "$D/c1/dA.ref_rows.npy" ] && ok "--dump writes a manifest and .npy files" || bad "--dump: $(ls "$D/c1")"
if python3 -c 'import numpy' 2>/dev/null; then
    run python3 bench/oracle.py --numpy "$D"/c*
    [ $rc -eq 0 ] && ok "oracle: every output of $i cases agrees with kgate's references: $(tail -1 "$tmp/out")" \
        || bad "oracle: exit $rc: $(grep -i disagree "$tmp/out" | head -5) $(head -c 300 "$tmp/err")"
    cp -r "$D/c2" "$D/bad"
    python3 -c 'import numpy as np,sys
p=sys.argv[1]+"/dA.ref_rows.npy"; a=np.load(p); a[5,7]+=1e-6*abs(a).max(); np.save(p,a)' "$D/bad"
    run python3 bench/oracle.py --numpy "$D/bad"
    [ $rc -eq 1 ] && grep -q "DISAGREE" "$tmp/out" && ok "oracle: one reference off by 1e-6 of the largest disagrees (exit 1)" \
        || bad "oracle on a planted reference error: exit $rc"
    expect 0 "all --dump: one directory per case" $K all --device cpu --shapes "$tmp/two.txt" --dump "$D/all"
    run python3 bench/oracle.py --numpy "$D/all"
    [ $rc -eq 0 ] && [ -f "$D/all/case-002/manifest.json" ] && ok "oracle over all's case-NNN directories: $(tail -1 "$tmp/out")" \
        || bad "oracle over all: exit $rc"
else
    skip "oracle: numpy not installed (.ci/run installs it)"
fi
expect 2 "--dump with --seeds" $K all --device cpu --shapes "$tmp/two.txt" --seeds 2 --dump "$D/x"
one_line "--dump with --seeds"
expect 2 "--dump with compare" $K compare gemm --device cpu --shape 64x64x64 --variant v -D X=1 --dump "$D/x"
expect 2 "--seeds 0" $K all --device cpu --shapes "$tmp/two.txt" --seeds 0
# Seeds: the suite on N seeds, and per case how many passed.
expect 0 "all --seeds 3" $K all --device cpu --shapes "$tmp/two.txt" --seeds 3
has "$tmp/out" "^seeds 42\.\.44: " "the seeds summary names the seeds"
has "$tmp/out" "attn bf16 b1 s30:20 h2:2 d16 causal bwd +3/3" "each case: passed on 3 of 3"
has "$tmp/out" "kgate: 2 cases on 3 seeds: 2 passed on every seed, 0 failed on some" "the seeds verdict line"
expect 1 "all --seeds 2 with a planted fault" $K all --device cpu --shapes "$tmp/two.txt" --seeds 2 --seed 7 --inject nan
has "$tmp/out" "gemm bf16 NN 64x48x40 +0/2 FAIL \(first on seed 7\)" "a failing case names its first failing seed"
# The CPU device's size limit: a vendor-sized attention case is a case for a GPU.
expect 0 "a case over the CPU device's 100 GFLOP: skipped there (exit 0)" \
    $K attn --device cpu --dtype bf16 --batch 4 --seq 4096 --heads 32 --dim 128
has "$tmp/out" "d128 +- +skip +1100 GFLOP: over the CPU device's 100 \(a case for a GPU\)" "the skip names the case's FLOPs and the limit"
expect 0 "a small attention case runs there" $K attn --device cpu --dtype bf16 --seq 96 --heads 2 --dim 64
has "$tmp/out" "1 case, 2 outputs: 2 passed" "the small case ran and passed"
expect 0 "a GEMM over the CPU device's 100 GFLOP (its backward counted): skipped there" \
    $K gemm --device cpu --shape 2048x2048x4096 --bwd
has "$tmp/out" "bwd +- +skip +103 GFLOP: over the CPU device's 100 \(a case for a GPU\)" "the GEMM's skip names its FLOPs"
expect 0 "grouped over 100 GFLOP: skipped" $K grouped --device cpu --groups 2048,2048,2048,2048 --shape 4096x2048
has "$tmp/out" "skip +137 GFLOP" "the grouped skip names its FLOPs"
# A skipped case writes no dump: kgate says so and removes the directories it made (its parents
# too), never one it found, even one named through a directory it made (new/../found).
BIG=(gemm --device cpu --shape 2048x2048x4096 --bwd)
expect 0 "--dump of a skipped case" $K "${BIG[@]}" --dump "$D/skipped/a/b"
has "$tmp/err" "^kgate: --dump .*/skipped/a/b: nothing written: no case reached its gates \(skipped or lost\); the directories this run made are removed$" \
    "--dump of a skipped case: said, and the directories it made removed"
one_line "--dump of a skipped case"
[ ! -e "$D/skipped" ] && ok "--dump of a skipped case: no directory left, parents included" || bad "--dump of a skipped case left $(find "$D/skipped")"
mkdir -p "$D/found"
expect 0 "--dump of a skipped case into a directory that exists" $K "${BIG[@]}" --dump "$D/new/../found"
has "$tmp/err" "nothing written: no case reached its gates \(skipped or lost\); the directories this run made are removed$" "--dump through a made directory: said"
[ -d "$D/found" ] && [ ! -e "$D/new" ] && ok "--dump: the directory it found kept, the one it made (new/) removed" \
    || bad "--dump: found $([ -d "$D/found" ] && echo kept || echo removed), new $([ -e "$D/new" ] && echo left || echo removed)"
touch "$D/found/old"
expect 0 "--dump of a skipped case into a directory with files" $K "${BIG[@]}" --dump "$D/found"
has "$tmp/err" "nothing written: no case reached its gates \(skipped or lost\)$" "--dump into a directory with files: said, nothing removed"
[ -f "$D/found/old" ] && ok "--dump: a file already there is left alone" || bad "--dump removed $D/found/old"
printf 'gemm --shape 2048x2048x4096 --bwd\ngemm --shape 64x48x40\n' >"$tmp/half.txt"
expect 0 "all --dump, one case skipped" $K all --device cpu --shapes "$tmp/half.txt" --repeat 1 --dump "$D/half"
has "$tmp/err" "^kgate: --dump .*/half: 1 of 2 cases written \(the rest skipped or lost\)$" "all --dump: the cases written counted"
[ -f "$D/half/case-002/manifest.json" ] && [ ! -e "$D/half/case-001" ] && ok "all --dump: the case that ran dumped, the skipped one not" \
    || bad "all --dump with a skip: $(ls "$D/half")"
expect 2 "a usage error leaves no --dump directory" $K gemm --device cpu --shape 64x64x64 --rtol 0.1 --dump "$D/never/a"
[ ! -e "$D/never" ] && ok "a usage error: no --dump directory made" || bad "a usage error left $D/never"

echo "== kgate diff: two --dump directories compared (equal, one ulp, a wrong tile, refusals)"
DD="$tmp/dumps.diff"   # a directory; "$tmp/diff" is a file of the codec checks above
DC="gemm --device cpu --shape 200x300x64 --repeat 1"
expect 0 "diff: dump A" $K $DC --dump "$DD/a"
expect 0 "diff: dump B, the same case and seed" $K $DC --dump "$DD/b"
expect 0 "diff: two identical CPU runs" $K diff "$DD/a" "$DD/b"
has "$tmp/out" "^C bf16 200x300: 100\.0000% bitwise equal \(60000 of 60000\); max 0 ulp; SNR A vs B inf dB" "diff: all bitwise equal, SNR inf"
has "$tmp/out" "vs reference: A [0-9.]+ dB, B [0-9.]+ dB \(60000 checked elements\)" "diff: each SNR against its reference"
has "$tmp/out" "^verdict: equal$" "diff: identical runs are equal"
# diffnpy DIR FILE R0 R1 C0 C1 MODE: edit rows R0..R1-1, cols C0..C1-1 of a float32 .npy in place:
# ulp adds one bf16 ulp to the bits (0x10000), junk writes seeded garbage in [-1, 1)
diffnpy() {
    python3 - "$@" <<'PY'
import random, struct, sys
d, f, r0, r1, c0, c1, mode = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:7]), sys.argv[7]
b = bytearray(open(d + "/" + f, "rb").read())
hl = b[8] | b[9] << 8
cols = int(bytes(b[10:10 + hl]).split(b"(")[1].split(b")")[0].split(b",")[1])
rnd = random.Random(1)
for i in range(r0, r1):
    for j in range(c0, c1):
        o = 10 + hl + 4 * (i * cols + j)
        if mode == "ulp": struct.pack_into("<I", b, o, struct.unpack_from("<I", b, o)[0] + 0x10000)
        else: struct.pack_into("<f", b, o, rnd.uniform(-1, 1))
open(d + "/" + f, "wb").write(b)
PY
}
cp -r "$DD/b" "$DD/ulp" && diffnpy "$DD/ulp" C.out.npy 150 151 10 11 ulp
expect 0 "diff: one element one ulp off" $K diff "$DD/a" "$DD/ulp"
has "$tmp/out" "^C bf16 200x300: 99\.9983% bitwise equal \(59999 of 60000\); max 1 ulp at \(150,10\)" "diff: one ulp, where"
has "$tmp/out" "^  worst tile \(1,0\), rows 128\.\.199 cols 0\.\.127: 1 of 9216 elements differ" "diff: the one-ulp tile named"
has "$tmp/out" "^verdict: within the precision of the dtype$" "diff: one ulp is within the precision of bf16"
cp -r "$DD/b" "$DD/tile" && diffnpy "$DD/tile" C.out.npy 128 200 128 256 junk
expect 1 "diff: a wrong tile" $K diff "$DD/a" "$DD/tile"
has "$tmp/out" "^  worst tile \(1,1\), rows 128\.\.199 cols 128\.\.255: 9216 of 9216 elements differ" "diff: the wrong tile named"
has "$tmp/out" "^verdict: different$" "diff: a wrong tile is different"
expect 1 "diff --json: a wrong tile" $K diff "$DD/a" "$DD/tile" --json
[ "$(wc -l <"$tmp/out")" -eq 1 ] && grep -q '"worst_tile":{"tile":\[1,1\],"rows":\[128,199\],"cols":\[128,255\],"differ":9216' "$tmp/out" \
    && grep -q '"verdict":"different"}$' "$tmp/out" && ok "diff --json: one object, the tile, the verdict" || bad "diff --json: $(head -c 600 "$tmp/out")"
# an f32 output whose elements move by -2..2 ulps: not within 1 ulp, within by the SNR rule
expect 0 "diff: f32 dump A" $K $DC --dtype f32 --dump "$DD/fa"
cp -r "$DD/fa" "$DD/fb" && python3 -c 'import struct,sys
p=sys.argv[1]+"/C.out.npy"; b=bytearray(open(p,"rb").read()); hl=b[8]|b[9]<<8
for k in range(60000): o=10+hl+4*k; struct.pack_into("<i",b,o,struct.unpack_from("<i",b,o)[0]+(k*3)%5-2)
open(p,"wb").write(b)' "$DD/fb"
expect 0 "diff: f32, elements up to 2 ulps off" $K diff "$DD/fa" "$DD/fb"
has "$tmp/out" "^C f32 200x300: .* max 2 ulp at " "diff: f32, the 2 ulps found"
has "$tmp/out" "^  within the precision of the dtype: SNR A vs B [0-9.]+ dB >= " "diff: within by the SNR rule"
# refusals: another case, seed, inputs; one line, exit 2
expect 0 "diff: a dump of another case" $K gemm --device cpu --shape 64x48x40 --repeat 1 --dump "$DD/other"
expect 2 "diff: dumps of two cases refused" $K diff "$DD/a" "$DD/other"
one_line "diff: two cases"
has "$tmp/err" "refused: different case: \"gemm bf16 NT 200x300x64\"" "diff: the refusal names the cases"
expect 0 "diff: a dump of another seed" $K $DC --seed 7 --dump "$DD/seed7"
expect 2 "diff: dumps of two seeds refused" $K diff "$DD/a" "$DD/seed7"
has "$tmp/err" "refused: different seeds: 42 in .*, 7 in " "diff: the refusal names the seeds"
cp -r "$DD/b" "$DD/inp" && diffnpy "$DD/inp" A.npy 0 1 0 1 junk
expect 2 "diff: an input that differs" $K diff "$DD/a" "$DD/inp"
one_line "diff: different inputs"
has "$tmp/err" "refused: input A differs \(sha256 " "diff: the refusal names the input and its digests"
# bad input: one line, exit 2, never a crash
expect 2 "diff: a missing directory" $K diff "$DD/a" "$DD/none"
one_line "diff: a missing directory"
mkdir -p "$DD/empty"
expect 2 "diff: a directory with no manifest" $K diff "$DD/a" "$DD/empty"
one_line "diff: no manifest"
cp -r "$DD/b" "$DD/trunc" && head -c 120 "$DD/b/manifest.json" >"$DD/trunc/manifest.json"
expect 2 "diff: a truncated manifest" $K diff "$DD/a" "$DD/trunc"
one_line "diff: a truncated manifest"
cp -r "$DD/b" "$DD/fmt" && sed -i 's/kgate-dump 2/kgate-dump 3/' "$DD/fmt/manifest.json"
expect 2 "diff: a dump of another format" $K diff "$DD/a" "$DD/fmt"
has "$tmp/err" "format \"kgate-dump 3\"" "diff: the other format named"
cp -r "$DD/b" "$DD/npy" && head -c 4000 "$DD/b/C.out.npy" >"$DD/npy/C.out.npy"
expect 2 "diff: a truncated .npy" $K diff "$DD/a" "$DD/npy"
one_line "diff: a truncated .npy"
printf 'gemm --shape 8x8x8\n' >"$DD/one.txt"
expect 0 "diff: an all --dump" $K all --device cpu --shapes "$DD/one.txt" --repeat 1 --dump "$DD/all"
expect 2 "diff: an all --dump directory, not a case's" $K diff "$DD/all" "$DD/all"
has "$tmp/err" "is an \`all --dump\` directory: compare its case-NNN directories" "diff: an all --dump directory named as such"
expect 0 "diff: all's case-001 with itself" $K diff "$DD/all/case-001" "$DD/all/case-001"
expect 2 "diff: one directory" $K diff "$DD/a"
expect 2 "diff: an option diff does not take" $K diff "$DD/a" "$DD/b" --seed 3
one_line "diff --seed"
echo "== --graph: refused on the CPU device; the graph path's planted faults pass eagerly"
# The graph path needs a GPU (its checks on the H200: README "The graph path"); here its refusals,
# its report and ledger fields on the eager path, and that its launch-path faults are harmless eagerly.
for cmd in "gemm --shape 64x64x64" "all --shapes $DD/one.txt" "noise gemm --shape 64x64x64" "selftest"; do
    expect 2 "--graph on the CPU device: $cmd" $K $cmd --device cpu --graph
    one_line "--graph on the CPU device: $cmd"
    has "$tmp/err" "^kgate: --graph: graphs need a GPU \(CUDA graphs or hipGraphs\); the CPU device has none$" \
        "--graph on the CPU device: $cmd: says why"
done
expect 2 "--graph means nothing to isa" $K isa --graph
one_line "--graph to isa"
expect 2 "--inject graph-diff without --graph" $K gemm --device cpu --shape 64x64x64 --inject graph-diff
one_line "--inject graph-diff without --graph"
has "$tmp/err" "plants its fault in the graph path's check: give --graph" "--inject graph-diff: names --graph"
for f in graph-alloc graph-sync; do
    expect 0 "--inject $f passes on the eager path" $K gemm --device cpu --shape 130x100x70 --inject $f --wide
    v="$(col "$tmp/out" "^gemm bf16 NT 130x100x70 " verdict) $(col "$tmp/out" "^gemm bf16 NT 130x100x70 " graph)"
    t=$(col "$tmp/out" "^gemm bf16 NT 130x100x70 " median-us)
    [ "$v" = "pass -" ] && [[ "$t" =~ ^[0-9]+(\.[0-9]+)?$ ]] && ok "--inject $f: the row passes, the graph column is '-', a time is printed ($t us)" \
        || bad "--inject $f: verdict and graph '$v', median-us '$t'"
done
has "$tmp/out" "^  path: +eager \(each launch queued as it is called; --graph: through a captured graph\)$" \
    "the header names the eager path"
expect 0 "--json on the eager path" $K gemm --device cpu --shape 64x64x64 --json
has "$tmp/out" '"path":"eager"' "--json: the case says which path ran"
has "$tmp/out" '"graph":\{"pass":true,"value":null,"limit":0\}' "--json: the graph gate is not gated eagerly"
expect 0 "a ledger kept on the eager path" $K gemm --device cpu --shape 64x64x64 --ledger "$DD/path.ledger"
has "$DD/path.ledger" '"path":"eager"' "the ledger line says which path ran"
has "$DD/path.ledger" '"conditions":"rtol -1 atol -1 full 0 repeat 1 trades-precision no"' \
    "an eager line's conditions read as before --graph existed (its cached verdicts still match)"
expect 0 "--help lists --graph" $K gemm --help
has "$tmp/out" "--graph +the graph path: each launch" "--help: --graph"
echo "== tolerances: looser needs --why"
expect 2 "--rtol 0.05 without --why" $K gemm --device cpu --shape 64x64x64 --rtol 0.05
one_line "--rtol without --why"
has "$tmp/err" "^kgate: command line: --rtol/--atol looser than the bf16 defaults \(rtol 0.01, atol 0.01\) need --why \"reason\"$" \
    "--rtol without --why: the command line named"
expect 2 "all --rtol 0.05 without --why" $K all --device cpu --shapes "$tmp/two.txt" --rtol 0.05
has "$tmp/err" "^kgate: command line: --rtol/--atol looser .* need --why \"reason\" \(.*two.txt:1: gemm bf16 NN 64x48x40\)$" \
    "all --rtol without --why: the command line named, then the first case it loosens"
one_line "all --rtol without --why"
expect 0 "--rtol 0.05 with --why" $K gemm --device cpu --shape 64x64x64 --rtol 0.05 --why "bf16 epilogue"
has "$tmp/out" "why: bf16 epilogue" "--why is printed in the report"
expect 0 "tighter --atol needs no --why" $K gemm --device cpu --shape 64x64x64 --atol 0.001
expect 1 "nontrivial: atol so large the reference is below it" $K gemm --device cpu --shape 64x64x64 \
    --atol 100 --rtol 0 --why "test"
has "$tmp/out" "FAIL nontrivial" "the nontrivial gate fires"
has "$tmp/out" "the case's doing, not the kernel's: an --atol below [0-9.]+" "nontrivial says the case is at fault, and the atol that judges it"

echo "== bad input: one clear line, exit 2 (3 with no runtime)"
bad_usage() { expect 2 "$1" "${@:2}"; one_line "$1"; }
bad_usage "no command"              $K
bad_usage "unknown command"         $K frobnicate
bad_usage "gemm without --shape"    $K gemm --device cpu
bad_usage "zero dimension"          $K gemm --device cpu --shape 0x5x5
bad_usage "negative dimension"      $K gemm --device cpu --shape -5x5x5
bad_usage "two dimensions"          $K gemm --device cpu --shape 4096x4096
bad_usage "four dimensions"         $K gemm --device cpu --shape 1x1x1x1
bad_usage "not a number"            $K gemm --device cpu --shape axbxc
bad_usage "trailing x"              $K gemm --device cpu --shape 4x4x
bad_usage "absurd dimension"        $K gemm --device cpu --shape 99999999999999999999x1x1
bad_usage "dimension over 2^20"     $K gemm --device cpu --shape 1048577x1x1
bad_usage "matrix over 2^30 elems"  $K gemm --device cpu --shape 1048576x1048576x1
bad_usage "unknown dtype"           $K gemm --device cpu --shape 8x8x8 --dtype fp64
bad_usage "unknown layout"          $K gemm --device cpu --shape 8x8x8 --layout XY
bad_usage "short layout"            $K gemm --device cpu --shape 8x8x8 --layout N
bad_usage "fp8 with layout NN"      $K gemm --device cpu --shape 8x8x8 --dtype e4m3 --layout NN
bad_usage "fp8 backward"            $K gemm --device cpu --shape 8x8x8 --dtype e5m2 --bwd
bad_usage "MX with FNUZ"            $K gemm --device cpu --shape 8x8x8 --dtype mxfp8 --fp8 fnuz
bad_usage "MX with --scaling row"   $K gemm --device cpu --shape 8x8x8 --dtype mxfp4 --scaling row
bad_usage "--scaling mx on e4m3"    $K gemm --device cpu --shape 8x8x8 --dtype e4m3 --scaling mx
bad_usage "--mx-rule on e4m3"       $K gemm --device cpu --shape 8x8x8 --dtype e4m3 --mx-rule up
bad_usage "--scaling on bf16"       $K gemm --device cpu --shape 8x8x8 --dtype bf16 --scaling row
bad_usage "unknown --scaling"       $K gemm --device cpu --shape 8x8x8 --dtype e4m3 --scaling col
bad_usage "--out f16"               $K gemm --device cpu --shape 8x8x8 --dtype e4m3 --out f16
bad_usage "unknown --fp8"           $K gemm --device cpu --shape 8x8x8 --dtype e4m3 --fp8 ieee
bad_usage "fp8 attention"           $K attn --device cpu --seq 8 --heads 1 --dim 8 --dtype e4m3
bad_usage "--inject scale on bf16"  $K gemm --device cpu --shape 8x8x8 --inject scale
bad_usage "--trades-precision ''"   $K gemm --device cpu --shape 8x8x8 --dtype e4m3 --trades-precision ""
bad_usage "codec: unknown format"   $K codec e3m4 1.0
bad_usage "codec: not a number"     $K codec e4m3 one
bad_usage "codec: e8m0 encode"      $K codec e8m0 1.0
bad_usage "codec: beyond fp32"      $K codec e4m3fnuz 1e40
bad_usage "codec: --fp8 on e2m1"    $K codec e2m1 --fp8 ocp 1
bad_usage "codec: a long stdin line" bash -c "printf '0.%0300d1\\n' 0 | $K codec e4m3"
bad_usage "codec: --fp8 twice"      $K codec e4m3 --fp8 ocp --fp8 fnuz 1
bad_usage "codec: an unknown option" $K codec e4m3 --bogus
has "$tmp/err" "unknown option '--bogus'" "codec names an unknown option as one"
bad_usage "codec: a bad stdin line" bash -c "printf '1\\nfoo\\n' | $K codec e4m3"
has "$tmp/err" "stdin line 2: 'foo' is not a number" "codec names the stdin line"
bad_usage "unknown option"          $K gemm --device cpu --shape 8x8x8 --frob
bad_usage "missing value"           $K gemm --device cpu --shape
for o in --dtype --layout --inputs --scaling --out; do   # a case option without its value is named as such
    bad_usage "$o without a value" $K gemm --device cpu --shape 8x8x8 $o
    has "$tmp/err" "$o needs a value" "$o without a value: says it needs one"
done
bad_usage "bad seed"                $K gemm --device cpu --shape 8x8x8 --seed abc
bad_usage "negative rtol"           $K gemm --device cpu --shape 8x8x8 --rtol -1 --why x
bad_usage "unknown fault"           $K gemm --device cpu --shape 8x8x8 --inject bogus
bad_usage "bad device"              $K gemm --device gpu0 --shape 8x8x8
bad_usage "--kernels on the CPU"    $K gemm --device cpu --shape 8x8x8 --kernels kernels.hip
bad_usage "isa --kernels /dev/zero (read no further than 16 MiB)" timeout 60 $K isa --arch gfx942 --kernels /dev/zero
has "$tmp/err" "larger than 16777216 bytes" "--kernels /dev/zero: refused for its size"
bad_usage "selftest --kernels on the CPU, before its checks" $K selftest --device cpu --kernels kernels.hip
[ -s "$tmp/out" ] && bad "selftest printed checks before refusing --kernels on the CPU" \
    || ok "selftest refuses --kernels on the CPU before any check"
bad_usage "--cpu-sums on a case that is not low precision" $K gemm --device cpu --shape 8x8x8 --cpu-sums sm90a
KGATE_REF_PORTABLE=2 run $K gemm --device cpu --shape 8x8x8
[ $rc -eq 2 ] && [ ! -s "$tmp/out" ] && grep -q "KGATE_REF_PORTABLE=2: expected 0 or 1" "$tmp/err" \
    && ok "KGATE_REF_PORTABLE=2 on a bf16 case: refused before any work" || bad "KGATE_REF_PORTABLE=2: exit $rc"
bad_usage "unreadable shapes file"  $K all --device cpu --shapes "$tmp/none.txt"
for a in sm_zz sm_ sm_9 gfx9 gfx94x2 gfxabc gfx942:+ gfx942: gfx942:xnack; do bad_usage "isa --arch $a" $K isa --arch $a; done
bad_usage "isa --arch with target features (as ROCm names a device), a missing --kernels" \
    $K isa --arch gfx942:sramecc+:xnack- --kernels "$tmp/none.hip"
has "$tmp/err" "cannot read --kernels" "an arch with target features is taken as an arch"
bad_usage "isa on the CPU device"   $K isa --device cpu
bad_usage "--version with more after it" $K --version --bogus
printf 'gemm --dtype bf16 --shape 8x8x8\n\ngemm --dtype bf16 --shape 8x8\n' >"$tmp/bad.txt"
bad_usage "shapes line that does not parse" $K all --device cpu --shapes "$tmp/bad.txt"
has "$tmp/err" "bad.txt:3: --shape 8x8" "the bad line is named by file and line"
printf 'gemm --shape 8x8x8 --device cpu\n' >"$tmp/bad.txt"
bad_usage "run option on a shapes line" $K all --device cpu --shapes "$tmp/bad.txt"
for v in "--seed abc" "--timeout 0" "--repeat"; do   # named as a run option, with its line, whatever its value
    printf 'gemm --shape 8x8x8\ngemm --shape 8x8x8 %s\n' "$v" >"$tmp/bad.txt"
    bad_usage "run option with a bad value on a shapes line ($v)" $K all --device cpu --shapes "$tmp/bad.txt"
    has "$tmp/err" "bad.txt:2: ${v%% *} is a run option, not a case option" "$v on a shapes line: file, line and what is wrong"
done
printf 'conv --shape 8x8x8\n' >"$tmp/bad.txt"
bad_usage "unknown op in shapes"    $K all --device cpu --shapes "$tmp/bad.txt"
bad_usage "grouped without --groups" $K grouped --device cpu --shape 8x8
bad_usage "grouped without --shape" $K grouped --device cpu --groups 1,2
bad_usage "grouped bad list"        $K grouped --device cpu --groups 1,,2 --shape 8x8
bad_usage "grouped negative size"   $K grouped --device cpu --groups 1,-2 --shape 8x8
bad_usage "grouped TN layout"       $K grouped --device cpu --groups 1,2 --shape 8x8 --layout TN
bad_usage "grouped too many rows"   $K grouped --device cpu --groups 1048576,1 --shape 8x8
bad_usage "grouped 3-dim shape"     $K grouped --device cpu --groups 1,2 --shape 8x8x8
bad_usage "attn without --heads"    $K attn --device cpu --seq 8 --dim 64
bad_usage "attn without --dim"      $K attn --device cpu --seq 8 --heads 2
bad_usage "attn without --seq"      $K attn --device cpu --heads 2 --dim 64
bad_usage "attn --seq and --seqlens" $K attn --device cpu --seq 8 --seqlens 8 --heads 2 --dim 64
bad_usage "attn heads not a multiple" $K attn --device cpu --seq 8 --heads 6:4 --dim 64
bad_usage "attn dim over 256"       $K attn --device cpu --seq 8 --heads 2 --dim 257
bad_usage "attn over 1024 heads"    $K attn --device cpu --seq 1 --heads 2048:1 --dim 1
bad_usage "attn f32"                $K attn --device cpu --seq 8 --heads 2 --dim 64 --dtype f32
bad_usage "attn zero seq"           $K attn --device cpu --seq 0 --heads 2 --dim 64
bad_usage "attn bad seqlens pair"   $K attn --device cpu --seqlens 3:4:5 --heads 2 --dim 64
bad_usage "attn zero scale"         $K attn --device cpu --seq 8 --heads 2 --dim 64 --scale 0
bad_usage "attn huge"               $K attn --device cpu --seq 1048576 --heads 64 --dim 128
bad_usage "--inject mask on gemm"   $K gemm --device cpu --shape 8x8x8 --inject mask
bad_usage "--inject mask, not causal" $K attn --device cpu --seq 8 --heads 2 --dim 64 --inject mask
bad_usage "--inject group on gemm"  $K gemm --device cpu --shape 8x8x8 --inject group
bad_usage "--inject race, no repeat" $K gemm --device cpu --shape 8x8x8 --inject race
bad_usage "--repeat 0"              $K gemm --device cpu --shape 8x8x8 --repeat 0
printf '# nothing\n' >"$tmp/bad.txt"
bad_usage "empty shapes file"       $K all --device cpu --shapes "$tmp/bad.txt"
echo "-- defects found by a new user: each refused with one line and exit 2 (6: a write that fails)"
# 1, 4: shapes files: a cap on the file (read no further than 1 MiB) and the line, a NUL byte, a directory
bad_usage "--shapes /dev/zero: over 1 MiB, refused without reading it all" timeout 20 $K all --device cpu --shapes /dev/zero
has "$tmp/err" "/dev/zero: larger than 1048576 bytes" "the size cap names the file"
{ printf 'gemm --shape 8x8x8 # '; head -c 5000 /dev/zero | tr '\0' 'x'; printf '\n'; } >"$tmp/long.txt"
bad_usage "a shapes line over 4096 bytes" $K all --device cpu --shapes "$tmp/long.txt"
has "$tmp/err" "long.txt:1: the line is longer than 4096 bytes" "the long line is named by file and line"
printf '# ok\ngemm --shape 8x8x8\0 --dtype f32\n' >"$tmp/nul.txt"
bad_usage "a NUL byte in a shapes line" $K all --device cpu --shapes "$tmp/nul.txt"
has "$tmp/err" "nul.txt:2: the line holds a NUL byte" "the NUL byte is named by file and line"
bad_usage "a directory as --shapes" $K all --device cpu --shapes "$tmp"
has "$tmp/err" "Is a directory" "a directory as --shapes says so"
# 5, 6: the reasons that reach --json and the ledger
bad_usage "--why with invalid UTF-8" $K gemm --device cpu --shape 8x8x8 --rtol 0.5 --why $'bad \xff\xfe byte'
bad_usage "--trades-precision with invalid UTF-8" $K gemm --device cpu --shape 8x8x8 --dtype e4m3 --trades-precision $'\xc3('
bad_usage "--why with a control character" $K gemm --device cpu --shape 8x8x8 --rtol 0.5 --why $'two\nlines'
bad_usage "--why ''"                 $K gemm --device cpu --shape 8x8x8 --rtol 0.5 --why ""
bad_usage "--why of blanks"          $K gemm --device cpu --shape 8x8x8 --rtol 0.5 --why "   "
bad_usage "--trades-precision of blanks" $K gemm --device cpu --shape 8x8x8 --dtype e4m3 --trades-precision "  "
expect 0 "--why in UTF-8 is kept" $K gemm --device cpu --shape 8x8x8 --rtol 0.5 --why "bf16 épilogue ✓" --json
python3 -c 'import json,sys; o=json.loads(open(sys.argv[1]).read()); assert o["why"] == "bf16 épilogue ✓", o["why"]' "$tmp/out" \
    2>"$tmp/py" && ok "--json carries the UTF-8 reason as valid JSON" || bad "--json why: $(cat "$tmp/py")"
# 8, 9: attention scales that overflow fp32 scores; cases with nothing to check
bad_usage "attn --scale 1e38"        $K attn --device cpu --seq 8 --heads 2 --dim 64 --scale 1e38
bad_usage "attn --scale above 1e4"   $K attn --device cpu --seq 8 --heads 2 --dim 64 --scale 10001
expect 0 "attn --scale 1e4 is taken" $K attn --device cpu --seq 8 --heads 2 --dim 64 --scale 1e4
bad_usage "grouped --groups 0"       $K grouped --device cpu --groups 0 --shape 8x8
has "$tmp/err" "every group is empty: nothing to check" "all-empty groups say why"
bad_usage "grouped --groups 0,0,0"   $K grouped --device cpu --groups 0,0,0 --shape 8x8
bad_usage "attn --seqlens 0"         $K attn --device cpu --seqlens 0 --heads 2 --dim 8
bad_usage "attn --seqlens 0,0"       $K attn --device cpu --seqlens 0,0 --heads 2 --dim 8
bad_usage "attn --seqlens 4:0 (queries, no keys)" $K attn --device cpu --seqlens 4:0,0:3 --heads 2 --dim 8
has "$tmp/err" "nothing to check" "sequences without queries or keys say why"
# 11: messages that said the wrong thing
bad_usage "an option and no command" $K --device cpu
has "$tmp/err" "no command given" "no command: says so, not 'unknown option'"
bad_usage "attn --heads 0"           $K attn --device cpu --seq 8 --heads 0 --dim 8
has "$tmp/err" "from 1 to 1024" "--heads 0: the real range"
bad_usage "attn --dim 0"             $K attn --device cpu --seq 8 --heads 2 --dim 0
has "$tmp/err" "from 1 to 256" "--dim 0: the real range"
expect 0 "--seed 18446744073709551614 (in range)" $K gemm --device cpu --shape 8x8x8 --seed 18446744073709551614
expect 0 "--seed 18446744073709551615 (2^64 - 1)" $K gemm --device cpu --shape 8x8x8 --seed 18446744073709551615
bad_usage "--seed 2^64"              $K gemm --device cpu --shape 8x8x8 --seed 18446744073709551616
long=$(head -c 100000 /dev/zero | tr '\0' '7')
for opt in --seed --dtype --layout --inputs --inject --device; do
    bad_usage "a 100 KB $opt value" $K gemm --device cpu --shape 8x8x8 $opt "$long"
    [ "$(wc -c <"$tmp/err")" -lt 400 ] && ok "a 100 KB $opt value is echoed cut short" || bad "$opt: $(wc -c <"$tmp/err") bytes on stderr"
done
bad_usage "a 100 KB attn --scale"    $K attn --device cpu --seq 8 --heads 2 --dim 8 --scale "$long"
[ "$(wc -c <"$tmp/err")" -lt 400 ] && ok "a 100 KB --scale is echoed cut short" || bad "--scale: $(wc -c <"$tmp/err") bytes"
bad_usage "a 100 KB codec value"     $K codec e4m3 "$long"
[ "$(wc -c <"$tmp/err")" -lt 400 ] && ok "a 100 KB codec value is echoed cut short" || bad "codec: $(wc -c <"$tmp/err") bytes"
# 12: repeated options, options that mean nothing to the command, bad environment
bad_usage "a repeated run option"    $K gemm --device cpu --shape 8x8x8 --seed 1 --seed 2
bad_usage "a repeated case option"   $K gemm --device cpu --shape 8x8x8 --dtype f32 --dtype bf16
printf 'gemm --shape 8x8x8 --shape 16x16x16\n' >"$tmp/bad.txt"
bad_usage "a repeated option on a shapes line" $K all --device cpu --shapes "$tmp/bad.txt"
bad_usage "--rounds on a plain case" $K gemm --device cpu --shape 8x8x8 --rounds 3
has "$tmp/err" "--rounds: gemm does not take it \(only compare and noise do\)" "the refusal says who takes it"
bad_usage "--budget without a candidate" $K gemm --device cpu --shape 8x8x8 --budget 3
bad_usage "--trades-precision on bf16" $K gemm --device cpu --shape 8x8x8 --trades-precision "a reason"
bad_usage "--why without --rtol/--atol" $K gemm --device cpu --shape 8x8x8 --why "a reason"
bad_usage "--shapes on a case"       $K gemm --device cpu --shape 8x8x8 --shapes shapes.txt
bad_usage "--arch on a case"         $K gemm --device cpu --shape 8x8x8 --arch sm_90a
bad_usage "--json on devices"        $K devices --json
bad_usage "--seed on ledger"         $K ledger --seed 3
bad_usage "--rounds on all"          $K all --device cpu --shapes "$tmp/two.txt" --rounds 3
bad_usage "--trades-precision on all without a low-precision case" $K all --device cpu --shapes "$tmp/two.txt" --trades-precision "x"
bad_usage "--cpu-sums on all without a low-precision case" $K all --device cpu --shapes "$tmp/two.txt" --cpu-sums sm90a
has "$tmp/err" "no case of the shapes file is low precision" "all --cpu-sums without a low-precision case: said why"
KGATE_THREADS=abc run $K gemm --device cpu --shape 64x64x64
[ $rc -eq 2 ] && grep -q "KGATE_THREADS=abc" "$tmp/err" && ok "KGATE_THREADS=abc: exit 2 naming it" || bad "KGATE_THREADS=abc: exit $rc: $(head -c 300 "$tmp/err")"
KGATE_THREADS=0 run $K gemm --device cpu --shape 64x64x64
[ $rc -eq 2 ] && ok "KGATE_THREADS=0: exit 2" || bad "KGATE_THREADS=0: exit $rc"
KGATE_THREADS=2 run $K gemm --device cpu --shape 64x64x64
[ $rc -eq 0 ] && ok "KGATE_THREADS=2 is taken" || bad "KGATE_THREADS=2: exit $rc"
KGATE_REF_PORTABLE=2 run $K gemm --device cpu --dtype e4m3 --shape 64x64x64
[ $rc -eq 2 ] && grep -q "KGATE_REF_PORTABLE=2" "$tmp/err" && ok "KGATE_REF_PORTABLE=2: exit 2 naming it" || bad "KGATE_REF_PORTABLE=2: exit $rc: $(head -c 300 "$tmp/err")"
# the quantized products' and the attention references' two builds (ref.c: REF_FAST,
# for AVX2 and FMA, and the portable one) give the same bits: the dumped inputs,
# outputs (the CPU candidate is such a product) and double references, and the JSON
# (whose gate figures come from the same-precision references too)
grep -qw avx2 /proc/cpuinfo 2>/dev/null && grep -qw fma /proc/cpuinfo && fast="AVX2 and FMA here" || fast="no AVX2+FMA here: both portable"
for c in "gemm --dtype mxfp8 --shape 130x70x1001" "gemm --dtype mxfp4 --mx-rule up --out f32 --shape 67x33x1000" \
         "grouped --dtype e4m3 --scaling block --groups 0,200,65 --shape 300x256" "gemm --dtype e5m2 --scaling row --shape 260x300x520" \
         "attn --seqlens 300,7,1000:1200,0:5 --heads 4:2 --dim 72 --causal --bwd" \
         "attn --dtype f16 --seq 113:203 --heads 8 --dim 111 --bwd --inputs scaled"; do
    rm -rf "$tmp/ref_fast" "$tmp/ref_port"
    $K $c --device cpu --dump "$tmp/ref_fast" --json 2>"$tmp/ref_fast.err" | sed 's/"time":{[^}]*}//g' >"$tmp/ref_fast.json"
    KGATE_REF_PORTABLE=1 $K $c --device cpu --dump "$tmp/ref_port" --json 2>"$tmp/ref_port.err" | sed 's/"time":{[^}]*}//g' >"$tmp/ref_port.json"
    want="AVX2+FMA"; [ "$fast" = "AVX2 and FMA here" ] || want=portable
    grep -q "^  references: *ref.c's $want build" "$tmp/ref_fast.err" && grep -q "^  references: *ref.c's portable build" "$tmp/ref_port.err" \
        && ok "the two runs name their builds ($want, portable): $c" || bad "the header's references line: $(grep references: "$tmp/ref_fast.err" "$tmp/ref_port.err")"
    if [ -s "$tmp/ref_fast.json" ] && diff -r "$tmp/ref_fast" "$tmp/ref_port" >/dev/null && cmp -s "$tmp/ref_fast.json" "$tmp/ref_port.json"; then
        ok "references' fast and portable builds: the same bytes ($fast): $c"
    else bad "references' fast and portable builds differ: $c"; fi
done
# 14: a --dump directory that cannot be made is usage, before any work; a write that fails is 6
bad_usage "--dump under /dev/full"   $K gemm --device cpu --shape 8x8x8 --dump /dev/full/x
touch "$tmp/dumpfile"
bad_usage "--dump naming a file"     $K gemm --device cpu --shape 8x8x8 --dump "$tmp/dumpfile"
has "$tmp/err" "not a directory" "--dump on a file says so"
( trap '' XFSZ; ulimit -f 1; exec $K gemm --device cpu --shape 64x64x64 --dump "$tmp/dump_efbig" ) >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -eq 6 ] && ok "--dump whose write fails (file size limit): exit 6" || bad "--dump over ulimit -f: exit $rc: $(head -c 300 "$tmp/err")"
has "$tmp/err" "cannot write .*A.npy: File too large" "the failed write names the file and the error"
# 15: kgate all finds shapes.txt beside the binary
mkdir -p "$tmp/bin" "$tmp/elsewhere"
cp "$K" "$tmp/bin/kgate" && printf 'gemm --shape 8x8x8\n' >"$tmp/bin/shapes.txt"
(cd "$tmp/elsewhere" && "$tmp/bin/kgate" all --device cpu) >"$tmp/out" 2>"$tmp/err"; rc=$?
[ $rc -eq 0 ] && grep -q "gemm bf16 NT 8x8x8" "$tmp/out" && ok "all: shapes.txt beside the binary when ./shapes.txt is absent" \
    || bad "all beside the binary: exit $rc: $(head -c 300 "$tmp/err")"
printf 'gemm --shape 16x8x8\n' >"$tmp/elsewhere/shapes.txt"
(cd "$tmp/elsewhere" && "$tmp/bin/kgate" all --device cpu) >"$tmp/out" 2>"$tmp/err"
grep -q "gemm bf16 NT 16x8x8" "$tmp/out" && ok "all: ./shapes.txt comes first" || bad "all: ./shapes.txt not used"
for w in --expect "1..1000" "0..2^64-1" "4096 entries" "one a line" "6 a file could not be written" \
         ".kgate-cache" "beside the kgate binary"; do
    $K --help | grep -qF -- "$w" && ok "--help says '$w'" || bad "--help does not say '$w'"
done
expect 0 "--help" $K --help
has "$tmp/out" "exit: 0 every gate passed" "--help states the exit codes"
miss=""
for w in all gemm grouped attn devices selftest isa diff --device --kernels --seed --full --rtol --atol --why \
         --inject --json --repeat --dtype --layout --shape --bwd --groups --seq --seqlens --heads --dim \
         --causal --scale --batch tile tail nan bias drop row unwritten outside group mask race; do
    grep -qw -- "$w" "$tmp/out" || miss="$miss $w"
done
[ -z "$miss" ] && ok "--help names every command, option and fault (as whole words)" || bad "--help does not name:$miss"
gpu=0
if $K devices 2>/dev/null | grep -q '^[0-9]'; then gpu=1; fi
if [ $gpu -eq 0 ]; then
    expect 3 "no GPU runtime: default device" $K gemm --shape 8x8x8
    one_line "no GPU runtime"
    has "$tmp/err" "tried libcuda.so.1.*libamdhip64" "the no-runtime line names every library tried"
    expect 0 "kgate devices with no GPU runtime: the CPU is there (exit 0)" $K devices
    has "$tmp/out" "^cpu " "kgate devices still lists the CPU"
    has "$tmp/err" "no GPU runtime found \(tried libcuda.so.1" "and says on stderr that no GPU runtime was found"
fi

echo "== run-time compile: NVRTC (sm_90a), crash/hang/error handling, cache, embedded source"
if ldconfig -p 2>/dev/null | grep -q libnvrtc || [ -e /usr/local/cuda/lib64/libnvrtc.so ]; then
    cp "$K" "$tmp/kgate-copy"
    (cd "$tmp" && ./kgate-copy isa --arch sm_90a) >"$tmp/out" 2>"$tmp/err"; rc=$?
    [ $rc -eq 0 ] && ok "a copied binary compiles its embedded kernels.hip for sm_90a (NVRTC)" \
        || bad "isa sm_90a: exit $rc: $(head -c 600 "$tmp/err")"
    has "$tmp/err" "compiled in" "the first compile runs the compiler"
    run $K isa --arch sm_90a
    has "$tmp/err" "cached code object" "the second run takes the code object from the cache"
    if command -v cuobjdump >/dev/null; then
        has "$tmp/out" "kg_gemm_bf16" "cuobjdump lists the kernels"
    else
        has "$tmp/out" "no disassembler found" "without cuobjdump, isa says so"
    fi
    # the other NVIDIA archs compile too: sm_90's knobs (SG_BN = 256: 50 KiB of static shared memory)
    # must not reach archs whose ptxas refuses them (sm_80-89 and sm_100/120 stop at 48 KiB)
    for a in sm_80 sm_86 sm_89 sm_100 sm_120; do
        run $K isa --arch $a
        [ $rc -eq 0 ] && ok "kernels.hip compiles for $a (NVRTC)" \
            || bad "isa --arch $a: exit $rc: $(grep -m1 -E 'error|does not compile' "$tmp/err")"
    done
    KGATE_CACHE="$tmp/c2" KGATE_TEST_COMPILER=crash run $K isa --arch sm_90a
    [ $rc -eq 5 ] && ok "compiler crash: exit 5" || bad "compiler crash: exit $rc"
    has "$tmp/err" "compiler crashed with signal 11" "a compiler crash is reported with its signal"
    KGATE_CACHE="$tmp/c3" KGATE_TEST_COMPILER=hang KGATE_COMPILE_TIMEOUT=1 run $K isa --arch sm_90a
    [ $rc -eq 5 ] && ok "compiler hang: exit 5" || bad "compiler hang: exit $rc"
    has "$tmp/err" "compiler hung" "a compiler hang is killed and reported"
    printf 'extern "C" __global__ void kg_gemm_f32(float *x) { x[0] = undefined_name; }\n' >"$tmp/bad.hip"
    run $K isa --arch sm_90a --kernels "$tmp/bad.hip"
    [ $rc -eq 5 ] && ok "a kernel that does not compile: exit 5" || bad "bad kernel: exit $rc"
    has "$tmp/err" "undefined_name" "the compile log is shown"
    has "$tmp/err" "does not compile" "one clear line says the source does not compile"
    # A cache entry is checked before use (size and sha256 against its .sum): a truncated or altered
    # one is compiled again, never trusted.
    printf 'extern "C" __global__ void kg_x(float *x) { x[0] = 1.0f; }\n' >"$tmp/tiny.hip"
    CC4="$tmp/c4"
    KGATE_CACHE="$CC4" run $K isa --arch sm_90a --kernels "$tmp/tiny.hip"
    has "$tmp/err" "compiled in .* code object ([0-9a-f]{12})" "a small source compiles into the cache"
    sha=$(sed -n 's/.*code object \([0-9a-f]\{12\}\).*/\1/p' "$tmp/err" | head -1)
    bin=$(ls "$CC4"/*.bin | head -1)
    [ -s "${bin%.bin}.sum" ] && ok "the entry has its checksum beside it" || bad "no .sum beside $bin"
    : >"$bin"
    KGATE_CACHE="$CC4" run $K isa --arch sm_90a --kernels "$tmp/tiny.hip"
    has "$tmp/err" "cache entry .* is damaged \(empty\): compiling again" "an empty entry is named damaged"
    grep -q "e3b0c44298fc" "$tmp/err" && bad "an empty code object was used" || ok "an empty entry is not used"
    has "$tmp/err" "compiled in .* code object $sha" "... and compiled again to the same code object"
    printf 'X' | dd of="$bin" bs=1 seek=100 conv=notrunc status=none
    KGATE_CACHE="$CC4" run $K isa --arch sm_90a --kernels "$tmp/tiny.hip"
    has "$tmp/err" "is damaged \(contents differ from its checksum\)" "an altered entry is named damaged and compiled again"
    head -c 200 "$bin" >"$bin.t" && mv "$bin.t" "$bin"
    KGATE_CACHE="$CC4" run $K isa --arch sm_90a --kernels "$tmp/tiny.hip"
    has "$tmp/err" "is damaged \(size differs from its checksum's\)" "a truncated entry is named damaged and compiled again"
    KGATE_CACHE="$CC4" run $K isa --arch sm_90a --kernels "$tmp/tiny.hip"
    has "$tmp/err" "cached code object $sha" "the entry compiled again is used from the cache"
    # The compiler's process dies with kgate: SIGINT to kgate alone leaves no compiler running.
    cp "$tmp/tiny.hip" "$tmp/tie-$$.hip"
    # (a background job of a script ignores SIGINT unless it is given back its default)
    KGATE_CACHE="$tmp/c5" KGATE_TEST_COMPILER=hang env --default-signal=INT $K isa --arch sm_90a \
        --kernels "$tmp/tie-$$.hip" >/dev/null 2>&1 &
    kpid=$!
    sleep 1
    kids=$(grep -ls "^PPid:[[:space:]]*$kpid$" /proc/[0-9]*/status 2>/dev/null | wc -l)
    [ "$kids" -gt 0 ] && ok "a hanging compile runs in a child process of kgate" \
        || bad "no child of kgate (the compiler's process) before the SIGINT"
    kill -INT $kpid
    wait $kpid 2>/dev/null
    krc=$?
    [ "$krc" -eq 130 ] && ok "SIGINT ends kgate (status 130)" || bad "kgate after SIGINT: status $krc, want 130"
    sleep 0.5
    left=$(grep -las "tie-$$[.]hip" /proc/[0-9]*/cmdline | cut -d/ -f3)   # no pgrep needed
    if [ -n "$left" ]; then
        bad "the compiler's process outlived kgate (pid $left)"; kill -9 $left
    else ok "SIGINT to kgate alone: its compiler's process is gone too"; fi
    # The cache directory and the compile timeout are checked before any compile (exit 2); a code
    # object that cannot be written into the cache is exit 6.
    touch "$tmp/cachefile"
    KGATE_CACHE="$tmp/cachefile" run $K isa --arch sm_90a
    [ $rc -eq 2 ] && ok "KGATE_CACHE naming a file: exit 2" || bad "KGATE_CACHE a file: exit $rc"
    one_line "KGATE_CACHE naming a file"
    has "$tmp/err" "cache \(KGATE_CACHE\) .*cachefile: it is a regular file, not a directory" "the cache's problem is named, not 'compiler failed to run'"
    KGATE_CACHE=/dev/full/cache run $K isa --arch sm_90a
    [ $rc -eq 2 ] && grep -q "cannot create it: Not a directory" "$tmp/err" && ok "KGATE_CACHE that cannot be made: exit 2, says why" \
        || bad "KGATE_CACHE=/dev/full/cache: exit $rc: $(cat "$tmp/err")"
    for v in abc 0 -1 1.5 86401; do
        KGATE_CACHE="$tmp/c5" KGATE_COMPILE_TIMEOUT=$v run $K isa --arch sm_90a
        [ $rc -eq 2 ] && grep -q "KGATE_COMPILE_TIMEOUT=$v: expected a whole number of seconds from 1 to 86400" "$tmp/err" \
            && ok "KGATE_COMPILE_TIMEOUT=$v: exit 2 naming the variable" || bad "KGATE_COMPILE_TIMEOUT=$v: exit $rc: $(cat "$tmp/err")"
    done
    printf 'extern "C" __global__ void kg_gemm_f32(float *x) { x[0] = 1.0f; }\n' >"$tmp/tiny.hip"
    ( trap '' XFSZ; ulimit -f 1; KGATE_CACHE="$tmp/c6" exec $K isa --arch sm_90a --kernels "$tmp/tiny.hip" ) >/dev/null 2>"$tmp/err"; rc=$?
    [ $rc -eq 6 ] && ok "a code object the cache cannot take (file size limit): exit 6" || bad "cache over ulimit -f: exit $rc: $(cat "$tmp/err")"
    has "$tmp/err" "could not write .*\.bin: disk full or I/O error" "the failed cache write is named"
else
    echo "skip: no libnvrtc on this machine"
fi
expect 2 "isa --arch with an unknown prefix" $K isa --arch vega
mkdir -p "$tmp/empty"
if ! ldconfig -p 2>/dev/null | grep -q libhiprtc && [ ! -e /opt/rocm/llvm/bin/clang ]; then
    PATH="$tmp/empty" run $K isa --arch gfx942     # no hiprtc, and no clang on this PATH
    [ $rc -eq 3 ] && ok "isa --arch gfx942 with neither hiprtc nor clang: exit 3" || bad "no hiprtc, no clang: exit $rc"
    has "$tmp/err" "no hiprtc run-time compiler found \(tried libhiprtc.so.*no clang for HIP \(tried .*clang-19" \
        "names the hiprtc libraries and the clangs tried"
fi

echo "== clang-19 compiles kernels.hip for gfx942 (AMD, no HIP headers)"
entry_points="kg_gemm_f32 kg_gemm_f16 kg_gemm_bf16 kg_grouped_bf16 kg_grouped_wgrad_f16 kg_attn_fwd_bf16
              kg_attn_fwd_f16 kg_attn_bwd_pre_bf16 kg_attn_bwd_dkdv_bf16 kg_attn_bwd_dq_f16
              kg_quantize kg_qgemm_bf16 kg_qgemm_f32 kg_qgrouped_bf16 kg_qgrouped_f32"
mfma_entries="kg_gemm_mfma_f16 kg_gemm_mfma_bf16 kg_grouped_mfma_f16 kg_grouped_mfma_bf16 kg_grouped_wgrad_mfma_f16
              kg_grouped_wgrad_mfma_bf16 kg_qgemm_mfma_fp8_bf16 kg_qgrouped_mfma_fp8_bf16 kg_qgemm_mfma_bf8_bf16
              kg_qgrouped_mfma_bf8_bf16 kg_qgemm_mfma_fp8_f32 kg_qgrouped_mfma_fp8_f32 kg_qgemm_mfma_bf8_f32
              kg_qgrouped_mfma_bf8_f32"   # gfx942 only
attn_mfma_entries="kg_attn_fwd_mfma_f16 kg_attn_fwd_mfma_bf16"   # gfx942 only
if command -v clang-19 >/dev/null && command -v llvm-objdump-19 >/dev/null; then
    if clang-19 -x hip --offload-arch=gfx942 -nogpulib -nogpuinc --cuda-device-only --no-gpu-bundle-output \
        -O3 -Wall -Werror kernels.hip -o "$tmp/k.co" >"$tmp/err" 2>&1; then
        ok "clang-19 compiles kernels.hip for gfx942 without warnings"
        llvm-objdump-19 -d "$tmp/k.co" >"$tmp/dis"
        for k in $entry_points $mfma_entries $attn_mfma_entries; do
            has "$tmp/dis" "<$k>:" "gfx942 code object has $k"
        done
        # each portable GEMM entry's own v_fma count (the function's lines up to the next label)
        for k in kg_gemm_f32 kg_gemm_f16 kg_gemm_bf16; do
            n=$(awk -v k="<$k>:" '$2 == k { on = 1; next } /^[0-9a-f]+ <.*>:$/ { on = 0 } on && /v_(pk_)?fma/ { n++ } END { print n + 0 }' "$tmp/dis")
            [ "$n" -gt 0 ] && ok "gfx942: $k accumulates with $n v_fma/v_pk_fma" || bad "gfx942: no v_fma in $k"
        done
    else
        bad "clang-19 gfx942: $(head -c 800 "$tmp/err")"
    fi
else
    echo "skip: clang-19 / llvm-objdump-19 not installed (.ci/run installs them)"
fi

echo "== gfx942 MFMA index math on the CPU (.ci/mfma_check.c against AMD's calculator tables)"
# block_check MARK HEADER CHECK DIR SED [ARG ...]: the blocks of kernels.hip between its MARK marks (plain C),
# SED applied to them (a planted fault; "" for none), as DIR/HEADER, and .ci/CHECK built beside them and
# run with the ARGs: DIR/build holds the compiler's output, DIR/out the check's
block_check() {
    mkdir -p "$4"
    awk -v m="$1" '$0 ~ ">>> " m {p=1; next} $0 ~ "<<< " m {p=0} p' kernels.hip | sed "$5" >"$4/$2"
    cp ".ci/$3" "$4/" && cc -std=c11 -Wall -Wextra -Werror -O2 -o "$4/check" "$4/$3" -lm >"$4/build" 2>&1 \
        && "$4/check" "${@:6}" >"$4/out" 2>&1
}
# mfma_check DIR [SED]: the kgate-index blocks and .ci/mfma_check.c against AMD's tables, in DIR
mfma_check() {
    block_check kgate-index mfidx.h mfma_check.c "$1" "${2:-}" .ci/mfma_gfx942_32x32x8.txt .ci/mfma_gfx942_32x32x16_fp8.txt
}
if mfma_check "$tmp/mfi"; then
    ok "kernels.hip's MFMA index functions: the lane layouts of A, B and D agree with the calculator's tables (32x32x8 and fp8 32x32x16); $(grep -c '^exact: [0-9]' "$tmp/mfi/out") 16-bit tiles exact (both majors of each operand, tails, K = 0), $(grep -c '^exact: fp8' "$tmp/mfi/out") fp8 tiles; grouped rows each in one block ($(grep -c '^exact: grouped' "$tmp/mfi/out") offset lists); the attention forward's row reductions, and $(grep -c '^agree: attention' "$tmp/mfi/out") heads within 1e-9 of softmax in double (causal, tails, no key)"
else bad "MFMA index check: $(head -c 600 "$tmp/mfi/build" "$tmp/mfi/out" 2>/dev/null)"; fi
# planted: an accumulator row formula without its i % 4; an 8-element load that skips half of K's step
if ! mfma_check "$tmp/mfp1" 's|return 8 \* (i / 4) + 4 \* (l / 32) + i % 4;|return 8 * (i / 4) + 4 * (l / 32);|' \
    && grep -q "^D: lane 0 accumulator 1: kernel (0,0), calculator (1,0)" "$tmp/mfp1/out" \
    && grep -q "^WRONG" "$tmp/mfp1/out"; then ok "planted: an accumulator row without i % 4 is named against the table, and its tiles are wrong"
else bad "planted D row: $(head -c 400 "$tmp/mfp1/out")"; fi
if ! mfma_check "$tmp/mfp2" 's|8 \* ((t + MF_THREADS \* j) % (MF_BK / 8))|8 * ((t + MF_THREADS * j) % (MF_BK / 16))|' \
    && grep -q "^agree" "$tmp/mfp2/out" && grep -q "^WRONG: 128x128x32, X K-contiguous" "$tmp/mfp2/out"; then
    ok "planted: a K-contiguous load covering half the step passes the table check and fails the tiles ($(grep -c '^WRONG' "$tmp/mfp2/out") of 20)"
else bad "planted load: $(head -c 400 "$tmp/mfp2/out")"; fi
# planted, fp8: a lane's k formula of 32x32x8 (4 codes a lane, not 8); a 16-code load that skips half of K's step
if ! mfma_check "$tmp/mfp4" 's|return 8 \* (l / 32) + i;|return 4 * (l / 32) + i;|' \
    && grep -q "^fp8 A: lane 32 element 0: kernel (0,4), calculator (0,8)" "$tmp/mfp4/out" \
    && grep -q "^WRONG: fp8 128x128x64" "$tmp/mfp4/out" && grep -q "^agree: the lane" "$tmp/mfp4/out"; then
    ok "planted, fp8: a lane's k as 32x32x8's is named against the fp8 table, and its tiles are wrong; the 16-bit tables still agree"
else bad "planted fp8 k: $(head -c 400 "$tmp/mfp4/out")"; fi
if ! mfma_check "$tmp/mfp5" 's|16 \* ((t + MF_THREADS \* j) % (MF8_BK / 16))|16 * ((t + MF_THREADS * j) % (MF8_BK / 32))|' \
    && grep -q "^agree: fp8" "$tmp/mfp5/out" && grep -q "^WRONG: fp8 128x128x64" "$tmp/mfp5/out" && ! grep -q "^WRONG: [0-9]" "$tmp/mfp5/out"; then
    ok "planted, fp8: a load covering half the step passes the table check and fails the fp8 tiles ($(grep -c '^WRONG: fp8' "$tmp/mfp5/out") of 5) alone"
else bad "planted fp8 load: $(head -c 400 "$tmp/mfp5/out")"; fi
# planted, attention: a row's xor rounds crossing into the other half-wave; key-tile loads covering half of d
if ! mfma_check "$tmp/mfp6" 's|return 16 >> s;|return 32 >> s;|' \
    && grep -q "^WRONG: attention: each row" "$tmp/mfp6/out" && grep -q "^WRONG: attention Sq 128" "$tmp/mfp6/out"; then
    ok "planted, attention: xor rounds that cross half-waves are named, and the heads are wrong ($(grep -c '^WRONG: attention Sq' "$tmp/mfp6/out") of 6)"
else bad "planted attention xor: $(head -c 400 "$tmp/mfp6/out")"; fi
if ! mfma_check "$tmp/mfp7" 's|return (t + MF_THREADS \* e) % MFA_DMAX;|return (t + MF_THREADS * e) % (MFA_DMAX / 2);|' \
    && grep -q "^WRONG: attention Sq 128 Sk 32 d 128: an output not written once, or a load missed" "$tmp/mfp7/out" \
    && grep -q "^exact: attention: each row" "$tmp/mfp7/out"; then
    ok "planted, attention: key-tile loads covering half the head dim are named ($(grep -c '^WRONG: attention Sq' "$tmp/mfp7/out") of 6 heads)"
else bad "planted attention load: $(head -c 400 "$tmp/mfp7/out")"; fi
# planted: every grouped block computes (the odd ones too): rows covered twice
if ! mfma_check "$tmp/mfp3" 's|return j % (MF_BM / 64) ? -1 : 64 \* j;|return 64 * j;|' && [ "$(grep -c '^WRONG: grouped' "$tmp/mfp3/out")" = 2 ] && ! grep -q "^WRONG: [0-9]" "$tmp/mfp3/out"; then
    ok "planted: grouped blocks that all compute are named on both offset lists (rows in two blocks)"
else bad "planted grouped rows: $(head -c 400 "$tmp/mfp3/out")"; fi

echo "== the fused attention backward's rotated walk on the CPU (.ci/fb_rank_check.c)"
# fb_rank_check DIR [SED]: the kgate-fbrank block and .ci/fb_rank_check.c, in DIR
fb_rank_check() { block_check kgate-fbrank fbrank.h fb_rank_check.c "$1" "${2:-}"; }
if fb_rank_check "$tmp/fbr" && grep -q "^exact: [0-9]* walks" "$tmp/fbr/out"; then
    ok "the rotated walk (kg_fb_pos, kg_fb_rank): $(sed -n 's/^exact: //p' "$tmp/fbr/out"); $(sed -n 's/^one block short of resident: //p' "$tmp/fbr/out") with one block short of resident (hence kgate's nres bound)"
else bad "rotated walk: $(head -c 600 "$tmp/fbr/build" "$tmp/fbr/out" 2>/dev/null)"; fi
# planted: the ranks' tie-break dropped (two blocks of one rank: on the H200 the watchdog named the hang);
# a walk that does not wrap
if ! fb_rank_check "$tmp/fbp1" 's|kg_fb_below(s, nq, r) + j / R;|kg_fb_below(s, nq, r);|' \
    && grep -q "^WRONG: rank nq 1 R 1 nkb 2: position 0 has rank 0 2 times" "$tmp/fbp1/out" \
    && grep -q "^WRONG: locks .* wait for ever with all blocks resident" "$tmp/fbp1/out"; then
    ok "planted: ranks without their tie-break are named (a rank held twice, the locks waiting for ever)"
else bad "planted rank tie-break: $(head -c 400 "$tmp/fbp1/out")"; fi
if ! fb_rank_check "$tmp/fbp2" 's|return u + rot < nq ? u + rot : u + rot - nq;|return u + rot < nq ? u + rot : u;|' \
    && grep -q "^WRONG: walk nq 2 R 2: key block 1 meets position 0 0 times" "$tmp/fbp2/out"; then
    ok "planted: a rotated walk that does not wrap is named (a position never met)"
else bad "planted walk: $(head -c 400 "$tmp/fbp2/out")"; fi

echo "== kgate isa: matrix instructions, registers, LDS and spills per kernel (gfx942 by clang-19, no GPU)"
# col KERNEL COLUMN : the value under COLUMN (a heading of kgate isa's table) in KERNEL's row of $tmp/out
col() {
    awk -v k="$1" -v c="$2" '$1 == "kernel" { for (i = NF; i > 0; i--) h[$i] = i; next }
                             (c in h) && $1 == k { print $h[c] }' "$tmp/out"
}
grep -q -- "--expect" <(./kgate --help) && ok "--help mentions --expect" || bad "--help does not mention --expect"
expect 2 "isa --expect with an unknown class" $K isa --arch gfx942 --expect tensor
one_line "unknown --expect class"
has "$tmp/err" "wgmma, mma, mfma,? (or )?wmma" "the unknown-class line names the classes"
expect 2 "--expect on a command that does not take it" $K selftest --device cpu --expect mfma
if command -v clang-19 >/dev/null && command -v llvm-objdump-19 >/dev/null && command -v llvm-readobj-19 >/dev/null; then
    # Bare-clang spellings, as kernels.hip's prelude: eight bf16 MFMAs (unrolled), LDS, and scratch.
    cat >"$tmp/mfma.hip" <<'EOF'
#define __global__ __attribute__((global))
#define __shared__ __attribute__((shared))
typedef short kg_bf16x4 __attribute__((ext_vector_type(4)));
typedef float kg_f32x16 __attribute__((ext_vector_type(16)));
extern "C" __global__ void kg_mfma_loop(float *out, const kg_bf16x4 *a, const kg_bf16x4 *b) {
    __shared__ float tile[1024];
    unsigned t = __builtin_amdgcn_workitem_id_x();
    kg_f32x16 acc = {};
#pragma unroll
    for (int i = 0; i < 8; i++)
        acc = __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(a[64 * i + t], b[64 * i + t], acc, 0, 0, 0);
    for (int j = 0; j < 16; j++) tile[16 * t + j] = acc[j];
    __builtin_amdgcn_s_barrier();
    out[t] = tile[1023 - t];
}
extern "C" __global__ void kg_scratch(float *out, int i) {
    float v[64];
    for (int j = 0; j < 64; j++) v[j] = out[j * 3];
    out[0] = v[i & 63];
}
EOF
    expect 0 "isa --arch gfx942 on an MFMA fixture" $K isa --arch gfx942 --kernels "$tmp/mfma.hip"
    if ! ldconfig -p 2>/dev/null | grep -q libhiprtc; then
        has "$tmp/err" "mfma.hip for gfx942 with [^ ]*clang[^ ]* \(.*clang version [0-9]+.*\): compiled in" \
            "without hiprtc, isa compiles with clang and says which on stderr"
    fi
    n=$(col kg_mfma_loop mfma)
    [ "$n" = 8 ] && ok "isa counts the fixture's 8 v_mfma (mfma column: $n)" || bad "mfma column of kg_mfma_loop: '$n', want 8"
    has "$tmp/out" "^kg_mfma_loop .* v_mfma_f32_32x32x8_?bf16" "the first matrix instruction is the v_mfma"
    [ "$(col kg_scratch matrix)" = 0 ] && ok "the kernel without MFMA counts 0" || bad "kg_scratch: matrix '$(col kg_scratch matrix)'"
    v=$(col kg_mfma_loop vgpr) lds=$(col kg_mfma_loop lds) scr=$(col kg_scratch scratch) sp=$(col kg_mfma_loop vspill)
    if [ "${v:-0}" -gt 0 ] 2>/dev/null && [ "$lds" = 4096 ] && [ "${scr:-0}" -gt 0 ] 2>/dev/null && [ "$sp" = 0 ]; then
        ok "resources from the code object: $v vgpr, LDS $lds B (the fixture's 1024 floats), scratch $scr B, $sp spills"
    else bad "resources: vgpr '$v', lds '$lds' (want 4096), scratch '$scr' (want > 0), vspill '$sp'"; fi
    expect 0 "isa --expect mfma passes on the fixture" $K isa --arch gfx942 --kernels "$tmp/mfma.hip" --expect mfma
    has "$tmp/out" "^expect mfma: pass: 1 of 2 kernels hold mfma instructions: kg_mfma_loop$" \
        "--expect names the kernel that holds mfma"
    expect 1 "isa --expect wmma fails on the fixture (gfx942 has no WMMA)" \
        $K isa --arch gfx942 --kernels "$tmp/mfma.hip" --expect wmma
    has "$tmp/out" "^expect wmma: FAIL: none of the 2 kernels holds wmma instructions" "the failure says none holds it"

    expect 0 "isa --arch gfx942 on the embedded kernels.hip" $K isa --arch gfx942
    listed=0
    for k in $entry_points; do
        i=$(col $k insts) m=$(col $k matrix)
        [ "${i:-0}" -gt 0 ] 2>/dev/null && [ "$m" = 0 ] && listed=$((listed + 1)) \
            || bad "kernels.hip gfx942: $k insts '$i' matrix '$m'"
    done
    rows=$(grep -c "^kg_" "$tmp/out")
    zero=$(grep "^kg_" "$tmp/out" | while read -r k _; do [ "$(col "$k" matrix)" = 0 ] && echo; done | wc -l)
    [ "$listed" -eq 15 ] && [ "$zero" -eq $((rows - 16)) ] \
        && ok "isa lists kernels.hip's $rows kernels for gfx942 (the 15 portable entries checked among them); all but the 16 MFMA entries without a matrix instruction" \
        || bad "kernels.hip gfx942: $listed of 15 entry points listed, $zero of $rows rows with 0 matrix instructions"
    # each MFMA entry: v_mfma_f32_32x32x8 (fp8: 32x32x16; 8 a loop body: one K step, unrolled by 2), no scratch or spill, and
    # registers and LDS that let two blocks (8 waves, 2 a SIMD) share a CU: VGPRs + AGPRs <= 256, LDS <= 32 KiB
    for k in $mfma_entries; do
        m=$(col $k mfma) v=$(col $k vgpr) a=$(col $k agpr) lds=$(col $k lds) scr=$(col $k scratch) sp=$(col $k vspill)
        first=$(grep "^$k " "$tmp/out" | awk '{print $NF}')
        occ=$(( ${v:-999} > 0 ? 512 / ${v:-999} : 0 ))
        if [ "${m:-0}" -ge 8 ] 2>/dev/null && [ "$scr" = 0 ] && [ "$sp" = 0 ] && [ "${v:-999}" -le 256 ] 2>/dev/null \
            && [ "${lds:-99999}" -le 32768 ] 2>/dev/null \
            && { [[ "$k" != kg_q* && "$first" == v_mfma_f32_32x32x8* ]] || [[ "$k" == kg_q*_fp8_* && "$first" == v_mfma_f32_32x32x16_fp8_fp8 ]] \
                 || [[ "$k" == kg_q*_bf8_* && "$first" == v_mfma_f32_32x32x16_bf8_bf8 ]]; }; then
            ok "gfx942 $k: $m $first, $v VGPRs (of them $a AGPRs), LDS $lds B, no scratch: $occ waves a SIMD by registers, $((65536 / lds)) blocks a CU by LDS"
        else bad "gfx942 $k: mfma '$m' first '$first' vgpr '$v' agpr '$a' lds '$lds' scratch '$scr' vspill '$sp'"; fi
    done
    # the attention forward: at least 16 MFMAs (S over d, P V), no scratch, one wave a SIMD at least (VGPRs +
    # AGPRs <= 512) and LDS inside the CU's 64 KiB
    for k in $attn_mfma_entries; do
        m=$(col $k mfma) v=$(col $k vgpr) a=$(col $k agpr) lds=$(col $k lds) scr=$(col $k scratch) sp=$(col $k vspill)
        first=$(grep "^$k " "$tmp/out" | awk '{print $NF}')
        if [ "${m:-0}" -ge 16 ] 2>/dev/null && [ "$scr" = 0 ] && [ "$sp" = 0 ] && [ "${v:-999}" -le 512 ] 2>/dev/null \
            && [ "${lds:-99999}" -le 65536 ] 2>/dev/null && [[ "$first" == v_mfma_f32_32x32x8* ]]; then
            ok "gfx942 $k: $m $first, $v VGPRs (of them $a AGPRs), LDS $lds B, no scratch: $((512 / v)) wave(s) a SIMD by registers"
        else bad "gfx942 $k: mfma '$m' first '$first' vgpr '$v' agpr '$a' lds '$lds' scratch '$scr' vspill '$sp'"; fi
    done
    expect 0 "isa --expect mfma passes on kernels.hip" $K isa --arch gfx942 --expect mfma
    has "$tmp/out" "^expect mfma: pass: 16 of $rows kernels hold mfma instructions: kg_gemm_mfma_f16, kg_gemm_mfma_bf16, kg_grouped_mfma_f16, kg_grouped_mfma_bf16, kg_grouped_wgrad_mfma_f16, kg_grouped_wgrad_mfma_bf16, kg_attn_fwd_mfma_f16, kg_attn_fwd_mfma_bf16, kg_qgemm_mfma_fp8_bf16, kg_qgrouped_mfma_fp8_bf16, kg_qgemm_mfma_bf8_bf16, kg_qgrouped_mfma_bf8_bf16, kg_qgemm_mfma_fp8_f32, kg_qgrouped_mfma_fp8_f32, kg_qgemm_mfma_bf8_f32, kg_qgrouped_mfma_bf8_f32$" \
        "--expect names the sixteen MFMA entries"
    expect 1 "isa --expect mfma fails on a -D KG_PORTABLE=1 build" $K isa --arch gfx942 --expect mfma --variant portable -D KG_PORTABLE=1
    has "$tmp/out" "^expect mfma: FAIL: none of the $((rows - 16)) kernels holds mfma instructions" "the failure says none of them has it"

    mkdir -p "$tmp/nodis"                           # clang-19, but no disassembler
    ln -sf "$(command -v clang-19)" "$tmp/nodis/clang-19"
    if [ ! -e /opt/rocm/llvm/bin/llvm-objdump ]; then
        PATH="$tmp/nodis" run $K isa --arch gfx942 --kernels "$tmp/mfma.hip" --expect mfma
        [ $rc -eq 1 ] && ok "no disassembler: --expect mfma never passes, even on MFMA code (exit 1)" \
            || bad "no disassembler, --expect mfma: exit $rc"
        has "$tmp/out" "^expect mfma: FAIL: no disassembler found" "it says there is no disassembler"
        PATH="$tmp/nodis" run $K isa --arch gfx942 --kernels "$tmp/mfma.hip"
        [ $rc -eq 0 ] && ! grep -q "^kg_" "$tmp/out" && grep -q "instruction counts are not available" "$tmp/out" \
            && ok "no disassembler, no --expect: exit 0, no counts, and it says so" || bad "no disassembler: exit $rc"
    fi
else
    echo "skip: clang-19 / llvm-objdump-19 / llvm-readobj-19 not installed (.ci/run installs them)"
fi

echo "== kgate isa: cuobjdump and nvdisasm output (stand-ins replaying lines of an H200 capture, CUDA 13.0)"
if ldconfig -p 2>/dev/null | grep -q libnvrtc || [ -e /usr/local/cuda/lib64/libnvrtc.so ]; then
    # Two kernels as each tool printed them, trimmed (and kg_hmma given a 1 KiB stack, as a kernel
    # with a local array had): kg_wgmma has 2 HGMMA among 6 instructions, kg_hmma 1 HMMA among 9
    # (a NOP inside counts, the two that pad its end do not).
    mkdir -p "$tmp/cuobjdump" "$tmp/nvdisasm"
    cat >"$tmp/cuobjdump/sass" <<'EOF'

	code for sm_90a
	.target	sm_90a

		Function : kg_wgmma
	.headerflags	@"EF_CUDA_ACCELERATORS EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                                /* 0x00000a00ff017b82 */
                                                                                         /* 0x000fe20000000800 */
        /*0060*/              @!P0 BRA 0xe80 ;                                           /* 0x0000000c00848947 */
        /*01a0*/                   WARPGROUP.ARRIVE ;                                    /* 0x00000000000079c5 */
        /*0200*/                   HGMMA.64x8x16.F32.BF16 R24, gdesc[UR12], R24, gsb0 ;  /* 0x000000000c1879f0 */
        /*0280*/                   HGMMA.64x8x16.F32.BF16 R24, gdesc[UR20], R24, gsb0 ;  /* 0x00000000141879f0 */
        /*0e80*/                   EXIT ;                                                /* 0x000000000000794d */
		Function : kg_hmma
	.headerflags	@"EF_CUDA_ACCELERATORS EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                                /* 0x00000a00ff017b82 */
        /*0010*/                   S2R R13, SR_TID.X ;                                   /* 0x00000000000d7919 */
        /*0070*/                   LDG.E R6, desc[UR4][R4.64] ;                          /* 0x0000000404067981 */
        /*00d0*/                   HMMA.16816.F32.BF16 R8, R8, R6, RZ ;                  /* 0x000000060808723c */
                                                                                         /* 0x004fe200000418ff */
        /*00f0*/                   NOP ;                                                 /* 0x0000000000007918 */
        /*0100*/                   FADD R9, R8, R9 ;                                     /* 0x0000000908097221 */
        /*0140*/                   STG.E desc[UR4][R6.64], R11 ;                         /* 0x0000000b06007986 */
        /*0150*/                   EXIT ;                                                /* 0x000000000000794d */
        /*0160*/                   BRA 0x160;                                            /* 0xfffffffc00fc7947 */
        /*0170*/                   NOP;                                                  /* 0x0000000000007918 */
        /*0180*/                   NOP;                                                  /* 0x0000000000007918 */
		..........
EOF
    cat >"$tmp/cuobjdump/res" <<'EOF'

Resource usage:
 Common:
  GLOBAL:0
 Function kg_wgmma:
  REG:30 STACK:0 SHARED:1280 LOCAL:0 CONSTANT[0]:556 TEXTURE:0 SURFACE:0 SAMPLER:0
 Function kg_hmma:
  REG:16 STACK:1024 SHARED:0 LOCAL:0 CONSTANT[0]:552 TEXTURE:0 SURFACE:0 SAMPLER:0
EOF
    cat >"$tmp/nvdisasm/out" <<'EOF'
	.target	sm_90a

//--------------------- .nv.info                  --------------------------
	.section	.nv.info,"",@"SHT_CUDA_INFO"
	//----- nvinfo : EIATTR_REGCOUNT
        /*0000*/ 	.byte	0x04, 0x2f
        /*0002*/ 	.short	(.L_1 - .L_0)
.L_0:
        /*0004*/ 	.word	index@(kg_hmma)
        /*0008*/ 	.word	0x00000010
	//----- nvinfo : EIATTR_FRAME_SIZE
        /*0010*/ 	.word	index@(kg_hmma)
        /*0014*/ 	.word	0x00000400
	//----- nvinfo : EIATTR_REGCOUNT
        /*001c*/ 	.word	index@(kg_wgmma)
        /*0020*/ 	.word	0x0000001e
	//----- nvinfo : EIATTR_MIN_STACK_SIZE
        /*004c*/ 	.word	index@(kg_hmma)
        /*0050*/ 	.word	0x00000400
	//----- nvinfo : EIATTR_MIN_STACK_SIZE
        /*0058*/ 	.word	index@(kg_wgmma)
        /*005c*/ 	.word	0x00000000
//--------------------- .text.kg_wgmma            --------------------------
	.section	.text.kg_wgmma,"ax",@progbits
        .global         kg_wgmma
kg_wgmma:
.text.kg_wgmma:
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0060*/              @!P0 BRA `(.L_x_7) ;
        /*01a0*/                   WARPGROUP.ARRIVE ;
        /*0200*/                   HGMMA.64x8x16.F32.BF16 R24, gdesc[UR12], R24, gsb0 ;
        /*0280*/                   HGMMA.64x8x16.F32.BF16 R24, gdesc[UR20], R24, gsb0 ;
.L_x_7:
        /*0e80*/                   EXIT ;
//--------------------- .text.kg_hmma             --------------------------
	.section	.text.kg_hmma,"ax",@progbits
.text.kg_hmma:
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   S2R R13, SR_TID.X ;
        /*0070*/                   LDG.E R6, desc[UR4][R4.64] ;
        /*00d0*/                   HMMA.16816.F32.BF16 R8, R8, R6, RZ ;
        /*00f0*/                   NOP ;
        /*0100*/                   FADD R9, R8, R9 ;
        /*0140*/                   STG.E desc[UR4][R6.64], R11 ;
        /*0150*/                   EXIT ;
.L_x_9:
        /*0160*/                   BRA `(.L_x_9);
        /*0170*/                   NOP;
        /*0180*/                   NOP;
//--------------------- .nv.shared.reserved.0     --------------------------
.nv.shared.reserved.0:
	.zero		1024
//--------------------- .nv.shared.kg_wgmma       --------------------------
	.section	.nv.shared.kg_wgmma,"aw",@nobits
.nv.shared.kg_wgmma:
	.zero		1280
EOF
    cat=$(command -v cat)                           # the stand-ins run with only themselves on PATH
    printf '#!/bin/sh\ncase "$1" in -sass) exec %s %s/sass;; -res-usage) exec %s %s/res;; *) exit 1;; esac\n' \
        "$cat" "$tmp/cuobjdump" "$cat" "$tmp/cuobjdump" >"$tmp/cuobjdump/cuobjdump"
    printf '#!/bin/sh\nexec %s %s/out\n' "$cat" "$tmp/nvdisasm" >"$tmp/nvdisasm/nvdisasm"
    chmod +x "$tmp/cuobjdump/cuobjdump" "$tmp/nvdisasm/nvdisasm"
    want_w="kg_wgmma 6 2 2 0 30 1280 0 0 HGMMA.64x8x16.F32.BF16"
    want_h="kg_hmma 9 1 0 1 16 0 1024 0 HMMA.16816.F32.BF16"
    for tool in cuobjdump nvdisasm; do
        [ $tool = nvdisasm ] && [ -e /usr/local/cuda/bin/cuobjdump ] && continue   # cuobjdump would be preferred
        PATH="$tmp/$tool" run $K isa --arch sm_90a --expect wgmma
        w=$(grep "^kg_wgmma " "$tmp/out" | tr -s ' ') h=$(grep "^kg_hmma " "$tmp/out" | tr -s ' ')
        [ "$rc" -eq 0 ] && [ "$w" = "$want_w" ] && [ "$h" = "$want_h" ] \
            && ok "$tool: wgmma and mma counted per kernel, registers, shared and stack read, --expect wgmma passes" \
            || bad "$tool: exit $rc; rows '$w' / '$h', want '$want_w' / '$want_h'"
        has "$tmp/out" "^expect wgmma: pass: 1 of 2 kernels hold wgmma instructions: kg_wgmma$" "$tool: --expect names kg_wgmma"
        PATH="$tmp/$tool" run $K isa --arch sm_90a --expect mfma
        [ "$rc" -eq 1 ] && grep -q "^expect mfma: FAIL: none of the 2 kernels holds mfma instructions (an AMD class)" "$tmp/out" \
            && ok "$tool: --expect mfma fails on NVIDIA code and says mfma is an AMD class" || bad "$tool --expect mfma: exit $rc"
    done
    PATH="$tmp/empty" run $K isa --arch sm_90a --expect mma
    if [ ! -e /usr/local/cuda/bin/cuobjdump ] && [ ! -e /usr/local/cuda/bin/nvdisasm ]; then
        [ "$rc" -eq 1 ] && grep -q "^expect mma: FAIL: no disassembler found (tried cuobjdump" "$tmp/out" \
            && ok "sm_90a without cuobjdump or nvdisasm: --expect never passes (exit 1)" || bad "sm_90a, no disassembler: exit $rc"
    fi
else
    echo "skip: no libnvrtc on this machine"
fi

echo "== sm_90a fast paths: wgmma in kernels.hip's sm_90a build (no GPU)"
# The Hopper entry points (kernels.hip, "GEMM, Hopper path", "Attention forward, Hopper path" and
# "Attention backward, Hopper path"): each
# must issue wgmma in its own body (a wgmma behind a call is serialized: ptxas C7510) and compile with no
# spill and no warning; the fused backward's entries without a mask at head dim 128 (80 query rows a
# step at 240 registers a consumer, 24 a producer) with at most 32 bytes of spill (a few descriptor
# words a step in the consumers, the dQ warp's loop counters: 28 bytes with ptxas 13.0; the entry
# measured 3% faster than 64 rows all the same, bench/HOPPER.md).
# the MX entries (absent from -D WG_BN=192 builds, whose halves of 96 columns spill)
MX90="kg_qgemm_sm90_mx_e4m3_bf16 kg_qgemm_sm90_mx_e5m2_bf16 kg_qgemm_sm90_mx_e4m3_f32 kg_qgemm_sm90_mx_e5m2_f32"
# the per-tensor / per-row fp8 entries at tiles of 128 x 192 (only in builds at WG_BN=256, the default)
N192="kg_qgemm_sm90_n192_e4m3_bf16 kg_qgemm_sm90_n192_e5m2_bf16 kg_qgemm_sm90_n192_e4m3_f32 kg_qgemm_sm90_n192_e5m2_f32"
FAST90="kg_gemm_sm90_bf16 kg_gemm_sm90_f16 kg_gemm_sm90_nn_bf16 kg_gemm_sm90_nn_f16 kg_gemm_sm90_tn_bf16
        kg_gemm_sm90_tn_f16 kg_gemm_sm90_tt_bf16 kg_gemm_sm90_tt_f16 kg_gemm_sm90_wgrad_bf16 kg_gemm_sm90_wgrad_f16
        kg_qgemm_sm90_e4m3_bf16 kg_qgemm_sm90_e5m2_bf16 kg_qgemm_sm90_blk_e4m3_bf16 kg_qgemm_sm90_blk_e5m2_bf16
        kg_qgemm_sm90_e4m3_f32 kg_qgemm_sm90_e5m2_f32 kg_qgemm_sm90_blk_e4m3_f32 kg_qgemm_sm90_blk_e5m2_f32
        $MX90 $N192
        kg_attn_fwd_sm90_d64_bf16 kg_attn_fwd_sm90_d128_bf16 kg_attn_fwd_sm90_d256_bf16
        kg_attn_fwd_sm90_d64_f16 kg_attn_fwd_sm90_d128_f16 kg_attn_fwd_sm90_d256_f16
        kg_attn_bwd_dkdv_sm90_d64_bf16 kg_attn_bwd_dkdv_sm90_d128_bf16 kg_attn_bwd_dkdv_sm90_d64_f16
        kg_attn_bwd_dkdv_sm90_d128_f16 kg_attn_bwd_dq_sm90_d64_bf16 kg_attn_bwd_dq_sm90_d128_bf16
        kg_attn_bwd_dq_sm90_d64_f16 kg_attn_bwd_dq_sm90_d128_f16 kg_attn_bwd_fused_sm90_d64_bf16
        kg_attn_bwd_fused_sm90_d64_f16 kg_attn_bwd_fused_sm90_d128_bf16 kg_attn_bwd_fused_sm90_d128_f16
        kg_attn_bwd_fused_sm90_d128nc_bf16 kg_attn_bwd_fused_sm90_d128nc_f16"
nfast=$(echo $FAST90 | wc -w)
# fast90_without LIST...: the entries of FAST90 not named in LIST (those a build leaves out)
fast90_without() {
    for e in $FAST90; do case " $* " in *" $e "*) ;; *) echo $e;; esac; done
}
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
ptxas=$(command -v ptxas || echo /usr/local/cuda/bin/ptxas)
# sm90_ptx_check [-D...]: compile kernels.hip to sm_90a PTX (nvcc, the NVRTC front end) and ptxas it;
# print one line per fast entry lacking wgmma.mma_async in its body, a spill, a ptxas warning, or a
# ptxas C75xx note (wgmma serialized: the kernel runs, its products one at a time; e.g. C7512 for
# -D FB_DQ_BN=128, short of registers, and C7514 for a read of accumulators before their wait).
# sm90_trans_check PTX: print one line per GEMM entry whose wgmma lack the transpose operands of its
# layout (kg_gemm_sm90_<dt>: NT, both K-major, "0, 0"; _nn_: "0, 1"; _tn_ and _wgrad_: "1, 1"; _tt_: "1, 0").
sm90_trans_check() {
    awk '/\.entry /{name=$3; sub(/\(.*/, "", name)} /\.func /{name=""}
         name ~ /^kg_gemm_sm90_/ && /wgmma\.mma_async/ {
             lay = name; sub(/^kg_gemm_sm90_/, "", lay); sub(/_?b?f16$/, "", lay)
             want = lay == "nn" ? "0, 1" : lay == "tn" || lay == "wgrad" ? "1, 1" : lay == "tt" ? "1, 0" : "0, 0"
             if (index($0, "p, 1, 1, " want "; }") == 0) bad[name]++ }
         END { for (n in bad) print n ": " bad[n] " wgmma without the transpose operands of its layout" }' "$1"
}
# sm90_regpool_check PTX LOG: one line per entry whose setmaxnreg asks for more registers than its
# launch holds (one producer warpgroup at its .dec count, the others at .inc, against ptxas's registers
# x .maxntid): setmaxnreg.inc then waits for registers no warpgroup will free, and the kernel hangs.
sm90_regpool_check() {
    awk 'FNR == NR { if ($0 ~ /Function properties for /) n = $NF
                     else if (n != "" && match($0, /Used [0-9]+ registers/)) { r[n] = substr($0, RSTART + 5, RLENGTH - 15) + 0; n = "" }
                     next }
         /\.entry /{ e = $3; sub(/\(.*/, "", e) } /\.func /{ e = "" }
         e != "" && /^\.maxntid/ { t[e] = $2 + 0 }
         e != "" && /setmaxnreg\.dec/ { v = $NF + 0; if (v > dec[e]) dec[e] = v }
         e != "" && /setmaxnreg\.inc/ { v = $NF + 0; if (v > inc[e]) inc[e] = v }
         END { for (e in inc) { need = 128 * dec[e] + (t[e] - 128) * inc[e]; have = r[e] * t[e]
                   if (!(e in dec) || !(e in t) || need > have)
                       print e ": setmaxnreg " dec[e] " / " inc[e] " needs " need " registers, its launch holds " have " (" r[e] " x " t[e] " threads): the consumers would wait for ever" } }' "$2" "$1"
}
sm90_ptx_check() {
    local fast="${FAST:-$FAST90}"
    "$nvcc" -arch=sm_90a -ptx -x cu "$@" kernels.hip -o "$tmp/k90.ptx" 2>"$tmp/k90.err" || { echo "nvcc failed: $(head -c 300 "$tmp/k90.err")"; return; }
    "$ptxas" -arch=sm_90a -v "$tmp/k90.ptx" -o "$tmp/k90.cubin" 2>"$tmp/k90.log" || { echo "ptxas failed: $(head -c 300 "$tmp/k90.log")"; return; }
    grep -iE "warning|C75[0-9][0-9]" "$tmp/k90.log" | head -3
    local nc80=1; case " $* " in *FB_NC_BM=64*) nc80=0;; esac   # the d128nc entries at 80 rows (the default)
    for e in $fast; do
        n=$(awk -v e="$e" '/\.entry /{name=$3; sub(/\(.*/, "", name)} /\.func /{name=""} name == e && /wgmma\.mma_async/{n++} END{print n + 0}' "$tmp/k90.ptx")
        min=4; case $e in *_mx_*) min=2;; esac   # MX: a K block's two halves
        [ "$n" -ge $min ] || echo "$e: $n wgmma.mma_async in its PTX body, want >= $min"
        spill=$(grep -A1 "Function properties for $e\$" "$tmp/k90.log" \
                | sed -n 's/.* \([0-9]*\) bytes spill stores, \([0-9]*\) bytes spill loads.*/\1 \2/p')
        allow=0; case $e in *_d128nc_*) [ $nc80 = 1 ] && allow=32;; esac
        [ -n "$spill" ] && [ "${spill% *}" -le $allow ] && [ "${spill#* }" -le $allow ] \
            || echo "$e: spills ${spill:-?} (bytes stored, loaded; or no ptxas report), allowed $allow"
    done
    sm90_trans_check "$tmp/k90.ptx"
    sm90_regpool_check "$tmp/k90.ptx" "$tmp/k90.log"
}
if [ -x "$nvcc" ] && [ -x "$ptxas" ]; then
    probs=$(sm90_ptx_check)
    [ -z "$probs" ] && ok "the $nfast sm_90a entry points hold wgmma.mma_async in their PTX (the layouts' with their transpose operands); ptxas: no spill (the 80-row d128nc entries: at most 32 bytes), no warning, no wgmma serialized" \
        || bad "sm_90a fast paths: $probs"
    grep -q "kg_attn_bwd_fused_sm90_smem_d64" "$tmp/k90.ptx" && grep -q "kg_attn_bwd_fused_sm90_smem_d128" "$tmp/k90.ptx" \
        && grep -q "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32" "$tmp/k90.ptx" \
        && grep -q "kg_attn_bwd_fused_sm90_bm_d64 = 128;" "$tmp/k90.ptx" && grep -q "kg_attn_bwd_fused_sm90_bm_d128nc = 80;" "$tmp/k90.ptx" \
        && ok "the default build publishes the fused backward's shared memory at head dims 64 and 128 (both run it; 128 query rows a step at 64, 80 at 128 without a mask), and its dQ warp adds with a TMA bulk reduce" \
        || bad "default sm_90a build: no kg_attn_bwd_fused_sm90_smem_d64 or _d128, no bm_d64 of 128 or bm_d128nc of 80, or no bulk reduce in the PTX"
    # fb_timer_entries PTX: the entries of PTX that read %globaltimer, one a line
    fb_timer_entries() { awk '/\.entry /{e = $3; sub(/\(.*/, "", e)} /\.func /{e = ""} e != "" && /%globaltimer/{n[e]++} END{for (e in n) print e}' "$1" | sort; }
    FUSED90=$(printf '%s\n' $FAST90 | grep "^kg_attn_bwd_fused_sm90_" | sort)
    grep -q "kg_attn_bwd_fused_sm90_stress;" "$tmp/k90.ptx" && [ -z "$(fb_timer_entries "$tmp/k90.ptx" | grep "^kg_attn_bwd_fused")" ] \
        && ok "the default build is no stress build: kg_attn_bwd_fused_sm90_stress 0, no fused entry reads the wall clock" \
        || bad "default sm_90a build: kg_attn_bwd_fused_sm90_stress not 0, or a fused entry reads %globaltimer"
    # planted: the fused backward's producer at 32 registers and its consumers at 240 (a real hang of
    # 2026-12-03: 128 x 32 + 256 x 240 = 65536 registers, its launch holds 168 x 384 = 64512)
    awk '/\.entry /{e = /kg_attn_bwd_fused_sm90_d128_bf16\(/} e{sub(/setmaxnreg\.dec\.sync\.aligned\.u32 40;/, "setmaxnreg.dec.sync.aligned.u32 32;")
         sub(/setmaxnreg\.inc\.sync\.aligned\.u32 232;/, "setmaxnreg.inc.sync.aligned.u32 240;")} 1' "$tmp/k90.ptx" >"$tmp/k90_reg.ptx"
    sm90_regpool_check "$tmp/k90_reg.ptx" "$tmp/k90.log" | grep -q "^kg_attn_bwd_fused_sm90_d128_bf16: setmaxnreg 32 / 240 needs 65536 registers, its launch holds 64512" \
        && ok "planted: setmaxnreg 32 / 240 in the fused backward (more registers than its launch holds: it hangs) is named" \
        || bad "planted setmaxnreg: not named: $(sm90_regpool_check "$tmp/k90_reg.ptx" "$tmp/k90.log")"
    # planted: the TN entry's first wgmma reads X K-major (its trans-a operand dropped)
    awk '/\.entry kg_gemm_sm90_tn_bf16/{e=1} e && !d && sub(/p, 1, 1, 1, 1; }/, "p, 1, 1, 0, 1; }"){d=1} 1' "$tmp/k90.ptx" >"$tmp/k90_tnsp.ptx"
    sm90_trans_check "$tmp/k90_tnsp.ptx" | grep -q "^kg_gemm_sm90_tn_bf16: 1 wgmma without" \
        && ok "planted: a TN entry with one wgmma lacking its trans-a operand is named" \
        || bad "planted trans-a: not named: $(sm90_trans_check "$tmp/k90_tnsp.ptx")"
    grep -qE "kg_qgemm_sm90_n192_smem = [1-9][0-9]*;" "$tmp/k90.ptx" \
        && ok "the default build publishes the 192-column fp8 entries' shared memory (kg_qgemm_sm90_n192_smem)" \
        || bad "default sm_90a build: kg_qgemm_sm90_n192_smem missing or 0"
    probs=$(FAST="$FUSED90" sm90_ptx_check -DFB_STRESS_NS=20000)
    [ -z "$probs" ] && grep -q "kg_attn_bwd_fused_sm90_stress = 1;" "$tmp/k90.ptx" \
        && [ "$(fb_timer_entries "$tmp/k90.ptx" | grep "^kg_attn_bwd_fused")" = "$FUSED90" ] \
        && ok "-D FB_STRESS_NS=20000 (a stress build: each dQ add held back, kgate fills the slabs with NaN) builds the same way, publishes kg_attn_bwd_fused_sm90_stress 1, and its $(echo $FUSED90 | wc -w) fused entries read the wall clock" \
        || bad "sm_90a, FB_STRESS_NS=20000: ${probs:-no kg_attn_bwd_fused_sm90_stress = 1, or fused entries without the stall: $(fb_timer_entries "$tmp/k90.ptx" | tr '\n' ' ')}"
    probs=$(FAST=$(fast90_without $MX90 $N192) sm90_ptx_check -DWG_BN=192 -DFB_DQ_ATOMIC=1)
    [ -z "$probs" ] && grep -qE "kg_qgemm_sm90_n192_smem( = 0)?;" "$tmp/k90.ptx" && ! grep -q "\.entry kg_qgemm_sm90_n192_" "$tmp/k90.ptx" \
        && ok "-D WG_BN=192 (128x192 tiles: wgmma n192, the fp8 per-tensor partial one n192 wide, blockwise halves n96; no MX or n192 entries, n192_smem 0) with -D FB_DQ_ATOMIC=1 (the 80-row entry's adds without locks) builds the same way: wgmma, no spill, no warning" \
        || bad "sm_90a, WG_BN=192 FB_DQ_ATOMIC=1: ${probs:-kg_qgemm_sm90_n192_smem not 0}"
    probs=$(sm90_ptx_check -DFB_FUSED=0)
    [ -z "$probs" ] && ! grep -q "kg_attn_bwd_fused_sm90_smem_d" "$tmp/k90.ptx" \
        && ok "-D FB_FUSED=0 (the backward's two passes at every head dim) builds the same way, and does not publish the fused pass's shared memory" \
        || bad "sm_90a, FB_FUSED=0: ${probs:-the build still publishes kg_attn_bwd_fused_sm90_smem_d64 or _d128}"
    probs=$(FAST=$(fast90_without $N192) sm90_ptx_check -DWG_CLUSTER=2 -DWG_STORE_V4=0 -DFB_DQ_ATOMIC=1 -DFB_ROTATE=1 -DWG_BN=128 -DFB_BM64=64 -DFB_NC_BM=64 -DATTN_PRE_STAGED=0 -DATTN_PRE_WARPS=0 -DFB_EPI_SMEM=1 -DFB_POST_EARLY=0)
    [ -z "$probs" ] && ! grep -q "\.entry kg_qgemm_sm90_n192_" "$tmp/k90.ptx" \
        && ok "the knobs' other side (-D WG_CLUSTER=2 -D WG_STORE_V4=0 -D FB_DQ_ATOMIC=1 -D FB_ROTATE=1 -D WG_BN=128 -D FB_BM64=64 -D FB_NC_BM=64 -D ATTN_PRE_STAGED=0 -D ATTN_PRE_WARPS=0 -D FB_EPI_SMEM=1 -D FB_POST_EARLY=0) builds the same way: wgmma, no spill, no warning, no n192 entries" \
        || bad "sm_90a, WG_CLUSTER=2 WG_STORE_V4=0 FB_DQ_ATOMIC=1 FB_ROTATE=1 WG_BN=128 FB_BM64=64 FB_NC_BM=64 ATTN_PRE_STAGED=0 ATTN_PRE_WARPS=0 FB_EPI_SMEM=1 FB_POST_EARLY=0: ${probs:-n192 entries in the build}"
    grep -q "\.reqnctapercluster 2, 1, 1" "$tmp/k90.ptx" && grep -q "multicast::cluster" "$tmp/k90.ptx" \
        && ok "-D WG_CLUSTER=2: the entries ask for clusters of 2 and load with TMA multicast" \
        || bad "-D WG_CLUSTER=2: no .reqnctapercluster 2, 1, 1 or no multicast in the PTX"
    probs=$(sm90_ptx_check -DFB_DQ_BN=128)
    printf '%s\n' "$probs" | grep -q "C7512.*kg_attn_bwd_dq_sm90_d128" \
        && ok "planted: a -D FB_DQ_BN=128 build (wgmma serialized for want of registers, ptxas C7512) is named" \
        || bad "-D FB_DQ_BN=128: the check did not name ptxas's C7512: $probs"
    probs=$(sm90_ptx_check -DKG_PORTABLE=1)
    n=$(printf '%s\n' "$probs" | grep -c "wgmma.mma_async in its PTX body")
    [ "$n" -eq "$nfast" ] && ok "planted: a -D KG_PORTABLE=1 build lacks the $nfast fast entries, and the check says so for each" \
        || bad "KG_PORTABLE build: the check named $n of $nfast missing entries: $probs"
else
    echo "skip: no nvcc/ptxas (the CUDA toolkit) on this machine"
fi
# fp4_map_check [SED]: kernels.hip's kg_e2m1_e4m3 (the MX entries read MXFP4 through it; SED applied: a
# planted fault) compiled as C; prints each E2M1 code whose E4M3 code is not ref.c's encoding of its value,
# then "compared N" (N: the codes codec listed, 16 when it works).
fp4_map_check() {
    awk '/>>> kgate-fp4/{p=1; next} /<<< kgate-fp4/{p=0} p' kernels.hip | sed "s/__device__ //; ${1:-}" >"$tmp/fp4map.h"
    printf '#include <stdio.h>\n#include "fp4map.h"\nint main(void) { for (unsigned c = 0; c < 16; c++) printf("0x%%02x 0x%%02x\\n", c, kg_e2m1_e4m3(c)); return 0; }\n' >"$tmp/fp4map.c"
    cc -std=c11 -Wall -Wextra -Werror -o "$tmp/fp4map" "$tmp/fp4map.c" 2>&1 || { echo "kg_e2m1_e4m3 does not compile as C"; return; }
    "$tmp/fp4map" >"$tmp/fp4map.out"
    local n=0
    while read -r code val; do
        n=$((n + 1))
        want=$($K codec e4m3 "$val" | awk '{print $2}') got=$(awk -v c="$code" '$1 == c {print $2}' "$tmp/fp4map.out")
        [ "$got" = "$want" ] || echo "E2M1 $code ($val): kernel ${got:-none}, ref.c $want"
    done < <($K codec e2m1 --decode-all)
    echo "compared $n"
}
probs=$(fp4_map_check)
[ "$probs" = "compared 16" ] && [ "$(wc -l <"$tmp/fp4map.out")" -eq 16 ] && ok "kg_e2m1_e4m3 (MXFP4 read as E4M3 by the sm_90a MX entries): all 16 E2M1 codes become ref.c's E4M3 code of their value" \
    || bad "kg_e2m1_e4m3: $probs"
probs=$(fp4_map_check 's/0x38u + 4 \* (m - 2)/0x38u + 8 * (m - 2)/')
[ "$(printf '%s\n' "$probs" | grep -c '^E2M1 ')" -eq 10 ] && printf '%s\n' "$probs" | grep -qx "compared 16" && printf '%s\n' "$probs" | grep -q "^E2M1 0x05 (3): kernel 0x50, ref.c 0x44" \
    && ok "planted: an E2M1 map with twice the exponent step is named code by code (the 10 codes above 1 in magnitude)" \
    || bad "planted fp4 map: not named as expected: $probs"

# SASS through kgate isa, where a cuobjdump is found: PATH, the CUDA toolkit, or the pip package
# nvidia-cuda-cuobjdump (.ci/run installs it).
cudir=""
for d in "$(dirname "$(command -v cuobjdump 2>/dev/null || echo /nonexistent/x)")" /usr/local/cuda/bin \
         "$(python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13", "bin"))' 2>/dev/null)"; do
    [ -n "$d" ] && [ -x "$d/cuobjdump" ] && { cudir=$d; break; }
done
if [ -n "$cudir" ] && { ldconfig -p 2>/dev/null | grep -q libnvrtc || [ -e /usr/local/cuda/lib64/libnvrtc.so ]; }; then
    PATH="$cudir:$PATH" run $K isa --arch sm_90a --expect wgmma
    [ $rc -eq 0 ] && ok "isa --arch sm_90a --expect wgmma passes on kernels.hip (cuobjdump from $cudir)" || bad "isa --expect wgmma: exit $rc: $(head -c 300 "$tmp/err")"
    for e in $FAST90; do
        row=$(grep "^$e " "$tmp/out" | tr -s ' ')
        w=$(echo "$row" | cut -d' ' -f4) first=$(echo "$row" | cut -d' ' -f10)
        case "$e:$first" in
            # MX: one k32 step of each half of the tile in the loop's body
            kg_qgemm_sm90_mx_e4m3*:QGMMA.64x128x32.F32.E4M3.E4M3|kg_qgemm_sm90_mx_e5m2*:QGMMA.64x128x32.F32.E5M2.E5M2)
                [ "${w:-0}" -ge 2 ] && ok "$e: $w wgmma in SASS, first $first" || bad "$e: wgmma column '$w'" ;;
            # the 192-column entries: one m64n192k32 a k32 step (the partial spans the tile)
            kg_qgemm_sm90_n192_e4m3*:QGMMA.64x192x32.F32.E4M3.E4M3|kg_qgemm_sm90_n192_e5m2*:QGMMA.64x192x32.F32.E5M2.E5M2)
                [ "${w:-0}" -ge 4 ] && ok "$e: $w wgmma in SASS, first $first" || bad "$e: wgmma column '$w'" ;;
            kg_gemm_*:HGMMA.64x256x16.F32*|kg_qgemm_*e4m3*:QGMMA.64x128x32.F32.E4M3.E4M3|kg_qgemm_*e5m2*:QGMMA.64x128x32.F32.E5M2.E5M2)
                [ "${w:-0}" -ge 4 ] && ok "$e: $w wgmma in SASS, first $first" || bad "$e: wgmma column '$w'" ;;
            # the attention forward: S = Q·K^T (D/16 steps) and O += P·V (BN/16 steps) per key block
            kg_attn_fwd_sm90_d*:HGMMA.64x*)
                [ "${w:-0}" -ge 12 ] && ok "$e: $w wgmma in SASS, first $first" || bad "$e: wgmma column '$w'" ;;
            # the backward: S and dP (D/16 steps each), then dV and dK (dK/dV pass) or dQ (dQ pass)
            kg_attn_bwd_*_sm90_d*:HGMMA.64x*)
                [ "${w:-0}" -ge 12 ] && ok "$e: $w wgmma in SASS, first $first" || bad "$e: wgmma column '$w'" ;;
            *) bad "$e: SASS row '$row'" ;;
        esac
    done
    PATH="$cudir:$PATH" run $K isa --arch sm_90a --expect wgmma --variant portable -D KG_PORTABLE=1
    [ $rc -eq 1 ] && grep -q "^expect wgmma: FAIL: none of the" "$tmp/out" \
        && ok "planted: isa --expect wgmma fails on the -D KG_PORTABLE=1 build (exit 1)" || bad "KG_PORTABLE isa: exit $rc"
else
    echo "skip: no cuobjdump (PATH, /usr/local/cuda/bin, pip nvidia-cuda-cuobjdump) or no libnvrtc"
fi

echo "== porting discipline: variants, compare, noise, the ledger and the budget (CPU device)"
L="$tmp/port.ledger"
G="gemm --device cpu --shape 48x40x56 --ledger $L"
# lines FILE : the number of lines of FILE (0 if absent)
lines() { [ -f "$1" ] && wc -l <"$1" || echo 0; }
expect 0 "compare v1 (-D GEMM_BM=32): gated, timed with an A/A copy" $K compare $G --variant v1 -D GEMM_BM=32 --rounds 4 --wide
has "$tmp/out" "^arm v1: kernels.hip \(embedded\) -DGEMM_BM=32, code object [0-9a-f]{12}" "compare names the candidate arm and its code object"
has "$tmp/out" "^A/A: reference copy / reference time [0-9.]+ \([0-9.]+ - [0-9.]+ over 4 rounds\): band \+-[0-9.]+%" "compare measures the A/A band when the ledger has none"
has "$tmp/out" "^compare: v1 / reference time [0-9.]+ \([0-9.]+ - [0-9.]+ over 4 rounds\), band \+-[0-9.]+% \(measured now\): parity \(faster/slower need at least 7 rounds\)$" "compare prints the ratio, its spread, the band and a verdict (parity below 7 rounds)"
nt=$(grep -cE "^    timer: median [0-9.]+ us \(IQR [0-9.]+-[0-9.]+, min [0-9.]+\), n [0-9]+, median RSE [0-9.]+%" "$tmp/out")
nr=$(grep -cE "^gemm bf16 NT 48x40x56 +C +pass " "$tmp/out")
[ "$nt" -eq 3 ] && [ "$nr" -eq 3 ] && ok "--wide: each of the 3 timed arms' rows has the timer's line" || bad "--wide: $nt timer lines for $nr passing rows, want 3 and 3"
[ "$(lines "$L")" -eq 3 ] && ok "one ledger line per measured arm (reference, candidate, A/A copy)" || bad "ledger has $(lines "$L") lines, want 3"
has "$L" '"role":"candidate".*"defines":"-DGEMM_BM=32".*"code_sha256":"[0-9a-f]{64}".*"verdict":"pass".*"ratio":[0-9.]+.*"band":[0-9.]+.*"gates":\{"allclose":\{"pass":true,"value":.*,"budget_used":1,"budget":3,"line_sha256":' "the candidate's line: defines, sha256, verdict, ratio, band, budget count, every gate value"
has "$L" '"role":"reference".*"aa_ratio":[0-9.]+' "the reference's line holds the A/A ratio"
ls "$L.objects/"*.txt >/dev/null 2>&1 && has "$(ls "$L.objects/"*.txt | head -1)" "^options: " "compile options and log kept beside the ledger" || bad "no $L.objects/*.txt"
expect 0 "compare v2 reuses the band from the ledger" $K compare $G --variant v2 -D GEMM_BM=48 --rounds 3
has "$tmp/out" "band \+-[0-9.]+% \(ledger line 1\)" "the second compare reuses the band of ledger line 1"
has "$tmp/out" "^gemm bf16 NT 48x40x56 +- +cached +verdict of ledger line 1 " "the reference's verdict is reused (cached) when its code object is unchanged"
expect 0 "compare v3 (diagnostic)" $K compare $G --variant v3 -D GEMM_BM=80 --diagnostic --rounds 2
has "$tmp/out" "diagnostic: not deliverable" "a diagnostic variant is marked not deliverable"
has "$L" '"arm":"v3".*"deliverable":false' "the ledger marks the diagnostic variant"
expect 4 "budget 3: a fourth new code object is refused" $K compare $G --variant v4 -D GEMM_BM=96 --rounds 2
one_line "the budget refusal"
has "$tmp/err" "budget spent: 3 of 3 candidate code objects are measured in .*'v4' \(code object [0-9a-f]{12}\) is new; the best correct checkpoint is '(v1|v2)'" "the refusal names the best correct (deliverable) checkpoint"
has "$tmp/err" "of the reference's time, (faster by|at parity|slower: a remaining gap of)" "the refusal says the checkpoint's standing and gap"
n0=$(lines "$L")
expect 0 "a re-run of a measured code object costs nothing" $K compare $G --variant v2-again -D GEMM_BM=48 --rounds 2
has "$tmp/out" "^gemm bf16 NT 48x40x56 +- +cached +verdict of ledger line [0-9]+ " "the re-run reuses the candidate's verdict (cached)"
tail -1 "$L" | grep -q '"arm":"v2-again".*"verdict":"cached"' && ok "the ledger says cached" || bad "last line: $(tail -1 "$L" | head -c 300)"
expect 0 "--budget 4 admits the fourth" $K compare $G --variant v4 -D GEMM_BM=96 --rounds 2 --budget 4
expect 0 "a new seed re-runs the gates" $K compare $G --variant v1 -D GEMM_BM=32 --rounds 2 --seed 7
grep -q "cached" "$tmp/out" && bad "a new seed must not reuse a verdict" || ok "a new seed is gated afresh"
expect 1 "a planted fault in the candidate: no ratio, no time" $K compare $G --variant v1 -D GEMM_BM=32 --rounds 2 --inject tile
grep -q "^compare:" "$tmp/out" && bad "a failed compare printed a ratio" || ok "a failed compare prints no ratio"
tail -1 "$L" | grep -q '"arm":"v1".*"inject":"tile".*"verdict":"fail","median_us":null' && ok "the ledger records the candidate's failure, without a time" || bad "last line: $(tail -1 "$L" | head -c 300)"
tail -2 "$L" | head -1 | grep -q '"arm":"reference".*"verdict":"pass"' && ok "the reference, which had no fault, is recorded as passing" || bad "reference line: $(tail -2 "$L" | head -1 | head -c 300)"
expect 0 "a planted-fault run is never reused as a verdict" $K compare $G --variant v1 -D GEMM_BM=32 --rounds 2
expect 0 "other conditions (a looser tolerance) are gated afresh" $K compare $G --variant v1 -D GEMM_BM=32 --rounds 2 --rtol 0.5 --why "a test"
grep -q "cached" "$tmp/out" && bad "a verdict was reused under other conditions" || ok "no verdict is reused under other conditions"
# A verdict is reused only from a line of the same kgate build: another binary (one byte
# appended: another SHA-256) gates afresh, as its gates may judge differently.
expect 0 "the same build reuses the verdicts" $K compare $G --variant v1 -D GEMM_BM=32 --rounds 2
has "$tmp/out" "cached" "the same build: cached"
cp "$K" "$tmp/kgate-other" && printf x >>"$tmp/kgate-other"
expect 0 "another kgate build gates afresh" "$tmp/kgate-other" compare $G --variant v1 -D GEMM_BM=32 --rounds 2
grep -q "cached" "$tmp/out" && bad "a verdict of another kgate build was reused" || ok "no verdict of another kgate build is reused"
has "$L" "\"kgate_sha256\":\"$(sha256sum <"$K" | cut -c1-64)\"" "each ledger line names the kgate build (its SHA-256)"
cp "$L" "$tmp/t.ledger" && sed -i '5s/"verdict":"pass"/"verdict":"fail"/' "$tmp/t.ledger"
expect 2 "a ledger that does not verify is never trusted" $K compare gemm --device cpu --shape 48x40x56 --ledger "$tmp/t.ledger" --variant v1 -D GEMM_BM=32 --rounds 2
one_line "an edited ledger"
has "$tmp/err" "does not verify at line 5" "the run names the line that breaks the chain"
printf '{"foo":1}\n' >"$tmp/u.ledger"
expect 2 "a file that is no ledger" $K gemm --device cpu --shape 8x8x8 --ledger "$tmp/u.ledger"
expect 0 "kgate ledger: the table" $K ledger --ledger "$L"
has "$tmp/out" "^ +2 .* v1 +candidate +[0-9a-f]{12} pass +eager .* [0-9.]+ +[0-9.]+ (faster|parity|slower) +1/3$" "the table has the path, ratio, band, verdict and budget count"
expect 0 "kgate ledger best" $K ledger best --ledger "$L"
has "$tmp/out" "^gemm bf16 NT 48x40x56: '(v1|v2|v2-again|v4)' \(code object" "ledger best names a deliverable checkpoint"
grep -q "'v3'" "$tmp/out" && bad "ledger best chose a diagnostic variant" || ok "ledger best never chooses a diagnostic variant"
expect 0 "ledger verify: intact" $K ledger verify --ledger "$L"
has "$tmp/out" "chain intact" "verify says the chain is intact"

echo "-- the ledger's chain catches edits, removals, reorders and torn lines"
cp "$L" "$tmp/e.ledger" && sed -i '2s/"verdict":"pass"/"verdict":"pasS"/' "$tmp/e.ledger"
expect 1 "verify: an edited line" $K ledger verify --ledger "$tmp/e.ledger"
has "$tmp/out" "line 2: its text does not match its line_sha256" "verify names the edited line"
expect 1 "the table of an edited ledger" $K ledger --ledger "$tmp/e.ledger"
has "$tmp/err" "line 2: its text does not match its line_sha256 .*the table stops before line 2" "the table names the edited line"
[ "$(grep -cE '^ +[0-9]+ ' "$tmp/out")" = 1 ] && ok "the table shows the one line before the edit, not the edited one" \
    || bad "the table of an edited ledger: $(grep -cE '^ +[0-9]+ ' "$tmp/out") rows"
python3 - "$L" "$tmp/f.ledger" <<'PY'
import hashlib, sys
lines = open(sys.argv[1]).read().split("\n")[:-1]
l = lines[1].replace('"verdict":"pass"', '"verdict":"pasS"')
body = l[:l.index(',"line_sha256":"')]
lines[1] = body + ',"line_sha256":"' + hashlib.sha256(body.encode()).hexdigest() + '"}'
open(sys.argv[2], "w").write("\n".join(lines) + "\n")
PY
expect 1 "verify: an edited line with its own hash recomputed" $K ledger verify --ledger "$tmp/f.ledger"
has "$tmp/out" "line 3: its prev is not the sha256 of the line before" "the next line's prev catches it"
expect 1 "the table of a ledger whose edited line has its own hash recomputed" $K ledger --ledger "$tmp/f.ledger"
[ "$(grep -cE '^ +[0-9]+ ' "$tmp/out")" = 1 ] && ! grep -q "pasS" "$tmp/out" \
    && ok "the table stops before the line whose link breaks: the edited line 2 is not shown" \
    || bad "the table of f.ledger: $(grep -cE '^ +[0-9]+ ' "$tmp/out") rows"
sed '3d' "$L" >"$tmp/g.ledger"
expect 1 "verify: a removed line" $K ledger verify --ledger "$tmp/g.ledger"
has "$tmp/out" "line 3: its seq is out of order" "verify names where a line was removed"
{ sed -n 1p "$L"; sed -n 3p "$L"; sed -n 2p "$L"; sed -n '4,$p' "$L"; } >"$tmp/h.ledger"
expect 1 "verify: reordered lines" $K ledger verify --ledger "$tmp/h.ledger"
has "$tmp/out" "line 2: its seq is out of order" "verify names where the order breaks"
{ cat "$L"; printf '\0\0\0\0garbage\n'; } >"$tmp/z.ledger"
expect 1 "verify: NUL bytes after the last line" $K ledger verify --ledger "$tmp/z.ledger"
has "$tmp/out" "holds a NUL byte" "verify names the NUL bytes"
{ cat "$L"; printf 'x'; } >"$tmp/x.ledger"
expect 1 "verify: a last line that is neither whole nor a line's start" $K ledger verify --ledger "$tmp/x.ledger"
has "$tmp/out" "line $(( $(lines "$L") + 1 )): not a ledger line" "verify names it"
sed -n 1p "$L" | sed 's/"prev":"0/"prev":"1/' >"$tmp/p.ledger"
expect 1 "verify: line 1 chained to a line before it" $K ledger verify --ledger "$tmp/p.ledger"
has "$tmp/out" "line 1: its prev is not 64 zeros, as the first line's is" "verify says line 1's prev must be zeros"
sed 's/$/\r/' "$L" >"$tmp/crlf.ledger"
expect 1 "verify: CRLF line ends" $K ledger verify --ledger "$tmp/crlf.ledger"
has "$tmp/out" "line 1: it ends in a carriage return" "verify names the carriage return"
# A process killed inside the write() of its lines can leave part of one (Linux copies a write a page
# at a time and stops between pages for SIGKILL; before 2026-12-05 that tail made the ledger refuse
# every later run).  Such a tail begins as the next line would: an interrupted append, no line.
n0=$(lines "$L")
head -c -20 "$L" >"$tmp/i.ledger"
expect 0 "verify: an interrupted append at the end" $K ledger verify --ledger "$tmp/i.ledger"
has "$tmp/out" "ends in an interrupted append \([0-9]+ bytes without a newline" "verify notes the interrupted append"
has "$tmp/out" ": $((n0 - 1)) lines, chain intact" "verify counts the whole lines alone"
expect 0 "the table of a ledger with an interrupted append" $K ledger --ledger "$tmp/i.ledger"
expect 0 "an append after an interrupted one" $K gemm --device cpu --shape 8x8x8 --ledger "$tmp/i.ledger"
has "$tmp/err" "ended in an interrupted append \([0-9]+ bytes without a newline.*\): cut off" "the append cuts it off, saying so"
expect 0 "verify after the cut" $K ledger verify --ledger "$tmp/i.ledger"
has "$tmp/out" ": $n0 lines, chain intact" "the new line follows the last whole one"
grep -q "interrupted" "$tmp/out" && bad "verify after the cut still notes a tail" || ok "no tail left after the cut"
python3 - "$L" "$tmp/e2.ledger" <<'PY'
import sys
lines = open(sys.argv[1]).read().split("\n")[:-1]
lines[-1] = lines[-1].replace('"verdict":"pass"', '"verdict":"fail"', 1)
open(sys.argv[2], "w").write("\n".join(lines))
PY
expect 1 "verify: an edited last line without its newline (whole, not an interrupted append)" $K ledger verify --ledger "$tmp/e2.ledger"
has "$tmp/out" "line $n0: its text does not match its line_sha256" "verify names it"
expect 2 "no append after it" $K gemm --device cpu --shape 8x8x8 --ledger "$tmp/e2.ledger"
head -c -1 "$L" >"$tmp/w.ledger"
expect 0 "verify: a last line without its newline" $K ledger verify --ledger "$tmp/w.ledger"
has "$tmp/out" ": $n0 lines, chain intact.*" "that line counts"
expect 0 "an append after a line without its newline" $K gemm --device cpu --shape 8x8x8 --ledger "$tmp/w.ledger"
expect 0 "verify after it" $K ledger verify --ledger "$tmp/w.ledger"
has "$tmp/out" ": $((n0 + 1)) lines, chain intact" "the newline added, the line kept, the new line chained to it"
# The real thing: a run killed inside its write(), after 100 bytes of its lines (KGATE_TEST_LEDGER_TEAR).
cp "$L" "$tmp/k.ledger"
KGATE_TEST_LEDGER_TEAR=100 $K gemm --device cpu --shape 8x8x8 --ledger "$tmp/k.ledger" >/dev/null 2>&1
[ "$(($(wc -c <"$tmp/k.ledger") - $(wc -c <"$L")))" = 100 ] && ok "KGATE_TEST_LEDGER_TEAR: killed after 100 bytes of its line" \
    || bad "the tear left $(($(wc -c <"$tmp/k.ledger") - $(wc -c <"$L"))) bytes, want 100"
expect 0 "verify after a run killed inside its write()" $K ledger verify --ledger "$tmp/k.ledger"
has "$tmp/out" "interrupted append \(100 bytes" "verify notes the killed run's 100 bytes"
expect 0 "the next run appends" $K gemm --device cpu --shape 8x8x8 --ledger "$tmp/k.ledger"
expect 0 "verify after it" $K ledger verify --ledger "$tmp/k.ledger"
has "$tmp/out" ": $((n0 + 1)) lines, chain intact" "the torn bytes gone, one new line"
truncate -s 300M "$tmp/big.ledger"
expect 2 "a ledger over 256 MiB" $K ledger verify --ledger "$tmp/big.ledger"
one_line "a ledger over 256 MiB"
rm -f "$tmp/big.ledger"
expect 2 "--ledger ''" $K gemm --device cpu --shape 8x8x8 --ledger ""
one_line "--ledger ''"
expect 2 "--ledger in a directory that does not exist" $K gemm --device cpu --shape 8x8x8 --ledger "$tmp/nodir/sub/l"
one_line "--ledger in a directory that does not exist"
[ -e "$tmp/nodir" ] && bad "kgate made the ledger's missing directory" || ok "the missing directory is not made"

echo "-- concurrent appends and kill -9 never tear or interleave a line"
C="$tmp/conc.ledger"
for p in 1 2 3 4; do
    ( for i in 1 2 3 4 5; do $K noise gemm --device cpu --shape 16x24x8 --rounds 2 --ledger "$C" >/dev/null 2>&1; done ) &
done
wait
[ "$(lines "$C")" -eq 40 ] && ok "4 processes x 5 noise runs x 2 arms: 40 lines" || bad "concurrent: $(lines "$C") lines, want 40"
expect 0 "verify after concurrent appends" $K ledger verify --ledger "$C"
# 6 compares started at once on a budget of 2: two candidates get in, the others exit 4 having
# appended nothing, and each line's budget count is the ledger's as it was appended (before
# 2026-12-05 counts were taken before the lock, and losers left their reference lines).
Bd="$tmp/budget.ledger"
for i in 1 2 3 4 5 6; do
    ( $K compare gemm --device cpu --shape 16x16x16 --variant b$i -D KG_B=$i --ledger "$Bd" --budget 2 --rounds 2 \
        >/dev/null 2>&1; echo $? >"$tmp/b$i" ) &
done
wait
[ "$(cat "$tmp"/b[1-6] | sort | tr '\n' ' ')" = "0 0 4 4 4 4 " ] && ok "budget 2, 6 at once: 2 ran, 4 exited 4" \
    || bad "budget 2, 6 at once: exits $(cat "$tmp"/b[1-6] | tr '\n' ' ')"
python3 - "$Bd" <<'PY' && ok "6 lines, each with the ledger's budget count" || bad "the budget counts of concurrent compares"
import json, sys
seen, lines = set(), [json.loads(l) for l in open(sys.argv[1])]
for d in lines:
    if d["role"] == "candidate": seen.add(d["code_sha256"])
    assert d["budget_used"] == len(seen), (d["seq"], d["budget_used"], len(seen))
assert len(lines) == 6, len(lines)
PY
KGATE_TEST_LEDGER_HOLD=30 $K gemm --device cpu --shape 16x16x16 --ledger "$C" >/dev/null 2>"$tmp/hold" &
holder=$!
for i in $(seq 100); do grep -q "holding the ledger lock" "$tmp/hold" && break; sleep 0.1; done
( $K gemm --device cpu --shape 16x16x16 --ledger "$C" >/dev/null 2>&1; echo $? >"$tmp/waiter" ) &
waiter=$!
sleep 0.5
kill -9 $holder; wait $holder 2>/dev/null
wait $waiter
[ "$(cat "$tmp/waiter")" = 0 ] && ok "kill -9 of the lock holder: the waiting process appends" || bad "waiter exit $(cat "$tmp/waiter")"
[ "$(lines "$C")" -eq 41 ] && ok "the killed process wrote nothing, the other one line" || bad "$(lines "$C") lines, want 41"
(   # busy appenders, then kill -9 of them all mid-run (the shell's "Killed" notes go to /dev/null)
    pids=""
    for p in 1 2 3 4; do
        ( while :; do $K noise gemm --device cpu --shape 16x24x8 --rounds 2 --ledger "$C" >/dev/null 2>&1; done ) &
        pids="$pids $!"
    done
    n0=$(wc -l <"$C")   # kill them once appends are landing (up to 60 s on a loaded machine)
    for i in $(seq 120); do [ "$(wc -l <"$C")" -gt "$n0" ] && break; sleep 0.5; done
    sleep 1
    kill -9 $pids
    pkill -9 -f -- "--ledger $C"
    wait
    sleep 0.5
    pkill -9 -f -- "--ledger $C"
) 2>/dev/null
expect 0 "verify after kill -9 of 4 busy appenders" $K ledger verify --ledger "$C"
[ "$(lines "$C")" -gt 41 ] && ok "appends landed before the kills ($(lines "$C") lines)" || bad "no appends during the kill test"

echo "-- porting options: bad input"
expect 2 "-D without --variant" $K gemm --device cpu --shape 8x8x8 -D GEMM_BM=32
expect 2 "--variant without a change" $K gemm --device cpu --shape 8x8x8 --variant x
expect 2 "a -D that is not NAME=VALUE" $K compare $G --variant x -D "A B=1"
expect 2 "compare without a candidate" $K compare $G
expect 2 "compare without a case" $K compare --variant x -D A=1
expect 2 "--budget 0" $K compare $G --variant x -D A=1 --budget 0
expect 2 "--rounds 1" $K noise $G --rounds 1
expect 2 "--expect with an unknown class" $K gemm --device cpu --shape 8x8x8 --expect tensor
expect 2 "--expect on a command that runs no kernel" $K ledger --ledger "$L" --expect mma
expect 1 "--expect as a gate: the CPU device runs no code object" $K compare $G --variant v1 -D GEMM_BM=32 --rounds 2 --expect wgmma
has "$tmp/out" "^    FAIL isa: expect wgmma: the CPU device runs ref.c, no code object" "the isa gate fails with its reason"
has "$tmp/out" "1 case failed --expect" "the summary counts the case that failed --expect"
grep -q "^compare:" "$tmp/out" && bad "a compare that failed --expect printed a ratio" || ok "a compare that failed --expect prints no ratio"
tail -1 "$L" | grep -q '"isa":{"expect":"wgmma","pass":false' && ok "the ledger line carries the isa answer" || bad "last line: $(tail -1 "$L" | head -c 300)"
expect 2 "ledger with an unknown subcommand" $K ledger frob --ledger "$L"
expect 2 "ledger verify of a missing file" $K ledger verify --ledger "$tmp/none.ledger"
echo "-- the ledger path: read-only for reading commands, checked before any work"
(cd "$tmp/elsewhere" && rm -f kgate.ledger && "$tmp/bin/kgate" ledger best) >"$tmp/out" 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && [ ! -e "$tmp/elsewhere/kgate.ledger" ] && ok "ledger best without a ledger: exit 2, nothing created" \
    || bad "ledger best, no ledger: exit $rc, $(ls "$tmp/elsewhere")"
for sub in "" verify best; do
    (cd "$tmp/elsewhere" && "$tmp/bin/kgate" ledger $sub) >"$tmp/out" 2>"$tmp/err"; rc=$?
    [ $rc -eq 2 ] && [ ! -e "$tmp/elsewhere/kgate.ledger" ] && grep -q "no ledger at kgate.ledger" "$tmp/err" \
        && ok "ledger $sub, no ledger: one clear line, exit 2, nothing created" || bad "ledger $sub: exit $rc: $(cat "$tmp/err")"
    for p in "$tmp" /dev/full /dev/zero /dev/null; do
        expect 2 "ledger $sub --ledger $p" timeout 20 $K ledger $sub --ledger "$p"
        has "$tmp/err" "not a regular file" "ledger $sub --ledger $p: says it is not a regular file"
    done
done
mkfifo "$tmp/fifo.ledger"
expect 2 "ledger verify on a FIFO (does not block)" timeout 20 $K ledger verify --ledger "$tmp/fifo.ledger"
# Files kgate reads whole (a shapes file, --kernels, a dump's files) are opened without
# waiting for a writer: a pipe that gives data is read, a FIFO with no writer is refused
# after 10 s with one line, not waited on for ever.
printf 'gemm --dtype bf16 --shape 8x8x8\n' >"$tmp/one.txt"
run $K all --device cpu --shapes /dev/stdin <"$tmp/one.txt"
[ $rc -eq 0 ] && ok "all --shapes /dev/stdin (a redirected file)" || bad "--shapes /dev/stdin: exit $rc"
run bash -c "cat '$tmp/one.txt' | $K all --device cpu --shapes /dev/stdin"
[ $rc -eq 0 ] && ok "all --shapes /dev/stdin from a pipe" || bad "--shapes /dev/stdin from a pipe: exit $rc"
mkfifo "$tmp/fifo.in"
expect 2 "all --shapes on a FIFO with no writer (does not block)" timeout 30 $K all --device cpu --shapes "$tmp/fifo.in"
one_line "all --shapes FIFO"
has "$tmp/err" "cannot read shapes file .*: it is a FIFO that gave no data for 10 s" "--shapes FIFO: says what it is"
expect 2 "isa --kernels on a FIFO with no writer (does not block)" timeout 30 $K isa --arch gfx942 --kernels "$tmp/fifo.in"
has "$tmp/err" "cannot read --kernels .*: it is a FIFO that gave no data" "--kernels FIFO: says what it is"
mkdir -p "$tmp/fifodump" && mkfifo "$tmp/fifodump/manifest.json"
expect 2 "diff with a FIFO for a manifest (does not block)" timeout 30 $K diff "$tmp/fifodump" "$tmp/fifodump"
has "$tmp/err" "manifest.json: cannot read: it is a FIFO that gave no data" "diff: says the manifest is a FIFO"
cp "$L" "$tmp/ro.ledger" && chmod 444 "$tmp/ro.ledger"
expect 0 "ledger best on a read-only ledger" $K ledger best --ledger "$tmp/ro.ledger"
: >"$tmp/empty.ledger"
for sub in "" verify best; do expect 0 "ledger $sub on an empty ledger" $K ledger $sub --ledger "$tmp/empty.ledger"; done
has "$tmp/out" "holds no lines: no checkpoint yet" "ledger best on an empty ledger says so"
expect 0 "ledger on a read-only ledger" $K ledger --ledger "$tmp/ro.ledger"
for p in "$tmp" /dev/null; do
    expect 2 "compare --ledger $p: refused before measuring" $K compare gemm --device cpu --shape 16x16x16 --variant u -D X=1 --rounds 2 --ledger "$p"
    one_line "compare --ledger $p"
    grep -q "round" "$tmp/err" && bad "compare --ledger $p measured before refusing" || ok "compare --ledger $p: nothing measured"
done
touch "$tmp/o.ledger.objects"
expect 2 "compare with LEDGER.objects a file: refused before measuring" $K compare gemm --device cpu --shape 16x16x16 --variant u -D X=1 --rounds 2 --ledger "$tmp/o.ledger"
has "$tmp/err" "o.ledger.objects: it is a regular file, not a directory" "the objects directory's problem is named"
one_line "compare with LEDGER.objects a file (no progress lines: nothing measured)"
[ ! -e "$tmp/o.ledger" ] && ok "the refused run created no ledger" || bad "a refused run created $tmp/o.ledger"
# a ledger of two lines (each over 1 KiB), then an append that the file size limit stops
for s in 16x16x16 16x16x17; do $K gemm --device cpu --shape $s --ledger "$tmp/full.ledger" >/dev/null 2>&1; done
before=$(cksum <"$tmp/full.ledger"); kib=$((($(stat -c %s "$tmp/full.ledger") + 1023) / 1024))
( trap '' XFSZ; ulimit -f $kib; exec $K gemm --device cpu --shape 16x16x16 --ledger "$tmp/full.ledger" ) >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -eq 6 ] && ok "a ledger append that cannot be written (file size limit): exit 6" || bad "ledger over ulimit -f: exit $rc: $(head -c 300 "$tmp/err")"
has "$tmp/err" "writing the ledger .* failed: .*nothing appended" "the failed append says nothing was appended"
[ "$(cksum <"$tmp/full.ledger")" = "$before" ] && ok "the failed append left the ledger's bytes as they were" \
    || bad "the failed append changed the ledger"
expect 0 "the ledger is whole after the failed append" $K ledger verify --ledger "$tmp/full.ledger"
has "$tmp/out" ": 2 lines, chain intact" "... both its lines kept"
echo "-- compare: faster/slower need at least 7 rounds"
expect 0 "compare over 2 rounds" $K compare gemm --device cpu --shape 16x16x16 --variant r2 -D X=1 --rounds 2 --ledger "$tmp/r.ledger"
has "$tmp/out" "^compare: r2 / reference .* over 2 rounds.*: parity \(faster/slower need at least 7 rounds\)$" "2 rounds: parity, and the line says why"
expect 0 "noise: the A/A band" $K noise gemm --device cpu --shape 32x32x32 --rounds 3 --ledger "$tmp/n.ledger" --json
has "$tmp/out" '^\{"case":"gemm bf16 NT 32x32x32","rounds":3,"aa_ratio":[0-9.]+,"aa_lo":[0-9.]+,"aa_hi":[0-9.]+,"band":[0-9.]+' "noise --json: the A/A ratio, spread and band"
has "$tmp/out" '"median_rse":[0-9.e-]+,"throttled":0,"sm_clock_mhz":null' "--json time: RSE of the median, throttled count, SM clock (none on the CPU)"
echo "-- bench/vs_vendor.py's kgate runs: gated in the first round, the verdict reused from its ledger after"
# torch stands in as an empty module: kgate_us, the part that runs kgate, needs none of it
run python3 - "$K" "$tmp/vsv" <<'PY'
import importlib.util, os, sys, types
torch = types.ModuleType("torch")
for t in ("bfloat16", "float16", "float32", "float8_e4m3fn"):
    setattr(torch, t, None)
sys.modules["torch"] = torch
spec = importlib.util.spec_from_file_location("vs_vendor", "bench/vs_vendor.py")
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
kg, led, args = sys.argv[1], os.path.join(sys.argv[2], "kgate.ledger"), "attn --heads 2 --dim 32 --seq 64 --bwd --device cpu"
os.makedirs(sys.argv[2])
print("rounds:", " ".join(m.kgate_us(kg, args, 120, "dQ", rnd, led)[1]["verdict"] for rnd in range(3)))
print("rounds, --repeat 2:", " ".join(m.kgate_us(kg, args + " --repeat 2", 120, "dQ", rnd, led)[1]["verdict"] for rnd in range(2)))
def refused(a, rnd):
    m.RUNS.clear()
    try:
        m.kgate_us(kg, a, 120, "dQ", rnd, led)
        return "accepted"
    except RuntimeError as e:
        return "refused (%s)" % str(e)[-60:]
print("round 0 on a verdict already in the ledger:", refused(args, 0))
print("a planted fault in round 1:", refused(args + " --inject tile", 1))
PY
has "$tmp/out" "^rounds: pass cached cached$" "vs_vendor: round 1 runs the gates, rounds 2 and 3 reuse the verdict from the run's ledger"
has "$tmp/out" "^rounds, --repeat 2: pass cached$" "vs_vendor: a --repeat run is gated on its own (its conditions differ), then reused"
has "$tmp/out" "^round 0 on a verdict already in the ledger: refused .*verdict cached" "vs_vendor: the first round must run the gates itself"
has "$tmp/out" "^a planted fault in round 1: refused" "vs_vendor: a failed gate in a later round is refused (a fault always runs the gates)"

echo "== reliability: a case that faults or hangs is one failed case; the table; help"
# The CPU candidate made to fault (SIGSEGV), fail as a device does (exit 5 with its error) or spin
# (KGATE_TEST_CPU_FAULT, README "Test hooks"): each costs its case alone, the rest run and pass.
cat >"$tmp/rel.txt" <<'EOF2'
gemm --dtype f32 --shape 33x17x9
grouped --groups 0,5,33 --shape 24x16
gemm --shape 40x24x56 --bwd
attn --seq 20:30 --heads 2:1 --dim 16 --causal
gemm --dtype f16 --layout TN --shape 31x7x5
EOF2
KGATE_TEST_CPU_FAULT="segv=grouped;spin=attn;error=33x17" run $K all --device cpu --shapes "$tmp/rel.txt" --timeout 2
[ "$rc" -eq 5 ] && ok "all with a fault, a device error and a hang: exit 5" \
    || bad "fault/hang run: exit $rc, want 5; $(head -c 300 "$tmp/err")"
has "$tmp/out" "^grouped bf16 NT G=3 M=38\[0\.\.33\] N=24 K=16 +- +fault +the worker died of signal 11" "a SIGSEGV: verdict fault, the signal named"
has "$tmp/out" "^gemm f32 NT 33x17x9 +- +fault +running the kernel failed: KGATE_TEST_CPU_FAULT error" "a device error: verdict fault, its message named"
has "$tmp/out" "^attn bf16 b1 s20:30 h2:1 d16 causal +- +hung +a launch did not end within the watchdog's 2 s \(--timeout\)" "a spin: verdict hung after --timeout, named"
has "$tmp/out" "^gemm f16 TN 31x7x5 +C +pass" "the case after the hang ran and passed"
has "$tmp/out" "^gemm bf16 NT 40x24x56 bwd +dB +pass" "the case between the faults ran and passed"
has "$tmp/out" "^kgate: hung: attn bf16 b1 s20:30 h2:1 d16 causal \($tmp/rel.txt:4\): " "the summary names the hung case and its line"
has "$tmp/out" "^kgate: fault: grouped bf16 NT G=3 M=38\[0\.\.33\] N=24 K=16 \($tmp/rel.txt:2\): " "the summary names the faulted case and its line"
has "$tmp/out" "^kgate: 5 cases \(2 faulted, 1 hung\), 4 outputs: 4 passed, 0 failed; [0-9.]+ s$" "the last line: counts and the wall time"
KGATE_TEST_CPU_FAULT="segv=grouped" run $K all --device cpu --shapes "$tmp/rel.txt" --json
has "$tmp/out" '^\{"case":"grouped bf16 NT G=3 M=38\[0\.\.33\] N=24 K=16","where":"[^"]*rel.txt:2","verdict":"fault","error":"the worker died of signal 11' "--json: a fault is a JSON line"
[ "$rc" -eq 5 ] && ok "--json fault: exit 5" || bad "--json fault: exit $rc"
KGATE_TEST_CPU_FAULT="spin=33x17" run $K all --device cpu --shapes "$tmp/rel.txt" --inject nan
[ "$rc" -eq 5 ] && grep -q "FAIL nan-inf (check)" "$tmp/out" && grep -q " hung " "$tmp/out" \
    && ok "a hang and failed gates (nan-inf named): exit 5" || bad "hang + failed gates: exit $rc, want 5, with a FAIL nan-inf and a hung row"
RL="$tmp/rel.ledger"
expect 0 "compare: a clean candidate appends" $K compare gemm --device cpu --shape 40x24x56 --variant v1 -D X=1 --rounds 2 --ledger "$RL"
sum0=$(cksum <"$RL")
KGATE_TEST_CPU_FAULT="spin=40x24" run $K compare gemm --device cpu --shape 40x24x56 --variant v2 -D X=2 --rounds 2 --ledger "$RL" --timeout 1
[ "$rc" -eq 5 ] && ok "compare with a spinning candidate: exit 5" || bad "compare hang: exit $rc"
has "$tmp/out" "^kgate: hung: gemm bf16 NT 40x24x56 \(command line\)" "compare: the hang is named"
KGATE_TEST_CPU_FAULT="segv=40x24" run $K noise gemm --device cpu --shape 40x24x56 --rounds 2 --ledger "$RL"
[ "$rc" -eq 5 ] && ok "noise with a faulting arm: exit 5" || bad "noise fault: exit $rc"
[ "$(cksum <"$RL")" = "$sum0" ] && ok "compare and noise that faulted or hung appended nothing" || bad "the ledger changed after a fault"
expect 0 "ledger verify after the faults" $K ledger verify --ledger "$RL"
for t in 0 -1 abc 1e9; do expect 2 "--timeout $t" $K gemm --device cpu --shape 8x8x8 --timeout "$t"; done
# The default table fits 120 columns; a label longer than the case column gets its own line.
cat >"$tmp/wide.txt" <<'EOF2'
gemm --shape 64x48x40
grouped --dtype mxfp8 --mx-rule up --out f32 --groups 3,0,5,7,11,13,17,19,23,29,31,37,41,43,47,53,59,61,67,71,73 --shape 64x64 --inputs normal
grouped --layout NN --groups 3,0,5,7,11 --shape 24x16 --bwd
attn --seqlens 0,7,30:20 --heads 2:1 --dim 16 --causal --bwd
EOF2
expect 0 "all: a table with a long label" $K all --device cpu --shapes "$tmp/wide.txt"
long=$(awk 'length($0) > 120' "$tmp/out" | head -3)
[ -z "$long" ] && ok "the default table fits 120 columns" || bad "lines over 120 columns: $long"
cols=$(grep -E ' (C|dA|dB|O|LSE|dQ|dK|dV) +pass ' "$tmp/out" | awk '{ print index($0, " pass ") }' | sort -u | wc -l)
[ "$cols" -eq 1 ] && ok "every row's verdict starts in the same column" || bad "verdict columns differ: $(grep ' pass ' "$tmp/out")"
has "$tmp/out" "^grouped mxfp8 up->f32 NT G=21 M=710\[0\.\.73\] N=64 K=64 normal$" "a label longer than the case column is printed on a line of its own"
has "$tmp/out" "^ {56} C +pass " "... and its row starts below it under an empty case cell"
has "$tmp/out" "^case +out verdict binding gate \(use\) +median-us +TFLOP/s +%peak$" "the default header"
has "$tmp/out" "^gemm bf16 NT 64x48x40 +C +pass +[a-z-]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +-$" "a row: the binding gate and its use, time, TFLOP/s"
grep -q "geometry\|timer:" "$tmp/out" && bad "the default table printed geometry or timer lines" || ok "no geometry or timer lines by default"
expect 0 "--wide" $K all --device cpu --shapes "$tmp/wide.txt" --wide
has "$tmp/out" "allclose +same-prec +nan/inf +unwritten" "--wide: every gate's column"
has "$tmp/out" "^    timer: median" "--wide: the timer lines"
expect 1 "a planted fault in the default table" $K gemm --device cpu --shape 64x48x40 --inject tile
has "$tmp/out" "^gemm bf16 NT 64x48x40 +C +FAIL +[a-z-]+ +(inf|>99|[0-9.]+) " "a failed row names its binding gate"
has "$tmp/out" "^    FAIL allclose \(check\): " "a failure prints its failed gates"
# Help and version.
expect 0 "--version" $K --version
has "$tmp/out" "^kgate [0-9.]+ \(embedded kernels.hip [0-9a-f]{12}; built with " "--version: version, kernels.hip, compiler"
for c in all gemm grouped attn compare noise ledger devices selftest isa codec diff; do
    expect 0 "$c --help" $K $c --help
    has "$tmp/out" "^usage: kgate $c " "$c --help: its usage"
    has "$tmp/out" "^  $c " "$c --help: its entry"
    # and it ends with the exit codes, then the environment (its last lines)
    tail -n 16 "$tmp/out" | grep -q "^exit: 0 every gate passed" && tail -n 6 "$tmp/out" | grep -q "^environment: " \
        && ok "$c --help ends with the exit codes and the environment" || bad "$c --help does not end with exit and environment"
done
expect 0 "gemm --help" $K gemm --help
has "$tmp/out" "^  --layout L " "gemm --help: the case options"
has "$tmp/out" "^  --timeout S " "gemm --help: the run options"
expect 2 "frob --help" $K frob --help
# A command's help lists the run options it takes and no others (OPT_ROWS): the command,
# an option its help must list, and (a regex) options it refuses, which it must not list.
help_takes() {
    expect 0 "$1 --help" $K "$1" --help
    has "$tmp/out" "^  $2 " "$1 --help lists $2"
    grep -qE "^  --($3) " "$tmp/out" && bad "$1 --help lists an option $1 refuses ($3)" || ok "$1 --help leaves out $3"
}
help_takes compare "--rounds N" "dump|cpu-sums"
help_takes ledger "--ledger FILE" "budget|variant|rounds"
help_takes isa "--kernels FILE" "repeat|wide|rounds"
has "$tmp/out" "^  --device N +isa: GPU N's arch" "isa --help: its own --device entry"
grep -q "^  --device N|cpu" "$tmp/out" && bad "isa --help offers --device cpu, which isa refuses" || ok "isa --help does not offer cpu"
expect 0 "gemm --help" $K gemm --help
grep -q "^  --device N  " "$tmp/out" && bad "gemm --help shows isa's --device entry" || ok "gemm --help leaves out isa's --device entry"
has "$tmp/out" "one --scaling, mx\)" "gemm --help: the MX dtypes' --scaling mx"
help_takes selftest "--variant NAME" "repeat|inject|json"
# ... and each op's help the case options of that op alone (before 2026-12-05 gemm's listed --heads);
# compare and noise take any op's.
help_takes gemm "--shape MxNxK" "groups|seq|batch|seqlens|heads|dim|causal|scale"
help_takes grouped "--groups LIST" "seq|batch|seqlens|heads|dim|causal|scale"
help_takes attn "--batch B" "layout|shape|groups"
help_takes noise "--groups LIST" "cpu-sums"
has "$tmp/out" "^  --heads Hq\[:Hkv\] " "noise --help lists attn's case options too"
help_takes all "--cpu-sums fp32\|sm90a" "rounds"

echo "== every GPU of a node: a device list on the CPU device (each entry its own kgate, compared)"
# Three CPU workers on three small cases: bitwise agreement, the speed rule, a faulting worker, --json.
cat >"$tmp/node.txt" <<'EOF2'
gemm --dtype f32 --shape 33x17x9
grouped --groups 0,5,33 --shape 24x16
attn --seq 20:30 --heads 2:1 --dim 16 --causal
EOF2
NODE=(all --shapes "$tmp/node.txt" --repeat 1)
expect 0 "three CPU entries agree" $K "${NODE[@]}" --device cpu,cpu,cpu
has "$tmp/out" "^entry device verdict cases +disagree speed +identity$" "the summary table's head"
for i in 0 1 2; do
    has "$tmp/out" "^$i +cpu +pass +3/3 +0 +[0-9.]+ +[^ ]" "summary row of entry $i: pass, 3/3, no disagreement, a speed"
done
has "$tmp/out" "^entry 1: --device cpu: .*: exit 0 \(pass\)" "each entry's section"
has "$tmp/out" "^gemm f32 NT 33x17x9 +C +pass +[0-9.]+ +[0-9a-f]{12}$" "an entry's row: verdict, time, digest"
has "$tmp/out" "^kgate: node: 3 entries: exit 0$" "the last line"
rows=$(grep -Eo "^attn [^ ]+ [^ ]+ [^ ]+ [^ ]+ [^ ]+ causal +O +pass +[0-9.]+ +[0-9a-f]{12}$" "$tmp/out")
n=$(printf '%s\n' "$rows" | awk 'NF {print $NF}' | sort -u | wc -l); nr=$(printf '%s\n' "$rows" | grep -c .)
[ "$nr" -eq 3 ] && [ "$n" -eq 1 ] && ok "the three entries' attn O digests are one" || bad "attn O digests across clean entries: $n distinct in $nr rows, want 1 in 3"
expect 1 "bitflip@1: caught" $K "${NODE[@]}" --device cpu,cpu,cpu --inject bitflip@1
has "$tmp/out" "^1 +cpu +pass +3/3 +3 " "bitflip@1: entry 1 passes every gate, 3 outputs disagree"
has "$tmp/out" "^0 +cpu +pass +3/3 +0 " "bitflip@1: entry 0 agrees"
has "$tmp/out" "^kgate: entry 1 \(--device cpu\) disagrees: gemm f32 NT 33x17x9 C: its digest differs from the majority's$" "bitflip@1: entry 1 and the case named"
grep -q "^kgate: entry [02] .*disagrees" "$tmp/out" && bad "bitflip@1: another entry named" || ok "bitflip@1: no other entry named"
expect 1 "bitflip@0 on two entries: no majority" $K gemm --shape 33x17x9 --device cpu,cpu --inject bitflip@0
has "$tmp/out" "^kgate: entry 0 .*: no digest has a majority$" "two that differ: entry 0 named"
has "$tmp/out" "^kgate: entry 1 .*: no digest has a majority$" "two that differ: entry 1 named"
expect 1 "slow@2: caught" $K "${NODE[@]}" --device cpu,cpu,cpu --inject slow@2
has "$tmp/out" "^2 +cpu +pass +3/3 +0 +[0-9.]+ SLOW " "slow@2: entry 2 flagged SLOW"
has "$tmp/out" "^kgate: entry 2 \(--device cpu\) is slow: its time per case is [0-9.]+ x the median entry's$" "slow@2: named"
grep -q "^[01] .* SLOW " "$tmp/out" && bad "slow@2: another entry flagged" || ok "slow@2: no other entry flagged"
expect 5 "fault@1: a faulting worker" $K "${NODE[@]}" --device cpu,cpu,cpu --inject fault@1
has "$tmp/out" "^1 +cpu +fault +0/3 " "fault@1: entry 1's verdict is fault"
has "$tmp/out" "^0 +cpu +pass +3/3 +0 " "fault@1: entry 0 unaffected"
has "$tmp/out" "^2 +cpu +pass +3/3 +0 " "fault@1: entry 2 unaffected"
has "$tmp/out" "^  kgate: fault: gemm f32 NT 33x17x9 \($tmp/node.txt:1\): the worker died of signal 11" "fault@1: its lost case named"
KGATE_TEST_CPU_FAULT="spin=33x17" run $K "${NODE[@]}" --device cpu,cpu --timeout 1
[ "$rc" -eq 5 ] && ok "a case that hangs on every entry: exit 5" || bad "a hang on a list: exit $rc, want 5"
has "$tmp/out" "^0 +cpu +hung +2/3 " "a hang: entry 0's verdict hung, its other cases passed"
has "$tmp/out" "^1 +cpu +hung +2/3 " "a hang: entry 1's verdict hung"
expect 5 "fault without a list: every case faults" $K gemm --device cpu --shape 8x8x8 --inject fault
has "$tmp/out" "^gemm bf16 NT 8x8x8 +- +fault +the worker died of signal 11" "fault: verdict fault"
expect 1 "--json: bitflip@2" $K "${NODE[@]}" --device cpu,cpu,cpu --inject bitflip@2 --json
has "$tmp/out" '^\{"entry":2,"case":"gemm f32 NT 33x17x9",' "--json: each case line tagged with its entry"
has "$tmp/out" '"sha256":"[0-9a-f]{64}"' "--json: each output's sha256"
has "$tmp/out" '^\{"node":\{"devices":"cpu,cpu,cpu","slow_ratio":1.25,"slow_ratio_cpu":3,"slow_ratio_shared":3,"entries":\[' "--json: the node object"
has "$tmp/out" '\{"entry":2,"device":"cpu",[^]]*"disagree":\[\{"case":"gemm f32 NT 33x17x9","output":"C","sha256":"[0-9a-f]{64}","no_majority":false\}' "--json: entry 2's disagreement"
has "$tmp/out" '"exit":1\}\}$' "--json: the node's exit"
[ "$(grep -c '^{"entry":' "$tmp/out")" -eq 9 ] && ok "--json: 9 tagged case lines" || bad "--json: $(grep -c '^{"entry":' "$tmp/out") tagged lines, want 9"
grep -q '^{"node"' "$tmp/err" && bad "--json: the node object on stderr" || ok "--json: the node object on stdout, not stderr"
# stdout is JSON alone, one object a line, and each output of each case line has its digest;
# the tables went to stderr
if python3 -c 'import json,re,sys
lines = open(sys.argv[1]).read().splitlines()
objs = [json.loads(l) for l in lines]
cases = [o for o in objs if "entry" in o and "case" in o]
assert len(cases) == 9 and len(objs) == 10, (len(cases), len(objs))
assert all(o["outputs"] and all(re.fullmatch("[0-9a-f]{64}", x["sha256"]) for x in o["outputs"]) for o in cases)' "$tmp/out" 2>"$tmp/py" \
    && grep -q '^entry device verdict' "$tmp/err" && ! grep -q '^entry device verdict' "$tmp/out"; then
    ok "--json: stdout is 10 JSON objects, every output of the 9 case lines with its sha256; the tables on stderr"
else bad "--json with a device list: $(tail -c 300 "$tmp/py")"; fi
expect 0 "a repeated entry and a case command" $K gemm --shape 40x24x56 --bwd --device cpu,cpu
expect 0 "one entry on its own (no list) still runs one device" $K gemm --shape 8x8x8 --device cpu
# A candidate whose verdict the ledger holds is "cached" on the second run: a case passed (before
# 2026-12-05 the summary counted it as not passed, 0/1).
run $K gemm --shape 8x8x8 --device cpu,cpu --variant v1 -D KG_NODE_TEST=1 --ledger "$tmp/node.ledger"
expect 0 "a device list, a candidate's second run" $K gemm --shape 8x8x8 --device cpu,cpu --variant v1 \
    -D KG_NODE_TEST=1 --ledger "$tmp/node.ledger"
has "$tmp/out" "^1 +cpu +pass +1/1 " "a device list, a cached candidate: its case counted as passed"
for d in 0,,1 x , cpu, 1025,0 0,-1 "cpu ,cpu"; do
    expect 2 "--device '$d'" $K gemm --shape 8x8x8 --device "$d"
    one_line "--device '$d'"
done
if [ $gpu -eq 0 ]; then
    run $K gemm --shape 8x8x8 --device 0,cpu
    [ "$rc" -eq 3 ] && ok "--device 0,cpu without a GPU runtime: the GPU entry's exit 3" || bad "--device 0,cpu: exit $rc, want 3"
    has "$tmp/out" "^0 +0 +error +0/0 " "--device 0,cpu: entry 0's verdict error"
    has "$tmp/out" "^1 +cpu +pass +1/1 " "--device 0,cpu: the CPU entry ran"
    has "$tmp/out" "^  kgate: no GPU runtime found" "--device 0,cpu: entry 0's reason"
    expect 3 "--device all without a GPU runtime" $K gemm --shape 8x8x8 --device all
    one_line "--device all without a GPU runtime"
fi
# What every entry would refuse alike is refused once, before any entry starts (before 2026-12-05 each
# entry printed it, then the node table).
for a in "--inject bitflip" "--inject bitflip@3" "--inject slow@x" "--inject frob@1" "--dump $tmp/nd" "--seeds 2" \
         "--graph" "--kernels $tmp/no-such.hip" "--rtol 0.5" "--inject round@1 --dtype f32" "--variant v" \
         "--inject race" "--inject graph-diff"; do
    read -r -a extra <<<"$a"
    expect 2 "a list with $a" $K gemm --shape 8x8x8 --device cpu,cpu,cpu "${extra[@]}"
    one_line "a list with $a"
done
printf 'gemm --shape 0x1x1\n' >"$tmp/bad-shapes.txt"
expect 2 "a list with a bad shapes file" $K all --shapes "$tmp/bad-shapes.txt" --device cpu,cpu
one_line "a list with a bad shapes file"
for a in "--inject bitflip" "--inject slow" "--inject bitflip@0"; do
    read -r -a extra <<<"$a"
    expect 2 "one device with $a" $K gemm --shape 8x8x8 --device cpu "${extra[@]}"
    one_line "one device with $a"
done
expect 2 "compare on a list" $K compare gemm --shape 8x8x8 --device cpu,cpu --variant v -D A=1
one_line "compare on a list"

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

if [ "${KGATE_QUICK:-0}" != 1 ]; then
    echo "== kgate all --device cpu (the whole shapes.txt; its cases over 100 GFLOP, a GPU's, skipped)"
    expect 0 "kgate all --device cpu" $K all --device cpu
    # the summary: every line of shapes.txt a case, every output of the cases that ran passed,
    # and most cases ran (those over the CPU device's 100 GFLOP are skipped)
    lines=$(grep -cvE '^[[:space:]]*(#|$)' shapes.txt)
    sum=$(grep -E '^kgate: [0-9]+ cases' "$tmp/out")
    if [[ $sum =~ ^kgate:\ ([0-9]+)\ cases,\ ([0-9]+)\ outputs:\ ([0-9]+)\ passed,\ 0\ failed(\;\ ([0-9]+)\ cases?\ skipped)? ]] \
        && [ "${BASH_REMATCH[1]}" -eq "$lines" ] && [ "${BASH_REMATCH[3]}" -eq "${BASH_REMATCH[2]}" ] \
        && ran=$((lines - ${BASH_REMATCH[5]:-0})) && [ "$ran" -ge $((lines / 2)) ] && [ "${BASH_REMATCH[2]}" -ge "$ran" ]; then
        ok "every case of shapes.txt passes on the CPU: $ran of $lines ran, ${BASH_REMATCH[2]} outputs passed"
    else bad "kgate all --device cpu: the summary '$sum' ($lines lines in shapes.txt)"; fi
    cp "$tmp/out" "$tmp/all_cpu"
fi

if [ $gpu -eq 1 ]; then
    echo "== GPU present: kgate selftest and kgate all"
    expect 0 "kgate selftest (GPU)" $K selftest
    expect 0 "kgate all (GPU)" $K all
    lines=$(grep -cvE '^[[:space:]]*(#|$)' shapes.txt)
    has "$tmp/out" "^kgate: $lines cases, [0-9]+ outputs: [0-9]+ passed, 0 failed" "every case of shapes.txt passes on the GPU"
    echo "== GPU: a kernel that writes out of bounds and one that spins cost their cases alone"
    # A --kernels copy with two planted bugs: kg_attn_fwd writes 2^40 elements past O (head dim 64
    # only), and kg_gemm_f32 waits on a shared flag that nothing sets (a deadlocked barrier).
    python3 - kernels.hip "$tmp/faulty.hip" <<'PY'
import sys
s = open(sys.argv[1]).read()
fwd = "        kg_attn_fwd<D>(Q, K, V, O, LSE, cu_q, cu_k, B, Hq, Hkv, Dh, scale, causal);"
gemm = "    kg_gemm_simt_f32(X, Y, C, M, N, K, sxm, sxk, syk, syn, scm, scn,"
assert s.count(fwd) == 1 and s.count(gemm) == 1
s = s.replace(fwd, "        if (Dh == 64 && kg_tid() == 0) O[(kg_i64)1 << 40] = O[0]; \\\n" + fwd)
s = s.replace(gemm, "    __shared__ volatile int kg_never;\n    if (kg_tid() == 0) kg_never = 0;\n"
              "    __syncthreads();\n    while (kg_never == 0) { }\n" + gemm)
open(sys.argv[2], "w").write(s)
PY
    cat >"$tmp/gpu_faults.txt" <<'EOF2'
gemm --dtype bf16 --shape 512x512x512
gemm --dtype f32 --shape 256x256x256
attn --dtype bf16 --seq 256 --heads 4 --dim 64
grouped --dtype bf16 --groups 0,64,128 --shape 256x128
attn --dtype f16 --seq 100:200 --heads 4:2 --dim 128 --causal --bwd
gemm --dtype f16 --layout TN --shape 1000x1000x1000
EOF2
    run $K all --shapes "$tmp/gpu_faults.txt" --kernels "$tmp/faulty.hip"
    [ "$rc" -eq 5 ] && ok "GPU: all with an out-of-bounds write and a spin: exit 5" || bad "GPU faults: exit $rc, want 5"
    has "$tmp/out" "^kgate: fault: attn bf16 b1 s256:256 h4:4 d64 \(.*gpu_faults.txt:3\): .*ILLEGAL_ADDRESS" \
        "GPU: the out-of-bounds write is a fault, the device's error named"
    has "$tmp/out" "^kgate: hung: gemm f32 NT 256x256x256 \(.*gpu_faults.txt:2\): a launch did not end within the watchdog's 10 s \(the case's default; --timeout S sets it\)" \
        "GPU: the spin is hung after the default watchdog"
    has "$tmp/out" "^kgate: 6 cases \(1 faulted, 1 hung\), 8 outputs: 8 passed, 0 failed" "GPU: every other case passed"
    cp "$tmp/out" "$tmp/gpu_faults.out"
fi

echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
