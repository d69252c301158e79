"""The gradient baselines' local rounds for m agents at once: stacked perceptrons, padded batches.

FedAvg and DP-FedAvg (Algorithms 4 and 6 of the voting paper's appendix) run E plain SGD
iterations on mini-batches from θ; DP-FedSGD runs E DP-SGD iterations (Abadi et al.
2016, as Opacus computes them). An in-process transport that holds every agent can run
the sampled agents' rounds together: their m models (one architecture, each its own
parameters) are stacked (m, d), each step's batches are padded to the largest with
zero-weight rows (:class:`~fedvote.models.batched_dp_sgd.PaddedBatches`), and a step is a
handful of batched matrix products (:func:`~fedvote.models.batched_dp_sgd.per_sample_backprop`)
instead of m autograd passes.

Nothing here draws randomness: the batches (and DP-SGD's noise) are each agent's own draws
(:func:`fedvote.agents.local_updates.local_draws`), so a batched round equals the loop's
(:func:`fedvote.models.local_training.sgd_steps`, :func:`~fedvote.models.local_training.dp_sgd_steps`)
up to floating-point rounding. It covers the perceptrons of :mod:`fedvote.models.zoo`
(``logistic``, ``mlp``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from fedvote.models.batched_dp_sgd import PaddedBatches, PaddedSteps, clipped_batch_sum, layer_views

# Opacus's DPOptimizer clips by C/(‖v‖ + 10⁻⁶) (opacus/optimizers/optimizer.py, clip_and_accumulate).
OPACUS_NORM_OFFSET = 1e-6
# batched_sgd gathers its steps' records in blocks of at most this many bytes: a round of 20
# steps of 10 MNIST agents' 32-record batches is 20 MB, one block; 100 steps of 100 agents'
# would be 1 GB at once.
GATHER_BYTES = 64 * 2**20


def batched_sgd(
    params: torch.Tensor,
    sizes: tuple[int, ...],
    features: torch.Tensor,
    labels: torch.Tensor,
    offsets: torch.Tensor,
    steps: PaddedSteps,
    learning_rate: float,
) -> torch.Tensor:
    """Plain mini-batch SGD of m perceptrons from ``params`` (m, d); the trained parameters (m, d).

    Step k: θ_j ← θ_j − η·∇(mean cross-entropy over agent j's batch I_jk), the batch
    ``steps.index[k, j]`` (local indices into agent j's records, which are
    ``features[offsets[j] :]``, (R, in)). An empty batch leaves θ_j as it is.

    One step is one forward and one backward pass written out (the backward of
    :func:`~fedvote.models.batched_dp_sgd.per_sample_backprop`, summed over the batch), each
    layer updated in place as soon as the layer below has read its weights: half the tensor
    operations of gradient-then-update, which is what a step of small perceptrons costs. The
    steps' records are gathered a block of steps at a time (at most :data:`GATHER_BYTES` of
    them; every step of a DP-FedAvg round on MNIST in one block), not one gather a step.
    """
    weights = params.clone()
    if steps.index.shape[-1] == 0:  # every batch of every step empty
        return weights
    layers = layer_views(weights, sizes)  # views into ``weights``, updated in place
    transposed = [weight.transpose(1, 2) for weight, _ in layers]  # (m, inₗ, outₗ) views
    biases = [bias.unsqueeze(1) for _, bias in layers]  # (m, 1, outₗ) views
    rows = steps.index + offsets.view(1, -1, 1)  # (E, m, L), rows of ``features``
    step_labels = labels[rows].unsqueeze(-1)  # (E, m, L, 1)
    per_row = steps.weight / steps.weight.sum(dim=-1, keepdim=True).clamp(min=1.0)  # (E, m, L)
    per_row = per_row.unsqueeze(-1)  # (E, m, L, 1)
    minus_one = torch.full_like(per_row[0], -1.0)  # (m, L, 1), the one-hot's −1 at each label
    step_bytes = rows[0].numel() * features[0].numel() * features.element_size()
    block = max(1, GATHER_BYTES // step_bytes)  # steps gathered at once
    last = len(layers) - 1
    for k in range(steps.index.shape[0]):
        if k % block == 0:
            gathered = features[rows[k : k + block]]  # (≤ block, m, L, in)
        inputs = [gathered[k % block]]  # activation entering each layer, (m, L, inₗ)
        for index in range(last + 1):
            logits = torch.baddbmm(biases[index], inputs[-1], transposed[index])  # (m, L, outₗ)
            if index < last:
                inputs.append(torch.relu(logits))
        # ∂(weighted mean cross-entropy)/∂logits = w·(softmax − one-hot), (m, L, classes)
        grad = torch.softmax(logits, dim=-1)
        grad.scatter_add_(-1, step_labels[k], minus_one)
        grad.mul_(per_row[k])
        for index in range(last, -1, -1):
            weight, bias = layers[index]
            upstream = grad  # ∂loss/∂zₗ, (m, L, outₗ)
            if index > 0:  # the layer below reads Wₗ before its update
                grad = torch.bmm(upstream, weight).mul_(inputs[index] > 0)  # (m, L, inₗ)
            weight.baddbmm_(upstream.transpose(1, 2), inputs[index], alpha=-learning_rate)  # W −= η Σ g aᵀ
            bias.sub_(upstream.sum(1), alpha=learning_rate)
    return weights


def batched_dp_sgd(
    params: torch.Tensor,
    sizes: tuple[int, ...],
    features: torch.Tensor,
    labels: torch.Tensor,
    offsets: torch.Tensor,
    steps: Sequence[PaddedBatches],
    noise: torch.Tensor,
    step_sizes: torch.Tensor,
    clip: float,
) -> torch.Tensor:
    """DP-SGD of m perceptrons from ``params`` (m, d) on given batches and noise; trained (m, d).

    Step k: θ_j ← θ_j − η_j·(Σ_{ℓ∈I_jk} clip_C(vₗ) + ξ_jk), with ``noise[k]`` = ξ_k (m, d)
    the agents' own N(0, z²C²) draws and ``step_sizes`` η_j (m,) — η/(q_b·n_j) in
    :func:`~fedvote.models.local_training.dp_sgd_steps`, Opacus's summed loss over the
    expected batch. Each per-sample gradient is clipped by Opacus's factor
    min(1, C/(‖vₗ‖ + 10⁻⁶)) (:func:`~fedvote.models.batched_dp_sgd.clipped_gradient_sum`), so
    its norm is below C as in the loop. An empty batch is a step of noise alone.
    """
    weights = params.clone()
    scale = step_sizes.to(params.dtype).unsqueeze(1)  # (m, 1)
    for batches, xi in zip(steps, noise, strict=True):
        summed = clipped_batch_sum(
            weights, sizes, features, labels, offsets, batches, clip, norm_offset=OPACUS_NORM_OFFSET
        )  # (m, d)
        weights.sub_(scale * summed.add_(xi))  # (m, d)
    return weights
