"""Resource markers for the hostile-input tests, as for tests/codegen: the tests marked ``c``
skip without a C compiler, and builds go to a cache private to the test session."""

from __future__ import annotations

import os
import shutil

import pytest

CC = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/hostile" in str(item.fspath) and item.get_closest_marker("c"):
            if CC is None:
                item.add_marker(pytest.mark.skip(reason="no C compiler (set CC or install gcc)"))


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    """Builds go to a cache private to this test session."""
    monkeypatch.setenv("FLOWC_CACHE", str(tmp_path_factory.getbasetemp() / "flowc-cache"))
