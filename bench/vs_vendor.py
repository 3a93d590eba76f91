#!/usr/bin/env python3
"""kgate's kernels side by side with the vendor library, in one run.

For each case, R rounds of: PyTorch's own operation (torch.matmul,
torch._scaled_mm, torch._grouped_mm: cuBLAS/cuBLASLt on NVIDIA, hipBLASLt on
ROCm; attention: scaled_dot_product_attention through each of its cuDNN and
flash backends, the forward, or the backward alone through autograd on a
kept graph) timed here with CUDA events, L2 flushed before every sample; then
`kgate <case> --json` as a child process, whose time is kgate's own (its
timer, its L2 flush; a --bwd case: its dQ launch alone, which computes dQ,
dK and dV; a gemm or grouped --bwd case: the row's output, dA or dB, each
round's kgate run shared by the case's rows) and counts only when every gate
of the case passed: in the first round, where the gates run (the CPU
references included, minutes on a big attention --bwd case); in the later
rounds kgate reads that verdict from the run's own ledger (its "cached"
verdict: the same kgate binary, code object, case, seed, device and
conditions), so it times without computing the references again, unless
--gate-every-round.  The fp8 rows run kgate on --inputs normal: dense, as the
vendor's torch.randn cast to e4m3 is (its default scaled inputs hold many
small codes, which draw less power).  The vendor's samples follow kgate's
timer rule (src/timer.c): a warm-up by time, samples until the median is known
to 0.2% or 3 s have passed, samples below 75% of the card's clock (kgate
devices) dropped, after the GPU idles a second as it does while kgate starts:
an fp8 8192^3 GEMM slows as its power limit bites, so a side timed for 50 ms
from an idle GPU and one timed for 0.3 s would not be compared alike
(--samples N: N samples instead).
Prints both in TFLOP/s and the ratio kgate / vendor (time of the vendor over
time of kgate: above 1 = kgate faster), median over the rounds with the
min-max spread; one row per vendor operation (attention: cuDNN and flash),
all timed in the same rounds as kgate.  A backend that refuses a case (it
raises) gets a row saying so and does not fail the run.

    python3 bench/vs_vendor.py [--kgate ./kgate] [--rounds 3] [--only SUBSTR[$] ...] [--json FILE] [--timeout S]
                               [--repeat N] [--gate-every-round] [--samples N]

Each case's seconds and the SM clock of each round go to stderr: kgate's,
from its timer's clock probe after each sample, and the vendor's, from the
same kind of probe after each of its samples (a spin of known SM cycles
between two events, after a spin that keeps the GPU busy while the probe is
queued; NVIDIA), else from NVML after its samples (where
torch.cuda.clock_rate can read it: the idle GPU's clock, not the same
measure), and the samples each side dropped as throttled; --json keeps them
per round.

Exit status: 0 when every case ran and passed its gates, 1 when a case failed
a gate or kgate failed, 2 on bad usage.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

# Each case: a name, kgate's arguments, the FLOPs, the vendor operations
# (label, a function that builds the operation, a no-argument callable, on
# the current device), and the kgate output whose time is compared (None:
# the sum of all timed outputs).


def gemm_layout(layout, m, n, k, dt):
    """C = A·B in kgate's --layout letters: A stored [M][K] (N) or [K][M]
    (T), B stored [K][N] (N) or [N][K] (T); torch.matmul on the views."""
    a = torch.randn(*((k, m) if layout[0] == "T" else (m, k)), device="cuda").to(dt)
    b = torch.randn(*((n, k) if layout[1] == "T" else (k, n)), device="cuda").to(dt)
    av, bv = (a.t() if layout[0] == "T" else a), (b.t() if layout[1] == "T" else b)
    return lambda: torch.matmul(av, bv)


def gemm_f32(m, n, k):
    """True fp32 C = A·B (NN), TF32 off: cuBLAS's SIMT fp32 GEMM."""
    torch.backends.cuda.matmul.allow_tf32 = False
    a = torch.randn(m, k, device="cuda")
    b = torch.randn(k, n, device="cuda")
    return lambda: torch.matmul(a, b)


def gemm_nt_bwd(m, n, k, part):
    """One backward product of C = A·Bᵀ (kgate's NT: A [M][K], B [N][K]):
    dA = dC·B ([M][K]) or dB = dCᵀ·A ([N][K], B's layout)."""
    a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    b = torch.randn(n, k, device="cuda").to(torch.bfloat16)
    dc = torch.randn(m, n, device="cuda").to(torch.bfloat16)
    return (lambda: torch.matmul(dc, b)) if part == "dA" else (lambda: torch.matmul(dc.t(), a))


