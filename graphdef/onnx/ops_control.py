"""Converters for ONNX control flow (If, Loop, Scan) and optional tensors.

Control flow becomes flowc's own loops and branches (graphdef/ops/control.py), which the C
backend compiles into real C loops and branches: the subgraphs are converted by
``OnnxNode.subgraph`` (outer names visible, inputs bound, outputs returned) inside the
functions that ``gd.cond`` and ``control.loop`` trace into their subgraphs.

- If: a condition known at import inlines the chosen branch only. A run-time condition makes
  a ``cond`` node: both branches are imported, only the taken one runs (a gather out of range
  in the other one is no error). The branches must give outputs of identical shapes and
  dtypes; an output both give identically (one outer value, or equal constants) is taken as
  it is, so a value known at import stays known.
- Loop: ``for (i = 0; i < M && cond; ++i) { cond, vars, scans = body(i, cond, vars) }``, the
  condition carried as a loop variable; M and the condition may be run-time values. When the
  Loop has no condition input, flowc stops on the body's condition output as onnxruntime does
  (the spec ignores it there; one known at import to turn false is refused as ambiguous).
  A scan output has one row per possible iteration: M when M is known at import, else the
  ``loop_bound`` the user gives (``load_onnx(..., loop_bound=N)``, ``--loop-bound N``), which
  a run-time trip count may not exceed (an error at run time, in the interpreter and in the C
  code). The ONNX output's first dimension is then that bound, not the trip count: rows past
  the last iteration are zeros. A loop whose condition the importer can compute (from the
  iteration number and import-time values) runs exactly as often as that says.
- Scan: a loop over the static scan length; iteration i reads row i of each scan input (row
  length-1-i when reversed) and stacks the scan outputs, which are then reversed and moved to
  their output axis as the attributes say (opsets 9+); the batch-major form of opset 8 is a
  loop over the batch around that loop.
- Unrolling stays for short loops whose length is known at import (see UNROLL_NODES), and for
  loops of known length whose body a compiled loop cannot hold (a carried value that changes
  shape from one iteration to the next; an op that needs the iteration number at import, such
  as a Slice by it), up to MAX_IMPORT_ITERATIONS; with a run-time length such a body is
  refused, naming what to fix. ``flowc inspect`` prints a note for each Loop and Scan saying
  which it became and why (the graph's ``notes``).
- OptionalHasElement / OptionalGetElement / Optional on tensor values; sequences and maps,
  and empty optionals, are not flowc values.

Example: a Loop with trip count 3 carrying y and scanning y_out (a body of 2 nodes) is
unrolled: three copies of the body, y -> y1 -> y2 -> y3, and concat(unsqueeze(y1), ...). With
trip count 1000, or a trip count that is a model input, it becomes one ``while_loop`` node
whose body is the converted ONNX body, the same code whatever the count.
"""

from __future__ import annotations

import math

import numpy as np

from .. import dtypes
from ..builder import Tensor, constant
from ..errors import FlowcError
from ..ops import control as C
from ..ops import elementwise as E
from ..ops import shape as S
from .importer import _NONDETERMINISTIC, _all_nodes, _subgraphs, converter, onnx_dtype, value_source

# A Loop or Scan whose trip count is known at import is unrolled when iterations x body nodes
# (nested subgraphs counted) is at most this: a few copies of a small body cost less than a
# loop's copies of its carried values and its bookkeeping, and every value stays static (an
# iteration number known at import folds the slices that read with it). Longer loops are
# compiled as loops, their code the same whatever the count.
UNROLL_NODES = 64
# The most iterations the importer runs of a loop's condition (or unrolls of a loop whose body
# a compiled loop cannot hold)
MAX_IMPORT_ITERATIONS = 10_000
# A trip count known at import at least this large bounds nothing useful (exporters write
# INT64_MAX for a while loop): a loop with such a count and scan outputs needs loop_bound
UNBOUNDED_TRIP = 2**31 - 1


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


def _bool_scalar(node, v, what: str):
    """A one-element condition as a bool scalar (a Tensor, or an array known at import)."""
    if math.prod(_shape(v)) != 1:
        raise node.unsupported(f"{what} has shape {list(_shape(v))}, not one element")
    if isinstance(v, np.ndarray):
        return np.array(bool(v.reshape(-1)[0]))
    v = S.reshape(v, ()) if v.shape != () else v
    return v if v.dtype == "bool" else E.cast(v, "bool")


def _norm_axis(node, axis: int, rank: int, what: str) -> int:
    if not -rank <= axis < rank:
        raise node.unsupported(f"{what} {axis} is out of range for rank {rank}")
    return axis % rank


