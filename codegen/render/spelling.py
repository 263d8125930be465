"""Safe C spellings for untrusted strings: identifiers, string literals, comments, numbers.

Names in model files are untrusted: they reach generated C only through these functions.
"""

from __future__ import annotations

import math
import re

import numpy as np

from graphdef.ir import TensorType

C_KEYWORDS = frozenset(
    "auto break case char const continue default do double else enum extern float for goto if inline "
    "int long register restrict return short signed sizeof static struct switch typedef union "
    "unsigned void volatile while _Bool _Complex _Imaginary asm "
    # C11 and C23
    "_Alignas _Alignof _Atomic _Generic _Noreturn _Static_assert _Thread_local _BitInt _Decimal32 "
    "_Decimal64 _Decimal128 alignas alignof bool constexpr false nullptr static_assert thread_local "
    "true typeof typeof_unqual "
    # C++, which the CUDA build compiles the model's sources as
    "catch class const_cast delete dynamic_cast explicit export friend mutable namespace new noexcept "
    "operator private protected public reinterpret_cast static_cast template this throw try typeid "
    "typename using virtual wchar_t char8_t char16_t char32_t concept consteval constinit co_await "
    "co_return co_yield decltype requires".split()
)

# ----------------------------------------------------------------------------- model names
# A model NAME becomes the files NAME.h, NAME.c (or NAME.cu) and the binary NAME beside main.c,
# the Makefile and runtime/ in the output folder, the output folder is first on the include path,
# and NAME_run, NAME_inputs, ... and NAME_H, NAME_OK, ... sit beside the C library's symbols and
# flowc's runtime (fc_*, FC_*, FLOWC_*_H) in one program. model_name_problem says which names
# meet one, and how (codegen.loaded.check_name refuses them).

C_LIBRARY = frozenset(
    # C99/C11 functions, objects, macros and types of the headers below (and main)
    "main abort abs acos acosh asctime asin asinh assert atan atan2 atanh atexit atof atoi atol "
    "atoll bsearch btowc cabs cacos calloc cbrt ceil clearerr clock copysign cos cosh ctime "
    "difftime div erf erfc errno exit exp exp2 expm1 fabs fclose fdim feof ferror fflush fgetc "
    "fgetpos fgets floor fma fmax fmin fmod fopen fprintf fputc fputs fread free freopen frexp "
    "fscanf fseek fsetpos ftell fwrite getc getchar getenv gets gmtime hypot ilogb imaxabs "
    "isalnum isalpha isblank iscntrl isdigit isfinite isgraph isinf islower isnan isnormal "
    "isprint ispunct isspace isupper isxdigit jmp_buf labs ldexp ldiv lgamma llabs llrint "
    "llround localeconv localtime log log10 log1p log2 logb longjmp lrint lround malloc mblen "
    "memchr memcmp memcpy memmove memset mktime modf nan nearbyint nextafter offsetof perror pow "
    "printf putc putchar puts qsort raise rand realloc remainder remove rename rewind rint round "
    "scalbn scanf setbuf setjmp setlocale setvbuf signal signbit sin sinh snprintf sprintf sqrt "
    "srand sscanf stderr stdin stdout strcat strchr strcmp strcoll strcpy strcspn strerror "
    "strftime strlen strncat strncmp strncpy strpbrk strrchr strspn strstr strtod strtof strtok "
    "strtol strtold strtoll strtoul strtoull system tan tanh tgamma time tmpfile tmpnam tolower "
    "toupper trunc ungetc va_arg va_copy va_end va_list va_start vfprintf vprintf vsnprintf "
    "vsprintf aligned_alloc quick_exit at_quick_exit FILE EOF NULL "
    "size_t ptrdiff_t intptr_t uintptr_t intmax_t uintmax_t int8_t int16_t int32_t int64_t "
    "uint8_t uint16_t uint32_t uint64_t max_align_t wchar_t fpos_t clock_t time_t div_t ldiv_t "
    # POSIX and the system calls flowc's runtime and drivers use
    "access alarm chdir clock_gettime close dup dup2 execv execvp fcntl fdopen fileno fork fstat "
    "fsync ftruncate getcontext getpid isatty kill lseek makecontext mkdir mkstemp mmap munmap "
    "nanosleep open pipe posix_memalign pthread_create pthread_join read rmdir sched_yield "
    "sigaction sleep stat swapcontext sysconf unlink usleep waitpid write environ optarg optind".split()
)

