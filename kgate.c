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
 *   compile cache -> cases -> inputs -> check plan & references -> launch ->
 *   inject -> gates -> timer -> report -> commands -> main
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
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
    EXIT_BUDGET = 4,    /* budget spent (ledger, later) */
    EXIT_DEVICE = 5,    /* device, kernel or compiler error */
};

#define KG_TILE 128                 /* the tile of the error map and of sampling */
#define FULL_CHECK_MACS (1ull << 31) /* above this, check a tile-covering sample */
#define MAX_DIM (1u << 20)          /* no dimension above 1,048,576 */
#define MAX_ELEMS (1ull << 30)      /* no tensor above 2^30 elements */

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
    X(0, props_hip, kg_res, (void *, int), "", "hipGetDevicePropertiesR0600")

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

/* The run-time compiler of platform pf; exits 3 naming every library tried
 * when there is none. */
static void load_rtc(enum platform pf, struct rtc *c)
{
    char tried[1024] = "", why[256] = "";
    const char *env = pf == PF_CUDA ? "KGATE_NVRTC" : "KGATE_HIPRTC";
    if (!load_table(RTC_LIBS[pf], env, pf, RTC_ROWS, sizeof RTC_ROWS / sizeof *RTC_ROWS, c,
                    tried, sizeof tried, why, sizeof why))
        die(EXIT_NORUNTIME, "no %s run-time compiler found (tried %s%s%s)", RTC_NAME[pf], tried,
            *why ? "; " : "", why);
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
    void *ctx, *stream, *module;
    void *ev[2];          /* timer events, made on first use */
    struct code_obj *code; /* the loaded kernels (GPU) */
    uint64_t flush;       /* L2 flush buffer */
    size_t flush_bytes;
    char flush_note[64];
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

/* Launch kernel `fn` with a grid of gx x gy blocks of `threads` threads. */
static void gpu_launch(struct device *d, void *fn, const char *name, unsigned gx, unsigned gy,
                       unsigned threads, void **params)
{
    kg_res r = d->rt.launch(fn, gx, gy, 1, threads, 1, 1, 0, d->stream, params, NULL);
    if (r != 0) die(EXIT_DEVICE, "launching %s failed: %s (%d)", name, gpu_err_name(d, r), r);
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

/* The compiler's child process: compile, write the log and (on success) the
 * code object into the cache, exit 0 (compiled), 1 (compile error) or 2
 * (could not run the compiler).  Runs after fork(), so a crash or hang of the
 * compiler takes only this process down. */
static int compile_child(const struct rtc *c, const char *src, const char *name,
                         const char *const *opts, int nopts, const struct code_obj *co)
{
    const char *hook = getenv("KGATE_TEST_COMPILER");   /* tests plant a crash or a hang */
    if (hook && strcmp(hook, "crash") == 0) raise(SIGSEGV);
    if (hook && strcmp(hook, "hang") == 0) for (;;) pause();
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

/* Wait for the compiler child; exit 5 with one clear line if it crashed,
 * hung past $KGATE_COMPILE_TIMEOUT seconds (default 600), or failed. */
static void compile_wait(pid_t pid, const char *what, const struct code_obj *co)
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
    struct sha256 h;
    sha256_init(&h);
    char ver[64];
    snprintf(ver, sizeof ver, "kgate-cache-1 %s %d.%d", RTC_NAME[pf], ma, mi);
    sha256_update(&h, ver, strlen(ver) + 1);
    sha256_update(&h, src, strlen(src) + 1);
    for (int i = 0; i < nopts; i++) sha256_update(&h, opts[i], strlen(opts[i]) + 1);
    sha256_hex(&h, co->key);

    const char *dir = cache_dir();
    if (mkdir_p(dir) != 0) die(EXIT_DEVICE, "cannot create the cache directory %s: %s", dir, strerror(errno));
    if (snprintf(co->bin_path, sizeof co->bin_path, "%s/%s.bin", dir, co->key) >= PATH_MAX ||
        snprintf(co->log_path, sizeof co->log_path, "%s/%s.log", dir, co->key) >= PATH_MAX)
        die(EXIT_USAGE, "cache directory path too long: %s", dir);
    char what[256];
    snprintf(what, sizeof what, "%s for %s with %s %d.%d", name, arch, RTC_NAME[pf], ma, mi);

    co->data = read_file(co->bin_path, &co->size);
    co->cached = co->data != NULL;
    if (!co->data) {
        double t0 = now_s();
        fflush(NULL);
        pid_t pid = fork();
        if (pid < 0) die(EXIT_DEVICE, "cannot fork the compiler: %s", strerror(errno));
        if (pid == 0) _exit(compile_child(c, src, name, opts, nopts, co));
        compile_wait(pid, what, co);
        co->seconds = now_s() - t0;
        co->data = read_file(co->bin_path, &co->size);
        if (!co->data) die(EXIT_DEVICE, "compiled %s but cannot read %s", what, co->bin_path);
    }
    sha256_init(&h);
    sha256_update(&h, co->data, co->size);
    sha256_hex(&h, co->sha);
    if (co->cached)
        fprintf(stderr, "kgate: %s: cached code object %.12s (%s)\n", what, co->sha, co->bin_path);
    else
        fprintf(stderr, "kgate: %s: compiled in %.2f s, code object %.12s (%s)\n", what,
                co->seconds, co->sha, co->bin_path);
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
};

/* One case: an op with its dtype, layout, shape and options. */
struct kcase {
    const struct op *op;
    enum dtype dt;
    char layout[3];               /* gemm: A then B; N = as in C = A·B, T = transposed */
    uint32_t m, n, k;
    int bwd;
    char where[320];              /* "shapes.txt:12" or "command line", for messages */
    char label[160];              /* "gemm bf16 NT 4096x4096x4096 bwd" */
};

struct run;

/* An op is a row of this table: how to read its options, check a case, make
 * its inputs and outputs, launch the kernel of one output, and compute the
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
    /* Queue the kernel that computes output `o` (on the CPU device: compute it). */
    void (*launch)(struct run *r, int o);
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

/* --- gemm --- */

static int gemm_set(struct kcase *c, const char *key, const char *val)
{
    if (strcmp(key, "--bwd") == 0) { c->bwd = 1; return 0; }
    if (strcmp(key, "--dtype") == 0) {
        if (!val || parse_dtype(val, &c->dt) != 0)
            die(EXIT_USAGE, "%s: --dtype %s: unknown dtype (f32, f16, bf16)", c->where, val ? val : "");
        return 1;
    }
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
    snprintf(c->label, sizeof c->label, "gemm %s %s %ux%ux%u%s", DTYPES[c->dt].name, c->layout,
             c->m, c->n, c->k, c->bwd ? " bwd" : "");
}

static void gemm_prepare(struct run *r);
static void gemm_launch(struct run *r, int o);

static const struct op OPS[] = {
    { "gemm", gemm_set, gemm_finish, gemm_prepare, gemm_launch },
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
    memcpy(c->layout, "NT", 3);
    snprintf(c->where, sizeof c->where, "%s", where);
}

/* Global options: set in `o` and return how many arguments were used (1 or
 * 2), or 0 if argv[i] is not a global option. */
static int parse_global(struct opts *o, int argc, char **argv, int i)
{
    const char *key = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
    static const char *const with_value[] = { "--device", "--kernels", "--shapes", "--seed",
                                              "--rtol", "--atol", "--why", "--inject", "--arch" };
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
    return 0;
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

/* One output of a case, as the gates see it: a rows x cols matrix stored in
 * device memory with element strides (srow, scol).  For products, the CPU
 * references compute out = x·y from canonical float operands. */
struct output {
    const char *name;             /* "C", "dA", "dB" */
    size_t rows, cols, inner;
    const float *x, *y;           /* x: rows x inner, y: inner x cols, row-major */
    int64_t srow, scol;           /* storage strides of the output, elements */
    size_t elems;                 /* storage size, elements */
    uint64_t buf;                 /* device buffer */
    double flops;
    /* the launch: X[m][k] at dx + m*sxm + k*sxk, Y[k][n] at dy + k*syk + n*syn */
    uint64_t dx, dy;
    int64_t sxm, sxk, syk, syn;
};

#define MAX_OUT 4
#define MAX_OWNED 16

/* Everything one case needs while it runs; release_run frees it. */
struct run {
    const struct kcase *c;
    struct device *d;
    const struct opts *o;
    uint64_t key;                 /* input stream key: seed and case label */
    int nout;
    struct output out[MAX_OUT];
    float *host[MAX_OWNED];       /* canonical float operands, owned */
    int nhost;
    uint64_t dev[MAX_OWNED];      /* device buffers, owned */
    int ndev;
    int inputs_nonzero;           /* every input has max|x| > 0 */
};

static float *run_host(struct run *r, size_t n)
{
    if (r->nhost == MAX_OWNED) die(EXIT_DEVICE, "internal: too many host buffers");
    return r->host[r->nhost++] = xmalloc(n * sizeof(float));
}

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
    else
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

/* out[c][r] = in[r][c] for an rows x cols matrix. */
static float *transpose(struct run *r, const float *in, size_t rows, size_t cols)
{
    float *t = run_host(r, rows * cols);
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < cols; j++) t[j * rows + i] = in[i * cols + j];
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

/* --- gemm inputs and outputs --- */

/* Describe one product output: rows x cols = x (rows x inner) · y (inner x
 * cols); its storage strides; its launch operands. */
static void gemm_output(struct run *r, const char *name, size_t rows, size_t cols, size_t inner,
                        const float *x, const float *y, int64_t srow, int64_t scol, uint64_t dx,
                        int64_t sxm, int64_t sxk, uint64_t dy, int64_t syk, int64_t syn)
{
    struct output *o = &r->out[r->nout++];
    size_t elems = rows * cols;
    *o = (struct output){ name, rows, cols, inner, x, y, srow, scol, elems, 0,
                          2.0 * rows * cols * inner, dx, dy, sxm, sxk, syk, syn };
    o->buf = run_dev(r, elems * DTYPES[r->c->dt].bytes);
}

/* A is M x K ('N': stored [M][K]; 'T': stored [K][M]); B is K x N ('N':
 * [K][N]; 'T': [N][K]); C is [M][N].  With --bwd, dC is [M][N] and
 * dA = dC·Bᵀ, dB = Aᵀ·dC are stored in A's and B's layouts. */
static void gemm_prepare(struct run *r)
{
    const struct kcase *c = r->c;
    enum dtype t = c->dt;
    size_t M = c->m, N = c->n, K = c->k;
    int at = c->layout[0] == 'T', bt = c->layout[1] == 'T';
    float *a_st = make_input(r, 1, M * K, t), *b_st = make_input(r, 2, K * N, t);
    uint64_t da = upload_as(r, a_st, M * K, t), db = upload_as(r, b_st, K * N, t);
    int64_t a_sm = at ? 1 : (int64_t)K, a_sk = at ? (int64_t)M : 1;   /* A[m][k] strides */
    int64_t b_sk = bt ? 1 : (int64_t)N, b_sn = bt ? (int64_t)K : 1;   /* B[k][n] strides */
    const float *a = at ? transpose(r, a_st, K, M) : a_st;            /* M x K */
    const float *b = bt ? transpose(r, b_st, N, K) : b_st;            /* K x N */
    gemm_output(r, "C", M, N, K, a, b, (int64_t)N, 1, da, a_sm, a_sk, db, b_sk, b_sn);
    if (!c->bwd) return;
    float *dc = make_input(r, 3, M * N, t);
    uint64_t ddc = upload_as(r, dc, M * N, t);
    const float *a_t = at ? a_st : transpose(r, a_st, M, K);          /* K x M */
    const float *b_t = bt ? b_st : transpose(r, b_st, K, N);          /* N x K */
    gemm_output(r, "dA", M, K, N, dc, b_t, a_sm, a_sk, ddc, (int64_t)N, 1, db, b_sn, b_sk);
    gemm_output(r, "dB", K, N, M, a_t, dc, b_sk, b_sn, da, a_sk, a_sm, ddc, (int64_t)N, 1);
}

/* ===== Launch ===== */

#define MAX_KERNELS 32

/* The loaded code object's functions, looked up by name once. */
static struct { void *module; const char *names[MAX_KERNELS]; void *fns[MAX_KERNELS]; int n; } KFN;

static void *kernel_fn(struct device *d, const char *name)
{
    for (int i = 0; i < KFN.n; i++)
        if (strcmp(KFN.names[i], name) == 0) return KFN.fns[i];
    void *fn = NULL;
    kg_res res = d->rt.module_fn(&fn, d->module, name);
    if (res != 0 || !fn)
        die(EXIT_DEVICE, "the code object lacks kernel %s (%s); a --kernels file must define "
            "every entry point (README)", name, gpu_err_name(d, res));
    if (KFN.n < MAX_KERNELS) KFN.names[KFN.n] = name, KFN.fns[KFN.n++] = fn;
    return fn;
}

/* Output o of a gemm case.  GPU: the portable kernel of the dtype, a
 * GEMM_BM x GEMM_BN (64 x 64) tile per block.  CPU: read the operands through
 * the same strides from the same buffers and run ref.c's candidate. */
static void gemm_launch(struct run *r, int o)
{
    static const char *const fname[DT_COUNT] = { "kg_gemm_f32", "kg_gemm_f16", "kg_gemm_bf16" };
    struct output *p = &r->out[o];
    enum dtype t = r->c->dt;
    if (r->d->kind == DEV_CPU) {
        float *x = decode_strided(t, (void *)(uintptr_t)p->dx, p->rows, p->inner, p->sxm, p->sxk);
        float *y = decode_strided(t, (void *)(uintptr_t)p->dy, p->inner, p->cols, p->syk, p->syn);
        cpu_candidate_gemm(t, x, y, p->rows, p->inner, p->cols, (void *)(uintptr_t)p->buf,
                           p->srow, p->scol);
        free(x);
        free(y);
        return;
    }
    int M = (int)p->rows, N = (int)p->cols, K = (int)p->inner;
    void *params[] = { &p->dx, &p->dy, &p->buf, &M, &N, &K, &p->sxm, &p->sxk,
                       &p->syk, &p->syn, &p->srow, &p->scol };
    gpu_launch(r->d, kernel_fn(r->d, fname[t]), fname[t], (unsigned)((N + 63) / 64),
               (unsigned)((M + 63) / 64), 256, params);
}

/* ===== Check plan and references ===== */

/* Which elements of an output are checked.  Full: every element.  Sampled
 * (when rows·cols·inner > FULL_CHECK_MACS and no --full): in every tile row
 * of KG_TILE rows, its first and last row and one seeded random row are
 * checked across all columns; in every tile column, likewise three columns
 * across all rows.  So every row, every column and every tile (tails
 * included) has checked elements. */
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
    p->full = force_full || (double)o->rows * (double)o->cols * (double)o->inner <= (double)FULL_CHECK_MACS;
    if (p->full) {
        p->nr = o->rows;
        p->rows = xmalloc(o->rows * sizeof(uint32_t));
        for (size_t i = 0; i < o->rows; i++) p->rows[i] = (uint32_t)i;
    } else {
        p->rows = sample_lines(o->rows, mix64(key ^ 0x726f7773), &p->nr);
        p->cols = sample_lines(o->cols, mix64(key ^ 0x636f6c73), &p->nc);
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
    float *lp_r, *lp_c;           /* same precision: fp32 sequential, rounded to dtype */
    double ref_s, lp_s;           /* seconds each took */
};

static void round_all(enum dtype t, float *v, size_t n)
{
    for (size_t i = 0; i < n; i++) v[i] = dt_round(t, v[i]);
}

/* Compute the double reference and the same-precision reference of output o
 * on plan p. */
static void refs_compute(struct refs *f, const struct output *o, const struct plan *p, enum dtype t)
{
    memset(f, 0, sizeof *f);
    f->ref_r = xmalloc(p->nr * o->cols * sizeof(double));
    f->lp_r = xmalloc(p->nr * o->cols * sizeof(float));
    if (p->nc) {
        f->ref_c = xmalloc(o->rows * p->nc * sizeof(double));
        f->lp_c = xmalloc(o->rows * p->nc * sizeof(float));
    }
    double t0 = now_s();
    mm_select(ACC_F64, o->x, o->y, o->inner, o->cols, p->rows, p->nr, NULL, o->cols, f->ref_r);
    if (p->nc) mm_select(ACC_F64, o->x, o->y, o->inner, o->cols, NULL, o->rows, p->cols, p->nc, f->ref_c);
    double t1 = now_s();
    mm_select(ACC_F32_SEQ, o->x, o->y, o->inner, o->cols, p->rows, p->nr, NULL, o->cols, f->lp_r);
    round_all(t, f->lp_r, p->nr * o->cols);
    if (p->nc) {
        mm_select(ACC_F32_SEQ, o->x, o->y, o->inner, o->cols, NULL, o->rows, p->cols, p->nc, f->lp_c);
        round_all(t, f->lp_c, o->rows * p->nc);
    }
    f->ref_s = t1 - t0, f->lp_s = now_s() - t1;
}

static void refs_free(struct refs *f)
{
    free(f->ref_r);
    free(f->ref_c);
    free(f->lp_r);
    free(f->lp_c);
}

/* ===== Inject ===== */

/* A planted fault, applied to a candidate's output after it is read back and
 * before the gates: each must be caught by the gate named in its row. */
struct inject_ctx {
    const struct output *o;
    float *out;                   /* rows x cols, decoded */
    void *raw;                    /* the storage, as read back */
    enum dtype t;
    double atol;
    uint64_t key;
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
    size_t es = DTYPES[x->t].bytes, i = o->rows / 2;
    for (size_t j = 0; j < o->cols; j++)
        memset((char *)x->raw + (size_t)((int64_t)i * o->srow + (int64_t)j * o->scol) * es, 0xff, es);
}

struct inject {
    const char *name, *gate, *what;
    int on_raw;                   /* applied to the storage before decoding */
    void (*apply)(struct inject_ctx *);
};

static const struct inject INJECTS[] = {
    { "tile", "worst-tile", "the middle output tile zeroed", 0, inj_tile },
    { "tail", "allclose", "the last (partial) tile wrong", 0, inj_tail },
    { "nan", "nan-inf", "one NaN in the output", 0, inj_nan },
    { "bias", "bias", "0.5*atol added to every element", 0, inj_bias },
    { "drop", "allclose", "one element in 64 dropped to zero", 0, inj_drop },
    { "row", "allclose", "the middle row shifted by one column", 0, inj_row },
    { "unwritten", "written", "the middle row left unwritten", 1, inj_unwritten },
};
#define N_INJECTS (sizeof INJECTS / sizeof *INJECTS)

static const struct inject *find_inject(const char *name)
{
    for (size_t i = 0; i < N_INJECTS; i++)
        if (strcmp(INJECTS[i].name, name) == 0) return &INJECTS[i];
    return NULL;
}

/* ===== Gates ===== */

/* What the gates read: one output, its plan, references and the candidate's
 * decoded values. */
struct gate_in {
    const struct output *o;
    const struct plan *p;
    const struct refs *f;
    const float *out;             /* rows x cols */
    size_t unwritten;             /* elements still holding the poison bytes */
    enum dtype t;
    double rtol, atol;
    int inputs_nonzero;
};

struct tile_acc { size_t n; double ref2, err2, lperr2; };

/* Everything the gates need, accumulated in one pass over the checked
 * elements (and one over all elements for NaN/inf). */
struct stats {
    size_t n;                               /* checked elements */
    size_t n_finite;                        /* of those, finite in the output */
    size_t close_fail;                      /* allclose */
    double close_worst;                     /* max |out-ref| / (atol + rtol|ref|) */
    size_t cw_i, cw_j;
    double cw_out, cw_ref;
    double max_err, max_lp_err, floor;      /* same precision */
    size_t nan_out, inf_out, nan_ref, inf_ref;
    double sum_err, sum_err2, sum_lp_err, sum_lp_err2, sum_ref2, sum_out2, sum_out_ref;
    size_t tr, tc;                          /* tile grid */
    struct tile_acc *tiles;
    /* derived */
    double mean_err, sd_err, mean_lp_err, rms_lp_err, rms_ref, rel_l2, cosine, snr_db, bias_limit;
    long worst_tile;                        /* -1: no tile had enough checked elements */
    double worst_tile_snr, worst_tile_need;
};

#define TILE_MIN_CHECKED 64     /* the worst-tile gate looks at tiles with at least this many */
#define TILE_SNR_SLACK_DB 10.0  /* a tile may be this much below the same-precision reference */

static void stats_visit(struct stats *s, const struct gate_in *g, size_t i, size_t j, double ref,
                        double lp)
{
    double out = g->out[i * g->o->cols + j], e = out - ref, tol = g->atol + g->rtol * fabs(ref);
    s->n++;
    if (isnan(ref)) s->nan_ref++;
    else if (isinf(ref)) s->inf_ref++;
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
    struct tile_acc *t = &s->tiles[(i / KG_TILE) * s->tc + j / KG_TILE];
    t->n++;
    t->ref2 += ref * ref;
    t->lperr2 += (lp - ref) * (lp - ref);
    if (!isfinite(out)) return;
    s->n_finite++;
    s->sum_err += e, s->sum_err2 += e * e, s->sum_ref2 += ref * ref;
    s->sum_out2 += out * out, s->sum_out_ref += out * ref;
    t->err2 += e * e;
}

static double snr_db(double sig2, double err2)
{
    if (err2 == 0) return INFINITY;
    return 10.0 * log10(sig2 / err2);
}

/* The worst tile: the one furthest below what the same-precision reference
 * reaches on the same tile (capped per dtype), minus TILE_SNR_SLACK_DB. */
static void stats_worst_tile(struct stats *s, enum dtype t)
{
    double worst_margin = INFINITY;
    s->worst_tile = -1;
    for (size_t k = 0; k < s->tr * s->tc; k++) {
        const struct tile_acc *a = &s->tiles[k];
        if (a->n < TILE_MIN_CHECKED || (a->ref2 == 0 && a->err2 == 0)) continue;
        double snr = snr_db(a->ref2, a->err2), lp = snr_db(a->ref2, a->lperr2);
        double need = (lp < DTYPES[t].tile_snr_cap ? lp : DTYPES[t].tile_snr_cap) - TILE_SNR_SLACK_DB;
        if (snr - need < worst_margin || s->worst_tile < 0) {
            worst_margin = snr - need;
            s->worst_tile = (long)k, s->worst_tile_snr = snr, s->worst_tile_need = need;
        }
    }
}

static void stats_compute(struct stats *s, const struct gate_in *g)
{
    const struct output *o = g->o;
    const struct plan *p = g->p;
    memset(s, 0, sizeof *s);
    s->tr = (o->rows + KG_TILE - 1) / KG_TILE, s->tc = (o->cols + KG_TILE - 1) / KG_TILE;
    s->tiles = xcalloc(s->tr * s->tc, sizeof *s->tiles);
    for (size_t r = 0; r < p->nr; r++)
        for (size_t j = 0; j < o->cols; j++)
            stats_visit(s, g, p->rows[r], j, g->f->ref_r[r * o->cols + j], g->f->lp_r[r * o->cols + j]);
    for (size_t i = 0; i < o->rows && p->nc; i++)
        if (!p->row_in[i])
            for (size_t c = 0; c < p->nc; c++)
                stats_visit(s, g, i, p->cols[c], g->f->ref_c[i * p->nc + c], g->f->lp_c[i * p->nc + c]);
    for (size_t k = 0; k < o->rows * o->cols; k++) {
        if (isnan(g->out[k])) s->nan_out++;
        else if (isinf(g->out[k])) s->inf_out++;
    }
    double nf = s->n_finite ? (double)s->n_finite : 1.0;
    s->mean_err = s->sum_err / nf;
    s->sd_err = sqrt(fmax(0.0, s->sum_err2 / nf - s->mean_err * s->mean_err));
    s->mean_lp_err = s->sum_lp_err / (double)(s->n ? s->n : 1);
    s->rms_lp_err = sqrt(s->sum_lp_err2 / (double)(s->n ? s->n : 1));
    s->rms_ref = sqrt(s->sum_ref2 / nf);
    s->rel_l2 = s->sum_ref2 > 0 ? sqrt(s->sum_err2 / s->sum_ref2) : (s->sum_err2 > 0 ? INFINITY : 0);
    s->cosine = s->sum_out2 > 0 && s->sum_ref2 > 0 ? s->sum_out_ref / sqrt(s->sum_out2 * s->sum_ref2) : 0;
    s->snr_db = snr_db(s->sum_ref2, s->sum_err2);
    /* The spread of a mean of n errors: sd/sqrt(n), with sd at least the
     * same-precision reference's rms error (so few elements cannot make it 0). */
    s->bias_limit = 6.0 * fmax(s->sd_err, s->rms_lp_err) / sqrt(nf) + 2.0 * fabs(s->mean_lp_err);
    stats_worst_tile(s, g->t);
}

/* A gate's verdict: pass, the measured value and the limit it was held to,
 * and one line of detail. */
struct verdict { int pass; double value, limit; char detail[240]; };

typedef void (*gate_fn)(const struct stats *, const struct gate_in *, struct verdict *);

/* allclose: every checked element within atol + rtol|ref| (catches a wrong
 * element, row or tile). */
static void gate_allclose(const struct stats *s, const struct gate_in *g, struct verdict *v)
{
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
    (void)g;
    v->value = s->max_err, v->limit = 2.0 * s->max_lp_err + s->floor;
    v->pass = s->max_err <= v->limit;
    snprintf(v->detail, sizeof v->detail,
             "max|out-ref| %.4g vs 2 x max|lp-ref| %.4g + floor %.4g (lp: the same arithmetic "
             "in %s on the CPU)",
             s->max_err, s->max_lp_err, s->floor, DTYPES[g->t].name);
}

/* NaN/inf: the output has the reference's counts, usually none. */
static void gate_nan_inf(const struct stats *s, const struct gate_in *g, struct verdict *v)
{
    size_t want = s->nan_ref + s->inf_ref, got = s->nan_out + s->inf_out;
    v->value = (double)got, v->limit = (double)want;
    v->pass = g->p->full ? s->nan_out == s->nan_ref && s->inf_out == s->inf_ref : got == 0 && want == 0;
    snprintf(v->detail, sizeof v->detail, "output has %zu NaN and %zu inf; reference %zu and %zu",
             s->nan_out, s->inf_out, s->nan_ref, s->inf_ref);
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

/* nontrivial: the reference is well above atol and no input is all zero
 * (catches cases a kernel returning zeros would pass). */
static void gate_nontrivial(const struct stats *s, const struct gate_in *g, struct verdict *v)
{
    v->value = s->rms_ref, v->limit = 10.0 * g->atol;
    v->pass = g->inputs_nonzero && s->rms_ref > v->limit;
    snprintf(v->detail, sizeof v->detail,
             "reference rms %.4g must exceed 10 x atol = %.4g%s, or a kernel returning zeros "
             "could pass", s->rms_ref, v->limit, g->inputs_nonzero ? "" : " and inputs must be nonzero");
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
        v->pass = 1, v->value = INFINITY, v->limit = 0;
        snprintf(v->detail, sizeof v->detail, "no tile has %d checked elements; element gates cover it",
                 TILE_MIN_CHECKED);
        return;
    }
    size_t ti = (size_t)s->worst_tile / s->tc, tj = (size_t)s->worst_tile % s->tc;
    size_t r1 = (ti + 1) * KG_TILE < g->o->rows ? (ti + 1) * KG_TILE : g->o->rows;
    size_t c1 = (tj + 1) * KG_TILE < g->o->cols ? (tj + 1) * KG_TILE : g->o->cols;
    v->value = s->worst_tile_snr, v->limit = s->worst_tile_need;
    v->pass = s->worst_tile_snr >= s->worst_tile_need;
    snprintf(v->detail, sizeof v->detail,
             "worst tile (%zu,%zu), rows %zu..%zu cols %zu..%zu: SNR %.1f dB, needs %.1f dB "
             "(same-precision reference on that tile, capped at %.0f, minus %.0f)",
             ti, tj, ti * KG_TILE, r1 - 1, tj * KG_TILE, c1 - 1, s->worst_tile_snr,
             s->worst_tile_need, DTYPES[g->t].tile_snr_cap, TILE_SNR_SLACK_DB);
}

/* How a gate's column shows its verdict. */
enum gate_fmt {
    SHOW_RATIO,   /* value / limit: <= 1 passes */
    SHOW_COUNT,   /* a count */
    SHOW_VALUE,   /* the value itself */
    SHOW_DB,      /* decibels; +inf is "exact" (or "-" when nothing was gated) */
};

/* The gates, in the order they are printed. */
struct gate { const char *name, *column; enum gate_fmt show; gate_fn eval; };
static const struct gate GATES[] = {
    { "allclose", "allclose", SHOW_RATIO, gate_allclose },
    { "same-precision", "same-prec", SHOW_RATIO, gate_same_precision },
    { "nan-inf", "nan/inf", SHOW_COUNT, gate_nan_inf },
    { "written", "unwritten", SHOW_COUNT, gate_written },
    { "nontrivial", "ref-rms", SHOW_VALUE, gate_nontrivial },
    { "bias", "bias", SHOW_RATIO, gate_bias },
    { "worst-tile", "tile-dB", SHOW_DB, gate_worst_tile },
};
#define N_GATES (sizeof GATES / sizeof *GATES)

/* ===== Timer ===== */

struct timing {
    int n;                        /* samples */
    double median_us, min_us, max_us, q1_us, q3_us;
};

#define TIMER_MAX_SAMPLES 2000
#define TIMER_MIN_SAMPLES_GPU 10
#define TIMER_MIN_SAMPLES_CPU 3
#define TIMER_TARGET_S 0.25       /* stop once this much kernel time is sampled... */
#define TIMER_CAP_S 5.0           /* ...or this much wall time has passed (n >= 3) */
#define TIMER_HARD_CAP_S 20.0     /* ...or this much, whatever n */
#define TIMER_WARMUP_S 0.05       /* GPU warm-up by time, before the first sample */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One sample of output o: L2 flushed and the output poisoned (both queued
 * before the start event, so outside the timed window), then the launch
 * between two device events (GPU) or two clock reads (CPU).  Milliseconds. */
static double time_one(struct run *r, int o, unsigned char flush_byte)
{
    struct device *d = r->d;
    const struct output *p = &r->out[o];
    dev_fill(d, d->flush, flush_byte, d->flush_bytes);
    dev_fill(d, p->buf, 0xff, p->elems * DTYPES[r->c->dt].bytes);
    if (d->kind == DEV_CPU) {
        double t0 = now_s();
        r->c->op->launch(r, o);
        return (now_s() - t0) * 1e3;
    }
    float ms = 0;
    gpu_check(d, d->rt.event_record(d->ev[0], d->stream), "recording a timer event");
    r->c->op->launch(r, o);
    gpu_check(d, d->rt.event_record(d->ev[1], d->stream), "recording a timer event");
    gpu_check(d, d->rt.event_sync(d->ev[1]), "running the kernel (timer event)");
    gpu_check(d, d->rt.event_elapsed(&ms, d->ev[0], d->ev[1]), "reading a timer event");
    return ms;
}

/* Time output o: warm-up by time (GPU), then samples until enough kernel
 * time is collected or the wall-time cap is hit; median, quartiles, min,
 * max and n.  The output is left holding the last timed launch's result. */
static void time_output(struct run *r, int o, struct timing *t)
{
    struct device *d = r->d;
    if (d->kind == DEV_GPU && !d->ev[0])
        for (int i = 0; i < 2; i++) gpu_check(d, d->rt.event_create(&d->ev[i], 0), "creating an event");
    double start = now_s();
    if (d->kind == DEV_GPU)
        for (int i = 0; i < 2 || now_s() - start < TIMER_WARMUP_S; i++) time_one(r, o, 0);
    static double ms[TIMER_MAX_SAMPLES];
    int n = 0, min_n = d->kind == DEV_GPU ? TIMER_MIN_SAMPLES_GPU : TIMER_MIN_SAMPLES_CPU;
    double sum_s = 0;
    start = now_s();
    while (n < TIMER_MAX_SAMPLES) {
        ms[n] = time_one(r, o, (unsigned char)(n + 1));
        sum_s += ms[n++] * 1e-3;
        double wall = now_s() - start;
        if ((n >= min_n && sum_s >= TIMER_TARGET_S) || (n >= 3 && wall >= TIMER_CAP_S) ||
            wall >= TIMER_HARD_CAP_S)
            break;
    }
    qsort(ms, (size_t)n, sizeof *ms, cmp_double);
    t->n = n;
    t->min_us = ms[0] * 1e3, t->max_us = ms[n - 1] * 1e3;
    t->median_us = (n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2])) * 1e3;
    t->q1_us = ms[n / 4] * 1e3, t->q3_us = ms[(3 * n) / 4 < n ? (3 * n) / 4 : n - 1] * 1e3;
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
    int timed;
    struct timing t;
    double tflops, pct_peak;      /* pct_peak < 0: peak not known */
};

