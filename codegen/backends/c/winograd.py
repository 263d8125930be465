"""Winograd convolution for the C backend: 3x3, stride-1 float32 convolutions as a*a products
of transformed weights and transformed input tiles on the packed GEMM (runtime_c/kernels/sgemm.h).

F(m x m, 3 x 3) computes each m x m tile of outputs from an a x a tile of inputs (a = m + 2):

    Y = A^T [ sum_c U_c (.) (B^T d_c B) ] A,     U_c = G g_c G^T,

so the direct convolution's 9 * m * m multiply-adds per tile, channel and output channel
become a * a (16 for F(2x2), 36 for F(4x4): 2.25x and 4x fewer), spent in a * a matrix
products M_xi (K x tiles) = U_xi (K x C) @ V_xi (C x tiles). ``lower_winograd`` (called by
``lowering.lower_linear``) picks, per convolution, the algorithm the cost model ``estimates``
says is fastest: im2col + GEMM (``conv_gemm``) or Winograd with 2x2 or 4x4 tiles
(``conv_winograd``, this module); the choice is the node's ``algorithm`` attribute (and
``conv_algorithm`` names it for any conv step, as ``flowc inspect`` prints).

``conv_winograd(x, u, bias?, epilogue inputs...)``: ``u`` holds the a*a transformed weight
matrices U_xi, each packed as the GEMM's A operand (``plan``: m = K, n = the tiles of a chunk,
k = C); transformed at compile time in float64 and rounded once. The kernel
(runtime_c/kernels/winograd.h) works on chunks of whole tile rows of one image, as many rows
as the cost model finds fastest (``chunk_rows``: fewer passes over the weights, until the
chunk's transformed inputs and products overflow L2): each input channel's rows are split by
column phase so that every tile's window is at unit stride, transformed and written straight
into the packed B panels of the a*a products; the products run on the packed GEMM; each
output channel's tiles are transformed back, biased, stored and given the step's epilogue
(activation, residual add: the conv_gemm epilogue) while in L1. An image's chunks differ by one
tile row at most (14 rows in 4 chunks: 3, 4, 3, 4). With ``parts`` threads, each part takes a
contiguous run of whole chunks; when there are fewer chunks than parts (small images), every part
transforms each chunk's input and computes its own slice of the products (fc_sgemm's parts)
and of the output.

Accuracy (the C kernel in float32 against float64, max |error| / max |y|, random and
trained-like data, 16 to 512 channels): F(2x2) at most 6e-7, as im2col (5e-7); F(4x4) at most
1.2e-5 (1.4e-5 of the largest output of the worst channel), RMS 1e-6 to 3.3e-6. The tests
hold F(4x4) to 3e-5.
"""

from __future__ import annotations

import numpy as np

from graphdef.errors import ShapeError
from graphdef.ir import TensorType
from graphdef.ops._util import check_dtype
from graphdef.registry import KERNEL, Attr, Example, Sample, defop

from ...render.splits import PARALLEL_FLOPS
from . import conv_direct
from .gemm_ops import _EXAMPLE_ISA, _INTERNAL, PRODUCT_ATTRS, _check_epilogue, _epilogue, _fixed, split_inputs
from .gemm_steps import CHUNK_BYTES, _product, item_parts
from .op_table import Call, kernel
from .sgemm import CACHES, make_plan, pack_a, plan_of, plan_tuple, tile, unpack_a, with_fields

