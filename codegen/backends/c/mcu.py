"""Microcontroller builds: the test firmware, its footprint, and running it under QEMU.

An MCU export (``--arch cortex-m4``) is a static library ``lib<name>.a`` and ``<name>.h``; the
model code uses no malloc, no stdio and no OS call (``check_imports`` refuses a library that
would). To know what the model costs on the device, flowc links it into a minimal firmware
(``firmware.c``: static arena, one call of ``<name>_run``; ``runtime_c/mcu/startup.c`` and
``mps2.ld``) with ``-ffunction-sections -fdata-sections -Wl,--gc-sections`` and reads the
linker map, input section by input section:

- weights: the model's ``<name>_w_*`` constants (or its weight blob);
- kernels: the step functions ``<name>_step_*`` (a kernel call with constant arguments
  each; on MCUs they are kept out of line) and every other function or table of the model
  object (out-of-line kernel helpers);
- glue, the code flowc adds around the kernels: ``<name>_run`` (argument checks and one call
  per step), ``<name>_status_string``, ``<name>_state_init``, the tensor-info tables and their
  strings;
- library: what the kernels pull from newlib-nano, libm and libgcc (memcpy, expf, soft float);
- harness: the firmware's own start-up and main (not counted: every application has one).

RAM is the arena (``<NAME>_ARENA_BYTES``, caller-provided), the .data/.bss of the model and
the C library, and the stack: the deepest path from ``<name>_run`` through the call graph of
the linked firmware, each function's frame read from its disassembly (push, vpush, sub sp).
``run_firmware`` runs the firmware on the QEMU board of the arch and also measures the stack
(painted before the run), which the tests compare with that bound.
"""

from __future__ import annotations

import bisect
import json
import math
import re
import shlex
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from graphdef import dtypes
from graphdef.errors import ExecutionError, FlowcError, ToolchainError
from graphdef.interpret import feed_value
from graphdef.ir import TensorType

from ...render.spelling import PUBLIC
from ...target import Target
from . import emit, toolchain
from .toolchain import BUILD

# Symbols the model library must not need: allocation, stdio, process and OS services.
FORBIDDEN = frozenset(
    "malloc calloc realloc free printf fprintf sprintf snprintf vprintf puts putchar fputs fputc "
    "fopen fclose fread fwrite fflush fseek ftell exit abort _exit atexit _sbrk sbrk _write _read "
    "_open _close _lseek _fstat _isatty _kill _getpid time clock gettimeofday clock_gettime "
    "signal raise __assert_func __assert".split()
)


@dataclass(frozen=True)
class Footprint:
    """Bytes a model costs on a microcontroller (see the module docstring for the split)."""

    arch: str
    flash: int
    code: int
    kernels: int
    glue: int
    glue_unused: int
    library: int
    weights: int
    ram: int
    arena: int
    arena_lower_bound: int
    state: int
    stack: int
    data: int
    io: int
    harness: int
    imports: tuple[str, ...]

    def line(self) -> str:
        """The one-line summary ``flowc compile`` prints."""
        return (
            f"flash: {_kib(self.flash)} (code {_kib(self.code)}, weights {_kib(self.weights)})   "
            f"RAM: arena {_kib(self.arena)} (lower bound {_kib(self.arena_lower_bound)})"
            + (f" + state {self.state} B" if self.state else "")
            + f" + stack {self.stack} B"
            + (f" + data {self.data} B" if self.data else "")
        )

    def detail(self) -> str:
        return (
            f"code: kernels {self.kernels} B, flowc glue {self.glue} B (+{self.glue_unused} B of status "
            f"strings and tensor info if the application uses them), C library {self.library} B "
            f"({', '.join(self.imports) or 'nothing'}); inputs/outputs {self.io} B in the caller's "
            f"buffers; test firmware start-up and main {self.harness} B not counted"
        )

    @classmethod
    def from_json(cls, d: dict) -> Footprint:
        return cls(**{k: tuple(v) if k == "imports" else v for k, v in d.items() if k != "method"})

    def to_json(self) -> dict:
        d = asdict(self)
        d["imports"] = list(self.imports)
        d["method"] = (
            "linker map of a firmware linked with --gc-sections; stack: deepest call path from "
            "the run function in the linked code (frames from push/vpush/sub sp)"
        )
        return d


def _kib(n: int) -> str:
    return f"{n / 1024:.1f} KiB"


