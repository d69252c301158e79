"""Per-run analysis data: what a report draws beyond result.json's scalars.

A run's out directory holds ``result.json`` and, beside it, ``analysis.npz`` with the
arrays below (all simulation diagnostics, none of them a release):

* ``class_counts`` (N, C) — records per agent and class (the partition);
* ``teacher_accuracies`` (N,) — each agent's teacher (or kNN classifier) on the test set;
* ``query_indices``, ``pseudo_labels``, ``true_labels`` (R,) — the released queries in
  release order, their noisy-argmax labels and their true labels;
* ``vote_histograms`` (R, C) — the *clean* vote sums Σᵢ fᵢ(x) of those queries. Only an
  in-process simulation can compute them (a transport with ``clean_vote_histograms``, as
  :class:`~fedvote.transport.local.LocalTransport`); in a deployment they exist nowhere
  and the key is absent.

Gradient methods release no votes: only ``class_counts`` is written for them.

The data-dependent ε (Theorem 5 of the voting paper; GNMax, Papernot et al. 2018) is
computed here from the clean histograms, at both levels, and added to the run's
:class:`~fedvote.results.PrivacyReport` next to — never instead of — the
data-independent ε. It reads the private votes, so it is itself **not** differentially
private (:data:`fedvote.privacy.data_dependent.LABEL`).
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedvote.data.federation import Federation
from fedvote.methods.base import MethodOutcome
from fedvote.privacy.data_dependent import LABEL, data_dependent_epsilon
from fedvote.privacy.ledger import PrivacyLedger
from fedvote.results import PrivacyReport
from fedvote.transport.base import Transport

ANALYSIS_FILE = "analysis.npz"
# The per-query bound behind the data-dependent ε (see fedvote.privacy.data_dependent).
DATA_DEPENDENT_BOUND = "gnmax"


@dataclass(frozen=True, eq=False)
class RunAnalysis:
    """The arrays of ``analysis.npz``; optional ones are None when the run has none."""

    class_counts: np.ndarray
    teacher_accuracies: np.ndarray | None = None
    query_indices: np.ndarray | None = None
    pseudo_labels: np.ndarray | None = None
    true_labels: np.ndarray | None = None
    vote_histograms: np.ndarray | None = None

    def arrays(self) -> dict[str, np.ndarray]:
        """The arrays that are present, by name."""
        return {
            f.name: np.asarray(getattr(self, f.name))
            for f in dataclasses.fields(self)
            if getattr(self, f.name) is not None
        }

    def save(self, out_dir: str | Path) -> Path:
        """Write ``out_dir/analysis.npz`` atomically (a temporary file renamed into place)."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        target = out / ANALYSIS_FILE
        fd, tmp = tempfile.mkstemp(dir=out, prefix=".analysis-", suffix=".npz")
        try:
            with os.fdopen(fd, "wb") as handle:
                np.savez_compressed(handle, **self.arrays())  # type: ignore[arg-type]
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return target

    @classmethod
    def load(cls, path: str | Path) -> RunAnalysis:
        """Read an ``analysis.npz`` written by :meth:`save` (no pickles)."""
        names = {f.name for f in dataclasses.fields(cls)}
        with np.load(Path(path), allow_pickle=False) as data:
            arrays = {name: np.asarray(data[name]) for name in data.files if name in names}
        if "class_counts" not in arrays:
            raise ValueError(f"{path} holds no class_counts; not a fedvote analysis file")
        return cls(**arrays)


def collect_analysis(
    federation: Federation,
    transport: Transport,
    outcome: MethodOutcome,
    teacher_accuracies: np.ndarray | None,
) -> RunAnalysis:
    """The run's analysis arrays; clean histograms only where the transport can compute them."""
    queries = np.asarray(outcome.query_indices, dtype=np.int64)  # (R,)
    if queries.size == 0:  # gradient methods: no votes, no teachers
        return RunAnalysis(class_counts=federation.class_counts())
    histograms = None
    clean = getattr(transport, "clean_vote_histograms", None)  # simulation transports only
    if callable(clean):
        histograms = np.asarray(clean(queries), dtype=np.float64)  # (R, C)
    return RunAnalysis(
        class_counts=federation.class_counts(),
        teacher_accuracies=None if teacher_accuracies is None else np.asarray(teacher_accuracies, float),
        query_indices=queries,
        pseudo_labels=np.asarray(outcome.pseudo_labels, dtype=np.int64),
        true_labels=np.asarray(federation.public.labels[queries], dtype=np.int64),
        vote_histograms=histograms,
    )


def with_data_dependent_epsilon(
    privacy: PrivacyReport, ledger: PrivacyLedger, analysis: RunAnalysis, sigma: float
) -> PrivacyReport:
    """``privacy`` with the data-dependent ε of the released votes added at both levels.

    Unchanged when there are no clean histograms (deployment, gradient methods) or no
    noise. Uses the sensitivity charged at each level, the accounted σ (the noise
    actually added is at least σ, so this is conservative) and the run's δ; the
    data-dependent bound is capped by the data-independent ε of the same Gaussian
    releases (:func:`gaussian_accountant` of the run's accountant).
    """
    histograms = analysis.vote_histograms
    if histograms is None or histograms.shape[0] == 0 or not sigma > 0 or not privacy.private:
        return privacy
    levels = {}
    for level in ("agent", "instance"):
        entry = getattr(privacy, level)
        sensitivity = ledger.sensitivity(level)
        if entry.epsilon is None or sensitivity is None:
            levels[level] = entry
            continue
        result = data_dependent_epsilon(
            histograms,
            sigma,
            privacy.delta,
            sensitivity=sensitivity,
            bound=DATA_DEPENDENT_BOUND,
            accountant=gaussian_accountant(privacy.accountant),
        )
        levels[level] = dataclasses.replace(
            entry,
            data_dependent_epsilon=result.epsilon,
            data_dependent_accountant=data_dependent_accountant_name(gaussian_accountant(privacy.accountant)),
            data_dependent_label=LABEL,
        )
    return dataclasses.replace(privacy, agent=levels["agent"], instance=levels["instance"])


def gaussian_accountant(accountant: str) -> str:
    """The accountant for pure Gaussian vote releases: ``exact`` in place of ``pld``.

    For a composition of Gaussians PLD converges (from above) to the exact closed form
    (Balle & Wang 2018; ``docs/privacy.md``), which costs microseconds instead of ~0.3 s;
    every other choice is kept.
    """
    return "exact" if accountant == "pld" else accountant


def data_dependent_accountant_name(accountant: str) -> str:
    """How the data-dependent ε was computed, as result.json and reports name it."""
    return (
        "rdp, data-dependent: GNMax per-query bound (Papernot et al. 2018, Thm 6; the analysis of "
        f"the voting paper's Thm 5), capped by the data-independent {accountant} ε"
    )
