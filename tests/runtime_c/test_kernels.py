"""runtime_c kernels (gemm, norm, reduce, resize, index, copy) through cffi, each against the
graphdef numpy reference of the op it implements.

One C source includes every kernel header and adds a thin exported wrapper per kernel and
dtype (the kernels are ``static inline``), so the whole file builds one shared library.
Numpy views pass their own data pointer and element strides, so transposed, sliced, reversed
and broadcast operands come straight from numpy indexing. float16 travels as its uint16 bits.

``test_kernels_clean_under_sanitizers`` runs a slice of this file again in a subprocess with
the library built under -fsanitize=address,undefined (selected by FLOWC_KERNEL_SANITIZE).
"""

from __future__ import annotations

import math
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import graphdef as gd
from graphdef.ops.resize import resize_taps
from graphdef.ops.shape import slice_plan

FC_OK, FC_ERR_INDEX = 0, 3
# Set by test_kernels_clean_under_sanitizers for its subprocess: the extra compiler flags.
SANITIZE_FLAGS = tuple(os.environ.get("FLOWC_KERNEL_SANITIZE", "").split())

# suffix -> (numpy dtype, C storage type, C compute type FC_A)
DT = {
    "f16": ("float16", "uint16_t", "float"),
    "f32": ("float32", "float", "float"),
    "f64": ("float64", "double", "double"),
    "i8": ("int8", "int8_t", "int64_t"),
    "u8": ("uint8", "uint8_t", "uint64_t"),
    "i32": ("int32", "int32_t", "int64_t"),
    "i64": ("int64", "int64_t", "int64_t"),
}
FLOATS = ("f16", "f32", "f64")
INTS = ("i8", "u8", "i32", "i64")
ALL = FLOATS + INTS
BY_SIZE = ("i8", "f16", "f32", "f64")  # one dtype per element size 1, 2, 4, 8

_RED = "const {T} *x, {T} *y, long outer, long len, long inner"
_ARG = "const {T} *x, int64_t *y, long outer, long len, long inner, int select_last"
_SCATTER = "{T} *y, const {I} *idx, const {T} *upd, long n_idx, long outer, long dim, long inner"
KERNELS = [  # (name, with {s} for the dtype suffix; return type; parameters; dtypes)
    (
        "fc_gemm_{s}",
        "void",
        "long m, long n, long k, const {T} *a, long a_rs, long a_cs, const {T} *b, long b_rs, "
        "long b_cs, {T} *y, double alpha, const {T} *c, long c_rs, long c_cs, double beta",
        ALL,
    ),
    (
        "fc_batch_norm_{s}",
        "void",
        "const {T} *x, const {T} *scale, const {T} *bias, const {T} *mean, const {T} *var, "
        "{T} *y, long n, long c, long inner, double eps",
        FLOATS,
    ),
    (
        "fc_layer_norm_{s}",
        "void",
        "const {T} *x, const {T} *scale, const {T} *bias, {T} *y, long outer, long inner, double eps",
        FLOATS,
    ),
    ("fc_softmax_{s}", "void", _RED, FLOATS),
    ("fc_log_softmax_{s}", "void", _RED, FLOATS),
    *((f"fc_reduce_{op}_{{s}}", "void", _RED, ALL) for op in ("sum", "max", "min", "prod")),
    ("fc_reduce_mean_{s}", "void", _RED, FLOATS),
    ("fc_argmax_{s}", "void", _ARG, ALL),
    ("fc_argmin_{s}", "void", _ARG, ALL),
    (
        "fc_resize_axis_{s}",
        "void",
        "const {T} *x, {T} *y, long outer, long in_len, long out_len, long inner, "
        "const int32_t *i0, const int32_t *i1, const {A} *w",
        FLOATS,
    ),
    ("fc_scatter_add_{s}_i64", "int", _SCATTER.replace("{I}", "int64_t"), ALL),
    ("fc_scatter_add_{s}_i32", "int", _SCATTER.replace("{I}", "int32_t"), ALL),
    (
        "fc_gather_i64",
        "int",
        "void *y, const void *x, const int64_t *idx, long n_idx, long outer, long dim, long inner_bytes",
        None,
    ),
    (
        "fc_gather_i32",
        "int",
        "void *y, const void *x, const int32_t *idx, long n_idx, long outer, long dim, long inner_bytes",
        None,
    ),
    (
        "fc_copy_nd",
        "void",
        "void *y, const long *y_strides, const void *x, const long *x_strides, const long *dims, "
        "int rank, int elem_size",
        None,
    ),
    ("fc_fill", "void", "void *y, long count, const void *value, int elem_size", None),
    (
        "fc_pad_nd",
        "void",
        "void *y, const void *x, int rank, const long *out_dims, const long *x_strides, "
        "const long *const *src_index, const void *fill, int elem_size",
        None,
    ),
]
HEADERS = ("matmul", "norm", "reduce", "resize", "gather_axis", "copy")


