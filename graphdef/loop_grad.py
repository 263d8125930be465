"""Gradients through ``cond`` and ``while_loop`` (graphdef/ops/control.py).

cond: a cond on the same predicate whose branches are the gradients of the forward
branches (each replayed inside the new branch and differentiated there).

while_loop: the forward loop is built again with the loop variables at the start of each
iteration stacked (scan outputs: a stack of ``max_iterations`` rows, the bound a loop needs
to be differentiated); a backward loop runs ``count`` iterations in reverse, each replaying
the body on that iteration's row and taking its gradient with the carried gradients of the
variables as weights, summing the captures' gradients. Memory: the stack (max_iterations x the
variables), planned in the arena like any value; time: the forward body twice (once more in
the backward loop) and its gradient.
"""

from __future__ import annotations

from . import dtypes
from .builder import Tensor, apply, fill, get_default_graph
from .errors import GradientError
from .ir import Graph


def replay(sub: Graph, args: list[Tensor]) -> list[Tensor]:
    """The nodes of subgraph ``sub`` built again in the default graph, its placeholders bound
    to ``args``; its outputs."""
    env = {sub.node(p).ref(): a for p, a in zip(sub.inputs, args)}
    for node in sub.nodes:
        if node.op == "placeholder":
            continue
        if node.op == "fill":
            a = node.attrs
            outs = (fill(a["shape"], a["value"], a["dtype"]),)
        else:
            made = apply(node.op, [env[r] for r in node.inputs], None, **dict(node.attrs))
            outs = made if isinstance(made, tuple) else (made,)
        for i, t in enumerate(outs):
            env[node.ref(i)] = t
    return [env[r] for r in sub.outputs]


def _zeros(t: Tensor) -> Tensor:
    return fill(t.shape, 0, t.dtype)


def _float(t) -> bool:
    return dtypes.is_float(t.dtype)


def cond_grad(op, gys):
    from .autodiff import gradients
    from .ops.control import cond

    pred, caps = op.inputs[0], list(op.inputs[1:])
    wanted = [k for k in range(len(caps)) if op.needs[k + 1]]
    weighted = [(j, g) for j, g in enumerate(gys) if g is not None and _float(op.outputs[j])]
    if not wanted:
        return (None,) * len(op.inputs)
    if not weighted:
        return (None,) * len(op.inputs)

    def branch(sub: Graph):
        def fn():
            g = get_default_graph()
            args = [g.capture(c) for c in caps]
            ys = replay(sub, args)
            grads = gradients(
                [ys[j] for j, _ in weighted], [args[k] for k in wanted], [g.capture(w) for _, w in weighted]
            )
            return [d if d is not None else _zeros(args[k]) for d, k in zip(grads, wanted)]

        return fn

    got = cond(pred, branch(op.attrs["then_branch"]), branch(op.attrs["else_branch"]))
    got = got if isinstance(got, list) else [got]
    out = [None] * len(op.inputs)
    for k, d in zip(wanted, got):
        out[k + 1] = d
    return tuple(out)


def while_loop_grad(op, gys):
    from .autodiff import gradients
    from .ops import elementwise as E
    from .ops.control import loop_layout
    from .ops.shape import gather

    a = op.attrs
    trip, n, _ = loop_layout(a, len(op.inputs))
    most = a["max_iterations"]
    if most < 0:
        raise GradientError(
            f"cannot differentiate {op.node.describe()}: a while_loop needs max_iterations for its gradient "
            "(the stack of each iteration's values has that many rows)"
        )
    inits, caps = list(op.inputs[trip : trip + n]), list(op.inputs[trip + n :])
    scans = a["scans"]
    body = a["body"]
    floats = [k for k in range(n) if _float(inits[k])]
    # the forward loop again, each iteration's variables stacked
    stacked_body = Graph(
        body.name,
        body.nodes,
        tuple(body.outputs) + tuple(body.node(body.inputs[1 + k]).ref() for k in range(n)),
    )
    again = apply(
        "while_loop",
        list(op.inputs),
        None,
        **{**dict(a), "body": stacked_body, "scans": scans + n},
    )
    stacks = list(again[n + scans : n + scans + n])
    count = again[-1]
    cap_wanted = [k for k in range(len(caps)) if op.needs[trip + n + k] and _float(caps[k])]
    var_g = [gys[k] if gys[k] is not None else _zeros(op.outputs[k]) for k in floats]
    scan_g = [(j, gys[n + j]) for j in range(scans) if gys[n + j] is not None and _float(op.outputs[n + j])]

    def back_body(done, *carried):
        g = get_default_graph()
        f = len(floats)
        gv, gc = list(carried[:f]), list(carried[f:])
        # the forward iteration this one undoes: count - 1 - (backward iterations done so far)
        i = E.sub(E.sub(g.capture(count), fill((), 1, "int64")), done)
        values = [gather(g.capture(s), i, axis=0) for s in stacks]
        args = [g.capture(x) for x in caps]
        ys = replay(body, [i, *values, *args])
        targets = [ys[k] for k in floats] + [ys[n + j] for j, _ in scan_g]
        weights = gv + [gather(g.capture(w), i, axis=0) for _, w in scan_g]
        sources = [values[k] for k in floats] + [args[k] for k in cap_wanted]
        grads = gradients(targets, sources, weights) if targets else [None] * len(sources)
        grads = [d if d is not None else _zeros(s) for d, s in zip(grads, sources)]
        return [*grads[:f], *(E.add(c, d) for c, d in zip(gc, grads[f:]))]

    init = var_g + [_zeros(caps[k]) for k in cap_wanted]
    if not init:
        return (None,) * len(op.inputs)
    result = _reverse_loop(count, back_body, init, most)
    out = [None] * len(op.inputs)
    for k, d in zip(floats, result[: len(floats)]):
        if op.needs[trip + k]:
            out[trip + k] = d
    for k, d in zip(cap_wanted, result[len(floats) :]):
        out[trip + n + k] = d
    return tuple(out)


def _reverse_loop(count: Tensor, body, init: list[Tensor], most: int) -> list[Tensor]:
    """The values of ``init`` after ``count`` (an int64 scalar) iterations of
    ``body(iteration, *values)``, at most ``most``."""
    from .ops.control import COUNT, _trace, _union, _with_captures

    outer = get_default_graph()
    inner = getattr(outer, "parent", None) is not None
    values = [outer.capture(v) for v in init] if inner else list(init)
    count = outer.capture(count) if inner else count
    types = [v.type for v in values]
    labels = ["iteration", *(f"var{k}" for k in range(len(values)))]
    c_sub, c_caps = _trace(
        "grad/cond", [COUNT, *types], labels, lambda i, *v: fill((), 1, "bool"), lambda r, s: [r]
    )
    b_sub, b_caps = _trace("grad/body", [COUNT, *types], labels, body, lambda r, s: list(r))
    caps = _union(c_caps, b_caps)
    made = apply(
        "while_loop",
        [count, *values, *caps],
        None,
        cond=_with_captures(c_sub, caps),
        body=_with_captures(b_sub, caps),
        vars=len(values),
        max_iterations=most,
        trip=True,
    )
    return list(made[: len(values)])
