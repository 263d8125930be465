"""Converters for ONNX control flow (If, Loop, Scan) and optional tensors.

flowc compiles static shapes and a straight-line schedule, so control flow is resolved at
import time: the subgraphs are converted into the graph being built by
``OnnxNode.subgraph`` (outer names visible, inputs bound, outputs returned).

- If: a condition known at import inlines the chosen branch only. A run-time condition
  converts both branches and selects each output with ``where``; the branches must then give
  outputs of identical shapes and dtypes and hold no stateful op. (Both branches run, so an
  op that checks its data, such as a gather, reports an error for the untaken branch too.)
- Loop: unrolled when the trip count and the condition are known at import (the body's
  condition output may turn false at a known iteration); carried values flow from one
  iteration to the next and scan outputs are stacked on a new axis 0.
- Scan: unrolled over the static scan length, with input and output axes and directions
  (opsets 9+), or the batch-major form of opset 8.
- OptionalHasElement / OptionalGetElement / Optional on tensor values; sequences and maps,
  and empty optionals, are not flowc values.

Example: a Loop with trip count 3 carrying y and scanning y_out becomes three copies of the
body, y -> y1 -> y2 -> y3, and concat(unsqueeze(y1), unsqueeze(y2), unsqueeze(y3)).
"""

from __future__ import annotations

import math

import numpy as np

from .. import dtypes
from ..builder import Tensor, constant
from ..errors import FlowcError
from ..ops import elementwise as E
from ..ops import shape as S
from ..registry import get_op
from .importer import converter, onnx_dtype, value_source

MAX_UNROLL = 10_000  # iterations: a longer loop is refused rather than unrolled


def _t(v) -> Tensor:
    return v if isinstance(v, Tensor) else constant(v)


def _shape(v) -> tuple[int, ...]:
    return tuple(v.shape)


def _dtype(v) -> str:
    return v.dtype if isinstance(v, Tensor) else dtypes.as_dtype(v.dtype)


def _describe(v) -> str:
    return f"{_dtype(v)}{list(_shape(v))}"


def _index(v, i: int, axis: int):
    """v[..., i, ...] on ``axis`` (the axis removed)."""
    if isinstance(v, np.ndarray):
        return np.take(v, i, axis=axis)
    shape = _shape(v)
    part = S.slice_(v, [i], [i + 1], axes=[axis]) if shape[axis] > 1 else v
    return S.reshape(part, shape[:axis] + shape[axis + 1 :])


def _stack(node, items: list, axis: int, what: str):
    """Stack equally shaped values on a new ``axis``."""
    first = items[0]
    for t, v in enumerate(items[1:], 1):
        if _shape(v) != _shape(first) or _dtype(v) != _dtype(first):
            raise node.unsupported(
                f"{what} is {_describe(first)} in iteration 0 but {_describe(v)} in iteration {t}; "
                "the values of a scan output must all have one shape"
            )
    if all(isinstance(v, np.ndarray) for v in items):
        return np.stack(items, axis=axis)
    shape = _shape(first)
    lifted = [S.reshape(_t(v), shape[:axis] + (1,) + shape[axis:]) for v in items]
    return lifted[0] if len(lifted) == 1 else S.concat(lifted, axis=axis)


def _flag(node, v, what: str) -> bool:
    """A condition known at import as a Python bool."""
    if v.size != 1:
        raise node.unsupported(f"{what} has {v.size} elements, not 1")
    return bool(v.reshape(-1)[0])


def _norm_axis(node, axis: int, rank: int, what: str) -> int:
    if not -rank <= axis < rank:
        raise node.unsupported(f"{what} {axis} is out of range for rank {rank}")
    return axis % rank


# ----------------------------------------------------------------------------- If


@converter("If", 1)
def _if(node):
    cond = node.inputs[0]
    if isinstance(cond, np.ndarray):
        branch = "then_branch" if _flag(node, cond, "the condition") else "else_branch"
        return node.subgraph(branch, [])
    if math.prod(cond.shape) != 1:
        raise node.unsupported(f"the condition has shape {list(cond.shape)}, not one element")
    graph = cond.graph
    start = len(graph.nodes)
    try:
        then = node.subgraph("then_branch", [])
        other = node.subgraph("else_branch", [])
    except FlowcError as e:
        raise type(e)(
            f"{e}; the condition{value_source(cond)} is only known at run time, so flowc imports both "
            "branches"
        ) from None
    if len(then) != len(other):
        raise node.unsupported(f"then_branch gives {len(then)} output(s), else_branch {len(other)}")
    impure = sorted({n.op for n in graph.nodes[start:] if get_op(n.op).stateful})
    if impure:
        raise node.unsupported(
            f"the condition is only known at run time and a branch holds stateful ops "
            f"({', '.join(impure)}): flowc computes both branches and selects, which needs pure branches"
        )
    for i, (a, b) in enumerate(zip(then, other)):
        if _shape(a) != _shape(b):
            raise node.unsupported(
                f"branches differ in shape: output shape depends on input values (output {i}: "
                f"then {_describe(a)}, else {_describe(b)}; the condition{value_source(cond)} is "
                "only known at run time)"
            )
        if _dtype(a) != _dtype(b):
            raise node.unsupported(
                f"branches differ in dtype (output {i}: then {_describe(a)}, else {_describe(b)})"
            )
    flag = S.reshape(cond, ()) if cond.shape != () else cond
    if flag.dtype != "bool":
        flag = E.cast(flag, "bool")
    return [a if _same(a, b) else E.where(flag, _t(a), _t(b)) for a, b in zip(then, other)]


