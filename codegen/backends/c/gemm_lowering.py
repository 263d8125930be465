"""The C backend's graph lowering: float32 products onto the fast GEMM, then their
elementwise consumers into them as epilogues. Both are Graph -> Graph passes like the shared
ones (codegen/passes.py), run by the pipeline's "lower" stage for a target's instruction set.
"""

from __future__ import annotations

import math

import numpy as np

import graphdef as gd
from graphdef.builder import Tensor
from graphdef.ir import Attrs, Graph, Node, ValueRef
from graphdef.ops.fused import program_of
from graphdef.registry import get_op

from ... import passes
from ...passes import Rebuild
from ...render import layout as L
from ...render.plans import depthwise_geom
from ...render.splits import PARALLEL_FLOPS
from . import pointwise_depthwise
from . import sgemm as SP
from .conv_direct import lower as lower_direct
from .gemm_ops import conv_t_plan
from .sgemm import plan_of
from .winograd import lower_winograd


def lower_products(graph: Graph, isa: str, threads: int = 1, mcu: bool = False) -> Graph:
    """The C backend's "lower" stage for instruction set ``isa``: ``lower_linear``, then
    ``fuse_epilogues``, then ``pointwise_depthwise.fuse`` (expansions into their depthwise convs), then
    ``prune`` (what the products absorbed). ``mcu``: for a microcontroller, where RAM and flash
    come first: no Winograd (its transformed weights take 1.8-4x the flash) and im2col slices
    of ``MCU_CHUNK_BYTES`` (gemm_steps.chunking)."""
    fused = fuse_epilogues(lower_linear(graph, isa, threads, mcu))
    return passes.prune(pointwise_depthwise.fuse(fused, isa, threads))


# ----------------------------------------------------------------------------- fast float32 products


def lower_linear(graph: Graph, isa: str, threads: int = 1, mcu: bool = False) -> Graph:
    """Put float32 matmul, gemm and conv on the fast GEMM of ``isa`` (runtime_c/kernels/sgemm.h).

    Constant operands are packed now for the ISA's micro-tile (a weight matrix becomes a
    packed constant), so the C code never packs them. Rewritten:
    - matmul: a 2-D constant right operand (dense layers; leading axes of the left operand
      fold into its rows), or any batched product of raw operands;
    - gemm with a constant b and a bias per column (or none);
    - conv with constant weights (and bias), except depthwise ones (group == channels, one
      input channel per group), which keep their direct kernel; a 3x3 stride-1 one becomes a
      Winograd ``conv_winograd`` where the cost model says it is faster (winograd.py); one
      whose weights or bias are computed at run time: conv_direct on weights packed by a
      ``pack_direct`` step, else conv_gemm reading them in place;
    - conv_transpose (``conv_transpose_gemm``) and float32 conv_weight_grad (``conv_wgrad``).
    Everything else (other dtypes, depthwise convs, ...) is left as it is. Products of at
    least ``PARALLEL_FLOPS`` get ``parts = threads`` (a Winograd conv: where its direct form
    has as many, the count its chunks were sized for).
    """

    def f32(*refs):
        return all(graph.type_of(r).dtype == "float32" for r in refs)

    rb = Rebuild(graph)
    for node in graph.nodes:
        op = node.op
        ins = [graph.type_of(r) for r in node.inputs]
        new = None
        if op == "matmul" and f32(*node.inputs) and node.outputs[0].size:
            new = _lower_matmul(graph, node, ins, isa)
        elif op == "gemm" and f32(*node.inputs) and node.outputs[0].size:
            new = _lower_gemm(graph, node, ins, isa)
        elif op == "conv_weight_grad" and f32(*node.inputs) and node.outputs[0].size:
            new = "conv_wgrad", list(node.inputs), dict(node.attrs)
        elif op == "conv_transpose" and f32(*node.inputs) and node.outputs[0].size:
            new = _lower_conv_transpose(node, ins, isa)
        elif op == "conv" and f32(*node.inputs) and node.outputs[0].size and not _depthwise(node, ins):
            w = passes.constant_value(graph, node.inputs[1])
            bias = passes.constant_value(graph, node.inputs[2]) if len(node.inputs) == 3 else None
            if w is not None and (len(node.inputs) < 3 or bias is not None):
                new = _lower_conv_dense(graph, node, ins, isa)
                if new is None:
                    new, est = lower_winograd(node, ins, w, bias, isa, threads) if not mcu else (None, ())
                    new = new or lower_direct(node, ins, w, bias, isa, est)
                    new = new or _lower_conv(graph, node, ins, isa, est, mcu)
            else:  # weights or bias computed at run time (a training step's variables)
                new = (lower_direct(node, ins, None, None, isa) if w is None else None) or _lower_conv(
                    graph, node, ins, isa
                )
        if new is None:
            rb.keep(node)
            continue
        op_name, operands, attrs = new
        # a lowering that sized its work for some parts (lower_winograd's chunks) says so
        if "parts" not in attrs and threads > 1:
            if get_op(op_name).flops(ins, node.outputs, Attrs(attrs)) >= PARALLEL_FLOPS:
                attrs["parts"] = threads
        with rb.building(node):
            inputs = [_operand(rb, r) for r in operands]
            out = gd.apply(op_name, inputs, None, **attrs)
        rb.bind(node, [out.ref])
    return rb.finish()