C_HEADERS = frozenset(
    # C's, POSIX's and the compilers' headers that generated code, main.c and runtime_c include:
    # NAME.h in the output folder (first on the include path) would hide one
    "assert complex ctype errno fenv float inttypes iso646 limits locale math setjmp signal stdalign "
    "stdarg stdatomic stdbool stddef stdint stdio stdlib stdnoreturn string tgmath threads time uchar "
    "wchar wctype fcntl pthread sched semaphore ucontext unistd dirent poll "
    "immintrin x86intrin xmmintrin emmintrin arm_neon arm_sve omp mpi mpio cuda cuda_runtime "
    "cuda_fp16 cuda_bf16 mma cublas cufft".split()
)

MAIN_HEADERS = ("main_driver",)
"""flowc's runtime headers a generated main.c includes beside NAME.h (runtime_c/main_driver.h;
the SPMD program's fc_spmd_main.h is in fc_'s name space): NAME.h would hide one."""

OUTPUT_FILES = frozenset(
    # what flowc writes beside NAME.h, NAME.c and the binary NAME in an output folder
    "main firmware firmware_data train bundle state_vars Makefile runtime mpi".split()
)

RUNTIME_PREFIXES = ("FC", "FLOWC", "MPI", "PMPI")
"""Name spaces of flowc's runtime (fc_*, FC_*, FLOWC_*_H) and of MPI (MPI_*, PMPI_*): a model
name that is one, or starts with one and '_', generates symbols in them (fc_npy: FC_NPY_H)."""

GENERATED = (
    "run run_host run_staged inputs outputs tensor_info weights state_init status_string "
    "pool_bytes pool_start pool_stop profile_us profile_steps profile_count ctx model init free "
    "alloc error fail wait enqueue probe use_graph mpi_bytes mpi_start mpi_stop arena_bytes "
    "train_main r".split()
)
"""What NAME_ is followed by in generated C (NAME_run, ...); NAME.upper()_ is followed by
macros (NAME_H, NAME_OK, NAME_ARENA_BYTES, ...), which meet nothing outside RUNTIME_PREFIXES."""


def model_name_problem(name: str) -> str | None:
    """Why ``name`` (already a C identifier) cannot name a model, or None: the rest of the
    message "model name 'NAME' ...; choose another".

    >>> model_name_problem("net") is None, model_name_problem("main")
    (True, 'collides with the C symbol main')
    """
    if name in C_KEYWORDS:
        return f"is a C or C++ keyword ({name})"
    if name.startswith("_"):
        return f"starts with '_', which C reserves (its header guard would be {name.upper()}_H)"
    upper = name.upper()
    for prefix in RUNTIME_PREFIXES:
        if upper == prefix or upper.startswith(prefix + "_"):
            owner = "MPI" if "MPI" in prefix else "flowc's runtime"
            return (
                f"collides with {owner}, which owns the names {prefix.lower()}_* and {prefix}_* "
                f"(this one would generate {upper}_H)"
            )
    if name in C_LIBRARY:
        return f"collides with the C symbol {name}"
    folded = name.casefold()
    for header in C_HEADERS:
        if folded == header.casefold():
            return f"would write {name}.h, which hides the C header <{header}.h>"
    for header in MAIN_HEADERS:
        if folded == header.casefold():
            return f"would write {name}.h, which hides flowc's runtime/{header}.h that main.c includes"
    for file in OUTPUT_FILES:
        if folded == file.casefold():
            kind = "folder" if file in ("runtime", "mpi") else "file"
            shown = f"{file}/" if kind == "folder" else file if file == "Makefile" else f"{file}.c"
            return f"collides with the {kind} {shown} that flowc writes beside the model"
    for suffix in GENERATED:
        if f"{name}_{suffix}" in C_LIBRARY:
            return f"collides with the C symbol {name}_{suffix} (its generated {name}_{suffix})"
    return None


