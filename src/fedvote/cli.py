"""The ``fedvote`` command line.

Errors from bad input are one line on stderr (``fedvote: error: ...``) with exit
status 2; nothing is written when a run fails.
"""

from __future__ import annotations

import sys

import click

from fedvote import __version__
from fedvote.account_cli import account
from fedvote.cli_options import federation_options, flag_for, reject_flags_besides
from fedvote.compare_cli import compare
from fedvote.config import (
    DEFAULT_EPSILON,
    FederationConfig,
    KnnOptions,
    PrivacyConfig,
    RunConfig,
    load_run_config,
)
from fedvote.data_cli import data
from fedvote.errors import ConfigError
from fedvote.methods import METHODS
from fedvote.methods.gradient import NOISE_PLACEMENTS, GradientOptions
from fedvote.models.features import FEATURE_KINDS
from fedvote.models.training import TrainingConfig
from fedvote.models.zoo import MODEL_NAMES
from fedvote.privacy.accountant import ACCOUNTANTS
from fedvote.privacy.events import KNN_BOUNDS
from fedvote.results import RunResult, write_result


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="fedvote")
def cli() -> None:
    """Differentially private federated learning by noisy voting."""


@cli.command()
@click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None,
              help="Rerun the config recorded in FILE (a result.json, or its 'config' object); "
                   "only --out and --json may be given with it.")
@click.option("--method", type=click.Choice(sorted(METHODS)), default="pate-fl", show_default=True)
@federation_options
@click.option("--sigma", type=float, default=None,
              help="Std σ of the total noise on each vote sum; 0 = non-private reference.")
@click.option("--epsilon", type=float, default=None,
              help=f"Target agent-level ε; σ is calibrated to it [default: {DEFAULT_EPSILON:g} "
                   "when --sigma is not given].")
@click.option("--delta", type=float, default=1e-3, show_default=True)
@click.option("--accountant", type=click.Choice(ACCOUNTANTS), default="pld", show_default=True)
@click.option("--calibrate-level", type=click.Choice(["agent", "instance"]), default=None,
              help="The level whose ε --epsilon targets [default: the method's own: agent for "
                   "voting and DP-FedAvg, instance for DP-FedSGD].")
@click.option("--queries", type=int, default=None,
              help="Public queries Q to label [default: the pool, at most 100].")
@click.option("--min-responders", type=int, default=None,
              help="t: minimum honest responders; each agent adds N(0, σ²/t) [default: N].")
@click.option("--k", "knn_k", type=int, default=None,
              help="Private-kNN-FL: neighbours per agent [default: --k-fraction of its records].")
@click.option("--k-fraction", type=float, default=0.05, show_default=True,
              help="Private-kNN-FL: k as a fraction of each agent's records (the paper's 5 %).")
@click.option("--features", type=click.Choice(FEATURE_KINDS), default="pca", show_default=True,
              help="Private-kNN-FL: public feature extractor, fitted on the public pool only.")
@click.option("--feature-dim", type=int, default=50, show_default=True)
@click.option("--feature-module", type=click.Path(dir_okay=False), default=None,
              help="TorchScript (or torch.export .pt2) file for --features module.")
@click.option("--normalize-features/--no-normalize-features", default=False, show_default=True)
@click.option("--knn-bound", type=click.Choice(KNN_BOUNDS), default="tight", show_default=True,
              help="Private-kNN-FL instance-level sensitivity: tight √2/k or the paper's √(2/k).")
@click.option("--rounds", type=int, default=None,
              help="Gradient methods: communication rounds T [default: 100].")
@click.option("--sampling-rate", type=float, default=None,
              help="Gradient methods: agent sampling probability q per round [default: 0.05; "
                   "DP-FedSGD 1].")
@click.option("--local-steps", type=int, default=None,
              help="Gradient methods: local (DP-)SGD iterations E per round [default: 20; DP-FedSGD 1].")
