"""Post-training quantization: a float ONNX model and calibration inputs -> a QDQ ONNX model.

``quantize_onnx(model, calibration, out)`` (and ``flowc quantize MODEL --calibrate data.npz -o
OUT``) writes the QDQ format onnxruntime's own quantizer writes and runs:

- weights: every constant weight of Conv, ConvTranspose-free Gemm and MatMul as int8, symmetric
  (zero point 0), one scale per output channel (``max |w| / 127``), read back through a
  DequantizeLinear; the constant biases of Conv and Gemm as int32 with scale x_scale * w_scale
  and zero point 0 (what onnxruntime's quantizer writes: such a layer runs in integers, in
  onnxruntime and in flowc, graphdef/onnx/qdq.py);
- activations: every non-constant input of those operators, and of Add, Mul, Concat, the pools,
  and the results of Conv and Gemm layers (after a Relu they go to) no such operator reads (the
  last layer's), as int8 per tensor, asymmetric (the range widened to hold 0, ``scale = (max - min) / 255``),
  through a QuantizeLinear -> DequantizeLinear pair; the range of each tensor is its minimum and
  maximum over the calibration inputs, or with ``percentile`` P the P-th percentile of its values
  above and the (100 - P)-th below;
- the calibration runs the float model with flowc's interpreter (every calibrated tensor made an
  output of a copy of the model).

The report (``Report``) compares the float and the int8 model on the calibration inputs, both
run by flowc's interpreter: how often the top-1 class (the argmax over the last axis of the
first output) agrees, the largest absolute difference of every output, and the bytes of the
weights in the two files.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from graphdef.errors import FlowcError

WEIGHT_OPS = {"Conv": 1, "Gemm": 1, "MatMul": 1}  # op -> how many leading inputs are (x, w)
# (a Flatten's input too: a pool before a dense layer then ends in integers, the Flatten moving them)
ACTIVATION_OPS = ("Conv", "Gemm", "MatMul", "Add", "Mul", "Concat", "AveragePool", "MaxPool",
                  "GlobalAveragePool", "Flatten")  # fmt: skip


@dataclass
class Report:
    samples: int
    top1_agreement: float  # share of samples whose top-1 class is the same
    max_abs_error: dict  # output name -> largest |float - int8| over the samples
    weight_bytes: tuple[int, int]  # initializer bytes of the float and the int8 file
    quantized_weights: int
    quantized_activations: int

    def lines(self) -> list[str]:
        f, q = self.weight_bytes
        errors = ", ".join(f"{k} {v:.4g}" for k, v in self.max_abs_error.items())
        return [
            f"quantized {self.quantized_weights} weights (int8 per channel) and {self.quantized_activations} "
            f"activations (int8 per tensor)",
            f"weights {f} B -> {q} B ({q / max(f, 1):.2f}x)",
            f"on {self.samples} calibration samples: top-1 agreement {self.top1_agreement:.3f}, "
            f"max abs error {errors}",
        ]


def _load_calibration(calibration, inputs: list[str], ranks: dict) -> list[dict]:
    """Samples as feeds: ``calibration`` is an .npz path or a dict name -> array whose first axis
    runs over samples: inputs of the model's shape (``ranks``: each input's rank) stacked, or
    rows of a batch (each sample a batch of 1)."""
    if isinstance(calibration, (str, Path)):
        try:
            with np.load(calibration, allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
        except OSError as e:
            raise FlowcError(f"{calibration}: cannot read calibration data ({e.strerror})") from None
        except ValueError as e:
            raise FlowcError(f"{calibration}: not an .npz archive of arrays ({type(e).__name__})") from None
    else:
        arrays = dict(calibration)
    missing = [n for n in inputs if n not in arrays]
    if missing:
        have = ", ".join(arrays) or "none"
        raise FlowcError(f"calibration data has no array for input(s) {', '.join(missing)} (it has {have})")
    counts = {len(arrays[n]) for n in inputs}
    if len(counts) != 1 or 0 in counts:
        raise FlowcError(
            "calibration arrays must hold the same, non-zero number of samples along their first axis"
        )
    (count,) = counts
    # an array one axis deeper than the input holds whole inputs; else each sample is a batch of 1
    return [
        {
            n: np.asarray(arrays[n][k] if arrays[n].ndim == ranks.get(n, -1) + 1 else arrays[n][k : k + 1])
            for n in inputs
        }
        for k in range(count)
    ]


def _graph_inputs(model) -> list[str]:
    inits = {t.name for t in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in inits]


def _run(path: Path, samples: list[dict], outputs: int | None = None) -> list[list[np.ndarray]]:
    import graphdef as gd

    graph = gd.load_onnx(path)
    names = [str(o) for o in graph.outputs]
    placeholders = [n.name for n in graph.nodes if n.op == "placeholder"]
    runs = []
    for feeds in samples:
        mapped = {p: feeds[p] for p in placeholders if p in feeds}
        runs.append([np.asarray(v) for v in gd.run(graph, mapped, names)][: outputs or len(names)])
    return runs


def _range(values: np.ndarray, percentile: float | None) -> tuple[float, float]:
    if percentile is None:
        lo, hi = float(values.min()), float(values.max())
    else:
        lo, hi = (float(v) for v in np.percentile(values, [100 - percentile, percentile]))
    return min(lo, 0.0), max(hi, 0.0)


def _activation_params(lo: float, hi: float) -> tuple[np.float32, np.int8]:
    scale = np.float32((hi - lo) / 255.0) if hi > lo else np.float32(1.0)
    zero = int(np.clip(np.round(-128 - lo / float(scale)), -128, 127))
    return scale, np.int8(zero)


def quantize_onnx(model, calibration, out, percentile: float | None = None) -> Report:
    """Write the int8 QDQ version of the ONNX ``model`` (a path) to ``out`` (see the module
    docstring); returns the report."""
    import onnx
    from onnx import helper, numpy_helper

    src = Path(model)
    try:
        m = onnx.load(src)
    except Exception as e:
        raise FlowcError(f"{src}: not a readable ONNX model ({type(e).__name__})") from None
    if percentile is not None and not 50.0 < percentile <= 100.0:
        raise FlowcError(f"--percentile must be in (50, 100], got {percentile}")
    ranks = {i.name: len(i.type.tensor_type.shape.dim) for i in m.graph.input}
    samples = _load_calibration(calibration, _graph_inputs(m), ranks)
    g = m.graph
    inits = {t.name: t for t in g.initializer}

    # which tensors: weights (constant second inputs) and activations (non-constant inputs)
    weights, activations = {}, []
    for node in g.node:
        if node.op_type in WEIGHT_OPS and len(node.input) > 1 and node.input[1] in inits:
            w = numpy_helper.to_array(inits[node.input[1]])
            if w.dtype == np.float32 and w.ndim >= 2:
                trans_b = any(a.name == "transB" and a.i for a in node.attribute)
                axis = 0 if node.op_type == "Conv" or (node.op_type == "Gemm" and trans_b) else w.ndim - 1
                weights.setdefault(node.input[1], (w, axis))
        if node.op_type in ACTIVATION_OPS:
            for name in node.input[: 1 if node.op_type in WEIGHT_OPS else len(node.input)]:
                if name and name not in inits and name not in activations:
                    activations.append(name)
    # the results of Conv and Gemm layers no quantized operator reads (the last layer's: a graph
    # output, or a Softmax's input) quantized too, so that those layers run in integers as well
    # (a Relu the layer's result goes to alone: its result instead, the Relu folded in)
    readers = {}
    for n in g.node:
        for name in n.input:
            readers.setdefault(name, []).append(n)
    results = []
    for n in g.node:
        if n.op_type not in ("Conv", "Gemm") or len(n.input) < 2 or n.input[1] not in weights:
            continue
        result, after = n.output[0], readers.get(n.output[0], [])
        if len(after) == 1 and after[0].op_type == "Relu" and result not in {o.name for o in g.output}:
            result = after[0].output[0]
        if n.input[0] in activations and result not in activations and result not in results:
            results.append(result)

    # calibration: the float model with every activation as an output
    import tempfile

    probe = copy.deepcopy(m)
    del probe.graph.output[:]
    outputs = {o.name for o in g.output}
    calibrated = activations + [r for r in results if r not in outputs]  # (an output is one already)
    for name in calibrated:
        probe.graph.output.append(helper.make_empty_tensor_value_info(name))
    for o in g.output:
        probe.graph.output.append(copy.deepcopy(o))
    with tempfile.TemporaryDirectory() as tmp:
        probe_path = Path(tmp) / "probe.onnx"
        onnx.save(probe, probe_path)
        runs = _run(probe_path, samples)
    ranges = {}
    at = {name: k for k, name in enumerate(calibrated + [o.name for o in g.output])}
    for name in activations + results:
        values = np.concatenate([r[at[name]].reshape(-1) for r in runs]).astype(np.float64)
        ranges[name] = _range(values, percentile)

    # the QDQ model
    q = copy.deepcopy(m)
    qg = q.graph
    new_inits, new_nodes, renamed, w_scales = [], [], {}, {}
    for name, (w, axis) in weights.items():
        moved = np.moveaxis(w, axis, 0).reshape(w.shape[axis], -1)
        scale = (np.abs(moved).max(axis=1) / 127.0).astype(np.float32)
        scale[scale == 0] = 1.0
        shape = [1] * w.ndim
        shape[axis] = -1
        wq = np.clip(np.round(w / scale.reshape(shape)), -127, 127).astype(np.int8)
        w_scales[name] = scale
        zero = np.zeros(scale.shape, np.int8)
        new_inits += [numpy_helper.from_array(wq, f"{name}_quantized"),
                      numpy_helper.from_array(scale, f"{name}_scale"),
                      numpy_helper.from_array(zero, f"{name}_zero_point")]  # fmt: skip
        ins = [f"{name}_quantized", f"{name}_scale", f"{name}_zero_point"]
        new_nodes.append(helper.make_node("DequantizeLinear", ins, [f"{name}_dequantized"], axis=axis,
                                          name=f"{name}_DequantizeLinear"))  # fmt: skip
        renamed[name] = f"{name}_dequantized"
    act_scales = {name: _activation_params(*ranges[name])[0] for name in activations}
    # biases of Conv and Gemm as int32 with scale x_scale * w_scale, zero point 0: as onnxruntime's
    # quantizer writes them, so that the layer runs in integers (graphdef/onnx/qdq.py)
    biased = {}
    for node in g.node:
        ins = list(node.input) + [""] * 3
        if node.op_type not in ("Conv", "Gemm") or ins[2] not in inits or ins[1] not in weights:
            continue
        if ins[0] not in act_scales or ins[2] in biased or ins[2] in weights:
            continue
        b = numpy_helper.to_array(inits[ins[2]])
        w_scale = w_scales[ins[1]]
        if b.dtype != np.float32 or b.ndim != 1 or w_scale.shape != b.shape:
            continue
        b_scale = (np.float32(act_scales[ins[0]]) * w_scale).astype(np.float32)
        bq = np.clip(np.round(b.astype(np.float64) / b_scale), -(2**31), 2**31 - 1).astype(np.int32)
        base = ins[2]
        new_inits += [numpy_helper.from_array(bq, f"{base}_quantized"),
                      numpy_helper.from_array(b_scale, f"{base}_scale")]  # fmt: skip
        new_nodes.append(helper.make_node("DequantizeLinear", [f"{base}_quantized", f"{base}_scale"],
                                          [f"{base}_dequantized"], axis=0,
                                          name=f"{base}_DequantizeLinear"))  # fmt: skip
        biased[base] = f"{base}_dequantized"
    for name in activations:
        scale, zero = _activation_params(*ranges[name])
        new_inits += [
            numpy_helper.from_array(np.asarray(scale, np.float32), f"{name}_act_scale"),
            numpy_helper.from_array(np.asarray(zero, np.int8), f"{name}_act_zero_point"),
        ]
        new_nodes += [
            helper.make_node("QuantizeLinear", [name, f"{name}_act_scale", f"{name}_act_zero_point"],
                             [f"{name}_act_quantized"], name=f"{name}_QuantizeLinear"),
            helper.make_node("DequantizeLinear", [f"{name}_act_quantized", f"{name}_act_scale",
                                                  f"{name}_act_zero_point"], [f"{name}_act_dequantized"],
                             name=f"{name}_act_DequantizeLinear"),
        ]  # fmt: skip
        renamed[name] = f"{name}_act_dequantized"
    for name in results:  # producer -> name_float -> QuantizeLinear -> DequantizeLinear -> name
        scale, zero = _activation_params(*ranges[name])
        producer = next(n for n in qg.node if name in n.output)
        producer.output[0] = f"{name}_float"
        if producer.name == name:  # the name moves on to the DequantizeLinear's value
            producer.name = f"{name}_float"
        new_inits += [
            numpy_helper.from_array(np.asarray(scale, np.float32), f"{name}_act_scale"),
            numpy_helper.from_array(np.asarray(zero, np.int8), f"{name}_act_zero_point"),
        ]
        new_nodes += [
            helper.make_node("QuantizeLinear", [f"{name}_float", f"{name}_act_scale",
                                                f"{name}_act_zero_point"],
                             [f"{name}_act_quantized"], name=f"{name}_QuantizeLinear"),
            helper.make_node("DequantizeLinear", [f"{name}_act_quantized", f"{name}_act_scale",
                                                  f"{name}_act_zero_point"], [name],
                             name=f"{name}_act_DequantizeLinear"),
        ]  # fmt: skip
    for node in qg.node:
        if node.op_type not in ACTIVATION_OPS:
            continue
        for k, name in enumerate(node.input):
            if node.op_type in WEIGHT_OPS and k == 1 and name in weights:
                node.input[k] = renamed[name]
            elif node.op_type in ("Conv", "Gemm") and k == 2 and name in biased:
                node.input[k] = biased[name]
            elif name in activations and (node.op_type not in WEIGHT_OPS or k == 0):
                node.input[k] = renamed[name]
    qg.node.extend(new_nodes)
    for name in [*weights, *biased]:
        qg.initializer.remove(next(t for t in qg.initializer if t.name == name))
    qg.initializer.extend(new_inits)
    _sort_nodes(qg)
    onnx.checker.check_model(q)
    out = Path(out)
    part = out.with_name(f".{out.name}.part")  # renamed into place once the report is made
    onnx.save(q, part)

    # the report: float against int8 on the calibration samples, by flowc's interpreter
    n_out = len(g.output)
    floats = [r[len(calibrated) :] for r in runs]
    try:
        ints = _run(part, samples, n_out)
    except BaseException:
        part.unlink(missing_ok=True)
        raise

    def top1(v: np.ndarray) -> int:
        return int(np.argmax(v.reshape(-1, v.shape[-1]), -1)[0])

    agree = [top1(a[0]) == top1(b[0]) for a, b in zip(floats, ints)]
    errors = {o.name: max(float(np.max(np.abs(a[k].astype(np.float64) - b[k]))) for a, b in zip(floats, ints))
              for k, o in enumerate(g.output)}  # fmt: skip

    def size(model) -> int:
        return sum(len(t.raw_data) or numpy_helper.to_array(t).nbytes for t in model.graph.initializer)

    os.replace(part, out)
    return Report(
        len(samples), float(np.mean(agree)), errors, (size(m), size(q)), len(weights),
        len(activations) + len(results),
    )  # fmt: skip


def _sort_nodes(graph) -> None:
    """Order the nodes so that each comes after the producers of its inputs (a stable
    topological sort: the original order where it is already valid)."""
    produced = {o for n in graph.node for o in n.output}
    available = {i.name for i in graph.input} | {t.name for t in graph.initializer} | {""}
    nodes, ordered = list(graph.node), []
    while nodes:
        for k, n in enumerate(nodes):
            if all(i in available or i not in produced for i in n.input):
                ordered.append(n)
                available.update(n.output)
                del nodes[k]
                break
        else:
            raise FlowcError("the quantized graph has a cycle")
    del graph.node[:]
    graph.node.extend(ordered)
