"""Standalone binaries: results, rebuilds without flowc, determinism, sanitizers, clang, large
weights, .npy format versions (bad arguments, bad input files and untrusted names are in
tests/hostile/test_binary.py)."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import codegen
import graphdef as gd
from graphdef.examples import examples_graph

pytestmark = pytest.mark.c
ROOT = Path(__file__).resolve().parents[2]
ZOO_OUTPUTS = ["logp", "label", "mask", "loss", "gap", "filled", "step", "probs"]


def digits_graph():
    spec = importlib.util.spec_from_file_location("digits_sample", ROOT / "samples" / "digits.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod, mod.build()


def run_binary(binary: Path, feeds: dict, out_dir: Path, *extra):
    args = [str(binary)]
    for name, value in feeds.items():
        path = out_dir.parent / f"{binary.name}-{name}.npy"
        np.save(path, value)
        args += ["--in", f"{name}={path}"]
    return subprocess.run(args + ["--out-dir", str(out_dir), *extra], capture_output=True, text=True)


def check_outputs(out_dir: Path, graph, feeds, names):
    want = gd.Session(graph).run(feeds, names)
    for name, w in zip(names, want):
        got = np.load(out_dir / f"{name}.npy")
        assert got.dtype == w.dtype and got.shape == w.shape, name
        if w.dtype.kind == "f":
            np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6, err_msg=name)
        else:
            np.testing.assert_array_equal(got, w, err_msg=name)


def _meta(folder):
    import json

    return json.loads((folder / "metadata.json").read_text())


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    mod, g = digits_graph()
    out = codegen.export(g, tmp_path_factory.mktemp("d") / "out", name="net")
    _, _, tx, _ = mod.load_data()
    return g, out, tx[:1]


def test_binary_matches_interpreter_and_benchmarks(digits, tmp_path):
    g, out, x = digits
    res = run_binary(out / "net", {"x": x}, tmp_path / "res", "--bench", "50")
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("median_us=") and float(res.stdout.split("=")[1]) > 0
    check_outputs(tmp_path / "res", g, {"x": x}, ["probs"])
    meta = _meta(out)
    assert meta["inputs"][0] == {
        "name": "x",
        "c_name": "in_x",
        "dtype": "float32",
        "shape": [1, 64],
        "file": "x.npy",
    }
    assert (
        meta["arena_bytes"] >= meta["arena_lower_bound"]
        and meta["weight_bytes"] >= (64 * 32 + 32 + 32 * 10 + 10) * 4
    )
    for f in ("net.h", "net.c", "main.c", "Makefile", "CMakeLists.txt", "metadata.json"):
        assert (out / f).is_file(), f


def test_makefile_and_cmake_rebuild_without_flowc(digits, tmp_path):
    g, out, x = digits
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    (copy / "net").unlink()
    env = {"PATH": os.environ["PATH"]}  # no PYTHONPATH, no virtual environment
    subprocess.run(["make", "-s"], cwd=copy, env=env, check=True, capture_output=True)
    assert run_binary(copy / "net", {"x": x}, tmp_path / "res").returncode == 0
    check_outputs(tmp_path / "res", g, {"x": x}, ["probs"])
    if shutil.which("cmake"):
        build = copy / "build"
        subprocess.run(["cmake", "-S", str(copy), "-B", str(build)], env=env, check=True, capture_output=True)
        subprocess.run(["cmake", "--build", str(build)], env=env, check=True, capture_output=True)
        assert run_binary(build / "net", {"x": x}, tmp_path / "res2").returncode == 0


def test_a_binary_refuses_a_cpu_without_the_instruction_sets_it_was_built_for(digits, tmp_path):
    """Built for this machine (-march=native) and run on an older x86-64 (QEMU's Haswell, no
    AVX-512): one line naming the missing instruction set and the fix (--portable), exit code 5,
    no crash; the same binary runs on this machine, and a --portable build runs on the Haswell.
    ``CFLAGS=-O2 make`` keeps the instruction-set flags (the Makefile's ISAFLAGS)."""
    import platform

    g, out, x = digits
    if platform.machine() != "x86_64" or not shutil.which("qemu-x86_64"):
        pytest.skip("needs an x86-64 machine and qemu-x86_64 (apt-get install qemu-user)")
    macros = subprocess.run(
        ["cc", "-march=native", "-dM", "-E", "-"], input="", capture_output=True, text=True
    )
    if "__AVX512F__" not in macros.stdout:
        pytest.skip("this machine has no AVX-512: a native build runs on QEMU's Haswell")
    np.save(tmp_path / "x.npy", x)
    args = ["--in", f"x={tmp_path / 'x.npy'}", "--out-dir", str(tmp_path / "res")]
    res = subprocess.run(
        ["qemu-x86_64", "-cpu", "Haswell", str(out / "net"), *args], capture_output=True, text=True
    )
    assert res.returncode == 5, (res.returncode, res.stderr)
    lines = [
        ln for ln in res.stderr.strip().splitlines() if not ln.startswith("qemu-x86_64:")
    ]  # (its own notes)
    assert len(lines) == 1 and "AVX-512F" in lines[0] and "--portable" in lines[0], res.stderr
    assert not (tmp_path / "res").exists()
    portable = codegen.export(g, tmp_path / "portable", name="net", portable=True)
    res = subprocess.run(
        ["qemu-x86_64", "-cpu", "Haswell", str(portable / "net"), *args], capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr
    check_outputs(tmp_path / "res", g, {"x": x}, ["probs"])
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    (copy / "net").unlink()
    env = {"PATH": os.environ["PATH"], "CFLAGS": "-O2"}
    made = subprocess.run(["make", "-s"], cwd=copy, env=env, capture_output=True, text=True)
    assert made.returncode == 0, made.stderr


def test_readme_example_builds_with_plain_cc_from_the_folder_alone(digits, tmp_path):
    """The exported folder's README.txt: its example program, built by its own commands (the
    library by make, the program by cc with the Makefile's instruction-set flags), runs and
    prints the model's first output; the folder holds only the kernels the model uses, and
    CMake builds the library under the Makefile's name."""
    g, out, x = digits
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    text = (copy / "README.txt").read_text()
    example = text.split("a complete example):\n", 1)[1].split("\nBuilt with the library", 1)[0]
    (copy / "your_program.c").write_text("\n".join(ln[4:] for ln in example.splitlines()) + "\n")
    commands = [ln.strip() for ln in text.split("Built with the library:\n", 1)[1].splitlines() if ln.strip()]
    env = {"PATH": os.environ["PATH"]}
    for cmd in commands:
        res = subprocess.run(cmd, shell=True, cwd=copy, env=env, capture_output=True, text=True)
        assert res.returncode == 0, (cmd, res.stderr)
    want = gd.Session(g).run({"x": np.zeros((1, 64), np.float32)}, ["probs"])[0]
    res = subprocess.run([str(copy / "your_program")], capture_output=True, text=True)
    assert res.returncode == 0 and abs(float(res.stdout) - float(want.ravel()[0])) < 1e-5, res
    if shutil.which("clang") and commands[1].startswith("cc "):  # the same lines with clang for cc
        for cmd in ("clang " + c[3:] for c in commands[1:]):
            res = subprocess.run(cmd, shell=True, cwd=copy, env=env, capture_output=True, text=True)
            assert res.returncode == 0, (cmd, res.stderr)
        res = subprocess.run([str(copy / "your_program")], capture_output=True, text=True)
        assert res.returncode == 0 and abs(float(res.stdout) - float(want.ravel()[0])) < 1e-5, res
    kernels = sorted(p.name for p in (copy / "runtime" / "kernels").iterdir())
    assert "qconv.h" not in kernels and "sgemm.h" in kernels and len(kernels) < 15, kernels
    if shutil.which("cmake"):
        build = tmp_path / "build"
        subprocess.run(["cmake", "-S", str(out), "-B", str(build)], env=env, check=True, capture_output=True)
        subprocess.run(["cmake", "--build", str(build), "--target", "net_model"], env=env, check=True,
                       capture_output=True)  # fmt: skip
        assert (build / "libnet.a").is_file()


def test_binary_help_names_its_tensors_and_errors_name_the_inputs(digits, tmp_path):
    """``net --help``: the usage, every input and output with its dtype and shape, exit 0; a
    wrong input name is answered with the model's inputs; --out-dir's missing parents are
    created."""
    g, out, x = digits
    res = subprocess.run([str(out / "net"), "--help"], capture_output=True, text=True)
    assert res.returncode == 0 and "usage: net --in NAME=FILE.npy" in res.stdout, res
    assert "  x float32[1, 64]" in res.stdout and "  probs float32[1, 10] -> DIR/probs.npy" in res.stdout
    np.save(tmp_path / "x.npy", x)
    wrong = [str(out / "net"), "--in", f"y={tmp_path / 'x.npy'}", "--out-dir", str(tmp_path / "r")]
    res = subprocess.run(wrong, capture_output=True, text=True)
    assert res.returncode == 2 and "unknown input 'y'; the model's inputs: x" in res.stderr, res.stderr
    deep = tmp_path / "a" / "b" / "c"
    res = subprocess.run([str(out / "net"), "--in", f"x={tmp_path / 'x.npy'}", "--out-dir", str(deep)])
    assert res.returncode == 0
    check_outputs(deep, g, {"x": x}, ["probs"])


def test_generation_is_byte_identical(tmp_path):
    a = codegen.export(digits_graph()[1], tmp_path / "a", name="net", build_binary=False, cache=False)
    b = codegen.export(digits_graph()[1], tmp_path / "b", name="net", build_binary=False, cache=False)
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    for f in files:
        assert (a / f).read_bytes() == (b / f).read_bytes(), f


@pytest.mark.parametrize("sample", ["digits", "zoo"])
def test_samples_run_clean_under_address_and_undefined_sanitizers(sample, zoo, zoo_feeds, tmp_path):
    if sample == "digits":
        mod, g = digits_graph()
        feeds, names = {"x": mod.load_data()[2][:3].reshape(3, 64)[:1]}, ["probs"]
    else:
        g, feeds, names = zoo, zoo_feeds, ZOO_OUTPUTS
    flags = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-g1", "-O1"]
    out = codegen.export(g, tmp_path / "san", name="san", outputs=names, flags=flags)
    res = run_binary(out / "san", feeds, tmp_path / "res")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "runtime error" not in res.stderr and "AddressSanitizer" not in res.stderr
    check_outputs(tmp_path / "res", g, feeds, names)


def fast_paths_cnn():
    """A CNN through this build's fast paths: a Winograd 3x3 stem, a stride-1 depthwise conv over
    wide rows with a SiLU epilogue, a stride-2 one with ReLU, 1x1 products with residual
    epilogues, a depthwise conv over 7x3 planes (channel blocks on AVX-512) with SiLU and a
    residual, a 3x3 on a 7x7 output (register tiles on AVX-512, else im2col), a global mean
    over rows, a softmax; beside them a strided, dilated 3x3 im2col on a 10x35 output (one
    slice shared by the threads; undilated it would take the register tiles) and a strided 5x5
    on register tiles whose threads split its output rows (on AVX-512), a 1x1 expansion to 40
    channels and its 5x5 stride-2 depthwise conv (one pwdw step on AVX-512), and their means."""
    rng = np.random.default_rng(3)

    def w(*shape):
        scale = (2.0 / np.prod(shape[1:])) ** 0.5
        return gd.constant((rng.standard_normal(shape) * scale).astype(np.float32))

    with gd.Graph("fastcnn") as g:
        x = gd.placeholder("x", (1, 8, 28, 70))
        h = gd.relu(gd.conv(x, w(24, 8, 3, 3), w(24), pads=(1, 1, 1, 1)))
        d = gd.conv(h, w(24, 1, 3, 3), w(24), group=24, pads=(1, 1, 1, 1))
        d = d * gd.sigmoid(d)
        h = gd.conv(d, w(24, 24, 1, 1)) + h
        d = gd.relu(gd.conv(h, w(24, 1, 3, 3), group=24, strides=(2, 2), pads=(1, 1, 1, 1)))
        h = gd.max_pool(gd.conv(d, w(48, 24, 1, 1), w(48)), (2, 2), (2, 2))
        h = gd.avg_pool(h, (1, 5), (1, 5))
        e = gd.conv(h, w(48, 1, 3, 3), w(48), group=48, pads=(1, 1, 1, 1))  # 7x3 planes: channel blocks
        h = e * gd.sigmoid(e) + h
        h = gd.relu(gd.conv(h, w(64, 48, 3, 3), w(64), pads=(1, 1, 1, 1))) + 0.5
        gd.identity(gd.softmax(gd.reduce_mean(h, (2, 3)), -1), name="probs")
        s = gd.relu(gd.conv(x, w(8, 8, 3, 3), strides=(3, 2), pads=(2, 1, 2, 1), dilations=(2, 1)))
        t = gd.relu(gd.conv(x, w(8, 8, 5, 5), strides=(2, 2), pads=(2, 2, 2, 2)))  # tiles, rows split
        u = gd.relu(gd.conv(x, w(40, 8, 1, 1), w(40)))  # expansion + depthwise: one pwdw step
        v = gd.conv(u, w(40, 1, 5, 5), w(40), group=40, strides=(2, 2), pads=(2, 2, 2, 2))
        v = gd.reduce_mean(v * gd.sigmoid(v), (2, 3))[:, :8]
        gd.identity(gd.reduce_mean(s, (2, 3)) + gd.reduce_mean(t, (2, 3)) + v, name="side")
    return g


@pytest.mark.parametrize("threads", [1, 2])
def test_fast_paths_run_clean_under_address_and_undefined_sanitizers(threads, tmp_path):
    g = fast_paths_cnn()
    flags = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-g1", "-O1"]
    out = codegen.export(g, tmp_path / "san", name="san", flags=flags, threads=threads)
    source = (out / "san.c").read_text()
    assert "conv_winograd" in source and "fc_dwconv_epi_f32" in source and "fc_reduce_mean_rows_f32" in source
    if threads > 1:
        assert "fewer slices than parts" in source and "fc_pool_run" in source
    if "FC_SGEMM_ISA_ID != 2" in source:  # built for AVX-512
        assert "fc_dwconv_cb_epi_f32" in source and "fc_cd_part(" in source and "fc_pwdw_f32(" in source
        assert bool(re.search(r"fc_cd_part\(&\w+, \d+, 1,", source)) == (threads > 1)  # rows split
    feeds = {"x": np.random.default_rng(4).standard_normal((1, 8, 28, 70)).astype(np.float32)}
    res = run_binary(out / "san", feeds, tmp_path / "res")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "runtime error" not in res.stderr and "AddressSanitizer" not in res.stderr
    for name in ("probs", "side"):
        want = gd.Session(g).run(feeds, [name])[0]
        np.testing.assert_allclose(np.load(tmp_path / "res" / f"{name}.npy"), want, rtol=1e-4, atol=1e-6)


@pytest.mark.skipif(shutil.which("clang") is None, reason="clang not installed")
def test_zoo_compiles_warning_free_with_clang(zoo, zoo_feeds, tmp_path):
    out = codegen.export(zoo, tmp_path / "cl", name="zoo", outputs=ZOO_OUTPUTS, cc="clang")
    assert run_binary(out / "zoo", zoo_feeds, tmp_path / "res").returncode == 0
    check_outputs(tmp_path / "res", zoo, zoo_feeds, ZOO_OUTPUTS)


def test_large_weights_go_through_the_assembler(tmp_path):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((256, 128)).astype(np.float32)  # 128 KiB > the C-array threshold
    with gd.Graph("big") as g:
        x = gd.placeholder("x", (1, 256))
        gd.matmul(x, gd.constant(w), name="y")
    out = codegen.export(g, tmp_path / "big", name="big")
    assert (out / "big_weights.bin").stat().st_size >= w.nbytes and ".incbin" in (
        out / "big_weights.c"
    ).read_text()
    xv = rng.standard_normal((1, 256)).astype(np.float32)
    assert run_binary(out / "big", {"x": xv}, tmp_path / "res").returncode == 0
    np.testing.assert_allclose(np.load(tmp_path / "res" / "y.npy"), xv @ w, rtol=1e-4, atol=1e-4)
    m = codegen.compile(g)
    np.testing.assert_allclose(m(x=xv)["y"], xv @ w, rtol=1e-4, atol=1e-4)


def test_weights_as_c_arrays_build_with_pedantic_c99(tmp_path):
    """--weights c-array: the same 128 KiB of weights as C arrays in the model's file, no .bin
    and no assembler directive: the model's C builds with -std=c99 -pedantic -Werror (what a
    compiler without GNU's .incbin needs) and gives the same results; the CLI takes the option."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((256, 128)).astype(np.float32)
    with gd.Graph("big") as g:
        x = gd.placeholder("x", (1, 256))
        gd.matmul(x, gd.constant(w), name="y")
    out = codegen.export(g, tmp_path / "big", name="big", weights="c-array")
    assert not (out / "big_weights.bin").exists() and ".incbin" not in "".join(
        p.read_text() for p in out.glob("*.c")
    )
    isa = [
        ln.split("=", 1)[1].split()
        for ln in (out / "Makefile").read_text().splitlines()
        if ln.startswith("ISAFLAGS")
    ]
    for src in sorted(out.glob("big*.c")):
        cmd = [
            "cc",
            "-std=c99",
            "-pedantic",
            "-Werror",
            "-Wall",
            "-Wextra",
            *isa[0],
            "-I.",
            "-Iruntime",
            "-c",
            src.name,
        ]
        res = subprocess.run(cmd, cwd=out, capture_output=True, text=True)
        assert res.returncode == 0, (src.name, res.stderr[:2000])
    xv = rng.standard_normal((1, 256)).astype(np.float32)
    assert run_binary(out / "big", {"x": xv}, tmp_path / "res").returncode == 0
    np.testing.assert_allclose(np.load(tmp_path / "res" / "y.npy"), xv @ w, rtol=1e-4, atol=1e-4)
    with pytest.raises(gd.FlowcError, match="--weights"):
        codegen.export(g, tmp_path / "no", name="big", weights="arrays")


@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
def test_npy_format_versions_are_read(digits, tmp_path, version):
    g, out, x = digits
    path = tmp_path / "x.npy"
    with open(path, "wb") as f:
        np.lib.format.write_array(f, x, version=version)
    res = subprocess.run(
        [str(out / "net"), "--in", f"x={path}", "--out-dir", str(tmp_path / "res")],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr
    check_outputs(tmp_path / "res", g, {"x": x}, ["probs"])


# the integer kernel's forms below the machine's best: AMX-INT8 tiles off (the AVX-512 VNNI
# loops), VNNI off too (the plane and flat forms' loops): each built and run where the machine
# has what they leave, against numpy
LESS = {
    "vnni": ("-mno-amx-tile", "-mno-amx-int8"),
    "avx512": ("-mno-amx-tile", "-mno-amx-int8", "-mno-avx512vnni"),
}


@pytest.mark.parametrize("less", ["native", *sorted(LESS)])
def test_integer_convolution_scratch_is_what_the_kernel_asks(less, tmp_path, qconv_scratch_program):
    """The scratch the lowering gives each ``qconv`` example (codegen/backends/c/ops/quant.py,
    from the build's integer features) is the kernel's own count (kernels/qconv.h
    fc_qconv_scratch) on each build below the native one: the arena holds no other form's."""
    import platform

    from codegen.backends.c import toolchain
    from codegen.backends.c.ops.quant import int8_features
    from codegen.target import Target

    if platform.machine() not in ("x86_64", "AMD64") or not shutil.which("gcc"):
        pytest.skip("an x86-64 build with gcc")
    flags = () if less == "native" else LESS[less]
    target = Target()
    features = int8_features(toolchain.macros(target, "gcc", flags))
    program, want = qconv_scratch_program(features, 'printf("%ld\\n", s);')
    (tmp_path / "s.c").write_text("#include <stdio.h>\n" + program)
    cmd = ["gcc", "-std=c99", "-O1", *target.cflags(), *flags, f"-I{ROOT / 'runtime_c'}", "s.c", "-o", "s"]
    subprocess.run(cmd, cwd=tmp_path, check=True, capture_output=True)
    run = subprocess.run([str(tmp_path / "s")], capture_output=True, text=True)
    got = [int(v) for v in run.stdout.split()]
    assert got == want, (features, got, want)


@pytest.mark.parametrize("less", sorted(LESS))
def test_integer_convolutions_give_numpys_results_in_each_form_below_the_native_one(less, tmp_path):
    """Every ``qconv`` example built with the CPU's features less AMX (and less VNNI): the forms a
    machine without them runs (this one runs its best form in every other test)."""
    import platform

    if platform.machine() not in ("x86_64", "AMD64") or not shutil.which("gcc"):
        pytest.skip("an x86-64 build with gcc")
    g, feeds, names = examples_graph("qconv")
    m = codegen.compile(g, name=f"qless_{less}", flags=LESS[less], threads=1)
    got = m(**feeds)
    for name, want in zip(names, gd.Session(g).run(feeds, names)):
        np.testing.assert_array_equal(got[name], want, err_msg=name)


@pytest.mark.parametrize("threads", [1, 2])
def test_integer_convolutions_run_clean_under_address_and_undefined_sanitizers(threads, tmp_path):
    """Every example of ``qconv`` (fixed-point and float multipliers, per channel and not,
    depthwise, strided, dilated, uint8) in one program, split over threads, against numpy."""
    g, feeds, names = examples_graph("qconv")
    flags = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-g1", "-O1"]
    out = codegen.export(g, tmp_path / "san", name="san", outputs=names, flags=flags, threads=threads)
    res = run_binary(out / "san", feeds, tmp_path / "res")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "runtime error" not in res.stderr and "AddressSanitizer" not in res.stderr
    meta = _meta(out)
    for name, want in zip(names, gd.Session(g).run(feeds, names)):
        file = next(o["file"] for o in meta["outputs"] if o["name"] == name)
        np.testing.assert_array_equal(np.load(tmp_path / "res" / file), want, err_msg=name)
