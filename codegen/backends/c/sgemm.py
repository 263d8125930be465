"""Plans and packed operands for the float32 GEMM kernel ``runtime_c/kernels/sgemm.h``.

The code generator decides everything about a product here, in Python: the micro-tile of the
target (from its ISA), the cache blocking, the strides of raw operands, which operand is a
constant packed at compile time. ``SgemmPlan.c_init()`` renders the plan as the C initializer
of a ``static const fc_sgemm_plan``; ``pack_a`` / ``pack_b`` write constant operands in the
exact layout the C packers ``fc_sgemm_pack_a`` / ``fc_sgemm_pack_b`` produce (bit for bit; a
test compares them), so the C code reads them without packing at run time.

Packed layout (it depends on mr, nr and kc only):

    A (m x k): rows zero-padded to mpad = ceil(m/mr)*mr; for each k block [pc, pc+kb),
               kb = min(kc, k-pc), for each panel of mr rows ir: its kb x mr values, k-major.
               Ap[pc*mpad + ir*kb + p*mr + i] = A[ir+i, pc+p]
    B (k x n): columns zero-padded to npad = ceil(n/nr)*nr; likewise by k block, then panel.
               Bp[pc*npad + jr*kb + p*nr + j] = B[pc+p, jr+j]

Example:

>>> import numpy as np
>>> p = make_plan(3, 5, 2, isa="scalar", a="packed")
>>> (p.mr, p.nr, p.kc)
(4, 4, 2)
>>> pack_a(np.arange(6, dtype=np.float32).reshape(3, 2), p)
array([0., 2., 4., 0., 1., 3., 5., 0.], dtype=float32)
>>> p.c_init()[:45]
'{.m = 3, .n = 5, .k = 2, .a_rs = 0, .a_cs = 0'
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass

import numpy as np

# ISA name (FC_SGEMM_ISA in sgemm.h) -> (floats per vector, mr, vectors per row of the tile).
ISAS = {
    "avx512": (16, 14, 2),
    "avx2": (8, 6, 2),
    "aarch64": (4, 8, 3),
    "v128": (4, 4, 2),
    "scalar": (1, 4, 4),
}

# FC_SGEMM_ISA_ID of each ISA in sgemm.h (generated models check it with #if).
ISA_IDS = {"scalar": 1, "avx512": 2, "avx2": 3, "aarch64": 4, "v128": 5}

# Cache sizes (bytes) the blocking assumes per ISA: (L1d, L2 per core, shared L3 share).
CACHES = {
    "avx512": (48 << 10, 1 << 20, 8 << 20),
    "avx2": (32 << 10, 512 << 10, 4 << 20),
    "aarch64": (64 << 10, 512 << 10, 2 << 20),
    "v128": (32 << 10, 256 << 10, 2 << 20),
    "scalar": (16 << 10, 64 << 10, 256 << 10),
}

BIAS = {"none": 0, "row": 1, "col": 2}

B_DIRECT_PANEL = 32 << 10
"""Bytes of a B micro-panel (kc rows of nr floats) up to which a raw B read in place serves
more than three row panels (``make_plan``'s b_direct): its rows lie a row of B apart, and
beyond the L1 of a Zen 4 or Skylake-X core (32 KiB) the row panels after the first waited on
them (64 x 3136 x 576, kc 288: 2459 us packed, 2752 in place; 64 x 3136 x 256 1017 -> 977)."""

FIELDS = ("m", "n", "k", "a_rs", "a_cs", "b_rs", "b_cs", "ldc", "alpha", "beta", "a_packed",
          "b_packed", "bias", "order", "a_direct", "b_direct", "mr", "nr", "mc", "kc", "nc")  # fmt: skip


@dataclass(frozen=True)
class SgemmPlan:
    """The fields of ``fc_sgemm_plan`` (see sgemm.h for their meaning)."""

    m: int
    n: int
    k: int
    a_rs: int
    a_cs: int
    b_rs: int
    b_cs: int
    ldc: int
    alpha: float
    beta: float
    a_packed: int
    b_packed: int
    bias: int
    order: int
    a_direct: int
    b_direct: int
    mr: int
    nr: int
    mc: int
    kc: int
    nc: int

    def c_init(self) -> str:
        """The C99 designated initializer of this plan, e.g. for
        ``static const fc_sgemm_plan plan = <this>;``."""

        def lit(name):
            v = getattr(self, name)
            if name in ("alpha", "beta"):
                f = float(np.float32(v))
                if not math.isfinite(f):
                    raise ValueError(f"{name} must be finite, got {v}")
                return f"{f!r}f"
            return str(int(v))

        return "{" + ", ".join(f".{f} = {lit(f)}" for f in FIELDS) + "}"

    @property
    def mpad(self) -> int:
        return -(-self.m // self.mr) * self.mr

    @property
    def npad(self) -> int:
        return -(-self.n // self.nr) * self.nr

    @property
    def kc_eff(self) -> int:
        return min(self.kc, self.k) if self.kc > 0 else self.k

    def scratch_bytes(self, isa: str | None = None) -> int:
        """Bytes of scratch one part needs on a build for ``isa`` (twin of
        fc_sgemm_scratch_bytes; the plan's own tile's ISA when not given)."""
        native_tile = (self.mr, self.nr) if isa is None else tile(isa)
        if self.m <= 0 or self.n <= 0 or self.k <= 0:
            return 0
        mc = min(_roundup(self.mc if self.mc > 0 else self.m, self.mr), self.mpad)
        nc = min(_roundup(self.nc if self.nc > 0 else self.n, self.nr), self.npad)
        fly_b = not self.b_packed and self.order == 0 and mc >= self.mpad
        in_place = self.a_packed or (self.a_direct and (self.mr, self.nr) == native_tile)
        floats = (0 if in_place else _roundup(mc * self.kc_eff, 16)) + (
            0 if self.b_packed else (self.nr if fly_b else nc) * self.kc_eff
        )
        return floats * 4

    def packed_a_floats(self) -> int:
        return self.mpad * self.k

    def packed_b_floats(self) -> int:
        return self.npad * self.k


def tile(isa: str) -> tuple[int, int]:
    """(mr, nr), the native micro-tile of ``isa`` (FC_SGEMM_MR, FC_SGEMM_NR)."""
    vl, mr, nv = ISAS[isa]
    return mr, vl * nv


def _roundup(x: int, to: int) -> int:
    return -(-x // to) * to


def _split(total: int, target: int, multiple: int = 1) -> int:
    """The block size near ``target`` that cuts ``total`` into equal blocks (a multiple of
    ``multiple``), so the last block is not a sliver: 576 by 256 -> 192, 192, 192."""
    if total <= 0:
        return max(multiple, 1)
    blocks = -(-total // max(target, 1))
    return _roundup(-(-total // blocks), multiple)


def blocking(m: int, n: int, k: int, isa: str = "avx512", mr: int | None = None) -> dict:
    """Cache blocks (mc, kc, nc, order) for an m x n x k product on ``isa``.

    Order 0 (GotoBLAS): the B micro-panel (kc x nr) fills L1 and is reused across the A
    block (mc x kc), which fills half of L2; the B block (kc x nc) fits the L3 share. Blocks
    are then evened out so that no block is a sliver. Larger kc means fewer passes over C;
    on the AVX-512 machine this was tuned on (Zen 5, 48 KiB L1d) kc from 192 to 576 were
    within 3% of each other, and 384 the best.

    >>> blocking(1024, 1024, 1024)
    {'mc': 350, 'kc': 342, 'nc': 1024, 'order': 0}
    """
    vl, mr_isa, nv = ISAS[isa]
    mr, nr = mr or mr_isa, vl * nv
    l1, l2, l3 = CACHES[isa]
    kc = max(64, min(512, l1 // (nr * 4)))
    kc = _split(k, kc)
    mc = max(mr, (l2 // 2 // (kc * 4)) // mr * mr)
    mc = _split(m, mc, mr)
    nc = max(nr, (l3 // (kc * 4)) // nr * nr)
    nc = _split(n, nc, nr)
    return {"mc": mc, "kc": kc, "nc": nc, "order": 0}


def _weights_first(m: int, n: int, k: int, vl: int, mr: int, nr: int, a: str, b: str) -> dict:
    """Order 1 for packed weights (A) times a wide raw activation of few rows (k <= 64, n of 16
    column panels or more: 1x1 convolutions with few input channels) on AVX2 and AVX-512: a row
    panel's output and epilogue operands stream along its rows (order 0 goes down all the rows
    of C, a column stripe at a time, too many streams for the prefetchers), with the B block
    (k x nc, at most 128 KiB) in L2. One thread, cold operands: 96x12544x16 with a residual +
    ReLU epilogue 780 -> 664 us, 144x3136x24 363 -> 269, 64x3136x64 381 -> 331; no gain from
    k = 80 up (480x196x80, 672x196x112 2-6% slower), so those keep order 0."""
    if a != "packed" or b == "packed" or vl < 8 or k > 64 or n < 16 * nr or m <= mr:
        return {}
    return {"order": 1, "nc": _split(n, max(nr, 32768 // max(k, 1) // nr * nr), nr)}


def make_plan(m: int, n: int, k: int, *, isa: str = "avx512", a: str = "row", b: str = "row",
              lda: int | None = None, ldb: int | None = None, ldc: int | None = None,
              alpha: float = 1.0, beta: float = 0.0, bias: str = "none", mr: int | None = None,
              a_direct: bool | None = None, b_direct: bool | None = None, **blocks) -> SgemmPlan:  # fmt: skip
    """A plan for C[m, n] = alpha * A[m, k] @ B[k, n] + beta * C (+ bias) on ``isa``.

    ``a``: "row" (A[i, p] at a[i*lda + p], lda defaults to k), "trans" (A stored transposed,
    as a k x m row-major matrix: a[p*lda + i], lda defaults to m) or "packed" (``pack_a``).
    ``b``: "row" (b[p*ldb + j], ldb defaults to n), "trans" (b[j*ldb + p], ldb defaults to k)
    or "packed" (``pack_b``). ``ldc`` defaults to n. ``bias``: "none", "row" (one per row of
    C) or "col" (one per column). ``mr`` overrides the ISA's rows per tile (the C side then
    needs -DFC_SGEMM_MR=mr for the fast kernel). ``blocks`` overrides any of mc, kc, nc, order.
    ``a_direct`` (raw A only): the micro-kernel reads A in place instead of packing it; by
    default on for row-major and transposed A, except when the row stride is a multiple of
    4 KiB (the rows of a tile would then share one L1 set). ``b_direct`` (row-major raw B
    only): the micro-kernel reads B's whole column panels in place instead of packing them; by
    default on where one A block covers all rows and the B micro-panel serves at most three
    row panels or fits ``B_DIRECT_PANEL`` (packing it cost as much as a fifth of the product:
    16 x 12544 x 32 177 -> 150 us, 24 x 3136 x 144 241 -> 206, 80 x 196 x 480 145 -> 134,
    64 x 1024 x 256 338 -> 298; one AVX-512 core); off where B blocks serve several A blocks
    (1024^3: packed 20 ms, in place 25).

    >>> make_plan(64, 3136, 576, a="packed", bias="row").kc
    288
    """
    if isa not in ISAS:
        raise ValueError(f"unknown ISA {isa!r}; expected one of {', '.join(ISAS)}")
    if min(m, n, k) < 0:
        raise ValueError(f"negative size in m={m}, n={n}, k={k}")
    vl, mr_isa, nv = ISAS[isa]
    mr = mr or mr_isa
    blk = {**blocking(m, n, k, isa, mr), **_weights_first(m, n, k, vl, mr, vl * nv, a, b), **blocks}
    forms = {"row": 0, "trans": 1, "packed": 2}
    if a not in forms or b not in forms:
        raise ValueError(f"operand forms must be one of {', '.join(forms)}; got a={a!r}, b={b!r}")
    if bias not in BIAS:
        raise ValueError(f"bias must be one of {', '.join(BIAS)}; got {bias!r}")
    a_rs, a_cs = {"row": (lda or k, 1), "trans": (1, lda or m), "packed": (0, 0)}[a]
    b_rs, b_cs = {"row": (ldb or n, 1), "trans": (1, ldb or k), "packed": (0, 0)}[b]
    if a_direct is None:
        stride = a_rs if a == "row" else a_cs
        a_direct = a != "packed" and (stride * 4) % 4096 != 0
    if b_direct is None:
        few = -(-m // mr) <= 3 or blk["kc"] * vl * nv * 4 <= B_DIRECT_PANEL
        b_direct = b == "row" and blk["mc"] >= _roundup(m, mr) and few
    return SgemmPlan(m=m, n=n, k=k, a_rs=a_rs, a_cs=a_cs, b_rs=b_rs, b_cs=b_cs, ldc=ldc or n,
                     alpha=float(alpha), beta=float(beta), a_packed=int(a == "packed"),
                     b_packed=int(b == "packed"), bias=BIAS[bias], order=int(blk["order"]),
                     a_direct=int(bool(a_direct) and a != "packed"),
                     b_direct=int(bool(b_direct) and b == "row"),
                     mr=mr, nr=vl * nv, mc=int(blk["mc"]), kc=int(blk["kc"]), nc=int(blk["nc"]))  # fmt: skip


def _k_blocks(plan: SgemmPlan):
    kc = plan.kc_eff
    for pc in range(0, plan.k, max(kc, 1)):
        yield pc, min(kc, plan.k - pc)


def pack_a(a, plan: SgemmPlan) -> np.ndarray:
    """The logical A (m x k, any float array) in the packed layout: float32, 1-D,
    ``plan.packed_a_floats()`` long (twin of fc_sgemm_pack_a)."""
    a = np.asarray(a, dtype=np.float32)
    if a.shape != (plan.m, plan.k):
        raise ValueError(f"A has shape {a.shape}; the plan needs ({plan.m}, {plan.k})")
    full = np.zeros((plan.mpad, plan.k), np.float32)
    full[: plan.m] = a
    parts = [
        full[:, pc : pc + kb].reshape(plan.mpad // plan.mr, plan.mr, kb).transpose(0, 2, 1).ravel()
        for pc, kb in _k_blocks(plan)
    ]
    return np.concatenate(parts) if parts else np.zeros(0, np.float32)


def pack_b(b, plan: SgemmPlan) -> np.ndarray:
    """The logical B (k x n) in the packed layout: float32, 1-D, ``plan.packed_b_floats()``
    long (twin of fc_sgemm_pack_b)."""
    b = np.asarray(b, dtype=np.float32)
    if b.shape != (plan.k, plan.n):
        raise ValueError(f"B has shape {b.shape}; the plan needs ({plan.k}, {plan.n})")
    full = np.zeros((plan.k, plan.npad), np.float32)
    full[:, : plan.n] = b
    parts = [
        full[pc : pc + kb].reshape(kb, plan.npad // plan.nr, plan.nr).transpose(1, 0, 2).ravel()
        for pc, kb in _k_blocks(plan)
    ]
    return np.concatenate(parts) if parts else np.zeros(0, np.float32)


def isa_from_macros(predefined: str) -> str:
    """The ISA sgemm.h selects, from the compiler's predefined macros (``cc <flags> -dM -E -
    </dev/null``): the same #if chain as the header.

    >>> isa_from_macros("#define __GNUC__ 12\\n#define __AVX512F__ 1\\n#define __AVX__ 1\\n")
    'avx512'
    """
    names = set(re.findall(r"#define\s+(\w+)", predefined))
    if "FC_NO_VECTOR" in names or not names & {"__GNUC__", "__clang__"}:
        return "scalar"
    if "__AVX512F__" in names:
        return "avx512"
    if "__AVX__" in names:
        return "avx2"
    if "__aarch64__" in names and "__ARM_NEON" in names:
        return "aarch64"
    if names & {"__SSE2__", "__ARM_NEON", "__ALTIVEC__", "__wasm_simd128__"}:
        return "v128"
    return "scalar"


def with_fields(plan: SgemmPlan, **changes) -> SgemmPlan:
    """A copy of ``plan`` with some fields changed (plans are frozen)."""
    return dataclasses.replace(plan, **changes)


def unpack_a(packed, plan: SgemmPlan) -> np.ndarray:
    """The logical A (m x k) from its packed layout (inverse of ``pack_a``)."""
    full = np.zeros((plan.mpad, plan.k), np.float32)
    off = 0
    for pc, kb in _k_blocks(plan):
        size = plan.mpad * kb
        block = np.asarray(packed[off : off + size], np.float32)
        full[:, pc : pc + kb] = (
            block.reshape(plan.mpad // plan.mr, kb, plan.mr).transpose(0, 2, 1).reshape(plan.mpad, kb)
        )
        off += size
    return full[: plan.m]


def unpack_b(packed, plan: SgemmPlan) -> np.ndarray:
    """The logical B (k x n) from its packed layout (inverse of ``pack_b``)."""
    full = np.zeros((plan.k, plan.npad), np.float32)
    off = 0
    for pc, kb in _k_blocks(plan):
        size = plan.npad * kb
        block = np.asarray(packed[off : off + size], np.float32)
        full[pc : pc + kb] = (
            block.reshape(plan.npad // plan.nr, kb, plan.nr).transpose(1, 0, 2).reshape(kb, plan.npad)
        )
        off += size
    return full[:, : plan.n]


def plan_of(attrs) -> SgemmPlan:
    """The plan a node's ``plan`` attribute holds (the fields in FIELDS order)."""
    return SgemmPlan(*attrs["plan"])


def plan_tuple(plan: SgemmPlan) -> tuple:
    """A plan as a node attribute: its fields in FIELDS order."""
    return tuple(getattr(plan, f) for f in FIELDS)
