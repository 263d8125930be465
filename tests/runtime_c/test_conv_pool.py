"""runtime_c/kernels/conv.h and pool.h against the graphdef numpy reference, through cffi.

One shared library holds a thin exported wrapper per kernel and dtype; each case fills the
geometry struct (cffi's copy of the header's typedef), runs the kernel on random data and
compares with ``gd.run`` of the same op. A second test builds a few cases into a standalone
program with ``static const`` geometries (as generated code passes them) under
AddressSanitizer and UndefinedBehaviorSanitizer.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import graphdef as gd
from graphdef.ops.windows import window_out

RUNTIME = Path(__file__).resolve().parents[2] / "runtime_c"
CC = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")  # as conftest.py picks it

FLOATS = ("float16", "float32", "float64")
INTS = ("int8", "uint8", "int32", "int64")
SFX = dict(zip(FLOATS + INTS, ("f16", "f32", "f64", "i8", "u8", "i32", "i64")))
TOL = {  # f16: both round one float32 sum; f32: the reference's einsum sums in another order
    "float16": {"rtol": 2e-3, "atol": 2e-3},
    "float32": {"rtol": 1e-5, "atol": 1e-5},
    "float64": {"rtol": 1e-12, "atol": 1e-12},
}
RNG = np.random.default_rng(0)

_CONV = "const void *x, const void *w, const void *b, void *y, const fc_conv_geom *g"
KERNELS = {  # kernel -> (wrapper parameters, dtypes)
    "conv": (_CONV, FLOATS),
    "conv_transpose": (_CONV, FLOATS),
    "max_pool": ("const void *x, void *y, const fc_pool_geom *g", FLOATS + INTS),
    "avg_pool": ("const void *x, void *y, const fc_pool_geom *g", FLOATS),
    "max_pool_grad": ("const void *x, const void *gy, void *gx, const fc_pool_geom *g", FLOATS),
    "avg_pool_grad": ("const void *gy, void *gx, const fc_pool_geom *g", FLOATS),
}
INCLUDES = '#include "kernels/conv.h"\n#include "kernels/pool.h"\n'


def _geometry_typedefs() -> str:
    """The geometry structs as the headers spell them, so cffi's layout cannot drift."""
    found = (
        re.search(r"typedef struct \{[^}]*\} fc_\w+_geom;", (RUNTIME / "kernels" / h).read_text())
        for h in ("conv.h", "pool.h")
    )
    return "\n".join(m.group(0) for m in found)


LAYOUT_PROBE = """size_t t_layout(int what) {
    size_t v[] = {sizeof(fc_conv_geom), offsetof(fc_conv_geom, dil),
                  sizeof(fc_pool_geom), offsetof(fc_pool_geom, count_include_pad)};
    return v[what];
}
"""


def _library() -> tuple[str, str]:
    """(cdef, C source): one exported wrapper per kernel and dtype, plus a layout probe."""
    decls, defs = ["size_t t_layout(int what);"], [LAYOUT_PROBE]
    for name, (params, dtypes) in KERNELS.items():
        args = ", ".join(p.split("*")[-1] for p in params.split(", "))
        for dt in dtypes:
            proto = f"void t_{name}_{SFX[dt]}({params})"
            decls.append(proto + ";")
            defs.append(f"{proto} {{ fc_{name}_{SFX[dt]}({args}); }}")
    return _geometry_typedefs() + "\n" + "\n".join(decls), INCLUDES + "\n".join(defs) + "\n"


@pytest.fixture(scope="module")
def lib(c_lib):
    return c_lib(*_library())


# ----------------------------------------------------------------------------- cases
@dataclass
class Case:
    """One kernel call: its inputs (None for an absent bias), geometry and expected output."""

    kernel: str
    dtype: str
    inputs: list
    geom_type: str
    geom: dict
    want: np.ndarray

    def sentinel(self) -> np.ndarray:
        """An output buffer full of junk, so that a value the kernel fails to write shows."""
        return np.full(self.want.nbytes, 0x5A, np.uint8).view(self.dtype).reshape(self.want.shape)


def rand(shape, dtype):
    if dtype in INTS:
        info = np.iinfo(dtype)
        return RNG.integers(info.min, info.max, shape, endpoint=True).astype(dtype)
    return RNG.uniform(-1.0, 1.0, shape).astype(dtype)


def ties(shape, dtype):
    """Few distinct values, so that windows hold several equal maxima."""
    return RNG.integers(-2, 3, shape).astype(dtype)


def reference(op, arrays, attrs):
    g = gd.Graph("ref")
    with g:
        xs = [gd.placeholder(f"in{i}", a.shape, a.dtype.name) for i, a in enumerate(arrays)]
        y = gd.apply(op, xs, **attrs)
    return gd.run(g, {f"in{i}": a for i, a in enumerate(arrays)}, [y])[0]


