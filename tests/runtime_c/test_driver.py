"""runtime_c/driver.c, the command line and .npy I/O every generated main.c shares, on its own:
the binaries' C files each build alone with the strict flags (gcc, and clang when installed),
and the helpers through cffi: --in NAME=FILE lookup, counts, missing inputs, loading and
checking inputs (axis 0 scaled), and writing outputs to temporaries that never land on an input."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from .conftest import CC, RUNTIME

DRIVER_FILES = ("files.c", "npy.c", "npz.c", "checkpoint.c", "driver.c", "threadpool.c")
STRICT = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-c", "-o", "/dev/null", f"-I{RUNTIME}"]


@pytest.mark.parametrize("cc", [CC, shutil.which("clang")], ids=["cc", "clang"])
@pytest.mark.parametrize("name", DRIVER_FILES)
def test_each_driver_file_builds_alone_with_the_strict_flags(cc, name):
    if cc is None:
        pytest.skip("clang is not installed (Debian: apt-get install clang)")
    res = subprocess.run([cc, *STRICT, str(RUNTIME / name)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


CDEF = """
typedef struct {
    const char *name; const char *dtype; int rank; const long *shape; const char *file; int mine; int bound;
    int length; const char *text;
} fc_drv_tensor;
typedef struct { char *tmp; const char *path; char *kept; int had; int done; } fc_file_set;
int fc_drv_in_arg(const char *spec, const fc_drv_tensor *inputs, int n, const char **paths, char *msg,
                  size_t len);
int fc_drv_count_arg(const char *option, const char *text, long limit, long *value, char *msg, size_t len);
int fc_drv_inputs_named(const fc_drv_tensor *inputs, int n, const char **paths, char *msg, size_t len);
int fc_drv_write_temps(const char *out_dir, const fc_drv_tensor *outputs, int n, void *const *data,
                       long scale, const fc_drv_tensor *inputs, int n_in, const char **in_paths,
                       fc_file_set *put, char **paths, char *msg, size_t len);
int fc_drv_check_labels(const void *data, const char *dtype, long samples, long row_size, long depth,
                        const char *name, const char *file, char *msg, size_t len);