def _operand(rb, r) -> Tensor:
    """A lowered node's operand: a value of the graph, a constant array, or ("op", [values],
    attrs), a step made for it (weights packed at run time)."""
    if isinstance(r, ValueRef):
        return Tensor(rb.new, rb.refs[r])
    if isinstance(r, tuple):
        op, refs, attrs = r
        return gd.apply(op, [Tensor(rb.new, rb.refs[q]) for q in refs], None, **attrs)
    return gd.constant(r)


def fuse_epilogues(graph: Graph) -> Graph:
    """Fold the elementwise consumer of a fast-GEMM product into the product as its epilogue.

    Legal when the product (sgemm, conv_gemm or conv_winograd, float32; or a float32 depthwise
    conv, which becomes a ``dwconv``) has that one consumer and is not a graph output, the
    consumer is float32 throughout and has the product's shape, and every other input of the
    consumer is read with a fixed stride per matrix row, column and batch entry (full tensors
    such as a residual, per-channel or per-column vectors, scalars).
    The merged node keeps the consumer's name and place (all its inputs exist there).
    """
    consumers = passes.consumers(graph)
    controlled = {c for n in graph.nodes for c in n.control_inputs}
    outputs = set(graph.declared_outputs)
    merge, absorbed = {}, set()
    for e in graph.nodes:
        opdef = get_op(e.op)
        if not opdef.elementwise or opdef.stateful or len(e.outputs) != 1:
            continue
        if any(t.dtype != "float32" for t in [*e.outputs, *(graph.type_of(r) for r in e.inputs)]):
            continue
        for slot, r in enumerate(e.inputs):
            prod = graph.node(r.node)
            if (
                not _takes_epilogue(graph, prod)
                or consumers[prod.name] != [e.name]
                or r in outputs
                or prod.name in controlled
                or prod.device != e.device
                or prod.outputs[0].shape != e.outputs[0].shape
            ):
                continue
            extras = [x for x in e.inputs if x != r]
            layouts = [_epilogue_layout(prod, graph.type_of(x).shape) for x in extras]
            if any(lay is None for lay in layouts):
                continue
            merge[e.name] = (prod, slot, extras, tuple(layouts))
            absorbed.add(prod.name)
            break

    def make(rb, node, merged):
        prod, slot, extras, layouts = merged
        attrs, op = dict(prod.attrs.items()), prod.op
        if op == "conv":  # a depthwise one: the direct kernel's node with an epilogue
            attrs, op = {**attrs, "bias": len(prod.inputs) == 3}, "dwconv"
        attrs["epilogue"] = (program_of(node), slot, layouts)
        merged = Node(
            node.name,
            op,
            tuple(rb.refs[r] for r in (*prod.inputs, *extras)),
            Attrs(attrs),
            node.outputs,
            node.device,
            tuple(dict.fromkeys(rb.controls(prod) + rb.controls(node))),
        )
        rb.new.add(merged)
        rb.bind(node, [merged.ref()])

    return passes.merge_nodes(graph, merge, absorbed, make)


PRODUCTS = ("sgemm", "conv_gemm", "conv_winograd", "conv_direct")
"""The ops that take an elementwise epilogue."""


def _takes_epilogue(graph: Graph, node: Node) -> bool:
    """A product without an epilogue yet, or a float32 depthwise conv of at most two spatial
    axes (which becomes a ``dwconv`` with the epilogue: ops/nn.py's direct kernel)."""
    if node.op in PRODUCTS:
        return not node.attrs["epilogue"]
    ins = [graph.type_of(r) for r in node.inputs]
    return (
        node.op == "conv"
        and all(t.dtype == "float32" for t in ins)
        and depthwise_geom(ins, node.outputs, node.attrs) is not None
    )


