"""Cross-compiled outputs: Linux binaries under qemu-user, Cortex-M libraries, firmware under
qemu-system-arm, footprints, and the errors for unknown arches, missing tools and limits.

Tests that need a cross compiler or qemu carry the ``cross`` marker and skip, naming the
Debian package, when it is missing; the bad-input tests need none.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import codegen
import graphdef as gd
from codegen.backends.c import mcu
from codegen.backends.c import toolchain as build
from codegen.target import ARCHES, Target
from graphdef.errors import FlowcError, ToolchainError

ROOT = Path(__file__).resolve().parents[2]
LINUX = [a for a, s in ARCHES.items() if s.kind == "linux"]
MCUS = [a for a, s in ARCHES.items() if s.kind == "mcu"]
TOL = {"rtol": 1e-5, "atol": 1e-6}


def _sample(name: str):
    spec = importlib.util.spec_from_file_location(f"sample_{name}", ROOT / "samples" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def need(arch: str, run: bool = True) -> Target:
    """The target, or skip naming the Debian packages of its missing compiler or emulator."""
    target = Target(arch)
    spec = target.spec
    if not shutil.which(target.compiler):
        pytest.skip(f"{target.compiler} missing (apt-get install {' '.join(spec.packages)})")
    if run and not shutil.which(spec.qemu):
        pytest.skip(f"{spec.qemu} missing (apt-get install {spec.qemu_package})")
    return target


@pytest.fixture(scope="module")
def models():
    """(name, graph, feeds): the digits MLP (untrained weights, batch 4) and LeNet-5."""
    digits, lenet = _sample("digits"), _sample("lenet")
    rng = np.random.default_rng(5)
    return [
        ("digits", digits.build(batch=4, weights=digits._params(1)), {"x": rng.random((4, 64), np.float32)}),
        ("lenet", lenet.build(), {"x": rng.standard_normal((1, 1, 28, 28)).astype(np.float32)}),
    ]


def run_binary(runner: list[str], binary: Path, feeds: dict, work: Path) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    args = [*runner, str(binary)]
    for name, value in feeds.items():
        np.save(work / f"{name}.npy", value)
        args += ["--in", f"{name}={work / f'{name}.npy'}"]
    res = subprocess.run(args + ["--out-dir", str(work / "res")], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    meta = json.loads((binary.parent / "metadata.json").read_text())
    return {t["name"]: np.load(work / "res" / t["file"]) for t in meta["outputs"]}


@pytest.fixture(scope="module")
def host_results(models, tmp_path_factory):
    """Each model's outputs from the host binary (checked against the interpreter)."""
    out = {}
    for name, g, feeds in models:
        work = tmp_path_factory.mktemp(f"host-{name}")
        folder = codegen.export(g, work / "out", name=name, portable=True)
        out[name] = run_binary([], folder / name, feeds, work)
        want = gd.run(g, feeds, list(out[name]))
        for got, w in zip(out[name].values(), want):
            np.testing.assert_allclose(got, w, **TOL)
    return out


# ----------------------------------------------------------------------------- Linux arches
@pytest.mark.cross
@pytest.mark.parametrize("arch", LINUX)
def test_linux_binaries_run_under_qemu_like_the_host(arch, models, host_results, tmp_path):
    target = need(arch)
    for name, g, feeds in models:
        folder = codegen.export(g, tmp_path / name, name=name, arch=arch)
        binary = folder / name
        head = binary.read_bytes()[:20]
        assert head[:4] == b"\x7fELF" and head[18] in (0x28, 0xB7, 0xF3)  # EM_ARM, EM_AARCH64, EM_RISCV
        got = run_binary(target.runner(), binary, feeds, tmp_path / f"run-{name}")
        for out, value in got.items():
            np.testing.assert_allclose(value, host_results[name][out], err_msg=f"{arch} {name} {out}", **TOL)
        assert "-static" in (folder / "Makefile").read_text()


@pytest.mark.cross
def test_aarch64_uses_the_neon_gemm(models, tmp_path):
    target = need("aarch64-linux", run=False)
    cc = build.find_cc(None, target)
    assert build.isa(target, cc) == "aarch64"
    name, g, _ = models[0]
    folder = codegen.export(g, tmp_path / "out", name=name, arch="aarch64-linux")
    assert ".mr = 8, .nr = 12" in (folder / f"{name}.c").read_text()  # the aarch64 NEON tile
    dis = subprocess.run(
        ["aarch64-linux-gnu-objdump", "-d", str(folder / name)], capture_output=True, text=True
    ).stdout
    assert "fmla\tv" in dis  # vector fused multiply-adds


