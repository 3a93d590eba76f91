#!/usr/bin/env python3
"""An independent oracle for kgate's dumps: every output recomputed in float64.

Reads what `kgate CASE --dump DIR` and `kgate all --dump DIR` write (the format,
"kgate-dump 2", is README's "An independent oracle" section): a case folder holds
manifest.json and .npy files: the inputs (gemm/grouped A, B, dC; attn Q, K, V, dO;
low precision: codes, scales, E8M0 bytes), and per output the kernel's values (out),
kgate's double reference on the checked rows (ref_rows) and columns (ref_cols).

    python3 bench/oracle.py [--numpy] DIR [DIR ...]

DIR is one case (it holds manifest.json) or a folder of case-NNN/ folders.  Every
output is recomputed from the dumped inputs alone, in float64: PyTorch when it imports
(on CUDA when there is one: whole outputs), NumPy otherwise or with --numpy (only the
checked rows and columns).  fp8 and FP4 codes and E8M0 scale bytes are decoded here
from their bit patterns.  One line per output: kgate's reference against the oracle
(ref-diff, relative to the oracle's largest magnitude; agree or DISAGREE), then the
kernel's values against the oracle.  Exit: 0 every output agrees, 1 some disagree,
2 bad input (one line on stderr).
"""
import argparse
import json
import math
import os
import re
import sys

import numpy as np

FORMAT = "kgate-dump 2"
F4, F8, U1, U4 = "<f4", "<f8", "|u1", "<u4"

# Agreement limits on ref-diff (max |kgate - oracle| / max |oracle|).  Both sides are
# float64 computations of the same formula in different orders (kgate: blocked,
# threaded sums, one (token, head) row at a time; here: BLAS or cuBLAS, batched), so
# they differ only by rounding.  Products: sums of exact float32 x float32 products,
# rounding ~ sqrt(K)·2^-53 relative, far under 1e-9 up to K = 2^20; a wrong element,
# layout, group or scale block shows at 1e-3 and above.  Attention: exp and log come
# from different libms, the softmax is normalised in another order, and the backward's
# dS = P·(dP - D) cancels, which magnifies rounding relative to the largest gradient by
# the ratio of |dP| to |dS| (orders of magnitude on peaked softmaxes); 1e-8 keeps that
# headroom, while a wrong mask, scale or head mapping moves outputs by 1e-3 and more.
TOL_PRODUCT = 1e-9
TOL_ATTN = 1e-8
TINY = np.finfo(np.float64).tiny
NAN, INF = float("nan"), float("inf")


class BadInput(Exception):
    """A dump that breaks the format (exit 2)."""


# ----- backends: the few array operations the oracle uses, in NumPy or PyTorch


class NumpyBackend:
    """float64 arrays in NumPy; only checked rows and columns are computed."""

    whole = False
    budget = 1 << 23                      # elements of one block of attention scores

    def __init__(self):
        """Describe the backend."""
        self.what = "NumPy %s" % np.__version__

    def arr(self, x):
        """A float64 array of x."""
        return np.asarray(x, dtype=np.float64)

    def np(self, x):
        """x as a NumPy array."""
        return x

    def idx(self, i):
        """An index array."""
        return np.asarray(i, dtype=np.int64)

    def arange(self, a, b=None):
        """Integers a..b-1 (0..a-1 with one argument)."""
        return np.arange(a) if b is None else np.arange(a, b)

    def zeros(self, shape):
        """float64 zeros."""
        return np.zeros(shape)

    def full(self, shape, v):
        """float64 array filled with v."""
        return np.full(shape, v, dtype=np.float64)

    def t(self, x):
        """x with its last two axes swapped."""
        return np.swapaxes(x, -1, -2)

    def perm(self, x, axes):
        """x with its axes permuted."""
        return np.transpose(x, axes)

    def amax(self, x):
        """Maximum along the last axis, kept."""
        return np.max(x, axis=-1, keepdims=True)

    def rowsum(self, x):
        """Sum along the last axis, kept."""
        return np.sum(x, axis=-1, keepdims=True)

    def sum0(self, x):
        """Sum along the first axis."""
        return np.sum(x, axis=0)

    def exp(self, x):
        """Elementwise exp."""
        return np.exp(x)

    def log(self, x):
        """Elementwise natural log."""
        return np.log(x)

    def where(self, c, x, y):
        """Elementwise choice."""
        return np.where(c, x, y)

    def isfinite(self, x):
        """Finite elements."""
        return np.isfinite(x)

    def isnan(self, x):
        """NaN elements."""
        return np.isnan(x)

    def count(self, m):
        """Number of true elements."""
        return int(np.count_nonzero(m))

    def total(self, x):
        """Sum of every element, a Python float."""
        return float(np.sum(x))

    def maxabs(self, x):
        """Largest |element| (0 for none)."""
        return float(np.max(np.abs(x))) if x.size else 0.0