def _sources() -> tuple[str, str]:
    """(cdef, C source): one exported ``t_<kernel>`` wrapper per kernel and dtype."""
    decls, defs = [], []
    for name, ret, params, sfxs in KERNELS:
        for s in sfxs or (None,):
            fn = name.format(s=s)
            p = params if s is None else params.format(T=DT[s][1], A=DT[s][2])
            args = ", ".join(a.split()[-1].lstrip("*") for a in p.split(","))
            body = f"{'return ' if ret != 'void' else ''}{fn}({args});"
            decls.append(f"{ret} t_{fn}({p});")
            defs.append(f"{ret} t_{fn}({p}) {{ {body} }}")
    includes = "".join(f'#include "kernels/{h}.h"\n' for h in HEADERS)
    return "\n".join(decls), includes + "\n".join(defs) + "\n"


@pytest.fixture(scope="module")
def k(c_lib):
    """The kernel library: ``k.fn(name)`` is the wrapper, ``k.p(array)`` a data pointer."""
    cdef, source = _sources()
    ffi, lib = c_lib(cdef, source, SANITIZE_FLAGS)

    def p(a):
        """Address of a's element 0 (of a view too, whatever its strides); None -> NULL."""
        return ffi.NULL if a is None else ffi.cast("void *", a.ctypes.data)

    def longs(values):
        return ffi.new("long[]", [int(v) for v in values] or [0])

    return SimpleNamespace(ffi=ffi, fn=lambda name: getattr(lib, "t_" + name), p=p, longs=longs)


# ----------------------------------------------------------------------------- helpers
RNG = np.random.default_rng(20240607)
# (rtol, atol) per float dtype; atol is scaled by the magnitude the test says it reaches.
TOL = {"f16": (2e-3, 2e-3), "f32": (2e-5, 2e-6), "f64": (1e-12, 1e-13)}


def npdt(sfx):
    return np.dtype(DT[sfx][0])


def rand(shape, sfx, lo=-2.0, hi=2.0):
    """Uniform floats in [lo, hi), or integers over the dtype's whole range (so sums wrap)."""
    dt = npdt(sfx)
    if dt.kind == "f":
        return RNG.uniform(lo, hi, shape).astype(dt)
    info = np.iinfo(dt)
    return RNG.integers(info.min, info.max, shape, dtype=dt, endpoint=True)


def small_ints(shape, sfx, hi=4):
    """Values in [0, hi) of any dtype: ties for argmax, exact float products."""
    return RNG.integers(0, hi, shape).astype(npdt(sfx))


def check(got, want, sfx, scale=1.0):
    """Floats within the dtype's tolerance (NaN matching NaN); integers bit for bit."""
    assert got.shape == want.shape and got.dtype == want.dtype
    if npdt(sfx).kind == "f":
        rtol, atol = TOL[sfx]
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol, atol * scale)
    else:
        np.testing.assert_array_equal(got, want)


def ref(fn, *arrays, **attrs):
    """Build ``fn(*placeholders, **attrs)`` in a fresh graph and run it on ``arrays``."""
    arrays = [np.array(a, order="C") for a in arrays]  # (ascontiguousarray makes 0-d 1-d)
    g = gd.Graph("ref")
    with g:
        xs = [gd.placeholder(f"in{i}", a.shape, a.dtype) for i, a in enumerate(arrays)]
        out = fn(*xs, **attrs)
    outs = list(out) if isinstance(out, tuple) else [out]
    values = gd.run(g, {f"in{i}": a for i, a in enumerate(arrays)}, outs)
    return tuple(values) if isinstance(out, tuple) else values[0]


def estrides(a):
    """Strides of a numpy array or view in elements (0 where broadcast, < 0 where reversed)."""
    return [s // a.itemsize for s in a.strides]


def contiguous_strides(shape):
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return out[::-1]


def split3(shape, axis):
    """(outer, len, inner) of shape around axis."""
    return math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1 :])


def full(shape, sfx, fill=0):
    return np.full(shape, fill, npdt(sfx))


