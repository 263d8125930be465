""".npz archives in C (runtime_c/npz.c): numpy's archives read through mmap, archives written for
np.load, and damaged or hostile files refused with one line, never a crash (under ASan + UBSan).

A small harness program drives it: ``read FILE`` prints one line per member (name as hex, dtype,
shape, nbytes, CRC-32 of the data, whether the data is 64-byte aligned); ``write OUT`` writes the
entries ``WRITTEN`` describes; errors go to stderr as ``error: ...`` with exit status 1.
"""

from __future__ import annotations

import io
import os
import shutil
import struct
import subprocess
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest

RUNTIME = Path(__file__).resolve().parents[2] / "runtime_c"
CC = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
STRICT = ["-std=c99", "-Wall", "-Wextra", "-Werror"]
SANITIZE = ["-O1", "-g1", "-fsanitize=address,undefined", "-fno-sanitize-recover=all"]
# a sanitizer report exits 99: never confused with the harness's own 1
SAN_ENV = {"ASAN_OPTIONS": "detect_leaks=1:exitcode=99", "UBSAN_OPTIONS": "print_stacktrace=1:exitcode=99"}

HARNESS = r"""
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "npz.h"

static int report(const char *err) {
    fc_npy_error_line("error: ", err);
    return 1;
}

static int print_archive(fc_npz *z) {
    const unsigned char *lo = (const unsigned char *)z->map, *hi = lo + z->map_bytes;
    int i, k;
    for (i = 0; i < z->count; ++i) {
        const fc_npz_member *m = &z->members[i];
        const unsigned char *d = (const unsigned char *)m->array.data, *n;
        if (d < lo || d > hi || m->array.nbytes > (size_t)(hi - d)) return 3; /* data outside the file */
        if (fc_npz_find(z, m->name) != m) return 4;
        printf("%s ", m->name[0] ? "" : "-");
        for (n = (const unsigned char *)m->name; *n; ++n) printf("%02x", *n);
        printf(" %s (", m->array.dtype);
        for (k = 0; k < m->array.rank; ++k) printf("%s%ld", k ? "," : "", m->array.shape[k]);
        printf(") %lu %08lx %d\n", (unsigned long)m->array.nbytes, fc_crc32(0, d, m->array.nbytes),
               (int)((uintptr_t)d % 64 == 0));
    }
    if (fc_npz_find(z, "\x01 no such member") != NULL) return 5;
    fc_npz_close(z);
    fc_npz_close(z); /* twice: safe */
    return 0;
}

int main(int argc, char **argv) {
    char err[512];
    fc_npz z;
    static const float weights[6] = {0.5f, -1.0f, 2.25f, 3.0f, 4.0f, -5.5f};
    static const long long step = 42;
    static const unsigned char bytes[5] = {0, 1, 127, 128, 255};
    static const double wide[2] = {1e300, -0.0};
    static const unsigned char flags[3] = {1, 0, 1};
    static const short deep[2] = {7, -8};
    static const long s_weights[] = {2, 3}, s_bytes[] = {5}, s_wide[] = {2}, s_flags[] = {3},
                      s_empty[] = {0, 4}, s_deep[] = {1, 1, 1, 1, 1, 1, 1, 2}, s_huge[] = {1L << 32};
    fc_npz_entry written[] = {
        {"weights", "float32", 2, s_weights, weights}, {"step", "int64", 0, NULL, &step},
        {"bytes", "uint8", 1, s_bytes, bytes},         {"dir/sub", "float64", 1, s_wide, wide},
        {"caf\xc3\xa9", "bool", 1, s_flags, flags},    {"raw\xff", "int32", 2, s_empty, NULL},
        {"x", "int16", 8, s_deep, deep},
    };
    if (argc == 3 && strcmp(argv[1], "read") == 0) {
        if (fc_npz_open(argv[2], &z, err, sizeof err) != 0) return report(err);
        return print_archive(&z);
    }
    if (argc == 4 && strcmp(argv[1], "npy") == 0) {
        if (fc_npz_open_npy(argv[2], strcmp(argv[3], "-") ? argv[3] : NULL, &z, err, sizeof err) != 0)
            return report(err);
        return print_archive(&z);
    }
    if (argc == 3 && strcmp(argv[1], "crc") == 0) { /* of a file, in two pieces */
        static unsigned char buf[1 << 16];
        FILE *fp = fopen(argv[2], "rb");
        size_t n = fp ? fread(buf, 1, sizeof buf, fp) : 0;
        if (fp) fclose(fp);
        printf("%08lx\n", fc_crc32(fc_crc32(0, buf, n / 3), buf + n / 3, n - n / 3));
        return 0;
    }
    if (argc == 3 && strcmp(argv[1], "write") == 0) {
        if (fc_npz_save(argv[2], written, (int)(sizeof written / sizeof *written), err, sizeof err) != 0)
            return report(err);
        return 0;
    }
    if (argc == 3 && strcmp(argv[1], "write-many") == 0) { /* 65535 members: would need zip64 */
        fc_npz_entry *many = (fc_npz_entry *)calloc(65535, sizeof *many);
        int rc = many ? fc_npz_save(argv[2], many, 65535, err, sizeof err) : -1;
        free(many);
        return rc ? report(err) : 0;
    }
    if (argc == 3 && strcmp(argv[1], "write-huge") == 0) { /* 4 GiB of uint8: never read */
        fc_npz_entry huge[] = {{"a", "float32", 2, s_weights, weights}, {"huge", "uint8", 1, s_huge, bytes}};
        return fc_npz_save(argv[2], huge, 2, err, sizeof err) ? report(err) : 0;
    }
    if (argc == 3 && strcmp(argv[1], "write-bad") == 0) {
        fc_npz_entry bad[] = {{"a", "float32", 2, s_weights, weights}, {"b", "complex64", 1, s_bytes, bytes}};
        return fc_npz_save(argv[2], bad, 2, err, sizeof err) ? report(err) : 0;
    }
    if (argc == 3 && strcmp(argv[1], "write-dup") == 0) {
        fc_npz_entry dup[] = {{"a", "float32", 2, s_weights, weights}, {"a", "uint8", 1, s_bytes, bytes}};
        return fc_npz_save(argv[2], dup, 2, err, sizeof err) ? report(err) : 0;
    }
    fprintf(stderr, "usage: harness read|write|... FILE\n");
    return 2;
}
"""

