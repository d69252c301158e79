import inspect

import numpy as np
import pytest
import torch
from sklearn.decomposition import PCA
from torch import nn

from fedvote.data.federation import Federation, LabeledData
from fedvote.errors import ConfigError
from fedvote.methods.private_knn_fl import PrivateKnnFL
from fedvote.models.features import FEATURE_KINDS, IMAGE_KINDS, fit_feature_extractor
from fedvote.models.training import TrainingConfig
from fedvote.privacy.ledger import PrivacyLedger
from fedvote.transport.local import LocalTransport


@pytest.fixture(scope="module")
def pool():
    rng = np.random.default_rng(0)
    return rng.random((120, 1, 4, 4)).astype(np.float32)


def test_identity_flattens(pool):
    phi = fit_feature_extractor("identity", pool)
    out = phi.transform(pool)
    assert out.dtype == np.float32 and out.shape == (120, 16) and phi.dim == 16
    assert np.array_equal(out, pool.reshape(120, -1))


def test_pca_matches_sklearn_on_the_pool(pool):
    phi = fit_feature_extractor("pca", pool, dim=5, seed=3)
    reference = PCA(n_components=5, random_state=3).fit(pool.reshape(120, -1))
    x = np.random.default_rng(1).random((7, 1, 4, 4)).astype(np.float32)
    np.testing.assert_allclose(phi.transform(x), reference.transform(x.reshape(7, -1)), atol=1e-5)
    # more components than the pool's dimension: keeps all of them
    assert fit_feature_extractor("pca", pool, dim=500).dim == 16


def test_random_projection_is_seeded_and_ignores_the_data(pool):
    other_pool = np.zeros_like(pool)
    a = fit_feature_extractor("random", pool, dim=6, seed=1)
    b = fit_feature_extractor("random", other_pool, dim=6, seed=1)
    c = fit_feature_extractor("random", pool, dim=6, seed=2)
    assert np.array_equal(a.transform(pool), b.transform(pool))
    assert not np.allclose(a.transform(pool), c.transform(pool))
    assert a.transform(pool).shape == (120, 6)


def test_autoencoder_is_deterministic_and_has_the_asked_dimension(pool):
    a = fit_feature_extractor("autoencoder", pool, dim=3, seed=0, epochs=2)
    b = fit_feature_extractor("autoencoder", pool, dim=3, seed=0, epochs=2)
    assert a.transform(pool).shape == (120, 3)
    assert np.array_equal(a.transform(pool), b.transform(pool))


def test_user_module_object_and_torchscript_file(pool, tmp_path):
    module = nn.Sequential(nn.Flatten(), nn.Linear(16, 4))
    phi = fit_feature_extractor("module", pool, module=module)
    with torch.no_grad():
        expected = module(torch.as_tensor(pool)).numpy()
    np.testing.assert_allclose(phi.transform(pool), expected, rtol=1e-6)
    path = tmp_path / "backbone.pt"
    torch.jit.script(module).save(str(path))
    scripted = fit_feature_extractor("module", pool, module=str(path))
    np.testing.assert_allclose(scripted.transform(pool), expected, rtol=1e-6)
    assert scripted.dim == 4


def test_normalize_gives_unit_rows(pool):
    phi = fit_feature_extractor("pca", pool, dim=4, normalize=True)
    np.testing.assert_allclose(np.linalg.norm(phi.transform(pool), axis=1), 1.0, rtol=1e-5)


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"kind": "sift"}, "kind"),
        ({"kind": "pca", "dim": 0}, "dim"),
        ({"kind": "pca", "public_features": np.zeros((0, 3))}, "public_features"),
        ({"kind": "module"}, "module"),
        ({"kind": "module", "module": "/nonexistent/backbone.pt"}, "module"),
        ({"kind": "pca", "module": nn.Identity()}, "module"),
        ({"kind": "autoencoder", "epochs": 0}, "epochs"),
        ({"kind": "contrastive"}, "kind"),  # 4x4 examples: smaller than the 8x8 it needs
        ({"kind": "contrastive", "public_features": np.zeros((9, 64), np.float32)}, "kind"),
        ({"kind": "contrastive", "public_features": np.zeros((9, 1, 8, 8), np.float32), "epochs": 0}, "epochs"),
        ({"kind": "autoencoder", "cache": 1}, "cache"),
    ],
)
def test_bad_input_names_the_argument(pool, kwargs, argument):
    kwargs = {"public_features": pool, **kwargs}
    kind = kwargs.pop("kind")
    with pytest.raises(ConfigError) as error:
        fit_feature_extractor(kind, **kwargs)
    assert error.value.argument == argument


