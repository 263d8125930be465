"""Standalone binaries under hostile use: huge --bench counts, links planted in the output
folder, failing writes, clashing output names, hostile .npy headers, error messages, bad
arguments and bad .npy input files, untrusted graph and node names in the generated C."""

from __future__ import annotations

import importlib.util
import json
import os
import resource
import shlex
import signal
import subprocess
from pathlib import Path

import numpy as np
import pytest

import codegen
import graphdef as gd
from codegen.backends.c import toolchain

ROOT = Path(__file__).resolve().parents[2]
X = np.array([-1.0, 2.0, -3.0], np.float32)
PATTERN = "-ftrivial-auto-var-init=pattern"  # uninitialised locals read as 0xfe.., not as zeros


def _pattern_flags() -> list[str]:
    """PATTERN where the compiler knows it: a message read from an uninitialised buffer then
    shows as garbage every time, not only when the stack happens to be dirty."""
    try:
        cc = toolchain.find_cc()
    except Exception:  # noqa: BLE001 - no compiler: the tests that need one are skipped anyway
        return []
    res = subprocess.run(
        [*shlex.split(cc), PATTERN, "-x", "c", "-fsyntax-only", "-"],
        input="int main(void) { return 0; }\n",
        capture_output=True,
        text=True,
    )
    return [PATTERN] if res.returncode == 0 else []


@pytest.fixture(scope="module")
def net(tmp_path_factory) -> Path:
    """x (3,) -> y = relu(x), built as the binary net (locals pattern-initialised)."""
    with gd.Graph("g") as g:
        gd.relu(gd.placeholder("x", (3,)), name="y")
    out = codegen.export(g, tmp_path_factory.mktemp("net") / "out", name="net", flags=_pattern_flags())
    return out / "net"


@pytest.fixture(scope="module")
def two(tmp_path_factory) -> Path:
    """Two outputs: a small one, a = relu(x) (140 bytes), then a larger one, b = tile(x) (12 KB)."""
    with gd.Graph("g") as g:
        x = gd.placeholder("x", (3,))
        gd.relu(x, name="a")
        gd.tile(x, (1000,), name="b")
    out = codegen.export(g, tmp_path_factory.mktemp("two") / "out", name="net", outputs=["a", "b"])
    return out / "net"


def _run(binary: Path, tmp_path: Path, *extra, x_path: Path | None = None, **kw):
    if x_path is None:
        x_path = tmp_path / "x.npy"
        np.save(x_path, X)
    args = [str(binary), "--in", f"x={x_path}", "--out-dir", str(tmp_path / "res"), *extra]
    return subprocess.run(args, capture_output=True, **{"timeout": 60, **kw})


def _one_error_line(res) -> str:
    """stderr: exactly one line, 'net: error: ...', of printable ASCII only."""
    assert res.returncode > 0, (res.returncode, res.stderr[-300:])
    assert res.stderr.endswith(b"\n") and res.stderr.count(b"\n") == 1, res.stderr[-300:]
    line = res.stderr[:-1]
    assert all(32 <= c < 127 for c in line), line[:300]
    text = line.decode("ascii")
    assert text.startswith("net: error: "), text
    return text


