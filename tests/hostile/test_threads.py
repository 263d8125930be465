"""One loaded model called from many Python threads (codegen.loaded.Guarded): a model with a
thread pool or with state runs its calls one at a time, so every output is the serial one and a
training step applied from several threads ends where the same steps applied serially end;
``close`` waits for the calls under way and makes later calls a clean error."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import codegen
import graphdef as gd
from graphdef.errors import ExecutionError

pytestmark = pytest.mark.c


def _hammer(fn, workers: int, calls: int) -> list:
    """fn(worker, call) from `workers` threads, `calls` each; every result, and no thread stuck."""
    results, errors = [[] for _ in range(workers)], []

    def work(k):
        try:
            for c in range(calls):
                results[k].append(fn(k, c))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,), daemon=True) for k in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a call never returned"
    assert not errors, errors[0]
    return results


def test_a_model_with_a_thread_pool_gives_serial_outputs_from_any_number_of_threads():
    rng = np.random.default_rng(0)
    with gd.Graph("pooled") as g:
        x = gd.placeholder("x", (64, 128))
        w = gd.constant(rng.standard_normal((128, 128)).astype(np.float32))
        h = gd.relu(gd.matmul(x, w))
        gd.softmax(gd.matmul(h, w), name="y")
    m = codegen.compile(g, threads=2)
    feeds = [rng.standard_normal((64, 128)).astype(np.float32) for _ in range(8)]
    want = [m(x=f)["y"] for f in feeds]
    results = _hammer(lambda k, c: m(x=feeds[(k + c) % 8])["y"], workers=4, calls=60)
    wrong = sum(
        not np.array_equal(r, want[(k + c) % 8]) for k, rs in enumerate(results) for c, r in enumerate(rs)
    )
    assert wrong == 0, f"{wrong} of {4 * 60} calls gave other outputs"


def _step_graph() -> gd.Graph:
    rng = np.random.default_rng(1)
    with gd.Graph("step") as g:
        x = gd.placeholder("x", (64, 512))
        y = gd.placeholder("labels", (64,), "int64")
        w = gd.variable("w", (rng.standard_normal((512, 256)) * 0.01).astype(np.float32))
        loss = gd.train.softmax_cross_entropy(gd.matmul(x, w), y, name="loss")
        gd.train.SGD(0.05).minimize(loss, name="train")
    return g


def test_training_steps_from_several_threads_end_where_serial_steps_end():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((64, 512)).astype(np.float32)
    y = rng.integers(0, 256, 64).astype(np.int64)
    serial = codegen.compile(_step_graph(), outputs=["train"], train="train", name="serial")
    for _ in range(120):
        serial(x=x, labels=y)
    shared = codegen.compile(_step_graph(), outputs=["train"], train="train", name="shared")
    _hammer(lambda k, c: shared(x=x, labels=y), workers=4, calls=30)
    assert np.array_equal(shared.variable("w"), serial.variable("w"))
    assert int(shared.variable("global_step")) == 120


def test_close_waits_for_calls_and_later_calls_are_a_clean_error():
    with gd.Graph("g") as g:
        gd.relu(gd.placeholder("x", (1000,)), name="y")
    x = np.linspace(-1, 1, 1000, dtype=np.float32)
    for threads in (1, 2):
        m = codegen.compile(g, threads=threads)
        stop = threading.Event()

        def spin(m=m, stop=stop):
            while not stop.is_set():
                try:
                    np.testing.assert_array_equal(m(x=x)["y"], np.maximum(x, 0))
                except ExecutionError as e:
                    assert "is closed" in str(e)
                    return

        workers = [threading.Thread(target=spin, daemon=True) for _ in range(3)]
        for t in workers:
            t.start()
        m.close()
        stop.set()
        for t in workers:
            t.join(timeout=60)
        assert not any(t.is_alive() for t in workers)
        with pytest.raises(ExecutionError, match="model 'model' is closed"):
            m(x=x)
        m.close()  # twice: nothing more
    with codegen.compile(_step_graph(), outputs=["train"], train="train", name="ctx") as m:
        assert int(m.variable("global_step")) == 0
    for call in (lambda: m.variable("w"), m.reset, lambda: m.save_checkpoint("never.npz")):
        with pytest.raises(ExecutionError, match="is closed"):
            call()
