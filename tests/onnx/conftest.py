"""Shared fixtures of the ONNX converter tests."""

from __future__ import annotations

import pytest

import graphdef as gd
from graphdef.errors import FlowcError


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


@pytest.fixture(scope="module")
def compile_graphs():
    """compile_graphs({key: graph}) -> {key: CompiledModel}, all in one shared library; the
    caller's tests skip when there is no C compiler."""

    def compile_all(graphs: dict):
        import codegen

        try:
            codegen.backends.c.toolchain.find_cc()
        except FlowcError as e:
            pytest.skip(str(e))
        return dict(zip(graphs, codegen.compile_many(list(graphs.items()))))

    return compile_all
