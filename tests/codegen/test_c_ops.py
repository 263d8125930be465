"""Every op through generated C (one shared library for all cases) against the interpreter."""

from __future__ import annotations

import numpy as np
import pytest

import graphdef as gd

pytestmark = pytest.mark.c

RNG = np.random.default_rng(42)
FLOATS = ("float32", "float64", "float16")
INTS = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")


def arr(shape, dtype, lo=-3.0, hi=3.0):
    if dtype == "bool":
        return RNG.random(shape) < 0.5
    if dtype in INTS:
        lo = 0 if dtype == "uint8" else int(lo) * 3
        return RNG.integers(lo, int(hi) * 3 + 1, shape).astype(dtype)
    return RNG.uniform(lo, hi, shape).astype(dtype)


def pos(shape, dtype):
    return arr(shape, dtype, 0.5, 3.0)


CASES: list[tuple[str, object, list[np.ndarray]]] = []


def case(cid, fn, *inputs):
    CASES.append((cid, fn, list(inputs)))


# elementwise, with broadcasting and every dtype each op takes
for dt in FLOATS + INTS:
    for op in ("add", "sub", "mul", "maximum", "minimum"):
        case(f"{op}-{dt}", getattr(gd, op), arr((2, 3, 4), dt), arr((3, 1), dt))
    case(f"div-{dt}", gd.div, arr((3, 4), dt), pos((4,), dt) if dt in FLOATS else arr((4,), dt) | 1)
    case(f"abs-sign-{dt}", lambda x: gd.sign(gd.abs(x)) + x, arr((5,), dt))
    case(
        f"compare-{dt}",
        lambda a, b: (
            gd.logical_or(gd.equal(a, b), gd.less(a, b)) & gd.greater_equal(a, b)
            | gd.less_equal(a, b) ^ gd.greater(a, b)
        ),
        arr((2, 3), dt),
        arr((3,), dt),
    )
    case(
        f"where-clip-{dt}",
        lambda c, a, b: gd.clip(gd.where(c, a, b), -2.5, 2.5),
        arr((2, 1), "bool"),
        arr((3,), dt),
        arr((2, 3), dt),
    )
    case(f"cast-to-{dt}", lambda x, dt=dt: gd.cast(x, dt), arr((7,), "float32", -100, 100))
    case(
        f"cast-from-{dt}",
        lambda x: gd.cast(x, "float32") + gd.cast(gd.cast(x, "bool"), "float32"),
        arr((7,), dt),
    )
for dt in ("int8", "int32", "int64", "float32", "float16"):
    case(f"neg-relu-{dt}", lambda x: gd.relu(gd.neg(x)), arr((6,), dt))
for dt in FLOATS:
    case(
        f"unary-{dt}",
        lambda x: gd.exp(x) + gd.log(x) + gd.sqrt(x) + gd.rsqrt(x) + gd.tanh(x) + gd.sigmoid(x) + gd.erf(x),
        pos((4, 3), dt),
    )
    case(
        f"activations-{dt}",
        lambda x: gd.leaky_relu(x, 0.2) + gd.elu(x, 0.5) + gd.gelu(x) + gd.gelu(x, "tanh"),
        arr((2, 5), dt),
    )
    case(f"pow-{dt}", gd.pow, pos((3, 2), dt), arr((2,), dt))
case("clip-inverted-f", lambda x: gd.clip(x, 1.0, -1.0), arr((5,), "float32"))
case("clip-inverted-i", lambda x: gd.clip(x, 2.5, -1.5), arr((5,), "int32"))
case("pow-int", gd.pow, arr((4,), "int32"), np.array([0, 1, 2, 3], np.int32))
case("logic", lambda a, b: gd.logical_not(gd.logical_xor(a, b)), arr((4,), "bool"), arr((2, 1), "bool"))

# linear algebra
for dt in FLOATS + ("int32", "int64", "int8"):
    case(f"matmul-{dt}", gd.matmul, arr((2, 1, 3, 4), dt), arr((3, 4, 2), dt))
case(
    "matmul-vec",
    lambda a, b, c: gd.matmul(a, b) + gd.matmul(b.T, c),
    arr((4,), "float32"),
    arr((4, 3), "float32"),
    arr((4,), "float32"),
)
for ta in (False, True):
    for tb in (False, True):
        case(
            f"gemm-{ta}-{tb}",
            lambda a, b, c, ta=ta, tb=tb: gd.gemm(a, b, c, 0.5, 2.0, ta, tb),
            arr((4, 3) if ta else (3, 4), "float32"),
            arr((5, 4) if tb else (4, 5), "float32"),
            arr((3, 1), "float32"),
        )
