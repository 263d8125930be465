"""The test cases kept in the op records (``OpDef.examples``), as runnable graphs.

``example_graph(op, index)`` builds one case: a graph whose placeholders (or variables) hold
the case's inputs, the op node, and the feeds; ``every_example()`` lists (op, index) over the
registry. The reference checks, gradient checks, the C backend's tests and the zoo graph of
the tests all come from these, so adding an op with its examples adds it to all of them.

>>> g, feeds, outs = example_graph("add", 0)
>>> [n.op for n in g.nodes], sorted(feeds)
(['placeholder', 'placeholder', 'add'], ['in0', 'in1'])
"""

from __future__ import annotations

import zlib

import numpy as np

from . import builder, dtypes
from .registry import Example, Sample, Var, all_ops, get_op


def value(sample, seed: int) -> np.ndarray:
    """The array of an example input (a Sample drawn reproducibly, or the array as given)."""
    if isinstance(sample, Var):
        sample = sample.value
    if not isinstance(sample, Sample):
        return np.asarray(sample)
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtypes.np_dtype(sample.dtype))
    if dt == np.bool_:
        return rng.random(sample.shape) < 0.5
    if dt.kind in "iu":
        return rng.integers(int(sample.low), int(sample.high), sample.shape, endpoint=True).astype(dt)
    return rng.uniform(sample.low, sample.high, sample.shape).astype(dt)


def seed(op: str, index: int, position: int) -> int:
    return zlib.crc32(f"{op}:{index}:{position}".encode())


def inputs(op: str, index: int) -> list[np.ndarray]:
    """The input arrays of example ``index`` of ``op``."""
    ex = get_op(op).examples[index]
    return [value(x, seed(op, index, k)) for k, x in enumerate(ex.inputs)]


def add_example(op: str, index: int, prefix: str = "in", arrays=None):
    """Build example ``index`` of ``op`` into the default graph: returns (outputs, feeds).
    Placeholders are named ``<prefix><k>`` (inside the current name scope; the feeds are keyed
    by the full names); ``arrays`` replaces the input values (same shapes
    and dtypes, e.g. float64 copies for a gradient check)."""
    ex: Example = get_op(op).examples[index]
    arrays = inputs(op, index) if arrays is None else arrays
    tensors, feeds = [], {}
    for k, (spec, a) in enumerate(zip(ex.inputs, arrays)):
        name = f"{prefix}{k}"
        if isinstance(spec, Var):
            tensors.append(builder.variable(name, a))
        else:
            t = builder.placeholder(name, a.shape, dtypes.as_dtype(a.dtype))
            tensors.append(t)
            feeds[t.ref.node] = a
    out = builder.apply(op, tensors, None, **dict(ex.attrs))
    return (out if isinstance(out, tuple) else (out,)), feeds


def example_graph(op: str, index: int, arrays=None):
    """(graph, feeds, output names) of example ``index`` of ``op`` alone."""
    g = builder.Graph(f"{op}_{index}")
    with g:
        outs, feeds = add_example(op, index, arrays=arrays)
        g.set_outputs(*outs)
    return g, feeds, [str(o.ref) for o in outs]


def examples_graph(op: str):
    """(graph, feeds, output names) of every example of ``op`` side by side in one graph."""
    g, feeds, names = builder.Graph(f"{op}_examples"), {}, []
    with g:
        for i in range(len(get_op(op).examples)):
            outs, f = add_example(op, i, prefix=f"x{i}_")
            feeds.update(f)
            names += [str(o.ref) for o in outs]
        g.set_outputs(*names)
    return g, feeds, names


def every_example() -> list[tuple[str, int]]:
    """(op, index) of every example of every registered op, sorted by op."""
    return [(name, i) for name, op in sorted(all_ops().items()) for i in range(len(op.examples))]
