"""runtime_c/files.c, the file handling every generated binary goes through: reads refuse
anything but regular files without blocking, temporaries never go through links and follow the
umask, and a set of files is put in place all or none without ever losing what was there."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from codegen.backends.c.emit import RUNTIME
from codegen.backends.c.toolchain import STRICT

from .conftest import CC

pytestmark = pytest.mark.c

HARNESS = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "files.h"

static int put_text(const char *path, const char *text, fc_file_set *s) {
    FILE *fp;
    char err[512];
    s->path = path;
    if (fc_file_temp(path, &s->tmp, &fp, err, sizeof err) != 0) {
        fprintf(stderr, "error: %s\n", err);
        return -1;
    }
    fputs(text, fp);
    return fc_file_close(fp, 0, path, err, sizeof err);
}

/* harness MODE PATH... */
int main(int argc, char **argv) {
    char err[512];
    fc_file_set set[4];
    int n = argc - 3, i, rc;
    const char *mode = argv[1];
    memset(set, 0, sizeof set);
    if (strcmp(mode, "read") == 0) {
        size_t size;
        int fd = fc_file_open_read(argv[2], &size, err, sizeof err);
        if (fd < 0) { fprintf(stderr, "error: %s\n", err); return 1; }
        printf("%lu\n", (unsigned long)size);
        close(fd);
        return 0;
    }
    if (strcmp(mode, "writable") == 0) {
        if (fc_file_check_writable(argv[2], err, sizeof err) != 0) {
            fprintf(stderr, "error: %s\n", err);
            return 1;
        }
        return 0;
    }
    /* commit / commit-then-rollback / commit-after-moving-DIR: argv[2] a text, argv[3..] paths */
    n = argc - 3;
    for (i = 0; i < n; ++i)
        if (put_text(argv[3 + i], argv[2], &set[i]) != 0) return 2;
    if (strcmp(mode, "commit-lose-last") == 0) { /* the last temporary vanishes: its rename fails */
        unlink(set[n - 1].tmp);
    }
    rc = fc_files_commit(set, n, err, sizeof err);
    if (rc != 0) {
        fprintf(stderr, "error: %s\n", err);
        fc_files_finish(set, n);
        return 3;
    }
    if (strcmp(mode, "commit-rollback") == 0) fc_files_rollback(set, n);
    fc_files_finish(set, n);
    return 0;
}
"""


@pytest.fixture(scope="module")
def harness(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("files")
    (root / "h.c").write_text(HARNESS)
    exe = root / "h"
    cmd = [CC, *STRICT, "-fsanitize=address,undefined", "-fno-sanitize-recover=all", f"-I{RUNTIME}",
           str(root / "h.c"), str(RUNTIME / "files.c"), "-o", str(exe)]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode:  # no sanitizer runtime here: the plain build
        cmd = [c for c in cmd if not c.startswith("-fsanitize") and c != "-fno-sanitize-recover=all"]
        res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[:3000]
    return exe


def run(harness, *args):
    return subprocess.run([str(harness), *map(str, args)], capture_output=True, text=True, timeout=20)


def listing(folder: Path) -> dict:
    return {p.name: p.read_text() if p.is_file() else "<dir>" for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("kind", ["fifo", "folder", "socket"])
def test_reads_refuse_what_is_not_a_regular_file_without_blocking(harness, tmp_path, kind):
    path = tmp_path / "thing"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    else:
        import socket

        s = socket.socket(socket.AF_UNIX)
        s.bind(str(path))
    res = run(harness, "read", path)
    why = "cannot open (No such device" if kind == "socket" else "not a regular file"  # no open() on a socket
    assert res.returncode == 1 and why in res.stderr, res.stderr


def test_reads_follow_a_link_to_a_regular_file(harness, tmp_path):
    (tmp_path / "real").write_bytes(b"12345")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert run(harness, "read", tmp_path / "link").stdout == "5\n"


@pytest.mark.parametrize("mask", [0o022, 0o002, 0o077])
def test_new_files_follow_the_umask_and_never_go_through_links(harness, tmp_path, mask):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "a").symlink_to(victim)
    old = os.umask(mask)
    try:
        assert run(harness, "commit", "new", tmp_path / "a").returncode == 0
    finally:
        os.umask(old)
    assert victim.read_text() == "keep" and not (tmp_path / "a").is_symlink()
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o666 & ~mask
    assert listing(tmp_path) == {"a": "new", "victim": "keep"}


def test_a_folder_in_the_way_of_the_second_file_keeps_the_first_files_previous_content(harness, tmp_path):
    (tmp_path / "a").write_text("old a")
    (tmp_path / "b").mkdir()
    res = run(harness, "commit", "new", tmp_path / "a", tmp_path / "b")
    assert res.returncode == 3 and "b: cannot write (a folder" in res.stderr, res.stderr
    assert listing(tmp_path) == {"a": "old a", "b": "<dir>"}


def test_a_rename_failing_after_others_succeeded_puts_every_previous_file_back(harness, tmp_path):
    (tmp_path / "a").write_text("old a")
    (tmp_path / "c").write_text("old c")
    res = run(harness, "commit-lose-last", "new", tmp_path / "a", tmp_path / "b", tmp_path / "c")
    assert res.returncode == 3 and "c: cannot write" in res.stderr, res.stderr
    assert listing(tmp_path) == {"a": "old a", "c": "old c"}  # b had no file: none now


def test_a_rollback_after_the_commit_puts_every_previous_file_back(harness, tmp_path):
    (tmp_path / "a").write_text("old a")
    assert run(harness, "commit-rollback", "new", tmp_path / "a", tmp_path / "b").returncode == 0
    assert listing(tmp_path) == {"a": "old a"}
    assert run(harness, "commit", "new", tmp_path / "a", tmp_path / "b").returncode == 0
    assert listing(tmp_path) == {"a": "new", "b": "new"}


@pytest.mark.parametrize("where", ["folder", "missing", "under a file"])
def test_writable_checks_say_why(harness, tmp_path, where):
    (tmp_path / "file").write_text("x")
    path = {
        "folder": tmp_path,
        "missing": tmp_path / "no" / "ck.npz",
        "under a file": tmp_path / "file" / "ck",
    }[where]
    res = run(harness, "writable", path)
    assert res.returncode == 1 and res.stderr.startswith("error: ") and res.stderr.count("\n") == 1, (
        res.stderr
    )
    assert listing(tmp_path) == {"file": "x"}
