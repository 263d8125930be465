"""Shared fixtures of the ONNX converter tests."""

from __future__ import annotations

import pytest

import graphdef as gd


@pytest.fixture(scope="module")
def import_models(tmp_path_factory):
    """import_models(specs) -> {spec.key: graph}: each spec's ``model()`` written to an .onnx
    file and imported from it, as a user's model would be."""

    def load_all(specs):
        folder = tmp_path_factory.mktemp("models")
        graphs = {}
        for spec in specs:
            path = folder / f"{spec.key}.onnx"
            path.write_bytes(spec.model().SerializeToString())
            graphs[spec.key] = gd.load_onnx(path)
        return graphs

    return load_all