@pytest.mark.cross
@pytest.mark.parametrize("arch", LINUX + MCUS)
def test_integer_convolutions_give_numpys_results_on_the_arch(arch, tmp_path):
    """Every ``qconv`` example (fixed-point and float multipliers, depthwise, strided, dilated,
    uint8, dense layers) in one model, built for the arch and run under QEMU: numpy's integers
    exactly (the kernel's portable forms: NEON vectors on Arm, sdot where the core has the
    dot-product extension, smlad on Cortex-M4/M7, Helium's vmladav on Cortex-M55, plain C on
    RISC-V and the Cortex-M0+)."""
    from graphdef.examples import examples_graph

    target = need(arch)
    g, feeds, names = examples_graph("qconv")
    folder = codegen.export(g, tmp_path / "q", name="q", outputs=names, arch=arch)
    if target.spec.kind == "mcu":
        run = mcu.run_firmware(folder, feeds)
        got = run["outputs"]
        assert run["instructions"] > 0  # counted under -icount (the benchmark's figure)
    else:
        got = run_binary(target.runner(), folder / "q", feeds, tmp_path / "run")
    for name, want in zip(names, gd.Session(g).run(feeds, names)):
        np.testing.assert_array_equal(got[name], want, err_msg=f"{arch} {name}")
    objdump = shutil.which(f"{target.spec.prefix}objdump")
    if arch == "cortex-a76-linux" and objdump:  # the dot-product form ran on sdot
        asm = subprocess.run([objdump, "-d", str(folder / "q")], capture_output=True, text=True).stdout
        assert re.search(r"\tsdot\t", asm)
    if arch in ("cortex-m4", "cortex-m7") and objdump:  # the column and row forms on smlad
        asm = subprocess.run(
            [objdump, "-d", str(folder / "build" / "firmware.elf")], capture_output=True, text=True
        ).stdout
        assert re.search(r"\tsmlad\t", asm) and re.search(r"\tsxtb16\t", asm)


def _constant_weight_qconvs():
    """A graph of every ``qconv`` example with its weights and bias as constants (as a model
    file has them), x fed: (graph, feeds, output names)."""
    from graphdef.examples import inputs
    from graphdef.registry import get_op

    g, feeds, names = gd.Graph("qconv_constant_weights"), {}, []
    with g:
        for i, ex in enumerate(get_op("qconv").examples):
            arrays = inputs("qconv", i)
            x = gd.placeholder(f"x{i}", arrays[0].shape, str(arrays[0].dtype))
            feeds[x.ref.node] = arrays[0]
            consts = [gd.constant(a) for a in arrays[1:]]
            names.append(str(gd.apply("qconv", [x, *consts], None, **dict(ex.attrs)).ref))
        g.set_outputs(*names)
    return g, feeds, names


@pytest.mark.cross
def test_channels_last_forms_on_helium(tmp_path):
    """On the Cortex-M55 a convolution with constant weights that suits a channels-last form
    gets its weights laid out at compile time: a dense one whose kernel rows hold at least 8
    bytes (kw * C) runs in the channel-rows form (fc_qconv_rows: input rows channels-last, a
    window's kernel row read in place, 16 k a vmladava), a depthwise one of at least 4 channels
    in fc_qconv_dwrows (four channels in the vector lanes). numpy's integers for every example
    (int8 and uint8, fixed-point and float multipliers, 1 x 1 and 3 x 3, strided, padded, kernel
    rows of 16 k multiples and not, two images), each form taken by those that suit it."""
    from codegen.backends.c.quant_lowering import layout_for

    need("cortex-m55")
    g, feeds, names = _constant_weight_qconvs()
    frozen = g.freeze()
    layouts = [layout_for(n, frozen) for n in frozen.nodes if n.op == "qconv"]
    assert layouts.count("ohwi") >= 4 and layouts.count("hwo") >= 2, layouts
    folder = codegen.export(g, tmp_path / "r", name="r", outputs=names, arch="cortex-m55")
    src = (folder / "r.c").read_text()
    assert src.count("fc_qconv_rows_") == layouts.count("ohwi"), src.count("fc_qconv_rows_")
    assert src.count("fc_qconv_dwrows_") == layouts.count("hwo"), src.count("fc_qconv_dwrows_")
    got = mcu.run_firmware(folder, feeds)["outputs"]
    for name, want in zip(names, gd.Session(g).run(feeds, names)):
        np.testing.assert_array_equal(got[name], want, err_msg=name)


