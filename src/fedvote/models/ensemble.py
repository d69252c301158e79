"""Batched training of N same-architecture models: every agent's teacher at once.

Looping over agents one small model at a time spends most of its time in Python
overhead and tiny matrix products. :func:`fit_ensemble` instead stacks the N models'
parameters along a leading agent axis and takes one vectorised step for all of them,
with a per-agent Adam state. It reproduces
:func:`fedvote.models.training.fit_classifier` run on each agent alone, up to
floating-point rounding:

* agent i's initial weights come from ``torch.Generator().manual_seed(seeds[i])``
  exactly as :func:`fedvote.models.zoo.build_model` draws them, and its validation split
  (with early stopping) and batch order from the same generator, one ``randperm`` per epoch;
* per epoch every agent takes ``ceil(n_i / batch_size)`` steps, as it would alone,
  the last one on a partial batch (its loss is the mean over the real records);
* agents with fewer batches than the largest sit out the trailing steps of each
  epoch: their rows of the step are padding, masked out of the loss, and neither
  their parameters nor their Adam state (moments, step count) move;
* with early stopping (``TrainingConfig.patience``) each agent measures its own
  validation loss after every epoch; an agent that stops is masked like padding for the
  rest of the run, and every agent ends with the weights of its own best epoch.

Parameters live slot-major during training (parameter k of all G models is one
contiguous (G, *shape) block), so batched products write gradients in place and, while
all agents have taken the same number of steps, one fused Adam kernel updates every
parameter of every model in one pass. Gradients come from hand-written batched matrix
products for stacks of Flatten/Linear/ReLU (the logistic and MLP models), from a
hand-written backward through grouped channels-last convolutions
(:mod:`fedvote.models.stacked_conv`) for Conv/ReLU/MaxPool/Flatten/Linear networks (the
CNN), and from ``torch.func.vmap`` over ``torch.func.functional_call`` for any other
architecture. Groups of agents are independent, so large ensembles are trained group by
group to bound memory (``memory_budget_bytes``); the result does not depend on the
grouping.

On 2 CPU cores the batched CNN is faster than the per-agent loop (where the earlier
autograd form over contiguous grouped convolutions was slower): see
``benchmarks/bench_teachers.py`` and docs/performance.md for the measured figures.

The pieces of one step — the parameter stacks, the per-architecture gradient kernels and the
stacked Adam — are in :mod:`fedvote.models.ensemble_kernels`; this module holds the ensemble
and the training loop (groups, validation splits, epoch orders, early stopping).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.func import vmap

from fedvote.models.allocator import retain_freed_memory
from fedvote.models.config import resolve_augment
from fedvote.models.crop_flip import augment_agents
from fedvote.models.ensemble_kernels import (
    _activations_per_example,
    _forward_fn,
    _Kernels,
    _kernels,
    _linear_stack,
    _manual_stacked_layers,
    _Slot,
    _slots,
    _SlotStack,
    _StackedAdam,
    _unflatten,
)
from fedvote.models.stacked_conv import StackedConvNet
from fedvote.models.training import TrainingConfig
from fedvote.models.zoo import build_model, initial_draws, resolve_model_name

_DEFAULT_MEMORY_BUDGET = 1 << 30  # bytes of activations per vectorised pass
# Queries per stacked forward pass of ModelEnsemble.logits for convolutional networks on a
# CPU (fastest of 8 to 1,000 measured); on an accelerator as many as memory_budget_bytes allows.
_STACKED_QUERIES = 32


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
        """Every model's logits on the same Q queries: (N, Q, C) float32 on the ensemble's device.

        Convolutional networks go through the stacked channels-last forward of
        :class:`~fedvote.models.stacked_conv.StackedConvNet`, ``_STACKED_QUERIES`` queries
        per pass (on 1 CPU thread 5x faster than one model after another for 20 CNNs on
        1,000 MNIST-sized images); other architectures through ``vmap``.
        """
        x = torch.as_tensor(features, dtype=torch.float32).to(self.device)  # (Q, *shape)
        n, q = self.num_models, x.shape[0]
        example_shape = tuple(x.shape[1:])
        num_classes = int(self.template(torch.zeros((1, *example_shape), device=self.device)).shape[-1])
        out = torch.empty((n, q, num_classes), device=self.device)  # (N, Q, C)
        if q == 0:
            return out
        activations = _activations_per_example(self.template, example_shape)
        per_pair = 2 * 4 * activations
        pairs = max(1, self.memory_budget_bytes // per_pair)  # (model, query) pairs per pass
        layers = _manual_stacked_layers(self.template)
        if layers is not None and _linear_stack(self.template) is None:
            net = StackedConvNet(layers, activations)  # chunks the models on a CPU
            params = list(self.params.values())  # each (N, *shape)
            step = _STACKED_QUERIES if self.device.type == "cpu" else max(1, pairs // n)
            for s in range(0, q, step):
                queries = x[s : s + step]  # (q', *shape), the same for every model
                out[:, s : s + step] = net.logits(params, queries.expand(n, *queries.shape))
            return out
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
    same number of steps per epoch for every agent, whatever the others' data sizes,
    and, with early stopping (``config.patience``), the same held-out records, the
    same stopping epoch and the same best-epoch weights per agent.

    Parameters
    ----------
    features : sequence of np.ndarray
        Agent i's examples, (n_i, *shape); sizes may differ, and may be zero (such an
        agent keeps its initial weights, as it would alone).
    labels : sequence of np.ndarray
        Agent i's labels, (n_i,) int.
    config : TrainingConfig
        Architecture and optimiser settings shared by all agents. Random-shift
        augmentation (``augment_shift``) is not supported for image examples; crop-and-flip
        (``augment``, :mod:`fedvote.models.crop_flip`) is, from each agent's own generator.
    seeds : sequence of int
        Agent i's training seed (initialisation, then validation split and batch order).
    num_classes : int
        Number of classes C.
    hidden : int
        Hidden width of the MLP (default 128, as ``build_model``).
    device : torch.device or str or None
        Where to train (default CPU), e.g. ``"cuda"``.
    memory_budget_bytes : int
        Rough bound on the working memory of one group of agents trained together (their
        data, parameters, Adam state and activations); larger ensembles are trained
        group by group (the result does not depend on it).

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
    if config.augment_shift and len(example_shape) == 3:
        raise ValueError("fit_ensemble does not augment: use fit_classifier for augment_shift > 0")
    for i, (f, y) in enumerate(zip(features, labels, strict=True)):
        if f.shape[0] != y.shape[0]:
            raise ValueError(f"agent {i}: {f.shape[0]} examples but {y.shape[0]} labels")
    ensemble, generators = _init_with_generators(
        config.model, example_shape, num_classes, seeds, hidden, device, memory_budget_bytes
    )
    if ensemble.device.type == "cpu":
        retain_freed_memory()  # a step's activations are reallocated every step (fedvote.models.allocator)
    kernels = _kernels(ensemble.template, ensemble._slots, example_shape)
    sizes = np.array([f.shape[0] for f in features], dtype=np.int64)  # (N,)
    for members in _groups(ensemble, example_shape, sizes, config, memory_budget_bytes):
        # The group's data, one copy: x (sum n_i, *shape), y (sum n_i,); agent i from offsets[i].
        x_group = torch.from_numpy(np.concatenate([np.asarray(f, np.float32) for f in features[members]]))
        y_group = torch.from_numpy(np.concatenate([np.asarray(t, np.int64) for t in labels[members]]))
        offsets = np.concatenate([[0], np.cumsum(sizes[members])[:-1]]).astype(np.int64)  # (G,)
        trained = _fit_group(
            ensemble.flat_params[members],
            ensemble._slots,
            kernels,
            x_group.to(ensemble.device),
            y_group.to(ensemble.device),
            sizes[members],
            offsets,
            generators[members],
            config,
        )
        ensemble.flat_params[members] = trained
        del x_group, y_group, trained
    return ensemble


def _groups(
    ensemble: ModelEnsemble,
    example_shape: tuple[int, ...],
    sizes: np.ndarray,
    config: TrainingConfig,
    memory_budget_bytes: int,
) -> list[slice]:
    """Consecutive groups of agents of about equal size whose training fits the budget.

    Per agent: its data (float32), five copies of its parameters (weights, gradient, two
    Adam moments, best-epoch weights) and the activations of one mini-batch (three
    floats per activation: value, gradient, temporary).
    """
    n_agents = len(sizes)
    example_floats = math.prod(example_shape)
    per_agent = 4 * (
        int(sizes.max()) * example_floats
        + 5 * ensemble.flat_params.shape[1]
        + 3 * config.batch_size * _activations_per_example(ensemble.template, example_shape)
    )
    largest = max(1, min(n_agents, memory_budget_bytes // max(1, per_agent)))
    count = -(-n_agents // largest)
    size = -(-n_agents // count)
    return [slice(start, min(start + size, n_agents)) for start in range(0, n_agents, size)]


def _fit_group(
    rows: torch.Tensor,
    slots: list[_Slot],
    kernels: _Kernels,
    x: torch.Tensor,
    y: torch.Tensor,
    sizes: np.ndarray,
    offsets: np.ndarray,
    generators: Sequence[torch.Generator],
    config: TrainingConfig,
) -> torch.Tensor:
    """Train the G models whose row-major parameters are ``rows`` (G, P); returns the trained rows.

    ``x`` (sum n_i, *shape) and ``y`` hold the group's data, agent i's from ``offsets[i]``.
    """
    device = rows.device
    g, batch = rows.shape[0], config.batch_size
    params = _SlotStack.from_rows(rows, slots)
    grads = params.zeros_like()
    adam = _StackedAdam(params, grads, config)
    split = _validation_split(sizes, offsets, generators, config)
    train_sizes = sizes - split.sizes  # (G,)
    steps_per_epoch = -(-train_sizes // batch)  # (G,) ceil(n_i / B): as each agent alone
    max_steps = int(steps_per_epoch.max())
    if max_steps <= 1:
        # Every agent's records fit in one batch: a step need only be as wide as the largest
        # agent's records (100 digits agents hold ~14 each: the rest of a 32-wide step was padding).
        batch = max(1, int(train_sizes.max()))
    weights = _batch_weights(train_sizes, max_steps, batch).to(device)  # (steps, G, B)
    shape = tuple(x.shape[1:])
    crop_flip = x.dim() == 4 and resolve_augment(
        config.augment, resolve_model_name(config.model, shape), shape
    ) == "crop-flip"  # fmt: skip
    x_batch = torch.empty((g * batch, *x.shape[1:]), dtype=x.dtype, device=device)  # reused buffers
    y_batch = torch.empty(g * batch, dtype=y.dtype, device=device)
    orders = _EpochOrders(split.train_rows, max_steps, batch)
    early = split.sizes > 0  # (G,) agents that stop early
    stopped = np.zeros(g, dtype=bool)
    waited = np.zeros(g, dtype=np.int64)
    best_loss = torch.full((g,), math.inf, device=device)
    best = params.clone() if early.any() else None
    for _ in range(config.planned_epochs):
        order = orders.draw(stopped, generators)  # (steps, G * B)
        order = order.to(device)
        for s in range(max_steps):
            active = (steps_per_epoch > s) & ~stopped  # agents out of data (or stopped) sit out
            if not active.any():
                break
            torch.index_select(x, 0, order[s], out=x_batch)
            torch.index_select(y, 0, order[s], out=y_batch)
            xs, ys = x_batch.view(g, batch, *x.shape[1:]), y_batch.view(g, batch)  # (G, B, *shape), (G, B)
            if crop_flip:  # each agent's real records of this step, from its own generator
                real = np.where(active, np.clip(train_sizes - s * batch, 0, batch), 0)  # (G,)
                xs = augment_agents(xs, generators, real.tolist())
            kernels.grad(params.views, xs, ys, weights[s], grads.views)
            adam.step(active)
        if best is None or config.patience is None:
            continue
        losses = _validation_loss(kernels, params, x, y, split, batch)  # (G,)
        open_ = torch.from_numpy(early & ~stopped).to(device)
        improved = open_ & (losses < best_loss)  # (G,)
        best_loss = torch.where(improved, losses, best_loss)
        best.copy_models_(params, improved)
        improved_np = improved.cpu().numpy()
        waited = np.where(improved_np, 0, waited + (early & ~stopped))
        stopped |= early & (waited >= config.patience)
        if stopped[train_sizes > 0].all():
            break
    if best is not None:
        params.copy_models_(best, torch.from_numpy(early).to(device))
    return params.to_rows()


@dataclass(frozen=True)
class _Split:
    """Each agent's training and held-out rows of the group's data (early stopping).

    ``train_rows[i]`` (n_i - v_i,) int64; ``val_rows`` (G, V) and ``val_weights`` (G, V):
    agent i's v_i held-out rows, padded to V = max v_i with weight 0 (else 1 / v_i).
    """

    sizes: np.ndarray  # (G,) v_i
    train_rows: list[np.ndarray]
    val_rows: torch.Tensor
    val_weights: torch.Tensor


def _validation_split(
    sizes: np.ndarray, offsets: np.ndarray, generators: Sequence[torch.Generator], config: TrainingConfig
) -> _Split:
    """Draw each agent's held-out records exactly as ``fit_classifier`` does (one randperm)."""
    g = len(sizes)
    val_sizes = np.array([config.validation_size(int(n)) for n in sizes], dtype=np.int64)  # (G,)
    width = int(val_sizes.max()) if g else 0
    val_rows = np.zeros((g, width), dtype=np.int64)
    val_weights = np.zeros((g, width), dtype=np.float32)
    train_rows: list[np.ndarray] = []
    for i, (n, v, generator) in enumerate(zip(sizes, val_sizes, generators, strict=True)):
        if v == 0:
            train_rows.append(np.arange(n, dtype=np.int64) + offsets[i])
            continue
        perm = torch.randperm(int(n), generator=generator).numpy()
        train_rows.append(np.sort(perm[v:]) + offsets[i])
        val_rows[i, :v] = perm[:v] + offsets[i]
        val_rows[i, v:] = offsets[i]
        val_weights[i, :v] = 1.0 / v
    return _Split(val_sizes, train_rows, torch.from_numpy(val_rows), torch.from_numpy(val_weights))