class TorchBackend(NumpyBackend):
    """float64 tensors in PyTorch; on CUDA whole outputs are computed."""

    def __init__(self, torch, cuda):
        """Use torch on CUDA (whole outputs) or the CPU (checked rows and columns)."""
        self.torch, self.dev = torch, torch.device("cuda" if cuda else "cpu")
        self.whole = cuda
        self.budget = 1 << 27 if cuda else 1 << 23
        self.what = "PyTorch %s on %s" % (torch.__version__,
                                         "CUDA (%s)" % torch.cuda.get_device_name(0) if cuda else "the CPU")

    def arr(self, x):
        """A float64 tensor of x on the device."""
        if isinstance(x, self.torch.Tensor):
            return x.to(device=self.dev, dtype=self.torch.float64)
        return self.torch.from_numpy(np.ascontiguousarray(x)).to(device=self.dev, dtype=self.torch.float64)

    def np(self, x):
        """x as a NumPy array."""
        return x.detach().cpu().numpy()

    def idx(self, i):
        """An index tensor on the device."""
        return self.torch.as_tensor(np.asarray(i, dtype=np.int64), device=self.dev)

    def arange(self, a, b=None):
        """Integers a..b-1 (0..a-1 with one argument)."""
        return self.torch.arange(a, device=self.dev) if b is None else self.torch.arange(a, b, device=self.dev)

    def zeros(self, shape):
        """float64 zeros."""
        return self.torch.zeros(shape, dtype=self.torch.float64, device=self.dev)

    def full(self, shape, v):
        """float64 tensor filled with v."""
        return self.torch.full(shape, v, dtype=self.torch.float64, device=self.dev)

    def t(self, x):
        """x with its last two axes swapped."""
        return x.transpose(-1, -2)

    def perm(self, x, axes):
        """x with its axes permuted."""
        return x.permute(*axes)

    def amax(self, x):
        """Maximum along the last axis, kept."""
        return self.torch.amax(x, dim=-1, keepdim=True)

    def rowsum(self, x):
        """Sum along the last axis, kept."""
        return self.torch.sum(x, dim=-1, keepdim=True)

    def sum0(self, x):
        """Sum along the first axis."""
        return self.torch.sum(x, dim=0)

    def exp(self, x):
        """Elementwise exp."""
        return self.torch.exp(x)

    def log(self, x):
        """Elementwise natural log."""
        return self.torch.log(x)

    def where(self, c, x, y):
        """Elementwise choice."""
        return self.torch.where(c, x, y)

    def isfinite(self, x):
        """Finite elements."""
        return self.torch.isfinite(x)

    def isnan(self, x):
        """NaN elements."""
        return self.torch.isnan(x)

    def count(self, m):
        """Number of true elements."""
        return int(self.torch.count_nonzero(m).item())

    def total(self, x):
        """Sum of every element, a Python float."""
        return float(self.torch.sum(x).item())

    def maxabs(self, x):
        """Largest |element| (0 for none)."""
        return float(self.torch.max(self.torch.abs(x)).item()) if x.numel() else 0.0


def pick_backend(force_numpy):
    """PyTorch (CUDA if available) when it imports and --numpy is not given, else NumPy."""
    if not force_numpy:
        try:
            import torch
        except Exception:
            torch = None
        if torch is not None:
            return TorchBackend(torch, bool(torch.cuda.is_available()))
    return NumpyBackend()


# ----- one case folder: the manifest and its .npy files


class Case:
    """A case folder: its manifest and checked access to its arrays."""

    def __init__(self, path):
        """Read path/manifest.json."""
        self.path = path
        mpath = os.path.join(path, "manifest.json")
        try:
            with open(mpath, encoding="utf-8") as f:
                self.man = json.load(f)
        except OSError as e:
            raise BadInput("%s: cannot read manifest.json (%s)" % (path, e.strerror or e))
        except ValueError as e:
            raise BadInput("%s: manifest.json is not JSON (%s)" % (path, e))
        if not isinstance(self.man, dict):
            raise BadInput("%s: manifest.json is not a JSON object" % path)
        if self.man.get("format") != FORMAT:
            raise BadInput("%s: unknown format %r (this oracle reads %r)" % (path, self.man.get("format"), FORMAT))
        self.op = self.man.get("op")
        if self.op not in ("gemm", "grouped", "attn"):
            raise BadInput("%s: unknown op %r" % (path, self.op))
        self.label = str(self.man.get("case", os.path.basename(os.path.normpath(path))))
        if self.man.get("inject"):
            self.label += " [inject %s]" % self.man["inject"]

    def bad(self, msg):
        """A BadInput naming this case."""
        return BadInput("%s: %s" % (self.path, msg))

    def get(self, key, kind=None, where=None):
        """Field key of the manifest (or of where), of the given Python kind."""
        obj = self.man if where is None else where
        if key not in obj:
            raise self.bad("manifest has no %r" % key)
        v = obj[key]
        if kind is int:
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise self.bad("%r is %r, not an integer >= 0" % (key, v))
        elif kind is float:
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise self.bad("%r is %r, not a number" % (key, v))
            v = float(v)
        elif kind is bool:
            if not isinstance(v, bool):
                raise self.bad("%r is %r, not true/false" % (key, v))
        elif kind == "ints":
            if not isinstance(v, list) or any(isinstance(x, bool) or not isinstance(x, int) or x < 0 for x in v):
                raise self.bad("%r is %r, not a list of integers >= 0" % (key, v))
        return v

    def load(self, fname, dtype, shape=None, mmap=False):
        """The .npy file fname of this case, checked for dtype and shape."""
        if not isinstance(fname, str) or not fname:
            raise self.bad("file name %r is not a string" % (fname,))
        try:
            a = np.load(os.path.join(self.path, fname), allow_pickle=False, mmap_mode="r" if mmap else None)
        except Exception as e:
            raise self.bad("%s: unreadable .npy (%s)" % (fname, e))
        if not isinstance(a, np.ndarray):
            raise self.bad("%s: not a single .npy array" % fname)
        if a.dtype != np.dtype(dtype):
            raise self.bad("%s: dtype %s, the format says %s" % (fname, a.dtype.str, dtype))
        if shape is not None and tuple(a.shape) != tuple(shape):
            raise self.bad("%s: shape %s, expected %s" % (fname, list(a.shape), list(shape)))
        return a

    def tensor(self, name, dtype, shape):
        """Input tensor `name` (manifest "tensors"), checked."""
        tensors = self.get("tensors")
        if not isinstance(tensors, dict) or name not in tensors:
            raise self.bad("tensor %r missing from \"tensors\"" % name)
        return self.load(tensors[name], dtype, shape)


