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
# The suite's sections are the files .ci/tests/NN_*.sh, sourced in order into this shell after
# the helpers below (a later one uses what an earlier one set: $K from 01_build.sh, $gpu from
# 06_cli.sh); README's Map says what each holds.
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

# The sections, in order.
for part in .ci/tests/[0-9][0-9]_*.sh; do
    . "$part"
done

echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