# ----------------------------------------------------------------------------- building
def link_firmware(
    folder: Path, name: str, target: Target, cc: str | None = None, flags=(), lib: str = ""
) -> Path:
    """Link folder/build/firmware.elf (and build/firmware.map) from firmware.c, the start-up
    file and build/lib<name>.a (or ``lib``), as the Makefile's ``firmware`` rule does."""
    cc = toolchain.find_cc(cc, target)
    cmd = [
        *shlex.split(cc),
        *toolchain.STRICT,
        *target.cflags(),
        *flags,
        "-I.",
        "-Iruntime",
        "-Iruntime/mcu",
        *emit.firmware_ldflags(target),
        f"-Wl,-Map={BUILD}/firmware.map",
        "-o",
        f"{BUILD}/firmware.elf",
        "firmware.c",
        "runtime/mcu/startup.c",
        lib or f"{BUILD}/lib{name}.a",
        "-lm",
    ]
    (folder / BUILD).mkdir(exist_ok=True)
    toolchain.run(cmd, cwd=folder)
    return folder / BUILD / "firmware.elf"


def imports(folder: Path, name: str, target: Target) -> list[str]:
    """The symbols the model library needs from elsewhere (undefined in it, not defined by
    another of its objects)."""
    nm = target.tool("nm")
    undefined = toolchain.run([nm, "-u", f"{BUILD}/lib{name}.a"], cwd=folder)
    defined = toolchain.run([nm, "--defined-only", f"{BUILD}/lib{name}.a"], cwd=folder)
    need = {ln.split()[-1] for ln in undefined.splitlines() if ln.strip().startswith("U ")}
    return sorted(need - {ln.split()[-1] for ln in defined.splitlines() if len(ln.split()) == 3})


def check_imports(names: list[str], lib: str) -> None:
    """Refuse a library that needs allocation, stdio or OS services."""
    bad = sorted(s for s in names if s in FORBIDDEN or s.startswith("pthread_"))
    if bad:
        raise FlowcError(f"{lib} would call {', '.join(bad)}: model code for a microcontroller must not")


# ----------------------------------------------------------------------------- linker map
@dataclass(frozen=True)
class InputSection:
    output: str  # the output section: .text, .rodata, .data, .bss, ...
    name: str  # the input section (".text.net_run") or "*fill*"
    size: int
    file: str  # the object, "libnet.a(net.o)", or "" for fill


_SECTION = re.compile(r"^ (\S+)\s+0x([0-9a-f]+)\s+0x([0-9a-f]+)(?:\s+(.*))?$")
_WRAPPED = re.compile(r"^\s+0x([0-9a-f]+)\s+0x([0-9a-f]+)(?:\s+(.*))?$")
_OUTPUT = re.compile(r"^(\.\S+)(?:\s+0x[0-9a-f]+\s+0x[0-9a-f]+.*)?$")


def parse_map(text: str, discarded: bool = False) -> list[InputSection]:
    """The input sections placed in each output section, from a GNU ld map file (the part
    after "Linker script and memory map"; a long section name wraps onto the next line), or
    with ``discarded`` those --gc-sections dropped (output section "")."""
    if discarded:
        text = text.split("Discarded input sections", 1)[-1].split("Memory Configuration", 1)[0]
    else:
        text = text.split("Linker script and memory map", 1)[-1]
    out, pending, current = [], None, ""
    for line in text.splitlines():
        if pending is not None:
            m = _WRAPPED.match(line)
            if m:
                out.append(InputSection(current, pending, int(m.group(2), 16), (m.group(3) or "").strip()))
            pending = None
            continue
        m = _OUTPUT.match(line)
        if m:
            current = m.group(1)
            continue
        m = _SECTION.match(line)
        if m and not m.group(1).startswith("*("):
            out.append(InputSection(current, m.group(1), int(m.group(3), 16), (m.group(4) or "").strip()))
        elif re.fullmatch(r" (\.\S+)", line):
            pending = line.strip()
    return out


FLASH_OUTPUTS = (".isr_vector", ".text", ".rodata", ".ARM.extab", ".ARM.exidx", ".data")
RAM_OUTPUTS = (".data", ".bss")


def classify(sec: InputSection, name: str) -> str:
    """weights, kernels, glue, library, harness or fill (see the module docstring)."""
    if sec.name == "*fill*":
        return "fill"
    m = re.search(rf"lib{re.escape(name)}\.a\((.+)\.o\)$", sec.file)
    if not m:
        return "library" if re.search(r"\.a\(.+\)$", sec.file) else "harness"
    if m.group(1) == f"{name}_weights" or sec.name.startswith(f".rodata.{name}_w_"):
        return "weights"
    glue = tuple(f"{name}_{s}" for s in ("run", "status_string", "state_init", "inputs", "outputs"))
    symbol = re.sub(r"^\.(text|rodata|data|bss)\.", "", sec.name)
    if symbol.startswith(glue) or ".str1." in sec.name or sec.name.startswith(".rodata.str"):
        return "glue"
    return "kernels"


