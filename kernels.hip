// kernels.hip — kgate's GPU kernels, HIP dialect, device code only.
//
// Compiled at run time by kgate: hiprtc on AMD (--offload-arch=<gcnArchName>),
// NVRTC on NVIDIA (--gpu-architecture=sm_XY, sm_90a on Hopper).  Also compiles
// with bare clang for a CPU-only compile check:
//   clang-19 -x hip --offload-arch=gfx942 -nogpulib -nogpuinc --cuda-device-only \
//            --no-gpu-bundle-output -O3 kernels.hip -o k.co
// A file given with `kgate --kernels FILE` must provide the same extern "C"
// entry points with the same signatures (README: "Kernel entry points").
//
// Knobs are macros with defaults, so a variant is `-D NAME=VALUE`, not a new file.
//
// Entry points (every arch; S is float, or the fp16/bf16 bits as unsigned short)
//   kg_gemm_{f32,f16,bf16}             portable tiled GEMM, strided operands
//   kg_grouped_{f32,f16,bf16}          grouped GEMM (MoE), ragged rows: forward and dA
//   kg_grouped_wgrad_{f32,f16,bf16}    grouped GEMM, ragged inner dimension: dB
//   kg_attn_fwd_{f16,bf16}             flash attention forward, varlen THD, GQA, causal
//   kg_attn_bwd_pre_{f16,bf16}         attention backward: Dsum = rowsum(O * dO)
//   kg_attn_bwd_dkdv_{f16,bf16}        attention backward: dK, dV (one block per key tile)
//   kg_attn_bwd_dq_{f16,bf16}          attention backward: dQ (one block per query tile)
//   kg_quantize                        fp32 -> fp8 / FP4 codes, amax or MX (E8M0) block scales
//   kg_qgemm_{f32,bf16}                GEMM of fp8 / FP4 codes with block scales, C = A B^T
//   kg_qgrouped_{f32,bf16}             the same, grouped (MoE), ragged rows
//   kg_clock                           the SM clock, read by the timer between samples
// sm_90a only (Hopper: wgmma, TMA, mbarrier; optional in a --kernels file):
//   kg_gemm_sm90_{f16,bf16}            persistent GEMM and grouped GEMM, K-major operands
//   kg_qgemm_sm90_{e4m3,e5m2}_{bf16,f32}     the same for fp8 with per-tensor or per-row scales
//   kg_qgemm_sm90_n192_{e4m3,e5m2}_{bf16,f32}  the same at tiles of 128 x 192 (one partial a stage)
//   kg_qgemm_sm90_blk_{e4m3,e5m2}_{bf16,f32} the same with blockwise scales (1 x 128 of A, 128 x 128 of B)
//   kg_qgemm_sm90_n192_blk_{e4m3,e5m2}_bf16  blockwise at tiles of 128 x 192 (one partial a stage)
//   kg_qgemm_sm90_mx_{e4m3,e5m2}_{bf16,f32}  the same for MX (E8M0 scales per 32 of K): MXFP8, MXFP4
//   kg_gemm_sm90_{nn,tn,tt}_{f16,bf16} kg_gemm_sm90_<dt> for kgate's other --layout letters
//   kg_gemm_sm90_wgrad_{f16,bf16}      the grouped GEMM's dB (ragged inner dimension)
//   kg_attn_fwd_sm90_d{64,128,256}_{f16,bf16}             flash attention forward (head dims up to 256)
//   kg_attn_bwd_{dkdv,dq}_sm90_d{64,128}_{f16,bf16}       attention backward in two passes
//   kg_attn_bwd_fused_sm90_{d64,d128,d128nc}_{f16,bf16}   the backward in one pass, dQ summed in order
//   kg_attn_bwd_dq_post_sm90_{d64,d128,d128nc}_{f16,bf16} dQ from the fused pass's sums
//   kg_pack_rows                       copies an operand TMA cannot read into 16-byte rows
//   kg_pack_fp4_e4m3                   the same for FP4 codes, unpacked to E4M3 (exact)
// gfx942 only (CDNA3: MFMA; optional in a --kernels file):
//   kg_gemm_mfma_{f16,bf16}            kg_gemm_<dt> on v_mfma_f32_32x32x8 (every layout, strided)
//   kg_grouped_mfma_{f16,bf16}         kg_grouped_<dt> on the same kernel (ragged rows)
//   kg_grouped_wgrad_mfma_{f16,bf16}   kg_grouped_wgrad_<dt> on the same kernel (ragged inner)
//   kg_qgemm_mfma_{fp8,bf8}_{bf16,f32} kg_qgemm_<out> for FNUZ fp8 on v_mfma_f32_32x32x16 (scales per tensor or row)
//   kg_qgrouped_mfma_{fp8,bf8}_{bf16,f32} kg_qgrouped_<out> on the same kernel (ragged rows)
//   kg_attn_fwd_mfma_{f16,bf16}        kg_attn_fwd_<dt> on v_mfma_f32_32x32x8 (head dims up to 128)

// ===== Prelude: the few names that differ between compilers =====

#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
#define KG_CUDA 1
#elif defined(__HIP__) && !defined(__HIPCC_RTC__) && !defined(HIP_INCLUDE_HIP_HIP_RUNTIME_H)
#define KG_BARE_CLANG 1   // clang -nogpuinc: no HIP headers, define what hiprtc gives
#endif

#if defined(KG_BARE_CLANG)
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __shared__ __attribute__((shared))
#define KG_LAUNCH_BOUNDS(n) __attribute__((amdgpu_flat_work_group_size(1, n)))
__device__ static inline unsigned kg_tid() { return __builtin_amdgcn_workitem_id_x(); }
__device__ static inline unsigned kg_bid_x() { return __builtin_amdgcn_workgroup_id_x(); }
__device__ static inline unsigned kg_bid_y() { return __builtin_amdgcn_workgroup_id_y(); }
__device__ static inline unsigned kg_bid_z() { return __builtin_amdgcn_workgroup_id_z(); }
// Blocks along x (gridDim.x): the dispatch packet holds the grid in work-items,
// a whole number of workgroups for a HIP launch.
__device__ static inline unsigned kg_grid_x() {
    unsigned items = __builtin_amdgcn_grid_size_x(), wg = __builtin_amdgcn_workgroup_size_x();
    return (items + wg - 1) / wg;
}
__device__ static inline void kg_sync() {
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
    __builtin_amdgcn_s_barrier();
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}
#else
#define KG_LAUNCH_BOUNDS(n) __launch_bounds__(n)
__device__ static inline unsigned kg_tid() { return threadIdx.x; }
__device__ static inline unsigned kg_bid_x() { return blockIdx.x; }
__device__ static inline unsigned kg_bid_y() { return blockIdx.y; }
__device__ static inline unsigned kg_bid_z() { return blockIdx.z; }
__device__ static inline unsigned kg_grid_x() { return gridDim.x; }
__device__ static inline void kg_sync() { __syncthreads(); }
#endif

__device__ static inline float kg_fma(float a, float b, float c) {
#if defined(KG_CUDA)
    return fmaf(a, b, c);
#else
    return __builtin_fmaf(a, b, c);
#endif
}

// Accurate fp32 exp and log (CUDA: expf/logf, not the __expf intrinsics; AMDGPU:
// the llvm.exp/llvm.log intrinsics, expanded inline, no library call).
__device__ static inline float kg_exp(float x) {
#if defined(KG_CUDA)
    return expf(x);
#else
    return __builtin_expf(x);
#endif
}
__device__ static inline float kg_log(float x) {
#if defined(KG_CUDA)
    return logf(x);
#else
    return __builtin_logf(x);
#endif
}

// Wall time in ns (NVIDIA %globaltimer; AMD s_memrealtime, 100 MHz on gfx9):
// kg_clock's timer probe and the fused backward's diagnostic builds.
__device__ static inline unsigned long long kg_wall_ns() {
#if defined(KG_CUDA)
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
#else
    return __builtin_amdgcn_s_memrealtime() * 10ull;
#endif
}

// Every entry point declares whether it accumulates with atomics (so that its
// result may vary from run to run): kgate reads the device global NAME_atomics
// after loading the code object; nonzero makes `--repeat` gate each run
// instead of comparing the runs bit for bit (README "Kernel entry points").
#define KG_ATOMICS(name, flag) extern "C" __device__ int name##_atomics = flag;

// A/A builds: `kgate noise` compiles the reference twice, the second time with
// -D KG_BUILD_ID=2, so that the two code objects differ (in this global) while
// every kernel's code is the same.
#ifdef KG_BUILD_ID
extern "C" __device__ int kg_build_id = KG_BUILD_ID;
#endif

typedef unsigned short kg_u16;   // fp16 and bf16 are stored as their bits
typedef long long kg_i64;

__device__ static inline float kg_f32_from_bits(unsigned u) {
#if defined(KG_CUDA)
    return __uint_as_float(u);
#else
    return __builtin_bit_cast(float, u);
#endif
}
__device__ static inline unsigned kg_bits_from_f32(float f) {
#if defined(KG_CUDA)
    return __float_as_uint(f);
#else
    return __builtin_bit_cast(unsigned, f);
#endif
}

// -infinity in fp32 (the bits 0xff800000).
__device__ static inline float kg_neg_inf() { return kg_f32_from_bits(0xff800000u); }

// bf16: the high half of an fp32; round to nearest even, NaN kept quiet.
__device__ static inline float kg_bf16_to_f32(kg_u16 h) { return kg_f32_from_bits((unsigned)h << 16); }
__device__ static inline kg_u16 kg_f32_to_bf16(float f) {
    unsigned u = kg_bits_from_f32(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (kg_u16)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (kg_u16)(u >> 16);
}

// fp16: the hardware conversions (round to nearest even).
__device__ static inline float kg_f16_to_f32(kg_u16 h) {
#if defined(KG_CUDA)
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
#else
    return (float)__builtin_bit_cast(_Float16, h);
#endif
}
__device__ static inline kg_u16 kg_f32_to_f16(float f) {
#if defined(KG_CUDA)
    kg_u16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
#else
    return __builtin_bit_cast(kg_u16, (_Float16)f);
#endif
}

// One struct per storage type: how to read it as fp32 and write fp32 to it.
struct kg_f32 {
    typedef float S;
    __device__ static float ld(S v) { return v; }
    __device__ static S st(float f) { return f; }
};
struct kg_f16 {
    typedef kg_u16 S;
    __device__ static float ld(S v) { return kg_f16_to_f32(v); }
    __device__ static S st(float f) { return kg_f32_to_f16(f); }
};
struct kg_bf16 {
    typedef kg_u16 S;
    __device__ static float ld(S v) { return kg_bf16_to_f32(v); }
    __device__ static S st(float f) { return kg_f32_to_bf16(f); }
};

// ===== GEMM, portable path =====
//
// C[m][n] = sum_k X[m][k] * Y[k][n], fp32 accumulation, output rounded to the
// storage type.  Every operand is addressed through element strides, so one
// kernel serves all four layouts and the backward products:
//   X[m][k] at X + m*sxm + k*sxk,  Y[k][n] at Y + k*syk + n*syn,
//   C[m][n] at C + m*scm + n*scn.
// Grid: (ceil(N/GEMM_BN), ceil(M/GEMM_BM)), block: GEMM_THREADS threads.
// Each thread owns a GEMM_TM x GEMM_TN block of C strided by the thread grid;
// accumulation over k is sequential (one FMA per k), so the result is
// deterministic and independent of the launch.  Entries: kg_gemm_f16/bf16 and
// the grouped kernels of every type; kg_gemm_f32 has its own kernel (the next
// section), with the same arithmetic.

#ifndef GEMM_BM
#define GEMM_BM 64
#endif
#ifndef GEMM_BN
#define GEMM_BN 64
#endif
#ifndef GEMM_BK
#define GEMM_BK 16
#endif
#define GEMM_TX 16                       // thread grid is GEMM_TX x GEMM_TY
#define GEMM_TY 16
#define GEMM_THREADS (GEMM_TX * GEMM_TY)
#define GEMM_TM (GEMM_BM / GEMM_TY)
#define GEMM_TN (GEMM_BN / GEMM_TX)
#if GEMM_BM % GEMM_TY || GEMM_BN % GEMM_TX || GEMM_BM < GEMM_TY || GEMM_BN < GEMM_TX
#error "GEMM_BM and GEMM_BN must be multiples of 16"
#endif

// The tile kgate sizes the GEMM grids by (read after loading; 64 if absent),
// but kg_gemm_f32's (kg_gemm_f32_tile_m/_n, next section).  Grouped launches
// count their row tiles on the host in tiles of 64, so a build with another
// GEMM_BM runs gemm cases only.
extern "C" __device__ int kg_gemm_tile_m = GEMM_BM;
extern "C" __device__ int kg_gemm_tile_n = GEMM_BN;

// One block's GEMM_BM x GEMM_BN tile of C, rows [m0, m0+GEMM_BM) and columns
// [n0, n0+GEMM_BN), clipped to m < M and n < N: rows and columns outside are
// neither read (from X, Y) nor written (to C).  K = 0 writes zeros.  Every
// thread of the block must call it (it has barriers); m0, n0, M, N, K must be
// the same for the whole block.
template <class D>
__device__ static inline void kg_gemm_portable(const typename D::S *X, const typename D::S *Y,
                                               typename D::S *C, int M, int N, int K,
                                               kg_i64 sxm, kg_i64 sxk, kg_i64 syk, kg_i64 syn,
                                               kg_i64 scm, kg_i64 scn, int m0, int n0)
{
    __shared__ float xs[GEMM_BK][GEMM_BM + 1];
    __shared__ float ys[GEMM_BK][GEMM_BN + 1];
    const int tid = (int)kg_tid(), tx = tid % GEMM_TX, ty = tid / GEMM_TX;
    float acc[GEMM_TM][GEMM_TN];
    for (int i = 0; i < GEMM_TM; i++)
        for (int j = 0; j < GEMM_TN; j++) acc[i][j] = 0.0f;

    for (int k0 = 0; k0 < K; k0 += GEMM_BK) {
        // Load the X tile; the index that is contiguous in memory varies fastest.
        for (int e = tid; e < GEMM_BM * GEMM_BK; e += GEMM_THREADS) {
            int mm = sxk == 1 ? e / GEMM_BK : e % GEMM_BM;
            int kk = sxk == 1 ? e % GEMM_BK : e / GEMM_BM;
            int m = m0 + mm, k = k0 + kk;
            xs[kk][mm] = (m < M && k < K) ? D::ld(X[(kg_i64)m * sxm + (kg_i64)k * sxk]) : 0.0f;
        }
        for (int e = tid; e < GEMM_BN * GEMM_BK; e += GEMM_THREADS) {
            int nn = syn == 1 ? e % GEMM_BN : e / GEMM_BK;
            int kk = syn == 1 ? e / GEMM_BN : e % GEMM_BK;
            int n = n0 + nn, k = k0 + kk;
            ys[kk][nn] = (n < N && k < K) ? D::ld(Y[(kg_i64)k * syk + (kg_i64)n * syn]) : 0.0f;
        }
        kg_sync();
        int kn = K - k0 < GEMM_BK ? K - k0 : GEMM_BK;
        for (int kk = 0; kk < kn; kk++) {
            float xv[GEMM_TM], yv[GEMM_TN];
            for (int i = 0; i < GEMM_TM; i++) xv[i] = xs[kk][ty + i * GEMM_TY];
            for (int j = 0; j < GEMM_TN; j++) yv[j] = ys[kk][tx + j * GEMM_TX];
            for (int i = 0; i < GEMM_TM; i++)
                for (int j = 0; j < GEMM_TN; j++) acc[i][j] = kg_fma(xv[i], yv[j], acc[i][j]);
        }
        kg_sync();
    }
    for (int i = 0; i < GEMM_TM; i++) {
        int m = m0 + ty + i * GEMM_TY;
        for (int j = 0; j < GEMM_TN; j++) {
            int n = n0 + tx + j * GEMM_TX;
            if (m < M && n < N) C[(kg_i64)m * scm + (kg_i64)n * scn] = D::st(acc[i][j]);
        }
    }
}

#define KG_GEMM_ENTRY(name, D)                                                               \
    KG_ATOMICS(name, 0)                                                                      \
    extern "C" __global__ void KG_LAUNCH_BOUNDS(GEMM_THREADS)                               \
    name(const D::S *X, const D::S *Y, D::S *C, int M, int N, int K, kg_i64 sxm, kg_i64 sxk, \
         kg_i64 syk, kg_i64 syn, kg_i64 scm, kg_i64 scn)                                     \
    {                                                                                        \
        kg_gemm_portable<D>(X, Y, C, M, N, K, sxm, sxk, syk, syn, scm, scn,                  \
                            (int)kg_bid_y() * GEMM_BM, (int)kg_bid_x() * GEMM_BN);           \
    }

KG_GEMM_ENTRY(kg_gemm_f16, kg_f16)
KG_GEMM_ENTRY(kg_gemm_bf16, kg_bf16)

// ===== GEMM, portable path: fp32 =====
//
// kg_gemm_f32: the same product, arguments and contract as kg_gemm_portable
// (strided X, Y, C; rows and columns outside M, N neither read nor written;
// K = 0 writes zeros), in true fp32: each C[m][n] is one register accumulated
// from 0.0f by one FMA per k, k ascending, so the result is kg_gemm_portable's
// bit for bit, deterministic and independent of the launch.  Only k < K enters
// a sum (the zeros that fill a partial last k-tile are not added: fma(0, 0, -0)
// would be +0).
//   - Grid (ceil(N/SG_BN), ceil(M/SG_BM)), the tile published as
//     kg_gemm_f32_tile_m/_n; SG_THREADS = 256 threads as a 16 x 16 grid (warp
//     w: rows (w / 4) * 8 .. +7 of it, columns (w % 4) * 4 .. +3; lane l: row
//     l / 4, column l % 4 within those).  Thread (tm, tn) owns SG_TM x SG_TN
//     outputs: rows g*64 + tm*4 + 0..3 and columns h*64 + tn*4 + 0..3 of the
//     tile, for g < SG_TM / 4, h < SG_TN / 4; tiles of 128 x 256 (8 x 16
//     outputs a thread) on sm_90, 128 x 128 (8 x 8) elsewhere;
//     k-tiles of SG_BK (as shipped 16 on CUDA, 8 on HIP).
//   - Shared memory: two stages of X's tile as [SG_BK][SG_BM] and Y's as
//     [SG_BK][SG_BN] (k-major, each k-row padded by SG_PAD floats), read as
//     float4 runs of 4 rows or columns.  Tile t+1 is loaded from global memory
//     into registers while tile t is multiplied, then stored to the other
//     stage: one barrier per k-tile.
//   - Loads, per operand and uniform for the block: a "slot" is 4 elements
//     along the contiguous dimension (k when sxk / syk = 1, the rows or
//     columns when sxm / syn = 1).  When that stride is 1 and the base and the
//     other stride are multiples of 16 bytes, a slot that lies inside the
//     matrix is one 128-bit load; a slot across an edge, and every slot of an
//     operand with other strides (its smaller |stride| taken as contiguous),
//     loads element by element, out-of-range elements as zeros.  A slot along
//     k is stored transposed (4 scalar stores, the padding spreading them
//     over the banks), a slot along rows as one 128-bit store.
//   - Stores: 128-bit runs of 4 columns where C is row-major (scn = 1; scm
//     and the base 16-byte aligned), of 4 rows where it is column-major (scm
//     = 1, the same for scn), element by element at the edges and otherwise.
// Knobs: SG_BM, SG_BN (multiples of 64), SG_BK (a multiple of 4; SG_BM x SG_BK
// and SG_BN x SG_BK multiples of 1024, so that each thread loads whole slots),
// SG_MIN_BLOCKS (CUDA: __launch_bounds__' blocks per SM; 0 as shipped leaves it
// out: a bound of 2, at most 128 registers a thread, spills at SG_BK = 16).
// On the H200 (2026-12-02, kgate compare, 7 rounds) SG_BK = 16 without the
// bound took 0.927x the time of SG_BK = 8 with it at 8192x8192x1024 NN, 0.783x
// at 1024^3 and 0.898x at 333x517x129.  HIP keeps SG_BK = 8, unmeasured on an
// AMD GPU: clang-19's gfx942 build at 16 spills 6 SGPRs (238 VGPRs), at 8 none.
// SG_BN = 256 (2026-12-03) took 0.940x the time of 128 x 128 (5 rounds) at
// 8192x8192x1024 NN; against a third kernel (7 rounds), 0.929x where
// 128 x 128 took 0.989x (README, the variants ledger).

#ifndef SG_BM
#define SG_BM 128
#endif
#ifndef SG_BN
#if defined(KG_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900
#define SG_BN 256                        // sm_90: 50 KiB of static shared memory, which sm_80-89 and sm_100/120 refuse
#else
#define SG_BN 128
#endif
#endif
#ifndef SG_BK
#ifdef KG_CUDA
#define SG_BK 16
#else
#define SG_BK 8
#endif
#endif
#ifndef SG_MIN_BLOCKS
#define SG_MIN_BLOCKS 0                  // CUDA: blocks per SM that ptxas fits registers for (0: no bound)
#endif
#define SG_THREADS 256
#define SG_TM (SG_BM / 16)               // a thread's rows of C: SG_TM / 4 runs of 4, 64 apart
#define SG_TN (SG_BN / 16)               // and columns
#define SG_PAD 4                         // floats after each k-row of a shared tile
#if SG_BM % 64 || SG_BN % 64 || SG_BM < 64 || SG_BN < 64 || SG_BK % 4 || SG_BK < 4 || \
    (SG_BM * SG_BK) % (4 * SG_THREADS) || (SG_BN * SG_BK) % (4 * SG_THREADS)
#error "SG_BM, SG_BN: multiples of 64; SG_BK: a multiple of 4 with SG_BM*SG_BK, SG_BN*SG_BK multiples of 1024"
#endif

#if defined(KG_CUDA) && SG_MIN_BLOCKS > 0
#define SG_LAUNCH_BOUNDS __launch_bounds__(SG_THREADS, SG_MIN_BLOCKS)
#else
#define SG_LAUNCH_BOUNDS KG_LAUNCH_BOUNDS(SG_THREADS)
#endif

// The tile kgate sizes kg_gemm_f32's grid by (absent: kg_gemm_tile_m/_n).
extern "C" __device__ int kg_gemm_f32_tile_m = SG_BM;
extern "C" __device__ int kg_gemm_f32_tile_n = SG_BN;

// Four floats moved as one 128-bit load or store; only at 16-byte aligned
// addresses.  Clang: a vector type, so that the load stays one (as a struct
// its fields may be loaded apart and merged with a neighbouring branch's).
#if defined(KG_CUDA)
struct __attribute__((aligned(16))) kg_f32x4 { float x, y, z, w; };
#else
typedef float kg_f32x4 __attribute__((ext_vector_type(4)));
#endif

// One operand of kg_gemm_simt_f32 as its tiles see it: element (r, k) -- r a
// row of X (m) or a column of Y (n), k along the inner dimension -- at
// a + r*sr + k*sk, for r < R, k < K.  The block's tiles are rows [r0, r0+BR)
// by k [k0, k0+SG_BK); each thread owns L slots of 4 elements of a tile
// (placed by init, the same for every tile), held in v between the global
// load (fetch) and the shared store (put).
template <int BR>
struct kg_sg_operand {
    enum { L = BR * SG_BK / (4 * SG_THREADS) };
    const float *a;
    kg_i64 sr, sk, step; // step: elements between a slot's 4 values (sk or sr)
    int r[L], k[L];      // a slot's first element: its row and k within the tile
    int r0, R, kfast, vec;
    float v[L][4];

    // Choose the loads (see the section's comment) and place the thread's
    // slots: along k, slot e = tid + l*SG_THREADS holds row e / (SG_BK/4),
    // k (e % (SG_BK/4))*4 + 0..3; along rows, k e / (BR/4), rows
    // (e % (BR/4))*4 + 0..3.  Every thread with the same arguments.
    __device__ void init(const float *a_, kg_i64 sr_, kg_i64 sk_, int r0_, int R_, int tid)
    {
        a = a_, sr = sr_, sk = sk_, r0 = r0_, R = R_;
        int aligned = (unsigned long long)a_ % 16 == 0;
        int kv = sk_ == 1 && sr_ % 4 == 0 && aligned, rv = sr_ == 1 && sk_ % 4 == 0 && aligned;
        kg_i64 ask = sk_ < 0 ? -sk_ : sk_, asr = sr_ < 0 ? -sr_ : sr_;
        kfast = kv ? 1 : rv ? 0 : ask < asr;
        vec = kv || rv;
        step = kfast ? sk_ : sr_;
#pragma unroll
        for (int l = 0; l < L; l++) {
            int e = tid + l * SG_THREADS;
            r[l] = kfast ? e / (SG_BK / 4) : e % (BR / 4) * 4;
            k[l] = kfast ? e % (SG_BK / 4) * 4 : e / (BR / 4);
        }
    }

    // Load the thread's slots of the tile at k0 into v: a slot inside the
    // matrix in one 128-bit load when vec, else element by element, zeros
    // outside (rows >= R, k >= K); nothing outside the matrix is read.
    __device__ void fetch(int k0, int K)
    {
#pragma unroll
        for (int l = 0; l < L; l++) {
            int rr = r0 + r[l], kk = k0 + k[l];
            kg_i64 o = (kg_i64)rr * sr + (kg_i64)kk * sk;
            int full = kfast ? rr < R && kk + 3 < K : rr + 3 < R && kk < K;
            if (vec && full) {
                kg_f32x4 q = *(const kg_f32x4 *)(a + o);
                v[l][0] = q.x, v[l][1] = q.y, v[l][2] = q.z, v[l][3] = q.w;
            } else {
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    int in = kfast ? rr < R && kk + i < K : rr + i < R && kk < K;
                    v[l][i] = in ? a[o + i * step] : 0.0f;
                }
            }
        }
    }

    // Store v into the shared tile s ([SG_BK][BR + SG_PAD], 16-byte aligned rows).
    __device__ void put(float (*s)[BR + SG_PAD])
    {
#pragma unroll
        for (int l = 0; l < L; l++) {
            if (kfast) {
#pragma unroll
                for (int i = 0; i < 4; i++) s[k[l] + i][r[l]] = v[l][i];
            } else {
                kg_f32x4 q = { v[l][0], v[l][1], v[l][2], v[l][3] };
                *(kg_f32x4 *)&s[k[l]][r[l]] = q;
            }
        }
    }
};

// One k of a thread's SG_TM x SG_TN outputs: acc[i][j] += x[i] * y[j], x from
// the k-row xk of X's shared tile (rows g*64 + tm*4 + 0..3), y from yk.
__device__ static inline void kg_sg_step(float (*acc)[SG_TN], const float *xk, const float *yk, int tm, int tn)
{
    float x[SG_TM], y[SG_TN];
#pragma unroll
    for (int g = 0; g < SG_TM / 4; g++) {
        kg_f32x4 q = *(const kg_f32x4 *)(xk + g * 64 + tm * 4);
        x[g * 4] = q.x, x[g * 4 + 1] = q.y, x[g * 4 + 2] = q.z, x[g * 4 + 3] = q.w;
    }
#pragma unroll
    for (int h = 0; h < SG_TN / 4; h++) {
        kg_f32x4 q = *(const kg_f32x4 *)(yk + h * 64 + tn * 4);
        y[h * 4] = q.x, y[h * 4 + 1] = q.y, y[h * 4 + 2] = q.z, y[h * 4 + 3] = q.w;
    }
#pragma unroll
    for (int i = 0; i < SG_TM; i++)
#pragma unroll
        for (int j = 0; j < SG_TN; j++) acc[i][j] = kg_fma(x[i], y[j], acc[i][j]);
}

// One block's SG_BM x SG_BN tile of C = X·Y in fp32, rows [m0, m0+SG_BM) and
// columns [n0, n0+SG_BN) clipped to M, N, as the section's comment says.
// Every thread of the block must call it (it has barriers), with the same
// arguments.
__device__ static inline void kg_gemm_simt_f32(const float *X, const float *Y, float *C, int M, int N, int K,
                                               kg_i64 sxm, kg_i64 sxk, kg_i64 syk, kg_i64 syn, kg_i64 scm,
                                               kg_i64 scn, int m0, int n0)
{
    __shared__ __attribute__((aligned(16))) float xs[2][SG_BK][SG_BM + SG_PAD];
    __shared__ __attribute__((aligned(16))) float ys[2][SG_BK][SG_BN + SG_PAD];
    const int tid = (int)kg_tid(), warp = tid / 32, lane = tid % 32;
    const int tm = warp / 4 * 8 + lane / 4, tn = warp % 4 * 4 + lane % 4;
    kg_sg_operand<SG_BM> xo;
    kg_sg_operand<SG_BN> yo;
    xo.init(X, sxm, sxk, m0, M, tid);
    yo.init(Y, syn, syk, n0, N, tid);
    float acc[SG_TM][SG_TN];
#pragma unroll
    for (int i = 0; i < SG_TM; i++)
#pragma unroll
        for (int j = 0; j < SG_TN; j++) acc[i][j] = 0.0f;

    const int nt = (K + SG_BK - 1) / SG_BK;
    if (nt > 0) {
        xo.fetch(0, K), yo.fetch(0, K);
        xo.put(xs[0]), yo.put(ys[0]);
    }
    kg_sync();
    for (int t = 0; t < nt; t++) {
        const int cur = t & 1, kn = K - t * SG_BK;
        if (t + 1 < nt) xo.fetch((t + 1) * SG_BK, K), yo.fetch((t + 1) * SG_BK, K);
        if (kn >= SG_BK) {
#pragma unroll
            for (int kk = 0; kk < SG_BK; kk++) kg_sg_step(acc, xs[cur][kk], ys[cur][kk], tm, tn);
        } else {
#pragma unroll 1
            for (int kk = 0; kk < kn; kk++) kg_sg_step(acc, xs[cur][kk], ys[cur][kk], tm, tn);
        }
        if (t + 1 < nt) xo.put(xs[cur ^ 1]), yo.put(ys[cur ^ 1]);
        kg_sync();
    }

    const int aligned = (unsigned long long)C % 16 == 0;
    if (scn == 1 && scm % 4 == 0 && aligned) {          // row-major: runs of 4 columns
#pragma unroll
        for (int i = 0; i < SG_TM; i++) {
            int m = m0 + i / 4 * 64 + tm * 4 + i % 4;
            if (m >= M) continue;
            float *c = C + (kg_i64)m * scm;
#pragma unroll
            for (int h = 0; h < SG_TN / 4; h++) {
                int n = n0 + h * 64 + tn * 4;
                const float *a = &acc[i][h * 4];
                if (n + 3 < N) {
                    kg_f32x4 q = { a[0], a[1], a[2], a[3] };
                    *(kg_f32x4 *)(c + n) = q;
                } else {
#pragma unroll
                    for (int j = 0; j < 4; j++)
                        if (n + j < N) c[n + j] = a[j];
                }
            }
        }
    } else if (scm == 1 && scn % 4 == 0 && aligned) {   // column-major: runs of 4 rows
#pragma unroll
        for (int j = 0; j < SG_TN; j++) {
            int n = n0 + j / 4 * 64 + tn * 4 + j % 4;
            if (n >= N) continue;
            float *c = C + (kg_i64)n * scn;
#pragma unroll
            for (int g = 0; g < SG_TM / 4; g++) {
                int m = m0 + g * 64 + tm * 4;
                if (m + 3 < M) {
                    kg_f32x4 q = { acc[g * 4][j], acc[g * 4 + 1][j], acc[g * 4 + 2][j], acc[g * 4 + 3][j] };
                    *(kg_f32x4 *)(c + m) = q;
                } else {
#pragma unroll
                    for (int i = 0; i < 4; i++)
                        if (m + i < M) c[m + i] = acc[g * 4 + i][j];
                }
            }
        }
    } else {                                            // any strides
#pragma unroll
        for (int i = 0; i < SG_TM; i++) {
            int m = m0 + i / 4 * 64 + tm * 4 + i % 4;
            if (m >= M) continue;
#pragma unroll
            for (int j = 0; j < SG_TN; j++) {
                int n = n0 + j / 4 * 64 + tn * 4 + j % 4;
                if (n < N) C[(kg_i64)m * scm + (kg_i64)n * scn] = acc[i][j];
            }
        }
    }
}

KG_ATOMICS(kg_gemm_f32, 0)
extern "C" __global__ void SG_LAUNCH_BOUNDS
kg_gemm_f32(const float *X, const float *Y, float *C, int M, int N, int K, kg_i64 sxm, kg_i64 sxk, kg_i64 syk,
            kg_i64 syn, kg_i64 scm, kg_i64 scn)
{
    kg_gemm_simt_f32(X, Y, C, M, N, K, sxm, sxk, syk, syn, scm, scn, (int)kg_bid_y() * SG_BM,
                     (int)kg_bid_x() * SG_BN);
}

// ===== GEMM, Hopper path (sm_90a): wgmma fed through an mbarrier ring =====
//
// One kernel body serves the fp16/bf16 GEMM and grouped GEMM and the fp8 GEMM
// and grouped GEMM with per-tensor or per-row scales:
//   kg_gemm_sm90_{f16,bf16}        C = X·Y as kg_gemm_<dt> and, with G > 0,
//                                  as kg_grouped_<dt> (ragged rows); X and
//                                  Y^T K-major (kgate's layout NT)
//   kg_gemm_sm90_{nn,tn,tt}_{f16,bf16}  the same in the other layouts
//   kg_qgemm_sm90_{e4m3,e5m2}_bf16 C = (A·B^T) x sa[m] x sb[n] as
//                                  kg_qgemm_bf16 / kg_qgrouped_bf16 when the
//                                  scales have one block along K
//   kg_qgemm_sm90_blk_{e4m3,e5m2}_bf16  the same with one scale per 128 of K
//                                  (blockwise: 1 x 128 of A, 128 x 128 of B)
//   kg_qgemm_sm90_{,blk_}{e4m3,e5m2}_f32  the two above with an fp32 output
//   kg_qgemm_sm90_n192_{e4m3,e5m2}_{bf16,f32}  per tensor or per row at
//                                  tiles of 128 x 192, each stage's partial
//                                  one wgmma m64n192k32 wide (WG_BN = 256
//                                  builds; kgate takes them where the
//                                  rounds of tiles over the SMs cost less)
//   kg_qgemm_sm90_n192_blk_{e4m3,e5m2}_bf16  blockwise at tiles of
//                                  128 x 192, taken where the rounds cost
//                                  6% fewer columns at least
//   kg_qgemm_sm90_mx_{e4m3,e5m2}_{bf16,f32}  MX: one E8M0 scale per 32 of K
//                                  of each row of A and of B (MXFP8; MXFP4
//                                  too, its E2M1 codes first unpacked to
//                                  E4M3 by kg_pack_fp4_e4m3: exact)
// Layouts, in the letters of kgate's --layout for C = X·Y (X is M x K, Y is
// K x N): X stored N = [M][K] (K-major) or T = [K][M] (MN-major); Y stored
// T = [N][K] (K-major) or N = [K][N] (MN-major).  ldx is the row stride of
// X's storage (of [M][K] or of [K][M]), ldy of Y's ([N][K] or [K][N]); group
// g's Y at + g*syg; element strides.  MN-major operands are read through
// wgmma's transpose operands (16-bit types only; fp8 is K-major).  fp32
// accumulation, no atomics, no split over K (deterministic); K = 0 writes
// zeros (times the scales).
//   - Persistent grid: gridDim.x blocks (one per SM, at most one per tile),
//     in clusters of WG_CLUSTER blocks.  A unit is WG_CLUSTER tiles of
//     WG_BM x BN (BN: WG_BN, or 192 in the kg_qgemm_sm90_n192_* entries)
//     stacked in M, one per block of a cluster; the clusters
//     stride over the `units` units of C.  G = 0: units_m x tiles_n in bands
//     of WG_GROUP_M tile rows (neighbouring blocks share operand panels in
//     L2); G > 0: group after group (offs[G+1], the ragged rows), banded the
//     same way within a group.  An empty group has no unit.
//   - Warp specialisation: 3 warpgroups of 128 threads.  Warpgroup 0
//     produces: it fills a ring of WG_STAGES shared-memory stages, each the
//     WG_BM x 128-byte slice of X and the BN x 128-byte slice of Y^T (64
//     fp16/bf16 or 128 fp8 elements of K).  Warpgroups 1 and 2 consume: each
//     owns 64 rows of the tile and issues four wgmma m64nBNk16 per stage
//     (fp8: twice four m64n(BN/2)k32, or four m64nBNk32 at BN <= 192 per
//     tensor and per row, see "Input types"), A and B from
//     shared memory, then frees the stage.  setmaxnreg moves registers from
//     the producer to the consumers.
//   - Stages are in the layout that TMA's 128-byte swizzle writes: rows of
//     128 bytes, the 16-byte chunk c of row r at chunk c ^ (r % 8).  A
//     K-major operand's rows are its M (N) rows, 128 bytes of K each; an
//     MN-major one is in chunks of 64 M (N) elements, each 64 rows of K
//     (WG_MN_CHUNK bytes).  Two producers fill it (`use_tma`, a kernel
//     argument):
//       TMA (cp.async.bulk.tensor with the tensor maps ta, tb): global row
//         strides and base addresses aligned to 16 bytes; X as one [rows][K]
//         tensor (MN-major: [1][K][rows]), Y as [G x N][K] (MN-major: 3-D,
//         [G][K][N]); out-of-range elements are zero-filled;
//         rows of a box past a group's end belong to output rows (columns)
//         that are never stored.  In a cluster the blocks share Y's slice:
//         each loads BN / WG_CLUSTER of its rows into every block
//         (multicast).  kgate packs an operand of any other stride first
//         (kg_pack_rows) unless the build says WG_NO_PACK;
//       loads (any stride, e.g. K = 4093 in bf16): each producer warp copies
//         rows (MN-major: 64-element lines of a K row), one 4-byte word per
//         lane, element by element with predicates; rows past the group's
//         end (N) and k >= K are zero.  Then
//         fence.proxy.async, so that wgmma sees the stores.
//   - Epilogue: each consumer stores its 64 rows straight from the
//     accumulators.  16-bit outputs: the lanes of each quad trade column
//     pairs (kg_quad_transpose) so that a lane holds 8 contiguous outputs, one
//     16-byte store (WG_STORE_V4); fp32 outputs, the MX entries, and the
//     blockwise ones under WG_BLK_V4 = 0: pairs.  fp8 scales per column
//     are first copied to shared memory, per warp.
//   - mbarriers: full[s] completes when stage s is filled (TMA: one
//     arrive.expect_tx and the copy's bytes, the other blocks' multicast
//     included; loads: 128 arrivals), empty[s] when the 8 consumer warps of
//     every block of the cluster are done reading it (in every block, since
//     each block's producer writes into all of them).

#if defined(KG_CUDA) && defined(__CUDA_ARCH_FEAT_SM90_ALL) && !defined(KG_PORTABLE)
#define KG_SM90 1
#endif

#ifndef WG_BN
#define WG_BN 256                           // 128, 192 or 256: the wgmma N
#endif
#ifndef WG_STAGES
#define WG_STAGES 4
#endif
#ifndef WG_GROUP_M
#define WG_GROUP_M 8
#endif
#ifndef WG_INFLIGHT
#define WG_INFLIGHT 1                       // wgmma groups left in flight when a stage is freed: 0 or 1
#endif
#ifndef WG_PREFETCH
#define WG_PREFETCH 0                       // loads producer: k-blocks ahead prefetched to L2 (0: none)
#endif
#ifndef WG_NO_TMA
#define WG_NO_TMA 0                         // 1: the loads producer even where TMA could load (a diagnostic)
#endif
#ifndef WG_LDG_ROWS
#define WG_LDG_ROWS 32                      // loads producer: rows per warp loaded before any is stored (16-bit)
#endif
#ifndef WG_CLUSTER
#define WG_CLUSTER 1                        // 1, or 2: clusters of two blocks share Y's tile (TMA multicast)
#endif
#ifndef WG_STORE_V4
#define WG_STORE_V4 1                       // 16-bit outputs: 1 = 16-byte stores (a quad transpose first), 0 = pairs
#endif
#ifndef WG_BLK_V4
#define WG_BLK_V4 1                         // blockwise fp8 (bf16 out) through the 16-byte stores, consumers 224 registers; 0: pairs
#endif
#ifndef WG_N192_BLK
#define WG_N192_BLK 1                       // 1: blockwise fp8 (bf16 out) has entries at tiles of 128 x 192 (0: none)
#endif
#ifndef WG_NO_PACK
#define WG_NO_PACK 0                        // 1: odd strides through the loads producer, not packed for TMA
#endif
#ifndef WG_FP8_SPAN
#define WG_FP8_SPAN 1                       // fp8 without blockwise scales: stages per partial (1, 2; 0: none, a diagnostic)
#endif
#define WG_BM 128                           // two consumer warpgroups x 64 rows
#define WG_ROW 128                          // bytes of K per stage row: one 128-byte swizzle row
#define WG_THREADS 384
#define WG_A_BYTES (WG_BM * WG_ROW)
#define WG_MN_CHUNK (64 * WG_ROW)           // MN-major (16-bit): 64 rows x 64 of K, one TMA box
#define WG_STAGE_BYTES_N(BN) ((WG_BM + (BN)) * WG_ROW)
#define WG_MX 32                            // MX: the K of a scale block, four per stage
#define WG_MX_BYTES_N(BN) (4 * (WG_BM + (BN)) * 4)   // MX: a stage's scales as floats, X's [4][WG_BM], Y^T's [4][BN]
// Dynamic shared memory: the stages, 1 KiB to align them to the swizzle
// pattern, the 2 x WG_STAGES mbarriers, and the MX entries' scales of
// each stage (where the fp8 entries scaled in the epilogue copy their tile's
// column scales instead, kg_wg_cols_fill; the others leave it unused).
#define WG_SMEM_N(BN) (WG_STAGES * (WG_STAGE_BYTES_N(BN) + WG_MX_BYTES_N(BN)) + 1024 + 16 * WG_STAGES)
#if WG_BN != 128 && WG_BN != 192 && WG_BN != 256
#error "WG_BN must be 128, 192 or 256"
#endif
#if WG_CLUSTER != 1 && WG_CLUSTER != 2
#error "WG_CLUSTER must be 1 or 2"
#endif
#if WG_FP8_SPAN < 0 || WG_FP8_SPAN > 2
#error "WG_FP8_SPAN must be 0, 1 or 2"
#endif
// Tile rows per band, counted in units (a cluster's WG_CLUSTER tile rows).
#define WG_BAND (WG_GROUP_M / WG_CLUSTER > 0 ? WG_GROUP_M / WG_CLUSTER : 1)

#if defined(KG_SM90)
// kgate reads these after loading: nonzero smem = this build has the sm_90a
// GEMMs, launched with that many bytes of dynamic shared memory.
extern "C" __device__ int kg_gemm_sm90_smem = WG_SMEM_N(WG_BN);
extern "C" __device__ int kg_gemm_sm90_tile_m = WG_BM;
extern "C" __device__ int kg_gemm_sm90_tile_n = WG_BN;
// Blocks per cluster: the launch counts units of WG_CLUSTER tiles (stacked
// in M), one per cluster at a time, and makes Y's tensor map in boxes of
// WG_BN / WG_CLUSTER rows (192 / WG_CLUSTER for kg_qgemm_sm90_n192_*).
extern "C" __device__ int kg_gemm_sm90_cluster = WG_CLUSTER;
// 1: an operand whose row stride TMA cannot take is first copied by
// kg_pack_rows into rows of a multiple of 16 bytes (in the same launch), then
// read by TMA; 0: read by the loads producer in place.
extern "C" __device__ int kg_gemm_sm90_pack = !WG_NO_PACK;
// 1: the entries of every layout (kg_gemm_sm90_{nn,tn,tt}_<dt>, MN-major
// operands) exist; 0 or absent: only kg_gemm_sm90_<dt> (NT, both K-major).
extern "C" __device__ int kg_gemm_sm90_layouts = 1;
// The K of a scale block that the blockwise fp8 entries
// (kg_qgemm_sm90_blk_{e4m3,e5m2}_bf16) take, one stage of 128 fp8 elements;
// 0 or absent: blockwise scales run on the portable kernel.
extern "C" __device__ int kg_qgemm_sm90_block = WG_ROW;
// 1: the fp8 entries with an fp32 output (kg_qgemm_sm90_{,blk_}{e4m3,e5m2}_f32)
// exist; kgate runs them only under --trades-precision ("Input types").
extern "C" __device__ int kg_qgemm_sm90_f32 = 1;
// The K of an MX scale block that kg_qgemm_sm90_mx_* take (E8M0 scales per
// 32 of K, as the MX formats define them); 0 or absent: MX runs on the
// portable kernel.  Tiles of 192 columns have no MX entries (their halves of
// 96 columns leave ptxas a register short: it spills).
#define WG_HAS_MX (WG_BN != 192)
extern "C" __device__ int kg_qgemm_sm90_mx = WG_HAS_MX ? WG_MX : 0;
// The per-tensor and per-row fp8 entries at tiles of 128 x 192
// (kg_qgemm_sm90_n192_{e4m3,e5m2}_{bf16,f32}: each stage's partial spans the
// tile's width, one wgmma m64n192k32 a k32 step): their dynamic shared
// memory; kgate launches them where a product's rounds of tiles over the
// SMs cost fewer columns than at WG_BN's (src/lowprec.c, q_sm90_tile).  0 or
// absent: none (builds at WG_BN other than 256).
extern "C" __device__ int kg_qgemm_sm90_n192_smem = WG_BN == 256 ? WG_SMEM_N(192) : 0;
// 1: the blockwise entries at tiles of 128 x 192 with a bf16 output exist
// (kg_qgemm_sm90_n192_blk_{e4m3,e5m2}_bf16, one partial a stage as the per
// tensor ones, times three runs of 64 columns' scales), which kgate takes
// where the rounds cost at least 6% fewer columns than at WG_BN's (a column
// costs blockwise about 5% more at 192: src/lowprec.c, q_sm90_narrow); 0 or
// absent: blockwise keeps WG_BN's tile.
extern "C" __device__ int kg_qgemm_sm90_n192_blk = WG_BN == 256 && WG_N192_BLK;

// A TMA descriptor (CUtensorMap): 128 opaque bytes built on the host.
struct __align__(64) kg_tmap { unsigned long long v[16]; };

__device__ static inline unsigned kg_smem_addr(const void *p) {
    unsigned a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}
__device__ static inline void kg_bar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
// Wait until the phase of parity `parity` of barrier `bar` has completed.
__device__ static inline void kg_bar_wait(unsigned bar, unsigned parity) {
    unsigned done;
    do {
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; "
                     "selp.u32 %0, 1, 0, p; }"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    } while (!done);
}
__device__ static inline void kg_bar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ static inline void kg_bar_expect(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
// TMA: the box at (c0 = k, c1 = row) of map m into shared memory at dst,
// completing `bar`'s transaction bytes.
__device__ static inline void kg_tma_load(unsigned dst, const kg_tmap *m, int c0, int c1, unsigned bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes "
                 "[%0], [%1, {%2, %3}], [%4];"
                 ::"r"(dst), "l"((unsigned long long)m), "r"(c0), "r"(c1), "r"(bar) : "memory");
}
// TMA: the box at (c0, c1, c2) of the 3-D map m into shared memory at dst,
// completing `bar`'s transaction bytes.
__device__ static inline void kg_tma_load3(unsigned dst, const kg_tmap *m, int c0, int c1, int c2, unsigned bar) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes "
                 "[%0], [%1, {%2, %3, %4}], [%5];"
                 ::"r"(dst), "l"((unsigned long long)m), "r"(c0), "r"(c1), "r"(c2), "r"(bar) : "memory");
}
// The same box written at dst in every block of the cluster named in `mask`,
// completing each one's barrier at `bar` (TMA multicast).
__device__ static inline void kg_tma_load_mc(unsigned dst, const kg_tmap *m, int c0, int c1, unsigned bar,
                                             unsigned short mask) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster "
                 "[%0], [%1, {%2, %3}], [%4], %5;"
                 ::"r"(dst), "l"((unsigned long long)m), "r"(c0), "r"(c1), "r"(bar), "h"(mask) : "memory");
}
// The 3-D box at (c0, c1, c2) written at dst in every block of the cluster
// named in `mask` (TMA multicast).
__device__ static inline void kg_tma_load3_mc(unsigned dst, const kg_tmap *m, int c0, int c1, int c2, unsigned bar,
                                              unsigned short mask) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster "
                 "[%0], [%1, {%2, %3, %4}], [%5], %6;"
                 ::"r"(dst), "l"((unsigned long long)m), "r"(c0), "r"(c1), "r"(c2), "r"(bar), "h"(mask) : "memory");
}
// One arrival on the barrier at `bar` in block `rank` of this cluster.
__device__ static inline void kg_bar_arrive_at(unsigned bar, unsigned rank) {
    asm volatile("{ .reg .b32 r; mapa.shared::cluster.u32 r, %0, %1; "
                 "mbarrier.arrive.shared::cluster.b64 _, [r]; }" ::"r"(bar), "r"(rank) : "memory");
}
// Every thread of every block of the cluster (WG_CLUSTER = 1: of the block).
__device__ static inline void kg_wg_cluster_sync() {
    if (WG_CLUSTER == 1) { kg_sync(); return; }
    asm volatile("barrier.cluster.arrive.release.aligned; barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// This block's rank in its cluster, the cluster's index and the number of
// clusters (WG_CLUSTER = 1: 0, the block's index, the blocks).
__device__ static inline unsigned kg_wg_rank() {
    unsigned r = 0;
    if (WG_CLUSTER > 1) asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
__device__ static inline int kg_wg_cluster_id() {
    unsigned r = kg_bid_x();
    if (WG_CLUSTER > 1) asm("mov.u32 %0, %%clusterid.x;" : "=r"(r));
    return (int)r;
}
__device__ static inline int kg_wg_clusters() {
    unsigned r = kg_grid_x();
    if (WG_CLUSTER > 1) asm("mov.u32 %0, %%nclusterid.x;" : "=r"(r));
    return (int)r;
}
// wgmma shared-memory descriptor of a K-major operand in 128-byte swizzle:
// start address >> 4, leading offset 1 (unused when swizzled), stride 1024 B
// between 8-row groups, swizzle mode 1 (128 B).  A shared address lies below
// 256 KiB, so the start field (bits 0-13) of a tile's descriptor plus
// offset / 16 is the descriptor at offset bytes on, without a carry: the
// callers add their k steps to the descriptor, not to the address (a few
// integer instructions per wgmma fewer between the barrier wait and the
// issue: fp8 1-2% faster at 8192^3, bf16 at parity; README, the ledger).
__device__ static inline unsigned long long kg_wg_desc(unsigned saddr) {
    return (unsigned long long)((saddr & 0x3ffffu) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
}
// The K-major descriptor of the operand `bytes` on from the tile at saddr
// (bytes a multiple of 16): kg_wg_desc(saddr) advanced, as above.
__device__ static inline unsigned long long kg_wg_desc_on(unsigned saddr, int bytes) {
    return kg_wg_desc(saddr) + bytes / 16;
}
// wgmma shared-memory descriptor of an MN-major operand in 128-byte swizzle
// (rows of 128 bytes along N, 8-row groups 1024 bytes apart along K): the
// next 64 elements of N lie `lbo` bytes on.
__device__ static inline unsigned long long kg_wg_desc_mn(unsigned saddr, unsigned lbo) {
    return (unsigned long long)((saddr & 0x3ffffu) >> 4) | ((unsigned long long)(lbo >> 4) << 16) |
           (64ull << 32) | (1ull << 62);
}
// The MN-major descriptor of the operand `bytes` on from the tile at saddr
// (bytes a multiple of 16): kg_wg_desc_mn(saddr, lbo) advanced, as
// kg_wg_desc_on.
__device__ static inline unsigned long long kg_wg_desc_mn_on(unsigned saddr, unsigned lbo, int bytes) {
    return kg_wg_desc_mn(saddr, lbo) + bytes / 16;
}

__device__ static inline void kg_wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ static inline void kg_wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ static inline void kg_wg_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory"); }
// Tell the compiler the accumulators changed (after a wait) so that no read
// of them moves above it.
template <int N>
__device__ static inline void kg_wg_touch(float *d) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}
// A consumer warp is done reading a stage: one arrival per warp on its
// empty barrier in every block of the cluster (each block's producer may
// write the stage in all of them).
__device__ static inline void kg_wg_release(unsigned empty, int lane) {
    __syncwarp();
    if (lane != 0) return;
    kg_bar_arrive(empty);
    for (unsigned r = 0, me = kg_wg_rank(); r < WG_CLUSTER; r++)
        if (r != me) kg_bar_arrive_at(empty, r);
}

// The 32, 40, 48, 64, 96 or 128 accumulator operands of one wgmma (N = 64,
// 80, 96, 128, 192 or 256, fp32).
#define KG_WG_D32                                                                     \
    "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"                          \
    "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"
#define KG_WG_D48 KG_WG_D32 ",%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47"
#define KG_WG_D40 KG_WG_D32 ",%32,%33,%34,%35,%36,%37,%38,%39"
#define KG_WG_D64 KG_WG_D48 ",%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
#define KG_WG_D96                                                                     \
    KG_WG_D64 ",%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,"     \
    "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95"
#define KG_WG_D128                                                                    \
    KG_WG_D96 ",%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111," \
    "%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127"
#define KG_WG_F8(d, i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), \
                       "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define KG_WG_F32(d) KG_WG_F8(d, 0), KG_WG_F8(d, 8), KG_WG_F8(d, 16), KG_WG_F8(d, 24)
#define KG_WG_F40(d) KG_WG_F32(d), KG_WG_F8(d, 32)
#define KG_WG_F48(d) KG_WG_F32(d), KG_WG_F8(d, 32), KG_WG_F8(d, 40)
#define KG_WG_F64(d) KG_WG_F48(d), KG_WG_F8(d, 48), KG_WG_F8(d, 56)
#define KG_WG_F96(d) KG_WG_F64(d), KG_WG_F8(d, 64), KG_WG_F8(d, 72), KG_WG_F8(d, 80), KG_WG_F8(d, 88)
#define KG_WG_F128(d) KG_WG_F96(d), KG_WG_F8(d, 96), KG_WG_F8(d, 104), KG_WG_F8(d, 112), KG_WG_F8(d, 120)

// d = (acc ? d : 0) + A·B for one 32-byte K step (k16 for fp16/bf16, k32 for
// fp8), A and B in shared memory (a, b are their descriptors).  fp16/bf16:
// TA = 1 reads A MN-major, TB = 1 reads B MN-major (wgmma's transpose
// operands); fp8 wgmma takes no transpose operands: K-major only.
#define KG_WG_MMA16(fname, N, T, DLIST, DOPS, IA, IB, IS, ITA, ITB)                                \
    template <int TA = 0, int TB = 0>                                                              \
    __device__ static inline void fname(float *d, unsigned long long a, unsigned long long b,     \
                                        int acc) {                                                 \
        asm volatile("{ .reg .pred p; setp.ne.b32 p, %" IS ", 0;\n"                                \
                     "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." T "." T " {" DLIST         \
                     "}, %" IA ", %" IB ", p, 1, 1, %" ITA ", %" ITB "; }"                         \
                     : DOPS : "l"(a), "l"(b), "r"(acc), "n"(TA), "n"(TB));                        \
    }
#define KG_WG_MMA8(fname, N, T, DLIST, DOPS, IA, IB, IS)                                           \
    __device__ static inline void fname(float *d, unsigned long long a, unsigned long long b,     \
                                        int acc) {                                                 \
        asm volatile("{ .reg .pred p; setp.ne.b32 p, %" IS ", 0;\n"                                \
                     "wgmma.mma_async.sync.aligned.m64n" #N "k32.f32." T "." T " {" DLIST         \
                     "}, %" IA ", %" IB ", p, 1, 1; }"                                             \
                     : DOPS : "l"(a), "l"(b), "r"(acc));                                          \
    }
KG_WG_MMA16(kg_wgmma_n256_bf16, 256, "bf16", KG_WG_D128, KG_WG_F128(d), "128", "129", "130", "131", "132")
KG_WG_MMA16(kg_wgmma_n256_f16, 256, "f16", KG_WG_D128, KG_WG_F128(d), "128", "129", "130", "131", "132")
KG_WG_MMA16(kg_wgmma_n192_bf16, 192, "bf16", KG_WG_D96, KG_WG_F96(d), "96", "97", "98", "99", "100")
KG_WG_MMA16(kg_wgmma_n192_f16, 192, "f16", KG_WG_D96, KG_WG_F96(d), "96", "97", "98", "99", "100")
KG_WG_MMA16(kg_wgmma_n128_bf16, 128, "bf16", KG_WG_D64, KG_WG_F64(d), "64", "65", "66", "67", "68")
KG_WG_MMA16(kg_wgmma_n128_f16, 128, "f16", KG_WG_D64, KG_WG_F64(d), "64", "65", "66", "67", "68")
KG_WG_MMA16(kg_wgmma_n80_bf16, 80, "bf16", KG_WG_D40, KG_WG_F40(d), "40", "41", "42", "43", "44")
KG_WG_MMA16(kg_wgmma_n80_f16, 80, "f16", KG_WG_D40, KG_WG_F40(d), "40", "41", "42", "43", "44")
KG_WG_MMA16(kg_wgmma_n64_bf16, 64, "bf16", KG_WG_D32, KG_WG_F32(d), "32", "33", "34", "35", "36")
KG_WG_MMA16(kg_wgmma_n64_f16, 64, "f16", KG_WG_D32, KG_WG_F32(d), "32", "33", "34", "35", "36")
KG_WG_MMA8(kg_wgmma_n128_e4m3, 128, "e4m3", KG_WG_D64, KG_WG_F64(d), "64", "65", "66")
KG_WG_MMA8(kg_wgmma_n128_e5m2, 128, "e5m2", KG_WG_D64, KG_WG_F64(d), "64", "65", "66")
KG_WG_MMA8(kg_wgmma_n96_e4m3, 96, "e4m3", KG_WG_D48, KG_WG_F48(d), "48", "49", "50")
KG_WG_MMA8(kg_wgmma_n96_e5m2, 96, "e5m2", KG_WG_D48, KG_WG_F48(d), "48", "49", "50")
KG_WG_MMA8(kg_wgmma_n64_e4m3, 64, "e4m3", KG_WG_D32, KG_WG_F32(d), "32", "33", "34")
KG_WG_MMA8(kg_wgmma_n64_e5m2, 64, "e5m2", KG_WG_D32, KG_WG_F32(d), "32", "33", "34")
KG_WG_MMA8(kg_wgmma_n192_e4m3, 192, "e4m3", KG_WG_D96, KG_WG_F96(d), "96", "97", "98")
KG_WG_MMA8(kg_wgmma_n192_e5m2, 192, "e5m2", KG_WG_D96, KG_WG_F96(d), "96", "97", "98")

// Input types.  fp16/bf16: EB = 2-byte elements, one wgmma m64nWG_BNk16 per
// 32 bytes of K into the fp32 accumulators.  fp8: EB = 1, and since the fp8
// tensor-core accumulation is narrower than fp32 (66.8 dB, about 2^-11
// relative, at K = 1000 in the e4m3 row -> f32 case of shapes.txt), each
// stage's 128 k are accumulated in a partial of BN/2 columns (BN: the tile's
// columns; wgmma m64n(BN/2)k32, two halves) and added to the fp32
// accumulators (DeepGEMM's promotion): 79 dB there, still short of the
// portable arm's fp32 sums: an fp32 output fails its baseline there, so
// kgate runs the fp8 _f32 entries only when told that they trade precision
// (--trades-precision), and otherwise the portable kernel; bf16 outputs'
// own rounding hides the difference.  Blockwise scales (SK)
// fall on the same 128 k: each stage's partial is added times its scales
// (fma), the epilogue then scales nothing.  Each consumer waits for its own
// wgmma before adding (making the two consumers take turns at issuing, so
// that one adds while the other's wgmma runs, measured slower: README,
// the variants ledger; so did adding half of them under the next half's
// wgmma, two partials in registers, and quarters of 64 columns with A
// from registers, two partials in turn, 13.5% slower).  Per tensor and per
// row at BN <= 192 (kg_qgemm_sm90_n192_*) the partial spans all BN columns:
// one wgmma m64nBNk32 a k32 step, one wait a stage; at 8192^3 5.5% faster
// than the halves of 256, of which 21 rounds of 192 columns against 16 of
// 256 explain 1.6 points (README).  So does blockwise at BN = 192
// (kg_qgemm_sm90_n192_blk_*, three runs of 64 columns' scales), which costs
// 5% more a column than its halves at 256 (8192^3 keeps them; kgate takes
// it where the rounds save more, bench/HOPPER.md).  WG_FP8_SPAN (per tensor and per row):
// stages per partial; 1 as shipped, 2 (one wait per stage, sums half as
// exact) measured 2.1% faster per tensor and at parity per row, 0 (never
// promoted, a diagnostic) 7.2% faster per tensor.  PRODUCER / CONSUMER: the
// setmaxnreg split; the block holds 168 x 384 registers (__launch_bounds__(
// 384, 1)), and a split that asks for more makes setmaxnreg.inc wait forever.
#define KG_WG_IN16(name, t)                                                                        \
    struct name {                                                                                  \
        static const int EB = 2, PROMOTE = 0, PRODUCER = 120, CONSUMER = 192;                      \
        template <int TX, int TY, int BN = WG_BN>                                                  \
        __device__ static void mma(float *d, unsigned long long a, unsigned long long b, int acc) { \
            if (BN == 256) kg_wgmma_n256_##t<TX, TY>(d, a, b, acc);                                \
            else if (BN == 192) kg_wgmma_n192_##t<TX, TY>(d, a, b, acc);                           \
            else kg_wgmma_n128_##t<TX, TY>(d, a, b, acc);                                          \
        }                                                                                          \
    };
#define KG_WG_IN8(name, t)                                                                         \
    struct name {                                                                                  \
        static const int EB = 1, PROMOTE = 1, PRODUCER = 72, CONSUMER = 216;                       \
        template <int TX, int TY, int BN = WG_BN>                                                  \
        __device__ static void mma(float *d, unsigned long long a, unsigned long long b, int acc) { \
            static_assert(!TX && !TY, "fp8 wgmma reads K-major operands only");                    \
            mma_n<BN / 2>(d, a, b, acc);                                                           \
        }                                                                                          \
        /* one wgmma m64nWk32 (W: 64, 96, 128 or 192 columns) */                                  \
        template <int W>                                                                           \
        __device__ static void mma_n(float *d, unsigned long long a, unsigned long long b, int acc) { \
            if (W == 192) kg_wgmma_n192_##t(d, a, b, acc);                                         \
            else if (W == 128) kg_wgmma_n128_##t(d, a, b, acc);                                    \
            else if (W == 96) kg_wgmma_n96_##t(d, a, b, acc);                                      \
            else kg_wgmma_n64_##t(d, a, b, acc);                                                   \
        }                                                                                          \
    };
KG_WG_IN16(kg_wg_bf16, bf16)
KG_WG_IN16(kg_wg_f16, f16)
KG_WG_IN8(kg_wg_e4m3, e4m3)
KG_WG_IN8(kg_wg_e5m2, e5m2)

// Output types: store the values v0, v1 of columns n, n+1 at p and p + scn
// (only v0 when the pair is cut by N: `two` = 0), rounded to nearest even by
// the hardware conversions; one store when the pair is contiguous and aligned.
template <int BF>
__device__ static inline void kg_wg_store16(kg_u16 *p, float v0, float v1, int two, kg_i64 scn) {
    unsigned w;
    if (BF) asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(v1), "f"(v0));
    else asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(v1), "f"(v0));
    if (two && scn == 1 && ((unsigned long long)p & 3) == 0) {
        *(unsigned *)p = w;
        return;
    }
    p[0] = (kg_u16)w;
    if (two) p[scn] = (kg_u16)(w >> 16);
}
__device__ static inline void kg_wg_store(kg_u16 *p, float v0, float v1, int two, kg_i64 scn, kg_bf16) {
    kg_wg_store16<1>(p, v0, v1, two, scn);
}
// (kg_f16: only the WG_STORE_V4=0 build's pairs take it)
__device__ static inline __attribute__((unused)) void kg_wg_store(kg_u16 *p, float v0, float v1, int two, kg_i64 scn,
                                                                  kg_f16) {
    kg_wg_store16<0>(p, v0, v1, two, scn);
}
__device__ static inline void kg_wg_store(float *p, float v0, float v1, int two, kg_i64 scn, kg_f32) {
    if (two && scn == 1 && ((unsigned long long)p & 7) == 0) {
        asm volatile("st.global.v2.f32 [%0], {%1, %2};" ::"l"(p), "f"(v0), "f"(v1) : "memory");
        return;
    }
    p[0] = v0;
    if (two) p[scn] = v1;
}
// v0, v1 rounded to the output type, v0 in the low half (kg_wg_store16's
// conversion, for the 16-byte stores; kept apart from it because merging the
// two changed the fp8 kernels' code, whose speed moves with it).
__device__ static inline unsigned kg_wg_pack(float v0, float v1, kg_bf16) {
    unsigned w;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(v1), "f"(v0));
    return w;
}
__device__ static inline unsigned kg_wg_pack(float v0, float v1, kg_f16) {
    unsigned w;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(v1), "f"(v0));
    return w;
}
// Within each quad of lanes (4a .. 4a+3; q = lane % 4): p[j] of lane q
// becomes the p[q] that lane j held (a 4 x 4 transpose, two shfl.xor rounds).
// Every lane of the warp calls it (the GEMM's 16-bit epilogue and the fused
// attention backward's dK and dV, kg_fb_store_v4; none in a build with
// WG_STORE_V4=0 and FB_EPI_V4=0).
__device__ static __forceinline__ __attribute__((unused)) void kg_quad_transpose(unsigned *p, int q) {
#pragma unroll
    for (int b = 1; b <= 2; b <<= 1)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            if (e & b) continue;   // the pair (e, e + b)
            const bool hi = q & b;
            const unsigned got = __shfl_xor_sync(0xffffffffu, hi ? p[e] : p[e + b], b);
            if (hi) p[e] = got; else p[e + b] = got;
        }
}

// Unit row um and column tile tn of the r-th unit of a band ordering of a
// units_m x tiles_n grid: bands of WG_BAND unit rows, column by column.
__device__ static inline void kg_wg_band(int r, int units_m, int tiles_n, int *um, int *tn) {
    const int per_band = WG_BAND * tiles_n, band = r / per_band, first = band * WG_BAND;
    const int rows = units_m - first < WG_BAND ? units_m - first : WG_BAND, q = r % per_band;
    *um = first + q % rows;
    *tn = q / rows;
}

// Units of `rows` rows: WG_CLUSTER tile rows each.
__device__ static inline int kg_wg_units_m(int rows) {
    return ((rows + WG_BM - 1) / WG_BM + WG_CLUSTER - 1) / WG_CLUSTER;
}

// Where the tile of block `rank` of the cluster in unit u lies: its group g,
// its rows [m0, m_end) of X and C (m_end: the end of the group's rows, or
// M), its columns from n0 (tiles of BN columns), its inner range [k0, k1).
// A unit is WG_CLUSTER tiles stacked in M, one per block of a cluster, with
// the same columns; m0 >= m_end (a tile past the group's rows, when they
// have an odd number of tiles) stores nothing.  RK (ragged inner dimension,
// G groups): every group has the same M x N tiles, group after group, and
// sums over its own rows [offs[g], offs[g+1]) of X^T and Y; otherwise the
// inner range is [0, K).
struct kg_wg_at { int g, m0, m_end, n0, k0, k1; };
template <int RK, int BN>
__device__ static inline kg_wg_at kg_wg_locate(int u, unsigned rank, const int *offs, int G, int M, int N, int K) {
    const int tiles_n = (N + BN - 1) / BN;
    kg_wg_at at = { 0, 0, M, 0, 0, K };
    int um = 0, tn = 0;
    if (RK) {
        const int per = kg_wg_units_m(M) * tiles_n;
        at.g = u / per, at.k0 = offs[at.g], at.k1 = offs[at.g + 1];
        kg_wg_band(u % per, kg_wg_units_m(M), tiles_n, &um, &tn);
    } else if (G == 0) {
        kg_wg_band(u, kg_wg_units_m(M), tiles_n, &um, &tn);
    } else {
        for (int g = 0; g < G; g++) {
            const int lo = offs[g], hi = offs[g + 1], units_m = kg_wg_units_m(hi - lo);
            if (u < units_m * tiles_n) {
                kg_wg_band(u, units_m, tiles_n, &um, &tn);
                at.g = g, at.m0 = lo, at.m_end = hi;
                break;
            }
            u -= units_m * tiles_n;
        }
    }
    at.m0 += (um * WG_CLUSTER + (int)rank) * WG_BM;
    at.n0 = tn * BN;
    return at;
}

// Loads producer: ask L2 for rows [row0, row0 + nrows) x K elements [k0,
// k0 + 128 / EB) of P (as kg_wg_fill reads them), one row per lane: the
// first and the last element's lines.
template <int EB>
__device__ static inline void kg_wg_prefetch(const unsigned char *P, kg_i64 ld, int R, int K, int row0,
                                             int nrows, int k0, int warp, int lane) {
    for (int r = warp * 32 + lane; r < nrows; r += 128) {
        if (row0 + r >= R || k0 >= K) continue;
        const unsigned char *p = P + ((kg_i64)(row0 + r) * ld + k0) * EB;
        const int last = (K - k0 < 128 / EB ? K - k0 : 128 / EB) - 1;
        asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
        asm volatile("prefetch.global.L2 [%0];" ::"l"(p + last * EB));
    }
}

// Loads producer: copy rows [row0, row0 + nrows) x bytes [k0, k0 + 128) of
// K (elements of EB bytes) of the K-major matrix P (row stride ld elements,
// rows below R exist) into the swizzled tile at shared address `tile`;
// elements out of range are zero.  Warp w of the producer warpgroup copies
// rows w, w + 4, ...; lane l the 4-byte word l of the row, element by element
// (a row of odd length has no alignment to rely on).  U rows per warp
// (WG_LDG_ROWS for 16-bit elements; fp8: a quarter as many, 4 loads each)
// are loaded before any is stored, so that many loads are in flight at once.
template <int EB>
__device__ static inline void kg_wg_fill(unsigned tile, const unsigned char *P, kg_i64 ld, int R, int K,
                                         int row0, int nrows, int k0, int warp, int lane) {
    const int E = 4 / EB, U = EB == 2 ? WG_LDG_ROWS : WG_LDG_ROWS / 4, k = k0 + E * lane;
    for (int r0 = warp; r0 < nrows; r0 += 4 * U) {
        unsigned v[U][E];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int gr = row0 + r0 + 4 * u;
            const bool in = r0 + 4 * u < nrows && gr < R;
            const unsigned char *p = P + ((kg_i64)gr * ld + k) * EB;
#pragma unroll
            for (int e = 0; e < E; e++)
                v[u][e] = !(in && k + e < K) ? 0u : EB == 2 ? ((const kg_u16 *)p)[e] : p[e];
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const unsigned r = (unsigned)(r0 + 4 * u);
            if ((int)r >= nrows) break;
            unsigned w = 0;
#pragma unroll
            for (int e = 0; e < E; e++) w |= v[u][e] << (8 * EB * e);
            const unsigned dst = tile + r * 128 + ((((unsigned)lane >> 2) ^ (r & 7)) << 4) + (lane & 3) * 4;
            asm volatile("st.shared.u32 [%0], %1;" ::"r"(dst), "r"(w));
        }
    }
}

// Loads producer, an MN-major operand (16-bit): elements (k, r) for k in
// [k0, k0 + 64) and r in [row0, row0 + nrows) of P, stored [K][rows] with
// row stride ld elements (rows below R exist), into the tile at `tile` as
// TMA's MN-major boxes lay them out (kg_wg_load): chunk r / 64 at
// r / 64 x WG_MN_CHUNK, K row k - k0 of it at 128 bytes each, swizzled;
// elements out of range are zero.  A line is one K row of one chunk: 64
// elements, lane l copying elements 2l, 2l+1 (element by element: no
// alignment to rely on); warp w copies lines w, w + 4, ..., WG_LDG_ROWS of
// them loaded before any is stored.
__device__ static inline void kg_wg_fill_mn(unsigned tile, const unsigned char *P, kg_i64 ld, int R, int K,
                                            int row0, int nrows, int k0, int warp, int lane) {
    const int U = WG_LDG_ROWS, lines = nrows / 64 * 64;
    for (int i0 = warp; i0 < lines; i0 += 4 * U) {
        unsigned v[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int i = i0 + 4 * u, k = k0 + i % 64, r = row0 + i / 64 * 64 + 2 * lane;
            const bool in = i < lines && k < K;
            const kg_u16 *p = (const kg_u16 *)P + (kg_i64)k * ld + r;
            v[u] = (in && r < R ? p[0] : 0u) | (in && r + 1 < R ? (unsigned)p[1] << 16 : 0u);
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int i = i0 + 4 * u;
            if (i >= lines) break;
            const unsigned kr = (unsigned)(i % 64);
            const unsigned dst = tile + (unsigned)(i / 64) * WG_MN_CHUNK + kr * 128 +
                                 ((((unsigned)lane >> 2) ^ (kr & 7)) << 4) + (lane & 3) * 4;
            asm volatile("st.shared.u32 [%0], %1;" ::"r"(dst), "r"(v[u]));
        }
    }
}

// Loads producer: one operand's slice of a stage (nrows rows of X or Y^T
// from row0, K elements from k0) from P, row stride ld: kg_wg_fill when
// the operand is K-major (T = 0), kg_wg_fill_mn when MN-major (T = 1).
template <int T, int EB>
__device__ static inline void kg_wg_fill_any(unsigned tile, const unsigned char *P, kg_i64 ld, int R, int K,
                                             int row0, int nrows, int k0, int warp, int lane) {
    if (T) kg_wg_fill_mn(tile, P, ld, R, K, row0, nrows, k0, warp, lane);
    else kg_wg_fill<EB>(tile, P, ld, R, K, row0, nrows, k0, warp, lane);
}

// TMA producer: one operand's slice of stage kb, nrows rows (of X or Y^T)
// from row0 and K from k0, into the tile at `tile`, completing `full`'s
// bytes.  K-major (T = 0; map [rows][K]): one box of 128 bytes of K x
// nrows rows.  MN-major (T = 1, 16-bit; map [G][K][rows], the group g):
// nrows / 64 boxes of 64 elements (128 bytes) of rows x 64 of K, chunk j
// of the tile at j x WG_MN_CHUNK.  mc != 0: the boxes go to every block of
// the cluster (multicast).  Either way the byte offset of row r of the tile
// is r x 128 at the start of each 64-row chunk, so a block's share of Y^T's
// rows lands at the same place in both.
template <int T>
__device__ static inline void kg_wg_load(unsigned tile, const kg_tmap *m, int k0, int row0, int nrows, int g,
                                         unsigned full, unsigned short mc) {
    if (T) {
        for (int j = 0; j < nrows / 64; j++) {
            if (mc) kg_tma_load3_mc(tile + j * WG_MN_CHUNK, m, row0 + 64 * j, k0, g, full, mc);
            else kg_tma_load3(tile + j * WG_MN_CHUNK, m, row0 + 64 * j, k0, g, full);
        }
    } else if (mc) {
        kg_tma_load_mc(tile, m, k0, row0, full, mc);
    } else {
        kg_tma_load(tile, m, k0, row0, full);
    }
}

// Ragged inner dimension: the K rows [kv, 64) of this consumer's share of an
// MN-major stage set to zero (they hold the next group's rows, which TMA
// read since the group ends inside the stage): consumer c (of 2; t its
// thread in the warpgroup) zeroes X's chunk c (its own rows) and Y's
// chunks c, c + 2, ...; then the writes are fenced for wgmma's (async)
// proxy and both consumer warpgroups meet on named barrier 1, so that no
// wgmma reads a chunk before it is zeroed.  A K row of a chunk is 128
// contiguous bytes whatever the swizzle.
template <int BN>
__device__ static inline void kg_wg_zero_tail(unsigned sx, unsigned sy, int kv, int c, int t) {
    const int n = (64 - kv) * 8;   // 16-byte pieces per chunk
    for (int i = t; i < n; i += 128)
        asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};" ::"r"(sx + kv * 128 + i * 16), "r"(0u) : "memory");
    for (int j = c; j < BN / 64; j += 2)
        for (int i = t; i < n; i += 128)
            asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};"
                         ::"r"(sy + j * WG_MN_CHUNK + kv * 128 + i * 16), "r"(0u) : "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    asm volatile("bar.sync 1, 256;" ::: "memory");
}

// Blockwise scales (1 x 128 of X, grb x 128 of Y^T; kg_qgemm_sm90_blk_*,
// kg_qgemm_sm90_n192_blk_*), this thread's share in a tile: the scale rows
// (nkb scales each, one per K block) of its tile rows r and r + 8, sa +
// (m / gra) x nkb, and of the tile's columns n0 and n0 + BN / 2 (BN = 192:
// n0 + 128), sb + g x sbg + (n / grb) x nkb.  A row past the group's rows
// or a column past N takes the last one's (in range, never stored).  The
// host checks that BN / 2 divides grb (BN = 192: 128), so that each half of
// the tile lies in one block of Y^T's rows, and at BN = 192 (n0 a multiple
// of 64) so does each run of 64 columns: the first two runs in n0's block
// when 128 divides n0 (mid), else the last two in n0 + 128's.
// q: the K block this lane loads of a group (kg_wg_scales_load).
struct kg_wg_scale_rows { const float *a[2], *b[2]; int q, mid; };
template <int BN>
__device__ static inline kg_wg_scale_rows kg_wg_scale_rows_at(const kg_wg_at &at, int r, int N, int nkb,
                                                              const float *sa, const float *sb, int gra, int grb,
                                                              int sbg, int q) {
    kg_wg_scale_rows s;
#pragma unroll
    for (int e = 0; e < 2; e++) {
        const int m = min(at.m0 + r + 8 * e, at.m_end - 1);
        s.a[e] = sa + (kg_i64)(m / gra) * nkb;
    }
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int n = min(at.n0 + h * (BN == 192 ? 128 : BN / 2), N - 1);
        s.b[h] = sb + (kg_i64)at.g * sbg + (kg_i64)(n / grb) * nkb;
    }
    s.mid = at.n0 % 128 == 0;
    s.q = q;
    return s;
}
// The scales of K block kb0 + s.q if it is below nk: v[0..1] the rows',
// v[2..3] the two columns' above.
__device__ static inline void kg_wg_scales_load(float v[4], const kg_wg_scale_rows &s, int kb0, int nk) {
    const int k = kb0 + s.q;
    if (k < nk) v[0] = s.a[0][k], v[1] = s.a[1][k], v[2] = s.b[0][k], v[3] = s.b[1][k];
}

// fp8: k32 step kk of piece h of a stage (the W columns of Y^T from h x W:
// a half of the tile, or at W = BN the whole of it) into p (added to it when
// acc), A this consumer's 64 rows at sx, B the stage's Y^T at sy; neither
// fenced nor committed.
template <class In, int W>
__device__ static __forceinline__ void kg_wg_mma_k32(float *p, unsigned sx, unsigned sy, int h, int kk, int acc) {
    In::template mma_n<W>(p, kg_wg_desc_on(sx, kk * 32), kg_wg_desc_on(sy, h * W * 128 + kk * 32), acc);
}
// fp8 promotion: a piece's completed partial p (R registers) added into its
// R accumulators d, times t[run][row half] when SK (register i holds row
// half (i >> 1) & 1 of run i / RR: RR registers a run of columns), as
// ref.c's qprod_elem does: fma(partial, scale, acc).
template <int SK, int R, int RR = R>
__device__ static __forceinline__ void kg_wg_promote(float *d, const float *p, const float (*t)[2]) {
#pragma unroll
    for (int i = 0; i < R; i++) {
        if (SK) d[i] = kg_fma(p[i], t[i / RR][(i >> 1) & 1], d[i]);
        else d[i] += p[i];
    }
}

// SK: stage kb's scales t[run][row half] from nxt, loaded a stage ahead,
// and the next ones loaded into nxt.  Runs: BN = 256, the two halves;
// BN = 192, three runs of 64 columns, the middle one in n0's block or n0 +
// 128's (rows.mid).  QUAD (the 16-bit outputs' entries, at 224 registers):
// the four lanes of a quad, which share their rows, hold four K blocks,
// lane q block kb0 + q (rows.q), loaded together at the group's last stage
// before; stage kb takes lane kb % 4's by shuffles.  That is a quarter of
// the loads and their 64-bit address arithmetic, where Nsight Compute put
// about 9% of blockwise's samples (bench/HOPPER.md): 1.1% less time at
// 8192^3, 3.2% at 2000x3000x8192 (192 columns).  A shuffled scale is per
// lane as far as ptxas can tell, so it stays in a vector register (proved
// warp-uniform, a column half's scale was moved into a uniform register,
// R2UR, right after its load, and the warp waited there).  Otherwise (fp32
// outputs, 216 registers, where the quads spill) each lane loads each block.
template <int BN, bool QUAD>
__device__ static __forceinline__ void kg_wg_stage_scales(float t[3][2], float nxt[4], const kg_wg_scale_rows &rows,
                                                          int kb, int nk, int lane) {
    float w[4], u[2][2];   // u: [column n0's block, n0 + BN / 2's or n0 + 128's][row half]
#pragma unroll
    for (int i = 0; i < 4; i++) w[i] = QUAD ? __shfl_sync(0xffffffffu, nxt[i], (lane & ~3) | (kb & 3)) : nxt[i];
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
        for (int e = 0; e < 2; e++) u[h][e] = w[e] * w[2 + h];
#pragma unroll
    for (int e = 0; e < 2; e++) {
        t[0][e] = u[0][e], t[BN == 192 ? 2 : 1][e] = u[1][e];
        if (BN == 192) t[1][e] = rows.mid ? u[0][e] : u[1][e];
    }
    if ((!QUAD || (kb & 3) == 3) && kb + 1 < nk) kg_wg_scales_load(nxt, rows, kb + 1, nk);
}

// MX (SK = 2).  An E8M0 scale byte as a float: 2^(e - 127), 0xFF NaN.
__device__ static inline float kg_e8m0(unsigned e) {
    return __int_as_float(e == 255 ? 0x7fc00000 : e ? e << 23 : 0x400000);
}
// MX producer: thread t of NT writes stage kb's scales into its scale area
// sc as floats (kg_e8m0): X's as [4][WG_BM] (tile row r of K block 4kb + j
// at j x WG_BM + r), then Y^T's as [4][BN].  sa, sb: E8M0 bytes, row m of
// X's at sa + m x nkb, row n of group g's Y^T at sb + g x sbg + n x nkb.  A
// row past the group's rows (past N) or a K block past the last scales 0:
// its partial is 0 (TMA's zero fill) or never stored, and 0, not NaN x 0.
// A row's four bytes are one 4-byte load when every row is 4-byte aligned
// (v4); every load is issued before any store.
template <int NT, int BN>
__device__ static inline void kg_wg_mx_fill(unsigned sc, const kg_wg_at &at, int kb, int N, int nkb,
                                            const unsigned char *sa, const unsigned char *sb, int sbg, int t) {
    constexpr int R = WG_BM + BN, PER = (R + NT - 1) / NT;
    static_assert(PER <= 8, "a row's four bits of `ok` each");
    const int b0 = 4 * kb;
    const unsigned most = nkb - b0 >= 4 ? 15u : (1u << (nkb - b0)) - 1;   // the blocks that exist
    const bool v4 = nkb % 4 == 0 && (((unsigned long long)sa | (unsigned long long)sb) & 3) == 0;
    unsigned w[PER], ok = 0;   // ok: bit 4u + j set when block b0 + j of row u is read
#pragma unroll
    for (int u = 0; u < PER; u++) {
        const int i = t + NT * u, x = i < WG_BM, r = x ? at.m0 + i : at.n0 + i - WG_BM;
        const unsigned char *row = x ? sa + (kg_i64)r * nkb : sb + (kg_i64)at.g * sbg + (kg_i64)r * nkb;
        const unsigned m = i < R && r < (x ? at.m_end : N) ? most : 0u;
        ok |= m << (4 * u), w[u] = 0;
        if (m == 15u && v4) w[u] = *(const unsigned *)(row + b0);
        else
#pragma unroll
            for (int j = 0; j < 4; j++)
                if (m >> j & 1) w[u] |= (unsigned)row[b0 + j] << (8 * j);
    }
#pragma unroll
    for (int u = 0; u < PER; u++) {
        const int i = t + NT * u;
        if (i >= R) continue;
        const unsigned at0 = sc + (i < WG_BM ? i : 4 * WG_BM + i - WG_BM) * 4, stride = (i < WG_BM ? WG_BM : BN) * 4;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const float v = ok >> (4 * u + j) & 1 ? kg_e8m0(w[u] >> (8 * j) & 255) : 0.0f;
            asm volatile("st.shared.f32 [%0], %1;" ::"r"(at0 + j * stride), "f"(v) : "memory");
        }
    }
}
// MX promotion: the completed partial p of K block kk of a stage (half h)
// added into its BN/4 accumulators d times the block's scales, those of
// this thread's tile rows r and r + 8 and of its columns, from the stage's
// scale area sc: fma(partial, sa x sb, acc), as ref.c's qprod_elem.
// Register 4i + 2e + j of p holds row r + 8e, column h x BN/2 + 8i + 2q + j.
template <int BN>
__device__ static __forceinline__ void kg_wg_promote_mx(float *d, const float *p, unsigned sc, int kk, int r, int h,
                                                        int q) {
    float ra[2];
    asm volatile("ld.shared.f32 %0, [%1];" : "=f"(ra[0]) : "r"(sc + (kk * WG_BM + r) * 4));
    asm volatile("ld.shared.f32 %0, [%1];" : "=f"(ra[1]) : "r"(sc + (kk * WG_BM + r + 8) * 4));
    const unsigned cb = sc + (4 * WG_BM + kk * BN + h * (BN / 2) + 2 * q) * 4;
#pragma unroll
    for (int i = 0; i < BN / 16; i++) {
        float b[2];
        asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(b[0]), "=f"(b[1]) : "r"(cb + 32 * i));
#pragma unroll
        for (int e = 0; e < 2; e++)
#pragma unroll
            for (int j = 0; j < 2; j++) d[4 * i + 2 * e + j] = kg_fma(p[4 * i + 2 * e + j], ra[e] * b[j], d[4 * i + 2 * e + j]);
    }
}

// wgmma descriptor of k16 step kk of the operand tile at `tile` (one
// consumer's 64 rows of X, or Y^T's BN rows): K-major (T = 0) 32 bytes
// on per step; MN-major (T = 1) 16 K rows (2 KiB) on per step, the next 64
// rows WG_MN_CHUNK on.
template <int T>
__device__ static inline unsigned long long kg_wg_desc_at(unsigned tile, int kk) {
    return T ? kg_wg_desc_mn_on(tile, WG_MN_CHUNK, kk * 16 * 128) : kg_wg_desc_on(tile, kk * 32);
}

// The fp8 epilogue's scales (sa non-null): C(m, n) = d x (sa[m / gra] x
// sb[g*sbg + n / grb]), the two scales multiplied first, as ref.c's lp does.
// SC, the kind of B's scales, is chosen once per tile (kg_wg_epilogue): 0
// none, 1 one per tensor (grb >= N: cs, read once), 2 one per column or per
// grb columns, read from `cols`, the warp's copy of the tile's column
// scales in shared memory (kg_wg_cols_fill).  Global loads of the column
// scales among the stores could not pass them (the stores might alias
// them), so each added its latency: rowwise e4m3 8192^3 took 1.34x the time.
// The pair of columns j, j + 1 of a row times the row's scale rs and the
// columns' (SC = 1: cs; SC = 2: cols[j], cols[j + 1]; SC = 0: unscaled).
// Past N, cols holds 0 and nothing is stored.
template <int SC>
__device__ static __forceinline__ void kg_wg_scale_pair(float &v0, float &v1, float rs, float cs, const float *cols,
                                                        int j) {
    if (!SC) return;
    v0 *= rs * (SC == 1 ? cs : cols[j]);
    v1 *= rs * (SC == 1 ? cs : cols[j + 1]);
}
// SC = 2: the BN column scales of the tile at `at` (sbt[n / grb], 0 for n
// >= N, whose outputs are never stored) into this warp's `cols`, all loaded
// before any is stored.
template <int BN>
__device__ static __forceinline__ void kg_wg_cols_fill(float *cols, const kg_wg_at &at, int N, const float *sbt,
                                                       int grb, int lane) {
    float v[BN / 32];
#pragma unroll
    for (int k = 0; k < BN / 32; k++) {
        const int n = at.n0 + lane + 32 * k;
        v[k] = n < N ? sbt[grb == 1 ? n : n / grb] : 0.0f;
    }
    float *mine = cols + lane;   // one base, constant offsets
    __syncwarp();                // every lane is done with the last tile's
#pragma unroll
    for (int k = 0; k < BN / 32; k++) mine[32 * k] = v[k];
    __syncwarp();
}

// Epilogues: one warp's 16 rows of a tile, from row r0 of the tile at `at`,
// out of the accumulators d of m64nBNk (register 4i + 2h + j of lane l
// holds row r0 + l/4 + 8h, column 8i + 2(l%4) + j), times the scales of
// kind SC (kg_wg_scale_pair; row scales sa[m / gra]); nothing outside the
// group's rows or N is written.
// Pairs: each lane stores its column pairs (4 bytes when contiguous and
// aligned).
template <class Out, int SC, int BN>
__device__ static __forceinline__ void kg_wg_store_pairs(const float *d, const kg_wg_at &at, typename Out::S *C,
                                                         int N, kg_i64 scm, kg_i64 scn, const float *sa, int gra,
                                                         float cs, const float *cols, int r0, int lane) {
    const int m_lo = at.m0 + r0 + lane / 4, j_lo = 2 * (lane % 4);
    const float *mine = SC == 2 ? cols + j_lo : cols;   // one base, constant offsets
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int m = m_lo + 8 * h;
        if (m >= at.m_end) continue;
        const float rs = SC ? sa[m / gra] : 1.0f;
        typename Out::S *row = C + (kg_i64)m * scm;
#pragma unroll
        for (int i = 0; i < BN / 8; i++) {
            const int n = at.n0 + j_lo + 8 * i;
            if (n >= N) continue;
            float v0 = d[4 * i + 2 * h], v1 = d[4 * i + 2 * h + 1];
            kg_wg_scale_pair<SC>(v0, v1, rs, cs, mine, 8 * i);
            kg_wg_store(row + (kg_i64)n * scn, v0, v1, n + 1 < N, scn, Out());
        }
    }
}
// 16-byte stores: per row half and 32 columns, the quad's lanes trade their
// pairs (kg_quad_transpose) so that lane q holds the 8 columns 8q .. 8q+7 of
// the 32, stored as one 16-byte store when they lie inside N, the row is
// contiguous (scn = 1) and aligned; one element at a time otherwise.
template <class Out, int SC, int BN>
__device__ static __forceinline__ void kg_wg_store_v4(const float *d, const kg_wg_at &at, typename Out::S *C,
                                                      int N, kg_i64 scm, kg_i64 scn, const float *sa, int gra,
                                                      float cs, const float *cols, int r0, int lane) {
    const int q = lane % 4;
    const float *mine = SC == 2 ? cols + 2 * q : cols;   // one base, constant offsets
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int m = at.m0 + r0 + lane / 4 + 8 * h;
        const bool row_in = m < at.m_end;
        const float rs = SC && row_in ? sa[m / gra] : 1.0f;
        typename Out::S *row = C + (kg_i64)m * scm;
#pragma unroll
        for (int k = 0; k < BN / 32; k++) {
            unsigned p[4];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int i = 4 * k + e;
                float v0 = d[4 * i + 2 * h], v1 = d[4 * i + 2 * h + 1];
                kg_wg_scale_pair<SC>(v0, v1, rs, cs, mine, 8 * i);
                p[e] = kg_wg_pack(v0, v1, Out());
            }
            kg_quad_transpose(p, q);   // every lane, before any leaves
            const int n = at.n0 + 32 * k + 8 * q;
            if (!row_in || n >= N) continue;
            typename Out::S *to = row + (kg_i64)n * scn;
            if (n + 7 < N && scn == 1 && ((unsigned long long)to & 15) == 0) {
                asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(to), "r"(p[0]), "r"(p[1]),
                             "r"(p[2]), "r"(p[3]) : "memory");
                continue;
            }
#pragma unroll
            for (int e = 0; e < 8; e++)
                if (n + e < N) to[e * scn] = (kg_u16)(p[e / 2] >> (16 * (e % 2)));
        }
    }
}

// The epilogue a build takes (chosen in kg_gemm_sm90): the 16-byte stores
// (tag 1: WG_STORE_V4, a 16-bit output) or the pairs (tag 0: fp32 outputs,
// the MX entries, the blockwise ones under WG_BLK_V4 = 0, and WG_STORE_V4 =
// 0); an overload, so that an output the 16-byte stores cannot pack (fp32)
// never instantiates them.  With the 16-byte stores ptxas spills one
// register in the MX and blockwise entries at the 216 / 72 split (tests.sh's
// check); blockwise takes 224 / 56 for them (WG_BLK_V4, 7.7% faster at
// 8192^3), MX keeps the pairs (its producers spill at 56; 0.4% slower).
template <int V>
struct kg_wg_tag {};
template <class Out, int SC, int BN, class... A>
__device__ static __forceinline__ void kg_wg_store_tile(kg_wg_tag<1>, A... a) {
    kg_wg_store_v4<Out, SC, BN>(a...);
}
template <class Out, int SC, int BN, class... A>
__device__ static __forceinline__ void kg_wg_store_tile(kg_wg_tag<0>, A... a) {
    kg_wg_store_pairs<Out, SC, BN>(a...);
}
// The kind of scales (kg_wg_scale_pair), chosen once per tile; SCALED = 0
// (no scales, or scaled in the sums already) instantiates SC = 0 alone.
// cols: this warp's BN floats of shared memory.
template <class Out, int SCALED, int BN, class Tag>
__device__ static __forceinline__ void kg_wg_epilogue(Tag t, const float *d, const kg_wg_at &at, typename Out::S *C,
                                                      int N, kg_i64 scm, kg_i64 scn, const float *sa,
                                                      const float *sb, int gra, int grb, int sbg, float *cols,
                                                      int r0, int lane) {
    if (!SCALED || !sa) {
        kg_wg_store_tile<Out, 0, BN>(t, d, at, C, N, scm, scn, sa, gra, 1.0f, cols, r0, lane);
    } else if (grb >= N) {
        kg_wg_store_tile<Out, SCALED, BN>(t, d, at, C, N, scm, scn, sa, gra, sb[at.g * sbg], cols, r0, lane);
    } else {
        kg_wg_cols_fill<BN>(cols, at, N, sb + at.g * sbg, grb, lane);
        kg_wg_store_tile<Out, 2 * SCALED, BN>(t, d, at, C, N, scm, scn, sa, gra, 1.0f, cols, r0, lane);
    }
}

// The body of every sm_90a GEMM entry (see the section comment).  In: input
// type (kg_wg_*); Out: output type (kg_bf16, kg_f16, kg_f32); TX, TY: 1 when
// X, Y^T are MN-major (16-bit only), ldx, ldy then the row strides of X^T
// and Y (see "Layouts").  RK: the ragged inner dimension (kg_wg_locate;
// TX = TY = 1): X^T and Y are single [sum of the groups' rows][M] and [..][N]
// tensors (syg = 0), group g's M x N output at C + g x scg.  Scales (sa
// non-null): C(m, n) = acc x (sa[m / gra] x sb[g*sbg + n / grb]); SK (fp8
// only): one scale per 128 of K, C(m, n) = sum over K blocks kb of P_kb x
// (sa[(m / gra) x nkb + kb] x sb[g*sbg + (n / grb) x nkb + kb]), each
// stage's partial P_kb times its scales as it is added (kg_wg_scale_rows).
// SK = 2 (MX): sa, sb are E8M0 bytes, one per 32 of K of each row of X and
// of Y^T (gra = grb = 1), C(m, n) = sum over blocks b of P_b x (sa[m x nkb
// + b] x sb[g*sbg + n x nkb + b]); producer warps 1-3 write each stage's
// scales next to it (kg_wg_mx_fill), each k32 wgmma's partial is added
// times them (kg_wg_promote_mx).  BN: the tile's columns (WG_BN, or 192 in
// the per-tensor / per-row fp8 entries kg_qgemm_sm90_n192_*).
template <class In, class Out, int TX, int TY, int RK, int SK = 0, int BN = WG_BN>
__device__ static inline void kg_gemm_sm90(const kg_tmap *ta, const kg_tmap *tb, int use_tma,
                                           const unsigned char *X, const unsigned char *Y,
                                           typename Out::S *C, const int *offs, int G, int units, int M,
                                           int N, int K, kg_i64 ldx, kg_i64 ldy, kg_i64 syg, kg_i64 scm,
                                           kg_i64 scn, kg_i64 scg, const float *sa, const float *sb, int gra,
                                           int grb, int sbg) {
    static_assert(!RK || (TX && TY), "a ragged inner dimension is read MN-major");
    static_assert(!SK || In::PROMOTE, "per-stage scales are applied as the fp8 partials are added");
    // setmaxnreg: WG_BLK_V4 gives the blockwise 16-bit-output entries 224 / 56,
    // so that the 16-byte stores fit without a spill
    constexpr bool blk_v4 = SK == 1 && WG_BLK_V4 && sizeof(typename Out::S) == 2;
    constexpr int PREGS = blk_v4 ? 56 : In::PRODUCER, CREGS = blk_v4 ? 224 : In::CONSUMER;
    static_assert(128 * PREGS + 256 * CREGS <= 168 * WG_THREADS, "setmaxnreg split too large");
    extern __shared__ unsigned char kg_dsmem[];
    const unsigned base = (kg_smem_addr(kg_dsmem) + 1023u) & ~1023u;
    const unsigned bars = base + WG_STAGES * WG_STAGE_BYTES_N(BN);   // full[s], then empty[s]
    const unsigned mxs = bars + 16 * WG_STAGES;   // SK = 2: stage s's scales at s x WG_MX_BYTES_N(BN); SK = 0: cols
    const int tid = (int)kg_tid(), wg = tid / 128, warp = tid / 32 % 4, lane = tid % 32;
    const int BK = WG_ROW / In::EB, nkb = (K + WG_MX - 1) / WG_MX;   // nkb: SK = 2's scales per row
    static_assert(SK != 2 || (!RK && WG_ROW / WG_MX == 4), "MX: four blocks of 32 per stage of 128 fp8");
    use_tma = use_tma && !WG_NO_TMA;
    if (tid == 0) {
        for (int s = 0; s < WG_STAGES; s++) {
            // full: TMA's arrive.expect_tx (and, MX, the 96 scale threads), or every producer thread's
            kg_bar_init(bars + 8 * s, use_tma ? (SK == 2 ? 97 : 1) : 128);
            kg_bar_init(bars + 8 * (WG_STAGES + s), 8 * WG_CLUSTER);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    kg_wg_cluster_sync();   // every block's barriers exist before any other block uses them
    const unsigned rank = kg_wg_rank();

    if (wg == 0) {   // producer
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(PREGS));
        const bool mxw = SK == 2 && warp > 0;   // MX: warps 1-3 write the scales
        if (use_tma && tid != 0 && !mxw) return;
        int s = 0;
        unsigned phase = 0;
        for (int u = kg_wg_cluster_id(); u < units; u += kg_wg_clusters()) {
            const kg_wg_at at = kg_wg_locate<RK, BN>(u, rank, offs, G, M, N, K);
            const int nk = (at.k1 - at.k0 + BK - 1) / BK;
            for (int kb = 0; kb < nk; kb++) {
                const int k0 = at.k0 + kb * BK;
                const unsigned full = bars + 8 * s, empty = bars + 8 * (WG_STAGES + s);
                const unsigned sx = base + s * WG_STAGE_BYTES_N(BN), sy = sx + WG_A_BYTES;
                kg_bar_wait(empty, phase ^ 1);
                if (mxw)
                    kg_wg_mx_fill<96, BN>(mxs + s * WG_MX_BYTES_N(BN), at, kb, N, nkb, (const unsigned char *)sa,
                                      (const unsigned char *)sb, sbg, tid - 32);
                if (use_tma && tid != 0) {
                    kg_bar_arrive(full);   // MX: the scales are stored
                } else if (use_tma) {
                    // Y^T's rows: K-major, group g's from row g x N of one [G x N][K] map; MN-major,
                    // plane g of a [G][K][N] map.  Clusters: this block's share of them, into
                    // every block of the cluster.
                    const int share = BN / WG_CLUSTER, yrow = (TY ? 0 : at.g * N) + at.n0 + (int)rank * share;
                    kg_bar_expect(full, WG_STAGE_BYTES_N(BN));
                    kg_wg_load<TX>(sx, ta, k0, at.m0, WG_BM, 0, full, 0);
                    kg_wg_load<TY>(sy + rank * share * WG_ROW, tb, k0, yrow, share, RK ? 0 : at.g, full,
                                   WG_CLUSTER == 1 ? 0 : (unsigned short)((1u << WG_CLUSTER) - 1));
                } else {
                    if (WG_PREFETCH && !TX && !TY && kb + WG_PREFETCH < nk) {
                        const int kp = (kb + WG_PREFETCH) * BK;
                        kg_wg_prefetch<In::EB>(X, ldx, at.m_end, K, at.m0, WG_BM, kp, warp, lane);
                        kg_wg_prefetch<In::EB>(Y + at.g * syg * In::EB, ldy, N, K, at.n0, BN, kp, warp, lane);
                    }
                    kg_wg_fill_any<TX, In::EB>(sx, X, ldx, at.m_end, at.k1, at.m0, WG_BM, k0, warp, lane);
                    kg_wg_fill_any<TY, In::EB>(sy, Y + at.g * syg * In::EB, ldy, N, at.k1, at.n0, BN, k0, warp,
                                               lane);
                    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
                    kg_bar_arrive(full);
                }
                if (++s == WG_STAGES) s = 0, phase ^= 1;
            }
        }
        // Clusters: the other blocks' consumers arrive on this block's empty
        // barriers; it must not exit before they have, so wait until every
        // stage is free once more.
        if (WG_CLUSTER > 1 && tid == 0)
            for (int i = 0; i < WG_STAGES; i++) {
                kg_bar_wait(bars + 8 * (WG_STAGES + s), phase ^ 1);
                if (++s == WG_STAGES) s = 0, phase ^= 1;
            }
        return;
    }

    // consumers: warpgroup 1 owns tile rows [0, 64), warpgroup 2 rows [64, 128)
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(CREGS));
    // whole: per tensor and per row at BN <= 192, blockwise at 192, each stage's partial spans
    // the tile's whole width (BN / 2 registers, one wgmma m64nBNk32 a k32 step, one wait a
    // stage); otherwise two halves of BN / 4 registers in turn
    constexpr bool whole = In::PROMOTE && (SK == 1 ? BN == 192 : !SK && WG_FP8_SPAN == 1 && BN <= 192);
    const int c = wg - 1, PW = whole ? BN / 2 : In::PROMOTE ? BN / 4 : 1;   // PW: a partial's registers
    // SK = 0 (per tensor, per row): each consumer warp's copy of a tile's
    // column scales (kg_wg_cols_fill), where the MX entries keep theirs
    static_assert(8 * BN * 4 <= WG_STAGES * WG_MX_BYTES_N(BN), "the column scales fit the MX scales' space");
    float *cols = (float *)(kg_dsmem + (mxs - kg_smem_addr(kg_dsmem))) + (c * 4 + warp) * BN;
    // fp8: part, a half's partial
    float d[BN / 2], part[PW];
    int s = 0;
    unsigned phase = 0;
    for (int u = kg_wg_cluster_id(); u < units; u += kg_wg_clusters()) {
        const kg_wg_at at = kg_wg_locate<RK, BN>(u, rank, offs, G, M, N, K);
        const int nk = (at.k1 - at.k0 + BK - 1) / BK;
#pragma unroll
        for (int i = 0; i < BN / 2; i++) d[i] = 0.0f;
        int prev = -1;   // the stage whose wgmma may still be in flight
        // SK: the scales are loaded a stage ahead (nxt), so that their latency hides under one stage
        kg_wg_scale_rows rows;
        float nxt[4];
        if (SK == 1) {
            rows = kg_wg_scale_rows_at<BN>(at, c * 64 + warp * 16 + lane / 4, N, nk, sa, sb, gra, grb, sbg,
                                           blk_v4 ? lane & 3 : 0);
            if (nk > 0) kg_wg_scales_load(nxt, rows, 0, nk);
        }
        for (int kb = 0; kb < nk; kb++) {
            const unsigned stage = base + s * WG_STAGE_BYTES_N(BN), sx = stage + c * 64 * 128, sy = stage + WG_A_BYTES;
            float t[3][2];   // SK: this stage's scales, t[run][row half]
            if (SK == 1) kg_wg_stage_scales<BN, blk_v4>(t, nxt, rows, kb, nk, lane);
            kg_bar_wait(bars + 8 * s, phase);
            if (RK && at.k1 - at.k0 - kb * BK < BK) kg_wg_zero_tail<BN>(sx, sy, at.k1 - at.k0 - kb * BK, c, tid % 128);
            if constexpr (SK == 2) {
                // MX: each k32 step of each half through `part`, waited for and added times its
                // scales (kk not unrolled, or ptxas spills).  Measured slower (README, the variants
                // ledger): steps of 64 columns, one partial of 32 registers (5.7%), or two in turn,
                // one added while the next one's wgmma runs (3.1%).
#pragma unroll
                for (int h = 0; h < 2; h++)
#pragma unroll 1
                    for (int kk = 0; kk < 4; kk++) {
                        kg_wg_fence();
                        kg_wg_mma_k32<In, BN / 2>(part, sx, sy, h, kk, 0);
                        kg_wg_commit();
                        kg_wg_wait<0>();
                        kg_wg_touch<PW>(part);
                        kg_wg_promote_mx<BN>(d + h * (BN / 4), part, mxs + s * WG_MX_BYTES_N(BN), kk,
                                         c * 64 + warp * 16 + lane / 4, h, lane % 4);
                    }
                kg_wg_release(bars + 8 * (WG_STAGES + s), lane);
                if (++s == WG_STAGES) s = 0, phase ^= 1;
                continue;
            }
            if constexpr (In::PROMOTE && (SK || WG_FP8_SPAN)) {
                // the stage in NH pieces of W columns (two halves, or the whole tile), each
                // through `part`, waited for; WG_FP8_SPAN = 2 (not SK): each half's partial spans
                // the next stage too, and both are freed
                constexpr int NH = whole ? 1 : 2, W = BN / NH;
                const bool two = !SK && WG_FP8_SPAN == 2 && kb + 1 < nk;
                const int s2 = s + 1 == WG_STAGES ? 0 : s + 1;
                const unsigned sx2 = sx + (s2 - s) * WG_STAGE_BYTES_N(BN), sy2 = sy + (s2 - s) * WG_STAGE_BYTES_N(BN);
                if (two) kg_bar_wait(bars + 8 * s2, s2 ? phase : phase ^ 1);
#pragma unroll
                for (int h = 0; h < NH; h++) {
                    kg_wg_fence();
#pragma unroll
                    for (int kk = 0; kk < 4; kk++) kg_wg_mma_k32<In, W>(part, sx, sy, h, kk, kk);
                    if (two)
#pragma unroll
                        for (int kk = 0; kk < 4; kk++) kg_wg_mma_k32<In, W>(part, sx2, sy2, h, kk, 1);
                    kg_wg_commit();
                    kg_wg_wait<0>();
                    kg_wg_touch<PW>(part);
                    // runs: the piece (a half), or at BN = 192 three of 64 columns
                    kg_wg_promote<SK, PW, whole && BN == 192 ? 32 : PW>(d + h * PW, part, t + h);
                }
                kg_wg_release(bars + 8 * (WG_STAGES + s), lane);
                if (++s == WG_STAGES) s = 0, phase ^= 1;
                if (two) {
                    kg_wg_release(bars + 8 * (WG_STAGES + s), lane);
                    if (++s == WG_STAGES) s = 0, phase ^= 1;
                    kb++;
                }
                continue;
            }
            kg_wg_touch<BN / 2>(d);
            kg_wg_fence();
            if constexpr (In::PROMOTE) {   // fp8 with WG_FP8_SPAN = 0 (a diagnostic): the tensor cores' own sums
#pragma unroll
                for (int h = 0; h < 2; h++)
#pragma unroll
                    for (int kk = 0; kk < 4; kk++) kg_wg_mma_k32<In, BN / 2>(d + h * (BN / 4), sx, sy, h, kk, 1);
            } else {
#pragma unroll
                for (int kk = 0; kk < 4; kk++)
                    In::template mma<TX, TY, BN>(d, kg_wg_desc_at<TX>(sx, kk), kg_wg_desc_at<TY>(sy, kk), 1);
            }
            kg_wg_commit();
            // WG_INFLIGHT = 1: wait for the previous stage's group only, and
            // free that stage; this one's runs on while the next is waited for.
            kg_wg_wait<WG_INFLIGHT>();
            kg_wg_touch<BN / 2>(d);
            const int done = WG_INFLIGHT ? prev : s;
            if (done >= 0) kg_wg_release(bars + 8 * (WG_STAGES + done), lane);
            prev = s;
            if (++s == WG_STAGES) s = 0, phase ^= 1;
        }
        kg_wg_wait<0>();
        kg_wg_touch<BN / 2>(d);
        if (WG_INFLIGHT && prev >= 0) kg_wg_release(bars + 8 * (WG_STAGES + prev), lane);

        // 16-bit outputs take the 16-byte stores: bf16 and fp16 gained 4-8% on the
        // H200, fp8 per tensor and per row 7% once its column scales came from
        // shared memory (README); SK (blockwise, MX): pairs unless blk_v4.
        typename Out::S *Cg = RK ? C + (kg_i64)at.g * scg : C;
        // SK: the scales are in the sums already
        constexpr bool v4 = WG_STORE_V4 && sizeof(typename Out::S) == 2 && (!SK || blk_v4);
        kg_wg_epilogue<Out, In::PROMOTE && !SK, BN>(kg_wg_tag<v4>(), d, at, Cg, N, scm, scn, sa, sb, gra, grb, sbg,
                                                    cols, c * 64 + warp * 16, lane);
    }
}
#if WG_CLUSTER > 1
#define KG_WG_CLUSTER_DIMS __cluster_dims__(WG_CLUSTER, 1, 1)
#else
#define KG_WG_CLUSTER_DIMS
#endif
#define KG_GEMM_SM90_ENTRY(name, In, Out, TX, TY)                                                    \
    KG_ATOMICS(name, 0)                                                                              \
    extern "C" __global__ void __launch_bounds__(WG_THREADS, 1) KG_WG_CLUSTER_DIMS                  \
    name(const __grid_constant__ kg_tmap ta, const __grid_constant__ kg_tmap tb, int use_tma,        \
         const Out::S *X, const Out::S *Y, Out::S *C, const int *offs, int G, int units, int M,      \
         int N, int K, kg_i64 ldx, kg_i64 ldy, kg_i64 syg, kg_i64 scm, kg_i64 scn)                   \
    {                                                                                                \
        kg_gemm_sm90<In, Out, TX, TY, 0>(&ta, &tb, use_tma, (const unsigned char *)X,               \
                                         (const unsigned char *)Y, C, offs, G, units, M, N, K, ldx,  \
                                         ldy, syg, scm, scn, 0, 0, 0, 1, 1, 0);                      \
    }
#define KG_WGRAD_SM90_ENTRY(name, In, Out)                                                           \
    KG_ATOMICS(name, 0)                                                                              \
    extern "C" __global__ void __launch_bounds__(WG_THREADS, 1) KG_WG_CLUSTER_DIMS                  \
    name(const __grid_constant__ kg_tmap ta, const __grid_constant__ kg_tmap tb, int use_tma,        \
         const Out::S *X, const Out::S *Y, Out::S *C, const int *offs, int G, int units, int M,      \
         int N, kg_i64 ldx, kg_i64 ldy, kg_i64 scm, kg_i64 scn, kg_i64 scg)                          \
    {                                                                                                \
        kg_gemm_sm90<In, Out, 1, 1, 1>(&ta, &tb, use_tma, (const unsigned char *)X,                 \
                                       (const unsigned char *)Y, C, offs, G, units, M, N, 0, ldx,    \
                                       ldy, 0, scm, scn, scg, 0, 0, 1, 1, 0);                        \
    }
// SK = 0: one scale per row block along all of K (per tensor, per row),
// applied in the epilogue; SK = 1: blockwise, one per 128 of K (the sbg of
// a group's Y^T scales: its row blocks x K blocks); SK = 2: MX, SA and SB
// are E8M0 bytes, one per 32 of K of each row (gra = grb = 1).
#define KG_QGEMM_SM90_ENTRY(name, In, Out, SK) KG_QGEMM_SM90_ENTRY_N(name, In, Out, SK, WG_BN)
#define KG_QGEMM_SM90_ENTRY_N(name, In, Out, SK, BN)                                                 \
    KG_ATOMICS(name, 0)                                                                              \
    extern "C" __global__ void __launch_bounds__(WG_THREADS, 1) KG_WG_CLUSTER_DIMS                  \
    name(const __grid_constant__ kg_tmap ta, const __grid_constant__ kg_tmap tb, int use_tma,        \
         const unsigned char *A, const unsigned char *B, const float *SA, const float *SB,           \
         Out::S *C, const int *offs, int G, int units, int M, int N, int K, int gra, int grb)        \
    {                                                                                                \
        const int sbg = (N + grb - 1) / grb * (SK == 2 ? (K + WG_MX - 1) / WG_MX                    \
                                               : SK ? (K + WG_ROW - 1) / WG_ROW : 1);                \
        kg_gemm_sm90<In, Out, 0, 0, 0, SK, BN>(&ta, &tb, use_tma, A, B, C, offs, G, units, M, N, K, K, \
                                               K, (kg_i64)N * K, N, 1, 0, SA, SB, gra, grb, sbg);    \
    }

KG_GEMM_SM90_ENTRY(kg_gemm_sm90_f16, kg_wg_f16, kg_f16, 0, 0)
KG_GEMM_SM90_ENTRY(kg_gemm_sm90_bf16, kg_wg_bf16, kg_bf16, 0, 0)
KG_GEMM_SM90_ENTRY(kg_gemm_sm90_nn_f16, kg_wg_f16, kg_f16, 0, 1)
KG_GEMM_SM90_ENTRY(kg_gemm_sm90_nn_bf16, kg_wg_bf16, kg_bf16, 0, 1)
KG_GEMM_SM90_ENTRY(kg_gemm_sm90_tn_f16, kg_wg_f16, kg_f16, 1, 1)
KG_GEMM_SM90_ENTRY(kg_gemm_sm90_tn_bf16, kg_wg_bf16, kg_bf16, 1, 1)
KG_GEMM_SM90_ENTRY(kg_gemm_sm90_tt_f16, kg_wg_f16, kg_f16, 1, 0)
KG_GEMM_SM90_ENTRY(kg_gemm_sm90_tt_bf16, kg_wg_bf16, kg_bf16, 1, 0)
KG_WGRAD_SM90_ENTRY(kg_gemm_sm90_wgrad_f16, kg_wg_f16, kg_f16)
KG_WGRAD_SM90_ENTRY(kg_gemm_sm90_wgrad_bf16, kg_wg_bf16, kg_bf16)
KG_QGEMM_SM90_ENTRY(kg_qgemm_sm90_e4m3_bf16, kg_wg_e4m3, kg_bf16, 0)
KG_QGEMM_SM90_ENTRY(kg_qgemm_sm90_e5m2_bf16, kg_wg_e5m2, kg_bf16, 0)
KG_QGEMM_SM90_ENTRY(kg_qgemm_sm90_blk_e4m3_bf16, kg_wg_e4m3, kg_bf16, 1)
KG_QGEMM_SM90_ENTRY(kg_qgemm_sm90_blk_e5m2_bf16, kg_wg_e5m2, kg_bf16, 1)
KG_QGEMM_SM90_ENTRY(kg_qgemm_sm90_e4m3_f32, kg_wg_e4m3, kg_f32, 0)
KG_QGEMM_SM90_ENTRY(kg_qgemm_sm90_e5m2_f32, kg_wg_e5m2, kg_f32, 0)
KG_QGEMM_SM90_ENTRY(kg_qgemm_sm90_blk_e4m3_f32, kg_wg_e4m3, kg_f32, 1)
KG_QGEMM_SM90_ENTRY(kg_qgemm_sm90_blk_e5m2_f32, kg_wg_e5m2, kg_f32, 1)
#if WG_BN == 256
KG_QGEMM_SM90_ENTRY_N(kg_qgemm_sm90_n192_e4m3_bf16, kg_wg_e4m3, kg_bf16, 0, 192)
KG_QGEMM_SM90_ENTRY_N(kg_qgemm_sm90_n192_e5m2_bf16, kg_wg_e5m2, kg_bf16, 0, 192)
KG_QGEMM_SM90_ENTRY_N(kg_qgemm_sm90_n192_e4m3_f32, kg_wg_e4m3, kg_f32, 0, 192)
KG_QGEMM_SM90_ENTRY_N(kg_qgemm_sm90_n192_e5m2_f32, kg_wg_e5m2, kg_f32, 0, 192)
KG_QGEMM_SM90_ENTRY_N(kg_qgemm_sm90_n192_blk_e4m3_bf16, kg_wg_e4m3, kg_bf16, 1, 192)
KG_QGEMM_SM90_ENTRY_N(kg_qgemm_sm90_n192_blk_e5m2_bf16, kg_wg_e5m2, kg_bf16, 1, 192)
#endif
#if WG_HAS_MX
KG_QGEMM_SM90_ENTRY(kg_qgemm_sm90_mx_e4m3_bf16, kg_wg_e4m3, kg_bf16, 2)
KG_QGEMM_SM90_ENTRY(kg_qgemm_sm90_mx_e5m2_bf16, kg_wg_e5m2, kg_bf16, 2)
KG_QGEMM_SM90_ENTRY(kg_qgemm_sm90_mx_e4m3_f32, kg_wg_e4m3, kg_f32, 2)
KG_QGEMM_SM90_ENTRY(kg_qgemm_sm90_mx_e5m2_f32, kg_wg_e5m2, kg_f32, 2)
#endif

// Pack rows for TMA: `rows` rows of `cols` elements of eb bytes (1 or 2)
// into dst, `dld` bytes apart (a multiple of 16); the bytes of a row past
// cols x eb are zero.  Row r is row r % per of group r / per of the source:
// at src + (r / per x sgroup + r % per x sld) elements.  One thread per 16
// bytes of dst, grid-stride.
template <int EB>
__device__ static inline void kg_pack_chunk(const unsigned char *row, int e0, int cols, unsigned char *to) {
    unsigned w[4] = { 0, 0, 0, 0 };
#pragma unroll
    for (int j = 0; j < 16 / EB; j++)
        if (e0 + j < cols)
            w[j * EB / 4] |= (EB == 2 ? ((const kg_u16 *)row)[e0 + j] : row[e0 + j]) << (8 * (j * EB % 4));
    asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(to), "r"(w[0]), "r"(w[1]), "r"(w[2]),
                 "r"(w[3]) : "memory");
}
KG_ATOMICS(kg_pack_rows, 0)
extern "C" __global__ void kg_pack_rows(const unsigned char *src, unsigned char *dst, kg_i64 rows, kg_i64 per,
                                        int cols, kg_i64 sld, kg_i64 sgroup, int dld, int eb) {
    const kg_i64 chunks = dld / 16, n = rows * chunks, step = (kg_i64)kg_grid_x() * blockDim.x;
    for (kg_i64 i = (kg_i64)kg_bid_x() * blockDim.x + kg_tid(); i < n; i += step) {
        const kg_i64 r = i / chunks, c = i % chunks;
        const unsigned char *row = src + (r / per * sgroup + r % per * sld) * eb;
        if (eb == 2) kg_pack_chunk<2>(row, (int)c * 8, cols, dst + r * dld + c * 16);
        else kg_pack_chunk<1>(row, (int)c * 16, cols, dst + r * dld + c * 16);
    }
}
// An E2M1 code as the E4M3 code of the same value (every E2M1 value is one):
// magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6 and the sign.  Plain C between the
// marks: tests.sh checks all 16 codes against ref.c's codecs.
// >>> kgate-fp4 (plain C once __device__ is dropped)
__device__ static inline unsigned kg_e2m1_e4m3(unsigned c) {
    const unsigned m = c & 7;
    return (c & 8) << 4 | (m == 0 ? 0u : m == 1 ? 0x30u : 0x38u + 4 * (m - 2));
}
// <<< kgate-fp4
// Unpack FP4 rows for TMA as kg_pack_rows packs: `rows` rows of `cols` E2M1
// codes (two a byte, element 2j in the low nibble), row r at src + r / per
// x sgroup + r % per x sld bytes, into dst as E4M3 codes (kg_e2m1_e4m3), `dld`
// bytes apart (a multiple of 16), zero past cols: the MX entries then read
// MXFP4 as MXFP8 with the same scales, exactly.  One thread per 16 bytes of
// dst, grid-stride.
KG_ATOMICS(kg_pack_fp4_e4m3, 0)
extern "C" __global__ void kg_pack_fp4_e4m3(const unsigned char *src, unsigned char *dst, kg_i64 rows, kg_i64 per,
                                            int cols, kg_i64 sld, kg_i64 sgroup, int dld) {
    const kg_i64 chunks = dld / 16, n = rows * chunks, step = (kg_i64)kg_grid_x() * blockDim.x;
    for (kg_i64 i = (kg_i64)kg_bid_x() * blockDim.x + kg_tid(); i < n; i += step) {
        const kg_i64 r = i / chunks, c = i % chunks;
        const unsigned char *row = src + r / per * sgroup + r % per * sld;
        unsigned w[4] = { 0, 0, 0, 0 };
#pragma unroll
        for (int j = 0; j < 16; j++) {
            const int e = (int)c * 16 + j;
            if (e < cols) w[j / 4] |= kg_e2m1_e4m3(row[e / 2] >> (e % 2 * 4) & 15u) << (8 * (j % 4));
        }
        asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(dst + r * dld + c * 16), "r"(w[0]), "r"(w[1]),
                     "r"(w[2]), "r"(w[3]) : "memory");
    }
}
#endif // KG_SM90

// ===== GEMM, CDNA3 path (gfx942): MFMA =====
//
// kg_gemm_mfma_{f16,bf16}: kg_gemm_<dt>'s product, arguments and contract
// (strided operands, so every layout and the backward products; rows and
// columns outside M, N neither read nor written; K = 0 writes zeros) on the
// matrix cores: v_mfma_f32_32x32x8_{f16,bf16}, fp32 accumulation, the same
// instruction sequence on every run (deterministic, no atomics).
//   - Grid: (ceil(N/MF_BN), ceil(M/MF_BM)), MF_THREADS = 256 threads, four
//     waves of 64 in 2 x 2: wave w owns the tile's rows 64(w/2) .. +63 and
//     columns 64(w%2) .. +63 as 2 x 2 MFMA blocks of 32 x 32 (64 fp32
//     accumulators a lane).
//   - K in steps of MF_BK = 32.  Each thread loads its share of the next
//     step's X and Y^T tiles into registers while its wave runs the current
//     step's 16 MFMAs from LDS; then a barrier, the registers into LDS, a
//     barrier.  Where K is contiguous in memory an operand is read 8
//     elements (16 bytes) at a time when the 8 lie inside the matrix and the
//     address is aligned, element by element otherwise; where it is not,
//     element by element with the contiguous index fastest.  Outside M, N or
//     K: zeros.
//   - LDS: X's tile [MF_BM][MF_LD] and Y^T's [MF_BN][MF_LD], 16-bit, K
//     contiguous; MF_LD = MF_BK + 4 puts the rows 72 bytes apart, so that the
//     32 rows a fragment read touches spread over the banks.
//   - Fragments, from AMD's documented lane layout (the matrix instruction
//     calculator, CDNA3; its tables are .ci/mfma_gfx942_32x32x8.txt): lane l
//     gives A's row l%32 at k = 4(l/32) .. +3, and B's column l%32 at the
//     same k (8 contiguous bytes of LDS each); accumulator i of lane l is
//     D's row 8(i/4) + 4(l/32) + i%4, column l%32.
// The index functions between the kgate-index marks are plain C: tests.sh
// compiles them with a C compiler, checks them against the calculator's
// tables and computes tiles through them on the CPU (no AMD GPU here).  The
// grouped products' twins on this kernel (kg_grouped_mfma_<dt>,
// kg_grouped_wgrad_mfma_<dt>) follow the portable grouped entries.

#if defined(__gfx942__) && !defined(KG_PORTABLE)
#define KG_MFMA 1
#endif

// A build without the MFMA entries still defines the globals whose value
// says they exist, as 0 (none), so that kgate's lookups of them succeed: a
// failed lookup is an API error that compute-sanitizer counts.
#if !defined(KG_MFMA)
extern "C" __device__ int kg_gemm_mfma_tile = 0;
extern "C" __device__ int kg_qgemm_mfma_tile = 0;
extern "C" __device__ int kg_attn_fwd_mfma_dmax = 0;
#endif

#if defined(KG_MFMA)
#define KG_IX __device__ static inline

// >>> kgate-index (plain C)
#define MF_BM 128
#define MF_BN 128
#define MF_BK 32
#define MF_LD (MF_BK + 4)
#define MF_THREADS 256
// v_mfma_f32_32x32x8_{f16,bf16}: lane l (0..63), element i of its operand.
// A's row (and B's column) of lane l; the k of its element i (i < 4):
KG_IX int kg_mf_ab_rc(int l) { return l % 32; }
KG_IX int kg_mf_ab_k(int l, int i) { return 4 * (l / 32) + i; }
// The row and column of D that accumulator i (i < 16) of lane l holds:
KG_IX int kg_mf_d_row(int l, int i) { return 8 * (i / 4) + 4 * (l / 32) + i % 4; }
KG_IX int kg_mf_d_col(int l) { return l % 32; }
// Wave w's first row and column in the tile; MFMA block b (0, 1) 32 on.
KG_IX int kg_mf_wave_row(int w) { return 64 * (w / 2); }
KG_IX int kg_mf_wave_col(int w) { return 64 * (w % 2); }
// The LDS element of a tile's row r, k.
KG_IX int kg_mf_lds(int r, int k) { return r * MF_LD + k; }
// Thread t's load j of a tile (128 rows x MF_BK), as (row, k) of its first
// element: K contiguous (v = 1): loads j < 2 of 8 elements along K;
// otherwise (v = 0): loads j < 16 of one element, the row fastest.
KG_IX int kg_mf_load_row(int v, int t, int j) { return v ? (t + MF_THREADS * j) / (MF_BK / 8) : (t + MF_THREADS * j) % 128; }
KG_IX int kg_mf_load_k(int v, int t, int j) { return v ? 8 * ((t + MF_THREADS * j) % (MF_BK / 8)) : (t + MF_THREADS * j) / 128; }
// Grouped, ragged rows: the launch's tile_offs counts each group's tiles of
// 64 rows (the portable kernels' tile, host-computed), and a block takes two:
// the first row, within its group, of the block at local tile j; -1: none
// (j odd, its rows are the previous block's).
KG_IX int kg_mf_group_row(int j) { return j % (MF_BM / 64) ? -1 : 64 * j; }
// <<< kgate-index

typedef float kg_mf_acc __attribute__((ext_vector_type(16)));
typedef short kg_mf_s4 __attribute__((ext_vector_type(4)));
typedef _Float16 kg_mf_h4 __attribute__((ext_vector_type(4)));
typedef unsigned kg_mf_u4 __attribute__((ext_vector_type(4)));

// One MFMA 32x32x8 of the storage type: acc += A(a) B(b), a and b the
// lane's four 16-bit elements (8 bytes, the first in the low bits).
__device__ static inline kg_mf_acc kg_mf_mma(unsigned long long a, unsigned long long b, kg_mf_acc acc, kg_bf16) {
    return __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(__builtin_bit_cast(kg_mf_s4, a), __builtin_bit_cast(kg_mf_s4, b),
                                                    acc, 0, 0, 0);
}
__device__ static inline kg_mf_acc kg_mf_mma(unsigned long long a, unsigned long long b, kg_mf_acc acc, kg_f16) {
    return __builtin_amdgcn_mfma_f32_32x32x8f16(__builtin_bit_cast(kg_mf_h4, a), __builtin_bit_cast(kg_mf_h4, b), acc,
                                                0, 0, 0);
}

// One operand's next tile in a thread's registers: 16 elements, two to a
// word (element 2i in w[i]'s low half), at the positions kg_mf_load_row/_k
// give for the operand's mode.
struct kg_mf_part { unsigned w[8]; };

// Thread t's share of the tile of rows [r0, r0 + 128) (of R) and k [k0,
// k0 + MF_BK) (of K) of an operand whose element (r, k) is at P + r*sr +
// k*sk, into q (zeros outside R or K); mode: K contiguous (sk = 1) or not.
__device__ static inline void kg_mf_fetch(kg_mf_part &q, const kg_u16 *P, kg_i64 sr, kg_i64 sk, int R, int K,
                                          int r0, int k0, int t) {
    if (sk == 1) {
#pragma unroll
        for (int j = 0; j < 2; j++) {
            const int r = r0 + kg_mf_load_row(1, t, j), k = k0 + kg_mf_load_k(1, t, j);
            const kg_u16 *p = P + (kg_i64)r * sr + k;
            if (r < R && k + 7 < K && ((unsigned long long)p & 15) == 0) {
                const kg_mf_u4 v = *(const kg_mf_u4 *)p;
                q.w[4 * j] = v.x, q.w[4 * j + 1] = v.y, q.w[4 * j + 2] = v.z, q.w[4 * j + 3] = v.w;
                continue;
            }
#pragma unroll
            for (int e = 0; e < 8; e += 2)
                q.w[4 * j + e / 2] = (r < R && k + e < K ? p[e] : 0u) | (r < R && k + e + 1 < K ? p[e + 1] : 0u) << 16;
        }
        return;
    }
#pragma unroll
    for (int j = 0; j < 16; j += 2) {
        unsigned h[2];
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int r = r0 + kg_mf_load_row(0, t, j + e), k = k0 + kg_mf_load_k(0, t, j + e);
            h[e] = r < R && k < K ? P[(kg_i64)r * sr + (kg_i64)k * sk] : 0u;
        }
        q.w[j / 2] = h[0] | h[1] << 16;
    }
}

// q into the LDS tile s, at the positions it was fetched from (mode v: K
// contiguous).
__device__ static inline void kg_mf_put(const kg_mf_part &q, kg_u16 *s, int v, int t) {
    if (v) {
#pragma unroll
        for (int j = 0; j < 2; j++) {
            kg_u16 *d = s + kg_mf_lds(kg_mf_load_row(1, t, j), kg_mf_load_k(1, t, j));
#pragma unroll
            for (int h = 0; h < 2; h++)   // 8-byte stores: the rows are 72 bytes apart
                *(unsigned long long *)(d + 4 * h) =
                    q.w[4 * j + 2 * h] | (unsigned long long)q.w[4 * j + 2 * h + 1] << 32;
        }
        return;
    }
#pragma unroll
    for (int j = 0; j < 16; j++)
        s[kg_mf_lds(kg_mf_load_row(0, t, j), kg_mf_load_k(0, t, j))] = (kg_u16)(q.w[j / 2] >> (16 * (j % 2)));
}

// One K step of wave w's 2 x 2 blocks from the LDS tiles xs, ys (lane l).
// Unrolled by 2, not 4: fully unrolled, clang-19 hoists all 16 fragment
// reads and needs 228 VGPRs (one wave a SIMD); by 2, 108.
template <class D>
__device__ static inline void kg_mf_step(kg_mf_acc acc[2][2], const kg_u16 *xs, const kg_u16 *ys, int w, int l) {
#pragma unroll 2
    for (int kk = 0; kk < MF_BK; kk += 8) {
        unsigned long long a[2], b[2];
#pragma unroll
        for (int x = 0; x < 2; x++) {
            a[x] = *(const unsigned long long *)(xs + kg_mf_lds(kg_mf_wave_row(w) + 32 * x + kg_mf_ab_rc(l),
                                                                  kk + kg_mf_ab_k(l, 0)));
            b[x] = *(const unsigned long long *)(ys + kg_mf_lds(kg_mf_wave_col(w) + 32 * x + kg_mf_ab_rc(l),
                                                                  kk + kg_mf_ab_k(l, 0)));
        }
#pragma unroll
        for (int x = 0; x < 2; x++)
#pragma unroll
            for (int y = 0; y < 2; y++) acc[x][y] = kg_mf_mma(a[x], b[y], acc[x][y], D());
    }
}

// The block's MF_BM x MF_BN tile of C at (m0, n0): kg_gemm_portable's
// contract on the matrix cores (the section comment).  Every thread of the
// block must call it.  Always inlined: called from three entries, clang-19
// made it a function, with a call's scratch and 312 VGPRs.
template <class D>
__device__ static inline __attribute__((always_inline)) void kg_gemm_mfma(const kg_u16 *X, const kg_u16 *Y, kg_u16 *C, int M, int N, int K,
                                           kg_i64 sxm, kg_i64 sxk, kg_i64 syk, kg_i64 syn, kg_i64 scm, kg_i64 scn,
                                           int m0, int n0) {
    __shared__ __attribute__((aligned(16))) kg_u16 xs[MF_BM * MF_LD], ys[MF_BN * MF_LD];   // 8-byte accesses
    const int t = (int)kg_tid(), w = t / 64, l = t % 64, vx = sxk == 1, vy = syk == 1;
    kg_mf_acc acc[2][2];
#pragma unroll
    for (int x = 0; x < 2; x++)
#pragma unroll
        for (int y = 0; y < 2; y++)
#pragma unroll
            for (int i = 0; i < 16; i++) acc[x][y][i] = 0.0f;
    kg_mf_part qx, qy;
    if (K > 0) {
        kg_mf_fetch(qx, X, sxm, sxk, M, K, m0, 0, t);
        kg_mf_fetch(qy, Y, syn, syk, N, K, n0, 0, t);
        kg_mf_put(qx, xs, vx, t);
        kg_mf_put(qy, ys, vy, t);
        kg_sync();
    }
    for (int k0 = 0; k0 < K; k0 += MF_BK) {
        const int more = k0 + MF_BK < K;
        if (more) {   // the next step's tiles load while this one computes
            kg_mf_fetch(qx, X, sxm, sxk, M, K, m0, k0 + MF_BK, t);
            kg_mf_fetch(qy, Y, syn, syk, N, K, n0, k0 + MF_BK, t);
        }
        kg_mf_step<D>(acc, xs, ys, w, l);
        kg_sync();
        if (more) {
            kg_mf_put(qx, xs, vx, t);
            kg_mf_put(qy, ys, vy, t);
            kg_sync();
        }
    }
#pragma unroll
    for (int x = 0; x < 2; x++)
#pragma unroll
        for (int y = 0; y < 2; y++) {
            const int n = n0 + kg_mf_wave_col(w) + 32 * y + kg_mf_d_col(l);
#pragma unroll
            for (int i = 0; i < 16; i++) {
                const int m = m0 + kg_mf_wave_row(w) + 32 * x + kg_mf_d_row(l, i);
                if (m < M && n < N) C[(kg_i64)m * scm + (kg_i64)n * scn] = D::st(acc[x][y][i]);
            }
        }
}

// The tile kgate sizes kg_gemm_mfma_<dt>'s grid by; nonzero says the
// entries exist (gfx942 builds).
extern "C" __device__ int kg_gemm_mfma_tile = MF_BM;

#define KG_GEMM_MFMA_ENTRY(name, D)                                                           \
    KG_ATOMICS(name, 0)                                                                      \
    extern "C" __global__ void KG_LAUNCH_BOUNDS(MF_THREADS)                                 \
    name(const D::S *X, const D::S *Y, D::S *C, int M, int N, int K, kg_i64 sxm, kg_i64 sxk, \
         kg_i64 syk, kg_i64 syn, kg_i64 scm, kg_i64 scn)                                     \
    {                                                                                        \
        kg_gemm_mfma<D>(X, Y, C, M, N, K, sxm, sxk, syk, syn, scm, scn,                      \
                        (int)kg_bid_y() * MF_BM, (int)kg_bid_x() * MF_BN);                   \
    }

KG_GEMM_MFMA_ENTRY(kg_gemm_mfma_f16, kg_f16)
KG_GEMM_MFMA_ENTRY(kg_gemm_mfma_bf16, kg_bf16)
#endif // KG_MFMA

// ===== Grouped GEMM (MoE), portable path =====
//
// G groups share one launch; offs (G+1 ints, offs[0] = 0, nondecreasing) cuts a
// ragged dimension into the groups' ranges [offs[g], offs[g+1]); a group may be
// empty.  Same tiles, arithmetic and determinism as kg_gemm_portable.
//
// Ragged rows (forward and dA): for m in [offs[g], offs[g+1]),
//   C[m][n] = sum_{k<K} X[m][k] * Y_g[k][n],
//   X[m][k] at X + m*sxm + k*sxk,  Y_g[k][n] at Y + g*syg + k*syk + n*syn,
//   C[m][n] at C + m*scm + n*scn.
// tile_offs (G+1 ints): tile_offs[g] = sum_{h<g} ceil((offs[h+1]-offs[h]) / GEMM_BM)
// (the launcher computes it, and the grid, with GEMM_BM = GEMM_BN = 64).
// Grid: (ceil(N/GEMM_BN), tile_offs[G]).  Block y belongs to the group g with
// tile_offs[g] <= y < tile_offs[g+1] (binary search; an empty group owns no
// block) and computes rows [offs[g] + (y - tile_offs[g])*GEMM_BM, ...) clipped
// to offs[g+1]: it never reads or writes the next group's rows.  K = 0 writes
// zeros.
//
// Ragged inner dimension (dB): for g = blockIdx.z,
//   C_g[m][n] = sum_{k in [offs[g], offs[g+1])} X[m][k] * Y[k][n],  m < M, n < N,
//   X[m][k] at X + m*sxm + k*sxk,  Y[k][n] at Y + k*syk + n*syn,
//   C_g[m][n] at C + g*scg + m*scm + n*scn.
// Grid: (ceil(N/GEMM_BN), ceil(M/GEMM_BM), G).  An empty group writes zeros to
// its whole C_g.

// The group g of tile row y: the largest g < G with tile_offs[g] <= y.  For
// 0 <= y < tile_offs[G] that g has tile_offs[g] <= y < tile_offs[g+1].
__device__ static inline int kg_group_of_tile(const int *tile_offs, int G, int y)
{
    int lo = 0, hi = G;   // tile_offs[lo] <= y; hi == G or tile_offs[hi] > y
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        if (tile_offs[mid] <= y) lo = mid;
        else hi = mid;
    }
    return lo;
}

template <class D>
__device__ static inline void kg_grouped_rows(const typename D::S *X, const typename D::S *Y,
                                              typename D::S *C, const int *offs,
                                              const int *tile_offs, int G, int N, int K,
                                              kg_i64 sxm, kg_i64 sxk, kg_i64 syk, kg_i64 syn,
                                              kg_i64 syg, kg_i64 scm, kg_i64 scn)
{
    const int y = (int)kg_bid_y();
    if (G <= 0 || y >= tile_offs[G]) return;   // the whole block leaves, before any barrier
    const int g = kg_group_of_tile(tile_offs, G, y);
    const int m0 = offs[g] + (y - tile_offs[g]) * GEMM_BM;
    kg_gemm_portable<D>(X, Y + (kg_i64)g * syg, C, offs[g + 1], N, K, sxm, sxk, syk, syn, scm,
                        scn, m0, (int)kg_bid_x() * GEMM_BN);
}

template <class D>
__device__ static inline void kg_grouped_inner(const typename D::S *X, const typename D::S *Y,
                                               typename D::S *C, const int *offs, int G, int M,
                                               int N, kg_i64 sxm, kg_i64 sxk, kg_i64 syk,
                                               kg_i64 syn, kg_i64 scg, kg_i64 scm, kg_i64 scn)
{
    const int g = (int)kg_bid_z();
    if (g >= G) return;   // the whole block leaves, before any barrier
    const int k0 = offs[g], K = offs[g + 1] - offs[g];
    kg_gemm_portable<D>(X + (kg_i64)k0 * sxk, Y + (kg_i64)k0 * syk, C + (kg_i64)g * scg, M, N, K,
                        sxm, sxk, syk, syn, scm, scn, (int)kg_bid_y() * GEMM_BM,
                        (int)kg_bid_x() * GEMM_BN);
}

#define KG_GROUPED_ENTRY(name, D)                                                            \
    KG_ATOMICS(name, 0)                                                                      \
    extern "C" __global__ void KG_LAUNCH_BOUNDS(GEMM_THREADS)                               \
    name(const D::S *X, const D::S *Y, D::S *C, const int *offs, const int *tile_offs, int G, \
         int N, int K, kg_i64 sxm, kg_i64 sxk, kg_i64 syk, kg_i64 syn, kg_i64 syg, kg_i64 scm, \
         kg_i64 scn)                                                                         \
    {                                                                                        \
        kg_grouped_rows<D>(X, Y, C, offs, tile_offs, G, N, K, sxm, sxk, syk, syn, syg, scm,  \
                           scn);                                                             \
    }

#define KG_GROUPED_WGRAD_ENTRY(name, D)                                                      \
    KG_ATOMICS(name, 0)                                                                      \
    extern "C" __global__ void KG_LAUNCH_BOUNDS(GEMM_THREADS)                               \
    name(const D::S *X, const D::S *Y, D::S *C, const int *offs, int G, int M, int N,        \
         kg_i64 sxm, kg_i64 sxk, kg_i64 syk, kg_i64 syn, kg_i64 scg, kg_i64 scm, kg_i64 scn) \
    {                                                                                        \
        kg_grouped_inner<D>(X, Y, C, offs, G, M, N, sxm, sxk, syk, syn, scg, scm, scn);      \
    }

KG_GROUPED_ENTRY(kg_grouped_f32, kg_f32)
KG_GROUPED_ENTRY(kg_grouped_f16, kg_f16)
KG_GROUPED_ENTRY(kg_grouped_bf16, kg_bf16)
KG_GROUPED_WGRAD_ENTRY(kg_grouped_wgrad_f32, kg_f32)
KG_GROUPED_WGRAD_ENTRY(kg_grouped_wgrad_f16, kg_f16)
KG_GROUPED_WGRAD_ENTRY(kg_grouped_wgrad_bf16, kg_bf16)

#if defined(KG_MFMA)
// gfx942: the two grouped products on kg_gemm_mfma ("GEMM, CDNA3 path"), with
// kg_grouped_<dt>'s and kg_grouped_wgrad_<dt>'s arguments and contracts.
// Ragged rows: grid (ceil(N/MF_BN), tile_offs[G]), tile_offs in tiles of 64
// rows as for the portable kernel; a block whose local tile is odd leaves at
// once (kg_mf_group_row), the even one computes its 128 rows clipped to the
// group's end.  Ragged inner: grid (ceil(N/MF_BN), ceil(M/MF_BM), G).
#define KG_GROUPED_MFMA_ENTRY(name, D)                                                        \
    KG_ATOMICS(name, 0)                                                                      \
    extern "C" __global__ void KG_LAUNCH_BOUNDS(MF_THREADS)                                 \
    name(const D::S *X, const D::S *Y, D::S *C, const int *offs, const int *tile_offs, int G, \
         int N, int K, kg_i64 sxm, kg_i64 sxk, kg_i64 syk, kg_i64 syn, kg_i64 syg, kg_i64 scm, \
         kg_i64 scn)                                                                         \
    {                                                                                        \
        const int y = (int)kg_bid_y();                                                       \
        if (G <= 0 || y >= tile_offs[G]) return;   /* the whole block leaves */              \
        const int g = kg_group_of_tile(tile_offs, G, y), r = kg_mf_group_row(y - tile_offs[g]); \
        if (r < 0) return;                                                                   \
        kg_gemm_mfma<D>(X, Y + (kg_i64)g * syg, C, offs[g + 1], N, K, sxm, sxk, syk, syn, scm, scn, \
                        offs[g] + r, (int)kg_bid_x() * MF_BN);                               \
    }
#define KG_GROUPED_WGRAD_MFMA_ENTRY(name, D)                                                  \
    KG_ATOMICS(name, 0)                                                                      \
    extern "C" __global__ void KG_LAUNCH_BOUNDS(MF_THREADS)                                 \
    name(const D::S *X, const D::S *Y, D::S *C, const int *offs, int G, int M, int N,        \
         kg_i64 sxm, kg_i64 sxk, kg_i64 syk, kg_i64 syn, kg_i64 scg, kg_i64 scm, kg_i64 scn) \
    {                                                                                        \
        const int g = (int)kg_bid_z();                                                       \
        if (g >= G) return;                                                                  \
        const int k0 = offs[g];                                                              \
        kg_gemm_mfma<D>(X + (kg_i64)k0 * sxk, Y + (kg_i64)k0 * syk, C + (kg_i64)g * scg, M, N,  \
                        offs[g + 1] - k0, sxm, sxk, syk, syn, scm, scn, (int)kg_bid_y() * MF_BM, \
                        (int)kg_bid_x() * MF_BN);                                            \
    }

KG_GROUPED_MFMA_ENTRY(kg_grouped_mfma_f16, kg_f16)
KG_GROUPED_MFMA_ENTRY(kg_grouped_mfma_bf16, kg_bf16)
KG_GROUPED_WGRAD_MFMA_ENTRY(kg_grouped_wgrad_mfma_f16, kg_f16)
KG_GROUPED_WGRAD_MFMA_ENTRY(kg_grouped_wgrad_mfma_bf16, kg_bf16)
#endif // KG_MFMA

// ===== Attention, portable path (fp16 and bf16) =====
//
// Varlen "THD" layout, contiguous: Q, O, dO, dQ are [Tq][Hq][Dh]; K, V, dK, dV
// are [Tk][Hkv][Dh]; LSE and Dsum are float [Tq][Hq].  cu_q, cu_k (B+1 ints)
// are prefix offsets: sequence b has queries [cu_q[b], cu_q[b+1]) and keys
// [cu_k[b], cu_k[b+1]); either count may be 0.  Query head h reads KV head
// h / (Hq/Hkv) (GQA, MQA).  1 <= Dh <= ATTN_DMAX, any value.
//   s_ij = scale * sum_d q_i[d] * k_j[d]   (fp32 accumulation, sequential in d)
// Causal: local query i (0-based in its sequence) sees local key j iff
// j <= i + Sk - Sq (bottom-right aligned); otherwise every key of the sequence.
// A query row that sees no key gets O = 0, LSE = -inf, dQ = 0, and adds nothing
// to dK, dV; no NaN arises anywhere.  Keys seen by no query get dK = dV = 0.
//
// Launch: ATTN_THREADS threads; grid.x = ceil(max_b length / 16), grid.y =
// heads (Hq; Hkv for dK/dV), grid.z = B.  Each block grid-strides over its
// sequence's tiles (ATTN_BM query rows, or ATTN_BN key rows for dK/dV), so the
// tile sizes are free of the launch.  Every loop bound is the same for the whole
// block, so every thread reaches every barrier.  Tiles sit in shared memory as
// the raw 16-bit values; fp32 accumulators live in registers: thread t owns
// rows (t / ATTN_LANES) + ATTN_RG*r and columns (t % ATTN_LANES) + ATTN_LANES*c
// of a tile x Dh block.  Every sum runs in a fixed order: deterministic, no
// atomics.  Each output element is written exactly once.

#ifndef ATTN_DMAX
#define ATTN_DMAX 256                    // largest head dimension
#endif
#ifndef ATTN_BM
#define ATTN_BM 16                       // query rows per tile
#endif
#ifndef ATTN_BN
#define ATTN_BN 16                       // key rows per tile
#endif
#define ATTN_THREADS 256
#define ATTN_RG 4                                            // row groups of the owner map
#define ATTN_LANES (ATTN_THREADS / ATTN_RG)                  // column lanes of the owner map
#define ATTN_DC ((ATTN_DMAX + ATTN_LANES - 1) / ATTN_LANES)  // columns per thread
#define ATTN_RM ((ATTN_BM + ATTN_RG - 1) / ATTN_RG)          // query rows per thread
#define ATTN_RN ((ATTN_BN + ATTN_RG - 1) / ATTN_RG)          // key rows per thread
#define ATTN_LD (ATTN_DMAX + 2)   // shared row stride in 16-bit elements: an odd word count

static_assert(ATTN_DMAX >= 1 && ATTN_BM >= 1 && ATTN_BN >= 1, "attention tile sizes");
static_assert(ATTN_BM <= ATTN_THREADS, "one thread per query row of a tile");
// The largest kernel (dK/dV, or dQ) keeps four 16-bit tiles and two fp32 tiles
// in static shared memory: it must fit the 48 KB every target gives a block.
static_assert(2 * (ATTN_BM + ATTN_BN) * ATTN_LD * 2 + 2 * ATTN_BM * ATTN_BN * 4 +
                  4 * ATTN_BM * 4 <= 48 * 1024,
              "attention shared memory over 48 KB: lower ATTN_BM, ATTN_BN or ATTN_DMAX");

// dst[r][d] = src[((row0 + r) * H + h) * Dh + d] for r < nrows, d < Dh; rows
// nrows <= r < R are zero.  Columns d >= Dh are left alone (never read).
__device__ static inline void kg_attn_load(kg_u16 (*dst)[ATTN_LD], const kg_u16 *src, int row0,
                                           int nrows, int R, int H, int h, int Dh)
{
    const int tid = (int)kg_tid();
    for (int e = tid; e < R * Dh; e += ATTN_THREADS) {
        int r = e / Dh, d = e % Dh;
        dst[r][d] = r < nrows ? src[((kg_i64)(row0 + r) * H + h) * Dh + d] : (kg_u16)0;
    }
}

// sum_{d < Dh} a[d] * b[d] in fp32, sequential in d.
template <class D>
__device__ static inline float kg_attn_dot(const kg_u16 *a, const kg_u16 *b, int Dh)
{
    float s = 0.0f;
    for (int d = 0; d < Dh; d++) s = kg_fma(D::ld(a[d]), D::ld(b[d]), s);
    return s;
}

// Forward: one tile of ATTN_BM query rows of head h of sequence b at a time,
// online softmax over key tiles of ATTN_BN (running max m, running sum l, the
// fp32 accumulator rescaled by exp(m_old - m_new)); P stays fp32.  At the end
// O = acc / l and LSE = m + log(l) (natural log of sum_j exp(s_ij)); a row that
// saw no key gets O = 0 and LSE = -inf.  Key tiles past the tile's causal limit
// are skipped.
template <class D>
__device__ static inline void kg_attn_fwd(const kg_u16 *Q, const kg_u16 *K, const kg_u16 *V,
                                          kg_u16 *O, float *LSE, const int *cu_q,
                                          const int *cu_k, int B, int Hq, int Hkv, int Dh,
                                          float scale, int causal)
{
    __shared__ kg_u16 qs[ATTN_BM][ATTN_LD];
    __shared__ kg_u16 ks[ATTN_BN][ATTN_LD];
    __shared__ kg_u16 vs[ATTN_BN][ATTN_LD];
    __shared__ float ps[ATTN_BM][ATTN_BN];   // scores, then probabilities
    __shared__ float m_s[ATTN_BM], l_s[ATTN_BM], a_s[ATTN_BM];
    const int tid = (int)kg_tid(), rg = tid / ATTN_LANES, lane = tid % ATTN_LANES;
    const int b = (int)kg_bid_z(), h = (int)kg_bid_y();
    if (b >= B || h >= Hq) return;   // the whole block leaves, before any barrier
    const int hk = h / (Hq / Hkv);
    const int q0 = cu_q[b], Sq = cu_q[b + 1] - q0, k0 = cu_k[b], Sk = cu_k[b + 1] - k0;
    const int diag = Sk - Sq;   // causal: local query i sees local key j iff j - i <= diag
    const float ninf = kg_neg_inf();

    for (unsigned t = kg_bid_x(); (kg_i64)t * ATTN_BM < Sq; t += kg_grid_x()) {
        const int i0 = (int)(t * ATTN_BM);
        const int rows = Sq - i0 < ATTN_BM ? Sq - i0 : ATTN_BM;
        // Keys [0, kend) hold every key a row of this tile may see.
        const kg_i64 ke = causal ? (kg_i64)i0 + rows + diag : (kg_i64)Sk;
        const int kend = ke < 0 ? 0 : (int)ke;
        kg_attn_load(qs, Q, q0 + i0, rows, ATTN_BM, Hq, h, Dh);
        if (tid < ATTN_BM) {
            m_s[tid] = ninf;
            l_s[tid] = 0.0f;
        }
        float acc[ATTN_DC][ATTN_RM];
        #pragma unroll
        for (int c = 0; c < ATTN_DC; c++) {
            #pragma unroll
            for (int r = 0; r < ATTN_RM; r++) acc[c][r] = 0.0f;
        }
        kg_sync();

        for (int j0 = 0; j0 < kend; j0 += ATTN_BN) {
            const int cols = Sk - j0 < ATTN_BN ? Sk - j0 : ATTN_BN;
            kg_attn_load(ks, K, k0 + j0, cols, ATTN_BN, Hkv, hk, Dh);
            kg_attn_load(vs, V, k0 + j0, cols, ATTN_BN, Hkv, hk, Dh);
            kg_sync();
            // Scores; -inf where the key is masked or outside the sequence.
            for (int e = tid; e < ATTN_BM * ATTN_BN; e += ATTN_THREADS) {
                int i = e / ATTN_BN, j = e % ATTN_BN;
                bool vis = i < rows && j < cols && (!causal || j0 + j - (i0 + i) <= diag);
                ps[i][j] = vis ? scale * kg_attn_dot<D>(qs[i], ks[j], Dh) : ninf;
            }
            kg_sync();
            // Online softmax, one thread per row.
            if (tid < ATTN_BM) {
                const int i = tid;
                const float mo = m_s[i];
                float mn = mo;
                for (int j = 0; j < ATTN_BN; j++) mn = ps[i][j] > mn ? ps[i][j] : mn;
                if (mn == ninf) {   // nothing seen yet: P = 0, acc stays 0
                    for (int j = 0; j < ATTN_BN; j++) ps[i][j] = 0.0f;
                    a_s[i] = 1.0f;
                } else {            // mn finite: exp(-inf - mn) = 0, never -inf - -inf
                    const float alpha = kg_exp(mo - mn);
                    float sum = 0.0f;
                    for (int j = 0; j < ATTN_BN; j++) {
                        float p = kg_exp(ps[i][j] - mn);
                        ps[i][j] = p;
                        sum += p;
                    }
                    l_s[i] = kg_fma(l_s[i], alpha, sum);
                    m_s[i] = mn;
                    a_s[i] = alpha;
                }
            }
            kg_sync();
            // acc = alpha * acc + P V
            #pragma unroll
            for (int c = 0; c < ATTN_DC; c++) {
                const int d = lane + ATTN_LANES * c;
                if (d >= Dh) continue;
                #pragma unroll
                for (int r = 0; r < ATTN_RM; r++) {
                    const int i = rg + ATTN_RG * r;
                    if (i < ATTN_BM) acc[c][r] *= a_s[i];
                }
                for (int j = 0; j < ATTN_BN; j++) {
                    const float v = D::ld(vs[j][d]);
                    #pragma unroll
                    for (int r = 0; r < ATTN_RM; r++) {
                        const int i = rg + ATTN_RG * r;
                        if (i < ATTN_BM) acc[c][r] = kg_fma(ps[i][j], v, acc[c][r]);
                    }
                }
            }
            kg_sync();
        }

        #pragma unroll
        for (int c = 0; c < ATTN_DC; c++) {
            const int d = lane + ATTN_LANES * c;
            #pragma unroll
            for (int r = 0; r < ATTN_RM; r++) {
                const int i = rg + ATTN_RG * r;
                if (i < rows && d < Dh) {
                    const float o = m_s[i] == ninf ? 0.0f : acc[c][r] / l_s[i];
                    O[((kg_i64)(q0 + i0 + i) * Hq + h) * Dh + d] = D::st(o);
                }
            }
        }
        if (tid < rows)
            LSE[(kg_i64)(q0 + i0 + tid) * Hq + h] =
                m_s[tid] == ninf ? ninf : m_s[tid] + kg_log(l_s[tid]);
        kg_sync();   // m_s, l_s and qs are rewritten by the next tile
    }
}

// Backward preprocessing: Dsum[t][h] = sum_d O[t][h][d] * dO[t][h][d] in fp32,
// sequential in d; one (t, h) per thread, grid-strided.  On NVIDIA, at head
// dims 32, 64, 128 and 256, by warps instead (kg_attn_pre_warps, below); at
// the others, by default (ATTN_PRE_STAGED=1; 0 keeps the plain loads; gfx942 always does, as
// its 34 KiB of LDS would leave one wave per SIMD), where rows are whole
// 16-byte granules (Dh % 8 == 0, O and dO 16-byte aligned), a block's
// ATTN_THREADS rows pass through shared memory ATTN_PRE_CHUNK columns at a
// time, read in coalesced 16-byte loads, the next chunk's in flight while
// this one is summed (the plain loads touch one row's 2 bytes in each of 32
// lines: over 4x the time, bench/HOPPER.md); each thread's fma chain keeps its
// order, so Dsum is bitwise the plain loads'.
#ifndef ATTN_PRE_STAGED
#define ATTN_PRE_STAGED 1
#endif
#define ATTN_PRE_CHUNK 32                       // columns staged at a time (a multiple of 8)
#define ATTN_PRE_W (ATTN_PRE_CHUNK / 2 + 1)     // 32-bit words a staged row: its pairs, one of pad (odd: no conflict)
#define ATTN_PRE_G (ATTN_PRE_CHUNK / 8)         // granules a row's chunk, and a thread's of each operand

struct __attribute__((aligned(16))) kg_u32x4 { unsigned x, y, z, w; };

// The granules thread tid stages for one chunk (columns [c0, c0 +
// ATTN_PRE_CHUNK)): its ATTN_PRE_G of O's and of dO's, rows tid / ATTN_PRE_G
// + j · (ATTN_THREADS / ATTN_PRE_G) of the block's, zeros past row n and
// column Dh.  Registers only: the loads stay in flight until kg_attn_pre_put.
// (Unused on gfx942, which keeps the plain loads.)
__device__ static inline __attribute__((unused)) void kg_attn_pre_fetch(const kg_u16 *O, const kg_u16 *dO, kg_i64 e0,
                                                                        kg_i64 n, int Dh, int c0, kg_u32x4 *vo,
                                                                        kg_u32x4 *vd)
{
    const int tid = (int)kg_tid(), col = c0 + tid % ATTN_PRE_G * 8;
    const kg_u32x4 zero = { 0, 0, 0, 0 };
#pragma unroll
    for (int j = 0; j < ATTN_PRE_G; j++) {
        const kg_i64 e = e0 + tid / ATTN_PRE_G + j * (ATTN_THREADS / ATTN_PRE_G);
        vo[j] = vd[j] = zero;
        if (e < n && col < Dh)
            vo[j] = *(const kg_u32x4 *)(O + e * Dh + col), vd[j] = *(const kg_u32x4 *)(dO + e * Dh + col);
    }
}

// kg_attn_pre_fetch's granules into the staging rows (ATTN_PRE_W words a row).
__device__ static inline __attribute__((unused)) void kg_attn_pre_put(const kg_u32x4 *vo, const kg_u32x4 *vd,
                                                                      unsigned (*st)[ATTN_THREADS * ATTN_PRE_W])
{
    const int tid = (int)kg_tid();
#pragma unroll
    for (int j = 0; j < ATTN_PRE_G; j++) {
        const int w = (tid / ATTN_PRE_G + j * (ATTN_THREADS / ATTN_PRE_G)) * ATTN_PRE_W + tid % ATTN_PRE_G * 4;
        unsigned *to = &st[0][w], *td = &st[1][w];
        to[0] = vo[j].x, to[1] = vo[j].y, to[2] = vo[j].z, to[3] = vo[j].w;
        td[0] = vd[j].x, td[1] = vd[j].y, td[2] = vd[j].z, td[3] = vd[j].w;
    }
}

// s plus the products of one 32-bit word of O's row and dO's (a pair of
// columns, the low one first), each fused into the sum in turn.
template <class D>
__device__ static inline float kg_attn_pre_pair(unsigned wo, unsigned wd, float s)
{
    s = kg_fma(D::ld((kg_u16)(wo & 0xffffu)), D::ld((kg_u16)(wd & 0xffffu)), s);
    return kg_fma(D::ld((kg_u16)(wo >> 16)), D::ld((kg_u16)(wd >> 16)), s);
}

// One block's rows [e0, e0 + ATTN_THREADS) of the staged Dsum: each chunk of
// columns is put into shared memory, the next chunk's loads are issued, and
// while they fly each thread adds its row's pairs in column order.
template <class D>
__device__ static inline float kg_attn_pre_rows(const kg_u16 *O, const kg_u16 *dO, kg_i64 e0, kg_i64 n, int Dh,
                                                unsigned (*st)[ATTN_THREADS * ATTN_PRE_W])
{
    const int tid = (int)kg_tid();
    kg_u32x4 vo[ATTN_PRE_G], vd[ATTN_PRE_G];
    kg_attn_pre_fetch(O, dO, e0, n, Dh, 0, vo, vd);
    float s = 0.0f;
    for (int c0 = 0; c0 < Dh; c0 += ATTN_PRE_CHUNK) {
        kg_attn_pre_put(vo, vd, st);
        kg_sync();
        if (c0 + ATTN_PRE_CHUNK < Dh) kg_attn_pre_fetch(O, dO, e0, n, Dh, c0 + ATTN_PRE_CHUNK, vo, vd);
        const int m = Dh - c0 < ATTN_PRE_CHUNK ? Dh - c0 : ATTN_PRE_CHUNK;   // even: Dh % 8 == 0
        for (int k = 0; k < m / 2; k++)   // columns c0 + 2k and c0 + 2k + 1
            s = kg_attn_pre_pair<D>(st[0][tid * ATTN_PRE_W + k], st[1][tid * ATTN_PRE_W + k], s);
        kg_sync();   // st is rewritten by the next chunk
    }
    return s;
}

// Dsum by warps (NVIDIA, ATTN_PRE_WARPS=1, the default, where Dh = 8·L with L
// = 4, 8, 16 or 32 and O and dO are 16-byte aligned): L lanes a row, one
// 16-byte granule of O and of dO each, 32 / L rows a warp's load and
// ATTN_PRE_U such loads of each operand in flight before any is summed;
// each lane adds its granule's 8 products in column order, then the row's
// L lanes add theirs by xor shuffles (halves, then quarters, ...).  A fixed
// order, not the plain loads' chain: Dsum's bits differ from theirs, and
// every run's are the same.
#ifndef ATTN_PRE_WARPS
#define ATTN_PRE_WARPS 1
#endif
#define ATTN_PRE_U 4   // a lane's granules of each operand in flight
#if defined(KG_CUDA)
template <class D, int L>
__device__ static inline __attribute__((unused)) void kg_attn_pre_warps(const kg_u16 *O, const kg_u16 *dO,
                                                                        float *Dsum, kg_i64 n)
{
    constexpr int R = 32 / L, WPB = ATTN_THREADS / 32;   // rows a warp's load; warps a block
    const int lane = (int)kg_tid() % 32, g = lane % L;
    const kg_i64 stride = (kg_i64)kg_grid_x() * WPB * R * ATTN_PRE_U;
    for (kg_i64 r0 = ((kg_i64)kg_bid_x() * WPB + (int)kg_tid() / 32) * R * ATTN_PRE_U; r0 < n; r0 += stride) {
        kg_u32x4 vo[ATTN_PRE_U], vd[ATTN_PRE_U];
#pragma unroll
        for (int u = 0; u < ATTN_PRE_U; u++) {
            const kg_i64 e = r0 + u * R + lane / L;
            vo[u] = vd[u] = kg_u32x4{ 0, 0, 0, 0 };
            if (e < n)
                vo[u] = *(const kg_u32x4 *)(O + e * (8 * L) + 8 * g), vd[u] = *(const kg_u32x4 *)(dO + e * (8 * L) + 8 * g);
        }
#pragma unroll
        for (int u = 0; u < ATTN_PRE_U; u++) {
            const unsigned wo[4] = { vo[u].x, vo[u].y, vo[u].z, vo[u].w }, wd[4] = { vd[u].x, vd[u].y, vd[u].z, vd[u].w };
            float s = 0.0f;
#pragma unroll
            for (int k = 0; k < 4; k++) s = kg_attn_pre_pair<D>(wo[k], wd[k], s);
#pragma unroll
            for (int off = L / 2; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
            const kg_i64 e = r0 + u * R + lane / L;
            if (g == 0 && e < n) Dsum[e] = s;
        }
    }
}
#endif

template <class D>
__device__ static inline void kg_attn_bwd_pre(const kg_u16 *O, const kg_u16 *dO, float *Dsum,
                                              int Tq, int Hq, int Dh)
{
    const kg_i64 n = (kg_i64)Tq * Hq, stride = (kg_i64)kg_grid_x() * ATTN_THREADS;
#if defined(KG_CUDA)
    const bool granules = Dh % 8 == 0 && ((unsigned long long)O | (unsigned long long)dO) % 16 == 0;   // the same in every thread
#endif
#if ATTN_PRE_WARPS && defined(KG_CUDA)
    if (granules) {
        switch (Dh) {
        case 32: kg_attn_pre_warps<D, 4>(O, dO, Dsum, n); return;
        case 64: kg_attn_pre_warps<D, 8>(O, dO, Dsum, n); return;
        case 128: kg_attn_pre_warps<D, 16>(O, dO, Dsum, n); return;
        case 256: kg_attn_pre_warps<D, 32>(O, dO, Dsum, n); return;
        default: break;
        }
    }
#endif
#if ATTN_PRE_STAGED && defined(KG_CUDA)
    __shared__ unsigned st[2][ATTN_THREADS * ATTN_PRE_W];
    if (granules) {
        for (kg_i64 e0 = (kg_i64)kg_bid_x() * ATTN_THREADS; e0 < n; e0 += stride) {
            float s = kg_attn_pre_rows<D>(O, dO, e0, n, Dh, st);
            if (e0 + kg_tid() < n) Dsum[e0 + kg_tid()] = s;
        }
        return;
    }
#endif
    for (kg_i64 e = (kg_i64)kg_bid_x() * ATTN_THREADS + kg_tid(); e < n; e += stride)
        Dsum[e] = kg_attn_dot<D>(O + e * Dh, dO + e * Dh, Dh);
}

// The backward's probabilities for query row i (tile row) and key j (tile row):
//   p = exp(s - LSE_i), dp = dO_i . V_j, ds = p * (dp - Dsum_i),
// both 0 where the key is not visible or LSE_i = -inf.  ps[i][j] = p, dss[i][j] = ds
// for every (i, j) of the ATTN_BM x ATTN_BN tile.
template <class D>
__device__ static inline void kg_attn_bwd_probs(const kg_u16 (*qs)[ATTN_LD],
                                                const kg_u16 (*dos)[ATTN_LD],
                                                const kg_u16 (*ks)[ATTN_LD],
                                                const kg_u16 (*vs)[ATTN_LD], const float *lse_s,
                                                const float *dsum_s, float (*ps)[ATTN_BN],
                                                float (*dss)[ATTN_BN], int i0, int rows, int j0,
                                                int cols, int diag, int causal, int Dh,
                                                float scale)
{
    const float ninf = kg_neg_inf();
    for (int e = (int)kg_tid(); e < ATTN_BM * ATTN_BN; e += ATTN_THREADS) {
        int i = e / ATTN_BN, j = e % ATTN_BN;
        bool vis = i < rows && j < cols && (!causal || j0 + j - (i0 + i) <= diag) &&
                   lse_s[i] != ninf;
        float p = 0.0f, ds = 0.0f;
        if (vis) {
            p = kg_exp(scale * kg_attn_dot<D>(qs[i], ks[j], Dh) - lse_s[i]);
            ds = p * (kg_attn_dot<D>(dos[i], vs[j], Dh) - dsum_s[i]);
        }
        ps[i][j] = p;
        dss[i][j] = ds;
    }
}

// Loads query rows [i0, i0+rows) of head h (Q and dO tiles, LSE, Dsum; rows past
// `rows` get LSE = -inf so they see nothing).
__device__ static inline void kg_attn_load_qrows(kg_u16 (*qs)[ATTN_LD], kg_u16 (*dos)[ATTN_LD],
                                                 float *lse_s, float *dsum_s, const kg_u16 *Q,
                                                 const kg_u16 *dO, const float *LSE,
                                                 const float *Dsum, int row0, int rows, int Hq,
                                                 int h, int Dh)
{
    const int tid = (int)kg_tid();
    kg_attn_load(qs, Q, row0, rows, ATTN_BM, Hq, h, Dh);
    kg_attn_load(dos, dO, row0, rows, ATTN_BM, Hq, h, Dh);
    if (tid < ATTN_BM) {
        lse_s[tid] = tid < rows ? LSE[(kg_i64)(row0 + tid) * Hq + h] : kg_neg_inf();
        dsum_s[tid] = tid < rows ? Dsum[(kg_i64)(row0 + tid) * Hq + h] : 0.0f;
    }
}

// dK, dV: one tile of ATTN_BN keys of KV head hk of sequence b at a time; for
// every query head of hk's group and every query tile that can see a key of the
// tile: dV_j += sum_i p_ij dO_i, dK_j += sum_i ds_ij Q_i (fp32 registers, in a
// fixed order: heads, then query rows ascending).  dK = scale * that sum.
template <class D>
__device__ static inline void kg_attn_bwd_dkdv(const kg_u16 *Q, const kg_u16 *K, const kg_u16 *V,
                                               const kg_u16 *dO, const float *LSE,
                                               const float *Dsum, kg_u16 *dK, kg_u16 *dV,
                                               const int *cu_q, const int *cu_k, int B, int Hq,
                                               int Hkv, int Dh, float scale, int causal)
{
    __shared__ kg_u16 qs[ATTN_BM][ATTN_LD];
    __shared__ kg_u16 dos[ATTN_BM][ATTN_LD];
    __shared__ kg_u16 ks[ATTN_BN][ATTN_LD];
    __shared__ kg_u16 vs[ATTN_BN][ATTN_LD];
    __shared__ float ps[ATTN_BM][ATTN_BN];
    __shared__ float dss[ATTN_BM][ATTN_BN];
    __shared__ float lse_s[ATTN_BM], dsum_s[ATTN_BM];
    const int tid = (int)kg_tid(), rg = tid / ATTN_LANES, lane = tid % ATTN_LANES;
    const int b = (int)kg_bid_z(), hk = (int)kg_bid_y();
    if (b >= B || hk >= Hkv) return;   // the whole block leaves, before any barrier
    const int G = Hq / Hkv;
    const int q0 = cu_q[b], Sq = cu_q[b + 1] - q0, k0 = cu_k[b], Sk = cu_k[b + 1] - k0;
    const int diag = Sk - Sq;

    for (unsigned t = kg_bid_x(); (kg_i64)t * ATTN_BN < Sk; t += kg_grid_x()) {
        const int j0 = (int)(t * ATTN_BN);
        const int cols = Sk - j0 < ATTN_BN ? Sk - j0 : ATTN_BN;
        // Causal: query i sees key j0 (the tile's first) iff i >= j0 - diag.
        const kg_i64 qs0 = causal ? (kg_i64)j0 - diag : 0;
        const int istart = qs0 < 0 ? 0 : qs0 > Sq ? Sq : (int)qs0;
        kg_attn_load(ks, K, k0 + j0, cols, ATTN_BN, Hkv, hk, Dh);
        kg_attn_load(vs, V, k0 + j0, cols, ATTN_BN, Hkv, hk, Dh);
        float dk[ATTN_DC][ATTN_RN], dv[ATTN_DC][ATTN_RN];
        #pragma unroll
        for (int c = 0; c < ATTN_DC; c++) {
            #pragma unroll
            for (int r = 0; r < ATTN_RN; r++) dk[c][r] = dv[c][r] = 0.0f;
        }

        for (int h = hk * G; h < hk * G + G; h++) {
            for (int i0 = istart; i0 < Sq; i0 += ATTN_BM) {
                const int rows = Sq - i0 < ATTN_BM ? Sq - i0 : ATTN_BM;
                kg_attn_load_qrows(qs, dos, lse_s, dsum_s, Q, dO, LSE, Dsum, q0 + i0, rows, Hq,
                                   h, Dh);
                kg_sync();
                kg_attn_bwd_probs<D>(qs, dos, ks, vs, lse_s, dsum_s, ps, dss, i0, rows, j0, cols,
                                     diag, causal, Dh, scale);
                kg_sync();
                for (int i = 0; i < ATTN_BM; i++) {
                    float p[ATTN_RN], ds[ATTN_RN];
                    #pragma unroll
                    for (int r = 0; r < ATTN_RN; r++) {
                        const int j = rg + ATTN_RG * r;
                        p[r] = j < ATTN_BN ? ps[i][j] : 0.0f;
                        ds[r] = j < ATTN_BN ? dss[i][j] : 0.0f;
                    }
                    #pragma unroll
                    for (int c = 0; c < ATTN_DC; c++) {
                        const int d = lane + ATTN_LANES * c;
                        if (d >= Dh) continue;
                        const float qv = D::ld(qs[i][d]), dov = D::ld(dos[i][d]);
                        #pragma unroll
                        for (int r = 0; r < ATTN_RN; r++) {
                            dv[c][r] = kg_fma(p[r], dov, dv[c][r]);
                            dk[c][r] = kg_fma(ds[r], qv, dk[c][r]);
                        }
                    }
                }
                kg_sync();   // qs, dos, ps, dss are rewritten by the next query tile
            }
        }

        #pragma unroll
        for (int c = 0; c < ATTN_DC; c++) {
            const int d = lane + ATTN_LANES * c;
            #pragma unroll
            for (int r = 0; r < ATTN_RN; r++) {
                const int j = rg + ATTN_RG * r;
                if (j < cols && d < Dh) {
                    const kg_i64 o = ((kg_i64)(k0 + j0 + j) * Hkv + hk) * Dh + d;
                    dK[o] = D::st(scale * dk[c][r]);
                    dV[o] = D::st(dv[c][r]);
                }
            }
        }
        kg_sync();   // ks, vs are rewritten by the next key tile
    }
}

// dQ: one tile of ATTN_BM query rows of head h of sequence b at a time;
// dQ_i = scale * sum_j ds_ij K_j over the visible keys, key tiles ascending,
// key tiles past the tile's causal limit skipped.  Rows that see no key get 0.
template <class D>
__device__ static inline void kg_attn_bwd_dq(const kg_u16 *Q, const kg_u16 *K, const kg_u16 *V,
                                             const kg_u16 *dO, const float *LSE,
                                             const float *Dsum, kg_u16 *dQ, const int *cu_q,
                                             const int *cu_k, int B, int Hq, int Hkv, int Dh,
                                             float scale, int causal)
{
    __shared__ kg_u16 qs[ATTN_BM][ATTN_LD];
    __shared__ kg_u16 dos[ATTN_BM][ATTN_LD];
    __shared__ kg_u16 ks[ATTN_BN][ATTN_LD];
    __shared__ kg_u16 vs[ATTN_BN][ATTN_LD];
    __shared__ float ps[ATTN_BM][ATTN_BN];
    __shared__ float dss[ATTN_BM][ATTN_BN];
    __shared__ float lse_s[ATTN_BM], dsum_s[ATTN_BM];
    const int tid = (int)kg_tid(), rg = tid / ATTN_LANES, lane = tid % ATTN_LANES;
    const int b = (int)kg_bid_z(), h = (int)kg_bid_y();
    if (b >= B || h >= Hq) return;   // the whole block leaves, before any barrier
    const int hk = h / (Hq / Hkv);
    const int q0 = cu_q[b], Sq = cu_q[b + 1] - q0, k0 = cu_k[b], Sk = cu_k[b + 1] - k0;
    const int diag = Sk - Sq;

    for (unsigned t = kg_bid_x(); (kg_i64)t * ATTN_BM < Sq; t += kg_grid_x()) {
        const int i0 = (int)(t * ATTN_BM);
        const int rows = Sq - i0 < ATTN_BM ? Sq - i0 : ATTN_BM;
        const kg_i64 ke = causal ? (kg_i64)i0 + rows + diag : (kg_i64)Sk;
        const int kend = ke < 0 ? 0 : (int)ke;
        kg_attn_load_qrows(qs, dos, lse_s, dsum_s, Q, dO, LSE, Dsum, q0 + i0, rows, Hq, h, Dh);
        float acc[ATTN_DC][ATTN_RM];
        #pragma unroll
        for (int c = 0; c < ATTN_DC; c++) {
            #pragma unroll
            for (int r = 0; r < ATTN_RM; r++) acc[c][r] = 0.0f;
        }
        kg_sync();

        for (int j0 = 0; j0 < kend; j0 += ATTN_BN) {
            const int cols = Sk - j0 < ATTN_BN ? Sk - j0 : ATTN_BN;
            kg_attn_load(ks, K, k0 + j0, cols, ATTN_BN, Hkv, hk, Dh);
            kg_attn_load(vs, V, k0 + j0, cols, ATTN_BN, Hkv, hk, Dh);
            kg_sync();
            kg_attn_bwd_probs<D>(qs, dos, ks, vs, lse_s, dsum_s, ps, dss, i0, rows, j0, cols, diag,
                                 causal, Dh, scale);
            kg_sync();
            #pragma unroll
            for (int c = 0; c < ATTN_DC; c++) {
                const int d = lane + ATTN_LANES * c;
                if (d >= Dh) continue;
                for (int j = 0; j < ATTN_BN; j++) {
                    const float kv = D::ld(ks[j][d]);
                    #pragma unroll
                    for (int r = 0; r < ATTN_RM; r++) {
                        const int i = rg + ATTN_RG * r;
                        if (i < ATTN_BM) acc[c][r] = kg_fma(dss[i][j], kv, acc[c][r]);
                    }
                }
            }
            kg_sync();   // ks, vs, ps, dss are rewritten by the next key tile
        }

        #pragma unroll
        for (int c = 0; c < ATTN_DC; c++) {
            const int d = lane + ATTN_LANES * c;
            #pragma unroll
            for (int r = 0; r < ATTN_RM; r++) {
                const int i = rg + ATTN_RG * r;
                if (i < rows && d < Dh)
                    dQ[((kg_i64)(q0 + i0 + i) * Hq + h) * Dh + d] = D::st(scale * acc[c][r]);
            }
        }
        kg_sync();   // qs, dos, lse_s, dsum_s are rewritten by the next query tile
    }
}

#define KG_ATTN_ENTRIES(sfx, D)                                                                \
    KG_ATOMICS(kg_attn_fwd_##sfx, 0)                                                           \
    KG_ATOMICS(kg_attn_bwd_pre_##sfx, 0)                                                       \
    KG_ATOMICS(kg_attn_bwd_dkdv_##sfx, 0)                                                      \
    KG_ATOMICS(kg_attn_bwd_dq_##sfx, 0)                                                        \
    extern "C" __global__ void KG_LAUNCH_BOUNDS(ATTN_THREADS)                                 \
    kg_attn_fwd_##sfx(const D::S *Q, const D::S *K, const D::S *V, D::S *O, float *LSE,        \
                      const int *cu_q, const int *cu_k, int B, int Hq, int Hkv, int Dh,        \
                      float scale, int causal)                                                 \
    {                                                                                          \
        kg_attn_fwd<D>(Q, K, V, O, LSE, cu_q, cu_k, B, Hq, Hkv, Dh, scale, causal);            \
    }                                                                                          \
    extern "C" __global__ void KG_LAUNCH_BOUNDS(ATTN_THREADS)                                 \
    kg_attn_bwd_pre_##sfx(const D::S *O, const D::S *dO, float *Dsum, int Tq, int Hq, int Dh)  \
    {                                                                                          \
        kg_attn_bwd_pre<D>(O, dO, Dsum, Tq, Hq, Dh);                                           \
    }                                                                                          \
    extern "C" __global__ void KG_LAUNCH_BOUNDS(ATTN_THREADS)                                 \
    kg_attn_bwd_dkdv_##sfx(const D::S *Q, const D::S *K, const D::S *V, const D::S *dO,        \
                           const float *LSE, const float *Dsum, D::S *dK, D::S *dV,            \
                           const int *cu_q, const int *cu_k, int B, int Hq, int Hkv, int Dh,   \
                           float scale, int causal)                                            \
    {                                                                                          \
        kg_attn_bwd_dkdv<D>(Q, K, V, dO, LSE, Dsum, dK, dV, cu_q, cu_k, B, Hq, Hkv, Dh, scale, \
                            causal);                                                           \
    }                                                                                          \
    extern "C" __global__ void KG_LAUNCH_BOUNDS(ATTN_THREADS)                                 \
    kg_attn_bwd_dq_##sfx(const D::S *Q, const D::S *K, const D::S *V, const D::S *dO,          \
                         const float *LSE, const float *Dsum, D::S *dQ, const int *cu_q,       \
                         const int *cu_k, int B, int Hq, int Hkv, int Dh, float scale,         \
                         int causal)                                                           \
    {                                                                                          \
        kg_attn_bwd_dq<D>(Q, K, V, dO, LSE, Dsum, dQ, cu_q, cu_k, B, Hq, Hkv, Dh, scale,       \
                          causal);                                                             \
    }

KG_ATTN_ENTRIES(f16, kg_f16)
KG_ATTN_ENTRIES(bf16, kg_bf16)

// ===== Attention forward, CDNA3 path (gfx942): MFMA =====
//
// kg_attn_fwd_mfma_{f16,bf16}: kg_attn_fwd_<dt>'s forward, arguments and
// contract ("Attention, portable path") for head dims up to MFA_DMAX, on
// v_mfma_f32_32x32x8_{f16,bf16} with fp32 accumulation:
//   - Grid (ceil(longest Sq / MFA_BM), Hq, B), 256 threads: four waves,
//     wave w owning query rows 32w .. 32w + 31 of a tile of MFA_BM; blocks
//     grid-stride over their sequence's tiles.  Q's fragments stay in
//     registers for the whole tile.
//   - Per key tile of MFA_BN keys: K's tile [key][d] and V's transposed
//     [d][key] into LDS (zeros past Dh and past the sequence's keys); each
//     wave's S (32 x 32) = Q K^T on MFMA; scaled, and -inf where the key is
//     masked or past Sk; the online softmax per row: a row's 32 scores lie
//     in one half-wave, in the same accumulator of each of its lanes
//     (kg_mf_d_row), so its max and its sum are xor shuffles over 16, 8, 4,
//     2, 1; P, rounded to the input's 16-bit type, through LDS into MFMA A
//     fragments; O (32 x Dh: up to four 32 x 32 blocks) += P V.
//   - The end: O = acc / l, LSE = m + log(l); a row that saw no key gets O =
//     0 and LSE = -inf.  Every sum in a fixed order: deterministic, no
//     atomics.
// P is rounded to 16 bits before P V, as the sm_90a forward's wgmma takes
// it; the row sums l keep the fp32 p.  Key tiles past a query tile's causal
// limit are skipped.  The index functions between the kgate-index marks
// are checked on the CPU with the GEMM's (.ci/mfma_check.c).

#if defined(KG_MFMA)
// >>> kgate-index (plain C)
#define MFA_BM 128
#define MFA_BN 32
#define MFA_DMAX 128
#define MFA_KLD (MFA_DMAX + 4)   // K's LDS rows, 16-bit elements: 264 bytes apart
#define MFA_VLD (MFA_BN + 4)     // V^T's and P's LDS rows: 72 bytes apart
// LDS: K's tile at key j, element d; V^T's at element d, key j; P's at the
// tile's query row r, key j.
KG_IX int kg_mfa_ks(int j, int d) { return j * MFA_KLD + d; }
KG_IX int kg_mfa_vt(int d, int j) { return d * MFA_VLD + j; }
KG_IX int kg_mfa_ps(int r, int j) { return r * MFA_VLD + j; }
// Thread t's load e (e < 16) of a key tile (MFA_BN keys x MFA_DMAX): its key
// and element, the element fastest (consecutive threads, consecutive bytes).
KG_IX int kg_mfa_load_key(int t, int e) { return (t + MF_THREADS * e) / MFA_DMAX; }
KG_IX int kg_mfa_load_d(int t, int e) { return (t + MF_THREADS * e) % MFA_DMAX; }
// Round s (s < 5) of a row's reduction: lane l with lane l ^ kg_mfa_xor(s).
KG_IX int kg_mfa_xor(int s) { return 16 >> s; }
// <<< kgate-index

// v of lane l ^ m (within the wave).
__device__ static inline float kg_mfa_xor_get(float v, int l, int m) {
    return kg_f32_from_bits((unsigned)__builtin_amdgcn_ds_bpermute(4 * (l ^ m), (int)kg_bits_from_f32(v)));
}

// The four 16-bit elements d .. d+3 of row `row` (of `rows`) of a [T][H][Dh]
// tensor at head h, zeros past rows or Dh, as one 8-byte fragment.
__device__ static inline unsigned long long kg_mfa_frag(const kg_u16 *P, int row, int rows, int H, int h, int Dh, int d) {
    unsigned long long f = 0;
    if (row >= rows) return 0;
    const kg_u16 *p = P + ((kg_i64)row * H + h) * Dh;
#pragma unroll
    for (int i = 0; i < 4; i++) f |= (unsigned long long)(d + i < Dh ? p[d + i] : 0u) << (16 * i);
    return f;
}

template <class D>
__device__ static inline void kg_attn_fwd_mfma(const kg_u16 *Q, const kg_u16 *K, const kg_u16 *V, kg_u16 *O,
                                               float *LSE, const int *cu_q, const int *cu_k, int B, int Hq, int Hkv,
                                               int Dh, float scale, int causal) {
    __shared__ __attribute__((aligned(16))) kg_u16 ks[MFA_BN * MFA_KLD], vt[MFA_DMAX * MFA_VLD],
        ps[MFA_BM * MFA_VLD];
    const int t = (int)kg_tid(), w = t / 64, l = t % 64, b = (int)kg_bid_z(), h = (int)kg_bid_y();
    if (b >= B || h >= Hq || Dh > MFA_DMAX) return;   // the whole block leaves, before any barrier
    const int hk = h / (Hq / Hkv), q0 = cu_q[b], Sq = cu_q[b + 1] - q0, k0 = cu_k[b], Sk = cu_k[b + 1] - k0;
    const int diag = Sk - Sq;   // causal: local query i sees local key j iff j - i <= diag
    const float ninf = kg_neg_inf();
    for (unsigned tile = kg_bid_x(); (kg_i64)tile * MFA_BM < Sq; tile += kg_grid_x()) {
        const int i0 = (int)(tile * MFA_BM), rows = Sq - i0 < MFA_BM ? Sq - i0 : MFA_BM;
        const kg_i64 ke = causal ? (kg_i64)i0 + rows + diag : (kg_i64)Sk;   // keys [0, kend) hold every key seen
        const int kend = ke < 0 ? 0 : (int)ke;
        unsigned long long qf[MFA_DMAX / 8];   // this lane's Q fragments, d in steps of 8
#pragma unroll
        for (int s = 0; s < MFA_DMAX / 8; s++)
            qf[s] = kg_mfa_frag(Q + (kg_i64)q0 * Hq * Dh, i0 + 32 * w + kg_mf_ab_rc(l), Sq, Hq, h, Dh,
                                8 * s + kg_mf_ab_k(l, 0));
        kg_mf_acc o[MFA_DMAX / 32];
        float m[16], lsum[16];
#pragma unroll
        for (int i = 0; i < 16; i++) {
            m[i] = ninf, lsum[i] = 0.0f;
#pragma unroll
            for (int ob = 0; ob < MFA_DMAX / 32; ob++) o[ob][i] = 0.0f;
        }
        for (int j0 = 0; j0 < kend; j0 += MFA_BN) {
#pragma unroll
            for (int e = 0; e < MFA_BN * MFA_DMAX / MF_THREADS; e++) {
                const int j = kg_mfa_load_key(t, e), d = kg_mfa_load_d(t, e);
                const bool in = j0 + j < Sk && d < Dh;
                const kg_i64 at = ((kg_i64)(k0 + j0 + j) * Hkv + hk) * Dh + d;
                ks[kg_mfa_ks(j, d)] = in ? K[at] : (kg_u16)0;
                vt[kg_mfa_vt(d, j)] = in ? V[at] : (kg_u16)0;
            }
            kg_sync();
            kg_mf_acc sc;
#pragma unroll
            for (int i = 0; i < 16; i++) sc[i] = 0.0f;
#pragma unroll
            for (int s = 0; s < MFA_DMAX / 8; s++)
                if (8 * s < Dh)
                    sc = kg_mf_mma(qf[s], *(const unsigned long long *)(ks + kg_mfa_ks(kg_mf_ab_rc(l), 8 * s + kg_mf_ab_k(l, 0))),
                                   sc, D());
#pragma unroll
            for (int i = 0; i < 16; i++) {
                const int r = 32 * w + kg_mf_d_row(l, i), qi = i0 + r, kj = j0 + kg_mf_d_col(l);
                const bool vis = qi < Sq && kj < Sk && (!causal || kj - qi <= diag);
                const float sv = vis ? scale * sc[i] : ninf;
                float mx = sv;
#pragma unroll
                for (int s = 0; s < 5; s++) {
                    const float y = kg_mfa_xor_get(mx, l, kg_mfa_xor(s));
                    mx = y > mx ? y : mx;
                }
                const float mn = mx > m[i] ? mx : m[i];
                float p = 0.0f, alpha = 1.0f;
                if (mn != ninf) alpha = kg_exp(m[i] - mn), p = kg_exp(sv - mn);   // exp(-inf - mn) = 0
                float sum = p;
#pragma unroll
                for (int s = 0; s < 5; s++) sum += kg_mfa_xor_get(sum, l, kg_mfa_xor(s));
                lsum[i] = kg_fma(lsum[i], alpha, sum);
                m[i] = mn;
#pragma unroll
                for (int ob = 0; ob < MFA_DMAX / 32; ob++) o[ob][i] *= alpha;
                ps[kg_mfa_ps(r, kg_mf_d_col(l))] = D::st(p);
            }
            kg_sync();
#pragma unroll
            for (int ob = 0; ob < MFA_DMAX / 32; ob++) {
                if (32 * ob >= Dh) continue;
#pragma unroll
                for (int kk = 0; kk < MFA_BN; kk += 8) {
                    const unsigned long long pa = *(const unsigned long long *)(ps + kg_mfa_ps(32 * w + kg_mf_ab_rc(l), kk + kg_mf_ab_k(l, 0)));
                    const unsigned long long vb = *(const unsigned long long *)(vt + kg_mfa_vt(32 * ob + kg_mf_ab_rc(l), kk + kg_mf_ab_k(l, 0)));
                    o[ob] = kg_mf_mma(pa, vb, o[ob], D());
                }
            }
            kg_sync();   // ks, vt and ps are rewritten by the next key tile
        }
#pragma unroll
        for (int i = 0; i < 16; i++) {
            const int qi = i0 + 32 * w + kg_mf_d_row(l, i);
            if (qi >= Sq) continue;
            const kg_i64 row = (kg_i64)(q0 + qi) * Hq + h;
#pragma unroll
            for (int ob = 0; ob < MFA_DMAX / 32; ob++) {
                const int d = 32 * ob + kg_mf_d_col(l);
                if (d < Dh) O[row * Dh + d] = D::st(m[i] == ninf ? 0.0f : o[ob][i] / lsum[i]);
            }
            if (kg_mf_d_col(l) == 0) LSE[row] = m[i] == ninf ? ninf : m[i] + kg_log(lsum[i]);
        }
    }
}

// The head dims kg_attn_fwd_mfma_<dt> takes (1 .. this); nonzero says
// the entries exist (gfx942 builds).
extern "C" __device__ int kg_attn_fwd_mfma_dmax = MFA_DMAX;

#define KG_ATTN_MFMA_ENTRY(sfx, D)                                                              \
    KG_ATOMICS(kg_attn_fwd_mfma_##sfx, 0)                                                      \
    extern "C" __global__ void KG_LAUNCH_BOUNDS(MF_THREADS)                                   \
    kg_attn_fwd_mfma_##sfx(const D::S *Q, const D::S *K, const D::S *V, D::S *O, float *LSE,   \
                           const int *cu_q, const int *cu_k, int B, int Hq, int Hkv, int Dh,   \
                           float scale, int causal)                                            \
    {                                                                                          \
        kg_attn_fwd_mfma<D>(Q, K, V, O, LSE, cu_q, cu_k, B, Hq, Hkv, Dh, scale, causal);       \
    }

KG_ATTN_MFMA_ENTRY(f16, kg_f16)
KG_ATTN_MFMA_ENTRY(bf16, kg_bf16)
#endif // KG_MFMA

// ===== Attention forward, Hopper path (sm_90a): wgmma, TMA, warp specialisation =====
//
// kg_attn_fwd_sm90_d{64,128,256}_{f16,bf16}: the forward of kg_attn_fwd_<dt>
// (same layout, causal mask, GQA, varlen, LSE, empty rows) for head dims Dh
// up to D whose rows TMA can read (Dh a multiple of 8: rows of a multiple of
// 16 bytes).  Columns Dh .. D-1 of Q, K and V are zero-filled by TMA, so
// they add nothing to S, and are never stored.  Launch: grid (ceil(longest
// Sq / 128), Hq, B), 384 threads, kg_attn_sm90_smem_d<D> bytes of dynamic
// shared memory; three tensor maps (kgate builds them: Q as [Tq][Hq][Dh],
// K and V as [Tk][Hkv][Dh], boxes of 64 elements x 1 head x FA_BM query or
// FA_BN(D) key rows, 128-byte swizzle).
//   - Block: 128 query rows of one head of one sequence.  Causal: the
//     blocks run in reverse (the longest tiles first) and stop at the last
//     key block any row of the tile sees.
//   - Warpgroup 0 produces (one thread): Q once, then K and V blocks of
//     FA_BN(D) keys into a ring of FA_NST(D) stages; K and V each have their
//     own full barriers, so that S = Q·K^T starts before V lands, and at
//     head dims up to FA_SPLIT_MAXD their own empty barriers, so that a
//     block's K is refilled as soon as its scores are done (otherwise K and
//     V are freed together, after P·V).  Warpgroups 1 and 2 consume: 64
//     query rows each.  setmaxnreg moves registers from the producer (24)
//     to the consumers (240).
//   - A consumer, per key block: S = Q·K^T on wgmma (A and B from shared
//     memory, K-major); the mask (only on blocks that need it: the
//     sequence's end, the causal diagonal); the online softmax in the exp2
//     domain with the scale folded in (p = 2^(s·scale·log2e - m)), rows
//     reduced across the 4 lanes of a quad; O rescaled; P rounded to the
//     input type and fed from registers as the A operand of O += P·V (V in
//     shared memory, MN-major: the transposed B of wgmma).  FA_OVERLAP (1 as
//     shipped): block j's scores and softmax run while block j-1's P·V is on
//     the tensor cores (with K and V freed together it wanted 3 stages: at 2
//     it measured slower than no overlap; with K freed early, 2 stages are
//     as fast as 3); FA_PINGPONG: the two consumers take turns at issuing
//     their products (named barriers), one's softmax under the other's.
//   - Epilogue: O / l and LSE = m·ln2 + log(l) (natural log); a row that
//     sees no key keeps m = -inf, l = 0: O = 0, LSE = -inf.
//   - No atomics; every sum in a fixed order (deterministic).
// Techniques from FlashAttention-3 (Shah et al., arXiv 2407.08608).

#if defined(KG_SM90)
#ifndef FA_STAGES
#define FA_STAGES 2                       // K/V ring depth at head dims 64 and 128 (256: always 2)
#endif
#ifndef FA_OVERLAP
#define FA_OVERLAP 1                      // 1: block j's softmax under block j-1's P·V; 0: one after the other
#endif
#ifndef FA_SPLIT_MAXD
#define FA_SPLIT_MAXD 256                 // head dims up to this free a block's K as soon as its scores are done
#endif
#ifndef FA_PINGPONG
#define FA_PINGPONG 0                     // 1 (with FA_OVERLAP): the consumer warpgroups take turns at issuing
#endif
#if FA_PINGPONG && !FA_OVERLAP
#error "FA_PINGPONG needs FA_OVERLAP"
#endif
#define FA_BM 128                         // query rows per block: 2 consumer warpgroups x 64
#define FA_BN(D) ((D) == 256 ? 64 : 128)  // keys per block: S and O both in registers
#define FA_Q_BYTES(D) (FA_BM * (D) * 2)
#define FA_KV_BYTES(D) (FA_BN(D) * (D) * 2)
// Dynamic shared memory: Q, the K and V stages, 1 KiB to align them to the
// swizzle pattern, the barriers (Q's, then full K, full V, empty V, empty K
// per stage).
#define FA_NST(D) ((D) == 256 ? 2 : FA_STAGES)   // stages: 3 of 256 would need 257 KiB
#define FA_SMEM(D) (FA_Q_BYTES(D) + 2 * FA_NST(D) * FA_KV_BYTES(D) + 1024 + 8 * (1 + 4 * FA_NST(D)))
extern "C" __device__ int kg_attn_sm90_smem_d64 = FA_SMEM(64);
extern "C" __device__ int kg_attn_sm90_smem_d128 = FA_SMEM(128);
extern "C" __device__ int kg_attn_sm90_smem_d256 = FA_SMEM(256);


// d += A·B for one k16 step (scale-d a predicate set from 1), A (64 x 16) from registers (a[4]: the
// m16n8k16 A fragment of this warp's 16 rows), B from shared memory,
// MN-major (transposed).
#define KG_WG_MMA_RS(fname, N, T, DLIST, DOPS, I0, I1, I2, I3, IB, IS)                              \
    __device__ static inline void fname(float *d, const unsigned *a, unsigned long long b) {        \
        asm volatile("{ .reg .pred p; setp.ne.b32 p, %" IS ", 0;\n"                                 \
                     "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." T "." T " {" DLIST "}, "    \
                     "{%" I0 ", %" I1 ", %" I2 ", %" I3 "}, %" IB ", p, 1, 1, 1; }"                  \
                     : DOPS : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));          \
    }
KG_WG_MMA_RS(kg_wgmma_rs_n64_bf16, 64, "bf16", KG_WG_D32, KG_WG_F32(d), "32", "33", "34", "35", "36", "37")
KG_WG_MMA_RS(kg_wgmma_rs_n64_f16, 64, "f16", KG_WG_D32, KG_WG_F32(d), "32", "33", "34", "35", "36", "37")
KG_WG_MMA_RS(kg_wgmma_rs_n128_bf16, 128, "bf16", KG_WG_D64, KG_WG_F64(d), "64", "65", "66", "67", "68", "69")
KG_WG_MMA_RS(kg_wgmma_rs_n128_f16, 128, "f16", KG_WG_D64, KG_WG_F64(d), "64", "65", "66", "67", "68", "69")
KG_WG_MMA_RS(kg_wgmma_rs_n256_bf16, 256, "bf16", KG_WG_D128, KG_WG_F128(d), "128", "129", "130", "131", "132",
             "133")
KG_WG_MMA_RS(kg_wgmma_rs_n256_f16, 256, "f16", KG_WG_D128, KG_WG_F128(d), "128", "129", "130", "131", "132",
             "133")

// The two products of one input type (BF: 1 bf16, 0 f16): S (+)= Q·K^T,
// N = BN (64, 80 or 128), both from shared memory; O += P·V, N = D, P from
// registers.
template <int BF, int BN>
__device__ static __forceinline__ void kg_fa_qk(float *s, unsigned long long a, unsigned long long b, int acc) {
    if (BN == 128) { if (BF) kg_wgmma_n128_bf16(s, a, b, acc); else kg_wgmma_n128_f16(s, a, b, acc); }
    else if (BN == 80) { if (BF) kg_wgmma_n80_bf16(s, a, b, acc); else kg_wgmma_n80_f16(s, a, b, acc); }
    else { if (BF) kg_wgmma_n64_bf16(s, a, b, acc); else kg_wgmma_n64_f16(s, a, b, acc); }
}
template <int BF, int D>
__device__ static __forceinline__ void kg_fa_pv(float *o, const unsigned *p, unsigned long long b) {
    if (D == 256) { if (BF) kg_wgmma_rs_n256_bf16(o, p, b); else kg_wgmma_rs_n256_f16(o, p, b); }
    else if (D == 128) { if (BF) kg_wgmma_rs_n128_bf16(o, p, b); else kg_wgmma_rs_n128_f16(o, p, b); }
    else { if (BF) kg_wgmma_rs_n64_bf16(o, p, b); else kg_wgmma_rs_n64_f16(o, p, b); }
}

__device__ static inline float kg_ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// One consumer's online-softmax step on its scores s (this thread's 2 rows
// x BN/4 columns of the block, accumulator layout): m (log2 domain, scaled)
// and l updated, s replaced by p = 2^(s·sl2 - m), O's rescale factor of
// each row in alpha.  A row with nothing seen yet keeps m = -inf and p = 0.
template <int BN>
__device__ static __forceinline__ void kg_fa_softmax(float *s, float *m, float *l, float *alpha, float sl2) {
    const float ninf = kg_neg_inf();
#pragma unroll
    for (int h = 0; h < 2; h++) {
        float mx = ninf;
#pragma unroll
        for (int i = 0; i < BN / 8; i++) mx = fmaxf(mx, fmaxf(s[4 * i + 2 * h], s[4 * i + 2 * h + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float mn = fmaxf(m[h], mx * sl2), mu = mn == ninf ? 0.0f : mn;
        alpha[h] = kg_ex2(m[h] - mu);
        m[h] = mn;
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < BN / 8; i++)
#pragma unroll
            for (int j = 0; j < 2; j++) {
                const float p = kg_ex2(fmaf(s[4 * i + 2 * h + j], sl2, -mu));
                s[4 * i + 2 * h + j] = p;
                sum += p;
            }
        l[h] = fmaf(l[h], alpha[h], sum);
    }
}

// The wgmma descriptor of the operand `off` bytes from shared address base,
// K-major (kg_fa_desc) or MN-major (kg_fa_desc_mn, lbo as kg_wg_desc_mn):
// ST = 1, the base's descriptor plus off / 16 (as the GEMM's kg_wg_desc_on
// and kg_wg_desc_mn_on); ST = 0, computed from base + off.  The forward
// takes ST = 1 at head dim 128 alone: there it was 2.7% faster, at 64 1.5%
// slower, and the backward's launch no faster at 128 (README, the ledger).
template <int ST>
__device__ static __forceinline__ unsigned long long kg_fa_desc(unsigned base, int off) {
    return ST ? kg_wg_desc_on(base, off) : kg_wg_desc(base + off);
}
template <int ST>
__device__ static __forceinline__ unsigned long long kg_fa_desc_mn(unsigned base, unsigned lbo, int off) {
    return ST ? kg_wg_desc_mn_on(base, lbo, off) : kg_wg_desc_mn(base + off, lbo);
}

// C (+)= A·B^T of 64 x N, issued and committed (not waited for): A's 64
// rows at shared address a, B's N rows at b, both K-major in CH chunks of
// 64 elements of 128-byte rows (chunk c of A at a + c·as, of B at b + c·bs);
// descriptors as kg_fa_desc<ST>.  The first k16 step overwrites C.
template <int CH, int N, int BF, int ST = 0>
__device__ static __forceinline__ void kg_fa_ss_issue(float *acc, unsigned a, unsigned as, unsigned b, unsigned bs) {
    kg_wg_fence();
#pragma unroll
    for (int cd = 0; cd < CH; cd++)
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
            kg_fa_qk<BF, N>(acc, kg_fa_desc<ST>(a, cd * as + kk * 32), kg_fa_desc<ST>(b, cd * bs + kk * 32), cd | kk);
    kg_wg_commit();
}

// C += A·B of 64 x D, issued and committed: A (64 x 16·K16) from registers
// (a[k]: step k's fragments), B (16·K16 rows of D) at shared address b,
// MN-major: 128-byte rows of 64 elements, the next 64 columns lbo bytes on;
// descriptors as kg_fa_desc_mn<ST>.
template <int K16, int D, int BF, int ST = 0>
__device__ static __forceinline__ void kg_fa_rs_issue(float *acc, unsigned (*a)[4], unsigned b, unsigned lbo) {
    kg_wg_fence();
#pragma unroll
    for (int k = 0; k < K16; k++) kg_fa_pv<BF, D>(acc, a[k], kg_fa_desc_mn<ST>(b, lbo, k * 16 * 128));
    kg_wg_commit();
}

// S = Q·K^T of one key block, issued and committed (not waited for): q, k
// the shared addresses of this warpgroup's 64 rows of Q and of the block's
// K, both K-major in D / 64 chunks of 128-byte rows.
template <int D, int BF>
__device__ static __forceinline__ void kg_fa_qk_issue(float *sc, unsigned q, unsigned k) {
    kg_fa_ss_issue<D / 64, FA_BN(D), BF, D == 128>(sc, q, FA_BM * 128, k, FA_BN(D) * 128);
}

// O += P·V of one key block, issued and committed: P from registers, V at
// shared address v, MN-major (D / 64 chunks of the block's rows).
template <int D, int BF>
__device__ static __forceinline__ void kg_fa_pv_issue(float *o, unsigned (*p)[4], unsigned v) {
    kg_fa_rs_issue<FA_BN(D) / 16, D, BF, D == 128>(o, p, v, FA_BN(D) * 128);
}

// The mask of the key block from key j0: -inf where a key is past the
// sequence (Sk) or, causal, past a row's diagonal (key j seen by local row
// r iff j <= r + diag); nothing to do when every key is before Sk and
// (causal) at most jfull, the first row's last key.  r_lo: this thread's
// first row (the second is r_lo + 8).
template <int BN>
__device__ static __forceinline__ void kg_fa_mask(float *sc, int j0, int Sk, int causal, int jfull, int r_lo,
                                                  int diag, int lane) {
    if (j0 + BN <= Sk && (!causal || j0 + BN - 1 <= jfull)) return;
#pragma unroll
    for (int i = 0; i < BN / 8; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int j = j0 + 8 * i + 2 * (lane % 4) + (e & 1), r = r_lo + 8 * (e >> 1);
            if (j >= Sk || (causal && j > r + diag)) sc[4 * i + e] = kg_neg_inf();
        }
}

// O's rows times their factors alpha (accumulator layout: e / 2 is the row).
template <int D>
__device__ static __forceinline__ void kg_fa_rescale(float *o, const float *alpha) {
#pragma unroll
    for (int i = 0; i < D / 8; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) o[4 * i + e] *= alpha[e >> 1];
}

// P (the probabilities in sc) rounded to the input type as the A fragments
// of O += P·V: step k's registers are the accumulator pairs of columns
// 16k .. 16k+15 (the m16n8k16 A layout matches the accumulator's).
template <int BN, int BF>
__device__ static __forceinline__ void kg_fa_to_p(const float *sc, unsigned (*p)[4]) {
#pragma unroll
    for (int k = 0; k < BN / 16; k++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            p[k][e] = BF ? kg_wg_pack(sc[8 * k + 2 * e], sc[8 * k + 2 * e + 1], kg_bf16())
                         : kg_wg_pack(sc[8 * k + 2 * e], sc[8 * k + 2 * e + 1], kg_f16());
}

// wgmma.wait_group 0, placed after the computation of x: ptxas schedules
// within a basic block and sank the whole softmax below a plain wait (no
// overlap: 14% slower at d128), so the wait sits behind a branch on x (x >= 0
// or NaN: always taken; the second wait is a no-op then).
__device__ static __forceinline__ void kg_fa_wait_after(float x) {
    if (!(x < 0.0f)) kg_wg_wait<0>();
    kg_wg_wait<0>();
}

// A consumer warp is done with a stage's K or V: one arrival per warp on
// its empty barrier.
__device__ static __forceinline__ void kg_fa_release(unsigned empty, int lane) {
    __syncwarp();
    if (lane == 0) kg_bar_arrive(empty);
}

// Ping-pong: warpgroup c waits for its turn at issuing wgmma (named
// barrier 1 + c, which the other warpgroup's pass completes), and passes
// the turn to the other.  No-ops unless FA_PINGPONG.
__device__ static __forceinline__ void kg_fa_turn_wait(int c) {
    if (FA_PINGPONG) asm volatile("bar.sync %0, 256;" ::"r"(1 + c) : "memory");
}
__device__ static __forceinline__ void kg_fa_turn_pass(int c) {
    if (FA_PINGPONG) asm volatile("bar.arrive %0, 256;" ::"r"(2 - c) : "memory");
}

// The body of kg_attn_fwd_sm90_d<D>_<dt> (see the section comment).
template <int D, int BF>
__device__ static inline void kg_fa_fwd(const kg_tmap *tq, const kg_tmap *tk, const kg_tmap *tv, kg_u16 *O,
                                        float *LSE, const int *cu_q, const int *cu_k, int Hq, int Hkv, int Dh,
                                        float scale, int causal) {
    const int BN = FA_BN(D), CH = D / 64, QB = FA_Q_BYTES(D), KVB = FA_KV_BYTES(D), NST = FA_NST(D);
    extern __shared__ unsigned char kg_dsmem[];
    const unsigned base = (kg_smem_addr(kg_dsmem) + 1023u) & ~1023u;
    const unsigned sq = base, skv = base + QB;            // stage s: K at skv + 2s·KVB, V after it
    const unsigned qbar = skv + 2 * NST * KVB;      // then full K[s], full V[s], empty V[s], empty K[s]
    const bool SPLIT = D <= FA_SPLIT_MAXD;                 // K freed apart from V
    const unsigned fullk = qbar + 8, fullv = fullk + 8 * NST, emptyv = fullv + 8 * NST;
    const unsigned emptyk = SPLIT ? emptyv + 8 * NST : emptyv;
    const int tid = (int)kg_tid(), wg = tid / 128, warp = tid / 32 % 4, lane = tid % 32;
    const int b = (int)kg_bid_z(), h = (int)kg_bid_y(), hk = h / (Hq / Hkv);
    const int q0 = cu_q[b], Sq = cu_q[b + 1] - q0, k0 = cu_k[b], Sk = cu_k[b + 1] - k0, diag = Sk - Sq;
    const int i0 = (int)(kg_grid_x() - 1 - kg_bid_x()) * FA_BM;
    if (i0 >= Sq) return;   // the whole block leaves, before any barrier
    const int rows = Sq - i0 < FA_BM ? Sq - i0 : FA_BM;
    const long long ke = causal ? (long long)i0 + rows + diag : (long long)Sk;
    const int nb = ke <= 0 ? 0 : (int)((ke + BN - 1) / BN);   // key blocks any row of the tile sees
    if (tid == 0) {
        kg_bar_init(qbar, 1);
        for (int s = 0; s < NST; s++) {
            kg_bar_init(fullk + 8 * s, 1);
            kg_bar_init(fullv + 8 * s, 1);
            kg_bar_init(emptyv + 8 * s, 8);   // the 8 consumer warps
            if (SPLIT) kg_bar_init(emptyk + 8 * s, 8);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    kg_sync();

    if (wg == 0) {   // producer: one thread issues every copy
        asm volatile("setmaxnreg.dec.sync.aligned.u32 24;");
        if (tid != 0) return;
        kg_bar_expect(qbar, QB);
        for (int c = 0; c < CH; c++) kg_tma_load3(sq + c * FA_BM * 128, tq, 64 * c, h, q0 + i0, qbar);
        int s = 0;
        unsigned phase = 0;
        for (int kb = 0; kb < nb; kb++) {
            const unsigned ks = skv + 2 * s * KVB, vs = ks + KVB;
            kg_bar_wait(emptyk + 8 * s, phase ^ 1);
            kg_bar_expect(fullk + 8 * s, KVB);
            for (int c = 0; c < CH; c++) kg_tma_load3(ks + c * BN * 128, tk, 64 * c, hk, k0 + kb * BN, fullk + 8 * s);
            kg_bar_wait(emptyv + 8 * s, phase ^ 1);
            kg_bar_expect(fullv + 8 * s, KVB);
            for (int c = 0; c < CH; c++) kg_tma_load3(vs + c * BN * 128, tv, 64 * c, hk, k0 + kb * BN, fullv + 8 * s);
            if (++s == NST) s = 0, phase ^= 1;
        }
        return;
    }

    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;");
    const int c = wg - 1, r_lo = i0 + c * 64 + warp * 16 + lane / 4;   // this thread's rows: r_lo, r_lo + 8
    const float sl2 = scale * 1.4426950408889634f, ninf = kg_neg_inf();
    float o[D / 2], m[2] = { ninf, ninf }, l[2] = { 0.0f, 0.0f };
#pragma unroll
    for (int i = 0; i < D / 2; i++) o[i] = 0.0f;
    kg_bar_wait(qbar, 0);
    const unsigned qs = sq + c * 64 * 128;   // this warpgroup's 64 rows of Q
    const int jfull = i0 + c * 64 + diag;    // causal: the last key its first row sees
    int s = 0;
    unsigned phase = 0;
    float sc[BN / 2], alpha[2];
    unsigned p[BN / 16][4];   // P as the A fragments of the k16 steps of O += P·V
    if (!FA_OVERLAP) {
        for (int kb = 0; kb < nb; kb++) {
            const unsigned ks = skv + 2 * s * KVB;
            kg_bar_wait(fullk + 8 * s, phase);
            kg_fa_qk_issue<D, BF>(sc, qs, ks);
            kg_wg_wait<0>();
            kg_wg_touch<BN / 2>(sc);
            if (SPLIT) kg_fa_release(emptyk + 8 * s, lane);
            kg_fa_mask<BN>(sc, kb * BN, Sk, causal, jfull, r_lo, diag, lane);
            kg_fa_softmax<BN>(sc, m, l, alpha, sl2);
            kg_fa_rescale<D>(o, alpha);
            kg_fa_to_p<BN, BF>(sc, p);
            kg_bar_wait(fullv + 8 * s, phase);
            kg_fa_pv_issue<D, BF>(o, p, ks + KVB);
            kg_wg_wait<0>();
            kg_wg_touch<D / 2>(o);
            kg_fa_release(emptyv + 8 * s, lane);
            if (++s == NST) s = 0, phase ^= 1;
        }
    } else if (nb > 0) {
        // Block kb's scores and softmax run while block kb-1's O += P·V is
        // on the tensor cores (FA3's intra-warpgroup overlap); O is rescaled
        // to block kb-1's maximum just before that product is issued.
        // FA_PINGPONG: the two warpgroups take turns at issuing
        // (kg_fa_turn_*), one warpgroup's softmax under the other's products.
        if (c == 1) kg_fa_turn_pass(1);
        kg_bar_wait(fullk, 0);
        kg_fa_turn_wait(c);
        kg_fa_qk_issue<D, BF>(sc, qs, skv);
        kg_fa_turn_pass(c);
        kg_wg_wait<0>();
        kg_wg_touch<BN / 2>(sc);
        if (SPLIT) kg_fa_release(emptyk, lane);
        kg_fa_mask<BN>(sc, 0, Sk, causal, jfull, r_lo, diag, lane);
        kg_fa_softmax<BN>(sc, m, l, alpha, sl2);   // O is 0: alpha multiplies zeros
        kg_fa_to_p<BN, BF>(sc, p);
        for (int kb = 1; kb < nb; kb++) {
            const int sn = s + 1 == NST ? 0 : s + 1;
            const unsigned pn = sn == 0 ? phase ^ 1 : phase;
            kg_bar_wait(fullk + 8 * sn, pn);
            kg_bar_wait(fullv + 8 * s, phase);
            kg_fa_turn_wait(c);
            kg_fa_qk_issue<D, BF>(sc, qs, skv + 2 * sn * KVB);
            kg_fa_rescale<D>(o, alpha);   // to block kb-1's maximum, while Q·K^T runs
            kg_fa_pv_issue<D, BF>(o, p, skv + 2 * s * KVB + KVB);
            kg_fa_turn_pass(c);
            kg_wg_wait<1>();   // the scores of block kb; block kb-1's P·V may run on
            kg_wg_touch<BN / 2>(sc);
            if (SPLIT) kg_fa_release(emptyk + 8 * sn, lane);
            kg_fa_mask<BN>(sc, kb * BN, Sk, causal, jfull, r_lo, diag, lane);
            kg_fa_softmax<BN>(sc, m, l, alpha, sl2);
            kg_fa_wait_after(l[0]);
            kg_wg_touch<D / 2>(o);
            kg_fa_release(emptyv + 8 * s, lane);
            kg_fa_to_p<BN, BF>(sc, p);
            s = sn, phase = pn;
        }
        kg_bar_wait(fullv + 8 * s, phase);
        kg_fa_turn_wait(c);
        kg_fa_rescale<D>(o, alpha);
        kg_fa_pv_issue<D, BF>(o, p, skv + 2 * s * KVB + KVB);
        if (c == 0) kg_fa_turn_pass(c);   // warpgroup 1 issues last: no turn left to pass
        kg_wg_wait<0>();
        kg_wg_touch<D / 2>(o);
        kg_fa_release(emptyv + 8 * s, lane);
    }

    // Epilogue: rows past the sequence and columns past Dh are not stored.
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
        l[hh] += __shfl_xor_sync(0xffffffffu, l[hh], 1);
        l[hh] += __shfl_xor_sync(0xffffffffu, l[hh], 2);
        const int r = r_lo + 8 * hh;
        if (r >= Sq) continue;
        const float inv = l[hh] > 0.0f ? 1.0f / l[hh] : 0.0f;
        kg_u16 *row = O + ((kg_i64)(q0 + r) * Hq + h) * Dh;
#pragma unroll
        for (int i = 0; i < D / 8; i++) {
            const int col = 8 * i + 2 * (lane % 4);
            if (col >= Dh) continue;
            const float v0 = o[4 * i + 2 * hh] * inv, v1 = o[4 * i + 2 * hh + 1] * inv;
            *(unsigned *)(row + col) = BF ? kg_wg_pack(v0, v1, kg_bf16()) : kg_wg_pack(v0, v1, kg_f16());
        }
        if (lane % 4 == 0)
            LSE[(kg_i64)(q0 + r) * Hq + h] = m[hh] == ninf ? ninf : m[hh] * 0.6931471805599453f + kg_log(l[hh]);
    }
}

#define KG_FA_SM90_ENTRY(D, sfx, BF)                                                                   \
    KG_ATOMICS(kg_attn_fwd_sm90_d##D##_##sfx, 0)                                                      \
    extern "C" __global__ void __launch_bounds__(384, 1)                                              \
    kg_attn_fwd_sm90_d##D##_##sfx(const __grid_constant__ kg_tmap tq, const __grid_constant__ kg_tmap tk, \
                                  const __grid_constant__ kg_tmap tv, kg_u16 *O, float *LSE,          \
                                  const int *cu_q, const int *cu_k, int Hq, int Hkv, int Dh,          \
                                  float scale, int causal)                                            \
    {                                                                                                 \
        kg_fa_fwd<D, BF>(&tq, &tk, &tv, O, LSE, cu_q, cu_k, Hq, Hkv, Dh, scale, causal);             \
    }
KG_FA_SM90_ENTRY(64, f16, 0)
KG_FA_SM90_ENTRY(64, bf16, 1)
KG_FA_SM90_ENTRY(128, f16, 0)
KG_FA_SM90_ENTRY(128, bf16, 1)
KG_FA_SM90_ENTRY(256, f16, 0)
KG_FA_SM90_ENTRY(256, bf16, 1)
#endif // KG_SM90

// ===== Attention backward, Hopper path (sm_90a): wgmma, TMA, two passes or one =====
//
// kg_attn_bwd_dkdv_sm90_d{64,128}_{f16,bf16} and
// kg_attn_bwd_dq_sm90_d{64,128}_{f16,bf16}: dK, dV and dQ of
// kg_attn_bwd_dkdv_<dt> and kg_attn_bwd_dq_<dt> (same layouts, causal mask,
// GQA, varlen, empty rows), after kg_attn_bwd_pre_<dt> has written Dsum,
// for head dims Dh up to D that TMA can read (a multiple of 8; columns past
// Dh are zero-filled and never stored).  Both recompute, per (query, key)
// pair that the mask lets through, p = 2^(s·scale·log2e - LSE·log2e),
// dp = dO_i·V_j and ds = p·(dp - Dsum_i) in fp32, and round P and dS to the
// input type as the A operand of the products that consume them.  384
// threads: warpgroup 0 produces (TMA), warpgroups 1 and 2 consume 64 rows
// each; setmaxnreg 24 / 240.  Tensor maps as the forward's (kgate builds
// them), boxes of 64 elements x 1 head x the rows a stage holds.
//   - dK/dV: grid (ceil(longest Sk / 128), Hkv, B), kg_attn_bwd_sm90_smem_d<D>
//     bytes.  Block: FB_BN = 128 keys of one KV head, K and V resident (a
//     consumer owns 64 keys: the rows of its wgmma).  The producer warp
//     streams, for each query head of the group in turn and each block of
//     FB_BM query rows that sees a key of the block, Q and dO (TMA, one
//     thread) and the rows' LSE·log2e and Dsum (the warp's loads; a row past
//     the sequence or with LSE = -inf gets +inf, so p = 0) into a ring of
//     FB_STAGES stages; a stage is free again when all 256 consumer threads
//     have arrived.  A consumer per step: S^T = K·Q^T and dP^T = V·dO^T
//     (A and B from shared memory, K-major), the causal mask, P^T, then
//     dV += P^T·dO and dK += dS^T·Q with P^T and dS^T from registers and dO,
//     Q MN-major.  dK = scale · its sum.  Keys past Sk in the block are
//     computed and never stored.  GQA: one accumulator over the group's
//     heads, in order.
//   - dQ: grid (ceil(longest Sq / 128), Hq, B), kg_attn_bwd_dq_sm90_smem_d<D>
//     bytes.  Block: 128 query rows of one head, Q and dO resident; K and V
//     blocks of FB_DQ_BN keys through a ring of FB_STAGES stages as in the
//     forward (causal: the longest tiles first, stopping at the tile's last
//     key block).  A consumer per key block: S = Q·K^T, dP = dO·V^T, the
//     mask (keys past Sk, causal), P and dS, then dQ += dS·K (dS from
//     registers, K MN-major), left running while the next block's S and dP
//     are issued.  dQ = scale · its sum.
//   - Two passes, S and dP computed in each (7 products where a dQ summed
//     across the dK/dV blocks needs 5): every sum runs in one fixed order
//     with no atomics and no semaphores (deterministic).
//   - Fused (FB_FUSED = 1, the default: kg_attn_bwd_fused_sm90_<tag>_<dt>,
//     then kg_attn_bwd_dq_post_sm90_<tag>_<dt>): the dK/dV pass also
//     computes dQ, 5 products per step, in FlashAttention-3's order, over
//     FB_FBM(D) query rows a step (64; at head dim 64, FB_BM64 = 128; at
//     128 without a mask, tag d128nc, FB_NC_BM = 80 with dQ transposed: see
//     kg_fb_put_ds_t; each as FA3's).  A consumer waits
//     for S^T and dP^T, makes P^T and dS^T and rounds both to A fragments
//     (so that the fp32 scores are gone before dQ's accumulators are live:
//     the loop fits 232 registers), issues dV += P^T·dO from registers,
//     stores dS^T into shared buffer t % 2 (double-buffered; both
//     consumers meet on named barrier 1), then issues its 64 x 64 of dQ's
//     partial, dS·K (A and B MN-major: head dim 128, its 64 columns; 64
//     with 128 rows, its 64 rows; 64 with 64 rows, the whole step, the
//     consumers in turn), and dK += dS^T·Q from registers, and writes the
//     partial into one of two shared buffers (one at 80 or 128 rows) while
//     dK runs.  After the walk dK and dV leave in 16-byte stores, the
//     quad's lanes trading pairs first (FB_EPI_V4, kg_fb_store_v4).
//     The dQ warp (producer warpgroup, warp 1) adds each partial into the
//     step's fp32 slab with one TMA bulk reduce, after key blocks 0 .. j-1
//     have added theirs (a lock per slab, acquire/release at GPU scope):
//     one add per element per key block, in key-block order, so dQ is
//     bitwise reproducible without a pass of its own.  setmaxnreg 40 / 232
//     (the pool: 128 x 40 + 256 x 232 = 168 x 384; 32 / 240 asks for more
//     than the launch holds and hangs; at 80 rows 24 / 240, whose 40 + 40
//     score and 40 dQ accumulators spill and serialize at 232).  Every key block of a head meets a
//     query block at the same step (kg_fb_step), so blocks of one head
//     side by side wait at each lock in turn; causal grids are therefore
//     dispatched key-block-major in sections of heads (kg_fb_order), which
//     puts most of a block's predecessors a wave ahead of it and the
//     longest blocks first; without a mask or GQA the walk is rotated
//     instead (key block j starts at query block j mod FB_ROTATE; the
//     adds' order at a slab is kg_fb_rank's).  Keys past Sk are masked
//     out of S^T (kg_fb_mask_keys).  The post kernel scales the slabs into dQ;
//     by default (FB_POST_EARLY) it may start while the fused pass runs
//     (programmatic dependent launch), each block once its slab's lock
//     counts all its adders (kg_fb_adders).  kgate zeroes the locks before
//     each launch.
// Techniques from FlashAttention-2 and -3 (Dao, arXiv 2307.08691; Shah et
// al., arXiv 2407.08608; FA3's deterministic backward orders its dQ adds
// with a semaphore per query block).

#if defined(KG_SM90)
#ifndef FB_BM
#define FB_BM 64                           // dK/dV: query rows per step (the N of S^T, dP^T): 64 or 128
#endif
#ifndef FB_STAGES
#define FB_STAGES 2                        // ring depth of both passes
#endif
#ifndef FB_DQ_BN
#define FB_DQ_BN 64                        // dQ: keys per block (the N of S, dP): 64 or 128
#endif
#ifndef FB_FUSED
#define FB_FUSED 1                         // 1: head dims 64 and 128 run the fused pass (dQ summed across key
#endif                                     // blocks in order; faster as measured: README); 0: the two passes
#ifndef FB_SECTION
#define FB_SECTION 16                      // the fused pass's dispatch: (sequence, KV head) pairs a section (kg_fb_order)
#endif
#ifndef FB_ROTATE
#define FB_ROTATE 32                       // the fused pass without a mask or GQA: key block j starts its walk
#endif                                     // at query block j mod FB_ROTATE (kg_fb_rank); 1: all at the first
#ifndef FB_DQ_ATOMIC
#define FB_DQ_ATOMIC 0                     // 1: the fused pass adds dQ in any order, no locks (kgate zeroes the
#endif                                     // slabs first): not bitwise reproducible, so declared as atomics
#ifndef FB_BM64
#define FB_BM64 128                        // the fused pass at head dim 64: query rows per step (64 or 128)
#endif
#ifndef FB_NC_BM
#define FB_NC_BM 80                        // the fused pass at head dim 128 without a mask: query rows per step
#endif                                     // (64 or 80; with a mask 64, FB_BM)
#ifndef FB_POST_EARLY
#define FB_POST_EARLY 1                    // 1: the post kernel may start while the fused pass runs (programmatic
#endif                                     // dependent launch): each block waits for its slab's adds (kg_fb_dq_post)
#ifndef FB_EPI_V4
#define FB_EPI_V4 1                        // 1: dK and dV leave in 16-byte stores, the quad's lanes trading
#endif                                     // pairs first (kg_fb_store_v4); 0: 4-byte stores from the fragments
#ifndef FB_CLK
#define FB_CLK 0                           // 1, a diagnostic build (its times are not the kernel's): each fused
#endif                                     // block records its wall clocks (kg_fb_clock), printed by the post
                                           // kernel's last block as "fbclk" lines (bench/fb_clocks.py)
#ifndef FB_STRESS_NS
#define FB_STRESS_NS 0                     // > 0, a diagnostic build (its times are not the kernel's): each dQ add
#endif                                     // of the fused pass held back this many ns, and kgate fills the slabs
                                           // with NaN before each launch, so that a slab read before all its adds
                                           // have landed (a post block's wait missing or short) fails the gates
#if FB_FUSED && FB_BM != 64
#error "FB_FUSED needs FB_BM 64"
#endif
#if FB_BM64 != 64 && FB_BM64 != 128
#error "FB_BM64 must be 64 or 128"
#endif
#if FB_NC_BM != 64 && FB_NC_BM != 80
#error "FB_NC_BM must be 64 or 80"
#endif
#if (FB_BM != 64 && FB_BM != 128) || (FB_DQ_BN != 64 && FB_DQ_BN != 128) || FB_STAGES < 2
#error "FB_BM and FB_DQ_BN must be 64 or 128, FB_STAGES at least 2"
#endif
#define FB_BN 128                          // dK/dV: keys per block, 2 consumer warpgroups x 64
#define FB_KV_BYTES(D) (FB_BN * (D) * 2)
#define FB_QM_BYTES(M, D) ((M) * (D) * 2)
#define FB_Q_BYTES(D) FB_QM_BYTES(FB_BM, D)
#define FB_DQ_KV_BYTES(D) (FB_DQ_BN * (D) * 2)
// dK/dV: K, V, the stages' Q and dO, their LSE·log2e and Dsum (FB_BM floats
// each), 1 KiB to align to the swizzle, the barriers (K/V's, full[s], empty[s]).
// M query rows a step (FB_BM; the fused pass: FB_FBM(D)).
#define FB_SMEM_M(M, D) (2 * FB_KV_BYTES(D) + FB_STAGES * (2 * FB_QM_BYTES(M, D) + 8 * (M)) + 1024 + 8 * (1 + 2 * FB_STAGES))
#define FB_SMEM(D) FB_SMEM_M(FB_BM, D)
// dQ: Q and dO (128 rows each), the stages' K and V, the alignment, the
// barriers (Q/dO's, full[s], empty[s]).
#define FB_DQ_SMEM(D) (2 * FA_Q_BYTES(D) + FB_STAGES * 2 * FB_DQ_KV_BYTES(D) + 1024 + 8 * (1 + 2 * FB_STAGES))
// Fused (FB_FUSED): FB_FBM(D) query rows a step (FB_BM64 at head dim 64,
// FB_BM at 128; the entry without a mask at 128, FB_NC_BM); the dK/dV
// pass's layout plus two dS buffers (FB_BN keys x M rows each),
// FB_DQ_NBUF(M) dQ partials (M x D fp32: two at 64 rows, one at 80 or 128,
// where two would pass the 227 KiB an SM holds) and their barriers (full
// and empty of two).
#define FB_FBM(D) ((D) == 64 ? FB_BM64 : FB_BM)
#define FB_DS_BYTES(M) (FB_BN * (M) * 2)
#define FB_DQ_PART_BYTES(M, D) ((M) * (D) * 4)
#define FB_DQ_NBUF(M) ((M) == 64 ? 2 : 1)
#define FB_FUSED_SMEM_M(M, D) (FB_SMEM_M(M, D) + 2 * FB_DS_BYTES(M) + FB_DQ_NBUF(M) * FB_DQ_PART_BYTES(M, D) + 32)
#define FB_FUSED_SMEM(D) FB_FUSED_SMEM_M(FB_FBM(D), D)
#if FB_FUSED
extern "C" __device__ int kg_attn_bwd_fused_sm90_smem_d64 = FB_FUSED_SMEM(64);
extern "C" __device__ int kg_attn_bwd_fused_sm90_smem_d128 = FB_FUSED_SMEM(128);
extern "C" __device__ int kg_attn_bwd_fused_sm90_smem_d128nc = FB_FUSED_SMEM_M(FB_NC_BM, 128);
extern "C" __device__ int kg_attn_bwd_fused_sm90_atomic = FB_DQ_ATOMIC;   // 1: kgate zeroes the dQ slabs
extern "C" __device__ int kg_attn_bwd_fused_sm90_post_early = FB_POST_EARLY; // 1: kgate launches the post kernel early
extern "C" __device__ int kg_attn_bwd_fused_sm90_stress = FB_STRESS_NS > 0;  // 1: kgate fills the slabs with NaN first
// The fused pass's query rows a step: its Q and dO boxes and its slabs' rows.
extern "C" __device__ int kg_attn_bwd_fused_sm90_bm_d64 = FB_FBM(64);
extern "C" __device__ int kg_attn_bwd_fused_sm90_bm_d128 = FB_FBM(128);
extern "C" __device__ int kg_attn_bwd_fused_sm90_bm_d128nc = FB_NC_BM;
#endif
extern "C" __device__ int kg_attn_bwd_sm90_smem_d64 = FB_SMEM(64);
extern "C" __device__ int kg_attn_bwd_sm90_smem_d128 = FB_SMEM(128);
extern "C" __device__ int kg_attn_bwd_dq_sm90_smem_d64 = FB_DQ_SMEM(64);
extern "C" __device__ int kg_attn_bwd_dq_sm90_smem_d128 = FB_DQ_SMEM(128);
// The boxes kgate makes the tensor maps in: dK/dV's query rows per step,
// dQ's keys per block.
extern "C" __device__ int kg_attn_bwd_sm90_bm = FB_BM;
extern "C" __device__ int kg_attn_bwd_dq_sm90_bn = FB_DQ_BN;

// P in place of the scores s (accumulator layout, N columns): p = 2^(s·sl2
// - lse2), lse2 per row (rows: [e >> 1]) or per column (cols: the column's
// entry of the stage's FB_BM values).
template <int N>
__device__ static __forceinline__ void kg_fb_p_rows(float *s, const float *lse2, float sl2) {
#pragma unroll
    for (int i = 0; i < N / 8; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) s[4 * i + e] = kg_ex2(fmaf(s[4 * i + e], sl2, -lse2[e >> 1]));
}
template <int N>
__device__ static __forceinline__ void kg_fb_p_cols(float *s, const float *lse2, float sl2, int lane) {
#pragma unroll
    for (int i = 0; i < N / 8; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) s[4 * i + e] = kg_ex2(fmaf(s[4 * i + e], sl2, -lse2[8 * i + 2 * (lane % 4) + (e & 1)]));
}

// dS in place of dP (accumulator layout): ds = p·(dp - dsum), dsum per row
// or per column as above.
template <int N>
__device__ static __forceinline__ void kg_fb_ds_rows(float *dp, const float *p, const float *dsum) {
#pragma unroll
    for (int i = 0; i < N / 8; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) dp[4 * i + e] = p[4 * i + e] * (dp[4 * i + e] - dsum[e >> 1]);
}
template <int N>
__device__ static __forceinline__ void kg_fb_ds_cols(float *dp, const float *p, const float *dsum, int lane) {
#pragma unroll
    for (int i = 0; i < N / 8; i++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            dp[4 * i + e] = p[4 * i + e] * (dp[4 * i + e] - dsum[8 * i + 2 * (lane % 4) + (e & 1)]);
}

// The causal mask of S^T (keys as rows): -inf where key kr (this thread's
// first row; the second is kr + 8) comes after query i's diagonal, key >
// i + diag, for the N queries from i0 (local indices).
template <int N>
__device__ static __forceinline__ void kg_fb_mask_t(float *st, int i0, int kr, int diag, int lane) {
#pragma unroll
    for (int i = 0; i < N / 8; i++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            if (kr + 8 * (e >> 1) > i0 + 8 * i + 2 * (lane % 4) + (e & 1) + diag) st[4 * i + e] = kg_neg_inf();
}

// Keys past the sequence out of S^T: -inf in this thread's rows kr, kr + 8
// where they are Sk or more, so that p = 0 there and their dS adds nothing
// to the fused pass's dQ (in a packed varlen batch TMA reads the next
// sequence's keys there; the causal mask already covers them).
template <int N>
__device__ static __forceinline__ void kg_fb_mask_keys(float *st, int kr, int Sk) {
#pragma unroll
    for (int i = 0; i < N / 8; i++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            if (kr + 8 * (e >> 1) >= Sk) st[4 * i + e] = kg_neg_inf();
}

// This thread's two rows (r, r + 8) of a 64 x D accumulator times mul,
// rounded and stored at out[((row0 + r) · H + h) · Dh + col] for rows below
// `rows` and columns below Dh.
template <int D, int BF>
__device__ static __forceinline__ void kg_fb_store(const float *acc, float mul, kg_u16 *out, int row0, int r, int rows,
                                                   int H, int h, int Dh, int lane) {
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
        if (r + 8 * hh >= rows) continue;
        kg_u16 *row = out + ((kg_i64)(row0 + r + 8 * hh) * H + h) * Dh;
#pragma unroll
        for (int i = 0; i < D / 8; i++) {
            const int col = 8 * i + 2 * (lane % 4);
            if (col >= Dh) continue;
            const float v0 = acc[4 * i + 2 * hh] * mul, v1 = acc[4 * i + 2 * hh + 1] * mul;
            *(unsigned *)(row + col) = BF ? kg_wg_pack(v0, v1, kg_bf16()) : kg_wg_pack(v0, v1, kg_f16());
        }
    }
}

// kg_fb_store in 16-byte stores (FB_EPI_V4): per row half and 32 columns,
// the quad's lanes trade their pairs (kg_quad_transpose) so that lane q
// holds the 8 columns 32k + 8q .. 32k + 8q + 7, stored at once when they lie
// below Dh: a quarter of the stores, the same values.  Needs Dh % 8 == 0 and
// out 16-byte aligned (the host's attn_sm90_bwd_pick asks both of every
// sm_90a backward).
template <int D, int BF>
__device__ static __forceinline__ void kg_fb_store_v4(const float *acc, float mul, kg_u16 *out, int row0, int r,
                                                      int rows, int H, int h, int Dh, int lane) {
    const int q = lane % 4;
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
        const bool in = r + 8 * hh < rows;
        kg_u16 *row = out + ((kg_i64)(row0 + r + 8 * hh) * H + h) * Dh;
#pragma unroll
        for (int k = 0; k < D / 32; k++) {
            unsigned p[4];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int i = 4 * k + e;
                const float v0 = acc[4 * i + 2 * hh] * mul, v1 = acc[4 * i + 2 * hh + 1] * mul;
                p[e] = BF ? kg_wg_pack(v0, v1, kg_bf16()) : kg_wg_pack(v0, v1, kg_f16());
            }
            kg_quad_transpose(p, q);   // every lane, before any leaves
            const int col = 32 * k + 8 * q;
            if (in && col < Dh)
                asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(row + col), "r"(p[0]), "r"(p[1]),
                             "r"(p[2]), "r"(p[3]) : "memory");
        }
    }
}

// The rotated walk's index math (kg_fb_step, kg_fb_dq_sum) between the
// kgate-fbrank marks is plain C: tests.sh compiles it with a C compiler and
// checks, for every small walk, that the ranks at each slab are the order
// of (step, key block) and that the locks never wait for ever while all key
// blocks are resident (.ci/fb_rank_check.c).
#define KG_FB_IX __device__ static __forceinline__
// >>> kgate-fbrank (plain C)
// The position (query block, counted from the walk's first) that a walk of
// nq blocks rotated by rot (0 <= rot < nq) meets at step u.
KG_FB_IX int kg_fb_pos(int u, int rot, int nq) { return u + rot < nq ? u + rot : u + rot - nq; }

// #{x in [0, n) : x mod m < r} (0 <= r <= m; kg_fb_rank's count).
KG_FB_IX int kg_fb_below(int n, int m, int r) {
    return n / m * r + (n % m < r ? n % m : r);
}

// The rotated walk's order at one dQ slab (non-causal fused pass, kg_fb_dkdv):
// key block j of nkb walks its nq query blocks from position j mod R on
// (the span, 1 <= R <= nq), so it meets the slab of position p at step
// u(j) = (p - j mod R) mod nq; the blocks add to that slab in the order of
// (u, j).  Returns j's rank there: the number of blocks that add before it,
// #{j' : u(j') < u(j)} + #{j' < j : u(j') = u(j)}.  The start residues
// c = j' mod R with u(j') < u(j) are those among the u(j) positions from
// j mod R + 1 on (cyclically, mod nq) that are below R, each held by
// nkb / R blocks plus one when c < nkb mod R.  So at each step the key
// blocks of a head add to up to R distinct slabs, each after the blocks
// that met it the step before, instead of queueing at one slab.
KG_FB_IX int kg_fb_rank(int j, int p, int nkb, int nq, int R) {
    const int cj = j % R, u = ((p - cj) % nq + nq) % nq, s = cj + 1, r = nkb % R;
    return nkb / R * (kg_fb_below(s + u, nq, R) - kg_fb_below(s, nq, R)) + kg_fb_below(s + u, nq, r) -
           kg_fb_below(s, nq, r) + j / R;
}
// <<< kgate-fbrank

// The walk of a dK/dV block over its query rows, M a step: step t of
// `steps` is query head hk·G + *g, rows from *i0.  Two passes (FUSED = 0):
// each head of the group in turn, its blocks of M rows from the first
// visible row `istart` on (nq of them).  Fused: the blocks of M rows
// aligned to M, from the one at row `last` down to the one holding istart (nq of
// them), each met once per head; every key block of a head then meets a
// query block at the same step number whatever its causal start (the
// ordered dQ sums, key block j after j - 1: see kg_fb_order), unless the
// walk is rotated: it then starts at the rot-th of its blocks (0 <= rot <
// nq) and wraps around (kg_fb_rank).
template <int FUSED, int M>
__device__ static __forceinline__ void kg_fb_step(int t, int G, int nq, int istart, int last, int rot, int *g,
                                                  int *i0) {
    if (FUSED) *g = t % G, *i0 = last - kg_fb_pos(t / G, rot, nq) * M;
    else *g = t / nq, *i0 = istart + t % nq * M;
}
// The walk's query blocks per head: rows istart .. Sq - 1 (Sq > istart).
template <int FUSED, int M>
__device__ static __forceinline__ int kg_fb_blocks(int istart, int Sq) {
    if (Sq <= istart) return 0;
    return FUSED ? (Sq - 1) / M - istart / M + 1 : (Sq - istart + M - 1) / M;
}

// A row's LSE in base 2 (LSE·log2e) for p = exp2(s·scale·log2e - it); a row
// that sees no key (LSE -inf) gets +inf, so that its p is 0.
__device__ static __forceinline__ float kg_fb_lse2(float lse) {
    const float ninf = kg_neg_inf();
    return lse == ninf ? -ninf : lse * 1.4426950408889634f;
}

// One step's row statistics into stage s of `stat` (M floats of LSE·log2e,
// +inf for a row past the sequence, then M of Dsum, 0 there) by the
// producer warp's 32 lanes: query rows i0 + lane, i0 + lane + 32, ... of
// the sequence (first token q0, Sq rows), head h of Hq (one float a row, Hq
// apart).  At 64 and 80 rows a lane issues all its loads before its first
// store; at 128 (head dim 64) row by row, which measured faster there
// (bench/HOPPER.md).
template <int M>
__device__ static __forceinline__ void kg_fb_stats(float *stat, int s, const float *LSE, const float *Dsum, int lane,
                                                   int q0, int i0, int Sq, int Hq, int h) {
    const float ninf = kg_neg_inf();
    if constexpr (M <= 80) {
        constexpr int NE = (M + 31) / 32;
        float lv[NE], dv[NE];
#pragma unroll
        for (int k = 0; k < NE; k++) {
            const int e = lane + 32 * k, i = i0 + e;
            const bool in = e < M && i < Sq;
            lv[k] = in ? LSE[(kg_i64)(q0 + i) * Hq + h] : ninf;
            dv[k] = in ? Dsum[(kg_i64)(q0 + i) * Hq + h] : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < NE; k++) {
            const int e = lane + 32 * k;
            if (e >= M) break;
            stat[2 * M * s + e] = kg_fb_lse2(lv[k]);
            stat[2 * M * s + M + e] = dv[k];
        }
    } else {
        for (int e = lane; e < M; e += 32) {
            const int i = i0 + e;
            const float lse = i < Sq ? LSE[(kg_i64)(q0 + i) * Hq + h] : ninf;
            stat[2 * M * s + e] = kg_fb_lse2(lse);
            stat[2 * M * s + M + e] = i < Sq ? Dsum[(kg_i64)(q0 + i) * Hq + h] : 0.0f;
        }
    }
}

// The dK/dV producer warp: K and V once, then for each step of the walk
// (kg_fb_step, M rows a step) the stage's Q, dO (lane 0, TMA) and
// LSE·log2e, Dsum (every lane, kg_fb_stats, then one arrival each).
template <int D, int FUSED, int M>
__device__ static inline void kg_fb_dkdv_produce(const kg_tmap *tq, const kg_tmap *tdo, const kg_tmap *tk,
                                                 const kg_tmap *tv, const float *LSE, const float *Dsum,
                                                 float *stat, unsigned sk, unsigned sqd, unsigned kvbar,
                                                 unsigned full, unsigned empty, int lane, int hk, int G, int k0,
                                                 int j0, int q0, int Sq, int Hq, int istart, int last, int nq,
                                                 int rot) {
    const int CH = D / 64, KVB = FB_KV_BYTES(D), QB = FB_QM_BYTES(M, D);
    if (lane == 0) {
        kg_bar_expect(kvbar, 2 * KVB);
        for (int c = 0; c < CH; c++) {
            kg_tma_load3(sk + c * FB_BN * 128, tk, 64 * c, hk, k0 + j0, kvbar);
            kg_tma_load3(sk + KVB + c * FB_BN * 128, tv, 64 * c, hk, k0 + j0, kvbar);
        }
    }
    int s = 0;
    unsigned phase = 0;
    for (int t = 0; t < G * nq; t++) {
        int g, i0;
        kg_fb_step<FUSED, M>(t, G, nq, istart, last, rot, &g, &i0);
        const int h = hk * G + g;
        const unsigned q = sqd + 2 * s * QB;
        kg_bar_wait(empty + 8 * s, phase ^ 1);
        if (lane == 0) {
            kg_bar_expect(full + 8 * s, 2 * QB);
            for (int c = 0; c < CH; c++) {
                kg_tma_load3(q + c * M * 128, tq, 64 * c, h, q0 + i0, full + 8 * s);
                kg_tma_load3(q + QB + c * M * 128, tdo, 64 * c, h, q0 + i0, full + 8 * s);
            }
        }
        kg_fb_stats<M>(stat, s, LSE, Dsum, lane, q0, i0, Sq, Hq, h);
        kg_bar_arrive(full + 8 * s);
        if (++s == FB_STAGES) s = 0, phase ^= 1;
    }
}

// The fused pass's dQ slab of query head h, rows from i0 of sequence b
// (first token q0): slabs of M rows x D fp32 (M: the entry's rows), nslab per
// head, slab q0 / M + b + i0 / M (distinct across sequences; kgate
// allocates Tq / 64 + B + 1 per head, enough for any M, each of 80 x 128
// floats).  Element (r, col) of a slab lies at float r·D + 2·(col / 2 ^
// (r % 8)·4) + col % 2 (kg_fb_slab_at; at 80 rows, transposed, at col·80 +
// 2·(r / 2 ^ (col / 2 % 2)·4) + r % 2: kg_fb_slab_at_t): pairs swizzled so
// that the consumers' stores from the accumulators meet no bank conflict.
template <int M>
__device__ static __forceinline__ kg_i64 kg_fb_slab(int h, int nslab, int q0, int b, int i0) {
    return (kg_i64)h * nslab + q0 / M + b + i0 / M;
}
__device__ static __forceinline__ __attribute__((unused)) int kg_fb_slab_at(int r, int col, int D) {   // unused at FB_BM 128
    return r * D + 2 * ((col >> 1) ^ ((r & 7) << 2)) + (col & 1);
}
__device__ static __forceinline__ __attribute__((unused)) int kg_fb_slab_at_t(int r, int col) {
    return col * 80 + 2 * ((r >> 1) ^ ((col & 2) << 1)) + (r & 1);
}

// A lock of the fused pass's ordered sums: read with acquire, written with
// release, at GPU scope.
__device__ static __forceinline__ int kg_fb_lock_read(const int *p) {
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ static __forceinline__ void kg_fb_lock_write(int *p, int v) {
    asm volatile("st.release.gpu.global.b32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// FB_CLK (a diagnostic build): per fused block, by its linear index (x
// fastest), the wall clock (%globaltimer, ns) at FB_CLK_SLOTS points: 0 its
// start (after the early exit), 1 K and V landed (consumer 0), 2 consumer 0's
// walk done, 3 consumer 0's stores issued, 4 consumer 1's, 5 the dQ warp's
// last add landed; then its SM.  kg_fb_post_clocks prints and zeroes them.
#define FB_CLK_SLOTS 6
#define FB_CLK_N (1 << 16)
// This block's linear index in its grid, x fastest.
__device__ static __forceinline__ unsigned kg_fb_lin() {
    return kg_bid_x() + gridDim.x * (kg_bid_y() + gridDim.y * kg_bid_z());
}
#if FB_CLK
__device__ unsigned long long kg_fb_clk[FB_CLK_SLOTS + 1][FB_CLK_N];
#endif
__device__ static __forceinline__ void kg_fb_clock(int slot) {
#if FB_CLK
    const unsigned long long t = kg_wall_ns();
    const unsigned lin = kg_fb_lin();
    if (lin >= FB_CLK_N) return;
    kg_fb_clk[slot][lin] = t;
    if (slot == 0) {
        unsigned sm;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
        kg_fb_clk[FB_CLK_SLOTS][lin] = sm;
    }
#else
    (void)slot;
#endif
}

// FB_STRESS_NS > 0 (a diagnostic build): spin that many ns of wall time.
__device__ static __forceinline__ void kg_fb_stress_stall() {
#if FB_STRESS_NS > 0
    const unsigned long long t0 = kg_wall_ns();
    while (kg_wall_ns() - t0 < (unsigned long long)FB_STRESS_NS) {}
#endif
}

// The fused pass's dQ warp (lane 0; the other lanes leave): for each step,
// once the consumers have put the step's dQ partial (M x D fp32) in
// shared buffer t % NB from sdq (NB = FB_DQ_NBUF(M); its dqfull, at
// dqfull + 8·(t % NB)), wait
// until the slab's lock says that the key blocks before j in the slab's
// order have added theirs, then copy the partial into the slab (the first)
// or add it there (TMA bulk reduce, fp32), free the buffer for the
// consumers (its dqempty, 16 bytes on) once read, and pass the lock on once
// the sum has landed.  The order: key blocks 0, 1, ... in a plain walk
// (rank = j; nkb = 0); in a rotated one (rot = j mod R, nkb key blocks in
// the sequence), kg_fb_rank's.  One add per element per key block, in a
// fixed order: the sum is bitwise reproducible.
// Deadlock-free as long as blocks are dispatched in linear order (the
// hardware's in-order dispatch; FlashAttention-3's deterministic backward
// relies on the same): in the plain walk block j waits only for blocks of
// lower linear index (x fastest, in the plain grid and in kg_fb_order's);
// a rotated one also waits for later blocks of its (sequence, KV head),
// so kg_fb_dkdv rotates only when all nkb of them fit on the device at once.
template <int D, int M>
__device__ static inline void kg_fb_dq_sum(float *acc, int *locks, unsigned sdq, unsigned dqfull, int lane, int j,
                                           int slab0, int nslab, int G, int last, int nq, int rot, int nkb, int R) {
    const int NB = FB_DQ_NBUF(M);
    if (lane != 0) return;
    for (int t = 0; t < G * nq; t++) {
        int g, i0;
        kg_fb_step<1, M>(t, G, nq, 0, last, rot, &g, &i0);
        const int slab = slab0 + g * nslab + i0 / M;
        const int rank = nkb > 0 ? kg_fb_rank(j, (last - i0) / M, nkb, nq, R) : j;
        const unsigned buf = sdq + t % NB * FB_DQ_PART_BYTES(M, D), bar = dqfull + 8 * (t % NB);
        kg_bar_wait(bar, t / NB & 1);
        float *dst = acc + (kg_i64)slab * M * D;
        if (rank > 0 && !FB_DQ_ATOMIC)
            while (kg_fb_lock_read(locks + slab) != rank) {}
        kg_fb_stress_stall();   // FB_STRESS_NS: the add held back, the slab's sum so far left readable
        if (rank == 0 && !FB_DQ_ATOMIC)
            asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                         ::"l"(dst), "r"(buf), "r"(M * D * 4) : "memory");
        else
            asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;"
                         ::"l"(dst), "r"(buf), "r"(M * D * 4) : "memory");
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
        asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
        kg_bar_arrive(bar + 16);   // the consumers' dqempty of this buffer
        asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
        asm volatile("fence.proxy.async.global;" ::: "memory");
        kg_fb_lock_write(locks + slab, rank + 1);
    }
}

// The causal fused pass's block of grid (keys / FB_BN, Hkv, B) in dispatch
// order (x fastest): its key block *j, sequence *b and KV head *hk.  The
// (sequence, KV head) pairs go in sections of FB_SECTION; within a section
// key block 0 of every pair comes first, then key block 1, and so on.  So
// the longest blocks start first (the grid's tail holds short ones), and
// the blocks that add to a dQ slab before block j (kg_fb_dq_sum) are
// mostly a wave ahead of it rather than beside it, so block j seldom waits
// at the slab's lock; a section's blocks still share its Q, dO and dQ
// slabs in L2.  Measured (B1 H32 S4096 d128 bf16, 7 rounds): causal 0.869
// of the plain grid's time, GQA 32:8 causal 0.785.  Not used without a
// mask: there all blocks are as long, and the variants that carried this
// order (with LSE read early beside it) took 1.017-1.066 times as long on
// B1 and B4 H32 S4096.
__device__ static __forceinline__ void kg_fb_order(int *j, int *b, int *hk) {
    const unsigned nkb = gridDim.x, nhb = gridDim.y * gridDim.z;
    const unsigned lin = kg_fb_lin();
    const unsigned sec = lin / (FB_SECTION * nkb), in = lin - sec * FB_SECTION * nkb;
    const unsigned w = nhb - sec * FB_SECTION < FB_SECTION ? nhb - sec * FB_SECTION : FB_SECTION;
    const unsigned pair = sec * FB_SECTION + in % w;
    *j = (int)(in / w), *b = (int)(pair / gridDim.y), *hk = (int)(pair % gridDim.y);
}

// A consumer's dS^T (its 64 keys x M query rows), as the A fragments of
// kg_fa_to_p (fragment e of step k: the rounded pair of accumulator i =
// 2k + e / 2, row half e % 2), into the shared buffer at sbuf (all FB_BN
// keys x M rows, M / 64 chunks of FB_BN 128-byte key rows of 64 query
// columns, 128-byte swizzle, the 16-byte chunk ch of key row kl at chunk
// ch ^ kl % 8): the A operand of dQ = dS·K (MN-major, a chunk of rows).
// sbuf is 1024-byte aligned and kl % 8 = lane / 4, so each address is one
// add and one xor of two per-thread values.
template <int M>
__device__ static __forceinline__ void kg_fb_put_ds(const unsigned (*p)[4], unsigned sbuf, int c, int warp, int lane) {
    unsigned row = sbuf + (c * 64 + warp * 16 + lane / 4) * 128 + 4 * (lane % 4), x = (lane / 4) << 4;
    asm volatile("" : "+r"(row));   // made here, each step (see kg_fb_put_dq)
#pragma unroll
    for (int k = 0; k < M / 16; k++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            asm volatile("st.shared.u32 [%0], %1;"
                         ::"r"((row + k / 4 * FB_BN * 128 + (e & 1) * 1024 + ((2 * (k % 4) + (e >> 1)) << 4)) ^ x),
                         "r"(p[k][e]) : "memory");
}

// A consumer's dQ partial (64 query rows from row0 x 64 columns from
// column col0, accumulator layout) into the shared slab image at sdq
// (1024-byte aligned; the layout of kg_fb_slab_at, whose swizzle is then an
// xor of address bits 5-7).
template <int D>
__device__ static __forceinline__ void kg_fb_put_dq(const float *dq, unsigned sdq, int row0, int col0, int warp,
                                                    int lane) {
    unsigned row = sdq + (row0 + warp * 16 + lane / 4) * D * 4 + 4 * col0 + 8 * (lane % 4), x = (lane / 4) << 5;
    asm volatile("" : "+r"(row));   // made here, each step: hoisted out of the loop, 16 addresses were spilled
#pragma unroll
    for (int i = 0; i < 8; i++)
#pragma unroll
        for (int hh = 0; hh < 2; hh++)
            asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"((row + hh * 8 * D * 4 + 32 * i) ^ x),
                         "f"(dq[4 * i + 2 * hh]), "f"(dq[4 * i + 2 * hh + 1]) : "memory");
}

// dQ partial = dS·K for 64 rows and 64 columns (a chunk of dS's rows at
// sds, of K's columns at kc), issued and committed: both MN-major (wgmma's
// transposed A and B).
template <int BF>
__device__ static __forceinline__ void kg_fb_dq_issue(float *dq, unsigned sds, unsigned kc) {
    kg_wg_fence();
#pragma unroll
    for (int kk = 0; kk < FB_BN / 16; kk++) {
        const unsigned long long a = kg_wg_desc_mn(sds + kk * 16 * 128, FB_BN * 128),
                                 b = kg_wg_desc_mn(kc + kk * 16 * 128, FB_BN * 128);
        if (BF) kg_wgmma_n64_bf16<1, 1>(dq, a, b, kk);
        else kg_wgmma_n64_f16<1, 1>(dq, a, b, kk);
    }
    kg_wg_commit();
}

// At 80 query rows a step (FB_NC_BM = 80: head dim 128, FlashAttention-3's
// block there without a mask), dQ is made transposed, dQ^T = K^T·dS^T:
// each consumer its 64 columns of dQ as the M of the product, the step's
// 80 rows as its N (a wgmma's M is 64).  Its operands: A, a chunk of K's
// columns (MN-major); B, dS itself (80 query rows of the block's 128 keys,
// K-major), which the consumers store here from their dS^T fragments:
// consumer c's 64 keys are key chunk c of the buffer at sbuf (two chunks
// of 80 rows x 128 bytes, 128-byte swizzle, the 16-byte chunk ch of row q
// at ch ^ q % 8), each 8 x 8 of a fragment transposed by stmatrix.
__device__ static __forceinline__ void kg_fb_put_ds_t(const unsigned (*p)[4], unsigned sbuf, int c, int warp,
                                                      int lane) {
    const int e = lane / 8, j = lane % 8;   // the matrix whose row this thread addresses, and the row
    unsigned row = sbuf + c * 80 * 128 + (8 * (e >> 1) + j) * 128 + (((2 * warp + (e & 1)) ^ j) << 4);
    asm volatile("" : "+r"(row));
#pragma unroll
    for (int k = 0; k < 5; k++)
        asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};"
                     ::"r"(row + k * 16 * 128), "r"(p[k][0]), "r"(p[k][1]), "r"(p[k][2]), "r"(p[k][3]) : "memory");
}

// dQ^T's 64 columns from col0 x 80 rows (this consumer's accumulators) into
// the shared slab image at sdq (kg_fb_slab_at_t's layout; the swizzle bit
// of a thread's columns is lane / 8 % 2, since col0 and the 16 columns a
// warp takes are multiples of 8).
__device__ static __forceinline__ void kg_fb_put_dq_t(const float *dq, unsigned sdq, int col0, int warp, int lane) {
    const unsigned base = sdq + (col0 + warp * 16 + lane / 4) * 80 * 4 + 8 * (lane % 4), x = 32 * ((lane >> 3) & 1);
    unsigned be = base + x, bo = base - x;   // pair group i ^ 1 of the even and of the odd groups i
    asm volatile("" : "+r"(be), "+r"(bo));
#pragma unroll
    for (int i = 0; i < 10; i++)
#pragma unroll
        for (int hh = 0; hh < 2; hh++)
            asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"((i & 1 ? bo : be) + 32 * i + hh * 8 * 80 * 4),
                         "f"(dq[4 * i + 2 * hh]), "f"(dq[4 * i + 2 * hh + 1]) : "memory");
}

// dQ^T = K^T·dS^T for 64 columns x 80 rows (K's column chunk at kc, dS at
// sds as kg_fb_put_ds_t leaves it), issued and committed.
template <int BF>
__device__ static __forceinline__ void kg_fb_dqt_issue(float *dq, unsigned sds, unsigned kc) {
    kg_wg_fence();
#pragma unroll
    for (int kk = 0; kk < FB_BN / 16; kk++) {
        const unsigned long long a = kg_wg_desc_mn(kc + kk * 16 * 128, FB_BN * 128),
                                 b = kg_wg_desc_on(sds + kk / 4 * 80 * 128, kk % 4 * 32);
        if (BF) kg_wgmma_n80_bf16<1, 0>(dq, a, b, kk);
        else kg_wgmma_n80_f16<1, 0>(dq, a, b, kk);
    }
    kg_wg_commit();
}

// The body of kg_attn_bwd_dkdv_sm90_d<D>_<dt> (FUSED = 0, BM = FB_BM) and
// of kg_attn_bwd_fused_sm90_d<D>[nc]_<dt> (FUSED = 1, BM = FB_FBM(D) or
// FB_NC_BM: also dQ, summed in fp32 slabs at acc under locks; see the
// section comment; nres: the blocks the device holds at once, which bounds
// the rotated walk).  BM query rows a step.
template <int D, int BF, int FUSED, int BM>
__device__ static inline void kg_fb_dkdv(const kg_tmap *tq, const kg_tmap *tdo, const kg_tmap *tk, const kg_tmap *tv,
                                         const float *LSE, const float *Dsum, kg_u16 *dK, kg_u16 *dV, float *acc,
                                         int *locks, int nslab, const int *cu_q, const int *cu_k, int Hq, int Hkv,
                                         int Dh, float scale, int causal, int nres) {
    static_assert(!FUSED || ((D == 64 || D == 128) && FB_BM == 64), "the fused backward: head dim 64 or 128, FB_BM 64");
    static_assert(BM != 80 || (FUSED && D == 128), "80 query rows a step: the fused pass at head dim 128 only");
    // The fused pass's dQ product per step (BM rows x D columns over the
    // block's 128 keys) is NP products of 64 x 64: at head dim 128 each
    // consumer takes 64 columns, at 64 with 128 rows 64 rows; at 64 with 64
    // rows (NP = 1) the consumers take whole steps in turn (consumer t % 2),
    // so that dQ needs no half-width product and the slab gets one partial
    // a step; at 128 with 80 rows each consumer takes its 64 columns of dQ^T
    // (kg_fb_dqt_issue).
    const int NP = BM / 64 * (D / 64), NB = FB_DQ_NBUF(BM);
    const int CH = D / 64, KVB = FB_KV_BYTES(D), QB = FB_QM_BYTES(BM, D);
    extern __shared__ unsigned char kg_dsmem[];
    const unsigned base = (kg_smem_addr(kg_dsmem) + 1023u) & ~1023u;
    const unsigned sk = base, sqd = sk + 2 * KVB;                 // K, V; stage s: Q at sqd + 2s·QB, dO after it
    const unsigned sds = sqd + 2 * FB_STAGES * QB;               // FUSED: two dS^T buffers, NB dQ partials
    const unsigned sdq = sds + (FUSED ? 2 * FB_DS_BYTES(BM) : 0);
    const unsigned sst = sdq + (FUSED ? NB * FB_DQ_PART_BYTES(BM, D) : 0); // stage s: BM LSE·log2e, then BM Dsum
    const unsigned kvbar = sst + 8 * FB_STAGES * BM, full = kvbar + 8, empty = full + 8 * FB_STAGES;
    const unsigned dqfull = empty + 8 * FB_STAGES, dqempty = dqfull + 16;   // two of each
    float *stat = (float *)(kg_dsmem + (sst - kg_smem_addr(kg_dsmem)));
    const int tid = (int)kg_tid(), wg = tid / 128, warp = tid / 32 % 4, lane = tid % 32;
    // The post kernel may be scheduled once every block of this grid has
    // started (it waits for its slabs' adds itself: kg_fb_dq_post).
    if (FUSED) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    int jb = (int)kg_bid_x(), b = (int)kg_bid_z(), hk = (int)kg_bid_y();
    if (FUSED && causal) kg_fb_order(&jb, &b, &hk);
    const int G = Hq / Hkv;
    const int q0 = cu_q[b], Sq = cu_q[b + 1] - q0, k0 = cu_k[b], Sk = cu_k[b + 1] - k0, diag = Sk - Sq;
    const int j0 = jb * FB_BN;
    if (j0 >= Sk) return;   // the whole block leaves, before any barrier
    if (FUSED && tid == 0) kg_fb_clock(0);
    const long long first = causal ? (long long)j0 - diag : 0;   // the first query row that sees key j0
    const int istart = first < 0 ? 0 : first > Sq ? Sq : (int)first, nq = kg_fb_blocks<FUSED, BM>(istart, Sq);
    const int last = Sq > 0 ? (Sq - 1) / BM * BM : 0;   // the fused walk's first block
    // Without a mask and without GQA the fused walk is rotated (kg_fb_rank)
    // over a span of R = FB_ROTATE query blocks (or all nq), when the
    // sequence's nkb key blocks all fit on the device at once.  Measured
    // (B1 S4096 d128 bf16, 7 rounds, time of the plain walk / rotated):
    // H32 span 32 1.074, 64 1.068, 16 0.977; H32:8 span 8 1.003, 4 0.974,
    // 32 0.955, 64 0.976.
    const int R = G > 1 ? 1 : FB_ROTATE < nq ? FB_ROTATE : nq;
    const int nkb = (Sk + FB_BN - 1) / FB_BN, rotated = FUSED && !causal && R > 1 && nkb <= nres;
    const int rot = rotated ? jb % R : 0;
    if (tid == 0) {
        kg_bar_init(kvbar, 1);
        for (int s = 0; s < FB_STAGES; s++) {
            kg_bar_init(full + 8 * s, 1 + 32);   // lane 0's expect_tx and the warp's 32 arrivals
            kg_bar_init(empty + 8 * s, 256);     // every consumer thread (see the loop's end)
        }
        if (FUSED) {
            for (int i = 0; i < 2; i++) {
                kg_bar_init(dqfull + 8 * i, 128 * NP);   // the consumers that write a partial
                kg_bar_init(dqempty + 8 * i, 1);
            }
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    kg_sync();

    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(FUSED && BM != 80 ? 40 : 24));
        if (warp == 0)
            kg_fb_dkdv_produce<D, FUSED, BM>(tq, tdo, tk, tv, LSE, Dsum, stat, sk, sqd, kvbar, full, empty, lane, hk,
                                             G, k0, j0, q0, Sq, Hq, istart, last, nq, rot);
        else if (FUSED && warp == 1) {
            kg_fb_dq_sum<D, BM>(acc, locks, sdq, dqfull, lane, jb, (int)kg_fb_slab<BM>(hk * G, nslab, q0, b, 0),
                                nslab, G, last, nq, rot, rotated ? nkb : 0, R);
            if (lane == 0) kg_fb_clock(5);
        }
        return;
    }

    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(FUSED && BM != 80 ? 232 : 240));
    const int c = wg - 1, kr = j0 + c * 64 + warp * 16 + lane / 4;   // this thread's keys: kr, kr + 8
    const float sl2 = scale * 1.4426950408889634f;
    const int DQR = BM == 80 ? 40 : 32;   // dQ's accumulators a thread: 64 x 64, or dQ^T's 64 x 80
    float dv[D / 2], dk[D / 2], st[BM / 2], dpt[BM / 2], dq[FUSED ? DQR : 1];
    unsigned pt[BM / 16][4], dst[BM / 16][4];   // P^T, dS^T as A fragments
#pragma unroll
    for (int i = 0; i < D / 2; i++) dv[i] = dk[i] = 0.0f;
    kg_bar_wait(kvbar, 0);
    if (FUSED && tid == 128) kg_fb_clock(1);
    const unsigned kc = sk + c * 64 * 128, vc = kc + KVB;   // this warpgroup's 64 keys of K and V
    int s = 0;
    unsigned phase = 0;
    for (int t = 0; t < G * nq; t++) {
        int g, i0;
        kg_fb_step<FUSED, BM>(t, G, nq, istart, last, rot, &g, &i0);
        const unsigned q = sqd + 2 * s * QB, dO = q + QB;
        const float *lse2 = stat + 2 * BM * s, *dsum = lse2 + BM;
        kg_bar_wait(full + 8 * s, phase);
        kg_fa_ss_issue<CH, BM, BF>(st, kc, FB_BN * 128, q, BM * 128);
        kg_fa_ss_issue<CH, BM, BF>(dpt, vc, FB_BN * 128, dO, BM * 128);
        kg_wg_wait<1>();
        kg_wg_touch<BM / 2>(st);
        if (causal && j0 + c * 64 + 63 > i0 + diag) kg_fb_mask_t<BM>(st, i0, kr, diag, lane);
        if (FUSED && !causal && j0 + c * 64 + 63 >= Sk) kg_fb_mask_keys<BM>(st, kr, Sk);
        kg_fb_p_cols<BM>(st, lse2, sl2, lane);
        if (!FUSED) {
            kg_fa_to_p<BM, BF>(st, pt);
            kg_fa_rs_issue<BM / 16, D, BF>(dv, pt, dO, BM * 128);
            kg_wg_wait<1>();
            kg_wg_touch<BM / 2>(dpt);
            kg_fb_ds_cols<BM>(dpt, st, dsum, lane);
            kg_fa_to_p<BM, BF>(dpt, dst);
            kg_fa_rs_issue<BM / 16, D, BF>(dk, dst, q, BM * 128);
            kg_wg_wait<0>();
            kg_wg_touch<D / 2>(dv);
            kg_wg_touch<D / 2>(dk);
        } else {
            // P and dS both before any product that reads them, so that
            // S^T and dP^T in fp32 are gone before dQ's accumulators are
            // live (the loop fits its registers).  dS^T of both consumers
            // goes to buffer t % 2 (the other may still feed a dQ product
            // of step t - 1), under dV += P^T·dO; then dQ's product (A: a
            // chunk of dS's rows, B: a chunk of K's columns; see NP) and
            // dK += dS^T·Q (A: registers); the dQ partial goes to shared
            // memory while dK runs.
            const int mine = NP == 2 || (t & 1) == c, ub = t % NB, use = t / NB;
            kg_wg_wait<0>();
            kg_wg_touch<BM / 2>(dpt);
            kg_fb_ds_cols<BM>(dpt, st, dsum, lane);
            kg_fa_to_p<BM, BF>(st, pt);
            kg_fa_to_p<BM, BF>(dpt, dst);
            kg_fa_rs_issue<BM / 16, D, BF>(dv, pt, dO, BM * 128);
            const unsigned sdsb = sds + (t & 1) * FB_DS_BYTES(BM);
            if (BM == 80) kg_fb_put_ds_t(dst, sdsb, c, warp, lane);
            else kg_fb_put_ds<BM>(dst, sdsb, c, warp, lane);
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            asm volatile("bar.sync 1, 256;" ::: "memory");
            if (BM == 80) kg_fb_dqt_issue<BF>(dq, sdsb, sk + c * FB_BN * 128);
            else if (mine)
                kg_fb_dq_issue<BF>(dq, sdsb + (BM == 128 ? c : 0) * FB_BN * 128, sk + (D == 128 ? c : 0) * FB_BN * 128);
            kg_fa_rs_issue<BM / 16, D, BF>(dk, dst, q, BM * 128);
            kg_wg_wait<1>();
            kg_wg_touch<D / 2>(dv);
            if (mine) {
                kg_wg_touch<DQR>(dq);
                kg_bar_wait(dqempty + 8 * ub, (use & 1) ^ 1);   // the dQ warp has read step t - NB's partial
                if (BM == 80) kg_fb_put_dq_t(dq, sdq + ub * FB_DQ_PART_BYTES(BM, D), 64 * c, warp, lane);
                else
                    kg_fb_put_dq<D>(dq, sdq + ub * FB_DQ_PART_BYTES(BM, D), BM == 128 ? 64 * c : 0,
                                    D == 128 ? 64 * c : 0, warp, lane);
                asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
                kg_bar_arrive(dqfull + 8 * ub);
            }
            kg_wg_wait<0>();
            kg_wg_touch<D / 2>(dk);
        }
        // Every thread arrives after its own reads of the stage's LSE and
        // Dsum (plain loads the producer warp's next stores must follow);
        // with one arrival per warp after __syncwarp, racecheck reported
        // those stores racing with the loads, and it measured 1.9% slower.
        kg_bar_arrive(empty + 8 * s);
        if (++s == FB_STAGES) s = 0, phase ^= 1;
    }
    if (FUSED && tid == 128) kg_fb_clock(2);
    if (FB_EPI_V4) {   // Dh % 8 == 0 on this path (TMA reads Q's rows), and kgate's outputs are 16-byte aligned
        kg_fb_store_v4<D, BF>(dk, scale, dK, k0, kr, Sk, Hkv, hk, Dh, lane);
        kg_fb_store_v4<D, BF>(dv, 1.0f, dV, k0, kr, Sk, Hkv, hk, Dh, lane);
    } else {
        kg_fb_store<D, BF>(dk, scale, dK, k0, kr, Sk, Hkv, hk, Dh, lane);
        kg_fb_store<D, BF>(dv, 1.0f, dV, k0, kr, Sk, Hkv, hk, Dh, lane);
    }
    if (FUSED && tid % 128 == 0) kg_fb_clock(2 + wg);
}

// The body of kg_attn_bwd_dq_sm90_d<D>_<dt> (see the section comment).
template <int D, int BF>
__device__ static inline void kg_fb_dq(const kg_tmap *tq, const kg_tmap *tdo, const kg_tmap *tk, const kg_tmap *tv,
                                       const float *LSE, const float *Dsum, kg_u16 *dQ, const int *cu_q, const int *cu_k,
                                       int Hq, int Hkv, int Dh, float scale, int causal) {
    const int BN = FB_DQ_BN, CH = D / 64, QB = FA_Q_BYTES(D), KVB = FB_DQ_KV_BYTES(D);
    extern __shared__ unsigned char kg_dsmem[];
    const unsigned base = (kg_smem_addr(kg_dsmem) + 1023u) & ~1023u;
    const unsigned sq = base, skv = sq + 2 * QB;                  // Q, dO; stage s: K at skv + 2s·KVB, V after it
    const unsigned qbar = skv + 2 * FB_STAGES * KVB, full = qbar + 8, empty = full + 8 * FB_STAGES;
    const int tid = (int)kg_tid(), wg = tid / 128, warp = tid / 32 % 4, lane = tid % 32;
    const int b = (int)kg_bid_z(), h = (int)kg_bid_y(), hk = h / (Hq / Hkv);
    const int q0 = cu_q[b], Sq = cu_q[b + 1] - q0, k0 = cu_k[b], Sk = cu_k[b + 1] - k0, diag = Sk - Sq;
    const int i0 = (int)(kg_grid_x() - 1 - kg_bid_x()) * FA_BM;
    if (i0 >= Sq) return;   // the whole block leaves, before any barrier
    const int rows = Sq - i0 < FA_BM ? Sq - i0 : FA_BM;
    const long long ke = causal ? (long long)i0 + rows + diag : (long long)Sk;
    const int nb = ke <= 0 ? 0 : (int)((ke + BN - 1) / BN);   // key blocks any row of the tile sees
    if (tid == 0) {
        kg_bar_init(qbar, 1);
        for (int s = 0; s < FB_STAGES; s++) {
            kg_bar_init(full + 8 * s, 1);
            kg_bar_init(empty + 8 * s, 8);   // the 8 consumer warps
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    kg_sync();

    if (wg == 0) {   // producer: one thread issues every copy
        asm volatile("setmaxnreg.dec.sync.aligned.u32 24;");
        if (tid != 0) return;
        kg_bar_expect(qbar, 2 * QB);
        for (int c = 0; c < CH; c++) {
            kg_tma_load3(sq + c * FA_BM * 128, tq, 64 * c, h, q0 + i0, qbar);
            kg_tma_load3(sq + QB + c * FA_BM * 128, tdo, 64 * c, h, q0 + i0, qbar);
        }
        int s = 0;
        unsigned phase = 0;
        for (int kb = 0; kb < nb; kb++) {
            const unsigned ks = skv + 2 * s * KVB;
            kg_bar_wait(empty + 8 * s, phase ^ 1);
            kg_bar_expect(full + 8 * s, 2 * KVB);
            for (int c = 0; c < CH; c++) {
                kg_tma_load3(ks + c * BN * 128, tk, 64 * c, hk, k0 + kb * BN, full + 8 * s);
                kg_tma_load3(ks + KVB + c * BN * 128, tv, 64 * c, hk, k0 + kb * BN, full + 8 * s);
            }
            if (++s == FB_STAGES) s = 0, phase ^= 1;
        }
        return;
    }

    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;");
    const int c = wg - 1, r_lo = i0 + c * 64 + warp * 16 + lane / 4;   // this thread's rows: r_lo, r_lo + 8
    const float sl2 = scale * 1.4426950408889634f, ninf = kg_neg_inf();
    float lse2[2], dsum[2];
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
        const int r = r_lo + 8 * hh;
        const float lse = r < Sq ? LSE[(kg_i64)(q0 + r) * Hq + h] : ninf;
        lse2[hh] = kg_fb_lse2(lse);
        dsum[hh] = r < Sq ? Dsum[(kg_i64)(q0 + r) * Hq + h] : 0.0f;
    }
    float dq[D / 2], sc[BN / 2], dp[BN / 2];
    unsigned ds[BN / 16][4];   // dS as the A fragments of dQ += dS·K
#pragma unroll
    for (int i = 0; i < D / 2; i++) dq[i] = 0.0f;
    kg_bar_wait(qbar, 0);
    const unsigned qs = sq + c * 64 * 128, dos = qs + QB;   // this warpgroup's 64 rows of Q and dO
    const int jfull = i0 + c * 64 + diag;                    // causal: the last key its first row sees
    int s = 0, sp = 0;                                       // sp: the stage of the dQ product in flight
    unsigned phase = 0;
    for (int kb = 0; kb < nb; kb++) {
        const unsigned ks = skv + 2 * s * KVB;
        kg_bar_wait(full + 8 * s, phase);
        kg_fa_ss_issue<CH, BN, BF>(sc, qs, FA_BM * 128, ks, BN * 128);
        kg_fa_ss_issue<CH, BN, BF>(dp, dos, FA_BM * 128, ks + KVB, BN * 128);
        kg_wg_wait<1>();   // block kb-1's dQ product and block kb's scores
        kg_wg_touch<BN / 2>(sc);
        if (kb > 0) {
            kg_wg_touch<D / 2>(dq);
            kg_fa_release(empty + 8 * sp, lane);
        }
        kg_fa_mask<BN>(sc, kb * BN, Sk, causal, jfull, r_lo, diag, lane);
        kg_fb_p_rows<BN>(sc, lse2, sl2);
        kg_wg_wait<0>();
        kg_wg_touch<BN / 2>(dp);
        kg_fb_ds_rows<BN>(dp, sc, dsum);
        kg_fa_to_p<BN, BF>(dp, ds);
        kg_fa_rs_issue<BN / 16, D, BF>(dq, ds, ks, BN * 128);
        sp = s;
        if (++s == FB_STAGES) s = 0, phase ^= 1;
    }
    kg_wg_wait<0>();
    kg_wg_touch<D / 2>(dq);
    if (nb > 0) kg_fa_release(empty + 8 * sp, lane);
    kg_fb_store<D, BF>(dq, scale, dQ, q0, r_lo, Sq, Hq, h, Dh, lane);
}

// kg_fb_dq_post's rows of a slab that is not transposed (M 64 or 128), where
// Dh % 4 == 0: four columns a thread at a time, one 16-byte load (the pair
// swizzle XORs pair indices by multiples of 4, so pairs 2p and 2p + 1 stay
// side by side) and one 8-byte store; every load of the thread is issued
// before its first store.  The same products as the pairs below: the same dQ.
template <int D, int BF, int M>
__device__ static inline void kg_fb_dq_post_quads(const float *slab, kg_u16 *dQ, int q0, int i0, int Sq, int diag,
                                                  int Hq, int h, int Dh, int keys, float scale, int causal) {
    constexpr int QT = M * D / 4 / 256;   // a thread's quads (M, D in {64, 128})
    const int tid = (int)kg_tid();
    float4 v[QT];
#pragma unroll
    for (int j = 0; j < QT; j++) {
        const int e = tid + 256 * j, r = e / (D / 4), col = 4 * (e % (D / 4));
        v[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (i0 + r < Sq && col < Dh) v[j] = *(const float4 *)(slab + kg_fb_slab_at(r, col, D));
    }
#pragma unroll
    for (int j = 0; j < QT; j++) {
        const int e = tid + 256 * j, r = e / (D / 4), col = 4 * (e % (D / 4)), i = i0 + r;
        if (i >= Sq || col >= Dh) continue;
        const bool seen = keys && (!causal || i + diag >= 0);   // else 0: the slab is unwritten
        const float4 w = seen ? make_float4(v[j].x * scale, v[j].y * scale, v[j].z * scale, v[j].w * scale)
                              : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        const unsigned lo = BF ? kg_wg_pack(w.x, w.y, kg_bf16()) : kg_wg_pack(w.x, w.y, kg_f16());
        const unsigned hi = BF ? kg_wg_pack(w.z, w.w, kg_bf16()) : kg_wg_pack(w.z, w.w, kg_f16());
        *(uint2 *)(dQ + ((kg_i64)(q0 + i) * Hq + h) * Dh + col) = make_uint2(lo, hi);
    }
}

// The key blocks that add their dQ partials into the slab of query rows i0
// .. i0 + M - 1 (kg_fb_dq_sum; its lock counts them): every key block of the
// sequence without a mask; with one, blocks 0 .. j, j the last whose first
// key a row of the slab sees (a block's walk starts at the query block of
// istart, kg_fb_dkdv).
template <int M>
__device__ static __forceinline__ int kg_fb_adders(int i0, int Sk, int diag, int causal) {
    const int nkb = (Sk + FB_BN - 1) / FB_BN;
    const long long e = (long long)i0 + M - 1 + diag;   // the last key the slab's last row may see
    if (!causal || nkb == 0) return nkb;
    if (e < 0) return 0;
    return e / FB_BN + 1 < nkb ? (int)(e / FB_BN + 1) : nkb;
}

// The fused pass's last step: dQ = scale · the slab sums (kg_fb_slab), into
// the input type, for rows and columns inside the sequence and Dh; a row
// that sees no key (no key block wrote its slab) gets 0.  M rows a slab (the
// fused entry's BM; 80: kg_fb_slab_at_t's layout).  Grid (ceil(longest Sq /
// M), Hq, B), 256 threads: one slab per block.  Launched early (FB_POST_EARLY:
// it may run beside the fused pass), a block first waits until the slab's
// lock counts all its adders (kg_fb_adders; acquire, so that the adds, which
// their adder fenced before its release, are seen here), or, when the adds
// take no locks (FB_DQ_ATOMIC), for the fused pass to finish.
template <int D, int BF, int M>
__device__ static inline void kg_fb_dq_post(const float *acc, const int *locks, kg_u16 *dQ, const int *cu_q,
                                            const int *cu_k, int Hq, int Dh, int nslab, float scale, int causal) {
    static_assert(M != 80 || D == 128, "80-row slabs are head dim 128's");
    const int b = (int)kg_bid_z(), h = (int)kg_bid_y(), i0 = (int)kg_bid_x() * M;
    const int q0 = cu_q[b], Sq = cu_q[b + 1] - q0, Sk = cu_k[b + 1] - cu_k[b], diag = Sk - Sq;
    if (i0 >= Sq) return;
    const kg_i64 si = kg_fb_slab<M>(h, nslab, q0, b, i0);
    if (FB_DQ_ATOMIC) {
        asm volatile("griddepcontrol.wait;" ::: "memory");
    } else {
        const int n = kg_fb_adders<M>(i0, Sk, diag, causal);
        if (kg_tid() == 0 && n > 0)
            while (kg_fb_lock_read(locks + si) < n) __nanosleep(128);
        __syncthreads();
    }
    const float *slab = acc + si * M * D;
    // A transposed slab (80 rows) goes through shared memory first, column
    // col at tile[col·81] (81: the reads below meet 2-way bank conflicts,
    // not 32-way), so that both its loads and dQ's stores are coalesced.
    __shared__ float tile[M == 80 ? D * 81 : 1];
    if (M == 80) {
        for (int e = (int)kg_tid(); e < M * D / 4; e += 256) {
            const float4 v = ((const float4 *)slab)[e];
            // four rows r .. r + 3 of col (the swizzle is its own inverse)
            const int col = 4 * e / M, r = kg_fb_slab_at_t(4 * e % M, col) - col * 80;
            float *t = tile + col * 81 + r;
            t[0] = v.x, t[1] = v.y, t[2] = v.z, t[3] = v.w;
        }
        __syncthreads();
    }
    if (M != 80 && Dh % 4 == 0) {
        kg_fb_dq_post_quads<D, BF, M>(slab, dQ, q0, i0, Sq, diag, Hq, h, Dh, Sk > 0, scale, causal);
        return;
    }
    for (int e = (int)kg_tid(); e < M * Dh / 2; e += 256) {
        const int r = e / (Dh / 2), col = 2 * (e % (Dh / 2)), i = i0 + r;
        if (i >= Sq) break;
        const int seen = Sk > 0 && (!causal || i + diag >= 0);
        const float s0 = M == 80 ? tile[col * 81 + r] : slab[kg_fb_slab_at(r, col, D)];
        const float s1 = M == 80 ? tile[(col + 1) * 81 + r] : slab[kg_fb_slab_at(r, col + 1, D)];
        const float v0 = seen ? s0 * scale : 0.0f, v1 = seen ? s1 * scale : 0.0f;
        *(unsigned *)(dQ + ((kg_i64)(q0 + i) * Hq + h) * Dh + col) =
            BF ? kg_wg_pack(v0, v1, kg_bf16()) : kg_wg_pack(v0, v1, kg_f16());
    }
}

// FB_CLK: once the fused grid is complete, one line per fused block that
// ran ("fbclk" index SM clock0 .. clock5; a block that left at once has no
// start), then the clocks zeroed for the next launch, then "fbclk end" and
// the count of lines (printf's buffer may drop some).
__device__ static inline void kg_fb_post_clocks() {
#if FB_CLK
    volatile unsigned long long(*c)[FB_CLK_N] = kg_fb_clk;
    int n = 0;
    for (int i = 0; i < FB_CLK_N; i++) {
        if (c[0][i] == 0) continue;
        n++;
        printf("fbclk %d %llu %llu %llu %llu %llu %llu %llu\n", i, c[FB_CLK_SLOTS][i], c[0][i], c[1][i], c[2][i],
               c[3][i], c[4][i], c[5][i]);
        for (int k = 0; k <= FB_CLK_SLOTS; k++) c[k][i] = 0;
    }
    printf("fbclk end %d\n", n);
#endif
}

// The post kernel's end, in every block: the last block to finish (a count
// after the slabs' locks, zeroed with them) waits for the fused pass to
// complete, so that the post grid ends after it and what follows in the
// stream (a timer's event, a copy of dK) follows both.
__device__ static inline void kg_fb_dq_post_done(int *count) {
    if (kg_tid() != 0) return;
    if (atomicAdd(count, 1) == (int)(gridDim.x * gridDim.y * gridDim.z) - 1) {
        asm volatile("griddepcontrol.wait;" ::: "memory");
        kg_fb_post_clocks();
    }
}

#define KG_FB_SM90_ENTRY(D, sfx, BF)                                                                      \
    KG_ATOMICS(kg_attn_bwd_dkdv_sm90_d##D##_##sfx, 0)                                                    \
    KG_ATOMICS(kg_attn_bwd_dq_sm90_d##D##_##sfx, 0)                                                      \
    extern "C" __global__ void __launch_bounds__(384, 1)                                                 \
    kg_attn_bwd_dkdv_sm90_d##D##_##sfx(const __grid_constant__ kg_tmap tq, const __grid_constant__ kg_tmap tdo, \
                                       const __grid_constant__ kg_tmap tk, const __grid_constant__ kg_tmap tv,  \
                                       const float *LSE, const float *Dsum, kg_u16 *dK, kg_u16 *dV,           \
                                       const int *cu_q, const int *cu_k, int Hq, int Hkv, int Dh, float scale, \
                                       int causal)                                                         \
    {                                                                                                    \
        kg_fb_dkdv<D, BF, 0, FB_BM>(&tq, &tdo, &tk, &tv, LSE, Dsum, dK, dV, 0, 0, 0, cu_q, cu_k, Hq, Hkv, Dh,   \
                                    scale, causal, 0);                                                   \
    }                                                                                                    \
    extern "C" __global__ void __launch_bounds__(384, 1)                                                 \
    kg_attn_bwd_dq_sm90_d##D##_##sfx(const __grid_constant__ kg_tmap tq, const __grid_constant__ kg_tmap tdo, \
                                     const __grid_constant__ kg_tmap tk, const __grid_constant__ kg_tmap tv,  \
                                     const float *LSE, const float *Dsum, kg_u16 *dQ, const int *cu_q,        \
                                     const int *cu_k, int Hq, int Hkv, int Dh, float scale, int causal)       \
    {                                                                                                    \
        kg_fb_dq<D, BF>(&tq, &tdo, &tk, &tv, LSE, Dsum, dQ, cu_q, cu_k, Hq, Hkv, Dh, scale, causal);       \
    }
KG_FB_SM90_ENTRY(64, f16, 0)
KG_FB_SM90_ENTRY(64, bf16, 1)
KG_FB_SM90_ENTRY(128, f16, 0)
KG_FB_SM90_ENTRY(128, bf16, 1)

// The fused backward's entries: kg_attn_bwd_fused_sm90_<tag>_<dt> (dK, dV
// and the dQ slabs; the locks zeroed before it) and
// kg_attn_bwd_dq_post_sm90_<tag>_<dt> (dQ from the slabs), M query rows a
// step: tags d64 and d128 (FB_FBM(D)) and d128nc (FB_NC_BM), which kgate
// runs at head dim 128 without a mask only.
#define KG_FB_FUSED_ENTRY(D, tag, M, sfx, BF)                                                              \
    KG_ATOMICS(kg_attn_bwd_fused_sm90_##tag##_##sfx, FB_DQ_ATOMIC)                                       \
    KG_ATOMICS(kg_attn_bwd_dq_post_sm90_##tag##_##sfx, 0)                                                \
    extern "C" __global__ void __launch_bounds__(384, 1)                                                 \
    kg_attn_bwd_fused_sm90_##tag##_##sfx(const __grid_constant__ kg_tmap tq, const __grid_constant__ kg_tmap tdo, \
                                         const __grid_constant__ kg_tmap tk, const __grid_constant__ kg_tmap tv,  \
                                         const float *LSE, const float *Dsum, kg_u16 *dK, kg_u16 *dV,          \
                                         float *acc, int *locks, int nslab, const int *cu_q, const int *cu_k,    \
                                         int Hq, int Hkv, int Dh, float scale, int causal, int nres)      \
    {                                                                                                    \
        kg_fb_dkdv<D, BF, 1, M>(&tq, &tdo, &tk, &tv, LSE, Dsum, dK, dV, acc, locks, nslab, cu_q, cu_k, Hq, Hkv, \
                                Dh, scale, causal, nres);                                                \
    }                                                                                                    \
    extern "C" __global__ void __launch_bounds__(256)                                                    \
    kg_attn_bwd_dq_post_sm90_##tag##_##sfx(const float *acc, int *locks, kg_u16 *dQ, const int *cu_q,        \
                                           const int *cu_k, int Hq, int Dh, int nslab, float scale, int causal) \
    {                                                                                                    \
        kg_fb_dq_post<D, BF, M>(acc, locks, dQ, cu_q, cu_k, Hq, Dh, nslab, scale, causal);               \
        kg_fb_dq_post_done(locks + (kg_i64)Hq * nslab);                                                  \
    }
#if FB_BM == 64   // the entries exist whenever they can (the instruction checks see them); FB_FUSED runs them
KG_FB_FUSED_ENTRY(64, d64, FB_FBM(64), f16, 0)
KG_FB_FUSED_ENTRY(64, d64, FB_FBM(64), bf16, 1)
KG_FB_FUSED_ENTRY(128, d128, FB_FBM(128), f16, 0)
KG_FB_FUSED_ENTRY(128, d128, FB_FBM(128), bf16, 1)
KG_FB_FUSED_ENTRY(128, d128nc, FB_NC_BM, f16, 0)
KG_FB_FUSED_ENTRY(128, d128nc, FB_NC_BM, bf16, 1)
#endif
#endif // KG_SM90

// ===== Low precision: fp8 and MX, portable path =====
//
// Element formats, `fmt` at run time (codes are bytes; FP4 codes are nibbles):
//   0 E4M3 OCP "fn"  bias 7,  max 448 (0x7e), min subnormal 2^-9,  NaN 0x7f/0xff, no inf
//   1 E5M2 OCP       bias 15, max 57344 (0x7b), min subnormal 2^-16, inf 0x7c/0xfc,
//                    NaN 0x7d..0x7f/0xfd..0xff
//   2 E4M3 FNUZ      bias 8,  max 240 (0x7f), min subnormal 2^-10, NaN 0x80 only, no -0/inf
//   3 E5M2 FNUZ      bias 16, max 57344 (0x7f), min subnormal 2^-17, NaN 0x80 only, no -0/inf
//   4 E2M1 (FP4)     bias 1,  max 6 (0x7), sign bit 3, no inf/NaN; stored two per byte,
//                    element 2j in the low nibble, 2j+1 in the high nibble
// E8M0 (the MX scale byte): 2^(c-127), c = 0xff is NaN.

#define QZ_THREADS 256   // kg_quantize's block
#define QG_BK 32         // K step of the quantized GEMM tile

// Fraction bits, exponent bias, largest finite magnitude code and sign bit of a format.
__device__ static inline int kg_q_mbits(int fmt)
{
    return fmt == 0 || fmt == 2 ? 3 : fmt == 4 ? 1 : 2;
}
__device__ static inline int kg_q_bias(int fmt)
{
    return fmt == 0 ? 7 : fmt == 1 ? 15 : fmt == 2 ? 8 : fmt == 3 ? 16 : 1;
}
__device__ static inline unsigned kg_q_maxcode(int fmt)
{
    return fmt == 0 ? 0x7eu : fmt == 1 ? 0x7bu : fmt == 4 ? 0x7u : 0x7fu;
}
__device__ static inline unsigned kg_q_signbit(int fmt) { return fmt == 4 ? 0x8u : 0x80u; }

// 2^k exactly, for -149 <= k <= 127 (subnormal below -126).
__device__ static inline float kg_pow2(int k)
{
    return kg_f32_from_bits(k >= -126 ? (unsigned)(k + 127) << 23 : 1u << (k + 149));
}

// a / b, IEEE round to nearest (CUDA: explicit; HIP divides correctly rounded by default).
__device__ static inline float kg_div_rn(float a, float b)
{
#if defined(KG_CUDA)
    return __fdiv_rn(a, b);
#else
    return a / b;
#endif
}

// The exact value of `code` (the low 8 bits; FP4: the low 4): NaN codes give
// the quiet NaN 0x7fc00000, E5M2 0x7c/0xfc give +-inf.
__device__ static inline float kg_q_decode(int fmt, unsigned code)
{
    const int mb = kg_q_mbits(fmt), bias = kg_q_bias(fmt);
    const unsigned sbit = kg_q_signbit(fmt), mag = code & (sbit - 1);
    const bool fnuz = fmt == 2 || fmt == 3;
    if (fnuz ? (code & 0xffu) == 0x80u : fmt == 0 ? mag == 0x7fu : fmt == 1 && mag > 0x7cu)
        return kg_f32_from_bits(0x7fc00000u);
    const unsigned eb = mag >> mb, mm = mag & ((1u << mb) - 1);
    float v = eb == 0 ? (float)mm * kg_pow2(1 - bias - mb)
                      : (float)(mm | (1u << mb)) * kg_pow2((int)eb - bias - mb);
    if (fmt == 1 && mag == 0x7cu) v = kg_f32_from_bits(0x7f800000u);
    return (code & sbit) ? -v : v;
}

// The value of an E8M0 scale byte: 2^(c-127) (c = 0: the subnormal 2^-127), 0xff NaN.
__device__ static inline float kg_e8m0_decode(unsigned c)
{
    c &= 0xffu;
    return kg_f32_from_bits(c == 0xffu ? 0x7fc00000u : c ? c << 23 : 0x00400000u);
}

// Scale i of a scale array: float (mx = 0) or E8M0 bytes (mx = 1).
__device__ static inline float kg_q_scale(const void *S, kg_i64 i, int mx)
{
    return mx ? kg_e8m0_decode(((const unsigned char *)S)[i]) : ((const float *)S)[i];
}

// The code of v, software path: round to nearest even from the exact fp32 v,
// saturating (finite overflow and OCP/FP4 +-inf give +-max; FNUZ inf gives NaN
// 0x80).  NaN gives 0x7f (E4M3), 0x7e (E5M2), 0x80 (FNUZ), 0x7 (FP4: no NaN).
// A value that rounds to zero keeps its sign in OCP formats and FP4 (0x80,
// 0x8); FNUZ zero is 0x00.  The rounding runs with an unbounded exponent, so
// the tie between the largest finite and the next power of the grid (464 for
// E4M3, 248 FNUZ, 61440 E5M2, 7 FP4) is even-rounded first, then clamped.
__device__ static inline unsigned kg_q_encode_sw(int fmt, float v)
{
    const int mb = kg_q_mbits(fmt), emin = 1 - kg_q_bias(fmt);
    const bool fnuz = fmt == 2 || fmt == 3;
    const unsigned u = kg_bits_from_f32(v), ax = u & 0x7fffffffu;
    if (ax > 0x7f800000u) return fnuz ? 0x80u : fmt == 0 ? 0x7fu : fmt == 1 ? 0x7eu : 0x7u;
    if (ax == 0x7f800000u && fnuz) return 0x80u;
    // |v| = sig * 2^(E-23); keep mb fraction bits at exponent max(E, emin): drop s bits.
    const int ef = (int)(ax >> 23), E = (ef ? ef : 1) - 127;
    const unsigned sig = (ax & 0x7fffffu) | (ef ? 0x800000u : 0u);
    int s = 23 - mb + (E < emin ? emin - E : 0);
    if (s > 25) s = 25;   // sig < 2^24 is below half a unit: rounds to 0 all the same
    unsigned q = sig >> s;
    const unsigned rem = sig & ((1u << s) - 1), half = 1u << (s - 1);
    if (rem > half || (rem == half && (q & 1u))) q++;
    // Codes grow with the magnitude; a carry out of the fraction bumps the exponent.
    unsigned c = E < emin ? q : ((unsigned)(E - emin) << mb) + q;
    if (c > kg_q_maxcode(fmt)) c = kg_q_maxcode(fmt);
    if (fnuz && c == 0) return 0u;
    return c | (u >> 31 ? kg_q_signbit(fmt) : 0u);
}

// The code of v, as kg_q_encode_sw.  On sm_89+ E4M3 and E5M2 (OCP) take the
// hardware conversion cvt.rn.satfinite (same RNE and saturation; NaN stays on
// the software path so that it gives the codes above).
__device__ static inline unsigned kg_q_encode(int fmt, float v)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    if ((fmt == 0 || fmt == 1) && v == v) {
        unsigned short d;   // d[15:8] = cvt(first source), d[7:0] = cvt(second source)
        if (fmt == 0) asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(d) : "f"(0.0f), "f"(v));
        else asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(d) : "f"(0.0f), "f"(v));
        return d & 0xffu;
    }
#endif
    return kg_q_encode_sw(fmt, v);
}

// Quantize (entry point kg_quantize; QZ_THREADS threads, grid.x = batch*nbr*nbc,
// grid-strided).  X is batch x rows x cols fp32, contiguous.  Each matrix is cut
// into scale blocks of gr x gc (the last ones partial); nbr = ceil(rows/gr),
// nbc = ceil(cols/gc), block (bi, bj) of matrix z has index b = (z*nbr + bi)*nbc + bj.
// amax = max |x| over the block (order-free), NaN if any element is NaN: then
// the block's scale is NaN (S NaN, E 0xff) and so is every code.
//   rule 0 (amax scaling): fmax = 448, 57344, 240, 57344 (6 for FP4) by fmt;
//     scale = fmax / max(amax, 1e-12) and S[b] = 1 / scale (IEEE divisions);
//     q = encode(x * scale) (one fp32 multiply).  E is not written.
//   rule 1 (MX, OCP) / rule 2 (MX, round up): e = floor(log2 amax) - emax_elem
//     (emax_elem = 8, 15, 7, 15, 2 by fmt: the exponent of fmax), from amax's
//     fp32 exponent field; rule 2 adds 1 when amax > fmax * 2^e (the significand
//     of amax above fmax's).  amax zero or subnormal gives e = -127 (it would
//     clamp there anyway), amax inf e = 127; e is clamped to [-127, 127].
//     E[b] = e + 127, q = encode(x * 2^-e) (exact but for underflow).  S is not written.
// Q: fmt 0..3 one byte per element at (z*rows + r)*cols + c; FP4 rows of
// (cols+1)/2 bytes, element c in byte (z*rows + r)*((cols+1)/2) + c/2, low
// nibble for even c, a row's unused last nibble 0; one thread writes a whole
// byte, so FP4 needs gc even (or gc >= cols) for blocks not to share bytes.
KG_ATOMICS(kg_quantize, 0)
extern "C" __global__ void KG_LAUNCH_BOUNDS(QZ_THREADS)
kg_quantize(const float *X, unsigned char *Q, float *S, unsigned char *E, int batch, int rows,
            int cols, int gr, int gc, int fmt, int rule)
{
    __shared__ unsigned red[QZ_THREADS];   // |x| as bits: NaN > inf > every finite value
    const int tid = (int)kg_tid(), nbr = (rows + gr - 1) / gr, nbc = (cols + gc - 1) / gc;
    const kg_i64 nb = (kg_i64)batch * nbr * nbc, rb = fmt == 4 ? (cols + 1) / 2 : cols;
    const float fmax = kg_q_decode(fmt, kg_q_maxcode(fmt));
    for (kg_i64 b = kg_bid_x(); b < nb; b += kg_grid_x()) {
        const kg_i64 z = b / ((kg_i64)nbr * nbc);
        const int r0 = (int)(b / nbc % nbr) * gr, c0 = (int)(b % nbc) * gc;
        const int h = rows - r0 < gr ? rows - r0 : gr, w = cols - c0 < gc ? cols - c0 : gc;
        const float *x = X + (z * rows + r0) * cols + c0;
        unsigned char *q = Q + (z * rows + r0) * rb;
        unsigned m = 0;
        for (kg_i64 e = tid; e < (kg_i64)h * w; e += QZ_THREADS) {
            const unsigned a = kg_bits_from_f32(x[e / w * cols + e % w]) & 0x7fffffffu;
            m = a > m ? a : m;
        }
        red[tid] = m;
        kg_sync();
        for (int s = QZ_THREADS / 2; s > 0; s /= 2) {
            if (tid < s && red[tid + s] > red[tid]) red[tid] = red[tid + s];
            kg_sync();
        }
        const float amax = kg_f32_from_bits(red[0]);
        float mul;
        if (rule == 0) {
            mul = kg_div_rn(fmax, amax > 1e-12f || amax != amax ? amax : 1e-12f);
            if (tid == 0) S[b] = kg_div_rn(1.0f, mul);
        } else {
            const unsigned ua = kg_bits_from_f32(amax), uf = kg_bits_from_f32(fmax);
            const bool nan = ua > 0x7f800000u;   // the scale byte 0xff, every value NaN
            int e = -127;   // amax zero or subnormal: e would clamp to -127 anyway
            if (ua >> 23) {   // amax inf: log2 = +inf, e clamps to 127
                e = ua >> 23 == 0xffu ? 127 : (int)(ua >> 23) - (int)(uf >> 23);
                if (rule == 2 && (ua & 0x7fffffu) > (uf & 0x7fffffu)) e++;
                e = e < -127 ? -127 : e > 127 ? 127 : e;
            }
            mul = nan ? amax : kg_pow2(-e);
            if (tid == 0) E[b] = nan ? 0xffu : (unsigned char)(e + 127);
        }
        if (fmt == 4) {   // one thread per byte: elements c, c+1 (c even)
            const int wb = (w + 1) / 2;
            for (kg_i64 e = tid; e < (kg_i64)h * wb; e += QZ_THREADS) {
                const kg_i64 r = e / wb;
                const int c = 2 * (int)(e % wb);
                unsigned v = kg_q_encode(4, x[r * cols + c] * mul);
                if (c + 1 < w) v |= kg_q_encode(4, x[r * cols + c + 1] * mul) << 4;
                q[r * rb + (c0 + c) / 2] = (unsigned char)v;
            }
        } else {
            for (kg_i64 e = tid; e < (kg_i64)h * w; e += QZ_THREADS) {
                const kg_i64 r = e / w;
                const int c = (int)(e % w);
                q[r * rb + c0 + c] = (unsigned char)kg_q_encode(fmt, x[r * cols + c] * mul);
            }
        }
        kg_sync();   // red is rewritten by the next block
    }
}

// Element k of the code row `row`, decoded by the table lut (FP4: the byte
// holding it, shifted; lut[c] decodes c & 15, so the high bits do not matter).
__device__ static inline float kg_q_elem(const float *lut, const unsigned char *row, int k, int fp4)
{
    return lut[fp4 ? row[k >> 1] >> ((k & 1) * 4) : row[k]];
}

// Quantized GEMM tile: C[m][n] for rows [m0, m0+GEMM_BM) clipped to M and
// columns [n0, n0+GEMM_BN) clipped to N, tiles and thread map as
// kg_gemm_portable.  A is [.][K] codes (row m at A + m*rb), B [N][K] codes,
// rb = K bytes (FP4: (K+1)/2, packed).  K is cut into nkb = ceil(K/gck) blocks;
//   P_kb    = sum_{k in block kb, ascending} dec(A[m][k]) * dec(B[n][k])   (P = fma(a, b, P))
//   acc     = fma(P_kb, sa * sb, acc)  for kb = 0, 1, ... (acc starts at +0)
//   C[m][n] = D::st(acc)  (bf16: RNE as kg_f32_to_bf16)
// with sa = SA[(m/gra)*nkb + kb], sb = SB[sb0 + (n/grb)*nkb + kb] (sa * sb an fp32
// product), SA/SB float (mx = 0) or E8M0 bytes (mx = 1).  Any gck >= 1 works: a K step
// never crosses a block (QG_BK = 32 divides the MX and blockwise gck).  Codes
// are decoded through a 256-entry table in shared memory.  K = 0 writes zeros.
template <class D>
__device__ static inline void kg_qgemm_tile(const unsigned char *A, const unsigned char *B,
                                            const void *SA, const void *SB, kg_i64 sb0,
                                            typename D::S *C, int M, int N, int K, int fmt,
                                            int mx, int gra, int grb, int gck, int m0, int n0)
{
    __shared__ float as[QG_BK][GEMM_BM + 1];
    __shared__ float bs[QG_BK][GEMM_BN + 1];
    __shared__ float lut[256];
    const int tid = (int)kg_tid(), tx = tid % GEMM_TX, ty = tid / GEMM_TX, fp4 = fmt == 4;
    const kg_i64 rb = fp4 ? (K + 1) / 2 : K;
    const int nkb = K > 0 ? (K + gck - 1) / gck : 0;
    for (int e = tid; e < 256; e += GEMM_THREADS) lut[e] = kg_q_decode(fmt, fp4 ? e & 15 : e);
    float acc[GEMM_TM][GEMM_TN];
    for (int i = 0; i < GEMM_TM; i++)
        for (int j = 0; j < GEMM_TN; j++) acc[i][j] = 0.0f;

    for (int kb = 0; kb < nkb; kb++) {
        const int kend = K - kb * gck < gck ? K : kb * gck + gck;
        float p[GEMM_TM][GEMM_TN];
        for (int i = 0; i < GEMM_TM; i++)
            for (int j = 0; j < GEMM_TN; j++) p[i][j] = 0.0f;
        for (int k0 = kb * gck; k0 < kend; k0 += QG_BK) {
            const int kn = kend - k0 < QG_BK ? kend - k0 : QG_BK;
            kg_sync();   // lut is built; the last step is done with as, bs
            // Rows past M (N) read as 0; columns past the K block are never read.
            for (int e = tid; e < GEMM_BM * QG_BK; e += GEMM_THREADS) {
                const int mm = e / QG_BK, kk = e % QG_BK, m = m0 + mm;
                if (kk < kn) as[kk][mm] = m < M ? kg_q_elem(lut, A + m * rb, k0 + kk, fp4) : 0.0f;
            }
            for (int e = tid; e < GEMM_BN * QG_BK; e += GEMM_THREADS) {
                const int nn = e / QG_BK, kk = e % QG_BK, n = n0 + nn;
                if (kk < kn) bs[kk][nn] = n < N ? kg_q_elem(lut, B + n * rb, k0 + kk, fp4) : 0.0f;
            }
            kg_sync();
            for (int kk = 0; kk < kn; kk++) {
                float av[GEMM_TM], bv[GEMM_TN];
                for (int i = 0; i < GEMM_TM; i++) av[i] = as[kk][ty + i * GEMM_TY];
                for (int j = 0; j < GEMM_TN; j++) bv[j] = bs[kk][tx + j * GEMM_TX];
                for (int i = 0; i < GEMM_TM; i++)
                    for (int j = 0; j < GEMM_TN; j++) p[i][j] = kg_fma(av[i], bv[j], p[i][j]);
            }
        }
        float sa[GEMM_TM], sb[GEMM_TN];
        for (int i = 0; i < GEMM_TM; i++) {
            const int m = m0 + ty + i * GEMM_TY;
            sa[i] = m < M ? kg_q_scale(SA, (kg_i64)(m / gra) * nkb + kb, mx) : 0.0f;
        }
        for (int j = 0; j < GEMM_TN; j++) {
            const int n = n0 + tx + j * GEMM_TX;
            sb[j] = n < N ? kg_q_scale(SB, sb0 + (kg_i64)(n / grb) * nkb + kb, mx) : 0.0f;
        }
        for (int i = 0; i < GEMM_TM; i++)
            for (int j = 0; j < GEMM_TN; j++) acc[i][j] = kg_fma(p[i][j], sa[i] * sb[j], acc[i][j]);
    }
    for (int i = 0; i < GEMM_TM; i++) {
        const int m = m0 + ty + i * GEMM_TY;
        for (int j = 0; j < GEMM_TN; j++) {
            const int n = n0 + tx + j * GEMM_TX;
            if (m < M && n < N) C[(kg_i64)m * N + n] = D::st(acc[i][j]);
        }
    }
}

// Quantized grouped GEMM, ragged rows (as kg_grouped_rows): A is [sum M][K]
// codes, group g owns rows [offs[g], offs[g+1]); B is [G][N][K] codes (B_g at
// g*N*rb); C is [sum M][N].  Scale of A(m, k): SA[(m/gra)*nkb + k/gck], m the
// global row; of B_g(n, k): SB[g*ceil(N/grb)*nkb + (n/grb)*nkb + k/gck].
// Grid (ceil(N/GEMM_BN), tile_offs[G]); same arithmetic as kg_qgemm_tile.
template <class D>
__device__ static inline void kg_qgrouped(const unsigned char *A, const unsigned char *B,
                                          const void *SA, const void *SB, typename D::S *C,
                                          const int *offs, const int *tile_offs, int G, int N,
                                          int K, int fmt, int mx, int gra, int grb, int gck)
{
    const int y = (int)kg_bid_y();
    if (G <= 0 || y >= tile_offs[G]) return;   // the whole block leaves, before any barrier
    const int g = kg_group_of_tile(tile_offs, G, y);
    const kg_i64 rb = fmt == 4 ? (K + 1) / 2 : K;
    const int nkb = K > 0 ? (K + gck - 1) / gck : 0;
    kg_qgemm_tile<D>(A, B + (kg_i64)g * N * rb, SA, SB, (kg_i64)g * ((N + grb - 1) / grb) * nkb,
                     C, offs[g + 1], N, K, fmt, mx, gra, grb, gck,
                     offs[g] + (y - tile_offs[g]) * GEMM_BM, (int)kg_bid_x() * GEMM_BN);
}

#define KG_QGEMM_ENTRIES(sfx, D)                                                               \
    KG_ATOMICS(kg_qgemm_##sfx, 0)                                                              \
    KG_ATOMICS(kg_qgrouped_##sfx, 0)                                                           \
    extern "C" __global__ void KG_LAUNCH_BOUNDS(GEMM_THREADS)                                 \
    kg_qgemm_##sfx(const unsigned char *A, const unsigned char *B, const void *SA,             \
                   const void *SB, D::S *C, int M, int N, int K, int fmt, int mx, int gra,     \
                   int grb, int gck)                                                           \
    {                                                                                          \
        kg_qgemm_tile<D>(A, B, SA, SB, 0, C, M, N, K, fmt, mx, gra, grb, gck,                  \
                         (int)kg_bid_y() * GEMM_BM, (int)kg_bid_x() * GEMM_BN);                \
    }                                                                                          \
    extern "C" __global__ void KG_LAUNCH_BOUNDS(GEMM_THREADS)                                 \
    kg_qgrouped_##sfx(const unsigned char *A, const unsigned char *B, const void *SA,          \
                      const void *SB, D::S *C, const int *offs, const int *tile_offs, int G,   \
                      int N, int K, int fmt, int mx, int gra, int grb, int gck)                \
    {                                                                                          \
        kg_qgrouped<D>(A, B, SA, SB, C, offs, tile_offs, G, N, K, fmt, mx, gra, grb, gck);     \
    }

KG_QGEMM_ENTRIES(f32, kg_f32)
KG_QGEMM_ENTRIES(bf16, kg_bf16)

// ===== fp8 GEMM, CDNA3 path (gfx942): MFMA =====
//
// kg_qgemm_mfma_{fp8,bf8}_{bf16,f32}: kg_qgemm_<out>'s product, arguments
// and contract for FNUZ E4M3 (fp8) or E5M2 (bf8) codes whose scales have
// one block along K (per tensor or per row: gck >= K; the host routes
// nothing else here; fmt, mx and gck are taken and unused), on the matrix
// cores, v_mfma_f32_32x32x16_{fp8_fp8,bf8_bf8}:
//   C[m][n] = D::st(P * (sa * sb)),  P the MFMAs' fp32 sum over all of K,
//   sa = SA[m / gra], sb = SB[sb0 + n / grb]  (fp32 scales)
// which is the portable kernel's formula for one K block, P summed in
// another order.  K = 0 writes zeros.  Deterministic, no atomics.
//   - Grid, waves, tiles and the accumulators as kg_gemm_mfma ("GEMM, CDNA3
//     path"): 128 x 128 tiles, four waves of 2 x 2 MFMA blocks of 32 x 32.
//   - K in steps of MF8_BK = 64 codes, so that a tile row is 64 bytes as the
//     16-bit kernel's is; 16 MFMAs a step.  Operands are rows of K codes (K
//     bytes apart), read 16 bytes at a time when the 16 lie inside the
//     matrix and the address is aligned, byte by byte otherwise; zeros
//     outside M, N or K.  LDS rows MF8_LD = 72 bytes apart.
//   - Fragments, from AMD's matrix instruction calculator (CDNA3; its tables
//     are .ci/mfma_gfx942_32x32x16_fp8.txt, the same for bf8): lane l gives
//     A's row l%32 at k = 8(l/32) .. +7 and B's column l%32 at the same k
//     (8 contiguous bytes of LDS each, the first code in the low byte); the
//     accumulators are laid out as 32x32x8's.
// kg_qgrouped_mfma_{fp8,bf8}_{bf16,f32}: kg_qgrouped_<out>'s on the same
// kernel, as kg_grouped_mfma_<dt> is (ragged rows counted in tiles of 64, a
// block at an odd tile leaving at once; rows and A's scales global).
// Whether the fp8 MFMA's sums keep an fp32 output's baseline is a question
// for the first MI300X run (on sm_90a the tensor cores' fp8 sums do not).

#if defined(KG_MFMA)
// >>> kgate-index (plain C)
#define MF8_BK 64
#define MF8_LD (MF8_BK + 8)
// v_mfma_f32_32x32x16_{fp8,bf8}: the k of lane l's element i (i < 8); its
// row of A (column of B) is kg_mf_ab_rc(l), its accumulators 32x32x8's.
KG_IX int kg_mf8_ab_k(int l, int i) { return 8 * (l / 32) + i; }
// The LDS byte of a tile's row r, k.
KG_IX int kg_mf8_lds(int r, int k) { return r * MF8_LD + k; }
// Thread t's load j (j < 2) of a tile (128 rows x MF8_BK codes): the row and
// the first k of its 16 codes.
KG_IX int kg_mf8_load_row(int t, int j) { return (t + MF_THREADS * j) / (MF8_BK / 16); }
KG_IX int kg_mf8_load_k(int t, int j) { return 16 * ((t + MF_THREADS * j) % (MF8_BK / 16)); }
// <<< kgate-index

// One MFMA 32x32x16 of E4M3 FNUZ (E5 = 0) or E5M2 FNUZ (E5 = 1) codes: acc +=
// A(a) B(b), a and b the lane's 8 codes (the first in the low byte).
template <int E5>
__device__ static inline kg_mf_acc kg_mf8_mma(unsigned long long a, unsigned long long b, kg_mf_acc acc) {
    if (E5) return __builtin_amdgcn_mfma_f32_32x32x16_bf8_bf8((long)a, (long)b, acc, 0, 0, 0);
    return __builtin_amdgcn_mfma_f32_32x32x16_fp8_fp8((long)a, (long)b, acc, 0, 0, 0);
}

// Thread t's share of the tile of rows [r0, r0 + 128) (of R) and codes [k0,
// k0 + MF8_BK) (of K) of rows of K codes at P, into q (four codes to a
// word, the first in the low byte; zeros outside R or K).
__device__ static inline void kg_mf8_fetch(kg_mf_part &q, const unsigned char *P, int R, int K, int r0, int k0,
                                           int t) {
#pragma unroll
    for (int j = 0; j < 2; j++) {
        const int r = r0 + kg_mf8_load_row(t, j), k = k0 + kg_mf8_load_k(t, j);
        const unsigned char *p = P + (kg_i64)r * K + k;
        if (r < R && k + 15 < K && ((unsigned long long)p & 15) == 0) {
            const kg_mf_u4 v = *(const kg_mf_u4 *)p;
            q.w[4 * j] = v.x, q.w[4 * j + 1] = v.y, q.w[4 * j + 2] = v.z, q.w[4 * j + 3] = v.w;
            continue;
        }
#pragma unroll
        for (int e = 0; e < 16; e += 4) {
            unsigned v = 0;
#pragma unroll
            for (int b = 0; b < 4; b++) v |= (r < R && k + e + b < K ? (unsigned)p[e + b] : 0u) << (8 * b);
            q.w[4 * j + e / 4] = v;
        }
    }
}

// q into the LDS tile s, where it was fetched from.
__device__ static inline void kg_mf8_put(const kg_mf_part &q, unsigned char *s, int t) {
#pragma unroll
    for (int j = 0; j < 2; j++) {
        unsigned char *d = s + kg_mf8_lds(kg_mf8_load_row(t, j), kg_mf8_load_k(t, j));
#pragma unroll
        for (int h = 0; h < 2; h++)   // 8-byte stores: the rows are 72 bytes apart
            *(unsigned long long *)(d + 8 * h) = q.w[4 * j + 2 * h] | (unsigned long long)q.w[4 * j + 2 * h + 1] << 32;
    }
}

// One K step of wave w's 2 x 2 blocks from the LDS tiles xs, ys (lane l);
// unrolled by 2, as kg_mf_step.
template <int E5>
__device__ static inline void kg_mf8_step(kg_mf_acc acc[2][2], const unsigned char *xs, const unsigned char *ys, int w,
                                          int l) {
#pragma unroll 2
    for (int kk = 0; kk < MF8_BK; kk += 16) {
        unsigned long long a[2], b[2];
#pragma unroll
        for (int x = 0; x < 2; x++) {
            a[x] = *(const unsigned long long *)(xs + kg_mf8_lds(kg_mf_wave_row(w) + 32 * x + kg_mf_ab_rc(l),
                                                                   kk + kg_mf8_ab_k(l, 0)));
            b[x] = *(const unsigned long long *)(ys + kg_mf8_lds(kg_mf_wave_col(w) + 32 * x + kg_mf_ab_rc(l),
                                                                   kk + kg_mf8_ab_k(l, 0)));
        }
#pragma unroll
        for (int x = 0; x < 2; x++)
#pragma unroll
            for (int y = 0; y < 2; y++) acc[x][y] = kg_mf8_mma<E5>(a[x], b[y], acc[x][y]);
    }
}

// The block's MF_BM x MF_BN tile of C at (m0, n0), rows m0.. below M: the
// section's formula (A's rows and scales indexed by m as given, B's scales
// from sb0).  Every thread of the block must call it.
template <int E5, class D>
__device__ static inline __attribute__((always_inline)) void kg_qgemm_mfma(const unsigned char *A,
                                                                           const unsigned char *B, const float *SA,
                                                                           const float *SB, kg_i64 sb0,
                                                                           typename D::S *C, int M, int N, int K,
                                                                           int gra, int grb, int m0, int n0) {
    __shared__ __attribute__((aligned(16))) unsigned char xs[MF_BM * MF8_LD], ys[MF_BN * MF8_LD];
    const int t = (int)kg_tid(), w = t / 64, l = t % 64;
    kg_mf_acc acc[2][2];
#pragma unroll
    for (int x = 0; x < 2; x++)
#pragma unroll
        for (int y = 0; y < 2; y++)
#pragma unroll
            for (int i = 0; i < 16; i++) acc[x][y][i] = 0.0f;
    kg_mf_part qx, qy;
    if (K > 0) {
        kg_mf8_fetch(qx, A, M, K, m0, 0, t);
        kg_mf8_fetch(qy, B, N, K, n0, 0, t);
        kg_mf8_put(qx, xs, t);
        kg_mf8_put(qy, ys, t);
        kg_sync();
    }
    for (int k0 = 0; k0 < K; k0 += MF8_BK) {
        const int more = k0 + MF8_BK < K;
        if (more) {   // the next step's tiles load while this one computes
            kg_mf8_fetch(qx, A, M, K, m0, k0 + MF8_BK, t);
            kg_mf8_fetch(qy, B, N, K, n0, k0 + MF8_BK, t);
        }
        kg_mf8_step<E5>(acc, xs, ys, w, l);
        kg_sync();
        if (more) {
            kg_mf8_put(qx, xs, t);
            kg_mf8_put(qy, ys, t);
            kg_sync();
        }
    }
#pragma unroll
    for (int x = 0; x < 2; x++)
#pragma unroll
        for (int y = 0; y < 2; y++) {
            const int n = n0 + kg_mf_wave_col(w) + 32 * y + kg_mf_d_col(l);
            const float sb = n < N && K > 0 ? SB[sb0 + n / grb] : 0.0f;
#pragma unroll
            for (int i = 0; i < 16; i++) {
                const int m = m0 + kg_mf_wave_row(w) + 32 * x + kg_mf_d_row(l, i);
                if (m < M && n < N) C[(kg_i64)m * N + n] = D::st(K > 0 ? acc[x][y][i] * (SA[m / gra] * sb) : 0.0f);
            }
        }
}

// The tile kgate sizes kg_qgemm_mfma_*'s grid by; nonzero says the
// entries exist (gfx942 builds).
extern "C" __device__ int kg_qgemm_mfma_tile = MF_BM;

#define KG_QGEMM_MFMA_ENTRIES(fmt, E5, out, D)                                                     \
    KG_ATOMICS(kg_qgemm_mfma_##fmt##_##out, 0)                                                     \
    KG_ATOMICS(kg_qgrouped_mfma_##fmt##_##out, 0)                                                  \
    extern "C" __global__ void KG_LAUNCH_BOUNDS(MF_THREADS)                                       \
    kg_qgemm_mfma_##fmt##_##out(const unsigned char *A, const unsigned char *B, const void *SA,    \
                                const void *SB, D::S *C, int M, int N, int K, int, int, int gra,   \
                                int grb, int)                                                      \
    {                                                                                              \
        kg_qgemm_mfma<E5, D>(A, B, (const float *)SA, (const float *)SB, 0, C, M, N, K, gra, grb,  \
                             (int)kg_bid_y() * MF_BM, (int)kg_bid_x() * MF_BN);                    \
    }                                                                                              \
    extern "C" __global__ void KG_LAUNCH_BOUNDS(MF_THREADS)                                       \
    kg_qgrouped_mfma_##fmt##_##out(const unsigned char *A, const unsigned char *B, const void *SA, \
                                   const void *SB, D::S *C, const int *offs, const int *tile_offs, \
                                   int G, int N, int K, int, int, int gra, int grb, int)           \
    {                                                                                              \
        const int y = (int)kg_bid_y();                                                             \
        if (G <= 0 || y >= tile_offs[G]) return;   /* the whole block leaves, before any barrier */ \
        const int g = kg_group_of_tile(tile_offs, G, y), r = kg_mf_group_row(y - tile_offs[g]);    \
        if (r < 0) return;                                                                         \
        kg_qgemm_mfma<E5, D>(A, B + (kg_i64)g * N * K, (const float *)SA, (const float *)SB,       \
                             (kg_i64)g * ((N + grb - 1) / grb), C, offs[g + 1], N, K, gra, grb,    \
                             offs[g] + r, (int)kg_bid_x() * MF_BN);                                \
    }

KG_QGEMM_MFMA_ENTRIES(fp8, 0, bf16, kg_bf16)
KG_QGEMM_MFMA_ENTRIES(bf8, 1, bf16, kg_bf16)
KG_QGEMM_MFMA_ENTRIES(fp8, 0, f32, kg_f32)
KG_QGEMM_MFMA_ENTRIES(bf8, 1, f32, kg_f32)
#endif // KG_MFMA

// ===== Clock probe =====
//
// kg_clock(out), launched as one block of 32 threads: thread 0 spins for
// KG_CLOCK_NS nanoseconds of wall time and writes the SM cycles counted
// meanwhile to out[0] and the nanoseconds to out[1].  kgate's timer launches it after each sample, outside
// the timed window, and flags a sample whose SM clock (out[0]/out[1] GHz) is
// below 75% of the device's clock as throttled (nvbench's rule).  NVIDIA:
// %globaltimer and clock64().  AMD: s_memrealtime (100 MHz on gfx9) and
// s_memtime; not yet checked on AMD hardware.  Optional in a --kernels file:
// without it the timer says the clock was not read.

#ifndef KG_CLOCK_NS
#define KG_CLOCK_NS 20000
#endif

__device__ static inline unsigned long long kg_cycles() {
#if defined(KG_CUDA)
    return (unsigned long long)clock64();
#else
    return __builtin_amdgcn_s_memtime();
#endif
}

KG_ATOMICS(kg_clock, 0)
extern "C" __global__ void KG_LAUNCH_BOUNDS(32) kg_clock(unsigned long long *out)
{
    if (kg_tid() != 0) return;
    const unsigned long long t0 = kg_wall_ns(), c0 = kg_cycles();
    unsigned long long t1, c1;
    do {
        t1 = kg_wall_ns();
        c1 = kg_cycles();
    } while (t1 - t0 < KG_CLOCK_NS);
    out[0] = c1 - c0;
    out[1] = t1 - t0;
}
