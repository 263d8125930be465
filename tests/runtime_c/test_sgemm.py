"""runtime_c/kernels/sgemm.h (the packed float32 GEMM) through cffi, against float64 numpy.

Every case runs on several builds of the same header: the machine's widest vectors
(-march=native), AVX2+FMA and AVX-512 alone where the CPU has them, the compiler's default
target (SSE2 on x86-64: 16-byte vectors) and the portable C fallback (-DFC_NO_VECTOR).
Plans come from codegen/backends/c/sgemm.make_plan for the ISA the build reports, so the
Python packers (pack_a / pack_b) feed the C kernel directly; a separate test checks them bit
for bit against the C packers. Results are checked against a float64 product with the
rigorous float32 summation bound (k + 4) * 2^-23 * (|alpha| |A||B| + |beta C| + |bias|).

A standalone program with `static const` plans (as generated code declares them) runs under
-fsanitize=address,undefined with every buffer malloc'ed to its exact size, and builds with
clang when it is installed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from codegen.backends.c import sgemm as sp

RUNTIME = Path(__file__).resolve().parents[2] / "runtime_c"
HEADER = (RUNTIME / "kernels" / "sgemm.h").read_text()
CC = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")  # as conftest.py picks it
EPS = 2.0**-23


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    found = re.search(r"^(?:flags|Features)\s*:(.*)$", text, re.M)
    return set(found.group(1).split()) if found else set()


CPU = _cpu_flags()
X86 = "sse2" in CPU
# build name -> (extra compiler flags, reason to skip or None)
BUILDS = {
    "native": (("-march=native",), None),
    "native-O3": (("-march=native", "-O3"), None),
    "avx512": (("-mavx512f", "-mfma"), None if "avx512f" in CPU else "CPU has no AVX-512"),
    "avx2": (("-mavx2", "-mfma"), None if {"avx2", "fma"} <= CPU else "CPU has no AVX2+FMA"),
    "default": ((), None),
    "scalar": (("-DFC_NO_VECTOR",), None),
}
if not X86:
    for _name in ("avx512", "avx2"):
        BUILDS[_name] = (BUILDS[_name][0], "not an x86 machine")


def build_param(name):
    flags, skip = BUILDS[name]
    return pytest.param(name, id=name, marks=[pytest.mark.skip(reason=skip)] if skip else [])


ALL_BUILDS = [build_param(n) for n in BUILDS]
FAST_BUILDS = [build_param(n) for n in ("native", "scalar")]


def plan_struct() -> str:
    """The header's fc_sgemm_plan typedef, so cffi's layout cannot drift from it."""
    return re.search(r"typedef struct fc_sgemm_plan \{.*?\} fc_sgemm_plan;", HEADER, re.S).group(0)


CDEF = (
    plan_struct()
    + """
typedef struct { const float *r; float *count; long ld; } t_epi_arg;
const char *t_isa(void);
long t_mr(void);
long t_nr(void);
size_t t_scratch(const fc_sgemm_plan *p);
size_t t_packed_a(const fc_sgemm_plan *p);
size_t t_packed_b(const fc_sgemm_plan *p);
void t_pack_a(const fc_sgemm_plan *p, const float *a, long rs, long cs, float *out);
void t_pack_b(const fc_sgemm_plan *p, const float *b, long rs, long cs, float *out);
void t_range(const fc_sgemm_plan *p, long part, long parts, long *out);
void t_gemm(const fc_sgemm_plan *p, const float *a, const float *b, float *c, const float *bias,
            int epi, const t_epi_arg *arg, void *scratch, long part, long parts);
"""
)

SOURCE = """
#include "kernels/sgemm.h"

typedef struct { const float *r; float *count; long ld; } t_epi_arg;

const char *t_isa(void) { return FC_SGEMM_ISA; }
long t_mr(void) { return FC_SGEMM_MR; }
long t_nr(void) { return FC_SGEMM_NR; }
size_t t_scratch(const fc_sgemm_plan *p) { return fc_sgemm_scratch_bytes(p); }
size_t t_packed_a(const fc_sgemm_plan *p) { return fc_sgemm_packed_a_floats(p); }
size_t t_packed_b(const fc_sgemm_plan *p) { return fc_sgemm_packed_b_floats(p); }
void t_pack_a(const fc_sgemm_plan *p, const float *a, long rs, long cs, float *out) {
    fc_sgemm_pack_a(p, a, rs, cs, out);
}
void t_pack_b(const fc_sgemm_plan *p, const float *b, long rs, long cs, float *out) {
    fc_sgemm_pack_b(p, b, rs, cs, out);
}
void t_range(const fc_sgemm_plan *p, long part, long parts, long *out) {
    fc_sgemm_part_range(p, part, parts, out, out + 1, out + 2, out + 3);
}

