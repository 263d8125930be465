"""Control flow: ``while_loop`` and ``cond`` with subgraphs, as in the TensorFlow-1 API.

A ``while_loop`` node holds two subgraphs (attributes ``cond`` and ``body``), each taking the
iteration number (int64 scalar), the loop variables and the outer tensors the loop reads
(``captures``), in that order, as its placeholders. ``cond`` gives one bool scalar; ``body``
the next value of every loop variable (same types), then any ``scans`` values, which the loop
stacks on a new axis 0 of ``max_iterations`` rows (rows past the last iteration are zeros).
The node's inputs: an optional run-time trip count (int64 scalar, ``trip``), the initial
values, the captures; its outputs: the final values, the stacked scans, the iteration count.

    i = 0; v = init
    while (max_iterations < 0 or i < max_iterations) and (not trip or i < trip) and cond(i, v, c):
        v, s[i] = body(i, v, c); i += 1

``bound="error"``: reaching ``max_iterations`` while the condition still holds is an error
rather than the end of the loop (a bound the user gave for a loop whose length is data).

A ``cond`` node runs one of two subgraphs (``then_branch``, ``else_branch``), both taking the
node's inputs after the predicate (the captures) as placeholders and giving outputs of the same
types; only the taken one runs.

The builder functions ``while_loop`` and ``cond`` trace Python functions into the subgraphs:
a tensor of an enclosing graph that a function reads becomes a capture (builder.Graph.capture),
a constant made inside lives in the outermost graph.

The codegen-only ops below (``loop_begin`` ... ``branch_end``, ``loop_copy``) are what the
compiler flattens these nodes into (codegen/control.py); graphs users build never hold them.
"""

from __future__ import annotations

import numpy as np

from .. import dtypes
from ..builder import Graph as BuilderGraph
from ..builder import (
    Tensor,
    apply,
    control_dependencies,
    default_graph_scope,
    fill,
    get_default_graph,
    operand,
    placeholder,
)
from ..errors import ExecutionError, GraphError, ShapeError
from ..ir import Graph, TensorType
from ..registry import ELEMENTWISE, KERNEL, NOT_DIFFERENTIABLE, Attr, Example, Sample, defop
from . import elementwise as E  # noqa: F401  (registers what the examples below use)
from . import reduce as R
from . import state  # noqa: F401

__all__ = ["while_loop", "cond"]  # and loop, the general form (gd.control.loop)

COUNT = TensorType((), "int64")
FLAG = TensorType((), "bool")


# ----------------------------------------------------------------------------- interfaces
def _placeholder_types(g: Graph) -> list[TensorType]:
    return [g.node(n).outputs[0] for n in g.inputs]


def _output_types(g: Graph) -> list[TensorType]:
    return [g.type_of(r) for r in g.outputs]


def loop_layout(attrs, n_inputs: int) -> tuple[int, int, int]:
    """(trip inputs (0 or 1), loop variables, captures) of a while_loop with ``n_inputs``."""
    trip = int(attrs["trip"])
    return trip, attrs["vars"], n_inputs - trip - attrs["vars"]


def _check_sub(g: Graph, want: list[TensorType], what: str) -> None:
    from ..verify import verify

    verify(g)
    got = _placeholder_types(g)
    if got != want:
        raise ShapeError(
            f"{what} takes {', '.join(map(str, got)) or 'nothing'} but the node gives it "
            f"{', '.join(map(str, want)) or 'nothing'}"
        )
    if any(
        g.node(n).op in ("variable", "assign", "assign_add", "assign_sub") for n in (x.name for x in g.nodes)
    ):
        raise ShapeError(f"{what} holds a variable or an assign: state lives outside loops and branches")


