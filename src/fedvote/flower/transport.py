"""Flower transport: each agent is a Flower ``ClientApp`` on its own SuperNode.

:class:`FlowerTransport` implements :class:`~fedvote.transport.base.Transport` on top of a
Flower ``Grid`` inside a ``ServerApp`` (:mod:`fedvote.flower.app`), so PATE-FL and
Private-kNN-FL run unchanged. Messages, one round each:

* ``train.register`` — first, before anything is trained: each agent answers with its id,
  record count, its file's fingerprint and input features; a node of another federation or
  split, or a duplicate, is refused here (:class:`RegistrationRefused`).
* ``train.teacher`` — every agent trains its teacher on its private data (Algorithm 1,
  line 2); the reply is its agent id and record count (public metadata).
* ``train.knn`` — the server ships φ (a ``torch.export`` program, never pickled code);
  each agent embeds its records and answers with its k (Algorithm 2).
* ``train`` (Flower's default train message, through ``SecAggPlusWorkflow`` and the
  agents' ``secaggplus_mod``) — query indices into the public pool go down; each agent
  returns its vote plus its own noise share N(0, σ²/t), clipped and quantised inside
  SecAgg+; the server unmasks only the sum.

Dropouts: an agent that misses a message is dropped for the rest of the run. A vote
round with fewer than t responders is never unmasked (the Shamir threshold is t), so
nothing is released and :func:`fedvote.methods.voting.vote_in_batches` voids its charge.
"""

from __future__ import annotations

import io
import json
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, cast

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.common import Code, FitIns, FitRes, Parameters, Status, parameters_to_ndarrays
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.compat import LegacyContext
from flwr.server.compat.grid_client_proxy import GridClientProxy
from flwr.server.strategy import Strategy
from flwr.server.workflow import SecAggPlusWorkflow
from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD
from flwr.server.workflow.constant import Key as WorkflowKey
from flwr.server.workflow.secure_aggregation.secaggplus_workflow import WorkflowState
from flwr.serverapp import Grid
from torch import nn

from fedvote.errors import ConfigError
from fedvote.flower.protocol import KNN_MESSAGE, RECORD, REGISTER_MESSAGE, TEACHER_MESSAGE
from fedvote.flower.secagg import DEFAULT_CLIP_SIGMAS, SecAggSettings, secagg_privacy, secagg_settings
from fedvote.models.features import FeatureExtractor, fit_feature_extractor
from fedvote.models.training import TrainingConfig
from fedvote.progress import NO_PROGRESS, Progress
from fedvote.results import PrivacyReport
from fedvote.transport.base import Transport, VoteSum
from fedvote.transport.capabilities import KnnVotes, TeacherVotes


class RegistrationRefused(ConfigError):
    """A node was refused when it registered (another federation's or split's file, a duplicate).

    Raised before anything is trained, released or charged; the ServerApp reports it in one line.
    """


class RunFailed(RuntimeError):
    """A deployed run that ended without a result the way a deployment can, not by a bug.

    ``kind`` says which: ``"connect"`` (fewer than N agents connected in time), ``"silent"`` (no
    agent answered a message), ``"unreleased"`` (no vote round reached t). The message states the
    cause; the ServerApp adds what to do, which depends on how the run was started, and prints
    both in one line (:func:`fedvote.flower.app.failure_line`). ``trained``: whether agents may
    have trained (or embedded) anything before it.
    """

    def __init__(self, kind: str, cause: str, *, trained: bool) -> None:
        super().__init__(cause)
        self.kind = kind
        self.cause = cause
        self.trained = trained


