"""Every op record, one module per family. Importing this package registers them all."""

from . import bits, comm, elementwise, fused, index, math, nn, reduce, resize, rnn, shape, state  # noqa: F401
