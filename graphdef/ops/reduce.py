"""Reductions over axes (sum, mean, max, min, prod) and argmax / argmin."""

from __future__ import annotations

import math

import numpy as np

from .. import dtypes
from ..builder import apply, operand
from ..errors import ShapeError
from ..ir import TensorType
from ..registry import KERNEL, NOT_DIFFERENTIABLE, Attr, Example, Sample, defop
from ._util import check_dtype, norm_axes, resolve_axis

_REDUCE_ATTRS = {"axes": Attr("ints", None), "keepdims": Attr("bool", False)}


def _resolve_axes(types, attrs):
    rank = types[0].rank
    axes = tuple(range(rank)) if attrs["axes"] is None else norm_axes(attrs["axes"], rank)
    return {**attrs, "axes": tuple(sorted(axes))}


def reduced_shape(shape, axes, keepdims) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _reduce_infer(allowed, nonempty=False):
    def infer(types, attrs):
        x = types[0]
        check_dtype(x, allowed)
        if nonempty and any(x.shape[a] == 0 for a in attrs["axes"]):
            raise ShapeError(f"cannot reduce over an empty axis of shape {x.shape}")
        return TensorType(reduced_shape(x.shape, attrs["axes"], attrs["keepdims"]), x.dtype)

    return infer


def _acc(x):
    """Accumulate float16 in float32, as the C kernels do."""
    return x.astype(np.float32) if x.dtype == np.float16 else x


def _reduce_ref(fn):
    def ref(xs, attrs):
        x = xs[0]
        out = fn(_acc(x), axis=attrs["axes"], keepdims=attrs["keepdims"])
        return np.asarray(out).astype(x.dtype, copy=False)

    return ref


def _keep(op, t):
    """Reshape a reduced tensor to the keepdims shape of the node's input."""
    from .shape import reshape

    x = op.inputs[0]
    return reshape(t, reduced_shape(x.shape, op.attrs["axes"], True))


def _spread(op, t):
    from .shape import expand

    return expand(_keep(op, t), op.inputs[0].shape)


def _g_sum(op, gys):
    return (_spread(op, gys[0]),)


def _g_mean(op, gys):
    x = op.inputs[0]
    count = math.prod(x.shape[a] for a in op.attrs["axes"])
    from .elementwise import div

    return (div(_spread(op, gys[0]), float(count)),)


def _g_extreme(op, gys):
    from .elementwise import cast, div, equal, mul

    x = op.inputs[0]
    mask = cast(equal(x, _spread(op, op.outputs[0])), x.dtype)
    count = reduce_sum(mask, op.attrs["axes"], keepdims=True)
    return (mul(_spread(op, gys[0]), div(mask, count)),)


def _g_prod(op, gys):
    # Exact where x has no zeros; a zero makes the result inf/nan, never a silent zero.
    from .elementwise import div, mul

    return (mul(_spread(op, gys[0]), div(_spread(op, op.outputs[0]), op.inputs[0])),)


def _mean(x, axis, keepdims):
    return np.mean(x, axis=axis, keepdims=keepdims)


def runs(shape, axes) -> list[list[int]]:
    """Reduced axes grouped into runs of neighbours (size-1 axes are transparent)."""
    out: list[list[int]] = []
    last = None
    for a in axes:
        if shape[a] == 1:
            continue
        between = range(last + 1, a) if last is not None else ()
        if out and all(shape[b] == 1 for b in between):
            out[-1].append(a)
        else:
            out.append([a])
        last = a
    return out


def _flops_reduce(ins, outs, attrs):
    return ins[0].size


def _reduce_examples(expect_fn, allowed, low=-3.0, high=3.0, int_range=(-9, 9)) -> tuple[Example, ...]:
    """Examples of a reduction: one axis, several axes, a negative axis, all axes (``axes``
    absent), with and without keepdims, in float32, float64, float16 (expected from float64,
    as the kernels accumulate float16 in float32) and int32 where the op takes it; checked
    against ``expect_fn(x, axis=, keepdims=)`` (numpy's own reduction)."""

    def expect(axes, keepdims):
        def fn(x):
            wide = x.astype(np.float64) if x.dtype == np.float16 else x
            return expect_fn(wide, axis=axes, keepdims=keepdims)

        return fn

    def case(shape, dtype, axes, keepdims, lo=low, hi=high):
        attrs = {"keepdims": keepdims} if axes is None else {"axes": axes, "keepdims": keepdims}
        return Example(
            (Sample(shape, dtype, lo, hi),), attrs, expect(axes, keepdims), grad=dtype == "float32"
        )

    out = [
        case((3, 4), "float32", (1,), False),
        case((2, 3, 4), "float32", (0, 2), True),
        case((2, 3), "float32", None, False),
        case((2, 3, 2), "float32", (-1, 0), False),
        case((3, 2), "float32", None, True),
        case((2, 4), "float64", (0,), True),
        case((2, 8), "float16", (1,), False),
    ]
    if "int32" in allowed:
        out.append(case((3, 4), "int32", (0,), False, *int_range))
        out.append(case((2, 3), "int32", None, True, *int_range))
        # the other integer types (runtime_c instantiates the kernels per type), over two
        # separate axes; unsigned types wrap the negative end of the range to large values
        out += [case((2, 3, 4), dt, (0, 2), True, *int_range) for dt in dtypes.INTS if dt != "int32"]
    return tuple(out)


