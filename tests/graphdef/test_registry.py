"""Every op record is complete; its test cases (examples) are checked by test_examples.py,
test_gradients.py and, for the C backend, tests/codegen/test_c_examples.py."""

from __future__ import annotations

import pytest

import graphdef as gd
from graphdef.registry import COMMUNICATION, COMPOSITE, REQUIRED, Attr, NotDifferentiable
from graphdef.registry import KINDS as OP_KINDS

KINDS = {"int", "float", "bool", "str", "dtype", "ints", "floats", "any", "graph"}


@pytest.mark.parametrize("name", sorted(gd.all_ops()))
def test_op_record_is_complete(name):
    op = gd.get_op(name)
    assert op.name == name
    assert op.doc, "every op says what it computes"
    assert callable(op.infer) and callable(op.ref)
    assert callable(op.grad) or isinstance(op.grad, NotDifferentiable), "gradient rule or explicit marker"
    assert all(isinstance(i, str) and i.rstrip("?*").isidentifier() for i in op.inputs)
    variadic = [i for i in op.inputs if i.endswith("*")]
    assert len(variadic) <= 1 and (not variadic or op.inputs[-1].endswith("*"))
    optional = [i.endswith("?") for i in op.inputs]
    assert optional == sorted(optional), "optional inputs come last"
    for attr_name, spec in op.attrs.items():
        assert isinstance(spec, Attr) and spec.kind in KINDS, attr_name
        if spec.default is not REQUIRED and spec.default is not None:
            assert spec.coerce(name, attr_name, spec.default) == spec.default
    assert op.kind in OP_KINDS
    assert op.kind != COMPOSITE or op.decompose is not None, "a composite op decomposes"


def test_zoo_uses_every_op(zoo):
    """All but communication (send, recv: only codegen.partition makes them; tests/mpi) and the
    pieces of loops and branches (only codegen.control makes them; tests/codegen/test_control.py)."""
    computing = {name for name, op in gd.all_ops().items() if op.kind != COMMUNICATION and not op.control}
    assert {n.op for n in zoo.nodes} == computing


def test_registering_an_op_twice_is_refused():
    op = gd.get_op("relu")
    with pytest.raises(ValueError, match="registered twice"):
        gd.registry.register(op)


def test_unknown_op():
    with pytest.raises(gd.UnsupportedError, match="unknown op 'nope'"):
        gd.get_op("nope")