def gemm_case(layout, s):
    """The bf16 gemm of layout at s^3."""
    return ("bf16 %s %d^3" % (layout, s), "gemm --dtype bf16 --layout %s --shape %dx%dx%d" % (layout, s, s, s),
            2 * s**3, lambda: gemm_layout(layout, s, s, s, torch.bfloat16))


def gemm_bwd_case(s, part):
    """One backward product (kgate's output `part`: dA or dB) of the bf16 NT
    gemm at s^3; kgate runs the whole --bwd case, its time is that output's."""
    return ("bf16 NT %d^3 bwd %s" % (s, part), "gemm --dtype bf16 --layout NT --shape %dx%dx%d --bwd" % (s, s, s),
            2 * s**3, [("vendor", lambda: gemm_nt_bwd(s, s, s, part))], part)


def scaled_mm_nt(m, n, k, out=torch.bfloat16):
    """e4m3 C = A·Bᵀ with per-tensor fp32 scales, `out` the output dtype."""
    a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn)
    sa = torch.tensor(0.5, device="cuda")
    sb = torch.tensor(0.25, device="cuda")
    return lambda: torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=out)


def scaled_mm_rowwise(m, n, k):
    """e4m3 C = A·Bᵀ with fp32 scales per row of A and per row of B (per
    column of C), bf16 out: torch._scaled_mm's rowwise mode."""
    a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn)
    sa = torch.rand(m, 1, device="cuda") + 0.5
    sb = torch.rand(1, n, device="cuda") + 0.5
    return lambda: torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)


