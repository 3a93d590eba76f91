# .ci/tests/08_isa.sh — kgate isa: gfx942 by clang-19, sm_90a through cuobjdump and nvdisasm (and their
#   stand-ins).
# Sourced by tests.sh, in order, in its shell: its helpers (ok, bad, run, expect, has, ...), $tmp and,
# from 01_build.sh on, $K.

echo "== kgate isa: matrix instructions, registers, LDS and spills per kernel (gfx942 by clang-19, no GPU)"
# col KERNEL COLUMN : the value under COLUMN (a heading of kgate isa's table) in KERNEL's row of $tmp/out
col() {
    awk -v k="$1" -v c="$2" '$1 == "kernel" { for (i = NF; i > 0; i--) h[$i] = i; next }
                             (c in h) && $1 == k { print $h[c] }' "$tmp/out"
}
grep -q -- "--expect" <(./kgate --help) && ok "--help mentions --expect" || bad "--help does not mention --expect"
expect 2 "isa --expect with an unknown class" $K isa --arch gfx942 --expect tensor
one_line "unknown --expect class"
has "$tmp/err" "wgmma, mma, mfma,? (or )?wmma" "the unknown-class line names the classes"
expect 2 "--expect on a command that does not take it" $K selftest --device cpu --expect mfma
if command -v clang-19 >/dev/null && command -v llvm-objdump-19 >/dev/null && command -v llvm-readobj-19 >/dev/null; then
    # Bare-clang spellings, as kernels.hip's prelude: eight bf16 MFMAs (unrolled), LDS, and scratch.
    cat >"$tmp/mfma.hip" <<'EOF'
