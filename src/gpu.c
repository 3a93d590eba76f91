/* src/gpu.c — the device: kernels.hip embedded in the binary, the GPU
 * runtime and run-time compiler loaded with dlopen (one table of function
 * pointers for CUDA and HIP), opening a GPU or the CPU "device", memory,
 * launches that note their geometry, graphs (--graph: capture, replay, the
 * calls a capture cannot hold); the matrix-unit instruction classes of each
 * platform.  Relies on util.c and ref.c (the CPU's thread count). */

/* --- embedded kernels --- */

/* kernels.hip is assembled into the binary, so a copied binary carries it. */
__asm__(".section .rodata\n"
        ".global kg_embedded_src\n"
        ".type kg_embedded_src, @object\n"
        "kg_embedded_src:\n"
        ".incbin \"kernels.hip\"\n"
        ".byte 0\n"
        ".previous\n");
extern const char kg_embedded_src[];

/* --- runtime loader --- */

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
    X(0, launch_ex, kg_res, (const void *, void *, void **, void **), "cuLaunchKernelEx", "") \
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
      "cuTensorMapEncodeTiled", "")                                                         \
    X(0, capture_begin, kg_res, (void *, int), "cuStreamBeginCapture_v2", "hipStreamBeginCapture") \
    X(0, capture_end, kg_res, (void *, void **), "cuStreamEndCapture", "hipStreamEndCapture") \
    X(0, graph_instantiate, kg_res, (void **, void *, unsigned long long),                 \
      "cuGraphInstantiateWithFlags", "hipGraphInstantiateWithFlags")                        \
    X(0, graph_launch, kg_res, (void *, void *), "cuGraphLaunch", "hipGraphLaunch")         \
    X(0, graph_exec_destroy, kg_res, (void *), "cuGraphExecDestroy", "hipGraphExecDestroy") \
    X(0, graph_destroy, kg_res, (void *), "cuGraphDestroy", "hipGraphDestroy")            \
    X(0, dev_pci, kg_res, (char *, int, int), "cuDeviceGetPCIBusId", "hipDeviceGetPCIBusId") \
    X(0, dev_uuid, kg_res, (unsigned char *, int), "cuDeviceGetUuid_v2|cuDeviceGetUuid",    \
      "hipDeviceGetUuid")

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
static const char *const RT_LIBS[PF_COUNT][8] = {
    { "libcuda.so.1", NULL },
    { "libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6", "/opt/rocm/lib/libamdhip64.so",
      "/opt/rocm/lib/libamdhip64.so.7", "/opt/rocm/lib/libamdhip64.so.6", NULL },
};
static const char *const RTC_LIBS[PF_COUNT][8] = {
    { "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so", "/usr/local/cuda/lib64/libnvrtc.so", NULL },
    { "libhiprtc.so", "libhiprtc.so.7", "libhiprtc.so.6", "/opt/rocm/lib/libhiprtc.so", "/opt/rocm/lib/libhiprtc.so.7",
      "/opt/rocm/lib/libhiprtc.so.6", NULL },
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

/* --- device --- */

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

/* A last-level cache behind L2 that the device attributes do not report:
 * MI300X and MI355X's 256 MiB Infinity Cache (AMD's published figure).
 * The timer's flush covers twice the larger of it and L2. */
static const struct { const char *arch; unsigned mib; } LLC[] = { { "gfx942", 256 }, { "gfx950", 256 } };

enum dev_kind { DEV_CPU, DEV_GPU };

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
    char compiler[160];   /* "NVRTC 13.0", "hiprtc 9.0 (libhiprtc.so.6.2.60202)": rtc_ident */
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
    int capturing;        /* a graph capture is under way on the stream (--graph) */
    char capture_why[200]; /* the first call a graph cannot hold, made during the capture ("": none) */
    char pci[32];         /* GPU: its PCI bus id, domain:bus:device.function ("": not known) */
    char uuid[48];        /* GPU: its UUID, as nvidia-smi writes it on CUDA ("": not known) */
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

/* Load a GPU runtime: CUDA first, then HIP.  Returns 0 with d->pf, d->rt
 * and d->rtc filled, or -1 with `msg` saying that none was found and
 * naming every library tried. */
static int gpu_try_runtime(struct device *d, char *msg, size_t msg_n)
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
        return 0;
    }
    snprintf(msg, msg_n, "no GPU runtime found (tried %s%s%s)", tried, *why ? "; " : "", why);
    return -1;
}

