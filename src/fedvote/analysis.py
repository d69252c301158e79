"""Per-run analysis data: what a report draws beyond result.json's scalars.

A run's out directory holds ``result.json`` and, beside it, ``analysis.npz`` with the
arrays below. The released ones:

* ``query_indices``, ``pseudo_labels`` (R,) — the released queries in release order and
  their noisy-argmax labels; ``true_labels`` (R,) their public-pool labels (simulation).
* ``agent_epsilons`` (N,) — with ``--agent-budgets``, each agent's agent-level ε (its budget
  group's, ``privacy.agent_groups``); ``agent_budgets`` (N,) each agent's budget.

The **simulation diagnostics** — noiseless functions of the agents' private data, listed
by name in the file's ``diagnostics`` entry beside ``diagnostics_note``
(:data:`~fedvote.results.DIAGNOSTIC_NOTE`); a deployment never releases them:

* ``class_counts`` (N, C) — records per agent and class (the partition);
* ``teacher_accuracies`` (N,) — each agent's teacher (or kNN classifier) on a seeded
  sample of at most :data:`DIAGNOSTIC_TEST_SAMPLE` test points
  (:func:`diagnostic_test_sample`), whose size is ``teacher_accuracy_test_points`` (a
  scalar; absent in files written before the sample, which used the whole test set);
* ``vote_histograms`` (R, C) — the *clean* vote sums Σᵢ fᵢ(x) of those queries. Only an
  in-process simulation can compute them (a transport with ``clean_vote_histograms``, as
  :class:`~fedvote.transport.local.LocalTransport`); in a deployment they exist nowhere
  and the key is absent.

Gradient methods release no votes: only ``class_counts`` is written for them.

The data-dependent ε is added here, and only for the mechanism it is proven for: PATE-FL
with ``--release labels`` (Confident-GNMax; Papernot et al. 2018, Algorithm 1:
threshold-check RDP on every checked query, GNMax Theorem 6 on the answered ones), from
the clean vote sums of *every checked query*, with the noise actually added (σ·√(r/t) for
r responders). That figure reads the private votes, so it is not published as it is: the
run's :class:`~fedvote.results.PrivacyReport` gets only its **release by smooth
sensitivity** (PATE'18 §4, :mod:`fedvote.privacy.smooth_sensitivity`), whose cost the
method charged to the ledger (so it is in the headline ε); the clean figure goes to the
simulation diagnostics. A run that releases the noisy vote sums (PATE-FL's default,
Private-kNN-FL, weighted voting) gets no figure but the label
:data:`~fedvote.privacy.data_dependent.NOT_APPLICABLE_SUMS`.
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedvote.data.federation import Federation, LabeledData
from fedvote.errors import ConfigError
from fedvote.methods.base import MethodOutcome
from fedvote.privacy.data_dependent import CONFIDENT_LABEL, NOT_APPLICABLE_SUMS, confident_gnmax_epsilon
from fedvote.privacy.ledger import PrivacyLedger
from fedvote.privacy.smooth_sensitivity import (
    RELEASED_LABEL,
    ReleasePlan,
    confident_gnmax_smooth_sensitivity,
    data_independent_rdp,
    release_cost_rdp,
    release_data_dependent,
    release_events,
)
from fedvote.results import DIAGNOSTIC_NOTE, LevelPrivacy, PrivacyReport, write_atomic
from fedvote.transport.base import Transport
from fedvote.transport.capabilities import SimulationDiagnostics

ANALYSIS_FILE = "analysis.npz"
NOT_COMPUTED_LABEL = "not computed: the clean vote sums exist only in an in-process simulation"
NOT_RELEASED_LABEL = "not released: no smooth-sensitivity release of it was planned and charged"
_RELEASE_NOISE_TAG = 0x55E1  # the smooth-sensitivity release's own stream of --noise-seed
# The teacher-accuracy diagnostic reads at most this many test points (issue 21): on the
# voting paper's MNIST run (100 agents, 7,000 test points) the whole test set took 49 of
# the run's 148 s. Measured on that federation (one thread, 2-core machine at load 3-4):
# MLP teachers 2.7 s -> 0.33 s, CNN teachers 115 s -> 16 s. With n = 1000 each accuracy
# has standard error at most 0.016.
DIAGNOSTIC_TEST_SAMPLE = 1000
_DIAGNOSTIC_SAMPLE_TAG = 0xD1A6  # the sample's own stream of the run seed


def diagnostic_test_indices(test_size: int, seed: int, limit: int = DIAGNOSTIC_TEST_SAMPLE) -> np.ndarray:
    """The test points the teacher-accuracy diagnostic reads: sorted indices, (min(T, limit),).

    A uniform sample without replacement of ``limit`` of the ``test_size`` = T indices,
    drawn from ``SeedSequence([seed, tag])`` — the run seed's own stream, apart from the
    privacy noise and every other draw of the run — so the same seed gives the same
    sample; every index, in order, when T ≤ ``limit``.

    Why a sample: every teacher's accuracy on the whole test set costs N forward passes
    over T points, a third of a 100-agent MNIST run, for a diagnostic. Its precision: a
    teacher's accuracy on n sampled points estimates its accuracy on the test set with
    standard error √(p(1−p)/n · (T−n)/(T−1)) ≤ 1/(2√n), which is ≤ 0.016 for
    n = 1000; the mean over agents, a mean over the sampled points of the fraction of
    teachers right at each, has the same bound.

    Parameters
    ----------
    test_size : int
        T, the number of test points (≥ 0).
    seed : int
        The run's seed (``RunConfig.seed``).
    limit : int
        The most points drawn (default :data:`DIAGNOSTIC_TEST_SAMPLE`, ≥ 1).

    """
    if test_size < 0:
        raise ValueError(f"test_size must be >= 0, got {test_size}")
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    if test_size <= limit:
        return np.arange(test_size, dtype=np.int64)
    rng = np.random.default_rng(np.random.SeedSequence([seed, _DIAGNOSTIC_SAMPLE_TAG]))
    return np.sort(rng.choice(test_size, size=limit, replace=False)).astype(np.int64)


def diagnostic_test_sample(test: LabeledData, seed: int, limit: int = DIAGNOSTIC_TEST_SAMPLE) -> LabeledData:
    """The test points at :func:`diagnostic_test_indices` (``test`` itself when it has ≤ ``limit``)."""
    if len(test) <= limit:
        return test
    indices = diagnostic_test_indices(len(test), seed, limit)  # (limit,)
    return LabeledData(features=test.features[indices], labels=test.labels[indices])


@dataclass(frozen=True, eq=False)
class ConfidentRecord:
    """A Confident-GNMax run's releases with the clean votes behind them (simulation only).

    ``histograms`` (K, C): clean vote sums of every checked query; ``answered`` (K,): the
    released pass bits; ``responders`` (K,): agents that noised each query; the accounted
    ``threshold_sigma`` (σ₁), ``sigma`` (σ₂) and ``min_responders`` (t), and ``threshold`` T;
    ``plans``: the smooth-sensitivity release planned and charged at each level (None: none).
    """

    threshold: float
    threshold_sigma: float
    sigma: float
    min_responders: int
    histograms: np.ndarray | None
    answered: np.ndarray
    responders: np.ndarray
    plans: Mapping[str, ReleasePlan] | None = None

    def actual_std(self, accounted: float) -> np.ndarray:
        """The std of the noise actually in each sum, (K,): r shares of σ²/t, i.e. σ·√(r/t)."""
        return accounted * np.sqrt(self.responders / self.min_responders)


@dataclass(frozen=True, eq=False)
class VoteRelease:
    """What left the aggregator of a voting run (not written to ``analysis.npz``).

    ``mode`` "sums" (the noisy vote sums) or "labels" (Confident-GNMax, with ``confident``).
    """

    mode: str
    released_queries: int
    confident: ConfidentRecord | None = None


# RunAnalysis fields that are metadata of the run, not arrays of analysis.npz.
_NOT_ARRAYS = frozenset({"release"})
# The arrays that are noiseless functions of private data (DIAGNOSTIC_NOTE).
DIAGNOSTIC_ARRAYS: tuple[str, ...] = ("class_counts", "teacher_accuracies", "vote_histograms")


@dataclass(frozen=True, eq=False)
class RunAnalysis:
    """The arrays of ``analysis.npz``; optional ones are None when the run has none.

    ``teacher_accuracy_test_points`` (a 0-d int array): how many test points the teacher
    accuracies were computed on (:func:`diagnostic_test_sample`); None in files written
    before the sample, whose accuracies are on the whole test set. ``release`` (in-run
    only, never saved): how the votes left the aggregator, which the data-dependent
    analysis needs; None for runs without votes and for loaded files.
    """

    class_counts: np.ndarray
    teacher_accuracies: np.ndarray | None = None
    teacher_accuracy_test_points: np.ndarray | None = None
    query_indices: np.ndarray | None = None
    pseudo_labels: np.ndarray | None = None
    true_labels: np.ndarray | None = None
    vote_histograms: np.ndarray | None = None
    agent_epsilons: np.ndarray | None = None
    agent_budgets: np.ndarray | None = None
    release: VoteRelease | None = None

    def arrays(self) -> dict[str, np.ndarray]:
        """The arrays that are present, by name."""
        return {
            f.name: np.asarray(getattr(self, f.name))
            for f in dataclasses.fields(self)
            if f.name not in _NOT_ARRAYS and getattr(self, f.name) is not None
        }

    def save(self, out_dir: str | Path) -> Path:
        """Write ``out_dir/analysis.npz`` atomically (a temporary file renamed into place)."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        arrays = self.arrays()
        labels = {
            "diagnostics": np.array([name for name in DIAGNOSTIC_ARRAYS if name in arrays]),
            "diagnostics_note": np.array(DIAGNOSTIC_NOTE),
        }
        buffer = io.BytesIO()
        np.savez_compressed(buffer, **arrays, **labels)  # type: ignore[arg-type]
        return write_atomic(out / ANALYSIS_FILE, buffer.getvalue())

    @classmethod
    def load(cls, path: str | Path) -> RunAnalysis:
        """Read an ``analysis.npz`` written by :meth:`save` (no pickles)."""
        names = {f.name for f in dataclasses.fields(cls)} - _NOT_ARRAYS
        with np.load(Path(path), allow_pickle=False) as data:
            arrays = {name: np.asarray(data[name]) for name in data.files if name in names}
        if "class_counts" not in arrays:
            raise ValueError(f"{path} holds no class_counts; not a fedvote analysis file")
        return cls(**arrays)  # type: ignore[arg-type]  # array fields only (``release`` is never saved)


