# .ci/tests/09_sm90.sh — the sm_90a fast paths: wgmma and the other Hopper instructions in kernels.hip's
#   sm_90a build (no GPU).
# Sourced by tests.sh, in order, in its shell: its helpers (ok, bad, run, expect, has, ...), $tmp and,
# from 01_build.sh on, $K.

echo "== sm_90a fast paths: wgmma in kernels.hip's sm_90a build (no GPU)"
# The Hopper entry points (kernels.hip, "GEMM, Hopper path", "Attention forward, Hopper path" and
# "Attention backward, Hopper path"): each
# must issue wgmma in its own body (a wgmma behind a call is serialized: ptxas C7510) and compile with no
# spill and no warning; the fused backward's entries without a mask at head dim 128 (80 query rows a
# step at 240 registers a consumer, 24 a producer) with at most 32 bytes of spill (a few descriptor
# words a step in the consumers, the dQ warp's loop counters: 28 bytes with ptxas 13.0; the entry
# measured 3% faster than 64 rows all the same, bench/HOPPER.md).
# the MX entries (absent from -D WG_BN=192 builds, whose halves of 96 columns spill)
MX90="kg_qgemm_sm90_mx_e4m3_bf16 kg_qgemm_sm90_mx_e5m2_bf16 kg_qgemm_sm90_mx_e4m3_f32 kg_qgemm_sm90_mx_e5m2_f32"
# the per-tensor / per-row and blockwise (bf16 output) fp8 entries at tiles of 128 x 192 (only in builds
# at WG_BN=256, the default)
N192="kg_qgemm_sm90_n192_e4m3_bf16 kg_qgemm_sm90_n192_e5m2_bf16 kg_qgemm_sm90_n192_e4m3_f32 kg_qgemm_sm90_n192_e5m2_f32
      kg_qgemm_sm90_n192_blk_e4m3_bf16 kg_qgemm_sm90_n192_blk_e5m2_bf16"
FAST90="kg_gemm_sm90_bf16 kg_gemm_sm90_f16 kg_gemm_sm90_nn_bf16 kg_gemm_sm90_nn_f16 kg_gemm_sm90_tn_bf16
        kg_gemm_sm90_tn_f16 kg_gemm_sm90_tt_bf16 kg_gemm_sm90_tt_f16 kg_gemm_sm90_wgrad_bf16 kg_gemm_sm90_wgrad_f16
        kg_qgemm_sm90_e4m3_bf16 kg_qgemm_sm90_e5m2_bf16 kg_qgemm_sm90_blk_e4m3_bf16 kg_qgemm_sm90_blk_e5m2_bf16
        kg_qgemm_sm90_e4m3_f32 kg_qgemm_sm90_e5m2_f32 kg_qgemm_sm90_blk_e4m3_f32 kg_qgemm_sm90_blk_e5m2_f32
        $MX90 $N192
        kg_attn_fwd_sm90_d64_bf16 kg_attn_fwd_sm90_d128_bf16 kg_attn_fwd_sm90_d256_bf16
        kg_attn_fwd_sm90_d64_f16 kg_attn_fwd_sm90_d128_f16 kg_attn_fwd_sm90_d256_f16
        kg_attn_bwd_dkdv_sm90_d64_bf16 kg_attn_bwd_dkdv_sm90_d128_bf16 kg_attn_bwd_dkdv_sm90_d64_f16
        kg_attn_bwd_dkdv_sm90_d128_f16 kg_attn_bwd_dq_sm90_d64_bf16 kg_attn_bwd_dq_sm90_d128_bf16
        kg_attn_bwd_dq_sm90_d64_f16 kg_attn_bwd_dq_sm90_d128_f16 kg_attn_bwd_fused_sm90_d64_bf16
        kg_attn_bwd_fused_sm90_d64_f16 kg_attn_bwd_fused_sm90_d128_bf16 kg_attn_bwd_fused_sm90_d128_f16
        kg_attn_bwd_fused_sm90_d128nc_bf16 kg_attn_bwd_fused_sm90_d128nc_f16"