def _body_nodes(g) -> int:
    """The nodes of a subgraph, those of its own subgraphs counted."""
    return sum(1 for _ in _all_nodes(g))


def _note(node, text: str) -> None:
    """A line for ``flowc inspect`` (the graph's notes), once however often the node converts."""
    node.note(f"control flow: {node.where()}: {text}")


def _check_carried(node, k: int, name: str, before, after) -> None:
    if _shape(before) != _shape(after) or _dtype(before) != _dtype(after):
        raise node.unsupported(
            f"{name} {k} enters the loop as {_describe(before)} but the body gives {_describe(after)}: "
            "a compiled loop keeps the type of its values"
        )


def _compile_or_unroll(node, compiled, unroll, runtime: list):
    """``compiled()``; when the body cannot be compiled as a loop (it needs the iteration number
    or a scanned value at import, or a carried value changes shape), ``unroll(error)`` if the
    loop's length is known at import, else that error with what is not: ``runtime`` lists
    (what, value) of the trip count and condition when they are run-time values."""
    try:
        return compiled()
    except FlowcError as e:
        if runtime:
            which = " and ".join(f"{what}{value_source(v)}" for what, v in runtime)
            raise type(e)(
                f"{e}; flowc unrolls such a loop when its length is known at import, and {which} "
                f"{'is' if len(runtime) == 1 else 'are'} only known at run time"
            ) from None
        failed = e
    why = str(failed).removeprefix(node.where()).removeprefix(":").strip()
    _note(node, f"unrolled: its body cannot be compiled as a loop ({why})")
    return unroll(failed)


# ----------------------------------------------------------------------------- If


@converter("If", 1)
def _if(node):
    cond = node.inputs[0]
    if isinstance(cond, np.ndarray):
        branch = "then_branch" if _flag(node, cond, "the condition") else "else_branch"
        return node.subgraph(branch, [])
    flag = _bool_scalar(node, cond, "the condition")
    made: dict[str, list] = {}

    def branch(attr: str) -> list:
        try:
            made[attr] = node.subgraph(attr, [])
        except FlowcError as e:
            raise type(e)(
                f"{e}; the condition{value_source(cond)} is only known at run time, so flowc imports both "
                "branches"
            ) from None
        return list(made[attr])

    def other() -> list:
        out = branch("else_branch")
        _check_branches(node, cond, made["then_branch"], out)
        return out

    picked = C.cond(flag, lambda: branch("then_branch"), other)
    # a value both branches give identically needs no branch (and stays known at import)
    return [a if _same(a, b) else p for a, b, p in zip(made["then_branch"], made["else_branch"], picked)]


def _check_branches(node, cond, then: list, other: list) -> None:
    if len(then) != len(other):
        raise node.unsupported(f"then_branch gives {len(then)} output(s), else_branch {len(other)}")
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


def _same(a, b) -> bool:
    """Both branches give this very value (one Tensor, or equal arrays bit for bit)."""
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    return a is b


# ----------------------------------------------------------------------------- Loop


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
    trip = keep = m = c = None  # trip count and condition: known at import (trip, keep), or at run time
    if node.has(0):
        v = node.inputs[0]
        if math.prod(_shape(v)) != 1:
            raise node.unsupported(f"the trip count M has shape {list(_shape(v))}, not one element")
        if isinstance(v, np.ndarray):
            trip = max(int(v.reshape(-1)[0]), 0)
        else:
            m = S.reshape(v, ()) if v.shape != () else v
            m = m if m.dtype == "int64" else E.cast(m, "int64")
    if node.has(1):
        v = node.inputs[1]
        if isinstance(v, np.ndarray):
            keep = _flag(node, v, "the condition input")
        else:
            c = _bool_scalar(node, v, "the condition input")
    if not node.has(0) and not node.has(1):
        raise node.unsupported("the Loop has neither a trip count nor a condition: it never ends")
    if keep is False:
        trip = 0
    if trip == 0 or m is not None or c is not None:
        count = 0 if trip == 0 else None  # (a run-time trip count or condition: not known)
    else:
        count = _known_count(node, body, trip, carried)
    nodes = _body_nodes(body)

    def unroll(failed=None):
        return _unroll_loop(node, trip if count is None else count, carried, k, failed)

    if count is not None and count * nodes <= UNROLL_NODES:
        _note(
            node, f"unrolled: {count} iteration(s) known at import x {nodes} body node(s) <= {UNROLL_NODES}"
        )
        return unroll()
    limit, mode, why = _loop_plan(node, trip, m, c, count, k, nodes)
    runtime = [("the trip count M", node.inputs[0])] if m is not None else []
    runtime += [("the condition input", node.inputs[1])] if c is not None else []
    return _compile_or_unroll(
        node,
        lambda: _compiled_loop(node, trip, m, c, count, carried, k, limit, mode, why),
        unroll,
        runtime,
    )