# what ``harness write`` writes, as np.load gives it back (names without the UTF-8 flag in cp437)
WRITTEN = {
    "weights": np.array([[0.5, -1, 2.25], [3, 4, -5.5]], np.float32),
    "step": np.array(42, np.int64),
    "bytes": np.array([0, 1, 127, 128, 255], np.uint8),
    "dir/sub": np.array([1e300, -0.0]),
    "café": np.array([True, False, True]),
    b"raw\xff".decode("cp437"): np.zeros((0, 4), np.int32),
    "x": np.array([7, -8], np.int16).reshape(1, 1, 1, 1, 1, 1, 1, 2),
}
WRITTEN_RAW = {b"raw\xff".decode("cp437"): b"raw\xff"}  # names whose bytes are not their UTF-8


def _build(tmp_path_factory, name, flags):
    if CC is None:
        pytest.skip("no C compiler")
    root = tmp_path_factory.mktemp(name)
    src = root / "harness.c"
    src.write_text(HARNESS)
    exe = root / "harness"
    sources = (str(RUNTIME / f) for f in ("npz.c", "npy.c", "files.c"))
    cmd = [CC, *STRICT, *flags, f"-I{RUNTIME}", str(src), *sources]
    res = subprocess.run([*cmd, "-o", str(exe)], capture_output=True, text=True)
    if res.returncode and "-fsanitize=address,undefined" in flags:
        pytest.skip(f"no sanitizers here: {res.stderr[:200]}")
    assert res.returncode == 0, f"{' '.join(cmd)}\n{res.stderr[:4000]}"
    return exe


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    return _build(tmp_path_factory, "npz_plain", ["-O2"])


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    """The harness under AddressSanitizer and UndefinedBehaviorSanitizer."""
    return _build(tmp_path_factory, "npz_asan", SANITIZE)


def run(exe, *args):
    res = subprocess.run([str(exe), *map(str, args)], capture_output=True, env={**os.environ, **SAN_ENV})
    return res.returncode, res.stdout.decode(), res.stderr.decode("latin-1")


def expected_lines(arrays, raw_names=None):
    raw_names = raw_names or {}
    lines = []
    for name, a in arrays.items():
        a = np.asarray(a)
        key = raw_names.get(name, name.encode())
        shape, crc = ",".join(map(str, a.shape)), zlib.crc32(a.tobytes())
        lines.append(f"{'' if key else '-'} {key.hex()} {a.dtype.name} ({shape}) {a.nbytes} {crc:08x}")
    return lines


def read_lines(exe, path):
    rc, out, err = run(exe, "read", path)
    assert rc == 0 and err == "", err
    return [line.rsplit(" ", 1)[0] for line in out.splitlines()], [line[-1] for line in out.splitlines()]


