"""Batched ensemble training: the same teachers as training each agent alone."""

import numpy as np
import pytest
import torch

from fedvote.errors import ConfigError
from fedvote.models import ensemble as ensemble_module
from fedvote.models import ensemble_kernels
from fedvote.models.ensemble import ModelEnsemble, fit_ensemble, init_ensemble
from fedvote.models.training import TrainingConfig, fit_classifier, predict_labels
from fedvote.models.zoo import build_model

NUM_CLASSES = 4
SHAPE = (1, 6, 6)
# Unequal sizes on purpose, batch 8: a partial last batch (13, 21), an exact multiple
# (16), fewer records than one batch (5), no records at all (0), the largest (29).
SIZES = (13, 16, 5, 0, 29, 21)
SEEDS = (101, 7, 55, 3, 999, 12)


def _agents_data(sizes=SIZES, shape=SHAPE, seed=0):
    rng = np.random.default_rng(seed)
    features = [rng.normal(size=(n, *shape)).astype(np.float32) for n in sizes]
    labels = [rng.integers(0, NUM_CLASSES, size=n).astype(np.int64) for n in sizes]
    return features, labels


def _train_alone(model, features, labels, config, seed, hidden=16):
    generator = torch.Generator().manual_seed(seed)
    net = build_model(model, SHAPE, NUM_CLASSES, hidden=hidden, generator=generator)
    return fit_classifier(net, features, labels, config, generator)


def _max_param_gap(net, ensemble, index):
    params = ensemble.params
    return max((p.detach() - params[name][index]).abs().max().item() for name, p in net.named_parameters())


@pytest.mark.parametrize("model", ["logistic", "mlp", "cnn"])
def test_same_result_as_training_each_agent_alone(model):
    features, labels = _agents_data()
    config = TrainingConfig(model=model, epochs=3, batch_size=8)
    ensemble = fit_ensemble(features, labels, config, SEEDS, num_classes=NUM_CLASSES, hidden=16)
    assert ensemble.num_models == len(SIZES)
    for i, seed in enumerate(SEEDS):
        alone = _train_alone(model, features[i], labels[i], config, seed)
        assert _max_param_gap(alone, ensemble, i) < 1e-5, f"agent {i} (n={SIZES[i]})"


@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_agents_smaller_than_one_batch_train_as_each_alone(model):
    """Every agent's records fit one batch (the ensemble's steps then only as wide as the largest agent)."""
    sizes = (5, 0, 11, 3)
    features, labels = _agents_data(sizes=sizes)
    config = TrainingConfig(model=model, epochs=3, batch_size=32)
    ensemble = fit_ensemble(features, labels, config, SEEDS[:4], num_classes=NUM_CLASSES, hidden=16)
    for i, seed in enumerate(SEEDS[:4]):
        alone = _train_alone(model, features[i], labels[i], config, seed)
        assert _max_param_gap(alone, ensemble, i) < 1e-5, f"agent {i} (n={sizes[i]})"


@pytest.mark.parametrize("model", ["logistic", "mlp", "cnn"])
def test_initialisation_is_exactly_build_models(model):
    ensemble, generators = ensemble_module._init_with_generators(  # noqa: SLF001 - and where it leaves them
        model, SHAPE, NUM_CLASSES, SEEDS, 16, None, ensemble_module._DEFAULT_MEMORY_BUDGET  # noqa: SLF001
    )
    for i, seed in enumerate(SEEDS):
        generator = torch.Generator().manual_seed(seed)
        net = build_model(model, SHAPE, NUM_CLASSES, hidden=16, generator=generator)
        assert _max_param_gap(net, ensemble, i) == 0.0
        assert torch.equal(generators[i].get_state(), generator.get_state())