/* Load a GPU runtime (gpu_try_runtime), or exit 3 naming every library
 * tried. */
static void gpu_load_runtime(struct device *d)
{
    char msg[2600];
    if (gpu_try_runtime(d, msg, sizeof msg) != 0) die(EXIT_NORUNTIME, "%s; use --device cpu to run on the CPU", msg);
}

/* The compile target of a CUDA device: sm_XY, with the arch-specific "a"
 * suffix on Hopper so wgmma and setmaxnreg are available. */
static void cuda_arch(struct device *d)
{
    int ma = d->attr[AT_CC_MAJOR], mi = d->attr[AT_CC_MINOR];
    snprintf(d->arch_base, sizeof d->arch_base, "sm_%d%d", ma, mi);
    snprintf(d->arch, sizeof d->arch, "sm_%d%d%s", ma, mi, ma == 9 && mi == 0 ? "a" : "");
}

/* The run-time compiler's name, as reports show it and the code-object
 * cache is keyed by: "NVRTC 13.0"; hiprtc reports 9.0 in every ROCm 6 and 7
 * release (clr hiprtc.cpp), so its name adds the file of the library
 * actually loaded ("hiprtc 9.0 (libhiprtc.so.6.2.60202)"), that one ROCm's
 * code objects are never taken for another's. */
static void rtc_ident(const struct rtc *c, enum platform pf, char *buf, size_t n)
{
    int ma = 0, mi = 0;
    Dl_info info;
    char real[PATH_MAX];
    c->version(&ma, &mi);
    if (pf == PF_HIP && dladdr((void *)c->create, &info) && info.dli_fname && realpath(info.dli_fname, real)) {
        const char *file = strrchr(real, '/') ? strrchr(real, '/') + 1 : real;
        snprintf(buf, n, "%s %d.%d (%.100s)", RTC_NAME[pf], ma, mi, file);
        return;
    }
    snprintf(buf, n, "%s %d.%d", RTC_NAME[pf], ma, mi);
}

/* The compile target of a HIP device: gcnArchName from the device properties
 * (e.g. "gfx942:sramecc+:xnack-"); the part before ':' is the base arch. */
