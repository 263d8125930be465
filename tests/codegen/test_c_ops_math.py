"""Integer mod by zero in generated C: the run reports it, as the interpreter does. The cases
of the ops of graphdef/ops/math.py (every dtype, the ONNX edge cases of mod, shifts past the
bit width, values beyond an inverse function's domain, specials of the rounding ops) are their
examples, tests/codegen/test_c_examples.py."""

from __future__ import annotations

import numpy as np
import pytest

import codegen
import graphdef as gd

pytestmark = pytest.mark.c

INTS = ("int8", "uint8", "int32", "int64")


@pytest.fixture(scope="module")
def mod_models():
    graphs = []
    for dt in INTS:
        for fmod in (False, True):
            g = gd.Graph(f"modzero-{dt}-{fmod}")
            with g:
                a = gd.placeholder("a", (3,), dt)
                b = gd.placeholder("b", (3,), dt)
                g.set_outputs(gd.mod(a, b, fmod=fmod) + a)
            graphs.append((f"z_{dt}_{int(fmod)}", g))
    return dict(zip([n for n, _ in graphs], codegen.compile_many(graphs)))


@pytest.mark.parametrize("dt", INTS)
@pytest.mark.parametrize("fmod", [False, True])
def test_integer_mod_by_zero_is_reported(dt, fmod, mod_models):
    m = mod_models[f"z_{dt}_{int(fmod)}"]
    (ok,) = m(a=np.array([5, 6, 7], dt), b=np.array([2, 4, 3], dt)).values()
    assert ok.tolist() == [6, 8, 8]
    with pytest.raises(gd.ExecutionError, match="division by zero"):
        m(a=np.array([5, 6, 7], dt), b=np.array([2, 0, 3], dt))
