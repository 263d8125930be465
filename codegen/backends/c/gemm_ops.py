"""The C backend's own ops: products on the fast float32 GEMM (runtime_c/kernels/sgemm.h).

``lowering.lower_linear`` rewrites float32 matmul, gemm and conv into these ops for a
given instruction set, packing constant operands at compile time in the exact layout of the
kernel's micro-tile (sgemm.py). They are registered in graphdef's registry like any op, with
references that rebuild the logical operands from the packed data, so the interpreter and
``verify`` still check every rewrite; their C code is gemm_steps.py.

- ``sgemm(a, b, bias?)``: one product per batch entry, C = alpha * A @ B (+ bias), with A and
  B raw (strided) or packed, as the ``plan`` (the fields of fc_sgemm_plan) says.
- ``conv_gemm(x, w, bias?)``: a convolution as one product per image and group, weights
  packed, the input read directly (1x1 kernels) or through im2col into step scratch memory.
- ``dwconv(x, w, bias?)``: a float32 depthwise convolution on its direct kernel (ops/nn.py),
  made by ``fuse_epilogues`` only, when it takes its consumer as an epilogue.

All three may carry an elementwise ``epilogue`` (``lowering.fuse_epilogues`` moves the one
elementwise consumer of a product into it): ``(program, slot, layouts)`` where ``program`` is
that consumer's instructions (see ``fused``), ``slot`` the position of the product among its
inputs, and the other inputs follow bias as extra inputs of the node, each read at matrix
position (i, j) of batch entry (b0, b1, ...) as ``x[i*rs + j*cs + b0*s0 + b1*s1 ...]``
with ``layouts[q] = (rs, cs, (s0, s1, ...))``. The C kernel applies it to each output tile
while the tile is in L1, so bias, activation and residual add make no extra pass over memory.
``parts`` > 1 splits the product over that many threads of the model's pool.
"""

from __future__ import annotations

import math

import numpy as np

from graphdef.errors import ShapeError
from graphdef.ir import TensorType
from graphdef.ops._util import check_dtype
from graphdef.ops.conv import conv_ref
from graphdef.ops.fused import run_program
from graphdef.registry import KERNEL, Attr, Example, NotDifferentiable, Sample, defop, get_op

from .ops.nn import dw_split
from .sgemm import SgemmPlan, make_plan, pack_a, pack_b, plan_of, plan_tuple, unpack_a, unpack_b

_INTERNAL = NotDifferentiable("compiler-internal op: differentiate the graph before compiling", error=True)


def _logical(flat, plan: SgemmPlan, which: str, offset: int) -> np.ndarray:
    """The logical A (m x k) or B (k x n) of one batch entry, from raw strides or packing."""
    if which == "a":
        if plan.a_packed:
            return unpack_a(flat[offset : offset + plan.packed_a_floats()], plan)
        i, p = np.ix_(np.arange(plan.m), np.arange(plan.k))
        return flat[offset + i * plan.a_rs + p * plan.a_cs].astype(np.float32)
    if plan.b_packed:
        return unpack_b(flat[offset : offset + plan.packed_b_floats()], plan)
    p, j = np.ix_(np.arange(plan.k), np.arange(plan.n))
    return flat[offset + p * plan.b_rs + j * plan.b_cs].astype(np.float32)


def split_inputs(xs, attrs):
    """(bias or None, epilogue inputs) of an sgemm or conv_gemm node, from its inputs after
    the two operands."""
    rest = list(xs[2:])
    bias = rest.pop(0) if plan_of(attrs).bias else None
    return bias, rest


def _epilogue(c, extras, attrs, facet: str):
    """The epilogue's result (``facet`` "ref") or type ("infer") for product ``c``."""
    if not attrs["epilogue"]:
        return c
    program, slot = attrs["epilogue"][:2]
    values = list(extras)
    values.insert(slot, c)
    return run_program(program, values, facet)


def _check_epilogue(out: TensorType, extras, attrs) -> TensorType:
    layouts = attrs["epilogue"][2] if attrs["epilogue"] else ()
    if len(extras) != len(layouts):
        raise ShapeError(f"{len(extras)} epilogue inputs for {len(layouts)} layouts")
    t = _epilogue(out, extras, attrs, "infer")
    if t != out:
        raise ShapeError(f"epilogue changes the product's type {out} to {t}")
    return t