/* Tallies of a whole command, for the last line and the exit code. */
struct tally { int cases, cases_failed, outputs, outputs_failed; };

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

static void print_header(void)
{
    printf("%-40s %-3s %-7s", "case", "out", "verdict");
    for (size_t g = 0; g < N_GATES; g++) printf(" %9s", GATES[g].column);
    printf(" %7s %8s %10s %10s %10s %4s %9s %6s\n", "snr-dB", "rel-l2", "median-us", "min-us",
           "max-us", "n", "TFLOP/s", "%peak");
}

/* A gate's value as its column shows it; '!' marks a failed gate. */
static void format_gate(char *buf, size_t n, size_t g, const struct verdict *v)
{
    char mark = v->pass ? ' ' : '!';
    switch (GATES[g].show) {
    case SHOW_COUNT: snprintf(buf, n, "%.0f%c", v->value, mark); break;
    case SHOW_VALUE: snprintf(buf, n, "%.3g%c", v->value, mark); break;
    case SHOW_DB:
        if (isfinite(v->value)) snprintf(buf, n, "%.1f%c", v->value, mark);
        else snprintf(buf, n, "%s%c", v->limit > 0 ? "exact" : v->value > 0 ? "-" : "-inf", mark);
        break;
    case SHOW_RATIO:
        snprintf(buf, n, "%.2f%c", v->limit > 0 ? v->value / v->limit : v->value > 0 ? INFINITY : 0, mark);
        break;
    }
}

