"""Writing files without harm and reading zip archives within bounds: the two halves of every
file flowc keeps (``.flowc`` graphs, ``.npz`` checkpoints, SVG plans).

Writing: ``atomic_writer(path)`` gives a binary file that becomes ``path`` only when it is
complete (flushed, fsynced, renamed over the old one), so a crash leaves the old file or the
new one. The temporary is created beside the target with O_CREAT|O_EXCL|O_NOFOLLOW under a
random name: a link planted at a predictable name cannot make the write land elsewhere, and
the rename replaces a link at the target itself, never what it points to. It is created with
mode 0666, so the kernel gives it what a plain ``open`` would (less the umask, or as a default
ACL says); ``tempfile.mkstemp`` would give 0600 and fixing that up needs ``os.umask``, which
is process-wide and racy under threads.

    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> write_text(os.path.join(folder, "a.txt"), "hello")
    >>> open(os.path.join(folder, "a.txt")).read(), os.listdir(folder)
    ('hello', ['a.txt'])

Reading: a zip member declares its inflated size, and zipfile never inflates a deflated member
past it, so the declared sizes are checked before anything is inflated:

- ``check_archive``: only stored and deflated members (bz2 and lzma inflate without a bound
  per read), their compressed sizes within the file (overlapping members are a bomb), and the
  inflated total at most MAX_RATIO times the file's size plus RATIO_SLACK. flowc and the C
  trainer write members stored (1:1); deflated real weights shrink ~1.1:1 (float mantissas
  are noise) and real graph.json ~16:1 (zlib -6 on the test zoo); deflate's own maximum is
  ~1030:1, reached by zeros. 100:1 keeps 6x headroom over JSON and bounds what a file can
  cost in memory to 100 times its size, a tenth of what deflate allows.
- ``npy_header``: the header of a ``.npy`` member (shape, dtype, order), from at most
  MAX_NPY_HEADER bytes, so a caller checks the array against what it expects first.
- ``read_member`` / ``read_npy``: the data, inflated in CHUNK-byte pieces straight into a
  buffer of the declared size (a ``bytearray``, or the array itself), so the peak memory of a
  read is the result plus one chunk, never the result plus copies. A member that inflates to
  less than it declares is refused; one that inflates to more fails zipfile's CRC check.
"""

from __future__ import annotations

import contextlib
import errno
import io
import math
import os
import secrets
import zipfile
from dataclasses import dataclass

import numpy as np

MAX_RATIO = 100  # inflated bytes per byte of file (see the module docstring)
RATIO_SLACK = 1 << 20  # a tiny file may inflate to 1 MiB whatever its ratio
CHUNK = 1 << 18  # bytes inflated per read (zipfile holds ~2 chunks while it reads one)
MAX_NPY_HEADER = 1 << 14  # magic, length and header of a .npy member (numpy reads at most 10000)
_READABLE = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflated"}


# ----------------------------------------------------------------------------- writing


def _create_temporary(path: str) -> tuple[int, str]:
    """(fd, name) of a new file beside ``path``, created exclusively with mode 0666 (less the
    umask): never an existing file, never through a link."""
    folder, base = os.path.split(os.path.abspath(path))
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    for extra in ("O_NOFOLLOW", "O_CLOEXEC", "O_BINARY"):
        flags |= getattr(os, extra, 0)
    for _ in range(100):
        tmp = os.path.join(folder, f".{base[:64]}.{secrets.token_hex(8)}.tmp")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", folder)


def _sync_folder(folder: str) -> None:
    """Make a rename in ``folder`` durable where the system allows it (POSIX)."""
    if not hasattr(os, "O_DIRECTORY"):
        return
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def atomic_writer(path):
    """A binary file that replaces ``path`` once the ``with`` block ends without an error;
    on any error the temporary is removed and ``path`` is left as it was."""
    path = os.fspath(path)
    fd, tmp = _create_temporary(path)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _sync_folder(os.path.dirname(os.path.abspath(path)))


def write_bytes(path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see ``atomic_writer``)."""
    with atomic_writer(path) as f:
        f.write(data)


def write_text(path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (see ``atomic_writer``)."""
    write_bytes(path, text.encode())


