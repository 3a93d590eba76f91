# .ci/tests/04_clean.sh — clean runs pass every gate: every dtype and layout, tails, size-1 dims, backward.
# Sourced by tests.sh, in order, in its shell: its helpers (ok, bad, run, expect, has, ...), $tmp and,
# from 01_build.sh on, $K.

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