int fc_files_commit(fc_file_set *set, int n, char *err, size_t errlen);
void fc_files_finish(fc_file_set *set, int n);
void free(void *);
"""


@pytest.fixture(scope="module")
def drv(c_lib):
    files = "".join(f'#include "{f}"\n' for f in ("files.c", "npy.c", "driver.c"))
    return c_lib(CDEF, "#define _POSIX_C_SOURCE 200809L\n" + files)


class Table:
    """fc_drv_tensor entries with their strings and shapes kept alive."""

    def __init__(self, ffi, specs):
        self.keep = []
        self.t = ffi.new("fc_drv_tensor[]", len(specs))
        for k, (name, dtype, shape, file, mine) in enumerate(specs):
            strings = [ffi.NULL if v is None else ffi.new("char[]", v.encode()) for v in (name, dtype, file)]
            dims = ffi.new("long[]", list(shape) or [0])
            self.keep += [*strings, dims]
            self.t[k].name, self.t[k].dtype, self.t[k].file = strings
            self.t[k].rank, self.t[k].shape, self.t[k].mine = len(shape), dims, mine


def test_in_args_find_their_input_and_refuse_the_rest(drv):
    ffi, lib = drv
    ins = Table(ffi, [("x", "float32", (2,), None, 1), ("ids", "int64", (3,), None, 1)])
    paths, msg = ffi.new("const char *[2]"), ffi.new("char[256]")
    spec = ffi.new("char[]", b"ids=/data/i.npy")
    assert lib.fc_drv_in_arg(spec, ins.t, 2, paths, msg, 256) == 0
    assert paths[0] == ffi.NULL and ffi.string(paths[1]) == b"/data/i.npy"
    assert lib.fc_drv_inputs_named(ins.t, 2, paths, msg, 256) == 2
    assert ffi.string(msg) == b"missing --in x=FILE.npy"
    for bad, said in ((b"y=a.npy", b"unknown input 'y'"), (b"x", b"--in expects NAME=FILE.npy, got 'x'")):
        assert lib.fc_drv_in_arg(ffi.new("char[]", bad), ins.t, 2, paths, msg, 256) == 2
        assert ffi.string(msg).startswith(said)


@pytest.mark.parametrize(
    "text, want",
    [("7", 7), ("100", 100), ("0", "positive"), ("-3", "positive"), ("", "positive"), ("5x", "positive"),
     ("101", "at most 100"), ("99999999999999999999999", "at most 100")],
)  # fmt: skip
def test_counts_are_whole_numbers_from_one_to_the_limit(drv, text, want):
    ffi, lib = drv
    value, msg = ffi.new("long *"), ffi.new("char[256]")
    code = lib.fc_drv_count_arg(b"--bench", text.encode(), 100, value, msg, 256)
    if isinstance(want, int):
        assert code == 0 and value[0] == want
    else:
        assert code == 2 and want in ffi.string(msg).decode()


def test_outputs_go_to_temporaries_committed_together_never_over_an_input(drv, tmp_path):
    ffi, lib = drv
    x = np.arange(6, dtype=np.float32)
    data = [ffi.from_buffer(x), ffi.from_buffer(x)]
    outs = Table(ffi, [("y", "float32", (3,), "y.npy", 1), ("z", "float32", (3,), "z.npy", 0)])
    ins = Table(ffi, [("x", "float32", (6,), None, 1)])
    put, paths, msg = ffi.new("fc_file_set[2]"), ffi.new("char *[2]"), ffi.new("char[512]")
    x_path = ffi.new("char[]", str(tmp_path / "x.npy").encode())
    in_paths = ffi.new("const char *[1]", [x_path])
    out_dir = str(tmp_path / "res").encode()
    # scale 2: axis 0 of y is 6 (two microbatches); z belongs to another rank: not written
    assert lib.fc_drv_write_temps(out_dir, outs.t, 2, data, 2, ins.t, 1, in_paths, put, paths, msg, 512) == 0
    assert lib.fc_files_commit(put, 2, msg, 512) == 0
    lib.fc_files_finish(put, 2)
    np.testing.assert_array_equal(np.load(tmp_path / "res" / "y.npy"), x)
    assert sorted(p.name for p in (tmp_path / "res").iterdir()) == ["y.npy"]
    for p in paths:
        lib.free(p)
    # an output whose path is one of the input files is refused, naming both
    np.save(tmp_path / "res" / "x.npy", x)
    clash = Table(ffi, [("y", "float32", (6,), "x.npy", 1)])
    x_path = ffi.new("char[]", str(tmp_path / "res" / "x.npy").encode())
    in_paths[0] = x_path
    put, paths = ffi.new("fc_file_set[1]"), ffi.new("char *[1]")
    code = lib.fc_drv_write_temps(out_dir, clash.t, 1, data, 1, ins.t, 1, in_paths, put, paths, msg, 512)
    assert code == 4 and "output 'y' would be written over input 'x'" in ffi.string(msg).decode()
    lib.fc_files_finish(put, 1)
    lib.free(paths[0])
    assert sorted(p.name for p in (tmp_path / "res").iterdir()) == ["x.npy", "y.npy"]


@pytest.mark.parametrize(
    "dtype, values, said",
    [
        ("int64", [0, 2, 9, 3], "sample 1 has class label 9"),
        ("int32", [1, -1, 0, 0], "sample 0 has class label -1"),
        ("uint8", [0, 1, 2, 255], "sample 1 has class label 255"),
        ("float32", [0.5, 2.9, -0.5, 4.0], "sample 1 has class label 4,"),
        ("float64", [0.0, np.nan, 1.0, 1.0], "sample 0 has class label nan"),
        ("int16", [0, 1, 2, 3], None),
        ("float32", [-0.9, 3.99, 0, 1], None),
    ],
)  # fmt: skip
def test_class_labels_are_checked_in_range_naming_the_sample(drv, dtype, values, said):
    ffi, lib = drv
    a = np.array(values, dtype=dtype)  # 2 samples of 2 labels, 4 classes
    msg = ffi.new("char[512]")
    code = lib.fc_drv_check_labels(ffi.from_buffer(a), dtype.encode(), 2, 2, 4, b"labels", b"d.npz", msg, 512)
    if said is None:
        assert code == 0
    else:
        text = ffi.string(msg).decode()
        assert code == 2 and said in text and "dataset array 'labels' (d.npz)" in text, text
        assert "outside the model's 4 classes [0, 4)" in text
