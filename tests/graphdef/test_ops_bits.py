"""bitcast against the bytes of the input, reassembled independently of numpy's .view."""

from __future__ import annotations

import struct

import numpy as np
import pytest

import graphdef as gd

# struct format of each dtype, little endian (the byte order ONNX and flowc's targets use)
FMT = {
    "float16": "e",
    "float32": "f",
    "float64": "d",
    "int8": "b",
    "uint8": "B",
    "int16": "h",
    "uint16": "H",
    "int32": "i",
    "uint32": "I",
    "int64": "q",
    "uint64": "Q",
    "bool": "?",
}
TARGETS = [d for d in FMT if d != "bool"]


BITS = {"float16": "H", "float32": "I", "float64": "Q"}  # floats compared by their bit patterns


def _bytes(a: np.ndarray) -> bytes:
    """The little-endian bytes of a, element by element, through struct."""
    fmt = BITS.get(a.dtype.name, FMT[a.dtype.name])
    return b"".join(struct.pack("<" + fmt, v) for v in _bits(a))


def _expected(raw: bytes, dtype: str) -> list:
    """raw read as dtype, through struct (floats as their bit patterns)."""
    fmt = BITS.get(dtype, FMT[dtype])
    size = struct.calcsize(fmt)
    return [struct.unpack("<" + fmt, raw[i : i + size])[0] for i in range(0, len(raw), size)]


def _bits(a: np.ndarray) -> list:
    """Values as comparable numbers: floats by their bit patterns (NaN == NaN, -0 != 0)."""
    if a.dtype.kind != "f":
        return a.reshape(-1).tolist()
    unsigned = {2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize]
    return a.reshape(-1).view(unsigned).tolist()


def _source(dtype: str, shape, rng) -> np.ndarray:
    if dtype == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    raw = rng.integers(0, 256, int(np.prod(shape)) * np.dtype(dtype).itemsize, dtype=np.uint8)
    return np.frombuffer(raw.tobytes(), dtype=dtype).reshape(shape).copy()  # every bit pattern, NaNs too


@pytest.mark.parametrize("src", list(FMT))
@pytest.mark.parametrize("dst", TARGETS)
def test_every_pair_reinterprets_the_bytes(src, dst, rng, run_op):
    a, b = np.dtype(src).itemsize, np.dtype(dst).itemsize
    shape = (2, 3, 8 // a * max(a, b) // min(a, b) if a != b else 5)
    x = _source(src, shape, rng)
    y = run_op(gd.bitcast, x, dtype=dst)
    assert y.dtype == np.dtype(dst)
    assert y.shape == shape[:-1] + (shape[-1] * a // b,)
    assert _bits(y) == _expected(_bytes(x), dst)


def test_same_size_keeps_the_shape_even_for_scalars(run_op):
    y = run_op(gd.bitcast, np.array(1.0, np.float32), dtype="int32")
    assert y.shape == () and int(y) == 0x3F800000
    y = run_op(gd.bitcast, np.array([[-1, 2]], np.int16), dtype="uint16")
    assert y.shape == (1, 2) and y.tolist() == [[65535, 2]]


def test_sizes_change_the_last_axis(run_op):
    x = np.array([[1.0, -2.0], [0.5, 0.0]], np.float32)
    y = run_op(gd.bitcast, x, dtype="uint8")
    assert y.shape == (2, 8)
    assert y[0].tolist() == [0, 0, 0x80, 0x3F, 0, 0, 0, 0xC0]
    back = run_op(gd.bitcast, y, dtype="float64")
    assert back.shape == (2, 1)
    assert _bits(back) == _expected(_bytes(x), "float64")


def test_empty_tensors(run_op):
    y = run_op(gd.bitcast, np.zeros((3, 0), np.float64), dtype="int16")
    assert y.shape == (3, 0) and y.dtype == np.int16


def test_to_bool_makes_every_nonzero_byte_true(run_op):
    x = np.array([0.0, 1.0, -0.0], np.float32)
    y = run_op(gd.bitcast, x, dtype="bool")
    assert y.dtype == np.bool_ and y.shape == (12,)
    assert y.tolist() == [b != 0 for b in _bytes(x)]
    same = run_op(gd.bitcast, np.array([0, 7, 1], np.uint8), dtype="bool")
    assert same.tolist() == [False, True, True]


def test_the_op_itself_never_makes_bool():
    g = gd.Graph("t")
    with g:
        x = gd.placeholder("x", (4,), "uint8")
        with pytest.raises(gd.FlowcError, match="'to' must be one of"):
            gd.apply("bitcast", [x], to="bool")


@pytest.mark.parametrize(
    "shape, src, dst, words",
    [
        ((), "float32", "float64", "scalar float32 cannot be viewed as float64"),
        ((3, 3), "uint8", "int32", "not a multiple of int32's 4 bytes"),
        ((2, 5), "int16", "float32", "not a multiple"),
    ],
)
def test_sizes_that_do_not_divide_are_refused(shape, src, dst, words):
    g = gd.Graph("t")
    with g:
        x = gd.placeholder("x", shape, src)
        with pytest.raises(gd.ShapeError, match=words):
            gd.bitcast(x, dst)


def test_gradients_stop_at_a_bitcast():
    g = gd.Graph("t")
    with g:
        w = gd.variable("w", np.ones(3, np.float32))
        loss = gd.reduce_sum(gd.cast(gd.bitcast(w, "int32"), "float32") + w)
        (dw,) = gd.gradients(loss, [w])
    (got,) = gd.run(g, {}, [dw])
    assert got.tolist() == [1.0, 1.0, 1.0]  # only the direct path


def test_constant_folding_keeps_the_bits():

    g = gd.Graph("t")
    with g:
        c = gd.constant(np.array([np.nan, -0.0], np.float32))
        gd.bitcast(c, "uint32", name="y")
    from codegen import pipeline

    folded = pipeline.optimize(g)
    (y,) = gd.run(folded, {}, ["y"])
    assert y.tolist() == [0x7FC00000, 0x80000000]