# ----------------------------------------------------------------------------- stack bound
_FUNC = re.compile(r"^([0-9a-f]+) <([^>]+)>:$")
_INSN = re.compile(r"^\s*[0-9a-f]+:\s+(\S+)\s*(.*)$")  # (8-digit addresses start the line)
_TARGET = re.compile(r"\b([0-9a-f]+) <([^>+]+)(?:\+0x[0-9a-f]+)?>")


def _reg_count(operands: str) -> tuple[int, int]:
    """(core registers, bytes of FP registers) in a register list such as {r4-r7, lr}."""
    inner = operands[operands.find("{") + 1 : operands.find("}")]
    core = fp = 0
    for item in (s.strip() for s in inner.split(",") if s.strip()):
        lo, _, hi = item.partition("-")
        count = int(re.sub(r"\D", "", hi)) - int(re.sub(r"\D", "", lo)) + 1 if hi else 1
        if lo.startswith("d"):
            fp += 8 * count
        elif lo.startswith("s") and lo[1:].isdigit():
            fp += 4 * count
        else:
            core += count
    return core, fp


def frames(disassembly: str) -> dict[str, tuple[int, set[str], bool]]:
    """Per function: (bytes its prologue takes from the stack, functions it calls or
    tail-calls, whether it moves sp by a run-time amount or calls through a pointer)."""
    funcs: dict[str, tuple[int, set[str], bool]] = {}
    # a branch's target by its address, the function around it (objdump names an address by the
    # nearest symbol below it: past 64 KiB of code that can be the linker's absolute STACK_SIZE)
    heads = [m for m in map(_FUNC.match, disassembly.splitlines()) if m]
    starts = sorted((int(m.group(1), 16), m.group(2)) for m in heads)
    addrs = [a for a, _ in starts]

    def around(addr: int) -> str | None:
        k = bisect.bisect_right(addrs, addr) - 1
        return starts[k][1] if k >= 0 else None

    current, frame, calls, dynamic = None, 0, set(), False
    for line in disassembly.splitlines() + ["00000000 <end>:"]:
        m = _FUNC.match(line)
        if m:
            if current is not None:
                funcs[current] = (frame, calls, dynamic)
            current, frame, calls, dynamic = m.group(2), 0, set(), False
            continue
        m = _INSN.match(line)
        if not m or current is None:
            continue
        op, args = m.group(1), m.group(2).split(";")[0].split("@")[0].strip()
        base = op.split(".")[0]
        if base in ("push", "stmdb") and (base == "push" or args.startswith("sp!")):
            core, fp = _reg_count(args)
            frame += 4 * core + fp
        elif base in ("vpush", "vstmdb") and (base == "vpush" or args.startswith("sp!")):
            frame += _reg_count(args)[1]
        elif base in ("sub", "subw") and re.match(r"sp,\s*(sp,\s*)?#", args):
            frame += int(re.search(r"#(\d+)", args).group(1))
        elif base in ("sub", "subw", "mov") and re.match(r"sp,", args):
            dynamic = True  # sp set from a register: alloca / VLA
        elif re.search(r"\[sp, #-(\d+)\]!", args) and base.startswith("str"):
            frame += int(re.search(r"\[sp, #-(\d+)\]!", args).group(1))
        elif base in ("blx", "bx") and re.fullmatch(r"(r\d+|ip|sl|fp)", args):
            dynamic = True  # a call through a pointer
        elif base.startswith("b") and base not in ("bf", "bfx", "bfcsel"):  # (Armv8.1-M's branch-future
            t = _TARGET.search(args)  # hints name labels, not calls; bfl does call)
            callee = around(int(t.group(1), 16)) if t else None
            if callee is not None and callee != current:
                calls.add(callee)
    return funcs


def stack_bound(disassembly: str, root: str) -> tuple[int, bool]:
    """(deepest stack use from ``root`` through its callees, exact): not exact when a
    function on the way moves sp by a run-time amount, calls through a pointer, recurses or
    is not in the disassembly."""
    funcs = frames(disassembly)
    memo: dict[str, tuple[int, bool]] = {}

    def depth(f: str, path: frozenset) -> tuple[int, bool]:
        if f not in funcs or f in path:
            return 0, False
        if f not in memo:
            frame, calls, dynamic = funcs[f]
            below = [depth(c, path | {f}) for c in calls]
            memo[f] = (
                frame + max((d for d, _ in below), default=0),
                not dynamic and all(e for _, e in below),
            )
        return memo[f]

    if root not in funcs:
        raise FlowcError(f"the firmware has no function {root}")
    return depth(root, frozenset())


