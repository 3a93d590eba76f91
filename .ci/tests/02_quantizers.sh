# .ci/tests/02_quantizers.sh — the quantizers: every code decoded, every boundary encoded, ml_dtypes as an
#   oracle.
# Sourced by tests.sh, in order, in its shell: its helpers (ok, bad, run, expect, has, ...), $tmp and,
# from 01_build.sh on, $K.

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
