"""A vote round's responders when SecAgg+ does not release it; registration before training (no Flower)."""

import numpy as np
import pytest
from flwr.app import ConfigRecord, Context, RecordDict

import fedvote.flower.transport as transport_module
from fedvote.flower.transport import FlowerTransport, _SecAggPlus


class _Grid:
    """A grid nobody calls: the vote round's workflow is replaced below."""

    missing: set[int] = set()


def _transport(lines, masked_votes):
    class Workflow:  # the collect stage received ``masked_votes`` masked votes, then unmasking failed
        def __init__(self, **kwargs):
            self.masked_votes = masked_votes

        def __call__(self, grid, context):
            return None  # no aggregate_fit: the round's mean stays None

    transport = FlowerTransport(_Grid(), Context(1, 0, {}, RecordDict(), {}), num_agents=3, num_classes=2,
                                report=lines.append)
    transport._agents.agent_of = {11: 0, 12: 1, 13: 2}
    transport._grid = transport_module._WatchedGrid(_Grid())
    return transport, Workflow


def test_a_refused_round_counts_the_masked_votes_that_reached_the_server(monkeypatch):
    lines: list[str] = []
    transport, workflow = _transport(lines, masked_votes=2)
    monkeypatch.setattr(transport_module, "_SecAggPlus", workflow)
    assert transport.vote_sum(np.arange(4), 1.0, min_responders=3) is None
    assert transport.rounds[-1].responders == 2 and not transport.rounds[-1].released
    assert lines[-1] == "vote round 1: 2 responders < t = 3; not released"  # was "0 responders"


def test_a_round_answered_by_t_but_not_unmasked_says_so(monkeypatch):
    lines: list[str] = []
    transport, workflow = _transport(lines, masked_votes=3)
    monkeypatch.setattr(transport_module, "_SecAggPlus", workflow)
    assert transport.vote_sum(np.arange(4), 1.0, min_responders=3) is None
    assert lines[-1] == "vote round 1: 3 responders, too few stayed to unmask the sum (t = 3); not released"


def test_the_collect_stage_counts_the_masked_votes_it_received(monkeypatch):
    from flwr.server.workflow import SecAggPlusWorkflow

    class State:
        active_node_ids = {11, 13}

    monkeypatch.setattr(SecAggPlusWorkflow, "collect_masked_vectors_stage", lambda self, g, c, s: False)
    workflow = _SecAggPlus(num_shares=1.0, reconstruction_threshold=3, clipping_range=8.0,
                           quantization_range=16, modulus_range=2**32)
    assert workflow.collect_masked_vectors_stage(None, None, State()) is False
    assert workflow.masked_votes == 2


# --- registration: a node of another split is refused before any agent trains --------------------


class _Reply:
    def __init__(self, node, answer):
        self.metadata = type("Metadata", (), {"src_node_id": node})()
        self.content = type("Content", (), {"config_records": {"fedvote": answer}})()

    def has_error(self):
        return False


class _RegisteringGrid:
    """Three nodes; node 13 runs a file seen through other input features. Notes each message type."""

    def __init__(self):
        self.sent: list[str] = []

    def get_node_ids(self):
        return [11, 12, 13]

    def send_and_receive(self, messages, *, timeout=None):
        messages = list(messages)
        self.sent += [message.metadata.message_type for message in messages]
        return [_Reply(m.metadata.dst_node_id, self._answer(m.metadata.dst_node_id)) for m in messages]

    @staticmethod
    def _answer(node):
        features = "patch" if node == 13 else "none"
        return {"agent-id": node - 11, "records": 5, "fingerprint": "fp", "input-features": features}


class _Message:
    """What ``_broadcast`` builds, without Flower's run identity (none outside a ServerApp)."""

    def __init__(self, content, *, dst_node_id, message_type):
        self.content = content
        self.metadata = type("Metadata", (), {"dst_node_id": dst_node_id, "message_type": message_type})()


def test_a_node_of_another_split_is_refused_at_registration_before_any_training(monkeypatch):
    from fedvote.flower.transport import RegistrationRefused
    from fedvote.models.training import TrainingConfig

    monkeypatch.setattr(transport_module, "Message", _Message)
    grid = _RegisteringGrid()
    transport = FlowerTransport(grid, Context(1, 0, {}, RecordDict(), {}), num_agents=3, num_classes=2,
                                fingerprint="fp", input_features="none", connect_timeout=5.0)
    with pytest.raises(RegistrationRefused, match="agent 2's data file sees its records through input features"):
        transport.train_teachers(TrainingConfig())
    assert grid.sent == ["train.register"] * 3  # no train.teacher message left the server
    assert transport.communication.rounds == 0  # registration is not a communication round