class Need:
    """What the oracle must compute of one output: rows across all columns, and on every
    other row the columns of its own that colmap (rows x nc, cols_checked) names."""

    def __init__(self, R, C, rows, colmap, whole):
        """Sorted unique rows, each row's columns, their union (whole: every row)."""
        self.R, self.C = R, C
        if whole:
            self.rows, self.cols = np.arange(R, dtype=np.int64), np.zeros(0, dtype=np.int64)
            self.colmap = np.zeros((R, 0), dtype=np.int64)
        else:
            self.rows = np.unique(rows.astype(np.int64))
            self.colmap = colmap.astype(np.int64)
            self.cols = np.unique(self.colmap)

    def col_rows(self, lo, n, keep):
        """Rows in [lo, lo+n), relative to lo, whose own columns include one that keep() accepts."""
        if self.colmap.shape[1] == 0:
            return np.zeros(0, dtype=np.int64)
        hit = np.any(keep(self.colmap[lo:lo + n]), axis=1)
        return np.nonzero(hit)[0].astype(np.int64)

    def rows_in(self, lo, n):
        """Checked rows in [lo, lo+n), relative to lo."""
        a, b = np.searchsorted(self.rows, [lo, lo + n])
        return self.rows[a:b] - lo


class Part:
    """An oracle output: a whole array, or its needed rows and columns."""

    def __init__(self, b, full=None, rows=None, rowvals=None, cols=None, colvals=None):
        """Either full [R][C] (NaN where not computed) or rows/rowvals and cols/colvals."""
        self.b, self.full = b, full
        self.rows, self.rowvals, self.cols, self.colvals = rows, rowvals, cols, colvals

    def at_rows(self, idx):
        """Values on rows idx, all columns, as NumPy."""
        if self.full is not None:
            return self.b.np(self.full[self.b.idx(idx)])
        return self.b.np(self.rowvals[self.b.idx(np.searchsorted(self.rows, idx))])

    def at_rowcols(self, rows, colmap):
        """Values of each row of rows on its own columns (colmap: len(rows) x nc), as NumPy."""
        if self.full is not None:
            full = self.b.np(self.full)
            return full[rows[:, None], colmap]
        colvals = self.b.np(self.colvals)
        return colvals[rows[:, None], np.searchsorted(self.cols, colmap)]


# ----- products: gemm, grouped, and low precision's dequantised operands


def product_part(b, blocks, R, C, need):
    """out [R][C] made of row blocks (r0, X, Y): out[r0:r0+rows(X)] = X @ Y, as needed."""
    if need.rows.size == R and need.cols.size == 0:
        full = b.zeros((R, C))
        for r0, X, Y in blocks:
            if X.shape[0]:
                full[r0:r0 + X.shape[0]] = X @ Y
        return Part(b, full=full)
    rows, cols = need.rows, need.cols
    rv, cv = b.zeros((rows.size, C)), b.zeros((R, cols.size))
    ci = b.idx(cols)
    for r0, X, Y in blocks:
        n = X.shape[0]
        lo, hi = np.searchsorted(rows, [r0, r0 + n])
        if hi > lo:
            rv[lo:hi] = X[b.idx(rows[lo:hi] - r0)] @ Y
        if cols.size and n:
            cv[r0:r0 + n] = X @ Y[:, ci]
    return Part(b, rows=rows, rowvals=rv, cols=cols, colvals=cv)


def gemm_parts(b, Al, Bl, dC, needs):
    """C = A·B, dA = dC·Bᵀ, dB = Aᵀ·dC from logical A [M][K], B [K][N] (backend arrays)."""
    M, K = Al.shape
    N = Bl.shape[1]
    parts = {}
    if "C" in needs:
        parts["C"] = product_part(b, [(0, Al, Bl)], M, N, needs["C"])
    if "dA" in needs:
        parts["dA"] = product_part(b, [(0, dC, b.t(Bl))], M, K, needs["dA"])
    if "dB" in needs:
        parts["dB"] = product_part(b, [(0, b.t(Al), dC)], K, N, needs["dB"])
    return parts


def grouped_parts(b, A, Bls, groups, dC, nt, needs):
    """C_g = A_g·B_g, dA_g = dC_g·B_gᵀ, dB rows: dB_g = A_gᵀ·dC_g (NN) or its transpose (NT)."""
    K, N = A.shape[1], Bls[0].shape[1] if Bls else 0
    offs = [0]
    for m in groups:
        offs.append(offs[-1] + m)
    M = offs[-1]
    parts = {}
    if "C" in needs:
        blocks = [(offs[g], A[offs[g]:offs[g + 1]], Bls[g]) for g in range(len(groups))]
        parts["C"] = product_part(b, blocks, M, N, needs["C"])
    if "dA" in needs:
        blocks = [(offs[g], dC[offs[g]:offs[g + 1]], b.t(Bls[g])) for g in range(len(groups))]
        parts["dA"] = product_part(b, blocks, M, K, needs["dA"])
    if "dB" in needs:
        R, W = (N, K) if nt else (K, N)
        blocks = []
        for g in range(len(groups)):
            Ag, dCg = A[offs[g]:offs[g + 1]], dC[offs[g]:offs[g + 1]]
            blocks.append((g * R, b.t(dCg), Ag) if nt else (g * R, b.t(Ag), dCg))
        parts["dB"] = product_part(b, blocks, len(groups) * R, W, needs["dB"])
    return parts


