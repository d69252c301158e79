"""``--agent-budgets`` and ``--vote-sampling`` read and checked (issue 45); light, no dp-accounting.

The options dataclass (:mod:`fedvote.methods.options.voting`) validates the flags with these
at once, before anything is planned; :mod:`fedvote.privacy.individual_budgets` plans with them.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedvote.errors import ConfigError

FLAG = "agent_budgets"
FILE_PREFIX = "file:"
# Fractions of a group spec must add up to 1 within this.
FRACTION_TOLERANCE = 1e-6
# A budget file holds at most this many bytes (one ε per agent).
MAX_BUDGET_FILE_BYTES = 1 << 20


@dataclass(frozen=True)
class BudgetSpec:
    """A parsed ``--agent-budgets``: groups (ε, fraction) or, from a file, one ε per agent id."""

    groups: tuple[tuple[float, float], ...] = ()
    per_agent: tuple[float, ...] = ()
    path: str | None = None


def _budget(text: str, where: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(FLAG, f"{where}: {text!r} is not a number") from None
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(FLAG, f"{where}: a budget must be a finite ε > 0, got {text!r}")
    return value


def parse_budget_spec(spec: str) -> BudgetSpec:
    """``spec`` parsed and checked; one :class:`ConfigError` naming ``agent_budgets`` on bad input.

    ``ε:fraction,…`` (e.g. ``1:0.34,2:0.43,3:0.23``): distinct budgets ε > 0, fractions in
    (0, 1] adding up to 1. ``file:PATH``: a text file of one ε per agent, in agent-id order
    (whitespace, commas or newlines between them; ``#`` starts a comment).
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(FLAG, f"give 'ε:fraction,…' or 'file:PATH', got {spec!r}")
    spec = spec.strip()
    if spec.startswith(FILE_PREFIX):
        return _parse_file(spec[len(FILE_PREFIX) :])
    groups: list[tuple[float, float]] = []
    for part in spec.split(","):
        pieces = part.strip().split(":")
        if len(pieces) != 2:
            raise ConfigError(FLAG, f"{part.strip()!r} is not 'ε:fraction' (e.g. 1:0.34,2:0.43,3:0.23)")
        budget = _budget(pieces[0].strip(), f"group {part.strip()!r}")
        try:
            fraction = float(pieces[1])
        except ValueError:
            raise ConfigError(FLAG, f"group {part.strip()!r}: {pieces[1]!r} is not a fraction") from None
        if not (math.isfinite(fraction) and 0.0 < fraction <= 1.0):
            raise ConfigError(FLAG, f"group {part.strip()!r}: the fraction must lie in (0, 1]")
        groups.append((budget, fraction))
    budgets = [budget for budget, _ in groups]
    if len(set(budgets)) != len(budgets):
        raise ConfigError(FLAG, f"each budget may appear once, got {spec!r}")
    total = sum(fraction for _, fraction in groups)
    if abs(total - 1.0) > FRACTION_TOLERANCE:
        raise ConfigError(FLAG, f"the fractions must add up to 1, got {total:.6g}")
    return BudgetSpec(groups=tuple(groups))


def _parse_file(path: str) -> BudgetSpec:
    file = Path(path)
    if not path or not file.is_file():
        raise ConfigError(FLAG, f"budget file {path!r} does not exist")
    if file.stat().st_size > MAX_BUDGET_FILE_BYTES:
        raise ConfigError(FLAG, f"budget file {path!r} is larger than {MAX_BUDGET_FILE_BYTES} bytes")
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(FLAG, f"budget file {path!r} cannot be read: {error}") from None
    values = []
    for number, line in enumerate(text.splitlines(), start=1):
        for token in re.split(r"[\s,]+", line.split("#", 1)[0].strip()):
            if token:
                values.append(_budget(token, f"{path}, line {number}"))
    if not values:
        raise ConfigError(FLAG, f"budget file {path!r} holds no budget")
    return BudgetSpec(per_agent=tuple(values), path=path)


def assign_budgets(spec: BudgetSpec, num_agents: int, seed: int) -> np.ndarray:
    """Each agent's budget, (N,): the file's, or the groups' drawn by a seeded permutation.

    Group sizes are the fractions of N rounded by largest remainder, ties to the group given
    first (they add up to N);
    agent ids are then dealt to the groups in a random order from ``seed`` (public, like
    the partition).
    """
    if spec.per_agent:
        if len(spec.per_agent) != num_agents:
            raise ConfigError(
                FLAG, f"budget file {spec.path!r} holds {len(spec.per_agent)} budgets for {num_agents} agents"
            )
        return np.asarray(spec.per_agent, dtype=np.float64)
    fractions = np.array([fraction for _, fraction in spec.groups])
    exact = fractions * num_agents
    counts = np.floor(exact).astype(np.int64)
    remainders = np.round(exact - counts, 9)  # 0.23·20 = 4.6000000000000005 ties with 0.43·20's .6
    order = np.argsort(-remainders, kind="stable")  # largest remainders first, ties to the earlier group
    counts[order[: num_agents - int(counts.sum())]] += 1
    dealt = np.repeat(np.array([budget for budget, _ in spec.groups]), counts)  # (N,)
    rng = np.random.default_rng([int(seed), 45])
    return dealt[rng.permutation(num_agents)]


def check_rate(sampling_rate: float) -> None:
    """Refuse a vote-sampling rate outside (0, 1] (one line naming ``vote_sampling``)."""
    valid = (
        not isinstance(sampling_rate, bool)
        and isinstance(sampling_rate, float | int)
        and math.isfinite(sampling_rate)
        and 0.0 < sampling_rate <= 1.0
    )
    if not valid:
        raise ConfigError("vote_sampling", f"must lie in (0, 1], got {sampling_rate!r}")