# ----------------------------------------------------------------------------- the transforms
# F(m x m, 3 x 3): (B^T, G, A^T), Lavin & Gray; F(4x4) interpolates at 0, +-1, +-2 and infinity.
MATRICES = {
    2: (
        [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
        [[1, 0, 0], [1 / 2, 1 / 2, 1 / 2], [1 / 2, -1 / 2, 1 / 2], [0, 0, 1]],
        [[1, 1, 1, 0], [0, 1, -1, -1]],
    ),
    4: (
        [
            [4, 0, -5, 0, 1, 0],
            [0, -4, -4, 1, 1, 0],
            [0, 4, -4, -1, 1, 0],
            [0, -2, -1, 2, 1, 0],
            [0, 2, -1, -2, 1, 0],
            [0, 4, 0, -5, 0, 1],
        ],
        [
            [1 / 4, 0, 0],
            [-1 / 6, -1 / 6, -1 / 6],
            [-1 / 6, 1 / 6, -1 / 6],
            [1 / 24, 1 / 12, 1 / 6],
            [1 / 24, -1 / 12, 1 / 6],
            [0, 0, 1],
        ],
        [[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]],
    ),
}
ALGORITHMS = {"winograd2x2": 2, "winograd4x4": 4}


def matrices(m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(B^T, G, A^T) of F(m x m, 3 x 3) as float64 arrays."""
    return tuple(np.array(x, np.float64) for x in MATRICES[m])


def transform_weights(w, m: int) -> np.ndarray:
    """U = G g G^T for every (output, input) channel pair of 3x3 weights ``w`` (K, C, 3, 3):
    (a*a, K, C) float32, position xi = r*a + s first; computed in float64, rounded once.

    >>> transform_weights(np.ones((1, 1, 3, 3)), 2)[:, 0, 0]
    array([1.  , 1.5 , 0.5 , 1.  , 1.5 , 2.25, 0.75, 1.5 , 0.5 , 0.75, 0.25,
           0.5 , 1.  , 1.5 , 0.5 , 1.  ], dtype=float32)
    """
    _, g, _ = matrices(m)
    u = np.einsum("ri,kcij,sj->rskc", g, np.asarray(w, np.float64), g)
    return u.reshape((m + 2) ** 2, *np.shape(w)[:2]).astype(np.float32)


def tiles(out, m: int) -> tuple[int, int]:
    """(tile rows, tiles per row) covering an output plane ``out`` (OH, OW) with m x m tiles."""
    return -(-out[0] // m), -(-out[1] // m)


def winograd_ref(x, u, m: int, out, pads) -> np.ndarray:
    """The convolution as F(m x m, 3 x 3) computes it, in float64: x (N, C, H, W), u (a*a, K,
    C) the transformed weights, ``out`` (OH, OW), ``pads`` (top, left, ...)."""
    bt, _, at = matrices(m)
    a = m + 2
    x = np.asarray(x, np.float64)
    n, c, h, w = x.shape
    th, tw = tiles(out, m)
    xp = np.zeros((n, c, th * m + 2, tw * m + 2))
    rows, cols = min(h, xp.shape[2] - pads[0]), min(w, xp.shape[3] - pads[1])
    xp[:, :, pads[0] : pads[0] + rows, pads[1] : pads[1] + cols] = x[:, :, :rows, :cols]
    d = np.lib.stride_tricks.sliding_window_view(xp, (a, a), axis=(2, 3))[:, :, ::m, ::m]
    v = np.einsum("ri,nctuij,sj->ncturs", bt, d, bt)
    prod = np.einsum("rskc,ncturs->nkturs", np.asarray(u, np.float64).reshape(a, a, *u.shape[1:]), v)
    y = np.einsum("ir,nkturs,js->nktiuj", at, prod, at)
    return y.reshape(n, -1, th * m, tw * m)[:, :, : out[0], : out[1]]


# ----------------------------------------------------------------------------- the cost model
# One core of the machine the generated code was measured on (AVX-512; 3x3 convolutions of
# 64 to 512 channels on 56x56 down to 7x7 outputs, single layers and inside ResNet-18). Both
# algorithms run the packed GEMM at about PEAK_FLOPS * C / (C + 16) (short sums over C pay
# for their tile stores); weights come once from memory at BANDWIDTH (a model's weights are
# not in cache when a layer starts) and then again, in part, from cache for every further
# chunk or column block; Winograd's transforms cost about TRANSFORM seconds per transformed
# value (a*a per tile and channel, input and output side alike) plus CALL per product and
# per channel pass of a chunk; its chunk's transformed inputs and products that overflow L2
# go to the next cache and back.
PEAK_FLOPS = 170e9
BANDWIDTH = 12e9
CACHE_BANDWIDTH = 25e9
RELOAD = 0.5
"""Share of a re-read weight block that stalls the GEMM (the rest overlaps with it)."""
TRANSFORM = 0.14e-9
CALL = 30e-9
"""Fixed cost of each of a chunk's a*a products and of each channel's pass over a chunk."""


def _gemm_seconds(flops: float, depth: int) -> float:
    return flops / (PEAK_FLOPS * depth / (depth + 16))


def _split_seconds(items: list[tuple[float, float]], parts: int) -> float:
    """Time of work items (shared, per-part) over ``parts`` threads: each part a contiguous
    run of items (its image rows follow the previous step's slice of the columns, so it reads
    what its own core wrote), or, with fewer items than parts, every part doing the shared
    work of each and 1/parts of the rest."""
    if parts <= 1:
        return sum(a + b for a, b in items)
    n = len(items)
    if n < parts:
        return sum(shared + rest / parts for shared, rest in items)
    return max(sum(a + b for a, b in items[q * n // parts : (q + 1) * n // parts]) for q in range(parts))


def im2col_seconds(x_shape, k: int, out, parts: int = 1, isa: str = "avx512") -> float:
    """Estimated seconds of a 3x3 convolution (input ``x_shape``, K channels of ``out``) by
    im2col + GEMM (conv_gemm) with ``parts`` threads."""
    n, c = x_shape[:2]
    wbytes = 4 * k * c * 9
    flops = 2 * k * c * 9 * n * out[0] * out[1]
    t = _gemm_seconds(flops, c) / parts + wbytes / BANDWIDTH + RELOAD * wbytes / CACHE_BANDWIDTH
    cols = 4 * c * 9 * out[0] * out[1]  # an image's im2col copy
    single = cols <= CHUNK_BYTES or out[0] * out[1] <= 8 * tile(isa)[1]  # gemm_steps.chunking
    if parts > 1 and n < parts and single:
        # one slice an image, fewer than parts: every part copies it (gemm_steps.item_parts)
        t += n * cols / CACHE_BANDWIDTH
    return t


def winograd_seconds(m: int, x_shape, k: int, out, isa: str, parts: int = 1, rows: int | None = None):
    """Estimated seconds of the same convolution by Winograd F(m x m, 3 x 3) in chunks of
    ``rows`` tile rows (default: ``chunk_rows``)."""
    n, c = x_shape[:2]
    a2 = (m + 2) ** 2
    th, tw = tiles(out, m)
    nr = tile(isa)[1]
    rows = rows or chunk_rows(m, x_shape, k, out, isa, parts)
    ubytes = 4 * a2 * k * c
    items = []
    count = -(-th // rows)
    for _ in range(n):
        for q in range(count):
            t = ((q + 1) * th // count - q * th // count) * tw
            npad = -(-t // nr) * nr
            ws = 4 * a2 * npad * (c + k)
            gemm = _gemm_seconds(2 * a2 * k * c * npad, c)
            spill = 2 * max(0, ws - CACHES[isa][1]) / CACHE_BANDWIDTH
            reload = RELOAD * ubytes / CACHE_BANDWIDTH
            fixed = CALL * (a2 + c + k)
            items.append((TRANSFORM * a2 * c * npad, gemm + spill + reload + fixed + TRANSFORM * a2 * k * t))
    return _split_seconds(items, parts) + ubytes / BANDWIDTH


def chunk_rows(m: int, x_shape, k: int, out, isa: str, parts: int = 1) -> int:
    """Tile rows per chunk: the count the cost model finds fastest (more rows: fewer passes
    over the weights and less padding to the micro-tile, until the chunk's transformed inputs
    and products overflow L2): the largest chunk's; the chunks of an image are evened out to
    differ by one row at most."""
    th = tiles(out, m)[0]
    even = sorted({-(-th // -(-th // r)) for r in range(1, th + 1)})
    if parts > 1 and x_shape[0] * th >= parts:  # whole chunks for every part: sharing chunks
        # (each part transforming all the input) measured slower than one thread on small layers
        even = [r for r in even if x_shape[0] * -(-th // r) >= parts] or even
    return min(even, key=lambda r: (winograd_seconds(m, x_shape, k, out, isa, parts, r), -r))


def estimates(x_shape, k: int, out, isa: str, parts: int = 1) -> dict[str, float]:
    """Estimated seconds of a 3x3 stride-1 convolution of input ``x_shape`` (N, C, H, W) into
    K channels of ``out`` (OH, OW) by each algorithm, "im2col" and the Winograd variants, with
    ``parts`` threads.

    >>> e = estimates((1, 64, 56, 56), 64, (56, 56), "avx512")
    >>> min(e, key=e.get)
    'winograd4x4'
    >>> e = estimates((1, 512, 7, 7), 512, (7, 7), "avx512")
    >>> min(e, key=e.get)
    'im2col'
    """
    res = {"im2col": im2col_seconds(x_shape, k, out, parts, isa)}
    for name, m in ALGORITHMS.items():
        res[name] = winograd_seconds(m, x_shape, k, out, isa, parts)
    return res


def eligible(x_shape, w_shape, attrs) -> bool:
    """Whether Winograd F(m x m, 3 x 3) computes this conv: 2-D, 3x3, stride 1, no dilation,
    one group."""
    return (
        len(x_shape) == 4
        and tuple(w_shape[2:]) == (3, 3)
        and tuple(attrs["strides"]) == (1, 1)
        and tuple(attrs["dilations"]) == (1, 1)
        and attrs["group"] == 1
    )


MARGIN = 0.9
"""Winograd is chosen where its estimate is below this share of im2col's: close calls (tiny
convolutions, where fixed costs the model leaves out weigh most) keep the exact algorithm."""


MIN_CHANNELS = 8
"""Fewer input channels than this go to the direct tiles (conv_direct.py) where they apply: each
tile's input transform then serves products only a few channels deep. A 3 -> 16 channel 3x3
on 32x32: Winograd 15.5 / 11.0 us at 1 / 2 threads, the direct tiles 13.1 / 8.7."""


def choose(x_shape, w_shape, out, attrs, isa: str, parts: int = 1) -> tuple[str, dict]:
    """(algorithm, estimates): the Winograd variant estimated fastest where it beats im2col by
    MARGIN, else im2col (and im2col only, with no estimates, where Winograd does not apply).

    >>> attrs = {"strides": (1, 1), "dilations": (1, 1), "group": 1}
    >>> choose((1, 64, 56, 56), (64, 64, 3, 3), (56, 56), attrs, "avx512")[0]
    'winograd4x4'
    >>> choose((1, 8, 10, 10), (16, 8, 3, 3), (10, 10), attrs, "avx512")[0]
    'im2col'
    """
    if not eligible(x_shape, w_shape, attrs):
        return "im2col", {}
    est = estimates(x_shape, w_shape[0], out, isa, parts)
    best = min(ALGORITHMS, key=est.get)
    if x_shape[1] < MIN_CHANNELS and conv_direct.eligible(x_shape, w_shape, out, attrs, isa):
        return "im2col", est  # the direct tiles (lowering.lower_linear)
    return (best if est[best] < MARGIN * est["im2col"] else "im2col"), est


# ----------------------------------------------------------------------------- lowering
def _estimate_attr(est: dict) -> tuple:
    """The estimates as a node attribute: (algorithm, microseconds) pairs, sorted."""
    return tuple(sorted((name, round(s * 1e6, 1)) for name, s in est.items()))


def lower_winograd(node, ins, w, bias, isa: str, threads: int = 1):
    """(``conv_winograd``'s (op, operands, attrs) or None, estimates) for a float32 conv with
    constant weights ``w`` (and ``bias``, or None; ``lower_linear`` reads both from the graph):
    the triple where the cost model prefers Winograd to im2col, else None (``lower_linear``
    then makes a ``conv_gemm`` carrying the estimates, () where Winograd does not apply)."""
    x_t, w_t = ins[:2]
    out = node.outputs[0].shape[2:]
    if not eligible(x_t.shape, w_t.shape, node.attrs) or min(out) < 1:
        return None, ()
    if np.array_equal(w, np.round(w)):
        # integer weights: a quantized convolution (graphdef/onnx/ops_quant.py), whose integer
        # sums im2col computes exactly in float32; Winograd's transforms would round them
        return None, ()
    flops = 2 * node.outputs[0].size * w_t.shape[1] * 9
    parts = threads if threads > 1 and flops >= PARALLEL_FLOPS else 1
    algorithm, est = choose(x_t.shape, w_t.shape, out, node.attrs, isa, parts)
    if algorithm not in ALGORITHMS:
        return None, _estimate_attr(est)
    m = ALGORITHMS[algorithm]
    k, c = w_t.shape[:2]
    rows = chunk_rows(m, x_t.shape, k, out, isa, parts)
    plan = chunk_plan(k, c, rows * tiles(out, m)[1], isa, bias is not None)
    u = transform_weights(w, m)
    attrs = {
        "plan": plan_tuple(plan),
        "isa": isa,
        "algorithm": algorithm,
        "rows": rows,
        "out": tuple(out),
        "pads": tuple(node.attrs["pads"]),
        "estimates": _estimate_attr(est),
        "parts": parts,  # what the chunks were sized for
    }
    operands = [node.inputs[0], np.concatenate([pack_a(ux, plan) for ux in u])]
    if bias is not None:
        operands.append(np.asarray(bias, np.float32))
    return ("conv_winograd", operands, attrs), attrs["estimates"]


def chunk_plan(k: int, c: int, chunk_tiles: int, isa: str, bias: bool):
    """The products' plan for a chunk of ``chunk_tiles`` tiles: U_xi (K x C, packed at compile
    time) times V_xi (C x the tiles padded to the micro-tile, packed by the input transform);
    ``bias`` marks the node's bias input (the output transform adds it)."""
    nr = tile(isa)[1]
    npad = -(-chunk_tiles // nr) * nr
    return make_plan(k, npad, c, isa=isa, a="packed", b="packed", bias="row" if bias else "none")


def conv_algorithm(node) -> str | None:
    """How a conv step computes: "direct" (1x1 conv_gemm, or the plain conv kernel), "im2col",
    "tiles" (register tiles, conv_direct.py), "winograd2x2" or "winograd4x4", "expand+depthwise" (a 1x1
    expansion and its depthwise conv as one step, pointwise_depthwise.py); None for other ops."""
    if node.op == "conv_winograd":
        return node.attrs["algorithm"]
    if node.op == "conv_direct":
        return "tiles"
    if node.op == "conv_gemm":
        return "direct" if node.attrs["direct"] else "im2col"
    if node.op in ("conv", "dwconv"):
        return "direct"
    if node.op == "pwdw":
        return "expand+depthwise"
    return None


def describe(node) -> str | None:
    """``conv_algorithm``, with the cost model's estimates where it chose between im2col and
    Winograd (``flowc inspect`` prints this for every convolution step)."""
    algorithm = conv_algorithm(node)
    est = node.attrs.get("estimates", ()) if node.op in ("conv_winograd", "conv_gemm", "conv_direct") else ()
    if not est:
        return algorithm
    return f"{algorithm} (estimated " + ", ".join(f"{name} {us:g} us" for name, us in est) + ")"


# ----------------------------------------------------------------------------- the op
def _tile(attrs) -> int:
    return ALGORITHMS[attrs["algorithm"]]


def _infer(types, attrs):
    for t in types:
        check_dtype(t, ("float32",))
    x = types[0]
    p = plan_of(attrs)
    a2 = (_tile(attrs) + 2) ** 2
    if x.rank != 4 or x.shape[1] != p.k:
        raise ShapeError(f"input {x.shape} does not have the plan's {p.k} channels")
    if types[1].size != a2 * p.packed_a_floats():
        raise ShapeError(
            f"transformed weights hold {types[1].size} values, the plan needs {a2} x {p.packed_a_floats()}"
        )
    oh, ow = attrs["out"]
    pads = attrs["pads"]
    if (oh, ow) != (x.shape[2] + pads[0] + pads[2] - 2, x.shape[3] + pads[1] + pads[3] - 2):
        raise ShapeError(f"output plane {(oh, ow)} is not that of a 3x3 conv of {x.shape} with pads {pads}")
    out = TensorType((x.shape[0], p.m, oh, ow), "float32")
    return _check_epilogue(out, split_inputs(types, attrs)[1], attrs)


def _ref(xs, attrs):
    p = plan_of(attrs)
    m = _tile(attrs)
    u = np.stack([unpack_a(part, p) for part in np.split(np.asarray(xs[1]).reshape(-1), (m + 2) ** 2)])
    y = winograd_ref(xs[0], u, m, attrs["out"], attrs["pads"])
    bias, extras = split_inputs(xs, attrs)
    if bias is not None:
        y = y + np.asarray(bias, np.float64).reshape(1, -1, 1, 1)
    return _epilogue(y.astype(np.float32), extras, attrs, "ref")


def _flops(ins, outs, attrs):
    """The products' multiply-adds (the transforms add a few percent)."""
    p = plan_of(attrs)
    th, tw = tiles(attrs["out"], _tile(attrs))
    return 2 * (_tile(attrs) + 2) ** 2 * p.m * p.k * th * tw * outs[0].shape[0]


def _example(x_shape, w, pads, algorithm, bias=False, rows=None):
    """An example of conv_winograd for input ``x_shape`` and 3x3 weights ``w`` (K, C, 3, 3)."""
    m = ALGORITHMS[algorithm]
    out = (x_shape[2] + pads[0] + pads[2] - 2, x_shape[3] + pads[1] + pads[3] - 2)
    rows = rows or tiles(out, m)[0]
    plan = chunk_plan(w.shape[0], w.shape[1], rows * tiles(out, m)[1], _EXAMPLE_ISA, bias)
    u = np.concatenate([pack_a(ux, plan) for ux in transform_weights(w, m)])
    attrs = {
        "plan": plan_tuple(plan),
        "isa": _EXAMPLE_ISA,
        "algorithm": algorithm,
        "rows": rows,
        "out": out,
        "pads": pads,
        "estimates": (),
    }
    inputs = (Sample(x_shape), u) + ((Sample((w.shape[0],)),) if bias else ())
    return Example(inputs, attrs, None, grad=False)


defop(
    "conv_winograd",
    ("x", "u", "more*?"),
    _infer,
    _ref,
    _INTERNAL,
    attrs={
        **PRODUCT_ATTRS,
        "algorithm": Attr("str"),
        "rows": Attr("int"),
        "out": Attr("ints"),
        "pads": Attr("ints"),
        "estimates": Attr("any", ()),
    },
    kind=KERNEL,
    flops=_flops,
    doc="float32 3x3 stride-1 convolution by Winograd F(2x2, 3x3) or F(4x4, 3x3): transformed "
    "weights packed per position, products on the packed GEMM; inputs x, u, then bias if the plan "
    "has one, then epilogue inputs",
    examples=(
        # 4x4 tiles, padded, odd sizes (partial tiles at the right and bottom), bias, two chunks;
        # small weights: F(4x4)'s rounding (about 1e-5 of the largest output) then stays within
        # the float32 tolerance of the examples' checks
        _example((2, 3, 7, 9), 0.02 * _fixed(5, 3, 3, 3, seed=11), (1, 1, 1, 1), "winograd4x4", True, 1),
        # 2x2 tiles, unpadded
        _example((1, 4, 6, 5), _fixed(3, 4, 3, 3, seed=12), (0, 0, 0, 0), "winograd2x2"),
    ),
)


# ----------------------------------------------------------------------------- C lowering
def _r16(floats: int) -> int:
    return -(-floats // 16) * 16


VECTOR = 16
"""A tile row's input transform runs over whole vectors of this many tiles (the widest)."""


def _layout(attrs, ins) -> dict:
    """The chunks, tail plan and per-part scratch (floats of each buffer) of a conv_winograd
    step: ``xp`` the chunk's input rows, padded, ``ph`` the same by column phase,
    ``tmp`` the half-transformed tiles (then the half-transformed outputs), ``vp`` the
    transformed inputs as the packed B of every product, ``mb`` the products, ``yt`` one
    output channel's tiles."""
    p = plan_of(attrs)
    m = _tile(attrs)
    a2 = (m + 2) ** 2
    th, tw = tiles(attrs["out"], m)
    rows = attrs["rows"]
    n = ins[0].shape[0]
    count = -(-th // rows)  # chunks per image, of th // count or (the plan's) rows tile rows
    tail_rows = th // count if th % count else 0
    tail = with_fields(p, n=-(-tail_rows * tw // p.nr) * p.nr, bias=0) if tail_rows else None
    npad = p.n
    twv = -(-tw // VECTOR) * VECTOR
    pw = twv + 1
    ts = _r16(max(npad, (rows - 1) * tw + twv))
    floats = {
        "xp": _r16((rows * m + 2) * m * pw),
        "ph": _r16((rows * m + 2) * m * pw),
        "tmp": a2 * ts,
        "vp": a2 * p.k * npad,
        "mb": a2 * p.m * npad,
        "yt": m * m * npad,
    }
    items = n * count
    return {
        "m": m,
        "a2": a2,
        "th": th,
        "tw": tw,
        "twv": twv,
        "pw": pw,
        "ts": ts,
        "rows": rows,
        "count": count,
        "n_items": items,
        "lmax": rows * tw,
        "npad": npad,
        "tail": tail,
        "floats": floats,
        "part_bytes": 4 * sum(floats.values()),
        **item_parts(items, attrs["parts"]),
    }


def _scratch(ins, outs, attrs, isa):
    lay = _layout(attrs, ins)
    return lay["part_bytes"] * lay["runs"]


_SIZES = ("m", "a2", "th", "tw", "twv", "pw", "ts", "rows", "count", "n_items", "lmax", "npad", "part_bytes")
"""The layout's sizes the templates print."""


@kernel("conv_winograd", scratch=_scratch)
def _conv_winograd(s):
    """Chunks of tile rows: input transform into packed panels, a*a products, output transform
    with bias and epilogue (templates/c/ops/conv_winograd*.j2, runtime_c/kernels/winograd.h)."""
    x, attrs = s.ins[0], s.attrs
    p = plan_of(attrs)
    lay = _layout(attrs, s.ins)
    layouts = attrs["epilogue"][2] if attrs["epilogue"] else ()
    oh, ow = attrs["out"]
    runs = lay["runs"]
    k = _product(s, p, runs)
    offsets, at = {}, 0
    for name, floats in lay["floats"].items():
        offsets[name] = at
        at += floats
    k.update(
        {key: lay[key] for key in _SIZES},
        plan=with_fields(p, bias=0).c_init(),
        tail=lay["tail"].c_init() if lay["tail"] else None,
        bias_i="A->bias[i]" if p.bias else "0.0f",
        e_n=[lay_[2][1] for lay_ in layouts],
        offsets=offsets,
        n=x.shape[0],
        c=p.k,
        hw=x.shape[2] * x.shape[3],
        x_image=x.size // x.shape[0],
        y_image=p.m * oh * ow,
        xp_floats=lay["floats"]["xp"],
        h=x.shape[2],
        w=x.shape[3],
        oh=oh,
        ow=ow,
        ohw=oh * ow,
        pt=attrs["pads"][0],
        pl=attrs["pads"][1],
        kc=p.kc_eff,
        nr=p.nr,
        ua=p.packed_a_floats(),
        mstride=p.m * lay["npad"],
        first=lay["first"],
        end=lay["end"],
        gsplit=lay["gsplit"],
    )
    headers = ("kernels/sgemm.h", "kernels/winograd.h")
    return Call("conv_winograd", k, headers, prelude="conv_winograd", parallel=runs > 1)
