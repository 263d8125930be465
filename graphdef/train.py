"""gd.train: losses, optimizers, gradient clipping and learning-rate schedules, all built from
ordinary graph ops, so that the interpreter runs them and the C backend compiles them into the
same ``net_run`` as the forward and backward pass.

>>> import numpy as np, graphdef as gd
>>> with gd.Graph("fit") as g:
...     x = gd.placeholder("x", (4, 2))
...     y = gd.placeholder("y", (4,), "int64")
...     w = gd.variable("w", np.zeros((2, 3), np.float32))
...     loss = gd.train.softmax_cross_entropy(gd.matmul(x, w), y, name="loss")
...     step = gd.train.SGD(0.5, momentum=0.9).minimize(loss)
>>> s = gd.Session(g)
>>> feeds = {"x": np.eye(4, 2, dtype=np.float32), "y": np.array([0, 1, 2, 2])}
>>> [round(float(s.run(feeds, [step])[0]), 4) for _ in range(3)]
[1.0986, 1.0578, 0.9869]

Losses (``softmax_cross_entropy``, ``sigmoid_cross_entropy``, ``mean_squared_error``) reduce
to a scalar mean by default and are stable for large logits: the softmax one goes through
``log_softmax`` (whose gradient, softmax minus the labels, never forms ``exp`` of a large
number), the sigmoid one through ``softplus``.

Optimizers (``SGD`` with momentum and Nesterov, ``Adam``, ``AdamW``) follow PyTorch's update
rules (torch.optim, dampening 0, Adam's epsilon added to the bias-corrected root). Their slots
(momentum buffers, Adam moments) are non-trainable variables named ``<variable>/<slot>``; the
step counter is the int64 variable ``global_step`` (``global_step()``), which ``minimize`` adds
one to. Each optimizer's ``reference`` is the same update in numpy, for tests.

Every gradient an optimizer applies first goes through ``cross_rank_mean`` (graphdef/ops/comm.py):
the identity on one process, the mean over the ranks in a data-parallel training binary
(codegen/data_parallel.py), before clipping, so that the clipped norm is the global batch's.

Variable semantics (graphdef/ops/state.py): every read in a run sees the value from the run's
start, so a learning-rate schedule of ``global_step`` uses the step before its increment, and
Adam's bias correction the step after it (1 at the first update), as in PyTorch.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from . import dtypes
from .autodiff import gradients
from .builder import Tensor, constant, control_dependencies, name_scope, variable
from .errors import GraphError
from .ops.comm import cross_rank_mean
from .ops.elementwise import cast, equal, maximum, minimum, pow, rsqrt, sqrt, where  # noqa: A004
from .ops.index import check_index
from .ops.math import cos, floor, softplus
from .ops.norm import log_softmax
from .ops.reduce import reduce_mean, reduce_sum
from .ops.shape import identity, reshape, stop_gradient, unsqueeze
from .ops.state import assign, assign_add

STEP = "global_step"


# ----------------------------------------------------------------------------- losses
def _np(t: Tensor):
    return dtypes.np_dtype(t.dtype)


def _reduce(per, reduction: str, name):
    if reduction == "mean":
        return reduce_mean(per, name=name)
    if reduction == "sum":
        return reduce_sum(per, name=name)
    if reduction == "none":
        return identity(per, name=name)
    raise GraphError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def softmax_cross_entropy(logits: Tensor, labels, axis: int = -1, reduction: str = "mean", name=None):
    """Cross-entropy of softmax(``logits``) along ``axis`` against ``labels``: integer class
    indices in [0, classes) (the shape of ``logits`` without ``axis``; another index is an error
    when the step runs: ``check_index``) or float targets of ``logits``' shape
    (one-hot or probabilities). ``reduction``: "mean" (default) or "sum" over the examples, or
    "none" (one loss per example)."""
    axis = axis % len(logits.shape)
    logp = log_softmax(logits, axis=axis)
    if isinstance(labels, Tensor) and not dtypes.is_float(labels.dtype):
        want = logits.shape[:axis] + logits.shape[axis + 1 :]
        if labels.shape != want:
            raise GraphError(
                f"softmax_cross_entropy: class labels '{labels.name}' have shape {labels.shape}; "
                f"logits '{logits.name}' {logits.shape} need {want}"
            )
        depth = logits.shape[axis]
        if labels.dtype not in ("int32", "int64"):
            labels = cast(labels, "int64")
        labels = check_index(labels, depth)  # a label outside the classes is an error, not a zero loss
        classes = np.arange(depth).reshape((-1,) + (1,) * (len(logits.shape) - 1 - axis))
        target = cast(equal(unsqueeze(labels, axis), constant(classes.astype(dtypes.np_dtype(labels.dtype)))),
                      logits.dtype)  # fmt: skip
    else:
        target = labels if isinstance(labels, Tensor) else constant(np.asarray(labels, _np(logits)))
        if target.shape != logits.shape:
            raise GraphError(
                f"softmax_cross_entropy: targets '{target.name}' have shape {target.shape}, "
                f"logits '{logits.name}' {logits.shape}"
            )
    return _reduce(-reduce_sum(target * logp, axes=axis), reduction, name)


def sigmoid_cross_entropy(logits: Tensor, labels, reduction: str = "mean", name=None):
    """Binary cross-entropy of sigmoid(``logits``) against ``labels`` in [0, 1], elementwise:
    softplus(x) - x * z, finite for any logit."""
    z = labels if isinstance(labels, Tensor) else constant(np.asarray(labels, _np(logits)))
    return _reduce(softplus(logits) - logits * z, reduction, name)


binary_cross_entropy_with_logits = sigmoid_cross_entropy


def mean_squared_error(predictions: Tensor, targets, reduction: str = "mean", name=None):
    """(predictions - targets)^2, elementwise."""
    d = predictions - targets
    return _reduce(d * d, reduction, name)


# ----------------------------------------------------------------------------- layers in training mode
def batch_norm(x: Tensor, scale, bias, moving_mean: Tensor, moving_var: Tensor, momentum: float = 0.1,
               epsilon: float = 1e-5, name=None) -> Tensor:  # fmt: skip
    """Batch normalization in training mode over axis 1 (NCHW or NC): normalized with the
    batch's mean and (biased) variance, gradients through both; the run that computes it
    also moves the non-trainable variables ``moving_mean`` / ``moving_var`` towards the
    batch's mean and unbiased variance by ``momentum`` (PyTorch's BatchNorm rule), which
    ``gd.batch_norm`` then uses for inference."""
    for v in (moving_mean, moving_var):
        if not isinstance(v, Tensor) or v.op != "variable":
            raise GraphError(f"batch_norm: moving statistics must be variables, got {v!r}")
    axes = (0,) + tuple(range(2, len(x.shape)))
    shape = (1, x.shape[1]) + (1,) * (len(x.shape) - 2)
    count = int(np.prod([x.shape[a] for a in axes]))
    mean = reduce_mean(x, axes=axes, keepdims=True)
    d = x - mean
    var = reduce_mean(d * d, axes=axes, keepdims=True)
    flat_mean = reshape(mean, moving_mean.shape)
    flat_var = reshape(var, moving_var.shape) * (count / max(count - 1, 1))
    updates = [
        assign(moving_mean, moving_mean * (1.0 - momentum) + stop_gradient(flat_mean) * momentum),
        assign(moving_var, moving_var * (1.0 - momentum) + stop_gradient(flat_var) * momentum),
    ]
    y = d * rsqrt(var + epsilon) * reshape(scale, shape) + reshape(bias, shape)
    with control_dependencies(updates):
        return identity(y, name=name)


# ----------------------------------------------------------------------------- step and schedules
def global_step(graph=None) -> Tensor:
    """The graph's int64 step counter (a non-trainable variable ``global_step``, created at 0
    on first use); each ``minimize`` adds one to it."""
    from .builder import get_default_graph

    graph = graph or get_default_graph()
    for node in graph.nodes:
        if node.name == STEP:
            if node.op != "variable" or graph.type_of(node.ref(0)).dtype != "int64":
                raise GraphError(f"'{STEP}' in graph '{graph.name}' is a {node.op}, not an int64 variable")
            return Tensor(graph, node.ref(0))
    with graph.as_default(), control_dependencies(None):
        return variable(STEP, np.zeros((), np.int64), dtype="int64", trainable=False)


def _f32(step: Tensor) -> Tensor:
    return cast(step, "float32")


def exponential_decay(learning_rate: float, step: Tensor, decay_steps: int, decay_rate: float,
                      staircase: bool = False) -> Tensor:  # fmt: skip
    """learning_rate * decay_rate ** (step / decay_steps) (the exponent floored: ``staircase``)."""
    t = _f32(step) / float(decay_steps)
    if staircase:
        t = floor(t)
    return pow(constant(np.float32(decay_rate)), t) * float(learning_rate)


def cosine_decay(learning_rate: float, step: Tensor, decay_steps: int, alpha: float = 0.0) -> Tensor:
    """Cosine from learning_rate down to alpha * learning_rate over ``decay_steps``, then flat."""
    t = minimum(_f32(step), float(decay_steps)) / float(decay_steps)
    return ((cos(t * math.pi) + 1.0) * (0.5 * (1 - alpha)) + alpha) * float(learning_rate)


def piecewise_constant(step: Tensor, boundaries, values) -> Tensor:
    """values[i] while boundaries[i-1] <= step < boundaries[i] (len(values) = len(boundaries) + 1)."""
    if len(values) != len(boundaries) + 1:
        raise GraphError(f"piecewise_constant: {len(values)} values for {len(boundaries)} boundaries")
    out = constant(np.float32(values[-1]))
    for b, v in reversed(list(zip(boundaries, values[:-1]))):
        out = where(step < constant(np.int64(b)), constant(np.float32(v)), out)
    return out


def linear_warmup(learning_rate, step: Tensor, warmup_steps: int) -> Tensor:
    """``learning_rate`` (a float or a schedule's tensor) scaled by (step + 1) / warmup_steps
    for the first ``warmup_steps`` steps."""
    scale = minimum((_f32(step) + 1.0) / float(warmup_steps), 1.0)
    return scale * learning_rate


# ----------------------------------------------------------------------------- clipping
def global_norm(tensors) -> Tensor:
    """sqrt of the sum of squares of every element of ``tensors``."""
    total = None
    for t in tensors:
        s = reduce_sum(t * t)
        total = s if total is None else total + s
    return sqrt(total)


def clip_by_global_norm(tensors, clip_norm: float):
    """(``tensors`` scaled by clip_norm / max(global_norm, clip_norm), the global norm): the
    whole set shrunk together when its norm exceeds ``clip_norm``, untouched otherwise."""
    norm = global_norm(tensors)
    scale = float(clip_norm) / maximum(norm, float(clip_norm))
    return [t * scale for t in tensors], norm


# ----------------------------------------------------------------------------- optimizers
def trainable_variables(graph) -> list[Tensor]:
    """The graph's variables marked trainable, in graph order."""
    return [
        Tensor(graph, n.ref(0)) for n in graph.nodes if n.op == "variable" and n.attrs.get("trainable", True)
    ]


class Optimizer:
    """Base: ``minimize(loss)`` differentiates the loss with respect to the trainable
    variables and returns the train op, an identity of the loss that runs every update and the
    step increment. ``learning_rate``: a float, a scalar float tensor, or a function of the
    step tensor (a schedule above); ``clip_norm``: clip the gradients by their global norm."""

    slots: tuple[str, ...] = ()

    def __init__(self, learning_rate, clip_norm: float | None = None):
        self.learning_rate = learning_rate
        self.clip_norm = clip_norm

    def _lr(self, step: Tensor) -> Tensor:
        lr = self.learning_rate
        lr = lr(step) if callable(lr) else lr
        return lr if isinstance(lr, Tensor) else constant(np.float32(lr))

    def minimize(self, loss: Tensor, var_list=None, name: str = "train") -> Tensor:
        graph = loss.graph
        if loss.shape != () or not dtypes.is_float(loss.dtype):
            raise GraphError(f"minimize: loss '{loss.name}' must be a float scalar, got {loss.type}")
        variables = list(var_list) if var_list is not None else trainable_variables(graph)
        if not variables:
            raise GraphError(f"minimize: graph '{graph.name}' has no trainable variables")
        with graph.as_default():
            grads = gradients(loss, variables)
            pairs = []
            for g, v in zip(grads, variables):
                if g is None:
                    msg = f"variable '{v.name}' has no path to loss '{loss.name}': not trained"
                    warnings.warn(msg, stacklevel=2)
                else:
                    pairs.append((g, v))
            return self.apply_gradients(pairs, loss, name)

    def apply_gradients(self, pairs, loss: Tensor | None = None, name: str = "train") -> Tensor:
        """The train op of (gradient, variable) ``pairs``: an identity of ``loss`` (or of the new
        step when none) that depends on every update."""
        if not pairs:
            raise GraphError("apply_gradients: no (gradient, variable) pairs")
        graph = pairs[0][1].graph
        for _, v in pairs:
            if v.op != "variable":
                raise GraphError(f"apply_gradients: '{v.name}' is a {v.op}, not a variable")
        with graph.as_default():
            step = global_step(graph)
            slots = [
                {s: variable(f"{v.name}/{s}", np.zeros(v.shape, dtypes.np_dtype(v.dtype)), trainable=False)
                 for s in self.slots}
                for _, v in pairs
            ]  # fmt: skip
            with name_scope(name):
                # averaged over the ranks of a data-parallel run (compiled away on one process),
                # before anything that depends on the whole batch's gradient (the clipping)
                grads = [cross_rank_mean(g) if dtypes.is_float(g.dtype) else g for g, _ in pairs]
                if self.clip_norm is not None:
                    grads, _ = clip_by_global_norm(grads, self.clip_norm)
                lr = self._lr(step)
                updates = []
                for g, (_, v), held in zip(grads, pairs, slots):
                    new, new_slots = self._update(v, g, held, lr, step)
                    updates.append(assign(v, new))
                    updates += [assign(held[s], x) for s, x in new_slots.items()]
                updates.append(assign_add(step, np.int64(1)))
            with control_dependencies(updates):
                return identity(loss if loss is not None else step, name=name)

    def _update(self, v, g, slots, lr, step):
        """(new value, new slots) of variable v with gradient g; ``step``: global_step before
        this update's increment."""
        raise NotImplementedError

    # numpy twin: one update of float32 arrays; ``state`` holds the slots by name, t the step
    # after the increment (1 at the first update)
    def reference(self, v, g, state: dict, lr: float, t: int):
        raise NotImplementedError


class SGD(Optimizer):
    """p -= lr * g; with ``momentum``: buf = momentum * buf + g, p -= lr * buf (Nesterov:
    p -= lr * (g + momentum * buf)); ``weight_decay`` adds weight_decay * p to g first."""

    def __init__(self, learning_rate, momentum: float = 0.0, nesterov: bool = False,
                 weight_decay: float = 0.0, clip_norm: float | None = None):  # fmt: skip
        super().__init__(learning_rate, clip_norm)
        if nesterov and momentum <= 0:
            raise GraphError("SGD: Nesterov momentum needs momentum > 0")
        self.momentum, self.nesterov, self.weight_decay = float(momentum), nesterov, float(weight_decay)
        self.slots = ("momentum",) if momentum else ()

    def _update(self, v, g, slots, lr, step):
        if self.weight_decay:
            g = g + v * self.weight_decay
        if not self.momentum:
            return v - lr * g, {}
        buf = slots["momentum"] * self.momentum + g
        step = g + buf * self.momentum if self.nesterov else buf
        return v - lr * step, {"momentum": buf}

    def reference(self, v, g, state, lr, t):
        f = np.float32
        if self.weight_decay:
            g = g + v * f(self.weight_decay)
        if not self.momentum:
            return v - f(lr) * g, {}
        buf = state["momentum"] * f(self.momentum) + g
        step = g + buf * f(self.momentum) if self.nesterov else buf
        return v - f(lr) * step, {"momentum": buf}


class Adam(Optimizer):
    """m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2,
    p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)."""

    slots = ("m", "v")

    def __init__(self, learning_rate=1e-3, beta1: float = 0.9, beta2: float = 0.999, epsilon: float = 1e-8,
                 clip_norm: float | None = None):  # fmt: skip
        super().__init__(learning_rate, clip_norm)
        self.beta1, self.beta2, self.epsilon = float(beta1), float(beta2), float(epsilon)

    def _decay(self, v, lr):
        return v

    def _update(self, v, g, slots, lr, step):
        b1, b2 = self.beta1, self.beta2
        t = _f32(step) + 1.0  # 1 at the first update
        m = slots["m"] * b1 + g * (1 - b1)
        s = slots["v"] * b2 + g * g * (1 - b2)
        c1 = 1.0 - pow(constant(np.float32(b1)), t)
        c2 = sqrt(1.0 - pow(constant(np.float32(b2)), t))
        new = self._decay(v, lr) - (lr / c1) * m / (sqrt(s) / c2 + self.epsilon)
        return new, {"m": m, "v": s}

    def _decay_ref(self, v, lr):
        return v

    def reference(self, v, g, state, lr, t):
        f = np.float32
        b1, b2 = f(self.beta1), f(self.beta2)
        m = state["m"] * b1 + g * (f(1) - b1)
        s = state["v"] * b2 + g * g * (f(1) - b2)
        c1 = f(1) - b1 ** f(t)
        c2 = np.sqrt(f(1) - b2 ** f(t))
        new = self._decay_ref(v, f(lr)) - (f(lr) / c1) * m / (np.sqrt(s) / c2 + f(self.epsilon))
        return new, {"m": m, "v": s}


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter): p *= 1 - lr * weight_decay
    before the Adam step, the decay not passing through the moments."""

    def __init__(self, learning_rate=1e-3, weight_decay: float = 1e-2, beta1: float = 0.9,
                 beta2: float = 0.999, epsilon: float = 1e-8, clip_norm: float | None = None):  # fmt: skip
        super().__init__(learning_rate, beta1, beta2, epsilon, clip_norm)
        self.weight_decay = float(weight_decay)

    def _decay(self, v, lr):
        return v * (1.0 - lr * self.weight_decay)

    def _decay_ref(self, v, lr):
        return v * (np.float32(1) - lr * np.float32(self.weight_decay))


__all__ = [
    "Adam",
    "AdamW",
    "Optimizer",
    "SGD",
    "batch_norm",
    "binary_cross_entropy_with_logits",
    "clip_by_global_norm",
    "cosine_decay",
    "exponential_decay",
    "global_norm",
    "global_step",
    "linear_warmup",
    "mean_squared_error",
    "piecewise_constant",
    "sigmoid_cross_entropy",
    "softmax_cross_entropy",
    "trainable_variables",
]
