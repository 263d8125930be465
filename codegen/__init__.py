"""flowc code generation: the pipeline from a Graph to built code.

Shared stages: passes (passes.py), schedule (schedule.py), storage (storage.py), memory plan
(memory/, program.py), put together as one list in pipeline.py; each backend (backends/)
lowers, renders and builds. compiled.py and exports.py hold the entry points below; cli.py the ``flowc``
command.

>>> import numpy as np, graphdef as gd, codegen
>>> with gd.Graph("double") as g:
...     y = gd.mul(gd.placeholder("x", (2,)), 2.0, name="y")
>>> codegen.compile(g)(x=np.array([1, 2], np.float32))["y"]
array([2., 4.], dtype=float32)
"""

from . import memory, passes, pipeline, schedule
from .compiled import CompiledModel, RankModel, TensorSpec, compile, compile_many, program_for
from .exports import export

__all__ = [
    "CompiledModel",
    "RankModel",
    "TensorSpec",
    "compile",
    "compile_many",
    "export",
    "memory",
    "passes",
    "pipeline",
    "program_for",
    "schedule",
]
