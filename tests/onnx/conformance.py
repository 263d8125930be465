"""The ONNX backend node tests through flowc's generated C.

    python tests/onnx/conformance.py [--cache DIR] [--only SUBSTR] [--report FILE] [--jobs N]

Generates every node test case of the installed onnx package (models and input/output
protobufs, as onnx.backend.test.cmd_tools writes them) into a cache, imports each model with
flowc, compiles the models in batches into shared libraries, runs them on the case's inputs
and compares with the expected outputs (rtol 1e-3, atol 1e-7, like onnx's backend runner).
Writes a per-op table to tests/onnx/CONFORMANCE.md and the per-case results to a JSON file.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
import traceback
from collections import Counter, defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
HERE = Path(__file__).resolve().parent
REPORT = HERE / "CONFORMANCE.md"
RESULTS = HERE / "conformance.json"
BATCH = 64


def default_cache() -> Path:
    return Path(os.environ.get("FLOWC_CACHE") or Path.home() / ".cache" / "flowc") / "onnx-node-tests"


def generate(cache: Path) -> list[Path]:
    """Write every node test case (model.onnx + test_data_set_*/) under cache; return the folders."""
    import onnx
    from onnx import numpy_helper
    from onnx.backend.test.case.node import collect_testcases

    stamp = cache / f"onnx-{onnx.__version__}.done"
    if not stamp.exists():
        cases = collect_testcases(None)
        for case in cases:
            folder = cache / case.name
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "model.onnx").write_bytes(case.model.SerializeToString())
            for i, (inputs, outputs) in enumerate(case.data_sets):
                d = folder / f"test_data_set_{i}"
                d.mkdir(exist_ok=True)
                for kind, values, infos in (
                    ("input", inputs, case.model.graph.input),
                    ("output", outputs, case.model.graph.output),
                ):
                    for j, v in enumerate(values):
                        info = infos[j]
                        if not info.type.HasField("tensor_type"):
                            (d / f"{kind}_{j}.pb").write_bytes(b"")  # sequences/maps: unsupported anyway
                            continue
                        t = (
                            v
                            if isinstance(v, onnx.TensorProto)
                            else numpy_helper.from_array(np.asarray(v), info.name)
                        )
                        (d / f"{kind}_{j}.pb").write_bytes(t.SerializeToString())
            (folder / "case.json").write_text(
                json.dumps(
                    {"rtol": getattr(case, "rtol", 1e-3) or 1e-3, "atol": getattr(case, "atol", 1e-7) or 1e-7}
                )
            )
        stamp.write_text(str(len(cases)))
    return sorted(p for p in cache.iterdir() if p.is_dir() and (p / "model.onnx").exists())


def _main_op(model) -> str:
    ops = [n.op_type for n in model.graph.node]
    counts = Counter(ops)
    # the op under test: the rarest non-trivial op of the model, else its first op
    for op in ops:
        if (
            op not in ("Constant", "Identity", "Cast", "Shape", "Reshape", "Unsqueeze", "Squeeze")
            and counts[op] >= 1
        ):
            return op
    return ops[0] if ops else "?"


def _load_case(folder: Path):
    """(model, [(inputs, outputs)]) with numpy arrays; raises on non-tensor data."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    sets = []
    for d in sorted(folder.glob("test_data_set_*")):
        ins, outs = [], []
        for kind, acc in (("input", ins), ("output", outs)):
            for f in sorted(d.glob(f"{kind}_*.pb"), key=lambda p: int(p.stem.split("_")[1])):
                data = f.read_bytes()
                if not data:
                    acc.append(None)
                    continue
                t = onnx.TensorProto()
                t.ParseFromString(data)
                acc.append(numpy_helper.to_array(t))
        sets.append((ins, outs))
    return model, sets


