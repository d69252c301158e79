"""The result of a run: what the CLI prints as JSON and what reports draw."""

from __future__ import annotations

import json
import math
import os
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


STATEMENT_LEVELS = ("agent", "instance")
# "bound": proven for the mechanism run; "approximation": e.g. a CLT, never a bound;
# "ex post": a figure of what actually ran that a budget could not have planned.
STATEMENT_KINDS = ("bound", "approximation", "ex post")


@dataclass(frozen=True)
class PrivacyStatement:
    """One privacy figure a method states beside the accountant's, saying exactly what it is.

    ``epsilon`` at ``delta`` (None: unbounded), or a Gaussian-DP ``mu``; ``source`` names
    the theorem, paper or proof. A ``headline`` statement replaces its level's ε in the
    report: only a proven bound may, and never below what the ledger's events prove
    (:func:`fedvote.runner.measure` checks). Rendered generically by the summary,
    result.json (``privacy.statements``) and the report.
    """

    name: str
    level: str
    epsilon: float | None
    delta: float | None
    source: str
    kind: str = "bound"
    mu: float | None = None
    headline: bool = False

    def __post_init__(self) -> None:
        if self.level not in STATEMENT_LEVELS:
            raise ValueError(f"statement level must be one of {STATEMENT_LEVELS}, got {self.level!r}")
        if self.kind not in STATEMENT_KINDS:
            raise ValueError(f"statement kind must be one of {STATEMENT_KINDS}, got {self.kind!r}")
        if self.headline and self.kind != "bound":
            raise ValueError(f"{self.name}: only a proven bound can be a headline, not an {self.kind}")


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
    # Figures a method states beside the headlines (a paper's looser bound, an ex post ε,
    # a CLT approximation, strong federated DP): result.json's privacy.statements.
    statements: tuple[PrivacyStatement, ...] = ()

    def statement(self, name: str) -> PrivacyStatement | None:
        """The statement called ``name``, if the run made one."""
        return next((entry for entry in self.statements if entry.name == name), None)


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
        for level in ("agent", "instance"):  # "bound" only where a method chose one
            if ordered["privacy"][level]["bound"] is None:
                del ordered["privacy"][level]["bound"]
            for key in ("data_dependent_epsilon", "data_dependent_accountant", "data_dependent_label"):
                if ordered["privacy"][level][key] is None:
                    del ordered["privacy"][level][key]
        return finite_or_none(ordered)

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
    target = write_atomic(out / "result.json", result.to_json() + "\n")
    if result.analysis is not None:
        result.analysis.save(out)
    return target


# --- helpers every fedvote writer uses --------------------------------------------------------


def finite_or_none(value: Any) -> Any:
    """``value`` with every non-finite float (inf, -inf, NaN) replaced by None, for standard JSON.

    Recursive over dict values, lists and tuples (a tuple comes back as a list, as JSON
    writes it); floats only (numpy's float64 is one): any other value comes back as it is.
    """
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_or_none(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite_or_none(v) for v in value]
    return value


def write_atomic(path: Path, data: str | bytes) -> Path:
    """Write ``data`` (text as UTF-8) to ``path`` atomically; returns ``path``.

    The bytes go to a new temporary file in the same directory, are flushed to disk
    (fsync) and renamed over ``path`` (``os.replace``): a reader sees the old file or the
    new one, never a part. The temporary file is removed on any failure. The file gets
    the mode a new file gets from the user's umask (0o666 & ~umask) — the kernel applies
    it when the temporary file is created — not ``mkstemp``'s private 0o600. The
    directory must exist. Every file fedvote writes whole goes through here (the SQLite
    ledger and the appended deployment logs are not written whole).
    """
    target = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0) | getattr(os, "O_NOFOLLOW", 0)
    for _ in range(100):
        tmp = target.with_name(f".{target.name}.{os.urandom(6).hex()}.tmp")
        try:
            fd = os.open(tmp, flags, 0o666)
            break
        except FileExistsError:
            continue
    else:  # pragma: no cover - 100 collisions of 48 random bits
        raise FileExistsError(f"no free temporary name beside {target}")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return target