static void print_row(const struct kcase *c, const struct output *o, const struct result *res)
{
    printf("%-40s %-3s %-7s", c->label, o->name, res->pass ? "pass" : "FAIL");
    for (size_t g = 0; g < N_GATES; g++) {
        char buf[32];
        format_gate(buf, sizeof buf, g, &res->v[g]);
        printf(" %9s", buf);
    }
    printf(" %7.1f %8.2e", res->s.snr_db, res->s.rel_l2);
    if (res->timed) {
        printf(" %10.1f %10.1f %10.1f %4d %9.2f", res->t.median_us, res->t.min_us, res->t.max_us,
               res->t.n, res->tflops);
        if (res->pct_peak >= 0) printf(" %6.1f\n", res->pct_peak); else printf(" %6s\n", "-");
    } else {
        printf(" %10s %10s %10s %4s %9s %6s\n", "-", "-", "-", "-", "-", "-");
    }
    for (size_t g = 0; g < N_GATES; g++)
        if (!res->v[g].pass)
            printf("    FAIL %s (%s): %s\n", GATES[g].name, res->failed_when, res->v[g].detail);
}

/* A number for JSON: null when not finite. */
static void json_num(const char *key, double v, int comma)
{
    if (isfinite(v)) printf("\"%s\":%.9g%s", key, v, comma ? "," : "");
    else printf("\"%s\":null%s", key, comma ? "," : "");
}

