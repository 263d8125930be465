"""Hostile and extreme models against the compiler: sizes beyond the target, constants too big
to fold, constant indices out of range, exported sources rebuilt with other flags.

Each is refused with one FlowcError naming the cause, before anything big is allocated or
any file is written (the binaries' and the model files' cases are in the modules beside)."""

from __future__ import annotations

import subprocess
import tracemalloc

import numpy as np
import pytest

import codegen
import graphdef as gd
from codegen import pipeline
from codegen.target import Target


def _relu_on(shape, dtype="float32") -> gd.Graph:
    with gd.Graph("big") as g:
        gd.relu(gd.placeholder("x", shape, dtype), name="y")
    return g


@pytest.mark.parametrize("arch", ["armv7-linux", "cortex-m4"])
def test_a_tensor_beyond_a_32_bit_target_is_refused_naming_it(arch, tmp_path):
    """16 GiB on a 32-bit target: refused before sources are written (it failed inside the
    C compiler: 'overflow in conversion ... changes value from 4294967296 to 0')."""
    with pytest.raises(gd.FlowcError, match=r"tensor 'x' \(float32\[65536,65536\]\) needs 17179869184 bytes; "
                       rf"{arch} addresses at most 2147483647"):  # fmt: skip
        codegen.export(_relu_on((65536, 65536)), tmp_path / "out", name="net", arch=arch, build_binary=False)
    assert not (tmp_path / "out").exists()


def test_a_tensor_beyond_the_host_address_space_is_refused(tmp_path):
    """4 PiB on a 64-bit host (it compiled without a word)."""
    want = r"tensor 'x' \(float32\[1048576,1048576,1024\]\) needs 4503599627370496 bytes; host addresses"
    with pytest.raises(gd.FlowcError, match=want):
        codegen.export(_relu_on((2**20, 2**20, 2**10)), tmp_path / "out", name="net", build_binary=False)


def test_the_arena_of_a_32_bit_target_is_checked_after_planning():
    """Two 1.5 GiB values live together: each fits armv7, the arena (3 GiB) does not."""
    with gd.Graph("two") as g:
        x = gd.placeholder("x", (3 << 14, 1 << 15), "uint8")
        a = gd.transpose(x)
        b = gd.transpose(gd.bitwise_not(x))
        gd.reduce_sum(gd.bitwise_xor(a, b), name="y")
    with pytest.raises(
        gd.FlowcError, match=r"model: the arena needs \d+ bytes; armv7-linux addresses at most"
    ):
        pipeline.run(g, pipeline.Options(target=Target("armv7-linux")), until="plan")


def test_constants_beyond_the_fold_limit_stay_run_time_steps():
    """An 80 MiB constant plus one is not folded into a second 80 MiB constant (it was: a
    result no larger than its inputs always folded), and a scalar broadcast to 256 MiB is not
    computed while compiling; smaller limits keep even small results as steps."""
    with gd.Graph("big") as g:
        big = gd.constant(np.ones((5120, 4096), np.float32))
        gd.add(gd.placeholder("x", (5120, 4096)), big + 1.0, name="y")
        gd.add(
            gd.placeholder("z", (8192, 8192)), gd.expand(gd.constant(np.float32(1.5)), (8192, 8192)), name="w"
        )
    tracemalloc.start()
    c = pipeline.run(g, pipeline.Options(), until="plan")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 48 << 20, f"compiling allocated {peak} bytes"
    assert max(c.lowered.constants[n].nbytes for n in c.lowered.constants) <= 80 << 20
    assert sum(a.nbytes for a in c.lowered.constants.values()) < 81 << 20
    with gd.Graph("small") as g2:
        gd.add(gd.placeholder("x", (64, 64)), gd.expand(gd.constant(np.float32(2.0)), (64, 64)), name="y")
    folded = pipeline.run(g2, pipeline.Options(), until="fold_constants").results["fold_constants"]
    kept = pipeline.run(g2, pipeline.Options(fold_limit=1024), until="fold_constants").results[
        "fold_constants"
    ]
    assert "expand" not in {n.op for n in folded.nodes} and "expand" in {n.op for n in kept.nodes}


def _indexed(op, data_shape, indices, **attrs):
    with gd.Graph("idx") as g:
        data = gd.placeholder("data", data_shape)
        ind = gd.constant(np.asarray(indices, np.int64))
        if op == "scatter_nd":
            upd = gd.placeholder("upd", (len(indices),) + data_shape[np.asarray(indices).shape[-1] :])
            gd.apply(op, [data, ind, upd], "y", **attrs)
        elif op == "scatter_elements":
            gd.apply(op, [data, ind, gd.placeholder("upd", np.asarray(indices).shape)], "y", **attrs)
        else:
            gd.apply(op, [data, ind], "y", **attrs)
    return g


@pytest.mark.parametrize(
    "op, data_shape, indices, attrs, bad",
    [
        ("gather", (4, 3), [0, 99], {"axis": 0}, "index 99 is out of range for an axis of size 4"),
        ("gather", (4, 3), [[0, -4], [2, -5]], {"axis": 0}, "index -5 is out of range for an axis of size 4"),
        ("gather_elements", (2, 3), [[0, 3]], {"axis": 1}, "index 3 is out of range for an axis of size 3"),
        ("gather_nd", (2, 3), [[1, 0], [2, 0]], {}, "index 2 is out of range for an axis of size 2"),
        ("scatter_nd", (4, 3), [[4]], {}, "index 4 is out of range for an axis of size 4"),
        ("scatter_elements", (2, 3), [[7, 0]], {"axis": 0}, "index 7 is out of range for an axis of size 2"),
    ],
)
def test_constant_indices_out_of_range_are_refused_when_compiling(op, data_shape, indices, attrs, bad):
    g = _indexed(op, data_shape, indices, **attrs)
    with pytest.raises(gd.ExecutionError, match=rf"node 'y' \(op {op}, inputs .*\): {bad}"):
        pipeline.run(g, pipeline.Options(), until="plan")


def test_in_range_constant_indices_compile():
    g = _indexed("gather", (4, 3), [0, -4, 3], axis=0)
    assert pipeline.run(g, pipeline.Options(), until="plan").program.steps


@pytest.mark.c
def test_sources_rebuilt_with_other_flags_stop_with_the_isa_they_were_planned_for(tmp_path):
    """Weights packed and scratch sized for the build's GEMM kernel: a `make` with flags that
    select another kernel stops with #error (it built a binary that segfaulted)."""
    from codegen.backends.c import toolchain

    with gd.Graph("dense") as g:
        x = gd.placeholder("x", (4, 64))
        gd.relu(gd.matmul(x, gd.constant(np.ones((64, 32), np.float32))), name="y")
    out = codegen.export(g, tmp_path / "out", name="net")
    isa = toolchain.isa(Target(), toolchain.find_cc())
    other = "-DFC_NO_VECTOR" if isa != "scalar" else "-mavx2 -mfma"
    subprocess.run(["make", "-s", "-C", str(out), "clean"], check=True, capture_output=True)
    res = subprocess.run(
        ["make", "-C", str(out), f"CFLAGS=-std=c99 -O2 {other}"], capture_output=True, text=True
    )
    assert res.returncode != 0 and not (out / "net").exists()
    assert f"its products are planned for the {isa} GEMM kernel" in res.stderr
    rebuilt = subprocess.run(["make", "-s", "-C", str(out)], capture_output=True, text=True)
    assert rebuilt.returncode == 0 and (out / "net").is_file(), rebuilt.stderr
