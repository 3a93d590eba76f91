# .ci/tests/13_all.sh — kgate all on the CPU device, and on the GPU when one is present.
# Sourced by tests.sh, in order, in its shell: its helpers (ok, bad, run, expect, has, ...), $tmp and,
# from 01_build.sh on, $K.

if [ "${KGATE_QUICK:-0}" != 1 ]; then
    echo "== kgate all --device cpu (the whole shapes.txt; its cases over 100 GFLOP, a GPU's, skipped)"
    expect 0 "kgate all --device cpu" $K all --device cpu
    # the summary: every line of shapes.txt a case, every output of the cases that ran passed,
    # and most cases ran (those over the CPU device's 100 GFLOP are skipped)
    lines=$(grep -cvE '^[[:space:]]*(#|$)' shapes.txt)
    sum=$(grep -E '^kgate: [0-9]+ cases' "$tmp/out")
    if [[ $sum =~ ^kgate:\ ([0-9]+)\ cases,\ ([0-9]+)\ outputs:\ ([0-9]+)\ passed,\ 0\ failed(\;\ ([0-9]+)\ cases?\ skipped)? ]] \
        && [ "${BASH_REMATCH[1]}" -eq "$lines" ] && [ "${BASH_REMATCH[3]}" -eq "${BASH_REMATCH[2]}" ] \
        && ran=$((lines - ${BASH_REMATCH[5]:-0})) && [ "$ran" -ge $((lines / 2)) ] && [ "${BASH_REMATCH[2]}" -ge "$ran" ]; then
        ok "every case of shapes.txt passes on the CPU: $ran of $lines ran, ${BASH_REMATCH[2]} outputs passed"
    else bad "kgate all --device cpu: the summary '$sum' ($lines lines in shapes.txt)"; fi
    cp "$tmp/out" "$tmp/all_cpu"
fi

if [ $gpu -eq 1 ]; then
    echo "== GPU present: kgate selftest and kgate all"
    expect 0 "kgate selftest (GPU)" $K selftest
    expect 0 "kgate all (GPU)" $K all
    lines=$(grep -cvE '^[[:space:]]*(#|$)' shapes.txt)
    has "$tmp/out" "^kgate: $lines cases, [0-9]+ outputs: [0-9]+ passed, 0 failed" "every case of shapes.txt passes on the GPU"
    echo "== GPU: a kernel that writes out of bounds and one that spins cost their cases alone"
    # A --kernels copy with two planted bugs: kg_attn_fwd writes 2^40 elements past O (head dim 64
    # only), and kg_gemm_f32 waits on a shared flag that nothing sets (a deadlocked barrier).
    python3 - kernels.hip "$tmp/faulty.hip" <<'PY'
import sys
s = open(sys.argv[1]).read()
fwd = "        kg_attn_fwd<D>(Q, K, V, O, LSE, cu_q, cu_k, B, Hq, Hkv, Dh, scale, causal);"
gemm = "    kg_gemm_simt_f32(X, Y, C, M, N, K, sxm, sxk, syk, syn, scm, scn,"
assert s.count(fwd) == 1 and s.count(gemm) == 1
s = s.replace(fwd, "        if (Dh == 64 && kg_tid() == 0) O[(kg_i64)1 << 40] = O[0]; \\\n" + fwd)
s = s.replace(gemm, "    __shared__ volatile int kg_never;\n    if (kg_tid() == 0) kg_never = 0;\n"
              "    __syncthreads();\n    while (kg_never == 0) { }\n" + gemm)
open(sys.argv[2], "w").write(s)
PY
    cat >"$tmp/gpu_faults.txt" <<'EOF2'
gemm --dtype bf16 --shape 512x512x512
gemm --dtype f32 --shape 256x256x256
attn --dtype bf16 --seq 256 --heads 4 --dim 64
grouped --dtype bf16 --groups 0,64,128 --shape 256x128
attn --dtype f16 --seq 100:200 --heads 4:2 --dim 128 --causal --bwd
gemm --dtype f16 --layout TN --shape 1000x1000x1000
EOF2
    run $K all --shapes "$tmp/gpu_faults.txt" --kernels "$tmp/faulty.hip"
    [ "$rc" -eq 5 ] && ok "GPU: all with an out-of-bounds write and a spin: exit 5" || bad "GPU faults: exit $rc, want 5"
    has "$tmp/out" "^kgate: fault: attn bf16 b1 s256:256 h4:4 d64 \(.*gpu_faults.txt:3\): .*ILLEGAL_ADDRESS" \
        "GPU: the out-of-bounds write is a fault, the device's error named"
    has "$tmp/out" "^kgate: hung: gemm f32 NT 256x256x256 \(.*gpu_faults.txt:2\): a launch did not end within the watchdog's 10 s \(the case's default; --timeout S sets it\)" \
        "GPU: the spin is hung after the default watchdog"
    has "$tmp/out" "^kgate: 6 cases \(1 faulted, 1 hung\), 8 outputs: 8 passed, 0 failed" "GPU: every other case passed"
    cp "$tmp/out" "$tmp/gpu_faults.out"
fi
