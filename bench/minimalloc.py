"""The memory planner on the MiniMalloc "challenging" instances (ASPLOS 2023).

Runs ``greedy_by_size`` and ``plan(algorithm="best")`` (alignment 1) on the 11 instances in
``../shared/benchmarks/minimalloc`` (relative to the repository root) and prints one row per
instance: buffers, lower bound, capacity (from the file name), arena / capacity for each, and
the seconds ``best`` took. Exits 1 if some instance does not fit in its capacity.

    python3 bench/minimalloc.py [--time-limit 60] [NAME ...]   # NAME: A .. K, default all
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from codegen import memory  # noqa: E402
from codegen.memory import exact_search  # noqa: E402

DATA = ROOT.parent / "shared" / "benchmarks" / "minimalloc"


def load(path: Path) -> list[memory.BufferReq]:
    """Reads ``id,lower,upper,size`` rows; a buffer is live on [lower, upper): last = upper - 1."""
    with path.open(newline="") as f:
        return [
            memory.BufferReq(int(r["size"]), int(r["lower"]), int(r["upper"]) - 1) for r in csv.DictReader(f)
        ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="instances to run (A .. K); default: all")
    parser.add_argument("--time-limit", type=float, default=60.0, help="seconds per instance for best")
    args = parser.parse_args(argv)
    files = sorted(p for p in DATA.glob("*.csv") if p.stem.split(".")[0] != "example")
    if args.names:
        files = [p for p in files if p.stem.split(".")[0] in args.names]
    if not files:
        print(f"no instances found in {DATA}", file=sys.stderr)
        return 2
    core = "C (cffi)" if exact_search._load_native() is not None else "pure Python (no C compiler)"
    print(f"search core: {core}; the build, if any, is done before the clock starts")
    header = (
        f"{'instance':<10}{'buffers':>8}{'lower':>10}{'capacity':>10}"
        f"{'greedy':>8}{'best':>8}{'time_s':>8}  algorithm"
    )
    print(header)
    print("-" * len(header))
    failed = []
    for path in files:
        name, capacity = path.stem.split(".")[0], int(path.stem.split(".")[1])
        buffers = load(path)
        greedy = memory.arena_bytes(buffers, memory.greedy_by_size(buffers))
        start = time.perf_counter()
        best = memory.plan(buffers, algorithm="best", alignment=1, time_limit=args.time_limit)
        seconds = time.perf_counter() - start
        memory.check(buffers, best)
        if best.arena_bytes > capacity:
            failed.append(name)
        print(
            f"{name:<10}{len(buffers):>8}{memory.lower_bound(buffers):>10}{capacity:>10}"
            f"{greedy / capacity:>8.3f}{best.arena_bytes / capacity:>8.3f}{seconds:>8.2f}  {best.algorithm}",
            flush=True,
        )
    if failed:
        print(f"over capacity: {', '.join(failed)}", file=sys.stderr)
        return 1
    print(f"all {len(files)} instances fit in their capacity")
    return 0


if __name__ == "__main__":
    sys.exit(main())
