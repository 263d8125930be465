"""flowc's int8 code beside Arm's CMSIS-NN kernels, on the same emulated Cortex-M, for the same file.

    python bench/cmsis_nn.py [--cores cortex-m4 cortex-m7 cortex-m55] [--models ds_cnn ...] [--markdown FILE]

CMSIS-NN is the int8 kernel library TensorFlow Lite Micro calls on Arm cores; what it costs per
inference is the bar a microcontroller compiler is measured against. This module runs an int8
TFLite file layer by layer through CMSIS-NN's public API and counts its instructions exactly as
flowc's own firmware counts flowc's:

1. flowc exports the file for the core (``codegen.export(..., arch=core)``); its folder holds
   the test firmware (``firmware.c``: one call of ``m_run``, SysTick counting under
   ``qemu-system-arm -icount shift=0``), the start-up code and the linker script.
2. A copy of that folder gets a generated ``m.c`` in place of flowc's model: the same
   ``int m_run(inputs, outputs, void *arena)``, one CMSIS-NN call per TFLite operator (below),
   the file's weights as ``static const`` arrays (``m_w_*``: the footprint counts them as
   weights), and an ``m.h`` and ``metadata.json`` with its own arena size.
3. ``libm.a`` is that harness plus CMSIS-NN's int8 objects, compiled from the snapshot at
   ``ROOT.parent / "shared" / "anchors" / "cmsis-nn"`` (never copied into this repository)
   with the core's own flags (``Target(core).cflags()``, as flowc's code), once per core and
   cached in the work folder. CMSIS-NN picks its Helium paths from ``__ARM_FEATURE_MVE``
   (Cortex-M55) and its DSP paths from ``__ARM_FEATURE_DSP`` (Cortex-M4, M7).
4. ``codegen.backends.c.mcu.run_firmware`` links and runs the copy: same firmware, same
   counter, same board. ``mcu.footprint`` measures its flash and RAM from the linker map.

Operators and the CMSIS-NN calls (TFLite's layouts are CMSIS-NN's: NHWC, filters OHWI,
depthwise filters 1HWC, so the weights are the file's bytes):

- CONV_2D: ``arm_convolve_wrapper_s8`` (per-channel multipliers and shifts);
- DEPTHWISE_CONV_2D: ``arm_depthwise_conv_wrapper_s8``;
- FULLY_CONNECTED: ``arm_fully_connected_s8`` (per-tensor filter scale) or
  ``arm_fully_connected_per_channel_s8``. Where ``arm_fully_connected_s8_get_buffer_size``
  asks for a buffer (Helium), it is the kernel sums ``arm_vector_sum_s8`` would fill (each
  row's bias plus the input offset times the row's sum of weights): TFLite Micro computes them
  once at Prepare into a persistent buffer, so here they are computed in Python and stored as
  constants, not counted per inference;
- AVERAGE_POOL_2D, MAX_POOL_2D: ``arm_avgpool_s8``, ``arm_max_pool_s8``;
- ADD, MUL (same shapes): ``arm_elementwise_add_s8``, ``arm_elementwise_mul_s8``;
- SOFTMAX: ``arm_softmax_s8`` (output scale 1/256, zero point -128);
- RESHAPE: nothing (the same bytes, an alias);
- QUANTIZE (float32 to int8) and DEQUANTIZE (int8 to float32) are not CMSIS-NN functions: the
  harness does them in plain C as TFLite's reference does (``round(x / scale) + zero_point``
  with halves away from zero, saturated; ``(q - zero_point) * scale``). They are a small part
  of the work, and included in the count as flowc's are.

Any other operator is refused with one line naming it. Multipliers and shifts are TFLite's
(``graphdef.tflite.integer.quantize_multiplier`` on the double products TFLite forms; ADD's
20-bit left shift; the softmax's input multiplier, left shift and ``diff_min`` as its reference
computes them), and the scratch buffer is sized by CMSIS-NN's own ``*_get_buffer_size``
functions (their ``_dsp`` / ``_mve`` variants, which the library provides for computing on
the host, compiled here with the host C compiler and called through ctypes).

Rounding: CMSIS-NN as TensorFlow Lite Micro builds it rounds every requantization twice
(gemmlowp's doubling high multiply, then a rounding shift). LiteRT's fully connected layers
round the 64-bit product once, and flowc's import follows LiteRT, so by default the fully
connected kernels are built with CMSIS-NN's own ``CMSIS_NN_USE_SINGLE_ROUNDING`` switch
(``cmsis_objects``); with ``--fc-rounding double`` (stock CMSIS-NN) some fully connected outputs
differ from flowc's by one step (the autoencoder's first at fc7, 1 value of 128) and the
difference grows through the later layers. Every other kernel rounds as LiteRT does.

Memory: every int8 activation lives in the ``arena`` passed to ``m_run`` (so the RAM compares
with flowc's arena), placed by the greedy-by-size first-fit planner TFLite Micro uses (largest
buffer first, at the lowest offset free of every buffer alive at the same time; a RESHAPE's
output shares its input's bytes), then one scratch buffer of the largest size any layer asks
for. Inputs and outputs are the caller's buffers, as in flowc's API.

``run(tflite, core, feeds, workdir)`` returns {"instructions", "outputs", "arena", "scratch",
"stack", "flash", "ram", "macs", ...}, or None (printing why) when the CMSIS-NN snapshot, the
cross tools or a host C compiler are missing. ``main`` prints, per model and core, flowc's
instructions, CMSIS-NN's, their ratio, MACs and instructions per MAC, RAM and flash of both,
and whether the outputs are equal (the largest difference where not, and the first operator
whose int8 output differs, found by bisection over models cut after each operator; the exit
status is 1). A softmax's saturated probabilities say little, so where a model ends in one its
int8 logits are compared too (the model cut before the softmax).
Instruction counts are not cycles: see bench/mcu.py.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import codegen  # noqa: E402
import graphdef as gd  # noqa: E402
from codegen.backends.c import mcu, toolchain  # noqa: E402
from codegen.target import Target  # noqa: E402
from graphdef.errors import FlowcError, UnsupportedError  # noqa: E402
from graphdef.tflite import integer as I  # noqa: E402

CMSIS_NN = ROOT.parent / "shared" / "anchors" / "cmsis-nn"
CORES = ("cortex-m4", "cortex-m7", "cortex-m55")
HELIUM = ("cortex-m55",)  # cores whose CMSIS-NN build takes the MVE paths (the others: DSP)
ALIGN = 16  # arena offsets: a Helium vector
ADD_LEFT_SHIFT = 20  # TFLite's int8 ADD: both inputs shifted left 20 bits before rescaling
_TYPES = {0: "float32", 2: "int32", 9: "int8"}


# ----------------------------------------------------------------------------- the model
@dataclass
class Tensor:
    """A tensor of the file: shape, dtype, quantization (scales and zero points, per tensor
    or per channel along ``axis``) and its data when constant."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    scale: np.ndarray | None = None
    zero: np.ndarray | None = None
    axis: int = 0
    data: np.ndarray | None = None

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def q(self) -> tuple[float, int]:
        """(scale, zero point) of a per-tensor quantized tensor."""
        if self.scale is None or self.scale.size != 1:
            raise UnsupportedError(f"tensor '{self.name}' is not quantized per tensor")
        return float(self.scale[0]), int(self.zero[0])


