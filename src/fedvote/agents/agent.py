"""An agent of the federation: its records, seeds, noise stream, teacher — and one exit.

Everything that leaves an agent leaves through :meth:`Agent.release`: the output is
checked to be what the accounting assumes (:class:`VoteOutput`: a vote of shape (Q, C)
with bounded non-negative rows; :class:`ArrayOutput`: finite values of one shape, within
an L2 bound where there is one) and the agent's noise share N(0, noise_std²) is added from
its own generator. A malformed output raises :class:`fedvote.errors.VoteRejected` naming
the agent, and nothing leaves. An agent with nothing to contribute to a secure sum sends
its noise share alone (:meth:`Agent.noise_share`), through the same exit.

What agents do with their data lives in one small module per skill, each ending in the
exit: :mod:`~fedvote.agents.teacher_votes`, :mod:`~fedvote.agents.weighted_votes`,
:mod:`~fedvote.agents.knn_votes`, :mod:`~fedvote.agents.local_updates`,
:mod:`~fedvote.agents.private_heads`. Those modules are agent-side code: they read the
agent's private records (:attr:`Agent.private_data`), which never leave otherwise. The
same code runs in-process (LocalTransport) and on a node of its own (the Flower transport).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from fedvote.agents.behaviour import HONEST, Behaviour
from fedvote.aggregation.secure_noise import (
    csprng_seed,
    csprng_seeded_generator,
    discrete_gaussian,
    secure_gaussian,
)
from fedvote.aggregation.validation import validate_vote
from fedvote.data.federation import LabeledData
from fedvote.errors import VoteRejected
from fedvote.models.training import TrainingConfig, fit_classifier, predict_labels
from fedvote.models.zoo import build_model

# A clipped or projected output may exceed its L2 bound by this much (relative) from
# float32 rounding.
NORM_TOLERANCE = 1e-5

# The spawn-key tag of an agent's count stream (adaptive clipping's clip bit, issue 46): a child of
# the agent's own noise seed, apart from the stream its update noise and shares draw from.
COUNT_STREAM_TAG = 0xC0C7


def count_seed_sequence(noise_rng: np.random.Generator) -> np.random.SeedSequence:
    """The seed of an agent's count stream: child (…, :data:`COUNT_STREAM_TAG`) of its noise seed.

    Derived, not drawn: the noise stream's state is not touched. A generator without a
    :class:`~numpy.random.SeedSequence` gets 256 bits of ``os.urandom`` instead.
    """
    seeds = getattr(noise_rng.bit_generator, "seed_seq", None)
    if not isinstance(seeds, np.random.SeedSequence):
        return np.random.SeedSequence(csprng_seed(256))
    return np.random.SeedSequence(
        seeds.entropy, spawn_key=(*seeds.spawn_key, COUNT_STREAM_TAG), pool_size=seeds.pool_size
    )


@dataclass(frozen=True)
class VoteOutput:
    """What a vote must be where it leaves the agent (:func:`~fedvote.aggregation.validation.validate_vote`).

    (``num_queries``, ``width``) — Q rows (None: any number) of ``width`` entries (None:
    the agent's C classes) — finite, non-negative, each row totalling at most ``bound``,
    and exactly one non-zero entry per row when ``one_hot``.
    """

    num_queries: int | None = None
    bound: float = 1.0
    one_hot: bool = False
    width: int | None = None

    def validate(self, values: np.ndarray, *, agent_id: int, num_classes: int) -> np.ndarray:
        """``values`` as a new float64 (Q, width) array, or :class:`VoteRejected`."""
        return validate_vote(
            values,
            agent_id=agent_id,
            num_classes=num_classes if self.width is None else self.width,
            num_queries=self.num_queries,
            bound=self.bound,
            one_hot=self.one_hot,
        )


@dataclass(frozen=True)
class ArrayOutput:
    """What a non-vote output must be where it leaves the agent: ``what`` names it in errors.

    Real, finite values of exactly ``shape``; with ``norm_bound``, an L2 norm of at most
    that (up to a relative :data:`NORM_TOLERANCE`): a clipped update, a projected head.
    """

    what: str
    shape: tuple[int, ...]
    norm_bound: float | None = None

    def validate(self, values: np.ndarray, *, agent_id: int, num_classes: int) -> np.ndarray:
        """``values`` as a new float64 array of ``shape``, or :class:`VoteRejected`."""
        array = np.asarray(values)
        if array.shape != self.shape:
            raise VoteRejected(agent_id, f"{self.what} has shape {tuple(array.shape)}, expected {self.shape}")
        if array.dtype == np.bool_ or not np.issubdtype(array.dtype, np.number) or np.iscomplexobj(array):
            raise VoteRejected(agent_id, f"{self.what} has dtype {array.dtype}, expected real numbers")
        checked = np.array(array, dtype=np.float64)  # a copy
        bad = np.argwhere(~np.isfinite(checked))
        if bad.size:
            where = tuple(int(i) for i in bad[0])
            raise VoteRejected(agent_id, f"{self.what} holds {checked[where]} at {where}")
        if self.norm_bound is not None:
            norm = float(np.linalg.norm(checked))
            if norm > self.norm_bound * (1.0 + NORM_TOLERANCE):
                raise VoteRejected(agent_id, f"{self.what} has norm {norm:g} > bound {self.norm_bound:g}")
        return checked


Output = VoteOutput | ArrayOutput


def _checked_count(count_coordinates: int) -> int:
    """``count_coordinates`` as an int >= 0 (how many trailing coordinates of a release are a count)."""
    if isinstance(count_coordinates, bool) or not isinstance(count_coordinates, int) or count_coordinates < 0:
        raise ValueError(f"count_coordinates must be an integer >= 0, got {count_coordinates!r}")
    return count_coordinates


class Agent:
    """One agent: its private labelled data, a copy of the public pool, its teacher.

    Parameters
    ----------
    agent_id : int
        Index of the agent in the federation.
    data : LabeledData
        The agent's private records; never leaves the agent.
    public_features : np.ndarray
        The public pool (P, *shape); queries arrive as indices into it.
    num_classes : int
        Number of classes C.
    noise_rng : np.random.Generator
        Source of this agent's privacy noise (seeded only for reproducible simulations).
    seed : int
        Seeds the teacher's initialisation and batch order.
    behaviour : Behaviour
        Simulation: what the agent does with its teacher's predictions (default honest).
    secure_noise : bool
        ``--secure-noise`` (:mod:`fedvote.aggregation.secure_noise`): an integer vote gets
        exact discrete Gaussian noise N_Z(0, noise_std²) from the OS CSPRNG, any other
        output a Gaussian from ``noise_rng`` (then CSPRNG-seeded) as a sum of four draws
        over 2; seeds drawn inside a computation (:meth:`privacy_seed`) come from
        ``os.urandom``. Default False: N(0, noise_std²) from ``noise_rng``.

    """

    def __init__(
        self,
        *,
        agent_id: int,
        data: LabeledData,
        public_features: np.ndarray,
        num_classes: int,
        noise_rng: np.random.Generator,
        seed: int,
        behaviour: Behaviour = HONEST,
        secure_noise: bool = False,
    ) -> None:
        self.agent_id = agent_id
        self._secure_noise = secure_noise
        self._data = data
        self._public_features = public_features
        self._num_classes = num_classes
        self._noise_rng = noise_rng
        self._count_rng: np.random.Generator | None = None  # the count stream, made on first use
        self._seed = seed
        self._teacher: nn.Module | None = None
        self._teacher_builder: Callable[[], nn.Module] | None = None
        self.set_behaviour(behaviour)

    # --- Records and seeds ---------------------------------------------------------------

    @property
    def num_records(self) -> int:
        """Size of the private dataset (public metadata, as in the papers' settings)."""
        return len(self._data)

    @property
    def num_classes(self) -> int:
        """Number of classes C (the width of a vote)."""
        return self._num_classes

    @property
    def secure_noise(self) -> bool:
        """Whether this agent draws ``--secure-noise`` (integer votes then leave as integers)."""
        return self._secure_noise

    @property
    def seed(self) -> int:
        """The agent's training seed (initialisation, batch order, behaviour stream)."""
        return self._seed

    @property
    def private_data(self) -> LabeledData:
        """The agent's private records — for agent-side skill code only; never a release."""
        return self._data

    @property
    def public_features(self) -> np.ndarray:
        """The agent's copy of the public pool, (P, *shape)."""
        return self._public_features

    def privacy_seed(self) -> int:
        """A seed drawn from this agent's privacy stream, for noise drawn inside a computation.

        DP-SGD's Poisson batches and per-step noise (:mod:`fedvote.agents.local_updates`).
        With secure noise, 62 bits of ``os.urandom``.
        """
        if self._secure_noise:
            return csprng_seed(62)
        return int(self._noise_rng.integers(2**62))

    # --- The one exit ----------------------------------------------------------------------

    def release(
        self, values: np.ndarray, noise_std: float, expected: Output, *, count_coordinates: int = 0
    ) -> np.ndarray:
        """What leaves the agent: ``values`` checked against ``expected``, plus N(0, noise_std²).

        Every output of every skill leaves through here. ``values`` is validated first
        (``expected.validate``); a malformed output raises :class:`fedvote.errors.VoteRejected`
        and nothing leaves. The noise share comes from this agent's own generator (nothing is
        drawn when ``noise_std`` is 0). With ``count_coordinates`` k > 0 (a 1-D release whose last
        k coordinates are adaptive clipping's count) the other coordinates get exactly the draws
        a release of those coordinates alone would get (common random numbers with the fixed
        clip), and the count's come from the agent's count stream (:meth:`count_generator`).
        Returns a new float64 array; ``values`` is left as it was.
        """
        if not (math.isfinite(noise_std) and noise_std >= 0):
            raise ValueError(f"noise_std must be a finite number >= 0, got {noise_std}")
        count = _checked_count(count_coordinates)
        checked = expected.validate(values, agent_id=self.agent_id, num_classes=self._num_classes)
        if count and (isinstance(expected, VoteOutput) or checked.ndim != 1 or checked.shape[0] < count):
            raise ValueError(f"a release with {count} count coordinate(s) must be a 1-D array that long")
        std = float(noise_std)
        head = checked[: checked.shape[0] - count] if count else checked  # a view: the update
        if std > 0 and self._secure_noise:
            head += self._secure_share(head, std, expected)
        elif std > 0:
            head += self._noise_rng.normal(0.0, std, size=head.shape)
        if std > 0 and count:
            checked[-count:] += self._count_noise(std, count)
        return checked

    def count_generator(self) -> np.random.Generator:
        """The agent's count stream: the noise of adaptive clipping's count coordinates only.

        Seeded once from the agent's noise seed and :data:`COUNT_STREAM_TAG`
        (:func:`count_seed_sequence`), so that the count's noise consumes nothing of the
        stream the update noise and shares draw from; with secure noise, CSPRNG-seeded (its
        draws then summed as :func:`~fedvote.aggregation.secure_noise.secure_gaussian` sums
        them). Kept by the agent across rounds: each round's count noise is a new draw.
        """
        if self._count_rng is None:
            self._count_rng = (
                csprng_seeded_generator()
                if self._secure_noise
                else np.random.default_rng(count_seed_sequence(self._noise_rng))
            )
        return self._count_rng

    def _count_noise(self, noise_std: float, count: int) -> np.ndarray:
        """N(0, noise_std²) on ``count`` count coordinates from the count stream, (count,) float64."""
        if self._secure_noise:
            return secure_gaussian(self.count_generator(), noise_std, (count,))
        return self.count_generator().normal(0.0, noise_std, size=count)

    def _secure_share(self, checked: np.ndarray, noise_std: float, expected: Output) -> np.ndarray:
        """The secure noise share: N_Z(0, noise_std²) on an integer vote, else a CSPRNG-seeded Gaussian."""
        if isinstance(expected, VoteOutput):
            if not np.array_equal(checked, np.round(checked)):
                raise VoteRejected(self.agent_id, "holds non-integer votes; secure noise needs integers")
            return discrete_gaussian(noise_std, checked.shape).astype(np.float64)  # exact below 2^53
        return secure_gaussian(self._noise_rng, noise_std, checked.shape)

    def share_generator(self) -> torch.Generator:
        """The agent's own generator for one noise share: torch's, seeded by its privacy stream.

        One :meth:`privacy_seed` draw per share, so each share (and each agent) has its own stream.
        """
        return torch.Generator().manual_seed(self.privacy_seed())

    def write_noise_share(self, out: torch.Tensor, noise_std: float, *, count_coordinates: int = 0) -> None:
        """Write the agent's float share N(0, noise_std²) into ``out`` (a float32 tensor), through the exit.

        Zeros of ``out``'s shape pass :meth:`release`'s checks (nothing is added there), then
        ``out`` gets float32 Gaussians from :meth:`share_generator`, times ``noise_std``.
        :func:`fedvote.agents.local_updates.noise_shares` fills many agents' rows of one block
        this way (issue 46); :meth:`noise_share` is one agent's. With ``count_coordinates`` k > 0
        (``out`` 1-D) the coordinates before the last k get exactly the share of a release of
        those coordinates alone and the count's come from :meth:`count_generator`. Not with
        secure noise.
        """
        if not (math.isfinite(noise_std) and noise_std >= 0):
            raise ValueError(f"noise_std must be a finite number >= 0, got {noise_std}")
        if self._secure_noise:
            raise ValueError("a secure-noise agent's share is its CSPRNG-seeded one (noise_share)")
        shape = tuple(out.shape)
        count = _checked_count(count_coordinates)
        if count and (len(shape) != 1 or shape[0] < count):
            raise ValueError(f"a share with {count} count coordinate(s) must be a 1-D tensor that long")
        self.release(np.zeros(shape), 0.0, ArrayOutput("noise share", shape))  # the one exit's checks
        std = float(noise_std)
        if std > 0:
            head = out[: shape[0] - count] if count else out  # a contiguous view: the update's part
            torch.randn(tuple(head.shape), generator=self.share_generator(), out=head)
            head.mul_(std)
            if count:
                out[-count:] = torch.from_numpy(self._count_noise(std, count).astype(np.float32))
        else:
            out.zero_()

    def noise_share(
        self, shape: tuple[int, ...], noise_std: float, *, count_coordinates: int = 0
    ) -> np.ndarray:
        """N(0, noise_std²) of ``shape`` from this agent's own generator, float64.

        What an agent with nothing to contribute sends into a secure sum (DP-FedAvg's
        unsampled agents): zeros plus its share, indistinguishable in the masked sum. The
        share is :meth:`write_noise_share`'s (float32 Gaussians of its own torch stream); with
        secure noise it is :meth:`release`'s CSPRNG-seeded share. ``count_coordinates`` as there.
        """
        if self._secure_noise:
            expected = ArrayOutput("noise share", tuple(shape))
            return self.release(np.zeros(shape), noise_std, expected, count_coordinates=count_coordinates)
        share = torch.empty(tuple(shape), dtype=torch.float32)
        self.write_noise_share(share, noise_std, count_coordinates=count_coordinates)
        return share.numpy().astype(np.float64)

    # --- The teacher slot ------------------------------------------------------------------

    def train_teacher(self, config: TrainingConfig) -> None:
        """Train the local teacher f_i on the private data (Algorithm 1, line 2)."""
        generator = torch.Generator().manual_seed(self._seed)
        model = build_model(
            config.model,
            tuple(self._data.features.shape[1:]),
            self._num_classes,
            generator=generator,
        )
        self._teacher_builder = None
        self._teacher = fit_classifier(
            model, self._data.features, self._data.labels, config, generator
        )

    def install_teacher(self, teacher: nn.Module) -> None:
        """Take ``teacher`` as f_i: a model trained for this agent on its own private data.

        For teachers trained elsewhere than :meth:`train_teacher`: a node restoring its
        checkpoint (Flower's ClientApp), DANN, the multi-label heads. The batched ensemble of
        :class:`fedvote.transport.LocalTransport` installs a builder instead
        (:meth:`install_teacher_builder`); either way the teacher is the one
        :meth:`train_teacher` would have produced, up to floating-point rounding.
        """
        self._teacher_builder = None
        self._teacher = teacher.eval()

    def install_teacher_builder(self, build: Callable[[], nn.Module]) -> None:
        """Take the module ``build()`` returns as f_i, built the first time :attr:`teacher` is read.

        For a batched ensemble whose votes are computed from the stacked parameters: the
        agent's own module (views of its slice of them) is then needed only by whoever
        asks for it, and building a hundred copies of the template cost a third of a
        100-agent vote job on digits.
        """
        self._teacher = None
        self._teacher_builder = build

    def teacher_checkpoint(self) -> dict[str, torch.Tensor]:
        """A copy of the teacher's weights, for this agent's own node to keep between messages.

        Not a release: a transport that handles each message in a fresh process (Flower's
        ClientApp) keeps it in the node-local state and gives it back through
        :meth:`install_teacher`; it never leaves the agent's node.
        """
        return {name: value.detach().clone() for name, value in self.teacher.state_dict().items()}

    @property
    def teacher(self) -> nn.Module:
        """f_i (built now if a builder was installed); a ``RuntimeError`` before any teacher was given."""
        if self._teacher is None and self._teacher_builder is not None:
            self._teacher = self._teacher_builder().eval()
            self._teacher_builder = None
        if self._teacher is None:
            raise RuntimeError(f"agent {self.agent_id} has no teacher yet; call train_teacher first")
        return self._teacher

    def voted_labels(self, features: np.ndarray) -> np.ndarray:
        """The labels (n,) this agent votes on ``features`` (n, *shape): its teacher's, as it behaves."""
        return self.behave(predict_labels(self.teacher, features))

    def teacher_accuracy(self, test: LabeledData) -> float:
        """Simulation-only diagnostic: the teacher's accuracy on the test set (not a release)."""
        return float(np.mean(predict_labels(self.teacher, test.features) == test.labels))

    # --- Behaviour (simulation: bad and malicious teachers) ---------------------------------

    def set_behaviour(self, behaviour: Behaviour) -> None:
        """Simulation: make this agent ``behaviour`` (honest, random, constant, adversarial).

        Its behaviour stream is seeded from the agent's seed, apart from its privacy noise.
        """
        self._behaviour = behaviour
        self._behaviour_rng = np.random.default_rng(np.random.SeedSequence([self._seed, 0xBE4A]))

    def behave(self, predictions: np.ndarray) -> np.ndarray:
        """The labels (Q,) this agent votes given its teacher's ``predictions`` (Q,).

        Honest agents vote their predictions; bad ones post-process them
        (:class:`fedvote.agents.behaviour.Behaviour`). A transport that predicts with every
        teacher at once hands each agent its own predictions through here.
        """
        if self._behaviour.honest:
            return np.asarray(predictions, dtype=np.int64)
        return self._behaviour.act(predictions, self._num_classes, self._behaviour_rng)