def test_not_a_torchscript_file_is_refused(pool, tmp_path):
    path = tmp_path / "garbage.pt"
    path.write_bytes(b"not a model")
    with pytest.raises(ConfigError, match="garbage.pt") as error:
        fit_feature_extractor("module", pool, module=path)
    assert error.value.argument == "module"


def test_transform_refuses_examples_of_another_size(pool):
    phi = fit_feature_extractor("identity", pool)
    with pytest.raises(ConfigError) as error:
        phi.transform(np.zeros((2, 5), dtype=np.float32))
    assert error.value.argument == "x"


def test_fitting_takes_only_public_data():
    # the API has exactly one data argument: the public pool
    parameters = inspect.signature(fit_feature_extractor).parameters
    assert [p for p in parameters if "feature" in p or "data" in p] == ["public_features"]


def _federation(pool, agent_seed):
    rng = np.random.default_rng(agent_seed)
    shape = pool.shape[1:]
    agents = tuple(
        LabeledData(rng.random((30, *shape)).astype(np.float32), rng.integers(0, 3, 30)) for _ in range(3)
    )
    test = LabeledData(pool[:10], np.zeros(10, dtype=np.int64))
    return Federation(
        dataset_name="toy",
        agents=agents,
        public=LabeledData(pool, np.zeros(len(pool), dtype=np.int64)),
        test=test,
        num_classes=3,
        example_shape=shape,
    )


class _Recording(LocalTransport):
    def prepare_knn(self, extractor, *, k=None, k_fraction=0.05):
        self.extractor = extractor
        return super().prepare_knn(extractor, k=k, k_fraction=k_fraction)


@pytest.mark.parametrize("kind", [k for k in FEATURE_KINDS if k != "module"])
def test_the_fitted_phi_is_the_same_whatever_the_agents_data(pool, kind, monkeypatch):
    import fedvote.methods.private_knn_fl as module

    if kind in IMAGE_KINDS:  # the 4x4 pool is too small for the image augmentations
        pool = np.random.default_rng(0).random((60, 1, 8, 8)).astype(np.float32)
    seen = []
    original = module.fit_feature_extractor

    def spy(kind, public_features, **kwargs):
        seen.append(public_features)
        return original(kind, public_features, **kwargs)

    monkeypatch.setattr(module, "fit_feature_extractor", spy)
    method = PrivateKnnFL(
        sigma=0.0,
        queries=20,
        min_responders=3,
        features=kind,
        feature_dim=4,
        student=TrainingConfig(model="logistic", epochs=1),
        self_training_rounds=0,
    )
    transforms = []
    for agent_seed in (1, 2):
        federation = _federation(pool, agent_seed)
        transport = _Recording(federation, noise_seed=0)
        method.run(federation.server_data(), transport, PrivacyLedger())
        assert seen[-1] is federation.public.features  # φ saw the public pool, nothing else
        transforms.append(transport.extractor.transform(pool))
    assert np.array_equal(transforms[0], transforms[1])


def test_torch_export_program_file(pool, tmp_path):
    module = nn.Sequential(nn.Flatten(), nn.Linear(16, 4)).eval()
    path = tmp_path / "backbone.pt2"
    batch = torch.export.Dim("batch")
    program = torch.export.export(module, (torch.as_tensor(pool[:2]),), dynamic_shapes=({0: batch},))
    torch.export.save(program, str(path))
    phi = fit_feature_extractor("module", pool, module=path)
    with torch.no_grad():
        expected = module(torch.as_tensor(pool)).numpy()
    np.testing.assert_allclose(phi.transform(pool), expected, rtol=1e-5)


