"""Malformed ONNX files and bad names at the boundary of flowc (review issue 31, item 12): each
is refused in one line that names what is wrong and where (the file, the ONNX node, the
tensor), before any work, instead of compiling to something else or failing in the C compiler.

1. two producers of one tensor (also inside a Loop body)   5. names that are not UTF-8
2. errors and inspect name the ONNX node, not flowc's       6. opsets outside 7..newest
3. model names that collide with C or runtime symbols       7. the user's build() failing
4. a node with too few inputs
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import numpy as np
import pytest

import graphdef as gd
from codegen import cli, pipeline
from codegen.loaded import check_name
from graphdef.errors import FlowcError
from graphdef.onnx import OnnxImportError

from .hostile import f32, i64, one_line_error, save, vi

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

# ----------------------------------------------------------------------------- helpers


def run_cli(argv, capsys) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


# ----------------------------------------------------------------------------- 1. one producer per tensor


def test_two_nodes_writing_one_tensor_are_refused_naming_both(tmp_path):
    nodes = [
        helper.make_node("Relu", ["x"], ["y"], name="first"),
        helper.make_node("Sigmoid", ["x"], ["y"], name="second"),
    ]
    path = save(tmp_path, nodes, [vi("x", [2])])
    msg = one_line_error(OnnxImportError, gd.load_onnx, path)
    assert str(path) in msg and "'y'" in msg, msg
    assert "node 'first' (Relu)" in msg and "node 'second' (Sigmoid)" in msg, msg


def test_unnamed_producers_are_named_by_op_and_index(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Sigmoid", ["x"], ["y"])]
    path = save(tmp_path, nodes, [vi("x", [2])])
    msg = one_line_error(OnnxImportError, gd.load_onnx, path)
    assert "'y'" in msg and "node 0 (Relu" in msg and "node 1 (Sigmoid" in msg, msg


@pytest.mark.parametrize("kind", ["graph input", "initializer"])
def test_a_node_output_shadowing_an_input_or_initializer_is_refused(kind, tmp_path):
    inits = [f32("w", [1.0, 2.0])] if kind == "initializer" else []
    inputs = [vi("x", [2])] + ([vi("w", [2])] if kind == "graph input" else [])
    nodes = [
        helper.make_node("Relu", ["x"], ["w"], name="shadow"),
        helper.make_node("Add", ["x", "w"], ["y"], name="add"),
    ]
    path = save(tmp_path, nodes, inputs, inits=inits)
    msg = one_line_error(OnnxImportError, gd.load_onnx, path)
    assert f"{kind} 'w'" in msg and "node 'shadow' (Relu)" in msg, msg


def test_a_graph_input_listed_twice_is_refused(tmp_path):
    nodes = [helper.make_node("Add", ["x", "x"], ["y"], name="add")]
    path = save(tmp_path, nodes, [vi("x", [2]), vi("x", [2])])
    msg = one_line_error(OnnxImportError, gd.load_onnx, path)
    assert "graph input 'x'" in msg and "twice" in msg, msg


def test_an_initializer_that_is_also_a_graph_input_is_still_fine(tmp_path):
    # IR < 4 lists initializers among the inputs (a default value): that is one tensor
    nodes = [helper.make_node("Add", ["x", "w"], ["y"], name="add")]
    path = save(tmp_path, nodes, [vi("x", [2]), vi("w", [2])], inits=[f32("w", [1.0, 2.0])])
    assert gd.load_onnx(path).inputs == ("x",)


def _loop(body_nodes, body_out="v_out"):
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), *body_nodes],
        "body",
        [vi("i", [], TensorProto.INT64), vi("cond_in", [], TensorProto.BOOL), vi("v_in", [2])],
        [vi("cond_out", [], TensorProto.BOOL), vi(body_out, [2])],
    )
    return helper.make_node("Loop", ["n", "", "x"], ["y"], name="L", body=body)


def test_a_loop_body_output_shadowing_an_outer_tensor_is_refused(tmp_path):
    loop = _loop(
        [
            helper.make_node("Relu", ["v_in"], ["x"], name="inner"),
            helper.make_node("Identity", ["x"], ["v_out"], name="out"),
        ]
    )
    path = save(tmp_path, [loop], [vi("x", [2])], inits=[i64("n", 2)])
    msg = one_line_error(OnnxImportError, gd.load_onnx, path)
    assert "node 'L' (Loop)" in msg and "node 'inner' (Relu)" in msg and "'x'" in msg, msg


def test_a_loop_body_with_two_producers_is_refused(tmp_path):
    loop = _loop(
        [
            helper.make_node("Relu", ["v_in"], ["v_out"], name="p1"),
            helper.make_node("Neg", ["v_in"], ["v_out"], name="p2"),
        ]
    )
    path = save(tmp_path, [loop], [vi("x", [2])], inits=[i64("n", 2)])
    msg = one_line_error(OnnxImportError, gd.load_onnx, path)
    assert "'v_out'" in msg and "node 'p1' (Relu)" in msg and "node 'p2' (Neg)" in msg, msg


def test_sibling_branches_may_use_the_same_names(tmp_path):
    def branch(op):
        return helper.make_graph([helper.make_node(op, ["x"], ["r"], name=op)], op, [], [vi("r", [2])])

    nodes = [
        helper.make_node("If", ["c"], ["y"], name="if", then_branch=branch("Relu"), else_branch=branch("Neg"))
    ]
    path = save(tmp_path, nodes, [vi("x", [2])], inits=[numpy_helper.from_array(np.array(True), "c")])
    g = gd.load_onnx(path)
    np.testing.assert_array_equal(gd.run(g, {"x": np.array([-1, 2], np.float32)}, ["y"])[0], [0, 2])


# ----------------------------------------------------------------------------- 2. the ONNX node in errors


def _gather_model(tmp_path, name="/encoder/layer.3/Gather_bad", index=7):
    nodes = [
        helper.make_node("Gather", ["x", "idx"], ["g"], name=name, axis=0),
        helper.make_node("Relu", ["g"], ["y"], name="/encoder/layer.3/Relu"),
    ]
    return save(tmp_path, nodes, [vi("x", [4, 3])], inits=[i64("idx", [1, index])])


def test_a_compile_time_range_error_names_the_onnx_node(tmp_path):
    g = gd.load_onnx(_gather_model(tmp_path))
    msg = one_line_error(FlowcError, pipeline.run, g, pipeline.Options(), until="plan")
    assert "/encoder/layer.3/Gather_bad" in msg and "7" in msg, msg


def test_an_import_time_shape_error_names_the_onnx_node(tmp_path):
    nodes = [helper.make_node("Add", ["x", "z"], ["y"], name="/decoder/Add_bad")]
    path = save(tmp_path, nodes, [vi("x", [2, 3]), vi("z", [4])])
    msg = one_line_error(gd.ShapeError, gd.load_onnx, path)
    assert msg.startswith("node '/decoder/Add_bad' (Add, opset 17)"), msg
    assert "cannot broadcast" in msg, msg


def test_imported_nodes_are_named_after_their_onnx_node_through_the_passes(tmp_path):
    g = gd.load_onnx(_gather_model(tmp_path, index=2))
    assert {n.name for n in g.nodes if n.op == "gather"} == {"/encoder/layer.3/Gather_bad/gather"}
    c = pipeline.run(g, pipeline.Options(), until="plan")
    steps = [n.name for n in c.program.steps]
    assert any(s.startswith("/encoder/layer.3/Gather_bad") for s in steps), steps
    # identical imports give identical graphs and byte-identical saved files
    gd.save(g, tmp_path / "a.flowc")
    gd.save(gd.load_onnx(_gather_model(tmp_path, index=2)), tmp_path / "b.flowc")
    assert (tmp_path / "a.flowc").read_bytes() == (tmp_path / "b.flowc").read_bytes()


def test_inspect_step_names_show_the_onnx_node(tmp_path, capsys):
    long = "/model/encoder/layers.11/self_attention/output_projection/Softmax_17"
    nodes = [
        helper.make_node("Gather", ["x", "idx"], ["g"], name="/embed/Gather"),
        helper.make_node("Softmax", ["g"], ["y"], name=long, axis=-1),
    ]
    path = save(tmp_path, nodes, [vi("x", [4, 3])], inits=[i64("idx", [0, 2])])
    code, out, err = run_cli(["inspect", path], capsys)
    assert code == 0, err
    steps = out.split("schedule (step, op, node", 1)[1].split("memory plan")[0]
    assert "/embed/Gather/gather" in steps, steps
    # a long name keeps its start and its end (which tell layers and nodes apart)
    assert "/model/encoder/" in steps and "Softmax_17/softmax" in steps, steps


def test_inspect_names_the_onnx_nodes_each_step_computes(tmp_path, capsys):
    """Beside flowc's step names, the source nodes each step computes: a product fused with the
    bias add after it, a reshape folded into the transpose that reads it, a node kept alone."""
    rng = np.random.default_rng(1)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"], name="/blocks.0/qkv/MatMul"),
        helper.make_node("Add", ["m", "b"], ["a"], name="/blocks.0/qkv/Add"),
        helper.make_node("Reshape", ["a", "shape"], ["r"], name="/blocks.0/Reshape"),
        helper.make_node("Transpose", ["r"], ["t"], name="/blocks.0/Transpose", perm=[0, 2, 1]),
        helper.make_node("Softmax", ["t"], ["y"], name="/blocks.0/Softmax", axis=-1),
    ]
    inits = [
        f32("w", rng.standard_normal((16, 24))),
        f32("b", rng.standard_normal(24)),
        i64("shape", [1, 6, 16]),
    ]
    path = save(tmp_path, nodes, [vi("x", [4, 16])], inits=inits)
    code, out, err = run_cli(["inspect", path], capsys)
    assert code == 0, err
    steps = out.split("schedule (step, op, node", 1)[1].split("memory plan")[0].splitlines()[1:]
    by_op = {ln.split()[1]: ln for ln in steps}
    assert by_op["sgemm"].endswith("<- /blocks.0/qkv/MatMul + /blocks.0/qkv/Add"), steps
    assert by_op["transpose"].endswith("<- /blocks.0/Reshape + /blocks.0/Transpose"), steps
    assert by_op["softmax"].endswith("<- /blocks.0/Softmax"), steps


def test_unsupported_ops_name_their_first_onnx_node(tmp_path):
    nodes = [
        helper.make_node("Det", ["x"], ["d"], name="/head/Det_1"),
        helper.make_node("Det", ["x"], ["e"], name="/head/Det_2"),
        helper.make_node("Add", ["d", "e"], ["y"], name="add"),
    ]
    path = save(tmp_path, nodes, [vi("x", [2, 2])])
    msg = one_line_error(gd.UnsupportedError, gd.load_onnx, path)
    assert "unsupported ops: Det x2 (ai.onnx opset 17, node '/head/Det_1' ...)" in msg, msg


def test_control_characters_in_onnx_names_are_escaped_in_messages(tmp_path):
    nodes = [helper.make_node("Add", ["x", "z"], ["y"], name="evil\x1b[2J\u202e")]
    path = save(tmp_path, nodes, [vi("x", [2, 3]), vi("z", [4])])
    msg = one_line_error(gd.ShapeError, gd.load_onnx, path)
    assert "evil\\x1b[2J\\u202e" in msg, msg


def test_a_huge_onnx_node_name_is_bounded_in_messages(tmp_path):
    nodes = [helper.make_node("Add", ["x", "z"], ["y"], name="n" * 100_000)]
    path = save(tmp_path, nodes, [vi("x", [2, 3]), vi("z", [4])])
    msg = one_line_error(gd.ShapeError, gd.load_onnx, path)
    assert len(msg) < 2000 and "cannot broadcast" in msg, msg[:300]


# ----------------------------------------------------------------------------- 3. model names


@pytest.mark.parametrize(
    "name,what",
    [
        ("main", "main"),
        ("errno", "errno"),
        ("exit", "exit"),
        ("malloc", "malloc"),
        ("printf", "printf"),
        ("stdin", "stdin"),
        ("math", "<math.h>"),
        ("mpi", "mpi"),
        ("fc_npy", "fc_"),
        ("FC_thing", "fc_"),
        ("fc", "fc_"),
        ("flowc_rt", "FLOWC_RT_H"),
        ("_private", "_"),
        ("runtime", "runtime"),
        ("firmware", "firmware.c"),
        ("Makefile", "Makefile"),
        ("bool", "bool"),
    ],
)
def test_model_names_colliding_with_c_or_the_runtime_are_refused(name, what):
    msg = one_line_error(FlowcError, check_name, name)
    assert msg.startswith(f"model name '{name}' ") and what in msg and "choose another" in msg, msg


@pytest.mark.parametrize("name", ["net", "model", "mlp2", "resnet_50", "Net", "fcnet", "mainnet", "errnos"])
def test_ordinary_model_names_pass(name):
    assert check_name(name) == name


def _runtime_symbols() -> set[str]:
    """Every macro and header guard the runtime and the MPI layer define, every function they
    export: the names generated symbols must not meet."""
    out: set[str] = set()
    for path in [
        *(ROOT / "runtime_c").rglob("*.h"),
        *(ROOT / "runtime_c").rglob("*.c"),
        *(ROOT / "mpi").glob("*"),
    ]:
        text = path.read_text(errors="replace")
        out.update(re.findall(r"^\s*#\s*(?:define|ifndef)\s+([A-Za-z_]\w*)", text, re.M))
        out.update(re.findall(r"^[A-Za-z_][\w \*]*?\b(fc_\w+)\s*\(", text, re.M))
    return out


def test_no_model_name_meets_a_runtime_symbol():
    # NAME generates NAME_run, NAME_inputs, ... and NAME_H, NAME_OK, ...: a name whose generated
    # symbols equal a runtime macro or function (fc_npy -> FC_NPY_H) is refused
    suffixes = ("_H", "_OK", "_ARENA_BYTES", "_run", "_inputs", "_weights", "_status_string")
    for symbol in sorted(_runtime_symbols()):
        for suffix in suffixes:
            if symbol.endswith(suffix) and len(symbol) > len(suffix):
                stem = symbol[: -len(suffix)]
                for name in {stem, stem.lower()}:
                    if re.fullmatch(r"[A-Za-z_]\w*", name):
                        with pytest.raises(FlowcError):
                            check_name(name)


def test_compile_refuses_a_colliding_name_in_one_line(tmp_path, capsys):
    model = tmp_path / "m.py"
    model.write_text(
        textwrap.dedent(
            """
            import graphdef as gd

            def build():
                with gd.Graph("m") as g:
                    gd.relu(gd.placeholder("x", (2,)), name="y")
                return g
            """
        )
    )
    code, out, err = run_cli(["compile", f"{model}:build", "-o", tmp_path / "out", "--name", "main"], capsys)
    assert code == 1 and err.count("\n") == 1, err
    assert "model name 'main' collides with" in err and "choose another" in err, err
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------- 4. too few inputs


def test_a_node_with_too_few_inputs_names_node_op_and_counts(tmp_path):
    nodes = [helper.make_node("Gather", ["x"], ["y"], name="short")]
    path = save(tmp_path, nodes, [vi("x", [4, 3])])
    msg = one_line_error(OnnxImportError, gd.load_onnx, path)
    assert "node 'short' (Gather, opset 17)" in msg and "1 input" in msg and "needs 2" in msg, msg
    assert "IndexError" not in msg, msg


def test_a_required_input_left_empty_is_named(tmp_path):
    nodes = [helper.make_node("Gemm", ["x", "", "c"], ["y"], name="gemm")]
    path = save(tmp_path, nodes, [vi("x", [2, 3])], inits=[f32("c", np.ones(4))])
    msg = one_line_error(OnnxImportError, gd.load_onnx, path)
    assert "node 'gemm' (Gemm, opset 17)" in msg and "input 1 (B)" in msg and "empty" in msg, msg


def test_a_node_with_too_many_inputs_is_refused(tmp_path):
    nodes = [helper.make_node("Relu", ["x", "x"], ["y"], name="r")]
    path = save(tmp_path, nodes, [vi("x", [2])])
    msg = one_line_error(OnnxImportError, gd.load_onnx, path)
    assert "node 'r' (Relu, opset 17)" in msg and "2 inputs" in msg and "at most 1" in msg, msg


def test_a_converter_reading_past_the_inputs_gives_a_clear_line(tmp_path, monkeypatch):
    # ops without an ONNX schema (other domains): the dispatcher names node, op and count
    from graphdef.onnx import importer

    monkeypatch.setattr(importer, "_schema", lambda *a: None)
    nodes = [helper.make_node("Gather", ["x"], ["y"], name="short")]
    path = save(tmp_path, nodes, [vi("x", [4, 3])])
    msg = one_line_error(OnnxImportError, gd.load_onnx, path)
    assert "node 'short' (Gather, opset 17)" in msg and "has 1 input" in msg, msg
    assert "list index out of range" not in msg, msg


# ----------------------------------------------------------------------------- 5. names not UTF-8


def _with_bytes(path, old: bytes, new: bytes):
    data = path.read_bytes()
    assert data.count(old) == 1
    path.write_bytes(data.replace(old, new))
    return path


@pytest.mark.parametrize(
    "where,old,new",
    [
        ("node 0 (Relu) name", b"\x1a\x05Rname", b"\x1a\x05R\xffame"),
        ("graph input 1 name", b"\n\x05inp_x", b"\n\x05inp\xfe\xfe"),
        ("node 'Rname' (Relu) output 0", b"\x12\x05out_y", b"\x12\x05out\xc3\x28"),
    ],
)
def test_names_that_are_not_utf8_are_reported_as_such(where, old, new, tmp_path):
    nodes = [helper.make_node("Relu", ["a"], ["out_y"], name="Rname")]
    path = _with_bytes(save(tmp_path, nodes, [vi("a", [2]), vi("inp_x", [2])]), old, new)
    msg = one_line_error(OnnxImportError, gd.load_onnx, path)
    assert str(path) in msg and f"{where} is not valid UTF-8 (b'" in msg, msg
    assert "non-empty string" not in msg, msg


# ----------------------------------------------------------------------------- 6. opsets


@pytest.mark.parametrize("opset", [3, 6, 999])
def test_opsets_outside_the_supported_range_are_refused(opset, tmp_path):
    newest = onnx.defs.onnx_opset_version()
    path = save(tmp_path, [helper.make_node("Relu", ["x"], ["y"], name="r")], [vi("x", [2])], opset=opset)
    msg = one_line_error(OnnxImportError, gd.load_onnx, path)
    assert str(path) in msg and f"opset {opset}" in msg and f"7 to {newest}" in msg, msg


@pytest.mark.parametrize("opset", [7, "newest"])
def test_opsets_at_the_ends_of_the_range_import(opset, tmp_path):
    opset = onnx.defs.onnx_opset_version() if opset == "newest" else opset
    path = save(tmp_path, [helper.make_node("Relu", ["x"], ["y"], name="r")], [vi("x", [2])], opset=opset)
    assert [n.op for n in gd.load_onnx(path).nodes] == ["placeholder", "relu", "identity"]


# ----------------------------------------------------------------------------- 7. the user's build()


USER_MODEL = """
import graphdef as gd


