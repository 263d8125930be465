"""Graphs split over MPI ranks, built as one SPMD program with mpicc and run with mpiexec on
2, 3 and 4 ranks (oversubscribed on a 2-core machine): results against the same graph built
for one process, microbatches, compression, the in-process path (cffi + mpi4py), and faults.

Every multi-rank result without compression is compared bit for bit with the one-process
build of the same graph (the kernels are chosen before the partition, so each rank runs the
very code the single process runs); with compression, within float16 / bfloat16 tolerance.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
import warnings
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import numpy as np
import pytest

import codegen
import graphdef as gd
from codegen import partition, pipeline

pytestmark = pytest.mark.mpi

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 180  # seconds for one mpiexec run: a hang fails the test, not the session


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


HERE = load(Path(__file__).parent / "test_partition.py", "mpi_partition_models")  # mlp(), diamond(), ...


def sample_graphs() -> dict[str, tuple[gd.Graph, dict]]:
    """The sample models (untrained digits, LeNet-5) and the annotated diamond, with feeds."""
    digits, lenet = HERE.sample("digits"), HERE.sample("lenet")
    rng = np.random.default_rng(3)
    return {
        "digits": (digits.build(batch=4, weights=digits._params(1)), {"x": rng.random((4, 64), np.float32)}),
        "lenet": (lenet.build(batch=2), {"x": rng.standard_normal((2, 1, 28, 28)).astype(np.float32)}),
        "diamond": (HERE.diamond(), HERE.feeds_for(HERE.diamond())),
        "pipeline": (  # annotated: a layer on each rank
            HERE.sample("pipeline").build(8, digits._params(2)),
            {"x": rng.random((8, 64), np.float32)},
        ),
        "mlp": (HERE.mlp(width=64, layers=8, batch=8), HERE.feeds_for(HERE.mlp(width=64, layers=8, batch=8))),
    }


ONNX_MODELS = ("mlp", "lenet5", "resnet", "transformer", "gru_tagger")


def onnx_graphs(folder: Path) -> dict[str, tuple[gd.Graph, dict]]:
    """The ONNX test models (tests/onnx/test_models.py: PyTorch modules, seeded), exported by
    torch.onnx (TorchScript exporter) and imported: name -> (graph, feeds)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnx")
    models = load(ROOT / "tests" / "onnx" / "test_models.py", "onnx_test_models")
    out = {}
    for name in ONNX_MODELS:
        model, feeds = models.make_model(name)
        path = folder / f"{name}.onnx"
        args = tuple(torch.from_numpy(v) for v in feeds.values())
        quiet = io.StringIO()
        with warnings.catch_warnings(), redirect_stdout(quiet), redirect_stderr(quiet), torch.no_grad():
            warnings.simplefilter("ignore")
            fastpath = torch.backends.mha.get_fastpath_enabled()
            torch.backends.mha.set_fastpath_enabled(False)
            try:
                torch.onnx.export(model, args, str(path), opset_version=17, dynamo=False,
                                  input_names=list(feeds), output_names=["out"])  # fmt: skip
            finally:
                torch.backends.mha.set_fastpath_enabled(fastpath)
        graph = gd.load_onnx(path, shapes={k: v.shape for k, v in feeds.items()})
        out[f"onnx_{name}"] = (graph, feeds)
    return out


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return sample_graphs()


@pytest.fixture(scope="module")
def onnx_models(tmp_path_factory):
    return onnx_graphs(tmp_path_factory.mktemp("onnx"))


def one_process(graph: gd.Graph, feeds: dict) -> dict[str, np.ndarray]:
    """The graph built for one process (shared library, same compiler flags as the ranks)."""
    return codegen.compile(graph, name="single")(**feeds)


def build(toolchain, graph, folder: Path, ranks: int, **kw) -> Path:
    codegen.export(graph, folder, name="net", ranks=ranks, cc=toolchain.mpicc, **kw)
    return folder / "net"


def mpirun(toolchain, n: int, *args, timeout: float = TIMEOUT) -> tuple[subprocess.CompletedProcess, float]:
    return toolchain.run(n, *args, timeout=timeout)