# ----------------------------------------------------------------------------- gemm
def _gemm_case(variant, sfx, m, n, kk):
    """(a as stored, b as stored, c or None, attrs for gd.gemm, a and b as the kernel sees them)."""
    a = rand((m, kk), sfx)
    b = rand((kk, n), sfx)
    trans_a = trans_b = False
    c = None
    if variant == "trans":
        a, b, trans_a, trans_b = np.ascontiguousarray(a.T), np.ascontiguousarray(b.T), True, True
        c = rand((m, n), sfx)
    elif variant == "reversed":  # negative and non-unit strides
        a = rand((m, 2 * kk), sfx)[::-1, ::2]
        b = rand((kk, 3 * n), sfx)[:, ::-3]
        c = rand((m, n), sfx)[::-1, ::-1]
    elif variant == "bcast_c_row":
        c = rand((n,), sfx)
    elif variant == "bcast_c_col":
        c = rand((m, 1), sfx)
    elif variant == "bcast_c_scalar":
        c = rand((), sfx)
    elif variant == "bcast_ab":  # a repeats one row, b one column: strides 0
        a = np.broadcast_to(rand((1, kk), sfx), (m, kk))
        b = np.broadcast_to(rand((kk, 1), sfx), (kk, n))
    floats = npdt(sfx).kind == "f"
    attrs = {
        "alpha": 0.5 if floats and variant != "plain" else 1.0,
        "beta": 2.0 if floats and c is not None else 1.0,
        "trans_a": trans_a,
        "trans_b": trans_b,
    }
    return a, b, c, attrs, (a.T if trans_a else a), (b.T if trans_b else b)


@pytest.mark.parametrize("sfx", ALL)
@pytest.mark.parametrize(
    "variant", ["plain", "trans", "reversed", "bcast_c_row", "bcast_c_col", "bcast_c_scalar", "bcast_ab"]
)
def test_gemm_matches_gd_gemm(k, sfx, variant):
    gemm = k.fn(f"fc_gemm_{sfx}")
    for m, n, kk in ((1, 1, 1), (3, 4, 5), (7, 2, 9), (4, 3, 0), (0, 3, 2)):
        a, b, c, attrs, av, bv = _gemm_case(variant, sfx, m, n, kk)
        want = ref(gd.gemm, a, b, *(() if c is None else (c,)), **attrs)
        y = full((m, n), sfx, 7)
        cv = None if c is None else np.broadcast_to(c, (m, n))
        c_rs, c_cs = estrides(cv) if cv is not None else (0, 0)
        gemm(m, n, kk, k.p(av), *estrides(av), k.p(bv), *estrides(bv), k.p(y), attrs["alpha"],
             k.p(cv), c_rs, c_cs, attrs["beta"])  # fmt: skip
        check(y, want, sfx, scale=max(kk, 1) * 4)


def test_gemm_int_wraps_like_numpy(k):
    a = np.full((2, 3), 127, np.int8)
    b = np.full((3, 2), 127, np.int8)
    y = np.zeros((2, 2), np.int8)
    k.fn("fc_gemm_i8")(2, 2, 3, k.p(a), 3, 1, k.p(b), 2, 1, k.p(y), 1.0, k.ffi.NULL, 0, 0, 1.0)
    np.testing.assert_array_equal(y, np.matmul(a, b))  # 3 * 127 * 127 mod 256


def test_gemm_matches_gd_matmul_vector(k):
    a, b = rand((5, 6), "f32"), rand((6,), "f32")
    y = np.zeros(5, np.float32)
    k.fn("fc_gemm_f32")(5, 1, 6, k.p(a), 6, 1, k.p(b), 1, 0, k.p(y), 1.0, k.ffi.NULL, 0, 0, 1.0)
    check(y, ref(gd.matmul, a, b), "f32", scale=6)


# ----------------------------------------------------------------------------- normalization
@pytest.mark.parametrize("sfx", FLOATS)
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (1, 4), (3, 2, 7), (2, 1, 1)])
def test_batch_norm(k, sfx, shape):
    c = shape[1]
    x = rand(shape, sfx, -3, 3)
    params = [rand((c,), sfx), rand((c,), sfx), rand((c,), sfx), rand((c,), sfx, 0.1, 2.0)]
    want = ref(gd.batch_norm, x, *params, epsilon=1e-3)
    y = full(shape, sfx)
    n, _, inner = split3(shape, 1)
    k.fn(f"fc_batch_norm_{sfx}")(k.p(x), *map(k.p, params), k.p(y), n, c, inner, 1e-3)
    check(y, want, sfx, scale=10)


