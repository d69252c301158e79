"""A vote round's count of responders when SecAgg+ does not release it (no Flower processes)."""

import numpy as np
from flwr.app import Context, RecordDict

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
