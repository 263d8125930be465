"""The one error hierarchy of flowc.

Every error a user can trigger is a ``FlowcError``; its message is one line that names
what went wrong and where (node, op, shapes, file). Subclasses let callers catch a kind.
"""

from __future__ import annotations

NAME_LIMIT = 200  # characters of a model file's name shown in messages and node names (the middle cut)


def printable(text, limit: int | None = None) -> str:
    r"""``text`` safe to show on one terminal line: every character that is not printable
    escaped as Python writes it (``\x1b``, ``\u202e``, a lone surrogate ``\udcff``), and past
    ``limit`` characters its middle cut to "..." (the start and the end of a name tell layers
    and nodes apart). Names in model files are untrusted: messages show them through this.

    >>> printable("evil\x1b[2J"), printable("a" * 10 + "b" * 10, limit=9)
    ('evil\\x1b[2J', 'aaa...bbb')
    """
    text = str(text)
    if limit is not None and len(text) > limit:
        head = (limit - 3) // 2
        text = text[:head] + "..." + text[len(text) - (limit - 3 - head) :]
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escape(c) for c in text)


def _escape(c: str) -> str:
    code = ord(c)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


class FlowcError(Exception):
    """Base of every error flowc raises on bad input."""

    def __init__(self, message: str):
        # One line: a multi-line message would be cut by log collectors and CLIs; control
        # characters from untrusted names (terminal escapes) are shown escaped.
        super().__init__(printable(" ".join(str(message).split())))


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