#define __global__ __attribute__((global))
#define __shared__ __attribute__((shared))
typedef short kg_bf16x4 __attribute__((ext_vector_type(4)));
typedef float kg_f32x16 __attribute__((ext_vector_type(16)));
extern "C" __global__ void kg_mfma_loop(float *out, const kg_bf16x4 *a, const kg_bf16x4 *b) {
    __shared__ float tile[1024];
    unsigned t = __builtin_amdgcn_workitem_id_x();
    kg_f32x16 acc = {};
#pragma unroll
    for (int i = 0; i < 8; i++)
        acc = __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(a[64 * i + t], b[64 * i + t], acc, 0, 0, 0);
    for (int j = 0; j < 16; j++) tile[16 * t + j] = acc[j];
    __builtin_amdgcn_s_barrier();
    out[t] = tile[1023 - t];
}
extern "C" __global__ void kg_scratch(float *out, int i) {
    float v[64];
    for (int j = 0; j < 64; j++) v[j] = out[j * 3];
    out[0] = v[i & 63];
}
EOF
    expect 0 "isa --arch gfx942 on an MFMA fixture" $K isa --arch gfx942 --kernels "$tmp/mfma.hip"
    if ! ldconfig -p 2>/dev/null | grep -q libhiprtc; then
        has "$tmp/err" "mfma.hip for gfx942 with [^ ]*clang[^ ]* \(.*clang version [0-9]+.*\): compiled in" \
            "without hiprtc, isa compiles with clang and says which on stderr"
    fi
    n=$(col kg_mfma_loop mfma)
    [ "$n" = 8 ] && ok "isa counts the fixture's 8 v_mfma (mfma column: $n)" || bad "mfma column of kg_mfma_loop: '$n', want 8"
    has "$tmp/out" "^kg_mfma_loop .* v_mfma_f32_32x32x8_?bf16" "the first matrix instruction is the v_mfma"
    [ "$(col kg_scratch matrix)" = 0 ] && ok "the kernel without MFMA counts 0" || bad "kg_scratch: matrix '$(col kg_scratch matrix)'"
    v=$(col kg_mfma_loop vgpr) lds=$(col kg_mfma_loop lds) scr=$(col kg_scratch scratch) sp=$(col kg_mfma_loop vspill)
    if [ "${v:-0}" -gt 0 ] 2>/dev/null && [ "$lds" = 4096 ] && [ "${scr:-0}" -gt 0 ] 2>/dev/null && [ "$sp" = 0 ]; then
        ok "resources from the code object: $v vgpr, LDS $lds B (the fixture's 1024 floats), scratch $scr B, $sp spills"
    else bad "resources: vgpr '$v', lds '$lds' (want 4096), scratch '$scr' (want > 0), vspill '$sp'"; fi
    expect 0 "isa --expect mfma passes on the fixture" $K isa --arch gfx942 --kernels "$tmp/mfma.hip" --expect mfma
    has "$tmp/out" "^expect mfma: pass: 1 of 2 kernels hold mfma instructions: kg_mfma_loop$" \
        "--expect names the kernel that holds mfma"
    expect 1 "isa --expect wmma fails on the fixture (gfx942 has no WMMA)" \
        $K isa --arch gfx942 --kernels "$tmp/mfma.hip" --expect wmma
    has "$tmp/out" "^expect wmma: FAIL: none of the 2 kernels holds wmma instructions" "the failure says none holds it"

    expect 0 "isa --arch gfx942 on the embedded kernels.hip" $K isa --arch gfx942
    listed=0
    for k in $entry_points; do
        i=$(col $k insts) m=$(col $k matrix)
        [ "${i:-0}" -gt 0 ] 2>/dev/null && [ "$m" = 0 ] && listed=$((listed + 1)) \
            || bad "kernels.hip gfx942: $k insts '$i' matrix '$m'"
    done
    rows=$(grep -c "^kg_" "$tmp/out")
    zero=$(grep "^kg_" "$tmp/out" | while read -r k _; do [ "$(col "$k" matrix)" = 0 ] && echo; done | wc -l)
    [ "$listed" -eq 15 ] && [ "$zero" -eq $((rows - 16)) ] \
        && ok "isa lists kernels.hip's $rows kernels for gfx942 (the 15 portable entries checked among them); all but the 16 MFMA entries without a matrix instruction" \
        || bad "kernels.hip gfx942: $listed of 15 entry points listed, $zero of $rows rows with 0 matrix instructions"
    # each MFMA entry: v_mfma_f32_32x32x8 (fp8: 32x32x16; 8 a loop body: one K step, unrolled by 2), no scratch or spill, and
    # registers and LDS that let two blocks (8 waves, 2 a SIMD) share a CU: VGPRs + AGPRs <= 256, LDS <= 32 KiB
    for k in $mfma_entries; do
        m=$(col $k mfma) v=$(col $k vgpr) a=$(col $k agpr) lds=$(col $k lds) scr=$(col $k scratch) sp=$(col $k vspill)
        first=$(grep "^$k " "$tmp/out" | awk '{print $NF}')
        occ=$(( ${v:-999} > 0 ? 512 / ${v:-999} : 0 ))
        if [ "${m:-0}" -ge 8 ] 2>/dev/null && [ "$scr" = 0 ] && [ "$sp" = 0 ] && [ "${v:-999}" -le 256 ] 2>/dev/null \
            && [ "${lds:-99999}" -le 32768 ] 2>/dev/null \
            && { [[ "$k" != kg_q* && "$first" == v_mfma_f32_32x32x8* ]] || [[ "$k" == kg_q*_fp8_* && "$first" == v_mfma_f32_32x32x16_fp8_fp8 ]] \
                 || [[ "$k" == kg_q*_bf8_* && "$first" == v_mfma_f32_32x32x16_bf8_bf8 ]]; }; then
            ok "gfx942 $k: $m $first, $v VGPRs (of them $a AGPRs), LDS $lds B, no scratch: $occ waves a SIMD by registers, $((65536 / lds)) blocks a CU by LDS"
        else bad "gfx942 $k: mfma '$m' first '$first' vgpr '$v' agpr '$a' lds '$lds' scratch '$scr' vspill '$sp'"; fi
    done
    # the attention forward: at least 16 MFMAs (S over d, P V), no scratch, one wave a SIMD at least (VGPRs +
    # AGPRs <= 512) and LDS inside the CU's 64 KiB
    for k in $attn_mfma_entries; do
        m=$(col $k mfma) v=$(col $k vgpr) a=$(col $k agpr) lds=$(col $k lds) scr=$(col $k scratch) sp=$(col $k vspill)
        first=$(grep "^$k " "$tmp/out" | awk '{print $NF}')
        if [ "${m:-0}" -ge 16 ] 2>/dev/null && [ "$scr" = 0 ] && [ "$sp" = 0 ] && [ "${v:-999}" -le 512 ] 2>/dev/null \
            && [ "${lds:-99999}" -le 65536 ] 2>/dev/null && [[ "$first" == v_mfma_f32_32x32x8* ]]; then
            ok "gfx942 $k: $m $first, $v VGPRs (of them $a AGPRs), LDS $lds B, no scratch: $((512 / v)) wave(s) a SIMD by registers"
        else bad "gfx942 $k: mfma '$m' first '$first' vgpr '$v' agpr '$a' lds '$lds' scratch '$scr' vspill '$sp'"; fi
    done
    expect 0 "isa --expect mfma passes on kernels.hip" $K isa --arch gfx942 --expect mfma
    has "$tmp/out" "^expect mfma: pass: 16 of $rows kernels hold mfma instructions: kg_gemm_mfma_f16, kg_gemm_mfma_bf16, kg_grouped_mfma_f16, kg_grouped_mfma_bf16, kg_grouped_wgrad_mfma_f16, kg_grouped_wgrad_mfma_bf16, kg_attn_fwd_mfma_f16, kg_attn_fwd_mfma_bf16, kg_qgemm_mfma_fp8_bf16, kg_qgrouped_mfma_fp8_bf16, kg_qgemm_mfma_bf8_bf16, kg_qgrouped_mfma_bf8_bf16, kg_qgemm_mfma_fp8_f32, kg_qgrouped_mfma_fp8_f32, kg_qgemm_mfma_bf8_f32, kg_qgrouped_mfma_bf8_f32$" \
        "--expect names the sixteen MFMA entries"
    expect 1 "isa --expect mfma fails on a -D KG_PORTABLE=1 build" $K isa --arch gfx942 --expect mfma --variant portable -D KG_PORTABLE=1
    has "$tmp/out" "^expect mfma: FAIL: none of the $((rows - 16)) kernels holds mfma instructions" "the failure says none of them has it"

    mkdir -p "$tmp/nodis"                           # clang-19, but no disassembler
    ln -sf "$(command -v clang-19)" "$tmp/nodis/clang-19"
    if [ ! -e /opt/rocm/llvm/bin/llvm-objdump ]; then
        PATH="$tmp/nodis" run $K isa --arch gfx942 --kernels "$tmp/mfma.hip" --expect mfma
        [ $rc -eq 1 ] && ok "no disassembler: --expect mfma never passes, even on MFMA code (exit 1)" \
            || bad "no disassembler, --expect mfma: exit $rc"
        has "$tmp/out" "^expect mfma: FAIL: no disassembler found" "it says there is no disassembler"
        PATH="$tmp/nodis" run $K isa --arch gfx942 --kernels "$tmp/mfma.hip"
        [ $rc -eq 0 ] && ! grep -q "^kg_" "$tmp/out" && grep -q "instruction counts are not available" "$tmp/out" \
            && ok "no disassembler, no --expect: exit 0, no counts, and it says so" || bad "no disassembler: exit $rc"
    fi
