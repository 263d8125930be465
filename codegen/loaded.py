"""What every loaded model shares, whatever its backend: the description of its tensors, its
name's checks, the train op among its outputs, and calls from many threads (``Guarded``)."""

from __future__ import annotations

import re
import threading
from contextlib import contextmanager
from dataclasses import dataclass

from graphdef.errors import ExecutionError, FlowcError
from graphdef.ir import Graph

from .render.spelling import C_KEYWORDS


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str


def check_name(name: str) -> str:
    """``name`` when it can name a model's files and C symbols: a C identifier that meets no C
    keyword, C library symbol or header, flowc runtime or MPI symbol, and no file of the output
    folder, through itself or what it generates (NAME_run, NAME_H, NAME.h, ...). Checked before
    any work, since each of these would fail only in the C compiler or linker."""
    from .render.spelling import model_name_problem

    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,62}", name):
        shown = repr(name) if not isinstance(name, str) or len(name) <= 80 else repr(name[:60]) + "..."
        raise FlowcError(f"model name {shown} must be a C identifier (letters, digits, '_'; at most 63)")
    problem = f"is a C or C++ keyword ({name})" if name in C_KEYWORDS else model_name_problem(name)
    if problem:
        raise FlowcError(f"model name '{name}' {problem}; choose another")
    return name


def with_train(graph: Graph, outputs, train):
    """``outputs`` (default: the graph's) plus the train op ``train`` (a Tensor or a name), so
    that every call runs it; ``outputs`` itself without one."""
    if train is None:
        return outputs
    from graphdef.builder import Tensor

    ref = train.ref if isinstance(train, Tensor) else graph.resolve(train)
    listed = list(outputs) if outputs is not None else list(graph.outputs)
    refs = [o.ref if isinstance(o, Tensor) else graph.resolve(o) for o in listed]
    return tuple(listed) if ref in refs else (*listed, Tensor(graph, ref))


class Guarded:
    """Calls on one loaded model from any number of Python threads, and ``close``.

    A model whose calls share something (a thread pool, state variables, a device context) runs
    them one at a time (``serial``: a lock per model); a model whose calls share nothing but
    constants runs them in parallel, each calling thread with its own arena. ``close()`` waits
    for the calls under way, frees what the model holds (threads, memory, the library's handle)
    and makes every later call an ``ExecutionError``; ``with`` closes on leaving.
    """

    def _guard_init(self, serial: bool) -> None:
        self._guard = threading.Condition()
        self._busy = 0
        self._closed = False
        self._serial = threading.RLock() if serial else None

    @contextmanager
    def _use(self):
        with self._guard:
            if self._closed:
                raise ExecutionError(f"model '{self.name}' is closed")
            self._busy += 1
        try:
            if self._serial is None:
                yield
            else:
                with self._serial:
                    yield
        finally:
            with self._guard:
                self._busy -= 1
                self._guard.notify_all()

    def close(self) -> None:
        """Wait for the calls under way, then free the model; later calls raise. Idempotent."""
        with self._guard:
            if self._closed:
                return
            self._closed = True
            while self._busy:
                self._guard.wait()
        self._release()

    def _release(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
