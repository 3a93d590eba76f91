#!/usr/bin/env bash
# tests.sh — kgate's one test command.  Needs no GPU: every gate is proved on
# --device cpu against clean runs and planted faults, the references against
# closed forms, the CLI against bad input, kernels.hip against NVRTC (sm_90a)
# and clang-19 (gfx942) when they are installed, and the CPU paths under
# ASan/UBSan.  With a GPU present it also runs `kgate all` and `kgate selftest`
# on it.  The last line is "N passed, N failed"; the exit status is 0 only if
# nothing failed.
#
#   ./tests.sh            everything
#   KGATE_QUICK=1 ./tests.sh   skip `kgate all --device cpu` (minutes on 2 cores)
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

# one_line DESCRIPTION : the last command's stderr is exactly one line
one_line() {
    local n
    n=$(wc -l <"$tmp/err")
    if [ "$n" -eq 1 ]; then ok "$1: one line: $(cat "$tmp/err")"
    else bad "$1: stderr has $n lines: $(head -c 400 "$tmp/err")"; fi
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

echo "== selftest on the CPU device: formats, references, sampling, every gate vs every fault"
expect 0 "kgate selftest --device cpu" $K selftest --device cpu
has "$tmp/out" "selftest: [0-9]+ passed, 0 failed" "selftest reports 0 failed"

echo "== every planted fault is caught by its gate (full and sampled checks, every dtype)"
for shape in 300x260x70 1500x1300x1200; do
    for dt in f32 f16 bf16; do
        for fault in tile:worst-tile tail:allclose nan:nan-inf bias:bias drop:allclose \
                     row:allclose unwritten:written; do
            kind=${fault%%:*} gate=${fault#*:}
            expect 1 "--inject $kind, $dt $shape" $K gemm --device cpu --dtype $dt --shape $shape \
                --inject $kind
            has "$tmp/out" "FAIL $gate \(check\)" "--inject $kind, $dt $shape: '$gate' names the fault"
            if grep -E "^gemm " "$tmp/out" | grep -vqE " FAIL .* - +- +- +- +- +-$"; then
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
    if grep -E "^(grouped|attn) " "$tmp/out" | grep -E " FAIL " | grep -qvE " - +- +- +- +- +-$"; then
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
has "$tmp/out" "tile \([0-9]+,[0-9]+\)" "and its worst tile"

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
has "$tmp/out" "^gemm bf16 NT 1500x1300x1200 +C +pass .* [0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9]+ +[0-9.]+ +-$" \
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
expect 0 "attn --repeat 3" $K attn --device cpu --seq 113:203 --heads 4:2 --dim 64 --causal --bwd --repeat 3
has "$tmp/out" "repeat: +3 runs per case" "the repeat count is printed"
n=$(grep -cE "^attn .* pass( .*)? 3 " "$tmp/out")
[ "$n" -eq 5 ] && ok "every attention output shows 3 bitwise-equal runs" || bad "--repeat 3: $n of 5 rows show 3 runs"
KGATE_TEST_ATOMICS=1 run $K attn --device cpu --seq 113:203 --heads 4:2 --dim 64 --bwd --repeat 3 --json
if [ $rc -eq 0 ] && python3 -c 'import json,sys
o=json.loads(open(sys.argv[1]).read())
assert all(x["repeat"]["atomics"] and x["repeat"]["runs"]==3 for x in o["outputs"])' "$tmp/out" 2>"$tmp/py"; then
    ok "kernels that declare atomics: each repeated run is gated instead of compared"
else bad "atomics: exit $rc $(cat "$tmp/py")"; fi
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
expect 0 "seed changes inputs, still passes" $K gemm --device cpu --shape 100x100x100 --seed 7
has "$tmp/out" "seed: +7" "the seed is printed"

echo "== tolerances: looser needs --why"
expect 2 "--rtol 0.05 without --why" $K gemm --device cpu --shape 64x64x64 --rtol 0.05
one_line "--rtol without --why"
expect 0 "--rtol 0.05 with --why" $K gemm --device cpu --shape 64x64x64 --rtol 0.05 --why "bf16 epilogue"
has "$tmp/out" "why: bf16 epilogue" "--why is printed in the report"
expect 0 "tighter --atol needs no --why" $K gemm --device cpu --shape 64x64x64 --atol 0.001
expect 1 "nontrivial: atol so large the reference is below it" $K gemm --device cpu --shape 64x64x64 \
    --atol 100 --rtol 0 --why "test"
has "$tmp/out" "FAIL nontrivial" "the nontrivial gate fires"

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
bad_usage "unknown option"          $K gemm --device cpu --shape 8x8x8 --frob
bad_usage "missing value"           $K gemm --device cpu --shape
bad_usage "bad seed"                $K gemm --device cpu --shape 8x8x8 --seed abc
bad_usage "negative rtol"           $K gemm --device cpu --shape 8x8x8 --rtol -1 --why x
bad_usage "unknown fault"           $K gemm --device cpu --shape 8x8x8 --inject bogus
bad_usage "bad device"              $K gemm --device gpu0 --shape 8x8x8
bad_usage "--kernels on the CPU"    $K gemm --device cpu --shape 8x8x8 --kernels kernels.hip
bad_usage "unreadable shapes file"  $K all --device cpu --shapes "$tmp/none.txt"
printf 'gemm --dtype bf16 --shape 8x8x8\n\ngemm --dtype bf16 --shape 8x8\n' >"$tmp/bad.txt"
bad_usage "shapes line that does not parse" $K all --device cpu --shapes "$tmp/bad.txt"
has "$tmp/err" "bad.txt:3: --shape 8x8" "the bad line is named by file and line"
printf 'gemm --shape 8x8x8 --device cpu\n' >"$tmp/bad.txt"
bad_usage "run option on a shapes line" $K all --device cpu --shapes "$tmp/bad.txt"
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
expect 0 "--help" $K --help
has "$tmp/out" "exit: 0 every gate passed" "--help states the exit codes"
for w in all gemm grouped attn devices selftest isa --device --kernels --seed --full --rtol --atol --why \
         --inject --json --repeat --dtype --layout --shape --bwd --groups --seq --seqlens --heads --dim \
         --causal --scale --batch tile tail nan bias drop row unwritten outside group mask race; do
    grep -q -- "$w" "$tmp/out" || bad "--help does not mention $w"
done
gpu=0
if $K devices >/dev/null 2>&1; then gpu=1; fi
if [ $gpu -eq 0 ]; then
    expect 3 "no GPU runtime: default device" $K gemm --shape 8x8x8
    one_line "no GPU runtime"
    has "$tmp/err" "tried libcuda.so.1.*libamdhip64" "the no-runtime line names every library tried"
    expect 3 "kgate devices with no GPU runtime" $K devices
    has "$tmp/out" "^cpu " "kgate devices still lists the CPU"
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
else
    echo "skip: no libnvrtc on this machine"
fi
expect 2 "isa --arch with an unknown prefix" $K isa --arch vega
if ! ldconfig -p 2>/dev/null | grep -q libhiprtc; then
    expect 3 "isa --arch gfx942 without hiprtc" $K isa --arch gfx942
    has "$tmp/err" "no hiprtc run-time compiler found \(tried libhiprtc.so" "names the hiprtc libraries tried"
fi

echo "== clang-19 compiles kernels.hip for gfx942 (AMD, no HIP headers)"
if command -v clang-19 >/dev/null && command -v llvm-objdump-19 >/dev/null; then
    if clang-19 -x hip --offload-arch=gfx942 -nogpulib -nogpuinc --cuda-device-only --no-gpu-bundle-output \
        -O3 -Wall -Werror kernels.hip -o "$tmp/k.co" >"$tmp/err" 2>&1; then
        ok "clang-19 compiles kernels.hip for gfx942 without warnings"
        llvm-objdump-19 -d "$tmp/k.co" >"$tmp/dis"
        for k in kg_gemm_f32 kg_gemm_f16 kg_gemm_bf16 kg_grouped_bf16 kg_grouped_wgrad_f16 kg_attn_fwd_bf16 \
                 kg_attn_fwd_f16 kg_attn_bwd_pre_bf16 kg_attn_bwd_dkdv_bf16 kg_attn_bwd_dq_f16; do
            has "$tmp/dis" "<$k>:" "gfx942 code object has $k"
        done
        n=$(grep -cE "v_(pk_)?fma" "$tmp/dis")
        [ "$n" -gt 0 ] && ok "gfx942: the portable GEMM accumulates with $n v_fma/v_pk_fma" \
            || bad "gfx942: no v_fma in the code object"
    else
        bad "clang-19 gfx942: $(head -c 800 "$tmp/err")"
    fi
else
    echo "skip: clang-19 / llvm-objdump-19 not installed (.ci/run installs them)"
fi

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
    asan 1 "--inject mask" attn --device cpu --seq 60:70 --heads 2 --dim 64 --causal --bwd --inject mask
    asan 1 "--inject group, sampled" grouped --device cpu --groups 0,1000,1,700 --shape 1300x1200 --inject group
    asan 2 "bad shapes line" all --device cpu --shapes "$tmp/bad.txt"
    asan 2 "absurd shape" gemm --device cpu --shape 99999999x1x1
else
    bad "kgate-asan build: $(head -c 800 "$tmp/build")"
fi

if [ "${KGATE_QUICK:-0}" != 1 ]; then
    echo "== kgate all --device cpu (the whole shapes.txt; minutes on 2 cores)"
    expect 0 "kgate all --device cpu" $K all --device cpu
    has "$tmp/out" "cases, [0-9]+ outputs: [0-9]+ passed, 0 failed" "every case of shapes.txt passes on the CPU"
    cp "$tmp/out" "$tmp/all_cpu"
fi

if [ $gpu -eq 1 ]; then
    echo "== GPU present: kgate selftest and kgate all"
    expect 0 "kgate selftest (GPU)" $K selftest
    expect 0 "kgate all (GPU)" $K all
    has "$tmp/out" "passed, 0 failed" "every case of shapes.txt passes on the GPU"
fi

echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