def run_binary(toolchain, exe: Path, ranks: int, feeds: dict, folder: Path, *extra) -> dict[str, np.ndarray]:
    args = []
    for k, v in feeds.items():
        np.save(folder / f"in_{k}.npy", v)
        args += ["--in", f"{k}=in_{k}.npy"]
    res, _ = mpirun(toolchain, ranks, exe, *args, "--out-dir", folder / "res", *extra)
    assert res.returncode == 0, res.stdout + res.stderr
    folder_of = exe.parent if (exe.parent / "metadata.json").exists() else exe.parent.parent  # cmake: b/
    meta = json.loads((folder_of / "metadata.json").read_text())
    return {t["name"]: np.load(folder / "res" / t["file"]) for t in meta["outputs"]}


def check_identical(got: dict, want: dict, what: str) -> None:
    assert got.keys() == want.keys(), what
    for k in want:
        assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape, f"{what}: {k}"
        assert np.array_equal(got[k], want[k], equal_nan=True), (
            f"{what}: output {k} differs from one process by {np.abs(got[k] - want[k]).max()}"
        )


def cwd_run(toolchain, exe, ranks, feeds, tmp_path, *extra):
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        return run_binary(toolchain, exe, ranks, feeds, tmp_path, *extra)
    finally:
        os.chdir(old)


# ----------------------------------------------------------------------------- identical results
SAMPLE_CASES = [
    ("digits", 2, "pipeline"), ("digits", 3, "greedy"), ("digits", 3, "pipeline"),
    ("lenet", 2, "greedy"), ("lenet", 3, "pipeline"), ("lenet", 4, "greedy"),
    ("diamond", 3, "annotated"), ("pipeline", 2, "annotated"), ("mlp", 4, "pipeline"), ("mlp", 2, "greedy"),
]  # fmt: skip


@pytest.mark.parametrize("name, ranks, placement", SAMPLE_CASES)
def test_samples_identical_to_one_process(toolchain, models, tmp_path, name, ranks, placement):
    graph, feeds = models[name]
    exe = build(toolchain, graph, tmp_path / "out", ranks, placement=placement)
    meta = json.loads((exe.parent / "metadata.json").read_text())
    assert meta["ranks"] == ranks and len(meta["per_rank"]) == ranks
    got = cwd_run(toolchain, exe, ranks, feeds, tmp_path)
    check_identical(got, one_process(graph, feeds), f"{name} on {ranks} ranks ({placement})")


ONNX_CASES = [
    ("onnx_mlp", 2, "pipeline"), ("onnx_mlp", 3, "greedy"),
    ("onnx_lenet5", 4, "pipeline"), ("onnx_resnet", 2, "pipeline"), ("onnx_resnet", 3, "greedy"),
    ("onnx_transformer", 3, "pipeline"), ("onnx_transformer", 2, "greedy"),
    ("onnx_gru_tagger", 2, "pipeline"), ("onnx_gru_tagger", 4, "greedy"),
]  # fmt: skip


@pytest.mark.parametrize("name, ranks, placement", ONNX_CASES)
def test_onnx_models_identical_to_one_process(toolchain, onnx_models, tmp_path, name, ranks, placement):
    graph, feeds = onnx_models[name]
    exe = build(toolchain, graph, tmp_path / "out", ranks, placement=placement)
    got = cwd_run(toolchain, exe, ranks, feeds, tmp_path)
    check_identical(got, one_process(graph, feeds), f"{name} on {ranks} ranks ({placement})")


@pytest.mark.parametrize("ranks", [2, 3])
def test_tensor_placement_identical_to_one_process(toolchain, tmp_path, ranks):
    """--placement tensor: two 512-wide layers (bias, ReLU) split by columns over the ranks and
    joined on rank 0: every output element is computed as one process computes it."""
    rng = np.random.default_rng(4)
    with gd.Graph("wide") as g:
        h = gd.placeholder("x", (32, 512))
        for _ in range(2):
            w = (rng.standard_normal((512, 512)) / np.sqrt(512)).astype(np.float32)
            h = gd.relu(gd.matmul(h, w) + rng.standard_normal(512).astype(np.float32))
        g.set_outputs(gd.identity(h, name="y"))
    exe = build(toolchain, g, tmp_path / "out", ranks, placement="tensor")
    meta = json.loads((exe.parent / "metadata.json").read_text())
    assert meta["partition"]["placement"] == "tensor" and not meta["partition"]["idle_ranks"]
    feeds = {"x": rng.standard_normal((32, 512)).astype(np.float32)}
    got = cwd_run(toolchain, exe, ranks, feeds, tmp_path)
    check_identical(got, one_process(g, feeds), f"wide MLP on {ranks} ranks (tensor)")


