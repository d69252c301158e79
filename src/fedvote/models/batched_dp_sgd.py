"""PriFedSync's local private training: DP-SGD with Poisson batches, many clients at once.

Each of K steps draws a **Poisson batch**: every one of the client's n records is in it
independently with probability q = B/n (B the *expected* batch size), every per-sample
gradient vₗ is clipped to norm C, and the step is (Σ_{ℓ∈I} vₗ + N(0, σ²C² I)) / B — the
DP-SGD of Abadi et al. (2016) with Opacus's normalisation by the expected batch size.
dp-accounting's PLD of ``PoissonSampledDpEvent(q, GaussianDpEvent(σ))`` under REPLACE_ONE
is then exact for each step (``fedvote.privacy.events.prifedsync_events``). The paper's
Algorithm 2 draws B records without replacement instead and adds N(0, 4C²σ²); its
Theorem 2 analyses that (as a CLT), which is why fedvote does not run it.

This module runs those steps for m clients in one set of tensor operations: the m models
(one architecture, each its own parameters) are stacked, and each step's Poisson batches
are padded to the largest one with zero-weight rows, so a step is a handful of batched
matrix products instead of m Opacus loops.

Per-sample gradient norms come from the layer-wise identity for a linear layer
z = W a + b: the per-sample gradient of W is g aᵀ, whose Frobenius norm is ‖g‖·‖a‖, and
that of b is g (Goodfellow 2015; the "ghost norm" of Lee & Kifer 2021). The clipped sum
Σₗ sₗ gₗ aₗᵀ is then one batched product. This is DP-SGD exactly as Opacus computes it
(per-sample clip factor min(1, C/‖vₗ‖), Opacus's is C/(‖vₗ‖ + 10⁻⁶)); the tests compare
whole Poisson DP-SGD runs with Opacus on the same batches. It covers the multilayer
perceptrons of :mod:`fedvote.models.zoo` (``logistic``, ``mlp``: Flatten, Linear,
ReLU, …, Linear); other architectures are refused.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from fedvote.errors import ConfigError
from fedvote.models.config import OPTIMIZERS

ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8


@dataclass(frozen=True)
class NoisyTraining:
    """What every sampled client runs in one PriFedSync round (DP-SGD with Poisson batches).

    Parameters
    ----------
    layer_sizes : tuple of int
        The perceptron's widths, input first: (784, 128, 10) is 784 → 128 → ReLU → 10.
        The parameters travel flat in ``model.parameters()`` order (W₁, b₁, W₂, b₂, …).
    steps : int
        K, local iterations.
    batch_size : int
        B, the *expected* records per step: client j's records are each drawn with
        probability B/n_j (Poisson sampling; B must not exceed any sampled client's n_j),
        and every step's sum is divided by B.
    clip : float
        C, the per-sample gradient norm bound.
    sigma : float
        σ, the noise multiplier: every step's clipped sum gets N(0, σ²C²) per coordinate
        (Abadi et al. 2016; Opacus); 0 adds no noise (clipped, non-private training).
    learning_rate : float
        γ (constant over the K steps).
    optimizer : {"sgd", "adam"}
        Noisy SGD or noisy Adam (Adam on the same noisy gradient, β =
        (0.9, 0.999), state reset at the start of every round).
    input_shift : tuple of float, optional
        A public constant (in,) subtracted from every record before the model sees it —
        the public pool's mean: centred inputs condition the noisy steps far better
        than raw pixels in [0, 1]. None: the records as they are.

    """

    layer_sizes: tuple[int, ...]
    steps: int
    batch_size: int
    clip: float
    sigma: float
    learning_rate: float
    optimizer: str = "adam"
    input_shift: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if len(self.layer_sizes) < 2 or min(self.layer_sizes) < 1:
            raise ConfigError("model", f"layer sizes must be >= 2 positive widths, got {self.layer_sizes}")
        if self.steps < 1:
            raise ConfigError("local_steps", f"must be at least 1, got {self.steps}")
        if self.batch_size < 1:
            raise ConfigError("batch_size", f"must be at least 1, got {self.batch_size}")
        if not self.clip > 0 or not math.isfinite(self.clip):
            raise ConfigError("per_sample_clip", f"must be > 0, got {self.clip}")
        if not self.sigma >= 0 or not math.isfinite(self.sigma):
            raise ConfigError("sigma", f"must be >= 0, got {self.sigma}")
        if not self.learning_rate > 0:
            raise ConfigError("learning_rate", f"must be > 0, got {self.learning_rate}")
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError("optimizer", f"must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}")
        if self.input_shift is not None and len(self.input_shift) != self.layer_sizes[0]:
            raise ConfigError(
                "input_shift", f"has {len(self.input_shift)} entries, the model takes {self.layer_sizes[0]}"
            )

    @property
    def noise_std(self) -> float:
        """Std of the Gaussian on every step's clipped sum: σC."""
        return self.sigma * self.clip

    @property
    def num_parameters(self) -> int:
        """d, the length of the flat parameter vector."""
        return parameter_count(self.layer_sizes)


def parameter_count(layer_sizes: tuple[int, ...]) -> int:
    """The parameter count d of the perceptron with ``layer_sizes``: Σ (inₗ + 1)·outₗ."""
    return sum((a + 1) * b for a, b in zip(layer_sizes[:-1], layer_sizes[1:], strict=True))


def perceptron_layer_sizes(model: nn.Module) -> tuple[int, ...]:
    """The widths of ``model`` if it is Flatten, Linear, (ReLU, Linear)*; else a ConfigError."""
    modules = list(model.children()) if isinstance(model, nn.Sequential) else [model]
    if modules and isinstance(modules[0], nn.Flatten):
        modules = modules[1:]
    linears = modules[0::2]
    activations = modules[1::2]
    ok = (
        bool(linears)
        and all(isinstance(m, nn.Linear) and m.bias is not None for m in linears)
        and all(isinstance(m, nn.ReLU) for m in activations)
        and len(activations) == len(linears) - 1
    )
    if not ok:
        raise ConfigError("model", "PriFedSync's batched noisy SGD needs a perceptron ('logistic' or 'mlp')")
    layers = [m for m in linears if isinstance(m, nn.Linear)]
    sizes: list[int] = [layers[0].in_features]
    for layer in layers:
        if layer.in_features != sizes[-1]:
            raise ConfigError("model", "the perceptron's layer widths do not chain")
        sizes.append(layer.out_features)
    return tuple(sizes)


def layer_views(flat: torch.Tensor, sizes: tuple[int, ...]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Views (W (m, out, in), b (m, out)) of flat parameters (m, d), layer by layer."""
    layers = []
    offset = 0
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:], strict=True):
        weight = flat[:, offset : offset + fan_in * fan_out].view(-1, fan_out, fan_in)
        offset += fan_in * fan_out
        bias = flat[:, offset : offset + fan_out]
        offset += fan_out
        layers.append((weight, bias))
    return layers


def stacked_logits(params: torch.Tensor, sizes: tuple[int, ...], x: torch.Tensor) -> torch.Tensor:
    """Logits (m, n, classes) of m perceptrons ``params`` (m, d) on their inputs ``x`` (m, n, in)."""
    activation = x
    layers = layer_views(params, sizes)
    for index, (weight, bias) in enumerate(layers):
        activation = torch.baddbmm(bias.unsqueeze(1), activation, weight.transpose(1, 2))
        if index < len(layers) - 1:
            activation = torch.relu(activation)
    return activation


def per_sample_backprop(
    params: torch.Tensor, sizes: tuple[int, ...], x: torch.Tensor, y: torch.Tensor
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Each sample's cross-entropy gradients at every layer's output, and every layer's input.

    For m perceptrons ``params`` (m, d) on their own samples x (m, B, in), y (m, B): the
    inputs aₗ (m, B, inₗ) entering layer ℓ and gₗ = ∂(per-sample loss)/∂zₗ (m, B, outₗ) of
    its pre-activation zₗ = Wₗ aₗ + bₗ, first layer first. Sample ℓ's gradient of Wₗ is
    gₗ aₗᵀ and of bₗ is gₗ; nothing per-sample of size d is materialised.
    """
    layers = layer_views(params, sizes)
    inputs = [x]  # activation entering each layer, (m, B, inₗ)
    pre = []  # pre-activations, (m, B, outₗ)
    activation = x
    for index, (weight, bias) in enumerate(layers):
        z = torch.baddbmm(bias.unsqueeze(1), activation, weight.transpose(1, 2))
        pre.append(z)
        if index < len(layers) - 1:
            activation = torch.relu(z)
            inputs.append(activation)
    # ∂(per-sample cross-entropy)/∂logits = softmax − one-hot, (m, B, classes)
    grad_out = torch.softmax(pre[-1], dim=-1)
    grad_out.scatter_add_(-1, y.unsqueeze(-1), -torch.ones_like(y, dtype=grad_out.dtype).unsqueeze(-1))
    grads = [grad_out]  # ∂loss/∂zₗ, last layer first
    for index in range(len(layers) - 1, 0, -1):
        weight = layers[index][0]
        grads.append(torch.bmm(grads[-1], weight) * (pre[index - 1] > 0))
    grads.reverse()
    return grads, inputs


def weighted_gradient_sum(
    params: torch.Tensor, sizes: tuple[int, ...], grads: list[torch.Tensor], inputs: list[torch.Tensor],
    scale: torch.Tensor,
) -> torch.Tensor:
    """Σₗ sₗ·vₗ per model, (m, d), from :func:`per_sample_backprop`'s pieces and weights s (m, B)."""
    summed = torch.empty_like(params)  # (m, d), filled layer by layer through views
    for (weight_sum, bias_sum), grad, inp in zip(layer_views(summed, sizes), grads, inputs, strict=True):
        scaled = grad * scale.unsqueeze(-1)
        weight_sum.copy_(torch.bmm(scaled.transpose(1, 2), inp))  # Σₗ sₗ gₗ aₗᵀ, (m, out, in)
        bias_sum.copy_(scaled.sum(1))  # Σₗ sₗ gₗ, (m, out)
    return summed


def clipped_gradient_sum(
    params: torch.Tensor,
    sizes: tuple[int, ...],
    x: torch.Tensor,
    y: torch.Tensor,
    clip: float,
    weights: torch.Tensor | None = None,
    norm_offset: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Σₗ wₗ·vₗ/max(1, ‖vₗ‖/C) per model, (m, d), and the per-sample norms ‖vₗ‖, (m, B).

    vₗ is the gradient of the cross-entropy of sample ℓ (x (m, B, in), y (m, B)) at the
    model's parameters, computed layer by layer without materialising it. ``weights``
    (m, B) of 0 and 1 (default all 1) drop the padding rows of Poisson batches: a row of
    weight 0 adds exactly nothing. ``norm_offset`` δ: Opacus's clip factor
    min(1, C/(‖vₗ‖ + δ)) instead (Opacus uses δ = 10⁻⁶), a clipped norm below C either way.
    """
    grads, inputs = per_sample_backprop(params, sizes, x, y)
    squared = torch.zeros(x.shape[:2], dtype=x.dtype, device=x.device)  # (m, B)
    for grad, inp in zip(grads, inputs, strict=True):
        squared += grad.pow(2).sum(-1) * (inp.pow(2).sum(-1) + 1.0)
    norms = squared.sqrt()
    if norm_offset is None:
        scale = 1.0 / torch.clamp(norms / clip, min=1.0)  # (m, B)
    else:
        scale = (clip / (norms + norm_offset)).clamp(max=1.0)  # (m, B), as Opacus's DPOptimizer
    if weights is not None:
        scale = scale * weights
    return weighted_gradient_sum(params, sizes, grads, inputs, scale), norms


@dataclass(frozen=True)
class PaddedBatches:
    """One step's batches of m clients (Poisson or mini-batches), padded to the largest.

    ``index`` (m, L): each client's drawn records, local indices into its own n records
    (padding rows repeat index 0); ``weight`` (m, L): 1 for a drawn record, 0 for padding.
    L is the largest batch drawn this step (0 when every batch is empty).
    """

    index: torch.Tensor
    weight: torch.Tensor

    @classmethod
    def pad(cls, batches: Sequence[torch.Tensor], device: torch.device) -> PaddedBatches:
        """The m clients' batches (each a 1-D tensor of local indices, any lengths), padded."""
        one_step = PaddedSteps.pad([batches], device)  # (1, m, L)
        return cls(index=one_step.index[0], weight=one_step.weight[0])

    @property
    def sizes(self) -> torch.Tensor:
        """Each client's batch size |I_j|, (m,)."""
        return self.weight.sum(dim=1).to(torch.int64)


@dataclass(frozen=True)
class PaddedSteps:
    """E local steps' batches of m clients at once, every batch padded to the longest of any step.

    ``index`` (E, m, L): client j's drawn records at step k, local indices into its own n
    records (padding rows repeat index 0); ``weight`` (E, m, L): 1 for a drawn record, 0 for
    padding. Plain SGD's batches, min(B, n_j) rows every step, are padded once for the round
    instead of once a step.
    """

    index: torch.Tensor
    weight: torch.Tensor

    @classmethod
    def pad(cls, steps: Sequence[Sequence[torch.Tensor]], device: torch.device) -> PaddedSteps:
        """``steps[k][j]``: client j's rows at step k (1-D local indices, any lengths); m clients a step."""
        clients = len(steps[0]) if len(steps) else 0
        sizes = torch.tensor([[len(batch) for batch in step] for step in steps], dtype=torch.int64)
        sizes = sizes.reshape(len(steps), clients)  # (E, m)
        longest = int(sizes.max()) if sizes.numel() else 0
        if sizes.numel() and int(sizes.min()) == longest:  # no padding (plain SGD, every n ≥ the batch)
            index = torch.stack([torch.stack(list(step)) for step in steps]).to(torch.int64)  # (E, m, L)
        else:
            index = torch.zeros(len(steps), clients, longest, dtype=torch.int64)  # (E, m, L)
            for k, step in enumerate(steps):
                for j, batch in enumerate(step):
                    index[k, j, : len(batch)] = batch
        weight = (torch.arange(longest) < sizes.unsqueeze(-1)).to(torch.float32)  # (E, m, L)
        return cls(index=index.to(device), weight=weight.to(device))


def poisson_rates(counts: torch.Tensor, batch_size: int) -> torch.Tensor:
    """q_j = B/n_j in float64, rounded *down* to a multiple of 2⁻⁵³, (m,).

    A float64 key uniform on the 2⁻⁵³ grid is below a multiple of 2⁻⁵³ with exactly that
    probability, so a record is drawn with probability at most B/n_j — never more than
    the rate the accountant is given.
    """
    grid = 2.0**53
    return torch.floor(batch_size / counts.to(torch.float64) * grid) / grid


def poisson_batches(counts: torch.Tensor, batch_size: int, generator: torch.Generator) -> PaddedBatches:
    """Draw every record of client j independently with probability B/n_j (one step).

    ``counts`` (m,) are the clients' record counts n_j. Uses one (m, max n) block of
    float64 uniforms from ``generator`` (the privacy randomness), whatever the data.
    """
    m = counts.shape[0]
    device = counts.device
    width = int(counts.max()) if m else 0
    keys = torch.rand(m, width, generator=generator, device=device, dtype=torch.float64)  # (m, n_max)
    inside = torch.arange(width, device=device) < counts.unsqueeze(1)  # (m, n_max): a real record
    drawn = (keys < poisson_rates(counts, batch_size).unsqueeze(1)) & inside  # (m, n_max)
    sizes = drawn.sum(dim=1)  # (m,)
    longest = int(sizes.max()) if m else 0
    # Drawn records first (stable: in record order), then cut to the longest batch.
    order = torch.sort(drawn.to(torch.int8), dim=1, descending=True, stable=True).indices[:, :longest]
    weight = (torch.arange(longest, device=device) < sizes.unsqueeze(1)).to(torch.float32)  # (m, L)
    index = torch.where(weight > 0, order, torch.zeros_like(order))  # (m, L)
    return PaddedBatches(index=index, weight=weight)


def noisy_local_training(
    params: torch.Tensor,
    features: torch.Tensor,
    labels: torch.Tensor,
    offsets: torch.Tensor,
    counts: torch.Tensor,
    training: NoisyTraining,
    generator: torch.Generator,
) -> torch.Tensor:
    """K steps of DP-SGD with Poisson batches for m clients at once; their private models (m, d).

    Step k: client j draws a Poisson batch I at rate B/n_j (:func:`poisson_batches`) and
    moves by −γ·(Σ_{ℓ∈I} clip_C(vₗ) + N(0, σ²C² I)) / B (SGD), or Adam on that gradient.

    Parameters
    ----------
    params : Tensor (m, d)
        Each client's starting point, its helper model h̃⁽ⁱ⁾.
    features, labels : Tensor (N, in), (N,)
        Every record, the clients' records contiguous.
    offsets, counts : Tensor (m,)
        Client j's records are ``features[offsets[j] : offsets[j] + counts[j]]``.
    training : NoisyTraining
        K, B, C, σ, γ and the optimizer.
    generator : torch.Generator
        The privacy randomness: per step, the batch keys (:func:`poisson_batches`) then the
        noise (on ``params``' device).

    """
    sizes = training.layer_sizes
    m, d = params.shape
    if d != training.num_parameters:
        needed = training.num_parameters
        raise ConfigError("model", f"parameters have {d} entries, the perceptron {sizes} needs {needed}")
    if m and int(counts.min()) < training.batch_size:
        raise ConfigError(
            "batch_size", f"B = {training.batch_size} exceeds a sampled client's {int(counts.min())} records"
        )
    device = params.device
    weights = params.clone()
    if m == 0:
        return weights
    # Adam is elementwise, so one optimizer over the stacked (m, d) tensor is m
    # independent Adams; fused: one pass over the parameters per step. Fresh every round.
    holder = torch.nn.Parameter(weights)
    adam = (
        torch.optim.Adam([holder], lr=training.learning_rate, betas=ADAM_BETAS, eps=ADAM_EPS, fused=True)
        if training.optimizer == "adam"
        else None
    )
    for _ in range(training.steps):
        batches = poisson_batches(counts, training.batch_size, generator)
        summed = clipped_batch_sum(holder.detach(), sizes, features, labels, offsets, batches, training.clip)
        if training.noise_std > 0:
            noise = torch.randn(m, d, generator=generator, device=device)
            summed.add_(noise, alpha=training.noise_std)
        gradient = summed.div_(training.batch_size)  # (Σ clip(vₗ) + N(0, σ²C²)) / B
        if adam is None:
            holder.data.add_(gradient, alpha=-training.learning_rate)
        else:
            holder.grad = gradient
            adam.step()
    return holder.detach()


def clipped_batch_sum(
    params: torch.Tensor,
    sizes: tuple[int, ...],
    features: torch.Tensor,
    labels: torch.Tensor,
    offsets: torch.Tensor,
    batches: PaddedBatches,
    clip: float,
    norm_offset: float | None = None,
) -> torch.Tensor:
    """The clipped gradient sums (m, d) of one step's batches; zeros when every batch is empty.

    Client j's batch is ``batches`` row j, local indices into its records
    ``features[offsets[j] :]`` (R, in); the clip is :func:`clipped_gradient_sum`'s.
    """
    if batches.index.shape[1] == 0:
        return torch.zeros_like(params)
    picked = batches.index + offsets.unsqueeze(1)  # (m, L), rows of ``features``
    x, y = features[picked], labels[picked]  # (m, L, in), (m, L)
    summed, _ = clipped_gradient_sum(params, sizes, x, y, clip, batches.weight.to(x.dtype), norm_offset)
    return summed


def stacked_accuracy(
    params: torch.Tensor, sizes: tuple[int, ...], x: torch.Tensor, y: torch.Tensor
) -> torch.Tensor:
    """Accuracy of each of m perceptrons (m, d) on its own test set x (m, n, in), y (m, n): (m,)."""
    with torch.no_grad():
        predictions = stacked_logits(params, sizes, x).argmax(-1)
    return (predictions == y).to(torch.float64).mean(dim=1)
