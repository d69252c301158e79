import math

import numpy as np
import pytest
from sklearn.neighbors import NearestNeighbors

from fedvote.aggregation.knn import KnnIndex, knn_votes, knn_votes_by_agent, resolve_k
from fedvote.config import FederationConfig, PrivacyConfig, RunConfig
from fedvote.data.federation import Federation, LabeledData
from fedvote.errors import ConfigError
from fedvote.methods import METHODS
from fedvote.methods.pate_fl import PateFL
from fedvote.methods.private_knn_fl import PAPER_STATEMENT, KnnOptions, PrivateKnnFL
from fedvote.models.features import fit_feature_extractor
from fedvote.models.training import TrainingConfig
from fedvote.privacy.accountant import epsilon_for
from fedvote.privacy.events import pate_fl_events, private_knn_fl_events
from fedvote.privacy.ledger import PrivacyLedger
from fedvote.runner import privacy_report, run, with_statements
from fedvote.transport.base import Transport, VoteSum
from fedvote.transport.capabilities import KnnVotes
from fedvote.transport.local import LocalTransport

FAST = TrainingConfig(model="logistic", epochs=15, learning_rate=0.05)

# --- the kNN vote ----------------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 3, 7])
def test_votes_match_sklearn_nearest_neighbors(k):
    rng = np.random.default_rng(k)
    records = rng.normal(size=(80, 5)).astype(np.float32)
    labels = rng.integers(0, 4, size=80)
    queries = rng.normal(size=(30, 5)).astype(np.float32)
    votes = knn_votes(queries, records, labels, k, 4)  # (30, 4)
    _, neighbours = NearestNeighbors(n_neighbors=k).fit(records).kneighbors(queries)
    expected = np.stack([np.bincount(labels[row], minlength=4) / k for row in neighbours])
    np.testing.assert_allclose(votes, expected)
    np.testing.assert_allclose(votes.sum(axis=1), 1.0)


def _reference_with_ties(queries, records, labels, k, num_classes):
    """Exact integer distances; ties broken towards the lower record index (stable sort)."""
    out = np.zeros((queries.shape[0], num_classes))
    for q, query in enumerate(queries.astype(np.int64)):
        distances = ((records.astype(np.int64) - query) ** 2).sum(axis=1)
        order = np.argsort(distances, kind="stable")[:k]
        out[q] = np.bincount(labels[order], minlength=num_classes) / k
    return out


@pytest.mark.parametrize("seed", range(4))
def test_ties_go_to_the_lower_record_index(seed):
    rng = np.random.default_rng(seed)
    records = rng.integers(0, 3, size=(60, 2)).astype(np.float32)  # many exact ties
    labels = rng.integers(0, 3, size=60)
    queries = rng.integers(0, 3, size=(25, 2)).astype(np.float32)
    for k in (1, 4, 9):
        votes = knn_votes(queries, records, labels, k, 3)
        np.testing.assert_allclose(votes, _reference_with_ties(queries, records, labels, k, 3))


def test_all_records_at_one_point_vote_with_the_first_k():
    records = np.zeros((6, 2), dtype=np.float32)
    labels = np.array([2, 2, 0, 1, 1, 1])
    votes = knn_votes(np.ones((1, 2), dtype=np.float32), records, labels, 2, 3)
    np.testing.assert_allclose(votes, [[0.0, 0.0, 1.0]])


def test_chunked_equals_unchunked():
    rng = np.random.default_rng(0)
    records = [rng.normal(size=(n, 6)).astype(np.float32) for n in (40, 0, 17, 55)]
    labels = [rng.integers(0, 5, size=r.shape[0]) for r in records]
    queries = rng.normal(size=(33, 6)).astype(np.float32)
    ks = [3, 2, 5, 1]
    whole = knn_votes_by_agent(queries, records, labels, ks, 5, memory_budget_bytes=1 << 30)
    one_query_at_a_time = knn_votes_by_agent(queries, records, labels, ks, 5, memory_budget_bytes=1)
    assert np.array_equal(whole, one_query_at_a_time)
    # every agent among its own records only, as if alone
    for i in range(4):
        np.testing.assert_allclose(whole[i], knn_votes(queries, records[i], labels[i], ks[i], 5))
    assert not whole[1].any()  # an agent with no records votes zeros