@pytest.mark.parametrize("compress, rtol", [("fp16", 2e-3), ("bf16", 2e-2)])
def test_compression_within_tolerance(toolchain, models, tmp_path, compress, rtol):
    graph, feeds = models["mlp"]
    exe = build(toolchain, graph, tmp_path / "out", 3, placement="pipeline", compress=compress)
    meta = json.loads((exe.parent / "metadata.json").read_text())
    cut = meta["partition"]
    assert cut["compress"] == compress and cut["bytes_saved"] == cut["bytes_sent"] > 0
    assert sum(e["bytes"] for e in cut["edges"]) == cut["bytes_sent"]
    got = cwd_run(toolchain, exe, 3, feeds, tmp_path)["y"]
    want = one_process(graph, feeds)["y"]
    err = np.abs(got - want).max() / np.abs(want).max()
    assert 0 < err < rtol, err
    # the numpy reference of the same partition (of the lowered graph) gives that result
    options = pipeline.Options(ranks=3, placement="pipeline", compress=compress)
    part = pipeline.run(graph, options, until="partition").partition
    sim = partition.simulate(part, feeds)["y"]
    # (a float32 last-bit difference may flip a rounding on the wire: far below the error itself)
    assert np.abs(got - sim).max() < np.abs(got - want).max() / 4


def test_microbatches_identical_to_separate_runs(toolchain, models, tmp_path):
    """--microbatches K: K slices of the batch axis through the pipeline; each slice's result
    is the one-process result of that slice, bit for bit."""
    graph, feeds = models["mlp"]
    k = 5
    rng = np.random.default_rng(9)
    big = rng.standard_normal((k * 8, 64)).astype(np.float32)
    exe = build(toolchain, graph, tmp_path / "out", 2, placement="pipeline")
    got = cwd_run(toolchain, exe, 2, {"x": big}, tmp_path, "--microbatches", str(k), "--bench", "3")["y"]
    want = np.concatenate([one_process(graph, {"x": big[j * 8 : (j + 1) * 8]})["y"] for j in range(k)])
    assert np.array_equal(got, want)


def test_bench_reports_every_rank(toolchain, models, tmp_path):
    graph, feeds = models["digits"]
    exe = build(toolchain, graph, tmp_path / "out", 2, placement="pipeline")
    np.save(tmp_path / "x.npy", feeds["x"])
    res, _ = mpirun(
        toolchain, 2, exe, "--in", f"x={tmp_path / 'x.npy'}", "--out-dir", tmp_path / "r", "--bench", "20"
    )
    assert res.returncode == 0, res.stderr
    assert re.search(r"^median_us=\d+\.\d+$", res.stdout, re.M), res.stdout
    for r in range(2):
        assert re.search(
            rf"^rank {r}: compute_us=\d+\.\d+ wait_us=\d+\.\d+ comm_us=\d+\.\d+$", res.stdout, re.M
        )


@pytest.mark.parametrize("tool", ["make", "cmake"])
def test_generated_build_files_build_without_flowc(toolchain, models, tmp_path, tool):
    """The written Makefile (MPICC=...) and CMakeLists.txt (find_package(MPI)) build the program."""
    if shutil.which(tool) is None:
        pytest.skip(f"no {tool}")
    graph, feeds = models["digits"]
    out = tmp_path / "out"
    codegen.export(graph, out, name="net", ranks=2, placement="pipeline", build_binary=False)
    assert not (out / "net").exists()
    mpi_bin = str(Path(shlex.split(toolchain.mpicc)[0]).parent)
    env = {**os.environ, "PATH": mpi_bin + os.pathsep + os.environ.get("PATH", "")}
    if tool == "make":
        cmds, exe = [["make", "-s", f"MPICC={toolchain.mpicc}"]], out / "net"
    else:
        cmds = [["cmake", "-S", ".", "-B", "b", f"-DMPI_C_COMPILER={shlex.split(toolchain.mpicc)[0]}"],
                ["cmake", "--build", "b"]]  # fmt: skip
        exe = out / "b" / "net"
    for cmd in cmds:
        res = subprocess.run(cmd, cwd=out, capture_output=True, text=True, timeout=300, env=env)
        assert res.returncode == 0, res.stdout + res.stderr
    got = cwd_run(toolchain, exe, 2, feeds, tmp_path)
    check_identical(got, one_process(graph, feeds), f"{tool} build")