def product_shapes(c):
    """Expected (rows, cols) of each output of a gemm or grouped case."""
    M, N, K = c.get("m", int), c.get("n", int), c.get("k", int)
    if c.op == "grouped":
        groups = c.get("groups", "ints")
        if not groups:
            raise c.bad("\"groups\" is empty")
        if sum(groups) != M:
            raise c.bad("m = %d but the groups sum to %d" % (M, sum(groups)))
        R, W = (N, K) if c.man.get("layout") == "NT" else (K, N)
        return {"C": (M, N), "dA": (M, K), "dB": (len(groups) * R, W)}
    return {"C": (M, N), "dA": (M, K), "dB": (K, N)}


def oracle_product(c, b, needs):
    """Every needed output of a gemm or grouped case with f32/f16/bf16 inputs."""
    M, N, K = c.get("m", int), c.get("n", int), c.get("k", int)
    layout = c.get("layout")
    grads = "dA" in needs or "dB" in needs
    dC = b.arr(c.tensor("dC", F4, (M, N))) if grads else None
    if c.op == "gemm":
        if layout not in ("NN", "NT", "TN", "TT"):
            raise c.bad("unknown layout %r" % layout)
        A = b.arr(c.tensor("A", F4, (M, K) if layout[0] == "N" else (K, M)))
        B = b.arr(c.tensor("B", F4, (K, N) if layout[1] == "N" else (N, K)))
        return gemm_parts(b, A if layout[0] == "N" else b.t(A), B if layout[1] == "N" else b.t(B), dC, needs)
    if layout not in ("NN", "NT"):
        raise c.bad("unknown grouped layout %r" % layout)
    groups = c.get("groups", "ints")
    G = len(groups)
    A = b.arr(c.tensor("A", F4, (M, K)))
    B = b.arr(c.tensor("B", F4, (G, K, N) if layout == "NN" else (G, N, K)))
    Bls = [B[g] if layout == "NN" else b.t(B[g]) for g in range(G)]
    return grouped_parts(b, A, Bls, groups, dC, layout == "NT", needs)


# ----- low precision: element and scale formats decoded from their bits

# name: (exponent bits, mantissa bits, bias, fnuz)
QFORMATS = {"e4m3": (4, 3, 7, False), "e5m2": (5, 2, 15, False), "e4m3fnuz": (4, 3, 8, True),
            "e5m2fnuz": (5, 2, 16, True), "e2m1": (2, 1, 1, False)}
ML_DTYPES = {"e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2", "e4m3fnuz": "float8_e4m3fnuz",
             "e5m2fnuz": "float8_e5m2fnuz", "e2m1": "float4_e2m1fn"}
_tables = {}


def decode_table(fmt):
    """float64 value of every code of fmt, from sign, exponent and mantissa bits."""
    if fmt in _tables:
        return _tables[fmt]
    ebits, mbits, bias, fnuz = QFORMATS[fmt]
    bits = 1 + ebits + mbits
    eall, mall = (1 << ebits) - 1, (1 << mbits) - 1
    t = np.empty(1 << bits)
    for code in range(1 << bits):
        sign, mag = code >> (bits - 1), code & ((1 << (bits - 1)) - 1)
        e, m = mag >> mbits, mag & mall
        if fnuz and code == 0x80:
            v = NAN                                     # FNUZ: 0x80 the only NaN, no -0
        elif bits == 8 and not fnuz and e == eall and fmt == "e5m2":
            v = INF if m == 0 else NAN                  # OCP E5M2: IEEE inf and NaN
        elif bits == 8 and not fnuz and e == eall and m == mall:
            v = NAN                                     # OCP E4M3: S.1111.111 NaN, no inf
        elif e:
            v = math.ldexp((1 << mbits) + m, e - bias - mbits)
        else:
            v = math.ldexp(m, 1 - bias - mbits)         # subnormal
        t[code] = -v if sign else v
    _tables[fmt] = t
    return t


def decode_e8m0(e):
    """E8M0 scale bytes as float32: 2^(e-127), 255 NaN."""
    v = np.ldexp(np.ones(e.shape), e.astype(np.int32) - 127)
    return np.where(e == 255, NAN, v).astype(np.float32)


def same_values(x, y):
    """Elementwise: equal with the same sign bit, or both NaN."""
    return (np.isnan(x) & np.isnan(y)) | ((x == y) & (np.signbit(x) == np.signbit(y)))


def crosscheck_ml_dtypes():
    """Compare the decode tables with ml_dtypes (when it imports); a line saying so."""
    try:
        import ml_dtypes
    except Exception:
        return "oracle: ml_dtypes not importable: fp8/fp4/E8M0 decode tables not cross-checked"
    done = []
    for fmt, name in ML_DTYPES.items():
        dt = getattr(ml_dtypes, name, None)
        if dt is None:
            continue
        mine = decode_table(fmt)
        theirs = np.arange(mine.size, dtype=np.uint8).view(dt).astype(np.float64)
        bad = np.flatnonzero(~same_values(mine, theirs))
        if bad.size:
            raise SelfCheckError("%s decode of code 0x%02x is %r, ml_dtypes.%s says %r"
                                 % (fmt, bad[0], mine[bad[0]], name, theirs[bad[0]]))
        done.append(fmt)
    dt = getattr(ml_dtypes, "float8_e8m0fnu", None)
    if dt is not None:
        codes = np.arange(256, dtype=np.uint8)
        mine, theirs = decode_e8m0(codes).astype(np.float64), codes.view(dt).astype(np.float64)
        bad = np.flatnonzero(~same_values(mine, theirs))
        if bad.size:
            raise SelfCheckError("e8m0 decode of 0x%02x is %r, ml_dtypes says %r" % (bad[0], mine[bad[0]], theirs[bad[0]]))
        done.append("e8m0")
    return "oracle: decode tables of %s equal ml_dtypes %s's" % (", ".join(done), ml_dtypes.__version__)


