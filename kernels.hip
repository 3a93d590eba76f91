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

// Every entry point declares whether it accumulates with atomics (so that its
// result may vary from run to run): kgate reads the device global NAME_atomics
// after loading the code object; nonzero makes `--repeat` gate each run
// instead of comparing the runs bit for bit (README "Kernel entry points").
#define KG_ATOMICS(name, flag) extern "C" __device__ int name##_atomics = flag;

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
// deterministic and independent of the launch.

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

KG_GEMM_ENTRY(kg_gemm_f32, kg_f32)
KG_GEMM_ENTRY(kg_gemm_f16, kg_f16)
KG_GEMM_ENTRY(kg_gemm_bf16, kg_bf16)

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
// sequential in d; one (t, h) per thread, grid-strided.
template <class D>
__device__ static inline void kg_attn_bwd_pre(const kg_u16 *O, const kg_u16 *dO, float *Dsum,
                                              int Tq, int Hq, int Dh)
{
    const kg_i64 n = (kg_i64)Tq * Hq, stride = (kg_i64)kg_grid_x() * ATTN_THREADS;
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
