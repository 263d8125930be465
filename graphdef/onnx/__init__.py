"""ONNX import: ``load_onnx(path)`` turns an ONNX model into a static-shaped Graph.

Converters live in ``ops_*.py``, one function per ONNX op (and opset range), registered
with ``@converter``. Importing this package registers them all.
"""

from . import (  # noqa: F401  (registers converters; ops_signal's Resize overrides ops_basic's)
    ops_basic,
    ops_control,
    ops_index,
    ops_math,
    ops_nn,
    ops_quant,
    ops_quant_ms,
    ops_rnn,
    ops_signal,
)
from .importer import OnnxImportError, converter, load_onnx

__all__ = ["OnnxImportError", "converter", "load_onnx"]
