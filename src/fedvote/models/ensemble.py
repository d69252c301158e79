"""Batched training of N same-architecture models: every agent's teacher at once.

Looping over agents one small model at a time spends most of its time in Python
overhead and tiny matrix products. :func:`fit_ensemble` instead stacks the N models'
parameters along a leading agent axis and takes one vectorised step for all of them,
with a per-agent Adam state. It reproduces
:func:`fedvote.models.training.fit_classifier` run on each agent alone, up to
floating-point rounding:

* agent i's initial weights come from ``torch.Generator().manual_seed(seeds[i])``
  exactly as :func:`fedvote.models.zoo.build_model` draws them, and its batch order
  from the same generator, one ``randperm`` per epoch;
* per epoch every agent takes ``ceil(n_i / batch_size)`` steps, as it would alone,
  the last one on a partial batch (its loss is the mean over the real records);
* agents with fewer batches than the largest sit out the trailing steps of each
  epoch: their rows of the step are padding, masked out of the loss, and neither
  their parameters nor their Adam state (moments, step count) move.

Gradients come from hand-written batched matrix products for stacks of
Flatten/Linear/ReLU (the logistic and MLP models) and from ``torch.func.vmap`` over
``torch.func.functional_call`` for any other architecture (the CNN). Groups of agents
are independent, so large ensembles are trained group by group to bound activation
memory (``memory_budget_bytes``); the result does not depend on the grouping.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

from fedvote.models.training import TrainingConfig
from fedvote.models.zoo import _reset_parameters, build_model

_DEFAULT_MEMORY_BUDGET = 1 << 30  # bytes of activations per vectorised pass
# Adam's defaults, as torch.optim.Adam (which fit_classifier uses).
_BETA1 = 0.9
_BETA2 = 0.999
_EPS = 1e-8
# Use torch's fused Adam kernel (one pass over each agent's parameters) when available.
_FUSED_ADAM = hasattr(torch, "_fused_adam_")

GradFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], None]


@dataclass(frozen=True)
class _Slot:
    """Where one named parameter lives in a model's flat parameter vector."""

    name: str
    offset: int
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


