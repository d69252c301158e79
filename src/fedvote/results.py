"""The result of a run: what the CLI prints as JSON and what reports draw."""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fedvote.errors import ConfigError


@dataclass(frozen=True)
class LevelPrivacy:
    """ε at one level (None when the run is not private) and what it was computed from."""

    epsilon: float | None
    sensitivity: float | None
    adjacency: str
    bound: str | None = None
    # The accountant that computed ``epsilon`` ("pld", "rdp", …; "none": no finite bound was
    # computed, ε = ∞) and, where that is not the run's own (its PLD could not be built at a
    # level the run does not calibrate: RDP's upper bound of the same events instead), why.
    # None in results written before 2026-11-28 (then ``privacy.accountant`` computed both).
    accountant: str | None = None
    accountant_fallback: str | None = None
    # Data-dependent ε of the released votes, *published by smooth sensitivity* (PATE'18 §4;
    # its release is charged in ``epsilon``), how it was computed and its label; absent from
    # result.json when None. The clean figure behind it is a diagnostic, never here.
    data_dependent_epsilon_released: float | None = None
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
class AgentGroup:
    """One group of agents sharing a privacy budget (``--agent-budgets``; issue 45).

    ``budget``: the agents' agent-level ε budget; ``agents``: how many hold it; ``epsilon``
    and ``instance_epsilon``: what this run's releases cost each of them at the agent and
    the instance level (the ledger's accountant applied to the group's own events, at the
    run's δ); ``weight``: their vote weight (Individualized PATE's weighting);
    ``agent_ids``: which agents (public: a seeded draw, or the budget file's order).
    """

    budget: float
    agents: int
    epsilon: float | None
    instance_epsilon: float | None
    weight: float
    agent_ids: tuple[int, ...] = ()


def agent_group_lines(groups: tuple[AgentGroup, ...] | list[dict[str, Any]]) -> list[str]:
    """The text summary's lines for ``--agent-budgets``: each group's budget, size, weight and ε.

    Takes the report's :class:`AgentGroup` entries or result.json's dicts of them.
    """
    if not groups:
        return []
    rows = [group if isinstance(group, dict) else asdict(group) for group in groups]
    top = max((row["epsilon"] for row in rows if row["epsilon"] is not None), default=None)
    lines = [
        "  agent budgets         each group's own ε (agent level; the headline above is the largest, "
        + ("unbounded" if top is None else f"{top:.4f}")
        + ")"
    ]
    for row in rows:
        spent = "unbounded" if row["epsilon"] is None else f"{row['epsilon']:.4f}"
        inst = "unbounded" if row["instance_epsilon"] is None else f"{row['instance_epsilon']:.4f}"
        lines.append(
            f"      budget {row['budget']:g}: {row['agents']} agents, weight {row['weight']:.3f}, "
            f"ε {spent} (instance {inst})"
        )
    return lines


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
    # --agent-budgets: each budget group's own ε (the headline agent ε is their maximum).
    agent_groups: tuple[AgentGroup, ...] = ()

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
        if not self.privacy.agent_groups:  # only runs with --agent-budgets carry the key
            del ordered["privacy"]["agent_groups"]
        for level in ("agent", "instance"):  # "bound" only where a method chose one
            for key in ("bound", "accountant_fallback"):
                if ordered["privacy"][level][key] is None:
                    del ordered["privacy"][level][key]
            keys = ("data_dependent_epsilon_released", "data_dependent_accountant", "data_dependent_label")
            for key in keys:
                if ordered["privacy"][level][key] is None:
                    del ordered["privacy"][level][key]
        return finite_or_none(ordered)

    def to_json(self) -> str:
        """result.json's text."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=False)

    def save(self, out_dir: str | Path) -> Path:
        """Write ``out_dir/result.json`` (and ``analysis.npz``), as ``fedvote run --out`` does.

        :func:`write_result`; returns the path of ``result.json``. ``fedvote report out_dir``
        draws it.
        """
        return write_result(self, out_dir)


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


# --- output directories: probed before anything is charged, a fallback after ----------------


def check_writable(directory: str | Path, argument: str = "out") -> None:
    """Refuse (:class:`ConfigError` naming ``argument``) a directory fedvote could not write into.

    Creates ``directory`` (and its missing parents) if needed, creates, writes, flushes and
    removes a probe file in it, then removes the directories it created: nothing is left
    behind, whatever the outcome. Commands that write call it before anything is trained
    or charged, so an unwritable ``--out`` costs no privacy budget.
    """
    out = Path(directory)
    created: list[Path] = []
    try:
        try:
            missing = []
            for parent in (out, *out.parents):
                if parent.exists() or parent.is_symlink():
                    break
                missing.append(parent)
            for parent in reversed(missing):
                parent.mkdir()
                created.append(parent)
        except OSError as error:
            raise ConfigError(argument, f"cannot create {out}: {_reason(error)}") from error
        if not out.is_dir():
            raise ConfigError(argument, f"{out} is not a directory")
        probe = out / f".fedvote-probe-{os.urandom(6).hex()}"
        try:
            fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.write(fd, b"fedvote probe\n")
                os.fsync(fd)
            finally:
                os.close(fd)
                probe.unlink(missing_ok=True)
        except OSError as error:
            raise ConfigError(argument, f"cannot write in {out}: {_reason(error)}") from error
    finally:
        for made in reversed(created):
            try:
                made.rmdir()
            except OSError:
                pass


def _reason(error: OSError) -> str:
    return error.strerror or str(error) or type(error).__name__


def write_or_fallback(
    write: Callable[[Path], Path], out_dir: str | Path, near: str | Path | None = None
) -> tuple[Path, OSError | None]:
    """``write(out_dir)``, or, if that fails with an OSError, ``write`` into a fallback directory.

    The fallback is a new directory ``fedvote-result-*`` beside ``near`` (the run's
    ledger, where there is one), else in the system's temporary directory: a result whose
    releases were charged is never lost to a full disk or a directory that became
    unwritable. Returns the path written and the error that sent it to the fallback (None
    when it was written where asked); raises that error if every fallback fails too.
    """
    try:
        return write(Path(out_dir)), None
    except OSError as error:
        failure = error
    places = [Path(near).resolve().parent] if near is not None else []
    places.append(Path(tempfile.gettempdir()))
    for place in places:
        try:
            fallback = Path(tempfile.mkdtemp(prefix="fedvote-result-", dir=place))
        except OSError:
            continue
        try:
            return write(fallback), failure
        except OSError:
            shutil.rmtree(fallback, ignore_errors=True)
    raise failure


def fallback_message(flag: str, out_dir: str | Path, failure: OSError, path: Path) -> str:
    """The one line saying where a result went instead of ``out_dir`` (given as ``flag``), and why."""
    return f"{flag}: cannot write to {out_dir} ({_reason(failure)}); the result was saved to {path} instead"
