"""``fedvote label``: noisy-argmax answers to user queries, each charged to the ledger first."""

import json

import numpy as np
import pytest

from fedvote.config import FederationConfig, PrivacyConfig, RunConfig
from fedvote.models.training import TrainingConfig
from fedvote.privacy.accountant import epsilon_for
from fedvote.privacy.events import pate_fl_events

SMALL = ["--agents", "10", "--epochs", "3", "--teacher-model", "logistic", "--noise-seed", "1"]
# Answers are pure Gaussian releases: the exact accountant is tight and instant (PLD, the
# default, converges to the same ε from above at ~0.1-1 s per figure; tested once, below).
FAST = [*SMALL, "--accountant", "exact"]
QUERIES = 6


@pytest.fixture(scope="module")
def queries(tmp_path_factory, digits):
    """The first digits as a flat (Q, 64) .npy, a (Q, 1, 8, 8) .npz and a .csv with a header."""
    folder = tmp_path_factory.mktemp("queries")
    flat = digits.features[:QUERIES].reshape(QUERIES, -1)
    np.save(folder / "q.npy", flat)
    np.savez(folder / "q.npz", x=digits.features[:QUERIES])
    np.savetxt(folder / "q.csv", flat, delimiter=",", header=",".join(f"p{i}" for i in range(64)), comments="")
    np.save(folder / "wrong.npy", flat[:, :63])
    np.savez(folder / "nox.npz", features=flat)
    return folder


def test_every_answer_is_charged_and_epsilon_grows(queries, invoke):
    code, out, _ = invoke(["label", *SMALL, "--sigma", "6", "--queries", str(queries / "q.npy"), "--json"])
    assert code == 0
    result = json.loads(out)
    assert result["requested"] == result["answered"] == QUERIES and result["stopped"] is None
    answers = result["answers"]
    assert [a["query"] for a in answers] == list(range(QUERIES))
    assert all(0 <= a["label"] < 10 for a in answers)
    for level, sensitivity_event in (("agent", "agent"), ("instance", "instance")):
        spent = [a[f"epsilon_{level}"] for a in answers]
        assert all(b > a for a, b in zip(spent, spent[1:], strict=False))  # strictly growing
        # after the q-th answer: q Gaussian releases with σ = 6 (Theorem 3), by the same accountant
        for q, epsilon in enumerate(spent, start=1):
            expected = epsilon_for(getattr(pate_fl_events(6.0, q), sensitivity_event), 1e-3, "pld")
            assert epsilon == pytest.approx(expected, rel=1e-9)
    assert all(a["epsilon_instance"] > a["epsilon_agent"] for a in answers)


def test_text_output_has_one_line_per_answer_with_both_epsilons(queries, invoke):
    code, out, _ = invoke(["label", *FAST, "--epsilon", "2", "--queries", str(queries / "q.csv")])
    assert code == 0
    lines = out.strip().splitlines()
    assert lines[0].startswith(f"fedvote label: {QUERIES} queries, 10 teachers on digits")
    answer_lines = [line for line in lines if line.startswith("query")]
    assert len(answer_lines) == QUERIES
    agent_eps = [float(line.split("ε agent")[1].split()[0]) for line in answer_lines]
    assert agent_eps == sorted(agent_eps) and len(set(agent_eps)) == QUERIES
    assert agent_eps[-1] <= 2.0 + 1e-9  # σ calibrated so that all answers cost at most --epsilon
    assert lines[-1].startswith(f"answered {QUERIES} of {QUERIES} queries: ε (agent-level)")


def test_npz_and_npy_give_the_same_answers_and_secure_sum_changes_nothing(queries, invoke):
    labels = []
    for name, extra in (("q.npy", []), ("q.npz", []), ("q.npy", ["--secure-sum"])):
        code, out, _ = invoke(["label", *FAST, "--sigma", "3", "--queries", str(queries / name), *extra, "--json"])
        assert code == 0
        result = json.loads(out)
        labels.append([a["label"] for a in result["answers"]])
    assert result["secure_sum"] is True
    assert labels[0] == labels[1] == labels[2]


def test_the_budget_stops_answers_cleanly(queries, tmp_path, invoke):
    ledger = tmp_path / "ledger.db"
    args = ["label", *FAST, "--sigma", "4", "--queries", str(queries / "q.npy"), "--ledger", str(ledger)]
    # ε after q answers at σ = 4 (exact, δ = 1e-3): q = 2 → 0.894, q = 3 → 1.139; a budget of 1.1 fits two
    spent = [epsilon_for(pate_fl_events(4.0, q).agent, 1e-3, "exact") for q in (2, 3)]
    assert spent[0] < 1.1 < spent[1]
    code, out, _ = invoke([*args, "--budget-epsilon", "1.1", "--json"])
    assert code == 3  # stopped early at the budget: its own exit status (fedvote label --help)
    result = json.loads(out)
    assert result["answered"] == 2 and len(result["answers"]) == 2
    assert "privacy budget exceeded" in result["stopped"]
    assert result["ledger"]["spent_agent_epsilon"] <= 1.1
    # the ledger remembers: a second session on the same federation cannot answer anything
    code, out, _ = invoke([*args, "--budget-epsilon", "1.1"])
    assert code == 3
    lines = out.strip().splitlines()
    assert lines[-2].startswith(f"answered 0 of {QUERIES} queries")
    assert lines[-1].startswith("stopped before query 0: privacy budget exceeded")


def test_config_file_with_a_sigma_override(queries, tmp_path, invoke):
    config = RunConfig(
        federation=FederationConfig(agents=10),
        privacy=PrivacyConfig(epsilon=3.0, noise_seed=1, accountant="exact"),
        teacher=TrainingConfig(model="logistic", epochs=3),
    )
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config.to_dict()))
    code, out, _ = invoke(["label", "--config", str(path), "--sigma", "6", "--queries", str(queries / "q.npz"),
                           "--json"])
    assert code == 0
    result = json.loads(out)
    assert result["sigma"] == 6.0 and result["config"]["privacy"]["epsilon"] is None
    code, _, err = invoke(["label", "--config", str(path), "--agents", "5", "--queries", str(queries / "q.npy")])
    assert code == 2 and "--config cannot be combined with --agents" in err


@pytest.mark.parametrize(
    ("name", "extra", "message"),
    [
        ("wrong.npy", [], "fedvote: error: --queries: {path}: each query has shape (63,), but the federation's "
                         "examples have shape (1, 8, 8) (64 features)"),
        ("nox.npz", [], "fedvote: error: --queries: {path} holds no array 'x' (found: features)"),
        ("q.npy", ["--method", "dp-fedavg"], "fedvote: error: --method: fedvote label answers with the "
                                             "teachers' votes (pate-fl), not dp-fedavg"),
    ],
)
def test_bad_queries_get_a_one_line_error(queries, invoke, name, extra, message):
    path = queries / name
    code, _, err = invoke(["label", *FAST, "--sigma", "3", "--queries", str(path), *extra])
    assert code == 2
    assert err.strip().splitlines()[-1] == message.format(path=path)
