"""The C lowering of the integer kernels of quantized models (graphdef/ops/quant.py):
``qconv`` on runtime_c/kernels/qconv.h, split over the model's threads by (image, output
channel) planes."""

from __future__ import annotations

import re

from ....render.splits import Split, work
from ..op_table import Call, kernel


def int8_features(macros: str) -> str:
    """The integer kernel's features a build has, from its predefined ``macros``: "vnni",
    "vnni+amx", "sdot", "dsp" (Cortex-M with the DSP extension), "dsp+mve" (and Helium) or
    "plain" (what ``_qconv_scratch`` reads as its ``isa``)."""
    have = set(re.findall(r"#define\s+(\w+)", macros))
    if {"__AVX512VNNI__", "__AVX512BW__", "__AVX512VL__"} <= have:
        amx = {"__AMX_INT8__", "__AMX_TILE__", "__linux__", "__x86_64__"} <= have
        return "vnni+amx" if amx else "vnni"
    if {"__aarch64__", "__ARM_NEON", "__ARM_FEATURE_DOTPROD"} <= have:
        return "sdot"
    if "__ARM_FEATURE_DSP" in have and _m_profile(macros):
        return "dsp+mve" if "__ARM_FEATURE_MVE" in have else "dsp"
    return "plain"


def _m_profile(macros: str) -> bool:
    """Whether the macros are a Cortex-M build's (__ARM_ARCH_PROFILE 'M', which GCC writes as 77)."""
    return re.search(r"#define\s+__ARM_ARCH_PROFILE\s+(77|'M')\b", macros) is not None


def _features(isa: str) -> set[str]:
    """``int8_features``' names, or for a GEMM ISA name (the features unknown) every form its
    builds may have: the scratch is then the largest of theirs."""
    if isa == "avx512":
        return {"vnni", "amx", "plain"}
    if isa == "aarch64":
        return {"sdot", "plain"}
    return set(isa.split("+"))