def lead(values, fill):
    """Spatial values for the kernels: always 3, with leading fills for unused axes."""
    return (fill,) * (3 - len(values)) + tuple(values)


def window_attrs(attrs, sp):
    """strides, pads (begins, ends), dilations with their defaults."""
    pads = attrs.get("pads", [0] * 2 * sp)
    return attrs.get("strides", [1] * sp), pads[:sp], pads[sp:], attrs.get("dilations", [1] * sp)


def conv_case(kernel, xs, ws, attrs, bias, dtype) -> Case:
    x, w = rand(xs, dtype), rand(ws, dtype)
    b = rand((ws[0] if kernel == "conv" else ws[1] * attrs.get("group", 1),), dtype) if bias else None
    want = reference(kernel, [a for a in (x, w, b) if a is not None], attrs)
    strides, pads, _, dils = window_attrs(attrs, len(xs) - 2)
    geom = {
        "n": xs[0],
        "c": xs[1],
        "m": want.shape[1],
        "group": attrs.get("group", 1),
        "in": lead(xs[2:], 1),
        "k": lead(ws[2:], 1),
        "out": lead(want.shape[2:], 1),
        "stride": lead(strides, 1),
        "pad": lead(pads, 0),
        "dil": lead(dils, 1),
    }
    return Case(kernel, dtype, [x, w, b], "fc_conv_geom", geom, want)


def pool_case(kernel, xs, attrs, dtype, count_include_pad=None) -> Case:
    sp = len(xs) - 2
    strides, pads, ends, dils = window_attrs(attrs, sp)
    k = attrs["kernel_shape"]
    ceil = attrs.get("ceil_mode", False)
    out = tuple(window_out(xs[2 + i], k[i], strides[i], pads[i], ends[i], dils[i], ceil) for i in range(sp))
    geom = {
        "planes": xs[0] * xs[1],
        "in": lead(xs[2:], 1),
        "k": lead(k, 1),
        "out": lead(out, 1),
        "stride": lead(strides, 1),
        "pad": lead(pads, 0),
        "pad_end": lead(ends, 0),
        "dil": lead(dils, 1),
        "count_include_pad": int(bool(count_include_pad)),
    }
    if count_include_pad is not None:
        attrs = {**attrs, "count_include_pad": count_include_pad}
    gy = rand(xs[:2] + out, dtype)
    inputs, ref_attrs = {
        "max_pool": ([rand(xs, dtype)], attrs),
        "avg_pool": ([rand(xs, dtype)], attrs),
        "max_pool_grad": ([ties(xs, dtype), gy], attrs),
        "avg_pool_grad": ([gy], {**attrs, "shape": xs}),
    }[kernel]
    return Case(kernel, dtype, inputs, "fc_pool_geom", geom, reference(kernel, inputs, ref_attrs))


def run_kernel(lib, case: Case) -> np.ndarray:
    ffi, clib = lib
    out = case.sentinel()
    args = [ffi.NULL if a is None else ffi.from_buffer(a) for a in case.inputs + [out]]
    getattr(clib, f"t_{case.kernel}_{SFX[case.dtype]}")(*args, ffi.new(f"{case.geom_type} *", case.geom))
    return out


def check(got, case: Case):
    assert got.shape == case.want.shape and got.dtype == case.want.dtype
    if case.dtype in INTS:
        np.testing.assert_array_equal(got, case.want)
    else:
        np.testing.assert_allclose(got.astype(np.float64), case.want.astype(np.float64), **TOL[case.dtype])


CONV_CASES = [  # x shape, w shape, attrs, bias
    ((2, 3, 9), (4, 3, 3), {"strides": [2], "pads": [1, 2]}, True),
    ((1, 2, 11), (3, 2, 4), {"dilations": [2], "pads": [0, 3]}, False),
    (
        (1, 4, 7, 6),
        (6, 2, 3, 2),
        {"strides": [2, 1], "pads": [1, 0, 2, 1], "dilations": [1, 2], "group": 2},
        True,
    ),
    ((2, 4, 5, 5), (4, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 4}, True),  # depthwise
    ((1, 3, 6, 5), (6, 1, 2, 3), {"strides": [2, 2], "group": 3}, False),  # depthwise, 2 per channel
    ((2, 5, 4, 4), (3, 5, 1, 1), {}, True),  # 1x1
    ((1, 2, 3, 3), (2, 2, 2, 2), {"pads": [3, 0, 1, 3]}, True),  # pads wider than the kernel
    (
        (1, 2, 4, 5, 6),
        (3, 2, 2, 3, 2),
        {"strides": [1, 2, 2], "pads": [1, 0, 1, 0, 1, 1], "dilations": [2, 1, 1]},
        True,
    ),
    ((2, 4, 3, 4, 3), (4, 2, 2, 2, 2), {"group": 2, "pads": [1] * 6}, False),
]