def _loop_infer(types, attrs):
    trip, n, _ = loop_layout(attrs, len(types))
    if n < 0:
        raise ShapeError(f"while_loop: {len(types)} inputs cannot hold {attrs['vars']} loop variables")
    if trip and types[0] != COUNT:
        raise ShapeError(f"while_loop: the trip count is {types[0]}, not int64[]")
    inner = [COUNT, *types[trip:]]
    _check_sub(attrs["cond"], inner, "the loop's condition")
    _check_sub(attrs["body"], inner, "the loop's body")
    if _output_types(attrs["cond"]) != [FLAG]:
        got = ", ".join(map(str, _output_types(attrs["cond"])))
        raise ShapeError(f"the loop's condition gives {got}, not one bool[]")
    body = _output_types(attrs["body"])
    vars_ = list(types[trip : trip + n])
    if len(body) != n + attrs["scans"]:
        raise ShapeError(
            f"the loop's body gives {len(body)} values for {n} loop variables and {attrs['scans']} scans"
        )
    for k, (a, b) in enumerate(zip(vars_, body)):
        if a != b:
            raise ShapeError(f"loop variable {k} enters the loop as {a} but the body makes it {b}")
    if attrs["scans"] and attrs["max_iterations"] < 0:
        raise ShapeError("a loop with scan outputs needs max_iterations (their rows)")
    rows = attrs["max_iterations"]
    scans = [TensorType((rows, *t.shape), t.dtype) for t in body[n:]]
    return tuple(vars_ + scans + [COUNT])


def _evaluate(g: Graph, args: list) -> list:
    from ..interpret import session

    return session(g).run(dict(zip(g.inputs, args)), list(g.outputs))


def _loop_ref(xs, attrs):
    trip, n, _ = loop_layout(attrs, len(xs))
    limit = int(xs[0]) if trip else None
    values, caps = list(xs[trip : trip + n]), list(xs[trip + n :])
    body_types = _output_types(attrs["body"])[n:]
    rows = max(attrs["max_iterations"], 0)
    scans = [np.zeros((rows, *t.shape), dtypes.np_dtype(t.dtype)) for t in body_types]
    i, most = 0, attrs["max_iterations"]
    while limit is None or i < limit:
        if not bool(_evaluate(attrs["cond"], [np.int64(i), *values, *caps])[0]):
            break
        if 0 <= most <= i:
            if attrs["bound"] == "error":
                raise ExecutionError(f"the loop ran past its bound of {most} iterations")
            break
        outs = _evaluate(attrs["body"], [np.int64(i), *values, *caps])
        values = outs[:n]
        for s, v in zip(scans, outs[n:]):
            s[i] = v
        i += 1
    return tuple([*values, *scans, np.array(i, np.int64)])


def _loop_grad(op, gys):
    from ..loop_grad import while_loop_grad

    return while_loop_grad(op, gys)


defop(
    "while_loop",
    ("inputs*?",),
    _loop_infer,
    _loop_ref,
    _loop_grad,
    kind=KERNEL,
    attrs={
        "cond": Attr("graph"),
        "body": Attr("graph"),
        "vars": Attr("int"),
        "scans": Attr("int", 0),
        "max_iterations": Attr("int", -1),
        "trip": Attr("bool", False),
        "bound": Attr("str", "stop", ("stop", "error")),
    },
    doc="a loop over subgraphs cond and body (see graphdef/ops/control.py)",
    examples=(),  # set below, built from the builder functions
)


def _cond_infer(types, attrs):
    if not types or types[0] != FLAG:
        raise ShapeError(f"cond: the predicate is {types[0] if types else 'missing'}, not bool[]")
    t, e = attrs["then_branch"], attrs["else_branch"]
    _check_sub(t, list(types[1:]), "the true branch")
    _check_sub(e, list(types[1:]), "the false branch")
    a, b = _output_types(t), _output_types(e)
    if a != b:
        raise ShapeError(
            f"the branches give different values: {', '.join(map(str, a))} and {', '.join(map(str, b))}"
        )
    if not a:
        raise ShapeError("a cond must give at least one value")
    return tuple(a)


def _cond_ref(xs, attrs):
    branch = attrs["then_branch"] if bool(xs[0]) else attrs["else_branch"]
    return tuple(_evaluate(branch, list(xs[1:])))


