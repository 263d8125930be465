"""bitcast through generated C (one shared library for all cases) against the interpreter, bit
for bit: inputs, outputs, constants and arena values, equal and different element sizes."""

from __future__ import annotations

import numpy as np
import pytest

import graphdef as gd

pytestmark = pytest.mark.c

RNG = np.random.default_rng(5)


def raw(shape, dtype):
    """Every bit pattern (NaNs with payloads, infinities, subnormals) of dtype."""
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    return np.frombuffer(RNG.integers(0, 256, n, dtype=np.uint8).tobytes(), dtype=dtype).reshape(shape).copy()


def _abs_by_bits(x):
    sign_off = gd.bitwise_and(gd.bitcast(x, "int32"), 0x7FFFFFFF)
    return gd.bitcast(sign_off, "float32")


CASES = [
    ("f32_to_i32", lambda x: gd.bitcast(x, "int32"), [raw((3, 4), "float32")]),
    ("i32_to_f32", lambda x: gd.bitcast(x, "float32"), [raw((5,), "int32")]),
    ("f16_to_i16", lambda x: gd.bitcast(x, "int16"), [raw((2, 3), "float16")]),
    ("u64_to_f64_scalar", lambda x: gd.bitcast(x, "float64"), [raw((), "uint64")]),
    ("f64_to_bytes", lambda x: gd.bitcast(x, "uint8"), [raw((2, 3), "float64")]),
    ("bytes_to_f32_then_math", lambda x: gd.bitcast(x, "float32") * 2.0, [raw((4, 8), "uint8")]),
    ("abs_by_bits", _abs_by_bits, [RNG.standard_normal((3, 5)).astype(np.float32)]),
    (
        "arena_in_and_out",
        lambda x: gd.bitcast(gd.bitcast(x + 1, "uint16"), "int8") - 3,
        [raw((6, 2), "int16")],
    ),
    ("bool_in", lambda x: gd.bitcast(x, "int8"), [RNG.random(7) < 0.5]),
    ("bool_out", lambda x: gd.bitcast(x, "bool"), [raw((3,), "uint16")]),
    (
        "constant",
        lambda x: x + gd.bitcast(gd.constant(np.array([1.0, -0.0], np.float32)), "int32"),
        [raw((2,), "int32")],
    ),
    (
        "output_and_more",
        lambda x: (gd.bitcast(x, "uint32"), gd.bitcast(x, "uint32") / 3),
        [raw((4,), "int32")],
    ),
]


def _build(cid, fn, inputs):
    """The case with every output copied into one named out<i> (so no output is an input)."""
    g = gd.Graph("m")
    with g:
        xs = [gd.placeholder(f"in{i}", a.shape, a.dtype) for i, a in enumerate(inputs)]
        outs = fn(*xs)
        outs = outs if isinstance(outs, tuple) else (outs,)
        g.set_outputs(*[gd.identity(o, name=f"out{i}") for i, o in enumerate(outs)])
    return g


@pytest.fixture(scope="module")
def built(compile_cases):
    return compile_cases(CASES, graph=_build)


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize]) if a.dtype.kind == "f" else a


@pytest.mark.parametrize("cid", [c[0] for c in CASES])
def test_c_matches_interpreter_bit_for_bit(cid, built, c_outputs):
    for name, g, w in c_outputs(built, cid):
        np.testing.assert_array_equal(_bits(g), _bits(w), err_msg=name)


def test_abs_by_bits_is_abs(built):
    graph, model = built["abs_by_bits"]
    x = CASES[[c[0] for c in CASES].index("abs_by_bits")][2][0]
    np.testing.assert_array_equal(model(in0=x)["out0"], np.abs(x))