@pytest.mark.cross
@pytest.mark.parametrize("arch", ["cortex-m0plus", "cortex-m4"])
@pytest.mark.parametrize("op", ["floor", "ceil", "round"])
def test_rounding_without_libm_on_the_board(op, arch, tmp_path):
    """floor, ceil and round (a quantization's rounding) on the cores without a rounding
    instruction: by conversions (kernels/scalar_float.inc fc_floor_cvt), no libm call, numpy's
    results on the board for the halves, signed zeros, values past 2**23, infinities and NaN of
    float32, float64 and float16."""
    from graphdef.examples import examples_graph

    need(arch)
    g, feeds, names = examples_graph(op)
    folder = codegen.export(g, tmp_path / "r", name="r", outputs=names, arch=arch)
    meta = json.loads((folder / "metadata.json").read_text())
    assert not {"floorf", "floor", "ceilf", "ceil"} & set(meta["footprint"]["imports"])
    got = mcu.run_firmware(folder, feeds)["outputs"]
    for name, want in zip(names, gd.Session(g).run(feeds, names)):
        np.testing.assert_array_equal(got[name], want, err_msg=f"{arch} {op} {name}")
        assert np.array_equal(np.signbit(got[name]), np.signbit(want)), (arch, op, name)


@pytest.mark.cross
@pytest.mark.parametrize("arch", MCUS)
def test_integer_convolution_scratch_on_the_microcontrollers(arch, tmp_path, qconv_scratch_program):
    """On each microcontroller (the column and row forms where the core has the DSP extension,
    the column form on Helium's vectors where it has MVE, plain C elsewhere) the scratch the
    lowering gives each ``qconv`` example is the kernel's own count, printed by a firmware on
    the emulated board."""
    from codegen.backends.c import emit
    from codegen.backends.c.ops.quant import int8_features

    target = need(arch)
    features = int8_features(build.macros(target, target.compiler, ()))
    assert features == {"cortex-m4": "dsp", "cortex-m7": "dsp", "cortex-m55": "dsp+mve"}.get(arch, "plain"), (
        features
    )
    program, want = qconv_scratch_program(features, "{ char b[24]; int i = 22; b[23] = 0; b[22] = '\\n';"
                                          " do { b[--i] = (char)('0' + s % 10); s /= 10; } while (s);"
                                          " fc_sh_write(b + i); }")  # fmt: skip
    (tmp_path / "s.c").write_text('#include "semihost.h"\n' + program)
    runtime = ROOT / "runtime_c"
    ld = [
        str(ROOT / "runtime_c" / f[len("runtime/") :]) if f.endswith(".ld") else f
        for f in emit.firmware_ldflags(target)
    ]
    cmd = [target.compiler, "-std=c99", *target.cflags(), f"-I{runtime}", f"-I{runtime / 'mcu'}", *ld, "s.c",
           str(runtime / "mcu" / "startup.c"), "-o", "s.elf", "-lm"]  # fmt: skip
    subprocess.run(cmd, cwd=tmp_path, check=True, capture_output=True)
    qemu = [target.spec.qemu, "-M", target.spec.board, "-nographic", "-monitor", "none",
            "-semihosting-config", "enable=on,target=native", "-kernel", str(tmp_path / "s.elf")]  # fmt: skip
    run = subprocess.run(qemu, capture_output=True, text=True, timeout=120)
    got = [int(v) for v in (run.stdout + run.stderr).split() if v.isdigit()]
    assert got == want, (arch, features, got, want)


@pytest.mark.cross
@pytest.mark.parametrize("arch", LINUX + MCUS)
def test_every_op_compiles_warning_free_for_the_arch(arch, zoo, tmp_path):
    """The all-ops graph through the arch's compiler with -std=c99 -Wall -Wextra -Werror
    (32-bit arches catch size_t/int64 and promotion warnings); MCU code imports no malloc,
    stdio or OS call."""
    target = need(arch, run=False)
    folder = codegen.export(zoo, tmp_path / "zoo", name="zoo", arch=arch, build_binary=False)
    cc = build.find_cc(None, target)
    build.run(
        [cc, *build.STRICT, *target.cflags(), "-I.", "-Iruntime", "-c", "zoo.c", "-o", "zoo.o"], cwd=folder
    )
    if target.kind == "mcu":
        nm = subprocess.run([target.tool("nm"), "-u", "zoo.o"], cwd=folder, capture_output=True, text=True)
        imported = {ln.split()[-1] for ln in nm.stdout.splitlines() if ln.strip()}
        assert not imported & mcu.FORBIDDEN, imported & mcu.FORBIDDEN