def collect_analysis(
    federation: Federation,
    transport: Transport,
    outcome: MethodOutcome,
    teacher_accuracies: np.ndarray | None,
    teacher_test_points: int | None = None,
) -> RunAnalysis:
    """The run's analysis arrays; clean histograms only where the transport can compute them.

    ``teacher_test_points`` is the size of the test sample behind ``teacher_accuracies``.
    """
    queries = np.asarray(outcome.query_indices, dtype=np.int64)  # (R,)
    if queries.size == 0:  # gradient methods: no votes, no teachers
        return RunAnalysis(class_counts=federation.class_counts())
    histograms = None
    per_agent: dict[str, np.ndarray] = {}
    if outcome.agent_groups:  # --agent-budgets: each agent's ε and budget, (N,)
        per_agent["agent_epsilons"] = np.full(transport.num_agents, np.nan)
        per_agent["agent_budgets"] = np.full(transport.num_agents, np.nan)
        for group in outcome.agent_groups:
            members = list(group.agent_ids)
            per_agent["agent_epsilons"][members] = np.nan if group.epsilon is None else group.epsilon
            per_agent["agent_budgets"][members] = group.budget
    clean = transport.clean_vote_histograms if isinstance(transport, SimulationDiagnostics) else None
    if clean is not None:  # simulation transports only
        histograms = np.asarray(clean(queries), dtype=np.float64)  # (R, C)
    return RunAnalysis(
        class_counts=federation.class_counts(),
        teacher_accuracies=None if teacher_accuracies is None else np.asarray(teacher_accuracies, float),
        teacher_accuracy_test_points=(
            None if teacher_accuracies is None or teacher_test_points is None
            else np.asarray(teacher_test_points, dtype=np.int64)
        ),
        query_indices=queries,
        pseudo_labels=np.asarray(outcome.pseudo_labels, dtype=np.int64),
        true_labels=np.asarray(federation.public.labels[queries], dtype=np.int64),
        vote_histograms=histograms,
        **per_agent,
        release=vote_release(outcome.details, queries.shape[0], clean),
    )