def _batch_weights(train_sizes: np.ndarray, max_steps: int, batch: int) -> torch.Tensor:
    """(steps, G, B) float32: 1/|batch| for agent i's real records in step s, 0 for padding."""
    padded = np.arange(max_steps * batch)[None, :] < train_sizes[:, None]  # (G, steps * B)
    valid = padded.reshape(len(train_sizes), max_steps, batch).transpose(1, 0, 2)  # (steps, G, B)
    counts = np.maximum(valid.sum(axis=2, keepdims=True), 1)  # (steps, G, 1)
    return torch.from_numpy((valid / counts).astype(np.float32))


class _EpochOrders:
    """Each epoch's mini-batches of a group: (steps, G * B) rows of the group's data.

    Agent i's records in ``randperm`` order from its generator (as ``fit_classifier``);
    padding repeats its first row (weight 0). Stopped agents draw nothing (row 0 throughout).
    Every agent's rows are laid end to end once; an epoch draws the permutations one agent
    at a time (each from its own generator) and places them all at once.
    """

    def __init__(self, train_rows: list[np.ndarray], max_steps: int, batch: int) -> None:
        self.g, self.steps, self.batch = len(train_rows), max_steps, batch
        self.counts = [rows.shape[0] for rows in train_rows]  # n_i, for randperm
        self.sizes = np.array(self.counts, dtype=np.int64)  # (G,) n_i
        self.starts = np.cumsum(self.sizes) - self.sizes  # (G,) where agent i's rows begin
        laid = [np.asarray(rows, dtype=np.int64) for rows in train_rows]
        self.rows = np.concatenate(laid) if laid else np.zeros(0, dtype=np.int64)  # (Σ n_i,)

    def draw(self, stopped: np.ndarray, generators: Sequence[torch.Generator]) -> torch.Tensor:
        """One epoch's order; one permutation from each drawing agent's generator."""
        order = np.zeros((self.g, self.steps * self.batch), dtype=np.int64)  # (G, steps * B)
        drawing = np.flatnonzero(~stopped & (self.sizes > 0))  # (D,)
        if drawing.size:
            sizes, starts = self.sizes[drawing], self.starts[drawing]  # (D,)
            drawn = [torch.randperm(self.counts[i], generator=generators[i]) for i in drawing.tolist()]
            perms = torch.cat(drawn)  # (Σ n_d,) each agent's permutation of its own records
            order[drawing] = self.rows[starts][:, None]  # padding: the agent's first row
            agent = np.repeat(drawing, sizes)  # (Σ n_d,) whose record each entry is
            position = np.arange(agent.size) - np.repeat(np.cumsum(sizes) - sizes, sizes)  # (Σ n_d,)
            order[agent, position] = self.rows[np.repeat(starts, sizes) + perms.numpy()]
        steps_major = order.reshape(self.g, self.steps, self.batch).transpose(1, 0, 2)  # (steps, G, B)
        return torch.from_numpy(steps_major.reshape(self.steps, self.g * self.batch).copy())