else
    echo "skip: clang-19 / llvm-objdump-19 / llvm-readobj-19 not installed (.ci/run installs them)"
fi

echo "== kgate isa: cuobjdump and nvdisasm output (stand-ins replaying lines of an H200 capture, CUDA 13.0)"
if ldconfig -p 2>/dev/null | grep -q libnvrtc || [ -e /usr/local/cuda/lib64/libnvrtc.so ]; then
    # Two kernels as each tool printed them, trimmed (and kg_hmma given a 1 KiB stack, as a kernel
    # with a local array had): kg_wgmma has 2 HGMMA among 6 instructions, kg_hmma 1 HMMA among 9
    # (a NOP inside counts, the two that pad its end do not).
    mkdir -p "$tmp/cuobjdump" "$tmp/nvdisasm"
    cat >"$tmp/cuobjdump/sass" <<'EOF'

	code for sm_90a
	.target	sm_90a

		Function : kg_wgmma
	.headerflags	@"EF_CUDA_ACCELERATORS EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                                /* 0x00000a00ff017b82 */
                                                                                         /* 0x000fe20000000800 */
        /*0060*/              @!P0 BRA 0xe80 ;                                           /* 0x0000000c00848947 */
        /*01a0*/                   WARPGROUP.ARRIVE ;                                    /* 0x00000000000079c5 */
        /*0200*/                   HGMMA.64x8x16.F32.BF16 R24, gdesc[UR12], R24, gsb0 ;  /* 0x000000000c1879f0 */
        /*0280*/                   HGMMA.64x8x16.F32.BF16 R24, gdesc[UR20], R24, gsb0 ;  /* 0x00000000141879f0 */
        /*0e80*/                   EXIT ;                                                /* 0x000000000000794d */
		Function : kg_hmma
	.headerflags	@"EF_CUDA_ACCELERATORS EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                                /* 0x00000a00ff017b82 */
        /*0010*/                   S2R R13, SR_TID.X ;                                   /* 0x00000000000d7919 */
        /*0070*/                   LDG.E R6, desc[UR4][R4.64] ;                          /* 0x0000000404067981 */
        /*00d0*/                   HMMA.16816.F32.BF16 R8, R8, R6, RZ ;                  /* 0x000000060808723c */
                                                                                         /* 0x004fe200000418ff */
        /*00f0*/                   NOP ;                                                 /* 0x0000000000007918 */
        /*0100*/                   FADD R9, R8, R9 ;                                     /* 0x0000000908097221 */
        /*0140*/                   STG.E desc[UR4][R6.64], R11 ;                         /* 0x0000000b06007986 */
        /*0150*/                   EXIT ;                                                /* 0x000000000000794d */
        /*0160*/                   BRA 0x160;                                            /* 0xfffffffc00fc7947 */
        /*0170*/                   NOP;                                                  /* 0x0000000000007918 */
        /*0180*/                   NOP;                                                  /* 0x0000000000007918 */
		..........
