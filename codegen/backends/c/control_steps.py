"""The C of a loop's and a branch's control steps (codegen/control.py): statements of the run
function itself, not step functions, so that the steps between them run inside a C loop or
branch. Each takes the pointers the frame gives its inputs and outputs (same memory where an
output passes through)."""

from __future__ import annotations

from graphdef.ir import Node, TensorType

from ...render.spelling import c_comment

OPS = ("loop_begin", "loop_check", "loop_end", "branch_begin", "branch_else", "branch_end")


class Statement(str):
    """A line of the run function that is C of its own, not a step call."""


def _copy(dst: str, src: str, t: TensorType) -> list[str]:
    return [] if dst == src or t.nbytes == 0 else [f"memcpy({dst}, {src}, {t.nbytes});"]


def _count(ptr: str) -> str:
    return f"(*(int64_t *)({ptr}))"


def statement(node: Node, args: list[str], in_types: list[TensorType]) -> Statement:
    """The C of control step ``node`` (one line or a few, the loop or branch opened or closed)."""
    ins, outs = args[: len(node.inputs)], args[len(node.inputs) :]
    a = node.attrs
    name = c_comment(node.name)
    lines: list[str] = []
    if node.op == "loop_begin":
        n = a["vars"]
        most = a["max_iterations"]
        lines.append(
            f"/* loop {name}: "
            + (f"at most {most} iterations */" if most >= 0 else "until its condition fails */")
        )
        for k in range(n):
            lines += _copy(outs[k], ins[k], node.outputs[k])
        for j, t in enumerate(node.outputs[n + 1 :]):
            if t.nbytes:
                lines.append(f"memset({outs[n + 1 + j]}, 0, {t.nbytes});")
        lines.append(f"{_count(outs[n])} = 0;")
        lines.append("for (;;) {")
    elif node.op == "loop_check":
        c = a["carried"]
        count = ins[a["vars"]]
        lines.append(f"if (!*(const unsigned char *)({ins[c]})) break;")
        if a["trip"]:
            lines.append(f"if ({_count(count)} >= *(const int64_t *)({ins[c + 1]})) break;")
        if a["max_iterations"] >= 0:
            stop = "return FC_ERR_BOUND;" if a["bound"] == "error" else "break;"
            lines.append(f"if ({_count(count)} >= {a['max_iterations']}) {stop}")
    elif node.op == "loop_end":
        c, n = a["carried"], a["vars"]
        scans = c - n - 1
        nexts, scanned = ins[c : c + n], ins[c + n :]
        for j in range(scans):  # first: a scanned value may be a carried one, about to change
            t = in_types[c + n + j]
            if t.nbytes:
                row = f"(unsigned char *)({ins[n + 1 + j]}) + (size_t){_count(ins[n])} * {t.nbytes}"
                lines.append(f"memcpy({row}, {scanned[j]}, {t.nbytes});")
        for k in range(n):
            lines += _copy(ins[k], nexts[k], node.outputs[k])
        lines.append(f"++{_count(ins[n])};")
        lines.append(f"}} /* loop {name} */")
    elif node.op == "branch_begin":
        lines.append(f"/* branch {name} */")
        lines.append(f"if (*(const unsigned char *)({ins[0]})) {{")
    elif node.op in ("branch_else", "branch_end"):
        c = a["carried"]
        for k in range(c):
            lines += _copy(ins[k], ins[c + k], node.outputs[k])
        lines.append("} else {" if node.op == "branch_else" else f"}} /* {name} */")
    else:
        raise ValueError(node.op)
    return Statement("\n".join(lines))


def host_statement(node: Node, args: list[str], in_types: list[TensorType], name: str, depth: int) -> str:
    """The host C of control step ``node`` in a CUDA model's launches (templates/cuda/
    model.cu.j2 ``<name>_enqueue``, on stream ``s``): copies on the device in stream order, a
    loop's count kept on the host (``fc_it[depth]``) and written to its device tensor each
    iteration, a condition, predicate or trip count read back to the host (the stream waited
    for). A model with loops or branches is therefore never captured into a CUDA Graph."""
    ins, outs = args[: len(node.inputs)], args[len(node.inputs) :]
    a = node.attrs
    NAME = name.upper()
    it = f"fc_it[{depth}]"
    lines: list[str] = []

    def copy(dst: str, src: str, nbytes: int) -> None:
        if dst != src and nbytes:
            lines.append(f"cudaMemcpyAsync({dst}, {src}, {nbytes}, cudaMemcpyDeviceToDevice, s);")

    def read(dst: str, src: str, nbytes: int, what: str) -> None:
        lines.append(
            f"if ((e = cudaMemcpyAsync({dst}, {src}, {nbytes}, cudaMemcpyDeviceToHost, s)) != cudaSuccess || "
            f"(e = cudaStreamSynchronize(s)) != cudaSuccess) return {name}_fail(ctx, {NAME}_ERR_CUDA, "
            f'"cannot read {what}", e);'
        )

    count_write = f"cudaMemcpyAsync({{}}, &{it}, sizeof(long long), cudaMemcpyHostToDevice, s);"
    if node.op == "loop_begin":
        n = a["vars"]
        lines.append(f"/* loop {c_comment(node.name)} (on the host) */")
        for k in range(n):
            copy(outs[k], ins[k], node.outputs[k].nbytes)
        for j, t in enumerate(node.outputs[n + 1 :]):
            if t.nbytes:
                lines.append(f"cudaMemsetAsync({outs[n + 1 + j]}, 0, {t.nbytes}, s);")
        lines.append(f"{it} = 0;")
        lines.append(count_write.format(outs[n]))
        lines.append("for (;;) {")
    elif node.op == "loop_check":
        c = a["carried"]
        read("&fc_flag", ins[c], 1, "a loop's condition")
        lines.append("if (!fc_flag) break;")
        if a["trip"]:
            read("&fc_trip", ins[c + 1], 8, "a loop's trip count")
            lines.append(f"if ({it} >= fc_trip) break;")
        if a["max_iterations"] >= 0:
            stop = (
                f"return {name}_fail(ctx, {NAME}_ERR_BOUND, "
                '"a loop reached its compiled bound of iterations", cudaSuccess);'
                if a["bound"] == "error"
                else "break;"
            )
            lines.append(f"if ({it} >= {a['max_iterations']}) {stop}")
    elif node.op == "loop_end":
        c, n = a["carried"], a["vars"]
        for j in range(c - n - 1):
            t = in_types[c + n + j]
            if t.nbytes:
                row = f"(unsigned char *)({ins[n + 1 + j]}) + (size_t){it} * {t.nbytes}"
                lines.append(
                    f"cudaMemcpyAsync({row}, {ins[c + n + j]}, {t.nbytes}, cudaMemcpyDeviceToDevice, s);"
                )
        for k in range(n):
            copy(ins[k], ins[c + k], node.outputs[k].nbytes)
        lines.append(f"++{it};")
        lines.append(count_write.format(ins[n]))
        lines.append(f"}} /* loop {c_comment(node.name)} */")
    elif node.op == "branch_begin":
        lines.append(f"/* branch {c_comment(node.name)} (on the host) */")
        read("&fc_flag", ins[0], 1, "a branch's predicate")
        lines.append("if (fc_flag) {")
    else:
        c = a["carried"]
        for k in range(c):
            copy(ins[k], ins[c + k], node.outputs[k].nbytes)
        lines.append("} else {" if node.op == "branch_else" else f"}} /* {c_comment(node.name)} */")
    return "\n".join("    " + line for line in lines) + "\n"