CONV_T_CASES = [  # x shape, w shape, attrs, bias
    ((2, 3, 5), (3, 2, 3), {"strides": [2], "pads": [1, 0]}, True),
    ((1, 2, 4), (2, 3, 2), {"strides": [3], "dilations": [2], "output_padding": [1]}, False),
    (
        (1, 4, 3, 4),
        (4, 3, 3, 2),
        {"strides": [2, 3], "pads": [1, 2, 0, 1], "dilations": [1, 2], "group": 2, "output_padding": [1, 0]},
        True,
    ),
    ((2, 3, 4, 4), (3, 1, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1], "group": 3}, False),  # depthwise
    ((1, 2, 4, 4), (2, 2, 1, 1), {"strides": [2, 2], "output_padding": [1, 1]}, True),  # unreached cells
    ((1, 1, 4), (1, 1, 3), {"pads": [2, 2]}, True),
    ((1, 2, 3, 2, 3), (2, 2, 2, 3, 2), {"strides": [2, 1, 2], "pads": [0, 1, 1, 1, 0, 0]}, True),
]

POOL_CASES = [  # x shape, attrs
    ((2, 3, 10), {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),
    ((1, 2, 9), {"kernel_shape": [2], "strides": [2], "ceil_mode": True}),  # last window past the end
    ((1, 2, 12), {"kernel_shape": [3], "dilations": [3], "pads": [2, 0]}),
    (
        (2, 3, 8, 9),
        {
            "kernel_shape": [3, 2],
            "strides": [2, 2],
            "pads": [1, 0, 1, 1],
            "dilations": [1, 2],
            "ceil_mode": True,
        },
    ),
    ((1, 2, 6, 6), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),  # overlapping windows
    ((1, 1, 6, 8), {"kernel_shape": [3, 3], "strides": [2, 3], "pads": [0, 2, 2, 0], "ceil_mode": True}),
    (
        (1, 2, 5, 6, 7),
        {
            "kernel_shape": [2, 3, 2],
            "strides": [2, 2, 3],
            "pads": [1, 1, 0, 0, 1, 1],
            "dilations": [2, 1, 1],
            "ceil_mode": True,
        },
    ),
]


# ----------------------------------------------------------------------------- tests
def test_geometry_layout_matches_cffi(lib):
    ffi, clib = lib
    assert [clib.t_layout(i) for i in range(4)] == [
        ffi.sizeof("fc_conv_geom"),
        ffi.offsetof("fc_conv_geom", "dil"),
        ffi.sizeof("fc_pool_geom"),
        ffi.offsetof("fc_pool_geom", "count_include_pad"),
    ]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(
    "kernel, case", [("conv", c) for c in CONV_CASES] + [("conv_transpose", c) for c in CONV_T_CASES]
)
def test_conv(lib, kernel, case, dtype):
    c = conv_case(kernel, *case, dtype)
    check(run_kernel(lib, c), c)


@pytest.mark.parametrize("case", POOL_CASES)
@pytest.mark.parametrize(
    "kernel, dtype, count_include_pad",
    [("max_pool", dt, None) for dt in FLOATS + INTS]
    + [("max_pool_grad", dt, None) for dt in FLOATS]
    + [(k, dt, cip) for k in ("avg_pool", "avg_pool_grad") for dt in FLOATS for cip in (False, True)],
)
def test_pool(lib, kernel, case, dtype, count_include_pad):
    c = pool_case(kernel, *case, dtype, count_include_pad)
    check(run_kernel(lib, c), c)


@pytest.mark.parametrize("dtype", ("float16", "float32"))
@pytest.mark.parametrize("kernel", ("max_pool", "max_pool_grad"))
def test_max_pool_nan_and_inf(lib, kernel, dtype):
    """NaN propagates as np.maximum does; -inf and NaN route gradients as the reference does."""
    c = pool_case(kernel, *POOL_CASES[4], dtype)
    x = c.inputs[0]
    x.flat[RNG.choice(x.size, 8, replace=False)] = [np.nan] * 4 + [-np.inf] * 4
    c.want = reference(kernel, c.inputs, POOL_CASES[4][1])
    assert np.isnan(c.want).any() == (kernel == "max_pool")
    check(run_kernel(lib, c), c)


def test_max_pool_grad_goes_to_the_first_maximum(lib):
    """Ties go to the earlier offset; a window that starts in a pad and whose cells are all
    -inf sends its gradient nowhere, as the reference (whose pads hold -inf) does."""
    attrs = {"kernel_shape": [2], "pads": [1, 0]}
    c = pool_case("max_pool_grad", (1, 1, 4), attrs, "float32")
    c.inputs[0][:] = [-np.inf, 3, 3, -np.inf]
    c.inputs[1][:] = [1, 2, 4, 8]
    c.want = reference("max_pool_grad", c.inputs, attrs)
    np.testing.assert_array_equal(c.want, [[[0, 2 + 4, 8, 0]]])
    check(run_kernel(lib, c), c)


SANITIZED_CASES = [
    lambda: conv_case("conv", *CONV_CASES[7], "float32"),
    lambda: conv_case("conv", *CONV_CASES[6], "float16"),
    lambda: conv_case("conv_transpose", *CONV_T_CASES[2], "float32"),
    lambda: conv_case("conv_transpose", *CONV_T_CASES[4], "float64"),
    lambda: pool_case("max_pool", *POOL_CASES[6], "int8"),
    lambda: pool_case("avg_pool", *POOL_CASES[3], "float16", True),
    lambda: pool_case("max_pool_grad", *POOL_CASES[5], "float32"),
    lambda: pool_case("avg_pool_grad", *POOL_CASES[6], "float64", True),
]


SANITIZED_FRAME = """#include <stdio.h>
#include <stdlib.h>
%s
/* The next n bytes of stdin, in a heap buffer of exactly n bytes (so ASan sees overruns). */
static void *take(size_t n) {
    void *p = malloc(n);
    if (p == NULL || fread(p, 1, n, stdin) != n)
        exit(2);
    return p;
}

int main(void) {
    int i;
%s    return 0;
}
"""

SANITIZED_CASE = """    {
        static const %(geom_type)s g = {%(geom)s};
        void *a[] = {%(takes)s};
        %(fn)s(%(args)s, &g);
        fwrite(a[%(last)d], 1, %(nbytes)d, stdout);
        for (i = 0; i <= %(last)d; i++)
            free(a[i]);
    }
"""


def sanitized_program(cases) -> str:
    """main() runs each case with a static const geometry (as generated code does) on buffers
    read from stdin (the inputs, then the output's junk) and writes each output to stdout."""

    def init(v):
        return "{" + ", ".join(map(str, v)) + "}" if isinstance(v, tuple) else str(v)

    blocks = []
    for c in cases:
        bufs = c.inputs + [c.want]
        blocks.append(
            SANITIZED_CASE
            % {
                "geom_type": c.geom_type,
                "geom": ", ".join(f".{k} = {init(v)}" for k, v in c.geom.items()),
                "takes": ", ".join("NULL" if a is None else f"take({a.nbytes})" for a in bufs),
                "fn": f"fc_{c.kernel}_{SFX[c.dtype]}",
                "args": ", ".join(f"a[{i}]" for i in range(len(bufs))),
                "last": len(bufs) - 1,
                "nbytes": c.want.nbytes,
            }
        )
    return SANITIZED_FRAME % (INCLUDES, "".join(blocks))


def test_sanitizers(tmp_path):
    flags = ["-std=c99", "-O1", "-g1", "-Wall", "-Wextra", "-Werror", "-fno-omit-frame-pointer"]
    flags += ["-fsanitize=address,undefined", "-fno-sanitize-recover=all"]
    probe = tmp_path / "probe.c"
    probe.write_text("int main(void) { return 0; }\n")
    built = subprocess.run([CC, *flags, str(probe), "-o", str(tmp_path / "probe")], capture_output=True)
    if built.returncode or subprocess.run([str(tmp_path / "probe")], capture_output=True).returncode:
        pytest.skip(f"{CC} cannot build or run programs with -fsanitize=address,undefined")
    cases = [make() for make in SANITIZED_CASES]
    src, exe = tmp_path / "sanitized.c", tmp_path / "sanitized"
    src.write_text(sanitized_program(cases))
    build = subprocess.run(
        [CC, *flags, f"-I{RUNTIME}", str(src), "-o", str(exe), "-lm"], capture_output=True, text=True
    )
    assert build.returncode == 0, build.stderr[:4000]
    feed = b"".join(a.tobytes() for c in cases for a in c.inputs + [c.sentinel()] if a is not None)
    env = {
        **os.environ,
        "ASAN_OPTIONS": "detect_leaks=0",
        "UBSAN_OPTIONS": "print_stacktrace=1",
    }
    res = subprocess.run([str(exe)], input=feed, capture_output=True, env=env, timeout=60)
    assert res.returncode == 0 and not res.stderr, res.stderr.decode(errors="replace")[:4000]
    at = 0
    for c in cases:
        got = np.frombuffer(res.stdout[at : at + c.want.nbytes], c.dtype).reshape(c.want.shape)
        at += c.want.nbytes
        check(got, c)
    assert at == len(res.stdout)
