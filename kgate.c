/* kgate — is this GPU kernel right, and only then, how fast?
 *
 * One C program: it loads the GPU runtime at run time (CUDA driver + NVRTC, or
 * HIP + hiprtc), compiles kernels.hip (embedded in the binary) for the
 * device's exact arch, runs each case of shapes.txt on seeded inputs, gates
 * every output against CPU references (ref.c), and times a kernel only after
 * every gate has passed.  `--device cpu` runs the whole pipeline with ref.c's
 * CPU candidate, for machines without a GPU.
 *
 * Build: make            (cc -std=c11 -O3 kgate.c -o kgate -ldl -lpthread -lm)
 * Usage: ./kgate --help
 *
 * Sections, in the order data flows:
 *   utilities -> ref.c -> embedded kernels -> runtime loader -> device ->
 *   compile cache (and arms: the builds run side by side) -> cases -> inputs ->
 *   launch -> check plan & references -> inject -> gates -> timer -> report ->
 *   ledger -> running a case -> commands -> main
 *
 * Ops (rows of OPS): gemm, grouped (MoE) gemm, attention; gemm and grouped
 * also on fp8/MX inputs ("low precision": ref.c quantizes, a quantize-only
 * kernel must agree byte for byte, the product is gated by SNR).  Each
 * case's outputs are gated one by one; the gates are rows of GATES, the
 * planted faults rows of INJECTS.  `compare` and `noise` run a case on
 * several arms (the reference, a candidate variant, an A/A copy), gate each,
 * and time them interleaved; the ledger records every measured arm and
 * enforces the variant budget.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define KGATE_VERSION "0.1"

/* Exit codes (README "Exit codes"). */
enum {
    EXIT_PASS = 0,      /* every gate passed */
    EXIT_GATE = 1,      /* a gate failed */
    EXIT_USAGE = 2,     /* bad usage or input */
    EXIT_NORUNTIME = 3, /* no GPU runtime found */
    EXIT_BUDGET = 4,    /* budget spent: a new candidate beyond --budget */
    EXIT_DEVICE = 5,    /* device, kernel or compiler error */
};

#define KG_TILE 128                 /* the tile of the error map and of sampling */
#define FULL_CHECK_MACS (1ull << 31) /* above this, check a tile-covering sample */
#define MAX_DIM (1u << 20)          /* no dimension above 1,048,576 */
#define MAX_ELEMS (1ull << 30)      /* no tensor above 2^30 elements */
#define KG_ATTN_DMAX 256            /* the largest attention head dim */
#define MAX_GROUPS 4096             /* grouped GEMM groups, attention sequences */
#define MAX_HEADS 1024              /* attention heads (a grid dimension) */
#define MAX_DEFINES 32              /* -D K=V of one variant */

/* ===== Utilities ===== */

/* Print "kgate: <message>" on stderr and exit with `code`. */
static _Noreturn void die(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fflush(stdout);   /* what was already reported comes before the error */
    fputs("kgate: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(code);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) die(EXIT_DEVICE, "out of host memory (%zu bytes)", n);
    return p;
}

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) die(EXIT_DEVICE, "out of host memory (%zu x %zu bytes)", n, size);
    return p;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* splitmix64: seeds and hashes small integers into well-mixed 64-bit words. */
static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* A counter-based generator: value i of stream `key` is mix64(key ^ mix64(i)),
 * so any element can be generated independently (and in parallel). */
static uint64_t rng_at(uint64_t key, uint64_t i) { return mix64(key ^ mix64(i)); }

/* Uniform in [-1, 1) with 24 random bits. */
static float rng_sym(uint64_t key, uint64_t i)
{
    return (float)(rng_at(key, i) >> 40) * 0x1p-23f - 1.0f;
}

static uint64_t hash_str(uint64_t h, const char *s)
{
    while (*s) h = mix64(h ^ (unsigned char)*s++);
    return h;
}

/* --- SHA-256 (FIPS 180-4), for code-object and cache identities --- */

struct sha256 { uint32_t h[8]; uint64_t len; unsigned char buf[64]; size_t nbuf; };

static const uint32_t SHA_K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

#define ROR32(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void sha256_block(struct sha256 *s, const unsigned char *p)
{
    uint32_t w[64], v[8];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
               (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = ROR32(w[i - 15], 7) ^ ROR32(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ROR32(w[i - 2], 17) ^ ROR32(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    memcpy(v, s->h, sizeof v);
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = v[7] + (ROR32(v[4], 6) ^ ROR32(v[4], 11) ^ ROR32(v[4], 25)) +
                      ((v[4] & v[5]) ^ (~v[4] & v[6])) + SHA_K[i] + w[i];
        uint32_t t2 = (ROR32(v[0], 2) ^ ROR32(v[0], 13) ^ ROR32(v[0], 22)) +
                      ((v[0] & v[1]) ^ (v[0] & v[2]) ^ (v[1] & v[2]));
        memmove(v + 1, v, 7 * sizeof(uint32_t));
        v[4] += t1;
        v[0] = t1 + t2;
    }
    for (int i = 0; i < 8; i++) s->h[i] += v[i];
}

static void sha256_init(struct sha256 *s)
{
    static const uint32_t h0[8] = { 0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                    0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19 };
    memcpy(s->h, h0, sizeof h0);
    s->len = 0;
    s->nbuf = 0;
}

static void sha256_update(struct sha256 *s, const void *data, size_t n)
{
    const unsigned char *p = data;
    s->len += n;
    while (n > 0) {
        size_t take = 64 - s->nbuf < n ? 64 - s->nbuf : n;
        memcpy(s->buf + s->nbuf, p, take);
        s->nbuf += take, p += take, n -= take;
        if (s->nbuf == 64) sha256_block(s, s->buf), s->nbuf = 0;
    }
}

/* Finish and write the digest as 64 lowercase hex digits plus NUL. */
static void sha256_hex(struct sha256 *s, char out[65])
{
    uint64_t bits = s->len * 8;
    unsigned char pad = 0x80, zero = 0, len[8];
    sha256_update(s, &pad, 1);
    while (s->nbuf != 56) sha256_update(s, &zero, 1);
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)(bits >> (56 - 8 * i));
    sha256_update(s, len, 8);
    for (int i = 0; i < 8; i++) snprintf(out + 8 * i, 9, "%08x", s->h[i]);
}

/* Read a whole file; NULL (errno set) if it cannot be read. */
static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = xmalloc(cap + 1);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) buf = realloc(buf, (cap *= 2) + 1);
        if (!buf) die(EXIT_DEVICE, "out of host memory reading %s", path);
    }
    int err = ferror(f);
    fclose(f);
    if (err) { free(buf); errno = EIO; return NULL; }
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

/* Write a file atomically (temporary file, then rename); 0 on success. */
static int write_file_atomic(const char *path, const void *data, size_t n)
{
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) return -1;
    int ok = fwrite(data, 1, n, f) == n;
    ok &= fclose(f) == 0;
    if (!ok || rename(tmp, path) != 0) { unlink(tmp); return -1; }
    return 0;
}

/* mkdir -p; 0 on success. */
static int mkdir_p(const char *path)
{
    char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
            *p = '/';
        }
    return mkdir(buf, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

#include "ref.c"

/* ===== Embedded kernels ===== */

/* kernels.hip is assembled into the binary, so a copied binary carries it. */
__asm__(".section .rodata\n"
        ".global kg_embedded_src\n"
        ".type kg_embedded_src, @object\n"
        "kg_embedded_src:\n"
        ".incbin \"kernels.hip\"\n"
        ".byte 0\n"
        ".previous\n");
extern const char kg_embedded_src[];

/* ===== Runtime loader ===== */

/* The CUDA driver API and HIP's module API have the same shape, so one table
 * of function pointers serves both: device pointers are 64-bit integers,
 * handles are void *, and 0 is success.  Each row: required?, field, return
 * type, parameters, CUDA symbol, HIP symbol ("" = not on that platform;
 * "a|b" = try a, then b). */
typedef int kg_res;

#define RT_SYMS(X)                                                                          \
    X(1, init, kg_res, (unsigned), "cuInit", "hipInit")                                     \
    X(1, dev_count, kg_res, (int *), "cuDeviceGetCount", "hipGetDeviceCount")              \
    X(1, dev_get, kg_res, (int *, int), "cuDeviceGet", "hipDeviceGet")                     \
    X(1, dev_name, kg_res, (char *, int, int), "cuDeviceGetName", "hipDeviceGetName")       \
    X(1, dev_mem, kg_res, (size_t *, int), "cuDeviceTotalMem_v2", "hipDeviceTotalMem")     \
    X(1, dev_attr, kg_res, (int *, int, int), "cuDeviceGetAttribute", "hipDeviceGetAttribute") \
    X(1, drv_version, kg_res, (int *), "cuDriverGetVersion", "hipDriverGetVersion")        \
    X(1, mem_alloc, kg_res, (uint64_t *, size_t), "cuMemAlloc_v2", "hipMalloc")           \
    X(1, mem_free, kg_res, (uint64_t), "cuMemFree_v2", "hipFree")                          \
    X(1, h2d, kg_res, (uint64_t, const void *, size_t), "cuMemcpyHtoD_v2", "hipMemcpyHtoD") \
    X(1, d2h, kg_res, (void *, uint64_t, size_t), "cuMemcpyDtoH_v2", "hipMemcpyDtoH")     \
    X(1, memset8, kg_res, (uint64_t, unsigned char, size_t, void *), "cuMemsetD8Async",    \
      "hipMemsetD8Async")                                                                   \
    X(1, stream_create, kg_res, (void **, unsigned), "cuStreamCreate", "hipStreamCreateWithFlags") \
    X(1, stream_sync, kg_res, (void *), "cuStreamSynchronize", "hipStreamSynchronize")     \
    X(1, event_create, kg_res, (void **, unsigned), "cuEventCreate", "hipEventCreateWithFlags") \
    X(1, event_record, kg_res, (void *, void *), "cuEventRecord", "hipEventRecord")        \
    X(1, event_sync, kg_res, (void *), "cuEventSynchronize", "hipEventSynchronize")        \
    X(1, event_elapsed, kg_res, (float *, void *, void *),                                 \
      "cuEventElapsedTime_v2|cuEventElapsedTime", "hipEventElapsedTime")                   \
    X(1, module_load, kg_res, (void **, const void *), "cuModuleLoadData", "hipModuleLoadData") \
    X(1, module_fn, kg_res, (void **, void *, const char *), "cuModuleGetFunction",        \
      "hipModuleGetFunction")                                                               \
    X(1, launch, kg_res,                                                                    \
      (void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, \
       void **, void **),                                                                   \
      "cuLaunchKernel", "hipModuleLaunchKernel")                                            \
    X(0, ctx_retain, kg_res, (void **, int), "cuDevicePrimaryCtxRetain", "")               \
    X(0, ctx_set, kg_res, (void *), "cuCtxSetCurrent", "")                                 \
    X(0, set_device, kg_res, (int), "", "hipSetDevice")                                    \
    X(0, err_name_cu, kg_res, (kg_res, const char **), "cuGetErrorName", "")               \
    X(0, err_name_hip, const char *, (kg_res), "", "hipGetErrorName")                      \
    X(0, props_hip, kg_res, (void *, int), "", "hipGetDevicePropertiesR0600")             \
    X(0, module_global, kg_res, (uint64_t *, size_t *, void *, const char *),              \
      "cuModuleGetGlobal_v2", "hipModuleGetGlobal")                                         \
    X(0, occupancy, kg_res, (int *, void *, int, size_t),                                  \
      "cuOccupancyMaxActiveBlocksPerMultiprocessor",                                        \
      "hipModuleOccupancyMaxActiveBlocksPerMultiprocessor")                                 \
    X(0, func_attr, kg_res, (void *, int, int), "cuFuncSetAttribute", "")                  \
    X(0, tmap_encode, kg_res,                                                               \
      (void *, int, unsigned, void *, const uint64_t *, const uint64_t *, const unsigned *, \
       const unsigned *, int, int, int, int),                                               \
      "cuTensorMapEncodeTiled", "")

/* The run-time compilers: NVRTC and hiprtc, same shape again. */
#define RTC_SYMS(X)                                                                         \
    X(1, version, int, (int *, int *), "nvrtcVersion", "hiprtcVersion")                     \
    X(1, create, int,                                                                       \
      (void **, const char *, const char *, int, const char *const *, const char *const *), \
      "nvrtcCreateProgram", "hiprtcCreateProgram")                                          \
    X(1, compile, int, (void *, int, const char *const *), "nvrtcCompileProgram",          \
      "hiprtcCompileProgram")                                                               \
    X(1, log_size, int, (void *, size_t *), "nvrtcGetProgramLogSize", "hiprtcGetProgramLogSize") \
    X(1, log, int, (void *, char *), "nvrtcGetProgramLog", "hiprtcGetProgramLog")           \
    X(1, code_size, int, (void *, size_t *), "nvrtcGetCUBINSize", "hiprtcGetCodeSize")      \
    X(1, code, int, (void *, char *), "nvrtcGetCUBIN", "hiprtcGetCode")                     \
    X(1, destroy, int, (void **), "nvrtcDestroyProgram", "hiprtcDestroyProgram")            \
    X(1, err_string, const char *, (int), "nvrtcGetErrorString", "hiprtcGetErrorString")

enum platform { PF_CUDA, PF_HIP, PF_COUNT };

#define DECLARE_FIELD(req, field, ret, params, cu, hip) ret(*field) params;
struct rt { RT_SYMS(DECLARE_FIELD) };
struct rtc { RTC_SYMS(DECLARE_FIELD) };

struct sym_row { int required; size_t offset; const char *names[PF_COUNT]; };
#define RT_ROW(req, field, ret, params, cu, hip) { req, offsetof(struct rt, field), { cu, hip } },
#define RTC_ROW(req, field, ret, params, cu, hip) { req, offsetof(struct rtc, field), { cu, hip } },
static const struct sym_row RT_ROWS[] = { RT_SYMS(RT_ROW) };
static const struct sym_row RTC_ROWS[] = { RTC_SYMS(RTC_ROW) };

/* Library names tried, in order, per platform. */
static const char *const RT_LIBS[PF_COUNT][5] = {
    { "libcuda.so.1", NULL },
    { "libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6", "/opt/rocm/lib/libamdhip64.so", NULL },
};
static const char *const RTC_LIBS[PF_COUNT][6] = {
    { "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so", "/usr/local/cuda/lib64/libnvrtc.so", NULL },
    { "libhiprtc.so", "libhiprtc.so.7", "libhiprtc.so.6", "/opt/rocm/lib/libhiprtc.so", NULL },
};
static const char *const PF_NAME[PF_COUNT] = { "CUDA", "HIP" };
static const char *const RTC_NAME[PF_COUNT] = { "NVRTC", "hiprtc" };

/* Resolve a symbol row in an open library: each "|"-separated name in turn,
 * dlerror() cleared before each dlsym.  NULL when none is there. */
static void *resolve(void *lib, const char *names)
{
    char buf[128];
    while (*names) {
        size_t n = strcspn(names, "|");
        snprintf(buf, sizeof buf, "%.*s", (int)n, names);
        dlerror();
        void *p = dlsym(lib, buf);
        if (p && !dlerror()) return p;
        names += n + (names[n] == '|');
    }
    return NULL;
}

/* Open the first library of `libs` that loads and fill `table` from `rows`.
 * `tried` collects every name attempted ("a, b, c").  Returns the handle, or
 * NULL when no library loads or a required symbol is missing (then `why`
 * says which). */
static void *load_table(const char *const *libs, const char *env_override, enum platform pf,
                        const struct sym_row *rows, size_t nrows, void *table, char *tried,
                        size_t tried_len, char *why, size_t why_len)
{
    const char *env = getenv(env_override);
    for (int i = -1; i < 0 || libs[i]; i++) {
        const char *name = i < 0 ? env : libs[i];
        if (!name || !*name) continue;
        size_t used = strlen(tried);
        snprintf(tried + used, tried_len - used, "%s%s", used ? ", " : "", name);
        void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
        if (!lib) continue;
        int ok = 1;
        for (size_t r = 0; r < nrows; r++) {
            void *p = *rows[r].names[pf] ? resolve(lib, rows[r].names[pf]) : NULL;
            memcpy((char *)table + rows[r].offset, &p, sizeof p);
            if (!p && rows[r].required) {
                snprintf(why, why_len, "%s lacks %s", name, rows[r].names[pf]);
                ok = 0;
                break;
            }
        }
        if (ok) return lib;
        dlclose(lib);
    }
    return NULL;
}

/* Open the run-time compiler of platform pf: 0 on success, else -1 and
 * `msg` says so, naming every library tried. */
static int rtc_open(enum platform pf, struct rtc *c, char *msg, size_t n)
{
    char tried[1024] = "", why[256] = "";
    const char *env = pf == PF_CUDA ? "KGATE_NVRTC" : "KGATE_HIPRTC";
    if (load_table(RTC_LIBS[pf], env, pf, RTC_ROWS, sizeof RTC_ROWS / sizeof *RTC_ROWS, c,
                   tried, sizeof tried, why, sizeof why))
        return 0;
    snprintf(msg, n, "no %s run-time compiler found (tried %s%s%s)", RTC_NAME[pf], tried,
             *why ? "; " : "", why);
    return -1;
}

/* The run-time compiler of platform pf; exits 3 naming every library tried
 * when there is none. */
static void load_rtc(enum platform pf, struct rtc *c)
{
    char msg[1400];
    if (rtc_open(pf, c, msg, sizeof msg) != 0) die(EXIT_NORUNTIME, "%s", msg);
}

/* ===== Device ===== */

/* Device attributes read at start, per platform: cuda.h CUdevice_attribute,
 * and hip_runtime_api.h hipDeviceAttribute_t (the same values in ROCm 5.2
 * through 7.2). */
#define HIP_ATTR_CLOCK 5
#define HIP_ATTR_L2 19
#define HIP_ATTR_CC_MAJOR 23
#define HIP_ATTR_BUS 59
#define HIP_ATTR_MEM_CLOCK 60
#define HIP_ATTR_CC_MINOR 61
#define HIP_ATTR_SMS 63
/* hipDeviceProp_tR0600 (ROCm 6.0 ABI, unchanged in 7.x) is 1472 bytes with
 * char gcnArchName[256] at byte 1160 on x86-64; the buffer has room to spare. */
#define HIP_PROPS_BYTES 4096
#define HIP_PROP_GCNARCH_OFFSET 1160
enum attr { AT_SMS, AT_CLOCK_KHZ, AT_MEM_CLOCK_KHZ, AT_BUS_BITS, AT_L2_BYTES, AT_CC_MAJOR,
            AT_CC_MINOR, AT_COUNT };
static const int ATTR_ID[PF_COUNT][AT_COUNT] = {
    [PF_CUDA] = { 16, 13, 36, 37, 38, 75, 76 },
    [PF_HIP] = { HIP_ATTR_SMS, HIP_ATTR_CLOCK, HIP_ATTR_MEM_CLOCK, HIP_ATTR_BUS, HIP_ATTR_L2,
                 HIP_ATTR_CC_MAJOR, HIP_ATTR_CC_MINOR },
};

/* Peak arithmetic rates per SM (or CU) per clock, dense.  Peak = SMs x clock
 * x rate; the machine summary prints the product it used.  Sources: vendor
 * datasheets (A100 312 TF bf16 at 108 SMs x 1.41 GHz; H100/H200 SXM 989 TF
 * at 132 x 1.83 GHz and 67 TF fp32; MI300X 1307 TF at 304 CUs x 2.1 GHz;
 * MI355X 2.5 PF at 256 x 2.4 GHz). */
struct peak_row { const char *arch; double f32_per_clk, mma16_per_clk; };
static const struct peak_row PEAKS[] = {
    { "sm_80", 128, 2048 },
    { "sm_90", 256, 4096 },
    { "gfx942", 256, 2048 },
    { "gfx950", 256, 4096 },
};

enum dev_kind { DEV_CPU, DEV_GPU };
struct code_obj;
struct arm;
struct launch_geom;

struct device {
    enum dev_kind kind;
    enum platform pf;
    struct rt rt;
    struct rtc rtc;
    int index, handle;
    char name[256];
    char arch[64];        /* compile target: sm_90a, gfx942:sramecc+:xnack-, cpu */
    char arch_base[32];   /* sm_90, gfx942, cpu: for tables and macros */
    int attr[AT_COUNT];
    size_t mem_bytes;
    int driver_version;
    char compiler[64];    /* "NVRTC 13.0" */
    double peak_f32, peak_mma16;  /* FLOP/s; 0 = not known */
    void *ctx, *stream, *module;  /* module: the current arm's (GPU) */
    void *ev[2];          /* timer events, made on first use */
    uint64_t clock_buf;   /* the clock probe's readings, two per sample */
    struct arm *arm;      /* the arm whose kernels launch now */
    uint64_t flush;       /* L2 flush buffer */
    size_t flush_bytes;
    char flush_note[64];
    int launched_atomics; /* a kernel launched since this was cleared declares atomics */
    struct kfns *kfns;    /* the current arm's kernels (GPU) */
    struct launch_geom *geom; /* non-NULL: gpu_launch notes each kernel it launches here */
};

static const char *gpu_err_name(const struct device *d, kg_res r)
{
    const char *s = NULL;
    if (d->pf == PF_CUDA && d->rt.err_name_cu) d->rt.err_name_cu(r, &s);
    if (d->pf == PF_HIP && d->rt.err_name_hip) s = d->rt.err_name_hip(r);
    return s ? s : "unknown error";
}

/* Check a runtime call: on failure print what was being done and exit 5. */
static void gpu_check(const struct device *d, kg_res r, const char *what)
{
    if (r != 0) die(EXIT_DEVICE, "%s failed: %s (%d)", what, gpu_err_name(d, r), r);
}

/* Load a GPU runtime: CUDA first, then HIP.  Returns 0 with d->pf, d->rt and
 * d->rtc filled, or exits 3 naming every library tried. */
static void gpu_load_runtime(struct device *d)
{
    char tried[2048] = "", why[256] = "";
    for (int pf = 0; pf < PF_COUNT; pf++) {
        const char *env = pf == PF_CUDA ? "KGATE_CUDA" : "KGATE_HIP";
        if (!load_table(RT_LIBS[pf], env, pf, RT_ROWS, sizeof RT_ROWS / sizeof *RT_ROWS, &d->rt,
                        tried, sizeof tried, why, sizeof why))
            continue;
        int n = 0;
        if (d->rt.init(0) != 0 || d->rt.dev_count(&n) != 0 || n == 0) {
            size_t used = strlen(why);
            snprintf(why + used, sizeof why - used, "%s%s runtime loaded but reports no device",
                     used ? "; " : "", PF_NAME[pf]);
            continue;
        }
        d->pf = (enum platform)pf;
        load_rtc(d->pf, &d->rtc);
        return;
    }
    die(EXIT_NORUNTIME, "no GPU runtime found (tried %s%s%s); use --device cpu to run on the CPU",
        tried, *why ? "; " : "", why);
}

/* The compile target of a CUDA device: sm_XY, with the arch-specific "a"
 * suffix on Hopper so wgmma and setmaxnreg are available. */
static void cuda_arch(struct device *d)
{
    int ma = d->attr[AT_CC_MAJOR], mi = d->attr[AT_CC_MINOR];
    snprintf(d->arch_base, sizeof d->arch_base, "sm_%d%d", ma, mi);
    snprintf(d->arch, sizeof d->arch, "sm_%d%d%s", ma, mi, ma == 9 && mi == 0 ? "a" : "");
}

/* The compile target of a HIP device: gcnArchName from the device properties
 * (e.g. "gfx942:sramecc+:xnack-"); the part before ':' is the base arch. */
static void hip_arch(struct device *d)
{
    static char props[HIP_PROPS_BYTES];
    if (!d->rt.props_hip) die(EXIT_DEVICE, "HIP runtime lacks hipGetDevicePropertiesR0600");
    gpu_check(d, d->rt.props_hip(props, d->index), "hipGetDevicePropertiesR0600");
    snprintf(d->arch, sizeof d->arch, "%.63s", props + HIP_PROP_GCNARCH_OFFSET);
    snprintf(d->arch_base, sizeof d->arch_base, "%.*s", (int)strcspn(d->arch, ":"), d->arch);
}

static void device_peaks(struct device *d)
{
    for (size_t i = 0; i < sizeof PEAKS / sizeof *PEAKS; i++)
        if (strcmp(PEAKS[i].arch, d->arch_base) == 0) {
            double clk = d->attr[AT_SMS] * (double)d->attr[AT_CLOCK_KHZ] * 1e3;
            d->peak_f32 = clk * PEAKS[i].f32_per_clk;
            d->peak_mma16 = clk * PEAKS[i].mma16_per_clk;
        }
}

/* Open GPU `index`: context, stream, attributes, arch, peaks, and an L2 flush
 * buffer of twice the L2 size read from the device. */
static void gpu_open(struct device *d, int index)
{
    gpu_load_runtime(d);
    struct rt *rt = &d->rt;
    int n = 0;
    rt->dev_count(&n);
    if (index < 0 || index >= n)
        die(EXIT_USAGE, "--device %d: there are %d %s device(s) (0..%d)", index, n, PF_NAME[d->pf],
            n - 1);
    d->kind = DEV_GPU;
    d->index = index;
    gpu_check(d, rt->dev_get(&d->handle, index), "getting the device");
    if (d->pf == PF_CUDA) {
        if (!rt->ctx_retain || !rt->ctx_set) die(EXIT_DEVICE, "libcuda lacks the primary-context API");
        gpu_check(d, rt->ctx_retain(&d->ctx, d->handle), "cuDevicePrimaryCtxRetain");
        gpu_check(d, rt->ctx_set(d->ctx), "cuCtxSetCurrent");
    } else {
        if (!rt->set_device) die(EXIT_DEVICE, "HIP runtime lacks hipSetDevice");
        gpu_check(d, rt->set_device(index), "hipSetDevice");
    }
    gpu_check(d, rt->dev_name(d->name, sizeof d->name, d->handle), "reading the device name");
    for (int a = 0; a < AT_COUNT; a++)
        gpu_check(d, rt->dev_attr(&d->attr[a], ATTR_ID[d->pf][a], d->handle), "reading a device attribute");
    gpu_check(d, rt->dev_mem(&d->mem_bytes, d->handle), "reading the device memory size");
    gpu_check(d, rt->drv_version(&d->driver_version), "reading the driver version");
    if (d->pf == PF_CUDA) cuda_arch(d); else hip_arch(d);
    int ma = 0, mi = 0;
    d->rtc.version(&ma, &mi);
    snprintf(d->compiler, sizeof d->compiler, "%s %d.%d", RTC_NAME[d->pf], ma, mi);
    device_peaks(d);
    gpu_check(d, rt->stream_create(&d->stream, 1 /* non-blocking */), "creating a stream");
    size_t l2 = d->attr[AT_L2_BYTES] > 0 ? (size_t)d->attr[AT_L2_BYTES] : 64u << 20;
    d->flush_bytes = 2 * l2;
    snprintf(d->flush_note, sizeof d->flush_note, "%.0f MiB (2 x L2)", d->flush_bytes / 1048576.0);
    gpu_check(d, rt->mem_alloc(&d->flush, d->flush_bytes), "allocating the L2 flush buffer");
}

/* Read "model name" from /proc/cpuinfo, or "CPU". */
static void cpu_name(char *buf, size_t n)
{
    snprintf(buf, n, "CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "model name", 10) == 0 && strchr(line, ':')) {
            char *v = strchr(line, ':') + 1;
            v += strspn(v, " \t");
            v[strcspn(v, "\n")] = 0;
            snprintf(buf, n, "%s", v);
            break;
        }
    fclose(f);
}

/* The CPU "device": ref.c's candidate on all cores; its flush buffer is twice
 * a core's L2, the CPU's nearest analogue of a GPU's L2. */
static void cpu_open(struct device *d)
{
    d->kind = DEV_CPU;
    d->index = -1;
    cpu_name(d->name, sizeof d->name);
    snprintf(d->arch, sizeof d->arch, "cpu");
    snprintf(d->arch_base, sizeof d->arch_base, "cpu");
    snprintf(d->compiler, sizeof d->compiler, "none (ref.c candidate)");
    d->attr[AT_SMS] = par_threads();
    long l2 = -1;
#ifdef _SC_LEVEL2_CACHE_SIZE
    l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
    d->attr[AT_L2_BYTES] = l2 > 0 ? (int)l2 : 0;
    d->mem_bytes = (size_t)sysconf(_SC_PHYS_PAGES) * (size_t)sysconf(_SC_PAGESIZE);
    d->flush_bytes = 2 * (size_t)(l2 > 0 ? l2 : 4 << 20);
    snprintf(d->flush_note, sizeof d->flush_note, "%.1f MiB (2 x %s)", d->flush_bytes / 1048576.0,
             l2 > 0 ? "L2" : "an assumed 4 MiB L2");
    d->flush = (uint64_t)(uintptr_t)xcalloc(1, d->flush_bytes);
}

/* --- memory and launches, the same calls for every device kind --- */

static uint64_t dev_alloc(struct device *d, size_t bytes)
{
    if (d->kind == DEV_CPU) return (uint64_t)(uintptr_t)xmalloc(bytes);
    uint64_t p = 0;
    kg_res r = d->rt.mem_alloc(&p, bytes ? bytes : 1);
    if (r != 0)
        die(EXIT_DEVICE, "cannot allocate %.2f GiB on %s: %s", bytes / 1073741824.0, d->name,
            gpu_err_name(d, r));
    return p;
}

static void dev_free(struct device *d, uint64_t p)
{
    if (!p) return;
    if (d->kind == DEV_CPU) free((void *)(uintptr_t)p);
    else d->rt.mem_free(p);
}

static void dev_upload(struct device *d, uint64_t dst, const void *src, size_t bytes)
{
    if (d->kind == DEV_CPU) memcpy((void *)(uintptr_t)dst, src, bytes);
    else gpu_check(d, d->rt.h2d(dst, src, bytes), "copying inputs to the device");
}

/* Copy device memory to the host; waits for the stream first, so a kernel's
 * asynchronous fault is reported here, as a device error. */
static void dev_download(struct device *d, void *dst, uint64_t src, size_t bytes)
{
    if (d->kind == DEV_CPU) { memcpy(dst, (void *)(uintptr_t)src, bytes); return; }
    gpu_check(d, d->rt.stream_sync(d->stream), "running the kernel (stream synchronize)");
    gpu_check(d, d->rt.d2h(dst, src, bytes), "copying outputs from the device");
}

/* Fill `bytes` bytes with `byte`, queued on the device's stream. */
static void dev_fill(struct device *d, uint64_t p, unsigned char byte, size_t bytes)
{
    if (d->kind == DEV_CPU) memset((void *)(uintptr_t)p, byte, bytes);
    else gpu_check(d, d->rt.memset8(p, byte, bytes, d->stream), "filling device memory");
}

static void dev_sync(struct device *d)
{
    if (d->kind == DEV_GPU)
        gpu_check(d, d->rt.stream_sync(d->stream), "running the kernel (stream synchronize)");
}

#define MAX_KERNELS 64

/* A loaded code object's kernels, each looked up once by name: its
 * function, and whether its source declares that it accumulates with atomics
 * (a device global `int NAME_atomics` that is nonzero; README "Kernel entry
 * points"), so that its repeats are gated instead of compared bit for bit. */
struct kfn { const char *name; void *fn; int atomics; unsigned smem_max; /* dynamic smem allowed so far */ };
struct kfns { struct kfn k[MAX_KERNELS]; int n; };

/* The int device global NAME+SUFFIX of the current module, or `dflt` when
 * the code object has none. */
static int module_int(struct device *d, const char *name, const char *suffix, int dflt)
{
    char global[160];
    uint64_t p = 0;
    size_t bytes = 0;
    int v = dflt;
    snprintf(global, sizeof global, "%s%s", name, suffix);
    if (d->rt.module_global && d->rt.module_global(&p, &bytes, d->module, global) == 0 && bytes >= sizeof v)
        gpu_check(d, d->rt.d2h(&v, p, sizeof v), "reading a device global of the code object");
    return v;
}

/* Kernel `name` of the current arm's module, looked up on first use; exit 5
 * if the code object lacks it. */
static struct kfn *kernel_lookup(struct device *d, const char *name)
{
    struct kfns *t = d->kfns;
    for (int i = 0; i < t->n; i++)
        if (strcmp(t->k[i].name, name) == 0) return &t->k[i];
    if (t->n == MAX_KERNELS) die(EXIT_DEVICE, "internal: more than %d kernels", MAX_KERNELS);
    struct kfn *k = &t->k[t->n];
    kg_res res = d->rt.module_fn(&k->fn, d->module, name);
    if (res != 0 || !k->fn)
        die(EXIT_DEVICE, "the code object lacks kernel %s (%s); a --kernels file must define "
            "every entry point (README)", name, gpu_err_name(d, res));
    k->name = name, k->atomics = module_int(d, name, "_atomics", 0) != 0;
    t->n++;
    return k;
}

#define MAX_GEOM 4   /* kernels one output's launch runs: the attention backward runs 3 */

/* One kernel launch as the report shows it: the grid (its blocks are the
 * tiles), the threads per block, and how many such blocks one SM/CU holds at
 * once by the occupancy API (0 = not known). */
struct kgeom { const char *name; unsigned grid[3], threads; int per_sm; uint64_t tiles; /* 0: one per block */ };

/* The kernels one output's launch ran, in launch order. */
struct launch_geom { int n; struct kgeom k[MAX_GEOM]; };

/* Blocks of `threads` threads of kernel k, each with `smem` bytes of dynamic
 * shared memory, that one SM/CU holds at once, by
 * cuOccupancyMaxActiveBlocksPerMultiprocessor or its HIP module twin; 0
 * when the runtime lacks the call or it fails. */
static int kernel_blocks_per_sm(const struct device *d, const struct kfn *k, unsigned threads, unsigned smem)
{
    int n = 0;
    if (!d->rt.occupancy || d->rt.occupancy(&n, k->fn, (int)threads, smem) != 0) return 0;
    return n > 0 ? n : 0;
}

/* One launch: its grid, block, dynamic shared memory, and the tiles a
 * persistent grid strides over (0: each block is one tile). */
struct launch_dims { unsigned grid[3], threads, smem; uint64_t tiles; };

/* Note in d->geom, when set, launch l of kernel k, with its blocks per SM/CU. */
static void geom_note(struct device *d, const struct kfn *k, const struct launch_dims *l)
{
    struct launch_geom *g = d->geom;
    if (!g) return;
    if (g->n == MAX_GEOM) die(EXIT_DEVICE, "internal: more than %d kernels in one launch", MAX_GEOM);
    g->k[g->n++] = (struct kgeom){ k->name, { l->grid[0], l->grid[1], l->grid[2] }, l->threads,
                                   kernel_blocks_per_sm(d, k, l->threads, l->smem), l->tiles };
}

/* Let kernel k take `smem` bytes of dynamic shared memory (the CUDA driver
 * refuses more than 48 KiB without cuFuncSetAttribute); once per kernel and
 * size.  Exits 5 when the runtime cannot. */
static void kernel_allow_smem(struct device *d, struct kfn *k, unsigned smem)
{
    if (smem <= 48 * 1024 || smem <= k->smem_max) return;
    if (!d->rt.func_attr) die(EXIT_DEVICE, "%s needs %u bytes of shared memory and the runtime lacks cuFuncSetAttribute", k->name, smem);
    kg_res r = d->rt.func_attr(k->fn, 8 /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */, (int)smem);
    if (r != 0) die(EXIT_DEVICE, "allowing %s %u bytes of shared memory failed: %s (%d)", k->name, smem, gpu_err_name(d, r), r);
    k->smem_max = smem;
}

/* Launch kernel `name` (a static string) with the dimensions l; an empty grid
 * launches nothing.  Notes in d->launched_atomics whether the kernel declares
 * atomics, and in d->geom (when set) the geometry of what it launched. */
static void gpu_launch_dims(struct device *d, const char *name, const struct launch_dims *l, void **params)
{
    struct kfn *k = kernel_lookup(d, name);
    d->launched_atomics |= k->atomics;
    if (!l->grid[0] || !l->grid[1] || !l->grid[2]) return;
    kernel_allow_smem(d, k, l->smem);
    kg_res r = d->rt.launch(k->fn, l->grid[0], l->grid[1], l->grid[2], l->threads, 1, 1, l->smem, d->stream,
                            params, NULL);
    if (r != 0) die(EXIT_DEVICE, "launching %s failed: %s (%d)", name, gpu_err_name(d, r), r);
    geom_note(d, k, l);
}

/* gpu_launch_dims for a gx x gy x gz grid of `threads`-thread blocks, no
 * dynamic shared memory, one tile per block. */
static void gpu_launch(struct device *d, const char *name, unsigned gx, unsigned gy, unsigned gz,
                       unsigned threads, void **params)
{
    struct launch_dims l = { { gx, gy, gz }, threads, 0, 0 };
    gpu_launch_dims(d, name, &l, params);
}

/* ===== Compile cache ===== */

/* A compiled code object and where it came from. */
struct code_obj {
    char *data;
    size_t size;
    char sha[65];              /* sha256 of the code object: its identity */
    char key[65];              /* cache key: source, options, arch, compiler */
    char bin_path[PATH_MAX], log_path[PATH_MAX];
    int cached;                /* 1 = read from the cache, not compiled now */
    double seconds;            /* compile time when compiled now */
};

/* $KGATE_CACHE, else $XDG_CACHE_HOME/kgate, else ~/.cache/kgate. */
static const char *cache_dir(void)
{
    static char dir[PATH_MAX];
    const char *env = getenv("KGATE_CACHE"), *xdg = getenv("XDG_CACHE_HOME"),
               *home = getenv("HOME");
    if (env && *env) snprintf(dir, sizeof dir, "%s", env);
    else if (xdg && *xdg) snprintf(dir, sizeof dir, "%s/kgate", xdg);
    else if (home && *home) snprintf(dir, sizeof dir, "%s/.cache/kgate", home);
    else snprintf(dir, sizeof dir, ".kgate-cache");
    return dir;
}

/* In a compiler's child process: the crash or hang that tests plant with
 * $KGATE_TEST_COMPILER (crash|hang); nothing otherwise. */
static void compiler_test_hook(void)
{
    const char *hook = getenv("KGATE_TEST_COMPILER");
    if (hook && strcmp(hook, "crash") == 0) raise(SIGSEGV);
    if (hook && strcmp(hook, "hang") == 0) for (;;) pause();
}

/* The compiler's child process: compile, write the log and (on success) the
 * code object into the cache, exit 0 (compiled), 1 (compile error) or 2
 * (could not run the compiler).  Runs after fork(), so a crash or hang of the
 * compiler takes only this process down. */
static int compile_child(const struct rtc *c, const char *src, const char *name,
                         const char *const *opts, int nopts, const struct code_obj *co)
{
    compiler_test_hook();
    void *prog = NULL;
    int r = c->create(&prog, src, name, 0, NULL, NULL);
    if (r != 0) {
        const char *msg = c->err_string(r);
        write_file_atomic(co->log_path, msg, strlen(msg));
        return 2;
    }
    int cr = c->compile(prog, nopts, opts);
    size_t n = 0;
    c->log_size(prog, &n);
    char *log = xcalloc(1, n + 1);
    if (n) c->log(prog, log);
    write_file_atomic(co->log_path, log, strlen(log));
    free(log);
    if (cr != 0) return 1;
    if (c->code_size(prog, &n) != 0 || n == 0) return 2;
    char *code = xmalloc(n);
    if (c->code(prog, code) != 0 || write_file_atomic(co->bin_path, code, n) != 0) return 2;
    free(code);
    c->destroy(&prog);
    return 0;
}

/* Print up to `max_lines` lines of the compile log to stderr. */
static void print_log_head(const char *path, int max_lines)
{
    char *log = read_file(path, NULL);
    if (!log) return;
    char *p = log;
    for (int i = 0; i < max_lines && *p; i++) {
        size_t n = strcspn(p, "\n");
        fprintf(stderr, "  | %.*s\n", (int)n, p);
        p += n + (p[n] == '\n');
    }
    free(log);
}

/* Fork a compiler's child process: 0 in the child, its pid in the parent;
 * exits 5 if there can be no child. */
static pid_t compile_fork(void)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) die(EXIT_DEVICE, "cannot fork the compiler: %s", strerror(errno));
    return pid;
}

/* Wait for the compiler child (exit status 0 compiled, 1 compile error,
 * other: could not run) and return the seconds it took; exit 5 with one
 * clear line if it crashed, hung past $KGATE_COMPILE_TIMEOUT seconds
 * (default 600), or failed. */
static double compile_wait(pid_t pid, const char *what, const struct code_obj *co)
{
    const char *env = getenv("KGATE_COMPILE_TIMEOUT");
    double limit = env ? atof(env) : 600.0, t0 = now_s();
    int status = 0;
    for (;;) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) break;
        if (w < 0 && errno != EINTR) die(EXIT_DEVICE, "waiting for the compiler: %s", strerror(errno));
        if (now_s() - t0 > limit) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            die(EXIT_DEVICE, "compiler hung: no result after %.0f s compiling %s; killed", limit, what);
        }
        usleep(2000);
    }
    const char *log = access(co->log_path, R_OK) == 0 ? co->log_path : "none written";
    if (WIFSIGNALED(status))
        die(EXIT_DEVICE, "compiler crashed with signal %d (%s) compiling %s (log: %s)",
            WTERMSIG(status), strsignal(WTERMSIG(status)), what, log);
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 2;
    if (code == 1) {
        fprintf(stderr, "kgate: %s does not compile; compiler log (%s):\n", what, co->log_path);
        print_log_head(co->log_path, 40);
        exit(EXIT_DEVICE);
    }
    if (code != 0) die(EXIT_DEVICE, "compiler failed to run on %s (log: %s)", what, log);
    return now_s() - t0;
}

/* Name the cache entry of a compile: co's key is a hash of the compiler's
 * identity `ident` ("NVRTC 13.0", clang's version line), the source and the
 * options, its paths sit in cache_dir().  Reads the cached code object when
 * there is one: returns 1 if there was, 0 if it must be compiled into
 * co->bin_path.  Exits if the cache directory cannot be made. */
static int cache_lookup(const char *ident, const char *src, const char *const *opts, int nopts,
                        struct code_obj *co)
{
    struct sha256 h;
    sha256_init(&h);
    char ver[256];
    snprintf(ver, sizeof ver, "kgate-cache-1 %s", ident);
    sha256_update(&h, ver, strlen(ver) + 1);
    sha256_update(&h, src, strlen(src) + 1);
    for (int i = 0; i < nopts; i++) sha256_update(&h, opts[i], strlen(opts[i]) + 1);
    sha256_hex(&h, co->key);

    const char *dir = cache_dir();
    if (mkdir_p(dir) != 0) die(EXIT_DEVICE, "cannot create the cache directory %s: %s", dir, strerror(errno));
    if (snprintf(co->bin_path, sizeof co->bin_path, "%s/%s.bin", dir, co->key) >= PATH_MAX ||
        snprintf(co->log_path, sizeof co->log_path, "%s/%s.log", dir, co->key) >= PATH_MAX)
        die(EXIT_USAGE, "cache directory path too long: %s", dir);
    co->data = read_file(co->bin_path, &co->size);
    co->cached = co->data != NULL;
    return co->cached;
}

/* After cache_lookup and, when it missed, a compile into co->bin_path: read
 * the code object, hash it (its identity), and say on stderr where it came
 * from.  Exits 5 if the compile left no code object. */
static void cache_finish(const char *what, struct code_obj *co)
{
    if (!co->data) co->data = read_file(co->bin_path, &co->size);
    if (!co->data) die(EXIT_DEVICE, "compiled %s but cannot read %s", what, co->bin_path);
    struct sha256 h;
    sha256_init(&h);
    sha256_update(&h, co->data, co->size);
    sha256_hex(&h, co->sha);
    if (co->cached)
        fprintf(stderr, "kgate: %s: cached code object %.12s (%s)\n", what, co->sha, co->bin_path);
    else
        fprintf(stderr, "kgate: %s: compiled in %.2f s, code object %.12s (%s)\n", what,
                co->seconds, co->sha, co->bin_path);
}

/* Compile `src` for `arch` with the run-time compiler `c` of platform pf, or
 * take the code object from the on-disk cache (keyed by a hash of source,
 * options, arch and compiler version).  The compile runs in a child process.
 * `name` names the source in messages.  Exits 5 on any failure. */
static void compile_source(const struct rtc *c, enum platform pf, const char *src,
                           const char *name, const char *arch, const char *const *extra,
                           int nextra, struct code_obj *co)
{
    const char *opts[64];
    char archopt[128];
    int nopts = 0;
    snprintf(archopt, sizeof archopt, "%s=%s",
             pf == PF_CUDA ? "--gpu-architecture" : "--offload-arch", arch);
    opts[nopts++] = archopt;
    if (pf == PF_HIP) opts[nopts++] = "-O3";
    for (int i = 0; i < nextra && nopts < 64; i++) opts[nopts++] = extra[i];

    int ma = 0, mi = 0;
    c->version(&ma, &mi);
    char ident[64], what[256];
    snprintf(ident, sizeof ident, "%s %d.%d", RTC_NAME[pf], ma, mi);
    snprintf(what, sizeof what, "%s for %s with %s", name, arch, ident);
    if (!cache_lookup(ident, src, opts, nopts, co)) {
        pid_t pid = compile_fork();
        if (pid == 0) _exit(compile_child(c, src, name, opts, nopts, co));
        co->seconds = compile_wait(pid, what, co);
    }
    cache_finish(what, co);
}

/* --- arms: the builds a command runs side by side --- */

/* One build of the kernels: the reference arm (kernels.hip as shipped) or a
 * candidate (--variant NAME with -D definitions, or a --kernels FILE).  Its
 * identity is the sha256 of its code object.  The CPU device compiles
 * nothing and always runs ref.c's candidate; there an arm's identity is the
 * sha256 of its source and options, so that the ledger and the budget work
 * the same way without a GPU. */
struct arm {
    char name[64];                /* "reference", or the --variant name */
    const char *src, *src_name;   /* the source text and what to call it */
    char *defines[MAX_DEFINES + 1]; /* "-DNAME=VALUE", owned */
    int ndefines;
    char options[1024];           /* the definitions as one line, for reports and the ledger */
    int candidate, diagnostic;
    int copy;                     /* the A/A copy of another arm (noise, compare) */
    struct code_obj code;
    void *module;                 /* GPU: the loaded code object */
    struct kfns kfns;
    int tile_m, tile_n;           /* the GEMM tile it publishes (kg_gemm_tile_m/_n; 64 if absent) */
    int sm90_smem;                /* kg_gemm_sm90_smem: > 0 = it has the sm_90a GEMM, with this much dynamic smem */
    int sm90_tile_m, sm90_tile_n; /* that GEMM's tile */
    int sm90_cluster;             /* its blocks per cluster (1 or 2) */
    int sm90_pack;                /* 1: operands TMA cannot read are packed first (kg_pack_rows) */
};

/* Add the definition "NAME[=VALUE]" to arm a. */
static void arm_define(struct arm *a, const char *def)
{
    if (a->ndefines == MAX_DEFINES) die(EXIT_USAGE, "at most %d -D definitions", MAX_DEFINES);
    size_t n = strlen(def) + 3;
    a->defines[a->ndefines] = xmalloc(n);
    snprintf(a->defines[a->ndefines++], n, "-D%s", def);
    size_t used = strlen(a->options);
    snprintf(a->options + used, sizeof a->options - used, "%s-D%s", used ? " " : "", def);
}

/* The CPU device's stand-in for a code object: the sha256 of the arm's
 * source and definitions. */
static void arm_hash_cpu(struct arm *a)
{
    struct sha256 h;
    sha256_init(&h);
    sha256_update(&h, "kgate-cpu-arm", 14);
    sha256_update(&h, a->src, strlen(a->src) + 1);
    for (int i = 0; i < a->ndefines; i++) sha256_update(&h, a->defines[i], strlen(a->defines[i]) + 1);
    sha256_hex(&h, a->code.sha);
}

/* Make arm a's kernels the ones that launch on d. */
static void arm_use(struct device *d, struct arm *a)
{
    d->arm = a;
    d->module = a->module;
    d->kfns = &a->kfns;
}

/* Build arm a for device d: compile (or take from the cache) and load its
 * code object, and read the GEMM tile it publishes; on the CPU, hash it. */
static void arm_build(struct device *d, struct arm *a)
{
    a->tile_m = a->tile_n = 64;
    a->sm90_smem = 0;
    if (d->kind == DEV_CPU) { arm_hash_cpu(a); return; }
    compile_source(&d->rtc, d->pf, a->src, a->src_name, d->arch, (const char *const *)a->defines,
                   a->ndefines, &a->code);
    gpu_check(d, d->rt.module_load(&a->module, a->code.data), "loading the code object");
    arm_use(d, a);
    a->tile_m = module_int(d, "kg_gemm_tile", "_m", 64);
    a->tile_n = module_int(d, "kg_gemm_tile", "_n", 64);
    if (a->tile_m < 1 || a->tile_n < 1 || a->tile_m > 4096 || a->tile_n > 4096)
        die(EXIT_DEVICE, "%s publishes a GEMM tile of %dx%d", a->src_name, a->tile_m, a->tile_n);
    a->sm90_smem = module_int(d, "kg_gemm_sm90", "_smem", 0);
    a->sm90_tile_m = module_int(d, "kg_gemm_sm90", "_tile_m", 0);
    a->sm90_tile_n = module_int(d, "kg_gemm_sm90", "_tile_n", 0);
    a->sm90_cluster = module_int(d, "kg_gemm_sm90", "_cluster", 1);
    a->sm90_pack = module_int(d, "kg_gemm_sm90", "_pack", 0);
    if (a->sm90_smem && (a->sm90_smem < 0 || a->sm90_tile_m != 128 || a->sm90_tile_n < 1 || a->sm90_tile_n > 256 ||
                         (a->sm90_cluster != 1 && a->sm90_cluster != 2) || a->sm90_tile_n % a->sm90_cluster))
        die(EXIT_DEVICE, "%s publishes an sm_90a GEMM of %d bytes of shared memory, tile %dx%d and clusters of %d "
            "(want 128 x 1..256, clusters of 1 or 2 that divide the tile's columns)",
            a->src_name, a->sm90_smem, a->sm90_tile_m, a->sm90_tile_n, a->sm90_cluster);
}

/* Give back what arm_build and arm_define took. */
static void arm_free(struct arm *a)
{
    for (int i = 0; i < a->ndefines; i++) free(a->defines[i]);
    free(a->code.data);
    a->code.data = NULL;
    a->ndefines = 0;
}

/* ===== Cases ===== */

/* Options that apply to a whole run (not to one case). */
struct opts {
    int device_cpu, device_index;
    const char *kernels_path;     /* NULL: the embedded kernels.hip */
    const char *shapes_path;
    uint64_t seed;
    int json, full;
    double rtol, atol;            /* < 0: the dtype's default */
    const char *why;
    const char *inject;           /* NULL: none */
    const char *arch;             /* isa: compile target */
    int quiet;                    /* selftest: no rows, no progress */
    int repeat;                   /* runs per case compared (--repeat); 0: the command's default */
    const char *trades_precision; /* low precision: why the baseline SNR rule is waived */
    const char *variant;          /* --variant NAME: the candidate arm's name */
    const char *defines[MAX_DEFINES]; /* -D K=V, as given */
    int ndefines;
    int diagnostic;               /* --diagnostic: the variant is not deliverable */
    const char *ledger_path;      /* --ledger FILE; NULL: ./kgate.ledger where a ledger is kept */
    int budget;                   /* --budget N: distinct candidate code objects (0: the default) */
    const char *expect;           /* --expect wgmma|mma|mfma|wmma: the matrix instructions required */
    int rounds;                   /* compare and noise: interleaved rounds (0: the default) */
    const char *command;          /* argv[1], for the ledger */
};

/* Low precision: how a block of values gets one scale (--scaling), and
 * which fp8 encoding a case uses (--fp8; the device's until it is known). */
enum qscaling { QS_TENSOR, QS_ROW, QS_BLOCK, QS_MX };
static const char *const QSCALING[] = { "tensor", "row", "block", "mx" };
enum fp8_enc { ENC_DEVICE, ENC_OCP, ENC_FNUZ };

/* One case: an op with its dtype, layout, shape and options. */
struct kcase {
    const struct op *op;
    enum dtype dt;
    char layout[3];               /* gemm: A then B; N = as in C = A·B, T = transposed */
    uint32_t m, n, k;             /* gemm: M x N x K; grouped: N and K (M = the groups' sum) */
    int bwd;
    uint32_t *lens;               /* grouped: G group sizes; attn: B query then B key lengths */
    size_t nlens;                 /* G, or B */
    uint32_t batch, seq_q, seq_k; /* attn, fixed length: --batch B --seq Sq[:Sk] */
    uint32_t hq, hkv, dim;        /* attn: query and KV heads, head dim */
    int causal;
    double scale;                 /* attn: softmax scale; 0 = 1/sqrt(dim) */
    enum qfmt qfmt;               /* low precision: the inputs' element format (Q_NONE: dt in and out) */
    enum fp8_enc enc;             /* low precision: OCP or FNUZ (E4M3/E5M2 become the FNUZ formats) */
    enum qscaling scaling;
    int mx;                       /* low precision: MX blocks of 32 with E8M0 scales */
    enum qrule qrule;             /* MX: QR_MX_SPEC or QR_MX_UP */
    unsigned q_given;             /* Q_GIVEN_* bits: low-precision options that were given */
    char where[320];              /* "shapes.txt:12" or "command line", for messages */
    char label[160];              /* "gemm bf16 NT 4096x4096x4096 bwd" */
};

struct run;
struct plan;
struct refs;

/* An op is a row of this table: how to read its options, check a case, make
 * its inputs and outputs, launch the kernels of one output, and compute the
 * reference of one output on a check plan. */
struct op {
    const char *name;
    /* Apply option `key` (value `val`, NULL for a flag); return 1 if the value
     * was used, 0 if `key` is a flag, -1 if `key` is not an option of this op.
     * Bad values exit 2 naming c->where. */
    int (*set)(struct kcase *c, const char *key, const char *val);
    /* Check that the case is complete and sane (exit 2 if not); fill c->label. */
    void (*finish)(struct kcase *c);
    /* Make seeded inputs, upload them, allocate outputs (struct run). */
    void (*prepare)(struct run *r);
    /* Queue the kernels that compute output `o` and the outputs launched with
     * it (on the CPU device: compute them). */
    void (*launch)(struct run *r, int o);
    /* The double and same-precision references of output `o` on plan `p`;
     * NULL: the output is a product, computed from its parts. */
    void (*reference)(struct run *r, int o, const struct plan *p, struct refs *f);
};

/* Strictly parse a decimal integer in [lo, hi]; 0 on success. */
static int parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
    if (!s || !*s) return -1;
    uint64_t v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9') return -1;
        if (v > (UINT64_MAX - 9) / 10) return -1;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    if (v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

/* Strictly parse a finite non-negative number; 0 on success. */
static int parse_nonneg(const char *s, double *out)
{
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*end || errno || !isfinite(v) || v < 0) return -1;
    *out = v;
    return 0;
}

static int parse_dtype(const char *s, enum dtype *out)
{
    static const char *const alias[][2] = { { "fp32", "f32" }, { "float32", "f32" },
                                            { "fp16", "f16" }, { "half", "f16" },
                                            { "float16", "f16" }, { "bfloat16", "bf16" } };
    for (size_t i = 0; i < sizeof alias / sizeof *alias; i++)
        if (strcmp(s, alias[i][0]) == 0) s = alias[i][1];
    for (int t = 0; t < DT_COUNT; t++)
        if (strcmp(s, DTYPES[t].name) == 0) { *out = (enum dtype)t; return 0; }
    return -1;
}

/* Parse "AxBxC..." into exactly `n` dimensions, each in [1, MAX_DIM]; on
 * failure exit 2 with a line that says what is wrong. */
static void parse_dims(const struct kcase *c, const char *flag, const char *s, int n, uint32_t *dims,
                       const char *form)
{
    char buf[128];
    if (strlen(s) >= sizeof buf) die(EXIT_USAGE, "%s: %s %.40s...: too long", c->where, flag, s);
    snprintf(buf, sizeof buf, "%s", s);
    int got = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, "x", &save); tok; tok = strtok_r(NULL, "x", &save)) {
        uint64_t v;
        if (got == n) die(EXIT_USAGE, "%s: %s %s: expected %s", c->where, flag, s, form);
        if (parse_u64(tok, 0, UINT64_MAX, &v) != 0)
            die(EXIT_USAGE, "%s: %s %s: '%s' is not a whole number (expected %s)", c->where, flag,
                s, tok, form);
        if (v == 0) die(EXIT_USAGE, "%s: %s %s: every dimension must be at least 1", c->where, flag, s);
        if (v > MAX_DIM)
            die(EXIT_USAGE, "%s: %s %s: %" PRIu64 " exceeds the largest dimension kgate takes (%u)",
                c->where, flag, s, v, MAX_DIM);
        dims[got++] = (uint32_t)v;
    }
    size_t len = strlen(s);
    if (got != n || s[0] == 'x' || s[len - 1] == 'x' || strstr(s, "xx"))
        die(EXIT_USAGE, "%s: %s %s: expected %s", c->where, flag, s, form);
}

/* Parse "A" or "A:B" (pairs) into whole numbers in [lo, MAX_DIM]; *b = *a
 * when no ":B" is given.  Exit 2 naming the flag on anything else. */
static void parse_pair(const struct kcase *c, const char *flag, const char *s, int pairs, uint32_t lo,
                       uint32_t *a, uint32_t *b)
{
    char buf[64];
    const char *colon = pairs ? strchr(s, ':') : NULL;
    size_t n = colon ? (size_t)(colon - s) : strlen(s);
    uint64_t v, w;
    if (n >= sizeof buf) die(EXIT_USAGE, "%s: %s %.40s...: too long", c->where, flag, s);
    snprintf(buf, sizeof buf, "%.*s", (int)n, s);
    if (parse_u64(buf, lo, MAX_DIM, &v) != 0 || (colon && parse_u64(colon + 1, lo, MAX_DIM, &w) != 0))
        die(EXIT_USAGE, "%s: %s %s: expected %s, each a whole number from %u to %u", c->where, flag, s,
            pairs ? "N or N:M" : "a whole number", lo, MAX_DIM);
    *a = (uint32_t)v, *b = colon ? (uint32_t)w : (uint32_t)v;
}

/* Parse a comma-separated list ("0,4096,1" or, with pairs, "5:7,0,3:1")
 * into c->lens: the first entries of each item, then (pairs) the second
 * entries, c->nlens items, at most MAX_GROUPS. */
static void parse_lens(struct kcase *c, const char *flag, const char *s, int pairs)
{
    size_t n = 1;
    for (const char *p = s; *p; p++) n += *p == ',';
    if (n > MAX_GROUPS) die(EXIT_USAGE, "%s: %s: %zu entries, at most %d", c->where, flag, n, MAX_GROUPS);
    if (!*s || s[0] == ',' || s[strlen(s) - 1] == ',' || strstr(s, ",,"))
        die(EXIT_USAGE, "%s: %s %s: expected a comma-separated list of whole numbers", c->where, flag, s);
    free(c->lens);
    c->lens = xmalloc(2 * n * sizeof(uint32_t));
    c->nlens = n;
    const char *p = s;
    for (size_t i = 0; i < n; i++) {
        char item[64];
        size_t len = strcspn(p, ",");
        if (len >= sizeof item) die(EXIT_USAGE, "%s: %s: entry '%.20s...' too long", c->where, flag, p);
        snprintf(item, sizeof item, "%.*s", (int)len, p);
        parse_pair(c, flag, item, pairs, 0, &c->lens[i], &c->lens[n + i]);
        p += len + 1;
    }
}

static void set_dtype(struct kcase *c, const char *val, int allow_f32)
{
    if (!val || parse_dtype(val, &c->dt) != 0 || (!allow_f32 && c->dt == DT_F32))
        die(EXIT_USAGE, "%s: --dtype %s: unknown dtype for %s (%s)", c->where, val ? val : "",
            c->op->name, allow_f32 ? "f32, f16, bf16" : "f16, bf16");
}

/* --- low precision: options shared by gemm and grouped --- */

/* The low-precision --dtype names: an element format, MX (blocks of 32 with
 * an E8M0 scale) or not (one fp32 scale per tensor, row or block). */
static const struct { const char *name; enum qfmt f; int mx; } QDTYPES[] = {
    { "e4m3", Q_E4M3, 0 }, { "e5m2", Q_E5M2, 0 },
    { "mxfp8", Q_E4M3, 1 }, { "mxfp8e5m2", Q_E5M2, 1 }, { "mxfp4", Q_E2M1, 1 },
};
#define N_QDTYPES (sizeof QDTYPES / sizeof *QDTYPES)
#define Q_NAMES "e4m3, e5m2, mxfp8, mxfp8e5m2, mxfp4"

#define Q_GIVEN_SCALING 1u
#define Q_GIVEN_RULE 2u
#define Q_GIVEN_OUT 4u
#define Q_GIVEN_ENC 8u

/* The element format a case runs: E4M3/E5M2 in its encoding, or E2M1. */
static enum qfmt q_format(const struct kcase *c)
{
    if (c->enc != ENC_FNUZ) return c->qfmt;
    return c->qfmt == Q_E4M3 ? Q_E4M3_FNUZ : c->qfmt == Q_E5M2 ? Q_E5M2_FNUZ : c->qfmt;
}

/* A two-valued option: 0 if val is a, 1 if it is b; else exit 2 with
 * "WHERE: KEY VAL: expected" (c->where names the case). */
static int one_of2(const struct kcase *c, const char *key, const char *val, const char *a, const char *b,
                   const char *expected)
{
    if (strcmp(val, a) == 0) return 0;
    if (strcmp(val, b) == 0) return 1;
    die(EXIT_USAGE, "%s: %s %s: %s", c->where, key, val, expected);
}

/* Options of the low-precision path (--dtype with one of Q_NAMES,
 * --scaling, --mx-rule, --out, --fp8); returns as op->set does, -1 for a
 * key (or a plain --dtype) it leaves to the caller. */
static int q_set(struct kcase *c, const char *key, const char *val)
{
    if (!val) val = "";
    if (strcmp(key, "--dtype") == 0) {
        c->qfmt = Q_NONE;
        for (size_t i = 0; i < N_QDTYPES; i++)
            if (strcmp(val, QDTYPES[i].name) == 0) {
                c->qfmt = QDTYPES[i].f, c->mx = QDTYPES[i].mx;
                if (!(c->q_given & Q_GIVEN_OUT)) c->dt = DT_BF16;
                return 1;
            }
        return -1;
    }
    if (strcmp(key, "--scaling") == 0) {
        int k = 0, n = (int)(sizeof QSCALING / sizeof *QSCALING);
        while (k < n && strcmp(val, QSCALING[k]) != 0) k++;
        if (k == n) die(EXIT_USAGE, "%s: --scaling %s: expected tensor, row, block or mx", c->where, val);
        c->scaling = (enum qscaling)k, c->q_given |= Q_GIVEN_SCALING;
        return 1;
    }
    if (strcmp(key, "--mx-rule") == 0) {
        c->qrule = one_of2(c, key, val, "spec", "up", "expected spec or up") ? QR_MX_UP : QR_MX_SPEC;
        c->q_given |= Q_GIVEN_RULE;
        return 1;
    }
    if (strcmp(key, "--out") == 0) {
        c->dt = one_of2(c, key, val, "bf16", "f32", "a low-precision GEMM writes bf16 or f32") ? DT_F32 : DT_BF16;
        c->q_given |= Q_GIVEN_OUT;
        return 1;
    }
    if (strcmp(key, "--fp8") == 0) {
        c->enc = one_of2(c, key, val, "ocp", "fnuz", "expected ocp or fnuz") ? ENC_FNUZ : ENC_OCP;
        c->q_given |= Q_GIVEN_ENC;
        return 1;
    }
    return -1;
}

/* Check a case's low-precision options (exit 2 naming c->where). */
static void q_finish(struct kcase *c)
{
    if (c->qfmt == Q_NONE) {
        if (c->q_given)
            die(EXIT_USAGE, "%s: --scaling, --mx-rule, --out and --fp8 apply to the low-precision dtypes (%s)",
                c->where, Q_NAMES);
        return;
    }
    if (strcmp(c->layout, "NT") != 0)
        die(EXIT_USAGE, "%s: --layout %s: low precision reads A as [M][K] and B as [N][K], K contiguous as fp8 "
            "tensor cores need it: --layout NT", c->where, c->layout);
    if (c->bwd) die(EXIT_USAGE, "%s: --bwd: the low-precision path has forward products only", c->where);
    if (c->mx && (c->q_given & Q_GIVEN_SCALING) && c->scaling != QS_MX)
        die(EXIT_USAGE, "%s: --scaling %s: the MX dtypes carry their own scaling (blocks of 32, E8M0)", c->where,
            QSCALING[c->scaling]);
    if (!c->mx && c->scaling == QS_MX)
        die(EXIT_USAGE, "%s: --scaling mx: give --dtype mxfp8, mxfp8e5m2 or mxfp4", c->where);
    if (!c->mx && (c->q_given & Q_GIVEN_RULE))
        die(EXIT_USAGE, "%s: --mx-rule applies to the MX dtypes (mxfp8, mxfp8e5m2, mxfp4)", c->where);
    if (c->mx && c->enc == ENC_FNUZ)
        die(EXIT_USAGE, "%s: --fp8 fnuz: MX elements are OCP formats", c->where);
    if (c->mx) c->scaling = QS_MX, c->enc = ENC_OCP, c->qrule = c->qrule == QR_MX_UP ? QR_MX_UP : QR_MX_SPEC;
    if (c->qfmt == Q_E2M1) c->enc = ENC_OCP;
}

/* The dtype part of a label: "bf16", or for low precision the inputs, the
 * encoding, the scaling or MX rule and the output: "e4m3 ocp row->bf16",
 * "mxfp4 spec->f32". */
static void dtype_label(const struct kcase *c, char *buf, size_t n)
{
    if (c->qfmt == Q_NONE) { snprintf(buf, n, "%s", DTYPES[c->dt].name); return; }
    const char *name = "?";
    for (size_t i = 0; i < N_QDTYPES; i++)
        if (QDTYPES[i].f == c->qfmt && QDTYPES[i].mx == c->mx) name = QDTYPES[i].name;
    if (c->mx)
        snprintf(buf, n, "%s %s->%s", name, c->qrule == QR_MX_UP ? "up" : "spec", DTYPES[c->dt].name);
    else
        snprintf(buf, n, "%s %s%s->%s", name, c->enc == ENC_FNUZ ? "fnuz " : c->enc == ENC_OCP ? "ocp " : "",
                 QSCALING[c->scaling], DTYPES[c->dt].name);
}

/* --- gemm --- */

static int gemm_set(struct kcase *c, const char *key, const char *val)
{
    if (strcmp(key, "--bwd") == 0) { c->bwd = 1; return 0; }
    int q = q_set(c, key, val);
    if (q >= 0) return q;
    if (strcmp(key, "--dtype") == 0) { set_dtype(c, val, 1); return 1; }
    if (strcmp(key, "--layout") == 0) {
        if (!val || strlen(val) != 2 || !strchr("NT", val[0]) || !strchr("NT", val[1]))
            die(EXIT_USAGE, "%s: --layout %s: unknown layout (NN, NT, TN, TT)", c->where, val ? val : "");
        memcpy(c->layout, val, 3);
        return 1;
    }
    if (strcmp(key, "--shape") == 0) {
        uint32_t d[3];
        if (!val) die(EXIT_USAGE, "%s: --shape needs a value MxNxK", c->where);
        parse_dims(c, "--shape", val, 3, d, "MxNxK, e.g. 4096x4096x4096");
        c->m = d[0], c->n = d[1], c->k = d[2];
        return 1;
    }
    return -1;
}

static void gemm_finish(struct kcase *c)
{
    if (!c->m) die(EXIT_USAGE, "%s: gemm needs --shape MxNxK", c->where);
    uint64_t m = c->m, n = c->n, k = c->k;
    if (m * k > MAX_ELEMS || k * n > MAX_ELEMS || m * n > MAX_ELEMS)
        die(EXIT_USAGE, "%s: --shape %ux%ux%u: a matrix would exceed %llu elements", c->where, c->m,
            c->n, c->k, (unsigned long long)MAX_ELEMS);
    q_finish(c);
    char dt[64];
    dtype_label(c, dt, sizeof dt);
    snprintf(c->label, sizeof c->label, "gemm %s %s %ux%ux%u%s", dt, c->layout, c->m, c->n, c->k,
             c->bwd ? " bwd" : "");
}

/* --- grouped gemm --- */

static int grouped_set(struct kcase *c, const char *key, const char *val)
{
    if (strcmp(key, "--layout") == 0) {
        if (!val || (strcmp(val, "NN") != 0 && strcmp(val, "NT") != 0))
            die(EXIT_USAGE, "%s: --layout %s: grouped takes NN (B is [G][K][N]) or NT (B is [G][N][K])",
                c->where, val ? val : "");
        memcpy(c->layout, val, 3);
        return 1;
    }
    if (strcmp(key, "--groups") == 0) {
        if (!val) die(EXIT_USAGE, "%s: --groups needs a list of group sizes, e.g. 0,4096,1", c->where);
        parse_lens(c, key, val, 0);
        return 1;
    }
    if (strcmp(key, "--shape") == 0) {
        uint32_t d[2];
        if (!val) die(EXIT_USAGE, "%s: --shape needs a value NxK", c->where);
        parse_dims(c, "--shape", val, 2, d, "NxK (the groups give M), e.g. 4096x4096");
        c->n = d[0], c->k = d[1];
        return 1;
    }
    return gemm_set(c, key, val);   /* --dtype, --bwd */
}

static void grouped_finish(struct kcase *c)
{
    if (!c->lens) die(EXIT_USAGE, "%s: grouped needs --groups M1,M2,... (sizes may be 0)", c->where);
    if (!c->n) die(EXIT_USAGE, "%s: grouped needs --shape NxK", c->where);
    uint64_t m = 0, lo = UINT32_MAX, hi = 0, n = c->n, k = c->k, g = c->nlens;
    for (size_t i = 0; i < c->nlens; i++) {
        m += c->lens[i];
        lo = c->lens[i] < lo ? c->lens[i] : lo, hi = c->lens[i] > hi ? c->lens[i] : hi;
    }
    if (m > MAX_DIM) die(EXIT_USAGE, "%s: --groups: the sizes add up to %" PRIu64 ", more than %u rows",
                         c->where, m, MAX_DIM);
    if (m * k > MAX_ELEMS || g * k * n > MAX_ELEMS || m * n > MAX_ELEMS)
        die(EXIT_USAGE, "%s: grouped %zu groups of %" PRIu64 " rows x%ux%u: a tensor would exceed %llu "
            "elements", c->where, c->nlens, m, c->n, c->k, (unsigned long long)MAX_ELEMS);
    c->m = (uint32_t)m;
    q_finish(c);
    char dt[64];
    dtype_label(c, dt, sizeof dt);
    snprintf(c->label, sizeof c->label, "grouped %s %s G=%zu M=%" PRIu64 "[%" PRIu64 "..%" PRIu64 "] "
             "N=%u K=%u%s", dt, c->layout, c->nlens, m, lo, hi, c->n, c->k, c->bwd ? " bwd" : "");
}

/* --- attention --- */

static int attn_set(struct kcase *c, const char *key, const char *val)
{
    uint32_t a, b;
    if (strcmp(key, "--bwd") == 0) { c->bwd = 1; return 0; }
    if (strcmp(key, "--causal") == 0) { c->causal = 1; return 0; }
    static const char *const with_value[] = { "--dtype", "--batch", "--heads", "--seq", "--seqlens",
                                              "--dim", "--scale" };
    for (size_t i = 0; i < sizeof with_value / sizeof *with_value; i++)
        if (!val && strcmp(key, with_value[i]) == 0)
            die(EXIT_USAGE, "%s: %s needs a value (see kgate --help)", c->where, key);
    if (strcmp(key, "--dtype") == 0) { set_dtype(c, val, 0); return 1; }
    if (strcmp(key, "--batch") == 0) { parse_pair(c, key, val, 0, 1, &c->batch, &b); return 1; }
    if (strcmp(key, "--heads") == 0) { parse_pair(c, key, val, 1, 1, &c->hq, &c->hkv); return 1; }
    if (strcmp(key, "--seq") == 0) { parse_pair(c, key, val, 1, 1, &c->seq_q, &c->seq_k); return 1; }
    if (strcmp(key, "--seqlens") == 0) { parse_lens(c, key, val, 1); return 1; }
    if (strcmp(key, "--dim") == 0) {
        parse_pair(c, key, val, 0, 1, &a, &b);
        if (a > KG_ATTN_DMAX) die(EXIT_USAGE, "%s: --dim %u: head dims go up to %d", c->where, a, KG_ATTN_DMAX);
        c->dim = a;
        return 1;
    }
    if (strcmp(key, "--scale") == 0) {
        if (parse_nonneg(val, &c->scale) != 0 || c->scale == 0)
            die(EXIT_USAGE, "%s: --scale %s: expected a number > 0", c->where, val);
        return 1;
    }
    return -1;
}

/* The attention case's lengths: --seqlens as given, or --batch copies of
 * --seq; checks heads, dims and sizes. */
static void attn_finish(struct kcase *c)
{
    if (c->lens && (c->seq_q || c->batch))
        die(EXIT_USAGE, "%s: give --seqlens, or --batch and --seq, not both", c->where);
    if (!c->lens && !c->seq_q) die(EXIT_USAGE, "%s: attn needs --seq Sq[:Sk] or --seqlens", c->where);
    if (!c->hq) die(EXIT_USAGE, "%s: attn needs --heads Hq[:Hkv]", c->where);
    if (!c->dim) die(EXIT_USAGE, "%s: attn needs --dim D (head dim, 1..%d)", c->where, KG_ATTN_DMAX);
    if (c->hq % c->hkv)
        die(EXIT_USAGE, "%s: --heads %u:%u: query heads must be a multiple of KV heads", c->where, c->hq, c->hkv);
    if (c->hq > MAX_HEADS) die(EXIT_USAGE, "%s: --heads %u: at most %d query heads", c->where, c->hq, MAX_HEADS);
    int varlen = c->lens != NULL;
    if (!varlen) {
        c->nlens = c->batch ? c->batch : 1;
        if (c->nlens > MAX_GROUPS) die(EXIT_USAGE, "%s: --batch %zu: at most %d", c->where, c->nlens, MAX_GROUPS);
        c->lens = xmalloc(2 * c->nlens * sizeof(uint32_t));
        for (size_t i = 0; i < c->nlens; i++) c->lens[i] = c->seq_q, c->lens[c->nlens + i] = c->seq_k;
    }
    uint64_t tq = 0, tk = 0, lo = UINT32_MAX, hi = 0;
    for (size_t i = 0; i < c->nlens; i++) {
        tq += c->lens[i], tk += c->lens[c->nlens + i];
        lo = c->lens[i] < lo ? c->lens[i] : lo, hi = c->lens[i] > hi ? c->lens[i] : hi;
    }
    if (tq > MAX_DIM || tk > MAX_DIM || tq * c->hq * c->dim > MAX_ELEMS || tk * c->hkv * c->dim > MAX_ELEMS)
        die(EXIT_USAGE, "%s: attn with %" PRIu64 " query and %" PRIu64 " key tokens: a tensor would exceed "
            "%u tokens or %llu elements", c->where, tq, tk, MAX_DIM, (unsigned long long)MAX_ELEMS);
    char seqs[64];
    if (varlen) snprintf(seqs, sizeof seqs, "varlen %zu [%" PRIu64 "..%" PRIu64 "]", c->nlens, lo, hi);
    else snprintf(seqs, sizeof seqs, "b%zu s%u:%u", c->nlens, c->seq_q, c->seq_k);
    snprintf(c->label, sizeof c->label, "attn %s %s h%u:%u d%u%s%s", DTYPES[c->dt].name, seqs, c->hq,
             c->hkv, c->dim, c->causal ? " causal" : "", c->bwd ? " bwd" : "");
}

static void gemm_prepare(struct run *r);
static void grouped_prepare(struct run *r);
static void attn_prepare(struct run *r);
static void product_launch(struct run *r, int o);
static void attn_launch(struct run *r, int o);
static void attn_reference(struct run *r, int o, const struct plan *p, struct refs *f);

static const struct op OPS[] = {
    { "gemm", gemm_set, gemm_finish, gemm_prepare, product_launch, NULL },
    { "grouped", grouped_set, grouped_finish, grouped_prepare, product_launch, NULL },
    { "attn", attn_set, attn_finish, attn_prepare, attn_launch, attn_reference },
};

static const struct op *find_op(const char *name)
{
    for (size_t i = 0; i < sizeof OPS / sizeof *OPS; i++)
        if (strcmp(OPS[i].name, name) == 0) return &OPS[i];
    return NULL;
}

static void case_init(struct kcase *c, const struct op *op, const char *where)
{
    memset(c, 0, sizeof *c);
    c->op = op;
    c->dt = DT_BF16;
    c->qfmt = Q_NONE;
    memcpy(c->layout, "NT", 3);
    snprintf(c->where, sizeof c->where, "%s", where);
}

static void case_free(struct kcase *c)
{
    free(c->lens);
    c->lens = NULL;
}

/* Global options: set in `o` and return how many arguments were used (1 or
 * 2), or 0 if argv[i] is not a global option. */
/* A -D definition: NAME or NAME=VALUE, NAME an identifier, VALUE without
 * spaces or quotes (it reaches the compiler as one option). */
static int define_ok(const char *d)
{
    if (!(isalpha((unsigned char)*d) || *d == '_')) return 0;
    size_t n = strspn(d, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_");
    if (!d[n]) return 1;
    if (d[n] != '=' || !d[n + 1]) return 0;
    for (const char *p = d + n + 1; *p; p++)
        if (isspace((unsigned char)*p) || *p == '"' || *p == '\'' || *p == '\\') return 0;
    return 1;
}

static int isa_class(const char *name);

/* The porting options (--variant, -D, --diagnostic, --ledger, --budget,
 * --expect, --rounds); `val` is the next argument.  Returns the arguments
 * used, 0 if `key` is none of them; exit 2 on a bad value. */
static int parse_variant_opt(struct opts *o, const char *key, const char *val)
{
    uint64_t v;
    if (strcmp(key, "--diagnostic") == 0) { o->diagnostic = 1; return 1; }
    if (strncmp(key, "-D", 2) == 0) {
        const char *d = key[2] ? key + 2 : val;
        if (!define_ok(d)) die(EXIT_USAGE, "-D %s: expected NAME or NAME=VALUE (an identifier; no spaces or quotes)", d);
        if (o->ndefines == MAX_DEFINES) die(EXIT_USAGE, "-D %s: at most %d definitions", d, MAX_DEFINES);
        o->defines[o->ndefines++] = d;
        return key[2] ? 1 : 2;
    }
    if (strcmp(key, "--variant") == 0) {
        size_t n = strspn(val, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-.");
        if (!*val || val[n] || n > 48)
            die(EXIT_USAGE, "--variant %s: expected a name of up to 48 letters, digits, '_', '-' and '.'", val);
        o->variant = val;
        return 2;
    }
    if (strcmp(key, "--ledger") == 0) { o->ledger_path = val; return 2; }
    if (strcmp(key, "--budget") == 0) {
        if (parse_u64(val, 1, 1000, &v) != 0) die(EXIT_USAGE, "--budget %s: expected a whole number from 1 to 1000", val);
        o->budget = (int)v;
        return 2;
    }
    if (strcmp(key, "--rounds") == 0) {
        if (parse_u64(val, 2, 100, &v) != 0) die(EXIT_USAGE, "--rounds %s: expected a whole number from 2 to 100", val);
        o->rounds = (int)v;
        return 2;
    }
    if (strcmp(key, "--expect") == 0) {
        if (isa_class(val) < 0) die(EXIT_USAGE, "--expect %s: expected wgmma, mma, mfma or wmma", val);
        o->expect = val;
        return 2;
    }
    return 0;
}

static int parse_global(struct opts *o, int argc, char **argv, int i)
{
    const char *key = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
    static const char *const with_value[] = { "--device", "--kernels", "--shapes", "--seed",
                                              "--rtol", "--atol", "--why", "--inject", "--arch",
                                              "--repeat", "--trades-precision", "--variant", "-D",
                                              "--ledger", "--budget", "--expect", "--rounds" };
    int takes = 0;
    for (size_t k = 0; k < sizeof with_value / sizeof *with_value; k++)
        if (strcmp(key, with_value[k]) == 0) takes = 1;
    if (takes && !val) die(EXIT_USAGE, "%s needs a value (see kgate --help)", key);
    if (strcmp(key, "--json") == 0) { o->json = 1; return 1; }
    if (strcmp(key, "--full") == 0) { o->full = 1; return 1; }
    if (strcmp(key, "--device") == 0) {
        uint64_t v;
        if (strcmp(val, "cpu") == 0) o->device_cpu = 1;
        else if (parse_u64(val, 0, 1024, &v) == 0) o->device_index = (int)v, o->device_cpu = 0;
        else die(EXIT_USAGE, "--device %s: expected a device number or 'cpu'", val);
        return 2;
    }
    if (strcmp(key, "--seed") == 0) {
        if (parse_u64(val, 0, UINT64_MAX, &o->seed) != 0)
            die(EXIT_USAGE, "--seed %s: expected a non-negative whole number", val);
        return 2;
    }
    if (strcmp(key, "--repeat") == 0) {
        uint64_t v;
        if (parse_u64(val, 1, 1000, &v) != 0) die(EXIT_USAGE, "--repeat %s: expected a whole number from 1 to 1000", val);
        o->repeat = (int)v;
        return 2;
    }
    if (strcmp(key, "--rtol") == 0 || strcmp(key, "--atol") == 0) {
        double *dst = key[2] == 'r' ? &o->rtol : &o->atol;
        if (parse_nonneg(val, dst) != 0) die(EXIT_USAGE, "%s %s: expected a number >= 0", key, val);
        return 2;
    }
    if (strcmp(key, "--kernels") == 0) { o->kernels_path = val; return 2; }
    if (strcmp(key, "--shapes") == 0) { o->shapes_path = val; return 2; }
    if (strcmp(key, "--why") == 0) { o->why = val; return 2; }
    if (strcmp(key, "--inject") == 0) { o->inject = val; return 2; }
    if (strcmp(key, "--arch") == 0) { o->arch = val; return 2; }
    if (strcmp(key, "--trades-precision") == 0) {
        if (!*val) die(EXIT_USAGE, "--trades-precision needs a reason");
        o->trades_precision = val;
        return 2;
    }
    return parse_variant_opt(o, key, val);
}

/* Apply case options argv[from..to) to c (global options are skipped when
 * allow_global); exit 2 on anything unknown. */
static void parse_case_args(struct kcase *c, struct opts *o, int argc, char **argv, int from,
                            int allow_global)
{
    for (int i = from; i < argc;) {
        int used = allow_global ? parse_global(o, argc, argv, i) : 0;
        if (used) { i += used; continue; }
        if (strncmp(argv[i], "--", 2) != 0)
            die(EXIT_USAGE, "%s: unexpected argument '%s'", c->where, argv[i]);
        int r = c->op->set(c, argv[i], i + 1 < argc ? argv[i + 1] : NULL);
        if (r < 0) {
            if (!allow_global && parse_global(&(struct opts){ 0 }, argc, argv, i))
                die(EXIT_USAGE, "%s: %s is a run option, not a case option", c->where, argv[i]);
            die(EXIT_USAGE, "%s: unknown option '%s' for %s", c->where, argv[i], c->op->name);
        }
        i += 1 + r;
    }
    c->op->finish(c);
}

/* Read a shapes file: one case per line, written as a kgate command without
 * the program name ("gemm --dtype bf16 --layout NT --shape 4096x4096x4096");
 * '#' starts a comment; blank lines are skipped.  Exits 2 naming the file and
 * line of anything that does not parse. */
static struct kcase *read_shapes(const char *path, size_t *count)
{
    char *text = read_file(path, NULL);
    if (!text) die(EXIT_USAGE, "cannot read shapes file %s: %s", path, strerror(errno));
    size_t cap = 16, n = 0;
    struct kcase *cases = xmalloc(cap * sizeof *cases);
    int lineno = 0;
    for (char *line = text, *next; line; line = next) {
        lineno++;
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        line[strcspn(line, "#")] = 0;
        char *argv[64];
        int argc = 0;
        for (char *save = NULL, *tok = strtok_r(line, " \t\r", &save); tok;
             tok = strtok_r(NULL, " \t\r", &save)) {
            if (argc == 64) die(EXIT_USAGE, "%s:%d: too many words", path, lineno);
            argv[argc++] = tok;
        }
        if (argc == 0) continue;
        char where[320];
        snprintf(where, sizeof where, "%s:%d", path, lineno);
        const struct op *op = find_op(argv[0]);
        if (!op) die(EXIT_USAGE, "%s: unknown operation '%s'", where, argv[0]);
        if (n == cap) cases = realloc(cases, (cap *= 2) * sizeof *cases);
        if (!cases) die(EXIT_DEVICE, "out of host memory reading %s", path);
        case_init(&cases[n], op, where);
        parse_case_args(&cases[n], NULL, argc, argv, 1, 0);
        n++;
    }
    free(text);
    if (n == 0) die(EXIT_USAGE, "%s: no cases in the file", path);
    *count = n;
    return cases;
}

/* ===== Inputs ===== */

/* A block of a product output: rows [row0, row0 + rows) of the output are
 * x (rows x inner) · y (inner x cols), canonical row-major floats. */
struct part { size_t row0, rows, inner; const float *x, *y; const struct qprod *q; };

/* How a product output is launched.  X[m][k] is at dx + m*sxm + k*sxk,
 * Y[k][n] at dy + k*syk + n*syn, C[m][n] at buf + m*srow + n*scol; and by
 * groups: ragged rows (group g owns rows [offs[g], offs[g+1]) and reads Y at
 * + g*syg) or ragged inner (group g sums k over [offs[g], offs[g+1]) and
 * writes C at + g*scg). */
enum ragged { RAG_NONE, RAG_ROWS, RAG_INNER };
struct prod_launch {
    enum ragged ragged;
    uint64_t dx, dy, doffs, dtiles;   /* doffs, dtiles: device int arrays (groups) */
    int64_t sxm, sxk, syk, syn, syg, scg;
    size_t m, n, k, groups, tiles;    /* tiles: ragged rows' total row tiles of 64 */
    const uint32_t *offs;             /* host copy of the group offsets */
    uint64_t dpack;                   /* sm_90a: the operands packed for TMA (sm90_pack), made on first use */
};

/* One output of a case, as the gates see it: a rows x cols matrix of dtype
 * dt stored in device memory with element strides (srow, scol), between two
 * guard bands. */
struct output {
    const char *name;             /* "C", "dA", "dB", "O", "LSE", "dQ", "dK", "dV" */
    enum dtype dt;
    size_t rows, cols;
    int64_t srow, scol;           /* storage strides, elements */
    size_t elems;                 /* storage size, elements */
    uint64_t buf;                 /* device buffer: the first element */
    size_t guard;                 /* bytes poisoned before and after the storage */
    int launch;                   /* the output whose launch computes this one (itself: the owner) */
    double flops;                 /* of the launch, on its owner */
    double check_macs;            /* multiply-adds of a full reference: full or sampled check */
    unsigned head_dim;            /* > 0: a sampled plan's columns are one whole head of this many */
    int grad;                     /* an attention gradient: tolerances as out_atol says */
    const uint32_t *seg;          /* row segments (groups, sequences): nseg + 1 offsets, or NULL */
    size_t nseg;
    const char *seg_name;         /* "group", "sequence" */
    struct part *parts;           /* products: the blocks the reference multiplies */
    size_t nparts;
    struct prod_launch pl;        /* products: the launch */
};

#define MAX_OUT 6
#define MAX_OWNED 32
#define GUARD_BYTES 4096

struct attn_case;
struct qrun;

/* Everything one case needs while it runs; release_run frees it. */
struct run {
    const struct kcase *c;
    struct device *d;
    const struct opts *o;
    uint64_t key;                 /* input stream key: seed, case label and lengths */
    int nout;
    struct output out[MAX_OUT];
    void *host[MAX_OWNED];        /* host buffers, owned */
    int nhost;
    uint64_t dev[MAX_OWNED];      /* device buffers, owned */
    int ndev;
    int inputs_nonzero;           /* every input has max|x| > 0 */
    struct attn_case *attn;       /* attn cases: geometry, inputs, statistics */
    struct qrun *q;               /* low-precision cases: operands, scales, the quantize stage */
    struct launch_geom *geom;     /* GPU, per launch owner: the kernels its last launch ran (the current arm's) */
    int inject_off;               /* the arm that runs now is not the one --inject plants a fault in */
};

static void *run_owned(struct run *r, size_t bytes)
{
    if (r->nhost == MAX_OWNED) die(EXIT_DEVICE, "internal: too many host buffers");
    return r->host[r->nhost++] = xcalloc(1, bytes);
}

static float *run_host(struct run *r, size_t n) { return run_owned(r, n * sizeof(float)); }

static uint64_t run_dev(struct run *r, size_t bytes)
{
    if (r->ndev == MAX_OWNED) die(EXIT_DEVICE, "internal: too many device buffers");
    return r->dev[r->ndev++] = dev_alloc(r->d, bytes);
}

static void release_run(struct run *r)
{
    for (int i = 0; i < r->nhost; i++) free(r->host[i]);
    for (int i = 0; i < r->ndev; i++) dev_free(r->d, r->dev[i]);
    r->nhost = r->ndev = 0;
}

/* A seeded input tensor of n elements: uniform in [-1, 1), scaled so that
 * max|x| = 1, rounded to dtype t.  Stream `id` of the run's key. */
static float *make_input(struct run *r, int id, size_t n, enum dtype t)
{
    float *v = run_host(r, n);
    uint64_t key = mix64(r->key ^ (uint64_t)id);
    float mx = 0;
    for (size_t i = 0; i < n; i++) {
        v[i] = rng_sym(key, i);
        mx = fabsf(v[i]) > mx ? fabsf(v[i]) : mx;
    }
    if (mx > 0)
        for (size_t i = 0; i < n; i++) v[i] = dt_round(t, v[i] / mx);
    else if (n > 0)
        r->inputs_nonzero = 0;
    return v;
}

/* Upload float values (exactly representable in t) as dtype t; returns the
 * device buffer. */
static uint64_t upload_as(struct run *r, const float *v, size_t n, enum dtype t)
{
    size_t bytes = n * DTYPES[t].bytes;
    void *raw = xmalloc(bytes);
    for (size_t i = 0; i < n; i++) dt_store(t, raw, i, v[i]);
    uint64_t p = run_dev(r, bytes);
    dev_upload(r->d, p, raw, bytes);
    free(raw);
    return p;
}

/* Upload n whole numbers as a device int array. */
static uint64_t upload_ints(struct run *r, const uint32_t *v, size_t n)
{
    int32_t *tmp = xmalloc(n * sizeof *tmp);
    for (size_t i = 0; i < n; i++) tmp[i] = (int32_t)v[i];
    uint64_t p = run_dev(r, n * sizeof *tmp);
    dev_upload(r->d, p, tmp, n * sizeof *tmp);
    free(tmp);
    return p;
}

/* Each of n consecutive rows x cols matrices transposed in place of its
 * block: out[b][c][r] = in[b][r][c]. */
static float *transpose_blocks(struct run *r, const float *in, size_t n, size_t rows, size_t cols)
{
    float *t = run_host(r, n * rows * cols);
    for (size_t b = 0, off = 0; b < n; b++, off += rows * cols)
        for (size_t i = 0; i < rows; i++)
            for (size_t j = 0; j < cols; j++) t[off + j * rows + i] = in[off + i * cols + j];
    return t;
}

/* out[c][r] = in[r][c] for an rows x cols matrix. */
static float *transpose(struct run *r, const float *in, size_t rows, size_t cols)
{
    return transpose_blocks(r, in, 1, rows, cols);
}

/* Per group g, the rows [offs[g], offs[g+1]) of in (width columns)
 * transposed, stored as a width x M_g block at offs[g] * width. */
static float *transpose_groups(struct run *r, const float *in, const uint32_t *offs, size_t g, size_t width)
{
    float *t = run_host(r, offs[g] * width);
    for (size_t i = 0; i < g; i++) {
        size_t m0 = offs[i], rows = offs[i + 1] - m0;
        for (size_t a = 0; a < rows; a++)
            for (size_t j = 0; j < width; j++) t[m0 * width + j * rows + a] = in[(m0 + a) * width + j];
    }
    return t;
}

/* A rows x cols matrix read through strides from raw storage of dtype t, as
 * row-major floats (caller frees). */
static float *decode_strided(enum dtype t, const void *raw, size_t rows, size_t cols, int64_t rs,
                             int64_t cs)
{
    float *v = xmalloc(rows * cols * sizeof(float));
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < cols; j++)
            v[i * cols + j] = dt_load(t, raw, (size_t)((int64_t)i * rs + (int64_t)j * cs));
    return v;
}

/* A new output of the run: rows x cols of dtype t with strides (srow,
 * scol), its device storage between two guard bands; it owns its launch. */
static struct output *add_output(struct run *r, const char *name, enum dtype t, size_t rows, size_t cols,
                                 int64_t srow, int64_t scol)
{
    if (r->nout == MAX_OUT) die(EXIT_DEVICE, "internal: too many outputs");
    struct output *o = &r->out[r->nout];
    memset(o, 0, sizeof *o);
    o->name = name, o->dt = t, o->rows = rows, o->cols = cols, o->srow = srow, o->scol = scol;
    o->elems = rows * cols, o->guard = GUARD_BYTES, o->launch = r->nout++;
    o->buf = run_dev(r, o->elems * DTYPES[t].bytes + 2 * o->guard) + o->guard;
    return o;
}

/* --- gemm and grouped gemm: products --- */

/* A product output of nparts blocks, launched as `pl` says. */
static struct output *product_output(struct run *r, const char *name, size_t rows, size_t cols,
                                     int64_t srow, int64_t scol, size_t nparts, struct prod_launch pl)
{
    struct output *o = add_output(r, name, r->c->dt, rows, cols, srow, scol);
    o->parts = run_owned(r, (nparts ? nparts : 1) * sizeof *o->parts);
    o->nparts = nparts, o->pl = pl;
    return o;
}

/* Add block (row0, rows, inner, x, y) to output o; its work to the totals. */
static void add_part(struct output *o, size_t i, size_t row0, size_t rows, size_t inner, const float *x,
                     const float *y)
{
    o->parts[i] = (struct part){ row0, rows, inner, x, y, NULL };
    o->flops += 2.0 * rows * o->cols * inner;
    o->check_macs += (double)rows * o->cols * inner;
}

static void qgemm_prepare(struct run *r);
static void qgrouped_prepare(struct run *r);

/* A is M x K ('N': stored [M][K]; 'T': stored [K][M]); B is K x N ('N':
 * [K][N]; 'T': [N][K]); C is [M][N].  With --bwd, dC is [M][N] and
 * dA = dC·Bᵀ, dB = Aᵀ·dC are stored in A's and B's layouts. */
static void gemm_prepare(struct run *r)
{
    const struct kcase *c = r->c;
    if (c->qfmt != Q_NONE) { qgemm_prepare(r); return; }
    enum dtype t = c->dt;
    size_t M = c->m, N = c->n, K = c->k;
    int at = c->layout[0] == 'T', bt = c->layout[1] == 'T';
    float *a_st = make_input(r, 1, M * K, t), *b_st = make_input(r, 2, K * N, t);
    uint64_t da = upload_as(r, a_st, M * K, t), db = upload_as(r, b_st, K * N, t);
    int64_t a_sm = at ? 1 : (int64_t)K, a_sk = at ? (int64_t)M : 1;   /* A[m][k] strides */
    int64_t b_sk = bt ? 1 : (int64_t)N, b_sn = bt ? (int64_t)K : 1;   /* B[k][n] strides */
    const float *a = at ? transpose(r, a_st, K, M) : a_st;            /* M x K */
    const float *b = bt ? transpose(r, b_st, N, K) : b_st;            /* K x N */
    struct output *o = product_output(r, "C", M, N, (int64_t)N, 1, 1,
        (struct prod_launch){ .dx = da, .dy = db, .sxm = a_sm, .sxk = a_sk, .syk = b_sk, .syn = b_sn,
                              .m = M, .n = N, .k = K });
    add_part(o, 0, 0, M, K, a, b);
    if (!c->bwd) return;
    float *dc = make_input(r, 3, M * N, t);
    uint64_t ddc = upload_as(r, dc, M * N, t);
    const float *a_t = at ? a_st : transpose(r, a_st, M, K);          /* K x M */
    const float *b_t = bt ? b_st : transpose(r, b_st, K, N);          /* N x K */
    o = product_output(r, "dA", M, K, a_sm, a_sk, 1,
        (struct prod_launch){ .dx = ddc, .dy = db, .sxm = (int64_t)N, .sxk = 1, .syk = b_sn, .syn = b_sk,
                              .m = M, .n = K, .k = N });
    add_part(o, 0, 0, M, N, dc, b_t);
    o = product_output(r, "dB", K, N, b_sk, b_sn, 1,
        (struct prod_launch){ .dx = da, .dy = ddc, .sxm = a_sk, .sxk = a_sm, .syk = (int64_t)N, .syn = 1,
                              .m = K, .n = N, .k = M });
    add_part(o, 0, 0, K, M, a_t, dc);
}

/* A grouped case's G+1 group offsets: offs[g] rows, and tile_offs[g] row
 * tiles of 64, before group g; on the host and uploaded. */
struct groups { const uint32_t *offs, *tile_offs; uint64_t doffs, dtiles; };

static struct groups group_offsets(struct run *r)
{
    const struct kcase *c = r->c;
    size_t G = c->nlens;
    uint32_t *offs = run_owned(r, (G + 1) * sizeof *offs), *tile_offs = run_owned(r, (G + 1) * sizeof *offs);
    for (size_t g = 0; g < G; g++) {
        offs[g + 1] = offs[g] + c->lens[g];
        tile_offs[g + 1] = tile_offs[g] + (c->lens[g] + 63) / 64;
    }
    return (struct groups){ offs, tile_offs, upload_ints(r, offs, G + 1), upload_ints(r, tile_offs, G + 1) };
}

/* Segments, launch arrays and launch fields shared by a grouped case's
 * ragged-rows outputs (C and dA). */
static void grouped_ragged_rows(struct run *r, struct output *o, const struct groups *gs)
{
    size_t G = r->c->nlens;
    o->seg = gs->offs, o->nseg = G, o->seg_name = "group";
    o->pl.ragged = RAG_ROWS, o->pl.doffs = gs->doffs, o->pl.dtiles = gs->dtiles, o->pl.tiles = gs->tile_offs[G];
    o->pl.groups = G, o->pl.offs = gs->offs;
}

/* A is [ΣM][K] (the groups' rows one after another), B is [G][K][N] (NN) or
 * [G][N][K] (NT), C = A_g·B_g per group is [ΣM][N].  With --bwd, dC is
 * [ΣM][N], dA = dC_g·B_gᵀ is [ΣM][K] and dB_g = A_gᵀ·dC_g is stored in B's
 * layout (viewed as [G·K][N] for NN, [G·N][K] for NT); an empty group's dB_g
 * is exactly zero. */
static void grouped_prepare(struct run *r)
{
    const struct kcase *c = r->c;
    if (c->qfmt != Q_NONE) { qgrouped_prepare(r); return; }
    enum dtype t = c->dt;
    size_t G = c->nlens, N = c->n, K = c->k;
    int bt = c->layout[1] == 'T';
    struct groups gs = group_offsets(r);
    const uint32_t *offs = gs.offs;
    size_t M = offs[G];
    float *a = make_input(r, 1, M * K, t), *b_st = make_input(r, 2, G * K * N, t);
    uint64_t da = upload_as(r, a, M * K, t), db = upload_as(r, b_st, G * K * N, t);
    int64_t b_sk = bt ? 1 : (int64_t)N, b_sn = bt ? (int64_t)K : 1, b_sg = (int64_t)(K * N);
    const float *b = bt ? transpose_blocks(r, b_st, G, N, K) : b_st;      /* canonical [G][K][N] */
    struct output *o = product_output(r, "C", M, N, (int64_t)N, 1, G,
        (struct prod_launch){ .dx = da, .dy = db, .sxm = (int64_t)K, .sxk = 1, .syk = b_sk, .syn = b_sn,
                              .syg = b_sg, .m = M, .n = N, .k = K });
    grouped_ragged_rows(r, o, &gs);
    for (size_t g = 0; g < G; g++) add_part(o, g, offs[g], c->lens[g], K, a + offs[g] * K, b + g * K * N);
    if (!c->bwd) return;
    float *dc = make_input(r, 3, M * N, t);
    uint64_t ddc = upload_as(r, dc, M * N, t);
    const float *b_t = bt ? b_st : transpose_blocks(r, b_st, G, K, N);   /* canonical [G][N][K] */
    o = product_output(r, "dA", M, K, (int64_t)K, 1, G,
        (struct prod_launch){ .dx = ddc, .dy = db, .sxm = (int64_t)N, .sxk = 1, .syk = b_sn, .syn = b_sk,
                              .syg = b_sg, .m = M, .n = K, .k = N });
    grouped_ragged_rows(r, o, &gs);
    for (size_t g = 0; g < G; g++) add_part(o, g, offs[g], c->lens[g], N, dc + offs[g] * N, b_t + g * K * N);
    /* dB: group g's rows of the [G·R][W] view are dB_g (NN: R = K, W = N) or dB_gᵀ (NT: R = N, W = K) */
    size_t R = bt ? N : K, W = bt ? K : N;
    uint32_t *rows = run_owned(r, (G + 1) * sizeof *rows);
    for (size_t g = 0; g <= G; g++) rows[g] = (uint32_t)(g * R);
    float *xt = transpose_groups(r, bt ? dc : a, offs, G, R);        /* per group R x M_g */
    const float *y = bt ? a : dc;                                    /* rows offs[g].. of [ΣM][W] */
    o = product_output(r, "dB", G * R, W, (int64_t)W, 1, G,
        (struct prod_launch){ .ragged = RAG_INNER, .dx = bt ? ddc : da, .dy = bt ? da : ddc, .sxm = 1,
                              .sxk = (int64_t)R, .syk = (int64_t)W, .syn = 1, .scg = (int64_t)(R * W),
                              .m = R, .n = W, .doffs = gs.doffs, .groups = G, .offs = offs });
    o->seg = rows, o->nseg = G, o->seg_name = "group";
    for (size_t g = 0; g < G; g++) add_part(o, g, g * R, R, c->lens[g], xt + offs[g] * R, y + offs[g] * W);
}

/* --- low precision: quantized operands --- */

/* One quantized operand: its unquantised values, ref.c's codes and scales
 * (what the GEMM reads, uploaded), their decoded floats (what the
 * reference multiplies), and the buffers of the quantize-only kernel, whose
 * codes and scales must equal ref.c's byte for byte. */
struct qoperand {
    const char *name;             /* "A", "B" */
    struct qgrid g;
    float *master;                /* batch*rows x cols, bf16 values: the unquantised inputs */
    uint8_t *codes, *e8;          /* ref.c's codes; MX: E8M0 scale bytes */
    float *s;                     /* not MX: fp32 dequantisation scales (1/scale) */
    float *xq, *sf;               /* decoded codes; scales as floats (MX: 2^e) */
    size_t code_bytes, nblocks;
    uint64_t d_codes, d_scales;   /* ref.c's, as the GEMM reads them */
    uint64_t d_master, d_qcodes, d_qscales;   /* the quantize-only kernel's input and outputs */
};

/* What the quantize-only stage found for one operand: mismatches against
 * ref.c and the first of each kind, as a line. */
struct qstage { size_t scale_bad, code_bad; char scale_at[240], code_at[240]; };

/* A low-precision case while it runs. */
struct qrun {
    enum qfmt f;
    enum qrule rule;              /* QR_AMAX, or the MX rule */
    size_t gk;                    /* the K-block of a scale: K, 128 or 32 */
    struct qoperand op[2];        /* A, B */
    struct qprod *prods;          /* one per group (gemm: one) */
    struct qstage st[2];
    int stage_done;
};

/* The scale block of an operand (rows of `rows`, K columns) under the
 * case's scaling: per tensor, per row, 1 x 128 (A) or 128 x 128 (B), MX 1 x 32. */
static void q_block_shape(const struct kcase *c, int is_b, size_t rows, size_t *gr, size_t *gc)
{
    size_t K = c->k;
    switch (c->scaling) {
    case QS_TENSOR: *gr = rows, *gc = K; break;
    case QS_ROW:    *gr = 1, *gc = K; break;
    case QS_BLOCK:  *gr = is_b ? 128 : 1, *gc = 128; break;
    case QS_MX:     *gr = 1, *gc = 32; break;
    }
    if (*gr == 0) *gr = 1;
    if (*gc == 0) *gc = 1;
}

/* Upload n raw bytes; returns the device buffer. */
static uint64_t upload_bytes(struct run *r, const void *v, size_t n)
{
    uint64_t p = run_dev(r, n);
    dev_upload(r->d, p, v, n);
    return p;
}

/* Decode n rows of K codes of format f (q_row_bytes each) into v (n x K). */
static void q_decode_rows(enum qfmt f, const uint8_t *codes, size_t n, size_t K, float *v)
{
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < K; k++) v[i * K + k] = q_decode(f, q_get(f, codes, q_row_bytes(f, K), i, k));
}

/* Decode n scales as the rule stores them (fp32, or E8M0 bytes) into v. */
static void q_decode_scales(enum qrule rule, const void *raw, size_t n, float *v)
{
    for (size_t b = 0; b < n; b++)
        v[b] = rule == QR_AMAX ? ((const float *)raw)[b] : e8m0_decode(((const uint8_t *)raw)[b]);
}

/* Make operand `op` (input stream id): batch x rows x K seeded bf16 values,
 * quantized by ref.c, decoded, uploaded; and the quantize-only kernel's
 * buffers allocated. */
static void q_operand(struct run *r, struct qoperand *op, const char *name, int id, size_t batch, size_t rows)
{
    struct qrun *q = r->q;
    size_t K = r->c->k, gr = 1, gc = 1;
    q_block_shape(r->c, id == 2, rows, &gr, &gc);
    op->name = name;
    op->g = (struct qgrid){ batch, rows, K, gr, gc };
    op->nblocks = qgrid_blocks(&op->g);
    op->code_bytes = batch * rows * q_row_bytes(q->f, K);
    op->master = make_input(r, id, batch * rows * K, DT_BF16);
    op->codes = run_owned(r, op->code_bytes + 1);
    op->s = run_host(r, op->nblocks + 1);
    op->e8 = run_owned(r, op->nblocks + 1);
    q_quantize(op->master, &op->g, q->f, q->rule, op->codes, op->s, op->e8);
    op->xq = run_host(r, batch * rows * K + 1);
    q_decode_rows(q->f, op->codes, batch * rows, K, op->xq);
    op->sf = run_host(r, op->nblocks + 1);
    q_decode_scales(q->rule, q->rule == QR_AMAX ? (void *)op->s : (void *)op->e8, op->nblocks, op->sf);
    size_t sbytes = op->nblocks * (q->rule == QR_AMAX ? sizeof(float) : 1);
    op->d_codes = upload_bytes(r, op->codes, op->code_bytes);
    op->d_scales = upload_bytes(r, q->rule == QR_AMAX ? (void *)op->s : (void *)op->e8, sbytes);
    op->d_master = upload_as(r, op->master, batch * rows * K, DT_F32);
    op->d_qcodes = run_dev(r, op->code_bytes);
    op->d_qscales = run_dev(r, sbytes);
}

/* The low-precision part of a gemm or grouped case: format, rule, K-block. */
static struct qrun *q_begin(struct run *r)
{
    const struct kcase *c = r->c;
    struct qrun *q = r->q = run_owned(r, sizeof *q);
    q->f = q_format(c);
    q->rule = c->mx ? c->qrule : QR_AMAX;
    q_block_shape(c, 0, 1, &(size_t){ 0 }, &q->gk);
    return q;
}

/* Low-precision gemm: A [M][K] and B [N][K] quantized (ref.c), C = A·Bᵀ
 * [M][N] in bf16 or f32.  The product's reference multiplies the decoded
 * codes and scales; its parts keep the unquantised values for the SNR
 * against the unquantised (bf16) product. */
static void qgemm_prepare(struct run *r)
{
    const struct kcase *c = r->c;
    struct qrun *q = q_begin(r);
    size_t M = c->m, N = c->n, K = c->k;
    q_operand(r, &q->op[0], "A", 1, 1, M);
    q_operand(r, &q->op[1], "B", 2, 1, N);
    q->prods = run_owned(r, sizeof *q->prods);
    q->prods[0] = (struct qprod){ q->op[0].xq, q->op[1].xq, q->op[0].sf, q->op[1].sf, M, N, K, 0,
                                  q->op[0].g.gr, q->op[1].g.gr, q->gk };
    /* the strides are those of one-byte codes (the sm_90a fp8 path reads them; FP4 never takes it) */
    struct output *o = product_output(r, "C", M, N, (int64_t)N, 1, 1,
        (struct prod_launch){ .dx = q->op[0].d_codes, .dy = q->op[1].d_codes, .sxm = (int64_t)K, .sxk = 1,
                              .syk = 1, .syn = (int64_t)K, .m = M, .n = N, .k = K });
    add_part(o, 0, 0, M, K, q->op[0].master, transpose(r, q->op[1].master, N, K));
    o->parts[0].q = &q->prods[0];
}

/* Low-precision grouped: A [ΣM][K], B [G][N][K] quantized (B's scale blocks
 * per group), C_g = A_g·B_gᵀ [ΣM][N]. */
static void qgrouped_prepare(struct run *r)
{
    const struct kcase *c = r->c;
    struct qrun *q = q_begin(r);
    size_t G = c->nlens, N = c->n, K = c->k;
    struct groups gs = group_offsets(r);
    const uint32_t *offs = gs.offs;
    size_t M = offs[G];
    q_operand(r, &q->op[0], "A", 1, 1, M);
    q_operand(r, &q->op[1], "B", 2, G, N);
    const float *bt = transpose_blocks(r, q->op[1].master, G, N, K);   /* canonical [G][K][N] */
    size_t nkb = (K + q->gk - 1) / q->gk, b_blocks = qgrid_nbr(&q->op[1].g) * nkb;
    q->prods = run_owned(r, G * sizeof *q->prods);
    struct output *o = product_output(r, "C", M, N, (int64_t)N, 1, G,                 /* strides as qgemm's */
        (struct prod_launch){ .dx = q->op[0].d_codes, .dy = q->op[1].d_codes, .sxm = (int64_t)K, .sxk = 1,
                              .syk = 1, .syn = (int64_t)K, .syg = (int64_t)(N * K), .m = M, .n = N, .k = K });
    grouped_ragged_rows(r, o, &gs);
    for (size_t g = 0; g < G; g++) {
        q->prods[g] = (struct qprod){ q->op[0].xq + offs[g] * K, q->op[1].xq + g * N * K, q->op[0].sf,
                                      q->op[1].sf + g * b_blocks, c->lens[g], N, K, offs[g],
                                      q->op[0].g.gr, q->op[1].g.gr, q->gk };
        add_part(o, g, offs[g], c->lens[g], K, q->op[0].master + offs[g] * K, bt + g * K * N);
        o->parts[g].q = &q->prods[g];
    }
}

/* --- attention --- */

/* An attention case while it runs: geometry, canonical inputs, device
 * buffers, which output is which, and the reference's statistics (made on
 * first use by a backward output). */
struct attn_case {
    struct attn_geom g;
    struct attn_in in;
    size_t tq, tk, max_sq, max_sk;
    uint64_t d_q, d_k, d_v, d_do, dcu_q, dcu_k, dsum;  /* device buffers */
    int o, lse, dq_out, dk_out, dv_out;       /* output indices; -1: none */
    int stats_ready;
};

#define ATTN_Q_GAIN 8.0f   /* Q's scale: scores with a spread of ~2.7, a peaked softmax */
#define ATTN_DO_GAIN 16.0f  /* dO's scale: gradients well above the bf16/f16 atol */

/* The pairs (query, key) a case's mask lets through, over all sequences. */
static double attn_pairs(const struct attn_geom *g)
{
    double n = 0;
    for (size_t b = 0; b < g->b; b++)
        for (size_t i = 0; i < g->cu_q[b + 1] - g->cu_q[b]; i++) n += (double)attn_visible(g, b, i);
    return n;
}

/* Q is [Tq][Hq][D] with values in [-8, 8] (ATTN_Q_GAIN), K and V are
 * [Tk][Hkv][D] in [-1, 1]; outputs O [Tq][Hq][D] and LSE [Tq][Hq] (fp32);
 * with --bwd, dO like O in [-16, 16] (ATTN_DO_GAIN) and outputs dQ, dK, dV in Q's and K's
 * layouts.  Rows are tokens, columns heads x dims; segments are sequences. */
static void attn_prepare(struct run *r)
{
    const struct kcase *c = r->c;
    enum dtype t = c->dt;
    struct attn_case *a = r->attn = run_owned(r, sizeof *a);
    size_t B = c->nlens, hq = c->hq, hkv = c->hkv, d = c->dim;
    uint32_t *cu_q = run_owned(r, (B + 1) * sizeof *cu_q), *cu_k = run_owned(r, (B + 1) * sizeof *cu_k);
    for (size_t b = 0; b < B; b++) {
        cu_q[b + 1] = cu_q[b] + c->lens[b], cu_k[b + 1] = cu_k[b] + c->lens[B + b];
        a->max_sq = c->lens[b] > a->max_sq ? c->lens[b] : a->max_sq;
        a->max_sk = c->lens[B + b] > a->max_sk ? c->lens[B + b] : a->max_sk;
    }
    a->tq = cu_q[B], a->tk = cu_k[B];
    a->g = (struct attn_geom){ B, hq, hkv, d, cu_q, cu_k, c->causal, 0,
                               c->scale > 0 ? c->scale : 1.0 / sqrt((double)d) };
    float *q = make_input(r, 1, a->tq * hq * d, t);
    for (size_t i = 0; i < a->tq * hq * d; i++) q[i] *= ATTN_Q_GAIN;
    a->in.q = q;
    a->in.k = make_input(r, 2, a->tk * hkv * d, t);
    a->in.v = make_input(r, 3, a->tk * hkv * d, t);
    a->d_q = upload_as(r, a->in.q, a->tq * hq * d, t);
    a->d_k = upload_as(r, a->in.k, a->tk * hkv * d, t);
    a->d_v = upload_as(r, a->in.v, a->tk * hkv * d, t);
    a->dcu_q = upload_ints(r, cu_q, B + 1), a->dcu_k = upload_ints(r, cu_k, B + 1);
    double pairs = attn_pairs(&a->g) * (double)hq * (double)d;
    struct output *o = add_output(r, "O", t, a->tq, hq * d, (int64_t)(hq * d), 1);
    o->flops = 4 * pairs, o->check_macs = 2 * pairs, o->head_dim = (unsigned)d;
    o->seg = cu_q, o->nseg = B, o->seg_name = "sequence";
    a->o = r->nout - 1;
    o = add_output(r, "LSE", DT_F32, a->tq, hq, (int64_t)hq, 1);
    o->launch = a->o, o->check_macs = 2 * pairs, o->head_dim = 1;
    o->seg = cu_q, o->nseg = B, o->seg_name = "sequence";
    a->lse = r->nout - 1;
    a->dq_out = a->dk_out = a->dv_out = -1;
    if (!c->bwd) return;
    float *dout = make_input(r, 4, a->tq * hq * d, t);
    for (size_t i = 0; i < a->tq * hq * d; i++) dout[i] *= ATTN_DO_GAIN;
    a->in.dout = dout;
    a->d_do = upload_as(r, a->in.dout, a->tq * hq * d, t);
    a->dsum = run_dev(r, a->tq * hq * sizeof(float) + 4);
    o = add_output(r, "dQ", t, a->tq, hq * d, (int64_t)(hq * d), 1);
    o->flops = 10 * pairs, o->check_macs = 3 * pairs, o->head_dim = (unsigned)d, o->grad = 1;
    o->seg = cu_q, o->nseg = B, o->seg_name = "sequence";
    a->dq_out = r->nout - 1;
    const char *names[2] = { "dK", "dV" };
    for (int i = 0; i < 2; i++) {
        o = add_output(r, names[i], t, a->tk, hkv * d, (int64_t)(hkv * d), 1);
        o->launch = a->dq_out, o->check_macs = 4 * pairs, o->head_dim = (unsigned)d, o->grad = 1;
        o->seg = cu_k, o->nseg = B, o->seg_name = "sequence";
    }
    a->dk_out = r->nout - 2, a->dv_out = r->nout - 1;
}

/* ===== Launch ===== */

/* Output o of a product on the CPU: per group, read the operands through the
 * launch's strides from the same buffers and run ref.c's candidate. */
static void cpu_product(const struct output *p)
{
    const struct prod_launch *L = &p->pl;
    enum dtype t = p->dt;
    size_t es = DTYPES[t].bytes, groups = L->ragged == RAG_NONE ? 1 : L->groups;
    for (size_t g = 0; g < groups; g++) {
        size_t m = L->m, k = L->k;
        int64_t xo = 0, yo = 0, co = 0;
        if (L->ragged == RAG_ROWS) {
            m = L->offs[g + 1] - L->offs[g];
            xo = (int64_t)L->offs[g] * L->sxm, yo = (int64_t)g * L->syg, co = (int64_t)L->offs[g] * p->srow;
        } else if (L->ragged == RAG_INNER) {
            k = L->offs[g + 1] - L->offs[g];
            xo = (int64_t)L->offs[g] * L->sxk, yo = (int64_t)L->offs[g] * L->syk, co = (int64_t)g * L->scg;
        }
        float *x = decode_strided(t, (char *)(uintptr_t)L->dx + xo * (int64_t)es, m, k, L->sxm, L->sxk);
        float *y = decode_strided(t, (char *)(uintptr_t)L->dy + yo * (int64_t)es, k, L->n, L->syk, L->syn);
        cpu_candidate_gemm(t, x, y, m, k, L->n, (char *)(uintptr_t)p->buf + co * (int64_t)es, p->srow, p->scol);
        free(x);
        free(y);
    }
}

/* A low-precision product on the CPU: the codes and scales read back from
 * the buffers the GPU kernel would read, decoded, multiplied by ref.c's
 * candidate (qprod_elem, ACC_F32_TILED) per group. */
static void cpu_qproduct(struct run *r, const struct output *p)
{
    const struct qrun *q = r->q;
    const struct qoperand *A = &q->op[0], *B = &q->op[1];
    size_t K = r->c->k, groups = p->pl.ragged == RAG_ROWS ? p->pl.groups : 1;
    size_t na = A->g.batch * A->g.rows, nb = B->g.batch * B->g.rows;
    float *a = xmalloc(na * K * sizeof(float) + 1), *b = xmalloc(nb * K * sizeof(float) + 1);
    float *sa = xmalloc(A->nblocks * sizeof(float) + 1), *sb = xmalloc(B->nblocks * sizeof(float) + 1);
    q_decode_rows(q->f, (const uint8_t *)(uintptr_t)A->d_codes, na, K, a);
    q_decode_rows(q->f, (const uint8_t *)(uintptr_t)B->d_codes, nb, K, b);
    q_decode_scales(q->rule, (const void *)(uintptr_t)A->d_scales, A->nblocks, sa);
    q_decode_scales(q->rule, (const void *)(uintptr_t)B->d_scales, B->nblocks, sb);
    for (size_t g = 0; g < groups; g++) {
        struct qprod pr = q->prods[g];   /* the reference's geometry, the buffers' values */
        pr.x = a + (pr.x - A->xq), pr.y = b + (pr.y - B->xq), pr.sx = sa, pr.sy = sb + (pr.sy - B->sf);
        size_t row0 = p->pl.ragged == RAG_ROWS ? p->pl.offs[g] : 0;
        cpu_candidate_qgemm(p->dt, &pr, (char *)(uintptr_t)p->buf + row0 * p->srow * DTYPES[p->dt].bytes,
                            p->srow, p->scol);
    }
    free(a), free(b), free(sa), free(sb);
}

/* The device's SM (CU) count, at least 1. */
static unsigned device_sms(const struct device *d) { return d->attr[AT_SMS] > 0 ? (unsigned)d->attr[AT_SMS] : 1; }

/* Blocks along a dimension of n elements in tiles of `tile`. */
static unsigned tile_count(int n, int tile) { return (unsigned)((n + tile - 1) / tile); }

/* The row tiles of a grouped launch are counted on the host in tiles of 64
 * (group_offsets); exit 2 if the current arm's kernels use another tile. */
static void grouped_tile_check(const struct device *d)
{
    if (d->arm->tile_m != 64)
        die(EXIT_USAGE, "%s (%s): grouped launches count row tiles of 64 on the host, but this build "
            "has GEMM_BM = %d", d->arm->name, d->arm->src_name, d->arm->tile_m);
}

/* Whether TMA can read rows at base with a row stride of ld es-byte
 * elements: both aligned to 16 bytes. */
static int tma_aligned(uint64_t base, int64_t ld, size_t es) { return base % 16 == 0 && ld * (int64_t)es % 16 == 0; }

/* A TMA descriptor (CUtensorMap): 128 opaque bytes, 64-byte aligned. */
struct tmap { _Alignas(64) unsigned char b[128]; };

/* Encode into m the tensor map of a K-major operand of `es`-byte elements
 * (2: fp16 or bf16 as dt; 1: fp8 codes): `rows` rows of K elements at device
 * address base, row stride ld elements, read in boxes of 128 bytes x
 * box_rows with the 128-byte swizzle and zeros out of range.  Returns 0,
 * encoding nothing, when TMA cannot take the operand (base or row stride not
 * a multiple of 16 bytes, K = 0); exits 5 when the driver refuses a map it
 * should take. */
static int tmap_encode(const struct device *d, struct tmap *m, size_t es, enum dtype dt, uint64_t base,
                       size_t rows, size_t K, int64_t ld, unsigned box_rows)
{
    uint64_t stride = (uint64_t)ld * es;
    if (!K || !rows || !tma_aligned(base, ld, es) || stride >= (1ull << 40)) return 0;
    if (!d->rt.tmap_encode) die(EXIT_DEVICE, "the driver lacks cuTensorMapEncodeTiled (sm_90a GEMM)");
    const uint64_t dims[2] = { K, rows }, strides[1] = { stride };
    const unsigned box[2] = { (unsigned)(128 / es), box_rows }, step[2] = { 1, 1 };
    int type = es == 1 ? 0 : dt == DT_BF16 ? 9 : 6;   /* CU_TENSOR_MAP_DATA_TYPE_UINT8 / _BFLOAT16 / _FLOAT16 */
    kg_res r = d->rt.tmap_encode(m->b, type, 2, (void *)(uintptr_t)base, dims, strides, box, step,
                                 0 /* no interleave */, 3 /* 128-byte swizzle */, 2 /* L2 promotion 128 B */,
                                 0 /* zero fill */);
    if (r != 0) die(EXIT_DEVICE, "cuTensorMapEncodeTiled failed: %s (%d)", gpu_err_name(d, r), r);
    return 1;
}

/* The operands, units and tensor maps of one sm_90a launch (kernels.hip,
 * "GEMM, Hopper path"): X rows [0, m) (all groups' rows) at x, row stride
 * ldx; Y^T rows [0, G x n) at y, row stride ldy, group g's at + g x syg;
 * K-major, es-byte elements. */
struct sm90_args {
    struct tmap ta, tb;
    uint64_t x, y;
    int64_t ldx, ldy, syg;
    int use_tma, G, units, M, N, K;
    struct launch_dims l;
};

/* Row stride in bytes of a packed operand: K elements rounded up to 16 bytes. */
static size_t pack_ld_bytes(size_t K, size_t es) { return (K * es + 15) / 16 * 16; }

/* Queue kg_pack_rows: `rows` rows of K es-byte elements from src (row r is
 * row r % per of group r / per: at src + (r / per x sg + r % per x ld)
 * elements) into dst, pack_ld_bytes apart. */
static void pack_launch(struct device *d, uint64_t src, uint64_t dst, size_t rows, size_t per, size_t K,
                        int64_t ld, int64_t sg, size_t es)
{
    long long R = (long long)rows, P = (long long)per;
    int cols = (int)K, dld = (int)pack_ld_bytes(K, es), eb = (int)es;
    uint64_t chunks = (uint64_t)rows * (uint64_t)dld / 16, most = 16ull * device_sms(d);
    unsigned blocks = (unsigned)((chunks + 255) / 256 < most ? (chunks + 255) / 256 : most);
    void *params[] = { &src, &dst, &R, &P, &cols, &ld, &sg, &dld, &eb };
    gpu_launch(d, "kg_pack_rows", blocks, 1, 1, 256, params);
}

/* When the arm packs (sm90_pack): replace in s each operand of L (G groups,
 * 0 when plain; Y^T's ny rows) that TMA cannot read (a row stride or base
 * not aligned to 16 bytes, or Y's groups not n rows apart) by a packed copy
 * in L's scratch (allocated on the first launch, which is never a timed
 * one), queued before the GEMM so that its time counts in the launch's. */
static void sm90_pack(struct run *r, struct prod_launch *L, size_t es, size_t G, size_t ny, struct sm90_args *s)
{
    size_t ld = pack_ld_bytes(L->k, es);
    int px = !tma_aligned(s->x, s->ldx, es);
    int py = !tma_aligned(s->y, s->ldy, es) || (G && s->syg != (int64_t)L->n * s->ldy);
    if (!r->d->arm->sm90_pack || !L->k || !L->m || !ny || !(px || py)) return;
    if (!L->dpack) L->dpack = run_dev(r, ld * (L->m + ny));
    if (px) {
        pack_launch(r->d, s->x, L->dpack, L->m, L->m, L->k, s->ldx, 0, es);
        s->x = L->dpack, s->ldx = (int64_t)(ld / es);
    }
    if (py) {
        pack_launch(r->d, s->y, L->dpack + ld * L->m, ny, L->n, L->k, s->ldy, s->syg, es);
        s->y = L->dpack + ld * L->m, s->ldy = (int64_t)(ld / es), s->syg = (int64_t)(L->n * ld / es);
    }
}

/* Units, grid and tensor maps of an sm_90a launch over the product L of
 * es-byte elements (dt for the tensor map; groups when L is ragged rows):
 * a persistent grid of one 384-thread block per SM in clusters of the
 * arm's size, at most one cluster per unit (a unit: that many tiles stacked
 * in M); packed operands where sm90_pack makes them; TMA when tmap_encode
 * takes both operands (and Y's groups are N rows apart), the loads
 * producer otherwise. */
static void sm90_args(struct run *r, struct prod_launch *L, size_t es, enum dtype dt, struct sm90_args *s)
{
    const struct arm *a = r->d->arm;
    size_t G = L->ragged == RAG_ROWS ? L->groups : 0, tn = tile_count((int)L->n, a->sm90_tile_n);
    size_t cl = (size_t)a->sm90_cluster, tiles = 0, units = 0;
    for (size_t g = 0; g < (G ? G : 1); g++) {
        size_t tm = tile_count((int)(G ? L->offs[g + 1] - L->offs[g] : L->m), a->sm90_tile_m);
        tiles += tm * tn, units += (tm + cl - 1) / cl * tn;
    }
    if (units > INT32_MAX) die(EXIT_USAGE, "%s: %zu tiles: too many for one launch", r->c->label, tiles);
    memset(s, 0, sizeof *s);
    size_t ny_rows = G ? G * L->n : L->n;
    s->x = L->dx, s->y = L->dy, s->ldx = L->sxm, s->ldy = L->syn, s->syg = L->syg;
    sm90_pack(r, L, es, G, ny_rows, s);
    s->use_tma = (!G || s->syg == (int64_t)L->n * s->ldy) &&
                 tmap_encode(r->d, &s->ta, es, dt, s->x, L->m, L->k, s->ldx, (unsigned)a->sm90_tile_m) &&
                 tmap_encode(r->d, &s->tb, es, dt, s->y, ny_rows, L->k, s->ldy, (unsigned)(a->sm90_tile_n / cl));
    s->G = (int)G, s->units = (int)units, s->M = (int)L->m, s->N = (int)L->n, s->K = (int)L->k;
    size_t clusters = device_sms(r->d) / cl;
    unsigned blocks = (unsigned)((units < clusters ? units : clusters ? clusters : 1) * cl);
    s->l = (struct launch_dims){ { blocks, 1, 1 }, 384, (unsigned)a->sm90_smem, tiles };
}

/* Output o through the sm_90a GEMM (kg_gemm_sm90_<dt>) when the current arm
 * has it and o qualifies: an fp16 or bf16 product, plain or grouped by
 * ragged rows, whose operands both have K contiguous (sxk = syk = 1).
 * Returns 0, launching nothing, when o does not qualify. */
static int sm90_launch(struct run *r, struct output *p)
{
    struct prod_launch *L = &p->pl;
    if (r->d->arm->sm90_smem <= 0 || L->ragged == RAG_INNER || (p->dt != DT_BF16 && p->dt != DT_F16) ||
        L->sxk != 1 || L->syk != 1)
        return 0;
    struct sm90_args s;
    sm90_args(r, L, 2, p->dt, &s);
    void *params[] = { &s.ta, &s.tb, &s.use_tma, &s.x, &s.y, &p->buf, &L->doffs, &s.G, &s.units, &s.M,
                       &s.N, &s.K, &s.ldx, &s.ldy, &s.syg, &p->srow, &p->scol };
    gpu_launch_dims(r->d, p->dt == DT_BF16 ? "kg_gemm_sm90_bf16" : "kg_gemm_sm90_f16", &s.l, params);
    return 1;
}

/* A low-precision product through the sm_90a fp8 GEMM
 * (kg_qgemm_sm90_<fmt>_bf16) when the current arm has it and the case
 * qualifies: OCP E4M3 or E5M2 with fp32 scales of one block along K (per
 * tensor or per row), plain or grouped, bf16 output (the fp8 tensor-core
 * sums fall short of an fp32 output's baseline; kernels.hip "Input
 * types").  Returns 0, launching nothing, otherwise. */
static int q_sm90_launch(struct run *r, struct output *p)
{
    const struct qrun *q = r->q;
    struct prod_launch *L = &p->pl;
    if (r->d->arm->sm90_smem <= 0 || (q->f != Q_E4M3 && q->f != Q_E5M2) || q->rule != QR_AMAX || q->gk < L->k ||
        p->dt != DT_BF16)
        return 0;
    struct sm90_args s;
    sm90_args(r, L, 1, p->dt, &s);
    int gra = (int)q->op[0].g.gr, grb = (int)q->op[1].g.gr;
    void *params[] = { &s.ta, &s.tb, &s.use_tma, &s.x, &s.y, (void *)&q->op[0].d_scales,
                       (void *)&q->op[1].d_scales, &p->buf, &L->doffs, &s.G, &s.units, &s.M, &s.N, &s.K, &gra,
                       &grb };
    gpu_launch_dims(r->d, q->f == Q_E5M2 ? "kg_qgemm_sm90_e5m2_bf16" : "kg_qgemm_sm90_e4m3_bf16", &s.l, params);
    return 1;
}

/* A low-precision product: GPU kg_qgemm_<out> (grid N/BN x M/BM, the arm's
 * tile) or kg_qgrouped_<out> (grid N/BN x the groups' row tiles), 256
 * threads, reading ref.c's codes and scales; CPU: cpu_qproduct. */
static void q_launch(struct run *r, int o)
{
    struct output *p = &r->out[o];
    struct qrun *q = r->q;
    struct prod_launch *L = &p->pl;
    if (r->d->kind == DEV_CPU) { cpu_qproduct(r, p); return; }
    if (q_sm90_launch(r, p)) return;
    int grouped = L->ragged == RAG_ROWS, f32 = p->dt == DT_F32;
    const char *name = grouped ? (f32 ? "kg_qgrouped_f32" : "kg_qgrouped_bf16") : (f32 ? "kg_qgemm_f32" : "kg_qgemm_bf16");
    int M = (int)L->m, N = (int)L->n, K = (int)L->k, G = (int)L->groups, fmt = (int)q->f, mx = q->rule != QR_AMAX;
    int gra = (int)q->op[0].g.gr, grb = (int)q->op[1].g.gr, gck = (int)q->gk;
    unsigned gx = tile_count(N, r->d->arm->tile_n);
    uint64_t *sa = &q->op[0].d_scales, *sb = &q->op[1].d_scales;
    if (!grouped) {
        void *params[] = { &L->dx, &L->dy, sa, sb, &p->buf, &M, &N, &K, &fmt, &mx, &gra, &grb, &gck };
        gpu_launch(r->d, name, gx, tile_count(M, r->d->arm->tile_m), 1, 256, params);
    } else {
        grouped_tile_check(r->d);
        void *params[] = { &L->dx, &L->dy, sa, sb, &p->buf, &L->doffs, &L->dtiles, &G, &N, &K, &fmt, &mx,
                           &gra, &grb, &gck };
        gpu_launch(r->d, name, gx, (unsigned)L->tiles, 1, 256, params);
    }
}

/* Output o of a product (gemm or grouped).  GPU: the portable kernels, a
 * BM x BN tile (the arm's; 64 x 64 as shipped) per block of 256 threads:
 * kg_gemm_<dt> (grid N/BN x M/BM), kg_grouped_<dt> (ragged rows; grid N/BN
 * x the groups' row tiles) or kg_grouped_wgrad_<dt> (ragged inner; grid
 * N/BN x M/BM x G).  CPU: cpu_product. */
static void product_launch(struct run *r, int o)
{
    static const char *const fname[3][DT_COUNT] = {
        { "kg_gemm_f32", "kg_gemm_f16", "kg_gemm_bf16" },
        { "kg_grouped_f32", "kg_grouped_f16", "kg_grouped_bf16" },
        { "kg_grouped_wgrad_f32", "kg_grouped_wgrad_f16", "kg_grouped_wgrad_bf16" },
    };
    struct output *p = &r->out[o];
    struct prod_launch *L = &p->pl;
    if (r->q) { q_launch(r, o); return; }
    if (r->d->kind == DEV_CPU) { cpu_product(p); return; }
    if (sm90_launch(r, p)) return;
    const char *name = fname[L->ragged][p->dt];
    int M = (int)L->m, N = (int)L->n, K = (int)L->k, G = (int)L->groups;
    unsigned gx = tile_count(N, r->d->arm->tile_n), gm = tile_count(M, r->d->arm->tile_m);
    if (L->ragged == RAG_ROWS) grouped_tile_check(r->d);
    if (L->ragged == RAG_NONE) {
        void *params[] = { &L->dx, &L->dy, &p->buf, &M, &N, &K, &L->sxm, &L->sxk,
                           &L->syk, &L->syn, &p->srow, &p->scol };
        gpu_launch(r->d, name, gx, gm, 1, 256, params);
    } else if (L->ragged == RAG_ROWS) {
        void *params[] = { &L->dx, &L->dy, &p->buf, &L->doffs, &L->dtiles, &G, &N, &K, &L->sxm, &L->sxk,
                           &L->syk, &L->syn, &L->syg, &p->srow, &p->scol };
        gpu_launch(r->d, name, gx, (unsigned)L->tiles, 1, 256, params);
    } else {
        void *params[] = { &L->dx, &L->dy, &p->buf, &L->doffs, &G, &M, &N, &L->sxm, &L->sxk,
                           &L->syk, &L->syn, &L->scg, &p->srow, &p->scol };
        gpu_launch(r->d, name, gx, gm, (unsigned)G, 256, params);
    }
}

/* --- low precision: the quantize-only stage --- */

/* Run the quantize-only kernel on operand op's unquantised values into its
 * poisoned buffers: GPU kg_quantize (one block of 256 threads per scale
 * block; FP4 blocks are 32 wide, so no two share a byte), CPU ref.c's
 * q_quantize as the candidate. */
static void q_stage_launch(struct run *r, struct qoperand *op)
{
    const struct qrun *q = r->q;
    int mx = q->rule != QR_AMAX;
    dev_fill(r->d, op->d_qcodes, 0xff, op->code_bytes);
    dev_fill(r->d, op->d_qscales, 0xff, op->nblocks * (mx ? 1 : sizeof(float)));
    if (r->d->kind == DEV_CPU) {
        q_quantize(op->master, &op->g, q->f, q->rule, (uint8_t *)(uintptr_t)op->d_qcodes,
                   (float *)(uintptr_t)op->d_qscales, (uint8_t *)(uintptr_t)op->d_qscales);
        return;
    }
    uint64_t s = mx ? 0 : op->d_qscales, e = mx ? op->d_qscales : 0;
    int batch = (int)op->g.batch, rows = (int)op->g.rows, cols = (int)op->g.cols, gr = (int)op->g.gr;
    int gc = (int)op->g.gc, fmt = (int)q->f, rule = (int)q->rule;
    void *params[] = { &op->d_master, &op->d_qcodes, &s, &e, &batch, &rows, &cols, &gr, &gc, &fmt, &rule };
    gpu_launch(r->d, "kg_quantize", (unsigned)op->nblocks, 1, 1, 256, params);
}

/* A scale as text: "0.0078125" or, for E8M0, "2^-7 (0x78)". */
static void q_scale_text(char *buf, size_t n, int mx, const unsigned char *scales, size_t b)
{
    if (mx) { snprintf(buf, n, "2^%d (0x%02x)", scales[b] - 127, scales[b]); return; }
    float v;
    memcpy(&v, scales + b * sizeof v, sizeof v);
    snprintf(buf, n, "%.9g", v);
}

/* Compare the kernel's scales with ref.c's: count, and the first as a line. */
static void q_compare_scales(const struct qrun *q, const struct qoperand *op, const unsigned char *got,
                             struct qstage *st)
{
    int mx = q->rule != QR_AMAX;
    size_t es = mx ? 1 : sizeof(float), nbr = qgrid_nbr(&op->g), nbc = qgrid_nbc(&op->g);
    const unsigned char *want = mx ? op->e8 : (const unsigned char *)op->s;
    for (size_t b = 0; b < op->nblocks; b++) {
        if (memcmp(got + b * es, want + b * es, es) == 0) continue;
        if (st->scale_bad++) continue;
        char k[48], w[48];
        q_scale_text(k, sizeof k, mx, got, b);
        q_scale_text(w, sizeof w, mx, want, b);
        snprintf(st->scale_at, sizeof st->scale_at, "%s scale block %zu (matrix %zu, rows %zu.., cols %zu..): "
                 "kernel %s, ref.c %s", op->name, b, b / (nbr * nbc), b / nbc % nbr * op->g.gr,
                 b % nbc * op->g.gc, k, w);
    }
}

/* Compare the kernel's codes with ref.c's element by element (and an odd
 * FP4 row's padding nibble): count, and the first as a line. */
static void q_compare_codes(const struct qrun *q, const struct qoperand *op, const uint8_t *got,
                            struct qstage *st)
{
    size_t rows = op->g.batch * op->g.rows, K = op->g.cols, rb = q_row_bytes(q->f, K);
    size_t width = K + (q->f == Q_E2M1 && K % 2);
    for (size_t i = 0; i < rows; i++)
        for (size_t k = 0; k < width; k++) {
            unsigned a = q_get(q->f, got, rb, i, k), b = q_get(q->f, op->codes, rb, i, k);
            if (a == b || st->code_bad++) continue;
            if (k == K) {
                snprintf(st->code_at, sizeof st->code_at, "%s row %zu: the padding nibble of an odd FP4 row "
                         "is 0x%x, must be 0", op->name, i, a);
                continue;
            }
            char kv[32], wv[32];
            snprintf(kv, sizeof kv, "%.9g", q_decode(q->f, a));
            snprintf(wv, sizeof wv, "%.9g", q_decode(q->f, b));
            snprintf(st->code_at, sizeof st->code_at, "%s[%zu][%zu] (x = %.9g): kernel 0x%02x (%s), ref.c "
                     "0x%02x (%s)", op->name, i, k, op->master[i * K + k], a, kv, b, wv);
        }
}

struct inject_ctx;
static void q_stage_inject(struct run *r, struct qoperand *op, uint8_t *codes, unsigned char *scales);

/* The quantize-only stage of a low-precision case: each operand quantized
 * by the kernel, read back (with --inject scale or quant planted in A), and
 * compared with ref.c's codes and scales; the scale and conversion gates
 * read the result. */
static void q_stage(struct run *r)
{
    struct qrun *q = r->q;
    for (int i = 0; i < 2; i++) {
        struct qoperand *op = &q->op[i];
        size_t sbytes = op->nblocks * (q->rule != QR_AMAX ? 1 : sizeof(float));
        q_stage_launch(r, op);
        uint8_t *codes = xmalloc(op->code_bytes + 1);
        unsigned char *scales = xmalloc(sbytes + 1);
        dev_download(r->d, codes, op->d_qcodes, op->code_bytes);
        dev_download(r->d, scales, op->d_qscales, sbytes);
        if (i == 0) q_stage_inject(r, op, codes, scales);
        memset(&q->st[i], 0, sizeof q->st[i]);
        q_compare_scales(q, op, scales, &q->st[i]);
        q_compare_codes(q, op, codes, &q->st[i]);
        free(codes);
        free(scales);
    }
    q->stage_done = 1;
}

/* The CPU candidate's attention forward with the mask shifted by `shift`
 * (0, or 1 for the planted `mask` fault): O into o (raw dt) and lse. */
static void attn_cpu_fwd(struct run *r, int shift, void *o, float *lse)
{
    struct attn_case *a = r->attn;
    struct attn_geom g = a->g;
    g.shift = shift;
    cpu_attn_fwd(&g, r->c->dt, a->in.q, a->in.k, a->in.v, a->tq, o, lse);
}

/* The CPU candidate's attention backward, mask shifted likewise, from a
 * forward's O (raw dt) and LSE: dQ, dK, dV into raw dt storage. */
static void attn_cpu_bwd(struct run *r, int shift, const void *o, const float *lse, void *dq, void *dk,
                         void *dv)
{
    struct attn_case *a = r->attn;
    struct attn_geom g = a->g;
    enum dtype t = r->c->dt;
    g.shift = shift;
    float *of = decode_strided(t, o, a->tq, g.hq * g.d, (int64_t)(g.hq * g.d), 1);
    cpu_attn_bwd(&g, t, a->in.q, a->in.k, a->in.v, of, a->in.dout, lse, a->tq, a->tk, dq, dk, dv);
    free(of);
}

/* The forward (owner O: O and LSE) or the backward (owner dQ: dQ, dK, dV)
 * of an attention case.  GPU: kg_attn_fwd_<dt>; kg_attn_bwd_pre_<dt>, then
 * kg_attn_bwd_dkdv_<dt> and kg_attn_bwd_dq_<dt>, reading the forward's O and
 * LSE; 256 threads, grid (ceil(longest sequence / 16), heads, sequences), the
 * kernels striding over their own tiles.  CPU: ref.c's flash-style candidate
 * on the canonical inputs (the values the device buffers hold). */
static void attn_launch(struct run *r, int o)
{
    static const char *const fwd[DT_COUNT] = { NULL, "kg_attn_fwd_f16", "kg_attn_fwd_bf16" };
    static const char *const pre[DT_COUNT] = { NULL, "kg_attn_bwd_pre_f16", "kg_attn_bwd_pre_bf16" };
    static const char *const dkdv[DT_COUNT] = { NULL, "kg_attn_bwd_dkdv_f16", "kg_attn_bwd_dkdv_bf16" };
    static const char *const dq[DT_COUNT] = { NULL, "kg_attn_bwd_dq_f16", "kg_attn_bwd_dq_bf16" };
    struct attn_case *a = r->attn;
    enum dtype t = r->c->dt;
    struct output *O = &r->out[a->o], *L = &r->out[a->lse];
    if (r->d->kind == DEV_CPU) {
        void *ob = (void *)(uintptr_t)O->buf;
        float *lb = (float *)(uintptr_t)L->buf;
        if (o == a->o) attn_cpu_fwd(r, 0, ob, lb);
        else attn_cpu_bwd(r, 0, ob, lb, (void *)(uintptr_t)r->out[a->dq_out].buf,
                          (void *)(uintptr_t)r->out[a->dk_out].buf, (void *)(uintptr_t)r->out[a->dv_out].buf);
        return;
    }
    int B = (int)a->g.b, hq = (int)a->g.hq, hkv = (int)a->g.hkv, d = (int)a->g.d, causal = a->g.causal;
    int tq = (int)a->tq;
    float scale = (float)a->g.scale;
    unsigned gq = (unsigned)((a->max_sq + 15) / 16), gk = (unsigned)((a->max_sk + 15) / 16);
    if (o == a->o) {
        void *params[] = { &a->d_q, &a->d_k, &a->d_v, &O->buf, &L->buf, &a->dcu_q, &a->dcu_k, &B, &hq, &hkv, &d,
                           &scale, &causal };
        gpu_launch(r->d, fwd[t], gq, (unsigned)hq, (unsigned)B, 256, params);
        return;
    }
    uint64_t dQ = r->out[a->dq_out].buf, dK = r->out[a->dk_out].buf, dV = r->out[a->dv_out].buf;
    void *pp[] = { &O->buf, &a->d_do, &a->dsum, &tq, &hq, &d };
    gpu_launch(r->d, pre[t], (unsigned)((a->tq * a->g.hq + 255) / 256), 1, 1, 256, pp);
    void *kp[] = { &a->d_q, &a->d_k, &a->d_v, &a->d_do, &L->buf, &a->dsum, &dK, &dV, &a->dcu_q, &a->dcu_k, &B, &hq,
                   &hkv, &d, &scale, &causal };
    gpu_launch(r->d, dkdv[t], gk, (unsigned)hkv, (unsigned)B, 256, kp);
    void *qp[] = { &a->d_q, &a->d_k, &a->d_v, &a->d_do, &L->buf, &a->dsum, &dQ, &a->dcu_q, &a->dcu_k, &B, &hq,
                   &hkv, &d, &scale, &causal };
    gpu_launch(r->d, dq[t], gq, (unsigned)hq, (unsigned)B, 256, qp);
}

/* Launch o (an owner), with gpu_launch noting each kernel it runs in
 * r->geom[o] (replacing the previous launch's notes); the CPU notes none. */
static void launch_recorded(struct run *r, int o)
{
    r->geom[o].n = 0;
    r->d->geom = &r->geom[o];
    r->c->op->launch(r, o);
    r->d->geom = NULL;
}

/* ===== Check plan and references ===== */

/* Which elements of an output are checked.  Full: every element.  Sampled
 * (when a full reference would take more than FULL_CHECK_MACS multiply-adds
 * and no --full): in every tile row of KG_TILE rows, its first and last row
 * and one seeded random row are checked across all columns; and some columns
 * across all rows: in every tile column three of them, or, for outputs made
 * of heads (attention), all columns of one seeded head.  So every row and
 * every tile (tails included) has checked elements. */
struct plan {
    int full;
    size_t nr, nc;                /* sampled rows (all columns), sampled columns (all rows) */
    uint32_t *rows, *cols;        /* full: rows = 0..rows-1, nc = 0 */
    unsigned char *row_in;        /* row_in[i]: row i is among `rows` */
};

/* The lines to check among n: per tile of KG_TILE, first, last and one
 * random line, deduplicated, ascending. */
static uint32_t *sample_lines(size_t n, uint64_t key, size_t *count)
{
    uint32_t *v = xmalloc((3 * (n / KG_TILE + 1)) * sizeof(uint32_t));
    size_t c = 0;
    for (size_t t0 = 0; t0 < n; t0 += KG_TILE) {
        size_t t1 = t0 + KG_TILE < n ? t0 + KG_TILE : n;
        size_t pick[3] = { t0, t0 + 1 + rng_at(key, t0) % (t1 - t0), t1 - 1 };
        if (pick[1] >= t1 - 1) pick[1] = t0;
        for (int i = 0; i < 3; i++)
            if (c == 0 || pick[i] > v[c - 1]) v[c++] = (uint32_t)pick[i];
    }
    *count = c;
    return v;
}

static void plan_build(struct plan *p, const struct output *o, int force_full, uint64_t key)
{
    memset(p, 0, sizeof *p);
    p->row_in = xcalloc(o->rows, 1);
    p->full = force_full || o->check_macs <= (double)FULL_CHECK_MACS;
    if (p->full) {
        p->nr = o->rows;
        p->rows = xmalloc(o->rows * sizeof(uint32_t));
        for (size_t i = 0; i < o->rows; i++) p->rows[i] = (uint32_t)i;
    } else {
        p->rows = sample_lines(o->rows, mix64(key ^ 0x726f7773), &p->nr);
        if (o->head_dim) {
            size_t head = rng_at(mix64(key ^ 0x68656164), 0) % (o->cols / o->head_dim);
            p->nc = o->head_dim;
            p->cols = xmalloc(p->nc * sizeof(uint32_t));
            for (size_t c = 0; c < p->nc; c++) p->cols[c] = (uint32_t)(head * o->head_dim + c);
        } else {
            p->cols = sample_lines(o->cols, mix64(key ^ 0x636f6c73), &p->nc);
        }
    }
    for (size_t r = 0; r < p->nr; r++) p->row_in[p->rows[r]] = 1;
}

static void plan_free(struct plan *p)
{
    free(p->rows);
    free(p->cols);
    free(p->row_in);
}

/* Number of checked elements. */
static size_t plan_count(const struct plan *p, const struct output *o)
{
    return p->nr * o->cols + (o->rows - p->nr) * p->nc;
}

/* Reference values on a plan: block R is nr x cols (the sampled rows), block
 * C is rows x nc (the sampled columns; rows in block R are skipped when read). */
struct refs {
    double *ref_r, *ref_c;        /* double accumulation */
    float *lp_r, *lp_c;           /* same precision, rounded to the output's dtype */
    double *hp_r, *hp_c;          /* low precision: the unquantised product (NULL otherwise) */
    double ref_s, lp_s;           /* seconds each took; lp_s < 0: computed with ref */
};

static void refs_alloc(struct refs *f, const struct output *o, const struct plan *p)
{
    memset(f, 0, sizeof *f);
    f->ref_r = xcalloc(p->nr * o->cols, sizeof(double));
    f->lp_r = xcalloc(p->nr * o->cols, sizeof(float));
    f->ref_c = xcalloc(o->rows * p->nc, sizeof(double));
    f->lp_c = xcalloc(o->rows * p->nc, sizeof(float));
    if (o->nparts && o->parts[0].q) {
        f->hp_r = xcalloc(p->nr * o->cols, sizeof(double));
        f->hp_c = xcalloc(o->rows * p->nc, sizeof(double));
    }
}

static void round_all(enum dtype t, float *v, size_t n)
{
    for (size_t i = 0; i < n; i++) v[i] = dt_round(t, v[i]);
}

/* Block pt's product on the given rows (nr of them; NULL: all) and columns
 * (nc of them; NULL: all), accumulated as `kind`, into out (double for
 * ACC_F64, float otherwise): ref.c's qprod for quantized operands (quant),
 * else mm_select on the canonical x and y. */
static void part_select(enum acc_kind kind, int quant, const struct part *pt, size_t cols, const uint32_t *rows,
                        size_t nr, const uint32_t *sel, size_t nc, void *out)
{
    if (quant) qprod_select(kind, pt->q, rows, nr, sel, nc, out);
    else mm_select(kind, pt->x, pt->y, pt->inner, cols, rows, nr, sel, nc, out);
}

/* One reference of block pt on the plan, accumulated as `kind`: the plan's
 * rows that fall in it (local, b - a of them) into out_r from row a, and all
 * its rows on the plan's columns into out_c from row pt->row0; a float
 * reference is rounded to the output's dtype. */
static void ref_block(enum acc_kind kind, int quant, const struct output *o, const struct part *pt,
                      const struct plan *p, const uint32_t *local, size_t a, size_t b, void *out_r, void *out_c)
{
    size_t es = kind == ACC_F64 ? sizeof(double) : sizeof(float);
    char *r = (char *)out_r + a * o->cols * es, *c = (char *)out_c + pt->row0 * p->nc * es;
    if (b > a) {
        part_select(kind, quant, pt, o->cols, local, b - a, NULL, o->cols, r);
        if (kind != ACC_F64) round_all(o->dt, (float *)r, (b - a) * o->cols);
    }
    if (p->nc) {
        part_select(kind, quant, pt, o->cols, NULL, pt->rows, p->cols, p->nc, c);
        if (kind != ACC_F64) round_all(o->dt, (float *)c, pt->rows * p->nc);
    }
}

/* The references of one product block on the plan: the plan's rows that fall
 * in the block (a contiguous run of them, as both ascend) and all rows on the
 * plan's columns; double, then fp32 in the kernels' order rounded to the
 * dtype.  Quantized operands multiply their decoded codes and scales, and
 * add the unquantised (bf16) product as hp.  A block with no inner dimension
 * is exactly zero (already, from refs_alloc). */
static void refs_part(struct refs *f, const struct output *o, const struct part *pt, const struct plan *p,
                      double *ref_s, double *lp_s)
{
    size_t a = 0, b;
    while (a < p->nr && p->rows[a] < pt->row0) a++;
    for (b = a; b < p->nr && p->rows[b] < pt->row0 + pt->rows; b++) {}
    if (pt->inner == 0 || pt->rows == 0) return;
    uint32_t *local = xmalloc((b - a + 1) * sizeof *local);
    for (size_t i = a; i < b; i++) local[i - a] = (uint32_t)(p->rows[i] - pt->row0);
    int quant = pt->q != NULL;
    double t0 = now_s();
    ref_block(ACC_F64, quant, o, pt, p, local, a, b, f->ref_r, f->ref_c);
    double t1 = now_s();
    ref_block(ACC_F32_SEQ, quant, o, pt, p, local, a, b, f->lp_r, f->lp_c);
    *ref_s += t1 - t0, *lp_s += now_s() - t1;
    if (quant) ref_block(ACC_F64, 0, o, pt, p, local, a, b, f->hp_r, f->hp_c);
    free(local);
}

/* The double reference and the same-precision reference of output o on plan
 * p: the op's own, or, for products, block by block. */
static void refs_compute(struct refs *f, struct run *r, int o, const struct plan *p)
{
    const struct output *out = &r->out[o];
    refs_alloc(f, out, p);
    if (r->c->op->reference) { r->c->op->reference(r, o, p, f); return; }
    for (size_t i = 0; i < out->nparts; i++) refs_part(f, out, &out->parts[i], p, &f->ref_s, &f->lp_s);
}

static void refs_free(struct refs *f)
{
    free(f->ref_r);
    free(f->ref_c);
    free(f->lp_r);
    free(f->lp_c);
    free(f->hp_r);
    free(f->hp_c);
}

/* --- attention references: (token, head) units --- */

enum attn_which { AW_O, AW_LSE, AW_DQ, AW_DK, AW_DV };

struct attn_ref_job {
    struct run *r;
    enum attn_which which;
    const struct output *o;
    const struct plan *p;
    struct refs *f;
    size_t heads, uc;             /* units per row; columns per unit */
    const uint32_t *col_rows;     /* rows checked on the plan's columns only */
    size_t ncol_rows;
    size_t col_head;
};

/* One unit's double and same-precision values (uc of each). */
static void attn_unit(const struct attn_ref_job *j, size_t tok, size_t head, double *ref, float *lp)
{
    struct attn_case *a = j->r->attn;
    enum dtype t = j->r->c->dt;
    double o[KG_ATTN_DMAX], lse, other[KG_ATTN_DMAX];
    float o_lp[KG_ATTN_DMAX], lse_lp, other_lp[KG_ATTN_DMAX];
    switch (j->which) {
    case AW_O: attn_ref_fwd(&a->g, &a->in, t, tok, head, ref, &lse, lp, &lse_lp); break;
    case AW_LSE: attn_ref_fwd(&a->g, &a->in, t, tok, head, o, ref, o_lp, lp); break;
    case AW_DQ: attn_ref_dq(&a->g, &a->in, t, tok, head, ref, lp); break;
    case AW_DK: attn_ref_dkdv(&a->g, &a->in, t, tok, head, ref, other, lp, other_lp); break;
    case AW_DV: attn_ref_dkdv(&a->g, &a->in, t, tok, head, other, ref, other_lp, lp); break;
    }
}

/* Work item i: the units of the plan's rows (row by head), then the units
 * of the rows checked only on the plan's columns (one head). */
static void attn_ref_item(void *ctx, size_t i)
{
    const struct attn_ref_job *j = ctx;
    const struct plan *p = j->p;
    double ref[KG_ATTN_DMAX];
    float lp[KG_ATTN_DMAX];
    size_t cols = j->o->cols;
    if (i < p->nr * j->heads) {
        size_t pr = i / j->heads, h = i % j->heads;
        attn_unit(j, p->rows[pr], h, ref, lp);
        for (size_t c = 0; c < j->uc; c++)
            j->f->ref_r[pr * cols + h * j->uc + c] = ref[c], j->f->lp_r[pr * cols + h * j->uc + c] = lp[c];
        return;
    }
    size_t row = j->col_rows[i - p->nr * j->heads];
    attn_unit(j, row, j->col_head, ref, lp);
    for (size_t c = 0; c < p->nc; c++) {
        size_t u = p->cols[c] - j->col_head * j->uc;
        j->f->ref_c[row * p->nc + c] = ref[u], j->f->lp_c[row * p->nc + c] = lp[u];
    }
}

/* The backward references' statistics (LSE and rowsum(dO·O) of every query
 * row, in double and in lp), made once per case. */
static void attn_stats_item(void *ctx, size_t u)
{
    struct run *r = ctx;
    attn_ref_stats(&r->attn->g, &r->attn->in, r->c->dt, u / r->attn->g.hq, u % r->attn->g.hq);
}

static void attn_stats(struct run *r)
{
    struct attn_case *a = r->attn;
    if (a->stats_ready) return;
    size_t n = a->tq * a->g.hq;
    a->in.lse_ref = run_owned(r, n * sizeof(double)), a->in.dsum_ref = run_owned(r, n * sizeof(double));
    a->in.lse_lp = run_owned(r, n * sizeof(float)), a->in.dsum_lp = run_owned(r, n * sizeof(float));
    par_for(n, attn_stats_item, r);
    a->stats_ready = 1;
}

/* The references of attention output o on plan p: each needed (token, head)
 * unit computed once, in double and in lp together (ref.c). */
static void attn_reference(struct run *r, int o, const struct plan *p, struct refs *f)
{
    struct attn_case *a = r->attn;
    const struct output *out = &r->out[o];
    struct attn_ref_job j = { r, AW_O, out, p, f, 0, out->head_dim, NULL, 0, 0 };
    j.which = o == a->o ? AW_O : o == a->lse ? AW_LSE : o == a->dq_out ? AW_DQ : o == a->dk_out ? AW_DK : AW_DV;
    j.heads = out->cols / j.uc;
    double t0 = now_s();
    if (j.which >= AW_DQ) attn_stats(r);
    uint32_t *col_rows = xmalloc((out->rows + 1) * sizeof *col_rows);
    if (p->nc) {
        j.col_head = p->cols[0] / j.uc;
        for (size_t i = 0; i < out->rows; i++)
            if (!p->row_in[i]) col_rows[j.ncol_rows++] = (uint32_t)i;
    }
    j.col_rows = col_rows;
    par_for(p->nr * j.heads + j.ncol_rows, attn_ref_item, &j);
    free(col_rows);
    f->ref_s = now_s() - t0, f->lp_s = -1;
}

/* ===== Inject ===== */

/* A planted fault, applied to a candidate's output after it is read back and
 * before the gates: each must be caught by the gate named in its row. */
struct inject_ctx {
    struct run *r;
    int oi;                       /* the output's index */
    const struct output *o;
    float *out;                   /* rows x cols, decoded */
    unsigned char *raw;           /* the storage with its guard bands, as read back */
    double atol;
    uint64_t key;
    struct qoperand *qop;         /* the quantize stage (INJ_QSTAGE): operand A, */
    uint8_t *qcodes;              /* the kernel's codes and scales as read back */
    unsigned char *qscales;
};

/* Zero the middle output tile. */
static void inj_tile(struct inject_ctx *x)
{
    const struct output *o = x->o;
    size_t r0 = (o->rows - 1) / KG_TILE / 2 * KG_TILE, c0 = (o->cols - 1) / KG_TILE / 2 * KG_TILE;
    for (size_t i = r0; i < o->rows && i < r0 + KG_TILE; i++)
        for (size_t j = c0; j < o->cols && j < c0 + KG_TILE; j++) x->out[i * o->cols + j] = 0;
}

/* Make the last (bottom-right, usually partial) tile wrong: v -> 0.5 - v. */
static void inj_tail(struct inject_ctx *x)
{
    const struct output *o = x->o;
    size_t r0 = (o->rows - 1) / KG_TILE * KG_TILE, c0 = (o->cols - 1) / KG_TILE * KG_TILE;
    for (size_t i = r0; i < o->rows; i++)
        for (size_t j = c0; j < o->cols; j++) x->out[i * o->cols + j] = 0.5f - x->out[i * o->cols + j];
}

/* One NaN in the middle of the output. */
static void inj_nan(struct inject_ctx *x)
{
    x->out[(x->o->rows / 2) * x->o->cols + x->o->cols / 2] = NAN;
}

/* Add half of atol to every element: inside every element tolerance. */
static void inj_bias(struct inject_ctx *x)
{
    for (size_t i = 0; i < x->o->rows * x->o->cols; i++) x->out[i] += (float)(0.5 * x->atol);
}

/* Drop one element in 64 (seeded; at least one) to zero. */
static void inj_drop(struct inject_ctx *x)
{
    size_t n = x->o->rows * x->o->cols;
    x->out[rng_at(x->key, 0) % n] = 0;
    for (size_t i = 0; i < n; i++)
        if (rng_at(x->key, i + 1) % 64 == 0) x->out[i] = 0;
}

/* Shift the middle row right by one column (its first element becomes 0). */
static void inj_row(struct inject_ctx *x)
{
    float *row = x->out + (x->o->rows / 2) * x->o->cols;
    memmove(row + 1, row, (x->o->cols - 1) * sizeof(float));
    row[0] = 0;
}

/* Leave the middle row unwritten: its storage goes back to the poison bytes. */
static void inj_unwritten(struct inject_ctx *x)
{
    const struct output *o = x->o;
    size_t es = DTYPES[o->dt].bytes, i = o->rows / 2;
    for (size_t j = 0; j < o->cols; j++)
        memset(x->raw + o->guard + (size_t)((int64_t)i * o->srow + (int64_t)j * o->scol) * es, 0xff, es);
}

/* Write one element just past the end of the storage, into the guard band. */
static void inj_outside(struct inject_ctx *x)
{
    memset(x->raw + x->o->guard + x->o->elems * DTYPES[x->o->dt].bytes, 0, DTYPES[x->o->dt].bytes);
}

/* Flip the lowest bit of the middle element (applied to repeated runs only:
 * a run that differs from the first, as a race makes it). */
static void inj_race(struct inject_ctx *x)
{
    const struct output *o = x->o;
    size_t i = o->rows / 2, j = o->cols / 2;
    x->raw[o->guard + (size_t)((int64_t)i * o->srow + (int64_t)j * o->scol) * DTYPES[o->dt].bytes] ^= 1;
}

/* Scale one group's (or sequence's) rows by 1 + 2^-5: the middle of the
 * segments that have rows. */
static void inj_group(struct inject_ctx *x)
{
    const struct output *o = x->o;
    size_t nonempty = 0, pick = 0, k = 0;
    for (size_t s = 0; s < o->nseg; s++) nonempty += o->seg[s + 1] > o->seg[s];
    for (size_t s = 0; s < o->nseg; s++)
        if (o->seg[s + 1] > o->seg[s] && k++ == nonempty / 2) pick = s;
    for (size_t i = o->seg[pick]; i < o->seg[pick + 1]; i++)
        for (size_t j = 0; j < o->cols; j++) x->out[i * o->cols + j] *= 1.03125f;
}

/* Replace the output by what a kernel whose causal mask is shifted by one
 * (each query sees one key more) computes: the CPU candidate so shifted. */
static void inj_mask(struct inject_ctx *x)
{
    struct run *r = x->r;
    struct attn_case *a = r->attn;
    enum dtype t = r->c->dt;
    size_t es = DTYPES[t].bytes, qe = a->tq * a->g.hq * a->g.d, ke = a->tk * a->g.hkv * a->g.d;
    void *o = xmalloc(qe * es), *dq = xmalloc(qe * es), *dk = xmalloc(ke * es), *dv = xmalloc(ke * es);
    float *lse = xmalloc((a->tq * a->g.hq + 1) * sizeof(float));
    int bwd = x->oi == a->dq_out || x->oi == a->dk_out || x->oi == a->dv_out;
    attn_cpu_fwd(r, 1, o, lse);
    if (bwd) attn_cpu_bwd(r, 1, o, lse, dq, dk, dv);
    const void *src = x->oi == a->o ? o : x->oi == a->lse ? (void *)lse : x->oi == a->dq_out ? dq
                    : x->oi == a->dk_out ? dk : dv;
    const struct output *p = x->o;
    for (size_t i = 0; i < p->rows * p->cols; i++) x->out[i] = dt_load(p->dt, src, i);
    free(o), free(dq), free(dk), free(dv), free(lse);
}

/* The middle scale block of operand A: its scale off by a power of two
 * (times 2; MX: the exponent + 1). */
static void inj_scale(struct inject_ctx *x)
{
    size_t b = x->qop->nblocks / 2;
    if (x->r->q->rule != QR_AMAX) { x->qscales[b] = (unsigned char)(x->qscales[b] < 254 ? x->qscales[b] + 1 : 253); return; }
    float v;
    memcpy(&v, x->qscales + b * sizeof v, sizeof v);
    v *= 2;
    memcpy(x->qscales + b * sizeof v, &v, sizeof v);
}

/* The middle scale block of operand A rounded the wrong way: every code the
 * other neighbour of its value (ref.c's q_wrong_way). */
static void inj_quant(struct inject_ctx *x)
{
    const struct qrun *q = x->r->q;
    const struct qoperand *op = x->qop;
    struct qblock k = q_block(op->master, &op->g, q->f, q->rule, op->nblocks / 2);
    size_t rb = q_row_bytes(q->f, op->g.cols);
    for (size_t i = k.r0; i < k.r1; i++)
        for (size_t c = k.c0; c < k.c1; c++) {
            float v = q_scaled(&k, q->rule, op->master[i * op->g.cols + c]);
            q_put(q->f, x->qcodes, rb, i, c, q_wrong_way(q->f, v, q_get(q->f, x->qcodes, rb, i, c)));
        }
}

/* Every element off by up to 2^-6 of itself (seeded): what a narrow
 * accumulator does to a low-precision product, above the format's gate. */
static void inj_precision(struct inject_ctx *x)
{
    for (size_t i = 0; i < x->o->rows * x->o->cols; i++) x->out[i] *= 1.0f + 0x1p-6f * rng_sym(x->key, i);
}

static const char *inj_needs_quant(const struct kcase *c)
{
    return c->qfmt == Q_NONE ? "needs a low-precision case (--dtype " Q_NAMES ")" : NULL;
}

/* NULL if fault `name` can be planted in case c, else why not. */
static const char *inj_needs_segments(const struct kcase *c)
{
    return strcmp(c->op->name, "gemm") == 0 ? "needs a grouped or attn case (outputs made of groups or sequences)" : NULL;
}

static const char *inj_needs_causal(const struct kcase *c)
{
    return strcmp(c->op->name, "attn") != 0 || !c->causal ? "needs a causal attn case" : NULL;
}

enum inj_stage {
    INJ_QSTAGE,   /* on the quantize-only kernel's codes and scales (low precision) */
    INJ_VALUES,   /* on the decoded values of every check */
    INJ_RAW,      /* on the storage bytes of every check */
    INJ_REPEAT,   /* on the storage bytes of the repeated runs (--repeat) only */
};

struct inject {
    const char *name, *gate, *what;
    enum inj_stage stage;
    void (*apply)(struct inject_ctx *);
    const char *(*unfit)(const struct kcase *);   /* NULL: any case */
};

static const struct inject INJECTS[] = {
    { "tile", "worst-tile", "the middle output tile zeroed", INJ_VALUES, inj_tile, NULL },
    { "tail", "allclose", "the last (partial) tile wrong", INJ_VALUES, inj_tail, NULL },
    { "nan", "nan-inf", "one NaN in the output", INJ_VALUES, inj_nan, NULL },
    { "bias", "bias", "0.5*atol added to every element", INJ_VALUES, inj_bias, NULL },
    { "drop", "allclose", "one element in 64 dropped to zero", INJ_VALUES, inj_drop, NULL },
    { "row", "allclose", "the middle row shifted by one column", INJ_VALUES, inj_row, NULL },
    { "unwritten", "written", "the middle row left unwritten", INJ_RAW, inj_unwritten, NULL },
    { "outside", "in-bounds", "one element written past the end of the output", INJ_RAW, inj_outside, NULL },
    { "group", "group", "one group's (sequence's) rows scaled by 1+2^-5", INJ_VALUES, inj_group,
      inj_needs_segments },
    { "mask", "allclose", "the causal mask shifted by one key", INJ_VALUES, inj_mask, inj_needs_causal },
    { "race", "determinism", "one bit of a repeated run flipped (needs --repeat 2 or more)", INJ_REPEAT,
      inj_race, NULL },
    { "scale", "scale", "one scale block of A off by a power of two (quantize stage)", INJ_QSTAGE, inj_scale,
      inj_needs_quant },
    { "quant", "conversion", "one scale block of A rounded the wrong way (quantize stage)", INJ_QSTAGE,
      inj_quant, inj_needs_quant },
    { "precision", "baseline", "every element off by up to 2^-6 of itself (a narrow accumulator)", INJ_VALUES,
      inj_precision, inj_needs_quant },
};
#define N_INJECTS (sizeof INJECTS / sizeof *INJECTS)

static const struct inject *find_inject(const char *name)
{
    for (size_t i = 0; i < N_INJECTS; i++)
        if (strcmp(INJECTS[i].name, name) == 0) return &INJECTS[i];
    return NULL;
}

/* ===== Gates ===== */

/* What --repeat found for one output: runs made, whether the kernels declare
 * atomics (then each run was gated instead of compared), and the first
 * difference from run 1. */
struct repeat {
    int runs, atomics;
    int diff_run;                 /* 0: every run was bitwise equal to run 1 */
    size_t diff_row, diff_col;
    double first, other;          /* the two values at the difference */
    int gated_fail_run;           /* atomics: the first run that failed a gate (0: none) */
};

/* What the gates read: one output, its plan, references, the candidate's
 * decoded values and what the read-back and the repeats found. */
struct gate_in {
    const struct output *o;
    const struct plan *p;
    const struct refs *f;
    const float *out;             /* rows x cols */
    size_t unwritten;             /* elements still holding the poison bytes */
    size_t outside;               /* guard-band bytes no longer holding them */
    enum dtype t;
    double rtol, atol;            /* allclose */
    double atol_base;             /* the dtype's (or --atol's), before any scaling */
    int inputs_nonzero;
    const struct repeat *rep;
    const struct qrun *q;         /* low precision: the quantize stage; NULL otherwise */
    double q_gate;                /* low precision: the format's SNR gate, dB (0: not low precision) */
    const char *trades;           /* --trades-precision: why the baseline rule is waived */
};

/* Error sums of one tile or one segment. */
struct acc { size_t n; double ref2, err2, lperr2, max_err; size_t wi, wj; };

/* Everything the gates need, accumulated in one pass over the checked
 * elements (and one over all elements for NaN/inf). */
struct stats {
    size_t n;                               /* checked elements */
    size_t n_finite;                        /* of those with a finite reference, finite in the output */
    size_t n_nz;                            /* checked elements with a finite nonzero reference */
    size_t close_fail;                      /* allclose */
    double close_worst;                     /* max |out-ref| / (atol + rtol|ref|) */
    size_t cw_i, cw_j;
    double cw_out, cw_ref;
    double max_err, max_lp_err, floor;      /* same precision */
    size_t nan_out, inf_out, nan_ref, inf_ref;   /* all elements (out), checked ones (ref) */
    size_t nan_out_checked, inf_out_checked;
    double sum_err, sum_err2, sum_lp_err, sum_lp_err2, sum_ref2, sum_out2, sum_out_ref;
    double sum_hp2, sum_hp_err2;            /* low precision: against the unquantised product */
    size_t tr, tc;                          /* tile grid */
    struct acc *tiles;
    struct acc *segs;                       /* per row segment (nseg of them), or NULL */
    /* derived */
    double mean_err, sd_err, mean_lp_err, rms_lp_err, rms_ref, rel_l2, cosine, snr_db, bias_limit;
    double lp_snr_db, hp_snr_db;            /* the same-precision reference's SNR; the SNR vs unquantised */
    long worst_tile;                        /* -1: no tile had enough checked elements */
    double worst_tile_snr, worst_tile_need;
    long worst_seg;                         /* -1: no segments */
    double worst_seg_snr, worst_seg_need;
};

#define TILE_MIN_CHECKED 64     /* the worst-tile gate looks at tiles with at least this many */
#define TILE_SNR_SLACK_DB 10.0  /* a tile may be this much below the same-precision reference */

static void acc_add(struct acc *a, double ref, double e, double lpe, size_t i, size_t j)
{
    a->n++;
    a->ref2 += ref * ref, a->lperr2 += lpe * lpe;
    if (!isfinite(e)) e = INFINITY;
    a->err2 += e * e;
    if (!(fabs(e) <= a->max_err)) a->max_err = fabs(e), a->wi = i, a->wj = j;
}

/* One checked element: output (i, j) against ref and lp.  A non-finite
 * reference (-inf: the LSE of a row that sees no key) must be matched
 * exactly and is left out of the sums. */
static void stats_visit(struct stats *s, const struct gate_in *g, size_t i, size_t j, double ref, double lp,
                        double hp, size_t seg)
{
    double out = g->out[i * g->o->cols + j];
    s->n++;
    s->nan_out_checked += isnan(out), s->inf_out_checked += isinf(out);
    if (!isfinite(ref)) {
        s->nan_ref += isnan(ref), s->inf_ref += isinf(ref);
        int same = out == ref || (isnan(out) && isnan(ref));
        if (!same) {
            s->close_fail++, s->max_err = INFINITY;
            if (!(s->close_worst == INFINITY)) s->close_worst = INFINITY, s->cw_i = i, s->cw_j = j, s->cw_out = out,
                                                s->cw_ref = ref;
        }
        return;
    }
    double e = out - ref, tol = g->atol + g->rtol * fabs(ref);
    double ratio = isfinite(out) ? fabs(e) / tol : INFINITY;
    if (!(fabs(e) <= tol)) s->close_fail++;
    if (!(ratio <= s->close_worst)) {
        s->close_worst = ratio;
        s->cw_i = i, s->cw_j = j, s->cw_out = out, s->cw_ref = ref;
    }
    if (!(fabs(e) <= s->max_err)) s->max_err = isfinite(out) ? fabs(e) : INFINITY;
    double lpe = fabs(lp - ref), fl = fabs((double)dt_round(g->t, (float)ref) - ref);
    if (lpe > s->max_lp_err) s->max_lp_err = lpe;
    if (fl > s->floor) s->floor = fl;
    s->sum_lp_err += lp - ref, s->sum_lp_err2 += (lp - ref) * (lp - ref);
    s->n_nz += ref != 0;
    acc_add(&s->tiles[(i / KG_TILE) * s->tc + j / KG_TILE], ref, e, lp - ref, i, j);
    if (s->segs) acc_add(&s->segs[seg], ref, e, lp - ref, i, j);
    if (!isfinite(out)) return;
    s->n_finite++;
    s->sum_hp2 += hp * hp, s->sum_hp_err2 += (out - hp) * (out - hp);
    s->sum_err += e, s->sum_err2 += e * e, s->sum_ref2 += ref * ref;
    s->sum_out2 += out * out, s->sum_out_ref += out * ref;
}

static double snr_db(double sig2, double err2)
{
    if (err2 == 0) return INFINITY;
    return 10.0 * log10(sig2 / err2);
}

/* What a block (tile or segment) must reach: the same-precision reference's
 * SNR on it, capped per dtype, minus TILE_SNR_SLACK_DB; for low precision
 * at least the format's SNR gate, and only that when the run declares
 * --trades-precision.  A block whose
 * reference is exactly zero (an empty group's dB, a vanishing gradient) is
 * held instead to its lp error energy within the same slack, so to exact
 * zero when lp is exactly zero too; its "SNR" is then lp's error over the
 * output's, in dB.  Returns the margin (SNR - need). */
static double acc_margin(const struct acc *a, const struct gate_in *g, double *snr, double *need)
{
    enum dtype t = g->t;
    if (a->ref2 == 0) {
        *snr = a->err2 == 0 ? INFINITY : a->lperr2 == 0 ? -INFINITY : 10.0 * log10(a->lperr2 / a->err2);
        *need = -TILE_SNR_SLACK_DB;
        return *snr - *need;
    }
    *snr = snr_db(a->ref2, a->err2);
    double lp = snr_db(a->ref2, a->lperr2);
    *need = (lp < DTYPES[t].tile_snr_cap ? lp : DTYPES[t].tile_snr_cap) - TILE_SNR_SLACK_DB;
    if (g->q_gate > 0) *need = g->trades ? g->q_gate : fmax(g->q_gate, *need);
    return *snr == INFINITY ? INFINITY : *snr - *need;
}

/* The worst tile (among those with TILE_MIN_CHECKED checked elements) and
 * the worst segment (any with a checked element): the ones furthest below
 * what they need. */
static void stats_worst(struct stats *s, const struct gate_in *g)
{
    double worst = INFINITY, snr, need;
    s->worst_tile = -1;
    for (size_t k = 0; k < s->tr * s->tc; k++) {
        const struct acc *a = &s->tiles[k];
        if (a->n < TILE_MIN_CHECKED || (a->ref2 == 0 && a->err2 == 0)) continue;
        double m = acc_margin(a, g, &snr, &need);
        if (m < worst || s->worst_tile < 0) worst = m, s->worst_tile = (long)k, s->worst_tile_snr = snr,
                                            s->worst_tile_need = need;
    }
    worst = INFINITY;
    s->worst_seg = -1;
    for (size_t k = 0; s->segs && k < g->o->nseg; k++) {
        if (s->segs[k].n == 0) continue;
        double m = acc_margin(&s->segs[k], g, &snr, &need);
        if (m < worst || s->worst_seg < 0) worst = m, s->worst_seg = (long)k, s->worst_seg_snr = snr,
                                           s->worst_seg_need = need;
    }
}

static void stats_compute(struct stats *s, const struct gate_in *g)
{
    const struct output *o = g->o;
    const struct plan *p = g->p;
    memset(s, 0, sizeof *s);
    s->tr = (o->rows + KG_TILE - 1) / KG_TILE, s->tc = (o->cols + KG_TILE - 1) / KG_TILE;
    s->tiles = xcalloc(s->tr * s->tc, sizeof *s->tiles);
    uint32_t *seg_of = NULL;
    if (o->seg) {
        s->segs = xcalloc(o->nseg, sizeof *s->segs);
        seg_of = xmalloc((o->rows + 1) * sizeof *seg_of);
        for (size_t k = 0; k < o->nseg; k++)
            for (size_t i = o->seg[k]; i < o->seg[k + 1]; i++) seg_of[i] = (uint32_t)k;
    }
    const struct refs *f = g->f;
    for (size_t r = 0; r < p->nr; r++)
        for (size_t j = 0; j < o->cols; j++) {
            size_t at = r * o->cols + j;
            stats_visit(s, g, p->rows[r], j, f->ref_r[at], f->lp_r[at], f->hp_r ? f->hp_r[at] : 0,
                        seg_of ? seg_of[p->rows[r]] : 0);
        }
    for (size_t i = 0; i < o->rows && p->nc; i++)
        if (!p->row_in[i])
            for (size_t c = 0; c < p->nc; c++) {
                size_t at = i * p->nc + c;
                stats_visit(s, g, i, p->cols[c], f->ref_c[at], f->lp_c[at], f->hp_c ? f->hp_c[at] : 0,
                            seg_of ? seg_of[i] : 0);
            }
    free(seg_of);
    for (size_t k = 0; k < o->rows * o->cols; k++) {
        if (isnan(g->out[k])) s->nan_out++;
        else if (isinf(g->out[k])) s->inf_out++;
    }
    double nf = s->n_finite ? (double)s->n_finite : 1.0, nl = (double)(s->n ? s->n : 1);
    s->mean_err = s->sum_err / nf;
    s->sd_err = sqrt(fmax(0.0, s->sum_err2 / nf - s->mean_err * s->mean_err));
    s->mean_lp_err = s->sum_lp_err / nl;
    s->rms_lp_err = sqrt(s->sum_lp_err2 / nl);
    s->rms_ref = sqrt(s->sum_ref2 / (double)(s->n_nz ? s->n_nz : 1));
    s->rel_l2 = s->sum_ref2 > 0 ? sqrt(s->sum_err2 / s->sum_ref2) : (s->sum_err2 > 0 ? INFINITY : 0);
    s->cosine = s->sum_out2 > 0 && s->sum_ref2 > 0 ? s->sum_out_ref / sqrt(s->sum_out2 * s->sum_ref2) : 0;
    s->snr_db = snr_db(s->sum_ref2, s->sum_err2);
    s->lp_snr_db = snr_db(s->sum_ref2, s->sum_lp_err2);
    s->hp_snr_db = g->f->hp_r ? snr_db(s->sum_hp2, s->sum_hp_err2) : NAN;
    /* The spread of a mean of n errors: sd/sqrt(n), with sd at least the
     * same-precision reference's rms error (so few elements cannot make it 0). */
    s->bias_limit = 6.0 * fmax(s->sd_err, s->rms_lp_err) / sqrt(nf) + 2.0 * fabs(s->mean_lp_err);
    stats_worst(s, g);
}

/* A gate's verdict: pass, the measured value and the limit it was held to,
 * and one line of detail. */
struct verdict { int pass; double value, limit; char detail[400]; };

typedef void (*gate_fn)(const struct stats *, const struct gate_in *, struct verdict *);

/* A gate that does not apply to this output: passes, shows "-". */
static void not_gated(struct verdict *v, const char *why)
{
    v->pass = 1, v->value = NAN, v->limit = 0;
    snprintf(v->detail, sizeof v->detail, "%s", why);
}

#define Q_ONLY "applies to low-precision (quantized) products"
#define Q_REPLACED "low precision: the snr and baseline gates replace element tolerances"

/* allclose: every checked element within atol + rtol|ref| (catches a wrong
 * element, row or tile). */
static void gate_allclose(const struct stats *s, const struct gate_in *g, struct verdict *v)
{
    if (g->q_gate > 0) { not_gated(v, Q_REPLACED); return; }
    v->value = s->close_worst, v->limit = 1.0, v->pass = s->close_fail == 0;
    snprintf(v->detail, sizeof v->detail,
             "%zu of %zu checked elements outside atol %.3g + rtol %.3g*|ref|; worst at (%zu,%zu): "
             "out %.6g ref %.6g",
             s->close_fail, s->n, g->atol, g->rtol, s->cw_i, s->cw_j, s->cw_out, s->cw_ref);
}

/* same precision: max|out-ref| <= 2 max|lp-ref| + floor (catches error beyond
 * what the kernel's precision explains). */
static void gate_same_precision(const struct stats *s, const struct gate_in *g, struct verdict *v)
{
    if (g->q_gate > 0) { not_gated(v, Q_REPLACED); return; }
    v->value = s->max_err, v->limit = 2.0 * s->max_lp_err + s->floor;
    v->pass = s->max_err <= v->limit;
    snprintf(v->detail, sizeof v->detail,
             "max|out-ref| %.4g vs 2 x max|lp-ref| %.4g + floor %.4g (lp: the same arithmetic "
             "in %s on the CPU)",
             s->max_err, s->max_lp_err, s->floor, DTYPES[g->t].name);
}

/* NaN/inf: the output has the reference's counts on the checked elements
 * (usually none), and none elsewhere when the reference has none. */
static void gate_nan_inf(const struct stats *s, const struct gate_in *g, struct verdict *v)
{
    (void)g;
    size_t want = s->nan_ref + s->inf_ref, got = s->nan_out + s->inf_out;
    v->value = (double)got, v->limit = (double)want;
    v->pass = s->nan_out_checked == s->nan_ref && s->inf_out_checked == s->inf_ref && (want > 0 || got == 0);
    snprintf(v->detail, sizeof v->detail, "output has %zu NaN and %zu inf (%zu and %zu on checked elements); "
             "reference %zu and %zu", s->nan_out, s->inf_out, s->nan_out_checked, s->inf_out_checked,
             s->nan_ref, s->inf_ref);
}

/* written: no element still holds the poison bytes (catches outputs the
 * kernel never wrote). */
static void gate_written(const struct stats *s, const struct gate_in *g, struct verdict *v)
{
    (void)s;
    v->value = (double)g->unwritten, v->limit = 0, v->pass = g->unwritten == 0;
    snprintf(v->detail, sizeof v->detail,
             "%zu of %zu output elements still hold the poison bytes written before the launch",
             g->unwritten, g->o->rows * g->o->cols);
}

/* nontrivial: the reference's nonzero elements are well above atol and no
 * input is all zero (catches cases a kernel returning zeros would pass). */
static void gate_nontrivial(const struct stats *s, const struct gate_in *g, struct verdict *v)
{
    v->value = s->rms_ref, v->limit = 10.0 * g->atol_base;   /* not scaled by the rms itself */
    v->pass = g->inputs_nonzero && s->n_nz > 0 && s->rms_ref > v->limit;
    if (g->inputs_nonzero && s->n > 0 && s->n_nz == 0 && s->n_finite == s->n) {
        v->pass = 1;   /* the truth is zero: tile and group gates hold the output to it */
        snprintf(v->detail, sizeof v->detail, "the reference is exactly zero on all %zu checked elements (e.g. "
                 "the gradient of a softmax over one key): the tile and group gates hold the output to it", s->n);
        return;
    }
    snprintf(v->detail, sizeof v->detail,
             "reference rms %.4g (over its %zu nonzero checked elements) must exceed 10 x atol = %.4g%s, or "
             "a kernel returning zeros could pass", s->rms_ref, s->n_nz, v->limit,
             g->inputs_nonzero ? "" : " and inputs must be nonzero");
}

/* in bounds: the guard bands around the output still hold the poison bytes
 * (catches a kernel writing past the end or before the start). */
static void gate_in_bounds(const struct stats *s, const struct gate_in *g, struct verdict *v)
{
    (void)s;
    v->value = (double)g->outside, v->limit = 0, v->pass = g->outside == 0;
    snprintf(v->detail, sizeof v->detail, "%zu bytes of the %zu-byte guard bands before and after the "
             "output were written", g->outside, 2 * g->o->guard);
}

/* bias: the mean signed error within 6 spreads of the mean (catches a small
 * systematic error hiding under every element tolerance). */
static void gate_bias(const struct stats *s, const struct gate_in *g, struct verdict *v)
{
    (void)g;
    v->value = fabs(s->mean_err), v->limit = s->bias_limit;
    v->pass = fabs(s->mean_err) <= s->bias_limit;
    snprintf(v->detail, sizeof v->detail,
             "mean signed error %.4g vs limit %.4g = 6 x max(sd %.4g, lp rms %.4g) / sqrt(%zu) + "
             "2 x |lp mean error| %.4g",
             s->mean_err, s->bias_limit, s->sd_err, s->rms_lp_err, s->n_finite, fabs(s->mean_lp_err));
}

/* worst tile: every tile near the same-precision reference's SNR on it
 * (catches one bad tile that global metrics average away). */
static void gate_worst_tile(const struct stats *s, const struct gate_in *g, struct verdict *v)
{
    if (s->worst_tile < 0) {
        v->pass = 1, v->value = NAN, v->limit = 0;
        snprintf(v->detail, sizeof v->detail, "no tile has %d checked elements; element gates cover it",
                 TILE_MIN_CHECKED);
        return;
    }
    size_t ti = (size_t)s->worst_tile / s->tc, tj = (size_t)s->worst_tile % s->tc;
    size_t r1 = (ti + 1) * KG_TILE < g->o->rows ? (ti + 1) * KG_TILE : g->o->rows;
    size_t c1 = (tj + 1) * KG_TILE < g->o->cols ? (tj + 1) * KG_TILE : g->o->cols;
    v->value = s->worst_tile_snr, v->limit = s->worst_tile_need;
    v->pass = s->worst_tile_snr >= s->worst_tile_need;
    char why[160];
    snprintf(why, sizeof why, "same-precision reference on that tile, capped at %.0f, minus %.0f",
             DTYPES[g->t].tile_snr_cap, TILE_SNR_SLACK_DB);
    if (g->q_gate > 0 && g->trades) snprintf(why, sizeof why, "the %s SNR gate; --trades-precision", QFMTS[g->q->f].name);
    else if (g->q_gate > 0) snprintf(why + strlen(why), sizeof why - strlen(why), ", at least the %s SNR gate",
                                     QFMTS[g->q->f].name);
    snprintf(v->detail, sizeof v->detail, "worst tile (%zu,%zu), rows %zu..%zu cols %zu..%zu: SNR %.1f dB, needs "
             "%.1f dB (%s)", ti, tj, ti * KG_TILE, r1 - 1, tj * KG_TILE, c1 - 1, s->worst_tile_snr,
             s->worst_tile_need, why);
}

/* group: every group (sequence) near the same-precision reference's SNR on
 * it, as for tiles; a group whose reference is all zero (an empty group's
 * dB) must be exactly zero (catches one group computed wrong, or garbage
 * where nothing should be). */
static void gate_group(const struct stats *s, const struct gate_in *g, struct verdict *v)
{
    const struct output *o = g->o;
    if (s->worst_seg < 0) {
        v->pass = 1, v->value = NAN, v->limit = 0;
        snprintf(v->detail, sizeof v->detail, "the output has no groups or sequences");
        return;
    }
    size_t k = (size_t)s->worst_seg;
    const struct acc *a = &s->segs[k];
    v->value = s->worst_seg_snr, v->limit = s->worst_seg_need;
    v->pass = !(s->worst_seg_snr < s->worst_seg_need);
    char where[96], what[128];
    snprintf(where, sizeof where, "worst %s %zu of %zu, rows %u..%u", o->seg_name, k, o->nseg, o->seg[k],
             o->seg[k + 1] - 1);
    if (a->ref2 == 0 && a->lperr2 == 0)
        snprintf(what, sizeof what, "its reference is exactly zero, and so must the output be");
    else if (a->ref2 == 0)
        snprintf(what, sizeof what, "its reference is exactly zero: error energy %.1f dB below lp's, needs %.1f",
                 s->worst_seg_snr, s->worst_seg_need);
    else
        snprintf(what, sizeof what, "SNR %.1f dB, needs %.1f dB", s->worst_seg_snr, s->worst_seg_need);
    snprintf(v->detail, sizeof v->detail, "%s: %s; its largest error %.4g at (%zu,%zu), tile (%zu,%zu)", where,
             what, a->max_err, a->wi, a->wj, a->wi / KG_TILE, a->wj / KG_TILE);
}

/* determinism: with --repeat N, every run bitwise equal to the first, or,
 * for kernels that declare atomics, every run passing the gates (catches a
 * race: an output that moves between runs). */
static void gate_determinism(const struct stats *s, const struct gate_in *g, struct verdict *v)
{
    (void)s;
    const struct repeat *r = g->rep;
    v->limit = 0;
    if (!r || r->runs < 2) {
        v->pass = 1, v->value = NAN;
        snprintf(v->detail, sizeof v->detail, "not repeated (--repeat N compares N runs)");
        return;
    }
    v->value = r->runs;
    v->pass = !r->diff_run && !r->gated_fail_run;
    if (r->atomics)
        snprintf(v->detail, sizeof v->detail, "the kernel declares atomics: each of %d runs held to the gates; "
                 "run %d failed them", r->runs, r->gated_fail_run);
    else
        snprintf(v->detail, sizeof v->detail, "run %d of %d differs from run 1 first at element (%zu,%zu): "
                 "%.9g vs %.9g", r->diff_run, r->runs, r->diff_row, r->diff_col, r->other, r->first);
}

/* snr: low precision, SNR against the reference on the same quantized
 * inputs at least the format's gate: E4M3 25, E5M2 20, FP4 10 dB (catches a
 * product computed wrong, where element tolerances mean nothing). */
static void gate_snr(const struct stats *s, const struct gate_in *g, struct verdict *v)
{
    if (!g->q_gate) { not_gated(v, Q_ONLY); return; }
    v->value = s->snr_db, v->limit = g->q_gate, v->pass = s->snr_db >= g->q_gate;
    snprintf(v->detail, sizeof v->detail, "SNR %.1f dB against the double product of the same quantized "
             "inputs and scales; %s needs %.0f dB", s->snr_db, QFMTS[g->q->f].name, g->q_gate);
}

#define BASELINE_SLACK_DB 3.0   /* a candidate may be this much below the reference arm's SNR */
#define BASELINE_CAP_DB 120.0   /* ... whose SNR counts up to this */

/* baseline: low precision, SNR no more than 3 dB below the reference
 * arm's on the same shapes (ref.c's same-precision product: fp32 block
 * sums in the kernels' order, output rounded), unless the run declares
 * --trades-precision (catches a kernel that loses precision, e.g. a narrow
 * accumulator, while staying above the format's gate). */
static void gate_baseline(const struct stats *s, const struct gate_in *g, struct verdict *v)
{
    if (!g->q_gate) { not_gated(v, Q_ONLY); return; }
    double base = s->lp_snr_db < BASELINE_CAP_DB ? s->lp_snr_db : BASELINE_CAP_DB;
    v->value = s->snr_db - base, v->limit = -BASELINE_SLACK_DB;
    v->pass = v->value >= v->limit || g->trades;
    snprintf(v->detail, sizeof v->detail, "SNR %.1f dB vs the reference arm's %.1f dB (ref.c, the kernels' "
             "order in fp32; counted up to %.0f): %.1f dB apart, at most %.0f below%s%s", s->snr_db,
             s->lp_snr_db, BASELINE_CAP_DB, v->value, BASELINE_SLACK_DB,
             g->trades ? "; waived: --trades-precision " : "", g->trades ? g->trades : "");
}

/* The quantize-only stage's mismatches of one kind over both operands, and
 * the first one's line. */
static size_t q_stage_bad(const struct qrun *q, int scale, const char **at)
{
    size_t n = 0;
    *at = "";
    for (int i = 1; i >= 0; i--) {
        size_t k = scale ? q->st[i].scale_bad : q->st[i].code_bad;
        if (k) *at = scale ? q->st[i].scale_at : q->st[i].code_at;
        n += k;
    }
    return n;
}

/* scale (which = 1) or conversion (0): the quantize-only stage's
 * mismatches against ref.c; fails when the stage did not run. */
static void gate_qstage(const struct gate_in *g, struct verdict *v, int which)
{
    if (!g->q_gate) { not_gated(v, Q_ONLY); return; }
    const struct qrun *q = g->q;
    const char *at;
    v->value = (double)q_stage_bad(q, which, &at), v->limit = 0, v->pass = q->stage_done && v->value == 0;
    if (!q->stage_done)
        snprintf(v->detail, sizeof v->detail, "the quantize-only stage did not run: nothing was compared");
    else if (which)
        snprintf(v->detail, sizeof v->detail, "%.0f of %zu scales of the quantize-only kernel differ from ref.c's%s%s",
                 v->value, q->op[0].nblocks + q->op[1].nblocks, *at ? "; first: " : "", at);
    else
        snprintf(v->detail, sizeof v->detail, "%.0f codes of the quantize-only kernel differ from ref.c's%s%s",
                 v->value, *at ? "; first: " : "", at);
}

/* scale: low precision, the quantize-only kernel's scales equal ref.c's,
 * bit for bit (catches a wrong amax, rounding of the scale or MX rule). */
static void gate_scale(const struct stats *s, const struct gate_in *g, struct verdict *v)
{
    (void)s;
    gate_qstage(g, v, 1);
}

/* conversion: low precision, the quantize-only kernel's codes equal
 * ref.c's (round to nearest even from the exact fp32 value, saturating). */
static void gate_conversion(const struct stats *s, const struct gate_in *g, struct verdict *v)
{
    (void)s;
    gate_qstage(g, v, 0);
}

/* How a gate's column shows its verdict ("-" for a NaN value: not gated). */
enum gate_fmt {
    SHOW_RATIO,   /* value / limit: <= 1 passes */
    SHOW_COUNT,   /* a count */
    SHOW_VALUE,   /* the value itself */
    SHOW_DB,      /* decibels; +inf is "exact" */
};

/* The gates, in the order they are printed. */
struct gate { const char *name, *column; enum gate_fmt show; gate_fn eval; };
static const struct gate GATES[] = {
    { "allclose", "allclose", SHOW_RATIO, gate_allclose },
    { "same-precision", "same-prec", SHOW_RATIO, gate_same_precision },
    { "nan-inf", "nan/inf", SHOW_COUNT, gate_nan_inf },
    { "written", "unwritten", SHOW_COUNT, gate_written },
    { "in-bounds", "oob", SHOW_COUNT, gate_in_bounds },
    { "nontrivial", "ref-rms", SHOW_VALUE, gate_nontrivial },
    { "bias", "bias", SHOW_RATIO, gate_bias },
    { "snr", "snr-gate", SHOW_DB, gate_snr },
    { "baseline", "vs-base", SHOW_DB, gate_baseline },
    { "scale", "scale", SHOW_COUNT, gate_scale },
    { "conversion", "convert", SHOW_COUNT, gate_conversion },
    { "worst-tile", "tile-dB", SHOW_DB, gate_worst_tile },
    { "group", "group-dB", SHOW_DB, gate_group },
    { "determinism", "repeat", SHOW_COUNT, gate_determinism },
};
#define N_GATES (sizeof GATES / sizeof *GATES)

/* The index of the gate named `name` in GATES. */
static int gate_index(const char *name)
{
    for (size_t g = 0; g < N_GATES; g++)
        if (strcmp(GATES[g].name, name) == 0) return (int)g;
    die(EXIT_DEVICE, "internal: no gate %s", name);
}

/* ===== Timer ===== */

/* What the timer knows of one launch of one arm (notes/timing.md: median,
 * spread, n, the SM clock per sample, throttled samples flagged). */
struct timing {
    int n;                        /* samples kept (throttled ones are not) */
    int throttled;                /* samples taken below 75% of the device's SM clock, dropped */
    int clock_n;                  /* samples with an SM clock reading */
    double median_us, min_us, max_us, q1_us, q3_us;
    double rse;                   /* relative standard error of the median */
    double clock_mhz, clock_min_mhz; /* median and lowest SM clock over the samples */
};

#define TIMER_MAX_SAMPLES 2000
#define TIMER_MIN_SAMPLES_GPU 20
#define TIMER_MIN_SAMPLES_CPU 3
#define TIMER_RSE_GPU 0.002       /* stop once the median is known to 0.2%... */
#define TIMER_RSE_CPU 0.01        /* (CPU: or once 0.25 s of candidate time is sampled) */
#define TIMER_CPU_ENOUGH_MS 250.0
#define TIMER_CAP_S 3.0           /* ...or this much wall time has passed (n >= 3; CPU n >= 1) */
#define TIMER_HARD_CAP_S 20.0     /* ...or this much, whatever n */
#define TIMER_WARMUP_S 0.05       /* GPU warm-up by time, before the first sample */
#define TIMER_THROTTLED 0.75      /* a sample below this fraction of the device's clock */
#define TIMER_MAX_ARMS 3

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of n sorted values. */
static double sorted_median(const double *x, int n)
{
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

/* The relative standard error of the median of n sorted samples, without
 * assuming a distribution: half the width of the order statistics that
 * bracket the median with 95% confidence (ranks n/2 -+ 0.98 sqrt(n)),
 * divided by 1.96 and by the median.  1 (unknown) below 3 samples. */
static double median_rse(const double *x, int n)
{
    if (n < 3) return 1;
    double h = 0.98 * sqrt((double)n);
    int lo = (int)floor(n / 2.0 - h), hi = (int)ceil(n / 2.0 + h);
    if (lo < 0) lo = 0;
    if (hi > n - 1) hi = n - 1;
    double med = sorted_median(x, n);
    return med > 0 ? (x[hi] - x[lo]) / (2 * 1.96) / med : 1;
}

/* Fill every output that launch o computes, guard bands included, with the
 * poison bytes 0xff (queued on the device's stream). */
static void poison_launch(struct run *r, int o)
{
    for (int k = 0; k < r->nout; k++) {
        const struct output *p = &r->out[k];
        if (p->launch == o) dev_fill(r->d, p->buf - p->guard, 0xff, p->elems * DTYPES[p->dt].bytes + 2 * p->guard);
    }
}

/* The clock probe kg_clock of the current arm, or NULL when its code object
 * has none (it is optional in a --kernels file). */
static void *clock_probe(struct device *d)
{
    void *fn = NULL;
    if (d->kind == DEV_CPU || d->rt.module_fn(&fn, d->module, "kg_clock") != 0) return NULL;
    return fn;
}

/* One sample of launch o: L2 flushed and its outputs poisoned (both queued
 * before the start event, so outside the timed window), then the launch
 * between two device events (GPU) or two clock reads (CPU).  On the GPU the
 * clock probe `probe` (if any) then writes the SM clock into
 * d->clock_buf[2*slot], after the stop event.  Milliseconds. */
static double time_one(struct run *r, int o, unsigned char flush_byte, void *probe, int slot)
{
    struct device *d = r->d;
    dev_fill(d, d->flush, flush_byte, d->flush_bytes);
    poison_launch(r, o);
    if (d->kind == DEV_CPU) {
        double t0 = now_s();
        r->c->op->launch(r, o);
        return (now_s() - t0) * 1e3;
    }
    float ms = 0;
    gpu_check(d, d->rt.event_record(d->ev[0], d->stream), "recording a timer event");
    r->c->op->launch(r, o);
    gpu_check(d, d->rt.event_record(d->ev[1], d->stream), "recording a timer event");
    if (probe && slot >= 0) {
        uint64_t at = d->clock_buf + (uint64_t)slot * 2 * sizeof(uint64_t);
        void *params[] = { &at };
        gpu_check(d, d->rt.launch(probe, 1, 1, 1, 32, 1, 1, 0, d->stream, params, NULL), "launching kg_clock");
    }
    gpu_check(d, d->rt.event_sync(d->ev[1]), "running the kernel (timer event)");
    gpu_check(d, d->rt.event_elapsed(&ms, d->ev[0], d->ev[1]), "reading a timer event");
    return ms;
}

/* Events and the clock buffer, made on first use. */
static void timer_init(struct device *d)
{
    if (d->kind != DEV_GPU || d->ev[0]) return;
    for (int i = 0; i < 2; i++) gpu_check(d, d->rt.event_create(&d->ev[i], 0), "creating an event");
    d->clock_buf = dev_alloc(d, (size_t)TIMER_MAX_ARMS * TIMER_MAX_SAMPLES * 2 * sizeof(uint64_t));
}

/* The samples of one arm during one measurement. */
struct samples { double ms[TIMER_MAX_SAMPLES], mhz[TIMER_MAX_SAMPLES]; int n; void *probe; };

/* Summarise n samples into t: throttled samples (SM clock below
 * TIMER_THROTTLED of the device's) are counted and dropped, unless every
 * sample is throttled; then median, quartiles, min, max, RSE, clock. */
static void timing_summary(const struct device *d, const struct samples *s, struct timing *t)
{
    static double keep[TIMER_MAX_SAMPLES], clk[TIMER_MAX_SAMPLES];
    double floor_mhz = TIMER_THROTTLED * d->attr[AT_CLOCK_KHZ] / 1000.0;
    int n = 0, nc = 0;
    memset(t, 0, sizeof *t);
    for (int i = 0; i < s->n; i++) {
        if (s->mhz[i] > 0) clk[nc++] = s->mhz[i];
        if (s->mhz[i] > 0 && floor_mhz > 0 && s->mhz[i] < floor_mhz) t->throttled++;
        else keep[n++] = s->ms[i];
    }
    if (n == 0) {   /* all throttled: keep them, the count says so */
        for (int i = 0; i < s->n; i++) keep[i] = s->ms[i];
        n = s->n;
    }
    qsort(keep, (size_t)n, sizeof *keep, cmp_double);
    t->n = n;
    t->min_us = keep[0] * 1e3, t->max_us = keep[n - 1] * 1e3;
    t->median_us = sorted_median(keep, n) * 1e3;
    t->q1_us = keep[n / 4] * 1e3, t->q3_us = keep[(3 * n) / 4 < n ? (3 * n) / 4 : n - 1] * 1e3;
    t->rse = median_rse(keep, n);
    t->clock_n = nc;
    if (nc) {
        qsort(clk, (size_t)nc, sizeof *clk, cmp_double);
        t->clock_mhz = sorted_median(clk, nc), t->clock_min_mhz = clk[0];
    }
}

/* Whether every arm's median is known well enough to stop: at least the
 * minimum samples and an RSE of the median at most the target (on the CPU,
 * also enough once 0.25 s of candidate time is sampled).  Throttled samples
 * count here: the SM clock is read back only after sampling. */
static int timer_converged(const struct device *d, struct samples *s, int narms)
{
    static double tmp[TIMER_MAX_SAMPLES];
    int gpu = d->kind == DEV_GPU;
    for (int a = 0; a < narms; a++) {
        if (s[a].n < (gpu ? TIMER_MIN_SAMPLES_GPU : TIMER_MIN_SAMPLES_CPU)) return 0;
        double sum_ms = 0;
        for (int i = 0; i < s[a].n; i++) sum_ms += s[a].ms[i];
        if (!gpu && sum_ms >= TIMER_CPU_ENOUGH_MS) continue;   /* the CPU candidate's time is not the point */
        memcpy(tmp, s[a].ms, (size_t)s[a].n * sizeof *tmp);
        qsort(tmp, (size_t)s[a].n, sizeof *tmp, cmp_double);
        if (median_rse(tmp, s[a].n) > (gpu ? TIMER_RSE_GPU : TIMER_RSE_CPU)) return 0;
    }
    return 1;
}

/* Read back the SM clock of every sample (MHz = cycles / ns * 1000). */
static void timer_read_clocks(struct device *d, struct samples *s, int narms)
{
    if (d->kind != DEV_GPU) return;
    static uint64_t buf[TIMER_MAX_ARMS * TIMER_MAX_SAMPLES * 2];
    dev_download(d, buf, d->clock_buf, sizeof buf);
    for (int a = 0; a < narms; a++)
        for (int i = 0; i < s[a].n; i++) {
            const uint64_t *c = &buf[((size_t)a * TIMER_MAX_SAMPLES + (size_t)i) * 2];
            s[a].mhz[i] = s[a].probe && c[1] ? 1e3 * (double)c[0] / (double)c[1] : 0;
        }
}

/* Time launch o of each of the narms arms, interleaved (arm `first`, then
 * the next, ... A B A B ...), after a warm-up by time: samples until every
 * arm's median is known to the target RSE, or the wall-time cap is hit.
 * t[a] gets arm a's summary.  The outputs are left holding the last timed
 * launch's result, of the last arm timed. */
static void time_arms(struct run *r, int o, struct arm **arms, int narms, int first, struct timing *t)
{
    struct device *d = r->d;
    static struct samples s[TIMER_MAX_ARMS];
    timer_init(d);
    double start = now_s();
    for (int a = 0; a < narms; a++) {
        s[a].n = 0;
        arm_use(d, arms[a]);
        s[a].probe = clock_probe(d);
    }
    if (d->kind == DEV_GPU)
        for (int i = 0; i < 2 || now_s() - start < TIMER_WARMUP_S; i++) {
            arm_use(d, arms[i % narms]);
            time_one(r, o, 0, NULL, -1);
        }
    int cap_n = d->kind == DEV_GPU ? 3 : 1;   /* the CPU candidate's time is not the point */
    start = now_s();
    for (int i = 0; s[0].n < TIMER_MAX_SAMPLES; i++) {
        for (int j = 0; j < narms; j++) {
            int a = (first + j) % narms;
            arm_use(d, arms[a]);
            int slot = a * TIMER_MAX_SAMPLES + s[a].n;
            s[a].ms[s[a].n] = time_one(r, o, (unsigned char)(i + 1), s[a].probe, slot);
            s[a].n++;
        }
        double wall = now_s() - start;
        if ((i % 4 == 3 && timer_converged(d, s, narms)) || (s[0].n >= cap_n && wall >= TIMER_CAP_S) ||
            wall >= TIMER_HARD_CAP_S)
            break;
    }
    timer_read_clocks(d, s, narms);
    for (int a = 0; a < narms; a++) timing_summary(d, &s[a], &t[a]);
}

/* One measurement of several arms as rounds merge into one summary per arm:
 * the median of the round medians (and of the round quartiles), the lowest
 * min, the highest max, the samples summed, the largest round RSE. */
static void timing_merge(const struct timing *rounds, int nr, struct timing *t)
{
    double med[100], q1[100], q3[100], clk[100];
    memset(t, 0, sizeof *t);
    t->min_us = INFINITY, t->clock_min_mhz = INFINITY;
    int nc = 0;
    for (int i = 0; i < nr; i++) {
        med[i] = rounds[i].median_us, q1[i] = rounds[i].q1_us, q3[i] = rounds[i].q3_us;
        t->n += rounds[i].n, t->throttled += rounds[i].throttled, t->clock_n += rounds[i].clock_n;
        t->min_us = fmin(t->min_us, rounds[i].min_us), t->max_us = fmax(t->max_us, rounds[i].max_us);
        if (rounds[i].clock_n) clk[nc++] = rounds[i].clock_mhz, t->clock_min_mhz = fmin(t->clock_min_mhz, rounds[i].clock_min_mhz);
    }
    qsort(med, (size_t)nr, sizeof *med, cmp_double);
    qsort(q1, (size_t)nr, sizeof *q1, cmp_double);
    qsort(q3, (size_t)nr, sizeof *q3, cmp_double);
    t->median_us = sorted_median(med, nr), t->q1_us = sorted_median(q1, nr), t->q3_us = sorted_median(q3, nr);
    for (int i = 0; i < nr; i++) t->rse = fmax(t->rse, rounds[i].rse);   /* every round's median is this good */
    if (nc) qsort(clk, (size_t)nc, sizeof *clk, cmp_double), t->clock_mhz = sorted_median(clk, nc);
    else t->clock_min_mhz = 0;
}

/* ===== Report ===== */

/* Everything known about one output of one case. */
struct result {
    struct plan plan;
    struct refs refs;
    struct stats s;
    struct verdict v[N_GATES];
    int pass;                     /* every gate passed (on the last check made) */
    const char *failed_when;      /* "check" or "re-check after timing" */
    struct repeat rep;            /* what --repeat found */
    double atol;                  /* the allclose atol it is held to */
    int timed;                    /* on a launch's owner: its time is known */
    struct timing t;
    double tflops, pct_peak;      /* pct_peak < 0: peak not known */
};

/* Tallies of a whole command, for the last line and the exit code. */
struct tally { int cases, cases_failed, cases_skipped, outputs, outputs_failed, isa_failed; };

static void print_machine(FILE *f, const struct device *d)
{
    fprintf(f, "kgate %s\n", KGATE_VERSION);
    fprintf(f, "  %-12s %s\n", "device:", d->name);
    if (d->kind == DEV_CPU) {
        fprintf(f, "  %-12s cpu (ref.c candidate on %d threads; not a GPU kernel)\n", "arch:",
                d->attr[AT_SMS]);
    } else {
        fprintf(f, "  %-12s %s (%s %d.%d)\n", "arch:", d->arch, PF_NAME[d->pf],
                d->attr[AT_CC_MAJOR], d->attr[AT_CC_MINOR]);
        fprintf(f, "  %-12s %d SMs/CUs, clock %d MHz, memory clock %d MHz, bus %d bits\n",
                "compute:", d->attr[AT_SMS], d->attr[AT_CLOCK_KHZ] / 1000,
                d->attr[AT_MEM_CLOCK_KHZ] / 1000, d->attr[AT_BUS_BITS]);
        if (d->pf == PF_CUDA)
            fprintf(f, "  %-12s CUDA driver API %d.%d, compiler %s\n", "software:",
                    d->driver_version / 1000, d->driver_version % 1000 / 10, d->compiler);
        else
            fprintf(f, "  %-12s HIP driver %d, compiler %s\n", "software:", d->driver_version, d->compiler);
    }
    fprintf(f, "  %-12s %.1f GiB, L2 %.1f MiB, flush buffer %s\n", "memory:",
            d->mem_bytes / 1073741824.0, d->attr[AT_L2_BYTES] / 1048576.0, d->flush_note);
    if (d->peak_f32 > 0)
        fprintf(f, "  %-12s fp32 %.1f TFLOP/s, fp16/bf16 matrix %.1f TFLOP/s (SMs x clock x "
                "per-clock rate of %s)\n", "peak:", d->peak_f32 / 1e12, d->peak_mma16 / 1e12,
                d->arch_base);
    else
        fprintf(f, "  %-12s not known for %s: %% of peak is not printed\n", "peak:", d->arch_base);
}

static int LABEL_W = 40;   /* the case column: the longest label of the command's cases */

static void print_header(void)
{
    printf("%-*s %-3s %-7s", LABEL_W, "case", "out", "verdict");
    for (size_t g = 0; g < N_GATES; g++) printf(" %9s", GATES[g].column);
    printf(" %7s %7s %8s %10s %10s %10s %4s %9s %6s\n", "snr-dB", "unq-dB", "rel-l2", "median-us", "min-us",
           "max-us", "n", "TFLOP/s", "%peak");
}

/* A gate's value as its column shows it; '!' marks a failed gate. */
static void format_gate(char *buf, size_t n, size_t g, const struct verdict *v)
{
    char mark = v->pass ? ' ' : '!';
    if (isnan(v->value)) { snprintf(buf, n, "-%c", mark); return; }
    switch (GATES[g].show) {
    case SHOW_COUNT: snprintf(buf, n, "%.0f%c", v->value, mark); break;
    case SHOW_VALUE: snprintf(buf, n, "%.3g%c", v->value, mark); break;
    case SHOW_DB:
        if (isfinite(v->value)) snprintf(buf, n, "%.1f%c", v->value, mark);
        else snprintf(buf, n, "%s%c", v->value > 0 ? "exact" : "-inf", mark);
        break;
    case SHOW_RATIO:
        snprintf(buf, n, "%.2f%c", v->limit > 0 ? v->value / v->limit : v->value > 0 ? INFINITY : 0, mark);
        break;
    }
}

/* Which stages of a failed low-precision output are wrong, in pipeline
 * order: "scale", "conversion" (the quantize-only kernel against ref.c), and
 * "kernel math" (the product of ref.c's own quantized inputs and scales
 * fails a gate); each as a line in why[].  Returns how many. */
static int q_stages(const struct result *x, char why[3][256])
{
    int n = 0, g_scale = gate_index("scale"), g_conv = gate_index("conversion");
    if (!x->v[g_scale].pass)
        snprintf(why[n++], 256, "scale: the quantize-only kernel's scales differ from ref.c's");
    if (!x->v[g_conv].pass)
        snprintf(why[n++], 256, "conversion: the quantize-only kernel's codes differ from ref.c's");
    char names[160] = "";
    for (size_t g = 0; g < N_GATES; g++)
        if (!x->v[g].pass && (int)g != g_scale && (int)g != g_conv)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", *names ? ", " : "", GATES[g].name);
    if (*names)
        snprintf(why[n++], 256, "kernel math: the product of ref.c's own quantized inputs and scales fails %s", names);
    return n;
}

/* The waves of one kernel launch on `sms` SMs/CUs: its tiles (its blocks, or
 * the tiles a persistent grid strides over), the tiles one wave holds (sms x
 * blocks per SM, 0 when either is not known; a persistent grid's blocks),
 * tiles / per_wave waves, and the percentage of the last wave's slots that
 * hold a block (100 when the tiles fill every wave; NAN when not known). */
struct waves { uint64_t tiles, per_wave; double waves, last_pct; };

static struct waves geom_waves(const struct kgeom *g, int sms)
{
    uint64_t blocks = (uint64_t)g->grid[0] * g->grid[1] * g->grid[2];
    struct waves w = { g->tiles ? g->tiles : blocks, 0, NAN, NAN };
    if (g->tiles) w.per_wave = blocks;   /* persistent: each block holds one tile at a time */
    else if (g->per_sm > 0 && sms > 0) w.per_wave = (uint64_t)sms * (uint64_t)g->per_sm;
    if (!w.per_wave) return w;
    uint64_t last = w.tiles % w.per_wave ? w.tiles % w.per_wave : w.per_wave;
    w.waves = (double)w.tiles / (double)w.per_wave;
    w.last_pct = 100.0 * (double)last / (double)w.per_wave;
    return w;
}

/* Below a timed output's row, one line per kernel its launch ran (GPU; the
 * CPU prints nothing), as on the H200: "  geometry C: kg_gemm_bf16 1024
 * tiles (32x32x1) x 256 threads; 132 SMs x 4 blocks/SM = 528 per wave; 1.94
 * waves, last wave 94% full".  The percentage is rounded into 1..99 unless the last wave is
 * exactly full, so "100% full" never hides an idle slot. */
static void print_geometry(const struct run *r, int o)
{
    const struct launch_geom *lg = &r->geom[o];
    const char *sm = r->d->pf == PF_HIP ? "CU" : "SM", *name = r->out[o].name;
    int sms = r->d->attr[AT_SMS];
    if (r->d->kind == DEV_CPU) return;
    if (!lg->n) printf("  geometry %s: no kernel launched (empty grid)\n", name);
    for (int i = 0; i < lg->n; i++) {
        const struct kgeom *g = &lg->k[i];
        struct waves w = geom_waves(g, sms);
        double pct = w.last_pct < 100 ? fmin(fmax(w.last_pct, 1), 99) : 100;
        if (g->tiles) {
            printf("  geometry %s: %s %" PRIu64 " tile%s on a persistent grid of %" PRIu64 " blocks x %u threads "
                   "(%d %ss, %d block%s/%s fit%s); %.2f waves, last wave %.0f%% full\n", name, g->name, w.tiles,
                   w.tiles == 1 ? "" : "s", w.per_wave, g->threads, sms, sm, g->per_sm, g->per_sm == 1 ? "" : "s",
                   sm, g->per_sm == 1 ? "s" : "", w.waves, pct);
            continue;
        }
        printf("  geometry %s: %s %" PRIu64 " tile%s (%ux%ux%u) x %u threads; %d %ss", name, g->name, w.tiles,
               w.tiles == 1 ? "" : "s", g->grid[0], g->grid[1], g->grid[2], g->threads, sms, sm);
        if (w.per_wave)
            printf(" x %d blocks/%s = %" PRIu64 " per wave; %.2f waves, last wave %.0f%% full\n", g->per_sm, sm,
                   w.per_wave, w.waves, pct);
        else
            printf(", blocks/%s not known (no answer from the occupancy API): waves not known\n", sm);
    }
}

/* The table row of output o; outputs computed by another output's launch
 * show "with <owner>" where the time would be. */
static void print_row(const struct run *r, int o, const struct result *res)
{
    const struct output *p = &r->out[o];
    const struct result *x = &res[o];
    printf("%-*s %-3s %-7s", LABEL_W, r->c->label, p->name, x->pass ? "pass" : "FAIL");
    for (size_t g = 0; g < N_GATES; g++) {
        char buf[32];
        format_gate(buf, sizeof buf, g, &x->v[g]);
        printf(" %9s", buf);
    }
    printf(" %7.1f", x->s.snr_db);
    if (isnan(x->s.hp_snr_db)) printf(" %7s", "-"); else printf(" %7.1f", x->s.hp_snr_db);
    printf(" %8.2e", x->s.rel_l2);
    if (p->launch != o && res[p->launch].timed) {
        char with[32];
        snprintf(with, sizeof with, "with %s", r->out[p->launch].name);
        printf(" %10s %10s %10s %4s %9s %6s\n", with, "-", "-", "-", "-", "-");
    } else if (x->timed) {
        printf(" %10.1f %10.1f %10.1f %4d %9.2f", x->t.median_us, x->t.min_us, x->t.max_us, x->t.n, x->tflops);
        if (x->pct_peak >= 0) printf(" %6.1f\n", x->pct_peak); else printf(" %6s\n", "-");
    } else {
        printf(" %10s %10s %10s %4s %9s %6s\n", "-", "-", "-", "-", "-", "-");
    }
    if (x->timed) print_geometry(r, o);
    for (size_t g = 0; g < N_GATES; g++)
        if (!x->v[g].pass)
            printf("    FAIL %s (%s): %s\n", GATES[g].name, x->failed_when, x->v[g].detail);
    if (r->q && !x->pass) {
        char why[3][256];
        int n = q_stages(x, why);
        for (int i = 0; i < n; i++) printf("    stage: %s\n", why[i]);
    }
}

/* A number for JSON: null when not finite. */
static void json_num(FILE *f, const char *key, double v, int comma)
{
    if (isfinite(v)) fprintf(f, "\"%s\":%.9g%s", key, v, comma ? "," : "");
    else fprintf(f, "\"%s\":null%s", key, comma ? "," : "");
}

static void json_str(FILE *f, const char *key, const char *s, int comma)
{
    fprintf(f, "\"%s\":\"", key);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20) fprintf(f, "\\u%04x", *s);
        else fputc(*s, f);
    }
    fprintf(f, "\"%s", comma ? "," : "");
}

/* A timed output's "geometry" member for --json (GPU; the CPU adds none):
 * per kernel its launch ran, the numbers print_geometry prints, with null
 * for blocks_per_sm, per_wave, waves and last_wave_pct when not known. */
static void json_geometry(FILE *f, const struct run *r, int o)
{
    const struct launch_geom *lg = &r->geom[o];
    int sms = r->d->attr[AT_SMS];
    if (r->d->kind == DEV_CPU) return;
    fprintf(f, ",\"geometry\":[");
    for (int i = 0; i < lg->n; i++) {
        const struct kgeom *g = &lg->k[i];
        struct waves w = geom_waves(g, sms);
        fprintf(f, "%s{", i ? "," : "");
        json_str(f, "kernel", g->name, 1);
        fprintf(f, "\"grid\":[%u,%u,%u],\"tiles\":%" PRIu64 ",\"persistent\":%s,\"threads\":%u,\"sms\":%d,",
                g->grid[0], g->grid[1], g->grid[2], w.tiles, g->tiles ? "true" : "false", g->threads, sms);
        if (w.per_wave) fprintf(f, "\"blocks_per_sm\":%d,\"per_wave\":%" PRIu64 ",", g->per_sm, w.per_wave);
        else fprintf(f, "\"blocks_per_sm\":null,\"per_wave\":null,");
        json_num(f, "waves", w.waves, 1);
        json_num(f, "last_wave_pct", w.last_pct, 0);
        fprintf(f, "}");
    }
    fprintf(f, "]");
}

static void json_time(FILE *f, const struct run *r, int k, const struct result *x);

/* One output of a case as a JSON object: gates, metrics, worst tile and
 * group, time (or the output whose launch it was timed with) and, on a GPU,
 * the timed launch's geometry. */
static void json_output(FILE *f, const struct run *r, int k, const struct result *res)
{
    const struct output *o = &r->out[k];
    const struct result *x = &res[k];
    fprintf(f, "{");
    json_str(f, "name", o->name, 1);
    json_str(f, "dtype", DTYPES[o->dt].name, 1);
    fprintf(f, "\"rows\":%zu,\"cols\":%zu,\"checked\":%zu,\"full\":%s,", o->rows, o->cols, x->s.n,
           x->plan.full ? "true" : "false");
    json_str(f, "verdict", x->pass ? "pass" : "fail", 1);
    fprintf(f, "\"gates\":{");
    for (size_t g = 0; g < N_GATES; g++) {
        fprintf(f, "%s\"%s\":{\"pass\":%s,", g ? "," : "", GATES[g].name, x->v[g].pass ? "true" : "false");
        json_num(f, "value", x->v[g].value, 1);
        json_num(f, "limit", x->v[g].limit, 0);
        fprintf(f, "}");
    }
    fprintf(f, "},\"metrics\":{");
    json_num(f, "max_abs", x->s.max_err, 1);
    json_num(f, "mean_signed", x->s.mean_err, 1);
    json_num(f, "rel_l2", x->s.rel_l2, 1);
    json_num(f, "cosine", x->s.cosine, 1);
    json_num(f, "snr_db", x->s.snr_db, 0);
    fprintf(f, "}");
    if (r->q) {
        char why[3][256];
        int n = x->pass ? 0 : q_stages(x, why);
        fprintf(f, ",\"quant\":{");
        json_str(f, "format", QFMTS[r->q->f].name, 1);
        json_str(f, "scaling", QSCALING[r->c->scaling], 1);
        if (r->c->mx) json_str(f, "mx_rule", r->c->qrule == QR_MX_UP ? "up" : "spec", 1);
        json_num(f, "snr_vs_unquantised_db", x->s.hp_snr_db, 1);
        json_num(f, "reference_arm_snr_db", x->s.lp_snr_db, 1);
        fprintf(f, "\"stages\":[");
        for (int i = 0; i < n; i++) fprintf(f, "%s\"%.*s\"", i ? "," : "", (int)strcspn(why[i], ":"), why[i]);
        fprintf(f, "]}");
    }
    if (x->s.worst_tile >= 0)
        fprintf(f, ",\"worst_tile\":[%zu,%zu]", (size_t)x->s.worst_tile / x->s.tc,
               (size_t)x->s.worst_tile % x->s.tc);
    if (x->s.worst_seg >= 0) {
        fprintf(f, ",");
        json_str(f, "worst_segment_kind", o->seg_name, 1);
        fprintf(f, "\"worst_segment\":%ld", x->s.worst_seg);
    }
    if (x->rep.runs > 1) fprintf(f, ",\"repeat\":{\"runs\":%d,\"atomics\":%s}", x->rep.runs,
                                x->rep.atomics ? "true" : "false");
    if (o->launch != k && res[o->launch].timed) {
        fprintf(f, ",");
        json_str(f, "timed_with", r->out[o->launch].name, 0);
    }
    json_time(f, r, k, x);
    fprintf(f, "}");
}

/* Output k's time and geometry as JSON members (leading comma), when timed. */
static void json_time(FILE *f, const struct run *r, int k, const struct result *x)
{
    if (x->timed) {
        fprintf(f, ",\"time\":{");
        json_num(f, "median_us", x->t.median_us, 1);
        json_num(f, "q1_us", x->t.q1_us, 1);
        json_num(f, "q3_us", x->t.q3_us, 1);
        json_num(f, "min_us", x->t.min_us, 1);
        json_num(f, "max_us", x->t.max_us, 1);
        fprintf(f, "\"n\":%d,", x->t.n);
        json_num(f, "median_rse", x->t.rse, 1);
        fprintf(f, "\"throttled\":%d,", x->t.throttled);
        json_num(f, "sm_clock_mhz", x->t.clock_n ? x->t.clock_mhz : NAN, 1);
        json_num(f, "sm_clock_min_mhz", x->t.clock_n ? x->t.clock_min_mhz : NAN, 1);
        json_num(f, "tflops", x->tflops, 1);
        json_num(f, "pct_peak", x->pct_peak >= 0 ? x->pct_peak : NAN, 0);
        fprintf(f, "}");
        json_geometry(f, r, k);
    }
}

/* One arm's part in one case. */
struct arm_case {
    struct arm *arm;
    struct result *res;           /* per output */
    int pass;                     /* every gate passed; when cached, the ledger's verdict */
    long cached;                  /* > 0: the ledger line whose verdict is reused (no gates ran) */
    double total_us;              /* the sum of its timed launches' medians */
    struct launch_geom geom[MAX_OUT]; /* GPU, per launch owner: the kernels its last launch ran */
    int isa_checked, isa_pass;    /* --expect: the timed kernels hold the class */
    int gates_pass;               /* the correctness gates alone (pass adds --expect) */
    int gated;                    /* its gates ran in this run (not only reused) */
    int inject_target;            /* --inject plants its fault in this arm */
    char isa_why[512];
};

#define MAX_ROUNDS 100

/* What compare and noise measure: per round, the candidate's and the A/A
 * copy's time over the reference's (arm 0); the band is the A/A half-width,
 * max |copy / reference - 1| over the rounds. */
struct rounds {
    int n;                        /* rounds */
    int cand, copy;               /* arm indexes; -1: none */
    double ratio[MAX_ROUNDS], aa[MAX_ROUNDS];
    double ratio_med, ratio_lo, ratio_hi, aa_med, aa_lo, aa_hi;
    double band;                  /* < 0: not known */
    long band_line;               /* > 0: the band was read from this ledger line */
    const char *verdict;          /* faster, parity, slower; NULL when not compared */
};

/* The JSON fields that name an arm: its name, role, options and identity. */
static void json_arm(FILE *f, const struct arm *a, int comma)
{
    json_str(f, "arm", a->name, 1);
    json_str(f, "role", a->copy ? "aa-copy" : a->candidate ? "candidate" : "reference", 1);
    json_str(f, "source", a->src_name, 1);
    json_str(f, "defines", a->options, 1);
    if (a->diagnostic) fprintf(f, "\"deliverable\":false,");
    json_str(f, "code_sha256", a->code.sha, comma);
}

/* --expect's answer for an arm, as a JSON member (trailing comma). */
static void json_isa(FILE *f, const struct opts *o, const struct arm_case *ac)
{
    if (!ac->isa_checked) return;
    fprintf(f, "\"isa\":{");
    json_str(f, "expect", o->expect, 1);
    fprintf(f, "\"pass\":%s,", ac->isa_pass ? "true" : "false");
    json_str(f, "why", ac->isa_why, 0);
    fprintf(f, "},");
}

/* An arm's verdict on a case: fail, pass (its gates ran in this run) or
 * cached (the ledger's verdict reused). */
static const char *arm_verdict(const struct arm_case *ac)
{
    return !ac->pass ? "fail" : ac->gated ? "pass" : "cached";
}

/* An arm's outputs as a JSON array member (no comma): every gate of each
 * output whose gates ran, else its name and time. */
static void json_arm_outputs(FILE *f, const struct run *r, const struct arm_case *ac)
{
    fprintf(f, "\"outputs\":[");
    for (int k = 0; k < r->nout; k++) {
        if (k) fprintf(f, ",");
        if (ac->gated) {
            json_output(f, r, k, ac->res);
            continue;
        }
        fprintf(f, "{");
        json_str(f, "name", r->out[k].name, 0);
        json_time(f, r, k, &ac->res[k]);
        fprintf(f, "}");
    }
    fprintf(f, "]");
}

/* One case on one arm as one JSON object (no newline). */
static void json_case(FILE *f, const struct run *r, const struct arm_case *ac)
{
    fprintf(f, "{");
    json_str(f, "case", r->c->label, 1);
    json_str(f, "where", r->c->where, 1);
    fprintf(f, "\"seed\":%" PRIu64 ",", r->o->seed);
    json_str(f, "device", r->d->name, 1);
    json_str(f, "arch", r->d->arch, 1);
    json_arm(f, ac->arm, 1);
    if (r->o->why) json_str(f, "why", r->o->why, 1);
    if (r->o->trades_precision) json_str(f, "trades_precision", r->o->trades_precision, 1);
    if (r->o->inject) json_str(f, "inject", r->o->inject, 1);
    if (ac->cached) fprintf(f, "\"cached_from_line\":%ld,", ac->cached);
    json_isa(f, r->o, ac);
    json_str(f, "verdict", arm_verdict(ac), 1);
    json_arm_outputs(f, r, ac);
    fprintf(f, "}");
}

/* The rounds of a compare or noise as JSON fields (trailing comma): for
 * arm a's ledger line, the A/A ratios on the reference's (a = 0) and the
 * ratio and verdict on the candidate's; for a < 0, both.  The band always. */
static void json_rounds(FILE *f, const struct rounds *rd, int a)
{
    fprintf(f, "\"rounds\":%d,", rd->n);
    if (rd->copy >= 0 && a <= 0) {
        json_num(f, "aa_ratio", rd->aa_med, 1);
        json_num(f, "aa_lo", rd->aa_lo, 1);
        json_num(f, "aa_hi", rd->aa_hi, 1);
    }
    if (rd->cand >= 0 && (a < 0 || a == rd->cand)) {
        json_num(f, "ratio", rd->ratio_med, 1);
        json_num(f, "ratio_lo", rd->ratio_lo, 1);
        json_num(f, "ratio_hi", rd->ratio_hi, 1);
        json_str(f, "compare", rd->verdict ? rd->verdict : "none", 1);
    }
    if (rd->band_line > 0) fprintf(f, "\"band_from_line\":%ld,", rd->band_line);
    json_num(f, "band", rd->band >= 0 ? rd->band : NAN, 1);
}

/* The timer's line under a timed row: median, quartiles, min, samples,
 * RSE of the median, the SM clock and throttled samples. */
static void print_timer(const struct device *d, const struct timing *t)
{
    printf("    timer: median %.1f us (IQR %.1f-%.1f, min %.1f), n %d, median RSE %.3f%%", t->median_us, t->q1_us,
           t->q3_us, t->min_us, t->n, 100 * t->rse);
    if (t->clock_n)
        printf(", SM clock %.0f MHz (lowest %.0f), %d throttled sample%s dropped\n", t->clock_mhz,
               t->clock_min_mhz, t->throttled, t->throttled == 1 ? "" : "s");
    else
        printf(", SM clock not read (%s)\n", d->kind == DEV_CPU ? "CPU device" : "the code object has no kg_clock");
}

/* What a compare or noise measured, after the arms' rows. */
static void print_rounds(const struct arm_case *ac, const struct rounds *rd)
{
    if (rd->copy >= 0)
        printf("A/A: %s copy / %s time %.4f (%.4f - %.4f over %d rounds): band +-%.2f%%\n", ac[0].arm->name,
               ac[0].arm->name, rd->aa_med, rd->aa_lo, rd->aa_hi, rd->n, 100 * rd->band);
    if (rd->cand < 0) return;
    char band[96];
    if (rd->band_line > 0) snprintf(band, sizeof band, "band +-%.2f%% (ledger line %ld)", 100 * rd->band, rd->band_line);
    else snprintf(band, sizeof band, "band +-%.2f%% (measured now)", 100 * rd->band);
    printf("compare: %s / %s time %.4f (%.4f - %.4f over %d rounds), %s: %s\n", ac[rd->cand].arm->name,
           ac[0].arm->name, rd->ratio_med, rd->ratio_lo, rd->ratio_hi, rd->n, band, rd->verdict);
}

/* Report a case on its arms: table rows (with an arm header line when
 * there are several, and a timer line under each timed row) and the
 * rounds; or, with --json, one object per arm and one for the rounds. */
static void report_arms(struct run *r, struct arm_case *ac, int narms, const struct rounds *rd, int pass)
{
    const struct opts *o = r->o;
    if (o->quiet) return;
    for (int a = 0; a < narms; a++) {
        r->geom = ac[a].geom;
        if (o->json) {
            json_case(stdout, r, &ac[a]);
            printf("\n");
            continue;
        }
        if (narms > 1 || ac[a].arm->candidate)
            printf("arm %s: %s%s%s, code object %.12s%s\n", ac[a].arm->name, ac[a].arm->src_name,
                   *ac[a].arm->options ? " " : "", ac[a].arm->options, ac[a].arm->code.sha,
                   ac[a].arm->diagnostic ? " (diagnostic: not deliverable)" : "");
        if (ac[a].cached)
            printf("%-*s %-3s %-7s gates' verdict reused from ledger line %ld (same code object, case, seed, device "
                   "and conditions)%s\n", LABEL_W, r->c->label, "-", ac[a].gated || ac[a].gates_pass ? "cached" : "FAIL", ac[a].cached,
                   ac[a].gated ? "; gated again after timing:" : "");
        for (int k = 0; k < r->nout; k++) {
            if (ac[a].gated) print_row(r, k, ac[a].res);
            else if (ac[a].res[k].timed) print_geometry(r, k);
            if (ac[a].res[k].timed) print_timer(r->d, &ac[a].res[k].t);
        }
        if (ac[a].isa_checked)
            printf("    %s isa: expect %s: %s\n", ac[a].isa_pass ? "pass" : "FAIL", o->expect, ac[a].isa_why);
    }
    if (rd && pass && !o->json) print_rounds(ac, rd);
    if (rd && pass && o->json) {
        printf("{");
        json_str(stdout, "case", r->c->label, 1);
        json_rounds(stdout, rd, -1);
        printf("\"arms\":%d}\n", narms);
    }
    fflush(stdout);
}

/* ===== Ledger ===== */

/* The ledger (README "Ledger and budget"): JSON lines, append-only, one per
 * measured arm.  Each line is
 *   {"seq":N,"prev":"<sha256 of line N-1>",<fields>,"line_sha256":"<sha256>"}
 * where line_sha256 hashes the line's text before ',"line_sha256"', and the
 * first line's prev is 64 zeros; `kgate ledger verify` finds any edited,
 * removed, reordered or torn line.  kgate trusts no verdict of a ledger
 * whose chain does not verify.  An append takes an exclusive flock,
 * re-reads and verifies the ledger, re-checks the budget, and writes the
 * new line with one write() on an O_APPEND descriptor, then fsyncs:
 * concurrent runs never interleave, and a process killed at any point
 * leaves whole lines only. */

#define LEDGER_DEFAULT "kgate.ledger"
#define BUDGET_DEFAULT 3
#define LEDGER_ZERO "0000000000000000000000000000000000000000000000000000000000000000"

/* What kgate reads back from one ledger line. */
struct ledger_line {
    long seq;
    char role[16], sha[65], kase[256], arch[64], device[256], verdict[16], arm[64], compare[16];
    char gates[16];               /* the correctness gates' verdict ("" on cached and planted-fault lines) */
    char conditions[512];         /* what the gates were held to (run_conditions) */
    uint64_t seed;
    int deliverable, band_measured;
    double ratio, band, median_us;
};

struct ledger {
    const char *path;
    struct ledger_line *line;
    size_t n, cap;
    int budget;
};

/* The raw text of top-level field `key` of a one-line JSON object into out
 * (a string without its quotes and with \" and \\ undone; a number, true,
 * false, null or a nested value as written).  0 if found. */
static int json_field(const char *s, const char *key, char *out, size_t n)
{
    int depth = 0, in_str = 0;
    size_t klen = strlen(key);
    for (const char *p = s; *p; p++) {
        if (in_str) {
            if (*p == '\\' && p[1]) p++;
            else if (*p == '"') in_str = 0;
            continue;
        }
        if (*p == '{' || *p == '[') { depth++; continue; }
        if (*p == '}' || *p == ']') { depth--; continue; }
        if (*p != '"') continue;
        if (depth == 1 && strncmp(p + 1, key, klen) == 0 && p[1 + klen] == '"' && p[2 + klen] == ':') {
            const char *v = p + 3 + klen;
            size_t o = 0;
            if (*v == '"') {
                for (v++; *v && *v != '"'; v++) {
                    if (*v == '\\' && v[1]) v++;
                    if (o + 1 < n) out[o++] = *v;
                }
            } else {
                int d = 0;
                for (; *v && (d > 0 || (*v != ',' && *v != '}')); v++) {
                    d += (*v == '{' || *v == '[') - (*v == '}' || *v == ']');
                    if (o + 1 < n) out[o++] = *v;
                }
            }
            out[o] = 0;
            return 0;
        }
        in_str = 1;
    }
    return -1;
}

/* A number field of a ledger line; NAN when absent or null. */
static double json_field_num(const char *s, const char *key)
{
    char buf[64];
    return json_field(s, key, buf, sizeof buf) == 0 && strcmp(buf, "null") ? atof(buf) : NAN;
}

/* Parse the fields kgate uses from one ledger line. */
static void ledger_parse(const char *text, struct ledger_line *l)
{
    char buf[32];
    memset(l, 0, sizeof *l);
    double seq = json_field_num(text, "seq");
    l->seq = isnan(seq) ? 0 : (long)seq;
    json_field(text, "gates_verdict", l->gates, sizeof l->gates);
    json_field(text, "conditions", l->conditions, sizeof l->conditions);
    json_field(text, "role", l->role, sizeof l->role);
    json_field(text, "code_sha256", l->sha, sizeof l->sha);
    json_field(text, "case", l->kase, sizeof l->kase);
    json_field(text, "arch", l->arch, sizeof l->arch);
    json_field(text, "device", l->device, sizeof l->device);
    json_field(text, "verdict", l->verdict, sizeof l->verdict);
    json_field(text, "arm", l->arm, sizeof l->arm);
    json_field(text, "compare", l->compare, sizeof l->compare);
    if (json_field(text, "seed", buf, sizeof buf) == 0) l->seed = strtoull(buf, NULL, 10);
    l->deliverable = !(json_field(text, "deliverable", buf, sizeof buf) == 0 && strcmp(buf, "false") == 0);
    l->ratio = json_field_num(text, "ratio");
    l->band = json_field_num(text, "band");
    l->band_measured = json_field(text, "aa_ratio", buf, sizeof buf) == 0 && !isnan(l->band);
    l->median_us = json_field_num(text, "median_us");
}

/* Parse one ledger line (without its newline) into lg's table. */
static void ledger_add(struct ledger *lg, const char *text)
{
    if (lg->n == lg->cap) {
        lg->cap = lg->cap ? 2 * lg->cap : 64;
        lg->line = realloc(lg->line, lg->cap * sizeof *lg->line);
        if (!lg->line) die(EXIT_DEVICE, "out of host memory reading the ledger");
    }
    ledger_parse(text, &lg->line[lg->n++]);
}

/* The ledger file: what `kgate` means by "the ledger" for options o. */
static const char *ledger_path(const struct opts *o) { return o->ledger_path ? o->ledger_path : LEDGER_DEFAULT; }

/* sha256 of n bytes, as hex. */
static void sha256_text(const char *s, size_t n, char out[65])
{
    struct sha256 h;
    sha256_init(&h);
    sha256_update(&h, s, n);
    sha256_hex(&h, out);
}

/* Check one ledger line (without its newline) against the chain: its seq,
 * the hash of the line before (prev_sha), and its own line_sha256.  NULL
 * if it holds, else what is wrong. */
static const char *ledger_line_problem(const char *line, long seq, const char *prev_sha)
{
    static const char marker[] = ",\"line_sha256\":\"";
    char prev[80], self[65], want[65];
    if (strncmp(line, "{\"seq\":", 7) != 0) return "not a ledger line";
    double at = json_field_num(line, "seq");
    if (isnan(at) || at != (double)seq)
        return "its seq is out of order (a line before it was removed, or lines were reordered)";
    if (json_field(line, "prev", prev, sizeof prev) != 0 || strcmp(prev, prev_sha) != 0)
        return "its prev is not the sha256 of the line before (that line was edited, removed or reordered)";
    const char *m = strstr(line, marker);
    size_t len = strlen(line);
    if (!m || len < 2 || strcmp(line + len - 2, "\"}") != 0 || (size_t)(line + len - m) != sizeof marker - 1 + 64 + 2)
        return "its line_sha256 is missing";
    snprintf(self, sizeof self, "%.64s", m + sizeof marker - 1);
    sha256_text(line, (size_t)(m - line), want);
    if (strcmp(self, want) != 0) return "its text does not match its line_sha256 (the line was edited)";
    return NULL;
}

/* Walk the ledger text (len bytes) line by line against the chain (see
 * ledger_line_problem), adding each line to lg when lg is not NULL.
 * Returns 0 if every line holds; else the number of the first line that
 * does not, with *why saying what is wrong (a torn last line and a NUL byte
 * included).  *lines gets the number of lines read, *last_sha the sha256 of
 * the last one (64 zeros for an empty ledger). */
static long ledger_walk(const char *text, size_t len, struct ledger *lg, const char **why, long *lines,
                        char last_sha[65])
{
    long seq = 0;
    snprintf(last_sha, 65, "%s", LEDGER_ZERO);
    for (size_t at = 0; at < len;) {
        const char *p = text + at, *nl = memchr(p, '\n', len - at);
        seq++;
        *lines = seq;
        if (!nl) { *why = "it is torn (the file does not end with a newline)"; return seq; }
        size_t n = (size_t)(nl - p);
        if (memchr(p, 0, n)) { *why = "it holds a NUL byte"; return seq; }
        char *line = xmalloc(n + 1);
        memcpy(line, p, n);
        line[n] = 0;
        *why = ledger_line_problem(line, seq, last_sha);
        if (!*why && lg) ledger_add(lg, line);
        free(line);
        if (*why) return seq;
        sha256_text(p, n, last_sha);
        at += n + 1;
    }
    *lines = seq;
    return 0;
}

/* The whole content of open file fd into a new string; NULL on a read
 * error. */
static char *fd_read_all(int fd, size_t *len)
{
    off_t end = lseek(fd, 0, SEEK_END);
    if (end < 0) return NULL;
    char *s = xmalloc((size_t)end + 1);
    size_t got = 0;
    while (got < (size_t)end) {
        ssize_t r = pread(fd, s + got, (size_t)end - got, (off_t)got);
        if (r <= 0) { free(s); return NULL; }
        got += (size_t)r;
    }
    s[got] = 0;
    *len = got;
    return s;
}

/* The whole ledger file at path, read under a shared lock (so never in the
 * middle of an append); NULL with errno set if it cannot be read. */
static char *ledger_read(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0) return NULL;
    char *text = flock(fd, LOCK_SH) == 0 ? fd_read_all(fd, len) : NULL;
    int err = errno;
    close(fd);
    errno = err;
    return text;
}

/* Read the ledger at lg->path into lg (nothing if the file does not exist
 * yet), every line checked against the chain: exit 2 if it cannot be read
 * or does not verify, for no verdict is taken from a ledger that was
 * edited. */
static void ledger_load(struct ledger *lg)
{
    size_t len = 0;
    char *text = ledger_read(lg->path, &len);
    if (!text && errno == ENOENT) return;
    if (!text) die(EXIT_USAGE, "cannot read the ledger %s: %s", lg->path, strerror(errno));
    const char *why = NULL;
    long lines = 0, bad = ledger_walk(text, len, lg, &why, &lines, (char[65]){ 0 });
    if (bad) die(EXIT_USAGE, "the ledger %s does not verify at line %ld: %s (kgate ledger verify)", lg->path, bad, why);
    free(text);
}

/* Distinct candidate code objects in the ledger (diagnostic ones count);
 * with `sha`, whether that one is among them (*known). */
static int ledger_candidates(const struct ledger *lg, const char *sha, int *known)
{
    int count = 0;
    if (known) *known = 0;
    for (size_t i = 0; i < lg->n; i++) {
        if (strcmp(lg->line[i].role, "candidate") != 0) continue;
        int seen = 0;
        for (size_t j = 0; j < i && !seen; j++)
            seen = strcmp(lg->line[j].role, "candidate") == 0 && strcmp(lg->line[j].sha, lg->line[i].sha) == 0;
        count += !seen;
        if (known && sha && strcmp(lg->line[i].sha, sha) == 0) *known = 1;
    }
    return count;
}

/* The best correct checkpoint: the passing deliverable candidate line with
 * the lowest time ratio, on case `kase` if there is one there (kase may be
 * NULL), else on any case.  NULL if none. */
static const struct ledger_line *ledger_best_line(const struct ledger *lg, const char *kase)
{
    const struct ledger_line *best = NULL;
    for (int pass = 0; pass < 2 && !best; pass++)
        for (size_t i = 0; i < lg->n; i++) {
            const struct ledger_line *l = &lg->line[i];
            if (strcmp(l->role, "candidate") || !l->deliverable || isnan(l->ratio) ||
                (strcmp(l->verdict, "pass") && strcmp(l->verdict, "cached")))
                continue;
            if (pass == 0 && (!kase || strcmp(l->kase, kase))) continue;
            if (!best || l->ratio < best->ratio) best = l;
        }
    return best;
}

/* Where checkpoint b stands against the reference: its time ratio, the
 * verdict against the band, and the gap that remains when it is slower. */
static void checkpoint_standing(const struct ledger_line *b, char *buf, size_t n)
{
    if (strcmp(b->compare, "slower") == 0)
        snprintf(buf, n, "%.4f of the reference's time, slower: a remaining gap of %.1f%%", b->ratio, 100 * (b->ratio - 1));
    else if (strcmp(b->compare, "faster") == 0)
        snprintf(buf, n, "%.4f of the reference's time, faster by %.1f%%", b->ratio, 100 * (1 - b->ratio));
    else
        snprintf(buf, n, "%.4f of the reference's time, at parity (inside the band of +-%.2f%%)", b->ratio, 100 * b->band);
}

/* Exit 4 if arm a is a candidate whose code object is new to the ledger and
 * the budget is spent, naming the best correct checkpoint and its gap. */
static void ledger_budget_check(const struct ledger *lg, const struct arm *a, const char *kase)
{
    int known = 0, used = ledger_candidates(lg, a->code.sha, &known);
    if (!a->candidate || known || used < lg->budget) return;
    const struct ledger_line *b = ledger_best_line(lg, kase);
    char best[1024] = "no candidate has passed every gate yet", standing[128];
    if (b) {
        checkpoint_standing(b, standing, sizeof standing);
        snprintf(best, sizeof best, "the best correct checkpoint is '%s' (code object %.12s, ledger line %ld) on "
                 "%s, %s: %s", b->arm, b->sha, b->seq, b->kase, b->device, standing);
    }
    die(EXIT_BUDGET, "budget spent: %d of %d candidate code objects are measured in %s, and '%s' (code object "
        "%.12s) is new; %s.  Re-running a measured code object costs nothing; --budget N raises the limit",
        used, lg->budget, lg->path, a->name, a->code.sha, best);
}

/* What a run holds the gates to, as one line: tolerances, checked
 * elements, repeats, the precision waiver.  A cached verdict is reused only
 * under the same conditions. */
static void run_conditions(const struct opts *o, char *buf, size_t n)
{
    snprintf(buf, n, "rtol %g atol %g full %d repeat %d trades-precision %s", o->rtol, o->atol, o->full,
             o->repeat > 1 ? o->repeat : 1, o->trades_precision ? "yes" : "no");
}

/* The latest ledger line that settled arm a's correctness on case c: same
 * code object, case, seed, device and conditions, the gates run there (not
 * reused, no planted fault).  NULL if none. */
static const struct ledger_line *ledger_verdict_line(const struct ledger *lg, const struct kcase *c,
                                                     const struct opts *o, const struct device *d,
                                                     const struct arm *a)
{
    char cond[512];
    run_conditions(o, cond, sizeof cond);
    for (size_t i = lg->n; i-- > 0;) {
        const struct ledger_line *l = &lg->line[i];
        if (strcmp(l->sha, a->code.sha) == 0 && strcmp(l->kase, c->label) == 0 && l->seed == o->seed &&
            strcmp(l->arch, d->arch) == 0 && strcmp(l->device, d->name) == 0 && strcmp(l->conditions, cond) == 0 &&
            (strcmp(l->gates, "pass") == 0 || strcmp(l->gates, "fail") == 0))
            return l;
    }
    return NULL;
}

/* Mark the arms whose verdict on case c the ledger already holds: their
 * gates are not run again (a planted fault always runs them). */
static void ledger_lookup_cached(const struct ledger *lg, const struct kcase *c, const struct opts *o,
                                 const struct device *d, struct arm_case *ac, int narms)
{
    for (int a = 0; a < narms && !o->inject; a++) {
        const struct ledger_line *l = ledger_verdict_line(lg, c, o, d, ac[a].arm);
        if (!l) continue;
        ac[a].cached = l->seq;
        ac[a].pass = ac[a].gates_pass = strcmp(l->gates, "pass") == 0;
    }
}

/* The A/A band last measured for case c with reference code object `sha`
 * on this device and seed; its line in *line.  < 0 if none. */
static double ledger_band(const struct ledger *lg, const struct kcase *c, const struct opts *o,
                          const struct device *d, const char *sha, long *line)
{
    for (size_t i = lg->n; i-- > 0;) {
        const struct ledger_line *l = &lg->line[i];
        if (l->band_measured && strcmp(l->sha, sha) == 0 && strcmp(l->kase, c->label) == 0 &&
            l->seed == o->seed && strcmp(l->device, d->name) == 0 && strcmp(l->arch, d->arch) == 0) {
            *line = l->seq;
            return l->band;
        }
    }
    return -1;
}


/* Append one line with `fields` (JSON members, no braces) for arm a to the
 * ledger, chained to the last line.  Under an exclusive lock it re-reads and
 * verifies the whole ledger (another process may have appended meanwhile),
 * re-checks the budget for a candidate (exit 4 when a concurrent run took
 * the last slot), then writes the line with one write() and fsyncs; a short
 * write is cut back off.  Returns the line's seq. */
static long ledger_append(struct ledger *lg, const char *fields, const struct arm *a, const char *kase)
{
    int fd = open(lg->path, O_RDWR | O_APPEND | O_CREAT, 0644);
    if (fd < 0) die(EXIT_DEVICE, "cannot open the ledger %s: %s", lg->path, strerror(errno));
    if (flock(fd, LOCK_EX) != 0) die(EXIT_DEVICE, "cannot lock the ledger %s: %s", lg->path, strerror(errno));
    const char *hold = getenv("KGATE_TEST_LEDGER_HOLD");   /* tests: kill -9 while the lock is held */
    if (hold) fprintf(stderr, "kgate: holding the ledger lock (test)\n"), usleep((useconds_t)(atof(hold) * 1e6));
    size_t old = 0;
    char *text = fd_read_all(fd, &old), prev[65];
    if (!text) die(EXIT_DEVICE, "cannot read the ledger %s: %s", lg->path, strerror(errno));
    const char *why = NULL;
    long lines = 0;
    lg->n = 0;
    long bad = ledger_walk(text, old, lg, &why, &lines, prev);
    free(text);
    if (bad) die(EXIT_USAGE, "the ledger %s does not verify at line %ld: %s; nothing appended", lg->path, bad, why);
    ledger_budget_check(lg, a, kase);
    char *line = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&line, &len);
    fprintf(f, "{\"seq\":%ld,\"prev\":\"%s\",%s", lines + 1, prev, fields);
    fflush(f);
    char self[65];
    sha256_text(line, len, self);
    fprintf(f, ",\"line_sha256\":\"%s\"}\n", self);
    fclose(f);
    ssize_t w = write(fd, line, len);
    if (w != (ssize_t)len || fsync(fd) != 0) {
        int err = errno;
        if (w > 0 && ftruncate(fd, (off_t)old) != 0) err = errno;
        die(EXIT_DEVICE, "writing the ledger %s failed: %s", lg->path, w < 0 || w == (ssize_t)len ? strerror(err) : "short write (cut back off)");
    }
    flock(fd, LOCK_UN);
    close(fd);
    line[len - 1] = 0;
    ledger_add(lg, line);
    free(line);
    return lines + 1;
}

/* Keep arm a's compile options and log beside the ledger, in
 * <ledger>.objects/<sha256>.txt (once per code object). */
static void ledger_keep_log(const struct ledger *lg, const struct device *d, const struct arm *a)
{
    char dir[PATH_MAX], path[PATH_MAX + 80];
    snprintf(dir, sizeof dir, "%s.objects", lg->path);
    snprintf(path, sizeof path, "%s/%s.txt", dir, a->code.sha);
    if (access(path, F_OK) == 0) return;
    if (mkdir_p(dir) != 0) die(EXIT_DEVICE, "cannot create %s: %s", dir, strerror(errno));
    char *log = d->kind == DEV_GPU ? read_file(a->code.log_path, NULL) : NULL;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    fprintf(f, "arm: %s\nsource: %s\noptions: %s\narch: %s\ncompiler: %s\ncode object: %s (%zu bytes)\n"
            "compile log:\n%s\n", a->name, a->src_name, *a->options ? a->options : "(none)", d->arch, d->compiler,
            d->kind == DEV_GPU ? a->code.bin_path : "none (CPU device)", a->code.size,
            log ? log : "(none)");
    fclose(f);
    if (write_file_atomic(path, text, len) != 0) die(EXIT_DEVICE, "cannot write %s: %s", path, strerror(errno));
    free(text);
    free(log);
}

/* The ledger fields of arm a of run r (JSON members, no braces): where and
 * when, what ran, under which conditions, the arm's verdict (and its gates'
 * alone, which later runs may reuse: not on a line with a planted fault),
 * its time and the rounds when the case was timed (timed), the budget, and
 * every gate value of every output. */
static void ledger_fields(FILE *f, const struct ledger *lg, const struct run *r, const struct arm_case *ac,
                          int a, const struct rounds *rd, int timed)
{
    const struct device *d = r->d;
    char when[32];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    json_str(f, "time", when, 1);
    fprintf(f, "\"kgate\":\"%s\",", KGATE_VERSION);
    json_str(f, "command", r->o->command ? r->o->command : "", 1);
    json_str(f, "device", d->name, 1);
    json_str(f, "arch", d->arch, 1);
    fprintf(f, "\"driver\":%d,", d->driver_version);
    json_str(f, "compiler", d->compiler, 1);
    json_str(f, "case", r->c->label, 1);
    fprintf(f, "\"seed\":%" PRIu64 ",", r->o->seed);
    json_arm(f, ac[a].arm, 1);
    char cond[512];
    run_conditions(r->o, cond, sizeof cond);
    json_str(f, "conditions", cond, 1);
    if (r->o->why) json_str(f, "why", r->o->why, 1);
    if (r->o->inject) json_str(f, "inject", r->o->inject, 1);
    if (ac[a].cached) fprintf(f, "\"cached_from_line\":%ld,", ac[a].cached);
    json_isa(f, r->o, &ac[a]);
    json_str(f, "verdict", arm_verdict(&ac[a]), 1);
    if (ac[a].gated && !r->o->inject) json_str(f, "gates_verdict", ac[a].gates_pass ? "pass" : "fail", 1);
    json_num(f, "median_us", timed && ac[a].total_us > 0 ? ac[a].total_us : NAN, 1);
    if (rd && timed) json_rounds(f, rd, a);
    int known = 0, used = ledger_candidates(lg, ac[a].arm->code.sha, &known);
    fprintf(f, "\"budget_used\":%d,\"budget\":%d,", used + (ac[a].arm->candidate && !known), lg->budget);
    json_arm_outputs(f, r, &ac[a]);
}

/* One ledger line per arm of a case that ran, and each arm's compile log
 * and options beside the ledger. */
static void ledger_write_case(struct ledger *lg, struct run *r, struct arm_case *ac, int narms,
                              const struct rounds *rd, int pass)
{
    for (int a = 0; a < narms; a++) {
        r->geom = ac[a].geom;
        char *fields = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&fields, &len);
        ledger_fields(f, lg, r, ac, a, rd, pass);
        fclose(f);
        ledger_keep_log(lg, r->d, ac[a].arm);
        long seq = ledger_append(lg, fields, ac[a].arm, r->c->label);
        free(fields);
        if (!r->o->quiet) fprintf(stderr, "kgate: ledger %s line %ld: %s %s\n", lg->path, seq, ac[a].arm->name, r->c->label);
    }
}

/* ===== Running a case ===== */

/* An attention gradient's default rtol and atol: at least GRAD_TOL_ULPS
 * unit roundoffs of its dtype (bf16 0.0625, f16 the default 0.01).  A
 * flash-attention backward reads O in the kernel's dtype; that rounding
 * enters every row's D = sum O·dO and the cancellation in ds = P·(dP - D)
 * amplifies it, growing with the sequence: on the H200 the portable kernels'
 * bf16 dK reached 0.74 of a 10-roundoff limit at 2048 tokens.  The
 * same-precision gate stays the tight one. */
#define GRAD_TOL_ULPS 16.0

static double grad_tol(enum dtype t, double dflt)
{
    return fmax(dflt, GRAD_TOL_ULPS * DTYPES[t].unit_roundoff);
}

/* The options' tolerances, else output o's dtype's (for a gradient,
 * grad_tol of them). */
static double out_rtol(const struct run *r, int o)
{
    const struct output *p = &r->out[o];
    if (r->o->rtol >= 0) return r->o->rtol;
    return p->grad ? grad_tol(p->dt, DTYPES[p->dt].rtol) : DTYPES[p->dt].rtol;
}

/* The options' atol, else the dtype's: what the nontrivial gate measures
 * the reference against. */
static double base_atol(const struct run *r, int o)
{
    return r->o->atol >= 0 ? r->o->atol : DTYPES[r->out[o].dt].atol;
}

/* The allclose atol of output o: base_atol, and for a gradient (which has
 * no natural unit: its scale follows dO and Q) grad_tol of it times the
 * reference's rms when that exceeds 1. */
static double out_atol(const struct run *r, int o, const struct result *res)
{
    const struct output *p = &r->out[o];
    if (!p->grad) return base_atol(r, o);
    double sum = 0;
    size_t n = 0;
    const struct plan *pl = &res->plan;
    for (size_t i = 0; i < pl->nr * p->cols; i++)
        if (isfinite(res->refs.ref_r[i])) sum += res->refs.ref_r[i] * res->refs.ref_r[i], n++;
    for (size_t i = 0; i < p->rows && pl->nc; i++)
        for (size_t c = 0; c < pl->nc && !pl->row_in[i]; c++)
            if (isfinite(res->refs.ref_c[i * pl->nc + c])) sum += res->refs.ref_c[i * pl->nc + c] * res->refs.ref_c[i * pl->nc + c], n++;
    double rms = n ? sqrt(sum / (double)n) : 0, atol = base_atol(r, o);
    return (r->o->atol >= 0 ? atol : grad_tol(p->dt, atol)) * (rms > 1 ? rms : 1);
}

/* Output o's storage with its guard bands, as the device holds it (caller
 * frees). */
static unsigned char *download_output(struct run *r, int o)
{
    const struct output *p = &r->out[o];
    size_t bytes = p->elems * DTYPES[p->dt].bytes + 2 * p->guard;
    unsigned char *raw = xmalloc(bytes);
    dev_download(r->d, raw, p->buf - p->guard, bytes);
    return raw;
}

/* The --inject fault if it is planted at `stage`, else NULL. */
static const struct inject *run_inject(const struct run *r, enum inj_stage stage)
{
    const struct inject *inj = r->o->inject && !r->inject_off ? find_inject(r->o->inject) : NULL;
    return inj && inj->stage == stage ? inj : NULL;
}

/* Plant the --inject fault of the quantize stage (if any) in operand op's
 * codes and scales as read back from the quantize-only kernel. */
static void q_stage_inject(struct run *r, struct qoperand *op, uint8_t *codes, unsigned char *scales)
{
    const struct inject *inj = run_inject(r, INJ_QSTAGE);
    struct inject_ctx ix = { .r = r, .qop = op, .qcodes = codes, .qscales = scales };
    if (inj) inj->apply(&ix);
}

/* Decode output o from its raw storage (with guard bands), planting the
 * --inject fault (if any): its values (rows x cols, caller frees);
 * *unwritten counts the elements still holding the poison bytes, *outside
 * the guard bytes that no longer do. */
static float *decode_output(struct run *r, int o, unsigned char *raw, double atol, size_t *unwritten,
                            size_t *outside)
{
    const struct output *p = &r->out[o];
    size_t es = DTYPES[p->dt].bytes;
    struct inject_ctx ix = { .r = r, .oi = o, .o = p, .raw = raw, .atol = atol, .key = mix64(r->key ^ 0x696e6a) };
    const struct inject *inj = run_inject(r, INJ_RAW);
    if (inj) inj->apply(&ix);
    *unwritten = *outside = 0;
    unsigned char *st = raw + p->guard;
    for (size_t i = 0; i < p->elems; i++) {
        size_t k = 0;
        while (k < es && st[i * es + k] == 0xff) k++;
        *unwritten += k == es;
    }
    for (size_t i = 0; i < p->guard; i++) *outside += (raw[i] != 0xff) + (st[p->elems * es + i] != 0xff);
    ix.out = decode_strided(p->dt, st, p->rows, p->cols, p->srow, p->scol);
    if ((inj = run_inject(r, INJ_VALUES))) inj->apply(&ix);
    return ix.out;
}

/* Run every gate on output o from its raw storage (downloaded if raw is
 * NULL): sets res->s, res->v and res->pass; res->plan and res->refs must be
 * ready.  `when` names the check in failure lines. */
static void check_output(struct run *r, int o, struct result *res, unsigned char *raw, const char *when)
{
    unsigned char *own = raw ? NULL : (raw = download_output(r, o));
    size_t unwritten, outside;
    float *out = decode_output(r, o, raw, res->atol, &unwritten, &outside);
    struct gate_in g = { &r->out[o], &res->plan, &res->refs, out, unwritten, outside, r->out[o].dt,
                         out_rtol(r, o), res->atol, base_atol(r, o), r->inputs_nonzero, &res->rep,
                         r->q, r->q ? QFMTS[r->q->f].snr_gate : 0, r->o->trades_precision };
    free(res->s.tiles);
    free(res->s.segs);
    stats_compute(&res->s, &g);
    res->pass = 1;
    for (size_t k = 0; k < N_GATES; k++) {
        memset(&res->v[k], 0, sizeof res->v[k]);
        GATES[k].eval(&res->s, &g, &res->v[k]);
        res->pass &= res->v[k].pass;
    }
    res->failed_when = when;
    free(out);
    free(own);
}

/* Exit 2 if --rtol/--atol loosen dtype t's defaults without --why. */
static void check_tolerance(const struct opts *o, enum dtype t, const char *label)
{
    int looser = o->rtol > DTYPES[t].rtol || o->atol > DTYPES[t].atol;
    if (looser && !o->why)
        die(EXIT_USAGE, "%s: --rtol/--atol looser than the %s defaults (rtol %g, atol %g) need "
            "--why \"reason\"", label, DTYPES[t].name, DTYPES[t].rtol, DTYPES[t].atol);
}

/* Poison and launch every launch of the case (owners in order, their
 * kernels noted in r->geom for the report), wait; 1 if a launched kernel
 * declares atomics. */
static int launch_all(struct run *r)
{
    r->d->launched_atomics = r->d->kind == DEV_CPU && getenv("KGATE_TEST_ATOMICS");
    for (int k = 0; k < r->nout; k++)
        if (r->out[k].launch == k) poison_launch(r, k), launch_recorded(r, k);
    dev_sync(r->d);
    return r->d->launched_atomics;
}

/* The first element where two raw storages of output o differ, as (row,
 * col) and the two values; 0 if they are bitwise equal. */
static int first_difference(const struct output *p, const unsigned char *a, const unsigned char *b,
                            struct repeat *rep)
{
    size_t es = DTYPES[p->dt].bytes;
    if (memcmp(a, b, p->elems * es + 2 * p->guard) == 0) return 0;
    for (size_t i = 0; i < p->rows; i++)
        for (size_t j = 0; j < p->cols; j++) {
            size_t at = p->guard + (size_t)((int64_t)i * p->srow + (int64_t)j * p->scol) * es;
            if (memcmp(a + at, b + at, es) == 0) continue;
            rep->diff_row = i, rep->diff_col = j;
            rep->first = dt_load(p->dt, a + p->guard, (at - p->guard) / es);
            rep->other = dt_load(p->dt, b + p->guard, (at - p->guard) / es);
            return 1;
        }
    rep->diff_row = rep->diff_col = SIZE_MAX;   /* the guard bands differ */
    return 1;
}

/* Runs 2..n of a case on the same inputs: each output compared bit for bit
 * with run 1 (raw1), or, when the kernels declare atomics, gated. */
static void repeat_runs(struct run *r, struct result *res, unsigned char **raw1, int n)
{
    for (int k = 0; k < r->nout; k++) res[k].rep.runs = n;
    for (int run = 2; run <= n; run++) {
        int atomics = launch_all(r);
        for (int k = 0; k < r->nout; k++) {
            struct repeat *rep = &res[k].rep;
            unsigned char *raw = download_output(r, k);
            const struct inject *inj = run_inject(r, INJ_REPEAT);
            struct inject_ctx ix = { .r = r, .oi = k, .o = &r->out[k], .raw = raw };
            if (inj && run == 2) inj->apply(&ix);
            rep->atomics |= atomics;
            if (atomics) {
                check_output(r, k, &res[k], raw, "repeated run");
                if (!res[k].pass && !rep->gated_fail_run) rep->gated_fail_run = run;
            } else if (!rep->diff_run && first_difference(&r->out[k], raw1[k], raw, rep)) {
                rep->diff_run = run;
            }
            free(raw);
        }
    }
}

/* Output o's rate from its timed median: TFLOP/s and % of the device's
 * peak (pct_peak < 0: not known). */
static void set_rate(const struct run *r, int o, struct result *x)
{
    /* fp8 matrix units run at twice the fp16 rate (sm_89+, gfx942, gfx950); FP4's rate is not known here */
    double peak = r->c->dt == DT_F32 ? r->d->peak_f32 : r->d->peak_mma16;
    if (r->q) peak = r->q->f == Q_E2M1 ? 0 : 2 * r->d->peak_mma16;
    x->tflops = r->out[o].flops / (x->t.median_us * 1e-6) / 1e12;
    x->pct_peak = peak > 0 ? 100.0 * x->tflops * 1e12 / peak : -1;
}

/* Time every launch of a passed case on the current arm, then re-check its
 * outputs (when references were computed: have_refs): sets res[].t,
 * .timed, .tflops, .pct_peak; returns 0 if a re-check failed. */
static int time_case(struct run *r, struct result *res, int have_refs, int idx, int total, FILE *progress)
{
    int pass = 1;
    for (int k = 0; k < r->nout && pass; k++) {
        if (r->out[k].launch != k) continue;
        if (progress)
            fprintf(progress, "[%d/%d] %s %s: timing\n", idx, total, r->c->label, r->out[k].name);
        time_arms(r, k, &r->d->arm, 1, 0, &res[k].t);
        for (int j = 0; j < r->nout && have_refs; j++) {
            if (r->out[j].launch != k) continue;
            check_output(r, j, &res[j], NULL, "re-check after timing");
            pass &= res[j].pass;
        }
        res[k].timed = pass;
        set_rate(r, k, &res[k]);
    }
    return pass;
}

/* The fp8 encoding device d converts: FNUZ on gfx942, OCP elsewhere (the
 * CPU included). */
static enum fp8_enc device_fp8(const struct device *d)
{
    return d->kind == DEV_GPU && d->pf == PF_HIP && strcmp(d->arch_base, "gfx942") == 0 ? ENC_FNUZ : ENC_OCP;
}

/* Give a low-precision case the device's encoding unless it names one, and
 * label it so. */
static void q_resolve(struct kcase *c, const struct device *d)
{
    if (c->qfmt == Q_NONE || c->enc != ENC_DEVICE) return;
    c->enc = device_fp8(d);
    c->op->finish(c);
}

/* NULL if device d converts case c's low-precision format, else why not:
 * the case is then skipped, never passed.  NVIDIA converts OCP fp8 from
 * sm_89 on (E2M1 and E8M0 in software); gfx942 FNUZ only; gfx950 OCP and MX. */
static const char *q_unsupported(const struct device *d, const struct kcase *c)
{
    static char why[200];
    if (c->qfmt == Q_NONE || d->kind == DEV_CPU) return NULL;
    int gfx942 = strcmp(d->arch_base, "gfx942") == 0, gfx950 = strcmp(d->arch_base, "gfx950") == 0;
    if (d->pf == PF_CUDA && d->attr[AT_CC_MAJOR] * 10 + d->attr[AT_CC_MINOR] < 89)
        snprintf(why, sizeof why, "%s has no fp8 conversion (NVIDIA: sm_89 and newer)", d->arch_base);
    else if (d->pf == PF_CUDA && c->enc == ENC_FNUZ)
        snprintf(why, sizeof why, "FNUZ is gfx942's encoding; NVIDIA GPUs convert OCP (--fp8 ocp, or --device cpu)");
    else if (d->pf == PF_HIP && !gfx942 && !gfx950)
        snprintf(why, sizeof why, "%s has no fp8 conversion (gfx942: FNUZ, gfx950: OCP and MX)", d->arch_base);
    else if (gfx942 && c->mx)
        snprintf(why, sizeof why, "MX formats need gfx950; gfx942 has no MX conversion");
    else if (gfx942 && c->enc == ENC_OCP)
        snprintf(why, sizeof why, "gfx942 converts the FNUZ encoding only (--fp8 fnuz)");
    else if (gfx950 && c->enc == ENC_FNUZ)
        snprintf(why, sizeof why, "gfx950 converts the OCP encoding only (--fp8 ocp)");
    else
        return NULL;
    return why;
}

/* Report a skipped case: a table row or a JSON line. */
static void report_skip(const struct kcase *c, const struct opts *o, const char *why)
{
    if (o->quiet) return;
    if (o->json) {
        printf("{");
        json_str(stdout, "case", c->label, 1);
        json_str(stdout, "where", c->where, 1);
        json_str(stdout, "verdict", "skip", 1);
        json_str(stdout, "reason", why, 0);
        printf("}\n");
    } else {
        printf("%-*s %-3s %-7s %s\n", LABEL_W, c->label, "-", "skip", why);
    }
    fflush(stdout);
}

static int isa_expect(enum platform pf, const char *bin_path, const char *expect, const char *const *kernels,
                      int nkernels, char *why, size_t n);

/* --expect: whether every kernel that arm ac's timed launches ran (its
 * launch geometry names them) holds matrix instructions of the class
 * asked for (kgate isa's disassembly).  Notes the answer in ac; the CPU
 * device, which runs no code object, never passes. */
static int isa_gate(const struct run *r, struct arm_case *ac)
{
    const char *names[MAX_OUT * MAX_GEOM];
    int n = 0;
    ac->isa_checked = 1;
    if (r->d->kind == DEV_CPU) {
        snprintf(ac->isa_why, sizeof ac->isa_why, "the CPU device runs ref.c, no code object");
        return ac->isa_pass = 0;
    }
    for (int k = 0; k < r->nout; k++)
        for (int i = 0; i < ac->geom[k].n && r->out[k].launch == k; i++) names[n++] = ac->geom[k].k[i].name;
    if (n == 0) {
        snprintf(ac->isa_why, sizeof ac->isa_why, "the case launched no kernel: nothing to check");
        return ac->isa_pass = 0;
    }
    ac->isa_pass = isa_expect(r->d->pf, ac->arm->code.bin_path, r->o->expect, names, n, ac->isa_why,
                              sizeof ac->isa_why);
    return ac->isa_pass;
}

/* Gate arm ac on run r: the quantize stage (low precision), every launch on
 * poisoned outputs, `repeat` runs in all (the first checked, the others
 * compared bit for bit or, with atomics, gated), every gate of every output,
 * the check named `when`.  Sets ac->pass. */
static void gate_arm(struct run *r, struct arm_case *ac, int repeat, const char *when, int idx, int total,
                     FILE *progress)
{
    arm_use(r->d, ac->arm);
    r->geom = ac->geom;
    r->inject_off = !ac->inject_target;
    struct result *res = ac->res;
    if (r->q) q_stage(r);
    launch_all(r);
    unsigned char **raw1 = xcalloc((size_t)r->nout, sizeof *raw1);
    for (int k = 0; k < r->nout; k++) raw1[k] = download_output(r, k);
    if (repeat > 1) {
        if (progress) fprintf(progress, "[%d/%d] %s: %d more runs\n", idx, total, r->c->label, repeat - 1);
        repeat_runs(r, res, raw1, repeat);
    }
    ac->pass = 1;
    for (int k = 0; k < r->nout; k++) {
        if (!res[k].rep.atomics || res[k].pass) check_output(r, k, &res[k], raw1[k], when);
        ac->pass &= res[k].pass;
        free(raw1[k]);
    }
    free(raw1);
    ac->gates_pass = ac->pass, ac->gated = 1;
    if (r->o->expect && !isa_gate(r, ac)) ac->pass = 0;
}

/* Launch every output of arm ac once, untimed and ungated, to note its
 * launch geometry (for an arm whose gates the ledger's verdict stands for:
 * the report and --expect read it). */
static void record_geometry(struct run *r, struct arm_case *ac)
{
    arm_use(r->d, ac->arm);
    r->geom = ac->geom;
    for (int k = 0; k < r->nout; k++)
        if (r->out[k].launch == k) launch_recorded(r, k);
    dev_sync(r->d);
}

/* The median, lowest and highest of n values (n >= 1). */
static void spread3(const double *v, int n, double *med, double *lo, double *hi)
{
    double x[100];
    memcpy(x, v, (size_t)n * sizeof *x);
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    *med = sorted_median(x, n), *lo = x[0], *hi = x[n - 1];
}

/* The verdict of a time ratio (candidate / reference) against the A/A
 * band: faster or slower only outside the band with every round on the
 * same side of 1; at parity otherwise. */
static const char *ratio_verdict(const struct rounds *rd)
{
    if (rd->ratio_med < 1 - rd->band && rd->ratio_hi < 1) return "faster";
    if (rd->ratio_med > 1 + rd->band && rd->ratio_lo > 1) return "slower";
    return "parity";
}

/* Time the arms in rd->n rounds; in each, every timed launch of every arm
 * is sampled interleaved (time_arms, the first arm rotating per round).
 * Round i's ratios: the candidate's summed medians over the reference's
 * (arm 0), and the A/A copy's.  Each arm's rows get the rounds merged.  The
 * band is max |A/A - 1| when a copy ran (else the caller's, from the
 * ledger).  Then every arm runs once more and, when references exist, is
 * re-checked.  Returns 0 if a re-check failed. */
static int time_rounds(struct run *r, struct arm_case *ac, int narms, struct rounds *rd, int have_refs,
                       int idx, int total, FILE *progress)
{
    struct arm *arms[TIMER_MAX_ARMS];
    int nout = r->nout, n = rd->n;
    struct timing *t = xcalloc((size_t)(narms * nout * n), sizeof *t);
    for (int a = 0; a < narms; a++) arms[a] = ac[a].arm;
    for (int i = 0; i < n; i++) {
        if (progress) fprintf(progress, "[%d/%d] %s: timing, round %d of %d\n", idx, total, r->c->label, i + 1, n);
        double tot[TIMER_MAX_ARMS] = { 0 };
        for (int k = 0; k < nout; k++) {
            if (r->out[k].launch != k) continue;
            struct timing tr[TIMER_MAX_ARMS];
            time_arms(r, k, arms, narms, i % narms, tr);
            for (int a = 0; a < narms; a++) t[(a * nout + k) * n + i] = tr[a], tot[a] += tr[a].median_us;
        }
        rd->ratio[i] = rd->cand >= 0 ? tot[rd->cand] / tot[0] : NAN;
        rd->aa[i] = rd->copy >= 0 ? tot[rd->copy] / tot[0] : NAN;
    }
    for (int a = 0; a < narms; a++)
        for (int k = 0; k < nout; k++) {
            if (r->out[k].launch != k) continue;
            timing_merge(&t[(a * nout + k) * n], n, &ac[a].res[k].t);
            set_rate(r, k, &ac[a].res[k]);
            ac[a].total_us += ac[a].res[k].t.median_us;
        }
    free(t);
    if (rd->copy >= 0) {
        spread3(rd->aa, n, &rd->aa_med, &rd->aa_lo, &rd->aa_hi);
        rd->band = fmax(fabs(rd->aa_lo - 1), fabs(rd->aa_hi - 1));
        rd->band_line = 0;
    }
    if (rd->cand >= 0) {
        spread3(rd->ratio, n, &rd->ratio_med, &rd->ratio_lo, &rd->ratio_hi);
        rd->verdict = ratio_verdict(rd);
    }
    int pass = 1;
    for (int a = 0; a < narms; a++) {
        if (!have_refs) continue;
        gate_arm(r, &ac[a], 1, "re-check after timing", idx, total, progress);
        pass &= ac[a].pass;
    }
    for (int a = 0; a < narms; a++)
        for (int k = 0; k < nout; k++) ac[a].res[k].timed = pass && r->out[k].launch == k;
    return pass;
}

/* Plans and references for every output of r into base[] (shared by the
 * arms), with progress lines. */
static void case_references(struct run *r, struct result *base, int idx, int total, FILE *progress)
{
    const struct kcase *c = r->c;
    for (int k = 0; k < r->nout; k++) {
        const struct output *p = &r->out[k];
        plan_build(&base[k].plan, p, r->o->full, mix64(r->key ^ (uint64_t)k));
        refs_compute(&base[k].refs, r, k, &base[k].plan);
        base[k].atol = out_atol(r, k, &base[k]);
        if (!progress) continue;
        fprintf(progress, "[%d/%d] %s %s: references on %zu of %zu elements (%s): ", idx, total, c->label,
                p->name, plan_count(&base[k].plan, p), p->rows * p->cols,
                base[k].plan.full ? "all" : "tile-covering sample");
        if (base[k].refs.lp_s >= 0)
            fprintf(progress, "double %.2f s, same-precision %.2f s\n", base[k].refs.ref_s, base[k].refs.lp_s);
        else
            fprintf(progress, "double and same-precision %.2f s\n", base[k].refs.ref_s);
    }
}

/* The whole pipeline for one case on narms arms: inputs, references (unless
 * every arm's verdict is cached in the ledger), then per arm poisoned
 * outputs, launches, --repeat runs and gates; only if every arm passed, the
 * timer (one arm: time_case; compare and noise: rounds into rd) and a
 * re-check.  Reports the case and writes its ledger lines (lg, if kept);
 * returns 1 if it passed. */
static int run_arms(const struct kcase *c, struct device *d, const struct opts *o, struct arm_case *ac,
                    int narms, struct rounds *rd, struct ledger *lg, int idx, int total, struct tally *tl,
                    unsigned *failed_gates)
{
    const char *skip = q_unsupported(d, c);
    if (skip) {
        report_skip(c, o, skip);
        tl->cases++, tl->cases_skipped++;
        return 1;
    }
    check_tolerance(o, c->dt, c->where);
    const struct inject *inj = o->inject ? find_inject(o->inject) : NULL;
    if (inj && inj->unfit && inj->unfit(c))
        die(EXIT_USAGE, "%s: --inject %s %s; %s is not", c->where, inj->name, inj->unfit(c), c->label);
    if (lg) ledger_lookup_cached(lg, c, o, d, ac, narms);
    struct run r = { .c = c, .d = d, .o = o, .inputs_nonzero = 1, .geom = ac[0].geom };
    r.key = hash_str(mix64(o->seed), c->label);
    for (size_t i = 0; i < 2 * c->nlens && c->lens; i++) r.key = mix64(r.key ^ c->lens[i]);
    FILE *progress = o->quiet ? NULL : stderr;
    if (progress) fprintf(progress, "[%d/%d] %s (%s): inputs\n", idx, total, c->label, c->where);
    c->op->prepare(&r);
    int have_refs = 0, pass = 1, repeat = o->repeat > 1 ? o->repeat : 1;
    for (int a = 0; a < narms; a++) {
        have_refs |= !ac[a].cached;
        ac[a].inject_target = narms == 1 || a == (rd && rd->cand >= 0 ? rd->cand : 0);
    }
    struct result *base = xcalloc((size_t)r.nout, sizeof *base);
    if (have_refs) case_references(&r, base, idx, total, progress);
    for (int a = 0; a < narms; a++) {
        ac[a].res = xcalloc((size_t)r.nout, sizeof *ac[a].res);
        for (int k = 0; k < r.nout; k++)
            ac[a].res[k].plan = base[k].plan, ac[a].res[k].refs = base[k].refs, ac[a].res[k].atol = base[k].atol;
        if (!ac[a].cached) {
            gate_arm(&r, &ac[a], repeat, "check", idx, total, progress);
        } else {
            record_geometry(&r, &ac[a]);
            if (o->expect && !isa_gate(&r, &ac[a])) ac[a].pass = 0;
        }
        pass &= ac[a].pass;
    }
    if (pass && rd) {
        pass = time_rounds(&r, ac, narms, rd, have_refs, idx, total, progress);
    } else if (pass) {
        arm_use(d, ac[0].arm);
        pass = ac[0].pass = time_case(&r, ac[0].res, have_refs, idx, total, progress);
        if (!pass) ac[0].gates_pass = 0;   /* the re-check after timing failed */
        for (int k = 0; k < r.nout && pass; k++)
            if (ac[0].res[k].timed) ac[0].total_us += ac[0].res[k].t.median_us;
    }
    for (int a = 0; a < narms; a++)
        for (int k = 0; k < r.nout; k++) {
            if (!pass) ac[a].res[k].timed = 0, ac[a].total_us = 0;   /* a failed case has no time */
            for (size_t g = 0; g < N_GATES; g++)
                if (ac[a].gated && !ac[a].res[k].v[g].pass && failed_gates) *failed_gates |= 1u << g;
        }
    report_arms(&r, ac, narms, rd, pass);
    if (lg) ledger_write_case(lg, &r, ac, narms, rd, pass);
    tl->cases++, tl->cases_failed += !pass;
    int isa_failed = 0;
    for (int a = 0; a < narms; a++) isa_failed |= ac[a].isa_checked && !ac[a].isa_pass;
    tl->isa_failed += isa_failed;
    for (int a = 0; a < narms; a++) {
        for (int k = 0; k < r.nout; k++) {
            tl->outputs++, tl->outputs_failed += ac[a].gated ? !ac[a].res[k].pass : !ac[a].gates_pass;
            free(ac[a].res[k].s.tiles);
            free(ac[a].res[k].s.segs);
        }
        free(ac[a].res);
        ac[a].res = NULL;
    }
    for (int k = 0; k < r.nout; k++) plan_free(&base[k].plan), refs_free(&base[k].refs);
    free(base);
    release_run(&r);
    return pass;
}

/* One case on the current arm alone, no ledger (selftest). */
static int run_case(const struct kcase *c, struct device *d, const struct opts *o, int idx, int total,
                    struct tally *tl, unsigned *failed_gates)
{
    struct arm_case ac = { .arm = d->arm };
    return run_arms(c, d, o, &ac, 1, NULL, NULL, idx, total, tl, failed_gates);
}

/* ===== Commands ===== */

/* Open the device the options name: the CPU, or GPU N (each arm builds
 * and loads its own kernels). */
static void open_device(struct device *d, const struct opts *o)
{
    memset(d, 0, sizeof *d);
    if (o->device_cpu) {
        if (o->kernels_path) die(EXIT_USAGE, "--kernels needs a GPU device; --device cpu runs ref.c's candidate");
        cpu_open(d);
        return;
    }
    gpu_open(d, o->device_index);
}

/* Give back what open_device took. */
static void close_device(struct device *d)
{
    dev_free(d, d->flush);
    dev_free(d, d->clock_buf);
    d->flush = d->clock_buf = 0;
}

/* The reference arm: the embedded kernels.hip as shipped. */
static void arm_reference(struct arm *a)
{
    memset(a, 0, sizeof *a);
    snprintf(a->name, sizeof a->name, "reference");
    a->src = kg_embedded_src, a->src_name = "kernels.hip (embedded)";
}

/* The arm the options name: a candidate when --variant, -D or --kernels is
 * given (named by --variant, else by the --kernels file), else the
 * reference.  *file owns a --kernels file's text.  Exit 2 on a variant
 * without a change or a change without a name. */
static void arm_from_opts(struct arm *a, const struct opts *o, char **file)
{
    arm_reference(a);
    *file = NULL;
    if (!o->variant && !o->ndefines && !o->kernels_path) {
        if (o->diagnostic) die(EXIT_USAGE, "--diagnostic marks a variant: give --variant NAME and its -D or --kernels");
        return;
    }
    if (o->variant && !o->ndefines && !o->kernels_path)
        die(EXIT_USAGE, "--variant %s: give what differs from the reference: -D NAME=VALUE or --kernels FILE", o->variant);
    if (!o->variant && !o->kernels_path)
        die(EXIT_USAGE, "-D makes a candidate: name it with --variant NAME (the ledger records it)");
    a->candidate = 1, a->diagnostic = o->diagnostic;
    if (o->kernels_path) {
        *file = read_file(o->kernels_path, NULL);
        if (!*file) die(EXIT_USAGE, "cannot read --kernels %s: %s", o->kernels_path, strerror(errno));
        a->src = *file, a->src_name = o->kernels_path;
    }
    const char *base = o->kernels_path ? strrchr(o->kernels_path, '/') : NULL;
    snprintf(a->name, sizeof a->name, "%s", o->variant ? o->variant : base ? base + 1 : o->kernels_path);
    for (int i = 0; i < o->ndefines; i++) arm_define(a, o->defines[i]);
}

/* The A/A copy of arm `of`: the same source and definitions plus
 * KG_BUILD_ID=2, a distinct code object with the same kernels. */
static void arm_copy(struct arm *a, const struct arm *of)
{
    memset(a, 0, sizeof *a);
    snprintf(a->name, sizeof a->name, "%.58s-copy", of->name);
    a->src = of->src, a->src_name = of->src_name;
    for (int i = 0; i < of->ndefines; i++) arm_define(a, of->defines[i] + 2);
    arm_define(a, "KG_BUILD_ID=2");
    a->copy = 1;
}

/* Open the ledger the options name (exit 2 before any work if it cannot be
 * written) and read it. */
static void ledger_open(struct ledger *lg, const struct opts *o)
{
    memset(lg, 0, sizeof *lg);
    lg->path = ledger_path(o);
    lg->budget = o->budget ? o->budget : BUDGET_DEFAULT;
    int fd = open(lg->path, O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (fd < 0) die(EXIT_USAGE, "cannot write the ledger %s: %s", lg->path, strerror(errno));
    close(fd);
    ledger_load(lg);
}

/* The run's departures from the defaults: tolerances (with --why) and a
 * planted fault. */
static void print_why(const struct opts *o)
{
    char rt[32] = "default", at[32] = "default";
    if (o->rtol >= 0) snprintf(rt, sizeof rt, "%g", o->rtol);
    if (o->atol >= 0) snprintf(at, sizeof at, "%g", o->atol);
    if (o->rtol >= 0 || o->atol >= 0)
        printf("tolerance: rtol %s, atol %s (why: %s)\n", rt, at, o->why ? o->why : "none given");
    if (o->trades_precision) printf("trades precision: the baseline SNR rule is waived (why: %s)\n", o->trades_precision);
    if (o->inject) {
        const struct inject *inj = find_inject(o->inject);
        printf("inject: %s (%s; the %s gate must catch it)\n", inj->name, inj->what, inj->gate);
    }
}

/* The run's header: the machine, the seed, the repeats. */
static void print_run_header(FILE *f, const struct device *d, const struct opts *o)
{
    print_machine(f, d);
    fprintf(f, "  %-12s %" PRIu64 "\n", "seed:", o->seed);
    fprintf(f, "  %-12s %d run%s per case%s\n\n", "repeat:", o->repeat, o->repeat == 1 ? "" : "s",
            o->repeat > 1 ? " (outputs bitwise equal, or gated when a kernel declares atomics)" : "");
}

/* Resolve the cases' encodings for the device and size the label column. */
static void cases_resolve(struct kcase *cases, size_t n, const struct device *d)
{
    for (size_t i = 0; i < n; i++) {
        q_resolve(&cases[i], d);
        if ((int)strlen(cases[i].label) > LABEL_W) LABEL_W = (int)strlen(cases[i].label);
    }
}

/* Resolve the cases for the device and print what comes before the rows:
 * the run's header and, as a table, the departures from the defaults and
 * the column heads.  Returns the stream the summary goes to. */
static FILE *start_report(const struct device *d, const struct opts *o, struct kcase *cases, size_t n)
{
    FILE *summary = o->json ? stderr : stdout;
    print_run_header(summary, d, o);
    cases_resolve(cases, n, d);
    if (!o->json) {
        print_why(o);
        print_header();
    }
    return summary;
}

/* The last line of a command: cases and outputs, passed, failed, skipped. */
static void print_tally(FILE *f, const struct tally *tl)
{
    fprintf(f, "\nkgate: %d case%s, %d output%s: %d passed, %d failed", tl->cases, tl->cases == 1 ? "" : "s",
            tl->outputs, tl->outputs == 1 ? "" : "s", tl->outputs - tl->outputs_failed, tl->outputs_failed);
    if (tl->cases_skipped) fprintf(f, "; %d case%s skipped", tl->cases_skipped, tl->cases_skipped == 1 ? "" : "s");
    if (tl->isa_failed) fprintf(f, "; %d case%s failed --expect", tl->isa_failed, tl->isa_failed == 1 ? "" : "s");
    fputc('\n', f);
}

/* Run cases on the chosen device and arm and print the table; exit code 0
 * or 1.  A candidate arm (or --ledger) keeps the ledger: the budget is
 * checked first and every measured case gets a line. */
static int cmd_run(struct kcase *cases, size_t n, const struct opts *o)
{
    struct device d;
    struct arm arm;
    struct ledger lg, *lgp = NULL;
    char *file;
    open_device(&d, o);
    arm_from_opts(&arm, o, &file);
    arm_build(&d, &arm);
    arm_use(&d, &arm);
    if (arm.candidate || o->ledger_path) {
        ledger_open(&lg, o);
        ledger_budget_check(&lg, &arm, n == 1 ? cases[0].label : NULL);
        lgp = &lg;
    }
    FILE *summary = start_report(&d, o, cases, n);
    struct tally tl = { 0 };
    for (size_t i = 0; i < n; i++) {
        struct arm_case ac = { .arm = &arm };
        run_arms(&cases[i], &d, o, &ac, 1, NULL, lgp, (int)i + 1, (int)n, &tl, NULL);
    }
    print_tally(summary, &tl);
    close_device(&d);
    arm_free(&arm);
    free(file);
    if (lgp) free(lg.line);
    return tl.cases_failed ? EXIT_GATE : EXIT_PASS;
}

/* The number of rounds of a compare or noise: --rounds, else 10. */
static int rounds_of(const struct opts *o) { return o->rounds ? o->rounds : 10; }

/* kgate compare CASE --variant NAME (-D K=V ... | --kernels FILE): the
 * reference arm and the candidate gated on the same inputs, then timed in
 * interleaved rounds with, unless the ledger holds one, an A/A copy of the
 * reference for the band; the verdict is faster, parity or slower.  Two
 * (or three) ledger lines.  Exit 0, 1 (a gate failed) or 4 (budget). */
static int cmd_compare(struct kcase *c, const struct opts *o)
{
    struct device d;
    struct arm ref, cand, copy;
    struct ledger lg;
    char *file;
    open_device(&d, o);
    arm_reference(&ref);
    arm_from_opts(&cand, o, &file);
    if (!cand.candidate)
        die(EXIT_USAGE, "compare needs a candidate: --variant NAME with -D NAME=VALUE ... or --kernels FILE");
    ledger_open(&lg, o);
    arm_build(&d, &ref);
    arm_build(&d, &cand);
    if (strcmp(ref.code.sha, cand.code.sha) == 0)
        die(EXIT_USAGE, "'%s' compiles to the reference's code object (%.12s): its changes make no difference",
            cand.name, cand.code.sha);
    ledger_budget_check(&lg, &cand, c->label);
    struct rounds rd = { .n = rounds_of(o), .cand = 1, .copy = -1 };
    rd.band = ledger_band(&lg, c, o, &d, ref.code.sha, &rd.band_line);
    struct arm_case ac[3] = { { .arm = &ref }, { .arm = &cand }, { .arm = &copy } };
    int narms = 2;
    if (rd.band < 0) {
        arm_copy(&copy, &ref);
        arm_build(&d, &copy);
        rd.copy = narms++;
    }
    FILE *summary = start_report(&d, o, c, 1);
    struct tally tl = { 0 };
    run_arms(c, &d, o, ac, narms, &rd, &lg, 1, 1, &tl, NULL);
    print_tally(summary, &tl);
    close_device(&d);
    arm_free(&ref), arm_free(&cand);
    if (narms == 3) arm_free(&copy);
    free(file);
    free(lg.line);
    return tl.cases_failed ? EXIT_GATE : EXIT_PASS;
}

/* kgate noise CASE: the arm the options name (the reference by default) and
 * its A/A copy, gated, then timed against each other in interleaved rounds;
 * their spread is the band `compare` uses.  Ledger lines for both. */
static int cmd_noise(struct kcase *c, const struct opts *o)
{
    struct device d;
    struct arm arm, copy;
    struct ledger lg;
    char *file;
    open_device(&d, o);
    arm_from_opts(&arm, o, &file);
    ledger_open(&lg, o);
    arm_build(&d, &arm);
    ledger_budget_check(&lg, &arm, c->label);
    arm_copy(&copy, &arm);
    arm_build(&d, &copy);
    if (strcmp(arm.code.sha, copy.code.sha) == 0 && !o->quiet)
        fprintf(stderr, "kgate: %s has no KG_BUILD_ID hook: both arms load the same code object, as two modules\n",
                arm.src_name);
    struct rounds rd = { .n = rounds_of(o), .cand = -1, .copy = 1, .band = -1 };
    struct arm_case ac[2] = { { .arm = &arm }, { .arm = &copy } };
    FILE *summary = start_report(&d, o, c, 1);
    struct tally tl = { 0 };
    run_arms(c, &d, o, ac, 2, &rd, &lg, 1, 1, &tl, NULL);
    print_tally(summary, &tl);
    close_device(&d);
    arm_free(&arm), arm_free(&copy);
    free(file);
    free(lg.line);
    return tl.cases_failed ? EXIT_GATE : EXIT_PASS;
}

/* kgate devices: every GPU the runtime sees, and the CPU. */
static int cmd_devices(void)
{
    struct device d;
    memset(&d, 0, sizeof d);
    char cpu[256];
    cpu_name(cpu, sizeof cpu);
    printf("cpu  %s (--device cpu)\n", cpu);
    gpu_load_runtime(&d);
    int n = 0;
    d.rt.dev_count(&n);
    for (int i = 0; i < n; i++) {
        struct device g;
        memset(&g, 0, sizeof g);
        g.pf = d.pf, g.rt = d.rt, g.rtc = d.rtc;
        int h;
        gpu_check(&g, g.rt.dev_get(&h, i), "getting a device");
        char name[256] = "";
        g.rt.dev_name(name, sizeof name, h);
        int sms = 0;
        g.rt.dev_attr(&sms, ATTR_ID[g.pf][AT_SMS], h);
        size_t mem = 0;
        g.rt.dev_mem(&mem, h);
        printf("%-4d %s, %d SMs/CUs, %.1f GiB (%s)\n", i, name, sms, mem / 1073741824.0, PF_NAME[g.pf]);
    }
    return EXIT_PASS;
}

/* --- ledger --- */

/* kgate ledger verify: every line whole and chained; exit 0, or 1 naming
 * the first line that breaks the chain.  Prints the last line's sha256:
 * kept elsewhere, it also shows lines cut off the end or a last line
 * rewritten with its hashes. */
static int ledger_verify(const char *path)
{
    size_t len = 0;
    char *text = ledger_read(path, &len);
    if (!text) die(EXIT_USAGE, "cannot read the ledger %s: %s", path, strerror(errno));
    const char *why = NULL;
    char last[65];
    long lines = 0, bad = ledger_walk(text, len, NULL, &why, &lines, last);
    free(text);
    if (bad) {
        printf("ledger %s: line %ld: %s\n", path, bad, why);
        return EXIT_GATE;
    }
    printf("ledger %s: %ld line%s, chain intact; last line sha256 %s\n", path, lines, lines == 1 ? "" : "s", last);
    return EXIT_PASS;
}

/* A number of a ledger line as a table cell: "-" when absent. */
static void cell_num(char *buf, size_t n, const char *line, const char *key, const char *fmt, double scale)
{
    double v = json_field_num(line, key);
    if (isnan(v)) snprintf(buf, n, "-");
    else snprintf(buf, n, fmt, v * scale);
}

/* kgate ledger: every whole line as a table row, with the budget count;
 * exit 1, naming the line, when the chain does not verify. */
static int ledger_table(const char *path)
{
    size_t len = 0;
    char *text = ledger_read(path, &len);
    if (!text) die(EXIT_USAGE, "cannot read the ledger %s: %s", path, strerror(errno));
    const char *why = NULL;
    long lines = 0, bad = ledger_walk(text, len, NULL, &why, &lines, (char[65]){ 0 });
    printf("%5s %-20s %-40s %-14s %-10s %-12s %-7s %11s %7s %7s %-7s %6s\n", "line", "time (UTC)", "case", "arm",
           "role", "code object", "verdict", "median-us", "ratio", "band-%", "compare", "budget");
    for (char *p = text, *nl; *p; p = nl + 1) {
        nl = strchr(p, '\n');
        if (!nl) break;
        *nl = 0;
        char when[32] = "", kase[256] = "", arm[64] = "", role[16] = "", sha[65] = "", verdict[16] = "",
             cmp[16] = "-", med[32], ratio[32], band[32], used[16] = "?", budget[16] = "?";
        json_field(p, "time", when, sizeof when);
        json_field(p, "case", kase, sizeof kase);
        json_field(p, "arm", arm, sizeof arm);
        json_field(p, "role", role, sizeof role);
        json_field(p, "code_sha256", sha, sizeof sha);
        json_field(p, "verdict", verdict, sizeof verdict);
        json_field(p, "compare", cmp, sizeof cmp);
        json_field(p, "budget_used", used, sizeof used);
        json_field(p, "budget", budget, sizeof budget);
        cell_num(med, sizeof med, p, "median_us", "%.1f", 1);
        cell_num(ratio, sizeof ratio, p, "ratio", "%.4f", 1);
        cell_num(band, sizeof band, p, "band", "%.2f", 100);
        char count[40];
        snprintf(count, sizeof count, "%s/%s", used, budget);
        printf("%5.0f %-20s %-40.40s %-14.14s %-10s %-12.12s %-7s %11s %7s %7s %-7s %6s\n",
               json_field_num(p, "seq"), when, kase, arm, role, sha, verdict, med, ratio, band, cmp, count);
    }
    free(text);
    if (bad) fprintf(stderr, "kgate: ledger %s: line %ld: %s (kgate ledger verify)\n", path, bad, why);
    return bad ? EXIT_GATE : EXIT_PASS;
}

/* kgate ledger best: per case, the best correct deliverable candidate. */
static int ledger_best(const struct opts *o)
{
    struct ledger lg;
    ledger_open(&lg, o);
    if (!lg.n) die(EXIT_USAGE, "the ledger %s is empty or absent", lg.path);
    for (size_t i = 0; i < lg.n; i++) {
        const char *kase = lg.line[i].kase;
        int first = 1;
        for (size_t j = 0; j < i && first; j++) first = strcmp(lg.line[j].kase, kase) != 0;
        if (!first) continue;
        const struct ledger_line *b = ledger_best_line(&lg, kase);
        char standing[128];
        if (b && strcmp(b->kase, kase) == 0)
            checkpoint_standing(b, standing, sizeof standing),
            printf("%s: '%s' (code object %.12s, ledger line %ld, %s): %s\n", kase, b->arm, b->sha, b->seq, b->device,
                   standing);
        else
            printf("%s: no correct deliverable candidate measured against the reference\n", kase);
    }
    free(lg.line);
    return EXIT_PASS;
}

/* kgate ledger [verify | best] [--ledger FILE]. */
static int cmd_ledger(const char *sub, const struct opts *o)
{
    if (!sub) return ledger_table(ledger_path(o));
    if (strcmp(sub, "verify") == 0) return ledger_verify(ledger_path(o));
    if (strcmp(sub, "best") == 0) return ledger_best(o);
    die(EXIT_USAGE, "ledger %s: expected verify or best (or nothing, for the table)", sub);
}

/* --- selftest --- */

struct selftest { int passed, failed; };

static void st_report(struct selftest *st, int ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("  %-4s ", ok ? "ok" : "FAIL");
    vprintf(fmt, ap);
    putchar('\n');
    va_end(ap);
    ok ? st->passed++ : st->failed++;
}

/* Every fp16 and bf16 code decodes and re-encodes to itself (NaN to a NaN),
 * and the rounding boundaries land where IEEE round-to-nearest-even says. */
/* Block scaling by ref.c's quantizer on closed forms: an fp8 block's scale
 * is fmax/amax (stored as its reciprocal); the MX rules differ on a block
 * whose amax is above the element max times 2^floor(log2 amax) - emax; a
 * NaN anywhere makes its block's scale NaN (fmaxf would skip it). */
static void st_quantizer(struct selftest *st)
{
    float x[8] = { 0.5f, -1.0f, 0.25f, 0.0f, 0.98828125f, 0.1f, NAN, 0.3f };
    uint8_t q[8] = { 0 }, e8[2] = { 0 };
    float s[2] = { 0 };
    struct qgrid g = { 1, 2, 4, 1, 4 };    /* two rows, one scale each */
    q_quantize(x, &g, Q_E4M3, QR_AMAX, q, s, e8);
    int ok = s[0] == 1.0f / 448.0f && q[1] == 0xfe && q[0] == 0x76 && isnan(s[1]) && q[7] == 0x7f;
    st_report(st, ok, "fp8 rowwise: scale 448/amax, -amax -> 0xfe (-448), 0.5 -> 0x76 (224); a NaN makes its "
              "row's scale and codes NaN");
    q_quantize(x, &g, Q_E4M3, QR_MX_SPEC, q, s, e8);
    int spec = e8[0] == 127 - 8 && q[1] == 0xf8 && e8[1] == 0xff;   /* -1 * 2^8 = -256 */
    float y[4] = { 0.9f, 0.1f, 0.2f, 0.3f };
    struct qgrid h = { 1, 1, 4, 1, 4 };
    q_quantize(y, &h, Q_E2M1, QR_MX_SPEC, q, s, e8);
    spec &= e8[0] == 127 - 3 && (q[0] & 0xf) == 0x7;                /* 0.9 * 2^3 = 7.2 saturates to 6 */
    q_quantize(y, &h, Q_E2M1, QR_MX_UP, q, s, e8);
    spec &= e8[0] == 127 - 2 && (q[0] & 0xf) == 0x6;                /* up: 2^-2, 0.9 * 4 = 3.6 -> 4 */
    st_report(st, spec, "MX scales: the spec rule 2^(floor(log2 amax) - emax) clips FP4 0.9 to 6 x 2^-3, the "
              "round-up rule does not; a NaN block gets E8M0 0xFF");
}

static void st_formats(struct selftest *st)
{
    int bad16 = 0, badbf = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = f32_from_f16((uint16_t)h);
        uint16_t back = f16_from_f32(f);
        bad16 += isnan(f) ? !((back & 0x7c00) == 0x7c00 && (back & 0x3ff)) : back != h;
        float g = f32_from_bf16((uint16_t)h);
        uint16_t bb = bf16_from_f32(g);
        badbf += isnan(g) ? !((bb & 0x7f80) == 0x7f80 && (bb & 0x7f)) : bb != h;
    }
    st_report(st, bad16 == 0, "fp16: all 65536 codes decode and re-encode to themselves (%d wrong)", bad16);
    st_report(st, badbf == 0, "bf16: all 65536 codes decode and re-encode to themselves (%d wrong)", badbf);
    static const struct { float in; uint16_t f16, bf16; } cases[] = {
        { 1.0f + 0x1p-11f, 0x3c00, 0x3f80 },       /* f16 tie -> even (1.0) */
        { 1.0f + 3 * 0x1p-11f, 0x3c02, 0x3f80 },   /* f16 tie -> even (up) */
        { 1.0f + 0x1p-8f, 0x3c04, 0x3f80 },        /* bf16 tie -> even (1.0) */
        { 1.0f + 3 * 0x1p-8f, 0x3c0c, 0x3f82 },    /* bf16 tie -> even (up) */
        { 65504.0f, 0x7bff, 0x4780 },              /* f16 max */
        { 65519.0f, 0x7bff, 0x4780 },              /* below the f16 overflow tie */
        { 65520.0f, 0x7c00, 0x4780 },              /* f16 overflow tie -> inf */
        { 0x1p-24f, 0x0001, 0x3380 },              /* smallest f16 subnormal */
        { 0x1p-25f, 0x0000, 0x3300 },              /* tie -> even (zero) */
        { 1.5f * 0x1p-24f, 0x0002, 0x33c0 },       /* tie -> even (2 x 2^-24) */
        { -0.0f, 0x8000, 0x8000 },
        { 3.0e38f, 0x7c00, 0x7f62 },               /* bf16 keeps it, f16 overflows */
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        if (f16_from_f32(cases[i].in) != cases[i].f16 || bf16_from_f32(cases[i].in) != cases[i].bf16) {
            printf("       %a: f16 %04x (want %04x) bf16 %04x (want %04x)\n", cases[i].in,
                   f16_from_f32(cases[i].in), cases[i].f16, bf16_from_f32(cases[i].in), cases[i].bf16);
            bad++;
        }
    }
    st_report(st, bad == 0, "fp16/bf16 rounding boundaries: %zu cases (%d wrong)",
              sizeof cases / sizeof *cases, bad);
}

/* The references against closed forms: integer inputs in [-4, 4] make every
 * product and partial sum exact in fp32 and double, so all three accumulation
 * kinds must equal the int64 result bit for bit, on all elements and on a
 * row/column selection; all-ones inputs give K everywhere. */
static void st_references(struct selftest *st)
{
    enum { R = 37, K = 29, C = 45 };
    static float x[R * K], y[K * C];
    static double ref[R * C];
    static float f32[R * C];
    int64_t exact[R * C];
    for (int i = 0; i < R * K; i++) x[i] = (float)((int)(rng_at(11, (uint64_t)i) % 9) - 4);
    for (int i = 0; i < K * C; i++) y[i] = (float)((int)(rng_at(12, (uint64_t)i) % 9) - 4);
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) {
            int64_t s = 0;
            for (int k = 0; k < K; k++) s += (int64_t)x[i * K + k] * (int64_t)y[k * C + j];
            exact[i * C + j] = s;
        }
    int bad = 0;
    mm_select(ACC_F64, x, y, K, C, NULL, R, NULL, C, ref);
    for (int i = 0; i < R * C; i++) bad += ref[i] != (double)exact[i];
    for (int kind = ACC_F32_SEQ; kind <= ACC_F32_TILED; kind++) {
        mm_select((enum acc_kind)kind, x, y, K, C, NULL, R, NULL, C, f32);
        for (int i = 0; i < R * C; i++) bad += f32[i] != (float)exact[i];
    }
    uint32_t rows[] = { 0, 17, 36 }, cols[] = { 3, 44 };
    double sel[3 * 2];
    mm_select(ACC_F64, x, y, K, C, rows, 3, cols, 2, sel);
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 2; b++) bad += sel[a * 2 + b] != (double)exact[rows[a] * C + cols[b]];
    st_report(st, bad == 0, "references: integer %dx%dx%d product exact in double, fp32 "
              "sequential, fp32 tiled and a row/column selection (%d wrong)", R, C, K, bad);

    enum { KO = 1000 };
    float *ones = xmalloc(KO * 8 * sizeof(float)), *o32 = xmalloc(64 * sizeof(float));
    for (int i = 0; i < KO * 8; i++) ones[i] = 1.0f;
    double o64[64];
    mm_select(ACC_F64, ones, ones, KO, 8, NULL, 8, NULL, 8, o64);
    mm_select(ACC_F32_TILED, ones, ones, KO, 8, NULL, 8, NULL, 8, o32);
    bad = 0;
    for (int i = 0; i < 64; i++) bad += o64[i] != KO || o32[i] != KO;
    st_report(st, bad == 0, "references: all-ones 8x8x%d gives %d everywhere (%d wrong)", KO, KO, bad);
    free(ones);
    free(o32);
}

/* The tile-covering sample of a 1000 x 777 x 10^4 output checks every row,
 * every column and every tile. */
static void st_sampling(struct selftest *st)
{
    struct output o = { .rows = 1000, .cols = 777, .check_macs = 1000.0 * 777 * 10000 };
    struct plan p;
    plan_build(&p, &o, 0, 99);
    size_t tr = (o.rows + KG_TILE - 1) / KG_TILE, tc = (o.cols + KG_TILE - 1) / KG_TILE;
    unsigned char *tile = xcalloc(tr * tc, 1), *col = xcalloc(o.cols, 1);
    for (size_t r = 0; r < p.nr; r++)
        for (size_t j = 0; j < o.cols; j++) tile[p.rows[r] / KG_TILE * tc + j / KG_TILE] = col[j] = 1;
    size_t missing = 0;
    for (size_t c = 0; c < p.nc; c++)
        for (size_t i = 0; i < o.rows; i++) tile[i / KG_TILE * tc + p.cols[c] / KG_TILE] = 1;
    for (size_t k = 0; k < tr * tc; k++) missing += !tile[k];
    for (size_t j = 0; j < o.cols; j++) missing += !col[j];
    st_report(st, !p.full && missing == 0 && p.nc > 0,
              "sampling: 1000x777 sampled plan (%zu rows, %zu cols) covers every tile, row and "
              "column (%zu missing)", p.nr, p.nc, missing);
    free(tile);
    free(col);
    plan_free(&p);
}

static void st_sha256(struct selftest *st)
{
    struct sha256 h;
    char hex[65];
    sha256_init(&h);
    sha256_update(&h, "abc", 3);
    sha256_hex(&h, hex);
    st_report(st, strcmp(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad") == 0,
              "sha256(\"abc\") matches FIPS 180-4");
}

/* Run one selftest case ("op options...") with fault `inj` (or none) and
 * `repeat` runs; returns 1 if it passed and sets *failed to the gates that
 * failed; -1 (and a "skip" line) if the device lacks the case's format. */
static int st_run(struct device *d, const struct opts *base, const char *args, const struct inject *inj,
                  int repeat, struct kcase *c, unsigned *failed)
{
    char text[160], *argv[24];
    snprintf(text, sizeof text, "%s", args);
    int argc = 0;
    for (char *save = NULL, *t = strtok_r(text, " ", &save); t && argc < 24; t = strtok_r(NULL, " ", &save))
        argv[argc++] = t;
    case_init(c, find_op(argv[0]), "selftest");
    parse_case_args(c, NULL, argc, argv, 1, 0);
    q_resolve(c, d);
    const char *skip = q_unsupported(d, c);
    if (skip) {
        printf("  skip %s: %s\n", c->label, skip);
        case_free(c);
        return -1;
    }
    struct opts o = *base;
    o.quiet = 1, o.inject = inj ? inj->name : NULL, o.repeat = repeat;
    struct tally tl = { 0 };
    *failed = 0;
    int pass = run_case(c, d, &o, 0, 0, &tl, failed);
    case_free(c);
    return pass;
}

/* The selftest's case for a fault: a gemm, unless the fault needs groups
 * or a causal mask. */
static const char *st_case_for(const struct inject *inj)
{
    if (strcmp(inj->name, "group") == 0) return "grouped --dtype bf16 --groups 0,77,1,130,0 --shape 96x70 --bwd";
    if (strcmp(inj->name, "mask") == 0) return "attn --dtype bf16 --seq 113:203 --heads 4:2 --dim 64 --causal --bwd";
    if (inj->unfit == inj_needs_quant) return "gemm --dtype e4m3 --scaling block --shape 300x260x300";
    return "gemm --dtype bf16 --layout NT --shape 300x260x70";
}

/* Clean cases of every op pass every gate on the device; every planted
 * fault makes its own gate fail. */
static void st_gates(struct selftest *st, struct device *d, const struct opts *base)
{
    static const char *const clean[] = {
        "gemm --dtype f32 --layout NN --shape 200x150x90",
        "gemm --dtype f16 --layout TN --shape 130x257x64",
        "gemm --dtype bf16 --layout TT --shape 129x131x77 --bwd",
        "grouped --dtype f16 --layout NN --groups 0,65,1,130,0 --shape 70x33 --bwd",
        "attn --dtype bf16 --seqlens 0,37,130:70,5:0 --heads 4:2 --dim 80 --causal --bwd",
        "attn --dtype f16 --seq 239:1 --heads 2:1 --dim 64 --causal --bwd",
        "gemm --dtype e4m3 --scaling row --shape 200x150x96",
        "gemm --dtype e5m2 --scaling block --out f32 --shape 129x131x300",
        "gemm --dtype mxfp4 --mx-rule up --shape 130x70x101",
        "grouped --dtype mxfp8 --groups 0,65,1,130 --shape 70x96",
    };
    struct kcase c;
    unsigned failed;
    char label[160];
    for (size_t i = 0; i < sizeof clean / sizeof *clean; i++) {
        int pass = st_run(d, base, clean[i], NULL, 2, &c, &failed);
        if (pass < 0) continue;
        snprintf(label, sizeof label, "%s", c.label);
        st_report(st, pass, "clean %s passes every gate, 2 runs bitwise equal", label);
    }
    for (size_t i = 0; i < N_INJECTS; i++) {
        const struct inject *inj = &INJECTS[i];
        int pass = st_run(d, base, st_case_for(inj), inj, inj->stage == INJ_REPEAT ? 2 : 1, &c, &failed);
        if (pass < 0) continue;
        size_t g = 0;
        while (g < N_GATES && strcmp(GATES[g].name, inj->gate) != 0) g++;
        char names[256] = "";
        for (size_t k = 0; k < N_GATES; k++)
            if (failed & (1u << k))
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s",
                         *names ? "," : "", GATES[k].name);
        st_report(st, !pass && (failed & (1u << g)), "--inject %-9s (%s) caught by %s on %s [failed: %s]",
                  inj->name, inj->what, inj->gate, c.label, *names ? names : "none");
    }
}

/* kgate selftest: arithmetic and references on the host, then every gate
 * against clean runs and planted faults on the chosen device. */
static int cmd_selftest(const struct opts *o)
{
    struct selftest st = { 0, 0 };
    printf("host checks\n");
    st_sha256(&st);
    st_formats(&st);
    st_quantizer(&st);
    st_references(&st);
    st_sampling(&st);
    struct device d;
    struct arm arm;
    char *file;
    open_device(&d, o);
    arm_from_opts(&arm, o, &file);
    arm_build(&d, &arm);
    arm_use(&d, &arm);
    printf("gate checks on %s (%s), %s %s\n", d.name, d.arch, arm.src_name, arm.options);
    st_gates(&st, &d, o);
    close_device(&d);
    arm_free(&arm);
    free(file);
    printf("selftest: %d passed, %d failed\n", st.passed, st.failed);
    return st.failed ? EXIT_GATE : EXIT_PASS;
}

/* --- codec --- */

/* A format name of `kgate codec`: an element format (e4m3/e5m2 in the
 * encoding `enc` names, e4m3fnuz, e5m2fnuz, e2m1), or e8m0 (returns Q_COUNT). */
static enum qfmt codec_format(const char *s, const char *enc)
{
    int fnuz = enc && strcmp(enc, "fnuz") == 0;
    if (enc && !fnuz && strcmp(enc, "ocp") != 0) die(EXIT_USAGE, "codec: --fp8 %s: expected ocp or fnuz", enc);
    if (enc && strcmp(s, "e4m3") != 0 && strcmp(s, "e5m2") != 0)
        die(EXIT_USAGE, "codec: --fp8 applies to e4m3 and e5m2, not %s", s);
    if (strcmp(s, "e8m0") == 0) return Q_COUNT;
    if (strcmp(s, "e4m3") == 0) return fnuz ? Q_E4M3_FNUZ : Q_E4M3;
    if (strcmp(s, "e5m2") == 0) return fnuz ? Q_E5M2_FNUZ : Q_E5M2;
    for (int f = 0; f < Q_COUNT; f++)
        if (strcmp(s, QFMTS[f].name) == 0) return (enum qfmt)f;
    die(EXIT_USAGE, "codec: unknown format '%s' (e4m3, e5m2, e4m3fnuz, e5m2fnuz, e2m1, e8m0)", s);
}

/* A value as codec prints it: %.9g, NaN always "nan". */
static void codec_value(float v)
{
    if (isnan(v)) printf("nan");
    else printf("%.9g", v);
}

/* Encode one value written as text (an fp32 value: decimal, hex float,
 * nan, inf); exit 2 if it is not one. */
static void codec_encode(enum qfmt f, const char *text)
{
    char *end;
    errno = 0;
    float v = strtof(text, &end);
    if (end == text || *end) die(EXIT_USAGE, "codec: '%s' is not a number", text);
    if (errno == ERANGE && isinf(v)) die(EXIT_USAGE, "codec: %s is beyond fp32's range", text);
    unsigned code = q_encode(f, v);
    printf("%s 0x%02x ", text, code);
    codec_value(q_decode(f, code));
    putchar('\n');
}

/* kgate codec FORMAT [--fp8 ocp|fnuz] (--decode-all | X ... | < lines):
 * ref.c's own decoders and encoders, for tests and for a kernel engineer's
 * questions ("what does 0x7e mean in e4m3fnuz?"). */
static int cmd_codec(int argc, char **argv)
{
    const char *fmt = NULL, *enc = NULL;
    int decode_all = 0, nvalues = 0;
    char **values = xmalloc((size_t)argc * sizeof *values);
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--fp8") == 0) {
            if (i + 1 == argc) die(EXIT_USAGE, "codec: --fp8 needs ocp or fnuz");
            enc = argv[++i];
        } else if (strcmp(argv[i], "--decode-all") == 0) {
            decode_all = 1;
        } else if (!fmt) {
            fmt = argv[i];
        } else {
            values[nvalues++] = argv[i];
        }
    }
    if (!fmt) die(EXIT_USAGE, "codec: give a format (e4m3, e5m2, e4m3fnuz, e5m2fnuz, e2m1, e8m0)");
    enum qfmt f = codec_format(fmt, enc);
    if (decode_all) {
        if (nvalues) die(EXIT_USAGE, "codec: --decode-all takes no values");
        unsigned n = f == Q_COUNT ? 256 : 1u << q_bits(f);
        for (unsigned c = 0; c < n; c++) {
            printf("0x%02x ", c);
            codec_value(f == Q_COUNT ? e8m0_decode(c) : q_decode(f, c));
            putchar('\n');
        }
        return EXIT_PASS;
    }
    if (f == Q_COUNT) die(EXIT_USAGE, "codec: e8m0 is decode-only (--decode-all)");
    for (int i = 0; i < nvalues; i++) codec_encode(f, values[i]);
    if (nvalues) { free(values); return EXIT_PASS; }
    free(values);
    char line[256];
    for (int n = 1; fgets(line, sizeof line, stdin); n++) {
        size_t len = strlen(line);
        if (len == sizeof line - 1 && line[len - 1] != '\n' && !feof(stdin))
            die(EXIT_USAGE, "codec: stdin line %d: longer than %zu characters", n, sizeof line - 2);
        while (len && isspace((unsigned char)line[len - 1])) line[--len] = 0;
        if (*line) codec_encode(f, line);
    }
    return EXIT_PASS;
}

/* --- isa --- */

/* Find an executable: each candidate is a path or a name looked up in $PATH. */
static int find_tool(const char *const *names, char *out, size_t n)
{
    const char *path = getenv("PATH");
    for (int i = 0; names[i]; i++) {
        if (strchr(names[i], '/')) {
            if (access(names[i], X_OK) == 0) { snprintf(out, n, "%s", names[i]); return 0; }
            continue;
        }
        for (const char *p = path ? path : ""; *p;) {
            size_t len = strcspn(p, ":");
            snprintf(out, n, "%.*s/%s", (int)len, p, names[i]);
            if (len && access(out, X_OK) == 0) return 0;
            p += len + (p[len] == ':');
        }
    }
    return -1;
}

/* Append `name` to a ", "-separated list in buf; "..." ends a list that no
 * longer fits. */
static void list_add(char *buf, size_t n, const char *name)
{
    size_t used = strlen(buf);
    if (used + 4 >= n || (used >= 3 && strcmp(buf + used - 3, "...") == 0)) return;
    if ((size_t)snprintf(buf + used, n - used, "%s%s", used ? ", " : "", name) >= n - used)
        snprintf(buf + n - 4, 4, "...");
}

/* In a child process: exec argv (argv[0] a path, no shell) with its stdout
 * and stderr on fd.  Returns only if it cannot (errno set). */
static void exec_into(int fd, const char *const *argv)
{
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    close(fd);
    execv(argv[0], (char *const *)argv);
}

/* Start the program at argv[0] (a path) with its stdout and stderr into a
 * pipe, without a shell: the pipe's read end, or NULL (errno set). */
static FILE *tool_open(const char *const *argv, pid_t *pid)
{
    int fd[2];
    if (pipe(fd) != 0) return NULL;
    fflush(NULL);
    if ((*pid = fork()) < 0) {
        close(fd[0]), close(fd[1]);
        return NULL;
    }
    if (*pid == 0) {
        close(fd[0]);
        exec_into(fd[1], argv);
        _exit(127);
    }
    close(fd[1]);
    FILE *f = fdopen(fd[0], "r");
    if (!f) close(fd[0]), waitpid(*pid, NULL, 0);
    return f;
}

/* Read what is left of a tool_open pipe, close it and reap the tool: its
 * exit status, 128 + the signal that ended it, or 127 if it did not run. */
static int tool_close(FILE *f, pid_t pid)
{
    char buf[4096];
    while (fread(buf, 1, sizeof buf, f) > 0) {}
    fclose(f);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return 127;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* One line of a tool's output into buf, without its newline; the rest of a
 * line longer than buf is dropped.  0 at the end of the output. */
static int tool_line(FILE *f, char *buf, size_t n)
{
    if (!fgets(buf, (int)n, f)) return 0;
    size_t len = strlen(buf);
    if (len && buf[len - 1] == '\n') buf[len - 1] = 0;
    else for (int ch = 0; ch != EOF && ch != '\n';) ch = fgetc(f);
    return 1;
}

/* Offline compilers of HIP device code for AMD, tried in order when no
 * hiprtc loads (kernels.hip's prelude covers clang without HIP headers). */
static const char *const HIP_CLANG[] = { "/opt/rocm/llvm/bin/clang", "clang-20", "clang-19", NULL };

/* The first line of `clang --version`: the compiler's identity in the cache
 * key.  Exits 5 if clang does not answer. */
static void clang_ident(const char *clang, char *out, size_t n)
{
    const char *argv[] = { clang, "--version", NULL };
    pid_t pid;
    FILE *f = tool_open(argv, &pid);
    if (!f) die(EXIT_DEVICE, "cannot run %s: %s", clang, strerror(errno));
    int got = tool_line(f, out, n);
    if (tool_close(f, pid) != 0 || !got || !*out) die(EXIT_DEVICE, "%s --version failed", clang);
}

/* The offline compiler's child process: exec argv (argv[0] a path) with
 * stdout and stderr into the compile log; 2 (could not run) if it cannot. */
static int clang_child(const char *const *argv, const char *log_path)
{
    compiler_test_hook();
    int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return 2;
    exec_into(fd, argv);
    dprintf(STDERR_FILENO, "cannot run %s: %s\n", argv[0], strerror(errno));
    return 2;
}

/* Compile `src` for AMD `arch` with the offline compiler `clang` (a path):
 * device code only, no HIP headers (kernels.hip's bare-clang prelude), -O3,
 * plus `extra` options.  Same cache as compile_source, keyed by clang's
 * version line, the source (with a #line naming it) and the options; that
 * source is written beside the code object.  The compile runs in a child process, with
 * compile_source's crash, hang and error handling (exit 5). */
static void compile_clang(const char *clang, const char *src, const char *name, const char *arch,
                          const char *const *extra, int nextra, struct code_obj *co)
{
    char archopt[128], ident[200], what[PATH_MAX + 600];
    snprintf(archopt, sizeof archopt, "--offload-arch=%s", arch);
    /* -fuse-cuid=none: no symbol named after the path of the source's copy,
     * so the code object is the same wherever the cache is. */
    const char *opts[64] = { "-x", "hip", archopt, "-nogpulib", "-nogpuinc", "--cuda-device-only",
                             "--no-gpu-bundle-output", "-fuse-cuid=none", "-O3" };
    int nopts = 9;
    for (int i = 0; i < nextra && nopts < 64; i++) opts[nopts++] = extra[i];
    clang_ident(clang, ident, sizeof ident);
    snprintf(what, sizeof what, "%s for %s with %s (%s)", name, arch, clang, ident);
    size_t len = strlen(src) + strlen(name) + 32;
    char *text = xmalloc(len);   /* what clang reads: messages (and the code object) name the source */
    len = (size_t)snprintf(text, len, "#line 1 \"%s\"\n%s", strpbrk(name, "\"\\\n") ? "source" : name, src);
    if (!cache_lookup(ident, text, opts, nopts, co)) {
        char src_path[PATH_MAX + 8], out_path[PATH_MAX + 32];
        snprintf(src_path, sizeof src_path, "%.*s.hip", (int)strlen(co->bin_path) - 4, co->bin_path);
        snprintf(out_path, sizeof out_path, "%s.tmp.%d", co->bin_path, (int)getpid());
        if (write_file_atomic(src_path, text, len) != 0)
            die(EXIT_DEVICE, "cannot write %s: %s", src_path, strerror(errno));
        const char *argv[64 + 5];
        int n = 0;
        argv[n++] = clang;
        for (int i = 0; i < nopts; i++) argv[n++] = opts[i];
        argv[n++] = src_path, argv[n++] = "-o", argv[n++] = out_path, argv[n] = NULL;
        pid_t pid = compile_fork();
        if (pid == 0) _exit(clang_child(argv, co->log_path));
        co->seconds = compile_wait(pid, what, co);
        if (rename(out_path, co->bin_path) != 0)
            die(EXIT_DEVICE, "%s compiled %s but wrote no %s", clang, name, out_path);
    }
    free(text);
    cache_finish(what, co);
}

/* Compile the kernels for `arch` with the platform's run-time compiler, or,
 * for AMD when no hiprtc loads, with an offline clang (HIP_CLANG).  Exits 3
 * naming everything tried when there is neither. */
static void isa_compile(enum platform pf, const struct arm *a, const char *arch, struct code_obj *co)
{
    const char *src = a->src, *name = a->src_name;
    const char *const *defs = (const char *const *)a->defines;
    struct rtc c;
    char msg[1400], clang[PATH_MAX];
    if (rtc_open(pf, &c, msg, sizeof msg) == 0) {
        compile_source(&c, pf, src, name, arch, defs, a->ndefines, co);
        return;
    }
    if (pf == PF_HIP && find_tool(HIP_CLANG, clang, sizeof clang) == 0) {
        compile_clang(clang, src, name, arch, defs, a->ndefines, co);
        return;
    }
    if (pf == PF_CUDA) die(EXIT_NORUNTIME, "%s", msg);
    char tried[256] = "";
    for (int i = 0; HIP_CLANG[i]; i++) list_add(tried, sizeof tried, HIP_CLANG[i]);
    die(EXIT_NORUNTIME, "%s, and no clang for HIP (tried %s)", msg, tried);
}

/* Matrix-unit instruction classes (--expect): each on one platform, with the
 * opcode prefixes that belong to it. */
enum { IC_WGMMA, IC_MMA, IC_MFMA, IC_WMMA, IC_COUNT };
static const struct { const char *name; enum platform pf; const char *ops[4]; } ISA_CLASSES[IC_COUNT] = {
    { "wgmma", PF_CUDA, { "HGMMA", "QGMMA", "IGMMA", NULL } }, /* sm_90 warpgroup MMA */
    { "mma", PF_CUDA, { "HMMA", "IMMA", NULL } },              /* warp-level mma.sync */
    { "mfma", PF_HIP, { "v_mfma", "v_smfmac", NULL } },        /* CDNA matrix cores */
    { "wmma", PF_HIP, { "v_wmma", "v_swmmac", NULL } },        /* RDNA 3 and 4 */
};
#define ISA_CLASS_NAMES "wgmma, mma, mfma, wmma"
static const char *const VENDOR[PF_COUNT] = { "NVIDIA", "AMD" };

/* The class named `name`, or -1. */
static int isa_class(const char *name)
{
    for (int c = 0; c < IC_COUNT; c++)
        if (strcmp(name, ISA_CLASSES[c].name) == 0) return c;
    return -1;
}

/* The class of opcode `op` on platform pf, or -1: op is one of the class's
 * prefixes followed by '.', '_' or nothing ("HMMA.16816.F32.BF16",
 * "v_mfma_f32_32x32x8_bf16"). */
static int isa_op_class(enum platform pf, const char *op)
{
    for (int c = 0; c < IC_COUNT; c++) {
        if (ISA_CLASSES[c].pf != pf) continue;
        for (int i = 0; ISA_CLASSES[c].ops[i]; i++) {
            size_t len = strlen(ISA_CLASSES[c].ops[i]);
            if (strncmp(op, ISA_CLASSES[c].ops[i], len) == 0 && strchr("._", op[len])) return c;
        }
    }
    return -1;
}

/* A function's resources, as its compiler recorded them (-1: not recorded). */
enum { IR_REGS, IR_AGPRS, IR_SGPRS, IR_SHARED, IR_STACK, IR_LOCAL, IR_VSPILL, IR_SSPILL, IR_COUNT };
/* The resource columns of each platform: heading and resource. */
static const struct { const char *head; int r; } ISA_COLUMNS[PF_COUNT][IR_COUNT] = {
    { { "regs", IR_REGS }, { "shared", IR_SHARED }, { "stack", IR_STACK }, { "local", IR_LOCAL } },
    { { "vgpr", IR_REGS }, { "agpr", IR_AGPRS }, { "sgpr", IR_SGPRS }, { "lds", IR_SHARED },
      { "scratch", IR_STACK }, { "vspill", IR_VSPILL }, { "sspill", IR_SSPILL } },
};

/* A key of a tool's resource records, and the resource it gives. */
struct isa_key { const char *key; int r; };

/* The resource that `key` (klen characters) names in keys[0..n), or -1. */
static int isa_key(const struct isa_key *keys, size_t n, const char *key, size_t klen)
{
    for (size_t i = 0; i < n; i++)
        if (strlen(keys[i].key) == klen && strncmp(key, keys[i].key, klen) == 0) return keys[i].r;
    return -1;
}

/* One function of a code object, as its disassembly shows it. */
struct isa_kernel {
    char name[128];
    int listed;                /* the disassembler showed its code */
    int insts;                 /* instructions, not counting the nops that pad its end */
    int nops;                  /* nops since its last other instruction: padding, if last */
    int matrix[IC_COUNT];      /* matrix-unit instructions, by class */
    char first[64];            /* the first matrix instruction's opcode; "" if none */
    long res[IR_COUNT];
};

/* A line parser's state across the lines of one tool's output. */
struct isa_parse {
    int cur;                   /* the function lines now belong to; -1 none */
    int field;                 /* nvdisasm: the resource a coming value gives; -1 none */
    char name[128];            /* ... and whose */
    long vals[IR_COUNT];       /* llvm-readobj: a record's values before its .name */
};

struct isa_list;

/* A tool that lists a code object: the names it is looked for under, its
 * option, the parser of its output lines, and (for resources) what the
 * resource columns then mean. */
struct isa_tool {
    enum platform pf;
    const char *names[6];
    const char *arg;           /* NULL: the code object is its only argument */
    void (*line)(struct isa_list *l, struct isa_parse *p, const char *line);
    const char *legend;        /* NULL: it gives no resources */
};

/* The listing of one code object: its functions in the disassembler's
 * order, and the tools that made it. */
struct isa_list {
    enum platform pf;
    char bin[PATH_MAX];
    struct isa_kernel *k;
    int n, cap;
    const struct isa_tool *dis, *res;   /* res NULL: no resource reader found */
    char dis_path[PATH_MAX], res_path[PATH_MAX];
    char res_tried[512];                /* the resource readers looked for */
};

/* The index of function `name` (its first `len` characters) in l, or -1. */
static int isa_find(const struct isa_list *l, const char *name, size_t len)
{
    for (int i = 0; i < l->n; i++)
        if (strlen(l->k[i].name) == len && strncmp(l->k[i].name, name, len) == 0) return i;
    return -1;
}

/* The index of function `name` (`len` characters), added (resources not
 * recorded) if l lacks it. */
static int isa_add(struct isa_list *l, const char *name, size_t len)
{
    int i = isa_find(l, name, len);
    if (i >= 0) return i;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->k = realloc(l->k, (size_t)l->cap * sizeof *l->k);
        if (!l->k) die(EXIT_DEVICE, "out of host memory listing %s", l->bin);
    }
    struct isa_kernel *k = &l->k[l->n];
    memset(k, 0, sizeof *k);
    snprintf(k->name, sizeof k->name, "%.*s", (int)len, name);
    for (int r = 0; r < IR_COUNT; r++) k->res[r] = -1;
    return l->n++;
}

/* Count instruction `op` in function i (a nop once another instruction
 * follows it: the nops at the end of a function pad it). */
static void isa_count(struct isa_list *l, int i, const char *op)
{
    struct isa_kernel *k = &l->k[i];
    if (strcmp(op, l->pf == PF_CUDA ? "NOP" : "s_nop") == 0) {
        k->nops++;
        return;
    }
    k->insts += k->nops + 1;
    k->nops = 0;
    int c = isa_op_class(l->pf, op);
    if (c < 0) return;
    if (!*k->first) snprintf(k->first, sizeof k->first, "%s", op);
    k->matrix[c]++;
}

/* The opcode of a SASS code line (an address comment, an optional
 * predicate, then "HMMA.16816.F32 R8, ..."), or NULL for any other line
 * (encoding comments, labels, directives). */
static const char *sass_opcode(const char *line, char *buf, size_t n)
{
    const char *p = line + strspn(line, " \t"), *end = strstr(p, "*/");
    if (strncmp(p, "/*", 2) != 0 || !end) return NULL;
    p = end + 2 + strspn(end + 2, " \t");
    if (*p == '@') p += strcspn(p, " \t"), p += strspn(p, " \t");
    if (!(*p >= 'A' && *p <= 'Z')) return NULL;
    snprintf(buf, n, "%.*s", (int)strcspn(p, " \t;"), p);
    return buf;
}

/* cuobjdump -sass: "Function : NAME" opens a function, its code lines follow. */
static void parse_sass(struct isa_list *l, struct isa_parse *p, const char *line)
{
    const char *f = strstr(line, "Function : ");
    char op[64];
    if (f) {
        p->cur = isa_add(l, f + 11, strcspn(f + 11, " \t"));
        l->k[p->cur].listed = 1;
    } else if (p->cur >= 0 && sass_opcode(line, op, sizeof op)) {
        isa_count(l, p->cur, op);
    }
}

/* cuobjdump -res-usage: " Function NAME:" then "REG:40 STACK:0 SHARED:8448
 * LOCAL:0 CONSTANT[0]:...". */
static void parse_resusage(struct isa_list *l, struct isa_parse *p, const char *line)
{
    static const struct isa_key KEYS[] = {
        { "REG", IR_REGS }, { "STACK", IR_STACK }, { "SHARED", IR_SHARED }, { "LOCAL", IR_LOCAL },
    };
    const char *s = line + strspn(line, " \t");
    if (strncmp(s, "Function ", 9) == 0) {
        p->cur = isa_find(l, s + 9, strcspn(s + 9, ":"));
        return;
    }
    for (; p->cur >= 0 && *s; s += strcspn(s, " \t"), s += strspn(s, " \t")) {
        size_t klen = strcspn(s, ": \t");
        int r = s[klen] == ':' ? isa_key(KEYS, sizeof KEYS / sizeof *KEYS, s, klen) : -1;
        if (r >= 0) l->k[p->cur].res[r] = strtol(s + klen + 1, NULL, 10);
    }
}

/* nvdisasm (the whole cubin): a "//---- .text.NAME ----" header opens a
 * function's code.  Resources: the .nv.info records EIATTR_REGCOUNT and
 * EIATTR_MIN_STACK_SIZE ("index@(NAME)", then ".word 0x..."), and the sizes
 * (".zero N") of sections .nv.shared.NAME and .nv.local.NAME; nvdisasm shows
 * every section, so a function without them has none. */
static void parse_nvdisasm(struct isa_list *l, struct isa_parse *p, const char *line)
{
    const char *s;
    char op[64];
    if (strncmp(line, "//--", 4) == 0) {
        s = line + strspn(line, "/- ");
        size_t len = strcspn(s, " \t");
        p->cur = p->field = -1;
        if (strncmp(s, ".text.", 6) == 0) {
            p->cur = isa_add(l, s + 6, len - 6);
            struct isa_kernel *k = &l->k[p->cur];
            k->listed = 1;
            if (k->res[IR_SHARED] < 0) k->res[IR_SHARED] = 0;
            if (k->res[IR_LOCAL] < 0) k->res[IR_LOCAL] = 0;
        } else if (strncmp(s, ".nv.shared.", 11) == 0 || strncmp(s, ".nv.local.", 10) == 0) {
            p->field = s[4] == 's' ? IR_SHARED : IR_LOCAL;
            s += p->field == IR_SHARED ? 11 : 10, len -= p->field == IR_SHARED ? 11 : 10;
            snprintf(p->name, sizeof p->name, "%.*s", (int)len, s);
        }
    } else if ((s = strstr(line, "nvinfo : "))) {
        p->field = strstr(s, "EIATTR_REGCOUNT") ? IR_REGS : strstr(s, "EIATTR_MIN_STACK_SIZE") ? IR_STACK : -1;
        *p->name = 0;
    } else if (p->field >= 0 && (s = strstr(line, "index@("))) {
        snprintf(p->name, sizeof p->name, "%.*s", (int)strcspn(s + 7, ")"), s + 7);
    } else if (p->field >= 0 && *p->name && ((s = strstr(line, ".word")) || (s = strstr(line, ".zero")))) {
        int i = isa_add(l, p->name, strlen(p->name));
        l->k[i].res[p->field] = strtol(s + 5, NULL, 0);
        p->field = -1;
    } else if (p->cur >= 0 && sass_opcode(line, op, sizeof op)) {
        isa_count(l, p->cur, op);
    }
}

/* llvm-objdump -d: "0000000000001900 <NAME>:" opens a function; its
 * instructions are indented ("\tv_mfma_f32_32x32x8_bf16 v[0:15], ..."). */
static void parse_objdump(struct isa_list *l, struct isa_parse *p, const char *line)
{
    const char *s = strchr(line, '<');
    if (*line != ' ' && *line != '\t' && s && strstr(s, ">:")) {
        p->cur = isa_add(l, s + 1, strcspn(s + 1, ">"));
        l->k[p->cur].listed = 1;
        return;
    }
    if (p->cur < 0 || (*line != ' ' && *line != '\t')) return;
    s = line + strspn(line, " \t");
    if (*s < 'a' || *s > 'z') return;
    char op[64];
    snprintf(op, sizeof op, "%.*s", (int)strcspn(s, " \t"), s);
    isa_count(l, p->cur, op);
}

/* llvm-readobj --notes: the amdhsa.kernels metadata (YAML).  A kernel's
 * record starts "  - .key:", its keys are ".key: value" 4 columns in (its
 * .args list is deeper); its .name comes after some of its values. */
static void parse_notes(struct isa_list *l, struct isa_parse *p, const char *line)
{
    static const struct isa_key KEYS[] = {
        { ".vgpr_count", IR_REGS }, { ".agpr_count", IR_AGPRS }, { ".sgpr_count", IR_SGPRS },
        { ".group_segment_fixed_size", IR_SHARED }, { ".private_segment_fixed_size", IR_STACK },
        { ".vgpr_spill_count", IR_VSPILL }, { ".sgpr_spill_count", IR_SSPILL },
    };
    if (strncmp(line, "  - .", 5) == 0) {
        p->cur = -1;
        for (int r = 0; r < IR_COUNT; r++) p->vals[r] = -1;
    } else if (strncmp(line, "    .", 5) != 0) {
        return;
    }
    const char *key = line + 4, *val = key + strcspn(key, ":");
    size_t klen = (size_t)(val - key);
    if (!*val) return;
    val += 1 + strspn(val + 1, " '\"");
    if (klen == 5 && strncmp(key, ".name", 5) == 0) {
        if ((p->cur = isa_find(l, val, strcspn(val, " '\""))) >= 0)
            for (int r = 0; r < IR_COUNT; r++)
                if (p->vals[r] >= 0) l->k[p->cur].res[r] = p->vals[r];
        return;
    }
    int r = isa_key(KEYS, sizeof KEYS / sizeof *KEYS, key, klen);
    if (r >= 0) *(p->cur >= 0 ? &l->k[p->cur].res[r] : &p->vals[r]) = strtol(val, NULL, 10);
}

/* Disassemblers, per platform in order of preference.  cuobjdump's resources
 * come from ISA_RESOURCES; nvdisasm's from its own listing.  llvm-objdump 14
 * (Debian's unversioned one) cannot read gfx942, hence the newer ones first. */
static const struct isa_tool ISA_DISASM[] = {
    { PF_CUDA, { "cuobjdump", "/usr/local/cuda/bin/cuobjdump" }, "-sass", parse_sass, NULL },
    { PF_CUDA, { "nvdisasm", "/usr/local/cuda/bin/nvdisasm" }, NULL, parse_nvdisasm,
      "regs: registers per thread (EIATTR_REGCOUNT); shared: static shared memory, bytes per block; "
      "stack (EIATTR_MIN_STACK_SIZE), local: bytes per thread, nonzero for spills or local arrays "
      "(nvdisasm)" },
    { PF_HIP, { "/opt/rocm/llvm/bin/llvm-objdump", "llvm-objdump-20", "llvm-objdump-19", "llvm-objdump" },
      "-d", parse_objdump, NULL },
};
/* Resource readers, per platform in order of preference. */
static const struct isa_tool ISA_RESOURCES[] = {
    { PF_CUDA, { "cuobjdump", "/usr/local/cuda/bin/cuobjdump" }, "-res-usage", parse_resusage,
      "regs: registers per thread; shared: static shared memory, bytes per block; stack, local: bytes "
      "per thread, nonzero for spills or local arrays (cuobjdump -res-usage)" },
    { PF_HIP, { "/opt/rocm/llvm/bin/llvm-readobj", "llvm-readobj-20", "llvm-readobj-19", "llvm-readobj" },
      "--notes", parse_notes,
      "vgpr, agpr, sgpr: registers; lds: bytes per workgroup; scratch: bytes per work-item; vspill, "
      "sspill: registers spilled (amdhsa.kernels, llvm-readobj --notes)" },
};

/* The first tool of rows[0..nrows) for platform pf that is installed (its
 * path in `path`), or NULL; `tried` lists the names looked for. */
static const struct isa_tool *isa_find_tool(const struct isa_tool *rows, size_t nrows, enum platform pf,
                                            char *path, size_t n, char *tried, size_t tn)
{
    for (size_t i = 0; i < nrows; i++) {
        if (rows[i].pf != pf) continue;
        if (find_tool(rows[i].names, path, n) == 0) return &rows[i];
        for (int j = 0; rows[i].names[j]; j++) list_add(tried, tn, rows[i].names[j]);
    }
    return NULL;
}

/* Run tool t (at `path`) on l's code object, each line of its output to
 * t's parser; 0 if it exited 0, else -1 and `why` says how it failed. */
static int isa_run(const struct isa_tool *t, const char *path, struct isa_list *l, char *why, size_t n)
{
    const char *argv[] = { path, t->arg ? t->arg : l->bin, t->arg ? l->bin : NULL, NULL };
    pid_t pid;
    FILE *f = tool_open(argv, &pid);
    if (!f) {
        snprintf(why, n, "cannot run %.300s: %s", path, strerror(errno));
        return -1;
    }
    struct isa_parse p = { .cur = -1, .field = -1 };
    for (int r = 0; r < IR_COUNT; r++) p.vals[r] = -1;
    char line[1024], last[200] = "";
    while (tool_line(f, line, sizeof line)) {
        t->line(l, &p, line);
        if (*line) snprintf(last, sizeof last, "%.199s", line);
    }
    int rc = tool_close(f, pid);
    if (rc == 0) return 0;
    snprintf(why, n, "%.300s %s %.300s failed (exit %d): %s", path, t->arg ? t->arg : "", l->bin, rc, last);
    return -1;
}

enum { ISA_LISTED, ISA_NO_DISASSEMBLER, ISA_TOOL_FAILED };

/* Fill l (pf and bin set): its functions and their instructions from the
 * platform's first disassembler found, then their resources from its first
 * resource reader found.  ISA_LISTED, or why not (in `why`). */
static int isa_disassemble(struct isa_list *l, char *why, size_t n)
{
    char tried[512] = "";
    l->dis = isa_find_tool(ISA_DISASM, sizeof ISA_DISASM / sizeof *ISA_DISASM, l->pf, l->dis_path,
                           sizeof l->dis_path, tried, sizeof tried);
    if (!l->dis) {
        snprintf(why, n, "no disassembler found (tried %s)", tried);
        return ISA_NO_DISASSEMBLER;
    }
    if (isa_run(l->dis, l->dis_path, l, why, n) != 0) return ISA_TOOL_FAILED;
    int kept = 0;
    for (int i = 0; i < l->n; i++)     /* nvdisasm: resources of no function shown */
        if (l->k[i].listed) l->k[kept++] = l->k[i];
    if (!(l->n = kept)) {
        snprintf(why, n, "%.300s shows no function in %.300s", l->dis_path, l->bin);
        return ISA_TOOL_FAILED;
    }
    l->res = isa_find_tool(ISA_RESOURCES, sizeof ISA_RESOURCES / sizeof *ISA_RESOURCES, l->pf,
                           l->res_path, sizeof l->res_path, l->res_tried, sizeof l->res_tried);
    if (l->res && isa_run(l->res, l->res_path, l, why, n) != 0) return ISA_TOOL_FAILED;
    return ISA_LISTED;
}

/* The listing of the code object at bin_path (platform pf), disassembled
 * once per process: the last listing made is kept, so that gating several
 * cases on one code object runs the disassembler once.  NULL when there is
 * none: `why` says why, *status (if not NULL) is ISA_NO_DISASSEMBLER or
 * ISA_TOOL_FAILED. */
static const struct isa_list *isa_listing(enum platform pf, const char *bin_path, char *why, size_t n,
                                          int *status)
{
    static struct isa_list l;
    if (l.n && l.pf == pf && strcmp(l.bin, bin_path) == 0) return &l;
    free(l.k);
    memset(&l, 0, sizeof l);
    l.pf = pf;
    snprintf(l.bin, sizeof l.bin, "%s", bin_path);
    int st = isa_disassemble(&l, why, n);
    if (status) *status = st;
    if (st == ISA_LISTED) return &l;
    free(l.k);
    memset(&l, 0, sizeof l);
    return NULL;
}

/* Does the listing hold matrix instructions of class c?  With `kernels`
 * (nkernels names): each of them must be in the code object and hold one;
 * with kernels NULL: at least one function of the code object must.  1
 * pass, 0 fail; `why` names the functions that hold it, or those that lack
 * it. */
static int isa_check(const struct isa_list *l, int c, const char *const *kernels, int nkernels, char *why,
                     size_t n)
{
    const char *cls = ISA_CLASSES[c].name;
    char names[600] = "";
    int count = 0;
    if (!kernels) {
        for (int i = 0; i < l->n; i++)
            if (l->k[i].matrix[c]) count++, list_add(names, sizeof names, l->k[i].name);
        char other[32] = "";
        if (ISA_CLASSES[c].pf != l->pf) snprintf(other, sizeof other, " (an %s class)", VENDOR[ISA_CLASSES[c].pf]);
        if (count) snprintf(why, n, "%d of %d kernels hold %s instructions: %s", count, l->n, cls, names);
        else snprintf(why, n, "none of the %d kernels holds %s instructions%s", l->n, cls, other);
        return count > 0;
    }
    for (int j = 0; j < nkernels; j++) {
        int i = isa_find(l, kernels[j], strlen(kernels[j]));
        char item[200];
        snprintf(item, sizeof item, "%s%s", kernels[j], i < 0 ? " (not in the code object)" : "");
        if (i < 0 || !l->k[i].matrix[c]) count++, list_add(names, sizeof names, item);
    }
    if (count) snprintf(why, n, "%d of %d kernels lack %s instructions: %s", count, nkernels, cls, names);
    else snprintf(why, n, "all %d kernels hold %s instructions", nkernels, cls);
    return count == 0;
}

/* Gate: does the code object at bin_path (platform pf) hold matrix
 * instructions of class `expect` (wgmma, mma, mfma, wmma)?  With `kernels`
 * (nkernels names, e.g. the kernels a case launched) each of them must hold
 * one; with kernels NULL, at least one of its functions must.  1 pass, 0
 * fail, `why` says what: the kernels that hold it or lack it, or that there
 * is no disassembler (never a pass then).  Prints nothing on stdout. */
static int isa_expect(enum platform pf, const char *bin_path, const char *expect, const char *const *kernels,
                      int nkernels, char *why, size_t n)
{
    int c = isa_class(expect);
    if (c < 0) {
        snprintf(why, n, "unknown matrix instruction class '%s' (%s)", expect, ISA_CLASS_NAMES);
        return 0;
    }
    const struct isa_list *l = isa_listing(pf, bin_path, why, n, NULL);
    return l ? isa_check(l, c, kernels, nkernels, why, n) : 0;
}

/* Print the listing: a row per function (instructions, matrix instructions
 * in all and by class, resources, the first matrix instruction), then what
 * the resource columns mean and where they came from. */
static void isa_print(const struct isa_list *l)
{
    int w = 6;
    for (int i = 0; i < l->n; i++) w = (int)strlen(l->k[i].name) > w ? (int)strlen(l->k[i].name) : w;
    printf("%-*s %7s %7s", w, "kernel", "insts", "matrix");
    for (int c = 0; c < IC_COUNT; c++)
        if (ISA_CLASSES[c].pf == l->pf) printf(" %6s", ISA_CLASSES[c].name);
    for (int j = 0; j < IR_COUNT && ISA_COLUMNS[l->pf][j].head; j++) printf(" %7s", ISA_COLUMNS[l->pf][j].head);
    printf("  first matrix instruction\n");
    for (int i = 0; i < l->n; i++) {
        const struct isa_kernel *k = &l->k[i];
        int matrix = 0;
        for (int c = 0; c < IC_COUNT; c++) matrix += k->matrix[c];
        printf("%-*s %7d %7d", w, k->name, k->insts, matrix);
        for (int c = 0; c < IC_COUNT; c++)
            if (ISA_CLASSES[c].pf == l->pf) printf(" %6d", k->matrix[c]);
        for (int j = 0; j < IR_COUNT && ISA_COLUMNS[l->pf][j].head; j++) {
            long v = k->res[ISA_COLUMNS[l->pf][j].r];
            if (v < 0) printf(" %7s", "-"); else printf(" %7ld", v);
        }
        printf("  %s\n", *k->first ? k->first : "-");
    }
    const char *legend = l->res ? l->res->legend : l->dis->legend;
    printf("instructions: %s%s%s\n", l->dis_path, l->dis->arg ? " " : "", l->dis->arg ? l->dis->arg : "");
    if (legend) printf("resources: %s\n", legend);
    else printf("resources: not available: no reader of the compiler's records found (tried %s)\n", l->res_tried);
}

/* kgate isa [--arch A] [--kernels FILE] [--expect CLASS]: compile for A
 * (default: GPU 0's arch) and list each kernel's instructions, matrix
 * instructions and resources when a disassembler is found.  --expect: exit
 * 1 unless a kernel holds that class, and always when nothing can count. */
static int cmd_isa(const struct opts *o)
{
    struct device d;
    memset(&d, 0, sizeof d);
    const char *arch = o->arch;
    if (!arch) {
        gpu_open(&d, o->device_index);
        arch = d.arch;
    }
    enum platform pf = strncmp(arch, "sm_", 3) == 0 ? PF_CUDA : PF_HIP;
    if (pf == PF_HIP && strncmp(arch, "gfx", 3) != 0)
        die(EXIT_USAGE, "--arch %s: expected sm_XY[a] (NVIDIA) or gfxNNN (AMD)", arch);
    struct arm arm;
    char *file;
    arm_from_opts(&arm, o, &file);
    struct code_obj co;
    memset(&co, 0, sizeof co);
    isa_compile(pf, &arm, arch, &co);
    printf("%s%s%s for %s: code object %zu bytes, sha256 %s\n", arm.src_name, *arm.options ? " " : "", arm.options,
           arch, co.size, co.sha);
    char why[1024];
    int status = ISA_LISTED;
    const struct isa_list *l = isa_listing(pf, co.bin_path, why, sizeof why, &status);
    if (status == ISA_TOOL_FAILED) die(EXIT_DEVICE, "%s", why);
    if (l) isa_print(l);
    else printf("%s: instruction counts are not available\n", why);
    int pass = 1;
    if (o->expect) {
        pass = isa_expect(pf, co.bin_path, o->expect, NULL, 0, why, sizeof why);
        printf("expect %s: %s: %s\n", o->expect, pass ? "pass" : "FAIL", why);
    }
    free(file);
    free(co.data);
    arm_free(&arm);
    return pass ? EXIT_PASS : EXIT_GATE;
}

/* ===== main ===== */

/* `kgate all` runs every case this many times (--repeat): on a GPU 3, on
 * the CPU (whose candidate is deterministic by construction) 2. */
#define DEFAULT_REPEAT_ALL_GPU 3
#define DEFAULT_REPEAT_ALL_CPU 2

/* Set the command's default --repeat; exit 2 on an unknown fault, or on
 * `race` without repeated runs. */
static void check_inject(struct opts *o, int default_repeat)
{
    if (!o->repeat) o->repeat = default_repeat;
    if (!o->inject) return;
    if (!find_inject(o->inject)) {
        char names[256] = "";
        for (size_t i = 0; i < N_INJECTS; i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "", INJECTS[i].name);
        die(EXIT_USAGE, "--inject %s: unknown fault (%s)", o->inject, names);
    }
    if (find_inject(o->inject)->stage == INJ_REPEAT && o->repeat < 2)
        die(EXIT_USAGE, "--inject %s plants its fault in repeated runs: give --repeat 2 or more", o->inject);
}

static const char USAGE[] =
    "usage: kgate COMMAND [options]\n"
    "\n"
    "Is a GPU kernel right, and only then, how fast?  Every output is gated against\n"
    "CPU references; a time is printed only for a case that passed every gate.\n"
    "\n"
    "commands:\n"
    "  all       [--shapes FILE]             every case of a shapes file (default shapes.txt),\n"
    "                                        each run 3 times (2 on --device cpu) unless --repeat\n"
    "  gemm      --shape MxNxK [--dtype D] [--layout L] [--bwd]\n"
    "                                        one GEMM: C = A·B; --bwd adds dA = dC·Bᵀ, dB = Aᵀ·dC\n"
    "  grouped   --groups M1,M2,... --shape NxK [--dtype D] [--layout NN|NT] [--bwd]\n"
    "                                        a grouped (MoE) GEMM: C_g = A_g·B_g per group\n"
    "  attn      --heads Hq[:Hkv] --dim D (--seq Sq[:Sk] [--batch B] | --seqlens S,Sq:Sk,...)\n"
    "            [--causal] [--scale X] [--dtype f16|bf16] [--bwd]\n"
    "                                        attention: O and LSE; --bwd adds dQ, dK, dV\n"
    "  compare   CASE --variant NAME (-D K=V ... | --kernels FILE)\n"
    "                                        the reference arm (kernels.hip as shipped) and the\n"
    "                                        candidate: every gate on both, then timed interleaved in\n"
    "                                        rounds: time ratio, spread, A/A band, faster|parity|slower\n"
    "  noise     CASE                        the A/A band: the arm timed against a copy of itself\n"
    "  ledger    [verify | best]             the ledger as a table; check its hash chain; the best\n"
    "                                        correct checkpoint per case\n"
    "  devices                               list the GPUs the runtime sees, and the CPU\n"
    "  selftest                              prove every gate against clean runs and planted faults\n"
    "  isa       [--arch A] [--expect C]     compile kernels.hip for A (sm_90a, gfx942, ...; default\n"
    "                                        GPU 0; gfx* without hiprtc: clang offline) and list per\n"
    "                                        kernel its matrix instructions, registers, shared memory\n"
    "                                        and spills; --expect wgmma|mma|mfma|wmma: exit 1 unless a\n"
    "                                        kernel has them (always when no disassembler can count)\n"
    "  codec     FORMAT [--fp8 ocp|fnuz] (--decode-all | X ...)\n"
    "                                        ref.c's codecs: e4m3, e5m2, e4m3fnuz, e5m2fnuz, e2m1,\n"
    "                                        e8m0 (decode only); values from stdin when none given\n"
    "\n"
    "case options:\n"
    "  --dtype D        f32, f16, bf16 (default bf16; attn: f16, bf16); inputs and outputs,\n"
    "                   fp32 accumulation; gemm and grouped also take the low-precision dtypes\n"
    "  --layout L       gemm: NN, NT, TN, TT (default NT): A then B; N = A [M][K], B [K][N];\n"
    "                   T = A stored [K][M], B stored [N][K].  grouped: NN (B [G][K][N]) or\n"
    "                   NT (B [G][N][K]); A is [sum M][K]\n"
    "  --shape MxNxK    gemm; grouped: NxK.  Each dimension 1..1048576\n"
    "  --groups LIST    grouped: the group sizes M_g, comma-separated, 0 allowed (up to 4096)\n"
    "  --seq Sq[:Sk]    attn: query and key length of every sequence (--batch B of them, default 1)\n"
    "  --seqlens LIST   attn: varlen batch, one entry per sequence: S, or Sq:Sk (0 allowed)\n"
    "  --heads Hq[:Hkv] attn: query heads (up to 1024), KV heads (Hq a multiple of Hkv: MHA,\n"
    "                   GQA, MQA)\n"
    "  --dim D          attn: head dim, 1..256\n"
    "  --causal         attn: causal mask, bottom-right aligned when Sq != Sk\n"
    "  --scale X        attn: softmax scale (default 1/sqrt(D))\n"
    "  --bwd            the backward outputs too, each gated\n"
    "\n"
    "low precision (gemm and grouped; layout NT, forward; gated by SNR, README):\n"
    "  --dtype e4m3|e5m2 [--scaling tensor|row|block]   fp8, fp32 scales (default tensor; block:\n"
    "                   A 1x128, B 128x128)\n"
    "  --dtype mxfp8|mxfp8e5m2|mxfp4 [--mx-rule spec|up]   MX: blocks of 32, E8M0 scales; spec\n"
    "                   (default): the OCP MX rule, up: rounded up (NVIDIA, TransformerEngine)\n"
    "  --out bf16|f32   the output (default bf16)\n"
    "  --fp8 ocp|fnuz   the fp8 encoding (default: the device's; OCP on NVIDIA and the CPU)\n"
    "\n"
    "run options:\n"
    "  --device N|cpu   GPU N (default 0), or cpu: ref.c's candidate runs the same pipeline\n"
    "  --kernels FILE   compile FILE instead of the embedded kernels.hip (same entry points)\n"
    "  --seed N         input seed (default 42; printed)\n"
    "  --repeat N       run each case N times on the same inputs (1..1000): outputs must be\n"
    "                   bitwise equal, or, for kernels that declare atomics, pass every gate\n"
    "  --full           check every element (default: all up to 2^31 multiply-adds per output,\n"
    "                   a tile-covering sample above)\n"
    "  --rtol X --atol Y  allclose tolerances (defaults: f32 1e-4, f16/bf16 1e-2; attention\n"
    "                   gradients: see README); looser than the default needs --why \"reason\"\n"
    "  --why TEXT       the reason for a looser tolerance, printed in the report\n"
    "  --inject KIND    plant a fault in the candidate's output (compare: the candidate arm's;\n"
    "                   noise: the first arm's): tile, tail, nan, bias, drop,\n"
    "                   row, unwritten, outside, group, mask, race; low precision: scale, quant,\n"
    "                   precision; the gate meant for it must fail\n"
    "  --trades-precision TEXT  low precision: waive the 3 dB baseline rule, for this reason\n"
    "  --json           one JSON object per case on stdout (the summary goes to stderr)\n"
    "\n"
    "porting (CASE: a case as on the command line, e.g. gemm --shape 2048x2048x2048):\n"
    "  --variant NAME   the candidate's name; with -D or --kernels it makes a candidate arm\n"
    "  -D NAME[=VALUE]  a definition for the candidate's compile (repeatable; e.g. GEMM_BM=128)\n"
    "  --diagnostic     the variant counts against the budget but is not deliverable\n"
    "  --rounds N       compare and noise: interleaved rounds (2..100, default 10)\n"
    "  --ledger FILE    the ledger (default ./kgate.ledger; kept by compare and noise, and by\n"
    "                   any run of a candidate or given --ledger)\n"
    "  --budget N       distinct candidate code objects the ledger may hold (default 3); a new\n"
    "                   one beyond it is refused with exit 4\n"
    "\n"
    "exit: 0 every gate passed (skipped cases: the device lacks their format), 1 a gate failed,\n"
    "      2 bad usage or input, 3 no GPU runtime, 4 budget spent,\n"
    "      5 device, kernel or compiler error\n"
    "environment: KGATE_CACHE (code-object cache dir), KGATE_THREADS, KGATE_NVRTC,\n"
    "      KGATE_HIPRTC, KGATE_CUDA, KGATE_HIP (library paths), KGATE_COMPILE_TIMEOUT (s)\n";

int main(int argc, char **argv)
{
    if (argc < 2) die(EXIT_USAGE, "no command given (kgate --help lists them)");
    if (strcmp(argv[1], "codec") == 0) return cmd_codec(argc, argv);
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        fputs(USAGE, stdout);
        return EXIT_PASS;
    }
    struct opts o = { .seed = 42, .rtol = -1, .atol = -1 };
    const char *cmd = argv[1], *sub = NULL;
    o.command = cmd;
    int compare = strcmp(cmd, "compare") == 0, noise = strcmp(cmd, "noise") == 0;
    const struct op *op = find_op(compare || noise ? (argc > 2 ? argv[2] : "") : cmd);
    if ((compare || noise) && !op)
        die(EXIT_USAGE, "%s: give a case: %s gemm|grouped|attn OPTIONS (see kgate --help)", cmd, cmd);
    if (strcmp(cmd, "ledger") == 0 && argc > 2 && strncmp(argv[2], "--", 2) != 0) sub = argv[2];
    struct kcase one;
    if (op) {
        case_init(&one, op, "command line");
        parse_case_args(&one, &o, argc, argv, compare || noise ? 3 : 2, 1);
    } else {
        for (int i = sub ? 3 : 2; i < argc;) {
            int used = parse_global(&o, argc, argv, i);
            if (!used) die(EXIT_USAGE, "%s: unknown option '%s' (see kgate --help)", cmd, argv[i]);
            i += used;
        }
    }
    if (o.expect && !op && strcmp(cmd, "isa") != 0 && strcmp(cmd, "all") != 0)
        die(EXIT_USAGE, "--expect: %s does not take it (isa, all, compare, noise and the case commands do)", cmd);
    int all_repeat = o.device_cpu ? DEFAULT_REPEAT_ALL_CPU : DEFAULT_REPEAT_ALL_GPU;
    check_inject(&o, !op && strcmp(cmd, "all") == 0 ? all_repeat : 1);
    if (op) {
        int rc = compare ? cmd_compare(&one, &o) : noise ? cmd_noise(&one, &o) : cmd_run(&one, 1, &o);
        case_free(&one);
        return rc;
    }
    if (strcmp(cmd, "ledger") == 0) return cmd_ledger(sub, &o);
    if (strcmp(cmd, "all") == 0) {
        size_t n;
        struct kcase *cases = read_shapes(o.shapes_path ? o.shapes_path : "shapes.txt", &n);
        int rc = cmd_run(cases, n, &o);
        for (size_t i = 0; i < n; i++) case_free(&cases[i]);
        free(cases);
        return rc;
    }
    if (strcmp(cmd, "devices") == 0) return cmd_devices();
    if (strcmp(cmd, "selftest") == 0) return cmd_selftest(&o);
    if (strcmp(cmd, "isa") == 0) return cmd_isa(&o);
    die(EXIT_USAGE, "unknown command '%s' (see kgate --help)", cmd);
}