def _batch_offsets(batch):
    """(a, b, c) element offsets of every batch entry; ``batch`` lists (size, a, b, c) steps,
    innermost first."""
    count = math.prod(size for size, *_ in batch)
    for index in range(count):
        rem, off = index, [0, 0, 0]
        for size, *steps in batch:
            for q in range(3):
                off[q] += (rem % size) * steps[q]
            rem //= size
        yield off


# ----------------------------------------------------------------------------- sgemm
def _sgemm_infer(types, attrs):
    for t in types:
        check_dtype(t, ("float32",))
    p = plan_of(attrs)
    bias, extras = split_inputs(types, attrs)
    if bias is not None and bias.size != (p.m if p.bias == 1 else p.n):
        raise ShapeError(f"bias of {bias.size} values does not fit the plan's bias mode {p.bias}")
    count = math.prod(size for size, *_ in attrs["batch"])
    if math.prod(attrs["shape"]) != count * p.m * p.n:
        raise ShapeError(f"output shape {attrs['shape']} does not hold {count} products of {p.m} x {p.n}")
    return _check_epilogue(TensorType(attrs["shape"], "float32"), extras, attrs)


def _sgemm_ref(xs, attrs):
    p = plan_of(attrs)
    a, b = (np.asarray(x, np.float32).reshape(-1) for x in xs[:2])
    out = np.zeros(math.prod(attrs["shape"]), np.float64)
    bias, extras = split_inputs(xs, attrs)
    bias = None if bias is None else np.asarray(bias, np.float64).reshape(-1)
    for ao, bo, co in _batch_offsets(attrs["batch"]):
        c = p.alpha * (
            _logical(a, p, "a", ao).astype(np.float64) @ _logical(b, p, "b", bo).astype(np.float64)
        )
        if bias is not None:
            c = c + (bias[:, None] if p.bias == 1 else bias[None, :])
        i, j = np.ix_(np.arange(p.m), np.arange(p.n))
        out[co + i * p.ldc + j] = c
    return _epilogue(out.astype(np.float32).reshape(attrs["shape"]), extras, attrs, "ref")


def _sgemm_flops(ins, outs, attrs):
    p = plan_of(attrs)
    return 2 * p.m * p.n * p.k * math.prod(size for size, *_ in attrs["batch"])


EPILOGUE_ATTRS = {"epilogue": Attr("any", ()), "parts": Attr("int", 1)}
PRODUCT_ATTRS = {"plan": Attr("any"), "isa": Attr("str"), **EPILOGUE_ATTRS}
"""The attributes every product on the packed GEMM has (sgemm, conv_gemm, conv_winograd)."""


# ----------------------------------------------------------------------------- examples
# Both ops are made by lowering.lower_linear; their examples build the nodes the same way
# (plans for "avx512", constant operands packed at import time from fixed logical values). On
# a build whose compiler selects another kernel, the step's scratch is sized for that one
# (it packs a raw A that the plan's own tile would read in place): the dense example reads A
# in place on AVX-512 builds, the other two pack it.
_EXAMPLE_ISA = "avx512"


def _fixed(*shape, seed: int) -> np.ndarray:
    """Logical constant operands of the examples: fixed values in [-1, 1)."""
    return np.random.default_rng(seed).uniform(-1.0, 1.0, shape).astype(np.float32)


def _sgemm_examples() -> tuple[Example, ...]:
    # dense: A (2, 3, 20) as 6 rows of 20, B packed in k blocks of 8, 8 and 4
    dense = make_plan(6, 5, 20, isa=_EXAMPLE_ISA, b="packed", kc=8)
    # A stored transposed, B packed, alpha and a bias per column (gemm's lowering)
    gemm = make_plan(4, 3, 6, isa=_EXAMPLE_ISA, a="trans", b="packed", alpha=0.5, bias="col", a_direct=False)
    # raw operands batched over broadcast axes: (2, 1, 3, 4) @ (1, 2, 4, 5); one batch axis
    # per output axis, innermost first, as (size, a step, b step, c step)
    batched = make_plan(3, 5, 4, isa=_EXAMPLE_ISA, a_direct=False)
    return (
        Example(
            (Sample((2, 3, 20)), pack_b(_fixed(20, 5, seed=1), dense)),
            {"plan": plan_tuple(dense), "isa": _EXAMPLE_ISA, "shape": (2, 3, 5)},
            lambda a, b: np.matmul(a, unpack_b(b, dense)),
            grad=False,
        ),
        Example(
            (Sample((6, 4)), pack_b(_fixed(6, 3, seed=2), gemm), Sample((3,))),
            {"plan": plan_tuple(gemm), "isa": _EXAMPLE_ISA, "shape": (4, 3)},
            lambda a, b, bias: 0.5 * (a.T @ unpack_b(b, gemm)) + bias,
            grad=False,
        ),
        Example(
            (Sample((2, 1, 3, 4)), Sample((1, 2, 4, 5))),
            {
                "plan": plan_tuple(batched),
                "isa": _EXAMPLE_ISA,
                "batch": ((2, 0, 20, 15), (2, 12, 0, 30)),
                "shape": (2, 2, 3, 5),
            },
            np.matmul,
            grad=False,
        ),
    )


