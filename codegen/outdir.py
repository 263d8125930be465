"""Output folders: written whole beside their place, then moved in; never over user files.

``flowc compile -o OUT`` (``export``, ``export_trainer``, the CUDA ``export``) writes the
project into a fresh folder beside OUT and moves it into place when everything is written and
built. OUT itself may be:

- missing: it is created (its missing parents too) with the permissions ``mkdir`` gives
  (0777 less the umask);
- an empty folder, or a folder flowc wrote: it is replaced. flowc knows a folder is its own by
  ``.flowc-manifest.json``, written last into every output folder: the name and SHA-256 of every
  file flowc wrote. The folder may also hold what its Makefile or CMakeLists.txt build (object
  files, static libraries, the binary, a CMake ``build/`` folder). Any other file, or a source
  file whose content changed since flowc wrote it, makes the folder the user's;
- anything else (a file, a link, a folder of the user's, the current folder or one that holds
  it): refused in one line before any work, naming the first file that is not flowc's.

``check`` runs before any work; ``prepare`` makes the temporary folder (so a parent that cannot
be written fails early, in one line); ``publish`` writes the manifest and moves the folder into
place, checking OUT again just before, and removes the old folder only after the move.
"""

from __future__ import annotations

import concurrent.futures
import errno
import fnmatch
import hashlib
import json
import os
import secrets
import shutil
import stat
import tempfile
from pathlib import Path

from graphdef.errors import FlowcError

MANIFEST = ".flowc-manifest.json"
FORMAT = "flowc-output"
# what building a folder in place makes (Makefile, CMakeLists.txt, firmware), and the inputs a
# microcontroller folder's firmware runs on (firmware_data.h, rewritten by codegen's
# run_firmware): not in the manifest, or changed since, and still flowc's
PRODUCTS = ("*.o", "*.a", "*.so", "*.elf", "*.bin", "*.map", "firmware_data.h")
PRODUCT_DIRS = ("build",)


def _new_folder(beside: Path, tag: str) -> Path:
    """A new folder ``.NAME.TAG-XXXXXXXX`` beside ``beside``, made with mode 0777 so that the
    kernel applies the umask (``tempfile.mkdtemp`` makes 0700; setting it right afterwards
    would need ``os.umask``, which is process-wide and racy under threads)."""
    parent = beside.absolute().parent
    for _ in range(100):
        path = parent / f".{beside.name}.{tag}-{secrets.token_hex(4)}"
        try:
            os.mkdir(path, 0o777)
            return path
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(parent))


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _files(folder: Path) -> list[str]:
    """Every entry under folder, relative, '/'-separated; folders end in '/', links are listed
    as themselves (never followed)."""
    out = []
    for root, dirs, files in os.walk(folder):
        rel = Path(root).relative_to(folder)
        for d in sorted(dirs):
            if (Path(root) / d).is_symlink():
                out.append((rel / d).as_posix())
        dirs[:] = sorted(d for d in dirs if not (Path(root) / d).is_symlink())
        out.extend((rel / f).as_posix() for f in sorted(files))
    return out


def _is_product(rel: str, name: str | None) -> bool:
    top = rel.split("/", 1)[0]
    if "/" in rel:
        return top in PRODUCT_DIRS
    return rel == name or any(fnmatch.fnmatchcase(rel, p) for p in PRODUCTS)


