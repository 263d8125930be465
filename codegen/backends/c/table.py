"""The C backend's table: how each op of the registry becomes C.

Three kinds of entries, filled by the modules of ``codegen/backends/c/ops/`` (one per op
family, like graphdef/ops/):

- ``Expr``: an elementwise op as one C expression per element. An elementwise op without an
  entry calls the runtime_c scalar function ``fc_<op>_<t>(operands..., attributes...)``
  (runtime_c/kernels/scalar*.inc), so adding such an op needs no line here.
- ``Kernel``: a step computed by runtime_c kernels. ``lower(step)`` decides everything
  (algorithm, kernel function names, sizes, tables) and returns a ``Call``: which template
  of templates/c/ops/ renders the step body and the plain data it prints.
- legalization: ``legalize(op)`` registers a rewrite of a node into the forms the kernels
  take (one reduced run, one resized axis, ...); it returns the new outputs, or None when the
  node already fits. The shared ``decompose`` pass applies them with graphdef's own
  decompositions.

Sources (placeholder, constant, variable) and aliases (reshape family) need no entry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from graphdef import dtypes
from graphdef.errors import UnsupportedError
from graphdef.ir import Node, TensorType
from graphdef.registry import ALIAS, COMPOSITE, ELEMENTWISE, SOURCE, get_op

from .cnames import COMPUTE, STORAGE, SUFFIX, c_literal


@dataclass(frozen=True)
class Expr:
    """``pattern(in_dtypes, out_dtype, attrs, lit)`` returns a format string over the operand
    expressions ``{0}``, ``{1}`` ..., the type suffix ``{t}`` (f32, i64, ... of the operands)
    and ``{err}`` (address of the step's status, for ops that can fail on data)."""

    pattern: Callable


@dataclass(frozen=True)
class Call:
    """A kernel step as the templates see it: ``template`` names templates/c/ops/<template>.c.j2
    (the step function's body), ``prelude`` (if any) templates/c/ops/<prelude>.prelude.c.j2
    (definitions before the function: plans, thread tasks, epilogues); ``k`` is the plain
    data they print, with ``k["unused"]`` the step function's parameters the body does not
    read; ``headers`` are the runtime_c kernel headers the step needs; ``parallel``: the step
    hands parts of its work to the thread pool (the step function then takes ``pool``);
    ``comm``: the step talks to other ranks (it then takes the run's MPI context ``mpi`` and
    its own request ``req``). A template with a folder (``mpi/step``) is found from
    templates/ rather than templates/c/ops/."""

    template: str
    k: dict
    headers: tuple[str, ...] = ()
    prelude: str | None = None
    parallel: bool = False
    comm: bool = False


@dataclass(frozen=True)
class Kernel:
    """``lower(step) -> Call``; ``scratch(ins, outs, attrs, isa)``: bytes of step-local memory
    the kernel needs on a build for GEMM ISA ``isa`` (placed in the arena, live during the step
    only), or None for none."""

    lower: Callable
    scratch: Callable | None = None


class TensorCtx(TensorType):
    """A tensor type as templates see it: also its kernel suffix and C storage type."""

    @property
    def sfx(self) -> str:
        return SUFFIX[self.dtype]

    @property
    def ctype(self) -> str:
        return STORAGE[self.dtype]

    @property
    def compute(self) -> str:
        return COMPUTE[self.dtype]

    @classmethod
    def of(cls, t: TensorType) -> TensorCtx:
        return cls(t.shape, t.dtype)


@dataclass
class Step:
    """What a ``Kernel.lower`` sees of one step: the node, its input and output types, the C
    names of its input pointers ``x`` and output pointers ``y``, ``func``, the name of the
    step function (a prefix for the step's own definitions), and ``isa``, the float32 GEMM
    kernel the build's compiler selects (runtime_c/kernels/sgemm.h)."""

    node: Node
    ins: list[TensorCtx]
    outs: list[TensorCtx]
    x: list[str]
    y: list[str]
    func: str
    isa: str = "scalar"

    @property
    def attrs(self):
        return self.node.attrs

    @staticmethod
    def lit(value, dtype: str) -> str:
        return c_literal(value, dtype)

    def fn(self, base: str, dtype: str | None = None) -> str:
        """A typed runtime_c kernel name: ``fn("fc_softmax")`` -> ``fc_softmax_f32``."""
        return f"{base}_{SUFFIX[dtype or self.ins[0].dtype]}"

    def arg(self, index: int) -> str:
        """Input pointer ``index``, or NULL when the node has no such (optional) input."""
        return self.x[index] if index < len(self.x) else "NULL"


EXPRS: dict[str, Expr] = {}
KERNELS: dict[str, Kernel] = {}
LEGALIZE: dict[str, Callable] = {}


def expr(op: str, pattern: Callable) -> None:
    """Register the C expression of elementwise ``op``."""
    _unique(op)
    EXPRS[op] = Expr(pattern)


def kernel(*ops: str, scratch: Callable | None = None):
    """Decorator: ``lower(step) -> Call`` is how ``ops`` become C."""

    def register(fn):
        for op in ops:
            _unique(op)
            KERNELS[op] = Kernel(fn, scratch)
        return fn

    return register


def legalize(*ops: str):
    """Decorator: a rewrite of ``ops`` into forms the kernels take (see the module docstring)."""

    def register(fn):
        for op in ops:
            LEGALIZE[op] = fn
        return fn

    return register


def _unique(op: str) -> None:
    if op in EXPRS or op in KERNELS:
        raise ValueError(f"op {op} has two C lowerings")


def call(fn: str, *attrs: str, err_for_ints: bool = False) -> Callable:
    """The pattern ``fn_<t>(operands..., attrs...)``, a scalar function of runtime_c/kernels/scalar.h.

    Integer versions of ops that can fail on data (division, power) also take ``&err``.
    """

    def pattern(ins, out, a, lit):
        args = [f"{{{i}}}" for i in range(len(ins))] + [lit(a[k], ins[-1]) for k in attrs]
        if err_for_ints and dtypes.is_int(ins[-1]):
            args.append("{err}")
        return f"{fn}_{{t}}({', '.join(args)})"

    return pattern


def expr_of(op: str) -> Expr:
    """The C expression of an elementwise op: its entry, or the scalar-function call."""
    if op in EXPRS:
        return EXPRS[op]
    opdef = get_op(op)
    if opdef.kind != ELEMENTWISE:
        raise UnsupportedError(f"op {op} is not elementwise")
    return Expr(call(f"fc_{op}", *opdef.attrs))


def kernel_of(op: str) -> Kernel:
    try:
        return KERNELS[op]
    except KeyError:
        raise UnsupportedError(f"op {op} has no C kernel") from None


def scratch_bytes(node: Node, ins: list[TensorType], isa: str) -> int:
    """Bytes of step-local memory the C step of ``node`` needs on a build for ``isa`` (0 for none)."""
    entry = KERNELS.get(node.op)
    if entry is None or entry.scratch is None:
        return 0
    return entry.scratch(ins, node.outputs, node.attrs, isa)


def lowering(op: str) -> str:
    """How the C backend computes ``op``: "expr", "kernel", "none" (sources, aliases,
    composites: nothing of their own) or "missing"."""
    kind = get_op(op).kind
    if kind in (SOURCE, ALIAS) or (kind == COMPOSITE and get_op(op).decompose):
        return "none"
    if kind == ELEMENTWISE:
        return "expr"
    return "kernel" if op in KERNELS else "missing"