REDUCTIONS = ("reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod")

WIDENS = ("int8", "uint8", "int16")
"""The types reduce_sum can sum into int32 (its ``dtype``): each value widened, no wrap below 2**23 terms."""


def _sum_infer(types, attrs):
    t = _reduce_infer(dtypes.NUMERIC)(types, attrs)
    if not attrs["dtype"] or attrs["dtype"] == t.dtype:
        return t
    if t.dtype not in WIDENS:
        raise ShapeError(f"a sum into {attrs['dtype']} takes {', '.join(WIDENS)}, got {t.dtype}")
    return TensorType(t.shape, attrs["dtype"])


def _sum_ref(xs, attrs):
    x = xs[0]
    if attrs["dtype"] and attrs["dtype"] != x.dtype:
        out = np.sum(x.astype(np.int64), axis=attrs["axes"], keepdims=attrs["keepdims"])
        return np.asarray(out).astype(attrs["dtype"])
    return _reduce_ref(np.sum)(xs, attrs)


def _wide_examples() -> tuple[Example, ...]:
    """Sums into int32 over the whole int8, uint8 and int16 ranges: long rows (a global pool's),
    an inner axis, all axes; results past the input type's range (no wrap)."""

    def case(shape, dtype, axes, keepdims):
        lo, hi = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767)}[dtype]
        want = lambda x: np.sum(x.astype(np.int64), axis=axes, keepdims=keepdims).astype(np.int32)  # noqa: E731
        attrs = {"axes": axes, "keepdims": keepdims, "dtype": "int32"}
        return Example((Sample(shape, dtype, lo, hi),), attrs, want, grad=False)

    return (
        case((2, 3, 125), "int8", (2,), True),
        case((2, 70, 5), "uint8", (1,), False),
        case((3, 4, 6), "int16", None, False),
    )


defop(
    "reduce_sum",
    ("x",),
    _sum_infer,
    _sum_ref,
    _g_sum,
    attrs={**_REDUCE_ATTRS, "dtype": Attr("str", "", ("", "int32"))},
    resolve=_resolve_axes,
    kind=KERNEL,
    flops=_flops_reduce,
    doc="sum over 'axes' (all when absent), keeping reduced axes as 1 if keepdims; 'dtype' int32 "
    "sums int8, uint8 or int16 values into int32 (no widened copy: an integer pool's sums)",
    examples=_reduce_examples(np.sum, dtypes.NUMERIC) + _wide_examples(),
)

for _name, _fn, _grad, _allowed, _nonempty, _examples in (
    ("reduce_mean", _mean, _g_mean, dtypes.FLOATS, True, _reduce_examples(np.mean, dtypes.FLOATS)),
    ("reduce_max", np.max, _g_extreme, dtypes.NUMERIC, True, _reduce_examples(np.amax, dtypes.NUMERIC)),
    ("reduce_min", np.min, _g_extreme, dtypes.NUMERIC, True, _reduce_examples(np.amin, dtypes.NUMERIC)),
    # products of up to 8 values: moderate magnitudes, no zeros (the gradient divides by x)
    ("reduce_prod", np.prod, _g_prod, dtypes.NUMERIC, False,
     _reduce_examples(np.prod, dtypes.NUMERIC, 0.5, 2.0, (-3, 3))),
):  # fmt: skip
    defop(
        _name,
        ("x",),
        _reduce_infer(_allowed, _nonempty),
        _reduce_ref(_fn),
        _grad,
        attrs=_REDUCE_ATTRS,
        resolve=_resolve_axes,
        kind=KERNEL,
        flops=_flops_reduce,
        doc=f"{_name[7:]} over 'axes' (all when absent), keeping reduced axes as 1 if keepdims",
        examples=_examples,
    )


def reduce_sum(x, axes=None, keepdims=False, name=None, dtype=""):
    """The sum over ``axes``; ``dtype="int32"`` sums int8, uint8 or int16 ``x`` into int32."""
    return apply("reduce_sum", [operand(x)], name, axes=_axes(axes), keepdims=keepdims, dtype=dtype)


def reduce_mean(x, axes=None, keepdims=False, name=None):
    return apply("reduce_mean", [operand(x)], name, axes=_axes(axes), keepdims=keepdims)


