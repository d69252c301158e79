"""The steps of the batched trainer (:mod:`fedvote.models.ensemble`): stacks, kernels, Adam.

* :class:`_Slot`, :class:`_SlotStack`: where each named parameter lives in a model's flat
  vector, and G models' parameters slot-major in one buffer;
* :func:`_kernels`: the batched gradient and loss of G models of one architecture —
  hand-written batched products for Flatten/Linear/ReLU stacks, the channels-last stacked
  convolutions of :mod:`fedvote.models.stacked_conv` for CNNs, ``vmap`` otherwise;
* :class:`_StackedAdam`: torch.optim.Adam with one state per model, fused where torch has it.

Private to the ensemble trainer (and its tests); nothing here knows about agents.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

from fedvote.models.stacked_conv import StackedConvNet
from fedvote.models.training import TrainingConfig
from fedvote.models.zoo import SmallCNN

# Adam's defaults, as torch.optim.Adam (which fit_classifier uses).
_BETA1 = 0.9
_BETA2 = 0.999
_EPS = 1e-8
# Use torch's fused Adam kernel (one pass over each agent's parameters) when available.
_FUSED_ADAM = hasattr(torch, "_fused_adam_")
# Train convolutional networks as one network of grouped convolutions (else vmap).
_STACKED_CONV = True
# Their backward: "manual" (fedvote.models.stacked_conv, channels-last) or "autograd"
# (_stacked_forward's contiguous grouped convolutions, kept for comparison on accelerators).
_CONV_BACKWARD = "manual"


@dataclass(frozen=True)
class _Slot:
    """Where one named parameter lives in a model's flat parameter vector."""

    name: str
    offset: int
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class _Kernels:
    """Batched gradient and loss of G models of one architecture.

    ``grad(params, x, y, w, out)`` writes into ``out`` (per parameter, (G, *shape)) the
    gradient of each model's loss ``sum_b w[g, b] * cross_entropy(model_g(x[g, b]), y[g, b])``
    for x (G, B, *shape), y (G, B), w (G, B); ``loss(params, x, y, w)`` returns those
    losses, (G,).
    """

    grad: Callable[
        [list[torch.Tensor], torch.Tensor, torch.Tensor, torch.Tensor, list[torch.Tensor]], None
    ]
    loss: Callable[[list[torch.Tensor], torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


class _SlotStack:
    """G models' parameters in one buffer, slot-major: parameter k of all models together.

    ``data`` (G * P,) holds, for each parameter (slot) in order, the (G, *shape) block of
    all G models' values, so every ``views[k]`` is contiguous (fast batched products
    write straight into it) and one kernel can update all parameters of all models.
    """

    def __init__(self, data: torch.Tensor, slots: list[_Slot], g: int) -> None:
        self.data = data  # (G * P,)
        self.slots = slots
        self.g = g
        self.views = [
            data[g * slot.offset : g * (slot.offset + slot.numel)].view(g, *slot.shape) for slot in slots
        ]  # each (G, *shape)

    @classmethod
    def from_rows(cls, rows: torch.Tensor, slots: list[_Slot]) -> _SlotStack:
        """From row-major parameters (G, P), row g model g's flat vector."""
        g = rows.shape[0]
        data = torch.cat([rows[:, s.offset : s.offset + s.numel].reshape(-1) for s in slots])  # (G * P,)
        return cls(data, slots, g)

    def to_rows(self) -> torch.Tensor:
        """Row-major copy (G, P)."""
        return torch.cat([view.reshape(self.g, -1) for view in self.views], dim=1)

    def zeros_like(self) -> _SlotStack:
        return _SlotStack(torch.zeros_like(self.data), self.slots, self.g)

    def clone(self) -> _SlotStack:
        return _SlotStack(self.data.clone(), self.slots, self.g)

    def agent(self, index: int) -> list[torch.Tensor]:
        """Model ``index``'s parameters, one contiguous view per slot."""
        return [view[index] for view in self.views]

    def copy_models_(self, source: _SlotStack, chosen: torch.Tensor) -> None:
        """Overwrite the models where ``chosen`` (G,) bool is true with ``source``'s."""
        for view, other in zip(self.views, source.views, strict=True):
            mask = chosen.view(-1, *([1] * (view.dim() - 1)))
            torch.where(mask, other, view, out=view)


class _StackedAdam:
    """torch.optim.Adam (L2 weight decay) with a separate state per model, on a slot stack.

    Each model has its own moments and step count (so its own bias correction);
    :meth:`step` updates only the models marked active. While every model has taken the
    same number of steps and all are active, one fused Adam kernel updates the whole
    buffer in one pass; otherwise the fused kernel runs on the active models' parameter
    views, each with its own step count. Without a fused kernel on the device it is
    ``torch.optim.Adam`` over one set of Parameters per model (the same arithmetic).
    """

    def __init__(self, params: _SlotStack, grads: _SlotStack, config: TrainingConfig) -> None:
        self._config = config
        self._params, self._grads = params, grads
        self._exp_avg, self._exp_avg_sq = params.zeros_like(), params.zeros_like()
        self._counts = np.zeros(params.g, dtype=np.int64)  # (G,) steps taken, on the host
        device = params.data.device
        self._steps = torch.zeros(params.g, dtype=torch.float32, device=device)  # (G,) for the kernel
        self._step_views = list(self._steps.unbind(0))
        self._shared_step = torch.zeros((), dtype=torch.float32, device=device)
        self._per_model = [
            (params.agent(i), grads.agent(i), self._exp_avg.agent(i), self._exp_avg_sq.agent(i))
            for i in range(params.g)
        ]
        self._fallback: torch.optim.Optimizer | None = None
        self._fallback_params: list[list[nn.Parameter]] = []
        if not _FUSED_ADAM:
            self._use_fallback()

    def step(self, active: np.ndarray) -> None:
        """One Adam step for the models with ``active[i]`` true; the others do not move."""
        if self._fallback is not None:
            for i, model_params in enumerate(self._fallback_params):
                for param, grad_ in zip(model_params, self._per_model[i][1], strict=True):
                    param.grad = grad_ if active[i] else None
            self._fallback.step()
            return
        if not active.any():
            return
        try:
            if active.all() and (self._counts == self._counts[0]).all():
                self._shared_step.fill_(float(self._counts[0] + 1))
                self._fused(
                    [self._params.data], [self._grads.data], [self._exp_avg.data],
                    [self._exp_avg_sq.data], [self._shared_step],
                )  # fmt: skip
            else:
                chosen = np.flatnonzero(active)
                counts = self._counts + active
                self._steps.copy_(torch.from_numpy(counts.astype(np.float32)))
                lists: tuple[list[torch.Tensor], ...] = ([], [], [], [], [])
                for i in chosen.tolist():
                    for k, tensors in enumerate(self._per_model[i]):
                        lists[k].extend(tensors)
                    lists[4].extend([self._step_views[i]] * len(self._per_model[i][0]))
                self._fused(*lists)
        except (RuntimeError, NotImplementedError):  # no fused kernel for this device/torch
            if self._counts.max() > 0:  # never switch with moments half-way through
                raise
            self._use_fallback()
            self.step(active)
            return
        self._counts += active

    def _fused(
        self,
        params: list[torch.Tensor],
        grads: list[torch.Tensor],
        exp_avg: list[torch.Tensor],
        exp_avg_sq: list[torch.Tensor],
        steps: list[torch.Tensor],
    ) -> None:
        torch._fused_adam_(
            params,
            grads,
            exp_avg,
            exp_avg_sq,
            [],
            steps,
            lr=self._config.learning_rate,
            beta1=_BETA1,
            beta2=_BETA2,
            weight_decay=self._config.weight_decay,
            eps=_EPS,
            amsgrad=False,
            maximize=False,
        )

    def _use_fallback(self) -> None:
        # Parameters share storage with the stack's views.
        self._fallback_params = [[nn.Parameter(t) for t in model[0]] for model in self._per_model]
        self._fallback = torch.optim.Adam(
            [p for model in self._fallback_params for p in model],
            lr=self._config.learning_rate,
            weight_decay=self._config.weight_decay,
        )


def _kernels(template: nn.Module, slots: list[_Slot], example_shape: tuple[int, ...]) -> _Kernels:
    """Kernels for G models of ``template``'s architecture.

    Hand-written forward and backward for stacks of Flatten/Linear/ReLU (the logistic and
    MLP models) and, through grouped channels-last convolutions
    (:class:`~fedvote.models.stacked_conv.StackedConvNet`), for Conv/ReLU/MaxPool/Flatten/Linear
    networks (the CNN; ``_CONV_BACKWARD = "autograd"`` selects the earlier autograd form);
    ``vmap`` of ``grad`` over ``functional_call`` for anything else.
    """
    linear_stack = _linear_stack(template)
    if linear_stack is not None:
        return _linear_stack_kernels(linear_stack, slots)
    layers = _stacked_layers(template)
    if layers is not None and _STACKED_CONV:
        if _CONV_BACKWARD == "autograd":
            return _stacked_kernels(layers)
        net = StackedConvNet(layers, _activations_per_example(template, example_shape))
        return _Kernels(grad=net.grad, loss=net.loss)
    names = [slot.name for slot in slots]
    per_model_grad = vmap(grad(_loss_fn(template)))
    per_model_loss = vmap(_loss_fn(template))

    def grad_fn(
        params: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor, w: torch.Tensor, out: list[torch.Tensor]
    ) -> None:
        grads = per_model_grad(dict(zip(names, params, strict=True)), x, y, w)
        for name, target in zip(names, out, strict=True):
            target.copy_(grads[name])

    def loss_fn(
        params: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor, w: torch.Tensor
    ) -> torch.Tensor:
        return per_model_loss(dict(zip(names, params, strict=True)), x, y, w)  # type: ignore[no-any-return]

    return _Kernels(grad=grad_fn, loss=loss_fn)


def _stacked_layers(template: nn.Module) -> list[nn.Module] | None:
    """The layers of ``template`` in order, if every one has a stacked (grouped) form; else None.

    Supported: a Sequential of Conv2d (ungrouped), ReLU, MaxPool2d, Flatten(1) and Linear,
    and the zoo's :class:`~fedvote.models.zoo.SmallCNN` (its features, a flatten, its head).
    """
    if isinstance(template, SmallCNN):
        layers = [*template.features, nn.Flatten(), template.head]
    elif isinstance(template, nn.Sequential):
        layers = list(template)
    else:
        return None
    for layer in layers:
        if isinstance(layer, nn.Conv2d):
            if layer.groups != 1 or layer.padding_mode != "zeros" or isinstance(layer.padding, str):
                return None
        elif isinstance(layer, nn.Flatten):
            if layer.start_dim != 1 or layer.end_dim != -1:
                return None
        elif not isinstance(layer, nn.ReLU | nn.MaxPool2d | nn.Linear):
            return None
    return layers


def _stacked_forward(
    layers: list[nn.Module], params: list[torch.Tensor], x: torch.Tensor
) -> torch.Tensor:
    """G models' logits (G, B, C) on their own inputs x (G, B, *shape), as one network.

    Images are laid out (B, G * channels, h, w): model g's channels are the g-th block, and
    each convolution is one grouped convolution (``groups=G``) whose g-th group holds model
    g's kernels, so no model sees another's channels. Flatten turns that into (G, B, features)
    (in each model's own channel-major order) and a Linear layer is a batched product.
    """
    g, b = x.shape[:2]
    image = x.dim() == 5 and isinstance(layers[0], nn.Conv2d)
    h = x.transpose(0, 1).reshape(b, g * x.shape[2], *x.shape[3:]) if image else x  # (B, G*c, h, w)
    k = 0
    for layer in layers:
        if isinstance(layer, nn.Conv2d):
            # weight (G, out, in, kh, kw), bias (G, out)
            weight, bias = params[k], params[k + 1] if layer.bias is not None else None
            k += 1 if bias is None else 2
            h = F.conv2d(
                h,
                weight.reshape(-1, *weight.shape[2:]),  # (G * out, in, kh, kw)
                None if bias is None else bias.reshape(-1),
                stride=layer.stride,
                padding=layer.padding,  # type: ignore[arg-type]
                dilation=layer.dilation,
                groups=g,
            )
        elif isinstance(layer, nn.MaxPool2d):
            h = F.max_pool2d(
                h, layer.kernel_size, layer.stride, layer.padding, layer.dilation,
                ceil_mode=layer.ceil_mode,
            )  # fmt: skip
        elif isinstance(layer, nn.ReLU):
            h = torch.relu(h)
        elif isinstance(layer, nn.Flatten):
            if image:
                h = h.reshape(b, g, -1).transpose(0, 1)  # (G, B, features)
                image = False
            else:
                h = h.reshape(g, b, -1)
        elif isinstance(layer, nn.Linear):
            weight, bias = params[k], params[k + 1] if layer.bias is not None else None  # (G, out, in)
            k += 1 if bias is None else 2
            h = torch.bmm(h, weight.transpose(1, 2))  # (G, B, out)
            if bias is not None:
                h = h + bias.unsqueeze(1)
    if image:
        raise ValueError("stacked forward: the network must end in flat features")
    return h


def _stacked_kernels(layers: list[nn.Module]) -> _Kernels:
    """Gradient and loss of G models through :func:`_stacked_forward`, backward by autograd.

    The G models share no parameter and the loss is the sum of their own losses, so the
    gradient of the sum with respect to model g's parameters is model g's gradient.
    """

    def weighted_losses(
        params: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor, w: torch.Tensor
    ) -> torch.Tensor:
        logits = _stacked_forward(layers, params, x)  # (G, B, C)
        nll = torch.logsumexp(logits, dim=-1) - logits.gather(-1, y.unsqueeze(-1)).squeeze(-1)  # (G, B)
        return (nll * w).sum(dim=1)  # (G,)

    def grad_fn(
        params: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor, w: torch.Tensor, out: list[torch.Tensor]
    ) -> None:
        leaves = [p.detach().requires_grad_(True) for p in params]  # share storage, no copy
        with torch.enable_grad():
            total = weighted_losses(leaves, x, y, w).sum()
            grads = torch.autograd.grad(total, leaves)
        for target, value in zip(out, grads, strict=True):
            target.copy_(value)

    def loss_fn(
        params: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor, w: torch.Tensor
    ) -> torch.Tensor:
        with torch.no_grad():
            return weighted_losses(params, x, y, w)

    return _Kernels(grad=grad_fn, loss=loss_fn)


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


def _linear_stack_kernels(kinds: list[str], slots: list[_Slot]) -> _Kernels:
    """Hand-written forward and backward of (Flatten) Linear (ReLU Linear)* for G models at once.

    Writes the weight gradients straight into the (contiguous) gradient views with
    batched matrix products: the per-model equivalent of autograd on the loop.
    """
    num_linear = kinds.count("linear")
    if len(slots) != 2 * num_linear:
        raise ValueError("linear stack: expected a weight and a bias per Linear layer")

    def forward(
        params: list[torch.Tensor], x: torch.Tensor
    ) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
        g, b = x.shape[:2]
        h = x.reshape(g, b, -1)  # (G, B, D)
        inputs: list[torch.Tensor] = []  # each Linear layer's input (G, B, in)
        relu_outputs: list[torch.Tensor] = []
        k = 0
        for kind in kinds:
            if kind == "linear":
                weight, bias = params[2 * k], params[2 * k + 1]  # (G, out, in), (G, out)
                inputs.append(h)
                h = torch.bmm(h, weight.transpose(1, 2)).add_(bias.unsqueeze(1))  # (G, B, out)
                k += 1
            elif kind == "relu":
                h = torch.relu_(h)
                relu_outputs.append(h)
        return h, inputs, relu_outputs

    def grad_fn(
        params: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor, w: torch.Tensor, out: list[torch.Tensor]
    ) -> None:
        logits, inputs, relu_outputs = forward(params, x)  # logits (G, B, C)
        # dL/dlogits for weighted cross-entropy: w * (softmax - one_hot(y)); (G, B, C)
        delta = (logits - logits.amax(dim=-1, keepdim=True)).exp_()  # softmax by hand: faster on CPU
        delta.div_(delta.sum(dim=-1, keepdim=True))  # than torch.softmax over a short last axis
        delta.scatter_add_(-1, y.unsqueeze(-1), torch.full_like(delta[..., :1], -1.0))
        delta.mul_(w.unsqueeze(-1))
        k = num_linear
        for kind in reversed(kinds):
            if kind == "linear":
                k -= 1
                torch.bmm(delta.transpose(1, 2), inputs[k], out=out[2 * k])  # (G, out, in)
                torch.sum(delta, dim=1, out=out[2 * k + 1])  # (G, out)
                if k == 0:
                    break
                delta = torch.bmm(delta, params[2 * k])  # (G, B, in)
            elif kind == "relu":
                # ReLU's backward: autograd's own kernel (torch.where(a > 0, delta, 0) is far slower)
                delta = torch.ops.aten.threshold_backward(delta, relu_outputs.pop(), 0.0)

    def loss_fn(
        params: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor, w: torch.Tensor
    ) -> torch.Tensor:
        logits = forward(params, x)[0]  # (G, B, C)
        nll = torch.logsumexp(logits, dim=-1) - logits.gather(-1, y.unsqueeze(-1)).squeeze(-1)  # (G, B)
        return (nll * w).sum(dim=1)

    return _Kernels(grad=grad_fn, loss=loss_fn)


def _loss_fn(
    template: nn.Module,
) -> Callable[[dict[str, torch.Tensor], torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]:
    """One model's loss from its parameters: cross-entropy weighted by ``w`` (B,), summed."""

    def loss(
        params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor, w: torch.Tensor
    ) -> torch.Tensor:
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



def _manual_stacked_layers(template: nn.Module) -> list[nn.Module] | None:
    """The layers of ``template`` for the stacked channels-last forward, when that form is on."""
    return _stacked_layers(template) if _STACKED_CONV and _CONV_BACKWARD == "manual" else None
