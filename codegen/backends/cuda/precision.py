"""``--precision``: the arithmetic of a CUDA build.

- ``fp32``: float32 everywhere, products on CUDA cores (the exact path);
- ``tf32``: float32 storage; products and convolutions on tensor cores with their inputs
  rounded to TF32 (10-bit mantissa), sums in float32;
- ``bf16``: float32 storage; products on tensor cores with inputs rounded to bfloat16, sums
  in float32 (activations stay float32: graphdef has no bfloat16 type);
- ``fp16``: the graph's float32 values become float16 (``to_half``: weights converted at
  compile time, activations stored as float16); products on tensor cores, sums in float32;
  softmax, layer norm, pooling averages and reductions accumulate in float32 (the kernels'
  compute type of float16). The inputs and outputs keep float32: a cast at each end.
"""

from __future__ import annotations

import numpy as np

from graphdef.builder import Tensor, apply, default_graph_scope
from graphdef.errors import FlowcError
from graphdef.ir import Graph
from graphdef.ops.elementwise import cast

from ...passes import Rebuild

PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
TENSOR_CORE = {"tf32": "tf32", "bf16": "bf16", "fp16": "f16"}  # runtime_c/cuda/mma.cuh kinds
MIN_SM = {"tf32": 80, "bf16": 80, "fp16": 70}


def check(precision: str, sm, training: bool = False) -> None:
    """A precision the architectures ``sm`` run; a training binary's (``training``) keeps its
    variables in float32."""
    if training and precision == "fp16":
        raise FlowcError(
            "--train with --target cuda keeps the variables in float32: --precision fp16 would store them "
            "as float16; use fp32, tf32 or bf16"
        )
    if precision not in PRECISIONS:
        raise FlowcError(f"--precision {precision!r}: one of {', '.join(PRECISIONS)}")
    low = [v for v in sm if v < MIN_SM.get(precision, 0)]
    if low:
        raise FlowcError(
            f"--precision {precision} runs on tensor cores of sm_{MIN_SM[precision]} and newer; "
            f"--sm lists {', '.join(f'sm_{v}' for v in low)}"
        )


def _half(value):
    """``value`` (attributes, a fused program's instructions) with every "float32" "float16"."""
    if isinstance(value, str):
        return "float16" if value == "float32" else value
    if isinstance(value, (tuple, list)):
        return type(value)(_half(v) for v in value)
    if isinstance(value, dict):
        return {k: _half(v) for k, v in value.items()}
    return value


def _half_attrs(attrs) -> dict:
    return {k: _half(v) for k, v in attrs.items()}


def to_half(graph: Graph) -> Graph:
    """Every float32 value of ``graph`` as float16, the inputs and outputs still float32."""
    if graph.variables:
        raise FlowcError(
            f"--precision fp16 converts inference graphs; graph '{graph.name}' has variables "
            f"({', '.join(sorted(graph.variables)[:3])}): compile it with fp32, tf32 or bf16"
        )
    rb = Rebuild(graph)
    for node in graph.nodes:
        floats = any(t.dtype == "float32" for t in node.outputs)
        if node.op == "placeholder":
            rb.keep(node)
            if floats:
                with default_graph_scope(rb.new):
                    rb.bind(node, [cast(Tensor(rb.new, rb.refs[node.ref(0)]), "float16").ref])
        elif node.op == "constant" and floats:
            rb.constant(node, np.asarray(graph.constants[node.name]).astype(np.float16))
        elif floats or any(Tensor(rb.new, rb.refs[r]).type != graph.type_of(r) for r in node.inputs):
            attrs = _half_attrs(node.attrs)
            rb.replace(node, lambda ins, op=node.op, attrs=attrs: _outputs(apply(op, ins, None, **attrs)))
        else:
            rb.keep(node)
    for r in graph.declared_outputs:  # the interface keeps float32, and its names
        if graph.type_of(r).dtype == "float32":
            single = len(graph.node(r.node).outputs) == 1 and r.node not in rb.new
            with default_graph_scope(rb.new):
                rb.refs[r] = cast(Tensor(rb.new, rb.refs[r]), "float32", name=r.node if single else None).ref
    return rb.finish()


def _outputs(made) -> tuple:
    return made if isinstance(made, tuple) else (made,)