@dataclass
class Step:
    """One operator of the file: its kind, tensor indices, options and computed parameters."""

    index: int
    op: str
    inputs: list[int]
    output: int
    opts: dict = field(default_factory=dict)
    raw: dict = field(default_factory=dict)  # the file's options alone


@dataclass
class Model:
    tensors: list[Tensor]
    steps: list[Step]
    inputs: list[int]
    outputs: list[int]


OPTIONS = {  # the options table of each operator the harness takes
    "CONV_2D": "Conv2DOptions",
    "DEPTHWISE_CONV_2D": "DepthwiseConv2DOptions",
    "FULLY_CONNECTED": "FullyConnectedOptions",
    "AVERAGE_POOL_2D": "Pool2DOptions",
    "MAX_POOL_2D": "Pool2DOptions",
    "ADD": "AddOptions",
    "MUL": "MulOptions",
    "SOFTMAX": "SoftmaxOptions",
}
_FIELDS = (
    "Padding",
    "StrideH",
    "StrideW",
    "DilationHFactor",
    "DilationWFactor",
    "FusedActivationFunction",
    "DepthMultiplier",
    "FilterHeight",
    "FilterWidth",
    "Beta",
)


def _options(tfl, op, cls_name: str):
    table = op.BuiltinOptions()
    if table is None:
        return None
    opts = getattr(tfl, cls_name)()
    opts.Init(table.Bytes, table.Pos)
    return opts


def read_model(data: bytes) -> Model:
    """The operators and tensors of a .tflite flatbuffer (its one subgraph), read with the
    ``tflite`` package as graphdef/tflite does."""
    import tflite as tfl

    model = tfl.Model.GetRootAs(data, 0)
    sg = model.Subgraphs(0)
    names = {v: k for k, v in vars(tfl.BuiltinOperator).items() if not k.startswith("_")}
    tensors = []
    for i in range(sg.TensorsLength()):
        t = sg.Tensors(i)
        dtype = _TYPES.get(t.Type(), f"type {t.Type()}")
        shape = tuple(int(d) for d in t.ShapeAsNumpy()) if t.ShapeLength() else ()
        q = t.Quantization()
        scale = zero = None
        axis = 0
        if q is not None and q.ScaleLength():
            scale = q.ScaleAsNumpy().astype(np.float32)
            zero = q.ZeroPointAsNumpy().astype(np.int64) if q.ZeroPointLength() else np.zeros_like(scale)
            axis = int(q.QuantizedDimension())
        arr = None
        buf = model.Buffers(t.Buffer())
        if buf is not None and buf.DataLength():
            arr = np.frombuffer(buf.DataAsNumpy().tobytes(), np.dtype(dtype).newbyteorder("<"))
            arr = arr.astype(dtype).reshape(shape)
        raw = t.Name()
        tensors.append(Tensor(raw.decode() if raw else f"t{i}", shape, dtype, scale, zero, axis, arr))
    steps = []
    for k in range(sg.OperatorsLength()):
        op = sg.Operators(k)
        code = model.OperatorCodes(op.OpcodeIndex())
        name = names.get(max(int(code.BuiltinCode()), int(code.DeprecatedBuiltinCode())), "CUSTOM")
        ins = [int(i) for i in op.InputsAsNumpy()] if op.InputsLength() else []
        outs = [int(i) for i in op.OutputsAsNumpy()]
        opts = {}
        cls = OPTIONS.get(name)
        o = _options(tfl, op, cls) if cls else None
        if o is not None:
            for key in _FIELDS:
                if hasattr(o, key):
                    opts[key] = getattr(o, key)()
        steps.append(Step(k, name, ins, outs[0], opts, dict(opts)))
    return Model(tensors, steps, [int(i) for i in sg.InputsAsNumpy()], [int(i) for i in sg.OutputsAsNumpy()])