# ----------------------------------------------------------------------------- in process
SCRIPT = r"""
import sys
import numpy as np
sys.path.insert(0, {root!r})
from mpi4py import MPI
import codegen, graphdef as gd
from codegen import passes

comm = MPI.COMM_WORLD
rng = np.random.default_rng(0)
with gd.Graph("inproc") as g:
    x = gd.placeholder("x", (8, 32))
    h = x
    for i in range(6):
        h = gd.tanh(gd.matmul(h, (rng.standard_normal((32, 32)) / 6).astype(np.float32)), name=f"h{{i}}")
    gd.identity(h, name="y")
    gd.identity(gd.relu(x), name="early")
xv = np.random.default_rng(1).standard_normal((8, 32)).astype(np.float32)
want = codegen.compile(g, name="whole")(x=xv) if comm.Get_rank() == 0 else None
want = comm.bcast(want, root=0)
m = codegen.compile(g, ranks=comm.Get_size(), comm=comm, placement="pipeline")
out = m(x=xv)
mine = sorted(k for k, r in m.owner.items() if r == comm.Get_rank() and k in ("y", "early"))
assert sorted(out) == mine, (sorted(out), mine)
for k in out:
    assert np.array_equal(out[k], want[k]), k
m2 = codegen.compile(g, ranks=comm.Get_size(), comm=comm, placement="greedy", gather=True)
out2 = m2(x=xv)
assert sorted(out2) == ["early", "y"]
for k in out2:
    assert np.array_equal(out2[k], want[k]), k
print(f"ok rank {{comm.Get_rank()}} {{len(out)}} {{m.arena_bytes}}", flush=True)
"""


@pytest.mark.parametrize("n", [2, 3])
def test_cffi_under_mpiexec_with_mpi4py(toolchain, tmp_path, n):
    python = toolchain.python
    if (
        python is None
        or subprocess.run([python, "-c", "import mpi4py, cffi"], capture_output=True).returncode
    ):
        pytest.skip(f"no mpi4py beside {toolchain.mpicc}")
    (tmp_path / "script.py").write_text(SCRIPT.format(root=str(ROOT)))
    env_cache = {**os.environ, "FLOWC_CACHE": str(tmp_path / "cache"), "MPICC": toolchain.mpicc}
    cmd = [*toolchain.launch(n), python, str(tmp_path / "script.py")]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=env_cache)
    assert res.returncode == 0, res.stdout + res.stderr[-4000:]
    assert sorted(re.findall(r"ok rank (\d+)", res.stdout)) == [str(r) for r in range(n)], res.stdout


def test_compile_ranks_refuses_wrong_communicator(toolchain, tmp_path):
    """ranks=3 under a 1-process communicator: one FlowcError, nothing built."""
    python = toolchain.python
    if python is None or subprocess.run([python, "-c", "import mpi4py"], capture_output=True).returncode:
        pytest.skip(f"no mpi4py beside {toolchain.mpicc}")
    script = (
        f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
        "import numpy as np, codegen, graphdef as gd\n"
        "from graphdef.errors import FlowcError\n"
        "with gd.Graph('g') as g:\n    gd.relu(gd.placeholder('x', (4,)), name='y')\n"
        "try:\n    codegen.compile(g, ranks=3)\nexcept FlowcError as e:\n    print('refused:', e)\n"
    )
    res = subprocess.run([python, "-c", script], capture_output=True, text=True, timeout=TIMEOUT,
                         env={**os.environ, "FLOWC_CACHE": str(tmp_path)})  # fmt: skip
    assert (
        "refused: compile(..., ranks=3) needs a communicator of 3 processes (mpiexec -n 3); this one has 1"
        in (res.stdout)
    ), res.stdout + res.stderr


# ----------------------------------------------------------------------------- faults
@pytest.fixture(scope="module")
def slow_program(toolchain, tmp_path_factory):
    """A 2-rank program whose run takes long enough to be killed in the middle."""
    folder = tmp_path_factory.mktemp("slow")
    graph = HERE.mlp(width=256, layers=8, batch=64)
    exe = build(toolchain, graph, folder / "out", 2, placement="pipeline")
    np.save(folder / "x.npy", HERE.feeds_for(graph)["x"])
    return exe, folder


