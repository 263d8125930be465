"""Symbolic reverse-mode gradients: gradient computations are added to the graph as nodes.

Each op's rule lives in its registry record (``OpDef.grad``); this module only walks the
graph backwards from the targets, sums the contributions to each tensor, and calls the rules.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import dtypes
from .builder import Tensor, control_dependencies, default_graph_scope, device, fill, name_scope
from .errors import GradientError
from .ir import Attrs, Node, ValueRef
from .registry import NotDifferentiable, get_op


@dataclass(frozen=True)
class GradOp:
    """What a gradient rule sees of the forward node."""

    node: Node
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    needs: tuple[bool, ...]

    @property
    def attrs(self) -> Attrs:
        return self.node.attrs

    def want(self, i: int, make):
        """``make()`` if the gradient of input i is needed, else None (builds nothing)."""
        return make() if self.needs[i] else None


def _sum(terms: list[Tensor]) -> Tensor | None:
    from .ops.elementwise import add

    if not terms:
        return None
    total = terms[0]
    for t in terms[1:]:
        total = add(total, t)
    return total


def gradients(ys, xs, grad_ys=None, name: str = "gradients") -> list[Tensor | None]:
    """d(sum of ys)/d(x) for each x in xs, as new nodes in the graph of ys.

    ``grad_ys`` weights each target (default: ones). A result is ``None`` when x does not
    influence the targets (or only through integer values or ``stop_gradient``).

    >>> import numpy as np, graphdef as gd
    >>> with gd.Graph("g") as g:
    ...     x = gd.placeholder("x", (3,))
    ...     (dx,) = gd.gradients(gd.reduce_sum(x * x), [x])
    >>> gd.run(g, {"x": np.array([1, 2, 3], np.float32)}, [dx])[0]
    array([2., 4., 6.], dtype=float32)
    """
    ys = [ys] if isinstance(ys, Tensor) else list(ys)
    xs = [xs] if isinstance(xs, Tensor) else list(xs)
    for t in ys + xs:
        if not isinstance(t, Tensor):
            raise GradientError(f"gradients takes Tensors, got {t!r}")
    graph = ys[0].graph
    if any(t.graph is not graph for t in ys + xs):
        raise GradientError("gradients: targets and sources come from different graphs")
    for t in ys + xs:
        if not dtypes.is_float(t.dtype):
            raise GradientError(f"gradients: tensor '{t.name}' has dtype {t.dtype}, not a float type")
    if grad_ys is None:
        grad_ys = [None] * len(ys)
    if len(grad_ys) != len(ys):
        raise GradientError(f"gradients: {len(grad_ys)} grad_ys for {len(ys)} targets")

    nodes = graph.nodes
    # Values a gradient can flow into: float outputs of ops downstream of xs, not past an
    # op whose derivative is zero (those with error=True stay in, so the path is reported).
    forward = {t.ref.node for t in xs}
    for n in nodes:
        grad = get_op(n.op).grad
        stops = isinstance(grad, NotDifferentiable) and not grad.error
        if (
            not stops
            and any(r.node in forward for r in n.inputs)
            and any(dtypes.is_float(t.dtype) for t in n.outputs)
        ):
            forward.add(n.name)
    backward = {t.ref.node for t in ys}
    for n in reversed(nodes):
        if n.name in backward:
            backward.update(r.node for r in n.inputs)
    relevant = forward & backward

    grads: dict[ValueRef, list[Tensor]] = {}
    with default_graph_scope(graph), name_scope(name), control_dependencies(None):
        for y, gy in zip(ys, grad_ys):
            if gy is None:
                gy = fill(y.shape, 1, y.dtype)
            elif not isinstance(gy, Tensor) or gy.type != y.type:
                raise GradientError(f"gradients: grad_ys for '{y.name}' must be a Tensor of type {y.type}")
            grads.setdefault(y.ref, []).append(gy)
        for node in reversed(nodes):
            if node.name not in relevant:
                continue
            outs = [node.ref(i) for i in range(len(node.outputs))]
            if not any(grads.get(r) for r in outs):
                continue
            opdef = get_op(node.op)
            wanted = [
                i
                for i, r in enumerate(node.inputs)
                if r.node in relevant and dtypes.is_float(graph.type_of(r).dtype)
            ]
            if not wanted:
                continue
            if isinstance(opdef.grad, NotDifferentiable):
                if opdef.grad.error:
                    raise GradientError(f"cannot differentiate {node.describe()}: {opdef.grad.reason}")
                continue
            with device(node.device):
                gys = tuple(_sum(grads.get(r, [])) for r in outs)
                for r, g in zip(outs, gys):
                    if g is not None:
                        grads[r] = [g]
                op = GradOp(
                    node,
                    tuple(Tensor(graph, r) for r in node.inputs),
                    tuple(Tensor(graph, r) for r in outs),
                    tuple(i in wanted for i in range(len(node.inputs))),
                )
                gxs = opdef.grad(op, gys)
            if len(gxs) != len(node.inputs):
                raise GradientError(
                    f"gradient rule of op {node.op} returned {len(gxs)} values for {len(node.inputs)} inputs"
                )
            for i in wanted:
                g = gxs[i]
                if g is None:
                    continue
                want = graph.type_of(node.inputs[i])
                if g.type != want:
                    raise GradientError(
                        f"gradient rule of op {node.op} gave {g.type} for input "
                        f"{i} of {node.describe()}, expected {want}"
                    )
                grads.setdefault(node.inputs[i], []).append(g)
        return [_sum(grads.get(x.ref, [])) for x in xs]
