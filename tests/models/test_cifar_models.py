"""Models for 32x32 RGB images: the TensorFlow-tutorial CNN, ResNet-8, crop-and-flip, and the auto choice.

Also: the FixMatch student's augmentations and TypiClust query selection on RGB images.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

from fedvote.data.query_selection import typical_queries
from fedvote.errors import ConfigError
from fedvote.models.augment import strong_augment, weak_augment
from fedvote.models.cifar_cnn import TutorialCNN
from fedvote.models.config import TrainingConfig, image_model, resolve_augment, teacher_training
from fedvote.models.crop_flip import PAD, augment_agents, crop_flip, draw_crop_flip, random_crop_flip
from fedvote.models.ensemble import fit_ensemble
from fedvote.models.ensemble_kernels import _stacked_layers
from fedvote.models.resnet import ResNet8
from fedvote.models.student import train_student
from fedvote.models.training import fit_classifier
from fedvote.models.zoo import build_model, resolve_model_name

NUM_CLASSES = 4
SIZES = (13, 5, 0, 21)  # batch 8: a partial last batch, fewer than a batch, none, the largest
SEEDS = (101, 7, 55, 12)


def _agents_data(shape, sizes=SIZES, seed=0):
    rng = np.random.default_rng(seed)
    features = [rng.uniform(size=(n, *shape)).astype(np.float32) for n in sizes]
    labels = [rng.integers(0, NUM_CLASSES, size=n).astype(np.int64) for n in sizes]
    return features, labels


def _gap(net, ensemble, index):
    params = ensemble.params
    return max((p.detach() - params[name][index]).abs().max().item() for name, p in net.named_parameters())


# --------------------------------------------------------------------------- architectures


def test_tutorial_cnn_is_the_tensorflow_tutorials():
    model = TutorialCNN((3, 32, 32), 10)
    convs = [m for m in model if isinstance(m, torch.nn.Conv2d)]
    assert [c.out_channels for c in convs] == [32, 64, 64] and all(c.padding == (0, 0) for c in convs)
    linears = [m for m in model if isinstance(m, torch.nn.Linear)]
    assert [(lin.in_features, lin.out_features) for lin in linears] == [(1024, 64), (64, 10)]  # 64 * 4 * 4
    # conv 896 + 18,496 + 36,928, dense 65,600 + 650 (the tutorial's model.summary(): 122,570)
    assert sum(p.numel() for p in model.parameters()) == 122_570
    assert model(torch.zeros(5, 3, 32, 32)).shape == (5, 10)
    assert _stacked_layers(model) is not None  # trained as one stacked network of grouped convolutions


def test_resnet8_has_eight_weighted_layers_and_no_buffers():
    model = ResNet8((3, 32, 32), 10)
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d) and m.kernel_size == (3, 3)]
    assert len(convs) + 1 == 8  # 7 3x3 convolutions and the linear head (1x1 shortcuts not counted)
    assert not list(model.buffers())  # GroupNorm without running statistics: every state is a parameter
    assert {type(m) for m in model.modules() if isinstance(m, torch.nn.Conv2d | torch.nn.Linear | torch.nn.GroupNorm)} >= {
        torch.nn.Conv2d, torch.nn.Linear, torch.nn.GroupNorm
    }
    assert model(torch.zeros(2, 3, 32, 32)).shape == (2, 10)
    # Each example is normalised on its own: its output does not depend on the rest of the batch.
    x = torch.rand(4, 3, 32, 32)
    assert torch.allclose(model(x)[:1], model(x[:1]), atol=1e-5)


@pytest.mark.parametrize("name", ["cifar-cnn", "resnet8"])
def test_build_model_seeds_every_parameter(name):
    first = build_model(name, (3, 32, 32), 10, generator=torch.Generator().manual_seed(3))
    again = build_model(name, (3, 32, 32), 10, generator=torch.Generator().manual_seed(3))
    other = build_model(name, (3, 32, 32), 10, generator=torch.Generator().manual_seed(4))
    for a, b, c in zip(first.parameters(), again.parameters(), other.parameters(), strict=True):
        assert torch.equal(a, b) and not torch.equal(a, c)


@pytest.mark.parametrize(("name", "shape"), [("cifar-cnn", (3, 16, 16)), ("resnet8", (3, 2, 2)), ("cifar-cnn", (100,))])
def test_too_small_inputs_are_refused_by_name(name, shape):
    with pytest.raises(ConfigError) as error:
        build_model(name, shape, 10)
    assert error.value.argument == "model" and name in error.value.detail


# --------------------------------------------------------------------------- the auto choice


def test_auto_keeps_the_small_cnn_for_every_image_shape():
    """The shape cannot tell CIFAR-10 from the synthetic digits (both 3x32x32): flips would harm digits."""
    assert image_model((3, 32, 32)) == "cnn" and resolve_model_name("auto", (3, 32, 32)) == "cnn"
    assert resolve_model_name("auto", (1, 28, 28)) == "cnn"  # MNIST, Fashion-MNIST: unchanged
    assert resolve_model_name("auto", (1, 32, 32)) == "cnn"  # framed grey digit domains: unchanged
    assert resolve_model_name("auto", (3, 16, 16)) == "cnn"
    assert resolve_model_name("auto", (64,)) == "mlp"


def test_teacher_auto_uses_public_metadata_only():
    auto = TrainingConfig(model="auto", epochs=None)
    rgb = teacher_training(auto, (3, 32, 32), (450,) * 100)
    assert (rgb.model, rgb.epochs) == ("cnn", 20)  # ⌈9000 / 450⌉; the synthetic digits are 3x32x32 too
    assert resolve_augment(rgb.augment, rgb.model, (3, 32, 32)) == "none"
    named = teacher_training(TrainingConfig(model="cifar-cnn", epochs=None), (3, 32, 32), (450,) * 100)
    assert resolve_augment(named.augment, named.model, (3, 32, 32)) == "crop-flip"
    few = teacher_training(auto, (3, 32, 32), (40,) * 100)
    assert few.model == "mlp" and resolve_augment(few.augment, few.model, (3, 32, 32)) == "none"
    mnist = teacher_training(auto, (1, 28, 28), (600,) * 100)
    assert (mnist.model, mnist.epochs) == ("cnn", 15)  # ⌈9000 / 600⌉
    assert resolve_augment(mnist.augment, mnist.model, (1, 28, 28)) == "none"
    chosen = teacher_training(TrainingConfig(model="resnet8", epochs=None, augment="none"), (3, 32, 32), (450,))
    assert (chosen.model, chosen.augment, chosen.epochs) == ("resnet8", "none", 20)
    assert resolve_augment("auto", "resnet8", (3, 32, 32)) == "crop-flip"


def test_unknown_augmentation_is_refused_by_name():
    with pytest.raises(ConfigError) as error:
        TrainingConfig(augment="mixup")
    assert error.value.argument == "augment"


# --------------------------------------------------------------------------- crop and flip


def test_crop_flip_identity_flip_and_shift():
    x = torch.rand(3, 3, 8, 8)
    centred = torch.full((3, 2), PAD)
    assert torch.equal(crop_flip(x, centred, torch.zeros(3, dtype=torch.bool)), x)
    assert torch.equal(crop_flip(x, centred, torch.ones(3, dtype=torch.bool)), x.flip(-1))
    # Offset (0, PAD): the crop starts PAD rows above the image: it moves down, zeros on top.
    down = crop_flip(x, torch.tensor([[0, PAD]] * 3), torch.zeros(3, dtype=torch.bool))
    assert torch.equal(down[:, :, PAD:], x[:, :, :-PAD]) and not down[:, :, :PAD].any()
    # Every channel moves together.
    grey = torch.rand(6, 1, 8, 8)
    offsets, flips = draw_crop_flip(6, torch.Generator().manual_seed(0))
    rgb = crop_flip(grey.expand(6, 3, 8, 8), offsets, flips)
    assert torch.equal(rgb, crop_flip(grey, offsets, flips).expand(6, 3, 8, 8))


def test_augment_agents_draws_as_each_agent_alone():
    x = torch.rand(3, 4, 3, 8, 8)  # (G, B, C, H, W)
    counts = [4, 2, 0]
    out = augment_agents(x, [torch.Generator().manual_seed(s) for s in (1, 2, 3)], counts)
    for agent, count in enumerate(counts):
        alone = random_crop_flip(x[agent, :count], torch.Generator().manual_seed(agent + 1))
        assert torch.equal(out[agent, :count], alone)
        assert torch.equal(out[agent, count:], x[agent, count:])  # padding untouched


# Rounding: Adam divides small gradients by their own scale, so the last bits of the stacked and
# the single model's products reach 4e-5 on these 64-unit layers even without augmentation; a draw
# out of step would differ by the size of a step (1e-2). ResNet-8's GroupNorm makes each convolution's
# output blind to its kernels' scale, so some weights get gradients near 0 whose Adam steps (±lr
# whatever their size) follow their last bits: up to 2e-3 here with augment="none" as well.
@pytest.mark.parametrize(("model", "shape", "tolerance"), [("cifar-cnn", (3, 20, 20), 5e-4), ("resnet8", (3, 8, 8), 5e-3)])
def test_batched_teachers_with_crop_flip_train_as_each_alone(model, shape, tolerance):
    features, labels = _agents_data(shape)
    config = TrainingConfig(model=model, epochs=2, batch_size=8, augment="crop-flip")
    ensemble = fit_ensemble(features, labels, config, SEEDS, num_classes=NUM_CLASSES)
    for i, seed in enumerate(SEEDS):
        generator = torch.Generator().manual_seed(seed)
        net = build_model(model, shape, NUM_CLASSES, generator=generator)
        alone = fit_classifier(net, features[i], labels[i], config, generator)
        assert _gap(alone, ensemble, i) < tolerance, f"agent {i} (n={SIZES[i]})"
    queries = torch.rand(5, *shape)
    assert ensemble.logits(queries).shape == (len(SIZES), 5, NUM_CLASSES)


def test_crop_flip_changes_training():
    features, labels = _agents_data((3, 20, 20), sizes=(16,))
    plain = fit_ensemble(features, labels, TrainingConfig(model="cifar-cnn", epochs=1, augment="none"), (1,),
                         num_classes=NUM_CLASSES)  # fmt: skip
    augmented = fit_ensemble(features, labels, TrainingConfig(model="cifar-cnn", epochs=1, augment="auto"), (1,),
                             num_classes=NUM_CLASSES)  # fmt: skip
    assert not torch.allclose(plain.flat_params, augmented.flat_params)


# --------------------------------------------------------------------------- student and queries on RGB


def test_fixmatch_views_of_rgb_images_move_channels_together():
    grey = torch.rand(6, 1, 32, 32)
    rgb = grey.expand(6, 3, 32, 32).contiguous()
    colourless = functools.partial(strong_augment, colour=False)  # the geometric views alone
    for augment in (weak_augment, colourless):
        one = augment(grey, torch.Generator().manual_seed(5))
        three = augment(rgb, torch.Generator().manual_seed(5))
        assert three.shape == (6, 3, 32, 32) and torch.isfinite(three).all()
        assert torch.allclose(three, one.expand(6, 3, 32, 32), atol=1e-6)
    coloured = strong_augment(rgb, torch.Generator().manual_seed(5))  # RGB's default adds a colour operation
    assert torch.allclose(coloured, coloured[:, :1].expand(6, 3, 32, 32), atol=1e-5)  # a grey photo stays grey


def test_fixmatch_student_trains_on_rgb_images():
    rng = np.random.default_rng(0)
    labelled = rng.uniform(size=(24, 3, 32, 32)).astype(np.float32)
    pseudo = (np.arange(24) % NUM_CLASSES).astype(np.int64)
    pool = rng.uniform(size=(64, 3, 32, 32)).astype(np.float32)
    config = TrainingConfig(model="cifar-cnn", epochs=1, batch_size=8)
    student = train_student(
        labelled, pseudo, num_classes=NUM_CLASSES, config=config, seed=0, unlabeled=pool,
        semi_supervised="fixmatch", device="cpu",
    )  # fmt: skip
    assert isinstance(student, TutorialCNN)
    assert student(torch.from_numpy(labelled[:2])).shape == (2, NUM_CLASSES)


def test_typical_queries_on_rgb_images():
    rng = np.random.default_rng(1)
    centres = rng.uniform(size=(4, 3, 32, 32))
    pool = (centres[np.arange(200) % 4] + 0.05 * rng.normal(size=(200, 3, 32, 32))).astype(np.float32)
    chosen = typical_queries(pool, 8, seed=0)
    assert chosen.shape == (8,) and len(set(chosen.tolist())) == 8 and chosen.max() < 200
    assert len({int(i) % 4 for i in chosen}) == 4  # every cluster of the RGB pool is asked about
