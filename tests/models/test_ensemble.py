"""Batched ensemble training: the same teachers as training each agent alone."""

import numpy as np
import pytest
import torch

from fedvote.models import ensemble as ensemble_module
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


def test_initialisation_is_exactly_build_models():
    ensemble = init_ensemble("mlp", SHAPE, NUM_CLASSES, SEEDS, hidden=16)
    for i, seed in enumerate(SEEDS):
        net = build_model("mlp", SHAPE, NUM_CLASSES, hidden=16, generator=torch.Generator().manual_seed(seed))
        assert _max_param_gap(net, ensemble, i) == 0.0


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
    monkeypatch.setattr(ensemble_module, "_FUSED_ADAM", False)
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
