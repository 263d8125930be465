"""Build time of a model with 25M float32 parameters (100 MB of weights).

    python bench/big_weights.py

Large weights go into one binary blob that the assembler pulls in with .incbin, so the C
compiler never parses them; this prints the time from graph to finished binary.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import codegen  # noqa: E402
import graphdef as gd  # noqa: E402


def main() -> int:
    rng = np.random.default_rng(0)
    g = gd.Graph("big25m")
    with g:
        x = gd.placeholder("x", (1, 4096))
        w1 = gd.constant(rng.standard_normal((4096, 4096), dtype=np.float32) * 0.01)
        w2 = gd.constant(rng.standard_normal((4096, 2048), dtype=np.float32) * 0.01)
        w3 = gd.constant(rng.standard_normal((2048, 10), dtype=np.float32) * 0.01)
        gd.softmax(gd.relu(gd.relu(x @ w1) @ w2) @ w3, name="y")
    params = sum(a.size for a in g.constants.values())
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        out = codegen.export(g, Path(tmp) / "big", name="big")
        seconds = time.perf_counter() - t0
        size = (out / "big").stat().st_size
    print(f"{params} parameters ({params * 4 / 1e6:.0f} MB): graph -> standalone binary "
          f"({size / 1e6:.0f} MB) in {seconds:.1f} s")
    return 0 if seconds < 60 else 1


if __name__ == "__main__":
    sys.exit(main())
