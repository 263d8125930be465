"""Every op record, one module per family. Importing this package registers them all."""

from . import elementwise, fused, index, math, nn, reduce, shape, state  # noqa: F401
from . import bits  # noqa: E402,F401