/* relu over the tile: what generated code passes for a fused activation */
static inline void t_relu(float *c, long ldc, long rows, long cols, long i0, long j0, const void *arg) {
    long i, j;
    (void)i0;
    (void)j0;
    (void)arg;
    for (i = 0; i < rows; i++)
        for (j = 0; j < cols; j++)
            c[i * ldc + j] = c[i * ldc + j] > 0.0f ? c[i * ldc + j] : 0.0f;
}

/* residual add, then relu; counts the calls per element (each must get exactly one) */
static inline void t_resid(float *c, long ldc, long rows, long cols, long i0, long j0, const void *arg) {
    const t_epi_arg *e = (const t_epi_arg *)arg;
    long i, j;
    for (i = 0; i < rows; i++)
        for (j = 0; j < cols; j++) {
            float v = c[i * ldc + j] + e->r[(i0 + i) * e->ld + j0 + j];
            c[i * ldc + j] = v > 0.0f ? v : 0.0f;
            e->count[(i0 + i) * e->ld + j0 + j] += 1.0f;
        }
}

void t_gemm(const fc_sgemm_plan *p, const float *a, const float *b, float *c, const float *bias,
            int epi, const t_epi_arg *arg, void *scratch, long part, long parts) {
    if (epi == 1)
        fc_sgemm(p, a, b, c, bias, t_relu, NULL, scratch, part, parts);
    else if (epi == 2)
        fc_sgemm(p, a, b, c, bias, t_resid, arg, scratch, part, parts);
    else
        fc_sgemm(p, a, b, c, bias, NULL, NULL, scratch, part, parts);
}
"""


class Kernel:
    """One build of the header: its ISA and a runner for (plan, operands)."""

    def __init__(self, c_lib, build: str, flags=None):
        self.ffi, self.lib = c_lib(CDEF, SOURCE, tuple(flags or BUILDS[build][0]))
        self.isa = self.ffi.string(self.lib.t_isa()).decode()
        vl, mr, nv = sp.ISAS[self.isa]
        if not flags:
            assert (self.lib.t_mr(), self.lib.t_nr()) == (mr, vl * nv), "ISAS out of step with sgemm.h"

    def plan_c(self, plan: sp.SgemmPlan):
        return self.ffi.new("fc_sgemm_plan *", {f: getattr(plan, f) for f in sp.FIELDS})

    def ptr(self, arr):
        return self.ffi.NULL if arr is None else self.ffi.cast("float *", arr.ctypes.data)

    def pack(self, which: str, plan, logical) -> np.ndarray:
        """C packer output for a logical A (m x k) or B (k x n), read through its strides."""
        n = (self.lib.t_packed_a if which == "a" else self.lib.t_packed_b)(self.plan_c(plan))
        out = np.full(max(n, 1), np.nan, np.float32)
        rs, cs = (s // 4 for s in logical.strides)
        fn = self.lib.t_pack_a if which == "a" else self.lib.t_pack_b
        fn(self.plan_c(plan), self.ptr(logical), rs, cs, self.ptr(out))
        return out[:n]

    def gemm(self, plan, a, b, c, bias=None, epi=0, resid=None, part=0, parts=1):
        """Runs the kernel in place on c (a row-major view with row stride plan.ldc)."""
        pc = self.plan_c(plan)
        scratch = np.full(max(self.lib.t_scratch(pc) // 4, 1), np.nan, np.float32)
        count = np.zeros(c.shape, np.float32)
        arg = self.ffi.new("t_epi_arg *", {"r": self.ptr(resid), "count": self.ptr(count), "ld": c.shape[1]})
        self.lib.t_gemm(pc, self.ptr(a), self.ptr(b), self.ptr(c), self.ptr(bias), epi, arg,
                        self.ffi.cast("void *", scratch.ctypes.data), part, parts)  # fmt: skip
        return count


@pytest.fixture(scope="module", params=ALL_BUILDS)
def kern(request, c_lib):
    return Kernel(c_lib, request.param)


@pytest.fixture(scope="module", params=FAST_BUILDS)
def kern2(request, c_lib):
    return Kernel(c_lib, request.param)


@pytest.fixture(scope="module")
def native(c_lib):
    return Kernel(c_lib, "native")


# ----------------------------------------------------------------------------- helpers
def rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def operand(rng, which, logical, form, pad=3):
    """Storage for a logical A (m x k) or B (k x n) in ``form``: (array to pass, plan kwargs).

    row / trans keep a padded leading dimension; strided is a numpy view with arbitrary
    element strides (passed through a custom plan).
    """
    r, c = logical.shape
    if form == "row":
        store = np.full((r, c + pad), np.nan, np.float32)
        store[:, :c] = logical
        return store, {which: "row", f"ld{which}": c + pad}
    if form == "trans":
        store = np.full((c, r + pad), np.nan, np.float32)
        store[:, :r] = logical.T
        return store, {which: "trans", f"ld{which}": r + pad}
    if form == "strided":
        big = np.full((2 * r + 1, 3 * c + 2), np.nan, np.float32)
        view = big[1::2, ::3][:r, :c][::-1]  # reversed rows, every third column
        view[...] = logical
        return view, {which: "row", "strides": (view.strides[0] // 4, view.strides[1] // 4)}
    raise ValueError(form)


def make_case(kern, rng, m, n, k, *, a="row", b="row", alpha=1.0, beta=0.0, bias="none",
              pad_c=0, **blocks):  # fmt: skip
    A, B = rand(rng, m, k), rand(rng, k, n)
    kw = {}
    a_arr, b_arr = A, B
    if a == "packed":
        kw["a"] = "packed"
    else:
        a_arr, akw = operand(rng, "a", A, a)
        a_strides = akw.pop("strides", None)
        kw.update(akw)
    if b == "packed":
        kw["b"] = "packed"
    else:
        b_arr, bkw = operand(rng, "b", B, b)
        b_strides = bkw.pop("strides", None)
        kw.update(bkw)
    plan = sp.make_plan(m, n, k, isa=kern.isa, alpha=alpha, beta=beta, bias=bias, ldc=n + pad_c,
                        **kw, **blocks)  # fmt: skip
    if a == "strided":
        plan = sp.with_fields(plan, a_rs=a_strides[0], a_cs=a_strides[1])
    if b == "strided":
        plan = sp.with_fields(plan, b_rs=b_strides[0], b_cs=b_strides[1])
    if a == "packed":
        a_arr = sp.pack_a(A, plan)
    if b == "packed":
        b_arr = sp.pack_b(B, plan)
    return plan, A, B, a_arr, b_arr


def reference(A, B, C0, alpha, beta, bias_vec, bias, epi, resid):
    """float64 result and the per-element error bound."""
    A64, B64 = A.astype(np.float64), B.astype(np.float64)
    ref = alpha * (A64 @ B64)
    mag = abs(alpha) * (np.abs(A64) @ np.abs(B64))
    if beta != 0.0:
        ref = ref + beta * C0
        mag = mag + np.abs(beta * C0)
    if bias != "none":
        bv = bias_vec.astype(np.float64)
        bv = bv[:, None] if bias == "row" else bv[None, :]
        ref, mag = ref + bv, mag + np.abs(bv)
    if epi == 2:
        ref, mag = ref + resid, mag + np.abs(resid)
    if epi:
        ref = np.maximum(ref, 0.0)
    k = A.shape[1]
    return ref, (k + 4) * EPS * mag + 1e-30


def check(kern, rng, m, n, k, *, a="row", b="row", alpha=1.0, beta=0.0, bias="none", epi=0,
          parts=1, pad_c=0, **blocks):  # fmt: skip
    plan, A, B, a_arr, b_arr = make_case(kern, rng, m, n, k, a=a, b=b, alpha=alpha, beta=beta,
                                         bias=bias, pad_c=pad_c, **blocks)  # fmt: skip
    C0 = rand(rng, m, n).astype(np.float64) if beta != 0.0 else None
    store = np.full((m, n + pad_c), np.nan, np.float32)  # beta 0: whatever C held is ignored
    if C0 is not None:
        store[:, :n] = C0
    c = store[:, :n]
    bias_vec = rand(rng, m if bias == "row" else n) if bias != "none" else None
    resid = rand(rng, m, n) if epi == 2 else None
    count = np.zeros((m, n), np.float32)
    for part in range(parts):
        count += kern.gemm(plan, a_arr, b_arr, c, bias_vec, epi, resid, part, parts)
    ref, bound = reference(A, B, C0, alpha, beta, bias_vec, bias, epi, resid)
    err = np.abs(c.astype(np.float64) - ref)
    bad = ~(err <= bound)
    assert not bad.any(), (
        f"{kern.isa} {plan}: {bad.sum()} of {bad.size} wrong, first at "
        f"{tuple(np.argwhere(bad)[0])}: got {c[bad][0]}, want {ref[bad][0]}"
    )
    if pad_c:
        assert np.isnan(store[:, n:]).all(), "wrote outside C's columns"
    if epi == 2:
        np.testing.assert_array_equal(count, 1.0, err_msg="epilogue must see each element once")
    return c.copy(), plan


# ----------------------------------------------------------------------------- shapes
SHAPES = [
    (1, 1, 1), (1, 1, 9), (1, 17, 1), (7, 1, 3), (1, 100, 513), (100, 1, 50), (2, 3, 4),
    (3, 5, 2), (13, 31, 17), (14, 32, 5), (15, 33, 9), (16, 16, 16), (6, 16, 40), (8, 12, 7),
    (29, 65, 100), (37, 70, 300), (64, 3136 // 16, 576 // 4), (45, 49, 201), (130, 47, 66),
]  # fmt: skip


@pytest.mark.parametrize("m,n,k", SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in SHAPES])
def test_shapes(kern, m, n, k):
    """Raw row-major operands, default blocking (one k block for most shapes)."""
    check(kern, np.random.default_rng(m * 1000 + n * 10 + k), m, n, k)


@pytest.mark.parametrize("m,n,k", SHAPES[5:], ids=[f"{m}x{n}x{k}" for m, n, k in SHAPES[5:]])
def test_small_blocks(kern, m, n, k):
    """Blocks smaller than the matrix in every loop: several k blocks (C accumulates across
    them), several A and B blocks, B packed per block (order 0 with more than one A block)."""
    vl, mr, nv = sp.ISAS[kern.isa]
    rng = np.random.default_rng(k)
    check(kern, rng, m, n, k, kc=7, mc=2 * mr, nc=vl * nv)
    check(kern, rng, m, n, k, kc=32, mc=mr, nc=3 * vl * nv, order=1, beta=1.0, a_direct=False)
    check(kern, rng, m, n, k, kc=9, mc=3 * mr, nc=2 * vl * nv, a="trans", a_direct=False)


FORMS = ["row", "trans", "strided", "packed"]


# A's forms, raw ones both packed at run time and read in place (a_direct)
A_MODES = [(f, d) for f in FORMS for d in (False, True) if not (f == "packed" and d)]


@pytest.mark.parametrize("a,direct", A_MODES, ids=[f"a-{f}{'-in-place' * d}" for f, d in A_MODES])
@pytest.mark.parametrize("b", FORMS, ids=[f"b-{f}" for f in FORMS])
def test_operand_forms(kern, a, b, direct):
    """Every combination of raw (row-major, transposed, any strides) and pre-packed operands,
    raw A packed per block or read in place, with ragged edges and more than one k block."""
    rng = np.random.default_rng(FORMS.index(a) * 4 + FORMS.index(b))
    check(kern, rng, 23, 41, 75, a=a, b=b, kc=32, a_direct=direct)
    check(kern, rng, 5, 3, 11, a=a, b=b, a_direct=direct)


@pytest.mark.parametrize("b", ["row", "strided"])
@pytest.mark.parametrize("order", [0, 1])
@pytest.mark.parametrize("direct", [False, True])
def test_raw_b_in_place_or_packed(kern, b, order, direct):
    """Raw B read in place (b_direct: its whole column panels; a ragged last one packed) or
    packed at run time: thin tiles (1 and 2 rows), a last panel of a few columns, several k
    blocks, several column blocks, parts, an epilogue, beta 1."""
    vl, mr, nv = sp.ISAS[kern.isa]
    nr = vl * nv
    rng = np.random.default_rng(order * 2 + direct)
    for m, n, k in ((23, 41, 75), (2, 3 * nr + 3, 20), (mr + 1, 2 * nr, 9), (45, 49, 201), (1, nr, 5)):
        check(kern, rng, m, n, k, b=b, order=order, b_direct=direct)
        check(kern, rng, m, n, k, b=b, order=order, b_direct=direct, kc=16, nc=nr, beta=1.0, epi=2, parts=2)


@pytest.mark.parametrize("beta", [0.0, 1.0, 0.5, -2.0])
@pytest.mark.parametrize("alpha", [1.0, -1.5])
def test_alpha_beta(kern2, alpha, beta):
    rng = np.random.default_rng(int(10 * (alpha + beta)) + 50)
    check(kern2, rng, 17, 35, 40, alpha=alpha, beta=beta, kc=16, pad_c=5)
    check(kern2, rng, 17, 35, 40, alpha=alpha, beta=beta, a="packed", b="packed", kc=16)


@pytest.mark.parametrize("n", [17, 18, 19, 20, 21, 34, 36, 49, 50, 196])
def test_narrow_last_columns(kern, n):
    """Tiles whose last 1 to 4 columns start a vector (49 = 3 x 16 + 1, a 7x7 image; 196 = 6 x
    32 + 4, a 14x14 one) take the vectors before them and a column kernel for the rest (four
    columns at a time, then one; 21: the U = 1 kernel; packed A, every row count, k blocks down
    to 2 and 3, p-chains with a remainder): sums, alpha and beta, both biases, the epilogue once
    per element, and parts."""
    vl, mr, _ = sp.ISAS[kern.isa]
    rng = np.random.default_rng(n)
    for m in (1, 2, mr - 1, 3 * mr + 2):
        check(kern, rng, m, n, 201, a="packed", bias="row", epi=2)
        check(kern, rng, m, n, 11, kc=2, alpha=-1.5, beta=0.5, bias="col", pad_c=3)
        check(kern, rng, m, n, 9, kc=3, beta=1.0, epi=1, parts=2)
        check(kern, rng, m, n, 40, a="trans", a_direct=False, bias="row", parts=3)


@pytest.mark.parametrize("bias", ["none", "row", "col"])
@pytest.mark.parametrize("epi", [0, 1, 2], ids=["no-epilogue", "relu", "residual-relu"])
def test_bias_and_epilogue(kern, bias, epi):
    """Bias per row (conv) or column (dense) and a fused activation, applied once per element
    after the last k block; the epilogue gets the right tile coordinates."""
    rng = np.random.default_rng(7 + epi)
    check(kern, rng, 31, 45, 50, bias=bias, epi=epi, kc=16, beta=1.0)
    check(kern, rng, 64, 100, 30, bias=bias, epi=epi, a="packed")
    check(kern, rng, 9, 20, 12, bias=bias, epi=epi, b="packed", parts=3)


def test_k_zero(kern2):
    """k == 0: C = beta*C + bias, then the epilogue; operands may be NULL."""
    rng = np.random.default_rng(3)
    for beta in (0.0, 1.0, 0.5):
        plan = sp.make_plan(5, 7, 0, isa=kern2.isa, beta=beta, bias="col")
        c0 = rand(rng, 5, 7)
        c = c0.copy()
        bias = rand(rng, 7)
        kern2.gemm(plan, None, None, c, bias, epi=1)
        want = np.maximum(beta * c0 + bias[None, :], 0)
        np.testing.assert_allclose(c, want, rtol=1e-6)


def test_empty(kern2):
    """m == 0 or n == 0 writes nothing and reads nothing."""
    for m, n in ((0, 5), (5, 0), (0, 0)):
        plan = sp.make_plan(m, n, 3, isa=kern2.isa)
        c = np.full((max(m, 1), max(n, 1)), 7.0, np.float32)
        kern2.gemm(plan, None, None, c)
        assert (c == 7.0).all()


@pytest.mark.parametrize("m,n", [(70, 20), (20, 300), (3, 3), (100, 100)])
@pytest.mark.parametrize("parts", [2, 3, 7])
def test_parts_equal_whole(kern2, m, n, parts):
    """The parts tile C exactly (the epilogue sees each element once over all parts), start
    on micro-panel boundaries, and give the same bits as one call: splitting never changes
    the order of a sum."""
    rng = np.random.default_rng(m + n + parts)
    plan, A, B, a_arr, b_arr = make_case(kern2, rng, m, n, 37, b="packed", bias="row", kc=16)
    bias, zero = rand(rng, m), np.zeros((m, n), np.float32)
    whole = np.full((m, n), np.nan, np.float32)
    kern2.gemm(plan, a_arr, b_arr, whole, bias, epi=2, resid=zero)
    split = np.full((m, n), np.nan, np.float32)
    count = np.zeros((m, n), np.float32)
    bounds = kern2.ffi.new("long[4]")
    for part in range(parts):
        count += kern2.gemm(plan, a_arr, b_arr, split, bias, epi=2, resid=zero, part=part, parts=parts)
        kern2.lib.t_range(kern2.plan_c(plan), part, parts, bounds)
        m0, m1, n0, n1 = bounds
        assert m0 % plan.mr == 0 and n0 % plan.nr == 0
    np.testing.assert_array_equal(count, 1.0)
    np.testing.assert_array_equal(split.view(np.uint32), whole.view(np.uint32))


def test_foreign_tile(native):
    """A plan packed for another target's micro-tile still computes the right product (the
    portable kernel); weights packed for AVX2 run on an AVX-512 build, and so on."""
    rng = np.random.default_rng(11)
    for isa in sp.ISAS:
        if isa == native.isa:
            continue
        A, B = rand(rng, 19, 33), rand(rng, 33, 27)
        bias = rand(rng, 27)
        for a in ("packed", "row"):  # a raw A is packed, whatever a_direct says
            plan = sp.make_plan(19, 27, 33, isa=isa, a=a, b="packed", kc=10, bias="col")
            c = np.empty((19, 27), np.float32)
            native.gemm(plan, sp.pack_a(A, plan) if a == "packed" else A, sp.pack_b(B, plan), c, bias)
            np.testing.assert_allclose(c, A.astype(np.float64) @ B + bias, rtol=1e-4, atol=1e-4)
            pc = native.plan_c(plan)
            assert native.lib.t_scratch(pc) == plan.scratch_bytes(native.isa)


def test_rows_per_tile_override(c_lib):
    """-DFC_SGEMM_MR=n (n <= 14) with make_plan(mr=n): another fast tile on AVX-512."""
    if "avx512f" not in CPU:
        pytest.skip("CPU has no AVX-512")
    for mr in (8, 12):
        kern = Kernel(c_lib, "avx512", ("-mavx512f", "-mfma", f"-DFC_SGEMM_MR={mr}"))
        assert kern.isa == "avx512" and kern.lib.t_mr() == mr
        rng = np.random.default_rng(mr)
        A, B = rand(rng, 30, 50), rand(rng, 50, 70)
        plan = sp.make_plan(30, 70, 50, isa="avx512", mr=mr, a="packed", kc=20)
        c = np.empty((30, 70), np.float32)
        kern.gemm(plan, sp.pack_a(A, plan), B, c)
        np.testing.assert_allclose(c, A.astype(np.float64) @ B, rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------------------------- packing
SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, 1e-45, -3.4e38, np.nan], np.float32)


@pytest.mark.parametrize("isa", list(sp.ISAS))
def test_python_packers_match_c_bit_for_bit(native, isa):
    """pack_a / pack_b (numpy) equal fc_sgemm_pack_a / _b for every target's layout, with
    ragged edges, several k blocks, strided sources and special values (-0.0, inf, NaN,
    denormals) compared as bits."""
    rng = np.random.default_rng(len(isa))
    for m, n, k, kc in ((1, 1, 1, 0), (5, 7, 3, 2), (30, 45, 70, 16), (14, 32, 64, 64), (3, 2, 0, 0)):
        blocks = {"kc": kc} if kc else {}
        plan = sp.make_plan(m, n, k, isa=isa, a="packed", b="packed", **blocks)
        A = rand(rng, m, k)
        B = rand(rng, k, n)
        if A.size:
            A.flat[rng.integers(0, A.size, 7)] = SPECIAL
            B.flat[rng.integers(0, B.size, 7)] = SPECIAL
        for which, logical in (("a", A), ("b", B)):
            py = (sp.pack_a if which == "a" else sp.pack_b)(logical, plan)
            assert py.size == (plan.packed_a_floats() if which == "a" else plan.packed_b_floats())
            spaced = np.full((logical.shape[0], 2 * logical.shape[1] + 1), np.nan, np.float32)
            spaced[:, 1::2] = logical
            for src in (logical, np.asfortranarray(logical), spaced[:, 1::2]):
                c = native.pack(which, plan, src)
                np.testing.assert_array_equal(py.view(np.uint32), c.view(np.uint32))


def test_packed_layout_formula():
    """The layout the header documents, element by element."""
    plan = sp.make_plan(9, 11, 10, isa="avx2", a="packed", b="packed", kc=4)
    A = np.arange(90, dtype=np.float32).reshape(9, 10) + 1
    B = np.arange(110, dtype=np.float32).reshape(10, 11) + 1
    Ap, Bp = sp.pack_a(A, plan), sp.pack_b(B, plan)
    mr, nr, mpad, npad = plan.mr, plan.nr, plan.mpad, plan.npad
    for pc in range(0, 10, 4):
        kb = min(4, 10 - pc)
        for p in range(kb):
            for i in range(mpad):
                ir, ii = i // mr * mr, i % mr
                want = A[i, pc + p] if i < 9 else 0
                assert Ap[pc * mpad + ir * kb + p * mr + ii] == want
            for j in range(npad):
                jr, jj = j // nr * nr, j % nr
                want = B[pc + p, j] if j < 11 else 0
                assert Bp[pc * npad + jr * kb + p * nr + jj] == want


def test_plan_twin(native):
    """Python's struct fields, scratch size and packed sizes agree with the header."""
    names = re.findall(r"\b(\w+)(?=\s*[,;])", re.sub(r"/\*.*?\*/", "", plan_struct(), flags=re.S))
    assert tuple(n for n in names if n != "fc_sgemm_plan") == sp.FIELDS
    for shape in ((1, 512, 784), (64, 3136, 576), (512, 49, 4608), (7, 5, 0), (1024, 1024, 1024)):
        for a, b in (("row", "row"), ("packed", "row"), ("row", "packed"), ("trans", "trans")):
            for order, direct in ((0, None), (1, None), (0, False), (1, True)):
                plan = sp.make_plan(*shape, isa=native.isa, a=a, b=b, order=order, a_direct=direct)
                pc = native.plan_c(plan)
                assert native.lib.t_scratch(pc) == plan.scratch_bytes(), plan
                assert native.lib.t_packed_a(pc) == plan.packed_a_floats()
                assert native.lib.t_packed_b(pc) == plan.packed_b_floats()


