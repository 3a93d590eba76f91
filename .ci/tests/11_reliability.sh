# .ci/tests/11_reliability.sh — reliability: a fault or a hang costs its case alone; the table; help; a
#   node's devices.
# Sourced by tests.sh, in order, in its shell: its helpers (ok, bad, run, expect, has, ...), $tmp and,
# from 01_build.sh on, $K.

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