def _foreign(folder: Path) -> str | None:
    """Why ``folder`` (an existing folder) is not one flowc may replace, or None."""
    entries = _files(folder)
    if not entries and not any(folder.iterdir()):
        return None  # empty
    manifest = folder / MANIFEST
    try:
        if manifest.is_symlink() or not manifest.is_file():
            raise ValueError
        doc = json.loads(manifest.read_text())
        listed, name = doc["files"], doc.get("name")
        if doc.get("format") != FORMAT or not isinstance(listed, dict):
            raise ValueError
    except (OSError, ValueError, KeyError, TypeError):
        first = entries[0] if entries else sorted(p.name for p in folder.iterdir())[0]
        return f"it holds '{first}' and is not a folder flowc wrote (no {MANIFEST})"
    for rel in entries:
        if rel == MANIFEST:
            continue
        path = folder / rel
        if path.is_symlink():
            return f"it holds the link '{rel}', which flowc did not write"
        if not stat.S_ISREG(path.lstat().st_mode):
            return f"it holds '{rel}', which is not a regular file"
        if rel in listed:
            if _is_product(rel, name) or _sha256(path) == listed[rel]:
                continue
            return f"'{rel}' changed since flowc wrote it"
        if not _is_product(rel, name):
            return f"it holds '{rel}', which flowc did not write"
    return None


def check(out_dir) -> Path:
    """Refuse, in one line, an output folder that flowc may not write or replace (module
    docstring); before any work. Returns it as a Path."""
    out = Path(out_dir)
    shown = os.fspath(out_dir)
    try:
        st = os.lstat(out)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise FlowcError(f"-o {shown}: cannot use it as the output folder ({e.strerror})") from None
    if st is None:
        parent = out.absolute().parent
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
        if not parent.is_dir():
            raise FlowcError(f"-o {shown}: '{parent}' is not a folder")
        return out
    if stat.S_ISLNK(st.st_mode):
        raise FlowcError(
            f"-o {shown}: it is a symbolic link; flowc writes a folder there only where nothing is"
        )
    if not stat.S_ISDIR(st.st_mode):
        raise FlowcError(
            f"-o {shown}: a file of that name exists; flowc writes a folder and never replaces a file"
        )
    here, there = Path.cwd().resolve(), out.resolve()
    if here == there or there in here.parents:
        raise FlowcError(
            f"-o {shown}: the output folder would replace the current folder (or one that holds it); "
            "give the name of a new folder"
        )
    why = _foreign(out)
    if why is not None:
        raise FlowcError(f"-o {shown}: not replaced: {why}; remove it yourself or choose another folder")
    return out


def prepare(out_dir) -> Path:
    """``check``, then a new empty folder beside ``out_dir`` (its parents created as needed)
    with the permissions mkdir gives: where the project is written and built."""
    out = check(out_dir)
    try:
        out.absolute().parent.mkdir(parents=True, exist_ok=True)
        tmp = _new_folder(out, "tmp")
    except OSError as e:
        raise FlowcError(
            f"-o {os.fspath(out_dir)}: cannot write beside it ({e.strerror}: {e.filename})"
        ) from None
    return tmp


def publish(tmp: Path, out_dir, name: str | None = None) -> Path:
    """Write the manifest of ``tmp`` and move it to ``out_dir`` (``check`` once more first); an
    old folder flowc wrote is removed only after the new one is in place."""
    out = check(out_dir)
    rels = [rel for rel in _files(tmp) if (tmp / rel).is_file()]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:  # hashlib runs without the GIL
        files = dict(zip(rels, pool.map(lambda rel: _sha256(tmp / rel), rels)))
    doc = {"format": FORMAT, "name": name, "files": files}
    (tmp / MANIFEST).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    old = None
    if out.exists():
        try:
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.absolute().parent))
            os.replace(out, old / "folder")
        except OSError as e:
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
            raise FlowcError(
                f"-o {os.fspath(out_dir)}: cannot move the old folder aside ({e.strerror})"
            ) from None
    try:
        os.rename(tmp, out)
    except OSError as e:
        if old is not None:
            os.replace(old / "folder", out)  # the old folder back where it was
            shutil.rmtree(old, ignore_errors=True)
        raise FlowcError(
            f"-o {os.fspath(out_dir)}: cannot move the new folder into place ({e.strerror})"
        ) from None
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return out


def discard(tmp: Path) -> None:
    """Remove a temporary folder of ``prepare`` that was not published."""
    shutil.rmtree(tmp, ignore_errors=True)
