# .ci/tests/07_compile.sh — kernels.hip compiled: NVRTC (sm_90a) and its crash, hang and error handling, the
#   cache; clang-19 for gfx942; MFMA index math; the rotated walk.
# Sourced by tests.sh, in order, in its shell: its helpers (ok, bad, run, expect, has, ...), $tmp and,
# from 01_build.sh on, $K.

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