class SelfCheckError(Exception):
    """The oracle's own decode tables disagree with ml_dtypes."""


def dequantize(c, op, fmt, mx, block, batch, rows, K):
    """op's decoded codes times their block scales, float64 [batch][rows][K]; and a note if E8M0 != scales."""
    two_d = op == "A"
    rb = (K + 1) // 2 if fmt == "e2m1" else K
    codes = c.tensor(op + "_codes", U1, (rows, rb) if two_d else (batch, rows, rb)).reshape(batch, rows, rb)
    if (not isinstance(block, list) or len(block) != 2
            or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in block)):
        raise c.bad("quant %s_block is %r, not [rows, cols] >= 1" % (op, block))
    gr, gc = block
    sshape = (batch, -(-rows // gr), -(-K // gc))
    scales = c.tensor(op + "_scales", F4, sshape)
    note = None
    if mx:
        e8 = c.tensor(op + "_e8m0", U1, sshape)
        dec = decode_e8m0(e8)
        diff = np.argwhere(~same_values(dec, scales))
        if diff.size:
            i = tuple(diff[0])
            note = "%s_e8m0 != %s_scales in %d of %d blocks, first [%d][%d][%d]: 0x%02x = %r, scale %r" % (
                op, op, len(diff), dec.size, i[0], i[1], i[2], int(e8[i]), float(dec[i]), float(scales[i]))
        scales = dec                                     # the bytes are what a kernel reads
    table = decode_table(fmt)
    if fmt == "e2m1":
        nib = np.stack([codes & 0xF, codes >> 4], axis=-1).reshape(batch, rows, 2 * rb)
        if K % 2 and rows and np.any(nib[:, :, K]):
            sys.stderr.write("oracle: warning: %s: %s_codes has a nonzero padding nibble (odd K)\n" % (c.path, op))
        vals = table[nib[:, :, :K]]
    else:
        vals = table[codes]
    s = np.repeat(np.repeat(scales.astype(np.float64), gr, axis=1)[:, :rows], gc, axis=2)[:, :, :K]
    return vals * s, note


def oracle_quant(c, b, needs):
    """C of a low-precision gemm or grouped case from codes and scales; and E8M0 notes."""
    q = c.get("quant")
    if not isinstance(q, dict):
        raise c.bad("\"quant\" is not an object")
    fmt, scaling = c.get("format", where=q), c.get("scaling", where=q)
    if fmt not in QFORMATS:
        raise c.bad("unknown quant format %r" % fmt)
    if scaling not in ("tensor", "row", "block", "mx"):
        raise c.bad("unknown quant scaling %r" % scaling)
    if c.man.get("layout") != "NT":
        raise c.bad("low precision is layout NT, the manifest says %r" % c.man.get("layout"))
    M, N, K = c.get("m", int), c.get("n", int), c.get("k", int)
    kb = c.get("k_block", int, where=q)
    for op in ("A", "B"):
        blk = c.get(op + "_block", where=q)
        if isinstance(blk, list) and len(blk) == 2 and blk[1] != kb:
            raise c.bad("quant k_block %d but %s_block %r" % (kb, op, blk))
    groups = c.get("groups", "ints") if c.op == "grouped" else [M]
    mx = scaling == "mx"
    A, na = dequantize(c, "A", fmt, mx, q["A_block"], 1, M, K)
    B, nb = dequantize(c, "B", fmt, mx, q["B_block"], len(groups), N, K)
    A, B = b.arr(A[0]), b.arr(B)
    if c.op == "gemm":
        parts = gemm_parts(b, A, b.t(B[0]), None, needs)
    else:
        parts = grouped_parts(b, A, [b.t(B[g]) for g in range(len(groups))], groups, None, True, needs)
    return parts, [n for n in (na, nb) if n]


# ----- attention


def attn_shapes(c):
    """Expected (rows, cols) of each attention output."""
    sq, sk = c.get("seqlens_q", "ints"), c.get("seqlens_k", "ints")
    if len(sq) != len(sk):
        raise c.bad("seqlens_q has %d sequences, seqlens_k %d" % (len(sq), len(sk)))
    Hq, Hkv, D = c.get("heads_q", int), c.get("heads_kv", int), c.get("dim", int)
    if Hkv < 1 or Hq < 1 or Hq % Hkv or D < 1:
        raise c.bad("heads_q %d, heads_kv %d, dim %d: need Hq a multiple of Hkv, D >= 1" % (Hq, Hkv, D))
    Tq, Tk = sum(sq), sum(sk)
    return {"O": (Tq, Hq * D), "LSE": (Tq, Hq), "dQ": (Tq, Hq * D), "dK": (Tk, Hkv * D), "dV": (Tk, Hkv * D)}


def visible(last, sq, sk, causal):
    """Keys 0..n-1 that query position `last` (and all before it) may see: n."""
    return sk if not causal else max(0, min(sk, last + sk - sq + 1))


def scores(b, q, pos, Kv, sq, sk, causal, scale):
    """scale·q·kᵀ for queries q [h][n][D] at positions pos, keys Kv [m][D]; masked keys -inf."""
    s = (q @ b.t(Kv)) * scale
    if causal:
        ok = b.arange(Kv.shape[0])[None, :] <= b.idx(pos)[:, None] + (sk - sq)
        s = b.where(ok, s, -INF)
    return s


def query_chunks(b, pos, h, sq, sk, causal):
    """(s0, s1, positions, keys seen) per chunk of sorted query positions, sized to the backend's budget;
    chunks whose queries see no key are left out."""
    step = max(1, b.budget // max(1, h * sk))
    for s0 in range(0, pos.size, step):
        p = pos[s0:s0 + step]
        kmax = visible(int(p[-1]), sq, sk, causal)
        if kmax > 0:
            yield s0, s0 + p.size, p, kmax


def attn_fwd(b, q, pos, Kg, Vg, sq, sk, causal, scale):
    """O [h][n][D] and LSE [h][n] of queries q at sorted positions pos; a row with no key: 0, -inf."""
    h, n, d = q.shape
    o, lse = b.zeros((h, n, d)), b.full((h, n), -INF)
    for s0, s1, p, kmax in query_chunks(b, pos, h, sq, sk, causal):
        s = scores(b, q[:, s0:s1], p, Kg[:kmax], sq, sk, causal, scale)
        mx = b.amax(s)
        mx = b.where(b.isfinite(mx), mx, 0.0)
        e = b.exp(s - mx)
        tot = b.rowsum(e)
        lse[:, s0:s1] = (mx + b.log(tot))[..., 0]
        o[:, s0:s1] = (e @ Vg[:kmax]) / b.where(tot > 0, tot, 1.0)
    return o, lse


def attn_bwd_q(b, q, pos, do, lse, dd, Kg, Vg, sq, sk, causal, scale):
    """dQ [h][n][D] of queries q at sorted positions pos, from exact LSE and D = Σ dO·O."""
    h, n, d = q.shape
    dq = b.zeros((h, n, d))
    lse0 = b.where(b.isfinite(lse), lse, 0.0)
    for s0, s1, p, kmax in query_chunks(b, pos, h, sq, sk, causal):
        P = b.exp(scores(b, q[:, s0:s1], p, Kg[:kmax], sq, sk, causal, scale) - lse0[:, s0:s1, None])
        dP = do[:, s0:s1] @ b.t(Vg[:kmax])
        dq[:, s0:s1] = ((P * (dP - dd[:, s0:s1, None])) @ Kg[:kmax]) * scale
    return dq


def attn_bwd_kv(b, q, do, lse, dd, J, Kj, Vj, sq, sk, causal, scale):
    """dK, dV [m][D] of keys at sorted positions J, summed over the heads of q/do [h][Sq][D]."""
    h, n, d = q.shape
    dk, dv = b.zeros((J.size, d)), b.zeros((J.size, d))
    lse0 = b.where(b.isfinite(lse), lse, 0.0)
    first = max(0, int(J[0]) - (sk - sq)) if causal else 0      # earlier queries see none of J
    step = max(1, b.budget // max(1, h * J.size))
    Jt = b.idx(J)
    for i0 in range(first, n, step):
        i1 = min(n, i0 + step)
        s = (q[:, i0:i1] @ b.t(Kj)) * scale
        if causal:
            s = b.where(Jt[None, :] <= b.arange(i0, i1)[:, None] + (sk - sq), s, -INF)
        P = b.exp(s - lse0[:, i0:i1, None])
        dS = P * (do[:, i0:i1] @ b.t(Vj) - dd[:, i0:i1, None])
        dv = dv + b.sum0(b.t(P) @ do[:, i0:i1])
        dk = dk + b.sum0(b.t(dS) @ q[:, i0:i1]) * scale
    return dk, dv


def oracle_attn(c, b, needs):
    """Every needed attention output, per sequence and per KV-head group, batched over its query heads."""
    sq, sk = c.get("seqlens_q", "ints"), c.get("seqlens_k", "ints")
    Hq, Hkv, D = c.get("heads_q", int), c.get("heads_kv", int), c.get("dim", int)
    causal, scale = c.get("causal", bool), c.get("scale", float)
    Tq, Tk, r = sum(sq), sum(sk), Hq // Hkv
    Q = b.arr(c.tensor("Q", F4, (Tq, Hq, D)))
    K = b.arr(c.tensor("K", F4, (Tk, Hkv, D)))
    V = b.arr(c.tensor("V", F4, (Tk, Hkv, D)))
    grads = any(n in needs for n in ("dQ", "dK", "dV"))
    dO = b.arr(c.tensor("dO", F4, (Tq, Hq, D))) if grads else None
    res = {"O": (Tq, Hq, D), "LSE": (Tq, Hq), "dQ": (Tq, Hq, D), "dK": (Tk, Hkv, D), "dV": (Tk, Hkv, D)}
    res = {n: b.full(shape, NAN) for n, shape in res.items() if n in needs}
    empty = np.zeros(0, dtype=np.int64)

    def rows_in(names, lo, n):
        """Union of the needed rows of outputs `names` in [lo, lo+n), relative."""
        got = [needs[x].rows_in(lo, n) for x in names if x in needs]
        return np.unique(np.concatenate(got)) if got else empty

    def head_rows(names, h, lo, n):
        """Rows in [lo, lo+n), relative, on which outputs `names` check head h alone (their own columns)."""
        got = [needs[x].col_rows(lo, n, lambda m, x=x: (m if x == "LSE" else m // D) == h) for x in names if x in needs]
        return np.unique(np.concatenate(got)) if got else empty

    def passes(names, heads, lo, n):
        """(heads, rows) pairs: the rows outputs `names` need of each of `heads`, heads with the same rows
        batched together."""
        base, by_rows = rows_in(names, lo, n), {}
        for h in heads:
            rows = np.union1d(base, head_rows(names, h, lo, n)).astype(np.int64)
            if rows.size:
                by_rows.setdefault(rows.tobytes(), (rows, []))[1].append(h)
        return [(hs, rows) for rows, hs in by_rows.values()]

    def gather(T, row0, rows, heads):
        """T[row0+rows][:, heads] as [heads][rows][D]."""
        return b.perm(T[b.idx(row0 + rows)][:, b.idx(heads)], (1, 0, 2))

    def put(name, row0, rows, heads, val):
        """Store val ([heads][rows][D], or [heads][rows] for LSE) into output `name`."""
        if name in res:
            ri, hi = b.idx(row0 + rows)[:, None], b.idx(heads)[None, :]
            res[name][ri, hi] = b.t(val) if name == "LSE" else b.perm(val, (1, 0, 2))

    q0 = k0 = 0
    for n_q, n_k in zip(sq, sk):
        keys = rows_in(("dK", "dV"), k0, n_k)
        for g in range(Hkv):
            heads = list(range(g * r, (g + 1) * r))
            Kg, Vg = K[k0:k0 + n_k, g], V[k0:k0 + n_k, g]
            J = np.union1d(keys, head_rows(("dK", "dV"), g, k0, n_k)).astype(np.int64)
            passes_f = passes(("O", "LSE"), heads, q0, n_q)
            if not grads:
                for hs, rows in passes_f:
                    o, lse = attn_fwd(b, gather(Q, q0, rows, hs), rows, Kg, Vg, n_q, n_k, causal, scale)
                    put("O", q0, rows, hs, o)
                    put("LSE", q0, rows, hs, lse)
                continue
            passes_q = passes(("dQ",), heads, q0, n_q)
            if n_q == 0:                                        # no queries: dK = dV = 0
                for name in ("dK", "dV"):
                    if name in res and J.size:
                        res[name][b.idx(k0 + J), g] = 0.0
                continue
            if not (passes_q or J.size or passes_f):
                continue
            # The gradients need every query's LSE and D = Σ dO·O: the whole forward of the group.
            allr = np.arange(n_q, dtype=np.int64)
            q, do = gather(Q, q0, allr, heads), gather(dO, q0, allr, heads)
            o, lse = attn_fwd(b, q, allr, Kg, Vg, n_q, n_k, causal, scale)
            put("O", q0, allr, heads, o)
            put("LSE", q0, allr, heads, lse)
            dd = b.rowsum(do * o)[..., 0]
            for hs, rows in (passes_q if "dQ" in needs else []):
                hl, ri = b.idx([h - g * r for h in hs]), b.idx(rows)
                dq = attn_bwd_q(b, q[hl][:, ri], rows, do[hl][:, ri], lse[hl][:, ri], dd[hl][:, ri],
                                Kg, Vg, n_q, n_k, causal, scale)
                put("dQ", q0, rows, hs, dq)
            if J.size:
                Jt = b.idx(J)
                dk, dv = attn_bwd_kv(b, q, do, lse, dd, J, Kg[Jt], Vg[Jt], n_q, n_k, causal, scale)
                for name, val in (("dK", dk), ("dV", dv)):
                    if name in res:
                        res[name][b.idx(k0 + J), g] = val
        q0, k0 = q0 + n_q, k0 + n_k
    return {n: Part(b, full=a.reshape(a.shape[0], int(np.prod(a.shape[1:])))) for n, a in res.items()}


# ----- comparing: kgate's reference and the kernel's output against the oracle


def kernel_stats(b, out, orc):
    """Kernel vs oracle: (max abs error, Σref², Σerr², non-finite outputs, oracle's non-finite)."""
    fin = b.isfinite(orc)
    nf_out, nf_orc = b.count(~b.isfinite(out)), b.count(~fin)
    missed = nf_orc - b.count((~fin) & ((out == orc) | (b.isnan(out) & b.isnan(orc))))
    ref = b.where(fin, orc, 0.0)
    err = b.where(fin, out - ref, 0.0)
    efin = b.isfinite(err)
    missed += b.count(~efin)
    err = b.where(efin, err, 0.0)
    if missed:
        return INF, b.total(ref * ref), INF, nf_out, nf_orc
    return b.maxabs(err), b.total(ref * ref), b.total(err * err), nf_out, nf_orc


def ref_diff(ref, orc):
    """(max |ref - orc| / max |orc| on finite elements, non-finite positions that differ)."""
    fr, fo = np.isfinite(ref), np.isfinite(orc)
    both = fr & fo
    mism = int(np.count_nonzero(fr != fo)) + int(np.count_nonzero(~(fr | fo) & ~same_values(ref, orc)))
    if not both.any():
        return 0.0, mism
    scale = float(np.max(np.abs(orc[both])))
    return float(np.max(np.abs(ref[both] - orc[both]))) / max(scale, TINY), mism


def fmt_stats(st):
    """max abs, SNR dB and relative L2 of kernel_stats, as text."""
    mx, r2, e2, nf_out, nf_orc = st
    snr = "inf" if e2 == 0 else "-inf" if r2 == 0 or e2 == INF else "%.2f" % (10 * math.log10(r2 / e2))
    rel = 0.0 if e2 == 0 else INF if r2 == 0 else math.sqrt(e2 / r2)
    nf = "%d" % nf_out if nf_orc == 0 else "%d (oracle %d)" % (nf_out, nf_orc)
    return "max-abs=%.3e snr=%s dB rel-l2=%.3e nonfinite=%s" % (mx, snr, rel, nf)


def check_output(c, b, meta, shape, rows, cols, part, tol, notes):
    """One output's line and whether kgate's reference agrees with the oracle."""
    name = meta["name"]
    R, C = shape
    ref_rows = c.load(c.get("ref_rows", where=meta), F8, (rows.size, C))
    ref_cols = c.load(c.get("ref_cols", where=meta), F8, (R, cols.shape[1]))
    out = c.load(c.get("out", where=meta), F4, (R, C), mmap=not b.whole)
    other = np.ones(R, dtype=bool)
    other[rows] = False
    orows = np.nonzero(other)[0]
    if cols.size and np.any(~np.isnan(ref_cols[~other])):
        sys.stderr.write("oracle: warning: %s: %s: ref_cols is not NaN on rows of rows_checked (ignored there)\n"
                         % (c.path, name))
    orc_cols = part.at_rowcols(orows, cols[orows].astype(np.int64)) if cols.size else np.zeros((0, 0))
    orc = np.concatenate([part.at_rows(rows).ravel(), orc_cols.ravel()])
    ref = np.concatenate([ref_rows.ravel(), ref_cols[other].ravel()])
    d, mism = ref_diff(ref, orc)
    agree = mism == 0 and d <= tol and not notes
    why = []
    if mism:
        why.append("%d non-finite positions differ" % mism)
    why.extend(notes)
    verdict = ("agree" if agree else "DISAGREE") + (" (%s)" % "; ".join(why) if why else "")
    if b.whole:
        scope, st = "all", kernel_stats(b, b.arr(np.asarray(out)), part.full)
    else:
        kout = np.concatenate([np.asarray(out[rows], dtype=np.float64).ravel(),
                               np.asarray(out[orows[:, None], cols[orows].astype(np.int64)], dtype=np.float64).ravel()])
        scope, st = "checked", kernel_stats(NumpyBackend(), kout, orc)
    line = "%s  %s  n=%d  ref-diff=%.2e  %s  kernel[%s]: %s" % (
        c.label, name, orc.size, d if mism == 0 else INF, verdict, scope, fmt_stats(st))
    return line, agree


def run_case(path, b, state):
    """Check every output of the case at path; print a line each; (outputs, agreeing)."""
    c = Case(path)
    outs = c.get("outputs")
    if not isinstance(outs, list) or not all(isinstance(o, dict) for o in outs):
        raise c.bad("\"outputs\" is not a list of objects")
    quant = "quant" in c.man and c.op != "attn"
    shapes = attn_shapes(c) if c.op == "attn" else product_shapes(c)
    if quant:
        shapes = {"C": shapes["C"]}
    needs, metas = {}, []
    for o in outs:
        name = c.get("name", where=o)
        if name not in shapes:
            raise c.bad("output %r is not an output of %s%s" % (name, c.op, " (low precision)" if quant else ""))
        if name in needs:
            raise c.bad("output %r listed twice" % name)
        R, C = shapes[name]
        if (c.get("rows", int, where=o), c.get("cols", int, where=o)) != (R, C):
            raise c.bad("output %s is %dx%d, expected %dx%d" % (name, o["rows"], o["cols"], R, C))
        rows = c.load(c.get("rows_checked", where=o), U4)
        cols = c.load(c.get("cols_checked", where=o), U4)
        if rows.ndim != 1 or cols.ndim != 2 or cols.shape[0] != R or (rows.size and rows.max() >= R) or \
                (cols.size and cols.max() >= C):
            raise c.bad("%s: rows_checked (1-D) and cols_checked (%d rows) are not indices below %dx%d"
                        % (name, R, R, C))
        needs[name] = Need(R, C, rows, cols, b.whole)
        metas.append((o, rows, cols))
    notes = []
    if quant:
        if not state.get("crosschecked"):
            print(crosscheck_ml_dtypes(), flush=True)
            state["crosschecked"] = True
        parts, notes = oracle_quant(c, b, needs)
    elif c.op == "attn":
        parts = oracle_attn(c, b, needs)
    else:
        parts = oracle_product(c, b, needs)
    tol = TOL_ATTN if c.op == "attn" else TOL_PRODUCT
    n = ok = 0
    for o, rows, cols in metas:
        line, agree = check_output(c, b, o, shapes[o["name"]], rows, cols, parts[o["name"]], tol, notes)
        print(line, flush=True)
        n, ok = n + 1, ok + agree
    return n, ok


def case_dirs(d):
    """The case folders of DIR: itself, or its case-NNN/ subfolders in order."""
    if os.path.isfile(os.path.join(d, "manifest.json")):
        return [d]
    if not os.path.isdir(d):
        raise BadInput("%s: no such folder" % d)
    subs = [(int(m.group(1)), e) for e in os.listdir(d) for m in [re.match(r"case-(\d+)$", e)]
            if m and os.path.isdir(os.path.join(d, e))]
    if not subs:
        raise BadInput("%s: no manifest.json and no case-NNN/ folders" % d)
    return [os.path.join(d, e) for _, e in sorted(subs)]


def main(argv=None):
    """Check every case of the folders given; exit 0 all agree, 1 some disagree, 2 bad input."""
    ap = argparse.ArgumentParser(description="Recompute kgate's dumped outputs in float64 and compare.")
    ap.add_argument("--numpy", action="store_true", help="use NumPy even where PyTorch imports")
    ap.add_argument("dirs", nargs="+", metavar="DIR", help="a case folder (manifest.json) or a folder of case-NNN/")
    args = ap.parse_args(argv)
    np.seterr(all="ignore")
    b = pick_backend(args.numpy)
    print("oracle: float64 on %s; %s" % (b.what, "whole outputs, kernel statistics over every element" if b.whole
                                         else "checked rows and columns only, kernel statistics over the checked elements"),
          flush=True)
    state, outputs, agree, cases = {}, 0, 0, 0
    try:
        for d in args.dirs:
            for path in case_dirs(d):
                n, ok = run_case(path, b, state)
                outputs, agree, cases = outputs + n, agree + ok, cases + 1
    except BadInput as e:
        sys.stderr.write("oracle: bad input: %s\n" % e)
        return 2
    except SelfCheckError as e:
        sys.stderr.write("oracle: self-check failed, decode tables wrong: %s\n" % e)
        return 2
    print("oracle: %d outputs of %d cases: %d agree, %d disagree" % (outputs, cases, agree, outputs - agree))
    return 0 if agree == outputs else 1


if __name__ == "__main__":
    sys.exit(main())