def _cond_grad(op, gys):
    from ..loop_grad import cond_grad

    return cond_grad(op, gys)


defop(
    "cond",
    ("pred", "inputs*?"),
    _cond_infer,
    _cond_ref,
    _cond_grad,
    kind=KERNEL,
    attrs={"then_branch": Attr("graph"), "else_branch": Attr("graph")},
    doc="runs then_branch or else_branch on the inputs after pred (see graphdef/ops/control.py)",
    examples=(),  # set below
)


# ----------------------------------------------------------------------------- builders
def _as_list(v) -> tuple[list, bool]:
    if isinstance(v, (list, tuple)):
        return list(v), True
    return [v], False


def _trace(
    name: str, types: list[TensorType], labels: list[str], fn, make_outputs
) -> tuple[Graph, list[Tensor]]:
    """Build ``fn`` over placeholders of ``types`` in a subgraph of the default graph: the
    subgraph (its captures' placeholders after the others) and the outer tensors it captured."""
    outer = get_default_graph()
    sub = BuilderGraph(name)
    sub.parent = outer
    with default_graph_scope(sub), control_dependencies(None):
        args = [Tensor(sub, _placeholder(sub, label, t)) for label, t in zip(labels, types)]
        outs = make_outputs(fn(*args), sub)
        outs = [sub.capture(operand(o) if not isinstance(o, Tensor) else o) for o in outs]
        sub.set_outputs(*outs)
    return sub, list(sub.captures)


def _placeholder(g: BuilderGraph, label: str, t: TensorType):
    from ..ir import Attrs, Node

    node = Node(label, "placeholder", (), Attrs({"shape": t.shape, "dtype": t.dtype}), (t,))
    g.add(node)
    return node.ref()


def _with_captures(sub: BuilderGraph, captures: list[Tensor]) -> Graph:
    """``sub`` frozen, its placeholders: its own first, then one per outer tensor of
    ``captures`` (the union over a node's subgraphs, in one order), unused ones included."""
    from ..ir import Attrs, Node

    by_key = sub.captured
    inner = {p.ref for p in by_key.values()}
    own = [n for n in sub.nodes if n.op == "placeholder" and n.ref() not in inner]
    caps = []
    for k, t in enumerate(captures):
        p = by_key.get((id(t.graph), t.ref))
        if p is None:
            name = f"capture_unused_{k}"
            while name in sub:
                name += "_"
            caps.append(Node(name, "placeholder", (), Attrs({"shape": t.shape, "dtype": t.dtype}), (t.type,)))
        else:
            caps.append(p.node)
    rest = [n for n in sub.nodes if n.op != "placeholder"]
    return Graph(sub.name, own + caps + rest, sub.declared_outputs, sub.constants, sub.variables)


def _union(*lists: list[Tensor]) -> list[Tensor]:
    seen, out = set(), []
    for ts in lists:
        for t in ts:
            key = (id(t.graph), t.ref)
            if key not in seen:
                seen.add(key)
                out.append(t)
    return out


def while_loop(cond, body, loop_vars, max_iterations: int | None = None, name: str | None = None):
    """Repeat ``loop_vars = body(*loop_vars)`` while ``cond(*loop_vars)`` holds, at most
    ``max_iterations`` times; returns the final values (a list when ``loop_vars`` is one).

    ``cond`` and ``body`` are Python functions called once, on placeholders, to build the
    subgraphs; they may read any tensor of the enclosing graphs. The body must give every
    variable back with its type (TensorFlow's fixed shape invariants).

    >>> import numpy as np, graphdef as gd
    >>> with gd.Graph("g") as g:
    ...     n = gd.placeholder("n", (), "int32")
    ...     i, s = gd.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, s + i), [0, 0])
    >>> [int(v) for v in gd.run(g, {"n": np.int32(5)}, [i, s])]
    [5, 10]
    """
    values, listed = _as_list(loop_vars)
    finals, _, _ = loop(
        lambda i, *v: cond(*v),
        lambda i, *v: (body(*v), []),
        values,
        max_iterations=max_iterations,
        name=name,
    )
    return finals if listed else finals[0]


