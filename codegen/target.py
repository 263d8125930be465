"""What a build is for: architecture, instruction-set portability and threads.

The compiler flags of every build come from here, so the cffi library, the standalone
binary and the generated Makefile agree.
"""

from __future__ import annotations

import shlex
import subprocess
from dataclasses import asdict, dataclass

from graphdef.errors import FlowcError

ARCHES = ("host",)


@dataclass(frozen=True)
class Target:
    """``arch``: where the code runs; ``portable``: no -march=native (any CPU of the arch);
    ``threads``: worker threads for the heavy steps (1: none)."""

    arch: str = "host"
    portable: bool = False
    threads: int = 1

    def __post_init__(self):
        if self.arch not in ARCHES:
            raise FlowcError(
                f"unknown or unsupported arch '{self.arch}'; this version builds for {', '.join(ARCHES)}"
            )
        if not isinstance(self.threads, int) or not 1 <= self.threads <= 256:
            raise FlowcError(f"threads must be an integer from 1 to 256, got {self.threads!r}")

    def cflags(self) -> tuple[str, ...]:
        """Optimization flags: -O3, and the host's instruction set unless portable."""
        # -ffp-contract=fast: fused multiply-adds where the target has them (gcc turns them
        # off under -std=c99, clang does not); results stay within every test's tolerance
        base = ("-O3", "-ffp-contract=fast")
        return base if self.portable else (*base, "-march=native")

    def key(self) -> dict:
        return asdict(self)

    def isa(self, cc: str, flags=()) -> str:
        """The float32 GEMM micro-kernel ``cc`` selects with these flags and the caller's extra
        ``flags`` (avx512, avx2, ...)."""
        key = (cc, self.cflags(), tuple(flags))
        if key not in _ISA:
            from graphdef.ops._sgemm_pack import isa_from_macros

            cmd = [*shlex.split(cc), *self.cflags(), *flags, "-dM", "-E", "-x", "c", "-"]
            try:
                res = subprocess.run(cmd, input="", capture_output=True, text=True, timeout=60)
                _ISA[key] = isa_from_macros(res.stdout) if res.returncode == 0 else "scalar"
            except (OSError, subprocess.TimeoutExpired):
                _ISA[key] = "scalar"
        return _ISA[key]


_ISA: dict = {}