static void json_str(const char *key, const char *s, int comma)
{
    printf("\"%s\":\"", key);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') printf("\\%c", *s);
        else if ((unsigned char)*s < 0x20) printf("\\u%04x", *s);
        else putchar(*s);
    }
    printf("\"%s", comma ? "," : "");
}

/* One output of a case as a JSON object: gates, metrics, worst tile, time. */
static void json_output(const struct output *o, const struct result *x)
{
    printf("{");
    json_str("name", o->name, 1);
    printf("\"rows\":%zu,\"cols\":%zu,\"checked\":%zu,\"full\":%s,", o->rows, o->cols, x->s.n,
           x->plan.full ? "true" : "false");
    json_str("verdict", x->pass ? "pass" : "fail", 1);
    printf("\"gates\":{");
    for (size_t g = 0; g < N_GATES; g++) {
        printf("%s\"%s\":{\"pass\":%s,", g ? "," : "", GATES[g].name, x->v[g].pass ? "true" : "false");
        json_num("value", x->v[g].value, 1);
        json_num("limit", x->v[g].limit, 0);
        printf("}");
    }
    printf("},\"metrics\":{");
    json_num("max_abs", x->s.max_err, 1);
    json_num("mean_signed", x->s.mean_err, 1);
    json_num("rel_l2", x->s.rel_l2, 1);
    json_num("cosine", x->s.cosine, 1);
    json_num("snr_db", x->s.snr_db, 0);
    printf("}");
    if (x->s.worst_tile >= 0)
        printf(",\"worst_tile\":[%zu,%zu]", (size_t)x->s.worst_tile / x->s.tc,
               (size_t)x->s.worst_tile % x->s.tc);
    if (x->timed) {
        printf(",\"time\":{");
        json_num("median_us", x->t.median_us, 1);
        json_num("q1_us", x->t.q1_us, 1);
        json_num("q3_us", x->t.q3_us, 1);
        json_num("min_us", x->t.min_us, 1);
        json_num("max_us", x->t.max_us, 1);
        printf("\"n\":%d,", x->t.n);
        json_num("tflops", x->tflops, 1);
        json_num("pct_peak", x->pct_peak >= 0 ? x->pct_peak : NAN, 0);
        printf("}");
    }
    printf("}");
}