# ----------------------------------------------------------------------------- footprint
def footprint(folder: Path, name: str, target: Target, metadata: dict) -> Footprint:
    """Measure the model in folder/build/firmware.elf (linked by link_firmware)."""
    sections = parse_map((folder / BUILD / "firmware.map").read_text())
    sums: dict[tuple[str, str], int] = {}
    # alignment fill belongs to what follows it in the same output section
    for i, sec in enumerate(sections):
        kind = classify(sec, name)
        if kind == "fill":
            nxt = next((s for s in sections[i + 1 :] if s.output == sec.output and s.name != "*fill*"), None)
            kind = classify(nxt, name) if nxt is not None else "harness"
        if sec.output in FLASH_OUTPUTS:  # .data too: its initial values are in flash
            sums[("flash", kind)] = sums.get(("flash", kind), 0) + sec.size
        if sec.output in RAM_OUTPUTS:
            sums[("ram", kind)] = sums.get(("ram", kind), 0) + sec.size
    flash = {k: sums.get(("flash", k), 0) for k in ("weights", "kernels", "glue", "library", "harness")}
    ram = {k: sums.get(("ram", k), 0) for k in ("weights", "kernels", "glue", "library", "harness")}
    disassembly = toolchain.run(
        [target.tool("objdump"), "-d", "--no-show-raw-insn", f"{BUILD}/firmware.elf"], cwd=folder
    )
    stack, exact = stack_bound(disassembly, f"{name}_run")
    if not exact:
        raise FlowcError(
            f"cannot bound the stack of {name}_run (a call through a pointer, recursion or a "
            "run-time stack allocation); please report this model"
        )
    glue_unused = sum(
        s.size
        for s in parse_map((folder / BUILD / "firmware.map").read_text(), discarded=True)
        if s.name.startswith((".text", ".rodata")) and classify(s, name) == "glue"
    )
    io = sum(
        math.prod(t["shape"]) * dtypes.itemsize(t["dtype"]) for t in metadata["inputs"] + metadata["outputs"]
    )
    code = flash["kernels"] + flash["glue"] + flash["library"]
    data = ram["weights"] + ram["kernels"] + ram["glue"] + ram["library"]
    return Footprint(
        arch=target.arch,
        flash=code + flash["weights"],
        code=code,
        kernels=flash["kernels"],
        glue=flash["glue"],
        glue_unused=glue_unused,
        library=flash["library"],
        weights=flash["weights"],
        ram=metadata["arena_bytes"] + metadata["state_bytes"] + data + stack,
        arena=metadata["arena_bytes"],
        arena_lower_bound=metadata["arena_lower_bound"],
        state=metadata["state_bytes"],
        stack=stack,
        data=data,
        io=io,
        harness=flash["harness"],
        imports=tuple(imports(folder, name, target)),
    )