def test_make_plan_errors():
    with pytest.raises(ValueError, match="unknown ISA"):
        sp.make_plan(2, 2, 2, isa="mmx")
    with pytest.raises(ValueError, match="operand forms"):
        sp.make_plan(2, 2, 2, a="column")
    with pytest.raises(ValueError, match="bias"):
        sp.make_plan(2, 2, 2, bias="both")
    with pytest.raises(ValueError, match="shape"):
        sp.pack_a(np.zeros((3, 2), np.float32), sp.make_plan(2, 2, 2))


def test_isa_from_macros_matches_the_header(native):
    out = subprocess.run([CC, "-march=native", "-dM", "-E", "-"], input="", capture_output=True, text=True)
    assert sp.isa_from_macros(out.stdout) == native.isa
    assert sp.isa_from_macros(out.stdout + "#define FC_NO_VECTOR 1\n") == "scalar"


# ----------------------------------------------------------------------------- static plans
# Cases for the standalone program: (m, n, k, a form, b form, beta, bias, epilogue, parts,
# blocking overrides). Operands are filled in C; packed ones by the C packers.
STATIC_CASES = [
    (1, 512, 784, "row", "packed", 0.0, "col", 1, 1, {}),
    (64, 300, 57, "packed", "row", 0.0, "row", 1, 1, {}),
    (45, 49, 201, "packed", "row", 1.0, "row", 0, 2, {}),
    (33, 17, 70, "trans", "trans", 0.5, "none", 1, 3, {"kc": 16}),
    (29, 65, 100, "row", "row", 0.0, "col", 0, 1, {"kc": 24, "mc": 28, "nc": 40}),
    (20, 40, 30, "row", "row", 1.0, "none", 1, 2, {"order": 1, "kc": 8}),
    (30, 20, 40, "row", "row", 0.0, "row", 1, 2, {"a_direct": False, "kc": 16}),
    (30, 20, 40, "trans", "row", 0.0, "col", 0, 1, {"a_direct": True, "kc": 16}),
    (1, 1, 1, "row", "row", 0.0, "none", 0, 1, {}),
    (7, 5, 0, "row", "row", 0.5, "col", 1, 1, {}),
]  # fmt: skip