def _same(a, b) -> bool:
    """Both branches give this very value (one Tensor, or equal arrays bit for bit)."""
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return a.tobytes() == b.tobytes()
    return a is b


# ----------------------------------------------------------------------------- Loop


def _iterations_unknown(node, value, what: str):
    return node.unsupported(
        f"the number of iterations depends on input values: {what} is only known at run time"
        f"{value_source(value)}, and flowc unrolls loops at import"
    )


@converter("Loop", 1)
def _loop(node):
    body = node.attr("body")
    carried = list(node.inputs[2:])
    n = len(carried)
    if body is None or len(body.input) != 2 + n or len(body.output) < 1 + n:
        got = (len(body.input), len(body.output)) if body is not None else (0, 0)
        raise node.unsupported(
            f"the body takes {got[0]} input(s) and gives {got[1]} output(s); a Loop with {n} carried "
            f"value(s) needs {2 + n} inputs and at least {1 + n} outputs"
        )
    k = len(body.output) - 1 - n
    trip = cond = None
    if node.has(0):
        if not isinstance(node.inputs[0], np.ndarray):
            raise _iterations_unknown(node, node.inputs[0], "the trip count M")
        if node.inputs[0].size != 1:
            raise node.unsupported(f"the trip count M has {node.inputs[0].size} elements, not 1")
        trip = int(node.inputs[0].reshape(-1)[0])
    if node.has(1):
        if not isinstance(node.inputs[1], np.ndarray):
            raise _iterations_unknown(node, node.inputs[1], "the condition input")
        cond = _flag(node, node.inputs[1], "the condition input")
    if trip is None and cond is None:
        raise node.unsupported("the Loop has neither a trip count nor a condition: it never ends")
    keep = True if cond is None else cond
    it, scans = 0, [[] for _ in range(k)]
    while keep and (trip is None or it < trip):
        if it >= MAX_UNROLL:
            raise node.unsupported(
                f"the loop runs more than {MAX_UNROLL} iterations; flowc unrolls loops at import"
            )
        outs = node.subgraph(
            "body", [np.array(it, np.int64), np.array(keep), *carried], f"body (iteration {it})"
        )
        carried = outs[1 : 1 + n]
        for j in range(k):
            scans[j].append(outs[1 + n + j])
        it += 1
        if trip is not None and it >= trip:
            break  # the trip count ends the loop whatever the condition says
        c = outs[0]
        if not isinstance(c, np.ndarray):
            raise _iterations_unknown(node, c, f"the body's condition output after iteration {it - 1}")
        keep = _flag(node, c, "the body's condition output")
        if not keep and cond is None:
            # the spec ignores the condition output when the Loop has no condition input;
            # onnxruntime stops on it: refuse rather than pick one
            raise node.unsupported(
                f"the body's condition output turns false after iteration {it - 1} but the Loop has no "
                "condition input (the ONNX spec ignores it there, onnxruntime stops): ambiguous, refused"
            )
    out = list(carried)
    for j, items in enumerate(scans):
        if not items:
            out.append(_empty_scan(node, body.output[1 + n + j]))
        else:
            out.append(_stack(node, items, 0, f"scan output {j}"))
    return out


def _empty_scan(node, vi):
    """The scan output of a loop that runs no iteration: shape [0, ...] from the body's declared type."""
    tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
    dims = list(tt.shape.dim) if tt is not None and tt.HasField("shape") else None
    if dims is None or not all(d.HasField("dim_value") for d in dims):
        raise node.unsupported(
            f"the loop runs no iteration and the body does not declare a static shape for scan output "
            f"'{vi.name}'"
        )
    dtype = onnx_dtype(tt.elem_type, f"{node.where()} scan output '{vi.name}'")
    return np.zeros((0, *(int(d.dim_value) for d in dims)), dtypes.np_dtype(dtype))


# ----------------------------------------------------------------------------- Scan