def helper(x):
    raise ValueError("boom in the user's code")


def broken():
    with gd.Graph("m"):
        x = gd.placeholder("x", (2, 3))
        return helper(x)


def bad_shapes():
    with gd.Graph("m") as g:
        x = gd.placeholder("x", (2, 3))
        gd.matmul(x, gd.placeholder("w", (4, 5)), name="project")
    return g
"""


def test_an_exception_in_the_users_build_is_the_users_error(tmp_path, capsys):
    model = tmp_path / "user.py"
    model.write_text(USER_MODEL)
    code, out, err = run_cli(["compile", f"{model}:broken", "-o", tmp_path / "out", "--no-build"], capsys)
    assert code == 1, err
    lines = err.strip().splitlines()
    assert lines[-1] == f"flowc: error: {model}:broken failed: ValueError: boom in the user's code", err
    frames = [line for line in lines if line.lstrip().startswith("File ")]
    assert frames and all(str(model) in f for f in frames), err  # the user's frames only
    assert any("in broken" in f for f in frames) and any("in helper" in f for f in frames), err
    assert "Traceback" in err and "codegen" not in err and "graphdef" not in err, err


def test_a_flowc_error_in_the_users_build_stays_one_line_with_the_users_line(tmp_path, capsys):
    model = tmp_path / "user.py"
    model.write_text(USER_MODEL)
    code, out, err = run_cli(["inspect", f"{model}:bad_shapes"], capsys)
    assert code == 1 and err.count("\n") == 1, err
    line_no = 1 + next(i for i, t in enumerate(USER_MODEL.splitlines()) if 'name="project"' in t)
    assert err.startswith("flowc: error: node 'project' (op matmul"), err
    assert err.rstrip().endswith(f"(at {model}:{line_no})"), err