STATIC_FRAME = r"""
#include <stdio.h>
#include <stdlib.h>
#include "kernels/sgemm.h"

static float *take(size_t n) { return (float *)malloc(n ? n * sizeof(float) : 1); }
static void fill(float *x, size_t n, unsigned *s) {
    size_t i;
    for (i = 0; i < n; i++) {
        *s = *s * 1664525u + 1013904223u;
        x[i] = (float)((double)(*s >> 8) / 16777216.0 - 0.5);
    }
}
static inline void relu(float *c, long ldc, long rows, long cols, long i0, long j0, const void *arg) {
    long i, j;
    (void)i0;
    (void)j0;
    (void)arg;
    for (i = 0; i < rows; i++)
        for (j = 0; j < cols; j++)
            c[i * ldc + j] = c[i * ldc + j] > 0.0f ? c[i * ldc + j] : 0.0f;
}

/* A(i, p) and B(p, j) of case storage in its form: 0 row, 1 trans (as make_plan spells them) */
static int check(const fc_sgemm_plan *P, const float *a, int at, const float *b, int bt, const float *c0,
                 const float *c, const float *bias, int epi) {
    long i, j, p, bad = 0;
    for (i = 0; i < P->m; i++)
        for (j = 0; j < P->n; j++) {
            double acc = 0, mag = 0, want, err;
            for (p = 0; p < P->k; p++) {
                double x = at ? a[p * P->m + i] : a[i * P->k + p];
                double y = bt ? b[j * P->k + p] : b[p * P->n + j];
                acc += x * y;
                mag += fabs(x * y);
            }
            acc *= P->alpha;
            if (P->beta != 0.0f) {
                acc += P->beta * (double)c0[i * P->ldc + j];
                mag += fabs(P->beta * (double)c0[i * P->ldc + j]);
            }
            if (P->bias == FC_SGEMM_BIAS_ROW)
                acc += bias[i], mag += fabs(bias[i]);
            if (P->bias == FC_SGEMM_BIAS_COL)
                acc += bias[j], mag += fabs(bias[j]);
            want = epi && acc < 0 ? 0 : acc;
            err = fabs(want - c[i * P->ldc + j]);
            if (!(err <= (P->k + 4) * 1.1920928955078125e-7 * mag + 1e-30))
                bad++;
        }
    return bad != 0;
}
%(plans)s
int main(void) {
    int failed = 0;
    unsigned seed = 12345u;
%(cases)s
    printf("failed %%d\n", failed);
    return failed;
}
"""

