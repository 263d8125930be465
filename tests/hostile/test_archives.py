"""Archives that cost far more than they weigh, and writes that follow planted links (issue 31).

1. Zip bombs: .flowc graphs and .npz checkpoints a few MB long whose members inflate to hundreds
   of MB (of zeros or of JSON tokens). Each is refused before its data is inflated, in one line
   naming the file, the member and both sizes. Every load runs in a child process that reports
   its own peak memory (ru_maxrss) before and after the load: the growth must stay far below what
   the bomb inflates to, and a legitimate file loads at about the memory of its arrays.
2. Checkpoints are written to an exclusively created temporary: a link planted at the old
   predictable temporary name, or at the target, never makes a save write outside the target.
3. ``flowc inspect --svg FILE`` writes the same way. Saved files get the permissions a plain
   ``open`` gives (0666 less the umask).
"""

from __future__ import annotations

import io
import json
import os
import stat
import zipfile
from pathlib import Path

import numpy as np
import pytest

import graphdef as gd
from graphdef import checkpoint
from graphdef.errors import CheckpointError

from .hostile import run_bounded

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 3 << 29  # 1.5 GiB of address space for the child: a bomb that gets through fails, not swaps
MB = 1 << 20


# ----------------------------------------------------------------------------- the child process

_CHILD = r"""
import contextlib, io, json, resource, sys, tracemalloc
resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))
import numpy as np
import graphdef as gd
from graphdef import checkpoint
import codegen.cli

def peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kB on Linux

def total(arrays):
    return float(sum(float(a.sum(dtype=np.float64)) for a in arrays))

kind, args = sys.argv[1], json.loads(sys.argv[2])
base = peak()
tracemalloc.start()  # numpy reports its arrays to tracemalloc too
try:
    if kind == "graph":
        g = gd.load(args["path"])
        out = {{"sum": total(list(g.constants.values()) + list(g.variables.values()))}}
    elif kind == "checkpoint":
        specs = args.get("specs")
        if specs is not None:
            specs = {{n: (tuple(s), d) for n, (s, d) in specs.items()}}
        values, header = checkpoint.load(args["path"], specs, "m")
        out = {{"sum": total(values.values()), "names": sorted(values)}}
    else:
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rc = codegen.cli.main(args["argv"])
        out = {{"rc": rc, "stderr": err.getvalue()}}
except gd.FlowcError as e:
    out = {{"error": type(e).__name__, "message": str(e)}}
except BaseException as e:
    out = {{"crash": type(e).__name__, "message": str(e)[:300]}}
out.update(growth=peak() - base, traced=tracemalloc.get_traced_memory()[1])
print(json.dumps(out))
"""


def child(kind: str, **args) -> dict:
    """Run one load in a fresh Python limited to LIMIT bytes of address space; its result with
    ``growth``, the bytes the process's peak resident memory grew by during the load (blind to
    a load that stays under the peak the imports left), and ``traced``, the peak of the memory
    Python and numpy allocated during the load (tracemalloc)."""
    return run_bounded(_CHILD.format(limit=LIMIT), kind, json.dumps(args))


def refused(out: dict, error: str, *words) -> str:
    assert out.get("error") == error, out
    message = out["message"]
    assert "\n" not in message and all(str(w) in message for w in words), (words, message)
    return message


# ----------------------------------------------------------------------------- building archives


def write_zip(path, members: dict, compression=zipfile.ZIP_DEFLATED) -> Path:
    """A zip of ``members`` (name -> bytes, or a list of byte chunks written one after another,
    so a bomb of hundreds of MB never lies in memory whole)."""
    with zipfile.ZipFile(path, "w", compression, compresslevel=1) as z:
        for name, data in members.items():
            with z.open(name, "w", force_zip64=True) as f:
                for chunk in [data] if isinstance(data, bytes) else data:
                    f.write(chunk)
    return Path(path)


def npy_header(shape, descr="<f4") -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False, "shape": shape})
    return buf.getvalue()