STORAGE = {
    "float16": "fc_f16",
    "float32": "float",
    "float64": "double",
    "int8": "int8_t",
    "uint8": "uint8_t",
    "int16": "int16_t",
    "uint16": "uint16_t",
    "int32": "int32_t",
    "uint32": "uint32_t",
    "int64": "int64_t",
    "uint64": "uint64_t",
    "bool": "fc_bool",
}
COMPUTE = {**STORAGE, "float16": "float"}
# the type suffix of runtime_c kernels (fc_add_f32, fc_gather_i64, ...)
SUFFIX = {
    "float16": "f16",
    "float32": "f32",
    "float64": "f64",
    "int8": "i8",
    "uint8": "u8",
    "int16": "i16",
    "uint16": "u16",
    "int32": "i32",
    "uint32": "u32",
    "int64": "i64",
    "uint64": "u64",
    "bool": "b",
}
# types in the public header, which must not need flowc_rt.h (same representation)
PUBLIC = {**STORAGE, "float16": "uint16_t", "bool": "uint8_t"}


class Names:
    """Allocates unique C identifiers from untrusted names."""

    def __init__(self, reserved=()):
        self.used = set(C_KEYWORDS) | set(reserved)

    def __call__(self, text: str, prefix: str = "v") -> str:
        base = re.sub(r"[^A-Za-z0-9_]", "_", str(text))[:48].strip("_") or prefix
        if base[0].isdigit() or base.startswith("fc_") or base.startswith("__"):
            base = f"{prefix}_{base}"
        name, k = base, 1
        while name in self.used or name.lower() in self.used:
            k += 1
            name = f"{base}_{k}"
        self.used.add(name)
        self.used.add(name.lower())
        return name


def c_string(text: str) -> str:
    """A C string literal holding ``text`` (UTF-8), every unusual byte octal-escaped."""
    out = []
    for b in str(text).encode("utf-8"):
        ch = chr(b)
        if ch in '"\\?':
            out.append("\\" + ch)
        elif 32 <= b < 127:
            out.append(ch)
        else:
            out.append(f"\\{b:03o}")
    return '"' + "".join(out) + '"'


def c_comment(text: str, limit: int = 80) -> str:
    """Text safe inside /* */: printable ASCII only, no comment terminators."""
    text = "".join(ch if 32 <= ord(ch) < 127 else "?" for ch in str(text))[:limit]
    return text.replace("*/", "* /").replace("/*", "/ *").replace("\\", "/")


def c_literal(value, dtype: str) -> str:
    """``value`` as a C literal of ``dtype``'s compute type (float16 computes in float)."""
    if dtype == "bool":
        return "1" if value else "0"
    if dtype in ("float16", "float32", "float64"):
        v = float(value)
        single = dtype != "float64"
        if math.isnan(v):
            return "NAN" if single else "((double)NAN)"
        if math.isinf(v):
            inf = "HUGE_VALF" if single else "HUGE_VAL"
            return inf if v > 0 else f"(-{inf})"
        if dtype == "float16":
            v = float(np.float16(v))
        text = str(np.float32(v)) if single else repr(v)
        if "e" not in text and "." not in text:
            text += ".0"
        return text + ("f" if single else "")
    v = int(value)
    if dtype == "int64":
        return "INT64_MIN" if v == -(2**63) else f"INT64_C({v})"
    if dtype == "int32" and v == -(2**31):
        return "INT32_MIN"
    if dtype in ("uint32", "uint64"):
        return f"UINT{dtype[4:]}_C({v})"
    return str(v)


def value_lines(array: np.ndarray, per_line: int = 8) -> list[str]:
    """The values of ``array`` as lines of C initializers (``per_line`` literals each)."""
    dtype = array.dtype.name
    flat = array.reshape(-1)
    if dtype == "float16":
        items = [f"0x{v:04x}" for v in flat.view(np.uint16).tolist()]
    elif dtype == "bool":
        items = ["1" if v else "0" for v in flat.tolist()]
    else:
        items = [c_literal(v, dtype) for v in flat.tolist()]
    items = items or ["0"]
    return [", ".join(items[i : i + per_line]) + "," for i in range(0, len(items), per_line)]


class TensorCtx(TensorType):
    """A tensor type as templates see it: also its kernel suffix and C storage type."""

    @property
    def sfx(self) -> str:
        return SUFFIX[self.dtype]

    @property
    def ctype(self) -> str:
        return STORAGE[self.dtype]

    @property
    def compute(self) -> str:
        return COMPUTE[self.dtype]

    @classmethod
    def of(cls, t: TensorType) -> TensorCtx:
        return cls(t.shape, t.dtype)
