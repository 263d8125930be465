"""(filled in by the op records of this family)"""

from __future__ import annotations
