"""What a build is for: architecture, instruction-set portability and threads.

The compiler, flags and runner of every build come from here, so the cffi library, the
standalone binary, the static library and the generated Makefile agree.

Three kinds of architecture:
- ``host``: the machine flowc runs on, built with the host C compiler (-march=native unless
  portable);
- ``linux``: a Linux phone or board (aarch64, armv7 hard float, riscv64), built as a
  statically linked binary by Debian's GNU cross compiler and run here under qemu-user;
- ``mcu``: a Cortex-M microcontroller, built by arm-none-eabi-gcc into a static library
  (no malloc, no stdio, no OS calls), single-threaded, with a footprint report, and run
  here on an emulated MPS2 board under qemu-system-arm.

>>> Target("cortex-m4").kind, Target("cortex-m4").compiler
('mcu', 'arm-none-eabi-gcc')
>>> parse_bytes("64K"), parse_bytes("1.5MiB"), parse_bytes(4096)
(65536, 1572864, 4096)
"""

from __future__ import annotations

import platform
import re
import shutil
from dataclasses import asdict, dataclass

from graphdef.errors import FlowcError, ToolchainError


@dataclass(frozen=True)
class Arch:
    """One architecture flowc builds for.

    ``prefix``: the GNU tool prefix (``<prefix>gcc``, ``<prefix>ar``, ...), empty for the host;
    ``packages``: the Debian packages that provide the toolchain; ``qemu``: the emulator that
    runs the output here (qemu-user program for linux, qemu-system program for mcu) and
    ``board``: the QEMU machine an MCU firmware runs on, ``ld_script`` its memory map
    (runtime_c/mcu/).

    What differs between a computer and a microcontroller is data here, read by the stages
    that need it: ``product`` ("program": a standalone binary with main.c; "library": a
    static library with a test firmware and a footprint report), ``weight_align`` (bytes;
    microcontrollers pack flash tightly), ``packed_gemm`` (float32 products on the packed GEMM,
    their activations fused; on a microcontroller with an FPU the scalar 4 x 4 tile and one
    compact loop for the edge tiles: ~9 KB of flash for 13x fewer instructions in a DS-CNN's
    products; off on cores that compute floats in software) and ``max_threads``.
    """

    name: str
    kind: str
    prefix: str = ""
    cflags: tuple[str, ...] = ()
    ldflags: tuple[str, ...] = ()
    packages: tuple[str, ...] = ()
    qemu: str = ""
    qemu_package: str = ""
    board: str = ""
    cpu: str = ""
    ld_script: str = "mps2.ld"
    product: str = "program"
    weight_align: int = 64
    packed_gemm: bool = True
    max_threads: int = 256
    pointer_bits: int = 64

    @property
    def max_bytes(self) -> int:
        """The largest tensor, arena, state or weight block the generated C can address: on
        32-bit targets what ``long`` (the C code's size type) holds, 2^31 - 1; on 64-bit ones
        the 47-bit user address space of today's x86-64, AArch64 and RISC-V (Sv48) systems."""
        return 2**31 - 1 if self.pointer_bits == 32 else 2**47