case(
    "gemm-int",
    lambda a, b, c: gd.gemm(a, b, c, 2.0, 3.0),
    arr((2, 3), "int32"),
    arr((3, 2), "int32"),
    arr((2,), "int32"),
)

# convolution and pooling
for dt in FLOATS:
    case(
        f"conv2d-{dt}",
        lambda x, w, b: gd.conv2d(x, w, b, stride=2, padding=(1, 0, 0, 1), dilation=(1, 2), groups=2),
        arr((1, 4, 7, 6), dt),
        arr((6, 2, 3, 2), dt),
        arr((6,), dt),
    )
case(
    "conv1d-groups",
    lambda x, w: gd.conv(x, w, group=3, pads=(1, 1)),
    arr((2, 6, 9), "float32"),
    arr((3, 2, 3), "float32"),
)
case(
    "conv3d",
    lambda x, w: gd.conv(x, w, strides=(1, 2, 1)),
    arr((1, 2, 4, 5, 3), "float32"),
    arr((2, 2, 2, 2, 2), "float32"),
)
case(
    "depthwise",
    lambda x, w: gd.conv2d(x, w, padding="same", groups=4),
    arr((1, 4, 5, 5), "float32"),
    arr((4, 1, 3, 3), "float32"),
)
for dt in FLOATS:
    case(
        f"conv_transpose-{dt}",
        lambda x, w, b: gd.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1),
        arr((1, 3, 4, 3), dt),
        arr((3, 2, 3, 3), dt),
        arr((2,), dt),
    )
for dt in FLOATS + INTS:
    case(
        f"max_pool-{dt}",
        lambda x: gd.max_pool(x, (3, 2), (2, 2), (1, 0, 1, 1), ceil_mode=True),
        arr((2, 2, 6, 5), dt),
    )
for dt in FLOATS:
    case(
        f"avg_pool-{dt}",
        lambda x: (
            gd.avg_pool2d(x, 3, 2, 1, count_include_pad=True)
            + gd.avg_pool2d(x, 3, 2, 1, ceil_mode=True)[:, :, :3, :3]
        ),
        arr((1, 2, 6, 6), dt),
    )
    case(
        f"pool_grads-{dt}",
        lambda x: gd.gradients(
            gd.reduce_sum(gd.max_pool2d(x, 2) * 3.0) + gd.reduce_sum(gd.avg_pool2d(x, 3, 1, 1)), [x]
        )[0],
        arr((1, 2, 4, 4), dt),
    )
for cid, xs, ws, kw in (
    ("3x3-pad", (2, 3, 9, 8), (5, 3, 3, 3), dict(pads=(1, 1, 1, 1))),
    ("1x1-direct", (1, 16, 5, 7), (24, 16, 1, 1), {}),
    ("1x1-stride", (1, 8, 6, 6), (4, 8, 1, 1), dict(strides=(2, 2))),
    ("grouped-dilated", (1, 6, 11, 9), (9, 2, 3, 2), dict(group=3, dilations=(2, 1), pads=(0, 1, 2, 0))),
    ("1d", (2, 4, 17), (6, 4, 5), dict(strides=(3,), pads=(2, 1))),
    ("3d", (1, 2, 5, 6, 4), (3, 2, 3, 2, 2), dict(pads=(1, 0, 1, 1, 0, 0))),
):
    w_const, b_const = arr(ws, "float32"), arr((ws[0],), "float32")
    case(
        f"conv-packed-{cid}",
        lambda x, w=w_const, b=b_const, kw=kw: gd.conv(x, gd.constant(w), gd.constant(b), **kw),
        arr(xs, "float32"),
    )
case(
    "dense-packed", lambda x: gd.matmul(x, gd.constant(arr((37, 29), "float32"))), arr((3, 5, 37), "float32")
)
case(
    "gemm-packed",
    lambda x: gd.gemm(
        x,
        gd.constant(arr((29, 37), "float32")),
        gd.constant(arr((29,), "float32")),
        alpha=0.5,
        beta=2.0,
        trans_b=True,
    ),
    arr((6, 37), "float32"),
)
case("global_pools", lambda x: gd.global_avg_pool(x) + gd.global_max_pool(x), arr((2, 3, 4, 5), "float32"))