def import_case(folder: Path) -> dict:
    """Import one case: a result dict with status 'imported' (and the graph), or 'unsupported'/'crash'."""
    import graphdef as gd
    from graphdef.errors import FlowcError

    name = folder.name
    try:
        model, sets = _load_case(folder)
    except Exception as e:
        return {"case": name, "op": "?", "status": "unsupported", "reason": f"unreadable test data: {e}"}
    op = _main_op(model)
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
    base = {"case": name, "op": op, "opset": opset}
    if any(v is None for ins, outs in sets for v in ins + outs):
        return {**base, "status": "unsupported", "reason": "sequence, map or optional values are not tensors"}
    inputs = [vi.name for vi in model.graph.input if vi.name not in {t.name for t in model.graph.initializer}]
    shapes = {n: a.shape for n, a in zip(inputs, sets[0][0])}
    fixed: dict = {}
    given = dict(zip(inputs, sets[0][0]))
    try:
        while True:
            try:
                g = gd.load_onnx(folder / "model.onnx", shapes=shapes, values=fixed)
                break
            except FlowcError as e:
                # an input that decides a shape (axes, pads, sizes, depth...) given as a graph
                # input: compile for the test's value, as a user fixes it with --value
                m = re.search(r"model input '([^']+)': fix it with --value", str(e))
                if not m or m.group(1) in fixed or m.group(1) not in given or len(sets) != 1:
                    raise
                fixed[m.group(1)] = given[m.group(1)]
    except FlowcError as e:
        return {**base, "status": "unsupported", "reason": str(e)}
    except Exception as e:  # a crash: must not happen
        return {
            **base,
            "status": "crash",
            "reason": f"{type(e).__name__}: {e}",
            "trace": traceback.format_exc(limit=4),
        }
    if fixed:
        keep = [i for i, n in enumerate(inputs) if n not in fixed]
        sets = [([ins[i] for i in keep], outs) for ins, outs in sets]
        inputs = [inputs[i] for i in keep]
        base["fixed"] = sorted(fixed)
    return {**base, "status": "imported", "graph": g, "inputs": inputs, "sets": sets}


