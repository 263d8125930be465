"""Checkpoints: the variables of a model (weights, optimizer slots, ``global_step``) in one
``.npz`` file, keyed by variable name, plus a header entry ``__flowc__`` (a JSON text as
uint8: format, model name, step, and the hash of the variables' names, dtypes and shapes).

The same file is written and read by ``gd.Session`` (``save_checkpoint`` / ``restore``) and by
compiled models (``CompiledModel.save_checkpoint`` / ``load_checkpoint``); numpy reads it as it
is (``np.load(path)["w1"]``). A write goes to a temporary created exclusively beside the target,
is flushed to disk and then renamed over it (graphdef/files.py), so a crash leaves the old
checkpoint or the new one, never half of one, and a link planted at any name is never written
through. Reading checks everything it can before inflating any data: the archive (stored or
deflated members only), the header entry (at most MAX_HEADER_BYTES), then every variable's
.npy header against the model's variables, refusing a mismatch naming the first variable that
differs (missing, another shape or dtype, extra), and each member's size against its header.
Only then are the arrays inflated, each straight into its own buffer. Without the model's
variables, the archive must inflate to at most files.MAX_RATIO times its size; with them, the
data can only be what the model holds, so a compressed checkpoint of zero-filled slots loads.
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from pathlib import Path

import numpy as np

from . import files
from .errors import CheckpointError

FORMAT = 1
HEADER = "__flowc__"
MAX_HEADER_BYTES = 1 << 16  # the __flowc__ entry: a JSON text of four fields


def spec_hash(specs: dict) -> str:
    """Hash of {name: (shape, dtype)}: what must match for a checkpoint to fit a model."""
    text = ";".join(f"{n}:{np.dtype(d).str}:{tuple(s)}" for n, (s, d) in sorted(specs.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def specs_of(values: dict) -> dict:
    return {n: (tuple(np.shape(v)), np.asarray(v).dtype) for n, v in values.items()}


def save(path, values: dict, model: str, step: int | None = None) -> Path:
    """Write ``values`` (name -> array) atomically to ``path`` (.npz)."""
    path = Path(path)
    if HEADER in values:
        raise CheckpointError(f"checkpoint {path}: a variable may not be named '{HEADER}'")
    header = {"format": FORMAT, "model": model, "step": None if step is None else int(step),
              "hash": spec_hash(specs_of(values))}  # fmt: skip
    arrays = {HEADER: np.frombuffer(json.dumps(header, sort_keys=True).encode(), np.uint8)}
    arrays.update({n: np.asarray(v, order="C") for n, v in values.items()})
    try:
        with files.atomic_writer(path) as f:
            np.savez(f, **arrays)
    except OSError as e:
        raise CheckpointError(f"cannot write checkpoint {path}: {e.strerror or e}") from None
    return path


def load(path, specs: dict | None = None, model: str | None = None) -> tuple[dict, dict]:
    """(values, header) of the checkpoint at ``path``; with ``specs`` ({name: (shape, dtype)},
    the model's variables) every variable must be there with that shape and dtype, and no
    other. Everything is checked before any array is inflated (see the module docstring)."""
    path = Path(path)
    try:
        with open(path, "rb") as f, zipfile.ZipFile(f) as z:
            size = os.fstat(f.fileno()).st_size
            files.check_archive(z, size, CheckpointError, f"checkpoint {path}", ratio=specs is None)
            return _load(z, path, specs, model)
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint {path} does not exist") from None
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise CheckpointError(f"checkpoint {path} is not a readable .npz file: {e}") from None


def _members(z: zipfile.ZipFile, path) -> dict:
    """{name: ZipInfo} of an .npz archive, named as np.load names them (less ``.npy``)."""
    members = {}
    for info in z.infolist():
        name = info.filename
        if not name.endswith(".npy"):
            raise CheckpointError(f"checkpoint {path}: member {name} is not a .npy array")
        if name[:-4] in members:
            raise CheckpointError(f"checkpoint {path}: member {name} appears twice")
        members[name[:-4]] = info
    return members


def _header(z: zipfile.ZipFile, info: zipfile.ZipInfo, path) -> dict:
    if info.file_size > MAX_HEADER_BYTES:
        raise CheckpointError(
            f"checkpoint {path}: member {info.filename} declares {info.file_size} bytes, "
            f"more than the {MAX_HEADER_BYTES} of a '{HEADER}' header"
        )
    head = files.npy_header(z, info)
    if head.dtype != np.uint8 or len(head.shape) != 1 or info.file_size != head.offset + head.nbytes:
        raise CheckpointError(f"checkpoint {path}: unreadable '{HEADER}' header")
    data = files.read_npy(z, info, head, CheckpointError, f"checkpoint {path}")
    try:
        header = json.loads(data.tobytes().decode())
    except (ValueError, UnicodeDecodeError):
        header = None
    if not isinstance(header, dict):
        raise CheckpointError(f"checkpoint {path}: unreadable '{HEADER}' header")
    if header.get("format") != FORMAT:
        got = header.get("format")
        raise CheckpointError(f"checkpoint {path} has format {got!r}; this flowc reads {FORMAT}")
    return header


def _variable(z: zipfile.ZipFile, name: str, info: zipfile.ZipInfo, path) -> files.NpyHeader:
    """The .npy header of variable ``name``, read in a bounded way: no Python objects (its size
    against the member's is checked once every variable fits)."""
    head = files.npy_header(z, info)
    if head.dtype.hasobject:
        raise CheckpointError(f"checkpoint {path}: variable '{name}' ({info.filename}) holds Python objects")
    return head


def _load(z: zipfile.ZipFile, path, specs: dict | None, model: str | None) -> tuple[dict, dict]:
    members = _members(z, path)
    if HEADER not in members:
        raise CheckpointError(f"{path} is not a flowc checkpoint (no '{HEADER}' entry)")
    header = _header(z, members.pop(HEADER), path)
    heads = {}
    if specs is None:
        heads = {name: _variable(z, name, info, path) for name, info in members.items()}
    else:
        whose = f"model '{model}'" if model else "the model"
        for name, (shape, dtype) in specs.items():
            if name not in members:
                owner = header.get("model")
                raise CheckpointError(
                    f"checkpoint {path} (of model '{owner}') has no variable '{name}' of {whose}"
                )
            head = heads[name] = _variable(z, name, members[name], path)
            got = head.dtype.newbyteorder("=")
            if head.shape != tuple(shape) or got != np.dtype(dtype):
                raise CheckpointError(
                    f"checkpoint {path}: variable '{name}' is {got}{list(head.shape)}; "
                    f"{whose} has {np.dtype(dtype)}{list(shape)}"
                )
        extra = sorted(set(members) - set(specs))
        if extra:
            raise CheckpointError(f"checkpoint {path} has variable '{extra[0]}', which {whose} does not")
    for name, head in heads.items():
        info = members[name]
        if info.file_size != head.offset + head.nbytes:
            raise CheckpointError(
                f"checkpoint {path}: variable '{name}' ({info.filename}) is {info.file_size} bytes, "
                f"its header says {head.offset + head.nbytes}"
            )
    where = f"checkpoint {path}"
    values = {name: files.read_npy(z, members[name], h, CheckpointError, where) for name, h in heads.items()}
    return values, header
