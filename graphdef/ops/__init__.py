"""Every op record, one module per family. Importing this package registers them all."""

from . import (  # noqa: F401
    bits,
    comm,
    control,
    conv,
    elementwise,
    fused,
    index,
    math,
    nn,
    norm,
    pool,
    products,
    quant,
    reduce,
    resize,
    rnn,
    shape,
    state,
)
