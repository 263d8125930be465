"""ONNX import: ``load_onnx(path)`` turns an ONNX model into a static-shaped Graph.

Converters live in ``ops_*.py``, one function per ONNX op (and opset range), registered
with ``@converter``. Importing this package registers them all.
"""

from . import ops_basic, ops_index, ops_math, ops_nn, ops_rnn  # noqa: F401  (registers converters)
from .importer import OnnxImportError, converter, load_onnx

__all__ = ["OnnxImportError", "converter", "load_onnx"]
from . import ops_control  # noqa: E402,F401
from . import ops_quant  # noqa: E402,F401
from . import ops_signal  # noqa: E402,F401
