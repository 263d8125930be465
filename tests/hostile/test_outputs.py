"""Output folders under careless use: ``flowc compile -o DIR`` writes a new folder and moves
it into place, replaces only a folder flowc wrote (codegen/outdir.py), refuses anything else
in one line before any work, and gives new folders the permissions the umask allows."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import numpy as np
import pytest

import codegen
import graphdef as gd
from codegen import cli, outdir


@pytest.fixture
def model(tmp_path) -> Path:
    with gd.Graph("g") as g:
        gd.relu(gd.placeholder("x", (3,)) * gd.constant(np.float32(2.0)), name="y")
    path = tmp_path / "model.flowc"
    gd.save(g, path)
    return path


def compile_cli(model, out, capsys, *extra) -> tuple[int, str]:
    code = cli.main(["compile", str(model), "-o", str(out), "--name", "net", "--no-build", *extra])
    return code, capsys.readouterr().err


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("flowc: error: -o "), err
    return lines[0]


def snapshot(folder: Path) -> dict:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def leftovers(folder: Path) -> list[str]:
    """Temporary folders flowc left beside its outputs."""
    return sorted(p.name for p in folder.iterdir() if ".tmp-" in p.name or ".old-" in p.name)


def test_a_folder_of_the_users_is_refused_and_kept(model, tmp_path, capsys):
    proj = tmp_path / "proj"
    (proj / "src").mkdir(parents=True)
    (proj / "README.txt").write_text("mine\n")
    (proj / "src" / "app.c").write_text("int main(void) { return 0; }\n")
    before = snapshot(proj)
    code, err = compile_cli(model, proj, capsys)
    assert code == 1
    assert "README.txt" in one_line(err) and "not replaced" in err
    assert snapshot(proj) == before and leftovers(tmp_path) == []


def test_the_folder_holding_the_model_is_refused(model, tmp_path, capsys, monkeypatch):
    (tmp_path / "notes.txt").write_text("notes\n")
    monkeypatch.chdir(tmp_path)
    before = snapshot(tmp_path)
    for out in (".", "..", str(tmp_path)):
        code, err = compile_cli(model.name, out, capsys)
        assert code == 1, out
        one_line(err)
    assert snapshot(tmp_path) == before and leftovers(tmp_path) == [] and leftovers(tmp_path.parent) == []


def test_a_file_is_never_replaced_by_a_folder(model, tmp_path, capsys):
    target = tmp_path / "file.txt"
    target.write_text("keep\n")
    code, err = compile_cli(model, target, capsys)
    assert code == 1 and "never replaces a file" in one_line(err)
    assert target.read_text() == "keep\n"


@pytest.mark.parametrize("kind", ["to a folder", "dangling"])
def test_a_link_at_the_output_name_is_refused(model, tmp_path, capsys, kind):
    real = tmp_path / "real"
    if kind == "to a folder":
        real.mkdir()
        (real / "data.bin").write_bytes(b"\x00" * 10)
    link = tmp_path / "out"
    link.symlink_to(real)
    code, err = compile_cli(model, link, capsys)
    assert code == 1 and "symbolic link" in one_line(err)
    assert link.is_symlink() and (kind != "to a folder" or (real / "data.bin").read_bytes() == b"\x00" * 10)


def test_a_parent_that_cannot_hold_a_folder_gives_one_line(model, tmp_path, capsys):
    (tmp_path / "plain").write_text("x")
    code, err = compile_cli(model, tmp_path / "plain" / "out", capsys)
    assert code == 1 and "plain" in one_line(err)
    code, err = compile_cli(model, "/proc/flowc-test/out", capsys)
    assert code == 1
    one_line(err)


def test_a_folder_flowc_wrote_is_replaced_with_its_build_products(model, tmp_path, capsys):
    out = tmp_path / "out"
    assert compile_cli(model, out, capsys)[0] == 0
    first = snapshot(out)
    assert outdir.MANIFEST in first and "net.c" in first and "metadata.json" in first
    (out / "net.o").write_bytes(b"object")  # what `make` leaves there
    (out / "build").mkdir()
    (out / "build" / "CMakeCache.txt").write_text("cmake")
    code, err = compile_cli(model, out, capsys)
    assert code == 0, err
    assert snapshot(out) == first and leftovers(tmp_path) == []


def test_a_microcontroller_folder_whose_firmware_ran_is_replaced(tmp_path, capsys):
    """Running the firmware (codegen's run_firmware) rewrites firmware_data.h with its inputs:
    the folder stays flowc's, and the next compile replaces it (a second ``make demo``)."""
    if shutil.which("arm-none-eabi-gcc") is None:
        pytest.skip("no arm-none-eabi-gcc (Debian: gcc-arm-none-eabi)")
    with gd.Graph("g") as g:
        gd.relu(gd.placeholder("x", (3,)) * gd.constant(np.float32(2.0)), name="y")
    model = tmp_path / "model.flowc"
    gd.save(g, model)
    out = tmp_path / "out"
    assert compile_cli(model, out, capsys, "--arch", "cortex-m4")[0] == 0
    (out / "firmware_data.h").write_text("/* the inputs of the last run */\n")
    code, err = compile_cli(model, out, capsys, "--arch", "cortex-m4")
    assert code == 0, err
    assert (out / "firmware_data.h").read_text() != "/* the inputs of the last run */\n"


@pytest.mark.parametrize("change", ["a new file", "an edited source", "a source replaced by a link"])
def test_a_flowc_folder_the_user_changed_is_refused(model, tmp_path, capsys, change):
    out = tmp_path / "out"
    assert compile_cli(model, out, capsys)[0] == 0
    if change == "a new file":
        (out / "notes.txt").write_text("mine")
    elif change == "an edited source":
        with open(out / "main.c", "a") as f:
            f.write("/* my change */\n")
    else:
        (out / "main.c").unlink()
        (out / "main.c").symlink_to(tmp_path / "model.flowc")
    before = snapshot(out)
    code, err = compile_cli(model, out, capsys)
    assert code == 1 and ("notes.txt" if change == "a new file" else "main.c") in one_line(err)
    assert snapshot(out) == before


@pytest.mark.parametrize("mask", [0o022, 0o002, 0o077])
def test_new_folders_follow_the_umask(model, tmp_path, capsys, mask):
    old = os.umask(mask)
    try:
        out = tmp_path / "deep" / "out"
        assert compile_cli(model, out, capsys)[0] == 0
    finally:
        os.umask(old)
    for folder in (out, out / "runtime", tmp_path / "deep"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o777 & ~mask, folder
    assert stat.S_IMODE((out / "main.c").stat().st_mode) == 0o666 & ~mask


def test_the_python_api_refuses_too(tmp_path):
    with gd.Graph("g") as g:
        gd.relu(gd.placeholder("x", (3,)), name="y")
    (tmp_path / "keep.txt").write_text("keep")
    with pytest.raises(gd.FlowcError, match="keep.txt"):
        codegen.export(g, tmp_path, name="net", build_binary=False)
    with pytest.raises(gd.FlowcError, match="keep.txt"):
        codegen.exports.export_trainer(g, tmp_path, name="net", build_binary=False)
    assert (tmp_path / "keep.txt").read_text() == "keep"
