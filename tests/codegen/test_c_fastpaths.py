"""The float32 fast paths (depthwise conv, pooling, softmax, layer norm, sums and means over
contiguous rows) against the interpreter,
built three ways: -march=native, portable (no -march) and with FC_NO_VECTOR (plain C99).

Shapes are chosen so that vector loops have tails (widths not multiples of 4, 8 or 16) and
planes smaller than one vector, and borders and pads of every kind occur.
"""

from __future__ import annotations

import numpy as np
import pytest

import graphdef as gd

pytestmark = pytest.mark.c

RNG = np.random.default_rng(7)


def arr(shape, lo=-3.0, hi=3.0, dtype="float32"):
    return RNG.uniform(lo, hi, shape).astype(dtype)


CASES: list[tuple[str, object, list[np.ndarray]]] = []


def case(cid, fn, *inputs):
    CASES.append((cid, fn, list(inputs)))


# depthwise conv: (x shape, kernel, conv keywords, multiplier, bias)
for cid, xs, k, kw, mult, bias in (
    ("k3-s1-same", (2, 3, 9, 13), (3, 3), dict(pads=(1, 1, 1, 1)), 1, True),
    ("k3-s2", (1, 4, 17, 19), (3, 3), dict(strides=(2, 2), pads=(1, 1, 1, 1)), 1, False),
    ("k5-s2", (1, 3, 23, 21), (5, 5), dict(strides=(2, 2), pads=(2, 2, 2, 2)), 1, True),
    ("k5-s1-small", (1, 5, 7, 7), (5, 5), dict(pads=(2, 2, 2, 2)), 1, True),
    ("k3-dil2", (1, 2, 12, 35), (3, 3), dict(dilations=(2, 2), pads=(2, 2, 2, 2)), 1, True),
    ("asym-pads", (1, 3, 10, 11), (3, 2), dict(pads=(0, 1, 2, 0), strides=(1, 2)), 1, True),
    ("no-pad-s3", (1, 2, 16, 40), (3, 3), dict(strides=(3, 3)), 1, False),
    ("dil2-s2", (1, 2, 15, 33), (3, 3), dict(strides=(2, 2), dilations=(2, 2), pads=(1, 2, 3, 0)), 1, True),
    ("mult2", (2, 3, 8, 9), (3, 3), dict(pads=(1, 1, 1, 1)), 2, True),
    ("tiny", (1, 2, 2, 3), (3, 3), dict(pads=(1, 1, 1, 1)), 1, True),
    ("1x1", (1, 4, 5, 6), (1, 1), {}, 1, True),
    ("1d", (2, 3, 37), (5,), dict(pads=(2, 1), strides=(2,)), 1, True),
    ("k7-wide", (1, 2, 9, 70), (7, 7), dict(pads=(3, 3, 3, 3)), 1, True),
    # stride 1 over rows of 4 vectors or more: straight from the input rows (kernels/conv.h)
    ("s1-wide-131", (1, 3, 5, 131), (3, 3), dict(pads=(1, 1, 1, 1)), 1, True),
    ("s1-wide-k5", (2, 2, 4, 100), (5, 5), dict(pads=(2, 2, 2, 2)), 2, False),
    ("s1-wide-valid", (1, 2, 6, 90), (3, 3), {}, 1, True),
    ("s1-wide-asym", (1, 2, 3, 77), (3, 4), dict(pads=(2, 0, 0, 3)), 1, True),
):
    c = xs[1]
    ws = (c * mult, 1) + k
    w_c = arr(ws)
    b_c = arr((c * mult,)) if bias else None
    case(
        f"dw-const-{cid}",
        lambda x, w=w_c, b=b_c, kw=kw, c=c: gd.conv(
            x, gd.constant(w), None if b is None else gd.constant(b), group=c, **kw
        ),
        arr(xs),
    )
