"""Elementwise ops in C: the loop of one step (a single op or a fused program) and the C
expressions of the ops that are not a plain ``fc_<op>_<t>(...)`` call.

The others (add, exp, sin, leaky_relu, ...) need no line here: see ``table.expr_of``.
"""

from __future__ import annotations

import math
import re

import numpy as np

from graphdef import dtypes
from graphdef.ir import Attrs, TensorType
from graphdef.ops.elementwise import clip_bounds
from graphdef.ops.fused import program_of
from graphdef.registry import get_op

from ....render import layout as L
from ....render.spelling import COMPUTE, SUFFIX, c_literal
from ..op_table import Call, call, expr, expr_of


# ----------------------------------------------------------------------------- loops
def offset_expr(dims, in_strides, out_strides, var: str) -> str:
    """C expression of an input's element offset at (collapsed) output position ``var``."""
    total = math.prod(dims)
    terms = []
    for d, s_in, s_out in zip(dims, in_strides, out_strides):
        if s_in == 0 or d == 1:
            continue
        t = var if s_out == 1 else f"{var} / {s_out}"
        if s_out * d != total:
            t = f"({t}) % {d}"
        terms.append(t if s_in == 1 else f"({t}) * {s_in}")
    return " + ".join(terms) or "0"


def loop_nest(in_shapes, out_shape) -> tuple[int, int, list[str], list[bool]]:
    """(outer, inner, base offset per input at outer index ``o``, inner stride is 1 per input).

    Output axes are merged as far as every input allows; the loop over the last merged axis
    is contiguous in the output and in each input that is not broadcast along it, so the C
    compiler can vectorize it. Broadcast inputs get their offset once per outer step.
    """
    out_shape = list(out_shape) or [1]
    strides = [L.broadcast_strides(s, out_shape) if s else [0] * len(out_shape) for s in in_shapes]
    dims, merged = L.merge_dims(out_shape, L.strides(out_shape), *strides)
    dims = dims or [1]
    merged = [m or [0] for m in merged]
    inner = dims[-1]
    outer_dims = dims[:-1]
    out_outer = [s // inner for s in merged[0][:-1]]  # output strides in units of inner rows
    bases = [
        ("0" if math.prod(outer_dims) == 1 else f"o * {inner}")
        if m[:-1] == merged[0][:-1]
        else offset_expr(outer_dims, m[:-1], out_outer, "o")
        for m in merged[1:]
    ]
    unit = [m[-1] == 1 for m in merged[1:]]
    return math.prod(outer_dims), inner, bases, unit


def elementwise_step(s) -> Call:
    """An elementwise step (one op, or a fused program) as one loop nest over the output
    (templates/c/ops/elementwise.c.j2): loop bounds, and the locals of one iteration: loads,
    then one value per instruction."""
    node, ins, out, x = s.node, s.ins, s.outs[0], s.x
    outer, inner, bases, unit = loop_nest([t.shape for t in ins], out.shape)
    values, types = [], list(ins)
    for j, t in enumerate(ins):
        base = "" if bases[j] == "0" else f"b{j} + "
        load = f"{x[j]}[{base}i]" if unit[j] else f"{x[j]}[{base.rstrip(' +') or '0'}]"
        values.append(
            {
                "ctype": COMPUTE[t.dtype],
                "name": f"a{j}",
                "expr": f"fc_h2f({load})" if t.dtype == "float16" else load,
            }
        )
    program_locals(program_of(node), types, values)
    last = values[-1]["name"]
    # an input no instruction reads (assign's variable operand) is not loaded at all: an unused
    # local is an error under -Werror
    used = " ".join(v["expr"] for v in values[len(ins) :]) + " " + last
    read = [bool(re.search(rf"\b{v['name']}\b", used)) for v in values[: len(ins)]]
    values = [v for v, r in zip(values, read) if r] + values[len(ins) :]
    k = {
        "unused": [x[j] for j, r in enumerate(read) if not r],
        **_bounds(s, outer, inner),
        "inner": inner,
        "bases": [{"name": f"b{j}", "expr": b} for j, b in enumerate(bases) if b != "0" and read[j]],
        "locals": values,
        "may_fail": any("&err" in v["expr"] for v in values),
        "store": f"fc_f2h({last})" if out.dtype == "float16" else last,
        "y": s.y[0],
        "ctype": out.ctype,
    }
    return Call("elementwise", k)


def _bounds(s, outer: int, inner: int) -> dict:
    """The loops' bounds: every row and column, or (a split step, table.Split over the output's
    elements) the rows and columns of elements [lo, hi)."""
    if not s.split:
        return {"rows": ["0", str(outer)], "cols": ["0", str(inner)], "clip": []}
    if outer == 1:
        return {"rows": ["0", "1"], "cols": ["lo", "hi"], "clip": []}
    start = f"o * {inner}"
    return {
        "rows": [f"lo / {inner}", f"(hi + {inner - 1}) / {inner}"],
        "cols": ["i0", "i1"],
        "clip": [
            f"i0 = {start} < lo ? lo - {start} : 0",
            f"i1 = hi - {start} < {inner} ? hi - {start} : {inner}",
        ],
    }


def program_locals(program, types: list[TensorType], values: list[dict]) -> None:
    """Append to ``values`` (the C locals of the program's inputs, typed ``types``) one local
    per instruction of an elementwise program."""
    types, n_in = list(types), len(types)
    for k, (op, operands, attrs) in enumerate(program):
        opdef, a = get_op(op), Attrs(attrs)
        args = [types[i] for i in operands]
        t = opdef.infer_types(args, a)[0]
        if op == "fill":  # an inline scalar: fill with shape ()
            text = c_literal(a["value"], a["dtype"])
        elif op == "cast" and _clipped_to_int32(program, operands[0] - n_in, args[0].dtype, a["to"]):
            # a quantize step's cast: its value is an int32 or NaN, so the int64 route (which
            # keeps the loop from vectorizing well) gives the same as int32's
            v = values[operands[0]]["name"]
            text = f"fc_to_{SUFFIX[a['to']]}({v} == {v} ? (int32_t)({v}) : 0)"
        else:
            pattern = expr_of(op).pattern([s.dtype for s in args], t.dtype, a, c_literal)
            names = [values[i]["name"] for i in operands]
            text = pattern.format(*names, t=SUFFIX[args[-1].dtype], err="&err")
            if t.dtype == "float16":
                text = f"fc_narrow_f16({text})"
        values.append({"ctype": COMPUTE[t.dtype], "name": f"v{k}", "expr": text})
        types.append(t)


def _clipped_to_int32(program, at: int, src: str, dst: str) -> bool:
    """Whether instruction ``at`` of the program (a cast's operand, -1 or less for an input) is
    a clip of a float to bounds inside int32's range, cast to an integer of at most 32 bits."""
    if at < 0 or not dtypes.is_float(src) or not dtypes.is_int(dst) or dtypes.itemsize(dst) > 4:
        return False
    op, _, attrs = program[at]
    if op != "clip":
        return False
    a = Attrs(attrs)
    # the bounds as C holds them (float32 literals but for float64)
    lo, hi = (float(np.float32(v)) if src != "float64" else v for v in (a["min"], a["max"]))
    return -(2.0**31) <= lo <= hi < 2.0**31


# ----------------------------------------------------------------------------- expressions


def infix(op: str):
    """A comparison or logical op: ``(fc_bool)({0} op {1})``."""
    return lambda ins, out, a, lit: f"(fc_bool)({{0}} {op} {{1}})"


for _op, _c in (
    ("equal", "=="),
    ("less", "<"),
    ("greater", ">"),
    ("less_equal", "<="),
    ("greater_equal", ">="),
    ("logical_and", "&&"),
    ("logical_or", "||"),
    ("logical_xor", "!="),
):
    expr(_op, infix(_c))

expr("div", call("fc_div", err_for_ints=True))
expr("pow", call("fc_pow", err_for_ints=True))
expr("where", lambda ins, out, a, lit: "({0} ? {1} : {2})")
expr("loop_copy", lambda ins, out, a, lit: "{0}")
expr("logical_not", lambda ins, out, a, lit: "(fc_bool)!{0}")
expr("gelu", lambda ins, out, a, lit: f"fc_gelu{'_tanh' if a['approximate'] == 'tanh' else ''}_{{t}}({{0}})")


def _clip(ins, out, a, lit):
    dtype = ins[0]
    if dtypes.is_float(dtype):
        return f"fc_clip_{{t}}({{0}}, {lit(a['min'], dtype)}, {lit(a['max'], dtype)})"
    stored = clip_bounds(dtype, a)
    bounds = ", ".join(lit(v, "float64") for v in (a["min"], a["max"]))
    return f"fc_clip_{{t}}({{0}}, {bounds}, {lit(stored[0], dtype)}, {lit(stored[1], dtype)})"


expr("clip", _clip)


def _cast(ins, out, a, lit):
    """float -> int truncates (NaN -> 0, saturating at int64, then wrapping); int -> int wraps."""
    src, dst = ins[0], a["to"]
    if dst == "bool":
        return "(fc_bool)({0} != 0)"
    if dtypes.is_float(dst):
        return f"({'double' if dst == 'float64' else 'float'})({{0}})"
    if dtypes.is_float(src):
        return f"fc_to_{SUFFIX[dst]}(fc_f2i64((double)({{0}})))"
    return f"fc_to_{SUFFIX[dst]}((int64_t)({{0}}))"


expr("cast", _cast)
expr(
    "isinf",
    lambda ins, out, a, lit: (
        f"fc_isinf_{{t}}({{0}}, {int(a['detect_positive'])}, {int(a['detect_negative'])})"
    ),
)


def _mod(ins, out, a, lit):
    fn = "fc_fmod" if a["fmod"] else "fc_mod"
    return f"{fn}_{{t}}({{0}}, {{1}}, {{err}})" if dtypes.is_int(ins[0]) else f"{fn}_{{t}}({{0}}, {{1}})"


expr("mod", _mod)
expr("bitshift", lambda ins, out, a, lit: f"fc_shift_{a['direction']}_{{t}}({{0}}, {{1}})")

# assign ops: the new value of the variable (stored into the state when the run ends)
expr("assign", lambda ins, out, a, lit: "{1}")
expr("assign_add", call("fc_add"))
expr("assign_sub", call("fc_sub"))