def loop(
    cond, body, loop_vars, *, trip=None, max_iterations: int | None = None, bound: str = "stop", name=None
):
    """The general loop (the ``while_loop`` op whole): ``cond(i, *vars)`` gives a bool scalar
    (or a Python bool), ``body(i, *vars)`` gives ``(next values, scanned values)``, ``i`` the
    iteration number (int64 scalar); ``trip``: an int64 scalar tensor bounding the iterations
    at run time; scanned values are stacked in ``max_iterations`` rows (required with them);
    ``bound="error"``: reaching ``max_iterations`` with the condition true is an error. Returns
    (final values, stacked scans, iteration count), each tensor of the default graph."""
    outer = get_default_graph()
    nested = getattr(outer, "parent", None) is not None
    values = [v if isinstance(v, Tensor) else operand(v) for v in loop_vars]
    values = [outer.capture(v) if nested else v for v in values]
    if not values:
        raise GraphError("a loop needs at least one loop variable")
    trips = [] if trip is None else [outer.capture(operand(trip)) if nested else operand(trip)]
    if trips and trips[0].type != COUNT:
        raise ShapeError(f"a loop's trip count must be an int64 scalar, got {trips[0].type}")
    types = [v.type for v in values]
    labels = ["iteration", *(f"var{k}" for k in range(len(values)))]
    base = name or "while"
    scanned = []

    def outs_cond(c, sub):
        c = c if isinstance(c, Tensor) else operand(np.bool_(bool(c)))
        if c.type != FLAG:
            raise ShapeError(f"a loop's condition gives {c.type}, not a bool scalar")
        return [c]

    def outs_body(r, sub):
        nexts, scans = r
        got, _ = _as_list(nexts)
        if len(got) != len(values):
            raise GraphError(f"a loop's body gives {len(got)} values for {len(values)} loop variables")
        got = [g if isinstance(g, Tensor) else operand(g, like=v) for g, v in zip(got, values)]
        for k, (g, v) in enumerate(zip(got, values)):
            if g.type != v.type:
                raise ShapeError(
                    f"loop variable {k} enters the loop as {v.type} but the body makes it {g.type}"
                )
        extra = [x if isinstance(x, Tensor) else operand(x) for x in scans]
        scanned.extend(extra)
        return got + extra

    c_sub, c_caps = _trace(f"{base}/cond", [COUNT, *types], labels, cond, outs_cond)
    b_sub, b_caps = _trace(f"{base}/body", [COUNT, *types], labels, body, outs_body)
    caps = _union(c_caps, b_caps)
    made = apply(
        "while_loop",
        [*trips, *values, *caps],
        name,
        cond=_with_captures(c_sub, caps),
        body=_with_captures(b_sub, caps),
        vars=len(values),
        scans=len(scanned),
        max_iterations=-1 if max_iterations is None else int(max_iterations),
        trip=bool(trips),
        bound=bound,
    )
    n, m = len(values), len(scanned)
    return list(made[:n]), list(made[n : n + m]), made[n + m]