nfast=$(echo $FAST90 | wc -w)
# fast90_without LIST...: the entries of FAST90 not named in LIST (those a build leaves out)
fast90_without() {
    for e in $FAST90; do case " $* " in *" $e "*) ;; *) echo $e;; esac; done
}
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
ptxas=$(command -v ptxas || echo /usr/local/cuda/bin/ptxas)
# sm90_ptx_check [-D...]: compile kernels.hip to sm_90a PTX (nvcc, the NVRTC front end) and ptxas it;
# print one line per fast entry lacking wgmma.mma_async in its body, a spill, a ptxas warning, or a
# ptxas C75xx note (wgmma serialized: the kernel runs, its products one at a time; e.g. C7512 for
# -D FB_DQ_BN=128, short of registers, and C7514 for a read of accumulators before their wait).
# sm90_trans_check PTX: print one line per GEMM entry whose wgmma lack the transpose operands of its
# layout (kg_gemm_sm90_<dt>: NT, both K-major, "0, 0"; _nn_: "0, 1"; _tn_ and _wgrad_: "1, 1"; _tt_: "1, 0").
sm90_trans_check() {
    awk '/\.entry /{name=$3; sub(/\(.*/, "", name)} /\.func /{name=""}
         name ~ /^kg_gemm_sm90_/ && /wgmma\.mma_async/ {
             lay = name; sub(/^kg_gemm_sm90_/, "", lay); sub(/_?b?f16$/, "", lay)
             want = lay == "nn" ? "0, 1" : lay == "tn" || lay == "wgrad" ? "1, 1" : lay == "tt" ? "1, 0" : "0, 0"
             if (index($0, "p, 1, 1, " want "; }") == 0) bad[name]++ }
         END { for (n in bad) print n ": " bad[n] " wgmma without the transpose operands of its layout" }' "$1"
}
# sm90_regpool_check PTX LOG: one line per entry whose setmaxnreg asks for more registers than its
# launch holds (one producer warpgroup at its .dec count, the others at .inc, against ptxas's registers
# x .maxntid): setmaxnreg.inc then waits for registers no warpgroup will free, and the kernel hangs.
sm90_regpool_check() {
    awk 'FNR == NR { if ($0 ~ /Function properties for /) n = $NF
                     else if (n != "" && match($0, /Used [0-9]+ registers/)) { r[n] = substr($0, RSTART + 5, RLENGTH - 15) + 0; n = "" }
                     next }
         /\.entry /{ e = $3; sub(/\(.*/, "", e) } /\.func /{ e = "" }
         e != "" && /^\.maxntid/ { t[e] = $2 + 0 }
         e != "" && /setmaxnreg\.dec/ { v = $NF + 0; if (v > dec[e]) dec[e] = v }
         e != "" && /setmaxnreg\.inc/ { v = $NF + 0; if (v > inc[e]) inc[e] = v }
         END { for (e in inc) { need = 128 * dec[e] + (t[e] - 128) * inc[e]; have = r[e] * t[e]
                   if (!(e in dec) || !(e in t) || need > have)
                       print e ": setmaxnreg " dec[e] " / " inc[e] " needs " need " registers, its launch holds " have " (" r[e] " x " t[e] " threads): the consumers would wait for ever" } }' "$2" "$1"
}
sm90_ptx_check() {
    local fast="${FAST:-$FAST90}"
    "$nvcc" -arch=sm_90a -ptx -x cu "$@" kernels.hip -o "$tmp/k90.ptx" 2>"$tmp/k90.err" || { echo "nvcc failed: $(head -c 300 "$tmp/k90.err")"; return; }
    "$ptxas" -arch=sm_90a -v "$tmp/k90.ptx" -o "$tmp/k90.cubin" 2>"$tmp/k90.log" || { echo "ptxas failed: $(head -c 300 "$tmp/k90.log")"; return; }
    grep -iE "warning|C75[0-9][0-9]" "$tmp/k90.log" | head -3
    local nc80=1; case " $* " in *FB_NC_BM=64*) nc80=0;; esac   # the d128nc entries at 80 rows (the default)
    for e in $fast; do
        n=$(awk -v e="$e" '/\.entry /{name=$3; sub(/\(.*/, "", name)} /\.func /{name=""} name == e && /wgmma\.mma_async/{n++} END{print n + 0}' "$tmp/k90.ptx")
        min=4; case $e in *_mx_*) min=2;; esac   # MX: a K block's two halves
        [ "$n" -ge $min ] || echo "$e: $n wgmma.mma_async in its PTX body, want >= $min"
        spill=$(grep -A1 "Function properties for $e\$" "$tmp/k90.log" \
                | sed -n 's/.* \([0-9]*\) bytes spill stores, \([0-9]*\) bytes spill loads.*/\1 \2/p')
        allow=0; case $e in *_d128nc_*) [ $nc80 = 1 ] && allow=32;; esac
        [ -n "$spill" ] && [ "${spill% *}" -le $allow ] && [ "${spill#* }" -le $allow ] \
            || echo "$e: spills ${spill:-?} (bytes stored, loaded; or no ptxas report), allowed $allow"
    done
    sm90_trans_check "$tmp/k90.ptx"
    sm90_regpool_check "$tmp/k90.ptx" "$tmp/k90.log"
}
if [ -x "$nvcc" ] && [ -x "$ptxas" ]; then
    probs=$(sm90_ptx_check)
    [ -z "$probs" ] && ok "the $nfast sm_90a entry points hold wgmma.mma_async in their PTX (the layouts' with their transpose operands); ptxas: no spill (the 80-row d128nc entries: at most 32 bytes), no warning, no wgmma serialized" \
        || bad "sm_90a fast paths: $probs"
    grep -q "kg_attn_bwd_fused_sm90_smem_d64" "$tmp/k90.ptx" && grep -q "kg_attn_bwd_fused_sm90_smem_d128" "$tmp/k90.ptx" \
        && grep -q "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32" "$tmp/k90.ptx" \
        && grep -q "kg_attn_bwd_fused_sm90_bm_d64 = 128;" "$tmp/k90.ptx" && grep -q "kg_attn_bwd_fused_sm90_bm_d128nc = 80;" "$tmp/k90.ptx" \
        && ok "the default build publishes the fused backward's shared memory at head dims 64 and 128 (both run it; 128 query rows a step at 64, 80 at 128 without a mask), and its dQ warp adds with a TMA bulk reduce" \
        || bad "default sm_90a build: no kg_attn_bwd_fused_sm90_smem_d64 or _d128, no bm_d64 of 128 or bm_d128nc of 80, or no bulk reduce in the PTX"
    # fb_timer_entries PTX: the entries of PTX that read %globaltimer, one a line
    fb_timer_entries() { awk '/\.entry /{e = $3; sub(/\(.*/, "", e)} /\.func /{e = ""} e != "" && /%globaltimer/{n[e]++} END{for (e in n) print e}' "$1" | sort; }
    FUSED90=$(printf '%s\n' $FAST90 | grep "^kg_attn_bwd_fused_sm90_" | sort)
    grep -q "kg_attn_bwd_fused_sm90_stress;" "$tmp/k90.ptx" && [ -z "$(fb_timer_entries "$tmp/k90.ptx" | grep "^kg_attn_bwd_fused")" ] \
        && ok "the default build is no stress build: kg_attn_bwd_fused_sm90_stress 0, no fused entry reads the wall clock" \
        || bad "default sm_90a build: kg_attn_bwd_fused_sm90_stress not 0, or a fused entry reads %globaltimer"
    # planted: the fused backward's producer at 32 registers and its consumers at 240 (a real hang of
    # 2026-12-03: 128 x 32 + 256 x 240 = 65536 registers, its launch holds 168 x 384 = 64512)
    awk '/\.entry /{e = /kg_attn_bwd_fused_sm90_d128_bf16\(/} e{sub(/setmaxnreg\.dec\.sync\.aligned\.u32 40;/, "setmaxnreg.dec.sync.aligned.u32 32;")
         sub(/setmaxnreg\.inc\.sync\.aligned\.u32 232;/, "setmaxnreg.inc.sync.aligned.u32 240;")} 1' "$tmp/k90.ptx" >"$tmp/k90_reg.ptx"
    sm90_regpool_check "$tmp/k90_reg.ptx" "$tmp/k90.log" | grep -q "^kg_attn_bwd_fused_sm90_d128_bf16: setmaxnreg 32 / 240 needs 65536 registers, its launch holds 64512" \
        && ok "planted: setmaxnreg 32 / 240 in the fused backward (more registers than its launch holds: it hangs) is named" \
        || bad "planted setmaxnreg: not named: $(sm90_regpool_check "$tmp/k90_reg.ptx" "$tmp/k90.log")"
    # planted: the TN entry's first wgmma reads X K-major (its trans-a operand dropped)
    awk '/\.entry kg_gemm_sm90_tn_bf16/{e=1} e && !d && sub(/p, 1, 1, 1, 1; }/, "p, 1, 1, 0, 1; }"){d=1} 1' "$tmp/k90.ptx" >"$tmp/k90_tnsp.ptx"
    sm90_trans_check "$tmp/k90_tnsp.ptx" | grep -q "^kg_gemm_sm90_tn_bf16: 1 wgmma without" \
        && ok "planted: a TN entry with one wgmma lacking its trans-a operand is named" \
        || bad "planted trans-a: not named: $(sm90_trans_check "$tmp/k90_tnsp.ptx")"
    grep -qE "kg_qgemm_sm90_n192_smem = [1-9][0-9]*;" "$tmp/k90.ptx" && grep -qE "kg_qgemm_sm90_n192_blk = 1;" "$tmp/k90.ptx" \
        && ok "the default build publishes the 192-column fp8 entries' shared memory (kg_qgemm_sm90_n192_smem) and its blockwise ones (kg_qgemm_sm90_n192_blk 1)" \
        || bad "default sm_90a build: kg_qgemm_sm90_n192_smem missing or 0, or kg_qgemm_sm90_n192_blk not 1"
    missing=$(for g in kg_gemm_mfma_tile kg_qgemm_mfma_tile kg_attn_fwd_mfma_dmax; do
                  grep -qE "\.global \.align 4 \.(u32|b32|s32) $g;" "$tmp/k90.ptx" || echo "$g"; done)
    [ -z "$missing" ] && ok "the default sm_90a build defines the MFMA entries' globals as 0 (kgate's lookups succeed: no API error under compute-sanitizer)" \
        || bad "default sm_90a build: no zero global $(echo $missing)"
    probs=$(FAST="$FUSED90" sm90_ptx_check -DFB_STRESS_NS=20000)
    [ -z "$probs" ] && grep -q "kg_attn_bwd_fused_sm90_stress = 1;" "$tmp/k90.ptx" \
        && [ "$(fb_timer_entries "$tmp/k90.ptx" | grep "^kg_attn_bwd_fused")" = "$FUSED90" ] \
        && ok "-D FB_STRESS_NS=20000 (a stress build: each dQ add held back, kgate fills the slabs with NaN) builds the same way, publishes kg_attn_bwd_fused_sm90_stress 1, and its $(echo $FUSED90 | wc -w) fused entries read the wall clock" \
        || bad "sm_90a, FB_STRESS_NS=20000: ${probs:-no kg_attn_bwd_fused_sm90_stress = 1, or fused entries without the stall: $(fb_timer_entries "$tmp/k90.ptx" | tr '\n' ' ')}"
    probs=$(FAST="$FUSED90" sm90_ptx_check -DFB_CLK=1)
    [ -z "$probs" ] && [ "$(fb_timer_entries "$tmp/k90.ptx" | grep "^kg_attn_bwd_fused")" = "$FUSED90" ] \
        && [ "$(awk '/\.entry /{e = $3; sub(/\(.*/, "", e)} /\.func /{e = ""} e ~ /^kg_attn_bwd_dq_post_sm90_/ && /vprintf/{n[e]++} END{print length(n)}' "$tmp/k90.ptx")" = "$(echo $FUSED90 | wc -w)" ] \
        && ok "-D FB_CLK=1 (a diagnostic build: each fused block's clocks, printed by its post kernel for bench/fb_clocks.py) builds the same way; its $(echo $FUSED90 | wc -w) fused entries read the wall clock and as many post entries print" \
        || bad "sm_90a, FB_CLK=1: ${probs:-fused entries reading the clock: $(fb_timer_entries "$tmp/k90.ptx" | tr '\n' ' '), or post entries without printf}"
    probs=$(FAST=$(fast90_without $MX90 $N192) sm90_ptx_check -DWG_BN=192 -DFB_DQ_ATOMIC=1)
    [ -z "$probs" ] && grep -qE "kg_qgemm_sm90_n192_smem( = 0)?;" "$tmp/k90.ptx" && ! grep -q "\.entry kg_qgemm_sm90_n192_" "$tmp/k90.ptx" \
        && ok "-D WG_BN=192 (128x192 tiles: wgmma n192, the fp8 per-tensor and blockwise partial one n192 wide; no MX or n192 entries, n192_smem 0) with -D FB_DQ_ATOMIC=1 (the 80-row entry's adds without locks) builds the same way: wgmma, no spill, no warning" \
        || bad "sm_90a, WG_BN=192 FB_DQ_ATOMIC=1: ${probs:-kg_qgemm_sm90_n192_smem not 0}"
    probs=$(sm90_ptx_check -DFB_FUSED=0)
    [ -z "$probs" ] && ! grep -q "kg_attn_bwd_fused_sm90_smem_d" "$tmp/k90.ptx" \
        && ok "-D FB_FUSED=0 (the backward's two passes at every head dim) builds the same way, and does not publish the fused pass's shared memory" \
        || bad "sm_90a, FB_FUSED=0: ${probs:-the build still publishes kg_attn_bwd_fused_sm90_smem_d64 or _d128}"
    probs=$(FAST=$(fast90_without $N192) sm90_ptx_check -DWG_CLUSTER=2 -DWG_STORE_V4=0 -DFB_DQ_ATOMIC=1 -DFB_ROTATE=1 -DWG_BN=128 -DFB_BM64=64 -DFB_NC_BM=64 -DATTN_PRE_STAGED=0 -DATTN_PRE_WARPS=0 -DFB_EPI_V4=0 -DFB_POST_EARLY=0)
    [ -z "$probs" ] && ! grep -q "\.entry kg_qgemm_sm90_n192_" "$tmp/k90.ptx" \
        && ok "the knobs' other side (-D WG_CLUSTER=2 -D WG_STORE_V4=0 -D FB_DQ_ATOMIC=1 -D FB_ROTATE=1 -D WG_BN=128 -D FB_BM64=64 -D FB_NC_BM=64 -D ATTN_PRE_STAGED=0 -D ATTN_PRE_WARPS=0 -D FB_EPI_V4=0 -D FB_POST_EARLY=0) builds the same way: wgmma, no spill, no warning, no n192 entries" \
        || bad "sm_90a, WG_CLUSTER=2 WG_STORE_V4=0 FB_DQ_ATOMIC=1 FB_ROTATE=1 WG_BN=128 FB_BM64=64 FB_NC_BM=64 ATTN_PRE_STAGED=0 ATTN_PRE_WARPS=0 FB_EPI_V4=0 FB_POST_EARLY=0: ${probs:-n192 entries in the build}"
    grep -q "\.reqnctapercluster 2, 1, 1" "$tmp/k90.ptx" && grep -q "multicast::cluster" "$tmp/k90.ptx" \
        && ok "-D WG_CLUSTER=2: the entries ask for clusters of 2 and load with TMA multicast" \
        || bad "-D WG_CLUSTER=2: no .reqnctapercluster 2, 1, 1 or no multicast in the PTX"
    probs=$(sm90_ptx_check -DFB_DQ_BN=128)
    printf '%s\n' "$probs" | grep -q "C7512.*kg_attn_bwd_dq_sm90_d128" \
        && ok "planted: a -D FB_DQ_BN=128 build (wgmma serialized for want of registers, ptxas C7512) is named" \
        || bad "-D FB_DQ_BN=128: the check did not name ptxas's C7512: $probs"
    probs=$(sm90_ptx_check -DKG_PORTABLE=1)
    n=$(printf '%s\n' "$probs" | grep -c "wgmma.mma_async in its PTX body")
    [ "$n" -eq "$nfast" ] && ok "planted: a -D KG_PORTABLE=1 build lacks the $nfast fast entries, and the check says so for each" \
        || bad "KG_PORTABLE build: the check named $n of $nfast missing entries: $probs"