case(
    "dw-runtime-weights",
    lambda x, w, b: gd.conv(x, w, b, group=4, strides=(2, 1), pads=(1, 0, 1, 2)),
    arr((1, 4, 11, 10)),
    arr((4, 1, 3, 3)),
    arr((4,)),
)
for dt in ("float64", "float16"):  # the generic kernel, unchanged
    case(
        f"dw-{dt}",
        lambda x, w: gd.conv(x, w, group=3, pads=(1, 1, 1, 1)),
        arr((1, 3, 6, 7), dtype=dt),
        arr((3, 1, 3, 3), dtype=dt),
    )


# pooling: max (with NaN planes and -inf) and average, odd sizes, every pad and stride kind
for cid, xs, kw in (
    ("k3-s2-p1", (2, 3, 17, 23), dict(kernel_shape=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1))),
    ("k2-s2", (1, 4, 9, 11), dict(kernel_shape=(2, 2), strides=(2, 2))),
    ("k3-s1-p1", (1, 3, 5, 37), dict(kernel_shape=(3, 3), pads=(1, 1, 1, 1))),
    ("ceil", (1, 2, 10, 13), dict(kernel_shape=(3, 2), strides=(2, 3), pads=(0, 1, 1, 0), ceil_mode=True)),
    ("dil2", (1, 2, 12, 19), dict(kernel_shape=(3, 3), dilations=(2, 2), pads=(2, 1, 2, 1))),
    ("k5-s3", (1, 2, 20, 20), dict(kernel_shape=(5, 5), strides=(3, 3), pads=(2, 2, 2, 2))),
    ("1d", (2, 3, 29), dict(kernel_shape=(4,), strides=(2,), pads=(1, 2))),
):
    x = arr(xs)
    case(f"max_pool-{cid}", lambda x, kw=kw: gd.max_pool(x, **kw), x)
    for inc in (False, True):
        case(
            f"avg_pool-{cid}-{inc}",
            lambda x, kw=kw, inc=inc: gd.avg_pool(x, count_include_pad=inc, **kw),
            x,
        )
x = arr((2, 2, 9, 10))
x[0, 1, 3, 4] = np.nan
x[1, 0, 0, 0] = -np.inf
x[1, 1, 2:5, 2:5] = -np.inf
case("max_pool-nan-inf", lambda x: gd.max_pool(x, (3, 3), (2, 2), (1, 1, 1, 1)), x)
x64 = arr((1, 2, 7, 9), dtype="float64")
case("max_pool-float64", lambda x: gd.max_pool(x, (3, 3), (2, 2), (1, 1, 1, 1)), x64)
# 2x2 windows at stride 2 (kernels/pool.h fc_pool_is_2x2): ties (the first cell wins), NaN, -inf,
# odd sizes (a last row and column no window covers), and the gradient's -0
x = np.round(arr((2, 3, 9, 11)))
x[0, 0, 0, 1] = np.nan
x[0, 1, 2, 2:4] = np.nan
x[1, 2, 4:6, 4:6] = -np.inf
gy = np.round(arr((2, 3, 4, 5)))
gy[0, 2] = -0.0
case("max_pool-2x2-ties", lambda x: gd.max_pool(x, (2, 2), (2, 2)), x)
case(
    "max_pool_grad-2x2-ties",
    lambda x, gy: gd.gradients(gd.reduce_sum(gd.max_pool(x, (2, 2), (2, 2)) * gy), [x])[0],
    x,
    gy,
)


# softmax and log_softmax along the last axis and across inner positions; special slices
for cid, xs, axis in (
    ("last-3", (4, 3), -1),
    ("last-37", (2, 3, 37), -1),
    ("last-128", (3, 128), -1),
    ("ax1-inner-35", (2, 5, 7, 5), 1),
    ("ax0-inner-48", (6, 48), 0),
    ("ax1-len1", (2, 1, 20), 1),
):
    x = arr(xs, -20.0, 20.0)
    case(f"softmax-{cid}", lambda x, axis=axis: (gd.softmax(x, axis), gd.log_softmax(x, axis)), x)