static void hip_arch(struct device *d)
{
    static _Alignas(16) char props[HIP_PROPS_BYTES];   /* the struct needs 8 */
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

/* The identity of GPU `handle`, so that a person can find the card: its
 * PCI bus id into pci and its UUID into uuid (each "" when the runtime
 * lacks the call or it fails).  A CUDA UUID is written GPU-xxxxxxxx-xxxx-
 * xxxx-xxxx-xxxxxxxxxxxx as nvidia-smi does; HIP's 16 bytes are the ASCII
 * hex digits of ROCr's unique id (clr rocdevice.cpp), written GPU-<them>
 * as rocminfo shows it and HIP_VISIBLE_DEVICES takes it.  The HIP form is
 * not yet run on a GPU. */
static void gpu_identity(const struct device *d, int handle, char *pci, size_t pci_n, char *uuid, size_t uuid_n)
{
    unsigned char u[16];
    *pci = *uuid = 0;
    if (d->rt.dev_pci && d->rt.dev_pci(pci, (int)pci_n, handle) != 0) *pci = 0;
    pci[pci_n - 1] = 0;
    if (!d->rt.dev_uuid || d->rt.dev_uuid(u, handle) != 0 || uuid_n < 41) return;
    if (d->pf == PF_HIP) {
        snprintf(uuid, uuid_n, "GPU-%.16s", (const char *)u);
        return;
    }
    size_t n = (size_t)snprintf(uuid, uuid_n, "GPU-");
    for (int i = 0; i < 16; i++)
        n += (size_t)snprintf(uuid + n, uuid_n - n, "%s%02x", i == 4 || i == 6 || i == 8 || i == 10 ? "-" : "", u[i]);
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
    gpu_identity(d, d->handle, d->pci, sizeof d->pci, d->uuid, sizeof d->uuid);
    for (int a = 0; a < AT_COUNT; a++)
        gpu_check(d, rt->dev_attr(&d->attr[a], ATTR_ID[d->pf][a], d->handle), "reading a device attribute");
    gpu_check(d, rt->dev_mem(&d->mem_bytes, d->handle), "reading the device memory size");
    gpu_check(d, rt->drv_version(&d->driver_version), "reading the driver version");
    if (d->pf == PF_CUDA) cuda_arch(d); else hip_arch(d);
    rtc_ident(&d->rtc, d->pf, d->compiler, sizeof d->compiler);
    device_peaks(d);
    gpu_check(d, rt->stream_create(&d->stream, 1 /* non-blocking */), "creating a stream");
    size_t l2 = d->attr[AT_L2_BYTES] > 0 ? (size_t)d->attr[AT_L2_BYTES] : 64u << 20, llc = 0;
    for (size_t i = 0; i < sizeof LLC / sizeof *LLC; i++)
        if (strcmp(LLC[i].arch, d->arch_base) == 0) llc = (size_t)LLC[i].mib << 20;
    d->flush_bytes = 2 * (llc > l2 ? llc : l2);
    snprintf(d->flush_note, sizeof d->flush_note, "%.0f MiB (2 x %s)", d->flush_bytes / 1048576.0,
             llc > l2 ? "Infinity Cache" : "L2");
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

/* During a graph capture, note `what` (the first such call) as the reason
 * the graph is refused: a call that capture does not record (an
 * allocation, a copy from or to the host) or that it forbids (a wait on the
 * stream).  1 when a capture is under way. */
static int capture_refuse(struct device *d, const char *what)
{
    if (!d->capturing) return 0;
    if (!d->capture_why[0]) snprintf(d->capture_why, sizeof d->capture_why, "%s", what);
    return 1;
}

/* Allocate device memory (exit 5 when it cannot).  Inside a capture the
 * allocation is made, the capture being relaxed, and refuses the graph. */
static uint64_t dev_alloc(struct device *d, size_t bytes)
{
    capture_refuse(d, "a device allocation inside the capture (scratch allocated on the first launch: "
                      "allocate it before the launch is captured)");
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
    capture_refuse(d, "a copy from the host inside the capture (a graph replays the bytes of capture time)");
    if (d->kind == DEV_CPU) memcpy((void *)(uintptr_t)dst, src, bytes);
    else gpu_check(d, d->rt.h2d(dst, src, bytes), "copying inputs to the device");
}

/* Copy device memory to the host; waits for the stream first, so a kernel's
 * asynchronous fault is reported here, as a device error. */
static void dev_download(struct device *d, void *dst, uint64_t src, size_t bytes)
{
    if (d->kind == DEV_CPU) { memcpy(dst, (void *)(uintptr_t)src, bytes); return; }
    if (capture_refuse(d, "a value read back from the device inside the capture (a graph freezes what "
                          "the host read)"))
        return;
    gpu_check(d, d->rt.stream_sync(d->stream), "running the kernel (stream synchronize)");
    watch_done();
    gpu_check(d, d->rt.d2h(dst, src, bytes), "copying outputs from the device");
}

/* Fill `bytes` bytes with `byte`, queued on the device's stream. */
static void dev_fill(struct device *d, uint64_t p, unsigned char byte, size_t bytes)
{
    if (d->kind == DEV_CPU) memset((void *)(uintptr_t)p, byte, bytes);
    else gpu_check(d, d->rt.memset8(p, byte, bytes, d->stream), "filling device memory");
}

/* Wait for everything queued on the device's stream (the watchdog's
 * deadline is then cleared). */
static void dev_sync(struct device *d)
{
    if (capture_refuse(d, "a wait for the stream inside the capture (a synchronisation)")) return;
    if (d->kind == DEV_GPU)
        gpu_check(d, d->rt.stream_sync(d->stream), "running the kernel (stream synchronize)");
    watch_done();
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

/* One launch: its grid, block, dynamic shared memory, the tiles a
 * persistent grid strides over (0: each block is one tile), and whether it
 * may start before the kernel launched ahead of it has finished (1:
 * programmatic dependent launch, CUDA on sm_90 and later; the kernel then
 * orders its own reads after that kernel's writes, and its last block
 * waits for that kernel, griddepcontrol.wait, so that what follows it in
 * the stream follows both). */
struct launch_dims { unsigned grid[3], threads, smem; uint64_t tiles; int early; };

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
 * refuses more than 48 KiB without cuFuncSetAttribute; HIP asks for no
 * opt-in, and its hipFuncSetAttribute takes no module function); once per
 * kernel and size.  Exits 5 when the runtime cannot. */
static void kernel_allow_smem(struct device *d, struct kfn *k, unsigned smem)
{
    if (d->pf == PF_HIP || smem <= 48 * 1024 || smem <= k->smem_max) return;
    if (!d->rt.func_attr) die(EXIT_DEVICE, "%s needs %u bytes of shared memory and the runtime lacks cuFuncSetAttribute", k->name, smem);
    kg_res r = d->rt.func_attr(k->fn, 8 /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */, (int)smem);
    if (r != 0) die(EXIT_DEVICE, "allowing %s %u bytes of shared memory failed: %s (%d)", k->name, smem, gpu_err_name(d, r), r);
    k->smem_max = smem;
}

/* cuLaunchKernelEx's configuration and attribute (cuda.h's CUlaunchConfig
 * and CUlaunchAttribute, whose value is a 64-byte union). */
struct cu_launch_attr { int id; char pad[4]; union { int allowed; char bytes[64]; } value; };
struct cu_launch_config {
    unsigned grid[3], block[3], smem;
    void *stream;
    struct cu_launch_attr *attrs;
    unsigned nattrs;
};

/* Launch kernel k with the dimensions l through cuLaunchKernelEx, allowed
 * to start while the kernel ahead of it in the stream still runs
 * (CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, 6); the driver's
 * result. */
static kg_res launch_early(struct device *d, const struct kfn *k, const struct launch_dims *l, void **params)
{
    struct cu_launch_attr early = { .id = 6, .value.allowed = 1 };
    struct cu_launch_config c = { { l->grid[0], l->grid[1], l->grid[2] }, { l->threads, 1, 1 }, l->smem, d->stream,
                                  &early, 1 };
    return d->rt.launch_ex(&c, k->fn, params, NULL);
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
    watch_launch();
    kg_res r = l->early && d->rt.launch_ex ? launch_early(d, k, l, params)
                                           : d->rt.launch(k->fn, l->grid[0], l->grid[1], l->grid[2], l->threads, 1,
                                                          1, l->smem, d->stream, params, NULL);
    if (r != 0) die(EXIT_DEVICE, "launching %s failed: %s (%d)", name, gpu_err_name(d, r), r);
    geom_note(d, k, l);
}

/* gpu_launch_dims for a gx x gy x gz grid of `threads`-thread blocks, no
 * dynamic shared memory, one tile per block. */
static void gpu_launch(struct device *d, const char *name, unsigned gx, unsigned gy, unsigned gz,
                       unsigned threads, void **params)
{
    struct launch_dims l = { { gx, gy, gz }, threads, 0, 0, 0 };
    gpu_launch_dims(d, name, &l, params);
}

/* --- graphs (--graph) --- */

/* One launch of a case captured into a graph: the graph and its executable
 * (NULL when the capture was refused: why says so), and whether the
 * kernels it captured declare atomics. */
struct graph_slot { void *graph, *exec; int tried, atomics; char why[200]; };
#define GRAPH_SLOTS 8   /* a case's launch owners (MAX_OUT, run.c) and its quantize stage's two operands */

/* Begin capturing the device's stream into a graph, in relaxed mode: the
 * driver allows every call, and capture_refuse names those a graph cannot
 * hold.  Exit 5 when the runtime lacks graphs. */
static void graph_begin(struct device *d)
{
    if (!d->rt.capture_begin || !d->rt.capture_end || !d->rt.graph_instantiate || !d->rt.graph_launch ||
        !d->rt.graph_exec_destroy || !d->rt.graph_destroy)
        die(EXIT_DEVICE, "--graph: the %s runtime lacks stream capture or graph launch", PF_NAME[d->pf]);
    d->capture_why[0] = 0;
    gpu_check(d, d->rt.capture_begin(d->stream, 2 /* relaxed */), "beginning a stream capture");
    d->capturing = 1;
}

/* End the capture begun by graph_begin into g: instantiated, or, when a
 * call during the capture refused it or the runtime could not end or
 * instantiate it, no executable and g->why saying why. */
static void graph_end(struct device *d, struct graph_slot *g)
{
    d->capturing = 0;
    kg_res r = d->rt.capture_end(d->stream, &g->graph);
    if (d->capture_why[0])
        snprintf(g->why, sizeof g->why, "%s", d->capture_why);
    else if (r != 0)
        snprintf(g->why, sizeof g->why, "ending the capture failed: %s (%d)", gpu_err_name(d, r), r);
    else if ((r = d->rt.graph_instantiate(&g->exec, g->graph, 0)) != 0)
        g->exec = NULL, snprintf(g->why, sizeof g->why, "instantiating the graph failed: %s (%d)", gpu_err_name(d, r), r);
}

/* Replay g's graph on the device's stream. */
static void graph_replay(struct device *d, const struct graph_slot *g)
{
    watch_launch();
    gpu_check(d, d->rt.graph_launch(g->exec, d->stream), "launching a graph");
}

/* Destroy the n graphs of slots (a case's, once it has run) and clear them. */
static void graph_free(struct device *d, struct graph_slot *slots, int n)
{
    for (int i = 0; i < n; i++) {
        if (slots[i].exec) d->rt.graph_exec_destroy(slots[i].exec);
        if (slots[i].graph) d->rt.graph_destroy(slots[i].graph);
        memset(&slots[i], 0, sizeof slots[i]);
    }
}

/* The device's SM (CU) count, at least 1. */
static unsigned dev_sms(const struct device *d) { return d->attr[AT_SMS] > 0 ? (unsigned)d->attr[AT_SMS] : 1; }

/* Blocks along a dimension of n elements in tiles of `tile`. */
static unsigned tile_count(int n, int tile) { return (unsigned)((n + tile - 1) / tile); }

/* --- matrix-unit instruction classes (kgate isa, --expect) --- */

/* Each class on one platform, with the opcode prefixes that belong to it:
 * options.c checks --expect against them, isa.c counts them. */
enum { IC_WGMMA, IC_MMA, IC_MFMA, IC_WMMA, IC_COUNT };
static const struct { const char *name; enum platform pf; const char *ops[4]; } MATRIX_CLASSES[IC_COUNT] = {
    { "wgmma", PF_CUDA, { "HGMMA", "QGMMA", "IGMMA", NULL } }, /* sm_90 warpgroup MMA */
    { "mma", PF_CUDA, { "HMMA", "IMMA", NULL } },              /* warp-level mma.sync */
    { "mfma", PF_HIP, { "v_mfma", "v_smfmac", NULL } },        /* CDNA matrix cores */
    { "wmma", PF_HIP, { "v_wmma", "v_swmmac", NULL } },        /* RDNA 3 and 4 */
};
#define MATRIX_CLASS_NAMES "wgmma, mma, mfma, wmma"

/* The class named `name`, or -1. */
static int matrix_class(const char *name)
{
    for (int c = 0; c < IC_COUNT; c++)
        if (strcmp(name, MATRIX_CLASSES[c].name) == 0) return c;
    return -1;
}
