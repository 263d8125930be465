"""Real PyTorch models, exported to ONNX by both torch exporters, imported and compiled by flowc.

Each model is defined here at a small size (fixed seeds, eval mode) and exported three ways:
``torch.onnx.export(dynamo=False)`` (TorchScript, opset 17, dynamic batch/sequence axes),
``dynamo=True`` (torch.export + onnxscript, opset 20, static) and that same dynamo export
before onnxscript's optimizer (``optimize=False``). Each file is imported with
``gd.load_onnx`` and compiled to C; the compiled model (every exporter) and the numpy
interpreter (once per model) are compared with onnxruntime on the same random inputs: max abs
error within 1e-4 of the output's scale (max |onnxruntime output|). All selected models are
built into one shared library (``codegen.compile_many``) to keep the file fast (~30 s, most of
it in torch's exporters). Last, hand-built graphs check converter details exporters rely on.
"""

from __future__ import annotations

import io
import traceback
import warnings
from contextlib import redirect_stderr, redirect_stdout

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")  # torch.onnx.export(dynamo=True) needs it

import graphdef as gd  # noqa: E402
from graphdef.errors import FlowcError  # noqa: E402

nn = torch.nn
F = torch.nn.functional

RTOL = 1e-4  # of max |onnxruntime output|
ORT_MAX_IR = 13  # the newest IR version onnxruntime 1.31 reads; onnx 1.23 may write 14

# ----------------------------------------------------------------------------- models


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 48), nn.GELU(),
                                 nn.Linear(48, 10))

    def forward(self, x):
        return torch.softmax(self.net(x), dim=-1)


class LeNet5(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 6, 5, padding=2)
        self.c2 = nn.Conv2d(6, 16, 5)
        self.f1, self.f2, self.f3 = nn.Linear(400, 120), nn.Linear(120, 84), nn.Linear(84, 10)

    def forward(self, x):
        x = F.max_pool2d(torch.tanh(self.c1(x)), 2)
        x = F.avg_pool2d(F.relu(self.c2(x)), 2)
        x = torch.flatten(x, 1)
        return self.f3(F.relu(self.f2(F.relu(self.f1(x)))))


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.down is None else self.down(x)))


class ResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.blocks = nn.Sequential(BasicBlock(16, 16, 1), BasicBlock(16, 32, 2), BasicBlock(32, 32, 1),
                                    BasicBlock(32, 64, 2))
        self.final_bn = nn.BatchNorm2d(64)  # after a ReLU: exporters cannot fold it into a Conv
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        x = self.final_bn(self.blocks(self.stem(x)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class SqueezeExcite(nn.Module):
    def __init__(self, c, r=4):
        super().__init__()
        self.fc1, self.fc2 = nn.Conv2d(c, c // r, 1), nn.Conv2d(c // r, c, 1)

    def forward(self, x):
        s = F.adaptive_avg_pool2d(x, 1)
        return x * F.hardsigmoid(self.fc2(F.relu(self.fc1(s))))


class InvertedResidual(nn.Module):
    def __init__(self, cin, cexp, cout, k, stride, se, act):
        super().__init__()
        self.use_res = stride == 1 and cin == cout
        layers = []
        if cexp != cin:
            layers += [nn.Conv2d(cin, cexp, 1, bias=False), nn.BatchNorm2d(cexp), act()]
        depthwise = nn.Conv2d(cexp, cexp, k, stride, k // 2, groups=cexp, bias=False)
        layers += [depthwise, nn.BatchNorm2d(cexp), act()]
        if se:
            layers.append(SqueezeExcite(cexp))
        layers += [nn.Conv2d(cexp, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.block = nn.Sequential(*layers)

    def forward(self, x):
        y = self.block(x)
        return x + y if self.use_res else y


class HSwish(nn.Module):
    """The hand-written hard swish of many MobileNetV3 re-implementations: x * relu6(x + 3) / 6."""

    def forward(self, x):
        return x * F.relu6(x + 3.0) / 6.0


class MobileNetV3(nn.Module):
    def __init__(self):
        super().__init__()
        hs, re = nn.Hardswish, nn.ReLU
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), hs())
        self.blocks = nn.Sequential(
            InvertedResidual(16, 16, 16, 3, 2, True, re),
            InvertedResidual(16, 48, 24, 3, 2, False, re),
            InvertedResidual(24, 72, 24, 3, 1, False, re),
            InvertedResidual(24, 96, 40, 5, 2, True, hs),
            InvertedResidual(40, 120, 40, 5, 1, True, hs),
        )
        self.last = nn.Sequential(nn.Conv2d(40, 96, 1, bias=False), nn.BatchNorm2d(96), hs())
        self.head = nn.Sequential(nn.Linear(96, 64), HSwish(), nn.Dropout(0.2), nn.Linear(64, 10))

    def forward(self, x):
        x = self.last(self.blocks(self.stem(x)))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class Transformer(nn.Module):
    """Token embeddings + learned positions + 2 pre-norm GELU encoder layers, with a key padding mask."""

    def __init__(self, vocab=50, seq=12, d=32):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(1, seq, d) * 0.1)
        layer = nn.TransformerEncoderLayer(d, nhead=4, dim_feedforward=64, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.out = nn.Linear(d, vocab)

    def forward(self, ids, pad):
        h = self.embed(ids) + self.pos
        h = self.encoder(h, src_key_padding_mask=pad)
        return self.out(self.norm(h))


class CausalSelfAttention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for z in self.qkv(x).chunk(3, dim=-1))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class GPT(nn.Module):
    """A hand-written decoder: causal attention, tanh-GELU MLP, positions from arange, tied
    embeddings, logits of the last token only."""

    def __init__(self, vocab=64, seq=16, d=32, heads=4, layers=2):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(
            nn.ModuleDict({"ln1": nn.LayerNorm(d), "attn": CausalSelfAttention(d, heads),
                           "ln2": nn.LayerNorm(d),
                           "mlp": nn.Sequential(nn.Linear(d, 4 * d), nn.GELU("tanh"), nn.Linear(4 * d, d))})
            for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)

    def forward(self, ids):
        h = self.tok(ids) + self.pos(torch.arange(ids.shape[1]))
        for blk in self.blocks:
            h = h + blk["attn"](blk["ln1"](h))
            h = h + blk["mlp"](blk["ln2"](h))
        return self.ln_f(h)[:, -1] @ self.tok.weight.t()


class UNet(nn.Module):
    def __init__(self):
        super().__init__()

        def block(cin, cout):
            return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(),
                                 nn.Conv2d(cout, cout, 3, padding=1), nn.ReLU())

        self.enc1, self.enc2, self.mid = block(3, 8), block(8, 16), block(16, 32)
        self.up2 = nn.ConvTranspose2d(32, 16, 2, stride=2)
        self.dec2 = block(32, 16)
        self.reduce1 = nn.Conv2d(16, 8, 1)
        self.dec1 = block(16, 8)
        self.head = nn.Conv2d(8, 2, 1)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(F.max_pool2d(e1, 2))
        m = self.mid(F.max_pool2d(e2, 2))
        d2 = self.dec2(torch.cat([self.up2(m), e2], dim=1))
        u1 = F.interpolate(self.reduce1(d2), scale_factor=2, mode="bilinear", align_corners=False)
        d1 = self.dec1(torch.cat([u1, e1], dim=1))
        return self.head(d1)


class RNNTagger(nn.Module):
    def __init__(self, cell, vocab=40, emb=16, hidden=24, tags=7):
        super().__init__()
        self.embed = nn.Embedding(vocab, emb)
        if cell == "gru":
            self.rnn = nn.GRU(emb, hidden, batch_first=True, bidirectional=True)
        else:
            self.rnn = nn.LSTM(emb, hidden, num_layers=2, batch_first=True, bidirectional=True)
        self.out = nn.Linear(2 * hidden, tags)

    def forward(self, ids):
        h, _ = self.rnn(self.embed(ids))
        return self.out(h)


def _randomize_norm_stats(model: nn.Module, gen: torch.Generator) -> None:
    """Non-trivial running statistics and affine parameters, so batch norm is really tested."""
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            n = m.num_features
            m.running_mean.copy_(torch.randn(n, generator=gen) * 0.1)
            m.running_var.copy_(torch.rand(n, generator=gen) * 0.5 + 0.75)
            m.weight.data.copy_(torch.rand(n, generator=gen) * 0.5 + 0.75)
            m.bias.data.copy_(torch.randn(n, generator=gen) * 0.1)


def _ids(rng, shape, vocab):
    return rng.integers(0, vocab, shape).astype(np.int64)


def _transformer_inputs(rng):
    pad = np.zeros((2, 12), bool)
    pad[0, 9:] = True  # the first sequence has 3 padding tokens at its end
    return {"ids": _ids(rng, (2, 12), 50), "pad": pad}


# name -> (constructor, inputs from a numpy Generator)
MODELS = {
    "mlp": (MLP, lambda rng: {"x": rng.standard_normal((4, 32)).astype(np.float32)}),
    "lenet5": (LeNet5, lambda rng: {"x": rng.standard_normal((2, 1, 28, 28)).astype(np.float32)}),
    "resnet": (ResNet, lambda rng: {"x": rng.standard_normal((2, 3, 32, 32)).astype(np.float32)}),
    "mobilenetv3": (MobileNetV3, lambda rng: {"x": rng.standard_normal((2, 3, 32, 32)).astype(np.float32)}),
    "transformer": (Transformer, _transformer_inputs),
    "gpt": (GPT, lambda rng: {"ids": _ids(rng, (2, 16), 64)}),
    "unet": (UNet, lambda rng: {"x": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)}),
    "gru_tagger": (lambda: RNNTagger("gru"), lambda rng: {"ids": _ids(rng, (2, 10), 40)}),
    "lstm_tagger": (lambda: RNNTagger("lstm"), lambda rng: {"ids": _ids(rng, (2, 10), 40)}),
}
# torchscript: dynamo=False, opset 17; dynamo: dynamo=True as it comes (optimized by onnxscript);
# dynamo_unoptimized: the same export before that optimizer runs (optimize=False): CastLike of
# constants, SplitToSequence/SequenceAt, unfused batch norm, long shape arithmetic
EXPORTERS = ("torchscript", "dynamo", "dynamo_unoptimized")


def make_model(name: str):
    """The model in eval mode (seeded weights) and its inputs as numpy arrays."""
    ctor, inputs = MODELS[name]
    torch.manual_seed(0)
    model = ctor()
    with torch.no_grad():
        _randomize_norm_stats(model, torch.Generator().manual_seed(1))
    model.eval()
    return model, inputs(np.random.default_rng(2))


# ----------------------------------------------------------------------------- export


def export(model, feeds: dict, folder, name: str) -> dict:
    """Export with every exporter into ``folder``; returns the paths by exporter.

    The TorchScript export declares the batch axis (and the sequence axis of token inputs)
    dynamic, as deployment exports usually do, so flowc fixes them with ``shapes=`` and
    evaluates the exporter's shape arithmetic at import; the dynamo export is static. Files
    are made readable by onnxruntime 1.31 (IR version <= 13).
    """
    args = tuple(torch.from_numpy(v) for v in feeds.values())
    paths = {e: folder / f"{name}_{e}.onnx" for e in EXPORTERS}
    names = {"input_names": list(feeds), "output_names": ["out"]}
    quiet = io.StringIO()
    fastpath = torch.backends.mha.get_fastpath_enabled()
    with warnings.catch_warnings(), redirect_stdout(quiet), redirect_stderr(quiet), torch.no_grad():
        warnings.simplefilter("ignore")
        # the fused inference kernel (aten::_transformer_encoder_layer_fwd) has no ONNX export
        torch.backends.mha.set_fastpath_enabled(False)
        try:
            dynamic = {k: {0: "batch"} if v.dtype == np.float32 else {0: "batch", 1: "seq"}
                       for k, v in feeds.items()}
            torch.onnx.export(model, args, str(paths["torchscript"]), opset_version=17, dynamic_axes=dynamic,
                              dynamo=False, **names)
            program = torch.onnx.export(model, args, dynamo=True, optimize=False, **names)
            program.save(str(paths["dynamo_unoptimized"]))
            program.optimize()  # what optimize=True (the default) does
            program.save(str(paths["dynamo"]))
        finally:
            torch.backends.mha.set_fastpath_enabled(fastpath)
    for path in paths.values():
        proto = onnx.load(str(path))
        if proto.ir_version > ORT_MAX_IR:
            proto.ir_version = ORT_MAX_IR
            onnx.save(proto, str(path))
    return paths


# ----------------------------------------------------------------------------- cases


class Case:
    """One model x exporter: its file, inputs, onnxruntime's outputs and flowc's graph."""

    def __init__(self, name: str, exporter: str, path, feeds: dict):
        self.name, self.exporter, self.path, self.feeds = name, exporter, path, feeds
        options = ort.SessionOptions()
        options.log_severity_level = 3  # no warnings about CastLike it cannot constant-fold
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        self.expected = dict(zip(names, session.run(None, feeds)))
        try:
            shapes = {k: v.shape for k, v in feeds.items()}
            self.graph, self.error = gd.load_onnx(path, shapes=shapes), None
        except FlowcError as e:  # reported by the tests that need the graph
            self.graph, self.error = None, e

    @property
    def key(self) -> str:
        return f"{self.name}_{self.exporter}"

    def check_graph(self) -> gd.Graph:
        if self.error is not None:
            error = f"{type(self.error).__name__}: {self.error}"
            pytest.fail(f"{self.key}: import failed: {error}", pytrace=False)
        return self.graph


def assert_close(got: dict, expected: dict, what: str) -> float:
    """Every output within RTOL of its scale; returns the worst relative error."""
    assert sorted(got) == sorted(expected), f"{what}: outputs {sorted(got)} != {sorted(expected)}"
    worst = 0.0
    for name, want in expected.items():
        have = got[name]
        assert have.shape == want.shape and have.dtype == want.dtype, \
            f"{what} output '{name}': {have.dtype}{have.shape} != {want.dtype}{want.shape}"
        scale = max(float(np.abs(want).max()), 1e-30)
        err = float(np.abs(have.astype(np.float64) - want.astype(np.float64)).max()) / scale
        assert err <= RTOL, \
            f"{what} output '{name}': max abs error {err * scale:.3g} = {err:.3g} x its scale {scale:.3g}"
        worst = max(worst, err)
    return worst


CASES = [(m, e) for m in MODELS for e in EXPORTERS]


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    """``cases(model, exporter) -> Case``; a model is exported (by every exporter) on first use."""
    folder = tmp_path_factory.mktemp("models")
    made: dict[tuple[str, str], Case] = {}

    def get(name: str, exporter: str) -> Case:
        if (name, exporter) not in made:
            model, feeds = make_model(name)
            for e, path in export(model, feeds, folder, name).items():
                made[(name, e)] = Case(name, e, path, feeds)
        return made[(name, exporter)]

    return get


def _selected_cases(request) -> list[tuple[str, str]]:
    """The (model, exporter) pairs of this module's tests selected in this session, in CASES order."""
    found = set()
    for item in request.session.items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if getattr(item, "module", None) is request.module and "exporter" in params:
            found.add((params["model"], params["exporter"]))
    return sorted(found, key=CASES.index)


@pytest.fixture(scope="module")
def compiled(request, cases, tmp_path_factory):
    """Compiled models (or the error compiling them) by case key: every selected case that
    imports, built into one shared library, in a build cache private to this session."""
    import codegen

    try:
        codegen.backends.c.toolchain.find_cc()
    except FlowcError as e:
        pytest.skip(str(e))
    ok = [cases(*c) for c in _selected_cases(request) if cases(*c).graph is not None]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FLOWC_CACHE", str(tmp_path_factory.mktemp("flowc-cache")))
        try:
            built = codegen.compile_many([(c.key, c.graph) for c in ok])
        except Exception:  # build them one by one instead, so that each failure names its model
            built = [_compile_one(codegen, c) for c in ok]
        return {c.key: m for c, m in zip(ok, built)}


def _compile_one(codegen, case):
    try:
        return codegen.compile(case.graph, name=case.key)
    except Exception as e:  # reported by the case's own test
        return e


# ----------------------------------------------------------------------------- tests


@pytest.mark.c
@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize("model", list(MODELS))
def test_compiled_matches_onnxruntime(model, exporter, cases, compiled, request):
    case = cases(model, exporter)
    case.check_graph()
    m = compiled[case.key]
    if isinstance(m, Exception):
        trace = "".join(traceback.format_exception(m, chain=False))
        pytest.fail(f"{case.key}: compiling failed:\n{trace}", pytrace=False)
    err = assert_close(m(**case.feeds), case.expected, f"{case.key} compiled")
    request.node.user_properties.append(("max_error", err))  # e.g. --junitxml with junit_family=xunit1


@pytest.mark.parametrize("model", list(MODELS))
def test_interpreter_matches_onnxruntime(model, cases, request):
    case = cases(model, "dynamo")
    g = case.check_graph()
    outs = [str(o) for o in g.outputs]
    got = dict(zip(outs, gd.run(g, case.feeds, outs)))
    err = assert_close(got, case.expected, f"{case.key} interpreter")
    request.node.user_properties.append(("max_error", err))


# ----------------------------------------------------------------------------- exporter patterns
# Hand-built graphs for converter behaviour that the models above do not reach but exporters
# write: ConvTranspose with output_shape (tf2onnx, Keras), Resize-10 (opset 10 exports), the
# sequence ops of unoptimized dynamo exports beyond split/at. Checked against onnxruntime.


def _pattern_model(path, nodes, inputs: dict, inits: dict, opset: int):
    from onnx import helper, numpy_helper

    def info(name, a):
        return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)

    graph = helper.make_graph(nodes, "pattern", [info(k, v) for k, v in inputs.items()],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def _patterns():
    from onnx.helper import make_node as n

    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 2, 3, 5)).astype(np.float32)
    w = rng.standard_normal((2, 3, 3, 3)).astype(np.float32)
    seq = rng.standard_normal((2, 7, 3)).astype(np.float32)
    i64 = lambda v: np.asarray(v, np.int64)  # noqa: E731
    out = {}
    for auto in ("NOTSET", "SAME_UPPER", "SAME_LOWER"):
        for shape in ((6, 10), (7, 10), (7, 9)):  # odd totals: the extra pixel first, but for SAME_UPPER
            attrs = {"strides": [2, 2], "output_shape": list(shape)}
            if auto != "NOTSET":
                attrs["auto_pad"] = auto
            out[f"conv_transpose_{auto}_{shape[0]}x{shape[1]}"] = (
                [n("ConvTranspose", ["x", "w"], ["y"], **attrs)], {"x": x}, {"w": w}, 17)
    for scales in ((1, 1, 0.6, 0.4), (1, 1, 2.5, 0.6), (1, 1, 0.7, 1.5), (1, 1, 1.7, 2.5)):
        for mode in ("nearest", "linear"):  # nearest: floor on enlarged axes, ceil on shrunk ones
            out[f"resize10_{mode}_{scales[2]}_{scales[3]}"] = (
                [n("Resize", ["x", "s"], ["y"], mode=mode)], {"x": x}, {"s": np.float32(scales)}, 10)
    small = rng.standard_normal((1, 2, 2, 4)).astype(np.float32)
    for mode in ("nearest", "linear"):  # sizes (1, 3), not smaller: scale 0.75, sizes rounded to (2, 3)
        out[f"resize18_{mode}_keep_aspect_not_smaller"] = (
            [n("Resize", ["x", "", "", "sizes"], ["y"], mode=mode, axes=[2, 3],
               keep_aspect_ratio_policy="not_smaller")], {"x": small}, {"sizes": i64([1, 3])}, 18)
    out["unsqueeze_scalar_axes"] = (  # 0-d axes where the spec says 1-D, as ONNX's AffineGrid function
        [n("Unsqueeze", ["x", "one"], ["y"])], {"x": seq}, {"one": i64(1)}, 17)
    out["split_to_sequence_chunks"] = (  # one split size: equal chunks, a shorter last one
        [n("SplitToSequence", ["x", "k"], ["s"], axis=1), n("SequenceAt", ["s", "p"], ["y"])],
        {"x": seq}, {"k": i64(3), "p": i64(-1)}, 17)
    out["split_to_sequence_stack"] = (
        [n("SplitToSequence", ["x"], ["s"], axis=1, keepdims=0),
         n("ConcatFromSequence", ["s"], ["y"], axis=-1, new_axis=1)], {"x": seq}, {}, 17)
    out["sequence_construct_insert_erase"] = (
        [n("Relu", ["x"], ["r"]), n("SequenceConstruct", ["x", "r"], ["s"]),
         n("SequenceInsert", ["s", "c", "p"], ["s2"]), n("SequenceErase", ["s2"], ["s3"]),
         n("SequenceLength", ["s3"], ["len"]), n("Cast", ["len"], ["f"], to=1),
         n("ConcatFromSequence", ["s3"], ["cat"], axis=1), n("Mul", ["cat", "f"], ["y"])],
        {"x": seq}, {"c": np.ones((2, 7, 3), np.float32), "p": i64(0)}, 17)
    out["cast_like_constant_clip"] = (  # dynamo's relu6: Clip(x, CastLike(0, x), CastLike(6, x))
        [n("CastLike", ["lo", "x"], ["a"]), n("CastLike", ["hi", "x"], ["b"]),
         n("Clip", ["x", "a", "b"], ["y"])],
        {"x": x * 8}, {"lo": np.float64(0), "hi": np.float64(6)}, 17)
    return out


PATTERNS = _patterns()


@pytest.mark.parametrize("pattern", list(PATTERNS))
def test_exporter_pattern_matches_onnxruntime(pattern, tmp_path):
    nodes, inputs, inits, opset = PATTERNS[pattern]
    path = _pattern_model(tmp_path / f"{pattern}.onnx", nodes, inputs, inits, opset)
    (want,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, inputs)
    g = gd.load_onnx(path)
    (got,) = gd.run(g, inputs, ["y"])
    assert_close({"y": got}, {"y": want}, pattern)