def vote_release(
    details: Mapping[str, Any], released_queries: int, clean: Callable[[np.ndarray], np.ndarray] | None
) -> VoteRelease:
    """How a voting run's votes left the aggregator, from the method's ``details``.

    A run that does not say is taken to release its sums (it claims no data-dependent ε).
    For label release, ``clean`` (the transport's ``clean_vote_histograms``, or None)
    gives the clean sums of every *checked* query, answered or not.
    """
    record = details.get("confident_gnmax")
    if details.get("release") != "labels" or not isinstance(record, Mapping):
        return VoteRelease("sums", released_queries)
    checked = np.asarray(record["checked_query_indices"], dtype=np.int64)  # (K,)
    planned = record.get("smooth_sensitivity")
    confident = ConfidentRecord(
        threshold=float(record["threshold"]),
        threshold_sigma=float(record["threshold_sigma"]),
        sigma=float(record["sigma"]),
        min_responders=int(details["min_responders"]),
        histograms=None if clean is None else np.asarray(clean(checked), dtype=np.float64),  # (K, C)
        answered=np.asarray(record["answered"], dtype=bool),
        responders=np.asarray(record["responders"], dtype=np.float64),
        plans=None if not isinstance(planned, Mapping) else {
            level: ReleasePlan(**{key: float(value) for key, value in plan.items()})
            for level, plan in planned.items()
        },
    )
    return VoteRelease("labels", released_queries, confident=confident)