@click.option("--clip-norm", type=float, default=None, help="DP-FedAvg update clip S [default: 0.08].")
@click.option("--per-sample-clip", type=float, default=None, help="DP-FedSGD per-record clip C [default: 1].")
@click.option("--learning-rate", type=float, default=None, help="Gradient methods: local SGD step size.")
@click.option("--lr-decay", type=float, default=None, help="Gradient methods: step size decay per round.")
@click.option("--batch-size", type=int, default=None, help="FedAvg / DP-FedAvg local mini-batch size.")
@click.option("--batch-sampling-rate", type=float, default=None,
              help="DP-FedSGD Poisson batch rate q_b [default: 0.25].")
@click.option("--noise", type=click.Choice(NOISE_PLACEMENTS), default="distributed", show_default=True,
              help="DP-FedAvg: each sampled agent adds its noise share (Alg. 5) or the server "
                   "adds it (Alg. 3).")
@click.option("--gradient-model", type=click.Choice(MODEL_NAMES), default="mlp", show_default=True,
              help="Gradient methods: the global model.")
@click.option("--teacher-model", type=click.Choice(MODEL_NAMES), default="mlp", show_default=True)
@click.option("--student-model", type=click.Choice(MODEL_NAMES), default="auto", show_default=True,
              help="'auto': a small CNN for image data, else an MLP.")
@click.option("--epochs", type=int, default=40, show_default=True,
              help="Training epochs (teachers and student).")
@click.option("--student-epochs", type=int, default=None, help="Student epochs [default: --epochs].")
@click.option("--augment-shift", type=int, default=0, show_default=True,
              help="Student: shift each image batch by up to this many pixels (augmentation).")
@click.option("--self-training-rounds", type=int, default=2, show_default=True,
              help="Student: rounds of self-training on the unlabelled public pool.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seeds data split, training and query choice (not the privacy noise).")
@click.option("--noise-seed", type=int, default=None,
              help="Seed the privacy noise for a reproducible simulation; never in deployment "
                   "[default: OS entropy].")
@click.option("--ledger", type=click.Path(dir_okay=False), default=None,
              help="SQLite privacy ledger: every release is charged here before it happens, "
                   "accumulating across runs on the same federation.")
@click.option("--budget-epsilon", type=float, default=None,
              help="Agent-level ε budget of the federation in --ledger; a run that would exceed "
                   "it stops before releasing anything.")
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="Write DIR/result.json.")
@click.option("--json", "as_json", is_flag=True, help="Print result.json on stdout instead of the summary.")
@click.pass_context
def run(
    context: click.Context,
    config_file: str | None,
    method: str,
    federation: FederationConfig,
    sigma: float | None,
    epsilon: float | None,
    delta: float,
    accountant: str,
    calibrate_level: str,
    queries: int | None,
    min_responders: int | None,
    knn_k: int | None,
    k_fraction: float,
    features: str,
    feature_dim: int,
    feature_module: str | None,
    normalize_features: bool,
    knn_bound: str,
    rounds: int | None,
    sampling_rate: float | None,
    local_steps: int | None,
    clip_norm: float | None,
    per_sample_clip: float | None,
    learning_rate: float | None,
    lr_decay: float | None,
    batch_size: int | None,
    batch_sampling_rate: float | None,
    noise: str,
    gradient_model: str,
    teacher_model: str,
    student_model: str,
    epochs: int,
    student_epochs: int | None,
    augment_shift: int,
    self_training_rounds: int,
    seed: int,
    noise_seed: int | None,
    ledger: str | None,
    budget_epsilon: float | None,
    out: str | None,
    as_json: bool,
) -> None:
    """Run a federated method and report accuracy and (ε, δ) at agent and instance level.

    Example: fedvote run --agents 50 --epsilon 4 --delta 1e-3
    """
    from fedvote.progress import RichProgress
    from fedvote.runner import run as run_config

    if config_file is not None:
        config = _config_from_file(context, config_file, frozenset({"out", "as_json"}))
    else:
        config = RunConfig(
            method=method,
            federation=federation,
            privacy=PrivacyConfig(
                sigma=sigma,
                epsilon=epsilon,
                delta=delta,
                accountant=accountant,
                min_responders=min_responders,
                noise_seed=noise_seed,
                ledger=ledger,
                budget_epsilon=budget_epsilon,
                calibrate_level=calibrate_level,
            ),
            knn=KnnOptions(
                k=knn_k,
                k_fraction=k_fraction,
                features=features,
                feature_dim=feature_dim,
                feature_module=feature_module,
                normalize=normalize_features,
                bound=knn_bound,
            ),
            gradient=GradientOptions(
                rounds=rounds,
                sampling_rate=sampling_rate,
                local_steps=local_steps,
                clip_norm=clip_norm,
                per_sample_clip=per_sample_clip,
                learning_rate=learning_rate,
                lr_decay=lr_decay,
                batch_size=batch_size,
                batch_sampling_rate=batch_sampling_rate,
                noise=noise,
                model=gradient_model,
            ),
            teacher=TrainingConfig(model=teacher_model, epochs=epochs),
            student=TrainingConfig(
                model=student_model,
                epochs=student_epochs if student_epochs is not None else epochs,
                augment_shift=augment_shift,
            ),
            queries=queries,
            self_training_rounds=self_training_rounds,
            seed=seed,
        )
    result = run_config(config, progress=RichProgress())
    if out is not None:
        path = write_result(result, out)
        click.echo(f"wrote {path}", err=True)
    if as_json:
        click.echo(result.to_json())
    else:
        click.echo(summary(result))


