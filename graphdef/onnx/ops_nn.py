"""ONNX converters (this family)."""

from __future__ import annotations
