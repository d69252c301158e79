"""``fedvote audit``: an empirical lower bound on a method's ε, beside the ε it claims."""

from __future__ import annotations

import json

import click

from fedvote.cli.run_options import run_config_options
from fedvote.config import RunConfig
from fedvote.errors import ConfigError
from fedvote.methods.registry import check_options

# Run flags an audit does not take: it charges no ledger and simulates the sums in process.
# --secure-noise is taken (PATE-FL: the agents' discrete Gaussian shares from the CSPRNG).
_NOT_AUDIT_FLAGS = frozenset({"ledger", "budget_epsilon", "secure_sum"})
# At most this many trials: 20,000 take about a minute on digits' defaults, so 10⁷ about eight
# hours; more is a typo (1e13 would run for millennia), refused before anything is built.
MAX_TRIALS = 10_000_000


@click.command()
@run_config_options(exclude=_NOT_AUDIT_FLAGS)
@click.option("--level", type=click.Choice(["agent", "instance"]), default="agent", show_default=True,
              help="Agent level (canary agent vs zeroed out) or instance level (a replaced canary record).")
@click.option("--trials", type=int, default=20_000, show_default=True,
              help="Releases on each of the two neighbouring federations; for the gradient methods "
                   "(one-run audit) the number of canaries.")
@click.option("--confidence", type=float, default=0.95, show_default=True,
              help="Confidence of the lower bound (Clopper-Pearson; Bonferroni where several "
                   "tests are read).")
@click.option("--json", "as_json", is_flag=True, help="Print the audit as a JSON object.")
def audit(configs: list[RunConfig], level: str, trials: int, confidence: float, as_json: bool) -> None:
    """Measure a lower bound on ε by distinguishing neighbouring federations (privacy auditing).

    The method is planned as `fedvote run` plans it (σ calibrated to --epsilon at --delta);
    the audit releases its votes (or updates) through the run's own code on a federation
    with a worst-case canary and on its neighbour, tests which one the server saw, and
    turns the test's error rates into an ε that the mechanism must exceed with the stated
    confidence. A lower bound above the claimed ε is a privacy bug.

    Example: fedvote audit --method pate-fl --level agent --trials 20000 --json
    """
    (config,) = configs
    if trials > MAX_TRIALS:
        limit = f"must be at most {MAX_TRIALS} (about eight hours on digits), got {trials}"
        raise ConfigError("trials", limit)
    check_options(config)
    from fedvote.audit import audit_config  # lazy: imports torch; keeps fedvote --help fast
    from fedvote.progress import RichProgress

    # Off a terminal (a log, a batch job) each phase is a plain line with the time and an ETA.
    progress = RichProgress(log_lines=True, prefix="fedvote audit")
    result = audit_config(config, level, trials, confidence=confidence, progress=progress)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2))
        return
    verdict = "consistent with the claim"
    if result.violated:
        verdict = "VIOLATION: the mechanism leaks more than it claims"
    unit = "canaries (one run)" if result.mode == "one-run" else "releases on each neighbour"
    extra = []
    if "code_under_audit" in result.details:  # what the one-run audit executed
        extra.append(f"  code under audit       {result.details['code_under_audit']}")
    if "ceiling" in result.details:  # the most one run of this size can show, every guess right
        extra.append(f"  one-run ceiling        {result.details['ceiling']:.4f} (every guess right)")
    click.echo(
        "\n".join(
            [
                f"fedvote audit {result.method}, {result.level} level: "
                f"σ = {result.sigma:.4g}, δ = {result.delta:g}",
                f"  claimed ε              {result.claimed_epsilon:.4f}",
                f"  measured lower bound   {result.epsilon_lower_bound:.4f}  "
                f"({result.confidence:.0%} confidence; {verdict})",
                f"  trials                 {result.trials} {unit}",
                f"  canary                 {result.canary}",
                f"  test                   {result.test}",
                *extra,
                f"  time                   {result.seconds:.1f} s",
            ]
        )
    )