def _npy(header: str | bytes, data: bytes = b"", pad: bool = True) -> bytes:
    """A version 1.0 .npy file with this header text, padded as numpy pads it (or not)."""
    if isinstance(header, str):
        header = header.encode("latin-1")
    if pad:
        header += b" " * (-(10 + len(header) + 1) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + data


# ----------------------------------------------------------------------------- 1. --bench
@pytest.mark.c
@pytest.mark.parametrize("count", ["2305843009213693953", "4611686018427387905", "100000001", "9" * 30])
def test_bench_counts_whose_timing_buffer_would_not_fit_are_refused(net, tmp_path, count):
    # 2**61 + 1 and 2**62 + 1 doubles wrap sizeof(double) * count around to 8 bytes: the old
    # binary wrote past that buffer (a segfault); the bound is 100000000 runs
    res = _run(net, tmp_path, "--bench", count, timeout=20)
    assert res.returncode == 2
    assert "--bench expects a count of at most 100000000" in _one_error_line(res)
    assert not (tmp_path / "res").exists()
    res = _run(net, tmp_path, "--bench", "5")  # a sane count still times the runs
    assert res.returncode == 0 and res.stdout.startswith(b"median_us="), res.stderr
    assert np.load(tmp_path / "res" / "y.npy").tolist() == [0, 2, 0]


# ----------------------------------------------------------------------------- 2. planted links
@pytest.mark.c
@pytest.mark.parametrize("kind", ["symlink", "dangling", "hardlink"])
def test_links_planted_in_the_output_folder_are_never_written_through(net, tmp_path, kind):
    res_dir = tmp_path / "res"
    res_dir.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious")
    planted = res_dir / ".y.npy.tmp"  # the old binary's temporary name
    if kind == "symlink":
        planted.symlink_to(victim)
    elif kind == "dangling":
        planted.symlink_to(tmp_path / "created")
    else:
        os.link(victim, planted)
    other = tmp_path / "other.txt"
    other.write_bytes(b"precious too")
    (res_dir / "y.npy").symlink_to(other)  # a link at the final name: replaced, not followed
    res = _run(net, tmp_path)
    assert res.returncode == 0, res.stderr
    assert victim.read_bytes() == b"precious" and other.read_bytes() == b"precious too"
    assert not (tmp_path / "created").exists()
    assert planted.is_symlink() == (kind != "hardlink") and os.path.lexists(planted)
    out = res_dir / "y.npy"
    assert not out.is_symlink() and np.load(out).tolist() == [0, 2, 0]
    assert sorted(p.name for p in res_dir.iterdir()) == [".y.npy.tmp", "y.npy"]  # no temporaries left
    umask = os.umask(0)  # mkstemp creates 0600: outputs still get 0666 less the umask, as fopen gave
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask


# ----------------------------------------------------------------------------- 3. all or none
def _limit_file_size():
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))  # a: 140 bytes fit, b: 12128 do not
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # write() fails with EFBIG instead


@pytest.mark.c
def test_a_failing_later_write_leaves_no_output(two, tmp_path):
    res = _run(two, tmp_path, preexec_fn=_limit_file_size)
    assert not (tmp_path / "res").exists()  # neither a.npy nor a temporary, nor the folder it made
    assert res.returncode == 4
    assert "b.npy: write failed" in _one_error_line(res)


@pytest.mark.c
def test_a_failing_later_rename_leaves_no_output(two, tmp_path):
    (tmp_path / "res" / "b.npy" / "sub").mkdir(parents=True)  # b.npy cannot be renamed over
    res = _run(two, tmp_path)
    assert [p.name for p in (tmp_path / "res").iterdir()] == ["b.npy"]  # a.npy taken back, no temporary
    assert res.returncode == 4
    assert "cannot write" in _one_error_line(res) and "b.npy" in res.stderr.decode()
    (tmp_path / "ok").mkdir()
    res = _run(two, tmp_path / "ok")
    assert res.returncode == 0, res.stderr  # the same binary writes both where it can


# ----------------------------------------------------------------------------- 4. unique names
OUTPUTS = {"y/2": gd.relu, "out_y_2": gd.neg, "Y": gd.abs, "y": gd.exp, "z": gd.sigmoid}


def _clashing_graph() -> gd.Graph:
    with gd.Graph("g") as g:
        x = gd.placeholder("x", (3,))
        for name, op in OUTPUTS.items():
            op(x, name=name)
    return g


@pytest.mark.c
def test_output_file_names_are_unique_ignoring_case(tmp_path):
    out = codegen.export(
        _clashing_graph(), tmp_path / "o", name="net", outputs=list(OUTPUTS), build_binary=False
    )
    files = {t["name"]: t["file"] for t in json.loads((out / "metadata.json").read_text())["outputs"]}
    assert set(files) == set(OUTPUTS)
    assert len({f.casefold() for f in files.values()}) == len(OUTPUTS), files
    # outputs whose own names are file names keep them (the first of Y and y)
    assert files["out_y_2"] == "out_y_2.npy" and files["Y"] == "Y.npy" and files["z"] == "z.npy"
    main_c = (out / "main.c").read_text()
    for f in files.values():
        assert main_c.count(f'"{f}"') == 1, f