def test_agent_without_data_keeps_its_initial_weights():
    features, labels = _agents_data()
    config = TrainingConfig(model="mlp", epochs=2, batch_size=8)
    trained = fit_ensemble(features, labels, config, SEEDS, num_classes=NUM_CLASSES, hidden=16)
    initial = init_ensemble("mlp", SHAPE, NUM_CLASSES, SEEDS, hidden=16)
    empty = SIZES.index(0)
    assert torch.equal(trained.flat_params[empty], initial.flat_params[empty])
    assert not torch.equal(trained.flat_params[0], initial.flat_params[0])


def test_small_agent_is_not_moved_by_padded_steps():
    # Agent 0 has one batch per epoch, agent 1 four: alongside agent 1, agent 0 must end
    # exactly where it ends when trained in an ensemble of its own (padding is inert).
    features, labels = _agents_data(sizes=(7, 32))
    config = TrainingConfig(model="mlp", epochs=3, batch_size=8)
    pair = fit_ensemble(features, labels, config, (1, 2), num_classes=NUM_CLASSES, hidden=16)
    single = fit_ensemble(features[:1], labels[:1], config, (1,), num_classes=NUM_CLASSES, hidden=16)
    assert torch.allclose(pair.flat_params[0], single.flat_params[0], atol=1e-6, rtol=0)


def test_grouping_does_not_change_the_result():
    features, labels = _agents_data()
    config = TrainingConfig(model="mlp", epochs=2, batch_size=8)
    together = fit_ensemble(features, labels, config, SEEDS, num_classes=NUM_CLASSES, hidden=16)
    one_by_one = fit_ensemble(
        features, labels, config, SEEDS, num_classes=NUM_CLASSES, hidden=16, memory_budget_bytes=1
    )
    assert torch.allclose(together.flat_params, one_by_one.flat_params, atol=1e-6, rtol=0)


def test_unfused_adam_fallback_gives_the_same_result(monkeypatch):
    features, labels = _agents_data()
    config = TrainingConfig(model="mlp", epochs=2, batch_size=8)
    fused = fit_ensemble(features, labels, config, SEEDS, num_classes=NUM_CLASSES, hidden=16)
    monkeypatch.setattr(ensemble_kernels, "_FUSED_ADAM", False)
    plain = fit_ensemble(features, labels, config, SEEDS, num_classes=NUM_CLASSES, hidden=16)
    assert torch.allclose(fused.flat_params, plain.flat_params, atol=1e-5, rtol=0)


@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_batched_predictions_are_each_models_predictions(model):
    features, labels = _agents_data()
    config = TrainingConfig(model=model, epochs=2, batch_size=8)
    ensemble = fit_ensemble(features, labels, config, SEEDS, num_classes=NUM_CLASSES, hidden=16)
    queries = np.random.default_rng(1).normal(size=(37, *SHAPE)).astype(np.float32)
    logits = ensemble.logits(queries)
    predictions = ensemble.predict(queries)
    assert logits.shape == (len(SIZES), 37, NUM_CLASSES)
    assert predictions.shape == (len(SIZES), 37) and predictions.dtype == torch.int64
    for i in range(len(SIZES)):
        module = ensemble.module(i)
        with torch.no_grad():
            alone = module(torch.as_tensor(queries))
        assert torch.allclose(logits[i], alone, atol=1e-5)
        np.testing.assert_array_equal(predictions[i].numpy(), predict_labels(module, queries))
    # chunked evaluation (a tiny memory budget) gives the same logits
    chunked = ModelEnsemble(ensemble.template, ensemble.flat_params, memory_budget_bytes=1)
    assert torch.allclose(chunked.logits(queries), logits, atol=1e-6)


def test_no_queries_give_empty_votes():
    ensemble = init_ensemble("mlp", SHAPE, NUM_CLASSES, SEEDS, hidden=16)
    assert ensemble.logits(np.zeros((0, *SHAPE), dtype=np.float32)).shape == (len(SEEDS), 0, NUM_CLASSES)
    assert ensemble.predict(np.zeros((0, *SHAPE), dtype=np.float32)).shape == (len(SEEDS), 0)


