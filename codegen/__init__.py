"""flowc code generation: passes, schedule, memory planning, C emission and build drivers.

>>> import numpy as np, graphdef as gd, codegen
>>> with gd.Graph("double") as g:
...     y = gd.mul(gd.placeholder("x", (2,)), 2.0, name="y")
>>> codegen.compile(g)(x=np.array([1, 2], np.float32))["y"]
array([2., 4.], dtype=float32)
"""

from . import memory, passes, schedule
from .compiled import CompiledModel, TensorSpec, compile, compile_many, export, program_for

__all__ = [
    "CompiledModel",
    "TensorSpec",
    "compile",
    "compile_many",
    "export",
    "memory",
    "passes",
    "program_for",
    "schedule",
]