STATIC_CASE = r"""
    {
        const fc_sgemm_plan *P = &plan%(i)d;
        size_t na = (size_t)P->m * P->k, nb = (size_t)P->k * P->n, nc = (size_t)P->m * P->ldc;
        size_t scratch_bytes = fc_sgemm_scratch_bytes(P);
        float *a = take(na), *b = take(nb), *c = take(nc), *c0 = take(nc);
        float *bias = take(P->bias == FC_SGEMM_BIAS_ROW ? (size_t)P->m : (size_t)P->n);
        float *ap = NULL, *bp = NULL;
        long part;
        fill(a, na, &seed);
        fill(b, nb, &seed);
        fill(c0, nc, &seed);
        fill(bias, P->bias == FC_SGEMM_BIAS_ROW ? (size_t)P->m : (size_t)P->n, &seed);
        memcpy(c, c0, nc * sizeof(float));
        if (P->a_packed) {
            ap = take(fc_sgemm_packed_a_floats(P));
            fc_sgemm_pack_a(P, a, %(a_rs)d, %(a_cs)d, ap);
        }
        if (P->b_packed) {
            bp = take(fc_sgemm_packed_b_floats(P));
            fc_sgemm_pack_b(P, b, %(b_rs)d, %(b_cs)d, bp);
        }
        for (part = 0; part < %(parts)d; part++) {
            void *scratch = scratch_bytes ? malloc(scratch_bytes) : NULL;
            fc_sgemm(P, P->a_packed ? ap : a, P->b_packed ? bp : b, c, P->bias ? bias : NULL,
                     %(epi)s, NULL, scratch, part, %(parts)d);
            free(scratch);
        }
        if (check(P, a, %(at)d, b, %(bt)d, c0, c, bias, %(epi_on)d)) {
            printf("case %(i)d wrong\n");
            failed++;
        }
        free(a), free(b), free(c), free(c0), free(bias), free(ap), free(bp);
    }
"""


