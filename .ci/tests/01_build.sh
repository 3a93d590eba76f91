# .ci/tests/01_build.sh — the build (gcc, clang), the golden output, the tree's shape, the CPU selftest.
# Sourced by tests.sh, in order, in its shell: its helpers (ok, bad, run, expect, has, ...), $tmp and,
# from 01_build.sh on, $K.

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
miss=""
for f in .ci/tests/*.sh; do grep -q "^| \`$f\`" README.md || miss="$miss $f(not in README's Map)"; done
for f in $(sed -n 's/^| `\(\.ci\/tests\/[a-z0-9_]*\.sh\)`.*/\1/p' README.md); do [ -f "$f" ] || miss="$miss $f(in the Map, not in the tree)"; done
[ -z "$miss" ] && ok "every section of the tests (.ci/tests) has its line in README's Map" || bad "the tests and the Map differ:$miss"
big=$(wc -l kgate.c src/*.c | awk '$2 != "total" && (($2 == "kgate.c" && $1 > 1000) || $1 > 1500) {print $2 " " $1}')
[ -z "$big" ] && ok "kgate.c is at most 1000 lines and every src/ file at most 1500" || bad "files past their size (split them): $big"

echo "== selftest on the CPU device: formats, references, sampling, every gate vs every fault"
expect 0 "kgate selftest --device cpu" $K selftest --device cpu
# its summary counts what it printed: one "ok" line per check, and more than one check per fault
n=$(grep -c '^  ok ' "$tmp/out"); nf=$(grep -c '^    { "' src/inject.c)
has "$tmp/out" "^selftest: $n passed, 0 failed$" "selftest reports its $n checks passed, 0 failed"
[ "$n" -gt "$nf" ] && ok "selftest ran more checks ($n) than kgate has planted faults ($nf)" || bad "selftest: $n checks for $nf faults"