@pytest.mark.parametrize("n", [1, 3])
def test_wrong_rank_count_refused_by_every_rank(toolchain, slow_program, n):
    exe, folder = slow_program
    res, took = mpirun(toolchain, n, exe, "--in", f"x={folder / 'x.npy'}", "--out-dir", folder / "r")
    assert res.returncode != 0 and took < 60
    lines = [ln for ln in res.stderr.splitlines() if "compiled for" in ln]
    want = {f"net: rank {r}: compiled for 2 ranks, run with {n} (mpiexec -n 2)" for r in range(n)}
    assert set(lines) == want and len(lines) == n, res.stderr


@pytest.mark.parametrize("var", ["PMI_SIZE", "OMPI_COMM_WORLD_SIZE"])
def test_a_launcher_of_another_mpi_is_named(toolchain, slow_program, var):
    """A process that a launcher counts among 2 but whose MPI sees a world of 1 (a binary built
    against one MPI, started by another's mpiexec) is refused naming the launcher's variable and
    this binary's MPI, not blamed on -n."""
    exe, folder = slow_program
    rank = var.replace("SIZE", "RANK")
    env = {**os.environ, var: "2", rank: "1"}
    res = subprocess.run([str(exe), "--in", f"x={folder / 'x.npy'}", "--out-dir", str(folder / "r")],
                         capture_output=True, text=True, timeout=60, env=env)  # fmt: skip
    ours = [ln for ln in res.stderr.splitlines() if ln.startswith("net: rank 1: MPI sees 1 process")]
    assert res.returncode != 0 and len(ours) == 1, res.stderr
    assert f"started 2 ({var}=2): this binary's MPI (" in ours[0] and "compiled for" not in res.stderr


@pytest.mark.parametrize("other", [["--microbatches", "2"], ["--bogus", "1"]])
def test_ranks_given_different_command_lines_stop_at_once(toolchain, slow_program, tmp_path, other):
    """An MPMD launch whose second rank gets another --microbatches (it would run another number of
    steps) or a wrong option: refused before any run, the wrong option named by the rank that got
    it; nothing waits."""
    exe, folder = slow_program
    args = ["--in", f"x={folder / 'x.npy'}", "--out-dir", str(tmp_path / "r")]
    cmd = [*toolchain.launch(1), str(exe), *args, ":", "-n", "1", str(exe), *args, *other]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, (res.returncode, res.stderr)
    if other[0] == "--bogus":
        assert "net: rank 1: error: unexpected argument '--bogus'" in res.stderr, res.stderr
    else:
        assert "net: rank 0: error: the ranks were given different --microbatches (from 1 to 2)" in res.stderr
    assert not (tmp_path / "r").exists()


def test_unreadable_input_stops_the_job(toolchain, slow_program, tmp_path):
    exe, folder = slow_program
    res, took = mpirun(
        toolchain, 2, exe, "--in", f"x={tmp_path / 'missing.npy'}", "--out-dir", tmp_path / "r"
    )
    assert res.returncode != 0 and took < 60
    errors = [ln for ln in res.stderr.splitlines() if "missing.npy" in ln]
    assert len(errors) == 1 and errors[0].startswith("net: rank 0: error: "), res.stderr
    assert not (tmp_path / "r").exists()


def test_wrong_shape_one_line_and_non_zero(toolchain, slow_program, tmp_path):
    exe, _ = slow_program
    np.save(tmp_path / "bad.npy", np.zeros((3, 256), np.float32))
    res, took = mpirun(toolchain, 2, exe, "--in", f"x={tmp_path / 'bad.npy'}", "--out-dir", tmp_path / "r")
    assert res.returncode != 0 and took < 60
    errors = [ln for ln in res.stderr.splitlines() if "bad.npy" in ln]
    assert len(errors) == 1 and "shape" in errors[0], res.stderr
    assert not (tmp_path / "r").exists()