def static_program(isa: str) -> str:
    plans, cases = [], []
    for i, (m, n, k, a, b, beta, bias, epi, parts, blocks) in enumerate(STATIC_CASES):
        plan = sp.make_plan(m, n, k, isa=isa, a=a, b=b, beta=beta, bias=bias, **blocks)
        plans.append(f"static const fc_sgemm_plan plan{i} = {plan.c_init()};")
        # packed operands are packed in C from row-major storage
        cases.append(STATIC_CASE % {
            "i": i, "parts": parts, "epi": "relu" if epi else "NULL", "epi_on": epi,
            "at": int(a == "trans"), "bt": int(b == "trans"),
            "a_rs": k, "a_cs": 1, "b_rs": n, "b_cs": 1,
        })  # fmt: skip
    return STATIC_FRAME % {"plans": "\n".join(plans), "cases": "".join(cases)}


def build_and_run(cc: str, flags: list[str], tmp: Path, env=None) -> subprocess.CompletedProcess:
    probe = subprocess.run([cc, *flags, "-dM", "-E", "-"], input="", capture_output=True, text=True)
    isa = sp.isa_from_macros(probe.stdout)
    src, exe = tmp / "static.c", tmp / "static"
    src.write_text(static_program(isa))
    strict = ["-std=c99", "-Wall", "-Wextra", "-Werror"]
    res = subprocess.run([cc, *strict, *flags, f"-I{RUNTIME}", str(src), "-o", str(exe), "-lm"],
                         capture_output=True, text=True)  # fmt: skip
    assert res.returncode == 0, res.stderr[:4000]
    return subprocess.run([str(exe)], capture_output=True, text=True, env=env, timeout=120)


