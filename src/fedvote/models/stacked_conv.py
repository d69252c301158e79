"""G convolutional networks trained as one: grouped channels-last convolutions, backward by hand.

:func:`fedvote.models.ensemble.fit_ensemble` trains every agent's CNN at once. Here the G
models' activations are one channels-last image batch (B, H, W, G * C): model g's channels
are the g-th block of the last axis, each convolution is one grouped convolution
(``groups=G``) whose g-th group holds model g's kernels, so no model sees another's channels.
Each model's loss is its own weighted cross-entropy and the models share no parameter, so
the gradient of the summed loss with respect to model g's parameters is model g's gradient:
the backward pass below computes exactly what autograd computes for each model alone
(``torch.autograd`` on :class:`~fedvote.models.zoo.SmallCNN`), in the same operations, up to
floating-point rounding.

Why by hand, measured on 2 CPU cores against the per-agent loop of ``fit_classifier``
(``benchmarks/bench_teachers.py``; docs/performance.md, "Teacher training"):

* a grouped convolution over channels-last activations costs about what each agent's own
  convolution costs, where over contiguous (NCHW) activations, the layout of the autograd
  path (``fedvote.models.ensemble_kernels._stacked_forward``), it costs 1.5-2x that, and up to 30x
  for the first layer (one input channel per group);
* PyTorch's CPU max-pooling is about 10x faster on channels-last than on NCHW tensors, where
  the loop spends more time pooling than convolving;
* ReLU followed by max-pooling is computed as pooling then ReLU: ``relu(max(a)) = max(relu(a))``
  and the gradient reaches the window's first maximum (the element ``max_pool2d`` picks) in
  both orders exactly when that maximum is positive (otherwise ReLU's backward zeroes it), so
  the result is the same with the ReLU on a quarter of the elements;
* no autograd graph: each op keeps only what its backward reads;
* agents are processed in chunks (``CHUNK_BYTES`` of kept activations) so that one chunk's
  activations stay in the last-level cache between its forward and backward pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from fedvote.models.pooling import is_max_pool_2x2, max_pool_2x2

# On a CPU, activation bytes (forward values kept for the backward, one mini-batch) of one
# chunk of agents processed together: 4 MNIST CNNs at batch 32 (5.7 MB each), the fastest of
# 1, 2, 4, 8 and 16 agents per chunk (CPU time, 1 thread, 2-core AMD EPYC, 32 MiB L3).
CHUNK_BYTES = 24 << 20


@dataclass(frozen=True)
class _Op:
    """One step of the stacked network.

    ``kind``: "conv", "linear" (``param`` is the weight's index in the parameter list,
    ``bias`` whether the next one is its bias), "relu", "pool" (a MaxPool2d, followed by a
    ReLU when ``relu``: the ReLU that preceded or followed it in the network), "flatten".
    """

    kind: str
    layer: nn.Module | None = None
    param: int = -1
    bias: bool = False
    relu: bool = False


def compile_layers(layers: list[nn.Module]) -> list[_Op]:
    """The ops of a Conv2d/ReLU/MaxPool2d/Flatten/Linear sequence (as ``_stacked_layers`` gives)."""
    ops: list[_Op] = []
    k = 0
    for layer in layers:
        if isinstance(layer, nn.Conv2d | nn.Linear):
            ops.append(
                _Op("conv" if isinstance(layer, nn.Conv2d) else "linear", layer, k, layer.bias is not None)
            )
            k += 2 if layer.bias is not None else 1
        elif isinstance(layer, nn.ReLU):
            if ops and ops[-1].kind == "pool" and not ops[-1].relu:  # pooling then ReLU: one op
                ops[-1] = _Op("pool", ops[-1].layer, relu=True)
            else:
                ops.append(_Op("relu"))
        elif isinstance(layer, nn.MaxPool2d):
            fused = bool(ops) and ops[-1].kind == "relu"  # ReLU then pooling: pool, then ReLU
            if fused:
                ops.pop()
            ops.append(_Op("pool", layer, relu=fused))
        elif isinstance(layer, nn.Flatten):
            ops.append(_Op("flatten"))
        else:
            raise ValueError(f"stacked network: unsupported layer {layer!r}")
    return ops


class StackedConvNet:
    """Forward, loss and gradient of G models of one Conv/ReLU/MaxPool/Flatten/Linear network.

    ``params`` are the models' parameters stacked per slot, each (G, *shape), in
    ``named_parameters`` order; inputs x (G, B, C, H, W), labels y (G, B) and weights
    w (G, B). The loss of model g is ``sum_b w[g, b] * cross_entropy(model_g(x[g, b]), y[g, b])``.
    """

    def __init__(
        self, layers: list[nn.Module], activations_per_example: int, *, chunk_bytes: int | None = None
    ) -> None:
        self.ops = compile_layers(layers)
        self.activations_per_example = activations_per_example
        self.chunk_bytes = chunk_bytes

    def grad(
        self,
        params: list[torch.Tensor],
        x: torch.Tensor,
        y: torch.Tensor,
        w: torch.Tensor,
        out: list[torch.Tensor],
    ) -> None:
        """Write each model's gradient into ``out`` (per parameter, (G, *shape))."""
        for a, b in self._chunks(x):
            chunk = [p[a:b] for p in params]
            logits, cache = self._forward(chunk, x[a:b], keep=True)  # (g, B, C)
            self._backward(chunk, _cross_entropy_grad(logits, y[a:b], w[a:b]), cache, [o[a:b] for o in out])

    def logits(self, params: list[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        """Each model's logits (G, B, classes) on its own inputs x (G, B, *shape)."""
        with torch.no_grad():
            return torch.cat(
                [self._forward([p[a:b] for p in params], x[a:b], keep=False)[0] for a, b in self._chunks(x)]
            )

    def loss(
        self, params: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor, w: torch.Tensor
    ) -> torch.Tensor:
        """Each model's weighted cross-entropy, (G,)."""
        losses = []
        with torch.no_grad():
            for a, b in self._chunks(x):
                logits, _ = self._forward([p[a:b] for p in params], x[a:b], keep=False)  # (g, B, C)
                y_chunk = y[a:b]
                nll = torch.logsumexp(logits, dim=-1) - logits.gather(-1, y_chunk.unsqueeze(-1)).squeeze(-1)
                losses.append((nll * w[a:b]).sum(dim=1))
        return torch.cat(losses)

    def _chunks(self, x: torch.Tensor) -> list[tuple[int, int]]:
        """Consecutive agent ranges whose kept activations fit ``chunk_bytes``; on an accelerator, all.

        Chunks keep a CPU's caches warm; a GPU wants the largest pass its memory allows (the
        callers bound that: ``fit_ensemble`` by its groups of agents).
        """
        g = x.shape[0]
        if x.device.type != "cpu":
            return [(0, g)]
        per_agent = 4 * max(1, x.shape[1]) * self.activations_per_example
        budget = self.chunk_bytes if self.chunk_bytes is not None else CHUNK_BYTES
        size = max(1, min(g, budget // per_agent))
        return [(a, min(a + size, g)) for a in range(0, g, size)]

    def _forward(
        self, params: list[torch.Tensor], x: torch.Tensor, *, keep: bool
    ) -> tuple[torch.Tensor, list[Any]]:
        """Logits (G, B, classes) and, with ``keep``, what each op's backward needs."""
        g, b = x.shape[:2]
        image = x.dim() == 5
        # x (G, B, C, H, W) -> channels-last (B, H, W, G * C): model g's channels are block g
        h = x.permute(1, 3, 4, 0, 2).contiguous().view(b, x.shape[3], x.shape[4], -1) if image else x
        cache: list[Any] = []
        for op in self.ops:
            saved: Any = None
            if op.kind == "conv":
                assert isinstance(op.layer, nn.Conv2d)
                weight = _grouped_weight(params[op.param])
                bias = params[op.param + 1].reshape(-1) if op.bias else None
                out = F.conv2d(
                    _nchw(h), weight, bias, op.layer.stride, op.layer.padding,  # type: ignore[arg-type]
                    op.layer.dilation, g,
                )  # fmt: skip
                saved = (h, weight)
                h = _physical(out)  # (B, H', W', G * out)
            elif op.kind == "pool":
                assert isinstance(op.layer, nn.MaxPool2d)
                layer = op.layer
                if keep or not is_max_pool_2x2(layer):
                    out, indices = F.max_pool2d_with_indices(
                        _nchw(h), layer.kernel_size, layer.stride, layer.padding, layer.dilation,  # type: ignore[arg-type]
                        ceil_mode=layer.ceil_mode,
                    )  # fmt: skip
                else:  # no backward follows: the same values without the indices
                    out, indices = max_pool_2x2(_nchw(h)), None
                pooled = _physical(out)  # (B, H', W', G * C)
                if op.relu:
                    pooled.clamp_(min=0)
                saved = (h, pooled, indices)
                h = pooled
            elif op.kind == "relu":
                h = torch.relu(h)
                saved = h
            elif op.kind == "flatten":
                if image:
                    # (B, H, W, G * C) -> (G, B, C * H * W): each model's own channel-major order
                    bh, hh, ww = h.shape[:3]
                    saved = tuple(h.shape)
                    h = h.view(bh, hh, ww, g, -1).permute(3, 0, 4, 1, 2).reshape(g, bh, -1)
                    image = False
                else:
                    h = h.reshape(g, b, -1)
            elif op.kind == "linear":
                if image:
                    raise ValueError("stacked network: flatten the image before a Linear layer")
                weight = params[op.param]  # (G, out, in)
                saved = h
                if op.bias:
                    h = torch.baddbmm(
                        params[op.param + 1].unsqueeze(1), h, weight.transpose(1, 2)
                    )  # (G, B, out)
                else:
                    h = torch.bmm(h, weight.transpose(1, 2))
            if keep:
                cache.append(saved)
        if image:
            raise ValueError("stacked network: the network must end in flat features")
        return h, cache

    def _backward(
        self, params: list[torch.Tensor], delta: torch.Tensor, cache: list[Any], out: list[torch.Tensor]
    ) -> None:
        """Walk the ops backwards from dL/dlogits (G, B, classes), writing parameter gradients."""
        g = delta.shape[0]
        first = next((i for i, op in enumerate(self.ops) if op.kind in ("conv", "linear")), 0)
        for i in range(len(self.ops) - 1, first - 1, -1):
            op, saved = self.ops[i], cache[i]
            if op.kind == "linear":
                torch.bmm(delta.transpose(1, 2), saved, out=out[op.param])  # (G, out, in)
                if op.bias:
                    torch.sum(delta, dim=1, out=out[op.param + 1])
                if i > first:
                    delta = torch.bmm(delta, params[op.param])  # (G, B, in)
            elif op.kind == "relu":
                delta = torch.ops.aten.threshold_backward(delta, saved, 0.0)
            elif op.kind == "flatten":
                if saved is not None:
                    bh, hh, ww, gc = saved
                    # (G, B, C * H * W) -> (B, H, W, G * C)
                    delta = delta.view(g, bh, gc // g, hh, ww).permute(1, 3, 4, 0, 2).reshape(bh, hh, ww, gc)
            elif op.kind == "pool":
                assert isinstance(op.layer, nn.MaxPool2d)
                layer, (inputs, pooled, indices) = op.layer, saved
                if op.relu:  # ReLU after the pooling: only positive maxima pass
                    delta = torch.ops.aten.threshold_backward(delta, pooled, 0.0)
                grad_in = torch.ops.aten.max_pool2d_with_indices_backward(
                    _nchw(delta), _nchw(inputs), layer.kernel_size, layer.stride, layer.padding,
                    layer.dilation, layer.ceil_mode, indices,
                )  # fmt: skip
                delta = _physical(grad_in)
            elif op.kind == "conv":
                assert isinstance(op.layer, nn.Conv2d)
                conv, (inputs, weight) = op.layer, saved
                grad_in, grad_w, grad_b = torch.ops.aten.convolution_backward(
                    _nchw(delta), _nchw(inputs), weight, [weight.shape[0]] if op.bias else None,
                    conv.stride, conv.padding, conv.dilation, False, [0, 0], g,
                    [i > first, True, op.bias],
                )  # fmt: skip
                out[op.param].view(weight.shape).copy_(grad_w)
                if op.bias:
                    out[op.param + 1].view(-1).copy_(grad_b)
                if i > first:
                    delta = _physical(grad_in)


def _nchw(physical: torch.Tensor) -> torch.Tensor:
    """(B, H, W, C) contiguous as the channels-last (B, C, H, W) tensor PyTorch's ops take (a view)."""
    return physical.permute(0, 3, 1, 2)


def _physical(logical: torch.Tensor) -> torch.Tensor:
    """A channels-last (B, C, H, W) tensor as (B, H, W, C), contiguous (a view when it is channels-last)."""
    return logical.permute(0, 2, 3, 1).contiguous()


def _grouped_weight(weight: torch.Tensor) -> torch.Tensor:
    """Stacked kernels (G, out, in, kh, kw) as one grouped convolution's (G * out, in, kh, kw), channels-last.

    The input is channels-last too, so that the convolution picks its channels-last kernel.
    ``to``, not ``contiguous``: with one input channel (the first layer) the contiguous kernel
    already counts as channels-last and ``contiguous`` keeps its strides, and the first layer's
    convolution of 5 agents with its bias then took 1.7 ms against 0.3 ms (2-core AMD EPYC).
    """
    return weight.reshape(-1, *weight.shape[2:]).to(memory_format=torch.channels_last)


def _cross_entropy_grad(logits: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """dL/dlogits (G, B, C) of ``sum_b w[g, b] * cross_entropy(logits[g, b], y[g, b])``.

    It is ``w * (softmax(logits) - one_hot(y))``.
    """
    delta = torch.softmax(logits, dim=-1)
    delta.scatter_add_(-1, y.unsqueeze(-1), torch.full_like(delta[..., :1], -1.0))
    return delta.mul_(w.unsqueeze(-1))