def reduce_max(x, axes=None, keepdims=False, name=None):
    return apply("reduce_max", [operand(x)], name, axes=_axes(axes), keepdims=keepdims)


def reduce_min(x, axes=None, keepdims=False, name=None):
    return apply("reduce_min", [operand(x)], name, axes=_axes(axes), keepdims=keepdims)


def reduce_prod(x, axes=None, keepdims=False, name=None):
    return apply("reduce_prod", [operand(x)], name, axes=_axes(axes), keepdims=keepdims)


def _axes(axes):
    return (axes,) if isinstance(axes, int) else axes


# ----------------------------------------------------------------------------- arg reductions
_ARG_ATTRS = {
    "axis": Attr("int", -1),
    "keepdims": Attr("bool", False),
    "select_last_index": Attr("bool", False),
}


def _arg_examples(best) -> tuple[Example, ...]:
    """Examples of argmax (``best`` = max) or argmin (min): random floats, and ties (first or
    last index), checked by a loop over each line of the axis."""

    def expect(axis=-1, keepdims=False, select_last_index=False):
        def line(v):
            hits = [i for i, e in enumerate(v) if e == best(v)]
            return hits[-1] if select_last_index else hits[0]

        def fn(x):
            out = np.apply_along_axis(line, axis, x)
            return np.expand_dims(out, axis) if keepdims else out

        return fn

    def case(x, **attrs):
        return Example((x,), attrs, expect(**attrs))

    # ties at the maximum and at the minimum of every row and every column
    ties = np.array([[1, 4, 4, 0, 0], [2, 2, -1, 2, -1], [0, 0, 0, 0, 0], [2, 4, -1, 2, 0]], np.int32)
    return (
        case(Sample((3, 5))),
        case(Sample((3, 4)), axis=0, keepdims=True),
        case(Sample((2, 3, 4), "float64"), axis=1),
        case(ties, axis=1),
        case(ties, axis=1, select_last_index=True),
        case(ties.astype(np.float32), axis=0, keepdims=True, select_last_index=True),
        case(ties.astype(np.int64), axis=-2),
    ) + tuple(  # the other types, the ties as they are stored (-1 wraps in the unsigned ones)
        case(
            ties.astype(dt),
            **({"axis": 1} if i % 2 else {"axis": 0, "keepdims": True, "select_last_index": True}),
        )
        for i, dt in enumerate(("float16", "int8", "uint8", "int16", "uint16", "uint32", "uint64"))
    )


def _arg_infer(types, attrs):
    x = types[0]
    check_dtype(x, dtypes.NUMERIC)
    if x.shape[attrs["axis"]] == 0:
        raise ShapeError(f"cannot take argmax/argmin over empty axis {attrs['axis']} of {x.shape}")
    return TensorType(reduced_shape(x.shape, (attrs["axis"],), attrs["keepdims"]), "int64")


def _arg_ref(fn):
    def ref(xs, attrs):
        x, axis = xs[0], attrs["axis"]
        if attrs["select_last_index"]:
            idx = x.shape[axis] - 1 - fn(np.flip(x, axis), axis=axis)
        else:
            idx = fn(x, axis=axis)
        if attrs["keepdims"]:
            idx = np.expand_dims(idx, axis)
        return np.asarray(idx, dtype=np.int64)

    return ref


defop(
    "argmax",
    ("x",),
    _arg_infer,
    _arg_ref(np.argmax),
    NOT_DIFFERENTIABLE,
    attrs=_ARG_ATTRS,
    resolve=resolve_axis,
    kind=KERNEL,
    flops=_flops_reduce,
    doc="index of the largest value along axis (first, or last on ties)",
    examples=_arg_examples(max),
)
defop(
    "argmin",
    ("x",),
    _arg_infer,
    _arg_ref(np.argmin),
    NOT_DIFFERENTIABLE,
    attrs=_ARG_ATTRS,
    resolve=resolve_axis,
    kind=KERNEL,
    flops=_flops_reduce,
    doc="index of the smallest value along axis",
    examples=_arg_examples(min),
)


def argmax(x, axis=-1, keepdims=False, select_last_index=False, name=None):
    return apply(
        "argmax", [operand(x)], name, axis=axis, keepdims=keepdims, select_last_index=select_last_index
    )


def argmin(x, axis=-1, keepdims=False, select_last_index=False, name=None):
    return apply(
        "argmin", [operand(x)], name, axis=axis, keepdims=keepdims, select_last_index=select_last_index
    )


# the builders that graphdef exports (``gd.argmax`` ...)
__all__ = [
    "argmax",
    "argmin",
    "reduce_max",
    "reduce_mean",
    "reduce_min",
    "reduce_prod",
    "reduce_sum",
]
