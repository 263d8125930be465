"""The C lowering of every op family, one module each (like graphdef/ops/). Importing this
package fills the C backend's table (../table.py)."""

from . import comm, elementwise, index, nn, quant, reduce, resize, rnn, shape  # noqa: F401