@pytest.mark.parametrize("sfx", FLOATS)
@pytest.mark.parametrize("shape,axis", [((2, 3, 8), -1), ((2, 3, 8), 1), ((5, 1), 1), ((1, 33), 0)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_layer_norm(k, sfx, shape, axis, with_bias):
    axis %= len(shape)
    norm = shape[axis:]
    x = rand(shape, sfx, -3, 3)
    scale, bias = rand(norm, sfx), rand(norm, sfx) if with_bias else None
    want = ref(gd.layer_norm, x, scale, *((bias,) if with_bias else ()), axis=axis, epsilon=1e-5)
    y = full(shape, sfx)
    outer, inner = math.prod(shape[:axis]), math.prod(norm)
    k.fn(f"fc_layer_norm_{sfx}")(k.p(x), k.p(scale), k.p(bias), k.p(y), outer, inner, 1e-5)
    check(y, want, sfx, scale=10)


def _softmax_input(shape, sfx, special):
    x = rand(shape, sfx, -5, 5)
    if special == "large":  # would overflow exp without the max shift
        x = (x.astype(np.float64) + (6e4 if sfx == "f16" else 1e4)).astype(npdt(sfx))
    elif special == "nan":
        x.flat[1] = np.nan  # first along its slice
        x.flat[13] = np.nan  # after numbers along its slice
    return x


@pytest.mark.parametrize("sfx", FLOATS)
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize(
    "shape,axis,special",
    [((2, 5), 1, None), ((3, 4, 6), 1, None), ((4, 3), 0, None), ((2, 70, 3), 2, None),
     ((1, 1), 1, None), ((2, 6), 1, "large"), ((3, 4, 2), 1, "nan")],
)  # fmt: skip
def test_softmax(k, sfx, op, shape, axis, special):
    x = _softmax_input(shape, sfx, special)
    want = ref(getattr(gd, op), x, axis=axis)
    y = full(shape, sfx)
    k.fn(f"fc_{op}_{sfx}")(k.p(x), k.p(y), *split3(shape, axis))
    check(y, want, sfx, scale=10)


def test_softmax_in_place(k):
    x = rand((3, 7), "f32")
    want = ref(gd.softmax, x, axis=1)
    k.fn("fc_softmax_f32")(k.p(x), k.p(x), 3, 7, 1)
    check(x, want, "f32")


# ----------------------------------------------------------------------------- reductions
REDUCE_SHAPES = [((2, 3, 4), 1), ((5, 7), 1), ((5, 7), 0), ((2, 3, 130), 1), ((3, 1, 2), 1), ((4,), 0)]


def _reduce_input(op, shape, sfx):
    if op == "prod" and npdt(sfx).kind == "f":  # magnitudes near 1: no overflow, same rounding
        return (rand(shape, sfx, 0.6, 1.6) * np.where(RNG.random(shape) < 0.3, -1, 1)).astype(npdt(sfx))
    return rand(shape, sfx, -4, 4)


@pytest.mark.parametrize(
    "op,sfx",
    [(op, s) for op in ("sum", "max", "min", "prod", "mean") for s in (FLOATS if op == "mean" else ALL)],
)
def test_reduce(k, op, sfx):
    fn = k.fn(f"fc_reduce_{op}_{sfx}")
    shapes = REDUCE_SHAPES + ([((2, 0, 3), 1), ((0,), 0)] if op in ("sum", "prod") else [])
    for shape, axis in shapes:
        x = _reduce_input(op, shape, sfx)
        want = ref(getattr(gd, f"reduce_{op}"), x, axes=(axis,))
        y = full(want.shape, sfx, 9)
        fn(k.p(x), k.p(y), *split3(shape, axis))
        check(y, want, sfx, scale=shape[axis] * 4)


@pytest.mark.parametrize("sfx", FLOATS)
@pytest.mark.parametrize("op", ["max", "min"])
def test_reduce_extremes_propagate_nan_and_inf(k, sfx, op):
    x = rand((3, 5, 2), sfx)
    x[0, 3, 0] = np.nan  # NaN in the middle
    x[1, 0, 1] = np.nan  # NaN first
    x[2, :, 0] = np.inf if op == "max" else -np.inf
    x[2, :, 1] = -np.inf if op == "max" else np.inf  # all the identity-like extreme
    want = ref(getattr(gd, f"reduce_{op}"), x, axes=(1,))
    y = full(want.shape, sfx)
    k.fn(f"fc_reduce_{op}_{sfx}")(k.p(x), k.p(y), 3, 5, 2)
    check(y, want, sfx)


@pytest.mark.parametrize("sfx", ALL)
@pytest.mark.parametrize("op", ["argmax", "argmin"])
@pytest.mark.parametrize("select_last", [False, True])
def test_arg_reductions(k, sfx, op, select_last):
    fn = k.fn(f"fc_{op}_{sfx}")
    for shape, axis in REDUCE_SHAPES + [((2, 9, 67), 1)]:
        x = small_ints(shape, sfx)  # many ties
        if sfx == "i8":
            x[..., :1] = -128
        want = ref(getattr(gd, op), x, axis=axis, select_last_index=select_last)
        y = np.full(want.shape, -7, np.int64)
        fn(k.p(x), k.p(y), *split3(shape, axis), int(select_last))
        np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("sfx", FLOATS)
@pytest.mark.parametrize("op", ["argmax", "argmin"])
@pytest.mark.parametrize("select_last", [False, True])
def test_arg_reductions_nan(k, sfx, op, select_last):
    x = small_ints((4, 6), sfx)
    x[0, [1, 4]] = np.nan
    x[1, 0] = np.nan
    x[2, 5] = np.nan
    x[3, :] = np.nan
    want = ref(getattr(gd, op), x, axis=1, select_last_index=select_last)
    y = np.zeros(4, np.int64)
    k.fn(f"fc_{op}_{sfx}")(k.p(x), k.p(y), 4, 6, 1, int(select_last))
    np.testing.assert_array_equal(y, want)


# ----------------------------------------------------------------------------- resize
RESIZE_MODES = [
    {"mode": "nearest", "coordinate_transformation_mode": "half_pixel", "nearest_mode": "round_prefer_floor"},
    {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
    {"mode": "nearest", "coordinate_transformation_mode": "align_corners", "nearest_mode": "ceil"},
    {"mode": "linear", "coordinate_transformation_mode": "half_pixel", "nearest_mode": "floor"},
    {"mode": "linear", "coordinate_transformation_mode": "align_corners", "nearest_mode": "floor"},
    {"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel", "nearest_mode": "floor"},
]


def _resize_axis(k, sfx, x, axis, out_len, attrs):
    """Run fc_resize_axis on one axis of x with the tables of resize_taps."""
    in_len = x.shape[axis]
    i0, i1, w = resize_taps(in_len, out_len, out_len / in_len, attrs)
    i0, i1 = i0.astype(np.int32), i1.astype(np.int32)
    w = w.astype(np.float64 if sfx == "f64" else np.float32)
    outer, _, inner = split3(x.shape, axis)
    y = full(x.shape[:axis] + (out_len,) + x.shape[axis + 1 :], sfx)
    k.fn(f"fc_resize_axis_{sfx}")(k.p(x), k.p(y), outer, in_len, out_len, inner, k.p(i0), k.p(i1), k.p(w))
    return y


@pytest.mark.parametrize("sfx", FLOATS)
@pytest.mark.parametrize(
    "attrs", RESIZE_MODES, ids=lambda a: f"{a['mode']}-{a['coordinate_transformation_mode']}"
)
@pytest.mark.parametrize("in_len,out_len", [(4, 8), (5, 3), (3, 7), (1, 4), (6, 1)])
def test_resize_axis(k, sfx, attrs, in_len, out_len):
    x = rand((2, in_len, 3), sfx)
    want = ref(gd.resize, x, sizes=(2, out_len, 3), **attrs)
    check(_resize_axis(k, sfx, x, 1, out_len, attrs), want, sfx, scale=2)


@pytest.mark.parametrize("sfx", FLOATS)
def test_resize_bilinear_is_two_axis_passes(k, sfx):
    attrs = RESIZE_MODES[3]
    x = rand((1, 2, 3, 5), sfx)
    want = ref(gd.resize, x, sizes=(1, 2, 7, 4), **attrs)
    y = _resize_axis(k, sfx, _resize_axis(k, sfx, x, 2, 7, attrs), 3, 4, attrs)
    check(y, want, sfx, scale=2)


def test_resize_nearest_keeps_infinities(k):
    """Nearest rows are copies: inf stays inf (the numpy reference blends, inf * 0 -> NaN)."""
    x = np.array([[1.0, np.inf, -np.inf]], np.float32)
    y = _resize_axis(k, "f32", x, 1, 6, RESIZE_MODES[0])
    np.testing.assert_array_equal(y, x[:, [0, 0, 1, 1, 2, 2]])


# ----------------------------------------------------------------------------- gather / scatter
GATHER_CASES = [  # (data shape, axis, indices)
    ((5, 3), 0, [0, 4, -1, 2, 2]),
    ((2, 6, 3), 1, [[5, -6], [0, 3]]),
    ((3, 4), 1, [3]),
    ((4,), 0, [-4, 3, 0]),
    ((2, 3, 2), 2, []),
]


@pytest.mark.parametrize("sfx", BY_SIZE)
@pytest.mark.parametrize("ity", ["int64", "int32"])
@pytest.mark.parametrize("shape,axis,indices", GATHER_CASES)
def test_gather(k, sfx, ity, shape, axis, indices):
    x = rand(shape, sfx, -50, 50)
    idx = np.array(indices, dtype=ity).reshape(np.shape(indices))
    want = ref(gd.gather, x, idx, axis=axis)
    y = full(want.shape, sfx)
    outer, dim, inner = split3(shape, axis)
    rc = k.fn(f"fc_gather_i{ity[3:]}")(k.p(y), k.p(x), k.p(idx), idx.size, outer, dim, inner * x.itemsize)
    assert rc == FC_OK
    np.testing.assert_array_equal(y.view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("ity", ["int64", "int32"])
@pytest.mark.parametrize("bad", [4, -5, 1000])
def test_gather_out_of_range_writes_nothing(k, ity, bad):
    x = rand((2, 4, 3), "f32")
    idx = np.array([1, bad, 0], ity)
    y = np.full((2, 3, 3), 5, np.float32)
    rc = k.fn(f"fc_gather_i{ity[3:]}")(k.p(y), k.p(x), k.p(idx), 3, 2, 4, 12)
    assert rc == FC_ERR_INDEX
    assert (y == 5).all()


@pytest.mark.parametrize("sfx", ALL)
@pytest.mark.parametrize("ity", ["int64", "int32"])
def test_scatter_add(k, sfx, ity):
    fn = k.fn(f"fc_scatter_add_{sfx}_i{ity[3:]}")
    cases = [((5, 3), 0, [1, 1, -1, 0, 1]), ((2, 4, 3), 1, [[3, -4], [0, 3]]), ((4,), 0, [2, 2, 2]),
             ((2, 3), 1, [])]  # fmt: skip
    for shape, axis, indices in cases:  # repeated indices accumulate
        data = rand(shape, sfx, -8, 8)
        idx = np.array(indices, dtype=ity).reshape(np.shape(indices))
        upd = rand(shape[:axis] + idx.shape + shape[axis + 1 :], sfx, -8, 8)
        want = ref(gd.scatter_add, data, idx, upd, axis=axis)
        y = data.copy()
        outer, dim, inner = split3(shape, axis)
        assert fn(k.p(y), k.p(idx), k.p(upd), idx.size, outer, dim, inner) == FC_OK
        check(y, want, sfx, scale=16)
    data, upd = rand((2, 3), sfx), rand((2, 2), sfx)
    for bad in (3, -4):
        y, idx = data.copy(), np.array([0, bad], ity)
        assert fn(k.p(y), k.p(idx), k.p(upd), 2, 2, 3, 1) == FC_ERR_INDEX
        np.testing.assert_array_equal(y, data)  # nothing written


# ----------------------------------------------------------------------------- copy_nd
def copy_nd(k, y, y_strides, x, x_strides, dims, y_off=0, x_off=0):
    """fc_copy_nd with pointers offset by y_off / x_off elements into y / x."""
    ffi = k.ffi
    yp = ffi.cast("char *", k.p(y)) + y_off * y.itemsize
    xp = ffi.cast("char *", k.p(x)) + x_off * x.itemsize
    k.fn("fc_copy_nd")(yp, k.longs(y_strides), xp, k.longs(x_strides), k.longs(dims), len(dims), x.itemsize)


def copy_view(k, x, shape=None):
    """A contiguous copy of the numpy view x made by fc_copy_nd from x's own strides."""
    y = np.empty(x.shape if shape is None else shape, x.dtype)
    copy_nd(k, y, contiguous_strides(x.shape), x, estrides(x), x.shape)
    return y


@pytest.mark.parametrize("sfx", BY_SIZE)
@pytest.mark.parametrize(
    "shape,perm",
    [((), ()), ((3,), (0,)), ((2, 3), (1, 0)), ((2, 3, 4), (2, 0, 1)), ((1, 4, 1, 3), (3, 1, 0, 2)),
     ((2, 1, 2, 3, 1, 2, 2, 3), (7, 0, 6, 1, 5, 2, 4, 3))],
)  # fmt: skip
def test_copy_nd_transpose(k, sfx, shape, perm):
    x = rand(shape, sfx, -50, 50)
    want = ref(gd.transpose, x, perm=perm)
    xs = contiguous_strides(shape)
    y = full(want.shape, sfx)
    copy_nd(k, y, contiguous_strides(want.shape), x, [xs[p] for p in perm], want.shape)
    np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("sfx", BY_SIZE)
@pytest.mark.parametrize(
    "shape,starts,ends,steps",
    [((10,), [1], [8], [3]), ((10,), [-1], [-11], [-1]), ((4, 7), [3, 6], [-5, 0], [-2, -3]),
     ((3, 5, 4), [0, 1, 3], [3, 4, 0], [1, 2, -1]), ((5, 4), [1, 0], [1, 4], [1, 1])],
)  # fmt: skip
def test_copy_nd_slice(k, sfx, shape, starts, ends, steps):
    x = rand(shape, sfx, -50, 50)
    axes = list(range(len(shape)))
    want = ref(gd.slice_, x, starts=starts, ends=ends, axes=axes, steps=steps)
    plan = slice_plan(shape, {"axes": axes, "starts": starts, "ends": ends, "steps": steps})
    xs = contiguous_strides(shape)
    y = full(want.shape, sfx)
    copy_nd(k, y, contiguous_strides(want.shape), x, [s * st for s, (_, st, _) in zip(xs, plan)],
            [c for _, _, c in plan], x_off=sum(s * start for s, (start, _, _) in zip(xs, plan)))  # fmt: skip
    np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("sfx", BY_SIZE)
@pytest.mark.parametrize(
    "shape,target", [((3, 1), (2, 3, 4)), ((), (2, 2)), ((1, 5), (3, 1)), ((2, 1, 3), (2, 4, 3))]
)
def test_copy_nd_expand(k, sfx, shape, target):
    x = rand(shape, sfx, -50, 50)
    want = ref(gd.expand, x, shape=target)
    padded = (1,) * (want.ndim - x.ndim) + shape
    xs = [0 if d == 1 else s for d, s in zip(padded, contiguous_strides(padded))]
    y = full(want.shape, sfx)
    copy_nd(k, y, contiguous_strides(want.shape), x, xs, want.shape)
    np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("sfx", BY_SIZE)
@pytest.mark.parametrize(
    "shape,reps", [((2, 3), (2, 3)), ((4,), (3,)), ((2, 1, 3), (1, 4, 2)), ((2, 3), (0, 2))]
)
def test_copy_nd_tile(k, sfx, shape, reps):
    x = rand(shape, sfx, -50, 50)
    want = ref(gd.tile, x, repeats=reps)
    # x as (r0, d0, r1, d1, ...) with stride 0 on each repeat axis; y in the same order is
    # exactly the row-major output.
    dims = [v for r, d in zip(reps, shape) for v in (r, d)]
    xs = [v for s in contiguous_strides(shape) for v in (0, s)]
    y = full(want.shape, sfx)
    copy_nd(k, y, contiguous_strides(dims), x, xs, dims)
    np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("sfx", BY_SIZE)
@pytest.mark.parametrize(
    "shapes,axis", [([(2, 3), (2, 1), (2, 4)], 1), ([(1, 3, 2), (2, 3, 2)], 0), ([(3, 2, 2)] * 3, 2)]
)
def test_copy_nd_concat_and_split(k, sfx, shapes, axis):
    xs = [rand(s, sfx, -50, 50) for s in shapes]
    want = ref(lambda *ts, axis: gd.concat(list(ts), axis=axis), *xs, axis=axis)
    big = contiguous_strides(want.shape)
    y = full(want.shape, sfx)
    at = 0
    for x in xs:  # concat: write each input into its block of y
        copy_nd(k, y, big, x, contiguous_strides(x.shape), x.shape, y_off=at * big[axis])
        at += x.shape[axis]
    np.testing.assert_array_equal(y, want)

    sizes = [s[axis] for s in shapes]
    parts = ref(gd.split, want, num_or_sizes=sizes, axis=axis)
    at = 0
    for part in parts:  # split: read each block of the whole
        got = full(part.shape, sfx)
        copy_nd(k, got, contiguous_strides(part.shape), y, big, part.shape, x_off=at * big[axis])
        np.testing.assert_array_equal(got, part)
        at += part.shape[axis]


def test_copy_nd_negative_output_strides_and_empty_dims(k):
    x = rand((3, 4), "f32")
    y = np.zeros((3, 4), np.float32)
    copy_nd(k, y, [-4, -1], x, [4, 1], [3, 4], y_off=11)  # y is x reversed on both axes
    np.testing.assert_array_equal(y, x[::-1, ::-1])
    copy_view(k, x[:0])  # an empty axis copies nothing (and reads nothing)
    np.testing.assert_array_equal(copy_view(k, np.broadcast_to(x[1], (2, 4))[:, ::-1]), [x[1, ::-1]] * 2)


# ----------------------------------------------------------------------------- fill / pad
@pytest.mark.parametrize("sfx", BY_SIZE)
@pytest.mark.parametrize("value", [0.0, -1.0, 3.5, np.nan])
def test_fill(k, sfx, value):
    v = np.array(value if npdt(sfx).kind == "f" else (0 if np.isnan(value) else value)).astype(npdt(sfx))
    for count in (0, 1, 13):
        y = full((count + 2,), sfx, 7)
        k.fn("fc_fill")(k.p(y), count, k.p(v), y.itemsize)
        want = np.concatenate([np.full(count, v), np.full(2, 7, npdt(sfx))])
        np.testing.assert_array_equal(y.view(f"u{y.itemsize}"), want.view(f"u{y.itemsize}"))


def pad_tables(shape, pads, mode):
    """Per axis, the input index each output position reads, or -1 for a constant pad;
    negative pads crop first, as graphdef's pad does."""
    rank, tables = len(shape), []
    for d, size in enumerate(shape):
        b, e = pads[d], pads[rank + d]
        lo, hi = max(-b, 0), size - max(-e, 0)  # the kept input range after cropping
        t = np.arange(size + b + e) - b  # input coordinate of each output position
        if mode == "constant":
            tables.append(np.where((t >= lo) & (t < hi), t, -1))
        elif mode == "edge":
            tables.append(np.clip(t, lo, hi - 1))
        else:  # reflect, without repeating the edge (one reflection suffices: pad < kept size)
            tables.append(np.where(t < lo, 2 * lo - t, np.where(t >= hi, 2 * (hi - 1) - t, t)))
    return tables


@pytest.mark.parametrize("sfx", BY_SIZE)
@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
@pytest.mark.parametrize(
    "shape,pads",
    [((5,), [2, 3]), ((3, 4), [1, 0, 2, 3]), ((4, 5), [-1, 2, 1, -2]), ((2, 3, 4), [0, 1, 2, 1, 0, -1]),
     ((6, 3), [-2, -1, -1, 0]), ((3, 3), [0, 0, 0, 0])],
)  # fmt: skip
def test_pad_nd(k, sfx, mode, shape, pads):
    x = rand(shape, sfx, -50, 50)
    want = ref(gd.pad, x, pads=pads, mode=mode, value=1.5)
    tables = [k.longs(t) for t in pad_tables(shape, pads, mode)]
    fill = np.array(1.5).astype(npdt(sfx))
    y = full(want.shape, sfx, 9)
    k.fn("fc_pad_nd")(k.p(y), k.p(x), len(shape), k.longs(want.shape), k.longs(contiguous_strides(shape)),
                      k.ffi.new("long *[]", tables), k.p(fill), x.itemsize)  # fmt: skip
    np.testing.assert_array_equal(y, want)


# ----------------------------------------------------------------------------- sanitizers
def _asan_runtime(cc: str) -> tuple[Path, tuple[str, ...]] | None:
    """(shared ASan runtime to preload, extra flags) for gcc or clang, or None."""
    version = subprocess.run([cc, "--version"], capture_output=True, text=True).stdout
    if "clang" in version:
        name, extra = f"libclang_rt.asan-{platform.machine()}.so", ("-shared-libasan",)
    else:
        name, extra = "libasan.so", ()
    found = subprocess.run([cc, f"-print-file-name={name}"], capture_output=True, text=True)
    path = Path(found.stdout.strip())
    return (path, extra) if found.returncode == 0 and path.is_absolute() and path.exists() else None


@pytest.mark.skipif(bool(SANITIZE_FLAGS), reason="already running under the sanitizers")
def test_kernels_clean_under_sanitizers():
    """Re-run this file's kernel tests (f16, f64, i8, u8, int32 indices, every copy use)
    against a library built with -fsanitize=address,undefined; any report aborts."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    found = _asan_runtime(cc)
    if found is None:
        pytest.skip(f"{cc} has no shared AddressSanitizer runtime to preload")
    runtime, extra = found
    flags = ("-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", *extra)
    env = {
        **os.environ,
        "FLOWC_KERNEL_SANITIZE": " ".join(flags),
        "LD_PRELOAD": str(runtime),  # ASan must come first into a Python that lacks it
        "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1",
        "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
    }
    root = Path(__file__).resolve().parents[2]
    cases = (
        "(f16 or f64 or i8 or u8 or int32 or transpose or slice or expand or fill or pad) and not sanitizers"
    )
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-x", "-s", "-p", "no:cacheprovider", __file__, "-k", cases],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    report = res.stderr
    for marker in ("ERROR: AddressSanitizer", "runtime error:"):
        if marker in report:
            report = report[report.index(marker) :]
            break
    assert res.returncode == 0, f"{res.stdout[-3000:]}\n{report[:4000]}"
    assert "passed" in res.stdout
