"""Model files as flowc reads them from the command line: an .onnx file (with ``--shape`` and
``--value`` for its symbolic inputs), a saved graph (.flowc), or ``file.py:function`` returning a
Graph, whose errors are reported as the user's (their frames, not flowc's)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import graphdef as gd
from graphdef.errors import FlowcError
from graphdef.ir import Graph


def parse_shapes(items) -> dict:
    """``["x=1x3x224x224", ...]`` -> {"x": (1, 3, 224, 224)}; a dimension ``<=N`` (a run-time
    length up to N: ``parse_lengths``) is N."""
    out = {}
    for item in items or ():
        name, sep, dims = item.rpartition("=")
        if name.endswith("<") and dims:  # "x=1x<=8": the "=" of "<=" is not the name's
            name, sep, dims = item.partition("=")
        try:
            shape = (
                tuple(int(d.removeprefix("<=")) for d in dims.lower().split("x")) if sep and name else None
            )
        except ValueError:
            shape = None
        if shape is None or any(d < 0 for d in shape):
            raise FlowcError(f"--shape expects NAME=D0xD1x..., got '{item}'")
        out[name] = shape
    return out


def parse_lengths(items) -> dict:
    """The run-time lengths of ``--shape`` items: ``["tokens=1x<=1024"]`` -> {"tokens": 1} (the
    input's axis written ``<=N``: any length up to N at run time; one per input)."""
    out = {}
    for item in items or ():
        name, _, dims = item.partition("=")
        axes = [k for k, d in enumerate(dims.split("x")) if d.startswith("<=")]
        if len(axes) > 1:
            raise FlowcError(f"--shape {item}: one axis of run-time length (<=N) per input")
        if axes:
            out[name] = axes[0]
    return out


def parse_values(items) -> dict:
    """``["axes=1,2", "w=w.npy"]`` -> {"axes": array([1, 2]), "w": <array from w.npy>}."""
    import numpy as np

    out = {}
    for item in items or ():
        name, sep, text = item.partition("=")
        if not sep or not name:
            raise FlowcError(f"--value expects NAME=V0,V1,... or NAME=FILE.npy, got '{item}'")
        if text.endswith(".npy"):
            try:
                out[name] = np.load(text, allow_pickle=False)
            except (OSError, ValueError) as e:
                raise FlowcError(f"--value {name}: cannot read {text} ({e})") from None
            continue
        try:
            nums = [float(v) for v in text.split(",") if v.strip()]
        except ValueError:
            raise FlowcError(f"--value {name}: '{text}' is not a list of numbers") from None
        out[name] = np.array([int(v) for v in nums] if all(v.is_integer() for v in nums) else nums)
    return out


def check_shapes(graph, shapes: dict) -> None:
    """A graph's (not an ONNX model's) inputs named by ``--shape`` have those shapes."""
    for name, shape in shapes.items():
        if name not in graph.inputs:
            raise FlowcError(f"--shape {name}: the model has no input of that name")
        t = graph.node(name).outputs[0]
        if t.shape != tuple(shape):
            raise FlowcError(f"--shape {name}: the input is {t}, not {'x'.join(map(str, shape))}")


def load_model(
    spec: str, shapes: dict | None = None, values: dict | None = None, loop_bound: int | None = None
) -> gd.Graph:
    """A Graph from an .onnx file, a .tflite file, a .flowc file or ``file.py:function``;
    ``loop_bound``: ``load_onnx``'s (the most iterations of an ONNX Loop of run-time length)."""
    path, _, func = (
        spec.partition(":") if spec.count(":") == 1 and not spec.endswith(".flowc") else (spec, "", "")
    )
    if spec.endswith(".onnx"):
        return gd.load_onnx(spec, shapes=shapes, values=values, loop_bound=loop_bound)
    if loop_bound is not None:
        raise FlowcError("--loop-bound applies to ONNX models only")
    if shapes or values:  # (a graph's run-time lengths are checked against it: check_shapes)
        raise FlowcError("--shape and --value apply to ONNX models only")
    if func:
        file = Path(path)
        if not file.is_file():
            raise FlowcError(f"{file}: no such file")
        mod_spec = importlib.util.spec_from_file_location(f"flowc_model_{file.stem}", file)
        module = importlib.util.module_from_spec(mod_spec)
        # registered while it runs, as an import would: a dataclass under postponed annotations
        # looks its module up there
        sys.modules[mod_spec.name] = module
        try:
            mod_spec.loader.exec_module(module)
        except Exception as e:  # the user's file: report, do not crash
            raise FlowcError(f"{file}: importing it failed: {type(e).__name__}: {e}") from None
        finally:
            sys.modules.pop(mod_spec.name, None)
        fn = getattr(module, func, None)
        if not callable(fn):
            raise FlowcError(f"{file}: has no function '{func}'")
        try:
            graph = fn()
        except Exception as e:  # the user's code failed: the user's error, shown in the user's frames
            raise _user_error(e, file, func) from None
        if not isinstance(graph, Graph):
            raise FlowcError(f"{spec} returned {type(graph).__name__}, not a graphdef Graph")
        return graph
    if not Path(spec).is_file():
        raise FlowcError(f"{spec}: no such file")
    return load_file(Path(spec))


def load_file(path: Path) -> gd.Graph:
    """A Graph from a model file whatever its name: TFLite (its "TFL3" identifier), a flowc
    graph (a zip archive) or ONNX (anything else that parses as one); one line naming the
    three formats otherwise."""
    with open(path, "rb") as f:
        head = f.read(8)
    if len(head) >= 8 and head[4:8] == b"TFL3":
        return gd.load_tflite(path)
    if head.startswith(b"PK") or path.suffix == ".flowc":
        return gd.load(path)
    if path.suffix == ".tflite":
        raise FlowcError(f"{path}: not a TFLite flatbuffer (no TFL3 file identifier)")
    try:
        import onnx

        onnx.load_model(path, load_external_data=False)
    except Exception:
        raise FlowcError(
            f"{path}: not a model flowc reads: an ONNX model (.onnx), a TFLite flatbuffer (.tflite) "
            "or a flowc graph (.flowc)"
        ) from None
    return gd.load_onnx(path)


def _user_error(e: Exception, file: Path, func: str) -> FlowcError:
    """The error of a model's ``build()`` as the user's: a FlowcError (flowc's builder refusing
    a node) stays one line and gains "(at FILE:LINE)", the user's line that made the node; any
    other exception becomes "FILE:FUNC failed: TYPE: MESSAGE" after the frames of the user's
    file in its traceback (flowc's own frames left out), printed to stderr like Python's."""
    import traceback

    here = file.resolve()
    frames = [f for f in traceback.extract_tb(e.__traceback__) if _same_file(f.filename, here)]
    if isinstance(e, FlowcError):
        where = f" (at {file}:{frames[-1].lineno})" if frames else ""
        return type(e)(f"{e}{where}")
    if frames:
        print("Traceback (most recent call last), in the model's file:", file=sys.stderr)
        print("".join(traceback.format_list(frames)), end="", file=sys.stderr)
    return FlowcError(f"{file}:{func} failed: {type(e).__name__}: {e}")


def _same_file(name: str, path: Path) -> bool:
    try:
        return Path(name).resolve() == path
    except (OSError, ValueError):
        return False