/* One case as one JSON line on stdout. */
static void json_case(const struct run *r, const struct result *res, int pass)
{
    printf("{");
    json_str("case", r->c->label, 1);
    json_str("where", r->c->where, 1);
    printf("\"seed\":%" PRIu64 ",", r->o->seed);
    json_str("device", r->d->name, 1);
    json_str("arch", r->d->arch, 1);
    if (r->d->code) json_str("code_sha256", r->d->code->sha, 1);
    if (r->o->why) json_str("why", r->o->why, 1);
    if (r->o->inject) json_str("inject", r->o->inject, 1);
    json_str("verdict", pass ? "pass" : "fail", 1);
    printf("\"outputs\":[");
    for (int k = 0; k < r->nout; k++) {
        if (k) printf(",");
        json_output(&r->out[k], &res[k]);
    }
    printf("]}\n");
    fflush(stdout);
}

/* ===== Running a case ===== */

/* The tolerances a case is held to: the options', else the dtype's. */
static double case_rtol(const struct run *r) { return r->o->rtol >= 0 ? r->o->rtol : DTYPES[r->c->dt].rtol; }
static double case_atol(const struct run *r) { return r->o->atol >= 0 ? r->o->atol : DTYPES[r->c->dt].atol; }

/* Read output o back from the device, plant the --inject fault (if any), and
 * return its values (rows x cols, caller frees); *unwritten counts the
 * elements that still hold the poison bytes. */
