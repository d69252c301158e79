"""The result of a run: what the CLI prints as JSON and what reports draw."""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class LevelPrivacy:
    """ε at one level (None when the run is not private) and what it was computed from."""

    epsilon: float | None
    sensitivity: float | None
    adjacency: str
    bound: str | None = None
    # Data-dependent ε of the released votes (simulation only; not itself private), the
    # accountant that produced it and its label; absent from result.json when None.
    data_dependent_epsilon: float | None = None
    data_dependent_accountant: str | None = None
    data_dependent_label: str | None = None
    # A tighter ε beside a method's stated one (FedAUXfdp: ``epsilon`` is the paper's basic
    # composition ε_scores + ε_classes, this the PLD of the same releases); absent when None.
    epsilon_pld: float | None = None
    # The ε a method's paper states with a looser sensitivity, from the same releases
    # (Private-kNN-FL instance level: √(2/k_min) beside the tight √2/k_min); absent when None.
    epsilon_paper_bound: float | None = None


@dataclass(frozen=True)
class PrivacyReport:
    """Privacy of a run at both levels; data-independent, at the run's δ."""

    private: bool
    delta: float
    accountant: str
    agent: LevelPrivacy
    instance: LevelPrivacy
    noise_source: str
    calibrated_to_epsilon: float | None = None
    calibrated_level: str | None = None
    # Record-level federated f-DP (PriFedSync: weak and strong μ and ε, Theorem 2);
    # absent from result.json when None.
    record: dict[str, Any] | None = None


# Every noiseless function of private data a simulation computes (teacher accuracies,
# clean vote histograms, per-agent class counts, clients' accuracies on private test
# sets) carries this label, in result.json, analysis.npz and the report.
DIAGNOSTIC_NOTE = "simulation diagnostic — not private; a deployment never releases it"


@dataclass(frozen=True)
class RunResult:
    """Accuracy, privacy, communication and timings of one run, with its full config."""

    method: str
    dataset: str
    agents: int
    seed: int
    accuracy: float
    label_accuracy: float | None  # None for methods without pseudo-labels (gradient baselines)
    queries: int
    sigma: float
    privacy: PrivacyReport
    communication: dict[str, int]
    timings: dict[str, float]
    config: dict[str, Any]
    details: dict[str, Any] = field(default_factory=dict)
    version: str = ""
    # Noiseless functions of private data (DIAGNOSTIC_NOTE): result.json's "diagnostics";
    # nothing a method decides reads them.
    diagnostics: dict[str, Any] = field(default_factory=dict)
    # fedvote.analysis.RunAnalysis: arrays written to analysis.npz, not to result.json.
    analysis: Any = field(default=None, repr=False, compare=False)

    @property
    def private(self) -> bool:
        """Whether any noise protected the releases."""
        return self.privacy.private

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict: result.json's schema (``private`` is repeated at the top)."""
        data = asdict(self)
        details = data.pop("details")
        data.pop("analysis")
        diagnostics = data.pop("diagnostics")
        ordered = {"method": data.pop("method"), "private": self.private}
        ordered.update(data)
        ordered.update(details)
        if diagnostics:
            ordered["diagnostics"] = {"note": DIAGNOSTIC_NOTE, **diagnostics}
        if ordered["privacy"].get("record", 0) is None:
            del ordered["privacy"]["record"]
        for level in ("agent", "instance"):  # "bound" only where a method chose one
            if ordered["privacy"][level]["bound"] is None:
                del ordered["privacy"][level]["bound"]
            for key in (
                "data_dependent_epsilon", "data_dependent_accountant", "data_dependent_label", "epsilon_pld",
                "epsilon_paper_bound",
            ):
                if ordered["privacy"][level][key] is None:
                    del ordered["privacy"][level][key]
        return _finite(ordered)

    def to_json(self) -> str:
        """result.json's text."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=False)


def write_result(result: RunResult, out_dir: str | Path) -> Path:
    """Write ``out_dir/result.json`` atomically (a temporary file renamed into place).

    When the run carries analysis arrays, ``out_dir/analysis.npz`` is written beside it
    (see :mod:`fedvote.analysis`).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    target = out / "result.json"
    fd, tmp = tempfile.mkstemp(dir=out, prefix=".result-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(result.to_json() + "\n")
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if result.analysis is not None:
        result.analysis.save(out)
    return target


def _finite(value: Any) -> Any:
    """Replace non-finite floats by None so that the JSON is standard."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
