"""The privacy of the PriFedSync MNIST grid, proven and as the paper states it (no training).

Data-independent, so it needs no run: for the paper's settings (n = 600 records per
client, B = 16, K = 38, δ = 1e-5) and each (p, σ_paper) of its Table 1, the proven ε of
fedvote's mechanism (Poisson batches, N(0, σ²C²) with σ = 2·σ_paper, replace-one PLD;
``privacy/events.py::prifedsync_events``) at the paper's R and at the grid's 300
configured rounds, beside Theorem 2's CLT μ at R and its ε (asymptotic, not a bound).

Usage (repository root): ``.venv/bin/python experiments/prifedsync_epsilon.py``; prints
the markdown table that docs/results.md's PriFedSync section shows.
"""

from __future__ import annotations

from fedvote.privacy.accountant import epsilon_for
from fedvote.privacy.events import prifedsync_events
from fedvote.privacy.fdp import gdp_epsilon, prifedsync_mu

RECORDS, BATCH, STEPS, DELTA, CONFIGURED = 600, 16, 38, 1e-5, 300
# The paper's Table 1: (p, σ_paper) → (R, μ_max as printed).
PAPER = {(1.0, 1.0): (93, 2.71), (1.0, 0.75): (64, 3.96), (0.5, 1.0): (194, 3.92), (0.5, 0.75): (127, 5.58)}


def proven_epsilon(paper_sigma: float, rounds: int) -> float:
    """fedvote's headline for ``rounds`` rounds at the paper's noise std (``--sigma 2σ``)."""
    events = prifedsync_events(2.0 * paper_sigma, BATCH / RECORDS, STEPS, rounds)
    return epsilon_for(events.instance, DELTA, "pld")


def table() -> list[str]:
    """The markdown table's lines: each Table 1 setting's CLT figure beside what is proven."""
    lines = [
        "| p | σ (paper) | `--sigma` | R (paper) | μ_max paper / Theorem 2 (CLT) | ε of the CLT at R "
        "| proven ε at R | proven ε at 300 rounds |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for (p, sigma), (rounds, paper_mu) in PAPER.items():
        mu = prifedsync_mu(sigma, BATCH, RECORDS, STEPS, rounds)
        lines.append(
            f"| {p:g} | {sigma:g} | {2 * sigma:g} | {rounds} | {paper_mu} / {mu:.2f} | "
            f"{gdp_epsilon(mu, DELTA):.2f} | {proven_epsilon(sigma, rounds):.2f} | "
            f"{proven_epsilon(sigma, CONFIGURED):.2f} |"
        )
    return lines


def main() -> None:
    """Print the table."""
    print("\n".join(table()))


if __name__ == "__main__":
    main()