def assert_one_error(rc, err, expect=None):
    """Exit 1 with exactly one line 'error: ...' of printable ASCII; no sanitizer report."""
    assert rc == 1, (rc, err[-3000:])
    assert err.endswith("\n") and err.count("\n") == 1 and err.startswith("error: "), err[-3000:]
    assert all(32 <= ord(c) < 127 for c in err[:-1]), err
    if expect:
        assert expect in err, err


def savez(path, arrays, compressed=False):
    (np.savez_compressed if compressed else np.savez)(path, **arrays)
    return path


def test_crc32_matches_zlib(plain, tmp_path):
    rng = np.random.default_rng(0)
    for n in (0, 1, 7, 1000, 65536):
        data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        (tmp_path / "b").write_bytes(data)
        rc, out, _ = run(plain, "crc", tmp_path / "b")
        assert rc == 0 and out.strip() == f"{zlib.crc32(data):08x}"


@pytest.mark.parametrize("build", ["plain", "harness"])
def test_reads_numpy_archives(build, request, tmp_path):
    exe = request.getfixturevalue(build)
    rng = np.random.default_rng(1)
    arrays = {
        "f32": rng.standard_normal((3, 4)).astype(np.float32),
        "f64": rng.standard_normal(5),
        "i64": np.arange(24, dtype=np.int64).reshape(2, 3, 4) - 7,
        "u8": rng.integers(0, 256, 9, dtype=np.uint8),
        "flag": np.array([True, False, False, True]),
        "scalar": np.array(3.5, np.float32),
        "empty": np.zeros((0, 3), np.float32),
        "big": rng.standard_normal(5 << 18).astype(np.float32),  # 5 MB
        "dir/sub": np.array([1, 2], np.int32),
        "café": np.array([-1, 1], np.int8),
        "h": np.array([1.5, -2], np.float16),
        "u16": np.array([65535], np.uint16),
        "u32": np.array([2**32 - 1], np.uint32),
        "u64": np.array([2**64 - 1], np.uint64),
        "i16": np.array([-32768], np.int16),
    }
    lines, _ = read_lines(exe, savez(tmp_path / "a.npz", arrays))
    assert lines == expected_lines(arrays)


def test_reads_zip64_records_and_comments(harness, tmp_path, monkeypatch):
    arrays = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array(7, np.int64)}
    monkeypatch.setattr(zipfile, "ZIP64_LIMIT", 0)  # zip64 extras in the directory and zip64 end records
    savez(tmp_path / "z64.npz", arrays)
    monkeypatch.undo()
    data = (tmp_path / "z64.npz").read_bytes()
    assert struct.pack("<I", 0x06064B50) in data and struct.pack("<I", 0x07064B50) in data
    assert read_lines(harness, tmp_path / "z64.npz")[0] == expected_lines(arrays)

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, a in arrays.items():
            with zf.open(name + ".npy", "w") as f:
                np.lib.format.write_array(f, a, version=(2, 0))
        zf.comment = b"PK\x05\x06 a comment that looks like an end record"
    (tmp_path / "c.npz").write_bytes(buf.getvalue())
    assert read_lines(harness, tmp_path / "c.npz")[0] == expected_lines(arrays)


def test_maps_a_npy_file(harness, tmp_path):
    a = np.arange(12, dtype=np.float64).reshape(3, 4)
    np.save(tmp_path / "w.npy", a)
    rc, out, err = run(harness, "npy", tmp_path / "w.npy", "weights")
    assert rc == 0 and err == ""
    assert out.splitlines()[0].rsplit(" ", 1) == [expected_lines({"weights": a})[0], "1"]
    rc, out, err = run(harness, "npy", tmp_path / "w.npy", "-")
    assert rc == 0 and out.split()[0] == b"w".hex()
    rc, _, err = run(harness, "read", tmp_path / "w.npy")
    assert_one_error(rc, err, "a .npy file, not an .npz archive")
    (tmp_path / "t.npy").write_bytes((tmp_path / "w.npy").read_bytes()[:-1])
    rc, _, err = run(harness, "npy", tmp_path / "t.npy", "t")
    assert_one_error(rc, err, "expected 224 for a float64 array of 12 elements")