def test_chunks_stay_within_the_memory_budget(monkeypatch):
    import fedvote.aggregation.knn as knn

    rows = []
    original = knn._nearest_mask

    def spy(distances, k):
        rows.append(distances.shape)
        return original(distances, k)

    monkeypatch.setattr(knn, "_nearest_mask", spy)
    rng = np.random.default_rng(0)
    records = [rng.normal(size=(600, 3)).astype(np.float32), rng.normal(size=(400, 3)).astype(np.float32)]
    labels = [rng.integers(0, 2, 600), rng.integers(0, 2, 400)]
    index = KnnIndex(records, labels, [3, 3], 2, memory_budget_bytes=24 * 1000 * 10)
    index.votes(rng.normal(size=(95, 3)).astype(np.float32))
    # at most 10 queries × all 1000 records per chunk, each agent on its own columns
    assert max(r[0] for r in rows) == 10 and sum(r[0] for r in rows) == 2 * 95
    assert {r[1] for r in rows} == {600, 400}
    # 10^4 queries × 10^5 records under the default budget: ~100-query chunks, never the 4 GB matrix
    default_rows = knn._DEFAULT_MEMORY_BUDGET // (knn._BYTES_PER_PAIR * 100_000)
    assert 10 <= default_rows < 10_000


def test_an_agent_with_fewer_than_k_records_still_divides_by_k():
    votes = knn_votes(np.zeros((2, 1), np.float32), np.zeros((2, 1), np.float32), np.array([0, 1]), 5, 2)
    np.testing.assert_allclose(votes, [[0.2, 0.2], [0.2, 0.2]])


def test_resolve_k():
    assert resolve_k(125, None, 0.05) == 6  # round(6.25)
    assert resolve_k(130, None, 0.05) == 7  # round(6.5) half up
    assert resolve_k(3, None, 0.05) == 1  # at least one neighbour
    assert resolve_k(3, 4, 0.05) == 4
    for kwargs, argument in [({"k": 0}, "k"), ({"k": None, "k_fraction": 0.0}, "k_fraction")]:
        with pytest.raises(ConfigError) as error:
            resolve_k(10, kwargs.get("k"), kwargs.get("k_fraction", 0.05))
        assert error.value.argument == argument


# --- agents and the local transport ----------------------------------------------------------


def _uneven_federation(sizes=(20, 60, 100), seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=4.0, size=(3, 4))

    def draw(n):
        y = rng.integers(0, 3, size=n)
        return LabeledData((centres[y] + rng.normal(size=(n, 4))).astype(np.float32), y.astype(np.int64))

    return Federation(
        dataset_name="blobs",
        agents=tuple(draw(n) for n in sizes),
        public=draw(150),
        test=draw(60),
        num_classes=3,
        example_shape=(4,),
    )


@pytest.fixture(scope="module")
def uneven():
    return _uneven_federation()


def test_prepare_knn_returns_each_agents_k(uneven):
    phi = fit_feature_extractor("identity", uneven.public.features)
    assert LocalTransport(uneven, noise_seed=0).prepare_knn(phi).tolist() == [1, 3, 5]
    assert LocalTransport(uneven, noise_seed=0).prepare_knn(phi, k=4).tolist() == [4, 4, 4]


def test_batched_and_per_agent_paths_release_the_same_sums(uneven):
    phi = fit_feature_extractor("pca", uneven.public.features, dim=3)
    queries = np.arange(40)
    sums = []
    for batched in (True, False):
        transport = LocalTransport(uneven, noise_seed=7, batched=batched)
        transport.prepare_knn(phi, k=3)
        sums.append(transport.knn_vote_sum(queries, 0.5, 3).sums)
        accuracies = transport.teacher_accuracies(uneven.test)
        assert accuracies.shape == (3,) and (accuracies > 0.5).all()
    np.testing.assert_allclose(sums[0], sums[1], atol=1e-12)


