"""Resource markers for the codegen tests: C compiler present or skip."""

from __future__ import annotations

import os
import shutil

import pytest

CC = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/codegen" in str(item.fspath) and item.get_closest_marker("c"):
            if CC is None:
                item.add_marker(pytest.mark.skip(reason="no C compiler (set CC or install gcc)"))


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    """Builds go to a cache private to this test session."""
    monkeypatch.setenv("FLOWC_CACHE", str(tmp_path_factory.getbasetemp() / "flowc-cache"))
