"""fedvote: differentially private federated learning by noisy voting.

Agents train local teachers on their private data and release only noisy votes on
public queries; the noisy argmax becomes a pseudo-label for a global student. Every
release is accounted at agent and instance level (see ``docs/privacy.md``).

From Python, :func:`run` is ``fedvote run`` (see ``docs/python.md``)::

    import fedvote

    result = fedvote.run(method="pate-fl", dataset="digits", agents=50, epsilon=4.0)
    print(result.accuracy, result.privacy.agent.epsilon)
    result.save("runs/pate")

Importing ``fedvote`` loads nothing heavy: :func:`run` imports the runner (and torch)
when it is called.
"""

from __future__ import annotations

from fedvote._meta import __version__

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing at start-up
if TYPE_CHECKING:
    from typing import Any

    from fedvote.results import RunResult

__all__ = ["__version__", "run"]


def run(
    method: str = "pate-fl",
    *,
    dataset: str = "digits",
    agents: int = 50,
    epsilon: float | None = None,
    **settings: Any,
) -> RunResult:
    """Run ``method`` on a simulated federation, as ``fedvote run`` does, and return its result.

    Every flag of ``fedvote run`` is a keyword of the same name (``--teacher-model mlp`` is
    ``teacher_model="mlp"``; a method's own options by their names: ``k=5``,
    ``rounds=20``), with the same default, and is validated exactly as the command line
    validates it: the config is built by :func:`fedvote.runner.build_config`, the builder
    behind ``fedvote run``'s flags. With neither ``epsilon`` nor ``sigma``, σ is calibrated
    to agent-level ε = 4 (``--epsilon``'s default); give ``sigma=0`` for the non-private
    reference.

    Raises :class:`~fedvote.errors.ConfigError` (its ``argument`` names the setting)
    before anything is loaded, trained or charged: an unknown setting, a value of the
    wrong type or out of range, an option the method does not take, a budget a
    ``ledger`` would overrun.

    ``result.to_dict()`` is ``result.json``'s content and ``result.save(directory)``
    writes it (with ``analysis.npz``), as ``fedvote run --out directory`` does.
    """
    from fedvote.runner import build_config
    from fedvote.runner import run as run_config

    config = build_config(method, dataset=dataset, agents=agents, epsilon=epsilon, **settings)
    return run_config(config)