def test_noise_statistics(uneven):
    phi = fit_feature_extractor("identity", uneven.public.features)
    queries = np.arange(150)
    clean = LocalTransport(uneven, noise_seed=0)
    clean.prepare_knn(phi, k=3)
    noiseless = clean.knn_vote_sum(queries, 0.0, 3).sums
    np.testing.assert_allclose(noiseless.sum(axis=1), 3.0)  # each agent's vote sums to 1
    noisy = LocalTransport(uneven, noise_seed=1)
    noisy.prepare_knn(phi, k=3)
    sigma, t = 6.0, 2  # each of 3 agents adds N(0, σ²/t): the sum has variance 3σ²/t
    noise = noisy.knn_vote_sum(queries, sigma / math.sqrt(t), t).sums - noiseless  # (150, 3)
    assert abs(noise.mean()) < 0.1 * sigma
    assert noise.std() == pytest.approx(sigma * math.sqrt(3 / t), rel=0.1)


def test_votes_need_prepare_knn(uneven):
    with pytest.raises(RuntimeError, match="prepare_knn"):
        LocalTransport(uneven, noise_seed=0).knn_vote_sum(np.arange(3), 0.0, 1)


# --- the method --------------------------------------------------------------------------------


class OracleKnnTransport(Transport, KnnVotes):
    """Agents whose kNN votes are the true labels (kNN votes only: no teachers); records every call."""

    def __init__(self, labels, ks=(4, 4, 4), num_classes=3, responders=None):
        super().__init__()
        self._labels, self._ks, self._c = labels, np.array(ks), num_classes
        self._responders = len(ks) if responders is None else responders
        self.calls = []

    @property
    def num_agents(self):
        return len(self._ks)

    def record_counts(self):
        return np.full(self.num_agents, 100)

    def prepare_knn(self, extractor, *, k=None, k_fraction=0.05):
        self.calls.append(("prepare", extractor, k, k_fraction))
        return self._ks.copy()

    def knn_vote_sum(self, query_indices, noise_std, min_responders):
        self.calls.append(("vote", query_indices.copy(), noise_std))
        if self._responders < min_responders:
            return None
        votes = np.eye(self._c)[self._labels[query_indices]] * self._responders
        return VoteSum(votes, self._responders)


def make_method(sigma=0.0, queries=40, t=3, **kwargs):
    return PrivateKnnFL(
        sigma=sigma, queries=queries, min_responders=t, student=FAST, features="identity", **kwargs
    )


def test_registered_under_its_name():
    assert METHODS["private-knn-fl"] is PrivateKnnFL


def test_method_acts_only_through_the_transport(uneven):
    transport = OracleKnnTransport(uneven.public.labels)
    outcome = make_method(sigma=0.0, query_batch_size=15, k=4).run(
        uneven.server_data(), transport, PrivacyLedger()
    )
    assert transport.calls[0][0] == "prepare" and transport.calls[0][2] == 4
    votes = transport.calls[1:]
    assert [v[1].shape[0] for v in votes] == [15, 15, 10]
    assert np.array_equal(np.concatenate([v[1] for v in votes]), outcome.query_indices)
    assert np.array_equal(outcome.pseudo_labels, uneven.public.labels[outcome.query_indices])
    assert outcome.details["bound"] == "tight" and outcome.details["k"] == 4


def test_each_agent_adds_sigma_over_root_t(uneven):
    transport = OracleKnnTransport(uneven.public.labels, ks=(2, 2, 2, 2))
    make_method(sigma=10.0, t=4).run(uneven.server_data(), transport, PrivacyLedger())
    assert transport.calls[1][2] == pytest.approx(10.0 / 2.0)


