"""Bad and malicious teachers: how an agent's votes may depart from its teacher's predictions.

The reputation paper (reputation-weighted-pate.txt, Sec. 3.2 and 4.4) motivates weighted
voting by *bad teachers*: agents that vote poorly, by accident or on purpose. A
:class:`Behaviour` post-processes a teacher's predicted labels before they become votes
(and before the agent measures its own validation accuracy, so a broken or malicious
agent is broken or malicious everywhere):

* ``honest`` — the teacher's prediction;
* ``random`` — a uniformly random label, fresh for every prediction (a random guesser);
* ``constant`` — always ``constant_class`` (a broken teacher stuck on one class);
* ``adversarial`` — always a wrong class: ``target_class``, or ``(target + 1) mod C`` when
  the teacher itself predicts the target (colluding adversaries sharing one target).

An adversary who behaves honestly on the public validation set and maliciously on the
queries is *not* modelled: reputation weights cannot catch it (the paper's ZK-SNARK step,
Sec. 3.2.1 item 6, is what would).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedvote.errors import ConfigError

BEHAVIOURS: tuple[str, ...] = ("honest", "random", "constant", "adversarial")
BAD_KINDS: tuple[str, ...] = ("random", "constant", "adversarial")


@dataclass(frozen=True)
class Behaviour:
    """What an agent does with its teacher's predictions before voting.

    Parameters
    ----------
    kind : {"honest", "random", "constant", "adversarial"}
        See the module docstring.
    target_class : int
        The wrong class adversaries push (``adversarial``).
    constant_class : int
        The class a ``constant`` voter always votes.

    """

    kind: str = "honest"
    target_class: int = 0
    constant_class: int = 0

    def __post_init__(self) -> None:
        if self.kind not in BEHAVIOURS:
            choices = ", ".join(BEHAVIOURS)
            raise ConfigError("bad_kind", f"unknown behaviour {self.kind!r}; choose from {choices}")
        if self.target_class < 0 or self.constant_class < 0:
            raise ConfigError("bad_target_class", "classes must be >= 0")

    @property
    def honest(self) -> bool:
        """Whether votes are the teacher's predictions unchanged."""
        return self.kind == "honest"

    def act(self, predictions: np.ndarray, num_classes: int, rng: np.random.Generator) -> np.ndarray:
        """The labels (Q,) int64 this agent votes, from its teacher's ``predictions`` (Q,).

        ``rng`` supplies the random guesser's labels (the agent's own behaviour stream).
        """
        labels = np.asarray(predictions, dtype=np.int64).reshape(-1)
        for name, value in (("bad_target_class", self.target_class), ("constant_class", self.constant_class)):
            if value >= num_classes:
                raise ConfigError(name, f"class {value} does not exist among {num_classes} classes")
        if self.kind == "honest":
            return labels.copy()
        if self.kind == "random":
            return rng.integers(0, num_classes, size=labels.shape[0]).astype(np.int64)
        if self.kind == "constant":
            return np.full(labels.shape[0], self.constant_class, dtype=np.int64)
        wrong = np.full(labels.shape[0], self.target_class, dtype=np.int64)
        wrong[labels == self.target_class] = (self.target_class + 1) % num_classes
        return wrong


HONEST = Behaviour()


def assign_behaviours(
    num_agents: int,
    *,
    fraction: float,
    kind: str,
    num_classes: int,
    target_class: int = 0,
    seed: int = 0,
) -> list[Behaviour]:
    """Behaviours for ``num_agents`` agents: ``round(fraction · N)`` of them, chosen at random, bad.

    The bad agents are a seeded random subset; ``constant`` voters each get their own
    seeded random class; ``adversarial`` ones all push ``target_class``.
    """
    if not 0.0 <= fraction <= 1.0:
        raise ConfigError("bad_fraction", f"must lie in [0, 1], got {fraction}")
    if kind not in BAD_KINDS:
        raise ConfigError("bad_kind", f"unknown kind {kind!r}; choose from {', '.join(BAD_KINDS)}")
    if not 0 <= target_class < num_classes:
        raise ConfigError("bad_target_class", f"must lie in 0..{num_classes - 1}, got {target_class}")
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xBAD]))
    count = int(round(fraction * num_agents))
    bad = rng.choice(num_agents, size=count, replace=False)
    constants = rng.integers(0, num_classes, size=num_agents)
    behaviours = [HONEST] * num_agents
    for agent in bad:
        behaviours[int(agent)] = Behaviour(
            kind=kind, target_class=target_class, constant_class=int(constants[agent])
        )
    return behaviours
