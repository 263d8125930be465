"""TFLite import: ``load_tflite(path)`` turns a .tflite flatbuffer into a static-shaped Graph.

The file is read with the ``tflite`` package (the published TFLite schema, generated for
Python). One subgraph (the model's main one; files with control-flow subgraphs are refused),
its inputs as placeholders in TFLite's own layout (NHWC for images) and names, its constant
tensors as constants, each operator by a converter below. Every operator the file uses that
flowc has no converter for is listed in one error before anything is built.

Layout: TFLite convolutions and pools work on NHWC tensors with OHWI weights (depthwise:
1HWC); flowc's on NCHW with OIHW weights. Each converter transposes its input to NCHW and its
result back; pairs of transposes between consecutive convolutions cancel in flowc's optimizer.

Float32 models compute as LiteRT's float kernels do, to float32 rounding (the tests compare
with LiteRT's interpreter). QUANTIZE and DEQUANTIZE follow TFLite's reference: ``round(x /
scale) + zero_point`` with halves away from zero, saturated; ``(q - zero_point) * scale``.

int8 (and uint8 per-tensor) CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED, ADD, MUL,
AVERAGE_POOL_2D, MAX_POOL_2D, PAD, RESHAPE, CONCATENATION (of alike-quantized inputs), SOFTMAX
MEAN and (int8) LOGISTIC, TANH and HARD_SWISH follow TFLite's integer reference kernels bit
for bit (integer.py: fixed-point requantization, fused activations as quantized bounds, the
softmax's fixed-point exp and reciprocal, the activations as tables of their 256 results); other
operators on quantized operands are refused by name. Convolutions and fully connected layers
run on the integer convolution ``qconv``; the other integer steps are int64 elementwise ops.
SHAPE, STRIDED_SLICE and PACK (how TensorFlow's converter computes a Flatten's target shape)
take any dtype.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..builder import Graph, Tensor, constant, placeholder, source_scope
from ..errors import NAME_LIMIT, FlowcError, UnsupportedError, printable
from ..ops import elementwise as E
from ..ops import math as M
from ..ops import nn as N
from ..ops import quant as Q
from ..ops import reduce as R
from ..ops import shape as S
from . import integer as I

# TensorType codes of the schema -> flowc dtypes
_DTYPES = {0: "float32", 1: "float16", 2: "int32", 3: "uint8", 4: "int64", 6: "bool", 7: "int16", 9: "int8",
           10: "float64"}  # fmt: skip
_RANGE = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767)}
MAX_TENSOR_BYTES = 1 << 31
MAX_RANK = 8  # the most dimensions a flowc tensor has


class TfliteImportError(FlowcError):
    """A .tflite file flowc cannot read (malformed, or a part of the format it does not take)."""


def _schema():
    try:
        import tflite
    except ImportError:
        raise FlowcError("reading .tflite files needs the tflite package: pip install tflite") from None
    return tflite


def is_tflite(data: bytes) -> bool:
    """Whether ``data`` starts like a TFLite flatbuffer (the "TFL3" file identifier)."""
    return len(data) >= 8 and data[4:8] == b"TFL3"


def load_tflite(path, name: str | None = None) -> Graph:
    """Import the .tflite model at ``path`` as a Graph named ``name`` (default: the file's stem)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise TfliteImportError(f"{path}: cannot read it ({e.strerror})") from None
    if not is_tflite(data):
        raise TfliteImportError(f"{path}: not a TFLite flatbuffer (no TFL3 file identifier)")
    tfl = _schema()
    try:
        return _Importer(tfl, data, path, name or path.stem).run()
    except (FlowcError, UnsupportedError):
        raise
    except Exception as e:  # a malformed flatbuffer: offsets out of range, bad unions
        raise TfliteImportError(f"{path}: malformed TFLite file ({type(e).__name__}: {e})") from None


def _op_names(tfl) -> dict[int, str]:
    return {
        v: k for k, v in vars(tfl.BuiltinOperator).items() if not k.startswith("_") and isinstance(v, int)
    }


class _Importer:
    def __init__(self, tfl, data: bytes, path: Path, name: str):
        self.tfl, self.data, self.path, self.name = tfl, data, path, name
        self.model = tfl.Model.GetRootAs(data, 0)
        if self.model.SubgraphsLength() != 1:
            raise TfliteImportError(
                f"{path}: {self.model.SubgraphsLength()} subgraphs; flowc imports models of one "
                "(control flow such as WHILE and IF is not supported)"
            )
        self.sg = self.model.Subgraphs(0)
        self.names = _op_names(tfl)
        self.values: dict[int, Tensor] = {}

    # -- tensors
    def tensor_info(self, i: int):
        t = self.sg.Tensors(int(i))
        code = t.Type()
        if code not in _DTYPES:
            raise TfliteImportError(
                f"{self.path}: tensor {i} has TFLite type {code}, which flowc does not have"
            )
        if t.ShapeLength() > MAX_RANK:
            raise TfliteImportError(
                f"{self.path}: tensor {i} ({printable(self._label(t), 80)}) has rank {t.ShapeLength()}; "
                f"flowc takes at most {MAX_RANK}"
            )
        shape = tuple(int(d) for d in (t.ShapeAsNumpy() if t.ShapeLength() else []))
        if any(d < 0 for d in shape):
            raise TfliteImportError(
                f"{self.path}: tensor {i} ({printable(self._label(t), 80)}) has a dynamic shape {list(shape)}"
            )
        return t, _DTYPES[code], shape

    def source_label(self, op, name: str, k: int) -> str:
        """What names operator k in messages and ``flowc inspect`` (the scope of the graph nodes
        it becomes): its first output tensor's name as converters write it (the first of its
        ';'-joined names), else ``<OPERATOR>_<k>``."""
        outs = op.OutputsAsNumpy() if op.OutputsLength() else []
        label = self._label(self.sg.Tensors(int(outs[0]))).split(";")[0] if len(outs) else ""
        return printable(label or f"{name}_{k}", NAME_LIMIT)

    def _label(self, t) -> str:
        """The tensor's name as the file has it (untrusted: messages show it through printable)."""
        raw = t.Name()
        return raw.decode("utf-8", "replace") if raw else ""

    def quant(self, i: int):
        """(scale, zero_point, axis) of tensor i as numpy arrays, or None when not quantized."""
        q = self.sg.Tensors(int(i)).Quantization()
        if q is None or q.ScaleLength() == 0:
            return None
        scale = q.ScaleAsNumpy().astype(np.float32)
        zp = q.ZeroPointAsNumpy().astype(np.int64) if q.ZeroPointLength() else np.zeros(scale.shape, np.int64)
        return scale, zp, int(q.QuantizedDimension())

    def const_array(self, i: int) -> np.ndarray | None:
        t, dtype, shape = self.tensor_info(i)
        b = self.model.Buffers(t.Buffer())
        if b is None:
            return None
        nbytes = math.prod(shape) * np.dtype(dtype).itemsize
        if nbytes > MAX_TENSOR_BYTES:
            raise TfliteImportError(
                f"{self.path}: tensor {i} declares {nbytes} bytes, more than flowc allocates"
            )
        if b.DataLength():
            raw = b.DataAsNumpy().tobytes()
        elif b.Offset() > 1:  # data after the flatbuffer (files over 2 GB)
            start, size = int(b.Offset()), int(b.Size())
            raw = self.data[start : start + size]
        else:
            return None
        if len(raw) != nbytes:
            raise TfliteImportError(
                f"{self.path}: tensor {i} has {len(raw)} bytes of data for {nbytes} declared"
            )
        return np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<")).astype(dtype).reshape(shape)

    def value(self, i: int) -> Tensor:
        if i not in self.values:
            array = self.const_array(i)
            if array is None:
                raise TfliteImportError(f"{self.path}: tensor {i} is read before any operator writes it")
            self.values[i] = constant(array)
        return self.values[i]

    # -- the graph
    def opname(self, op) -> str:
        code = self.model.OperatorCodes(op.OpcodeIndex())
        builtin = max(int(code.BuiltinCode()), int(code.DeprecatedBuiltinCode()))
        if builtin == self.tfl.BuiltinOperator.CUSTOM:
            custom = code.CustomCode()
            return f"CUSTOM:{custom.decode('utf-8', 'replace') if custom else '?'}"
        return self.names.get(builtin, f"builtin {builtin}")

    def run(self) -> Graph:
        ops = [self.sg.Operators(k) for k in range(self.sg.OperatorsLength())]
        missing = sorted({self.opname(op) for op in ops} - set(CONVERTERS))
        if missing:
            raise UnsupportedError(
                f"{self.path}: TFLite operators flowc does not import: {', '.join(missing)}"
            )
        graph = Graph(self.name)
        with graph:
            for i in self.sg.InputsAsNumpy():
                t, dtype, shape = self.tensor_info(i)
                self.values[int(i)] = placeholder(self._label(t) or f"input_{i}", shape, dtype)
            for k, op in enumerate(ops):
                name = self.opname(op)
                node = _Op(self, op, name, k)
                with source_scope(self.source_label(op, name, k)):
                    outs = CONVERTERS[name](node)
                outs = outs if isinstance(outs, (list, tuple)) else [outs]
                for j, v in zip(op.OutputsAsNumpy(), outs):
                    _, dtype, shape = self.tensor_info(j)
                    if tuple(v.shape) != shape:
                        raise TfliteImportError(
                            f"{node.where()}: computes shape {list(v.shape)}, the file says {list(shape)}"
                        )
                    self.values[int(j)] = v
            graph.set_outputs(*[self.value(int(i)) for i in self.sg.OutputsAsNumpy()])
        return graph


class _Op:
    """What a converter sees: the operator, its options, its inputs."""

    def __init__(self, imp: _Importer, op, name: str, index: int):
        self.imp, self.op, self.name, self.index = imp, op, name, index
        self.inputs = [int(i) for i in op.InputsAsNumpy()] if op.InputsLength() else []

    def where(self) -> str:
        return f"{self.imp.path}: operator {self.index} ({self.name})"

    def has(self, k: int) -> bool:
        return k < len(self.inputs) and self.inputs[k] >= 0

    def x(self, k: int) -> Tensor:
        if not self.has(k):
            raise TfliteImportError(f"{self.where()}: input {k} is missing")
        return self.imp.value(self.inputs[k])

    def const(self, k: int) -> np.ndarray:
        array = self.imp.const_array(self.inputs[k]) if self.has(k) else None
        if array is None:
            raise UnsupportedError(f"{self.where()}: input {k} must be a constant in the file")
        return array

    def out_info(self, k: int = 0):
        return self.imp.tensor_info(int(self.op.OutputsAsNumpy()[k]))

    def options(self, cls_name: str):
        table = self.op.BuiltinOptions()
        cls = getattr(self.imp.tfl, cls_name)
        opts = cls()
        if table is not None:
            opts.Init(table.Bytes, table.Pos)
            return opts
        return None

    def qparams(self, k: int):
        """(scales, zero points, axis) of input k; refused where it is not quantized."""
        q = self.imp.quant(self.inputs[k]) if self.has(k) else None
        if q is None:
            raise self.unsupported(f"input {k} has no quantization parameters")
        return q

    def qparams_out(self, k: int = 0):
        q = self.imp.quant(int(self.op.OutputsAsNumpy()[k]))
        if q is None or q[0].size != 1:
            raise self.unsupported(f"output {k} is not quantized per tensor")
        return q

    def bounds(self, activation: int) -> tuple[int, int]:
        """The quantized bounds of the fused ``activation`` on output 0 (integer.activation_range)."""
        yq, dtype = self.qparams_out(), self.out_info()[1]
        act = self.imp.tfl.ActivationFunctionType
        return I.activation_range(activation, act, float(yq[0][0]), int(yq[1][0]), dtype)

    def unsupported(self, why: str) -> UnsupportedError:
        return UnsupportedError(f"{self.where()}: {why}")

    def float_only(self) -> None:
        for k in range(len(self.inputs)):
            if self.has(k) and self.imp.quant(self.inputs[k]) is not None:
                _, dtype, _ = self.imp.tensor_info(self.inputs[k])
                if dtype != "float32":
                    raise self.unsupported(f"quantized {dtype} operands are not supported yet (float32 only)")


CONVERTERS: dict = {}


def converter(*names: str):
    def register(fn):
        for n in names:
            CONVERTERS[n] = fn
        return fn

    return register


# ----------------------------------------------------------------------------- helpers


def _activation(node: _Op, y: Tensor, code: int, tanh: bool = False) -> Tensor:
    """A fused activation; TANH only where LiteRT's kernel applies it (``tanh``; its convolutions,
    pools and fully connected layers ignore it, so a file that asks for it there is refused)."""
    act = node.imp.tfl.ActivationFunctionType
    if code == act.NONE:
        return y
    if code == act.TANH and not tanh:
        raise node.unsupported("a fused TANH activation is not applied by TFLite's kernel for this operator")
    if code == act.RELU:
        return E.relu(y)
    if code == act.RELU6:
        return E.clip(y, 0.0, 6.0)
    if code == act.RELU_N1_TO_1:
        return E.clip(y, -1.0, 1.0)
    if code == act.TANH:
        return E.tanh(y)
    raise node.unsupported(f"fused activation {code} is not supported")


def _nchw(x: Tensor) -> Tensor:
    return S.transpose(x, (0, 3, 1, 2))


def _nhwc(x: Tensor) -> Tensor:
    return S.transpose(x, (0, 2, 3, 1))


def _pads(node: _Op, padding: int, in_hw, kernel, strides, dilations) -> tuple:
    """ONNX-style pads (begins, ends) of TFLite's SAME (the extra pixel at the end) or VALID."""
    if padding == node.imp.tfl.Padding.VALID:
        return (0, 0, 0, 0)
    begins, ends = [], []
    for size, k, s, d in zip(in_hw, kernel, strides, dilations):
        out = -(-size // s)
        total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
        begins.append(total // 2)
        ends.append(total - total // 2)
    return (*begins, *ends)


def _need_rank(node: _Op, x: Tensor, rank: int, what: str = "input") -> None:
    if x.rank != rank:
        raise node.unsupported(f"{what} of shape {list(x.shape)} must have rank {rank}")


# ----------------------------------------------------------------------------- convolutions


def _conv_common(node: _Op, depthwise: bool) -> Tensor:
    o = node.options("DepthwiseConv2DOptions" if depthwise else "Conv2DOptions")
    x, w = node.x(0), node.x(1)
    _need_rank(node, x, 4)
    _need_rank(node, w, 4, "the filter")
    strides, dil = (o.StrideH(), o.StrideW()), (o.DilationHFactor(), o.DilationWFactor())
    kernel = w.shape[1:3]
    pads = _pads(node, o.Padding(), x.shape[1:3], kernel, strides, dil)
    if depthwise:
        c, m = x.shape[3], w.shape[3]
        if w.shape[0] != 1 or m % c:
            raise node.unsupported(
                f"filter of shape {list(w.shape)} is not 1 x H x W x (C*multiplier) for C={c}"
            )
        perm, groups = (3, 0, 1, 2), c
    else:
        if x.shape[3] % w.shape[3]:
            raise node.unsupported(
                f"input channels {x.shape[3]} are not a multiple of the filter's {w.shape[3]}"
            )
        perm, groups = (0, 3, 1, 2), x.shape[3] // w.shape[3]
    if x.dtype in I.RANGE:
        return _int_conv(node, o, x, w, perm, strides, pads, dil, groups)
    node.float_only()
    b = node.x(2) if node.has(2) else None
    y = N.conv(_nchw(x), S.transpose(w, perm), b, strides, pads, dil, groups)
    return _nhwc(_activation(node, y, o.FusedActivationFunction()))


def _int_conv(node: _Op, o, x: Tensor, w: Tensor, perm, strides, pads, dil, groups) -> Tensor:
    """An int8/uint8 convolution: int32 sums of (x - x_zp) * w, the int32 bias, requantized per
    output channel by input scale x filter scale / output scale (in double)."""
    xq, wq, yq = node.qparams(0), node.qparams(1), node.qparams_out()
    if np.any(wq[1]):
        raise node.unsupported("a filter zero point other than 0 is not supported (TFLite's are 0)")
    out_dtype = node.out_info()[1]
    m = w.shape[perm[0]]
    w_scales = np.broadcast_to(wq[0].astype(np.float64), (m,))
    multipliers = float(xq[0][0]) * w_scales / float(yq[0][0])
    bounds = node.bounds(o.FusedActivationFunction())
    fixed = _fixed_point(multipliers)
    if fixed is not None and w.dtype == "int8" and out_dtype == x.dtype:  # the integer kernel
        y = Q.qconv(
            _nchw(x), S.transpose(w, perm), node.x(2) if node.has(2) else None, multiplier=fixed[0],
            shift=fixed[1], strides=strides, pads=pads, dilations=dil, group=groups, x_zero=int(xq[1][0]),
            y_zero=int(yq[1][0]), lo=bounds[0], hi=bounds[1],
        )  # fmt: skip
        return _nhwc(y)
    acc_dtype = I.sum_dtype(w.shape[1] * w.shape[2] * (x.shape[3] // groups))
    acc = N.conv(
        _nchw(E.cast(I.offset(x, int(xq[1][0])), acc_dtype)),
        S.transpose(E.cast(w, acc_dtype), perm),
        None, strides, pads, dil, groups,
    )  # fmt: skip
    acc = E.cast(acc, "int64")
    if node.has(2):
        acc = E.add(acc, S.reshape(E.cast(node.x(2), "int64"), (1, m, 1, 1)))
    y = I.requantize(acc, multipliers, (1, m, 1, 1))
    return _nhwc(I.output(y, int(yq[1][0]), bounds, out_dtype))


def _fixed_point(multipliers) -> tuple[list[int], list[int]] | None:
    """The fixed-point (multiplier, shift) lists of the real ``multipliers`` (one or one per
    channel, integer.quantize_multiplier), or None where one is not below one (the integer
    kernel's shift is at most 0; the graph of int64 ops computes those)."""
    qs = [I.quantize_multiplier(float(v)) for v in np.ravel(multipliers)]
    if any(shift > 0 for _, shift in qs):
        return None
    return [q for q, _ in qs], [shift for _, shift in qs]


converter("CONV_2D")(lambda node: _conv_common(node, False))
converter("DEPTHWISE_CONV_2D")(lambda node: _conv_common(node, True))


@converter("FULLY_CONNECTED")
def _fully_connected(node: _Op):
    o = node.options("FullyConnectedOptions")
    x, w = node.x(0), node.x(1)
    _need_rank(node, w, 2, "the weights")
    k = w.shape[1]
    if math.prod(x.shape) % k:
        raise node.unsupported(f"input of shape {list(x.shape)} does not split into rows of {k}")
    flat = S.reshape(x, (math.prod(x.shape) // k, k))
    act = o.FusedActivationFunction() if o is not None else 0
    _, out_dtype, shape = node.out_info()
    if x.dtype in I.RANGE:
        xq, wq, yq = node.qparams(0), node.qparams(1), node.qparams_out()
        acc = N.matmul(
            E.cast(I.offset(flat, int(xq[1][0])), I.sum_dtype(k)),
            S.transpose(E.cast(I.offset(w, int(wq[1][0])), I.sum_dtype(k)), (1, 0)),
        )
        acc = E.cast(acc, "int64")
        if node.has(2):
            acc = E.add(acc, E.cast(node.x(2), "int64"))
        n = w.shape[0]
        if wq[0].size == 1:  # the product of the scales in float, as TFLite's fully connected
            multipliers = float(np.float32(xq[0][0]) * np.float32(wq[0][0])) / float(yq[0][0])
        else:
            multipliers = float(xq[0][0]) * wq[0].astype(np.float64) / float(yq[0][0])
        fixed = _fixed_point(multipliers)
        bias = node.x(2) if node.has(2) else None
        if (
            fixed is not None
            and w.dtype == "int8"
            and not np.any(wq[1])
            and out_dtype == x.dtype
            and (bias is None or bias.dtype == "int32")
        ):  # the integer kernel, on 1x1 planes
            y = Q.qconv(
                S.reshape(flat, (flat.shape[0], k, 1, 1)), S.reshape(w, (n, k, 1, 1)), bias,
                multiplier=fixed[0], shift=fixed[1], x_zero=int(xq[1][0]), y_zero=int(yq[1][0]),
                lo=node.bounds(act)[0], hi=node.bounds(act)[1], rounding="single",
            )  # fmt: skip
            return S.reshape(y, shape)
        # (LiteRT's fully connected layers round their fixed-point product once)
        y = I.requantize(acc, np.broadcast_to(multipliers, (n,)) if wq[0].size > 1 else multipliers,
                         (1, n) if wq[0].size > 1 else (), "single")  # fmt: skip
        bounds = node.bounds(act)
        return S.reshape(I.output(y, int(yq[1][0]), bounds, out_dtype), shape)
    node.float_only()
    y = N.gemm(flat, w, node.x(2) if node.has(2) else None, 1.0, 1.0, False, True)
    return S.reshape(_activation(node, y, act), shape)


# ----------------------------------------------------------------------------- pools


def _pool(node: _Op, kind: str):
    o = node.options("Pool2DOptions")
    x = node.x(0)
    _need_rank(node, x, 4)
    kernel, strides = (o.FilterHeight(), o.FilterWidth()), (o.StrideH(), o.StrideW())
    pads = _pads(node, o.Padding(), x.shape[1:3], kernel, strides, (1, 1))
    if x.dtype in I.RANGE:
        return _int_pool(node, o, x, kind, kernel, strides, pads)
    node.float_only()
    if kind == "avg":  # TFLite averages over the window's pixels inside the input only
        y = N.avg_pool(_nchw(x), kernel, strides, pads, (1, 1), False, False)
    else:
        y = N.max_pool(_nchw(x), kernel, strides, pads, (1, 1), False)
    return _nhwc(_activation(node, y, o.FusedActivationFunction()))


def _int_pool(node: _Op, o, x: Tensor, kind: str, kernel, strides, pads) -> Tensor:
    """int8/uint8 pools on the input's own scale: the maximum, or the sum over the window's
    pixels inside the input divided by their count, rounded half away from zero (TFLite's
    reference: (sum +- count / 2) / count, truncating)."""
    xq, yq = node.qparams(0), node.qparams_out()
    out_dtype = node.out_info()[1]
    if not (np.array_equal(xq[0], yq[0]) and np.array_equal(xq[1], yq[1])):
        raise node.unsupported("input and output quantization differ; TFLite's pools keep the input's")
    xf = _nchw(E.cast(x, I.sum_dtype(kernel[0] * kernel[1])))
    if kind == "max":
        y = E.cast(N.max_pool(xf, kernel, strides, pads, (1, 1), False), "int64")
    else:
        c = xf.shape[1]
        h, w_ = x.shape[1:3]
        if tuple(kernel) == (h, w_) and not any(pads):  # one window, the whole plane: its sum into int32
            # (no widened copy of x; the NCHW view's transpose cancels the one before it)
            total = E.cast(R.reduce_sum(_nchw(x), axes=(2, 3), keepdims=True, dtype="int32"), "int64")
        else:  # a depthwise convolution with ones
            ones = constant(np.ones((c, 1, *kernel), xf.dtype))
            total = E.cast(N.conv(xf, ones, None, strides, pads, (1, 1), c), "int64")
        inside = np.zeros((1, 1, h + pads[0] + pads[2], w_ + pads[1] + pads[3]))
        inside[:, :, pads[0] : pads[0] + h, pads[1] : pads[1] + w_] = 1.0
        win = np.lib.stride_tricks.sliding_window_view(inside, kernel, axis=(2, 3))
        count = win[:, :, :: strides[0], :: strides[1]].sum(axis=(-1, -2)).astype(np.int64)
        count = count[:, :, : total.shape[2], : total.shape[3]]
        half = constant(count // 2)
        signed = E.where(E.greater(total, constant(np.int64(0))), E.add(total, half), E.sub(total, half))
        y = E.div(signed, constant(count))
    bounds = node.bounds(o.FusedActivationFunction())
    return _nhwc(I.output(y, 0, bounds, out_dtype))


converter("AVERAGE_POOL_2D")(lambda node: _pool(node, "avg"))
converter("MAX_POOL_2D")(lambda node: _pool(node, "max"))


@converter("MEAN")
def _mean(node: _Op):
    o = node.options("ReducerOptions")
    x = node.x(0)
    axes = tuple(sorted({int(a) % max(x.rank, 1) for a in np.asarray(node.const(1)).reshape(-1)}))
    keep = bool(o.KeepDims()) if o is not None else False
    if x.dtype in I.RANGE:
        # TFLite's quantized mean: the sum of (x - x_zp) times x_scale / y_scale with 1/count folded
        # into the fixed-point multiplier (integer.mean_multiplier), + y_zp
        xq, yq = node.qparams(0), node.qparams_out()
        out_dtype = node.out_info()[1]
        count = math.prod(x.shape[a] for a in axes)
        if count == 0:
            raise node.unsupported("a quantized mean over an empty axis")
        if x.dtype in R.WIDENS and count < 1 << 23:  # summed into int32 (exact), then less count * x_zp
            total = E.cast(R.reduce_sum(x, axes=axes, keepdims=keep, dtype="int32"), "int64")
            total = E.sub(total, constant(np.int64(count * int(xq[1][0]))))
        else:
            total = R.reduce_sum(I.offset(x, int(xq[1][0])), axes=axes, keepdims=keep)
        q, shift = I.mean_multiplier(float(xq[0][0]), float(yq[0][0]), count)
        acc = I.requantize_fixed(total, np.int64(q), np.int64(shift))
        return I.output(acc, int(yq[1][0]), I.RANGE[out_dtype], out_dtype)
    node.float_only()
    return R.reduce_mean(x, axes=axes, keepdims=keep)


# ----------------------------------------------------------------------------- elementwise


def _binary(fn, options: str):
    def convert(node: _Op):
        o = node.options(options)
        act = o.FusedActivationFunction() if o is not None else 0
        if node.x(0).dtype in I.RANGE and fn in (E.add, E.mul):
            return _int_binary(node, fn, act)
        node.float_only()
        return _activation(node, fn(node.x(0), node.x(1)), act)

    return convert


def _int_binary(node: _Op, fn, act: int) -> Tensor:
    """int8/uint8 ADD (TFLite's reference: both inputs shifted left 20 bits, rescaled to twice
    the larger input scale, summed, rescaled to the output; ``qadd`` where both operands have
    the output's type and one shape, else that arithmetic in int64 elementwise ops) and MUL
    ((a - a_zp) * (b - b_zp) requantized by a_scale * b_scale / out_scale)."""
    a, b = node.x(0), node.x(1)
    aq, bq, yq = node.qparams(0), node.qparams(1), node.qparams_out()
    sa, sb, sy = float(aq[0][0]), float(bq[0][0]), float(yq[0][0])
    av, bv = I.offset(a, int(aq[1][0])), I.offset(b, int(bq[1][0]))
    out_dtype = node.out_info()[1]
    if fn is E.add:
        twice = 2.0 * max(sa, sb)
        (qa, ea), (qb, eb) = I.quantize_multiplier(sa / twice), I.quantize_multiplier(sb / twice)
        qy, ey = I.quantize_multiplier(twice / ((1 << 20) * sy))
        same = a.dtype == b.dtype == out_dtype and a.dtype in Q.INT_RANGES and a.shape == b.shape
        if same and all(-31 <= e <= 0 for e in (ea, eb, ey)):  # the integer kernel (qadd)
            lo, hi = node.bounds(act)
            za, zb, zy = int(aq[1][0]), int(bq[1][0]), int(yq[1][0])
            return Q.qadd(a, b, a_zero=za, b_zero=zb, y_zero=zy, left=20, a_multiplier=qa, a_shift=ea,
                          b_multiplier=qb, b_shift=eb, multiplier=qy, shift=ey, lo=lo, hi=hi)  # fmt: skip
        shifted = [E.mul(v, constant(np.int64(1 << 20))) for v in (av, bv)]
        total = E.add(I.requantize(shifted[0], sa / twice, ()), I.requantize(shifted[1], sb / twice, ()))
        y = I.requantize(total, twice / ((1 << 20) * sy), ())
    else:
        y = I.requantize(E.mul(av, bv), sa * sb / sy, ())
    bounds = node.bounds(act)
    return I.output(y, int(yq[1][0]), bounds, out_dtype)


converter("ADD")(_binary(E.add, "AddOptions"))
converter("MUL")(_binary(E.mul, "MulOptions"))
converter("SUB")(_binary(E.sub, "SubOptions"))


def _unary(fn):
    def convert(node: _Op):
        node.float_only()
        return fn(node.x(0))

    return convert


converter("RELU")(_unary(E.relu))
converter("RELU6")(_unary(lambda x: E.clip(x, 0.0, 6.0)))


@converter("LOGISTIC")
def _logistic(node: _Op):
    x = node.x(0)
    if x.dtype == "int8":
        return _int8_table(node, x, I.logistic_table, (1 / 256, -128))
    node.float_only()
    return E.sigmoid(x)


@converter("TANH")
def _tanh(node: _Op):
    x = node.x(0)
    if x.dtype == "int8":
        return _int8_table(node, x, I.tanh_table, (1 / 128, 0))
    node.float_only()
    return E.tanh(x)


def _int8_table(node: _Op, x: Tensor, table, out_params) -> Tensor:
    """An int8 activation as a table of its 256 results, indexed by x + 128."""
    yq = node.qparams_out()
    if node.out_info()[1] != "int8" or (float(yq[0][0]), int(yq[1][0])) != out_params:
        raise node.unsupported(
            f"a quantized {node.name.lower()} outputs int8 with scale 1/{round(1 / out_params[0])}, "
            f"zero point {out_params[1]}"
        )
    xq = node.qparams(0)
    values = constant(table(float(xq[0][0]), int(xq[1][0])))
    return S.gather(values, E.add(E.cast(x, "int64"), constant(np.int64(128))), 0)


@converter("HARD_SWISH")
def _hard_swish(node: _Op):
    x = node.x(0)
    if x.dtype == "int8" and node.out_info()[1] == "int8":
        xq, yq = node.qparams(0), node.qparams_out()
        values = I.hard_swish_table(float(xq[0][0]), int(xq[1][0]), float(yq[0][0]), int(yq[1][0]))
        return S.gather(constant(values), E.add(E.cast(x, "int64"), constant(np.int64(128))), 0)
    node.float_only()
    return E.mul(x, E.div(E.clip(E.add(x, 3.0), 0.0, 6.0), 6.0))


@converter("SOFTMAX")
def _softmax(node: _Op):
    o = node.options("SoftmaxOptions")
    x = node.x(0)
    beta = float(o.Beta()) if o is not None else 1.0
    if x.dtype in I.RANGE:
        out_dtype = node.out_info()[1]
        yq = node.qparams_out()
        want = (1 / 256, -128 if out_dtype == "int8" else 0)
        if out_dtype != x.dtype or not (float(yq[0][0]) == want[0] and int(yq[1][0]) == want[1]):
            raise node.unsupported(
                f"a quantized softmax outputs {x.dtype} with scale 1/256, zero point {want[1]}"
            )
        return I.softmax(x, beta, float(node.qparams(0)[0][0]), out_dtype)
    node.float_only()
    return N.softmax(x if beta == 1.0 else E.mul(x, beta), axis=-1)


# ----------------------------------------------------------------------------- shapes


@converter("RESHAPE")
def _reshape(node: _Op):
    _, _, shape = node.out_info()
    return S.reshape(node.x(0), shape)


@converter("SHAPE")
def _shape(node: _Op):
    """The input's (static) shape as a constant: TensorFlow's converter computes a Flatten's or
    Reshape's target with SHAPE, STRIDED_SLICE and PACK where the batch size was unknown."""
    _, dtype, _ = node.out_info()
    if dtype not in ("int32", "int64"):
        raise node.unsupported(f"a shape of type {dtype} (int32 or int64)")
    return constant(np.array(node.x(0).shape, dtype=dtype))


_FAR = 1 << 62  # a slice bound past any end: Python's slice clamps it to the dimension


@converter("STRIDED_SLICE")
def _strided_slice(node: _Op):
    """TensorFlow's strided slice with constant begin, end and strides: a bit of ``begin_mask``
    or ``end_mask`` takes that axis from its start or to its end, ``shrink_axis_mask`` takes the
    one element at ``begin`` and drops the axis, ``offset`` makes ``end`` relative to ``begin``."""
    x = node.x(0)
    begin, end, strides = (np.asarray(node.const(k), np.int64).reshape(-1) for k in (1, 2, 3))
    o = node.options("StridedSliceOptions")
    masks = {m: (int(getattr(o, m)()) if o is not None else 0) for m in
             ("BeginMask", "EndMask", "ShrinkAxisMask", "EllipsisMask", "NewAxisMask")}  # fmt: skip
    if masks["EllipsisMask"] or masks["NewAxisMask"]:
        raise node.unsupported("ellipsis_mask and new_axis_mask are not supported")
    if not len(begin) == len(end) == len(strides) <= x.rank:
        raise node.unsupported(f"begin, end and strides of lengths {len(begin)}, {len(end)}, {len(strides)} "
                               f"for an input of rank {x.rank}")  # fmt: skip
    offset = o is not None and bool(o.Offset())
    starts, ends, steps, drop = [], [], [], []
    for a, (b, e, st) in enumerate(zip(begin.tolist(), end.tolist(), strides.tolist())):
        dim = x.shape[a]
        if st == 0:
            raise node.unsupported(f"stride 0 on axis {a}")
        if offset:
            e += b
        if masks["ShrinkAxisMask"] >> a & 1:
            if not -dim <= b < dim:
                raise node.unsupported(f"index {b} on axis {a} of size {dim}")
            b, e, st = b % dim, b % dim + 1, 1
            drop.append(a)
        else:
            if masks["BeginMask"] >> a & 1:
                b = 0 if st > 0 else _FAR
            if masks["EndMask"] >> a & 1:
                e = _FAR if st > 0 else -_FAR
        starts.append(b), ends.append(e), steps.append(st)
    y = S.slice_(x, starts, ends, axes=list(range(len(starts))), steps=steps)
    return S.squeeze(y, drop) if drop else y


@converter("PACK")
def _pack(node: _Op):
    o = node.options("PackOptions")
    xs = [node.x(k) for k in range(len(node.inputs))]
    axis = int(o.Axis()) if o is not None else 0
    axis = axis % (xs[0].rank + 1)
    return S.concat([S.unsqueeze(x, [axis]) for x in xs], axis)


@converter("CONCATENATION")
def _concat(node: _Op):
    o = node.options("ConcatenationOptions")
    xs = [node.x(k) for k in range(len(node.inputs))]
    if o.FusedActivationFunction() != node.imp.tfl.ActivationFunctionType.NONE:
        raise node.unsupported("a fused activation is not applied by TFLite's concatenation kernel")
    if xs[0].dtype in I.RANGE:
        yq = node.qparams_out()
        for k in range(len(xs)):
            q = node.qparams(k)
            if not (np.array_equal(q[0], yq[0]) and np.array_equal(q[1], yq[1])):
                raise node.unsupported("inputs quantized unlike the output are not supported yet")
    return S.concat(xs, int(o.Axis()) % xs[0].rank)


@converter("PAD", "PADV2")
def _pad(node: _Op):
    x = node.x(0)
    p = np.asarray(node.const(1)).reshape(-1, 2)
    if p.shape[0] != x.rank:
        raise node.unsupported(f"paddings of shape {list(p.shape)} for an input of rank {x.rank}")
    value = float(np.asarray(node.const(2)).reshape(-1)[0]) if node.name == "PADV2" and node.has(2) else 0.0
    if x.dtype in I.RANGE and not (node.name == "PADV2" and node.has(2)):
        value = float(node.qparams(0)[1][0])  # the zero point: a real 0
    return S.pad(x, [int(v) for v in p[:, 0]] + [int(v) for v in p[:, 1]], value=value)


# ----------------------------------------------------------------------------- quantization


@converter("QUANTIZE")
def _quantize(node: _Op):
    x = node.x(0)
    _, dtype, _ = node.out_info()
    q = node.imp.quant(int(node.op.OutputsAsNumpy()[0]))
    if x.dtype in I.RANGE and dtype in I.RANGE and q is not None and q[0].size == 1:
        # requantize (TFLite's reference): (x - x_zp) times x_scale / y_scale in fixed point, + y_zp
        xq = node.qparams(0)
        acc = I.requantize(I.offset(x, int(xq[1][0])), float(xq[0][0]) / float(q[0][0]), ())
        return I.output(acc, int(q[1][0]), I.RANGE[dtype], dtype)
    if x.dtype != "float32" or dtype not in _RANGE or q is None or q[0].size != 1:
        raise node.unsupported(
            f"quantizes {x.dtype} to {dtype}; flowc takes float32 to int8/uint8/int16 per tensor"
        )
    scale, zp, _ = q
    v = E.div(x, float(scale[0]))
    v = E.mul(E.sign(v), M.floor(E.add(E.abs(v), 0.5)))  # halves away from zero
    lo, hi = _RANGE[dtype]
    return E.cast(E.clip(E.add(v, float(zp[0])), float(lo), float(hi)), dtype)


@converter("DEQUANTIZE")
def _dequantize(node: _Op):
    x = node.x(0)
    q = node.imp.quant(node.inputs[0])
    if x.dtype == "float16":
        return E.cast(x, "float32")
    if x.dtype not in _RANGE or q is None:
        raise node.unsupported(f"dequantizes {x.dtype}; flowc takes int8/uint8/int16 (or float16)")
    scale, zp, axis = q
    if scale.size == 1:
        return E.mul(E.cast(E.sub(E.cast(x, "int32"), int(zp[0])), "float32"), float(scale[0]))
    shape = [1] * x.rank
    shape[axis] = scale.size
    zps = constant(zp.astype(np.int32).reshape(shape))
    return E.mul(E.cast(E.sub(E.cast(x, "int32"), zps), "float32"), constant(scale.reshape(shape)))
