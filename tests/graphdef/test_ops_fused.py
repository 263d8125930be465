"""The fused op: a program of elementwise ops, checked against doing them one by one."""

from __future__ import annotations

import numpy as np
import pytest

import graphdef as gd

PROGRAM = (
    ("mul", (0, 1), ()),  # in0 * in1
    ("fill", (), (("dtype", "float32"), ("shape", ()), ("value", 0.5))),  # 0.5
    ("add", (3, 4), ()),  # + 0.5
    ("leaky_relu", (5,), (("alpha", 0.1),)),
    ("greater", (6, 2), ()),  # > in2
    ("where", (7, 6, 2), ()),
)


def test_fused_program_matches_the_ops_one_by_one(rng, run_op):
    a = rng.standard_normal((2, 3)).astype(np.float32)
    b = rng.standard_normal((3,)).astype(np.float32)
    c = rng.standard_normal((2, 1)).astype(np.float32)
    got = run_op(lambda x, y, z: gd.apply("fused", [x, y, z], program=PROGRAM), a, b, c)
    h = a * b + np.float32(0.5)
    h = np.where(h > 0, h, np.float32(0.1) * h)
    np.testing.assert_allclose(got, np.where(h > c, h, c), rtol=1e-6)


def test_fused_program_types_are_checked():
    with gd.Graph("bad"):
        x = gd.placeholder("x", (2,))
        with pytest.raises(gd.ShapeError, match="node 'bad' \\(op fused"):
            gd.apply("fused", [x], program=(("logical_not", (0,), ()),), name="bad")