def _product_geometry(node: Node):
    """(batch axes innermost first as (size, output stride), m, n, ldc) of a product node; a
    convolution's product per image and group is (output channels, output positions)."""
    if node.op == "sgemm":
        p = plan_of(node.attrs)
        return [(size, c) for size, _, _, c in node.attrs["batch"]], p.m, p.n, p.ldc
    out = node.outputs[0].shape
    g = node.attrs.get("group", 1)  # conv_winograd: one group
    if node.op in ("conv", "dwconv"):  # depthwise: all output channels of an image as rows
        g = 1
    m, n = out[1] // g, math.prod(out[2:])
    return [(g, m * n), (out[0], m * g * n)], m, n, n


def _epilogue_layout(node: Node, shape: tuple[int, ...]):
    """(rs, cs, batch strides) reading a tensor of ``shape``, broadcast to the product's
    output, at matrix position (i, j) of every batch entry; None if no fixed strides do."""
    out = node.outputs[0].shape
    axes, m, n, ldc = _product_geometry(node)
    if len(shape) > len(out):
        return None
    index = np.broadcast_to(np.arange(math.prod(shape)).reshape(shape), out).reshape(-1)
    i, j = np.ix_(np.arange(m), np.arange(n))
    rs = int(index[ldc]) if m > 1 else 0
    cs = int(index[1]) if n > 1 else 0
    strides = [int(index[c]) if size > 1 else 0 for size, c in axes]
    local = i * rs + j * cs
    for entry in np.ndindex(*[size for size, _ in reversed(axes)]):
        entry = entry[::-1]  # innermost first, like ``axes``
        c_off = sum(k * c for k, (_, c) in zip(entry, axes))
        e_off = sum(k * s for k, s in zip(entry, strides))
        if not np.array_equal(index[c_off + i * ldc + j], e_off + local):
            return None
    return rs, cs, tuple(strides)


def _lower_matmul(graph, node, ins, isa):
    a_t, b_t = ins
    if a_t.rank == 0 or b_t.rank == 0:
        return None
    b_const = passes.constant_value(graph, node.inputs[1])
    if b_const is not None and b_t.rank == 2:
        k, n = b_t.shape
        m = a_t.size // k
        plan = SP.make_plan(m, n, k, isa=isa, b="packed")
        attrs = {"plan": SP.plan_tuple(plan), "isa": isa, "batch": (), "shape": node.outputs[0].shape}
        return "sgemm", [node.inputs[0], SP.pack_b(b_const.astype(np.float32), plan)], attrs
    # raw operands, batched over the broadcast leading axes
    ash = (1,) + a_t.shape if a_t.rank == 1 else a_t.shape
    bsh = b_t.shape + (1,) if b_t.rank == 1 else b_t.shape
    batch = tuple(np.broadcast_shapes(ash[:-2], bsh[:-2]))
    m, k, n = ash[-2], ash[-1], bsh[-1]
    a_st = [s * m * k for s in L.broadcast_strides(ash[:-2], batch)] if batch else []
    b_st = [s * k * n for s in L.broadcast_strides(bsh[:-2], batch)] if batch else []
    c_st = [s * m * n for s in L.strides(batch)]
    plan = SP.make_plan(m, n, k, isa=isa)
    # one batch axis per leading output axis (not merged: an epilogue input may broadcast
    # along some of them), innermost first
    axes = tuple((d, sa, sb, sc) for d, sa, sb, sc in zip(batch, a_st, b_st, c_st) if d > 1)[::-1]
    attrs = {"plan": SP.plan_tuple(plan), "isa": isa, "batch": axes, "shape": node.outputs[0].shape}
    return "sgemm", list(node.inputs), attrs


def _lower_gemm(graph, node, ins, isa):
    a = node.attrs
    b_const = passes.constant_value(graph, node.inputs[1])
    if b_const is None:
        return None
    m, n = node.outputs[0].shape
    k = ins[0].shape[0] if a["trans_a"] else ins[0].shape[1]
    logical_b = b_const.T if a["trans_b"] else b_const
    bias = None
    if len(node.inputs) == 3:
        c = passes.constant_value(graph, node.inputs[2])
        if c is None or c.size not in (1, n) or (c.ndim == 2 and c.shape[0] != 1 and c.size != 1):
            return None
        bias = (np.broadcast_to(c.reshape(-1), (n,)) * a["beta"]).astype(np.float32)
    plan = SP.make_plan(
        m,
        n,
        k,
        isa=isa,
        a="trans" if a["trans_a"] else "row",
        b="packed",
        alpha=a["alpha"],
        bias="col" if bias is not None else "none",
    )
    attrs = {"plan": SP.plan_tuple(plan), "isa": isa, "batch": (), "shape": node.outputs[0].shape}
    operands = [node.inputs[0], SP.pack_b(logical_b.astype(np.float32), plan)]
    return "sgemm", operands + ([bias] if bias is not None else []), attrs