static float *read_back(struct run *r, int o, size_t *unwritten)
{
    const struct output *p = &r->out[o];
    enum dtype t = r->c->dt;
    size_t es = DTYPES[t].bytes;
    unsigned char *raw = xmalloc(p->elems * es);
    dev_download(r->d, raw, p->buf, p->elems * es);
    const struct inject *inj = r->o->inject ? find_inject(r->o->inject) : NULL;
    struct inject_ctx ix = { p, NULL, raw, t, case_atol(r), mix64(r->key ^ 0x696e6a) };
    if (inj && inj->on_raw) inj->apply(&ix);
    *unwritten = 0;
    for (size_t i = 0; i < p->elems; i++) {
        size_t k = 0;
        while (k < es && raw[i * es + k] == 0xff) k++;
        *unwritten += k == es;
    }
    ix.out = decode_strided(t, raw, p->rows, p->cols, p->srow, p->scol);
    free(raw);
    if (inj && !inj->on_raw) inj->apply(&ix);
    return ix.out;
}

/* Read output o back and run every gate on it: sets res->s, res->v and
 * res->pass; res->plan and res->refs must be ready.  `when` names the check
 * in failure lines. */
static void check_output(struct run *r, int o, struct result *res, const char *when)
{
    size_t unwritten;
    float *out = read_back(r, o, &unwritten);
    struct gate_in g = { &r->out[o], &res->plan, &res->refs, out, unwritten, r->c->dt,
                         case_rtol(r), case_atol(r), r->inputs_nonzero };
    free(res->s.tiles);
    stats_compute(&res->s, &g);
    res->pass = 1;
    for (size_t k = 0; k < N_GATES; k++) {
        memset(&res->v[k], 0, sizeof res->v[k]);
        GATES[k].eval(&res->s, &g, &res->v[k]);
        res->pass &= res->v[k].pass;
    }
    res->failed_when = when;
    free(out);
}

/* Exit 2 if --rtol/--atol loosen dtype t's defaults without --why. */
static void check_tolerance(const struct opts *o, enum dtype t, const char *label)
{
    int looser = o->rtol > DTYPES[t].rtol || o->atol > DTYPES[t].atol;
    if (looser && !o->why)
        die(EXIT_USAGE, "%s: --rtol/--atol looser than the %s defaults (rtol %g, atol %g) need "
            "--why \"reason\"", label, DTYPES[t].name, DTYPES[t].rtol, DTYPES[t].atol);
}

/* The whole pipeline for one case: inputs, poisoned outputs, launches,
 * references, gates; only if every gate passed, the timer and a re-check of
 * the timed outputs.  Reports the case; returns 1 if it passed. */
static int run_case(const struct kcase *c, struct device *d, const struct opts *o, int idx,
                    int total, struct tally *tl, unsigned *failed_gates)
{
    check_tolerance(o, c->dt, c->where);
    struct run r = { .c = c, .d = d, .o = o, .inputs_nonzero = 1 };
    r.key = hash_str(mix64(o->seed), c->label);
    FILE *progress = o->quiet ? NULL : stderr;
    if (progress) fprintf(progress, "[%d/%d] %s (%s): inputs\n", idx, total, c->label, c->where);
    c->op->prepare(&r);
    for (int k = 0; k < r.nout; k++) {
        dev_fill(d, r.out[k].buf, 0xff, r.out[k].elems * DTYPES[c->dt].bytes);
        c->op->launch(&r, k);
    }
    dev_sync(d);
    struct result *res = xcalloc((size_t)r.nout, sizeof *res);
    int pass = 1;
    for (int k = 0; k < r.nout; k++) {
        plan_build(&res[k].plan, &r.out[k], o->full, mix64(r.key ^ (uint64_t)k));
        refs_compute(&res[k].refs, &r.out[k], &res[k].plan, c->dt);
        if (progress)
            fprintf(progress, "[%d/%d] %s %s: references on %zu of %zu elements (%s): double %.2f s, "
                    "same-precision %.2f s\n", idx, total, c->label, r.out[k].name,
                    plan_count(&res[k].plan, &r.out[k]), r.out[k].rows * r.out[k].cols,
                    res[k].plan.full ? "all" : "tile-covering sample", res[k].refs.ref_s,
                    res[k].refs.lp_s);
        check_output(&r, k, &res[k], "check");
        pass &= res[k].pass;
    }
    for (int k = 0; k < r.nout && pass; k++) {
        if (progress) fprintf(progress, "[%d/%d] %s %s: timing\n", idx, total, c->label, r.out[k].name);
        time_output(&r, k, &res[k].t);
        check_output(&r, k, &res[k], "re-check after timing");
        pass &= res[k].pass;
        res[k].timed = res[k].pass;
        double peak = c->dt == DT_F32 ? d->peak_f32 : d->peak_mma16;
        res[k].tflops = r.out[k].flops / (res[k].t.median_us * 1e-6) / 1e12;
        res[k].pct_peak = peak > 0 ? 100.0 * res[k].tflops * 1e12 / peak : -1;
    }
    if (!pass)
        for (int k = 0; k < r.nout; k++) res[k].timed = 0;  /* a failed case has no time */
    for (int k = 0; k < r.nout; k++)
        for (size_t g = 0; g < N_GATES; g++)
            if (!res[k].v[g].pass && failed_gates) *failed_gates |= 1u << g;
    if (o->quiet) {
        /* selftest: the caller reports */
    } else if (o->json) {
        json_case(&r, res, pass);
    } else {
        for (int k = 0; k < r.nout; k++) print_row(c, &r.out[k], &res[k]);
        fflush(stdout);
    }
    tl->cases++, tl->cases_failed += !pass;
    for (int k = 0; k < r.nout; k++) {
        tl->outputs++, tl->outputs_failed += !res[k].pass;
        plan_free(&res[k].plan);
        refs_free(&res[k].refs);
        free(res[k].s.tiles);
    }
    free(res);
    release_run(&r);
    return pass;
}