def cond(pred, true_fn, false_fn, name: str | None = None):
    """``true_fn()`` where the bool scalar ``pred`` holds, else ``false_fn()``: only the taken
    branch runs. Both give the same number of values of the same types (a Tensor or a tuple).

    >>> import numpy as np, graphdef as gd
    >>> with gd.Graph("g") as g:
    ...     x = gd.placeholder("x", (2,))
    ...     y = gd.cond(gd.reduce_sum(x) > 0.0, lambda: x * 2.0, lambda: -x)
    >>> gd.run(g, {"x": np.array([1, -3], np.float32)}, [y])[0]
    array([-1.,  3.], dtype=float32)
    """
    outer = get_default_graph()
    pred = operand(pred)
    if getattr(outer, "parent", None) is not None:
        pred = outer.capture(pred)
    if pred.type != FLAG:
        raise ShapeError(f"cond: the predicate is {pred.type}, not a bool scalar")
    base = name or "cond"
    shape = {}

    def outs(r, sub):
        got, listed = _as_list(r)
        shape.setdefault("listed", listed)
        return [g if isinstance(g, Tensor) else operand(g) for g in got]

    t_sub, t_caps = _trace(f"{base}/then", [], [], true_fn, outs)
    e_sub, e_caps = _trace(f"{base}/else", [], [], false_fn, outs)
    caps = _union(t_caps, e_caps)
    result = apply(
        "cond",
        [pred, *caps],
        name,
        then_branch=_with_captures(t_sub, caps),
        else_branch=_with_captures(e_sub, caps),
    )
    result = list(result) if isinstance(result, tuple) else [result]
    return result if shape["listed"] else result[0]


# ----------------------------------------------------------------------------- compiler-made
def _made(xs, attrs):
    raise ExecutionError("a piece of a compiled loop or branch: run the graph before codegen flattens it")


def _passing(types, attrs):
    return tuple(types[: attrs["carried"]])


# loop_begin(init..., [trip]) -> carried..., count, scan rows...: copies the initial values in,
# opens the loop
defop(
    "loop_begin",
    ("inputs*?",),
    lambda types, attrs: tuple(
        [*types[: attrs["vars"]], COUNT]
        + [
            TensorType((attrs["max_iterations"], *s), d)
            for s, d in zip(attrs["scan_shapes"], attrs["scan_dtypes"])
        ]
    ),
    _made,
    NOT_DIFFERENTIABLE,
    kind=KERNEL,
    control=True,
    attrs={
        "vars": Attr("int"),
        "max_iterations": Attr("int", -1),
        "scan_shapes": Attr("any", ()),
        "scan_dtypes": Attr("any", ()),
        "trip": Attr("bool", False),
        "bound": Attr("str", "stop"),
    },
    doc="compiler-made: a loop's start",
)


def _passing_piece(name: str, doc: str, **attrs) -> None:
    """A piece whose outputs are its first inputs' memory (``passes_through``): a loop's check
    and end, a branch's else and end; ``carried``: how many, ``region``: its opening's name."""
    defop(
        name,
        ("inputs*",),
        _passing,
        _made,
        NOT_DIFFERENTIABLE,
        kind=KERNEL,
        control=True,
        passes_through=True,
        attrs={"carried": Attr("int"), "region": Attr("str"), **attrs},
        doc=doc,
    )


# loop_check(carried..., count, rows..., flag, [trip]) -> carried..., count, rows...: leaves the
# loop when the flag is false or a bound is reached
_passing_piece(
    "loop_check",
    "compiler-made: a loop's exit test",
    vars=Attr("int"),
    max_iterations=Attr("int", -1),
    trip=Attr("bool", False),
    bound=Attr("str", "stop"),
)
# loop_end(carried..., count, rows..., next..., scanned...) -> carried..., count, rows...: the next
# values into the carried ones, a row of each scan, count + 1, back to the start
_passing_piece("loop_end", "compiler-made: a loop's end", vars=Attr("int"))
# branch_begin(pred) -> results...: enters the true branch when pred holds
defop(
    "branch_begin",
    ("pred",),
    lambda types, attrs: tuple(TensorType(s, d) for s, d in zip(attrs["shapes"], attrs["dtypes"])),
    _made,
    NOT_DIFFERENTIABLE,
    kind=KERNEL,
    control=True,
    attrs={"shapes": Attr("any"), "dtypes": Attr("any")},
    doc="compiler-made: a branch's start",
)


# branch_else / branch_end(results..., a side's values...) -> results...
_passing_piece("branch_else", "compiler-made: the true side's values into the results, then the false side")
_passing_piece("branch_end", "compiler-made: the false side's values into the results, a branch's end")
defop(
    "loop_copy",
    ("x",),
    lambda types, attrs: (types[0],),
    lambda xs, attrs: np.array(xs[0], copy=True),
    lambda op, gys: (gys[0],),
    kind=ELEMENTWISE,
    doc="compiler-made: a copy into a buffer of its own (a loop variable the body passes on unchanged)",
    examples=(Example((Sample((2, 3)),), {}, lambda x: x),),
)