def with_data_dependent_epsilon(
    privacy: PrivacyReport,
    ledger: PrivacyLedger,
    analysis: RunAnalysis,
    sigma: float,
    noise_seed: int | None = None,
) -> PrivacyReport:
    """``privacy`` with what the run's release record adds at both levels.

    :func:`release_data_dependent_epsilon` without its diagnostics.
    """
    return release_data_dependent_epsilon(privacy, ledger, analysis, sigma, noise_seed)[0]


def release_data_dependent_epsilon(
    privacy: PrivacyReport,
    ledger: PrivacyLedger,
    analysis: RunAnalysis,
    sigma: float,
    noise_seed: int | None = None,
) -> tuple[PrivacyReport, dict[str, Any]]:
    """``privacy`` with the published data-dependent ε at both levels, and the diagnostics behind it.

    * label release (Confident-GNMax): the data-dependent RDP at the planned order λ of that
      mechanism from the clean sums of every checked query, the released pass bits and the
      noise actually added (σ·√(r/t)), at the sensitivity charged at the level, released as
      f + S_β·N(0, σ_SS²) (:func:`~fedvote.privacy.smooth_sensitivity.release_data_dependent`)
      and converted with the release's own RDP at the run's δ; capped by the level's headline
      ε (which holds the release's charge). ``privacy.<level>.data_dependent_epsilon_released``
      is that figure alone. The clean ε (all orders, :func:`confident_gnmax_epsilon`), f and
      S_β go to the returned diagnostics (``data_dependent``), never to ``privacy``.
    * sum release: no data-dependent ε, and ``data_dependent_label`` says why
      (:data:`~fedvote.privacy.data_dependent.NOT_APPLICABLE_SUMS`).

    Unchanged for runs without votes (gradient methods) and non-private runs. ``sigma`` is
    the method's accounted σ (the argmax noise of label release). ``noise_seed`` seeds the
    release's noise (its own stream); None draws it from OS entropy.
    """
    release = analysis.release
    if release is None and analysis.query_indices is not None and analysis.query_indices.size:
        release = VoteRelease("sums", int(analysis.query_indices.size))  # votes that do not say: sums
    if release is None or not privacy.private or not sigma > 0:
        return privacy, {}
    seed = None if noise_seed is None else np.random.SeedSequence([noise_seed, _RELEASE_NOISE_TAG])
    rng = np.random.default_rng(seed)
    levels = {}
    diagnostics: dict[str, Any] = {}
    for level in ("agent", "instance"):
        entry = getattr(privacy, level)
        sensitivity = ledger.sensitivity(level)
        if entry.epsilon is None or sensitivity is None:
            levels[level] = entry
        elif release.mode == "labels" and release.confident is not None:
            levels[level], found = _with_confident_gnmax(
                entry, release.confident, sensitivity, privacy, level, rng
            )
            if found:
                diagnostics[level] = found
        else:
            levels[level] = dataclasses.replace(entry, data_dependent_label=NOT_APPLICABLE_SUMS)
    report = dataclasses.replace(privacy, agent=levels["agent"], instance=levels["instance"])
    return report, ({"data_dependent": {"label": CONFIDENT_LABEL, **diagnostics}} if diagnostics else {})