# ----------------------------------------------------------------------------- running
def run_firmware(
    folder, feeds: dict | None = None, timeout: float = 120.0, runs: int = 1, profile: bool = False
) -> dict:
    """Run the model of an MCU export folder on the arch's QEMU board: ``runs`` calls one after
    the other on the same feeds (a training step each, for a model with state), the outputs
    those of the last. ``profile``: a profiling build of the library instead (-DFC_PROFILE,
    runtime/mcu/timing.h's SysTick clock, lib<name>_profile.a beside the library), whose
    result also has "steps": each step's instructions, in step order (the sum is above the
    run's "instructions" by the clock's own reads).

    Writes ``feeds`` (input name -> array) into firmware_data.h, relinks firmware.elf and runs
    it under qemu-system-arm with semihosting and ``-icount shift=0``. Returns {"outputs":
    {name: array}, "stack": bytes used by the run (measured), "status": 0, "instructions": the
    runs' instructions together (counted by SysTick, to about 40)}. A non-zero status or a
    crash raises ExecutionError.
    """
    folder = Path(folder)
    meta = json.loads((folder / "metadata.json").read_text())
    target = Target(meta["arch"])
    if target.spec.product != "library":
        raise FlowcError(f"{folder} holds a {meta['arch']} build, not a microcontroller one")
    ins = []
    values = {}
    for t in meta["inputs"]:
        tt = TensorType(tuple(t["shape"]), t["dtype"])
        ins.append({"label": t["name"], "cname": t["c_name"], "ctype": PUBLIC[t["dtype"]], "size": tt.size})
        if feeds is not None:
            if t["name"] not in feeds:
                raise FlowcError(f"model '{meta['name']}' needs feed '{t['name']}' ({tt})")
            values[t["name"]] = feed_value(t["name"], tt, feeds[t["name"]])
    (folder / "firmware_data.h").write_text(
        emit.firmware_data(emit.environment(), emit.firmware_arrays(ins, values if feeds else None), runs)
    )
    if profile:
        lib = _profile_library(folder, meta["name"], target)
        link_firmware(folder, meta["name"], target, flags=("-DFC_PROFILE",), lib=lib)
    else:
        link_firmware(folder, meta["name"], target)
    if not shutil.which(target.spec.qemu):
        raise ToolchainError(
            f"running {target.arch} firmware needs {target.spec.qemu}; install it "
            f"(Debian: apt-get install {target.spec.qemu_package})"
        )
    cmd = [
        target.spec.qemu,
        "-M",
        target.spec.board,
        "-nographic",
        "-monitor",
        "none",
        "-semihosting-config",
        "enable=on,target=native",
        "-icount",
        "shift=0",
        "-kernel",
        str(folder / BUILD / "firmware.elf"),
    ]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ExecutionError(f"{target.spec.board} firmware did not finish in {timeout:.0f} s") from None
    return _parse_run(res, meta)


def _profile_library(folder: Path, name: str, target: Target) -> str:
    """build/lib<name>_profile.a: the library's sources built with -DFC_PROFILE, runtime/mcu
    first on the include path (its timing.h reads SysTick)."""
    cc = toolchain.find_cc(None, target)
    srcs = [f"{name}.c"] + ([f"{name}_weights.c"] if (folder / f"{name}_weights.c").is_file() else [])
    objs = []
    for src in srcs:
        obj = f"{BUILD}/{src[:-2]}_profile.o"
        cmd = [
            *shlex.split(cc),
            *target.cflags(),
            "-DFC_PROFILE",
            "-I.",
            "-Iruntime/mcu",
            "-Iruntime",
            "-Wa,-I.",
        ]
        toolchain.run([*cmd, "-c", src, "-o", obj], cwd=folder)
        objs.append(obj)
    lib = f"{BUILD}/lib{name}_profile.a"
    (folder / BUILD).mkdir(exist_ok=True)
    (folder / lib).unlink(missing_ok=True)
    toolchain.run([target.tool("ar"), "rcs", lib, *objs], cwd=folder)
    return lib


def _parse_run(res: subprocess.CompletedProcess, meta: dict) -> dict:
    lines = (res.stdout + "\n" + res.stderr).splitlines()  # semihosting writes to QEMU's stderr
    fields, hexes, steps = {}, {}, []
    for ln in lines:
        parts = ln.split()
        if len(parts) == 2 and parts[0] == "step":
            steps.append(int(parts[1]))
        elif len(parts) == 2 and parts[0] in ("status", "stack", "stack_at_call", "ticks", "calib_ticks"):
            fields[parts[0]] = int(parts[1])
        elif len(parts) == 3 and parts[0] == "out":
            hexes[int(parts[1])] = parts[2]
    if "status" not in fields:
        tail = " | ".join((res.stdout + res.stderr).strip().splitlines()[-3:])
        raise ExecutionError(f"the firmware stopped before reporting (exit {res.returncode}): {tail}")
    if fields["status"] != 0:
        raise ExecutionError(f"{meta['name']}_run returned status {fields['status']} on the board")
    outputs = {}
    for k, t in enumerate(meta["outputs"]):
        raw = bytes.fromhex(hexes.get(k, ""))
        dt = np.dtype(dtypes.np_dtype(t["dtype"])).newbyteorder("<")
        outputs[t["name"]] = np.frombuffer(raw, dt).astype(dt.newbyteorder("=")).reshape(t["shape"])
    calib = fields.get("calib_ticks", 0)
    extra = {"steps": [round(t * 2_000_000 / calib) for t in steps]} if steps and calib else {}
    return {
        **extra,
        "outputs": outputs,
        "stack": fields.get("stack", 0) - fields.get("stack_at_call", 0),
        "status": fields["status"],
        # instructions of the runs together (QEMU's -icount shift=0: one virtual ns each), from
        # SysTick ticks scaled by those of the firmware's loop of 2,000,000 instructions
        "instructions": round(fields.get("ticks", 0) * 2_000_000 / calib) if calib else None,
    }
