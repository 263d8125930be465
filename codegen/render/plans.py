"""Op plans every backend's kernels read: the sizes and strides of a product (matmul, gemm),
the windows of a convolution or pooling (padded to three spatial axes, or as stride-phase
planes), the (outer, len, inner) view of a reduction. Pure functions of the types and
attributes: what a step computes, not how a target computes it."""

from __future__ import annotations

import math

from graphdef.ir import TensorType
from graphdef.ops.products import gemm_dims, matmul_shapes
from graphdef.ops.reduce import runs

from . import layout as L


def matmul_plan(ins) -> tuple[dict, list[dict]]:
    """A (batched, broadcasting) matmul as strided products: sizes and strides of one product
    (rows of a and b contiguous), and the batch axes (innermost first) with each one's element
    strides in a, b and y (merged as far as all three allow; none for one product)."""
    ash, bsh, batch = matmul_shapes(*ins)
    m, k, n = ash[-2], ash[-1], bsh[-1]
    a_st = [st * m * k for st in L.broadcast_strides(ash[:-2], batch)] if batch else []
    b_st = [st * k * n for st in L.broadcast_strides(bsh[:-2], batch)] if batch else []
    y_st = [st * m * n for st in L.strides(batch)]
    dims, (a_st, b_st, y_st) = L.merge_dims(list(batch), a_st, b_st, y_st)
    product = {"m": m, "n": n, "k": k, "a_rs": k, "a_cs": 1, "b_rs": n, "b_cs": 1, "c_rs": 0, "c_cs": 0,
               "count": math.prod(batch)}  # fmt: skip
    return product, [{"size": d, "a": sa, "b": sb, "y": sy} for d, sa, sb, sy in zip(dims, a_st, b_st, y_st)][
        ::-1
    ]


def gemm_plan(ins, attrs) -> dict:
    """A gemm's sizes and element strides of a, b and (broadcast) c."""
    m, k, n = gemm_dims(ins, attrs)
    a_rs, a_cs = (1, m) if attrs["trans_a"] else (k, 1)
    b_rs, b_cs = (1, k) if attrs["trans_b"] else (n, 1)
    c_rs, c_cs = L.broadcast_strides(ins[2].shape, (m, n)) if len(ins) == 3 else (0, 0)
    return {"m": m, "n": n, "k": k, "a_rs": a_rs, "a_cs": a_cs, "b_rs": b_rs, "b_cs": b_cs, "c_rs": c_rs,
            "c_cs": c_cs}  # fmt: skip


def geom(x_shape, k_spatial, out_spatial, attrs) -> dict:
    """fc_conv_geom / fc_pool_geom fields: spatial sizes padded at the front to three axes."""
    n = len(k_spatial)
    return {
        "in": L.three(x_shape[2:], 1),
        "k": L.three(k_spatial, 1),
        "out": L.three(out_spatial, 1),
        "stride": L.three(attrs["strides"], 1),
        "pad": L.three(attrs["pads"][:n], 0),
        "pad_end": L.three(attrs["pads"][n:], 0),
        "dil": L.three(attrs["dilations"], 1),
    }


def phase_geom(x_shape, k_spatial, out_spatial, attrs) -> dict:
    """The windows of a 1-D or 2-D conv or pool as runtime_c's fc_dwconv_geom (less n, c, m):
    the kernels work on zero- (or -inf-) padded stride-phase planes of rows x cols cells."""
    g = geom(x_shape, k_spatial, out_spatial, attrs)
    (_, h, wd), (_, kh, kw), (_, oh, ow) = g["in"], g["k"], g["out"]
    (_, sh, sw), (_, ph, pw), (_, dh, dw) = g["stride"], g["pad"], g["dil"]
    return {
        "h": h, "w": wd, "oh": oh, "ow": ow, "kh": kh, "kw": kw, "sh": sh, "sw": sw,
        "ph": ph, "pw": pw, "dh": dh, "dw": dw,
        "rows": oh + (kh - 1) * dh // sh, "cols": ow + (kw - 1) * dw // sw,
    }  # fmt: skip


def phase_floats(g: dict) -> int:
    """fc_dwconv_scratch_floats: the phase planes, then one output plane on their grid."""
    return g["sh"] * g["sw"] * g["rows"] * g["cols"] + (g["oh"] - 1) * g["cols"] + g["ow"]


def depthwise_geom(ins, outs, attrs):
    """The fc_dwconv_geom of runtime_c/kernels/conv.h for a float32 conv of at most two spatial
    axes whose groups are single input channels (depthwise, any channel multiplier), else None."""
    x, w = ins[:2]
    if x.dtype != "float32" or x.rank > 4 or attrs["group"] != x.shape[1] or w.shape[1] != 1:
        return None
    if not outs[0].size:
        return None
    g = phase_geom(x.shape, w.shape[2:], outs[0].shape[2:], attrs)
    return {"n": x.shape[0], "c": x.shape[1], "m": w.shape[0], **g}


def pool_phases(ins, outs, attrs):
    """float32 max or average pooling of at most two spatial axes: the fc_dwconv_geom of the
    phase-plane kernel (fc_pool2d_f32 in runtime_c/kernels/pool.h), else None."""
    x = ins[0]
    if x.dtype != "float32" or x.rank > 4 or not outs[0].size:
        return None
    planes = x.shape[0] * x.shape[1]
    g = phase_geom(x.shape, attrs["kernel_shape"], outs[0].shape[2:], attrs)
    return {"n": 1, "c": planes, "m": planes, **g}


def pool_geom(x: TensorType, y: TensorType, attrs) -> dict:
    return {
        "planes": x.shape[0] * x.shape[1],
        "count_include_pad": int(attrs.get("count_include_pad", False)),
        **geom(x.shape, attrs["kernel_shape"], y.shape[2:], attrs),
    }


def reduce_view(x, axes) -> tuple[int, int, int]:
    """(outer, len, inner) of the one run of reduced axes."""
    group = (runs(x.shape, axes) or [[]])[0]
    return L.around(x.shape, group) if group else (x.size, 1, 1)