# ----------------------------------------------------------------------------- microcontrollers
@pytest.mark.cross
@pytest.mark.parametrize("arch", MCUS)
def test_mcu_library_runs_on_the_emulated_board(arch, models, tmp_path):
    need(arch)
    for name, g, feeds in models if arch == "cortex-m4" else models[:1]:
        folder = codegen.export(g, tmp_path / name, name=name, arch=arch)
        assert (folder / "build" / f"lib{name}.a").is_file() and (folder / f"{name}.h").is_file()
        products = {p.name for p in folder.iterdir() if p.suffix in (".o", ".a", ".elf", ".map")}
        assert not products, products  # build products only in build/
        assert not (folder / "main.c").exists() and not (folder / "runtime" / "npy.c").exists()
        meta = json.loads((folder / "metadata.json").read_text())
        fp = meta["footprint"]
        assert not set(fp["imports"]) & mcu.FORBIDDEN
        assert fp["arena"] <= 1.05 * fp["arena_lower_bound"]
        assert fp["glue"] + fp["glue_unused"] <= 2048
        assert fp["flash"] == fp["code"] + fp["weights"] >= fp["weights"] >= meta["weight_bytes"]
        assert fp["ram"] >= fp["arena"] + fp["stack"] and 0 < fp["stack"] < 4096
        run = mcu.run_firmware(folder, feeds)
        want = gd.run(g, feeds, list(run["outputs"]))
        for (out, value), w in zip(run["outputs"].items(), want):
            np.testing.assert_allclose(value, w, err_msg=f"{arch} {name} {out}", **TOL)
        assert 0 < run["stack"] <= fp["stack"]  # measured on the board <= the static bound


def _tiny_float_net():
    """The float op families of the MLPerf Tiny models, small (2.4 MFLOP: above the products'
    threshold, codegen/backends/c MCU_GEMM_FLOPS): a strided 3x3 stem, a depthwise 3x3, a 1x1
    and a 3x3 convolution each with its ReLU, a residual add, the global pool, a dense layer
    and a softmax."""
    rng = np.random.default_rng(21)

    def w(*shape):
        return (rng.standard_normal(shape) * (2.0 / np.prod(shape[1:])) ** 0.5).astype(np.float32)

    g = gd.Graph("tinyf")
    with g:
        x = gd.placeholder("x", (1, 3, 48, 40))
        h = gd.relu(gd.conv2d(x, w(8, 3, 3, 3), w(8) * 0.1, stride=2, padding=1))
        d = gd.relu(gd.conv2d(h, w(8, 1, 3, 3), w(8) * 0.1, padding=1, groups=8))
        p = gd.relu(gd.conv2d(d, w(16, 8, 1, 1), w(16) * 0.1))
        c = gd.relu(gd.add(gd.conv2d(p, w(16, 16, 3, 3), w(16) * 0.1, padding=1), p))
        f = gd.reshape(gd.global_avg_pool(c), (1, 16))
        gd.softmax(gd.gemm(f, w(16, 5), w(5) * 0.1), name="y")
    return g


@pytest.mark.cross
@pytest.mark.parametrize("arch", ["cortex-m4", "cortex-m55"])
def test_float_products_on_the_microcontrollers(arch, tmp_path):
    """On a Cortex-M with an FPU, float convolutions and dense layers run on the packed GEMM's
    scalar 4 x 4 tile with their ReLU (and the residual add) fused, depthwise ones on their own
    kernel with theirs: no ReLU step of its own. The library imports no double-precision or
    software-float routine (``__aeabi_d*``, ``__aeabi_f*``) and the outputs on the board are the
    interpreter's to float32 rounding."""
    from codegen import pipeline

    target = need(arch)
    g = _tiny_float_net()
    steps = pipeline.run(g, pipeline.Options(target=target), until="plan").program.steps
    ops = [n.op for n in steps]
    assert "relu" not in ops and "conv" not in ops and ops.count("conv_gemm") == 3, ops
    folder = codegen.export(g, tmp_path / "tinyf", name="tinyf", arch=arch)
    fp = json.loads((folder / "metadata.json").read_text())["footprint"]
    assert not [f for f in fp["imports"] if f.startswith(("__aeabi_d", "__aeabi_f"))], fp["imports"]
    feeds = {"x": np.random.default_rng(2).standard_normal((1, 3, 48, 40)).astype(np.float32)}
    run = mcu.run_firmware(folder, feeds)
    (want,) = gd.run(g, feeds, ["y"])
    np.testing.assert_allclose(run["outputs"]["y"], want, rtol=1e-5, atol=1e-6)


@pytest.mark.cross
def test_step_profile_and_time_model_on_the_board(tmp_path, capsys):
    """``run_firmware(profile=True)`` counts each step's instructions on the board (as many as
    the plan has steps, adding up to the run's count but for the clock's reads), and the time
    model (codegen/backends/c/mcu_time.py, fitted to the MLPerf Tiny models) predicts a model
    it never saw to 20% (measured: 3.6% on the Cortex-M4); ``flowc inspect --arch cortex-m4``
    prints its per-step predictions instead of the host's microseconds."""
    from codegen import pipeline
    from codegen.backends.c import mcu_time
    from codegen.cli import main

    target = need("cortex-m4")
    g = _tiny_float_net()
    program = pipeline.run(g, pipeline.Options(target=target), until="plan").program
    macros = build.macros(target, build.find_cc(None, target))
    predicted = sum(mcu_time.predict(n, program.graph, "cortex-m4", macros) for n in program.steps)
    folder = codegen.export(g, tmp_path / "tinyf", name="tinyf", arch="cortex-m4")
    feeds = {"x": np.random.default_rng(2).standard_normal((1, 3, 48, 40)).astype(np.float32)}
    run = mcu.run_firmware(folder, feeds, profile=True)
    assert len(run["steps"]) == len(program.steps) and all(n > 0 for n in run["steps"]), run["steps"]
    assert abs(sum(run["steps"]) - run["instructions"]) <= 0.01 * run["instructions"]
    assert abs(predicted / run["instructions"] - 1) <= 0.2, (predicted, run["instructions"])
    path = tmp_path / "tinyf.flowc"
    gd.save(g, path)
    assert main(["inspect", str(path), "--arch", "cortex-m4"]) == 0
    out = capsys.readouterr().out
    assert f"predicted instructions on cortex-m4: {predicted:,}" in out and "ASAP us" not in out, out