_MCU = ("-Os", "-mthumb", "-ffunction-sections", "-fdata-sections")
_MCU_DATA = {
    "product": "library",
    "weight_align": 8,
    "packed_gemm": True,
    "max_threads": 1,
    "pointer_bits": 32,
}
ARCH_LIST = (
    Arch("host", "host"),
    Arch(
        "aarch64-linux",
        "linux",
        "aarch64-linux-gnu-",
        ("-O3", "-march=armv8-a"),
        ("-static",),
        ("gcc-aarch64-linux-gnu", "libc6-dev-arm64-cross"),
        "qemu-aarch64",
        "qemu-user",
    ),
    # AArch64 cores of Armv8.2 and later with the dot-product extension (Cortex-A76/A78/X1,
    # Neoverse N1: most phones since 2019): int8 convolutions on sdot; QEMU's default CPU has it
    Arch(
        "cortex-a76-linux",
        "linux",
        "aarch64-linux-gnu-",
        ("-O3", "-mcpu=cortex-a76"),
        ("-static",),
        ("gcc-aarch64-linux-gnu", "libc6-dev-arm64-cross"),
        "qemu-aarch64",
        "qemu-user",
    ),
    Arch(
        "armv7-linux",
        "linux",
        "arm-linux-gnueabihf-",
        ("-O3", "-march=armv7-a", "-mfpu=neon", "-mfloat-abi=hard"),
        ("-static",),
        ("gcc-arm-linux-gnueabihf", "libc6-dev-armhf-cross"),
        "qemu-arm",
        "qemu-user",
        pointer_bits=32,
    ),
    Arch(
        "riscv64-linux",
        "linux",
        "riscv64-linux-gnu-",
        ("-O3", "-march=rv64gc", "-mabi=lp64d"),
        ("-static",),
        ("gcc-riscv64-linux-gnu", "libc6-dev-riscv64-cross"),
        "qemu-riscv64",
        "qemu-user",
    ),
    # Cortex-M0+ (ARMv6-M, no FPU: float in software). QEMU has no M0+ board with this
    # memory map; the MPS2 AN385 (Cortex-M3, ARMv7-M) executes every ARMv6-M instruction,
    # so it runs M0+ code for correctness checks (not for timing).
    Arch(
        "cortex-m0plus",
        "mcu",
        "arm-none-eabi-",
        (*_MCU, "-mcpu=cortex-m0plus", "-mfloat-abi=soft", "-DFC_FLOOR_BY_CVT=1"),
        packages=("gcc-arm-none-eabi", "libnewlib-arm-none-eabi"),
        qemu="qemu-system-arm",
        qemu_package="qemu-system-arm",
        board="mps2-an385",
        cpu="cortex-m0plus",
        **{**_MCU_DATA, "packed_gemm": False},  # (software floats: the plain loops are smaller)
    ),
    Arch(
        "cortex-m4",
        "mcu",
        "arm-none-eabi-",
        (*_MCU, "-mcpu=cortex-m4", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16", "-DFC_FLOOR_BY_CVT=1"),
        packages=("gcc-arm-none-eabi", "libnewlib-arm-none-eabi"),
        qemu="qemu-system-arm",
        qemu_package="qemu-system-arm",
        board="mps2-an386",
        cpu="cortex-m4",
        **_MCU_DATA,
    ),
    # Cortex-M7 with the single-precision FPU (fpv5-sp-d16): it runs on every M7 part, the
    # double-precision ones included; the model computes in float32. (FC_FLOOR_BY_CVT, on the
    # M0+ and M4: their FPUs have no rounding instruction, kernels/scalar.h.)
    Arch(
        "cortex-m7",
        "mcu",
        "arm-none-eabi-",
        (*_MCU, "-mcpu=cortex-m7", "-mfloat-abi=hard", "-mfpu=fpv5-sp-d16"),
        packages=("gcc-arm-none-eabi", "libnewlib-arm-none-eabi"),
        qemu="qemu-system-arm",
        qemu_package="qemu-system-arm",
        board="mps2-an500",
        cpu="cortex-m7",
        **_MCU_DATA,
    ),
    # Cortex-M55 (Armv8.1-M with Helium, the M-profile vector extension, and the FPU): the
    # integer kernels take MVE's 16-byte vectors. QEMU's MPS3 AN547 board runs it.
    Arch(
        "cortex-m55",
        "mcu",
        "arm-none-eabi-",
        (*_MCU, "-mcpu=cortex-m55", "-mfloat-abi=hard"),
        packages=("gcc-arm-none-eabi", "libnewlib-arm-none-eabi"),
        qemu="qemu-system-arm",
        qemu_package="qemu-system-arm",
        board="mps3-an547",
        cpu="cortex-m55",
        ld_script="mps3.ld",
        **_MCU_DATA,
    ),
)
ARCHES = {a.name: a for a in ARCH_LIST}
# other common spellings of each arch (GNU triples, Debian and Apple names, core names)
ALIASES = {
    **dict.fromkeys(("native", "x86_64", "x86-64", "amd64"), "host"),
    **dict.fromkeys(("aarch64", "arm64", "armv8", "armv8-a", "aarch64-linux-gnu"), "aarch64-linux"),
    **dict.fromkeys(("cortex-a76", "cortex-a78", "neoverse-n1", "armv8.2-a"), "cortex-a76-linux"),
    **dict.fromkeys(("armv7", "armv7l", "armv7-a", "armhf", "arm-linux-gnueabihf"), "armv7-linux"),
    **dict.fromkeys(("riscv64", "rv64gc", "riscv64-linux-gnu"), "riscv64-linux"),
    **dict.fromkeys(("cortex-m0+", "m0plus", "m0+"), "cortex-m0plus"),
    **{f"m{n}": f"cortex-m{n}" for n in (4, 7, 55)},
}


def arch_name(name: str) -> str:
    """``name``, or the arch it is another spelling of (ALIASES; case ignored)."""
    low = str(name).lower()
    return low if low in ARCHES else ALIASES.get(low, name)
# a tool of an arch that is not on PATH: what to install (Target.missing, toolchain.find_cc)
MISSING_TOOL = (
    "--arch {arch} needs {prog}, which is not on PATH; install it (Debian: apt-get install {packages})"
)


@dataclass(frozen=True)
class Target:
    """``arch``: where the code runs (one of ARCHES); ``portable``: no -march=native (any CPU
    of the arch; cross builds always are); ``threads``: worker threads for the heavy steps
    (1: none; microcontrollers run single-threaded)."""

    arch: str = "host"
    portable: bool = False
    threads: int = 1

    def __post_init__(self):
        object.__setattr__(self, "arch", arch_name(self.arch))  # (frozen: the canonical name)
        if self.arch not in ARCHES:
            raise FlowcError(
                f"unknown or unsupported arch '{self.arch}'; flowc builds for {', '.join(ARCHES)} "
                "(also spelled as GNU triples or core names: aarch64-linux-gnu, arm64, m4, ...)"
            )
        if not isinstance(self.threads, int) or not 1 <= self.threads <= 256:
            raise FlowcError(f"threads must be an integer from 1 to 256, got {self.threads!r}")
        if self.threads > self.spec.max_threads:
            raise FlowcError(f"{self.arch} runs single-threaded: threads must be 1, got {self.threads}")

    @property
    def spec(self) -> Arch:
        return ARCHES[self.arch]

    @property
    def kind(self) -> str:
        """ "host", "linux" (a cross-compiled static binary) or "mcu" (a static library)."""
        return self.spec.kind

    @property
    def compiler(self) -> str | None:
        """The cross compiler's command, None for the host (see codegen.build.find_cc)."""
        return f"{self.spec.prefix}gcc" if self.spec.prefix else None

    def tool(self, name: str) -> str:
        """A binutils program of this arch (``ar``, ``nm``, ``size``), checked on PATH."""
        prog = f"{self.spec.prefix}{name}"
        if not shutil.which(prog):
            raise self.missing(prog)
        return prog

    def missing(self, prog: str) -> ToolchainError:
        """The error for a tool of this arch that is not installed, naming the packages."""
        return ToolchainError(
            MISSING_TOOL.format(arch=self.arch, prog=prog, packages=" ".join(self.spec.packages))
        )

    def runner(self) -> list[str]:
        """The command prefix that runs a linux binary of this arch here (qemu-user), or
        [] for the host. Raises ToolchainError naming the package when qemu is missing."""
        if self.kind == "host":
            return []
        if not shutil.which(self.spec.qemu):
            raise ToolchainError(
                f"running {self.arch} code here needs {self.spec.qemu}, which is not on PATH; "
                f"install it (Debian: apt-get install {self.spec.qemu_package})"
            )
        return [self.spec.qemu]

    def cflags(self) -> tuple[str, ...]:
        """Optimization and instruction-set flags: -O3 (and the host's instruction set unless
        portable) on the host, the arch's flags elsewhere (-Os and the CPU's FPU on MCUs)."""
        if self.kind != "host":
            return self.spec.cflags
        # -ffp-contract=fast: fused multiply-adds where the target has them (gcc turns them
        # off under -std=c99, clang does not); results stay within every test's tolerance.
        # -fno-math-errno: the generated code never reads errno, and a loop calling sqrtf
        # only vectorizes when sqrtf need not set it (the values are the same)
        # -fno-trapping-math: nor does it read the floating-point exception flags, and GCC
        # vectorizes floor, ceil and the selects of fc_round only without them (a quantizing
        # epilogue: 10x faster; the values are the same)
        base = ("-O3", "-ffp-contract=fast", "-fno-math-errno", "-fno-trapping-math")
        if self.portable:
            return base
        # on x86-64, loops the compiler vectorizes use 512-bit registers where the CPU has them
        # (GCC picks 256 for some AVX-512 CPUs): elementwise chains with exp/sigmoid ~20% faster,
        # EfficientNet-B0 0.93x, MobileNetV3-Large 0.98x of the time (the GEMM kernels choose
        # their own width); no effect on CPUs without AVX-512
        wide = ("-mprefer-vector-width=512",) if platform.machine().lower() in ("x86_64", "amd64") else ()
        return (*base, "-march=native", *wide)

    def isa_flags(self) -> tuple[str, ...]:
        """The flags among ``cflags`` a build of the generated code must keep: the instruction
        set, ABI and FPU (-m...: the products' weights are packed for that instruction set at
        compile time, and the ABI must match the firmware's) and definitions (-D...). The
        Makefile keeps them apart from CFLAGS, which a user sets for optimization or warnings."""
        return tuple(f for f in self.cflags() if f.startswith(("-m", "-D")))

    def opt_flags(self) -> tuple[str, ...]:
        """``cflags`` less ``isa_flags``: optimization and floating-point contract flags."""
        return tuple(f for f in self.cflags() if not f.startswith(("-m", "-D")))

    def ldflags(self) -> tuple[str, ...]:
        """Link flags of a standalone program (-static for cross-compiled Linux binaries)."""
        return self.spec.ldflags

    def key(self) -> dict:
        """The target as plain data for a build's cache key, with the C flags it builds with
        (they follow the machine's CPU)."""
        return {**asdict(self), "cflags": list(self.cflags())}


_UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1024, "kib": 1024, "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20}


def parse_bytes(value, what: str = "size") -> int:
    """Bytes from an int or a string with an optional K/KB/KiB/M/MB/MiB suffix (powers of
    1024, as memory sizes of microcontrollers are given)."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", str(value))
    if not m or m.group(2).lower() not in _UNITS:
        raise FlowcError(f"{what} expects bytes like 4096, 64K, 256KiB or 1M, got {value!r}")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])
