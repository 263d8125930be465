"""The op registry: one ``OpDef`` record per op, holding every facet of that op.

A record names its inputs and attribute schema, its ``kind`` (source, alias, elementwise,
kernel or composite: what every backend needs to know), and gives the shape/dtype rule
(``infer``), the numpy reference (``ref``), the gradient rule (``grad``, or an explicit
``NotDifferentiable``), an optional ``resolve`` hook that fills attribute defaults that
depend on input shapes (so a node's attributes are always complete), an optional
decomposition into other ops (``decompose``), a FLOP count for the cost model, and its test
cases (``examples``: every op-wide test is built from them). How a backend lowers an op is
the backend's business (codegen/backends/<name>/).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from . import dtypes
from .errors import AttrError, ShapeError, UnsupportedError
from .ir import TensorType

REQUIRED = object()


@dataclass(frozen=True)
class Attr:
    """Schema of one attribute: its kind, default (``REQUIRED`` if none) and choices.

    Kinds: ``int float bool str dtype ints floats any graph`` (graph: a subgraph, an immutable
    Graph). A default of ``None`` means "filled in by the op's ``resolve`` hook from the input
    shapes".
    """

    kind: str
    default: object = REQUIRED
    choices: tuple | None = None

    def coerce(self, op: str, name: str, value):
        if value is None and self.default is None:
            return None
        try:
            out = _COERCE[self.kind](value)
        except (TypeError, ValueError):
            raise AttrError(f"attribute '{name}' expects {self.kind}, got {value!r}") from None
        if self.choices is not None and out not in self.choices:
            raise AttrError(
                f"attribute '{name}' must be one of {', '.join(map(str, self.choices))}, got {value!r}"
            )
        return out


def _as_int(v):
    if isinstance(v, bool) or not float(v).is_integer():
        raise TypeError
    return int(v)


def _as_ints(v):
    if isinstance(v, (str, bytes)):
        raise TypeError
    return tuple(_as_int(x) for x in v)


def _as_bool(v):
    if v in (0, 1, True, False):
        return bool(v)
    raise TypeError


def _as_str(v):
    if not isinstance(v, str):
        raise TypeError
    return v


_COERCE = {
    "int": _as_int,
    "float": lambda v: float(v) if not isinstance(v, (bool, str)) else _raise(),
    "bool": _as_bool,
    "str": _as_str,
    "dtype": dtypes.as_dtype,
    "ints": _as_ints,
    "floats": lambda v: tuple(float(x) for x in v) if not isinstance(v, str) else _raise(),
    "any": lambda v: v,
    "graph": lambda v: _as_graph(v),
}


def _as_graph(v):
    from .ir import Graph

    if not isinstance(v, Graph) or hasattr(v, "add"):
        raise TypeError
    return v


def _raise():
    raise TypeError


@dataclass(frozen=True)
class NotDifferentiable:
    """Declares that an op has no gradient rule.

    ``error=False``: the derivative is zero or undefined (comparisons, argmax, integer
    ops, ``stop_gradient``); gradients stop here. ``error=True``: a gradient would exist
    but flowc does not build it; ``gradients`` raises if the path needs it.
    """

    reason: str
    error: bool = False


NOT_DIFFERENTIABLE = NotDifferentiable("derivative is zero or undefined")


@dataclass(frozen=True)
class Sample:
    """A random input of an example: ``shape``, ``dtype`` and the range it is drawn from
    (uniform; integers from ``low`` to ``high`` inclusive; bool: half true). Values are
    reproducible: the generator is seeded by the op and the example."""

    shape: tuple[int, ...]
    dtype: str = "float32"
    low: float = -3.0
    high: float = 3.0


@dataclass(frozen=True)
class Var:
    """An input of an example that is a variable (the first input of an assign op)."""

    value: object


@dataclass(frozen=True)
class Example:
    """One test case of an op, kept with its record; every test that needs cases of every
    op (the reference checks, gradient checks, the C backend's checks, the zoo graph) builds
    them from here (``graphdef.examples``).

    ``inputs``: arrays, ``Sample``s or a ``Var``, fed as placeholders (variables for Var);
    ``attrs``: the node's attributes; ``expect``: an independent reference computed from the
    input arrays (for elementwise ops, per-element Python math), or None where the op's family
    test module checks the values; ``grad``: check the gradient on this case by finite
    differences (for differentiable ops; off where the case sits on a kink).
    """

    inputs: tuple
    attrs: Mapping = field(default_factory=dict)
    expect: Callable | None = None
    grad: bool = True


# What kind of computation an op is, for every backend alike (graphdef says nothing about how
# a backend lowers it: each backend keeps its own table, see codegen/backends/).
SOURCE = "source"  # data, not computed: placeholder, constant, variable
ALIAS = "alias"  # the output is the input's memory seen with another shape (reshape family)
ELEMENTWISE = "elementwise"  # each output element from the inputs' elements at its broadcast position
KERNEL = "kernel"  # any other computation, done by a backend's kernel
COMPOSITE = "composite"  # defined by its decomposition into other ops only
COMMUNICATION = "communication"  # moves data between ranks (send, recv): its reference is multi-rank
KINDS = (SOURCE, ALIAS, ELEMENTWISE, KERNEL, COMPOSITE, COMMUNICATION)


@dataclass(frozen=True)
class OpDef:
    """Every facet of one op that does not depend on a target.

    ``kind`` is one of ``KINDS``; ``examples`` its test cases (see ``Example``);
    ``decompose`` (given a view of the node: ``.node``, ``.inputs`` as builder Tensors,
    ``.attrs``) returns the op rebuilt from other ops, or None when the node stays as it is;
    ``flops`` counts floating-point operations for the cost model (default: one per output
    element); ``check_constants(in_types, attrs, {input position: array})`` checks inputs known
    when compiling (constant indices in range) and raises a FlowcError naming the bad value.
    ``in_place``: the output is input 0's memory, changed by the step (a receive completing
    into its buffer); ``holds_inputs``: the step's inputs stay in use until the run ends (an
    asynchronous send reads its buffer until the final wait). ``control``: a piece of a loop or
    branch the compiler makes (codegen/control.py): never folded, merged or moved across its
    region; ``passes_through``: output k is input k's memory (a loop's carried values).
    """

    name: str
    inputs: tuple[str, ...]
    infer: Callable
    ref: Callable
    grad: Callable | NotDifferentiable
    kind: str
    attrs: Mapping[str, Attr] = field(default_factory=dict)
    resolve: Callable | None = None
    decompose: Callable | None = None
    flops: Callable | None = None
    stateful: bool = False
    doc: str = ""
    examples: tuple[Example, ...] = ()
    check_constants: Callable | None = None
    in_place: bool = False
    holds_inputs: bool = False
    control: bool = False
    passes_through: bool = False

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"op {self.name}: kind {self.kind!r} is not one of {', '.join(KINDS)}")

    @property
    def elementwise(self) -> bool:
        return self.kind == ELEMENTWISE

    @property
    def min_inputs(self) -> int:
        return sum(1 for i in self.inputs if not i.endswith("?"))  # "xs*": one or more; "xs*?": any

    @property
    def max_inputs(self) -> float:
        return float("inf") if any("*" in i for i in self.inputs) else len(self.inputs)

    def check_arity(self, n: int, where: str) -> None:
        if not self.min_inputs <= n <= self.max_inputs:
            want = (
                f"at least {self.min_inputs}"
                if self.max_inputs == float("inf")
                else str(self.min_inputs)
                if self.min_inputs == self.max_inputs
                else f"{self.min_inputs} to {self.max_inputs}"
            )
            raise ShapeError(f"{where}: op {self.name} takes {want} input(s), got {n}")

    def normalize_attrs(self, given: Mapping) -> dict:
        """Check names and kinds, fill static defaults (``resolve`` fills the rest)."""
        unknown = set(given) - set(self.attrs)
        if unknown:
            raise AttrError(
                f"unknown attribute(s) {', '.join(sorted(unknown))}; known: {', '.join(self.attrs) or 'none'}"
            )
        out = {}
        for name, spec in self.attrs.items():
            if name in given:
                out[name] = spec.coerce(self.name, name, given[name])
            elif spec.default is REQUIRED:
                raise AttrError(f"missing required attribute '{name}'")
            else:
                out[name] = spec.default
        return out

    def infer_types(self, types: list[TensorType], attrs: Mapping) -> tuple[TensorType, ...]:
        out = self.infer(types, attrs)
        return (out,) if isinstance(out, TensorType) else tuple(out)


_REGISTRY: dict[str, OpDef] = {}


def register(opdef: OpDef) -> OpDef:
    if opdef.name in _REGISTRY:
        raise ValueError(f"op {opdef.name} registered twice")
    _REGISTRY[opdef.name] = opdef
    return opdef


def defop(name: str, inputs, infer, ref, grad, **kw) -> OpDef:
    """Register an op; see ``OpDef`` for the fields."""
    return register(OpDef(name=name, inputs=tuple(inputs), infer=infer, ref=ref, grad=grad, **kw))


def get_op(name: str) -> OpDef:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnsupportedError(f"unknown op '{name}'") from None


def all_ops() -> dict[str, OpDef]:
    return dict(_REGISTRY)