@pytest.mark.cross
def test_mcu_trains_the_output_layer_on_the_board(tmp_path):
    """On-device fine-tuning: the digits classifier's output layer (samples/digits.py's
    last_layer_training_graph, an SGD step in state) built for a Cortex-M4 and stepped 20 times
    on the emulated board; its last loss is the interpreter's 20th, and the footprint counts
    the state (weights, plus the variables trained)."""
    need("cortex-m4")
    digits = _sample("digits")
    g = digits.last_layer_training_graph(digits._params(1), batch=6)
    rng = np.random.default_rng(2)
    feeds = {"x": rng.random((6, 64), np.float32), "labels": rng.integers(0, 10, 6)}
    folder = codegen.export(
        g, tmp_path / "m4", name="digits", arch="cortex-m4", outputs=["loss"], train="train"
    )
    meta = json.loads((folder / "metadata.json").read_text())
    fp = meta["footprint"]
    assert fp["state"] == meta["state_bytes"] >= 4 * (32 * 10 + 10) + 8  # w2, b2 and global_step, aligned
    assert fp["ram"] >= fp["arena"] + fp["state"] + fp["stack"]
    run = mcu.run_firmware(folder, feeds, runs=20)
    sess = gd.Session(g)
    want = [float(sess.run(feeds, ["train"])[0]) for _ in range(20)]
    assert want[-1] < 0.5 * want[0]  # it trains
    np.testing.assert_allclose(float(run["outputs"]["loss"]), want[-1], rtol=1e-5)


@pytest.mark.cross
def test_mcu_weights_are_in_flash_and_the_makefile_rebuilds(models, tmp_path):
    need("cortex-m4", run=False)
    for name, g, _ in models:  # digits: C arrays; lenet (> 64 KiB): the .incbin blob
        folder = codegen.export(g, tmp_path / name, name=name, arch="cortex-m4")
        placed = mcu.parse_map((folder / "build" / "firmware.map").read_text())
        weights = [s for s in placed if mcu.classify(s, name) == "weights" and s.output in mcu.FLASH_OUTPUTS]
        assert weights and {s.output for s in weights} == {".rodata"}  # read-only: flash, not RAM
        res = subprocess.run(["make", "-s", "clean"], cwd=folder, capture_output=True, text=True)
        assert res.returncode == 0 and not (folder / "build").exists(), res.stderr
        res = subprocess.run(["make", "-s", "lib", "firmware"], cwd=folder, capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
        made = sorted(p.name for p in (folder / "build").iterdir())
        assert "firmware.elf" in made and "firmware.map" in made and f"lib{name}.a" in made, made
        products = {p.name for p in folder.iterdir() if p.suffix in (".o", ".a", ".elf", ".map")}
        assert not products, products


@pytest.mark.cross
def test_cli_prints_the_footprint_and_refuses_what_does_not_fit(tmp_path):
    need("cortex-m4", run=False)
    lenet = f"{ROOT / 'samples' / 'lenet.py'}:build"
    res = flowc("compile", lenet, "-o", tmp_path / "out", "--name", "net", "--arch", "cortex-m4")
    assert res.returncode == 0, res.stderr
    assert "flash:" in res.stdout and "RAM: arena" in res.stdout and "glue" in res.stdout
    fp = json.loads((tmp_path / "out" / "metadata.json").read_text())["footprint"]
    # fits the arena alone but not arena + stack: refused after linking, nothing written
    limit = fp["arena"] + fp["data"] + fp["stack"] // 2
    res = flowc(
        "compile", lenet, "-o", tmp_path / "o2", "--name", "net", "--arch", "cortex-m4", "--max-ram", limit
    )
    assert res.returncode == 1 and len(res.stderr.strip().splitlines()) == 1
    assert f"max-ram {limit} B" in res.stderr and f"stack {fp['stack']} B" in res.stderr
    assert not (tmp_path / "o2").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    res = flowc("compile", lenet, "-o", tmp_path / "o3", "--name", "net", "--arch", "cortex-m4",
                "--max-flash", fp["flash"] - 1)  # fmt: skip
    assert res.returncode == 1 and f"code {fp['code']} B" in res.stderr and not (tmp_path / "o3").exists()


# ----------------------------------------------------------------------------- bad input
def flowc(*args, env=None):
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "codegen.cli", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
    )