def _running(exe: Path) -> list[int]:
    """Processes running the program (by its path in /proc/*/cmdline)."""
    pids = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                cmd = (p / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if cmd and cmd[0] == str(exe).encode():
                pids.append(int(p.name))
    return pids


def test_killed_rank_ends_the_job(toolchain, slow_program, tmp_path):
    """kill -9 of one rank in the middle of a run: mpiexec ends non-zero within 30 s and no
    rank is left running."""
    exe, folder = slow_program
    cmd = [*toolchain.launch(2), str(exe), "--in", f"x={folder / 'x.npy'}", "--out-dir", str(tmp_path / "r"),
           "--microbatches", "1", "--bench", "100000000"]  # fmt: skip
    job = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while len(_running(exe)) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        ranks = _running(exe)
        assert len(ranks) == 2, "the ranks did not start"
        time.sleep(1.0)  # well inside the --bench loop
        os.kill(max(ranks), signal.SIGKILL)
        killed = time.monotonic()
        try:
            job.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail("mpiexec still running 30 s after one rank was killed")
        took = time.monotonic() - killed
        assert job.returncode != 0
        time.sleep(0.5)
        assert not _running(exe), "a rank is left running"
        print(f"job ended {took:.2f} s after kill -9")
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
        for pid in _running(exe):
            os.kill(pid, signal.SIGKILL)


def test_cli_compile_ranks(toolchain, tmp_path):
    from codegen import cli

    path = tmp_path / "m.flowc"
    gd.save(HERE.mlp(width=64, layers=4, batch=8), path)
    out = tmp_path / "out"
    assert cli.main(["compile", str(path), "-o", str(out), "--name", "net", "--ranks", "2",
                     "--placement", "greedy", "--compress", "bf16"]) == 0  # fmt: skip
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["ranks"] == 2 and (out / "net").is_file()
    bad = tmp_path / "bad"
    assert cli.main(["compile", str(path), "-o", str(bad), "--ranks", "0"]) == 1
    assert not bad.exists()


def test_sanitizers_clean_on_three_ranks(toolchain, models, tmp_path, sanitizer_env):
    """The SPMD program built with AddressSanitizer and UndefinedBehaviorSanitizer: a 3-rank
    run with bf16 transfers and microbatches reports nothing, leaks included."""
    graph, _ = models["mlp"]
    flags = ("-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer")
    flags += ("-O1", "-g1")  # line tables for reports; -O1: half the build time of -O3 under ASan
    exe = build(toolchain, graph, tmp_path / "out", 3, placement="pipeline", compress="bf16", flags=flags)
    x = np.random.default_rng(4).standard_normal((5 * 8, 64)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    env = sanitizer_env  # leaks reported, but the MPI library's own
    args = ["--in", f"x={tmp_path / 'x.npy'}", "--out-dir", str(tmp_path / "r")]
    args += ["--microbatches", "5", "--bench", "2"]
    cmd = [*toolchain.launch(3), str(exe), *args]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=env)
    assert res.returncode == 0 and "Sanitizer" not in res.stderr, res.stderr[-3000:]
    assert np.load(tmp_path / "r" / "y.npy").shape == (40, 64)


@pytest.mark.parametrize("ranks, placement", [(2, "pipeline"), (3, "greedy")])
def test_a_loop_stays_on_one_rank(toolchain, tmp_path, ranks, placement):
    """A model of layers, a loop carrying state over a run-time number of iterations, and layers
    after it, split over ranks: the loop runs on one rank (what it reads from others received
    before it starts, its final state sent after it ends), each output as one process gives it."""
    rng = np.random.default_rng(7)
    with gd.Graph("looped") as g:
        x = gd.placeholder("x", (8, 64))
        n = gd.placeholder("n", (), "int32")
        h = x
        for _ in range(3):
            h = gd.relu(gd.matmul(h, (rng.standard_normal((64, 64)) / 8).astype(np.float32)))
        w = (rng.standard_normal((64, 64)) / 8).astype(np.float32)
        _, s = gd.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, gd.tanh(gd.matmul(s, w) + h)), [0, h])
        for _ in range(3):
            s = gd.relu(gd.matmul(s, (rng.standard_normal((64, 64)) / 8).astype(np.float32)))
        g.set_outputs(gd.identity(s, name="y"))
    exe = build(toolchain, g, tmp_path / "out", ranks, placement=placement)
    meta = json.loads((exe.parent / "metadata.json").read_text())
    placed = meta["partition"]["placement"]
    assert placed == placement
    for steps in (0, 1, 5):
        feeds = {"x": rng.standard_normal((8, 64)).astype(np.float32), "n": np.int32(steps)}
        got = cwd_run(toolchain, exe, ranks, feeds, tmp_path)
        check_identical(got, one_process(g, feeds), f"loop over {ranks} ranks, {steps} iterations")