# ----------------------------------------------------------------------------- examples
def _sub(name: str, types: list[TensorType], fn) -> Graph:
    """A subgraph of placeholders ``types`` and ``fn``'s outputs (constants as fills)."""
    g = BuilderGraph(name)
    with g:
        args = [placeholder(f"p{k}", t.shape, t.dtype) for k, t in enumerate(types)]
        outs, _ = _as_list(fn(*args))
        g.set_outputs(*outs)
    return g.freeze()


def _examples():
    f3, f23, f4 = TensorType((3,), "float32"), TensorType((2, 3), "float32"), TensorType((4,), "float32")

    def below(limit):
        return lambda i, *rest: E.less(i, fill((), limit, "int64"))

    loop1 = {
        "cond": _sub("c", [COUNT, f23, f3], below(3)),
        "body": _sub("b", [COUNT, f23, f3], lambda i, x, w: (E.tanh(E.add(E.mul(x, fill((), 0.5)), w)),)),
        "vars": 1,
    }
    loop2 = {
        "cond": _sub("c", [COUNT, f4, f4], lambda i, s, x: E.less(R.reduce_sum(s), fill((), 12.0))),
        "body": _sub(
            "b",
            [COUNT, f4, f4],
            lambda i, s, x: (E.add(E.add(s, E.abs(x)), fill((), 0.25)), E.mul(s, fill((), 2.0))),
        ),
        "vars": 1,
        "scans": 1,
        "max_iterations": 6,
        "trip": True,
    }
    branch = {
        "then_branch": _sub("t", [f3], lambda x: (E.mul(x, fill((), 2.0)), R.reduce_max(x))),
        "else_branch": _sub("e", [f3], lambda x: (E.neg(x), R.reduce_min(x))),
    }
    # float64 twins, checked against finite differences (their max_iterations bounds the stack)
    d3, d23 = TensorType((3,), "float64"), TensorType((2, 3), "float64")
    loop64 = {
        "cond": _sub("c", [COUNT, d23, d3], below(3)),
        "body": _sub("b", [COUNT, d23, d3], lambda i, x, w: (E.tanh(E.add(E.mul(x, w), w)),)),
        "vars": 1,
        "max_iterations": 5,
    }
    branch64 = {
        "then_branch": _sub("t", [d3, d3], lambda x, w: (E.mul(x, w),)),
        "else_branch": _sub("e", [d3, d3], lambda x, w: (E.sub(x, E.tanh(w)),)),
    }
    loops = (
        Example((Sample((2, 3)), Sample((3,))), loop1, grad=False),
        Example((np.array(5, np.int64), Sample((4,), low=-1.0, high=1.0), Sample((4,))), loop2, grad=False),
        Example((np.array(2, np.int64), Sample((4,), low=-1.0, high=1.0), Sample((4,))), loop2, grad=False),
        Example((Sample((2, 3), "float64", -1.0, 1.0), Sample((3,), "float64", -1.0, 1.0)), loop64),
    )
    branches = (
        Example((np.array(True), Sample((3,))), branch, grad=False),
        Example((np.array(False), Sample((3,))), branch, grad=False),
        Example((np.array(True), Sample((3,), "float64"), Sample((3,), "float64")), branch64),
        Example((np.array(False), Sample((3,), "float64"), Sample((3,), "float64")), branch64),
    )
    return loops, branches


def _set_examples():
    import dataclasses

    from ..registry import _REGISTRY

    loops, branches = _examples()
    _REGISTRY["while_loop"] = dataclasses.replace(_REGISTRY["while_loop"], examples=loops)
    _REGISTRY["cond"] = dataclasses.replace(_REGISTRY["cond"], examples=branches)


_set_examples()
