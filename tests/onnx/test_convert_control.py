"""ONNX control flow through flowc (graphdef/onnx/ops_control.py), against onnxruntime.

Each case is a small ``onnx.helper`` model: If with a condition known at import (only the
chosen branch is imported) and with a run-time condition (a ``cond`` node: only the taken
branch runs, so a gather out of range in the other one is no error), subgraphs nested three
deep that read values of every enclosing scope, Loop unrolled when short and known at import
(a for loop, a while loop whose condition the importer evaluates) and compiled as a
``while_loop`` otherwise (a long trip count, a trip count or condition that is a model input,
nested loops, a Loop inside an If and an If inside a Loop), Scan unrolled and compiled in the
opset-8 batch form and the opset-9+ form with input and output axes and directions, and the
optional ops on tensors. The imported graph runs in the interpreter and, compiled to C (all
cases in one library), through cffi; both are compared with onnxruntime (a scan output of a
loop of run-time length has ``loop_bound`` rows, onnxruntime's rows then zeros). A loop's code
and arena do not depend on its trip count; running past ``loop_bound`` is an error. The
refusals name the node, op, opset and reason.
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
from codegen import pipeline  # noqa: E402
from graphdef.errors import ExecutionError, FlowcError, UnsupportedError  # noqa: E402

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
    options: dict = field(default_factory=dict)  # of load_onnx (loop_bound)
    rows: dict = field(default_factory=dict)  # output -> its rows in flowc (onnxruntime's, then zeros)

    def model(self):
        g = graph(self.key, self.nodes, self.inputs, self.outputs, self.inits)
        model = helper.make_model(g, opset_imports=[helper.make_opsetid("", self.opset)])
        model.ir_version = 10  # onnxruntime 1.31 reads IR <= 11
        return model

    def expected(self) -> dict:
        got = run_onnxruntime(self.model(), self.feeds)
        for name, rows in self.rows.items():
            v = got[name]
            got[name] = np.concatenate([v, np.zeros((rows - len(v), *v.shape[1:]), v.dtype)])
        return got


def run_onnxruntime(model, feeds: dict) -> dict:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in model.graph.output], session.run(None, feeds)))


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


def scan11_case(name: str, steps: int, feeds: dict) -> Case:
    """State s (2,), scan inputs a (2, steps, on axis 1, reversed) and b (steps, 2, forward);
    outputs: final s, out1 stacked on axis -1 and prepended, out2 on axis 0."""
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
    return Case(
        name,
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
        [vi("s0", [2]), vi("a", [2, steps]), vi("b", [steps, 2])],
        [vi("s", [2]), vi("out1", [2, steps]), vi("out2", [steps, 2])],
        feeds,
    )


def scan_cases():
    scan11 = scan11_case(
        "scan11_axes_and_directions", 3, {"s0": f32("s0", 2), "a": f32("sa", 2, 3), "b": f32("sb", 3, 2)}
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


def _gather_body(name="body"):
    """y += x[i] (a gather by the iteration number), scanning y * i: six nodes."""
    return graph(
        name,
        [
            node("Gather", ["x", "i"], ["row"], axis=0),
            node("Unsqueeze", ["row", "axes0"], ["row2"]),
            node("Add", ["y_in", "row2"], ["y_out"]),
            node("Cast", ["i"], ["i_f"], to=F),
            node("Mul", ["y_out", "i_f"], ["scaled"]),
            node("Identity", ["c_in"], ["c_out"]),
        ],
        [vi("i", [], I64), vi("c_in", [], B), vi("y_in", [1, 3])],
        [vi("c_out", [], B), vi("y_out", [1, 3]), vi("scaled", [1, 3])],
    )


def runtime_trip_model():
    """A Loop over the rows of x [6, 3] of model-input trip count M, scanning y * i."""
    g = graph(
        "loop",
        [node("Loop", ["M", "", "y0"], ["y", "scaled"], body=_gather_body(), name="L")],
        [vi("x", [6, 3]), vi("y0", [1, 3]), vi("M", [], I64)],
        [vi("y", [1, 3]), vi("scaled", ["N", 1, 3])],
        [const("axes0", np.array([0], np.int64))],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def compiled_loop_cases():
    axes0 = const("axes0", np.array([0], np.int64))
    # a trip count known at import but too long to unroll: 16 x 6 body nodes
    long_for = Case(
        "loop_compiled_for",
        [node("Loop", ["M", "", "y0"], ["y", "scaled"], body=_gather_body(), name="L")],
        [vi("x", [16, 3]), vi("y0", [1, 3])],
        [vi("y", [1, 3]), vi("scaled", [16, 1, 3])],
        {"x": f32("cx", 16, 3), "y0": f32("cy", 1, 3)},
        [axes0, const("M", np.int64(16))],
    )
    # while v < limit (a model input): a condition only known at run time, no trip count
    wbody = graph(
        "wbody",
        [
            node("Mul", ["v_in", "grow"], ["v1"]),
            node("Add", ["v1", "one"], ["v_out"]),
            node("Add", ["n_in", "one_i"], ["n_out"]),
            node("ReduceSum", ["v_out"], ["total"], keepdims=0),
            node("Less", ["total", "limit"], ["c_out"]),
        ],
        [vi("i", [], I64), vi("c_in", [], B), vi("v_in", [3]), vi("n_in", [], I64)],
        [vi("c_out", [], B), vi("v_out", [3]), vi("n_out", [], I64)],
    )
    inits = [const("grow", np.float32(1.5)), const("one", np.float32(1)), const("one_i", np.int64(1))]
    runtime_while = [
        Case(
            f"loop_runtime_condition_{int(limit)}",
            [
                node("ReduceSum", ["v"], ["t0"], keepdims=0),
                node("Less", ["t0", "limit"], ["c0"]),
                node("Loop", ["", "c0", "v", "zero_i"], ["vf", "n"], body=wbody, name="W"),
            ],
            [vi("v", [3]), vi("limit", [])],
            [vi("vf", [3]), vi("n", [], I64)],
            {"v": np.array([0.5, -0.25, 1.0], np.float32), "limit": np.array(limit, np.float32)},
            inits + [const("zero_i", np.int64(0))],
        )
        for limit in (0.0, 40.0, 5000.0)  # no iteration, a few, many
    ]
    # a trip count known at import and a run-time condition input and condition: the scan output
    # has M rows, the last ones zeros once the condition turns false
    cbody = graph(
        "cbody",
        [
            node("Add", ["acc_in", "step"], ["acc_out"]),
            node("ReduceMax", ["acc_out"], ["top"], keepdims=0),
            node("Less", ["top", "threshold"], ["c_out"]),
            node("Mul", ["acc_out", "acc_out"], ["sq"]),
        ],
        [vi("i", [], I64), vi("c_in", [], B), vi("acc_in", [2])],
        [vi("c_out", [], B), vi("acc_out", [2]), vi("sq", [2])],
    )
    cond_input = Case(
        "loop_runtime_condition_input_with_scan",
        [node("Loop", ["M", "go", "acc0"], ["acc", "squares"], body=cbody, name="C")],
        [vi("go", [], B), vi("acc0", [2]), vi("step", [2]), vi("threshold", [])],
        [vi("acc", [2]), vi("squares", ["K", 2])],
        {
            "go": np.array(True),
            "acc0": np.zeros(2, np.float32),
            "step": np.array([0.5, 1.0], np.float32),
            "threshold": np.array(6.5, np.float32),
        },
        [const("M", np.int64(20))],
        rows={"squares": 20},
    )
    # bodies a compiled loop cannot hold, with trip counts known at import: unrolled instead
    by_slice = graph(
        "by_slice",
        [
            node("Unsqueeze", ["i", "axes0"], ["start"]),
            node("Add", ["i", "one_i"], ["e"]),
            node("Unsqueeze", ["e", "axes0"], ["end"]),
            node("Slice", ["x", "start", "end"], ["row"]),  # its starts must be known at import
            node("Add", ["y_in", "row"], ["y_out"]),
            node("Identity", ["c_in"], ["c_out"]),
        ],
        [vi("i", [], I64), vi("c_in", [], B), vi("y_in", [1, 3])],
        [vi("c_out", [], B), vi("y_out", [1, 3])],
    )
    sliced = Case(
        "loop_slice_by_iteration_unrolled",
        [node("Loop", ["M", "", "y0"], ["y"], body=by_slice, name="S")],
        [vi("x", [20, 3]), vi("y0", [1, 3])],
        [vi("y", [1, 3])],
        {"x": f32("sx", 20, 3), "y0": f32("sy", 1, 3)},
        [axes0, const("one_i", np.int64(1)), const("M", np.int64(20))],
    )
    grow = graph(
        "grow",
        [node("Concat", ["v_in", "x"], ["v_out"], axis=0), node("Identity", ["c_in"], ["c_out"])],
        [vi("i", [], I64), vi("c_in", [], B), vi("v_in", None)],
        [vi("c_out", [], B), vi("v_out", None)],
    )
    growing = Case(
        "loop_growing_value_unrolled",
        [node("Loop", ["M", "", "x"], ["v"], body=grow, name="G")],
        [vi("x", [2])],
        [vi("v", [82])],
        {"x": f32("gx", 2)},
        [const("M", np.int64(40))],
    )
    return [long_for, *runtime_while, cond_input, sliced, growing]


def nested_runtime_case():
    """A Loop of model-input length M inside which a Loop of model-input length K runs; the
    outer one scans, so it takes loop_bound rows."""
    inner = graph(
        "inner",
        [
            node("Cast", ["j"], ["j_f"], to=F),
            node("Mul", ["h_in", "decay"], ["h1"]),
            node("Add", ["h1", "j_f"], ["h_out"]),
            node("Identity", ["c_in2"], ["c_out2"]),
        ],
        [vi("j", [], I64), vi("c_in2", [], B), vi("h_in", [2, 2])],
        [vi("c_out2", [], B), vi("h_out", [2, 2])],
    )
    outer = graph(
        "outer",
        [
            node("Loop", ["K", "", "s_in"], ["h"], body=inner, name="inner_loop"),
            node("Add", ["h", "x"], ["s_out"]),
            node("ReduceSum", ["s_out"], ["total"], keepdims=0),
            node("Identity", ["c_in"], ["c_out"]),
        ],
        [vi("i", [], I64), vi("c_in", [], B), vi("s_in", [2, 2])],
        [vi("c_out", [], B), vi("s_out", [2, 2]), vi("total", [])],
    )
    return Case(
        "loop_nested_runtime_lengths",
        [node("Loop", ["M", "", "x"], ["s", "totals"], body=outer, name="outer_loop")],
        [vi("x", [2, 2]), vi("M", [], I64), vi("K", [], I64)],
        [vi("s", [2, 2]), vi("totals", ["N"])],
        {"x": f32("nr", 2, 2) * 0.1, "M": np.array(5, np.int64), "K": np.array(3, np.int64)},
        [const("decay", np.float32(0.5))],
        options={"loop_bound": 8},
        rows={"totals": 8},
    )


def loop_if_cases():
    # a Loop (compiled: 12 x 6 nodes) inside the then branch of a run-time If
    then = graph(
        "then",
        [node("Loop", ["twelve", "", "y0"], ["y_t", "sc_t"], body=_gather_body("lbody"), name="in_if")],
        [],
        [vi("y_t", [1, 3]), vi("sc_t", [12, 1, 3])],
    )
    other = graph(
        "else",
        [node("Neg", ["y0"], ["y_e"]), node("Expand", ["y_e", "sc_shape"], ["sc_e"])],
        [],
        [vi("y_e", [1, 3]), vi("sc_e", [12, 1, 3])],
    )
    inits = [
        const("axes0", np.array([0], np.int64)),
        const("twelve", np.int64(12)),
        const("sc_shape", np.array([12, 1, 3], np.int64)),
    ]
    loop_in_if = [
        Case(
            f"loop_in_if_{str(flag).lower()}",
            [node("If", ["c"], ["y", "sc"], then_branch=then, else_branch=other, name="choose")],
            [vi("c", [], B), vi("x", [12, 3]), vi("y0", [1, 3])],
            [vi("y", [1, 3]), vi("sc", [12, 1, 3])],
            {"c": np.array(flag), "x": f32("lx2", 12, 3), "y0": f32("ly2", 1, 3)},
            inits,
        )
        for flag in (True, False)
    ]
    # a run-time If inside a Loop of model-input length: even iterations double, odd ones negate
    even = graph("even", [node("Mul", ["v_in", "two_f"], ["v_t"])], [], [vi("v_t", [3])])
    odd = graph("odd", [node("Neg", ["v_in"], ["v_e"])], [], [vi("v_e", [3])])
    body = graph(
        "body",
        [
            node("Mod", ["i", "two"], ["parity"]),
            node("Equal", ["parity", "zero"], ["is_even"]),
            node("If", ["is_even"], ["v1"], then_branch=even, else_branch=odd, name="branch"),
            node("Add", ["v1", "x"], ["v_out"]),
            node("Identity", ["c_in"], ["c_out"]),
        ],
        [vi("i", [], I64), vi("c_in", [], B), vi("v_in", [3])],
        [vi("c_out", [], B), vi("v_out", [3])],
    )
    if_in_loop = Case(
        "if_in_loop",
        [node("Loop", ["M", "", "x"], ["v"], body=body, name="L")],
        [vi("x", [3]), vi("M", [], I64)],
        [vi("v", [3])],
        {"x": f32("il", 3), "M": np.array(7, np.int64)},
        [const("two", np.int64(2)), const("zero", np.int64(0)), const("two_f", np.float32(2))],
    )
    return [*loop_in_if, if_in_loop]


def if_untaken_branch_cases():
    """Gather row idx of x [4, 3] when idx < 4, else row 0 negated: idx 7 would be out of range
    in the branch that does not run."""
    then = graph("then", [node("Gather", ["x", "idx"], ["row"], axis=0)], [], [vi("row", [3])])
    other = graph(
        "else",
        [node("Gather", ["x", "zero"], ["first"], axis=0), node("Neg", ["first"], ["neg"])],
        [],
        [vi("neg", [3])],
    )
    return [
        Case(
            f"if_untaken_branch_out_of_range_{idx}",
            [
                node("Less", ["idx", "four"], ["inside"]),
                node("If", ["inside"], ["y"], then_branch=then, else_branch=other, name="guard"),
            ],
            [vi("x", [4, 3]), vi("idx", [], I64)],
            [vi("y", [3])],
            {"x": f32("ux", 4, 3), "idx": np.array(idx, np.int64)},
            [const("four", np.int64(4)), const("zero", np.int64(0))],
        )
        for idx in (2, 7)
    ]


def compiled_scan_cases():
    # scan11's body over 20 elements (20 x 4 nodes): a loop gathering row i (or 19 - i)
    scan11 = scan11_case(
        "scan11_compiled_axes_and_directions",
        20,
        {"s0": f32("cs0", 2), "a": f32("csa", 2, 20) * 0.5, "b": f32("csb", 20, 2) * 0.5},
    )
    body8 = graph(
        "body8",
        [node("Add", ["s_in", "a_t"], ["s_out"]), node("Mul", ["s_out", "b_t"], ["o"])],
        [vi("s_in", [2]), vi("a_t", [2]), vi("b_t", [2])],
        [vi("s_out", [2]), vi("o", [2])],
    )
    scan8 = [
        Case(
            f"scan8_compiled_batch_{seq}",
            [
                node(
                    "Scan", ["", "s0", "a", "b"], ["s", "o"], body=body8, num_scan_inputs=2, directions=[0, 1]
                )
            ],
            [vi("s0", [3, 2]), vi("a", [3, seq, 2]), vi("b", [3, seq, 2])],
            [vi("s", [3, 2]), vi("o", [3, seq, 2])],
            {"s0": f32("c8s", 3, 2), "a": f32("c8a", 3, seq, 2), "b": f32("c8b", 3, seq, 2) * 0.5},
            opset=8,
        )
        # 24: a loop over the batch around the unrolled sequence; 40: a loop in a loop
        for seq in (24, 40)
    ]
    return [scan11, *scan8]


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


CASES = (
    if_cases()
    + [nested_case()]
    + loop_cases()
    + scan_cases()
    + optional_cases()
    + compiled_loop_cases()
    + [nested_runtime_case()]
    + loop_if_cases()
    + if_untaken_branch_cases()
    + compiled_scan_cases()
)


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    folder = tmp_path_factory.mktemp("models")
    out = {}
    for case in CASES:
        path = folder / f"{case.key}.onnx"
        path.write_bytes(case.model().SerializeToString())
        out[case.key] = (gd.load_onnx(path, **case.options), case.expected())
    return out


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


def test_runtime_condition_becomes_a_branch(imported):
    g = imported["if_runtime_true"][0]
    assert "where" not in _ops(imported, "if_runtime_true")
    (branch,) = [n for n in g.nodes if n.op == "cond"]
    then, other = branch.attrs["then_branch"], branch.attrs["else_branch"]
    assert "mul" in [n.op for n in then.nodes] and "sub" not in [n.op for n in then.nodes]
    assert "sub" in [n.op for n in other.nodes] and "mul" not in [n.op for n in other.nodes]
    # a value both branches give identically (the outer x, the static shape) is taken as it is
    g = imported["if_data_condition"][0]
    producers = {str(r): g.node(r.node) for r in g.outputs}
    assert producers["shape"].op == "constant"
    assert g.node(producers["same"].inputs[0].node).op == "placeholder"


def test_short_loops_unroll_with_static_slices(imported):
    ops = _ops(imported, "loop_for_carried_and_scans")
    assert ops.count("slice") == 4 and "while_loop" not in ops  # x[i:i+1] per iteration, i known
    assert _ops(imported, "nested_loop_if_loop").count("tanh") == 3
    # a while loop whose condition the importer evaluates (i < 2): three iterations, exactly
    g = imported["loop_while_condition_known"][0]
    assert [g.type_of(r).shape for r in g.outputs if str(r) == "iters"] == [(3,)]


def test_notes_say_which_loops_unrolled_and_which_compiled(imported):
    (note,) = imported["loop_for_carried_and_scans"][0].notes
    assert note == (
        "control flow: node 'Loop_0' (Loop, opset 17): unrolled: 4 iteration(s) known at import x 9 "
        "body node(s) <= 64"
    )
    (note,) = imported["loop_compiled_for"][0].notes
    assert "node 'L' (Loop, opset 17): compiled as a loop (16 iterations known at import" in note
    notes = imported["loop_nested_runtime_lengths"][0].notes
    assert [n.split(": compiled as a loop (")[1][:61] for n in notes] == [
        "the trip count M is only known at run time (model input 'K': ",
        "the trip count M is only known at run time (model input 'M': ",
    ]
    assert "scan outputs of 8 rows" in notes[1] and "at most 8 iterations (loop_bound" in notes[1]
    (note,) = imported["scan11_compiled_axes_and_directions"][0].notes
    assert "(Scan, opset 17): compiled as a loop of 20 iterations" in note
    notes = imported["scan8_compiled_batch_40"][0].notes
    assert [n for n in notes if "compiled as a loop over the batch of 3 (3 x 40 x 2 body nodes" in n]


def test_bodies_a_loop_cannot_hold_unroll_when_the_trip_count_is_known(imported, tmp_path):
    (note,) = imported["loop_slice_by_iteration_unrolled"][0].notes
    assert note.startswith(
        "control flow: node 'S' (Loop, opset 17): unrolled: its body cannot be compiled as a loop (body: "
        "node 'Slice_3' (Slice, opset 17): input 1 (starts) must be a constant (it changes from one loop "
        "iteration to the next)"
    ), note
    (note,) = imported["loop_growing_value_unrolled"][0].notes
    assert "(loop-carried value 0 enters the loop as float32[2] but the body gives float32[4]" in note
    # with a run-time trip count it cannot unroll: refused, saying what to fix
    case = next(c for c in CASES if c.key == "loop_slice_by_iteration_unrolled")
    case = Case("sliced", case.nodes, case.inputs + [vi("M", [], I64)], case.outputs, {}, case.inits[:2])
    with pytest.raises(UnsupportedError) as e:
        gd.load_onnx(_save(tmp_path, case))
    msg = str(e.value)
    assert msg.startswith("node 'S' (Loop, opset 17) body: node 'Slice_3' (Slice, opset 17): input 1"), msg
    assert msg.endswith(
        "; flowc unrolls such a loop when its length is known at import, and the trip count M (model "
        "input 'M': fix it with --value) is only known at run time"
    ), msg


def test_long_and_runtime_loops_are_while_loops(imported):
    for key in (
        "loop_compiled_for",
        "loop_runtime_condition_40",
        "loop_nested_runtime_lengths",
        "if_in_loop",
    ):
        assert _ops(imported, key).count("while_loop") == 1, key
    # the inner loop and the branch live in the outer loop's body
    outer = next(n for n in imported["if_in_loop"][0].nodes if n.op == "while_loop")
    assert "cond" in [n.op for n in outer.attrs["body"].nodes]
    assert "cond" in _ops(imported, "loop_in_if_true")


# ----------------------------------------------------------------------------- run-time trip counts

BOUND = 6  # loop_bound of the run-time trip count model, the rows of its x


@pytest.fixture(scope="module")
def runtime_trip(tmp_path_factory):
    model = runtime_trip_model()
    path = tmp_path_factory.mktemp("trip") / "trip.onnx"
    path.write_bytes(model.SerializeToString())
    return model, gd.load_onnx(path, loop_bound=BOUND)


@pytest.fixture(scope="module")
def runtime_trip_compiled(runtime_trip, compile_graphs):
    return compile_graphs({"trip": runtime_trip[1]})["trip"]


def _trip_feeds(m: int) -> dict:
    return {"x": f32("tx", BOUND, 3), "y0": f32("ty", 1, 3), "M": np.array(m, np.int64)}


def _check_trip(got: dict, want: dict, m: int, what: str) -> None:
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-5, atol=1e-6, err_msg=what)
    assert got["scaled"].shape == (BOUND, 1, 3), what  # loop_bound rows: onnxruntime's, then zeros
    np.testing.assert_allclose(got["scaled"][:m], want["scaled"], rtol=1e-5, atol=1e-6, err_msg=what)
    assert not got["scaled"][m:].any(), what


@pytest.mark.parametrize("m", [0, 1, 4, BOUND])
def test_runtime_trip_count_interpreter(runtime_trip, m):
    model, g = runtime_trip
    got = dict(zip(["y", "scaled"], gd.run(g, _trip_feeds(m), ["y", "scaled"])))
    _check_trip(got, run_onnxruntime(model, _trip_feeds(m)), m, f"M={m} interpreter")


@pytest.mark.c
@pytest.mark.parametrize("m", [0, 1, 4, BOUND])
def test_runtime_trip_count_compiled(runtime_trip, runtime_trip_compiled, m):
    _check_trip(
        runtime_trip_compiled(**_trip_feeds(m)), run_onnxruntime(runtime_trip[0], _trip_feeds(m)), m, f"M={m}"
    )


def test_runtime_trip_count_past_the_bound_is_an_error(runtime_trip):
    with pytest.raises(ExecutionError, match=r"node 'L/while_loop' .*ran past its bound of 6 iterations"):
        gd.run(runtime_trip[1], _trip_feeds(BOUND + 1), ["y"])


@pytest.mark.c
def test_compiled_runtime_trip_count_past_the_bound_is_an_error(runtime_trip_compiled):
    with pytest.raises(ExecutionError, match="a loop reached its compiled bound of iterations"):
        runtime_trip_compiled(**_trip_feeds(BOUND + 1))
    # and the model still runs afterwards
    assert runtime_trip_compiled(**_trip_feeds(2))["scaled"][2:].sum() == 0


def test_runtime_trip_count_with_scans_needs_a_bound(tmp_path):
    path = tmp_path / "trip.onnx"
    path.write_bytes(runtime_trip_model().SerializeToString())
    with pytest.raises(UnsupportedError) as e:
        gd.load_onnx(path)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("node 'L' (Loop, opset 17): the trip count M is only known")
    assert "model input 'M': fix it with --value" in msg
    assert "loop_bound=N" in msg and "--loop-bound N" in msg
    with pytest.raises(gd.errors.FlowcError, match="loop_bound must be a positive integer, got 0"):
        gd.load_onnx(path, loop_bound=0)


def test_loop_code_and_arena_do_not_depend_on_the_trip_count(tmp_path, compile_graphs):
    # the same loop (no scans: its outputs do not grow) run 16 and 2048 times
    body = graph(
        "body",
        [
            node("Cast", ["i"], ["i_f"], to=F),
            node("Mul", ["v_in", "w"], ["a"]),
            node("Add", ["a", "i_f"], ["b"]),
            node("Tanh", ["b"], ["t"]),
            node("Add", ["t", "v_in"], ["v_out"]),
            node("Identity", ["c_in"], ["c_out"]),
        ],
        [vi("i", [], I64), vi("c_in", [], B), vi("v_in", [8])],
        [vi("c_out", [], B), vi("v_out", [8])],
    )
    built = {}
    for trip in (16, 2048):
        case = Case(
            f"long_{trip}",
            [node("Loop", ["M", "", "v"], ["vf"], body=body, name="L")],
            [vi("v", [8])],
            [vi("vf", [8])],
            {"v": f32("lv", 8) * 0.1},
            [const("M", np.int64(trip)), const("w", f32("lw", 8))],
        )
        g = gd.load_onnx(_save(tmp_path, case))
        c = pipeline.run(g, pipeline.Options(name="long_loop"), until="render")
        text = "\n".join(v for v in c.sources.files.values() if isinstance(v, str))
        built[trip] = (c.program.arena_bytes, text.replace(str(trip), "16"), case, g)
        assert f"{trip} iterations known at import" in g.notes[0]
    assert built[16][0] == built[2048][0]
    assert built[16][1] == built[2048][1]
    _, _, case, g = built[2048]
    want = case.expected()["vf"]
    np.testing.assert_allclose(gd.run(g, case.feeds, ["vf"])[0], want, rtol=1e-4, atol=1e-5)
    model = compile_graphs({"long_loop": g})["long_loop"]  # (skips without a C compiler)
    np.testing.assert_allclose(model(**case.feeds)["vf"], want, rtol=1e-4, atol=1e-5)


def test_inspect_prints_the_loop_notes(tmp_path, capsys):
    from codegen.cli import main

    path = tmp_path / "trip.onnx"
    path.write_bytes(runtime_trip_model().SerializeToString())
    assert main(["inspect", str(path), "--loop-bound", "6"]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("control flow: ")]
    assert len(lines) == 1 and "compiled as a loop" in lines[0] and "at most 6 iterations" in lines[0]
    assert main(["inspect", str(path)]) == 1
    assert "--loop-bound N" in capsys.readouterr().err


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


def test_loop_with_runtime_trip_count_compiles(tmp_path):
    case = _counting_loop(m_input=True, cond_from_data=False)
    g = gd.load_onnx(_save(tmp_path, case))  # no scan outputs: no loop_bound needed
    assert [n.op for n in g.nodes].count("while_loop") == 1
    for m in (0, 5, 300):
        feeds = {"v": np.array(1, np.float32), "M": np.array(m, np.int64)}
        assert gd.run(g, feeds, ["vf"])[0] == 1 + m == run_onnxruntime(case.model(), feeds)["vf"]
    # fixed at compile time, the trip count is known at import: a short loop unrolls
    g = gd.load_onnx(_save(tmp_path, case), values={"M": np.array(5)})
    assert "while_loop" not in [n.op for n in g.nodes] and "unrolled: 5 iteration(s)" in g.notes[0]
    assert gd.run(g, {"v": np.float32(1)}, ["vf"])[0] == 6


def test_loop_with_data_dependent_condition_compiles(tmp_path):
    case = _counting_loop(m_input=False, cond_from_data=True)  # v += 1 while v < 10, M = 100
    g = gd.load_onnx(_save(tmp_path, case))
    assert "the body computes its condition at run time; at most 100 iterations" in g.notes[0]
    for v in (-20.5, 3.0, 50.0):
        feeds = {"v": np.array(v, np.float32)}
        assert gd.run(g, feeds, ["vf"])[0] == run_onnxruntime(case.model(), feeds)["vf"]


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