defop(
    "sgemm",
    ("a", "b", "more*?"),
    _sgemm_infer,
    _sgemm_ref,
    _INTERNAL,
    attrs={
        **PRODUCT_ATTRS,
        "batch": Attr("any", ()),
        "shape": Attr("ints"),
    },
    kind=KERNEL,
    flops=_sgemm_flops,
    doc="float32 products C = alpha * A @ B (+ bias) per batch entry on the fast GEMM; A, B raw or "
    "packed; inputs a, b, then bias if the plan has one, then epilogue inputs",
    examples=_sgemm_examples(),
)


# ----------------------------------------------------------------------------- conv_gemm
def _conv_attrs(attrs):
    return {
        "strides": attrs["strides"],
        "pads": attrs["pads"],
        "dilations": attrs["dilations"],
        "group": attrs["group"],
    }


def _conv_gemm_infer(types, attrs):
    for t in types:
        check_dtype(t, ("float32",))
    x = types[0]
    p = plan_of(attrs)
    if types[1].size != attrs["group"] * _group_weights(p):
        raise ShapeError(
            f"{'packed ' if p.a_packed else ''}weights hold {types[1].size} values, the plan needs "
            f"{attrs['group']} x {_group_weights(p)}"
        )
    out = TensorType((x.shape[0], p.m * attrs["group"]) + tuple(attrs["out"]), "float32")
    return _check_epilogue(out, split_inputs(types, attrs)[1], attrs)


def _group_weights(p: SgemmPlan) -> int:
    """Floats of one group's weights: packed (constant weights), or the raw (mg, cg * taps)
    row-major block of weights computed at run time (a training graph's variables)."""
    return p.packed_a_floats() if p.a_packed else p.m * p.k