EOF
    cat >"$tmp/cuobjdump/res" <<'EOF'

Resource usage:
 Common:
  GLOBAL:0
 Function kg_wgmma:
  REG:30 STACK:0 SHARED:1280 LOCAL:0 CONSTANT[0]:556 TEXTURE:0 SURFACE:0 SAMPLER:0
 Function kg_hmma:
  REG:16 STACK:1024 SHARED:0 LOCAL:0 CONSTANT[0]:552 TEXTURE:0 SURFACE:0 SAMPLER:0
EOF
    cat >"$tmp/nvdisasm/out" <<'EOF'
	.target	sm_90a

//--------------------- .nv.info                  --------------------------
	.section	.nv.info,"",@"SHT_CUDA_INFO"
	//----- nvinfo : EIATTR_REGCOUNT
        /*0000*/ 	.byte	0x04, 0x2f
        /*0002*/ 	.short	(.L_1 - .L_0)
.L_0:
        /*0004*/ 	.word	index@(kg_hmma)
        /*0008*/ 	.word	0x00000010
	//----- nvinfo : EIATTR_FRAME_SIZE
        /*0010*/ 	.word	index@(kg_hmma)
        /*0014*/ 	.word	0x00000400
	//----- nvinfo : EIATTR_REGCOUNT
        /*001c*/ 	.word	index@(kg_wgmma)
        /*0020*/ 	.word	0x0000001e
	//----- nvinfo : EIATTR_MIN_STACK_SIZE
        /*004c*/ 	.word	index@(kg_hmma)
        /*0050*/ 	.word	0x00000400
	//----- nvinfo : EIATTR_MIN_STACK_SIZE
        /*0058*/ 	.word	index@(kg_wgmma)
        /*005c*/ 	.word	0x00000000
//--------------------- .text.kg_wgmma            --------------------------
	.section	.text.kg_wgmma,"ax",@progbits
        .global         kg_wgmma
