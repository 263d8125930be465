"""Safe C spellings for untrusted strings: identifiers, string literals, comments, numbers.

Names in model files are untrusted: they reach generated C only through these functions.
"""

from __future__ import annotations

import math
import re

import numpy as np

C_KEYWORDS = frozenset(
    "auto break case char const continue default do double else enum extern float for goto if inline "
    "int long register restrict return short signed sizeof static struct switch typedef union "
    "unsigned void volatile while _Bool _Complex _Imaginary asm".split()
)

STORAGE = {
    "float16": "fc_f16",
    "float32": "float",
    "float64": "double",
    "int8": "int8_t",
    "uint8": "uint8_t",
    "int16": "int16_t",
    "uint16": "uint16_t",
    "int32": "int32_t",
    "uint32": "uint32_t",
    "int64": "int64_t",
    "uint64": "uint64_t",
    "bool": "fc_bool",
}
COMPUTE = {**STORAGE, "float16": "float"}
# the type suffix of runtime_c kernels (fc_add_f32, fc_gather_i64, ...)
SUFFIX = {
    "float16": "f16",
    "float32": "f32",
    "float64": "f64",
    "int8": "i8",
    "uint8": "u8",
    "int16": "i16",
    "uint16": "u16",
    "int32": "i32",
    "uint32": "u32",
    "int64": "i64",
    "uint64": "u64",
    "bool": "b",
}
# types in the public header, which must not need flowc_rt.h (same representation)
PUBLIC = {**STORAGE, "float16": "uint16_t", "bool": "uint8_t"}


class Names:
    """Allocates unique C identifiers from untrusted names."""

    def __init__(self, reserved=()):
        self.used = set(C_KEYWORDS) | set(reserved)

    def __call__(self, text: str, prefix: str = "v") -> str:
        base = re.sub(r"[^A-Za-z0-9_]", "_", str(text))[:48].strip("_") or prefix
        if base[0].isdigit() or base.startswith("fc_") or base.startswith("__"):
            base = f"{prefix}_{base}"
        name, k = base, 1
        while name in self.used or name.lower() in self.used:
            k += 1
            name = f"{base}_{k}"
        self.used.add(name)
        self.used.add(name.lower())
        return name


def c_string(text: str) -> str:
    """A C string literal holding ``text`` (UTF-8), every unusual byte octal-escaped."""
    out = []
    for b in str(text).encode("utf-8"):
        ch = chr(b)
        if ch in '"\\?':
            out.append("\\" + ch)
        elif 32 <= b < 127:
            out.append(ch)
        else:
            out.append(f"\\{b:03o}")
    return '"' + "".join(out) + '"'


def c_comment(text: str, limit: int = 80) -> str:
    """Text safe inside /* */: printable ASCII only, no comment terminators."""
    text = "".join(ch if 32 <= ord(ch) < 127 else "?" for ch in str(text))[:limit]
    return text.replace("*/", "* /").replace("/*", "/ *").replace("\\", "/")


def c_literal(value, dtype: str) -> str:
    """``value`` as a C literal of ``dtype``'s compute type (float16 computes in float)."""
    if dtype == "bool":
        return "1" if value else "0"
    if dtype in ("float16", "float32", "float64"):
        v = float(value)
        single = dtype != "float64"
        if math.isnan(v):
            return "NAN" if single else "((double)NAN)"
        if math.isinf(v):
            inf = "HUGE_VALF" if single else "HUGE_VAL"
            return inf if v > 0 else f"(-{inf})"
        if dtype == "float16":
            v = float(np.float16(v))
        text = str(np.float32(v)) if single else repr(v)
        if "e" not in text and "." not in text:
            text += ".0"
        return text + ("f" if single else "")
    v = int(value)
    if dtype == "int64":
        return "INT64_MIN" if v == -(2**63) else f"INT64_C({v})"
    if dtype == "int32" and v == -(2**31):
        return "INT32_MIN"
    if dtype in ("uint32", "uint64"):
        return f"UINT{dtype[4:]}_C({v})"
    return str(v)