def test_module_shares_the_stacked_parameters():
    ensemble = init_ensemble("mlp", SHAPE, NUM_CLASSES, SEEDS, hidden=16)
    module = ensemble.module(2)
    with torch.no_grad():
        next(module.parameters()).zero_()
    assert torch.all(ensemble.params["1.weight"][2] == 0)
    assert not torch.all(ensemble.params["1.weight"][1] == 0)
    with pytest.raises(IndexError):
        ensemble.module(len(SEEDS))


def test_refuses_inconsistent_inputs():
    features, labels = _agents_data(sizes=(4, 5))
    config = TrainingConfig(model="mlp", epochs=1, batch_size=8)
    with pytest.raises(ValueError, match="one entry per agent"):
        fit_ensemble(features, labels, config, (1,), num_classes=NUM_CLASSES)
    with pytest.raises(ValueError, match="share one shape"):
        fit_ensemble([features[0], features[1][:, :, :3]], labels, config, (1, 2), num_classes=NUM_CLASSES)
    with pytest.raises(ValueError, match="labels"):
        fit_ensemble(features, [labels[1], labels[0]], config, (1, 2), num_classes=NUM_CLASSES)
    with pytest.raises(ValueError, match="at least one agent"):
        fit_ensemble([], [], config, (), num_classes=NUM_CLASSES)


# --- early stopping --------------------------------------------------------------------

# Agents 0-2 learn a real rule (their validation loss keeps falling for a while); agents 3-5
# have random labels (it rises at once), so they stop at different epochs; agent 6 has too
# few records to hold one out (trains every epoch); agent 7 has none.
EARLY_SIZES = (60, 41, 33, 50, 27, 38, 3, 0)
EARLY_SEEDS = (5, 6, 7, 8, 9, 10, 11, 12)
EARLY = TrainingConfig(model="mlp", epochs=12, batch_size=8, validation_fraction=0.25, patience=2)


def _early_stopping_data():
    rng = np.random.default_rng(3)
    direction = rng.normal(size=int(np.prod(SHAPE)))
    features, labels = [], []
    for i, n in enumerate(EARLY_SIZES):
        x = rng.normal(size=(n, *SHAPE)).astype(np.float32)
        score = x.reshape(n, direction.shape[0]) @ direction  # (n,)
        cuts = np.quantile(score, [0.25, 0.5, 0.75]) if n else np.zeros(3)
        learnable = np.digitize(score, cuts).astype(np.int64)
        noise = rng.integers(0, NUM_CLASSES, size=n).astype(np.int64)
        features.append(x)
        labels.append(learnable if i < 3 else noise)
    return features, labels