# ----------------------------------------------------------------------------- reading


def check_archive(z: zipfile.ZipFile, size: int, error, where: str, ratio: bool = True) -> None:
    """Refuse, before anything is inflated, an archive of ``size`` bytes whose members another
    method compresses, whose compressed sizes exceed the file, or (with ``ratio``) whose members
    inflate to more than MAX_RATIO times the file (plus RATIO_SLACK). ``error(message)`` is
    raised with a message that starts with ``where``."""
    infos = z.infolist()
    for info in infos:
        if info.compress_type not in _READABLE:
            raise error(
                f"{where}: member {info.filename} is compressed with zip method {info.compress_type}; "
                "only stored and deflated members are read"
            )
        if info.flag_bits & 0x1:
            raise error(f"{where}: member {info.filename} is encrypted")
    packed = sum(i.compress_size for i in infos)
    if packed > size:
        raise error(f"{where}: its members declare {packed} compressed bytes, more than the file's {size}")
    total = sum(i.file_size for i in infos)
    if ratio and total > MAX_RATIO * size + RATIO_SLACK:
        big = max(infos, key=lambda i: i.file_size)
        raise error(
            f"{where}: its members inflate to {total} bytes, more than {MAX_RATIO} times the file's "
            f"{size} bytes ({big.filename} alone: {big.file_size} bytes from {big.compress_size}); refused"
        )


def _read_into(f, buf: memoryview) -> int:
    """Fill ``buf`` from ``f`` CHUNK bytes at a time; the number of bytes read."""
    done = 0
    while done < len(buf):
        n = f.readinto(buf[done : done + CHUNK])
        if not n:
            break
        done += n
    return done


def read_member(z: zipfile.ZipFile, info: zipfile.ZipInfo, error, where: str) -> bytearray:
    """The bytes of a member, exactly as many as it declares (the caller checks that number)."""
    buf = bytearray(info.file_size)
    with z.open(info) as f:
        got = _read_into(f, memoryview(buf))
    if got != info.file_size:
        raise error(f"{where}: member {info.filename} inflates to {got} bytes, it declares {info.file_size}")
    return buf


@dataclass(frozen=True)
class NpyHeader:
    """What the header of a .npy member says: ``offset`` bytes of header, then ``nbytes`` of
    data of ``dtype`` (its byte order as stored) in ``shape``, C or Fortran order."""

    shape: tuple[int, ...]
    fortran: bool
    dtype: np.dtype
    offset: int

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


def npy_header(z: zipfile.ZipFile, info: zipfile.ZipInfo) -> NpyHeader:
    """The header of a .npy member, read from its first MAX_NPY_HEADER bytes at most; numpy's
    ValueError for a damaged one."""
    with z.open(info) as f:
        head = io.BytesIO(f.read(min(info.file_size, MAX_NPY_HEADER)))
    version = np.lib.format.read_magic(head)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(head)
    elif version == (2, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(head)
    else:
        raise ValueError(f"unsupported .npy version {version}")
    return NpyHeader(tuple(shape), bool(fortran), dtype, head.tell())


def read_npy(z: zipfile.ZipFile, info: zipfile.ZipInfo, head: NpyHeader, error, where: str) -> np.ndarray:
    """The array of a .npy member whose header the caller has checked (its size matches the
    member, no Python objects): a C-ordered array of native byte order that owns its data (so a
    graph keeps it without a copy). The bytes land in it as stored and are swapped in place
    where their order is not native; a Fortran-ordered member (flowc and numpy's savez never
    write one) costs one copy."""
    shape = head.shape[::-1] if head.fortran else head.shape
    array = np.empty(shape, head.dtype.newbyteorder("="))
    with z.open(info) as f:
        f.read(head.offset)
        got = _read_into(f, memoryview(array.reshape(-1).view(np.uint8)))
    if got != head.nbytes:
        raise error(f"{where}: member {info.filename} inflates to {head.offset + got} bytes, its header says "
                    f"{head.offset + head.nbytes}")  # fmt: skip
    if not head.dtype.isnative:
        array.byteswap(inplace=True)
    return np.ascontiguousarray(array.T) if head.fortran else array