@dataclass
class RoundRecord:
    """One vote round as the server saw it: who was asked, who answered, what was released."""

    round: int
    kind: str
    queries: int
    asked: int
    responders: int
    released: bool
    sums: list[list[float]] | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready record (``sums`` only when the transport records votes)."""
        data = asdict(self)
        if self.sums is None:
            del data["sums"]
        return data


@dataclass
class _Agents:
    """The live agents: Flower node id → fedvote agent id, and what they reported."""

    agent_of: dict[int, int] = field(default_factory=dict)
    records: dict[int, int] = field(default_factory=dict)  # agent id → n_i
    dropped: list[int] = field(default_factory=list)  # agent ids, in the order they dropped


class FlowerTransport(Transport, TeacherVotes, KnnVotes):
    """Agents on Flower SuperNodes, vote sums through SecAgg+: teacher and kNN votes only.

    It declares no :class:`~fedvote.transport.capabilities.SimulationDiagnostics`: teachers
    never leave their nodes, and their accuracies and clean votes exist nowhere.

    Parameters
    ----------
    grid : flwr.serverapp.Grid
        The ``ServerApp``'s grid (deployment or simulation: the same code).
    context : flwr.app.Context
        The ``ServerApp``'s context (SecAgg+ keeps its round state there).
    num_agents : int
        N, the number of agents the run expects; the first round waits for N nodes.
    num_classes : int
        C.
    fingerprint : str
        The federation's fingerprint; an agent whose data file names another is refused.
    input_features : str
        The input features the server's pool is seen through (its file's); an agent whose file
        sees its records through others (a file of another split of the same federation) is
        refused when it registers, before anything is trained or charged.
    round_timeout : float
        Seconds to wait for replies in each SecAgg+ stage of a vote round; an agent that
        has not answered by then has dropped out.
    train_timeout : float
        The same for the rounds that train teachers or embed records (slower: each
        agent trains a model).
    connect_timeout : float
        Seconds to wait for N nodes to connect before the first round.
    clip_sigmas : float
        k in the SecAgg+ clipping range c = 1 + k·σ/√t (:mod:`.flower_secagg`).
    record_votes : bool
        Keep every released vote sum in :attr:`rounds` (for tests and audits; they are
        released values).
    report : callable or None
        Receives one line per round (the ServerApp prints them into Flower's run log).
    secure_noise : bool
        The agents add exact discrete Gaussian shares to integer votes, SecAgg+ sums the
        integers unrounded (step 1, :func:`~.flower_secagg.secagg_settings` ``integer``), and
        the sums are exact integers. Default False.

    """

    def __init__(
        self,
        grid: Grid,
        context: Context,
        *,
        num_agents: int,
        num_classes: int,
        fingerprint: str = "",
        input_features: str = "none",
        round_timeout: float = 120.0,
        train_timeout: float = 600.0,
        connect_timeout: float = 300.0,
        clip_sigmas: float = DEFAULT_CLIP_SIGMAS,
        record_votes: bool = False,
        report: Callable[[str], None] | None = None,
        secure_noise: bool = False,
    ) -> None:
        super().__init__()
        if num_agents < 2:
            raise ConfigError("agents", f"a Flower federation needs at least 2 agents, got {num_agents}")
        for name, seconds in (
            ("round_timeout", round_timeout),
            ("train_timeout", train_timeout),
            ("connect_timeout", connect_timeout),
        ):
            if not (math.isfinite(seconds) and seconds > 0):
                raise ConfigError(name, f"must be a finite number of seconds > 0, got {seconds}")
        self._grid = _WatchedGrid(grid)
        self._context = context
        self._num_agents = num_agents
        self._num_classes = num_classes
        self._fingerprint = fingerprint
        self._input_features = input_features
        self._round_timeout = float(round_timeout)
        self._train_timeout = float(train_timeout)
        self._connect_timeout = float(connect_timeout)
        self._clip_sigmas = float(clip_sigmas)
        self._record_votes = record_votes
        self._report = report or (lambda line: None)
        self._agents = _Agents()
        self._vote_round = 0
        self.rounds: list[RoundRecord] = []
        self.secagg: SecAggSettings | None = None
        self._secure_noise = secure_noise

    @property
    def num_agents(self) -> int:
        """Number of agents N the run was planned for."""
        return self._num_agents

    @property
    def dropped_agents(self) -> list[int]:
        """Agent ids that dropped out, in order."""
        return list(self._agents.dropped)

    def record_counts(self) -> np.ndarray:
        """Record counts n_i the live agents reported, by agent id (public metadata)."""
        return np.array([n for _, n in sorted(self._agents.records.items())], dtype=np.int64)

    def stated_privacy(self, report: PrivacyReport) -> tuple[PrivacyReport, dict[str, Any]]:
        """The Gaussian mechanism's privacy plus SecAgg+'s clipping and rounding slack; the rounds' record.

        Every finite ε is raised by the slack of what each agent released (released queries ×
        classes coordinates; :func:`~fedvote.flower.secagg.secagg_privacy`) when at least
        one round went through SecAgg+.
        """
        released = [r for r in self.rounds if r.released]
        coordinates = sum(r.queries for r in released) * self._num_classes  # per agent
        secagg: dict[str, Any] = {}
        if self.secagg is not None:
            report, secagg = secagg_privacy(report, self.secagg, coordinates)
        return report, {
            "transport": "flower",
            "flower": {
                "rounds": [r.as_dict() for r in self.rounds],
                "released_rounds": len(released),
                "refused_rounds": len(self.rounds) - len(released),
                "dropped_agents": self.dropped_agents,
                "secagg": secagg,
            },
        }

    # --- Teachers ----------------------------------------------------------------------

    def train_teachers(self, config: TrainingConfig, progress: Progress = NO_PROGRESS) -> None:
        """Every agent trains its teacher on its node; agents that do not answer drop out."""
        content = ConfigRecord({"training": json.dumps(asdict(config))})
        self._ensure_registered()
        with progress.step("training teachers (on the agents' nodes)", total=self.num_agents) as bar:
            replies = self._broadcast(TEACHER_MESSAGE, content, first=False)
            bar.advance(len(replies))
        self._register(replies)
        self._report(f"teachers trained on {len(self._agents.agent_of)} of {self.num_agents} agents")

    # --- Private-kNN-FL ----------------------------------------------------------------

    def prepare_knn(
        self, extractor: FeatureExtractor, *, k: int | None = None, k_fraction: float = 0.05
    ) -> np.ndarray:
        """Ship φ to every agent, which embeds its records; returns the live agents' ks."""
        content = ConfigRecord(
            {
                "phi": export_extractor(extractor),
                "normalize": extractor.normalize,
                "k": -1 if k is None else int(k),
                "k-fraction": float(k_fraction),
            }
        )
        self._ensure_registered()
        replies = self._broadcast(KNN_MESSAGE, content, first=False)
        self._register(replies)
        ks = np.array(
            [_int(reply.content.config_records[RECORD]["k"]) for reply in replies.values()], dtype=np.int64
        )  # (live agents,)
        # the extractor down, each agent's k up; the round itself was counted by _broadcast
        self.communication.count(down=len(replies) * extractor.num_floats, up=len(replies), rounds=0)
        self._report(f"kNN prepared on {len(replies)} agents, k from {ks.min()} to {ks.max()}")
        return ks

    # --- Votes -------------------------------------------------------------------------

    def vote_sum(self, query_indices: np.ndarray, noise_std: float, min_responders: int) -> VoteSum | None:
        """Sum of the live agents' noisy one-hot votes through SecAgg+; None below t responders."""
        return self._secure_vote("pate", query_indices, noise_std, min_responders)

    def knn_vote_sum(
        self, query_indices: np.ndarray, noise_std: float, min_responders: int
    ) -> VoteSum | None:
        """Sum of the live agents' noisy kNN votes through SecAgg+; None below t responders."""
        return self._secure_vote("knn", query_indices, noise_std, min_responders)

    def _secure_vote(
        self, kind: str, query_indices: np.ndarray, noise_std: float, min_responders: int
    ) -> VoteSum | None:
        queries = np.asarray(query_indices, dtype=np.int64).reshape(-1)  # (Q,)
        nodes = sorted(self._agents.agent_of)
        self._vote_round += 1
        self.communication.count(down=len(nodes) * queries.shape[0])  # the votes up once released
        record = RoundRecord(self._vote_round, kind, int(queries.shape[0]), len(nodes), 0, False)
        self.rounds.append(record)
        if len(nodes) < min_responders:  # too few agents left: ask nobody, release nothing
            self._report(
                f"vote round {record.round}: {len(nodes)} live agents < t = {min_responders}; not released"
            )
            return None
        settings = secagg_settings(
            noise_std,
            self._num_agents,
            min_responders,
            clip_sigmas=self._clip_sigmas,
            integer=self._secure_noise,
        )
        self.secagg = settings
        round_ = _VoteRound(
            nodes=nodes,
            grid=self._grid,
            instructions=FitIns(
                Parameters(tensors=[], tensor_type="numpy.ndarray"),
                {
                    "kind": kind,
                    "queries": queries.tobytes(),
                    "noise-std": float(noise_std),
                    "secure-noise": self._secure_noise,
                    # t: an agent assuming h honest shares (--assume-honest) refuses t < h
                    "min-responders": int(min_responders),
                },
            ),
        )
        context = LegacyContext(context=self._context, strategy=round_)
        context.state.config_records[MAIN_CONFIGS_RECORD] = ConfigRecord(
            {WorkflowKey.CURRENT_ROUND: self._vote_round}
        )
        context.state.array_records[MAIN_PARAMS_RECORD] = ArrayRecord()
        workflow = _SecAggPlus(
            num_shares=1.0,  # every agent holds a share of every other's keys
            reconstruction_threshold=settings.reconstruction_threshold,
            max_weight=1.0,  # each agent weighs 1: the "weighted average" is the mean
            clipping_range=settings.clipping_range,
            quantization_range=settings.quantization_range,
            modulus_range=settings.modulus_range,
            timeout=self._round_timeout,
        )
        self._grid.missing.clear()
        workflow(self._grid, context)
        self._drop(self._grid.missing)
        # the agents whose masked vote reached the server; Flower reports contributors only for a
        # round it unmasked, so a refused round is counted at its collect stage
        record.responders = len(round_.contributors) if round_.mean is not None else workflow.masked_votes
        if round_.mean is None or record.responders < min_responders:
            answered, t = record.responders, min_responders
            why = (
                f"{answered} responders < t = {t}"
                if answered < t
                else f"{answered} responders, too few stayed to unmask the sum (t = {t})"
            )
            self._report(f"vote round {record.round}: {why}; not released")
            return None
        sums = round_.mean * record.responders  # (Q, C): SecAgg+ returns the mean over contributors
        if self._secure_noise:
            sums = exact_integer_sums(sums)
        self.communication.count(up=record.responders * queries.shape[0] * self._num_classes, rounds=0)
        record.released = True
        if self._record_votes:
            record.sums = sums.tolist()
        self._report(
            f"vote round {record.round}: {record.responders} of {len(nodes)} agents, "
            f"{queries.shape[0]} queries released"
        )
        return VoteSum(sums=sums, responders=record.responders)

    # --- Plumbing ----------------------------------------------------------------------

    def _ensure_registered(self) -> None:
        """Once, before the first message that trains anything: every node says which agent it runs.

        Every check of :meth:`_register` (federation, input features, duplicates, ids) is made
        on these replies, so a node of another split is refused before any agent trains. The
        round carries only public metadata and is not counted as a communication round.
        """
        if self._agents.agent_of:
            return
        replies = self._broadcast(REGISTER_MESSAGE, ConfigRecord({}), first=True, count=False)
        self._register(replies)

    def _broadcast(
        self, message_type: str, content: ConfigRecord, *, first: bool, count: bool = True
    ) -> dict[int, Message]:
        """Send ``content`` to every live agent (every node on the first round); good replies."""
        if first and not self._agents.agent_of:
            nodes = self._wait_for_nodes()
        else:
            nodes = sorted(self._agents.agent_of)
        messages = [
            Message(RecordDict({RECORD: content}), dst_node_id=node, message_type=message_type)
            for node in nodes
        ]
        self._grid.missing.clear()
        replies = self._grid.send_and_receive(messages, timeout=self._train_timeout)
        if count:
            self.communication.count()  # one round; its callers count what it carried
        good = {reply.metadata.src_node_id: reply for reply in replies if not reply.has_error()}
        for reply in replies:
            if reply.has_error():
                reason = " ".join(str(reply.error.reason).split())
                self._report(f"node {reply.metadata.src_node_id} failed: {reason[:300]}")
        if self._agents.agent_of:
            self._drop(self._grid.missing)
        if not good:
            cause = (
                f"every agent answered the {message_type} message with an error (the lines above say which)"
                if replies
                else f"no agent answered the {message_type} message within {self._train_timeout:g} s"
            )
            raise RunFailed("silent", cause, trained=message_type != REGISTER_MESSAGE)
        return good

    def _wait_for_nodes(self) -> list[int]:
        deadline = time.monotonic() + self._connect_timeout
        while True:
            nodes = sorted(self._grid.get_node_ids())
            if len(nodes) >= self._num_agents:
                return nodes
            if time.monotonic() > deadline:
                connected = f"only {len(nodes)} of {self._num_agents} agents connected"
                raise RunFailed("connect", f"{connected} within {self._connect_timeout:g} s", trained=False)
            time.sleep(0.5)

    def _register(self, replies: dict[int, Message]) -> None:
        """Learn which agent each node runs; refuse duplicates and foreign data files."""
        agent_of: dict[int, int] = {}
        for node, reply in replies.items():
            answer = reply.content.config_records[RECORD]
            agent_id = _int(answer["agent-id"])
            if self._fingerprint and answer["fingerprint"] != self._fingerprint:
                raise RegistrationRefused(
                    "data",
                    f"agent {agent_id}'s data file belongs to federation {answer['fingerprint']!s}, "
                    f"not {self._fingerprint}",
                )
            theirs = str(answer.get("input-features", "none"))  # an agent of older fedvote: none
            if theirs != self._input_features:
                raise RegistrationRefused(
                    "data",
                    f"agent {agent_id}'s data file sees its records through input features {theirs!r}, "
                    f"the server's through {self._input_features!r}: give every node the files of one split",
                )
            if agent_id in agent_of.values():
                raise RegistrationRefused("data", f"two nodes run agent {agent_id}")
            if not 0 <= agent_id < self._num_agents:
                raise RegistrationRefused("data", f"agent id {agent_id} outside 0..{self._num_agents - 1}")
            agent_of[node] = agent_id
            self._agents.records[agent_id] = _int(answer["records"])
        for node, agent_id in self._agents.agent_of.items():
            if node not in agent_of:
                self._agents.dropped.append(agent_id)
        self._agents.agent_of = agent_of

    def _drop(self, nodes: Iterable[int]) -> None:
        for node in sorted(set(nodes)):
            agent_id = self._agents.agent_of.pop(node, None)
            if agent_id is not None:
                self._agents.dropped.append(agent_id)
                self._report(f"agent {agent_id} (node {node}) dropped out")


class _SecAggPlus(SecAggPlusWorkflow):
    """Flower's SecAgg+ workflow, forgetting agents that drop out before sharing their keys.

    It also counts the masked votes its collect stage received (:attr:`masked_votes`): a round
    that is not unmasked reaches no ``aggregate_fit``, which is where the contributors are known.

    Flower 1.41 keeps every agent sampled at the setup stage in the set it later calls
    dropped, and its unmask stage asks the survivors for key shares of those agents —
    shares an agent that never finished the share-keys stage did not make — and
    rebuilds pairwise masks with them, so the round fails. Such an agent has no mask in
    anyone's vector (agents mask only with the peers whose shares they received), so
    it is simply not part of the round: after the share-keys stage the sampled agents
    and everyone's neighbours are those that shared their keys.
    """

    masked_votes = 0  # agents whose masked vote the collect stage received (set by that stage)

    def collect_masked_vectors_stage(self, grid: Grid, context: LegacyContext, state: WorkflowState) -> bool:
        """Flower's collect stage; then note how many masked votes it received."""
        proceed = super().collect_masked_vectors_stage(grid, context, state)
        self.masked_votes = len(state.active_node_ids)
        return proceed

    def share_keys_stage(self, grid: Grid, context: LegacyContext, state: WorkflowState) -> bool:
        """Flower's share-keys stage; then forget the agents that did not share their keys."""
        proceed = super().share_keys_stage(grid, context, state)
        shared = set(state.active_node_ids)
        state.sampled_node_ids = shared
        neighbours = state.nid_to_neighbours
        state.nid_to_neighbours = {node: neighbours[node] & shared for node in shared}
        return proceed


class _VoteRound(Strategy):
    """The Flower ``Strategy`` SecAgg+ asks for one vote round: fixed nodes, one instruction.

    ``SecAggPlusWorkflow`` calls :meth:`configure_fit` for the participants and
    :meth:`aggregate_fit` with the unmasked mean; nothing else is used.
    """

    def __init__(self, *, nodes: list[int], grid: Grid, instructions: FitIns) -> None:
        self._nodes = nodes
        self._grid = grid
        self._instructions = instructions
        self.mean: np.ndarray | None = None
        self.contributors: list[int] = []

    def initialize_parameters(self, client_manager: ClientManager) -> Parameters | None:
        """Nothing to initialise."""
        return None

    def configure_fit(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, FitIns]]:
        """Every live agent votes on the same queries."""
        run_id = self._grid.run.run_id
        return [(GridClientProxy(node, self._grid, run_id), self._instructions) for node in self._nodes]

    def aggregate_fit(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, FitRes]],
        failures: list[tuple[ClientProxy, FitRes] | BaseException],
    ) -> tuple[Parameters | None, dict[str, bool | bytes | float | int | str]]:
        """Keep the unmasked mean (every result carries it) and who contributed."""
        self.contributors = [int(proxy.node_id) for proxy, _ in results]  # type: ignore[attr-defined]
        if results:
            (mean,) = parameters_to_ndarrays(results[0][1].parameters)
            self.mean = np.asarray(mean, dtype=np.float64)
        return None, {}

    def configure_evaluate(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, Any]]:
        """No evaluation rounds."""
        return []

    def aggregate_evaluate(
        self, server_round: int, results: list[Any], failures: list[Any]
    ) -> tuple[float | None, dict[str, bool | bytes | float | int | str]]:
        """No evaluation rounds."""
        return None, {}

    def evaluate(
        self, server_round: int, parameters: Parameters
    ) -> tuple[float, dict[str, bool | bytes | float | int | str]] | None:
        """No centralised evaluation."""
        return None