# normalization, softmax
for dt in FLOATS:
    case(
        f"batch_norm-{dt}",
        lambda x, s, b, m, v: gd.batch_norm(x, s, b, m, v),
        arr((2, 3, 4), dt),
        arr((3,), dt),
        arr((3,), dt),
        arr((3,), dt),
        pos((3,), dt),
    )
    case(
        f"layer_norm-{dt}",
        lambda x, s, b: gd.layer_norm(x, s, b, axis=1),
        arr((2, 3, 4), dt),
        arr((3, 4), dt),
        arr((4,), dt),
    )
    case(f"softmax-{dt}", lambda x: gd.softmax(x, axis=1) + gd.log_softmax(x, axis=-1), arr((2, 5, 3), dt))
case("layer_norm-nobias", lambda x, s: gd.layer_norm(x, s), arr((3, 8), "float32"), arr((8,), "float32"))

# reductions
for dt in FLOATS + INTS:
    ops = (gd.reduce_sum, gd.reduce_max, gd.reduce_min, gd.reduce_prod) + (
        (gd.reduce_mean,) if dt in FLOATS else ()
    )
    for fn in ops:
        case(
            f"{fn.__name__}-{dt}",
            lambda x, fn=fn: fn(x, axes=(0, 2), keepdims=True),
            arr((2, 3, 4), dt, -1, 2),
        )
    case(
        f"argmax-{dt}",
        lambda x: (gd.argmax(x, axis=1), gd.argmin(x, axis=0, keepdims=True, select_last_index=True)),
        arr((3, 4), dt, -1, 1),
    )
case("reduce-all", lambda x: gd.reduce_sum(x) + gd.reduce_mean(x, axes=(1,)), arr((3, 4), "float32"))

# data movement
for dt in ("float32", "int8", "float16", "bool", "int64"):
    case(
        f"transpose-concat-{dt}",
        lambda x: gd.concat([gd.transpose(x, (2, 0, 1)), gd.transpose(x, (2, 1, 0))[:, :2]], axis=2),
        arr((2, 3, 4), dt),
    )
    case(f"slice-tile-{dt}", lambda x: gd.tile(x[::-1, 1:, ::2], (2, 1, 3)), arr((3, 4, 5), dt))
    case(f"expand-{dt}", lambda x: gd.expand(x, (2, 3, 4)), arr((3, 1), dt))
    case(f"split-{dt}", lambda x: gd.split(x, (1, 3), axis=1), arr((2, 4, 2), dt))
    for mode in ("constant", "reflect", "edge"):
        case(
            f"pad-{mode}-{dt}",
            lambda x, mode=mode: gd.pad(x, [1, -1, 2, 0, 1, 2], mode, 1.0),
            arr((3, 4, 5), dt),
        )
case(
    "reshape-family",
    lambda x: gd.flatten(gd.squeeze(gd.unsqueeze(gd.reshape(x, (4, 6)), 0))) * 2.0,
    arr((2, 3, 4), "float32"),
)
for idt in ("int64", "int32"):
    case(
        f"gather-{idt}",
        lambda d, i: gd.gather(d, i, axis=1),
        arr((3, 5, 2), "float32"),
        np.array([[0, -1], [4, 2]], idt),
    )
    case(
        f"scatter_add-{idt}",
        lambda d, i, u: gd.scatter_add(d, i, u, axis=0),
        arr((4, 3), "float32"),
        np.array([1, 1, -1], idt),
        arr((3, 3), "float32"),
    )
case("gather-bool", lambda d, i: gd.gather(d, i), arr((4, 2), "bool"), np.array([3, 0], "int64"))
for mode, ctm in (("nearest", "asymmetric"), ("linear", "half_pixel"), ("linear", "align_corners")):
    for dt in FLOATS:
        case(
            f"resize-{mode}-{ctm}-{dt}",
            lambda x, mode=mode, ctm=ctm: gd.resize(
                x, scales=(1, 1, 2, 1.5), mode=mode, coordinate_transformation_mode=ctm
            ),
            arr((1, 2, 3, 4), dt),
        )
case(
    "fill-identity", lambda x: gd.identity(x) + gd.fill((3,), 2.5) + gd.stop_gradient(x), arr((3,), "float32")
)


@pytest.mark.parametrize("cid", [c[0] for c in CASES])
def test_c_matches_interpreter(cid, built, c_outputs, tol):
    for name, g, w in c_outputs(built, cid):
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, **tol[w.dtype.name], err_msg=name)
        else:
            np.testing.assert_array_equal(g, w, err_msg=name)
