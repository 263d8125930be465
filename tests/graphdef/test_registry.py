"""Every op record is complete, and every op is exercised by the tests."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import graphdef as gd
from graphdef.registry import COMPOSITE, REQUIRED, Attr, NotDifferentiable
from graphdef.registry import KINDS as OP_KINDS

HERE = Path(__file__).parent
KINDS = {"int", "float", "bool", "str", "dtype", "ints", "floats", "any"}


def _declared(name: str) -> set[str]:
    """Union of the set literals assigned to ``name`` in this folder's test modules."""
    out: set[str] = set()
    for path in HERE.glob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
                out |= ast.literal_eval(node.value)
    return out


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


def test_every_op_has_a_forward_test():
    missing = set(gd.all_ops()) - _declared("OPS_TESTED")
    assert not missing, f"ops without a test against numpy: {sorted(missing)}"


def test_every_differentiable_op_has_a_gradient_check():
    differentiable = {n for n, op in gd.all_ops().items() if callable(op.grad)}
    missing = differentiable - _declared("GRADS_TESTED")
    assert not missing, f"ops whose gradient rule is not checked numerically: {sorted(missing)}"


def test_zoo_uses_every_op(zoo):
    assert {n.op for n in zoo.nodes} == set(gd.all_ops())


def test_registering_an_op_twice_is_refused():
    op = gd.get_op("relu")
    with pytest.raises(ValueError, match="registered twice"):
        gd.registry.register(op)


def test_unknown_op():
    with pytest.raises(gd.UnsupportedError, match="unknown op 'nope'"):
        gd.get_op("nope")