def _epochs_run(monkeypatch, features, labels, config, seed, model="mlp"):
    """Train one agent alone and count its epochs (one randperm per epoch after the split)."""
    calls = []
    original = torch.randperm

    def counting(*args, **kwargs):
        calls.append(args[0])
        return original(*args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(torch, "randperm", counting)
        alone = _train_alone(model, features, labels, config, seed)
    held_out = config.validation_size(features.shape[0])
    return alone, len(calls) - (1 if held_out else 0)


@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_early_stopping_matches_each_agent_alone(monkeypatch, model):
    features, labels = _early_stopping_data()
    config = EARLY if model == "mlp" else TrainingConfig(
        model="cnn", epochs=8, batch_size=8, validation_fraction=0.25, patience=1
    )
    ensemble = fit_ensemble(features, labels, config, EARLY_SEEDS, num_classes=NUM_CLASSES, hidden=16)
    epochs = []
    for i, seed in enumerate(EARLY_SEEDS):
        alone, ran = _epochs_run(monkeypatch, features[i], labels[i], config, seed, model)
        epochs.append(ran)
        assert _max_param_gap(alone, ensemble, i) < 1e-5, f"agent {i} (n={EARLY_SIZES[i]}, {ran} epochs)"
    stopped_early = [e for e, n in zip(epochs, EARLY_SIZES, strict=True) if 0 < e < config.epochs and n]
    assert len(set(stopped_early)) >= 2, f"agents should stop at different epochs, got {epochs}"
    assert epochs[EARLY_SIZES.index(3)] == config.epochs  # no record to spare: all epochs


def test_early_stopping_keeps_the_best_epoch(monkeypatch):
    # With patience above the number of epochs nothing stops, but the weights returned are
    # the best epoch's, not the last: rerunning with epochs = best epoch gives them exactly.
    features, labels = _early_stopping_data()
    i = 3  # random labels: the best epoch is an early one
    long = TrainingConfig(model="mlp", epochs=6, batch_size=8, validation_fraction=0.25, patience=10)
    alone = _train_alone("mlp", features[i], labels[i], long, EARLY_SEEDS[i])
    matches = []
    for best_epoch in range(1, 7):
        short = TrainingConfig(model="mlp", epochs=best_epoch, batch_size=8, validation_fraction=0.25, patience=10)
        candidate = _train_alone("mlp", features[i], labels[i], short, EARLY_SEEDS[i])
        gap = max((p - q).abs().max().item() for p, q in zip(alone.parameters(), candidate.parameters(), strict=True))
        matches.append(gap == 0.0)
    assert any(matches[:-1]), "the best epoch of noisy labels should come before the last"
    ensemble = fit_ensemble(features[i : i + 1], labels[i : i + 1], long, EARLY_SEEDS[i : i + 1], num_classes=NUM_CLASSES, hidden=16)
    assert _max_param_gap(alone, ensemble, 0) < 1e-5


def test_early_stopping_does_not_depend_on_grouping_or_the_fused_kernel(monkeypatch):
    features, labels = _early_stopping_data()
    together = fit_ensemble(features, labels, EARLY, EARLY_SEEDS, num_classes=NUM_CLASSES, hidden=16)
    one_by_one = fit_ensemble(
        features, labels, EARLY, EARLY_SEEDS, num_classes=NUM_CLASSES, hidden=16, memory_budget_bytes=1
    )
    assert torch.allclose(together.flat_params, one_by_one.flat_params, atol=1e-6, rtol=0)
    monkeypatch.setattr(ensemble_kernels, "_FUSED_ADAM", False)
    plain = fit_ensemble(features, labels, EARLY, EARLY_SEEDS, num_classes=NUM_CLASSES, hidden=16)
    assert torch.allclose(together.flat_params, plain.flat_params, atol=1e-5, rtol=0)


def test_validation_size_and_defaults():
    assert TrainingConfig().validation_size(600) == 0  # default: no early stopping, nothing held out
    assert not TrainingConfig().early_stopping
    config = TrainingConfig(validation_fraction=0.1, patience=3)
    assert config.early_stopping
    assert [config.validation_size(n) for n in (0, 9, 10, 600)] == [0, 0, 1, 60]


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"validation_fraction": 0.2}, "patience"),
        ({"patience": 3}, "patience"),
        ({"validation_fraction": 1.0, "patience": 3}, "validation_fraction"),
        ({"validation_fraction": -0.1, "patience": 3}, "validation_fraction"),
        ({"validation_fraction": 0.2, "patience": 0}, "patience"),
    ],
)
def test_early_stopping_settings_are_validated(kwargs, argument):
    with pytest.raises(ConfigError) as error:
        TrainingConfig(**kwargs)
    assert error.value.argument == argument


def test_ensemble_refuses_augmentation_of_images():
    features, labels = _agents_data(sizes=(4, 5))
    config = TrainingConfig(model="cnn", epochs=1, batch_size=8, augment_shift=1)
    with pytest.raises(ValueError, match="augment"):
        fit_ensemble(features, labels, config, (1, 2), num_classes=NUM_CLASSES)