def _tiny():
    with gd.Graph("tiny") as g:
        gd.relu(gd.placeholder("x", (8,)) - gd.constant(np.ones(8, np.float32)), name="y")
    return g


def test_unknown_arch_lists_the_known_ones(tmp_path):
    with pytest.raises(FlowcError, match="unknown or unsupported arch 'mips'.*aarch64-linux.*cortex-m4"):
        codegen.export(_tiny(), tmp_path / "o", arch="mips")
    res = flowc("compile", "samples/lenet.py:build", "-o", tmp_path / "o", "--arch", "x86-windows")
    assert res.returncode == 1 and res.stderr.count("\n") == 1 and "unsupported arch" in res.stderr


def test_microcontrollers_run_single_threaded():
    with pytest.raises(FlowcError, match="single-threaded"):
        Target("cortex-m4", threads=2)


@pytest.mark.parametrize(
    "arch, package", [("aarch64-linux", "gcc-aarch64-linux-gnu"), ("cortex-m4", "gcc-arm-none-eabi")]
)
def test_missing_cross_compiler_names_the_package(arch, package, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on it
    with pytest.raises(ToolchainError, match=f"apt-get install {package}"):
        codegen.export(_tiny(), tmp_path / "o", arch=arch)
    assert not (tmp_path / "o").exists()
    res = flowc(
        "compile", "samples/lenet.py:build", "-o", tmp_path / "o", "--arch", arch, env={"PATH": str(tmp_path)}
    )
    assert res.returncode == 1 and res.stderr.count("\n") == 1 and package in res.stderr


def test_missing_qemu_names_the_package(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolchainError, match="apt-get install qemu-user"):
        Target("riscv64-linux").runner()


@pytest.mark.c
def test_limits_refuse_before_building_and_write_nothing(tmp_path):
    g = _tiny()  # 32 B of weights, a 64 B arena at most
    with pytest.raises(
        FlowcError, match=r"does not fit max-flash 16 B on host: it needs 32 B \(weights 32 B\)"
    ):
        codegen.export(g, tmp_path / "o", max_flash=16)
    with pytest.raises(FlowcError, match="max-ram"):
        codegen.export(_sample("lenet").build(), tmp_path / "o", max_ram="16K")
    with pytest.raises(FlowcError, match="expects bytes"):
        codegen.export(g, tmp_path / "o", max_ram="lots")
    assert list(tmp_path.iterdir()) == []
    assert codegen.export(g, tmp_path / "o", max_flash="1K", max_ram="1KiB").is_dir()
    res = flowc("compile", "samples/lenet.py:build", "-o", tmp_path / "p", "--max-flash", "100K")
    assert res.returncode == 1 and res.stderr.count("\n") == 1 and "max-flash 102400 B" in res.stderr
    assert not (tmp_path / "p").exists()


# ----------------------------------------------------------------------------- analysis alone
DISASSEMBLY = """
00000100 <f_run>:
 100:	push	{r4, r5, r6, lr}
 102:	vpush	{d8-d9}
 106:	sub	sp, #16
 108:	bl	200 <step_a>
 10c:	bl	300 <step_b>
 110:	b.w	400 <leaf>
 114:	bne.n	108 <f_run+0x8>

00000200 <step_a>:
 200:	push.w	{r4, r5, r6, r7, r8, r9, sl, fp, lr}
 204:	sub.w	sp, sp, #1024
 208:	bl	400 <leaf>

00000300 <step_b>:
 300:	str.w	lr, [sp, #-4]!
 304:	blx	r3

00000400 <leaf>:
 400:	sub	sp, #8
"""


def test_stack_bound_follows_the_call_graph():
    """Frames and callees by the branches' addresses: a call past 64 KiB of code that objdump
    labels with the linker's absolute STACK_SIZE symbol is still the function at that address."""
    far = DISASSEMBLY.replace("bl\t400 <leaf>", "bl\t400 <STACK_SIZE+0x400>")
    assert mcu.stack_bound(far, "step_a") == (36 + 1024 + 8, True)
    frames = mcu.frames(DISASSEMBLY)
    assert frames["f_run"] == (16 + 16 + 16, {"step_a", "step_b", "leaf"}, False)
    assert frames["step_a"][0] == 36 + 1024 and frames["step_b"] == (4, set(), True)
    assert mcu.stack_bound(DISASSEMBLY, "step_a") == (36 + 1024 + 8, True)
    assert mcu.stack_bound(DISASSEMBLY, "f_run") == (48 + 1060 + 8, False)  # step_b calls a pointer


MAP = """
Discarded input sections

 .text.net_status_string
                0x00000000       0x5c libnet.a(net.o)

Memory Configuration

Linker script and memory map

.text           0x00000040      0x6e4
 *(.text .text.*)
 .text.startup.main
                0x00000040       0x8c /tmp/cc1.o
 .text.net_run  0x00000168      0x16c libnet.a(net.o)
                0x00000168                net_run
 .text.net_step_0.constprop.0
                0x000002d4       0x40 libnet.a(net.o)
 .text          0x00000314       0x7c /usr/lib/arm-none-eabi/lib/libm.a(lib_a-wf_exp.o)
.rodata         0x00000740     0x2658
 *fill*         0x00000796       0x2a
 .rodata.net_w_b2
                0x000007c0       0x28 libnet.a(net.o)
 .rodata        0x00002d80     0x2000 libnet.a(net_weights.o)
"""


def test_map_sections_are_classified():
    kinds = {(s.name, mcu.classify(s, "net")): s.size for s in mcu.parse_map(MAP)}
    assert kinds == {
        (".text.startup.main", "harness"): 0x8C,
        (".text.net_run", "glue"): 0x16C,
        (".text.net_step_0.constprop.0", "kernels"): 0x40,
        (".text", "library"): 0x7C,
        ("*fill*", "fill"): 0x2A,
        (".rodata.net_w_b2", "weights"): 0x28,
        (".rodata", "weights"): 0x2000,
    }
    dropped = mcu.parse_map(MAP, discarded=True)
    assert [(s.name, s.size, mcu.classify(s, "net")) for s in dropped] == [
        (".text.net_status_string", 0x5C, "glue")
    ]


@pytest.mark.cross
def test_flowc_run_on_the_emulated_board_matches_the_host(tmp_path):
    """``flowc run --arch cortex-m4 --in x=x.npy --out-dir DIR``: the model on the emulated
    board, its outputs written as .npy like the host binary's (``flowc run`` without --arch), the
    two within float32 rounding of numpy's; an unknown input is named with the model's inputs."""
    from graphdef import serialize

    need("cortex-m4")
    rng = np.random.default_rng(4)
    w = rng.standard_normal((8, 4)).astype(np.float32)
    g = gd.Graph("tiny")
    with g:
        x = gd.placeholder("x", (1, 8))
        gd.tanh(gd.matmul(x, gd.constant(w)), name="y")
    serialize.save(g, tmp_path / "tiny.flowc")
    xv = rng.standard_normal((1, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", xv)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def flowc(*args):
        cmd = [sys.executable, "-m", "codegen.cli", "run", str(tmp_path / "tiny.flowc"), *map(str, args)]
        return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path)

    board = flowc("--arch", "cortex-m4", "--in", "x=x.npy", "--out-dir", "res/m4")
    assert board.returncode == 0 and "instructions" in board.stdout, board.stderr
    host = flowc("--in", "x=x.npy", "--out-dir", "res/host")
    assert host.returncode == 0, host.stderr
    want = np.tanh(xv @ w)
    for where in ("m4", "host"):
        np.testing.assert_allclose(np.load(tmp_path / "res" / where / "y.npy"), want, rtol=1e-5, atol=1e-6)
    bad = flowc("--arch", "cortex-m4", "--in", "z=x.npy", "--out-dir", "res/z")
    assert bad.returncode == 1 and "the model's inputs: x" in bad.stderr and bad.stderr.count("\n") == 1


def _conv_gru(T: int, chained: bool):
    """A Conv1d + GRU over ``T`` timesteps (input [1, 3, T], hidden 16, the last hidden state
    -> linear): one GRU node (a loop), or with ``chained`` one single-step GRU node a timestep,
    each taking the previous one's state (one cell step of code a timestep)."""
    from onnx import TensorProto, helper, numpy_helper

    C, H = 8, 16
    rng = np.random.default_rng(9)

    def const(name, *shape):
        return numpy_helper.from_array((0.3 * rng.standard_normal(shape)).astype(np.float32), name)

    inits = [const("cw", C, 3, 5), const("cb", C), const("W", 1, 3 * H, C), const("R", 1, 3 * H, H),
             const("B", 1, 6 * H), const("fw", H, 4), const("fb", 4)]  # fmt: skip
    inits.append(numpy_helper.from_array(np.array([0], np.int64), "axes"))
    nodes = [
        helper.make_node("Conv", ["x", "cw", "cb"], ["c"], pads=[2, 2]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Transpose", ["r"], ["seq"], perm=[2, 0, 1]),  # (T, 1, C)
    ]
    if chained:
        inits.append(numpy_helper.from_array(np.ones(T, np.int64), "ones"))
        steps = [f"x{t}" for t in range(T)]
        nodes.append(helper.make_node("Split", ["seq", "ones"], steps))
        for t in range(T):
            ins = [steps[t], "W", "R", "B"] + (["", f"state{t - 1}"] if t else [])
            nodes.append(helper.make_node("GRU", ins, ["", f"state{t}"], hidden_size=H))
        last = f"state{T - 1}"
    else:
        nodes.append(helper.make_node("GRU", ["seq", "W", "R", "B"], ["", "h"], hidden_size=H))
        last = "h"
    nodes += [
        helper.make_node("Squeeze", [last, "axes"], ["h2"]),
        helper.make_node("MatMul", ["h2", "fw"], ["m"]),
        helper.make_node("Add", ["m", "fb"], ["y"]),
    ]
    return helper.make_model(
        helper.make_graph(
            nodes,
            "gru",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, T])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
            inits,
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )


@pytest.mark.cross
@pytest.mark.parametrize("chained", [False, True], ids=["loop", "chained"])
def test_a_recurrent_model_runs_on_cortex_m4(tmp_path, chained):
    """A Conv1d + GRU over 1,000 timesteps on the board, its outputs onnxruntime's. As one GRU
    node it is a loop of one cell step: a few KiB of code. Chained as 1,000 single-step GRU
    nodes it is one step a timestep: its .text passes 64 KiB, where objdump names calls after
    the linker's STACK_SIZE symbol; the stack is bounded and the footprint says so."""
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")

    need("cortex-m4")
    T = 1000
    model = _conv_gru(T, chained)
    model.ir_version = 10
    onnx.save(model, tmp_path / "gru.onnx")
    rng = np.random.default_rng(9)
    x = rng.standard_normal((1, 3, T)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "codegen.cli", "run", "gru.onnx", "--arch", "cortex-m4"]
    res = subprocess.run([*cmd, "--in", "x=x.npy", "--out-dir", "res"], capture_output=True, text=True,
                         env=env, cwd=tmp_path)  # fmt: skip
    assert res.returncode == 0, res.stderr
    want = ort.InferenceSession(str(tmp_path / "gru.onnx")).run(None, {"x": x})[0]
    np.testing.assert_allclose(np.load(tmp_path / "res" / "y.npy"), want, rtol=1e-4, atol=1e-5)
    out = subprocess.run([sys.executable, "-m", "codegen.cli", "compile", "gru.onnx", "--arch", "cortex-m4",
                          "-o", "out"], capture_output=True, text=True, env=env, cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0 and "stack" in out.stdout, out.stderr
    fp = json.loads((tmp_path / "out" / "metadata.json").read_text())["footprint"]
    if not chained:
        assert fp["code"] < 8 * 1024 and 0 < fp["stack"] < 1024, fp
        return
    assert fp["code"] > 64 * 1024 and 0 < fp["stack"] < 16 * 1024, fp
    objdump = [Target("cortex-m4").tool("objdump"), "-d", str(tmp_path / "out" / "build" / "firmware.elf")]
    assert "<STACK_SIZE+0x" in subprocess.run(objdump, capture_output=True, text=True).stdout


@pytest.mark.cross
def test_the_microcontroller_readme_example_builds_with_arm_none_eabi_gcc(tmp_path):
    """The cortex-m4 folder's README.txt: its example program compiled by its own commands
    (make lib, then arm-none-eabi-gcc with the folder's core flags), linked with build/lib<name>.a
    into a firmware as its last line says (newlib's nosys specs stand in for the user's start-up
    code), from the folder alone."""
    need("cortex-m4", run=False)
    g = _sample("digits").build()
    folder = codegen.export(g, tmp_path / "m4", name="net", arch="cortex-m4")
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy, ignore=shutil.ignore_patterns("build"))
    text = (copy / "README.txt").read_text()
    example = text.split("a complete example):\n", 1)[1].split("\nBuilt with the library", 1)[0]
    (copy / "your_program.c").write_text("\n".join(ln[4:] for ln in example.splitlines()) + "\n")
    lines = [ln.strip() for ln in text.split("are yours):\n", 1)[1].splitlines() if ln.strip()]
    commands, link = lines[:-1], lines[-1]
    assert link.startswith("(then link your_program.o and build/libnet.a into your firmware"), link
    env = {"PATH": os.environ["PATH"]}
    for cmd in commands:
        res = subprocess.run(cmd, shell=True, cwd=copy, env=env, capture_output=True, text=True)
        assert res.returncode == 0, (cmd, res.stderr)
    flags = commands[1].split(" -I.")[0].split()[1:]  # the compile line's core and FPU flags
    link = ["arm-none-eabi-gcc", *flags, "--specs=nosys.specs", "your_program.o", "build/libnet.a", "-lm"]
    res = subprocess.run([*link, "-o", "fw.elf"], cwd=copy, env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