def test_the_serverapp_reports_a_registration_refusal_in_one_line(monkeypatch, capsys):
    import fedvote.flower.app as app_module
    from fedvote.flower.transport import RegistrationRefused

    def refused(settings, grid, context):
        raise RegistrationRefused("data", "agent 2's data file belongs to federation x, not y")

    monkeypatch.setattr(app_module, "run_on_flower", refused)
    context = Context(1, 0, {}, RecordDict(), {"config": "c.json", "server-data": "s.npz", "out": "out"})
    app_module._serve(None, context)
    out = capsys.readouterr().out.strip()
    assert out == ("fedvote: error: data: agent 2's data file belongs to federation x, not y; "
                   "nothing was trained, released or charged")


# --- expected run failures: one line naming the cause and what to do, never a traceback ------------


class _EmptyGrid:
    """No node ever connects; a message gets no reply."""

    def get_node_ids(self):
        return []

    def send_and_receive(self, messages, *, timeout=None):
        return []


def _context(**run_config):
    return Context(1, 0, {}, RecordDict(), {"config": "c.json", "server-data": "s.npz", "out": "out", **run_config})


def test_too_few_agents_connecting_is_a_typed_failure_before_anything_trains():
    from fedvote.flower.transport import RunFailed

    transport = FlowerTransport(_EmptyGrid(), _context(), num_agents=3, num_classes=2, connect_timeout=0.01)
    with pytest.raises(RunFailed) as failure:
        transport._ensure_registered()
    assert failure.value.kind == "connect" and not failure.value.trained
    assert str(failure.value) == "only 0 of 3 agents connected within 0.01 s"


def test_no_agent_answering_is_a_typed_failure(monkeypatch):
    from fedvote.flower.transport import RunFailed

    monkeypatch.setattr(transport_module, "Message", _Message)
    transport = FlowerTransport(_EmptyGrid(), _context(), num_agents=3, num_classes=2, train_timeout=5.0)
    transport._agents.agent_of = {11: 0, 12: 1, 13: 2}  # registered, then silent
    with pytest.raises(RunFailed) as failure:
        transport._broadcast("train.teacher", ConfigRecord({}), first=False)
    assert failure.value.kind == "silent" and failure.value.trained
    assert str(failure.value) == "no agent answered the train.teacher message within 5 s"


@pytest.mark.parametrize(
    ("simulation", "remedy"),
    [(False, "fedvote deploy server --connect-timeout"), (True, "--cpus-per-agent")],
)
def test_the_serverapp_reports_a_run_failure_in_one_line_with_what_to_do(monkeypatch, capsys, simulation, remedy):
    import fedvote.flower.app as app_module
    from fedvote.flower.transport import RunFailed

    def failed(settings, grid, context):
        raise RunFailed("connect", "only 0 of 3 agents connected within 600 s", trained=False)

    monkeypatch.setattr(app_module, "run_on_flower", failed)
    app_module._serve(None, _context(**({"agent-data": "fed/agent-{partition-id}.npz"} if simulation else {})))
    out = capsys.readouterr().out
    assert len(out.strip().splitlines()) == 1 and "Traceback" not in out
    assert out.startswith("fedvote: error: only 0 of 3 agents connected within 600 s: ")
    assert remedy in out and out.strip().endswith("nothing was trained, released or charged")


def test_a_bug_in_the_serverapp_keeps_its_traceback(monkeypatch):
    import fedvote.flower.app as app_module

    def bug(settings, grid, context):
        raise RuntimeError("a bug")

    monkeypatch.setattr(app_module, "run_on_flower", bug)
    with pytest.raises(RuntimeError, match="a bug"):
        app_module._serve(None, _context())


@pytest.mark.parametrize("released", [False, True])
def test_a_run_whose_every_vote_round_was_refused_is_a_typed_failure(monkeypatch, capsys, released):
    import fedvote.flower.app as app_module
    import fedvote.runner as runner_module
    from fedvote.flower.transport import RoundRecord, RunFailed

    def no_batch(method, server, transport, ledger):
        raise RuntimeError("no query batch reached the minimum number of responders")

    monkeypatch.setattr(runner_module, "execute", no_batch)
    transport = type("Transport", (), {})()
    transport.rounds = [RoundRecord(1, "pate", 50, 3, 2, released), RoundRecord(2, "pate", 50, 2, 2, False)]
    method = type("Method", (), {"min_responders": 3})()
    if released:  # a round went through: not this failure, the error stays as it was
        with pytest.raises(RuntimeError, match="no query batch") as error:
            app_module._executed(method, None, transport, None)
        assert not isinstance(error.value, RunFailed)
        return
    with pytest.raises(RunFailed) as failure:
        app_module._executed(method, None, transport, None)
    assert str(failure.value) == "no vote round was released: all 2 had fewer than t = 3 agents' votes (the last 2)"
    line = app_module.failure_line(failure.value, simulation=False)
    assert "--round-timeout" in line and "privacy.min_responders" in line
