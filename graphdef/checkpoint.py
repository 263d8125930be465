"""Checkpoints: the variables of a model (weights, optimizer slots, ``global_step``) in one
``.npz`` file, keyed by variable name, plus a header entry ``__flowc__`` (a JSON text as
uint8: format, model name, step, and the hash of the variables' names, dtypes and shapes).

The same file is written and read by ``gd.Session`` (``save_checkpoint`` / ``restore``) and by
compiled models (``CompiledModel.save_checkpoint`` / ``load_checkpoint``); numpy reads it as it
is (``np.load(path)["w1"]``). A write goes to a temporary name beside the target, is flushed to
disk and then renamed over it, so a crash leaves the old checkpoint or the new one, never half
of one. Reading checks the file against the model's variables and refuses a mismatch naming
the first variable that differs (missing, extra, another shape or dtype).
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from pathlib import Path

import numpy as np

from .errors import CheckpointError

FORMAT = 1
HEADER = "__flowc__"


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
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        raise CheckpointError(f"cannot write checkpoint {path}: {e.strerror or e}") from None
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def load(path, specs: dict | None = None, model: str | None = None) -> tuple[dict, dict]:
    """(values, header) of the checkpoint at ``path``; with ``specs`` ({name: (shape, dtype)},
    the model's variables) every variable must be there with that shape and dtype, and no
    other."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as f:
            data = {n: f[n] for n in f.files}
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint {path} does not exist") from None
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise CheckpointError(f"checkpoint {path} is not a readable .npz file: {e}") from None
    if HEADER not in data:
        raise CheckpointError(f"{path} is not a flowc checkpoint (no '{HEADER}' entry)")
    try:
        header = json.loads(data.pop(HEADER).tobytes().decode())
    except (ValueError, UnicodeDecodeError):
        raise CheckpointError(f"checkpoint {path}: unreadable '{HEADER}' header") from None
    if header.get("format") != FORMAT:
        got = header.get("format")
        raise CheckpointError(f"checkpoint {path} has format {got!r}; this flowc reads {FORMAT}")
    if specs is not None:
        whose = f"model '{model}'" if model else "the model"
        for name, (shape, dtype) in specs.items():
            if name not in data:
                owner = header.get("model")
                raise CheckpointError(
                    f"checkpoint {path} (of model '{owner}') has no variable '{name}' of {whose}"
                )
            got = data[name]
            if got.shape != tuple(shape) or got.dtype != np.dtype(dtype):
                raise CheckpointError(
                    f"checkpoint {path}: variable '{name}' is {got.dtype}{list(got.shape)}; "
                    f"{whose} has {np.dtype(dtype)}{list(shape)}"
                )
        extra = sorted(set(data) - set(specs))
        if extra:
            raise CheckpointError(f"checkpoint {path} has variable '{extra[0]}', which {whose} does not")
    return data, header