def _conv_gemm_ref(xs, attrs):
    p = plan_of(attrs)
    g = attrs["group"]
    raw = np.asarray(xs[1]).reshape(-1)
    w = raw if not p.a_packed else np.concatenate([unpack_a(part, p) for part in np.split(raw, g)])
    w = w.reshape((p.m * g, xs[0].shape[1] // g) + tuple(attrs["kernel"]))
    bias, extras = split_inputs(xs, attrs)
    y = conv_ref([xs[0], w] + ([] if bias is None else [bias]), _conv_attrs(attrs))
    return _epilogue(y, extras, attrs, "ref")


def _conv_gemm_example(x_shape, w, out, *, pads, strides=(1, 1), group=1, bias=False, direct=False):
    """An example of conv_gemm for input ``x_shape`` and logical weights ``w`` (M, C/g, kh,
    kw), packed per group as lowering._lower_conv does."""
    m, cg = w.shape[:2]
    kernel = w.shape[2:]
    plan = make_plan(
        m // group,
        math.prod(out),
        cg * math.prod(kernel),
        isa=_EXAMPLE_ISA,
        a="packed",
        bias="row" if bias else "none",
    )
    rows = np.split(w.reshape(m, -1), group)
    packed = np.concatenate([pack_a(r, plan) for r in rows])
    attrs = {
        "plan": plan_tuple(plan),
        "isa": _EXAMPLE_ISA,
        "kernel": kernel,
        "out": out,
        "strides": strides,
        "pads": pads,
        "dilations": (1, 1),
        "group": group,
        "direct": direct,
    }
    inputs = (Sample(x_shape), packed) + ((Sample((m,)),) if bias else ())
    return Example(inputs, attrs, None, grad=False)


def _conv_gemm_examples() -> tuple[Example, ...]:
    return (
        # 3x3, padded, with a bias per output channel: im2col
        _conv_gemm_example((2, 2, 5, 5), _fixed(4, 2, 3, 3, seed=3), (5, 5), pads=(1, 1, 1, 1), bias=True),
        # two groups, stride 2, padded at the start only
        _conv_gemm_example(
            (1, 4, 6, 6), _fixed(6, 2, 3, 3, seed=4), (3, 3), pads=(1, 1, 0, 0), strides=(2, 2), group=2
        ),
        # 1x1: the input read directly as B
        _conv_gemm_example((2, 3, 4, 4), _fixed(5, 3, 1, 1, seed=5), (4, 4), pads=(0, 0, 0, 0), direct=True),
    )


defop(
    "conv_gemm",
    ("x", "w", "more*?"),
    _conv_gemm_infer,
    _conv_gemm_ref,
    _INTERNAL,
    attrs={
        **PRODUCT_ATTRS,
        "kernel": Attr("ints"),
        "out": Attr("ints"),
        "strides": Attr("ints"),
        "pads": Attr("ints"),
        "dilations": Attr("ints"),
        "group": Attr("int"),
        "direct": Attr("bool"),
        "estimates": Attr("any", ()),
        "chunk": Attr("int", 0),  # bytes of an im2col slice (gemm_steps.chunking); 0: the default
    },
    kind=KERNEL,
    flops=lambda ins, outs, attrs: 2 * outs[0].size * plan_of(attrs).k,
    doc="float32 convolution as packed-weight products per image and group (im2col unless 1x1)",
    examples=_conv_gemm_examples(),
)


# ----------------------------------------------------------------------------- conv_transpose_gemm
def _conv_t_gemm_infer(types, attrs):
    for t in types:
        check_dtype(t, ("float32",))
    p = plan_of(attrs)
    x, w = types[:2]
    g = attrs["group"]
    if p.k * g != x.shape[1] or p.m != w.shape[1] * math.prod(w.shape[2:]) or p.n != math.prod(x.shape[2:]):
        raise ShapeError(
            f"conv_transpose_gemm plan {p.m} x {p.n} x {p.k} does not fit x {x.shape}, w {w.shape}"
        )
    return TensorType((x.shape[0], w.shape[1] * g) + tuple(attrs["out"]), "float32")


def _conv_t_attrs(attrs):
    return {k: attrs[k] for k in ("strides", "pads", "dilations", "group", "output_padding")}


def conv_t_plan(x_shape, w_shape, group: int, isa: str) -> SgemmPlan:
    """The product of one image and group of a transposed convolution: col (C_out/g * taps x
    input positions) = W_g^T (W (C_in, C_out/g, *K) read in place, transposed) X_g."""
    m, n, k = w_shape[1] * math.prod(w_shape[2:]), math.prod(x_shape[2:]), x_shape[1] // group
    return make_plan(m, n, k, isa=isa, a="trans")


def _conv_t_gemm_example(x_shape, w_shape, out, bias=False, **attrs):
    g = attrs.setdefault("group", 1)
    attrs = {"strides": (1, 1), "pads": (0, 0, 0, 0), "dilations": (1, 1), "output_padding": (0, 0), **attrs}
    cog = w_shape[1]
    plan = conv_t_plan(x_shape, w_shape, g, _EXAMPLE_ISA)
    full = {"plan": plan_tuple(plan), "isa": _EXAMPLE_ISA, "out": out, "parts": 1, **attrs}
    inputs = (Sample(x_shape), Sample(w_shape)) + ((Sample((cog * g,)),) if bias else ())
    return Example(inputs, full, None, grad=False)


defop(
    "conv_transpose_gemm",
    ("x", "w", "b?"),
    _conv_t_gemm_infer,
    lambda xs, attrs: get_op("conv_transpose").ref(xs, _conv_t_attrs(attrs)),
    _INTERNAL,
    attrs={
        "plan": Attr("ints"),
        "isa": Attr("str"),
        "out": Attr("ints"),
        "strides": Attr("ints"),
        "pads": Attr("ints"),
        "dilations": Attr("ints"),
        "group": Attr("int"),
        "output_padding": Attr("ints"),
        "parts": Attr("int", 1),
    },
    kind=KERNEL,
    flops=lambda ins, outs, attrs: 2 * ins[0].size * plan_of(attrs).m,
    doc="float32 transposed convolution as products per image and group (W^T X, then col2im)",
    examples=(
        # stride 2, padded and grown by output_padding, with a bias
        _conv_t_gemm_example(
            (2, 3, 3, 3),
            (3, 2, 3, 3),
            (6, 6),
            bias=True,
            strides=(2, 2),
            pads=(1, 1, 1, 1),
            output_padding=(1, 1),
        ),
        # two groups, dilation 2 along the rows, a pad at the start of the columns
        _conv_t_gemm_example(
            (1, 4, 3, 3), (4, 1, 2, 2), (5, 3), group=2, dilations=(2, 1), pads=(0, 1, 0, 0)
        ),
    ),
)


# ----------------------------------------------------------------------------- conv_weight_grad


defop(
    "conv_wgrad",
    ("x", "gy"),
    lambda types, attrs: get_op("conv_weight_grad").infer_types(types, attrs),
    lambda xs, attrs: get_op("conv_weight_grad").ref(xs, {k: v for k, v in attrs.items() if k != "parts"}),
    _INTERNAL,
    attrs={
        **{k: Attr("ints") for k in ("kernel", "strides", "pads", "dilations")},
        "group": Attr("int", 1),
        "parts": Attr("int", 1),
    },
    kind=KERNEL,
    flops=lambda ins, outs, attrs: 2 * ins[1].size * outs[0].size // max(ins[1].shape[1], 1),
    doc="float32 conv_weight_grad on the C kernel: parts take runs of images, each its own sum",
    examples=(
        Example(
            (Sample((3, 4, 6, 6)), Sample((3, 4, 3, 3))),
            {"kernel": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1), "dilations": (1, 1), "group": 2},
            grad=False,
        ),
    ),
)


# ----------------------------------------------------------------------------- dwconv
_DW_CONV = ("strides", "pads", "dilations", "group")


def _dwconv_infer(types, attrs):
    conv_in, extras = dw_split(types, attrs)
    x, w = conv_in[:2]
    for t in conv_in:
        check_dtype(t, ("float32",))
    if attrs["group"] != x.shape[1] or w.shape[1] != 1 or x.rank > 4:
        raise ShapeError(f"dwconv needs one input channel per group: x {x.shape}, w {w.shape}")
    out = get_op("conv").infer(conv_in, {a: attrs[a] for a in _DW_CONV})
    return _check_epilogue(out, extras, attrs)


def _dwconv_ref(xs, attrs):
    conv_in, extras = dw_split(xs, attrs)
    y = conv_ref(conv_in, {a: attrs[a] for a in _DW_CONV}).astype(np.float32)
    return _epilogue(y, extras, attrs, "ref")


defop(
    "dwconv",
    ("x", "w", "more*?"),
    _dwconv_infer,
    _dwconv_ref,
    _INTERNAL,
    attrs={
        "strides": Attr("ints"),
        "pads": Attr("ints"),
        "dilations": Attr("ints"),
        "group": Attr("int"),
        "bias": Attr("bool", False),
        "epilogue": EPILOGUE_ATTRS["epilogue"],
    },
    kind=KERNEL,
    flops=lambda ins, outs, attrs: 2 * outs[0].size * math.prod(ins[1].shape[2:]),
    doc="float32 depthwise convolution (one input channel per group) of at most two spatial axes "
    "with an elementwise epilogue (lowering.fuse_epilogues); inputs x, w, then bias if ``bias``, "
    "then epilogue inputs, each read at (output channel i, output position j) of image b as "
    "``x[i*rs + j*cs + b*s1]`` (layouts as for conv_gemm, one group)",
    examples=(
        # channel multiplier 2, stride 2, with a bias
        Example(
            (Sample((1, 2, 5, 5)), Sample((4, 1, 3, 3)), Sample((4,))),
            {"strides": (2, 2), "pads": (1, 1, 1, 1), "dilations": (1, 1), "group": 2, "bias": True},
            grad=False,
        ),
        # two images, 1-D, no bias
        Example(
            (Sample((2, 3, 9)), Sample((3, 1, 3))),
            {"strides": (1,), "pads": (1, 1), "dilations": (2,), "group": 3},
            grad=False,
        ),
    ),
)