def _qconv_scratch(ins, outs, attrs, isa):
    """kernels/qconv.h's fc_qconv_scratch for a build with the integer features ``isa``
    (``int8_features``; or a GEMM ISA name: the largest of its builds' forms). For a dense layer
    (one output position) the window (bytes on Helium); for the column form (Cortex-M DSP, one
    group) four int16 columns of K rounded up to 4 and four more each, and a window in k order
    (on Helium four byte columns of K rounded up to 16); for the row form (Cortex-M DSP, one
    input channel per group) the padded plane as int16; for the channel form (AVX-512 VNNI:
    depthwise, strided or small planes) a band's transposed input rows, the taps' weights, the
    band's offsets and outputs; for the flat form (stride 1, one input channel per group) a
    plane's sums and outputs in padded rows and its int32 copies; for the dot-product form
    (VNNI or sdot) the sums of a pass (4 channels, or 16 for planes of at most 16 positions on
    VNNI; on AMX tiles 32 rows of 64 and the first sums), a staging row, the packed windows of
    the rows computed at once (about 256 positions), a pass's weights (K rounded up to 4, to 64
    on AMX), each channel's first sum and two rows of padding; else the int32 sums of 4 output
    channels (oh rows of a phase's width, rounded up to 64), a staging row and a group's input
    planes as padded int16 copies split by stride phase."""
    feats = _features(isa)
    x, w, y = ins[0], ins[1], outs[0]
    (sh, sw), (dh, dw) = attrs["strides"], attrs["dilations"]
    oh, ow = y.shape[2], y.shape[3]
    hq = ((oh - 1) * sh + (w.shape[2] - 1) * dh + sh) // sh
    wq = ((ow - 1) * sw + (w.shape[3] - 1) * dw + sw) // sw
    slack = (w.shape[3] - 1) * dw // sw + (w.shape[2] - 1) * dh // sh * wq + 16
    ps = -(-(sh * sw * hq * wq + slack) // 16) * 16
    pn = -(-(oh * ow) // 64) * 64
    planes = 4 * 4 * (-(-(oh * wq) // 64) * 64) + pn + 2 * (x.shape[1] // attrs["group"]) * ps
    k4 = -(-(w.shape[1] * w.shape[2] * w.shape[3]) // 4)
    k16 = -(-k4 // 4) * 16
    layout = attrs.get("w_layout", "oihw")
    if layout == "ohwi":  # the channel-rows form (fc_qconv_rows_scratch): kh rows of wp positions
        return w.shape[2] * ((ow - 1) * sw + w.shape[3]) * x.shape[1]
    if layout == "hwo":  # fc_qconv_dwrows_scratch: the rows, and each channel's first sum
        return w.shape[2] * ((ow - 1) * sw + w.shape[3]) * x.shape[1] + 4 * x.shape[1]
    direct = w.shape[2] * w.shape[3] * x.shape[2] * x.shape[3] == 1
    if attrs["group"] == 1 and oh * ow == 1 and direct and "dsp" in feats:
        return 0  # a dense layer on x (N, K, 1, 1), read in place (Cortex-M DSP, Helium)
    if attrs["group"] == 1 and oh * ow == 1:  # a dense layer (fc_qconv_dense): the window as int16
        return k16 if "mve" in feats else k4 * 4 * 2  # (as bytes on Helium)
    if attrs["group"] == 1 and "mve" in feats:  # the column form on Helium: four byte columns of k16
        return 4 * k16
    if attrs["group"] == 1 and "dsp" in feats:  # the column form (fc_qconv_cols): four int16 columns
        return ((k4 * 4 + 4) * 4 + k4 * 4) * 2
    if "dsp" in feats and attrs["group"] == x.shape[1] and w.shape[2] * w.shape[3] <= 64:
        # the row form (fc_qconv_dwr): the padded plane as int16
        hp = (oh - 1) * sh + (w.shape[2] - 1) * dh + 1
        wp = (ow - 1) * sw + (w.shape[3] - 1) * dw + 1
        return -(-(hp * wp * 2) // 4) * 4
    kh, kw, h, wd = w.shape[2], w.shape[3], x.shape[2], x.shape[3]
    depthwise = attrs["group"] == x.shape[1]
    channels = depthwise and w.shape[0] == x.shape[1] and kh * kw <= 64 and "vnni" in feats
    if channels and ((sh, sw) != (1, 1) or oh * ow < 64):
        # the channel form on AVX-512 VNNI (fc_qconv_dwc), else the flat or the plane form
        wp = (ow - 1) * sw + (kw - 1) * dw + 1
        rows = 1  # fc_qconv_dwc_rows: a band's input rows within 16 KiB
        while rows < oh and (rows * sh + (kh - 1) * dh + 1) * wp * 64 <= 16384:
            rows += 1
        np_ = -(-(rows * ow) // 16) * 16
        dwc = (((rows - 1) * sh + (kh - 1) * dh + 1) * wp + 1) * 64 + kh * kw * 64 + np_ * 8 + np_ * 16
        return max(dwc, _qconv_scratch(ins, outs, attrs, "plain")) if "plain" in feats else dwc
    if (sh, sw) == (1, 1) and depthwise and kh * kw <= 64:
        # the flat form (fc_qconv_flat): sums and outputs, small planes' masks, the copies
        pw, ph = attrs["pads"][1], attrs["pads"][0]
        pad = h * wd > 1024 or ow != wd  # fc_qconv_fpad
        rw = max(pw + wd, ow + (kw - 1) * dw) if pad else wd
        lead = 0 if pad else pw
        fpn = -(-(oh * rw) // 64) * 64
        reach = lead + (kh - 1) * dh * rw + (kw - 1) * dw - (0 if pad else pw) + fpn
        fs = -(-max(reach, lead + (ph + h) * rw) // 16) * 16
        return fpn * 5 + (fs if pad else kw * (-(-(h * wd) // 16) * 16 + fs)) * 4
    if not feats & {"vnni", "sdot"} or attrs["group"] != 1:
        return planes
    # the dot-product form: AVX-512 VNNI or AArch64's dot-product extension
    rows = 2 * (-(-(ow * sw) // 64) * 64)
    mb = 16 if oh * ow <= 16 and "vnni" in feats else 4  # channels of a pass: fc_qconv_dot_mb
    r = max(1, 256 // ow)  # the rows computed at once (fc_qconv_dot_rows), their positions (cpn)
    cpn = -(-((oh if oh * ow <= 256 or r > oh else r) * ow) // 64) * 64
    # on AMX-INT8 tiles (fc_qconv_dot_amx: at least 32 channels and 64 k): a pass's 32 rows of
    # 64 sums and 32 x 16 first sums (fc_qconv_dot_acc), 32 rows of weights, k4 groups rounded
    # up to 16 (fc_qconv_dot_k4r)
    acc, ar, kr = mb * cpn, mb, k4
    if "amx" in feats and mb == 4 and w.shape[0] >= 32 and w.shape[1] * kh * kw >= 64:
        acc, ar, kr = max(acc, 32 * 64 + 32 * 16), 32, -(-k4 // 16) * 16
    dot = acc * 4 + cpn + kr * 4 * cpn + ar * kr * 4 + 4 * w.shape[0] + rows
    return max(planes, dot) if "plain" in feats else dot


def qconv_form(node, macros: str, graph) -> str | None:
    """Which form of kernels/qconv.h computes a ``qconv`` step of ``graph`` (its C dispatch,
    fc_qconv, from the build's predefined ``macros``; None for other ops): ``flowc inspect``
    prints it for every integer convolution."""
    if node.op != "qconv":
        return None
    have = set(re.findall(r"#define\s+(\w+)", macros))
    vnni = {"__AVX512VNNI__", "__AVX512BW__", "__AVX512VL__"} <= have
    sdot = {"__aarch64__", "__ARM_FEATURE_DOTPROD"} <= have
    a, (x, w), y = node.attrs, (graph.type_of(r) for r in node.inputs[:2]), node.outputs[0]
    group, (oh, ow) = a["group"], y.shape[2:]
    c, m, k = x.shape[1], y.shape[1], w.shape[1] * w.shape[2] * w.shape[3]
    dsp = "__ARM_FEATURE_DSP" in have and _m_profile(macros)
    mve = dsp and "__ARM_FEATURE_MVE" in have
    strided, taps = tuple(a["strides"]) != (1, 1), w.shape[2] * w.shape[3]
    if a.get("w_layout", "oihw") == "ohwi":
        return "channel rows: four positions a channel's vmladav (16 k each, read in place)"
    if a.get("w_layout", "oihw") == "hwo":
        return "channel rows: four channels in the vector lanes, two positions a pass (vmla)"
    if group == 1 and oh * ow == 1:
        how = " (VNNI)" if vnni else " (vmladav)" if mve else " (smlad)" if dsp else ""
        return "dense layer: a dot product an output" + how
    if group == 1 and vnni:
        amx = {"__AMX_INT8__", "__AMX_TILE__", "__linux__"} <= have and oh * ow > 16 and m >= 32 and k >= 64
        return "dot products: AMX tiles where Linux lends them, else VNNI" if amx else "dot products: VNNI"
    if group == 1 and sdot:
        return "dot products: sdot"
    if group == 1 and mve:
        return "columns: four positions a channel's vmladav (16 k each)"
    if group == 1 and dsp:
        return "columns: four positions a channel's smlad"
    if group == c and taps <= 64 and dsp:
        return "padded rows: tap pairs a smlad"
    if group == c == m and taps <= 64 and vnni and (strided or oh * ow < 64):
        return "channels in the vector lanes (VNNI)"
    if group == c and not strided and taps <= 64:
        return "flat rows: one run a tap"
    return "int16 planes"


def _qconv_split(ins, outs, attrs):
    y, w = outs[0], ins[1]
    taps = w.shape[1] * w.shape[2] * w.shape[3]
    return Split(y.shape[0] * y.shape[1], work(ins, outs, 2 * y.size * taps))


def _qconv_entry(g: dict) -> str:
    """The entry of kernels/qconv.h for the form of ``g``: the channels-last forms of weights
    laid out so (fc_qconv_rows, fc_qconv_dwrows), a dense layer's, one group's, a depthwise
    convolution's (fc_qconv_dense_run, fc_qconv_g1, fc_qconv_dw), else the one that takes every
    geometry: a microcontroller's firmware links no form it does not use."""
    if g["layout"] != "oihw":
        return "rows_" if g["layout"] == "ohwi" else "dwrows_"
    if g["groups"] == 1:
        return "dense_run_" if g["oh"] * g["ow"] == 1 else "g1_"
    return "dw_" if g["groups"] == g["c"] else ""


@kernel("qconv", scratch=_qconv_scratch, split=_qconv_split)
def _qconv(s):
    x, w, y, a = s.ins[0], s.ins[1], s.outs[0], s.attrs
    g = {
        "n": x.shape[0], "c": x.shape[1], "h": x.shape[2], "w": x.shape[3], "m": w.shape[0],
        "oh": y.shape[2], "ow": y.shape[3], "kh": w.shape[2], "kw": w.shape[3],
        "sh": a["strides"][0], "sw": a["strides"][1], "ph": a["pads"][0], "pw": a["pads"][1],
        "dh": a["dilations"][0], "dw": a["dilations"][1], "groups": a["group"],
        "x_zero": a["x_zero"], "y_zero": a["y_zero"], "lo": a["lo"], "hi": a["hi"],
        "per_channel": int(len(a["scale"] or a["multiplier"]) > 1), "single": int(a["rounding"] == "single"),
    }  # fmt: skip
    k = {
        "g": g,
        "fn": f"fc_qconv_{_qconv_entry({**g, 'layout': a.get('w_layout', 'oihw')})}"
        f"{'i8' if x.dtype == 'int8' else 'u8'}",
        "q": list(a["multiplier"]),
        "shift": list(a["shift"]),
        "scale": [repr(float(v)) for v in a["scale"]],  # exact: repr round-trips a double
        "bias": s.arg(2),
        "span": s.span(g["n"] * g["m"]),
    }
    return Call("qconv", k, ("kernels/qconv.h",))


def _qadd_split(ins, outs, attrs):
    return Split(outs[0].size, work(ins, outs, 8 * outs[0].size))


@kernel("qadd", split=_qadd_split)
def _qadd(s):
    """kernels/qadd.h: LiteRT's quantized ADD in 32-bit fixed point (four elements a pass on
    Helium), the elements [lo, hi) of a split step."""
    a = s.attrs
    k = {
        "fn": f"fc_qadd_{'i8' if s.ins[0].dtype == 'int8' else 'u8'}",
        "a_zero": a["a_zero"], "b_zero": a["b_zero"], "y_zero": a["y_zero"], "left": a["left"],
        "qa": a["a_multiplier"], "ra": -a["a_shift"], "qb": a["b_multiplier"], "rb": -a["b_shift"],
        "q": a["multiplier"], "r": -a["shift"], "lo": a["lo"], "hi": a["hi"],
        "span": s.span(s.outs[0].size),
    }  # fmt: skip
    return Call("qadd", k, ("kernels/qadd.h",))