def _with_confident_gnmax(
    entry: LevelPrivacy,
    record: ConfidentRecord,
    sensitivity: float,
    privacy: PrivacyReport,
    level: str,
    rng: np.random.Generator,
) -> tuple[LevelPrivacy, dict[str, Any]]:
    """``entry`` with the released data-dependent ε of a Confident-GNMax run, and its diagnostics."""
    if record.histograms is None:
        return dataclasses.replace(entry, data_dependent_label=NOT_COMPUTED_LABEL), {}
    accountant = gaussian_accountant(privacy.accountant)
    check_std = record.actual_std(record.threshold_sigma)  # (K,)
    argmax_std = record.actual_std(record.sigma)  # (K,)
    clean = confident_gnmax_epsilon(
        record.histograms,
        record.answered,
        threshold=record.threshold,
        threshold_sigma=check_std,
        sigma=argmax_std,
        delta=privacy.delta,
        sensitivity=sensitivity,
        accountant=accountant,
    )
    assert entry.epsilon is not None  # checked by the caller
    found: dict[str, Any] = {"epsilon": min(clean.epsilon, entry.epsilon), "order": clean.order}
    if record.plans is None or level not in record.plans:
        return dataclasses.replace(entry, data_dependent_label=NOT_RELEASED_LABEL), found
    plan = record.plans[level]
    try:
        smooth = confident_gnmax_smooth_sensitivity(
            record.histograms, record.answered, threshold=record.threshold, threshold_sigma=check_std,
            sigma=argmax_std, sensitivity=sensitivity, level=level, order=plan.order, beta=plan.beta,
        )
    except ConfigError as error:  # condition C5 fails: nothing is released (the charge stays)
        return dataclasses.replace(entry, data_dependent_label=f"not released: {error}"), found
    charge = release_events(record.plans["agent"], record.plans["instance"])
    released = release_data_dependent(
        smooth,
        plan,
        cost_rdp=release_cost_rdp(charge, level, plan.order),
        independent_rdp=data_independent_rdp(check_std, argmax_std, sensitivity, plan.order),
        delta=privacy.delta,
        rng=rng,
    )
    found.update(
        {
            "rdp_at_release_order": smooth.value,
            "release_order": plan.order,
            "smooth_sensitivity": smooth.smooth_sensitivity,
            "smooth_sensitivity_distance": smooth.distance,
            "release_noise_std": smooth.smooth_sensitivity * plan.sigma,
        }
    )
    return (
        dataclasses.replace(
            entry,
            data_dependent_epsilon_released=min(released.epsilon, entry.epsilon),
            data_dependent_accountant=released_accountant_name(plan, released.release_cost_rdp),
            data_dependent_label=RELEASED_LABEL,
        ),
        found,
    )


def gaussian_accountant(accountant: str) -> str:
    """The accountant for pure Gaussian vote releases: ``exact`` in place of ``pld``.

    For a composition of Gaussians PLD converges (from above) to the exact closed form
    (Balle & Wang 2018; ``docs/privacy.md``), which costs microseconds instead of ~0.3 s;
    every other choice is kept.
    """
    return "exact" if accountant == "pld" else accountant


def released_accountant_name(plan: ReleasePlan, cost_rdp: float) -> str:
    """How the released data-dependent ε was computed, as result.json and reports name it."""
    return (
        "rdp at one order, smooth-sensitivity release (Papernot et al. 2018, §4, Thm 23): "
        "Confident-GNMax's data-dependent RDP (threshold check on every checked query + GNMax on the "
        f"answered ones, noise actually added) at λ = {plan.order:.4g}, plus S_β·N(0, σ_SS²) with "
        f"β = {plan.beta:.4g}, σ_SS = {plan.sigma:.4g}, plus the release's own RDP {cost_rdp:.4g} "
        "(charged in ε); capped by the headline ε"
    )