def _lower_conv_transpose(node, ins, isa):
    """A float32 transposed convolution as products per image and group (``conv_transpose_gemm``):
    col (C_out/g * taps x input positions) = W_g^T X_g with the weights (constant or computed at
    run time, as the input gradient of a training graph's conv is) read in place, then col2im."""
    a = node.attrs
    x_t, w_t = ins[:2]
    g = a["group"]
    plan = conv_t_plan(x_t.shape, w_t.shape, g, isa)
    attrs = {
        "plan": SP.plan_tuple(plan),
        "isa": isa,
        "out": tuple(node.outputs[0].shape[2:]),
        **{k: a[k] for k in ("strides", "pads", "dilations", "group", "output_padding")},
    }
    return "conv_transpose_gemm", list(node.inputs), attrs


def _depthwise(node, ins) -> bool:
    """A depthwise conv (one input channel per group): it keeps its direct kernel."""
    g = node.attrs["group"]
    return g == ins[0].shape[1] and ins[1].shape[1] == 1 and g > 1


def _lower_conv(graph, node, ins, isa, estimates: tuple = (), mcu: bool = False):
    """im2col + GEMM (``conv_gemm``): constant weights packed now, or weights computed at run
    time read in place (row-major (M, C/g * taps) per group)."""
    a = node.attrs
    x_t, w_t = ins[:2]
    w = passes.constant_value(graph, node.inputs[1])
    g = a["group"]
    m, cg = w_t.shape[:2]
    kernel = w_t.shape[2:]
    out_sp = node.outputs[0].shape[2:]
    kg, p = cg * math.prod(kernel), math.prod(out_sp)
    bias = "row" if len(node.inputs) == 3 else "none"
    if w is None:
        plan = SP.make_plan(m // g, p, kg, isa=isa, a="row", bias=bias)
        weights = node.inputs[1]
    else:
        plan = SP.make_plan(m // g, p, kg, isa=isa, a="packed", bias=bias)
        w = w.astype(np.float32)
        weights = np.concatenate(
            [SP.pack_a(w[i * (m // g) : (i + 1) * (m // g)].reshape(m // g, kg), plan) for i in range(g)]
        )
    direct = (
        all(k == 1 for k in kernel)
        and all(s == 1 for s in a["strides"])
        and not any(a["pads"])
        and tuple(out_sp) == tuple(x_t.shape[2:])
    )
    attrs = {
        "plan": SP.plan_tuple(plan),
        "isa": isa,
        "kernel": kernel,
        "out": out_sp,
        "strides": a["strides"],
        "pads": a["pads"],
        "dilations": a["dilations"],
        "group": g,
        "direct": direct,
        "estimates": estimates,  # the 3x3 cost model's, where it chose im2col (winograd.choose)
        "chunk": MCU_CHUNK_BYTES if mcu else 0,  # im2col slices' bytes (0: gemm_steps.CHUNK_BYTES)
    }
    operands = [node.inputs[0], weights]
    if len(node.inputs) == 3:
        b = passes.constant_value(graph, node.inputs[2])
        operands.append(node.inputs[2] if b is None else b.astype(np.float32))
    return "conv_gemm", operands, attrs


MCU_CHUNK_BYTES = 4096
"""A microcontroller's im2col slice: a few KiB (down to one output row, however wide), not a
cache's worth: its scratch is RAM the model keeps (ResNet-8 float on a Cortex-M4: 467 KB of RAM
with the host's slices, 218 KB with these, 197 KB with no products at all)."""


def _lower_conv_dense(graph, node, ins, isa):
    """A 1x1 convolution of one group over a 1x1 image (squeeze-and-excitation blocks) is a
    dense layer: images as rows, the weights as the packed B, so that each image streams the
    weights once through whole vectors (as a conv_gemm, every 14 x 32 tile used one of its 32
    columns). None for any other convolution."""
    a = node.attrs
    x_t, w_t = ins[:2]
    if a["group"] != 1 or any(d != 1 for d in (*x_t.shape[2:], *w_t.shape[2:])) or any(a["pads"]):
        return None
    m, k = x_t.shape[0], x_t.shape[1]
    w = passes.constant_value(graph, node.inputs[1]).astype(np.float32).reshape(w_t.shape[0], k)
    bias = len(node.inputs) == 3
    plan = SP.make_plan(m, w_t.shape[0], k, isa=isa, b="packed", bias="col" if bias else "none")
    attrs = {"plan": SP.plan_tuple(plan), "isa": isa, "batch": (), "shape": node.outputs[0].shape}
    operands = [node.inputs[0], SP.pack_b(w.T, plan)]
    if bias:
        operands.append(passes.constant_value(graph, node.inputs[2]).astype(np.float32))
    return "sgemm", operands, attrs
