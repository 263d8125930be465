"""ONNX control flow through flowc (graphdef/onnx/ops_control.py), against onnxruntime.

Each case is a small ``onnx.helper`` model: If with a condition known at import (only the
chosen branch is imported) and with a run-time condition (both branches, then ``where``),
subgraphs nested three deep that read values of every enclosing scope, Loop unrolled with
carried values and scan outputs (a for loop, and a while loop whose condition turns false at
import), Scan in the opset-8 batch form and the opset-9+ form with input and output axes and
directions, and the optional ops on tensors. The imported graph runs in the interpreter and,
compiled to C (all cases in one library), through cffi; both are compared with onnxruntime.
The refusals name the node, op, opset and reason.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import graphdef as gd  # noqa: E402
from graphdef.errors import FlowcError, UnsupportedError  # noqa: E402

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def vi(name, shape, t=F):
    return helper.make_tensor_value_info(name, t, shape)


def node(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, **attrs)


def const(name, value):
    return numpy_helper.from_array(np.asarray(value), name)


def graph(name, nodes, inputs, outputs, inits=()):
    return helper.make_graph(nodes, name, inputs, outputs, list(inits))


def f32(key, *shape):
    return np.random.default_rng(zlib.crc32(key.encode())).standard_normal(shape).astype(np.float32)


@dataclass
class Case:
    key: str
    nodes: list
    inputs: list  # value infos of the fed inputs
    outputs: list
    feeds: dict
    inits: list = field(default_factory=list)
    opset: int = 17

    def model(self):
        g = graph(self.key, self.nodes, self.inputs, self.outputs, self.inits)
        model = helper.make_model(g, opset_imports=[helper.make_opsetid("", self.opset)])
        model.ir_version = 10  # onnxruntime 1.31 reads IR <= 11
        return model

    def expected(self) -> dict:
        session = ort.InferenceSession(self.model().SerializeToString(), providers=["CPUExecutionProvider"])
        return dict(zip([o.name for o in self.outputs], session.run(None, self.feeds)))


# ----------------------------------------------------------------------------- the cases


def if_cases():
    # then: x * w (w an outer initializer); else: x - 1 (then branch reads an outer value)
    then = graph("then", [node("Mul", ["x", "w"], ["t"])], [], [vi("t", None)])
    other = graph("else", [node("Sub", ["x", "one"], ["e"])], [], [vi("e", None)])
    inits = [const("w", f32("w", 3, 4)), const("one", np.float32(1))]
    x = f32("x", 3, 4)
    out = []
    for flag in (True, False):
        out.append(
            Case(
                f"if_runtime_{str(flag).lower()}",
                [node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
                [vi("x", [3, 4]), vi("c", [], B)],
                [vi("y", [3, 4])],
                {"x": x, "c": np.array(flag)},
                inits,
            )
        )
        out.append(
            Case(
                f"if_constant_{str(flag).lower()}",
                [node("If", ["k"], ["y"], then_branch=then, else_branch=other)],
                [vi("x", [3, 4])],
                [vi("y", [3, 4])],
                {"x": x},
                inits + [const("k", np.array([flag]))],
            )
        )
    # run-time condition from data (a reduction), outputs of several dtypes, one shared value
    then2 = graph(
        "then2",
        [node("Relu", ["x"], ["a"]), node("Shape", ["x"], ["s"]), node("Identity", ["x"], ["x1"])],
        [],
        [vi("a", None), vi("s", None, I64), vi("x1", None)],
    )
    else2 = graph(
        "else2",
        [node("Neg", ["x"], ["b"]), node("Shape", ["x"], ["s2"]), node("Identity", ["x"], ["x2"])],
        [],
        [vi("b", None), vi("s2", None, I64), vi("x2", None)],
    )
    out.append(
        Case(
            "if_data_condition",
            [
                node("ReduceSum", ["x"], ["total"], keepdims=0),
                node("Greater", ["total", "zero"], ["c"]),
                node("If", ["c"], ["y", "shape", "same"], then_branch=then2, else_branch=else2),
            ],
            [vi("x", [2, 5])],
            [vi("y", [2, 5]), vi("shape", [2], I64), vi("same", [2, 5])],
            {"x": f32("xd", 2, 5)},
            [const("zero", np.float32(0))],
        )
    )
    return out


def nested_case():
    """Loop -> If -> Loop: the inner bodies read names of every enclosing scope."""
    inner_body = graph(
        "inner",
        [
            node("Add", ["acc_in", "outer_bias"], ["a1"]),  # from the main graph
            node("Mul", ["a1", "scale_loop"], ["acc_out"]),  # from the outer loop body
            node("Identity", ["c_in2"], ["c_out2"]),
        ],
        [vi("j", [], I64), vi("c_in2", [], B), vi("acc_in", None)],
        [vi("c_out2", [], B), vi("acc_out", None)],
    )
    then = graph(
        "then", [node("Loop", ["two", "true", "h_in"], ["h_t"], body=inner_body)], [], [vi("h_t", None)]
    )
    other = graph("else", [node("Sub", ["h_in", "outer_bias"], ["h_e"])], [], [vi("h_e", None)])
    outer_body = graph(
        "outer",
        [
            node("Cast", ["i"], ["i_f"], to=F),
            node("Add", ["i_f", "half"], ["scale_loop"]),
            node("Mod", ["i", "two"], ["parity"]),
            node("Equal", ["parity", "zero_i"], ["even"]),
            node("If", ["even"], ["h_out"], then_branch=then, else_branch=other),
            node("Identity", ["c_in"], ["c_out"]),
            node("Tanh", ["h_out"], ["step"]),
        ],
        [vi("i", [], I64), vi("c_in", [], B), vi("h_in", None)],
        [vi("c_out", [], B), vi("h_out", None), vi("step", None)],
    )
    return Case(
        "nested_loop_if_loop",
        [
            node("Mul", ["x", "x"], ["outer_bias"]),
            node("Loop", ["three", "true", "x"], ["h", "steps"], body=outer_body),
        ],
        [vi("x", [2, 3])],
        [vi("h", [2, 3]), vi("steps", [3, 2, 3])],
        {"x": f32("nx", 2, 3) * 0.3},
        [
            const("two", np.int64(2)),
            const("three", np.int64(3)),
            const("true", np.array(True)),
            const("half", np.float32(0.5)),
            const("zero_i", np.int64(0)),
        ],
    )


def loop_cases():
    # for loop: y += x[i] (slice by the iteration number), scan outputs y and y * i
    body = graph(
        "body",
        [
            node("Unsqueeze", ["i", "axes0"], ["start"]),
            node("Add", ["i", "one"], ["end_s"]),
            node("Unsqueeze", ["end_s", "axes0"], ["end"]),
            node("Slice", ["x", "start", "end"], ["row"]),
            node("Add", ["y_in", "row"], ["y_out"]),
            node("Cast", ["i"], ["i_f"], to=F),
            node("Mul", ["y_out", "i_f"], ["scaled"]),
            node("Identity", ["c_in"], ["c_out"]),
            node("Identity", ["y_out"], ["scan_y"]),
        ],
        [vi("i", [], I64), vi("c_in", [], B), vi("y_in", [1, 3])],
        [vi("c_out", [], B), vi("y_out", [1, 3]), vi("scan_y", [1, 3]), vi("scaled", [1, 3])],
    )
    inits = [
        const("M", np.int64(4)),
        const("true", np.array(True)),
        const("axes0", np.array([0], np.int64)),
        const("one", np.int64(1)),
    ]
    for_loop = Case(
        "loop_for_carried_and_scans",
        [node("Loop", ["M", "true", "y0"], ["y", "ys", "scaled"], body=body)],
        [vi("x", [4, 3]), vi("y0", [1, 3])],
        [vi("y", [1, 3]), vi("ys", [4, 1, 3]), vi("scaled", [4, 1, 3])],
        {"x": f32("lx", 4, 3), "y0": f32("ly", 1, 3)},
        inits,
    )
    # while loop (no trip count): runs while i < 2, so three iterations; the condition is known
    # at import because the iteration number is
    wbody = graph(
        "wbody",
        [
            node("Less", ["i", "two"], ["c_out"]),
            node("Mul", ["v_in", "v_in"], ["sq"]),
            node("Add", ["sq", "small"], ["v_out"]),
            node("Cast", ["i"], ["i_out"], to=F),
        ],
        [vi("i", [], I64), vi("c_in", [], B), vi("v_in", [2])],
        [vi("c_out", [], B), vi("v_out", [2]), vi("i_out", [])],
    )
    while_loop = Case(
        "loop_while_condition_known",
        [node("Loop", ["", "true", "v"], ["vf", "iters"], body=wbody)],
        [vi("v", [2])],
        [vi("vf", [2]), vi("iters", [3])],
        {"v": f32("wv", 2) * 0.5},
        [const("true", np.array(True)), const("two", np.int64(2)), const("small", np.float32(0.1))],
    )
    # zero iterations: carried values pass through, scan outputs are empty
    zero = Case(
        "loop_zero_trips",
        [node("Loop", ["M0", "true", "y0"], ["y", "ys", "scaled"], body=body)],
        [vi("x", [4, 3]), vi("y0", [1, 3])],
        [vi("y", [1, 3]), vi("ys", [0, 1, 3]), vi("scaled", [0, 1, 3])],
        {"x": f32("zx", 4, 3), "y0": f32("zy", 1, 3)},
        inits + [const("M0", np.int64(0))],
    )
    return [for_loop, while_loop, zero]


def scan_cases():
    # state s (2,), scan inputs a (2, T=3, on axis 1, reversed) and b (T=3, 2, forward);
    # outputs: final s, out1 stacked on axis -1 and prepended, out2 on axis 0
    body = graph(
        "body",
        [
            node("Add", ["s_in", "a_t"], ["s1"]),
            node("Mul", ["s1", "b_t"], ["s_out"]),
            node("Sub", ["a_t", "b_t"], ["o1"]),
            node("Identity", ["s_out"], ["o2"]),
        ],
        [vi("s_in", [2]), vi("a_t", [2]), vi("b_t", [2])],
        [vi("s_out", [2]), vi("o1", [2]), vi("o2", [2])],
    )
    scan11 = Case(
        "scan11_axes_and_directions",
        [
            node(
                "Scan",
                ["s0", "a", "b"],
                ["s", "out1", "out2"],
                body=body,
                num_scan_inputs=2,
                scan_input_axes=[1, 0],
                scan_input_directions=[1, 0],
                scan_output_axes=[-1, 0],
                scan_output_directions=[1, 0],
            )
        ],
        [vi("s0", [2]), vi("a", [2, 3]), vi("b", [3, 2])],
        [vi("s", [2]), vi("out1", [2, 3]), vi("out2", [3, 2])],
        {"s0": f32("s0", 2), "a": f32("sa", 2, 3), "b": f32("sb", 3, 2)},
    )
    # opset 8: batch axis 0, sequence axis 1, the second input scanned backwards
    body8 = graph(
        "body8",
        [
            node("Add", ["s_in", "a_t"], ["s_out"]),
            node("Mul", ["s_out", "b_t"], ["o"]),
        ],
        [vi("s_in", [2]), vi("a_t", [2]), vi("b_t", [2])],
        [vi("s_out", [2]), vi("o", [2])],
    )
    scan8 = Case(
        "scan8_batch_reverse",
        [node("Scan", ["", "s0", "a", "b"], ["s", "o"], body=body8, num_scan_inputs=2, directions=[0, 1])],
        [vi("s0", [2, 2]), vi("a", [2, 4, 2]), vi("b", [2, 4, 2])],
        [vi("s", [2, 2]), vi("o", [2, 4, 2])],
        {"s0": f32("s8", 2, 2), "a": f32("a8", 2, 4, 2), "b": f32("b8", 2, 4, 2)},
        opset=8,
    )
    return [scan11, scan8]


def optional_cases():
    return [
        Case(
            "optional_tensor",
            [
                node("Optional", ["x"], ["o"]),
                node("OptionalHasElement", ["o"], ["has"]),
                node("OptionalGetElement", ["o"], ["got"]),
                node("OptionalHasElement", [], ["empty"]),
            ],
            [vi("x", [3])],
            [vi("has", [], B), vi("got", [3]), vi("empty", [], B)],
            {"x": f32("ox", 3)},
            opset=18,
        )
    ]


CASES = if_cases() + [nested_case()] + loop_cases() + scan_cases() + optional_cases()


@pytest.fixture(scope="module")
def imported(import_models):
    graphs = import_models(CASES)
    return {case.key: (graphs[case.key], case.expected()) for case in CASES}


@pytest.fixture(scope="module")
def compiled(imported, compile_graphs):
    return compile_graphs({key: g for key, (g, _) in imported.items()})


def assert_close(got: dict, want: dict, what: str) -> None:
    assert sorted(got) == sorted(want), what
    for name, w in want.items():
        g = got[name]
        assert g.shape == w.shape and g.dtype == w.dtype, (
            f"{what} '{name}': {g.dtype}{g.shape} != {w.dtype}{w.shape}"
        )
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=f"{what} '{name}'")


@pytest.mark.parametrize("key", [c.key for c in CASES])
def test_interpreter_matches_onnxruntime(key, imported):
    g, want = imported[key]
    gd.verify(g)
    case = next(c for c in CASES if c.key == key)
    names = [str(o) for o in g.outputs]
    assert_close(dict(zip(names, gd.run(g, case.feeds, names))), want, f"{key} interpreter")


@pytest.mark.c
@pytest.mark.parametrize("key", [c.key for c in CASES])
def test_compiled_matches_onnxruntime(key, imported, compiled):
    case = next(c for c in CASES if c.key == key)
    assert_close(compiled[key](**case.feeds), imported[key][1], f"{key} compiled")


# ----------------------------------------------------------------------------- structure


def _ops(imported, key) -> list[str]:
    return [n.op for n in imported[key][0].nodes]


def test_constant_condition_imports_one_branch(imported):
    assert "mul" in _ops(imported, "if_constant_true") and "sub" not in _ops(imported, "if_constant_true")
    assert "sub" in _ops(imported, "if_constant_false") and "mul" not in _ops(imported, "if_constant_false")
    assert "where" not in _ops(imported, "if_constant_true") + _ops(imported, "if_constant_false")


def test_runtime_condition_selects_between_both_branches(imported):
    ops = _ops(imported, "if_runtime_true")
    assert {"mul", "sub", "where"} <= set(ops)
    # a value both branches share (the outer x, the static shape) needs no select
    assert _ops(imported, "if_data_condition").count("where") == 1


def test_loops_unroll_with_static_slices(imported):
    ops = _ops(imported, "loop_for_carried_and_scans")
    assert ops.count("slice") == 4 and "where" not in ops  # x[i:i+1] per iteration, i known
    assert _ops(imported, "nested_loop_if_loop").count("tanh") == 3


# ----------------------------------------------------------------------------- refusals


def _save(tmp_path, case: Case):
    path = tmp_path / f"{case.key}.onnx"
    path.write_bytes(case.model().SerializeToString())
    return path


def test_runtime_if_with_branches_of_different_shapes_is_refused(tmp_path):
    then = graph("then", [node("Identity", ["x"], ["t"])], [], [vi("t", None)])
    other = graph("else", [node("Concat", ["x", "x"], ["e"], axis=0)], [], [vi("e", None)])
    case = Case(
        "bad_if",
        [node("If", ["c"], ["y"], then_branch=then, else_branch=other, name="choose")],
        [vi("x", [2]), vi("c", [], B)],
        [vi("y", None)],
        {},
    )
    with pytest.raises(UnsupportedError) as e:
        gd.load_onnx(_save(tmp_path, case))
    msg = str(e.value)
    assert "node 'choose' (If, opset 17)" in msg
    assert "branches differ in shape: output shape depends on input values" in msg
    # fixed at compile time, the condition picks one branch and the model imports
    g = gd.load_onnx(_save(tmp_path, case), values={"c": np.array(False)})
    assert g.type_of(g.outputs[0]).shape == (4,)


def _counting_loop(m_input: bool, cond_from_data: bool) -> Case:
    body_nodes = [node("Add", ["v_in", "one"], ["v_out"])]
    if cond_from_data:
        body_nodes.append(node("Less", ["v_out", "ten"], ["c_out"]))
    else:
        body_nodes.append(node("Identity", ["c_in"], ["c_out"]))
    body = graph(
        "body",
        body_nodes,
        [vi("i", [], I64), vi("c_in", [], B), vi("v_in", [])],
        [vi("c_out", [], B), vi("v_out", [])],
    )
    inits = [const("one", np.float32(1)), const("ten", np.float32(10)), const("true", np.array(True))]
    inputs = [vi("v", [])]
    if m_input:
        inputs.append(vi("M", [], I64))
    else:
        inits.append(const("M", np.int64(100)))
    return Case(
        "count",
        [node("Loop", ["M", "true", "v"], ["vf"], body=body, name="count")],
        inputs,
        [vi("vf", [])],
        {},
        inits,
    )


def test_loop_with_runtime_trip_count_is_refused(tmp_path):
    path = _save(tmp_path, _counting_loop(m_input=True, cond_from_data=False))
    with pytest.raises(UnsupportedError) as e:
        gd.load_onnx(path)
    msg = str(e.value)
    assert (
        "node 'count' (Loop, opset 17)" in msg and "the number of iterations depends on input values" in msg
    )
    assert "model input 'M': fix it with --value" in msg
    g = gd.load_onnx(path, values={"M": np.array(5)})
    assert gd.run(g, {"v": np.float32(1)}, ["vf"])[0] == 6


def test_loop_with_data_dependent_condition_is_refused(tmp_path):
    with pytest.raises(UnsupportedError) as e:
        gd.load_onnx(_save(tmp_path, _counting_loop(m_input=False, cond_from_data=True)))
    msg = str(e.value)
    assert (
        "node 'count' (Loop, opset 17)" in msg and "the number of iterations depends on input values" in msg
    )
    assert "condition output" in msg and "model input 'v'" in msg


def test_unsupported_ops_inside_subgraphs_are_listed(tmp_path):
    inner = graph("inner", [node("NoSuchOp", ["x"], ["t"])], [], [vi("t", None)])
    then = graph(
        "then", [node("If", ["c"], ["t2"], then_branch=inner, else_branch=inner)], [], [vi("t2", None)]
    )
    case = Case(
        "hidden",
        [node("If", ["c"], ["y"], then_branch=then, else_branch=then)],
        [vi("x", [2]), vi("c", [], B)],
        [vi("y", None)],
        {},
    )
    with pytest.raises(UnsupportedError, match=r"unsupported ops: NoSuchOp x4 \(ai.onnx opset 17\)"):
        gd.load_onnx(_save(tmp_path, case))


def test_errors_inside_a_body_name_the_loop_and_the_iteration(tmp_path):
    # v is [4]; the body reshapes it to [2, 2] and carries that on: iteration 1 cannot add it to v
    body = graph(
        "body",
        [
            node("Reshape", ["v_in", "shape"], ["r"]),
            node("Add", ["r", "v"], ["v_out"]),
            node("Identity", ["c_in"], ["c_out"]),
        ],
        [vi("i", [], I64), vi("c_in", [], B), vi("v_in", None)],
        [vi("c_out", [], B), vi("v_out", None)],
    )
    case = Case(
        "bad_body",
        [node("Loop", ["M", "true", "v"], ["vf"], body=body, name="L")],
        [vi("v", [4])],
        [vi("vf", None)],
        {},
        [const("M", np.int64(2)), const("true", np.array(True)), const("shape", np.array([4, 1], np.int64))],
    )
    with pytest.raises(FlowcError) as e:
        gd.load_onnx(_save(tmp_path, case))
    msg = str(e.value)
    assert msg.startswith(
        "node 'L' (Loop, opset 17) body (iteration 1): node 'Reshape_0' (Reshape, opset 17)"
    ), msg


def test_value_computed_from_an_input_names_that_input(tmp_path):
    # pads = shape_input - shape(x): known only when the 'target' input is fixed
    nodes = [
        node("Shape", ["x"], ["s"]),
        node("Sub", ["target", "s"], ["d"]),
        node("Concat", ["zeros", "d"], ["pads"], axis=0),
        node("Pad", ["x", "pads"], ["y"], name="P"),
    ]
    case = Case(
        "pad",
        nodes,
        [vi("x", [2, 3]), vi("target", [2], I64)],
        [vi("y", None)],
        {},
        [const("zeros", np.zeros(2, np.int64))],
    )
    with pytest.raises(UnsupportedError) as e:
        gd.load_onnx(_save(tmp_path, case))
    assert "computed from model input 'target': fix it with --value" in str(e.value)
    g = gd.load_onnx(_save(tmp_path, case), values={"target": np.array([3, 5])})
    assert g.type_of(g.outputs[0]).shape == (3, 5)


def test_empty_optional_is_refused(tmp_path):
    case = Case(
        "empty",
        [
            node("Optional", [], ["o"], type=helper.make_tensor_type_proto(F, [2])),
            node("OptionalGetElement", ["o"], ["y"]),
        ],
        [],
        [vi("y", [2])],
        {},
        opset=18,
    )
    with pytest.raises(UnsupportedError, match=r"\(Optional, opset 18\): an empty optional"):
        gd.load_onnx(_save(tmp_path, case))


def test_loop_without_condition_input_stopping_early_is_refused(tmp_path):
    # M = 3, no condition input, the body's condition output is false: the ONNX spec ignores it,
    # onnxruntime stops after one iteration; flowc refuses instead of choosing
    body = graph(
        "body",
        [node("Add", ["v_in", "one"], ["v_out"]), node("Identity", ["no"], ["c_out"])],
        [vi("i", [], I64), vi("c_in", [], B), vi("v_in", [])],
        [vi("c_out", [], B), vi("v_out", [])],
    )
    inits = [const("M", np.int64(3)), const("one", np.float32(1)), const("no", np.array(False))]
    case = Case(
        "stop",
        [node("Loop", ["M", "", "v"], ["vf"], body=body, name="S")],
        [vi("v", [])],
        [vi("vf", [])],
        {},
        inits,
    )
    with pytest.raises(UnsupportedError, match=r"node 'S' \(Loop, opset 17\): .*ambiguous"):
        gd.load_onnx(_save(tmp_path, case))