else
    echo "skip: no nvcc/ptxas (the CUDA toolkit) on this machine"
fi
# bench/fb_clocks.py (the FB_CLK build's reader): its sums on a hand-worked log, and its refusals
python3 bench/fb_clocks.py --self-test >"$tmp/fbc.out" 2>&1 && grep -q "^fb_clocks self-test: ok$" "$tmp/fbc.out" \
    && ok "bench/fb_clocks.py: a hand-worked log of three blocks on two SMs splits the SM-time as worked out (the shares sum to 1), and launches with a line short or no end are left out" \
    || bad "bench/fb_clocks.py --self-test: $(head -c 300 "$tmp/fbc.out")"
printf 'fbclk 0 0 1 2 3 4 5 6\nfbclk end 2\n' >"$tmp/fbc.in"
python3 bench/fb_clocks.py "$tmp/fbc.in" >"$tmp/fbc.out" 2>&1; rc=$?
[ $rc = 1 ] && grep -q "no complete launch" "$tmp/fbc.out" \
    && ok "bench/fb_clocks.py: a log whose launch lacks a line is refused (exit 1, one line)" \
    || bad "bench/fb_clocks.py on a short launch: rc $rc, $(head -c 200 "$tmp/fbc.out")"
# fp4_map_check [SED]: kernels.hip's kg_e2m1_e4m3 (the MX entries read MXFP4 through it; SED applied: a
# planted fault) compiled as C; prints each E2M1 code whose E4M3 code is not ref.c's encoding of its value,
# then "compared N" (N: the codes codec listed, 16 when it works).
fp4_map_check() {
    awk '/>>> kgate-fp4/{p=1; next} /<<< kgate-fp4/{p=0} p' kernels.hip | sed "s/__device__ //; ${1:-}" >"$tmp/fp4map.h"
    printf '#include <stdio.h>\n#include "fp4map.h"\nint main(void) { for (unsigned c = 0; c < 16; c++) printf("0x%%02x 0x%%02x\\n", c, kg_e2m1_e4m3(c)); return 0; }\n' >"$tmp/fp4map.c"
    cc -std=c11 -Wall -Wextra -Werror -o "$tmp/fp4map" "$tmp/fp4map.c" 2>&1 || { echo "kg_e2m1_e4m3 does not compile as C"; return; }
    "$tmp/fp4map" >"$tmp/fp4map.out"
    local n=0
    while read -r code val; do
        n=$((n + 1))
        want=$($K codec e4m3 "$val" | awk '{print $2}') got=$(awk -v c="$code" '$1 == c {print $2}' "$tmp/fp4map.out")
        [ "$got" = "$want" ] || echo "E2M1 $code ($val): kernel ${got:-none}, ref.c $want"
    done < <($K codec e2m1 --decode-all)
    echo "compared $n"
}
probs=$(fp4_map_check)
[ "$probs" = "compared 16" ] && [ "$(wc -l <"$tmp/fp4map.out")" -eq 16 ] && ok "kg_e2m1_e4m3 (MXFP4 read as E4M3 by the sm_90a MX entries): all 16 E2M1 codes become ref.c's E4M3 code of their value" \
    || bad "kg_e2m1_e4m3: $probs"