x = arr((6, 40), -5.0, 5.0)
x[0, 3] = np.nan
x[1, 7] = np.inf
x[2, :] = -np.inf
x[3, 5] = -np.inf
x[4, :20] = -200.0  # exp underflows to 0
case("softmax-special-rows", lambda x: (gd.softmax(x, -1), gd.log_softmax(x, -1)), x)
case("softmax-special-cols", lambda x: (gd.softmax(x, 0), gd.log_softmax(x, 0)), x.T.copy())
case("softmax-float64", lambda x: gd.softmax(x, 1), arr((3, 5, 17), dtype="float64"))

# layer norm: odd lengths, with and without bias, normalized over one or two axes
for cid, xs, axis, bias in (
    ("768", (5, 768), -1, True),
    ("37", (3, 4, 37), -1, False),
    ("axis1", (2, 5, 9), 1, True),
    ("3", (7, 3), -1, True),
):
    norm = xs[axis:] if axis >= 0 else xs[axis:]
    s_c, b_c = arr(norm), arr(norm)
    case(
        f"layer_norm-{cid}",
        lambda x, s=s_c, b=b_c, axis=axis, bias=bias: gd.layer_norm(
            x, gd.constant(s), gd.constant(b) if bias else None, axis=axis
        ),
        arr(xs, -4.0, 6.0),
    )

# sums and means over contiguous rows (the vector-accumulator kernel from 16 values on):
# lengths around the 4-vector step, a global average pool, values of both signs and sizes
for cid, xs, axes in (
    ("gap-56", (1, 5, 56, 56), (2, 3)),
    ("row-16", (3, 16), (1,)),
    ("row-67", (4, 67), (1,)),
    ("row-257", (2, 257), (1,)),
    ("all-1000", (1000,), (0,)),
):
    x = arr(xs, -1e3, 1e3)
    case(f"rows-{cid}", lambda x, axes=axes: (gd.reduce_mean(x, axes), gd.reduce_sum(x, axes)), x)

BUILDS = {"native": {}, "portable": dict(portable=True), "scalar": dict(flags=("-DFC_NO_VECTOR",))}


@pytest.fixture(scope="module")
def built(compile_cases):
    return {how: compile_cases(CASES, **kw) for how, kw in BUILDS.items()}


@pytest.mark.parametrize("how", list(BUILDS))
@pytest.mark.parametrize("cid", [c[0] for c in CASES])
def test_fast_path_matches_interpreter(cid, how, built, c_outputs, tol):
    for name, g, w in c_outputs(built[how], cid):
        t = dict(tol[w.dtype.name])
        if cid.startswith("dw") and w.dtype == np.float32:
            t["atol"] = 2e-5  # up to 49 products of size ~9 summed in another order
        np.testing.assert_allclose(g, w, **t, err_msg=name, equal_nan=True)


def test_depthwise_reaches_fast_kernel():
    """A float32 depthwise conv renders the fc_dwconv_f32 call, a float64 one the generic one."""
    from codegen import pipeline

    for dt, fn in (("float32", "fc_dwconv_f32"), ("float64", "fc_conv_f64")):
        with gd.Graph("dw") as g:
            x = gd.placeholder("x", (1, 3, 8, 8), dt)
            g.set_outputs(gd.conv(x, gd.constant(arr((3, 1, 3, 3), dtype=dt)), group=3, pads=(1, 1, 1, 1)))
        sources = pipeline.run(g, pipeline.Options(name="dw")).sources
        text = "".join(v for v in sources.files.values() if isinstance(v, str))
        assert f"{fn}(" in text


def test_row_sums_reach_vector_kernel():
    """float32 sums and means over contiguous rows of 16 or more render the rows kernel;
    shorter rows and other axes the generic loop."""
    from codegen import pipeline

    for shape, axes, rows in (((2, 64), (1,), True), ((2, 8), (1,), False), ((64, 2), (0,), False)):
        with gd.Graph("r") as g:
            x = gd.placeholder("x", shape)
            g.set_outputs(gd.reduce_mean(x, axes), gd.reduce_sum(x, axes))
        text = "".join(v for v in pipeline.run(g, pipeline.Options(name="r")).sources.files.values()
                       if isinstance(v, str))  # fmt: skip
        assert ("fc_reduce_mean_rows_f32(" in text and "fc_reduce_sum_rows_f32(" in text) == rows