# --- contrastive (SimCLR) --------------------------------------------------------------------


def _bars(n, rng, side=12):
    """Noisy images of one 2-pixel bar at a random place: horizontal (label 0) or vertical (1)."""
    labels = rng.integers(0, 2, n)
    images = rng.normal(0.0, 0.3, (n, 1, side, side)).astype(np.float32)
    where = rng.integers(1, side - 2, n)
    for i in range(n):
        if labels[i] == 0:
            images[i, 0, where[i] : where[i] + 2, :] += 1.0
        else:
            images[i, 0, :, where[i] : where[i] + 2] += 1.0
    return images, labels


def test_contrastive_gives_the_asked_dimension_and_is_deterministic_for_a_seed():
    images = np.random.default_rng(0).random((40, 1, 8, 8)).astype(np.float32)
    a = fit_feature_extractor("contrastive", images, dim=5, seed=0, epochs=2)
    b = fit_feature_extractor("contrastive", images, dim=5, seed=0, epochs=2)
    c = fit_feature_extractor("contrastive", images, dim=5, seed=1, epochs=2)
    out = a.transform(images)
    assert out.shape == (40, 5) and out.dtype == np.float32 and np.isfinite(out).all()
    assert a.kind == "contrastive" and a.dim == 5 and a.num_floats > 0
    assert np.array_equal(out, b.transform(images))
    assert not np.allclose(out, c.transform(images))
    # colour images (C = 3, H != W) too, with a pool smaller than a batch
    rgb = np.random.default_rng(1).random((7, 3, 9, 17)).astype(np.float32)
    assert fit_feature_extractor("contrastive", rgb, dim=3, epochs=1).transform(rgb).shape == (7, 3)


def test_contrastive_features_tell_horizontal_from_vertical_bars_by_1nn():
    """Trained without labels, φ separates the two classes: 1-NN on φ beats chance by far.

    200 test images, 20 labelled references. Under chance (accuracy 1/2) the count right is
    Binomial(200, 1/2), sd = √200/2 ≈ 7.1 images = 0.035; 0.75 is 7 sd above chance, so a
    φ that learnt nothing (or collapsed to a constant) fails, while the trained one reaches
    0.88-1.0 over seeds 0-4 (1.0 at seed 0).
    """
    rng = np.random.default_rng(0)
    pool, _ = _bars(200, rng)  # the unlabelled public pool φ is trained on
    reference, reference_labels = _bars(20, rng)
    test, test_labels = _bars(200, rng)
    phi = fit_feature_extractor("contrastive", pool, dim=8, seed=0, epochs=5, normalize=True)
    ref, query = phi.transform(reference), phi.transform(test)  # (20, 8), (200, 8)
    distances = ((query[:, None, :] - ref[None, :, :]) ** 2).sum(axis=2)  # (200, 20)
    accuracy = float(np.mean(reference_labels[distances.argmin(axis=1)] == test_labels))
    assert accuracy >= 0.75


def test_contrastive_refuses_vectors_naming_the_alternative():
    with pytest.raises(ConfigError, match="needs image examples.*'autoencoder'") as error:
        fit_feature_extractor("contrastive", np.zeros((9, 64), np.float32))
    assert error.value.argument == "kind" and "\n" not in str(error.value)


def test_private_knn_fl_refuses_contrastive_on_vectors_by_its_option():
    vectors = np.random.default_rng(0).random((40, 6)).astype(np.float32)
    method = PrivateKnnFL(sigma=0.0, queries=5, min_responders=3, features="contrastive")
    federation = _federation(vectors, 1)
    with pytest.raises(ConfigError) as error:
        method.fit_features(federation.server_data())
    assert error.value.argument == "features"