probs=$(fp4_map_check 's/0x38u + 4 \* (m - 2)/0x38u + 8 * (m - 2)/')
[ "$(printf '%s\n' "$probs" | grep -c '^E2M1 ')" -eq 10 ] && printf '%s\n' "$probs" | grep -qx "compared 16" && printf '%s\n' "$probs" | grep -q "^E2M1 0x05 (3): kernel 0x50, ref.c 0x44" \
    && ok "planted: an E2M1 map with twice the exponent step is named code by code (the 10 codes above 1 in magnitude)" \
    || bad "planted fp4 map: not named as expected: $probs"

# SASS through kgate isa, where a cuobjdump is found: PATH, the CUDA toolkit, or the pip package
# nvidia-cuda-cuobjdump (.ci/run installs it).
cudir=""
for d in "$(dirname "$(command -v cuobjdump 2>/dev/null || echo /nonexistent/x)")" /usr/local/cuda/bin \
         "$(python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13", "bin"))' 2>/dev/null)"; do
    [ -n "$d" ] && [ -x "$d/cuobjdump" ] && { cudir=$d; break; }
done
if [ -n "$cudir" ] && { ldconfig -p 2>/dev/null | grep -q libnvrtc || [ -e /usr/local/cuda/lib64/libnvrtc.so ]; }; then
    PATH="$cudir:$PATH" run $K isa --arch sm_90a --expect wgmma
    [ $rc -eq 0 ] && ok "isa --arch sm_90a --expect wgmma passes on kernels.hip (cuobjdump from $cudir)" || bad "isa --expect wgmma: exit $rc: $(head -c 300 "$tmp/err")"
    for e in $FAST90; do
        row=$(grep "^$e " "$tmp/out" | tr -s ' ')
        w=$(echo "$row" | cut -d' ' -f4) first=$(echo "$row" | cut -d' ' -f10)
        case "$e:$first" in
            # MX: one k32 step of each half of the tile in the loop's body
            kg_qgemm_sm90_mx_e4m3*:QGMMA.64x128x32.F32.E4M3.E4M3|kg_qgemm_sm90_mx_e5m2*:QGMMA.64x128x32.F32.E5M2.E5M2)
                [ "${w:-0}" -ge 2 ] && ok "$e: $w wgmma in SASS, first $first" || bad "$e: wgmma column '$w'" ;;
            # the 192-column entries: one m64n192k32 a k32 step (the partial spans the tile)
            kg_qgemm_sm90_n192_*e4m3*:QGMMA.64x192x32.F32.E4M3.E4M3|kg_qgemm_sm90_n192_*e5m2*:QGMMA.64x192x32.F32.E5M2.E5M2)
                [ "${w:-0}" -ge 4 ] && ok "$e: $w wgmma in SASS, first $first" || bad "$e: wgmma column '$w'" ;;
            kg_gemm_*:HGMMA.64x256x16.F32*|kg_qgemm_*e4m3*:QGMMA.64x128x32.F32.E4M3.E4M3|kg_qgemm_*e5m2*:QGMMA.64x128x32.F32.E5M2.E5M2)
                [ "${w:-0}" -ge 4 ] && ok "$e: $w wgmma in SASS, first $first" || bad "$e: wgmma column '$w'" ;;
            # the attention forward: S = Q·K^T (D/16 steps) and O += P·V (BN/16 steps) per key block
            kg_attn_fwd_sm90_d*:HGMMA.64x*)
                [ "${w:-0}" -ge 12 ] && ok "$e: $w wgmma in SASS, first $first" || bad "$e: wgmma column '$w'" ;;
            # the backward: S and dP (D/16 steps each), then dV and dK (dK/dV pass) or dQ (dQ pass)
            kg_attn_bwd_*_sm90_d*:HGMMA.64x*)
                [ "${w:-0}" -ge 12 ] && ok "$e: $w wgmma in SASS, first $first" || bad "$e: wgmma column '$w'" ;;
            *) bad "$e: SASS row '$row'" ;;
        esac
    done
    PATH="$cudir:$PATH" run $K isa --arch sm_90a --expect wgmma --variant portable -D KG_PORTABLE=1
    [ $rc -eq 1 ] && grep -q "^expect wgmma: FAIL: none of the" "$tmp/out" \
        && ok "planted: isa --expect wgmma fails on the -D KG_PORTABLE=1 build (exit 1)" || bad "KG_PORTABLE isa: exit $rc"
else
    echo "skip: no cuobjdump (PATH, /usr/local/cuda/bin, pip nvidia-cuda-cuobjdump) or no libnvrtc"
fi