def zeros_npy(nbytes: int, descr="<f4", itemsize=4) -> list:
    """The chunks of a .npy member of ``nbytes`` bytes of zeros."""
    chunk = bytes(4 * MB)
    assert nbytes % len(chunk) == 0
    return [npy_header((nbytes // itemsize,), descr)] + [chunk] * (nbytes // len(chunk))


def members_of(path) -> dict:
    with zipfile.ZipFile(path) as z:
        return {n: z.read(n) for n in z.namelist()}


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    """y = relu(c), c a float32[4] constant: the frame of every graph bomb."""
    with gd.Graph("small") as g:
        gd.relu(gd.constant(np.arange(4, dtype=np.float32), name="c"), name="y")
    path = tmp_path_factory.mktemp("small") / "small.flowc"
    gd.save(g, path)
    return path


def json_around(small) -> tuple[bytes, bytes]:
    """graph.json of ``small`` with an extra top-level key (ignored by load), split where its
    value goes: (text before the value, text after it)."""
    doc = json.loads(members_of(small)["graph.json"])
    doc["padding"] = "@@"
    before, after = json.dumps(doc, indent=1).split('"@@"')
    return before.encode(), after.encode()


BOMB = 512 * MB  # what each bomb inflates to


@pytest.fixture(scope="module")
def npy_bomb(small, tmp_path_factory) -> Path:
    """A valid graph whose constant c is float32[128M]: 512 MB of zeros deflated to ~2 MB."""
    members = members_of(small)
    doc = json.loads(members["graph.json"])
    n = BOMB // 4
    for node in doc["nodes"]:
        node["outputs"][0]["shape"] = [n]
        if node["name"] == "c":
            node["attrs"]["shape"] = [n]
    members["graph.json"] = json.dumps(doc, indent=1).encode()
    members["constants/0.npy"] = zeros_npy(BOMB)
    path = write_zip(tmp_path_factory.mktemp("bomb") / "bomb.flowc", members)
    assert path.stat().st_size < 4 * MB
    return path


# ----------------------------------------------------------------------------- 1a. graph.json


def test_a_deflated_graph_json_of_tokens_is_refused_before_inflating(small, tmp_path):
    """96 MB of JSON tokens (``[],[],...``: parsed, ~64 bytes of Python objects per 3 bytes of
    text) deflated to a few hundred KB: under the old 256 MiB limit, it parsed into GBs."""
    before, after = json_around(small)
    members = members_of(small)
    members["graph.json"] = [before, b"["] + [b"[]," * MB] * 32 + [b"[]]", after]
    bomb = write_zip(tmp_path / "tokens.flowc", members)
    assert bomb.stat().st_size < MB
    out = child("graph", path=str(bomb))
    size = bomb.stat().st_size
    assert max(out["growth"], out["traced"]) < 32 * MB, out
    refused(out, "SerializationError", "tokens.flowc", "graph.json", size, "100 times")


def test_stored_graph_json_of_too_many_tokens_is_refused_before_parsing(small, tmp_path):
    """Stored (so within any ratio) but 10M JSON tokens in 15 MB: parsed, ~350 MB."""
    before, after = json_around(small)
    members = members_of(small)
    members["graph.json"] = [before, b"[" + b"[]," * (5 * MB), b"[]]", after]
    bomb = write_zip(tmp_path / "tokens.flowc", members, zipfile.ZIP_STORED)
    out = child("graph", path=str(bomb))
    assert max(out["growth"], out["traced"]) < 64 * MB, out
    refused(
        out, "SerializationError", "tokens.flowc", "graph.json", "JSON tokens", gd.serialize.MAX_JSON_TOKENS
    )


def test_graph_json_past_the_byte_limit_is_refused_before_inflating(small, tmp_path):
    """76 MB of whitespace and random hex (~38:1, within the ratio bound): more JSON than
    a graph of 200k nodes, refused from its declared size."""
    before, after = json_around(small)
    noise = np.random.default_rng(0).bytes(20_000).hex().encode()
    chunk = b'"' + noise + b'"' + b" " * MB + b","
    members = members_of(small)
    members["graph.json"] = [before, b"["] + [chunk] * 70 + [b"0]", after]
    bomb = write_zip(tmp_path / "long.flowc", members)
    declared = zipfile.ZipFile(bomb).getinfo("graph.json").file_size
    out = child("graph", path=str(bomb))
    assert max(out["growth"], out["traced"]) < 16 * MB, out
    refused(out, "SerializationError", "long.flowc", "graph.json", declared, gd.serialize.MAX_JSON_BYTES)


# ----------------------------------------------------------------------------- 1b. .npy members


def test_an_npy_bomb_in_a_graph_is_refused_before_inflating(npy_bomb):
    out = child("graph", path=str(npy_bomb))
    size = npy_bomb.stat().st_size
    assert max(out["growth"], out["traced"]) < 32 * MB, out
    refused(out, "SerializationError", "bomb.flowc", "constants/0.npy", size, "100 times")


def test_flowc_compile_refuses_an_npy_bomb_in_one_line(npy_bomb, tmp_path):
    out = child("cli", argv=["compile", str(npy_bomb), "-o", str(tmp_path / "out"), "--no-build"])
    assert max(out["growth"], out["traced"]) < 32 * MB, out
    assert out.get("rc") == 1, out
    lines = out["stderr"].strip().splitlines()
    assert len(lines) == 1 and "bomb.flowc" in lines[0] and "constants/0.npy" in lines[0], out


def test_a_graph_with_megabytes_of_weights_loads_at_the_memory_of_its_arrays(tmp_path):
    """8 MB of random weights, saved by gd.save (members stored) and re-zipped with deflate
    (as `zip` would): both load, and the load's peak is the arrays, not arrays plus copies."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal((1024, 2048)).astype(np.float32)
    b = rng.standard_normal(2048).astype(np.float32)
    with gd.Graph("dense") as g:
        x = gd.placeholder("x", (1, 1024))
        gd.matmul(x, gd.variable("w", w)) + gd.constant(b, name="b")
    saved = tmp_path / "dense.flowc"
    gd.save(g, saved)
    zipped = write_zip(tmp_path / "zipped.flowc", members_of(saved))
    want = float(w.sum(dtype=np.float64) + b.sum(dtype=np.float64))
    for path in (saved, zipped):
        out = child("graph", path=str(path))
        assert out.get("sum") == pytest.approx(want, rel=1e-12), out
        assert w.nbytes <= out["traced"] < w.nbytes + b.nbytes + 2 * MB, (path.name, out)


# ----------------------------------------------------------------------------- 1c. checkpoints


def _header(model="m") -> bytes:
    text = json.dumps({"format": checkpoint.FORMAT, "model": model, "step": 1, "hash": "0"}).encode()
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.frombuffer(text, np.uint8))
    return buf.getvalue()


def _npy(array) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.asarray(array))
    return buf.getvalue()


@pytest.fixture(scope="module")
def checkpoint_bombs(tmp_path_factory) -> dict:
    """``w``: a checkpoint whose variable w is 512 MB of zeros; ``extra``: one whose w is a
    float32[4] but which also holds 512 MB of zeros under another name. ~2 MB each."""
    folder = tmp_path_factory.mktemp("ck")
    small = _npy(np.ones(4, np.float32))
    return {
        "w": write_zip(folder / "w.npz", {"__flowc__.npy": _header(), "w.npy": zeros_npy(BOMB)}),
        "extra": write_zip(
            folder / "extra.npz",
            {"__flowc__.npy": _header(), "w.npy": small, "junk.npy": zeros_npy(BOMB)},
        ),
    }


W4 = {"w": [[4], "float32"]}


@pytest.mark.parametrize(
    "bomb,specs,words",
    [
        ("w", W4, ["w.npz", "'w'", f"float32[{BOMB // 4}]", "float32[4]"]),
        ("extra", W4, ["extra.npz", "'junk'"]),
        ("w", None, ["w.npz", "w.npy", "100 times"]),
        ("extra", None, ["extra.npz", "junk.npy", "100 times"]),
    ],
    ids=["w-with-specs", "extra-with-specs", "w-alone", "extra-alone"],
)
def test_a_checkpoint_bomb_is_refused_before_inflating(checkpoint_bombs, bomb, specs, words):
    path = checkpoint_bombs[bomb]
    if specs is None:
        words = words + [path.stat().st_size]
    out = child("checkpoint", path=str(path), specs=specs)
    assert max(out["growth"], out["traced"]) < 32 * MB, out
    refused(out, "CheckpointError", *words)


def test_legitimate_checkpoints_load_stored_or_deflated(tmp_path):
    """checkpoint.save's file (stored) and the same members deflated, as np.savez_compressed
    writes them (the zero slots compress ~1000:1, the random weights hardly at all), both load,
    with and without specs, at the memory of their arrays. A deflated checkpoint of nothing but
    zeros is past the ratio bound, yet loads for a model whose variables it fits."""
    rng = np.random.default_rng(2)
    values = {
        "w": rng.standard_normal((512, 2048)).astype(np.float32),
        "w/m": np.zeros((512, 2048), np.float32),
    }
    stored = checkpoint.save(tmp_path / "ck.npz", values, "m", step=3)
    members = members_of(stored)
    deflated = write_zip(tmp_path / "zipped.npz", members)
    want = float(values["w"].sum(dtype=np.float64))
    specs = {n: [list(v.shape), str(v.dtype)] for n, v in values.items()}
    for path, given in ((stored, specs), (deflated, None)):
        out = child("checkpoint", path=str(path), specs=given)
        assert out.get("sum") == pytest.approx(want, rel=1e-12) and out["names"] == ["w", "w/m"], out
        assert 8 * MB <= out["traced"] < 10 * MB, (path.name, out)
    assert checkpoint.load(stored)[0].keys() == values.keys()
    got, header = checkpoint.load(deflated, {n: (v.shape, v.dtype) for n, v in values.items()})
    assert header["step"] == 3 and all(np.array_equal(got[n], values[n]) for n in values)
    members["w.npy"] = members["w/m.npy"]
    zeros = write_zip(tmp_path / "zeros.npz", members)
    assert sum(v.nbytes for v in values.values()) > 100 * zeros.stat().st_size
    with pytest.raises(CheckpointError, match=r"zeros\.npz.*100 times"):
        checkpoint.load(zeros)
    got, _ = checkpoint.load(zeros, {n: (v.shape, v.dtype) for n, v in values.items()}, "m")
    assert not any(a.any() for a in got.values())


def test_other_compression_methods_are_refused(tmp_path):
    """bz2 and lzma members inflate without a bound per read: only stored and deflated members
    (what numpy and flowc write) are read."""
    members = {"__flowc__.npy": _header(), "w.npy": _npy(np.ones(4, np.float32))}
    path = write_zip(tmp_path / "bz.npz", members, zipfile.ZIP_BZIP2)
    with pytest.raises(CheckpointError, match=r"bz\.npz.*__flowc__\.npy.*compress"):
        checkpoint.load(path)


# ----------------------------------------------------------------------------- 2. links at save


@pytest.fixture
def values():
    return {"w": np.arange(6, dtype=np.float32).reshape(2, 3)}


def _plant(kind: str, link: Path, victim: Path) -> None:
    if kind == "symlink":
        victim.write_bytes(b"victim")
        link.symlink_to(victim)
    elif kind == "dangling":
        link.symlink_to(victim)  # the victim does not exist: a write through the link creates it
    else:
        victim.write_bytes(b"victim")
        os.link(victim, link)


def _victim_untouched(kind: str, victim: Path) -> bool:
    return not victim.exists() if kind == "dangling" else victim.read_bytes() == b"victim"


@pytest.mark.parametrize("kind", ["symlink", "dangling", "hardlink"])
def test_checkpoint_save_never_writes_through_a_link_at_the_old_temporary(kind, values, tmp_path):
    folder, elsewhere = tmp_path / "ck", tmp_path / "elsewhere"
    folder.mkdir(), elsewhere.mkdir()
    target, victim = folder / "ck.npz", elsewhere / "victim"
    link = folder / f".ck.npz.{os.getpid()}.tmp"  # the name save used before issue 31
    _plant(kind, link, victim)
    checkpoint.save(target, values, "m")
    assert _victim_untouched(kind, victim)
    assert stat.S_ISREG(os.lstat(target).st_mode)
    np.testing.assert_array_equal(checkpoint.load(target)[0]["w"], values["w"])


@pytest.mark.parametrize("kind", ["symlink", "dangling", "hardlink"])
def test_checkpoint_save_replaces_a_link_at_the_target_not_what_it_points_to(kind, values, tmp_path):
    target, victim = tmp_path / "ck.npz", tmp_path / "victim"
    _plant(kind, target, victim)
    checkpoint.save(target, values, "m")
    assert _victim_untouched(kind, victim)
    assert stat.S_ISREG(os.lstat(target).st_mode) and os.stat(target).st_nlink == 1
    np.testing.assert_array_equal(checkpoint.load(target)[0]["w"], values["w"])


@pytest.fixture(params=[0o022, 0o077, 0o002])
def umask(request):
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def test_saved_files_get_the_permissions_of_a_plain_open(umask, values, small, tmp_path):
    want = 0o666 & ~umask
    checkpoint.save(tmp_path / "ck.npz", values, "m")
    gd.save(gd.load(small), tmp_path / "g.flowc")
    with open(tmp_path / "plain", "w"):
        pass
    for name in ("plain", "ck.npz", "g.flowc"):
        assert stat.S_IMODE(os.stat(tmp_path / name).st_mode) == want, (name, oct(want))


def test_a_failed_save_leaves_the_old_file_and_no_temporary(values, small, tmp_path, monkeypatch):
    target = tmp_path / "ck.npz"
    checkpoint.save(target, values, "m")
    old = target.read_bytes()

    def broken(*args, **kw):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "savez", broken)
    with pytest.raises(CheckpointError, match=r"ck\.npz.*No space left"):
        checkpoint.save(target, {"w": np.zeros(3, np.float32)}, "m")
    assert target.read_bytes() == old and os.listdir(tmp_path) == ["ck.npz"]


# ----------------------------------------------------------------------------- 3. flowc inspect --svg


@pytest.mark.parametrize("kind", ["symlink", "dangling", "hardlink"])
def test_inspect_svg_replaces_a_link_at_the_path_not_what_it_points_to(kind, small, tmp_path, capsys):
    from codegen import cli

    svg, victim = tmp_path / "plan.svg", tmp_path / "victim"
    _plant(kind, svg, victim)
    assert cli.main(["inspect", str(small), "--svg", str(svg)]) == 0
    capsys.readouterr()
    assert _victim_untouched(kind, victim)
    assert stat.S_ISREG(os.lstat(svg).st_mode) and svg.read_text().lstrip().startswith("<")
    umask = os.umask(0o022)
    os.umask(umask)
    assert stat.S_IMODE(os.stat(svg).st_mode) == 0o666 & ~umask
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["plan.svg"] + ["victim"] * victim.exists())
