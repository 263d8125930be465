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

Threads: every elementwise step, and a kernel with a ``split``, describes its work as a
``Split``, independent units along an outer range (elements, rows, planes). ``parts_of``
decides from the cost model (``PART_WORK``) and the build's threads how many parts of the
model's pool take the step; its lowering then sees ``Step.parts`` and renders units [lo, hi),
and emit.py runs the parts. (Products split themselves: gemm_lowering.py sets their ``parts``.)

Sources (placeholder, constant, variable) and aliases (reshape family) need no entry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from graphdef import dtypes
from graphdef.errors import UnsupportedError
from graphdef.ir import Node, TensorType
from graphdef.registry import ALIAS, COMPOSITE, ELEMENTWISE, SOURCE, get_op

from ...render.spelling import SUFFIX, TensorCtx, c_literal
from ...render.splits import Split, element_ops, parts_for, work


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
    hands parts of its work to the thread pool itself (products; the step function then takes
    ``pool``; a step split by its ``Kernel.split`` is run on the pool by emit.py instead);
    ``comm``: the step talks to other ranks (it then takes the run's MPI context ``mpi`` and
    its own request ``req``). A template with a folder (``mpi/ops/send``) is found from
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
    only), or None for none; with parts (``split``), that of one part. ``split(ins, outs,
    attrs)``: the step's ``Split`` when its outer range can be split over threads, else None."""

    lower: Callable
    scratch: Callable | None = None
    split: Callable | None = None


@dataclass
class Step:
    """What a ``Kernel.lower`` sees of one step: the node, its input and output types, the C
    names of its input pointers ``x`` and output pointers ``y``, ``func``, the name of the
    step function (a prefix for the step's own definitions), ``isa``, the float32 GEMM
    kernel the build's compiler selects (runtime_c/kernels/sgemm.h), and ``parts``, how many
    parts of the thread pool run the step (``parts_of``; more than 1: render units [lo, hi))."""

    node: Node
    ins: list[TensorCtx]
    outs: list[TensorCtx]
    x: list[str]
    y: list[str]
    func: str
    isa: str = "scalar"
    parts: int = 1

    @property
    def attrs(self):
        return self.node.attrs

    # A split step (``parts`` > 1) renders the units [lo, hi) of its Split, ``lo`` and ``hi``
    # being parameters of the C function it is rendered into (emit.py); one part renders all.
    @property
    def split(self) -> bool:
        return self.parts > 1

    def at(self, ptr: str, per_unit: int) -> str:
        """Pointer ``ptr`` advanced to unit ``lo`` (``per_unit`` elements per unit)."""
        return f"{ptr} + lo * {per_unit}" if self.split else ptr

    def count(self, units: int) -> str:
        """The number of units this rendering computes: all ``units``, or ``hi - lo``."""
        return "hi - lo" if self.split else str(units)

    def span(self, units: int) -> list[str]:
        """The bounds (lo, hi) of this rendering's units, as C expressions."""
        return ["lo", "hi"] if self.split else ["0", str(units)]

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


def kernel(*ops: str, scratch: Callable | None = None, split: Callable | None = None):
    """Decorator: ``lower(step) -> Call`` is how ``ops`` become C."""

    def register(fn):
        for op in ops:
            _unique(op)
            KERNELS[op] = Kernel(fn, scratch, split)
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


def supports(op: str) -> bool:
    """Whether the C backend has code for a step of ``op``: an elementwise op (its expression
    or scalar function in the shared loop), an op with a kernel lowering in KERNELS, or a piece
    of a loop or branch (C of the run function: control_steps.py)."""
    return op in EXPRS or op in KERNELS or get_op(op).kind == ELEMENTWISE or get_op(op).control


def kernel_of(op: str) -> Kernel:
    try:
        return KERNELS[op]
    except KeyError:
        raise UnsupportedError(f"op {op} has no C kernel") from None


def scratch_bytes(node: Node, ins: list[TensorType], isa: str, threads: int = 1) -> int:
    """Bytes of step-local memory the C step of ``node`` needs on a build for ``isa`` with
    ``threads`` threads (0 for none): each part of a split step has its own (``part_scratch``)."""
    entry = KERNELS.get(node.op)
    if entry is None or entry.scratch is None:
        return 0
    parts = parts_of(node, ins, threads)
    return part_scratch(node, ins, isa, parts) * parts


def part_scratch(node: Node, ins: list[TensorType], isa: str, parts: int) -> int:
    """Scratch bytes of one part of a step split in ``parts`` (rounded up to 64 bytes, a cache
    line, when there are several, so that no two threads write the same line)."""
    entry = KERNELS.get(node.op)
    if entry is None or entry.scratch is None:
        return 0
    nbytes = entry.scratch(ins, node.outputs, node.attrs, isa)
    return -(-nbytes // 64) * 64 if parts > 1 else nbytes


# ----------------------------------------------------------------------------- threads


def split_of(node: Node, ins: list[TensorType], elementwise: bool | None = None) -> Split | None:
    """How the step of ``node`` splits over threads: elementwise steps by blocks of elements,
    kernels by their ``split`` (None: the step is not split). ``elementwise``: whether its op
    is, when the caller knows (else read from the op's record)."""
    if elementwise is None:
        elementwise = get_op(node.op).kind == ELEMENTWISE
    if elementwise:
        out = node.outputs[0]
        return Split(out.size, work(ins, node.outputs, out.size * element_ops(node)), grain=16)
    entry = KERNELS.get(node.op)
    if entry is None or entry.split is None:
        return None
    return entry.split(ins, node.outputs, node.attrs)


def parts_of(node: Node, ins: list[TensorType], threads: int) -> int:
    """Parts of the step of ``node`` on a build with ``threads`` threads (1: not split)."""
    return parts_for(split_of(node, ins), threads) if threads > 1 else 1


def lowering(op: str) -> str:
    """How the C backend computes ``op``: "expr", "kernel", "control" (a loop or branch: C of
    the run function, codegen/control.py), "none" (sources, aliases, composites: nothing of
    their own) or "missing"."""
    if get_op(op).control or op in ("while_loop", "cond"):
        return "control"
    kind = get_op(op).kind
    if kind in (SOURCE, ALIAS) or (kind == COMPOSITE and get_op(op).decompose):
        return "none"
    if kind == ELEMENTWISE:
        return "expr"
    return "kernel" if op in KERNELS else "missing"
