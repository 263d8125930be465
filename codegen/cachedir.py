"""Where flowc keeps what it builds once and reuses: ~/.cache/flowc, or $FLOWC_CACHE."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    return Path(os.environ.get("FLOWC_CACHE") or Path.home() / ".cache" / "flowc")