@pytest.mark.c
def test_clashing_outputs_each_get_their_own_file(tmp_path):
    out = codegen.export(_clashing_graph(), tmp_path / "o", name="net", outputs=list(OUTPUTS))
    res = _run(out / "net", tmp_path)
    assert res.returncode == 0, res.stderr
    meta = json.loads((out / "metadata.json").read_text())
    written = sorted(p.name for p in (tmp_path / "res").iterdir())
    assert written == sorted(t["file"] for t in meta["outputs"])
    want = dict(zip(OUTPUTS, gd.Session(_clashing_graph()).run({"x": X}, list(OUTPUTS))))
    for t in meta["outputs"]:
        np.testing.assert_allclose(
            np.load(tmp_path / "res" / t["file"]), want[t["name"]], rtol=1e-6, err_msg=t["name"]
        )


# ----------------------------------------------------------------------------- 5. escaped messages
@pytest.mark.c
@pytest.mark.parametrize(
    "descr",
    [b"\x1b]0;owned\x07", b"\x1b[2J\x1b[H" + b"A" * 5000, b"<f4\x9b31m\r\n"],
    ids=["osc", "long", "c1"],
)
def test_reader_messages_escape_and_bound_header_bytes(net, tmp_path, descr):
    bad = tmp_path / "x.npy"
    bad.write_bytes(
        _npy(b"{'descr': '" + descr + b"', 'fortran_order': False, 'shape': (3,), }", X.tobytes())
    )
    res = _run(net, tmp_path, x_path=bad)
    line = _one_error_line(res)
    assert res.returncode == 2 and "unsupported dtype" in line
    assert ("\\x1b" if descr[0] == 0x1B else "\\x9b") in line
    assert len(line) < 300 + len(str(bad)), len(line)


@pytest.mark.c
def test_error_lines_escape_argument_bytes(net, tmp_path):
    res = subprocess.run(
        [str(net), "--in", "\x1b[31mevil\x07=a.npy", "--out-dir", str(tmp_path / "res")],
        capture_output=True,
        timeout=60,
    )
    assert res.returncode == 2
    assert "unknown input '\\x1b[31mevil\\x07'" in _one_error_line(res)


# ----------------------------------------------------------------------------- 6. uninitialised msg
@pytest.mark.c
def test_a_failing_rename_reports_its_own_reason(net, tmp_path):
    # the old binary printed msg here without having written it: garbage from the stack
    (tmp_path / "res" / "y.npy" / "sub").mkdir(parents=True)
    res = _run(net, tmp_path)
    assert res.returncode == 4
    line = _one_error_line(res)
    assert line.startswith("net: error: ") and "y.npy: cannot write (" in line, line[:300]
    assert [p.name for p in (tmp_path / "res").iterdir()] == ["y.npy"]