SANITIZE = ["-O1", "-g1", "-fno-omit-frame-pointer", "-fsanitize=address,undefined",
            "-fno-sanitize-recover=all"]  # fmt: skip
TARGETS = {"native": ["-march=native"], "scalar": ["-DFC_NO_VECTOR"], "default": []}


@pytest.mark.parametrize("flags", list(TARGETS.values()), ids=list(TARGETS))
def test_static_plans_under_sanitizers(tmp_path, flags):
    """`static const` plans (as generated code declares them), exact-size malloc'ed buffers,
    C packers, parts and epilogues, under AddressSanitizer and UndefinedBehaviorSanitizer."""
    probe = tmp_path / "probe.c"
    probe.write_text("int main(void) { return 0; }\n")
    made = subprocess.run([CC, *SANITIZE, str(probe), "-o", str(tmp_path / "probe")], capture_output=True)
    if made.returncode or subprocess.run([str(tmp_path / "probe")], capture_output=True).returncode:
        pytest.skip(f"{CC} cannot build or run programs with -fsanitize=address,undefined")
    env = {**os.environ, "ASAN_OPTIONS": "detect_leaks=0", "UBSAN_OPTIONS": "print_stacktrace=1"}
    res = build_and_run(CC, [*SANITIZE, *flags], tmp_path, env)
    assert res.returncode == 0 and not res.stderr, (res.stdout + res.stderr)[:4000]
    assert "failed 0" in res.stdout


@pytest.mark.parametrize("flags", [["-O3", "-march=native"], ["-O2", "-DFC_NO_VECTOR"], ["-O2"]],
                         ids=["native", "scalar", "default"])  # fmt: skip
def test_static_plans_with_clang(tmp_path, flags):
    """The header is warning-free under clang -std=c99 -Wall -Wextra -Werror and correct."""
    clang = shutil.which("clang")
    if clang is None:
        pytest.skip("clang is not installed")
    res = build_and_run(clang, flags, tmp_path)
    assert res.returncode == 0 and "failed 0" in res.stdout, (res.stdout + res.stderr)[:4000]


def test_static_plans_optimized(tmp_path):
    """gcc -O3 -march=native with constant plans (the bench's and generated code's build)."""
    res = build_and_run(CC, ["-O3", "-march=native"], tmp_path)
    assert res.returncode == 0 and "failed 0" in res.stdout, (res.stdout + res.stderr)[:4000]