def _validation_loss(
    kernels: _Kernels, params: _SlotStack, x: torch.Tensor, y: torch.Tensor, split: _Split, batch: int
) -> torch.Tensor:
    """Each agent's mean cross-entropy on its held-out records, (G,); 0 without any."""
    g = params.g
    device = params.data.device
    total = torch.zeros(g, device=device)
    rows, weights = split.val_rows.to(device), split.val_weights.to(device)  # (G, V)
    with torch.no_grad():
        for start in range(0, rows.shape[1], batch):
            chunk = rows[:, start : start + batch]  # (G, b)
            b = chunk.shape[1]
            xs = x.index_select(0, chunk.reshape(-1)).view(g, b, *x.shape[1:])  # (G, b, *shape)
            ys = y.index_select(0, chunk.reshape(-1)).view(g, b)  # (G, b)
            total += kernels.loss(params.views, xs, ys, weights[:, start : start + batch])
    return total


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
    # The very draws build_model makes (zoo._reset_parameters), each straight into its slot of
    # the row: a contiguous slice is filled in the logical order a fresh tensor would be.
    slot_of = {id(p): slot for slot, p in zip(slots, template.parameters(), strict=True)}
    draws = [(slot_of[id(parameter)], bound) for parameter, bound in initial_draws(template)]
    generators: list[torch.Generator] = []
    with torch.no_grad():
        for i, seed in enumerate(seeds):
            generator = torch.Generator().manual_seed(int(seed))
            for slot, bound in draws:
                flat[i, slot.offset : slot.offset + slot.numel].uniform_(-bound, bound, generator=generator)
            generators.append(generator)
    target = torch.device(device) if device is not None else torch.device("cpu")
    ensemble = ModelEnsemble(template.to(target), flat.to(target), memory_budget_bytes=memory_budget_bytes)
    return ensemble, generators


