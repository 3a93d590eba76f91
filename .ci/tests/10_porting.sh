# .ci/tests/10_porting.sh — the porting discipline: variants, compare, noise, the ledger and the budget.
# Sourced by tests.sh, in order, in its shell: its helpers (ok, bad, run, expect, has, ...), $tmp and,
# from 01_build.sh on, $K.

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
# bench/vs_vendor.py as module m, torch standing in as an empty module: the parts tested here
# (kgate_us, which runs kgate, and the vendor's timer rule) need none of it
cat > "$tmp/vsv_load.py" <<'PY'
import importlib.util, os, sys, types
torch = types.ModuleType("torch")
for t in ("bfloat16", "float16", "float32", "float8_e4m3fn"):
    setattr(torch, t, None)
sys.modules["torch"] = torch
spec = importlib.util.spec_from_file_location("vs_vendor", "bench/vs_vendor.py")
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
PY
run python3 - "$tmp/vsv_load.py" "$K" "$tmp/vsv" <<'PY'
import os, sys
exec(open(sys.argv[1]).read())
kg, led, args = sys.argv[2], os.path.join(sys.argv[3], "kgate.ledger"), "attn --heads 2 --dim 32 --seq 64 --bwd --device cpu"
os.makedirs(sys.argv[3])
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
echo "-- bench/vs_vendor.py times the vendor by kgate's timer rule"
printf '#!/bin/sh\necho "cpu  x (--device cpu)"\necho "0    NVIDIA H100 80GB HBM3, 132 SMs/CUs, clock 1980 MHz, 79.2 GiB (CUDA), PCI 0000:00:06.0, UUID GPU-x"\n' > "$tmp/fakekg"
printf '#!/bin/sh\necho "cpu  x (--device cpu)"\n' > "$tmp/fakekg0"
chmod +x "$tmp/fakekg" "$tmp/fakekg0"
run python3 - "$tmp/vsv_load.py" "$tmp/fakekg0" "$tmp/fakekg" <<'PY'
import sys
exec(open(sys.argv[1]).read())
def stop_at(times, wall, fixed=None):   # the first count at which the sampling stops
    return next((n for n in range(1, len(times) + 1) if m.vendor_done(times[:n], wall, fixed)), None)
print("rse 1..20: %.5f" % m.median_rse(list(range(1, 21))))
print("steady: stops at", stop_at([100.0] * 40, 0.1))
print("noisy: stops at", stop_at([100.0 + 10 * (i % 2) for i in range(40)], 0.1))
print("fixed 5: stops at", stop_at([100.0 + 10 * (i % 2) for i in range(40)], 0.1, 5))
print("3 s cap: stops at", stop_at([100.0 + 10 * (i % 2) for i in range(40)], 3.0))
print("20 s cap: stops at", stop_at([100.0 + 10 * (i % 2) for i in range(40)], 20.0))
print("one throttled:", m.vendor_summary([1.0, 2.0, 3.0, 10.0], [1900, 1900, 1900, 1000], 1485.0))
print("all throttled:", m.vendor_summary([1.0, 2.0, 3.0, 10.0], [1000] * 4, 1485.0))
print("no floor:", m.vendor_summary([1.0, 2.0, 3.0, 10.0], [1900, 1900, 1900, 1000], None))
print("unread clocks:", m.vendor_summary([1.0, 2.0, 3.0], [None] * 3, 1485.0))
print("card clock:", m.card_clock_mhz(sys.argv[3]), "; no GPU:", m.card_clock_mhz(sys.argv[2]))
PY
has "$tmp/out" "^rse 1..20: 0.24295$" "vs_vendor: the median's RSE as src/timer.c computes it (ranks 5 and 15 of 20)"
has "$tmp/out" "^steady: stops at 20$" "vs_vendor: steady samples stop at kgate's 20"
has "$tmp/out" "^noisy: stops at None$" "vs_vendor: samples spread 10% go on while time is left"
has "$tmp/out" "^fixed 5: stops at 5$" "vs_vendor --samples 5: five samples"
has "$tmp/out" "^3 s cap: stops at 3$" "vs_vendor: 3 s of sampling stop at 3 samples"
has "$tmp/out" "^20 s cap: stops at 1$" "vs_vendor: 20 s stop whatever the count"
has "$tmp/out" "^one throttled: \(2.0, 1900.0, 1\)$" "vs_vendor: a sample below the floor is dropped, the clock's median counts it"
has "$tmp/out" "^all throttled: \(2.5, 1000.0, 0\)$" "vs_vendor: every sample throttled: all kept"
has "$tmp/out" "^no floor: \(2.5, 1900.0, 0\)$" "vs_vendor: no card clock: nothing dropped"
has "$tmp/out" "^unread clocks: \(2.0, None, 0\)$" "vs_vendor: samples without a clock reading are kept"
has "$tmp/out" "^card clock: 1980.0 ; no GPU: None$" "vs_vendor: the card's clock from kgate devices (none without a GPU)"
