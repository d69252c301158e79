"""experiments/prifedsync_cifar10.py and experiments/fedaux_cifar10.py (issue 43, tables 3a and 3b):
rows saved before ``--seeds`` existed load as seed 0, a rerun of one seed replaces that seed's rows
only, and the sections show every seed's value with the mean ± std and name the seeds present.
Hand-made rows only: nothing is trained and no data set is read."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest


@pytest.fixture(scope="module")
def prifedsync(load_experiment):
    return load_experiment("prifedsync_cifar10")


@pytest.fixture(scope="module")
def fedaux(load_experiment):
    return load_experiment("fedaux_cifar10")


# --- PriFedSync (table 3a) ------------------------------------------------------------------------


def _history(reached: int | None, rounds: int, final: float) -> list[dict[str, Any]]:
    """Per-round diagnostics whose mean personalised accuracy first reaches 0.52 at ``reached``."""
    out = []
    for k in range(1, rounds + 1):
        personal = 0.53 if reached is not None and k >= reached else 0.40
        out.append({"round": k, "personalised": final if k == rounds else personal, "global": 0.45})
    return out


def _pri_row(seed: int | None, sigma: float | None, personal_round: int | None, personalised: float,
             kind: str = "patch", seconds: float = 60.0, rounds: int = 30) -> dict[str, Any]:  # fmt: skip
    row = {
        "input_features": kind, "sigma": sigma, "fedvote_sigma": 0.0 if sigma is None else 2 * sigma, "p": 0.5,
        "round_reached": None, "personalised_round": personal_round, "rounds": rounds, "max_rounds": 30,
        "epsilon": None if sigma is None else 10.66, "epsilon_ex_post": None if sigma is None else 10.66,
        "mu_at_stop": None if sigma is None else 10.27,
        "mu_at_personalised_round": None if sigma is None or personal_round is None else 6.22,
        "epsilon_at_personalised": None if sigma is None or personal_round is None else 5.93,
        "min_client_records": 497, "delta": 1e-5, "global_public": 0.5, "personalised": personalised,
        "global": 0.54, "global_full_test": 0.5367,
        "public_history": [{"round": k, "global": 0.5} for k in range(1, rounds + 1)],
        "history": _history(personal_round, rounds, personalised), "seconds": seconds,
        "load_before": 3.2, "load_after": 2.8, "commit": f"commit abc{seed if seed is not None else 0}",
        "invocation": "FEDVOTE_DATA=... experiments/prifedsync_cifar10.py", "features_seconds": 290.0,
    }  # fmt: skip
    if sigma is None:
        row["paired_sigma"] = 0.5
    if seed is not None:
        row["seed"] = seed
    return row


def _pri_record(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {"name": "prifedsync_cifar10", "machine": "here", "date": "2026-11-28", "rows": rows}


def test_prifedsync_rows_saved_without_a_seed_load_as_seed_0(prifedsync, tmp_path):
    saved = tmp_path / "prifedsync_cifar10.json"
    old = [_pri_row(None, 0.5, 11, 0.5608), _pri_row(None, None, 3, 0.6158)]
    saved.write_text(json.dumps(_pri_record(old)))
    rows = prifedsync.load(saved)["rows"]
    assert [(r["sigma"], r["seed"]) for r in rows] == [(0.5, 0), (None, 0)]


def test_a_prifedsync_rerun_of_seed_1_replaces_only_seed_1s_rows(prifedsync, tmp_path, monkeypatch):
    saved = tmp_path / "prifedsync_cifar10.json"
    old = [_pri_row(None, 0.5, 11, 0.56), _pri_row(1, 0.5, 9, 0.57), _pri_row(1, None, 3, 0.61),
           _pri_row(2, 0.5, 14, 0.55), _pri_row(None, 0.5, None, 0.46, kind="none")]  # fmt: skip
    saved.write_text(json.dumps(_pri_record(old)))
    written: dict[str, Any] = {}
    monkeypatch.setattr(prifedsync, "save_results", lambda name, record, text: written.update(record=record))
    new = _pri_row(1, 0.5, 8, 0.58)
    prifedsync._save(saved, _pri_record([new]))
    rows = written["record"]["rows"]
    by_key = {(r["input_features"], r["sigma"], r["seed"]): r["personalised"] for r in rows}
    assert by_key == {
        ("patch", 0.5, 0): 0.56,  # seed 0, the seed-less row, kept
        ("patch", 0.5, 1): 0.58,  # seed 1's σ 0.5 row replaced by the rerun's
        ("patch", None, 1): 0.61,  # seed 1's reference, not rerun, kept
        ("patch", 0.5, 2): 0.55,
        ("none", 0.5, 0): 0.46,
    }
    assert len(rows) == 5


# --- FedAUXfdp (table 3b) -------------------------------------------------------------------------


def _aux_row(seed: int | None, alpha: float, method: str, setting: str, accuracy: float) -> dict[str, Any]:
    row = {"alpha": alpha, "method": method, "setting": setting, "load_before": 10.0, "accuracy": accuracy,
           "epsilon": 0.6, "epsilon_pld": 0.6, "agent_epsilon": 476.3, "delta": 2e-5, "extractor_dim": None,
           "lambda_": None, "seconds": 20.0, "load_after": 9.0}  # fmt: skip
    if "no class DP" in setting:
        row.update(epsilon=None, epsilon_pld=None, agent_epsilon=None)
    if seed is not None:
        row["seed"] = seed
    return row


def _aux_rows(seed: int | None, shift: float) -> list[dict[str, Any]]:
    """All 16 rows of one seed; accuracy = a per-cell base + ``shift``."""
    rows = []
    for a, alpha in enumerate((0.01, 10.24)):
        for s, setting in enumerate(("paper settings", "defaults")):
            for m, method in enumerate(("fedaux-fdp", "fedd-p", "fedavg-p")):
                rows.append(
                    _aux_row(seed, alpha, method, setting, 0.30 + 0.04 * a + 0.02 * s + 0.01 * m + shift)
                )
            rows.append(_aux_row(seed, alpha, "fedaux-fdp", setting + ", no class DP", 0.40 + shift))
    return rows


def test_fedaux_rows_saved_without_a_seed_load_as_seed_0_with_their_run(fedaux, tmp_path):
    saved = tmp_path / "fedaux_cifar10.json"
    old = {"name": "fedaux_cifar10", "date": "2026-11-28", "machine": "old host", "commit": "commit b512b94",
           "features_seconds": 1214.5, "seconds": 2065.1, "rows": _aux_rows(None, 0.0)}  # fmt: skip
    saved.write_text(json.dumps(old))
    record = fedaux.load(saved)
    assert {r["seed"] for r in record["rows"]} == {0} and len(record["rows"]) == 16
    assert record["runs"] == [{"seed": 0, "date": "2026-11-28", "machine": "old host", "commit": "commit b512b94",
                               "features_seconds": 1214.5, "seconds": 2065.1}]  # fmt: skip


def test_a_fedaux_rerun_of_seed_1_replaces_only_seed_1s_rows(fedaux):
    record = {"rows": _aux_rows(0, 0.0) + _aux_rows(1, 0.01) + _aux_rows(2, 0.02),
              "runs": [{"seed": s, "seconds": 100.0 + s} for s in (0, 1, 2)]}  # fmt: skip
    rerun = [_aux_row(1, 0.01, "fedaux-fdp", "paper settings", 0.99)]
    out = fedaux.replace_seed(record, {"seed": 1, "seconds": 7.0}, rerun)
    assert [r for r in out["rows"] if r["seed"] == 1] == rerun
    assert [r for r in out["rows"] if r["seed"] != 1] == _aux_rows(0, 0.0) + _aux_rows(2, 0.02)
    assert out["runs"] == [
        {"seed": 0, "seconds": 100.0},
        {"seed": 1, "seconds": 7.0},
        {"seed": 2, "seconds": 102.0},
    ]


def test_the_prifedsync_section_shows_each_seed_the_mean_and_std_and_names_the_seeds(prifedsync):
    rows = [
        _pri_row(0, 0.5, 11, 0.5608), _pri_row(1, 0.5, 9, 0.5500), _pri_row(2, 0.5, 14, 0.5700),
        _pri_row(0, 1.0, None, 0.4940), _pri_row(1, 1.0, None, 0.4900), _pri_row(2, 1.0, 28, 0.5230),
        _pri_row(0, None, 3, 0.6158), _pri_row(1, None, 2, 0.6100), _pri_row(2, None, 3, 0.6200),
        _pri_row(0, 0.5, None, 0.4577, kind="none", seconds=315.0),
        _pri_row(0, None, None, 0.4628, kind="none", seconds=370.0),
    ]  # fmt: skip
    text = prifedsync.section(_pri_record(rows))
    # σ = 0.5: the rounds each seed reached 52 %, each seed's accuracy, mean 0.5603 and sample std 0.0100
    assert "| patch features | 0.5 | 0, 1, 2 | —, —, — | 11, 9, 14 (405) |" in text
    assert "| 0.5608, 0.5500, 0.5700 | 0.5603 ± 0.0100 (52.01 %) |" in text
    # σ = 1 reached in seed 2 only; mean 0.5023, sample std 0.0180
    assert "| —, —, 28 (904) |" in text and "| 0.4940, 0.4900, 0.5230 | 0.5023 ± 0.0180 (52.07 %) |" in text
    assert "**patch features, σ = 1: 52 % was not reached in 30 rounds in seed 0, 1**" in text
    # the seeds present, computed: the pixel rows ran seed 0 only and are named so
    assert "Seeds 0, 1, 2 (`--seeds`" in text and "the 'pixels' rows: seed 0 only" in text
    assert "Seed 0 only" not in text and "for want of CPU time: those runs took 342 s on average" in text
    # the Reading names every seed's round, from the rows, and the paper's figure beside them
    assert "reached at round 11 in seed 0" in text and "reached at round 14 in seed 2" in text
    assert "not reached in 30 rounds in seed 1 (best" in text
    assert "in far fewer rounds than the paper's (9–28 against its 405–904)" in text
    # every run with its seconds, load and commit
    assert "* patch features, σ = 0.5, seed 1: 60 s for 30 rounds, load 3.2 → 2.8" in text
    assert "fedvote commit abc1" in text and "fedvote commit abc2" in text
    # the privacy labels stay: proven for the configured R, ex post, CLT μ asymptotic
    for label in ("ε proven, configured R", "ε ex post, rounds run", "μ_max CLT at personalised round",
                  "asymptotic, not a bound"):  # fmt: skip
        assert label in text


def test_the_prifedsync_section_says_seed_0_only_when_only_seed_0_ran(prifedsync):
    text = prifedsync.section(_pri_record([_pri_row(0, 0.5, 11, 0.5608), _pri_row(0, None, 3, 0.6158)]))
    assert "Seed 0 (`--seeds`" in text and "only" not in text.split("Seed 0 (`--seeds`")[1].split(".")[0]
    assert "| 0.5608 | 0.5608 ± 0.0000 (52.01 %) |" in text
    assert "'pixels': the same runs" not in text and "'pixels' rows" not in text


def test_the_fedaux_section_shows_each_seed_the_mean_and_std_and_names_the_seeds(fedaux):
    rows = _aux_rows(0, 0.0) + _aux_rows(1, 0.01) + _aux_rows(2, 0.05)
    runs = [{"seed": s, "date": "2026-11-28", "machine": "host; fedvote commit abc", "commit": f"commit abc{s}",
             "features_seconds": 1000.0 + s, "seconds": 2000.0 + s} for s in (0, 1, 2)]  # fmt: skip
    text = fedaux.section({"rows": rows, "runs": runs})
    # fedaux-fdp, paper settings, α = 0.01: 0.300, 0.310, 0.350 → mean 0.320, sample std 0.026
    assert "| fedaux-fdp, paper settings | 0.600 | 0.300, 0.310, 0.350 | 0.320 ± 0.026 |" in text
    # fedd-p, defaults, α = 10.24: 0.37 + shift → 0.370, 0.380, 0.420 → mean 0.390 ± 0.026
    assert (
        "| fedd-p, defaults | 0.600 | 0.330, 0.340, 0.380 | 0.350 ± 0.026 | 0.370, 0.380, 0.420 | 0.390 ± 0.026 |"
        in text
    )
    assert "Seeds 0, 1, 2 (a seed sets the hold-out" in text and "Seed 0 only" not in text
    for s in (0, 1, 2):
        assert (
            f"seed {s} ran 2026-11-28 at fedvote commit abc{s}: patch features mapped once in {1000 + s} s"
            in text
        )
    # FedAUXfdp is 0.02 behind the better baseline (fedavg-p) in every seed and cell: the verdict says so
    assert "paper settings, α = 0.01: FedAUXfdp − best baseline per seed -0.020, -0.020, -0.020" in text
    assert "**not ahead in any of the 3 seeds**" in text and "ahead in all" not in text
    assert "* fedd-p, paper settings, α = 0.01: seed 0 0.310, 20 s, load 10.0 → 9.0; seed 1 0.320" in text


def test_the_fedaux_verdict_counts_the_seeds_where_fedaux_is_ahead(fedaux):
    rows = _aux_rows(0, 0.0) + _aux_rows(1, 0.0)
    for row in rows:  # seed 1: FedAUXfdp 0.05 above its seed-0 figure, ahead of both baselines there
        if row["seed"] == 1 and (row["method"], row["setting"], row["alpha"]) == (
            "fedaux-fdp",
            "paper settings",
            0.01,
        ):
            row["accuracy"] += 0.05
    text = fedaux.section({"rows": rows, "runs": [{"seed": 0}, {"seed": 1}]})
    assert (
        "paper settings, α = 0.01: FedAUXfdp − best baseline per seed -0.020, +0.030 (mean +0.005 ± 0.035)"
        in text
    )
    assert "**ahead in 1 of 2 seeds only**" in text


def test_a_fedaux_run_of_seed_1_on_an_old_file_keeps_seed_0s_rows_and_run(fedaux, tmp_path, monkeypatch):
    saved = tmp_path / "fedaux_cifar10.json"
    old = {"name": "fedaux_cifar10", "date": "2026-11-28", "machine": "old host", "commit": "commit b512b94",
           "features_seconds": 1214.5, "seconds": 2065.1, "rows": _aux_rows(None, 0.0)}  # fmt: skip
    saved.write_text(json.dumps(old))
    written: dict[str, Any] = {}

    def save_results(name: str, record: dict[str, Any], text: str) -> None:
        written.update(record=record, text=text)
        saved.write_text(json.dumps(record))

    monkeypatch.setattr(fedaux, "save_results", save_results)
    monkeypatch.setattr(fedaux, "machine", lambda: "new host")
    monkeypatch.setattr(fedaux, "code_version", lambda: "commit 358fb4d")
    monkeypatch.setattr(fedaux, "mapped_datasets", lambda data_dir, seed, limit: (None, None, None, 5.0))
    monkeypatch.setattr(fedaux, "federation", lambda clients, aux, test, alpha, seed: seed)
    monkeypatch.setattr(fedaux, "base_config", lambda data_dir, seed: SimpleNamespace(seed=seed))
    seeds_seen = []

    def one_run(base, fed, alpha, method, setting, options):
        seeds_seen.append((base.seed, fed))
        return _aux_row(base.seed, alpha, method, setting, 0.9)

    monkeypatch.setattr(fedaux, "one_run", one_run)
    fedaux.run_seed(saved, "data", 1, None)
    record = written["record"]
    assert set(seeds_seen) == {(1, 1)}  # the seed reaches the split and the run config
    assert record["rows"][:16] == [{**r, "seed": 0} for r in _aux_rows(None, 0.0)]
    assert [r["accuracy"] for r in record["rows"][16:]] == [0.9] * 16 and {
        r["seed"] for r in record["rows"][16:]
    } == {1}
    assert [(r["seed"], r["machine"], r["commit"]) for r in record["runs"]] == [
        (0, "old host", "commit b512b94"), (1, "new host", "commit 358fb4d")]  # fmt: skip
    assert "Seeds 0, 1 (a seed sets" in written["text"]