def test_written_archive_reads_back(harness, plain, tmp_path):
    out = tmp_path / "out.npz"
    rc, _, err = run(harness, "write", out)
    assert rc == 0 and err == ""
    assert sorted(os.listdir(tmp_path)) == ["out.npz"]
    with zipfile.ZipFile(out) as zf:
        assert zf.testzip() is None
        assert all(i.compress_type == zipfile.ZIP_STORED for i in zf.infolist())
    with np.load(out) as z:
        assert sorted(z.files) == sorted(WRITTEN)
        for name, want in WRITTEN.items():
            got = z[name]
            assert (got.dtype, got.shape, got.tobytes()) == (want.dtype, want.shape, want.tobytes()), name
    lines, aligned = read_lines(harness, out)
    assert lines == expected_lines(WRITTEN, WRITTEN_RAW)
    assert set(aligned) == {"1"}  # fc_npz_save aligns every array's data to 64 bytes
    # the same entries give the same bytes (fixed timestamps), whichever build wrote them
    rc, _, _ = run(plain, "write", tmp_path / "again.npz")
    assert rc == 0 and (tmp_path / "again.npz").read_bytes() == out.read_bytes()


def test_compressed_archive_is_refused(harness, tmp_path):
    path = savez(tmp_path / "c.npz", {"a": np.zeros(100, np.float32)}, compressed=True)
    rc, out, err = run(harness, "read", path)
    assert rc == 1 and out == ""
    why = "is compressed (np.savez_compressed); write the dataset with np.savez"
    assert err == f"error: {path}: member 'a' {why}\n"


def test_missing_empty_and_foreign_files(harness, tmp_path):
    rc, _, err = run(harness, "read", tmp_path / "missing.npz")
    assert_one_error(rc, err, "cannot open (No such file or directory)")
    (tmp_path / "empty.npz").write_bytes(b"")
    rc, _, err = run(harness, "read", tmp_path / "empty.npz")
    assert_one_error(rc, err, "empty file")
    rc, _, err = run(harness, "read", tmp_path)
    assert_one_error(rc, err, "not a regular file")
    (tmp_path / "text.npz").write_bytes(b"hello, this is not a zip file\n" * 40)
    rc, _, err = run(harness, "read", tmp_path / "text.npz")
    assert_one_error(rc, err, "no zip end of central directory record")
    (tmp_path / "short.npz").write_bytes(b"PK\x05\x06")
    rc, _, err = run(harness, "read", tmp_path / "short.npz")
    assert_one_error(rc, err, "too short")