/* ===== Commands ===== */

/* Open the device the options name: the CPU, or GPU N with kernels compiled
 * (or taken from the cache) and loaded. */
static void open_device(struct device *d, const struct opts *o)
{
    memset(d, 0, sizeof *d);
    if (o->device_cpu) {
        if (o->kernels_path) die(EXIT_USAGE, "--kernels needs a GPU device; --device cpu runs ref.c's candidate");
        cpu_open(d);
        return;
    }
    gpu_open(d, o->device_index);
    const char *src = kg_embedded_src, *name = "kernels.hip (embedded)";
    char *file = NULL;
    if (o->kernels_path) {
        file = read_file(o->kernels_path, NULL);
        if (!file) die(EXIT_USAGE, "cannot read --kernels %s: %s", o->kernels_path, strerror(errno));
        src = file, name = o->kernels_path;
    }
    d->code = xcalloc(1, sizeof *d->code);
    compile_source(&d->rtc, d->pf, src, name, d->arch, NULL, 0, d->code);
    gpu_check(d, d->rt.module_load(&d->module, d->code->data), "loading the code object");
    free(file);
}

/* Give back what open_device took. */
static void close_device(struct device *d)
{
    dev_free(d, d->flush);
    d->flush = 0;
    if (d->code) free(d->code->data), free(d->code), d->code = NULL;
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
    if (o->inject) {
        const struct inject *inj = find_inject(o->inject);
        printf("inject: %s (%s; the %s gate must catch it)\n", inj->name, inj->what, inj->gate);
    }
}

