# .ci/tests/05_trust.sh — trust: input distributions, a wrong scale index, rounding conformance, the oracle,
#   seeds; kgate diff; --graph's refusals and planted faults.
# Sourced by tests.sh, in order, in its shell: its helpers (ok, bad, run, expect, has, ...), $tmp and,
# from 01_build.sh on, $K.

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