class _WatchedGrid(Grid):
    """A Grid that notes which destinations did not answer at all (those have dropped out).

    An agent that answers with an error is alive: it sits out this round only.
    """

    def __init__(self, grid: Grid) -> None:
        self._inner = grid
        self.missing: set[int] = set()

    def set_run(self, run: Any) -> None:  # noqa: D102
        self._inner.set_run(run)

    @property
    def run(self) -> Any:  # noqa: D102
        return self._inner.run

    def create_message(  # noqa: D102
        self,
        content: RecordDict,
        message_type: str,
        dst_node_id: int,
        group_id: str,
        ttl: float | None = None,
    ) -> Message:
        return self._inner.create_message(content, message_type, dst_node_id, group_id, ttl)

    def get_node_ids(self) -> Iterable[int]:  # noqa: D102
        return self._inner.get_node_ids()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:  # noqa: D102
        return self._inner.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:  # noqa: D102
        return self._inner.pull_messages(message_ids)

    def send_and_receive(  # noqa: D102
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        sent = list(messages)
        replies = list(self._inner.send_and_receive(sent, timeout=timeout))
        answered = {reply.metadata.src_node_id for reply in replies}
        self.missing |= {message.metadata.dst_node_id for message in sent} - answered
        return replies


# --- φ over the wire -------------------------------------------------------------------


class _PhiModule(nn.Module):
    def __init__(self, extractor: FeatureExtractor) -> None:
        super().__init__()
        self._extractor = extractor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._extractor._map(x).reshape(x.shape[0], -1)


def export_extractor(extractor: FeatureExtractor) -> bytes:
    """φ (without its normalisation) as a ``torch.export`` program: a graph, not pickled code."""
    example = torch.zeros((2, *extractor.input_shape), dtype=torch.float32)
    batch = torch.export.Dim("batch", min=1)
    program = torch.export.export(_PhiModule(extractor), (example,), dynamic_shapes=({0: batch},))
    buffer = io.BytesIO()
    torch.export.save(program, buffer)
    return buffer.getvalue()


def load_extractor(data: bytes, public_features: np.ndarray, *, normalize: bool) -> FeatureExtractor:
    """The φ :func:`export_extractor` wrote, applied to examples shaped like ``public_features``."""
    module = torch.export.load(io.BytesIO(data)).module()
    return fit_feature_extractor("module", public_features, module=module, normalize=normalize)


def _int(value: object) -> int:
    """An int a ConfigRecord holds (its values are typed as a union)."""
    return int(cast(int, value))


def exact_integer_sums(sums: np.ndarray) -> np.ndarray:
    """The integer vote sums (Q, C) that SecAgg+ returned as mean × contributors, exactly.

    With secure noise every agent's value is an integer and SecAgg+ adds them exactly; only
    Flower's final division by the number of contributors (and fedvote's multiplication
    back) is floating point, off by a few ulps. This recovers the exact integer sum; it is
    not a rounding of the released value (which is that integer). A sum further than
    10⁻⁶·max(1, |sum|) from an integer means the protocol did not add integers (a wrap or
    a real-valued share): refused, nothing is released.
    """
    exact = np.rint(sums)
    if np.any(np.abs(sums - exact) > 1e-6 * np.maximum(1.0, np.abs(exact))):
        raise RuntimeError("SecAgg+ returned non-integer vote sums under secure noise; nothing released")
    return exact


def status_ok() -> Status:
    """The FitRes status of a successful vote."""
    return Status(code=Code.OK, message="")