def _config_from_file(context: click.Context, path: str, allowed: frozenset[str]) -> RunConfig:
    """The RunConfig stored in ``path``; refuses other flags given alongside."""
    reject_flags_besides(context, allowed | {"config_file"})
    return load_run_config(path)


def summary(result: RunResult) -> str:
    """A readable few lines: accuracy, ε per level, queries, communication, time."""
    privacy = result.privacy
    lines = [
        f"fedvote {result.method} on {result.dataset}: {result.agents} agents, "
        + (f"{result.queries} queries, " if result.queries else "")
        + f"σ = {result.sigma:.4g}",
        f"  {'student accuracy' if result.queries else 'test accuracy':<22}"
        f"{result.accuracy:.3f}   (test set)",
    ]
    if result.label_accuracy is not None:
        lines.append(f"  pseudo-label accuracy {result.label_accuracy:.3f}")
    if result.teacher_accuracy is not None:
        lines.append(f"  mean teacher accuracy {result.teacher_accuracy:.3f}")
    if privacy.private:
        for level in ("agent", "instance"):
            entry = getattr(privacy, level)
            label = f"ε ({level}-level)"
            if entry.epsilon is None:
                lines.append(f"  {label:<22}not private at this level (unbounded)")
                continue
            lines.append(
                f"  {label:<22}{entry.epsilon:.4f} at δ = {privacy.delta:g} "
                f"[{privacy.accountant}, sensitivity {entry.sensitivity:.4g}]"
            )
    else:
        lines.append("  NOT PRIVATE: no noise protects the releases; ε is unbounded (reported as null)")
    comm = result.communication
    lines.append(
        f"  communication         {comm['upload_floats']} floats up, "
        f"{comm['download_floats']} down, {comm['rounds']} round(s)"
    )
    ledger = result.details.get("ledger")
    if ledger:
        budget = ledger["budget_epsilon"]
        lines.append(
            f"  ledger                federation {ledger['federation']} has spent agent-level "
            f"ε = {ledger['spent_agent_epsilon']:.4f}" + (f" of {budget:g}" if budget else "")
        )
    lines.append(f"  time                  {result.timings['total_s']:.1f} s")
    return "\n".join(lines)


# The other command groups live in their own modules.
cli.add_command(account)
cli.add_command(data)
cli.add_command(compare)


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the CLI, turning bad input into a one-line error and exit status 2."""
    try:
        cli.main(args=argv, prog_name="fedvote", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("fedvote: aborted", err=True)
        sys.exit(130)
    except click.UsageError as error:
        click.echo(f"fedvote: error: {_one_line(error.format_message())}", err=True)
        sys.exit(2)
    except click.ClickException as error:
        click.echo(f"fedvote: error: {_one_line(error.format_message())}", err=True)
        sys.exit(error.exit_code)
    except ConfigError as error:
        click.echo(f"fedvote: error: {flag_for(error.argument)}: {error.detail}", err=True)
        sys.exit(2)


def _one_line(message: str) -> str:
    return " ".join(message.split())


if __name__ == "__main__":  # pragma: no cover
    main(sys.argv[1:])