# ----------------------------------------------------------------------------- 7. byte counts
@pytest.mark.c
@pytest.mark.parametrize(
    "header,message",
    [
        # 2**62 float32 elements: 2**64 bytes, which wrapped to 0 (a file with no data passed)
        ("{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904,), }", "shape too large"),
        ("{'descr': '<i8', 'fortran_order': False, 'shape': (2147483648, 2147483648), }", "shape too large"),
        ("{'descr': '<f8', 'fortran_order': False, 'shape': (2305843009213693952,), }", "shape too large"),
        ("{'descr': '', 'fortran_order': False, 'shape': (3,), }", "empty dtype in .npy header"),
        # no closing quote: the old reader took the dtype up to the end of the header
        ("{'fortran_order': False, 'shape': (3,), 'descr': '<f4", "malformed dtype in .npy header"),
    ],
    ids=["f4-wraps", "i8-2d-wraps", "f8-wraps", "empty-dtype", "unterminated-dtype"],
)
def test_reader_refuses_byte_counts_that_wrap_and_empty_dtypes(net, tmp_path, header, message):
    bad = tmp_path / "x.npy"
    data = X.tobytes() if "'shape': (3,)" in header else b""
    bad.write_bytes(_npy(header, data, pad=header.endswith("}")))
    res = _run(net, tmp_path, x_path=bad)
    assert res.returncode == 2
    assert message in _one_error_line(res)
    assert not (tmp_path / "res").exists()
    good = tmp_path / "good.npy"  # the same hand-made header with a sane shape and dtype is read
    good.write_bytes(_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", X.tobytes()))
    res = _run(net, tmp_path, x_path=good)
    assert res.returncode == 0, res.stderr
    assert np.load(tmp_path / "res" / "y.npy").tolist() == [0, 2, 0]


# ----------------------------------------------------------------------------- 8. bad arguments and files
# the digits sample as the binary net (x: float32 (1, 64)); the same fixture and helpers as in
# tests/codegen/test_binary.py, whose tests use them too
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


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    mod, g = digits_graph()
    out = codegen.export(g, tmp_path_factory.mktemp("d") / "out", name="net")
    _, _, tx, _ = mod.load_data()
    return g, out, tx[:1]


def _bad_npy(path: Path, kind: str):
    x = np.zeros((1, 64), np.float32)
    if kind == "shape":
        np.save(path, np.zeros((2, 64), np.float32))
    elif kind == "dtype":
        np.save(path, x.astype(np.float64))
    elif kind == "truncated":
        np.save(path, x)
        path.write_bytes(path.read_bytes()[:-10])
    elif kind == "garbage":
        path.write_bytes(b"not numpy at all")
    elif kind == "fortran":
        np.save(path, np.asfortranarray(np.zeros((2, 64), np.float32)))


@pytest.mark.c
@pytest.mark.parametrize(
    "kind,message",
    [
        ("shape", "input 'x' (.*) has shape (2, 64), expected (1, 64)"),
        ("dtype", "has dtype float64, expected float32"),
        ("truncated", "expected 384 for a float32 array of 64 elements"),
        ("garbage", "not a .npy file"),
        ("fortran", "Fortran-order arrays are not supported"),
    ],
)
def test_bad_input_files_fail_cleanly(digits, tmp_path, kind, message):
    _, out, _ = digits
    bad = tmp_path / "x.npy"
    _bad_npy(bad, kind)
    res = subprocess.run(
        [str(out / "net"), "--in", f"x={bad}", "--out-dir", str(tmp_path / "res")],
        capture_output=True,
        text=True,
    )
    assert res.returncode != 0
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("net: error: ")
    import re

    assert re.search(re.escape(message).replace("\\.\\*", ".*"), lines[0]), lines[0]
    assert not (tmp_path / "res").exists() or not list((tmp_path / "res").iterdir())


@pytest.mark.c
@pytest.mark.parametrize(
    "args,message",
    [
        ([], "missing --out-dir"),
        (["--out-dir", "RES"], "missing --in x=FILE.npy"),
        (["--in", "y=a.npy", "--out-dir", "RES"], "unknown input 'y'"),
        (["--in", "x", "--out-dir", "RES"], "--in expects NAME=FILE.npy"),
        (["--bogus"], "unexpected argument '--bogus'"),
        (["--in", "x=missing.npy", "--out-dir", "RES"], "cannot open"),
    ],
)
def test_bad_arguments_fail_cleanly(digits, tmp_path, args, message):
    _, out, _ = digits
    args = [a.replace("RES", str(tmp_path / "res")) for a in args]
    res = subprocess.run([str(out / "net"), *args], capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode != 0 and message in res.stderr and len(res.stderr.strip().splitlines()) == 1


# ----------------------------------------------------------------------------- 9. untrusted names
@pytest.mark.c
def test_untrusted_names_never_reach_c_unescaped(tmp_path):
    evil = 'x"); system("rm -rf /"); /* */ \\'
    with gd.Graph("g*/ evil") as g:
        x = gd.placeholder("in", (2,))
        gd.relu(x, name=evil.replace(":", ""))
    out = codegen.export(g, tmp_path / "e", name="evil")
    for f in ("evil.c", "evil.h", "main.c"):
        code = _strip_comments_and_strings((out / f).read_text())
        assert "system(" not in code and "rm -rf" not in code, f
    res = run_binary(out / "evil", {"in": np.array([-1, 2], np.float32)}, tmp_path / "res")
    assert res.returncode == 0, res.stderr
    files = list((tmp_path / "res").iterdir())
    assert len(files) == 1 and np.load(files[0]).tolist() == [0, 2]


def _strip_comments_and_strings(src: str) -> str:
    """C source without its comments and string literals (what the compiler treats as code)."""
    out, i = [], 0
    while i < len(src):
        if src.startswith("/*", i):
            i = src.index("*/", i + 2) + 2
        elif src[i] == '"':
            i += 1
            while src[i] != '"':
                i += 2 if src[i] == "\\" else 1
            i += 1
        else:
            out.append(src[i])
            i += 1
    return "".join(out)
