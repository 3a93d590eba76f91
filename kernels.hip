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
// Entry points
//   kg_gemm_f32 / kg_gemm_f16 / kg_gemm_bf16   portable tiled GEMM, every arch

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
__device__ static inline void kg_sync() { __syncthreads(); }
#endif

__device__ static inline float kg_fma(float a, float b, float c) {
#if defined(KG_CUDA)
    return fmaf(a, b, c);
#else
    return __builtin_fmaf(a, b, c);
#endif
}

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

template <class D>
__device__ static inline void kg_gemm_portable(const typename D::S *X, const typename D::S *Y,
                                               typename D::S *C, int M, int N, int K,
                                               kg_i64 sxm, kg_i64 sxk, kg_i64 syk, kg_i64 syn,
                                               kg_i64 scm, kg_i64 scn)
{
    __shared__ float xs[GEMM_BK][GEMM_BM + 1];
    __shared__ float ys[GEMM_BK][GEMM_BN + 1];
    const int tid = (int)kg_tid(), tx = tid % GEMM_TX, ty = tid / GEMM_TX;
    const int m0 = (int)kg_bid_y() * GEMM_BM, n0 = (int)kg_bid_x() * GEMM_BN;
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
    extern "C" __global__ void KG_LAUNCH_BOUNDS(GEMM_THREADS)                               \
    name(const D::S *X, const D::S *Y, D::S *C, int M, int N, int K, kg_i64 sxm, kg_i64 sxk, \
         kg_i64 syk, kg_i64 syn, kg_i64 scm, kg_i64 scn)                                     \
    {                                                                                        \
        kg_gemm_portable<D>(X, Y, C, M, N, K, sxm, sxk, syk, syn, scm, scn);                 \
    }

KG_GEMM_ENTRY(kg_gemm_f32, kg_f32)
KG_GEMM_ENTRY(kg_gemm_f16, kg_f16)
KG_GEMM_ENTRY(kg_gemm_bf16, kg_bf16)
