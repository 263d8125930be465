"""A time model for microcontrollers: each step's instructions, predicted from its shape.

On a Cortex-M a step's time is its instruction count (no cache, one issue a cycle on an M4;
QEMU's ``-icount`` counts them, codegen/backends/c/mcu.py ``run_firmware``). Each step falls
into a class (its op; an integer convolution's form, qconv_form; a float convolution's im2col
or direct product) and its instructions are

    a * MACs + b * output elements + c * windows + d

(a product's windows: its output positions times the k each sums, what a packing copies; a
fused elementwise loop's "MACs" are its elements times its ops; other steps count their input
elements as windows)

with (a, b, c, d) per class and core, fitted by least squares to the steps of the MLPerf Tiny
models (samples/tiny.py, int8 QDQ and float) profiled on each core's QEMU board
(``python bench/mcu.py --fit``, which rewrites mcu_costs.py and prints the fit's error). A
class the fit never saw takes the core's "product" line (fitted on every product's steps) or
its "other" line (instructions per element). ``flowc inspect --arch cortex-m4``
prints these predictions in place of the host's time model.

It is a model of these kernels on these cores, not a simulator: an instruction is not a
cycle (QEMU has no pipeline or wait states), and a shape far from the fitted ones (a 7x7
kernel, thousands of channels) may miss by more than the stated error.
"""

from __future__ import annotations

import numpy as np

from graphdef.registry import get_op

from ..c.ops.quant import qconv_form

PRODUCTS = ("qconv", "conv_gemm", "sgemm", "dwconv", "conv", "matmul", "gemm", "conv_direct")
_PRODUCT_CLASSES = {"sgemm", "dwconv", "conv", "matmul", "gemm", "conv_direct", "conv_gemm direct",
                    "conv_gemm im2col"}  # fmt: skip


def step_class(node, macros: str, graph) -> str:
    """The class of a step: an integer convolution's form (its words before the colon), a
    float convolution's im2col or direct product, else the op."""
    if node.op == "qconv":
        form = qconv_form(node, macros, graph) or "int16 planes"
        return "qconv " + form.split(":")[0].split(" (")[0]
    if node.op == "conv_gemm":
        return "conv_gemm direct" if node.attrs["direct"] else "conv_gemm im2col"
    return node.op


def features(node, graph) -> tuple[int, int, int]:
    """Three numbers a step's instructions grow with: for a product (MACs, output elements,
    the windows' volume: output positions times the k of each, what a packing copies); for a
    fused elementwise loop (output elements times its ops, output elements, input elements);
    else (0, output elements, input elements that are not constants)."""
    ins = [graph.type_of(r) for r in node.inputs]
    outs = sum(t.size for t in node.outputs)
    if node.op in PRODUCTS:
        opdef = get_op(node.op)
        macs = (opdef.flops(ins, node.outputs, node.attrs) if opdef.flops else 0) // 2
        y = node.outputs[0]
        channels = y.shape[1] if y.rank >= 2 else 1
        return int(macs), int(outs), int(macs // max(1, channels))
    consts = set(getattr(graph, "constants", {}) or {})
    data = sum(t.size for r, t in zip(node.inputs, ins) if r.node not in consts)
    if node.op == "fused":
        return int(outs * len(node.attrs["program"])), int(outs), int(data)
    return 0, int(outs), int(data)


def predict(node, graph, core: str, macros: str, costs: dict | None = None) -> int | None:
    """Predicted instructions of ``node`` on ``core`` (None where no fit for the core exists)."""
    if costs is None:
        from .mcu_costs import COSTS as costs
    table = costs.get(core)
    if not table:
        return None
    cls = step_class(node, macros, graph)
    a, b, c, d = table.get(cls, table["product" if node.op in PRODUCTS else "other"])
    macs, outs, ins = features(node, graph)
    return max(0, round(a * macs + b * outs + c * ins + d))


def is_product_class(cls: str) -> bool:
    return cls in _PRODUCT_CLASSES or cls.startswith("qconv")


def fit(samples: list[tuple[str, str, tuple[int, int, int], int]]) -> dict:
    """COSTS from measured steps: ``samples`` of (core, class, features, instructions). Per
    core and class, least squares of the relative error over the features that vary, non-negative (a negative
    coefficient's feature is dropped and the rest refitted). For classes it never saw:
    "product", fitted on all the products' steps, and "other", the instructions per input and
    output element of the steps that are not products."""
    out: dict[str, dict[str, tuple]] = {}
    for core in sorted({s[0] for s in samples}):
        rows = [s for s in samples if s[0] == core]
        table = {}
        for cls in sorted({s[1] for s in rows}):
            pts = [(f, y) for _, c, f, y in rows if c == cls]
            table[cls] = _fit_class([f for f, _ in pts], [y for _, y in pts])
        prods = [(f, y) for _, c, f, y in rows if is_product_class(c)]
        table["product"] = _fit_class([f for f, _ in prods], [y for _, y in prods])
        rest = [(f, y) for _, c, f, y in rows if not is_product_class(c)]
        per = sum(y for _, y in rest) / max(1, sum(f[1] + f[2] for f, _ in rest))
        table["other"] = (0.0, per, per, 0.0)  # instructions per element in and out
        out[core] = table
    return out


def _fit_class(feats: list, ys: list) -> tuple[float, float, float, float]:
    x = np.array([[*f, 1.0] for f in feats], np.float64)
    y = np.array(ys, np.float64)
    keep = [j for j in range(3) if np.ptp(x[:, j]) > 0 or (len(ys) == 1 and x[0, j] > 0)]
    if len(ys) == 1:  # one sample: all of it on its largest feature
        j = max(range(3), key=lambda k: x[0, k])
        coef = [0.0, 0.0, 0.0, 0.0]
        if x[0, j] > 0:
            coef[j] = y[0] / x[0, j]
        else:
            coef[3] = y[0]
        return tuple(coef)
    cols = keep + [3]
    w = 1.0 / np.maximum(y, 1.0)  # relative errors: a small step counts as much as a large one
    while True:
        a = x[:, cols] * w[:, None]
        sol, *_ = np.linalg.lstsq(a / _scale(a), y * w, rcond=None)
        sol = sol / _scale(a)
        neg = [c for c, v in zip(cols, sol) if v < 0]
        if not neg or len(cols) == 1:
            break
        cols = [c for c in cols if c != neg[0]]
    coef = [0.0, 0.0, 0.0, 0.0]
    for c, v in zip(cols, sol):
        coef[c] = max(0.0, float(v))
    return tuple(coef)


def _scale(x: np.ndarray) -> np.ndarray:
    s = np.abs(x).max(axis=0)
    return np.where(s > 0, s, 1.0)
