"""experiments/projected_votes.py (issue 43): the projected release's norm bound, its σ at the same
agent ε, and the C_p ridge that reads it."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from dp_accounting import dp_event, pld

from fedvote.privacy.accountant import epsilon_for
from fedvote.privacy.events import gaussian_release_event


@pytest.fixture(scope="module")
def projected(load_experiment):
    return load_experiment("projected_votes")


def _basis(queries: int, k: int, seed: int) -> np.ndarray:
    """An orthonormal (Q, k + 1) basis whose first column is the constant, as the script builds it."""
    rng = np.random.default_rng(seed)
    columns = np.concatenate([np.ones((queries, 1)), rng.normal(size=(queries, k))], axis=1)
    basis, _ = np.linalg.qr(columns)
    return basis * np.sign(basis[0, 0])


def test_every_agents_release_is_its_projection_scaled_to_at_most_the_clip(projected):
    rng = np.random.default_rng(0)
    agents, queries, classes, k = 6, 40, 4, 5
    centred = projected.centred_votes(rng.integers(0, classes, size=(agents, queries)), classes)  # (A, Q, C)
    np.testing.assert_allclose(centred.sum(axis=2), 0.0, atol=1e-12)
    basis = _basis(queries, k, 1)
    norms = [np.linalg.norm(basis.T @ centred[a]) for a in range(agents)]  # brute force, agent by agent
    clip = float(np.median(norms))
    released = projected.projected_release(centred, basis, clip)
    for a in range(agents):
        expected = basis.T @ centred[a]
        if norms[a] > clip:
            expected = expected * clip / norms[a]
        np.testing.assert_allclose(released[a], expected, rtol=1e-12, atol=1e-12)
        assert np.linalg.norm(released[a]) <= clip * (1 + 1e-12)
    # no agent can move the sum by more than the clip, whatever its votes: its largest norm is √(Q(1 − 1/C))
    assert max(norms) <= math.sqrt(queries * (1 - 1 / classes)) + 1e-9


def test_the_clipped_sigma_keeps_the_dense_releases_agent_epsilon(projected):
    """Q queries of sensitivity 1 at σ and one release of sensitivity c at σ·c/√Q: one Gaussian of μ = √Q/σ."""
    sigma, queries = 45.08, 3000
    clip = math.sqrt(0.5 * queries * 0.9)
    noise = projected.clipped_sigma(sigma, queries, clip)
    dense = epsilon_for(gaussian_release_event(sigma, 1.0, queries), 1e-3)
    clipped = epsilon_for(gaussian_release_event(noise, clip, 1), 1e-3)
    assert clipped == pytest.approx(dense, rel=1e-6)


def test_the_cp_ridge_keeps_clean_coefficients_and_shrinks_pure_noise(projected):
    rng = np.random.default_rng(3)
    singular = np.sort(rng.uniform(20.0, 50.0, size=30))[::-1]  # λ/s² ≤ 4e-4 at the grid's smallest λ
    clean = singular[:, None] * rng.normal(size=(30, 4))  # coefficients r = s·β of a true β
    beta, ridge = projected.cp_ridge(singular, clean, 0.0)  # no noise: the least shrinkage on the grid
    assert ridge == pytest.approx(float((singular**2).mean()) * 1e-4)
    np.testing.assert_allclose(beta, clean / singular[:, None], rtol=1e-3)
    noise = rng.normal(0.0, 10.0, size=(30, 4))  # nothing but noise: the most shrinkage on the grid
    beta, ridge = projected.cp_ridge(singular, noise, 10.0)
    assert ridge == pytest.approx(float((singular**2).mean()) * 1e3)
    assert np.abs(beta).max() < 0.1 * np.abs(noise / singular[:, None]).max()


def test_normalised_releases_all_have_the_clips_norm(projected):
    rng = np.random.default_rng(4)
    agents, queries, classes, k = 5, 30, 3, 4
    centred = projected.centred_votes(rng.integers(0, classes, size=(agents, queries)), classes)
    released = projected.projected_release(centred, _basis(queries, k, 2), 0.7, normalise=True)
    np.testing.assert_allclose(np.sqrt((released**2).sum(axis=(1, 2))), 0.7, rtol=1e-12)


def test_one_agents_clipped_release_moves_by_at_most_the_instance_sensitivity(projected):
    """Brute force over vote pairs of one agent: ‖release(V) − release(V')‖ ≤ min(2c, √(2Q))."""
    rng = np.random.default_rng(5)
    queries, classes, k = 12, 3, 3
    basis = _basis(queries, k, 3)
    largest = 0.0
    for clip in (0.5, 2.0, 10.0):
        bound = min(2 * clip, math.sqrt(2 * queries))
        for _ in range(400):
            pair = projected.centred_votes(rng.integers(0, classes, size=(2, queries)), classes)
            for normalise in (False, True) if clip < 1 else (False,):
                moved = projected.projected_release(pair, basis, clip, normalise=normalise)
                distance = float(np.linalg.norm(moved[0] - moved[1]))
                assert distance <= bound * (1 + 1e-12)
                largest = max(largest, distance / bound)
    assert largest > 0.9  # the bound is nearly reached, so the test can fail where the bound is wrong


def test_instance_epsilon_is_dp_accountings_gaussian_at_the_instance_sensitivity(projected):
    sigma, queries = 45.08, 3000
    dense = (
        pld.PLDAccountant()
        .compose(dp_event.GaussianDpEvent(sigma / math.sqrt(2 * queries)))
        .get_epsilon(1e-3)
    )
    assert projected.instance_epsilon(sigma, queries, None) == pytest.approx(dense, rel=1e-3)
    clip = math.sqrt(0.5 * queries * 0.9)  # 2c < √(2Q): the clip binds
    noise = projected.clipped_sigma(sigma, queries, clip)
    clipped = pld.PLDAccountant().compose(dp_event.GaussianDpEvent(noise / (2 * clip))).get_epsilon(1e-3)
    assert projected.instance_epsilon(noise, queries, clip) == pytest.approx(clipped, rel=1e-3)
    assert projected.instance_epsilon(noise, queries, clip) > projected.instance_epsilon(sigma, queries, None)


def _part(label: str, means: dict[int, float]) -> dict:
    """A saved projected_votes part whose normalised k = 200 row reads ``means[seed]`` at each seed."""

    def rows(mean: float) -> list[dict]:
        dense = {"release": "dense votes (the defaults')", "matched": [0.5], "instance_epsilon": 6.22}
        normalised = {"release": "projected on k = 200 directions, every agent normalised",
                      "matched": [mean - 0.01, mean + 0.01], "instance_epsilon": 9.82}  # fmt: skip
        return [dense, normalised]

    return {"federation": label, "rows": rows(means[0]),
            "seeds": {str(seed): rows(mean) for seed, mean in means.items() if seed}}  # fmt: skip


@pytest.mark.parametrize(("dp_fedavg", "verdict"), [(0.567, "above"), (0.59, "not above")])
def test_the_cifar10_table_says_whether_the_projected_release_passes_dp_fedavg(
    load_experiment, tmp_path, monkeypatch, dp_fedavg, verdict
):
    voting = load_experiment("cifar10_voting")
    (tmp_path / "results").mkdir()
    record = {"parts": [_part("Fashion-MNIST, the Bar's command", {0: 0.9, 1: 0.9}),
                        _part("CIFAR-10 (JPEG copy), the Bar's command", {0: 0.574, 1: 0.571, 2: 0.571})]}  # fmt: skip
    (tmp_path / "results" / "projected_votes.json").write_text(json.dumps(record))
    monkeypatch.setattr(voting, "HERE", tmp_path)
    (line,) = voting.projected_release_lines(dp_fedavg)
    assert f"0.572 over seeds 0–2, {verdict} DP-FedAvg's {dp_fedavg:.3f}" in line
    assert "instance ε 9.82 against the dense votes' 6.22" in line
    assert voting.projected_release_lines(None)[0].startswith("A release that is not fedvote's")
    (tmp_path / "results" / "projected_votes.json").unlink()
    assert voting.projected_release_lines(dp_fedavg) == []


def test_the_seeds_table_gives_each_seed_and_the_means(projected, monkeypatch):
    monkeypatch.setattr(projected, "dp_fedavg_runs", lambda: {0: 0.566, 1: 0.568, 2: 0.567})
    lines = projected.seeds_table(
        _part("CIFAR-10 (JPEG copy), the Bar's command", {0: 0.574, 1: 0.571, 2: 0.571})
    )
    assert "| 1 | 0.500 | 0.571 | +7.1 points | 0.568 |" in lines
    assert lines[-1] == "| mean | 0.500 | 0.572 | +7.2 points | 0.567 |"
    assert projected.seeds_table({"federation": "x", "rows": []}) == []  # one seed: no table


@pytest.mark.parametrize(("grown_mean", "verdict"), [(0.584, "still under"), (0.605, "at or above")])
def test_the_pool_table_gives_each_pool_share_and_says_whether_the_best_passes_060(
    projected, grown_mean, verdict
):
    part = {**_part("CIFAR-10 (JPEG copy), the Bar's command", {0: 0.574}), "queries": 3000}
    for row in part["rows"]:
        row["sigma"] = 45.08
    grown = _part("unused", {0: grown_mean})["rows"]
    for row in grown:
        row["sigma"] = 68.87
    pools = [{"public_fraction": 0.7, "queries": 7000, "test_size": 3000, "rows": grown}]
    lines = projected.pool_table(part, pools)
    assert "| 0.3 (the defaults) | 3,000 | 7,000 | 45.08 | 0.500 | 0.574 | 6.22 / 9.82 |" in lines
    assert f"| 0.7 | 7,000 | 3,000 | 68.87 | 0.500 | {grown_mean:.3f} | 6.22 / 9.82 |" in lines
    assert lines[-1].startswith(
        f"The best: {grown_mean:.3f} (normalised, pool share 0.7), {verdict} the Bar's 0.60."
    )
    assert projected.pool_table({**part, "federation": "Fashion-MNIST, the Bar's command"}, pools) == []
    assert projected.pool_table(part, []) == []


def test_the_perfect_table_compares_each_release_with_its_bar(projected):
    def perfect(label: str, dense: float, normalised: float) -> dict:
        return {
            "federation": label,
            "rows": [{"matched": [dense]}, {"matched": [normalised - 0.01, normalised + 0.01]}],
        }

    lines = projected.perfect_table([perfect("CIFAR-10 (JPEG copy), the Bar's command", 0.587, 0.602),
                                     perfect("Fashion-MNIST, the Bar's command", 0.832, 0.838)])  # fmt: skip
    assert "| CIFAR-10 (JPEG copy), the Bar's command | 0.587 | 0.602 | 0.60 |" in lines
    assert "| Fashion-MNIST, the Bar's command | 0.832 | 0.838 | 0.85 |" in lines
    assert lines[-1].startswith(
        "Teachers right on every pool image reach the Bar through the defaults' release on neither command, "
        "through the normalised one on CIFAR-10. Where even they fall short"
    )
    assert projected.perfect_table([]) == []


def test_perfect_teachers_vote_the_pools_true_labels(projected, monkeypatch):
    """rows_at(perfect=True) never trains a teacher: every agent's vote is the pool's true label."""
    from types import SimpleNamespace

    rng = np.random.default_rng(1)
    labels = np.repeat(np.arange(3), 30)
    pool = 5.0 * np.eye(3)[labels] + rng.normal(0.0, 0.2, (90, 3))
    test_labels = np.repeat(np.arange(3), 10)
    test = 5.0 * np.eye(3)[test_labels] + rng.normal(0.0, 0.2, (30, 3))
    federation = SimpleNamespace(
        num_classes=3, num_agents=4, public=SimpleNamespace(labels=labels, features=pool)
    )
    bar = SimpleNamespace(federation=federation, sigma=1e-6, pool=pool, test=test, test_labels=test_labels)
    monkeypatch.setattr(projected, "prepared", lambda settings, data_dir, seed: bar)
    monkeypatch.setattr(projected, "fit_teachers", lambda bar: pytest.fail("perfect teachers train nothing"))
    rows, _, queries = projected.rows_at("x", {}, "d", 0, (2,), (), perfect=True)
    assert (
        queries == 90 and rows[0]["clean"] == 1.0
    )  # the dense sums of the true labels teach every test point