def _ambiguous(node, when: str):
    # the spec ignores the condition output when the Loop has no condition input; onnxruntime
    # stops on it: refuse rather than pick one where it is known at import
    return node.unsupported(
        f"the body's condition output turns false {when} but the Loop has no condition input (the ONNX "
        "spec ignores it there, onnxruntime stops): ambiguous, refused"
    )


def _passed_on(body) -> bool:
    """The body's condition output is its condition input (directly or through Identity)."""
    producer = {o: nd for nd in body.node for o in nd.output if o}
    name = body.output[0].name
    while name in producer and producer[name].op_type == "Identity" and producer[name].input:
        name = producer[name].input[0]
    return name == body.input[1].name


def _known_count(node, body, trip: int | None, carried: list) -> int | None:
    """The iterations of a Loop whose trip count (if any) and condition input (if any) are known
    at import, when its body's condition output is computable at import too (from the iteration
    number, constants and carried values known at import): the importer runs that part of the
    body, at most MAX_IMPORT_ITERATIONS times. None when the condition is a run-time value."""
    if _passed_on(body):
        return trip
    part = _import_time_part(node, body, carried)
    if part is None:
        return None
    g, held = part
    values, it = list(carried), 0
    while trip is None or it < trip:
        if it >= MAX_IMPORT_ITERATIONS:
            return None
        outs = node.importer.subgraph(
            g, [np.array(it, np.int64), np.array(True), *values], f"{node.where()} body (iteration {it})"
        )
        if not all(isinstance(v, np.ndarray) for v in outs):
            return None  # too large to compute at import
        for j, v in zip(held, outs[1:]):
            values[j] = v
        it += 1
        if not _flag(node, outs[0], "the body's condition output"):
            if not node.has(1) and (trip is None or it < trip):
                raise _ambiguous(node, f"after iteration {it - 1}")
            break
    return it


def _import_time_part(node, body, carried: list):
    """(a graph of the body's nodes that compute its condition output and the carried values
    known at import, the indices of those values), or None when the condition needs a run-time
    value. A node is computable when every input is (a carried value only when its initial value
    is known and the body's next value of it is computable too), or it is a Shape or Size of an
    outer value or a body input (static types)."""
    from onnx import helper

    ins = [vi.name for vi in body.input]
    outs = [vi.name for vi in body.output]
    inits = {t.name for t in body.initializer}
    defined = set(ins) | inits | {o for nd in body.node for o in nd.output if o}
    env = node.importer.env

    def outer(x: str, known_only: bool) -> bool:
        return x not in defined and x in env and (not known_only or isinstance(env[x], np.ndarray))

    held = {j for j, v in enumerate(carried) if isinstance(v, np.ndarray)}
    while True:
        known = {ins[0], ins[1], *inits, *(ins[2 + j] for j in held)}
        for nd in body.node:
            reads = [x for x in nd.input if x]
            if _subgraphs(nd) or nd.op_type in _NONDETERMINISTIC:
                continue
            typed = (
                nd.op_type in ("Shape", "Size") and reads and (reads[0] in ins[:2] or outer(reads[0], False))
            )
            if typed or all(x in known or outer(x, True) for x in reads):
                known.update(o for o in nd.output if o)
        still = {j for j in held if outs[1 + j] in known}
        if still == held:
            break
        held = still
    if outs[0] not in known:
        return None
    producer = {o: nd for nd in body.node for o in nd.output if o}
    need: set[int] = set()
    stack = [outs[0], *(outs[1 + j] for j in held)]
    while stack:
        nd = producer.get(stack.pop())
        if nd is not None and id(nd) not in need:
            need.add(id(nd))
            stack.extend(x for x in nd.input if x)
    nodes = [nd for nd in body.node if id(nd) in need]
    reads = {x for nd in nodes for x in nd.input}
    held = sorted(held)
    g = helper.make_graph(
        nodes,
        f"{body.name}_condition",
        list(body.input),
        [body.output[0], *(body.output[1 + j] for j in held)],
        [t for t in body.initializer if t.name in reads],
    )
    return g, held


def _iterations_unknown(node, value, what: str, failed):
    return node.unsupported(
        f"the number of iterations depends on input values: {what} is only known at run time"
        f"{value_source(value)}, so the loop cannot be unrolled, and its body cannot be compiled as a "
        f"loop ({failed})"
    )