def _zip(members, **kw):
    """A stored zip of name -> bytes (names as bytes: written as cp437 when not UTF-8)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", **kw) as zf:
        for name, data in members:
            zf.writestr(zipfile.ZipInfo(name), data)
    return buf.getvalue()


def _npy(a, **kw):
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.asarray(a), **kw)
    return buf.getvalue()


def _base_archive():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    return _zip([("aaaa.npy", _npy(a)), ("bb.npy", _npy(np.int64(9)))])


def _patch_eocd(data, **fields):
    end = data.rindex(b"PK\x05\x06")
    names = ["sig", "disk", "cd_disk", "n_disk", "n", "cd_size", "cd_off", "comment"]
    values = dict(zip(names, struct.unpack("<IHHHHIIH", data[end : end + 22])))
    values.update(fields)
    return data[:end] + struct.pack("<IHHHHIIH", *(values[k] for k in names)) + data[end + 22 :]


def _duplicate_directory_entry(data):
    end = data.rindex(b"PK\x05\x06")
    _, _, _, _, n, size, off, _ = struct.unpack("<IHHHHIIH", data[end : end + 22])
    first = data.index(b"PK\x01\x02", off)
    second = data.index(b"PK\x01\x02", first + 4)
    entry = data[first:second]
    patched = data[:off] + entry + data[off:end]
    return _patch_eocd(patched + data[end:], n=n + 1, n_disk=n + 1, cd_size=size + len(entry))


def _flag_encrypted(data):
    cd = data.index(b"PK\x01\x02")
    return data[: cd + 8] + b"\x01" + data[cd + 9 :]


HOSTILE = {
    "huge count": (
        lambda: _patch_eocd(_base_archive(), n=0xFFFF, n_disk=0xFFFF),
        "members in a central directory",
    ),
    "directory past the end": (
        lambda: _patch_eocd(_base_archive(), cd_off=0xFFFFFFF0),
        "central directory of",
    ),
    "overlapping members": (lambda: _duplicate_directory_entry(_base_archive()), "members overlap"),
    "npy claims more data": (
        lambda: _zip([("a.npy", _npy(np.zeros(100, np.float32))[:-8])]),
        "member 'a': holds 520 bytes, expected 528",
    ),
    "name not .npy, control bytes": (
        lambda: _zip([("x\x1b]0;pwn\x07.txt", b"hi")]),
        "member 'x\\x1b]0;pwn\\x07.txt' is not an array",
    ),
    "NUL in the name": (lambda: _base_archive().replace(b"aaaa.npy", b"a\0aa.npy"), "a NUL byte in the name"),
    "local name differs": (
        lambda: _base_archive().replace(b"aaaa.npy", b"aaab.npy", 1),
        "local header of another name",
    ),
    "encrypted": (lambda: _flag_encrypted(_base_archive()), "member 'aaaa' is encrypted"),
    "two of one name": (
        lambda: _zip([("a.npy", _npy(np.zeros(2))), ("a.npy", _npy(np.ones(2)))]),
        "two members named 'a'",
    ),
    "fortran order": (lambda: _zip([("f.npy", _npy(np.zeros((2, 3)).T))]), "Fortran-order"),
    "complex dtype": (lambda: _zip([("c.npy", _npy(np.zeros(2, np.complex64)))]), "unsupported dtype '<c8'"),
    "name too long": (lambda: _zip([("n" * 256 + ".npy", _npy(np.zeros(1)))]), "name longer than 255 bytes"),
    "not numpy at all": (lambda: _zip([("a.npy", b"\x93NUMPZ" + b"\0" * 60)]), "member 'a': not a .npy file"),
}


@pytest.mark.filterwarnings("ignore:Duplicate name")
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_archive(harness, tmp_path, case):
    make, expect = HOSTILE[case]
    path = tmp_path / "h.npz"
    path.write_bytes(make())
    rc, _, err = run(harness, "read", path)
    assert_one_error(rc, err, expect)


def _structure_positions(data):
    """Byte positions of the zip structures and .npy headers (not the array data) of an archive."""
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        infos = zf.infolist()
        cd_start = min(zf.start_dir, len(data))
    positions = set(range(cd_start, len(data)))  # the central directory and the end record
    for info in infos:
        off = info.header_offset
        nlen, elen = struct.unpack("<HH", data[off + 26 : off + 30])
        start = off + 30 + nlen + elen
        hlen = struct.unpack("<H", data[start + 8 : start + 10])[0]
        positions |= set(range(off, start + 10 + hlen))
    return sorted(positions)


def test_damaged_archives_never_crash(harness, tmp_path):
    rng = np.random.default_rng(2)
    arrays = {
        "w": np.arange(12, dtype=np.float32).reshape(3, 4),
        "s": np.array(5, np.int64),
        "é": np.zeros(3, bool),
    }
    good = savez(tmp_path / "good.npz", arrays).read_bytes()
    cases = [good[:n] for n in sorted(set(range(0, len(good), 17)) | set(range(len(good) - 120, len(good))))]
    spots = _structure_positions(good)
    for flips in [1] * 90 + [3] * 40:
        damaged = bytearray(good)
        for pos in rng.choice(spots, flips, replace=False):
            damaged[pos] ^= int(rng.integers(1, 256))
        cases.append(bytes(damaged))
    path = tmp_path / "d.npz"
    failures = 0
    for data in cases:
        path.write_bytes(data)
        rc, out, err = run(harness, "read", path)
        if rc == 0:
            assert err == "" and len(out.splitlines()) <= len(arrays), (data, out)
        else:
            assert_one_error(rc, err)
            failures += 1
    assert failures > len(cases) // 2


def test_write_errors_leave_nothing_behind(harness, tmp_path):
    rc, _, err = run(harness, "write", tmp_path / "no" / "such" / "out.npz")
    assert_one_error(rc, err, "cannot write (No such file or directory)")
    assert os.listdir(tmp_path) == []

    target = tmp_path / "data.npz"
    target.write_bytes(b"previous contents")
    for mode, expect in [
        ("write-bad", "entry 'b': bad array description (dtype 'complex64', rank 1)"),
        ("write-dup", "two entries named 'a'"),
        ("write-many", "too large for an .npz archive without zip64 (65535 entries"),
        ("write-huge", "too large for an .npz archive without zip64 (entry 'huge'"),
    ]:
        rc, _, err = run(harness, mode, target)
        assert_one_error(rc, err, expect)
        assert target.read_bytes() == b"previous contents"
        assert os.listdir(tmp_path) == ["data.npz"]

    # the rename fails after the whole archive was written: the temporary goes
    (tmp_path / "dir.npz").mkdir()
    (tmp_path / "dir.npz" / "keep").write_bytes(b"")
    rc, _, err = run(harness, "write", tmp_path / "dir.npz")
    assert_one_error(rc, err, "cannot write (Is a directory)")
    assert sorted(os.listdir(tmp_path)) == ["data.npz", "dir.npz"]
    assert os.listdir(tmp_path / "dir.npz") == ["keep"]
