"""The one error hierarchy of flowc.

Every error a user can trigger is a ``FlowcError``; its message is one line that names
what went wrong and where (node, op, shapes, file). Subclasses let callers catch a kind.
"""

from __future__ import annotations


class FlowcError(Exception):
    """Base of every error flowc raises on bad input."""

    def __init__(self, message: str):
        # One line: a multi-line message would be cut by log collectors and CLIs.
        super().__init__(" ".join(str(message).split()))


class GraphError(FlowcError):
    """A malformed graph: cycles, dangling inputs, duplicate names, type mismatches."""


class ShapeError(FlowcError):
    """Shapes or dtypes that an op cannot accept."""


class AttrError(FlowcError):
    """A missing, unknown or ill-typed op attribute."""


class UnsupportedError(FlowcError):
    """An op, dtype or feature flowc does not implement."""


class FeedError(FlowcError):
    """A missing, unknown or ill-shaped feed or fetch given to the interpreter."""


class ExecutionError(FlowcError):
    """An op failed while running on concrete values (e.g. an index out of range)."""


class SerializationError(FlowcError):
    """A graph file that cannot be read or written."""


class GradientError(FlowcError):
    """A gradient that cannot be built (non-differentiable op on the path, bad targets)."""


class ToolchainError(FlowcError):
    """A missing compiler or a failing build: names the compiler, the command and the first errors."""


class CheckpointError(FlowcError):
    """A checkpoint that cannot be read, or that belongs to another model: names the file and
    the first variable that does not match."""