def _unroll_loop(node, trip: int | None, carried: list, k: int, failed=None) -> list:
    """The Loop unrolled: the body once per iteration, its condition output evaluated at import
    (the trip count and the condition input are known at import). ``failed``: why it could not
    be compiled as a loop, if that was tried."""
    n = len(carried)
    has_cond = node.has(1)
    keep = True if not has_cond else _flag(node, node.inputs[1], "the condition input")
    it, scans = 0, [[] for _ in range(k)]
    while keep and (trip is None or it < trip):
        if it >= MAX_IMPORT_ITERATIONS:
            raise node.unsupported(
                f"the loop runs more than {MAX_IMPORT_ITERATIONS} iterations, too many to unroll, and its "
                f"body cannot be compiled as a loop ({failed})"
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
            raise _iterations_unknown(
                node, c, f"the body's condition output after iteration {it - 1}", failed
            )
        keep = _flag(node, c, "the body's condition output")
        if not keep and not has_cond:
            raise _ambiguous(node, f"after iteration {it - 1}")
    out = list(carried)
    for j, items in enumerate(scans):
        if not items:
            out.append(_empty_scan(node, node.attr("body").output[1 + n + j]))
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


def _loop_plan(node, trip, m, c, count, k: int, nodes: int):
    """(max_iterations, bound mode, why it is a loop) of a Loop compiled as a loop: ``count``
    iterations when known at import; else the trip count ``trip`` when known and no larger than
    loop_bound, else loop_bound (more is an error), else unbounded (no scan outputs)."""
    bound = node.importer.loop_bound
    if count is not None:
        return (
            count,
            "stop",
            f"{count} iterations known at import, {count} x {nodes} body nodes is over {UNROLL_NODES}",
        )
    if m is not None:
        why = f"the trip count M is only known at run time{value_source(node.inputs[0])}"
    elif c is not None:
        why = f"the condition input is only known at run time{value_source(node.inputs[1])}"
    else:
        why = "the body computes its condition at run time"
    if trip is not None and trip < UNBOUNDED_TRIP and (bound is None or trip <= bound):
        return trip, "stop", why
    if bound is not None:
        return bound, "error", why
    if k:
        raise node.unsupported(
            f"{why}, and the Loop has {k} scan output(s), whose rows need a bound: give "
            "load_onnx(..., loop_bound=N) or flowc --loop-bound N (the most iterations; the scan "
            "outputs then have N rows, zeros past the last iteration)"
        )
    return None, "stop", why


def _compiled_loop(node, trip, m, c, count, carried: list, k: int, limit, mode: str, why: str) -> list:
    """The Loop as a ``while_loop``: ``count`` iterations when known at import, else the
    condition carried as a loop variable and the trip count ``m`` (run-time) or ``trip``."""
    n = len(carried)
    carry = count is None
    trip_t = constant(np.int64(trip)) if carry and m is None and limit is None and trip is not None else m
    lead = [np.array(True) if c is None else c] if carry else ([] if n else [np.array(True)])

    def step(i, *vs):
        values = list(vs[len(lead) :])
        outs = node.subgraph("body", [i, vs[0] if carry else np.array(True), *values])
        nexts = list(outs[1 : 1 + n])
        for j, (a, b) in enumerate(zip(values, nexts)):
            _check_carried(node, j, "loop-carried value", a, b)
        flag = outs[0]
        if (
            carry
            and not node.has(1)
            and isinstance(flag, np.ndarray)
            and not _flag(node, flag, "the condition")
        ):
            raise _ambiguous(node, "(known at import)")
        if carry:
            nexts.insert(0, _bool_scalar(node, flag, "the body's condition output"))
        elif not n:
            nexts.insert(0, vs[0])
        return nexts, list(outs[1 + n :])

    finals, stacked, _ = C.loop(
        (lambda i, keep, *v: keep) if carry else (lambda i, *v: True),
        step,
        [*lead, *carried],
        trip=trip_t,
        max_iterations=limit,
        bound=mode,
    )
    at_most = f"; at most {limit} iterations" + (
        " (loop_bound: more is an error at run time)" if mode == "error" else ""
    )
    rows = f"; scan outputs of {limit} rows, zeros past the last iteration" if k and carry else ""
    _note(node, f"compiled as a loop ({why}{at_most if carry and limit is not None else ''}{rows})")
    return finals[len(lead) :] + list(stacked)


# ----------------------------------------------------------------------------- Scan


def _scan_common(node, states, scans, in_axes, in_dirs, out_axes, out_dirs):
    """One scan: returns final states and stacked scan outputs."""
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
    nodes = _body_nodes(body)

    def unroll(failed=None):
        return _unroll_scan(node, states, scans, axes, in_dirs, length, k)

    if length * nodes <= UNROLL_NODES:
        _note(node, f"unrolled: {length} iteration(s) x {nodes} body node(s) <= {UNROLL_NODES}")
        states, columns = unroll()
    else:
        states, columns = _compile_or_unroll(
            node, lambda: _scan_loop(node, states, scans, axes, in_dirs, length, k, nodes), unroll, []
        )
    results = []
    for j, column in enumerate(columns):
        if out_dirs[j] and length > 1:
            column = _reverse(column)  # prepended: the last iteration's value comes first
        rank = len(_shape(column))
        axis = _norm_axis(node, out_axes[j], rank, "scan_output_axes")
        if axis:
            perm = [*range(1, axis + 1), 0, *range(axis + 1, rank)]
            column = (
                np.transpose(column, perm) if isinstance(column, np.ndarray) else S.transpose(column, perm)
            )
        results.append(column)
    return list(states), results


def _reverse(v):
    """``v`` with axis 0 reversed."""
    if isinstance(v, np.ndarray):
        return v[::-1].copy()
    return S.slice_(v, [-1], [-(v.shape[0] + 1)], axes=[0], steps=[-1])


def _unroll_scan(node, states, scans, axes, in_dirs, length: int, k: int):
    """The body once per element; the scan outputs stacked on axis 0 in iteration order."""
    n = len(states)
    columns = [[] for _ in range(k)]
    for t in range(length):
        elems = [_index(x, length - 1 - t if d else t, a) for x, a, d in zip(scans, axes, in_dirs)]
        outs = node.subgraph("body", [*states, *elems], f"body (iteration {t})")
        states = outs[:n]
        for j in range(k):
            columns[j].append(outs[n + j])
    return list(states), [_stack(node, items, 0, f"scan output {j}") for j, items in enumerate(columns)]


def _scan_loop(node, states, scans, axes, in_dirs, length: int, k: int, nodes: int):
    """The scan as a ``while_loop`` of ``length`` iterations: iteration i gathers row i (or
    length-1-i) of each scan input; the scan outputs come stacked on axis 0 in iteration order."""
    n = len(states)
    scans = [_t(x) for x in scans]
    last = constant(np.int64(length - 1))
    lead = [] if n else [np.array(True)]  # a loop needs one variable

    def step(i, *vs):
        values = list(vs[len(lead) :])
        back = E.sub(last, i) if any(in_dirs) else None
        elems = [S.gather(x, back if d else i, axis=a) for x, a, d in zip(scans, axes, in_dirs)]
        outs = node.subgraph("body", [*values, *elems])
        nexts = list(outs[:n])
        for j, (a, b) in enumerate(zip(values, nexts)):
            _check_carried(node, j, "state", a, b)
        return [*vs[: len(lead)], *nexts], list(outs[n:])

    finals, stacked, _ = C.loop(lambda i, *v: True, step, [*lead, *states], max_iterations=length)
    _note(
        node,
        f"compiled as a loop of {length} iterations ({length} x {nodes} body nodes is over {UNROLL_NODES})",
    )
    return finals[len(lead) :], list(stacked)


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
    """Opset 8: axis 0 of every input is a batch, axis 1 the sequence; the body runs per batch
    element (a loop over the batch around the scan, or the batch unrolled when it is short)."""
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

    def one(rows_of_states, rows_of_scans):
        return _scan_common(node, rows_of_states, rows_of_scans, [0] * m, dirs, [0] * k, [0] * k)

    nodes = _body_nodes(body)
    if batch <= 1 or batch * seq * nodes <= UNROLL_NODES:
        finals, outs = [], []
        for b in range(batch):
            f, o = one([_index(s, b, 0) for s in states], [_index(x, b, 0) for x in scans])
            finals.append(f)
            outs.append(o)
        stack = [_stack(node, [row[i] for row in finals], 0, f"final state {i}") for i in range(len(states))]
        return stack + [_stack(node, [row[j] for row in outs], 0, f"scan output {j}") for j in range(k)]
    states, scans = [_t(s) for s in states], [_t(x) for x in scans]

    def step(b, flag):
        f, o = one([S.gather(s, b, axis=0) for s in states], [S.gather(x, b, axis=0) for x in scans])
        return [flag], [*f, *o]

    _, stacked, _ = C.loop(lambda b, flag: True, step, [np.array(True)], max_iterations=batch)
    _note(
        node,
        f"compiled as a loop over the batch of {batch} ({batch} x {seq} x {nodes} body nodes is over "
        f"{UNROLL_NODES})",
    )
    return list(stacked)


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