/* Run cases on the chosen device and print the table; exit code 0 or 1. */
static int cmd_run(struct kcase *cases, size_t n, const struct opts *o)
{
    struct device d;
    open_device(&d, o);
    FILE *summary = o->json ? stderr : stdout;
    print_machine(summary, &d);
    fprintf(summary, "  %-12s %" PRIu64 "\n\n", "seed:", o->seed);
    if (!o->json) {
        print_why(o);
        print_header();
    }
    struct tally tl = { 0 };
    for (size_t i = 0; i < n; i++) run_case(&cases[i], &d, o, (int)i + 1, (int)n, &tl, NULL);
    fprintf(summary, "\nkgate: %d case%s, %d output%s: %d passed, %d failed\n", tl.cases,
            tl.cases == 1 ? "" : "s", tl.outputs, tl.outputs == 1 ? "" : "s",
            tl.outputs - tl.outputs_failed, tl.outputs_failed);
    close_device(&d);
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
    struct output o = { .rows = 1000, .cols = 777, .inner = 10000 };
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

/* Run one selftest case (case options as one string) with fault `inj` (or
 * none); returns 1 if it passed and sets *failed to the gates that failed. */
static int st_run(struct device *d, const struct opts *base, const char *args,
                  const struct inject *inj, struct kcase *c, unsigned *failed)
{
    char text[128], *argv[16];
    snprintf(text, sizeof text, "%s", args);
    int argc = 0;
    for (char *save = NULL, *t = strtok_r(text, " ", &save); t && argc < 16; t = strtok_r(NULL, " ", &save))
        argv[argc++] = t;
    case_init(c, find_op("gemm"), "selftest");
    parse_case_args(c, NULL, argc, argv, 0, 0);
    struct opts o = *base;
    o.quiet = 1, o.inject = inj ? inj->name : NULL;
    struct tally tl = { 0 };
    *failed = 0;
    return run_case(c, d, &o, 0, 0, &tl, failed);
}

/* Clean cases pass every gate on the device; every planted fault makes its
 * own gate fail. */
static void st_gates(struct selftest *st, struct device *d, const struct opts *base)
{
    static const char *const clean[] = {
        "--dtype f32 --layout NN --shape 200x150x90",
        "--dtype f16 --layout TN --shape 130x257x64",
        "--dtype bf16 --layout TT --shape 129x131x77 --bwd",
    };
    struct kcase c;
    unsigned failed;
    for (size_t i = 0; i < sizeof clean / sizeof *clean; i++) {
        int pass = st_run(d, base, clean[i], NULL, &c, &failed);
        st_report(st, pass, "clean %s passes every gate", c.label);
    }
    for (size_t i = 0; i < N_INJECTS; i++) {
        const struct inject *inj = &INJECTS[i];
        int pass = st_run(d, base, "--dtype bf16 --layout NT --shape 300x260x70", inj, &c, &failed);
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
    st_references(&st);
    st_sampling(&st);
    struct device d;
    open_device(&d, o);
    printf("gate checks on %s (%s)\n", d.name, d.arch);
    st_gates(&st, &d, o);
    close_device(&d);
    printf("selftest: %d passed, %d failed\n", st.passed, st.failed);
    return st.failed ? EXIT_GATE : EXIT_PASS;
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

/* Matrix-unit instructions by opcode prefix, per platform. */
static const char *const MATRIX_OPS[PF_COUNT][6] = {
    { "HGMMA", "QGMMA", "IGMMA", "HMMA", "IMMA", NULL },
    { "v_mfma", "v_smfmac", "v_wmma", "v_swmmac", NULL },
};
static const char *const DISASM[PF_COUNT][6] = {
    { "cuobjdump", "/usr/local/cuda/bin/cuobjdump", NULL },
    { "llvm-objdump", "llvm-objdump-20", "llvm-objdump-19", "/opt/rocm/llvm/bin/llvm-objdump", NULL },
};

/* The opcode of one disassembly line, or NULL if the line is no instruction.
 * SASS: an address comment, an optional predicate, then "HGMMA.64x8x16..."; AMDGPU:
 * a tab, then "v_mfma_...". */
static const char *isa_opcode(enum platform pf, char *line, char *buf, size_t n)
{
    char *p = line;
    if (pf == PF_CUDA) {
        p = strstr(line, "*/");
        if (!p || !strstr(line, "/*") || strstr(line, "/*") > p) return NULL;
        p += 2;
        p += strspn(p, " \t");
        if (*p == '@') p += strcspn(p, " \t"), p += strspn(p, " \t");
        if (!*p || *p == '/' || *p == '\n') return NULL;
    } else {
        if (*p != ' ' && *p != '\t') return NULL;
        p += strspn(p, " \t");
        if (!(*p >= 'a' && *p <= 'z')) return NULL;
    }
    size_t len = strcspn(p, " \t;\n");
    snprintf(buf, n, "%.*s", (int)len, p);
    return buf;
}

/* The kernel a line opens, if it opens one (SASS "Function : name";
 * objdump "0000 <name>:"). */
static int isa_function(enum platform pf, const char *line, char *name, size_t n)
{
    const char *p;
    if (pf == PF_CUDA && (p = strstr(line, "Function : "))) {
        snprintf(name, n, "%.*s", (int)strcspn(p + 11, " \n"), p + 11);
        return 1;
    }
    if (pf == PF_HIP && (p = strchr(line, '<')) && strstr(line, ">:") && line[0] != ' ' && line[0] != '\t') {
        snprintf(name, n, "%.*s", (int)strcspn(p + 1, ">"), p + 1);
        return 1;
    }
    return 0;
}

struct isa_kernel { char name[128]; int insts, matrix; char first_matrix[64]; };

/* Disassemble the code object and print per kernel its instruction count and
 * matrix-unit instruction count. */
static int isa_report(enum platform pf, const char *tool, const char *path)
{
    char cmd[PATH_MAX * 2 + 32];
    snprintf(cmd, sizeof cmd, "'%s' %s '%s' 2>&1", tool, pf == PF_CUDA ? "-sass" : "-d", path);
    FILE *f = popen(cmd, "r");
    if (!f) die(EXIT_DEVICE, "cannot run %s", tool);
    static struct isa_kernel k[MAX_KERNELS];
    int nk = 0;
    char line[1024], op[64], name[128];
    while (fgets(line, sizeof line, f)) {
        if (isa_function(pf, line, name, sizeof name)) {
            if (nk < MAX_KERNELS) memset(&k[nk], 0, sizeof k[nk]), snprintf(k[nk++].name, 128, "%s", name);
            continue;
        }
        if (nk == 0 || !isa_opcode(pf, line, op, sizeof op)) continue;
        struct isa_kernel *cur = &k[nk - 1];
        cur->insts++;
        for (int i = 0; MATRIX_OPS[pf][i]; i++)
            if (strncmp(op, MATRIX_OPS[pf][i], strlen(MATRIX_OPS[pf][i])) == 0) {
                if (!cur->matrix++) snprintf(cur->first_matrix, sizeof cur->first_matrix, "%s", op);
            }
    }
    int rc = pclose(f);
    if (rc != 0 || nk == 0) die(EXIT_DEVICE, "%s could not disassemble %s", tool, path);
    printf("%-32s %8s %8s  %s\n", "kernel", "insts", "matrix", "first matrix instruction");
    for (int i = 0; i < nk; i++)
        printf("%-32s %8d %8d  %s\n", k[i].name, k[i].insts, k[i].matrix,
               k[i].matrix ? k[i].first_matrix : "-");
    return EXIT_PASS;
}

/* kgate isa [--arch A] [--kernels FILE]: compile for A (default: GPU 0's
 * arch) and list each kernel's instructions, when a disassembler is found. */
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
    struct rtc c;
    load_rtc(pf, &c);
    const char *src = kg_embedded_src, *name = "kernels.hip (embedded)";
    char *file = NULL;
    if (o->kernels_path) {
        file = read_file(o->kernels_path, NULL);
        if (!file) die(EXIT_USAGE, "cannot read --kernels %s: %s", o->kernels_path, strerror(errno));
        src = file, name = o->kernels_path;
    }
    struct code_obj co;
    memset(&co, 0, sizeof co);
    compile_source(&c, pf, src, name, arch, NULL, 0, &co);
    printf("%s for %s: code object %zu bytes, sha256 %s\n", name, arch, co.size, co.sha);
    char tool[PATH_MAX];
    if (find_tool(DISASM[pf], tool, sizeof tool) != 0) {
        printf("no disassembler found (tried %s on PATH and in the usual places): instruction "
               "counts are not available\n", pf == PF_CUDA ? "cuobjdump" : "llvm-objdump");
        free(file);
        free(co.data);
        return EXIT_PASS;
    }
    int rc = isa_report(pf, tool, co.bin_path);
    free(file);
    free(co.data);
    return rc;
}

/* ===== main ===== */

static const char USAGE[] =
    "usage: kgate COMMAND [options]\n"
    "\n"
    "Is a GPU kernel right, and only then, how fast?  Every output is gated against\n"
    "CPU references; a time is printed only for a case that passed every gate.\n"
    "\n"
    "commands:\n"
    "  all       [--shapes FILE]             every case of a shapes file (default shapes.txt)\n"
    "  gemm      --shape MxNxK [--dtype D] [--layout L] [--bwd]\n"
    "                                        one GEMM: C = A·B; --bwd adds dA = dC·Bᵀ, dB = Aᵀ·dC\n"
    "  devices                               list the GPUs the runtime sees, and the CPU\n"
    "  selftest                              prove every gate against clean runs and planted faults\n"
    "  isa       [--arch A]                  compile kernels.hip for A (sm_90a, gfx942, ...; default\n"
    "                                        GPU 0) and count each kernel's matrix instructions\n"
    "\n"
    "case options:\n"
    "  --dtype D        f32, f16, bf16 (default bf16); inputs and output, fp32 accumulation\n"
    "  --layout L       NN, NT, TN, TT (default NT): A then B; N = A [M][K], B [K][N];\n"
    "                   T = A stored [K][M], B stored [N][K]\n"
    "  --shape MxNxK    each dimension 1..1048576\n"
    "  --bwd            also the backward products dA and dB, each gated\n"
    "\n"
    "run options:\n"
    "  --device N|cpu   GPU N (default 0), or cpu: ref.c's candidate runs the same pipeline\n"
    "  --kernels FILE   compile FILE instead of the embedded kernels.hip (same entry points)\n"
    "  --seed N         input seed (default 42; printed)\n"
    "  --full           check every element (default: all up to 2^31 multiply-adds per output,\n"
    "                   a tile-covering sample above)\n"
    "  --rtol X --atol Y  allclose tolerances (defaults: f32 1e-4, f16/bf16 1e-2);\n"
    "                   looser than the default needs --why \"reason\"\n"
    "  --why TEXT       the reason for a looser tolerance, printed in the report\n"
    "  --inject KIND    plant a fault in the candidate's output: tile, tail, nan, bias, drop,\n"
    "                   row, unwritten; the gate meant for it must fail\n"
    "  --json           one JSON object per case on stdout (the summary goes to stderr)\n"
    "\n"
    "exit: 0 every gate passed, 1 a gate failed, 2 bad usage or input, 3 no GPU runtime,\n"
    "      5 device, kernel or compiler error\n"
    "environment: KGATE_CACHE (code-object cache dir), KGATE_THREADS, KGATE_NVRTC,\n"
    "      KGATE_HIPRTC, KGATE_CUDA, KGATE_HIP (library paths), KGATE_COMPILE_TIMEOUT (s)\n";

int main(int argc, char **argv)
{
    if (argc < 2) die(EXIT_USAGE, "no command given (kgate --help lists them)");
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        fputs(USAGE, stdout);
        return EXIT_PASS;
    }
    struct opts o = { .seed = 42, .rtol = -1, .atol = -1 };
    const char *cmd = argv[1];
    const struct op *op = find_op(cmd);
    if (op) {
        struct kcase c;
        case_init(&c, op, "command line");
        parse_case_args(&c, &o, argc, argv, 2, 1);
        if (o.inject && !find_inject(o.inject)) die(EXIT_USAGE, "--inject %s: unknown fault", o.inject);
        return cmd_run(&c, 1, &o);
    }
    for (int i = 2; i < argc;) {
        int used = parse_global(&o, argc, argv, i);
        if (!used) die(EXIT_USAGE, "%s: unknown option '%s' (see kgate --help)", cmd, argv[i]);
        i += used;
    }
    if (o.inject && !find_inject(o.inject))
        die(EXIT_USAGE, "--inject %s: unknown fault (tile, tail, nan, bias, drop, row, unwritten)", o.inject);
    if (strcmp(cmd, "all") == 0) {
        size_t n;
        struct kcase *cases = read_shapes(o.shapes_path ? o.shapes_path : "shapes.txt", &n);
        int rc = cmd_run(cases, n, &o);
        free(cases);
        return rc;
    }
    if (strcmp(cmd, "devices") == 0) return cmd_devices();
    if (strcmp(cmd, "selftest") == 0) return cmd_selftest(&o);
    if (strcmp(cmd, "isa") == 0) return cmd_isa(&o);
    die(EXIT_USAGE, "unknown command '%s' (see kgate --help)", cmd);
}
