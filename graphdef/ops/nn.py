"""The neural-network ops' builders in one place (graphdef's public names; ONNX converters
read them as ``nn.conv``, ...). The records live by family: products.py (matmul, gemm),
conv.py, pool.py, norm.py (batch and layer norm, softmax); windows.py holds what convolution
and pooling share."""

from __future__ import annotations

from .conv import conv, conv2d, conv_transpose, conv_transpose2d
from .norm import batch_norm, layer_norm, log_softmax, softmax
from .pool import avg_pool, avg_pool2d, global_avg_pool, global_max_pool, lp_pool, max_pool, max_pool2d
from .products import gemm, matmul

__all__ = [
    "avg_pool",
    "avg_pool2d",
    "batch_norm",
    "conv",
    "conv2d",
    "conv_transpose",
    "conv_transpose2d",
    "gemm",
    "global_avg_pool",
    "global_max_pool",
    "layer_norm",
    "log_softmax",
    "lp_pool",
    "matmul",
    "max_pool",
    "max_pool2d",
    "softmax",
]