def _compare(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> str | None:
    if got.shape != want.shape:
        return f"shape {got.shape} != expected {want.shape}"
    if want.dtype.kind in "fc":
        if got.dtype != want.dtype:
            return f"dtype {got.dtype} != expected {want.dtype}"
        try:
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
        except AssertionError:
            diff = np.nanmax(np.abs(got.astype(np.float64) - want.astype(np.float64))) if got.size else 0
            return f"values differ (max abs diff {diff:.3g})"
        return None
    if got.dtype != want.dtype and not (want.dtype == np.bool_ and got.dtype == np.bool_):
        return f"dtype {got.dtype} != expected {want.dtype}"
    return None if np.array_equal(got, want) else "values differ"


def run_batch(folders: list[Path], compile_many=None) -> list[dict]:
    """Import, compile (one library for the batch) and run a batch of cases; ``compile_many``:
    how (default: codegen.compile_many, C)."""
    import codegen
    from graphdef.errors import FlowcError

    compile_many = compile_many or codegen.compile_many
    results = [import_case(f) for f in folders]
    ok = [r for r in results if r["status"] == "imported"]
    models = {}
    if ok:
        try:
            built = compile_many([(f"case{i}", r["graph"]) for i, r in enumerate(ok)])
            models = {id(r): m for r, m in zip(ok, built)}
        except FlowcError:
            for i, r in enumerate(ok):  # find the culprit(s): build alone
                try:
                    models[id(r)] = compile_many([(f"case{i}", r["graph"])])[0]
                except FlowcError as e:
                    r.update(status="failed", reason=f"build: {str(e)[:300]}")
                except Exception as e:
                    r.update(status="crash", reason=f"{type(e).__name__}: {e}")
        except Exception as e:
            for r in ok:
                r.update(status="crash", reason=f"{type(e).__name__}: {e}")
    for r in ok:
        if r["status"] != "imported":
            continue
        m = models[id(r)]
        tol = json.loads((folders[0].parent / r["case"] / "case.json").read_text())
        status, reason = "passed", ""
        for ins, outs in r["sets"]:
            try:
                got = m.run(dict(zip(r["inputs"], ins)))
            except FlowcError as e:
                status, reason = "failed", f"run: {e}"
                break
            for spec, want in zip(m.outputs, outs):
                problem = _compare(got[spec.name], np.asarray(want), tol["rtol"], tol["atol"])
                if problem:
                    status, reason = "failed", f"output '{spec.name}': {problem}"
                    break
            if status != "passed":
                break
        r.update(status=status, reason=reason)
    for r in results:
        for k in ("graph", "sets", "inputs"):
            r.pop(k, None)
    return results


def write_report(results: list[dict], path: Path, onnx_version: str, seconds: float) -> None:
    by_op: dict[str, Counter] = defaultdict(Counter)
    reasons: dict[str, Counter] = defaultdict(Counter)
    for r in results:
        by_op[r["op"]][r["status"]] += 1
        if r["status"] != "passed":
            reasons[r["op"]][_short(r.get("reason", ""))] += 1
    total = Counter(r["status"] for r in results)
    fixed = sum(1 for r in results if r["status"] == "passed" and r.get("fixed"))
    lines = [
        "# ONNX backend node tests through flowc's generated C",
        "",
        f"onnx {onnx_version}: {len(results)} cases; **passed {total['passed']}**, failed {total['failed']}, "
        f"unsupported {total['unsupported']}, crashed {total['crash']}. Run time {seconds:.0f} s. "
        "(onnxruntime 1.31 passes 1,375 of these cases on this machine.)",
        "",
        "Generated by `make conformance` (tests/onnx/conformance.py). Each case is imported with "
        "`gd.load_onnx`, compiled to C (many cases per shared library), run, and compared with the "
        "expected outputs (rtol 1e-3, atol 1e-7). Unsupported: flowc refuses the model with a "
        "FlowcError naming the op, opset and reason.",
        "",
        f"{fixed} of the passed cases feed a shape-deciding value (reduction axes, pads, sizes ...) "
        "as a graph input; flowc compiles static shapes, so these were compiled with that input "
        "fixed to the test's value (`values=` of `load_onnx`, `--value` of the CLI).",
        "",
        "| op | cases | passed | failed | unsupported | main reason when not passed |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for op in sorted(by_op):
        c = by_op[op]
        why = reasons[op].most_common(1)[0][0] if reasons[op] else ""
        lines.append(
            f"| {op} | {sum(c.values())} | {c['passed']} | {c['failed'] + c['crash']} | "
            f"{c['unsupported']} | {why} |"
        )
    path.write_text("\n".join(lines) + "\n")


def _short(reason: str) -> str:
    reason = reason.replace("|", "/").replace("\n", " ")
    for cut in ("unsupported ops: ",):
        if cut in reason:
            reason = reason[reason.index(cut) :]
    if ": " in reason and reason.startswith("node '"):
        reason = reason.split("): ", 1)[-1]
    return reason[:110]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", type=Path, default=None)
    ap.add_argument("--only", default="", help="run cases whose name contains this")
    ap.add_argument("--report", type=Path, default=REPORT)
    ap.add_argument("--results", type=Path, default=RESULTS)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args(argv)
    import onnx

    t0 = time.perf_counter()
    folders = generate(args.cache or default_cache())
    if args.only:
        folders = [f for f in folders if args.only in f.name]
    batches = [folders[i : i + BATCH] for i in range(0, len(folders), BATCH)]
    results: list[dict] = []
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for out in pool.map(run_batch, batches):
            results.extend(out)
            print(f"{len(results)}/{len(folders)} cases", file=sys.stderr)
    seconds = time.perf_counter() - t0
    total = Counter(r["status"] for r in results)
    print(
        f"passed {total['passed']}, failed {total['failed']}, unsupported {total['unsupported']}, "
        f"crashed {total['crash']} of {len(results)} in {seconds:.0f} s"
    )
    if not args.only:
        write_report(results, args.report, onnx.__version__, seconds)
        args.results.write_text(json.dumps(sorted(results, key=lambda r: r["case"]), indent=0) + "\n")
    return 0 if total["crash"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