# ----------------------------------------------------------------------------- parameters
def _same_pad(size: int, k: int, stride: int, dilation: int, padding: int) -> int:
    """TFLite's top (left) padding: SAME puts the odd pixel at the end; VALID none."""
    import tflite as tfl

    if padding == tfl.Padding.VALID:
        return 0
    out = -(-size // stride)
    return max((out - 1) * stride + (k - 1) * dilation + 1 - size, 0) // 2


def _bounds(t: Tensor, code: int) -> tuple[int, int]:
    import tflite as tfl

    scale, zero = t.q()
    return I.activation_range(code, tfl.ActivationFunctionType, scale, zero, "int8")


def _fixed(multipliers) -> tuple[list[int], list[int]]:
    qs = [I.quantize_multiplier(float(m)) for m in np.ravel(multipliers)]
    return [q for q, _ in qs], [s for _, s in qs]


def _softmax_params(beta: float, scale: float) -> tuple[int, int, int]:
    """(input multiplier, input left shift, diff_min) of TFLite's int8 softmax: beta x scale in
    Q5.26 as a fixed-point multiplier (its PreprocessSoftmaxScaling), and the most negative
    difference to the row maximum whose exp it computes (CalculateInputRadius), as
    graphdef.tflite.integer.softmax computes them."""
    real = min(float(np.float32(beta) * np.float32(scale) * np.float32(1 << 26)), float((1 << 31) - 1))
    q, left = I.quantize_multiplier(real)
    left = max(left, 0)
    diff_min = -int(math.floor(((1 << 5) - 1) * (1 << 26) / (1 << left)))
    return q, left, diff_min


def _unsupported(step: Step, why: str) -> UnsupportedError:
    return UnsupportedError(f"operator {step.index} ({step.op}): {why}")


def prepare(m: Model) -> None:
    """Check every operator against what the harness calls and compute its parameters into
    ``step.opts`` (dims, offsets, multipliers, bounds); a TFLite operator without a CMSIS-NN
    kernel here is one line naming it."""
    for s in m.steps:
        t = [m.tensors[i] for i in s.inputs]
        y = m.tensors[s.output]
        o = s.opts
        if s.op in ("CONV_2D", "DEPTHWISE_CONV_2D"):
            x, w = t[0], t[1]
            if x.dtype != "int8" or w.dtype != "int8" or y.dtype != "int8":
                raise _unsupported(s, "only int8 input, filter and output")
            if np.any(w.zero):
                raise _unsupported(s, "a filter zero point other than 0")
            _, h, wd, c = x.shape
            _, oh, ow, co = y.shape
            kh, kw = w.shape[1:3]
            xs, xz = x.q()
            ys, yz = y.q()
            mult = float(xs) * np.broadcast_to(w.scale.astype(np.float64), (co,)) / float(ys)
            o["mult"], o["shift"] = _fixed(mult)
            o["pad"] = (
                _same_pad(h, kh, o["StrideH"], o["DilationHFactor"], o["Padding"]),
                _same_pad(wd, kw, o["StrideW"], o["DilationWFactor"], o["Padding"]),
            )
            o["in_off"], o["out_off"] = -xz, yz
            o["act"] = _bounds(y, o["FusedActivationFunction"])
            o["bias"] = t[2].data if len(t) > 2 and s.inputs[2] >= 0 else np.zeros(co, np.int32)
            o["in_dims"], o["out_dims"] = (1, h, wd, c), (1, oh, ow, co)
            if s.op == "CONV_2D":
                if w.shape[3] != c:
                    raise _unsupported(s, "grouped convolution")
                o["filter_dims"] = (co, kh, kw, c)
                o["macs"] = oh * ow * co * kh * kw * c
            else:
                o["ch_mult"] = co // c
                o["filter_dims"] = (1, kh, kw, co)
                o["macs"] = oh * ow * co * kh * kw
        elif s.op == "FULLY_CONNECTED":
            x, w = t[0], t[1]
            if x.dtype != "int8" or w.dtype != "int8" or y.dtype != "int8":
                raise _unsupported(s, "only int8 input, weights and output")
            n, k = w.shape
            rows = x.size // k
            xs, xz = x.q()
            ys, yz = y.q()
            if w.scale.size == 1:  # TFLite: the product of the scales in float, then double
                o["mult"], o["shift"] = _fixed([float(np.float32(xs) * np.float32(w.scale[0])) / float(ys)])
            else:
                o["mult"], o["shift"] = _fixed(float(xs) * w.scale.astype(np.float64) / float(ys))
            o["per_channel"] = w.scale.size > 1
            o["in_off"], o["w_off"], o["out_off"] = -xz, -int(w.zero[0]), yz
            o["act"] = _bounds(y, o.get("FusedActivationFunction", 0))
            o["bias"] = t[2].data if len(t) > 2 and s.inputs[2] >= 0 else np.zeros(n, np.int32)
            o["rows"], o["k"], o["n"] = rows, k, n
            o["macs"] = rows * k * n
            # the kernel sums arm_vector_sum_s8 computes (used by the Helium kernel only)
            sums = o["bias"].astype(np.int64) + o["in_off"] * (
                w.data.astype(np.int64).sum(axis=1) + k * o["w_off"]
            )
            o["kernel_sums"] = ((sums + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int32)
        elif s.op in ("AVERAGE_POOL_2D", "MAX_POOL_2D"):
            x = t[0]
            if x.dtype != "int8" or x.q() != y.q():
                raise _unsupported(s, "only int8 with the output quantized as the input")
            _, h, wd, c = x.shape
            _, oh, ow, _ = y.shape
            fh, fw = o["FilterHeight"], o["FilterWidth"]
            o["pad"] = (
                _same_pad(h, fh, o["StrideH"], 1, o["Padding"]),
                _same_pad(wd, fw, o["StrideW"], 1, o["Padding"]),
            )
            o["act"] = _bounds(y, o["FusedActivationFunction"])
            o["in_dims"], o["out_dims"], o["filter"] = (1, h, wd, c), (1, oh, ow, c), (fh, fw)
        elif s.op in ("ADD", "MUL"):
            a, b = t
            if a.shape != b.shape or a.shape != y.shape:
                raise _unsupported(s, f"broadcasting {list(a.shape)} with {list(b.shape)}")
            if a.dtype != "int8" or b.dtype != "int8":
                raise _unsupported(s, "only int8")
            (sa, za), (sb, zb), (sy, zy) = a.q(), b.q(), y.q()
            o["offs"] = (-za, -zb, zy)
            o["act"] = _bounds(y, o.get("FusedActivationFunction", 0))
            if s.op == "ADD":  # TFLite's: both to twice the larger scale, 20 bits up, then to the output
                twice = 2.0 * max(sa, sb)
                (m1, m2, mo), (s1, s2, so) = _fixed([sa / twice, sb / twice, twice / ((1 << 20) * sy)])
                o["mults"] = (m1, s1, m2, s2, mo, so)
            else:
                (mo,), (so,) = _fixed([sa * sb / sy])
                o["mults"] = (mo, so)
        elif s.op == "SOFTMAX":
            x = t[0]
            if x.dtype != "int8" or y.dtype != "int8" or y.q() != (1 / 256, -128):
                raise _unsupported(s, "only int8 to int8 with output scale 1/256 and zero point -128")
            o["params"] = _softmax_params(o.get("Beta", 1.0), x.q()[0])
            o["rows"], o["row"] = x.size // x.shape[-1], x.shape[-1]
        elif s.op == "RESHAPE":
            if t[0].size != y.size:
                raise _unsupported(s, "sizes differ")
        elif s.op == "QUANTIZE":
            if t[0].dtype != "float32" or y.dtype != "int8":
                raise _unsupported(s, "only float32 to int8 (requantizing int8 is not done here)")
            y.q()
        elif s.op == "DEQUANTIZE":
            if t[0].dtype != "int8" or y.dtype != "float32":
                raise _unsupported(s, "only int8 to float32")
            t[0].q()
        else:
            raise _unsupported(s, "not supported by the CMSIS-NN harness (no int8 kernel called for it)")


# ----------------------------------------------------------------------------- scratch sizes
class _Tile(ctypes.Structure):
    _fields_ = [("w", ctypes.c_int32), ("h", ctypes.c_int32)]


class _Act(ctypes.Structure):
    _fields_ = [("min", ctypes.c_int32), ("max", ctypes.c_int32)]


class _Dims(ctypes.Structure):
    _fields_ = [("n", ctypes.c_int32), ("h", ctypes.c_int32), ("w", ctypes.c_int32), ("c", ctypes.c_int32)]


class _ConvParams(ctypes.Structure):
    _fields_ = [
        ("input_offset", ctypes.c_int32),
        ("output_offset", ctypes.c_int32),
        ("stride", _Tile),
        ("padding", _Tile),
        ("dilation", _Tile),
        ("activation", _Act),
    ]


class _DwParams(ctypes.Structure):
    _fields_ = [
        ("input_offset", ctypes.c_int32),
        ("output_offset", ctypes.c_int32),
        ("ch_mult", ctypes.c_int32),
        ("stride", _Tile),
        ("padding", _Tile),
        ("dilation", _Tile),
        ("activation", _Act),
    ]


_SIZE_SOURCES = (
    "ConvolutionFunctions/arm_convolve_get_buffer_sizes_s8.c",
    "ConvolutionFunctions/arm_depthwise_conv_get_buffer_sizes_s8.c",
    "FullyConnectedFunctions/arm_fully_connected_get_buffer_sizes_s8.c",
    "PoolingFunctions/arm_avgpool_get_buffer_sizes_s8.c",
)


def _sizer(workdir: Path) -> ctypes.CDLL:
    """CMSIS-NN's buffer-size functions built for the host (a shared library in workdir)."""
    lib = workdir / "cmsis_nn_sizes.so"
    if not lib.exists():
        cc = toolchain.find_cc()
        srcs = [str(CMSIS_NN / "Source" / p) for p in _SIZE_SOURCES]
        toolchain.run([cc, "-O1", "-shared", "-fPIC", "-I", str(CMSIS_NN / "Include"), *srcs, "-o", str(lib)])
    return ctypes.CDLL(str(lib))


def scratch_sizes(m: Model, core: str, workdir: Path) -> None:
    """Each step's scratch bytes (``opts["scratch"]``) from CMSIS-NN's ``*_get_buffer_size``
    for the core's variant: ``_mve`` on Helium cores, ``_dsp`` on the others."""
    lib = _sizer(workdir)
    v = "_mve" if core in HELIUM else "_dsp"
    for s in m.steps:
        o = s.opts
        o["scratch"] = 0
        if s.op in ("CONV_2D", "DEPTHWISE_CONV_2D"):
            tile = lambda p: _Tile(p[1], p[0])  # noqa: E731  ((h, w) -> {w, h})
            dims = [_Dims(*o[k]) for k in ("in_dims", "filter_dims", "out_dims")]
            common = dict(
                stride=tile((o["StrideH"], o["StrideW"])),
                padding=tile(o["pad"]),
                dilation=tile((o["DilationHFactor"], o["DilationWFactor"])),
                activation=_Act(*o["act"]),
            )
            if s.op == "CONV_2D":
                p = _ConvParams(input_offset=o["in_off"], output_offset=o["out_off"], **common)
                fn = getattr(lib, f"arm_convolve_wrapper_s8_get_buffer_size{v}")
            else:
                p = _DwParams(
                    input_offset=o["in_off"], output_offset=o["out_off"], ch_mult=o["ch_mult"], **common
                )
                fn = getattr(lib, f"arm_depthwise_conv_wrapper_s8_get_buffer_size{v}")
            fn.restype = ctypes.c_int32
            o["scratch"] = fn(ctypes.byref(p), *(ctypes.byref(d) for d in dims))
        elif s.op == "FULLY_CONNECTED":
            fn = getattr(lib, f"arm_fully_connected_s8_get_buffer_size{v}")
            fn.restype = ctypes.c_int32
            o["sums_bytes"] = fn(ctypes.byref(_Dims(o["k"], 1, 1, o["n"])))  # the kernel sums, constants
        elif s.op == "AVERAGE_POOL_2D":
            fn = getattr(lib, f"arm_avgpool_s8_get_buffer_size{v}")
            fn.restype = ctypes.c_int32
            o["scratch"] = fn(ctypes.c_int(o["out_dims"][2]), ctypes.c_int(o["out_dims"][3]))


# ----------------------------------------------------------------------------- memory plan
def plan(m: Model) -> tuple[dict[int, int], int]:
    """Arena offsets of the int8 activations (not the caller's inputs and outputs) and the
    activations' bytes: TFLite Micro's greedy planner (largest first, lowest offset free of
    the buffers alive at the same time), a RESHAPE's output sharing its input's buffer."""
    root = {}

    def find(i):
        while root.get(i, i) != i:
            i = root[i]
        return i

    io = set(m.inputs) | set(m.outputs)
    for s in m.steps:
        if s.op == "RESHAPE" and s.output not in io and s.inputs[0] not in io:
            root[s.output] = find(s.inputs[0])
    live: dict[int, list[int]] = {}
    for k, s in enumerate(m.steps):
        for i in [s.output] + [i for i in s.inputs if i >= 0 and m.tensors[i].data is None]:
            if i in io:
                continue
            r = find(i)
            span = live.setdefault(r, [k, k])
            span[0], span[1] = min(span[0], k), max(span[1], k)
    size = {r: -(-m.tensors[r].size * np.dtype(m.tensors[r].dtype).itemsize // ALIGN) * ALIGN for r in live}
    placed: list[tuple[int, int, int]] = []  # (offset, bytes, root)
    offsets = {}
    for r in sorted(live, key=lambda r: (-size[r], live[r][0])):
        lo, hi = live[r]
        busy = sorted((o, o + b) for o, b, q in placed if not (live[q][1] < lo or hi < live[q][0]))
        at = 0
        for start, end in busy:
            if at + size[r] <= start:
                break
            at = max(at, end)
        placed.append((at, size[r], r))
        offsets[r] = at
    total = max((o + b for o, b, _ in placed), default=0)
    everything = {i: offsets[find(i)] for i in range(len(m.tensors)) if find(i) in offsets}
    return everything, total


# ----------------------------------------------------------------------------- the harness
def _c_array(ctype: str, name: str, values) -> str:
    vals = [str(int(v)) for v in np.ravel(values)]
    if ctype == "int32_t":
        vals = [f"{v}" if int(v) != -(1 << 31) else "(-2147483647 - 1)" for v in vals]
    lines = [", ".join(vals[i : i + 24]) for i in range(0, len(vals), 24)] or ["0"]
    body = ",\n    ".join(lines)
    decl = f"static const {ctype} {name}[{max(len(vals), 1)}] __attribute__((aligned(16)))"
    return f"{decl} = {{\n    {body}\n}};\n"


def _dims(d) -> str:
    return "{" + ", ".join(str(int(v)) for v in d) + "}"


def harness(m: Model, meta: dict, offsets: dict[int, int], activations: int, scratch: int) -> str:
    """The C source of ``m_run`` calling CMSIS-NN layer by layer (see the module docstring)."""
    from codegen.render.spelling import PUBLIC

    arrays, body = [], []
    ins = {t: (f["c_name"], PUBLIC[f["dtype"]]) for t, f in zip(m.inputs, meta["inputs"])}
    outs = {t: (f["c_name"], PUBLIC[f["dtype"]]) for t, f in zip(m.outputs, meta["outputs"])}

    def ref(i: int, write: bool = False) -> str:
        if i in ins:
            return ins[i][0]
        if i in outs:
            return outs[i][0]
        ctype = "int8_t" if m.tensors[i].dtype == "int8" else "float"
        return f"({'' if write else 'const '}{ctype} *)(A + {offsets[i]})"

    scratch_at = activations
    for s in m.steps:
        o, k = s.opts, s.index
        x, y = ref(s.inputs[0]), ref(s.output, True)
        call = None
        if s.op in ("CONV_2D", "DEPTHWISE_CONV_2D"):
            w = m.tensors[s.inputs[1]]
            arrays += [
                _c_array("int8_t", f"m_w_{k}_filter", w.data),
                _c_array("int32_t", f"m_w_{k}_bias", o["bias"]),
                _c_array("int32_t", f"m_w_{k}_mult", o["mult"]),
                _c_array("int32_t", f"m_w_{k}_shift", o["shift"]),
            ]
            tiles = (
                f"{{{o['StrideW']}, {o['StrideH']}}}, {{{o['pad'][1]}, {o['pad'][0]}}}, "
                f"{{{o['DilationWFactor']}, {o['DilationHFactor']}}}, {{{o['act'][0]}, {o['act'][1]}}}"
            )
            co = o["out_dims"][3]
            if s.op == "CONV_2D":
                params = f"static const cmsis_nn_conv_params p = {{{o['in_off']}, {o['out_off']}, {tiles}}};"
                fn = "arm_convolve_wrapper_s8"
            else:
                params = (
                    f"static const cmsis_nn_dw_conv_params p = {{{o['in_off']}, {o['out_off']}, "
                    f"{o['ch_mult']}, {tiles}}};"
                )
                fn = "arm_depthwise_conv_wrapper_s8"
            call = [
                params,
                f"static const cmsis_nn_per_channel_quant_params q = {{(int32_t *)m_w_{k}_mult, "
                f"(int32_t *)m_w_{k}_shift}};",
                f"static const cmsis_nn_dims in = {_dims(o['in_dims'])}, f = {_dims(o['filter_dims'])}, "
                f"b = {_dims((1, 1, 1, co))}, out = {_dims(o['out_dims'])};",
                f"const cmsis_nn_context ctx = {{A + {scratch_at}, {o['scratch']}}};",
                f"st = {fn}(&ctx, &p, &q, &in, {x}, &f, m_w_{k}_filter, &b, m_w_{k}_bias, &out, {y});",
            ]
        elif s.op == "FULLY_CONNECTED":
            w = m.tensors[s.inputs[1]]
            arrays += [
                _c_array("int8_t", f"m_w_{k}_weights", w.data),
                _c_array("int32_t", f"m_w_{k}_bias", o["bias"]),
            ]
            ctx = "{0, 0}"
            if o["sums_bytes"]:
                arrays.append(_c_array("int32_t", f"m_w_{k}_sums", o["kernel_sums"]))
                ctx = f"{{(void *)m_w_{k}_sums, {o['sums_bytes']}}}"
            act = f"{{{o['act'][0]}, {o['act'][1]}}}"
            if o["per_channel"]:
                arrays += [
                    _c_array("int32_t", f"m_w_{k}_mult", o["mult"]),
                    _c_array("int32_t", f"m_w_{k}_shift", o["shift"]),
                ]
                q = (
                    f"static const cmsis_nn_per_channel_quant_params q = {{(int32_t *)m_w_{k}_mult, "
                    f"(int32_t *)m_w_{k}_shift}};"
                )
                fn = "arm_fully_connected_per_channel_s8"
            else:
                q = f"static const cmsis_nn_per_tensor_quant_params q = {{{o['mult'][0]}, {o['shift'][0]}}};"
                fn = "arm_fully_connected_s8"
            call = [
                "static const cmsis_nn_fc_params p = "
                f"{{{o['in_off']}, {o['w_off']}, {o['out_off']}, {act}}};",
                q,
                f"static const cmsis_nn_dims in = {_dims((o['rows'], 1, 1, o['k']))}, "
                f"f = {_dims((o['k'], 1, 1, o['n']))}, b = {_dims((1, 1, 1, o['n']))}, "
                f"out = {_dims((o['rows'], 1, 1, o['n']))};",
                f"const cmsis_nn_context ctx = {ctx};",
                f"st = {fn}(&ctx, &p, &q, &in, {x}, &f, m_w_{k}_weights, &b, m_w_{k}_bias, &out, {y});",
            ]
        elif s.op in ("AVERAGE_POOL_2D", "MAX_POOL_2D"):
            fn = "arm_avgpool_s8" if s.op == "AVERAGE_POOL_2D" else "arm_max_pool_s8"
            call = [
                f"static const cmsis_nn_pool_params p = {{{{{o['StrideW']}, {o['StrideH']}}}, "
                f"{{{o['pad'][1]}, {o['pad'][0]}}}, {{{o['act'][0]}, {o['act'][1]}}}}};",
                f"static const cmsis_nn_dims in = {_dims(o['in_dims'])}, "
                f"f = {_dims((1, *o['filter'], 1))}, out = {_dims(o['out_dims'])};",
                f"const cmsis_nn_context ctx = {{A + {scratch_at}, {o['scratch']}}};",
                f"st = {fn}(&ctx, &p, &in, {x}, &f, &out, {y});",
            ]
        elif s.op == "ADD":
            (a1, a2, ao), (m1, s1, m2, s2, mo, so) = o["offs"], o["mults"]
            b = ref(s.inputs[1])
            call = [
                f"st = arm_elementwise_add_s8({x}, {b}, {a1}, {m1}, {s1}, {a2}, {m2}, {s2}, "
                f"{ADD_LEFT_SHIFT}, "
                f"{y}, {ao}, {mo}, {so}, {o['act'][0]}, {o['act'][1]}, {m.tensors[s.output].size});"
            ]
        elif s.op == "MUL":
            (a1, a2, ao), (mo, so) = o["offs"], o["mults"]
            b = ref(s.inputs[1])
            call = [
                f"st = arm_elementwise_mul_s8({x}, {b}, {a1}, {a2}, {y}, {ao}, {mo}, {so}, "
                f"{o['act'][0]}, {o['act'][1]}, {m.tensors[s.output].size});"
            ]
        elif s.op == "SOFTMAX":
            q, left, diff_min = o["params"]
            call = [f"arm_softmax_s8({x}, {o['rows']}, {o['row']}, {q}, {left}, {diff_min}, {y});"]
        elif s.op == "QUANTIZE":
            scale, zero = m.tensors[s.output].q()
            call = [
                f"m_quantize({x}, {y}, {m.tensors[s.output].size}, {float(np.float32(scale))!r}f, {zero});"
            ]
        elif s.op == "DEQUANTIZE":
            scale, zero = m.tensors[s.inputs[0]].q()
            call = [
                f"m_dequantize({x}, {y}, {m.tensors[s.output].size}, {float(np.float32(scale))!r}f, {zero});"
            ]
        elif s.op == "RESHAPE":
            src, dst = s.inputs[0], s.output
            if offsets.get(src) is not None and offsets.get(src) == offsets.get(dst):
                body.append(f"    /* {k}: RESHAPE, the same bytes */")
                continue
            nbytes = m.tensors[dst].size * np.dtype(m.tensors[dst].dtype).itemsize
            call = [f"memcpy({y}, {x}, {nbytes});"]
        body.append(f"    {{ /* {k}: {s.op} */")
        body += [f"        {line}" for line in call]
        if call[-1].startswith("st = "):
            body.append(f"        if (st != ARM_CMSIS_NN_SUCCESS) return {100 + k};")
        body.append("    }")
    args = [f"const {c} *{n}" for n, c in ins.values()] + [f"{c} *{n}" for n, c in outs.values()]
    checks = " || ".join(f"!{n}" for n, _ in [*ins.values(), *outs.values()]) + " || !arena"
    return f"""/* m.c: TFLite model '{meta["graph"]}' run layer by layer by CMSIS-NN's int8 kernels.
 * Generated by flowc's bench/cmsis_nn.py to compare with flowc's own code; arena: {activations} bytes of
 * activations + {scratch} bytes of CMSIS-NN scratch. */
#include <stdint.h>
#include <string.h>

#include "arm_nnfunctions.h"
#include "m.h"

/* float32 to int8 as TFLite's reference: round(x / scale) with halves away from zero, + zero
 * point, saturated (by hand: no libm call, and NaN saturates instead of being undefined) */
static void m_quantize(const float *x, int8_t *y, long n, float scale, int32_t zero) {{
    for (long i = 0; i < n; ++i) {{
        const float v = x[i] / scale, a = v < 0.0f ? -v : v;
        int32_t r = 1000;
        if (a <= 1000.0f) {{
            r = (int32_t)a;
            if (a - (float)r >= 0.5f) ++r;
        }}
        r = (v < 0.0f ? -r : r) + zero;
        y[i] = (int8_t)(r < -128 ? -128 : r > 127 ? 127 : r);
    }}
}}

/* int8 to float32: (q - zero point) * scale (TFLite computes it in double; the product of an
 * int8 and a float32 is exact in double, so rounding it once to float gives the same value) */
static void m_dequantize(const int8_t *q, float *y, long n, float scale, int32_t zero) {{
    for (long i = 0; i < n; ++i) y[i] = (float)((int32_t)q[i] - zero) * scale;
}}

{"".join(arrays)}
int m_run({", ".join(args)}, void *arena) {{
    int8_t *const A = (int8_t *)arena;
    arm_cmsis_nn_status st = ARM_CMSIS_NN_SUCCESS;
    if ({checks}) return M_ERR_NULL;
{chr(10).join(body)}
    (void)st;
    return M_OK;
}}
"""


# ----------------------------------------------------------------------------- building
def missing() -> str | None:
    """Why the CMSIS-NN comparison cannot run here, or None."""
    if not (CMSIS_NN / "Include" / "arm_nnfunctions.h").exists():
        return f"the CMSIS-NN snapshot is not at {CMSIS_NN}"
    for tool in ("arm-none-eabi-gcc", "arm-none-eabi-ar", "qemu-system-arm"):
        if not shutil.which(tool):
            packages = "gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm"
            return f"{tool} is not on PATH (apt-get install {packages})"
    try:
        toolchain.find_cc()
    except FlowcError as e:
        return f"no host C compiler for CMSIS-NN's buffer-size functions: {e}"
    return None


# The sources whose requantization is the fully connected layers' (only they call these):
# built a second time with CMSIS_NN_USE_SINGLE_ROUNDING, CMSIS-NN's switch for rounding the
# 64-bit product once, as LiteRT's fully connected layers (and flowc, which follows LiteRT) do
FC_SOURCES = ("arm_nn_vec_mat_mult_t_s8.c", "arm_nn_vec_mat_mult_t_per_ch_s8.c")


def cmsis_objects(core: str, workdir: Path, fc_rounding: str = "single") -> list[Path]:
    """CMSIS-NN's int8 sources (every .c but the float16/32 ones) compiled for ``core`` with
    flowc's flags for it, in workdir/cmsis-nn-<core>; reused while the flags are the same.
    ``fc_rounding``: "single" takes the fully connected kernels built with
    CMSIS_NN_USE_SINGLE_ROUNDING (LiteRT's arithmetic), "double" CMSIS-NN's default (TFLite
    Micro's: gemmlowp's two roundings, as every other kernel here)."""
    if fc_rounding not in ("single", "double"):
        raise FlowcError(f"fc_rounding is 'single' or 'double', not {fc_rounding!r}")
    target = Target(core)
    out = workdir / f"cmsis-nn-{core}"
    flags = [*target.cflags(), "-I", str(CMSIS_NN / "Include")]
    srcs = sorted(p for p in (CMSIS_NN / "Source").rglob("*.c") if not p.name.endswith(("_f16.c", "_f32.c")))
    jobs = [(p, out / f"{p.stem}.o", ()) for p in srcs]
    jobs += [
        (p, out / f"{p.stem}.single.o", ("-DCMSIS_NN_USE_SINGLE_ROUNDING",))
        for p in srcs
        if p.name in FC_SOURCES
    ]
    stamp = out / "flags.txt"
    if not (stamp.exists() and stamp.read_text() == " ".join(flags) and all(o.exists() for _, o, _ in jobs)):
        out.mkdir(parents=True, exist_ok=True)
        cc = toolchain.find_cc(None, target)
        with ThreadPoolExecutor(os.cpu_count() or 2) as pool:
            list(
                pool.map(lambda j: toolchain.run([cc, *flags, *j[2], "-c", str(j[0]), "-o", str(j[1])]), jobs)
            )
        stamp.write_text(" ".join(flags))
    single = fc_rounding == "single"
    return [o for p, o, extra in jobs if p.name not in FC_SOURCES or bool(extra) == single]


def _load(tflite) -> tuple[bytes, Path | None]:
    if isinstance(tflite, (bytes, bytearray)):
        return bytes(tflite), None
    return Path(tflite).read_bytes(), Path(tflite)


def flowc_export(tflite, core: str, workdir: Path) -> Path:
    """flowc's MCU export of the file for ``core`` in workdir/flowc-<core>."""
    data, path = _load(tflite)
    if path is None:
        path = workdir / "model.tflite"
        path.write_bytes(data)
    return Path(codegen.export(gd.load_tflite(path), workdir / f"flowc-{core}", name="m", arch=core))


def run(
    tflite, core: str, feeds: dict, workdir, flowc_folder: Path | None = None, fc_rounding: str = "single"
) -> dict | None:
    """Run the int8 TFLite model ``tflite`` (bytes or a path) through CMSIS-NN on ``core``'s
    QEMU board with the inputs ``feeds`` (name -> array, as for flowc's model). Returns
    {"instructions", "outputs", "arena" (activations + scratch bytes), "scratch", "stack"
    (measured), "flash", "ram", "macs", "footprint"}, or None with a printed reason when the
    tools or the CMSIS-NN snapshot are missing. ``flowc_folder``: flowc's export of the same
    file for the core (its firmware is reused); made in workdir when not given.
    ``fc_rounding``: the fully connected layers' rounding (``cmsis_objects``).

    >>> r = run("ds_cnn.tflite", "cortex-m4", {"input": x}, Path("/tmp/w"))  # doctest: +SKIP
    """
    why = missing()
    if why:
        print(f"CMSIS-NN comparison skipped: {why}")
        return None
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    data, _ = _load(tflite)
    m = read_model(data)
    prepare(m)
    scratch_sizes(m, core, workdir)
    offsets, activations = plan(m)
    scratch = -(-max((s.opts.get("scratch", 0) for s in m.steps), default=0) // ALIGN) * ALIGN
    arena = activations + scratch

    src = Path(flowc_folder) if flowc_folder else flowc_export(tflite, core, workdir)
    folder = workdir / f"cmsis-{core}"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(
        src, folder, ignore=shutil.ignore_patterns("build", "*.o", "*.a", "m.c", "m_weights.*", "firmware.*")
    )
    shutil.copy(src / "firmware.c", folder / "firmware.c")
    meta = json.loads((folder / "metadata.json").read_text())
    if len(meta["inputs"]) != len(m.inputs) or len(meta["outputs"]) != len(m.outputs):
        raise FlowcError("flowc's export and the file disagree on the inputs or outputs")
    header = (folder / "m.h").read_text().splitlines()
    for key, value in (("ARENA_BYTES", arena), ("ARENA_LOWER_BOUND", arena)):
        header = [f"#define M_{key} {value}" if ln.startswith(f"#define M_{key} ") else ln for ln in header]
    (folder / "m.h").write_text("\n".join(header) + "\n")
    (folder / "m.c").write_text(harness(m, meta, offsets, activations, scratch))
    meta.update(arena_bytes=arena, arena_lower_bound=arena, weights="arrays", schedule=[])
    meta.pop("footprint", None)
    (folder / "metadata.json").write_text(json.dumps(meta, indent=1))

    target = Target(core)
    cc = toolchain.find_cc(None, target)
    toolchain.run(
        [
            cc,
            *target.cflags(),
            "-std=c99",
            "-Wall",
            "-Wextra",
            "-I",
            str(CMSIS_NN / "Include"),
            "-I.",
            "-c",
            "m.c",
            "-o",
            "m.o",
        ],
        cwd=folder,
    )
    objs = cmsis_objects(core, workdir, fc_rounding)
    (folder / "build").mkdir()
    toolchain.run([target.tool("ar"), "rcs", "build/libm.a", "m.o", *map(str, objs)], cwd=folder)
    res = mcu.run_firmware(folder, feeds, timeout=600)
    try:
        fp = mcu.footprint(folder, "m", target, meta)
        flash, ram, fpd = fp.flash, fp.ram, fp.to_json()
    except FlowcError as e:  # no static stack bound: flash from the map, RAM with the measured stack
        print(f"note: {core}: {e}; RAM uses the measured stack")
        size = toolchain.run([target.tool("size"), "-A", "build/firmware.elf"], cwd=folder)
        secs = {ln.split()[0]: int(ln.split()[1]) for ln in size.splitlines() if ln.startswith(".")}
        flash = sum(secs.get(s, 0) for s in mcu.FLASH_OUTPUTS)
        ram, fpd = arena + res["stack"], None
    return {
        "instructions": res["instructions"],
        "outputs": res["outputs"],
        "arena": arena,
        "scratch": scratch,
        "activations": activations,
        "stack": res["stack"],
        "flash": flash,
        "ram": ram,
        "macs": sum(s.opts.get("macs", 0) for s in m.steps),
        "footprint": fpd,
        "folder": folder,
    }


def run_flowc(folder: Path, feeds: dict) -> dict:
    """flowc's export run on its board: instructions, outputs, flash, RAM (its footprint)."""
    res = mcu.run_firmware(folder, feeds, timeout=600)
    fp = json.loads((Path(folder) / "metadata.json").read_text())["footprint"]
    return {**res, "flash": fp["flash"], "ram": fp["ram"], "arena": fp["arena"]}


def largest_difference(a: dict, b: dict) -> float:
    """The largest absolute difference between outputs of the same names (inf on a shape change)."""
    worst = 0.0
    for name, x in a.items():
        y = b[name]
        if x.shape != y.shape:
            return math.inf
        worst = max(worst, float(np.max(np.abs(x.astype(np.float64) - y.astype(np.float64)), initial=0.0)))
    return worst


# ----------------------------------------------------------------------------- where they differ
def truncate(data: bytes, tensor: int) -> bytes:
    """The file cut after the operator that writes ``tensor``, which becomes its one output,
    rewritten by the tests' TFLite writer (tests/tflite/tflite_files.py)."""
    sys.path.insert(0, str(ROOT / "tests" / "tflite"))
    from tflite_files import Model as Writer

    m = read_model(data)
    last = next(k for k, s in enumerate(m.steps) if s.output == tensor)
    steps = m.steps[: last + 1]
    used = sorted({i for s in steps for i in s.inputs if i >= 0} | {s.output for s in steps} | set(m.inputs))
    w, new = Writer(), {}
    for i in used:
        t = m.tensors[i]
        quant = (t.scale, t.zero, t.axis) if t.scale is not None else None
        new[i] = w.tensor(t.name, t.shape, t.dtype, t.data, quant)
    w.inputs, w.outputs = [new[i] for i in m.inputs], [new[tensor]]
    for s in steps:
        w.op(s.op, [new[i] for i in s.inputs], [new[s.output]], OPTIONS.get(s.op) if s.raw else None, **s.raw)
    return w.write()


def compare_at(data: bytes, tensor: int, core: str, feeds: dict, workdir: Path, fc_rounding: str = "single"):
    """(flowc's int8 values of ``tensor``, CMSIS-NN's), each model cut there."""
    cut = truncate(data, tensor)
    wd = workdir / f"cut{tensor}"
    wd.mkdir(parents=True, exist_ok=True)
    folder = flowc_export(cut, core, wd)
    f = run_flowc(folder, feeds)["outputs"]
    c = run(cut, core, feeds, wd, folder, fc_rounding)["outputs"]
    return next(iter(f.values())), next(iter(c.values()))


def first_difference(data: bytes, core: str, feeds: dict, workdir: Path, fc_rounding: str = "single") -> str:
    """The first operator whose int8 output differs between flowc and CMSIS-NN, found by
    bisection over the operators' outputs (each probe: both models cut there and run), with
    how many of its values differ and by how much."""
    m = read_model(data)
    probes = [s for s in m.steps if m.tensors[s.output].dtype == "int8" and s.op != "RESHAPE"]
    lo, hi, found = 0, len(probes) - 1, None
    while lo <= hi:
        mid = (lo + hi) // 2
        a, b = compare_at(data, probes[mid].output, core, feeds, workdir, fc_rounding)
        if np.array_equal(a, b):
            lo = mid + 1
        else:
            found, hi = (mid, a, b), mid - 1
    if found is None:
        return "no int8 layer output differs"
    k, a, b = found
    s = probes[k]
    d = a.astype(np.int64) - b.astype(np.int64)
    where = f"operator {s.index} ({s.op}, '{m.tensors[s.output].name}')"
    return f"{where}: {np.count_nonzero(d)} of {d.size} values differ, by at most {np.abs(d).max()}"


# ----------------------------------------------------------------------------- the bench
def _tiny_models() -> dict:
    """The four MLPerf Tiny int8 TFLite builders of tests/tflite/test_tiny_tflite.py."""
    sys.path.insert(0, str(ROOT / "tests" / "tflite"))
    import test_tiny_tflite as tiny

    return tiny.MODELS


def measure(cores, names, workdir: Path, fc_rounding: str = "single") -> list[dict]:
    """Per model and core: flowc's export and the CMSIS-NN harness of the same file run on the
    same input (seed 12, standard normal x 2); where the model ends in a softmax (saturated
    probabilities say little), also its int8 logits compared, each model cut before it."""
    models = _tiny_models()
    rows = []
    for name in names:
        net = models[name]()
        data = net.finish()
        shape = net.m.tensors[net.m.inputs[0]][1]
        x = (np.random.default_rng(12).standard_normal(shape) * 2).astype(np.float32)
        path = workdir / f"{name}.tflite"
        path.write_bytes(data)
        model = read_model(data)
        before_softmax = [s.inputs[0] for s in model.steps if s.op == "SOFTMAX"]
        for core in cores:
            t0 = time.perf_counter()
            wd = workdir / name / core
            wd.mkdir(parents=True, exist_ok=True)
            folder = flowc_export(path, core, wd)
            feeds = {json.loads((folder / "metadata.json").read_text())["inputs"][0]["name"]: x}
            f = run_flowc(folder, feeds)
            c = run(path, core, feeds, wd, folder, fc_rounding)
            if c is None:
                return rows
            diff = largest_difference(f["outputs"], c["outputs"])
            row = {"model": name, "core": core, "flowc": f, "cmsis": c, "diff": diff, "logits": None}
            if before_softmax:
                a, b = compare_at(data, before_softmax[-1], core, feeds, wd, fc_rounding)
                row["logits"] = int(np.abs(a.astype(np.int64) - b.astype(np.int64)).max())
            row["first"] = None
            if row["diff"] != 0 or row["logits"]:
                row["first"] = first_difference(data, core, feeds, wd, fc_rounding)
            row["seconds"] = time.perf_counter() - t0
            rows.append(row)
            print(
                f"{name} {core}: flowc {f['instructions']:,} CMSIS-NN {c['instructions']:,} "
                f"({row['seconds']:.1f} s)",
                file=sys.stderr,
                flush=True,
            )
    return rows


def table(rows: list[dict]) -> str:
    head = (
        "| model | core | MACs | flowc int8 instructions | CMSIS-NN instructions | flowc / CMSIS-NN | "
        "instructions / MAC flowc / CMSIS-NN | RAM B flowc / CMSIS-NN | CMSIS-NN arena (scratch) B | "
        "flash B flowc / CMSIS-NN | outputs equal |"
    )
    lines = [head, "|---|---|" + "---:|" * 8 + "---|"]
    for r in rows:
        f, c, macs = r["flowc"], r["cmsis"], r["cmsis"]["macs"]
        same = "yes" if r["diff"] == 0 else f"NO (largest difference {r['diff']:.3g})"
        if r["logits"] is not None:
            same += ", logits " + ("equal" if r["logits"] == 0 else f"differ by up to {r['logits']}")
        lines.append(
            f"| {r['model']} | {r['core']} | {macs:,} | {f['instructions']:,} | {c['instructions']:,} | "
            f"{f['instructions'] / c['instructions']:.2f} | {f['instructions'] / macs:.2f} / "
            f"{c['instructions'] / macs:.2f} | {f['ram']:,} / {c['ram']:,} | "
            f"{c['arena']:,} ({c['scratch']:,}) | "
            f"{f['flash']:,} / {c['flash']:,} | {same} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    names = ["ds_cnn", "mobilenet_v1", "resnet8", "autoencoder"]
    ap.add_argument("--cores", nargs="+", default=list(CORES), choices=CORES)
    ap.add_argument("--models", nargs="+", default=names, choices=names)
    ap.add_argument("--markdown", type=Path)
    ap.add_argument("--workdir", type=Path, help="keep the builds here (default: a temporary folder)")
    ap.add_argument(
        "--fc-rounding",
        choices=("single", "double"),
        default="single",
        help="fully connected layers: LiteRT's single rounding (flowc's) or CMSIS-NN's default",
    )
    args = ap.parse_args(argv)
    why = missing()
    if why:
        print(f"skipped: {why}")
        return 0
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        rows = measure(args.cores, args.models, workdir, args.fc_rounding)
    text = table(rows)
    print(text)
    print(f"({time.perf_counter() - t0:.0f} s)")
    if args.markdown:
        args.markdown.write_text(text + "\n")
    bad = [
        f"{r['model']} on {r['core']}: largest difference {r['diff']}, logits {r['logits']}; "
        f"first: {r['first']}"
        for r in rows
        if r["diff"] != 0 or r["logits"]
    ]
    for line in bad:
        print(f"OUTPUTS DIFFER: {line}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