@pytest.mark.parametrize("bound", ["tight", "paper"])
def test_instance_level_is_charged_with_the_smallest_k(uneven, bound):
    ledger = PrivacyLedger()
    transport = OracleKnnTransport(uneven.public.labels, ks=(3, 8, 5))
    outcome = make_method(sigma=4.0, queries=40, query_batch_size=15, bound=bound).run(
        uneven.server_data(), transport, ledger
    )
    assert outcome.details["k"] == 3 and outcome.details["k_per_agent"] == [3, 8, 5]
    expected = private_knn_fl_events(4.0, 40, 3, bound)
    assert epsilon_for(ledger.event("instance"), 1e-4) == pytest.approx(epsilon_for(expected.instance, 1e-4))
    assert ledger.sensitivity("instance") == pytest.approx(
        math.sqrt(2) / 3 if bound == "tight" else math.sqrt(2 / 3)
    )
    # agent level: exactly PATE-FL's
    assert epsilon_for(ledger.event("agent"), 1e-4) == pytest.approx(
        epsilon_for(pate_fl_events(4.0, 40).agent, 1e-4)
    )


def test_tight_bound_gives_the_smaller_instance_epsilon():
    tight = make_method(sigma=4.0, k=6).planned_events()
    paper = make_method(sigma=4.0, k=6, bound="paper").planned_events()
    assert epsilon_for(tight.instance, 1e-4) < epsilon_for(paper.instance, 1e-4)
    assert epsilon_for(tight.agent, 1e-4) == epsilon_for(paper.agent, 1e-4)


@pytest.mark.parametrize("k", [1, 3, 12])
def test_the_papers_instance_epsilon_is_reported_beside_the_tight_one(uneven, k):
    # DESIGN.md: report the paper's √(2/k) instance ε beside the tight √2/k one, from the
    # same releases (two rounds of 15 queries).
    config = RunConfig(method="private-knn-fl", privacy=PrivacyConfig(sigma=4.0, delta=1e-4))
    ledger = PrivacyLedger()
    transport = OracleKnnTransport(uneven.public.labels, ks=(k, k + 2, k + 5))
    method = make_method(sigma=4.0, queries=30, query_batch_size=15, delta=1e-4)
    outcome = method.run(uneven.server_data(), transport, ledger)
    privacy = with_statements(
        privacy_report(config, ledger, instance_bound=method.instance_bound), outcome.statements
    )
    reported = privacy.instance
    stated = privacy.statement(PAPER_STATEMENT)
    paper = epsilon_for(private_knn_fl_events(4.0, 30, k, "paper").instance, 1e-4, "pld")
    assert stated is not None and stated.kind == "bound" and not stated.headline
    assert stated.epsilon == pytest.approx(paper, rel=1e-12) and stated.delta == 1e-4
    assert reported.epsilon == pytest.approx(epsilon_for(private_knn_fl_events(4.0, 30, k).instance, 1e-4, "pld"))
    if k == 1:  # √(2/1) = √2/1: the two figures are one
        assert stated.epsilon == pytest.approx(reported.epsilon, rel=1e-12)
    else:
        assert stated.epsilon > reported.epsilon
    assert all(entry.level == "instance" for entry in privacy.statements)  # an instance-level statement


def test_planned_k_min():
    assert make_method(k=5).planned_k_min() == 5
    assert make_method().planned_k_min() == 1  # fractional k, sizes unknown: the safe bound
    assert make_method().with_agent_records((20, 60, 100)).planned_k_min() == 1
    assert make_method().with_agent_records((200, 600)).planned_k_min() == 10


def test_batches_below_the_threshold_are_neither_released_nor_charged(uneven):
    transport = OracleKnnTransport(uneven.public.labels, responders=2)
    ledger = PrivacyLedger()
    with pytest.raises(RuntimeError, match="minimum number of responders"):
        make_method(sigma=5.0, t=3).run(uneven.server_data(), transport, ledger)
    assert ledger.charges == ()