kg_wgmma:
.text.kg_wgmma:
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0060*/              @!P0 BRA `(.L_x_7) ;
        /*01a0*/                   WARPGROUP.ARRIVE ;
        /*0200*/                   HGMMA.64x8x16.F32.BF16 R24, gdesc[UR12], R24, gsb0 ;
        /*0280*/                   HGMMA.64x8x16.F32.BF16 R24, gdesc[UR20], R24, gsb0 ;
.L_x_7:
        /*0e80*/                   EXIT ;
//--------------------- .text.kg_hmma             --------------------------
	.section	.text.kg_hmma,"ax",@progbits
.text.kg_hmma:
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   S2R R13, SR_TID.X ;
        /*0070*/                   LDG.E R6, desc[UR4][R4.64] ;
        /*00d0*/                   HMMA.16816.F32.BF16 R8, R8, R6, RZ ;
        /*00f0*/                   NOP ;
        /*0100*/                   FADD R9, R8, R9 ;
        /*0140*/                   STG.E desc[UR4][R6.64], R11 ;
        /*0150*/                   EXIT ;
.L_x_9:
        /*0160*/                   BRA `(.L_x_9);
        /*0170*/                   NOP;
        /*0180*/                   NOP;
//--------------------- .nv.shared.reserved.0     --------------------------
.nv.shared.reserved.0:
	.zero		1024
//--------------------- .nv.shared.kg_wgmma       --------------------------
	.section	.nv.shared.kg_wgmma,"aw",@nobits
.nv.shared.kg_wgmma:
	.zero		1280
EOF
    cat=$(command -v cat)                           # the stand-ins run with only themselves on PATH
    printf '#!/bin/sh\ncase "$1" in -sass) exec %s %s/sass;; -res-usage) exec %s %s/res;; *) exit 1;; esac\n' \
        "$cat" "$tmp/cuobjdump" "$cat" "$tmp/cuobjdump" >"$tmp/cuobjdump/cuobjdump"
    printf '#!/bin/sh\nexec %s %s/out\n' "$cat" "$tmp/nvdisasm" >"$tmp/nvdisasm/nvdisasm"
    chmod +x "$tmp/cuobjdump/cuobjdump" "$tmp/nvdisasm/nvdisasm"
    want_w="kg_wgmma 6 2 2 0 30 1280 0 0 HGMMA.64x8x16.F32.BF16"
    want_h="kg_hmma 9 1 0 1 16 0 1024 0 HMMA.16816.F32.BF16"
    for tool in cuobjdump nvdisasm; do
        [ $tool = nvdisasm ] && [ -e /usr/local/cuda/bin/cuobjdump ] && continue   # cuobjdump would be preferred
        PATH="$tmp/$tool" run $K isa --arch sm_90a --expect wgmma
        w=$(grep "^kg_wgmma " "$tmp/out" | tr -s ' ') h=$(grep "^kg_hmma " "$tmp/out" | tr -s ' ')
        [ "$rc" -eq 0 ] && [ "$w" = "$want_w" ] && [ "$h" = "$want_h" ] \
            && ok "$tool: wgmma and mma counted per kernel, registers, shared and stack read, --expect wgmma passes" \
            || bad "$tool: exit $rc; rows '$w' / '$h', want '$want_w' / '$want_h'"
        has "$tmp/out" "^expect wgmma: pass: 1 of 2 kernels hold wgmma instructions: kg_wgmma$" "$tool: --expect names kg_wgmma"
        PATH="$tmp/$tool" run $K isa --arch sm_90a --expect mfma
        [ "$rc" -eq 1 ] && grep -q "^expect mfma: FAIL: none of the 2 kernels holds mfma instructions (an AMD class)" "$tmp/out" \
            && ok "$tool: --expect mfma fails on NVIDIA code and says mfma is an AMD class" || bad "$tool --expect mfma: exit $rc"
    done
    PATH="$tmp/empty" run $K isa --arch sm_90a --expect mma
    if [ ! -e /usr/local/cuda/bin/cuobjdump ] && [ ! -e /usr/local/cuda/bin/nvdisasm ]; then
        [ "$rc" -eq 1 ] && grep -q "^expect mma: FAIL: no disassembler found (tried cuobjdump" "$tmp/out" \
            && ok "sm_90a without cuobjdump or nvdisasm: --expect never passes (exit 1)" || bad "sm_90a, no disassembler: exit $rc"
    fi
else
    echo "skip: no libnvrtc on this machine"
fi