def scaled_mm_blockwise(m, n, k):
    """e4m3 C = A·Bᵀ with DeepSeek-V3's scales, fp32, A per 1x128 and B per
    128x128 block, bf16 out: torch._scaled_mm's blockwise mode, which takes
    the scales outer-dimension-major (A's [M][K/128] stored column-major).
    Raises where this PyTorch or its cuBLAS lacks the mode."""
    a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn)
    sa = (torch.rand(k // 128, m, device="cuda") + 0.5).t()
    sb = (torch.rand(k // 128, n // 128, device="cuda") + 0.5).t()
    torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)   # raises if refused
    return lambda: torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)


def scaled_mm_grouped_loop(rows, n, k, block=False):
    """The grouped e4m3 NT GEMM as a loop of torch._scaled_mm, one per
    non-empty group: per-tensor scales, or with block=True DeepSeek-V3's
    (scaled_mm_blockwise's layout, per group; raises where refused)."""
    a = torch.randn(sum(rows), k, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(len(rows), n, k, device="cuda").to(torch.float8_e4m3fn)
    if block:
        sa = [(torch.rand(k // 128, r, device="cuda") + 0.5).t() for r in rows]
        sb = [(torch.rand(k // 128, n // 128, device="cuda") + 0.5).t() for _ in rows]
    else:
        sa = [torch.tensor(0.5, device="cuda")] * len(rows)
        sb = [torch.tensor(0.25, device="cuda")] * len(rows)
    cut = [0]
    for r in rows:
        cut.append(cut[-1] + r)
    out = torch.empty(sum(rows), n, device="cuda", dtype=torch.bfloat16)

    def loop():
        for g in range(len(rows)):
            if cut[g + 1] > cut[g]:
                out[cut[g]:cut[g + 1]] = torch._scaled_mm(a[cut[g]:cut[g + 1]], b[g].t(), scale_a=sa[g],
                                                          scale_b=sb[g], out_dtype=torch.bfloat16)
    loop()   # raises here if this PyTorch refuses the mode
    return loop


def grouped_nt(rows, n, k):
    a = torch.randn(sum(rows), k, device="cuda").to(torch.bfloat16)
    b = torch.randn(len(rows), n, k, device="cuda").to(torch.bfloat16)
    ends = torch.tensor(rows, device="cuda", dtype=torch.int32).cumsum(0, dtype=torch.int32)
    return lambda: torch._grouped_mm(a, b.transpose(-2, -1), offs=ends)


def grouped_nt_bwd(rows, n, k, part, how):
    """One backward product of the grouped NT GEMM (A [sum M][K], B [G][N][K],
    C_g = A_g·B_gᵀ): dA_g = dC_g·B_g ([sum M][K]) or dB_g = dC_gᵀ·A_g ([G][N][K],
    B's layout), as a loop of torch.matmul (how = "loop") or one
    torch._grouped_mm (how = "grouped")."""
    a = torch.randn(sum(rows), k, device="cuda").to(torch.bfloat16)
    b = torch.randn(len(rows), n, k, device="cuda").to(torch.bfloat16)
    dc = torch.randn(sum(rows), n, device="cuda").to(torch.bfloat16)
    ends = torch.tensor(rows, device="cuda", dtype=torch.int32).cumsum(0, dtype=torch.int32)
    cut = [0] + ends.tolist()
    if how == "grouped":
        if part == "dA":
            return lambda: torch._grouped_mm(dc, b, offs=ends)
        return lambda: torch._grouped_mm(dc.t(), a, offs=ends)
    out = torch.empty(*((sum(rows), k) if part == "dA" else (len(rows), n, k)), device="cuda", dtype=torch.bfloat16)

    def loop():
        for g in range(len(rows)):
            lo, hi = cut[g], cut[g + 1]
            if part == "dA":
                torch.matmul(dc[lo:hi], b[g], out=out[lo:hi])
            else:
                torch.matmul(dc[lo:hi].t(), a[lo:hi], out=out[g])
    return loop


def sdpa(b, hq, hkv, s, d, causal, backend):
    """SDPA forward on [B][S][H][D] bf16 tensors (kgate's layout, seen as
    B, H, S, D), through one backend: "cudnn" or "flash"."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    q = torch.randn(b, s, hq, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    k = torch.randn(b, s, hkv, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    v = torch.randn(b, s, hkv, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    be = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}[backend]

    def run():
        with sdpa_kernel(be):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                                    enable_gqa=hq != hkv)
    return run


def sdpa_bwd(b, hq, hkv, s, d, causal, backend):
    """The backward alone of sdpa(...): dQ, dK, dV from a fixed dO through
    the autograd graph of one forward, kept (retain_graph) and run again at
    each call."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    be = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}[backend]
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2).requires_grad_()
               for h in (hq, hkv, hkv))
    with sdpa_kernel(be):
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=hq != hkv)
    dout = torch.randn_like(out)
    return lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)


def attn_case(name, b, hq, hkv, s, d, causal, bwd=False):
    """An attention case: the forward (kgate's O), or with bwd the backward
    (kgate's dQ launch: Dsum, dK/dV, dQ; 2.5x the forward's FLOPs)."""
    args = "attn --dtype bf16 --batch %d --seq %d --heads %d:%d --dim %d%s%s" % (
        b, s, hq, hkv, d, " --causal" if causal else "", " --bwd" if bwd else "")
    flops = 4 * b * hq * s * s * d // (2 if causal else 1) * (5 if bwd else 2) // 2
    build = sdpa_bwd if bwd else sdpa
    return (name, args, flops, [("cuDNN", lambda: build(b, hq, hkv, s, d, causal, "cudnn")),
                                ("FA2", lambda: build(b, hq, hkv, s, d, causal, "flash"))], "dQ" if bwd else None)


RAGGED = [2048, 0, 4096, 1024, 3072, 2048, 2048, 2176]   # 16384 rows, one empty group


def skewed(total, groups):
    """A routing-like skew: expert i's share falls as (1 + (7i mod groups))^-0.7; the
    first takes the rounding."""
    w = [(1 + (7 * i) % groups) ** -0.7 for i in range(groups)]
    sizes = [int(total * x / sum(w)) for x in w]
    sizes[0] += total - sum(sizes)
    return sizes


DSV3 = skewed(32768, 32)   # a DeepSeek-V3-like MoE layer: 32 experts, 32768 routed rows


def grouped_case(name, rows, n, k):
    """The bf16 grouped NT forward, against torch._grouped_mm."""
    return (name, "grouped --dtype bf16 --layout NT --groups %s --shape %dx%d" % (",".join(map(str, rows)), n, k),
            2 * sum(rows) * n * k, lambda: grouped_nt(rows, n, k))


def grouped_bwd_case(name, rows, n, k, part):
    """One backward product (kgate's output `part`: dA or dB) of the bf16 grouped
    NT GEMM, against a loop of torch.matmul and torch._grouped_mm."""
    return (name + " bwd " + part, "grouped --dtype bf16 --layout NT --groups %s --shape %dx%d --bwd"
            % (",".join(map(str, rows)), n, k), 2 * sum(rows) * n * k,
            [("matmul loop", lambda: grouped_nt_bwd(rows, n, k, part, "loop")),
             ("_grouped_mm", lambda: grouped_nt_bwd(rows, n, k, part, "grouped"))], part)

CASES = [
    gemm_case("NT", 4096),
    gemm_case("NT", 8192),
    ("bf16 NT 4095x4097x4093", "gemm --dtype bf16 --layout NT --shape 4095x4097x4093",
     2 * 4095 * 4097 * 4093, lambda: gemm_layout("NT", 4095, 4097, 4093, torch.bfloat16)),
    ("f16 NT 8192^3", "gemm --dtype f16 --layout NT --shape 8192x8192x8192",
     2 * 8192**3, lambda: gemm_layout("NT", 8192, 8192, 8192, torch.float16)),
] + [gemm_case(lay, s) for lay in ("NN", "TN", "TT") for s in (4096, 8192)] + [
    # fp32 keeps K at 1024, as shapes.txt does: sequential fp32 sums over K = 8192 reach
    # ~4e-4 on small elements, past the f32 atol of 1e-4
    ("f32 NN 8192x8192x1024", "gemm --dtype f32 --layout NN --shape 8192x8192x1024",
     2 * 8192 * 8192 * 1024, lambda: gemm_f32(8192, 8192, 1024)),
] + [
    ("e4m3 tensor 8192^3", "gemm --dtype e4m3 --inputs normal --scaling tensor --shape 8192x8192x8192",
     2 * 8192**3, lambda: scaled_mm_nt(8192, 8192, 8192)),
    ("grouped bf16 8x2048 4096x4096", "grouped --dtype bf16 --layout NT --groups "
     + ",".join(["2048"] * 8) + " --shape 4096x4096",
     2 * 8 * 2048 * 4096 * 4096, lambda: grouped_nt([2048] * 8, 4096, 4096)),
    ("grouped bf16 ragged, empty group", "grouped --dtype bf16 --layout NT --groups "
     + ",".join(map(str, RAGGED)) + " --shape 4096x4096",
     2 * sum(RAGGED) * 4096 * 4096, lambda: grouped_nt(RAGGED, 4096, 4096)),
    grouped_case("grouped bf16 DSV3-like 7168->4096", DSV3, 4096, 7168),
    grouped_case("grouped bf16 DSV3-like 2048->7168", DSV3, 7168, 2048),
]
# Each case above has one vendor operation, the library PyTorch calls.
CASES = [(n, a, f, [("vendor", b)], None) for n, a, f, b in CASES] + [
    gemm_bwd_case(s, part) for s in (4096, 8192) for part in ("dA", "dB")] + [
    ("e4m3 rowwise 8192^3", "gemm --dtype e4m3 --inputs normal --scaling row --shape 8192x8192x8192", 2 * 8192**3,
     [("_scaled_mm rowwise", lambda: scaled_mm_rowwise(8192, 8192, 8192))], None),
    # an fp32 output runs QGMMA only under --trades-precision (its promoted fp8 sums fall short
    # of the baseline against fp32 sums: README); the reason is one word, as args are split
    ("e4m3 tensor f32 8192^3", "gemm --dtype e4m3 --inputs normal --scaling tensor --out f32 --shape 8192x8192x8192 "
     "--trades-precision fp8-tensor-core-sums", 2 * 8192**3,
     [("_scaled_mm f32", lambda: scaled_mm_nt(8192, 8192, 8192, torch.float32))], None),
    # blockwise against the vendor's blockwise mode, and against its per-tensor time (the issue's
    # fallback where this PyTorch lacks the mode: that row says so)
    ("e4m3 block 8192^3", "gemm --dtype e4m3 --inputs normal --scaling block --shape 8192x8192x8192", 2 * 8192**3,
     [("_scaled_mm blockwise", lambda: scaled_mm_blockwise(8192, 8192, 8192)),
      ("_scaled_mm per tensor", lambda: scaled_mm_nt(8192, 8192, 8192))], None),
    ("grouped e4m3 tensor 8x2048 4096x4096", "grouped --dtype e4m3 --inputs normal --scaling tensor --layout NT --groups "
     + ",".join(["2048"] * 8) + " --shape 4096x4096", 2 * 8 * 2048 * 4096 * 4096,
     [("_scaled_mm loop", lambda: scaled_mm_grouped_loop([2048] * 8, 4096, 4096))], None),
    ("grouped e4m3 block 8x2048 4096x4096", "grouped --dtype e4m3 --inputs normal --scaling block --layout NT --groups "
     + ",".join(["2048"] * 8) + " --shape 4096x4096", 2 * 8 * 2048 * 4096 * 4096,
     [("_scaled_mm blockwise loop", lambda: scaled_mm_grouped_loop([2048] * 8, 4096, 4096, block=True))], None)] + [
    grouped_bwd_case(name, rows, n, k, part) for name, rows, n, k in (
        ("grouped bf16 8x2048 4096x4096", [2048] * 8, 4096, 4096),
        ("grouped bf16 DSV3-like 7168->4096", DSV3, 4096, 7168)) for part in ("dA", "dB")] + [
    attn_case("attn bf16 B4 H32 S4096 d128", 4, 32, 32, 4096, 128, False),
    attn_case("attn bf16 B4 H32 S4096 d128 causal", 4, 32, 32, 4096, 128, True),
    attn_case("attn bf16 B1 H32:8 S4096 d128 causal", 1, 32, 8, 4096, 128, True),
    attn_case("attn bf16 B4 H32 S4096 d64", 4, 32, 32, 4096, 64, False),
    attn_case("attn bwd bf16 B4 H32 S4096 d128", 4, 32, 32, 4096, 128, False, True),
    attn_case("attn bwd bf16 B4 H32 S4096 d128 causal", 4, 32, 32, 4096, 128, True, True),
    attn_case("attn bwd bf16 B1 H32:8 S4096 d128 causal", 1, 32, 8, 4096, 128, True, True),
    attn_case("attn bwd bf16 B4 H32 S4096 d64", 4, 32, 32, 4096, 64, False, True),
]


CLOCK_CYCLES = 20000   # the clock probe's shorter spin: about 10 us at 2 GHz
LEAD_CYCLES = 200000   # a spin queued before the probe's first event: about 100 us


def probe_available():
    """Whether this platform has the clock probe: NVIDIA, and torch.cuda._sleep
    (on ROCm clock64 is not the shader clock)."""
    return torch.version.hip is None and hasattr(torch.cuda, "_sleep")


def clock_probe():
    """Queue the clock probe after a sample, as kgate's timer does after its
    own: two spins, of CLOCK_CYCLES and 3 x CLOCK_CYCLES SM cycles
    (torch.cuda._sleep counts clock64, SM cycles on NVIDIA), each between
    two events, so that the launch inside each window cancels in the
    difference.  A spin of LEAD_CYCLES first keeps the GPU busy while the
    host queues the rest (the likely cause of wild readings: a GPU that
    runs dry records the first event early, and the first window then
    holds the host's time to queue its spin): after a bf16 8192^3 matmul
    on the H200 the probe read -2 to 2033 MHz without it, 1611 to 1615
    with it (bench/HOPPER.md).  The four events, or None where there is no such
    probe (ROCm, whose clock64 is not the shader clock; or no _sleep)."""
    if not probe_available():
        return None
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
    torch.cuda._sleep(LEAD_CYCLES)
    for i, cycles in enumerate((CLOCK_CYCLES, 3 * CLOCK_CYCLES)):
        ev[2 * i].record()
        torch.cuda._sleep(cycles)
        ev[2 * i + 1].record()
    return ev


def probe_mhz(ev):
    """The SM clock (MHz) of a finished clock probe: 2 x CLOCK_CYCLES over
    the difference of its two windows."""
    us = (ev[2].elapsed_time(ev[3]) - ev[0].elapsed_time(ev[1])) * 1e3
    return 2 * CLOCK_CYCLES / us if us > 0 else None


# kgate's timer rule (src/timer.c), which the vendor's samples follow so that both sides
# are timed the same way: a warm-up of TIMER_WARMUP_S (at least 2 calls), then samples
# until the median's relative standard error is at most TIMER_RSE (checked every 4th
# sample, from TIMER_MIN_N on), or TIMER_CAP_S of wall time (at least 3 samples), or
# TIMER_HARD_CAP_S; samples whose clock probe read below TIMER_THROTTLED of the card's
# clock are dropped, unless every one is.  The length matters on a card that its power
# limit slows: on the H100 here `_scaled_mm` e4m3 8192^3 ran 1275 MHz at 697 W when run
# back to back for 4 s, where 55 calls from an idle GPU keep the boost clock.
TIMER_WARMUP_S = 0.05
TIMER_MIN_N = 20
TIMER_RSE = 0.002
TIMER_CAP_S = 3.0
TIMER_HARD_CAP_S = 20.0
TIMER_MAX_N = 2000
TIMER_THROTTLED = 0.75
SETTLE_S = 1.0   # the GPU idle before the vendor's samples, as before kgate's (its start-up)


def median_rse(xs):
    """The relative standard error of the median of the samples xs, as
    src/timer.c's median_rse: half the width of the order statistics that
    bracket the median with 95% confidence over 1.96 and the median; 1 below 3."""
    x = sorted(xs)
    n = len(x)
    if n < 3:
        return 1.0
    h = 0.98 * n ** 0.5
    lo, hi = max(0, math.floor(n / 2 - h)), min(n - 1, math.ceil(n / 2 + h))
    med = statistics.median(x)
    return (x[hi] - x[lo]) / (2 * 1.96) / med if med > 0 else 1.0


def vendor_done(times, wall, fixed=None):
    """Whether the vendor's sampling stops after `times` (microseconds) over
    `wall` seconds: at `fixed` samples when given, else by kgate's rule."""
    n = len(times)
    if fixed is not None:
        return n >= fixed
    return ((n % 4 == 0 and n >= TIMER_MIN_N and median_rse(times) <= TIMER_RSE)
            or (n >= 3 and wall >= TIMER_CAP_S) or wall >= TIMER_HARD_CAP_S or n >= TIMER_MAX_N)


def vendor_summary(times, mhz, floor_mhz):
    """The median time of the samples `times` kept (those whose clock in
    `mhz`, None where unread, is not below `floor_mhz`; all of them when every
    one is, or without a floor), the median clock over all of them (None when
    none was read), and how many were dropped."""
    keep = [t for t, c in zip(times, mhz) if floor_mhz is None or c is None or c >= floor_mhz]
    dropped = len(times) - len(keep)
    read = [c for c in mhz if c is not None]
    return statistics.median(keep or times), statistics.median(read) if read else None, dropped if keep else 0


def vendor_us(fn, flush, samples=None, floor_mhz=None):
    """Median time of fn in microseconds, the median SM clock (MHz) that the
    clock probe read right after each sample (None without a probe), and the
    samples dropped as throttled, by kgate's timer rule (above; `samples`: a
    fixed count instead): each sample flushes L2 (a write of the flush
    buffer) outside the timed window; the GPU idles SETTLE_S first."""
    torch.cuda.synchronize()
    time.sleep(SETTLE_S)
    start = time.monotonic()
    i = 0
    while i < 2 or time.monotonic() - start < TIMER_WARMUP_S:
        flush.zero_()
        fn()
        torch.cuda.synchronize()
        i += 1
    times, mhz = [], []
    start = time.monotonic()
    while not vendor_done(times, time.monotonic() - start, samples):
        flush.zero_()
        t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0.record()
        fn()
        t1.record()
        probe = clock_probe()
        (probe[3] if probe else t1).synchronize()
        times.append(t0.elapsed_time(t1) * 1e3)
        mhz.append(probe_mhz(probe) if probe else None)
    return vendor_summary(times, mhz, floor_mhz)


def card_clock_mhz(kgate):
    """The card's SM clock in MHz as kgate reads it (`kgate devices`, GPU 0:
    the clock its timer's throttle floor is a fraction of), or None."""
    try:
        p = subprocess.run([kgate, "devices"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in p.stdout.splitlines():
        w = line.split(", ")
        if line.startswith("0 ") and len(w) > 2 and w[2].startswith("clock ") and w[2].endswith(" MHz"):
            return float(w[2].split()[1]) or None
    return None


def sm_clock_now():
    """The SM clock (MHz) NVML reports for the GPU's last sample period
    (torch.cuda.clock_rate, which needs pynvml), or None where it cannot
    say: read after a vendor round where there is no clock probe, it finds
    the GPU idle, so it is not the clock the samples ran at."""
    try:
        return float(torch.cuda.clock_rate())
    except Exception:   # no pynvml, or no NVML on this platform
        return None


RUNS = {}   # (kgate arguments, round) -> kgate's JSON of that run


def kgate_us(kgate, args, timeout, part=None, rnd=0, ledger=None):
    """kgate's median time of the case in microseconds (of its output named
    `part` alone when given, else of all its timed outputs), or raise with
    the reason: a gate failed, kgate exited non-zero or ran past `timeout` s.
    Round `rnd`'s run of a case is made once: the rows of its other outputs
    (a --bwd case's dA and dB) read their times from the same run.  With a
    `ledger` (a file this script's run alone writes), kgate keeps its
    verdicts there: round 0 must run the gates (verdict "pass"); a later
    round may reuse that verdict (verdict "cached")."""
    if (args, rnd) in RUNS:
        return kgate_part_us(RUNS[(args, rnd)], args, part), RUNS[(args, rnd)]
    cmd = [kgate] + args.split() + ["--json"] + (["--ledger", ledger] if ledger else [])
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RuntimeError("%s: no answer in %d s" % (" ".join(cmd), timeout))
    objs = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    if p.returncode != 0 or not objs:
        raise RuntimeError("%s: exit %d: %s" % (" ".join(cmd), p.returncode, p.stderr.strip()[-400:]))
    case = objs[0]
    if case["verdict"] != "pass" and not (case["verdict"] == "cached" and rnd > 0 and ledger):
        raise RuntimeError("%s: verdict %s" % (args, case["verdict"]))
    RUNS[(args, rnd)] = case
    return kgate_part_us(case, args, part), case


def timed_outputs(case, part):
    """The timed outputs of kgate's JSON `case`: output `part` alone, or all
    of them when part is None."""
    return [o for o in case["outputs"] if o.get("time") and part in (None, o["name"])]


def kgate_part_us(case, args, part):
    """The time in microseconds of output `part` of kgate's JSON `case`, or
    of all its timed outputs when part is None."""
    times = [o["time"]["median_us"] for o in timed_outputs(case, part)]
    if not times:
        raise RuntimeError("%s: no time in kgate's JSON" % args)
    return sum(times)


def kgate_clock(case, part):
    """The median SM clock (MHz) kgate's timer saw for output `part` of its
    JSON `case` (all timed outputs: their mean), or None."""
    mhz = [o["time"]["sm_clock_mhz"] for o in timed_outputs(case, part) if o["time"].get("sm_clock_mhz") is not None]
    return sum(mhz) / len(mhz) if mhz else None


def selected(name, onlys):
    """Whether the --only arguments `onlys` select the case `name`: there are
    none, or one is contained in it (ending in $: ends it)."""
    return not onlys or any(name.endswith(o[:-1]) if o.endswith("$") else o in name for o in onlys)


def save_json(path, rows):
    """Write the table's rows so far as JSON to `path` (none: nothing)."""
    if path:
        with open(path, "w") as f:
            json.dump(rows, f, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kgate", default="./kgate")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--samples", type=int, help="vendor samples per round, a fixed count (default: kgate's timer rule)")
    ap.add_argument("--only", action="append", default=[],
                    help="run the cases whose name contains this (ending in $: ends with it); repeatable: any of them")
    ap.add_argument("--json", help="write the table as JSON to this file")
    ap.add_argument("--timeout", type=int, default=300, help="seconds one kgate run may take")
    ap.add_argument("--repeat", type=int, default=1,
                    help="kgate's runs with --repeat N: N runs bitwise equal where its gates run")
    ap.add_argument("--gate-every-round", action="store_true",
                    help="run kgate's gates (and its CPU references) in every round, not in the first alone")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("vs_vendor: PyTorch sees no GPU", file=sys.stderr)
        return 2
    if a.rounds < 1 or (a.samples is not None and a.samples < 1) or a.repeat < 1:
        print("vs_vendor: --rounds, --samples and --repeat must be >= 1", file=sys.stderr)
        return 2
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    flush = torch.empty(max(2 * l2, 64 << 20), dtype=torch.uint8, device="cuda")
    clock = card_clock_mhz(a.kgate)
    floor = TIMER_THROTTLED * clock if clock and probe_available() else None
    print("device: %s, torch %s, %d rounds; ratio = vendor time / kgate time (> 1: kgate faster)"
          % (torch.cuda.get_device_name(0), torch.__version__, a.rounds))
    print("vendor samples: %s; throttled below %s dropped" % (
        "%d a round" % a.samples if a.samples else "kgate's timer rule", "%.0f MHz" % floor if floor else "- (none)"),
        file=sys.stderr)
    print("%-44s %12s %12s %24s" % ("case", "vendor TF/s", "kgate TF/s", "ratio (min-max)"))
    rows, status = [], 0
    # kgate's verdicts of this run: the first round's gates, reused by the later rounds
    ledger_dir = None if a.gate_every_round else tempfile.TemporaryDirectory(prefix="vs_vendor-")
    ledger = os.path.join(ledger_dir.name, "kgate.ledger") if ledger_dir else None
    for name, args, flops, vendors, part in CASES:
        if not selected(name, a.only):
            continue
        args += " --repeat %d" % a.repeat if a.repeat > 1 else ""
        t0 = time.monotonic()
        fns, refused = [], []
        for label, build in vendors:
            try:
                fn = build()
                fn()   # a backend that cannot take the case raises here
                fns.append((label, fn))
            except (RuntimeError, ValueError, TypeError, torch.OutOfMemoryError) as e:
                refused.append((label, str(e).splitlines()[0] if str(e) else type(e).__name__))
        vs = {label: [] for label, _ in fns}
        vclocks = {label: [] for label, _ in fns}
        vdropped = {label: [] for label, _ in fns}
        ks, clocks, throttled, verdicts = [], [], [], []
        try:
            for rnd in range(a.rounds):
                for label, fn in fns:
                    us, mhz, dropped = vendor_us(fn, flush, a.samples, floor)
                    vs[label].append(us)
                    vclocks[label].append(mhz if mhz is not None else sm_clock_now())
                    vdropped[label].append(dropped)
                us, case = kgate_us(a.kgate, args, a.timeout, part, rnd, ledger)
                ks.append(us)
                clocks.append(kgate_clock(case, part))
                throttled.append(sum(o["time"].get("throttled", 0) for o in timed_outputs(case, part)))
                verdicts.append(case["verdict"])
        except (RuntimeError, torch.OutOfMemoryError) as e:
            print("%-44s FAIL %s" % (name, e))
            rows.append({"case": name, "kgate_args": args, "error": str(e)})
            status = 1
            continue
        finally:
            del fns
            torch.cuda.empty_cache()
        def shown(label):   # the row's name: the case's, and the vendor's when it has several
            return name if len(vendors) == 1 else name + " [" + label + "]"
        for label, why in refused:
            print("%-44s %s refused the case: %s" % (shown(label), label, why[:200]))
            rows.append({"case": name, "vendor": label, "kgate_args": args, "refused": why})
        for label, times in vs.items():
            ratios = [v / k for v, k in zip(times, ks)]
            v, k = statistics.median(times), statistics.median(ks)
            row = {"case": name, "vendor": label, "kgate_args": args, "vendor_us": times, "kgate_us": ks,
                   "vendor_sm_clock_mhz": vclocks[label], "kgate_sm_clock_mhz": clocks,
                   "vendor_throttled": vdropped[label], "kgate_throttled": throttled,
                   "kgate_verdicts": verdicts, "ratios": ratios,
                   "vendor_tflops": flops / v / 1e6, "kgate_tflops": flops / k / 1e6,
                   "ratio": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios)}
            rows.append(row)
            print("%-44s %12.1f %12.1f %10.3f (%.3f-%.3f)" % (shown(label), row["vendor_tflops"], row["kgate_tflops"],
                                                               row["ratio"], row["ratio_min"], row["ratio_max"]))
        mhz = lambda cs: " ".join("%.0f" % c if c is not None else "-" for c in cs) or "-"
        print("  (%s: %.0f s; kgate's verdict per round: %s; SM clock per round, MHz: kgate %s; %s;"
              " throttled samples dropped per round: kgate %s; %s)" % (
                  name, time.monotonic() - t0, " ".join(verdicts), mhz(clocks),
                  "; ".join("%s %s" % (label, mhz(cs)) for label, cs in vclocks.items()) or "no vendor",
                  " ".join(map(str, throttled)),
                  "; ".join("%s %s" % (label, " ".join(map(str, ds))) for label, ds in vdropped.items()) or "no vendor"),
              file=sys.stderr)
        sys.stdout.flush()
        save_json(a.json, rows)   # after every case: a run stopped part-way keeps its rows
    save_json(a.json, rows)
    return status


if __name__ == "__main__":
    sys.exit(main())
