"""The two models of a training binary (``Options.train``, ``flowc compile --train``): the
training step (the train op, reading only the inputs it needs) and the inference model (the
graph's other outputs that do not run it), each compiled through the pipeline's stages like
any model (pipeline.py ``Parts``) and rendered together by the backend's ``render_trainer``."""

from __future__ import annotations

from graphdef.ir import Graph
from graphdef.registry import get_op

from . import passes


def needed(graph: Graph, refs) -> Graph:
    """``graph`` cut down to what ``refs`` need, unused inputs too (the inference model of a
    training graph has no labels)."""
    return passes.prune(graph.with_outputs(refs), keep_inputs=False)


def split(graph: Graph, train) -> tuple[Graph, Graph | None]:
    """(the training step's graph, the inference graph or None): the train op ``train`` (a
    name or Tensor) and the graph's other outputs that do not run it."""
    from graphdef.builder import Tensor

    ref = train.ref if isinstance(train, Tensor) else graph.resolve(train)
    step = needed(graph, [ref])
    runs_train = {n.name for n in step.nodes if get_op(n.op).stateful} | {ref.node}
    others = [
        r for r in graph.outputs
        if r != ref and not any(n.name in runs_train for n in needed(graph, [r]).nodes)
    ]  # fmt: skip
    return step, (needed(graph, others) if others else None)