def _scan_common(node, states, scans, in_axes, in_dirs, out_axes, out_dirs):
    """One unrolled scan: returns final states and stacked scan outputs."""
    body = node.attr("body")
    n, m = len(states), len(scans)
    if body is None or len(body.input) != n + m or len(body.output) < n:
        raise node.unsupported(
            f"the body must take {n + m} inputs (states, then scan elements) and give at least {n} outputs"
        )
    k = len(body.output) - n
    axes = [_norm_axis(node, a, len(_shape(x)), "scan_input_axes") for a, x in zip(in_axes, scans)]
    lengths = {_shape(x)[a] for a, x in zip(axes, scans)}
    if len(lengths) != 1:
        raise node.unsupported(f"the scan inputs have different lengths {sorted(lengths)}")
    length = lengths.pop()
    if length == 0 and k:
        raise node.unsupported("the scan length is 0 and the shapes of the scan outputs are unknown")
    if length > MAX_UNROLL:
        raise node.unsupported(
            f"the scan runs {length} iterations, more than {MAX_UNROLL}; flowc unrolls scans"
        )
    columns = [[] for _ in range(k)]
    for t in range(length):
        elems = [_index(x, length - 1 - t if d else t, a) for x, a, d in zip(scans, axes, in_dirs)]
        outs = node.subgraph("body", [*states, *elems], f"body (iteration {t})")
        states = outs[:n]
        for j in range(k):
            columns[j].append(outs[n + j])
    results = []
    for j, items in enumerate(columns):
        if out_dirs[j]:
            items = items[::-1]  # prepended: the last iteration's value comes first
        rank = len(_shape(items[0])) + 1
        axis = _norm_axis(node, out_axes[j], rank, "scan_output_axes")
        results.append(_stack(node, items, axis, f"scan output {j}"))
    return list(states), results


def _flags(node, name: str, count: int, what: str) -> list[int]:
    values = node.attr(name)
    values = [0] * count if values is None else list(values)
    if len(values) != count:
        raise node.unsupported(f"{name} has {len(values)} entries for {count} {what}")
    return values


@converter("Scan", 9)
def _scan9(node):
    m = node.attr("num_scan_inputs")
    values = list(node.inputs)
    if not m or m > len(values) or any(v is None for v in values):
        raise node.unsupported(f"num_scan_inputs={m} does not fit {len(values)} inputs")
    states, scans = values[: len(values) - m], values[len(values) - m :]
    body = node.attr("body")
    k = max(len(body.output) - len(states), 0) if body is not None else 0
    in_axes = _flags(node, "scan_input_axes", m, "scan inputs")
    in_dirs = _flags(node, "scan_input_directions", m, "scan inputs")
    out_axes = _flags(node, "scan_output_axes", k, "scan outputs")
    out_dirs = _flags(node, "scan_output_directions", k, "scan outputs")
    final, stacked = _scan_common(node, states, scans, in_axes, in_dirs, out_axes, out_dirs)
    return final + stacked


@converter("Scan", 8)
def _scan8(node):
    """Opset 8: axis 0 of every input is a batch, axis 1 the sequence; the body runs per batch."""
    m = node.attr("num_scan_inputs")
    values = list(node.inputs[1:])
    if not m or m > len(values) or any(v is None for v in values):
        raise node.unsupported(f"num_scan_inputs={m} does not fit {len(values)} inputs")
    states, scans = values[: len(values) - m], values[len(values) - m :]
    for i, v in enumerate(states + scans):
        if len(_shape(v)) < 1 + (i >= len(states)):
            raise node.unsupported(f"input {_describe(v)} lacks the batch (and sequence) axes of opset 8")
    batch = {_shape(v)[0] for v in states + scans}
    if len(batch) != 1:
        raise node.unsupported(f"the inputs have different batch sizes {sorted(batch)}")
    batch = batch.pop()
    seq = _shape(scans[0])[1]
    if batch * seq > MAX_UNROLL:
        raise node.unsupported(
            f"the scan runs {batch} x {seq} iterations, more than {MAX_UNROLL}; flowc unrolls scans"
        )
    if node.has(0):
        lens = node.const(0, "(sequence_lens) ")
        if np.any(lens != seq):
            raise node.unsupported(
                f"sequence_lens {lens.tolist()} differ from the sequence length {seq}: variable-length "
                "scans are not supported"
            )
    dirs = _flags(node, "directions", m, "scan inputs")
    body = node.attr("body")
    k = max(len(body.output) - len(states), 0) if body is not None else 0
    finals, outs = [], []
    for b in range(batch):
        f, o = _scan_common(
            node,
            [_index(s, b, 0) for s in states],
            [_index(x, b, 0) for x in scans],
            [0] * m,
            dirs,
            [0] * k,
            [0] * k,
        )
        finals.append(f)
        outs.append(o)
    stack = [_stack(node, [row[i] for row in finals], 0, f"final state {i}") for i in range(len(states))]
    return stack + [_stack(node, [row[j] for row in outs], 0, f"scan output {j}") for j in range(k)]


# ----------------------------------------------------------------------------- optional


@converter("OptionalHasElement", 15)
def _optional_has_element(node):
    return np.array(node.has(0))


@converter("OptionalGetElement", 15)
def _optional_get_element(node):
    if not node.has(0):
        raise node.unsupported("the optional value is empty")
    return node.inputs[0]


@converter("Optional", 15)
def _optional(node):
    if not node.has(0):
        raise node.unsupported(
            "an empty optional (Optional without an input) is not supported: flowc values are tensors"
        )
    return node.inputs[0]