class ModelEnsemble:
    """N models of one architecture; parameters stacked as one (N, P) matrix.

    Parameters
    ----------
    template : nn.Module
        The architecture; its own parameter values are never used.
    flat_params : torch.Tensor
        (N, P) float32: row i is model i's parameters, concatenated in
        ``template.named_parameters()`` order.
    memory_budget_bytes : int
        Rough bound on the activation memory of one vectorised pass; sets how many
        models and queries are evaluated together (not the result).

    """

    def __init__(
        self,
        template: nn.Module,
        flat_params: torch.Tensor,
        *,
        memory_budget_bytes: int = _DEFAULT_MEMORY_BUDGET,
    ) -> None:
        self.template = template.eval().requires_grad_(False)
        self._slots = _slots(template)
        total = sum(slot.numel for slot in self._slots)
        if flat_params.dim() != 2 or flat_params.shape[1] != total:
            raise ValueError(
                f"flat_params must be (N, {total}) for this architecture, got {tuple(flat_params.shape)}"
            )
        self.flat_params = flat_params
        self.memory_budget_bytes = memory_budget_bytes

    @property
    def num_models(self) -> int:
        """Number of models N."""
        return int(self.flat_params.shape[0])

    @property
    def device(self) -> torch.device:
        """Where the stacked parameters live."""
        return self.flat_params.device

    @property
    def params(self) -> dict[str, torch.Tensor]:
        """``name -> (N, *shape)`` views of the stacked parameters."""
        return _unflatten(self.flat_params, self._slots)

    def module(self, index: int, device: torch.device | str | None = None) -> nn.Module:
        """Model ``index`` as a standalone module in eval mode.

        On the ensemble's device its parameters are views of the stacked ones (no copy);
        on another device they are copies.
        """
        if not 0 <= index < self.num_models:
            raise IndexError(f"model index {index} out of range for {self.num_models} models")
        target = torch.device(device) if device is not None else self.device
        model = copy.deepcopy(self.template)
        state = {name: p[index].to(target) for name, p in self.params.items()}
        model.load_state_dict(state, assign=True)
        return model.eval()

    @torch.no_grad()
    def logits(self, features: np.ndarray | torch.Tensor) -> torch.Tensor:
        """Every model's logits on the same Q queries: (N, Q, C) float32 on the ensemble's device."""
        x = torch.as_tensor(features, dtype=torch.float32).to(self.device)  # (Q, *shape)
        n, q = self.num_models, x.shape[0]
        example_shape = tuple(x.shape[1:])
        num_classes = int(self.template(torch.zeros((1, *example_shape), device=self.device)).shape[-1])
        out = torch.empty((n, q, num_classes), device=self.device)  # (N, Q, C)
        if q == 0:
            return out
        per_pair = 2 * 4 * _activations_per_example(self.template, example_shape)
        pairs = max(1, self.memory_budget_bytes // per_pair)  # (model, query) pairs per pass
        models_per_pass = min(n, pairs)
        queries_per_pass = max(1, pairs // models_per_pass)
        forward = vmap(_forward_fn(self.template, self._slots), in_dims=(0, None))
        for a in range(0, n, models_per_pass):
            rows = self.flat_params[a : a + models_per_pass]  # (models, P)
            for s in range(0, q, queries_per_pass):
                out[a : a + models_per_pass, s : s + queries_per_pass] = forward(
                    rows, x[s : s + queries_per_pass]
                )
        return out

    def predict(self, features: np.ndarray | torch.Tensor) -> torch.Tensor:
        """Every model's argmax labels on the same Q queries: (N, Q) int64."""
        return self.logits(features).argmax(dim=-1)


def init_ensemble(
    name: str,
    example_shape: tuple[int, ...],
    num_classes: int,
    seeds: Sequence[int],
    *,
    hidden: int = 128,
    device: torch.device | str | None = None,
    memory_budget_bytes: int = _DEFAULT_MEMORY_BUDGET,
) -> ModelEnsemble:
    """Fresh models, model i initialised exactly as ``build_model(..., generator=g_i)``.

    ``g_i = torch.Generator().manual_seed(seeds[i])``.
    """
    ensemble, _ = _init_with_generators(
        name, example_shape, num_classes, seeds, hidden, device, memory_budget_bytes
    )
    return ensemble


def fit_ensemble(
    features: Sequence[np.ndarray],
    labels: Sequence[np.ndarray],
    config: TrainingConfig,
    seeds: Sequence[int],
    *,
    num_classes: int,
    hidden: int = 128,
    device: torch.device | str | None = None,
    memory_budget_bytes: int = _DEFAULT_MEMORY_BUDGET,
) -> ModelEnsemble:
    """Train one model per agent on its own data, all agents in one vectorised loop.

    Equivalent, up to floating-point rounding, to running for every agent i::

        g = torch.Generator().manual_seed(seeds[i])
        model = build_model(config.model, shape, num_classes, hidden=hidden, generator=g)
        fit_classifier(model, features[i], labels[i], config, g)

    which is what :meth:`fedvote.agents.Agent.train_teacher` does: Adam with
    cross-entropy, the same initial weights, the same shuffled mini-batches and the
    same number of steps per epoch for every agent, whatever the others' data sizes.

    Parameters
    ----------
    features : sequence of np.ndarray
        Agent i's examples, (n_i, *shape); sizes may differ, and may be zero (such an
        agent keeps its initial weights, as it would alone).
    labels : sequence of np.ndarray
        Agent i's labels, (n_i,) int.
    config : TrainingConfig
        Architecture and optimiser settings shared by all agents.
    seeds : sequence of int
        Agent i's training seed (initialisation, then batch order).
    num_classes : int
        Number of classes C.
    hidden : int
        Hidden width of the MLP (default 128, as ``build_model``).
    device : torch.device or str or None
        Where to train (default CPU), e.g. ``"cuda"``.
    memory_budget_bytes : int
        Rough bound on activation memory per vectorised step; larger ensembles are
        trained in groups of agents (the result does not depend on it).

    Returns
    -------
    ModelEnsemble
        The N trained models, stacked, on ``device``.

    """
    n_agents = len(features)
    if len(labels) != n_agents or len(seeds) != n_agents:
        raise ValueError(
            f"features, labels and seeds need one entry per agent; got "
            f"{n_agents}, {len(labels)} and {len(seeds)}"
        )
    if n_agents == 0:
        raise ValueError("fit_ensemble needs at least one agent")
    shapes = {tuple(f.shape[1:]) for f in features}
    if len(shapes) != 1:
        raise ValueError(f"all agents' examples must share one shape, got {sorted(shapes)}")
    example_shape = shapes.pop()
    for i, (f, y) in enumerate(zip(features, labels, strict=True)):
        if f.shape[0] != y.shape[0]:
            raise ValueError(f"agent {i}: {f.shape[0]} examples but {y.shape[0]} labels")
    ensemble, generators = _init_with_generators(
        config.model, example_shape, num_classes, seeds, hidden, device, memory_budget_bytes
    )
    target = ensemble.device
    sizes = np.array([f.shape[0] for f in features], dtype=np.int64)  # (N,)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)  # agent i's first row
    # The union of the agents' data, one copy: x_all (sum n_i, *shape), y_all (sum n_i,)
    x_all = torch.from_numpy(np.concatenate([np.asarray(f, dtype=np.float32) for f in features]))
    y_all = torch.from_numpy(np.concatenate([np.asarray(y, dtype=np.int64) for y in labels]))
    x_all, y_all = x_all.to(target), y_all.to(target)

    per_row = 3 * 4 * _activations_per_example(ensemble.template, example_shape)
    group_size = max(1, min(n_agents, memory_budget_bytes // (per_row * config.batch_size)))
    grad_fn = _gradient_fn(ensemble.template, ensemble._slots)
    for start in range(0, n_agents, group_size):
        members = slice(start, min(start + group_size, n_agents))
        ensemble.flat_params[members] = _fit_group(
            ensemble.flat_params[members].clone(),
            grad_fn,
            x_all,
            y_all,
            sizes[members],
            offsets[members],
            generators[members],
            config,
        )
    return ensemble


def _fit_group(
    flat: torch.Tensor,
    grad_fn: GradFn,
    x_all: torch.Tensor,
    y_all: torch.Tensor,
    sizes: np.ndarray,
    offsets: np.ndarray,
    generators: Sequence[torch.Generator],
    config: TrainingConfig,
) -> torch.Tensor:
    """Train the G models whose parameters are the rows of ``flat`` (G, P); returns it."""
    device = flat.device
    g = flat.shape[0]
    batch = config.batch_size
    grads = torch.zeros_like(flat)  # (G, P), rewritten by every step
    adam = _AgentAdam(flat, grads, config)
    steps_per_epoch = -(-sizes // batch)  # (G,) ceil(n_i / B): as each agent alone
    max_steps = int(steps_per_epoch.max())
    padded = max_steps * batch
    valid = torch.from_numpy(np.arange(padded)[None, :] < sizes[:, None]).to(device)  # (G, padded)
    valid = valid.view(g, max_steps, batch)
    counts = valid.sum(dim=2).to(torch.float32)  # (G, steps): size of agent i's batch s
    weights = (valid / counts.clamp(min=1.0)[:, :, None]).to(torch.float32)  # (G, steps, B)
    x_batch = torch.empty((g * batch, *x_all.shape[1:]), dtype=x_all.dtype, device=device)
    y_batch = torch.empty(g * batch, dtype=y_all.dtype, device=device)
    for _ in range(config.epochs):
        # order: (G, padded) rows of the union; padding repeats the agent's first row (weight 0).
        order = np.zeros((g, padded), dtype=np.int64)
        for i, generator in enumerate(generators):
            n_i = int(sizes[i])
            order[i, :n_i] = torch.randperm(n_i, generator=generator).numpy() + offsets[i]
            order[i, n_i:] = offsets[i] if n_i else 0
        order_t = torch.from_numpy(order).to(device)
        for s in range(max_steps):
            rows = order_t[:, s * batch : (s + 1) * batch].reshape(-1)  # (G * B,)
            torch.index_select(x_all, 0, rows, out=x_batch)  # reused buffer: no allocation per step
            torch.index_select(y_all, 0, rows, out=y_batch)
            grad_fn(
                flat, x_batch.view(g, batch, *x_all.shape[1:]), y_batch.view(g, batch), weights[:, s], grads
            )
            adam.step(steps_per_epoch > s)  # agents out of data this step sit it out
    return flat


class _AgentAdam:
    """torch.optim.Adam (L2 weight decay) with a separate state per agent, on stacked rows.

    Row i of ``flat`` (G, P) is agent i's parameter vector and row i of ``grads`` its
    gradient. Each agent has its own moments and step count (so its own bias
    correction); :meth:`step` updates only the agents marked active. Uses the fused
    Adam kernel on the list of rows where this torch supports it on the device, and
    otherwise ``torch.optim.Adam`` over one Parameter per agent (the same arithmetic).
    """

    def __init__(self, flat: torch.Tensor, grads: torch.Tensor, config: TrainingConfig) -> None:
        self._config = config
        self._rows = list(flat.unbind(0))
        self._grads = list(grads.unbind(0))
        self._exp_avg = list(torch.zeros_like(flat).unbind(0))
        self._exp_avg_sq = list(torch.zeros_like(flat).unbind(0))
        self._steps = torch.zeros(flat.shape[0], dtype=torch.float32, device=flat.device)  # (G,)
        self._step_views = list(self._steps.unbind(0))
        self._fallback: torch.optim.Optimizer | None = None
        self._fallback_params: list[nn.Parameter] = []
        if not _FUSED_ADAM:
            self._use_fallback()

    def step(self, active: np.ndarray) -> None:
        """One Adam step for the agents with ``active[i]`` true; the others do not move."""
        if self._fallback is not None:
            for i, param in enumerate(self._fallback_params):
                param.grad = self._grads[i] if active[i] else None
            self._fallback.step()
            return
        chosen: Sequence[int]
        if active.all():
            chosen = range(len(self._rows))
            self._steps += 1.0
        else:
            chosen = np.flatnonzero(active).tolist()
            self._steps[torch.from_numpy(active).to(self._steps.device)] += 1.0
        if not chosen:
            return
        try:
            torch._fused_adam_(
                [self._rows[i] for i in chosen],
                [self._grads[i] for i in chosen],
                [self._exp_avg[i] for i in chosen],
                [self._exp_avg_sq[i] for i in chosen],
                [],
                [self._step_views[i] for i in chosen],
                lr=self._config.learning_rate,
                beta1=_BETA1,
                beta2=_BETA2,
                weight_decay=self._config.weight_decay,
                eps=_EPS,
                amsgrad=False,
                maximize=False,
            )
        except (RuntimeError, NotImplementedError):  # no fused kernel for this device/torch
            if self._steps.max() > 1:  # never switch with moments half-way through
                raise
            self._steps.zero_()
            self._use_fallback()
            self.step(active)

    def _use_fallback(self) -> None:
        self._fallback_params = [nn.Parameter(row) for row in self._rows]  # share storage with rows
        self._fallback = torch.optim.Adam(
            self._fallback_params, lr=self._config.learning_rate, weight_decay=self._config.weight_decay
        )


def _gradient_fn(template: nn.Module, slots: list[_Slot]) -> GradFn:
    """grad_fn(flat (G,P), x (G,B,*shape), y (G,B), w (G,B), out (G,P)) writes each model's gradient.

    The loss of model g is ``sum_b w[g, b] * cross_entropy(model_g(x[g, b]), y[g, b])``.
    """
    linear_stack = _linear_stack(template)
    if linear_stack is not None:
        return _linear_stack_gradient(linear_stack, slots)
    per_model = vmap(grad(_loss_fn(template, slots)))

    def vmapped(
        flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor, w: torch.Tensor, out: torch.Tensor
    ) -> None:
        out.copy_(per_model(flat, x, y, w))

    return vmapped


def _linear_stack(template: nn.Module) -> list[str] | None:
    """Layer kinds ("flatten", "linear", "relu") if ``template`` is such a Sequential, else None."""
    if not isinstance(template, nn.Sequential):
        return None
    kinds = []
    for layer in template:
        if isinstance(layer, nn.Flatten) and layer.start_dim == 1 and layer.end_dim == -1:
            kinds.append("flatten")
        elif isinstance(layer, nn.Linear) and layer.bias is not None:
            kinds.append("linear")
        elif isinstance(layer, nn.ReLU):
            kinds.append("relu")
        else:
            return None
    if "linear" not in kinds or kinds[-1] != "linear" or "flatten" in kinds[1:]:
        return None
    return kinds


def _linear_stack_gradient(kinds: list[str], slots: list[_Slot]) -> GradFn:
    """Hand-written forward and backward of (Flatten) Linear (ReLU Linear)* for G models at once.

    Writes the weight gradients straight into the preallocated (G, P) buffer
    (batched matrix products), the per-model equivalent of autograd on the loop.
    """
    num_linear = kinds.count("linear")
    if len(slots) != 2 * num_linear:
        raise ValueError("linear stack: expected a weight and a bias per Linear layer")
    layer_slots = [(slots[2 * k], slots[2 * k + 1]) for k in range(num_linear)]

    def compute(
        flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor, w: torch.Tensor, out: torch.Tensor
    ) -> None:
        g, b = y.shape
        h = x.reshape(g, b, -1)  # (G, B, D)
        inputs: list[torch.Tensor] = []  # each Linear layer's input (G, B, in)
        relu_outputs: list[torch.Tensor] = []
        k = 0
        for kind in kinds:
            if kind == "linear":
                weight_slot, bias_slot = layer_slots[k]
                weight = _view(flat, weight_slot)  # (G, out, in)
                bias = _view(flat, bias_slot)  # (G, out)
                inputs.append(h)
                h = torch.baddbmm(bias.unsqueeze(1), h, weight.transpose(1, 2))  # (G, B, out)
                k += 1
            elif kind == "relu":
                h = torch.relu(h)
                relu_outputs.append(h)
        # dL/dlogits for weighted cross-entropy: w * (softmax - one_hot(y)); (G, B, C)
        delta = (h - h.amax(dim=-1, keepdim=True)).exp_()  # softmax, by hand: faster on CPU
        delta.div_(delta.sum(dim=-1, keepdim=True))
        delta.scatter_add_(-1, y.unsqueeze(-1), torch.full_like(delta[..., :1], -1.0))
        delta.mul_(w.unsqueeze(-1))
        for kind in reversed(kinds):
            if kind == "linear":
                k -= 1
                weight_slot, bias_slot = layer_slots[k]
                a = inputs[k]
                torch.bmm(delta.transpose(1, 2), a, out=_view(out, weight_slot))  # (G, out, in)
                torch.sum(delta, dim=1, out=_view(out, bias_slot))  # (G, out)
                if k == 0:
                    break
                delta = torch.bmm(delta, _view(flat, weight_slot))  # (G, B, in)
            elif kind == "relu":
                delta = delta * (relu_outputs.pop() > 0)

    return compute


def _loss_fn(
    template: nn.Module, slots: list[_Slot]
) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]:
    """One model's loss from its flat parameters: cross-entropy weighted by ``w`` (B,)."""

    def loss(flat_row: torch.Tensor, x: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        params = {
            slot.name: flat_row[slot.offset : slot.offset + slot.numel].view(slot.shape) for slot in slots
        }
        logits = functional_call(template, params, (x,))  # (B, C)
        return (F.cross_entropy(logits, y, reduction="none") * w).sum()

    return loss


def _forward_fn(
    template: nn.Module, slots: list[_Slot]
) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    def forward(flat_row: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        params = {
            slot.name: flat_row[slot.offset : slot.offset + slot.numel].view(slot.shape) for slot in slots
        }
        return functional_call(template, params, (x,))  # type: ignore[no-any-return]

    return forward


def _init_with_generators(
    name: str,
    example_shape: tuple[int, ...],
    num_classes: int,
    seeds: Sequence[int],
    hidden: int,
    device: torch.device | str | None,
    memory_budget_bytes: int,
) -> tuple[ModelEnsemble, list[torch.Generator]]:
    """Stacked initial weights, and each model's generator where initialisation left it."""
    if len(seeds) == 0:
        raise ValueError("an ensemble needs at least one model")
    template = build_model(name, example_shape, num_classes, hidden=hidden)
    slots = _slots(template)
    flat = torch.empty((len(seeds), sum(slot.numel for slot in slots)))  # (N, P)
    generators: list[torch.Generator] = []
    with torch.no_grad():
        for i, seed in enumerate(seeds):
            generator = torch.Generator().manual_seed(int(seed))
            _reset_parameters(template, generator)  # the very draws build_model makes
            flat[i] = torch.cat([p.reshape(-1) for p in template.parameters()])
            generators.append(generator)
    target = torch.device(device) if device is not None else torch.device("cpu")
    ensemble = ModelEnsemble(template.to(target), flat.to(target), memory_budget_bytes=memory_budget_bytes)
    return ensemble, generators


def _slots(template: nn.Module) -> list[_Slot]:
    slots = []
    offset = 0
    for name, p in template.named_parameters():
        slots.append(_Slot(name, offset, tuple(p.shape)))
        offset += p.numel()
    return slots


def _view(flat: torch.Tensor, slot: _Slot) -> torch.Tensor:
    """(G, *slot.shape) view of one parameter in stacked flat rows (G, P)."""
    return flat[:, slot.offset : slot.offset + slot.numel].view(flat.shape[0], *slot.shape)


def _unflatten(flat: torch.Tensor, slots: list[_Slot]) -> dict[str, torch.Tensor]:
    return {slot.name: _view(flat, slot) for slot in slots}


def _activations_per_example(template: nn.Module, example_shape: tuple[int, ...]) -> int:
    """Floats of activations one example produces in ``template`` (input included)."""
    total = math.prod(example_shape)
    handles = []

    def count(_module: nn.Module, _inputs: object, output: torch.Tensor) -> None:
        nonlocal total
        total += output.numel()

    for module in template.modules():
        if not list(module.children()):
            handles.append(module.register_forward_hook(count))
    device = next(template.parameters()).device
    try:
        with torch.no_grad():
            template(torch.zeros((1, *example_shape), device=device))
    finally:
        for handle in handles:
            handle.remove()
    return max(1, total)