def test_fractional_k_on_uneven_agents_end_to_end(uneven):
    ledger = PrivacyLedger()
    transport = LocalTransport(uneven, noise_seed=0)
    outcome = make_method(sigma=1.0, queries=60).run(uneven.server_data(), transport, ledger)
    assert outcome.details["k_per_agent"] == [1, 3, 5] and outcome.details["k"] == 1
    assert ledger.sensitivity("instance") == pytest.approx(math.sqrt(2))
    assert np.mean(outcome.pseudo_labels == uneven.public.labels[outcome.query_indices]) > 0.9


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"sigma": -1.0}, "sigma"),
        ({"queries": 0}, "queries"),
        ({"t": 0}, "min_responders"),
        ({"k": 0}, "k"),
        ({"k_fraction": 1.5}, "k_fraction"),
        ({"features": "sift"}, "features"),
        ({"feature_dim": 0}, "feature_dim"),
        ({"bound": "loose"}, "bound"),
        ({"query_batch_size": 0}, "query_batch_size"),
    ],
)
def test_bad_parameters_name_the_argument(kwargs, argument):
    with pytest.raises(ConfigError) as error:
        make_method(**kwargs) if "features" not in kwargs else PrivateKnnFL(
            sigma=0.0, queries=1, min_responders=1, **kwargs
        )
    assert error.value.argument == argument


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"k": 0}, "k"),
        ({"k_fraction": 0.0}, "k_fraction"),
        ({"features": "sift"}, "features"),
        ({"feature_dim": 0}, "feature_dim"),
        ({"features": "module"}, "feature_module"),
        ({"bound": "loose"}, "bound"),
    ],
)
def test_bad_knn_options_name_the_argument(kwargs, argument):
    with pytest.raises(ConfigError) as error:
        KnnOptions(**kwargs)
    assert error.value.argument == argument


def test_knn_options_round_trip_through_the_config():
    config = RunConfig(method="private-knn-fl", options={"k": 3, "features": "random", "bound": "paper"})
    assert RunConfig.from_dict(config.to_dict()) == config
    assert PrivateKnnFL.options_from(config) == KnnOptions(k=3, features="random", bound="paper")
    with pytest.raises(ConfigError) as error:  # validated where the method is resolved
        PrivateKnnFL.options_from(RunConfig(method="private-knn-fl", options={"k": 0}))
    assert error.value.argument == "k"


def test_more_queries_than_the_pool_is_refused(uneven):
    with pytest.raises(ConfigError) as error:
        make_method(queries=10_000).run(
            uneven.server_data(), OracleKnnTransport(uneven.public.labels), PrivacyLedger()
        )
    assert error.value.argument == "queries"


def _digits_config(sigma, **knn):
    return RunConfig(
        method="private-knn-fl",
        federation=FederationConfig(agents=10),
        privacy=PrivacyConfig(sigma=sigma, delta=1e-4, noise_seed=3),
        student=FAST,
        options=knn,
        queries=100,
    )


def test_end_to_end_on_digits_learns_and_reports_the_bound():
    result = run(_digits_config(3.0))
    assert result.method == "private-knn-fl"
    assert result.details["bound"] == "tight" and result.details["k"] == 6  # 5 % of ~125 records
    assert result.privacy.private
    # instance level: s = √2/6 < agent level's s = 1
    assert result.privacy.instance.sensitivity == pytest.approx(math.sqrt(2) / 6)
    assert result.privacy.instance.epsilon < result.privacy.agent.epsilon
    # the paper's √(2/6) beside it, from the same 100 releases
    (stated,) = [e for e in result.to_dict()["privacy"]["statements"] if e["name"] == PAPER_STATEMENT]
    assert stated["epsilon"] == pytest.approx(
        epsilon_for(private_knn_fl_events(3.0, 100, 6, "paper").instance, 1e-4), rel=1e-9
    )
    assert stated["epsilon"] > result.privacy.instance.epsilon and stated["level"] == "instance"
    assert result.diagnostics["teacher_accuracy"] > 0.7  # the agents' noiseless kNN classifiers
    assert result.label_accuracy > 0.5 and result.accuracy > 0.5  # chance is 0.1
    paper = run(_digits_config(3.0, bound="paper"))
    assert paper.details["bound"] == "paper"
    assert paper.privacy.instance.epsilon > result.privacy.instance.epsilon
    assert paper.privacy.agent.epsilon == result.privacy.agent.epsilon


def test_method_built_from_config_carries_the_knn_options():
    config = RunConfig(method="private-knn-fl", options={"k": 4, "features": "random", "feature_dim": 7})
    method = PrivateKnnFL.from_config(config, sigma=2.0, queries=10, min_responders=3)
    assert (method.k, method.features, method.feature_dim, method.bound) == (4, "random", 7, "tight")
    assert not isinstance(method, PateFL)
