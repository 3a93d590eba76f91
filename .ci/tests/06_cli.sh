# .ci/tests/06_cli.sh — the command line: looser tolerances need --why; bad input gets one line and its exit
#   code.
# Sourced by tests.sh, in order, in its shell: its helpers (ok, bad, run, expect, has, ...), $tmp and,
# from 01_build.sh on, $K.

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
